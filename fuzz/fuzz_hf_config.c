/* libFuzzer entry point for generation_config.json / tokenizer_config.json applied to a tokenizer; the body is sd_fuzz_hf_config
 * (fuzz/harness_chat.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_hf_config(data, size); }
