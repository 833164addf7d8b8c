/* Request bodies checked strictly before cJSON reads them: RFC 8259 syntax (cJSON accepts a
 * leading '+' and stops quietly before trailing text), exactly one value, no key twice in an
 * object, and no \u0000 escape, which would cut cJSON's C strings short; each refusal says where,
 * by byte offset or by the field's path (messages[0].content). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "server/internal.h"

typedef struct {
    const char *s, *p, *end;
    const char *what; /* what was expected where p stopped */
    int depth;
    char path[160];   /* the value being scanned: messages[0].content */
    long nul_at;      /* first \u0000: byte offset, its path, whether in a key */
    char nul_path[160];
    int nul_key;
    size_t prompt_bytes; /* the top-level "prompt" string's length, unescaped */
} scan;

static int fail(scan *j, const char *what) {
    j->what = what;
    return -1;
}

static void ws(scan *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* The end of a run of bytes that need no look in a string: not '"', '\\' or a control byte. Eight
 * at a time, each tested with the has-a-zero-byte trick (x - 0x01.. & ~x & 0x80..). */
static const char *plain_run(const char *p, const char *end) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        const uint64_t quote = w ^ (ones * '"'), bslash = w ^ (ones * '\\');
        const uint64_t hit = ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | ((w - ones * 0x20) & ~w);
        if (hit & highs) break; /* one of these eight (or a false alarm past a match): byte by byte */
        p += 8;
    }
    while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
    return p;
}

/* A string; its unescaped text into key (at most cap - 1 bytes, cut beyond) when key is given. */
static int string(scan *j, char *key, size_t cap) {
    if (j->p >= j->end || *j->p != '"') return fail(j, "a string");
    size_t k = 0, text = 0; /* text: the string's length once unescaped */
    int prev_high = 0;      /* the last escape was a high surrogate: a low one must follow */
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        if (!key && !prev_high) { /* a value: skip plain bytes fast (prompts are megabytes) */
            const char *q = plain_run(j->p, j->end);
            text += (size_t)(q - j->p);
            j->p = q;
            if (q >= j->end || *q == '"') break;
        }
        if (prev_high && (j->p + 1 >= j->end || j->p[0] != '\\' || j->p[1] != 'u'))
            return fail(j, "a low surrogate (\\uDC00-\\uDFFF) after a high one");
        const unsigned char ch = (unsigned char)*j->p;
        if (ch < 0x20) return fail(j, "a closing '\"' (control characters in strings must be escaped)");
        char out = (char)ch;
        if (ch == '\\') {
            const char *at = j->p++;
            if (j->p >= j->end) break;
            if (*j->p == 'u') {
                for (int i = 0; i < 4; i++)
                    if (++j->p >= j->end || !hex(*j->p)) return fail(j, "four hex digits after \\u");
                if (!memcmp(j->p - 3, "0000", 4) && j->nul_at < 0) {
                    j->nul_at = (long)(at - j->s);
                    j->nul_key = key != NULL;
                    snprintf(j->nul_path, sizeof j->nul_path, "%s", j->path[0] ? j->path : "request body");
                }
                unsigned cp = 0;
                for (int i = 3; i >= 0; i--) {
                    const char h = j->p[-i];
                    cp = cp << 4 | (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                /* a surrogate comes in a pair, high then low (cJSON refuses any other) */
                const int high = cp >= 0xD800 && cp < 0xDC00, low = cp >= 0xDC00 && cp < 0xE000;
                if (low != (prev_high != 0)) {
                    j->p = at;
                    return fail(j, low ? "a high surrogate before this low one" : "a low surrogate (\\uDC00-\\uDFFF) after a high one");
                }
                prev_high = high;
                text += cp < 0x80 ? 1 : cp < 0x800 ? 2 : low ? 1 : 3; /* a surrogate pair: 3 + 1 */
                if (key && k + 1 < cap) key[k++] = '?'; /* keys only need to be told apart, not decoded exactly */
                j->p++;
                continue;
            } else if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) {
                return fail(j, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
            } else {
                out = *j->p;
                text++;
            }
        } else {
            text++;
        }
        if (key && k + 1 < cap) key[k++] = out;
        j->p++;
    }
    if (j->p >= j->end) return fail(j, "a closing '\"'");
    if (prev_high) return fail(j, "a low surrogate (\\uDC00-\\uDFFF) after a high one");
    j->p++;
    if (key) key[k] = 0;
    else if (!strcmp(j->path, "prompt")) j->prompt_bytes = text;
    return 0;
}

static int number(scan *j) {
    const char *what = NULL;
    j->p = sd_json_lex_number(j->p, j->end, &what);
    return what ? fail(j, what) : 0;
}

static int word(scan *j, const char *w) {
    const char *what = NULL;
    j->p = sd_json_lex_word(j->p, j->end, w, &what);
    return what ? fail(j, what) : 0;
}

static int value(scan *j);

static int container(scan *j, char close) {
    const size_t at = strlen(j->path);
    ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    for (int i = 0;; i++) {
        if (close == '}') {
            char key[64];
            ws(j);
            if (j->p >= j->end || *j->p != '"') return fail(j, "a key string");
            if (string(j, key, sizeof key)) return -1;
            snprintf(j->path + at, sizeof j->path - at, "%s%s", at ? "." : "", key);
            ws(j);
            if (j->p >= j->end || *j->p != ':') return fail(j, "':'");
            j->p++;
        } else {
            snprintf(j->path + at, sizeof j->path - at, "[%d]", i);
        }
        if (value(j)) return -1;
        j->path[at] = 0;
        ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        return fail(j, close == '}' ? "',' or '}'" : "',' or ']'");
    }
}

static int value(scan *j) {
    ws(j);
    if (j->p >= j->end) return fail(j, "a value");
    if (j->depth >= 64) return fail(j, "at most 64 levels of nesting");
    const char c = *j->p;
    int rc;
    j->depth++;
    if (c == '{' || c == '[') {
        j->p++;
        rc = container(j, c == '{' ? '}' : ']');
    } else if (c == '"') {
        rc = string(j, NULL, 0);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        rc = number(j);
    } else if (c == 't') {
        rc = word(j, "true");
    } else if (c == 'f') {
        rc = word(j, "false");
    } else if (c == 'n') {
        rc = word(j, "null");
    } else {
        rc = fail(j, "a value");
    }
    j->depth--;
    return rc;
}

/* The top-level field a path starts with ("messages" of "messages[0].content"), for param. */
static const char *top_field(const cJSON *root, const char *path) {
    const size_t n = strcspn(path, ".[");
    for (const cJSON *it = root ? root->child : NULL; it; it = it->next)
        if (it->string && strlen(it->string) == n && !strncmp(it->string, path, n)) return it->string;
    return NULL;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key given twice in an object, depth first; its path into path. */
static int duplicate_key(const cJSON *v, char *path, size_t cap, int depth) {
    if (depth > 64 || (!cJSON_IsObject(v) && !cJSON_IsArray(v))) return 0;
    const size_t at = strlen(path);
    int n = cJSON_GetArraySize(v), i = 0;
    if (cJSON_IsObject(v) && n > 1) {
        const cJSON **k = malloc((size_t)n * sizeof *k);
        if (!k) return 0; /* the fields are still read, first occurrence first */
        for (const cJSON *it = v->child; it && i < n; it = it->next) k[i++] = it;
        qsort(k, (size_t)i, sizeof *k, by_key);
        for (int m = 1; m < i; m++)
            if (!strcmp(k[m]->string, k[m - 1]->string)) {
                snprintf(path + at, cap - at, "%s%s", at ? "." : "", k[m]->string);
                free(k);
                return 1;
            }
        free(k);
    }
    i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        if (cJSON_IsObject(v)) snprintf(path + at, cap - at, "%s%s", at ? "." : "", it->string);
        else snprintf(path + at, cap - at, "[%d]", i);
        if (duplicate_key(it, path, cap, depth + 1)) return 1;
        path[at] = 0;
    }
    return 0;
}

int srv_json_check(const char *body, size_t len, size_t *prompt_bytes, srv_err *e) {
    long bad = srv_utf8_check(body, len);
    if (bad >= 0) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body is not valid UTF-8 (byte %ld)", bad);
        return -1;
    }
    scan j;
    memset(&j, 0, sizeof j);
    j.s = j.p = body;
    j.end = body + len;
    j.nul_at = -1;
    if (value(&j) != 0) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body is not valid JSON (at byte %ld of %zu): expected %s",
                    (long)(j.p - body), len, j.what);
        return -1;
    }
    ws(&j);
    if (j.p != j.end) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                    "request body must be one JSON value with nothing after it (more at byte %ld of %zu)", (long)(j.p - body),
                    len);
        return -1;
    }
    if (j.nul_at >= 0) {
        char field[64];
        snprintf(field, sizeof field, "%.*s", (int)strcspn(j.nul_path, ".["), j.nul_path); /* the top-level field */
        if (!j.nul_key)
            srv_err_set(e, 400, "invalid_request_error", strcmp(j.nul_path, "request body") ? field : NULL, NULL,
                        "%s: text may not contain NUL (the escape \\u0000 at byte %ld)", j.nul_path, j.nul_at);
        else
            srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                        "request body: a key may not contain NUL (the escape \\u0000 at byte %ld)", j.nul_at);
        return -1;
    }
    if (prompt_bytes) *prompt_bytes = j.prompt_bytes;
    return 0;
}

cJSON *srv_json_tree(const char *body, size_t len, srv_err *e) {
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
    if (!o) {
        srv_err_set(e, 503, "server_error", NULL, NULL, "out of memory reading the request body");
        return NULL;
    }
    char path[160] = "";
    if (duplicate_key(o, path, sizeof path, 0)) {
        srv_err_set(e, 400, "invalid_request_error", top_field(o, path), NULL, "%s: given twice", path);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *srv_json_parse(const char *body, size_t len, srv_err *e) {
    return srv_json_check(body, len, NULL, e) == 0 ? srv_json_tree(body, len, e) : NULL;
}
