/* Sampling: seeded RNG, logits -> processed distribution (temperature, top-k, top-p), draws.
 * The same processing feeds plain sampling and both sides of speculative sampling, which is
 * what makes speculative output distributed exactly like plain sampling. */
#ifndef SPECDEC_SAMPLE_H
#define SPECDEC_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/status.h"

/* xoshiro256** seeded through SplitMix64 (seed -> 4 state words). Uniform floats in [0, 1)
 * take the top 24 bits of one 64-bit output: (x >> 40) * 2^-24. */
typedef struct {
    uint64_t s[4];
} sd_rng;

void sd_rng_seed(sd_rng *r, uint64_t seed);
uint64_t sd_rng_next(sd_rng *r);
float sd_rng_uniform(sd_rng *r);

typedef struct {
    float temperature; /* 0 = greedy (argmax); > 0 scales logits by 1/T */
    int top_k;         /* 0 = off; else keep the k most likely */
    float top_p;       /* 1 = off; else keep the smallest prefix with mass >= top_p, in (0, 1] */
    uint64_t seed;
} sd_sampler_params;

sd_sampler_params sd_sampler_default_params(void); /* greedy, top_k 0, top_p 1, seed 42 */

/* Checks ranges: temperature >= 0 and finite, top_k >= 0, top_p in (0, 1]. */
sd_status sd_sampler_params_check(const sd_sampler_params *p);

/* Index of the largest value; ties go to the lowest index. -1 when n <= 0. */
int32_t sd_argmax(const float *x, int n);

/* Processed distribution of logits: greedy -> one-hot at argmax; else softmax(logits/T)
 * restricted to top-k then top-p (ties broken by lower index), renormalised.
 * Order: temperature -> softmax -> top-k -> top-p -> renormalise. top-p measures mass
 * within what top-k kept (as HF transformers and llama.cpp do): it keeps the shortest prefix,
 * ranked by probability then lower index, holding >= top_p of the top-k mass. top-k keeps
 * exactly k tokens even through ties (the lower indices win). Top-k/top-p use expected-linear
 * selection, not a sort.
 * probs has n entries and sums to 1. scratch needs n floats + n ints (sd_sample_scratch_bytes);
 * it may be NULL when top-k and top-p are both off or T == 0, since it is then unused.
 * Returns SD_ERR_NUMERIC if logits contain NaN/Inf, SD_ERR_INVALID_ARG for bad params. */
sd_status sd_sample_probs(const sd_sampler_params *p, const float *logits, int n, float *probs,
                          void *scratch);
size_t sd_sample_scratch_bytes(int n);

/* Draws from a distribution with one uniform (inverse CDF, ascending ids). Falls back to
 * the last id with nonzero mass when rounding leaves u above the total. Tokens with zero
 * mass are never drawn; returns -1 only when probs has no positive mass (or n <= 0). */
int32_t sd_sample_draw(const float *probs, int n, sd_rng *r);

#endif
