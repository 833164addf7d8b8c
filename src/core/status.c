/* Status strings and the per-thread last-error message. */
#include "specdec/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_err[1024];

const char *sd_status_str(sd_status st) {
    switch (st) {
    case SD_OK: return "ok";
    case SD_ERR_IO: return "i/o error";
    case SD_ERR_FORMAT: return "format error";
    case SD_ERR_UNSUPPORTED: return "unsupported";
    case SD_ERR_INVALID_ARG: return "invalid argument";
    case SD_ERR_NOMEM: return "out of memory";
    case SD_ERR_CONTEXT_FULL: return "context full";
    case SD_ERR_MISMATCH: return "draft/target mismatch";
    case SD_ERR_NUMERIC: return "numeric error";
    case SD_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

const char *sd_last_error(void) { return g_err; }

void sd_clear_error(void) { g_err[0] = 0; }

sd_status sd_fail(sd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return st;
}
