/* libFuzzer entry point for GGUF model loading and a forward pass; the body is sd_fuzz_model_gguf
 * (fuzz/harness_*.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_model_gguf(data, size); }
