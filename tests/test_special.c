/* Special tokens: parse_special on and off (BPE and SentencePiece vocabularies), the
 * end-of-generation sets of the real Llama 3 / Qwen / Llama 2 vocabularies, GGUF role keys,
 * the Hugging Face files beside tokenizer.json, and tokenizer.bin without a vocabulary size. */
#include "sdtest.h"
#include "sdtest_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/convert.h"
#include "specdec/gguf.h"
#include "specdec/synth.h"
#include "specdec/tokenizer.h"

#define LLAMA3_JSON "tokenizers/llama3/tokenizer.json"
#define QWEN3_JSON "tokenizers/qwen3/tokenizer.json"
#define LLAMA2_BIN "tokenizers/llama2/tokenizer.bin"

static sd_tokenizer *load_json(const char *rel) { return sdtest_load_hf_tokenizer(rel, -1, -1); }
static sd_tokenizer *load_bin(const char *rel, int vocab) { return sdtest_load_llama2c_tokenizer(rel, vocab); }

/* tokenize(s, parse_special) gives exactly want[0..n) (no BOS). */
static void expect_special(const sd_tokenizer *t, const char *s, int parse_special, const int32_t *want, int n) {
    int32_t ids[256];
    int got = 0;
    sd_status st = sd_tokenizer_tokenize(t, s, strlen(s), 0, parse_special, ids, 256, &got);
    if (st != SD_OK) print_error("tokenize: %s\n", sd_last_error());
    assert_int_equal(st, SD_OK);
    if (got != n || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        sdtest_print_text("input", s, strlen(s));
        sdtest_print_ids("  expected", want, n);
        sdtest_print_ids("  got     ", ids, got);
        fail();
    }
}

/* Without parse_special, none of the given ids comes out and the text decodes back. */
static void expect_plain(const sd_tokenizer *t, const char *s, const int32_t *absent, int n_absent) {
    int n = 0;
    int32_t *ids = sdtest_encode(t, s, strlen(s), 0, &n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n_absent; k++) assert_int_not_equal(ids[i], absent[k]);
    free(ids);
    assert_true(sdtest_roundtrip_ok(t, s, strlen(s), 0, "plain special text"));
}

/* The ids are those of the published chat prompts: Qwen's "<|im_start|>user\n" is
 * [151644, 872, 198], Llama 3's header "<|start_header_id|>user<|end_header_id|>\n\n" is
 * [128006, 882, 128007, 271]. */
static void test_parse_special_bpe(void **state) {
    (void)state;
    sd_tokenizer *q = load_json(QWEN3_JSON);
    const char *chat = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    expect_special(q, chat, 1, (const int32_t[]){151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198}, 9);
    expect_plain(q, chat, (const int32_t[]){151644, 151645}, 2);
    /* "<|im_start|>" as text: the pieces "<", "|", "im", "_start", "|", ">" */
    expect_special(q, "<|im_start|>", 0, (const int32_t[]){27, 91, 318, 4906, 91, 29}, 6);
    /* user-defined tokens (special: false in added_tokens) are split out either way */
    for (int ps = 0; ps < 2; ps++)
        expect_special(q, "<think>x</think>", ps, (const int32_t[]){151667, 87, 151668}, 3);
    sd_tokenizer_free(q);

    sd_tokenizer *l = load_json(LLAMA3_JSON);
    const char *hdr = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    expect_special(l, hdr, 1, (const int32_t[]){128000, 128006, 882, 128007, 271, 13347, 128009}, 7);
    expect_plain(l, hdr, (const int32_t[]){128000, 128006, 128007, 128009}, 4);
    /* add_bos and parse_special together: BOS, then the parsed one (llama.cpp does the same) */
    int32_t ids[8];
    int n = 0;
    assert_int_equal(sd_tokenizer_tokenize(l, "<|begin_of_text|>", 17, 1, 1, ids, 8, &n), SD_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[1], 128000);
    sd_tokenizer_free(l);
}

/* SentencePiece: llama.cpp puts the space prefix before the text after every special token,
 * so " world" after "</s>" is "▁▁world" = [29871 "▁", 3186 "▁world"]. */
static void test_parse_special_spm(void **state) {
    (void)state;
    sd_tokenizer *t = load_bin(LLAMA2_BIN, 32000);
    expect_special(t, "<s>Hello</s> world", 1, (const int32_t[]){1, 15043, 2, 29871, 3186}, 5);
    expect_special(t, "Hello world", 1, (const int32_t[]){15043, 3186}, 2);
    expect_special(t, "<unk>x", 1, (const int32_t[]){0, 921}, 2);
    expect_plain(t, "<s>Hello</s> world", (const int32_t[]){0, 1, 2}, 3);
    /* parse_special off is what sd_tokenizer_encode does */
    int n1 = 0, n2 = 0;
    int32_t a[64], b[64];
    assert_int_equal(sd_tokenizer_encode(t, "<s>x</s>", 8, 1, a, 64, &n1), SD_OK);
    assert_int_equal(sd_tokenizer_tokenize(t, "<s>x</s>", 8, 1, 0, b, 64, &n2), SD_OK);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, (size_t)n1 * sizeof *a);
    sd_tokenizer_free(t);
}

/* The set is exactly want[0..n); ids found by their text have become control tokens. */
static void expect_eog_typed(const sd_tokenizer *t, const int32_t *want, int n, const char *name, int all_control) {
    const int32_t *ids = NULL;
    int got = sd_tokenizer_eog(t, &ids);
    if (got != n || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
        print_error("%s: end-of-generation ids differ\n", name);
        sdtest_print_ids("  expected", want, n);
        sdtest_print_ids("  got     ", ids, got);
        fail();
    }
    for (int i = 0; i < n; i++) {
        assert_true(sd_tokenizer_is_eog(t, want[i]));
        if (all_control) assert_int_equal(sd_tokenizer_token_type(t, want[i]), SD_TOKEN_CONTROL);
    }
    assert_false(sd_tokenizer_is_eog(t, -1));
    assert_false(sd_tokenizer_is_eog(t, sd_tokenizer_n_vocab(t)));
    assert_false(sd_tokenizer_is_eog(t, want[0] - 1));
}

static void expect_eog(const sd_tokenizer *t, const int32_t *want, int n, const char *name) {
    expect_eog_typed(t, want, n, name, 1);
}

static sd_tokenizer *load_gguf_tok(const char *rel) { return sdtest_load_gguf_tokenizer(rel); }

/* The sets llama.cpp prints at load ("printing all EOG tokens") for these vocabularies. The
 * shared Llama 3 tokenizer is the 3.0 one: id 128008 is a reserved token there, not
 * <|eom_id|>. */
static void test_eog_sets(void **state) {
    (void)state;
    static const int32_t llama3[] = {128001, 128009};                          /* <|end_of_text|> <|eot_id|> */
    static const int32_t qwen[] = {151643, 151645, 151662, 151663, 151664}; /* + fim_pad, repo_name, file_sep */
    sd_tokenizer *t = load_gguf_tok("models/arch-zoo/zoo-llama3.gguf");
    assert_int_equal(sd_tokenizer_eos(t), 128009);
    expect_eog(t, llama3, 2, "zoo-llama3.gguf");
    sd_tokenizer_free(t);
    t = load_json(LLAMA3_JSON); /* no EOS given: the texts alone */
    assert_int_equal(sd_tokenizer_eos(t), -1);
    expect_eog(t, llama3, 2, "llama3 tokenizer.json");
    sd_tokenizer_free(t);
    static const char *const qwen_files[] = {"models/arch-zoo/zoo-qwen2.gguf", "models/arch-zoo/zoo-qwen2-draft.gguf",
                                             "models/arch-zoo/zoo-qwen3.gguf"};
    for (size_t i = 0; i < 3; i++) {
        t = load_gguf_tok(qwen_files[i]);
        expect_eog(t, qwen, 5, qwen_files[i]);
        sd_tokenizer_free(t);
    }
    t = load_json(QWEN3_JSON);
    expect_eog(t, qwen, 5, "qwen3 tokenizer.json");
    sd_tokenizer_free(t);
    t = load_bin(LLAMA2_BIN, 32000);
    expect_eog(t, (const int32_t[]){2}, 1, "llama2 tokenizer.bin");
    sd_tokenizer_free(t);
    t = load_gguf_tok("vocab-tests/ggml-vocab-gpt-2.gguf");
    expect_eog(t, (const int32_t[]){50256}, 1, "gpt-2");
    sd_tokenizer_free(t);
}

/* A synthetic SentencePiece vocabulary (pieces "<unk>", "<s>", "</s>", ...) with extra keys. */
static sd_status synth_with(const char *key, int64_t value, const char *tmpl, sd_tokenizer **out) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(sd_synth_add_tokenizer(w, 300), SD_OK);
    if (key) assert_int_equal(value < 0 ? sd_gguf_set_i32(w, key, (int32_t)value) : sd_gguf_set_u32(w, key, (uint32_t)value), SD_OK);
    if (tmpl) assert_int_equal(sd_gguf_set_str(w, "tokenizer.chat_template", tmpl), SD_OK);
    return sdtest_tokenizer_from_writer(w, "synth.gguf", out);
}

static void test_eog_gguf_roles(void **state) {
    (void)state;
    static const char *const keys[] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                                       "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id"};
    /* each role named by the file ends generation, beside EOS; llama.cpp leaves the type of a
     * token named this way as the file gives it (id 290 is a normal piece) */
    for (size_t i = 0; i < 5; i++) {
        sd_tokenizer *t = NULL;
        assert_int_equal(synth_with(keys[i], 290, NULL, &t), SD_OK);
        expect_eog_typed(t, (const int32_t[]){2, 290}, 2, keys[i], 0);
        assert_int_equal(sd_tokenizer_token_type(t, 290), SD_TOKEN_NORMAL);
        sd_tokenizer_free(t);
    }
    sd_tokenizer *t = NULL;
    assert_int_equal(synth_with(NULL, 0, NULL, &t), SD_OK);
    expect_eog(t, (const int32_t[]){2}, 1, "synth without roles");
    assert_null(sd_tokenizer_chat_template(t, NULL));
    sd_tokenizer_free(t);
}

static void test_bad_gguf_special(void **state) {
    (void)state;
    sd_tokenizer *t = (sd_tokenizer *)1;
    assert_int_equal(synth_with("tokenizer.ggml.eot_token_id", 300, NULL, &t), SD_ERR_FORMAT);
    assert_null(t);
    assert_string_equal(sd_last_error(), "synth.gguf: tokenizer.ggml.eot_token_id = 300 is out of range (vocabulary of 300)");
    t = (sd_tokenizer *)1;
    assert_int_equal(synth_with("tokenizer.chat_template", 5, NULL, &t), SD_ERR_FORMAT);
    assert_null(t);
    assert_string_equal(sd_last_error(), "synth.gguf: tokenizer.chat_template has value type 4, expected a string");
    /* -1 means none, as for the other special ids */
    assert_int_equal(synth_with("tokenizer.ggml.fim_sep_token_id", -1, "{{ x }}", &t), SD_OK);
    expect_eog(t, (const int32_t[]){2}, 1, "fim_sep -1");
    size_t len = 0;
    assert_string_equal(sd_tokenizer_chat_template(t, &len), "{{ x }}");
    assert_int_equal(len, 7);
    sd_tokenizer_free(t);
}

/* specdec convert keeps the template; the end-of-generation set comes back from the ids
 * and texts the GGUF carries. */
static void test_template_survives_writer(void **state) {
    (void)state;
    sd_tokenizer *t = load_gguf_tok("models/arch-zoo/zoo-qwen2.gguf");
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    assert_int_equal(sd_tokenizer_write_gguf(t, w), SD_OK);
    sd_tokenizer *r = NULL;
    assert_int_equal(sdtest_tokenizer_from_writer(w, "rewritten.gguf", &r), SD_OK);
    size_t la = 0, lb = 0;
    const char *a = sd_tokenizer_chat_template(t, &la), *b = sd_tokenizer_chat_template(r, &lb);
    assert_int_equal(la, 4116);
    assert_int_equal(lb, la);
    assert_memory_equal(a, b, la);
    const int32_t *ea, *eb;
    int na = sd_tokenizer_eog(t, &ea), nb = sd_tokenizer_eog(r, &eb);
    assert_int_equal(na, nb);
    assert_memory_equal(ea, eb, (size_t)na * sizeof *ea);
    sd_tokenizer_free(r);
    sd_tokenizer_free(t);
}

/* ---- Hugging Face files beside tokenizer.json ------------------------------------------- */

static sd_status apply(sd_tokenizer *t, const char *json) {
    return sd_tokenizer_apply_hf_config(t, json, strlen(json), "cfg.json");
}

static void test_hf_config(void **state) {
    (void)state;
    sd_tokenizer *t = load_json(LLAMA3_JSON);
    /* Llama 3.1's generation_config.json lists three ids */
    assert_int_equal(sd_tokenizer_eos(t), -1);
    assert_int_equal(apply(t, "{\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009]}"), SD_OK);
    expect_eog(t, (const int32_t[]){128001, 128008, 128009}, 3, "after generation_config");
    assert_int_equal(sd_tokenizer_eos(t), 128001); /* the tokenizer had none: the first listed */
    assert_int_equal(sd_tokenizer_bos(t), 128000); /* from the post-processor anyway */
    assert_int_equal(apply(t, "{\"eos_token_id\": 128009}"), SD_OK);
    assert_int_equal(sd_tokenizer_eos(t), 128001); /* set once: a later file only adds to the set */
    assert_null(sd_tokenizer_chat_template(t, NULL));
    assert_int_equal(apply(t, "{\"eos_token\": {\"content\": \"<|reserved_special_token_5|>\"},"
                              " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                              " {\"name\": \"default\", \"template\": \"D\"}]}"),
                     SD_OK);
    expect_eog(t, (const int32_t[]){128001, 128008, 128009, 128010}, 4, "after eos_token object");
    assert_string_equal(sd_tokenizer_chat_template(t, NULL), "D");

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"[1]", "cfg.json: .: expected an object, got an array"},
        {"{\"eos_token_id\": 128256}", "cfg.json: eos_token_id = 128256 is not a token id (vocabulary of 128256)"},
        {"{\"eos_token_id\": [1, -2]}", "cfg.json: eos_token_id[1] = -2 is not a token id (vocabulary of 128256)"},
        {"{\"eos_token_id\": \"2\"}", "cfg.json: eos_token_id is not a token id"},
        {"{\"eos_token\": \"<|no_such_token|>\"}", "cfg.json: eos_token '<|no_such_token|>' is not a token of the vocabulary"},
        {"{\"eos_token\": 7}", "cfg.json: eos_token is not a string"},
        {"{\"bos_token_id\": -1}", "cfg.json: bos_token_id = -1 is not a token id (vocabulary of 128256)"},
        {"{\"chat_template\": 7}", "cfg.json: chat_template is neither a string nor a list of named templates"},
        {"{\"chat_template\": [{\"name\": \"default\"}]}",
         "cfg.json: chat_template list entries need \"name\" and \"template\" strings"},
        /* a valid template before a bad id must not be applied either */
        {"{\"chat_template\": \"NEW\", \"eos_token_id\": 1e9}", "cfg.json: eos_token_id = 1e+09 is not a token id (vocabulary of 128256)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(apply(t, bad[i].json), SD_ERR_FORMAT);
        assert_string_equal(sd_last_error(), bad[i].msg);
    }
    assert_string_equal(sd_tokenizer_chat_template(t, NULL), "D");
    assert_int_equal(sd_tokenizer_eog(t, NULL), 4);
    sd_tokenizer_free(t);
}

/* The real tokenizer_config.json files: their chat_template and eos_token. */
static void test_hf_config_files(void **state) {
    (void)state;
    static const char *const dirs[] = {"tokenizers/llama3", "tokenizers/qwen3"};
    static const char *const jsons[] = {LLAMA3_JSON, QWEN3_JSON};
    static const char *const starts[] = {"{% set loop_messages = messages %}", "{%- if tools %}"};
    for (int i = 0; i < 2; i++) {
        sd_tokenizer *t = load_json(jsons[i]);
        int n_before = sd_tokenizer_eog(t, NULL);
        char rel[128];
        snprintf(rel, sizeof rel, "%s/tokenizer_config.json", dirs[i]);
        char *cfg = sdtest_shared_or_skip(rel);
        *strrchr(cfg, '/') = '\0';
        sd_status st = sd_tokenizer_load_hf_config(t, cfg);
        if (st != SD_OK) print_error("%s\n", sd_last_error());
        assert_int_equal(st, SD_OK);
        size_t len = 0;
        const char *tmpl = sd_tokenizer_chat_template(t, &len);
        assert_non_null(tmpl);
        assert_int_equal(strncmp(tmpl, starts[i], strlen(starts[i])), 0);
        assert_int_equal(strlen(tmpl), len);
        /* eos_token (<|eot_id|>, <|im_end|>) was already in the set */
        assert_int_equal(sd_tokenizer_eog(t, NULL), n_before);
        free(cfg);
        sd_tokenizer_free(t);
    }
}

/* tokenizer.bin with vocab_size 0: the record count comes from the file. */
static void test_llama2c_counted(void **state) {
    (void)state;
    sd_tokenizer *a = load_bin("models/stories260K/tok512.bin", 0);
    sd_tokenizer *b = load_bin("models/stories260K/tok512.bin", 512);
    assert_int_equal(sd_tokenizer_n_vocab(a), 512);
    assert_int_equal(sd_tokenizer_check_compatible(a, b), SD_OK);
    sd_tokenizer_free(a);
    sd_tokenizer_free(b);
    /* header, one record of 2 bytes, then a record cut short */
    static const uint8_t cut[] = {4, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 9, 0, 0, 0, 'x'};
    sd_tokenizer *t = (sd_tokenizer *)1;
    assert_int_equal(sd_tokenizer_from_llama2c_buf(cut, sizeof cut, 0, "cut.bin", &t), SD_ERR_FORMAT);
    assert_null(t);
    assert_string_equal(sd_last_error(),
                        "cut.bin: record 1 at offset 14 does not fit the 23-byte file");
    assert_int_equal(sd_tokenizer_from_llama2c_buf(cut, 14, 0, "two.bin", &t), SD_ERR_INVALID_ARG);
    assert_string_equal(sd_last_error(), "two.bin: vocab_size 1 is out of range (3..16777216)");
}

/* sd_tokenizer_load tells the kinds apart by content, not by name. */
static void test_load_any(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        int n_vocab, n_eog;
    } files[] = {
        {"models/arch-zoo/zoo-qwen2.gguf", 152064, 5},
        {"tokenizers/qwen3", 151669, 5},                  /* directory */
        {"tokenizers/llama3/tokenizer.json", 128256, 2},
        {"models/stories260K/tok512.bin", 512, 1},
        {"models/tinystories-656k", 2048, 1},             /* + generation_config.json eos 2 */
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = sdtest_shared_or_skip(files[i].rel);
        sd_tokenizer *t = NULL;
        sd_status st = sd_tokenizer_load(path, &t);
        if (st != SD_OK) print_error("%s: %s\n", path, sd_last_error());
        assert_int_equal(st, SD_OK);
        assert_int_equal(sd_tokenizer_n_vocab(t), files[i].n_vocab);
        assert_int_equal(sd_tokenizer_eog(t, NULL), files[i].n_eog);
        free(path);
        sd_tokenizer_free(t);
    }
    /* the directory form applies tokenizer_config.json: the template comes with it */
    char *dir = sdtest_shared_or_skip("tokenizers/qwen3");
    sd_tokenizer *t = NULL;
    assert_int_equal(sd_tokenizer_load(dir, &t), SD_OK);
    assert_non_null(sd_tokenizer_chat_template(t, NULL));
    sd_tokenizer_free(t);
    free(dir);
    t = (sd_tokenizer *)1;
    assert_int_equal(sd_tokenizer_load("/nonexistent/tok", &t), SD_ERR_IO);
    assert_null(t);
    assert_string_equal(sd_last_error(), "cannot open /nonexistent/tok: No such file or directory");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_special_bpe), cmocka_unit_test(test_parse_special_spm),
        cmocka_unit_test(test_eog_sets),          cmocka_unit_test(test_eog_gguf_roles),
        cmocka_unit_test(test_bad_gguf_special),  cmocka_unit_test(test_template_survives_writer),
        cmocka_unit_test(test_hf_config),
        cmocka_unit_test(test_hf_config_files),   cmocka_unit_test(test_llama2c_counted),
        cmocka_unit_test(test_load_any),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
