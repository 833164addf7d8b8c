/* Tokenizer tests: llama.cpp's SPM test vectors through the GGUF and llama2.c vocabularies,
 * round trips over TinyStories, known stories260K ids, merge rules, and malformed inputs. */
#include "sdtest.h"
#include "sdtest_ref.h"
#include "sdtest_tok.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/gguf.h"
#include "specdec/tokenizer.h"

#define VOCAB_DIR "vocab-tests/ggml-vocab-llama-spm.gguf"
#define LLAMA2_BIN "tokenizers/llama2/tokenizer.bin"
#define TOK512_BIN "models/stories260K/tok512.bin"

/* ---- helpers --------------------------------------------------------------------------- */

static sd_tokenizer *load_llama2c(const char *rel, int vocab) { return sdtest_load_llama2c_tokenizer(rel, vocab); }

static void run_vocab_cases(const sd_tokenizer *t, const char *name) {
    sdtest_vocab_cases *c = sdtest_load_vocab_cases(VOCAB_DIR);
    assert_int_equal(c->n, 46);
    int failed = 0;
    for (int i = 0; i < c->n; i++) failed += !sdtest_vocab_case_ok(t, c, i, name);
    sdtest_free_vocab_cases(c);
    assert_int_equal(failed, 0);
}

/* ---- llama.cpp test vectors ------------------------------------------------------------ */

static void test_vocab_cases_gguf(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(VOCAB_DIR);
    assert_int_equal(sd_tokenizer_kind_of(t), SD_TOKENIZER_SPM);
    assert_int_equal(sd_tokenizer_n_vocab(t), 32000);
    assert_int_equal(sd_tokenizer_bos(t), 1);
    assert_int_equal(sd_tokenizer_eos(t), 2);
    assert_int_equal(sd_tokenizer_add_bos(t), 1);
    run_vocab_cases(t, "gguf");
    sd_tokenizer_free(t);
}

static void test_vocab_cases_llama2c(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(LLAMA2_BIN, 32000);
    run_vocab_cases(t, "tokenizer.bin");
    sd_tokenizer_free(t);
}

/* The llama2.c pieces are rewritten to SentencePiece form, so both loaders agree id by id. */
static void test_llama2c_matches_gguf(void **state) {
    (void)state;
    sd_tokenizer *a = load_llama2c(LLAMA2_BIN, 32000);
    sd_tokenizer *b = sdtest_load_gguf_tokenizer(VOCAB_DIR);
    assert_int_equal(sd_tokenizer_check_compatible(a, b), SD_OK);
    for (int32_t id = 0; id < 32000; id++)
        assert_int_equal(sd_tokenizer_token_type(a, id), sd_tokenizer_token_type(b, id));
    size_t n;
    assert_string_equal(sd_tokenizer_piece(a, 1, &n), "<s>");
    assert_int_equal(n, 3);
    assert_string_equal(sd_tokenizer_piece(a, 259, NULL), "\xe2\x96\x81\xe2\x96\x81");
    assert_string_equal(sd_tokenizer_piece(a, 13, NULL), "<0x0A>");
    assert_int_equal(sd_tokenizer_token_type(a, 13), SD_TOKEN_BYTE);
    assert_int_equal(sd_tokenizer_token_type(a, 0), SD_TOKEN_UNKNOWN);
    assert_int_equal(sd_tokenizer_token_type(a, 2), SD_TOKEN_CONTROL);
    assert_null(sd_tokenizer_piece(a, 32000, NULL));
    assert_int_equal(sd_tokenizer_token_type(a, -1), -1);
    sd_tokenizer_free(a);
    sd_tokenizer_free(b);
}

/* ---- round trips ----------------------------------------------------------------------- */

/* Every paragraph of the corpus (4,662 stories, ~0.9 MB) through encode and decode. */
static void roundtrip_corpus(const sd_tokenizer *t, const char *name) {
    size_t len = 0;
    char *text = sdtest_load_corpus(&len);
    int failed = 0, paragraphs = 0;
    size_t pos = 0;
    while (pos < len) {
        const char *hit = sdtest_find(text + pos, len - pos, "\n\n", 2);
        size_t end = hit ? (size_t)(hit - text) : len;
        failed += !sdtest_roundtrip_ok(t, text + pos, end - pos, 1, name);
        paragraphs++;
        pos = end + 2;
        if (failed > 5) break;
    }
    free(text);
    assert_int_equal(failed, 0);
    assert_true(paragraphs > 4000);
}

static void test_roundtrip_corpus_llama2(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(LLAMA2_BIN, 32000);
    roundtrip_corpus(t, "llama2");
    sd_tokenizer_free(t);
}

static void test_roundtrip_corpus_tok512(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(TOK512_BIN, 512);
    roundtrip_corpus(t, "tok512");
    sd_tokenizer_free(t);
}

/* All 46 llama.cpp inputs round-trip (none is excluded), whitespace-only ones included: the
 * space prefix is the only space decode removes, and characters outside the vocabulary come
 * back from byte tokens. So does any byte string without a literal U+2581, malformed UTF-8
 * included; llama.cpp itself fails that for a lead byte before a space ("\xe2 x"), which is
 * why spm.c checks continuation bytes. */
static void test_roundtrip_vocab_cases(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(VOCAB_DIR);
    sd_tokenizer *small = load_llama2c(TOK512_BIN, 512);
    sdtest_vocab_cases *c = sdtest_load_vocab_cases(VOCAB_DIR);
    int failed = 0;
    for (int i = 0; i < c->n; i++) {
        failed += !sdtest_roundtrip_ok(t, c->text[i], c->len[i], 1, "llama-spm");
        failed += !sdtest_roundtrip_ok(small, c->text[i], c->len[i], 1, "tok512");
    }
    /* Invalid UTF-8: lone continuation bytes, truncated and over-long sequences. */
    static const char *bad[] = {"\xff", "a\x80z", "\xc3", "\xc3(", "x\xe2\x96", "\xf0\x9f\x98",
                                "\xed\xa0\x80", "\xc0\xaf  \xfe"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        failed += !sdtest_roundtrip_ok(t, bad[i], strlen(bad[i]), 1, "llama-spm invalid utf-8");
        failed += !sdtest_roundtrip_ok(small, bad[i], strlen(bad[i]), 1, "tok512 invalid utf-8");
    }
    /* Random byte strings (fixed seed) biased towards spaces, newlines and UTF-8 lead and
     * continuation bytes; only a literal U+2581 would not survive, as it decodes to ' '. */
    uint32_t seed = 12345;
    static const unsigned char alphabet[] = {' ', ' ', '\n', 'a', 'e', 't', '3', '<', '>',
                                             0x80, 0x96, 0xbf, 0xc3, 0xe2, 0xf0, 0xff};
    for (int k = 0; k < 400; k++) {
        char s[48];
        size_t n = sdtest_random_bytes(&seed, alphabet, sizeof alphabet, s, sizeof s);
        if (sdtest_find(s, n, "\xe2\x96\x81", 3)) continue;
        failed += !sdtest_roundtrip_ok(t, s, n, 1, "llama-spm random bytes");
        failed += !sdtest_roundtrip_ok(small, s, n, 1, "tok512 random bytes");
    }
    sdtest_free_vocab_cases(c);
    sd_tokenizer_free(t);
    sd_tokenizer_free(small);
    assert_int_equal(failed, 0);
}

/* ---- known ids ------------------------------------------------------------------------- */

static void test_stories260k_ids(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(TOK512_BIN, 512);
    sd_tokenizer *g = sdtest_load_gguf_tokenizer("models/stories260K/stories260K.gguf");
    assert_int_equal(sd_tokenizer_check_compatible(t, g), SD_OK);

    const char *once = "Once upon a time";
    const int32_t want[] = {1, 403, 407, 261, 378};
    int n = 0;
    int32_t *ids = sdtest_encode(t, once, strlen(once), 1, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    free(ids);

    /* The other prompts and the greedy continuations of reference/stories260K.json. */
    cJSON *root = sdtest_load_reference("reference/stories260K.json");
    const cJSON *greedy = cJSON_GetObjectItemCaseSensitive(root, "greedy");
    assert_true(cJSON_IsArray(greedy));
    int checked = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, greedy) {
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(item, "prompt");
        const cJSON *ptoks = cJSON_GetObjectItemCaseSensitive(item, "prompt_tokens");
        const cJSON *gtoks = cJSON_GetObjectItemCaseSensitive(item, "greedy_tokens");
        const cJSON *gtext = cJSON_GetObjectItemCaseSensitive(item, "greedy_text");
        assert_true(cJSON_IsString(prompt) && cJSON_IsArray(ptoks));
        assert_true(cJSON_IsArray(gtoks) && cJSON_IsString(gtext));
        const char *p = prompt->valuestring;
        for (int pass = 0; pass < 2; pass++) {
            ids = sdtest_encode(pass ? g : t, p, strlen(p), 1, &n);
            assert_int_equal(n, cJSON_GetArraySize(ptoks));
            for (int i = 0; i < n; i++)
                assert_int_equal(ids[i], cJSON_GetArrayItem(ptoks, i)->valueint);
            free(ids);
        }
        /* The continuation decodes to the reference text after the prompt's last token. */
        int ng = cJSON_GetArraySize(gtoks);
        int32_t *seq = malloc((size_t)(ng + 1) * sizeof *seq);
        assert_non_null(seq);
        seq[0] = cJSON_GetArrayItem(ptoks, cJSON_GetArraySize(ptoks) - 1)->valueint;
        for (int i = 0; i < ng; i++) seq[i + 1] = cJSON_GetArrayItem(gtoks, i)->valueint;
        char buf[64];
        size_t o = 0;
        char *text = malloc((size_t)ng * 64 + 1);
        assert_non_null(text);
        for (int i = 1; i <= ng; i++) {
            int k = sd_tokenizer_decode(t, seq[i - 1], seq[i], buf, sizeof buf);
            assert_true(k >= 0);
            memcpy(text + o, buf, (size_t)k);
            o += (size_t)k;
        }
        text[o] = '\0';
        /* The reference trims the space that separates the continuation from the prompt. */
        const char *got = text[0] == ' ' ? text + 1 : text;
        assert_string_equal(got, gtext->valuestring);
        free(text);
        free(seq);
        checked++;
    }
    assert_int_equal(checked, 4);
    cJSON_Delete(root);
    sd_tokenizer_free(t);
    sd_tokenizer_free(g);
}

static void test_llama2_known_ids(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(LLAMA2_BIN, 32000);
    struct {
        const char *text;
        int bos;
        int32_t want[8];
        int n;
    } cases[] = {
        {"", 1, {1}, 1},                        /* empty text: BOS only, no space prefix */
        {"", 0, {0}, 0},
        {"\xff", 0, {29871, 258}, 2},           /* a stray byte falls back to <0xFF> */
        /* a lead byte without its continuation stands alone; llama.cpp would take "\xc3("
         * as one symbol and emit <0xC3> <0x28> (ids 198 43), see char_len in spm.c */
        {"\xc3(", 0, {29871, 198, 29898}, 3},
        {"\xe2 x", 0, {29871, 229, 921}, 3}, /* <0xE2> ▁x: the space survives */
        {"\xc3\xa9", 0, {904}, 1}, /* "▁é" is one piece */
        {"Hello world", 1, {1, 15043, 3186}, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sdtest_expect_ids(t, cases[i].text, cases[i].bos, cases[i].want, cases[i].n);
    }

    /* decode: BOS/EOS print nothing, the first word loses its prefix space, bytes are raw */
    char buf[64];
    assert_int_equal(sd_tokenizer_decode(t, -1, 1, buf, sizeof buf), 0);
    assert_int_equal(sd_tokenizer_decode(t, 1, 15043, buf, sizeof buf), 5);
    assert_memory_equal(buf, "Hello", 5);
    assert_int_equal(sd_tokenizer_decode(t, 15043, 15043, buf, sizeof buf), 6);
    assert_memory_equal(buf, " Hello", 6);
    assert_int_equal(sd_tokenizer_decode(t, 15043, 13, buf, sizeof buf), 1);
    assert_int_equal(buf[0], '\n');
    assert_int_equal(sd_tokenizer_decode(t, 15043, 2, buf, sizeof buf), 0);
    /* a short buffer gets a prefix and the count written */
    assert_int_equal(sd_tokenizer_decode(t, 15043, 15043, buf, 3), 3);
    assert_memory_equal(buf, " He", 3);
    assert_true(sd_tokenizer_max_piece_len(t) >= 16);
    sd_tokenizer_free(t);
}

/* ---- merge rules on a hand-made vocabulary ---------------------------------------------- */

#define SP "\xe2\x96\x81"

typedef struct {
    const char *model;           /* NULL: key absent */
    const char *const *tokens;   /* NULL: key absent */
    uint64_t n_tokens;
    const float *scores;         /* NULL: key absent */
    uint64_t n_scores;
    const int32_t *types;        /* NULL: key absent */
    uint64_t n_types;
    int set_bos;
    uint32_t bos;
    int set_pad;
    uint32_t pad;
    int space_prefix; /* -1: key absent */
    int add_bos;      /* -1: key absent */
} gguf_spec;

static sd_status tok_from_spec(const gguf_spec *sp, sd_tokenizer **out) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    if (sp->model) assert_int_equal(sd_gguf_set_str(w, "tokenizer.ggml.model", sp->model), SD_OK);
    if (sp->tokens)
        assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", sp->tokens, sp->n_tokens), SD_OK);
    if (sp->scores)
        assert_int_equal(sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", sp->scores, sp->n_scores), SD_OK);
    if (sp->types)
        assert_int_equal(sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", sp->types, sp->n_types), SD_OK);
    if (sp->set_bos) assert_int_equal(sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", sp->bos), SD_OK);
    if (sp->set_pad) assert_int_equal(sd_gguf_set_u32(w, "tokenizer.ggml.padding_token_id", sp->pad), SD_OK);
    if (sp->space_prefix >= 0)
        assert_int_equal(sd_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", sp->space_prefix), SD_OK);
    if (sp->add_bos >= 0)
        assert_int_equal(sd_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", sp->add_bos), SD_OK);
    *out = (sd_tokenizer *)0x1; /* must be reset to NULL on failure */
    sd_status st = sdtest_tokenizer_from_writer(w, "spec.gguf", out);
    if (st != SD_OK) assert_null(*out);
    return st;
}

static const char *const TINY[] = {"<unk>", "<s>", "</s>", SP, "a", "b", SP "a", "ab", SP "ab", "aa"};
static const float TINY_SCORES[] = {0, 0, 0, -5, -6, -7, -1, -2, -3, -4};

static gguf_spec tiny_spec(void) {
    gguf_spec sp = {"llama", TINY, 10, TINY_SCORES, 10, NULL, 0, 0, 0, 0, 0, -1, -1};
    return sp;
}

static void test_merge_rules(void **state) {
    (void)state;
    gguf_spec sp = tiny_spec();
    sd_tokenizer *t = NULL;
    assert_int_equal(tok_from_spec(&sp, &t), SD_OK);
    /* types absent: inferred from the default special ids */
    assert_int_equal(sd_tokenizer_token_type(t, 0), SD_TOKEN_UNKNOWN);
    assert_int_equal(sd_tokenizer_token_type(t, 1), SD_TOKEN_CONTROL);
    assert_int_equal(sd_tokenizer_token_type(t, 4), SD_TOKEN_NORMAL);
    /* "▁ab": ▁a (-1) beats ab (-2), then ▁a+b forms ▁ab */
    sdtest_expect_ids(t, "ab", 1, (const int32_t[]){1, 8}, 2);
    /* 'c' has no piece and no byte token: the unknown token stands in */
    sdtest_expect_ids(t, "abc", 0, (const int32_t[]){8, 0}, 2);
    sdtest_expect_ids(t, "b a", 0, (const int32_t[]){3, 5, 6}, 3);
    sd_tokenizer_free(t);

    /* Equal scores merge leftmost first: "aaa" -> aa a, not a aa. */
    sp.space_prefix = 0;
    sp.add_bos = 0;
    assert_int_equal(tok_from_spec(&sp, &t), SD_OK);
    assert_int_equal(sd_tokenizer_add_bos(t), 0);
    sdtest_expect_ids(t, "aaa", 0, (const int32_t[]){9, 4}, 2);
    sdtest_expect_ids(t, "aaaa", 0, (const int32_t[]){9, 9}, 2);
    sdtest_expect_ids(t, "ab", 0, (const int32_t[]){7}, 1);
    char buf[16];
    assert_int_equal(sd_tokenizer_decode(t, -1, 6, buf, sizeof buf), 2); /* no prefix to drop */
    assert_memory_equal(buf, " a", 2);
    sd_tokenizer_free(t);
}

/* ---- malformed inputs ------------------------------------------------------------------ */

static void expect_fail(sd_status got, sd_status want, const char *needle) {
    if (got != want || !strstr(sd_last_error(), needle)) {
        print_error("status %d (want %d), message \"%s\" (want \"%s\" in it)\n", (int)got,
                    (int)want, sd_last_error(), needle);
        fail();
    }
}

static void test_bad_llama2c(void **state) {
    (void)state;
    sd_tokenizer *t = (sd_tokenizer *)0x1;
    expect_fail(sd_tokenizer_load_llama2c("/nonexistent/tok.bin", 512, &t), SD_ERR_IO,
                "/nonexistent/tok.bin");
    assert_null(t);

    char *path = sdtest_shared_or_skip(TOK512_BIN);
    size_t len = 0;
    uint8_t *buf = sdtest_read_file(path, &len);
    free(path);
    assert_non_null(buf);
    assert_int_equal(sd_tokenizer_from_llama2c_buf(buf, len, 512, "tok512", &t), SD_OK);
    sd_tokenizer_free(t);

    /* every truncation point fails cleanly */
    for (size_t cut = 0; cut < len; cut += (cut < 64 ? 1 : 97)) {
        t = (sd_tokenizer *)0x1;
        expect_fail(sd_tokenizer_from_llama2c_buf(buf, cut, 512, "tok512", &t), SD_ERR_FORMAT, "tok512");
        assert_null(t);
    }
    expect_fail(sd_tokenizer_from_llama2c_buf(buf, len - 1, 512, "tok512", &t), SD_ERR_FORMAT,
                "tok512");
    /* a vocab_size that does not match the file */
    expect_fail(sd_tokenizer_from_llama2c_buf(buf, len, 511, "tok512", &t), SD_ERR_FORMAT, "vocab_size");
    expect_fail(sd_tokenizer_from_llama2c_buf(buf, len, 513, "tok512", &t), SD_ERR_FORMAT, "truncated");
    expect_fail(sd_tokenizer_from_llama2c_buf(buf, len, 2, "tok512", &t), SD_ERR_INVALID_ARG, "vocab_size");
    expect_fail(sd_tokenizer_from_llama2c_buf(buf, len, -7, "tok512", &t), SD_ERR_INVALID_ARG, "-7");

    /* token 0's length field sits after the header and its score */
    uint8_t *bad = malloc(len);
    assert_non_null(bad);
    const int32_t lens[] = {-1, INT32_MIN, INT32_MAX, (int32_t)len};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        memcpy(bad, buf, len);
        memcpy(bad + 8, &lens[i], 4);
        expect_fail(sd_tokenizer_from_llama2c_buf(bad, len, 512, "tok512", &t), SD_ERR_FORMAT,
                    lens[i] < 0 ? "negative length" : "remain");
        assert_null(t);
    }
    memcpy(bad, buf, len);
    const int32_t neg_max = -3;
    memcpy(bad, &neg_max, 4);
    expect_fail(sd_tokenizer_from_llama2c_buf(bad, len, 512, "tok512", &t), SD_ERR_FORMAT, "max_token_length");
    memcpy(bad, buf, len);
    const float nan_score = NAN;
    memcpy(bad + 4, &nan_score, 4);
    expect_fail(sd_tokenizer_from_llama2c_buf(bad, len, 512, "tok512", &t), SD_ERR_FORMAT, "NaN");
    free(bad);
    free(buf);
}

static void test_bad_gguf(void **state) {
    (void)state;
    sd_tokenizer *t = NULL;
    gguf_spec sp = tiny_spec();
    sp.model = "bert";
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_UNSUPPORTED, "'bert'");
    sp.model = "gpt2"; /* byte-level BPE (test_bpe.c) needs its merges */
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.merges");
    sp = tiny_spec();
    sp.model = NULL;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.model");
    sp = tiny_spec();
    sp.tokens = NULL;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.tokens");
    sp = tiny_spec();
    sp.n_scores = 9;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.scores has 9 entries");

    const int32_t types[11] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    sp = tiny_spec();
    sp.types = types;
    sp.n_types = 11;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.token_type has 11");
    int32_t bad_types[10];
    memcpy(bad_types, types, sizeof bad_types);
    bad_types[4] = 9;
    sp.types = bad_types;
    sp.n_types = 10;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "token_type[4] = 9");
    bad_types[4] = SD_TOKEN_BYTE; /* "a" is not a <0xXX> piece */
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "byte token 4");

    sp = tiny_spec();
    sp.set_bos = 1;
    sp.bos = 99;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "tokenizer.ggml.bos_token_id = 99");
    sp.bos = 10;
    expect_fail(tok_from_spec(&sp, &t), SD_ERR_FORMAT, "bos_token_id = 10");

    /* 4294967295 is how converters write "no such token" */
    sp = tiny_spec();
    sp.set_pad = 1;
    sp.pad = UINT32_MAX;
    sp.set_bos = 1;
    sp.bos = UINT32_MAX;
    assert_int_equal(tok_from_spec(&sp, &t), SD_OK);
    assert_int_equal(sd_tokenizer_bos(t), -1);
    sdtest_expect_ids(t, "ab", 1, (const int32_t[]){8}, 1);
    sd_tokenizer_free(t);

    /* scores optional: all pieces tie at 0, so merges go leftmost first */
    sp = tiny_spec();
    sp.scores = NULL;
    assert_int_equal(tok_from_spec(&sp, &t), SD_OK);
    sdtest_expect_ids(t, "ab", 0, (const int32_t[]){8}, 1);
    sd_tokenizer_free(t);

    sd_tokenizer_free(NULL);
}

static void test_encode_decode_args(void **state) {
    (void)state;
    sd_tokenizer *t = load_llama2c(TOK512_BIN, 512);
    const char *s = "Once upon a time";
    int32_t ids[2] = {-9, -9};
    int n = -1;
    expect_fail(sd_tokenizer_encode(t, s, strlen(s), 1, ids, 2, &n), SD_ERR_INVALID_ARG, "do not fit");
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 403);
    n = -1;
    assert_int_equal(sd_tokenizer_encode(t, s, strlen(s), 1, NULL, 0, &n), SD_ERR_INVALID_ARG);
    assert_int_equal(n, 5);
    assert_int_equal(sd_tokenizer_encode(t, s, strlen(s), 1, NULL, 3, &n), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_tokenizer_encode(t, s, strlen(s), 1, ids, -1, &n), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_tokenizer_encode(t, NULL, 0, 1, ids, 2, &n), SD_OK);
    assert_int_equal(n, 1);

    char buf[8];
    assert_int_equal(sd_tokenizer_decode(t, -1, 512, buf, sizeof buf), -1);
    assert_non_null(strstr(sd_last_error(), "512"));
    assert_int_equal(sd_tokenizer_decode(t, -1, -1, buf, sizeof buf), -1);
    assert_int_equal(sd_tokenizer_decode(t, -1, 400, NULL, 0), 0);
    sd_tokenizer_free(t);
}

/* ---- draft/target compatibility --------------------------------------------------------- */

/* tok512's pieces plus `extra` trailing ids of the given types, as a GGUF vocabulary. */
static sd_status tok512_padded(const sd_tokenizer *base, const int32_t *extra, int n_extra,
                               sd_tokenizer **out) {
    int n = sd_tokenizer_n_vocab(base);
    const char **tokens = malloc((size_t)(n + n_extra) * sizeof *tokens);
    int32_t *types = malloc((size_t)(n + n_extra) * sizeof *types);
    assert_non_null(tokens);
    assert_non_null(types);
    static char names[8][16];
    for (int i = 0; i < n; i++) {
        tokens[i] = sd_tokenizer_piece(base, i, NULL);
        types[i] = sd_tokenizer_token_type(base, i);
    }
    for (int i = 0; i < n_extra; i++) {
        snprintf(names[i], sizeof names[i], "<pad%d>", i);
        tokens[n + i] = names[i];
        types[n + i] = extra[i];
    }
    gguf_spec sp = {"llama", tokens, (uint64_t)(n + n_extra), NULL, 0, types,
                    (uint64_t)(n + n_extra), 0, 0, 0, 0, -1, -1};
    sd_status st = tok_from_spec(&sp, out);
    free(tokens);
    free(types);
    return st;
}

static void test_compatibility(void **state) {
    (void)state;
    sd_tokenizer *small = load_llama2c(TOK512_BIN, 512);
    sd_tokenizer *small2 = load_llama2c(TOK512_BIN, 512);
    sd_tokenizer *big = load_llama2c(LLAMA2_BIN, 32000);
    assert_int_equal(sd_tokenizer_check_compatible(small, small2), SD_OK);
    assert_int_equal(sd_tokenizer_check_compatible(big, big), SD_OK);
    /* ids 0..258 (specials and bytes) agree; 259 is "▁▁" in Llama 2 and "▁t" in tok512 */
    expect_fail(sd_tokenizer_check_compatible(big, small), SD_ERR_MISMATCH,
                "id 259: target '" SP SP "', draft '" SP "t'");
    expect_fail(sd_tokenizer_check_compatible(small, big), SD_ERR_MISMATCH, "id 259");

    sd_tokenizer *pad = NULL;
    const int32_t padding[] = {SD_TOKEN_UNUSED, SD_TOKEN_CONTROL, SD_TOKEN_UNUSED};
    assert_int_equal(tok512_padded(small, padding, 3, &pad), SD_OK);
    assert_int_equal(sd_tokenizer_n_vocab(pad), 515);
    assert_int_equal(sd_tokenizer_check_compatible(pad, small), SD_OK);
    assert_int_equal(sd_tokenizer_check_compatible(small, pad), SD_OK);
    sd_tokenizer_free(pad);

    const int32_t not_padding[] = {SD_TOKEN_UNUSED, SD_TOKEN_NORMAL};
    assert_int_equal(tok512_padded(small, not_padding, 2, &pad), SD_OK);
    expect_fail(sd_tokenizer_check_compatible(small, pad), SD_ERR_MISMATCH, "id 513");
    assert_non_null(strstr(sd_last_error(), "<pad1>"));
    sd_tokenizer_free(pad);

    sd_tokenizer_free(small);
    sd_tokenizer_free(small2);
    sd_tokenizer_free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_cases_gguf),
        cmocka_unit_test(test_vocab_cases_llama2c),
        cmocka_unit_test(test_llama2c_matches_gguf),
        cmocka_unit_test(test_roundtrip_corpus_llama2),
        cmocka_unit_test(test_roundtrip_corpus_tok512),
        cmocka_unit_test(test_roundtrip_vocab_cases),
        cmocka_unit_test(test_stories260k_ids),
        cmocka_unit_test(test_llama2_known_ids),
        cmocka_unit_test(test_merge_rules),
        cmocka_unit_test(test_bad_llama2c),
        cmocka_unit_test(test_bad_gguf),
        cmocka_unit_test(test_encode_decode_args),
        cmocka_unit_test(test_compatibility),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
