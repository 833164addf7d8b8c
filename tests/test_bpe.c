/* BPE tokenizers: llama.cpp's gpt-2/deepseek-coder vectors, round trips, TinyStories-656K's
 * tokenizer.json, pre-tokenizer splits, merge rules, pair checks across formats, bad JSON. */
#include "sdtest.h"
#include "sdtest_tok.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/gguf.h"
#include "specdec/tokenizer.h"
#include "tokenizer/tok_internal.h"

#define GPT2 "vocab-tests/ggml-vocab-gpt-2.gguf"
#define DEEPSEEK "vocab-tests/ggml-vocab-deepseek-coder.gguf"
#define TS_TOKENIZER "models/tinystories-656k/tokenizer.json"

/* ---- helpers (the shared ones: util/sdtest_tok.c) --------------------------------------- */

static sd_tokenizer *load_ts(void) { return sdtest_load_hf_tokenizer(TS_TOKENIZER, 1, 2); }

static sd_tokenizer *from_json(const char *json, sd_status want) {
    sd_tokenizer *t = NULL;
    sd_status st = sd_tokenizer_from_hf_json(json, strlen(json), "test.json", -1, -1, &t);
    if (st != want) print_error("status %d (want %d): %s\n", (int)st, (int)want, sd_last_error());
    assert_int_equal(st, want);
    return t;
}

/* Every case gives exactly the ids llama.cpp (and HF) give, and decodes back to itself. */
static void run_vocab_cases(const char *vocab, int n_vocab) {
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(vocab);
    assert_int_equal(sd_tokenizer_kind_of(t), SD_TOKENIZER_BPE);
    assert_int_equal(sd_tokenizer_n_vocab(t), n_vocab);
    int failed = sdtest_vocab_case_failures(t, vocab, 1, vocab);
    sd_tokenizer_free(t);
    assert_int_equal(failed, 0);
}

/* ---- llama.cpp test vectors ------------------------------------------------------------ */

static void test_gpt2_cases(void **state) {
    (void)state;
    run_vocab_cases(GPT2, 50257);
}

static void test_deepseek_coder_cases(void **state) {
    (void)state;
    run_vocab_cases(DEEPSEEK, 32256);
}

static void test_gguf_metadata(void **state) {
    (void)state;
    sd_tokenizer *g = sdtest_load_gguf_tokenizer(GPT2);
    assert_int_equal(sd_tokenizer_bos(g), 50256);
    assert_int_equal(sd_tokenizer_eos(g), 50256);
    assert_int_equal(sd_tokenizer_add_bos(g), 0); /* gpt-2 family, no add_bos_token key */
    assert_int_equal(sd_tokenizer_token_type(g, 50256), SD_TOKEN_CONTROL);
    assert_string_equal(sd_tokenizer_piece(g, 50256, NULL), "<|endoftext|>");
    char buf[64];
    /* "Ġthe" is " the"; control tokens print nothing */
    int32_t the = -1;
    sdtest_expect_ids(g, " the", 0, (const int32_t[]){262}, 1);
    the = 262;
    assert_int_equal(sd_tokenizer_decode(g, -1, the, buf, sizeof buf), 4);
    assert_memory_equal(buf, " the", 4);
    assert_int_equal(sd_tokenizer_decode(g, -1, 50256, buf, sizeof buf), 0);
    /* add_bos prepends BOS when asked, even where the vocab does not add it by default */
    sdtest_expect_ids(g, " the", 1, (const int32_t[]){50256, 262}, 2);

    sd_tokenizer *d = sdtest_load_gguf_tokenizer(DEEPSEEK);
    assert_int_equal(sd_tokenizer_bos(d), 32013);
    assert_int_equal(sd_tokenizer_eos(d), 32014);
    assert_int_equal(sd_tokenizer_add_bos(d), 1);
    /* user-defined pieces are split out of the text and print verbatim */
    assert_int_equal(sd_tokenizer_token_type(d, 32019), SD_TOKEN_USER_DEFINED);
    sdtest_expect_ids(d, "<|User|>", 0, (const int32_t[]){32019}, 1);
    assert_int_equal(sd_tokenizer_decode(d, -1, 32019, buf, sizeof buf), 8);
    assert_memory_equal(buf, "<|User|>", 8);
    /* control tokens are not parsed out of text (parse_special off, like llama.cpp) */
    int n = 0;
    const char *bos_text = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
    int32_t *ids = sdtest_encode(d, bos_text, strlen(bos_text), 0, &n);
    assert_true(n > 1);
    for (int i = 0; i < n; i++) assert_int_not_equal(ids[i], 32013);
    free(ids);
    sd_tokenizer_free(g);
    sd_tokenizer_free(d);
}

/* deepseek-coder has no byte pieces for the bytes UTF-8 never uses (C0, C1, F5..FF): its
 * user-defined tokens "À", "ÿ", ... carry their stand-in text instead, so those bytes come
 * back as the characters (llama.cpp does the same; HF never sees such bytes). */
static int deepseek_can_hold(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0xC0 || c == 0xC1 || c >= 0xF5) return 0;
    }
    return 1;
}

/* Byte-level BPE keeps every byte: invalid UTF-8 and random bytes round-trip too. */
static void test_byte_level_roundtrip(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(GPT2);
    sd_tokenizer *d = sdtest_load_gguf_tokenizer(DEEPSEEK);
    int failed = 0;
    static const char *bad[] = {"\xff", "a\x80z", "\xc3", "\xc3(", "x\xe2\x96", "\xf0\x9f\x98",
                                "\xed\xa0\x80", "\xc0\xaf  \xfe", "\r\n\r\n \t\v\f", "  \xc2\xa0 x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        failed += !sdtest_roundtrip_ok(t, bad[i], strlen(bad[i]), 0, "gpt2 invalid utf-8");
        if (deepseek_can_hold(bad[i], strlen(bad[i])))
            failed += !sdtest_roundtrip_ok(d, bad[i], strlen(bad[i]), 0, "deepseek invalid utf-8");
    }
    uint32_t seed = 777;
    static const unsigned char alphabet[] = {' ', ' ', '\n', '\r', '\t', 'a', 'E', '3', '\'', 's',
                                             '<', '|', 0x80, 0xa0, 0xc2, 0xe2, 0xf0, 0xff, 0xe4, 0xb8};
    for (int k = 0; k < 300; k++) {
        char s[40];
        size_t n = sdtest_random_bytes(&seed, alphabet, sizeof alphabet, s, sizeof s);
        failed += !sdtest_roundtrip_ok(t, s, n, 0, "gpt2 random bytes");
        if (deepseek_can_hold(s, n)) failed += !sdtest_roundtrip_ok(d, s, n, 0, "deepseek random bytes");
    }
    sd_tokenizer_free(t);
    sd_tokenizer_free(d);
    assert_int_equal(failed, 0);
}

/* ---- TinyStories-656K tokenizer.json ---------------------------------------------------- */

/* Every paragraph of the corpus whose characters are all in the 2048-piece vocabulary comes
 * back exactly; the vocabulary has no <0xXX> pieces despite byte_fallback, so the others
 * (mojibake such as "â€™") hold the unknown token instead. */
static void test_tinystories_corpus(void **state) {
    (void)state;
    sd_tokenizer *t = load_ts();
    char *path = sdtest_shared_or_skip("corpora/tinystories.txt");
    size_t len = 0;
    char *text = sdtest_read_file(path, &len);
    free(path);
    assert_non_null(text);
    int failed = 0, exact = 0, with_unk = 0;
    size_t pos = 0;
    while (pos < len && failed <= 5) {
        const char *hit = sdtest_find(text + pos, len - pos, "\n\n", 2);
        size_t end = hit ? (size_t)(hit - text) : len;
        int n = 0;
        int32_t *ids = sdtest_encode(t, text + pos, end - pos, 1, &n);
        assert_int_equal(ids[0], 1);
        int unk = 0;
        for (int i = 0; i < n; i++) unk += ids[i] == 0;
        if (unk) {
            with_unk++;
        } else {
            size_t dl = 0;
            char *d = sdtest_decode_all(t, ids, n, &dl);
            if (dl != end - pos || memcmp(d, text + pos, dl) != 0) {
                print_error("tinystories: round trip differs\n");
                sdtest_print_text("  input  ", text + pos, end - pos);
                sdtest_print_text("  decoded", d, dl);
                failed++;
            }
            free(d);
            exact++;
        }
        free(ids);
        pos = end + 2;
    }
    free(text);
    printf("  tinystories-656k: %d paragraphs round-trip, %d hold <unk>\n", exact, with_unk);
    assert_int_equal(failed, 0);
    assert_int_equal(exact + with_unk, 4662);
    assert_int_equal(with_unk, 178);
    sd_tokenizer_free(t);
}

static void test_tinystories_pieces(void **state) {
    (void)state;
    sd_tokenizer *t = load_ts();
    assert_int_equal(sd_tokenizer_kind_of(t), SD_TOKENIZER_BPE);
    assert_int_equal(sd_tokenizer_n_vocab(t), 2048);
    assert_int_equal(sd_tokenizer_bos(t), 1);
    assert_int_equal(sd_tokenizer_eos(t), 2);
    assert_int_equal(sd_tokenizer_add_bos(t), 1); /* from the TemplateProcessing post-processor */
    assert_int_equal(sd_tokenizer_token_type(t, 0), SD_TOKEN_UNKNOWN);
    assert_int_equal(sd_tokenizer_token_type(t, 1), SD_TOKEN_CONTROL);
    assert_string_equal(sd_tokenizer_piece(t, 108, NULL), "\xe2\x96\x81the\xe2\x96\x81");
    /* the reference's greedy prompt: BOS alone, from empty text */
    sdtest_expect_ids(t, "", 1, (const int32_t[]){1}, 1);
    /* The prepended "▁" and the escaped spaces merge by rank across words: with no
     * pre-tokenizer the whole text is one word ("▁<|start_story|>Once▁upon..." pieces exist
     * for that reason); the merge list gives "Once upon a time" as below. */
    int n = 0;
    int32_t *ids = sdtest_encode(t, "Once upon a time", 16, 0, &n);
    size_t dl = 0;
    char *d = sdtest_decode_all(t, ids, n, &dl);
    assert_string_equal(d, "Once upon a time");
    free(d);
    free(ids);
    /* unknown characters fuse into one <unk> (fuse_unk) */
    sdtest_expect_ids(t, "#%", 0, (const int32_t[]){80, 0}, 2);
    sd_tokenizer_free(t);
}

/* ---- pair checks ------------------------------------------------------------------------ */

static void test_pair_checks(void **state) {
    (void)state;
    sd_tokenizer *g = sdtest_load_gguf_tokenizer(GPT2);
    sd_tokenizer *g2 = sdtest_load_gguf_tokenizer(GPT2);
    sd_tokenizer *d = sdtest_load_gguf_tokenizer(DEEPSEEK);
    sd_tokenizer *ts = load_ts();
    sd_tokenizer *ts2 = load_ts();
    assert_int_equal(sd_tokenizer_check_compatible(g, g2), SD_OK);
    assert_int_equal(sd_tokenizer_check_compatible(ts, ts2), SD_OK);
    assert_int_equal(sd_tokenizer_check_compatible(g, d), SD_ERR_MISMATCH);
    assert_non_null(strstr(sd_last_error(), "special ids"));
    /* a byte-level vocabulary against a "▁" one */
    assert_int_equal(sd_tokenizer_check_compatible(g, ts), SD_ERR_MISMATCH);
    assert_non_null(strstr(sd_last_error(), "byte-level"));
    sd_tokenizer_free(g);
    sd_tokenizer_free(g2);
    sd_tokenizer_free(d);
    sd_tokenizer_free(ts);
    sd_tokenizer_free(ts2);
}

/* ---- across formats ---------------------------------------------------------------------- */

static char *strndup_str(sd_str s) {
    char *c = malloc((size_t)s.len + 1);
    assert_non_null(c);
    memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = '\0';
    return c;
}

/* gpt-2's GGUF vocabulary rewritten as the tokenizer.json HF would have (ByteLevel
 * pre-tokenizer and decoder): every test vector gives the same ids, and the pair checks. */
static void test_hf_json_matches_gguf(void **state) {
    (void)state;
    char *path = sdtest_shared_or_skip(GPT2);
    size_t len = 0;
    void *buf = sdtest_read_file(path, &len);
    free(path);
    assert_non_null(buf);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, "gpt2", &g), SD_OK);
    const sd_gguf_kv *toks = sd_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const sd_gguf_kv *merges = sd_gguf_find_kv(g, "tokenizer.ggml.merges");
    assert_non_null(toks);
    assert_non_null(merges);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (uint64_t i = 0; i < toks->arr_n; i++) {
        char *k = strndup_str(toks->arr_strs[i]);
        cJSON_AddNumberToObject(vocab, k, (double)i);
        free(k);
    }
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        char *k = strndup_str(merges->arr_strs[i]);
        cJSON_AddItemToArray(ml, cJSON_CreateString(k));
        free(k);
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens"), *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 50256);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddTrueToObject(pre, "trim_offsets");
    cJSON_AddTrueToObject(pre, "use_regex");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "post_processor"), "type", "ByteLevel");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    sd_gguf_free(g);
    free(buf);

    sd_tokenizer *h = NULL;
    sd_status st = sd_tokenizer_from_hf_json(json, strlen(json), "gpt2 tokenizer.json", 50256, 50256, &h);
    free(json);
    if (st != SD_OK) print_error("%s\n", sd_last_error());
    assert_int_equal(st, SD_OK);
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(GPT2);
    assert_int_equal(sd_tokenizer_check_compatible(t, h), SD_OK);
    assert_int_equal(sd_tokenizer_add_bos(h), 0);
    sdtest_vocab_cases *c = sdtest_load_vocab_cases(GPT2);
    int failed = 0;
    for (int i = 0; i < c->n; i++) failed += !sdtest_vocab_case_ok(h, c, i, "tokenizer.json");
    sdtest_free_vocab_cases(c);
    sd_tokenizer_free(t);
    sd_tokenizer_free(h);
    assert_int_equal(failed, 0);
}

/* TinyStories-656K's pieces as a GGUF "llama" (SentencePiece) vocabulary, as llama.cpp's
 * converter would write them: a SentencePiece-style BPE tokenizer.json pairs with it, and
 * both decode ids to the same text. */
static void test_spm_pairs_with_byte_fallback_bpe(void **state) {
    (void)state;
    sd_tokenizer *hf = load_ts();
    const int n = sd_tokenizer_n_vocab(hf);
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    int32_t *types = malloc((size_t)n * sizeof *types);
    assert_non_null(pieces);
    assert_non_null(types);
    for (int32_t i = 0; i < n; i++) {
        pieces[i] = sd_tokenizer_piece(hf, i, NULL);
        types[i] = sd_tokenizer_token_type(hf, i);
    }
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(sd_gguf_set_str(w, "tokenizer.ggml.model", "llama"), SD_OK);
    assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n), SD_OK);
    sd_tokenizer *spm = NULL;
    assert_int_equal(sdtest_tokenizer_from_writer(w, "ts.gguf", &spm), SD_OK);
    assert_int_equal(sd_tokenizer_kind_of(spm), SD_TOKENIZER_SPM);
    assert_int_equal(sd_tokenizer_check_compatible(hf, spm), SD_OK);
    assert_int_equal(sd_tokenizer_check_compatible(spm, hf), SD_OK);
    const int32_t story[] = {1, 147, 201, 282, 215, 286, 598, 1662, 356, 499, 826, 1363, 1145};
    const int ns = (int)(sizeof story / sizeof story[0]);
    size_t la = 0, lb = 0;
    char *a = sdtest_decode_all(hf, story, ns, &la), *b = sdtest_decode_all(spm, story, ns, &lb);
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* and a byte-level vocabulary does not pair with either */
    sd_tokenizer *g2 = sdtest_load_gguf_tokenizer(GPT2);
    assert_int_equal(sd_tokenizer_check_compatible(spm, g2), SD_ERR_MISMATCH);
    assert_non_null(strstr(sd_last_error(), "piece encoding"));
    sd_tokenizer_free(g2);
    sd_tokenizer_free(spm);
    sd_tokenizer_free(hf);
    free(pieces);
    free(types);
}

/* ---- pre-tokenizer splits -------------------------------------------------------------- */

typedef struct {
    char buf[256];
    size_t n;
} joined;

static void join_word(const char *w, size_t n, void *u) {
    joined *j = u;
    if (j->n && j->n < sizeof j->buf) j->buf[j->n++] = '|';
    size_t k = n < sizeof j->buf - 1 - j->n ? n : sizeof j->buf - 1 - j->n;
    memcpy(j->buf + j->n, w, k);
    j->n += k;
    j->buf[j->n] = '\0';
}

typedef struct {
    const char *text, *want; /* words joined by '|' */
} split_case;

static void check_splits(const sd_tokenizer *t, const split_case *c, size_t n, const char *name) {
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        joined j = {{0}, 0};
        assert_int_equal(sd_bpe_pretokenize(t, c[i].text, strlen(c[i].text), join_word, &j), SD_OK);
        if (strcmp(j.buf, c[i].want) != 0) {
            print_error("%s split differs\n", name);
            sdtest_print_text("  input", c[i].text, strlen(c[i].text));
            sdtest_print_text("  want ", c[i].want, strlen(c[i].want));
            sdtest_print_text("  got  ", j.buf, j.n);
            failed++;
        }
    }
    assert_int_equal(failed, 0);
}

/* A byte-level tokenizer of the 256 byte pieces whose pre-tokenizer is one Split regex,
 * built with cJSON so the pattern is escaped for JSON exactly as HF writes it. */
static sd_tokenizer *split_tokenizer(const char *regex) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) { /* GPT-2's byte characters */
        int cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b : -1;
        static int next = 0x100;
        if (b == 0) next = 0x100;
        if (cp < 0) cp = next++;
        char u[4] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
        }
        cJSON_AddNumberToObject(vocab, u, b);
    }
    cJSON_AddArrayToObject(model, "merges");
    cJSON *seq = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", regex);
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddFalseToObject(split, "invert");
    cJSON_AddItemToArray(list, split);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddFalseToObject(bl, "add_prefix_space");
    cJSON_AddFalseToObject(bl, "use_regex");
    cJSON_AddItemToArray(list, bl);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    sd_tokenizer *t = from_json(json, SD_OK);
    free(json);
    return t;
}

#define LLAMA3_RE                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Expected words from Python's `regex` module on the original patterns (HF semantics). The
 * llama-bpe and qwen2 vocabularies are too large for ../shared, so their splitters are
 * checked here instead of through ids. */
static void test_pretokenizer_splits(void **state) {
    (void)state;
    static const split_case llama3[] = {
        {"Hello world", "Hello| world"},
        {"I'm  fine\n\n  ok", "I|'m| | fine|\n\n| | ok"},
        {"1234567 89", "123|456|7| |89"},
        {"  \t\n x", "  \t\n| x"},
        {"don'T 'S", "don|'T| '|S"},
        {"abc!!!\n\n def", "abc|!!!\n\n| def"},
        {"\xc3\xbc\xc3\xb1\xc3\xad \xe4\xbd\xa0\xe5\xa5\xbd 123", "\xc3\xbc\xc3\xb1\xc3\xad| \xe4\xbd\xa0\xe5\xa5\xbd| |123"},
        {"a\r\n\r\nb", "a|\r\n\r\n|b"},
        {"   ", "   "},
        {"x  y", "x| | y"},
        {"(a+b)\n\n\t\tc;", "(a|+b|)\n\n|\t|\tc|;"},
    };
    static const split_case qwen2[] = {
        {"1234567 89", "1|2|3|4|5|6|7| |8|9"},
        {"\xc3\xbc\xc3\xb1\xc3\xad \xe4\xbd\xa0\xe5\xa5\xbd 123", "\xc3\xbc\xc3\xb1\xc3\xad| \xe4\xbd\xa0\xe5\xa5\xbd| |1|2|3"},
        {"don'T 'S", "don|'T| '|S"},
        {"(a+b)\n\n\t\tc;", "(a|+b|)\n\n|\t|\tc|;"},
    };
    static const split_case gpt2[] = {
        {"I'm  fine\n\n  ok", "I|'m| | fine|\n\n | ok"},
        {"1234567 89", "1234567| 89"},
        {"don'T 'S", "don|'|T| '|S"},
        {"abc!!!\n\n def", "abc|!!!|\n\n| def"},
        {"a\r\n\r\nb", "a|\r\n\r|\n|b"},
        {"(a+b)\n\n\t\tc;", "(|a|+|b|)|\n\n\t|\t|c|;"},
    };
    sd_tokenizer *t = split_tokenizer(LLAMA3_RE);
    check_splits(t, llama3, sizeof llama3 / sizeof llama3[0], "llama3");
    sd_tokenizer_free(t);
    t = split_tokenizer(QWEN2_RE);
    check_splits(t, qwen2, sizeof qwen2 / sizeof qwen2[0], "qwen2");
    sd_tokenizer_free(t);
    t = split_tokenizer(GPT2_RE);
    check_splits(t, gpt2, sizeof gpt2 / sizeof gpt2[0], "gpt2");
    sd_tokenizer_free(t);
}

/* ---- merge rules on small tokenizer.json files --------------------------------------- */

#define HEAD "{\"model\":{\"type\":\"BPE\","

static void test_merge_rules(void **state) {
    (void)state;
    /* rank order, not piece order: "b c" (rank 0) before "a b" (rank 1) */
    sd_tokenizer *t = from_json(HEAD "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5},"
                                     "\"merges\":[\"b c\",\"a b\",\"a bc\"]}}",
                                SD_OK);
    sdtest_expect_ids(t, "abc", 0, (const int32_t[]){5}, 1);
    sdtest_expect_ids(t, "abab", 0, (const int32_t[]){3, 3}, 2);
    sdtest_expect_ids(t, "cab", 0, (const int32_t[]){2, 3}, 2);
    sd_tokenizer_free(t);
    /* equal ranks merge leftmost first; merges given as pairs (the newer format) */
    t = from_json(HEAD "\"vocab\":{\"a\":0,\"aa\":1},\"merges\":[[\"a\",\"a\"]]}}", SD_OK);
    sdtest_expect_ids(t, "aaa", 0, (const int32_t[]){1, 0}, 2);
    sdtest_expect_ids(t, "aaaa", 0, (const int32_t[]){1, 1}, 2);
    sd_tokenizer_free(t);
    /* ignore_merges: a word that is a token stays whole */
    const char *im = HEAD "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4},\"merges\":[\"a b\"],"
                          "\"ignore_merges\":%s}}";
    char json[256];
    snprintf(json, sizeof json, im, "false");
    t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "abc", 0, (const int32_t[]){3, 2}, 2);
    sd_tokenizer_free(t);
    snprintf(json, sizeof json, im, "true");
    t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "abc", 0, (const int32_t[]){4}, 1);
    sd_tokenizer_free(t);

    /* byte fallback, unknown fusing, user-defined tokens, BOS from the template */
    t = from_json(HEAD "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"a\":2,\"<0xC3>\":3,\"<0xA9>\":4,\"\xe2\x96\x81\":5,"
                       "\"\xe2\x96\x81" "a\":6},"
                       "\"merges\":[\"\xe2\x96\x81 a\"],\"byte_fallback\":true,\"unk_token\":\"<unk>\","
                       "\"fuse_unk\":true},"
                       "\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true},"
                       "{\"id\":7,\"content\":\"<sep>\",\"special\":false}],"
                       "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
                       "\"prepend\":\"\xe2\x96\x81\"},"
                       "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
                       "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken"
                       "\":{\"id\":\"<s>\",\"type_id\":0}},"
                       "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id"
                       "\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
                       "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
                       "\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
                       "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content"
                       "\":\" \",\"start\":1,\"stop\":0}]}}",
                  SD_OK);
    assert_int_equal(sd_tokenizer_add_bos(t), 1);
    assert_int_equal(sd_tokenizer_bos(t), 1);
    assert_int_equal(sd_tokenizer_token_type(t, 3), SD_TOKEN_BYTE);
    assert_int_equal(sd_tokenizer_token_type(t, 7), SD_TOKEN_USER_DEFINED);
    sdtest_expect_ids(t, "a \xc3\xa9", 1, (const int32_t[]){1, 6, 5, 3, 4}, 5);
    sdtest_expect_ids(t, "a\xe2\x82\xac\xe2\x82\xac a", 0, (const int32_t[]){6, 0, 6}, 3); /* "€€": one <unk> */
    sdtest_expect_ids(t, "a<sep>a", 0, (const int32_t[]){6, 7, 6}, 3);
    sdtest_expect_ids(t, "<s>", 0, (const int32_t[]){5, 0}, 2); /* control: not parsed from text */
    int n = 0;
    int32_t *ids = sdtest_encode(t, "a \xc3\xa9<sep>", 9, 1, &n);
    size_t dl = 0;
    char *d = sdtest_decode_all(t, ids, n, &dl);
    assert_string_equal(d, "a \xc3\xa9<sep>");
    free(d);
    free(ids);
    sd_tokenizer_free(t);

    /* byte-level with ByteLevel's own regex and add_prefix_space */
    const char *bl = HEAD "\"vocab\":{\"H\":0,\"i\":1,\"\xc4\xa0\":2,\"\xc4\xa0i\":3,\"Hi\":4},"
                          "\"merges\":[\"H i\",\"\xc4\xa0 i\"]},"
                          "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":%s,"
                          "\"use_regex\":true},"
                          "\"decoder\":{\"type\":\"ByteLevel\"}}";
    snprintf(json, sizeof json, bl, "false");
    t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "Hi i", 0, (const int32_t[]){4, 3}, 2);
    sd_tokenizer_free(t);
    snprintf(json, sizeof json, bl, "true");
    t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "Hi i", 0, (const int32_t[]){2, 4, 3}, 3);
    sd_tokenizer_free(t);
}

/* HF Metaspace (the newer SentencePiece-style tokenizer.json): spaces become "▁", a prefix
 * only where the text does not start with one, "first" only at the start of the text, and
 * split cuts a piece before each "▁". */
static void test_metaspace(void **state) {
    (void)state;
    const char *fmt = HEAD "\"vocab\":{\"<unk>\":0,\"a\":1,\"\xe2\x96\x81\":2,\"\xe2\x96\x81" "a\":3,\"a\xe2\x96\x81\":4},"
                           "\"merges\":[\"a \xe2\x96\x81\",\"\xe2\x96\x81 a\"],\"unk_token\":\"<unk>\"},"
                           "\"added_tokens\":[{\"id\":5,\"content\":\"<sep>\",\"special\":false}],"
                           "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\","
                           "\"prepend_scheme\":\"%s\",\"split\":%s},\"decoder\":{\"type\":\"Metaspace\"}}";
    char json[1024];
    snprintf(json, sizeof json, fmt, "first", "false");
    sd_tokenizer *t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "a", 0, (const int32_t[]){3}, 1);
    sdtest_expect_ids(t, " a", 0, (const int32_t[]){3}, 1);          /* one "▁", not two */
    sdtest_expect_ids(t, "a a", 0, (const int32_t[]){2, 4, 1}, 3); /* "▁a▁a": "a▁" outranks "▁a" */
    sdtest_expect_ids(t, "a<sep>a", 0, (const int32_t[]){3, 5, 1}, 3); /* "first": no prefix after <sep> */
    sd_tokenizer_free(t);
    snprintf(json, sizeof json, fmt, "always", "true");
    t = from_json(json, SD_OK);
    sdtest_expect_ids(t, "a a", 0, (const int32_t[]){3, 3}, 2);      /* split before each "▁" */
    sdtest_expect_ids(t, "a<sep>a", 0, (const int32_t[]){3, 5, 3}, 3);
    int n = 0;
    int32_t *ids = sdtest_encode(t, "a a", 3, 0, &n);
    size_t dl = 0;
    char *d = sdtest_decode_all(t, ids, n, &dl);
    assert_string_equal(d, "a a");
    free(d);
    free(ids);
    sd_tokenizer_free(t);
}

/* ---- malformed and unsupported tokenizer.json ----------------------------------------- */

static void expect_fail_json(const char *json, sd_status want, const char *needle) {
    sd_tokenizer *t = (sd_tokenizer *)0x1;
    sd_status st = sd_tokenizer_from_hf_json(json, strlen(json), "bad.json", -1, -1, &t);
    if (st != want || !strstr(sd_last_error(), needle)) {
        print_error("status %d (want %d), message \"%s\" (want \"%s\" in it)\n", (int)st, (int)want,
                    sd_last_error(), needle);
        fail();
    }
    assert_null(t);
}

static void test_bad_json(void **state) {
    (void)state;
    expect_fail_json("{\"model\":", SD_ERR_FORMAT, "line 1, column 10: invalid JSON: expected a value, got the end of the file");
    expect_fail_json("{}", SD_ERR_FORMAT, "no \"model\"");
    expect_fail_json("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", SD_ERR_UNSUPPORTED, "\"Unigram\"");
    expect_fail_json(HEAD "\"vocab\":{\"a\":-1},\"merges\":[]}}", SD_ERR_FORMAT, "model.vocab[\"a\"]");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0.5},\"merges\":[]}}", SD_ERR_FORMAT, "not an id");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", SD_ERR_FORMAT, "both");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0}}}", SD_ERR_FORMAT, "model.merges");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", SD_ERR_FORMAT, "model.merges[0]");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}", SD_ERR_FORMAT, "unk_token");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Lowercase\"}}",
                     SD_ERR_UNSUPPORTED, "normalizer type \"Lowercase\"");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
                          "\"pattern\":{\"Regex\":\"[a-z]+\"},\"behavior\":\"Isolated\",\"invert\":false}}",
                     SD_ERR_UNSUPPORTED, "'[a-z]+'");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}",
                     SD_ERR_UNSUPPORTED, "\"Whitespace\"");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[]},\"decoder\":{\"type\":\"ByteLevel\"}}",
                     SD_ERR_UNSUPPORTED, "decoder ByteLevel");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":{\"type\":\"TemplateProcessing\","
                          "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}]}}",
                     SD_ERR_FORMAT, "\"<s>\"");
    expect_fail_json(HEAD "\"vocab\":{\"a\":0},\"merges\":[],\"continuing_subword_prefix\":\"##\"}}",
                     SD_ERR_UNSUPPORTED, "continuing_subword_prefix");
    sd_tokenizer *t = (sd_tokenizer *)0x1;
    assert_int_equal(sd_tokenizer_load_hf_json("/nonexistent/tokenizer.json", -1, -1, &t), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "/nonexistent/tokenizer.json"));
    assert_null(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_cases),
        cmocka_unit_test(test_deepseek_coder_cases),
        cmocka_unit_test(test_gguf_metadata),
        cmocka_unit_test(test_byte_level_roundtrip),
        cmocka_unit_test(test_tinystories_corpus),
        cmocka_unit_test(test_tinystories_pieces),
        cmocka_unit_test(test_pair_checks),
        cmocka_unit_test(test_hf_json_matches_gguf),
        cmocka_unit_test(test_spm_pairs_with_byte_fallback_bpe),
        cmocka_unit_test(test_pretokenizer_splits),
        cmocka_unit_test(test_merge_rules),
        cmocka_unit_test(test_metaspace),
        cmocka_unit_test(test_bad_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
