/* The sampling pipeline's vector loops (sampling.h): the active path's, and the portable path's
 * (compiled here for the generic baseline); the race's selection over a row (sd_race_top). */
#include <omp.h>
#include <string.h>

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

#define RACE_BLOCK 256       /* tokens per kernel call, into stack buffers */
#define RACE_PAR_MIN 65536   /* rows this long are split across the team (measured: commit a4c38e9) */
#define RACE_MAX_THREADS 8   /* a row's split needs no more */

/* Inserts token x with score sc into the best-first list top/out of m (at most count) entries;
 * strict comparisons, so the entry inserted first keeps a tie (tokens arrive in id order). */
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

/* The best list over tokens [x_begin, x_end). Once the list is full, later blocks score only the
 * tokens sd_race_cands keeps (the others cannot beat its last entry), with the same noise: the
 * same list, the noise's divisions and series spared for nearly every token of a large row. */
static int race_range(const float *probs, int32_t x_begin, int32_t x_end, uint64_t key, int count, float *top,
                      int32_t *out) {
    float sc[RACE_BLOCK];
    uint8_t cand[RACE_BLOCK];
    int m = 0;
    for (int32_t x0 = x_begin; x0 < x_end; x0 += RACE_BLOCK) {
        const int nb = x_end - x0 < RACE_BLOCK ? x_end - x0 : RACE_BLOCK;
        if (m == count) {
            /* nearly every flag is 0 on a large row: most blocks keep none, and the rest are
             * tested 8 flags at a time (a branch per token took as long as the candidate
             * kernel itself) */
            if (!sd_race_cands(probs, key, x0, nb, top[m - 1], cand)) continue;
            for (int i0 = 0; i0 < nb; i0 += 8) {
                const int e = nb - i0 < 8 ? nb - i0 : 8;
                uint64_t any = 1; /* a short tail is read flag by flag */
                if (e == 8) memcpy(&any, cand + i0, 8);
                if (!any) continue;
                for (int i = i0; i < i0 + e; i++)
                    if (cand[i])
                        m = race_insert(top, out, m, count, probs[x0 + i] / race_noise(race_hash(key, x0 + i)), x0 + i);
            }
            continue;
        }
        sd_race_scores(probs, key, x0, nb, sc);
        for (int i = 0; i < nb; i++) m = race_insert(top, out, m, count, sc[i], x0 + i);
    }
    return m;
}

int sd_race_top(const float *probs, int n, uint64_t key, int count, int32_t *out) {
    float best[SD_RACE_MAX_TOP];
    if (n < RACE_PAR_MIN || omp_get_max_threads() < 2 || omp_in_parallel())
        return race_range(probs, 0, n, key, count, best, out);
    float top[RACE_MAX_THREADS][SD_RACE_MAX_TOP];
    int32_t ids[RACE_MAX_THREADS][SD_RACE_MAX_TOP];
    int got[RACE_MAX_THREADS] = {0};
    const int nt = omp_get_max_threads() < RACE_MAX_THREADS ? omp_get_max_threads() : RACE_MAX_THREADS;
    const int nblk = (n + RACE_BLOCK - 1) / RACE_BLOCK;
#pragma omp parallel num_threads(nt)
    {
        /* contiguous ranges of whole blocks, in id order by thread number */
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        const int32_t b = (int32_t)((int64_t)nblk * id / tn * RACE_BLOCK),
                      e = (int32_t)((int64_t)nblk * (id + 1) / tn * RACE_BLOCK);
        got[id] = race_range(probs, b, e < n ? e : n, key, count, top[id], ids[id]);
    }
    /* merged in thread (so id) order: a tie keeps the lower id, as in one pass */
    int m = 0;
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < got[t]; i++) m = race_insert(best, out, m, count, top[t][i], ids[t][i]);
    return m;
}

int32_t sd_row_argmax(const float *x, int n) { return sd_kernels()->row_argmax(x, n); }

int sd_row_nonfinite(const float *x, int n) { return sd_kernels()->row_nonfinite(x, n); }
