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

/* How a token is drawn from a processed distribution (temperature > 0). Both are exact draws;
 * they differ in what a seed fixes once speculation is on (docs/design.md, "Sampling"). */
typedef enum {
    /* The exponential race (Gumbel-max) over noise hashed from (seed, position, token): the token
     * at a position is a function of the seed, the position and the target's distribution there,
     * so speculation of any kind yields plain decoding's text (drafter-invariant sampling;
     * Daliri, Musco and Suresh 2024). Drafts are accepted where they equal that token. */
    SD_SAMPLING_COUPLED = 0,
    /* One RNG stream per generation; drafts verified by speculative (rejection) sampling
     * (Leviathan et al. 2023): the output's distribution is the target's, but the text for a
     * seed depends on what was drafted. */
    SD_SAMPLING_REJECTION = 1,
} sd_sampling_mode;

typedef struct {
    float temperature; /* 0 = greedy (argmax); > 0 scales logits by 1/T */
    int top_k;         /* 0 = off; else keep the k most likely */
    float top_p;       /* 1 = off; else keep the smallest prefix with mass >= top_p, in (0, 1] */
    uint64_t seed;
    sd_sampling_mode mode;
    float min_p;              /* 0 = off; else keep the tokens with p >= min_p * the top p, in [0, 1] */
    /* Penalties on the logits, from the history (sd_penalize), before everything else:
     * OpenAI's presence and frequency penalties count the generated tokens only (logit -=
     * presence * [count > 0] + frequency * count, each in [-2, 2]); the repetition penalty
     * (HF's, llama.cpp's repeat_penalty) looks at the prompt and the generated tokens: a seen
     * token's logit is divided by it when positive, multiplied when not (> 0; 1 = off). */
    float presence_penalty, frequency_penalty, repetition_penalty;
} sd_sampler_params;

/* The mode sampling uses unless told otherwise (sd_sampler_default_params): coupled, since it met
 * issue 25's rule (coupled wherever its speed is within 3% of rejection sampling's) wherever the
 * two were measured side by side (docs/benchmarks/2026-11-27-sampling-modes.md) and a seed then
 * reproduces the text whatever drafts. */
#define SD_SAMPLING_DEFAULT SD_SAMPLING_COUPLED
#define SD_SAMPLING_DEFAULT_NAME "coupled"

/* greedy, top_k 0, top_p 1, seed 42, SD_SAMPLING_DEFAULT, min_p 0, no penalties */
sd_sampler_params sd_sampler_default_params(void);
const char *sd_sampling_mode_name(sd_sampling_mode m); /* "coupled", "rejection" */
/* Parses a name of sd_sampling_mode_name; SD_ERR_INVALID_ARG naming the value otherwise. */
sd_status sd_sampling_mode_from_name(const char *name, sd_sampling_mode *out);

/* Checks ranges: temperature >= 0 and finite, top_k >= 0, top_p in (0, 1], a known mode, min_p in
 * [0, 1], presence and frequency penalties in [-2, 2], the repetition penalty in (0, 10]. */
sd_status sd_sampler_params_check(const sd_sampler_params *p);

/* Index of the largest value; ties go to the lowest index. -1 when n <= 0. */
int32_t sd_argmax(const float *x, int n);

/* The sum of x[0..n) in double, in eight lanes and then the tail: the order the softmax's kernel
 * sums in (the same bits every run), without one chain of dependent adds. */
double sd_row_sum(const float *x, int n);

/* The sum of exp(x[i] - mx) over n values <= mx (finite), by the softmax's kernel: each term
 * within 2 ulp of float's exp, summed in double. The normaliser of a log-softmax. */
double sd_exp_sum(const float *x, int n, float mx);

/* Processed distribution of logits (after sd_penalize, when there are penalties): greedy ->
 * one-hot at argmax; else softmax(logits/T) restricted to top-k, then top-p, then min-p (ties
 * broken by lower index), renormalised.
 * Order: temperature -> softmax -> top-k -> top-p -> min-p -> renormalise. The softmax's
 * numerators are within an ulp of expf's, and exactly 0 below exp(-87.3) (a logit masked with a
 * huge negative value keeps no mass). top-p measures mass
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

/* 1 when p has a penalty that changes logits (sd_penalize does something). */
int sd_sampler_has_penalties(const sd_sampler_params *p);
/* Applies p's penalties to row[0..n) in place, from the history hist[0..n_hist), whose tokens
 * from n_prompt on were generated (ids outside [0, n) are ignored). cnt: n int32 of scratch that
 * must be zero on entry and is zero again on return (calloc it once). O(n_hist). */
void sd_penalize(const sd_sampler_params *p, const int32_t *hist, int n_hist, int n_prompt, float *row, int n,
                 int32_t *cnt);

/* A token's log-probability under a row of logits (the model's own distribution: softmax at
 * temperature 1, before penalties, top-k/top-p or min-p), and the n_top likeliest tokens' (most
 * likely first, ties to the lower id), as OpenAI's logprobs report them. */
#define SD_MAX_LOGPROBS 20
typedef struct {
    float logprob;
    int n_top;
    int32_t top_id[SD_MAX_LOGPROBS];
    float top_logprob[SD_MAX_LOGPROBS];
} sd_token_logprobs;

/* out for token tok of logits[0..n); n_top in 0..SD_MAX_LOGPROBS. SD_ERR_NUMERIC for NaN/Inf. */
sd_status sd_logprobs(const float *logits, int n, int32_t tok, int n_top, sd_token_logprobs *out);

/* Draws from a distribution with one uniform (inverse CDF, ascending ids). Falls back to
 * the last id with nonzero mass when rounding leaves u above the total. Tokens with zero
 * mass are never drawn; returns -1 only when probs has no positive mass (or n <= 0). */
int32_t sd_sample_draw(const float *probs, int n, sd_rng *r);

/* ---- Coupled sampling: the exponential race ------------------------------------------------
 * Token x at a position gets noise E(x) ~ Exp(1), a pure function of (seed, position, x) through
 * a counter-based hash, so no state is carried. argmax_x p(x) / E(x) is an exact draw from p
 * (P(x wins) = p(x)); the draft model's proposal is the same race over its q, so a draft is
 * right exactly when it equals the target's token. Every build computes the noise with the same
 * IEEE operations (no libm), so a seed gives the same text on every machine. */

/* The noise key of (seed, position): pos is the token's index in the sequence (prompt first). */
uint64_t sd_coupled_key(uint64_t seed, int64_t pos);
/* E(x) for the key: -ln(1 - V), V uniform in (0, 1) from 32 hashed bits, with relative
 * precision kept where E is small (the likely winners). */
float sd_coupled_noise(uint64_t key, int32_t x);
/* The race's winner over probs[0..n): argmax probs[x] / E(x), ties to the lower id; tokens
 * without mass never win. -1 when probs has no positive mass (or n <= 0). */
int32_t sd_sample_coupled(const float *probs, int n, uint64_t key);
/* The race's best `count` tokens with mass, best first, into out; returns how many (<= count).
 * out[0] is sd_sample_coupled's token. A tree drafter's children at a node. */
int sd_sample_coupled_top(const float *probs, int n, uint64_t key, int count, int32_t *out);

#endif
