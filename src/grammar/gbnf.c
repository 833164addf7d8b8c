/* The GBNF parser (llama.cpp's grammar format) into the builder, with line and column errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* Nesting of groups accepted (deeper grammars are refused, not recursed into). */
#define GBNF_MAX_DEPTH 200

typedef struct {
    gr_builder *b;
    const char *s;
    size_t n, i;
    sd_status err; /* set on the first error */
    int depth;
} P;

static void where(const P *p, size_t at, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') l++, c = 1;
        else if (((unsigned char)p->s[k] & 0xC0) != 0x80) c++;
    }
    *line = l, *col = c;
}

/* "what was found" at i, printable. */
static void found(const P *p, size_t i, char *buf, size_t cap) {
    if (i >= p->n) {
        snprintf(buf, cap, "the end of the grammar");
        return;
    }
    unsigned char c = (unsigned char)p->s[i];
    if (c == '\n') snprintf(buf, cap, "a line break");
    else if (c >= 0x20 && c < 0x7F) snprintf(buf, cap, "'%c'", c);
    else snprintf(buf, cap, "byte 0x%02X", c);
}

static void fail_at(P *p, size_t at, const char *what) {
    if (p->err != SD_OK) return;
    int l, c;
    where(p, at, &l, &c);
    char f[32];
    found(p, at, f, sizeof f);
    p->err = sd_fail(SD_ERR_INVALID_ARG, "grammar: line %d, column %d: expected %s, got %s", l, c, what, f);
}

static void fail_msg(P *p, size_t at, const char *msg) {
    if (p->err != SD_OK) return;
    int l, c;
    where(p, at, &l, &c);
    p->err = sd_fail(SD_ERR_INVALID_ARG, "grammar: line %d, column %d: %s", l, c, msg);
}

static int is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

/* Spaces, tabs, comments; line breaks too when newline_ok. */
static void space(P *p, int newline_ok) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t') p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else if (newline_ok && (c == '\n' || c == '\r')) p->i++;
        else break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 character; -1 on error. */
static long read_char(P *p) {
    if (p->i >= p->n) {
        fail_at(p, p->i, "a character");
        return -1;
    }
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        size_t at = p->i++;
        if (p->i >= p->n) {
            fail_at(p, p->i, "an escape after '\\'");
            return -1;
        }
        char e = p->s[p->i++];
        int digits = 0;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': case '/': case '.': case '(': case ')':
        case '|': case '*': case '+': case '?': case '{': case '}':
            return e;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            fail_at(p, at + 1, "an escape (n r t \\ \" [ ] x u U)");
            return -1;
        }
        long v = 0;
        for (int k = 0; k < digits; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) {
                fail_at(p, p->i, "a hexadecimal digit");
                return -1;
            }
            v = v * 16 + h;
            p->i++;
        }
        if (v > 0x10FFFF) {
            fail_msg(p, at, "escape beyond U+10FFFF");
            return -1;
        }
        return v;
    }
    /* UTF-8: the character's code point; invalid bytes are refused */
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n) {
        fail_at(p, p->i, "a UTF-8 character");
        return -1;
    }
    long v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80) {
            fail_at(p, p->i, "a UTF-8 character");
            return -1;
        }
        v = v << 6 | (d & 0x3F);
    }
    static const long min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || (v >= 0xD800 && v <= 0xDFFF)) {
        fail_at(p, p->i, "a UTF-8 character");
        return -1;
    }
    p->i += (size_t)len;
    return v;
}

static int rule_of_name(P *p, const char *s, size_t len, size_t at) {
    int r = gr_rule_get(p->b, s, len);
    if (r >= 0 && !p->b->rules[r].ref_line) where(p, at, &p->b->rules[r].ref_line, &p->b->rules[r].ref_col);
    return r;
}

static int parse_number(P *p, long *v) {
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return 0;
    long x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > GR_MAX_REPEAT) x = GR_MAX_REPEAT + 1;
    }
    *v = x;
    return 1;
}

static void parse_alternatives(P *p, int rule, const char *name);

/* A sequence of elements into s, up to '|', ')', or the end of the rule. */
static void parse_sequence(P *p, gr_seq **sp, int rule, const char *name, int nested) {
    gr_builder *b = p->b;
    gr_seq *s = *sp;
    int have_last = 0;
    gr_elem last;
    int last_start = 0; /* index in s where the last element starts */
    while (p->err == SD_OK && !b->oom && p->i < p->n) {
        char c = p->s[p->i];
        size_t at = p->i;
        int start = s ? s->n : 0;
        if (c == '"') {
            p->i++;
            while (p->i < p->n && p->s[p->i] != '"' && p->err == SD_OK) {
                if (p->s[p->i] == '\n') {
                    fail_at(p, p->i, "'\"' closing the literal");
                    return;
                }
                long ch = read_char(p);
                if (ch < 0) return;
                uint8_t u[4];
                uint32_t cp = (uint32_t)ch;
                int n = cp < 0x80 ? (u[0] = (uint8_t)cp, 1)
                        : cp < 0x800 ? (u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63)), 2)
                        : cp < 0x10000 ? (u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 63)),
                                          u[2] = (uint8_t)(0x80 | (cp & 63)), 3)
                                       : (u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
                                          u[2] = (uint8_t)(0x80 | (cp >> 6 & 63)), u[3] = (uint8_t)(0x80 | (cp & 63)), 4);
                for (int k = 0; k < n; k++) {
                    gr_push_byte(b, s, u[k]);
                }
            }
            if (p->i >= p->n) {
                fail_at(p, p->i, "'\"' closing the literal");
                return;
            }
            p->i++;
            have_last = 1, last_start = start; /* a postfix repeats the whole literal, as in llama.cpp */
        } else if (c == '[') {
            p->i++;
            int negate = 0;
            if (p->i < p->n && p->s[p->i] == '^') negate = 1, p->i++;
            uint32_t *rg = NULL;
            int nr = 0, cap = 0;
            while (p->i < p->n && p->s[p->i] != ']' && p->err == SD_OK) {
                if (p->s[p->i] == '\n') break;
                long lo = read_char(p);
                if (lo < 0) break;
                long hi = lo;
                if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                    p->i++;
                    size_t hat = p->i;
                    hi = read_char(p);
                    if (hi < 0) break;
                    if (hi < lo) {
                        fail_msg(p, hat, "character range whose end is below its start");
                        break;
                    }
                }
                if (nr == cap) {
                    cap = cap ? cap * 2 : 8;
                    uint32_t *q = realloc(rg, (size_t)cap * 2 * sizeof *rg);
                    if (!q) {
                        b->oom = 1;
                        break;
                    }
                    rg = q;
                }
                rg[2 * nr] = (uint32_t)lo, rg[2 * nr + 1] = (uint32_t)hi, nr++;
            }
            if (p->err == SD_OK && !b->oom && (p->i >= p->n || p->s[p->i] != ']')) fail_at(p, p->i, "']' closing the class");
            if (p->err != SD_OK || b->oom) {
                free(rg);
                return;
            }
            p->i++;
            if (gr_push_class(b, s, rg, nr, negate, name) < 0) {
                free(rg);
                fail_msg(p, at, "character class that matches no character");
                return;
            }
            free(rg);
            have_last = 1, last_start = start;
        } else if (c == '.') {
            p->i++;
            uint32_t all[2] = {0, 0x10FFFF};
            gr_push_class(b, s, all, 1, 0, name);
            have_last = 1, last_start = start;
        } else if (is_word(c)) {
            size_t a = p->i;
            while (p->i < p->n && is_word(p->s[p->i])) p->i++;
            /* a name followed by ::= starts the next rule: the sequence ends before it */
            size_t save = p->i;
            space(p, 0);
            if (p->i + 3 <= p->n && !memcmp(p->s + p->i, "::=", 3)) {
                if (nested) {
                    fail_at(p, a, "')' before the next rule");
                    return;
                }
                p->i = a;
                break;
            }
            p->i = save;
            gr_push_ref(b, s, rule_of_name(p, p->s + a, p->i - a, a));
            have_last = 1, last_start = start;
        } else if (c == '(') {
            p->i++;
            if (++p->depth > GBNF_MAX_DEPTH) {
                fail_msg(p, at, "groups nested too deeply");
                return;
            }
            int r = gr_rule_new(b, name);
            parse_alternatives(p, r, name);
            p->depth--;
            if (p->err != SD_OK || b->oom) return;
            if (p->i >= p->n || p->s[p->i] != ')') {
                fail_at(p, p->i, "')' closing the group");
                return;
            }
            p->i++;
            s = &b->rules[rule].alts[b->rules[rule].n_alts - 1]; /* its rule's alternatives did not move */
            gr_push_ref(b, s, r);
            have_last = 1, last_start = start;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have_last) {
                fail_at(p, at, "an element before the repetition");
                return;
            }
            long mn = 0, mx = -1;
            p->i++;
            if (c == '+') mn = 1;
            else if (c == '?') mx = 1;
            else if (c == '{') {
                space(p, 0);
                int has_min = parse_number(p, &mn);
                space(p, 0);
                if (p->i < p->n && p->s[p->i] == '}') {
                    if (!has_min) {
                        fail_at(p, p->i, "a number in {m,n}");
                        return;
                    }
                    mx = mn;
                } else if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    space(p, 0);
                    if (!parse_number(p, &mx)) mx = -1;
                    space(p, 0);
                    if (!has_min) mn = 0;
                } else {
                    fail_at(p, p->i, has_min ? "',' or '}' in {m,n}" : "a number in {m,n}");
                    return;
                }
                if (p->i >= p->n || p->s[p->i] != '}') {
                    fail_at(p, p->i, "'}' closing {m,n}");
                    return;
                }
                p->i++;
                if (mn > GR_MAX_REPEAT || mx > GR_MAX_REPEAT) {
                    fail_msg(p, at, "repetition bound above 100000");
                    return;
                }
                if (mx >= 0 && mx < mn) {
                    fail_msg(p, at, "repetition {m,n} with n < m");
                    return;
                }
            }
            /* take the last element off (a literal of several bytes, or none, becomes a rule) and put
             * its repetition in its place */
            if (s->n - last_start == 1) {
                last = s->e[last_start];
            } else {
                int r = gr_rule_new(b, name);
                gr_seq *a = gr_alt_new(b, r);
                for (int k = last_start; k < s->n && a; k++) gr_push_set(b, a, &b->sets[s->e[k].v]);
                last = (gr_elem){GR_REF, r};
            }
            b->n_elems -= s->n - last_start;
            s->n = last_start;
            gr_push_repeat(b, s, last, (int)mn, (int)mx, name);
            have_last = 0;
        } else if (c == '<') {
            fail_msg(p, at, "token references (<...>) are not supported");
            return;
        } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
            break;
        } else {
            fail_at(p, at, "an element: a \"literal\", a [class], a rule name, '(', '.' or a postfix");
            return;
        }
        space(p, nested);
    }
    *sp = s;
}

static void parse_alternatives(P *p, int rule, const char *name) {
    int nested = p->depth > 0;
    for (;;) {
        gr_seq *s = gr_alt_new(p->b, rule);
        if (!s) return;
        space(p, nested);
        parse_sequence(p, &s, rule, name, nested);
        if (p->err != SD_OK || p->b->oom) return;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            space(p, 1);
            continue;
        }
        return;
    }
}

sd_status gr_parse_gbnf(gr_builder *b, const char *buf, size_t len) {
    P p = {b, buf, len, 0, SD_OK, 0};
    space(&p, 1);
    int n_defs = 0;
    while (p.i < p.n && p.err == SD_OK && !b->oom) {
        size_t a = p.i;
        while (p.i < p.n && is_word(p.s[p.i])) p.i++;
        if (p.i == a) {
            fail_at(&p, a, "a rule name");
            break;
        }
        int r = gr_rule_get(b, p.s + a, p.i - a);
        if (r < 0) break;
        if (b->rules[r].defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "rule '%.80s' is defined twice", b->rules[r].name);
            fail_msg(&p, a, msg);
            break;
        }
        b->rules[r].defined = 1;
        space(&p, 0);
        if (p.i + 3 > p.n || memcmp(p.s + p.i, "::=", 3)) {
            fail_at(&p, p.i, "'::='");
            break;
        }
        p.i += 3;
        space(&p, 1);
        char name[96];
        snprintf(name, sizeof name, "%.60s", b->rules[r].name);
        parse_alternatives(&p, r, name);
        if (p.err != SD_OK || b->oom) break;
        if (p.i < p.n && p.s[p.i] != '\n' && p.s[p.i] != '\r' && !is_word(p.s[p.i])) {
            fail_at(&p, p.i, "a line break, '|' or the next rule");
            break;
        }
        space(&p, 1);
        n_defs++;
    }
    if (p.err == SD_OK && !b->oom && n_defs == 0) fail_msg(&p, p.i, "a grammar needs at least one rule");
    if (b->oom && p.err == SD_OK)
        p.err = b->n_elems > GR_MAX_ELEMS
                    ? sd_fail(SD_ERR_INVALID_ARG, "grammar: too large (more than %d elements after expanding repetitions)",
                              GR_MAX_ELEMS)
                    : sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
    return p.err;
}

sd_status sd_grammar_from_gbnf(const char *buf, size_t len, const char *root, sd_grammar **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "grammar: no output pointer");
    *out = NULL;
    if (!buf && len) return sd_fail(SD_ERR_INVALID_ARG, "grammar: NULL text");
    gr_builder b;
    memset(&b, 0, sizeof b);
    sd_status st = gr_parse_gbnf(&b, buf ? buf : "", len);
    if (st != SD_OK) {
        gr_builder_free(&b);
        return st;
    }
    return gr_build(&b, root ? root : "root", out);
}
