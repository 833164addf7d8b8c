/* Kernels against their naive references: matmul per type and batch size (including the
 * matvec/multi-vector/GEMM switch points and masked tails), attention, softmax, RMSNorm, RoPE. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "specdec/cpu.h"
#include "kernels/kernels.h"
#include "sdtest.h"

/* Float32 dot products of up to ~2000 terms against a double-accumulated reference:
 * relative error bounded by ~n * 2^-24 in the worst case, far less in practice. */
#define TOL_MATMUL_REL 2e-5
/* The vectorised exp is a degree-7 polynomial: within a few ulps of expf. */
#define TOL_SOFTMAX_REL 1e-6
#define TOL_ATTENTION 1e-5
#define TOL_ELEMENTWISE 1e-6

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { /* xorshift64: uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void check_matmul_p(sd_type type, int rows, int cols, int n, int packed) {
    size_t esz = type == SD_TYPE_F16 ? 2 : 4;
    void *w = malloc((size_t)rows * cols * esz);
    float *x = malloc((size_t)n * cols * sizeof(float));
    float *y = malloc((size_t)n * rows * sizeof(float));
    float *yr = malloc((size_t)n * rows * sizeof(float));
    float *scratch = malloc(sd_matmul_scratch_floats(cols) * sizeof(float));
    for (int i = 0; i < rows * cols; i++) {
        float v = frand();
        if (type == SD_TYPE_F16) ((uint16_t *)w)[i] = sd_fp32_to_fp16(v);
        else ((float *)w)[i] = v;
    }
    for (int i = 0; i < n * cols; i++) x[i] = frand();
    sd_tensor W = {type, rows, cols, (size_t)cols * esz, w, NULL};
    float *pk = NULL;
    if (packed) { /* the narrow-F32 kernel copy a model gets at load */
        assert_true(sd_f32_can_pack(&W));
        pk = aligned_alloc(64, sd_f32_packed_bytes(rows, cols));
        sd_f32_pack(w, rows, cols, pk);
        W.packed = pk;
    }
    assert_int_equal(sd_matmul(&W, x, n, y, scratch), 0);
    assert_int_equal(sd_matmul_ref(&W, x, n, yr), 0);
    double worst = 0, scale = 0;
    for (int i = 0; i < n * rows; i++) {
        double d = fabs((double)y[i] - yr[i]);
        if (d > worst) worst = d;
        if (fabs(yr[i]) > scale) scale = fabs(yr[i]);
    }
    if (worst > TOL_MATMUL_REL * (scale > 1 ? scale : 1) * sqrt((double)cols / 64.0))
        fail_msg("matmul type %d %dx%d n=%d: max diff %g (scale %g)", type, rows, cols, n, worst, scale);
    /* Without scratch (a kernel then has no room to stage its operands, as the AVX2 packed
     * kernel stages broadcast activations) the same bits come out. */
    if (n <= SD_SMALL_BATCH || packed) {
        float *y0 = malloc((size_t)n * rows * sizeof(float));
        assert_int_equal(sd_matmul(&W, x, n, y0, NULL), 0);
        assert_memory_equal(y0, y, (size_t)n * rows * sizeof(float));
        free(y0);
    }
    /* Rows of a batch equal single-token matvecs bit for bit up to SD_SMALL_BATCH (packed: always). */
    if (n <= SD_SMALL_BATCH || packed) {
        float *y1 = malloc((size_t)rows * sizeof(float));
        for (int j = 0; j < n; j++) {
            assert_int_equal(sd_matmul(&W, x + (size_t)j * cols, 1, y1, scratch), 0);
            assert_memory_equal(y1, y + (size_t)j * rows, (size_t)rows * sizeof(float));
        }
        free(y1);
    }
    free(pk);
    free(w);
    free(x);
    free(y);
    free(yr);
    free(scratch);
}

static void check_matmul(sd_type type, int rows, int cols, int n) { check_matmul_p(type, rows, cols, n, 0); }

static void test_matmul_f32(void **state) {
    (void)state;
    static const int ns[] = {1, 2, 3, 5, 8, 9, 16, 17, 33, 34, 70};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        check_matmul(SD_TYPE_F32, 37, 64, ns[i]);
        check_matmul(SD_TYPE_F32, 64, 172, ns[i]); /* 172 = 10*16 + 12: masked tail */
        check_matmul(SD_TYPE_F32, 5, 7, ns[i]);    /* shorter than one vector */
    }
    check_matmul(SD_TYPE_F32, 2048, 768, 1); /* big enough to run the parallel path */
    check_matmul(SD_TYPE_F32, 768, 2048, 5);
    /* uneven per-thread ranges: sub-range streams plus remainder rows, every token count */
    for (int n = 1; n <= 13; n++) check_matmul(SD_TYPE_F32, 1203, 520, n);
}

/* F32 matrices with their packed copy (16-row groups, column-major): against the
 * reference, and batch rows equal to single-token products bit for bit; padded last groups
 * (37, 5 rows), column counts not a multiple of 4 (7, 67, 250), past one token chunk (n > 7:
 * 7 + 1, 7 + 7, 7 + 4 + 4 on AVX-512; chunks of 3 on AVX2) and past SD_SMALL_BATCH, where the
 * packed kernel still runs (bit for bit at every n). */
static void test_matmul_f32_packed(void **state) {
    (void)state;
    assert_true(sd_f32_can_pack(&(sd_tensor){SD_TYPE_F32, 16, 64, 64 * sizeof(float), NULL, NULL})); /* every path */
    static const int ns[] = {1, 2, 5, 6, 7, 8, 12, 13, 14, 15, 33, 34, 70};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        check_matmul_p(SD_TYPE_F32, 37, 64, ns[i], 1);
        check_matmul_p(SD_TYPE_F32, 64, 172, ns[i], 1);
        check_matmul_p(SD_TYPE_F32, 5, 7, ns[i], 1);
        check_matmul_p(SD_TYPE_F32, 48, 67, ns[i], 1);
    }
    check_matmul_p(SD_TYPE_F32, 4099, 250, 5, 1); /* big enough to run the parallel path */
}

static void test_matmul_f16(void **state) {
    (void)state;
    static const int ns[] = {1, 2, 4, 8, 9, 33, 40};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
        check_matmul(SD_TYPE_F16, 37, 64, ns[i]);
        check_matmul(SD_TYPE_F16, 300, 172, ns[i]); /* several dequantisation tiles for GEMM */
    }
}

/* The fused Q/K/V-style group (one parallel region whose per-thread ranges cross matrix
 * boundaries) equals one sd_matmul per matrix, bit for bit, for decode and verify sizes. */
static void test_matmul_group(void **state) {
    (void)state;
    enum { COLS = 512 };
    static const int rows[3] = {1000, 264, 280};
    float *w[3], *y[3], *yr[3];
    sd_tensor W[3];
    float *x = malloc((size_t)5 * COLS * sizeof(float));
    for (int i = 0; i < 5 * COLS; i++) x[i] = frand();
    for (int m = 0; m < 3; m++) {
        w[m] = malloc((size_t)rows[m] * COLS * sizeof(float));
        y[m] = malloc((size_t)5 * rows[m] * sizeof(float));
        yr[m] = malloc((size_t)5 * rows[m] * sizeof(float));
        for (int i = 0; i < rows[m] * COLS; i++) w[m][i] = frand();
        W[m] = (sd_tensor){SD_TYPE_F32, rows[m], COLS, COLS * sizeof(float), w[m], NULL};
    }
    const sd_tensor *wp[3] = {&W[0], &W[1], &W[2]};
    for (int n = 1; n <= 5; n += 4) {
        assert_int_equal(sd_matmul_group(wp, y, 3, x, n, NULL), 0);
        for (int m = 0; m < 3; m++) {
            assert_int_equal(sd_matmul(&W[m], x, n, yr[m], NULL), 0);
            assert_memory_equal(y[m], yr[m], (size_t)n * rows[m] * sizeof(float));
        }
    }
    for (int m = 0; m < 3; m++) {
        free(w[m]);
        free(y[m]);
        free(yr[m]);
    }
    free(x);
}

/* The first NaN/Inf is found wherever it sits (vector body or tail), finite values pass. */
static void test_first_nonfinite(void **state) {
    (void)state;
    enum { N = 53 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = ((float)(i + 1) / N) * (i % 3 ? 3e38f : -1e-40f); /* large, subnormal */
    assert_int_equal(sd_first_nonfinite(x, N), -1);
    assert_int_equal(sd_first_nonfinite(x, 0), -1);
    static const int at[] = {0, 7, 15, 16, 31, 32, 47, 48, 52};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t a = 0; a < sizeof at / sizeof *at; a++)
        for (int b = 0; b < 3; b++) {
            const float keep = x[at[a]];
            x[at[a]] = bad[b];
            assert_int_equal(sd_first_nonfinite(x, N), at[a]);
            if (at[a] + 1 < N) { /* a later one does not hide the first */
                x[N - 1] = NAN;
                assert_int_equal(sd_first_nonfinite(x, N), at[a]);
                x[N - 1] = 1.0f;
            }
            x[at[a]] = keep;
        }
}

static void test_matmul_unsupported_type(void **state) {
    (void)state;
    float x[32] = {0}, y[4];
    sd_tensor W = {SD_TYPE_Q2_K, 4, 256, 84, x, NULL};
    assert_int_equal(sd_matmul(&W, x, 1, y, NULL), -1);
}

static void test_softmax(void **state) {
    (void)state;
    static const int ns[] = {1, 5, 16, 17, 100, 1000};
    for (size_t c = 0; c < sizeof ns / sizeof *ns; c++) {
        int n = ns[c];
        float *x = malloc((size_t)n * sizeof(float));
        double *r = malloc((size_t)n * sizeof(double));
        double mx = -1e30, sum = 0;
        for (int i = 0; i < n; i++) {
            x[i] = 20 * frand();
            if (i == 3) x[i] = -100; /* far below the max: underflows cleanly */
            if (x[i] > mx) mx = x[i];
        }
        for (int i = 0; i < n; i++) sum += (r[i] = exp((double)x[i] - mx));
        sd_softmax(x, n);
        double total = 0;
        for (int i = 0; i < n; i++) {
            double want = r[i] / sum;
            if (fabs(x[i] - want) > TOL_SOFTMAX_REL * (want > 1e-3 ? want : 1e-3) * 10)
                fail_msg("softmax n=%d i=%d: %g vs %g", n, i, (double)x[i], want);
            total += x[i];
        }
        assert_true(fabs(total - 1) < 1e-5);
        free(x);
        free(r);
    }
}

static void check_attention(int n, int pos0, int n_heads, int n_kv_heads, int hd) {
    const int T = pos0 + n, qd = n_heads * hd, kvd = n_kv_heads * hd;
    float *q = malloc((size_t)n * qd * sizeof(float)), *K = malloc((size_t)T * kvd * sizeof(float));
    float *V = malloc((size_t)T * kvd * sizeof(float));
    float *o = malloc((size_t)n * qd * sizeof(float)), *orf = malloc((size_t)n * qd * sizeof(float));
    const int slots = n_heads * 3 > 4 ? n_heads * 3 : 4; /* position-major, 3 tokens per pass */
    float *att = malloc((size_t)slots * T * sizeof(float));
    for (int i = 0; i < n * qd; i++) q[i] = 2 * frand();
    for (int i = 0; i < T * kvd; i++) K[i] = 2 * frand(), V[i] = frand();
    sd_attention(q, K, V, o, n, pos0, n_heads, n_kv_heads, hd, att, slots);
    sd_attention_ref(q, K, V, orf, n, pos0, n_heads, n_kv_heads, hd);
    double d = sdtest_max_abs_diff(o, orf, (size_t)n * qd);
    if (d > TOL_ATTENTION) fail_msg("attention n=%d pos0=%d heads=%d/%d hd=%d: %g", n, pos0, n_heads, n_kv_heads, hd, d);
    /* Each query token attends causally: a batch equals one token at a time. */
    float *o1 = malloc((size_t)qd * sizeof(float));
    for (int t = 0; t < n; t++) {
        sd_attention(q + (size_t)t * qd, K, V, o1, 1, pos0 + t, n_heads, n_kv_heads, hd, att, slots);
        assert_memory_equal(o1, o + (size_t)t * qd, (size_t)qd * sizeof(float));
        if (hd >= 16 && n_heads > 1) { /* per-item path (fewer scratch rows than heads): same bits */
            sd_attention(q + (size_t)t * qd, K, V, o1, 1, pos0 + t, n_heads, n_kv_heads, hd, att, 1);
            assert_memory_equal(o1, o + (size_t)t * qd, (size_t)qd * sizeof(float));
        }
    }
    free(o1);
    free(q);
    free(K);
    free(V);
    free(o);
    free(orf);
    free(att);
}

/* Attention over an F16 cache equals attention over an F32 cache holding the same (rounded)
 * values, bit for bit, serial and parallel, decode and batches, GQA. */
static void check_attention_f16(int n, int pos0, int n_heads, int n_kv_heads, int hd) {
    const int T = pos0 + n, qd = n_heads * hd, kvd = n_kv_heads * hd, slots = n_heads * 3;
    float *q = malloc((size_t)n * qd * sizeof(float)), *K = malloc((size_t)T * kvd * sizeof(float));
    float *V = malloc((size_t)T * kvd * sizeof(float));
    uint16_t *K16 = malloc((size_t)T * kvd * sizeof(uint16_t)), *V16 = malloc((size_t)T * kvd * sizeof(uint16_t));
    float *o = malloc((size_t)n * qd * sizeof(float)), *o16 = malloc((size_t)n * qd * sizeof(float));
    float *att = malloc((size_t)slots * T * sizeof(float)), *conv = malloc((size_t)4 * 16 * kvd * sizeof(float));
    for (int i = 0; i < n * qd; i++) q[i] = 2 * frand();
    for (int i = 0; i < T * kvd; i++) K[i] = 2 * frand(), V[i] = frand();
    sd_f32_to_f16_row(K, K16, (size_t)T * kvd);
    sd_f32_to_f16_row(V, V16, (size_t)T * kvd);
    for (int i = 0; i < T * kvd; i++) {
        assert_int_equal(K16[i], sd_fp32_to_fp16(K[i])); /* the vector rounding is the scalar one */
        K[i] = sd_fp16_to_fp32(K16[i]);
        V[i] = sd_fp16_to_fp32(V16[i]);
    }
    sd_attention(q, K, V, o, n, pos0, n_heads, n_kv_heads, hd, att, slots);
    assert_int_equal(sd_attention_f16(q, K16, V16, o16, n, pos0, n_heads, n_kv_heads, hd, att, slots, conv, 4), 0);
    if (memcmp(o, o16, (size_t)n * qd * sizeof(float)))
        fail_msg("f16 attention n=%d pos0=%d heads=%d/%d hd=%d differs from f32 on the same values", n, pos0, n_heads,
                 n_kv_heads, hd);
    free(q);
    free(K);
    free(V);
    free(K16);
    free(V16);
    free(o);
    free(o16);
    free(att);
    free(conv);
}

static void test_attention_f16(void **state) {
    (void)state;
    assert_true(sd_attention_f16_ok(16)); /* every path has the kernels */
    check_attention_f16(1, 64, 12, 12, 64); /* 110M decode step: parallel */
    check_attention_f16(5, 100, 12, 12, 64); /* verify pass */
    check_attention_f16(3, 0, 4, 2, 16);     /* GQA, first tokens, serial */
    check_attention_f16(9, 33, 8, 2, 72);    /* head_dim not a multiple of 16 */
    check_attention_f16(2, 200, 32, 4, 128); /* TinyLlama-like GQA 8:1 */
    assert_int_equal(sd_attention_f16_ok(8), 0);
}

static void test_attention(void **state) {
    (void)state;
    check_attention(1, 0, 8, 4, 8);
    check_attention(5, 20, 8, 4, 8);   /* stories260K: head_dim 8, GQA 2:1 */
    check_attention(3, 33, 6, 6, 8);   /* the draft: MHA */
    check_attention(4, 100, 12, 12, 64); /* 110M shape: the parallel path */
    check_attention(1, 64, 12, 12, 64);  /* 110M decode step, parallel */
    check_attention(7, 17, 8, 2, 16);
    check_attention(2, 300, 4, 1, 32);  /* multi-query */
    check_attention(9, 0, 4, 2, 12);    /* head_dim not a multiple of 8 */
}

/* A NaN reaching softmax, SwiGLU or attention stays NaN, so the forward pass's non-finite check
 * names it (NaN weights of wq or wk must not vanish into a tiny attention weight), and SwiGLU of
 * a huge negative gate is -0 as with expf, not a finite remnant of a clamped exp. */
static void test_nonfinite_propagates(void **state) {
    (void)state;
    for (int n = 5; n <= 40; n += 7) {
        float x[40];
        for (int i = 0; i < n; i++) x[i] = (float)i / 3;
        x[1] = NAN;
        sd_softmax(x, n);
        if (!isnan(x[1])) fail_msg("softmax n=%d: a NaN input came out as %g", n, (double)x[1]);
    }
    float g[9] = {NAN, -1e38f, -100.0f, -88.8f, 0, 1, 2, 3, 4}, u[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    sd_swiglu(g, u, 9);
    assert_true(isnan(g[0]));
    for (int i = 1; i < 4; i++)
        if (!(fabsf(g[i]) < 1e-30f)) fail_msg("swiglu of a gate far below 0 (%d): %g, expected about -0", i, (double)g[i]);
    static const int shapes[][3] = {{8, 4, 8}, {12, 12, 64}, {4, 1, 16}}; /* heads, kv heads, head_dim */
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int nh = shapes[k][0], nkv = shapes[k][1], hd = shapes[k][2], n = 3, pos0 = 40, T = pos0 + n;
        const int qd = nh * hd, kvd = nkv * hd, slots = nh * 3;
        float *q = malloc((size_t)n * qd * sizeof(float)), *K = malloc((size_t)T * kvd * sizeof(float));
        float *V = malloc((size_t)T * kvd * sizeof(float)), *o = malloc((size_t)n * qd * sizeof(float));
        float *att = malloc((size_t)slots * T * sizeof(float));
        for (int i = 0; i < n * qd; i++) q[i] = frand();
        for (int i = 0; i < T * kvd; i++) K[i] = frand(), V[i] = frand();
        K[(size_t)7 * kvd + 1] = NAN; /* position 7, KV head 0: its query heads are 0 .. nh/nkv - 1 */
        sd_attention(q, K, V, o, n, pos0, nh, nkv, hd, att, slots);
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                const float v = o[(size_t)t * qd + (size_t)h * hd];
                if ((h < nh / nkv) != (isnan(v) != 0))
                    fail_msg("attention %d/%d heads, head_dim %d, NaN key of KV head 0: token %d head %d gave %g", nh, nkv,
                             hd, t, h, (double)v);
            }
        free(q), free(K), free(V), free(o), free(att);
    }
}

static void test_rmsnorm_rope_swiglu(void **state) {
    (void)state;
    float x[2 * 24], w[24], out[2 * 24];
    for (int i = 0; i < 48; i++) x[i] = frand();
    for (int i = 0; i < 24; i++) w[i] = 1 + frand() / 4;
    sd_rmsnorm(out, x, w, 2, 24, 1e-5f);
    for (int t = 0; t < 2; t++) {
        double ss = 0;
        for (int i = 0; i < 24; i++) ss += (double)x[t * 24 + i] * x[t * 24 + i];
        double s = 1 / sqrt(ss / 24 + 1e-5);
        for (int i = 0; i < 24; i++) assert_true(fabs(out[t * 24 + i] - x[t * 24 + i] * s * w[i]) < TOL_ELEMENTWISE);
    }
    /* RoPE: both conventions rotate pairs by pos * theta^(-2i/d); norms of pairs are kept. */
    float inv[4];
    for (int i = 0; i < 4; i++) inv[i] = (float)pow(10000.0, -2.0 * i / 8);
    for (int style = 0; style < 2; style++) {
        float v[16], r[16];
        for (int i = 0; i < 16; i++) v[i] = r[i] = frand();
        float cs[8];
        sd_rope_angles(5, inv, 8, cs);
        sd_rope(r, 2, 8, 8, cs, style);
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                int a = style ? i : 2 * i, b = style ? i + 4 : 2 * i + 1;
                double c = cos(5.0 * inv[i]), s = sin(5.0 * inv[i]);
                double ea = v[h * 8 + a] * c - v[h * 8 + b] * s, eb = v[h * 8 + a] * s + v[h * 8 + b] * c;
                assert_true(fabs(r[h * 8 + a] - ea) < TOL_ELEMENTWISE && fabs(r[h * 8 + b] - eb) < TOL_ELEMENTWISE);
            }
    }
    /* The vectorised RoPE equals the scalar loop bit for bit: full and partial rotary dims,
     * tails of every length, both conventions, zeros of either sign. */
    const int dims[][2] = {{8, 8},     {16, 16},   {64, 64},   {64, 32},   {80, 80},
                           {128, 128}, {128, 64},  {96, 40},   {256, 256}, {512, 512}, {384, 300}};
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        for (int style = 0; style < 2; style++)
            for (int nh = 1; nh <= 5; nh += 2) {
                const int hd = dims[d][0], rd = dims[d][1];
                float *v = malloc((size_t)nh * hd * sizeof(float)), *r = malloc((size_t)nh * hd * sizeof(float));
                float inv_f[256], csr[512];
                for (int i = 0; i < rd / 2; i++) inv_f[i] = (float)pow(500000.0, -2.0 * i / rd);
                for (int i = 0; i < nh * hd; i++) v[i] = r[i] = i % 11 == 0 ? (i % 2 ? -0.0f : 0.0f) : frand() * 3;
                sd_rope_angles(4097, inv_f, rd, csr);
                sd_rope(v, nh, hd, rd, csr, style);
                sd_rope_ref(r, nh, hd, rd, csr, style);
                if (memcmp(v, r, (size_t)nh * hd * sizeof(float)) != 0)
                    fail_msg("rope head_dim %d rope_dim %d style %d heads %d: differs from the reference", hd, rd, style, nh);
                free(v);
                free(r);
            }
    /* A prefill's sizes split the elementwise kernels across the threads: the same bits as
     * pieces small enough to run serially (rows, tokens, slices of 1000 elements). */
    {
        const int nrow = 100, d = 768, ne = 70001, nh = 12, nkv = 4, hd2 = 64;
        float *xs = malloc((size_t)nrow * d * sizeof(float)), *ws = malloc((size_t)d * sizeof(float));
        float *o1 = malloc((size_t)nrow * d * sizeof(float)), *o2 = malloc((size_t)nrow * d * sizeof(float));
        for (int i = 0; i < nrow * d; i++) xs[i] = frand() * 4;
        for (int i = 0; i < d; i++) ws[i] = 1 + frand() / 4;
        sd_rmsnorm(o1, xs, ws, nrow, d, 1e-6f);
        for (int t = 0; t < nrow; t++) sd_rmsnorm(o2 + (size_t)t * d, xs + (size_t)t * d, ws, 1, d, 1e-6f);
        assert_memory_equal(o1, o2, (size_t)nrow * d * sizeof(float));
        float *ga = malloc((size_t)ne * sizeof(float)), *gb = malloc((size_t)ne * sizeof(float)), *gu = malloc((size_t)ne * sizeof(float));
        for (int i = 0; i < ne; i++) ga[i] = gb[i] = frand() * 8, gu[i] = frand();
        sd_swiglu(ga, gu, ne);
        for (int i = 0; i < ne; i += 1000) sd_swiglu(gb + i, gu + i, ne - i < 1000 ? ne - i : 1000);
        assert_memory_equal(ga, gb, (size_t)ne * sizeof(float));
        const int ntok = 80, qd = nh * hd2, kd = nkv * hd2; /* 80 x 1024 elements: split */
        float *q1 = malloc((size_t)ntok * qd * sizeof(float)), *k1 = malloc((size_t)ntok * kd * sizeof(float));
        float *q2 = malloc((size_t)ntok * qd * sizeof(float)), *k2 = malloc((size_t)ntok * kd * sizeof(float));
        float *csa = malloc((size_t)ntok * hd2 * sizeof(float)), inv_f[32];
        for (int i = 0; i < 32; i++) inv_f[i] = (float)pow(10000.0, -2.0 * i / hd2);
        for (int t = 0; t < ntok; t++) sd_rope_angles(t * 7, inv_f, hd2, csa + (size_t)t * hd2);
        for (int i = 0; i < ntok * qd; i++) q1[i] = q2[i] = frand();
        for (int i = 0; i < ntok * kd; i++) k1[i] = k2[i] = frand();
        for (int style = 0; style < 2; style++) {
            sd_rope_tokens(q1, k1, ntok, nh, nkv, hd2, hd2, csa, style);
            for (int t = 0; t < ntok; t++) {
                sd_rope(q2 + (size_t)t * qd, nh, hd2, hd2, csa + (size_t)t * hd2, style);
                sd_rope(k2 + (size_t)t * kd, nkv, hd2, hd2, csa + (size_t)t * hd2, style);
            }
            assert_memory_equal(q1, q2, (size_t)ntok * qd * sizeof(float));
            assert_memory_equal(k1, k2, (size_t)ntok * kd * sizeof(float));
        }
        free(xs), free(ws), free(o1), free(o2), free(ga), free(gb), free(gu);
        free(q1), free(k1), free(q2), free(k2), free(csa);
    }
    float g[5] = {-3, -0.5f, 0, 0.5f, 3}, u[5] = {1, 2, 3, 4, 5};
    sd_swiglu(g, u, 5);
    float gi[5] = {-3, -0.5f, 0, 0.5f, 3};
    for (int i = 0; i < 5; i++) assert_true(fabs(g[i] - gi[i] / (1 + exp(-gi[i])) * u[i]) < TOL_ELEMENTWISE);
}

/* One run of work stealing: nblk blocks cut for `slots` threads, drained by a team of `team`.
 * Every block must be claimed exactly once, in valid ranges. With hold, thread 0 claims once
 * and then waits (up to 10 s) until another thread has taken a block of its initial range,
 * which that thread can only get by stealing: no timing decides the outcome. Returns the
 * blocks thread 0 did not get of its initial range, or -1 when the runtime gave a team of one
 * (OMP_DYNAMIC, OMP_THREAD_LIMIT), where nobody could steal and the hold is skipped. */
static int64_t steal_run(int64_t nblk, int slots, int team, int hold) {
    int *count = calloc((size_t)(nblk > 0 ? nblk : 1), sizeof(int));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(slots);
    sd_steal w;
    sd_steal_init(&w, nblk);
    omp_set_num_threads(saved);
    const int64_t own_end = slots > 0 ? nblk / slots : 0; /* thread 0's initial range [0, own_end) */
    int bad_range = 0, stolen = 0, timed_out = 0, held = 0;
    int64_t not_mine = 0;
#pragma omp parallel num_threads(team)
    {
        const int me = omp_get_thread_num();
        int64_t b0, b1;
        int claims = 0;
        while (sd_steal_next(&w, &b0, &b1)) {
            if (b0 < 0 || b0 >= b1 || b1 > nblk) {
#pragma omp atomic write
                bad_range = 1;
                break;
            }
            for (int64_t b = b0; b < b1; b++) {
#pragma omp atomic update
                count[b]++;
                if (b < own_end && me != 0) {
#pragma omp atomic write
                    stolen = 1;
#pragma omp atomic update
                    not_mine++;
                }
            }
            if (hold && me == 0 && claims++ == 0 && omp_get_num_threads() > 1) {
                held = 1;
                const double t0 = omp_get_wtime();
                int s = 0;
                while (!s && !timed_out) {
#pragma omp atomic read
                    s = stolen;
                    if (omp_get_wtime() - t0 > 10) timed_out = 1;
                }
            }
        }
    }
    assert_false(bad_range);
    assert_false(timed_out);
    for (int64_t b = 0; b < nblk; b++)
        if (count[b] != 1) fail_msg("steal %lld blocks, %d slots, team %d: block %lld claimed %d times", (long long)nblk, slots,
                                    team, (long long)b, count[b]);
    free(count);
    return held || !hold ? not_mine : -1;
}

/* Work stealing (the threaded matmuls' scheduler): each block exactly once whatever the team
 * (smaller than the slots: idle slots are drained; larger: the extra threads get none), and a
 * thread whose range is done takes work from one still busy. */
static void test_steal(void **state) {
    (void)state;
    const int64_t sizes[] = {0, 1, 2, 3, 7, 48, 1000, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int slots = 1; slots <= 4; slots++)
            for (int team = 1; team <= 5; team++) steal_run(sizes[i], slots, team, 0);
    /* slots beyond SD_STEAL_MAX_THREADS are capped; the team still drains every block */
    steal_run(1000, SD_STEAL_MAX_THREADS + 3, 2, 0);
    for (int team = 2; team <= 4; team++) {
        int64_t got = steal_run(1000, team, team, 1);
        if (got == 0) fail_msg("team %d: no block of the held thread's range was stolen", team);
    }
    /* a thread without a slot of its own (more threads than slots) still takes work */
    if (steal_run(1000, 1, 2, 1) == 0) fail_msg("one slot, two threads: the slotless thread stole nothing");
}

/* The kernel paths nest (a CPU running AVX-512 runs AVX2; every CPU runs the portable path), a
 * path this CPU lacks says what is missing, and the active path is SPECDEC_ISA's when set (the
 * tests run under each), else the best this CPU runs. */
static void test_isa(void **state) {
    (void)state;
    char why[160];
    int best = -1;
    for (int i = 0; i < SD_ISA_COUNT; i++) {
        strcpy(why, "x");
        const int has = sd_isa_cpu_has((sd_isa)i, why, sizeof why);
        if (has != (why[0] == 0)) fail_msg("%s: runs %d, but the missing features say '%s'", sd_isa_name((sd_isa)i), has, why);
        if (has && i > 0 && !sd_isa_cpu_has((sd_isa)(i - 1), NULL, 0))
            fail_msg("this CPU runs %s but not %s", sd_isa_name((sd_isa)i), sd_isa_name((sd_isa)(i - 1)));
        if (has) best = i;
        printf("  %-8s %s%s\n", sd_isa_name((sd_isa)i), has ? "runs" : "lacks ", why);
    }
    assert_true(sd_isa_cpu_has(SD_ISA_PORTABLE, NULL, 0));
    assert_int_equal(sd_isa_status(), SD_OK);
    const char *env = getenv("SPECDEC_ISA");
    if (env && env[0]) assert_string_equal(sd_isa_name(sd_isa_active()), env);
    else assert_int_equal(sd_isa_active(), best);
    char small[8];
    sd_isa_describe(small, sizeof small); /* never overruns */
    assert_int_equal(strlen(small), sizeof small - 1);
    sd_isa_describe(why, sizeof why);
    printf("  running: %s\n", why);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa),
        cmocka_unit_test(test_steal),
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_f32_packed),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_group),
        cmocka_unit_test(test_first_nonfinite),
        cmocka_unit_test(test_matmul_unsupported_type),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_f16),
        cmocka_unit_test(test_rmsnorm_rope_swiglu),
        cmocka_unit_test(test_nonfinite_propagates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
