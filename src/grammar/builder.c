/* The grammar builder: rules of byte-set terminals and references, code point classes as UTF-8,
 * repetitions as generated rules, and the checks and flat tables of a finished grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

void gr_builder_free(gr_builder *b) {
    for (int i = 0; i < b->n_rules; i++) {
        for (int a = 0; a < b->rules[i].n_alts; a++) free(b->rules[i].alts[a].e);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    free(b->names);
    memset(b, 0, sizeof *b);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int add_rule(gr_builder *b, char *name) {
    if (!name || grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        free(name);
        b->oom = 1;
        return -1;
    }
    gr_brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    return b->n_rules++;
}

static uint32_t name_hash(const char *s, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The named rule called name, -1 when there is none. */
static int rule_find(const gr_builder *b, const char *name, size_t len) {
    if (!b->names) return -1;
    for (uint32_t i = name_hash(name, len) & b->names_mask;; i = (i + 1) & b->names_mask) {
        int32_t r = b->names[i];
        if (r < 0) return -1;
        if (strlen(b->rules[r].name) == len && !memcmp(b->rules[r].name, name, len)) return r;
    }
}

int gr_rule_get(gr_builder *b, const char *name, size_t len) {
    uint32_t h = name_hash(name, len);
    int found = rule_find(b, name, len);
    if (found >= 0) return found;
    if ((uint32_t)(b->n_named + 1) * 2 > (b->names ? b->names_mask + 1 : 0)) { /* grow: at most half full */
        uint32_t cap = b->names ? (b->names_mask + 1) * 2 : 64;
        int32_t *t = malloc(cap * sizeof *t);
        if (!t) {
            b->oom = 1;
            return -1;
        }
        for (uint32_t i = 0; i < cap; i++) t[i] = -1;
        for (uint32_t k = 0; b->names && k <= b->names_mask; k++) {
            int32_t r = b->names[k];
            if (r < 0) continue;
            uint32_t i = name_hash(b->rules[r].name, strlen(b->rules[r].name)) & (cap - 1);
            while (t[i] >= 0) i = (i + 1) & (cap - 1);
            t[i] = r;
        }
        free(b->names);
        b->names = t;
        b->names_mask = cap - 1;
    }
    char *n = malloc(len + 1);
    if (n) {
        memcpy(n, name, len);
        n[len] = 0;
    }
    int r = add_rule(b, n);
    if (r < 0) return -1;
    uint32_t i = h & b->names_mask;
    while (b->names[i] >= 0) i = (i + 1) & b->names_mask;
    b->names[i] = r;
    b->n_named++;
    return r;
}

int gr_rule_new(gr_builder *b, const char *base) {
    char buf[96];
    snprintf(buf, sizeof buf, "%.60s-%d", base, b->n_rules);
    int r = add_rule(b, strdup(buf));
    if (r >= 0) b->rules[r].defined = 1;
    return r;
}

gr_seq *gr_alt_new(gr_builder *b, int r) {
    if (r < 0 || b->oom) return NULL;
    gr_brule *R = &b->rules[r];
    if (grow((void **)&R->alts, &R->cap_alts, R->n_alts + 1, sizeof *R->alts)) {
        b->oom = 1;
        return NULL;
    }
    gr_seq *s = &R->alts[R->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

static void push(gr_builder *b, gr_seq *s, gr_elem e) {
    if (!s || b->oom) return;
    if (++b->n_elems > GR_MAX_ELEMS || grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        b->oom = 1;
        return;
    }
    s->e[s->n++] = e;
}

void gr_push_ref(gr_builder *b, gr_seq *s, int rule) {
    if (rule < 0) {
        b->oom = 1;
        return;
    }
    push(b, s, (gr_elem){GR_REF, rule});
}

void gr_push_set(gr_builder *b, gr_seq *s, const gr_bset *set) {
    int i = 0;
    while (i < b->n_sets && memcmp(&b->sets[i], set, sizeof *set)) i++;
    if (i == b->n_sets) {
        if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
            b->oom = 1;
            return;
        }
        b->sets[b->n_sets++] = *set;
    }
    push(b, s, (gr_elem){GR_TERM, i});
}

void gr_push_byte(gr_builder *b, gr_seq *s, uint8_t c) {
    gr_bset set = {{0}};
    gr_bset_add(&set, c);
    gr_push_set(b, s, &set);
}

/* ---- code point classes as UTF-8 ---- */

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int utf8_enc(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xE0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 63)), o[2] = (uint8_t)(0x80 | (c & 63)), 3;
    o[0] = (uint8_t)(0xF0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 63));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 63)), o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

typedef struct {
    gr_builder *b;
    int rule;      /* the class rule (created on the first multi-byte sequence) */
    gr_bset ascii; /* single-byte members */
    const char *base;
} cls_ctx;

/* [lo, hi] within one encoded length, split until every byte position is an independent range. */
static void utf8_seqs(cls_ctx *c, uint32_t lo, uint32_t hi) {
    static const uint32_t lim[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i]) {
            utf8_seqs(c, lo, lim[i]);
            utf8_seqs(c, lim[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        for (uint32_t x = lo; x <= hi; x++) gr_bset_add(&c->ascii, x);
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_seqs(c, lo, lo | m);
                utf8_seqs(c, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_seqs(c, lo, (hi & ~m) - 1);
                utf8_seqs(c, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    if (c->rule < 0) c->rule = gr_rule_new(c->b, c->base);
    gr_seq *s = gr_alt_new(c->b, c->rule);
    for (int i = 0; i < n; i++) {
        gr_bset set = {{0}};
        for (unsigned x = a[i]; x <= z[i]; x++) gr_bset_add(&set, x);
        gr_push_set(c->b, s, &set);
    }
}

int gr_push_class(gr_builder *b, gr_seq *s, const uint32_t *ranges, int n_ranges, int negate, const char *base) {
    /* normalise: sorted, merged, complemented if asked, surrogates removed */
    uint32_t *r = malloc(((size_t)n_ranges * 2 + 8) * sizeof *r);
    uint32_t *o = malloc(((size_t)n_ranges * 2 + 8) * 2 * sizeof *o);
    if (!r || !o) {
        free(r);
        free(o);
        b->oom = 1;
        return 0;
    }
    int n = 0;
    for (int i = 0; i < n_ranges; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (lo > hi || lo > 0x10FFFF) continue;
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        r[2 * n] = lo, r[2 * n + 1] = hi, n++;
    }
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i], r[2 * m + 1] = r[2 * i + 1], m++;
        }
    }
    if (negate) {
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[2 * i] > next) o[2 * k] = next, o[2 * k + 1] = r[2 * i] - 1, k++;
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) o[2 * k] = next, o[2 * k + 1] = 0x10FFFF, k++;
        memcpy(r, o, (size_t)k * 2 * sizeof *r);
        m = k;
    }
    int k = 0; /* cut out the surrogates */
    for (int i = 0; i < m; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) {
            o[2 * k] = lo, o[2 * k + 1] = hi, k++;
            continue;
        }
        if (lo < 0xD800) o[2 * k] = lo, o[2 * k + 1] = 0xD7FF, k++;
        if (hi > 0xDFFF) o[2 * k] = 0xE000, o[2 * k + 1] = hi, k++;
    }
    free(r);
    if (k == 0) {
        free(o);
        return -1;
    }
    cls_ctx c = {b, -1, {{0}}, base};
    for (int i = 0; i < k; i++) utf8_seqs(&c, o[2 * i], o[2 * i + 1]);
    free(o);
    int has_ascii = c.ascii.w[0] || c.ascii.w[1];
    if (c.rule < 0) {
        gr_push_set(b, s, &c.ascii);
        return 0;
    }
    if (has_ascii) gr_push_set(b, gr_alt_new(b, c.rule), &c.ascii);
    gr_push_ref(b, s, c.rule);
    return 0;
}

/* The part of e{min,max} past the min copies, as one rule (-1: nothing). */
static int repeat_tail(gr_builder *b, gr_elem e, int min, int max, const char *base) {
    if (max >= 0 && max <= min) return -1;
    if (max < 0) { /* R ::= e R | "" : right recursion, so the stack does not grow per repetition */
        int r = gr_rule_new(b, base);
        gr_seq *a = gr_alt_new(b, r);
        push(b, a, e);
        gr_push_ref(b, a, r);
        gr_alt_new(b, r);
        return r;
    }
    int prev = -1; /* R_j ::= e R_{j-1} | "" : 0..j more copies; the R_j get consecutive indices */
    for (int j = 1; j <= max - min && !b->oom; j++) {
        int r = gr_rule_new(b, base);
        if (r < 0) return -1;
        b->rules[r].chain_idx = j;
        gr_seq *a = gr_alt_new(b, r);
        push(b, a, e);
        if (prev >= 0) gr_push_ref(b, a, prev);
        gr_alt_new(b, r);
        prev = r;
    }
    return prev;
}

void gr_push_repeat(gr_builder *b, gr_seq *s, gr_elem e, int min, int max, const char *base) {
    int tail = repeat_tail(b, e, min, max, base);
    if (min <= 4) { /* a few copies in place */
        for (int i = 0; i < min; i++) push(b, s, e);
        if (tail >= 0) gr_push_ref(b, s, tail);
        return;
    }
    /* more: the chain M_j ::= e M_{j-1}, M_1 ::= e tail, so that positions deep in it share masks */
    int prev = tail;
    for (int j = 1; j <= min && !b->oom; j++) {
        int r = gr_rule_new(b, base);
        if (r < 0) return;
        b->rules[r].chain_idx = j;
        gr_seq *a = gr_alt_new(b, r);
        push(b, a, e);
        if (prev >= 0) gr_push_ref(b, a, prev);
        prev = r;
    }
    gr_push_ref(b, s, prev);
}

/* ---- finishing ---- */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX / 4 - b ? UINT64_MAX / 4 : a + b; }

sd_status gr_build(gr_builder *b, const char *root, sd_grammar **out) {
    *out = NULL;
    sd_status st = SD_OK;
    if (b->oom) {
        st = b->n_elems > GR_MAX_ELEMS
                 ? sd_fail(SD_ERR_INVALID_ARG, "grammar: too large (more than %d elements after expanding repetitions)",
                           GR_MAX_ELEMS)
                 : sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
        gr_builder_free(b);
        return st;
    }
    for (int i = 0; i < b->n_rules; i++)
        if (!b->rules[i].defined) {
            st = sd_fail(SD_ERR_INVALID_ARG, "grammar: line %d, column %d: undefined rule '%s'", b->rules[i].ref_line,
                         b->rules[i].ref_col, b->rules[i].name);
            gr_builder_free(b);
            return st;
        }
    int root_i = rule_find(b, root, strlen(root));
    if (root_i < 0) {
        st = sd_fail(SD_ERR_INVALID_ARG, "grammar: no rule named '%s' (the start rule)", root);
        gr_builder_free(b);
        return st;
    }
    sd_grammar *g = calloc(1, sizeof *g);
    int nr = b->n_rules, na = 0;
    long ne = 0;
    for (int i = 0; i < nr; i++) {
        na += b->rules[i].n_alts;
        for (int a = 0; a < b->rules[i].n_alts; a++) ne += b->rules[i].alts[a].n + 1;
    }
    if (g) {
        g->el = malloc((size_t)(ne + 1) * sizeof *g->el);
        g->alt_start = malloc((size_t)(na + 1) * sizeof *g->alt_start);
        g->rule_alt0 = malloc((size_t)nr * sizeof *g->rule_alt0);
        g->rule_nalt = malloc((size_t)nr * sizeof *g->rule_nalt);
        g->names = calloc((size_t)nr, sizeof *g->names);
        g->pos_alt = malloc((size_t)(ne + 1) * sizeof *g->pos_alt);
        g->alt_rule = malloc((size_t)(na + 1) * sizeof *g->alt_rule);
        g->rule_chain = malloc((size_t)(nr + 1) * sizeof *g->rule_chain);
        g->sets = malloc((size_t)(b->n_sets + 1) * sizeof *g->sets);
    }
    uint8_t *nullable = calloc((size_t)nr + 1, 1);
    int32_t *stack = malloc(((size_t)nr + 1) * 2 * sizeof *stack);
    uint8_t *color = calloc((size_t)nr + 1, 1);
    uint64_t *maxlen = calloc((size_t)nr + 1, sizeof *maxlen);
    int32_t *outdeg = calloc((size_t)nr + 1, sizeof *outdeg);
    int32_t *radj0 = calloc((size_t)nr + 2, sizeof *radj0);
    int32_t *radj = malloc(((size_t)ne + 1) * sizeof *radj);
    if (!g || !g->el || !g->alt_start || !g->rule_alt0 || !g->rule_nalt || !g->names || !g->sets || !g->pos_alt ||
        !g->alt_rule || !g->rule_chain || !nullable ||
        !stack || !color || !maxlen || !outdeg || !radj0 || !radj) {
        st = sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    /* flat tables; the builder's rule names move over */
    g->n_rules = nr;
    g->n_sets = b->n_sets;
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    int ai = 0, ei = 0;
    for (int i = 0; i < nr; i++) {
        gr_brule *R = &b->rules[i];
        g->names[i] = R->name;
        R->name = NULL;
        g->rule_alt0[i] = ai;
        g->rule_nalt[i] = R->n_alts;
        g->rule_chain[i] = R->chain_idx;
        g->n_chain_rules += R->chain_idx > 0;
        for (int a = 0; a < R->n_alts; a++) {
            g->alt_rule[ai] = i;
            g->alt_start[ai++] = ei;
            for (int k = 0; k < R->alts[a].n; k++) g->pos_alt[ei] = ai - 1, g->el[ei++] = R->alts[a].e[k];
            g->pos_alt[ei] = ai - 1;
            g->el[ei++] = (gr_elem){GR_END, i};
        }
    }
    g->alt_start[ai] = ei;
    g->n_el = ei;
    g->n_alt = na;
    g->root = root_i;
    for (int i = 0; i < nr; i++)
        if (g->rule_nalt[i] == 0) {
            st = sd_fail(SD_ERR_INVALID_ARG, "grammar: rule '%s' has no alternatives", g->names[i]);
            goto done;
        }
    /* nullable rules, to a fixed point */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < nr; i++) {
            if (nullable[i]) continue;
            for (int a = g->rule_alt0[i]; a < g->rule_alt0[i] + g->rule_nalt[i] && !nullable[i]; a++) {
                int p = g->alt_start[a];
                while (g->el[p].type == GR_REF && nullable[g->el[p].v]) p++;
                if (g->el[p].type == GR_END) nullable[i] = 1, changed = 1;
            }
        }
    }
    /* left recursion: a cycle among left corners (references reached before any byte) */
    for (int s0 = 0; s0 < nr; s0++) {
        if (color[s0]) continue;
        int sp = 0; /* stack of (rule, next alt-element cursor) */
        stack[0] = s0, stack[1] = -1, sp = 1, color[s0] = 1;
        while (sp) {
            int r = stack[2 * (sp - 1)];
            int cur = stack[2 * (sp - 1) + 1];
            /* cursor: an element index; -1: start; walks every alternative's left corners */
            int next = -1, found = -1;
            int first = g->alt_start[g->rule_alt0[r]], last = g->alt_start[g->rule_alt0[r] + g->rule_nalt[r]];
            for (int p = cur < 0 ? first : cur + 1; p < last; p++) {
                /* is p a left corner: every element before it in its alternative nullable */
                int q = p;
                int ok = g->el[p].type == GR_REF;
                while (ok && q > first && g->el[q - 1].type != GR_END) {
                    q--;
                    if (g->el[q].type != GR_REF || !nullable[g->el[q].v]) ok = 0;
                }
                if (ok) {
                    next = p;
                    found = g->el[p].v;
                    break;
                }
            }
            if (found < 0) {
                color[r] = 2;
                sp--;
                continue;
            }
            stack[2 * (sp - 1) + 1] = next;
            if (color[found] == 1) {
                st = sd_fail(SD_ERR_INVALID_ARG,
                             "grammar: left recursion: rule '%s' can reach itself without reading a byte "
                             "(through '%s'; a repetition of something that can be empty does this too)",
                             g->names[found], g->names[r]);
                goto done;
            }
            if (color[found] == 0) {
                color[found] = 1;
                stack[2 * sp] = found, stack[2 * sp + 1] = -1, sp++;
            }
        }
    }
    /* the longest sentence: rules in reverse topological order (Kahn); rules in or above a cycle
     * are never reached and stay infinite */
    for (int i = 0; i < nr; i++)
        for (int p = g->alt_start[g->rule_alt0[i]]; p < g->alt_start[g->rule_alt0[i] + g->rule_nalt[i]]; p++)
            if (g->el[p].type == GR_REF) outdeg[i]++, radj0[g->el[p].v + 1]++;
    for (int i = 0; i < nr; i++) radj0[i + 1] += radj0[i];
    {
        int32_t *fill = calloc((size_t)nr + 1, sizeof *fill);
        if (!fill) {
            st = sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        for (int i = 0; i < nr; i++)
            for (int p = g->alt_start[g->rule_alt0[i]]; p < g->alt_start[g->rule_alt0[i] + g->rule_nalt[i]]; p++)
                if (g->el[p].type == GR_REF) {
                    int t = g->el[p].v;
                    radj[radj0[t] + fill[t]++] = i;
                }
        free(fill);
    }
    int qh = 0, qt = 0;
    for (int i = 0; i < nr; i++)
        if (!outdeg[i]) stack[qt++] = i;
    while (qh < qt) {
        int r = stack[qh++];
        uint64_t best = 0;
        for (int a = g->rule_alt0[r]; a < g->rule_alt0[r] + g->rule_nalt[r]; a++) {
            uint64_t len = 0;
            for (int p = g->alt_start[a]; g->el[p].type != GR_END; p++)
                len = sat_add(len, g->el[p].type == GR_TERM ? 1 : maxlen[g->el[p].v]);
            if (len > best) best = len;
        }
        maxlen[r] = best;
        color[r] = 3;
        for (int k = radj0[r]; k < radj0[r + 1]; k++)
            if (--outdeg[radj[k]] == 0) stack[qt++] = radj[k];
    }
    g->finite = color[root_i] == 3;
    g->max_bytes = g->finite ? maxlen[root_i] : 0;
done:
    free(nullable);
    free(stack);
    free(color);
    free(maxlen);
    free(outdeg);
    free(radj0);
    free(radj);
    gr_builder_free(b);
    if (st != SD_OK) {
        sd_grammar_free(g);
        return st;
    }
    *out = g;
    return SD_OK;
}
