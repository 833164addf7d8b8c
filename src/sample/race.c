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

#define RACE_BLOCK 256 /* tokens per kernel call, into stack buffers */
#define RACE_MAX_TOP 64

/* Inserts token x with score sc into the best-first list top/out of m (at most count) entries;
 * strict comparisons, so the lower id keeps a tie (tokens arrive in id order). */
static int race_insert(float *top, int32_t *out, int m, int count, float sc, int32_t x) {
    if (!(sc > 0) || (m == count && !(sc > top[m - 1]))) return m; /* a massless token scores 0 */
    int j = m < count ? m++ : m - 1;
    while (j > 0 && top[j - 1] < sc) {
        top[j] = top[j - 1];
        out[j] = out[j - 1];
        j--;
    }
    top[j] = sc;
    out[j] = x;
    return m;
}

/* Once the list is full, later blocks score only the tokens sd_race_cands keeps (the others
 * cannot beat its last entry), with the same noise: the same list, the noise's divisions and
 * series spared for nearly every token of a large vocabulary. */
int sd_sample_coupled_top(const float *probs, int n, uint64_t key, int count, int32_t *out) {
    if (!probs || n <= 0 || count <= 0 || !out) return 0;
    if (count > RACE_MAX_TOP) count = RACE_MAX_TOP;
    float top[RACE_MAX_TOP], sc[RACE_BLOCK];
    uint8_t cand[RACE_BLOCK];
    int m = 0;
    for (int32_t x0 = 0; x0 < n; x0 += RACE_BLOCK) {
        const int nb = n - x0 < RACE_BLOCK ? n - x0 : RACE_BLOCK;
        if (m == count) {
            /* nearly every flag is 0 on a large vocabulary: most blocks keep none, and the
             * rest are tested 8 flags at a time (a branch per token took as long as the
             * candidate kernel itself) */
            if (!sd_race_cands(probs, key, x0, nb, top[m - 1], cand)) continue;
            for (int i0 = 0; i0 < nb; i0 += 8) {
                const int e = nb - i0 < 8 ? nb - i0 : 8;
                uint64_t any = 1; /* a short tail is read flag by flag */
                if (e == 8) memcpy(&any, cand + i0, 8);
                if (!any) continue;
                for (int i = i0; i < i0 + e; i++)
                    if (cand[i])
                        m = race_insert(top, out, m, count, probs[x0 + i] / sd_coupled_noise(key, x0 + i), x0 + i);
            }
            continue;
        }
        sd_race_scores(probs, key, x0, nb, sc); /* the active kernel path's loop */
        for (int i = 0; i < nb; i++) m = race_insert(top, out, m, count, sc[i], x0 + i);
    }
    return m;
}

int32_t sd_sample_coupled(const float *probs, int n, uint64_t key) {
    int32_t best;
    return sd_sample_coupled_top(probs, n, key, 1, &best) ? best : -1;
}
