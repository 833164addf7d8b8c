/* Coupled sampling (sample.h): the exponential race over noise hashed from (seed, position,
 * token). The noise, the scores and the selection over a row are kernels (kernels/sampling.h,
 * compiled for each instruction-set path with the same bits on all; sd_race_top, which splits a
 * large row across the threads); this file keeps the key and the public calls. */
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "specdec/sample.h"

uint64_t sd_coupled_key(uint64_t seed, int64_t pos) {
    return mix64(mix64(seed + GOLDEN64) ^ mix64((uint64_t)pos * GOLDEN64 + 0x632be59bd9b4e019ULL));
}

float sd_coupled_noise(uint64_t key, int32_t x) { return race_noise(race_hash(key, x)); }

int sd_sample_coupled_top(const float *probs, int n, uint64_t key, int count, int32_t *out) {
    if (!probs || n <= 0 || count <= 0 || !out) return 0;
    return sd_race_top(probs, n, key, count > SD_RACE_MAX_TOP ? SD_RACE_MAX_TOP : count, out);
}

int32_t sd_sample_coupled(const float *probs, int n, uint64_t key) {
    int32_t best;
    return sd_sample_coupled_top(probs, n, key, 1, &best) ? best : -1;
}
