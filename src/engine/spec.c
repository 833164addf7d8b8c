/* The speculative decoding loop (and plain decoding, its k = 0 case), one round at a time.
 * Invariant between rounds: the target's sequence holds every history token but the last (the
 * pending one), all accepted; the drafter syncs itself to the history on each call. */
#include "specdec/spec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"
#include "draft/policy.h"
#include "specdec/target.h"
#include "specdec/verify.h"

struct sd_spec {
    sd_context *tctx;   /* target context (owned by sd_spec_create's engines) */
    int seq;
    sd_drafter *drafter;
    sd_context *dctx;   /* the model drafter's context, when owned */
    int owns;           /* tctx, dctx and drafter belong to this engine */
    sd_verify_round *round;
    sd_spec_params p;
    int n_vocab;        /* target logits per row */
    int n_ctx;          /* tokens the history may hold */
    const sd_tokenizer *tok; /* the target's: its end-of-generation ids stop a generation */
    int32_t *tokens;    /* [n_ctx] prompt + emitted */
    int n_tokens;
    float *p_rows;      /* [k+1][n_vocab] processed target distributions */
    float *q_rows;      /* [k][n_vocab] processed draft distributions */
    float *residual;    /* [n_vocab] */
    void *scratch;      /* sampling scratch */
    int32_t *argmax;    /* [k+1] */
    float conf[SD_MAX_DRAFT];
    int32_t tree_tok[SD_MAX_DRAFT + 1], tree_par[SD_MAX_DRAFT + 1], path[SD_MAX_DRAFT + 1];
    /* the round in progress (between plan and finish) */
    struct {
        int k;           /* most drafts (0: a plain step) */
        int room;        /* positions the history can still take */
        int cap;         /* most drafts (tree nodes) this engine's share of a shared pass holds */
        double t_draft0; /* stats.t_draft before the round */
        int tree;        /* a tree round */
        int n_nodes;     /* tree: nodes, root included */
        int max_depth;   /* tree: its depth */
        int row0;        /* first logit row in the verify round */
        sd_draft_req req;
        int32_t chain[SD_MAX_DRAFT + 1]; /* [pending, d1..dnd] */
    } rnd;
    sd_adaptive adaptive;
    sd_pmin_policy pmin;
    int costs_known;    /* the adaptive controller has the target's pass costs */
    int k_alloc;        /* rows of p_rows/q_rows/argmax less one: the most drafts set_params allows */
    int k_limit;        /* sd_spec_set_draft_limit: most drafts of the next rounds */
    /* this engine's last round, for the others of a shared one: tokens in the pass, tokens
     * emitted, seconds of drafting */
    int last_n, last_e;
    double last_td;
    sd_rng rng;
    sd_spec_stats st;
    double t0;
    int active;         /* between begin and the end of the generation */
};

sd_spec_params sd_spec_default_params(void) {
    sd_spec_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    p.draft_max = 4;
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    p.p_min = 0.75f;
    p.ngram_min = 1;
    p.ngram_max = 4;
    p.tree_branch = 3;
    p.tree_width = 4;
    p.sampling = sd_sampler_default_params();
    p.stop_at_eos = 1;
    p.kv_type = SD_TYPE_F32;
    return p;
}

void sd_spec_free(sd_spec *s) {
    if (!s) return;
    sd_verify_round_free(s->round);
    if (s->owns) {
        sd_drafter_free(s->drafter);
        sd_context_free(s->dctx);
        sd_context_free(s->tctx);
    }
    free(s->tokens);
    free(s->p_rows);
    free(s->q_rows);
    free(s->residual);
    free(s->scratch);
    free(s->argmax);
    free(s);
}

static sd_status check_params(const sd_spec_params *p, int with_draft) {
    if (p->n_predict <= 0) return sd_fail(SD_ERR_INVALID_ARG, "tokens to generate must be > 0 (got %d)", p->n_predict);
    if (with_draft && (p->draft_max < 1 || p->draft_max > SD_MAX_DRAFT))
        return sd_fail(SD_ERR_INVALID_ARG, "draft length k must be in 1..%d (got %d)", SD_MAX_DRAFT, p->draft_max);
    if (p->n_ctx < 0) return sd_fail(SD_ERR_INVALID_ARG, "context size must be >= 0 (got %d)", p->n_ctx);
    if (p->draft_mode != SD_DRAFT_ADAPTIVE && p->draft_mode != SD_DRAFT_FIXED && p->draft_mode != SD_DRAFT_PMIN)
        return sd_fail(SD_ERR_INVALID_ARG, "draft mode %d (adaptive, fixed or p_min)", (int)p->draft_mode);
    if (p->tree_budget < 0 || p->tree_budget > SD_MAX_DRAFT || p->tree_branch < 1 || p->tree_branch > 16 ||
        p->tree_width < 1 || p->tree_width > SD_MAX_DRAFT)
        return sd_fail(SD_ERR_INVALID_ARG, "tree budget %d (0..%d), branch %d (1..16), width %d (1..%d)", p->tree_budget,
                       SD_MAX_DRAFT, p->tree_branch, p->tree_width, SD_MAX_DRAFT);
    if (!(p->p_min >= 0 && p->p_min <= 1))
        return sd_fail(SD_ERR_INVALID_ARG, "draft p_min must be in [0, 1] (got %g)", (double)p->p_min);
    return sd_sampler_params_check(&p->sampling);
}

sd_status sd_spec_create_with(sd_context *target, int seq, sd_drafter *drafter, const sd_spec_params *p,
                              sd_spec **out) {
    *out = NULL;
    sd_status st;
    if (!target) return sd_fail(SD_ERR_INVALID_ARG, "no target context");
    if ((st = check_params(p, drafter != NULL)) != SD_OK) return st;
    if (seq < 0 || seq >= sd_context_n_seq(target))
        return sd_fail(SD_ERR_INVALID_ARG, "sequence %d not in the target context's %d", seq, sd_context_n_seq(target));
    const sd_model *tm = sd_context_model(target);
    const int n_vocab = sd_model_hparams(tm)->vocab_size;
    if (drafter && drafter->n_vocab > n_vocab)
        return sd_fail(SD_ERR_MISMATCH, "the drafter proposes ids up to %d; the target scores %d", drafter->n_vocab,
                       n_vocab);
    sd_spec *s = calloc(1, sizeof *s);
    if (!s) return sd_fail(SD_ERR_NOMEM, "out of memory");
    s->tctx = target;
    s->seq = seq;
    s->drafter = drafter;
    s->p = *p;
    if (!drafter) s->p.draft_max = 0;
    s->n_vocab = n_vocab;
    s->n_ctx = sd_context_n_ctx(target);
    if (drafter && drafter->capacity < s->n_ctx) s->n_ctx = drafter->capacity;
    s->tok = sd_model_tokenizer(tm);
    sd_adaptive_init(&s->adaptive);
    sd_pmin_policy_init(&s->pmin, s->p.p_min);
    if (s->p.tree_budget > 0 && drafter && !drafter->vt->draft_tree) {
        const char *name = drafter->name;
        free(s);
        return sd_fail(SD_ERR_UNSUPPORTED, "the '%s' drafter proposes no trees (a draft model does)", name);
    }
    const int k = s->p.draft_max > s->p.tree_budget ? s->p.draft_max : s->p.tree_budget; /* rows of p and q */
    const size_t V = (size_t)n_vocab;
    s->k_alloc = k;
    s->k_limit = SD_MAX_DRAFT;
    st = sd_verify_round_create(target, &s->round);
    s->tokens = malloc((size_t)s->n_ctx * sizeof(int32_t));
    s->p_rows = malloc((size_t)(k + 1) * V * sizeof(float));
    s->q_rows = malloc((size_t)(k + 1) * V * sizeof(float));
    s->residual = malloc(V * sizeof(float));
    s->scratch = malloc(sd_sample_scratch_bytes(n_vocab));
    s->argmax = malloc((size_t)(k + 1) * sizeof(int32_t));
    if (st == SD_OK && (!s->tokens || !s->p_rows || !s->q_rows || !s->residual || !s->scratch || !s->argmax))
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
    if (st != SD_OK) {
        sd_spec_free(s);
        return st;
    }
    *out = s;
    return SD_OK;
}

sd_status sd_spec_set_params(sd_spec *s, const sd_spec_params *p) {
    sd_status st = check_params(p, s->drafter != NULL);
    if (st != SD_OK) return st;
    if (s->active) return sd_fail(SD_ERR_INVALID_ARG, "spec: parameters cannot change while a generation runs");
    const int k = s->drafter ? (p->draft_max > p->tree_budget ? p->draft_max : p->tree_budget) : 0;
    if (k > s->k_alloc)
        return sd_fail(SD_ERR_INVALID_ARG, "spec: %d drafts per pass exceed the %d this engine was created for", k,
                       s->k_alloc);
    if (p->tree_budget > 0 && s->drafter && !s->drafter->vt->draft_tree)
        return sd_fail(SD_ERR_UNSUPPORTED, "the '%s' drafter proposes no trees (a draft model does)", s->drafter->name);
    const int ngram = s->p.ngram, n_ctx = s->p.n_ctx;
    const sd_type kv_type = s->p.kv_type;
    s->p = *p;
    s->p.ngram = ngram; /* the drafter and the contexts stay as created */
    s->p.n_ctx = n_ctx;
    s->p.kv_type = kv_type;
    if (!s->drafter) s->p.draft_max = 0;
    sd_pmin_policy_init(&s->pmin, s->p.p_min);
    return SD_OK;
}

sd_status sd_spec_set_draft_limit(sd_spec *s, int k) {
    if (k < 0 || k > SD_MAX_DRAFT) return sd_fail(SD_ERR_INVALID_ARG, "spec: draft limit %d outside 0..%d", k, SD_MAX_DRAFT);
    s->k_limit = k;
    return SD_OK;
}

sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out) {
    *out = NULL;
    sd_status st;
    if (!target) return sd_fail(SD_ERR_INVALID_ARG, "no target model");
    if ((st = check_params(p, draft != NULL || p->ngram)) != SD_OK) return st;
    if (draft) {
        const sd_tokenizer *tt = sd_model_tokenizer(target), *td = sd_model_tokenizer(draft);
        if (tt && td && (st = sd_tokenizer_check_compatible(tt, td)) != SD_OK) return st;
    }
    int n_ctx = sd_model_hparams(target)->ctx_len;
    if (draft && sd_model_hparams(draft)->ctx_len < n_ctx) n_ctx = sd_model_hparams(draft)->ctx_len;
    if (p->n_ctx > 0) n_ctx = p->n_ctx;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = n_ctx;
    cp.kv_type = p->kv_type;
    sd_context *tctx = NULL, *dctx = NULL;
    sd_drafter *dr = NULL;
    if ((st = sd_context_create(target, &cp, &tctx)) != SD_OK) return st;
    const int V = sd_model_hparams(target)->vocab_size;
    if (draft) {
        st = sd_context_create(draft, &cp, &dctx);
        if (st == SD_OK) st = sd_drafter_model_create(dctx, 0, V, &p->sampling, &dr);
    }
    if (st == SD_OK && p->ngram) {
        sd_drafter *ng = NULL;
        st = sd_drafter_ngram_create(p->ngram_min, p->ngram_max, V, &ng);
        if (st == SD_OK && dr) {
            sd_drafter *both = NULL;
            st = sd_drafter_combo_create(ng, dr, &both);
            if (st == SD_OK) dr = both;
            else sd_drafter_free(ng);
        } else if (st == SD_OK) {
            dr = ng;
        }
    }
    if (st == SD_OK) st = sd_spec_create_with(tctx, 0, dr, p, out);
    if (st != SD_OK) {
        sd_drafter_free(dr);
        sd_context_free(dctx);
        sd_context_free(tctx);
        return st;
    }
    (*out)->dctx = dctx;
    (*out)->owns = 1;
    return SD_OK;
}

sd_context *sd_spec_target_context(sd_spec *s) { return s->tctx; }
int sd_spec_seq(const sd_spec *s) { return s->seq; }
sd_drafter *sd_spec_drafter(sd_spec *s) { return s->drafter; }
const int32_t *sd_spec_tokens(const sd_spec *s, int *n) {
    *n = s->n_tokens;
    return s->tokens;
}
int sd_spec_done(const sd_spec *s) { return !s->active; }

double sd_spec_acceptance(const sd_spec_stats *st) {
    return st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0;
}
double sd_spec_tokens_per_pass(const sd_spec_stats *st) {
    int passes = st->n_verify + st->n_target_steps;
    return passes ? (double)st->n_generated / passes : 0.0;
}
double sd_spec_mean_accepted(const sd_spec_stats *st) {
    return st->n_verify ? 1.0 + (double)st->n_accepted / st->n_verify : 0.0;
}
double sd_spec_decode_tps(const sd_spec_stats *st) {
    double t = st->t_total - st->t_first;
    return st->n_generated > 1 && t > 0 ? (st->n_generated - 1) / t : 0.0;
}

/* The adaptive controller's start: a target pass of 1 and of draft_max + 1 tokens after the
 * cached prompt, once each (then rolled back); the pass sizes in between are interpolated
 * until rounds measure them, and rounds keep every size current. Each pass is time to first
 * token: a warm-up pass of each size before the timed one (as before) cost 4 passes, on the
 * twins 84-180 ms against 63-82 ms with 2 (4 alternating runs; decode speed within noise). */
static sd_status measure_costs(sd_spec *s) {
    int32_t toks[SD_MAX_DRAFT + 1];
    const int len = sd_context_seq_len(s->tctx, s->seq), n_max = s->p.draft_max + 1;
    if (len + n_max > s->n_ctx) return SD_OK; /* no room: the first rounds measure instead */
    for (int i = 0; i < n_max; i++) toks[i] = s->tokens[s->n_tokens - 1];
    for (int n = 1; n <= n_max; n += n_max - 1) {
        int row;
        sd_verify_round_clear(s->round);
        sd_status st = sd_verify_round_add_chain(s->round, s->seq, toks, n, &row);
        const double t0 = sd_now();
        if (st == SD_OK) st = sd_verify_round_run(s->round);
        const double t = sd_now() - t0;
        sd_context_seq_truncate(s->tctx, s->seq, len);
        if (st != SD_OK) return st;
        sd_adaptive_time_pass(&s->adaptive, n, t);
        if (n_max == 1) break;
    }
    s->costs_known = 1;
    return SD_OK;
}

sd_status sd_spec_begin(sd_spec *s, const int32_t *prompt, int n_prompt) {
    s->active = 0;
    if (n_prompt <= 0) return sd_fail(SD_ERR_INVALID_ARG, "empty prompt (need at least one token, e.g. BOS)");
    if (n_prompt >= s->n_ctx)
        return sd_fail(SD_ERR_CONTEXT_FULL,
                       "prompt of %d tokens does not fit the context of %d (it needs room for at least one more token)",
                       n_prompt, s->n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= s->n_vocab)
            return sd_fail(SD_ERR_INVALID_ARG, "prompt token %d at %d outside vocabulary of %d", (int)prompt[i], i,
                           s->n_vocab);
    sd_spec_stats *st = &s->st;
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    st->k = s->p.draft_max;
    s->last_n = s->last_e = 0;
    s->last_td = 0;
    s->t0 = sd_now();
    sd_rng_seed(&s->rng, s->p.sampling.seed);

    /* The cache holds tokens[0..len) of the last history: keep what the prompt shares with it,
     * short of the prompt's last token, which stays pending. */
    int keep = sd_context_seq_len(s->tctx, s->seq);
    if (keep > s->n_tokens) keep = s->n_tokens;
    int c = 0;
    while (c < keep && c < n_prompt - 1 && s->tokens[c] == prompt[c]) c++;
    sd_status rc = sd_context_seq_truncate(s->tctx, s->seq, c);
    if (rc != SD_OK) return rc;
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    s->n_tokens = n_prompt;
    st->n_reused = c;
    if (n_prompt - 1 > c && (rc = sd_context_forward(s->tctx, s->seq, prompt + c, n_prompt - 1 - c, NULL, 0)) != SD_OK)
        return rc;
    if (s->drafter && s->drafter->vt->sync && (rc = s->drafter->vt->sync(s->drafter, prompt, n_prompt)) != SD_OK)
        return rc;
    if (s->drafter && s->p.draft_mode == SD_DRAFT_ADAPTIVE && !s->costs_known && (rc = measure_costs(s)) != SD_OK)
        return rc;
    st->t_prefill = sd_now() - s->t0;
    st->n_sources = s->drafter ? s->drafter->n_sources : 0;
    for (int i = 0; i < st->n_sources; i++) st->sources[i] = s->drafter->sources[i];
    s->active = 1;
    return SD_OK;
}

static void finish(sd_spec *s, const char *reason) {
    s->active = 0;
    s->st.stop_reason = reason;
    s->st.t_total = sd_now() - s->t0;
}

/* Appends one token to the history and hands it on; ends the generation on EOS, the budget,
 * the callback or the stop flag. Returns 1 when the generation has ended. */
static int emit(sd_spec *s, int32_t tok, sd_token_cb cb, void *user, int32_t *out, int *n_out) {
    sd_spec_stats *st = &s->st;
    s->tokens[s->n_tokens++] = tok;
    if (out) out[*n_out] = tok;
    (*n_out)++;
    if (st->n_generated++ == 0) st->t_first = sd_now() - s->t0;
    if (cb && cb(tok, user)) finish(s, "callback");
    else if (s->p.stop_at_eos && s->tok && sd_tokenizer_is_eog(s->tok, tok)) finish(s, "eos");
    else if (st->n_generated >= s->p.n_predict) finish(s, "length");
    else if (s->p.stop_flag && *s->p.stop_flag) finish(s, "interrupted");
    else if (s->n_tokens >= s->n_ctx) finish(s, "context");
    return !s->active;
}

/* One token from one row of target logits (plain sampling). */
static sd_status pick(sd_spec *s, const float *row, int32_t *tok) {
    if (s->p.sampling.temperature == 0) {
        *tok = sd_argmax(row, s->n_vocab);
        return SD_OK;
    }
    sd_status st = sd_sample_probs(&s->p.sampling, row, s->n_vocab, s->p_rows, s->scratch);
    if (st == SD_OK) *tok = sd_sample_draw(s->p_rows, s->n_vocab, &s->rng);
    return st;
}

/* The end of a round whose accepted drafts (m of them: acc[0..m)) and target token `next` are
 * known: emits them until the generation ends, then the target keeps the history but its last
 * token. n_drafted proposals reached depths 1..depth. */
static sd_status end_round(sd_spec *s, const int32_t *acc, int m, int32_t next, int n_drafted, int depth, int source,
                           sd_token_cb cb, void *user, int32_t *out, int *n_out) {
    sd_spec_stats *st = &s->st;
    int emitted = 0;
    for (int i = 0; i < m && s->active; i++, emitted++) emit(s, acc[i], cb, user, out, n_out);
    if (s->active) emit(s, next, cb, user, out, n_out);
    if (n_drafted > 0) {
        st->n_verify++;
        st->n_drafted += n_drafted;
        st->n_accepted += emitted;
        st->drafted_by[source] += n_drafted;
        st->accepted_by[source] += emitted;
        for (int i = 0; i < depth; i++) {
            st->drafted_at[i]++;
            if (i < emitted) st->accepted_at[i]++;
        }
    }
    sd_status rc = sd_context_seq_truncate(s->tctx, s->seq, s->n_tokens - 1);
    if (rc != SD_OK) return rc;
    if (!s->active) {
        st->kv_bytes_target = (size_t)sd_context_seq_len(s->tctx, s->seq) * sd_kv_bytes_per_token(sd_context_kv(s->tctx));
        sd_context *dc = sd_drafter_model_context(s->drafter);
        int n_fed = 0;
        sd_drafter_model_tokens(s->drafter, &n_fed);
        if (dc) st->kv_bytes_draft = (size_t)n_fed * sd_kv_bytes_per_token(sd_context_kv(dc));
    }
    if (s->p.on_step) s->p.on_step(s, s->p.step_user);
    return SD_OK;
}

/* ---- one round, in phases, so that several engines on one target context share the pass ---- */

/* Engines whose model drafters draft in one lockstep group at most. */
#define SD_MAX_BATCH_ENGINES 64

/* Checks and sizes the round: 0 to take part (rnd.k drafts at most, and at most k_cap), 1 when
 * the generation has ended instead. */
static int round_plan(sd_spec *s, int k_cap, sd_status *rc) {
    *rc = SD_OK;
    if (!s->active) return 1;
    if (s->p.stop_flag && *s->p.stop_flag) {
        finish(s, "interrupted");
        return 1;
    }
    const int n_hist = s->n_tokens;
    if (sd_context_seq_len(s->tctx, s->seq) != n_hist - 1) {
        *rc = sd_fail(SD_ERR_INVALID_ARG, "spec: the target sequence holds %d tokens, the history %d (another user of sequence %d?)",
                      sd_context_seq_len(s->tctx, s->seq), n_hist, s->seq);
        return 1;
    }
    /* Drafts that could still be emitted: context room (the history takes at most n_ctx
     * tokens) and the generation budget, each less the token the target adds itself. */
    if (k_cap > s->k_limit) k_cap = s->k_limit;
    int k = s->p.draft_max < k_cap ? s->p.draft_max : k_cap;
    const int room = s->n_ctx - n_hist, left = s->p.n_predict - s->st.n_generated;
    if (k > room - 1) k = room - 1;
    if (k > left - 1) k = left - 1;
    memset(&s->rnd, 0, sizeof s->rnd);
    s->rnd.chain[0] = s->tokens[n_hist - 1];
    s->rnd.room = room;
    s->rnd.cap = k_cap;
    s->rnd.t_draft0 = s->st.t_draft;
    s->rnd.tree = s->p.tree_budget > 0 && s->drafter && k >= 1;
    if (!s->rnd.tree && s->drafter && k >= 1 && s->p.draft_mode == SD_DRAFT_ADAPTIVE)
        k = sd_adaptive_begin_round(&s->adaptive, k);
    s->rnd.k = s->drafter ? (k > 0 ? k : 0) : 0;
    return 0;
}

/* A chain round's request (rnd.req) to the drafter. */
static void fill_req(sd_spec *s) {
    sd_draft_req *req = &s->rnd.req;
    req->hist = s->tokens;
    req->n_hist = s->n_tokens;
    req->k = s->rnd.k;
    req->rng = &s->rng;
    req->q = s->p.sampling.temperature == 0 ? NULL : s->q_rows;
    req->policy = s->p.draft_mode == SD_DRAFT_ADAPTIVE ? &s->adaptive.base
                  : s->p.draft_mode == SD_DRAFT_PMIN   ? &s->pmin.base
                                                       : NULL;
    req->out = s->rnd.chain + 1;
    req->conf = s->conf;
}

/* The drafter's answer checked against its contract; td: seconds it took. */
static sd_status check_req(sd_spec *s, double td) {
    const sd_draft_req *req = &s->rnd.req;
    if (req->n_out < 0 || req->n_out > s->rnd.k)
        return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' proposed %d tokens; at most %d were asked for", s->drafter->name,
                       req->n_out, s->rnd.k);
    if (req->source < 0 || req->source >= s->drafter->n_sources)
        return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' named source %d of its %d", s->drafter->name, req->source,
                       s->drafter->n_sources);
    for (int i = 0; i < req->n_out; i++)
        if (req->out[i] < 0 || req->out[i] >= s->n_vocab)
            return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' proposed id %d, outside the target's vocabulary of %d",
                           s->drafter->name, (int)req->out[i], s->n_vocab);
    sd_adaptive_time_draft(&s->adaptive, req->n_out > 0 ? req->n_out : 1, td);
    return SD_OK;
}

/* The round's proposals: a chain (rnd.req, rnd.chain) or a tree (tree_tok, tree_par), checked. */
static sd_status round_draft(sd_spec *s) {
    sd_spec_stats *st = &s->st;
    const int greedy = s->p.sampling.temperature == 0, n_hist = s->n_tokens, k = s->rnd.k;
    if (k < 1) return SD_OK;
    sd_status rc;
    if (s->rnd.tree) {
        sd_draft_tree_req r;
        memset(&r, 0, sizeof r);
        r.hist = s->tokens;
        r.n_hist = n_hist;
        r.rng = &s->rng;
        r.budget = s->p.tree_budget < s->rnd.room ? s->p.tree_budget : s->rnd.room; /* its rows must fit */
        if (r.budget > s->rnd.cap) r.budget = s->rnd.cap;
        r.depth = k;
        r.branch = s->p.tree_branch;
        r.width = s->p.tree_width;
        r.sample = !greedy;
        r.tok = s->tree_tok;
        r.par = s->tree_par;
        r.q = greedy ? NULL : s->q_rows;
        double td = sd_now();
        rc = s->drafter->vt->draft_tree(s->drafter, &r);
        st->t_draft += sd_now() - td;
        if (rc != SD_OK) return rc;
        if (r.n < 1 || r.n > r.budget + 1 || r.par[0] != -1 || r.tok[0] != s->tokens[n_hist - 1])
            return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' returned a tree of %d nodes (budget %d) without its root",
                           s->drafter->name, r.n, r.budget);
        int depth[SD_MAX_DRAFT + 1] = {0};
        for (int i = 1; i < r.n; i++) {
            if (r.par[i] < 0 || r.par[i] >= i || r.tok[i] < 0 || r.tok[i] >= s->n_vocab)
                return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s': tree node %d has parent %d and id %d", s->drafter->name,
                               i, (int)r.par[i], (int)r.tok[i]);
            depth[i] = depth[r.par[i]] + 1;
            if (depth[i] > k)
                return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s': tree node %d is %d deep; at most %d were asked for",
                               s->drafter->name, i, depth[i], k);
            if (depth[i] > s->rnd.max_depth) s->rnd.max_depth = depth[i];
        }
        s->rnd.n_nodes = r.n;
        return SD_OK;
    }
    fill_req(s);
    double td = sd_now();
    rc = s->drafter->vt->draft(s->drafter, &s->rnd.req);
    td = sd_now() - td;
    st->t_draft += td;
    return rc == SD_OK ? check_req(s, td) : rc;
}

/* Puts the round's tokens into the verify round. */
static sd_status round_add(sd_spec *s, sd_verify_round *vr) {
    if (s->rnd.tree) return sd_verify_round_add_tree(vr, s->seq, s->tree_tok, s->tree_par, s->rnd.n_nodes, &s->rnd.row0);
    return sd_verify_round_add_chain(vr, s->seq, s->rnd.chain, s->rnd.req.n_out + 1, &s->rnd.row0);
}

/* After the pass: accept, keep the accepted rows, emit. */
static sd_status round_finish(sd_spec *s, const sd_verify_round *vr, sd_token_cb cb, void *user, int32_t *out,
                              int *n_out) {
    sd_spec_stats *st = &s->st;
    const int greedy = s->p.sampling.temperature == 0, n_hist = s->n_tokens, row0 = s->rnd.row0;
    const size_t V = (size_t)s->n_vocab;
    double ts = sd_now();
    sd_status rc = SD_OK;
    int m = 0;
    int32_t next = 0, acc[SD_MAX_DRAFT];
    if (s->rnd.tree) {
        const int n = s->rnd.n_nodes;
        if (greedy) {
            for (int i = 0; i < n; i++) s->argmax[i] = sd_argmax(sd_verify_round_logits(vr, row0 + i), s->n_vocab);
            m = sd_verify_tree_greedy(s->tree_tok, s->tree_par, n, s->argmax, s->path, &next);
        } else {
            for (int i = 0; i < n && rc == SD_OK; i++)
                rc = sd_sample_probs(&s->p.sampling, sd_verify_round_logits(vr, row0 + i), s->n_vocab,
                                     s->p_rows + (size_t)i * V, s->scratch);
            if (rc == SD_OK)
                m = sd_verify_tree_stochastic(s->tree_tok, s->tree_par, n, s->p_rows, s->q_rows, s->n_vocab, &s->rng,
                                              s->residual, s->path, &next);
        }
        /* the root and the accepted path: their rows go behind the history in path order */
        if (rc == SD_OK) rc = sd_target_keep_path(s->tctx, s->seq, n_hist - 1, s->path, m + 1);
        for (int i = 0; i < m; i++) acc[i] = s->tree_tok[s->path[1 + i]];
    } else {
        const int nd = s->rnd.req.n_out;
        const float *q = s->rnd.req.q_filled ? s->q_rows : NULL; /* none: deterministic drafts, q one-hot */
        if (nd == 0) {
            st->n_target_steps++;
            rc = pick(s, sd_verify_round_logits(vr, row0), &next);
        } else if (greedy) {
            for (int i = 0; i <= nd; i++) s->argmax[i] = sd_argmax(sd_verify_round_logits(vr, row0 + i), s->n_vocab);
            m = sd_verify_greedy(s->rnd.chain + 1, nd, s->argmax, &next);
        } else {
            for (int i = 0; i <= nd && rc == SD_OK; i++)
                rc = sd_sample_probs(&s->p.sampling, sd_verify_round_logits(vr, row0 + i), s->n_vocab,
                                     s->p_rows + (size_t)i * V, s->scratch);
            if (rc == SD_OK)
                m = sd_verify_stochastic(s->p_rows, q, s->rnd.chain + 1, nd, s->n_vocab, &s->rng, s->residual, &next);
        }
        if (rc == SD_OK && nd > 0) sd_adaptive_record(&s->adaptive, s->rnd.req.source, s->conf, nd, m);
        memcpy(acc, s->rnd.chain + 1, (size_t)m * sizeof *acc);
    }
    st->t_sample += sd_now() - ts;
    if (rc != SD_OK) {
        sd_context_seq_truncate(s->tctx, s->seq, n_hist - 1);
        return rc;
    }
    const int n_drafted = s->rnd.tree ? s->rnd.n_nodes - 1 : s->rnd.req.n_out;
    const int depth = s->rnd.tree ? s->rnd.max_depth : n_drafted;
    /* this round as the others of the next shared one see it */
    s->last_n = n_drafted + 1;
    s->last_td = s->st.t_draft - s->rnd.t_draft0;
    const int before = *n_out;
    rc = end_round(s, acc, m, next, n_drafted, depth, s->rnd.tree ? 0 : s->rnd.req.source, cb, user, out, n_out);
    s->last_e = *n_out - before;
    return rc;
}

sd_status sd_spec_step_many(sd_verify_round *vr, sd_spec *const *specs, int n, int32_t *const *outs, int *n_outs) {
    if (n < 1) return SD_OK;
    for (int i = 0; i < n; i++) {
        n_outs[i] = 0;
        if (sd_verify_round_context(vr) != specs[i]->tctx)
            return sd_fail(SD_ERR_INVALID_ARG, "step: engine %d runs on another target context than the round", i);
        for (int j = 0; j < i; j++)
            if (specs[j]->seq == specs[i]->seq)
                return sd_fail(SD_ERR_INVALID_ARG, "step: engines %d and %d share sequence %d", j, i, specs[i]->seq);
    }
    sd_status rc = SD_OK;
    int *in = malloc((size_t)n * sizeof *in);
    if (!in) return sd_fail(SD_ERR_NOMEM, "out of memory");
    /* The pass stays within the kernels whose rows equal decoding each token alone (a verify
     * pass of SD_MAX_DRAFT + 1 tokens is asserted to fit them), so that every engine emits what
     * it would alone: each engine's share of it is an equal part. */
    int n_live = 0, sum_n = 0, sum_e = 0;
    double sum_t = 0;
    for (int i = 0; i < n; i++)
        if (specs[i]->active) {
            n_live++;
            sum_n += specs[i]->last_n;
            sum_e += specs[i]->last_e;
            sum_t += specs[i]->last_td;
        }
    const int k_cap = n_live > 0 && n_live <= SD_MAX_DRAFT + 1 ? (SD_MAX_DRAFT + 1) / n_live - 1 : 0;
    int n_in = 0;
    for (int i = 0; i < n && rc == SD_OK; i++) {
        sd_spec *s = specs[i];
        if (s->active) { /* the adaptive policy weighs a draft against the whole round's rate */
            s->adaptive.others_n = sum_n - s->last_n;
            s->adaptive.others_e = sum_e - s->last_e;
            s->adaptive.others_t = sum_t - s->last_td;
        }
        if (!round_plan(s, k_cap, &rc)) in[n_in++] = i;
    }
    /* chain rounds of model drafters sharing a draft context draft in lockstep */
    int *batched = calloc((size_t)n, sizeof *batched);
    if (!batched) rc = sd_fail(SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_in && rc == SD_OK; i++) {
        sd_spec *a = specs[in[i]];
        if (batched[i] || a->rnd.tree || a->rnd.k < 1) continue;
        sd_drafter *ds[SD_MAX_BATCH_ENGINES];
        sd_draft_req *rq[SD_MAX_BATCH_ENGINES];
        int idx[SD_MAX_BATCH_ENGINES], g = 0;
        for (int j = i; j < n_in && g < SD_MAX_BATCH_ENGINES; j++) {
            sd_spec *b = specs[in[j]];
            if (batched[j] || b->rnd.tree || b->rnd.k < 1 || !sd_drafter_model_batchable(a->drafter, b->drafter)) continue;
            fill_req(b);
            ds[g] = b->drafter;
            rq[g] = &b->rnd.req;
            idx[g++] = j;
        }
        if (g < 2) continue;
        double td = sd_now();
        rc = sd_drafter_model_draft_many(ds, rq, g);
        td = sd_now() - td;
        for (int j = 0; j < g && rc == SD_OK; j++) {
            sd_spec *b = specs[in[idx[j]]];
            b->st.t_draft += td / g;
            batched[idx[j]] = 1;
            rc = check_req(b, td / g);
        }
    }
    for (int i = 0; i < n_in && rc == SD_OK; i++)
        if (!batched[i]) rc = round_draft(specs[in[i]]);
    free(batched);
    sd_verify_round_clear(vr);
    for (int i = 0; i < n_in && rc == SD_OK; i++) rc = round_add(specs[in[i]], vr);
    if (rc == SD_OK && n_in > 0) {
        double tv = sd_now();
        rc = sd_verify_round_run(vr);
        tv = sd_now() - tv;
        for (int i = 0; i < n_in && rc == SD_OK; i++) {
            sd_spec *s = specs[in[i]];
            s->st.t_verify += tv;
            /* the pass's cost by its size: what a round of this engine's costs alongside the others */
            if (!s->rnd.tree) sd_adaptive_time_pass(&s->adaptive, sd_verify_round_n_tokens(vr), tv);
        }
    }
    for (int i = 0; i < n_in && rc == SD_OK; i++)
        rc = round_finish(specs[in[i]], vr, NULL, NULL, outs ? outs[in[i]] : NULL, &n_outs[in[i]]);
    free(in);
    return rc;
}

sd_status sd_spec_step(sd_spec *s, sd_token_cb cb, void *user, int32_t *out, int *n_out) {
    *n_out = 0;
    sd_status rc;
    s->adaptive.others_n = 0; /* alone in its pass */
    s->adaptive.others_e = s->adaptive.others_t = 0;
    if (round_plan(s, SD_MAX_DRAFT, &rc)) return rc;
    if ((rc = round_draft(s)) != SD_OK) return rc;
    sd_verify_round_clear(s->round);
    if ((rc = round_add(s, s->round)) != SD_OK) return rc;
    double tv = sd_now();
    rc = sd_verify_round_run(s->round);
    tv = sd_now() - tv;
    s->st.t_verify += tv;
    if (rc != SD_OK) return rc;
    if (!s->rnd.tree) sd_adaptive_time_pass(&s->adaptive, sd_verify_round_n_tokens(s->round), tv);
    return round_finish(s, s->round, cb, user, out, n_out);
}

void sd_spec_get_stats(const sd_spec *s, sd_spec_stats *st) {
    *st = s->st;
    if (s->active) st->t_total = sd_now() - s->t0;
}

sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                           sd_spec_stats *stats) {
    sd_status rc = sd_spec_begin(s, prompt, n_prompt);
    int n = 0;
    while (rc == SD_OK && s->active) rc = sd_spec_step(s, cb, user, NULL, &n);
    if (stats) sd_spec_get_stats(s, stats);
    return rc;
}
