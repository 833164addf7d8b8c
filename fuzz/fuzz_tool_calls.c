/* libFuzzer entry point for reading tool calls out of a model's output; the body is
 * sd_fuzz_tool_calls (fuzz/harness_chat.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_tool_calls(data, size); }
