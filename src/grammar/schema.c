/* JSON Schema to GBNF: every keyword is supported, ignored as an annotation, or refused by name with
 * its JSON path; the GBNF text is then parsed like any grammar. Whitespace between tokens is
 * bounded, numbers have at most 16 integer and 16 fraction digits. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "grammar/grammar_internal.h"

/* The rules every compiled schema may use. ws: at most one space, or a line break and 20 spaces or
 * tabs, as llama.cpp's JSON grammars bound it. */
static const char k_ws_bounded[] = "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
static const char k_ws_compact[] = "ws ::= \"\"\n";
static const char k_preamble[] =
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
    "hex4 ::= [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "kchar ::= [ !#-\\[\\]-~]\n";

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

typedef struct {
    char *ref;
    int rule;
} ref_memo;

typedef struct {
    sbuf out;
    const cJSON *root;
    sd_json_ctx ctx;
    ref_memo *refs;
    int n_refs, cap_refs;
    int n_rules;
    int depth;
    sd_status err;
} sc;

#define SC_MAX_DEPTH 64

static int sc_fail(sc *c, sd_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sc_fail(sc *c, sd_status st, const char *fmt, ...) {
    if (c->err != SD_OK) return -1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char full[1024];
    snprintf(full, sizeof full, "schema: %s: %s", c->ctx.path[0] ? c->ctx.path : ".", msg);
    /* keys and values of the schema are quoted in messages: no terminal controls (C0, DEL, C1) */
    for (unsigned char *q = (unsigned char *)full; *q; q++) {
        if (*q < 0x20 || *q == 0x7F) *q = '?';
        else if (q[0] == 0xC2 && q[1] >= 0x80 && q[1] <= 0x9F) q[0] = '?', q[1] = '?';
    }
    c->err = sd_fail(st, "%s", full);
    return -1;
}

static int new_rule(sc *c) { return c->n_rules++; }

/* ---- keywords ---- */
typedef enum { KW_OK, KW_ANNOTATION, KW_REFUSED } kw_kind;
static const struct {
    const char *name;
    kw_kind kind;
} k_keywords[] = {
    {"type", KW_OK}, {"properties", KW_OK}, {"required", KW_OK}, {"additionalProperties", KW_OK},
    {"items", KW_OK}, {"prefixItems", KW_OK}, {"additionalItems", KW_OK}, {"minItems", KW_OK},
    {"maxItems", KW_OK}, {"uniqueItems", KW_OK}, {"enum", KW_OK}, {"const", KW_OK}, {"minLength", KW_OK},
    {"maxLength", KW_OK}, {"pattern", KW_OK}, {"format", KW_OK}, {"minimum", KW_OK}, {"maximum", KW_OK},
    {"exclusiveMinimum", KW_OK}, {"exclusiveMaximum", KW_OK}, {"anyOf", KW_OK}, {"oneOf", KW_OK},
    {"allOf", KW_OK}, {"$ref", KW_OK}, {"$defs", KW_OK}, {"definitions", KW_OK}, {"nullable", KW_OK},
    /* annotations: no effect on validity */
    {"title", KW_ANNOTATION}, {"description", KW_ANNOTATION}, {"examples", KW_ANNOTATION},
    {"example", KW_ANNOTATION}, {"default", KW_ANNOTATION}, {"$schema", KW_ANNOTATION}, {"$id", KW_ANNOTATION},
    {"id", KW_ANNOTATION}, {"$comment", KW_ANNOTATION}, {"deprecated", KW_ANNOTATION},
    {"readOnly", KW_ANNOTATION}, {"writeOnly", KW_ANNOTATION}, {"contentEncoding", KW_ANNOTATION},
    {"contentMediaType", KW_ANNOTATION}, {"$anchor", KW_ANNOTATION}, {"discriminator", KW_ANNOTATION},
    {"externalDocs", KW_ANNOTATION}, {"xml", KW_ANNOTATION}, {"strict", KW_ANNOTATION},
    /* validation this compiler cannot honour */
    {"multipleOf", KW_REFUSED}, {"patternProperties", KW_REFUSED}, {"propertyNames", KW_REFUSED},
    {"minProperties", KW_REFUSED}, {"maxProperties", KW_REFUSED}, {"dependencies", KW_REFUSED},
    {"dependentRequired", KW_REFUSED}, {"dependentSchemas", KW_REFUSED}, {"unevaluatedProperties", KW_REFUSED},
    {"unevaluatedItems", KW_REFUSED}, {"contains", KW_REFUSED}, {"minContains", KW_REFUSED},
    {"maxContains", KW_REFUSED}, {"not", KW_REFUSED}, {"if", KW_REFUSED}, {"then", KW_REFUSED},
    {"else", KW_REFUSED}, {"$dynamicRef", KW_REFUSED}, {"$dynamicAnchor", KW_REFUSED},
    {"$recursiveRef", KW_REFUSED}, {"$recursiveAnchor", KW_REFUSED}, {"contentSchema", KW_REFUSED},
    {"$vocabulary", KW_REFUSED},
};

static const cJSON *kw(const cJSON *s, const char *name) { return cJSON_GetObjectItemCaseSensitive(s, name); }

/* Every key of s known; refused keywords and unknown ones (but x-* extensions) named. */
static int check_keywords(sc *c, const cJSON *s) {
    if (sd_json_check_unique(&c->ctx, s) != SD_OK) {
        c->err = SD_ERR_INVALID_ARG;
        return -1;
    }
    for (const cJSON *it = s->child; it; it = it->next) {
        const char *k = it->string;
        if (!strncmp(k, "x-", 2)) continue;
        int found = -1;
        for (size_t i = 0; i < sizeof k_keywords / sizeof k_keywords[0]; i++)
            if (!strcmp(k, k_keywords[i].name)) found = (int)i;
        size_t m = sd_json_enter_key(&c->ctx, k);
        int r = 0;
        if (found < 0) r = sc_fail(c, SD_ERR_UNSUPPORTED, "unknown keyword \"%s\" (not honoured, so refused)", k);
        else if (k_keywords[found].kind == KW_REFUSED) r = sc_fail(c, SD_ERR_UNSUPPORTED, "unsupported keyword \"%s\"", k);
        else if (!strcmp(k, "uniqueItems") && cJSON_IsTrue(it))
            r = sc_fail(c, SD_ERR_UNSUPPORTED, "unsupported keyword \"uniqueItems\" (true)");
        sd_json_leave(&c->ctx, m);
        if (r) return -1;
    }
    return 0;
}

/* ---- literals ---- */

/* bytes as a GBNF literal "..." */
static void gbnf_lit(sbuf *b, const char *s, size_t n) {
    sb_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') sb_fmt(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F) sb_fmt(b, "\\x%02X", ch);
        else sb_put(b, (const char *)&ch, 1); /* UTF-8 passes through: GBNF literals are UTF-8 text */
    }
    sb_str(b, "\"");
}

/* A JSON value as the one literal text the grammar allows for it (compact, keys in order). */
static int json_lit(sc *c, sbuf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return sc_fail(c, SD_ERR_NOMEM, "out of memory");
    /* UTF-8 stays raw in cJSON's output; GBNF literals take code points, so decode bytes */
    sb_str(b, "\"");
    const unsigned char *p = (const unsigned char *)t;
    while (*p) {
        unsigned ch = *p;
        if (ch < 0x80) {
            if (ch == '"' || ch == '\\') sb_fmt(b, "\\%c", ch);
            else if (ch < 0x20 || ch == 0x7F) sb_fmt(b, "\\x%02X", ch);
            else sb_put(b, (const char *)p, 1);
            p++;
            continue;
        }
        int len = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
        sb_put(b, (const char *)p, (size_t)len); /* valid: cJSON parsed it from checked text */
        p += len;
    }
    sb_str(b, "\"");
    free(t);
    return 0;
}

/* ---- integer ranges ---- */
#define INT_CAP 9999999999999999LL /* 16 digits */

/* Decimal strings of equal length from x to y (x <= y), leading zeros allowed. */
static void digits_range(sbuf *b, const char *x, const char *y, int n) {
    int i = 0;
    while (i < n && x[i] == y[i]) i++;
    if (i) {
        sbuf t = {0};
        gbnf_lit(&t, x, (size_t)i);
        sb_str(b, t.p ? t.p : "");
        sb_str(b, " ");
        free(t.p);
    }
    if (i == n) return;
    int m = n - i - 1; /* digits after the first differing one */
    const char *xr = x + i + 1, *yr = y + i + 1;
    int x_zero = 1, y_nine = 1;
    for (int k = 0; k < m; k++) x_zero &= xr[k] == '0', y_nine &= yr[k] == '9';
    char lo = x[i], hi = y[i];
    sb_str(b, "( ");
    int alts = 0;
    char mlo = x_zero ? lo : (char)(lo + 1), mhi = y_nine ? hi : (char)(hi - 1);
    if (!x_zero) {
        char nines[20];
        memset(nines, '9', (size_t)m);
        sb_fmt(b, "\"%c\" ", lo);
        digits_range(b, xr, nines, m);
        alts++;
    }
    if (mlo <= mhi) {
        if (alts++) sb_str(b, "| ");
        if (mlo == mhi) sb_fmt(b, "\"%c\" ", mlo);
        else sb_fmt(b, "[%c-%c] ", mlo, mhi);
        if (m) sb_fmt(b, "[0-9]{%d} ", m);
    }
    if (!y_nine) {
        char zeros[20];
        memset(zeros, '0', (size_t)m);
        if (alts++) sb_str(b, "| ");
        sb_fmt(b, "\"%c\" ", hi);
        digits_range(b, zeros, yr, m);
    }
    sb_str(b, ") ");
}

/* Non-negative integers a..b (0 <= a <= b <= INT_CAP), no leading zeros, as alternatives. */
static void nonneg_range(sbuf *b, long long a, long long bb) {
    int first = 1;
    long long p = 1;
    for (int d = 1; d <= 16; d++, p *= 10) {
        long long lo = d == 1 ? 0 : p, hi = p * 10 - 1;
        if (lo < a) lo = a;
        if (hi > bb) hi = bb;
        if (lo > hi) continue;
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", lo);
        snprintf(y, sizeof y, "%lld", hi);
        sb_str(b, first ? "( " : "| ");
        first = 0;
        digits_range(b, x, y, d);
    }
    sb_str(b, first ? "\"\"" : ")");
}

/* Integers lo..hi; has_lo/has_hi: bounded on that side. */
static int int_range(sc *c, sbuf *b, int has_lo, long long lo, int has_hi, long long hi) {
    if (!has_lo) lo = -INT_CAP;
    if (!has_hi) hi = INT_CAP;
    if (lo < -INT_CAP) lo = -INT_CAP; /* beyond 16 digits the bound is looser than the digit cap */
    if (hi > INT_CAP) hi = INT_CAP;
    if (lo > hi) return sc_fail(c, SD_ERR_UNSUPPORTED, "no integer within minimum/maximum (or beyond 16 digits)");
    sb_str(b, "( ");
    int alts = 0;
    if (hi >= 0) {
        nonneg_range(b, lo > 0 ? lo : 0, hi);
        sb_str(b, " ");
        alts++;
    }
    if (lo < 0) {
        long long mlo = hi < 0 ? -hi : 1, mhi = -lo;
        if (alts++) sb_str(b, "| ");
        sb_str(b, "\"-\" ");
        nonneg_range(b, mlo, mhi);
        sb_str(b, " ");
    }
    sb_str(b, ")");
    return 0;
}

/* ---- generating rules ---- */

static int gen(sc *c, const cJSON *s, int *rule);

static void rule_head(sc *c, int r) { sb_fmt(&c->out, "r%d ::= ", r); }

/* The rule of one schema, at key of parent (path extended). */
static int gen_at(sc *c, const cJSON *parent_obj, const char *key, int index, int *rule) {
    size_t m = index >= 0 ? sd_json_enter_index(&c->ctx, index) : sd_json_enter_key(&c->ctx, key);
    const cJSON *s = index >= 0 ? cJSON_GetArrayItem(parent_obj, index) : kw(parent_obj, key);
    int r = gen(c, s, rule);
    sd_json_leave(&c->ctx, m);
    return r;
}

static int get_num(sc *c, const cJSON *s, const char *name, double *out) {
    const cJSON *v = kw(s, name);
    if (!v) return 0;
    size_t m = sd_json_enter_key(&c->ctx, name);
    int r = 1;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a number");
    else *out = v->valuedouble;
    sd_json_leave(&c->ctx, m);
    return r;
}

static int get_count(sc *c, const cJSON *s, const char *name, long *out) {
    const cJSON *v = kw(s, name);
    if (!v) return 0;
    size_t m = sd_json_enter_key(&c->ctx, name);
    int r = 1;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > GR_MAX_REPEAT ||
        v->valuedouble != floor(v->valuedouble))
        r = sc_fail(c, SD_ERR_UNSUPPORTED, "expected a whole number in 0..%d", GR_MAX_REPEAT);
    else *out = (long)v->valuedouble;
    sd_json_leave(&c->ctx, m);
    return r;
}

/* Bounds of numbers: inclusive/exclusive, draft-4 boolean exclusives folded in. */
typedef struct {
    int has_lo, lo_excl, has_hi, hi_excl;
    double lo, hi;
} bounds;

static int get_bounds(sc *c, const cJSON *s, bounds *bd) {
    memset(bd, 0, sizeof *bd);
    double v = 0;
    int r;
    if ((r = get_num(c, s, "minimum", &v)) < 0) return -1;
    if (r) bd->has_lo = 1, bd->lo = v;
    if ((r = get_num(c, s, "maximum", &v)) < 0) return -1;
    if (r) bd->has_hi = 1, bd->hi = v;
    const char *ex[2] = {"exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 2; i++) {
        const cJSON *e = kw(s, ex[i]);
        if (!e) continue;
        if (cJSON_IsBool(e)) { /* draft 4: a flag on minimum/maximum */
            if (cJSON_IsTrue(e)) {
                if (i == 0 ? !bd->has_lo : !bd->has_hi) {
                    size_t m = sd_json_enter_key(&c->ctx, ex[i]);
                    sc_fail(c, SD_ERR_INVALID_ARG, "true without %s", i == 0 ? "minimum" : "maximum");
                    sd_json_leave(&c->ctx, m);
                    return -1;
                }
                if (i == 0) bd->lo_excl = 1;
                else bd->hi_excl = 1;
            }
            continue;
        }
        if (get_num(c, s, ex[i], &v) < 0) return -1;
        if (i == 0 && (!bd->has_lo || v >= bd->lo)) bd->has_lo = 1, bd->lo = v, bd->lo_excl = 1;
        if (i == 1 && (!bd->has_hi || v <= bd->hi)) bd->has_hi = 1, bd->hi = v, bd->hi_excl = 1;
    }
    return 0;
}

/* OpenAPI's numeric formats: int32 and int64 bound integers (int64 is wider than the 16-digit
 * cap), float and double constrain nothing; any other format on a number is refused. */
static int numeric_format(sc *c, const cJSON *s, int integer, bounds *bd) {
    const cJSON *f = kw(s, "format");
    if (!f) return 0;
    size_t m = sd_json_enter_key(&c->ctx, "format");
    int r = 0;
    if (!cJSON_IsString(f)) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a string");
    else if (integer && !strcmp(f->valuestring, "int32")) {
        if (!bd->has_lo || bd->lo < -2147483648.0) bd->has_lo = 1, bd->lo = -2147483648.0, bd->lo_excl = 0;
        if (!bd->has_hi || bd->hi > 2147483647.0) bd->has_hi = 1, bd->hi = 2147483647.0, bd->hi_excl = 0;
    } else if (!(integer && !strcmp(f->valuestring, "int64")) && strcmp(f->valuestring, "float") &&
               strcmp(f->valuestring, "double"))
        r = sc_fail(c, SD_ERR_UNSUPPORTED, "unsupported format \"%.60s\" for a number (supported: int32, int64, float, double)",
                    f->valuestring);
    sd_json_leave(&c->ctx, m);
    return r;
}

static int gen_integer(sc *c, const cJSON *s, sbuf *b) {
    bounds bd;
    if (get_bounds(c, s, &bd) || numeric_format(c, s, 1, &bd)) return -1;
    if (!bd.has_lo && !bd.has_hi) {
        sb_str(b, "integer");
        return 0;
    }
    long long lo = 0, hi = 0;
    if (bd.has_lo) {
        double x = bd.lo_excl ? floor(bd.lo) + 1 : ceil(bd.lo);
        lo = x < -1e17 ? -INT_CAP - 1 : x > 1e17 ? INT_CAP + 1 : (long long)x;
    }
    if (bd.has_hi) {
        double x = bd.hi_excl ? ceil(bd.hi) - 1 : floor(bd.hi);
        hi = x < -1e17 ? -INT_CAP - 1 : x > 1e17 ? INT_CAP + 1 : (long long)x;
    }
    return int_range(c, b, bd.has_lo, lo, bd.has_hi, hi);
}

/* Numbers within integer-valued bounds, without exponents: the integer part decides, with the
 * fraction any, zero or non-zero at the edges (see docs/grammar.md). */
static int gen_number(sc *c, const cJSON *s, sbuf *b) {
    bounds bd;
    if (get_bounds(c, s, &bd) || numeric_format(c, s, 0, &bd)) return -1;
    if (!bd.has_lo && !bd.has_hi) {
        sb_str(b, "number");
        return 0;
    }
    const char *names[2][2] = {{"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}};
    if ((bd.has_lo && (bd.lo != floor(bd.lo) || fabs(bd.lo) > 1e15)) ||
        (bd.has_hi && (bd.hi != floor(bd.hi) || fabs(bd.hi) > 1e15))) {
        int side = bd.has_lo && (bd.lo != floor(bd.lo) || fabs(bd.lo) > 1e15) ? 0 : 1;
        const char *k = names[side][side == 0 ? bd.lo_excl : bd.hi_excl];
        size_t m = sd_json_enter_key(&c->ctx, kw(s, k) ? k : names[side][0]);
        sc_fail(c, SD_ERR_UNSUPPORTED, "a bound of a number must be a whole number of at most 15 digits");
        sd_json_leave(&c->ctx, m);
        return -1;
    }
    long long L = bd.has_lo ? (long long)bd.lo : 0, H = bd.has_hi ? (long long)bd.hi : 0;
    if (bd.has_lo && bd.has_hi && (L > H || (L == H && (bd.lo_excl || bd.hi_excl))))
        return sc_fail(c, SD_ERR_UNSUPPORTED, "no number within minimum/maximum");
    const char *fany = "( \".\" [0-9]{1,16} )?", *fzero = "( \".\" \"0\"{1,16} )?", *fnz = "\".\" [0-9]{0,15} [1-9]";
    sb_str(b, "( ");
    int alts = 0;
#define ALT() (alts++ ? sb_str(b, " | ") : (void)0)
    /* written without a sign: I >= 0, value in [I, I+1) */
    {
        long long a = bd.has_lo ? (bd.lo_excl ? L + 1 : L) : 0;
        if (a < 0) a = 0;
        long long z = bd.has_hi ? H - 1 : INT_CAP;
        if (z > INT_CAP) z = INT_CAP;
        if (a <= z) {
            ALT();
            nonneg_range(b, a, z);
            sb_fmt(b, " %s", fany);
        }
        if (bd.has_hi && !bd.hi_excl && H >= 0 && (!bd.has_lo || H > L || (H == L && !bd.lo_excl))) {
            ALT();
            sb_fmt(b, "\"%lld\" %s", H, fzero);
        }
        if (bd.has_lo && bd.lo_excl && L >= 0 && (!bd.has_hi || H > L)) {
            ALT();
            sb_fmt(b, "\"%lld\" %s", L, fnz);
        }
    }
    /* written with a sign: magnitude M >= 0, value in (-(M+1), -M] */
    if (!bd.has_lo || L < 0 || (L == 0 && 0)) {
        long long ma = bd.has_hi ? (bd.hi_excl ? -H + 1 : -H) : 0; /* M >= -H (exclusive: M > -H) */
        if (ma < 0) ma = 0;
        long long mz = bd.has_lo ? -L - 1 : INT_CAP; /* M < -L: any fraction */
        if (mz > INT_CAP) mz = INT_CAP;
        if (ma <= mz) {
            ALT();
            sb_str(b, "\"-\" ");
            nonneg_range(b, ma, mz);
            sb_fmt(b, " %s", fany);
        }
        if (bd.has_lo && !bd.lo_excl && L < 0 && -L >= ma) { /* M == -L: zero fraction */
            ALT();
            sb_fmt(b, "\"-%lld\" %s", -L, fzero);
        }
        if (bd.has_hi && bd.hi_excl && H <= 0 && (!bd.has_lo || -H < -L)) { /* M == -H: non-zero fraction */
            ALT();
            sb_fmt(b, "\"-%lld\" %s", -H, fnz);
        }
    }
#undef ALT
    if (!alts) return sc_fail(c, SD_ERR_UNSUPPORTED, "no number within minimum/maximum");
    sb_str(b, " )");
    return 0;
}

/* ---- patterns (a regular-expression subset) into GBNF over JSON string content ---- */
typedef struct {
    sc *c;
    const char *s;
    size_t n, i;
    int depth;
} rx;

static int rx_fail(rx *r, const char *what) {
    size_t m = sd_json_enter_key(&r->c->ctx, "pattern");
    sc_fail(r->c, SD_ERR_UNSUPPORTED, "%s at offset %zu of the pattern", what, r->i);
    sd_json_leave(&r->c->ctx, m);
    return -1;
}

/* One code point of the pattern (UTF-8), -1 on bad UTF-8. */
static long rx_cp(rx *r) {
    unsigned char ch = (unsigned char)r->s[r->i];
    int len = ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
    if (r->i + (size_t)len > r->n) return -1;
    long v = len == 1 ? ch : ch & (0x7F >> len);
    for (int k = 1; k < len; k++) v = v << 6 | ((unsigned char)r->s[r->i + (size_t)k] & 0x3F);
    r->i += (size_t)len;
    return v;
}

/* A code point as JSON string content, as a GBNF literal. */
static void emit_json_cp(sbuf *b, long cp) {
    char tmp[8];
    if (cp == '"') sb_str(b, "\"\\\\\\\"\"");
    else if (cp == '\\') sb_str(b, "\"\\\\\\\\\"");
    else if (cp == '\n') sb_str(b, "\"\\\\n\"");
    else if (cp == '\t') sb_str(b, "\"\\\\t\"");
    else if (cp == '\r') sb_str(b, "\"\\\\r\"");
    else if (cp < 0x20) {
        snprintf(tmp, sizeof tmp, "%04lx", cp);
        sb_fmt(b, "\"\\\\u%s\"", tmp);
    } else if (cp < 0x80) {
        char ch = (char)cp;
        sbuf t = {0};
        gbnf_lit(&t, &ch, 1);
        sb_str(b, t.p ? t.p : "\"\"");
        free(t.p);
    } else {
        sb_fmt(b, "\"\\U%08lX\"", cp);
    }
}

/* A code point class (ranges, maybe negated) minus what JSON must escape, as a GBNF class. */
static int emit_class(rx *r, sbuf *b, const long *rg, int n, int negate) {
    /* complement in [0, 0x10FFFF] if negated, then cut [0, 0x1F], '"', '\\' */
    long tmp[2 * 64 + 8];
    int m = 0;
    long *src = (long *)rg;
    long sorted[2 * 64];
    memcpy(sorted, rg, (size_t)n * 2 * sizeof *rg);
    for (int i = 1; i < n; i++) /* insertion sort by start */
        for (int j = i; j > 0 && sorted[2 * j] < sorted[2 * (j - 1)]; j--) {
            long a = sorted[2 * j], z = sorted[2 * j + 1];
            sorted[2 * j] = sorted[2 * (j - 1)], sorted[2 * j + 1] = sorted[2 * (j - 1) + 1];
            sorted[2 * (j - 1)] = a, sorted[2 * (j - 1) + 1] = z;
        }
    src = sorted;
    if (negate) {
        long next = 0;
        for (int i = 0; i < n; i++) {
            if (src[2 * i] > next) tmp[2 * m] = next, tmp[2 * m + 1] = src[2 * i] - 1, m++;
            if (src[2 * i + 1] + 1 > next) next = src[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) tmp[2 * m] = next, tmp[2 * m + 1] = 0x10FFFF, m++;
    } else {
        memcpy(tmp, src, (size_t)n * 2 * sizeof *src);
        m = n;
    }
    sbuf t = {0};
    sb_str(&t, "[");
    int any = 0;
    static const long cut[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (int i = 0; i < m; i++) {
        long lo = tmp[2 * i], hi = tmp[2 * i + 1];
        /* split around the cut ranges */
        long pieces[8][2];
        int np = 1;
        pieces[0][0] = lo, pieces[0][1] = hi;
        for (int k = 0; k < 3; k++) {
            int nn = 0;
            long out[8][2];
            for (int q = 0; q < np; q++) {
                long a = pieces[q][0], z = pieces[q][1];
                if (z < cut[k][0] || a > cut[k][1]) {
                    out[nn][0] = a, out[nn][1] = z, nn++;
                    continue;
                }
                if (a < cut[k][0]) out[nn][0] = a, out[nn][1] = cut[k][0] - 1, nn++;
                if (z > cut[k][1]) out[nn][0] = cut[k][1] + 1, out[nn][1] = z, nn++;
            }
            memcpy(pieces, out, sizeof out);
            np = nn;
        }
        for (int q = 0; q < np; q++) {
            sb_fmt(&t, "\\U%08lX-\\U%08lX", pieces[q][0], pieces[q][1]);
            any = 1;
        }
    }
    sb_str(&t, "]");
    if (!any) {
        free(t.p);
        return rx_fail(r, "a character class with no character a JSON string can hold unescaped");
    }
    sb_str(b, t.p);
    free(t.p);
    return 0;
}

static int rx_alt(rx *r, sbuf *b, int top);

/* An escape after '\' (r->i past it): a class (\d \w \s ...) or a code point. */
static int rx_escape(rx *r, long *cp, long *rg, int *n_rg, int *negate) {
    if (r->i >= r->n) return rx_fail(r, "a pattern ending in '\\'");
    char e = r->s[r->i++];
    *n_rg = 0;
    *negate = 0;
    switch (e) {
    case 'd': case 'D': rg[0] = '0', rg[1] = '9', *n_rg = 1, *negate = e == 'D'; return 1;
    case 'w': case 'W':
        rg[0] = '0', rg[1] = '9', rg[2] = 'A', rg[3] = 'Z', rg[4] = 'a', rg[5] = 'z', rg[6] = '_', rg[7] = '_';
        *n_rg = 4, *negate = e == 'W';
        return 1;
    case 's': case 'S': rg[0] = ' ', rg[1] = ' ', rg[2] = '\t', rg[3] = '\r', *n_rg = 2, *negate = e == 'S'; return 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': case 'u': {
        int digits = e == 'x' ? 2 : 4;
        long v = 0;
        for (int k = 0; k < digits; k++) {
            char h = r->i < r->n ? r->s[r->i] : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return rx_fail(r, "a \\x or \\u escape without its hexadecimal digits");
            v = v * 16 + d;
            r->i++;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(r, "a surrogate escape");
        *cp = v;
        return 0;
    }
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            char what[64];
            snprintf(what, sizeof what, "unsupported escape \\%c", e);
            return rx_fail(r, what);
        }
        *cp = (unsigned char)e;
        return 0;
    }
}

static int rx_class(rx *r, sbuf *b) {
    long rg[2 * 64];
    int n = 0, negate = 0;
    if (r->i < r->n && r->s[r->i] == '^') negate = 1, r->i++;
    int first = 1;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = 0;
        long lo, hi;
        if (r->s[r->i] == '[') return rx_fail(r, "nested '[' in a class");
        if (r->s[r->i] == '\\') {
            r->i++;
            long sub[8];
            int ns, neg;
            int k = rx_escape(r, &lo, sub, &ns, &neg);
            if (k < 0) return -1;
            if (k == 1) {
                if (neg) return rx_fail(r, "a negated escape (\\D \\W \\S) inside a class");
                for (int q = 0; q < ns && n < 64; q++) rg[2 * n] = sub[2 * q], rg[2 * n + 1] = sub[2 * q + 1], n++;
                continue;
            }
        } else if ((lo = rx_cp(r)) < 0) return rx_fail(r, "invalid UTF-8");
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                long sub[8];
                int ns, neg;
                int k = rx_escape(r, &hi, sub, &ns, &neg);
                if (k < 0) return -1;
                if (k == 1) return rx_fail(r, "a class escape as the end of a range");
            } else if ((hi = rx_cp(r)) < 0) return rx_fail(r, "invalid UTF-8");
            if (hi < lo) return rx_fail(r, "a range whose end is below its start");
        }
        if (n >= 64) return rx_fail(r, "a class of more than 64 ranges");
        rg[2 * n] = lo, rg[2 * n + 1] = hi, n++;
    }
    if (r->i >= r->n) return rx_fail(r, "a class without its ']'");
    r->i++;
    return emit_class(r, b, rg, n, negate);
}

/* An atom and its quantifier. Returns 1 when an atom was read, 0 at the end of a sequence. */
static int rx_atom(rx *r, sbuf *b, int top) {
    if (r->i >= r->n) return 0;
    char ch = r->s[r->i];
    if (ch == '|' || ch == ')') return 0;
    sbuf a = {0};
    int ok = 0;
    if (ch == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') r->i += 2;
            else if (r->i + 1 < r->n && r->s[r->i + 1] == '<' && r->i + 2 < r->n && r->s[r->i + 2] != '=' &&
                     r->s[r->i + 2] != '!') { /* a named group: its name is not part of the language */
                while (r->i < r->n && r->s[r->i] != '>') r->i++;
                r->i++;
            } else {
                free(a.p);
                return rx_fail(r, "lookaround and other (? groups are not supported");
            }
        }
        if (++r->depth > 64) {
            free(a.p);
            return rx_fail(r, "groups nested too deeply");
        }
        sb_str(&a, "( ");
        if (rx_alt(r, &a, 0)) {
            free(a.p);
            return -1;
        }
        r->depth--;
        if (r->i >= r->n || r->s[r->i] != ')') {
            free(a.p);
            return rx_fail(r, "a group without its ')'");
        }
        r->i++;
        sb_str(&a, " )");
        ok = 1;
    } else if (ch == '[') {
        r->i++;
        sb_str(&a, "( ");
        ok = rx_class(r, &a) == 0;
        sb_str(&a, " )");
    } else if (ch == '.') {
        r->i++;
        long nl[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};
        ok = emit_class(r, &a, nl, 3, 1) == 0;
    } else if (ch == '\\') {
        r->i++;
        long cp, rg[8];
        int nr, neg;
        int k = rx_escape(r, &cp, rg, &nr, &neg);
        if (k == 1) ok = emit_class(r, &a, rg, nr, neg) == 0;
        else if (k == 0) emit_json_cp(&a, cp), ok = 1;
    } else if (ch == '^' || ch == '$') {
        free(a.p);
        return rx_fail(r, "an anchor inside the pattern (only a leading ^ and a trailing $ are supported)");
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        free(a.p);
        return rx_fail(r, "a quantifier with nothing to repeat");
    } else {
        long cp = rx_cp(r);
        if (cp < 0) {
            free(a.p);
            return rx_fail(r, "invalid UTF-8");
        }
        emit_json_cp(&a, cp);
        ok = 1;
    }
    if (!ok || a.oom) {
        free(a.p);
        return -1;
    }
    /* quantifier */
    char q[64] = "";
    if (r->i < r->n) {
        char qc = r->s[r->i];
        if (qc == '*' || qc == '+' || qc == '?') {
            q[0] = qc, q[1] = 0;
            r->i++;
        } else if (qc == '{') {
            size_t save = r->i++;
            long mn = -1, mx = -1;
            int comma = 0;
            while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
                long d = r->s[r->i++] - '0';
                mn = (mn < 0 ? 0 : mn) > 100000 ? mn : (mn < 0 ? 0 : mn) * 10 + d; /* saturates past the limit */
            }
            if (r->i < r->n && r->s[r->i] == ',') {
                comma = 1;
                r->i++;
                while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
                    long d = r->s[r->i++] - '0';
                    mx = (mx < 0 ? 0 : mx) > 100000 ? mx : (mx < 0 ? 0 : mx) * 10 + d;
                }
            }
            if (mn < 0 || r->i >= r->n || r->s[r->i] != '}') { /* not a quantifier: a literal '{' in JS */
                r->i = save;
                free(a.p);
                return rx_fail(r, "a '{' that is not a {m,n} quantifier");
            }
            r->i++;
            if (mn > 10000 || mx > 10000 || (mx >= 0 && mx < mn)) {
                free(a.p);
                return rx_fail(r, "a {m,n} quantifier out of range");
            }
            if (!comma) snprintf(q, sizeof q, "{%ld}", mn);
            else if (mx < 0) snprintf(q, sizeof q, "{%ld,}", mn);
            else snprintf(q, sizeof q, "{%ld,%ld}", mn, mx);
        }
        if (q[0] && r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
    }
    if (q[0]) sb_fmt(b, "( %s )%s ", a.p, q);
    else sb_fmt(b, "%s ", a.p);
    free(a.p);
    (void)top;
    return 1;
}

static int rx_seq(rx *r, sbuf *b, int top) {
    int k, any = 0;
    while ((k = rx_atom(r, b, top)) == 1) any = 1;
    if (k < 0) return -1;
    if (!any) sb_str(b, "\"\" ");
    return 0;
}

/* Alternatives; at the top, each alternative may be anchored (^, $), and an unanchored side gets
 * any characters (JSON Schema patterns match anywhere in the string). */
static int rx_alt(rx *r, sbuf *b, int top) {
    for (int first = 1;; first = 0) {
        if (!first) sb_str(b, "| ");
        int a0 = 0, a1 = 0;
        if (top && r->i < r->n && r->s[r->i] == '^') a0 = 1, r->i++;
        if (!a0 && top) sb_str(b, "char* ");
        /* a trailing $ of this alternative: find where it ends */
        sbuf t = {0};
        size_t save_n = r->n;
        if (top) { /* limit the sequence to before a '$' that ends this alternative */
            size_t j = r->i;
            int depth = 0, in_class = 0;
            while (j < r->n) {
                char ch = r->s[j];
                if (ch == '\\') {
                    j += 2;
                    continue;
                }
                if (in_class) {
                    if (ch == ']') in_class = 0;
                } else if (ch == '[') in_class = 1;
                else if (ch == '(') depth++;
                else if (ch == ')') depth--;
                else if (ch == '|' && depth == 0) break;
                j++;
            }
            if (j > r->i && r->s[j - 1] == '$' && (j < 2 || r->s[j - 2] != '\\')) {
                a1 = 1;
                r->n = j - 1;
            }
        }
        int rc = rx_seq(r, &t, top);
        r->n = save_n;
        if (a1) r->i++; /* past the '$' */
        if (rc) {
            free(t.p);
            return -1;
        }
        sb_str(b, t.p ? t.p : "");
        free(t.p);
        if (!a1 && top) sb_str(b, "char* ");
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        return 0;
    }
}

static int gen_pattern(sc *c, const char *pat, sbuf *b) {
    rx r = {c, pat, strlen(pat), 0, 0};
    sb_str(b, "\"\\\"\" ( ");
    if (rx_alt(&r, b, 1)) return -1;
    if (r.i < r.n) return rx_fail(&r, "an unmatched ')'");
    sb_str(b, ") \"\\\"\"");
    return 0;
}

static const struct {
    const char *name, *gbnf;
} k_formats[] = {
    {"date", "\"\\\"\" date \"\\\"\""},
    {"time", "\"\\\"\" time \"\\\"\""},
    {"date-time", "\"\\\"\" date \"T\" time \"\\\"\""},
    {"uuid", "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\""},
    {"email", "\"\\\"\" eatom ( \".\" eatom )* \"@\" elabel ( \".\" elabel )+ \"\\\"\""},
    {"ipv4", "\"\\\"\" ipbyte \".\" ipbyte \".\" ipbyte \".\" ipbyte \"\\\"\""},
};
static const char k_format_rules[] =
    "date ::= [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
    "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02\" \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
    "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "eatom ::= [a-zA-Z0-9_+-]+\n"
    "elabel ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]* [a-zA-Z0-9] )?\n"
    "ipbyte ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]\n";

static int gen_string(sc *c, const cJSON *s, sbuf *b) {
    long mn = 0, mx = -1;
    int has_min, has_max;
    if ((has_min = get_count(c, s, "minLength", &mn)) < 0 || (has_max = get_count(c, s, "maxLength", &mx)) < 0) return -1;
    const cJSON *pat = kw(s, "pattern"), *fmt = kw(s, "format");
    if (pat || fmt) {
        const char *which = pat ? "pattern" : "format";
        if (pat && fmt) {
            size_t m = sd_json_enter_key(&c->ctx, "format");
            sc_fail(c, SD_ERR_UNSUPPORTED, "format together with pattern is not supported");
            sd_json_leave(&c->ctx, m);
            return -1;
        }
        if (has_min || has_max) {
            size_t m = sd_json_enter_key(&c->ctx, has_min ? "minLength" : "maxLength");
            sc_fail(c, SD_ERR_UNSUPPORTED, "%s together with %s is not supported", has_min ? "minLength" : "maxLength", which);
            sd_json_leave(&c->ctx, m);
            return -1;
        }
        size_t m = sd_json_enter_key(&c->ctx, which);
        int r = 0;
        if (!cJSON_IsString(pat ? pat : fmt)) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a string");
        else if (pat) r = gen_pattern(c, pat->valuestring, b);
        else {
            int f = -1;
            for (size_t i = 0; i < sizeof k_formats / sizeof k_formats[0]; i++)
                if (!strcmp(fmt->valuestring, k_formats[i].name)) f = (int)i;
            if (f < 0)
                r = sc_fail(c, SD_ERR_UNSUPPORTED,
                            "unsupported format \"%.60s\" (supported: date, time, date-time, uuid, email, ipv4)",
                            fmt->valuestring);
            else sb_str(b, k_formats[f].gbnf);
        }
        sd_json_leave(&c->ctx, m);
        return r;
    }
    if (has_max && mx < mn) return sc_fail(c, SD_ERR_UNSUPPORTED, "maxLength below minLength");
    if (!has_min && !has_max) sb_str(b, "string");
    else if (mx < 0) sb_fmt(b, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
    else sb_fmt(b, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
    return 0;
}

/* Additional property keys: ASCII without quote or backslash, never one of the declared names (a
 * trie of them: at each prefix, a byte off the trie frees the rest, a byte on it descends). */
static int gen_key_excluding(sc *c, const cJSON *props, int *rule) {
    const char *names[512];
    int n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        const char *k = p->string;
        int ascii = 1;
        for (const char *q = k; *q; q++)
            if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7E || *q == '"' || *q == '\\') ascii = 0;
        if (!ascii) continue; /* such a name can never be spelled by these keys */
        if (n == 512) return sc_fail(c, SD_ERR_UNSUPPORTED, "more than 512 properties with additionalProperties");
        names[n++] = k;
    }
    /* each trie node is a prefix; nodes are generated depth-first */
    typedef struct {
        const char *pfx;
        size_t len;
        int rule;
    } node;
    node *st = malloc(sizeof(node) * (size_t)(4096 + 1));
    if (!st) return sc_fail(c, SD_ERR_NOMEM, "out of memory");
    int sp = 0, made = 0;
    *rule = new_rule(c);
    st[sp++] = (node){"", 0, *rule};
    sbuf *o = &c->out;
    while (sp && made++ < 20000) {
        node nd = st[--sp];
        rule_head(c, nd.rule);
        uint8_t child[128] = {0};
        int is_name = 0;
        for (int i = 0; i < n; i++)
            if (strlen(names[i]) >= nd.len && !memcmp(names[i], nd.pfx, nd.len)) {
                if (names[i][nd.len]) child[(unsigned char)names[i][nd.len]] = 1;
                else is_name = 1;
            }
        int alts = 0;
        /* a byte off the trie: class of kchar minus children */
        sbuf cls = {0};
        int any = 0;
        for (int ch = 0x20; ch <= 0x7E; ch++) {
            if (ch == '"' || ch == '\\' || child[ch]) continue;
            sb_fmt(&cls, "\\x%02X", ch);
            any = 1;
        }
        if (any) {
            sb_fmt(o, "[%s] kchar* \"\\\"\"", cls.p);
            alts++;
        }
        free(cls.p);
        for (int ch = 0x20; ch <= 0x7E; ch++) {
            if (!child[ch]) continue;
            if (sp >= 4096) {
                free(st);
                return sc_fail(c, SD_ERR_UNSUPPORTED, "property names too many or too long for additionalProperties");
            }
            int r = new_rule(c);
            /* the child's prefix: find a name spelling it */
            const char *src = NULL;
            for (int i = 0; i < n && !src; i++)
                if (strlen(names[i]) > nd.len && !memcmp(names[i], nd.pfx, nd.len) && (unsigned char)names[i][nd.len] == ch)
                    src = names[i];
            st[sp++] = (node){src, nd.len + 1, r};
            char chs = (char)ch;
            if (alts++) sb_str(o, " | ");
            gbnf_lit(o, &chs, 1);
            sb_fmt(o, " r%d", r);
        }
        if (!is_name) {
            if (alts++) sb_str(o, " | ");
            sb_str(o, "\"\\\"\"");
        }
        if (!alts) sb_str(o, "\"\\\"\" \"\\\"\""); /* cannot happen: a name has a next byte or ends */
        sb_str(o, "\n");
    }
    free(st);
    return 0;
}

static int gen_object(sc *c, const cJSON *s, sbuf *b) {
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required"), *addl = kw(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) {
        size_t m = sd_json_enter_key(&c->ctx, "properties");
        sc_fail(c, SD_ERR_INVALID_ARG, "expected an object");
        sd_json_leave(&c->ctx, m);
        return -1;
    }
    if (props && sd_json_check_unique(&c->ctx, props) != SD_OK) return c->err = SD_ERR_INVALID_ARG, -1;
    if (req) {
        size_t m = sd_json_enter_key(&c->ctx, "required");
        if (!cJSON_IsArray(req)) {
            sc_fail(c, SD_ERR_INVALID_ARG, "expected an array of property names");
            sd_json_leave(&c->ctx, m);
            return -1;
        }
        int i = 0;
        for (const cJSON *r = req->child; r; r = r->next, i++) {
            size_t m2 = sd_json_enter_index(&c->ctx, i);
            int bad = 0;
            if (!cJSON_IsString(r)) bad = sc_fail(c, SD_ERR_INVALID_ARG, "expected a property name");
            else if (!props || !kw(props, r->valuestring))
                bad = sc_fail(c, SD_ERR_UNSUPPORTED, "required property \"%.80s\" is not in properties", r->valuestring);
            sd_json_leave(&c->ctx, m2);
            if (bad) {
                sd_json_leave(&c->ctx, m);
                return -1;
            }
        }
        sd_json_leave(&c->ctx, m);
    }
    /* additional properties: absent or false: none are generated (a subset of what absent allows) */
    int add_rule = -1;
    if (addl && !cJSON_IsFalse(addl)) {
        if (cJSON_IsTrue(addl)) add_rule = -2; /* any value */
        else if (gen_at(c, s, "additionalProperties", -1, &add_rule)) return -1;
    }
    if (!props || !props->child) {
        if (add_rule == -1 && addl && cJSON_IsFalse(addl)) {
            sb_str(b, "\"{\" ws \"}\"");
            return 0;
        }
        if (add_rule == -1 || add_rule == -2) {
            sb_str(b, "object");
            return 0;
        }
        sb_fmt(b, "\"{\" ws ( string ws \":\" ws r%d ws ( \",\" ws string ws \":\" ws r%d ws )* )? \"}\"", add_rule, add_rule);
        return 0;
    }
    /* the properties in their order, each required or optional: S_i (none written yet), T_i (some) */
    int np = 0;
    for (const cJSON *p = props->child; p; p = p->next) np++;
    int *kv = malloc(sizeof(int) * (size_t)np), *is_req = calloc((size_t)np, sizeof(int));
    if (!kv || !is_req) {
        free(kv);
        free(is_req);
        return sc_fail(c, SD_ERR_NOMEM, "out of memory");
    }
    int i = 0;
    size_t mp = sd_json_enter_key(&c->ctx, "properties");
    for (const cJSON *p = props->child; p; p = p->next, i++) {
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!strcmp(r->valuestring, p->string)) is_req[i] = 1;
        if (cJSON_IsFalse(p)) { /* a property that must not appear */
            if (is_req[i]) {
                size_t m = sd_json_enter_key(&c->ctx, p->string);
                sc_fail(c, SD_ERR_UNSUPPORTED, "a required property whose schema is false");
                sd_json_leave(&c->ctx, m);
                sd_json_leave(&c->ctx, mp);
                free(kv);
                free(is_req);
                return -1;
            }
            kv[i] = -1;
            continue;
        }
        int vr;
        if (gen_at(c, props, p->string, -1, &vr)) {
            sd_json_leave(&c->ctx, mp);
            free(kv);
            free(is_req);
            return -1;
        }
        kv[i] = new_rule(c);
        rule_head(c, kv[i]);
        cJSON *name = cJSON_CreateString(p->string);
        if (!name || json_lit(c, &c->out, name)) {
            cJSON_Delete(name);
            sd_json_leave(&c->ctx, mp);
            free(kv);
            free(is_req);
            return sc_fail(c, SD_ERR_NOMEM, "out of memory");
        }
        cJSON_Delete(name);
        sb_fmt(&c->out, " ws \":\" ws r%d ws\n", vr);
    }
    sd_json_leave(&c->ctx, mp);
    int key_rule = -1;
    if (add_rule != -1 && gen_key_excluding(c, props, &key_rule)) {
        free(kv);
        free(is_req);
        return -1;
    }
    int base = c->n_rules;
    c->n_rules += 2 * (np + 1); /* S_i = base + 2i, T_i = base + 2i + 1 */
    for (i = 0; i <= np; i++) {
        int S = base + 2 * i, T = S + 1;
        if (i == np) {
            if (add_rule == -1) {
                sb_fmt(&c->out, "r%d ::= \"\"\nr%d ::= \"\"\n", S, T);
            } else {
                char val[16];
                if (add_rule == -2) snprintf(val, sizeof val, "value");
                else snprintf(val, sizeof val, "r%d", add_rule);
                sb_fmt(&c->out, "r%d ::= ( \"\\\"\" r%d ws \":\" ws %s ws ( \",\" ws \"\\\"\" r%d ws \":\" ws %s ws )* )?\n", S,
                       key_rule, val, key_rule, val);
                sb_fmt(&c->out, "r%d ::= ( \",\" ws \"\\\"\" r%d ws \":\" ws %s ws )*\n", T, key_rule, val);
            }
            continue;
        }
        if (kv[i] < 0) {
            sb_fmt(&c->out, "r%d ::= r%d\nr%d ::= r%d\n", S, S + 2, T, T + 2);
            continue;
        }
        sb_fmt(&c->out, "r%d ::= r%d r%d%s", S, kv[i], T + 2, is_req[i] ? "\n" : "");
        if (!is_req[i]) sb_fmt(&c->out, " | r%d\n", S + 2);
        sb_fmt(&c->out, "r%d ::= \",\" ws r%d r%d%s", T, kv[i], T + 2, is_req[i] ? "\n" : "");
        if (!is_req[i]) sb_fmt(&c->out, " | r%d\n", T + 2);
    }
    sb_fmt(b, "\"{\" ws r%d \"}\"", base);
    free(kv);
    free(is_req);
    return 0;
}

static int gen_array(sc *c, const cJSON *s, sbuf *b) {
    long mn = 0, mx = -1;
    if (get_count(c, s, "minItems", &mn) < 0 || get_count(c, s, "maxItems", &mx) < 0) return -1;
    if (mx >= 0 && mx < mn) return sc_fail(c, SD_ERR_UNSUPPORTED, "maxItems below minItems");
    const cJSON *items = kw(s, "items"), *prefix = kw(s, "prefixItems"), *addi = kw(s, "additionalItems");
    const char *prefix_key = "prefixItems";
    const cJSON *rest = items; /* the schema of items past the tuple */
    const char *rest_key = "items";
    if (items && cJSON_IsArray(items)) { /* draft 7 tuple form */
        if (prefix) {
            size_t m = sd_json_enter_key(&c->ctx, "items");
            sc_fail(c, SD_ERR_INVALID_ARG, "an array of schemas together with prefixItems");
            sd_json_leave(&c->ctx, m);
            return -1;
        }
        prefix = items, prefix_key = "items";
        rest = addi, rest_key = "additionalItems";
    } else if (addi) {
        (void)0; /* additionalItems without a tuple has no effect */
    }
    if (prefix && !cJSON_IsArray(prefix)) {
        size_t m = sd_json_enter_key(&c->ctx, prefix_key);
        sc_fail(c, SD_ERR_INVALID_ARG, "expected an array of schemas");
        sd_json_leave(&c->ctx, m);
        return -1;
    }
    int n_pre = prefix ? cJSON_GetArraySize(prefix) : 0;
    /* the rest: a rule, "value" (absent or true without a tuple), or none (false; absent after a
     * tuple unless minItems needs more) */
    char rest_name[16] = "value";
    int rest_none = 0;
    if (rest && cJSON_IsFalse(rest)) rest_none = 1;
    else if (rest && !cJSON_IsTrue(rest)) {
        int r;
        if (gen_at(c, s, rest_key, -1, &r)) return -1;
        snprintf(rest_name, sizeof rest_name, "r%d", r);
    } else if (!rest && n_pre > 0 && mn <= n_pre) rest_none = 1;
    if (rest_none && mn > n_pre) return sc_fail(c, SD_ERR_UNSUPPORTED, "minItems needs more items than the schema allows");
    long cap = rest_none ? n_pre : mx; /* most items; -1 unbounded */
    if (mx >= 0 && (cap < 0 || mx < cap)) cap = mx;
    int *pre = malloc(sizeof(int) * (size_t)(n_pre + 1));
    if (!pre) return sc_fail(c, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_pre; i++) {
        size_t m = sd_json_enter_key(&c->ctx, prefix_key);
        int r = gen_at(c, prefix, NULL, i, &pre[i]);
        sd_json_leave(&c->ctx, m);
        if (r) {
            free(pre);
            return -1;
        }
    }
    if (cap == 0) {
        sb_str(b, "\"[\" ws \"]\"");
        free(pre);
        return 0;
    }
    /* item i >= 1 comes after ","; L_i: the items from index i on */
    sbuf *o = &c->out;
    int tail = new_rule(c); /* the items past the tuple, each after a comma */
    long have = n_pre > 0 ? n_pre : 1; /* items written before the tail */
    long tmin = mn > have ? mn - have : 0, tmax = cap < 0 ? -1 : cap - have;
    rule_head(c, tail);
    if (tmax == 0 || (rest_none)) sb_str(o, "\"\"\n");
    else if (tmax < 0) sb_fmt(o, "( \",\" ws %s ws ){%ld,}\n", rest_name, tmin);
    else sb_fmt(o, "( \",\" ws %s ws ){%ld,%ld}\n", rest_name, tmin, tmax);
    int next = tail;
    for (int i = n_pre - 1; i >= 1; i--) { /* L_i ::= "," ws P_i ws L_{i+1} | "" (when i >= mn) */
        if (cap >= 0 && i >= cap) continue;
        int r = new_rule(c);
        rule_head(c, r);
        sb_fmt(o, "\",\" ws r%d ws r%d%s\n", pre[i], next, i >= mn ? " | \"\"" : "");
        next = r;
    }
    char first[16];
    if (n_pre > 0) snprintf(first, sizeof first, "r%d", pre[0]);
    else snprintf(first, sizeof first, "%s", rest_name);
    sb_fmt(b, "\"[\" ws ( %s ws r%d )%s \"]\"", first, next, mn == 0 ? "?" : "");
    free(pre);
    return 0;
}

/* The JSON types a schema can produce (bits), for the oneOf exclusivity check. */
enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_FRAC = 8, T_STR = 16, T_OBJ = 32, T_ARR = 64, T_ALL = 127 };

static int value_types(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) ? T_INT : T_FRAC;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsArray(v)) return T_ARR;
    return T_OBJ;
}

static const cJSON *resolve_ref(sc *c, const char *ref);

static int schema_types(sc *c, const cJSON *s, int depth) {
    if (depth > 16 || !s) return T_ALL;
    if (cJSON_IsFalse(s)) return 0;
    if (!cJSON_IsObject(s)) return T_ALL;
    const cJSON *r = kw(s, "$ref");
    if (r && cJSON_IsString(r)) return schema_types(c, resolve_ref(c, r->valuestring), depth + 1);
    const cJSON *k = kw(s, "const");
    if (k) return value_types(k);
    const cJSON *e = kw(s, "enum");
    if (e && cJSON_IsArray(e)) {
        int t = 0;
        for (const cJSON *v = e->child; v; v = v->next) t |= value_types(v);
        return t;
    }
    const cJSON *ty = kw(s, "type");
    int t = 0;
    static const struct {
        const char *n;
        int t;
    } names[] = {{"null", T_NULL}, {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_INT | T_FRAC},
                 {"string", T_STR}, {"object", T_OBJ}, {"array", T_ARR}};
    if (ty) {
        for (int i = 0; i < (cJSON_IsArray(ty) ? cJSON_GetArraySize(ty) : 1); i++) {
            const cJSON *x = cJSON_IsArray(ty) ? cJSON_GetArrayItem(ty, i) : ty;
            for (size_t j = 0; j < sizeof names / sizeof names[0]; j++)
                if (cJSON_IsString(x) && !strcmp(x->valuestring, names[j].n)) t |= names[j].t;
        }
        if (cJSON_IsTrue(kw(s, "nullable"))) t |= T_NULL;
        return t;
    }
    const cJSON *alts = kw(s, "anyOf") ? kw(s, "anyOf") : kw(s, "oneOf");
    if (alts && cJSON_IsArray(alts)) {
        for (const cJSON *a = alts->child; a; a = a->next) t |= schema_types(c, a, depth + 1);
        return t;
    }
    return T_ALL;
}

/* The values a required property is fixed to (const or enum), for discriminated unions. */
static const cJSON *discriminator_values(sc *c, const cJSON *s, const char *prop) {
    for (int d = 0; d < 16 && s && cJSON_IsObject(s) && kw(s, "$ref") && cJSON_IsString(kw(s, "$ref")); d++)
        s = resolve_ref(c, kw(s, "$ref")->valuestring);
    if (!s || !cJSON_IsObject(s)) return NULL;
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required");
    const cJSON *p = props ? kw(props, prop) : NULL;
    if (!p || !req || !cJSON_IsArray(req)) return NULL;
    int is_req = 0;
    for (const cJSON *r = req->child; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, prop)) is_req = 1;
    if (!is_req || !cJSON_IsObject(p)) return NULL;
    return kw(p, "const") ? kw(p, "const") : kw(p, "enum");
}

static int values_overlap(const cJSON *a, const cJSON *b) {
    int na = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 1, nb = cJSON_IsArray(b) ? cJSON_GetArraySize(b) : 1;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (cJSON_Compare(cJSON_IsArray(a) ? cJSON_GetArrayItem(a, i) : a, cJSON_IsArray(b) ? cJSON_GetArrayItem(b, j) : b,
                              1))
                return 1;
    return 0;
}

/* oneOf is honoured only where no value can match two branches: their types are disjoint, or
 * they are objects told apart by a required property fixed to disjoint values. */
static int one_of_exclusive(sc *c, const cJSON *alts) {
    int n = cJSON_GetArraySize(alts);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const cJSON *a = cJSON_GetArrayItem(alts, i), *b = cJSON_GetArrayItem(alts, j);
            int ta = schema_types(c, a, 0), tb = schema_types(c, b, 0);
            if (!(ta & tb)) continue;
            if (ta == T_OBJ && tb == T_OBJ) {
                const cJSON *ra = a, *ps = NULL;
                for (int d = 0; d < 16 && ra && cJSON_IsObject(ra) && kw(ra, "$ref") && cJSON_IsString(kw(ra, "$ref")); d++)
                    ra = resolve_ref(c, kw(ra, "$ref")->valuestring);
                ps = ra && cJSON_IsObject(ra) ? kw(ra, "properties") : NULL;
                int told = 0;
                for (const cJSON *p = ps ? ps->child : NULL; p && !told; p = p->next) {
                    const cJSON *va = discriminator_values(c, a, p->string), *vb = discriminator_values(c, b, p->string);
                    if (va && vb && !values_overlap(va, vb)) told = 1;
                }
                if (told) continue;
            }
            return 0;
        }
    return 1;
}

static const cJSON *resolve_ref(sc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    if (!*p) return cur;
    if (*p != '/') return NULL;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') tok[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') tok[n++] = '/', p += 2;
            else tok[n++] = *p++;
        }
        tok[n] = 0;
        if (*p && *p != '/') return NULL;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *end || !n ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else if (cJSON_IsObject(cur)) {
            cur = kw(cur, tok);
        } else {
            cur = NULL;
        }
    }
    return cur;
}

/* The keywords that constrain values (everything but annotations and containers). */
static int has_validation_sibling(const cJSON *s, const char *except, const char **which) {
    for (const cJSON *it = s->child; it; it = it->next) {
        const char *k = it->string;
        if (!strcmp(k, except) || !strncmp(k, "x-", 2) || !strcmp(k, "$defs") || !strcmp(k, "definitions")) continue;
        int ann = 0;
        for (size_t i = 0; i < sizeof k_keywords / sizeof k_keywords[0]; i++)
            if (!strcmp(k, k_keywords[i].name) && k_keywords[i].kind == KW_ANNOTATION) ann = 1;
        if (!ann) {
            *which = k;
            return 1;
        }
    }
    return 0;
}

static int gen_types(sc *c, const cJSON *s, int types, sbuf *b) {
    static const struct {
        int t;
        const char *name;
    } order[] = {{T_OBJ, "object"}, {T_ARR, "array"}, {T_STR, "string"}, {T_INT | T_FRAC, "number"},
                 {T_INT, "integer"}, {T_BOOL, "boolean"}, {T_NULL, "null"}};
    int alts = 0;
    sb_str(b, "( ");
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        int t = order[i].t;
        if ((types & t) != t) continue;
        if (t == T_INT && (types & T_FRAC)) continue; /* number covers it */
        if (alts++) sb_str(b, " | ");
        int r = 0;
        switch (t) {
        case T_OBJ: r = gen_object(c, s, b); break;
        case T_ARR: r = gen_array(c, s, b); break;
        case T_STR: r = gen_string(c, s, b); break;
        case T_INT | T_FRAC: r = gen_number(c, s, b); break;
        case T_INT: r = gen_integer(c, s, b); break;
        case T_BOOL: sb_str(b, "boolean"); break;
        default: sb_str(b, "null"); break;
        }
        if (r) return -1;
    }
    sb_str(b, " )");
    return 0;
}

static int gen(sc *c, const cJSON *s, int *rule) {
    if (c->err != SD_OK) return -1;
    if (!s) return sc_fail(c, SD_ERR_INVALID_ARG, "expected a schema");
    if (cJSON_IsTrue(s)) {
        *rule = new_rule(c);
        sb_fmt(&c->out, "r%d ::= value\n", *rule);
        return 0;
    }
    if (cJSON_IsFalse(s)) return sc_fail(c, SD_ERR_UNSUPPORTED, "the schema false allows no value here");
    if (!cJSON_IsObject(s)) return sc_fail(c, SD_ERR_INVALID_ARG, "expected a schema (an object or a boolean)");
    if (++c->depth > SC_MAX_DEPTH) return sc_fail(c, SD_ERR_UNSUPPORTED, "schema nested more than %d levels", SC_MAX_DEPTH);
    if (check_keywords(c, s)) return -1;
    const char *sib = NULL;
    sbuf body = {0};
    int r = 0;
    const cJSON *ref = kw(s, "$ref"), *cst = kw(s, "const"), *en = kw(s, "enum");
    const cJSON *any = kw(s, "anyOf"), *one = kw(s, "oneOf"), *all = kw(s, "allOf");
    if (ref) {
        size_t m = sd_json_enter_key(&c->ctx, "$ref");
        if (!cJSON_IsString(ref)) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a string");
        else if (has_validation_sibling(s, "$ref", &sib))
            r = sc_fail(c, SD_ERR_UNSUPPORTED, "$ref together with \"%s\" is not supported", sib);
        else {
            int found = -1;
            for (int i = 0; i < c->n_refs; i++)
                if (!strcmp(c->refs[i].ref, ref->valuestring)) found = c->refs[i].rule;
            if (found >= 0) {
                *rule = found;
            } else {
                const cJSON *t = resolve_ref(c, ref->valuestring);
                if (!t) r = sc_fail(c, SD_ERR_UNSUPPORTED, "cannot resolve \"%.100s\" (only #/... within the schema)",
                                    ref->valuestring);
                else if (c->n_refs == c->cap_refs &&
                         !(c->refs = realloc(c->refs, sizeof *c->refs * (size_t)(c->cap_refs = c->cap_refs * 2 + 8))))
                    r = sc_fail(c, SD_ERR_NOMEM, "out of memory");
                else {
                    /* the rule is named before the target is generated, so recursion refers to it */
                    int rr = new_rule(c);
                    c->refs[c->n_refs].ref = strdup(ref->valuestring);
                    c->refs[c->n_refs++].rule = rr;
                    char saved[256];
                    snprintf(saved, sizeof saved, "%s", c->ctx.path);
                    snprintf(c->ctx.path, sizeof c->ctx.path, "%.250s", ref->valuestring + 1);
                    for (char *q = c->ctx.path; *q; q++)
                        if (*q == '/') *q = '.';
                    int tr;
                    r = gen(c, t, &tr);
                    snprintf(c->ctx.path, sizeof c->ctx.path, "%s", saved);
                    if (!r) sb_fmt(&c->out, "r%d ::= r%d\n", rr, tr);
                    *rule = rr;
                }
            }
        }
        sd_json_leave(&c->ctx, m);
        c->depth--;
        return r;
    }
    if (cst || en) {
        const char *k = cst ? "const" : "enum";
        size_t m = sd_json_enter_key(&c->ctx, k);
        if (cst && en) r = sc_fail(c, SD_ERR_UNSUPPORTED, "const together with enum is not supported");
        else if (en && (!cJSON_IsArray(en) || !en->child)) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a non-empty array");
        sd_json_leave(&c->ctx, m);
        for (const cJSON *it = s->child; it && !r; it = it->next) {
            const char *key = it->string;
            int ok = !strcmp(key, k) || !strcmp(key, "type") || !strcmp(key, "nullable") || !strncmp(key, "x-", 2) ||
                     !strcmp(key, "$defs") || !strcmp(key, "definitions");
            for (size_t i = 0; i < sizeof k_keywords / sizeof k_keywords[0] && !ok; i++)
                if (!strcmp(key, k_keywords[i].name) && k_keywords[i].kind == KW_ANNOTATION) ok = 1;
            if (!ok) {
                size_t m2 = sd_json_enter_key(&c->ctx, key);
                r = sc_fail(c, SD_ERR_UNSUPPORTED, "\"%s\" together with %s is not supported", key, k);
                sd_json_leave(&c->ctx, m2);
            }
        }
        if (!r) {
            int types = T_ALL;
            if (kw(s, "type")) { /* values of other types are left out */
                const cJSON *ty = kw(s, "type");
                types = 0;
                static const char *nm[] = {"null", "boolean", "integer", "number", "string", "object", "array"};
                static const int tv[] = {T_NULL, T_BOOL, T_INT, T_INT | T_FRAC, T_STR, T_OBJ, T_ARR};
                for (int i = 0; i < (cJSON_IsArray(ty) ? cJSON_GetArraySize(ty) : 1); i++) {
                    const cJSON *x = cJSON_IsArray(ty) ? cJSON_GetArrayItem(ty, i) : ty;
                    for (int j = 0; j < 7; j++)
                        if (cJSON_IsString(x) && !strcmp(x->valuestring, nm[j])) types |= tv[j];
                }
                if (cJSON_IsTrue(kw(s, "nullable"))) types |= T_NULL;
            }
            int alts = 0;
            sb_str(&body, "( ");
            for (const cJSON *v = cst ? cst : en->child; v; v = cst ? NULL : v->next) {
                if (!(value_types(v) & types)) continue;
                if (alts++) sb_str(&body, " | ");
                if (json_lit(c, &body, v)) break;
            }
            sb_str(&body, " )");
            if (!alts && c->err == SD_OK) {
                size_t m2 = sd_json_enter_key(&c->ctx, k);
                r = sc_fail(c, SD_ERR_UNSUPPORTED, "no value of %s has the schema's type", k);
                sd_json_leave(&c->ctx, m2);
            }
            if (c->err != SD_OK) r = -1;
        }
    } else if (any || one || all) {
        const char *k = any ? "anyOf" : one ? "oneOf" : "allOf";
        const cJSON *alts = any ? any : one ? one : all;
        size_t m = sd_json_enter_key(&c->ctx, k);
        if ((any && one) || (any && all) || (one && all))
            r = sc_fail(c, SD_ERR_UNSUPPORTED, "%s together with %s is not supported", k, one && all ? "allOf" : "oneOf");
        else if (!cJSON_IsArray(alts) || !alts->child) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a non-empty array of schemas");
        else if (has_validation_sibling(s, k, &sib)) r = sc_fail(c, SD_ERR_UNSUPPORTED, "%s together with \"%s\" is not supported", k, sib);
        else if (all && cJSON_GetArraySize(alts) != 1)
            r = sc_fail(c, SD_ERR_UNSUPPORTED, "allOf of more than one schema is not supported");
        else if (one && !one_of_exclusive(c, alts))
            r = sc_fail(c, SD_ERR_UNSUPPORTED,
                        "oneOf whose branches may match the same value (only branches of different types, or objects "
                        "told apart by a required const/enum property, are supported)");
        else {
            int i = 0, n = 0;
            sb_str(&body, "( ");
            for (const cJSON *a = alts->child; a && !r; a = a->next, i++) {
                if (cJSON_IsFalse(a)) continue;
                int ar;
                r = gen_at(c, alts, NULL, i, &ar);
                if (!r) sb_fmt(&body, "%sr%d", n++ ? " | " : "", ar);
            }
            sb_str(&body, " )");
            if (!r && !n) r = sc_fail(c, SD_ERR_UNSUPPORTED, "no branch allows a value");
        }
        sd_json_leave(&c->ctx, m);
    } else {
        int types = T_ALL;
        const cJSON *ty = kw(s, "type");
        if (ty) {
            size_t m = sd_json_enter_key(&c->ctx, "type");
            static const char *nm[] = {"null", "boolean", "integer", "number", "string", "object", "array"};
            static const int tv[] = {T_NULL, T_BOOL, T_INT, T_INT | T_FRAC, T_STR, T_OBJ, T_ARR};
            types = 0;
            int n = cJSON_IsArray(ty) ? cJSON_GetArraySize(ty) : 1;
            if (cJSON_IsArray(ty) && !n) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected a type name or a non-empty array of them");
            for (int i = 0; i < n && !r; i++) {
                const cJSON *x = cJSON_IsArray(ty) ? cJSON_GetArrayItem(ty, i) : ty;
                int f = -1;
                for (int j = 0; j < 7 && cJSON_IsString(x); j++)
                    if (!strcmp(x->valuestring, nm[j])) f = j;
                if (f < 0) r = sc_fail(c, SD_ERR_INVALID_ARG, "expected null, boolean, integer, number, string, object or array");
                else types |= tv[f];
            }
            sd_json_leave(&c->ctx, m);
        } else {
            /* no type: the keywords present say which types they constrain; generating only those
             * types keeps every output valid */
            static const struct {
                const char *k;
                int t;
            } implies[] = {{"properties", T_OBJ}, {"required", T_OBJ}, {"additionalProperties", T_OBJ},
                           {"items", T_ARR}, {"prefixItems", T_ARR}, {"minItems", T_ARR}, {"maxItems", T_ARR},
                           {"minLength", T_STR}, {"maxLength", T_STR}, {"pattern", T_STR}, {"format", T_STR},
                           {"minimum", T_INT | T_FRAC}, {"maximum", T_INT | T_FRAC},
                           {"exclusiveMinimum", T_INT | T_FRAC}, {"exclusiveMaximum", T_INT | T_FRAC}};
            int t = 0;
            for (size_t i = 0; i < sizeof implies / sizeof implies[0]; i++)
                if (kw(s, implies[i].k)) t |= implies[i].t;
            if (t) types = t;
        }
        if (cJSON_IsTrue(kw(s, "nullable"))) types |= T_NULL;
        if (!r) r = gen_types(c, s, types, &body);
    }
    if (!r && (body.oom || c->out.oom)) r = sc_fail(c, SD_ERR_NOMEM, "out of memory");
    if (!r) {
        *rule = new_rule(c);
        sb_fmt(&c->out, "r%d ::= %s\n", *rule, body.p ? body.p : "\"\"");
    }
    free(body.p);
    c->depth--;
    return r;
}

/* Every string and key of the document is valid UTF-8 (the grammar text carries them). */
static int check_utf8(sc *c, const cJSON *v) {
    for (const cJSON *it = v; it; it = it->next) {
        const char *strs[2] = {it->string, cJSON_IsString(it) ? it->valuestring : NULL};
        for (int k = 0; k < 2; k++) {
            const unsigned char *p = (const unsigned char *)strs[k];
            if (!p) continue;
            while (*p) {
                unsigned ch = *p;
                int len = ch < 0x80 ? 1 : ch >= 0xC2 && ch <= 0xDF ? 2 : ch >= 0xE0 && ch <= 0xEF ? 3 : ch >= 0xF0 && ch <= 0xF4 ? 4 : 0;
                uint32_t cp = len == 1 ? ch : ch & (0x7Fu >> len);
                for (int i = 1; i < len; i++) {
                    if ((p[i] & 0xC0) != 0x80) {
                        len = 0;
                        break;
                    }
                    cp = cp << 6 | (p[i] & 0x3Fu);
                }
                static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
                if (!len || cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
                    size_t m = it->string ? sd_json_enter_key(&c->ctx, it->string) : strlen(c->ctx.path);
                    sc_fail(c, SD_ERR_INVALID_ARG, "a %s that is not valid UTF-8", k ? "string" : "key");
                    sd_json_leave(&c->ctx, m);
                    return -1;
                }
                p += len;
            }
        }
        if (it->child) {
            size_t m = it->string ? sd_json_enter_key(&c->ctx, it->string) : strlen(c->ctx.path);
            int r = check_utf8(c, it->child);
            sd_json_leave(&c->ctx, m);
            if (r) return -1;
        }
    }
    return 0;
}

sd_json_schema_params sd_json_schema_default_params(void) {
    sd_json_schema_params p;
    memset(&p, 0, sizeof p);
    p.whitespace = SD_JSON_WS_BOUNDED;
    return p;
}

static const char *ws_rule(const sd_json_schema_params *p) {
    return p && p->whitespace == SD_JSON_WS_COMPACT ? k_ws_compact : k_ws_bounded;
}

/* One schema's rules into c->out (after the shared rules), its value rule in *top. The rule numbers go
 * on from the schemas compiled before it; its $refs resolve within it. */
static sd_status compile_one(sc *c, const char *buf, size_t len, const char *file, int *top) {
    cJSON *root = NULL;
    sd_status st = sd_json_parse(buf ? buf : "", len, file, &root);
    if (st != SD_OK) return st;
    c->root = root;
    c->ctx = sd_json_ctx_make("schema", SD_ERR_INVALID_ARG, 0);
    c->err = SD_OK;
    c->depth = 0;
    *top = -1;
    if (check_utf8(c, root) == 0) gen(c, root, top);
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    c->n_refs = 0;
    c->root = NULL;
    cJSON_Delete(root);
    if (c->err == SD_OK && c->out.oom) return sd_fail(SD_ERR_NOMEM, "schema: out of memory");
    return c->err;
}

static sd_status check_params(const sd_json_schema_params *p) {
    if (p && p->whitespace != SD_JSON_WS_BOUNDED && p->whitespace != SD_JSON_WS_COMPACT)
        return sd_fail(SD_ERR_INVALID_ARG, "schema: unknown whitespace setting %d", (int)p->whitespace);
    return SD_OK;
}

sd_status sd_json_schema_to_gbnf(const char *buf, size_t len, const sd_json_schema_params *p, char **gbnf) {
    if (!gbnf) return sd_fail(SD_ERR_INVALID_ARG, "schema: no output pointer");
    *gbnf = NULL;
    if (!buf && len) return sd_fail(SD_ERR_INVALID_ARG, "schema: NULL text");
    sd_status st = check_params(p);
    if (st != SD_OK) return st;
    sc c;
    memset(&c, 0, sizeof c);
    sb_str(&c.out, ws_rule(p));
    sb_str(&c.out, k_preamble);
    sb_str(&c.out, k_format_rules);
    int top = -1;
    st = compile_one(&c, buf, len, "schema", &top);
    if (st == SD_OK) sb_fmt(&c.out, "root ::= ws r%d ws\n", top);
    if (st == SD_OK && c.out.oom) st = sd_fail(SD_ERR_NOMEM, "schema: out of memory");
    free(c.refs);
    if (st != SD_OK) {
        free(c.out.p);
        return st;
    }
    *gbnf = c.out.p;
    return SD_OK;
}

sd_status sd_grammar_from_gbnf_schemas(const char *gbnf, size_t len, const char *root, const sd_grammar_schema_rule *schemas,
                                       int n, const sd_json_schema_params *p, int *bad, sd_grammar **out) {
    if (bad) *bad = -1;
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "grammar: no output pointer");
    *out = NULL;
    if ((!gbnf && len) || n < 0 || (n && !schemas)) return sd_fail(SD_ERR_INVALID_ARG, "grammar: bad arguments");
    sd_status st = check_params(p);
    if (st != SD_OK) return st;
    sc c;
    memset(&c, 0, sizeof c);
    /* the caller's text first, so that its errors keep their lines and columns */
    sb_put(&c.out, gbnf ? gbnf : "", len);
    sb_str(&c.out, "\n");
    sb_str(&c.out, ws_rule(p));
    sb_str(&c.out, k_preamble);
    sb_str(&c.out, k_format_rules);
    for (int i = 0; i < n && st == SD_OK; i++) {
        int top = -1;
        if (!schemas[i].rule || (!schemas[i].schema && schemas[i].len)) {
            st = sd_fail(SD_ERR_INVALID_ARG, "grammar: schema %d has no rule name or no text", i);
        } else if ((st = compile_one(&c, schemas[i].schema, schemas[i].len, "schema", &top)) == SD_OK) {
            sb_fmt(&c.out, "%s ::= r%d\n", schemas[i].rule, top);
        }
        if (st != SD_OK && bad) *bad = i;
    }
    if (st == SD_OK && c.out.oom) st = sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
    free(c.refs);
    if (st == SD_OK) st = sd_grammar_from_gbnf(c.out.p, c.out.n, root, out);
    free(c.out.p);
    return st;
}

sd_status sd_grammar_from_json_schema(const char *buf, size_t len, sd_grammar **out) {
    return sd_grammar_from_json_schema_ex(buf, len, NULL, out);
}

sd_status sd_grammar_from_json_schema_ex(const char *buf, size_t len, const sd_json_schema_params *p, sd_grammar **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "schema: no output pointer");
    *out = NULL;
    char *text = NULL;
    sd_status st = sd_json_schema_to_gbnf(buf, len, p, &text);
    if (st != SD_OK) return st;
    st = sd_grammar_from_gbnf(text, strlen(text), "root", out);
    if (st != SD_OK && strstr(sd_last_error(), "grammar: left recursion")) {
        /* only $ref makes a rule reach itself, and without reading a character only through $ref,
         * anyOf, oneOf or allOf: a schema that refers to itself before any value starts */
        st = sd_fail(SD_ERR_UNSUPPORTED, "schema: $ref: a schema that reaches itself through $ref before any character "
                                         "of its value (through $ref, anyOf, oneOf or allOf alone) is not supported");
    } else if (st != SD_OK) { /* a compiler bug: the generated text must always parse */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", sd_last_error());
        st = sd_fail(st, "schema: internal error compiling the schema: %s", msg);
    }
    free(text);
    return st;
}

sd_status sd_grammar_json_object(const sd_json_schema_params *p, sd_grammar **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "grammar: no output pointer");
    *out = NULL;
    if (p && p->whitespace != SD_JSON_WS_BOUNDED && p->whitespace != SD_JSON_WS_COMPACT)
        return sd_fail(SD_ERR_INVALID_ARG, "grammar: unknown whitespace setting %d", (int)p->whitespace);
    sbuf b = {0};
    sb_str(&b, ws_rule(p));
    sb_str(&b, k_preamble);
    sb_str(&b, "root ::= ws object ws\n");
    if (b.oom) {
        free(b.p);
        return sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
    }
    sd_status st = sd_grammar_from_gbnf(b.p, b.n, "root", out);
    free(b.p);
    return st;
}
