/* The AVX2 integer kernels for NB tokens: quant_avx2.c defines NB and includes this file once for
 * each NB = 1..9 (so no include guard). With NB a constant, every loop over the tokens unrolls
 * and each (row or group, token) accumulator can stay in a register. NBF(name) is name_NB. */

#if NB <= ROWS_MAX_NB
/* Q5_0 rows [r0, r1) for NB tokens, one row at a time (file layout): per block, its 32 weights
 * (unsigned, value + 16) times the block's 32 activations (act_quad's two halves), pairs into
 * 8 int32 lanes, each lane also taking 1/8 of the -16 * sum correction (act_quad's init holds a
 * quarter: -4 * sum), then acc = fma(float, dw * dx, acc); hsum8 at the end of the row. */
static void NBF(rows_q5_0)(const sd_tensor *W, const void *xa, size_t xs, float *Y, int64_t r0, int64_t r1) {
    const act_quad *X = xa;
    const int64_t nblk = W->cols / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
        __m256 acc[NB];
        for (int j = 0; j < NB; j++) acc[j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nblk; b++) {
            const uint8_t *blk = row + (size_t)b * SD_Q5_0_BYTES;
            if (!(b & 3)) prefetch_ahead(blk, 4 * SD_Q5_0_BYTES);
            const __m256i w = q5_0_weights(blk);
            const float dw = h2f(blk);
            const int k = (int)(b & 3);
            for (int j = 0; j < NB; j++) {
                const act_quad *a = X + (size_t)j * xs + b / 4;
                const __m256i av = _mm256_loadu2_m128i((const __m128i *)(a->hi + 16 * k), (const __m128i *)(a->lo + 16 * k));
                const __m256i t = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w, av), ones),
                                                   _mm256_set1_epi32(a->init[4 * k] / 2));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(dw * a->d[4 * k]), acc[j]);
            }
        }
        for (int j = 0; j < NB; j++) Y[(size_t)j * W->rows + r] = hsum8(acc[j]);
    }
}
#endif

/* Q4_0 (QB = 256 quant bytes per 16-row block) or Q8_0 (QB = 512): half h (rows 8h..8h+7) of
 * a group, every block in order; per block and token acc = fma(float(int dot), dw * dx, acc).
 * Q4_0: the 8 maddubs of a block (low nibbles are elements 4k.., high ones 16 + 4k..) summed as
 * int16, one madd, plus the act record's -8 * sum; Q8_0: |w| * sign(a, w), a madd each. */
static inline __attribute__((always_inline)) void NBF(half_q)(const uint8_t *G, int h, int64_t nblk, const uint8_t *act,
                                                              size_t xs, r_layout L, __m256 *acc, const int QB) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80);
    for (int j = 0; j < NB; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nblk; b++) {
        const size_t qo = r_qoff(b, QB), so = r_soff(b, nblk, QB);
        if (h == 0) prefetch_ahead(G + qo, QB + 32); /* half 1 then finds the lines in the caches */
        const uint8_t *Q = G + qo + 32 * h;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + so + 16 * h)));
        __m256i w[8], wa[8];
        if (QB == 256) {
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(Q + 64 * k));
                w[k] = _mm256_and_si256(v, m4);
                w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
        } else {
            for (int k = 0; k < 8; k++) {
                w[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(Q + 64 * k)), flip); /* signed */
                wa[k] = _mm256_abs_epi8(w[k]);
            }
        }
        for (int j = 0; j < NB; j++) {
            const uint8_t *aq = act + (size_t)j * xs + 32 * b;
            __m256i t;
            if (QB == 256) {
                __m256i s = _mm256_maddubs_epi16(w[0], bcast32(aq));
                for (int k = 1; k < 4; k++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[k], bcast32(aq + 4 * k)));
                for (int k = 0; k < 4; k++)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(w[k + 4], bcast32(aq + 16 + 4 * k)));
                t = _mm256_add_epi32(_mm256_madd_epi16(s, ones), bcast32(act + (size_t)j * xs + L.init + 4 * b));
            } else {
                t = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[0], _mm256_sign_epi8(bcast32(aq), w[0])), ones);
                for (int k = 1; k < 8; k++)
                    t = _mm256_add_epi32(
                        t, _mm256_madd_epi16(_mm256_maddubs_epi16(wa[k], _mm256_sign_epi8(bcast32(aq + 4 * k), w[k])), ones));
            }
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(ldf(act + (size_t)j * xs + L.d + 4 * b)));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), sc, acc[j]);
        }
    }
}

/* Q6_K, half h of a group (layout: r_pack_group_q6): per 32-element unit the 6-bit values are
 * the low nibbles OR'd with the high bits moved to bits 4-5; per token, pairs of maddubs (<= 2
 * x 16002 per int16) madd'ed by the two 16-element sub-blocks' (scale, scale) pairs, plus the
 * -32 * sum offset as 32 * madd((sc, sc') pairs, the record's -sum pairs); per super-block
 * acc = fma(float(int32 sum), d * dx, acc). */
static inline __attribute__((always_inline)) void NBF(half_q6_k)(const uint8_t *G, int h, int64_t nblk,
                                                                 const uint8_t *act, size_t xs, __m256 *acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    for (int j = 0; j < NB; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nblk / 8; sb++) {
        const uint8_t *B = G + (size_t)sb * R16Q6_SB;
        if (h == 0) prefetch_ahead(B, R16Q6_SB);
        __m256i is[NB];
        for (int j = 0; j < NB; j++) is[j] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) {
            /* unrolled, so that each unit's shifts are constants: 42% fewer instructions at one
             * token than the loop with its per-vector branches (callgrind) */
            const int c = u / 2, hn = u % 2, f = u % 4;
            __m256i w[8];
            for (int k = 0; k < 8; k++) {
                const __m256i lv = _mm256_loadu_si256((const __m256i *)(B + R16Q6_V(c) + 64 * k + 32 * h));
                const __m256i hv = _mm256_loadu_si256((const __m256i *)(B + R16Q6_H(u / 4) + 64 * k + 32 * h));
                const __m256i l4 = _mm256_and_si256(hn ? _mm256_srli_epi16(lv, 4) : lv, m4);
                const __m256i h2 = f == 0 ? _mm256_slli_epi16(hv, 4)
                                   : f == 1 ? _mm256_slli_epi16(hv, 2)
                                   : f == 2 ? hv
                                            : _mm256_srli_epi16(hv, 2);
                w[k] = _mm256_or_si256(l4, _mm256_and_si256(h2, m2));
            }
            const uint8_t *sc = B + 32 + 16 * (2 * u) + 8 * h; /* sub-blocks 2u and 2u + 1 */
            const __m256i s0 = scale_pairs(sc, 1), s1 = scale_pairs(sc + 16, 1), sp = two_pairs(sc, sc + 16, 1);
            for (int j = 0; j < NB; j++) {
                const act_k *a = act_k_at(act, xs, j, sb);
                const int8_t *aq = a->q + 32 * u;
                __m256i p[4];
                for (int i = 0; i < 4; i++)
                    p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(w[2 * i], bcast32(aq + 8 * i)),
                                            _mm256_maddubs_epi16(w[2 * i + 1], bcast32(aq + 8 * i + 4)));
                const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p[0], s0), _mm256_madd_epi16(p[1], s0)),
                                                   _mm256_add_epi32(_mm256_madd_epi16(p[2], s1), _mm256_madd_epi16(p[3], s1)));
                const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sp, bcast32(a->nbs + 2 * u)), 5);
                is[j] = _mm256_add_epi32(is[j], _mm256_add_epi32(t, off));
            }
        }
        const __m256 dd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(B + 16 * h)));
        for (int j = 0; j < NB; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[j]), _mm256_mul_ps(dd, _mm256_set1_ps(act_k_at(act, xs, j, sb)->d)),
                                     acc[j]);
    }
}

/* The driver of every 16-row kernel for weight type K (a constant once inlined): groups [g0, g1)
 * in order, each as its two halves of 8 rows (the second reads the group's lines from the
 * caches), the last group's rows past the matrix not stored. */
static inline __attribute__((always_inline)) void NBF(r16_run)(const int K, const sd_r16_job *J) {
    for (int64_t g = J->g0; g < J->g1; g++) {
        const uint8_t *G = J->P + (size_t)(g - J->g0) * J->gbytes;
        for (int h = 0; h < 2 && 16 * g + 8 * h < J->rows; h++) {
            __m256 acc[NB];
            switch (K) {
            case R16_Q4_0: NBF(half_q)(G, h, J->nblk, J->act, J->xs, J->L, acc, 256); break;
            case R16_Q8_0: NBF(half_q)(G, h, J->nblk, J->act, J->xs, J->L, acc, 512); break;
            case R16_Q4_K: /* tokens in chunks of at most K_CHUNK, each over the group's bytes */
                _Pragma("GCC unroll 3") for (int j0 = 0; j0 < NB; j0 += K_CHUNK)
                    half_q4_k(G, h, J->nblk, J->act + (size_t)j0 * J->xs, J->xs, acc + j0,
                              NB - j0 < K_CHUNK ? NB - j0 : K_CHUNK, j0 == 0);
                break;
            default: NBF(half_q6_k)(G, h, J->nblk, J->act, J->xs, acc);
            }
            for (int j = 0; j < NB; j++) store_rows(J->Y, J->rows, 16 * g + 8 * h, j, acc[j]);
        }
    }
}

static void NBF(r16_q4_0)(const sd_r16_job *J) { NBF(r16_run)(R16_Q4_0, J); }
static void NBF(r16_q8_0)(const sd_r16_job *J) { NBF(r16_run)(R16_Q8_0, J); }
static void NBF(r16_q4_k)(const sd_r16_job *J) { NBF(r16_run)(R16_Q4_K, J); }
static void NBF(r16_q6_k)(const sd_r16_job *J) { NBF(r16_run)(R16_Q6_K, J); }
