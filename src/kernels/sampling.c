/* The sampling pipeline's vector loops (sampling.h): the active path's, and the portable path's
 * (compiled here for the generic baseline). */
#include "kernels/isa.h"
#include "kernels/portable.h"
#include "kernels/sampling.h"

double sd_portable_softmax_numerators(const float *x, int n, float mx, float t, float *out) {
    return numerators(x, n, mx, t, out);
}

void sd_portable_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc) {
    race_scores(probs, key, x0, n, sc);
}

int sd_portable_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand) {
    return race_cands(probs, key, x0, n, floor, cand);
}

int32_t sd_portable_row_argmax(const float *x, int n) { return row_argmax(x, n); }

int sd_portable_row_nonfinite(const float *x, int n) { return row_nonfinite(x, n); }

double sd_softmax_numerators(const float *x, int n, float mx, float t, float *out) {
    return sd_kernels()->softmax_numerators(x, n, mx, t, out);
}

void sd_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc) {
    sd_kernels()->race_scores(probs, key, x0, n, sc);
}

int sd_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand) {
    return sd_kernels()->race_cands(probs, key, x0, n, floor, cand);
}

int32_t sd_row_argmax(const float *x, int n) { return sd_kernels()->row_argmax(x, n); }

int sd_row_nonfinite(const float *x, int n) { return sd_kernels()->row_nonfinite(x, n); }
