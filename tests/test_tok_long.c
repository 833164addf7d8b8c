/* Long texts. Long words (thousands of symbols: unspaced text, SentencePiece's single piece) go through the
 * merge queue instead of the heap; here each is checked against a quadratic reference that
 * rescans every adjacent pair for the best merge after each one (BPE: lowest rank, SPM: highest
 * score, ties to the leftmost), on the real vocabularies and on synthetic ones built to break
 * the orders the queue is fast for: merges whose results merge at lower ranks than they were made
 * at, two merges making one token, scores that tie everywhere. And the split at special tokens,
 * one pass over the text now, against llama.cpp's token-by-token search. */
#include "sdtest.h"
#include "sdtest_tok.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "specdec/gguf.h"
#include "specdec/tokenizer.h"
#include "tokenizer/tok_internal.h"

static uint32_t rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* n random characters of alphabet (ASCII), NUL-terminated. */
static char *random_text(uint32_t seed, const char *alphabet, size_t n) {
    char *s = malloc(n + 1);
    assert_non_null(s);
    const size_t k = strlen(alphabet);
    for (size_t i = 0; i < n; i++) s[i] = alphabet[rnd(&seed) % k];
    s[n] = 0;
    return s;
}

static void expect_same(const char *label, const int32_t *got, int n_got, const int32_t *want, int n_want) {
    int i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) {
        printf("  %s: %d tokens, same as the reference\n", label, n_got);
        return;
    }
    fail_msg("%s: %d tokens against the reference's %d, first difference at %d (%d against %d)", label, n_got, n_want, i,
             i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
}

/* ---- BPE by ranks ------------------------------------------------------------------------- */

typedef struct {
    const sd_tokenizer *t;
    int32_t *out;
    int n, cap;
} bpe_ref;

/* One word by the reference: its symbols (bytes' stand-ins, or characters: ASCII here), then the
 * lowest-ranked adjacent pair merged, leftmost on ties, until none merges. */
static void bpe_ref_word(const char *w, size_t n, void *u) {
    bpe_ref *r = u;
    const sd_tokenizer *t = r->t;
    int32_t *ids = malloc(n * sizeof *ids), *rank = malloc(n * sizeof *rank);
    assert_true(ids && rank);
    int m = 0;
    for (size_t i = 0; i < n;) {
        const size_t cl = t->byte_level || (unsigned char)w[i] < 0xE0 ? 1 : 3; /* ASCII and U+2581 */
        ids[m] = t->byte_level ? t->bl_tok[(unsigned char)w[i]] : sd_tok_lookup(t, w + i, cl);
        assert_true(ids[m] >= 0);
        m++;
        i += cl;
    }
    for (;;) {
        int best = -1;
        for (int i = 0; i + 1 < m; i++) {
            const struct sd_bpe_merge *g = sd_bpe_find_merge(t, ids[i], ids[i + 1]);
            rank[i] = g ? g->rank : -1;
            if (rank[i] >= 0 && (best < 0 || rank[i] < rank[best])) best = i;
        }
        if (best < 0) break;
        ids[best] = sd_bpe_find_merge(t, ids[best], ids[best + 1])->id;
        memmove(ids + best + 1, ids + best + 2, (size_t)(m - best - 2) * sizeof *ids);
        m--;
    }
    if (r->n + m > r->cap) {
        r->cap = 2 * (r->n + m);
        r->out = realloc(r->out, (size_t)r->cap * sizeof *r->out);
        assert_non_null(r->out);
    }
    memcpy(r->out + r->n, ids, (size_t)m * sizeof *ids);
    r->n += m;
    free(ids);
    free(rank);
}

/* text through the tokenizer and through its pre-tokenizer plus the reference. */
static void check_bpe(const sd_tokenizer *t, const char *label, const char *text) {
    const size_t len = strlen(text);
    bpe_ref r = {t, NULL, 0, 0};
    assert_int_equal(sd_bpe_pretokenize(t, text, len, bpe_ref_word, &r), SD_OK);
    int n = 0;
    int32_t *got = sdtest_encode(t, text, len, 0, &n);
    expect_same(label, got, n, r.out, r.n);
    free(got);
    free(r.out);
}

static void test_bpe_real_vocabs(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        int json;
    } vocabs[] = {
        {"models/arch-zoo/zoo-qwen2.gguf", 0},        /* byte-level, qwen2 pre-tokenizer */
        {"vocab-tests/ggml-vocab-gpt-2.gguf", 0},     /* byte-level, gpt-2 */
        {"tokenizers/llama3/tokenizer.json", 1},      /* byte-level, ignore_merges */
        {"models/tinystories-656k/tokenizer.json", 1}, /* SentencePiece-style BPE */
    };
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        sd_tokenizer *t = vocabs[v].json ? sdtest_load_hf_tokenizer(vocabs[v].rel, -1, -1) : sdtest_load_gguf_tokenizer(vocabs[v].rel);
        char label[160];
        /* unspaced letters: one word of 3000 symbols; a run of one letter; two letters */
        char *a = random_text(1 + (uint32_t)v, "abcdefghijklmnopqrstuvwxyz", 3000);
        char *b = random_text(7, "a", 2000);
        char *c = random_text(9 + (uint32_t)v, "ab", 2500);
        const char *texts[] = {a, b, c};
        for (int i = 0; i < 3; i++) {
            snprintf(label, sizeof label, "%s, text %d", vocabs[v].rel, i);
            check_bpe(t, label, texts[i]);
        }
        free(a);
        free(b);
        free(c);
        sd_tokenizer_free(t);
    }
}

/* A vocabulary over "abcd" of every string up to 4 letters, each made by a random split of it,
 * plus a second split for some, the merges in random order: results merge at ranks lower than
 * the ones they were made at, and two merges may make one token. */
static sd_tokenizer *synthetic_bpe(uint32_t seed) {
    const char al[] = "abcd";
    char *json = malloc(1 << 16);
    assert_non_null(json);
    size_t o = (size_t)sprintf(json, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    char words[340][5];
    int nw = 0;
    for (int len = 1; len <= 4; len++) {
        int count = 1;
        for (int k = 0; k < len; k++) count *= 4;
        for (int x = 0; x < count; x++) {
            int y = x;
            for (int k = len - 1; k >= 0; k--, y /= 4) words[nw][k] = al[y % 4];
            words[nw][len] = 0;
            o += (size_t)sprintf(json + o, "%s\"%s\":%d", nw ? "," : "", words[nw], nw);
            nw++;
        }
    }
    char merges[600][12];
    int nm = 0;
    for (int i = 4; i < nw; i++) {
        const int len = (int)strlen(words[i]);
        for (int rep = 0; rep < 1 + (rnd(&seed) % 3 == 0); rep++) {
            const int cut = 1 + (int)(rnd(&seed) % (unsigned)(len - 1));
            snprintf(merges[nm++], sizeof merges[0], "%.*s %s", cut, words[i], words[i] + cut);
        }
    }
    for (int i = nm - 1; i > 0; i--) { /* shuffle: the ranks */
        const int j = (int)(rnd(&seed) % (unsigned)(i + 1));
        char tmp[12];
        memcpy(tmp, merges[i], sizeof tmp);
        memcpy(merges[i], merges[j], sizeof tmp);
        memcpy(merges[j], tmp, sizeof tmp);
    }
    o += (size_t)sprintf(json + o, "},\"merges\":[");
    for (int i = 0; i < nm; i++) o += (size_t)sprintf(json + o, "%s\"%s\"", i ? "," : "", merges[i]);
    sprintf(json + o, "]}}");
    sd_tokenizer *t = NULL;
    assert_int_equal(sd_tokenizer_from_hf_json(json, strlen(json), "synthetic.json", -1, -1, &t), SD_OK);
    free(json);
    return t;
}

static void test_bpe_synthetic(void **state) {
    (void)state;
    for (uint32_t seed = 1; seed <= 12; seed++) {
        sd_tokenizer *t = synthetic_bpe(seed);
        char label[64];
        char *a = random_text(100 + seed, "abcd", 1000 + 200 * seed);
        char *b = random_text(200 + seed, seed % 3 == 0 ? "aab" : seed % 3 == 1 ? "ab" : "abcdddd", 1500);
        snprintf(label, sizeof label, "synthetic BPE %u, abcd", (unsigned)seed);
        check_bpe(t, label, a);
        snprintf(label, sizeof label, "synthetic BPE %u, skewed", (unsigned)seed);
        check_bpe(t, label, b);
        free(a);
        free(b);
        sd_tokenizer_free(t);
    }
}

/* ---- SentencePiece by scores --------------------------------------------------------------- */

/* The whole text as SentencePiece sees it (spaces escaped, the prefix when the tokenizer adds
 * one), its characters merged by the best-scoring adjacent pair, leftmost on ties, then each
 * symbol as its piece or as byte tokens. */
static int32_t *spm_ref(const sd_tokenizer *t, const char *text, int *n_out) {
    const size_t len = strlen(text);
    char *buf = malloc(3 * len + 3);
    size_t n = 0;
    if (t->add_space_prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    size_t *off = malloc((n + 1) * sizeof *off), m = 0;
    for (size_t i = 0; i < n; i += (unsigned char)buf[i] >= 0xE0 ? 3 : 1) off[m++] = i; /* ASCII and U+2581 */
    off[m] = n;
    for (;;) {
        size_t best = m;
        float best_score = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            const int32_t id = sd_tok_lookup(t, buf + off[i], off[i + 2] - off[i]);
            if (id >= 0 && (best == m || t->score[id] > best_score)) {
                best = i;
                best_score = t->score[id];
            }
        }
        if (best == m) break;
        memmove(off + best + 1, off + best + 2, (m - best - 1) * sizeof *off);
        m--;
    }
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    int k = 0;
    for (size_t i = 0; i < m; i++) {
        const int32_t id = sd_tok_lookup(t, buf + off[i], off[i + 1] - off[i]);
        if (id >= 0) {
            ids[k++] = id;
            continue;
        }
        for (size_t j = off[i]; j < off[i + 1]; j++) {
            const int32_t b = t->byte_tok[(unsigned char)buf[j]];
            ids[k++] = b >= 0 ? b : t->unk;
        }
    }
    free(buf);
    free(off);
    *n_out = k;
    return ids;
}

static void check_spm(const sd_tokenizer *t, const char *label, const char *text) {
    int n = 0, n_ref = 0;
    int32_t *got = sdtest_encode(t, text, strlen(text), 0, &n);
    int32_t *want = spm_ref(t, text, &n_ref);
    expect_same(label, got, n, want, n_ref);
    free(got);
    free(want);
}

static void test_spm_real_vocabs(void **state) {
    (void)state;
    static const char *const rels[] = {"models/stories260K/tok512.bin", "tokenizers/llama2/tokenizer.bin"};
    for (size_t v = 0; v < 2; v++) {
        sd_tokenizer *t = sdtest_load_llama2c_tokenizer(rels[v], 0);
        char label[160];
        char *a = random_text(3 + (uint32_t)v, "abcdefghijklmnopqrstuvwxyz", 3000);
        char *b = random_text(5, "a", 2000);
        char *c = random_text(11 + (uint32_t)v, "the cat sat on a mat  ", 3000);
        const char *texts[] = {a, b, c};
        for (int i = 0; i < 3; i++) {
            snprintf(label, sizeof label, "%s, text %d", rels[v], i);
            check_spm(t, label, texts[i]);
        }
        free(a);
        free(b);
        free(c);
        sd_tokenizer_free(t);
    }
}

/* "llama" vocabularies over "abc" and the space: every string up to 4 characters, scored from
 * a few values (ties everywhere; longer pieces may outscore their parts), or all 0. */
static sd_tokenizer *synthetic_spm(uint32_t seed, int all_zero) {
    static const char *const al[4] = {"a", "b", "c", "\xe2\x96\x81"};
    char *pieces[400];
    float scores[400];
    int n = 0;
    pieces[n] = strdup("<unk>");
    scores[n++] = 0;
    pieces[n] = strdup("<s>");
    scores[n++] = 0;
    pieces[n] = strdup("</s>");
    scores[n++] = 0;
    for (int len = 1; len <= 4; len++) {
        int count = 1;
        for (int k = 0; k < len; k++) count *= 4;
        for (int x = 0; x < count; x++) {
            char w[16] = "";
            int y = x;
            for (int k = 0; k < len; k++, y /= 4) strcat(w, al[y % 4]);
            pieces[n] = strdup(w);
            scores[n++] = all_zero ? 0.0f : -(float)(rnd(&seed) % 4);
        }
    }
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(sd_gguf_set_str(w, "tokenizer.ggml.model", "llama"), SD_OK);
    assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)pieces, n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, n), SD_OK);
    sd_tokenizer *t = NULL;
    assert_int_equal(sdtest_tokenizer_from_writer(w, "synthetic.gguf", &t), SD_OK);
    for (int i = 0; i < n; i++) free(pieces[i]);
    return t;
}

static void test_spm_synthetic(void **state) {
    (void)state;
    for (uint32_t seed = 1; seed <= 6; seed++) {
        sd_tokenizer *t = synthetic_spm(seed, seed == 6);
        char label[64];
        char *a = random_text(300 + seed, "abc ", 1800 + 200 * seed);
        char *b = random_text(400 + seed, "aaab", 1500);
        snprintf(label, sizeof label, "synthetic SPM %u%s, abc", (unsigned)seed, seed == 6 ? " (all scores 0)" : "");
        check_spm(t, label, a);
        snprintf(label, sizeof label, "synthetic SPM %u%s, skewed", (unsigned)seed, seed == 6 ? " (all scores 0)" : "");
        check_spm(t, label, b);
        free(a);
        free(b);
        sd_tokenizer_free(t);
    }
}

/* ---- special tokens in long text -------------------------------------------------------------- */

/* The split as llama.cpp's tokenizer_st_partition writes it: each special token in turn (longest
 * first), searched for in every piece of text the earlier ones left, leftmost first. The text
 * pieces are encoded alone: nothing special is left in them. */
static int32_t *split_ref(const sd_tokenizer *t, const char *text, size_t len, int parse_special, int *n_out) {
    size_t n = 1, cap = 2 * len + 2;
    sd_tok_frag *f = malloc(cap * sizeof *f), *g = malloc(cap * sizeof *g);
    f[0] = (sd_tok_frag){0, len, -1};
    for (int k = 0; k < t->n_special; k++) {
        const int32_t id = t->special[k];
        if (!parse_special && t->type[id] != SD_TOKEN_USER_DEFINED) continue;
        const char *p = t->text + t->off[id];
        const size_t pl = t->len[id];
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (f[i].id >= 0) {
                g[m++] = f[i];
                continue;
            }
            size_t pos = f[i].off;
            const size_t end = f[i].off + f[i].len;
            const char *hit;
            while ((hit = sdtest_find(text + pos, end - pos, p, pl)) != NULL) {
                const size_t at = (size_t)(hit - text);
                if (at > pos) g[m++] = (sd_tok_frag){pos, at - pos, -1};
                g[m++] = (sd_tok_frag){at, pl, id};
                pos = at + pl;
            }
            if (pos < end) g[m++] = (sd_tok_frag){pos, end - pos, -1};
        }
        sd_tok_frag *sw = f;
        f = g;
        g = sw;
        n = m;
    }
    int32_t *ids = malloc((4 * len + 4) * sizeof *ids);
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (f[i].id >= 0) {
            ids[k++] = f[i].id;
            continue;
        }
        int m = 0;
        assert_int_equal(sd_tokenizer_tokenize(t, text + f[i].off, f[i].len, 0, 0, ids + k, (int)(4 * len + 4) - k, &m), SD_OK);
        k += m;
    }
    free(f);
    free(g);
    *n_out = k;
    return ids;
}

static void test_special_split(void **state) {
    (void)state;
    static const char *const pieces[] = {
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|begin_of_text|>", "<|eot_id|>",
        "<|start_header_id|>", "<|reserved_special_token_1|>", "<|reserved_special_token_12|>", "<|", "|>", "<",
        "a", "b ", "<|im_", "_start|>", "<|im_start|><|im_end|>", "think>", "<|reserved_special_token_",
    };
    /* real vocabularies, and one whose special tokens overlap each other and themselves */
    static const char *const rels[] = {"tokenizers/llama3/tokenizer.json", "tokenizers/qwen3/tokenizer.json", "overlapping"};
    static const char *overlapping =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3},\"merges\":[]},"
        "\"added_tokens\":[{\"id\":4,\"content\":\"abc\",\"special\":true},{\"id\":5,\"content\":\"bcd\",\"special\":true},"
        "{\"id\":6,\"content\":\"cda\",\"special\":false},{\"id\":7,\"content\":\"aa\",\"special\":false},"
        "{\"id\":8,\"content\":\"aaa\",\"special\":true},{\"id\":9,\"content\":\"dab\",\"special\":true},"
        "{\"id\":10,\"content\":\"bcdab\",\"special\":false}]}";
    for (size_t v = 0; v < 3; v++) {
        sd_tokenizer *t = NULL;
        if (v < 2) t = sdtest_load_hf_tokenizer(rels[v], -1, -1);
        else assert_int_equal(sd_tokenizer_from_hf_json(overlapping, strlen(overlapping), "overlapping.json", -1, -1, &t), SD_OK);
        uint32_t seed = 17 + (uint32_t)v;
        char *text = malloc(40000);
        size_t len = 0;
        for (int i = 0; i < 2000; i++) {
            const char *p = v < 2 ? pieces[rnd(&seed) % (sizeof pieces / sizeof pieces[0])] : (const char *[]){"a", "b", "c", "d"}[rnd(&seed) % 4];
            memcpy(text + len, p, strlen(p));
            len += strlen(p);
        }
        for (int special = 0; special < 2; special++) {
            int n = 0, n_ref = 0;
            int32_t *got = NULL;
            assert_int_equal(sd_tokenizer_tokenize_alloc(t, text, len, 0, special, &got, &n), SD_OK);
            int32_t *want = split_ref(t, text, len, special, &n_ref);
            char label[160];
            snprintf(label, sizeof label, "%s, %zu bytes of special-token pieces, parse_special %d", rels[v], len, special);
            expect_same(label, got, n, want, n_ref);
            free(got);
            free(want);
        }
        free(text);
        sd_tokenizer_free(t);
    }
}

/* ---- a text's fewest tokens ---------------------------------------------------------------------- */

/* sd_tokenizer_max_text_per_token bounds the text one token stands for, so a text of n bytes takes
 * at least n / bound tokens (the server refuses prompts by bytes on it): checked where it is
 * tightest, a text of the longest piece's own text repeated, and on random bytes; a vocabulary that
 * fuses unknown characters has no bound (one token for a run of any length). */
static void test_text_per_token_bound(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        int kind; /* 0 gguf, 1 json, 2 llama2.c */
    } vocabs[] = {
        {"models/arch-zoo/zoo-qwen2.gguf", 0},       {"tokenizers/llama3/tokenizer.json", 1},
        {"models/tinystories-656k/tokenizer.json", 1}, {"models/stories260K/tok512.bin", 2},
        {"tokenizers/llama2/tokenizer.bin", 2},
    };
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        sd_tokenizer *t = vocabs[v].kind == 0   ? sdtest_load_gguf_tokenizer(vocabs[v].rel)
                          : vocabs[v].kind == 1 ? sdtest_load_hf_tokenizer(vocabs[v].rel, -1, -1)
                                                : sdtest_load_llama2c_tokenizer(vocabs[v].rel, 0);
        const int bound = sd_tokenizer_max_text_per_token(t);
        if (bound == 0) { /* TinyStories-656K: fused unknowns, and not every byte has a token */
            printf("  %s: no bound (fused unknown characters)\n", vocabs[v].rel);
            sd_tokenizer_free(t);
            continue;
        }
        /* the token whose decoded text is longest, repeated */
        char *buf = malloc((size_t)sd_tokenizer_max_piece_len(t) + 1);
        int32_t best = 0;
        int best_n = -1;
        for (int32_t id = 0; id < sd_tokenizer_n_vocab(t); id++) {
            const int n = sd_tokenizer_decode(t, 0, id, buf, (size_t)sd_tokenizer_max_piece_len(t));
            if (n > best_n) {
                best_n = n;
                best = id;
            }
        }
        sd_tokenizer_decode(t, 0, best, buf, (size_t)sd_tokenizer_max_piece_len(t));
        char *text = malloc((size_t)best_n * 50 + 4096);
        size_t len = 0;
        for (int i = 0; i < 50; i++, len += (size_t)best_n) memcpy(text + len, buf, (size_t)best_n);
        uint32_t seed = 99 + (uint32_t)v;
        for (int pass = 0; pass < 2; pass++) {
            int n = 0;
            int32_t *ids = NULL;
            for (int special = 0; special < 2; special++) {
                assert_int_equal(sd_tokenizer_tokenize_alloc(t, text, len, 0, special, &ids, &n), SD_OK);
                if ((size_t)n * (size_t)bound < len)
                    fail_msg("%s: %zu bytes in %d tokens, more than %d bytes a token", vocabs[v].rel, len, n, bound);
                free(ids);
            }
            printf("  %s: %zu bytes, at least %zu tokens by the bound of %d bytes, %d tokens\n", vocabs[v].rel, len,
                   (len + (size_t)bound - 1) / (size_t)bound, bound, n);
            for (len = 0; len < 4096; len++) text[len] = (char)(rnd(&seed) & 0xFF); /* random bytes */
        }
        free(text);
        free(buf);
        sd_tokenizer_free(t);
    }
    /* fused unknown characters: no bound */
    static const char fuse[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[],"
                               "\"unk_token\":\"<unk>\",\"fuse_unk\":true}}";
    sd_tokenizer *t = NULL;
    assert_int_equal(sd_tokenizer_from_hf_json(fuse, strlen(fuse), "fuse.json", -1, -1, &t), SD_OK);
    assert_int_equal(sd_tokenizer_max_text_per_token(t), 0);
    int n = 0;
    int32_t *ids = NULL;
    assert_int_equal(sd_tokenizer_tokenize_alloc(t, "bbbbbbbbbbbbbbbbbbbb", 20, 0, 0, &ids, &n), SD_OK);
    assert_int_equal(n, 1); /* 20 bytes, one token: no bound would hold */
    free(ids);
    sd_tokenizer_free(t);
}

/* ---- long runs of one class ------------------------------------------------------------------------ */

static void run_too_slow(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: pre-tokenizing 2 MB of digits did not end within 60 s: the split is not linear\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

typedef struct {
    size_t pieces, bytes, bad;
    size_t most; /* digits a piece may hold */
} piece_count;

static void count_piece(const char *w, size_t n, void *u) {
    piece_count *c = u;
    (void)w;
    c->pieces++;
    c->bytes += n;
    if (n == 0 || n > c->most) c->bad++;
}

/* A run of digits splits into pieces of at most 1 (qwen2) or 3 (llama3) digits; each piece is
 * matched at the run's start, and the match must not rescan the rest of the run (it did: 4 MB of
 * digits took Qwen's tokenizer over 11 minutes, a denial of service through any prompt). Not a
 * timing goal: the alarm only turns a hang into a failure (linear: well under a second). */
static void test_long_digit_runs(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        int json;
        size_t digits; /* per piece */
    } vocabs[] = {{"models/arch-zoo/zoo-qwen2.gguf", 0, 1}, {"tokenizers/llama3/tokenizer.json", 1, 3}};
    const size_t len = 2u << 20;
    char *text = random_text(5, "0123456789", len);
    signal(SIGALRM, run_too_slow);
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        sd_tokenizer *t = vocabs[v].json ? sdtest_load_hf_tokenizer(vocabs[v].rel, -1, -1) : sdtest_load_gguf_tokenizer(vocabs[v].rel);
        piece_count c = {0, 0, 0, vocabs[v].digits};
        alarm(60);
        assert_int_equal(sd_bpe_pretokenize(t, text, len, count_piece, &c), SD_OK);
        alarm(0);
        printf("  %s: %zu digits in %zu pieces\n", vocabs[v].rel, len, c.pieces);
        assert_int_equal(c.bytes, len);
        assert_int_equal(c.pieces, (len + vocabs[v].digits - 1) / vocabs[v].digits);
        assert_int_equal(c.bad, 0);
        sd_tokenizer_free(t);
    }
    signal(SIGALRM, SIG_DFL);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_real_vocabs),
        cmocka_unit_test(test_bpe_synthetic),
        cmocka_unit_test(test_spm_real_vocabs),
        cmocka_unit_test(test_spm_synthetic),
        cmocka_unit_test(test_special_split),
        cmocka_unit_test(test_text_per_token_bound),
        cmocka_unit_test(test_long_digit_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
