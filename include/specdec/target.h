/* The target model's three passes over its KV cache. All run the shared forward; they
 * differ in how many tokens go in and which logit rows come out. */
#ifndef SPECDEC_TARGET_H
#define SPECDEC_TARGET_H

#include <stdint.h>

#include "specdec/kv.h"
#include "specdec/model.h"

/* Prompt in one batched pass; logits of the last position ([vocab]). */
sd_status sd_target_prefill(sd_model *m, sd_kv *kv, const int32_t *tokens, int n, float *logits);

/* [last accepted, d1..dk] in ONE batched pass; logits [n][vocab] for every position. */
sd_status sd_target_verify(sd_model *m, sd_kv *kv, const int32_t *tokens, int n, float *logits);

/* Plain decoding: one token, one matrix-vector pass. */
sd_status sd_target_decode(sd_model *m, sd_kv *kv, int32_t token, float *logits);

#endif
