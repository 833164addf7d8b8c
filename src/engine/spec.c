/* The speculative decoding loop (and plain decoding, its k = 0 case).
 * Invariant: each model's KV cache holds exactly the tokens it has consumed, all accepted;
 * emitted tokens not yet consumed are "pending" and go in first on the next pass. */
#include "specdec/spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "specdec/draft.h"
#include "specdec/target.h"
#include "specdec/verify.h"

struct sd_spec {
    sd_model *target;
    sd_model *draft_model;
    sd_drafter *drafter;
    sd_kv *kv;          /* target cache */
    sd_spec_params p;
    int n_vocab;        /* target logits per row */
    int n_ctx;          /* usable context: tokens the history may hold */
    int32_t *tokens;    /* [n_ctx] prompt + emitted */
    int n_tokens;
    int32_t *pend_d;    /* [n_ctx] tokens emitted but not yet consumed by the draft */
    int n_pend_d;
    float *logits;      /* [k+1][n_vocab] target rows */
    float *p_rows;      /* [k+1][n_vocab] processed target distributions */
    float *q_rows;      /* [k][n_vocab] processed draft distributions */
    float *residual;    /* [n_vocab] */
    void *scratch;      /* sampling scratch */
    int32_t *argmax;    /* [k+1] */
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

sd_spec_params sd_spec_default_params(void) {
    sd_spec_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.draft_max = 4;
    p.sampling = sd_sampler_default_params();
    p.stop_at_eos = 1;
    return p;
}

void sd_spec_free(sd_spec *s) {
    if (!s) return;
    sd_drafter_free(s->drafter);
    sd_kv_free(s->kv);
    free(s->tokens);
    free(s->pend_d);
    free(s->logits);
    free(s->p_rows);
    free(s->q_rows);
    free(s->residual);
    free(s->scratch);
    free(s->argmax);
    free(s);
}

sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out) {
    *out = NULL;
    sd_status st;
    if (!target) return sd_fail(SD_ERR_INVALID_ARG, "no target model");
    if (p->n_predict <= 0) return sd_fail(SD_ERR_INVALID_ARG, "tokens to generate must be > 0 (got %d)", p->n_predict);
    if (draft && (p->draft_max < 1 || p->draft_max > SD_MAX_DRAFT))
        return sd_fail(SD_ERR_INVALID_ARG, "draft length k must be in 1..%d (got %d)", SD_MAX_DRAFT, p->draft_max);
    if (p->n_ctx < 0) return sd_fail(SD_ERR_INVALID_ARG, "context size must be >= 0 (got %d)", p->n_ctx);
    if ((st = sd_sampler_params_check(&p->sampling)) != SD_OK) return st;
    if (draft) {
        const sd_tokenizer *tt = sd_model_tokenizer(target), *td = sd_model_tokenizer(draft);
        if (tt && td && (st = sd_tokenizer_check_compatible(tt, td)) != SD_OK) return st;
    }

    sd_spec *s = calloc(1, sizeof *s);
    if (!s) return sd_fail(SD_ERR_NOMEM, "out of memory");
    s->target = target;
    s->draft_model = draft;
    s->p = *p;
    if (!draft) s->p.draft_max = 0;
    s->n_vocab = sd_model_hparams(target)->vocab_size;
    int n_ctx = sd_model_n_ctx(target);
    if (draft && sd_model_n_ctx(draft) < n_ctx) n_ctx = sd_model_n_ctx(draft);
    if (p->n_ctx > 0) {
        if (p->n_ctx > n_ctx) {
            sd_spec_free(s);
            return sd_fail(SD_ERR_INVALID_ARG, "context %d exceeds what the model%s loaded with (%d)",
                           p->n_ctx, draft ? "s were" : " was", n_ctx);
        }
        n_ctx = p->n_ctx;
    }
    s->n_ctx = n_ctx;
    const int k = s->p.draft_max;
    const size_t V = (size_t)s->n_vocab;
    if ((st = sd_model_kv_create(target, n_ctx, &s->kv)) != SD_OK) goto fail;
    if (draft && (st = sd_drafter_model_create(draft, n_ctx, s->n_vocab, &s->p.sampling, &s->drafter)) != SD_OK)
        goto fail;
    s->tokens = malloc((size_t)n_ctx * sizeof(int32_t));
    s->pend_d = malloc((size_t)n_ctx * sizeof(int32_t));
    s->logits = malloc((size_t)(k + 1) * V * sizeof(float));
    s->p_rows = malloc((size_t)(k + 1) * V * sizeof(float));
    s->q_rows = malloc((size_t)(k > 0 ? k : 1) * V * sizeof(float));
    s->residual = malloc(V * sizeof(float));
    s->scratch = malloc(sd_sample_scratch_bytes(s->n_vocab));
    s->argmax = malloc((size_t)(k + 1) * sizeof(int32_t));
    if (!s->tokens || !s->pend_d || !s->logits || !s->p_rows || !s->q_rows || !s->residual ||
        !s->scratch || !s->argmax) {
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
        goto fail;
    }
    *out = s;
    return SD_OK;
fail:
    sd_spec_free(s);
    return st;
}

sd_kv *sd_spec_target_kv(sd_spec *s) { return s->kv; }
sd_kv *sd_spec_draft_kv(sd_spec *s) { return s->drafter ? sd_drafter_model_kv(s->drafter) : NULL; }
const int32_t *sd_spec_tokens(const sd_spec *s, int *n) {
    *n = s->n_tokens;
    return s->tokens;
}
int sd_spec_draft_consumed(const sd_spec *s) { return s->drafter ? s->drafter->vt->consumed(s->drafter) : 0; }

double sd_spec_acceptance(const sd_spec_stats *st) {
    return st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0;
}
double sd_spec_tokens_per_pass(const sd_spec_stats *st) {
    int passes = st->n_verify + st->n_target_steps;
    return passes ? (double)(st->n_generated - 1) / passes : 0.0;
}
double sd_spec_decode_tps(const sd_spec_stats *st) {
    double t = st->t_total - st->t_prefill;
    return st->n_generated > 1 && t > 0 ? (st->n_generated - 1) / t : 0.0;
}

/* One token from one row of target logits (plain sampling). */
static sd_status pick(sd_spec *s, const float *row, sd_rng *rng, int32_t *tok) {
    if (s->p.sampling.temperature == 0) {
        *tok = sd_argmax(row, s->n_vocab);
        return SD_OK;
    }
    sd_status st = sd_sample_probs(&s->p.sampling, row, s->n_vocab, s->p_rows, s->scratch);
    if (st == SD_OK) *tok = sd_sample_draw(s->p_rows, s->n_vocab, rng);
    return st;
}

typedef struct {
    sd_spec *s;
    sd_token_cb cb;
    void *user;
    sd_spec_stats *st;
    int done;
} emitter;

/* Appends a token to the history and hands it to the caller; sets done on EOS/callback stop. */
static void emit(emitter *e, int32_t tok) {
    sd_spec *s = e->s;
    s->tokens[s->n_tokens++] = tok;
    e->st->n_generated++;
    if (e->cb && e->cb(tok, e->user)) {
        e->st->stop_reason = "callback";
        e->done = 1;
    } else if (s->p.stop_at_eos && tok == sd_tokenizer_eos(sd_model_tokenizer(s->target))) {
        e->st->stop_reason = "eos";
        e->done = 1;
    } else if (e->st->n_generated >= s->p.n_predict) {
        e->st->stop_reason = "length";
        e->done = 1;
    }
}

sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb,
                           void *user, sd_spec_stats *stats) {
    sd_spec_stats local;
    sd_spec_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    st->k = s->p.draft_max;
    st->stop_reason = "length";
    if (n_prompt <= 0) return sd_fail(SD_ERR_INVALID_ARG, "empty prompt (need at least one token, e.g. BOS)");
    if (n_prompt >= s->n_ctx)
        return sd_fail(SD_ERR_CONTEXT_FULL, "prompt of %d tokens does not fit the context of %d (it needs room for at least one more token)",
                       n_prompt, s->n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= s->n_vocab)
            return sd_fail(SD_ERR_INVALID_ARG, "prompt token %d at %d outside vocabulary of %d",
                           (int)prompt[i], i, s->n_vocab);

    const double t0 = now();
    const size_t V = (size_t)s->n_vocab;
    sd_rng rng;
    sd_rng_seed(&rng, s->p.sampling.seed);
    sd_kv_truncate(s->kv, 0);
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    s->n_tokens = n_prompt;
    s->n_pend_d = 0;
    emitter e = {s, cb, user, st, 0};
    sd_status rc;

    /* Prefill: the target scores the prompt and gives the first token; the draft reads it. */
    if ((rc = sd_target_prefill(s->target, s->kv, prompt, n_prompt, s->logits)) != SD_OK) return rc;
    if (s->drafter) { /* timed as part of t_prefill, not t_draft */
        if ((rc = s->drafter->vt->rollback(s->drafter, 0)) != SD_OK) return rc;
        if ((rc = s->drafter->vt->prefill(s->drafter, prompt, n_prompt)) != SD_OK) return rc;
    }
    int32_t tok;
    if ((rc = pick(s, s->logits, &rng, &tok)) != SD_OK) return rc;
    st->t_prefill = now() - t0;
    emit(&e, tok);
    if (s->drafter) s->pend_d[s->n_pend_d++] = tok;

    /* The target cache holds every history token but the last (the pending one). */
    while (!e.done) {
        if (s->p.stop_flag && *s->p.stop_flag) {
            st->stop_reason = "interrupted";
            break;
        }
        const int n_hist = s->n_tokens;
        const int room = s->n_ctx - n_hist; /* tokens the history can still take */
        if (room <= 0) {
            st->stop_reason = "context";
            break;
        }
        /* Drafts that could still be emitted: context room, generation budget, draft cache. */
        int k = s->p.draft_max;
        int left = s->p.n_predict - st->n_generated;
        if (k > room - 1) k = room - 1;
        if (k > left - 1) k = left - 1;
        if (s->drafter) {
            int dcap = s->drafter->vt->capacity(s->drafter) - s->drafter->vt->consumed(s->drafter) -
                       s->n_pend_d + 1;
            if (k > dcap) k = dcap;
        }
        if (k < 1 || !s->drafter) {
            /* Plain step (or too little room to speculate). */
            double tv = now();
            rc = sd_target_decode(s->target, s->kv, s->tokens[n_hist - 1], s->logits);
            st->t_verify += now() - tv;
            if (rc != SD_OK) return rc;
            st->n_target_steps++;
            double ts = now();
            rc = pick(s, s->logits, &rng, &tok);
            st->t_sample += now() - ts;
            if (rc != SD_OK) return rc;
            emit(&e, tok);
            if (s->drafter) s->pend_d[s->n_pend_d++] = tok;
            continue;
        }

        /* Draft k tokens after feeding the draft what it has not seen. */
        const int greedy = s->p.sampling.temperature == 0;
        int32_t batch[SD_MAX_DRAFT + 1];
        int nd = 0;
        double td = now();
        rc = s->drafter->vt->draft(s->drafter, s->pend_d, s->n_pend_d, k, &rng, batch + 1,
                                   greedy ? NULL : s->q_rows, &nd);
        st->t_draft += now() - td;
        if (rc != SD_OK) return rc;
        /* The drafter consumed the pending tokens and its drafts but the last; a drafter may
         * also propose nothing (nd == 0), which makes this pass a plain target step. */
        const int draft_len_before = s->drafter->vt->consumed(s->drafter) - (nd > 0 ? nd - 1 : 0);
        s->n_pend_d = 0;

        /* Verify: [pending, d1..dk] in one batched target pass. */
        batch[0] = s->tokens[n_hist - 1];
        const int len_t0 = sd_kv_len(s->kv);
        double tv = now();
        rc = sd_target_verify(s->target, s->kv, batch, nd + 1, s->logits);
        st->t_verify += now() - tv;
        if (rc != SD_OK) return rc;

        double ts = now();
        int m;
        int32_t next;
        if (greedy) {
            for (int i = 0; i <= nd; i++) s->argmax[i] = sd_argmax(s->logits + (size_t)i * V, s->n_vocab);
            m = sd_verify_greedy(batch + 1, nd, s->argmax, &next);
        } else {
            for (int i = 0; i <= nd; i++) {
                rc = sd_sample_probs(&s->p.sampling, s->logits + (size_t)i * V, s->n_vocab,
                                     s->p_rows + (size_t)i * V, s->scratch);
                if (rc != SD_OK) return rc;
            }
            m = sd_verify_stochastic(s->p_rows, s->q_rows, batch + 1, nd, s->n_vocab, &rng,
                                     s->residual, &next);
        }
        st->t_sample += now() - ts;
        st->n_verify++;
        st->n_drafted += nd;
        st->n_accepted += m;
        for (int i = 0; i < nd; i++) {
            st->drafted_at[i]++;
            if (i < m) st->accepted_at[i]++;
        }

        /* Roll back: the target keeps pending + m accepted drafts; the draft keeps what it
         * consumed of them (it never consumed dk). */
        sd_kv_truncate(s->kv, len_t0 + 1 + m);
        int keep_d = draft_len_before + (nd > 0 ? (m < nd - 1 ? m : nd - 1) : 0);
        if ((rc = s->drafter->vt->rollback(s->drafter, keep_d)) != SD_OK) return rc;
        if (nd > 0 && m == nd) s->pend_d[s->n_pend_d++] = batch[nd];
        s->pend_d[s->n_pend_d++] = next;

        for (int i = 0; i < m && !e.done; i++) emit(&e, batch[1 + i]);
        if (!e.done) emit(&e, next);
        if (e.done && sd_kv_len(s->kv) > s->n_tokens - 1) {
            /* Stopped inside the accepted run (EOS or the callback): drop the accepted tokens
             * that were never emitted, so both caches still hold a prefix of the history. */
            sd_kv_truncate(s->kv, s->n_tokens - 1);
            if (s->drafter->vt->consumed(s->drafter) > s->n_tokens - 1)
                s->drafter->vt->rollback(s->drafter, s->n_tokens - 1);
        }
        if (s->p.on_step) s->p.on_step(s, s->p.step_user);
    }
    st->t_total = now() - t0;
    st->kv_bytes_target = sd_kv_bytes_used(s->kv);
    if (s->drafter) st->kv_bytes_draft = sd_kv_bytes_used(sd_drafter_model_kv(s->drafter));
    return SD_OK;
}
