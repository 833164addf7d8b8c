/* Test models: tiny random Llamas written to temporary GGUF files, and the shared real ones. */
#ifndef SDTEST_MODELS_H
#define SDTEST_MODELS_H

#include <stdint.h>

#include "specdec/model.h"
#include "specdec/synth.h"

/* A random model of the given shape (F32 unless wtype says otherwise), loaded through
 * the normal file path. Fails the test on error. */
sd_model *sdtest_tiny_model(int dim, int n_layers, int n_heads, int n_kv_heads, int hidden,
                            int vocab, uint64_t seed);
sd_model *sdtest_synth_model(const sd_synth_params *p);

/* Loads ../shared/<rel> (skips the test when absent). tokenizer_rel may be NULL. */
sd_model *sdtest_shared_model(const char *rel, const char *tokenizer_rel);

/* Logits of every position of tokens[0..n) by n single-token decode steps ([n][vocab]). */
float *sdtest_stepwise_logits(sd_model *m, const int32_t *tokens, int n);

#endif
