/* BPE by merge ranks, for GGUF "gpt2" vocabularies and HF tokenizer.json "BPE" models:
 * user-defined tokens split out first, then pre-tokenizer splits, merges, byte-level decoding. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- Unicode classes ------------------------------------------------------------------ */

/* Per code point: general category class, White_Space, and "is a code point of this piece"
 * (F_DEF), which llama.cpp's splitters test as flags != 0 on positions past the end. */
enum { F_L = 1, F_N = 2, F_P = 4, F_WS = 8, F_DEF = 16 };

/* Invalid UTF-8 bytes become one pseudo code point each, above the Unicode range, of no
 * class: a piece of text never fails to split, and every byte is kept. */
#define CP_INVALID_BASE 0x110000u

/* The Unicode White_Space property, which is what llama.cpp's \s means (C's isspace misses
 * U+0085 and U+00A0 and beyond; Python's str.isspace adds U+001C..U+001F). */
static int is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int unicode_class(uint32_t cp) {
    if (cp < 0x80) { /* ASCII is most text: answer without the table */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return 1;
        if (cp >= '0' && cp <= '9') return 2;
        return cp > 0x20 && cp < 0x7F && strchr("!\"#%&'()*,-./:;?@[\\]_{}", (int)cp) ? 3 : 0;
    }
    if (cp >= 0x110000) return 0;
    int lo = 0, hi = sd_unicode_class_n - 1; /* the last range starting at or before cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((sd_unicode_class_ranges[mid] >> 2) <= cp) lo = mid;
        else hi = mid - 1;
    }
    return (int)(sd_unicode_class_ranges[lo] & 3);
}

static uint8_t cp_flags(uint32_t cp) {
    static const uint8_t by_class[4] = {0, F_L, F_N, F_P};
    uint8_t f = (uint8_t)(F_DEF | by_class[unicode_class(cp)]);
    if (is_white_space(cp)) f |= F_WS;
    return f;
}

/* Decodes one character of p[0..n): a lead byte with its continuation bytes, else the lone
 * byte as a pseudo code point. Like llama.cpp, overlong forms are not rejected. */
static size_t utf8_next(const unsigned char *p, size_t n, uint32_t *cp) {
    unsigned c = p[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n) goto invalid;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) goto invalid;
    if (len == 1) *cp = c;
    else if (len == 2) *cp = (c & 0x1Fu) << 6 | (p[1] & 0x3Fu);
    else if (len == 3) *cp = (c & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu);
    else *cp = (c & 0x07u) << 18 | (p[1] & 0x3Fu) << 12 | (p[2] & 0x3Fu) << 6 | (p[3] & 0x3Fu);
    return len;
invalid:
    *cp = CP_INVALID_BASE + c;
    return 1;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the character at p as SentencePiece-style BPE splits it (the rule of spm.c):
 * the lead byte's length if the continuation bytes are there, else the byte alone. */
static size_t char_len(const unsigned char *p, size_t n) {
    static const uint8_t by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t len = by_nibble[p[0] >> 4];
    if (len > n) return 1;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 1;
    return len;
}

/* ---- GPT-2 byte-to-unicode ------------------------------------------------------------ */

/* GPT-2 gives each byte a printable stand-in: bytes that are printable Latin-1 stand for
 * themselves; the other 68 (0x00-0x20, 0x7F-0xA0, 0xAD) take U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; /* 0xAD */
}

static int cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_to_cp(cp) == cp ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

/* ---- merge table ---------------------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static uint32_t key_hash(uint64_t k) { /* the 64-bit finaliser of MurmurHash3 */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

#define BPE_MAX_MERGES ((size_t)1 << 26)

sd_status sd_bpe_merges_alloc(sd_tokenizer *t, size_t n, const char *what) {
    if (n > BPE_MAX_MERGES)
        return sd_fail(SD_ERR_FORMAT, "%s: %zu merges is too many (at most %zu)", what, n, BPE_MAX_MERGES);
    uint32_t cap = 16;
    while (cap < 2 * n) cap <<= 1; /* at most half full */
    free(t->merges);
    t->merges = malloc((size_t)cap * sizeof *t->merges);
    if (!t->merges) return sd_fail(SD_ERR_NOMEM, "%s: out of memory for %zu merges", what, n);
    for (uint32_t i = 0; i < cap; i++) t->merges[i].rank = -1;
    t->merge_mask = cap - 1;
    t->n_merges = 0;
    return SD_OK;
}

const struct sd_bpe_merge *sd_bpe_find_merge(const sd_tokenizer *t, int32_t a, int32_t b) {
    if (a < 0 || b < 0 || !t->merges) return NULL;
    uint64_t k = pair_key(a, b);
    for (uint32_t i = key_hash(k) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const struct sd_bpe_merge *e = &t->merges[i];
        if (e->rank < 0) return NULL;
        if (e->key == k) return e;
    }
}

int sd_bpe_merge_add(sd_tokenizer *t, const char *a, size_t na, const char *b, size_t nb) {
    int32_t ia = sd_tok_lookup(t, a, na), ib = sd_tok_lookup(t, b, nb);
    if (ia < 0 || ib < 0 || na + nb > (size_t)t->max_piece_len) return 0;
    if ((size_t)t->n_merges * 2 >= (size_t)t->merge_mask + 1) return 0; /* beyond the reservation */
    char small[256];
    char *cat = na + nb <= sizeof small ? small : malloc(na + nb);
    if (!cat) return 0;
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    int32_t id = sd_tok_lookup(t, cat, na + nb);
    if (cat != small) free(cat);
    if (id < 0) return 0;
    int32_t rank = t->n_merges++; /* only relative order matters, so skipped ones need no rank */
    uint64_t k = pair_key(ia, ib);
    for (uint32_t i = key_hash(k) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        struct sd_bpe_merge *e = &t->merges[i];
        if (e->rank >= 0 && e->key == k) return 0; /* repeated pair: the first rank stands */
        if (e->rank < 0) {
            e->key = k;
            e->rank = rank;
            e->id = id;
            return 1;
        }
    }
}

/* ---- pre-tokenizer names and patterns -------------------------------------------------- */

typedef struct {
    const char *names; /* '|'-separated GGUF tokenizer.ggml.pre values */
    uint8_t steps[5];
    int n_steps, ignore_merges, add_bos;
} pre_family;

/* The families of llama.cpp's llm_tokenizer_bpe with their regex lists, as split steps. */
static const pre_family k_families[] = {
    {"default", {SD_PRE_PUNCT_SYM, SD_PRE_GPT2, SD_PRE_DIGITS, SD_PRE_DIGITS3}, 4, 0, 0},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|"
     "roberta-bpe|mpt|olmo|jais",
     {SD_PRE_GPT2}, 1, 0, 0},
    {"llama3|llama-v3|llama-bpe|falcon3", {SD_PRE_LLAMA3}, 1, 1, 1},
    {"dbrx|smaug-bpe", {SD_PRE_LLAMA3}, 1, 0, 0},
    {"qwen2|stablelm2|megrez", {SD_PRE_QWEN2}, 1, 0, 0},
    {"deepseek-coder", {SD_PRE_CRLF, SD_PRE_WS_LETTERS, SD_PRE_WS_PUNCT, SD_PRE_CJK, SD_PRE_DIGIT}, 5, 0, 0},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {SD_PRE_DIGIT, SD_PRE_GPT2}, 2, 0, 0},
};

static int name_in(const char *names, const char *s, size_t n) {
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && memcmp(p, s, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

sd_status sd_bpe_set_pre_name(sd_tokenizer *t, const char *name, size_t len, const char *what,
                              int *add_bos_default) {
    if (!name) { /* llama.cpp warns and falls back to "default" as well */
        name = "default";
        len = strlen(name);
    }
    for (size_t f = 0; f < sizeof k_families / sizeof k_families[0]; f++) {
        const pre_family *pf = &k_families[f];
        if (!name_in(pf->names, name, len)) continue;
        memcpy(t->pre, pf->steps, (size_t)pf->n_steps);
        t->n_pre = pf->n_steps;
        t->ignore_merges = pf->ignore_merges;
        if (add_bos_default) *add_bos_default = pf->add_bos;
        return SD_OK;
    }
    char q[96];
    return sd_fail(SD_ERR_UNSUPPORTED,
                   "%s: tokenizer.ggml.pre is %s, a pre-tokenizer specdec does not implement "
                   "(supported: default, gpt-2, llama-bpe/llama3, qwen2, deepseek-coder, starcoder "
                   "and their aliases)",
                   what, sd_tok_quote(name, len, q, sizeof q));
}

const char *sd_bpe_pre_name(const sd_tokenizer *t, char name[32]) {
    for (size_t f = 0; f < sizeof k_families / sizeof k_families[0]; f++) {
        const pre_family *pf = &k_families[f];
        if (pf->n_steps != t->n_pre || pf->ignore_merges != t->ignore_merges ||
            memcmp(pf->steps, t->pre, (size_t)pf->n_steps) != 0)
            continue;
        size_t l = strcspn(pf->names, "|"); /* the family's first name */
        if (l > 31) l = 31;
        memcpy(name, pf->names, l);
        name[l] = 0;
        return name;
    }
    return NULL;
}

/* HF Split patterns, exactly as tokenizer.json spells them, mapped to the same steps. */
static const struct {
    const char *re;
    uint8_t step;
} k_patterns[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", SD_PRE_GPT2},
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", SD_PRE_GPT2},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRE_LLAMA3},
    {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRE_LLAMA3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     SD_PRE_QWEN2},
    {"[\r\n]", SD_PRE_CRLF},
    {"[\\r\\n]", SD_PRE_CRLF},
    {"\\s?\\p{L}+", SD_PRE_WS_LETTERS},
    {"\\s?\\p{P}+", SD_PRE_WS_PUNCT},
    {"[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", SD_PRE_CJK},
    {"\\p{N}", SD_PRE_DIGIT},
    {"\\p{N}+", SD_PRE_DIGITS},
    {"[0-9][0-9][0-9]", SD_PRE_DIGITS3},
    {"[\\p{P}\\$\\+<=>\\^~\\|]+", SD_PRE_PUNCT_SYM},
};

int sd_bpe_pre_from_regex(sd_tokenizer *t, const char *re) {
    if (t->n_pre >= (int)sizeof t->pre) return -1;
    for (size_t i = 0; i < sizeof k_patterns / sizeof k_patterns[0]; i++) {
        if (strcmp(k_patterns[i].re, re) == 0) {
            t->pre[t->n_pre++] = k_patterns[i].step;
            return 0;
        }
    }
    return -1;
}

/* ---- finishing a vocabulary ------------------------------------------------------------ */

sd_status sd_bpe_finish(sd_tokenizer *t, const char *what) {
    t->kind = SD_TOKENIZER_BPE;
    for (unsigned b = 0; b < 256; b++) {
        char s[4];
        size_t n = utf8_put(byte_to_cp(b), s);
        t->bl_tok[b] = sd_tok_lookup(t, s, n);
    }
    return SD_OK;
}

/* ---- encoding -------------------------------------------------------------------------- */

typedef struct {
    int32_t prev, next; /* neighbours among live symbols, -1 at the ends */
    int32_t id;         /* token id; -1 for a character the vocabulary lacks */
    int32_t live;       /* 0 once merged into its left neighbour */
} bpe_sym;

/* A queued merge: key = rank << 32 | left, so the smallest key is the lowest rank and, on
 * ties, the leftmost pair (llama.cpp's and HF's order). The pair is stale unless both
 * symbols are still live with the ids they had when it was queued. */
typedef struct {
    uint64_t key;
    int32_t right, id_l, id_r, id_new;
} bpe_pair;

typedef struct {
    const sd_tokenizer *t;
    sd_tok_sink *sink;
    char *norm; /* normalised piece of text */
    size_t norm_cap;
    uint32_t *cps, *cpo; /* code points of norm and their byte offsets (one more: the end) */
    uint8_t *fl;
    size_t cps_cap, cpo_cap, fl_cap;
    uint32_t *seg, *seg2; /* piece boundaries as (start, end) code point pairs */
    size_t seg_cap, seg2_cap;
    bpe_sym *sym;
    size_t sym_cap;
    bpe_pair *heap;
    size_t n_heap, heap_cap;
    sd_mq *mq;  /* words of SD_MQ_MIN symbols or more */
    char *word; /* a byte-level word in stand-in characters (ignore_merges lookups) */
    size_t word_cap;
    void (*word_cb)(const char *w, size_t n, void *u); /* sd_bpe_pretokenize: words go here */
    void *word_u;
} bpe_state;

/* p with room for need elements (doubling), or NULL with p left as it was. */
static void *grow_to(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(p, n * elem);
    if (q) *cap = n;
    return q;
}

/* Grows ptr to need elements, or runs the statement on_fail. */
#define GROW_OR(ptr, cap, need, on_fail)                                  \
    do {                                                                  \
        void *q_ = grow_to((ptr), &(cap), (need), sizeof *(ptr));         \
        if (!q_) on_fail;                                                 \
        (ptr) = q_;                                                       \
    } while (0)

static void heap_push(bpe_state *s, bpe_pair b) {
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (s->heap[parent].key <= b.key) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static bpe_pair heap_pop(bpe_state *s) {
    bpe_pair top = s->heap[0];
    bpe_pair last = s->heap[--s->n_heap];
    size_t n = s->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        c += c + 1 < n && s->heap[c + 1].key < s->heap[c].key;
        if (s->heap[c].key >= last.key) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void try_pair(bpe_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    int32_t a = s->sym[left].id, b = s->sym[right].id;
    const struct sd_bpe_merge *m = sd_bpe_find_merge(s->t, a, b);
    if (!m) return;
    bpe_pair p = {(uint64_t)(uint32_t)m->rank << 32 | (uint32_t)left, right, a, b, m->id};
    heap_push(s, p);
}

static void merge_at(bpe_state *s, int32_t left, int32_t right, int32_t id) {
    bpe_sym *l = &s->sym[left], *r = &s->sym[right];
    l->id = id;
    r->live = 0;
    l->next = r->next;
    if (r->next >= 0) s->sym[r->next].prev = left;
}

/* The pair (left, right) into the merge queue when it merges; its rank is the priority. */
static int mq_try(bpe_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const struct sd_bpe_merge *m = sd_bpe_find_merge(s->t, s->sym[left].id, s->sym[right].id);
    return m ? sd_mq_push(s->mq, (uint32_t)m->rank, left, 0) : 0;
}

/* merge_and_emit's merges for a long word: the same order, by the merge queue. A queued pair
 * still stands when its left symbol lives and it and its right neighbour still make the merge
 * of that rank (a rank is one pair). */
static sd_status merge_long(bpe_state *s, int32_t n) {
    if (!s->mq && !(s->mq = sd_mq_create())) goto nomem;
    sd_mq_reset(s->mq);
    for (int32_t i = 1; i < n; i++)
        if (mq_try(s, i - 1, i) != 0) goto nomem;
    uint32_t rank;
    sd_mq_entry e;
    int rc;
    while ((rc = sd_mq_pop(s->mq, &rank, &e)) == 1) {
        const int32_t ahead = sd_mq_ahead(s->mq, 8); /* a sweep jumps across the word */
        if (ahead >= 0) __builtin_prefetch(&s->sym[ahead]);
        const int32_t left = e.pos, right = s->sym[left].next;
        if (!s->sym[left].live || right < 0) continue;
        const struct sd_bpe_merge *m = sd_bpe_find_merge(s->t, s->sym[left].id, s->sym[right].id);
        if (!m || (uint32_t)m->rank != rank) continue; /* stale */
        merge_at(s, left, right, m->id);
        if (mq_try(s, s->sym[left].prev, left) != 0 || mq_try(s, left, s->sym[left].next) != 0) goto nomem;
    }
    if (rc == 0) return SD_OK;
nomem:
    return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for a word of %d symbols", (int)n);
}

/* Merges the n symbols in s->sym (already linked) and emits what is left. */
static sd_status merge_and_emit(bpe_state *s, int32_t n) {
    if (n <= 0) return SD_OK;
    if (n >= SD_MQ_MIN) {
        sd_status st = merge_long(s, n);
        if (st != SD_OK) return st;
    } else {
        s->n_heap = 0;
        for (int32_t i = 1; i < n; i++) try_pair(s, i - 1, i);
        while (s->n_heap) {
            bpe_pair p = heap_pop(s);
            int32_t left = (int32_t)(uint32_t)p.key;
            bpe_sym *l = &s->sym[left], *r = &s->sym[p.right];
            if (!l->live || !r->live || l->id != p.id_l || r->id != p.id_r) continue; /* stale */
            merge_at(s, left, p.right, p.id_new);
            try_pair(s, l->prev, left);
            try_pair(s, left, l->next);
        }
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        int32_t id = s->sym[i].id;
        if (id < 0) id = s->t->unk; /* a byte-level vocabulary without that byte's character */
        if (id >= 0) sd_tok_emit(s->sink, id); /* none: dropped, as llama.cpp does */
    }
    return SD_OK;
}

static sd_status encode_word(bpe_state *s, const char *w, size_t n) {
    const sd_tokenizer *t = s->t;
    const unsigned char *u = (const unsigned char *)w;
    if (n == 0) return SD_OK;
    /* Each merge queues at most two pairs on top of the n - 1 initial ones. */
    GROW_OR(s->sym, s->sym_cap, n, goto nomem);
    GROW_OR(s->heap, s->heap_cap, 3 * (n < SD_MQ_MIN ? n : SD_MQ_MIN), goto nomem); /* long words: the merge queue */
    int32_t ns = 0;
    if (t->byte_level) {
        if (t->ignore_merges) {
            GROW_OR(s->word, s->word_cap, 2 * n, goto nomem);
            size_t o = 0;
            for (size_t i = 0; i < n; i++) o += utf8_put(byte_to_cp(u[i]), s->word + o);
            int32_t id = sd_tok_lookup(t, s->word, o);
            if (id >= 0) {
                sd_tok_emit(s->sink, id);
                return SD_OK;
            }
        }
        for (size_t i = 0; i < n; i++) s->sym[ns++].id = t->bl_tok[u[i]];
    } else {
        if (t->ignore_merges) {
            int32_t id = sd_tok_lookup(t, w, n);
            if (id >= 0) {
                sd_tok_emit(s->sink, id);
                return SD_OK;
            }
        }
        int prev_unk = 0;
        for (size_t i = 0; i < n;) {
            size_t cl = char_len(u + i, n - i);
            int32_t id = sd_tok_lookup(t, w + i, cl);
            int fallback = id < 0 && t->byte_fallback;
            for (size_t k = 0; fallback && k < cl; k++) fallback = t->byte_tok[u[i + k]] >= 0;
            if (id >= 0) {
                s->sym[ns++].id = id;
                prev_unk = 0;
            } else if (fallback) { /* HF: a character outside the vocabulary as <0xXX> bytes */
                for (size_t k = 0; k < cl; k++) s->sym[ns++].id = t->byte_tok[u[i + k]];
                prev_unk = 0;
            } else if (t->unk >= 0) {
                if (!(prev_unk && t->fuse_unk)) s->sym[ns++].id = t->unk;
                prev_unk = 1;
            } else {
                char q[32];
                return sd_fail(SD_ERR_UNSUPPORTED,
                               "tokenizer encode: character %s has no token and the vocabulary has "
                               "no byte fallback or unknown token",
                               sd_tok_quote(w + i, cl, q, sizeof q));
            }
            i += cl;
        }
    }
    for (int32_t i = 0; i < ns; i++) {
        s->sym[i].prev = i - 1;
        s->sym[i].next = i + 1 < ns ? i + 1 : -1;
        s->sym[i].live = 1;
    }
    return merge_and_emit(s, ns);
nomem:
    return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for a word of %zu bytes", n);
}

/* ---- pre-tokenizer splits -------------------------------------------------------------- */

typedef struct {
    const uint32_t *cp;
    const uint8_t *fl;
    size_t end; /* end of the piece being split: positions past it have no flags */
} span;

static uint8_t F(const span *x, size_t i) { return i < x->end ? x->fl[i] : 0; }
static uint32_t C(const span *x, size_t i) { return i < x->end ? x->cp[i] : 0xFFFFFFFFu; }

static size_t run(const span *x, size_t i, uint8_t mask) {
    size_t j = i;
    while (j < x->end && (x->fl[j] & mask)) j++;
    return j - i;
}

/* run, stopping at most characters: a match of a few characters inside a long run must not scan
 * the rest of it, which made a run of n digits cost n^2 / 2 steps */
static size_t run_upto(const span *x, size_t i, uint8_t mask, size_t most) {
    size_t j = i;
    while (j < x->end && j - i < most && (x->fl[j] & mask)) j++;
    return j - i;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's 't 're 've 'm 'll 'd, case-insensitively for llama3 (no code point outside ASCII
 * lowercases to one of these letters, so ASCII folding is Unicode folding here). */
static size_t contraction(const span *x, size_t i, int any_case) {
    if (C(x, i) != '\'' || i + 1 >= x->end) return 0;
    uint32_t a = C(x, i + 1), b = C(x, i + 2);
    if (any_case) {
        a = ascii_lower(a);
        b = ascii_lower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < x->end && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')))
        return 3;
    return 0;
}

/* Whitespace alternatives shared by gpt2 and llama3: \s+(?!\S) then \s+. */
static size_t spaces(const span *x, size_t i) {
    size_t n = run(x, i, F_WS);
    if (n > 1 && i + n < x->end) return n - 1; /* leave the last one to prefix the next word */
    return n ? n : 1;                           /* no alternative matched: one character */
}

/* llama.cpp's unicode_regex_split_custom_gpt2, as a match at i. */
static size_t match_gpt2(const span *x, size_t i) {
    size_t k = contraction(x, i, 0);
    if (k) return k;
    uint32_t c = C(x, i);
    size_t sp = c == ' ';
    uint8_t f2 = F(x, i + sp);
    if (f2 & F_L) return sp + run(x, i + sp, F_L);
    if (f2 & F_N) return sp + run(x, i + sp, F_N);
    if ((f2 & F_DEF) && !(f2 & (F_WS | F_L | F_N))) {
        size_t j = i + sp;
        while (j < x->end && !(x->fl[j] & (F_WS | F_L | F_N))) j++;
        return j - i;
    }
    return spaces(x, i);
}

/* llama.cpp's unicode_regex_split_custom_llama3 (max_digits 3); qwen2's pattern is the same
 * with single digits, and these splitters agree with std::regex on it. */
static size_t match_llama3(const span *x, size_t i, size_t max_digits) {
    size_t k = contraction(x, i, 1);
    if (k) return k;
    uint32_t c = C(x, i);
    uint8_t f = F(x, i);
    if (!(c == '\r' || c == '\n' || (f & F_N)) && ((f & F_L) || (F(x, i + 1) & F_L)))
        return 1 + run(x, i + 1, F_L); /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (f & F_N) return run_upto(x, i, F_N, max_digits);
    size_t sp = c == ' ';
    uint8_t f2 = F(x, i + sp);
    if (!(f2 & (F_WS | F_L | F_N)) && (f & F_DEF)) { /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
        size_t j = i + sp;
        while (j < x->end && (x->fl[j] & F_DEF) && !(x->fl[j] & (F_WS | F_L | F_N))) j++;
        while (j < x->end && (x->cp[j] == '\r' || x->cp[j] == '\n')) j++;
        return j - i;
    }
    size_t n = 0, last_nl = 0; /* \s*[\r\n]+ : through the last newline of the run */
    for (; i + n < x->end && (x->fl[i + n] & F_WS); n++)
        if (x->cp[i + n] == '\r' || x->cp[i + n] == '\n') last_nl = n + 1;
    if (last_nl) return last_nl;
    return spaces(x, i);
}

static int is_cjk(uint32_t c) { return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF); }

static int is_punct_sym(const span *x, size_t i) {
    uint32_t c = C(x, i);
    return (F(x, i) & F_P) || (c < 0x80 && c && strchr("$+<=>^~|", (int)c));
}

/* Length of the step's match starting at i (0: none here). */
static size_t match_step(int step, const span *x, size_t i) {
    uint8_t f = F(x, i);
    uint32_t c = C(x, i);
    size_t n;
    switch (step) {
    case SD_PRE_GPT2: return match_gpt2(x, i);
    case SD_PRE_LLAMA3: return match_llama3(x, i, 3);
    case SD_PRE_QWEN2: return match_llama3(x, i, 1);
    case SD_PRE_CRLF: return c == '\r' || c == '\n';
    case SD_PRE_WS_LETTERS:
    case SD_PRE_WS_PUNCT: {
        uint8_t cls = step == SD_PRE_WS_LETTERS ? F_L : F_P;
        if ((f & F_WS) && (F(x, i + 1) & cls)) return 1 + run(x, i + 1, cls);
        return run(x, i, cls);
    }
    case SD_PRE_CJK:
        n = 0;
        while (i + n < x->end && is_cjk(x->cp[i + n])) n++;
        return n;
    case SD_PRE_DIGIT: return (f & F_N) ? 1 : 0;
    case SD_PRE_DIGITS: return run(x, i, F_N);
    case SD_PRE_DIGITS3:
        for (n = 0; n < 3; n++)
            if (C(x, i + n) < '0' || C(x, i + n) > '9') return 0;
        return 3;
    case SD_PRE_PUNCT_SYM:
        n = 0;
        while (i + n < x->end && is_punct_sym(x, i + n)) n++;
        return n;
    case SD_PRE_METASPACE:
        if (c != 0x2581) return 0;
        for (n = 1; i + n < x->end && x->cp[i + n] != 0x2581;) n++;
        return n;
    default: return 0;
    }
}

/* Encodes one piece of text between user-defined tokens (first: it starts the text):
 * normalise, split, merge. */
static sd_status encode_text(bpe_state *s, const char *text, size_t len, int first) {
    const sd_tokenizer *t = s->t;
    static const char esc[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */
    /* Normalise: HF Prepend/Replace ("▁") for SentencePiece-style BPE, or ByteLevel's
     * add_prefix_space. */
    size_t need = len + 3;
    if (!t->byte_level && t->escape_spaces)
        for (size_t i = 0; i < len; i++) need += text[i] == ' ' ? 2 : 0;
    size_t n = 0;
    GROW_OR(s->norm, s->norm_cap, need, goto nomem);
    if (t->byte_level) {
        if (t->bl_prefix && text[0] != ' ') s->norm[n++] = ' ';
        memcpy(s->norm + n, text, len);
        n += len;
    } else {
        int prefix = t->add_space_prefix && (first || !t->prefix_first);
        if (prefix && t->prefix_missing && (text[0] == ' ' || (len >= 3 && memcmp(text, esc, 3) == 0)))
            prefix = 0; /* Metaspace: " Hello" is "▁Hello", not "▁▁Hello" */
        if (prefix) {
            memcpy(s->norm, esc, 3);
            n = 3;
        }
        for (size_t i = 0; i < len; i++) {
            if (text[i] == ' ' && t->escape_spaces) {
                memcpy(s->norm + n, esc, 3);
                n += 3;
            } else {
                s->norm[n++] = text[i];
            }
        }
    }
    if (t->n_pre == 0) { /* the whole text is one word */
        if (s->word_cb) {
            s->word_cb(s->norm, n, s->word_u);
            return SD_OK;
        }
        return encode_word(s, s->norm, n);
    }

    GROW_OR(s->cps, s->cps_cap, n + 1, goto nomem);
    GROW_OR(s->cpo, s->cpo_cap, n + 1, goto nomem);
    GROW_OR(s->fl, s->fl_cap, n + 1, goto nomem);
    GROW_OR(s->seg, s->seg_cap, 2 * (n + 1), goto nomem);
    GROW_OR(s->seg2, s->seg2_cap, 2 * (n + 1), goto nomem);

    size_t ncp = 0;
    const unsigned char *u = (const unsigned char *)s->norm;
    for (size_t i = 0; i < n; ncp++) {
        s->cpo[ncp] = (uint32_t)i;
        i += utf8_next(u + i, n - i, &s->cps[ncp]);
        s->fl[ncp] = cp_flags(s->cps[ncp]);
    }
    s->cpo[ncp] = (uint32_t)n;

    size_t nseg = 1;
    s->seg[0] = 0;
    s->seg[1] = (uint32_t)ncp;
    for (int k = 0; k < t->n_pre; k++) {
        size_t m = 0;
        for (size_t g = 0; g < nseg; g++) {
            span x = {s->cps, s->fl, s->seg[2 * g + 1]};
            size_t gap = s->seg[2 * g];
            for (size_t i = gap; i < x.end;) {
                size_t l = match_step(t->pre[k], &x, i);
                if (!l) {
                    i++;
                    continue;
                }
                if (i > gap) { /* unmatched text between matches is a piece too */
                    s->seg2[m++] = (uint32_t)gap;
                    s->seg2[m++] = (uint32_t)i;
                }
                s->seg2[m++] = (uint32_t)i;
                s->seg2[m++] = (uint32_t)(i + l);
                i += l;
                gap = i;
            }
            if (gap < x.end) {
                s->seg2[m++] = (uint32_t)gap;
                s->seg2[m++] = (uint32_t)x.end;
            }
        }
        uint32_t *sw = s->seg;
        size_t sc = s->seg_cap;
        s->seg = s->seg2;
        s->seg_cap = s->seg2_cap;
        s->seg2 = sw;
        s->seg2_cap = sc;
        nseg = m / 2;
    }
    for (size_t g = 0; g < nseg; g++) {
        size_t b0 = s->cpo[s->seg[2 * g]], b1 = s->cpo[s->seg[2 * g + 1]];
        if (s->word_cb) {
            s->word_cb(s->norm + b0, b1 - b0, s->word_u);
            continue;
        }
        sd_status st = encode_word(s, s->norm + b0, b1 - b0);
        if (st != SD_OK) return st;
    }
    return SD_OK;
nomem:
    return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %zu bytes", n);
}

static void state_free(bpe_state *s) {
    free(s->norm);
    free(s->cps);
    free(s->cpo);
    free(s->fl);
    free(s->seg);
    free(s->seg2);
    free(s->sym);
    free(s->heap);
    free(s->word);
    sd_mq_free(s->mq);
}

sd_status sd_bpe_pretokenize(const sd_tokenizer *t, const char *text, size_t len,
                             void (*cb)(const char *w, size_t n, void *u), void *u) {
    if (!t || t->kind != SD_TOKENIZER_BPE || !cb || (!text && len) || len > SD_TOK_MAX_TEXT)
        return sd_fail(SD_ERR_INVALID_ARG, "pretokenize: bad arguments");
    bpe_state s;
    memset(&s, 0, sizeof s);
    s.t = t;
    s.word_cb = cb;
    s.word_u = u;
    sd_status st = len ? encode_text(&s, text, len, 1) : SD_OK;
    state_free(&s);
    return st;
}

sd_status sd_bpe_encode_frags(const sd_tokenizer *t, const char *text, const sd_tok_frag *f, size_t n,
                              sd_tok_sink *k) {
    bpe_state s;
    memset(&s, 0, sizeof s);
    s.t = t;
    s.sink = k;
    sd_status st = SD_OK;
    for (size_t i = 0; st == SD_OK && i < n; i++) {
        if (f[i].id >= 0) sd_tok_emit(k, f[i].id);
        else st = encode_text(&s, text + f[i].off, f[i].len, f[i].off == 0);
    }
    state_free(&s);
    return st;
}

/* ---- decoding -------------------------------------------------------------------------- */

int sd_bpe_decode_byte_level(const sd_tokenizer *t, int32_t id, char *buf, size_t cap) {
    const char *p = t->text + t->off[id];
    size_t n = t->len[id], o = 0;
    switch (t->type[id]) {
    case SD_TOKEN_NORMAL: break;
    case SD_TOKEN_BYTE:
        if (!cap) return 0;
        buf[0] = (char)sd_tok_byte_value(p, n);
        return 1;
    case SD_TOKEN_USER_DEFINED: /* raw text, as llama.cpp prints it */
        o = n < cap ? n : cap;
        if (o) memcpy(buf, p, o);
        return (int)o;
    default: return 0; /* control, unknown, unused */
    }
    /* Each stand-in character gives back its byte; a character that stands for no byte
     * (not produced by GPT-2's mapping) is copied as it is rather than lost. The output is
     * never longer than the piece, so max_piece_len bounds it. */
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n && o < cap;) {
        uint32_t cp;
        size_t l = utf8_next(u + i, n - i, &cp);
        int b = cp_to_byte(cp);
        if (b >= 0) {
            buf[o++] = (char)b;
        } else {
            size_t k = l < cap - o ? l : cap - o;
            memcpy(buf + o, p + i, k);
            o += k;
        }
        i += l;
    }
    return (int)o;
}
