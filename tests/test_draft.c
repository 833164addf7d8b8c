/* The draft controller: the adaptive policy's decisions under given costs and acceptance records
 * (no clock: costs are injected), llama.cpp's p_min, the limits every round obeys, the batch
 * switch, and the engine under each policy keeping greedy output identical to plain decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draft/controller.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/spec.h"
#include "specdec/tokenizer.h"

/* A cost record past its first 1-token pass (which is not a measurement: test_costs_warm_up),
 * so that what the tests feed it is measured. */
static void costs_init(sd_draft_costs *c) {
    sd_draft_costs_init(c);
    c->warm = 1;
}

/* Pass costs of a memory-bound target (a pass of n tokens costs 1 + 0.05 (n - 1) decode steps)
 * or of a cache-resident one (n steps), and a draft step of `draft`; fed as measurements. */
static void costs(sd_draft_costs *c, int memory_bound, double draft) {
    for (int n = 1; n <= SD_DRAFT_COST_MAX_N; n++) sd_draft_costs_pass(c, n, memory_bound ? 1 + 0.05 * (n - 1) : n);
    sd_draft_costs_draft(c, 1, draft);
}

/* What the other sequences of a shared pass put into it. */
typedef struct {
    int n;
    double e, t;
} others;

/* Runs one round of the controller on pre-draw confidences conf[0..), as a drafter would: the
 * proposals made. */
static int round_with(sd_draft_ctl *c, const sd_draft_costs *cs, sd_draft_mode mode, int k_max, const float *conf,
                      others o, float temp) {
    sd_spec_params p = sd_spec_default_params();
    p.sampling.temperature = temp;
    p.draft_max = k_max;
    p.draft_mode = mode;
    p.p_min = 0.5f;
    const sd_draft_round_in in = {1000, 1000, 1, o.n, o.e, o.t};
    const int k = sd_draft_ctl_plan(c, &p, cs, &in);
    sd_draft_policy *pol = sd_draft_ctl_policy(c);
    int n = 0;
    for (int i = 0; i < k; i++) {
        const sd_draft_verdict v = pol ? pol->judge(pol, 0, i, conf[i]) : SD_DRAFT_MORE;
        if (v == SD_DRAFT_STOP) break;
        n = i + 1;
        if (v == SD_DRAFT_LAST) break;
    }
    return n;
}

static int round_of(sd_draft_ctl *c, const sd_draft_costs *cs, int k_max, const float *conf) {
    return round_with(c, cs, SD_DRAFT_ADAPTIVE, k_max, conf, (others){0, 0, 0}, 0.0f);
}

static void test_adaptive_decisions(void **state) {
    (void)state;
    const float sure[8] = {0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    const float fading[8] = {0.95f, 0.9f, 0.3f, 0.05f, 0.05f, 0.9f, 0.9f, 0.9f};
    sd_draft_ctl a;
    sd_draft_costs cs;

    /* memory-bound, cheap draft, confident: all 8 */
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    assert_int_equal(round_of(&a, &cs, 8, sure), 8);
    /* confidence collapsing at the third draft: it stops there (the 0.3 one drawn or not, never
     * the 0.05 ones) */
    const int n = round_of(&a, &cs, 8, fading);
    printf("  memory-bound target, confidences 0.95 0.9 0.3 0.05 ...: %d drafts\n", n);
    assert_true(n >= 2 && n <= 3);
    /* an expensive draft (as costly as the target): drafting does not pay */
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 1.0);
    assert_int_equal(round_of(&a, &cs, 8, sure), 0);

    /* a cache-resident target (a pass of n tokens costs n steps): never, not even a probe: with
     * every draft accepted a round would not pay either, so there is nothing to learn */
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 0, 0.3);
    int rounds_with = 0, at[8];
    for (int r = 0; r < 320; r++) rounds_with += round_of(&a, &cs, 4, sure) > 0;
    assert_int_equal(rounds_with, 0);

    /* a memory-bound target and a drafter whose drafts are rejected: no drafts, but for one probing
     * draft after 32 plain rounds, then after 64, 128, ... while the probes keep failing */
    const float one_sure[1] = {0.95f};
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    for (int r = 0; r < 50; r++) sd_draft_ctl_record(&a, 0, one_sure, 1, 0);
    for (int r = 0; r < 320; r++) {
        const int d = round_of(&a, &cs, 4, sure);
        if (d > 0 && rounds_with < 8) at[rounds_with] = r;
        rounds_with += d > 0;
        assert_true(d <= 1);
    }
    printf("  rejected drafts: %d of 320 rounds draft (one draft each, at rounds %d, %d, %d)\n", rounds_with, at[0],
           at[1], at[2]);
    assert_int_equal(rounds_with, 3);
    assert_int_equal(at[0], 31);
    assert_int_equal(at[1], 95);
    assert_int_equal(at[2], 223);
    /* when drafting pays again (the drafts are accepted again), the wait starts over from 32 */
    for (int r = 0; r < 200; r++) sd_draft_ctl_record(&a, 0, one_sure, 1, 1);
    assert_true(round_of(&a, &cs, 4, sure) > 0);
    for (int r = 0; r < 2000; r++) sd_draft_ctl_record(&a, 0, one_sure, 1, 0);
    int first = -1;
    for (int r = 0; r < 64 && first < 0; r++)
        if (round_of(&a, &cs, 4, sure) > 0) first = r;
    assert_int_equal(first, 31);
    /* a probe costs the draft's catch-up on the tokens since the last drafting round: where a
     * token's catch-up costs more than 5% of a target step, none is made */
    sd_draft_costs_catchup(&cs, 40, 1, 40 * 0.2);
    rounds_with = 0;
    for (int r = 0; r < 320; r++) rounds_with += round_of(&a, &cs, 4, sure) > 0;
    assert_int_equal(rounds_with, 0);
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    sd_draft_costs_catchup(&cs, 40, 1, 40 * 0.04);
    for (int r = 0; r < 320; r++) rounds_with += round_of(&a, &cs, 4, sure) > 0;
    assert_true(rounds_with > 0);

    /* learning: a drafter whose 0.95-confident drafts are always rejected stops being trusted */
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    for (int r = 0; r < 50; r++) sd_draft_ctl_record(&a, 0, sure, 1, 0);
    assert_int_equal(round_of(&a, &cs, 8, sure), 0);
    /* ... while a reliable one at 0.35 confidence earns longer rounds than its prior allows */
    sd_draft_ctl_init(&a);
    const float low[8] = {0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f, 0.35f};
    const int before = round_of(&a, &cs, 8, low);
    for (int r = 0; r < 200; r++) sd_draft_ctl_record(&a, 0, low, 8, 8);
    const int after = round_of(&a, &cs, 8, low);
    printf("  0.35-confident drafts, always accepted: %d drafts before learning, %d after\n", before, after);
    assert_true(after > before);
    assert_int_equal(after, 8);

    /* a lookup's proposals (a source that runs no draft step) cost only their share of the pass:
     * beside a draft step as costly as the target's, a model's do not pay, a lookup's do */
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 1.0);
    assert_int_equal(round_of(&a, &cs, 8, sure), 0);
    a.stepping = 0;
    assert_int_equal(round_of(&a, &cs, 8, sure), 8);

    /* one more draft step is worth what the proposal after one of this confidence is accepted at,
     * learned: unsure proposals (0.15) accepted 3 times in 10, the sure ones after them always */
    const float unsure_first[8] = {0.15f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    costs(&cs, 1, 0.15);
    const int unlearned = round_of(&a, &cs, 4, unsure_first);
    for (int r = 0; r < 100; r++) sd_draft_ctl_record(&a, 0, unsure_first, 4, r % 10 < 3 ? 4 : 0);
    const int learned = round_of(&a, &cs, 4, unsure_first);
    printf("  an unsure first proposal, sure ones after it: %d drafts before learning, %d after\n", unlearned, learned);
    assert_int_equal(unlearned, 1);
    assert_int_equal(learned, 4);

    /* given costs are never updated by measurements */
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    cs.given = 1;
    const sd_draft_costs copy = cs;
    costs(&cs, 0, 0.9);
    assert_memory_equal(&cs, &copy, sizeof cs);
}

/* A pass of n tokens costs max(1, n / 8) decode steps: memory-bound up to 8 tokens, then
 * compute-bound (a batch of server slots). */
static void batch_costs(sd_draft_costs *c, double draft) {
    for (int n = 1; n <= SD_DRAFT_COST_MAX_N; n++) sd_draft_costs_pass(c, n, n > 8 ? n / 8.0 : 1.0);
    sd_draft_costs_draft(c, 1, draft);
}

/* Before anything is learned, a greedy round believes an unsure proposal more than a sampled one
 * (controller.c, bin_prior: under greedy verification a draft's argmax is the target's far more
 * often than its probability); what is learned overrides the prior. */
static void test_greedy_prior(void **state) {
    (void)state;
    const float unsure[8] = {0.15f, 0.15f, 0.15f, 0.15f, 0.15f, 0.15f, 0.15f, 0.15f};
    sd_draft_costs cs;
    costs_init(&cs);
    costs(&cs, 1, 0.05);
    sd_draft_ctl g, s;
    sd_draft_ctl_init(&g);
    sd_draft_ctl_init(&s);
    const int ng = round_with(&g, &cs, SD_DRAFT_ADAPTIVE, 8, unsure, (others){0, 0, 0}, 0.0f);
    const int ns = round_with(&s, &cs, SD_DRAFT_ADAPTIVE, 8, unsure, (others){0, 0, 0}, 1.0f);
    printf("  confidences 0.15, nothing learned: greedy %d drafts, temperature 1 %d\n", ng, ns);
    assert_true(ng > ns);
    /* learned: such proposals are rejected; greedy then drafts no more than sampled */
    for (int r = 0; r < 200; r++) sd_draft_ctl_record(&g, 0, unsure, 1, 0);
    for (int r = 0; r < 200; r++) sd_draft_ctl_record(&s, 0, unsure, 1, 0);
    const int lg = round_with(&g, &cs, SD_DRAFT_ADAPTIVE, 8, unsure, (others){0, 0, 0}, 0.0f);
    const int ls = round_with(&s, &cs, SD_DRAFT_ADAPTIVE, 8, unsure, (others){0, 0, 0}, 1.0f);
    printf("  after 200 rejections: greedy %d, temperature 1 %d\n", lg, ls);
    assert_true(lg <= ls && lg < ng);
}

/* A pass whose cost jumps at 4 tokens and is flat after: a round of sure proposals carries on past
 * the jump, which one more proposal alone would not pay for but the ones after it share. */
static void test_cost_jump(void **state) {
    (void)state;
    const float sure[8] = {0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    sd_draft_costs cs;
    costs_init(&cs);
    for (int n = 1; n <= SD_DRAFT_COST_MAX_N; n++) sd_draft_costs_pass(&cs, n, n <= 3 ? 1.0 : 1.5);
    sd_draft_costs_draft(&cs, 1, 0.02);
    sd_draft_ctl c;
    sd_draft_ctl_init(&c);
    const int n = round_of(&c, &cs, 8, sure);
    printf("  pass cost 1 up to 3 tokens, 1.5 from 4: %d drafts of 8\n", n);
    assert_int_equal(n, 8);
}

/* In a shared round a draft must raise the whole round's rate: alone, or beside a few plain
 * slots while the pass stays memory-bound, drafts pay; beside 24 slots' tokens, where each more
 * token costs its share of compute, none does. */
static void test_adaptive_in_a_batch(void **state) {
    (void)state;
    const float sure[8] = {0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f};
    sd_draft_ctl a;
    sd_draft_costs cs;
    sd_draft_ctl_init(&a);
    costs_init(&cs);
    batch_costs(&cs, 0.05);
    const int alone = round_of(&a, &cs, 8, sure);
    const int beside4 = round_with(&a, &cs, SD_DRAFT_ADAPTIVE, 8, sure, (others){4, 4, 0}, 0.0f); /* 4 plain slots */
    int beside24 = 0;
    for (int r = 0; r < 31; r++) beside24 += round_with(&a, &cs, SD_DRAFT_ADAPTIVE, 8, sure, (others){24, 24, 0}, 0.0f);
    printf("  drafts per round alone %d, beside 4 plain slots %d, beside 24: %d in 31 rounds\n", alone, beside4,
           beside24);
    /* alone: 7 drafts keep the pass at 8 tokens; the 8th costs more than its 0.95^8 */
    assert_int_equal(alone, 7);
    /* beside 4: (5 + 0.95 + 0.90 + 0.86) / 1.15 = 6.70 against 6.43 for a fourth */
    assert_int_equal(beside4, 3);
    assert_int_equal(beside24, 0);
    /* the others' drafting time counts against the round too: beside 4 slots that spent 2 steps
     * drafting, the same three drafts still pay (time spent either way); a controller that was
     * drafting, since after plain rounds drafting must pay 10% more to resume */
    sd_draft_ctl b;
    sd_draft_ctl_init(&b);
    assert_int_equal(round_of(&b, &cs, 8, sure), 7);
    assert_true(round_with(&b, &cs, SD_DRAFT_ADAPTIVE, 8, sure, (others){4, 4, 2}, 0.0f) >= 3);
}

/* Once drafting did not pay, it resumes only when a round with a draft is expected to run 10%
 * faster than a plain one (near break-even the verdict would flip with every noisy figure); while
 * drafting, any expected gain keeps it going. One draft accepted half the time (no record yet):
 * 1.5 tokens in a pass of 2 against 1 in a step of 1. */
static void test_resume_margin(void **state) {
    (void)state;
    sd_draft_ctl c;
    sd_draft_ctl_init(&c);
    sd_draft_costs cs;
    costs_init(&cs);
    cs.given = 1;
    cs.t_pass[1] = 1.0;
    cs.t_draft = 1e-9;
    sd_spec_params p = sd_spec_default_params();
    p.draft_max = 4;
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    const sd_draft_round_in in = {1000, 1000, 1, 0, 0, 0};
    cs.t_pass[2] = 1.4; /* 1.07x: pays, and drafting starts (nothing said it did not pay) */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 4);
    cs.t_pass[2] = 1.6; /* 0.94x: plain */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    cs.t_pass[2] = 1.4; /* 1.07x again: not enough to resume */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    cs.t_pass[2] = 1.3; /* 1.15x: resumes */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 4);
    cs.t_pass[2] = 1.45; /* 1.03x: drafting goes on */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 4);
    /* beside other sequences in the pass (the batch switch measures there), no margin */
    const sd_draft_round_in shared = {1000, 1000, 1, 2, 2, 0}; /* 2 tokens of others, 2 emitted */
    cs.t_pass[3] = 1.8;
    cs.t_pass[4] = 2.4; /* 2 + 1.5 tokens in 2.4 against 2 + 1 in 1.8: 0.88x: plain */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &shared), 0);
    cs.t_pass[4] = 2.0; /* 1.05x: resumes, where alone it would not */
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &shared), 4);
}

/* p_min judges the distribution a draft is about to be drawn from (its top probability), before
 * the draw; fixed drafts need no judging; every mode stays within the round's limits. */
static void test_pmin_and_limits(void **state) {
    (void)state;
    sd_draft_ctl c;
    sd_draft_costs cs;
    sd_draft_ctl_init(&c);
    costs_init(&cs);
    const float conf[6] = {0.9f, 0.5f, 0.49f, 0.9f, 0.9f, 0.9f};
    /* 0.5 is kept (not below p_min 0.5), the round ends before the 0.49 one */
    assert_int_equal(round_with(&c, &cs, SD_DRAFT_PMIN, 6, conf, (others){0, 0, 0}, 0.0f), 2);
    assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 2, 0.49f), SD_DRAFT_STOP);
    assert_int_equal(round_with(&c, &cs, SD_DRAFT_FIXED, 6, conf, (others){0, 0, 0}, 0.0f), 6);
    sd_spec_params p = sd_spec_default_params();
    p.draft_max = 6;
    p.draft_mode = SD_DRAFT_FIXED;
    assert_null(sd_draft_ctl_policy(&c));
    /* the round's limits: room, the batch share, the switch */
    sd_draft_round_in in = {3, 1000, 1, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 3);
    in = (sd_draft_round_in){1000, 2, 1, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 2);
    in = (sd_draft_round_in){1000, 1000, 0, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    in = (sd_draft_round_in){0, 1000, 1, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    /* nothing measured of drafting: a round of k drafts, as fixed k drafts it, each proposed
     * however unlikely (judged by guessed costs, a memory-bound target would never draft) */
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    in = (sd_draft_round_in){1000, 1000, 1, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6);
    for (int i = 0; i < 5; i++) assert_int_equal(sd_draft_ctl_judge(&c.base, 0, i, 0.01f), SD_DRAFT_MORE);
    assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 5, 0.01f), SD_DRAFT_LAST);
    /* its pass measured, the draft step not (its model caught up on a long history): again */
    sd_draft_costs_pass(&cs, 7, 1.3);
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6);
    /* both measured: a plain step, which measures the 1-token pass everything is weighed against */
    sd_draft_costs_draft(&cs, 1, 0.1);
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    sd_draft_costs_pass(&cs, 1, 1.0);
    /* a pass of 2 costing 3 steps (pooled with the 7-token pass's 1.3): judged, and plain */
    sd_draft_costs_pass(&cs, 2, 3.0);
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 0);
    /* 1.2 steps (about 1.25 once the 3.0 has faded): a draft accepted half the time pays, one
     * accepted 5% of the time (the lowest bin's prior) does not, and is judged so */
    for (int i = 0; i < 31; i++) sd_draft_costs_pass(&cs, 2, 1.2);
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6);
    assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 0, 0.01f), SD_DRAFT_STOP);
    assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6);
    assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 0, 0.99f), SD_DRAFT_MORE);
}

/* Measured pass costs: measured sizes as measured, interpolated between them, extrapolated past
 * the largest with the slope of the two largest, scaled from the smallest below it. */
static void test_costs(void **state) {
    (void)state;
    sd_draft_costs c;
    costs_init(&c);
    assert_true(sd_draft_costs_verify(&c, 3) == 0.0);
    sd_draft_costs_pass(&c, 2, 2.0);
    assert_true(fabs(sd_draft_costs_verify(&c, 1) - 1.0) < 1e-12); /* 2.0 * 1 / 2 */
    sd_draft_costs_pass(&c, 5, 3.5);
    assert_true(fabs(sd_draft_costs_verify(&c, 5) - 3.5) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&c, 3) - 2.5) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&c, 9) - 5.5) < 1e-12);  /* slope 0.5 past 5 */
    assert_true(fabs(sd_draft_costs_verify(&c, 60) - 31.0) < 1e-12); /* past the table too */
    /* the plain mean of the first figures (an exponential mean from the first alone kept its
     * noise), then a running mean over the last COST_WINDOW (20): a new figure moves it by 1/20 */
    sd_draft_costs_pass(&c, 5, 5.5);
    assert_true(fabs(sd_draft_costs_verify(&c, 5) - 4.5) < 1e-12);
    sd_draft_costs_pass(&c, 5, 1.0);
    assert_true(fabs(sd_draft_costs_verify(&c, 5) - 10.0 / 3) < 1e-12);
    for (int i = 0; i < 1000; i++) sd_draft_costs_pass(&c, 5, 2.0);
    assert_true(fabs(sd_draft_costs_verify(&c, 5) - 2.0) < 1e-6);
    sd_draft_costs_pass(&c, 5, 22.0);
    assert_true(fabs(sd_draft_costs_verify(&c, 5) - 3.0) < 1e-6);
    /* a larger pass at today's price of a step: its ratio to the step measured beside it */
    sd_draft_costs s2;
    costs_init(&s2);
    sd_draft_costs_pass(&s2, 1, 1.0);
    sd_draft_costs_pass(&s2, 2, 1.2);
    sd_draft_costs_pass(&s2, 4, 2.0);
    assert_true(fabs(sd_draft_costs_verify(&s2, 2) - 1.2) < 1e-12);
    sd_draft_costs_pass(&s2, 1, 2.0); /* the step grew (a longer context): mean 1.5 */
    assert_true(fabs(sd_draft_costs_verify(&s2, 2) - 1.8) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&s2, 3) - 2.4) < 1e-12); /* between 1.8 and 3.0 */
    assert_true(fabs(sd_draft_costs_verify(&s2, 6) - 4.2) < 1e-12); /* slope 0.6 past 4 */
    sd_draft_costs_pass(&s2, 2, 1.8);                                 /* measured again at 1.5 */
    assert_true(fabs(sd_draft_costs_verify(&s2, 2) - 1.5) < 1e-12);   /* (1.2 + 1.8) / 2 */
    /* the draft step: rounds of 1 step at 1.0 s and of 4 at 1.6 s: the first step costs 1.0, each
     * one after it 0.2 (a draft model read cold after the target's pass, then from the caches) */
    sd_draft_costs d;
    costs_init(&d);
    for (int i = 0; i < 10; i++) {
        sd_draft_costs_draft(&d, 1, 1.0);
        sd_draft_costs_draft(&d, 4, 1.6);
    }
    printf("  draft rounds of 1 step at 1.0, of 4 at 1.6: first step %.3f, each more %.3f\n", d.t_draft_first, d.t_draft);
    assert_true(fabs(d.t_draft_first - 1.0) < 1e-9);
    assert_true(fabs(d.t_draft - 0.2) < 1e-9);
    /* rounds that all take 4 steps (fixed k) say nothing of the split: the mean per step for both */
    costs_init(&d);
    for (int i = 0; i < 30; i++) sd_draft_costs_draft(&d, 4, 2.0);
    assert_true(fabs(d.t_draft - 0.5) < 1e-12 && fabs(d.t_draft_first - 0.5) < 1e-12);
    /* nor does a line on which more steps cost less (noise): the mean per step */
    costs_init(&d);
    sd_draft_costs_draft(&d, 2, 1.0);
    sd_draft_costs_draft(&d, 1, 1.5);
    assert_true(fabs(d.t_draft - 2.5 / 3) < 1e-12 && fabs(d.t_draft_first - 2.5 / 3) < 1e-12);
    /* measured pass costs that fall with more tokens are noise: the fit never decreases, pooling
     * the violators by their measurements (here one each: 2, 3 and 4 at their mean) */
    sd_draft_costs m;
    costs_init(&m);
    const double meas[6] = {0, 1.0, 1.5, 1.1, 1.2, 1.4};
    for (int n = 1; n <= 5; n++) sd_draft_costs_pass(&m, n, meas[n]);
    for (int n = 1; n < 12; n++) assert_true(sd_draft_costs_verify(&m, n + 1) >= sd_draft_costs_verify(&m, n));
    assert_true(fabs(sd_draft_costs_verify(&m, 1) - 1.0) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&m, 3) - 3.8 / 3) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&m, 5) - 1.4) < 1e-12);
    /* 3 now holds four measurements: 2 and 3 pool to 1.18, below 4's 1.2, which stands alone */
    for (int i = 0; i < 3; i++) sd_draft_costs_pass(&m, 3, 1.1);
    assert_true(fabs(sd_draft_costs_verify(&m, 2) - (1.5 + 4 * 1.1) / 5) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&m, 3) - (1.5 + 4 * 1.1) / 5) < 1e-12);
    assert_true(fabs(sd_draft_costs_verify(&m, 4) - 1.2) < 1e-12);
    sd_draft_costs_pass(&c, 0, 1.0); /* ignored: out of range, not positive */
    sd_draft_costs_pass(&c, 7, -1.0);
    assert_true(c.t_pass[7] == 0.0);
}

/* The first 1-token pass may run cold (stories260K's second pass 1.4x a warm one; a self-drafting
 * random Qwen2's first passes 2-3x) and is provisional: used, but replaced by the next one rather
 * than averaged with it (averaged, it priced every plain step of a generation that then kept
 * drafting, and the Qwen2 ran at 0.6-0.8x plain). Larger passes count from their first. */
static void test_costs_warm_up(void **state) {
    (void)state;
    sd_draft_costs c;
    sd_draft_costs_init(&c);
    sd_draft_costs_pass(&c, 1, 3.0);
    assert_true(c.t_pass[1] == 3.0 && c.n_pass[1] == 0);
    assert_true(sd_draft_costs_verify(&c, 1) == 3.0);
    sd_draft_costs_pass(&c, 2, 3.5); /* measured beside a provisional step: no reference step */
    assert_true(c.t_pass[2] == 3.5 && c.n_pass[2] == 1 && c.ref1[2] == 0.0);
    sd_draft_costs_pass(&c, 1, 1.0);
    assert_true(c.t_pass[1] == 1.0 && c.n_pass[1] == 1);
    sd_draft_costs_pass(&c, 2, 1.9);
    assert_true(c.n_pass[2] == 2 && c.ref1[2] == 1.0);
}

/* A provisional 1-token price decides only where drafting is expected to win by far (1.5x):
 * nearer, a plain step measures it again, and then the counted price decides. */
static void test_provisional_step(void **state) {
    (void)state;
    const float conf[6] = {0.9f, 0.9f, 0.9f, 0.9f, 0.9f, 0.9f};
    for (int slow = 0; slow < 2; slow++) {
        sd_draft_ctl c;
        sd_draft_costs cs;
        sd_draft_ctl_init(&c);
        sd_draft_costs_init(&cs);
        assert_int_equal(round_of(&c, &cs, 6, conf), 6); /* the first round measures drafting */
        sd_draft_ctl_record(&c, 0, conf, 6, 6);
        sd_draft_costs_pass(&cs, 7, slow ? 2.5 : 1.3);
        sd_draft_costs_draft(&cs, 6, 0.6);
        assert_int_equal(round_of(&c, &cs, 6, conf), 0); /* then a plain step */
        sd_draft_costs_pass(&cs, 1, 1.0);
        /* every draft accepted: a round of 6 expected 4.2 tokens in 1.9 steps (2.2x plain's rate)
         * or, with a 7-token pass of 2.5 steps, in 3.1 (1.35x): trusted, or measured again */
        assert_int_equal(round_of(&c, &cs, 6, conf), slow ? 0 : 6);
        sd_draft_costs_pass(&cs, 1, 1.0);
        assert_int_equal(round_of(&c, &cs, 6, conf), 6);
    }
}

/* The batch switch (a server's rounds of several slots): it measures both modes for each batch
 * size, takes the faster (drafting only where it is faster beyond its rounds' noise), tries the
 * other now and then, waiting twice as long after each try that
 * changes nothing, and starts the wait over when one does; a batch of one always may draft. */
static void test_batch_switch(void **state) {
    (void)state;
    sd_draft_switch w;
    assert_int_equal(sd_draft_switch_init(&w, 0), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
    assert_int_equal(sd_draft_switch_allow(&w, 1), 1);
    /* drafting measured first, then plain */
    int allowed_first = 0, plain_then = 0;
    for (int r = 0; r < 8; r++) {
        allowed_first += sd_draft_switch_allow(&w, 4);
        sd_draft_switch_record(&w, 4, 1, 4 * 0.9, 1.05, 0); /* drafting: slower per token here, a little */
    }
    for (int r = 0; r < 8; r++) {
        plain_then += !sd_draft_switch_allow(&w, 4);
        sd_draft_switch_record(&w, 4, 0, 4, 1.0, 0);
    }
    assert_int_equal(allowed_first, 8);
    assert_int_equal(plain_then, 8);
    /* plain wins; drafting is tried after 16, then 32, 64 ... rounds while it keeps losing */
    int tries[6], n_tries = 0;
    for (int r = 0; r < 600 && n_tries < 6; r++) {
        const int a = sd_draft_switch_allow(&w, 4);
        if (a) tries[n_tries++] = r;
        sd_draft_switch_record(&w, 4, a, a ? 4 * 0.9 : 4, a ? 1.05 : 1.0, 0);
    }
    printf("  plain faster at 4 slots: drafting tried at rounds %d, %d, %d, %d, %d\n", tries[0], tries[1], tries[2],
           tries[3], tries[4]);
    assert_true(n_tries >= 5);
    assert_int_equal(tries[0], 15);
    assert_int_equal(tries[1] - tries[0], 32);
    assert_int_equal(tries[2] - tries[1], 64);
    assert_int_equal(tries[3] - tries[2], 128);
    /* the host slows down (another guest): every round takes twice as long. Plain's rate halves
     * within its window; drafting's, measured before, is scaled alike rather than taken as it was
     * (it would beat plain's now by 70%): no drafting (no try falls due in them) */
    int drafting_slow = 0;
    for (int r = 0; r < 200; r++) {
        const int a = sd_draft_switch_allow(&w, 4);
        drafting_slow += a;
        sd_draft_switch_record(&w, 4, a, a ? 4 * 0.9 : 4, a ? 2.1 : 2.0, 0);
    }
    printf("  the host twice as slow: %d of 200 rounds drafting\n", drafting_slow);
    assert_int_equal(drafting_slow, 0);
    /* a try that costs much waits longer: one that takes 2.51 s beyond its tokens' worth of plain
     * rounds (4.5 tokens in 4.01 s against 3 tokens a second) costs its 2% of the rounds only
     * after 125.5 rounds; then the wait doubles as before, up to 512 (size 3 borrows nothing from
     * size 4: plain at a larger size implies nothing here) */
    for (int r = 0; r < 16; r++) {
        const int a = sd_draft_switch_allow(&w, 3);
        assert_int_equal(a, r < 8);
        sd_draft_switch_record(&w, 3, a, a ? 4.5 : 3, a ? 4.01 : 1.0, 0);
    }
    n_tries = 0;
    for (int r = 0; r < 1500 && n_tries < 5; r++) {
        const int a = sd_draft_switch_allow(&w, 3);
        if (a) tries[n_tries++] = r;
        sd_draft_switch_record(&w, 3, a, a ? 4.5 : 3, a ? 4.01 : 1.0, 0);
    }
    printf("  costly tries at 3 slots: drafting tried at rounds %d, %d, %d, %d, %d\n", tries[0], tries[1], tries[2],
           tries[3], tries[4]);
    assert_int_equal(n_tries, 5);
    assert_int_equal(tries[0], 15);
    assert_int_equal(tries[1] - tries[0], 126);
    assert_int_equal(tries[2] - tries[1], 252);
    assert_int_equal(tries[3] - tries[2], 504);
    assert_int_equal(tries[4] - tries[3], 512);
    sd_draft_switch_free(&w);
    sd_draft_switch_free(&w); /* twice is fine */

    /* A try's drafts catch up on every round since the last one drafted, which grows with the
     * wait: counted apart. Plain rounds 3 tokens in 1 s; tries of 2.7 tokens in 1.4 s (0.5 s of
     * their own beyond plain's rate) plus c s of catching up per round waited. At c = 0.01 the
     * budget leaves 0.01 s a round for the 0.5 s: 50 rounds to the next try (not 33, the whole
     * cost over the budget); at c = 0.03 the catching up alone takes more than the budget, and
     * the wait is the longest. */
    static const struct {
        double c;
        int second; /* rounds from the first try to the second */
    } catchup[] = {{0.01, 50}, {0.03, 512}};
    for (int c = 0; c < 2; c++) {
        assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
        int since = 1; /* rounds since the last drafting round, this one counted (16 at the first try) */
        n_tries = 0;
        for (int r = 0; r < 16; r++) {
            const int a = sd_draft_switch_allow(&w, 2);
            sd_draft_switch_record(&w, 2, a, a ? 2.7 : 3, a ? 1.4 : 1.0, 0);
        }
        for (int r = 0; r < 700 && n_tries < 2; r++, since++) {
            const int a = sd_draft_switch_allow(&w, 2);
            if (a) {
                tries[n_tries++] = r;
                sd_draft_switch_record(&w, 2, 1, 2.7, 1.4 + catchup[c].c * since, catchup[c].c * since);
                since = 0; /* the loop's ++ makes it 1 at the next round */
            } else {
                sd_draft_switch_record(&w, 2, 0, 3, 1.0, 0);
            }
        }
        printf("  catching up %.2f s a round waited: drafting tried at rounds %d, %d\n", catchup[c].c, tries[0], tries[1]);
        assert_int_equal(n_tries, 2);
        assert_int_equal(tries[1] - tries[0], catchup[c].second);
        sd_draft_switch_free(&w);
    }

    /* A mode's rate is its tokens over its seconds (not the mean of its rounds' rates, which favours
     * the short rounds), and drafting is taken only where it beats plain rounds by more than the
     * spread of its rounds allows for: plain rounds 6 tokens in 1 s; drafting rounds alternate
     * between two outcomes (tokens, seconds). */
    static const struct {
        double tok[2], sec[2];
        int drafting; /* the verdict after 8 rounds of each */
    } noisy[] = {
        {{3, 20}, {0.25, 4.0}, 0}, /* rates 12 and 5: their mean 8.5, but 23 tokens in 4.25 s = 5.4 */
        {{10, 6}, {1.0, 1.6}, 0},  /* 16 tokens in 2.6 s = 6.15: within the rounds' noise */
        {{14, 10}, {1.0, 1.0}, 1}, /* 12 a second, spread 2: twice plain's rate, clearly */
        {{6.24, 6.24}, {1.0, 1.0}, 0}, /* 4% faster without noise: not worth requests that no longer end together */
        {{6.36, 6.36}, {1.0, 1.0}, 1}, /* 6% faster */
    };
    for (int c = 0; c < 5; c++) {
        const int batch = 3 + c;
        assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
        for (int r = 0; r < 8; r++) {
            assert_int_equal(sd_draft_switch_allow(&w, batch), 1);
            sd_draft_switch_record(&w, batch, 1, noisy[c].tok[r % 2], noisy[c].sec[r % 2], 0);
        }
        for (int r = 0; r < 8; r++) {
            assert_int_equal(sd_draft_switch_allow(&w, batch), 0);
            sd_draft_switch_record(&w, batch, 0, 6, 1.0, 0);
        }
        printf("  %d slots, drafting rounds %.2f/%.2f and %.2f/%.2f against plain 6/1: %s\n", batch, noisy[c].tok[0],
               noisy[c].sec[0], noisy[c].tok[1], noisy[c].sec[1], noisy[c].drafting ? "drafting" : "plain");
        assert_int_equal(sd_draft_switch_allow(&w, batch), noisy[c].drafting);
        /* other batch sizes keep their own figures: a smaller one is measured afresh (drafting
         * first) unless plain here implies plain there */
        assert_int_equal(sd_draft_switch_allow(&w, 2), 1);
        sd_draft_switch_free(&w);
    }

    /* A size met rarely borrows its measured neighbours' verdict: drafting at a larger size
     * implies drafting, plain at a smaller one plain, and between a smaller size that drafts and a
     * larger one that does not, their margins interpolated. Size 2 drafts at twice plain's rate
     * (margin +1), size 8 at 0.4 of it (margin -0.6): +0.73 at 3, +0.2 at 5, -0.07 at 6. */
    assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
    for (int r = 0; r < 16; r++) {
        const int a2 = sd_draft_switch_allow(&w, 2), a8 = sd_draft_switch_allow(&w, 8);
        assert_int_equal(a2, r < 8);
        assert_int_equal(a8, r < 8);
        sd_draft_switch_record(&w, 2, a2, a2 ? 4 : 2, 1.0, 0);
        sd_draft_switch_record(&w, 8, a8, a8 ? 3.2 : 8, 1.0, 0);
    }
    static const int between[9] = {[3] = 1, [4] = 1, [5] = 1, [6] = 0, [7] = 0};
    for (int b = 3; b <= 7; b++)
        for (int r = 0; r < 20; r++) assert_int_equal(sd_draft_switch_allow(&w, b), between[b]);
    /* once met SWITCH_RARE (128) times, a size is measured itself: size 6's borrowed plain rounds
     * count as its plain measure, so its own drafting rounds come next */
    int n6 = 20, own = -1;
    for (; n6 < 300 && own < 0; n6++) {
        const int a = sd_draft_switch_allow(&w, 6);
        if (a) own = n6;
        sd_draft_switch_record(&w, 6, a, a ? 9 : 6, 1.0, 0); /* drafting pays at 6 after all */
    }
    assert_int_equal(own, 128);
    for (int r = 1; r < 8; r++) {
        assert_int_equal(sd_draft_switch_allow(&w, 6), 1);
        sd_draft_switch_record(&w, 6, 1, 9, 1.0, 0);
    }
    assert_int_equal(sd_draft_switch_allow(&w, 6), 1); /* measured: its own verdict */
    sd_draft_switch_free(&w);
    /* one side alone: plain at 4 implies plain at 6 but nothing at 3 (measured: drafting, then
     * plain), drafting at 4 implies drafting at 3 but nothing at 6 */
    for (int d = 0; d < 2; d++) {
        assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
        for (int r = 0; r < 16; r++) {
            const int a = sd_draft_switch_allow(&w, 4);
            sd_draft_switch_record(&w, 4, a, a ? (d ? 8 : 2) : 4, 1.0, 0);
        }
        int at3 = 0, at6 = 0;
        for (int r = 0; r < 16; r++) {
            const int a3 = sd_draft_switch_allow(&w, 3), a6 = sd_draft_switch_allow(&w, 6);
            at3 += a3;
            at6 += a6;
            sd_draft_switch_record(&w, 3, a3, 3, 1.0, 0);
            sd_draft_switch_record(&w, 6, a6, 6, 1.0, 0);
        }
        printf("  4 slots %s: of 16 rounds, %d drafting at 3 slots, %d at 6\n", d ? "drafting" : "plain", at3, at6);
        assert_int_equal(at3, d ? 16 : 8);
        assert_int_equal(at6, d ? 8 : 0);
        sd_draft_switch_free(&w);
    }
    assert_int_equal(sd_draft_switch_init(&w, 8), SD_OK);
    sd_draft_switch_record(&w, 9, 1, 1, 1, 0); /* beyond the table: ignored */
    assert_int_equal(sd_draft_switch_allow(&w, 9), 1);
    sd_draft_switch_free(&w);
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

/* The adaptive start, with nothing measured: a sequence alone drafts its first round in full
 * (what drafting costs, measured as fixed k would draft), then decodes one plain step (the 1-token
 * price every judgement compares against; no extra pass before the first token); a round two
 * sequences share measures the 1-token pass first, alone (one pass each: the provisional price,
 * then the counted one), and so drafts in full from its first round (a shared plain round would
 * never measure it, and the pair would never draft). */
static void test_adaptive_start(void **state) {
    (void)state;
    sd_model *t = sdtest_shared_model("models/stories260K/stories260K.bin", "models/stories260K/tok512.bin");
    const int32_t prompt[5] = {1, 403, 407, 261, 378};
    sd_spec_params p = sd_spec_default_params();
    p.n_predict = 16;
    p.stop_at_eos = 0;
    p.draft_max = 4;
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    sd_pair *pr = NULL;
    assert_int_equal(sd_pair_create(t, t, &p, 2, &pr), SD_OK);
    sd_spec *a = sd_pair_spec(pr, 0), *b = sd_pair_spec(pr, 1);
    sd_spec_round rd[2];
    /* alone */
    assert_int_equal(sd_spec_begin(a, prompt, 5), SD_OK);
    assert_int_equal(sd_spec_step(a, NULL, NULL, &rd[0]), SD_OK);
    assert_int_equal(rd[0].n_drafted, 4); /* the draft steps and a 5-token pass, measured */
    assert_int_equal(sd_spec_batch_pass_tokens(sd_pair_batch(pr)), 5);
    /* then plain: the draft step was measured too (the prompt's catch-up came before it, with the
     * prefill; had it come in this round, the round would be no step's price, and the next would
     * draft again to measure one) */
    assert_int_equal(sd_spec_step(a, NULL, NULL, &rd[0]), SD_OK);
    assert_int_equal(rd[0].n_drafted, 0);
    assert_int_equal(rd[0].n_tokens, 1);
    assert_int_equal(sd_spec_batch_pass_tokens(sd_pair_batch(pr)), 1);
    sd_spec_cancel(a);
    sd_pair_free(pr);
    /* shared, in a new pair (nothing measured) */
    assert_int_equal(sd_pair_create(t, t, &p, 2, &pr), SD_OK);
    a = sd_pair_spec(pr, 0);
    b = sd_pair_spec(pr, 1);
    assert_int_equal(sd_spec_begin(a, prompt, 5), SD_OK);
    assert_int_equal(sd_spec_begin(b, prompt, 5), SD_OK);
    sd_spec *both[2] = {a, b};
    assert_int_equal(sd_spec_batch_step(sd_pair_batch(pr), both, 2, rd), SD_OK);
    printf("  first round shared by two: %d + %d drafts in a pass of %d\n", rd[0].n_drafted, rd[1].n_drafted,
           sd_spec_batch_pass_tokens(sd_pair_batch(pr)));
    assert_int_equal(rd[0].n_drafted, 4);
    assert_int_equal(rd[1].n_drafted, 4);
    sd_pair_free(pr);
    sd_model_free(t);
}

/* The 1-token price of a target that streams its weights is waited for: after the first round
 * (drafting measured), rounds draft k unjudged as it did, except that an unsure first proposal is
 * not made (its round's pass is one token: the price), for a few rounds before a plain step; a
 * target inside the caches takes the plain step at once, and once the price is known rounds are
 * judged again. */
static void test_t1_wait(void **state) {
    (void)state;
    sd_spec_params p = sd_spec_default_params();
    p.draft_max = 6;
    p.draft_mode = SD_DRAFT_ADAPTIVE;
    const sd_draft_round_in in = {1000, 1000, 1, 0, 0, 0};
    for (int streamed = 0; streamed <= 1; streamed++) {
        sd_draft_ctl c;
        sd_draft_costs cs;
        sd_draft_ctl_init(&c);
        sd_draft_costs_init(&cs);
        cs.streamed = streamed;
        assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6); /* the first round: measures */
        sd_draft_costs_pass(&cs, 7, 1.2);
        sd_draft_costs_draft(&cs, 6, 0.6);
        int waits = 0;
        while (sd_draft_ctl_plan(&c, &p, &cs, &in) == 6 && waits < 64) {
            waits++;
            /* sure first proposals are made and every one after them, unjudged; an unsure first is not */
            assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 0, 0.9f), SD_DRAFT_MORE);
            for (int i = 1; i < 5; i++) assert_int_equal(sd_draft_ctl_judge(&c.base, 0, i, 0.01f), SD_DRAFT_MORE);
            assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 5, 0.01f), SD_DRAFT_LAST);
            assert_int_equal(sd_draft_ctl_judge(&c.base, 0, 0, 0.05f), SD_DRAFT_STOP);
        }
        printf("  streamed %d: %d rounds waited for an unsure first proposal, then a plain step\n", streamed, waits);
        if (streamed) assert_in_range(waits, 2, 16);
        else assert_int_equal(waits, 0);
        /* the price measured (the stopped round's pass, or the plain step): judged rounds */
        sd_draft_costs_pass(&cs, 1, 1.0);
        sd_draft_costs_pass(&cs, 1, 1.0);
        assert_int_equal(sd_draft_ctl_plan(&c, &p, &cs, &in), 6);
        assert_int_equal(c.measuring, SD_CTL_JUDGED);
    }
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
            sd_draft_req r = {h, n, n, 8, NULL, NULL, NULL, NULL, NULL, got, conf, 0, 0, 0, 0, 0};
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
    sd_draft_req r = {uniq, 5, 5, 4, NULL, NULL, NULL, NULL, NULL, got, conf, 0, 0, 0, 0, 0};
    assert_int_equal(d->vt->draft(d, &r), SD_OK);
    assert_int_equal(r.n_out, 0);
    /* the longest match wins and gives its confidence; a policy cuts the proposals */
    const int32_t rep[9] = {7, 8, 9, 10, 11, 12, 7, 8, 9};
    sd_draft_req r2 = {rep, 9, 9, 8, NULL, NULL, NULL, NULL, NULL, got, conf, 0, 0, 0, 0, 0};
    assert_int_equal(d->vt->draft(d, &r2), SD_OK);
    assert_int_equal(r2.n_out, 6); /* 10 11 12 7 8 9: up to the history's end */
    assert_int_equal(got[0], 10);
    assert_true(conf[0] == 3.0f / 5.0f);
    sd_draft_ctl pm;
    sd_draft_costs cs;
    sd_draft_ctl_init(&pm);
    costs_init(&cs);
    sd_spec_params pp = sd_spec_default_params();
    pp.draft_mode = SD_DRAFT_PMIN;
    pp.p_min = 0.7f;
    const sd_draft_round_in in = {1000, 1000, 1, 0, 0, 0};
    assert_int_equal(sd_draft_ctl_plan(&pm, &pp, &cs, &in), pp.draft_max);
    r2.policy = sd_draft_ctl_policy(&pm);
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
        cmocka_unit_test(test_greedy_prior),
        cmocka_unit_test(test_cost_jump),
        cmocka_unit_test(test_adaptive_in_a_batch),
        cmocka_unit_test(test_resume_margin),
        cmocka_unit_test(test_pmin_and_limits),
        cmocka_unit_test(test_costs),
        cmocka_unit_test(test_costs_warm_up),
        cmocka_unit_test(test_provisional_step),
        cmocka_unit_test(test_batch_switch),
        cmocka_unit_test(test_policies_lossless),
        cmocka_unit_test(test_adaptive_start),
        cmocka_unit_test(test_t1_wait),
        cmocka_unit_test(test_ngram_matches_brute_force),
        cmocka_unit_test(test_ngram_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
