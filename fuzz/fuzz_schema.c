/* libFuzzer entry point for the JSON Schema compiler and matching; the body is sd_fuzz_schema
 * (fuzz/harness_grammar.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_schema(data, size); }
