/* libFuzzer entry point for chat template recognition and rendering; the body is sd_fuzz_chat
 * (fuzz/harness_chat.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_chat(data, size); }
