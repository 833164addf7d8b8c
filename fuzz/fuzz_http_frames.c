/* libFuzzer entry point for the server's reading of request streams; the body is
 * sd_fuzz_http_frames (fuzz/harness_server.c), which tests/test_fuzz_regressions.c replays without libFuzzer. */
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sd_fuzz_http_frames(data, size); }
