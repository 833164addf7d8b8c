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
 * stored in groups of four blocks (act_quad: Q5_0) or in order with the scales and offset
 * corrections after them (r_layout: Q4_0, Q8_0). A weight type's kernel reads one layout; a
 * batch quantises each token on its own, exactly as a single-token call would.
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

/* One 256-element super-block: q, nbs[0..15] = -(sum of each 16) (lanes 16..31 zero),
 * bs32 = sum of each 32 (bsf: the same as floats, for the 16-row Q4_K kernel), d the float
 * scale. 384 bytes keeps every record 64-aligned. */
typedef struct {
    int8_t q[256];
    int16_t nbs[32];
    int16_t bs32[8];
    float d;
    float bsf[8];
    uint8_t pad[12];
} act_k;

typedef enum { FAM_NONE, FAM_A, FAM_R, FAM_K } family;

static family family_of(sd_type t) {
    switch (t) {
    case SD_TYPE_Q5_0: return FAM_A;
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q8_0: return FAM_R;
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

/* One block of 32: q, its sum, and the scale, exactly as act_a_block_ref computes them. */
static inline float act_block(const float *x, int8_t q[32], int *sum) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const int bad = (_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99)) != 0;
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
#if defined(__F16C__) /* the same bits as the software conversions for every non-NaN float (checked exhaustively) */
    const float d = bad ? NAN : _cvtsh_ss(_cvtss_sh(amax / 127.0f, 0));
#else
    const float d = bad ? NAN : sd_fp16_to_fp32(sd_fp32_to_fp16(amax / 127.0f));
#endif
    const __m512 id = _mm512_set1_ps(d != 0 && !bad ? 127.0f / amax : 0.0f); /* d == 0: see the reference */
    /* MXCSR default rounding: ties to even. A non-finite block is all zeros with a NaN scale
     * (NaN would convert to INT_MIN and overflow the sum). */
    const __mmask16 ok = bad ? 0 : 0xFFFF;
    const __m512i q0 = _mm512_maskz_cvtps_epi32(ok, _mm512_mul_ps(x0, id));
    const __m512i q1 = _mm512_maskz_cvtps_epi32(ok, _mm512_mul_ps(x1, id));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return d;
}

/* Quantises one token for Q5_0 (act_quad records). */
static void act_a_token(sd_type t, const float *x, int64_t cols, void *out) {
    const int64_t nb = cols / 32;
    const int off = weight_offset(t);
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        int sum;
        const float d = act_block(x + 32 * b, q, &sum);
        act_a_place((act_quad *)out + b / 4, (int)(b & 3), q, d, -(off * sum) / 4);
    }
    for (int64_t b = nb; b % 4; b++) { /* the rest of the last group: zero meets zero weights */
        static const int8_t zq[32];
        act_a_place((act_quad *)out + b / 4, (int)(b & 3), zq, 0.0f, 0);
    }
}

/* Q4_0 / Q8_0 (the 16-row kernels): one token as its int8 activations in order (q, 32 per
 * block), then each block's scale (d) and the correction -offset * (sum of its q) for weights
 * stored with an unsigned offset (init); each part 64-byte aligned. */
typedef struct {
    size_t d, init, bytes; /* offsets of d and init, record size; q is at 0 */
} r_layout;

static r_layout r_layout_of(int64_t cols) {
    const size_t nb = (size_t)(cols / 32), f = (nb * 4 + 63) & ~(size_t)63;
    r_layout L;
    L.d = (nb * 32 + 63) & ~(size_t)63;
    L.init = L.d + f;
    L.bytes = L.init + f;
    return L;
}

static void act_r_token(sd_type t, const float *x, int64_t cols, uint8_t *out) {
    const r_layout L = r_layout_of(cols);
    const int off = weight_offset(t);
    float *d = (float *)(out + L.d);
    int32_t *init = (int32_t *)(out + L.init);
    for (int64_t b = 0; b < cols / 32; b++) {
        int sum;
        d[b] = act_block(x + 32 * b, (int8_t *)out + 32 * b, &sum);
        init[b] = -off * sum;
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
    if (!(fabsf(iscale) <= FLT_MAX)) return; /* |mx| < 127 / FLT_MAX: too small to scale, adds 0 */
    for (int j = 0; j < 256; j++) a->q[j] = (int8_t)clamp127(rne(iscale * x[j]));
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += a->q[16 * g + j];
        a->nbs[g] = (int16_t)-s;
        a->bs32[g / 2] = (int16_t)(a->bs32[g / 2] + s);
    }
    for (int g = 0; g < 8; g++) a->bsf[g] = (float)a->bs32[g];
    a->d = 1.0f / iscale;
}

#if SD_QDOT
/* act_k_block with 16 lanes at a time, the same values: the scalar version was ~7% of a Q4_K
 * decode step, run on one thread while the other waited. The scale comes from the first
 * element of largest magnitude, as in the scalar loop; q = round-to-even(x * -127/mx) clamped
 * to +-127 (cvtps_epi32 rounds to even, like rne). */
static void act_k_block_fast(const float *x, act_k *a) {
    __m512 v[16];
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int i = 0; i < 16; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        bad |= _mm512_fpclass_ps_mask(v[i], 0x99); /* NaN, +-inf */
        amax = _mm512_max_ps(amax, _mm512_abs_ps(v[i]));
    }
    memset(a, 0, sizeof *a);
    if (bad) {
        a->d = NAN;
        return;
    }
    const float am = _mm512_reduce_max_ps(amax);
    if (am == 0) return;
    float mx = 0;
    for (int i = 0; i < 16; i++) {
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), _mm512_set1_ps(am), _CMP_EQ_OQ);
        if (hit) {
            mx = x[16 * i + __builtin_ctz(hit)];
            break;
        }
    }
    const float iscale = -127.0f / mx;
    if (!(fabsf(iscale) <= FLT_MAX)) return; /* as act_k_block (inf * 0 would be NaN here) */
    const __m512 is = _mm512_set1_ps(iscale);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    int16_t s16[16];
    for (int i = 0; i < 16; i++) {
        const __m512i q = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(is, v[i])), lo), hi);
        _mm_storeu_si128((__m128i *)(a->q + 16 * i), _mm512_cvtepi32_epi8(q));
        s16[i] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    for (int g = 0; g < 16; g++) {
        a->nbs[g] = (int16_t)-s16[g];
        a->bs32[g / 2] = (int16_t)(a->bs32[g / 2] + s16[g]);
    }
    for (int g = 0; g < 8; g++) a->bsf[g] = (float)a->bs32[g];
    a->d = 1.0f / iscale;
}
#endif

static size_t act_bytes(sd_type t, int64_t cols) {
    switch (family_of(t)) {
    case FAM_A: return (size_t)((cols / 32 + 3) / 4) * sizeof(act_quad);
#if SD_QDOT
    case FAM_R: return r_layout_of(cols).bytes;
#endif
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
    if (family_of(W->type) == FAM_A || family_of(W->type) == FAM_R) {
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

/* ------------------------------------------------------------------ the 16-row layout
 *
 * sd_quant_pack_rows groups Q4_0/Q8_0 rows by 16 (the last group zero-padded: zero scales,
 * so padding rows compute 0). A group stores its blocks in order, two at a time: [quant
 * vectors of block 2u][of block 2u+1][their 2 x 16 fp16 scales], a lone last block as [quant
 * vectors][16 scales]: 16 rows' bytes, each group starting 64-byte aligned (the stride is
 * rounded up: with an odd block count 16 rows' bytes are 32 mod 64), so vector loads do not
 * straddle cache lines. Quant vector k of a block holds in int32 lane n row n's quant bytes 4k..4k+3:
 * Q4_0 has 4 (QB = 256 bytes; low nibbles are elements 4k..4k+3, high ones 16+4k..), Q8_0
 * has 8 (QB = 512; elements 4k..4k+3 + 128, as uint8). */
static inline size_t r_qoff(int64_t b, int qb) {
    return (size_t)(b >> 1) * (size_t)(2 * qb + 64) + (size_t)(b & 1) * (size_t)qb;
}

static inline size_t r_soff(int64_t b, int64_t nblk, int qb) {
    const size_t u = (size_t)(b >> 1) * (size_t)(2 * qb + 64);
    return (b & 1) ? u + 2 * (size_t)qb + 32 : b == nblk - 1 ? u + (size_t)qb : u + 2 * (size_t)qb;
}

/* Q4_K in groups of 16 rows, R16K_SB bytes per super-block: the 16 rows' fp16 d, then dmin
 * (32 bytes each), their 8 sub-block scales and 8 mins unpacked to bytes (sc[j][row],
 * m[j][row]: 128 bytes each), then for each 64-element chunk c the 8 vectors whose lane n holds
 * row n's quant bytes 32c + 4k .. 32c + 4k + 3 (low nibbles: sub-block 2c, high: 2c + 1). */
#define R16K_SB 2368

static void r_pack_group_k(const uint8_t *src, size_t row_bytes, int nrows, int64_t nsb, uint8_t *dst) {
    memset(dst, 0, (size_t)nsb * R16K_SB);
    for (int64_t sb = 0; sb < nsb; sb++) {
        uint8_t *D = dst + (size_t)sb * R16K_SB;
        for (int n = 0; n < nrows; n++) {
            const uint8_t *b = src + (size_t)n * row_bytes + (size_t)sb * SD_Q4_K_BYTES;
            uint8_t sm[16];
            q4_k_scales(b + 4, sm);
            memcpy(D + 2 * n, b, 2);
            memcpy(D + 32 + 2 * n, b + 2, 2);
            for (int j = 0; j < 8; j++) {
                D[64 + 16 * j + n] = sm[j];
                D[192 + 16 * j + n] = sm[8 + j];
            }
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 8; k++) memcpy(D + 320 + 512 * c + 64 * k + 4 * n, b + 16 + 32 * c + 4 * k, 4);
        }
    }
}

/* Q6_K in groups of 16 rows, R16Q6_SB bytes per super-block (16 x 210 = 3360, padded to 64):
 * the 16 rows' fp16 d (32 bytes), their 16 int8 sub-block scales (sc[j][row], 256 bytes), then
 * the low 4 bits of the 6-bit values as 32 vectors (pair p of 32-element units, k: lane n holds
 * row n's elements 4k..4k+3 of unit 2p in the low nibbles, of unit 2p+1 in the high ones) and
 * the high 2 bits as 16 vectors (r, k: bits 2j, 2j+1 of a byte from unit 4r+j), the same
 * 3360 bytes of data as the file's. Each half of the high bits comes just before the low
 * bits it serves, so the kernel reads a super-block front to back. */
#define R16Q6_SB 3392
/* in reading order: high bits H0, low bits V0, V1 (units 0..3), then H1, V2, V3 */
#define R16Q6_H(r) (288 + 1536 * (r))
#define R16Q6_V(p) (288 + 1536 * ((p) / 2) + 512 + 512 * ((p) % 2))

static void r_pack_group_q6(const uint8_t *src, size_t row_bytes, int nrows, int64_t nsb, uint8_t *dst) {
    if (nrows < 16) memset(dst, 0, (size_t)nsb * R16Q6_SB);
    for (int64_t sb = 0; sb < nsb; sb++) {
        uint8_t *D = dst + (size_t)sb * R16Q6_SB;
        for (int n = 0; n < nrows; n++) {
            const uint8_t *b = src + (size_t)n * row_bytes + (size_t)sb * SD_Q6_K_BYTES;
            uint8_t v[256]; /* the 6-bit values in element order, as dequantize_row_q6_K reads them */
            for (int half = 0; half < 2; half++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t *ql = b + 64 * half, hq = b[128 + 32 * half + l];
                    v[128 * half + l] = (uint8_t)((ql[l] & 15) | (hq & 3) << 4);
                    v[128 * half + l + 32] = (uint8_t)((ql[l + 32] & 15) | ((hq >> 2) & 3) << 4);
                    v[128 * half + l + 64] = (uint8_t)((ql[l] >> 4) | ((hq >> 4) & 3) << 4);
                    v[128 * half + l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((hq >> 6) & 3) << 4);
                }
            memcpy(D + 2 * n, b + 208, 2);
            for (int j = 0; j < 16; j++) D[32 + 16 * j + n] = b[192 + j];
            if (n == 0) memset(D + 3360, 0, R16Q6_SB - 3360); /* padding: deterministic bytes */
            for (int k = 0; k < 8; k++)
                for (int i = 0; i < 4; i++) {
                    const int e = 4 * k + i;
                    for (int p = 0; p < 4; p++)
                        D[R16Q6_V(p) + 64 * k + 4 * n + i] = (uint8_t)((v[64 * p + e] & 15) | (v[64 * p + 32 + e] & 15) << 4);
                    for (int r = 0; r < 2; r++)
                        D[R16Q6_H(r) + 64 * k + 4 * n + i] =
                            (uint8_t)(v[128 * r + e] >> 4 | (v[128 * r + 32 + e] >> 4) << 2 | (v[128 * r + 64 + e] >> 4) << 4 |
                                      (v[128 * r + 96 + e] >> 4) << 6);
                }
        }
    }
}

/* One group: nrows (<= 16) rows of row_bytes from src into dst (16 * row_bytes). With
 * AVX-512, quant vector k is one masked gather of dword k of the 16 rows' blocks (missing rows
 * read as 0): the kernels pack on the fly when a matrix has no packed copy, and the scalar
 * loop made that 5x slower than a packed matrix. */
static void r_pack_group(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst) {
    if (t == SD_TYPE_Q4_K) {
        r_pack_group_k(src, row_bytes, nrows, nblk / 8, dst);
        return;
    }
    if (t == SD_TYPE_Q6_K) {
        r_pack_group_q6(src, row_bytes, nrows, nblk / 8, dst);
        return;
    }
    const int q8 = t == SD_TYPE_Q8_0, qb = q8 ? 512 : 256, bsz = q8 ? SD_Q8_0_BYTES : SD_Q4_0_BYTES;
#if SD_QDOT
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)row_bytes));
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    const __m512i flip = _mm512_set1_epi32(q8 ? (int)0x80808080u : 0), z = _mm512_setzero_si512();
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *blk = src + (size_t)b * bsz;
        uint8_t *qd = dst + r_qoff(b, qb);
        for (int k = 0; k < qb / 64; k++)
            _mm512_storeu_si512(qd + 64 * k,
                                _mm512_xor_si512(_mm512_mask_i32gather_epi32(z, m, idx, blk + 2 + 4 * k, 1), flip));
        /* the fp16 scale is the low half of each block's first dword */
        _mm256_storeu_si256((__m256i *)(dst + r_soff(b, nblk, qb)),
                            _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(z, m, idx, blk, 1)));
    }
#else
    const uint32_t flip = q8 ? 0x80808080u : 0;
    if (nrows < 16) memset(dst, 0, 16 * row_bytes);
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *qd = dst + r_qoff(b, qb), *sd = dst + r_soff(b, nblk, qb);
        for (int n = 0; n < nrows; n++) {
            const uint8_t *blk = src + (size_t)n * row_bytes + (size_t)b * bsz;
            for (int k = 0; k < qb / 64; k++) {
                const uint32_t v = le32(blk + 2 + 4 * k) ^ flip;
                memcpy(qd + 64 * k + 4 * n, &v, 4);
            }
            memcpy(sd + 2 * n, blk, 2);
        }
    }
#endif
}

int sd_quant_can_pack(sd_type t) {
    return SD_QDOT && (t == SD_TYPE_Q4_0 || t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K);
}

/* Bytes of one packed group of 16 rows. */
static size_t r_gstride(sd_type t, size_t row_bytes) {
    if (t == SD_TYPE_Q4_K) return row_bytes / SD_Q4_K_BYTES * R16K_SB;
    if (t == SD_TYPE_Q6_K) return row_bytes / SD_Q6_K_BYTES * R16Q6_SB;
    return (16 * row_bytes + 63) & ~(size_t)63;
}

size_t sd_quant_packed_bytes(sd_type t, int64_t rows, size_t row_bytes) {
    return (size_t)((rows + 15) / 16) * r_gstride(t, row_bytes);
}

void sd_quant_pack_rows(sd_type t, const void *src, void *dst, int64_t rows, size_t row_bytes, int64_t cols) {
    if (!(t == SD_TYPE_Q4_0 || t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K)) return;
    /* groups are independent: packing a model at load runs on every thread */
#pragma omp parallel for schedule(static) if (rows >= 1024)
    for (int64_t g = 0; g < (rows + 15) / 16; g++) {
        const int nrows = rows - 16 * g < 16 ? (int)(rows - 16 * g) : 16;
        r_pack_group(t, (const uint8_t *)src + (size_t)(16 * g) * row_bytes, row_bytes, nrows, cols / 32,
                     (uint8_t *)dst + (size_t)g * r_gstride(t, row_bytes));
    }
}

/* ------------------------------------------------------------------ integer dot kernels
 *
 * A kernel computes rows [r0, r1) for NB <= 8 tokens: every weight vector is unpacked once
 * and multiplied into all NB tokens, so a verify pass of k+1 tokens streams the weights
 * once, like a decode step. The per-(row, token) operation sequence does not depend on NB,
 * which is what makes batched results equal single-token results bit for bit. */

#if SD_QDOT

/* With 512-bit vectors only two ports execute vector work, so the kernels are counted in
 * vector uops. Q5_0's scales come from an fp16 -> float table (256 KiB, L2-resident) by loads
 * that need no vector port. */
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

/* Weights of nb (1..4) consecutive Q5_0 blocks from b as the two halves of act_quad
 * (elements 0..15 / 16..31 of each block, unsigned) and each lane's weight scale. Loads are
 * masked to the nb blocks, so the last group of a row never reads past it; missing blocks
 * are zero. */
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

/* One weight group (4 Q5_0 blocks) of a row for nb token records. Every kernel accumulates a
 * (row, token) in one register, group by group in order, and sums it with reduce.h's tree, so
 * a row's result is the same whatever the batch or row grouping. */
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

#define GROUP_Q5(b, nb, X, g, acc, NB) GROUP_A(q5_0, b, nb, X, g, acc, NB)
#define ROWS_Q5(NB) DEFINE_ROWS(q5_0, NB, act_quad, 4 * SD_Q5_0_BYTES, 4, GROUP_Q5, NB, data)

/* ------------------------------------------------------------------ Q4_0 / Q8_0: 16 rows at once
 *
 * The kernels read Q4_0 and Q8_0 matrices in groups of 16 rows (sd_quant_pack_rows), each
 * int32 lane belonging to one row: lane n of dpbusd(weights, broadcast of 4 activation bytes)
 * adds row n's dot product of 4 elements, so one block of 16 rows costs 8 dpbusd per token,
 * its float work (convert, scale, accumulate) is done once for 16 rows, and no horizontal sum
 * is needed. Vector uops per 512 weights, decode / each further token of a batch: Q4_0 21 / 12
 * (the file layout's gathers and per-row sums: 26 / 14), Q8_0 13 / 12 (28 / 20). Each (row, token)
 * result is the fixed sequence acc = fma(float(int dot of block b), dw_b * dx_b, acc) over the
 * blocks in order, whatever the batch. */

static inline int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float ldf(const void *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Q4_0: 4 vectors, low nibbles are elements 4k..4k+3, high ones 16+4k.. (unsigned 0..15). */
static inline void r_weights_q4_0(const uint8_t *p, __m512i w[8]) {
    const __m512i lo = _mm512_set1_epi64(GF_LO), hi = _mm512_set1_epi64(GF_HI);
    for (int k = 0; k < 4; k++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * k);
        w[k] = _mm512_gf2p8affine_epi64_epi8(v, lo, 0);
        w[k + 4] = _mm512_gf2p8affine_epi64_epi8(v, hi, 0);
    }
}

/* Q8_0: 8 vectors of elements 4k..4k+3 + 128 (uint8). */
static inline void r_weights_q8_0(const uint8_t *p, __m512i w[8]) {
    for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(p + 64 * k);
}

/* The driver of every 16-row kernel: groups [g0, g1) (P is group g0, gbytes per group) in
 * steps of QS_STREAMS groups, one from each of the thread's sub-ranges, so that several
 * sequential weight streams are in flight as in the row-by-row kernels; STEP computes the
 * accumulators of a step's S groups (S a constant there) and the driver stores them, the last
 * group's padding rows masked off. */
#define R16_DRIVER(NAME, STEP, NB)                                                             \
    static void NAME(const uint8_t *P, size_t gbytes, int64_t nblk, int64_t rows, const uint8_t *act, \
                     size_t xs, r_layout L, float *Y, int64_t g0, int64_t g1) {                \
        const int64_t per = (g1 - g0) / QS_STREAMS, rest = (g1 - g0) - per * QS_STREAMS;      \
        for (int64_t i = 0; i < per + rest; i++) {                                             \
            const int S = i < per ? QS_STREAMS : 1;                                            \
            const uint8_t *G[QS_STREAMS];                                                      \
            int64_t gi[QS_STREAMS];                                                            \
            __m512 acc[QS_STREAMS][NB];                                                        \
            for (int s = 0; s < S; s++) {                                                      \
                gi[s] = g0 + (i < per ? s * per + i : QS_STREAMS * per + (i - per));           \
                G[s] = P + (size_t)(gi[s] - g0) * gbytes;                                      \
            }                                                                                  \
            if (S == QS_STREAMS) STEP(G, QS_STREAMS, nblk, act, xs, L, acc);                   \
            else STEP(G, 1, nblk, act, xs, L, acc);                                            \
            for (int s = 0; s < S; s++) {                                                      \
                const int64_t r = 16 * gi[s];                                                  \
                const __mmask16 m = rows - r >= 16 ? 0xFFFF : (__mmask16)((1u << (rows - r)) - 1); \
                for (int j = 0; j < NB; j++) _mm512_mask_storeu_ps(Y + (size_t)j * rows + r, m, acc[s][j]); \
            }                                                                                  \
        }                                                                                      \
    }

/* The Q4_0/Q8_0 kernels for NB tokens (QB: quant bytes of a block). A step reads one block of
 * each of its groups in turn (a group read whole before the next, one stream per thread,
 * measured 20% slower; two or four blocks per turn 1-10% slower, 6 or 8 streams no better).
 * Per block and token the 8 dpbusd run as two chains of 4 (elements 0..15 and 16..31),
 * interleaved across the tokens: a single chain of 8 left the n = 5 kernel latency-bound
 * (25.3 -> 22.1 ns per 512 Q4_0 weights, one thread, in L1). */
/* Tokens in the next pass over the weights for `left` tokens: up to 9 in one pass (a k = 8
 * verify), else ceil(left / 8) passes of near-equal size. Measured against passes of 8 and
 * the rest (110M shape, Q8_0 / Q4_0, step time ratio): 9 tokens 0.89 / 0.94, 10: 0.995 /
 * 0.97, 11: 0.98 / 0.96, 12: 1.00 / 0.98; kernels for 10-12 tokens in one pass spilled and
 * were slower from 12 (1.17 / 1.21). */
static inline int r16_chunk(int left) {
    if (left <= 9) return left;
    const int passes = (left + 7) / 8;
    return (left + passes - 1) / passes;
}
#define DEFINE_R16(T, QB, NB)                                                                  \
    /* The blocks of S groups (S a constant once inlined, so the accumulators can stay in      \
     * registers), one block of each in turn. */                                               \
    static inline __attribute__((always_inline)) void r16_step_##T##_##NB(                     \
        const uint8_t *const *G, const int S, int64_t nblk, const uint8_t *act, size_t xs, r_layout L, \
        __m512 acc[][NB]) {                                                                    \
        for (int s = 0; s < S; s++)                                                            \
            for (int j = 0; j < NB; j++) acc[s][j] = _mm512_setzero_ps();                      \
        for (int64_t b = 0; b < nblk; b++) {                                                   \
            const size_t qo = r_qoff(b, QB), so = r_soff(b, nblk, QB);                         \
            for (int s = 0; s < S; s++) {                                                      \
                PREFETCH_AHEAD(G[s] + qo, (QB) + 32);                                          \
                __m512i w[8], t[NB], u[NB];                                                    \
                r_weights_##T(G[s] + qo, w);                                                   \
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G[s] + so))); \
                for (int j = 0; j < NB; j++) {                                                 \
                    t[j] = _mm512_set1_epi32(ld32(act + (size_t)j * xs + L.init + 4 * b));     \
                    u[j] = _mm512_setzero_si512();                                             \
                }                                                                              \
                for (int k = 0; k < 4; k++)                                                    \
                    for (int j = 0; j < NB; j++) {                                             \
                        const uint8_t *aq = act + (size_t)j * xs + 32 * b + 4 * k;             \
                        t[j] = _mm512_dpbusd_epi32(t[j], w[k], _mm512_set1_epi32(ld32(aq)));   \
                        u[j] = _mm512_dpbusd_epi32(u[j], w[k + 4], _mm512_set1_epi32(ld32(aq + 16))); \
                    }                                                                          \
                for (int j = 0; j < NB; j++) {                                                 \
                    const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(ldf(act + (size_t)j * xs + L.d + 4 * b))); \
                    acc[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(t[j], u[j])), sc, acc[s][j]); \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    R16_DRIVER(r16_##T##_##NB, r16_step_##T##_##NB, NB)

/* 32-element sub-blocks (Q4_K) or units (Q6_K) read from one stream before the next: one for
 * decode, whose memory streams want the finest interleave (Q4_K step 0.94-0.96 of two per
 * turn), two for batches, whose per-stream partial sums then move less (verify(5) 1.03-1.04
 * of one per turn). Results do not depend on it. */
#define R16_VISIT(NB) ((NB) == 1 ? 1 : 2)

/* Q4_K, 16 rows at once (layout: r_pack_group_k): per super-block, row and token
 * acc = fma(f, d * dx, acc) - g * (dmin * dx), with f = sum over sub-blocks j in order of
 * fma(float(int dot_j), sc_j, .) and g of fma(m_j, float(sum of the activations of j), .), the
 * dots from 8 dpbusd each (two chains of 4) on unsigned nibbles. Replaces a row-at-a-time
 * kernel with 16-bit products, per-row sums and scale permutes. */
#define DEFINE_R16K(NB)                                                                        \
    static inline __attribute__((always_inline)) void r16k_step_##NB(                          \
        const uint8_t *const *G, const int S, int64_t nblk, const uint8_t *act, size_t xs, r_layout L, \
        __m512 acc[][NB]) {                                                                    \
        const __m512i lo = _mm512_set1_epi64(GF_LO), hi = _mm512_set1_epi64(GF_HI);            \
        const int64_t nsb = nblk / 8;                                                          \
        (void)L;                                                                               \
        for (int s = 0; s < S; s++)                                                            \
            for (int j = 0; j < NB; j++) acc[s][j] = _mm512_setzero_ps();                      \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                 \
            __m512 f[QS_STREAMS][NB];                                                          \
            for (int s = 0; s < S; s++)                                                        \
                for (int j = 0; j < NB; j++) f[s][j] = _mm512_setzero_ps();                    \
            for (int v0 = 0; v0 < 8; v0 += R16_VISIT(NB)) /* sub-blocks of each stream in turn */ \
                for (int s = 0; s < S; s++) {                                                  \
                    const uint8_t *B = G[s] + (size_t)sb * R16K_SB;                            \
                    PREFETCH_AHEAD(B + (R16K_SB / 8) * v0, (R16K_SB / 8) * R16_VISIT(NB));     \
                    for (int q8 = v0; q8 < v0 + R16_VISIT(NB); q8++) {                         \
                        const int c = q8 / 2, h = q8 % 2; /* sub-block 2c + h: low / high nibbles */ \
                        __m512i w[8];                                                          \
                        for (int k = 0; k < 8; k++)                                            \
                            w[k] = _mm512_gf2p8affine_epi64_epi8(                              \
                                _mm512_loadu_si512(B + 320 + 512 * c + 64 * k), h ? hi : lo, 0); \
                        const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(             \
                            _mm_loadu_si128((const __m128i *)(B + 64 + 16 * (2 * c + h)))));   \
                        __m512i t[NB], u[NB];                                                  \
                        for (int j = 0; j < NB; j++) t[j] = u[j] = _mm512_setzero_si512();     \
                        for (int k = 0; k < 4; k++)                                            \
                            for (int j = 0; j < NB; j++) {                                     \
                                const int8_t *aq = ((const act_k *)(act + (size_t)j * xs) + sb)->q + 64 * c + 32 * h + 4 * k; \
                                t[j] = _mm512_dpbusd_epi32(t[j], w[k], _mm512_set1_epi32(ld32(aq))); \
                                u[j] = _mm512_dpbusd_epi32(u[j], w[k + 4], _mm512_set1_epi32(ld32(aq + 16))); \
                            }                                                                  \
                        for (int j = 0; j < NB; j++)                                           \
                            f[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(t[j], u[j])), sc, f[s][j]); \
                    }                                                                          \
                }                                                                              \
            for (int s = 0; s < S; s++) {                                                      \
                const uint8_t *B = G[s] + (size_t)sb * R16K_SB;                                \
                __m512 g[NB];                                                                  \
                for (int j = 0; j < NB; j++) g[j] = _mm512_setzero_ps();                       \
                for (int q = 0; q < 8; q++) {                                                  \
                    const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(                  \
                        _mm_loadu_si128((const __m128i *)(B + 192 + 16 * q))));                \
                    for (int j = 0; j < NB; j++)                                               \
                        g[j] = _mm512_fmadd_ps(m, _mm512_set1_ps(((const act_k *)(act + (size_t)j * xs) + sb)->bsf[q]), g[j]); \
                }                                                                              \
                const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)B));     \
                const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(B + 32))); \
                for (int j = 0; j < NB; j++) {                                                 \
                    const __m512 ad = _mm512_set1_ps(((const act_k *)(act + (size_t)j * xs) + sb)->d); \
                    acc[s][j] = _mm512_fmadd_ps(f[s][j], _mm512_mul_ps(dd, ad), acc[s][j]);    \
                    acc[s][j] = _mm512_fnmadd_ps(g[j], _mm512_mul_ps(dm, ad), acc[s][j]);      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    R16_DRIVER(r16_q4_k_##NB, r16k_step_##NB, NB)

/* Q6_K, 16 rows at once (layout: r_pack_group_q6): per 32-element unit, the 6-bit values are
 * the low nibbles (one GF(2) affine map) OR'd with the high bits moved to bits 4-5 (another);
 * per token its two 16-element sub-blocks are two chains of 4 dpbusd, each started at
 * -32 * (sum of the activations) for the offset, converted and fma'd with the sub-block scale;
 * per super-block acc = fma(f, d * dx, acc). */
static const int64_t k_gf_q6_hi[4] = {0x01020000ll, 0x04080000ll, 0x10200000ll, 0x40800000ll};

#define DEFINE_R16Q6(NB)                                                                       \
    static inline __attribute__((always_inline)) void r16q6_step_##NB(                         \
        const uint8_t *const *G, const int S, int64_t nblk, const uint8_t *act, size_t xs, r_layout L, \
        __m512 acc[][NB]) {                                                                    \
        const __m512i lo = _mm512_set1_epi64(GF_LO), hi = _mm512_set1_epi64(GF_HI);            \
        const int64_t nsb = nblk / 8;                                                          \
        (void)L;                                                                               \
        for (int s = 0; s < S; s++)                                                            \
            for (int j = 0; j < NB; j++) acc[s][j] = _mm512_setzero_ps();                      \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                 \
            __m512 f[QS_STREAMS][NB];                                                          \
            for (int s = 0; s < S; s++)                                                        \
                for (int j = 0; j < NB; j++) f[s][j] = _mm512_setzero_ps();                    \
            for (int v0 = 0; v0 < 8; v0 += R16_VISIT(NB)) /* units of each stream in turn */   \
                for (int s = 0; s < S; s++) {                                                  \
                    const uint8_t *B = G[s] + (size_t)sb * R16Q6_SB;                           \
                    PREFETCH_AHEAD(B + (R16Q6_SB / 8) * v0, (R16Q6_SB / 8) * R16_VISIT(NB));   \
                    for (int u = v0; u < v0 + R16_VISIT(NB); u++) {                            \
                        const int c = u / 2, h = u % 2;                                        \
                        const __m512i gh = _mm512_set1_epi64(k_gf_q6_hi[u % 4]);               \
                        __m512i w[8];                                                          \
                        for (int k = 0; k < 8; k++) {                                          \
                            const __m512i l4 = _mm512_gf2p8affine_epi64_epi8(                  \
                                _mm512_loadu_si512(B + R16Q6_V(c) + 64 * k), h ? hi : lo, 0);  \
                            const __m512i h2 = _mm512_gf2p8affine_epi64_epi8(                  \
                                _mm512_loadu_si512(B + R16Q6_H(u / 4) + 64 * k), gh, 0);       \
                            w[k] = _mm512_or_si512(l4, h2);                                    \
                        }                                                                      \
                        const __m512 sc0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(            \
                            _mm_loadu_si128((const __m128i *)(B + 32 + 16 * (2 * u)))));       \
                        const __m512 sc1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(            \
                            _mm_loadu_si128((const __m128i *)(B + 32 + 16 * (2 * u + 1)))));   \
                        __m512i t[NB], v[NB];                                                  \
                        for (int j = 0; j < NB; j++) {                                         \
                            const act_k *a = (const act_k *)(act + (size_t)j * xs) + sb;       \
                            t[j] = _mm512_set1_epi32(32 * a->nbs[2 * u]);                      \
                            v[j] = _mm512_set1_epi32(32 * a->nbs[2 * u + 1]);                  \
                        }                                                                      \
                        for (int k = 0; k < 4; k++)                                            \
                            for (int j = 0; j < NB; j++) {                                     \
                                const int8_t *aq = ((const act_k *)(act + (size_t)j * xs) + sb)->q + 32 * u + 4 * k; \
                                t[j] = _mm512_dpbusd_epi32(t[j], w[k], _mm512_set1_epi32(ld32(aq))); \
                                v[j] = _mm512_dpbusd_epi32(v[j], w[k + 4], _mm512_set1_epi32(ld32(aq + 16))); \
                            }                                                                  \
                        for (int j = 0; j < NB; j++) {                                         \
                            f[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[j]), sc0, f[s][j]); \
                            f[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[j]), sc1, f[s][j]); \
                        }                                                                      \
                    }                                                                          \
                }                                                                              \
            for (int s = 0; s < S; s++) {                                                      \
                const __m512 dd =                                                              \
                    _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G[s] + (size_t)sb * R16Q6_SB))); \
                for (int j = 0; j < NB; j++) {                                                 \
                    const __m512 ad = _mm512_set1_ps(((const act_k *)(act + (size_t)j * xs) + sb)->d); \
                    acc[s][j] = _mm512_fmadd_ps(f[s][j], _mm512_mul_ps(dd, ad), acc[s][j]);    \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    R16_DRIVER(r16_q6_k_##NB, r16q6_step_##NB, NB)

#define DEFINE_ALL_NB(M, ...)                                                                  \
    M(__VA_ARGS__ 1) M(__VA_ARGS__ 2) M(__VA_ARGS__ 3) M(__VA_ARGS__ 4)                        \
    M(__VA_ARGS__ 5) M(__VA_ARGS__ 6) M(__VA_ARGS__ 7) M(__VA_ARGS__ 8)

DEFINE_ALL_NB(DEFINE_R16, q4_0, 256, )
DEFINE_ALL_NB(DEFINE_R16, q8_0, 512, )
DEFINE_R16(q4_0, 256, 9)
DEFINE_R16(q8_0, 512, 9)
DEFINE_ALL_NB(DEFINE_R16K,)
DEFINE_R16K(9)
DEFINE_ALL_NB(DEFINE_R16Q6,)
DEFINE_R16Q6(9)
ROWS_Q5(1) ROWS_Q5(2) ROWS_Q5(3) ROWS_Q5(4) ROWS_Q5(5) ROWS_Q5(6) ROWS_Q5(7) ROWS_Q5(8)

typedef void (*rows_fn)(const sd_tensor *, const void *, size_t, float *, int64_t, int64_t);
#define TABLE(T) {NULL, rows_##T##_1, rows_##T##_2, rows_##T##_3, rows_##T##_4, rows_##T##_5, \
                  rows_##T##_6, rows_##T##_7, rows_##T##_8}
static const rows_fn k_rows_q5_0[9] = TABLE(q5_0);

typedef void (*r16_fn)(const uint8_t *, size_t, int64_t, int64_t, const uint8_t *, size_t, r_layout, float *, int64_t,
                       int64_t);
#define R16_TABLE(T) {NULL, r16_##T##_1, r16_##T##_2, r16_##T##_3, r16_##T##_4, r16_##T##_5, r16_##T##_6, \
                      r16_##T##_7, r16_##T##_8, r16_##T##_9}
static const r16_fn k_r16_q4_0[10] = R16_TABLE(q4_0);
static const r16_fn k_r16_q8_0[10] = R16_TABLE(q8_0);
static const r16_fn k_r16_q4_k[10] = R16_TABLE(q4_k);
static const r16_fn k_r16_q6_k[10] = R16_TABLE(q6_k);

static const rows_fn *rows_table(sd_type t) {
    switch (t) {
    case SD_TYPE_Q5_0: return k_rows_q5_0;
    default: return NULL;
    }
}
#endif /* SD_QDOT */

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
    const sd_type type = W[0]->type;
    const family fam = family_of(type);
    const rows_fn *tab = rows_table(type);
    const r16_fn *r16 = type == SD_TYPE_Q4_0   ? k_r16_q4_0
                        : type == SD_TYPE_Q8_0 ? k_r16_q8_0
                        : type == SD_TYPE_Q4_K ? k_r16_q4_k
                        : type == SD_TYPE_Q6_K ? k_r16_q6_k
                                               : NULL;
    const int64_t cols = W[0]->cols;
    if ((!tab && !r16) || cols <= 0) return -1;
    int all_packed = 1;
    for (int i = 0; i < count; i++) {
        if (W[i]->type != type || W[i]->cols != cols) return -1;
        all_packed = all_packed && W[i]->packed;
    }
    pthread_once(&g_f16_once, f16_table_init);
    const size_t tok = act_bytes(type, cols);
    if (tok == 0) return -1;
    void *tmp = NULL, *act = scratch;
    if (!act || scratch_bytes < tok * (size_t)n) {
        tmp = aligned_alloc(64, tok * (size_t)n);
        if (!tmp) return -1;
        act = tmp;
    }
    /* Each token is quantised alone, identically whatever n is, once for all matrices. */
    for (int j = 0; j < n; j++) {
        uint8_t *dst = (uint8_t *)act + tok * (size_t)j;
        const float *x = X + (size_t)j * cols;
        if (fam == FAM_R) act_r_token(type, x, cols, dst);
        else if (fam == FAM_A) act_a_token(type, x, cols, dst);
        else
            for (int64_t s = 0; s < cols / 256; s++) act_k_block_fast(x + 256 * s, (act_k *)dst + s);
    }
    const size_t xs = fam == FAM_R ? tok : tok / (fam == FAM_A ? sizeof(act_quad) : sizeof(act_k));
    const r_layout L = r_layout_of(cols);
    int64_t first[MAXG + 1]; /* first 16-row block of each matrix in the combined range */
    double work = 0;
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        first[i + 1] = first[i] + (W[i]->rows + 15) / 16; /* 16-row blocks: own output lines */
        work += (double)W[i]->rows * (double)cols * n;
    }
    int failed = 0;
#pragma omp parallel if (work >= SD_QPAR_MIN_WORK)
    {
        /* One contiguous range of blocks per thread (across the matrices), each matrix's part
         * visited as QS_STREAMS interleaved sub-ranges so that several sequential weight
         * streams are in flight (see matvec in kernels.c). */
        int64_t b0, b1, r0, r1;
        uint8_t *grp = NULL; /* one group packed on the fly, for matrices without a packed copy */
        sd_thread_blocks(first[count], &b0, &b1);
        for (int i = 0; i < count; i++) {
            const int64_t rows = W[i]->rows;
            if (!sd_block_rows(first, i, b0, b1, rows, &r0, &r1)) continue;
            if (!r16) {
                for (int j0 = 0; j0 < n; j0 += 8) {
                    const int nb = n - j0 < 8 ? n - j0 : 8;
                    tab[nb](W[i], (const uint8_t *)act + tok * (size_t)j0, xs, Y[i] + (size_t)j0 * rows, r0, r1);
                }
                continue;
            }
            const size_t gbytes = r_gstride(type, W[i]->row_bytes);
            const int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16, nblk = cols / 32;
            if (W[i]->packed) {
                for (int j0 = 0, nb; j0 < n; j0 += nb) {
                    nb = r16_chunk(n - j0);
                    r16[nb]((const uint8_t *)W[i]->packed + (size_t)g0 * gbytes, gbytes, nblk, rows,
                            (const uint8_t *)act + tok * (size_t)j0, tok, L, Y[i] + (size_t)j0 * rows, g0, g1);
                }
                continue;
            }
            if (!grp && !(grp = aligned_alloc(64, (gbytes + 63) & ~(size_t)63))) {
#pragma omp atomic write
                failed = 1;
                break;
            }
            for (int64_t g = g0; g < g1; g++) {
                const int nrows = rows - 16 * g < 16 ? (int)(rows - 16 * g) : 16;
                r_pack_group(type, (const uint8_t *)W[i]->data + (size_t)(16 * g) * W[i]->row_bytes, W[i]->row_bytes,
                             nrows, nblk, grp);
                for (int j0 = 0, nb; j0 < n; j0 += nb) {
                    nb = r16_chunk(n - j0);
                    r16[nb](grp, gbytes, nblk, rows, (const uint8_t *)act + tok * (size_t)j0, tok, L,
                            Y[i] + (size_t)j0 * rows, g, g + 1);
                }
            }
        }
        free(grp);
    }
    (void)all_packed;
    free(tmp);
    return failed ? -1 : 0;
#else
    (void)W; (void)Y; (void)count; (void)X; (void)n; (void)scratch; (void)scratch_bytes;
    return -1;
#endif
}
