/* Status strings and the per-thread last-error message. */
#include "specdec/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

/* Bytes of the valid, printable UTF-8 character at p (n bytes left), 0 when it is not one:
 * a control character (C0, DEL, C1), a malformed or overlong sequence, a surrogate. */
static size_t printable_char(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return c >= 0x20 && c != 0x7F;
    size_t len;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0xA0; /* below U+00A0: C1 controls */
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

sd_status sd_fail(sd_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    /* Messages quote names and values from hostile files and end up on terminals: every
     * byte that is not part of a printable UTF-8 character (escape sequences, broken UTF-8,
     * a character cut by the truncation above) becomes '?'. */
    unsigned char *u = (unsigned char *)g_err;
    size_t n = strlen(g_err);
    for (size_t i = 0; i < n;) {
        size_t l = printable_char(u + i, n - i);
        if (l == 0) {
            u[i++] = '?';
        } else {
            i += l;
        }
    }
    return st;
}
