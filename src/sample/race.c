/* Coupled sampling (sample.h): the exponential race over noise hashed from (seed, position,
 * token). Its own file because it is compiled with -fno-trapping-math (CMakeLists.txt): that
 * lets the compiler vectorise the noise's selects, and changes no result (nothing here reads
 * the floating-point exception flags). */
#include <stdint.h>
#include <string.h>

#include "specdec/sample.h"

/* SplitMix64's finaliser: a bijection of 64 bits whose every output bit depends on every input
 * bit; fed a counter it passes BigCrush, which is what a counter-based generator needs. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define GOLDEN64 0x9e3779b97f4a7c15ULL

uint64_t sd_coupled_key(uint64_t seed, int64_t pos) {
    return mix64(mix64(seed + GOLDEN64) ^ mix64((uint64_t)pos * GOLDEN64 + 0x632be59bd9b4e019ULL));
}

/* -ln(1 - V) for V in (0, 1), by 2 atanh(s) = ln((1 + s) / (1 - s)) with |s| <= 0.172:
 * - V <= 0.29: ln(1 - V) = 2 atanh(-V / (2 - V)), computed from V itself, so a tiny V (a tiny
 *   E, which makes a token likely to win) keeps its relative precision;
 * - else W = 1 - V = m 2^e with m in [sqrt(1/2), sqrt(2)): ln W = e ln 2 + 2 atanh((m-1)/(m+1)).
 * The series to s^9 leaves a relative error below 2e-9, under float's rounding. Only IEEE +, -,
 * *, / and integer operations, both branches computed and one selected: the same bits whether
 * the compiler vectorises the loop or not, and no branch to stop it from doing so. */
static inline float race_noise(uint64_t z) {
    const uint32_t v = (uint32_t)(z >> 32);
    float V = (float)(v | 1u) * 0x1p-32f; /* | 1: never 0 (an odd v is as likely as any) */
    const float vmax = 0x1.fffffep-1f;
    V = V > vmax ? vmax : V; /* rounding to 1 would make E infinite */
    const float w = 1.0f - V;
    uint32_t b;
    memcpy(&b, &w, sizeof b);
    const uint32_t mb = (b & 0x007fffffu) | 0x3f800000u; /* the mantissa in [1, 2) */
    float m1;
    memcpy(&m1, &mb, sizeof m1);
    const float mh = m1 * 0.5f;
    const int big = m1 > 1.41421356f;
    const float m = big ? mh : m1;
    const float ex = (float)((int32_t)(b >> 23) - 127 + big);
    /* every operand computed, then selected: no branch, no conditional arithmetic */
    const float num_s = -V, den_s = 2.0f - V, num_b = m - 1.0f, den_b = m + 1.0f;
    const int small = V <= 0.29f;
    const float num = small ? num_s : num_b, den = small ? den_s : den_b, e = small ? 0.0f : ex;
    const float s = num / den, t = s * s;
    const float series = 1.0f + t * (1.0f / 3 + t * (1.0f / 5 + t * (1.0f / 7 + t * (1.0f / 9))));
    return -(e * 0.693147180559945f + 2.0f * s * series);
}

static inline uint64_t race_hash(uint64_t key, int32_t x) { return mix64(key + (uint64_t)(uint32_t)x * GOLDEN64); }

float sd_coupled_noise(uint64_t key, int32_t x) { return race_noise(race_hash(key, x)); }

/* Scores p / E of tokens x0..x0+n into sc (0 for a token without mass), block by block so that
 * the loop is one straight vector loop. */
#define RACE_BLOCK 256
static void race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc) {
    for (int i = 0; i < n; i++) {
        /* E > 0 always, so a token without mass scores 0 by the division itself */
        sc[i] = probs[x0 + i] / race_noise(race_hash(key, x0 + i));
    }
}

int32_t sd_sample_coupled(const float *probs, int n, uint64_t key) {
    if (!probs || n <= 0) return -1;
    int32_t best = -1;
    float top = 0.0f, sc[RACE_BLOCK];
    for (int32_t x0 = 0; x0 < n; x0 += RACE_BLOCK) {
        const int m = n - x0 < RACE_BLOCK ? n - x0 : RACE_BLOCK;
        race_scores(probs, key, x0, m, sc);
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
        race_scores(probs, key, x0, nb, sc);
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
