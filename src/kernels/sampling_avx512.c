/* The sampling pipeline's vector loops (sampling.h) compiled for the AVX-512 path: the softmax
 * numerators and the exponential race's scores, in its table (kernels_avx512.c). */
#include "kernels/isa.h"
#include "kernels/sampling.h"

double sd_avx512_softmax_numerators(const float *x, int n, float mx, float t, float *out) {
    return numerators(x, n, mx, t, out);
}

void sd_avx512_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc) {
    race_scores(probs, key, x0, n, sc);
}

int sd_avx512_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand) {
    return race_cands(probs, key, x0, n, floor, cand);
}

int32_t sd_avx512_row_argmax(const float *x, int n) { return row_argmax(x, n); }

int sd_avx512_row_nonfinite(const float *x, int n) { return row_nonfinite(x, n); }
