/* Quantised types: fast against reference dequantisation, quantise->dequantise error bounds,
 * integer matmul kernels against references (and batched == single-token bit for bit), known
 * bytes of ggml's reference quantisers, and the llama.cpp-quantised stories260K fixtures
 * (greedy text equal to llama.cpp's, our quantisation equal to theirs block for block). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/quant.h"
#include "specdec/spec.h"

/* Q8_0: a value is off by at most half a step d = amax/127, plus 127 steps times the fp16
 * rounding of d (2^-11 relative): 0.5 + 127/2048 < 0.57 steps. */
#define TOL_Q8_0_STEPS 0.57
/* Q4_0 / Q5_0: the largest magnitude maps exactly to the most negative level, so its opposite
 * (+8 or +16 steps) is clamped one step short: at most one step d = amax/8 (amax/16), plus
 * the fp16 rounding of d over 8 (16) steps. */
#define TOL_Q4_0_FRAC (1.0 / 8 * (1 + 8.0 / 2048))
#define TOL_Q5_0_FRAC (1.0 / 16 * (1 + 16.0 / 2048))
/* K-quants have no simple per-element bound (6/8-bit scales of fitted sub-block scales), so
 * they are held to their relative RMS error on uniform data: measured 0.054 (Q4_K: 4 bits and
 * a min per 32) and 0.0133 (Q6_K: 6 bits per 16), allowed ~30% more. */
#define TOL_Q4_K_RMS 0.07
#define TOL_Q6_K_RMS 0.018
/* F16 and BF16 round to nearest: half an ulp, 2^-11 and 2^-8 relative. */
#define TOL_F16_REL (1.0 / 2048)
#define TOL_BF16_REL (1.0 / 256)
/* Integer kernel against the scalar integer reference (same quantised activations, exact
 * integer block sums): only float rounding of the per-block products and their sum differs,
 * relative to sum |w x|. */
#define TOL_INT_DOT_REL 2e-6
/* Activation quantisation error: 8-bit activations with an fp16 block scale (Q8_0 style, as
 * llama.cpp) are off by at most TOL_Q8_0_STEPS steps of amax/127 per element; Q8_K style
 * (float scale per 256) by half a step. The kernel result may differ from the float-
 * activation reference by sum |w_c| * that, plus float rounding. */
#define TOL_ACT_A_STEPS 0.57
#define TOL_ACT_K_STEPS 0.5

static const sd_type k_types[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K,
                                  SD_TYPE_BF16};
static const sd_type k_dot_types[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float frand(void) { return (float)((rnd64() >> 40) * (1.0 / 8388608.0)) - 1.0f; } /* [-1, 1) */

static const char *tname(sd_type t) { return sd_type_info(t)->name; }

/* ------------------------------------------------------------------ dequantisation */

/* Byte offsets of the fp16 scale fields of one block. */
static int scale_offsets(sd_type t, int off[2]) {
    switch (t) {
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0: off[0] = 0; return 1;
    case SD_TYPE_Q4_K: off[0] = 0, off[1] = 2; return 2;
    case SD_TYPE_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

static uint16_t random_finite_half(void) {
    for (;;) {
        uint16_t h = (uint16_t)rnd64();
        if (((h >> 10) & 0x1f) != 0x1f) return h;
    }
}

/* Blocks of one type in five kinds: random bytes with random finite scales; extreme scales
 * (+-65504, +-smallest subnormal, zero); zero blocks; every quant bit set; every quant bit
 * clear (the most negative level of offset types). */
static uint8_t *make_blocks(sd_type t, int nblocks, int kind) {
    const size_t bs = (size_t)sd_type_info(t)->type_size;
    uint8_t *b = malloc(bs * (size_t)nblocks);
    static const uint16_t extremes[] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x3c00, 0x0400};
    for (int i = 0; i < nblocks; i++) {
        uint8_t *p = b + bs * (size_t)i;
        for (size_t k = 0; k < bs; k++) p[k] = kind == 2 ? 0 : kind == 3 ? 0xff : kind == 4 ? 0 : (uint8_t)rnd64();
        if (t == SD_TYPE_BF16) { /* one element per "block": keep it finite */
            uint16_t h = (uint16_t)rnd64();
            if (((h >> 7) & 0xff) == 0xff) h &= 0xbfff;
            if (kind == 2) h = 0;
            memcpy(p, &h, 2);
            continue;
        }
        int off[2];
        int ns = scale_offsets(t, off);
        for (int s = 0; s < ns; s++) {
            uint16_t h = kind == 0   ? random_finite_half()
                         : kind == 1 ? extremes[(i + s) % (int)(sizeof extremes / sizeof extremes[0])]
                         : kind == 2 ? 0
                                     : 0x3c00;
            memcpy(p + off[s], &h, 2);
        }
    }
    return b;
}

static void test_dequant_fast_equals_ref(void **state) {
    (void)state;
    for (size_t ti = 0; ti < sizeof k_types / sizeof *k_types; ti++) {
        const sd_type t = k_types[ti];
        const int bsz = sd_type_info(t)->block_size;
        const int nblocks = t == SD_TYPE_BF16 ? 16 * 37 : 23; /* BF16: a tail after 16s */
        const int64_t n = (int64_t)nblocks * bsz;
        float *fast = malloc((size_t)n * sizeof(float)), *ref = malloc((size_t)n * sizeof(float));
        float *via = malloc((size_t)n * sizeof(float));
        for (int kind = 0; kind < 5; kind++) {
            uint8_t *b = make_blocks(t, nblocks, kind);
            assert_int_equal(sd_quant_dequant_row(t, b, fast, n), 0);
            assert_int_equal(sd_quant_dequant_row_ref(t, b, ref, n), 0);
            if (memcmp(fast, ref, (size_t)n * sizeof(float)) != 0) {
                for (int64_t i = 0; i < n; i++)
                    if (memcmp(&fast[i], &ref[i], sizeof(float)))
                        fail_msg("%s kind %d element %lld: fast %a, reference %a", tname(t), kind, (long long)i,
                                 (double)fast[i], (double)ref[i]);
            }
            for (int64_t i = 0; i < n; i++)
                if (!isfinite(ref[i])) fail_msg("%s kind %d element %lld: %g from finite scales", tname(t), kind, (long long)i, (double)ref[i]);
            /* the kernels' entry point (embedding lookup, GEMM tiles) agrees */
            sd_tensor W = {t, 1, n, sd_type_row_bytes(t, n), b, NULL};
            assert_int_equal(sd_dequant_row(&W, 0, via), 0);
            assert_memory_equal(via, ref, (size_t)n * sizeof(float));
            if (kind == 2)
                for (int64_t i = 0; i < n; i++) assert_true(ref[i] == 0.0f);
            free(b);
        }
        /* A row length that is not a whole number of blocks is refused. */
        if (bsz > 1) assert_int_equal(sd_quant_dequant_row(t, fast, fast, bsz + 1), -1);
        free(fast);
        free(ref);
        free(via);
    }
    float x[32];
    assert_int_equal(sd_quant_dequant_row(SD_TYPE_Q2_K, x, x, 256), -1);
}

/* ------------------------------------------------------------------ quantise -> dequantise */

static void fill_row(float *x, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = frand(); break;                                  /* uniform */
        case 1: x[i] = frand() * frand() * frand() * 3.0f; break;        /* peaked, heavy tails */
        case 2: x[i] = 0.0f; break;                                     /* zero */
        case 3: x[i] = 0.25f; break;                                    /* constant */
        case 4: x[i] = (i % 97 == 5) ? 40.0f : frand() * 0.01f; break;  /* outliers */
        default: x[i] = frand() + 0.75f; break;                         /* all positive */
        }
    }
}

static void check_roundtrip(sd_type t, const float *x, int64_t n, int kind) {
    uint8_t *q = malloc(sd_type_row_bytes(t, n));
    float *y = malloc((size_t)n * sizeof(float));
    assert_int_equal(sd_quantize_row(t, x, q, n), SD_OK);
    if (t == SD_TYPE_F16) {
        sd_tensor W = {t, 1, n, sd_type_row_bytes(t, n), q, NULL};
        assert_int_equal(sd_dequant_row(&W, 0, y), 0);
    } else {
        assert_int_equal(sd_quant_dequant_row_ref(t, q, y, n), 0);
    }
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) fail_msg("%s kind %d: element %lld is %g", tname(t), kind, (long long)i, (double)y[i]);
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    const int bsz = sd_type_info(t)->block_size;
    for (int64_t b = 0; b < n / bsz && bsz == 32; b++) {
        double amax = 0;
        for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(x[32 * b + j]));
        double tol = t == SD_TYPE_Q8_0 ? TOL_Q8_0_STEPS * amax / 127
                     : t == SD_TYPE_Q4_0 ? TOL_Q4_0_FRAC * amax
                                         : TOL_Q5_0_FRAC * amax;
        for (int j = 0; j < 32; j++) {
            double e = fabs((double)y[32 * b + j] - x[32 * b + j]);
            if (e > tol * (1 + 1e-6) + 1e-30)
                fail_msg("%s kind %d block %lld element %d: |%g - %g| = %g > %g", tname(t), kind, (long long)b, j,
                         (double)y[32 * b + j], (double)x[32 * b + j], e, tol);
        }
    }
    if (t == SD_TYPE_F16 || t == SD_TYPE_BF16) {
        double rel = t == SD_TYPE_F16 ? TOL_F16_REL : TOL_BF16_REL;
        for (int64_t i = 0; i < n; i++)
            if (fabs((double)y[i] - x[i]) > rel * fabs(x[i]) + 1e-7)
                fail_msg("%s element %lld: %g vs %g", tname(t), (long long)i, (double)y[i], (double)x[i]);
    }
    if ((t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K) && kind == 0) {
        double rms = sqrt(se / sx);
        printf("  %s uniform: relative rms error %.4f\n", tname(t), rms);
        assert_true(rms <= (t == SD_TYPE_Q4_K ? TOL_Q4_K_RMS : TOL_Q6_K_RMS));
    }
    if (kind == 2 || kind == 3) { /* zero and constant rows come back (nearly) exactly */
        for (int64_t i = 0; i < n; i++)
            if (fabs((double)y[i] - x[i]) > 0.25 * 0.01) fail_msg("%s kind %d: %g vs %g", tname(t), kind, (double)y[i], (double)x[i]);
    }
    free(q);
    free(y);
}

static void test_quantize_roundtrip_bounds(void **state) {
    (void)state;
    static const sd_type ts[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K,
                                 SD_TYPE_Q6_K, SD_TYPE_F16,  SD_TYPE_BF16};
    const int64_t n = 256 * 12;
    float *x = malloc((size_t)n * sizeof(float));
    for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++)
        for (int kind = 0; kind < 6; kind++) {
            fill_row(x, n, kind);
            check_roundtrip(ts[ti], x, n, kind);
        }
    free(x);
    /* Bad lengths and types are refused. */
    float y[64];
    uint8_t q[256];
    assert_int_equal(sd_quantize_row(SD_TYPE_Q8_0, y, q, 33), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_quantize_row(SD_TYPE_Q2_K, y, q, 256), SD_ERR_UNSUPPORTED);
    assert_int_equal(sd_quant_fallback(SD_TYPE_Q4_K, 64), SD_TYPE_Q5_0);
    assert_int_equal(sd_quant_fallback(SD_TYPE_Q6_K, 96), SD_TYPE_Q8_0);
    assert_int_equal(sd_quant_fallback(SD_TYPE_Q4_0, 172), SD_TYPE_F16);
    assert_int_equal(sd_quant_fallback(SD_TYPE_Q4_K, 512), SD_TYPE_Q4_K);
    assert_int_equal(sd_type_from_name("q4_K"), SD_TYPE_Q4_K);
    assert_int_equal(sd_type_from_name("Q8_0"), SD_TYPE_Q8_0);
    assert_int_equal(sd_type_from_name("q4"), -1);
}

/* ------------------------------------------------------------------ known bytes */

/* Produced by tests/tools/ggml_q_ref.py, an independent Python implementation of ggml's
 * quantize_row_q8_0_ref / quantize_row_q4_0_ref with float32 arithmetic emulated. Block 0
 * has scale 1 and halves (roundf: ties away from zero), block 1 an awkward scale with the
 * largest magnitude negative, block 2 the largest positive and Q4_0 truncation ties. */
static const float k_ref_in[3][32] = {
    {0x1.fc00000000000p+6f, 0x1.4000000000000p+1f, -0x1.4000000000000p+1f, 0x1.0000000000000p-1f, -0x1.0000000000000p-1f, 0x1.8000000000000p+0f, -0x1.8000000000000p+0f, 0x1.9100000000000p+6f, -0x1.0000000000000p+6f, 0x1.e000000000000p+1f, -0x1.0000000000000p-2f, 0x0.0p+0f, 0x1.fc00000000000p+5f, -0x1.fc00000000000p+5f, 0x1.fa00000000000p+6f, -0x1.fa00000000000p+6f, -0x1.d000000000000p+6f, -0x1.b300000000000p+6f, -0x1.9600000000000p+6f, -0x1.7900000000000p+6f, -0x1.5c00000000000p+6f, -0x1.3f00000000000p+6f, -0x1.2200000000000p+6f, -0x1.0500000000000p+6f, -0x1.d000000000000p+5f, -0x1.9600000000000p+5f, -0x1.5c00000000000p+5f, -0x1.2200000000000p+5f, -0x1.d000000000000p+4f, -0x1.5c00000000000p+4f, -0x1.d000000000000p+3f, -0x1.d000000000000p+2f},
    {0x0.0p+0f, 0x1.81c32c0000000p-3f, 0x1.0ef79a0000000p-2f, 0x1.5ae7d00000000p-3f, -0x1.3784ce0000000p-4f, -0x1.84e79e0000000p-2f, -0x1.3eb6180000000p-1f, -0x1.6d50da0000000p-1f, -0x1.44631c0000000p-1f, -0x1.e666660000000p+0f, -0x1.0714b80000000p-2f, -0x1.799b0c0000000p-3f, -0x1.229c0c0000000p-2f, -0x1.10599a0000000p-1f, -0x1.abd3680000000p-1f, -0x1.1353240000000p+0f, -0x1.298c380000000p+0f, -0x1.1426620000000p+0f, -0x1.c66e320000000p-1f, -0x1.678e840000000p-1f, -0x1.4456e00000000p-1f, -0x1.7961b80000000p-1f, -0x1.f9c6fa0000000p-1f, -0x1.4a96fe0000000p+0f, -0x1.8745360000000p+0f, -0x1.9c694a0000000p+0f, -0x1.8616fa0000000p+0f, -0x1.54d2f00000000p+0f, -0x1.25cdee0000000p+0f, -0x1.152a480000000p+0f, -0x1.30c0820000000p+0f, -0x1.719c420000000p+0f},
    {-0x1.0000000000000p-1f, -0x1.8000000000000p-2f, -0x1.0000000000000p-2f, -0x1.0000000000000p-3f, 0x0.0p+0f, 0x1.0000000000000p-3f, 0x1.0000000000000p-2f, 0x1.8000000000000p-2f, 0x1.0000000000000p-1f, -0x1.0000000000000p-1f, -0x1.8000000000000p-2f, -0x1.0000000000000p-2f, -0x1.0000000000000p-3f, 0x0.0p+0f, 0x1.0000000000000p-3f, 0x1.0000000000000p-2f, 0x1.8000000000000p-2f, 0x1.0000000000000p-1f, -0x1.0000000000000p-1f, -0x1.8000000000000p-2f, 0x1.0000000000000p+0f, -0x1.0000000000000p-3f, 0x0.0p+0f, 0x1.0000000000000p-3f, 0x1.0000000000000p-2f, 0x1.8000000000000p-2f, 0x1.0000000000000p-1f, -0x1.0000000000000p-1f, -0x1.8000000000000p-2f, -0x1.0000000000000p-2f, -0x1.0000000000000p-3f, 0x0.0p+0f},
};
static const uint8_t k_ref_q8_0[102] = {
    0x00, 0x3c, 0x7f, 0x03, 0xfd, 0x01, 0xff, 0x02, 0xfe, 0x64, 0xc0, 0x04,
    0x00, 0x00, 0x40, 0xc0, 0x7f, 0x81, 0x8c, 0x93, 0x9a, 0xa2, 0xa9, 0xb0,
    0xb7, 0xbf, 0xc6, 0xcd, 0xd4, 0xdc, 0xe3, 0xea, 0xf1, 0xf9, 0xa9, 0x23,
    0x00, 0x0d, 0x12, 0x0b, 0xfb, 0xe7, 0xd6, 0xd0, 0xd6, 0x81, 0xef, 0xf4,
    0xed, 0xdc, 0xc8, 0xb8, 0xb2, 0xb8, 0xc5, 0xd1, 0xd6, 0xcf, 0xbe, 0xaa,
    0x9a, 0x94, 0x9a, 0xa7, 0xb3, 0xb8, 0xb0, 0x9f, 0x08, 0x20, 0xc0, 0xd0,
    0xe0, 0xf0, 0x00, 0x10, 0x20, 0x30, 0x40, 0xc0, 0xd0, 0xe0, 0xf0, 0x00,
    0x10, 0x20, 0x30, 0x40, 0xc0, 0xd0, 0x7f, 0xf0, 0x00, 0x10, 0x20, 0x30,
    0x40, 0xc0, 0xd0, 0xe0, 0xf0, 0x00,
};
static const uint8_t k_ref_q4_0[54] = {
    0xf0, 0xcb, 0xf0, 0xf8, 0xe8, 0xe8, 0xd8, 0xd8, 0xd8, 0xc2, 0xcc, 0xb8,
    0xb8, 0xa8, 0xa4, 0x9c, 0x90, 0x8f, 0x9a, 0x33, 0x38, 0x39, 0x49, 0x59,
    0x58, 0x56, 0x45, 0x35, 0x25, 0x10, 0x27, 0x27, 0x37, 0x36, 0x34, 0x23,
    0x00, 0xb0, 0x5c, 0x4b, 0xca, 0xb9, 0x08, 0x97, 0x86, 0x75, 0x64, 0x5c,
    0x4b, 0xca, 0xb9, 0xa8, 0x97, 0x86,
};

/* Produced by tests/tools/ggml_k_ref.py, an independent Python implementation of ggml's
 * quantize_row_q4_K_ref (make_qkx2_quants) and quantize_row_q6_K_ref (make_qx_quants) with
 * float32 arithmetic emulated operation by operation: one super-block with sub-blocks of
 * different magnitudes, an outlier and an all-zero group of 16. */
static const float k_kref_in[256] = {
    0x1.eb851e0000000p-6f, 0x1.491b0a0000000p-4f, 0x1.bf15080000000p-4f, 0x1.4246e20000000p-3f,
    0x1.b4b2ce0000000p-3f, 0x1.c5bd680000000p-3f, 0x1.4996960000000p-3f, 0x1.38d7520000000p-4f,
    0x1.3c0afa0000000p-6f, -0x1.276bac0000000p-6f, -0x1.4288e20000000p-4f, -0x1.51e9d60000000p-3f,
    -0x1.c794a80000000p-3f, -0x1.ae5e6a0000000p-3f, -0x1.3cb35a0000000p-3f, -0x1.c273980000000p-4f,
    -0x1.508fee0000000p-4f, -0x1.d247de0000000p-6f, 0x1.199ece0000000p-4f, 0x1.4e05060000000p-3f,
    0x1.97db8a0000000p-3f, 0x1.75a4f60000000p-3f, 0x1.4ebfd60000000p-3f, 0x1.47f29a0000000p-3f,
    0x1.1047900000000p-3f, 0x1.8fd9ae0000000p-5f, -0x1.f061100000000p-5f, -0x1.1000920000000p-3f,
    -0x1.39214c0000000p-3f, -0x1.4dccdc0000000p-3f, -0x1.86fc780000000p-3f, -0x1.a109840000000p-3f,
    -0x1.04512c0000000p-2f, -0x1.ba7ad00000000p-4f, 0x1.17093e0000000p-5f, 0x1.0f8cf00000000p-3f,
    0x1.b040ea0000000p-3f, 0x1.31f3240000000p-2f, 0x1.793f960000000p-2f, 0x1.7302180000000p-2f,
    0x1.1580a20000000p-2f, 0x1.32310c0000000p-3f, 0x1.84a6d40000000p-5f, -0x1.7b80d80000000p-5f,
    -0x1.532cbc0000000p-3f, -0x1.2d44ca0000000p-2f, -0x1.7900de0000000p-2f, -0x1.691c700000000p-2f,
    -0x1.21cb360000000p-2f, -0x1.b0b3d60000000p-3f, -0x1.180c1a0000000p-3f, -0x1.5c51840000000p-6f,
    0x1.143cc80000000p-3f, 0x1.15098a0000000p-2f, 0x1.528dc60000000p-2f, 0x1.4f2ce00000000p-2f,
    0x1.3c226a0000000p-2f, 0x1.21452c0000000p-2f, 0x1.a8842c0000000p-3f, 0x1.06af120000000p-4f,
    -0x1.92a4f40000000p-4f, -0x1.b4a92a0000000p-3f, -0x1.14d8f20000000p-2f, -0x1.3d189c0000000p-2f,
    -0x1.fad5500000000p-2f, -0x1.e15a840000000p-2f, -0x1.5ffd800000000p-2f, -0x1.3043b00000000p-3f,
    0x1.4e77ec0000000p-5f, 0x1.821c060000000p-3f, 0x1.44dd880000000p-2f, 0x1.c552ee0000000p-2f,
    0x1.0bbb5e0000000p-1f, 0x1.0047800000000p-1f, 0x1.83d17e0000000p-2f, 0x1.c3965c0000000p-3f,
    0x1.27399c0000000p-4f, 0x1.4000000000000p+1f, -0x1.072dbc0000000p-2f, -0x1.b373600000000p-2f,
    -0x1.06e4160000000p-1f, -0x1.fa46360000000p-2f, -0x1.a48eb00000000p-2f, -0x1.3dd5820000000p-2f,
    -0x1.7e44ec0000000p-3f, -0x1.1ad9e00000000p-7f, 0x1.a332220000000p-3f, 0x1.84a2ae0000000p-2f,
    0x1.da39e20000000p-2f, 0x1.e4cf920000000p-2f, 0x1.d0d6080000000p-2f, 0x1.9b86700000000p-2f,
    0x1.1b485a0000000p-2f, 0x1.3353ea0000000p-4f, -0x1.1c39c20000000p-3f, -0x1.2f13b80000000p-2f,
    -0x1.071f140000000p-1f, -0x1.3579120000000p-1f, -0x1.4c72f80000000p-1f, -0x1.3310b20000000p-1f,
    -0x1.b79f460000000p-2f, -0x1.7d387c0000000p-3f, 0x1.9cd7c60000000p-5f, 0x1.fccaa80000000p-3f,
    0x1.b5fe620000000p-2f, 0x1.2d73c60000000p-1f, 0x1.5a58ca0000000p-1f, 0x1.45cd260000000p-1f,
    0x1.effa900000000p-2f, 0x1.2842cc0000000p-2f, 0x1.7c71560000000p-4f, -0x1.e50b720000000p-4f,
    -0x1.6924820000000p-2f, -0x1.1d93c00000000p-1f, -0x1.510e380000000p-1f, -0x1.4573ae0000000p-1f,
    -0x1.13553e0000000p-1f, -0x1.a0beb20000000p-2f, -0x1.da697c0000000p-3f, 0x1.306ee60000000p-7f,
    0x1.1c7f6a0000000p-2f, 0x1.f5b5f80000000p-2f, 0x1.31948a0000000p-1f, 0x1.3deaae0000000p-1f,
    0x1.329a7e0000000p-1f, 0x1.0930aa0000000p-1f, 0x1.5d34c00000000p-2f, 0x1.4f0d880000000p-4f,
    -0x1.bc5d340000000p-3f, -0x1.ddef7a0000000p-2f, -0x1.47044a0000000p-1f, -0x1.831d1e0000000p-1f,
    -0x1.9b06a60000000p-1f, -0x1.73abf00000000p-1f, -0x1.05b7f80000000p-1f, -0x1.c47cb80000000p-3f,
    0x1.01b6f40000000p-4f, 0x1.40111e0000000p-2f, 0x1.15b99a0000000p-1f, 0x1.79278e0000000p-1f,
    0x1.a8586c0000000p-1f, 0x1.8a23700000000p-1f, 0x1.2d19200000000p-1f, 0x1.6c63500000000p-2f,
    0x1.c0acfa0000000p-4f, -0x1.4caa6c0000000p-3f, -0x1.cf2b3e0000000p-2f, -0x1.6208d20000000p-1f,
    -0x1.9b05300000000p-1f, -0x1.8d9ce20000000p-1f, -0x1.540a060000000p-1f, -0x1.005e520000000p-1f,
    -0x1.1605900000000p-2f, 0x1.08bb7a0000000p-5f, 0x1.6a7d7c0000000p-2f, 0x1.341e5a0000000p-1f,
    0x1.76cb6e0000000p-1f, 0x1.8a24fa0000000p-1f, 0x1.7c767c0000000p-1f, 0x1.42c1480000000p-1f,
    0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f,
    0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f,
    0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f,
    0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f, 0x0.0p+0f,
    0x1.6152ac0000000p-1f, 0x1.ae00680000000p-2f, 0x1.f2a48a0000000p-4f, -0x1.b1c3980000000p-3f,
    -0x1.1c75000000000p-1f, -0x1.a6f7680000000p-1f, -0x1.e4d6ca0000000p-1f, -0x1.d5b9500000000p-1f,
    -0x1.9457c00000000p-1f, -0x1.2eb91a0000000p-1f, -0x1.396d000000000p-2f, 0x1.ed2dd00000000p-5f,
    0x1.bb47420000000p-2f, 0x1.6e207c0000000p-1f, 0x1.bcdfb60000000p-1f, 0x1.d7143c0000000p-1f,
    0x1.06ecca0000000p+0f, 0x1.b3d83e0000000p-1f, 0x1.0c43820000000p-1f, 0x1.99f6480000000p-4f,
    -0x1.424b2c0000000p-2f, -0x1.4c69dc0000000p-1f, -0x1.cbeb160000000p-1f, -0x1.1092e40000000p+0f,
    -0x1.1b066c0000000p+0f, -0x1.ef6d660000000p-1f, -0x1.5450da0000000p-1f, -0x1.21759a0000000p-2f,
    0x1.902ca20000000p-4f, 0x1.d153120000000p-2f, 0x1.9160f60000000p-1f, 0x1.0941280000000p+0f,
    0x1.21140c0000000p+0f, 0x1.07d1620000000p+0f, 0x1.94ba0e0000000p-1f, 0x1.ecdf260000000p-2f,
    0x1.0892580000000p-3f, -0x1.10d9860000000p-2f, -0x1.5301f80000000p-1f, -0x1.ec45720000000p-1f,
    -0x1.174b900000000p+0f, -0x1.0eefbc0000000p+0f, -0x1.d4280c0000000p-1f, -0x1.5b40d60000000p-1f,
    -0x1.57542e0000000p-2f, 0x1.7b933c0000000p-4f, 0x1.074dde0000000p-1f, 0x1.a8ee400000000p-1f,
    0x1.25bc440000000p+0f, 0x1.38bd020000000p+0f, 0x1.2b116e0000000p+0f, 0x1.e8980a0000000p-1f,
    0x1.24f25a0000000p-1f, 0x1.81ae780000000p-4f, -0x1.7840680000000p-2f, -0x1.7d930c0000000p-1f,
    -0x1.087da60000000p+0f, -0x1.389bbe0000000p+0f, -0x1.4113d60000000p+0f, -0x1.154d800000000p+0f,
    -0x1.7944500000000p-1f, -0x1.3d20900000000p-2f, 0x1.ed7e9a0000000p-4f, 0x1.10a1960000000p-1f,
    0x1.d213ee0000000p-1f, 0x1.2fe3d40000000p+0f, 0x1.46f1540000000p+0f, 0x1.2882640000000p+0f,
    0x1.c758020000000p-1f, 0x1.145c260000000p-1f, 0x1.0d8e660000000p-3f, -0x1.4e1bce0000000p-2f,
    -0x1.8b0d800000000p-1f, -0x1.18f08a0000000p+0f, -0x1.3c2f900000000p+0f, -0x1.3310160000000p+0f,
    -0x1.09ae580000000p+0f, -0x1.85c84c0000000p-1f, -0x1.6fb6040000000p-2f, 0x1.0908b60000000p-3f,
};
static const uint8_t k_ref_q4_k[144] = {
    0x73, 0x1a, 0xfb, 0x24, 0x89, 0x8f, 0xbf, 0xdd, 0x8b, 0xd2, 0xda, 0xe2,
    0x93, 0x06, 0x8f, 0xf4, 0x29, 0x5a, 0x8b, 0xad, 0xcf, 0xef, 0xfd, 0xfa,
    0xd8, 0xb7, 0x85, 0x62, 0x40, 0x10, 0x02, 0x04, 0x15, 0x37, 0x5a, 0x7d,
    0xaf, 0xde, 0xed, 0xed, 0xec, 0xd9, 0xc5, 0x93, 0x52, 0x32, 0x21, 0x10,
    0x20, 0x10, 0x01, 0x12, 0x33, 0x53, 0x84, 0xa5, 0xc5, 0xe5, 0xf4, 0xe4,
    0xd3, 0xaf, 0x81, 0x60, 0x30, 0x10, 0x00, 0x01, 0x12, 0x33, 0x54, 0x74,
    0xa5, 0xd5, 0xe5, 0xe5, 0xe4, 0xd3, 0xb2, 0x81, 0x85, 0x83, 0x81, 0x80,
    0x80, 0x81, 0x83, 0x85, 0x88, 0x8a, 0x8c, 0x8e, 0x8f, 0x8e, 0x8d, 0x8a,
    0xe8, 0xb6, 0x93, 0x61, 0x30, 0x10, 0x01, 0x03, 0x15, 0x38, 0x5a, 0x8d,
    0xbe, 0xee, 0xfe, 0xfd, 0xee, 0xfd, 0xfb, 0xd8, 0xb5, 0x83, 0x51, 0x30,
    0x10, 0x01, 0x03, 0x15, 0x38, 0x6a, 0x8d, 0xbe, 0xdf, 0xfe, 0xfd, 0xfb,
    0xd8, 0xb6, 0x83, 0x51, 0x30, 0x10, 0x01, 0x03, 0x15, 0x38, 0x5b, 0x8d,
};
static const uint8_t k_ref_q6_k[210] = {
    0x64, 0x6b, 0x4f, 0x25, 0xfd, 0xee, 0xc6, 0xaa, 0x93, 0xae, 0xb5, 0xd9,
    0xf2, 0x03, 0x3b, 0x51, 0x13, 0x2b, 0x7b, 0xdb, 0x5f, 0xfe, 0xcb, 0x7a,
    0xc6, 0xd8, 0xc6, 0x8a, 0x17, 0x55, 0x81, 0xe0, 0x86, 0xc9, 0xed, 0xc5,
    0x4e, 0x96, 0xe0, 0x41, 0xc9, 0x43, 0x0c, 0x24, 0x9e, 0x29, 0xcf, 0x6e,
    0xfb, 0x54, 0x0d, 0x12, 0x63, 0xc6, 0x50, 0x00, 0xd2, 0x85, 0xdc, 0xea,
    0xd9, 0x95, 0x0a, 0x4e, 0xe8, 0x92, 0xf9, 0x3d, 0x7f, 0xdc, 0x64, 0x19,
    0x0e, 0x44, 0xdb, 0x83, 0x30, 0xd2, 0x79, 0xe2, 0x14, 0x4a, 0xae, 0x34,
    0xc0, 0x71, 0x25, 0xac, 0xe5, 0xd1, 0x9e, 0x38, 0x9d, 0xdf, 0x2e, 0x99,
    0xd0, 0xf0, 0xe0, 0x80, 0xf0, 0x20, 0x70, 0xd0, 0x60, 0x10, 0x00, 0x40,
    0xd0, 0x80, 0x30, 0xe0, 0x97, 0x2e, 0x04, 0x39, 0xad, 0x24, 0xd0, 0x81,
    0x36, 0xcc, 0xf6, 0xe2, 0xae, 0x38, 0x9d, 0xdf, 0xee, 0xea, 0xe6, 0xe7,
    0xd3, 0x93, 0x53, 0x52, 0x12, 0x15, 0x15, 0x18, 0x18, 0x4c, 0x6c, 0xad,
    0x0d, 0x0d, 0x0a, 0x0b, 0x17, 0x13, 0x63, 0xb3, 0xb3, 0xf2, 0xf1, 0xf4,
    0xf8, 0xec, 0xdc, 0x8c, 0xf2, 0xf3, 0xe3, 0xe3, 0x93, 0x83, 0x43, 0x02,
    0x01, 0x01, 0x00, 0x10, 0x20, 0x60, 0xb0, 0xb1, 0x0e, 0x09, 0x08, 0x14,
    0x10, 0x60, 0x70, 0xb0, 0xf1, 0xf2, 0xf6, 0xfb, 0xeb, 0xdf, 0x9f, 0x4f,
    0x0c, 0x0a, 0xed, 0xef, 0x80, 0x1b, 0xdd, 0x22, 0xd6, 0x29, 0x00, 0x31,
    0x38, 0xc4, 0x40, 0xbf, 0x00, 0x11,
};

static void test_known_bytes(void **state) {
    (void)state;
    uint8_t q8[sizeof k_ref_q8_0], q4[sizeof k_ref_q4_0];
    assert_int_equal(sd_quantize_row(SD_TYPE_Q8_0, &k_ref_in[0][0], q8, 96), SD_OK);
    assert_int_equal(sd_quantize_row(SD_TYPE_Q4_0, &k_ref_in[0][0], q4, 96), SD_OK);
    for (size_t i = 0; i < sizeof q8; i++)
        if (q8[i] != k_ref_q8_0[i]) fail_msg("q8_0 byte %zu: 0x%02x, expected 0x%02x", i, q8[i], k_ref_q8_0[i]);
    for (size_t i = 0; i < sizeof q4; i++)
        if (q4[i] != k_ref_q4_0[i]) fail_msg("q4_0 byte %zu: 0x%02x, expected 0x%02x", i, q4[i], k_ref_q4_0[i]);
    uint8_t k4[sizeof k_ref_q4_k], k6[sizeof k_ref_q6_k];
    assert_int_equal(sd_quantize_row(SD_TYPE_Q4_K, k_kref_in, k4, 256), SD_OK);
    assert_int_equal(sd_quantize_row(SD_TYPE_Q6_K, k_kref_in, k6, 256), SD_OK);
    for (size_t i = 0; i < sizeof k4; i++)
        if (k4[i] != k_ref_q4_k[i]) fail_msg("q4_K byte %zu: 0x%02x, expected 0x%02x", i, k4[i], k_ref_q4_k[i]);
    for (size_t i = 0; i < sizeof k6; i++)
        if (k6[i] != k_ref_q6_k[i]) fail_msg("q6_K byte %zu: 0x%02x, expected 0x%02x", i, k6[i], k_ref_q6_k[i]);
}

/* ------------------------------------------------------------------ integer matmul */

/* rows x cols random weights quantised to t, X random; checks sd_matmul for n tokens. */
static void check_qmatmul(sd_type t, int rows, int cols, int n) {
    const size_t rb = sd_type_row_bytes(t, cols);
    assert_true(rb > 0);
    float *wf = malloc((size_t)rows * cols * sizeof(float));
    uint8_t *w = malloc(rb * (size_t)rows);
    float *X = malloc((size_t)n * cols * sizeof(float));
    float *Y = malloc((size_t)n * rows * sizeof(float)), *Yr = malloc((size_t)n * rows * sizeof(float));
    float *deq = malloc((size_t)cols * sizeof(float));
    float *scratch = malloc(sd_matmul_scratch_floats(cols) * sizeof(float));
    for (int i = 0; i < rows * cols; i++) wf[i] = frand();
    for (int r = 0; r < rows; r++)
        assert_int_equal(sd_quantize_row(t, wf + (size_t)r * cols, w + rb * (size_t)r, cols), SD_OK);
    for (int i = 0; i < n * cols; i++) X[i] = frand() * (i % 7 == 0 ? 4.0f : 1.0f);
    sd_tensor W = {t, rows, cols, rb, w, NULL};
    assert_int_equal(sd_matmul(&W, X, n, Y, scratch), 0);
    assert_int_equal(sd_matmul_ref(&W, X, n, Yr), 0);
    const int fam_k = t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K;
    const int blk = fam_k ? 256 : 32;
    assert_true(sd_quant_has_dot(t)); /* every path has integer kernels for these types */
    for (int r = 0; r < rows; r++) {
        sd_dequant_row(&W, r, deq);
        for (int j = 0; j < n; j++) {
            const float *x = X + (size_t)j * cols;
            double sum_abs = 0, bound = 0;
            for (int b = 0; b < cols / blk; b++) {
                double amax = 0, wabs = 0;
                for (int c = b * blk; c < (b + 1) * blk; c++) {
                    amax = fmax(amax, fabs(x[c]));
                    wabs += fabs(deq[c]);
                    sum_abs += fabs((double)deq[c] * x[c]);
                }
                bound += wabs * amax / 127 * (fam_k ? TOL_ACT_K_STEPS : TOL_ACT_A_STEPS);
            }
            const double y = Y[(size_t)j * rows + r], yr = Yr[(size_t)j * rows + r];
            const double yi = sd_quant_dot_ref(&W, r, x);
            if (fabs(y - yi) > TOL_INT_DOT_REL * sum_abs + 1e-30)
                fail_msg("%s %dx%d n=%d row %d token %d: kernel %.9g, integer reference %.9g", tname(t), rows, cols, n,
                         r, j, y, yi);
            if (fabs(y - yr) > bound + TOL_INT_DOT_REL * sum_abs)
                fail_msg("%s %dx%d n=%d row %d token %d: %.9g vs float reference %.9g, beyond the activation bound %g",
                         tname(t), rows, cols, n, r, j, y, yr, bound);
        }
    }
    /* Every row of a batch of any size equals the single-token result bit for bit. */
    if (n > 1) {
        float *y1 = malloc((size_t)rows * sizeof(float));
        for (int j = 0; j < n; j++) {
            assert_int_equal(sd_matmul(&W, X + (size_t)j * cols, 1, y1, scratch), 0);
            if (memcmp(y1, Y + (size_t)j * rows, (size_t)rows * sizeof(float)))
                fail_msg("%s %dx%d: token %d of a batch of %d differs from its single-token result", tname(t), rows,
                         cols, j, n);
        }
        /* no scratch: the kernel allocates its own and computes the same */
        assert_int_equal(sd_matmul(&W, X, n, Yr, NULL), 0);
        assert_memory_equal(Yr, Y, (size_t)n * rows * sizeof(float));
        free(y1);
    }
    free(wf);
    free(w);
    free(X);
    free(Y);
    free(Yr);
    free(deq);
    free(scratch);
}

static void test_qmatmul_small(void **state) {
    (void)state;
    static const int ns[] = {1, 2, 3, 5, 8, 9, 17, 33, 34, 70};
    for (size_t ti = 0; ti < sizeof k_dot_types / sizeof *k_dot_types; ti++) {
        const sd_type t = k_dot_types[ti];
        const int fam_k = t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K;
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            if (fam_k) {
                check_qmatmul(t, 5, 256, ns[i]);
                check_qmatmul(t, 37, 768, ns[i]); /* 37 rows: a partial 16-row block */
            } else {
                check_qmatmul(t, 5, 32, ns[i]);   /* one block */
                check_qmatmul(t, 37, 96, ns[i]);  /* three: a partial group */
                check_qmatmul(t, 17, 256, ns[i]); /* whole groups only */
                check_qmatmul(t, 9, 352, ns[i]);  /* 11 blocks: whole groups and a rest */
            }
        }
    }
}

/* sd_matmul_group on quantised Q/K/V-style matrices (one activation quantisation, one
 * parallel region across matrices) equals one sd_matmul per matrix, bit for bit: file layout,
 * and for Q4_0/Q8_0 also all matrices packed and a mix (the kernels pack the others on the
 * fly). */
static void test_qmatmul_group(void **state) {
    (void)state;
    enum { COLS = 512 };
    static const int rows[3] = {1000, 264, 280};
    for (size_t ti = 0; ti < sizeof k_dot_types / sizeof *k_dot_types; ti++) {
        const sd_type t = k_dot_types[ti];
        const size_t rb = sd_type_row_bytes(t, COLS);
        uint8_t *w[3];
        float *y[3], *yr[3];
        sd_tensor W[3];
        float *x = malloc((size_t)9 * COLS * sizeof(float)), row[COLS];
        for (int i = 0; i < 9 * COLS; i++) x[i] = frand();
        for (int m = 0; m < 3; m++) {
            w[m] = malloc(rb * (size_t)rows[m]);
            y[m] = malloc((size_t)9 * rows[m] * sizeof(float));
            yr[m] = malloc((size_t)9 * rows[m] * sizeof(float));
            for (int r = 0; r < rows[m]; r++) {
                for (int c = 0; c < COLS; c++) row[c] = frand();
                assert_int_equal(sd_quantize_row(t, row, w[m] + rb * (size_t)r, COLS), SD_OK);
            }
            W[m] = (sd_tensor){t, rows[m], COLS, rb, w[m], NULL};
        }
        const sd_tensor *wp[3] = {&W[0], &W[1], &W[2]};
        void *pk[3] = {NULL, NULL, NULL};
        const int packs = sd_quant_can_pack(t) ? 3 : 1; /* none, all, matrices 0 and 2 */
        for (int mode = 0; mode < packs; mode++) {
            for (int m = 0; m < 3; m++) {
                if (mode && !pk[m]) {
                    pk[m] = malloc(sd_quant_packed_bytes(t, rows[m], rb));
                    sd_quant_pack_rows(t, w[m], pk[m], rows[m], rb, COLS);
                }
                W[m].packed = mode == 1 || (mode == 2 && m != 1) ? pk[m] : NULL;
            }
            for (int n = 1; n <= 9; n += 4) {
                assert_int_equal(sd_matmul_group(wp, y, 3, x, n, NULL), 0);
                for (int m = 0; m < 3; m++) {
                    assert_int_equal(sd_matmul(&W[m], x, n, yr[m], NULL), 0);
                    if (memcmp(y[m], yr[m], (size_t)n * rows[m] * sizeof(float)))
                        fail_msg("%s group (packing mode %d) n=%d: matrix %d differs from its own matmul", tname(t),
                                 mode, n, m);
                }
            }
        }
        for (int m = 0; m < 3; m++) {
            free(pk[m]);
            free(w[m]);
            free(y[m]);
            free(yr[m]);
        }
        free(x);
    }
}

/* The documented sequence of the Q4_0/Q8_0 kernels, in scalar code: per block, the activation
 * scale d = fp16(amax / 127), q = round-to-even(x * 127 / amax), the exact integer dot with the
 * weights, then acc = fma(float(dot), dw * d, acc) over the blocks in order. */
static float r16_emulate(sd_type t, const uint8_t *row, const float *x, int64_t cols) {
    const int bsz = t == SD_TYPE_Q8_0 ? 34 : 18;
    float acc = 0.0f;
    for (int64_t b = 0; b < cols / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        const float d = sd_fp16_to_fp32(sd_fp32_to_fp16(amax / 127.0f));
        const float id = d != 0 ? 127.0f / amax : 0.0f;
        const uint8_t *blk = row + (size_t)b * bsz;
        long dot = 0;
        for (int i = 0; i < 32; i++) {
            long q = lrintf(xb[i] * id);
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            const int w = t == SD_TYPE_Q8_0 ? (int8_t)blk[2 + i] : (i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4) - 8;
            dot += w * q;
        }
        uint16_t h;
        memcpy(&h, blk, 2);
        const float sc = sd_fp16_to_fp32(h) * d;
        acc = fmaf((float)dot, sc, acc);
    }
    return acc;
}

/* The documented sequence of the Q4_K kernels, in scalar code: per super-block the activations
 * as llama.cpp's Q8_K (scale from the first element of largest magnitude, q = round-to-even(x *
 * -127 / mx)), then exact integer sums over sub-blocks j of sc_j * (int dot_j) and of m_j * (sum
 * of q in j), acc = fma(float(sum), d * dx, acc), acc = fma(-float(msum), dmin * dx, acc). */
/* llama.cpp's Q8_K quantisation of 256 activations: q and the scale dx; 0 for all-zero input. */
static float q8k_emulate(const float *xs, long q[256]) {
    float amax = 0, mx = 0;
    for (int i = 0; i < 256; i++)
        if (fabsf(xs[i]) > amax) {
            amax = fabsf(xs[i]);
            mx = xs[i];
        }
    if (amax == 0) return 0;
    const float iscale = -127.0f / mx;
    for (int i = 0; i < 256; i++) {
        q[i] = lrintf(iscale * xs[i]);
        q[i] = q[i] > 127 ? 127 : q[i] < -127 ? -127 : q[i];
    }
    return 1.0f / iscale;
}

static float r16k_emulate(const uint8_t *row, const float *x, int64_t cols) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < cols / 256; sb++) {
        long q[256];
        const float dx = q8k_emulate(x + 256 * sb, q);
        if (dx == 0) continue; /* zero activations: the block adds 0 * scale terms, i.e. nothing */
        const uint8_t *b = row + (size_t)sb * 144, *sm = b + 4;
        uint16_t h;
        memcpy(&h, b, 2);
        const float d = sd_fp16_to_fp32(h);
        memcpy(&h, b + 2, 2);
        const float dmin = sd_fp16_to_fp32(h);
        long f = 0, g = 0;
        for (int j = 0; j < 8; j++) {
            const int sc = j < 4 ? sm[j] & 63 : (sm[j + 4] & 15) | ((sm[j - 4] >> 6) << 4);
            const int m = j < 4 ? sm[j + 4] & 63 : (sm[j + 4] >> 4) | ((sm[j] >> 6) << 4);
            long dot = 0, sum = 0;
            for (int i = 0; i < 32; i++) {
                const uint8_t byte = b[16 + 32 * (j / 2) + i];
                dot += (long)(j % 2 ? byte >> 4 : byte & 15) * q[32 * j + i];
                sum += q[32 * j + i];
            }
            f += dot * sc;
            g += m * sum;
        }
        acc = fmaf((float)f, d * dx, acc);
        acc = fmaf(-(float)g, dmin * dx, acc);
    }
    return acc;
}

/* The Q6_K kernels' sequence: per super-block an exact integer sum over 16-element sub-blocks j
 * of sc_j * (int dot of (v - 32) and q), then acc = fma(float(sum), d * dx, acc). */
static float r16q6_emulate(const uint8_t *row, const float *x, int64_t cols) {
    float acc = 0.0f;
    for (int64_t sb = 0; sb < cols / 256; sb++) {
        long q[256];
        const float dx = q8k_emulate(x + 256 * sb, q);
        if (dx == 0) continue;
        const uint8_t *b = row + (size_t)sb * 210;
        long f = 0;
        for (int j = 0; j < 16; j++) {
            long dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                const int half = e / 128, qt = e % 128 / 32, l = e % 32;
                const uint8_t lq = b[64 * half + l + (qt & 1) * 32], hq = b[128 + 32 * half + l];
                const int v = (qt < 2 ? lq & 15 : lq >> 4) | ((hq >> (2 * qt)) & 3) << 4;
                dot += (long)(v - 32) * q[e];
            }
            f += dot * (int8_t)b[192 + j];
        }
        uint16_t h;
        memcpy(&h, b + 208, 2);
        acc = fmaf((float)f, sd_fp16_to_fp32(h) * dx, acc);
    }
    return acc;
}

/* The Q4_0/Q8_0/Q4_K/Q6_K kernels compute exactly their emulations for every row and token
 * (partial groups of 16 rows, odd block counts, single tokens and batches, packed and packed on
 * the fly), which pins the operation order that makes batched results equal single-token ones,
 * and makes them the same bits on every path (the portable one reads the file layout). */
static void test_qmatmul_r16_exact(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 256}, {17, 512}, {40, 288}, {300, 768}, {5, 96}};
    static const sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q8_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const sd_type T = types[ti];
            const int rows = shapes[si][0], cols = shapes[si][1], n = 9;
            if ((T == SD_TYPE_Q4_K || T == SD_TYPE_Q6_K) && cols % 256) continue;
            const size_t rb = sd_type_row_bytes(T, cols);
            uint8_t *w = malloc(rb * (size_t)rows), *p = malloc(sd_quant_packed_bytes(T, rows, rb));
            float *row = malloc((size_t)cols * sizeof(float)), *x = malloc((size_t)n * cols * sizeof(float));
            float *y = malloc((size_t)n * rows * sizeof(float));
            for (int i = 0; i < n * cols; i++) x[i] = frand() * (i % 64 < 32 ? 1.0f : 30.0f);
            for (int i = 0; i < cols; i++) x[i] = 0.5f + 0.5f * fabsf(frand()); /* token 0: all positive */
            for (int r = 0; r < rows; r++) {
                /* every fourth row a token's own activations: dots of one sign, whose sums pass
                 * 2^24 (token 0's), where a float sequence would round and an int32 one does not */
                for (int c = 0; c < cols; c++)
                    row[c] = r % 4 == 1 ? x[(size_t)(r / 4 % n) * cols + c] : frand() * (r % 3 == 0 ? 1e-3f : 1.0f);
                assert_int_equal(sd_quantize_row(T, row, w + rb * (size_t)r, cols), SD_OK);
            }
            sd_quant_pack_rows(T, w, p, rows, rb, cols);
            for (int packed = 0; packed < 2; packed++)
                for (int nn = 1; nn <= n; nn += 4) {
                    sd_tensor W = {T, rows, cols, rb, w, packed ? p : NULL};
                    assert_int_equal(sd_matmul(&W, x, nn, y, NULL), 0);
                    for (int j = 0; j < nn; j++)
                        for (int r = 0; r < rows; r++) {
                            const uint8_t *wr = w + rb * (size_t)r;
                            const float *xj = x + (size_t)j * cols;
                            const float e = T == SD_TYPE_Q4_K   ? r16k_emulate(wr, xj, cols)
                                            : T == SD_TYPE_Q6_K ? r16q6_emulate(wr, xj, cols)
                                                                : r16_emulate(T, wr, xj, cols);
                            const float k = y[(size_t)j * rows + r];
                            if (memcmp(&e, &k, sizeof e))
                                fail_msg("%s %dx%d n=%d packed=%d row %d token %d: kernel %.9g, emulation %.9g",
                                         tname(T), rows, cols, nn, packed, r, j, (double)k, (double)e);
                        }
                }
            free(w);
            free(p);
            free(row);
            free(x);
            free(y);
        }
}

/* Q4_0 and Q8_0 rows packed for the kernels (sd_quant_pack_rows) give the same bits as the file
 * layout, for whole and partial groups of 16 rows, odd block counts, decode and batch sizes, serial and
 * parallel paths (a path without the 16-row kernels, the portable one, reads the file layout). */
static void test_qmatmul_packed(void **state) {
    (void)state;
    static const int shapes[][2] = {{37, 96}, {37, 256}, {37, 352}, {1203, 768}, {300, 2048}};
    static const int ns[] = {1, 2, 5, 8, 9, 17};
    static const sd_type types[] = {SD_TYPE_Q4_0, SD_TYPE_Q8_0};
    for (size_t ti = 0; ti < 2; ti++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const sd_type T = types[ti];
        const int rows = shapes[si][0], cols = shapes[si][1];
        const size_t rb = sd_type_row_bytes(T, cols);
        uint8_t *w = malloc(rb * (size_t)rows), *p = malloc(sd_quant_packed_bytes(T, rows, rb));
        float *row = malloc((size_t)cols * sizeof(float)), *x = malloc((size_t)17 * cols * sizeof(float));
        float *y = malloc((size_t)17 * rows * sizeof(float)), *yp = malloc((size_t)17 * rows * sizeof(float));
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) row[c] = frand() * (r % 5 == 0 ? 1e-3f : 1.0f);
            assert_int_equal(sd_quantize_row(T, row, w + rb * (size_t)r, cols), SD_OK);
        }
        for (int i = 0; i < 17 * cols; i++) x[i] = frand();
        sd_quant_pack_rows(T, w, p, rows, rb, cols);
        sd_tensor W = {T, rows, cols, rb, w, NULL}, Wp = {T, rows, cols, rb, w, p};
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            const int n = ns[ni];
            assert_int_equal(sd_matmul(&W, x, n, y, NULL), 0);
            assert_int_equal(sd_matmul(&Wp, x, n, yp, NULL), 0);
            if (memcmp(y, yp, (size_t)n * rows * sizeof(float)))
                fail_msg("packed %s %dx%d n=%d differs from the file layout", tname(T), rows, cols, n);
        }
        free(w);
        free(p);
        free(row);
        free(x);
        free(y);
        free(yp);
    }
}

static void test_qmatmul_parallel(void **state) {
    (void)state; /* big enough for the OpenMP path */
    for (size_t ti = 0; ti < sizeof k_dot_types / sizeof *k_dot_types; ti++) {
        check_qmatmul(k_dot_types[ti], 1024, 768, 1);
        check_qmatmul(k_dot_types[ti], 768, 1024, 5);
        check_qmatmul(k_dot_types[ti], 1203, 512, 3); /* uneven thread ranges: remainder rows */
    }
}

/* Non-finite activations are not silently quantised away. */
static void test_qmatmul_nan(void **state) {
    (void)state;
    for (size_t ti = 0; ti < sizeof k_dot_types / sizeof *k_dot_types; ti++) {
        const sd_type t = k_dot_types[ti];
        const int cols = 256;
        const size_t rb = sd_type_row_bytes(t, cols);
        float wf[256], x[256], y[2];
        uint8_t w[2 * 288];
        for (int i = 0; i < cols; i++) wf[i] = frand(), x[i] = frand();
        sd_quantize_row(t, wf, w, cols);
        sd_quantize_row(t, wf, w + rb, cols);
        x[77] = NAN;
        sd_tensor W = {t, 2, cols, rb, w, NULL};
        assert_int_equal(sd_matmul(&W, x, 1, y, NULL), 0);
        assert_true(isnan(y[0]) && isnan(y[1]));
    }
}

/* ------------------------------------------------------------------ llama.cpp fixtures */

#define FIXTURE_DIR "models/stories260K/llama.cpp-quantized/"

typedef struct {
    int32_t *out;
    int n;
} collect;

static int collect_cb(int32_t t, void *u) {
    collect *c = u;
    c->out[c->n++] = t;
    return 0;
}

/* Greedy continuation of "Once upon a time" (64 tokens), as text after the prompt text. */
static char *greedy_text(sd_model *m, const char *prompt, int n_predict) {
    const sd_tokenizer *tok = sd_model_tokenizer(m);
    int32_t ids[64];
    int n_ids = 0;
    assert_int_equal(sd_tokenizer_encode(tok, prompt, strlen(prompt), sd_tokenizer_add_bos(tok), ids, 64, &n_ids), SD_OK);
    sd_spec_params p = sd_spec_default_params();
    p.draft_mode = SD_DRAFT_FIXED; /* every round drafts: the speculative path is what is tested */
    p.n_predict = n_predict;
    p.stop_at_eos = 0;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, NULL, &p, &s), SD_OK);
    collect c = {malloc((size_t)n_predict * sizeof(int32_t)), 0};
    assert_int_equal(sd_spec_generate(s, ids, n_ids, collect_cb, &c, NULL), SD_OK);
    sd_spec_free(s);
    size_t cap = strlen(prompt) + 64 * (size_t)(n_predict + 1), len = strlen(prompt);
    char *text = malloc(cap);
    memcpy(text, prompt, len);
    int32_t prev = ids[n_ids - 1];
    for (int i = 0; i < c.n; i++) {
        int k = sd_tokenizer_decode(tok, prev, c.out[i], text + len, cap - len - 1);
        assert_true(k >= 0);
        len += (size_t)k;
        prev = c.out[i];
    }
    text[len] = 0;
    free(c.out);
    return text;
}

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

static void check_fixture_greedy(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, FIXTURE_DIR "%s.gguf", name);
    sd_model *m = sdtest_shared_model(rel, NULL);
    snprintf(rel, sizeof rel, FIXTURE_DIR "%s.greedy.txt", name);
    char *path = sdtest_shared_or_skip(rel);
    size_t wlen = 0;
    char *want = sdtest_read_file(path, &wlen);
    assert_non_null(want);
    want = realloc(want, wlen + 1);
    want[wlen] = 0;
    char *got = greedy_text(m, "Once upon a time", 64);
    char *g = trim(got), *w = trim(want);
    printf("  %s: %s\n", name, strcmp(g, w) == 0 ? "same greedy text as llama.cpp" : "DIFFERENT");
    if (strcmp(g, w) != 0) fail_msg("%s greedy text differs from llama.cpp's:\n  ours:      %s\n  llama.cpp: %s", name, g, w);
    free(got);
    free(want);
    free(path);
    sd_model_free(m);
}

static void test_fixture_f16(void **state) {
    (void)state;
    check_fixture_greedy("stories260K-F16");
}
static void test_fixture_q8_0(void **state) {
    (void)state;
    check_fixture_greedy("stories260K-Q8_0-mix");
}
static void test_fixture_q4_0(void **state) {
    (void)state;
    check_fixture_greedy("stories260K-Q4_0-mix");
}

/* Our quantisation of stories260K's F32 weights equals llama.cpp's, tensor by tensor, for
 * every tensor the fixtures store as q8_0, q4_0, q5_0 or f16. */
static void check_blocks(const char *fixture) {
    char *src_path = sdtest_shared_or_skip("models/stories260K/stories260K.gguf");
    char rel[256];
    snprintf(rel, sizeof rel, FIXTURE_DIR "%s.gguf", fixture);
    char *fix_path = sdtest_shared_or_skip(rel);
    size_t ls, lf;
    void *bs = sdtest_read_file(src_path, &ls), *bf = sdtest_read_file(fix_path, &lf);
    sd_gguf *gs = NULL, *gf = NULL;
    assert_int_equal(sd_gguf_parse(bs, ls, src_path, &gs), SD_OK);
    assert_int_equal(sd_gguf_parse(bf, lf, fix_path, &gf), SD_OK);
    int counts[SD_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < sd_gguf_n_tensors(gf); i++) {
        const sd_gguf_tensor *tf = sd_gguf_tensor_at(gf, i);
        if (tf->type == SD_TYPE_F32) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)tf->name.len, tf->name.ptr);
        const sd_gguf_tensor *ts = sd_gguf_find_tensor(gs, name);
        assert_non_null(ts);
        assert_int_equal(ts->type, SD_TYPE_F32);
        assert_true(ts->ne[0] == tf->ne[0] && ts->ne[1] == tf->ne[1]);
        const int64_t cols = (int64_t)tf->ne[0], rows = (int64_t)tf->ne[1];
        const size_t rb = sd_type_row_bytes(tf->type, cols);
        uint8_t *q = malloc(rb * (size_t)rows);
        for (int64_t r = 0; r < rows; r++)
            assert_int_equal(sd_quantize_row((sd_type)tf->type, (const float *)ts->data + r * cols, q + rb * (size_t)r, cols),
                             SD_OK);
        for (int64_t r = 0; r < rows; r++)
            if (memcmp(q + rb * (size_t)r, (const uint8_t *)tf->data + rb * (size_t)r, rb))
                fail_msg("%s: %s (%s) row %lld differs from llama.cpp's", fixture, name, tname((sd_type)tf->type),
                         (long long)r);
        counts[tf->type]++;
        free(q);
    }
    printf("  %s: identical to llama.cpp:", fixture);
    for (int t = 0; t < SD_TYPE_COUNT; t++)
        if (counts[t]) printf(" %d %s", counts[t], tname((sd_type)t));
    printf(" tensors\n");
    sd_gguf_free(gs);
    sd_gguf_free(gf);
    free(bs);
    free(bf);
    free(src_path);
    free(fix_path);
}

static void test_blocks_equal_llama_cpp(void **state) {
    (void)state;
    check_blocks("stories260K-Q8_0-mix");
    check_blocks("stories260K-Q4_0-mix");
    check_blocks("stories260K-F16");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_fast_equals_ref),
        cmocka_unit_test(test_quantize_roundtrip_bounds),
        cmocka_unit_test(test_known_bytes),
        cmocka_unit_test(test_qmatmul_small),
        cmocka_unit_test(test_qmatmul_parallel),
        cmocka_unit_test(test_qmatmul_group),
        cmocka_unit_test(test_qmatmul_packed),
        cmocka_unit_test(test_qmatmul_r16_exact),
        cmocka_unit_test(test_qmatmul_nan),
        cmocka_unit_test(test_fixture_f16),
        cmocka_unit_test(test_fixture_q8_0),
        cmocka_unit_test(test_fixture_q4_0),
        cmocka_unit_test(test_blocks_equal_llama_cpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
