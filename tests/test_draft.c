/* Draft policies: the adaptive controller's decisions under given costs and acceptance records
 * (no clock: costs are injected), llama.cpp's p_min, and the engine under each policy keeping
 * greedy output identical to plain decoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/policy.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/spec.h"

/* Pass costs of a memory-bound target (a pass of n tokens costs 1 + 0.05 (n - 1) decode steps)
 * or of a cache-resident one (n steps), and a draft step of `draft`. */
static void costs(sd_adaptive *a, int memory_bound, double draft) {
    for (int n = 1; n <= SD_ADAPT_MAX_N; n++) sd_adaptive_time_pass(a, n, memory_bound ? 1 + 0.05 * (n - 1) : n);
    sd_adaptive_time_draft(a, 1, draft);
}

/* Runs one round of the policy on confidences conf[0..k), as a drafter would: the proposals
 * made (a dropped one is not). */
static int round_of(sd_adaptive *a, int k_max, const float *conf) {
    const int k = sd_adaptive_begin_round(a, k_max);
    int n = 0;
    for (int i = 0; i < k; i++) {
        const sd_draft_verdict v = a->base.judge(&a->base, 0, i, conf[i]);
        if (v == SD_DRAFT_DROP) break;
        n = i + 1;
        if (v == SD_DRAFT_STOP) break;
    }
    return n;
}

static void test_adaptive_decisions(void **state) {
    (void)state;
    const float sure[8] = {0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    const float fading[8] = {0.95f, 0.9f, 0.3f, 0.05f, 0.05f, 0.9f, 0.9f, 0.9f};
    sd_adaptive a;

    /* memory-bound, cheap draft, confident: all 8 */
    sd_adaptive_init(&a);
    costs(&a, 1, 0.05);
    assert_int_equal(round_of(&a, 8, sure), 8);
    /* confidence collapsing at the third draft: it stops there (the 0.3 one kept or dropped,
     * never the 0.05 ones) */
    const int n = round_of(&a, 8, fading);
    printf("  memory-bound target, confidences 0.95 0.9 0.3 0.05 ...: %d drafts\n", n);
    assert_true(n >= 2 && n <= 3);
    /* an expensive draft (as costly as the target): drafting does not pay */
    sd_adaptive_init(&a);
    costs(&a, 1, 1.0);
    assert_int_equal(round_of(&a, 8, sure), 0);

    /* a cache-resident target (a pass of n tokens costs n steps): never, but for one exploring
     * draft every 32 rounds */
    sd_adaptive_init(&a);
    costs(&a, 0, 0.3);
    int drafted = 0, rounds_with = 0;
    for (int r = 0; r < 320; r++) {
        const int d = round_of(&a, 4, sure);
        drafted += d;
        rounds_with += d > 0;
        assert_true(d <= 1);
    }
    printf("  cache-resident target: %d of 320 rounds draft (one draft each)\n", rounds_with);
    assert_int_equal(rounds_with, 10);

    /* learning: a drafter whose 0.95-confident drafts are always rejected stops being trusted */
    sd_adaptive_init(&a);
    costs(&a, 1, 0.05);
    for (int r = 0; r < 50; r++) sd_adaptive_record(&a, 0, sure, 1, 0);
    assert_int_equal(round_of(&a, 8, sure), 0);
    /* ... while a reliable one at 0.35 confidence earns longer rounds than its prior allows */
    sd_adaptive_init(&a);
    costs(&a, 1, 0.05);
    const float low[8] = {0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f};
    const int before = round_of(&a, 8, low);
    for (int r = 0; r < 200; r++) sd_adaptive_record(&a, 0, low, 8, 8);
    const int after = round_of(&a, 8, low);
    printf("  0.35-confident drafts, always accepted: %d drafts before learning, %d after\n", before, after);
    assert_true(after > before);
    assert_int_equal(after, 8);
}

static void test_pmin_policy(void **state) {
    (void)state;
    sd_pmin_policy p;
    sd_pmin_policy_init(&p, 0.5f);
    assert_int_equal(p.base.judge(&p.base, 0, 0, 0.9f), SD_DRAFT_MORE);
    assert_int_equal(p.base.judge(&p.base, 0, 1, 0.5f), SD_DRAFT_MORE);
    assert_int_equal(p.base.judge(&p.base, 0, 2, 0.49f), SD_DRAFT_DROP);
}

/* Every policy keeps greedy speculative output identical to plain decoding: stories260K drafting
 * for itself (trained: confident drafts, so p_min 0.5 keeps some and drops others; adaptive sees
 * a cache-resident target and mostly declines). */
static void test_policies_lossless(void **state) {
    (void)state;
    sd_model *t = sdtest_shared_model("models/stories260K/stories260K.bin", "models/stories260K/tok512.bin");
    const int32_t prompt[5] = {1, 403, 407, 261, 378};
    int32_t *plain = sdtest_greedy(t, NULL, prompt, 5, 80, NULL);
    static const sd_draft_mode modes[3] = {SD_DRAFT_ADAPTIVE, SD_DRAFT_PMIN, SD_DRAFT_FIXED};
    static const char *const names[3] = {"adaptive", "p_min 0.5", "fixed"};
    for (int mi = 0; mi < 3; mi++) {
        sd_spec_params p = sd_spec_default_params();
        p.n_predict = 80;
        p.stop_at_eos = 0;
        p.draft_max = 6;
        p.draft_mode = modes[mi];
        p.p_min = 0.5f;
        sd_spec *s = NULL;
        assert_int_equal(sd_spec_create(t, t, &p, &s), SD_OK); /* self-draft: every kept draft accepted */
        sd_spec_stats st;
        assert_int_equal(sd_spec_generate(s, prompt, 5, NULL, NULL, &st), SD_OK);
        int n = 0;
        const int32_t *h = sd_spec_tokens(s, &n);
        assert_int_equal(n, 85);
        assert_memory_equal(h + 5, plain, 80 * sizeof(int32_t));
        printf("  %-10s %d rounds with drafts, %d without, %d drafts, all accepted: %s\n", names[mi], st.n_verify,
               st.n_target_steps, st.n_drafted, st.n_accepted == st.n_drafted ? "yes" : "no");
        assert_int_equal(st.n_accepted, st.n_drafted);
        assert_int_equal(st.drafted_by[0], st.n_drafted);
        assert_string_equal(st.sources[0], "model");
        sd_spec_free(s);
    }
    free(plain);
    sd_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_decisions),
        cmocka_unit_test(test_pmin_policy),
        cmocka_unit_test(test_policies_lossless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
