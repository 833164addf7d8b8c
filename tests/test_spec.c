/* The speculative core end to end: greedy losslessness for every kind of draft, rollback
 * invariants after each verify pass, sampling exactness (chi-square against the target's exact
 * distribution, with controls), incompatible pairs, and context exhaustion. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "kernels/kernels.h"
#include "specdec/gguf.h"
#include "specdec/grammar.h"
#include "specdec/sample.h"
#include "specdec/spec.h"
#include "specdec/synth.h"
#include "specdec/tokenizer.h"
#include "specdec/verify.h"

/* A draft of random weights agrees with a trained target about as often as chance (1/512 per
 * token, plus the odd frequent token): anything above this means the draft is not random. */
#define MAX_RANDOM_DRAFT_ACCEPTANCE 0.10

/* Tokens per generation in the greedy and rollback tests. The sanitizer build checks the same
 * length: the tree test compares tokens per pass, which a shorter run (where a chain of 4 can
 * accept everything) cannot separate. */
#define N_GEN 100

#define REAL_TARGET "models/stories260K/stories260K.bin"
#define REAL_DRAFT "models/stories-draft/stories-draft.bin"
#define REAL_TOKENIZER "models/stories260K/tok512.bin"
#define LLAMA2_TOKENIZER "tokenizers/llama2/tokenizer.bin"

/* ---------------------------------------------------------------- helpers */

typedef struct {
    int32_t out[1024];
    int n;
    int stop_after; /* 0: never stop from the callback */
} collect;

static int collect_cb(int32_t t, void *u) {
    collect *c = u;
    if (c->n < (int)(sizeof c->out / sizeof *c->out)) c->out[c->n] = t;
    c->n++;
    return c->stop_after > 0 && c->n >= c->stop_after;
}

/* Fixed k: the tests below count drafts per round. */
static sd_spec_params greedy_params(int n_predict, int k) {
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = n_predict;
    p.draft_max = k;
    p.draft_mode = SD_DRAFT_FIXED;
    p.stop_at_eos = 0;
    return p;
}

/* Generates with (target, draft) under params p; tokens go to c, stats to st. */
static void generate(sd_model *target, sd_model *draft, const sd_spec_params *p, const int32_t *prompt,
                     int n_prompt, collect *c, sd_spec_stats *st) {
    sd_spec *s = NULL;
    if (sd_spec_create(target, draft, p, &s) != SD_OK) fail_msg("sd_spec_create: %s", sd_last_error());
    memset(c, 0, sizeof *c);
    if (sd_spec_generate(s, prompt, n_prompt, collect_cb, c, st) != SD_OK)
        fail_msg("sd_spec_generate: %s", sd_last_error());
    sd_spec_free(s);
}

/* Bookkeeping every run must satisfy. A run that stopped by length or context (no EOS, no
 * callback) emits exactly one token per target pass plus one per accepted draft: m + 1 per verify
 * pass and 1 per plain step (drafts are capped so a pass never overshoots). */
static void check_stats(const sd_spec_stats *st, int k, int n_emitted) {
    assert_int_equal(st->n_generated, n_emitted);
    assert_true(st->n_accepted >= 0 && st->n_accepted <= st->n_drafted);
    assert_int_equal(st->k, k);
    int sum_d = 0, sum_a = 0;
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        sum_d += st->drafted_at[i];
        sum_a += st->accepted_at[i];
        assert_true(st->accepted_at[i] <= st->drafted_at[i]);
        if (i >= k) assert_int_equal(st->drafted_at[i], 0);
        /* a pass that drafted position i drafted every earlier one; accepting position i means
         * accepting every earlier one */
        if (i > 0) {
            assert_true(st->drafted_at[i] <= st->drafted_at[i - 1]);
            assert_true(st->accepted_at[i] <= st->accepted_at[i - 1]);
        }
    }
    assert_int_equal(sum_d, st->n_drafted);
    assert_int_equal(sum_a, st->n_accepted);
    assert_int_equal(st->drafted_at[0], st->n_verify); /* every verify pass drafts >= 1 */
    if (k == 0) assert_int_equal(st->n_verify, 0);
    if (st->stop_reason == SD_STOP_LENGTH || st->stop_reason == SD_STOP_CONTEXT)
        assert_int_equal(st->n_generated, st->n_target_steps + st->n_verify + st->n_accepted);
}

static int encode(const sd_model *m, const char *text, int32_t *ids, int cap) {
    int n = 0;
    if (sd_tokenizer_encode(sd_model_tokenizer(m), text, strlen(text), 1, ids, cap, &n) != SD_OK)
        fail_msg("encode \"%s\": %s", text, sd_last_error());
    assert_true(n >= 2 && ids[0] == sd_tokenizer_bos(sd_model_tokenizer(m)));
    return n;
}

/* Plain greedy reference vs speculative greedy for each k: identical token for token. */
static void check_lossless(sd_model *target, sd_model *draft, const int32_t *prompt, int n_prompt,
                           int n_predict, double *acceptance_out) {
    static const int ks[] = {1, 2, 4, 8};
    sd_spec_params pp = greedy_params(n_predict, 0);
    collect plain;
    sd_spec_stats pst;
    generate(target, NULL, &pp, prompt, n_prompt, &plain, &pst);
    check_stats(&pst, 0, n_predict);
    assert_int_equal(pst.n_target_steps, n_predict);
    long drafted = 0, accepted = 0;
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        sd_spec_params sp = greedy_params(n_predict, ks[i]);
        collect spec;
        sd_spec_stats st;
        generate(target, draft, &sp, prompt, n_prompt, &spec, &st);
        assert_int_equal(st.stop_reason, SD_STOP_LENGTH);
        check_stats(&st, ks[i], n_predict);
        assert_int_equal(spec.n, n_predict);
        for (int t = 0; t < n_predict; t++)
            if (spec.out[t] != plain.out[t])
                fail_msg("k=%d: token %d is %d speculatively, %d plainly", ks[i], t, spec.out[t], plain.out[t]);
        if (draft == target) { /* self-drafting: the draft is the target, so all are accepted */
            assert_int_equal(st.n_accepted, st.n_drafted);
            assert_memory_equal(st.accepted_at, st.drafted_at, sizeof st.drafted_at);
            /* only the very last token can need a plain step (k shrinks to fit n_predict) */
            assert_true(st.n_target_steps <= 1);
        }
        drafted += st.n_drafted;
        accepted += st.n_accepted;
    }
    if (acceptance_out) *acceptance_out = drafted ? (double)accepted / (double)drafted : 0;
}

/* A synthetic model whose tokenizer metadata is replaced by tk's pieces and types (same size):
 * the weights are random but the vocabulary is the real one, so the pair passes the
 * compatibility check. Only piece text (and BOS/EOS) takes part in that check; the pieces'
 * merge scores do not (they only steer encoding, and this model never encodes), so they are 0. */
static sd_model *synth_with_tokenizer(const sd_synth_params *p, const sd_tokenizer *tk) {
    const int n = sd_tokenizer_n_vocab(tk);
    assert_int_equal(n, p->vocab_size);
    sd_gguf_writer *w = NULL;
    assert_int_equal(sd_synth_build(p, &w), SD_OK);
    char **pieces = calloc((size_t)n, sizeof *pieces);
    float *scores = calloc((size_t)n, sizeof *scores);
    int32_t *types = calloc((size_t)n, sizeof *types);
    assert_true(pieces && scores && types);
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *s = sd_tokenizer_piece(tk, id, &len);
        assert_non_null(s);
        pieces[id] = strndup(s, len);
        types[id] = sd_tokenizer_token_type(tk, id);
    }
    assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)sd_tokenizer_bos(tk)), SD_OK);
    assert_int_equal(sd_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)sd_tokenizer_eos(tk)), SD_OK);
    static int counter;
    char name[64];
    snprintf(name, sizeof name, "vocab%d.gguf", counter++);
    const char *path = sdtest_tmp_path(name);
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_model *m = NULL;
    if (sd_model_load(path, NULL, &m) != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    remove(path); /* the mapping stays valid */
    for (int i = 0; i < n; i++) free(pieces[i]);
    free(pieces);
    free(scores);
    free(types);
    sd_gguf_writer_free(w);
    return m;
}

static sd_tokenizer *load_llama2c_tokenizer(const char *rel, int n_vocab) {
    char *path = sdtest_shared_or_skip(rel);
    sd_tokenizer *tk = NULL;
    if (sd_tokenizer_load_llama2c(path, n_vocab, &tk) != SD_OK) fail_msg("%s: %s", path, sd_last_error());
    free(path);
    return tk;
}

/* Skips the test unless every listed shared file is present. Called before anything is
 * allocated: a skip leaves the test by longjmp, and LeakSanitizer would report what it left. */
static void require_shared(const char *a, const char *b, const char *c) {
    const char *rel[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (rel[i]) free(sdtest_shared_or_skip(rel[i]));
}

static const char *const k_prompts[] = {"Once upon a time", "Lily and Tom went to the park", "The little dog"};

/* ---------------------------------------------------------------- 1. greedy losslessness */

/* (a) The target drafting for itself: every draft is accepted and the output is unchanged. */
static void test_greedy_self_draft_tiny(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(64, 4, 8, 2, 96, 320, 21);
    const int32_t prompt[4] = {1, 300, 17, 42};
    check_lossless(m, m, prompt, 4, N_GEN, NULL);
    sd_model_free(m);
}

static void test_greedy_self_draft_real(void **state) {
    (void)state;
    sd_model *m = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    for (size_t i = 0; i < sizeof k_prompts / sizeof *k_prompts; i++) {
        int32_t prompt[64];
        int n = encode(m, k_prompts[i], prompt, 64);
        check_lossless(m, m, prompt, n, N_GEN, NULL);
    }
    sd_model_free(m);
}

/* (b) The distilled draft with its target: same output, and a useful acceptance rate. */
static void test_greedy_real_pair(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_DRAFT, REAL_TOKENIZER);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_model *d = sdtest_shared_model(REAL_DRAFT, REAL_TOKENIZER);
    for (size_t i = 0; i < sizeof k_prompts / sizeof *k_prompts; i++) {
        int32_t prompt[64];
        int n = encode(t, k_prompts[i], prompt, 64);
        double acc = 0;
        check_lossless(t, d, prompt, n, N_GEN, &acc);
        printf("  \"%s\": real draft acceptance %.2f over k = 1, 2, 4, 8\n", k_prompts[i], acc);
        /* The draft's top-1 agrees ~70% of the time on the target's trajectories; even a
         * pessimistic bound shows that the drafts are being used, not discarded. */
        assert_true(acc > 0.3);
    }
    sd_model_free(d);
    sd_model_free(t);
}

/* (c) A random-weight draft with the real vocabulary: nearly everything is rejected, and the
 * output is still the target's. */
static void test_greedy_random_draft(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_TOKENIZER, NULL);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_tokenizer *tk = load_llama2c_tokenizer(REAL_TOKENIZER, 512);
    sd_synth_params p = sdtest_synth_shape(32, 1, 4, 4, 64, 512, 512, 99);
    sd_model *d = synth_with_tokenizer(&p, tk);
    for (size_t i = 0; i < sizeof k_prompts / sizeof *k_prompts; i++) {
        int32_t prompt[64];
        int n = encode(t, k_prompts[i], prompt, 64);
        double acc = 1;
        check_lossless(t, d, prompt, n, N_GEN, &acc);
        printf("  \"%s\": random draft acceptance %.3f\n", k_prompts[i], acc);
        assert_true(acc < MAX_RANDOM_DRAFT_ACCEPTANCE);
    }
    sd_model_free(d);
    sd_tokenizer_free(tk);
    sd_model_free(t);
}

/* (d) Generated GQA pairs sharing the synthetic vocabulary (no shared data needed). */
static void test_greedy_tiny_gqa_pair(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(64, 4, 8, 2, 128, 320, 256, 31);
    sd_synth_params dp = sdtest_synth_shape(32, 1, 4, 2, 64, 320, 256, 32);
    sd_model *t = sdtest_synth_model(&tp);
    sd_model *d = sdtest_synth_model(&dp);
    const int32_t prompts[2][5] = {{1, 300, 3 + 'a', 301, 7}, {1, 5, 6, 7, 8}};
    for (int i = 0; i < 2; i++) check_lossless(t, d, prompts[i], 5, N_GEN, NULL);
    /* Another draft shape: two layers, GQA 2:1, head_dim 8. */
    sd_synth_params sp = sdtest_synth_shape(48, 2, 6, 3, 96, 320, 256, 33);
    sd_model *d2 = sdtest_synth_model(&sp);
    check_lossless(t, d2, prompts[1], 5, 60, NULL);
    sd_model_free(d2);
    sd_model_free(d);
    sd_model_free(t);
}

/* ---------------------------------------------------------------- 2. rollback
 *
 * After every round the live caches are compared with fresh prefills of the tokens they claim
 * to hold. The fresh prefills go in chunks of at most SD_SMALL_BATCH tokens, which sum in the
 * decode order, as every pass of the live caches did; the design guarantees bit equality. */

typedef struct {
    sd_model *target, *draft;
    sd_context *fresh_t, *fresh_d;
    float *live, *fresh;
    int k, steps;
} rollback_ctx;

static void prefill_chunked(sd_context *c, const int32_t *tok, int n) {
    assert_int_equal(sd_context_seq_truncate(c, 0, 0), SD_OK);
    for (int i = 0; i < n; i += SD_SMALL_BATCH) {
        int m = n - i < SD_SMALL_BATCH ? n - i : SD_SMALL_BATCH;
        if (sd_context_forward(c, 0, tok + i, m, NULL, 0) != SD_OK) fail_msg("prefill: %s", sd_last_error());
    }
}

static void rollback_on_step(sd_spec *s, void *user) {
    rollback_ctx *c = user;
    int n = 0;
    const int32_t *hist = sd_spec_tokens(s, &n);
    sd_context *ct = sd_spec_target_context(s);
    const int seq = sd_spec_seq(s);
    const int V = sd_model_hparams(c->target)->vocab_size;
    c->steps++;

    /* Target: every history token but the pending last one, nothing rejected left over. */
    if (sd_context_seq_len(ct, seq) != n - 1)
        fail_msg("step %d: target cache %d, history %d", c->steps, sd_context_seq_len(ct, seq), n);
    /* Draft: a prefix of the history (it lags after rounds that did not call it) plus at most
     * k - 1 drafts it fed and may not have had accepted (its next call drops those) ... */
    const sd_drafter *dr = sd_spec_drafter(s);
    int nf = 0;
    const int32_t *fed = sd_drafter_model_tokens(dr, &nf);
    sd_context *cd = sd_drafter_model_context(dr);
    assert_non_null(fed);
    assert_int_equal(sd_context_seq_len(cd, sd_drafter_model_seq(dr)), nf);
    int lcp = 0;
    while (lcp < nf && lcp < n && fed[lcp] == hist[lcp]) lcp++;
    if (nf - lcp > c->k - 1)
        fail_msg("step %d: draft cache %d tokens, %d shared with the history of %d (k %d)", c->steps, nf, lcp, n, c->k);
    /* ... holding exactly the rows a fresh prefill of those tokens writes. */
    prefill_chunked(c->fresh_d, fed, nf);
    sd_kv *kd = sd_context_kv(cd), *kf = sd_context_kv(c->fresh_d);
    const size_t bytes = (size_t)sd_kv_kv_dim(kd) * (size_t)nf * sizeof(float);
    for (int l = 0; l < sd_kv_n_layers(kd); l++)
        if (memcmp(sd_kv_k(kd, sd_drafter_model_seq(dr), l), sd_kv_k(kf, 0, l), bytes) != 0 ||
            memcmp(sd_kv_v(kd, sd_drafter_model_seq(dr), l), sd_kv_v(kf, 0, l), bytes) != 0)
            fail_msg("step %d layer %d: draft cache differs from a fresh prefill", c->steps, l);

    /* The next logits from the live cache (then rolled back: O(1), the loop never notices)
     * equal those of a fresh prefill of history[0..n-1) followed by the pending token. */
    assert_int_equal(sd_context_forward(ct, seq, &hist[n - 1], 1, c->live, 0), SD_OK);
    assert_int_equal(sd_context_seq_truncate(ct, seq, n - 1), SD_OK);
    prefill_chunked(c->fresh_t, hist, n - 1);
    assert_int_equal(sd_context_forward(c->fresh_t, 0, &hist[n - 1], 1, c->fresh, 0), SD_OK);
    if (memcmp(c->live, c->fresh, (size_t)V * sizeof(float)) != 0)
        fail_msg("step %d: live vs fresh logits differ by %g", c->steps, sdtest_max_abs_diff(c->live, c->fresh, (size_t)V));
}

static void check_rollback(sd_model *t, sd_model *d, const int32_t *prompt, int n_prompt) {
    rollback_ctx c;
    memset(&c, 0, sizeof c);
    c.target = t;
    c.draft = d;
    const int V = sd_model_hparams(t)->vocab_size;
    assert_int_equal(sd_context_create(t, NULL, &c.fresh_t), SD_OK);
    assert_int_equal(sd_context_create(d, NULL, &c.fresh_d), SD_OK);
    c.live = malloc((size_t)V * sizeof(float));
    c.fresh = malloc((size_t)V * sizeof(float));
    /* Greedy, and sampled (rejections land at random depths, exercising every rollback length). */
    static const struct { int k; float temp; int top_k; } runs[] = {{4, 0, 0}, {1, 0, 0}, {3, 1.0f, 0}, {5, 0.8f, 40}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        sd_spec_params p = greedy_params(N_GEN, runs[r].k);
        p.sampling.temperature = runs[r].temp;
        p.sampling.top_k = runs[r].top_k;
        p.sampling.seed = 7 + r;
        p.on_step = rollback_on_step;
        p.step_user = &c;
        c.k = runs[r].k;
        int steps0 = c.steps;
        collect out;
        sd_spec_stats st;
        generate(t, d, &p, prompt, n_prompt, &out, &st);
        check_stats(&st, runs[r].k, N_GEN);
        assert_int_equal(c.steps - steps0, st.n_verify + st.n_target_steps); /* one callback per round */
        assert_true(st.n_verify > 0);
    }
    printf("  %s + %s: %d rounds checked, caches and logits bit for bit equal to fresh prefills\n", sd_model_path(t),
           sd_model_path(d), c.steps);
    free(c.live);
    free(c.fresh);
    sd_context_free(c.fresh_t);
    sd_context_free(c.fresh_d);
}

static void test_rollback_invariants(void **state) {
    (void)state;
    int have_real = sdtest_shared(REAL_TARGET) && sdtest_shared(REAL_DRAFT) && sdtest_shared(REAL_TOKENIZER);
    sd_model *t, *d;
    int32_t prompt[64];
    int n;
    if (have_real) {
        t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
        d = sdtest_shared_model(REAL_DRAFT, REAL_TOKENIZER);
        n = encode(t, "Once upon a time", prompt, 64);
    } else {
        if (sdtest_require_shared()) sdtest_missing_shared(REAL_TARGET " and " REAL_DRAFT);
        printf("  (real pair absent: tiny GQA pair instead)\n");
        sd_synth_params tsp = sdtest_synth_shape(64, 4, 8, 2, 128, 320, 256, 41);
        sd_synth_params dsp = sdtest_synth_shape(32, 1, 4, 2, 64, 320, 256, 42);
        t = sdtest_synth_model(&tsp);
        d = sdtest_synth_model(&dsp);
        const int32_t pr[4] = {1, 300, 301, 302};
        memcpy(prompt, pr, sizeof pr);
        n = 4;
    }
    check_rollback(t, d, prompt, n);
    sd_model_free(d);
    sd_model_free(t);
}

/* A generation that stops in the middle of a pass's accepted drafts (the token callback says
 * stop) leaves the target's cache holding exactly the emitted history but its last token, and
 * the next generation on the same object (whose prompt shares only the original prompt with
 * that history) gives the full output again. */
static void test_stop_mid_pass(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(64, 2, 8, 2, 96, 320, 51);
    const int32_t prompt[3] = {1, 40, 41};
    for (int stop_after = 2; stop_after <= 9; stop_after++) {
        sd_spec_params p = greedy_params(100, 8);
        sd_spec *s = NULL;
        assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK); /* self-draft: passes of 9 tokens */
        collect c;
        memset(&c, 0, sizeof c);
        c.stop_after = stop_after;
        sd_spec_stats st;
        assert_int_equal(sd_spec_generate(s, prompt, 3, collect_cb, &c, &st), SD_OK);
        assert_int_equal(st.stop_reason, SD_STOP_CALLBACK);
        assert_int_equal(c.n, stop_after);
        assert_int_equal(st.n_generated, stop_after);
        int n = 0;
        sd_spec_tokens(s, &n);
        assert_int_equal(n, 3 + stop_after);
        if (sd_context_seq_len(sd_spec_target_context(s), sd_spec_seq(s)) != n - 1)
            fail_msg("stop after %d: target cache holds %d positions, history %d", stop_after,
                     sd_context_seq_len(sd_spec_target_context(s), sd_spec_seq(s)), n);
        /* and a second generation on the same object is unaffected */
        collect c2;
        memset(&c2, 0, sizeof c2);
        assert_int_equal(sd_spec_generate(s, prompt, 3, collect_cb, &c2, &st), SD_OK);
        assert_int_equal(c2.n, 100);
        assert_memory_equal(c2.out, c.out, (size_t)stop_after * sizeof(int32_t));
        sd_spec_free(s);
    }
    sd_model_free(m);
}

/* ---------------------------------------------------------------- 3. sampling exactness
 *
 * The joint distribution of the first three generated tokens (t1, t2, t3) is computed exactly
 * from the target: P = p(t1 | prompt) p(t2 | prompt t1) p(t3 | prompt t1 t2), each factor the
 * processed distribution (sd_sample_probs) of the target's logits. With k = 2 (n_predict 4)
 * the engine's first round drafts two tokens after the prompt, so t1 is the first draft
 * position's outcome (accepted draft or residual draw), t2 the second's and t3 the bonus (or,
 * after a rejection, the next round's). The hand-built controls sample t1 from the prefill and
 * speculate on t2 and t3: the exact joint is the same. Pearson's chi-square compares the speculative counts with that
 * exact joint (V = 16: 4096 cells, rare ones pooled).
 *
 * Controls, through a hand-built loop of the same pieces (draft, verify, sd_verify_stochastic):
 * with the right q it must pass too (the harness and the statistic are sound), and with q taken
 * at another temperature than the drafts were drawn at, or with no verification at all (the
 * draft's own samples), it must fail: the test has power against real mistakes. */
#define EX_V 16
#define EX_CELLS (EX_V * EX_V * EX_V)
/* Generations per run. A broken sampler's chi-square excess grows linearly with the count,
 * while the critical value grows only with the cells kept (~sqrt of the count here), so the
 * count is what buys power: at 12000 the wrong-q control lands at ~2x the critical value. The
 * sanitizer build uses the same counts and seeds, so both builds test the same samples (a
 * smaller sanitizer count once drew a p = 0.0003 outlier from the first 4000 seeds). */
#define EX_N 12000
#define EX_N_UNVERIFIED 3000 /* far off: a quarter of the samples is plenty */

typedef struct {
    sd_model *target, *draft;
    int32_t prompt[8];
    int n_prompt;
    sd_sampler_params sp;
    double *joint; /* [EX_CELLS] exact P(t1, t2, t3) */
    const int (*allowed)[EX_V]; /* NULL, or the tokens a grammar allows at t1, t2, t3 (by hand) */
    int (*allowed_after)(const int32_t *hist, int n, int t); /* else NULL, or the same given the n tokens before */
    int eog_ends; /* an end of generation (id 2) ends the text: the cells after it hold 2 (the grammar allows it) */
} exact_setup;

/* The penalties by their definition (sample.h), written out here as the reference: the history is
 * the prompt and then gen[0..n_gen). */
static void ref_penalize(const sd_sampler_params *sp, const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
                         float *logits) {
    for (int t = 0; t < EX_V; t++) {
        int seen = 0, count = 0;
        for (int i = 0; i < n_prompt; i++) seen |= prompt[i] == t;
        for (int i = 0; i < n_gen; i++) count += gen[i] == t;
        seen |= count > 0;
        float x = logits[t];
        if (seen && sp->repetition_penalty != 1) x = x > 0 ? x / sp->repetition_penalty : x * sp->repetition_penalty;
        if (count > 0) x -= sp->presence_penalty + sp->frequency_penalty * (float)count;
        logits[t] = x;
    }
}

/* The constrained distribution: p restricted to the allowed tokens (written out by hand for the
 * test's grammars), renormalised by the sampling that follows. */
static void ref_mask(const exact_setup *e, int pos, const int32_t *hist, float *logits) {
    for (int t = 0; t < EX_V; t++)
        if ((e->allowed && !e->allowed[pos][t]) || (e->allowed_after && !e->allowed_after(hist, pos, t))) logits[t] = -1e30f;
}

/* The cell of a generation's first three tokens; under e->eog_ends those after an end of generation
 * (or after the text stopped) are 2, otherwise 2 is a token like any other. */
static long cell_of(const exact_setup *e, const int32_t *out, int n) {
    int32_t t[3];
    for (int i = 0; i < 3; i++) t[i] = !e->eog_ends || (i < n && (i == 0 || t[i - 1] != 2)) ? out[i] : 2;
    return ((long)t[0] * EX_V + t[1]) * EX_V + t[2];
}

static void exact_joint(exact_setup *e) {
    const int V = EX_V;
    sd_context *kv = NULL;
    assert_int_equal(sd_context_create(e->target, NULL, &kv), SD_OK);
    float logits[EX_V], p0[EX_V], p1[EX_V], p2[EX_V];
    void *scratch = malloc(sd_sample_scratch_bytes(V));
    assert_int_equal(sd_context_forward(kv, 0, e->prompt, e->n_prompt, logits, 0), SD_OK);
    ref_penalize(&e->sp, e->prompt, e->n_prompt, NULL, 0, logits);
    ref_mask(e, 0, NULL, logits);
    assert_int_equal(sd_sample_probs(&e->sp, logits, V, p0, scratch), SD_OK);
    double total = 0;
    for (int32_t a = 0; a < V; a++) {
        if (e->eog_ends && a == 2) { /* the text ends */
            for (int c = 0; c < V * V; c++) e->joint[a * V * V + c] = c == 2 * V + 2 ? p0[a] : 0;
            total += p0[a];
            continue;
        }
        assert_int_equal(sd_context_forward(kv, 0, &a, 1, logits, 0), SD_OK);
        ref_penalize(&e->sp, e->prompt, e->n_prompt, &a, 1, logits);
        ref_mask(e, 1, &a, logits);
        assert_int_equal(sd_sample_probs(&e->sp, logits, V, p1, scratch), SD_OK);
        for (int32_t b = 0; b < V; b++) {
            if (e->eog_ends && b == 2) {
                for (int c = 0; c < V; c++) e->joint[(a * V + b) * V + c] = c == 2 ? (double)p0[a] * p1[b] : 0;
                total += (double)p0[a] * p1[b];
                continue;
            }
            assert_int_equal(sd_context_forward(kv, 0, &b, 1, logits, 0), SD_OK);
            const int32_t ab[2] = {a, b};
            ref_penalize(&e->sp, e->prompt, e->n_prompt, ab, 2, logits);
            ref_mask(e, 2, ab, logits);
            assert_int_equal(sd_sample_probs(&e->sp, logits, V, p2, scratch), SD_OK);
            for (int c = 0; c < V; c++) {
                double pr = (double)p0[a] * p1[b] * p2[c];
                e->joint[(a * V + b) * V + c] = pr;
                total += pr;
            }
            assert_int_equal(sd_context_seq_truncate(kv, 0, e->n_prompt + 1), SD_OK);
        }
        assert_int_equal(sd_context_seq_truncate(kv, 0, e->n_prompt), SD_OK);
    }
    assert_true(fabs(total - 1.0) < 1e-4);
    free(scratch);
    sd_context_free(kv);
}

/* The engine: one sd_spec per generation, because the seed is fixed at creation
 * (seed = base + i varies it across generations). */
static void counts_engine_tree(const exact_setup *e, int k, int tree, uint64_t base, int n, long *counts, double *acc) {
    long drafted = 0, accepted = 0;
    for (int i = 0; i < n; i++) {
        sd_spec_params p = greedy_params(k + 2, k); /* the first round drafts all k */
        p.tree_budget = tree;
        p.sampling = e->sp;
        p.sampling.seed = base + (uint64_t)i;
        p.n_ctx = 16;
        collect c;
        sd_spec_stats st;
        generate(e->target, e->draft, &p, e->prompt, e->n_prompt, &c, &st);
        assert_int_equal(c.n, k + 2);
        counts[(c.out[0] * EX_V + c.out[1]) * EX_V + c.out[2]]++;
        drafted += st.n_drafted;
        accepted += st.n_accepted;
    }
    *acc = (double)accepted / (double)drafted;
}

static void counts_engine(const exact_setup *e, int k, uint64_t base, int n, long *counts, double *acc) {
    counts_engine_tree(e, k, 0, base, n, counts, acc);
}

typedef enum { HAND_CORRECT, HAND_WRONG_Q, HAND_NO_VERIFY } hand_mode;

/* The speculative step by hand, for (t1, t2, t3) with k = 2. HAND_WRONG_Q draws the drafts
 * from q at the run's temperature but verifies them against q at temperature 2 * T. */
static void counts_hand(const exact_setup *e, hand_mode mode, uint64_t base, int n, long *counts) {
    const int V = EX_V;
    sd_context *kt = NULL, *kd = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 16;
    assert_int_equal(sd_context_create(e->target, &cp, &kt), SD_OK);
    assert_int_equal(sd_context_create(e->draft, &cp, &kd), SD_OK);
    void *scratch = malloc(sd_sample_scratch_bytes(V));
    sd_sampler_params wrong = e->sp;
    wrong.temperature = 2.0f * e->sp.temperature;
    float lt[3 * EX_V], ld[EX_V], p[3 * EX_V], q[2 * EX_V], qv[2 * EX_V], residual[EX_V];
    for (int i = 0; i < n; i++) {
        sd_rng rng;
        sd_rng_seed(&rng, base + (uint64_t)i);
        sd_context_seq_truncate(kt, 0, 0);
        sd_context_seq_truncate(kd, 0, 0);
        assert_int_equal(sd_context_forward(kt, 0, e->prompt, e->n_prompt, lt, 0), SD_OK);
        assert_int_equal(sd_sample_probs(&e->sp, lt, V, p, scratch), SD_OK);
        int32_t t1 = sd_sample_draw(p, V, &rng), d[2], t2, t3;
        /* draft two tokens after t1 */
        assert_int_equal(sd_context_forward(kd, 0, e->prompt, e->n_prompt, NULL, 0), SD_OK);
        int32_t in = t1;
        for (int j = 0; j < 2; j++) {
            assert_int_equal(sd_context_forward(kd, 0, &in, 1, ld, 0), SD_OK);
            assert_int_equal(sd_sample_probs(&e->sp, ld, V, q + j * V, scratch), SD_OK);
            assert_int_equal(sd_sample_probs(&wrong, ld, V, qv + j * V, scratch), SD_OK);
            d[j] = in = sd_sample_draw(q + j * V, V, &rng);
        }
        if (mode == HAND_NO_VERIFY) {
            t2 = d[0];
            t3 = d[1];
        } else {
            int32_t batch[3] = {t1, d[0], d[1]}, next;
            assert_int_equal(sd_context_forward(kt, 0, batch, 3, lt, 1), SD_OK);
            for (int j = 0; j < 3; j++) assert_int_equal(sd_sample_probs(&e->sp, lt + j * V, V, p + j * V, scratch), SD_OK);
            int m = sd_verify_stochastic(p, mode == HAND_WRONG_Q ? qv : q, d, 2, V, &rng, residual, &next);
            if (m == 0) { /* t2 is the correction; t3 comes from the target after it */
                t2 = next;
                assert_int_equal(sd_context_seq_truncate(kt, 0, e->n_prompt + 1), SD_OK);
                assert_int_equal(sd_context_forward(kt, 0, &t2, 1, lt, 0), SD_OK);
                assert_int_equal(sd_sample_probs(&e->sp, lt, V, p, scratch), SD_OK);
                t3 = sd_sample_draw(p, V, &rng);
            } else {
                t2 = d[0];
                t3 = m == 1 ? next : d[1];
            }
        }
        counts[(t1 * V + t2) * V + t3]++;
    }
    free(scratch);
    sd_context_free(kt);
    sd_context_free(kd);
}

static double chi2_report(const char *what, const long *counts, const double *joint, int n) {
    int df = 0;
    double x = sdtest_chi2_pooled(counts, joint, EX_CELLS, n, &df);
    double crit = sdtest_chi2_crit_001(df);
    printf("  %-36s n %5d  chi2 %8.1f  df %4d  crit(p=0.001) %6.1f  ratio %.2f\n", what, n, x, df, crit, x / crit);
    assert_true(df >= 20); /* enough cells for a meaningful test */
    return x / crit;
}

static void test_sampling_exact(void **state) {
    (void)state;
    /* Tiny models (microseconds per token) with the 16-piece synthetic vocabulary; the default
     * 1/sqrt(dim) classifier gives logits of unit scale: peaked but not degenerate. */
    sd_synth_params tp = sdtest_synth_shape(16, 1, 2, 1, 32, EX_V, 32, 61);
    sd_synth_params dp = sdtest_synth_shape(8, 1, 2, 2, 16, EX_V, 32, 62);
    exact_setup e;
    memset(&e, 0, sizeof e);
    e.target = sdtest_synth_model(&tp);
    e.draft = sdtest_synth_model(&dp);
    e.prompt[0] = 1;
    e.prompt[1] = 5;
    e.n_prompt = 2;
    e.joint = malloc(EX_CELLS * sizeof(double));
    long *counts = malloc(EX_CELLS * sizeof(long));
    /* One thread: at this size OpenMP's fork/join would cost more than the arithmetic. */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the contexts made below: n_threads 0 takes it */

    /* The engine at k = 2, temperature 1; then k = 3 with temperature, top-k and top-p all on
     * (both sides processed alike, zeros in p and q, a three-draft pass). */
    static const struct { int k; float temp; int top_k; float top_p; uint64_t base; } cfg[] = {
        {2, 1.0f, 0, 1.0f, 1000000}, {3, 0.8f, 8, 0.9f, 2000000}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        e.sp = sd_sampler_default_params();
        e.sp.temperature = cfg[c].temp;
        e.sp.top_k = cfg[c].top_k;
        e.sp.top_p = cfg[c].top_p;
        exact_joint(&e);
        memset(counts, 0, EX_CELLS * sizeof(long));
        double acc = 0;
        counts_engine(&e, cfg[c].k, cfg[c].base, EX_N, counts, &acc);
        char what[96];
        snprintf(what, sizeof what, "engine k=%d T=%.1f top-k %d top-p %.1f", cfg[c].k, (double)cfg[c].temp,
                 cfg[c].top_k, (double)cfg[c].top_p);
        double r = chi2_report(what, counts, e.joint, EX_N);
        printf("  %-36s acceptance %.3f\n", "", acc);
        assert_true(acc > 0.1 && acc < 0.9); /* both acceptance and rejection are exercised */
        assert_true(r < 1.0);
    }

    /* Trees (multi-candidate speculative sampling): 6 nodes, 3 levels, at T = 1 */
    e.sp = sd_sampler_default_params();
    e.sp.temperature = 1.0f;
    exact_joint(&e);
    memset(counts, 0, EX_CELLS * sizeof(long));
    double tacc = 0;
    counts_engine_tree(&e, 3, 6, 3000000, EX_N, counts, &tacc);
    const double rt = chi2_report("engine, tree of 6, depth 3, T=1.0", counts, e.joint, EX_N);
    printf("  %-36s acceptance %.3f\n", "", tacc);
    assert_true(rt < 1.0);

    /* Controls at T = 1, k = 2, with the engine's sample count. */
    e.sp = sd_sampler_default_params();
    e.sp.temperature = 1.0f;
    exact_joint(&e);
    memset(counts, 0, EX_CELLS * sizeof(long));
    counts_hand(&e, HAND_CORRECT, 4000000, EX_N, counts);
    assert_true(chi2_report("hand-built loop, right q", counts, e.joint, EX_N) < 1.0);
    memset(counts, 0, EX_CELLS * sizeof(long));
    counts_hand(&e, HAND_WRONG_Q, 4000000, EX_N, counts);
    assert_true(chi2_report("control: q at temperature 2T", counts, e.joint, EX_N) > 1.0);
    memset(counts, 0, EX_CELLS * sizeof(long));
    counts_hand(&e, HAND_NO_VERIFY, 4000000, EX_N_UNVERIFIED, counts);
    assert_true(chi2_report("control: drafts unverified", counts, e.joint, EX_N_UNVERIFIED) > 1.0);

    omp_set_num_threads(threads);
    free(counts);
    free(e.joint);
    sd_model_free(e.draft);
    sd_model_free(e.target);
}

/* ---------------------------------------------------------------- 3b. every drafter and policy
 *
 * The same exact joint of (t1, t2, t3), for every way of drafting, in both sampling modes: a
 * draft model under fixed, adaptive and p_min lengths, prompt lookup alone and before the model,
 * and two sequences stepped in one batch (a server's slots). The adaptive controller gets given
 * costs (a draft step 0.1, a pass of n tokens 1 + 0.2 (n - 1)) so that it drafts 0, 1 or 2
 * tokens depending on the draft's confidence; p_min 0.3 likewise. The prompt repeats tokens so
 * that prompt lookup finds matches. The control is the stop rule this suite exists for: a
 * drafter that draws a token and then drops it when its own probability is low (what md_draft
 * did before drafts were judged before the draw) must fail, and the same drafter judging the top
 * probability before the draw must pass. */

typedef struct {
    const char *what;
    int model, ngram;       /* drafters: the draft model, prompt lookup */
    sd_draft_mode mode;
    int k, tree;            /* draft length; tree budget (0: chains) */
    sd_sampling_mode smode;
    float temp;
    int top_k;
    float top_p;
    float min_p, presence, frequency, repetition; /* 0 0 0 0: none (repetition 0 means 1) */
    int wait_t1; /* adaptive, the 1-token price unknown and the target streamed: every round waits
                    for an unsure first proposal (which it does not make) to measure it */
} ex_cfg;

static sd_spec_params ex_params(const exact_setup *e, const ex_cfg *c) {
    sd_spec_params p = greedy_params(c->k + 2, c->k);
    p.draft_mode = c->mode;
    p.tree_budget = c->tree;
    p.p_min = 0.3f;
    p.ngram = c->ngram;
    p.sampling = e->sp;
    p.sampling.mode = c->smode;
    p.n_ctx = 24;
    p.costs.given = 1;
    for (int n = 1; n <= SD_DRAFT_COST_MAX_N; n++) p.costs.t_pass[n] = 1 + 0.2 * (n - 1);
    p.costs.t_draft = 0.1;
    if (c->wait_t1) {
        p.costs.t_pass[1] = 0;
        p.costs.streamed = 1;
    }
    return p;
}

/* n generations, one engine each (seed base + i); counts of (t1, t2, t3); drafts per round. */
static void counts_cfg(const exact_setup *e, const ex_cfg *c, uint64_t base, int n, long *counts, double *acc,
                       double *per_round, int *lengths_seen) {
    long drafted = 0, accepted = 0, rounds = 0;
    *lengths_seen = 0;
    for (int i = 0; i < n; i++) {
        sd_spec_params p = ex_params(e, c);
        p.sampling.seed = base + (uint64_t)i;
        collect out;
        sd_spec_stats st;
        generate(e->target, c->model ? e->draft : NULL, &p, e->prompt, e->n_prompt, &out, &st);
        assert_int_equal(out.n, c->k + 2);
        counts[(out.out[0] * EX_V + out.out[1]) * EX_V + out.out[2]]++;
        drafted += st.n_drafted;
        accepted += st.n_accepted;
        rounds += st.n_verify + st.n_target_steps;
        for (int d = 0; d < c->k; d++) *lengths_seen |= st.drafted_at[d] > 0 ? 1 << (d + 1) : 0;
        *lengths_seen |= st.n_target_steps > 0;
    }
    *acc = drafted ? (double)accepted / (double)drafted : 0;
    *per_round = (double)drafted / (double)rounds;
}

/* Two sequences of one pair stepped together, a pair kept across generations as a server keeps
 * its slots (prefix reuse, learned acceptance); each generation's seed differs. */
static void counts_batched(const exact_setup *e, int model, const sd_spec_params *p0, int n_out, uint64_t base, int n,
                           long *counts, long *n_drafted, long *n_accepted, long *by_grammar) {
    sd_spec_params p = *p0;
    sd_pair *pr = NULL;
    assert_int_equal(sd_pair_create(e->target, model ? e->draft : NULL, &p, 2, &pr), SD_OK);
    sd_spec *sp[2] = {sd_pair_spec(pr, 0), sd_pair_spec(pr, 1)};
    long drafted = 0, accepted = 0;
    for (int g = 0; g < n; g += 2) {
        for (int j = 0; j < 2; j++) {
            p.sampling.seed = base + (uint64_t)(g + j);
            assert_int_equal(sd_spec_set_params(sp[j], &p), SD_OK);
            assert_int_equal(sd_spec_begin(sp[j], e->prompt, e->n_prompt), SD_OK);
        }
        int32_t got[2][SD_MAX_DRAFT + 8];
        int n_got[2] = {0, 0};
        while (!sd_spec_done(sp[0]) || !sd_spec_done(sp[1])) {
            sd_spec_round rd[2];
            assert_int_equal(sd_spec_batch_step(sd_pair_batch(pr), sp, 2, rd), SD_OK);
            for (int j = 0; j < 2; j++) {
                memcpy(got[j] + n_got[j], rd[j].tokens, (size_t)rd[j].n_tokens * sizeof(int32_t));
                n_got[j] += rd[j].n_tokens;
                drafted += rd[j].n_drafted;
                accepted += rd[j].n_accepted;
            }
        }
        for (int j = 0; j < 2; j++) {
            if (n_out >= 0) assert_int_equal(n_got[j], n_out);
            counts[cell_of(e, got[j], n_got[j])]++;
            sd_spec_stats st;
            sd_spec_get_stats(sp[j], &st);
            if (st.n_sources > 0 && !strcmp(st.sources[st.n_sources - 1], "grammar")) *by_grammar += st.drafted_by[st.n_sources - 1];
        }
    }
    *n_drafted = drafted;
    *n_accepted = accepted;
    sd_pair_free(pr);
}

/* The control drafter: the draft model run from scratch in its own context, drawing each draft
 * from its processed distribution q (recorded) with the engine's RNG. BROKEN looks at the drawn
 * token's own probability and drops it below `thr`; otherwise the top probability is judged
 * before the draw. */
typedef struct {
    sd_context *c;
    sd_sampler_params sp;
    float thr;
    int broken;
} drop_drafter;

static sd_status drop_draft(sd_drafter *d, sd_draft_req *r) {
    drop_drafter *f = d->impl;
    float lg[EX_V];
    void *scratch = NULL;
    r->n_out = 0;
    r->source = 0;
    r->q_filled = 1;
    sd_context_seq_truncate(f->c, 0, 0);
    sd_status st = sd_context_forward(f->c, 0, r->hist, r->n_hist, lg, 0);
    for (int i = 0; i < r->k && st == SD_OK; i++) {
        float *q = r->q + (size_t)i * EX_V;
        if ((st = sd_sample_probs(&f->sp, lg, EX_V, q, scratch)) != SD_OK) break;
        float top = 0;
        for (int x = 0; x < EX_V; x++) top = q[x] > top ? q[x] : top;
        if (!f->broken && top < f->thr) break; /* before the draw: exact */
        const int32_t t = sd_sample_draw(q, EX_V, r->rng);
        if (f->broken && q[t] < f->thr) break; /* after the draw, by its value: biased */
        r->out[i] = t;
        r->n_out = i + 1;
        if (i + 1 < r->k) st = sd_context_forward(f->c, 0, &r->out[i], 1, lg, 0);
    }
    return st;
}
static void drop_destroy(sd_drafter *d) { (void)d; }
static const sd_drafter_vtbl k_drop_vtbl = {NULL, drop_draft, drop_destroy, NULL, NULL};

static void counts_drop(const exact_setup *e, int broken, uint64_t base, int n, long *counts) {
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 16;
    sd_context *tc = NULL, *dc = NULL;
    assert_int_equal(sd_context_create(e->target, &cp, &tc), SD_OK);
    assert_int_equal(sd_context_create(e->draft, &cp, &dc), SD_OK);
    sd_spec_batch *b = NULL;
    assert_int_equal(sd_spec_batch_create(tc, NULL, &b), SD_OK);
    drop_drafter f = {dc, e->sp, 0.3f, broken};
    sd_drafter d = {&k_drop_vtbl, &f, "drop", {"model"}, 1, EX_V, INT32_MAX, 1u};
    for (int i = 0; i < n; i++) {
        sd_spec_params p = greedy_params(4, 2);
        p.sampling = e->sp;
        p.sampling.mode = SD_SAMPLING_REJECTION;
        p.sampling.seed = base + (uint64_t)i;
        sd_spec *s = NULL;
        assert_int_equal(sd_spec_create_with(b, 0, &d, &p, &s), SD_OK);
        collect out;
        memset(&out, 0, sizeof out);
        assert_int_equal(sd_spec_generate(s, e->prompt, e->n_prompt, collect_cb, &out, NULL), SD_OK);
        assert_int_equal(out.n, 4);
        counts[(out.out[0] * EX_V + out.out[1]) * EX_V + out.out[2]]++;
        sd_spec_free(s);
    }
    sd_spec_batch_free(b);
    sd_context_free(tc);
    sd_context_free(dc);
}

static void test_sampling_exact_every_drafter(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(16, 1, 2, 1, 32, EX_V, 32, 61);
    sd_synth_params dp = sdtest_synth_shape(8, 1, 2, 2, 16, EX_V, 32, 62);
    exact_setup e;
    memset(&e, 0, sizeof e);
    e.target = sdtest_synth_model(&tp);
    e.draft = sdtest_synth_model(&dp);
    static const int32_t prompt[6] = {1, 5, 3, 5, 7, 5};
    memcpy(e.prompt, prompt, sizeof prompt);
    e.n_prompt = 6;
    e.joint = malloc(EX_CELLS * sizeof(double));
    long *counts = malloc(EX_CELLS * sizeof(long));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the contexts made below: n_threads 0 takes it */
    const sd_sampling_mode R = SD_SAMPLING_REJECTION, C = SD_SAMPLING_COUPLED;
    static const ex_cfg cfgs[] = {
        {"plain", 0, 0, SD_DRAFT_FIXED, 2, 0, SD_SAMPLING_COUPLED, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"model, adaptive", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"model, adaptive", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_COUPLED, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"model, adaptive, top-k 6 top-p 0.9", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 0.8f, 6, 0.9f, 0, 0, 0, 0, 0},
        {"model, adaptive, 1-token price unknown", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 0.6f, 0, 1.0f, 0,
         0, 0, 0, 1},
        {"model, adaptive, 1-token price unknown", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_COUPLED, 0.6f, 0, 1.0f, 0, 0,
         0, 0, 1},
        {"model, p_min 0.3", 1, 0, SD_DRAFT_PMIN, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"model, p_min 0.3, top-p 0.9", 1, 0, SD_DRAFT_PMIN, 2, 0, SD_SAMPLING_COUPLED, 1.2f, 0, 0.9f, 0, 0, 0, 0, 0},
        {"model, fixed", 1, 0, SD_DRAFT_FIXED, 2, 0, SD_SAMPLING_COUPLED, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"model, tree of 6", 1, 0, SD_DRAFT_FIXED, 2, 6, SD_SAMPLING_COUPLED, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"ngram, fixed", 0, 1, SD_DRAFT_FIXED, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"ngram, adaptive", 0, 1, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_COUPLED, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"ngram + model, adaptive", 1, 1, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f, 0, 0, 0, 0, 0},
        {"ngram + model, p_min, top-k 8", 1, 1, SD_DRAFT_PMIN, 2, 0, SD_SAMPLING_COUPLED, 1.0f, 8, 1.0f, 0, 0, 0, 0, 0},
        {"model, adaptive, min-p 0.1, penalties", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f,
         0.1f, 0.4f, 0.3f, 1.5f, 0},
        {"model, fixed, repetition 2, frequency 1", 1, 0, SD_DRAFT_FIXED, 2, 0, SD_SAMPLING_COUPLED, 0.9f, 0, 0.95f, 0.0f,
         0.0f, 1.0f, 2.0f, 0},
        {"ngram + model, presence -0.5, min-p", 1, 1, SD_DRAFT_FIXED, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f,
         0.05f, -0.5f, 0.0f, 0.0f, 0},
        {"model, tree of 6, penalties", 1, 0, SD_DRAFT_FIXED, 2, 6, SD_SAMPLING_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0.5f, 0.5f,
         1.3f, 0},
    };
    (void)R;
    (void)C;
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const ex_cfg *c = &cfgs[i];
        e.sp = sd_sampler_default_params();
        e.sp.temperature = c->temp;
        e.sp.top_k = c->top_k;
        e.sp.top_p = c->top_p;
        e.sp.min_p = c->min_p;
        e.sp.presence_penalty = c->presence;
        e.sp.frequency_penalty = c->frequency;
        e.sp.repetition_penalty = c->repetition > 0 ? c->repetition : 1.0f;
        exact_joint(&e);
        memset(counts, 0, EX_CELLS * sizeof(long));
        double acc = 0, per_round = 0;
        int seen = 0;
        counts_cfg(&e, c, 11000000 + 100000 * i, EX_N, counts, &acc, &per_round, &seen);
        char what[120];
        snprintf(what, sizeof what, "%s, %s", c->what, sd_sampling_mode_name(c->smode));
        const double r = chi2_report(what, counts, e.joint, EX_N);
        printf("  %-36s acceptance %.3f, %.2f drafts per round, lengths %s%s%s\n", "", acc, per_round,
               seen & 1 ? "0 " : "", seen & 2 ? "1+ " : "", seen & 4 ? "2" : "");
        assert_true(r < 1.0);
        if (c->repetition == 1.5f) { /* the control: the same counts against the joint without penalties */
            sd_sampler_params keep = e.sp;
            e.sp.min_p = 0;
            e.sp.presence_penalty = e.sp.frequency_penalty = 0;
            e.sp.repetition_penalty = 1;
            exact_joint(&e);
            assert_true(chi2_report("control: penalties left out", counts, e.joint, EX_N) > 1.0);
            e.sp = keep;
        }
        if (c->model || c->ngram) assert_true(per_round > 0.1); /* it drafts ... */
        if (c->mode != SD_DRAFT_FIXED) assert_true((seen & 1) && (seen & 2)); /* ... and not always */
        if (c->tree) assert_true(acc > 0.1);
    }
    /* two sequences stepped in one batch, kept across generations */
    const ex_cfg both = {"two slots in one batch, adaptive", 1, 0, SD_DRAFT_ADAPTIVE, 2, 0, SD_SAMPLING_REJECTION, 1.0f, 0,
                         1.0f, 0, 0, 0, 0, 0};
    e.sp = sd_sampler_default_params();
    e.sp.temperature = 1.0f;
    exact_joint(&e);
    for (int m = 0; m < 2; m++) {
        ex_cfg c = both;
        c.smode = m ? SD_SAMPLING_COUPLED : SD_SAMPLING_REJECTION;
        memset(counts, 0, EX_CELLS * sizeof(long));
        long drafted = 0, accepted = 0, forced = 0;
        const sd_spec_params p = ex_params(&e, &c);
        counts_batched(&e, c.model, &p, c.k + 2, 13000000 + 1000000 * (uint64_t)m, EX_N, counts, &drafted, &accepted, &forced);
        const double acc = drafted ? (double)accepted / (double)drafted : 0;
        char what[120];
        snprintf(what, sizeof what, "%s, %s", c.what, sd_sampling_mode_name(c.smode));
        const double r = chi2_report(what, counts, e.joint, EX_N);
        printf("  %-36s acceptance %.3f\n", "", acc);
        assert_true(r < 1.0);
    }
    /* the control: the same draws, dropped after the draw by their value, or judged before it */
    memset(counts, 0, EX_CELLS * sizeof(long));
    counts_drop(&e, 0, 15000000, EX_N, counts);
    assert_true(chi2_report("drafts judged before the draw", counts, e.joint, EX_N) < 1.0);
    memset(counts, 0, EX_CELLS * sizeof(long));
    counts_drop(&e, 1, 15000000, EX_N, counts);
    assert_true(chi2_report("control: drawn drafts dropped by value", counts, e.joint, EX_N) > 1.0);
    omp_set_num_threads(threads);
    free(counts);
    free(e.joint);
    sd_model_free(e.draft);
    sd_model_free(e.target);
}

/* ---------------------------------------------------------------- 3b'. under a grammar
 *
 * Constrained generation is exact against p restricted to what the grammar allows: the synthetic
 * vocabulary's pieces (id 3 a space, 4 'e', 5 't', 6 'a', 7 'o', 8 'h', ...) under two grammars,
 * one alternating vowels and consonants (every position a choice), one forcing a 't' between
 * vowels (the forced byte proposed as a draft at no draft-model cost), with the masks of the exact
 * joint written out by hand; drafters whose proposals the grammar may refuse (prompt lookup) are
 * cut there. Both modes; the forced drafts on and off. And a lazy grammar (tool_choice auto with
 * strict functions): free text, the end of generation included, until an 'h', then "h" [aeo] "t",
 * the mask depending on the history. */
static int lazy_h(const int32_t *hist, int n, int t) {
    int i = 0;
    while (i < n && hist[i] != 8) i++;
    if (i == n) return 1;  /* free: anything ('h' starts what the grammar allows) */
    const int after = n - 1 - i; /* tokens after the 'h' */
    return after == 0 ? (t == 4 || t == 6 || t == 7) : after == 1 ? t == 5 : t == 2;
}

static void test_sampling_exact_grammar(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(16, 1, 2, 1, 32, EX_V, 32, 61);
    sd_synth_params dp = sdtest_synth_shape(8, 1, 2, 2, 16, EX_V, 32, 62);
    exact_setup e;
    memset(&e, 0, sizeof e);
    e.target = sdtest_synth_model(&tp);
    e.draft = sdtest_synth_model(&dp);
    static const int32_t prompt[6] = {1, 6, 5, 6, 3, 6};
    memcpy(e.prompt, prompt, sizeof prompt);
    e.n_prompt = 6;
    e.joint = malloc(EX_CELLS * sizeof(double));
    long *counts = malloc(EX_CELLS * sizeof(long));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the contexts made below: n_threads 0 takes it */
    sd_grammar_vocab *gv = NULL;
    assert_int_equal(sd_grammar_vocab_create(sd_model_tokenizer(e.target), &gv), SD_OK);
    static int vowels_then[3][EX_V], forced_t[3][EX_V];
    for (int t = 0; t < EX_V; t++) {
        const int vowel = t == 4 || t == 6 || t == 7, cons = t == 5 || t == 8 || t == 3;
        vowels_then[0][t] = vowels_then[2][t] = vowel;
        vowels_then[1][t] = cons;
        forced_t[0][t] = forced_t[2][t] = vowel;
        forced_t[1][t] = t == 5;
    }
    enum { G_ALT, G_FORCED, G_LAZY };
    static const char *const gbnf_of[] = {[G_ALT] = "root ::= ([aeo] [th ]){4} \".\"\n",
                                          [G_FORCED] = "root ::= ([aeo] \"t\" [aeo]){3} \".\"\n",
                                          [G_LAZY] = "root ::= \"h\" [aeo] \"t\"\n"};
    static const struct {
        const char *what;
        int grammar, model, ngram, forced;
        sd_draft_mode mode;
        sd_sampling_mode smode;
    } cfgs[] = {
        {"plain, vowels and consonants", G_ALT, 0, 0, 1, SD_DRAFT_FIXED, SD_SAMPLING_COUPLED},
        {"model, adaptive, vowels and consonants", G_ALT, 1, 0, 1, SD_DRAFT_ADAPTIVE, SD_SAMPLING_REJECTION},
        {"ngram + model, vowels and consonants", G_ALT, 1, 1, 1, SD_DRAFT_FIXED, SD_SAMPLING_REJECTION},
        {"model, fixed, forced 't'", G_FORCED, 1, 0, 1, SD_DRAFT_FIXED, SD_SAMPLING_REJECTION},
        {"model, fixed, forced 't'", G_FORCED, 1, 0, 1, SD_DRAFT_FIXED, SD_SAMPLING_COUPLED},
        {"plain, forced 't' as drafts", G_FORCED, 0, 0, 1, SD_DRAFT_FIXED, SD_SAMPLING_REJECTION},
        {"model, p_min, forced 't' off", G_FORCED, 1, 0, 0, SD_DRAFT_PMIN, SD_SAMPLING_REJECTION},
        {"two slots in one batch, forced 't'", G_FORCED, 1, 0, 1, SD_DRAFT_ADAPTIVE, SD_SAMPLING_REJECTION},
        {"two slots in one batch, forced 't'", G_FORCED, 1, 0, 1, SD_DRAFT_FIXED, SD_SAMPLING_COUPLED},
        {"model, adaptive, lazy after 'h'", G_LAZY, 1, 0, 1, SD_DRAFT_ADAPTIVE, SD_SAMPLING_REJECTION},
        {"ngram + model, lazy after 'h'", G_LAZY, 1, 1, 1, SD_DRAFT_FIXED, SD_SAMPLING_COUPLED},
        {"two slots in one batch, lazy after 'h'", G_LAZY, 1, 0, 1, SD_DRAFT_ADAPTIVE, SD_SAMPLING_COUPLED},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        const int forced = cfgs[i].grammar == G_FORCED, lazy = cfgs[i].grammar == G_LAZY;
        sd_grammar *g = NULL;
        const char *text = gbnf_of[cfgs[i].grammar];
        assert_int_equal(sd_grammar_from_gbnf(text, strlen(text), NULL, &g), SD_OK);
        if (lazy) assert_int_equal(sd_grammar_set_trigger(g, "h", 1, SD_GRAMMAR_TRIGGER_ANYWHERE), SD_OK);
        e.sp = sd_sampler_default_params();
        e.sp.temperature = 1.0f;
        e.allowed = lazy ? NULL : forced ? (const int(*)[EX_V])forced_t : (const int(*)[EX_V])vowels_then;
        e.allowed_after = lazy ? lazy_h : NULL;
        e.eog_ends = lazy;
        exact_joint(&e);
        memset(counts, 0, EX_CELLS * sizeof(long));
        long drafted = 0, accepted = 0, by_grammar = 0;
        const int batched = strstr(cfgs[i].what, "one batch") != NULL; /* a server's slots, the batched drafter */
        for (int n = 0; n < EX_N && !batched; n++) {
            sd_spec_params p = greedy_params(4, 2);
            p.draft_mode = cfgs[i].mode;
            p.p_min = 0.3f;
            p.ngram = cfgs[i].ngram;
            p.sampling = e.sp;
            p.sampling.mode = cfgs[i].smode;
            p.sampling.seed = 21000000 + 100000 * (uint64_t)i + (uint64_t)n;
            p.n_ctx = 24;
            p.grammar = g;
            p.grammar_vocab = gv;
            p.grammar_drafts = cfgs[i].forced;
            p.costs.given = 1;
            for (int k = 1; k <= SD_DRAFT_COST_MAX_N; k++) p.costs.t_pass[k] = 1 + 0.2 * (k - 1);
            p.costs.t_draft = 0.1;
            collect out;
            sd_spec_stats st;
            generate(e.target, cfgs[i].model ? e.draft : NULL, &p, e.prompt, e.n_prompt, &out, &st);
            if (lazy) assert_true(out.n >= 1 && out.n <= 4); /* "hat", or an end, may come early */
            else assert_int_equal(out.n, 4);
            counts[cell_of(&e, out.out, out.n)]++;
            drafted += st.n_drafted;
            accepted += st.n_accepted;
            if (st.n_sources > 0 && !strcmp(st.sources[st.n_sources - 1], "grammar")) by_grammar += st.drafted_by[st.n_sources - 1];
        }
        if (batched) {
            sd_spec_params p = greedy_params(4, 2);
            p.draft_mode = cfgs[i].mode;
            p.sampling = e.sp;
            p.sampling.mode = cfgs[i].smode;
            p.n_ctx = 24;
            p.grammar = g;
            p.grammar_vocab = gv;
            p.grammar_drafts = 1;
            p.costs.given = 1;
            for (int k = 1; k <= SD_DRAFT_COST_MAX_N; k++) p.costs.t_pass[k] = 1 + 0.2 * (k - 1);
            p.costs.t_draft = 0.1;
            counts_batched(&e, 1, &p, lazy ? -1 : 4, 21000000 + 100000 * (uint64_t)i, EX_N, counts, &drafted, &accepted, &by_grammar);
        }
        char what[120];
        snprintf(what, sizeof what, "%s, %s", cfgs[i].what, sd_sampling_mode_name(cfgs[i].smode));
        int df = 0;
        const double x = sdtest_chi2_pooled(counts, e.joint, EX_CELLS, EX_N, &df), crit = sdtest_chi2_crit_001(df);
        printf("  %-52s chi2 %7.1f df %3d crit %6.1f ratio %.2f; %ld drafted (%ld forced), %ld accepted\n", what, x, df, crit,
               x / crit, drafted, by_grammar, accepted);
        assert_true(df >= 7);
        assert_true(x < crit);
        for (int c = 0; c < EX_CELLS; c++) /* nothing the grammar refuses */
            if (e.joint[c] == 0) assert_int_equal(counts[c], 0);
        if (forced && cfgs[i].forced) assert_true(by_grammar > EX_N / 10); /* the forced 't' was drafted */
        if (lazy && cfgs[i].forced) assert_true(by_grammar > 0);          /* the 't' after "h" [aeo] */
        if (!cfgs[i].forced) assert_int_equal(by_grammar, 0);
        sd_grammar_free(g);
    }
    sd_grammar_vocab_free(gv);
    omp_set_num_threads(threads);
    free(counts);
    free(e.joint);
    sd_model_free(e.draft);
    sd_model_free(e.target);
}

/* ---------------------------------------------------------------- 3c. coupled sampling gives plain
 * decoding's text
 *
 * With coupled sampling the token at each position is the race's winner over the target's
 * distribution there, so speculation changes nothing: for 50 seeds, temperatures 0.5, 1.0 and
 * 1.5 (top-p 0.9), every drafter and draft length (the trained stories pair: drafts are often
 * right and often wrong), chains and trees, alone and three sequences stepped in one batch, the
 * speculative tokens equal plain decoding's. The control: the same run in rejection mode does
 * not (its text depends on the drafts), so the equality is not a property of the models. */
#define ID_SEEDS 50
#define ID_N 32

static void coupled_params(sd_spec_params *p, float temp, uint64_t seed, int penalties) {
    p->n_predict = ID_N;
    p->stop_at_eos = 0;
    p->sampling.temperature = temp;
    p->sampling.top_p = 0.9f;
    p->sampling.seed = seed;
    p->sampling.mode = SD_SAMPLING_COUPLED;
    p->sampling.min_p = penalties ? 0.05f : 0.0f;
    p->sampling.presence_penalty = penalties ? 0.3f : 0.0f;
    p->sampling.frequency_penalty = penalties ? 0.2f : 0.0f;
    p->sampling.repetition_penalty = penalties ? 1.3f : 1.0f;
}

static void test_coupled_identity(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_DRAFT, REAL_TOKENIZER);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_model *d = sdtest_shared_model(REAL_DRAFT, REAL_TOKENIZER);
    int32_t prompt[64];
    const int np = encode(t, "Once upon a time, there was a little dog. The dog", prompt, 64);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* tiny models: a team would only wait at barriers */
    static const struct {
        const char *what;
        int model, ngram, tree;
        sd_draft_mode mode;
        int k, penalties;
    } cfgs[] = {
        {"model, fixed k=4", 1, 0, 0, SD_DRAFT_FIXED, 4, 0},
        {"model, adaptive k=6", 1, 0, 0, SD_DRAFT_ADAPTIVE, 6, 0},
        {"model, p_min 0.5", 1, 0, 0, SD_DRAFT_PMIN, 5, 0},
        {"ngram", 0, 1, 0, SD_DRAFT_FIXED, 4, 0},
        {"ngram + model", 1, 1, 0, SD_DRAFT_ADAPTIVE, 4, 0},
        {"tree of 8, depth 4", 1, 0, 8, SD_DRAFT_FIXED, 4, 0},
        {"model, fixed k=4, min-p and penalties", 1, 0, 0, SD_DRAFT_FIXED, 4, 1},
        {"tree of 8, min-p and penalties", 1, 0, 8, SD_DRAFT_FIXED, 4, 1},
    };
    static const float temps[3] = {0.5f, 1.0f, 1.5f};
    enum { B = 3 };
    long checked = 0, drafted = 0, accepted = 0, rejection_differs = 0, rejection_runs = 0;
    for (int ti = 0; ti < 3; ti++) {
        /* plain references, one per seed, without and with the penalties */
        int32_t(*plains)[ID_SEEDS][ID_N] = malloc(sizeof(int32_t[2][ID_SEEDS][ID_N]));
        sd_spec_params pp = sd_spec_default_params();
        for (int pen = 0; pen < 2; pen++)
            for (int sd = 0; sd < ID_SEEDS; sd++) {
                coupled_params(&pp, temps[ti], 1000 + (uint64_t)sd, pen);
                collect c;
                sd_spec_stats st;
                generate(t, NULL, &pp, prompt, np, &c, &st);
                assert_int_equal(c.n, ID_N);
                memcpy(plains[pen][sd], c.out, sizeof plains[pen][sd]);
            }
        assert_true(memcmp(plains[0], plains[1], sizeof plains[0]) != 0); /* the penalties change the text */
        for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
            int32_t(*plain)[ID_N] = plains[cfgs[ci].penalties];
            const int pen = cfgs[ci].penalties;
            sd_spec_params p = sd_spec_default_params();
            p.draft_max = cfgs[ci].k;
            p.draft_mode = cfgs[ci].mode;
            p.p_min = 0.5f;
            p.ngram = cfgs[ci].ngram;
            p.tree_budget = cfgs[ci].tree;
            sd_model *dm = cfgs[ci].model ? d : NULL;
            /* alone: one engine per seed */
            for (int sd = 0; sd < ID_SEEDS; sd++) {
                coupled_params(&p, temps[ti], 1000 + (uint64_t)sd, pen);
                collect c;
                sd_spec_stats st;
                generate(t, dm, &p, prompt, np, &c, &st);
                assert_int_equal(c.n, ID_N);
                for (int i = 0; i < ID_N; i++)
                    if (c.out[i] != plain[sd][i])
                        fail_msg("%s, T %.1f, seed %d: token %d is %d speculatively, %d plainly", cfgs[ci].what,
                                 (double)temps[ti], 1000 + sd, i, c.out[i], plain[sd][i]);
                checked++;
                drafted += st.n_drafted;
                accepted += st.n_accepted;
                if (sd == 0 && ti == 1 && !cfgs[ci].tree) { /* the control: rejection sampling's text */
                    p.sampling.mode = SD_SAMPLING_REJECTION;
                    generate(t, dm, &p, prompt, np, &c, &st);
                    rejection_differs += memcmp(c.out, plain[sd], sizeof plain[sd]) != 0;
                    rejection_runs++;
                    p.sampling.mode = SD_SAMPLING_COUPLED;
                }
            }
            /* batched: B sequences of one pair stepped together, seeds sd..sd+B-1, the pair kept */
            sd_pair *pr = NULL;
            assert_int_equal(sd_pair_create(t, dm, &p, B, &pr), SD_OK);
            sd_spec *sp[B];
            for (int j = 0; j < B; j++) sp[j] = sd_pair_spec(pr, j);
            for (int sd = 0; sd + B <= ID_SEEDS; sd += B) {
                int32_t got[B][ID_N + SD_MAX_DRAFT + 1];
                int n_got[B] = {0};
                for (int j = 0; j < B; j++) {
                    coupled_params(&p, temps[ti], 1000 + (uint64_t)(sd + j), pen);
                    assert_int_equal(sd_spec_set_params(sp[j], &p), SD_OK);
                    assert_int_equal(sd_spec_begin(sp[j], prompt, np), SD_OK);
                }
                for (int live = B; live > 0;) {
                    sd_spec_round rd[B];
                    assert_int_equal(sd_spec_batch_step(sd_pair_batch(pr), sp, B, rd), SD_OK);
                    live = 0;
                    for (int j = 0; j < B; j++) {
                        memcpy(got[j] + n_got[j], rd[j].tokens, (size_t)rd[j].n_tokens * sizeof(int32_t));
                        n_got[j] += rd[j].n_tokens;
                        live += !rd[j].done;
                    }
                }
                for (int j = 0; j < B; j++) {
                    assert_int_equal(n_got[j], ID_N);
                    if (memcmp(got[j], plain[sd + j], sizeof plain[0]) != 0)
                        fail_msg("%s, batched, T %.1f, seed %d: differs from plain decoding", cfgs[ci].what,
                                 (double)temps[ti], 1000 + sd + j);
                    checked++;
                }
            }
            sd_pair_free(pr);
        }
        free(plains);
    }
    printf("  %ld speculative generations equal plain decoding's text (acceptance %.2f); rejection sampling's "
           "text differed from it in %ld of %ld runs\n",
           checked, drafted ? (double)accepted / (double)drafted : 0, rejection_differs, rejection_runs);
    assert_true(drafted > 0 && accepted > 0 && accepted < drafted);
    assert_true(rejection_differs * 2 > rejection_runs);
    omp_set_num_threads(threads);
    sd_model_free(d);
    sd_model_free(t);
}

/* ---------------------------------------------------------------- 3d. log-probabilities
 *
 * Each emitted token's log-probability (and its 5 likeliest alternatives') come from the row that
 * scores it, so they are the same bits whether the token was drafted, corrected or decoded plainly:
 * the speculative runs (a chain, a tree, greedy and coupled) report exactly the plain run's, which
 * match a reference log-softmax in double of a one-token-at-a-time forward. */
typedef struct {
    int32_t tok[64];
    sd_token_logprobs lp[64];
    int n;
} lp_run;

static void run_logprobs(sd_model *t, sd_model *d, int k, int tree, float temp, const int32_t *prompt, int np, lp_run *out) {
    sd_spec_params p = greedy_params(24, k);
    p.tree_budget = tree;
    p.sampling.temperature = temp;
    p.sampling.mode = SD_SAMPLING_COUPLED;
    p.sampling.seed = 5;
    p.logprobs = 1;
    p.top_logprobs = 5;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(t, d, &p, &s), SD_OK);
    assert_int_equal(sd_spec_begin(s, prompt, np), SD_OK);
    out->n = 0;
    while (!sd_spec_done(s)) {
        sd_spec_round rd;
        assert_int_equal(sd_spec_step(s, NULL, NULL, &rd), SD_OK);
        for (int i = 0; i < rd.n_tokens && out->n < 64; i++, out->n++) {
            out->tok[out->n] = rd.tokens[i];
            out->lp[out->n] = rd.logprobs[i];
        }
    }
    sd_spec_free(s);
}

static void test_logprobs(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_DRAFT, REAL_TOKENIZER);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_model *d = sdtest_shared_model(REAL_DRAFT, REAL_TOKENIZER);
    int32_t prompt[32];
    const int np = encode(t, "Once upon a time", prompt, 32);
    for (int ti = 0; ti < 2; ti++) {
        const float temp = ti ? 0.9f : 0.0f;
        lp_run plain, chain, tree;
        run_logprobs(t, NULL, 0, 0, temp, prompt, np, &plain);
        run_logprobs(t, d, 4, 0, temp, prompt, np, &chain);
        run_logprobs(t, d, 4, 8, temp, prompt, np, &tree);
        assert_int_equal(plain.n, 24);
        assert_int_equal(chain.n, 24);
        assert_int_equal(tree.n, 24);
        assert_memory_equal(plain.tok, chain.tok, 24 * sizeof(int32_t));
        assert_memory_equal(plain.tok, tree.tok, 24 * sizeof(int32_t));
        assert_memory_equal(plain.lp, chain.lp, 24 * sizeof(sd_token_logprobs));
        assert_memory_equal(plain.lp, tree.lp, 24 * sizeof(sd_token_logprobs));
        /* the reference: one token at a time, log-softmax in double */
        sd_context *c = NULL;
        assert_int_equal(sd_context_create(t, NULL, &c), SD_OK);
        const int V = sd_model_hparams(t)->vocab_size;
        float *lg = malloc((size_t)V * sizeof *lg);
        assert_int_equal(sd_context_forward(c, 0, prompt, np, lg, 0), SD_OK);
        double worst = 0;
        for (int i = 0; i < 24; i++) {
            double mx = lg[0], sum = 0;
            for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
            const double lse = mx + log(sum);
            const double want = lg[plain.tok[i]] - lse, d0 = fabs(want - plain.lp[i].logprob);
            worst = d0 > worst ? d0 : worst;
            assert_int_equal(plain.lp[i].n_top, 5);
            for (int j = 0; j < 5; j++) {
                if (j) assert_true(plain.lp[i].top_logprob[j] <= plain.lp[i].top_logprob[j - 1]);
                for (int v = 0; v < V; v++) /* nothing outside the list beats its last entry */
                    if (lg[v] > lg[plain.lp[i].top_id[4]]) {
                        int in = 0;
                        for (int q = 0; q < 5; q++) in |= plain.lp[i].top_id[q] == v;
                        assert_true(in);
                    }
            }
            if (temp == 0) assert_int_equal(plain.lp[i].top_id[0], plain.tok[i]); /* greedy: the argmax */
            assert_int_equal(sd_context_forward(c, 0, &plain.tok[i], 1, lg, 0), SD_OK);
        }
        printf("  T %.1f: chain and tree logprobs equal plain decoding's bit for bit; against the reference "
               "log-softmax in double: %.2g at most\n", (double)temp, worst);
        assert_true(worst < 1e-5);
        free(lg);
        sd_context_free(c);
    }
    sd_model_free(d);
    sd_model_free(t);
}

/* ---------------------------------------------------------------- 4. bonus tokens and
 * deterministic drafts
 *
 * The bonus token (drawn when every draft is accepted) must come from the target's row after
 * the last draft. Self-drafting at temperature 1 accepts every draft (q equals p bit for bit), so
 * with n_predict = k + 1 the first round emits k drafts and the bonus: the pair (t_k, t_k+1) is
 * compared with its exact distribution, and with the distribution a stale row (the bonus drawn
 * after t_k-1 instead) would give, which the counts must reject. */

/* P(t_k = a, t_k+1 = b) exactly, and the stale variant P'(a, b) = sum P(prefix) p(a|prefix)
 * p(b|prefix), over all prefixes t_1..t_k-1, by depth-first search in one context. */
static void bonus_joints(sd_context *c, const sd_sampler_params *sp, const int32_t *prompt, int n_prompt, int k,
                         double *joint, double *stale) {
    const int V = EX_V;
    void *scratch = malloc(sd_sample_scratch_bytes(V));
    float logits[EX_V];
    memset(joint, 0, sizeof(double) * V * V);
    memset(stale, 0, sizeof(double) * V * V);
    /* stack of (prefix probability, distribution after the prefix) per depth */
    double pref[SD_MAX_DRAFT + 1];
    float probs[SD_MAX_DRAFT + 2][EX_V];
    int32_t cur[SD_MAX_DRAFT + 1];
    sd_context_seq_truncate(c, 0, 0);
    assert_int_equal(sd_context_forward(c, 0, prompt, n_prompt, logits, 0), SD_OK);
    assert_int_equal(sd_sample_probs(sp, logits, V, probs[0], scratch), SD_OK);
    pref[0] = 1.0;
    int depth = 0; /* tokens in cur */
    cur[0] = -1;
    for (;;) {
        if (depth == k - 1) { /* prefix complete: t_k = a, then t_k+1 = b */
            for (int32_t a = 0; a < V; a++) {
                const double pa = pref[depth] * probs[depth][a];
                if (pa == 0) continue;
                assert_int_equal(sd_context_forward(c, 0, &a, 1, logits, 0), SD_OK);
                assert_int_equal(sd_sample_probs(sp, logits, V, probs[depth + 1], scratch), SD_OK);
                for (int b = 0; b < V; b++) {
                    joint[a * V + b] += pa * probs[depth + 1][b];
                    stale[a * V + b] += pa * probs[depth][b];
                }
                assert_int_equal(sd_context_seq_truncate(c, 0, n_prompt + depth), SD_OK);
            }
            if (depth == 0) break;
            depth--; /* back up and advance */
            assert_int_equal(sd_context_seq_truncate(c, 0, n_prompt + depth), SD_OK);
        }
        /* next token at this depth */
        int32_t t = cur[depth] + 1;
        while (t < V && probs[depth][t] == 0) t++;
        if (t == V) {
            if (depth == 0) break;
            depth--;
            assert_int_equal(sd_context_seq_truncate(c, 0, n_prompt + depth), SD_OK);
            continue;
        }
        cur[depth] = t;
        assert_int_equal(sd_context_forward(c, 0, &t, 1, logits, 0), SD_OK);
        pref[depth + 1] = pref[depth] * probs[depth][t];
        assert_int_equal(sd_sample_probs(sp, logits, V, probs[depth + 1], scratch), SD_OK);
        depth++;
        cur[depth] = -1;
    }
    free(scratch);
}

static double chi2_ratio(const long *counts, const double *prob, int cells, long n) {
    int df = 0;
    const double x = sdtest_chi2_pooled(counts, prob, cells, n, &df);
    assert_true(df >= 20);
    return x / sdtest_chi2_crit_001(df);
}

static void test_bonus_token_exact(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(16, 1, 2, 1, 32, EX_V, 32, 63);
    sd_model *m = sdtest_synth_model(&tp);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the contexts made below: n_threads 0 takes it */
    const int32_t prompt[2] = {1, 7};
    sd_sampler_params sp = sd_sampler_default_params();
    sp.temperature = 1.0f;
    double *joint = malloc(sizeof(double) * EX_V * EX_V), *stale = malloc(sizeof(double) * EX_V * EX_V);
    long *counts = malloc(sizeof(long) * EX_V * EX_V);
    sd_context *c = NULL;
    assert_int_equal(sd_context_create(m, NULL, &c), SD_OK);
    static const int ks[] = {1, 4};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        const int k = ks[i];
        bonus_joints(c, &sp, prompt, 2, k, joint, stale);
        memset(counts, 0, sizeof(long) * EX_V * EX_V);
        long bonus = 0;
        for (int g = 0; g < EX_N; g++) {
            sd_spec_params p = greedy_params(k + 1, k);
            p.sampling = sp;
            p.sampling.seed = 9000000 + (uint64_t)g;
            p.n_ctx = 16;
            collect out;
            sd_spec_stats st;
            generate(m, m, &p, prompt, 2, &out, &st);
            assert_int_equal(out.n, k + 1);
            assert_int_equal(st.n_accepted, k); /* q == p: every draft is accepted ... */
            assert_int_equal(st.n_verify, 1);   /* ... in one round, whose last token is the bonus */
            bonus++;
            counts[out.out[k - 1] * EX_V + out.out[k]]++;
        }
        const double r = chi2_ratio(counts, joint, EX_V * EX_V, EX_N);
        const double r_stale = chi2_ratio(counts, stale, EX_V * EX_V, EX_N);
        printf("  k=%d: %ld bonus tokens; chi2/crit %.2f against the exact (t_k, bonus) joint, %.2f against a stale row's\n",
               k, bonus, r, r_stale);
        assert_true(r < 1.0);
        assert_true(r_stale > 1.0);
    }
    omp_set_num_threads(threads);
    sd_context_free(c);
    free(joint);
    free(stale);
    free(counts);
    sd_model_free(m);
}

/* A deterministic drafter (no distributions: q is one-hot): the target's own greedy continuation,
 * run from scratch in a context of its own (the likeliest tokens: both acceptance and rejection
 * happen often); broken, it proposes more than asked or ids outside the
 * vocabulary. */
typedef struct {
    int mode; /* 0 well-behaved, 1 one too many, 2 an id past the vocabulary */
    int calls;
    sd_context *c;
} fixed_drafter;

static sd_status fixed_draft(sd_drafter *d, sd_draft_req *r) {
    fixed_drafter *f = d->impl;
    f->calls++;
    float lg[EX_V];
    sd_context_seq_truncate(f->c, 0, 0);
    sd_status st = sd_context_forward(f->c, 0, r->hist, r->n_hist, lg, 0);
    for (int i = 0; i < r->k && st == SD_OK; i++) {
        r->out[i] = sd_argmax(lg, EX_V);
        if (r->conf) r->conf[i] = 1;
        if (i + 1 < r->k) st = sd_context_forward(f->c, 0, &r->out[i], 1, lg, 0);
    }
    if (st != SD_OK) return st;
    r->n_out = r->k;
    r->q_filled = 0;
    r->source = 0;
    if (f->mode == 1) r->n_out = r->k + 1;
    if (f->mode == 2) r->out[0] = d->n_vocab + 3;
    return SD_OK;
}
static void fixed_destroy(sd_drafter *d) { (void)d; }
static const sd_drafter_vtbl k_fixed_vtbl = {NULL, fixed_draft, fixed_destroy, NULL, NULL};

/* Speculative sampling with one-hot q: accept d with probability p(d), else draw from p with d
 * removed. The joint of the first three tokens matches the target's exactly; a loop that draws
 * the correction from p itself (d not removed) is rejected by the same statistic. */
static void test_deterministic_drafter_exact(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(16, 1, 2, 1, 32, EX_V, 32, 61);
    exact_setup e;
    memset(&e, 0, sizeof e);
    e.target = sdtest_synth_model(&tp);
    e.prompt[0] = 1;
    e.prompt[1] = 5;
    e.n_prompt = 2;
    e.sp = sd_sampler_default_params();
    e.sp.temperature = 1.0f;
    e.joint = malloc(EX_CELLS * sizeof(double));
    long *counts = calloc(EX_CELLS, sizeof(long)), *broken = calloc(EX_CELLS, sizeof(long));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the contexts made below: n_threads 0 takes it */
    exact_joint(&e);
    sd_model *dm = e.target; /* drafting the target's own greedy choice */
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 16;
    sd_context *c = NULL, *dc = NULL;
    assert_int_equal(sd_context_create(e.target, &cp, &c), SD_OK);
    assert_int_equal(sd_context_create(dm, &cp, &dc), SD_OK);
    sd_spec_batch *batch = NULL;
    assert_int_equal(sd_spec_batch_create(c, NULL, &batch), SD_OK);
    fixed_drafter f = {0, 0, dc};
    sd_drafter d = {&k_fixed_vtbl, &f, "fixed", {"greedy target"}, 1, EX_V, INT32_MAX, 1u};
    long drafted = 0, accepted = 0;
    float p[EX_V];
    void *scratch = malloc(sd_sample_scratch_bytes(EX_V));
    for (int g = 0; g < EX_N; g++) {
        sd_spec_params sp = greedy_params(3, 2);
        sp.sampling = e.sp;
        sp.sampling.seed = 7000000 + (uint64_t)g;
        sd_spec *s = NULL;
        assert_int_equal(sd_spec_create_with(batch, 0, &d, &sp, &s), SD_OK);
        collect out;
        memset(&out, 0, sizeof out);
        sd_spec_stats st;
        assert_int_equal(sd_spec_generate(s, e.prompt, 2, collect_cb, &out, &st), SD_OK);
        assert_int_equal(out.n, 3);
        counts[(out.out[0] * EX_V + out.out[1]) * EX_V + out.out[2]]++;
        drafted += st.n_drafted;
        accepted += st.n_accepted;
        sd_spec_free(s);
        /* the broken loop: first position only, correction drawn from p with the draft left in */
        sd_rng rng;
        sd_rng_seed(&rng, 8000000 + (uint64_t)g);
        float lg[EX_V];
        int32_t hist[5] = {e.prompt[0], e.prompt[1]};
        sd_context_seq_truncate(c, 0, 0);
        assert_int_equal(sd_context_forward(c, 0, hist, 2, lg, 0), SD_OK);
        for (int t = 0; t < 3; t++) {
            assert_int_equal(sd_sample_probs(&e.sp, lg, EX_V, p, scratch), SD_OK);
            int32_t dft = 0;
            sd_draft_req rq = {hist, 2 + t, 2, 1, &rng, NULL, NULL, NULL, NULL, &dft, NULL, 0, 0, 0, 0, 0};
            assert_int_equal(fixed_draft(&d, &rq), SD_OK);
            hist[2 + t] = sd_rng_uniform(&rng) < p[dft] ? dft : sd_sample_draw(p, EX_V, &rng);
            if (t < 2) assert_int_equal(sd_context_forward(c, 0, &hist[2 + t], 1, lg, 0), SD_OK);
        }
        broken[(hist[2] * EX_V + hist[3]) * EX_V + hist[4]]++;
    }
    const double acc = (double)accepted / (double)drafted;
    const double r = chi2_report("deterministic drafter (one-hot q)", counts, e.joint, EX_N);
    const double rb = chi2_report("control: correction keeps the draft", broken, e.joint, EX_N);
    printf("  %-36s acceptance %.3f\n", "", acc);
    assert_true(acc > 0.1 && acc < 0.9);
    assert_true(r < 1.0);
    assert_true(rb > 1.0);
    assert_true(f.calls > 0);

    /* contract violations are errors naming the drafter */
    sd_spec_params sp = greedy_params(8, 4);
    sd_spec *s = NULL;
    static const char *const want[2] = {"drafter 'fixed' proposed 5 tokens; at most 4 were asked for",
                                        "drafter 'fixed' proposed id 19, outside the target's vocabulary of 16"};
    for (int mode = 1; mode <= 2; mode++) {
        f.mode = mode;
        assert_int_equal(sd_spec_create_with(batch, 0, &d, &sp, &s), SD_OK);
        assert_int_equal(sd_spec_generate(s, e.prompt, 2, NULL, NULL, NULL), SD_ERR_INVALID_ARG);
        printf("  -> %s\n", sd_last_error());
        assert_non_null(strstr(sd_last_error(), want[mode - 1]));
        sd_spec_free(s);
    }
    /* a drafter that could propose ids the target cannot score is refused up front */
    d.n_vocab = EX_V + 1;
    assert_int_equal(sd_spec_create_with(batch, 0, &d, &sp, &s), SD_ERR_MISMATCH);
    assert_null(s);
    omp_set_num_threads(threads);
    free(scratch);
    sd_spec_batch_free(batch);
    sd_context_free(c);
    sd_context_free(dc);
    free(counts);
    free(broken);
    free(e.joint);
    sd_model_free(e.target);
}

/* ---------------------------------------------------------------- end of sequence */

/* The tiny model's weights with `eos` as its end-of-sequence id. */
static sd_model *model_with_eos(const sd_synth_params *p, int32_t eos) {
    sd_gguf_writer *w = NULL;
    assert_int_equal(sd_synth_build(p, &w), SD_OK);
    assert_int_equal(sd_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos), SD_OK);
    static int counter;
    char name[64];
    snprintf(name, sizeof name, "eos%d.gguf", counter++);
    const char *path = sdtest_tmp_path(name);
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_gguf_writer_free(w);
    sd_model *m = NULL;
    if (sd_model_load(path, NULL, &m) != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    remove(path);
    return m;
}

/* Generation stops right after the target's EOS, in plain decoding, inside a pass's accepted
 * drafts (self-drafting: every draft is accepted) and as a pass's correction or bonus (another
 * draft); every run emits the same tokens and counts only the drafts it emitted. */
static void test_stop_at_eos(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(64, 2, 8, 2, 96, 320, 256, 111);
    sd_synth_params dp = sdtest_synth_shape(32, 1, 4, 2, 64, 320, 256, 112);
    sd_model *m0 = sdtest_synth_model(&tp);
    const int32_t prompt[3] = {1, 40, 41};
    sd_spec_params pp = greedy_params(60, 0);
    collect ref;
    sd_spec_stats st;
    generate(m0, NULL, &pp, prompt, 3, &ref, &st);
    /* positions 4 and 13: inside the first 9-token pass of k = 8, and in a later one */
    static const int at[] = {4, 13};
    for (size_t a = 0; a < sizeof at / sizeof *at; a++) {
        int j = at[a];
        while (j < 60) { /* the first position holding a token not seen before it */
            int seen = 0;
            for (int i = 0; i < j; i++) seen |= ref.out[i] == ref.out[j];
            if (!seen) break;
            j++;
        }
        assert_true(j < 60);
        const int32_t eos = ref.out[j];
        sd_model *t = model_with_eos(&tp, eos), *d = model_with_eos(&dp, eos);
        for (int run = 0; run < 3; run++) {
            sd_spec_params p = greedy_params(60, run == 0 ? 0 : 8);
            p.stop_at_eos = 1;
            collect out;
            sd_spec *s = NULL;
            assert_int_equal(sd_spec_create(t, run == 0 ? NULL : run == 1 ? t : d, &p, &s), SD_OK);
            memset(&out, 0, sizeof out);
            assert_int_equal(sd_spec_generate(s, prompt, 3, collect_cb, &out, &st), SD_OK);
            assert_int_equal(st.stop_reason, SD_STOP_EOS);
            assert_int_equal(out.n, j + 1);
            assert_memory_equal(out.out, ref.out, (size_t)(j + 1) * sizeof(int32_t));
            assert_int_equal(out.out[j], eos);
            int n = 0;
            sd_spec_tokens(s, &n);
            assert_int_equal(sd_context_seq_len(sd_spec_target_context(s), 0), n - 1);
            if (run == 1) {
                /* self-drafting, k = 8: rounds of 8 accepted drafts and a bonus; the last round is cut
                 * after the EOS, and the drafts after it are counted as drafted, not accepted */
                const int inside = (j + 1) % 9 != 0;
                assert_int_equal(st.n_verify, (j + 1 + 8) / 9);
                assert_int_equal(st.n_accepted + st.n_verify - inside, j + 1);
                assert_int_equal(st.n_drafted, 8 * st.n_verify);
            }
            check_stats(&st, run == 0 ? 0 : 8, j + 1);
            sd_spec_free(s);
        }
        printf("  EOS %d at generated position %d: plain, self-draft (inside accepted drafts) and another draft stop there\n",
               (int)eos, j);
        sd_model_free(t);
        sd_model_free(d);
    }
    sd_model_free(m0);
}

/* Trees of drafts: greedy output identical to plain decoding for several budgets; on the real
 * pair a tree earns more tokens per verify pass than a chain of the same depth. */
static void test_tree_greedy_lossless(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_DRAFT, REAL_TOKENIZER);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_model *d = sdtest_shared_model(REAL_DRAFT, REAL_TOKENIZER);
    int32_t prompt[64];
    const int n = encode(t, "Once upon a time", prompt, 64);
    collect plain;
    sd_spec_stats st;
    sd_spec_params pp = greedy_params(N_GEN, 0);
    generate(t, NULL, &pp, prompt, n, &plain, &st);
    double chain_tpp = 0;
    static const int budgets[] = {0, 4, 8, 16};
    for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
        sd_spec_params p = greedy_params(N_GEN, 4);
        p.tree_budget = budgets[b];
        collect out;
        generate(t, d, &p, prompt, n, &out, &st);
        assert_int_equal(out.n, N_GEN);
        assert_memory_equal(out.out, plain.out, N_GEN * sizeof(int32_t));
        if (!budgets[b]) check_stats(&st, 4, N_GEN); /* per-position counts sum to drafts in chains only */
        assert_int_equal(st.n_generated, st.n_target_steps + st.n_verify + st.n_accepted);
        assert_true(st.drafted_at[4] == 0 && st.accepted_at[0] <= st.drafted_at[0]);
        const double tpp = sd_spec_mean_accepted(&st);
        printf("  depth 4, %s %2d: %d rounds, %.2f tokens per verify pass, %d drafts proposed\n",
               budgets[b] ? "tree of" : "chain,", budgets[b] ? budgets[b] : 4, st.n_verify, tpp, st.n_drafted);
        if (!budgets[b]) chain_tpp = tpp;
        else if (budgets[b] >= 8) assert_true(tpp > chain_tpp);
    }
    sd_model_free(d);
    sd_model_free(t);
}

/* ---------------------------------------------------------------- 5. incompatible pairs */

/* The first id whose piece text differs between two tokenizers (-1 if none). */
static int first_difference(const sd_tokenizer *a, const sd_tokenizer *b) {
    int n = sd_tokenizer_n_vocab(a) < sd_tokenizer_n_vocab(b) ? sd_tokenizer_n_vocab(a) : sd_tokenizer_n_vocab(b);
    for (int id = 0; id < n; id++) {
        size_t la, lb;
        const char *pa = sd_tokenizer_piece(a, id, &la), *pb = sd_tokenizer_piece(b, id, &lb);
        if (la != lb || memcmp(pa, pb, la) != 0) return id;
    }
    return -1;
}

static void expect_mismatch(sd_model *t, sd_model *d, int id) {
    sd_spec_params p = greedy_params(10, 4);
    sd_spec *s = (sd_spec *)&p;
    assert_int_equal(sd_spec_create(t, d, &p, &s), SD_ERR_MISMATCH);
    assert_null(s);
    const char *msg = sd_last_error();
    printf("  mismatch: %s\n", msg);
    char want[48];
    snprintf(want, sizeof want, "id %d", id);
    if (!strstr(msg, want)) fail_msg("message does not name %s: %s", want, msg);
}

static void test_incompatible_llama2_vocab(void **state) {
    (void)state;
    require_shared(REAL_TARGET, REAL_TOKENIZER, LLAMA2_TOKENIZER);
    sd_model *t = sdtest_shared_model(REAL_TARGET, REAL_TOKENIZER);
    sd_tokenizer *l2 = load_llama2c_tokenizer(LLAMA2_TOKENIZER, 32000);
    /* A tiny random model carrying the Llama-2 vocabulary (32000 pieces). */
    sd_synth_params p = sdtest_synth_shape(8, 1, 2, 2, 16, 32000, 512, 71);
    sd_model *d = synth_with_tokenizer(&p, l2);
    int id = first_difference(sd_model_tokenizer(t), l2);
    assert_true(id >= 3); /* <unk>, <s>, </s> agree; the pieces do not */
    expect_mismatch(t, d, id);
    /* both texts are named (they are printable pieces here, quoted verbatim) */
    size_t la, lb;
    const char *pa = sd_tokenizer_piece(sd_model_tokenizer(t), id, &la);
    const char *pb = sd_tokenizer_piece(l2, id, &lb);
    char *ta = strndup(pa, la), *tb = strndup(pb, lb);
    assert_non_null(strstr(sd_last_error(), ta));
    assert_non_null(strstr(sd_last_error(), tb));
    free(ta);
    free(tb);
    /* the reverse direction fails as well */
    expect_mismatch(d, t, id);
    sd_model_free(d);
    sd_tokenizer_free(l2);
    sd_model_free(t);
}

static void test_incompatible_synth_vocab(void **state) {
    (void)state;
    sd_model *t = sdtest_tiny_model(32, 1, 4, 2, 64, 320, 81);
    /* 300 vs 320: the first 300 pieces agree, ids 300.. are normal pieces only the target has */
    sd_model *d = sdtest_tiny_model(32, 1, 4, 2, 64, 300, 82);
    expect_mismatch(t, d, 300);
    assert_non_null(strstr(sd_last_error(), "only the target"));
    /* 32 vs 320: no byte tokens in the small vocabulary, so id 3 differs already */
    sd_model *d2 = sdtest_tiny_model(32, 1, 4, 2, 64, 32, 83);
    expect_mismatch(t, d2, 3);
    assert_non_null(strstr(sd_last_error(), "<0x00>"));
    sd_model_free(d2);
    sd_model_free(d);
    sd_model_free(t);
}

static void test_spec_create_args(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(32, 1, 4, 2, 64, 64, 91);
    sd_spec *s = NULL;
    sd_spec_params p = greedy_params(10, 0);
    /* k = 0 with a draft: no drafting (a server request's speculative.n_max 0) */
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    const int32_t prompt[2] = {1, 5};
    sd_spec_stats st;
    assert_int_equal(sd_spec_generate(s, prompt, 2, NULL, NULL, &st), SD_OK);
    assert_int_equal(st.n_verify, 0);
    assert_int_equal(st.n_target_steps, 10);
    sd_spec_free(s);
    s = NULL;
    /* A tree's shape is fixed before its nodes are drawn: p_min, which judges each draft of a
     * chain, has no say in it, so asking for both is refused by name rather than half-honoured. */
    p.draft_max = 4;
    p.tree_budget = 8;
    p.draft_mode = SD_DRAFT_PMIN;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_UNSUPPORTED);
    assert_non_null(strstr(sd_last_error(), "p_min"));
    assert_null(s);
    p.draft_mode = SD_DRAFT_FIXED;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    sd_spec_free(s);
    s = NULL;
    p.tree_budget = 0;
    p.draft_max = SD_MAX_DRAFT + 1;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_INVALID_ARG);
    p.draft_max = 4;
    p.n_predict = 0;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_INVALID_ARG);
    p.n_predict = 10;
    p.n_ctx = -1;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_INVALID_ARG);
    p.n_ctx = 0;
    p.sampling.top_p = 0;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_INVALID_ARG);
    assert_null(s);
    sd_spec_free(NULL);
    sd_model_free(m);
}

/* ---------------------------------------------------------------- 6. context exhaustion */

typedef struct {
    int n_ctx, k;
    int prev; /* history length before the step */
    int steps;
} shrink_ctx;

/* Self-drafting accepts everything, so a pass emits exactly nd + 1 tokens: the draft length
 * nd is visible in the history growth and must be min(k, room - 1) (room = n_ctx - history). */
static void shrink_on_step(sd_spec *s, void *user) {
    shrink_ctx *c = user;
    int n = 0;
    sd_spec_tokens(s, &n);
    int room = c->n_ctx - c->prev;
    int nd = c->k < room - 1 ? c->k : room - 1;
    if (n - c->prev != nd + 1)
        fail_msg("history %d -> %d with room %d: expected a draft of %d", c->prev, n, room, nd);
    sd_context *ct = sd_spec_target_context(s), *cd = sd_drafter_model_context(sd_spec_drafter(s));
    assert_true(sd_context_seq_len(ct, 0) <= sd_context_n_ctx(ct));
    assert_true(sd_context_seq_len(cd, 0) <= sd_context_n_ctx(cd));
    c->prev = n;
    c->steps++;
}

static void test_context_exhaustion(void **state) {
    (void)state;
    sd_synth_params tp = sdtest_synth_shape(64, 4, 8, 2, 128, 320, 256, 101);
    sd_synth_params dp = sdtest_synth_shape(32, 1, 4, 2, 64, 320, 256, 102);
    sd_model *t = sdtest_synth_model(&tp);
    sd_model *d = sdtest_synth_model(&dp);
    const int32_t prompt[3] = {1, 300, 301};
    enum { N_CTX = 37 };

    /* Plain decoding fills the context and stops with "context". */
    sd_spec_params pp = greedy_params(100, 0);
    pp.n_ctx = N_CTX;
    collect plain;
    sd_spec_stats pst;
    generate(t, NULL, &pp, prompt, 3, &plain, &pst);
    assert_int_equal(pst.stop_reason, SD_STOP_CONTEXT);
    assert_int_equal(plain.n, N_CTX - 3);
    check_stats(&pst, 0, N_CTX - 3);

    /* Self-draft with k = 8: passes of 9 tokens until the room runs short, then shorter drafts. */
    sd_spec_params sp = greedy_params(100, 8);
    sp.n_ctx = N_CTX;
    shrink_ctx sc = {N_CTX, 8, 3, 0};
    sp.on_step = shrink_on_step;
    sp.step_user = &sc;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(t, t, &sp, &s), SD_OK);
    collect c;
    memset(&c, 0, sizeof c);
    sd_spec_stats st;
    assert_int_equal(sd_spec_generate(s, prompt, 3, collect_cb, &c, &st), SD_OK);
    assert_int_equal(st.stop_reason, SD_STOP_CONTEXT);
    assert_int_equal(c.n, N_CTX - 3);
    assert_memory_equal(c.out, plain.out, (size_t)c.n * sizeof(int32_t));
    check_stats(&st, 8, N_CTX - 3);
    assert_int_equal(sc.prev, N_CTX); /* the history fills the context exactly */
    assert_true(sc.steps >= 4);
    assert_true(st.drafted_at[7] < st.n_verify); /* the last pass drafted fewer than k */
    assert_int_equal(sd_context_seq_len(sd_spec_target_context(s), 0), N_CTX - 1);
    sd_spec_free(s);

    /* A different draft, several k: output equals plain, never past the cache. */
    static const int ks[] = {1, 3, 8, SD_MAX_DRAFT};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        sd_spec_params q = greedy_params(100, ks[i]);
        q.n_ctx = N_CTX;
        generate(t, d, &q, prompt, 3, &c, &st);
        assert_int_equal(st.stop_reason, SD_STOP_CONTEXT);
        assert_int_equal(c.n, N_CTX - 3);
        assert_memory_equal(c.out, plain.out, (size_t)c.n * sizeof(int32_t));
        check_stats(&st, ks[i], N_CTX - 3);
        assert_true(st.kv_bytes_target <= (size_t)(N_CTX - 1) * (2 * 4 * 16 * sizeof(float)));
    }

    /* The context is the smaller model's when none is given: a draft of 40 positions stops the
     * pair there, and the output is a prefix of the target's own. */
    sd_synth_params sdp = dp;
    sdp.ctx_len = 40;
    sd_model *dshort = sdtest_synth_model(&sdp);
    sd_spec_params q = greedy_params(100, 4);
    generate(t, dshort, &q, prompt, 3, &c, &st);
    assert_int_equal(st.stop_reason, SD_STOP_CONTEXT);
    assert_int_equal(c.n, 40 - 3);
    collect plain_long;
    pp.n_ctx = 0;
    generate(t, NULL, &pp, prompt, 3, &plain_long, &pst);
    assert_int_equal(pst.stop_reason, SD_STOP_LENGTH);
    assert_memory_equal(c.out, plain_long.out, (size_t)c.n * sizeof(int32_t));

    /* Edge cases: a prompt of n_ctx - 1 tokens leaves room for exactly the first token; a prompt
     * filling the context is refused. */
    int32_t longp[N_CTX];
    for (int i = 0; i < N_CTX; i++) longp[i] = i == 0 ? 1 : 3 + i;
    sd_spec_params e = greedy_params(100, 4);
    e.n_ctx = N_CTX;
    generate(t, d, &e, longp, N_CTX - 1, &c, &st);
    assert_int_equal(c.n, 1);
    assert_int_equal(st.stop_reason, SD_STOP_CONTEXT);
    assert_int_equal(sd_spec_create(t, d, &e, &s), SD_OK);
    assert_int_equal(sd_spec_generate(s, longp, N_CTX, collect_cb, &c, &st), SD_ERR_CONTEXT_FULL);
    sd_spec_free(s);

    sd_model_free(dshort);
    sd_model_free(d);
    sd_model_free(t);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. test_spec 'test_sampling*' */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_self_draft_tiny),
        cmocka_unit_test(test_greedy_self_draft_real),
        cmocka_unit_test(test_greedy_real_pair),
        cmocka_unit_test(test_greedy_random_draft),
        cmocka_unit_test(test_greedy_tiny_gqa_pair),
        cmocka_unit_test(test_rollback_invariants),
        cmocka_unit_test(test_stop_mid_pass),
        cmocka_unit_test(test_sampling_exact),
        cmocka_unit_test(test_sampling_exact_every_drafter),
        cmocka_unit_test(test_sampling_exact_grammar),
        cmocka_unit_test(test_coupled_identity),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_bonus_token_exact),
        cmocka_unit_test(test_deterministic_drafter_exact),
        cmocka_unit_test(test_stop_at_eos),
        cmocka_unit_test(test_tree_greedy_lossless),
        cmocka_unit_test(test_incompatible_llama2_vocab),
        cmocka_unit_test(test_incompatible_synth_vocab),
        cmocka_unit_test(test_spec_create_args),
        cmocka_unit_test(test_context_exhaustion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
