/* The AVX2 integer kernels for NB tokens: quant_avx2.c defines NB and includes this file once for
 * each NB = 1..9 (so no include guard). With NB a constant, every loop over the tokens unrolls
 * and each (row or group, token) accumulator can stay in a register. NBF(name) is name_NB. The
 * 16-row kernels' bodies (half_q, half_q4_k, half_q6_k) are in quant_avx2.c, over a constant
 * count of tokens per chunk; the driver here splits NB into those chunks. */

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

/* The driver of every 16-row kernel for weight type K (a constant once inlined): groups [g0, g1)
 * in order, each as its two halves of 8 rows (the second reads the group's lines from the
 * caches), the last group's rows past the matrix not stored. */
static inline __attribute__((always_inline)) void NBF(r16_run)(const int K, const sd_r16_job *J) {
    for (int64_t g = J->g0; g < J->g1; g++) {
        const uint8_t *G = J->P + (size_t)(g - J->g0) * J->gbytes;
        for (int h = 0; h < 2 && 16 * g + 8 * h < J->rows; h++) {
            __m256 acc[NB];
            /* tokens in chunks of at most C, each over the group's bytes */
            const int C = K == R16_Q6_K ? SD_R16_MAX_TOKENS : R16_CHUNK;
            _Pragma("GCC unroll 2") for (int j0 = 0; j0 < NB; j0 += C) {
                const int nt = NB - j0 < C ? NB - j0 : C;
                const uint8_t *act = J->act + (size_t)j0 * J->xs;
                if (K == R16_Q4_K) half_q4_k(G, h, J->nblk, act, J->xs, acc + j0, nt, j0 == 0);
                else if (K == R16_Q6_K) half_q6_k(G, h, J->nblk, act, J->xs, acc + j0, nt, j0 == 0);
                else half_q(G, h, J->nblk, act, J->xs, J->L, acc + j0, K == R16_Q4_0 ? 256 : 512, nt, j0 == 0);
            }
            for (int j = 0; j < NB; j++) store_rows(J->Y, J->rows, 16 * g + 8 * h, j, acc[j]);
        }
    }
}

static void NBF(r16_q4_0)(const sd_r16_job *J) { NBF(r16_run)(R16_Q4_0, J); }
static void NBF(r16_q8_0)(const sd_r16_job *J) { NBF(r16_run)(R16_Q8_0, J); }
static void NBF(r16_q4_k)(const sd_r16_job *J) { NBF(r16_run)(R16_Q4_K, J); }
static void NBF(r16_q6_k)(const sd_r16_job *J) { NBF(r16_run)(R16_Q6_K, J); }
