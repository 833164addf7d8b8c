/* Test models (see sdtest_models.h). */
#include "sdtest_models.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"

#include "sdtest.h"

sd_type sdtest_kv_type = SD_TYPE_F32;

static sd_context *new_context(sd_model *m) {
    sd_context_params cp = sd_context_default_params();
    cp.kv_type = sdtest_kv_type;
    sd_context *c = NULL;
    if (sd_context_create(m, &cp, &c) != SD_OK) fail_msg("context: %s", sd_last_error());
    return c;
}

sd_model *sdtest_synth_model(const sd_synth_params *p) {
    static int counter;
    char name[64];
    snprintf(name, sizeof name, "tiny%d.gguf", counter++);
    const char *path = sdtest_tmp_path(name);
    sd_status st = sd_synth_write_file(p, path);
    if (st != SD_OK) fail_msg("synth: %s", sd_last_error());
    sd_model *m = NULL;
    st = sd_model_load(path, NULL, &m);
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
    if (!out) fail_msg("alloc");
    sd_context *c = new_context(m);
    for (int i = 0; i < n; i++)
        if (sd_context_forward(c, 0, tokens + i, 1, out + (size_t)i * V, 0) != SD_OK)
            fail_msg("forward: %s", sd_last_error());
    sd_context_free(c);
    return out;
}

float *sdtest_batched_logits(sd_model *m, const int32_t *tokens, int n) {
    const int V = sd_model_hparams(m)->vocab_size;
    float *out = malloc((size_t)n * V * sizeof(float));
    assert_non_null(out);
    sd_context *c = new_context(m);
    assert_int_equal(sd_context_forward(c, 0, tokens, n, out, 1), SD_OK);
    sd_context_free(c);
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
    p.draft_mode = SD_DRAFT_FIXED; /* every round drafts: the speculative path is what is tested */
    p.n_predict = n;
    p.stop_at_eos = 0;
    p.kv_type = sdtest_kv_type;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, draft, &p, &s), SD_OK);
    collect c = {calloc((size_t)n + 1, sizeof(int32_t)), 0};
    assert_non_null(c.out);
    assert_int_equal(sd_spec_generate(s, prompt, n_prompt, collect_cb, &c, st), SD_OK);
    assert_int_equal(c.n, n);
    sd_spec_free(s);
    return c.out;
}

void sdtest_check_batched(sd_model *m, int exact_all) {
    const int V = sd_model_hparams(m)->vocab_size;
    const int total = 80;
    int32_t tok[80];
    for (int i = 0; i < total; i++) tok[i] = (int32_t)((i * 37 + 11) % V);
    float *ref = sdtest_stepwise_logits(m, tok, total);
    static const int starts[] = {0, 1, 7, 30};
    static const int lens[] = {1, 2, 3, 5, 9, 16, 17, 33, 34, 48};
    float *got = malloc((size_t)total * V * sizeof(float));
    assert_non_null(got);
    sd_context *c = new_context(m);
    double worst = 0;
    for (size_t a = 0; a < sizeof starts / sizeof *starts; a++) {
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) {
            const int p = starts[a], n = lens[b];
            const int exact = n <= SD_SMALL_BATCH || exact_all;
            if (p + n > total) continue;
            sd_context_seq_truncate(c, 0, 0);
            if (p > 0) assert_int_equal(sd_context_forward(c, 0, tok, p, NULL, 0), SD_OK);
            assert_int_equal(sd_context_forward(c, 0, tok + p, n, got, 1), SD_OK);
            assert_int_equal(sd_context_seq_len(c, 0), p + n);
            double d = sdtest_max_abs_diff(got, ref + (size_t)p * V, (size_t)n * V);
            if (d > worst) worst = d;
            if (exact && d != 0)
                fail_msg("%s: start %d, n %d: max diff %g, expected bitwise equal", sd_model_path(m), p, n, d);
            if (d > SDTEST_TOL_GEMM_VS_STEPWISE) fail_msg("%s: start %d, n %d: max diff %g", sd_model_path(m), p, n, d);
            /* last-only logits equal the last row */
            sd_context_seq_truncate(c, 0, p);
            assert_int_equal(sd_context_forward(c, 0, tok + p, n, got, 0), SD_OK);
            d = sdtest_max_abs_diff(got, ref + (size_t)(p + n - 1) * V, (size_t)V);
            if (d > (exact ? 0 : SDTEST_TOL_GEMM_VS_STEPWISE))
                fail_msg("%s: start %d, n %d (last only): max diff %g", sd_model_path(m), p, n, d);
        }
    }
    printf("  %s: batched vs stepwise worst %.3g (%s)\n", sd_model_path(m), worst,
           exact_all ? "bit for bit at every batch size" : "bit for bit up to SD_SMALL_BATCH");
    sd_context_free(c);
    free(got);
    free(ref);
}
