/* Test models: tiny random Llamas written to temporary GGUF files, and the shared real ones. */
#ifndef SDTEST_MODELS_H
#define SDTEST_MODELS_H

#include <stdint.h>

#include "specdec/model.h"
#include "specdec/spec.h"
#include "specdec/synth.h"

/* A random model of the given shape (F32 unless wtype says otherwise), loaded through
 * the normal file path. Fails the test on error. */
sd_model *sdtest_tiny_model(int dim, int n_layers, int n_heads, int n_kv_heads, int hidden,
                            int vocab, uint64_t seed);
sd_model *sdtest_synth_model(const sd_synth_params *p);

/* KV cache element type of the contexts the helpers below create (F32 unless a test sets it). */
extern sd_type sdtest_kv_type;

/* sd_synth_default_params() with the given shape, context length and seed (F32 weights). */
sd_synth_params sdtest_synth_shape(int dim, int n_layers, int n_heads, int n_kv_heads, int hidden, int vocab,
                                   int ctx, uint64_t seed);

/* Loads ../shared/<rel> (skips the test when absent). tokenizer_rel may be NULL. */
sd_model *sdtest_shared_model(const char *rel, const char *tokenizer_rel);

/* Logits of every position of tokens[0..n) by n single-token decode steps ([n][vocab]). */
float *sdtest_stepwise_logits(sd_model *m, const int32_t *tokens, int n);

/* Logits of every position of tokens[0..n) by one batched pass over a fresh cache ([n][vocab]). */
float *sdtest_batched_logits(sd_model *m, const int32_t *tokens, int n);

/* Batches up to SD_SMALL_BATCH tokens use the decode kernels' summation order, so they must be
 * equal bit for bit. Larger batches of float weights go through cblas_sgemm, whose blocking
 * reorders float sums; over several layers that moves logits of magnitude ~10 by a few ulps. */
#define SDTEST_TOL_GEMM_VS_STEPWISE 5e-5

/* Batched passes of n tokens (1..48) at positions 0, 1, 7, 30 against n decode steps (all rows,
 * and last-row-only logits): bit for bit up to SD_SMALL_BATCH, and at every size when
 * exact_all (the integer kernels), else within SDTEST_TOL_GEMM_VS_STEPWISE. */
void sdtest_check_batched(sd_model *m, int exact_all);

/* The n greedy tokens (malloc'd) that sd_spec_generate gives after prompt, with draft (may be
 * NULL) and stop_at_eos off; stats go to st when not NULL. Fails the test unless all n come. */
int32_t *sdtest_greedy(sd_model *m, sd_model *draft, const int32_t *prompt, int n_prompt, int n,
                       sd_spec_stats *st);

#endif
