/* Special tokens: the end-of-generation set, the list of tokens split out of the text before
 * encoding (parse_special), and the encode entry points that cut the text at them. */
#include "tok_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- end of generation ------------------------------------------------------------------ */

/* llama.cpp's rules (llama-vocab.cpp, load): tokens with these texts end generation whatever
 * the file says, and are made control tokens (so they print nothing and are parsed out of a
 * prompt only with parse_special). */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",          "<end_of_turn>",  "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "_<EOT>",           "<|end_of_text|>", "<end_of_utterance>",
};

/* Roles that end generation, found by text when the GGUF does not name them; llama.cpp takes
 * the first match in its hash map's order, specdec the lowest id (they agree whenever one
 * text matches, as in every vocabulary these lists were written for). */
static const struct {
    size_t field; /* offset in sd_tok_eog_roles */
    const char *texts[8];
} k_eog_roles[] = {
    {offsetof(sd_tok_eog_roles, eot),
     {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
      "_<EOT>"}},
    {offsetof(sd_tok_eog_roles, eot), {"<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<end_of_utterance>"}},
    {offsetof(sd_tok_eog_roles, eom), {"<|eom_id|>"}},
    {offsetof(sd_tok_eog_roles, fim_pad), {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}},
    {offsetof(sd_tok_eog_roles, fim_rep), {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
    {offsetof(sd_tok_eog_roles, fim_sep), {"<|file_sep|>"}},
};

sd_status sd_tok_add_eog(sd_tokenizer *t, int32_t id, const char *what) {
    if (id < 0 || id >= t->n_vocab)
        return sd_fail(SD_ERR_FORMAT, "%s: end-of-generation id %d is outside the vocabulary of %d", what, (int)id,
                       t->n_vocab);
    int i = 0;
    while (i < t->n_eog && t->eog[i] < id) i++;
    if (i < t->n_eog && t->eog[i] == id) return SD_OK;
    int32_t *e = realloc(t->eog, ((size_t)t->n_eog + 1) * sizeof *e);
    if (!e) return sd_fail(SD_ERR_NOMEM, "%s: out of memory", what);
    memmove(e + i + 1, e + i, (size_t)(t->n_eog - i) * sizeof *e);
    e[i] = id;
    t->eog = e;
    t->n_eog++;
    return SD_OK;
}

static int32_t lookup_str(const sd_tokenizer *t, const char *s) { return sd_tok_lookup(t, s, strlen(s)); }

static sd_status find_eog(sd_tokenizer *t, const sd_tok_eog_roles *given, const char *what) {
    sd_tok_eog_roles r = {-1, -1, -1, -1, -1};
    if (given) r = *given;
    /* A role the file leaves out is found by text; the second eot row is only a fallback. */
    for (size_t i = 0; i < sizeof k_eog_roles / sizeof k_eog_roles[0]; i++) {
        int32_t *role = (int32_t *)((char *)&r + k_eog_roles[i].field);
        if (*role >= 0) continue;
        for (size_t k = 0; k < 8 && k_eog_roles[i].texts[k]; k++) {
            int32_t id = lookup_str(t, k_eog_roles[i].texts[k]);
            if (id >= 0 && (*role < 0 || id < *role)) *role = id;
        }
        if (*role >= 0) t->type[*role] = SD_TOKEN_CONTROL;
    }
    sd_status st = SD_OK;
    for (size_t i = 0; st == SD_OK && i < sizeof k_eog_texts / sizeof k_eog_texts[0]; i++) {
        int32_t id = lookup_str(t, k_eog_texts[i]);
        if (id < 0) continue;
        t->type[id] = SD_TOKEN_CONTROL;
        st = sd_tok_add_eog(t, id, what);
    }
    const int32_t ids[] = {t->eos, r.eot, r.eom, r.fim_pad, r.fim_rep, r.fim_sep};
    for (size_t i = 0; st == SD_OK && i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] >= 0) st = sd_tok_add_eog(t, ids[i], what);
    return st;
}

/* ---- the special-token list ------------------------------------------------------------- */

typedef struct {
    uint32_t len;
    int32_t id;
} len_id;

static int by_length_desc(const void *pa, const void *pb) {
    const len_id *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id; /* ties by id: deterministic, unlike llama.cpp's sort */
}

static int is_special_type(int type) {
    return type == SD_TOKEN_CONTROL || type == SD_TOKEN_USER_DEFINED || type == SD_TOKEN_UNKNOWN;
}

/* The trie of the special tokens' texts (t->special, in that order). */
static sd_status build_trie(sd_tokenizer *t, const char *what) {
    size_t nodes = 1;
    for (int k = 0; k < t->n_special; k++) nodes += t->len[t->special[k]];
    free(t->trie);
    t->trie = malloc(nodes * sizeof *t->trie);
    if (!t->trie) return sd_fail(SD_ERR_NOMEM, "%s: out of memory", what);
    memset(t->first_byte, 0, sizeof t->first_byte);
    t->trie[0] = (struct sd_tok_trie){-1, -1, -1, 0};
    int32_t n = 1;
    for (int k = 0; k < t->n_special; k++) {
        const int32_t id = t->special[k];
        const unsigned char *p = (const unsigned char *)t->text + t->off[id];
        t->first_byte[p[0] >> 3] |= (uint8_t)(1u << (p[0] & 7));
        int32_t at = 0;
        for (uint32_t i = 0; i < t->len[id]; i++) {
            int32_t c = t->trie[at].child;
            while (c >= 0 && t->trie[c].byte != p[i]) c = t->trie[c].sibling;
            if (c < 0) {
                c = n++;
                t->trie[c] = (struct sd_tok_trie){-1, t->trie[at].child, -1, p[i]};
                t->trie[at].child = c;
            }
            at = c;
        }
        if (t->trie[at].prio < 0) t->trie[at].prio = k; /* two tokens of one text: the first in order */
    }
    t->n_trie = n;
    return SD_OK;
}

sd_status sd_tok_finish_special(sd_tokenizer *t, const sd_tok_eog_roles *roles, const char *what) {
    free(t->eog);
    t->eog = NULL;
    t->n_eog = 0;
    sd_status st = find_eog(t, roles, what);
    if (st != SD_OK) return st;
    int n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) n += is_special_type(t->type[id]) && t->len[id] > 0;
    free(t->special);
    t->special = NULL;
    t->n_special = 0;
    if (!n) return build_trie(t, what);
    len_id *v = malloc((size_t)n * sizeof *v);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!v || !t->special) {
        free(v);
        return sd_fail(SD_ERR_NOMEM, "%s: out of memory", what);
    }
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->type[id]) && t->len[id] > 0) v[t->n_special++] = (len_id){t->len[id], id};
    qsort(v, (size_t)n, sizeof *v, by_length_desc);
    for (int i = 0; i < n; i++) t->special[i] = v[i].id;
    free(v);
    return build_trie(t, what);
}

int sd_tokenizer_is_eog(const sd_tokenizer *t, int32_t id) {
    if (!t) return 0;
    int lo = 0, hi = t->n_eog;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (t->eog[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n_eog && t->eog[lo] == id;
}

int sd_tokenizer_eog(const sd_tokenizer *t, const int32_t **ids) {
    static const int32_t none[1] = {-1}; /* never NULL: callers may memcpy zero ids from it */
    if (ids) *ids = t && t->eog ? t->eog : none;
    return t ? t->n_eog : 0;
}

const char *sd_tokenizer_chat_template(const sd_tokenizer *t, size_t *len) {
    if (len) *len = t && t->chat_template ? t->chat_template_len : 0;
    return t ? t->chat_template : NULL;
}

/* ---- splitting text at special tokens --------------------------------------------------- */

/* An occurrence of a special token in the text: where, and the token's index in t->special. */
typedef struct {
    uint32_t pos;
    int32_t prio;
} occurrence;

/* Whether [pos, pos + l) shares a byte with one of the spans (ascending, not overlapping). */
static int in_plain(const sd_tok_span *sp, int n, size_t pos, size_t l) {
    int lo = 0, hi = n; /* the first span ending after pos */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (sp[mid].off + sp[mid].len <= pos) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && sp[lo].off < pos + l;
}

static int by_start(const void *a, const void *b) {
    const sd_tok_frag *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Splits text at special tokens the way llama.cpp's tokenizer_st_partition does: user-defined
 * tokens always, control and unknown ones only when parse_special; each token in turn, longest
 * first, cuts every occurrence of it (leftmost first, not overlapping) out of the text that
 * earlier tokens left. Done in one pass: the trie finds every occurrence of every token, then
 * the tokens take theirs in that order, each occurrence only if none of its bytes is taken.
 * *out is malloc'd. */
static sd_status partition(const sd_tokenizer *t, const char *text, size_t len, int parse_special,
                           const sd_tok_span *plain, int n_plain, sd_tok_frag **out, size_t *n_out) {
    const unsigned char *u = (const unsigned char *)text;
    occurrence *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    uint32_t *start = NULL;
    uint8_t *taken = NULL;
    sd_tok_frag *f = NULL;
    for (size_t i = 0; t->n_trie > 1 && i < len; i++) {
        if (!(t->first_byte[u[i] >> 3] & (1u << (u[i] & 7)))) continue;
        int32_t at = 0;
        for (size_t j = i; j < len; j++) {
            int32_t c = t->trie[at].child;
            while (c >= 0 && t->trie[c].byte != u[j]) c = t->trie[c].sibling;
            if (c < 0) break;
            at = c;
            const int32_t k = t->trie[at].prio;
            if (k < 0) continue;
            if (t->type[t->special[k]] != SD_TOKEN_USER_DEFINED &&
                (!parse_special || in_plain(plain, n_plain, i, t->len[t->special[k]])))
                continue;
            if (n_occ == cap_occ) {
                cap_occ = cap_occ ? 2 * cap_occ : 64;
                occurrence *o = realloc(occ, cap_occ * sizeof *o);
                if (!o) goto nomem;
                occ = o;
            }
            occ[n_occ++] = (occurrence){(uint32_t)i, k};
        }
    }
    size_t n = 0, n_tok = 0;
    if (n_occ) {
        /* by token, then by position: a counting sort, stable over the ascending scan */
        occurrence *sorted = malloc(n_occ * sizeof *sorted);
        start = calloc((size_t)t->n_special + 1, sizeof *start);
        taken = calloc(len, 1);
        f = malloc((2 * n_occ + 1) * sizeof *f);
        if (!sorted || !start || !taken || !f) {
            free(sorted);
            goto nomem;
        }
        for (size_t i = 0; i < n_occ; i++) start[occ[i].prio + 1]++;
        for (int k = 0; k < t->n_special; k++) start[k + 1] += start[k];
        for (size_t i = 0; i < n_occ; i++) sorted[start[occ[i].prio]++] = occ[i];
        for (size_t i = 0; i < n_occ; i++) {
            const int32_t id = t->special[sorted[i].prio];
            const size_t p = sorted[i].pos, l = t->len[id];
            size_t j = 0;
            while (j < l && !taken[p + j]) j++;
            if (j < l) continue; /* inside text an earlier token (or occurrence) took */
            memset(taken + p, 1, l);
            f[n_tok++] = (sd_tok_frag){p, l, id};
        }
        free(sorted);
        qsort(f, n_tok, sizeof *f, by_start);
    } else if (!(f = malloc(sizeof *f))) {
        goto nomem;
    }
    /* the text between the tokens, in place: from the back, so nothing is overwritten unread */
    size_t total = 0, end = len;
    for (size_t i = n_tok; i-- > 0;) {
        total += 1 + (f[i].off + f[i].len < end);
        end = f[i].off;
    }
    total += end > 0;
    n = total;
    end = len;
    for (size_t i = n_tok; i-- > 0;) {
        const size_t tail = f[i].off + f[i].len;
        const sd_tok_frag tok = f[i];
        if (tail < end) f[--total] = (sd_tok_frag){tail, end - tail, -1};
        f[--total] = tok;
        end = tok.off;
    }
    if (end > 0) f[--total] = (sd_tok_frag){0, end, -1};
    free(occ);
    free(start);
    free(taken);
    *out = f;
    *n_out = n;
    return SD_OK;
nomem:
    free(occ);
    free(start);
    free(taken);
    free(f);
    return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory splitting special tokens");
}

static sd_status tokenize(const sd_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                          const sd_tok_span *plain, int n_plain, int32_t *out, int cap, int *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || cap < 0 || (!out && cap > 0) || (!text && len) || n_plain < 0 || (!plain && n_plain))
        return sd_fail(SD_ERR_INVALID_ARG, "tokenizer encode: bad arguments (cap %d)", cap);
    if (len > SD_TOK_MAX_TEXT)
        return sd_fail(SD_ERR_INVALID_ARG, "tokenizer encode: text of %zu bytes exceeds the %zu-byte limit", len,
                       SD_TOK_MAX_TEXT);
    for (int i = 0; i < n_plain; i++)
        if (plain[i].len > len || plain[i].off > len - plain[i].len ||
            (i && plain[i].off < plain[i - 1].off + plain[i - 1].len))
            return sd_fail(SD_ERR_INVALID_ARG, "tokenizer encode: text span %d is out of order or past the text", i);
    sd_tok_sink k = {out, cap, 0};
    if (add_bos && t->bos >= 0) sd_tok_emit(&k, t->bos);
    sd_status st = SD_OK;
    if (len > 0) { /* llama.cpp emits nothing for empty text, not even a space prefix */
        sd_tok_frag *f = NULL;
        size_t n = 0;
        st = partition(t, text, len, parse_special, plain, n_plain, &f, &n);
        if (st == SD_OK)
            st = t->kind == SD_TOKENIZER_BPE ? sd_bpe_encode_frags(t, text, f, n, &k)
                                             : sd_spm_encode_frags(t, text, f, n, &k);
        free(f);
    }
    if (st != SD_OK) return st;
    *n_out = k.count;
    if (k.count > cap)
        return sd_fail(SD_ERR_INVALID_ARG, "tokenizer encode: %d tokens do not fit in %d", k.count, cap);
    return SD_OK;
}

sd_status sd_tokenizer_tokenize(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                int parse_special, int32_t *out, int cap, int *n_out) {
    return tokenize(t, text, len, add_bos, parse_special, NULL, 0, out, cap, n_out);
}

static sd_status tokenize_alloc(const sd_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                                const sd_tok_span *plain, int n_plain, int32_t **ids, int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    /* Text runs 2.5-5 bytes a token: a first guess of len / 2 saves a counting pass almost always. */
    const size_t guess = len / 2 + 16;
    int cap = guess < (size_t)1 << 28 ? (int)guess : 1 << 28, n = 0;
    int32_t *out = malloc((size_t)cap * sizeof *out);
    if (!out) return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %d tokens", cap);
    sd_status st = tokenize(t, text, len, add_bos, parse_special, plain, n_plain, out, cap, &n);
    if (st == SD_ERR_INVALID_ARG && n > cap) { /* counted: now all the ids */
        int32_t *more = realloc(out, (size_t)n * sizeof *out);
        if (!more) {
            free(out);
            return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %d tokens", n);
        }
        out = more;
        st = tokenize(t, text, len, add_bos, parse_special, plain, n_plain, out, n, &n);
    }
    if (st != SD_OK || n == 0) {
        free(out);
        return st;
    }
    int32_t *fit = realloc(out, (size_t)n * sizeof *out);
    *ids = fit ? fit : out;
    *n_ids = n;
    return SD_OK;
}

sd_status sd_tokenizer_tokenize_alloc(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                      int parse_special, int32_t **ids, int *n_ids) {
    return tokenize_alloc(t, text, len, add_bos, parse_special, NULL, 0, ids, n_ids);
}

sd_status sd_tokenizer_tokenize_outside(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                        const sd_tok_span *plain, int n_plain, int32_t **ids, int *n_ids) {
    return tokenize_alloc(t, text, len, add_bos, 1, plain, n_plain, ids, n_ids);
}

sd_status sd_tokenizer_encode(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                              int32_t *out, int cap, int *n_out) {
    return sd_tokenizer_tokenize(t, text, len, add_bos, 0, out, cap, n_out);
}
