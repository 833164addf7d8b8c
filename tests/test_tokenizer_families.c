/* The tokenizers of the pairs people run: Llama 3 (byte-level BPE, llama-bpe pre-tokenizer,
 * ignore_merges) and Qwen2/Qwen3 (qwen2 pre-tokenizer), from the real tokenizer.json files and
 * from the GGUF metadata of the arch-zoo models: llama.cpp's vectors, llama.cpp's prompt ids,
 * TinyStories round trips, and the pair check with padded vocabularies. */
#include "sdtest.h"
#include "sdtest_ref.h"
#include "sdtest_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/gguf.h"
#include "specdec/tokenizer.h"

#define LLAMA3_JSON "tokenizers/llama3/tokenizer.json"
#define QWEN3_JSON "tokenizers/qwen3/tokenizer.json"
#define ZOO "models/arch-zoo/"

/* The tokenizer of each source; GGUF files are parsed here and only their metadata used. */
static sd_tokenizer *load(const char *rel) {
    if (strstr(rel, ".json")) return sdtest_load_hf_tokenizer(rel, -1, -1);
    return sdtest_load_gguf_tokenizer(rel);
}

/* llama.cpp's 46 inputs give exactly its ids, and decode back to themselves. */
static void run_cases(const char *tok, const char *vectors, int n_vocab) {
    sd_tokenizer *t = load(tok);
    assert_int_equal(sd_tokenizer_kind_of(t), SD_TOKENIZER_BPE);
    assert_int_equal(sd_tokenizer_n_vocab(t), n_vocab);
    int failed = sdtest_vocab_case_failures(t, vectors, 1, tok);
    sd_tokenizer_free(t);
    assert_int_equal(failed, 0);
}

#define LLAMA_BPE "vocab-tests/ggml-vocab-llama-bpe.gguf"
#define QWEN2 "vocab-tests/ggml-vocab-qwen2.gguf"

static void test_llama3_json_cases(void **state) { (void)state; run_cases(LLAMA3_JSON, LLAMA_BPE, 128256); }
static void test_qwen3_json_cases(void **state) { (void)state; run_cases(QWEN3_JSON, QWEN2, 151669); }
/* The GGUF metadata holds the same vocabularies as llama.cpp's converter wrote them. */
static void test_llama3_gguf_cases(void **state) { (void)state; run_cases(ZOO "zoo-llama3.gguf", LLAMA_BPE, 128256); }
static void test_qwen2_gguf_cases(void **state) { (void)state; run_cases(ZOO "zoo-qwen2.gguf", QWEN2, 152064); }
static void test_qwen3_gguf_cases(void **state) { (void)state; run_cases(ZOO "zoo-qwen3.gguf", QWEN2, 151936); }

static void test_metadata(void **state) {
    (void)state;
    sd_tokenizer *l = load(LLAMA3_JSON), *lg = load(ZOO "zoo-llama3.gguf");
    /* Llama 3: BOS from the TemplateProcessing post-processor, and from llama-bpe in GGUF */
    assert_int_equal(sd_tokenizer_bos(l), 128000);
    assert_int_equal(sd_tokenizer_add_bos(l), 1);
    assert_int_equal(sd_tokenizer_bos(lg), 128000);
    assert_int_equal(sd_tokenizer_add_bos(lg), 1);
    sd_tokenizer *q = load(QWEN3_JSON), *qg = load(ZOO "zoo-qwen2.gguf");
    assert_int_equal(sd_tokenizer_add_bos(q), 0);
    assert_int_equal(sd_tokenizer_add_bos(qg), 0);
    assert_int_equal(sd_tokenizer_token_type(qg, 151669), SD_TOKEN_UNUSED);
    assert_string_equal(sd_tokenizer_piece(qg, 152063, NULL), "[PAD152063]");
    sd_tokenizer_free(l);
    sd_tokenizer_free(lg);
    sd_tokenizer_free(q);
    sd_tokenizer_free(qg);
}

/* Every TinyStories paragraph encodes and decodes back exactly (byte-level BPE covers every
 * byte), and the tokenizer.json and the GGUF metadata give the same ids. */
static void roundtrip_corpus(const char *json, const char *gguf) {
    sd_tokenizer *a = load(json), *b = load(gguf);
    size_t len = 0;
    char *text = sdtest_load_corpus(&len);
    int failed = 0, paragraphs = 0;
    long tokens = 0;
    for (size_t pos = 0; pos < len && failed <= 5; paragraphs++) {
        const char *hit = sdtest_find(text + pos, len - pos, "\n\n", 2);
        size_t end = hit ? (size_t)(hit - text) : len;
        int na = 0, nb = 0;
        int32_t *ia = sdtest_encode(a, text + pos, end - pos, 0, &na);
        int32_t *ib = sdtest_encode(b, text + pos, end - pos, 0, &nb);
        if (na != nb || memcmp(ia, ib, (size_t)na * sizeof *ia) != 0) {
            print_error("%s and %s differ on paragraph %d\n", json, gguf, paragraphs);
            failed++;
        }
        failed += !sdtest_roundtrip_ok(a, text + pos, end - pos, 0, json);
        tokens += na;
        free(ia);
        free(ib);
        pos = end + 2;
    }
    /* the whole corpus as one text, blank lines and all */
    failed += !sdtest_roundtrip_ok(a, text, len, 1, json);
    printf("  %s: %d paragraphs, %ld tokens, all round-trip\n", json, paragraphs, tokens);
    free(text);
    sd_tokenizer_free(a);
    sd_tokenizer_free(b);
    assert_int_equal(failed, 0);
    assert_int_equal(paragraphs, 4662);
}

static void test_corpus_llama3(void **state) { (void)state; roundtrip_corpus(LLAMA3_JSON, ZOO "zoo-llama3.gguf"); }
static void test_corpus_qwen(void **state) { (void)state; roundtrip_corpus(QWEN3_JSON, ZOO "zoo-qwen3.gguf"); }

/* reference.json: llama.cpp tokenized each prompt with add_special and parse_special. */
static void test_zoo_prompt_ids(void **state) {
    (void)state;
    cJSON *ref = sdtest_load_reference(ZOO "reference.json");
    static const char *const models[] = {"zoo-llama3.gguf", "zoo-qwen2.gguf", "zoo-qwen2-draft.gguf", "zoo-qwen3.gguf"};
    int checked = 0;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char rel[128];
        snprintf(rel, sizeof rel, ZOO "%s", models[m]);
        sd_tokenizer *t = load(rel);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(cJSON_GetObjectItem(ref, models[m]), "prompts")) {
            const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
            int n_want = 0, n = 0;
            int32_t *want = sdtest_json_ints(cJSON_GetObjectItem(p, "prompt_ids"), &n_want);
            int32_t ids[1024];
            assert_int_equal(sd_tokenizer_tokenize(t, text, strlen(text), sd_tokenizer_add_bos(t), 1, ids, 1024, &n), SD_OK);
            if (n != n_want || memcmp(ids, want, (size_t)n * sizeof *ids) != 0) {
                print_error("%s: prompt ids differ\n", models[m]);
                sdtest_print_text("  text", text, strlen(text));
                sdtest_print_ids("  llama.cpp", want, n_want);
                sdtest_print_ids("  specdec  ", ids, n);
                fail();
            }
            free(want);
            checked++;
        }
        sd_tokenizer_free(t);
    }
    cJSON_Delete(ref);
    assert_int_equal(checked, 12);
}

/* ---- the pair check with padded vocabularies ----------------------------------------------- */

static void expect_pair(const sd_tokenizer *target, const sd_tokenizer *draft, const char *msg) {
    sd_status st = sd_tokenizer_check_compatible(target, draft);
    if (!msg) {
        if (st != SD_OK) print_error("unexpected mismatch: %s\n", sd_last_error());
        assert_int_equal(st, SD_OK);
        return;
    }
    assert_int_equal(st, SD_ERR_MISMATCH);
    assert_string_equal(sd_last_error(), msg);
}

/* zoo-qwen2 (152064 rows, [PAD] from 151669) drafts with zoo-qwen2-draft (151936): the pair
 * Qwen2.5-7B / 0.5B has; so do the Qwen3 tokenizer.json (151669 ids, with the BOS/EOS a
 * Qwen config.json gives) and either GGUF. */
static void test_padded_pairs(void **state) {
    (void)state;
    sd_tokenizer *big = load(ZOO "zoo-qwen2.gguf"), *small = load(ZOO "zoo-qwen2-draft.gguf");
    sd_tokenizer *json = sdtest_load_hf_tokenizer(QWEN3_JSON, 151643, 151645);
    expect_pair(big, small, NULL);
    expect_pair(small, big, NULL);
    expect_pair(big, json, NULL);
    expect_pair(json, small, NULL);

    /* a real token where the other side has padding is a mismatch, named */
    char *path = sdtest_shared_or_skip(QWEN3_JSON);
    size_t len = 0;
    char *raw = sdtest_read_file(path, &len);
    free(path);
    assert_non_null(raw);
    char *text = malloc(len + 1); /* NUL-terminated for the string functions below */
    assert_non_null(text);
    memcpy(text, raw, len);
    text[len] = '\0';
    free(raw);
    const char *last = "\"content\": \"</think>\"";
    char *at = strstr(text, last);
    assert_non_null(at);
    char *ext = malloc(len + 256);
    assert_non_null(ext);
    at = strchr(at, '}') + 1;
    int head = (int)(at - text);
    int n = snprintf(ext, len + 256, "%.*s, {\"id\": 151700, \"content\": \"<extra>\", \"special\": false}%s", head, text,
                     at);
    sd_tokenizer *extra = NULL;
    assert_int_equal(sd_tokenizer_from_hf_json(ext, (size_t)n, "extra.json", 151643, 151645, &extra), SD_OK);
    expect_pair(big, extra, "tokenizers differ at id 151700: target '[PAD151700]', draft '<extra>'");
    expect_pair(extra, json, "tokenizers differ at id 151700: only the target has it ('<extra>', type 4; "
                             "vocabularies of 151701 and 151669 may differ only by unused/control padding)");
    /* and a changed piece inside the real range */
    memcpy(strstr(ext, "\"<think>\"") + 2, "th1nk", 5);
    sd_tokenizer *changed = NULL;
    assert_int_equal(sd_tokenizer_from_hf_json(ext, (size_t)n, "changed.json", 151643, 151645, &changed), SD_OK);
    expect_pair(small, changed, "tokenizers differ at id 151667: target '<think>', draft '<th1nk>'");
    free(ext);
    free(text);
    sd_tokenizer_free(changed);
    sd_tokenizer_free(extra);
    sd_tokenizer_free(json);
    sd_tokenizer_free(small);
    sd_tokenizer_free(big);
}

/* A small SentencePiece-style vocabulary: pieces[i] with types[i], as a GGUF carries it. */
static sd_tokenizer *tiny(const char *const *pieces, const int32_t *types, int n) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    float scores[16] = {0};
    assert_int_equal(sd_gguf_set_str(w, "tokenizer.ggml.model", "llama"), SD_OK);
    assert_int_equal(sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n), SD_OK);
    assert_int_equal(sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n), SD_OK);
    sd_tokenizer *t = NULL;
    assert_int_equal(sdtest_tokenizer_from_writer(w, "tiny.gguf", &t), SD_OK);
    return t;
}

/* Padding that two converters named differently still pairs; padding against a real token
 * does not, wherever it sits. */
static void test_padding_names(void **state) {
    (void)state;
    static const char *const a[] = {"<unk>", "<s>", "</s>", "a", "b", "[PAD5]", "[PAD6]"};
    static const char *const b[] = {"<unk>", "<s>", "</s>", "a", "b", "<pad_0>"};
    static const char *const c[] = {"<unk>", "<s>", "</s>", "a", "b", "c", "[PAD6]"};
    static const int32_t ta[] = {2, 3, 3, 1, 1, 5, 5}, tc[] = {2, 3, 3, 1, 1, 1, 5};
    sd_tokenizer *pa = tiny(a, ta, 7), *pb = tiny(b, ta, 6), *pc = tiny(c, tc, 7);
    expect_pair(pa, pb, NULL);
    expect_pair(pb, pa, NULL);
    expect_pair(pa, pc, "tokenizers differ at id 5: target '[PAD5]', draft 'c'");
    expect_pair(pc, pb, "tokenizers differ at id 5: target 'c', draft '<pad_0>'");
    sd_tokenizer_free(pa);
    sd_tokenizer_free(pb);
    sd_tokenizer_free(pc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_json_cases), cmocka_unit_test(test_qwen3_json_cases),
        cmocka_unit_test(test_llama3_gguf_cases), cmocka_unit_test(test_qwen2_gguf_cases),
        cmocka_unit_test(test_qwen3_gguf_cases),  cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_corpus_llama3),     cmocka_unit_test(test_corpus_qwen),
        cmocka_unit_test(test_zoo_prompt_ids),    cmocka_unit_test(test_padded_pairs),
        cmocka_unit_test(test_padding_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
