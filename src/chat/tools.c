/* Tool calls: the templates' tojson (Python's json.dumps) over raw JSON text, the grammar of the
 * calls a model must write, and the reading of calls out of an output as it is generated. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"
#include "core/json.h"
#include "specdec/chat.h"

sd_chat_tool_syntax sd_chat_tool_syntax_of(sd_chat_format f) {
    switch (f) {
    case SD_CHAT_CHATML:
    case SD_CHAT_QWEN25:
    case SD_CHAT_QWEN3: return SD_CHAT_TOOLS_HERMES;
    case SD_CHAT_LLAMA31:
    case SD_CHAT_LLAMA32: return SD_CHAT_TOOLS_LLAMA3;
    default: return SD_CHAT_TOOLS_NONE;
    }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* ---- Python's json.dumps ------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} cbuf;

static void cput(cbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void cputs(cbuf *b, const char *s) { cput(b, s, strlen(s)); }

static unsigned hex4(const char *s) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        const char c = s[k];
        v = v * 16 + (unsigned)(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

static void put_cp(cbuf *b, unsigned cp) {
    char u[4];
    size_t l;
    if (cp < 0x80) u[0] = (char)cp, l = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), l = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), l = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        u[3] = (char)(0x80 | (cp & 0x3F)), l = 4;
    cput(b, u, l);
}

/* A code point as Python's encoder writes it (ensure_ascii off). */
static void py_char(cbuf *b, unsigned cp) {
    static const struct {
        unsigned cp;
        const char *esc;
    } k_esc[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}, {'\b', "\\b"}, {'\f', "\\f"}};
    for (size_t k = 0; k < sizeof k_esc / sizeof k_esc[0]; k++)
        if (cp == k_esc[k].cp) {
            cputs(b, k_esc[k].esc);
            return;
        }
    if (cp < 0x20 || (cp >= 0xD800 && cp <= 0xDFFF)) { /* a lone surrogate cannot be UTF-8: escaped */
        char e[8];
        snprintf(e, sizeof e, "\\u%04x", cp);
        cputs(b, e);
        return;
    }
    put_cp(b, cp);
}

/* The string at s[i] (checked by sd_json_value_end) decoded and written again. */
static void py_string(cbuf *b, const char *s, size_t i, size_t end) {
    cputs(b, "\"");
    for (i++; i < end - 1;) {
        if (s[i] != '\\') {
            size_t j = i;
            while (j < end - 1 && s[j] != '\\' && s[j] != '"' && s[j] != '\x7f' && (unsigned char)s[j] >= 0x20) j++;
            if (j == i) { /* DEL is written as it is */
                cput(b, s + i, 1);
                i++;
                continue;
            }
            cput(b, s + i, j - i);
            i = j;
            continue;
        }
        const char e = s[i + 1];
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            py_char(b, (unsigned char)to[strchr(from, e) - from]);
            i += 2;
            continue;
        }
        unsigned cp = hex4(s + i + 2);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= end - 1 && s[i] == '\\' && s[i + 1] == 'u') {
            const unsigned lo = hex4(s + i + 2);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
        }
        py_char(b, cp);
    }
    cputs(b, "\"");
}

/* Python's repr of a float: the shortest digits that read back to x, fixed notation for decimal
 * exponents -4..15, else d.ddde+XX. */
static void py_float(cbuf *b, double x) {
    if (isinf(x)) {
        cputs(b, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    char digits[24];
    size_t nd = 0;
    const char *q = e;
    const int neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (is_digit(*q)) digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    const int decpt = atoi(q + 1) + 1; /* x = 0.d1d2... * 10^decpt */
    if (neg) cputs(b, "-");
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            cputs(b, "0.");
            for (int k = 0; k < -decpt; k++) cputs(b, "0");
            cput(b, digits, nd);
        } else if ((size_t)decpt < nd) {
            cput(b, digits, (size_t)decpt);
            cputs(b, ".");
            cput(b, digits + decpt, nd - (size_t)decpt);
        } else {
            cput(b, digits, nd);
            for (size_t k = nd; k < (size_t)decpt; k++) cputs(b, "0");
            cputs(b, ".0");
        }
        return;
    }
    cput(b, digits, 1);
    if (nd > 1) {
        cputs(b, ".");
        cput(b, digits + 1, nd - 1);
    }
    char ex[16];
    snprintf(ex, sizeof ex, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    cputs(b, ex);
}

static void newline(cbuf *b, int indent, int level) {
    cputs(b, "\n");
    for (int k = 0; k < indent * level; k++) cputs(b, " ");
}

/* The value at s[i]; returns the offset after it, or SD_JSON_BAD. */
static size_t py_value(cbuf *b, const char *s, size_t n, size_t i, int indent, int level) {
    const size_t end = sd_json_value_end_depth(s, n, i, level);
    if (end == SD_JSON_BAD) return end;
    const char c = s[i];
    if (c == '"') {
        py_string(b, s, i, end);
        return end;
    }
    if (c == '-' || is_digit(c)) {
        size_t k = i;
        while (k < end && s[k] != '.' && s[k] != 'e' && s[k] != 'E') k++;
        if (k < end) {
            char tmp[64];
            if (end - i >= sizeof tmp) { /* digits beyond a double's: strtod reads them all the same */
                char *big = malloc(end - i + 1);
                if (!big) {
                    b->oom = 1;
                    return end;
                }
                memcpy(big, s + i, end - i);
                big[end - i] = 0;
                py_float(b, strtod(big, NULL));
                free(big);
            } else {
                memcpy(tmp, s + i, end - i);
                tmp[end - i] = 0;
                py_float(b, strtod(tmp, NULL));
            }
        } else if (end - i == 2 && s[i] == '-' && s[i + 1] == '0') {
            cputs(b, "0"); /* Python's int("-0") */
        } else {
            cput(b, s + i, end - i);
        }
        return end;
    }
    if (c != '{' && c != '[') {
        cput(b, s + i, end - i);
        return end;
    }
    const char close = c == '{' ? '}' : ']';
    cput(b, &c, 1);
    i = sd_json_skip_ws(s, n, i + 1);
    if (s[i] == close) {
        cput(b, &close, 1);
        return end;
    }
    for (int first = 1;; first = 0) {
        if (!first) cputs(b, indent >= 0 ? "," : ", ");
        if (indent >= 0) newline(b, indent, level + 1);
        if (c == '{') {
            const size_t ke = sd_json_value_end(s, n, i);
            py_string(b, s, i, ke);
            cputs(b, ": ");
            i = sd_json_skip_ws(s, n, sd_json_skip_ws(s, n, ke) + 1);
        }
        i = py_value(b, s, n, i, indent, level + 1);
        i = sd_json_skip_ws(s, n, i);
        if (s[i] == close) break;
        i = sd_json_skip_ws(s, n, i + 1);
    }
    if (indent >= 0) newline(b, indent, level);
    cput(b, &close, 1);
    return end;
}

char *chat_pyjson(const char *text, size_t len, int indent, size_t *out_len) {
    const size_t i = sd_json_skip_ws(text, len, 0);
    const size_t end = sd_json_value_end(text, len, i);
    if (end == SD_JSON_BAD || sd_json_skip_ws(text, len, end) != len) return NULL;
    cbuf b = {0};
    py_value(&b, text, len, i, indent, 0);
    if (!b.oom && !b.p) cputs(&b, "");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (out_len) *out_len = b.n;
    return b.p;
}

char *chat_pystring(const char *text, size_t n, size_t *out_len) {
    cbuf b = {0};
    cputs(&b, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == '"' || c == '\\') py_char(&b, c);
        else cput(&b, text + i, 1);
    }
    cputs(&b, "\"");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (out_len) *out_len = b.n;
    return b.p;
}

/* ---- the grammar of calls ------------------------------------------------------------------ */

/* How a call is written, the same for the grammar and for reading: open NAME mid ARGUMENTS close,
 * calls separated by sep (NULL: one call only); after text (tool_choice auto) a call starts where
 * trigger appears, as `where` allows (the reader's P_TEXT and the lazy grammar's trigger). */
static const struct {
    const char *open, *mid, *close, *sep, *trigger;
    sd_grammar_trigger_where where;
} k_call[] = {
    [SD_CHAT_TOOLS_HERMES] = {"<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n", "<tool_call>",
                              SD_GRAMMAR_TRIGGER_ANYWHERE},
    [SD_CHAT_TOOLS_LLAMA3] = {"{\"name\": \"", "\", \"parameters\": ", "}", NULL, "{", SD_GRAMMAR_TRIGGER_AT_START},
};

static int valid_name(const char *s) {
    size_t n = 0;
    for (; s && s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || is_digit(s[n]) || s[n] == '_' || s[n] == '-'))
            return 0;
    return n >= 1 && n <= 64;
}

static void gbnf_literal(cbuf *b, const char *s) {
    cputs(b, "\"");
    for (; *s; s++) {
        if (*s == '"') cputs(b, "\\\"");
        else if (*s == '\\') cputs(b, "\\\\");
        else if (*s == '\n') cputs(b, "\\n");
        else cput(b, s, 1);
    }
    cputs(b, "\"");
}

sd_status sd_chat_tool_grammar(sd_chat_tool_syntax s, const sd_chat_tool *tools, int n, int only, int parallel,
                               const sd_json_schema_params *p, int *bad, sd_grammar **out) {
    if (bad) *bad = -1;
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tools: no output pointer");
    *out = NULL;
    if (s != SD_CHAT_TOOLS_HERMES && s != SD_CHAT_TOOLS_LLAMA3)
        return sd_fail(SD_ERR_UNSUPPORTED, "tools: the format has no tool calls");
    if (n < 1 || !tools || only >= n || only < SD_CHAT_TOOL_AFTER_TEXT) return sd_fail(SD_ERR_INVALID_ARG, "tools: bad arguments");
    const int after_text = only == SD_CHAT_TOOL_AFTER_TEXT;
    if (after_text) only = SD_CHAT_TOOL_ANY;
    for (int i = 0; i < n; i++) {
        if (!valid_name(tools[i].name)) {
            if (bad) *bad = i;
            return sd_fail(SD_ERR_INVALID_ARG, "tools: tool %d: the name '%.80s' is not 1 to 64 letters, digits, _ or -", i,
                           tools[i].name ? tools[i].name : "(null)");
        }
    }
    static const char no_args[] = "{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}";
    sd_grammar_schema_rule *rules = calloc((size_t)n, sizeof *rules);
    int *index = calloc((size_t)n, sizeof *index);
    char(*names)[24] = calloc((size_t)n, sizeof *names);
    cbuf g = {0};
    if (!rules || !index || !names) g.oom = 1;
    int m = 0;
    cputs(&g, k_call[s].sep && only < 0 && parallel ? "root ::= call ( " : "root ::= call\n");
    if (k_call[s].sep && only < 0 && parallel) {
        gbnf_literal(&g, k_call[s].sep);
        cputs(&g, " call )*\n");
    }
    cputs(&g, "call ::= ");
    gbnf_literal(&g, k_call[s].open);
    cputs(&g, " (");
    for (int i = 0; i < n && !g.oom; i++) {
        if (only >= 0 && i != only) continue;
        snprintf(names[m], sizeof names[m], "tool-args-%d", i);
        rules[m] = (sd_grammar_schema_rule){names[m], tools[i].parameters ? tools[i].parameters : no_args,
                                            tools[i].parameters ? tools[i].parameters_len : strlen(no_args)};
        index[m] = i;
        cputs(&g, m ? " | " : " ");
        char lit[160];
        snprintf(lit, sizeof lit, "%s%s", tools[i].name, k_call[s].mid);
        gbnf_literal(&g, lit);
        cputs(&g, " ");
        cputs(&g, names[m]);
        m++;
    }
    cputs(&g, " ) ");
    gbnf_literal(&g, k_call[s].close);
    cputs(&g, "\n");
    sd_status st;
    if (g.oom) {
        st = sd_fail(SD_ERR_NOMEM, "tools: out of memory");
    } else {
        int which = -1;
        st = sd_grammar_from_gbnf_schemas(g.p, g.n, "root", rules, m, p, &which, out);
        if (st != SD_OK && bad && which >= 0) *bad = index[which];
        if (st == SD_OK && after_text &&
            (st = sd_grammar_set_trigger(*out, k_call[s].trigger, strlen(k_call[s].trigger), k_call[s].where)) != SD_OK) {
            sd_grammar_free(*out);
            *out = NULL;
        }
    }
    free(g.p);
    free(names);
    free(index);
    free(rules);
    return st;
}

/* ---- reading calls --------------------------------------------------------------------------- */

enum {
    P_TEXT,   /* auto, HERMES: text until "<tool_call>"; LLAMA3: whitespace until the first character */
    P_PLAIN,  /* auto, LLAMA3: the reply is text */
    P_HELD,   /* auto: a call may have started at call_at: held to the end */
    P_OPEN,   /* constrained: the call's opening text */
    P_NAME,   /* constrained: the name, up to its quote */
    P_MID,    /* constrained: the text between the name and the arguments */
    P_ARGS,   /* constrained: the arguments, a JSON value */
    P_CLOSE,  /* constrained: the call's closing text */
    P_SEP,    /* constrained: between calls */
    P_BROKEN, /* constrained text that is not calls (never, under the grammar): the rest is text */
    P_DONE,
};

struct sd_chat_tool_parser {
    sd_chat_tool_syntax syn;
    int constrained;
    char **names;
    int n_names;
    cbuf buf;       /* everything fed */
    size_t pos;     /* bytes of buf reported or consumed */
    size_t call_at; /* P_HELD: where the call may start (text before it is reported up to pos) */
    size_t lit;     /* P_OPEN, P_MID, P_CLOSE, P_SEP: bytes of the literal matched */
    size_t name_at; /* the current call's name */
    size_t name_len;
    /* P_ARGS: a JSON value scanned byte by byte */
    int depth, in_str, esc, scalar;
    size_t args_sent; /* bytes of the arguments reported */
    int state, n_calls, ended;
    sd_chat_tool_event *ev;
    int n_ev, cap_ev;
    int oom;
};

sd_status sd_chat_tool_parser_create(sd_chat_tool_syntax s, int constrained, const char *const *names, int n_names,
                                     sd_chat_tool_parser **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tools: no output pointer");
    *out = NULL;
    if ((s != SD_CHAT_TOOLS_HERMES && s != SD_CHAT_TOOLS_LLAMA3) || n_names < 0 || (n_names && !names))
        return sd_fail(SD_ERR_INVALID_ARG, "tools: bad arguments for the call parser");
    sd_chat_tool_parser *p = calloc(1, sizeof *p);
    if (!p || (n_names && !(p->names = calloc((size_t)n_names, sizeof *p->names)))) {
        free(p);
        return sd_fail(SD_ERR_NOMEM, "tools: out of memory");
    }
    p->n_names = n_names;
    for (int i = 0; i < n_names; i++) {
        if (!(p->names[i] = strdup(names[i] ? names[i] : ""))) {
            sd_chat_tool_parser_free(p);
            return sd_fail(SD_ERR_NOMEM, "tools: out of memory");
        }
    }
    p->syn = s;
    p->constrained = constrained;
    p->state = constrained ? P_OPEN : P_TEXT;
    *out = p;
    return SD_OK;
}

void sd_chat_tool_parser_free(sd_chat_tool_parser *p) {
    if (!p) return;
    for (int i = 0; i < p->n_names; i++) free(p->names[i]);
    free(p->names);
    free(p->buf.p);
    free(p->ev);
    free(p);
}

int sd_chat_tool_parser_n_calls(const sd_chat_tool_parser *p) { return p ? p->n_calls : 0; }

/* Events hold offsets into buf while it may still grow; turned into pointers at the end of a feed. */
static void event(sd_chat_tool_parser *p, sd_chat_tool_event_kind k, int call, size_t at, size_t len) {
    if (!len && k != SD_CHAT_TOOL_CALL) return;
    if (p->n_ev && k == SD_CHAT_TOOL_CONTENT && p->ev[p->n_ev - 1].kind == k &&
        (size_t)(uintptr_t)p->ev[p->n_ev - 1].text + p->ev[p->n_ev - 1].len == at) {
        p->ev[p->n_ev - 1].len += len;
        return;
    }
    if (p->n_ev == p->cap_ev) {
        const int cap = p->cap_ev ? 2 * p->cap_ev : 8;
        sd_chat_tool_event *q = realloc(p->ev, (size_t)cap * sizeof *q);
        if (!q) {
            p->oom = 1;
            return;
        }
        p->ev = q;
        p->cap_ev = cap;
    }
    p->ev[p->n_ev++] = (sd_chat_tool_event){k, call, (const char *)(uintptr_t)at, len};
}

static void content(sd_chat_tool_parser *p, size_t from, size_t to) {
    if (to > from) event(p, SD_CHAT_TOOL_CONTENT, -1, from, to - from);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int known(const sd_chat_tool_parser *p, const char *s, size_t n) {
    for (int i = 0; i < p->n_names; i++)
        if (strlen(p->names[i]) == n && !memcmp(p->names[i], s, n)) return 1;
    return 0;
}

typedef struct {
    size_t name_at, name_len, args_at, args_len;
} found_call;

/* A call object {"name": "...", "arguments": {...}} at s[i..end) (nothing else around it): 0 and
 * its spans, or -1. */
static int read_call_object(const sd_chat_tool_parser *p, const char *s, size_t i, size_t end, found_call *c) {
    if (sd_json_value_end(s, end, i) != end || s[i] != '{') return -1;
    int have_name = 0, have_args = 0;
    i = sd_json_skip_ws(s, end, i + 1);
    while (i < end && s[i] == '"') {
        const size_t ke = sd_json_value_end(s, end, i);
        const size_t v = sd_json_skip_ws(s, end, sd_json_skip_ws(s, end, ke) + 1);
        const size_t ve = sd_json_value_end(s, end, v);
        const char *key = s + i + 1;
        const size_t kl = ke - i - 2;
        if (kl == 4 && !memcmp(key, "name", 4) && !have_name) {
            if (s[v] != '"' || memchr(s + v + 1, '\\', ve - v - 2) || !known(p, s + v + 1, ve - v - 2)) return -1;
            c->name_at = v + 1;
            c->name_len = ve - v - 2;
            have_name = 1;
        } else if (((kl == 9 && !memcmp(key, "arguments", 9)) ||
                    (p->syn == SD_CHAT_TOOLS_LLAMA3 && kl == 10 && !memcmp(key, "parameters", 10))) &&
                   !have_args) {
            cJSON *args = NULL;
            if (s[v] != '{' || sd_json_parse(s + v, ve - v, "arguments", &args) != SD_OK) return -1;
            cJSON_Delete(args);
            c->args_at = v;
            c->args_len = ve - v;
            have_args = 1;
        } else {
            return -1;
        }
        i = sd_json_skip_ws(s, end, ve);
        if (s[i] == ',') i = sd_json_skip_ws(s, end, i + 1);
    }
    return have_name && have_args ? 0 : -1;
}

/* The held text read as calls, all or nothing (auto). */
static void read_held(sd_chat_tool_parser *p) {
    const char *s = p->buf.p;
    const size_t n = p->buf.n;
    found_call calls[64];
    int nc = 0, ok = 1;
    size_t i = p->call_at;
    if (p->syn == SD_CHAT_TOOLS_LLAMA3) {
        size_t e = n;
        while (e > i && is_space(s[e - 1])) e--;
        ok = read_call_object(p, s, i, e, &calls[0]) == 0;
        nc = 1;
    } else {
        static const char open[] = "<tool_call>", close[] = "</tool_call>";
        for (i = sd_json_skip_ws(s, n, i); i < n && ok; i = sd_json_skip_ws(s, n, i)) {
            const char *e = NULL;
            if (n - i < sizeof open - 1 || memcmp(s + i, open, sizeof open - 1) != 0 || nc == 64) {
                ok = 0;
                break;
            }
            for (size_t k = i + sizeof open - 1; k + sizeof close - 1 <= n && !e; k++)
                if (!memcmp(s + k, close, sizeof close - 1)) e = s + k;
            if (!e) {
                ok = 0;
                break;
            }
            size_t a = sd_json_skip_ws(s, n, i + sizeof open - 1), z = (size_t)(e - s);
            while (z > a && is_space(s[z - 1])) z--;
            ok = read_call_object(p, s, a, z, &calls[nc++]) == 0;
            i = (size_t)(e - s) + sizeof close - 1;
        }
    }
    if (!ok || !nc) {
        content(p, p->pos, n);
        return;
    }
    for (int k = 0; k < nc; k++) {
        event(p, SD_CHAT_TOOL_CALL, p->n_calls, calls[k].name_at, calls[k].name_len);
        event(p, SD_CHAT_TOOL_ARGS, p->n_calls, calls[k].args_at, calls[k].args_len);
        p->n_calls++;
    }
}

/* Matches the literal lit from pos, bytes as they come: 1 when whole, 0 when more is needed, -1
 * when the text differs. */
static int match(sd_chat_tool_parser *p, const char *lit) {
    const size_t l = strlen(lit);
    while (p->lit < l && p->pos < p->buf.n) {
        if (p->buf.p[p->pos] != lit[p->lit]) return -1;
        p->pos++;
        p->lit++;
    }
    if (p->lit < l) return 0;
    p->lit = 0;
    return 1;
}

/* The arguments scanned on from pos: 1 when the value ended (pos after it). */
static int scan_args(sd_chat_tool_parser *p) {
    const char *s = p->buf.p;
    while (p->pos < p->buf.n) {
        const char c = s[p->pos];
        if (p->in_str) {
            if (p->esc) p->esc = 0;
            else if (c == '\\') p->esc = 1;
            else if (c == '"') p->in_str = 0;
            p->pos++;
            if (!p->in_str && !p->depth) return 1;
            continue;
        }
        if (p->scalar) { /* a number or literal ends at the first byte that cannot continue it */
            if (is_digit(c) || (c >= 'a' && c <= 'z') || c == '.' || c == '+' || c == '-' || c == 'E') {
                p->pos++;
                continue;
            }
            return 1;
        }
        p->pos++;
        if (c == '"') p->in_str = 1;
        else if (c == '{' || c == '[') p->depth++;
        else if (c == '}' || c == ']') {
            if (--p->depth == 0) return 1;
        } else if (!p->depth && !is_space(c))
            p->scalar = 1;
    }
    return 0;
}

/* A constrained output, as far as it goes. */
static void run_constrained(sd_chat_tool_parser *p, int final) {
    const char *const open = k_call[p->syn].open, *const mid = k_call[p->syn].mid, *const close = k_call[p->syn].close;
    for (;;) {
        int r;
        switch (p->state) {
        case P_OPEN:
            if (p->lit == 0) p->call_at = p->pos;
            if ((r = match(p, open)) <= 0) goto stop;
            p->name_at = p->pos;
            p->state = P_NAME;
            break;
        case P_NAME: {
            const char *q = memchr(p->buf.p + p->pos, '"', p->buf.n - p->pos);
            if (!q) {
                p->pos = p->buf.n;
                r = 0;
                goto stop;
            }
            p->pos = (size_t)(q - p->buf.p);
            p->name_len = p->pos - p->name_at;
            p->state = P_MID;
            break;
        }
        case P_MID:
            if ((r = match(p, mid)) <= 0) goto stop;
            event(p, SD_CHAT_TOOL_CALL, p->n_calls, p->name_at, p->name_len);
            p->n_calls++;
            p->args_sent = p->pos;
            p->depth = p->in_str = p->esc = p->scalar = 0;
            p->state = P_ARGS;
            break;
        case P_ARGS: {
            const int ended = scan_args(p);
            /* a bare number or literal is reported whole, once it has ended */
            if (ended || !p->scalar) {
                event(p, SD_CHAT_TOOL_ARGS, p->n_calls - 1, p->args_sent, p->pos - p->args_sent);
                p->args_sent = p->pos;
            }
            if (!ended) {
                if (final && p->scalar) event(p, SD_CHAT_TOOL_ARGS, p->n_calls - 1, p->args_sent, p->pos - p->args_sent);
                r = 0;
                goto stop;
            }
            p->state = P_CLOSE;
            break;
        }
        case P_CLOSE:
            if ((r = match(p, close)) <= 0) goto stop;
            p->state = k_call[p->syn].sep ? P_SEP : P_DONE;
            break;
        case P_SEP:
            if (p->pos == p->buf.n) {
                r = 0;
                goto stop;
            }
            if ((r = match(p, k_call[p->syn].sep)) <= 0) goto stop;
            p->state = P_OPEN;
            break;
        case P_DONE:
            r = p->pos == p->buf.n ? 0 : -1;
            goto stop;
        default: /* P_BROKEN */
            content(p, p->pos, p->buf.n);
            p->pos = p->buf.n;
            return;
        }
        continue;
    stop:
        if (r < 0) { /* not what the grammar writes: text from there (a call not yet reported: from its start) */
            const int head = p->state == P_OPEN || p->state == P_NAME || p->state == P_MID;
            content(p, head ? p->call_at : p->pos - p->lit, p->buf.n);
            p->lit = 0;
            p->state = P_BROKEN;
            p->pos = p->buf.n;
            return;
        }
        if (final && (p->state == P_OPEN || p->state == P_NAME || p->state == P_MID)) {
            content(p, p->call_at, p->buf.n); /* a call cut before its name was whole */
            p->pos = p->buf.n;
        }
        return;
    }
}

/* The longest suffix of s[from..n) that is a proper prefix of lit. */
static size_t partial_suffix(const char *s, size_t from, size_t n, const char *lit) {
    const size_t l = strlen(lit);
    for (size_t k = l - 1; k > 0; k--)
        if (n - from >= k && !memcmp(s + n - k, lit, k)) return k;
    return 0;
}

static void run_auto(sd_chat_tool_parser *p, int final) {
    const char *s = p->buf.p;
    const size_t n = p->buf.n;
    if (p->state == P_PLAIN) {
        content(p, p->pos, n);
        p->pos = n;
        return;
    }
    if (p->state == P_TEXT && p->syn == SD_CHAT_TOOLS_LLAMA3) {
        const size_t i = sd_json_skip_ws(s, n, p->pos);
        if (i < n) {
            if (s[i] == '{') {
                p->state = P_HELD;
                p->call_at = i;
            } else {
                p->state = P_PLAIN;
                content(p, p->pos, n);
                p->pos = n;
                return;
            }
        }
    } else if (p->state == P_TEXT) {
        const char *const tag = k_call[p->syn].trigger;
        const size_t tl = strlen(tag);
        size_t t = n;
        for (size_t k = p->pos; k + tl <= n; k++)
            if (!memcmp(s + k, tag, tl)) {
                t = k;
                break;
            }
        size_t keep = t < n ? t : n - partial_suffix(s, p->pos, n, tag);
        if (t < n) {
            p->state = P_HELD;
            p->call_at = t;
        }
        while (keep > p->pos && is_space(s[keep - 1])) keep--; /* trailing whitespace waits: it may end before a call */
        content(p, p->pos, keep);
        p->pos = keep;
    }
    if (!final) return;
    if (p->state == P_HELD) {
        read_held(p);
    } else {
        content(p, p->pos, n);
    }
    p->pos = n;
}

sd_status sd_chat_tool_parser_feed(sd_chat_tool_parser *p, const char *text, size_t len, int final,
                                   const sd_chat_tool_event **events, int *n_events) {
    if (events) *events = NULL;
    if (n_events) *n_events = 0;
    if (!p || (!text && len)) return sd_fail(SD_ERR_INVALID_ARG, "tools: bad arguments for the call parser");
    if (p->ended) return sd_fail(SD_ERR_INVALID_ARG, "tools: output fed after its end");
    p->ended = final;
    p->n_ev = 0;
    if (len) cput(&p->buf, text, len);
    if (p->buf.oom || p->oom) return sd_fail(SD_ERR_NOMEM, "tools: out of memory");
    if (p->constrained) run_constrained(p, final);
    else run_auto(p, final);
    if (p->oom) return sd_fail(SD_ERR_NOMEM, "tools: out of memory");
    for (int i = 0; i < p->n_ev; i++) p->ev[i].text = p->buf.p + (size_t)(uintptr_t)p->ev[i].text;
    if (events) *events = p->ev;
    if (n_events) *n_events = p->n_ev;
    return SD_OK;
}
