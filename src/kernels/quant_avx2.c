/* The AVX2 (+FMA, F16C) code of the quantised types, for CPUs without the AVX-512 set of
 * quant_avx512.c: activation quantisation and the integer matmul kernels, in the same records,
 * 16-row layouts and entry points; quant.c picks them. */
#include <float.h>
#include <math.h>

#include "kernels/avx2.h"
#include "kernels/isa.h"

/* ------------------------------------------------------------------ activation quantisation
 * (the records are described in quant_internal.h); each gives the scalar reference's values. */

static inline int hsum_i32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1)));
}

static inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

/* 8 int32 lanes in -127..127 as 8 int8 at q. */
static inline void store_i8x8(int8_t *q, __m256i v) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i *)q, _mm_packs_epi16(w, w));
}

/* One block of 32: q, its sum, and the scale, exactly as sd_quant_act_block_ref computes them (the
 * F16C conversions equal the software ones for every non-NaN float, as in quant_avx512.c). */
static inline float act_block(const float *x, int8_t q[32], int *sum) {
    __m256 v[4], am = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        bad |= nonfinite8(v[i]);
        am = _mm256_max_ps(am, abs8(v[i]));
    }
    const float amax = hmax8(am);
    const float d = bad ? NAN : _cvtsh_ss(_cvtss_sh(amax / 127.0f, 0));
    const __m256 id = _mm256_set1_ps(d != 0 && !bad ? 127.0f / amax : 0.0f); /* d == 0: see the reference */
    __m256i s = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) { /* MXCSR default rounding: ties to even, as nearest_int */
        const __m256i qi = bad ? _mm256_setzero_si256() : _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
        store_i8x8(q + 8 * i, qi);
        s = _mm256_add_epi32(s, qi);
    }
    *sum = hsum_i32(s);
    return d;
}

#include "kernels/quant_act.h" /* weight_offset and the act_quad / r_layout writers, over act_block */

/* sd_quant_act_k_ref (quant_ref.c) 8 lanes at a time, the same values: the scale from the first
 * element of largest magnitude, q = round-to-even(x * -127/mx) clamped to +-127. */
static void act_k_block_fast(const float *x, act_k *a) {
    __m256 am = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < 32; i++) {
        const __m256 v = _mm256_loadu_ps(x + 8 * i);
        bad |= nonfinite8(v);
        am = _mm256_max_ps(am, abs8(v));
    }
    memset(a, 0, sizeof *a);
    if (bad) {
        a->d = NAN;
        return;
    }
    const float amax = hmax8(am);
    if (amax == 0) return;
    float mx = 0;
    for (int i = 0; i < 32; i++) {
        const int hit = _mm256_movemask_ps(
            _mm256_cmp_ps(abs8(_mm256_loadu_ps(x + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (hit) {
            mx = x[8 * i + __builtin_ctz((unsigned)hit)];
            break;
        }
    }
    const float iscale = -127.0f / mx;
    if (!(fabsf(iscale) <= FLT_MAX)) return; /* as sd_quant_act_k_ref */
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    int s8[32];
    for (int i = 0; i < 32; i++) {
        const __m256i q =
            _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 8 * i))), lo), hi);
        store_i8x8(a->q + 8 * i, q);
        s8[i] = hsum_i32(q);
    }
    for (int g = 0; g < 16; g++) {
        const int s = s8[2 * g] + s8[2 * g + 1];
        a->nbs[g] = (int16_t)-s;
        a->bs32[g / 2] = (int16_t)(a->bs32[g / 2] + s);
    }
    for (int g = 0; g < 16; g++) a->nbs32[g] = 32 * a->nbs[g];
    a->d = 1.0f / iscale;
}

void sd_avx2_act_token(sd_type t, const float *x, int64_t cols, void *out) {
    switch (family_of(t)) {
    case FAM_R: act_r_token(t, x, cols, out); break;
    case FAM_A: act_a_token(t, x, cols, out); break;
    default:
        for (int64_t s = 0; s < cols / 256; s++) act_k_block_fast(x + 256 * s, (act_k *)out + s);
    }
}


/* ------------------------------------------------------------------ integer dot kernels
 *
 * AVX2 has no VNNI: an int32 lane's 4-byte dot product is maddubs (unsigned weight bytes times
 * signed activation bytes, adjacent pairs summed into int16) then madd with ones (pairs into
 * int32). The 16-row kernels read the layouts of quant_pack.c (each int32 lane one row) as two
 * halves of 8 rows, 4 activation bytes broadcast per step. Where the int16 sums cannot overflow
 * (4-bit weights: 8 products of <= 15 * 127 * 2 = 3810 per lane), a block's 8 maddubs are added
 * as int16 before one madd; the K-quants' sub-block scales multiply in the same madd (pairs of
 * int16: sum and scale), so their super-block sums are exact int32 (converted to float once per
 * super-block). Q8_0 weights (8 bits)
 * would saturate maddubs as unsigned: they are used signed, |w| times sign(a, w), one madd per
 * maddubs. As in the AVX-512 kernels, every (row, token) result is one fixed sequence of
 * operations whatever the batch: batched == stepwise, bit for bit. */

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

static inline __m256i bcast32(const void *p) { return _mm256_set1_epi32(ld32(p)); }

/* Prefetches the `bytes` (a constant once inlined) following p + SD_WEIGHT_PREFETCH_BYTES
 * (isa.h), as the AVX-512 kernels do. */
static inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t *p, const int bytes) {
    for (int i = 0; i < bytes; i += 64)
        _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES + i, SD_WEIGHT_PREFETCH_HINT);
}

/* 8 bytes at p (unsigned, or signed with sgn) as int32 lanes, each duplicated into both int16
 * halves: the multiplier of madd that scales both partial sums of a lane. */
static inline __m256i scale_pairs(const uint8_t *p, int sgn) {
    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
    const __m256i x = sgn ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    return _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(x, 16));
}

/* Two sets of 8 bytes (unsigned, or signed) as int32 lanes holding (p0[n], p1[n]) as int16. */
static inline __m256i two_pairs(const uint8_t *p0, const uint8_t *p1, int sgn) {
    const __m128i b0 = _mm_loadl_epi64((const __m128i *)p0), b1 = _mm_loadl_epi64((const __m128i *)p1);
    const __m256i x0 = sgn ? _mm256_cvtepi8_epi32(b0) : _mm256_cvtepu8_epi32(b0);
    const __m256i x1 = sgn ? _mm256_cvtepi8_epi32(b1) : _mm256_cvtepu8_epi32(b1);
    return _mm256_or_si256(_mm256_and_si256(x0, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(x1, 16));
}

/* Byte j = 0xFF where bit j of x is set. */
static inline __m256i bits_to_bytes(uint32_t x) {
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), spread);
    return _mm256_cmpeq_epi8(_mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfell)), _mm256_set1_epi64x(-1));
}

/* A Q5_0 block's 32 weights in element order, unsigned (0..31: value + 16). */
static inline __m256i q5_0_weights(const uint8_t *b) {
    const __m128i qs = _mm_loadu_si128((const __m128i *)(b + 6)), m4 = _mm_set1_epi8(0x0F);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
    return _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(le32(b + 2)), _mm256_set1_epi8(0x10)));
}

/* Token j's Q8_K record of super-block sb. */
static inline __attribute__((always_inline)) const act_k *act_k_at(const uint8_t *act, size_t xs, int j, int64_t sb) {
    return (const act_k *)(act + (size_t)j * xs) + sb;
}

/* Stores the 8 results of rows r.. (rows of the matrix bound them) for token j. */
static inline void store_rows(float *Y, int64_t rows, int64_t r, int j, __m256 v) {
    float *y = Y + (size_t)j * rows + r;
    if (rows - r >= 8) _mm256_storeu_ps(y, v);
    else _mm256_maskstore_ps(y, tail8((int)(rows - r)), v);
}

#define R16_CHUNK 5 /* most tokens per pass of half_q and half_q4_k: about 2 R16_CHUNK + 4 vectors live */

/* Q4_0 (QB = 256 quant bytes per 16-row block) or Q8_0 (QB = 512): half h (rows 8h..8h+7) of
 * a group for NT tokens, every block in order; per block and token
 * acc = fma(float(int dot), dw * dx, acc). Weight vector outer, tokens inner, as in sub_q4_k.
 * Q4_0: a block's 8 maddubs (low nibbles are elements 4k.., high ones 16 + 4k..) summed as
 * int16, one madd, plus the act record's -8 * sum; Q8_0: |w| * sign(a, w), a madd each. */
static inline __attribute__((always_inline)) void half_q(const uint8_t *G, int h, int64_t nblk, const uint8_t *act,
                                                         size_t xs, r_layout L, __m256 *acc, const int QB, const int NT,
                                                         const int first) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80);
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nblk; b++) {
        const size_t qo = r_qoff(b, QB), so = r_soff(b, nblk, QB);
        if (h == 0 && first) prefetch_ahead(G + qo, QB + 32); /* half 1 then finds the lines in the caches */
        const uint8_t *Q = G + qo + 32 * h;
        __m256i s[R16_CHUNK];
        for (int j = 0; j < NT; j++) s[j] = _mm256_setzero_si256(); /* folded into the first adds */
        for (int k = 0; k < 8; k++) {
            __m256i w, wa = _mm256_setzero_si256(); /* wa: Q8_0's |w| */
            if (QB == 256) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(Q + 64 * (k % 4)));
                w = _mm256_and_si256(k < 4 ? v : _mm256_srli_epi16(v, 4), m4);
            } else {
                w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(Q + 64 * k)), flip); /* signed */
                wa = _mm256_abs_epi8(w);
            }
            for (int j = 0; j < NT; j++) {
                const uint8_t *aq = act + (size_t)j * xs + 32 * b + (QB == 256 ? 16 * (k / 4) + 4 * (k % 4) : 4 * k);
                if (QB == 256) {
                    const __m256i p = _mm256_maddubs_epi16(w, bcast32(aq));
                    s[j] = _mm256_add_epi16(s[j], p);
                } else {
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(bcast32(aq), w)), ones);
                    s[j] = _mm256_add_epi32(s[j], p);
                }
                __asm__("" : "+x"(s[j])); /* as in sub_q4_k */
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + so + 16 * h)));
        for (int j = 0; j < NT; j++) {
            const __m256i t =
                QB == 256 ? _mm256_add_epi32(_mm256_madd_epi16(s[j], ones), bcast32(act + (size_t)j * xs + L.init + 4 * b)) : s[j];
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(ldf(act + (size_t)j * xs + L.d + 4 * b)));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), sc, acc[j]);
        }
    }
}

/* Sub-block u (hn: its nibbles, a constant) of half h of super-block B for NT tokens: adds
 * scale * dot to is[j]. */
static inline __attribute__((always_inline)) void sub_q4_k(const uint8_t *B, int h, int u, const int hn, const uint8_t *act,
                                                           size_t xs, int64_t sb, __m256i *is, const int NT) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    /* weight vector outer, tokens inner: NT int16 sums, one weight vector and a broadcast
     * live at once, so that 16 ymm registers hold them (the token-outer order spilled) */
    __m256i s[R16_CHUNK];
    for (int k = 0; k < 8; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(B + 320 + 512 * (u / 2) + 64 * k + 32 * h));
        const __m256i w = _mm256_and_si256(hn ? _mm256_srli_epi16(v, 4) : v, m4);
        for (int j = 0; j < NT; j++) {
            const __m256i p = _mm256_maddubs_epi16(w, bcast32(act_k_at(act, xs, j, sb)->q + 32 * u + 4 * k));
            s[j] = k ? _mm256_add_epi16(s[j], p) : p;
            __asm__("" : "+x"(s[j])); /* keeps GCC from regrouping the sums (it spilled the products) */
        }
    }
    const __m256i sc = scale_pairs(B + 64 + 16 * u + 8 * h, 0);
    for (int j = 0; j < NT; j++) is[j] = _mm256_add_epi32(is[j], _mm256_madd_epi16(s[j], sc));
}

/* Q4_K, half h of a group (layout: r_pack_group_k): per super-block and token an exact int32
 * sum over the 8 sub-blocks of scale * dot (the 8 maddubs of a sub-block as int16, then one
 * madd by the (scale, scale) pairs) and one of min * (sum of the sub-block's activations) (madd
 * of (min, min') pairs by the record's bs32 pairs), then acc = fma(sum, d * dx, acc) -
 * msum * (dmin * dx). */
static inline __attribute__((always_inline)) void half_q4_k(const uint8_t *G, int h, int64_t nblk, const uint8_t *act,
                                                            size_t xs, __m256 *acc, const int NT, const int first) {
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nblk / 8; sb++) {
        const uint8_t *B = G + (size_t)sb * R16K_SB;
        if (h == 0 && first) prefetch_ahead(B, R16K_SB);
        __m256i is[R16_CHUNK];
        for (int j = 0; j < NT; j++) is[j] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) { /* chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high) */
            sub_q4_k(B, h, 2 * c, 0, act, xs, sb, is, NT);
            sub_q4_k(B, h, 2 * c + 1, 1, act, xs, sb, is, NT);
        }
        __m256i mp[4];
        for (int i = 0; i < 4; i++) mp[i] = two_pairs(B + 192 + 16 * (2 * i) + 8 * h, B + 192 + 16 * (2 * i + 1) + 8 * h, 0);
        const __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 16 * h)));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 32 + 16 * h)));
        for (int j = 0; j < NT; j++) {
            const act_k *a = act_k_at(act, xs, j, sb);
            __m256i ms = _mm256_madd_epi16(mp[0], bcast32(a->bs32));
            for (int i = 1; i < 4; i++) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mp[i], bcast32(a->bs32 + 2 * i)));
            const __m256 ad = _mm256_set1_ps(a->d);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_mul_ps(dd, ad), acc[j]);
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dm, ad), acc[j]);
        }
    }
}

/* Q6_K, half h of a group (layout: r_pack_group_q6) for NT tokens: per 32-element unit the
 * 6-bit values are the low nibbles OR'd with the high bits moved to bits 4-5; per token, pairs of
 * maddubs (<= 2 x 16002 per int16) madd'ed by the two 16-element sub-blocks' (scale, scale)
 * pairs, plus the -32 * sum offset as 32 * madd((sc, sc') pairs, the record's -sum pairs); per
 * super-block acc = fma(float(int32 sum), d * dx, acc). Two weight vectors outer, tokens inner. */
static inline __attribute__((always_inline)) void half_q6_k(const uint8_t *G, int h, int64_t nblk, const uint8_t *act,
                                                            size_t xs, __m256 *acc, const int NT, const int first) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nblk / 8; sb++) {
        const uint8_t *B = G + (size_t)sb * R16Q6_SB;
        if (h == 0 && first) prefetch_ahead(B, R16Q6_SB);
        __m256i is[SD_R16_MAX_TOKENS];
        for (int j = 0; j < NT; j++) is[j] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) {
            /* unrolled, so that each unit's shifts are constants: far fewer instructions at one
             * token than the loop with its per-vector branches (callgrind; measured: commit
             * 94adbde) */
            const int c = u / 2, hn = u % 2, f = u % 4;
            const uint8_t *sc = B + 32 + 16 * (2 * u) + 8 * h; /* sub-blocks 2u and 2u + 1 */
            for (int i = 0; i < 4; i++) { /* vectors 2i, 2i + 1: elements 8i .. 8i + 7 of each row */
                const __m256i s = scale_pairs(sc + 16 * (i / 2), 1);
                __m256i w[2];
                for (int e = 0; e < 2; e++) {
                    const int k = 2 * i + e;
                    const __m256i lv = _mm256_loadu_si256((const __m256i *)(B + R16Q6_V(c) + 64 * k + 32 * h));
                    const __m256i hv = _mm256_loadu_si256((const __m256i *)(B + R16Q6_H(u / 4) + 64 * k + 32 * h));
                    const __m256i l4 = _mm256_and_si256(hn ? _mm256_srli_epi16(lv, 4) : lv, m4);
                    const __m256i h2 = f == 0 ? _mm256_slli_epi16(hv, 4)
                                       : f == 1 ? _mm256_slli_epi16(hv, 2)
                                       : f == 2 ? hv
                                                : _mm256_srli_epi16(hv, 2);
                    w[e] = _mm256_or_si256(l4, _mm256_and_si256(h2, m2));
                }
                for (int j = 0; j < NT; j++) {
                    const int8_t *aq = act_k_at(act, xs, j, sb)->q + 32 * u + 8 * i;
                    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast32(aq)),
                                                       _mm256_maddubs_epi16(w[1], bcast32(aq + 4)));
                    is[j] = _mm256_add_epi32(is[j], _mm256_madd_epi16(p, s));
                    __asm__("" : "+x"(is[j])); /* as in sub_q4_k */
                }
            }
            const __m256i sp = two_pairs(sc, sc + 16, 1);
            for (int j = 0; j < NT; j++)
                is[j] = _mm256_add_epi32(is[j], _mm256_slli_epi32(_mm256_madd_epi16(sp, bcast32(act_k_at(act, xs, j, sb)->nbs + 2 * u)), 5));
        }
        const __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 16 * h)));
        for (int j = 0; j < NT; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_mul_ps(dd, _mm256_set1_ps(act_k_at(act, xs, j, sb)->d)),
                                     acc[j]);
    }
}

/* ------------------------------------------------------------------ the kernels for each token count
 *
 * quant_avx2_nb.h holds the kernels' bodies with the token count NB a macro, included once per
 * NB (a template, as quant_avx512_nb.h), so every loop over the tokens has a constant bound. */

enum { R16_Q4_0, R16_Q8_0, R16_Q4_K, R16_Q6_K, R16_TYPES };

#define ROWS_MAX_NB 8 /* Q5_0 kernels: 1..8 tokens; the 16-row ones: 1..SD_R16_MAX_TOKENS */
#define NB_CAT_(name, nb) name##_##nb
#define NB_CAT(name, nb) NB_CAT_(name, nb)
#define NBF(name) NB_CAT(name, NB)

#define SD_NB_BODY "kernels/quant_avx2_nb.h"
#include "kernels/quant_nb_each.h"
#undef SD_NB_BODY

typedef void (*rows_fn)(const sd_tensor *, const void *, size_t, float *, int64_t, int64_t);
static const rows_fn k_rows_q5_0[ROWS_MAX_NB + 1] = {NULL,        rows_q5_0_1, rows_q5_0_2, rows_q5_0_3, rows_q5_0_4,
                                                     rows_q5_0_5, rows_q5_0_6, rows_q5_0_7, rows_q5_0_8};

typedef void (*r16_fn)(const sd_r16_job *);
#define R16_ROW(name)                                                                                            \
    {NULL, name##_1, name##_2, name##_3, name##_4, name##_5, name##_6, name##_7, name##_8, name##_9}
static const r16_fn k_r16[R16_TYPES][SD_R16_MAX_TOKENS + 1] = {
    [R16_Q4_0] = R16_ROW(r16_q4_0), [R16_Q8_0] = R16_ROW(r16_q8_0), [R16_Q4_K] = R16_ROW(r16_q4_k),
    [R16_Q6_K] = R16_ROW(r16_q6_k)};

void sd_avx2_rows_q5_0(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1) {
    k_rows_q5_0[nb](W, act, xs, Y, r0, r1);
}

void sd_avx2_r16(sd_type t, int nb, const sd_r16_job *j) {
    const int K = t == SD_TYPE_Q4_0   ? R16_Q4_0
                  : t == SD_TYPE_Q8_0 ? R16_Q8_0
                  : t == SD_TYPE_Q4_K ? R16_Q4_K
                                      : R16_Q6_K;
    k_r16[K][nb](j);
}
