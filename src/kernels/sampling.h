/* The sampling pipeline's vector loops, written for the auto-vectoriser (only IEEE +, -, *, /
 * and integer operations, both arms of every select computed: the same bits vectorised or not,
 * at any width): the softmax numerators, a row's argmax and its non-finite scan (sample.c) and
 * the exponential race's noise, scores and candidates (src/sample/race.c). Each kernel path
 * compiles them for its instruction sets (sampling_avx512.c, sampling_avx2.c, sampling.c; with
 * -fno-trapping-math, which lets the compiler evaluate both arms of the selects and changes no
 * result, since nothing reads the floating-point exception flags); race.c also uses the scalar
 * noise for sd_coupled_noise. */
#ifndef SD_KERNELS_SAMPLING_H
#define SD_KERNELS_SAMPLING_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* SplitMix64's finaliser: a bijection of 64 bits whose every output bit depends on every input
 * bit; fed a counter it passes BigCrush, which is what a counter-based generator needs. */
static inline uint64_t mix64_rounds(uint64_t z) { /* its two multiplying rounds */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    return (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
}
static inline uint64_t mix64(uint64_t z) {
    z = mix64_rounds(z);
    return z ^ (z >> 31);
}

#define GOLDEN64 0x9e3779b97f4a7c15ULL

/* -ln(1 - V) for V in (0, 1), by 2 atanh(s) = ln((1 + s) / (1 - s)) with |s| <= 0.172:
 * - V <= 0.29: ln(1 - V) = 2 atanh(-V / (2 - V)), computed from V itself, so a tiny V (a tiny
 *   E, which makes a token likely to win) keeps its relative precision;
 * - else W = 1 - V = m 2^e with m in [sqrt(1/2), sqrt(2)): ln W = e ln 2 + 2 atanh((m-1)/(m+1)).
 * The series to s^9 leaves a relative error below 2e-9, under float's rounding. Only IEEE +, -,
 * *, / and integer operations, both branches computed and one selected: the same bits whether
 * the compiler vectorises the loop or not, and no branch to stop it from doing so. */
static inline float race_uniform(uint64_t z) {
    const uint32_t v = (uint32_t)(z >> 32);
    const float V = (float)(v | 1u) * 0x1p-32f; /* | 1: never 0 (an odd v is as likely as any) */
    const float vmax = 0x1.fffffep-1f;
    return V > vmax ? vmax : V; /* rounding to 1 would make E infinite */
}

static inline float race_noise(uint64_t z) {
    const float V = race_uniform(z);
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

/* Scores p / E of tokens x0..x0+n into sc (0 for a token without mass), block by block so that
 * the loop is one straight vector loop. */
static inline void race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc) {
    uint64_t h = key + (uint64_t)(uint32_t)x0 * GOLDEN64; /* race_hash's input, stepped: no multiply */
    for (int i = 0; i < n; i++) {
        /* E > 0 always, so a token without mass scores 0 by the division itself */
        sc[i] = probs[x0 + i] / race_noise(mix64(h));
        h += GOLDEN64;
    }
}

/* A lower bound of race_uniform's V from the hash before mix64's last shift (which can flip only
 * the lowest of the 32 bits V is made of): their top 31 bits, a signed integer (a conversion
 * AVX2 has, unlike the unsigned one), times 2^-31 <= V, since V's bits are v | 1 and its clamp
 * only takes V's rounding to 1 back by 2^-24. */
static inline int32_t race_vhalf(uint64_t rounds) { return (int32_t)(rounds >> 33); }

/* The tokens that may score above floor, cand[i] = 1 (else 0): E = -ln(1 - V) >= V, so p / E <=
 * p / V, and a token with p <= floor V cannot beat floor; V is bounded below by race_vhalf 2^-31
 * (the 2^-31 folded into the floor). RACE_SLACK covers the roundings of the conversion, the
 * products and E itself (relative error under 2e-7 where E and V nearly meet, V tiny), so no
 * token that could win is left out; those it keeps are scored exactly as race_scores scores
 * them. Its cost is the hash's two multiplies and a float one: the noise's divisions and series
 * only for the few kept. Returns how many. */
#define RACE_SLACK 0.9999f
static inline int race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand) {
    const float f = floor * RACE_SLACK * 0x1p-31f;
    int kept = 0;
    uint64_t h = key + (uint64_t)(uint32_t)x0 * GOLDEN64;
    for (int i = 0; i < n; i++) {
        cand[i] = probs[x0 + i] > f * (float)race_vhalf(mix64_rounds(h));
        kept += cand[i];
        h += GOLDEN64;
    }
    return kept;
}

/* exp(y) for y <= 0: y = n ln2 + r with |r| <= ln2 / 2, exp(r) by the polynomial of Cephes'
 * expf (within 1-2 units in the last place), 2^n by the exponent bits. Below -87.3 the result
 * would be subnormal: 0 exactly, so a token masked with a huge negative logit keeps no mass. */
static inline float exp_neg(float y) {
    const float yc = y < -87.3f ? -87.3f : y;
    const float fn = floorf(yc * 1.44269504088896341f + 0.5f); /* the nearest n (a float-int-float round trip
                                                                  would stop the vectoriser) */
    const float r = (yc - fn * 0.693359375f) - fn * -2.12194440e-4f;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float v = p * scale;
    return y < -87.3f ? 0.0f : v;
}

/* A float's bits as an int32 ordered as the floats are (-0 just below +0), so that the max of a
 * row is an integer max, which the vectoriser takes (a float max is not reassociable for it);
 * NaN maps to INT32_MIN, below every number. */
static inline int32_t order_key(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    const uint32_t k = b ^ ((uint32_t)((int32_t)b >> 31) & 0x7fffffffu);
    const uint32_t nan = 0u - (uint32_t)((b & 0x7fffffffu) > 0x7f800000u); /* all ones for NaN: masks, */
    return (int32_t)((k & ~nan) | (0x80000000u & nan)); /* not a select, which GCC made a branch */
}

/* Values compared per block by first_equal before its token-by-token scan. */
#define ROW_BLOCK 64

/* The first i with x[i] == v (IEEE: -0 == +0), found block by block. */
static inline int32_t first_equal(const float *x, int n, float v) {
    int i = 0;
    for (; i + ROW_BLOCK <= n; i += ROW_BLOCK) {
        int hit = 0;
        for (int j = 0; j < ROW_BLOCK; j++) hit |= x[i + j] == v;
        if (hit) break;
    }
    for (; i < n; i++)
        if (x[i] == v) return i;
    return -1;
}

/* What a scan with a strict '>' from x[0] returns: the lowest index of the row's largest value,
 * NaN never winning (it compares above nothing), except that a NaN x[0] keeps index 0 (nothing
 * compares above it either). The max as an integer max of order keys, then its first index. */
static inline int32_t row_argmax(const float *x, int n) {
    if (x[0] != x[0]) return 0;
    int32_t m = INT32_MIN;
    for (int i = 0; i < n; i++) {
        const int32_t k = order_key(x[i]);
        m = k > m ? k : m;
    }
    const uint32_t b = m < 0 ? (uint32_t)m ^ 0x7fffffffu : (uint32_t)m; /* order_key undone */
    float v;
    memcpy(&v, &b, sizeof v);
    return first_equal(x, n, v);
}

/* 1 when the row holds an infinity or a NaN (exponent bits all set). */
static inline int row_nonfinite(const float *x, int n) {
    uint32_t bad = 0;
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
    }
    return bad != 0;
}

/* The sum of x[0..n) in eight double lanes, then the tail: a fixed order, so the same bits every
 * run and path, without one chain of dependent adds (4 cycles a value). */
static inline double lane_sum(const float *x, int n) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, total = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += x[i + j];
    for (int j = 0; j < 8; j++) total += lane[j];
    for (; i < n; i++) total += x[i];
    return total;
}

static inline double numerators(const float *x, int n, float mx, float t, float *out) {
    /* at t = 1 (the default temperature) without the division, the loop's dearest operation:
     * x / 1 is x exactly, so the same bits */
    if (t == 1.0f)
        for (int i = 0; i < n; i++) out[i] = exp_neg(x[i] - mx);
    else
        for (int i = 0; i < n; i++) out[i] = exp_neg((x[i] - mx) / t);
    return lane_sum(out, n);
}

#endif
