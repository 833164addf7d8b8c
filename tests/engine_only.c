/* Linked with the whole engine library and nothing of the tools: the build fails if any engine
 * object calls into specdec_tools (the GGUF writer, the converter, synthetic models, benches). */
#include "specdec/status.h"

int main(void) { return sd_status_str(SD_OK) ? 0 : 1; }
