/* KV cache: the prefill/decode worked example (four hand-set attention heads, cached decode ==
 * full recomputation) through the real attention kernel, and the sd_kv bookkeeping contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "kernels/kernels.h"
#include "specdec/context.h"
#include "specdec/kv.h"

/* Contexts are convex combinations of the values with weights that are exactly 0, 1/2, 1/4 or
 * 1/5 in float (see the keys below), so only float summation rounding remains (~1e-6). */
#define TOL_CONTEXT 1e-5

/* ---------------------------------------------------------------- worked example
 *
 * "Today weather is so" then "nice", one value per token: 10, 20, 1, 5, then 7. Positions are
 * 1-based as in the article (Today = 1 ... nice = 5). Four heads, one per attention pattern:
 *   head 0: the even positions (2 and 4)  -> (20 + 5) / 2 = 12.5, still 12.5 after "nice" (5 is odd)
 *   head 1: the last token                -> 5, then 7
 *   head 2: the first token               -> 10, then 10
 *   head 3: every token equally           -> 36 / 4 = 9, then 43 / 5 = 8.6
 * Each head has head_dim 2 (the kernel scales scores by 1/sqrt(2)); the value sits in dim 0.
 *
 * Patterns come from score gaps of >= BIG/sqrt(2) ~ 141 between selected and unselected
 * positions: expf(-141) underflows to exactly 0 in float, and selected positions share one
 * score, so the softmax weights are exactly uniform over the selection.
 *
 * Every key depends only on its own token's position (never on "is this the last token"), so
 * a row computed once stays right when later tokens arrive: that is what makes caching exact.
 * One of the articles prints 6.0 for head 1 after "nice": its key was an "is last token" flag
 * computed at prefill time, so the cached row of "so" kept a stale flag 1, and "so" and
 * "nice" shared the attention: (5 + 7) / 2 = 6.0. test_kv_stale_key_reproduces_6 shows it. */
#define N_HEADS 4
#define HEAD_DIM 2
#define KV_DIM (N_HEADS * HEAD_DIM)
#define BIG 200.0f

static const float k_values[5] = {10, 20, 1, 5, 7};

/* Key row of the token at 1-based position pos (all four heads). */
static void example_key(int pos, float *k) {
    memset(k, 0, KV_DIM * sizeof(float));
    k[0 * HEAD_DIM] = (pos % 2 == 0) ? 1.0f : 0.0f; /* head 0: "am I at an even position" */
    k[1 * HEAD_DIM] = (float)pos;                   /* head 1: position; query favours the largest */
    k[2 * HEAD_DIM] = -(float)pos;                  /* head 2: minus position: favours the smallest */
    k[3 * HEAD_DIM] = 0.0f;                         /* head 3: same score everywhere */
}

static void example_value(float v, float *row) {
    memset(row, 0, KV_DIM * sizeof(float));
    for (int h = 0; h < N_HEADS; h++) row[h * HEAD_DIM] = v;
}

/* The query: the same for every token (the pattern belongs to the head). */
static void example_query(float *q) {
    memset(q, 0, KV_DIM * sizeof(float));
    q[0 * HEAD_DIM] = BIG;
    q[1 * HEAD_DIM] = BIG;
    q[2 * HEAD_DIM] = BIG;
    q[3 * HEAD_DIM] = 1.0f;
}

/* Appends tokens [first, first+n) (0-based indices into k_values) to a 1-layer cache and runs
 * the kernel's attention for them; out: [n][KV_DIM]. keyfn builds each token's key. */
static void append_and_attend(sd_kv *kv, int first, int n, void (*keyfn)(int pos, float *k), float *out) {
    const int pos0 = sd_kv_len(kv, 0);
    assert_int_equal(pos0, first);
    float *K = sd_kv_k(kv, 0, 0), *V = sd_kv_v(kv, 0, 0);
    float q[5 * KV_DIM];
    for (int t = 0; t < n; t++) {
        keyfn(first + t + 1, K + (size_t)(pos0 + t) * KV_DIM);
        example_value(k_values[first + t], V + (size_t)(pos0 + t) * KV_DIM);
        example_query(q + t * KV_DIM);
    }
    float att[5];
    sd_attention(q, K, V, out, n, pos0, N_HEADS, N_HEADS, HEAD_DIM, att, 1);
    assert_int_equal(sd_kv_advance(kv, 0, n), SD_OK);
}

static void expect_context(const float *row, const float want[N_HEADS], const char *what) {
    for (int h = 0; h < N_HEADS; h++) {
        double d = (double)row[h * HEAD_DIM] - want[h];
        if (d > TOL_CONTEXT || d < -TOL_CONTEXT)
            fail_msg("%s: head %d context %.7g, expected %.7g", what, h, (double)row[h * HEAD_DIM], (double)want[h]);
        assert_true(row[h * HEAD_DIM + 1] == 0.0f); /* dim 1 of every value is 0 */
    }
}

static void test_kv_worked_example(void **state) {
    (void)state;
    static const float want_prefill[N_HEADS] = {12.5f, 5.0f, 10.0f, 9.0f};
    static const float want_decode[N_HEADS] = {12.5f, 7.0f, 10.0f, 8.6f};
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(1, 8, KV_DIM, SD_TYPE_F32, 1, &kv), SD_OK);

    /* Prefill "Today weather is so" in one batched attention call. */
    float pre[4 * KV_DIM];
    append_and_attend(kv, 0, 4, example_key, pre);
    expect_context(pre + 3 * KV_DIM, want_prefill, "prefill, last position");
    /* Causality: position 1 ("Today") sees only itself, whatever the head. */
    static const float want_first[N_HEADS] = {10.0f, 10.0f, 10.0f, 10.0f};
    expect_context(pre, want_first, "prefill, first position");

    /* Decode "nice" against the cache: one new query, the four cached rows untouched. */
    float dec[KV_DIM];
    append_and_attend(kv, 4, 1, example_key, dec);
    expect_context(dec, want_decode, "cached decode of \"nice\"");
    assert_int_equal(sd_kv_len(kv, 0), 5);

    /* Full recomputation of all five tokens from an empty cache gives the same last row. */
    sd_kv *fresh = NULL;
    assert_int_equal(sd_kv_create(1, 8, KV_DIM, SD_TYPE_F32, 1, &fresh), SD_OK);
    float full[5 * KV_DIM];
    append_and_attend(fresh, 0, 5, example_key, full);
    expect_context(full + 4 * KV_DIM, want_decode, "full recomputation, last position");
    assert_true(sdtest_max_abs_diff(full + 4 * KV_DIM, dec, KV_DIM) <= TOL_CONTEXT);
    /* ... and the same prefix rows (causal attention never looks ahead). */
    assert_true(sdtest_max_abs_diff(full, pre, 4 * KV_DIM) <= TOL_CONTEXT);

    /* Rolling back "nice" (O(1) truncation) and decoding it again reproduces the same row. */
    assert_int_equal(sd_kv_truncate(kv, 0, 4), SD_OK);
    float again[KV_DIM];
    append_and_attend(kv, 4, 1, example_key, again);
    assert_memory_equal(again, dec, sizeof dec);
    sd_kv_free(fresh);
    sd_kv_free(kv);
}

/* The article's error: head 1's key is "am I the last token" (1 or 0) decided when the row is
 * computed. Cached decoding keeps "so" flagged, full recomputation does not: 6.0 vs 7. */
static int g_last_pos; /* 1-based position of the newest token when a key is computed */
static void stale_key(int pos, float *k) {
    example_key(pos, k);
    k[1 * HEAD_DIM] = pos == g_last_pos ? 1.0f : 0.0f;
}

static void test_kv_stale_key_reproduces_6(void **state) {
    (void)state;
    sd_kv *kv = NULL, *fresh = NULL;
    assert_int_equal(sd_kv_create(1, 8, KV_DIM, SD_TYPE_F32, 1, &kv), SD_OK);
    assert_int_equal(sd_kv_create(1, 8, KV_DIM, SD_TYPE_F32, 1, &fresh), SD_OK);
    float pre[4 * KV_DIM], dec[KV_DIM], full[5 * KV_DIM];
    g_last_pos = 4;
    append_and_attend(kv, 0, 4, stale_key, pre);
    assert_true(pre[3 * KV_DIM + HEAD_DIM] == 5.0f); /* right at prefill time */
    g_last_pos = 5;
    append_and_attend(kv, 4, 1, stale_key, dec);
    g_last_pos = 5;
    append_and_attend(fresh, 0, 5, stale_key, full);
    printf("  stale 'is last' key: cached decode %.3g, full recomputation %.3g\n",
           (double)dec[HEAD_DIM], (double)full[4 * KV_DIM + HEAD_DIM]);
    assert_true(dec[HEAD_DIM] > 6.0f - TOL_CONTEXT && dec[HEAD_DIM] < 6.0f + TOL_CONTEXT);
    assert_true(full[4 * KV_DIM + HEAD_DIM] > 7.0f - TOL_CONTEXT && full[4 * KV_DIM + HEAD_DIM] < 7.0f + TOL_CONTEXT);
    sd_kv_free(fresh);
    sd_kv_free(kv);
}

/* ---------------------------------------------------------------- sd_kv contract */

static void test_kv_create_free(void **state) {
    (void)state;
    sd_kv_free(NULL);
    sd_kv *kv = (sd_kv *)&kv; /* must be reset to NULL on failure */
    assert_int_equal(sd_kv_create(0, 8, 4, SD_TYPE_F32, 1, &kv), SD_ERR_INVALID_ARG);
    assert_null(kv);
    kv = (sd_kv *)&kv;
    assert_int_equal(sd_kv_create(2, 0, 4, SD_TYPE_F32, 1, &kv), SD_ERR_INVALID_ARG);
    assert_null(kv);
    assert_int_equal(sd_kv_create(2, 8, -1, SD_TYPE_F32, 1, &kv), SD_ERR_INVALID_ARG);
    assert_null(kv);
    assert_int_equal(sd_kv_create(3, 16, 12, SD_TYPE_F32, 1, &kv), SD_OK);
    assert_non_null(kv);
    assert_int_equal(sd_kv_len(kv, 0), 0);
    assert_int_equal(sd_kv_capacity(kv), 16);
    assert_int_equal(sd_kv_kv_dim(kv), 12);
    assert_int_equal(sd_kv_n_layers(kv), 3);
    sd_kv_free(kv);
}

static void test_kv_advance_and_truncate(void **state) {
    (void)state;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(2, 10, 4, SD_TYPE_F32, 1, &kv), SD_OK);
    assert_int_equal(sd_kv_advance(kv, 0, 6), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 6);
    /* Past capacity: refused with CONTEXT_FULL, length unchanged. */
    assert_int_equal(sd_kv_advance(kv, 0, 5), SD_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sd_last_error(), "do not fit"));
    assert_int_equal(sd_kv_len(kv, 0), 6);
    assert_int_equal(sd_kv_advance(kv, 0, -1), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_kv_len(kv, 0), 6);
    assert_int_equal(sd_kv_advance(kv, 0, 4), SD_OK); /* exactly full is fine */
    assert_int_equal(sd_kv_len(kv, 0), 10);
    assert_int_equal(sd_kv_advance(kv, 0, 1), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_kv_advance(kv, 0, 0), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 10);
    /* Truncation only shortens: beyond len or negative is an error and changes nothing. */
    assert_int_equal(sd_kv_truncate(kv, 0, 7), SD_OK);
    assert_int_equal(sd_kv_truncate(kv, 0, 8), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_len(kv, 0), 7);
    assert_int_equal(sd_kv_truncate(kv, 0, -1), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_len(kv, 0), 7);
    assert_int_equal(sd_kv_truncate(kv, 0, 7), SD_OK); /* to the current length: a no-op */
    assert_int_equal(sd_kv_truncate(kv, 0, 0), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 0);
    assert_int_equal(sd_kv_truncate(kv, 0, 1), SD_ERR_INVALID_ARG);
    sd_kv_free(kv);
}

/* Truncation moves only the length: rows beyond it keep their data, so advancing again
 * re-exposes them unchanged (the layout is [layer][pos][kv_dim], layers not overlapping). */
static void test_kv_truncate_keeps_rows(void **state) {
    (void)state;
    const int L = 3, C = 9, D = 5;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(L, C, D, SD_TYPE_F32, 1, &kv), SD_OK);
    for (int l = 0; l < L; l++) {
        float *k = sd_kv_k(kv, 0, l), *v = sd_kv_v(kv, 0, l);
        assert_true(k != v);
        if (l > 0) assert_true(sd_kv_k(kv, 0, l) - sd_kv_k(kv, 0, l - 1) == (ptrdiff_t)C * D);
        for (int i = 0; i < C * D; i++) {
            k[i] = (float)(1000 * l + i);
            v[i] = -(float)(1000 * l + i);
        }
    }
    assert_int_equal(sd_kv_advance(kv, 0, C), SD_OK);
    float *k1 = sd_kv_k(kv, 0, 1);
    assert_int_equal(sd_kv_truncate(kv, 0, 2), SD_OK);
    assert_true(sd_kv_k(kv, 0, 1) == k1); /* no reallocation, no move */
    assert_int_equal(sd_kv_advance(kv, 0, C - 2), SD_OK);
    for (int l = 0; l < L; l++) {
        const float *k = sd_kv_k(kv, 0, l), *v = sd_kv_v(kv, 0, l);
        for (int i = 0; i < C * D; i++) {
            if (k[i] != (float)(1000 * l + i) || v[i] != -(float)(1000 * l + i))
                fail_msg("layer %d float %d changed by truncate/advance", l, i);
        }
    }
    sd_kv_free(kv);
}

static void test_kv_bytes(void **state) {
    (void)state;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(5, 64, 32, SD_TYPE_F32, 1, &kv), SD_OK);
    const size_t per = 2u * 5u * 32u * sizeof(float); /* K and V, every layer */
    assert_int_equal(sd_kv_bytes_per_token(kv), per);
    assert_int_equal(sd_kv_bytes_reserved(kv), per * 64);
    assert_int_equal(sd_kv_bytes_used(kv), 0);
    assert_int_equal(sd_kv_advance(kv, 0, 17), SD_OK);
    assert_int_equal(sd_kv_bytes_used(kv), per * 17);
    assert_int_equal(sd_kv_truncate(kv, 0, 3), SD_OK);
    assert_int_equal(sd_kv_bytes_used(kv), per * 3);
    assert_int_equal(sd_kv_type(kv), SD_TYPE_F32);
    sd_kv_free(kv);
    /* F16 elements: half the bytes; typed row pointers only */
    assert_int_equal(sd_kv_create(5, 64, 32, SD_TYPE_F16, 1, &kv), SD_OK);
    assert_int_equal(sd_kv_type(kv), SD_TYPE_F16);
    assert_int_equal(sd_kv_bytes_per_token(kv), per / 2);
    assert_null(sd_kv_k(kv, 0, 1));
    assert_ptr_equal((char *)sd_kv_k_data(kv, 0, 1), (char *)sd_kv_k_data(kv, 0, 0) + 64 * 32 * 2);
    sd_kv_free(kv);
    kv = (sd_kv *)1;
    assert_int_equal(sd_kv_create(5, 64, 32, SD_TYPE_Q8_0, 1, &kv), SD_ERR_UNSUPPORTED);
    assert_null(kv);
}

/* A context's cache is shaped by its model's hyperparameters: n_kv_heads * head_dim per row (GQA). */
static void test_kv_model_shape(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(64, 2, 8, 2, 96, 64, 7);
    const sd_hparams *hp = sd_model_hparams(m);
    sd_context *c = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 40;
    assert_int_equal(sd_context_create(m, &cp, &c), SD_OK);
    sd_kv *kv = sd_context_kv(c);
    assert_int_equal(sd_kv_n_layers(kv), hp->n_layers);
    assert_int_equal(sd_kv_kv_dim(kv), hp->n_kv_heads * hp->head_dim);
    assert_int_equal(sd_kv_kv_dim(kv), 16);
    assert_int_equal(sd_kv_capacity(kv), 40);
    assert_int_equal(sd_kv_bytes_per_token(kv), 2u * 2u * 16u * sizeof(float));
    /* A forward that would not fit is refused and leaves the cache as it was. */
    int32_t tok[41];
    for (int i = 0; i < 41; i++) tok[i] = i % 64;
    assert_int_equal(sd_context_forward(c, 0, tok, 30, NULL, 0), SD_OK);
    assert_int_equal(sd_context_forward(c, 0, tok, 11, NULL, 0), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_kv_len(kv, 0), 30);
    assert_int_equal(sd_context_forward(c, 0, tok, 10, NULL, 0), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 40);
    assert_int_equal(sd_context_forward(c, 0, tok, 1, NULL, 0), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_kv_len(kv, 0), 40);
    sd_context_free(c);
    sd_model_free(m);
}

/* Sequences are independent: each has its own length and rows; truncating one leaves the others. */
static void test_kv_sequences(void **state) {
    (void)state;
    const int L = 2, C = 6, D = 3, S = 3;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(L, C, D, SD_TYPE_F32, S, &kv), SD_OK);
    assert_int_equal(sd_kv_n_seq(kv), S);
    for (int s = 0; s < S; s++)
        for (int l = 0; l < L; l++) {
            float *k = sd_kv_k(kv, s, l), *v = sd_kv_v(kv, s, l);
            for (int i = 0; i < C * D; i++) {
                k[i] = (float)(10000 * s + 100 * l + i);
                v[i] = -k[i];
            }
        }
    assert_int_equal(sd_kv_advance(kv, 0, 2), SD_OK);
    assert_int_equal(sd_kv_advance(kv, 2, 5), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 2);
    assert_int_equal(sd_kv_len(kv, 1), 0);
    assert_int_equal(sd_kv_len(kv, 2), 5);
    assert_int_equal(sd_kv_bytes_used(kv), sd_kv_bytes_per_token(kv) * 7);
    assert_int_equal(sd_kv_bytes_reserved(kv), sd_kv_bytes_per_token(kv) * (size_t)(C * S));
    assert_int_equal(sd_kv_truncate(kv, 2, 1), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 2);
    assert_int_equal(sd_kv_advance(kv, 1, C + 1), SD_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sd_last_error(), "sequence 1"));
    assert_int_equal(sd_kv_len(kv, 1), 0);
    assert_int_equal(sd_kv_truncate(kv, S, 0), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_advance(kv, -1, 1), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_len(kv, S), 0);
    for (int s = 0; s < S; s++)
        for (int l = 0; l < L; l++) {
            const float *k = sd_kv_k(kv, s, l);
            for (int i = 0; i < C * D; i++)
                if (k[i] != (float)(10000 * s + 100 * l + i)) fail_msg("seq %d layer %d float %d changed", s, l, i);
        }
    sd_kv_free(kv);
    kv = (sd_kv *)1;
    assert_int_equal(sd_kv_create(L, C, D, SD_TYPE_F32, 0, &kv), SD_ERR_INVALID_ARG);
    assert_null(kv);
}

/* Keeping a tree pass's accepted path: the chosen rows move down behind the prefix, in order, in
 * every layer, K and V alike; rows already in place and the other sequences stay untouched. */
static void test_kv_keep_rows(void **state) {
    (void)state;
    const int L = 3, C = 12, D = 4;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(L, C, D, SD_TYPE_F32, 2, &kv), SD_OK);
    for (int s = 0; s < 2; s++)
        for (int l = 0; l < L; l++)
            for (int r = 0; r < C; r++)
                for (int i = 0; i < D; i++) {
                    sd_kv_k(kv, s, l)[r * D + i] = (float)(1000 * s + 100 * l + 10 * r + i);
                    sd_kv_v(kv, s, l)[r * D + i] = -(float)(1000 * s + 100 * l + 10 * r + i);
                }
    assert_int_equal(sd_kv_advance(kv, 0, 10), SD_OK); /* prefix 4, tree rows 4..9 */
    assert_int_equal(sd_kv_advance(kv, 1, 10), SD_OK);
    const int32_t path[3] = {4, 6, 9};
    assert_int_equal(sd_kv_keep_rows(kv, 0, 4, path, 3), SD_OK);
    assert_int_equal(sd_kv_len(kv, 0), 7);
    assert_int_equal(sd_kv_len(kv, 1), 10);
    const int src[7] = {0, 1, 2, 3, 4, 6, 9};
    for (int l = 0; l < L; l++)
        for (int r = 0; r < 7; r++)
            for (int i = 0; i < D; i++) {
                assert_true(sd_kv_k(kv, 0, l)[r * D + i] == (float)(100 * l + 10 * src[r] + i));
                assert_true(sd_kv_v(kv, 0, l)[r * D + i] == -(float)(100 * l + 10 * src[r] + i));
                assert_true(sd_kv_k(kv, 1, l)[r * D + i] == (float)(1000 + 100 * l + 10 * r + i));
            }
    /* bad paths: not increasing, below base, past the length; nothing changes */
    const int32_t bad1[2] = {8, 8}, bad2[1] = {2}, bad3[1] = {10};
    assert_int_equal(sd_kv_keep_rows(kv, 1, 4, bad1, 2), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_keep_rows(kv, 1, 4, bad2, 1), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_keep_rows(kv, 1, 4, bad3, 1), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_keep_rows(kv, 1, 11, bad3, 0), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_len(kv, 1), 10);
    assert_true(sd_kv_k(kv, 1, 2)[9 * D] == (float)(1000 + 200 + 90));
    /* keeping nothing after base is a truncation */
    assert_int_equal(sd_kv_keep_rows(kv, 1, 5, NULL, 0), SD_OK);
    assert_int_equal(sd_kv_len(kv, 1), 5);
    sd_kv_free(kv);
}

/* Copying a sequence's first n positions (every layer, K and V) into another: the same rows,
 * the destination's length n, its rows past n untouched; bad arguments change nothing. */
static void test_copy(void **state) {
    (void)state;
    sd_kv *kv = NULL;
    assert_int_equal(sd_kv_create(2, 8, 4, SD_TYPE_F32, 3, &kv), SD_OK);
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < 8 * 4; i++) {
            sd_kv_k(kv, 0, l)[i] = (float)(100 * l + i);
            sd_kv_v(kv, 0, l)[i] = (float)(-100 * l - i);
            sd_kv_k(kv, 2, l)[i] = sd_kv_v(kv, 2, l)[i] = 7.0f;
        }
    assert_int_equal(sd_kv_advance(kv, 0, 6), SD_OK);
    assert_int_equal(sd_kv_copy(kv, 0, 2, 7), SD_ERR_INVALID_ARG); /* beyond its length */
    assert_int_equal(sd_kv_copy(kv, 0, 0, 3), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_copy(kv, 0, 3, 3), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_kv_len(kv, 2), 0);
    assert_int_equal(sd_kv_copy(kv, 0, 2, 5), SD_OK);
    assert_int_equal(sd_kv_len(kv, 2), 5);
    for (int l = 0; l < 2; l++) {
        assert_memory_equal(sd_kv_k(kv, 2, l), sd_kv_k(kv, 0, l), 5 * 4 * sizeof(float));
        assert_memory_equal(sd_kv_v(kv, 2, l), sd_kv_v(kv, 0, l), 5 * 4 * sizeof(float));
        assert_true(sd_kv_k(kv, 2, l)[5 * 4] == 7.0f);
    }
    sd_kv_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_kv_worked_example),
        cmocka_unit_test(test_kv_stale_key_reproduces_6),
        cmocka_unit_test(test_kv_create_free),
        cmocka_unit_test(test_kv_advance_and_truncate),
        cmocka_unit_test(test_kv_truncate_keeps_rows),
        cmocka_unit_test(test_kv_bytes),
        cmocka_unit_test(test_kv_model_shape),
        cmocka_unit_test(test_kv_sequences),
        cmocka_unit_test(test_kv_keep_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
