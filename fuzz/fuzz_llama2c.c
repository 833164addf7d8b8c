/* libFuzzer entry point for llama2.c checkpoint + tokenizer.bin loading and a forward pass; the body is sd_fuzz_llama2c
 * (fuzz/harness_*.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_llama2c(data, size); }
