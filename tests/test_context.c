/* Contexts and batches: one model shared by contexts on several threads, a batch of several
 * sequences equal to each sequence run alone, a tree batch equal to each of its root-to-leaf
 * paths run as a chain (bit for bit, as the kernels guarantee for passes of up to
 * SD_SMALL_BATCH tokens), and every malformed batch refused with its reason and no change. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/context.h"
#include "specdec/draft.h"
#include "specdec/spec.h"
#include "specdec/target.h"

static sd_context *new_ctx_kv(const sd_model *m, int n_ctx, int n_seq, sd_type kv_type) {
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.kv_type = kv_type;
    sd_context *c = NULL;
    if (sd_context_create(m, &cp, &c) != SD_OK) fail_msg("context: %s", sd_last_error());
    return c;
}

static sd_context *new_ctx(const sd_model *m, int n_ctx, int n_seq) { return new_ctx_kv(m, n_ctx, n_seq, SD_TYPE_F32); }

/* The model under test: a GQA shape with head_dim 16 (the AVX-512 attention paths) and one with
 * head_dim 8 (the short-head path), both F32; and a Q8_0 copy (integer kernels). */
static sd_model *model_of(int which) {
    sd_synth_params p = which == 1 ? sdtest_synth_shape(32, 2, 4, 2, 64, 300, 128, 12)
                                   : sdtest_synth_shape(64, 2, 4, 2, 96, 300, 128, 11);
    if (which == 2) p.wtype = SD_TYPE_Q8_0;
    return sdtest_synth_model(&p);
}

/* ---------------------------------------------------------------- several sequences */

/* S sequences with different prompt lengths, then one pass holding m tokens of each: every row
 * equals the same tokens run alone in a context of one sequence, bit for bit. */
static void check_multi_seq(const sd_model *m) {
    enum { S = 4, M = 5 };
    const int V = sd_model_hparams(m)->vocab_size;
    int32_t tok[S][40];
    const int pre[S] = {3, 17, 1, 9};
    for (int s = 0; s < S; s++)
        for (int i = 0; i < 40; i++) tok[s][i] = (int32_t)((i * 31 + s * 97 + 5) % V);
    sd_context *multi = new_ctx(m, 64, S), *alone = new_ctx(m, 64, 1);
    for (int s = 0; s < S; s++) assert_int_equal(sd_context_forward(multi, s, tok[s], pre[s], NULL, 0), SD_OK);
    sd_batch b;
    assert_int_equal(sd_batch_init(&b, S * M), SD_OK);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < M; i++) assert_int_equal(sd_batch_add(&b, tok[s][pre[s] + i], pre[s] + i, s, 1), SD_OK);
    assert_int_equal(sd_batch_n_logits(&b), S * M);
    float *got = malloc((size_t)S * M * V * sizeof(float)), *want = malloc((size_t)M * V * sizeof(float));
    assert_int_equal(sd_context_decode(multi, &b, got), SD_OK);
    for (int s = 0; s < S; s++) {
        assert_int_equal(sd_context_seq_len(multi, s), pre[s] + M);
        assert_int_equal(sd_context_seq_truncate(alone, 0, 0), SD_OK);
        assert_int_equal(sd_context_forward(alone, 0, tok[s], pre[s], NULL, 0), SD_OK);
        assert_int_equal(sd_context_forward(alone, 0, tok[s] + pre[s], M, want, 1), SD_OK);
        if (memcmp(got + (size_t)s * M * V, want, (size_t)M * V * sizeof(float)) != 0)
            fail_msg("%s: sequence %d in a batch of %d differs from alone by %g", sd_model_path(m), s, S,
                     sdtest_max_abs_diff(got + (size_t)s * M * V, want, (size_t)M * V));
        /* and the caches hold the same rows */
        sd_kv *ka = sd_context_kv(alone), *km = sd_context_kv(multi);
        const size_t bytes = (size_t)sd_kv_kv_dim(ka) * (size_t)(pre[s] + M) * sizeof(float);
        for (int l = 0; l < sd_kv_n_layers(ka); l++)
            assert_memory_equal(sd_kv_k(km, s, l), sd_kv_k(ka, 0, l), bytes);
    }
    /* only some logits asked for: the rows that were, in batch order */
    for (int i = 0; i < b.n; i++) b.logits[i] = i % 3 == 0;
    const int n_out = sd_batch_n_logits(&b);
    for (int s = 0; s < S; s++) sd_context_seq_truncate(multi, s, pre[s]);
    float *some = malloc((size_t)n_out * V * sizeof(float));
    assert_int_equal(sd_context_decode(multi, &b, some), SD_OK);
    for (int i = 0, r = 0; i < b.n; i++)
        if (b.logits[i]) assert_memory_equal(some + (size_t)r++ * V, got + (size_t)i * V, (size_t)V * sizeof(float));
    free(some);
    printf("  %s: %d sequences x %d tokens in one pass == each alone, bit for bit\n", sd_model_path(m), S, M);
    free(got);
    free(want);
    sd_batch_free(&b);
    sd_context_free(multi);
    sd_context_free(alone);
}

static void test_multi_sequence_batch(void **state) {
    (void)state;
    for (int w = 0; w < 3; w++) {
        sd_model *m = model_of(w);
        check_multi_seq(m);
        sd_model_free(m);
    }
}

/* ---------------------------------------------------------------- rows without logits */

/* The last layer carries on only the rows whose logits are wanted (forward.c). A prompt run
 * with every row's logits, with the last one's, and with none leaves the same cache rows in
 * every layer, bit for bit, and the next token's logits are the same; up to SD_SMALL_BATCH
 * tokens the last row's logits are too (beyond, an F32 pass of every row runs sgemm, the
 * kept row the small-batch kernel: within a rounding tolerance). F32 and F16 caches. */
static void check_pruned_rows(const sd_model *m, sd_type kv_type, int n) {
    const int V = sd_model_hparams(m)->vocab_size;
    int32_t tok[64];
    for (int i = 0; i < n + 1; i++) tok[i] = (int32_t)((i * 41 + 3) % V);
    sd_context *c[3];
    for (int i = 0; i < 3; i++) c[i] = new_ctx_kv(m, 96, 1, kv_type);
    float *all = malloc((size_t)n * V * sizeof(float)), *last = malloc((size_t)V * sizeof(float));
    assert_int_equal(sd_context_forward(c[0], 0, tok, n, all, 1), SD_OK);
    assert_int_equal(sd_context_forward(c[1], 0, tok, n, last, 0), SD_OK);
    assert_int_equal(sd_context_forward(c[2], 0, tok, n, NULL, 0), SD_OK);
    const float *want = all + (size_t)(n - 1) * V;
    if (n <= SD_SMALL_BATCH)
        assert_memory_equal(last, want, (size_t)V * sizeof(float));
    else if (sdtest_max_abs_diff(last, want, (size_t)V) > 1e-4f)
        fail_msg("%s: %d tokens: last row's logits alone differ from every row's by %g", sd_model_path(m), n,
                 (double)sdtest_max_abs_diff(last, want, (size_t)V));
    sd_kv *k0 = sd_context_kv(c[0]);
    const size_t bytes = (size_t)sd_kv_kv_dim(k0) * (size_t)n * (kv_type == SD_TYPE_F16 ? 2 : 4);
    for (int i = 1; i < 3; i++) {
        sd_kv *ki = sd_context_kv(c[i]);
        assert_int_equal(sd_context_seq_len(c[i], 0), n);
        for (int l = 0; l < sd_kv_n_layers(k0); l++) {
            if (memcmp(sd_kv_k_data(ki, 0, l), sd_kv_k_data(k0, 0, l), bytes) ||
                memcmp(sd_kv_v_data(ki, 0, l), sd_kv_v_data(k0, 0, l), bytes))
                fail_msg("%s: %d tokens, logits %s: layer %d's cache rows differ from a pass with every row's logits",
                         sd_model_path(m), n, i == 1 ? "of the last row" : "of none", l);
        }
    }
    float *next[3];
    for (int i = 0; i < 3; i++) {
        next[i] = malloc((size_t)V * sizeof(float));
        assert_int_equal(sd_context_forward(c[i], 0, tok + n, 1, next[i], 0), SD_OK);
    }
    assert_memory_equal(next[1], next[0], (size_t)V * sizeof(float));
    assert_memory_equal(next[2], next[0], (size_t)V * sizeof(float));
    for (int i = 0; i < 3; i++) {
        free(next[i]);
        sd_context_free(c[i]);
    }
    free(all);
    free(last);
}

static void test_rows_without_logits(void **state) {
    (void)state;
    for (int w = 0; w < 3; w++) {
        sd_model *m = model_of(w);
        const int f16 = w == 0 && sd_attention_f16_ok(sd_model_hparams(m)->head_dim);
        for (int kv = 0; kv <= f16; kv++)
            for (int n = 1; n <= 48; n += 23) check_pruned_rows(m, kv ? SD_TYPE_F16 : SD_TYPE_F32, n);
        printf("  %s: prompts of 1, 24, 47 tokens with every row's, the last row's and no logits: same cache, same next "
               "logits%s\n", sd_model_path(m), f16 ? " (f32 and f16 caches)" : "");
        sd_model_free(m);
    }
}

/* ---------------------------------------------------------------- trees */

/* A tree after a cached prefix:
 *   0 (root) -> 1 -> 3 -> 6
 *            -> 1 -> 4
 *            -> 2 -> 5 -> 7 -> 8
 * Each node's logits and, once kept, each path's cache rows equal the path run as a chain. */
static void check_tree(const sd_model *m) {
    enum { N = 9, PRE = 11 };
    const int V = sd_model_hparams(m)->vocab_size;
    const int32_t parent[N] = {-1, 0, 0, 1, 1, 2, 3, 5, 7};
    int32_t tok[N], prefix[PRE];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 53 + 7) % V);
    for (int i = 0; i < PRE; i++) prefix[i] = (int32_t)((i * 19 + 2) % V);
    sd_context *t = new_ctx(m, 64, 1), *chain = new_ctx(m, 64, 1);
    assert_int_equal(sd_context_forward(t, 0, prefix, PRE, NULL, 0), SD_OK);
    sd_verify_round *r = NULL;
    assert_int_equal(sd_verify_round_create(t, &r), SD_OK);
    int row0 = -1;
    assert_int_equal(sd_verify_round_add_tree(r, 0, tok, parent, N, &row0), SD_OK);
    assert_int_equal(sd_verify_round_run(r), SD_OK);
    assert_int_equal(sd_context_seq_len(t, 0), PRE + N);
    float *want = malloc((size_t)N * V * sizeof(float));
    for (int leaf = 0; leaf < N; leaf++) {
        int32_t path[N], ptok[N];
        int d = 0;
        for (int j = leaf; j >= 0; j = parent[j]) d++;
        for (int j = leaf, k = d - 1; j >= 0; j = parent[j], k--) path[k] = j;
        for (int k = 0; k < d; k++) ptok[k] = tok[path[k]];
        assert_int_equal(sd_context_seq_truncate(chain, 0, 0), SD_OK);
        assert_int_equal(sd_context_forward(chain, 0, prefix, PRE, NULL, 0), SD_OK);
        assert_int_equal(sd_context_forward(chain, 0, ptok, d, want, 1), SD_OK);
        for (int k = 0; k < d; k++)
            if (memcmp(sd_verify_round_logits(r, row0 + path[k]), want + (size_t)k * V, (size_t)V * sizeof(float)) != 0)
                fail_msg("%s: tree node %d differs from its path as a chain by %g", sd_model_path(m), path[k],
                         sdtest_max_abs_diff(sd_verify_round_logits(r, row0 + path[k]), want + (size_t)k * V, (size_t)V));
    }
    /* keeping the path 0-2-5-7 leaves exactly the chain's cache, and decoding on from it equals the
     * chain decoding on */
    const int32_t keep[4] = {0, 2, 5, 7};
    assert_int_equal(sd_target_keep_path(t, 0, PRE, keep, 4), SD_OK);
    assert_int_equal(sd_context_seq_len(t, 0), PRE + 4);
    const int32_t ktok[4] = {tok[0], tok[2], tok[5], tok[7]};
    assert_int_equal(sd_context_seq_truncate(chain, 0, PRE), SD_OK);
    assert_int_equal(sd_context_forward(chain, 0, ktok, 4, NULL, 0), SD_OK);
    sd_kv *kt = sd_context_kv(t), *kc = sd_context_kv(chain);
    const size_t bytes = (size_t)sd_kv_kv_dim(kt) * (PRE + 4) * sizeof(float);
    for (int l = 0; l < sd_kv_n_layers(kt); l++) {
        assert_memory_equal(sd_kv_k(kt, 0, l), sd_kv_k(kc, 0, l), bytes);
        assert_memory_equal(sd_kv_v(kt, 0, l), sd_kv_v(kc, 0, l), bytes);
    }
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    assert_int_equal(sd_context_forward(t, 0, &tok[8], 1, a, 0), SD_OK);
    assert_int_equal(sd_context_forward(chain, 0, &tok[8], 1, b, 0), SD_OK);
    assert_memory_equal(a, b, (size_t)V * sizeof(float));
    /* a tree that is a single chain is the chain */
    const int32_t line[4] = {-1, 0, 1, 2};
    assert_int_equal(sd_context_seq_truncate(t, 0, PRE), SD_OK);
    sd_verify_round_clear(r);
    assert_int_equal(sd_verify_round_add_tree(r, 0, ktok, line, 4, &row0), SD_OK);
    assert_int_equal(sd_verify_round_run(r), SD_OK);
    assert_int_equal(sd_context_seq_truncate(chain, 0, PRE), SD_OK);
    assert_int_equal(sd_context_forward(chain, 0, ktok, 4, want, 1), SD_OK);
    assert_memory_equal(sd_verify_round_logits(r, row0), want, (size_t)4 * V * sizeof(float));
    printf("  %s: a %d-node tree == its paths as chains, bit for bit\n", sd_model_path(m), N);
    free(a);
    free(b);
    free(want);
    sd_verify_round_free(r);
    sd_context_free(t);
    sd_context_free(chain);
}

static void test_tree_batch(void **state) {
    (void)state;
    for (int w = 0; w < 3; w++) {
        sd_model *m = model_of(w);
        check_tree(m);
        sd_model_free(m);
    }
}

/* ---------------------------------------------------------------- threads */

typedef struct {
    const sd_model *m;
    const int32_t *prompt;
    int n_prompt;
    int threads; /* the context's n_threads */
    int32_t out[48];
    sd_status st;
} gen_job;

static void *gen_thread(void *arg) {
    gen_job *j = arg;
    sd_context *c = NULL;
    sd_spec *s = NULL;
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = 48;
    p.stop_at_eos = 0;
    p.sampling.temperature = 0.9f; /* sampled: the RNG stream is per engine */
    p.sampling.seed = 5;
    sd_spec_batch *b = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.n_threads = j->threads;
    j->st = sd_context_create(j->m, &cp, &c);
    if (j->st == SD_OK) j->st = sd_spec_batch_create(c, NULL, &b);
    if (j->st == SD_OK) j->st = sd_spec_create_with(b, 0, NULL, &p, &s);
    int32_t *out = j->out;
    int n = 0;
    if (j->st == SD_OK) j->st = sd_spec_begin(s, j->prompt, j->n_prompt);
    while (j->st == SD_OK && !sd_spec_done(s)) {
        sd_spec_round rd;
        j->st = sd_spec_step(s, NULL, NULL, &rd);
        memcpy(out + n, rd.tokens, (size_t)rd.n_tokens * sizeof *out);
        n += rd.n_tokens;
    }
    sd_spec_free(s);
    sd_spec_batch_free(b);
    sd_context_free(c);
    return NULL;
}

/* Two threads, each with its own context on ONE loaded model, generate different prompts at the
 * same time and get exactly the tokens each gets alone; each context with its own thread count
 * (1 and 2 against the default alone: results do not depend on the team). */
static void test_threads_share_a_model(void **state) {
    (void)state;
    sd_synth_params p = sdtest_synth_shape(256, 2, 8, 4, 512, 400, 128, 21); /* big enough to go parallel */
    sd_model *m = sdtest_synth_model(&p);
    const int32_t pa[5] = {1, 300, 301, 4, 9}, pb[8] = {1, 7, 7, 7, 350, 12, 13, 14};
    gen_job alone[2] = {{m, pa, 5, 0, {0}, SD_OK}, {m, pb, 8, 0, {0}, SD_OK}};
    gen_thread(&alone[0]);
    gen_thread(&alone[1]);
    assert_int_equal(alone[0].st, SD_OK);
    assert_int_equal(alone[1].st, SD_OK);
    assert_memory_not_equal(alone[0].out, alone[1].out, sizeof alone[0].out);
    for (int round = 0; round < 3; round++) {
        gen_job both[2] = {{m, pa, 5, 1 + round % 2, {0}, SD_OK}, {m, pb, 8, 2 - round % 2, {0}, SD_OK}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, gen_thread, &both[i]), 0);
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(both[i].st, SD_OK);
            assert_memory_equal(both[i].out, alone[i].out, sizeof both[i].out);
        }
    }
    sd_model_free(m);
}

/* The thread count is the context's: 0 takes the creating thread's OpenMP default, a count is
 * kept (OMP_THREAD_LIMIT aside), a negative one is refused, and a pass runs its kernels on its
 * context's count on whatever thread calls it. */
static void test_context_threads(void **state) {
    (void)state;
    sd_model *m = model_of(0);
    sd_context_params cp = sd_context_default_params();
    sd_context *c1 = NULL, *c2 = NULL, *c0 = NULL, *bad = (sd_context *)1;
    cp.n_threads = -1;
    assert_int_equal(sd_context_create(m, &cp, &bad), SD_ERR_INVALID_ARG);
    assert_null(bad);
    assert_non_null(strstr(sd_last_error(), "threads -1"));
    cp.n_threads = 0;
    assert_int_equal(sd_context_create(m, &cp, &c0), SD_OK);
    assert_int_equal(sd_context_n_threads(c0), sd_kernels_team(omp_get_max_threads()));
    cp.n_threads = 1;
    assert_int_equal(sd_context_create(m, &cp, &c1), SD_OK);
    cp.n_threads = 3;
    assert_int_equal(sd_context_create(m, &cp, &c2), SD_OK);
    assert_int_equal(sd_context_n_threads(c1), 1);
    assert_int_equal(sd_context_n_threads(c2), sd_kernels_team(3));
    const int32_t tok[3] = {1, 5, 9};
    const int before = omp_get_max_threads();
    assert_int_equal(sd_context_forward(c1, 0, tok, 3, NULL, 0), SD_OK);
    assert_int_equal(omp_get_max_threads(), 1);
    assert_int_equal(sd_context_forward(c2, 0, tok, 3, NULL, 0), SD_OK);
    assert_int_equal(omp_get_max_threads(), sd_kernels_team(3));
    omp_set_num_threads(before);
    sd_context_free(c0);
    sd_context_free(c1);
    sd_context_free(c2);
    sd_model_free(m);
}

/* ---------------------------------------------------------------- bad batches */

static void expect_bad(sd_context *c, const sd_batch *b, sd_status want, const char *needle) {
    int len[3];
    for (int s = 0; s < sd_context_n_seq(c); s++) len[s] = sd_context_seq_len(c, s);
    float *lg = malloc((size_t)b->n * sd_model_hparams(sd_context_model(c))->vocab_size * sizeof(float) + 4);
    sd_status st = sd_context_decode(c, b, lg);
    free(lg);
    printf("  -> %s\n", sd_last_error());
    assert_int_equal(st, want);
    if (!strstr(sd_last_error(), needle)) fail_msg("message lacks \"%s\": %s", needle, sd_last_error());
    for (int s = 0; s < sd_context_n_seq(c); s++) assert_int_equal(sd_context_seq_len(c, s), len[s]);
}

static void test_bad_batches(void **state) {
    (void)state;
    sd_model *m = model_of(0);
    sd_context *c = new_ctx(m, 16, 3);
    const int32_t pre[4] = {1, 2, 3, 4};
    assert_int_equal(sd_context_forward(c, 1, pre, 4, NULL, 0), SD_OK);
    sd_batch b;
    assert_int_equal(sd_batch_init(&b, 40), SD_OK);
#define RESET() sd_batch_clear(&b)
    RESET();
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "forward: 0 tokens");
    sd_batch_add(&b, 300, 0, 0, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "token id 300 at 0 outside vocabulary of 300");
    RESET();
    sd_batch_add(&b, 5, 0, 3, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "batch token 0 names sequence 3; the context has 3");
    RESET();
    sd_batch_add(&b, 5, 0, 0, 1);
    sd_batch_add(&b, 5, 4, 1, 1);
    sd_batch_add(&b, 5, 1, 0, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "sequence 0 appears in two separate runs of the batch (at 0 and 2)");
    RESET();
    sd_batch_add(&b, 5, 3, 1, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "batch token 0 of sequence 1 is at position 3, expected 4 (the sequence's cached length)");
    RESET();
    sd_batch_add(&b, 5, 4, 1, 1);
    sd_batch_add(&b, 6, 6, 1, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "batch token 1 of sequence 1 is at position 6, expected 5 (its parent's + 1)");
    RESET();
    sd_batch_add(&b, 5, 0, 2, 1);
    sd_batch_add_child(&b, 6, 1, 2, 1, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "batch token 1 has parent 1, not an earlier token of its sequence 2");
    RESET();
    sd_batch_add(&b, 5, 0, 0, 1);
    sd_batch_add_child(&b, 6, 5, 1, 0, 1);
    expect_bad(c, &b, SD_ERR_INVALID_ARG, "batch token 1 has parent 0, not an earlier token of its sequence 1");
    RESET();
    for (int i = 0; i < 13; i++) sd_batch_add(&b, 5, 4 + i, 1, 0);
    expect_bad(c, &b, SD_ERR_CONTEXT_FULL, "context full: 13 tokens at position 4 exceed the context of 16 (per sequence)");
    /* a tree must fit one pass; trees need an f32 cache */
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 4;
    sd_context *small = NULL;
    assert_int_equal(sd_context_create(m, &cp, &small), SD_OK);
    RESET();
    sd_batch_add(&b, 5, 0, 0, 1);
    for (int i = 1; i < 5; i++) sd_batch_add_child(&b, 6, 1, 0, 0, 1);
    expect_bad(small, &b, SD_ERR_INVALID_ARG, "a batch holding a tree must fit in one pass of 4 tokens (it has 5)");
    RESET();
    for (int i = 0; i < 10; i++) sd_batch_add(&b, 5 + i, i, 0, 1); /* a chain is run in chunks */
    float *lg = malloc((size_t)10 * 300 * sizeof(float));
    assert_int_equal(sd_context_decode(small, &b, lg), SD_OK);
    assert_int_equal(sd_context_seq_len(small, 0), 10);
    free(lg);
    sd_context_free(small);
    cp = sd_context_default_params();
    cp.kv_type = SD_TYPE_F16;
    assert_int_equal(sd_context_create(m, &cp, &small), SD_OK);
    RESET();
    sd_batch_add(&b, 5, 0, 0, 1);
    sd_batch_add_child(&b, 6, 1, 0, 0, 1);
    sd_batch_add_child(&b, 7, 1, 0, 0, 1);
    expect_bad(small, &b, SD_ERR_UNSUPPORTED, "tree batches need an f32 KV cache");
    sd_context_free(small);
    /* a full batch refuses more */
    sd_batch full;
    assert_int_equal(sd_batch_init(&full, 1), SD_OK);
    assert_int_equal(sd_batch_add(&full, 1, 0, 0, 1), SD_OK);
    assert_int_equal(sd_batch_add(&full, 1, 1, 0, 1), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "batch: full at 1 tokens"));
    sd_batch_free(&full);
    assert_int_equal(sd_batch_init(&full, 0), SD_ERR_INVALID_ARG);
#undef RESET
    sd_batch_free(&b);
    sd_context_free(c);
    /* context parameters */
    sd_context *bad = (sd_context *)1;
    cp = sd_context_default_params();
    cp.n_seq = -1;
    assert_int_equal(sd_context_create(m, &cp, &bad), SD_ERR_INVALID_ARG);
    assert_null(bad);
    cp = sd_context_default_params();
    cp.kv_type = SD_TYPE_Q8_0;
    assert_int_equal(sd_context_create(m, &cp, &bad), SD_ERR_INVALID_ARG);
    sd_context_free(NULL);
    sd_model_free(m);
}

/* ---------------------------------------------------------------- the step API */

/* One round of s: its tokens appended at out; returns how many. */
static int step_into(sd_spec *s, int32_t *out) {
    sd_spec_round rd;
    assert_int_equal(sd_spec_step(s, NULL, NULL, &rd), SD_OK);
    memcpy(out, rd.tokens, (size_t)rd.n_tokens * sizeof *out);
    assert_int_equal(rd.done, sd_spec_done(s));
    return rd.n_tokens;
}

/* A follow-up prompt that extends the last history reuses the target's cached tokens; the
 * output equals a fresh engine's. */
static void test_begin_reuses_prefix(void **state) {
    (void)state;
    sd_model *m = model_of(0);
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = 20;
    p.stop_at_eos = 0;
    p.draft_max = 3;
    p.draft_mode = SD_DRAFT_FIXED;
    sd_spec *s = NULL, *fresh = NULL;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    const int32_t prompt[4] = {1, 290, 291, 292};
    sd_spec_stats st;
    assert_int_equal(sd_spec_generate(s, prompt, 4, NULL, NULL, &st), SD_OK);
    assert_int_equal(st.n_reused, 0);
    int n = 0;
    const int32_t *h = sd_spec_tokens(s, &n);
    int32_t turn2[40];
    memcpy(turn2, h, (size_t)n * sizeof *turn2);
    turn2[n] = 7;
    turn2[n + 1] = 8;
    const int n2 = n + 2;
    int32_t a[20 + SD_MAX_DRAFT], b[20 + SD_MAX_DRAFT];
    int na = 0, nb = 0;
    assert_int_equal(sd_spec_begin(s, turn2, n2), SD_OK);
    sd_spec_get_stats(s, &st);
    assert_int_equal(st.n_reused, n - 1); /* all it held: the history but its pending token */
    while (!sd_spec_done(s)) na += step_into(s, a + na);
    assert_int_equal(sd_spec_create(m, m, &p, &fresh), SD_OK);
    assert_int_equal(sd_spec_begin(fresh, turn2, n2), SD_OK);
    while (!sd_spec_done(fresh)) nb += step_into(fresh, b + nb);
    assert_int_equal(na, 20);
    assert_int_equal(nb, 20);
    assert_memory_equal(a, b, 20 * sizeof(int32_t));
    /* a step after the end emits nothing */
    assert_int_equal(step_into(s, a), 0);
    sd_spec_free(fresh);
    sd_spec_free(s);
    sd_model_free(m);
}

/* A model drafter feeds a new history but its last token when it is synced to it (as the target's
 * prefill does: the generation's first round drafts, and its drafting time then prices a step),
 * keeps the prefix it already holds, and says how many tokens it fed to catch up when asked to
 * draft: the prompt's last at first, the last round's 1-2 tokens after a round that drafted. */
static void test_drafter_sync(void **state) {
    (void)state;
    sd_model *m = model_of(0);
    sd_context *dc = new_ctx(m, 64, 1);
    sd_sampler_params sp = sd_sampler_default_params();
    sd_drafter *d = NULL;
    assert_int_equal(sd_drafter_model_create(dc, 0, 300, &sp, &d), SD_OK);
    int32_t hist[32] = {1, 290, 291, 292, 5, 6}, out[4];
    float conf[4];
    assert_int_equal(d->vt->sync(d, hist, 6), SD_OK);
    assert_int_equal(sd_context_seq_len(dc, 0), 5); /* all but the last */
    sd_draft_req r = {0};
    r.hist = hist;
    r.n_hist = r.n_prompt = 6;
    r.k = 3;
    r.out = out;
    r.conf = conf;
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_out, 3);
    assert_int_equal(r.n_synced, 1);
    assert_int_equal(sd_context_seq_len(dc, 0), 6 + 2); /* the drafts but the last */
    /* the first two drafts accepted, then the target's own token: 1 to feed */
    hist[6] = out[0];
    hist[7] = out[1];
    hist[8] = 7;
    r.n_hist = 9;
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_synced, 1);
    /* every draft accepted (3 of them, the last never fed) and the target's token: 2 */
    memcpy(hist + 9, out, 3 * sizeof *out);
    hist[12] = 8;
    r.n_hist = 13;
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_synced, 2);
    /* a new prompt sharing the first 4 tokens: fed from there but its last, kept the cache's */
    int32_t other[8] = {1, 290, 291, 292, 40, 41, 42, 43};
    assert_int_equal(d->vt->sync(d, other, 8), SD_OK);
    assert_int_equal(sd_context_seq_len(dc, 0), 7);
    r.hist = other;
    r.n_hist = 8;
    r.k = 1;
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_synced, 1);
    assert_int_equal(sd_context_seq_len(dc, 0), 8);
    /* the same prompt again: the cache's rows of it kept (the drafts' dropped), its last token fed
     * when drafting */
    assert_int_equal(d->vt->sync(d, other, 8), SD_OK);
    assert_int_equal(sd_context_seq_len(dc, 0), 7);
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_synced, 1);
    /* a history longer than the drafter's context is refused at sync */
    int32_t big[70] = {0};
    assert_int_equal(d->vt->sync(d, big, 70), SD_ERR_CONTEXT_FULL);
    sd_drafter_free(d);
    sd_context_free(dc);
    sd_model_free(m);
}

/* A slot's engine serves one request after another (a server): sd_spec_set_params changes the
 * sampling (the drafter's with it), the budget and the draft length between generations, and
 * the next prompt still reuses the cache. The sampled output equals a fresh engine's with the
 * same parameters (fixed draft length: the same random draws), in both sampling modes. */
static void test_set_params_between_requests(void **state) {
    (void)state;
    sd_model *m = model_of(0);
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = 12;
    p.stop_at_eos = 0;
    p.draft_max = 4;
    p.draft_mode = SD_DRAFT_FIXED;
    sd_context *tc = new_ctx(m, 64, 1), *dc = new_ctx(m, 64, 1), *tc2 = new_ctx(m, 64, 1), *dc2 = new_ctx(m, 64, 1);
    sd_spec_batch *tb = NULL, *tb2 = NULL;
    assert_int_equal(sd_spec_batch_create(tc, NULL, &tb), SD_OK);
    assert_int_equal(sd_spec_batch_create(tc2, NULL, &tb2), SD_OK);
    sd_drafter *d = NULL, *d2 = NULL;
    sd_spec *s = NULL, *fresh = NULL;
    assert_int_equal(sd_drafter_model_create(dc, 0, 300, &p.sampling, &d), SD_OK);
    assert_int_equal(sd_spec_create_with(tb, 0, d, &p, &s), SD_OK);
    const int32_t prompt[4] = {1, 290, 291, 292};
    sd_spec_stats st;
    assert_int_equal(sd_spec_generate(s, prompt, 4, NULL, NULL, &st), SD_OK);
    int n = 0;
    const int32_t *h = sd_spec_tokens(s, &n);
    int32_t turn2[40];
    memcpy(turn2, h, (size_t)n * sizeof *turn2);
    turn2[n] = 9;
    const int n2 = n + 1;
    /* the second request: sampled, a shorter budget, k = 2 */
    sd_spec_params q = p;
    q.n_predict = 9;
    q.draft_max = 2;
    q.sampling.temperature = 0.9f;
    q.sampling.top_p = 0.95f;
    q.sampling.seed = 77;
    assert_int_equal(sd_spec_set_params(s, &q), SD_OK); /* the drafter's sampling follows */
    int32_t a[16 + SD_MAX_DRAFT], b[16 + SD_MAX_DRAFT];
    int na = 0, nb = 0, k;
    assert_int_equal(sd_spec_begin(s, turn2, n2), SD_OK);
    sd_spec_get_stats(s, &st);
    assert_int_equal(st.n_reused, n - 1);
    assert_int_equal(st.k, 2);
    /* not while it runs */
    assert_int_equal(sd_spec_set_params(s, &p), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "while a generation runs"));
    while (!sd_spec_done(s)) {
        k = step_into(s, a + na);
        assert_true(k <= 3);
        na += k;
    }
    assert_int_equal(sd_drafter_model_create(dc2, 0, 300, &q.sampling, &d2), SD_OK);
    assert_int_equal(sd_spec_create_with(tb2, 0, d2, &q, &fresh), SD_OK);
    assert_int_equal(sd_spec_begin(fresh, turn2, n2), SD_OK);
    while (!sd_spec_done(fresh)) nb += step_into(fresh, b + nb);
    assert_int_equal(na, 9);
    assert_int_equal(nb, 9);
    assert_memory_equal(a, b, sizeof(int32_t) * 9);
    /* refused, and nothing changes: more drafts than created for, a bad temperature, a drafter
     * without a model */
    q.draft_max = 5;
    assert_int_equal(sd_spec_set_params(s, &q), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "5 drafts per pass exceed the 4 this engine was created for"));
    q.draft_max = 2;
    q.sampling.temperature = -1;
    assert_int_equal(sd_spec_set_params(s, &q), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_drafter_set_sampling(d, &q.sampling), SD_ERR_INVALID_ARG);
    q.sampling.temperature = 0.9f;
    q.sampling.mode = (sd_sampling_mode)7;
    assert_int_equal(sd_spec_set_params(s, &q), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "sampling mode 7"));
    /* the engine still runs with the parameters it had */
    assert_int_equal(sd_spec_begin(s, turn2, n2), SD_OK);
    sd_spec_get_stats(s, &st);
    assert_int_equal(st.k, 2);
    sd_spec_cancel(s);
    sd_spec_free(fresh);
    sd_spec_free(s);
    sd_drafter_free(d2);
    sd_drafter_free(d);
    sd_spec_batch_free(tb);
    sd_spec_batch_free(tb2);
    sd_context_free(tc);
    sd_context_free(dc);
    sd_context_free(tc2);
    sd_context_free(dc2);
    sd_model_free(m);
}

/* sd_spec_cancel ends a generation between rounds without a pass: the stop reason says so, the
 * caches stay consistent (the next prompt reuses them and the output equals a fresh engine's),
 * and cancelling an ended or never-started engine does nothing. */
static void test_cancel(void **state) {
    (void)state;
    enum { N = 30 };
    sd_model *m = model_of(0);
    const int32_t prompt[4] = {1, 290, 291, 292};
    int32_t *want = sdtest_greedy(m, NULL, prompt, 4, N, NULL);
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = N;
    p.stop_at_eos = 0;
    p.draft_max = 4;
    p.draft_mode = SD_DRAFT_FIXED;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    sd_spec_cancel(s); /* nothing runs yet */
    assert_int_equal(sd_spec_begin(s, prompt, 4), SD_OK);
    int32_t got[N + SD_MAX_DRAFT + 1];
    int n = step_into(s, got); /* k = 4: all accepted (self-draft) */
    assert_int_equal(n, 5);
    sd_spec_cancel(s);
    assert_true(sd_spec_done(s));
    sd_spec_stats st;
    sd_spec_get_stats(s, &st);
    assert_int_equal(st.stop_reason, SD_STOP_CANCELLED);
    assert_string_equal(sd_stop_reason_name(st.stop_reason), "cancelled");
    assert_int_equal(st.n_generated, 5);
    assert_int_equal(step_into(s, got + n), 0);
    sd_spec_cancel(s); /* again: nothing */
    /* the cache holds the history but its last token; a new generation from the same prompt reuses
     * it up to the prompt and gives the greedy text */
    assert_int_equal(sd_context_seq_len(sd_spec_target_context(s), 0), 4 + 5 - 1);
    assert_int_equal(sd_spec_begin(s, prompt, 4), SD_OK);
    sd_spec_get_stats(s, &st);
    assert_int_equal(st.n_reused, 3);
    n = 0;
    while (!sd_spec_done(s)) n += step_into(s, got + n);
    assert_int_equal(n, N);
    assert_memory_equal(got, want, N * sizeof(int32_t));
    free(want);
    sd_spec_free(s);
    sd_model_free(m);
}

/* draft_min (llama-server's speculative.n_min): a chain shorter than it is not verified, so every
 * round is either a plain step or at least draft_min drafts, and greedy output is unchanged;
 * a draft_min above draft_max, on a tree, or where dropping short chains would bias rejection
 * sampling, is refused naming why. */
static void test_draft_min(void **state) {
    (void)state;
    enum { N = 40 };
    sd_model *m = model_of(0);
    const int32_t prompt[4] = {1, 290, 291, 292};
    int32_t *want = sdtest_greedy(m, NULL, prompt, 4, N, NULL);
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = N;
    p.stop_at_eos = 0;
    p.draft_max = 6;
    p.draft_min = 3;
    p.draft_mode = SD_DRAFT_PMIN;
    p.p_min = 0.025f; /* its top probabilities run 0.017-0.07: chains of every length */
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    assert_int_equal(sd_spec_begin(s, prompt, 4), SD_OK);
    int32_t got[N + SD_MAX_DRAFT + 1];
    int n = 0, plain = 0, drafted = 0;
    while (!sd_spec_done(s)) {
        sd_spec_round rd;
        assert_int_equal(sd_spec_step(s, NULL, NULL, &rd), SD_OK);
        assert_true(rd.n_drafted == 0 || rd.n_drafted >= 3);
        plain += rd.n_drafted == 0;
        drafted += rd.n_drafted > 0;
        memcpy(got + n, rd.tokens, (size_t)rd.n_tokens * sizeof *got);
        n += rd.n_tokens;
    }
    printf("  draft_min 3, p_min 0.025: %d rounds with drafts, %d plain\n", drafted, plain);
    assert_true(plain > 0 && drafted > 0);
    assert_int_equal(n, N);
    assert_memory_equal(got, want, N * sizeof(int32_t));
    sd_spec_free(s);
    s = NULL;
    p.draft_min = 7;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "draft_min 7 must be in 0..draft_max (6)"));
    p.draft_min = 3;
    p.tree_budget = 8;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_UNSUPPORTED);
    p.tree_budget = 0;
    p.sampling.temperature = 0.8f;
    p.sampling.mode = SD_SAMPLING_REJECTION;
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_ERR_UNSUPPORTED);
    assert_non_null(strstr(sd_last_error(), "biases the output"));
    p.draft_mode = SD_DRAFT_FIXED; /* a length fixed before any draw: fine */
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    sd_spec_free(s);
    p.draft_mode = SD_DRAFT_PMIN;
    p.sampling.mode = SD_SAMPLING_COUPLED; /* the output does not depend on the drafts: fine */
    assert_int_equal(sd_spec_create(m, m, &p, &s), SD_OK);
    sd_spec_free(s);
    free(want);
    sd_model_free(m);
}

/* Several choices of one prompt: engines 1 and 2 begin from engine 0's prompt, copying its cached
 * rows instead of prefilling (sd_spec_begin_from); each then generates exactly what a fresh engine
 * with its seed generates from that prompt, all three stepped in one batch. A source on another
 * context or without a prompt is refused. */
static void test_begin_from(void **state) {
    (void)state;
    enum { S = 3, N = 16 };
    sd_model *m = model_of(0);
    const int32_t prompt[6] = {1, 290, 291, 292, 17, 40};
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = N;
    p.stop_at_eos = 0;
    p.draft_max = 3;
    p.sampling.temperature = 0.9f;
    p.sampling.mode = SD_SAMPLING_COUPLED;
    int32_t want[S][N];
    for (int i = 0; i < S; i++) {
        sd_spec *f = NULL;
        sd_spec_params q = p;
        q.sampling.seed = 70 + (uint64_t)i;
        assert_int_equal(sd_spec_create(m, NULL, &q, &f), SD_OK);
        assert_int_equal(sd_spec_generate(f, prompt, 6, NULL, NULL, NULL), SD_OK);
        int n = 0;
        memcpy(want[i], sd_spec_tokens(f, &n) + 6, sizeof want[i]);
        sd_spec_free(f);
    }
    sd_pair *pr = NULL;
    assert_int_equal(sd_pair_create(m, m, &p, S, &pr), SD_OK);
    sd_spec *sp[S];
    for (int i = 0; i < S; i++) {
        sp[i] = sd_pair_spec(pr, i);
        sd_spec_params q = p;
        q.sampling.seed = 70 + (uint64_t)i;
        assert_int_equal(sd_spec_set_params(sp[i], &q), SD_OK);
    }
    assert_int_equal(sd_spec_begin_from(sp[1], sp[0]), SD_ERR_INVALID_ARG); /* engine 0 holds no prompt yet */
    assert_int_equal(sd_spec_begin(sp[0], prompt, 6), SD_OK);
    for (int i = 1; i < S; i++) {
        assert_int_equal(sd_spec_begin_from(sp[i], sp[0]), SD_OK);
        sd_spec_stats st;
        sd_spec_get_stats(sp[i], &st);
        assert_int_equal(st.n_prompt, 6);
        assert_int_equal(st.n_reused, 5); /* copied, not prefilled */
    }
    int32_t got[S][N + SD_MAX_DRAFT + 1];
    int n_got[S] = {0};
    for (int live = S; live > 0;) {
        sd_spec_round rd[S];
        assert_int_equal(sd_spec_batch_step(sd_pair_batch(pr), sp, S, rd), SD_OK);
        live = 0;
        for (int i = 0; i < S; i++) {
            memcpy(got[i] + n_got[i], rd[i].tokens, (size_t)rd[i].n_tokens * sizeof(int32_t));
            n_got[i] += rd[i].n_tokens;
            live += !rd[i].done;
        }
    }
    for (int i = 0; i < S; i++) {
        assert_int_equal(n_got[i], N);
        assert_memory_equal(got[i], want[i], sizeof want[i]);
    }
    assert_memory_not_equal(want[0], want[1], sizeof want[0]); /* different seeds, different choices */
    sd_spec *other = NULL;
    assert_int_equal(sd_spec_create(m, NULL, &p, &other), SD_OK);
    assert_int_equal(sd_spec_begin_from(other, sp[0]), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "different target contexts"));
    sd_spec_free(other);
    sd_pair_free(pr);
    sd_model_free(m);
}

/* Eight engines drafting 8 tokens each would make a pass of 72 tokens, past the kernels whose
 * rows equal decoding alone: step_many gives each engine an equal share of SD_MAX_DRAFT + 1
 * (4 tokens: 3 drafts) and every engine still emits what it emits alone. */
static void test_step_many_caps_the_pass(void **state) {
    (void)state;
    enum { S = 8, N = 24 };
    sd_model *t = model_of(0);
    int32_t prompts[S][5], want[S][N];
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < 5; i++) prompts[s][i] = (int32_t)((s * 37 + i * 11 + 3) % 300);
        int32_t *g = sdtest_greedy(t, NULL, prompts[s], 5, N, NULL);
        memcpy(want[s], g, sizeof want[s]);
        free(g);
    }
    sd_context *tc = new_ctx(t, 64, S), *dc = new_ctx(t, 64, S);
    sd_spec_batch *tb = NULL;
    assert_int_equal(sd_spec_batch_create(tc, NULL, &tb), SD_OK);
    sd_drafter *dr[S];
    sd_spec *sp[S];
    for (int s = 0; s < S; s++) {
        sd_spec_params p = sd_spec_default_params();
        p.n_predict = N;
        p.stop_at_eos = 0;
        p.draft_max = 8;
        p.draft_mode = SD_DRAFT_FIXED;
        assert_int_equal(sd_drafter_model_create(dc, s, 300, &p.sampling, &dr[s]), SD_OK);
        assert_int_equal(sd_spec_create_with(tb, s, dr[s], &p, &sp[s]), SD_OK);
        assert_int_equal(sd_spec_begin(sp[s], prompts[s], 5), SD_OK);
    }
    int32_t got[S][N + SD_MAX_DRAFT + 1];
    sd_spec_round rd[S];
    int n_got[S] = {0}, most = 0;
    for (int live = S; live > 0;) {
        assert_int_equal(sd_spec_batch_step(tb, sp, S, rd), SD_OK);
        const int n_tok = sd_spec_batch_pass_tokens(tb);
        assert_true(n_tok <= SD_MAX_DRAFT + 1);
        if (n_tok > most) most = n_tok;
        live = 0;
        for (int s = 0; s < S; s++) {
            assert_true(rd[s].n_tokens <= (SD_MAX_DRAFT + 1) / S);
            memcpy(got[s] + n_got[s], rd[s].tokens, (size_t)rd[s].n_tokens * sizeof(int32_t));
            n_got[s] += rd[s].n_tokens;
            live += !sd_spec_done(sp[s]);
        }
    }
    printf("  %d engines with k = 8: the largest pass held %d tokens\n", S, most);
    assert_int_equal(most, S * ((SD_MAX_DRAFT + 1) / S));
    for (int s = 0; s < S; s++) {
        assert_int_equal(n_got[s], N);
        assert_memory_equal(got[s], want[s], sizeof want[s]);
    }
    for (int s = 0; s < S; s++) {
        sd_spec_free(sp[s]);
        sd_drafter_free(dr[s]);
    }
    sd_spec_batch_free(tb);
    sd_context_free(tc);
    sd_context_free(dc);
    sd_model_free(t);
}

/* Several engines on one target context (a sequence each), their draft models sharing one draft
 * context: every round drafts in lockstep and verifies in ONE pass, and each engine emits exactly
 * what it emits alone (greedy; fixed and p_min draft lengths; a plain engine among them). */
static void test_step_many(void **state) {
    (void)state;
    enum { S = 4, N = 40 };
    sd_synth_params tp = sdtest_synth_shape(64, 2, 4, 2, 96, 300, 128, 31);
    sd_synth_params dp = sdtest_synth_shape(32, 1, 4, 2, 64, 300, 128, 32);
    /* engines 0 and 2 draft with the target itself (every draft accepted), 1 with another model */
    sd_model *t = sdtest_synth_model(&tp), *d = sdtest_synth_model(&dp);
    int32_t prompts[S][6];
    for (int s = 0; s < S; s++)
        for (int i = 0; i < 6; i++) prompts[s][i] = (int32_t)((s * 41 + i * 13 + 1) % 300);
    int32_t want[S][N];
    for (int s = 0; s < S; s++) {
        int32_t *g = sdtest_greedy(t, NULL, prompts[s], 6, N, NULL);
        memcpy(want[s], g, sizeof want[s]);
        free(g);
    }
    sd_context *tc = new_ctx(t, 64, S), *dc = new_ctx(t, 64, S), *dc2 = new_ctx(d, 64, 1);
    sd_spec_batch *tb = NULL;
    assert_int_equal(sd_spec_batch_create(tc, NULL, &tb), SD_OK);
    sd_drafter *dr[S] = {0};
    sd_spec *sp[S];
    for (int s = 0; s < S; s++) {
        sd_spec_params p = sd_spec_default_params();
        p.n_predict = N;
        p.stop_at_eos = 0;
        p.draft_max = 3 + s;
        p.draft_mode = s == 1 ? SD_DRAFT_PMIN : SD_DRAFT_FIXED;
        p.p_min = 0.02f;
        if (s != 3) assert_int_equal(sd_drafter_model_create(s == 1 ? dc2 : dc, s == 1 ? 0 : s, 300, &p.sampling, &dr[s]), SD_OK);
        assert_int_equal(sd_spec_create_with(tb, s, dr[s], &p, &sp[s]), SD_OK);
        assert_int_equal(sd_spec_begin(sp[s], prompts[s], 6), SD_OK);
    }
    int32_t got[S][N + SD_MAX_DRAFT + 1];
    sd_spec_round rd[S];
    int n_got[S] = {0}, rounds = 0;
    for (;;) {
        int live = 0;
        for (int s = 0; s < S; s++) live += !sd_spec_done(sp[s]);
        if (!live) break;
        assert_int_equal(sd_spec_batch_step(tb, sp, S, rd), SD_OK);
        rounds++;
        for (int s = 0; s < S; s++) {
            memcpy(got[s] + n_got[s], rd[s].tokens, (size_t)rd[s].n_tokens * sizeof(int32_t));
            n_got[s] += rd[s].n_tokens;
        }
    }
    for (int s = 0; s < S; s++) {
        assert_int_equal(n_got[s], N);
        assert_memory_equal(got[s], want[s], sizeof want[s]);
        sd_spec_stats st;
        sd_spec_get_stats(sp[s], &st);
        printf("  engine %d (%s k %d): %d rounds with drafts, acceptance %.2f\n", s,
               s == 3 ? "plain" : s == 1 ? "p_min" : "fixed", 3 + s, st.n_verify, sd_spec_acceptance(&st));
    }
    printf("  %d engines, %d shared rounds: each output equals its run alone\n", S, rounds);
    /* engines of another context, or two on one sequence, are refused */
    sd_spec *twice[2] = {sp[0], sp[0]};
    assert_int_equal(sd_spec_batch_step(tb, twice, 2, rd), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "share sequence 0"));
    sd_spec_batch *other = NULL;
    assert_int_equal(sd_spec_batch_create(tc, NULL, &other), SD_OK);
    assert_int_equal(sd_spec_batch_step(other, sp, 1, rd), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "belongs to another batch"));
    sd_spec_batch_free(other);
    for (int s = 0; s < S; s++) {
        sd_spec_free(sp[s]);
        sd_drafter_free(dr[s]);
    }
    sd_spec_batch_free(tb);
    sd_context_free(tc);
    sd_context_free(dc);
    sd_context_free(dc2);
    sd_model_free(d);
    sd_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_sequence_batch),
        cmocka_unit_test(test_tree_batch),
        cmocka_unit_test(test_rows_without_logits),
        cmocka_unit_test(test_threads_share_a_model),
        cmocka_unit_test(test_context_threads),
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_begin_reuses_prefix),
        cmocka_unit_test(test_step_many),
        cmocka_unit_test(test_drafter_sync),
        cmocka_unit_test(test_set_params_between_requests),
        cmocka_unit_test(test_step_many_caps_the_pass),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_draft_min),
        cmocka_unit_test(test_begin_from),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
