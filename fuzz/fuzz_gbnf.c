/* libFuzzer entry point for GBNF grammar parsing and matching; the body is sd_fuzz_gbnf
 * (fuzz/harness_grammar.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_gbnf(data, size); }
