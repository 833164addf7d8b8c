/* libFuzzer entry point for the GGUF container parser; the body is sd_fuzz_gguf
 * (fuzz/harness_*.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_gguf(data, size); }
