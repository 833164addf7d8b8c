/* Matching: hash-consed parse stacks, a lazily built automaton over sets of stacks (one step per
 * byte, cached per state and byte), the vocabulary's byte trie walked through that automaton for
 * token masks (cached per state), and the per-sequence matchers with O(1) rollback. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"
#include "specdec/tokenizer.h"

/* Cache limits per grammar: automaton states (each may hold 1 KiB of transitions) and the bytes of
 * cached transitions and masks. Past either, the automaton is flushed and rebuilt as used. */
#define GR_MAX_STATES 65536
#define GR_MAX_CACHE_BYTES ((size_t)256 << 20)
/* Tokens of at most this many bytes are "short": deep inside a bounded repetition their mask does
 * not depend on how many repetitions are left (see canon_state), so it is shared. */
#define GR_SHORT 16

struct sd_grammar_vocab {
    int n;              /* ids */
    uint8_t *bytes;     /* every allowed token's bytes */
    uint32_t *off, *len; /* per id (len 0: never allowed as text) */
    uint8_t *is_eog;
    int32_t *eog;
    int n_eog;
    /* the trie in preorder: node i has byte[i] at depth[i] (1-based), its subtree ends before
     * skip[i], and the tokens ending at it are tok[tok0[i] .. tok0[i + 1]) */
    int n_nodes;
    uint8_t *tbyte;
    uint16_t *depth;
    int32_t *skip, *tok0, *tok;
    uint8_t *has_long; /* the node's subtree holds a token longer than GR_SHORT */
    int max_depth;
};

struct sd_grammar_matcher {
    sd_grammar *g;
    const sd_grammar_vocab *v;
    /* steps: the state after step k is nodes pool[off[k] .. off[k] + n[k]) and flags[k] */
    int32_t *pool;
    size_t n_pool, cap_pool;
    size_t *off;
    int32_t *cnt;
    uint8_t *flags; /* 1: the root may end; 2: done (end of generation accepted) */
    int32_t *sid;   /* the automaton state, valid while sepoch[k] == g->epoch */
    uint32_t *sepoch;
    int n_steps, cap_steps; /* entries 0..n_steps (entry 0: the start) */
    int32_t *dstk;          /* trie walk: the state per depth */
    /* lazy grammars: while the text is free, steps 0..n_free with the trigger's state after each
     * (tstate); from the step that completed the trigger on, `at` is the number of free steps before
     * it, and the steps above are the grammar's own (at + n_steps in all). at < 0: still free. */
    int32_t *tstate;
    int n_free, cap_free, at;
};

/* ---- stack nodes ---- */

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 29) ^ (uint32_t)h;
}

static int nodes_rehash(sd_grammar *g, uint32_t nb) {
    int32_t *bk = malloc((size_t)nb * sizeof *bk);
    if (!bk) return -1;
    for (uint32_t i = 0; i < nb; i++) bk[i] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        uint32_t h = hash2((uint32_t)g->nodes[i].pos, (uint32_t)g->nodes[i].parent) & (nb - 1);
        g->nodes[i].next = bk[h];
        bk[h] = i;
    }
    free(g->nbuck);
    g->nbuck = bk;
    g->nbuck_mask = nb - 1;
    return 0;
}

/* The node (pos, parent), created when new; -1 on allocation failure (g->oom set). */
static int32_t intern(sd_grammar *g, int32_t pos, int32_t parent) {
    uint32_t h = hash2((uint32_t)pos, (uint32_t)parent);
    if (g->nbuck) {
        for (int32_t i = g->nbuck[h & g->nbuck_mask]; i >= 0; i = g->nodes[i].next)
            if (g->nodes[i].pos == pos && g->nodes[i].parent == parent) return i;
    }
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? g->cap_nodes * 2 : 1024;
        gr_node *q = realloc(g->nodes, (size_t)cap * sizeof *q);
        uint32_t *st = q ? realloc(g->stamp, (size_t)cap * sizeof *st) : NULL;
        int32_t *co = st ? realloc(g->canon_of, (size_t)cap * sizeof *co) : NULL;
        if (q) g->nodes = q;
        if (st) g->stamp = st;
        if (co) g->canon_of = co;
        if (!q || !st || !co || nodes_rehash(g, (uint32_t)cap * 2)) {
            g->oom = 1;
            return -1;
        }
        memset(g->stamp + g->cap_nodes, 0, (size_t)(cap - g->cap_nodes) * sizeof *st);
        for (int i = g->cap_nodes; i < cap; i++) co[i] = -2;
        g->cap_nodes = cap;
    }
    int32_t id = g->n_nodes++;
    g->nodes[id] = (gr_node){pos, parent, g->nbuck[h & g->nbuck_mask]};
    g->nbuck[h & g->nbuck_mask] = id;
    g->stamp[id] = 0;
    return id;
}

/* ---- closure: from pending nodes to the set of terminal tops ---- */

typedef struct {
    int n_work, n_out;
    int accept;
} closure;

static int push_work(sd_grammar *g, closure *c, int32_t id) {
    if (id < 0) return -1;
    if (c->n_work == g->cap_work) {
        int cap = g->cap_work ? g->cap_work * 2 : 256;
        int32_t *q = realloc(g->work, (size_t)cap * sizeof *q);
        if (!q) return g->oom = 1, -1;
        g->work = q;
        g->cap_work = cap;
    }
    g->work[c->n_work++] = id;
    return 0;
}

/* Expands the work list: a terminal top is kept, a finished alternative returns to its parent
 * (the root's end marks acceptance), a call pushes its continuation (skipped when the call is the
 * alternative's last element, so right recursion does not deepen the stack) and enters every
 * alternative of the callee. */
static int run_closure(sd_grammar *g, closure *c) {
    while (c->n_work) {
        int32_t id = g->work[--c->n_work];
        if (g->stamp[id] == g->cur_stamp) continue;
        g->stamp[id] = g->cur_stamp;
        int32_t pos = g->nodes[id].pos, parent = g->nodes[id].parent;
        const gr_elem e = g->el[pos];
        if (e.type == GR_TERM) {
            if (c->n_out == g->cap_out) {
                int cap = g->cap_out ? g->cap_out * 2 : 256;
                int32_t *q = realloc(g->out, (size_t)cap * sizeof *q);
                if (!q) return g->oom = 1, -1;
                g->out = q;
                g->cap_out = cap;
            }
            g->out[c->n_out++] = id;
        } else if (e.type == GR_END) {
            if (parent < 0) c->accept = 1;
            else if (push_work(g, c, parent)) return -1;
        } else {
            int32_t cont = g->el[pos + 1].type == GR_END ? parent : intern(g, pos + 1, parent);
            if (g->el[pos + 1].type != GR_END && cont < 0) return -1;
            int a0 = g->rule_alt0[e.v], na = g->rule_nalt[e.v];
            for (int a = a0; a < a0 + na; a++)
                if (push_work(g, c, intern(g, g->alt_start[a], cont))) return -1;
        }
    }
    return 0;
}

static void new_stamp(sd_grammar *g) {
    if (++g->cur_stamp == 0) { /* wrapped: clear every mark */
        memset(g->stamp, 0, (size_t)g->cap_nodes * sizeof *g->stamp);
        g->cur_stamp = 1;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- automaton states ---- */

static uint32_t hash_set(const int32_t *ids, int n, int accept) {
    uint32_t h = 2166136261u ^ (uint32_t)accept;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 16777619u;
    return h;
}

static void states_flush(sd_grammar *g) {
    for (int i = 0; i < g->n_st; i++) {
        free(g->st[i].trans);
        free(g->st[i].mask);
        free(g->st[i].smask);
    }
    g->n_st = 0;
    g->n_spool = 0;
    g->cache_bytes = 0;
    if (g->sbuck)
        for (uint32_t i = 0; i <= g->sbuck_mask; i++) g->sbuck[i] = -1;
    g->epoch++;
}

/* The state of the sorted top set ids (n of them); -1 on allocation failure. */
static int32_t state_intern(sd_grammar *g, const int32_t *ids, int n, int accept) {
    uint32_t h = hash_set(ids, n, accept);
    if (g->sbuck)
        for (int32_t s = g->sbuck[h & g->sbuck_mask]; s >= 0; s = g->st[s].next) {
            const gr_state *S = &g->st[s];
            if (S->hash == h && S->n == n && S->accept == accept &&
                (n == 0 || !memcmp(g->spool + S->off, ids, (size_t)n * sizeof *ids)))
                return s;
        }
    if (g->n_st == g->cap_st) {
        int cap = g->cap_st ? g->cap_st * 2 : 256;
        gr_state *q = realloc(g->st, (size_t)cap * sizeof *q);
        int32_t *bk = q ? malloc((size_t)cap * 2 * sizeof *bk) : NULL;
        if (q) g->st = q;
        if (!q || !bk) {
            free(bk);
            g->oom = 1;
            return -1;
        }
        g->cap_st = cap;
        free(g->sbuck);
        g->sbuck = bk;
        g->sbuck_mask = (uint32_t)cap * 2 - 1;
        for (uint32_t i = 0; i <= g->sbuck_mask; i++) bk[i] = -1;
        for (int i = 0; i < g->n_st; i++) {
            g->st[i].next = bk[g->st[i].hash & g->sbuck_mask];
            bk[g->st[i].hash & g->sbuck_mask] = i;
        }
    }
    if (g->n_spool + (size_t)n > g->cap_spool) {
        size_t cap = g->cap_spool ? g->cap_spool : 1024;
        while (cap < g->n_spool + (size_t)n) cap *= 2;
        int32_t *q = realloc(g->spool, cap * sizeof *q);
        if (!q) return g->oom = 1, -1;
        g->spool = q;
        g->cap_spool = cap;
    }
    int32_t s = g->n_st++;
    gr_state *S = &g->st[s];
    S->off = (int32_t)g->n_spool;
    S->n = n;
    S->hash = h;
    S->accept = (uint8_t)accept;
    S->trans = NULL;
    S->mask = NULL;
    S->smask = NULL;
    if (n) memcpy(g->spool + g->n_spool, ids, (size_t)n * sizeof *ids);
    g->n_spool += (size_t)n;
    S->next = g->sbuck[h & g->sbuck_mask];
    g->sbuck[h & g->sbuck_mask] = s;
    return s;
}

/* Finishes a closure into a state: -1 dead (nothing follows and the root cannot end), -2 on
 * allocation failure. */
static int32_t closure_state(sd_grammar *g, closure *c) {
    if (run_closure(g, c)) return -2;
    if (!c->n_out && !c->accept) return -1;
    if (c->n_out > 1) qsort(g->out, (size_t)c->n_out, sizeof *g->out, cmp_i32);
    int32_t s = state_intern(g, g->out, c->n_out, c->accept);
    return s < 0 ? -2 : s;
}

/* The state after byte b from state s (computed once, then cached): -1 dead, -2 out of memory. */
static int32_t step(sd_grammar *g, int32_t s, unsigned b) {
    if (g->st[s].trans && g->st[s].trans[b] != -2) return g->st[s].trans[b];
    if (!g->st[s].trans) {
        int32_t *t = malloc(256 * sizeof *t);
        if (!t) return g->oom = 1, -2;
        for (int i = 0; i < 256; i++) t[i] = -2;
        g->st[s].trans = t;
        g->cache_bytes += 256 * sizeof *t;
    }
    new_stamp(g);
    closure c = {0, 0, 0};
    for (int i = 0; i < g->st[s].n; i++) {
        int32_t id = g->spool[g->st[s].off + i];
        int32_t pos = g->nodes[id].pos;
        if (gr_bset_has(&g->sets[g->el[pos].v], b) && push_work(g, &c, intern(g, pos + 1, g->nodes[id].parent)))
            return -2;
    }
    int32_t r = closure_state(g, &c);
    if (r == -2) return -2;
    g->st[s].trans[b] = r; /* st may have moved: index again */
    return r;
}

static int32_t start_state(sd_grammar *g) {
    new_stamp(g);
    closure c = {0, 0, 0};
    int a0 = g->rule_alt0[g->root], na = g->rule_nalt[g->root];
    for (int a = a0; a < a0 + na; a++)
        if (push_work(g, &c, intern(g, g->alt_start[a], -1))) return -2;
    return closure_state(g, &c);
}

/* ---- grammars ---- */

void sd_grammar_free(sd_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->alt_start);
    free(g->rule_alt0);
    free(g->rule_nalt);
    if (g->names)
        for (int i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->sets);
    free(g->pos_alt);
    free(g->alt_rule);
    free(g->rule_chain);
    free(g->nodes);
    free(g->nbuck);
    free(g->stamp);
    free(g->canon_of);
    free(g->path);
    for (int i = 0; i < g->n_st; i++) {
        free(g->st[i].trans);
        free(g->st[i].mask);
        free(g->st[i].smask);
    }
    free(g->st);
    free(g->sbuck);
    free(g->spool);
    free(g->work);
    free(g->out);
    free(g->trig);
    free(g->trig_fail);
    for (int i = 0; g->free_mask && i < g->trig_len; i++) free(g->free_mask[i]);
    free(g->free_mask);
    free(g);
}

int sd_grammar_max_bytes(const sd_grammar *g, uint64_t *bytes) {
    if (!g) return 0;
    if (bytes) *bytes = g->max_bytes;
    return g->finite;
}

void sd_grammar_size(const sd_grammar *g, int *n_rules, int *n_elements) {
    if (n_rules) *n_rules = g ? g->n_rules : 0;
    if (n_elements) *n_elements = g ? g->n_el : 0;
}

/* ---- the vocabulary index ---- */

void sd_grammar_vocab_free(sd_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->is_eog);
    free(v->eog);
    free(v->tbyte);
    free(v->depth);
    free(v->skip);
    free(v->tok0);
    free(v->tok);
    free(v->has_long);
    free(v);
}

/* A token's bytes for sorting (qsort has no context argument, and vocabularies may be built on
 * several threads at once). */
typedef struct {
    const uint8_t *b;
    uint32_t len;
    int32_t id;
} tok_key;

static int cmp_tok(const void *a, const void *b) {
    const tok_key *x = a, *y = b;
    int c = memcmp(x->b, y->b, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

sd_status sd_grammar_vocab_create(const struct sd_tokenizer *t, sd_grammar_vocab **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "grammar vocabulary: no output pointer");
    *out = NULL;
    if (!t) return sd_fail(SD_ERR_INVALID_ARG, "grammar vocabulary: no tokenizer");
    int n = sd_tokenizer_n_vocab(t);
    int cap = sd_tokenizer_max_piece_len(t);
    sd_grammar_vocab *v = calloc(1, sizeof *v);
    char *buf = malloc((size_t)cap + 1);
    int32_t *order = malloc(((size_t)n + 1) * sizeof *order);
    size_t cap_bytes = (size_t)n * 8 + 64, n_bytes = 0;
    if (v) {
        v->n = n;
        v->bytes = malloc(cap_bytes);
        v->off = calloc((size_t)n + 1, sizeof *v->off);
        v->len = calloc((size_t)n + 1, sizeof *v->len);
        v->is_eog = calloc((size_t)n + 1, 1);
        v->eog = malloc(((size_t)n + 1) * sizeof *v->eog);
    }
    if (!v || !buf || !order || !v->bytes || !v->off || !v->len || !v->is_eog || !v->eog) goto oom;
    /* decode as text after an ordinary token, so no SentencePiece leading space is dropped */
    int32_t prev = sd_tokenizer_bos(t) == 0 ? 1 : 0;
    if (prev >= n) prev = -1;
    int n_ok = 0;
    for (int32_t id = 0; id < n; id++) {
        if (sd_tokenizer_is_eog(t, id)) {
            v->is_eog[id] = 1;
            v->eog[v->n_eog++] = id;
            continue;
        }
        int ty = sd_tokenizer_token_type(t, id);
        if (ty == SD_TOKEN_CONTROL || ty == SD_TOKEN_UNKNOWN || ty == SD_TOKEN_UNUSED) continue;
        int k = sd_tokenizer_decode(t, prev, id, buf, (size_t)cap);
        if (k <= 0) continue;
        if (n_bytes + (size_t)k > cap_bytes) {
            while (n_bytes + (size_t)k > cap_bytes) cap_bytes *= 2;
            uint8_t *q = realloc(v->bytes, cap_bytes);
            if (!q) goto oom;
            v->bytes = q;
        }
        memcpy(v->bytes + n_bytes, buf, (size_t)k);
        v->off[id] = (uint32_t)n_bytes;
        v->len[id] = (uint32_t)k;
        n_bytes += (size_t)k;
        order[n_ok++] = id;
    }
    tok_key *keys = malloc(((size_t)n_ok + 1) * sizeof *keys);
    if (!keys) goto oom;
    for (int k = 0; k < n_ok; k++) keys[k] = (tok_key){v->bytes + v->off[order[k]], v->len[order[k]], order[k]};
    qsort(keys, (size_t)n_ok, sizeof *keys, cmp_tok);
    for (int k = 0; k < n_ok; k++) order[k] = keys[k].id;
    free(keys);
    /* the trie: one node per distinct prefix, in preorder (= sorted order) */
    size_t max_nodes = n_bytes + 1;
    v->tbyte = malloc(max_nodes);
    v->depth = malloc(max_nodes * sizeof *v->depth);
    v->skip = malloc(max_nodes * sizeof *v->skip);
    v->tok0 = malloc((max_nodes + 1) * sizeof *v->tok0);
    v->tok = malloc(((size_t)n_ok + 1) * sizeof *v->tok);
    v->has_long = calloc(max_nodes, 1);
    int32_t *open = malloc(((size_t)cap + 2) * sizeof *open); /* the open node at each depth */
    int32_t *tok_node = malloc(((size_t)n_ok + 1) * sizeof *tok_node);
    if (!v->tbyte || !v->depth || !v->skip || !v->tok0 || !v->tok || !v->has_long || !open || !tok_node) {
        free(open);
        free(tok_node);
        goto oom;
    }
    int nn = 0, open_n = 0; /* open[0..open_n): the path to the last node */
    for (int k = 0; k < n_ok; k++) {
        int32_t id = order[k];
        const uint8_t *b = v->bytes + v->off[id];
        int len = (int)v->len[id];
        if (len > 65535) len = 65535; /* depth is 16-bit; such a token would be cut, so refuse it */
        int l = 0;
        if (k) {
            int32_t pid = order[k - 1];
            int pl = (int)v->len[pid];
            const uint8_t *pb = v->bytes + v->off[pid];
            while (l < pl && l < len && pb[l] == b[l]) l++;
        }
        if (l > open_n) l = open_n;
        for (int d = l; d < open_n; d++) v->skip[open[d]] = nn; /* close the deeper nodes */
        open_n = l;
        for (int d = l; d < len; d++) {
            v->tbyte[nn] = b[d];
            v->depth[nn] = (uint16_t)(d + 1);
            open[open_n++] = nn;
            nn++;
        }
        tok_node[k] = open[len - 1];
        if (len > v->max_depth) v->max_depth = len;
        if (len > GR_SHORT)
            for (int d = 0; d < len; d++) v->has_long[open[d]] = 1;
    }
    for (int d = 0; d < open_n; d++) v->skip[open[d]] = nn;
    v->n_nodes = nn;
    /* tokens per node (CSR); tokens come in preorder of their nodes */
    int k = 0;
    for (int i = 0; i <= nn; i++) {
        v->tok0[i] = k;
        while (k < n_ok && tok_node[k] == i) v->tok[k] = order[k], k++;
    }
    free(open);
    free(tok_node);
    free(buf);
    free(order);
    *out = v;
    return SD_OK;
oom:
    free(buf);
    free(order);
    sd_grammar_vocab_free(v);
    return sd_fail(SD_ERR_NOMEM, "grammar vocabulary: out of memory (%d tokens)", n);
}

int sd_grammar_vocab_n(const sd_grammar_vocab *v) { return v ? v->n : 0; }
size_t sd_grammar_mask_words(const sd_grammar_vocab *v) { return v ? ((size_t)v->n + 63) / 64 : 0; }

const uint8_t *sd_grammar_vocab_bytes(const sd_grammar_vocab *v, int32_t id, size_t *len) {
    if (!v || id < 0 || id >= v->n || !v->len[id]) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = v->len[id];
    return v->bytes + v->off[id];
}

/* ---- matchers ---- */

void sd_grammar_matcher_free(sd_grammar_matcher *m) {
    if (!m) return;
    free(m->pool);
    free(m->off);
    free(m->cnt);
    free(m->flags);
    free(m->sid);
    free(m->sepoch);
    free(m->dstk);
    free(m->tstate);
    free(m);
}

/* Appends a step holding state s (or the done marker when s < 0 and done). */
static int push_step(sd_grammar_matcher *m, int32_t s, int done) {
    sd_grammar *g = m->g;
    int k = m->n_steps + 1;
    if (k >= m->cap_steps) {
        int cap = m->cap_steps ? m->cap_steps * 2 : 64;
        size_t *o = realloc(m->off, (size_t)cap * sizeof *o);
        if (o) m->off = o;
        int32_t *c = o ? realloc(m->cnt, (size_t)cap * sizeof *c) : NULL;
        if (c) m->cnt = c;
        uint8_t *f = c ? realloc(m->flags, (size_t)cap) : NULL;
        if (f) m->flags = f;
        int32_t *si = f ? realloc(m->sid, (size_t)cap * sizeof *si) : NULL;
        if (si) m->sid = si;
        uint32_t *se = si ? realloc(m->sepoch, (size_t)cap * sizeof *se) : NULL;
        if (se) m->sepoch = se;
        if (!se) return -1;
        m->cap_steps = cap;
    }
    size_t base = k ? m->off[k - 1] + (size_t)m->cnt[k - 1] : 0;
    if (k == 0) base = 0;
    int n = done ? 0 : g->st[s].n;
    if (base + (size_t)n > m->cap_pool) {
        size_t cap = m->cap_pool ? m->cap_pool : 256;
        while (cap < base + (size_t)n) cap *= 2;
        int32_t *q = realloc(m->pool, cap * sizeof *q);
        if (!q) return -1;
        m->pool = q;
        m->cap_pool = cap;
    }
    if (n) memcpy(m->pool + base, g->spool + g->st[s].off, (size_t)n * sizeof *m->pool);
    m->off[k] = base;
    m->cnt[k] = n;
    m->flags[k] = (uint8_t)(done ? 2 : g->st[s].accept);
    m->sid[k] = done ? -1 : s;
    m->sepoch[k] = g->epoch;
    m->n_steps = k;
    return 0;
}

/* The automaton state of the current step (re-interned after a flush); -2 out of memory. */
static int32_t cur_state(sd_grammar_matcher *m) {
    int k = m->n_steps;
    if (m->flags[k] & 2) return -1;
    if (m->sepoch[k] == m->g->epoch) return m->sid[k];
    int32_t s = state_intern(m->g, m->pool + m->off[k], m->cnt[k], m->flags[k] & 1);
    if (s < 0) return -2;
    m->sid[k] = s;
    m->sepoch[k] = m->g->epoch;
    return s;
}

/* Between operations: flush the automaton when it has grown past its limits. */
static void maybe_flush(sd_grammar *g) {
    if (g->n_st > GR_MAX_STATES || g->cache_bytes > GR_MAX_CACHE_BYTES) states_flush(g);
}

sd_status sd_grammar_matcher_create(sd_grammar *g, const sd_grammar_vocab *v, sd_grammar_matcher **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: no output pointer");
    *out = NULL;
    if (!g) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: no grammar");
    if (v && g->vocab && g->vocab != v)
        return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: every matcher of a grammar must use the same vocabulary");
    sd_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->v = v;
    m->n_steps = -1;
    m->at = -1;
    if (g->trig && !(m->tstate = malloc(64 * sizeof *m->tstate))) {
        sd_grammar_matcher_free(m);
        return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    }
    if (g->trig) m->tstate[0] = 0, m->cap_free = 64;
    if (v) {
        g->vocab = v;
        m->dstk = malloc(((size_t)v->max_depth + 2) * sizeof *m->dstk);
        if (!m->dstk) {
            sd_grammar_matcher_free(m);
            return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
        }
    }
    maybe_flush(g);
    int32_t s = start_state(g);
    if (s == -1) { /* cannot happen for a built grammar: every rule derives something */
        sd_grammar_matcher_free(m);
        return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: the grammar matches nothing");
    }
    if (s < 0 || push_step(m, s, 0)) {
        sd_grammar_matcher_free(m);
        return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    }
    g->n_matchers++;
    *out = m;
    return SD_OK;
}

/* ---- lazy grammars: free text until the trigger ---- */

/* Steps len bytes from state s: the final state, -1 when a byte is refused, -2 out of memory. */
static int32_t walk_bytes(sd_grammar *g, int32_t s, const uint8_t *b, size_t len) {
    for (size_t i = 0; i < len && s >= 0; i++) s = step(g, s, b[i]);
    return s;
}


enum { TS_NEVER = -1, TS_ENDED = -2 }; /* trigger states besides 0..trig_len - 1 (bytes matched) */

sd_status sd_grammar_set_trigger(sd_grammar *g, const void *trigger, size_t len, sd_grammar_trigger_where where) {
    if (!g || !trigger || len < 1 || len > 256 || (where != SD_GRAMMAR_TRIGGER_ANYWHERE && where != SD_GRAMMAR_TRIGGER_AT_START))
        return sd_fail(SD_ERR_INVALID_ARG, "grammar: a trigger is 1 to 256 bytes, anywhere or at the start");
    if (g->trig || g->n_matchers)
        return sd_fail(SD_ERR_INVALID_ARG, "grammar: the trigger is set once, before the first matcher");
    uint8_t *t = malloc(len);
    int32_t *f = malloc(len * sizeof *f);
    uint64_t **fm = calloc(len, sizeof *fm);
    if (!t || !f || !fm) {
        free(t), free(f), free(fm);
        return sd_fail(SD_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy(t, trigger, len);
    f[0] = 0;
    for (size_t i = 1, k = 0; i < len; i++) {
        while (k > 0 && t[i] != t[k]) k = (size_t)f[k - 1];
        if (t[i] == t[k]) k++;
        f[i] = (int32_t)k;
    }
    g->trig = t;
    g->trig_len = (int)len;
    g->trig_where = where;
    g->trig_fail = f;
    g->free_mask = fm;
    g->finite = 0; /* free text comes first */
    return SD_OK;
}

/* The trigger's state after byte b from state s (trig_len: complete). */
static int trig_step(const sd_grammar *g, int s, unsigned b) {
    if (s < 0) return s;
    if (g->trig_where == SD_GRAMMAR_TRIGGER_AT_START) {
        if (b == g->trig[s]) return s + 1;
        return s == 0 && (b == ' ' || b == '\t' || b == '\n' || b == '\r') ? 0 : TS_NEVER;
    }
    while (s > 0 && b != g->trig[s]) s = g->trig_fail[s - 1];
    return b == g->trig[s] ? s + 1 : 0;
}

/* Steps b[0..len) from trigger state *s: the index just past the trigger when it completes in them,
 * else 0 with *s the state after them. */
static size_t trig_walk(const sd_grammar *g, int *s, const uint8_t *b, size_t len) {
    int t = *s;
    for (size_t i = 0; i < len && t >= 0; i++)
        if ((t = trig_step(g, t, b[i])) == g->trig_len) return i + 1;
    *s = t;
    return 0;
}

/* The grammar's state after the trigger and then rest[0..n): -1 refused, -2 out of memory. */
static int32_t after_trigger(sd_grammar *g, const uint8_t *rest, size_t n) {
    int32_t s = start_state(g);
    if (s >= 0) s = walk_bytes(g, s, g->trig, (size_t)g->trig_len);
    return s >= 0 ? walk_bytes(g, s, rest, n) : s;
}

static int is_free(const sd_grammar_matcher *m) { return m->at < 0 && m->g->trig; }

static int push_free(sd_grammar_matcher *m, int32_t ts) {
    if (m->n_free + 1 >= m->cap_free) {
        int32_t *q = realloc(m->tstate, (size_t)m->cap_free * 2 * sizeof *q);
        if (!q) return -1;
        m->tstate = q;
        m->cap_free *= 2;
    }
    m->tstate[++m->n_free] = ts;
    return 0;
}

/* One free step of len bytes (a token's or accept_bytes'): free text, or the trigger completing in
 * them, the grammar then taking the rest. */
static sd_status free_step(sd_grammar_matcher *m, const uint8_t *b, size_t len) {
    int ts = m->tstate[m->n_free];
    const size_t past = trig_walk(m->g, &ts, b, len);
    if (!past) return push_free(m, ts) ? sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory") : SD_OK;
    maybe_flush(m->g);
    const int32_t s = after_trigger(m->g, b + past, len - past);
    if (s == -2) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (s < 0) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: the grammar does not allow what follows its trigger here");
    m->n_steps = 0;
    if (push_step(m, s, 0)) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    m->at = m->n_free;
    return SD_OK;
}

/* Whether a token is allowed while the text is free (ts: the trigger's state). */
static int free_allows(sd_grammar_matcher *m, int ts, int32_t id) {
    const sd_grammar_vocab *v = m->v;
    if (ts == TS_ENDED) return 0;
    const size_t len = v->is_eog[id] ? 0 : v->len[id];
    const uint8_t *b = v->bytes + v->off[id];
    const size_t past = trig_walk(m->g, &ts, b, len);
    return !past || after_trigger(m->g, b + past, len - past) >= 0;
}

/* The free text's mask: every token but those completing the trigger into what the grammar refuses. */
static sd_status free_mask(sd_grammar_matcher *m, uint64_t *mask) {
    sd_grammar *g = m->g;
    const sd_grammar_vocab *v = m->v;
    const size_t words = sd_grammar_mask_words(v);
    const int ts = m->tstate[m->n_free];
    if (ts == TS_ENDED) return SD_OK; /* mask already cleared */
    if (ts >= 0 && g->free_mask[ts]) {
        memcpy(mask, g->free_mask[ts], words * sizeof *mask);
        return SD_OK;
    }
    memset(mask, 0xFF, words * sizeof *mask);
    if (v->n % 64) mask[words - 1] = (1ull << (v->n % 64)) - 1;
    if (ts < 0) return SD_OK; /* the trigger can no longer appear */
    maybe_flush(g);
    for (int32_t id = 0; id < v->n; id++)
        if (!free_allows(m, ts, id)) mask[id >> 6] &= ~(1ull << (id & 63));
    if (g->oom) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    uint64_t *c = malloc(words * sizeof *c);
    if (c) g->free_mask[ts] = memcpy(c, mask, words * sizeof *c);
    return SD_OK;
}

int sd_grammar_matcher_n_steps(const sd_grammar_matcher *m) {
    if (!m) return 0;
    return !m->g->trig ? m->n_steps : m->at < 0 ? m->n_free : m->at + m->n_steps;
}

sd_status sd_grammar_matcher_rollback(sd_grammar_matcher *m, int n) {
    const int total = sd_grammar_matcher_n_steps(m);
    if (!m || n < 0 || n > total)
        return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: cannot roll back to %d of %d steps", n, total);
    if (!m->g->trig) {
        m->n_steps = n;
    } else if (m->at >= 0 && n > m->at) {
        m->n_steps = n - m->at;
    } else { /* back into the free text: its states up to `at` were kept */
        m->at = -1;
        m->n_steps = 0;
        m->n_free = n;
    }
    return SD_OK;
}

int sd_grammar_matcher_can_end(const sd_grammar_matcher *m) {
    if (m && is_free(m)) return m->tstate[m->n_free] != TS_ENDED;
    return m && m->flags[m->n_steps] == 1;
}

int sd_grammar_matcher_is_done(const sd_grammar_matcher *m) {
    if (m && is_free(m)) return m->tstate[m->n_free] == TS_ENDED;
    return m && ((m->flags[m->n_steps] & 2) || (m->cnt[m->n_steps] == 0));
}

sd_status sd_grammar_matcher_accept_bytes(sd_grammar_matcher *m, const void *bytes, size_t len) {
    if (!m || (!bytes && len)) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: bad arguments");
    if (is_free(m)) {
        if (m->tstate[m->n_free] == TS_ENDED) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: the generation has ended");
        return free_step(m, bytes, len);
    }
    maybe_flush(m->g);
    int32_t s = cur_state(m);
    if (s == -1) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: the generation has ended");
    if (s >= 0) s = walk_bytes(m->g, s, bytes, len);
    if (s == -2 || (s >= 0 && push_step(m, s, 0))) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (s < 0) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: the grammar does not allow these %zu bytes here", len);
    return SD_OK;
}

sd_status sd_grammar_matcher_accept(sd_grammar_matcher *m, int32_t id) {
    if (!m || !m->v) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: no vocabulary to accept tokens with");
    const sd_grammar_vocab *v = m->v;
    if (id < 0 || id >= v->n) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: token %d out of range", (int)id);
    if (is_free(m)) {
        const int ts = m->tstate[m->n_free];
        if (ts == TS_ENDED) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: token %d after the end of generation", (int)id);
        if (v->is_eog[id] || !v->len[id]) /* free text: anything; control tokens print nothing */
            return push_free(m, v->is_eog[id] ? TS_ENDED : ts) ? sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory") : SD_OK;
        return free_step(m, v->bytes + v->off[id], v->len[id]);
    }
    maybe_flush(m->g);
    int32_t s = cur_state(m);
    if (s == -2) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (s == -1) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: token %d after the end of generation", (int)id);
    if (v->is_eog[id]) {
        if (!m->g->st[s].accept)
            return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: end of generation (token %d) before the grammar is complete",
                           (int)id);
        if (push_step(m, -1, 1)) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
        return SD_OK;
    }
    if (!v->len[id]) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: token %d is never allowed (special or empty)", (int)id);
    int32_t r = walk_bytes(m->g, s, v->bytes + v->off[id], v->len[id]);
    if (r == -2 || (r >= 0 && push_step(m, r, 0))) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (r < 0) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: token %d is not allowed here", (int)id);
    return SD_OK;
}

int sd_grammar_matcher_allows(sd_grammar_matcher *m, int32_t id) {
    if (!m || !m->v || id < 0 || id >= m->v->n) return 0;
    maybe_flush(m->g);
    if (is_free(m)) return free_allows(m, m->tstate[m->n_free], id);
    int32_t s = cur_state(m);
    if (s < 0) return 0;
    if (m->v->is_eog[id]) return m->g->st[s].accept;
    if (!m->v->len[id]) return 0;
    return walk_bytes(m->g, s, m->v->bytes + m->v->off[id], m->v->len[id]) >= 0;
}

/* Token masks by walking the trie through the automaton from state s. mode 0: every token; 1: only
 * tokens of at most GR_SHORT bytes (deeper subtrees skipped); 2: only longer ones (subtrees
 * without one skipped). */
static int walk_trie(sd_grammar_matcher *m, int32_t s, uint64_t *mask, int mode) {
    sd_grammar *g = m->g;
    const sd_grammar_vocab *v = m->v;
    int32_t *stk = m->dstk;
    stk[0] = s;
    const int nn = v->n_nodes;
    for (int i = 0; i < nn;) {
        if (mode == 2 && !v->has_long[i]) {
            i = v->skip[i];
            continue;
        }
        const int d = v->depth[i];
        int32_t cur = stk[d - 1];
        const int32_t *tr = g->st[cur].trans;
        int32_t nx = tr && tr[v->tbyte[i]] != -2 ? tr[v->tbyte[i]] : step(g, cur, v->tbyte[i]);
        if (nx == -2) return -1;
        if (nx < 0) {
            i = v->skip[i];
            continue;
        }
        stk[d] = nx;
        if (mode != 2 || d > GR_SHORT)
            for (int k = v->tok0[i]; k < v->tok0[i + 1]; k++) mask[v->tok[k] >> 6] |= 1ull << (v->tok[k] & 63);
        i = mode == 1 && d == GR_SHORT ? v->skip[i] : i + 1;
    }
    if (g->st[s].accept && mode != 2)
        for (int k = 0; k < v->n_eog; k++) mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    return 0;
}

/* ---- shared masks deep inside bounded repetitions ----
 * A bounded repetition e{m,n} is a chain of rules, R_j ::= e R_{j-1} | "" for the optional copies
 * and M_j ::= e M_{j-1} for the required ones (more than 4), so each count left is another state,
 * and a bounded string would walk the whole vocabulary at every character. But a token of at most
 * GR_SHORT bytes completes at most GR_SHORT non-empty repetitions, and e^j and e^(GR_SHORT+1) hold
 * the same strings of that length once j > GR_SHORT (empty repetitions add nothing), so for such
 * tokens the j-th rule of a chain behaves exactly as its (GR_SHORT + 1)-th. The key of a state maps every stack node in
 * such a rule to the same place in R_{GR_SHORT + 1}; the short tokens' mask is cached on the key,
 * and only the few longer tokens are walked from the state itself. */

/* The element of R_C at the place pos has in its rule R_j, when j > C; else pos. */
static int32_t remap(const sd_grammar *g, int32_t pos) {
    const int C = GR_SHORT + 1;
    int32_t a = g->pos_alt[pos], r = g->alt_rule[a];
    int j = g->rule_chain[r];
    if (j <= C) return pos;
    int32_t r2 = r - (j - C); /* a chain's rules have consecutive indices, R_1 first */
    return g->alt_start[g->rule_alt0[r2] + (a - g->rule_alt0[r])] + (pos - g->alt_start[a]);
}

/* The capped copy of a stack (memoised per node); -3 out of memory. */
static int32_t canon(sd_grammar *g, int32_t id) {
    int n = 0;
    int32_t x = id;
    while (x >= 0 && g->canon_of[x] == -2) {
        if (n == g->cap_path) {
            int cap = g->cap_path ? g->cap_path * 2 : 64;
            int32_t *q = realloc(g->path, (size_t)cap * sizeof *q);
            if (!q) return g->oom = 1, -3;
            g->path = q;
            g->cap_path = cap;
        }
        g->path[n++] = x;
        x = g->nodes[x].parent;
    }
    int32_t cp = x < 0 ? -1 : g->canon_of[x];
    for (int k = n - 1; k >= 0; k--) {
        int32_t y = g->path[k];
        int32_t pos = g->nodes[y].pos, p2 = remap(g, pos);
        int32_t c = p2 == pos && cp == g->nodes[y].parent ? y : intern(g, p2, cp);
        if (c < 0) return -3;
        g->canon_of[y] = c;
        g->canon_of[c] = c; /* capped already */
        cp = c;
    }
    return cp;
}

/* The key state of s (s itself when nothing is capped); -2 out of memory. */
static int32_t canon_state(sd_grammar *g, int32_t s) {
    if (!g->n_chain_rules) return s;
    int n = g->st[s].n;
    if (n > g->cap_out) {
        int32_t *q = realloc(g->out, (size_t)n * sizeof *q);
        if (!q) return g->oom = 1, -2;
        g->out = q;
        g->cap_out = n;
    }
    int changed = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = g->spool[g->st[s].off + i];
        int32_t c = canon(g, id);
        if (c < 0) return -2;
        g->out[i] = c;
        changed |= c != id;
    }
    if (!changed) return s;
    if (n > 1) qsort(g->out, (size_t)n, sizeof *g->out, cmp_i32);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!k || g->out[i] != g->out[k - 1]) g->out[k++] = g->out[i];
    int32_t key = state_intern(g, g->out, k, g->st[s].accept);
    return key < 0 ? -2 : key;
}

sd_status sd_grammar_matcher_mask(sd_grammar_matcher *m, uint64_t *mask) {
    if (!m || !m->v || !mask) return sd_fail(SD_ERR_INVALID_ARG, "grammar matcher: mask needs a vocabulary and a buffer");
    sd_grammar *g = m->g;
    size_t words = sd_grammar_mask_words(m->v);
    memset(mask, 0, words * sizeof *mask);
    if (is_free(m)) return free_mask(m, mask);
    maybe_flush(g);
    int32_t s = cur_state(m);
    if (s == -2) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (s == -1) return SD_OK; /* ended: nothing */
    if (g->st[s].mask) {
        memcpy(mask, g->st[s].mask, words * sizeof *mask);
        return SD_OK;
    }
    int32_t key = canon_state(g, s);
    if (key == -2) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    if (key == s) {
        if (walk_trie(m, s, mask, 0)) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    } else {
        if (!g->st[key].smask) {
            uint64_t *sm = calloc(words, sizeof *sm);
            if (!sm || walk_trie(m, key, sm, 1)) {
                free(sm);
                return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
            }
            g->st[key].smask = sm; /* st may have moved during the walk: index again */
            g->cache_bytes += words * sizeof *sm;
        }
        memcpy(mask, g->st[key].smask, words * sizeof *mask);
        if (walk_trie(m, s, mask, 2)) return sd_fail(SD_ERR_NOMEM, "grammar matcher: out of memory");
    }
    uint64_t *c = malloc(words * sizeof *c);
    if (c) {
        memcpy(c, mask, words * sizeof *c);
        g->st[s].mask = c;
        g->cache_bytes += words * sizeof *c;
    }
    return SD_OK;
}

/* The bytes state s allows next: the union of its stacks' terminal sets. */
static gr_bset state_bytes(const sd_grammar *g, int32_t s) {
    gr_bset u = {{0}};
    for (int i = 0; i < g->st[s].n; i++) {
        const gr_bset *b = &g->sets[g->el[g->nodes[g->spool[g->st[s].off + i]].pos].v];
        for (int w = 0; w < 4; w++) u.w[w] |= b->w[w];
    }
    return u;
}

/* The depth of a state's shallowest stack (rules still open). */
static int state_depth(const sd_grammar *g, int32_t s) {
    int best = -1;
    for (int i = 0; i < g->st[s].n; i++) {
        int d = 0;
        for (int32_t id = g->spool[g->st[s].off + i]; id >= 0; id = g->nodes[id].parent) d++;
        if (best < 0 || d < best) best = d;
    }
    return best;
}

/* Breadth-first over the automaton's states from s0, each state entered once (by its first, so
 * shortest, path), a state's bytes in increasing order, at most GR_CLOSE_VISITS states: the path
 * to the first state that accepts or (d0 >= 0) whose shallowest stack is shallower than d0. Writes
 * its bytes to buf (when not NULL) and its end to *end; returns its length, -1 when none is found
 * within cap bytes or the bound, -2 out of memory. States are not flushed during the search (only
 * the matcher's entry points flush), so their ids stay valid. */
enum { GR_CLOSE_VISITS = 1 << 14 };
static long close_search(sd_grammar *g, int32_t s0, int d0, uint8_t *buf, size_t cap, int32_t *end) {
    typedef struct {
        int32_t state, parent;
        uint8_t byte;
        uint32_t depth;
    } visit;
    visit *q = malloc(GR_CLOSE_VISITS * sizeof *q);
    uint8_t *seen = NULL; /* seen[state]: queued */
    size_t n_seen = 0;
    long found = -1;
    int head = 0, tail = 0;
    if (!q) return -2;
    q[tail++] = (visit){s0, -1, 0, 0};
    while (head < tail && found == -1) {
        const visit v = q[head];
        const int at = head++;
        if (v.depth >= cap) continue;
        const gr_bset u = state_bytes(g, v.state);
        for (unsigned byte = 0; byte < 256 && found == -1; byte++) {
            if (!((u.w[byte >> 6] >> (byte & 63)) & 1)) continue;
            const int32_t nx = step(g, v.state, byte);
            if (nx == -1) continue;
            if (nx < 0) {
                found = -2;
                break;
            }
            if ((size_t)nx >= n_seen) {
                size_t n = n_seen ? n_seen : 256;
                while (n <= (size_t)nx) n *= 2;
                uint8_t *t = realloc(seen, n);
                if (!t) {
                    found = -2;
                    break;
                }
                memset(t + n_seen, 0, n - n_seen);
                seen = t;
                n_seen = n;
            }
            if (seen[nx]) continue;
            seen[nx] = 1;
            if (tail == GR_CLOSE_VISITS) {
                head = tail; /* the bound: give up */
                break;
            }
            q[tail] = (visit){nx, at, (uint8_t)byte, v.depth + 1};
            if (g->st[nx].accept || (d0 >= 0 && state_depth(g, nx) < d0)) {
                found = (long)q[tail].depth;
                *end = nx;
                for (int k = tail; buf && k > 0; k = q[k].parent) buf[q[k].depth - 1] = q[k].byte;
            }
            tail++;
        }
    }
    free(seen);
    free(q);
    return found;
}

/* The shortest completion when the search finds one within its bound; else one by stages, each
 * the shortest way to a shallower stack (closing a string, a number, an array...), which keeps
 * every search small where the shortest one is not (inside deep nesting, every way to open
 * another value and every whitespace count is a state of its own). */
long sd_grammar_matcher_completion(sd_grammar_matcher *m, void *buf, size_t cap) {
    if (!m || is_free(m)) return -1;
    sd_grammar *g = m->g;
    maybe_flush(g);
    int32_t s = cur_state(m);
    if (s < 0) return -1;
    if (g->st[s].accept) return 0;
    uint8_t *o = buf;
    int32_t end = -1;
    long n = close_search(g, s, -1, o, cap, &end);
    if (n != -1) return n < 0 ? -1 : n;
    size_t total = 0;
    while (!g->st[s].accept) {
        n = close_search(g, s, state_depth(g, s), o ? o + total : NULL, cap - total, &end);
        if (n < 0) return -1;
        total += (size_t)n;
        s = end;
    }
    return (long)total;
}

size_t sd_grammar_matcher_forced_bytes(sd_grammar_matcher *m, void *buf, size_t cap) {
    if (!m || is_free(m)) return 0; /* free text forces nothing */
    sd_grammar *g = m->g;
    maybe_flush(g);
    int32_t s = cur_state(m);
    size_t n = 0;
    uint8_t *o = buf;
    while (s >= 0 && !g->st[s].accept && n < cap) {
        const gr_bset u = state_bytes(g, s);
        int cnt = 0, byte = 0;
        for (int w = 0; w < 4; w++) {
            cnt += __builtin_popcountll(u.w[w]);
            if (u.w[w]) byte = w * 64 + __builtin_ctzll(u.w[w]);
        }
        if (cnt != 1) break;
        int32_t nx = step(g, s, (unsigned)byte);
        if (nx < 0) break; /* only when out of memory: a byte in the union always steps */
        if (o) o[n] = (uint8_t)byte;
        n++;
        s = nx;
    }
    return n;
}

int32_t sd_grammar_matcher_forced_token(sd_grammar_matcher *m) {
    if (!m || !m->v || is_free(m)) return -1;
    size_t words = sd_grammar_mask_words(m->v);
    uint64_t *mask = malloc(words * sizeof *mask);
    if (!mask || sd_grammar_matcher_mask(m, mask) != SD_OK) {
        free(mask);
        return -1;
    }
    int32_t found = -1;
    long count = 0;
    for (size_t w = 0; w < words && count < 2; w++)
        if (mask[w]) {
            count += __builtin_popcountll(mask[w]);
            found = (int32_t)(w * 64 + (size_t)__builtin_ctzll(mask[w]));
        }
    free(mask);
    return count == 1 ? found : -1;
}

void sd_grammar_mask_logits(const uint64_t *mask, float *logits, int n, float value) {
    for (int t = 0; t < n; t++)
        if (!((mask[t >> 6] >> (t & 63)) & 1)) logits[t] = value;
}
