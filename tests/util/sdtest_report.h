/* Test helper: a bench report read back from JSON. */
#ifndef SDTEST_REPORT_H
#define SDTEST_REPORT_H

#include "specdec/bench_report.h"

/* Every field required and typed; the first problem names its JSON path (SD_ERR_FORMAT), an
 * other schema is SD_ERR_UNSUPPORTED. */
sd_status sdtest_bench_report_from_json(const char *text, sd_bench_report *out);

#endif
