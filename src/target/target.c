/* Target passes: prefill, batched verification and plain decode, all through the one
 * forward implementation (see src/model/forward.c). */
#include "specdec/target.h"

sd_status sd_target_prefill(sd_model *m, sd_kv *kv, const int32_t *tokens, int n, float *logits) {
    return sd_model_forward(m, kv, tokens, n, logits, 0);
}

sd_status sd_target_verify(sd_model *m, sd_kv *kv, const int32_t *tokens, int n, float *logits) {
    return sd_model_forward(m, kv, tokens, n, logits, 1);
}

sd_status sd_target_decode(sd_model *m, sd_kv *kv, int32_t token, float *logits) {
    return sd_model_forward(m, kv, &token, 1, logits, 0);
}
