/* Horizontal sums of AVX-512 vectors with one fixed addition tree: a 16-way transposed
 * reduction (attention scores) and a single-vector one (quantised kernels) that give the same
 * bits for a lane, so a kernel may sum 16 rows or positions at once or one at a time. */
#ifndef SPECDEC_KERNELS_REDUCE_H
#define SPECDEC_KERNELS_REDUCE_H

#include <immintrin.h>

/* Lane i = sum of p[i]'s 16 lanes, for 16 vectors at once: 45 shuffles and adds instead of
 * ~8 operations per sum. The tree for each p[i] (within each 128-bit lane L: (e0 + e2) +
 * (e1 + e3) = S_L; then (S_0 + S_1) + (S_2 + S_3)) is tree_sum's. */
static inline __m512 transpose_sum16(const __m512 p[16]) {
    __m512 u[8], v[4];
    for (int k = 0; k < 8; k++)
        u[k] = _mm512_add_ps(_mm512_unpacklo_ps(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_ps(p[2 * k], p[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        const __m512d a = _mm512_castps_pd(u[2 * k]), b = _mm512_castps_pd(u[2 * k + 1]);
        v[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88), _mm512_shuffle_f32x4(v[0], v[1], 0xDD));
    const __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x88), _mm512_shuffle_f32x4(v[2], v[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xDD));
}

/* Sum of a's 16 lanes by transpose_sum16's tree (float addition is commutative, so adding a
 * lane's partner from either side gives the same bits). */
static inline float tree_sum(__m512 a) {
    __m512 t = _mm512_add_ps(a, _mm512_permute_ps(a, 0x4E));          /* e + (e ^ 2) */
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));                  /* + partner e ^ 1 */
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));            /* 128-bit lanes L0+L1, L2+L3 */
    t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0x4E));            /* (L0+L1) + (L2+L3) */
    return _mm512_cvtss_f32(t);
}

#endif
