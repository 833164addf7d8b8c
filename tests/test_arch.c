/* The model families against llama.cpp's own outputs: the arch-zoo GGUFs (random weights in
 * llama.cpp's conventions with the real Llama 3 / Qwen tokenizers) must give llama.cpp's prompt
 * ids, its 24 greedy ids exactly, and its top-8 probabilities within TOL_TOP8_PROB. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "sdtest_ref.h"
#include "specdec/context.h"
#include "specdec/convert.h"
#include "specdec/spec.h"

/* llama.cpp keeps its KV cache in F16: its probabilities differ from exact arithmetic by up to
 * about 1e-2 (reference.json's note); every greedy choice has a top1-top2 logit gap >= 0.1. */
#define TOL_TOP8_PROB 0.02

#define ZOO "models/arch-zoo/"

static const char *const k_zoo[] = {"zoo-llama3.gguf", "zoo-qwen2.gguf", "zoo-qwen2-draft.gguf", "zoo-qwen3.gguf"};

static void softmax_d(const float *x, int n, double *p) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) s += (p[i] = exp((double)x[i] - mx));
    for (int i = 0; i < n; i++) p[i] /= s;
}

/* Greedy ids and top-8 probabilities of m for every prompt of its reference entry; returns the
 * largest probability difference. */
static double check_against_reference(sd_model *m, const cJSON *mr, const char *label) {
    const int V = sd_model_hparams(m)->vocab_size;
    float *lg = malloc((size_t)V * sizeof(float));
    double *p = malloc((size_t)V * sizeof(double));
    sd_context *c = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = 512;
    assert_int_equal(sd_context_create(m, &cp, &c), SD_OK);
    double worst = 0;
    const cJSON *pr;
    cJSON_ArrayForEach(pr, cJSON_GetObjectItem(mr, "prompts")) {
        int np = 0, ng = 0;
        int32_t *prompt = sdtest_json_ints(cJSON_GetObjectItem(pr, "prompt_ids"), &np);
        int32_t *greedy = sdtest_json_ints(cJSON_GetObjectItem(pr, "greedy_ids"), &ng);
        const cJSON *top = cJSON_GetObjectItem(pr, "top");
        const char *cat = cJSON_GetObjectItem(pr, "category")->valuestring;
        assert_int_equal(ng, 24);
        sd_context_seq_truncate(c, 0, 0);
        assert_int_equal(sd_context_forward(c, 0, prompt, np, lg, 0), SD_OK);
        for (int i = 0; i < ng; i++) {
            const int32_t t = sd_argmax(lg, V);
            if (t != greedy[i]) fail_msg("%s %s: greedy token %d is %d, llama.cpp %d", label, cat, i, (int)t, (int)greedy[i]);
            softmax_d(lg, V, p);
            const cJSON *row = cJSON_GetArrayItem(top, i), *e;
            cJSON_ArrayForEach(e, row) {
                const int id = (int)cJSON_GetArrayItem(e, 0)->valuedouble;
                const double d = fabs(p[id] - cJSON_GetArrayItem(e, 1)->valuedouble);
                if (d > worst) worst = d;
            }
            assert_int_equal(sd_context_forward(c, 0, &t, 1, lg, 0), SD_OK);
        }
        free(prompt);
        free(greedy);
    }
    printf("  %-30s %-6s 3 prompts x 24 greedy ids = llama.cpp's; top-8 probabilities within %.2e\n", label,
           sd_model_arch(m), worst);
    if (worst > TOL_TOP8_PROB) fail_msg("%s: top-8 probability off by %g", label, worst);
    sd_context_free(c);
    free(lg);
    free(p);
    return worst;
}

static void test_zoo_matches_llama_cpp(void **state) {
    (void)state;
    cJSON *ref = sdtest_load_reference(ZOO "reference.json");
    double worst = 0;
    for (size_t z = 0; z < sizeof k_zoo / sizeof *k_zoo; z++) {
        char rel[128];
        snprintf(rel, sizeof rel, ZOO "%s", k_zoo[z]);
        sd_model *m = sdtest_shared_model(rel, NULL);
        const cJSON *mr = cJSON_GetObjectItem(ref, k_zoo[z]);
        assert_non_null(mr);
        const double w = check_against_reference(m, mr, k_zoo[z]);
        if (w > worst) worst = w;
        sd_model_free(m);
    }
    printf("  largest top-8 probability difference: %.3e (tolerance %g)\n", worst, TOL_TOP8_PROB);
    cJSON_Delete(ref);
}

/* Llama 3.1's rope_scaling (factor 8, low 1, high 4, original context 8192): the HF loader's
 * factors, from the parameters, must be the ones llama.cpp's converter wrote as rope_freqs. */
#define LLAMA31_ROPE 8.0, 1.0, 4.0, 8192.0
/* The factors are computed in double and rounded once, as the converter does in float32 numpy:
 * they agree to float rounding. */
#define TOL_ROPE_FACTORS 1e-6

/* The same weights as an HF checkpoint (the real tokenizer.json beside them) load through the
 * HF loader and give llama.cpp's greedy ids too. */
static void test_zoo_as_hf_checkpoints(void **state) {
    (void)state;
    static const char *const tok[] = {"tokenizers/llama3/tokenizer.json", "tokenizers/qwen3/tokenizer.json",
                                      "tokenizers/qwen3/tokenizer.json", "tokenizers/qwen3/tokenizer.json"};
    cJSON *ref = sdtest_load_reference(ZOO "reference.json");
    for (size_t z = 0; z < sizeof k_zoo / sizeof *k_zoo; z++) {
        char rel[128], dir[512], label[96];
        snprintf(rel, sizeof rel, ZOO "%s", k_zoo[z]);
        sd_model *g = sdtest_shared_model(rel, NULL);
        char *tj = sdtest_shared_or_skip(tok[z]);
        snprintf(dir, sizeof dir, "%s", sdtest_tmp_path(k_zoo[z]));
        sd_hf_write_params hp = {tj, 0, 0, 0, 0};
        if (z == 0) {
            const double r[4] = {LLAMA31_ROPE};
            hp.llama3_factor = r[0], hp.llama3_low_freq_factor = r[1], hp.llama3_high_freq_factor = r[2];
            hp.llama3_original_ctx = r[3];
        }
        if (sd_model_write_hf(g, dir, &hp) != SD_OK) fail_msg("write %s: %s", dir, sd_last_error());
        sd_model *h = NULL;
        if (sd_model_load(dir, NULL, &h) != SD_OK) fail_msg("load %s: %s", dir, sd_last_error());
        assert_string_equal(sd_model_format(h), "hf");
        assert_string_equal(sd_model_arch(h), sd_model_arch(g));
        /* the rope factors (llama3), every other weight as it was */
        char name[96];
        sd_tensor a, b;
        int n = sd_model_n_tensors(g);
        assert_int_equal(sd_model_n_tensors(h), n);
        for (int i = 0; i < n; i++) {
            assert_int_equal(sd_model_tensor(g, i, name, sizeof name, &a), SD_OK);
            char hname[96];
            assert_int_equal(sd_model_tensor(h, i, hname, sizeof hname, &b), SD_OK);
            assert_string_equal(name, hname);
            if (strcmp(name, "rope_freqs.weight") == 0) {
                const double d = sdtest_max_abs_diff(a.data, b.data, (size_t)a.cols);
                printf("  %s: llama3 rope_scaling factors vs the file's rope_freqs: max diff %.2g\n", k_zoo[z], d);
                if (d > TOL_ROPE_FACTORS) fail_msg("rope factors differ by %g", d);
            }
        }
        snprintf(label, sizeof label, "%s as HF", k_zoo[z]);
        check_against_reference(h, cJSON_GetObjectItem(ref, k_zoo[z]), label);
        sd_model_free(h);
        sd_model_free(g);
        free(tj);
    }
    cJSON_Delete(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_matches_llama_cpp),
        cmocka_unit_test(test_zoo_as_hf_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
