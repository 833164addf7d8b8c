/* Converting models with BPE vocabularies: an HF tokenizer.json BPE (U+2581-escaped text,
 * byte fallback) model to GGUF f32 reloads with the same logits and the same encodings, and
 * a GGUF "gpt2" byte-level vocabulary survives write -> parse -> load with llama.cpp's ids. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "sdtest_tok.h"
#include "specdec/convert.h"
#include "specdec/gguf.h"

#define TS_DIR "models/tinystories-656k"
#define GPT2 "vocab-tests/ggml-vocab-gpt-2.gguf"

/* Rotate-half (HF) vs interleaved (GGUF, Q/K rows permuted) RoPE rotate the same pairs, but
 * the q.k sums run over the head dimensions in another order: float rounding at most, carried
 * through the layers, so relative to the largest logit (max |diff| / max |logit|; 2^-23 is one
 * float ulp of it: this allows about 17). */
#define TOL_CONVERTED_LOGITS_REL 2e-6

static sd_model *load_path(const char *path) {
    sd_model *m = NULL;
    if (sd_model_load(path, NULL, &m) != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    return m;
}

/* Same ids from both tokenizers for text (with BOS); prints the first difference. */
static int same_encoding(const sd_tokenizer *a, const sd_tokenizer *b, const char *s, size_t len, int bos) {
    int na = 0, nb = 0;
    int32_t *ia = sdtest_encode(a, s, len, bos, &na), *ib = sdtest_encode(b, s, len, bos, &nb);
    int ok = na == nb && memcmp(ia, ib, (size_t)na * sizeof *ia) == 0;
    if (!ok) {
        sdtest_print_text("text", s, len);
        sdtest_print_ids("original", ia, na);
        sdtest_print_ids("reloaded", ib, nb);
    }
    free(ia);
    free(ib);
    return ok;
}

static void test_hf_bpe_model_to_gguf(void **state) {
    (void)state;
    char *dir = sdtest_shared_or_skip(TS_DIR "/config.json");
    dir[strlen(dir) - strlen("/config.json")] = '\0';
    char *corpus = sdtest_shared_or_skip("corpora/tinystories.txt");
    sd_model *a = load_path(dir);
    free(dir);

    sd_convert_params cp = {SD_TYPE_F32, NULL, NULL};
    sd_gguf_writer *w = NULL;
    if (sd_model_to_gguf(a, &cp, &w) != SD_OK) fail_msg("convert: %s", sd_last_error());
    const char *path = sdtest_tmp_path("tinystories-656k-f32.gguf");
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_gguf_writer_free(w);
    sd_model *b = load_path(path);

    const sd_tokenizer *ta = sd_model_tokenizer(a), *tb = sd_model_tokenizer(b);
    assert_int_equal(sd_tokenizer_kind_of(tb), SD_TOKENIZER_BPE);
    assert_int_equal(sd_tokenizer_n_vocab(tb), sd_tokenizer_n_vocab(ta));

    /* logits of a short prompt, token by token */
    int n = 0;
    static const char prompt[] = "Once upon a time, there was a little girl";
    int32_t *tok = sdtest_encode(ta, prompt, strlen(prompt), 1, &n);
    assert_true(n > 4);
    const int V = sd_tokenizer_n_vocab(ta);
    float *la = sdtest_stepwise_logits(a, tok, n), *lb = sdtest_stepwise_logits(b, tok, n);
    double d = sdtest_max_abs_diff(la, lb, (size_t)n * V), top = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) top = fabs(la[i]) > top ? fabs(la[i]) : top;
    printf("  tinystories-656k HF vs converted GGUF f32: max |logit diff| %.3g, max |logit| %.3g over %d tokens\n", d,
           top, n);
    assert_true(top > 0 && d <= TOL_CONVERTED_LOGITS_REL * top);
    free(la);
    free(lb);
    free(tok);

    /* the first 50 corpus paragraphs encode to the same ids, and every piece decodes alike */
    size_t len = 0;
    char *text = sdtest_read_file(corpus, &len);
    free(corpus);
    assert_non_null(text);
    int failed = 0, done = 0;
    for (size_t pos = 0; pos < len && done < 50; done++) {
        const char *hit = sdtest_find(text + pos, len - pos, "\n\n", 2);
        size_t end = hit ? (size_t)(hit - text) : len;
        failed += !same_encoding(ta, tb, text + pos, end - pos, 1);
        pos = end + 2;
    }
    assert_int_equal(done, 50);
    static const char odd[] = "  odd  spacing\tand \xe2\x98\x83 bytes\n";
    failed += !same_encoding(ta, tb, odd, strlen(odd), 0);
    for (int32_t id = 0; id < V; id++) {
        char x[256], y[256];
        int nx = sd_tokenizer_decode(ta, 5, id, x, sizeof x), ny = sd_tokenizer_decode(tb, 5, id, y, sizeof y);
        failed += nx != ny || (nx > 0 && memcmp(x, y, (size_t)nx) != 0);
    }
    free(text);
    assert_int_equal(failed, 0);
    sd_model_free(b);
    sd_model_free(a);
}

static void test_gpt2_vocab_round_trip(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_gguf_tokenizer(GPT2);
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    if (sd_tokenizer_write_gguf(t, w) != SD_OK) fail_msg("write: %s", sd_last_error());
    sd_tokenizer *r = NULL;
    if (sdtest_tokenizer_from_writer(w, "gpt2-rewritten", &r) != SD_OK) fail_msg("reload: %s", sd_last_error());
    assert_int_equal(sd_tokenizer_kind_of(r), SD_TOKENIZER_BPE);
    assert_int_equal(sd_tokenizer_n_vocab(r), 50257);
    sdtest_vocab_cases *c = sdtest_load_vocab_cases(GPT2);
    assert_int_equal(c->n, 46);
    int failed = 0;
    for (int i = 0; i < c->n; i++) {
        failed += !sdtest_vocab_case_ok(r, c, i, "gpt2-rewritten");
        failed += !same_encoding(t, r, c->text[i], c->len[i], 1);
    }
    sdtest_free_vocab_cases(c);
    sd_tokenizer_free(r);
    sd_tokenizer_free(t);
    assert_int_equal(failed, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_bpe_model_to_gguf),
        cmocka_unit_test(test_gpt2_vocab_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
