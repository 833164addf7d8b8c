/* The AVX-512 (VNNI, VBMI, GFNI) path's code of the quantised types: dequantisation, activation
 * quantisation, packing on the fly and the integer matmul kernels (its table: kernels_avx512.c). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>

#include "kernels/isa.h"
#include "kernels/reduce.h"

/* ------------------------------------------------------------------ dequantisation */

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
    sd_quant_dequant_row_ref(SD_TYPE_BF16, b + 2 * i, y + i, n - i);
}

int sd_avx512_dequant(sd_type t, const uint8_t *b, float *dst, int64_t nb) {
    switch (t) {
    case SD_TYPE_Q8_0: deq_q8_0_fast(b, dst, nb); return 0;
    case SD_TYPE_Q4_0: deq_q4_0_fast(b, dst, nb, 0); return 0;
    case SD_TYPE_Q5_0: deq_q4_0_fast(b, dst, nb, 1); return 0;
    case SD_TYPE_Q4_K: deq_q4_k_fast(b, dst, nb); return 0;
    case SD_TYPE_Q6_K: deq_q6_k_fast(b, dst, nb); return 0;
    case SD_TYPE_BF16: deq_bf16_fast(b, dst, nb); return 0;
    default: return -1;
    }
}

/* ------------------------------------------------------------------ activation quantisation
 * (the records are described in quant_internal.h) */

/* One block of 32: q, its sum, and the scale, exactly as sd_quant_act_block_ref computes them. */
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

#include "kernels/quant_act.h" /* weight_offset and the act_quad / r_layout writers, over act_block */

/* sd_quant_act_k_ref with 16 lanes at a time, the same values: the scalar version was a noticeable
 * share of a Q4_K decode step, run on one thread while the other waited (measured: commit
 * d0351c0). The scale comes from the first element of largest magnitude, as in the scalar loop;
 * q = round-to-even(x * -127/mx) clamped to +-127 (cvtps_epi32 rounds to even, like nearest_int). */
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
    if (!(fabsf(iscale) <= FLT_MAX)) return; /* as sd_quant_act_k_ref (inf * 0 would be NaN here) */
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
    for (int g = 0; g < 16; g++) a->nbs32[g] = 32 * a->nbs[g];
    a->d = 1.0f / iscale;
}

void sd_avx512_act_token(sd_type t, const float *x, int64_t cols, void *out) {
    switch (family_of(t)) {
    case FAM_R: act_r_token(t, x, cols, out); break;
    case FAM_A: act_a_token(t, x, cols, out); break;
    default:
        for (int64_t s = 0; s < cols / 256; s++) act_k_block_fast(x + 256 * s, (act_k *)out + s);
    }
}

/* ------------------------------------------------------------------ integer dot kernels
 *
 * A kernel computes rows [r0, r1) for NB tokens (Q5_0: up to 8, the 16-row kernels: up to
 * SD_R16_MAX_TOKENS): every weight vector is unpacked once and multiplied into all NB tokens,
 * so a verify pass of k+1 tokens streams the weights once, like a decode step. The per-(row,
 * token) operation sequence does not depend on NB, which is what makes batched results equal
 * single-token results bit for bit. */

/* With 512-bit vectors only two ports execute vector work, so the kernels are counted in
 * vector uops. Q5_0's scales come from an fp16 -> float table (256 KiB, L2-resident) by loads
 * that need no vector port. */
static float g_f16_to_f32[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;
static void f16_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++) g_f16_to_f32[h] = sd_fp16_to_fp32((uint16_t)h);
}

void sd_avx512_quant_init(void) { pthread_once(&g_f16_once, f16_table_init); }

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

/* The software prefetch of the weights (SD_WEIGHT_PREFETCH_BYTES ahead, into the cache level
 * SD_WEIGHT_PREFETCH_HINT names; isa.h). The hardware prefetchers alone left a Q4_0 decode well
 * short of the streaming-read bandwidth (the kernel spends longer per byte than a float read);
 * prefetching 4 KiB ahead into L1 brought it close on an Intel Xeon guest (measured: commit
 * cd5111a). On this AMD EPYC (Zen 4) guest, prefetching into L2 instead (T1), twice as far, made
 * decode and most verify passes faster (probably because L1 prefetches hold the L1 miss buffers
 * that the kernel's own loads need; the Intel guest was not measured again). Measured: commit
 * c43caeb, docs/benchmarks/prefetch-ab-2026-11-23.md (bench-decode, alternating with the
 * previous binary: T0, 4 KiB). */

/* Prefetches the `bytes` (a constant once inlined) following p + SD_WEIGHT_PREFETCH_BYTES. */
static inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t *p, const int bytes) {
    for (int i = 0; i < bytes; i += 64)
        _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES + i, SD_WEIGHT_PREFETCH_HINT);
}

/* Weight streams per thread of the Q5_0 row kernel: a thread's rows are visited as QS_STREAMS
 * interleaved sub-ranges so that several sequential weight streams are in flight (see matvec in
 * kernels_avx512.c). On an Intel Xeon guest 4 streams made decode faster and 8 were no better
 * (measured: commit 7736ae2). The 16-row kernels were measured again on this AMD EPYC guest and
 * take one stream ("Groups in flight" below). */
#define QS_STREAMS 4

/* Row i (0 <= i < r1 - r0) of [r0, r1) in visiting order: QS_STREAMS sub-ranges of `per`
 * rows taken in turn, then the rest in order. */
static inline int64_t visit_row(int64_t r0, int64_t per, int64_t i) {
    return i < per * QS_STREAMS ? r0 + (i % QS_STREAMS) * per + i / QS_STREAMS : r0 + i;
}

/* Q5_0 weights are read in groups of 4 blocks (one act_quad record). */
enum { Q5_GROUP_BLOCKS = 4, Q5_GROUP_BYTES = Q5_GROUP_BLOCKS * SD_Q5_0_BYTES };

/* One weight group (nblocks <= 4 Q5_0 blocks at b) of a row for nb token records (group g of
 * token j at X + j * xs + g). Every kernel accumulates a (row, token) in one register, group
 * by group in order, and sums it with reduce.h's tree, so a row's result is the same whatever
 * the batch or row grouping. */
static inline __attribute__((always_inline)) void group_q5_0(const uint8_t *b, int nblocks, const act_quad *X,
                                                              size_t xs, int64_t g, __m512 *acc, const int nb) {
    __m512i wl, wh;
    __m512 dw;
    prep_q5_0(b, nblocks, &wl, &wh, &dw);
    for (int j = 0; j < nb; j++) acc[j] = step_a(acc[j], wl, wh, dw, X + j * xs + g);
}

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

/* Q4_0: 4 vectors, low nibbles are elements 4k..4k+3, high ones 16+4k.. (unsigned 0..15). By
 * masks and a shift, not GF(2) affine maps: the maps run on the pipes that run dpbusd, which
 * bound a batch of several tokens on Zen 4 (measured: commit 10fc9d8). */
static inline void r_weights_q4_0(const uint8_t *p, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * k);
        w[k] = _mm512_and_si512(v, m4);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
}

/* Q8_0: 8 vectors of elements 4k..4k+3 + 128 (uint8). */
static inline void r_weights_q8_0(const uint8_t *p, __m512i w[8]) {
    for (int k = 0; k < 8; k++) w[k] = _mm512_loadu_si512(p + 64 * k);
}

/* ------------------------------------------------------------------ Q4_K / Q6_K: 16 rows at once */

/* Token j's Q8_K record of super-block sb. */
static inline __attribute__((always_inline)) const act_k *act_k_at(const uint8_t *act, size_t xs, int j, int64_t sb) {
    return (const act_k *)(act + (size_t)j * xs) + sb;
}

/* A Q6_K high-bits vector x with the 2-bit field f (a constant once inlined; bits 2f, 2f + 1 of
 * each byte) at bits 4-5, before the mask 0x30. Zen 5 runs the GF(2) affine maps on the two pipes
 * that also run dpbusd and vpmulld; with shifts and masks instead (other pipes), the batch
 * kernel's three maps per weight vector pair went, and a verify(5) pass got faster (measured:
 * commit 5ec092e). */
static inline __attribute__((always_inline)) __m512i q6_field(__m512i x, const int f) {
    return f == 0 ? _mm512_slli_epi16(x, 4) : f == 1 ? _mm512_slli_epi16(x, 2) : f == 2 ? x : _mm512_srli_epi16(x, 2);
}

/* ------------------------------------------------------------------ the kernels for each token count
 *
 * quant_avx512_nb.h holds the kernels' bodies with the token count NB a macro; it is included
 * once per NB (a template), so that every loop over the tokens has a constant bound, unrolls,
 * and keeps its accumulators in registers, while debuggers and sanitizers see real lines. */

enum { R16_Q4_0, R16_Q8_0, R16_Q4_K, R16_Q6_K, R16_TYPES }; /* the 16-row kernels' weight types */
/* Groups in flight per step and thread (r16_run): one. Four (one from each quarter of the thread's
 * groups, as the row kernels interleave their streams) spilled the K-quants' partial sums (f
 * beside acc, S x NB vectors each), and on this AMD EPYC (Zen 4) guest one sequential stream
 * per thread also read faster: against four, one group made decode and verify(5) faster for
 * Q4_K, Q6_K and Q4_0 (two groups fell between) and Q8_0 no slower (measured: commit b68d5db).
 * The steps keep S as a parameter (a constant once inlined) to try other counts. */

#define ROWS_MAX_NB 8 /* Q5_0 kernels: 1..8 tokens; the 16-row ones: 1..SD_R16_MAX_TOKENS */
/* Q6_K passes of up to this many tokens take one unit at a time (r16_q6_k_unit), larger ones the
 * units in pairs. Pairs for 2 tokens made a 2-token pass cost more than a 3-token one; one unit at
 * a time did not. From 3 tokens up the pairs were as fast or faster (units: mixed at 3 and 4
 * tokens, slower from 5: their accumulators spill). Measured: commit 76de4d4. */
#define Q6_UNIT_NB 2
#define NB_CAT_(name, nb) name##_##nb
#define NB_CAT(name, nb) NB_CAT_(name, nb)
#define NBF(name) NB_CAT(name, NB)

#define SD_NB_BODY "kernels/quant_avx512_nb.h"
#include "kernels/quant_nb_each.h"
#undef SD_NB_BODY

typedef void (*rows_fn)(const sd_tensor *, const void *, size_t, float *, int64_t, int64_t);
static const rows_fn k_rows_q5_0[ROWS_MAX_NB + 1] = {NULL,        rows_q5_0_1, rows_q5_0_2, rows_q5_0_3, rows_q5_0_4,
                                                     rows_q5_0_5, rows_q5_0_6, rows_q5_0_7, rows_q5_0_8};

typedef void (*r16_fn)(const uint8_t *, size_t, int64_t, int64_t, const uint8_t *, size_t, r_layout, float *, int64_t,
                       int64_t);
static const r16_fn k_r16[R16_TYPES][SD_R16_MAX_TOKENS + 1] = {
    [R16_Q4_0] = {NULL, r16_q4_0_1, r16_q4_0_2, r16_q4_0_3, r16_q4_0_4, r16_q4_0_5, r16_q4_0_6, r16_q4_0_7, r16_q4_0_8,
                  r16_q4_0_9},
    [R16_Q8_0] = {NULL, r16_q8_0_1, r16_q8_0_2, r16_q8_0_3, r16_q8_0_4, r16_q8_0_5, r16_q8_0_6, r16_q8_0_7, r16_q8_0_8,
                  r16_q8_0_9},
    [R16_Q4_K] = {NULL, r16_q4_k_1, r16_q4_k_2, r16_q4_k_3, r16_q4_k_4, r16_q4_k_5, r16_q4_k_6, r16_q4_k_7, r16_q4_k_8,
                  r16_q4_k_9},
    [R16_Q6_K] = {NULL, r16_q6_k_1, r16_q6_k_2, r16_q6_k_3, r16_q6_k_4, r16_q6_k_5, r16_q6_k_6, r16_q6_k_7, r16_q6_k_8,
                  r16_q6_k_9},
};

void sd_avx512_rows_q5_0(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1) {
    k_rows_q5_0[nb](W, act, xs, Y, r0, r1);
}

void sd_avx512_r16(sd_type t, int nb, const sd_r16_job *j) {
    const int K = t == SD_TYPE_Q4_0   ? R16_Q4_0
                  : t == SD_TYPE_Q8_0 ? R16_Q8_0
                  : t == SD_TYPE_Q4_K ? R16_Q4_K
                                      : R16_Q6_K;
    k_r16[K][nb](j->P, j->gbytes, j->nblk, j->rows, j->act, j->xs, j->L, j->Y, j->g0, j->g1);
}

/* One group of the 16-row layout (quant_pack.c's scalar packing, the same bytes) for Q4_0 and
 * Q8_0: quant vector k is one masked gather of dword k of the 16 rows' blocks (missing rows read
 * as 0). The kernels pack on the fly when a matrix has no packed copy, and the scalar loop made
 * that much slower than a packed matrix (measured: commit 0375bc7). Q4_K and Q6_K take the scalar
 * packing. */
void sd_avx512_pack_group(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst) {
    if (t != SD_TYPE_Q4_0 && t != SD_TYPE_Q8_0) {
        sd_quant_pack_group_scalar(t, src, row_bytes, nrows, nblk, dst);
        return;
    }
    const int q8 = t == SD_TYPE_Q8_0, qb = q8 ? 512 : 256, bsz = q8 ? SD_Q8_0_BYTES : SD_Q4_0_BYTES;
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
}
