/* Strict JSON for the files people write or download (bench configs, Hugging Face config.json
 * and tokenizer.json): a syntax check that names the line and column of the first bad byte, and
 * typed getters whose every error names the file, the JSON path, what was expected and what was
 * found ("configs/x.json: .sweep.k[1]: expected an integer in 1..32, got \"four\""). */
#ifndef SD_CORE_JSON_H
#define SD_CORE_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "specdec/status.h"

typedef struct {
    const char *file;   /* named in every message */
    sd_status err;      /* the status of a wrong value: SD_ERR_INVALID_ARG for a config the user
                           passes, SD_ERR_FORMAT for a model file */
    int null_is_absent; /* a null value reads as an absent key (HF configs write null for "unset") */
    char path[256];     /* JSON path of the value being read, ".sweep.k[2]"; "" at the root */
} sd_json_ctx;

sd_json_ctx sd_json_ctx_make(const char *file, sd_status err, int null_is_absent);

/* JSON's number and literal (true, false, null: w) grammar at p (RFC 8259), for the scanners that
 * check a document's syntax (this one's, the server's request scanner): where the token ends, or,
 * when it is malformed, where it stops, with *what set to what was expected there. */
const char *sd_json_lex_number(const char *p, const char *end, const char **what);
const char *sd_json_lex_word(const char *p, const char *end, const char *w, const char **what);

/* Parses text after a strict syntax check (RFC 8259: no trailing commas, comments or garbage after
 * the value; at most 256 levels): "FILE: line L, column C: invalid JSON: expected X, got Y". */
sd_status sd_json_parse(const char *text, size_t len, const char *file, cJSON **out);
/* The same for a file of at most max bytes (0: no limit). */
sd_status sd_json_parse_file(const char *path, size_t max, cJSON **out);

/* The path, descended into a key or an index; sd_json_leave(c, returned) climbs back. */
size_t sd_json_enter_key(sd_json_ctx *c, const char *key);
size_t sd_json_enter_index(sd_json_ctx *c, int i);
void sd_json_leave(sd_json_ctx *c, size_t n);

/* "FILE: PATH: expected WHAT, got <got described>" with status c->err. */
sd_status sd_json_expected(const sd_json_ctx *c, const char *what, const cJSON *got);
/* "FILE: PATH: missing required key "KEY"". */
sd_status sd_json_missing(const sd_json_ctx *c, const char *key);
/* Every key of obj is one of allowed (NULL-terminated) and appears once. */
sd_status sd_json_check_keys(sd_json_ctx *c, const cJSON *obj, const char *const *allowed);

/* Every key of obj appears once (O(n log n)). */
sd_status sd_json_check_unique(sd_json_ctx *c, const cJSON *obj);

/* obj's value at key; NULL when absent (or null, with null_is_absent). */
const cJSON *sd_json_item(const sd_json_ctx *c, const cJSON *obj, const char *key);

/* Typed readers: an absent key leaves *out alone (the default); a present value must fit. Numbers
 * must be finite; integers whole and in [lo, hi]; numbers in [lo, hi], or (lo, hi] with lo_open
 * (hi = INFINITY: no upper bound); strings non-empty (strdup'd, the old *out freed). */
/* The value v itself, at the current path. */
sd_status sd_json_i64_at(const sd_json_ctx *c, const cJSON *v, int64_t lo, int64_t hi, int64_t *out);
sd_status sd_json_i64(sd_json_ctx *c, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out);
sd_status sd_json_int(sd_json_ctx *c, const cJSON *obj, const char *key, long lo, long hi, int *out);
sd_status sd_json_num(sd_json_ctx *c, const cJSON *obj, const char *key, double lo, double hi, int lo_open,
                      double *out);
sd_status sd_json_bool(sd_json_ctx *c, const cJSON *obj, const char *key, int *out);
sd_status sd_json_str(sd_json_ctx *c, const cJSON *obj, const char *key, char **out);
/* The object at key: *out NULL when absent, which is an error when required. */
sd_status sd_json_obj(sd_json_ctx *c, const cJSON *obj, const char *key, int required, const cJSON **out);
/* A required key: present (and not null, with null_is_absent), else sd_json_missing. */
sd_status sd_json_require(const sd_json_ctx *c, const cJSON *obj, const char *key);

/* ---- raw text: for callers that must keep what the text wrote (numbers as written, key order) ---- */

#define SD_JSON_BAD ((size_t)-1)
#define SD_JSON_MAX_DEPTH 256

/* The offset of the first byte at or after i that is not JSON whitespace. */
size_t sd_json_skip_ws(const char *s, size_t n, size_t i);
/* The offset after the well-formed JSON value that starts at s[i] (no whitespace before it), or
 * SD_JSON_BAD; depth: the nesting level of s[i], at most SD_JSON_MAX_DEPTH. */
size_t sd_json_value_end(const char *s, size_t n, size_t i);
size_t sd_json_value_end_depth(const char *s, size_t n, size_t i, int depth);

#endif
