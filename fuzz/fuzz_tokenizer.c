/* libFuzzer entry point for tokenizer encode/decode over arbitrary text and ids; the body is sd_fuzz_tokenizer
 * (fuzz/harness_*.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_tokenizer(data, size); }
