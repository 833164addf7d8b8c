/* Strict JSON: the syntax check with line and column, and the typed getters that name the path
 * (see json.h). */
#include "core/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"

sd_json_ctx sd_json_ctx_make(const char *file, sd_status err, int null_is_absent) {
    sd_json_ctx c;
    memset(&c, 0, sizeof c);
    c.file = file;
    c.err = err;
    c.null_is_absent = null_is_absent;
    return c;
}

/* A short description of a JSON value for "got ..." (strings quoted and cut at 40 bytes). */
static void describe(const cJSON *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "nothing");
    else if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t n = strlen(s);
        snprintf(buf, cap, "\"%.*s%s\"", (int)(n > 40 ? 40 : n), s, n > 40 ? "..." : "");
    } else if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsTrue(v)) snprintf(buf, cap, "true");
    else if (cJSON_IsFalse(v)) snprintf(buf, cap, "false");
    else if (cJSON_IsNull(v)) snprintf(buf, cap, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v)) snprintf(buf, cap, "an object");
    else snprintf(buf, cap, "an invalid value");
}

sd_status sd_json_expected(const sd_json_ctx *c, const char *what, const cJSON *got) {
    char g[64];
    describe(got, g, sizeof g);
    return sd_fail(c->err, "%s: %s: expected %s, got %s", c->file, c->path[0] ? c->path : ".", what, g);
}

size_t sd_json_enter_key(sd_json_ctx *c, const char *key) {
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, ".%s", key);
    return n;
}
size_t sd_json_enter_index(sd_json_ctx *c, int i) {
    size_t n = strlen(c->path);
    snprintf(c->path + n, sizeof c->path - n, "[%d]", i);
    return n;
}
void sd_json_leave(sd_json_ctx *c, size_t n) { c->path[n] = 0; }

sd_status sd_json_check_keys(sd_json_ctx *c, const cJSON *obj, const char *const *allowed) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            if (!strcmp(it->string, allowed[i])) ok = 1;
        size_t n = sd_json_enter_key(c, it->string);
        if (!ok) {
            char list[512] = "";
            for (int i = 0; allowed[i]; i++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", allowed[i]);
            }
            sd_status st = sd_fail(c->err, "%s: %s: unknown key (expected one of: %s)", c->file, c->path, list);
            sd_json_leave(c, n);
            return st;
        }
        for (const cJSON *p = obj->child; p != it; p = p->next)
            if (!strcmp(p->string, it->string)) {
                sd_status st = sd_fail(c->err, "%s: %s: duplicate key", c->file, c->path);
                sd_json_leave(c, n);
                return st;
            }
        sd_json_leave(c, n);
    }
    return SD_OK;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

sd_status sd_json_check_unique(sd_json_ctx *c, const cJSON *obj) {
    int n = cJSON_GetArraySize(obj);
    if (n < 2) return SD_OK;
    const cJSON **k = malloc((size_t)n * sizeof *k);
    if (!k) return sd_fail(SD_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *it = obj->child; it && i < n; it = it->next) k[i++] = it;
    qsort(k, (size_t)i, sizeof *k, by_key);
    sd_status st = SD_OK;
    for (int j = 1; j < i && st == SD_OK; j++)
        if (!strcmp(k[j]->string, k[j - 1]->string)) {
            size_t at = sd_json_enter_key(c, k[j]->string);
            st = sd_fail(c->err, "%s: %s: duplicate key", c->file, c->path);
            sd_json_leave(c, at);
        }
    free(k);
    return st;
}

sd_status sd_json_missing(const sd_json_ctx *c, const char *key) {
    return sd_fail(c->err, "%s: %s: missing required key \"%s\"", c->file, c->path[0] ? c->path : ".", key);
}

const cJSON *sd_json_item(const sd_json_ctx *c, const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && c->null_is_absent && cJSON_IsNull(v) ? NULL : v;
}

sd_status sd_json_require(const sd_json_ctx *c, const cJSON *obj, const char *key) {
    return sd_json_item(c, obj, key) ? SD_OK : sd_json_missing(c, key);
}

sd_status sd_json_i64_at(const sd_json_ctx *c, const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    char what[96];
    snprintf(what, sizeof what, "an integer in %lld..%lld", (long long)lo, (long long)hi);
    /* doubles hold every integer up to 2^53 exactly; the bounds are compared as doubles */
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi || fabs(v->valuedouble) > 9007199254740992.0)
        return sd_json_expected(c, what, v);
    *out = (int64_t)v->valuedouble;
    return SD_OK;
}

sd_status sd_json_i64(sd_json_ctx *c, const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = sd_json_item(c, obj, key);
    if (!v) return SD_OK;
    size_t n = sd_json_enter_key(c, key);
    sd_status st = sd_json_i64_at(c, v, lo, hi, out);
    sd_json_leave(c, n);
    return st;
}

sd_status sd_json_int(sd_json_ctx *c, const cJSON *obj, const char *key, long lo, long hi, int *out) {
    int64_t x = *out;
    sd_status st = sd_json_i64(c, obj, key, lo, hi, &x);
    if (st == SD_OK) *out = (int)x;
    return st;
}

sd_status sd_json_num(sd_json_ctx *c, const cJSON *obj, const char *key, double lo, double hi, int lo_open,
                      double *out) {
    const cJSON *v = sd_json_item(c, obj, key);
    if (!v) return SD_OK;
    size_t n = sd_json_enter_key(c, key);
    char what[96];
    if (isinf(hi)) snprintf(what, sizeof what, "a number %s %g", lo_open ? ">" : ">=", lo);
    else snprintf(what, sizeof what, "a number in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    sd_status st = SD_OK;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!cJSON_IsNumber(v) || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        st = sd_json_expected(c, what, v);
    else *out = x;
    sd_json_leave(c, n);
    return st;
}

sd_status sd_json_bool(sd_json_ctx *c, const cJSON *obj, const char *key, int *out) {
    const cJSON *v = sd_json_item(c, obj, key);
    if (!v) return SD_OK;
    size_t n = sd_json_enter_key(c, key);
    sd_status st = SD_OK;
    if (!cJSON_IsBool(v)) st = sd_json_expected(c, "true or false", v);
    else *out = cJSON_IsTrue(v);
    sd_json_leave(c, n);
    return st;
}

sd_status sd_json_str(sd_json_ctx *c, const cJSON *obj, const char *key, char **out) {
    const cJSON *v = sd_json_item(c, obj, key);
    if (!v) return SD_OK;
    size_t n = sd_json_enter_key(c, key);
    sd_status st = SD_OK;
    if (!cJSON_IsString(v) || !v->valuestring[0]) st = sd_json_expected(c, "a non-empty string", v);
    else {
        char *d = strdup(v->valuestring);
        if (!d) st = sd_fail(SD_ERR_NOMEM, "out of memory");
        else {
            free(*out);
            *out = d;
        }
    }
    sd_json_leave(c, n);
    return st;
}

sd_status sd_json_obj(sd_json_ctx *c, const cJSON *obj, const char *key, int required, const cJSON **out) {
    const cJSON *v = sd_json_item(c, obj, key);
    *out = NULL;
    if (!v) return required ? sd_json_missing(c, key) : SD_OK;
    if (!cJSON_IsObject(v)) {
        size_t n = sd_json_enter_key(c, key);
        sd_status st = sd_json_expected(c, "an object", v);
        sd_json_leave(c, n);
        return st;
    }
    *out = v;
    return SD_OK;
}

/* ---- syntax ---- */

/* One run of digits at p (at least one). */
static const char *lex_digits(const char *p, const char *end, const char **what) {
    if (p >= end || *p < '0' || *p > '9') {
        *what = "a digit";
        return p;
    }
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p;
}

const char *sd_json_lex_number(const char *p, const char *end, const char **what) {
    *what = NULL;
    if (p < end && *p == '-') p++;
    if (p < end && *p == '0') {
        p++;
    } else {
        p = lex_digits(p, end, what);
        if (*what) return p;
    }
    if (p < end && *p == '.') {
        p = lex_digits(p + 1, end, what);
        if (*what) return p;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        p = lex_digits(p, end, what);
    }
    return p;
}

const char *sd_json_lex_word(const char *p, const char *end, const char *w, const char **what) {
    const size_t n = strlen(w);
    *what = NULL;
    if ((size_t)(end - p) < n || memcmp(p, w, n) != 0) {
        *what = "a value";
        return p;
    }
    return p + n;
}

/* A JSON syntax check that stops at the first offending byte and says what it expected
 * there (cJSON only reports roughly where it gave up). */
typedef struct {
    const char *p, *end;
    const char *what;
    int depth;
} jscan;

static void js_ws(jscan *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}
static int js_fail(jscan *j, const char *what) {
    j->what = what;
    return -1;
}

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static int js_string(jscan *j) {
    if (j->p >= j->end || *j->p != '"') return js_fail(j, "a string");
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char ch = (unsigned char)*j->p;
        if (ch < 0x20) return js_fail(j, "a closing '\"' (control characters in strings must be escaped)");
        if (ch == '\\') {
            j->p++;
            if (j->p >= j->end) break;
            if (*j->p == 'u') {
                for (int i = 0; i < 4; i++) {
                    j->p++;
                    if (j->p >= j->end || !is_hex(*j->p)) return js_fail(j, "four hex digits after \\u");
                }
            } else if (!*j->p || !strchr("\"\\/bfnrt", *j->p))
                return js_fail(j, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
        j->p++;
    }
    if (j->p >= j->end) return js_fail(j, "a closing '\"'");
    j->p++;
    return 0;
}

static int js_number(jscan *j) {
    const char *what = NULL;
    j->p = sd_json_lex_number(j->p, j->end, &what);
    return what ? js_fail(j, what) : 0;
}

static int js_word(jscan *j, const char *w) {
    const char *what = NULL;
    j->p = sd_json_lex_word(j->p, j->end, w, &what);
    return what ? js_fail(j, what) : 0;
}

/* Members of an object or elements of an array after the opening bracket. */
static int js_value(jscan *j);
static int js_container(jscan *j, char close) {
    js_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    for (;;) {
        if (close == '}') {
            js_ws(j);
            if (j->p >= j->end || *j->p != '"') return js_fail(j, "a key string");
            if (js_string(j)) return -1;
            js_ws(j);
            if (j->p >= j->end || *j->p != ':') return js_fail(j, "':'");
            j->p++;
        }
        if (js_value(j)) return -1;
        js_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        return js_fail(j, close == '}' ? "',' or '}'" : "',' or ']'");
    }
}

static int js_value(jscan *j) {
    js_ws(j);
    if (j->p >= j->end) return js_fail(j, "a value");
    if (j->depth >= SD_JSON_MAX_DEPTH) return js_fail(j, "at most 256 levels of nesting");
    char c = *j->p;
    int rc;
    j->depth++;
    if (c == '{' || c == '[') {
        j->p++;
        rc = js_container(j, c == '{' ? '}' : ']');
    } else if (c == '"') rc = js_string(j);
    else if (c == '-' || (c >= '0' && c <= '9')) rc = js_number(j);
    else if (c == 't') rc = js_word(j, "true");
    else if (c == 'f') rc = js_word(j, "false");
    else if (c == 'n') rc = js_word(j, "null");
    else rc = js_fail(j, "a value");
    j->depth--;
    return rc;
}

/* "FILE: line L, column C: invalid JSON: expected X, got 'text'" at the first bad byte. */
static sd_status json_syntax_error(const char *text, size_t len, const char *file, const char *at, const char *what) {
    if (!at || at < text || at > text + len) at = text + len;
    int line = 1, col = 1;
    for (const char *p = text; p < at; p++) {
        if (*p == '\n') {
            line++;
            col = 1;
        } else col++;
    }
    char got[48];
    size_t k = 0;
    got[k++] = '\'';
    for (const char *p = at; p < text + len && *p && *p != '\n' && *p != '\r' && k < 13; p++) got[k++] = *p;
    got[k++] = '\'';
    got[k] = 0;
    if (at >= text + len) snprintf(got, sizeof got, "the end of the file");
    else if (k == 2) snprintf(got, sizeof got, "a line break");
    return sd_fail(SD_ERR_FORMAT, "%s: line %d, column %d: invalid JSON: expected %s, got %s", file, line, col, what, got);
}

static sd_status syntax_check(const char *text, size_t len, const char *file) {
    jscan j = {text, text + len, NULL, 0};
    if (js_value(&j) == 0) {
        js_ws(&j);
        if (j.p == j.end) return SD_OK;
        j.what = "the end of the file after the top-level value";
    }
    return json_syntax_error(text, len, file, j.p, j.what);
}

sd_status sd_json_parse(const char *text, size_t len, const char *file, cJSON **out) {
    *out = NULL;
    /* Files people write (configs) are checked first. A large file (a 9 MB tokenizer.json,
     * machine-written) goes to cJSON directly, which costs less (measured: commit 4d14d5b), and
     * the scan runs only to locate an error; what cJSON accepts beyond RFC 8259 there (a
     * leading '+' or '0') is harmless in such files. */
    if (len <= ((size_t)1 << 20)) {
        sd_status st = syntax_check(text, len, file);
        if (st != SD_OK) return st;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root && end) /* cJSON stops after the value: only whitespace may follow */
        while (end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (!root || end != text + len) {
        cJSON_Delete(root);
        sd_status st = syntax_check(text, len, file);
        return st != SD_OK ? st : sd_fail(SD_ERR_NOMEM, "%s: out of memory parsing the JSON", file);
    }
    *out = root;
    return SD_OK;
}

sd_status sd_json_parse_file(const char *path, size_t max, cJSON **out) {
    *out = NULL;
    char *text;
    size_t len;
    sd_status st = sd_file_read(path, max, &text, &len);
    if (st != SD_OK) return st;
    st = sd_json_parse(text, len, path, out);
    free(text);
    return st;
}

/* ---- raw JSON ---------------------------------------------------------------------------- */

size_t sd_json_skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* The value that starts at s[i] (no whitespace before it), by the syntax check's own scanner:
 * one JSON grammar for both. The scanner counts levels from its start, so it begins one below
 * depth: a value at level SD_JSON_MAX_DEPTH + 1 is refused. */
static size_t raw_value_end(const char *s, size_t n, size_t i, int depth) {
    if (i >= n || sd_json_skip_ws(s, n, i) != i) return SD_JSON_BAD;
    jscan j = {s + i, s + n, NULL, depth - 1};
    return js_value(&j) ? SD_JSON_BAD : (size_t)(j.p - s);
}

size_t sd_json_value_end_depth(const char *s, size_t n, size_t i, int depth) { return raw_value_end(s, n, i, depth); }

size_t sd_json_value_end(const char *s, size_t n, size_t i) { return raw_value_end(s, n, i, 0); }
