/* Forward-pass numerics: real stories260K logits and greedy continuations against the
 * independent PyTorch reference, and batched == token-by-token on real and tiny GQA models. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "sdtest_ref.h"
#include "specdec/spec.h"

/* The reference is computed in float32 by PyTorch with a different summation order. */
#define TOL_REFERENCE_LOGITS 1e-4

static void check_reference_greedy(sd_model *m, const cJSON *ref) {
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItem(ref, "greedy")) {
        int np, ng;
        int32_t *prompt = sdtest_json_ints(cJSON_GetObjectItem(g, "prompt_tokens"), &np);
        int32_t *want = sdtest_json_ints(cJSON_GetObjectItem(g, "greedy_tokens"), &ng);
        const cJSON *text = cJSON_GetObjectItem(g, "prompt");
        if (text) { /* the tokenizer must agree with the reference's prompt ids too */
            int32_t ids[256];
            int nid = 0;
            const sd_tokenizer *tk = sd_model_tokenizer(m);
            assert_int_equal(sd_tokenizer_encode(tk, text->valuestring, strlen(text->valuestring), 1, ids, 256, &nid), SD_OK);
            assert_int_equal(nid, np);
            assert_memory_equal(ids, prompt, (size_t)np * sizeof(int32_t));
        }
        int32_t *got = sdtest_greedy(m, NULL, prompt, np, ng, NULL);
        for (int i = 0; i < ng; i++) {
            if (got[i] != want[i]) fail_msg("greedy token %d: got %d, reference %d", i, got[i], want[i]);
        }
        free(got);
        free(prompt);
        free(want);
    }
}

static void test_stories260k_bin_reference(void **state) {
    (void)state;
    cJSON *ref = sdtest_load_reference("reference/stories260K.json");
    sd_model *m = sdtest_shared_model("models/stories260K/stories260K.bin", NULL);
    sdtest_check_reference_logits(m, ref, sd_model_path(m), TOL_REFERENCE_LOGITS);
    check_reference_greedy(m, ref);
    sd_model_free(m);
    cJSON_Delete(ref);
}

static void test_stories260k_gguf_reference(void **state) {
    (void)state;
    cJSON *ref = sdtest_load_reference("reference/stories260K.json");
    sd_model *m = sdtest_shared_model("models/stories260K/stories260K.gguf", NULL);
    sdtest_check_reference_logits(m, ref, sd_model_path(m), TOL_REFERENCE_LOGITS);
    check_reference_greedy(m, ref);
    sd_model_free(m);
    cJSON_Delete(ref);
}

static void test_batched_stories260k(void **state) {
    (void)state;
    sd_model *m = sdtest_shared_model("models/stories260K/stories260K.bin", NULL);
    sdtest_check_batched(m, 0);
    sd_model_free(m);
}

static void test_batched_tiny_gqa(void **state) {
    (void)state;
    /* GQA 4:1 and 2:1, an odd hidden width (masked tails), MHA, and F16 weights. */
    sd_model *m1 = sdtest_tiny_model(64, 2, 8, 2, 96, 300, 1);
    sd_model *m2 = sdtest_tiny_model(48, 3, 6, 3, 100, 280, 2);
    sd_model *m3 = sdtest_tiny_model(32, 1, 4, 4, 64, 260, 3);
    sd_synth_params p = sdtest_synth_shape(64, 2, 4, 2, 160, 320, 256, 4);
    p.wtype = SD_TYPE_F16;
    sd_model *m4 = sdtest_synth_model(&p);
    sdtest_check_batched(m1, 0);
    sdtest_check_batched(m2, 0);
    sdtest_check_batched(m3, 0);
    sdtest_check_batched(m4, 0);
    sd_model_free(m1);
    sd_model_free(m2);
    sd_model_free(m3);
    sd_model_free(m4);
}

/* An F16 KV cache: batched == stepwise bit for bit (the rounding happens when a row is
 * stored, identically either way), logits within TOL_KV_F16 of the F32 cache's, and greedy
 * speculative decoding with F16 caches on both models equals plain decoding. */
#define TOL_KV_F16 1e-2 /* max |logit difference| / max |logit| (halves carry 11 bits) */
static void test_kv_f16(void **state) {
    (void)state;
    sd_synth_params p = sdtest_synth_shape(64, 2, 4, 2, 160, 320, 256, 5);
    sd_model *m16 = sdtest_synth_model(&p), *m32 = sdtest_synth_model(&p);
    sdtest_kv_type = SD_TYPE_F16;
    sdtest_check_batched(m16, 0);
    const int V = sd_model_hparams(m16)->vocab_size, n = 40;
    int32_t tok[40];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)((i * 29 + 3) % V);
    float *a = sdtest_batched_logits(m16, tok, n);
    sdtest_kv_type = SD_TYPE_F32;
    float *b = sdtest_batched_logits(m32, tok, n);
    sdtest_kv_type = SD_TYPE_F16;
    double worst = 0, scale = 0;
    for (int i = 0; i < n * V; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    if (worst > TOL_KV_F16 * scale) fail_msg("f16 KV logits differ by %g (scale %g)", worst, scale);
    assert_true(worst > 0); /* the cache really is F16 */
    sd_context_params cp = sd_context_default_params();
    cp.kv_type = SD_TYPE_F16;
    sd_context *c = NULL;
    assert_int_equal(sd_context_create(m16, &cp, &c), SD_OK);
    assert_int_equal(sd_kv_type(sd_context_kv(c)), SD_TYPE_F16);
    assert_null(sd_kv_k(sd_context_kv(c), 0, 0));
    sd_context_free(c);
    int32_t *plain = sdtest_greedy(m16, NULL, tok, 5, 48, NULL), *spec = sdtest_greedy(m16, m16, tok, 5, 48, NULL);
    sdtest_kv_type = SD_TYPE_F32;
    assert_memory_equal(plain, spec, 48 * sizeof(int32_t));
    free(plain);
    free(spec);
    free(a);
    free(b);
    sd_model_free(m16);
    sd_model_free(m32);
    /* head_dim < 16 has no f16 kernel: the context is refused, with the reason */
    sd_synth_params small = sdtest_synth_shape(32, 1, 4, 4, 64, 260, 64, 6);
    sd_model *m8 = sdtest_synth_model(&small);
    sd_context *bad = (sd_context *)1;
    assert_int_equal(sd_context_create(m8, &cp, &bad), SD_ERR_UNSUPPORTED);
    assert_null(bad);
    assert_non_null(strstr(sd_last_error(), "head_dim >= 16"));
    sd_model_free(m8);
}

/* The .bin and the .gguf of stories260K are the same weights: same logits. */
static void test_bin_equals_gguf(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model("models/stories260K/stories260K.bin", NULL);
    sd_model *b = sdtest_shared_model("models/stories260K/stories260K.gguf", NULL);
    int32_t tok[12] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
    float *la = sdtest_stepwise_logits(a, tok, 12), *lb = sdtest_stepwise_logits(b, tok, 12);
    assert_true(sdtest_max_abs_diff(la, lb, 12 * 512) <= 1e-5);
    free(la);
    free(lb);
    sd_model_free(a);
    sd_model_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k_bin_reference),
        cmocka_unit_test(test_stories260k_gguf_reference),
        cmocka_unit_test(test_bin_equals_gguf),
        cmocka_unit_test(test_batched_stories260k),
        cmocka_unit_test(test_batched_tiny_gqa),
        cmocka_unit_test(test_kv_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
