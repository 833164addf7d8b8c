/* Status codes and error messages shared by every specdec module.
 * Library calls return sd_status; the detail (file, field, value) is in sd_last_error(). */
#ifndef SPECDEC_STATUS_H
#define SPECDEC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SD_OK = 0,
    SD_ERR_IO,           /* file missing, unreadable, mmap failed */
    SD_ERR_FORMAT,       /* malformed or truncated file, bad magic, out-of-bounds offsets */
    SD_ERR_UNSUPPORTED,  /* well-formed but not supported: version, architecture, tensor type */
    SD_ERR_INVALID_ARG,  /* caller passed a bad value */
    SD_ERR_NOMEM,        /* allocation failed */
    SD_ERR_CONTEXT_FULL, /* the KV cache / context window has no room */
    SD_ERR_MISMATCH,     /* draft and target are not compatible */
    SD_ERR_NUMERIC,      /* NaN or Inf detected */
    SD_ERR_INTERRUPTED,  /* stopped by the caller (SIGINT) */
} sd_status;

/* Short constant description of a status ("format error"). */
const char *sd_status_str(sd_status st);

/* Detailed message of the last failure on this thread ("" when none). */
const char *sd_last_error(void);

/* Records a formatted message for sd_last_error() and returns st (for `return sd_fail(...)`). */
sd_status sd_fail(sd_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the last error. */
void sd_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
