/* Test models (see sdtest_models.h). */
#include "sdtest_models.h"

#include <stdio.h>
#include <stdlib.h>

#include "sdtest.h"

sd_model *sdtest_synth_model(const sd_synth_params *p) { return sdtest_synth_model_with(p, NULL); }

sd_model *sdtest_synth_model_with(const sd_synth_params *p, const sd_model_params *mp) {
    static int counter;
    char name[64];
    snprintf(name, sizeof name, "tiny%d.gguf", counter++);
    const char *path = sdtest_tmp_path(name);
    sd_status st = sd_synth_write_file(p, path);
    if (st != SD_OK) fail_msg("synth: %s", sd_last_error());
    sd_model *m = NULL;
    st = sd_model_load(path, mp, &m);
    if (st != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    remove(path); /* the mapping stays valid */
    return m;
}

sd_synth_params sdtest_synth_shape(int dim, int n_layers, int n_heads, int n_kv_heads, int hidden, int vocab,
                                   int ctx, uint64_t seed) {
    sd_synth_params p = sd_synth_default_params();
    p.dim = dim;
    p.n_layers = n_layers;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv_heads;
    p.hidden_dim = hidden;
    p.vocab_size = vocab;
    p.ctx_len = ctx;
    p.seed = seed;
    return p;
}

sd_model *sdtest_tiny_model(int dim, int n_layers, int n_heads, int n_kv_heads, int hidden,
                            int vocab, uint64_t seed) {
    sd_synth_params p = sdtest_synth_shape(dim, n_layers, n_heads, n_kv_heads, hidden, vocab, 256, seed);
    return sdtest_synth_model(&p);
}

sd_model *sdtest_shared_model(const char *rel, const char *tokenizer_rel) {
    char *path = sdtest_shared_or_skip(rel);
    char *tok = tokenizer_rel ? sdtest_shared_or_skip(tokenizer_rel) : NULL;
    sd_model_params mp = sd_model_default_params();
    mp.tokenizer_path = tok;
    sd_model *m = NULL;
    sd_status st = sd_model_load(path, &mp, &m);
    if (st != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    free(path);
    free(tok);
    return m;
}

float *sdtest_stepwise_logits(sd_model *m, const int32_t *tokens, int n) {
    const int V = sd_model_hparams(m)->vocab_size;
    float *out = malloc((size_t)n * V * sizeof(float));
    sd_kv *kv = NULL;
    if (!out || sd_model_kv_create(m, 0, &kv) != SD_OK) fail_msg("alloc");
    for (int i = 0; i < n; i++)
        if (sd_model_forward(m, kv, tokens + i, 1, out + (size_t)i * V, 0) != SD_OK)
            fail_msg("forward: %s", sd_last_error());
    sd_kv_free(kv);
    return out;
}

float *sdtest_batched_logits(sd_model *m, const int32_t *tokens, int n) {
    const int V = sd_model_hparams(m)->vocab_size;
    float *out = malloc((size_t)n * V * sizeof(float));
    sd_kv *kv = NULL;
    assert_non_null(out);
    assert_int_equal(sd_model_kv_create(m, 0, &kv), SD_OK);
    assert_int_equal(sd_model_forward(m, kv, tokens, n, out, 1), SD_OK);
    sd_kv_free(kv);
    return out;
}

typedef struct {
    int32_t *out;
    int n;
} collect;

static int collect_cb(int32_t t, void *u) {
    collect *c = u;
    c->out[c->n++] = t;
    return 0;
}

int32_t *sdtest_greedy(sd_model *m, sd_model *draft, const int32_t *prompt, int n_prompt, int n,
                       sd_spec_stats *st) {
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = n;
    p.stop_at_eos = 0;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, draft, &p, &s), SD_OK);
    collect c = {calloc((size_t)n + 1, sizeof(int32_t)), 0};
    assert_non_null(c.out);
    assert_int_equal(sd_spec_generate(s, prompt, n_prompt, collect_cb, &c, st), SD_OK);
    assert_int_equal(c.n, n);
    sd_spec_free(s);
    return c.out;
}
