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
    for (int i = 0; r->ch && i < r->g.n; i++) {
        srv_text_free(&r->ch[i].text);
        free(r->ch[i].lp);
    }
    free(r->ch);
    srv_gen_free(&r->g);
    srv_buf_free(&r->out);
    srv_buf_free(&r->pend);
    free(r->end_body);
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
    r->ch = calloc((size_t)(g->n > 0 ? g->n : 1), sizeof *r->ch);
    if (!r->ch) {
        pthread_mutex_unlock(&s->mu);
        free(r);
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if (g->n < 1) g->n = 1;
    for (int i = 0; i < g->n; i++) r->ch[i].slot = -1;
    r->g = *g;
    memset(g, 0, sizeof *g);
    srv_make_id(r->id, sizeof r->id, r->g.chat);
    r->created = (long)time(NULL);
    r->t_arrival = sd_now();
    r->refs = 2 + r->g.stream; /* the connection, the queue (then the slot), the stream response */
    r->conn = conn;
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

/* A choice's text and log-probabilities up to what may no longer change (all of it when final):
 * the part of a chunk, or of the response, that goes out now. */
static void choice_take(const srv_req *r, srv_choice *c, int final, srv_buf *text, srv_choice_out *co) {
    memset(co, 0, sizeof *co);
    co->index = (int)(c - r->ch);
    if (c->text.piece) srv_text_take(&c->text, final, text);
    co->text = text->p;
    co->len = text->len;
    if (!r->g.logprobs) return;
    /* a token goes out with the last of its bytes; at the end, every token that gave the text a
     * byte (a stop string drops the tokens wholly inside it) and every one that prints nothing */
    const size_t len = c->text.text.len, sent = c->text.sent;
    int k = c->lp_sent;
    if (final) {
        while (k < c->n_lp && (!c->text.stopped || c->lp[k].off < len)) k++;
    } else {
        while (k < c->n_lp && (k + 1 < c->n_lp ? c->lp[k + 1].off : len) <= sent) k++;
    }
    co->lp = c->lp + c->lp_sent;
    co->n_lp = k - c->lp_sent;
    c->lp_sent = k;
}

/* Everything the request still has to say, produced at once into r->pend: the usage chunk and
 * [DONE] of a stream, or the response, or the error. err NULL: every choice finished. Engine
 * thread, mu not held; deliver() hands it over. */
static void conclude(srv *s, srv_req *r, const srv_err *err) {
    if (r->ended) return;
    r->ended = 1;
    srv_outcome oc = {r->g.n_ids, 0, r->ch[0].slot >= 0 || r->ch[0].finish ? r->ch[0].st.n_reused : 0,
                      r->ch[0].finish ? &r->ch[0].st : NULL};
    int length = 0;
    for (int i = 0; i < r->g.n; i++) {
        oc.completion_tokens += r->ch[i].n_gen;
        length |= r->ch[i].finish && !strcmp(r->ch[i].finish, "length");
    }
    r->reason = err ? NULL : length ? "length" : "stop";
    r->end_status = err ? err->status : 200;
    if (r->g.stream) {
        if (err) srv_sse_error(&r->pend, err);
        else if (r->g.include_usage) srv_sse_usage(&r->pend, &r->g, r->id, r->created, s->model_name, &oc);
        srv_sse_done(&r->pend);
        r->end_status = 200;
    } else if (err) {
        r->end_body = srv_err_json(err);
    } else {
        srv_choice_out *co = calloc((size_t)r->g.n, sizeof *co);
        srv_buf *texts = calloc((size_t)r->g.n, sizeof *texts);
        if (co && texts) {
            for (int i = 0; i < r->g.n; i++) {
                r->ch[i].text.sent = 0; /* the whole text, and every token's log-probability */
                r->ch[i].lp_sent = 0;
                choice_take(r, &r->ch[i], 1, &texts[i], &co[i]);
                co[i].finish_reason = r->ch[i].finish;
                co[i].stats = &r->ch[i].st;
            }
            r->end_body = srv_response_json(&r->g, s->tok, r->id, r->created, s->model_name, co, r->g.n, &oc);
        }
        for (int i = 0; co && texts && i < r->g.n; i++) srv_buf_free(&texts[i]);
        free(texts);
        free(co);
        if (!r->end_body) {
            srv_err oom;
            srv_err_set(&oom, 503, "server_error", NULL, NULL, "out of memory for the response");
            r->end_status = 503;
            r->end_body = srv_err_json(&oom);
            r->reason = NULL;
        }
    }
    if (s->p.verbose)
        for (int i = 0; i < r->g.n; i++) {
            const srv_choice *c = &r->ch[i];
            fprintf(stderr,
                    "serve: %s choice %d slot %d: %d prompt tokens (%d cached), %d generated in %.0f ms, %d drafted, %d "
                    "accepted, %s\n",
                    r->id, i, c->slot, r->g.n_ids, c->st.n_reused, c->n_gen, (sd_now() - r->t_arrival) * 1e3,
                    c->st.n_drafted, c->st.n_accepted,
                    err ? err->msg : r->cancelled ? "cancelled (the client left)" : c->finish ? c->finish : "cut short");
        }
}

/* A choice ends: its engine's statistics kept, a stream's last chunk of it; the request ends with
 * its last choice. */
static void finish_choice(srv *s, srv_req *r, srv_choice *c, const sd_spec *spec, const char *reason) {
    if (spec) sd_spec_get_stats(spec, &c->st);
    c->finish = reason;
    r->n_done++;
    if (r->g.stream) {
        srv_buf rest = {0};
        srv_choice_out co;
        choice_take(r, c, 1, &rest, &co);
        co.finish_reason = reason;
        co.stats = &c->st;
        srv_sse_chunk(&r->pend, &r->g, s->tok, r->id, r->created, s->model_name, &co);
        srv_buf_free(&rest);
    }
    if (r->n_done == r->g.n) conclude(s, r, NULL);
}

/* Hands the bytes produced this round to the connection (mu held): stream bytes are appended;
 * once the request ended, its response is set. Wakes the connection if it waits. */
static void deliver(srv_req *r) {
    if (r->pend.len) srv_buf_put(&r->out, r->pend.p, r->pend.len);
    const int oom = r->pend.oom;
    r->pend.len = 0;
    r->pend.oom = 0;
    if (r->ended && !r->finished) {
        r->finished = 1;
        r->status = r->end_status;
        free(r->body);
        r->body = r->end_body;
        r->end_body = NULL;
    }
    if (r->conn && (oom || r->out.oom)) r->cancelled = 1; /* cannot say it: give up */
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

/* The request's parameters into its slots' engines, then the prefill: the first choice's slot
 * prefills the prompt (what its cache lacks), the others copy its rows. Choice i samples with
 * seed + i: coupled sampling would otherwise give n times one text. 0, or -1 with *e set. */
static int start(srv *s, srv_req *r, srv_err *e) {
    sd_status st = SD_OK;
    const sd_spec *first = NULL;
    for (int i = 0; i < r->g.n && st == SD_OK; i++) {
        srv_slot *sl = &s->slots[r->ch[i].slot];
        sd_spec_cancel(sl->spec); /* a generation a stop string or a departed client left running */
        sd_spec_params p = r->g.spec; /* the server's, with the request's draft settings */
        p.n_predict = r->g.max_tokens;
        p.sampling = r->g.sampling;
        p.sampling.seed += (uint64_t)i;
        p.stop_at_eos = !r->g.ignore_eos;
        p.grammar = r->g.grammar; /* the request's, freed with it: the slots' generations end first */
        p.grammar_vocab = r->g.grammar ? s->gvocab : NULL;
        p.logprobs = r->g.logprobs;
        p.top_logprobs = r->g.top_logprobs;
        st = sd_spec_set_params(sl->spec, &p);
        if (st == SD_OK) st = first ? sd_spec_begin_from(sl->spec, first) : sd_spec_begin(sl->spec, r->g.ids, r->g.n_ids);
        if (st == SD_OK && srv_text_init(&r->ch[i].text, s->tok, r->g.ids[r->g.n_ids - 1], r->g.stops, r->g.n_stops) != 0)
            st = sd_fail(SD_ERR_NOMEM, "out of memory");
        first = sl->spec;
    }
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

/* A token's log-probabilities, placed at the end of the choice's text. 0, or -1 out of memory. */
static int add_logprob(srv_choice *c, int32_t tok, const sd_token_logprobs *lp) {
    if (c->n_lp == c->cap_lp) {
        const int cap = c->cap_lp ? 2 * c->cap_lp : 64;
        srv_lp *v = realloc(c->lp, (size_t)cap * sizeof *v);
        if (!v) return -1;
        c->lp = v;
        c->cap_lp = cap;
    }
    srv_lp *e = &c->lp[c->n_lp++];
    e->lp = *lp;
    e->id = tok;
    e->prev = c->text.prev;
    e->off = (uint32_t)c->text.text.len;
    e->coff = c->chars;
    return 0;
}

/* The tokens a choice's slot emitted this round, through the text into stream chunks; the choice
 * ends at a stop string or when its engine is done, and the request with an error when the
 * engine was cancelled (the client left, the server stops). */
static void take_tokens(srv *s, srv_slot *sl, const sd_spec_round *rd) {
    srv_req *r = sl->req;
    srv_choice *c = &r->ch[sl->choice];
    if (r->ended || c->finish) return;
    int stop_hit = 0;
    for (int i = 0; i < rd->n_tokens && !stop_hit; i++) {
        const size_t before = c->text.text.len;
        int rc = r->g.logprobs ? add_logprob(c, rd->tokens[i], &rd->logprobs[i]) : 0;
        if (rc == 0) rc = srv_text_push(&c->text, rd->tokens[i]);
        c->n_gen++;
        if (rc < 0) {
            srv_err e;
            srv_err_set(&e, 503, "server_error", NULL, NULL, "out of memory for the output text");
            conclude(s, r, &e);
            return;
        }
        for (size_t b = before; b < c->text.text.len; b++) c->chars += ((unsigned char)c->text.text.p[b] & 0xC0) != 0x80;
        stop_hit = rc == 1;
    }
    if (r->g.stream && !stop_hit && !sd_spec_done(sl->spec)) {
        srv_buf text = {0};
        srv_choice_out co;
        choice_take(r, c, 0, &text, &co);
        if (co.len > 0 || co.n_lp > 0) srv_sse_chunk(&r->pend, &r->g, s->tok, r->id, r->created, s->model_name, &co);
        srv_buf_free(&text);
    }
    if (!stop_hit && !sd_spec_done(sl->spec)) return;
    sd_spec_stats st;
    sd_spec_get_stats(sl->spec, &st);
    if (!stop_hit && st.stop_reason == SD_STOP_CANCELLED) { /* the client left, or the server is stopping */
        srv_err e;
        shutdown_error(&e);
        r->shutdown = !r->cancelled;
        conclude(s, r, &e);
        return;
    }
    /* length: the budget or the context */
    finish_choice(s, r, c, sl->spec, stop_hit || st.stop_reason == SD_STOP_EOS ? "stop" : "length");
}

/* A request taken out of the queue ends with an error: its client gone (e NULL: status 499,
 * counted as cancelled) or the server stopping (shutdown_error). mu held. */
static void end_queued(srv *s, srv_req *r, const srv_err *why) {
    srv_err e;
    if (why) e = *why;
    else srv_err_set(&e, 499, "invalid_request_error", NULL, NULL, "the client closed the connection");
    conclude(s, r, &e);
    deliver(r);
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

/* A slot gives its choice back: its engine's generation ends (nothing of the request, its grammar,
 * outlives it); the request's last slot drops the request. mu held. */
static void release_slot(srv *s, srv_slot *sl) {
    srv_req *r = sl->req;
    sd_spec_cancel(sl->spec);
    sl->req = NULL;
    s->n_busy--;
    if (--r->slots_held == 0) srv_req_unref_locked(r);
}

static void *engine_main(void *arg) {
    srv *s = arg;
    const int N = s->n_slots;
    srv_slot **busy = calloc((size_t)N, sizeof *busy);
    srv_req **fresh = calloc((size_t)N, sizeof *fresh);
    sd_spec **specs = calloc((size_t)N, sizeof *specs);
    sd_spec_round *rounds = calloc((size_t)N, sizeof *rounds);
    sd_spec_batch *batch = sd_pair_batch(s->pair);
    if (!busy || !fresh || !specs || !rounds) {
        fprintf(stderr, "error: serve: out of memory for the engine thread\n");
        abort();
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stopping && s->n_busy == 0 && !s->q_head) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) { /* queued requests end now; running ones are cancelled (take_tokens ends them) */
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
                if (s->slots[i].req) sd_spec_cancel(s->slots[i].spec);
        }
        drop_departed(s);
        /* the queue's head takes as many slots as it has choices, once they are free (in order:
         * a request of n choices is not overtaken by smaller ones behind it) */
        int n_fresh = 0;
        while (s->q_head && N - s->n_busy >= s->q_head->g.n) {
            srv_req *r = s->q_head;
            s->q_head = r->q_next;
            if (!s->q_head) s->q_tail = NULL;
            s->q_len--;
            for (int i = 0; i < r->g.n; i++) {
                srv_slot *sl = pick_slot(s, r);
                sl->req = r;
                sl->choice = i;
                sl->last_used = ++s->use_clock;
                r->ch[i].slot = sl->id;
                s->n_busy++;
            }
            r->slots_held = r->g.n; /* the queue's reference, held by the slots now */
            fresh[n_fresh++] = r;
        }
        /* clients that left: their sequences are cancelled (take_tokens ends the request) */
        for (int i = 0; i < N; i++) {
            srv_req *r = s->slots[i].req;
            if (r && !r->cancelled && r->conn && srv_http_client_gone(r)) r->cancelled = 1;
            if (r && r->cancelled) sd_spec_cancel(s->slots[i].spec);
        }
        pthread_mutex_unlock(&s->mu);

        /* prefills of the requests that just got their slots */
        for (int i = 0; i < n_fresh; i++) {
            srv_req *r = fresh[i];
            srv_err e;
            const double t0 = sd_now();
            if (start(s, r, &e) != 0) {
                conclude(s, r, &e);
                continue;
            }
            const double dt = sd_now() - t0;
            for (int c = 0; c < r->g.n && r->g.stream && r->g.chat; c++) { /* the role comes first, as OpenAI sends it */
                const srv_choice_out co = {.index = c, .text = "", .role = 1};
                srv_sse_chunk(&r->pend, &r->g, s->tok, r->id, r->created, s->model_name, &co);
            }
            sd_spec_stats pst;
            sd_spec_get_stats(s->slots[r->ch[0].slot].spec, &pst);
            pthread_mutex_lock(&s->mu);
            s->m.prompt_tokens += (unsigned long)pst.n_prompt;
            s->m.prompt_cached += (unsigned long)pst.n_reused;
            s->m.prompt_s += dt;
            deliver(r);
            pthread_mutex_unlock(&s->mu);
        }

        /* one round over every busy slot */
        int n_b = 0;
        for (int i = 0; i < N; i++) {
            const srv_req *r = s->slots[i].req;
            if (r && !r->ended && !r->ch[s->slots[i].choice].finish) {
                busy[n_b] = &s->slots[i];
                specs[n_b++] = s->slots[i].spec;
            }
        }
        const double t0 = sd_now();
        sd_status st = n_b ? sd_spec_batch_step(batch, specs, n_b, rounds) : SD_OK;
        const int pass_tokens = n_b ? sd_spec_batch_pass_tokens(batch) : 0;
        unsigned long taken = 0;
        for (int i = 0; i < n_b; i++) {
            srv_slot *sl = busy[i];
            if (st != SD_OK) {
                srv_err e;
                srv_err_set(&e, 500, "server_error", NULL, NULL, "generation failed: %s", sd_last_error());
                conclude(s, sl->req, &e);
                continue;
            }
            const int before = sl->req->ch[sl->choice].n_gen;
            take_tokens(s, sl, &rounds[i]);
            taken += (unsigned long)(sl->req->ch[sl->choice].n_gen - before);
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
        /* what each request said goes out; a finished choice frees its slot, an ended request all
         * of its slots (a choice's error ends its siblings too) */
        for (int i = 0; i < N; i++) {
            srv_slot *sl = &s->slots[i];
            srv_req *r = sl->req;
            if (!r) continue;
            if (r->pend.len || r->pend.oom || (r->ended && !r->finished)) {
                deliver(r);
                if (r->ended) count_finish(s, r->reason, r->shutdown, r->cancelled);
            }
            if (r->ended || r->ch[sl->choice].finish) release_slot(s, sl);
        }
    }
    pthread_mutex_unlock(&s->mu);
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
    double rates[2];
    int rounds[2];
    s->auto_spec = sd_spec_batch_switch_rates(sd_pair_batch(s->pair), N, rates, rounds); /* the pair decides */
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
