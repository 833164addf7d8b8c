/* Reference-JSON helpers: the PyTorch reference files under ../shared/reference (tokens,
 * logits at every position, greedy continuations) and checking a model's logits against them. */
#ifndef SDTEST_REF_H
#define SDTEST_REF_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "specdec/model.h"

/* Parses ../shared/<rel> (skips the test when absent; fails it when unreadable or not JSON).
 * The caller frees it with cJSON_Delete. */
cJSON *sdtest_load_reference(const char *rel);

/* A JSON array of numbers as a malloc'd int32 array (one spare element); *n is its size. */
int32_t *sdtest_json_ints(const cJSON *arr, int *n);

/* Checks m's logits against ref's "logits" ([n][vocab]) for ref's "tokens", in one batched
 * pass and by n decode steps: each within tol of the reference. Prints
 * "  <label> batched: max |logit - reference| = ..." and "  <label> stepwise: ..." and
 * returns the larger of the two max differences. */
double sdtest_check_reference_logits(sd_model *m, const cJSON *ref, const char *label, double tol);

/* The analytic output distribution of one speculative step at a single position:
 * P(out = x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y q(y) min(1, p(y)/q(y))) * residual(x),
 * written from the rule, not from the kernel, so tests can hold the kernel to it. */
void sdtest_verify_output_distribution(const float *p, const float *q, int n, float *out);

#endif
