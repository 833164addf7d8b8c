/* Fuzz bodies for the grammar module: GBNF text (as it is, and made lazy), and JSON Schema text
 * through the compiler. A grammar that is accepted is exercised: its bound, forced bytes, the input's own bytes fed one
 * at a time with rollback checked against the step count, and a token mask over a small
 * vocabulary checked token by token. The schema compiler must never emit GBNF it cannot parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/grammar.h"
#include "specdec/tokenizer.h"

/* A tiny vocabulary (llama2.c tokenizer: <unk> <s> </s>, 256 byte tokens, some JSON-ish pieces),
 * built once: the fuzzer's inputs vary the grammar, not the vocabulary. */
static const sd_grammar_vocab *fuzz_vocab(void) {
    static sd_grammar_vocab *v;
    static int tried;
    if (tried) return v;
    tried = 1;
    static const char *const pieces[] = {"{\"", "\":", "\"}", "true", "null", "12", "ab", " \"", "\xc3\xa9", ", "};
    const int n = 3 + 256 + (int)(sizeof pieces / sizeof pieces[0]);
    uint8_t *b = malloc(16 * (size_t)n + 8);
    SD_FUZZ_CHECK(b != NULL);
    size_t len = 0;
    int32_t maxlen = 8;
    memcpy(b, &maxlen, 4);
    len = 4;
    for (int i = 0; i < n; i++) {
        char tmp[8];
        const char *p = tmp;
        if (i == 0) p = "<unk>";
        else if (i == 1) p = "<s>";
        else if (i == 2) p = "</s>";
        else if (i < 259) snprintf(tmp, sizeof tmp, "<0x%02X>", i - 3);
        else p = pieces[i - 259];
        float score = 0;
        int32_t l = (int32_t)strlen(p);
        memcpy(b + len, &score, 4);
        memcpy(b + len + 4, &l, 4);
        memcpy(b + len + 8, p, (size_t)l);
        len += 8 + (size_t)l;
    }
    sd_tokenizer *t = NULL;
    SD_FUZZ_CHECK(sd_tokenizer_from_llama2c_buf(b, len, n, "fuzz.bin", &t) == SD_OK);
    free(b);
    SD_FUZZ_CHECK(sd_grammar_vocab_create(t, &v) == SD_OK);
    sd_tokenizer_free(t);
    return v;
}

static void exercise(sd_grammar *g, const uint8_t *data, size_t size) {
    uint64_t mb = 0;
    (void)sd_grammar_max_bytes(g, &mb);
    const sd_grammar_vocab *v = fuzz_vocab();
    sd_grammar_matcher *m = NULL;
    SD_FUZZ_CHECK(sd_grammar_matcher_create(g, v, &m) == SD_OK);
    uint8_t forced[64];
    size_t nf = sd_grammar_matcher_forced_bytes(m, forced, sizeof forced);
    if (nf > sizeof forced) nf = sizeof forced;
    /* forced bytes are always accepted, as one step */
    SD_FUZZ_CHECK(sd_grammar_matcher_accept_bytes(m, forced, nf) == SD_OK);
    SD_FUZZ_CHECK(sd_grammar_matcher_n_steps(m) == 1);
    /* the mask: each allowed token is accepted (then rolled back), each other one refused */
    size_t words = sd_grammar_mask_words(v);
    uint64_t mask[8];
    SD_FUZZ_CHECK(words <= 8);
    SD_FUZZ_CHECK(sd_grammar_matcher_mask(m, mask) == SD_OK);
    for (int id = 0; id < sd_grammar_vocab_n(v); id++) {
        int allowed = (int)((mask[id >> 6] >> (id & 63)) & 1);
        SD_FUZZ_CHECK(sd_grammar_matcher_allows(m, id) == allowed);
        sd_status st = sd_grammar_matcher_accept(m, id);
        SD_FUZZ_CHECK((st == SD_OK) == allowed);
        if (st == SD_OK) SD_FUZZ_CHECK(sd_grammar_matcher_rollback(m, 1) == SD_OK);
        SD_FUZZ_CHECK(sd_grammar_matcher_n_steps(m) == 1);
    }
    /* the input's bytes, one step each, until one is refused; then roll back halfway */
    size_t fed = 0;
    for (size_t i = 0; i < size && i < 256; i++) {
        if (sd_grammar_matcher_accept_bytes(m, data + i, 1) != SD_OK) break;
        fed++;
    }
    SD_FUZZ_CHECK(sd_grammar_matcher_n_steps(m) == 1 + (int)fed);
    int end = sd_grammar_matcher_can_end(m);
    SD_FUZZ_CHECK(sd_grammar_matcher_rollback(m, 1 + (int)fed / 2) == SD_OK);
    for (size_t i = fed / 2; i < fed; i++) SD_FUZZ_CHECK(sd_grammar_matcher_accept_bytes(m, data + i, 1) == SD_OK);
    SD_FUZZ_CHECK(sd_grammar_matcher_can_end(m) == end);
    SD_FUZZ_CHECK(sd_grammar_matcher_rollback(m, sd_grammar_matcher_n_steps(m) + 1) != SD_OK);
    sd_grammar_matcher_free(m);
}

int sd_fuzz_gbnf(const uint8_t *data, size_t size) {
    char *text = malloc(size ? size : 1); /* exact size: the parser must not look for a terminator */
    SD_FUZZ_CHECK(text != NULL);
    if (size) memcpy(text, data, size);
    sd_grammar *g = NULL;
    sd_clear_error();
    sd_status st = sd_grammar_from_gbnf(text, size, NULL, &g);
    free(text);
    if (st != SD_OK) {
        sd_fuzz_check_error();
        SD_FUZZ_CHECK(g == NULL);
        return 0;
    }
    SD_FUZZ_CHECK(g != NULL);
    exercise(g, data, size);
    sd_grammar_free(g);
    /* the same grammar made lazy, its trigger the input's first bytes (so that feeding the input
     * fires it at once, anywhere, or at the start for odd sizes) */
    if (size) {
        g = NULL;
        SD_FUZZ_CHECK(sd_grammar_from_gbnf((const char *)data, size, NULL, &g) == SD_OK);
        const size_t tl = size < 2 ? size : 2;
        SD_FUZZ_CHECK(sd_grammar_set_trigger(g, data, tl, size & 1 ? SD_GRAMMAR_TRIGGER_AT_START : SD_GRAMMAR_TRIGGER_ANYWHERE) ==
                      SD_OK);
        exercise(g, data, size);
        sd_grammar_free(g);
    }
    return 0;
}

int sd_fuzz_schema(const uint8_t *data, size_t size) {
    char *text = malloc(size ? size : 1);
    SD_FUZZ_CHECK(text != NULL);
    if (size) memcpy(text, data, size);
    sd_grammar *g = NULL;
    char *gbnf = NULL;
    sd_clear_error();
    sd_json_schema_params jp = sd_json_schema_default_params();
    if (size & 1) jp.whitespace = SD_JSON_WS_COMPACT;
    sd_status st = sd_json_schema_to_gbnf(text, size, &jp, &gbnf);
    if (st != SD_OK) {
        sd_fuzz_check_error();
        SD_FUZZ_CHECK(gbnf == NULL);
        SD_FUZZ_CHECK(sd_grammar_from_json_schema_ex(text, size, &jp, &g) != SD_OK && g == NULL);
        free(text);
        return 0;
    }
    /* the compiler's own GBNF always parses, and is what the schema compiles to */
    st = sd_grammar_from_gbnf(gbnf, strlen(gbnf), NULL, &g);
    free(gbnf);
    SD_FUZZ_CHECK(st == SD_OK);
    sd_grammar_free(g);
    g = NULL;
    SD_FUZZ_CHECK(sd_grammar_from_json_schema_ex(text, size, &jp, &g) == SD_OK);
    free(text);
    exercise(g, data, size);
    sd_grammar_free(g);
    return 0;
}
