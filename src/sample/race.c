/* Coupled sampling (sample.h): the exponential race over noise hashed from (seed, position,
 * token). The noise and the per-token scores are kernels (kernels/sampling.h: compiled for each
 * instruction-set path, the same bits on all); this file keeps the key and the selection. */
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "specdec/sample.h"

uint64_t sd_coupled_key(uint64_t seed, int64_t pos) {
    return mix64(mix64(seed + GOLDEN64) ^ mix64((uint64_t)pos * GOLDEN64 + 0x632be59bd9b4e019ULL));
}

float sd_coupled_noise(uint64_t key, int32_t x) { return race_noise(race_hash(key, x)); }

#define RACE_BLOCK 256 /* tokens scored per kernel call, into a stack buffer */
/* Once a block has set the best score, later blocks score only the tokens sd_race_cands keeps (the
 * others cannot beat it), with the same noise: the same winner, the noise's divisions and series
 * spared for nearly every token of a large vocabulary. */
int32_t sd_sample_coupled(const float *probs, int n, uint64_t key) {
    if (!probs || n <= 0) return -1;
    int32_t best = -1;
    float top = 0.0f, sc[RACE_BLOCK];
    uint8_t cand[RACE_BLOCK];
    for (int32_t x0 = 0; x0 < n; x0 += RACE_BLOCK) {
        const int m = n - x0 < RACE_BLOCK ? n - x0 : RACE_BLOCK;
        if (top > 0) {
            /* nearly every flag is 0 on a large vocabulary: most blocks keep none, and the
             * rest are tested 8 flags at a time (a branch per token took as long as the
             * candidate kernel itself) */
            if (!sd_race_cands(probs, key, x0, m, top, cand)) continue;
            for (int i0 = 0; i0 < m; i0 += 8) {
                const int e = m - i0 < 8 ? m - i0 : 8;
                uint64_t any = 1; /* a short tail is read flag by flag */
                if (e == 8) memcpy(&any, cand + i0, 8);
                if (!any) continue;
                for (int i = i0; i < i0 + e; i++) {
                    if (!cand[i]) continue;
                    const float s = probs[x0 + i] / sd_coupled_noise(key, x0 + i);
                    if (s > top) top = s, best = x0 + i;
                }
            }
            continue;
        }
        sd_race_scores(probs, key, x0, m, sc); /* the active kernel path's loop */
        for (int i = 0; i < m; i++)
            if (sc[i] > top) { /* strict: the lower id keeps a tie; a massless token scores 0 */
                top = sc[i];
                best = x0 + i;
            }
    }
    return best;
}

int sd_sample_coupled_top(const float *probs, int n, uint64_t key, int count, int32_t *out) {
    if (!probs || n <= 0 || count <= 0 || !out) return 0;
    if (count > 64) count = 64;
    float top[64], sc[RACE_BLOCK];
    int m = 0;
    for (int32_t x0 = 0; x0 < n; x0 += RACE_BLOCK) {
        const int nb = n - x0 < RACE_BLOCK ? n - x0 : RACE_BLOCK;
        sd_race_scores(probs, key, x0, nb, sc);
        for (int i = 0; i < nb; i++) {
            const float s = sc[i];
            if (!(s > 0) || (m == count && !(s > top[m - 1]))) continue;
            int j = m < count ? m++ : m - 1;
            while (j > 0 && top[j - 1] < s) {
                top[j] = top[j - 1];
                out[j] = out[j - 1];
                j--;
            }
            top[j] = s;
            out[j] = x0 + i;
        }
    }
    return m;
}
