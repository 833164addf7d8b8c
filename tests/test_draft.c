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
#include "specdec/tokenizer.h"

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

    /* a cache-resident target (a pass of n tokens costs n steps): never, but for one probing
     * draft after 32 plain rounds, then after 64, 128, ... while the probes keep failing */
    sd_adaptive_init(&a);
    costs(&a, 0, 0.3);
    int rounds_with = 0, at[8];
    for (int r = 0; r < 320; r++) {
        const int d = round_of(&a, 4, sure);
        if (d > 0 && rounds_with < 8) at[rounds_with] = r;
        rounds_with += d > 0;
        assert_true(d <= 1);
    }
    printf("  cache-resident target: %d of 320 rounds draft (one draft each, at rounds %d, %d, %d)\n", rounds_with,
           at[0], at[1], at[2]);
    assert_int_equal(rounds_with, 3);
    assert_int_equal(at[0], 31);
    assert_int_equal(at[1], 95);
    assert_int_equal(at[2], 223);
    /* when drafting pays again (costs drift: the running averages follow), the wait starts over
     * from 32 */
    for (int i = 0; i < 200; i++) costs(&a, 1, 0.05);
    assert_true(round_of(&a, 4, sure) > 0);
    for (int i = 0; i < 200; i++) costs(&a, 0, 0.3);
    int first = -1;
    for (int r = 0; r < 64 && first < 0; r++)
        if (round_of(&a, 4, sure) > 0) first = r;
    assert_int_equal(first, 31);

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

/* A pass of n tokens costs max(1, n / 8) decode steps: memory-bound up to 8 tokens, then
 * compute-bound (a batch of server slots). */
static void batch_costs(sd_adaptive *a, double draft) {
    for (int n = 1; n <= SD_ADAPT_MAX_N; n++) sd_adaptive_time_pass(a, n, n > 8 ? n / 8.0 : 1.0);
    sd_adaptive_time_draft(a, 1, draft);
}

/* In a shared round (sd_spec_step_many) a draft must raise the whole round's rate: alone, or
 * beside a few plain slots while the pass stays memory-bound, drafts pay; beside 24 slots'
 * tokens, where each more token costs its share of compute, none does. */
static void test_adaptive_in_a_batch(void **state) {
    (void)state;
    const float sure[8] = {0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    sd_adaptive a;
    sd_adaptive_init(&a);
    batch_costs(&a, 0.05);
    const int alone = round_of(&a, 8, sure);
    a.others_n = 4; /* four plain slots, a token each */
    a.others_e = 4;
    const int beside4 = round_of(&a, 8, sure);
    a.others_n = 24;
    a.others_e = 24;
    int beside24 = 0;
    for (int r = 0; r < 31; r++) beside24 += round_of(&a, 8, sure);
    printf("  drafts per round alone %d, beside 4 plain slots %d, beside 24: %d in 31 rounds\n", alone, beside4,
           beside24);
    /* alone: 7 drafts keep the pass at 8 tokens; the 8th costs more than its 0.95^8 */
    assert_int_equal(alone, 7);
    /* beside 4: (5 + 0.95 + 0.90 + 0.86) / 1.15 = 6.70 against 6.43 for a fourth */
    assert_int_equal(beside4, 3);
    assert_int_equal(beside24, 0);
    /* the others' drafting time counts against the round too: beside 4 slots that spent 2 steps
     * drafting, the same three drafts still pay (time spent either way) */
    a.others_n = 4;
    a.others_e = 4;
    a.others_t = 2;
    assert_true(round_of(&a, 8, sure) >= 3);
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

/* ---- the n-gram drafter ---------------------------------------------------------------------- */

/* Brute force: the continuation of the most recent earlier match of the longest n-gram. */
static int naive_ngram(const int32_t *h, int n_hist, int n_min, int n_max, int k, int32_t *out) {
    const int last = n_hist - 1;
    for (int n = n_max; n >= n_min; n--) {
        if (n > n_hist) continue;
        for (int p = last - 1; p >= n - 1; p--) {
            if (memcmp(h + p - n + 1, h + last - n + 1, (size_t)n * sizeof *h) != 0) continue;
            int m = 0;
            while (m < k && p + 1 + m <= last) out[m] = h[p + 1 + m], m++;
            return m;
        }
    }
    return 0;
}

/* The hash index agrees with a brute-force search at every step of growing histories (small
 * vocabularies: many matches of every length), and after a history that is not an extension. */
static void test_ngram_matches_brute_force(void **state) {
    (void)state;
    sd_drafter *d = NULL;
    assert_int_equal(sd_drafter_ngram_create(1, 4, 64, &d), SD_OK);
    assert_string_equal(d->sources[0], "ngram");
    uint64_t x = 88172645463325252ull;
    int32_t h[600], got[8], want[8];
    float conf[8];
    int checked = 0, with_match = 0;
    for (int trial = 0; trial < 6; trial++) {
        const int vocab = trial < 3 ? 3 + trial : 20;
        for (int i = 0; i < 600; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            h[i] = (int32_t)(x % (uint64_t)vocab);
        }
        for (int n = 1; n <= 600; n += 1 + n / 50) {
            sd_draft_req r = {h, n, 8, NULL, NULL, NULL, got, conf, 0, 0, 0};
            assert_int_equal(d->vt->draft(d, &r), SD_OK);
            const int m = naive_ngram(h, n, 1, 4, 8, want);
            if (r.n_out != m || memcmp(got, want, (size_t)m * sizeof *got) != 0)
                fail_msg("trial %d, history %d: %d proposals, brute force %d", trial, n, r.n_out, m);
            assert_int_equal(r.q_filled, 0);
            checked++;
            with_match += m > 0;
        }
    }
    printf("  %d histories checked against brute force (%d with a match)\n", checked, with_match);
    /* nothing to match: no proposal */
    const int32_t uniq[5] = {1, 2, 3, 4, 5};
    sd_draft_req r = {uniq, 5, 4, NULL, NULL, NULL, got, conf, 0, 0, 0};
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_out, 0);
    /* the longest match wins and gives its confidence; a policy cuts the proposals */
    const int32_t rep[9] = {7, 8, 9, 10, 11, 12, 7, 8, 9};
    sd_draft_req r2 = {rep, 9, 8, NULL, NULL, NULL, got, conf, 0, 0, 0};
    assert_int_equal(d->vt->draft(d, &r2), SD_OK);
    assert_int_equal(r2.n_out, 6); /* 10 11 12 7 8 9: up to the history's end */
    assert_int_equal(got[0], 10);
    assert_true(conf[0] == 3.0f / 5.0f);
    sd_pmin_policy pm;
    sd_pmin_policy_init(&pm, 0.7f);
    r2.policy = &pm.base;
    assert_int_equal(d->vt->draft(d, &r2), SD_OK);
    assert_int_equal(r2.n_out, 0); /* a 3-gram match is 0.6 < 0.7 */
    sd_drafter_free(d);
    sd_drafter *bad = NULL;
    assert_int_equal(sd_drafter_ngram_create(3, 2, 64, &bad), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_drafter_ngram_create(0, 2, 64, &bad), SD_ERR_INVALID_ARG);
    assert_null(bad);
}

/* N-gram drafting alone and before a model: greedy output identical to plain decoding; on text
 * that repeats, the n-gram proposals are accepted; the stats split drafts by source. */
static void test_ngram_engine(void **state) {
    (void)state;
    sd_model *t = sdtest_shared_model("models/stories260K/stories260K.bin", "models/stories260K/tok512.bin");
    sd_model *dm = sdtest_shared_model("models/stories-draft/stories-draft.bin", "models/stories260K/tok512.bin");
    const char *text = "Once upon a time, there was a little dog named Max. Max liked to play. "
                       "Once upon a time, there was a little dog named Max. Max liked";
    int32_t prompt[128];
    int np = 0;
    assert_int_equal(sd_tokenizer_encode(sd_model_tokenizer(t), text, strlen(text), 1, prompt, 128, &np), SD_OK);
    int32_t *plain = sdtest_greedy(t, NULL, prompt, np, 60, NULL);
    for (int with_model = 0; with_model < 2; with_model++) {
        sd_spec_params p = sd_spec_default_params();
        p.n_predict = 60;
        p.stop_at_eos = 0;
        p.draft_max = 6;
        p.draft_mode = SD_DRAFT_FIXED;
        p.ngram = 1;
        sd_spec *s = NULL;
        assert_int_equal(sd_spec_create(t, with_model ? dm : NULL, &p, &s), SD_OK);
        sd_spec_stats st;
        assert_int_equal(sd_spec_generate(s, prompt, np, NULL, NULL, &st), SD_OK);
        int n = 0;
        const int32_t *h = sd_spec_tokens(s, &n);
        assert_memory_equal(h + np, plain, 60 * sizeof(int32_t));
        assert_int_equal(st.n_sources, 1 + with_model);
        assert_string_equal(st.sources[0], "ngram");
        int sum_d = 0, sum_a = 0;
        for (int i = 0; i < st.n_sources; i++) {
            sum_d += st.drafted_by[i];
            sum_a += st.accepted_by[i];
            printf("  %s: %s proposed %d, %d accepted\n", with_model ? "ngram+model" : "ngram", st.sources[i],
                   st.drafted_by[i], st.accepted_by[i]);
        }
        assert_int_equal(sum_d, st.n_drafted);
        assert_int_equal(sum_a, st.n_accepted);
        assert_true(st.accepted_by[0] > 10); /* the repeated sentence is found and copied */
        if (with_model) assert_true(st.drafted_by[1] > 0);
        sd_spec_free(s);
    }
    free(plain);
    sd_model_free(dm);
    sd_model_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adaptive_decisions),
        cmocka_unit_test(test_adaptive_in_a_batch),
        cmocka_unit_test(test_pmin_policy),
        cmocka_unit_test(test_policies_lossless),
        cmocka_unit_test(test_ngram_matches_brute_force),
        cmocka_unit_test(test_ngram_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
