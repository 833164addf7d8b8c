/* Reference-JSON helpers (see sdtest_ref.h): one copy of the loading and logits comparison
 * that test_model.c, test_hf.c and test_tokenizer.c use. */
#include "sdtest_ref.h"

#include <stdio.h>
#include <stdlib.h>

#include "sdtest.h"
#include "sdtest_models.h"

cJSON *sdtest_load_reference(const char *rel) {
    char *path = sdtest_shared_or_skip(rel);
    size_t len = 0;
    char *txt = sdtest_read_file(path, &len);
    assert_non_null(txt);
    cJSON *j = cJSON_ParseWithLength(txt, len);
    assert_non_null(j);
    free(txt);
    free(path);
    return j;
}

int32_t *sdtest_json_ints(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc((size_t)(*n + 1) * sizeof(int32_t));
    assert_non_null(v);
    for (int i = 0; i < *n; i++) v[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return v;
}

double sdtest_check_reference_logits(sd_model *m, const cJSON *ref, const char *label, double tol) {
    int n;
    int32_t *tok = sdtest_json_ints(cJSON_GetObjectItem(ref, "tokens"), &n);
    const cJSON *logits = cJSON_GetObjectItem(ref, "logits");
    const int V = sd_model_hparams(m)->vocab_size;
    assert_int_equal(cJSON_GetArraySize(logits), n);
    float *want = malloc((size_t)n * V * sizeof(float));
    assert_non_null(want);
    for (int i = 0; i < n; i++) {
        const cJSON *row = cJSON_GetArrayItem(logits, i);
        assert_int_equal(cJSON_GetArraySize(row), V);
        for (int j = 0; j < V; j++) want[(size_t)i * V + j] = (float)cJSON_GetArrayItem(row, j)->valuedouble;
    }
    /* One batched pass over the whole sequence. */
    float *got = sdtest_batched_logits(m, tok, n);
    double d_batched = sdtest_max_abs_diff(got, want, (size_t)n * V);
    printf("  %s batched: max |logit - reference| = %.3g over %d positions\n", label, d_batched, n);
    assert_true(d_batched <= tol);
    /* And token by token. */
    float *step = sdtest_stepwise_logits(m, tok, n);
    double d_step = sdtest_max_abs_diff(step, want, (size_t)n * V);
    printf("  %s stepwise: max |logit - reference| = %.3g\n", label, d_step);
    assert_true(d_step <= tol);
    free(step);
    free(got);
    free(want);
    free(tok);
    return d_batched > d_step ? d_batched : d_step;
}

void sdtest_verify_output_distribution(const float *p, const float *q, int n, float *out) {
    /* q(x) min(1, p(x)/q(x)) = min(p(x), q(x)) (0 when q(x) = 0: x is never drafted). */
    double accepted = 0, resid_mass = 0;
    for (int i = 0; i < n; i++) {
        accepted += p[i] < q[i] ? p[i] : q[i];
        if (p[i] > q[i]) resid_mass += (double)p[i] - (double)q[i];
    }
    const double reject = 1.0 - accepted;
    for (int i = 0; i < n; i++) {
        double acc = p[i] < q[i] ? p[i] : q[i];
        /* Mirrors sd_sample_residual, including its fall-back to p when the residual is empty. */
        double res = resid_mass > 0 ? (p[i] > q[i] ? ((double)p[i] - q[i]) / resid_mass : 0.0)
                                    : p[i];
        out[i] = (float)(acc + reject * res);
    }
}
