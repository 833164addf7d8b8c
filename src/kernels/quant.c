/* Quantised weights (ggml block layouts): scalar reference dequantisation, AVX-512
 * dequantisation, and the integer (VNNI) matmul kernels of decode, verification and prefill. */
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && defined(__GFNI__)
#include <immintrin.h>

#include "kernels/reduce.h"
#include <pthread.h>
#define SD_QDOT 1
#else
#define SD_QDOT 0
#endif

/* Same threshold as kernels.c: below ~2^19 multiply-adds a parallel region costs more than
 * the second core saves (stories260K-sized matrices stay single-threaded). */
#define SD_QPAR_MIN_WORK (1 << 19)

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return sd_fp16_to_fp32(h);
#endif
}

static inline uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ggml's 6-bit scales and mins of Q4_K's 8 sub-blocks, unpacked as get_scale_min_k4 does:
 * sub-blocks 0..3 take the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 take a
 * nibble of bytes 8..11 plus the top 2 bits of bytes 0..3 / 4..7. out: 8 scales, 8 mins. */
static inline void q4_k_scales(const uint8_t *s, uint8_t out[16]) {
    for (int j = 0; j < 4; j++) {
        out[j] = s[j] & 63;
        out[8 + j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        out[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        out[8 + j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* ------------------------------------------------------------------ reference dequantisation */

static void deq_q8_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q8_0_BYTES, y += 32) {
        const float d = h2f(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = q[j] * d;
    }
}

static void deq_q4_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q4_0_BYTES, y += 32) {
        const float d = h2f(b);
        const uint8_t *q = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = ((q[j] & 0x0F) - 8) * d;
            y[j + 16] = ((q[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q5_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q5_0_BYTES, y += 32) {
        const float d = h2f(b);
        const uint32_t qh = le32(b + 2);
        const uint8_t *q = b + 6;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = (((q[j] & 0x0F) | h0) - 16) * d;
            y[j + 16] = (((q[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void deq_q4_k_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q4_K_BYTES) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sm[16];
        q4_k_scales(b + 4, sm);
        const uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            const float d1 = d * sm[2 * c], m1 = dmin * sm[8 + 2 * c];
            const float d2 = d * sm[2 * c + 1], m2 = dmin * sm[8 + 2 * c + 1];
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void deq_q6_k_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q6_K_BYTES) {
        const float d = h2f(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void deq_bf16_ref(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, sizeof h);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&y[i], &u, sizeof u);
    }
}

int sd_quant_has_dequant(sd_type t) {
    return t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0 || t == SD_TYPE_Q5_0 || t == SD_TYPE_Q4_K ||
           t == SD_TYPE_Q6_K || t == SD_TYPE_BF16;
}

static int64_t blocks_of(sd_type t, int64_t n) {
    const sd_type_traits *ti = sd_type_info(t);
    if (!ti || n < 0 || n % ti->block_size) return -1;
    return n / ti->block_size;
}

int sd_quant_dequant_row_ref(sd_type t, const void *src, float *dst, int64_t n) {
    const int64_t nb = blocks_of(t, n);
    if (nb < 0) return -1;
    const uint8_t *b = src;
    switch (t) {
    case SD_TYPE_Q8_0: deq_q8_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q4_0: deq_q4_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q5_0: deq_q5_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q4_K: deq_q4_k_ref(b, dst, nb); return 0;
    case SD_TYPE_Q6_K: deq_q6_k_ref(b, dst, nb); return 0;
    case SD_TYPE_BF16: deq_bf16_ref(b, dst, nb); return 0;
    default: return -1;
    }
}

/* ------------------------------------------------------------------ fast dequantisation */

#if SD_QDOT
/* Each does per element exactly the float operations of its reference (int -> float
 * conversion, then the same multiplies and subtractions, never fused), so results match. */
static void deq_q8_0_fast(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q8_0_BYTES, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(b));
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 2));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d));
        _mm512_storeu_ps(y + 16,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d));
    }
}

static void deq_q4_0_fast(const uint8_t *b, float *y, int64_t nb, int q5) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m512i off = _mm512_set1_epi32(q5 ? 16 : 8);
    const int bsz = q5 ? SD_Q5_0_BYTES : SD_Q4_0_BYTES;
    for (int64_t i = 0; i < nb; i++, b += bsz, y += 32) {
        const __m512 d = _mm512_set1_ps(h2f(b));
        const __m128i v = _mm_loadu_si128((const __m128i *)(b + (q5 ? 6 : 2)));
        __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        if (q5) {
            const uint32_t qh = le32(b + 2);
            lo = _mm_or_si128(lo, _mm_maskz_set1_epi8((__mmask16)(qh & 0xFFFF), 0x10));
            hi = _mm_or_si128(hi, _mm_maskz_set1_epi8((__mmask16)(qh >> 16), 0x10));
        }
        const __m512i il = _mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), off);
        const __m512i ih = _mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), off);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(il), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(ih), d));
    }
}

static void deq_q4_k_fast(const uint8_t *b, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t i = 0; i < nb; i++, b += SD_Q4_K_BYTES) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sm[16];
        q4_k_scales(b + 4, sm);
        const uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32, y += 64) {
            for (int h = 0; h < 2; h++) {
                const __m512 ds = _mm512_set1_ps(d * sm[2 * c + h]);
                const __m512 ms = _mm512_set1_ps(dmin * sm[8 + 2 * c + h]);
                for (int k = 0; k < 2; k++) {
                    __m128i v = _mm_loadu_si128((const __m128i *)(q + 16 * k));
                    v = h ? _mm_and_si128(_mm_srli_epi16(v, 4), m4) : _mm_and_si128(v, m4);
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
                    _mm512_storeu_ps(y + 32 * h + 16 * k, _mm512_sub_ps(_mm512_mul_ps(ds, f), ms));
                }
            }
        }
    }
}

static void deq_q6_k_fast(const uint8_t *b, float *y, int64_t nb) {
    const __m128i m4 = _mm_set1_epi8(0x0F), m3 = _mm_set1_epi8(3);
    const __m512i off = _mm512_set1_epi32(32);
    for (int64_t i = 0; i < nb; i++, b += SD_Q6_K_BYTES) {
        const float d = h2f(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
            float *yh = y + 256 * i + 128 * half;
            /* 16-element group g (0..7) of this half: ql bytes 32 * ((g >> 1) & 1) + 16 * (g & 1),
             * high nibbles for g >= 4, qh bytes 16 * (g & 1) shifted by 2 * (g >> 1), scale g. */
            for (int g = 0; g < 8; g++) {
                const int qoff = ((g >> 1) & 1) * 32 + (g & 1) * 16;
                const int hoff = (g & 1) * 16;
                const int shift = 2 * (g >> 1);
                __m128i l = _mm_loadu_si128((const __m128i *)(ql + qoff));
                l = g >= 4 ? _mm_and_si128(_mm_srli_epi16(l, 4), m4) : _mm_and_si128(l, m4);
                __m128i h = _mm_loadu_si128((const __m128i *)(qh + hoff));
                h = _mm_and_si128(_mm_srl_epi16(h, _mm_cvtsi32_si128(shift)), m3);
                const __m128i q = _mm_or_si128(l, _mm_slli_epi16(h, 4)); /* h < 4: no cross-byte bits */
                const __m512i qi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), off);
                const __m512 dsc = _mm512_set1_ps(d * sc[8 * half + g]);
                _mm512_storeu_ps(yh + 16 * g, _mm512_mul_ps(dsc, _mm512_cvtepi32_ps(qi)));
            }
        }
    }
}

static void deq_bf16_fast(const uint8_t *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(b + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
    deq_bf16_ref(b + 2 * i, y + i, n - i);
}
#endif

int sd_quant_dequant_row(sd_type t, const void *src, float *dst, int64_t n) {
#if SD_QDOT
    const int64_t nb = blocks_of(t, n);
    if (nb < 0) return -1;
    const uint8_t *b = src;
    switch (t) {
    case SD_TYPE_Q8_0: deq_q8_0_fast(b, dst, nb); return 0;
    case SD_TYPE_Q4_0: deq_q4_0_fast(b, dst, nb, 0); return 0;
    case SD_TYPE_Q5_0: deq_q4_0_fast(b, dst, nb, 1); return 0;
    case SD_TYPE_Q4_K: deq_q4_k_fast(b, dst, nb); return 0;
    case SD_TYPE_Q6_K: deq_q6_k_fast(b, dst, nb); return 0;
    case SD_TYPE_BF16: deq_bf16_fast(b, dst, nb); return 0;
    default: return -1;
    }
#else
    return sd_quant_dequant_row_ref(t, src, dst, n);
#endif
}

/* ------------------------------------------------------------------ activation quantisation
 *
 * Q4_0 / Q5_0 / Q8_0 weights: each token's activations become blocks of 32 int8 with an
 * fp16-rounded scale amax/127 (as llama.cpp's quantize_row_q8_0: q = round-to-even(x*127/amax)),
 * stored in groups of four blocks (act_quad: Q8_0, Q5_0) or eight (act_octo: Q4_0). A
 * weight type's kernel reads one layout; a batch quantises each token on its own, exactly
 * as a single-token call would.
 * Q4_K / Q6_K: one float scale per 256 (llama.cpp's Q8_K: q = round(-127/max * x), max being
 * the element of largest magnitude), with per-16 and per-32 sums for the offset/min terms. */

/* Four blocks (128 activations) as two 64-byte halves: lo holds elements 0..15 of blocks
 * 0..3 (16 bytes each), hi elements 16..31. Int32 lane l of a VNNI sum over either half
 * (4 bytes per lane) belongs to block l/4, so both halves accumulate into the same lanes and
 * the float work (convert, scale, add) is done once per four blocks per token. d and init
 * hold per lane its block's scale and its share -offset*sum/4 of the correction for weights
 * stored with an unsigned offset (8 for Q4_0, 16 for Q5_0, 128 for Q8_0 read as uint8). */
typedef struct {
    int8_t lo[64];
    int8_t hi[64];
    float d[16];
    int32_t init[16];
} act_quad;

/* Q4_0's layout: eight blocks (256 activations) as four 64-byte quarters, quarter i holding
 * elements 8i..8i+7 of blocks 0..7 (8 bytes each). Lane l of a VNNI sum belongs to block l/2,
 * so four dpbusd accumulate a whole group into the same lanes and the float work is done once
 * per eight blocks per token. init: -8*sum/2 per lane. */
typedef struct {
    int8_t x[4][64];
    float d[16];
    int32_t init[16];
} act_octo;

/* One 256-element super-block: q, nbs[0..15] = -(sum of each 16) (lanes 16..31 zero),
 * bs32 = sum of each 32, d the float scale. 384 bytes keeps every record 64-aligned. */
typedef struct {
    int8_t q[256];
    int16_t nbs[32];
    int16_t bs32[8];
    float d;
    uint8_t pad[44];
} act_k;

typedef enum { FAM_NONE, FAM_A, FAM_O, FAM_K } family;

static family family_of(sd_type t) {
    switch (t) {
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q5_0: return FAM_A;
    case SD_TYPE_Q4_0: return FAM_O;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q6_K: return FAM_K;
    default: return FAM_NONE;
    }
}

/* Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int): no UB on NaN. */
static inline int rne(float v) {
    float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clamp127(int v) { return v > 127 ? 127 : v < -127 ? -127 : v; }

/* One block of 32 (reference): q, its sum, and the scale (NaN when x is not finite, so a
 * bad activation still poisons the result instead of vanishing into an int8). */
static float act_a_block_ref(const float *x, int8_t *q, int *sum) {
    float amax = 0;
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        bad |= !(a <= FLT_MAX);
        amax = a > amax ? a : amax;
    }
    const float d = sd_fp16_to_fp32(sd_fp32_to_fp16(amax / 127.0f));
    /* d == 0 (amax below fp16 range, or 0): the block contributes nothing, and 127/amax of a
     * subnormal amax would be inf, overflowing the int conversion */
    const float id = d != 0 ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)clamp127(bad ? 0 : rne(x[j] * id));
        s += q[j];
    }
    *sum = s;
    return bad ? NAN : d;
}

#if SD_QDOT /* the layouts below feed the integer kernels only */
static int weight_offset(sd_type t) { return t == SD_TYPE_Q8_0 ? 128 : t == SD_TYPE_Q5_0 ? 16 : 8; }

static void act_a_place(act_quad *P, int k, const int8_t *q, float d, int32_t init) {
    memcpy(P->lo + 16 * k, q, 16);
    memcpy(P->hi + 16 * k, q + 16, 16);
    for (int l = 4 * k; l < 4 * k + 4; l++) {
        P->d[l] = d;
        P->init[l] = init;
    }
}

static void act_o_place(act_octo *P, int k, const int8_t *q, float d, int32_t init) {
    for (int i = 0; i < 4; i++) memcpy(P->x[i] + 8 * k, q + 8 * i, 8);
    for (int l = 2 * k; l < 2 * k + 2; l++) {
        P->d[l] = d;
        P->init[l] = init;
    }
}

/* Quantises one token for Q8_0/Q5_0 (act_quad records) or Q4_0 (act_octo records). */
static void act_a_token(sd_type t, const float *x, int64_t cols, void *out) {
    const int octo = family_of(t) == FAM_O, per = octo ? 8 : 4;
    const int64_t nb = cols / 32;
    const int off = weight_offset(t);
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        int sum;
        float d;
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const int bad = (_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99)) != 0;
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        d = bad ? NAN : sd_fp16_to_fp32(sd_fp32_to_fp16(amax / 127.0f));
        const __m512 id = _mm512_set1_ps(d != 0 && !bad ? 127.0f / amax : 0.0f); /* d == 0: see the reference */
        /* MXCSR default rounding: ties to even. A non-finite block is all zeros with a NaN scale
         * (NaN would convert to INT_MIN and overflow the sum). */
        const __mmask16 ok = bad ? 0 : 0xFFFF;
        const __m512i q0 = _mm512_maskz_cvtps_epi32(ok, _mm512_mul_ps(x0, id));
        const __m512i q1 = _mm512_maskz_cvtps_epi32(ok, _mm512_mul_ps(x1, id));
        _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
        sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        if (octo) act_o_place((act_octo *)out + b / 8, (int)(b & 7), q, d, -(off * sum) / 2);
        else act_a_place((act_quad *)out + b / 4, (int)(b & 3), q, d, -(off * sum) / 4);
    }
    for (int64_t b = nb; b % per; b++) { /* the rest of the last group: zero meets zero weights */
        static const int8_t zq[32];
        if (octo) act_o_place((act_octo *)out + b / 8, (int)(b & 7), zq, 0.0f, 0);
        else act_a_place((act_quad *)out + b / 4, (int)(b & 3), zq, 0.0f, 0);
    }
}

#endif

/* One super-block of 256 (Q8_K, reference and fast path alike: this runs once per token). */
static void act_k_block(const float *x, act_k *a) {
    float amax = 0, mx = 0;
    int bad = 0;
    for (int j = 0; j < 256; j++) {
        float v = fabsf(x[j]);
        bad |= !(v <= FLT_MAX);
        if (v > amax) {
            amax = v;
            mx = x[j];
        }
    }
    memset(a, 0, sizeof *a);
    if (bad) {
        a->d = NAN;
        return;
    }
    if (amax == 0) return;
    const float iscale = -127.0f / mx;
    for (int j = 0; j < 256; j++) a->q[j] = (int8_t)clamp127(rne(iscale * x[j]));
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += a->q[16 * g + j];
        a->nbs[g] = (int16_t)-s;
        a->bs32[g / 2] = (int16_t)(a->bs32[g / 2] + s);
    }
    a->d = 1.0f / iscale;
}

static size_t act_bytes(sd_type t, int64_t cols) {
    switch (family_of(t)) {
    case FAM_A: return (size_t)((cols / 32 + 3) / 4) * sizeof(act_quad);
    case FAM_O: return (size_t)((cols / 32 + 7) / 8) * sizeof(act_octo);
    case FAM_K: return (size_t)(cols / 256) * sizeof(act_k);
    default: return 0;
    }
}

size_t sd_quant_scratch_bytes(sd_type t, int64_t cols, int n) { return act_bytes(t, cols) * (size_t)n; }

/* ------------------------------------------------------------------ reference dot */

/* The signed integer weights of one Q8_0/Q4_0/Q5_0 block (value = d * v). */
static void block_ints_a(sd_type t, const uint8_t *b, int v[32]) {
    if (t == SD_TYPE_Q8_0) {
        for (int j = 0; j < 32; j++) v[j] = (int8_t)b[2 + j];
        return;
    }
    const uint32_t qh = t == SD_TYPE_Q5_0 ? le32(b + 2) : 0;
    const uint8_t *q = t == SD_TYPE_Q5_0 ? b + 6 : b + 2;
    const int off = t == SD_TYPE_Q5_0 ? 16 : 8;
    for (int j = 0; j < 16; j++) {
        v[j] = ((q[j] & 0x0F) | (int)((qh >> j) & 1u) << 4) - off;
        v[j + 16] = ((q[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4) - off;
    }
}

double sd_quant_dot_ref(const sd_tensor *W, int64_t r, const float *x) {
    const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const int64_t cols = W->cols;
    double acc = 0;
    if (family_of(W->type) == FAM_A || family_of(W->type) == FAM_O) {
        const size_t bsz = W->type == SD_TYPE_Q8_0 ? SD_Q8_0_BYTES
                           : W->type == SD_TYPE_Q4_0 ? SD_Q4_0_BYTES
                                                     : SD_Q5_0_BYTES;
        for (int64_t b = 0; b < cols / 32; b++) {
            int8_t q[32];
            int sum, v[32];
            const float dx = act_a_block_ref(x + 32 * b, q, &sum);
            const uint8_t *blk = row + (size_t)b * bsz;
            block_ints_a(W->type, blk, v);
            long isum = 0;
            for (int j = 0; j < 32; j++) isum += (long)v[j] * q[j];
            acc += (double)h2f(blk) * (double)dx * (double)isum;
        }
        return acc;
    }
    if (W->type == SD_TYPE_Q4_K) {
        for (int64_t s = 0; s < cols / 256; s++) {
            act_k a;
            act_k_block(x + 256 * s, &a);
            const uint8_t *b = row + s * SD_Q4_K_BYTES;
            uint8_t sm[16];
            q4_k_scales(b + 4, sm);
            long isum = 0, msum = 0;
            for (int sub = 0; sub < 8; sub++) {
                const uint8_t *q = b + 16 + 32 * (sub / 2);
                long dot = 0, xs = 0;
                for (int l = 0; l < 32; l++) {
                    int v = sub & 1 ? q[l] >> 4 : q[l] & 0x0F;
                    dot += (long)v * a.q[32 * sub + l];
                    xs += a.q[32 * sub + l];
                }
                isum += sm[sub] * dot;
                msum += sm[8 + sub] * xs;
            }
            acc += (double)a.d * ((double)h2f(b) * (double)isum - (double)h2f(b + 2) * (double)msum);
        }
        return acc;
    }
    if (W->type == SD_TYPE_Q6_K) {
        float w[256];
        for (int64_t s = 0; s < cols / 256; s++) {
            act_k a;
            act_k_block(x + 256 * s, &a);
            const uint8_t *b = row + s * SD_Q6_K_BYTES;
            /* integer values: dequantise with d = 1 and unit scales, then apply the scales */
            uint8_t tmp[SD_Q6_K_BYTES];
            memcpy(tmp, b, sizeof tmp);
            memset(tmp + 192, 1, 16);
            const uint16_t one = 0x3c00;
            memcpy(tmp + 208, &one, 2);
            deq_q6_k_ref(tmp, w, 1);
            const int8_t *sc = (const int8_t *)(b + 192);
            long isum = 0;
            for (int j = 0; j < 256; j++) isum += (long)sc[j / 16] * (long)w[j] * a.q[j];
            acc += (double)a.d * (double)h2f(b + 208) * (double)isum;
        }
        return acc;
    }
    return NAN;
}

/* ------------------------------------------------------------------ integer dot kernels
 *
 * A kernel computes rows [r0, r1) for NB <= 8 tokens: every weight vector is unpacked once
 * and multiplied into all NB tokens, so a verify pass of k+1 tokens streams the weights
 * once, like a decode step. The per-(row, token) operation sequence does not depend on NB,
 * which is what makes batched results equal single-token results bit for bit. */

#if SD_QDOT

/* With 512-bit vectors only two ports execute vector work, so the kernels are counted in
 * vector uops. Q4_0 per four blocks: one byte gather (vpermt2b), two GF(2) affine maps (low
 * and high nibbles), three merges of broadcast scales (which come from an fp16 -> float
 * table, 256 KiB, L2-resident, by loads that need no vector port); then per token two
 * dpbusd, a convert, a multiply and an FMA. */
static float g_f16_to_f32[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;
static void f16_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++) g_f16_to_f32[h] = sd_fp16_to_fp32((uint16_t)h);
}

static inline uint16_t le16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Lanes 4k..4k+3 take block k's scale; h = 0 (a missing block) gives 0. */
static inline __m512 quad_scales(const uint16_t h[4]) {
    __m512 d = _mm512_set1_ps(g_f16_to_f32[h[0]]);
    d = _mm512_mask_mov_ps(d, 0x00F0, _mm512_set1_ps(g_f16_to_f32[h[1]]));
    d = _mm512_mask_mov_ps(d, 0x0F00, _mm512_set1_ps(g_f16_to_f32[h[2]]));
    return _mm512_mask_mov_ps(d, 0xF000, _mm512_set1_ps(g_f16_to_f32[h[3]]));
}

/* GF(2) affine matrices (one per 64-bit lane) mapping a byte to its low nibble or its high
 * nibble shifted down; row 7-i of a matrix selects the input bits of output bit i. */
#define GF_LO 0x0102040800000000ll
#define GF_HI 0x1020408000000000ll

static inline uint64_t low_bytes(int n) { return n >= 64 ? ~0ull : n <= 0 ? 0 : (1ull << n) - 1; }

/* Byte gather of the 16 quant bytes of each of four Q5_0 blocks, at 22k+6 (indices >= 64
 * pick from the second register). */
static const uint8_t k_gather_q5_0[64] = {
    6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 28, 29, 30, 31, 32, 33,
    34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61,
    62, 63, 64, 65, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87};

/* Weights of nb (1..4) consecutive blocks from b as the two halves of act_quad (elements
 * 0..15 / 16..31 of each block, unsigned) and each lane's weight scale. Loads are masked to
 * the nb blocks, so the last group of a row never reads past it; missing blocks are zero. */
/* Q4_0, eight blocks (144 bytes) from b: gathers of quant bytes 0..7 and 8..15 of each block
 * (bytes 18k+2.. and 18k+10..; block 7's come from a third register), whose low and high
 * nibbles are the four quarters of act_octo; scales by one word gather and conversion. */
static const uint8_t k_gather_q4_0_a[64] = {
    2,  3,  4,  5,  6,  7,  8,  9,  20,  21,  22,  23,  24,  25,  26,  27,  38, 39, 40, 41, 42, 43,
    44, 45, 56, 57, 58, 59, 60, 61, 62, 63, 74,  75,  76,  77,  78,  79,  80,  81, 92, 93, 94, 95,
    96, 97, 98, 99, 110, 111, 112, 113, 114, 115, 116, 117, 0, 1, 2, 3, 4, 5, 6, 7};
static const uint8_t k_gather_q4_0_b[64] = {
    10, 11, 12, 13, 14, 15, 16, 17, 28, 29, 30, 31, 32, 33, 34, 35, 46, 47, 48, 49, 50, 51,
    52, 53, 64, 65, 66, 67, 68, 69, 70, 71, 82, 83, 84, 85, 86, 87, 88, 89, 100, 101, 102, 103,
    104, 105, 106, 107, 118, 119, 120, 121, 122, 123, 124, 125, 8, 9, 10, 11, 12, 13, 14, 15};
static const int16_t k_dsel_q4_0[32] = {0,  0,  9,  9,  18, 18, 27, 27, 36, 36, 45, 45, 54, 54, 63, 63,
                                        0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};

static inline void prep_q4_0(const uint8_t *b, int nb, __m512i w[4], __m512 *dw) {
    const int n = SD_Q4_0_BYTES * nb;
    const __m512i v0 = _mm512_maskz_loadu_epi8(low_bytes(n), b);
    const __m512i v1 = _mm512_maskz_loadu_epi8(low_bytes(n - 64), b + 64);
    const __m512i v2 = _mm512_maskz_loadu_epi8(low_bytes(n - 128), b + 128);
    const __m512i ia = _mm512_loadu_si512(k_gather_q4_0_a), ib = _mm512_loadu_si512(k_gather_q4_0_b);
    const __mmask64 last = 0xFF00000000000000ull; /* block 7's bytes, from v2 */
    const __m512i ga = _mm512_mask_permutexvar_epi8(_mm512_permutex2var_epi8(v0, ia, v1), last, ia, v2);
    const __m512i gb = _mm512_mask_permutexvar_epi8(_mm512_permutex2var_epi8(v0, ib, v1), last, ib, v2);
    const __m512i lo = _mm512_set1_epi64(GF_LO), hi = _mm512_set1_epi64(GF_HI);
    w[0] = _mm512_gf2p8affine_epi64_epi8(ga, lo, 0); /* elements 0..7 */
    w[1] = _mm512_gf2p8affine_epi64_epi8(gb, lo, 0); /* 8..15 */
    w[2] = _mm512_gf2p8affine_epi64_epi8(ga, hi, 0); /* 16..23 */
    w[3] = _mm512_gf2p8affine_epi64_epi8(gb, hi, 0); /* 24..31 */
    const __m512i h = _mm512_permutex2var_epi16(v0, _mm512_loadu_si512(k_dsel_q4_0), v1);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* Q4_0 groups packed by sd_quant_pack_rows: nb (1..8) blocks as quant bytes 0..7 of each
 * (8*nb bytes), bytes 8..15 (8*nb), then the nb fp16 scales; for nb = 8 the two 64-byte
 * vectors are exactly prep_q4_0's gathers, so w and dw come out identical with two loads,
 * four affine nibble extractions and one scale permute (the gathers cost ~35% of a 1.1B-shape
 * decode step). */
static const int16_t k_dup_q4_0[32] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7,
                                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static inline void prep_q4_0_packed(const uint8_t *b, int nb, __m512i w[4], __m512 *dw) {
    __m512i ga, gb, h;
    if (nb == 8) {
        ga = _mm512_loadu_si512(b);
        gb = _mm512_loadu_si512(b + 64);
        h = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b + 128)));
    } else {
        ga = _mm512_maskz_loadu_epi8(low_bytes(8 * nb), b);
        gb = _mm512_maskz_loadu_epi8(low_bytes(8 * nb), b + 8 * nb);
        h = _mm512_maskz_loadu_epi8(low_bytes(2 * nb), b + 16 * nb);
    }
    const __m512i lo = _mm512_set1_epi64(GF_LO), hi = _mm512_set1_epi64(GF_HI);
    w[0] = _mm512_gf2p8affine_epi64_epi8(ga, lo, 0);
    w[1] = _mm512_gf2p8affine_epi64_epi8(gb, lo, 0);
    w[2] = _mm512_gf2p8affine_epi64_epi8(ga, hi, 0);
    w[3] = _mm512_gf2p8affine_epi64_epi8(gb, hi, 0);
    h = _mm512_permutexvar_epi16(_mm512_loadu_si512(k_dup_q4_0), h);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

static inline void prep_q5_0(const uint8_t *b, int nb, __m512i *wlo, __m512i *whi, __m512 *dw) {
    const int n = SD_Q5_0_BYTES * nb;
    const __m512i v0 = _mm512_maskz_loadu_epi8(low_bytes(n), b);
    const __m512i v1 = _mm512_maskz_loadu_epi8(low_bytes(n - 64), b + 64);
    const __m512i g = _mm512_permutex2var_epi8(v0, _mm512_loadu_si512(k_gather_q5_0), v1);
    /* fifth bits: qh bit j of block k belongs to element j, i.e. byte 16k + j%16 of half j/16 */
    uint64_t klo = 0, khi = 0;
    uint16_t h[4] = {0, 0, 0, 0};
    for (int k = 0; k < nb; k++) {
        const uint32_t qh = le32(b + SD_Q5_0_BYTES * k + 2);
        klo |= (uint64_t)(qh & 0xFFFF) << (16 * k);
        khi |= (uint64_t)(qh >> 16) << (16 * k);
        h[k] = le16(b + SD_Q5_0_BYTES * k);
    }
    const __m512i lo = _mm512_gf2p8affine_epi64_epi8(g, _mm512_set1_epi64(GF_LO), 0);
    const __m512i hi = _mm512_gf2p8affine_epi64_epi8(g, _mm512_set1_epi64(GF_HI), 0);
    *wlo = _mm512_mask_add_epi8(lo, klo, lo, _mm512_set1_epi8(0x10));
    *whi = _mm512_mask_add_epi8(hi, khi, hi, _mm512_set1_epi8(0x10));
    *dw = quad_scales(h);
}

static inline void prep_q8_0(const uint8_t *b, int nb, __m512i *wlo, __m512i *whi, __m512 *dw) {
    __m256i q[4];
    uint16_t h[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        q[k] = _mm256_maskz_loadu_epi8(k < nb ? ~0u : 0u, b + SD_Q8_0_BYTES * k + 2);
        if (k < nb) h[k] = le16(b + SD_Q8_0_BYTES * k);
    }
    /* [q0 lo, q0 hi, q1 lo, q1 hi] and [q2 ..., q3 ...] -> halves [q0 lo .. q3 lo], [q0 hi .. q3 hi] */
    const __m512i t01 = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
    const __m512i t23 = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
    const __m512i flip = _mm512_set1_epi8((char)0x80); /* int8 + 128 as uint8; init undoes it */
    *wlo = _mm512_xor_si512(_mm512_permutex2var_epi64(t01, _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0), t23), flip);
    *whi = _mm512_xor_si512(_mm512_permutex2var_epi64(t01, _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2), t23), flip);
    *dw = quad_scales(h);
}

/* Q8_0 groups packed by sd_quant_pack_rows: nb (1..4) blocks as elements 0..15 of each
 * (16*nb bytes, stored + 128 as uint8), elements 16..31 (16*nb), then the nb fp16 scales:
 * prep_q8_0's wlo, whi and dw with two loads and one scale permute (its lane shuffles and
 * scalar scale lookups were ~30% of a Q8_0 decode step in an experiment). */
static const int16_t k_dup4_q8_0[32] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3,
                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static inline void prep_q8_0_packed(const uint8_t *b, int nb, __m512i *wlo, __m512i *whi, __m512 *dw) {
    __m512i h;
    if (nb == 4) {
        *wlo = _mm512_loadu_si512(b);
        *whi = _mm512_loadu_si512(b + 64);
        h = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(b + 128)));
    } else {
        *wlo = _mm512_maskz_loadu_epi8(low_bytes(16 * nb), b);
        *whi = _mm512_maskz_loadu_epi8(low_bytes(16 * nb), b + 16 * nb);
        h = _mm512_maskz_loadu_epi8(low_bytes(2 * nb), b + 32 * nb);
    }
    h = _mm512_permutexvar_epi16(_mm512_loadu_si512(k_dup4_q8_0), h);
    *dw = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

static inline __m512 step_a(__m512 acc, __m512i wlo, __m512i whi, __m512 dw, const act_quad *a) {
    __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(a->init), wlo, _mm512_loadu_si512(a->lo));
    s = _mm512_dpbusd_epi32(s, whi, _mm512_loadu_si512(a->hi));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_loadu_ps(a->d)), acc);
}

/* Software prefetch distance, in bytes ahead of the weights being read. The hardware
 * prefetchers alone left a Q4_0 decode at ~70% of the streaming-read bandwidth (the kernel
 * spends longer per byte than a float read); 4 KiB ahead brought it to ~90% (measured with
 * 2 threads, 1 KiB: ~75%, 8 KiB: about the same as 4 KiB). */
#define SD_QPREFETCH 4096

/* Prefetches the `bytes` (a compile-time constant) following p + SD_QPREFETCH. */
#define PREFETCH_AHEAD(p, bytes)                                                               \
    do {                                                                                       \
        for (int pf_ = 0; pf_ < (bytes); pf_ += 64)                                            \
            _mm_prefetch((const char *)(p) + SD_QPREFETCH + pf_, _MM_HINT_T0);                 \
    } while (0)

static inline __m512 step_o(__m512 acc, const __m512i w[4], __m512 dw, const act_octo *a) {
    __m512i s = _mm512_dpbusd_epi32(_mm512_loadu_si512(a->init), w[0], _mm512_loadu_si512(a->x[0]));
    s = _mm512_dpbusd_epi32(s, w[1], _mm512_loadu_si512(a->x[1]));
    s = _mm512_dpbusd_epi32(s, w[2], _mm512_loadu_si512(a->x[2]));
    s = _mm512_dpbusd_epi32(s, w[3], _mm512_loadu_si512(a->x[3]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_loadu_ps(a->d)), acc);
}

/* Weight streams per thread: a thread's rows are visited as QS_STREAMS interleaved
 * sub-ranges so that several sequential weight streams are in flight (see matvec in
 * kernels.c). Measured on the 110M shape (2 threads, alternating in one process, median ms
 * per decode step): Q8_0 7.52 -> 6.66, Q6_K 6.38 -> 5.78 with 4 streams; Q4_0 and Q4_K,
 * whose 62 MB stayed in this machine's 105 MiB L3, 4.72 -> 4.79 and 5.05 -> 5.18 (noise
 * level). 8 streams were no better than 4. */
#define QS_STREAMS 4

/* Row i (0 <= i < r1 - r0) of [r0, r1) in visiting order: QS_STREAMS sub-ranges of `per`
 * rows taken in turn, then the rest in order. */
static inline int64_t visit_row(int64_t r0, int64_t per, int64_t i) {
    return i < per * QS_STREAMS ? r0 + (i % QS_STREAMS) * per + i / QS_STREAMS : r0 + i;
}

/* One weight group (Q4_0: 8 blocks; Q8_0/Q5_0: 4 blocks) of a row for nb token records. Every
 * kernel accumulates a (row, token) in one register, group by group in order, and sums it
 * with reduce.h's tree, so a row's result is the same whatever the batch or row grouping. */
#define GROUP_O(b, nblocks, X, g, acc, NB)                                                     \
    do {                                                                                       \
        __m512i w_[4];                                                                         \
        __m512 dw_;                                                                            \
        prep_q4_0((b), (nblocks), w_, &dw_);                                                   \
        for (int j_ = 0; j_ < (NB); j_++) (acc)[j_] = step_o((acc)[j_], w_, dw_, (X) + j_ * xs + (g)); \
    } while (0)
#define GROUP_OP(b, nblocks, X, g, acc, NB)                                                    \
    do {                                                                                       \
        __m512i w_[4];                                                                         \
        __m512 dw_;                                                                            \
        prep_q4_0_packed((b), (nblocks), w_, &dw_);                                            \
        for (int j_ = 0; j_ < (NB); j_++) (acc)[j_] = step_o((acc)[j_], w_, dw_, (X) + j_ * xs + (g)); \
    } while (0)
#define GROUP_A(T, b, nblocks, X, g, acc, NB)                                                  \
    do {                                                                                       \
        __m512i wl_, wh_;                                                                      \
        __m512 dw_;                                                                            \
        prep_##T((b), (nblocks), &wl_, &wh_, &dw_);                                            \
        for (int j_ = 0; j_ < (NB); j_++) (acc)[j_] = step_a((acc)[j_], wl_, wh_, dw_, (X) + j_ * xs + (g)); \
    } while (0)

/* Rows [r0, r1) for NB tokens, one row at a time in visiting order, inside one call (was a
 * call per row, two accumulators per token and _mm512_reduce_add_ps; a 16-row variant with a
 * transposed reduction spilled its accumulators and measured slower than this). GSZ: bytes
 * per group, GB: blocks per group, GROUP_CALL: GROUP_O or GROUP_A(T, ...). */
#define DEFINE_ROWS(NAME, SUF, XT, GSZ, GB, GROUP_CALL, NB, DATA)                             \
    static void rows_##NAME##_##SUF(const sd_tensor *W, const void *xa, size_t xs, float *Y,   \
                                   int64_t r0, int64_t r1) {                                   \
        const XT *X = xa;                                                                      \
        const int64_t nblk = W->cols / 32, ng = nblk / (GB);                                   \
        const int rest = (int)(nblk % (GB));                                                   \
        const int64_t per = (r1 - r0) / QS_STREAMS;                                            \
        for (int64_t i = 0; i < r1 - r0; i++) {                                                \
            const int64_t r = visit_row(r0, per, i);                                           \
            const uint8_t *row = (const uint8_t *)W->DATA + (size_t)r * W->row_bytes;          \
            __m512 acc[NB];                                                                    \
            for (int j = 0; j < NB; j++) acc[j] = _mm512_setzero_ps();                         \
            for (int64_t g = 0; g < ng; g++) {                                                 \
                const uint8_t *b = row + (size_t)g * (GSZ);                                    \
                PREFETCH_AHEAD(b, GSZ);                                                        \
                GROUP_CALL(b, GB, X, g, acc, NB);                                              \
            }                                                                                  \
            if (rest) GROUP_CALL(row + (size_t)ng * (GSZ), rest, X, ng, acc, NB);              \
            for (int j = 0; j < NB; j++) Y[(size_t)j * W->rows + r] = tree_sum(acc[j]);        \
        }                                                                                      \
    }

#define GROUP_Q8(b, nb, X, g, acc, NB) GROUP_A(q8_0, b, nb, X, g, acc, NB)
#define GROUP_Q8P(b, nb, X, g, acc, NB) GROUP_A(q8_0_packed, b, nb, X, g, acc, NB)
#define GROUP_Q5(b, nb, X, g, acc, NB) GROUP_A(q5_0, b, nb, X, g, acc, NB)
#define ROWS_O(NB) DEFINE_ROWS(q4_0, NB, act_octo, 8 * SD_Q4_0_BYTES, 8, GROUP_O, NB, data)
#define ROWS_OP(NB) DEFINE_ROWS(q4_0p, NB, act_octo, 8 * SD_Q4_0_BYTES, 8, GROUP_OP, NB, packed)
#define ROWS_Q8(NB) DEFINE_ROWS(q8_0, NB, act_quad, 4 * SD_Q8_0_BYTES, 4, GROUP_Q8, NB, data)
#define ROWS_Q8P(NB) DEFINE_ROWS(q8_0p, NB, act_quad, 4 * SD_Q8_0_BYTES, 4, GROUP_Q8P, NB, packed)
#define ROWS_Q5(NB) DEFINE_ROWS(q5_0, NB, act_quad, 4 * SD_Q5_0_BYTES, 4, GROUP_Q5, NB, data)

/* int16 lane m of a 64-byte chunk covers bytes 2m, 2m+1. Q4_K: bytes 0..31 are sub-block
 * 2c, 32..63 sub-block 2c+1 (lanes 0..15 / 16..31). Q6_K: 16-element groups 4c..4c+3
 * (lanes 8 each). These pick each lane's scale out of a vector of the block's scales. */
static const int16_t k_idx_q4k[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const int16_t k_idx_q6k[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

static inline float hsum128(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

/* q4_k_scales with 32-bit words (no byte stores that a vector load would then wait on):
 * bytes 0..7 the 6-bit scales, 8..15 the mins. */
static inline __m128i q4_k_scales_v(const uint8_t *s) {
    const uint32_t u0 = le32(s), u1 = le32(s + 4), u2 = le32(s + 8);
    const uint32_t sc03 = u0 & 0x3f3f3f3fu, m03 = u1 & 0x3f3f3f3fu;
    const uint32_t sc47 = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
    const uint32_t m47 = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
    return _mm_set_epi32((int)m47, (int)m03, (int)sc47, (int)sc03);
}

/* Q4_K: per super-block, sum_sub d*sc*(q . x) - dmin*m*sum(x): the first as int32 lanes
 * (u8 x s8 pairs to int16, then times the int16 scale into int32), the second from the
 * per-32 sums of the activations. */
#define DEFINE_ROWS_Q4K(NB)                                                                    \
    static void rows_q4_k_##NB(const sd_tensor *W, const void *xa, size_t xs, float *Y,        \
                               int64_t r0, int64_t r1) {                                       \
        const act_k *X = xa;                                                                   \
        const int64_t nsb = W->cols / 256;                                                     \
        /* low nibbles in the lower 32 bytes (sub-block 2c), high in the upper (2c+1) */       \
        const __m512i gflohi = _mm512_set_epi64(GF_HI, GF_HI, GF_HI, GF_HI, GF_LO, GF_LO, GF_LO, GF_LO); \
        const int64_t per_ = (r1 - r0) / QS_STREAMS;                                           \
        for (int64_t i_ = 0; i_ < r1 - r0; i_++) {                                             \
            const int64_t r = visit_row(r0, per_, i_);                                         \
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;          \
            __m512 af[NB];                                                                     \
            __m128 am[NB];                                                                     \
            for (int j = 0; j < NB; j++) {                                                     \
                af[j] = _mm512_setzero_ps();                                                   \
                am[j] = _mm_setzero_ps();                                                      \
            }                                                                                  \
            for (int64_t s = 0; s < nsb; s++) {                                                \
                const uint8_t *b = row + (size_t)s * SD_Q4_K_BYTES;                            \
                PREFETCH_AHEAD(b, SD_Q4_K_BYTES);                                              \
                const float d = h2f(b), dmin = h2f(b + 2);                                     \
                const __m128i smv = q4_k_scales_v(b + 4);                                      \
                const __m512i s16 = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(smv));         \
                const __m128i m16 = _mm_cvtepu8_epi16(_mm_srli_si128(smv, 8));                 \
                __m512i ai[NB];                                                                \
                for (int c = 0; c < 4; c++) {                                                  \
                    const __m512i v = _mm512_broadcast_i64x4(                                  \
                        _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * c)));               \
                    const __m512i w = _mm512_gf2p8affine_epi64_epi8(v, gflohi, 0);             \
                    const __m512i scv =                                                        \
                        _mm512_permutexvar_epi16(_mm512_loadu_si512(k_idx_q4k[c]), s16);       \
                    for (int j = 0; j < NB; j++) {                                             \
                        const __m512i p = _mm512_maddubs_epi16(                                \
                            w, _mm512_loadu_si512(X[j * xs + s].q + 64 * c));                  \
                        ai[j] = c ? _mm512_dpwssd_epi32(ai[j], p, scv) : _mm512_madd_epi16(p, scv); \
                    }                                                                          \
                }                                                                              \
                for (int j = 0; j < NB; j++) {                                                 \
                    const act_k *a = X + j * xs + s;                                           \
                    af[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]), _mm512_set1_ps(d * a->d), af[j]); \
                    const __m128i ms = _mm_madd_epi16(m16, _mm_loadu_si128((const __m128i *)a->bs32)); \
                    am[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(ms), _mm_set1_ps(dmin * a->d), am[j]); \
                }                                                                              \
            }                                                                                  \
            for (int j = 0; j < NB; j++)                                                       \
                Y[(size_t)j * W->rows + r] = _mm512_reduce_add_ps(af[j]) - hsum128(am[j]);     \
        }                                                                                      \
    }

/* Q6_K: q in 0..63 (offset 32) with a signed scale per 16. The offset is folded in as
 * -32 * sum_g sc_g * sum16_g, computed with the same int16 multiply-add as the products. */
#define DEFINE_ROWS_Q6K(NB)                                                                    \
    static void rows_q6_k_##NB(const sd_tensor *W, const void *xa, size_t xs, float *Y,        \
                               int64_t r0, int64_t r1) {                                       \
        const act_k *X = xa;                                                                   \
        const int64_t nsb = W->cols / 256;                                                     \
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);               \
        /* qh shift per 16-bit lane: low 32 bytes use bits 0-1 / 4-5, high 32 bits 2-3 / 6-7 */ \
        const __m512i sh02 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1); \
        const __m512i sh46 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1); \
        const int64_t per_ = (r1 - r0) / QS_STREAMS;                                           \
        for (int64_t i_ = 0; i_ < r1 - r0; i_++) {                                             \
            const int64_t r = visit_row(r0, per_, i_);                                         \
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;          \
            __m512 af[NB];                                                                     \
            for (int j = 0; j < NB; j++) af[j] = _mm512_setzero_ps();                          \
            for (int64_t s = 0; s < nsb; s++) {                                                \
                const uint8_t *b = row + (size_t)s * SD_Q6_K_BYTES;                            \
                PREFETCH_AHEAD(b, SD_Q6_K_BYTES);                                              \
                const float d = h2f(b + 208);                                                  \
                const __m512i s16 = _mm512_cvtepi8_epi16(                                      \
                    _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(b + 192))));      \
                const __m512i s32x = _mm512_slli_epi16(s16, 5);                                \
                __m512i ai[NB];                                                                \
                for (int j = 0; j < NB; j++)                                                   \
                    ai[j] = _mm512_madd_epi16(s32x, _mm512_loadu_si512(X[j * xs + s].nbs));    \
                for (int h = 0; h < 2; h++) {                                                  \
                    const __m512i QL = _mm512_loadu_si512(b + 64 * h);                         \
                    const __m512i QH =                                                         \
                        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h))); \
                    const __m512i q0 = _mm512_or_si512(                                        \
                        _mm512_and_si512(QL, m4),                                              \
                        _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(QH, sh02), 4), m30)); \
                    const __m512i q1 = _mm512_or_si512(                                        \
                        _mm512_and_si512(_mm512_srli_epi16(QL, 4), m4),                        \
                        _mm512_and_si512(_mm512_slli_epi16(_mm512_srlv_epi16(QH, sh46), 4), m30)); \
                    const __m512i sc0 =                                                        \
                        _mm512_permutexvar_epi16(_mm512_loadu_si512(k_idx_q6k[2 * h]), s16);   \
                    const __m512i sc1 =                                                        \
                        _mm512_permutexvar_epi16(_mm512_loadu_si512(k_idx_q6k[2 * h + 1]), s16); \
                    for (int j = 0; j < NB; j++) {                                             \
                        const int8_t *xq = X[j * xs + s].q + 128 * h;                          \
                        ai[j] = _mm512_dpwssd_epi32(                                           \
                            ai[j], _mm512_maddubs_epi16(q0, _mm512_loadu_si512(xq)), sc0);     \
                        ai[j] = _mm512_dpwssd_epi32(                                           \
                            ai[j], _mm512_maddubs_epi16(q1, _mm512_loadu_si512(xq + 64)), sc1); \
                    }                                                                          \
                }                                                                              \
                for (int j = 0; j < NB; j++)                                                   \
                    af[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[j]),                         \
                                            _mm512_set1_ps(d * X[j * xs + s].d), af[j]);       \
            }                                                                                  \
            for (int j = 0; j < NB; j++) Y[(size_t)j * W->rows + r] = _mm512_reduce_add_ps(af[j]); \
        }                                                                                      \
    }

#define DEFINE_ALL_NB(M, ...)                                                                  \
    M(__VA_ARGS__ 1) M(__VA_ARGS__ 2) M(__VA_ARGS__ 3) M(__VA_ARGS__ 4)                        \
    M(__VA_ARGS__ 5) M(__VA_ARGS__ 6) M(__VA_ARGS__ 7) M(__VA_ARGS__ 8)

ROWS_OP(1) ROWS_OP(2) ROWS_OP(3) ROWS_OP(4) ROWS_OP(5) ROWS_OP(6) ROWS_OP(7) ROWS_OP(8)
ROWS_O(1) ROWS_O(2) ROWS_O(3) ROWS_O(4) ROWS_O(5) ROWS_O(6) ROWS_O(7) ROWS_O(8)
ROWS_Q8P(1) ROWS_Q8P(2) ROWS_Q8P(3) ROWS_Q8P(4) ROWS_Q8P(5) ROWS_Q8P(6) ROWS_Q8P(7) ROWS_Q8P(8)
ROWS_Q8(1) ROWS_Q8(2) ROWS_Q8(3) ROWS_Q8(4) ROWS_Q8(5) ROWS_Q8(6) ROWS_Q8(7) ROWS_Q8(8)
ROWS_Q5(1) ROWS_Q5(2) ROWS_Q5(3) ROWS_Q5(4) ROWS_Q5(5) ROWS_Q5(6) ROWS_Q5(7) ROWS_Q5(8)
DEFINE_ALL_NB(DEFINE_ROWS_Q4K,)
DEFINE_ALL_NB(DEFINE_ROWS_Q6K,)

typedef void (*rows_fn)(const sd_tensor *, const void *, size_t, float *, int64_t, int64_t);
#define TABLE(T) {NULL, rows_##T##_1, rows_##T##_2, rows_##T##_3, rows_##T##_4, rows_##T##_5, \
                  rows_##T##_6, rows_##T##_7, rows_##T##_8}
static const rows_fn k_rows_q8_0[9] = TABLE(q8_0);
static const rows_fn k_rows_q4_0[9] = TABLE(q4_0);
static const rows_fn k_rows_q4_0p[9] = TABLE(q4_0p);
static const rows_fn k_rows_q8_0p[9] = TABLE(q8_0p);
static const rows_fn k_rows_q5_0[9] = TABLE(q5_0);
static const rows_fn k_rows_q4_k[9] = TABLE(q4_k);
static const rows_fn k_rows_q6_k[9] = TABLE(q6_k);

static const rows_fn *rows_table(sd_type t) {
    switch (t) {
    case SD_TYPE_Q8_0: return k_rows_q8_0;
    case SD_TYPE_Q4_0: return k_rows_q4_0;
    case SD_TYPE_Q5_0: return k_rows_q5_0;
    case SD_TYPE_Q4_K: return k_rows_q4_k;
    case SD_TYPE_Q6_K: return k_rows_q6_k;
    default: return NULL;
    }
}
#endif /* SD_QDOT */

int sd_quant_can_pack(sd_type t) { return SD_QDOT && (t == SD_TYPE_Q4_0 || t == SD_TYPE_Q8_0); }

/* Blocks of bsz bytes (an fp16 scale, then 2*half quant bytes) in groups of up to `group`:
 * each group as the first halves of its nb blocks, their second halves (bytes xor flip), then
 * their scales; the same 18 or 34 bytes per block. Q4_0: half 8 (nibble bytes 0..7, 8..15),
 * group 8; Q8_0: half 16 (elements 0..15, 16..31, stored + 128), group 4. */
static void pack_rows(const void *src, void *dst, int64_t rows, size_t row_bytes, int64_t nblk, int bsz, int half,
                      int group, uint8_t flip) {
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)r * row_bytes;
        uint8_t *d = (uint8_t *)dst + (size_t)r * row_bytes;
        for (int64_t g0 = 0; g0 < nblk; g0 += group) {
            const int nb = nblk - g0 < group ? (int)(nblk - g0) : group;
            const uint8_t *sg = s + (size_t)g0 * bsz;
            uint8_t *dg = d + (size_t)g0 * bsz;
            for (int k = 0; k < nb; k++) {
                for (int e = 0; e < half; e++) {
                    dg[half * k + e] = (uint8_t)(sg[bsz * k + 2 + e] ^ flip);
                    dg[half * nb + half * k + e] = (uint8_t)(sg[bsz * k + 2 + half + e] ^ flip);
                }
                memcpy(dg + 2 * half * nb + 2 * k, sg + bsz * k, 2);
            }
        }
    }
}

void sd_quant_pack_rows(sd_type t, const void *src, void *dst, int64_t rows, size_t row_bytes, int64_t cols) {
    if (t == SD_TYPE_Q4_0) pack_rows(src, dst, rows, row_bytes, cols / 32, SD_Q4_0_BYTES, 8, 8, 0);
    else if (t == SD_TYPE_Q8_0) pack_rows(src, dst, rows, row_bytes, cols / 32, SD_Q8_0_BYTES, 16, 4, 0x80);
}

int sd_quant_has_dot(sd_type t) { return SD_QDOT && family_of(t) != FAM_NONE; }

int sd_quant_matmul(const sd_tensor *W, const float *X, int n, float *Y, void *scratch,
                    size_t scratch_bytes) {
    return sd_quant_matmul_group(&W, &Y, 1, X, n, scratch, scratch_bytes);
}

int sd_quant_matmul_group(const sd_tensor *const *W, float *const *Y, int count, const float *X,
                          int n, void *scratch, size_t scratch_bytes) {
#if SD_QDOT
    enum { MAXG = 4 };
    if (count < 1 || count > MAXG || n < 1) return -1;
    const rows_fn *tab = rows_table(W[0]->type);
    const int64_t cols = W[0]->cols;
    if (!tab || cols <= 0) return -1;
    int packed = sd_quant_can_pack(W[0]->type);
    for (int i = 0; i < count; i++) {
        if (W[i]->type != W[0]->type || W[i]->cols != cols) return -1;
        packed = packed && W[i]->packed;
    }
    if (packed) tab = W[0]->type == SD_TYPE_Q4_0 ? k_rows_q4_0p : k_rows_q8_0p;
    pthread_once(&g_f16_once, f16_table_init);
    const size_t tok = act_bytes(W[0]->type, cols);
    if (tok == 0) return -1;
    void *tmp = NULL, *act = scratch;
    if (!act || scratch_bytes < tok * (size_t)n) {
        tmp = aligned_alloc(64, tok * (size_t)n);
        if (!tmp) return -1;
        act = tmp;
    }
    /* Each token is quantised alone, identically whatever n is, once for all matrices. */
    const family fam = family_of(W[0]->type);
    for (int j = 0; j < n; j++) {
        uint8_t *dst = (uint8_t *)act + tok * (size_t)j;
        const float *x = X + (size_t)j * cols;
        if (fam != FAM_K) {
            act_a_token(W[0]->type, x, cols, dst);
        } else {
            for (int64_t s = 0; s < cols / 256; s++) act_k_block(x + 256 * s, (act_k *)dst + s);
        }
    }
    const size_t xs = tok / (fam == FAM_A ? sizeof(act_quad) : fam == FAM_O ? sizeof(act_octo) : sizeof(act_k));
    int64_t first[MAXG + 1]; /* first 16-row block of each matrix in the combined range */
    double work = 0;
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        first[i + 1] = first[i] + (W[i]->rows + 15) / 16; /* 16-row blocks: own output lines */
        work += (double)W[i]->rows * (double)cols * n;
    }
#pragma omp parallel if (work >= SD_QPAR_MIN_WORK)
    {
        /* One contiguous range of blocks per thread (across the matrices), each matrix's part
         * visited as QS_STREAMS interleaved sub-ranges so that several sequential weight
         * streams are in flight (see matvec in kernels.c). */
        int64_t b0, b1, r0, r1;
        sd_thread_blocks(first[count], &b0, &b1);
        for (int i = 0; i < count; i++) {
            const int64_t rows = W[i]->rows;
            if (!sd_block_rows(first, i, b0, b1, rows, &r0, &r1)) continue;
            for (int j0 = 0; j0 < n; j0 += 8) {
                const int nb = n - j0 < 8 ? n - j0 : 8;
                const void *xa = (const uint8_t *)act + tok * (size_t)j0;
                float *Yg = Y[i] + (size_t)j0 * rows;
                tab[nb](W[i], xa, xs, Yg, r0, r1); /* the kernels visit the streams themselves */
            }
        }
    }
    free(tmp);
    return 0;
#else
    (void)W; (void)Y; (void)count; (void)X; (void)n; (void)scratch; (void)scratch_bytes;
    return -1;
#endif
}
