/* Tokenizer test helpers (see sdtest_tok.h): one copy of what test_tokenizer.c and
 * test_bpe.c both need. */
#include "sdtest_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdtest.h"

const char *sdtest_find(const char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

sd_tokenizer *sdtest_load_gguf_tokenizer(const char *rel) {
    char *path = sdtest_shared_or_skip(rel);
    size_t len = 0;
    void *buf = sdtest_read_file(path, &len);
    assert_non_null(buf);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, path, &g), SD_OK);
    sd_tokenizer *t = NULL;
    sd_status st = sd_tokenizer_from_gguf(g, path, &t);
    if (st != SD_OK) print_error("%s: %s\n", path, sd_last_error());
    sd_gguf_free(g);
    free(buf);
    free(path);
    assert_int_equal(st, SD_OK);
    return t;
}

/* Fails the test with the loader's message unless st is SD_OK; frees path. */
static sd_tokenizer *loaded(sd_status st, char *path, sd_tokenizer *t) {
    if (st != SD_OK) print_error("%s: %s\n", path, sd_last_error());
    free(path);
    assert_int_equal(st, SD_OK);
    return t;
}

sd_tokenizer *sdtest_load_llama2c_tokenizer(const char *rel, int vocab) {
    char *path = sdtest_shared_or_skip(rel);
    sd_tokenizer *t = NULL;
    sd_status st = sd_tokenizer_load_llama2c(path, vocab, &t);
    return loaded(st, path, t);
}

sd_tokenizer *sdtest_load_hf_tokenizer(const char *rel, int32_t bos, int32_t eos) {
    char *path = sdtest_shared_or_skip(rel);
    sd_tokenizer *t = NULL;
    sd_status st = sd_tokenizer_load_hf_json(path, bos, eos, &t);
    return loaded(st, path, t);
}

sd_status sdtest_tokenizer_from_writer(sd_gguf_writer *w, const char *name, sd_tokenizer **out) {
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf_writer_free(w);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, name, &g), SD_OK);
    sd_status st = sd_tokenizer_from_gguf(g, name, out);
    sd_gguf_free(g);
    free(buf);
    return st;
}

int32_t *sdtest_encode(const sd_tokenizer *t, const char *s, size_t len, int bos, int *n) {
    int need = 0;
    sd_status st = sd_tokenizer_encode(t, s, len, bos, NULL, 0, &need);
    assert_true(st == SD_OK || st == SD_ERR_INVALID_ARG);
    int32_t *ids = malloc((size_t)(need + 1) * sizeof *ids);
    assert_non_null(ids);
    st = sd_tokenizer_encode(t, s, len, bos, ids, need, n);
    if (st != SD_OK) print_error("encode: %s\n", sd_last_error());
    assert_int_equal(st, SD_OK);
    assert_int_equal(*n, need);
    return ids;
}

char *sdtest_decode_all(const sd_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = (size_t)n * (size_t)sd_tokenizer_max_piece_len(t) + 1;
    char *s = malloc(cap);
    assert_non_null(s);
    size_t o = 0;
    int32_t prev = -1;
    for (int i = 0; i < n; i++) {
        int k = sd_tokenizer_decode(t, prev, ids[i], s + o, cap - o);
        assert_true(k >= 0);
        o += (size_t)k;
        prev = ids[i];
    }
    s[o] = '\0';
    *len = o;
    return s;
}

void sdtest_print_text(const char *label, const char *s, size_t n) {
    print_error("%s \"", label);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') print_error("\\n");
        else if (c == '\t') print_error("\\t");
        else if (c < 0x20) print_error("\\x%02x", c);
        else print_error("%c", c);
    }
    print_error("\"\n");
}

void sdtest_print_ids(const char *label, const int32_t *ids, int n) {
    print_error("%s [", label);
    for (int i = 0; i < n; i++) print_error("%s%d", i ? " " : "", (int)ids[i]);
    print_error("]\n");
}

void sdtest_expect_ids(const sd_tokenizer *t, const char *s, int bos, const int32_t *want, int n_want) {
    int n = 0;
    int32_t *ids = sdtest_encode(t, s, strlen(s), bos, &n);
    if (n != n_want || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        sdtest_print_text("input", s, strlen(s));
        sdtest_print_ids("  expected", want, n_want);
        sdtest_print_ids("  got     ", ids, n);
        fail();
    }
    free(ids);
}

int sdtest_roundtrip_ok(const sd_tokenizer *t, const char *s, size_t len, int bos, const char *name) {
    int n = 0;
    int32_t *ids = sdtest_encode(t, s, len, bos, &n);
    size_t dl = 0;
    char *d = sdtest_decode_all(t, ids, n, &dl);
    int ok = dl == len && memcmp(d, s, len) == 0;
    if (!ok) {
        print_error("%s: round trip differs\n", name);
        sdtest_print_text("  input  ", s, len);
        sdtest_print_text("  decoded", d, dl);
        sdtest_print_ids("  ids", ids, n);
    }
    free(d);
    free(ids);
    return ok;
}

size_t sdtest_random_bytes(uint32_t *seed, const unsigned char *alphabet, size_t n_alphabet, char *s, size_t cap) {
    *seed = *seed * 1664525u + 1013904223u;
    size_t n = (*seed >> 16) % cap;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        s[i] = (char)alphabet[(*seed >> 16) % n_alphabet];
    }
    return n;
}

sdtest_vocab_cases *sdtest_load_vocab_cases(const char *vocab) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char rel[256];
    snprintf(rel, sizeof rel, "%s.inp", vocab);
    char *pi = sdtest_shared_or_skip(rel);
    snprintf(rel, sizeof rel, "%s.out", vocab);
    char *po = sdtest_shared_or_skip(rel);
    sdtest_vocab_cases *c = calloc(1, sizeof *c);
    assert_non_null(c);
    size_t li = 0, lo = 0;
    c->inp = sdtest_read_file(pi, &li);
    c->outp = sdtest_read_file(po, &lo);
    assert_non_null(c->inp);
    assert_non_null(c->outp);
    free(pi);
    free(po);

    size_t pos = 0;
    while (pos < li) {
        const char *hit = sdtest_find(c->inp + pos, li - pos, sep, sizeof sep - 1);
        assert_non_null(hit); /* the file ends with a separator */
        assert_true(c->n < SDTEST_MAX_CASES);
        c->text[c->n] = c->inp + pos;
        c->len[c->n] = (size_t)(hit - (c->inp + pos));
        c->n++;
        pos = (size_t)(hit - c->inp) + sizeof sep - 1;
    }

    int line = 0;
    char *p = c->outp, *end = c->outp + lo;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        assert_true(line < c->n);
        int k = 0;
        char *q = p;
        while (q < nl) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) {
                q++;
                continue;
            }
            assert_true(k < SDTEST_MAX_CASE_IDS);
            c->ids[line][k++] = (int32_t)v;
            q = e;
        }
        c->n_ids[line++] = k;
        p = nl + 1;
    }
    assert_int_equal(line, c->n);
    return c;
}

void sdtest_free_vocab_cases(sdtest_vocab_cases *c) {
    if (!c) return;
    free(c->inp);
    free(c->outp);
    free(c);
}

int sdtest_vocab_case_ok(const sd_tokenizer *t, const sdtest_vocab_cases *c, int i, const char *name) {
    int n = 0;
    int32_t *ids = sdtest_encode(t, c->text[i], c->len[i], 0, &n);
    int ok = n == c->n_ids[i] && memcmp(ids, c->ids[i], (size_t)n * sizeof *ids) == 0;
    if (!ok) {
        print_error("%s: vocab case %d differs\n", name, i);
        sdtest_print_text("  input", c->text[i], c->len[i]);
        sdtest_print_ids("  expected", c->ids[i], c->n_ids[i]);
        sdtest_print_ids("  got     ", ids, n);
    }
    free(ids);
    return ok;
}

int sdtest_vocab_case_failures(const sd_tokenizer *t, const char *vectors, int roundtrip, const char *name) {
    sdtest_vocab_cases *c = sdtest_load_vocab_cases(vectors);
    assert_int_equal(c->n, 46);
    int failed = 0;
    for (int i = 0; i < c->n; i++) {
        failed += !sdtest_vocab_case_ok(t, c, i, name);
        if (roundtrip) failed += !sdtest_roundtrip_ok(t, c->text[i], c->len[i], 0, name);
    }
    sdtest_free_vocab_cases(c);
    return failed;
}

char *sdtest_load_corpus(size_t *len) {
    char *path = sdtest_shared_or_skip("corpora/tinystories.txt");
    char *text = sdtest_read_file(path, len);
    free(path);
    assert_non_null(text);
    return text;
}
