/* The integer kernels for NB tokens: quant_avx512.c defines NB and includes this file once for
 * each NB = 1..9 (so no include guard). With NB a constant, every loop over the tokens unrolls
 * and each (row or group, token) accumulator can stay in a register. NBF(name) is name_NB. */

#if NB <= ROWS_MAX_NB
/* Q5_0 rows [r0, r1) for NB tokens, one row at a time in visiting order, inside one call (was
 * a call per row, two accumulators per token and _mm512_reduce_add_ps; a 16-row variant with a
 * transposed reduction spilled its accumulators and measured slower than this). */
static void NBF(rows_q5_0)(const sd_tensor *W, const void *xa, size_t xs, float *Y, int64_t r0, int64_t r1) {
    const act_quad *X = xa;
    const int64_t nblk = W->cols / 32, ng = nblk / Q5_GROUP_BLOCKS;
    const int rest = (int)(nblk % Q5_GROUP_BLOCKS);
    const int64_t per = (r1 - r0) / QS_STREAMS;
    for (int64_t i = 0; i < r1 - r0; i++) {
        const int64_t r = visit_row(r0, per, i);
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
        __m512 acc[NB];
        for (int j = 0; j < NB; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t g = 0; g < ng; g++) {
            const uint8_t *b = row + (size_t)g * Q5_GROUP_BYTES;
            prefetch_ahead(b, Q5_GROUP_BYTES);
            group_q5_0(b, Q5_GROUP_BLOCKS, X, xs, g, acc, NB);
        }
        if (rest) group_q5_0(row + (size_t)ng * Q5_GROUP_BYTES, rest, X, xs, ng, acc, NB);
        for (int j = 0; j < NB; j++) Y[(size_t)j * W->rows + r] = tree_sum(acc[j]);
    }
}
#endif

/* acc[s][j] = 0 for the S groups of a step. */
static inline __attribute__((always_inline)) void NBF(zero_acc)(__m512 acc[][NB], const int S) {
    for (int s = 0; s < S; s++)
        for (int j = 0; j < NB; j++) acc[s][j] = _mm512_setzero_ps();
}

/* The Q4_0 (QB = 256 quant bytes per block) or Q8_0 (QB = 512) kernel's step: the blocks of S
 * groups (S a constant once inlined, so the accumulators can stay in registers), one block of
 * each in turn (a group read whole before the next, one stream per thread, measured slower; so
 * were two or four blocks per turn, and 6 or 8 streams were no better). Per block and token the
 * 8 dpbusd run as two chains of 4 (elements 0..15 and 16..31), interleaved across the tokens: a
 * single chain of 8 left the n = 5 kernel latency-bound (measured: commit 05f691d). */
static inline __attribute__((always_inline)) void NBF(r16_step_q)(const uint8_t *const *G, const int S, int64_t nblk,
                                                                  const uint8_t *act, size_t xs, r_layout L,
                                                                  __m512 acc[][NB], const int QB) {
    NBF(zero_acc)(acc, S);
    for (int64_t b = 0; b < nblk; b++) {
        const size_t qo = r_qoff(b, QB), so = r_soff(b, nblk, QB);
        for (int s = 0; s < S; s++) {
            prefetch_ahead(G[s] + qo, QB + 32);
            __m512i w[8], t[NB], u[NB];
            if (QB == 256) r_weights_q4_0(G[s] + qo, w);
            else r_weights_q8_0(G[s] + qo, w);
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G[s] + so)));
            for (int j = 0; j < NB; j++) {
                t[j] = _mm512_set1_epi32(ld32(act + (size_t)j * xs + L.init + 4 * b));
                u[j] = _mm512_setzero_si512();
            }
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < NB; j++) {
                    const uint8_t *aq = act + (size_t)j * xs + 32 * b + 4 * k;
                    t[j] = _mm512_dpbusd_epi32(t[j], w[k], _mm512_set1_epi32(ld32(aq)));
                    u[j] = _mm512_dpbusd_epi32(u[j], w[k + 4], _mm512_set1_epi32(ld32(aq + 16)));
                }
            for (int j = 0; j < NB; j++) {
                const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(ldf(act + (size_t)j * xs + L.d + 4 * b)));
                acc[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(t[j], u[j])), sc, acc[s][j]);
            }
        }
    }
}

/* Q4_K, 16 rows at once (layout: r_pack_group_k), as the AVX2 path: per super-block, row and
 * token an exact int32 sum over the sub-blocks of scale * dot and one of min * (sum of the
 * sub-block's activations) (dpwssd of (min, min') pairs by the record's bs32 pairs), then
 * acc = fma(float(sum), d * dx, acc) - float(msum) * (dmin * dx). Each 64-byte vector of a chunk
 * is loaded once for both of its sub-blocks (low nibbles: 2c, high: 2c + 1; masks and a shift,
 * not a GF(2) affine map, which shares dpbusd's pipes: commit 10fc9d8 for Q4_0). Per token a
 * sub-block's dot is one chain of 8 dpbusd (two chains of 4 for NB <= 2, where one per
 * sub-block would leave too few in flight). From 7 tokens the tokens go in two tiles, each
 * unpacking the chunk again from L1: one tile's chains beside every token's sums spilled. */
static inline __attribute__((always_inline)) void NBF(r16_step_q4_k)(const uint8_t *const *G, const int S,
                                                                     int64_t nblk, const uint8_t *act, size_t xs,
                                                                     __m512 acc[][NB]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t nsb = nblk / 8;
    enum { SPLIT = NB <= 2, TILE = NB <= 6 ? NB : (NB + 1) / 2 };
    NBF(zero_acc)(acc, S);
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512i f[QS_STREAMS][NB];
        for (int s = 0; s < S; s++)
            for (int j = 0; j < NB; j++) f[s][j] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) /* chunk c: sub-blocks 2c, 2c + 1 */
            for (int s = 0; s < S; s++) {
                const uint8_t *B = G[s] + (size_t)sb * R16K_SB;
                prefetch_ahead(B + (R16K_SB / 4) * c, R16K_SB / 4);
                const __m512i sa = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + 64 + 16 * (2 * c))));
                const __m512i sh = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + 64 + 16 * (2 * c + 1))));
#pragma GCC unroll 2
                for (int j0 = 0; j0 < NB; j0 += TILE) { /* the tokens in tiles, each unpacking the weights */
                    const int j1 = j0 + TILE < NB ? j0 + TILE : NB;
                    __m512i a[TILE], b[TILE], a2[TILE], b2[TILE];
                    for (int j = 0; j < j1 - j0; j++) a[j] = b[j] = a2[j] = b2[j] = _mm512_setzero_si512();
                    for (int k = 0; k < 8; k++) {
                        __m512i v = _mm512_loadu_si512(B + 320 + 512 * c + 64 * k);
                        __asm__("" : "+v"(v)); /* one load: GCC read v again as the AND's operand */
                        const __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                        for (int j = 0; j < j1 - j0; j++) {
                            const int8_t *aq = act_k_at(act, xs, j0 + j, sb)->q + 64 * c + 4 * k;
                            if (SPLIT && k >= 4) {
                                a2[j] = _mm512_dpbusd_epi32(a2[j], wl, _mm512_set1_epi32(ld32(aq)));
                                b2[j] = _mm512_dpbusd_epi32(b2[j], wh, _mm512_set1_epi32(ld32(aq + 32)));
                            } else {
                                a[j] = _mm512_dpbusd_epi32(a[j], wl, _mm512_set1_epi32(ld32(aq)));
                                b[j] = _mm512_dpbusd_epi32(b[j], wh, _mm512_set1_epi32(ld32(aq + 32)));
                            }
                        }
                    }
                    for (int j = 0; j < j1 - j0; j++) {
                        if (SPLIT) {
                            a[j] = _mm512_add_epi32(a[j], a2[j]);
                            b[j] = _mm512_add_epi32(b[j], b2[j]);
                        }
                        f[s][j0 + j] = _mm512_add_epi32(
                            f[s][j0 + j], _mm512_add_epi32(_mm512_mullo_epi32(a[j], sa), _mm512_mullo_epi32(b[j], sh)));
                    }
                }
            }
        for (int s = 0; s < S; s++) {
            const uint8_t *B = G[s] + (size_t)sb * R16K_SB;
            __m512i mp[4];
            for (int p = 0; p < 4; p++) {
                const __m512i m0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + 192 + 32 * p)));
                const __m512i m1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(B + 208 + 32 * p)));
                mp[p] = _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16));
            }
            const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)B));
            const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(B + 32)));
            for (int j = 0; j < NB; j++) {
                const act_k *A = act_k_at(act, xs, j, sb);
                __m512i gi = _mm512_setzero_si512();
                for (int p = 0; p < 4; p++)
                    gi = _mm512_dpwssd_epi32(gi, mp[p], _mm512_set1_epi32(ld32(A->bs32 + 2 * p)));
                const __m512 ad = _mm512_set1_ps(A->d);
                acc[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(f[s][j]), _mm512_mul_ps(dd, ad), acc[s][j]);
                acc[s][j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(gi), _mm512_mul_ps(dm, ad), acc[s][j]);
            }
        }
    }
}

/* Q6_K, 16 rows at once (layout: r_pack_group_q6), as the AVX2 path: per super-block and token
 * an exact int32 sum over the 16 sub-blocks of scale * dot, then acc = fma(float(sum), d * dx,
 * acc). A 6-bit value is its nibble OR'd with its 2-bit field moved to bits 4-5 (shifts and
 * masks: q6_field in quant_avx512.c); per token a sub-block's dot is a chain of 4 dpbusd started at
 * the record's nbs32 = -32 * (sum of its activations) for the offset (the weights are read as
 * unsigned). Larger batches take units in pairs (2p, 2p + 1), whose low nibbles share the vectors
 * V(p) and high bits H(p / 2), loaded once for both. Decode and passes of up to Q6_UNIT_NB tokens
 * take one unit at a time, loading the shared vectors again for each: there the paired order,
 * with half the loads and vector work, read memory slower in decode (measured: commit 49c43a0;
 * Q6_UNIT_NB in quant_avx512.c). */
static inline __attribute__((always_inline)) void NBF(r16_q6_k_unit)(const uint8_t *B, int u, const act_k *a,
                                                                     __m512i *is) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512i t[2];
    for (int h = 0; h < 2; h++) t[h] = _mm512_set1_epi32(a->nbs32[2 * u + h]);
    for (int k = 0; k < 4; k++)
        for (int h = 0; h < 2; h++) { /* elements 16h + 4k .. 16h + 4k + 3 */
            const __m512i v = _mm512_loadu_si512(B + R16Q6_V(u / 2) + 64 * (k + 4 * h));
            const __m512i x = _mm512_loadu_si512(B + R16Q6_H(u / 4) + 64 * (k + 4 * h));
            const __m512i w = _mm512_ternarylogic_epi32(u % 2 ? _mm512_srli_epi16(v, 4) : v,
                                                        _mm512_and_si512(q6_field(x, u % 4), m30), m4, 0xEC);
            t[h] = _mm512_dpbusd_epi32(t[h], w, _mm512_set1_epi32(ld32(a->q + 32 * u + 16 * h + 4 * k)));
        }
    for (int h = 0; h < 2; h++) {
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(B + 32 + 16 * (2 * u + h))));
        *is = _mm512_add_epi32(*is, _mm512_mullo_epi32(t[h], sc));
    }
}

/* The same unit for the first NT (<= NB) tokens, each unpacked weight vector taken by all of them.
 * Decode keeps the single-token unit above: run through this one (NT = 1, the record found per
 * token inside), decode was slower in every alternating round (measured: commit 7b7ddf3). */
static inline __attribute__((always_inline)) void NBF(r16_q6_k_unit_nt)(const uint8_t *B, int u, const uint8_t *act,
                                                                        size_t xs, int64_t sb, __m512i *is, const int NT) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512i t[NB][2];
    for (int j = 0; j < NT; j++)
        for (int h = 0; h < 2; h++) t[j][h] = _mm512_set1_epi32(act_k_at(act, xs, j, sb)->nbs32[2 * u + h]);
    for (int k = 0; k < 4; k++)
        for (int h = 0; h < 2; h++) {
            const __m512i v = _mm512_loadu_si512(B + R16Q6_V(u / 2) + 64 * (k + 4 * h));
            const __m512i x = _mm512_loadu_si512(B + R16Q6_H(u / 4) + 64 * (k + 4 * h));
            const __m512i w = _mm512_ternarylogic_epi32(u % 2 ? _mm512_srli_epi16(v, 4) : v,
                                                        _mm512_and_si512(q6_field(x, u % 4), m30), m4, 0xEC);
            for (int j = 0; j < NT; j++)
                t[j][h] = _mm512_dpbusd_epi32(t[j][h], w,
                                              _mm512_set1_epi32(ld32(act_k_at(act, xs, j, sb)->q + 32 * u + 16 * h + 4 * k)));
        }
    for (int h = 0; h < 2; h++) {
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(B + 32 + 16 * (2 * u + h))));
        for (int j = 0; j < NT; j++) is[j] = _mm512_add_epi32(is[j], _mm512_mullo_epi32(t[j][h], sc));
    }
}

static inline __attribute__((always_inline)) void NBF(r16_step_q6_k)(const uint8_t *const *G, const int S,
                                                                     int64_t nblk, const uint8_t *act, size_t xs,
                                                                     __m512 acc[][NB]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const int64_t nsb = nblk / 8;
    enum { TILE = NB <= 6 ? NB : (NB + 1) / 2 };
    NBF(zero_acc)(acc, S);
    for (int64_t sb = 0; sb < nsb; sb++)
        for (int s = 0; s < S; s++) {
            const uint8_t *B = G[s] + (size_t)sb * R16Q6_SB;
            __m512i is[NB];
            for (int j = 0; j < NB; j++) is[j] = _mm512_setzero_si512();
            if (NB == 1)
                for (int u = 0; u < 8; u++) {
                    prefetch_ahead(B + (R16Q6_SB / 8) * u, R16Q6_SB / 8);
                    NBF(r16_q6_k_unit)(B, u, act_k_at(act, xs, 0, sb), is);
                }
            else if (NB <= Q6_UNIT_NB)
                for (int u = 0; u < 8; u++) {
                    prefetch_ahead(B + (R16Q6_SB / 8) * u, R16Q6_SB / 8);
                    NBF(r16_q6_k_unit_nt)(B, u, act, xs, sb, is, NB);
                }
            else
#pragma GCC unroll 1
                for (int p = 0; p < 4; p++) {
                    prefetch_ahead(B + (R16Q6_SB / 4) * p, R16Q6_SB / 4);
#pragma GCC unroll 2
                    for (int j0 = 0; j0 < NB; j0 += TILE) { /* the tokens in tiles, each unpacking the weights */
                        const int j1 = j0 + TILE < NB ? j0 + TILE : NB;
#pragma GCC unroll 2
                        for (int h = 0; h < 2; h++) { /* elements 16h .. 16h + 15 of both units */
                            __m512i ta[TILE], tb[TILE];
                            for (int j = 0; j < j1 - j0; j++) {
                                const act_k *a = act_k_at(act, xs, j0 + j, sb);
                                ta[j] = _mm512_set1_epi32(a->nbs32[4 * p + h]);
                                tb[j] = _mm512_set1_epi32(a->nbs32[4 * p + 2 + h]);
                            }
#pragma GCC unroll 4
                            for (int k = 4 * h; k < 4 * h + 4; k++) {
                                const __m512i v = _mm512_loadu_si512(B + R16Q6_V(p) + 64 * k);
                                const __m512i x = _mm512_loadu_si512(B + R16Q6_H(p / 2) + 64 * k);
                                const __m512i xa = _mm512_and_si512(q6_field(x, (2 * p) % 4), m30);
                                const __m512i xb = _mm512_and_si512(q6_field(x, (2 * p + 1) % 4), m30);
                                const __m512i wa = _mm512_ternarylogic_epi32(v, xa, m4, 0xEC);
                                const __m512i wb = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), xb, m4, 0xEC);
                                for (int j = 0; j < j1 - j0; j++) {
                                    const int8_t *aq = act_k_at(act, xs, j0 + j, sb)->q + 64 * p + 4 * k;
                                    ta[j] = _mm512_dpbusd_epi32(ta[j], wa, _mm512_set1_epi32(ld32(aq)));
                                    tb[j] = _mm512_dpbusd_epi32(tb[j], wb, _mm512_set1_epi32(ld32(aq + 32)));
                                }
                            }
                            const uint8_t *sc = B + 32 + 16 * (4 * p + h); /* sub-blocks 4p + h, 4p + 2 + h */
                            const __m512i sa = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc));
                            const __m512i sbv = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 32)));
                            for (int j = 0; j < j1 - j0; j++)
                                is[j0 + j] = _mm512_add_epi32(
                                    is[j0 + j],
                                    _mm512_add_epi32(_mm512_mullo_epi32(ta[j], sa), _mm512_mullo_epi32(tb[j], sbv)));
                        }
                    }
                }
            const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)B));
            for (int j = 0; j < NB; j++) {
                const __m512 ad = _mm512_set1_ps(act_k_at(act, xs, j, sb)->d);
                acc[s][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[j]), _mm512_mul_ps(dd, ad), acc[s][j]);
            }
        }
}

/* The step of weight type K (a constant once inlined). */
static inline __attribute__((always_inline)) void NBF(r16_step)(const int K, const uint8_t *const *G, const int S,
                                                                int64_t nblk, const uint8_t *act, size_t xs, r_layout L,
                                                                __m512 acc[][NB]) {
    switch (K) {
    case R16_Q4_0: NBF(r16_step_q)(G, S, nblk, act, xs, L, acc, 256); break;
    case R16_Q8_0: NBF(r16_step_q)(G, S, nblk, act, xs, L, acc, 512); break;
    case R16_Q4_K: NBF(r16_step_q4_k)(G, S, nblk, act, xs, acc); break;
    default: NBF(r16_step_q6_k)(G, S, nblk, act, xs, acc);
    }
}

/* The driver of every 16-row kernel for weight type K (a constant once inlined): groups
 * [g0, g1) (P is group g0, gbytes per group) one at a time, in order (one sequential weight
 * stream per thread: see "Groups in flight" in quant_avx512.c); the step computes the group's
 * accumulators and the driver stores them, the last group's padding rows masked off. */
static inline __attribute__((always_inline)) void NBF(r16_run)(const int K, const uint8_t *P, size_t gbytes,
                                                               int64_t nblk, int64_t rows, const uint8_t *act,
                                                               size_t xs, r_layout L, float *Y, int64_t g0,
                                                               int64_t g1) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *G[1] = {P + (size_t)(g - g0) * gbytes};
        __m512 acc[1][NB];
        NBF(r16_step)(K, G, 1, nblk, act, xs, L, acc);
        const int64_t r = 16 * g;
        const __mmask16 m = rows - r >= 16 ? 0xFFFF : (__mmask16)((1u << (rows - r)) - 1);
        for (int j = 0; j < NB; j++) _mm512_mask_storeu_ps(Y + (size_t)j * rows + r, m, acc[0][j]);
    }
}

/* The kernels of the table k_r16 for NB tokens. */
static void NBF(r16_q4_0)(const uint8_t *P, size_t gbytes, int64_t nblk, int64_t rows, const uint8_t *act, size_t xs,
                          r_layout L, float *Y, int64_t g0, int64_t g1) {
    NBF(r16_run)(R16_Q4_0, P, gbytes, nblk, rows, act, xs, L, Y, g0, g1);
}
static void NBF(r16_q8_0)(const uint8_t *P, size_t gbytes, int64_t nblk, int64_t rows, const uint8_t *act, size_t xs,
                          r_layout L, float *Y, int64_t g0, int64_t g1) {
    NBF(r16_run)(R16_Q8_0, P, gbytes, nblk, rows, act, xs, L, Y, g0, g1);
}
static void NBF(r16_q4_k)(const uint8_t *P, size_t gbytes, int64_t nblk, int64_t rows, const uint8_t *act, size_t xs,
                          r_layout L, float *Y, int64_t g0, int64_t g1) {
    NBF(r16_run)(R16_Q4_K, P, gbytes, nblk, rows, act, xs, L, Y, g0, g1);
}
static void NBF(r16_q6_k)(const uint8_t *P, size_t gbytes, int64_t nblk, int64_t rows, const uint8_t *act, size_t xs,
                          r_layout L, float *Y, int64_t g0, int64_t g1) {
    NBF(r16_run)(R16_Q6_K, P, gbytes, nblk, rows, act, xs, L, Y, g0, g1);
}
