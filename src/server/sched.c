/* The slots and the engine thread. Requests wait in a bounded queue; a free slot takes the next
 * one (the free slot whose cached tokens share the longest prefix with its prompt, so that a
 * follow-up turn reuses them), prefills it, and from then on every round steps all busy slots
 * together with sd_spec_step_many: their drafts in lockstep and their verify passes in ONE
 * batched target forward. Tokens become text (held back where a stop string or a UTF-8 character
 * may still be completing) and go out as stream chunks or, at the end, one response. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/io.h"
#include "server/internal.h"

/* ---- requests ------------------------------------------------------------------------------ */

static void live_remove(srv *s, srv_req *r) {
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else if (s->live == r) s->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    r->live_prev = r->live_next = NULL;
}

void srv_req_unref_locked(srv_req *r) {
    if (--r->refs > 0) return;
    srv_gen_free(&r->g);
    srv_text_free(&r->text);
    srv_buf_free(&r->out);
    free(r->body);
    free(r);
}

int srv_submit(srv *s, srv_gen *g, struct MHD_Connection *conn, srv_req **out, srv_err *e) {
    *out = NULL;
    srv_req *r = calloc(1, sizeof *r);
    if (!r) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    const int free_slots = s->n_slots - s->n_busy;
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        free(r);
        srv_err_set(e, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
        return -1;
    }
    if (s->q_len >= s->p.queue_max + free_slots) {
        pthread_mutex_unlock(&s->mu);
        free(r);
        srv_err_set(e, 429, "rate_limit_error", NULL, "queue_full",
                    "all %d slots are busy and %d requests are waiting (the queue's limit): retry later", s->n_slots,
                    s->q_len - free_slots);
        return -1;
    }
    r->g = *g;
    memset(g, 0, sizeof *g);
    srv_make_id(r->id, sizeof r->id, r->g.chat);
    r->created = (long)time(NULL);
    r->t_arrival = sd_now();
    r->refs = 2 + r->g.stream; /* the connection, the queue (then the slot), the stream response */
    r->conn = conn;
    r->slot = -1;
    r->live_next = s->live;
    if (s->live) s->live->live_prev = r;
    s->live = r;
    if (s->q_tail) s->q_tail->q_next = r;
    else s->q_head = r;
    s->q_tail = r;
    s->q_len++;
    s->m.requests++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return 0;
}

void srv_req_detach_locked(srv *s, srv_req *r, int completed) {
    r->conn = NULL;
    r->suspended = 0;
    if (!completed) r->cancelled = 1;
    live_remove(s, r);
    srv_req_unref_locked(r);
}

/* ---- finishing ----------------------------------------------------------------------------- */

/* Everything the request still has to say, produced at once: the rest of the text and the final
 * chunk (or the response), or the error. err NULL: finished normally with `reason`. Engine
 * thread, mu not held: the bytes go into `pending` for deliver(). */
static void conclude(srv *s, srv_req *r, const sd_spec *spec, const char *reason, const srv_err *err,
                     srv_buf *pending, int *status, char **body) {
    sd_spec_stats st;
    if (spec) sd_spec_get_stats(spec, &st);
    const srv_outcome oc = {reason, r->g.n_ids, r->n_gen, spec ? st.n_reused : 0, spec ? &st : NULL};
    if (r->g.stream) {
        if (err) {
            srv_sse_error(pending, err);
        } else {
            srv_buf rest = {0};
            if (r->text.piece) srv_text_take(&r->text, 1, &rest);
            srv_sse_chunk(pending, &r->g, r->id, r->created, s->model_name, rest.p, rest.len, 0, &oc);
            if (r->g.include_usage) srv_sse_usage(pending, &r->g, r->id, r->created, s->model_name, &oc);
            srv_buf_free(&rest);
        }
        srv_sse_done(pending);
        *status = 200;
        *body = NULL;
    } else if (err) {
        *status = err->status;
        *body = srv_err_json(err);
    } else {
        *status = 200;
        *body = srv_response_json(&r->g, r->id, r->created, s->model_name, r->text.text.p, r->text.text.len, &oc);
    }
    if (s->p.verbose && spec)
        fprintf(stderr, "serve: %s slot %d: %d prompt tokens (%d cached), %d generated in %.0f ms, %d drafted, %d accepted, %s\n",
                r->id, r->slot, st.n_prompt, st.n_reused, r->n_gen, (sd_now() - r->t_arrival) * 1e3, st.n_drafted,
                st.n_accepted, err ? err->msg : r->cancelled ? "cancelled (the client left)" : reason);
}

/* Hands produced bytes to the connection (mu held): stream bytes are appended; a final response
 * is set. Wakes the connection if it waits. */
static void deliver(srv_req *r, srv_buf *pending, int done, int status, char *body) {
    if (pending->len) srv_buf_put(&r->out, pending->p, pending->len);
    pending->len = 0;
    if (done) {
        r->finished = 1;
        r->status = status;
        free(r->body);
        r->body = body;
    }
    if (r->conn && (pending->oom || r->out.oom)) r->cancelled = 1; /* cannot say it: give up */
    srv_http_wake(r);
}

/* reason: "stop", "length", or NULL for an error (shutdown: the server ended it). mu held. */
static void count_finish(srv *s, const char *reason, int shutdown, int cancelled) {
    if (cancelled) s->m.finished_cancelled++;
    else if (shutdown) s->m.finished_shutdown++;
    else if (!reason) s->m.finished_error++;
    else if (!strcmp(reason, "length")) s->m.finished_length++;
    else s->m.finished_stop++;
}

/* The error a request cut by the server's shutdown ends with (a stream's last event). */
static void shutdown_error(srv_err *e) {
    srv_err_set(e, 503, "unavailable_error", NULL, "server_shutdown",
                "the server shut down before the request finished: retry it");
}

/* ---- slots --------------------------------------------------------------------------------- */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int c = 0;
    while (c < na && c < nb && a[c] == b[c]) c++;
    return c;
}

/* The free slot whose cache shares the longest prefix with the prompt; the least recently used
 * among equals. mu held; engine thread (it alone touches the engines). */
static srv_slot *pick_slot(srv *s, const srv_req *r) {
    srv_slot *best = NULL;
    int best_c = -1;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->req) continue;
        int n = 0;
        const int32_t *h = sd_spec_tokens(sl->spec, &n);
        const int c = common_prefix(h, n, r->g.ids, r->g.n_ids);
        if (c > best_c || (c == best_c && sl->last_used < best->last_used)) {
            best = sl;
            best_c = c;
        }
    }
    return best;
}

/* The request's parameters into its slot's engine, then the prefill. 0, or -1 with *e set. */
static int start(srv *s, srv_slot *sl, srv_err *e) {
    srv_req *r = sl->req;
    sd_spec_cancel(sl->spec); /* a generation a stop string or a departed client left running */
    sl->stop = 0;
    sd_spec_params p = r->g.spec; /* the server's, with the request's draft settings */
    p.n_predict = r->g.max_tokens;
    p.sampling = r->g.sampling;
    p.stop_at_eos = !r->g.ignore_eos;
    p.stop_flag = &sl->stop;
    p.grammar = r->g.grammar; /* the request's, freed with it: the slot's generation is cancelled first */
    p.grammar_vocab = r->g.grammar ? s->gvocab : NULL;
    sd_status st = sd_spec_set_params(sl->spec, &p);
    if (st == SD_OK) st = sd_spec_begin(sl->spec, r->g.ids, r->g.n_ids);
    if (st == SD_OK && srv_text_init(&r->text, s->tok, r->g.ids[r->g.n_ids - 1], r->g.stops, r->g.n_stops) != 0)
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
    if (st != SD_OK) {
        srv_err_set(e, st == SD_ERR_NOMEM ? 503 : 500, "server_error", NULL, NULL, "%s", sd_last_error());
        return -1;
    }
    return 0;
}

/* A round's statistics into the metrics (mu held). */
static void count_round(srv *s, const sd_spec_round *rd) {
    s->m.drafts += rd->n_drafted > 0;
    s->m.draft_tokens += (unsigned long)rd->n_drafted;
    s->m.accepted += (unsigned long)rd->n_accepted;
    for (int i = 0; i < rd->n_accepted && i < SD_MAX_DRAFT; i++) s->m.accepted_at[i]++;
}

/* ---- the engine thread ----------------------------------------------------------------------- */

typedef struct {
    srv_buf pending;    /* bytes for the connection */
    int done, status;   /* the request ends this round */
    char *body;
    const char *reason;
    int error, shutdown;
} slot_out;

/* The tokens a slot emitted this round, through the text into stream chunks. Returns 1 when the
 * request ended (a stop string, or the engine finished). */
static int take_tokens(srv *s, srv_slot *sl, const int32_t *toks, int n, slot_out *o) {
    srv_req *r = sl->req;
    int stop_hit = 0;
    for (int i = 0; i < n && !stop_hit; i++) {
        const int rc = srv_text_push(&r->text, toks[i]);
        r->n_gen++;
        if (rc < 0) {
            srv_err e;
            srv_err_set(&e, 503, "server_error", NULL, NULL, "out of memory for the output text");
            conclude(s, r, sl->spec, NULL, &e, &o->pending, &o->status, &o->body);
            o->done = o->error = 1;
            return 1;
        }
        stop_hit = rc == 1;
    }
    if (r->g.stream && !stop_hit && !sd_spec_done(sl->spec)) {
        srv_buf text = {0};
        if (srv_text_take(&r->text, 0, &text) > 0)
            srv_sse_chunk(&o->pending, &r->g, r->id, r->created, s->model_name, text.p, text.len, 0, NULL);
        srv_buf_free(&text);
    }
    if (!stop_hit && !sd_spec_done(sl->spec)) return 0;
    sd_spec_stats st;
    sd_spec_get_stats(sl->spec, &st);
    if (!stop_hit && st.stop_reason == SD_STOP_CANCELLED) { /* the client left, or the server is stopping */
        srv_err e;
        shutdown_error(&e);
        conclude(s, r, sl->spec, NULL, &e, &o->pending, &o->status, &o->body);
        o->done = o->error = 1;
        o->shutdown = !r->cancelled;
        return 1;
    }
    o->reason = stop_hit || st.stop_reason == SD_STOP_EOS ? "stop" : "length"; /* length: the budget or the context */
    conclude(s, r, sl->spec, o->reason, NULL, &o->pending, &o->status, &o->body);
    o->done = 1;
    return 1;
}

/* A request taken out of the queue ends with an error: its client gone (e NULL: status 499,
 * counted as cancelled) or the server stopping (shutdown_error). mu held. */
static void end_queued(srv *s, srv_req *r, const srv_err *why) {
    srv_err e;
    if (why) e = *why;
    else srv_err_set(&e, 499, "invalid_request_error", NULL, NULL, "the client closed the connection");
    srv_buf pending = {0};
    char *body;
    int status;
    conclude(s, r, NULL, NULL, &e, &pending, &status, &body);
    deliver(r, &pending, 1, status, body);
    srv_buf_free(&pending);
    count_finish(s, NULL, why != NULL, r->cancelled);
    srv_req_unref_locked(r);
}

/* Queued requests whose clients left (closed the connection, or timed out) give up their place:
 * a suspended connection is woken with a last word so that libmicrohttpd closes it. mu held. */
static void drop_departed(srv *s) {
    srv_req *prev = NULL;
    for (srv_req *r = s->q_head, *next; r; r = next) {
        next = r->q_next;
        if (!r->cancelled && r->conn && srv_http_client_gone(r)) r->cancelled = 1;
        if (!r->cancelled) {
            prev = r;
            continue;
        }
        if (prev) prev->q_next = next;
        else s->q_head = next;
        if (s->q_tail == r) s->q_tail = prev;
        s->q_len--;
        end_queued(s, r, NULL);
    }
}

static void *engine_main(void *arg) {
    srv *s = arg;
    const int N = s->n_slots;
    srv_slot **busy = calloc((size_t)N, sizeof *busy), **fresh = calloc((size_t)N, sizeof *fresh);
    sd_spec **specs = calloc((size_t)N, sizeof *specs);
    sd_spec_round *rounds = calloc((size_t)N, sizeof *rounds);
    slot_out *so = calloc((size_t)N, sizeof *so);
    sd_spec_batch *batch = sd_pair_batch(s->pair);
    if (!busy || !fresh || !specs || !rounds || !so) {
        fprintf(stderr, "error: serve: out of memory for the engine thread\n");
        abort();
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stopping && s->n_busy == 0 && !s->q_head) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) { /* queued requests end now; running ones at this round */
            srv_err down;
            shutdown_error(&down);
            while (s->q_head) {
                srv_req *r = s->q_head;
                s->q_head = r->q_next;
                s->q_len--;
                end_queued(s, r, &down);
            }
            s->q_tail = NULL;
            if (s->n_busy == 0) break;
            for (int i = 0; i < N; i++)
                if (s->slots[i].req) s->slots[i].stop = 1;
        }
        drop_departed(s);
        int n_fresh = 0;
        while (s->q_head && s->n_busy < N) {
            srv_req *r = s->q_head;
            s->q_head = r->q_next;
            if (!s->q_head) s->q_tail = NULL;
            s->q_len--;
            srv_slot *sl = pick_slot(s, r);
            sl->req = r;
            sl->last_used = ++s->use_clock;
            r->slot = sl->id;
            s->n_busy++;
            fresh[n_fresh++] = sl;
        }
        /* clients that left stop their sequence at this round */
        for (int i = 0; i < N; i++) {
            srv_req *r = s->slots[i].req;
            if (r && !r->cancelled && r->conn && srv_http_client_gone(r)) r->cancelled = 1;
            if (r && r->cancelled) s->slots[i].stop = 1;
        }
        pthread_mutex_unlock(&s->mu);

        /* prefills of the requests that just got a slot */
        for (int i = 0; i < n_fresh; i++) {
            srv_slot *sl = fresh[i];
            srv_req *r = sl->req;
            slot_out *o = &so[sl->id];
            srv_err e;
            const double t0 = sd_now();
            if (start(s, sl, &e) != 0) {
                conclude(s, r, NULL, NULL, &e, &o->pending, &o->status, &o->body);
                o->done = o->error = 1;
                continue;
            }
            const double dt = sd_now() - t0;
            if (r->g.stream && r->g.chat) /* the role comes first, as OpenAI sends it */
                srv_sse_chunk(&o->pending, &r->g, r->id, r->created, s->model_name, "", 0, 1, NULL);
            pthread_mutex_lock(&s->mu);
            sd_spec_stats pst;
            sd_spec_get_stats(sl->spec, &pst);
            s->m.prompt_tokens += (unsigned long)pst.n_prompt;
            s->m.prompt_cached += (unsigned long)pst.n_reused;
            s->m.prompt_s += dt;
            deliver(r, &o->pending, 0, 0, NULL);
            pthread_mutex_unlock(&s->mu);
        }

        /* one round over every busy slot */
        int n_b = 0;
        for (int i = 0; i < N; i++)
            if (s->slots[i].req && !so[i].done) {
                busy[n_b] = &s->slots[i];
                specs[n_b++] = s->slots[i].spec;
            }
        const double t0 = sd_now();
        sd_status st = n_b ? sd_spec_batch_step(batch, specs, n_b, rounds) : SD_OK;
        const int pass_tokens = n_b ? sd_spec_batch_pass_tokens(batch) : 0;
        unsigned long taken = 0;
        for (int i = 0; i < n_b; i++) {
            srv_slot *sl = busy[i];
            slot_out *o = &so[sl->id];
            if (st != SD_OK) {
                srv_err e;
                srv_err_set(&e, 500, "server_error", NULL, NULL, "generation failed: %s", sd_last_error());
                conclude(s, sl->req, sl->spec, NULL, &e, &o->pending, &o->status, &o->body);
                o->done = o->error = 1;
                continue;
            }
            const int before = sl->req->n_gen;
            take_tokens(s, sl, rounds[i].tokens, rounds[i].n_tokens, o);
            taken += (unsigned long)(sl->req->n_gen - before);
        }
        const double dt = sd_now() - t0;

        pthread_mutex_lock(&s->mu);
        if (n_b) {
            s->m.rounds++;
            s->m.gen_s += dt;
            s->m.gen_tokens += taken;
            srv_rate_add(&s->rate, sd_now(), (double)taken);
            s->m.pass_tokens += (unsigned long)pass_tokens;
            int drafting = 0;
            for (int i = 0; i < n_b; i++) {
                count_round(s, &rounds[i]);
                drafting |= rounds[i].n_drafted > 0;
            }
            s->m.rounds_drafting += drafting;
            if (s->auto_spec && n_b <= s->n_slots)
                sd_spec_batch_switch_rates(batch, n_b, s->modes[n_b].rate, s->modes[n_b].n);
        }
        for (int i = 0; i < N; i++) {
            srv_slot *sl = &s->slots[i];
            slot_out *o = &so[i];
            if (!sl->req) continue;
            srv_req *r = sl->req;
            deliver(r, &o->pending, o->done, o->status, o->body);
            if (!o->done) continue;
            count_finish(s, o->error ? NULL : o->reason, o->shutdown, r->cancelled);
            sd_spec_cancel(sl->spec); /* a stop string's: nothing of the request (its grammar) outlives it */
            sl->req = NULL;
            s->n_busy--;
            srv_req_unref_locked(r);
            const srv_buf keep = o->pending; /* emptied by deliver; its memory serves the next request */
            memset(o, 0, sizeof *o);
            o->pending = keep;
        }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < N; i++) srv_buf_free(&so[i].pending);
    free(so);
    free(rounds);
    free(specs);
    free(fresh);
    free(busy);
    return NULL;
}

/* ---- setup --------------------------------------------------------------------------------- */

sd_status srv_engine_start(srv *s) {
    if (pthread_create(&s->engine, NULL, engine_main, s) != 0)
        return sd_fail(SD_ERR_NOMEM, "serve: cannot start the engine thread");
    s->engine_started = 1;
    return SD_OK;
}

void srv_engine_stop(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started) pthread_join(s->engine, NULL);
    s->engine_started = 0;
}

void srv_slots_free(srv *s) {
    free(s->slots);
    s->slots = NULL;
    free(s->modes);
    s->modes = NULL;
    sd_pair_free(s->pair);
    s->pair = NULL;
    sd_grammar_vocab_free(s->gvocab);
    s->gvocab = NULL;
}

sd_status srv_load(srv *s, const sd_model *tm, const sd_model *dm, sd_chat_format chat) {
    const sd_tokenizer *tt = sd_model_tokenizer(tm);
    sd_status st;
    if (!tt) return sd_fail(SD_ERR_UNSUPPORTED, "serve: the target model has no tokenizer");
    const int N = s->p.parallel;
    /* the pair's engines start greedy; each request brings its own sampling and budget */
    if ((st = sd_pair_create((sd_model *)tm, (sd_model *)dm, &s->p.spec, N, &s->pair)) != SD_OK) goto fail;
    if (!(s->slots = calloc((size_t)N, sizeof *s->slots)) || !(s->modes = calloc((size_t)N + 1, sizeof *s->modes))) {
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s->n_slots = N;
    for (int i = 0; i < N; i++) {
        s->slots[i].id = i;
        s->slots[i].spec = sd_pair_spec(s->pair, i);
    }
    s->tm = tm;
    s->dm = dm;
    s->auto_spec = N > 1 && (dm || s->p.spec.ngram) && s->p.spec.draft_mode == SD_DRAFT_ADAPTIVE;
    /* the index every request's grammar masks with, built once (a vocabulary's worth of pieces) */
    if ((st = sd_grammar_vocab_create(tt, &s->gvocab)) != SD_OK) goto fail;
    s->tok = tt;
    s->text_per_token = sd_tokenizer_max_text_per_token(tt);
    s->chat = chat;
    s->n_ctx = sd_pair_n_ctx(s->pair);
    if ((st = srv_engine_start(s)) != SD_OK) goto fail;
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    return SD_OK;
fail:
    srv_slots_free(s);
    s->n_slots = 0;
    return st;
}
