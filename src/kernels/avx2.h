/* The inline helpers of the AVX2 path's files (kernels_avx2.c, quant_avx2.c): fixed-order
 * horizontal sums, tail masks and a vector exp. Included by those files only: everything here
 * is compiled for AVX2, FMA and F16C. */
#ifndef SD_KERNELS_AVX2_H
#define SD_KERNELS_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>


/* Lane i = sum of p[i]'s 8 lanes, for 8 vectors at once, by the tree ((e0 + e1) + (e2 + e3)) +
 * ((e4 + e5) + (e6 + e7)), which hsum8 uses too: a kernel may sum 8 rows or positions at once or
 * one at a time and get the same bits. */
static inline __m256 transpose_sum8(const __m256 p[8]) {
    const __m256 u0 = _mm256_hadd_ps(p[0], p[1]), u1 = _mm256_hadd_ps(p[2], p[3]);
    const __m256 u2 = _mm256_hadd_ps(p[4], p[5]), u3 = _mm256_hadd_ps(p[6], p[7]);
    const __m256 v0 = _mm256_hadd_ps(u0, u1), v1 = _mm256_hadd_ps(u2, u3);
    return _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
}

/* r[0..7] (rows of 8) transposed in place: r[d] then holds element d of each row. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) { /* rows 4i..4i+3: u[4i + d] holds their elements d and d + 4 */
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int d = 0; d < 4; d++) {
        r[d] = _mm256_permute2f128_ps(u[d], u[4 + d], 0x20);
        r[d + 4] = _mm256_permute2f128_ps(u[d], u[4 + d], 0x31);
    }
}

/* Sum of a's 8 lanes by transpose_sum8's tree. */
static inline float hsum8(__m256 a) {
    __m256 h = _mm256_hadd_ps(a, a); /* e0+e1, e2+e3 in each 128-bit half */
    h = _mm256_hadd_ps(h, h);        /* (e0+e1)+(e2+e3), (e4+e5)+(e6+e7) */
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* The largest of v's 8 lanes, by one fixed tree of max. */
static inline float hmax8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

/* Bit i set where lane i holds NaN or an infinity (x - x is NaN exactly for those). */
static inline int nonfinite8(__m256 x) {
    return _mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(x, x), _mm256_setzero_ps(), _CMP_NEQ_UQ));
}

/* Mask of the first `left` of 8 lanes (all for left >= 8, none for left <= 0), for maskload
 * and maskstore. */
static inline __m256i tail8(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* exp for 8 lanes: 2^n * e^r with n = round(x / ln 2), |r| <= ln2/2, Cephes' degree-6
 * polynomial for e^r (about 1 ulp, as the AVX-512 exp512), and 2^n built in the exponent bits;
 * x is clamped to [-87.34, 88.38] so that n stays in the normal range [-126, 127], and lanes
 * above expf's overflow threshold give +inf as expf does. A NaN stays NaN: max and min return
 * their second operand when one is NaN, so x goes second (the other order turned a NaN score
 * into a weight of 1e-38, and NaN weights of wq/wk vanished inside attention). */
static inline __m256 exp256(__m256 x) {
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283f), _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-87.33654f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(INFINITY), over);
}

#endif
