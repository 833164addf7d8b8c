/* Acceptance rules for speculative decoding: greedy prefix matching and exact rejection
 * sampling (Leviathan et al. 2023; Chen et al. 2023), as pure functions over distributions. */
#include "specdec/verify.h"

#include <stdint.h>
#include <string.h>

#include "specdec/sample.h"

int sd_verify_greedy(const int32_t *draft, int k, const int32_t *target_argmax, int32_t *next) {
    int m = 0;
    while (m < k && draft[m] == target_argmax[m]) m++;
    *next = target_argmax[m];
    return m;
}

/* out = max(0, p - q), out may be p itself. By masking the bits: the compiler made '?:' a
 * branch, mispredicted on every other token of a 152k-token row (measured: commit cb0d1ba). */
static void positive_part(const float *p, const float *q, int n, float *out) {
    for (int i = 0; i < n; i++) {
        const float d = p[i] - q[i];
        uint32_t b;
        memcpy(&b, &d, sizeof b);
        b &= 0u - (uint32_t)(d > 0);
        memcpy(&out[i], &b, sizeof b);
    }
}

/* residual normalised to sum 1; where it has no mass, `same` instead. No residual mass means
 * p <= q everywhere, so p == q (both sum to 1) and the rejection had probability zero: `same`
 * is a row equal to p then (not residual itself), the distribution the output must follow, and
 * copying it keeps the contract that residual holds what is drawn from. */
static void normalise_or(float *residual, int n, const float *same) {
    const double mass = sd_row_sum(residual, n);
    if (!(mass > 0)) {
        memcpy(residual, same, (size_t)n * sizeof *residual);
        return;
    }
    const float inv = (float)(1.0 / mass);
    for (int i = 0; i < n; i++) residual[i] *= inv;
}

int32_t sd_sample_residual(const float *p, const float *q, int n, sd_rng *rng, float *residual) {
    positive_part(p, q, n, residual);
    normalise_or(residual, n, p);
    return sd_sample_draw(residual, n, rng);
}

int32_t sd_sample_residual_onehot(const float *p, int32_t d, int n, sd_rng *rng, float *residual) {
    /* max(0, p - onehot(d)) is p with d removed: every other token keeps its mass (none left:
     * p is one-hot at d, and the rejection had probability zero) */
    memcpy(residual, p, (size_t)n * sizeof *residual);
    if (d >= 0 && d < n) residual[d] = 0.0f;
    normalise_or(residual, n, p);
    return sd_sample_draw(residual, n, rng);
}

/* One uniform is consumed per examined draft and one for *next, so a run's RNG use depends
 * only on where the first rejection happens. */
int sd_verify_stochastic_step(const float *pi, const float *qi, int32_t d, int n, sd_rng *rng, float *residual,
                              int32_t *next) {
    /* An out-of-range id is a caller bug; treating it as a token the target gives no mass
     * rejects it without reading out of bounds. */
    const float pd = (d >= 0 && d < n) ? pi[d] : 0.0f;
    if (!qi) { /* a deterministic draft: q is one-hot at d, so accept with probability p(d) */
        if (sd_rng_uniform(rng) < pd) return 1;
        *next = sd_sample_residual_onehot(pi, d, n, rng, residual);
        return 0;
    }
    const float qd = (d >= 0 && d < n) ? qi[d] : 0.0f;
    const double r = sd_rng_uniform(rng);
    /* r < p/q written as r*q < p: no division, and q(d) == 0 needs no special case. Such a
     * draft cannot come from sampling q (zero-mass tokens are never drawn), so any rule keeps
     * the output exact; this one is the limit p/q -> inf: accept iff p(d) > 0, so a token the
     * target forbids is never emitted. r < 1 makes p(d) >= q(d) always accept. */
    if (r * qd < pd) return 1;
    *next = sd_sample_residual(pi, qi, n, rng, residual);
    return 0;
}

int sd_verify_stochastic(const float *p, const float *q, const int32_t *draft, int k, int n,
                         sd_rng *rng, float *residual, int32_t *next) {
    for (int i = 0; i < k; i++)
        if (!sd_verify_stochastic_step(p + (size_t)i * (size_t)n, q ? q + (size_t)i * (size_t)n : NULL, draft[i], n, rng,
                                       residual, next))
            return i;
    *next = sd_sample_draw(p + (size_t)k * (size_t)n, n, rng);
    return k;
}

int sd_verify_tree_greedy(const int32_t *tok, const int32_t *par, int n, const int32_t *target_argmax,
                          int32_t *path, int32_t *next) {
    int u = 0, m = 0;
    path[0] = 0;
    for (;;) {
        const int32_t want = target_argmax[u];
        int child = -1;
        for (int c = u + 1; c < n; c++) /* children come after their parent */
            if (par[c] == u && tok[c] == want) {
                child = c;
                break;
            }
        if (child < 0) {
            *next = want;
            return m;
        }
        path[++m] = child;
        u = child;
    }
}

int sd_verify_tree_stochastic(const int32_t *tok, const int32_t *par, int n, const float *p, const float *q, int v,
                              sd_rng *rng, float *residual, int32_t *path, int32_t *next) {
    int u = 0, m = 0;
    path[0] = 0;
    for (;;) {
        const float *pu = p + (size_t)u * v, *qu = q + (size_t)u * v;
        const float *pres = pu; /* residual[] once a child has been rejected */
        int accepted = -1, any = 0;
        for (int c = u + 1; c < n && accepted < 0; c++) {
            if (par[c] != u) continue;
            any = 1;
            const int32_t d = tok[c];
            const float pd = (d >= 0 && d < v) ? pres[d] : 0.0f, qd = (d >= 0 && d < v) ? qu[d] : 0.0f;
            /* r < p/q as r*q < p, as in sd_verify_stochastic */
            if (sd_rng_uniform(rng) * qd < pd) {
                accepted = c;
                break;
            }
            /* the residual as the chain's; p_res == q where it has no mass, and once p_res is
             * residual itself (overwritten by now) q stands for it */
            positive_part(pres, qu, v, residual);
            normalise_or(residual, v, pres != residual ? pres : qu);
            pres = residual;
        }
        if (accepted < 0) {
            /* every child rejected: the residual; a leaf: the target's own row */
            if (!any) pres = pu;
            *next = sd_sample_draw(pres, v, rng);
            return m;
        }
        path[++m] = accepted;
        u = accepted;
    }
}
