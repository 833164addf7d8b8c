/* One sequence's generation: its history, the phases of a round (plan, draft, add to the pass,
 * accept and emit) and its statistics; plain decoding is the round without drafts.
 * Invariant between rounds: the target's sequence holds every history token but the last (the
 * pending one), all accepted; the drafter syncs itself to the history on each call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"
#include "engine/internal.h"
#include "specdec/tokenizer.h"
#include "specdec/verify.h"

/* ---- names and defaults ------------------------------------------------------------------- */

static const char *const k_draft_modes[] = {[SD_DRAFT_ADAPTIVE] = "adaptive", [SD_DRAFT_FIXED] = "fixed",
                                            [SD_DRAFT_PMIN] = "p_min"};

const char *sd_draft_mode_name(sd_draft_mode m) {
    return (unsigned)m < sizeof k_draft_modes / sizeof *k_draft_modes ? k_draft_modes[m] : "?";
}

sd_status sd_draft_mode_from_name(const char *name, sd_draft_mode *out) {
    for (unsigned i = 0; name && i < sizeof k_draft_modes / sizeof *k_draft_modes; i++)
        if (!strcmp(name, k_draft_modes[i])) {
            *out = (sd_draft_mode)i;
            return SD_OK;
        }
    return sd_fail(SD_ERR_INVALID_ARG, "draft mode must be adaptive, fixed or p_min, got '%s'", name ? name : "(null)");
}

static const char *const k_stop_names[] = {[SD_STOP_NONE] = "none",         [SD_STOP_LENGTH] = "length",
                                           [SD_STOP_EOS] = "eos",           [SD_STOP_CONTEXT] = "context",
                                           [SD_STOP_CANCELLED] = "cancelled", [SD_STOP_CALLBACK] = "callback"};

const char *sd_stop_reason_name(sd_stop_reason r) {
    return (unsigned)r < sizeof k_stop_names / sizeof *k_stop_names ? k_stop_names[r] : "?";
}

sd_spec_params sd_spec_default_params(void) {
    sd_spec_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = 128;
    /* The adaptive length's cap (and the fixed length): capped at 4, the controller could not
     * reach the long drafts a high-acceptance pair pays for; at 6, paired runs on Zen 5 made the
     * cost twins and the twin drafting with its own Q8_0 or Q4_0 copy faster and left the tiny
     * stories pair unchanged (measured: commit 1a02e71). Beyond 6 nothing more was measured, and a
     * fixed length of 6 gives up a little to 4 on the twins. */
    p.draft_max = 6;
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    p.p_min = 0.75f;
    p.ngram_min = 1;
    p.ngram_max = 4;
    p.tree_branch = 3;
    p.tree_width = 4;
    p.sampling = sd_sampler_default_params();
    p.stop_at_eos = 1;
    p.kv_type = SD_TYPE_F32;
    p.grammar_drafts = 1;
    return p;
}

/* ---- derived figures ---------------------------------------------------------------------- */

double sd_spec_acceptance(const sd_spec_stats *st) {
    return st->n_drafted ? (double)st->n_accepted / st->n_drafted : 0.0;
}
double sd_spec_tokens_per_pass(const sd_spec_stats *st) {
    const int passes = st->n_verify + st->n_target_steps;
    return passes ? (double)st->n_generated / passes : 0.0;
}
double sd_spec_mean_accepted(const sd_spec_stats *st) {
    return st->n_verify ? 1.0 + (double)st->n_accepted / st->n_verify : 0.0;
}
double sd_spec_decode_tps(const sd_spec_stats *st) {
    const double t = st->t_total - st->t_first;
    return st->n_generated > 1 && t > 0 ? (st->n_generated - 1) / t : 0.0;
}

/* ---- creation and parameters --------------------------------------------------------------- */

/* has_model: the drafter draws from a draft model (NULL drafter: plain). */
static sd_status check_params(const sd_spec_params *p, int with_draft, int has_model) {
    if (p->n_predict <= 0) return sd_fail(SD_ERR_INVALID_ARG, "tokens to generate must be > 0 (got %d)", p->n_predict);
    if (p->draft_max < 0 || p->draft_max > SD_MAX_DRAFT)
        return sd_fail(SD_ERR_INVALID_ARG, "draft length k must be in 0..%d (got %d)", SD_MAX_DRAFT, p->draft_max);
    if (p->n_ctx < 0) return sd_fail(SD_ERR_INVALID_ARG, "context size must be >= 0 (got %d)", p->n_ctx);
    if (p->draft_mode != SD_DRAFT_ADAPTIVE && p->draft_mode != SD_DRAFT_FIXED && p->draft_mode != SD_DRAFT_PMIN)
        return sd_fail(SD_ERR_INVALID_ARG, "draft mode %d (adaptive, fixed or p_min)", (int)p->draft_mode);
    if (p->tree_budget < 0 || p->tree_budget > SD_MAX_DRAFT || p->tree_branch < 1 || p->tree_branch > 16 ||
        p->tree_width < 1 || p->tree_width > SD_MAX_DRAFT)
        return sd_fail(SD_ERR_INVALID_ARG, "tree budget %d (0..%d), branch %d (1..16), width %d (1..%d)", p->tree_budget,
                       SD_MAX_DRAFT, p->tree_branch, p->tree_width, SD_MAX_DRAFT);
    if (!(p->p_min >= 0 && p->p_min <= 1))
        return sd_fail(SD_ERR_INVALID_ARG, "draft p_min must be in [0, 1] (got %g)", (double)p->p_min);
    if (p->draft_min < 0 || (with_draft && p->draft_min > p->draft_max))
        return sd_fail(SD_ERR_INVALID_ARG, "draft_min %d must be in 0..draft_max (%d)", p->draft_min, p->draft_max);
    if (p->grammar && !p->grammar_vocab)
        return sd_fail(SD_ERR_INVALID_ARG, "a grammar needs the target tokenizer's index (grammar_vocab)");
    if (p->grammar && p->tree_budget > 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "a grammar constrains chains of drafts, not trees (tree budget %d)",
                       p->tree_budget);
    if (p->top_logprobs < 0 || p->top_logprobs > SD_MAX_LOGPROBS)
        return sd_fail(SD_ERR_INVALID_ARG, "top_logprobs %d outside 0..%d", p->top_logprobs, SD_MAX_LOGPROBS);
    /* A tree's shape (depth, branching) is fixed before any node is drawn; p_min judges each
     * draft of a chain and would have no say in it: refused rather than ignored. */
    if (p->draft_mode == SD_DRAFT_PMIN && p->tree_budget > 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "draft mode p_min judges each draft of a chain, not trees (tree budget %d): "
                       "a tree's depth is draft_max", p->tree_budget);
    if (p->draft_min > 1 && p->tree_budget > 0)
        return sd_fail(SD_ERR_UNSUPPORTED, "draft_min %d applies to chains of drafts, not to trees (tree budget %d)",
                       p->draft_min, p->tree_budget);
    /* Dropping a chain for being short looks at sampled drafts: their length depends on the
     * draws under adaptive or p_min drafting, which would bias rejection sampling. Greedy and
     * coupled outputs do not depend on the drafts at all; n-gram and fixed-length chains have a
     * length fixed before any draw. */
    if (p->draft_min > 1 && has_model && p->sampling.temperature > 0 && p->sampling.mode == SD_SAMPLING_REJECTION &&
        p->draft_mode != SD_DRAFT_FIXED)
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "draft_min %d with rejection sampling and %s drafting would drop sampled drafts by their "
                       "length, which biases the output: use coupled sampling, fixed-length drafting, or draft_min <= 1",
                       p->draft_min, sd_draft_mode_name(p->draft_mode));
    return sd_sampler_params_check(&p->sampling);
}

sd_status sd_spec_params_check(const sd_spec_params *p, int drafting, int model_drafts) {
    if (!p) return sd_fail(SD_ERR_INVALID_ARG, "no parameters");
    return check_params(p, drafting, drafting && model_drafts);
}

void sd_spec_free(sd_spec *s) {
    if (!s) return;
    if (s->owner) {
        sd_pair *pr = s->owner;
        s->owner = NULL;
        sd_pair_free(pr); /* frees s with the pair's other parts */
        return;
    }
    free(s->tokens);
    free(s->p_rows);
    free(s->q_rows);
    free(s->residual);
    free(s->scratch);
    free(s->picks);
    free(s->row_buf);
    free(s->pen_cnt);
    free(s->masks);
    sd_grammar_matcher_free(s->gm);
    free(s);
}

sd_status sd_spec_create_with(sd_spec_batch *batch, int seq, sd_drafter *drafter, const sd_spec_params *p,
                              sd_spec **out) {
    *out = NULL;
    sd_status st;
    if (!batch) return sd_fail(SD_ERR_INVALID_ARG, "no batch (sd_spec_batch_create over the target context)");
    sd_context *target = batch->ctx;
    const int has_model = sd_drafter_model_context(drafter) != NULL;
    if ((st = check_params(p, drafter != NULL, has_model)) != SD_OK) return st;
    if (seq < 0 || seq >= sd_context_n_seq(target))
        return sd_fail(SD_ERR_INVALID_ARG, "sequence %d not in the target context's %d", seq, sd_context_n_seq(target));
    const sd_model *tm = sd_context_model(target);
    const int n_vocab = sd_model_hparams(tm)->vocab_size;
    if (drafter && drafter->n_vocab > n_vocab)
        return sd_fail(SD_ERR_MISMATCH, "the drafter proposes ids up to %d; the target scores %d", drafter->n_vocab,
                       n_vocab);
    if (p->tree_budget > 0 && drafter && !drafter->vt->draft_tree)
        return sd_fail(SD_ERR_UNSUPPORTED, "the '%s' drafter proposes no trees (a draft model does)", drafter->name);
    if (drafter && (st = sd_drafter_set_sampling(drafter, &p->sampling)) != SD_OK) return st;
    sd_spec *s = calloc(1, sizeof *s);
    if (!s) return sd_fail(SD_ERR_NOMEM, "out of memory");
    s->batch = batch;
    s->seq = seq;
    s->drafter = drafter;
    s->has_model = has_model;
    s->p = *p; /* without a drafter, draft_max still bounds a grammar's forced drafts */
    s->n_vocab = n_vocab;
    s->n_ctx = sd_context_n_ctx(target);
    if (drafter && drafter->capacity < s->n_ctx) s->n_ctx = drafter->capacity;
    s->tok = sd_model_tokenizer(tm);
    sd_draft_ctl_init(&s->ctl);
    s->ctl.stepping = drafter ? drafter->stepping : 0;
    const int k = s->p.draft_max > s->p.tree_budget ? s->p.draft_max : s->p.tree_budget; /* rows of p and q */
    const size_t V = (size_t)n_vocab;
    s->k_alloc = k;
    s->tokens = malloc((size_t)s->n_ctx * sizeof(int32_t));
    s->p_rows = malloc((size_t)(k + 1) * V * sizeof(float));
    s->q_rows = malloc((size_t)(k + 1) * V * sizeof(float));
    s->residual = malloc(V * sizeof(float));
    s->scratch = malloc(sd_sample_scratch_bytes(n_vocab));
    s->picks = malloc((size_t)(k + 1) * sizeof(int32_t));
    s->row_buf = malloc(V * sizeof(float));
    s->pen_cnt = calloc(V, sizeof(int32_t));
    if (!s->tokens || !s->p_rows || !s->q_rows || !s->residual || !s->scratch || !s->picks || !s->row_buf || !s->pen_cnt) {
        sd_spec_free(s);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    *out = s;
    return SD_OK;
}

sd_status sd_spec_set_params(sd_spec *s, const sd_spec_params *p) {
    sd_status st = check_params(p, s->drafter != NULL, s->has_model);
    if (st != SD_OK) return st;
    if (s->active) return sd_fail(SD_ERR_INVALID_ARG, "spec: parameters cannot change while a generation runs");
    const int k = p->draft_max > p->tree_budget ? p->draft_max : p->tree_budget;
    if (k > s->k_alloc)
        return sd_fail(SD_ERR_INVALID_ARG, "spec: %d drafts per pass exceed the %d this engine was created for", k,
                       s->k_alloc);
    if (p->tree_budget > 0 && s->drafter && !s->drafter->vt->draft_tree)
        return sd_fail(SD_ERR_UNSUPPORTED, "the '%s' drafter proposes no trees (a draft model does)", s->drafter->name);
    if (s->drafter && (st = sd_drafter_set_sampling(s->drafter, &p->sampling)) != SD_OK) return st;
    const int ngram = s->p.ngram, n_ctx = s->p.n_ctx;
    const sd_type kv_type = s->p.kv_type;
    const int n_threads = s->p.n_threads;
    s->p = *p;
    s->p.ngram = ngram; /* the drafter and the contexts stay as created */
    s->p.n_ctx = n_ctx;
    s->p.kv_type = kv_type;
    s->p.n_threads = n_threads;
    return SD_OK;
}

const sd_spec_params *sd_spec_get_params(const sd_spec *s) { return &s->p; }

sd_context *sd_spec_target_context(sd_spec *s) { return s->batch->ctx; }
int sd_spec_seq(const sd_spec *s) { return s->seq; }
sd_drafter *sd_spec_drafter(sd_spec *s) { return s->drafter; }
const int32_t *sd_spec_tokens(const sd_spec *s, int *n) {
    *n = s->n_tokens;
    return s->tokens;
}
int sd_spec_done(const sd_spec *s) { return !s->active; }

/* ---- a generation --------------------------------------------------------------------------- */

/* Begins from prompt; src_seq >= 0: that sequence of the same context holds the prompt's rows
 * (its own generation's prompt), copied instead of prefilled. */
static sd_status begin(sd_spec *s, const int32_t *prompt, int n_prompt, int src_seq) {
    sd_context *tctx = s->batch->ctx;
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
    int keep = sd_context_seq_len(tctx, s->seq);
    if (keep > s->n_tokens) keep = s->n_tokens;
    int c = 0;
    while (c < keep && c < n_prompt - 1 && s->tokens[c] == prompt[c]) c++;
    sd_status rc = sd_context_seq_truncate(tctx, s->seq, c);
    if (rc != SD_OK) return rc;
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    s->n_tokens = n_prompt;
    if (src_seq >= 0 && n_prompt - 1 > c) { /* another sequence computed these rows already */
        if ((rc = sd_context_seq_copy(tctx, src_seq, s->seq, n_prompt - 1)) != SD_OK) return rc;
        c = n_prompt - 1;
    }
    st->n_reused = c; /* not prefilled: cached, or copied from the sequence that prefilled them */
    if (n_prompt - 1 > c && (rc = sd_context_forward(tctx, s->seq, prompt + c, n_prompt - 1 - c, NULL, 0)) != SD_OK)
        return rc;
    if (s->drafter && s->drafter->vt->sync && (rc = s->drafter->vt->sync(s->drafter, prompt, n_prompt)) != SD_OK)
        return rc;
    sd_grammar_matcher_free(s->gm); /* the last generation's */
    s->gm = NULL;
    if (s->p.grammar) {
        const int vn = sd_grammar_vocab_n(s->p.grammar_vocab), words = ((vn > s->n_vocab ? vn : s->n_vocab) + 63) / 64;
        if (words != s->mask_words) {
            free(s->masks);
            s->masks = malloc((size_t)(s->k_alloc + 2) * (size_t)words * sizeof *s->masks);
            s->mask_words = s->masks ? words : 0;
            if (!s->masks) return sd_fail(SD_ERR_NOMEM, "out of memory");
        }
        if ((rc = sd_grammar_matcher_create(s->p.grammar, s->p.grammar_vocab, &s->gm)) != SD_OK) return rc;
        s->gm_steps = 0;
    }
    st->t_prefill = sd_now() - s->t0;
    st->n_sources = s->drafter ? s->drafter->n_sources : 0;
    for (int i = 0; i < st->n_sources; i++) st->sources[i] = s->drafter->sources[i];
    if (s->gm) st->sources[st->n_sources++] = "grammar"; /* forced bytes as drafts */
    s->active = 1;
    return SD_OK;
}

sd_status sd_spec_begin(sd_spec *s, const int32_t *prompt, int n_prompt) { return begin(s, prompt, n_prompt, -1); }

sd_status sd_spec_begin_from(sd_spec *s, const sd_spec *src) {
    if (!src || src == s) return sd_fail(SD_ERR_INVALID_ARG, "begin_from: needs another engine");
    if (src->batch->ctx != s->batch->ctx)
        return sd_fail(SD_ERR_INVALID_ARG, "begin_from: engines %d and %d run on different target contexts", src->seq,
                       s->seq);
    const int n_prompt = src->st.n_prompt;
    if (n_prompt < 1 || sd_context_seq_len(src->batch->ctx, src->seq) < n_prompt - 1)
        return sd_fail(SD_ERR_INVALID_ARG, "begin_from: engine %d holds no prompt to share", src->seq);
    return begin(s, src->tokens, n_prompt, src->seq);
}

static void finish(sd_spec *s, sd_stop_reason reason) {
    s->active = 0;
    s->st.stop_reason = reason;
    s->st.t_total = sd_now() - s->t0;
}

void sd_spec_cancel(sd_spec *s) {
    if (s && s->active) finish(s, SD_STOP_CANCELLED); /* between rounds the caches match the history */
}

void sd_spec_get_stats(const sd_spec *s, sd_spec_stats *st) {
    *st = s->st;
    if (s->active) st->t_total = sd_now() - s->t0;
}

/* Appends one token to the history and hands it on; ends the generation on EOS, the budget,
 * the callback or the stop flag. Returns 1 when the generation has ended. */
static int emit(sd_spec *s, int32_t tok, sd_token_cb cb, void *user, sd_spec_round *out) {
    sd_spec_stats *st = &s->st;
    s->tokens[s->n_tokens++] = tok;
    if (out) {
        if (s->p.logprobs) out->logprobs[out->n_tokens] = s->lp[out->n_tokens];
        out->tokens[out->n_tokens++] = tok;
    }
    if (st->n_generated++ == 0) st->t_first = sd_now() - s->t0;
    if (cb && cb(tok, user)) finish(s, SD_STOP_CALLBACK);
    else if (s->p.stop_at_eos && s->tok && sd_tokenizer_is_eog(s->tok, tok)) finish(s, SD_STOP_EOS);
    else if (st->n_generated >= s->p.n_predict) finish(s, SD_STOP_LENGTH);
    else if (s->p.stop_flag && *s->p.stop_flag) finish(s, SD_STOP_CANCELLED);
    else if (s->n_tokens >= s->n_ctx) finish(s, SD_STOP_CONTEXT);
    return !s->active;
}

/* How the target's token at a row is chosen. */
static int sampling(const sd_spec *s) { return s->p.sampling.temperature > 0; }
static int coupled(const sd_spec *s) { return sampling(s) && s->p.sampling.mode == SD_SAMPLING_COUPLED; }

/* A row of the target's logits for history position pos, with the sampling penalties applied
 * from the history before it: s->tokens[0..pos) (drafts ahead of the history are written there
 * first, see with_drafts). */
static const float *target_row(sd_spec *s, const float *row, int64_t pos, int i) {
    if (!sd_sampler_has_penalties(&s->p.sampling) && !s->gm) return row;
    memcpy(s->row_buf, row, (size_t)s->n_vocab * sizeof(float));
    sd_penalize(&s->p.sampling, s->tokens, (int)pos, s->st.n_prompt, s->row_buf, s->n_vocab, s->pen_cnt);
    /* the constrained distribution: p restricted to what the grammar allows here, renormalised */
    if (s->gm) sd_grammar_mask_logits(s->masks + (size_t)i * (size_t)s->mask_words, s->row_buf, s->n_vocab, -1e30f);
    return s->row_buf;
}

/* Writes the tokens of tree node u's path (or the chain's first u drafts) after the history, so
 * that s->tokens[0..n_hist + depth) is the history row u scores. Room: the round's drafts fit. */
static int with_path(sd_spec *s, int u) {
    if (!s->rnd.tree) {
        memcpy(s->tokens + s->n_tokens, s->rnd.chain + 1, (size_t)u * sizeof(int32_t));
        return u;
    }
    int d = 0;
    for (int v = u; v > 0; v = s->tree_par[v]) d++;
    for (int v = u, i = d - 1; v > 0; v = s->tree_par[v], i--) s->tokens[s->n_tokens + i] = s->tree_tok[v];
    return d;
}

/* The target's own token for history position pos from a row of logits: the argmax (greedy),
 * the race's winner (coupled), or a draw from the RNG stream (rejection). prob: [n_vocab] room. */
static sd_status target_pick(sd_spec *s, const float *raw, int64_t pos, int i, float *prob, int32_t *tok) {
    const float *row = target_row(s, raw, pos, i);
    if (!sampling(s)) {
        *tok = sd_argmax(row, s->n_vocab);
        return SD_OK;
    }
    sd_status st = sd_sample_probs(&s->p.sampling, row, s->n_vocab, prob, s->scratch);
    if (st != SD_OK) return st;
    *tok = coupled(s) ? sd_sample_coupled(prob, s->n_vocab, sd_coupled_key(s->p.sampling.seed, pos))
                      : sd_sample_draw(prob, s->n_vocab, &s->rng);
    return SD_OK;
}

/* The end of a round whose accepted drafts (m of them: acc[0..m)) and target token `next` are
 * known: emits them until the generation ends, then the target keeps the history but its last
 * token. n_drafted proposals reached depths 1..depth. */
static sd_status end_round(sd_spec *s, const int32_t *acc, int m, int32_t next, int n_drafted, int depth, int source,
                           sd_token_cb cb, void *user, sd_spec_round *out) {
    sd_spec_stats *st = &s->st;
    int emitted = 0;
    for (int i = 0; i <= m && s->active; i++) {
        emit(s, i < m ? acc[i] : next, cb, user, out);
        emitted += i < m;
        if (!s->gm) continue;
        /* the constraint follows the history (the emitted tokens came from masked rows), token by
         * token: where it allows nothing more the generation ends there, as plain decoding's
         * does, and the token sampled past that point (the only one a finished grammar allows:
         * the end of generation) is not emitted */
        const int at = s->n_tokens - 1;
        if (sd_grammar_matcher_accept(s->gm, s->tokens[at]) != SD_OK) {
            finish(s, SD_STOP_NONE);
            return sd_fail(SD_ERR_INVALID_ARG, "grammar: token %d at %d is not allowed (an engine bug)", (int)s->tokens[at],
                           at);
        }
        if (s->active && sd_grammar_matcher_is_done(s->gm)) finish(s, SD_STOP_EOS);
    }
    if (s->gm) s->gm_steps = sd_grammar_matcher_n_steps(s->gm);
    if (n_drafted > 0) {
        const int nf = s->rnd.tree ? 0 : s->rnd.n_forced, acc_f = emitted < nf ? emitted : nf;
        st->n_verify++;
        st->n_drafted += n_drafted;
        st->n_accepted += emitted;
        if (nf > 0) { /* the grammar's forced drafts: the last source */
            st->drafted_by[st->n_sources - 1] += nf;
            st->accepted_by[st->n_sources - 1] += acc_f;
        }
        st->drafted_by[source] += n_drafted - nf;
        st->accepted_by[source] += emitted - acc_f;
        for (int i = 0; i < depth; i++) {
            st->drafted_at[i]++;
            if (i < emitted) st->accepted_at[i]++;
        }
    }
    if (out) {
        out->n_drafted = n_drafted;
        out->n_accepted = n_drafted > 0 ? emitted : 0;
        out->depth = depth;
        out->source = source;
        out->done = !s->active;
    }
    sd_context *tctx = s->batch->ctx;
    sd_status rc = sd_context_seq_truncate(tctx, s->seq, s->n_tokens - 1);
    if (rc != SD_OK) return rc;
    if (!s->active) {
        st->kv_bytes_target = (size_t)sd_context_seq_len(tctx, s->seq) * sd_kv_bytes_per_token(sd_context_kv(tctx));
        sd_context *dc = sd_drafter_model_context(s->drafter);
        int n_fed = 0;
        sd_drafter_model_tokens(s->drafter, &n_fed);
        if (dc) st->kv_bytes_draft = (size_t)n_fed * sd_kv_bytes_per_token(sd_context_kv(dc));
    }
    if (s->p.on_step) s->p.on_step(s, s->p.step_user);
    return SD_OK;
}

/* ---- the round's phases --------------------------------------------------------------------- */

/* The bytes the grammar forces next, as at most cap tokens proposed ahead of the drafter's: the
 * tokenizer's own split of them (the target's likeliest), or where that is not allowed here (a
 * SentencePiece fragment's leading space), the longest allowed token that spells a prefix of
 * them, step by step. Written to chain[1..] and after the history; the matcher is left after them. */
/* The confidence forced drafts are judged and learned at: certain as far as the grammar goes, but
 * the target may spell the bytes with other tokens, so a neutral prior that their record moves. */
#define FORCED_CONF 0.5f

static int forced_drafts(sd_spec *s, int cap) {
    char buf[256];
    const size_t got = sd_grammar_matcher_forced_bytes(s->gm, buf, sizeof buf);
    const size_t nb = got < sizeof buf ? got : sizeof buf;
    if (nb == 0 || cap < 1) return 0;
    if (cap > SD_MAX_DRAFT) cap = SD_MAX_DRAFT;
    int32_t ids[SD_MAX_DRAFT];
    int n = 0, r = 0, judged_stop = 0;
    if (s->tok) sd_tokenizer_tokenize(s->tok, buf, nb, 0, 0, ids, cap, &n); /* more than cap: the first cap */
    for (int i = 0; i < n && i < cap && sd_grammar_matcher_allows(s->gm, ids[i]); i++) {
        if (sd_draft_ctl_judge_free(&s->ctl, SD_CTL_SOURCE_GRAMMAR, FORCED_CONF, s->drafter != NULL) != SD_DRAFT_MORE) {
            judged_stop = 1;
            break;
        }
        if (sd_grammar_matcher_accept(s->gm, ids[i]) != SD_OK) break;
        s->rnd.chain[1 + r++] = ids[i];
    }
    for (size_t at = 0; r == 0 && !judged_stop && at < nb && r < cap;) {
        uint64_t *mask = s->masks;
        memset(mask, 0, (size_t)s->mask_words * sizeof *mask);
        if (sd_grammar_matcher_mask(s->gm, mask) != SD_OK) break;
        int32_t best = -1;
        size_t best_len = 0;
        for (int w = 0; w < s->mask_words; w++)
            for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
                const int32_t t = w * 64 + __builtin_ctzll(bits);
                size_t len = 0;
                const uint8_t *b = t < s->n_vocab ? sd_grammar_vocab_bytes(s->p.grammar_vocab, t, &len) : NULL;
                if (b && len > best_len && len <= nb - at && !memcmp(b, buf + at, len)) best = t, best_len = len;
            }
        if (best < 0 || sd_draft_ctl_judge_free(&s->ctl, SD_CTL_SOURCE_GRAMMAR, FORCED_CONF, s->drafter != NULL) != SD_DRAFT_MORE ||
            sd_grammar_matcher_accept(s->gm, best) != SD_OK)
            break;
        s->rnd.chain[1 + r++] = best;
        at += best_len;
    }
    memcpy(s->tokens + s->n_tokens, s->rnd.chain + 1, (size_t)r * sizeof(int32_t));
    return r;
}

int sd_seq_plan(sd_spec *s, int share, int allowed, int others_n, double others_e, double others_t, sd_status *rc) {
    *rc = SD_OK;
    if (!s->active) return 1;
    if (s->p.stop_flag && *s->p.stop_flag) {
        finish(s, SD_STOP_CANCELLED);
        return 1;
    }
    const int n_hist = s->n_tokens;
    if (sd_context_seq_len(s->batch->ctx, s->seq) != n_hist - 1) {
        *rc = sd_fail(SD_ERR_INVALID_ARG, "spec: the target sequence holds %d tokens, the history %d (another user of sequence %d?)",
                      sd_context_seq_len(s->batch->ctx, s->seq), n_hist, s->seq);
        return 1;
    }
    /* Drafts that could still be emitted: context room (the history takes at most n_ctx
     * tokens) and the generation budget, each less the token the target adds itself. */
    const int room = s->n_ctx - n_hist, left = s->p.n_predict - s->st.n_generated;
    memset(&s->rnd, 0, sizeof s->rnd);
    s->rnd.chain[0] = s->tokens[n_hist - 1];
    s->rnd.room = room;
    s->rnd.share = share;
    s->rnd.t_draft0 = s->st.t_draft;
    int cap = room - 1 < left - 1 ? room - 1 : left - 1;
    if (cap > share) cap = share;
    if (s->gm && sd_grammar_matcher_is_done(s->gm)) { /* nothing more may be generated */
        finish(s, SD_STOP_EOS);
        return 1;
    }
    /* the controller first: it judges the grammar's forced drafts too, then the drafter's after them */
    const sd_draft_round_in in = {room - 1 < left - 1 ? room - 1 : left - 1, share, allowed, others_n, others_e, others_t};
    const sd_draft_costs *costs = s->p.costs.given ? &s->p.costs : &s->batch->costs;
    int k = 0;
    if (s->p.tree_budget > 0 && s->drafter) { /* a tree: the controller's limits, not its judging */
        sd_spec_params fixed = s->p;
        fixed.draft_mode = SD_DRAFT_FIXED;
        k = sd_draft_ctl_plan(&s->ctl, &fixed, costs, &in);
        s->rnd.tree = k >= 1;
    } else {
        k = sd_draft_ctl_plan(&s->ctl, &s->p, costs, &in);
    }
    if (s->gm && s->p.grammar_drafts && !s->rnd.tree) {
        const int kf = s->p.draft_max < s->k_alloc ? s->p.draft_max : s->k_alloc; /* the round's rows */
        s->rnd.n_forced = forced_drafts(s, cap < kf ? cap : kf);
    }
    const int nf = s->rnd.n_forced;
    if (k > cap - nf) k = cap - nf;
    if (nf + k > s->k_alloc) k = s->k_alloc - nf;
    s->rnd.k = s->drafter && k > 0 ? k : 0;
    return 0;
}

void sd_seq_fill_req(sd_spec *s) {
    sd_draft_req *req = &s->rnd.req;
    const int nf = s->rnd.n_forced; /* the drafter continues after the forced drafts */
    req->hist = s->tokens;
    req->n_hist = s->n_tokens + nf;
    req->n_prompt = s->st.n_prompt;
    req->k = s->rnd.k;
    req->rng = &s->rng;
    req->q = s->q_rows + (size_t)nf * (size_t)s->n_vocab; /* recorded only for rejection sampling */
    req->policy = sd_draft_ctl_policy(&s->ctl);
    req->grammar = s->gm;
    req->mask = s->masks;
    req->out = s->rnd.chain + 1 + nf;
    req->conf = s->conf;
    req->n_synced = 0;
}

sd_status sd_seq_check_req(sd_spec *s, double td, int n_synced) {
    sd_draft_req *req = &s->rnd.req;
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
    /* a draft step's cost from rounds whose model caught up only on the last round's tokens: a new
     * prompt or a probe after plain rounds feeds many more, which is no step's price. Per forward
     * pass run, not per proposal: a round the controller ended before a proposal ran one pass more
     * than it proposed, and counting it per proposal priced short rounds' steps too high
     * (measured: commit c712845), which made the next rounds shorter still. A lookup (no pass)
     * prices nothing. */
    if (!s->p.costs.given && n_synced <= SYNC_ROUND && req->n_steps > 0)
        sd_draft_costs_draft(&s->batch->costs, req->n_steps, td);
    else if (!s->p.costs.given && req->n_steps > 0) /* what a probe after plain rounds will cost */
        sd_draft_costs_catchup(&s->batch->costs, n_synced, req->n_steps, td);
    if (n_synced > SYNC_ROUND && req->n_steps > 0) /* the batch switch's price of a try */
        s->rnd.t_catchup = sd_draft_costs_catchup_seconds(&s->batch->costs, req->n_steps, td);
    /* llama-server's n_min: too short a chain is not worth its pass (check_params refused the
     * combinations where dropping it by its length would bias the output) */
    if (req->n_out > 0 && req->n_out < s->p.draft_min) req->n_out = 0;
    return SD_OK;
}

sd_status sd_seq_draft(sd_spec *s) {
    sd_spec_stats *st = &s->st;
    const int n_hist = s->n_tokens, k = s->rnd.k;
    if (k < 1) return SD_OK;
    sd_status rc;
    if (s->rnd.tree) {
        sd_draft_tree_req r;
        memset(&r, 0, sizeof r);
        r.hist = s->tokens;
        r.n_hist = n_hist;
        r.n_prompt = s->st.n_prompt;
        r.rng = &s->rng;
        r.budget = s->p.tree_budget < s->rnd.room ? s->p.tree_budget : s->rnd.room; /* its rows must fit */
        if (r.budget > s->rnd.share) r.budget = s->rnd.share;
        r.depth = k;
        r.branch = s->p.tree_branch;
        r.width = s->p.tree_width;
        r.tok = s->tree_tok;
        r.par = s->tree_par;
        r.q = s->q_rows;
        double td = sd_now();
        rc = s->drafter->vt->draft_tree(s->drafter, &r);
        st->t_draft += sd_now() - td;
        if (rc != SD_OK) return rc;
        if (r.n < 1 || r.n > r.budget + 1 || r.par[0] != -1 || r.tok[0] != s->tokens[n_hist - 1])
            return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' returned a tree of %d nodes (budget %d) without its root",
                           s->drafter->name, r.n, r.budget);
        if (sampling(s) && !coupled(s) && !r.q_filled)
            return sd_fail(SD_ERR_INVALID_ARG, "drafter '%s' returned a sampled tree without its distributions",
                           s->drafter->name);
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
    sd_seq_fill_req(s);
    double td = sd_now();
    rc = s->drafter->vt->draft(s->drafter, &s->rnd.req);
    td = sd_now() - td;
    st->t_draft += td;
    return rc == SD_OK ? sd_seq_check_req(s, td, s->rnd.req.n_synced) : rc;
}

sd_status sd_seq_add(sd_spec *s, sd_verify_round *vr) {
    if (s->rnd.tree) return sd_verify_round_add_tree(vr, s->seq, s->tree_tok, s->tree_par, s->rnd.n_nodes, &s->rnd.row0);
    const int nf = s->rnd.n_forced;
    int nd = nf + s->rnd.req.n_out;
    if (s->gm) {
        /* the grammar's mask at every row (the history, then each draft in turn); a draft it refuses
         * (prompt lookup knows no grammar) ends the chain before it: no row after it is of use */
        const size_t W = (size_t)s->mask_words;
        sd_status rc = sd_grammar_matcher_rollback(s->gm, s->gm_steps);
        for (int i = 0; i <= nd && rc == SD_OK; i++) {
            memset(s->masks + i * W, 0, W * sizeof *s->masks);
            rc = sd_grammar_matcher_mask(s->gm, s->masks + i * W);
            if (rc == SD_OK && i < nd && sd_grammar_matcher_accept(s->gm, s->rnd.chain[1 + i]) != SD_OK) nd = i;
        }
        if (rc == SD_OK) rc = sd_grammar_matcher_rollback(s->gm, s->gm_steps);
        if (rc != SD_OK) return rc;
    }
    if (nf > 0 && s->rnd.req.q_filled) /* forced drafts beside a model's: their q is one-hot */
        for (int i = 0; i < nf; i++) {
            float *q = s->q_rows + (size_t)i * (size_t)s->n_vocab;
            memset(q, 0, (size_t)s->n_vocab * sizeof *q);
            q[s->rnd.chain[1 + i]] = 1.0f;
        }
    s->rnd.nd = nd;
    return sd_verify_round_add_chain(vr, s->seq, s->rnd.chain, nd + 1, &s->rnd.row0);
}

/* The target's token at every row of the round (greedy or coupled): row i scores history
 * position n_hist + depth(i), where a chain's depth(i) is i. A chain stops at its first row
 * whose token is not the draft: sd_verify_greedy reads no row after it. */
static sd_status picks(sd_spec *s, const sd_verify_round *vr, int n) {
    const size_t V = (size_t)s->n_vocab;
    const int pen = sd_sampler_has_penalties(&s->p.sampling) || s->gm;
    for (int i = 0; i < n; i++) {
        const int d = pen || s->rnd.tree ? with_path(s, i) : i;
        const int64_t pos = (int64_t)s->n_tokens + d;
        sd_status rc =
            target_pick(s, sd_verify_round_logits(vr, s->rnd.row0 + i), pos, i, s->p_rows + (size_t)i * V, &s->picks[i]);
        if (rc != SD_OK) return rc;
        if (!s->rnd.tree && i < n - 1 && s->picks[i] != s->rnd.chain[1 + i]) break;
    }
    return SD_OK;
}

/* The target's processed distribution at row i (rejection sampling). */
static sd_status row_probs(sd_spec *s, const sd_verify_round *vr, int i) {
    const int pen = sd_sampler_has_penalties(&s->p.sampling) || s->gm;
    const float *raw = sd_verify_round_logits(vr, s->rnd.row0 + i);
    const float *row = pen ? target_row(s, raw, (int64_t)s->n_tokens + with_path(s, i), i) : raw;
    return sd_sample_probs(&s->p.sampling, row, s->n_vocab, s->p_rows + (size_t)i * (size_t)s->n_vocab, s->scratch);
}

/* Rejection sampling along a chain of nd drafts, row by row: the rows after the first rejection
 * are never computed. Sets *m (accepted) and *next. */
static sd_status chain_stochastic(sd_spec *s, const sd_verify_round *vr, int nd, const float *q, int *m,
                                  int32_t *next) {
    const size_t V = (size_t)s->n_vocab;
    for (int i = 0; i <= nd; i++) {
        sd_status rc = row_probs(s, vr, i);
        if (rc != SD_OK) return rc;
        const float *pi = s->p_rows + (size_t)i * V;
        if (i == nd) {
            *m = nd;
            *next = sd_sample_draw(pi, s->n_vocab, &s->rng);
        } else if (!sd_verify_stochastic_step(pi, q ? q + (size_t)i * V : NULL, s->rnd.chain[1 + i], s->n_vocab, &s->rng,
                                              s->residual, next)) {
            *m = i;
            break;
        }
    }
    return SD_OK;
}

sd_status sd_seq_finish(sd_spec *s, const sd_verify_round *vr, sd_token_cb cb, void *user, sd_spec_round *out) {
    sd_spec_stats *st = &s->st;
    const int n_hist = s->n_tokens, row0 = s->rnd.row0;
    const int exact_match = !sampling(s) || coupled(s); /* a draft is accepted iff it is the target's token */
    double ts = sd_now();
    sd_status rc = SD_OK;
    int m = 0;
    int32_t next = 0, acc[SD_MAX_DRAFT];
    if (out) memset(out, 0, sizeof *out);
    if (s->rnd.tree) {
        const int n = s->rnd.n_nodes;
        if (exact_match) {
            rc = picks(s, vr, n);
            if (rc == SD_OK) m = sd_verify_tree_greedy(s->tree_tok, s->tree_par, n, s->picks, s->path, &next);
        } else {
            for (int i = 0; i < n && rc == SD_OK; i++) rc = row_probs(s, vr, i);
            if (rc == SD_OK)
                m = sd_verify_tree_stochastic(s->tree_tok, s->tree_par, n, s->p_rows, s->q_rows, s->n_vocab, &s->rng,
                                              s->residual, s->path, &next);
        }
        /* the root and the accepted path: their rows go behind the history in path order */
        if (rc == SD_OK) rc = sd_target_keep_path(s->batch->ctx, s->seq, n_hist - 1, s->path, m + 1);
        for (int i = 0; i < m; i++) acc[i] = s->tree_tok[s->path[1 + i]];
    } else {
        const int nd = s->rnd.nd, nf = s->rnd.n_forced;
        if (nd == 0) {
            st->n_target_steps++;
            rc = target_pick(s, sd_verify_round_logits(vr, row0), n_hist, 0, s->p_rows, &next);
        } else if (exact_match) {
            rc = picks(s, vr, nd + 1);
            if (rc == SD_OK) m = sd_verify_greedy(s->rnd.chain + 1, nd, s->picks, &next);
        } else {
            const float *q = s->rnd.req.q_filled ? s->q_rows : NULL; /* none: deterministic drafts, q one-hot */
            rc = chain_stochastic(s, vr, nd, q, &m, &next);
        }
        /* the controller learns from the forced drafts, and from its drafter's, tried once the forced
         * ones were accepted */
        if (rc == SD_OK && nf > 0) {
            float sure[SD_MAX_DRAFT];
            for (int i = 0; i < nf; i++) sure[i] = FORCED_CONF;
            sd_draft_ctl_record(&s->ctl, SD_CTL_SOURCE_GRAMMAR, sure, nf, m < nf ? m : nf);
        }
        if (rc == SD_OK && nd > nf && m >= nf) sd_draft_ctl_record(&s->ctl, s->rnd.req.source, s->conf, nd - nf, m - nf);
        memcpy(acc, s->rnd.chain + 1, (size_t)m * sizeof *acc);
    }
    st->t_sample += sd_now() - ts;
    if (rc != SD_OK) {
        sd_context_seq_truncate(s->batch->ctx, s->seq, n_hist - 1);
        return rc;
    }
    /* the model's log-probabilities of the round's tokens (the accepted drafts, then the target's),
     * each from the row that scores it: what decoding it alone would give */
    for (int i = 0; s->p.logprobs && i <= m && rc == SD_OK; i++) {
        const int row = row0 + (s->rnd.tree ? s->path[i] : i);
        rc = sd_logprobs(sd_verify_round_logits(vr, row), s->n_vocab, i < m ? acc[i] : next, s->p.top_logprobs, &s->lp[i]);
    }
    if (rc != SD_OK) {
        sd_context_seq_truncate(s->batch->ctx, s->seq, n_hist - 1);
        return rc;
    }
    const int n_drafted = s->rnd.tree ? s->rnd.n_nodes - 1 : s->rnd.nd;
    const int depth = s->rnd.tree ? s->rnd.max_depth : n_drafted;
    /* this round as the others of the next shared one see it */
    s->last_n = n_drafted + 1;
    s->last_td = s->st.t_draft - s->rnd.t_draft0;
    const int before = s->st.n_generated;
    rc = end_round(s, acc, m, next, n_drafted, depth, s->rnd.tree ? 0 : s->rnd.req.source, cb, user, out);
    s->last_e = s->st.n_generated - before;
    return rc;
}

/* ---- one sequence's loop --------------------------------------------------------------------- */

sd_status sd_spec_step(sd_spec *s, sd_token_cb cb, void *user, sd_spec_round *round) {
    return sd_batch_step_cb(s->batch, &s, 1, round, cb, user);
}

sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                           sd_spec_stats *stats) {
    sd_status rc = sd_spec_begin(s, prompt, n_prompt);
    while (rc == SD_OK && s->active) rc = sd_spec_step(s, cb, user, NULL);
    if (stats) sd_spec_get_stats(s, stats);
    return rc;
}
