/* Draft policies: how far a round drafts. Fixed k (no policy), llama.cpp's p_min threshold, and
 * the adaptive controller: a cost model fed by measured pass times and an online estimate of how
 * often a proposal is accepted given the drafter's confidence, stopping where one more draft no
 * longer raises the round's expected tokens per second. */
#include "draft/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- p_min (llama.cpp's --draft-p-min: a proposal below it is dropped and drafting stops) -- */

static sd_draft_verdict pmin_judge(sd_draft_policy *p, int source, int i, float conf) {
    (void)source;
    (void)i;
    const sd_pmin_policy *pm = (const sd_pmin_policy *)p;
    return conf < pm->p_min ? SD_DRAFT_DROP : SD_DRAFT_MORE;
}

void sd_pmin_policy_init(sd_pmin_policy *p, float p_min) {
    p->base.judge = pmin_judge;
    p->p_min = p_min;
}

/* ---- adaptive --------------------------------------------------------------------------- */

/* Pseudo-counts of each confidence bin's prior (acceptance = the bin's centre): a few proposals
 * outweigh it, and a drafter whose confidence is calibrated starts near right. */
#define PRIOR_N 2.0
/* Weight of a new measurement in the running pass costs (noisy machines: ~20 samples). */
#define COST_EMA 0.05
/* A round that drafts after this many plain ones keeps the estimates alive where drafting
 * stopped paying (costs drift, a draft may improve with the text). Each probe that finds
 * drafting still unprofitable doubles the wait, up to EXPLORE_MAX: a probe costs the draft
 * catching up on every token since the last one (on the tiny stories pair, 32 tokens of draft
 * prefill, about 11 target steps), which at a fixed interval cost 15% of the run. */
#define EXPLORE_EVERY 32
#define EXPLORE_MAX 1024

static double accept_est(const sd_adaptive *a, int source, float conf) {
    int b = (int)(conf * SD_ADAPT_BINS);
    if (b < 0) b = 0;
    if (b >= SD_ADAPT_BINS) b = SD_ADAPT_BINS - 1;
    const double prior = (b + 0.5) / SD_ADAPT_BINS;
    return (a->acc[source][b] + PRIOR_N * prior) / (a->tried[source][b] + PRIOR_N);
}

/* Cost of a target pass of n tokens: measured where measured, else interpolated linearly between
 * the nearest measured sizes (a pass costs about a decode step plus a per-token term). */
static double verify_cost(const sd_adaptive *a, int n) {
    if (n < 1) n = 1;
    if (n > SD_ADAPT_MAX_N) n = SD_ADAPT_MAX_N;
    if (a->t_pass[n] > 0) return a->t_pass[n];
    int lo = n - 1, hi = n + 1;
    while (lo >= 1 && !(a->t_pass[lo] > 0)) lo--;
    while (hi <= SD_ADAPT_MAX_N && !(a->t_pass[hi] > 0)) hi++;
    if (lo >= 1 && hi <= SD_ADAPT_MAX_N)
        return a->t_pass[lo] + (a->t_pass[hi] - a->t_pass[lo]) * (n - lo) / (hi - lo);
    if (lo >= 1) { /* extrapolate with the slope of the two largest measured, else a step per token */
        int l2 = lo - 1;
        while (l2 >= 1 && !(a->t_pass[l2] > 0)) l2--;
        const double slope = l2 >= 1 ? (a->t_pass[lo] - a->t_pass[l2]) / (lo - l2) : a->t_pass[lo] / lo;
        return a->t_pass[lo] + slope * (n - lo);
    }
    return a->t_pass[hi] * n / hi;
}

/* Expected tokens per second of the whole round when this engine emits e tokens (expected)
 * after d draft steps and puts n tokens into the pass, beside the other engines' share. */
static double round_rate(const sd_adaptive *a, double e, int d, int n) {
    return (a->others_e + e) / (a->others_t + d * a->t_draft + verify_cost(a, a->others_n + n));
}

static sd_draft_verdict adaptive_judge(sd_draft_policy *p, int source, int i, float conf) {
    sd_adaptive *a = (sd_adaptive *)p;
    const double acc = accept_est(a, source, conf);
    const double cum = a->cum * acc, e_with = a->e + cum;
    /* keep it unless verifying it lowers the round's expected rate (its draft step is spent) */
    const double r_keep = round_rate(a, e_with, i + 1, i + 2);
    const double r_drop = round_rate(a, a->e, i + 1, i + 1);
    if (r_keep < r_drop) return SD_DRAFT_DROP;
    a->cum = cum;
    a->e = e_with;
    /* one more, expected to be accepted as often as this one (confidence runs in streaks) */
    const double r_next = round_rate(a, e_with + cum * acc, i + 2, i + 3);
    return r_next > r_keep ? SD_DRAFT_MORE : SD_DRAFT_STOP;
}

void sd_adaptive_init(sd_adaptive *a) {
    memset(a, 0, sizeof *a);
    a->base.judge = adaptive_judge;
}

int sd_adaptive_begin_round(sd_adaptive *a, int k_max) {
    a->cum = 1;
    a->e = 1;
    if (!(a->t_pass[1] > 0)) return k_max; /* nothing measured yet: a full round measures */
    /* The draft step's cost is only known once the drafter has run: until then a single draft
     * (a cheap probe) rather than k_max of them. Drafting a full first round on a pair where the
     * draft step costs as much as the target's (the tiny stories pair: 0.8 of a step) lost about
     * ten target steps, 8% of a 128-token generation. */
    if (!(a->t_draft > 0)) return k_max < 1 ? k_max : 1;
    /* Does even one draft pay? Its acceptance before seeing it: the first position's record. */
    const double first = a->first_tried > 0 ? (a->first_acc + PRIOR_N * 0.5) / (a->first_tried + PRIOR_N) : 0.5;
    const int pays = round_rate(a, 1 + first, 1, 2) > round_rate(a, 1, 0, 1);
    if (!a->explore_every) a->explore_every = EXPLORE_EVERY;
    if (pays) {
        a->plain_run = 0;
        a->explore_every = EXPLORE_EVERY;
        a->probing = 0;
        return k_max;
    }
    if (a->probing) { /* the last probe did not make drafting pay: wait longer next time */
        a->probing = 0;
        if (a->explore_every < EXPLORE_MAX) a->explore_every *= 2;
    }
    if (++a->plain_run >= a->explore_every) {
        a->plain_run = 0;
        a->probing = 1;
        return 1;
    }
    return 0;
}

void sd_adaptive_record(sd_adaptive *a, int source, const float *conf, int n_drafted, int n_accepted) {
    if (source < 0 || source >= SD_DRAFT_MAX_SOURCES) return;
    /* a proposal is tried when every earlier one was accepted */
    for (int i = 0; i < n_drafted && i <= n_accepted; i++) {
        int b = (int)(conf[i] * SD_ADAPT_BINS);
        b = b < 0 ? 0 : b >= SD_ADAPT_BINS ? SD_ADAPT_BINS - 1 : b;
        a->tried[source][b] += 1;
        if (i < n_accepted) a->acc[source][b] += 1;
    }
    if (n_drafted > 0) {
        a->first_tried += 1;
        a->first_acc += n_accepted > 0;
    }
}

void sd_adaptive_time_pass(sd_adaptive *a, int n_tokens, double seconds) {
    if (n_tokens < 1 || n_tokens > SD_ADAPT_MAX_N || !(seconds > 0)) return;
    double *t = &a->t_pass[n_tokens];
    *t = *t > 0 ? (1 - COST_EMA) * *t + COST_EMA * seconds : seconds;
}

void sd_adaptive_time_draft(sd_adaptive *a, int n_steps, double seconds) {
    if (n_steps < 1 || !(seconds >= 0)) return;
    const double per = seconds / n_steps;
    a->t_draft = a->t_draft > 0 ? (1 - COST_EMA) * a->t_draft + COST_EMA * per : per;
}
