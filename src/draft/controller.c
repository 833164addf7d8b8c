/* The draft controller (controller.h): fixed length, llama.cpp's p_min, and the adaptive default
 * (a cost model fed by measured pass and draft-step times, and an online estimate of how often a
 * proposal is accepted given its pre-draw confidence, stopping where one more draft no longer
 * raises the round's expected tokens per second); and the batch switch that measures, per batch
 * size, whether rounds that may draft beat plain ones. */
#include "draft/controller.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pseudo-counts of each confidence bin's prior (acceptance = the bin's centre): a few proposals
 * outweigh it, and a drafter whose confidence is calibrated starts near right. */
#define PRIOR_N 2.0
/* The running costs follow the last COST_WINDOW measurements (noisy machines): each new one
 * weighs 1/COST_WINDOW once that many are in, and before that they are the plain mean. An
 * exponential mean started from the first figure kept its noise for a whole generation of a tiny
 * model (stories260K's first measured passes ran far off; measured: commit 2a313ec). */
#define COST_WINDOW 20
/* A round that drafts after this many plain ones keeps the estimates alive where drafting
 * stopped paying (costs drift, a draft may improve with the text). Each probe that finds
 * drafting still unprofitable doubles the wait, up to EXPLORE_MAX: a probe costs the draft
 * catching up on every token since the last one. */
#define EXPLORE_EVERY 32
#define EXPLORE_MAX 1024
/* How much faster a round with a draft must be expected to run than a plain one for drafting to
 * resume after plain rounds: on stories260K + stories-draft, whose cost model sits near
 * break-even, resuming at any expected gain left some bench runs slower than plain decoding
 * (measured: commit 63014ba). */
#define RESUME_MARGIN 1.10
/* A probe makes the draft model catch up on every token since the last round that drafted, which
 * costs a share of the plain steps taken meanwhile however long the wait: a probe is made only
 * where that share is at most this. On stories260K + stories-draft a token's catch-up costs a
 * large share of a target step, on the cost twins a small one (measured: commit c712845). */
#define PROBE_MAX_SHARE 0.05
/* How much faster than plain steps drafting must be expected to run for a 1-token price measured
 * once, early, to be trusted (it may run cold: sd_draft_costs_pass): above how much slower the
 * cold passes seen ran (stories260K's), below the cost twins' gain (measured: commit 16f286b). */
#define PROVISIONAL_MARGIN 1.5
/* While the 1-token price is unknown, a target that streams its weights (sd_draft_costs.streamed)
 * drafts up to T1_WAIT_ROUNDS more rounds as the first one, except that a first proposal expected
 * to be accepted less often than UNSURE_FIRST is not made: that round's pass of one token
 * measures the price where the round would have emitted little more than that token anyway.
 * Only then a plain step, whose pass is the price too, but which cost a round of drafts wherever
 * it fell: on the cost twins, 32-token generations ran 0.89 of fixed k's speed with it right
 * after the first round. A target inside the caches takes the plain step at once: its pass grows
 * with its tokens (a random Qwen2 drafting for itself: 7 tokens 5.7 steps), so rounds of k
 * drafts, confident as a self-draft's are, ran it at 0.73x plain speed. */
#define T1_WAIT_ROUNDS 8
#define UNSURE_FIRST 0.5

/* ---- costs -------------------------------------------------------------------------------- */

void sd_draft_costs_init(sd_draft_costs *c) { memset(c, 0, sizeof *c); }

static void running_mean(double *mean, int *n, double x) {
    if (*n < COST_WINDOW) (*n)++;
    *mean += (x - *mean) / *n;
}

/* The first 1-token pass is provisional: the next one replaces it rather than joining its mean.
 * The first passes after a prefill run cold (the random Qwen2 zoo model drafting for itself: its
 * first passes of one and two tokens took far longer than warm ones, easing over a few passes;
 * stories260K's second pass too: commit 16f286b), and a cold 1-token price, counted, priced
 * every plain step for the rest of a generation that kept drafting (no plain round measures it
 * again): drafting slower than plain decoding looked like a gain (measured: commit aae2168). The
 * controller trusts it only where drafting wins by far (PROVISIONAL_MARGIN). A larger pass
 * measured cold errs the safe way (drafting looks dearer than it is, and every drafting round
 * measures it again), so its first one counts; its reference step (pass_at) is a counted one. */
void sd_draft_costs_pass(sd_draft_costs *c, int n_tokens, double seconds) {
    if (c->given || n_tokens < 1 || n_tokens > SD_DRAFT_COST_MAX_N || !(seconds > 0)) return;
    if (n_tokens == 1 && !c->warm) {
        c->warm = 1;
        c->t_pass[1] = seconds;
        return;
    }
    running_mean(&c->t_pass[n_tokens], &c->n_pass[n_tokens], seconds);
    if (n_tokens > 1) c->ref1[n_tokens] = c->n_pass[1] > 0 ? c->t_pass[1] : 0;
}

/* A measured pass of n tokens at today's price of one step: the ratio to the single-token pass
 * it was measured beside, times that pass now. A step's cost moves with the context (a small
 * model's attention grows with it), and a 2-token pass measured at the start of a long generation
 * then read as cheaper than one token at its end (stories260K; measured: commit 63014ba). */
static double pass_at(const sd_draft_costs *c, int n) {
    const double t = c->t_pass[n];
    if (n == 1 || !(t > 0) || !(c->ref1[n] > 0) || !(c->t_pass[1] > 0)) return t;
    return t * c->t_pass[1] / c->ref1[n];
}

/* A round's drafting time against its steps, a + b x steps, fitted over the recent rounds: b is
 * what one more step costs, a + b the first. On the cost twins' draft (24 MB, inside this Zen 5's
 * L3) the first step after the target's 343 MB pass costs well more than the next ones (measured:
 * commit c712845), and one price per step (the mean) made adaptive rounds stop where fixed k = 4
 * gained. Where the rounds' steps hardly vary (fixed k) or the line is implausible, both are the
 * mean per step. */
void sd_draft_costs_draft(sd_draft_costs *c, int n_steps, double seconds) {
    if (c->given || n_steps < 1 || !(seconds >= 0)) return;
    if (c->n_draft < COST_WINDOW) c->n_draft++;
    const double x[4] = {n_steps, seconds, (double)n_steps * n_steps, n_steps * seconds};
    double *m = c->draft_mom;
    for (int i = 0; i < 4; i++) m[i] += (x[i] - m[i]) / c->n_draft;
    const double per = m[1] / m[0], var = m[2] - m[0] * m[0];
    const double b = var > 0.1 ? (m[3] - m[0] * m[1]) / var : per, a = m[1] - b * m[0];
    const int line = b > 0 && b <= per && a >= 0;
    c->t_draft = line ? b : per;
    c->t_draft_first = line ? a + b : per;
}

/* The measured sizes' costs made non-decreasing in the pass's tokens (pool-adjacent-violators,
 * weighted by how many measurements each holds): a pass of more tokens reads the same weights and
 * does more, so a larger one measured cheaper is noise, and on a noisy host (the cost twins, Zen 5)
 * one slow 2-token pass beside fast 3- to 5-token ones priced every round's first draft at several
 * times its cost (measured: commit c712845). fit[n] is 0 where n is not measured. */
static void fitted(const sd_draft_costs *c, double fit[SD_DRAFT_COST_MAX_N + 1]) {
    double v[SD_DRAFT_COST_MAX_N + 1], w[SD_DRAFT_COST_MAX_N + 1];
    int len[SD_DRAFT_COST_MAX_N + 1], nb = 0;
    for (int n = 1; n <= SD_DRAFT_COST_MAX_N; n++) {
        fit[n] = 0;
        if (!(c->t_pass[n] > 0)) continue;
        v[nb] = pass_at(c, n);
        w[nb] = c->n_pass[n] > 0 ? c->n_pass[n] : 1;
        len[nb++] = 1;
        while (nb >= 2 && v[nb - 2] > v[nb - 1]) { /* pool the violating pair of blocks */
            const double ww = w[nb - 2] + w[nb - 1];
            v[nb - 2] = (v[nb - 2] * w[nb - 2] + v[nb - 1] * w[nb - 1]) / ww;
            w[nb - 2] = ww;
            len[nb - 2] += len[nb - 1];
            nb--;
        }
    }
    /* each block's value to its measured sizes, in order */
    for (int n = 1, b = 0, used = 0; n <= SD_DRAFT_COST_MAX_N && b < nb; n++) {
        if (!(c->t_pass[n] > 0)) continue;
        fit[n] = v[b];
        if (++used == len[b]) {
            b++;
            used = 0;
        }
    }
}

double sd_draft_costs_catchup_seconds(const sd_draft_costs *c, int n_steps, double seconds) {
    const double t = seconds - (n_steps - 1) * c->t_draft; /* the steps after it at their price */
    return t > 0 ? t : 0;
}

void sd_draft_costs_catchup(sd_draft_costs *c, int n_tokens, int n_steps, double seconds) {
    if (c->given || n_tokens < 1 || n_steps < 1 || !(seconds >= 0)) return;
    running_mean(&c->t_catchup, &c->n_catchup, sd_draft_costs_catchup_seconds(c, n_steps, seconds) / n_tokens);
}

/* A pass of n tokens from the fitted costs f (fitted): measured sizes as fitted, interpolated
 * between them, extrapolated past the largest, scaled from the smallest below it. */
static double verify_of_fit(const double f[SD_DRAFT_COST_MAX_N + 1], int n) {
    const int N = SD_DRAFT_COST_MAX_N;
    if (n < 1) n = 1;
    if (n <= N && f[n] > 0) return f[n];
    int lo = (n <= N ? n : N + 1) - 1, hi = n + 1; /* the nearest measured sizes below and above */
    while (lo >= 1 && !(f[lo] > 0)) lo--;
    while (hi <= N && !(f[hi] > 0)) hi++;
    if (lo >= 1 && hi <= N) return f[lo] + (f[hi] - f[lo]) * (n - lo) / (hi - lo);
    if (lo >= 1) { /* past the largest: the slope of the two largest measured, else a step per token */
        int l2 = lo - 1;
        while (l2 >= 1 && !(f[l2] > 0)) l2--;
        const double slope = l2 >= 1 ? (f[lo] - f[l2]) / (lo - l2) : f[lo] / lo;
        return f[lo] + slope * (n - lo);
    }
    return hi <= N ? f[hi] * n / hi : 0.0;
}

double sd_draft_costs_verify(const sd_draft_costs *c, int n) {
    double f[SD_DRAFT_COST_MAX_N + 1];
    fitted(c, f);
    return verify_of_fit(f, n);
}

/* ---- the sequence's controller ---------------------------------------------------------------- */

void sd_draft_ctl_init(sd_draft_ctl *c) {
    memset(c, 0, sizeof *c);
    c->base.judge = sd_draft_ctl_judge;
    c->stepping = ~0u;
}

static int conf_bin(float conf) {
    const int b = (int)(conf * SD_CTL_BINS);
    return b < 0 ? 0 : b >= SD_CTL_BINS ? SD_CTL_BINS - 1 : b;
}

/* A bin's prior: its centre where proposals are accepted with probability min(1, p/q), and the
 * centre's square root under greedy verification, where a proposal is accepted when it is the
 * target's argmax. A draft's argmax is the target's far more often than its probability says:
 * on three pairs (the cost twins, stories260K + stories-draft, the twin target drafting for
 * itself in Q4_0), 600-1700 proposals each, bins 0.1-0.2 / 0.2-0.3 / 0.3-0.4 / 0.4-0.5 were
 * accepted 0.38-0.45 / 0.50-0.63 / 0.59-0.73 / 0.72-0.82 of the time (root of the centre: 0.39 /
 * 0.50 / 0.59 / 0.67), while sampled at temperature 1 they were 0.51-0.53 in every bin below 0.6.
 * Priors at the centre made the first rounds of a greedy generation stop at proposals that pay. */
static double bin_prior(const sd_draft_ctl *c, int b) {
    const double centre = (b + 0.5) / SD_CTL_BINS;
    return c->greedy ? sqrt(centre) : centre;
}

static double accept_est(const sd_draft_ctl *c, int source, float conf) {
    const int b = conf_bin(conf);
    const double prior = bin_prior(c, b);
    return (c->acc[source][b] + PRIOR_N * prior) / (c->tried[source][b] + PRIOR_N);
}

/* Expected tokens per second of the whole round when this sequence emits e tokens (expected)
 * after d draft steps and puts n tokens into the pass, beside the other sequences' share. */
static double draft_time(const sd_draft_costs *k, int d) {
    return d < 1 ? 0 : (k->t_draft_first > 0 ? k->t_draft_first : k->t_draft) + (d - 1) * k->t_draft;
}

static double round_rate(const sd_draft_ctl *c, double e, int d, int n) {
    const double t =
        c->others_t + draft_time(c->costs, d) + verify_of_fit(c->fit, c->others_n + c->pass_base + n);
    return t > 0 ? (c->others_e + e) / t : 0.0;
}

/* The best expected rate of a round of 1..k_max drafts: the first accepted at `first`, each after
 * it at the rate proposals that followed another were (learned over every bin; prior: `first`). */
static double best_round_rate(const sd_draft_ctl *c, double first, int k_max, int steps) {
    double acc = 0, tried = 0;
    for (int s = 0; s < SD_DRAFT_MAX_SOURCES; s++)
        for (int j = 0; j < SD_CTL_BINS; j++) {
            acc += c->next_acc[s][j];
            tried += c->next_tried[s][j];
        }
    const double next = (acc + PRIOR_N * first) / (tried + PRIOR_N);
    double best = 0, cum = first, e = 1 + first;
    for (int d = 1; d <= k_max; d++, cum *= next, e += cum) {
        const double r = round_rate(c, e, steps ? d : 0, d + 1);
        if (r > best) best = r;
    }
    return best;
}

/* The adaptive round's start: k_max, 0 when not even one draft is expected to pay (now and then
 * 1 instead, a probe). */
static int adaptive_plan(sd_draft_ctl *c, int k_max) {
    const sd_draft_costs *k = c->costs;
    const int steps = c->stepping != 0; /* the first proposal's draft steps (a lookup: none) */
    /* Nothing measured of drafting (the draft step, a pass of more than one token): a round of
     * k_max drafts, as fixed k drafts it, proposed whatever the judgement (which would weigh them
     * by guesses: a pass cost linear in its tokens keeps a memory-bound target from ever
     * drafting). A generation starts so: a start of two plain steps and a round of one draft
     * cost short generations on the cost twins much of fixed k's speed (measured: commit
     * 16f286b). A pair whose drafting does not pay loses one round. */
    int multi = 0;
    for (int n = 2; n <= SD_DRAFT_COST_MAX_N; n++) multi |= k->t_pass[n] > 0;
    if ((steps && !(k->t_draft > 0)) || !multi) {
        c->measuring = SD_CTL_MEASURE_ALL;
        return k_max;
    }
    /* then the 1-token pass everything is weighed against: a round that meets an unsure first
     * proposal, else a plain step (a round shared by several sequences has it measured first:
     * batch.c) */
    if (!(k->t_pass[1] > 0)) {
        if (steps && k->streamed && c->t1_wait < T1_WAIT_ROUNDS) {
            c->t1_wait++;
            c->measuring = SD_CTL_MEASURE_ONE_UNSURE;
            return k_max;
        }
        return 0;
    }
    /* Does even one draft pay? Its acceptance before seeing it: the first position's record. */
    const double first = c->first_tried > 0 ? (c->first_acc + PRIOR_N * 0.5) / (c->first_tried + PRIOR_N) : 0.5;
    /* From plain rounds, drafting must pay by a margin: near break-even, costs measured a round
     * apart flip the verdict back and forth, and each switch back costs the draft its catch-up on
     * the tokens it missed (no step's price, so not in t_draft). Alone only: in a shared pass one
     * sequence's draft moves the round's rate by a few percent, and the batch switch measures
     * which rounds run faster. */
    const double margin = c->plain_last && c->others_n == 0 ? RESUME_MARGIN : 1.0;
    const int pays = round_rate(c, 1 + first, steps, 2) > margin * round_rate(c, 1, 0, 1);
    /* A provisional 1-token price (sd_draft_costs_pass) is trusted where the best round expected
     * beats plain steps by PROVISIONAL_MARGIN; elsewhere a plain step measures it again. */
    if (pays && !k->given && k->n_pass[1] < 1 &&
        !(best_round_rate(c, first, k_max, steps) > PROVISIONAL_MARGIN * round_rate(c, 1, 0, 1)))
        return 0;
    if (!c->explore_every) c->explore_every = EXPLORE_EVERY;
    c->plain_last = !pays;
    if (pays) {
        c->plain_run = 0;
        c->explore_every = EXPLORE_EVERY;
        c->probing = 0;
        return k_max;
    }
    if (c->probing) { /* the last probe did not make drafting pay: wait longer next time */
        c->probing = 0;
        if (c->explore_every < EXPLORE_MAX) c->explore_every *= 2;
    }
    /* A probe learns how often drafts are accepted, at the price of the draft's catch-up (above).
     * Where not even a full round of drafts, every one accepted, would pay (a target whose pass
     * costs a step per token), there is nothing to learn. */
    if (!(round_rate(c, 1 + k_max, steps ? k_max : 0, k_max + 1) > margin * round_rate(c, 1, 0, 1))) return 0;
    if (steps && c->costs->t_catchup > PROBE_MAX_SHARE * c->costs->t_pass[1]) return 0;
    if (++c->plain_run >= c->explore_every) {
        c->plain_run = 0;
        c->probing = 1;
        c->measuring = SD_CTL_MEASURE_ALL; /* a probe measures: proposed whatever its confidence */
        return 1;
    }
    return 0;
}

int sd_draft_ctl_plan(sd_draft_ctl *c, const sd_spec_params *p, const sd_draft_costs *costs,
                      const sd_draft_round_in *in) {
    c->mode = p->draft_mode;
    c->p_min = p->p_min;
    c->greedy = !(p->sampling.temperature > 0);
    c->costs = costs;
    /* once a round, for the adaptive judge (the only one that prices passes, many times a proposal) */
    if (costs && p->draft_mode == SD_DRAFT_ADAPTIVE) fitted(costs, c->fit);
    c->others_n = in->others_n;
    c->others_e = in->others_e;
    c->others_t = in->others_t;
    c->cum = 1;
    c->e = 1;
    c->pass_base = 0;
    c->measuring = SD_CTL_JUDGED;
    int k = p->draft_max;
    if (k > in->room) k = in->room;
    if (k > in->share) k = in->share;
    if (!in->allowed || k < 1) return 0;
    if (p->draft_mode == SD_DRAFT_ADAPTIVE) k = adaptive_plan(c, k);
    c->k_round = k;
    return k;
}

sd_draft_policy *sd_draft_ctl_policy(sd_draft_ctl *c) { return c->mode == SD_DRAFT_FIXED ? NULL : &c->base; }

sd_draft_verdict sd_draft_ctl_judge(sd_draft_policy *policy, int source, int i, float conf) {
    sd_draft_ctl *c = (sd_draft_ctl *)policy;
    if (c->mode == SD_DRAFT_FIXED) return SD_DRAFT_MORE;
    if (c->mode == SD_DRAFT_PMIN) return conf < c->p_min ? SD_DRAFT_STOP : SD_DRAFT_MORE;
    if (source < 0 || source >= SD_DRAFT_MAX_SOURCES) source = 0;
    if (c->measuring == SD_CTL_MEASURE_ONE_UNSURE && i == 0 && accept_est(c, source, conf) < UNSURE_FIRST)
        return SD_DRAFT_STOP;
    if (c->measuring != SD_CTL_JUDGED) /* the round's proposals, there to be measured */
        return i + 1 >= c->k_round ? SD_DRAFT_LAST : SD_DRAFT_MORE;
    /* adaptive: propose it unless verifying it, with or without more after it, lowers the round's
     * expected rate (the draft step that produced its distribution is spent either way) */
    const double acc = accept_est(c, source, conf);
    const double cum = c->cum * acc, e_with = c->e + cum;
    const int d = (c->stepping >> source & 1u) ? i + 1 : 0; /* draft steps spent so far */
    const double r_keep = round_rate(c, e_with, d, i + 2);
    const double r_stop = round_rate(c, c->e, d, i + 1);
    /* more after it: is a draft step worth taking? Their acceptance before their distributions
     * are seen: how often a proposal following one of this confidence was accepted, learned, with
     * the rate after any proposal as its prior. A prior of this proposal's own acceptance (as if
     * confidence ran in streaks) ended every round at its first unsure proposal, and so never
     * learned that on the cost twins two in three after it were accepted. */
    const int b = conf_bin(conf);
    double all_acc = 0, all_tried = 0;
    for (int j = 0; j < SD_CTL_BINS; j++) {
        all_acc += c->next_acc[source][j];
        all_tried += c->next_tried[source][j];
    }
    const double pooled = (all_acc + PRIOR_N * acc) / (all_tried + PRIOR_N);
    const double next = (c->next_acc[source][b] + PRIOR_N * pooled) / (c->next_tried[source][b] + PRIOR_N);
    /* Not only one more: any number m more, up to the round's k, each at that rate. A pass's cost
     * rises in steps (on Zen 4 the twin target's fitted costs were flat from 4 to 6 tokens, then
     * 0.47 ms more at 7), so a proposal can pay for a jump that the ones after it share: weighed
     * alone, with one more at most, the round ended at the jump. */
    double r_more = 0, e_m = e_with, cum_m = cum;
    for (int m = 1; i + 1 + m <= c->k_round; m++) {
        cum_m *= next;
        e_m += cum_m;
        const double r = round_rate(c, e_m, d ? d + m : 0, i + 2 + m);
        if (r > r_more) r_more = r;
    }
    if (r_keep < r_stop && r_more < r_stop) return SD_DRAFT_STOP;
    c->cum = cum;
    c->e = e_with;
    return r_more > r_keep ? SD_DRAFT_MORE : SD_DRAFT_LAST;
}

sd_draft_verdict sd_draft_ctl_judge_free(sd_draft_ctl *c, int source, float conf, int drafter_follows) {
    if (c->mode != SD_DRAFT_ADAPTIVE || !c->costs || !(c->costs->t_pass[1] > 0)) { /* nothing to weigh it by */
        c->pass_base++;
        return SD_DRAFT_MORE;
    }
    if (source < 0 || source >= SD_DRAFT_MAX_SOURCES) source = SD_CTL_SOURCE_GRAMMAR;
    const double acc = accept_est(c, source, conf);
    const double cum = c->cum * acc, e_with = c->e + cum;
    if (round_rate(c, e_with, 0, 2) < round_rate(c, c->e, 0, 1)) return SD_DRAFT_STOP; /* one more token vs none */
    if (drafter_follows) { /* the drafter's first proposal would take its place */
        const double first =
            c->first_tried > 0 ? (c->first_acc + PRIOR_N * 0.5) / (c->first_tried + PRIOR_N) : 0.5;
        if (acc < first) return SD_DRAFT_STOP;
    }
    c->cum = cum;
    c->e = e_with;
    c->pass_base++;
    return SD_DRAFT_MORE;
}

void sd_draft_ctl_record(sd_draft_ctl *c, int source, const float *conf, int n_drafted, int n_accepted) {
    if (source < 0 || source >= SD_DRAFT_MAX_SOURCES || !conf) return;
    /* a proposal is tried when every earlier one was accepted */
    for (int i = 0; i < n_drafted && i <= n_accepted; i++) {
        const int b = conf_bin(conf[i]);
        c->tried[source][b] += 1;
        if (i < n_accepted) c->acc[source][b] += 1;
        if (i > 0) {
            const int pb = conf_bin(conf[i - 1]);
            c->next_tried[source][pb] += 1;
            if (i < n_accepted) c->next_acc[source][pb] += 1;
        }
    }
    if (n_drafted > 0 && source != SD_CTL_SOURCE_GRAMMAR) { /* a drafter's first proposal of a round */
        c->first_tried += 1;
        c->first_acc += n_accepted > 0;
    }
}

/* ---- the batch switch ---------------------------------------------------------------------- */

/* Rounds of each mode measured before comparing, how often the other one is tried at first and at
 * most, and how many recent rounds the rates follow (a running mean up to that many, then
 * exponential). A try of the losing mode costs: at 8 busy slots on the cost twins, a drafting
 * round took several plain rounds' time for fewer tokens a slot than those rounds made, and trying
 * it every 16 rounds kept speculative serving slower than plain (measured: commit 5bd206f). So
 * each try that does not change which mode is best doubles the wait before the next, as the
 * adaptive probes do. */
#define SWITCH_MIN 8
#define SWITCH_EXPLORE 16
#define SWITCH_EXPLORE_MAX 512
#define SWITCH_WINDOW 20
/* Drafting is taken only where its rate beats plain rounds' by SWITCH_Z standard errors of the
 * difference (from the rounds' spread): plain rounds are the safe side, and drafting rounds' rates
 * scatter widely (a round may accept all its drafts or none). At 8 busy slots on the cost twins
 * (Zen 4) drafting rounds ran 0.87-1.09 of plain ones' rate from one server's life to another's,
 * a round's rate 330-550 tokens/s beside plain rounds' 470-500, and the plain comparison of the
 * means of rates took drafting in 24-44% of fresh servers' rounds, at 0.94-0.98x plain serving
 * (measured: the commit adding SWITCH_Z). */
#define SWITCH_Z 1.5
/* ... and by this share of plain's rate besides: drafting costs what its rounds' rate does not
 * show, the catching up at each switch back and requests that no longer end together. At 8 slots
 * on the cost twins (Zen 4) the switch found drafting rounds faster in some servers' lives (511
 * and 533 tokens/s against plain rounds' 493 and 506), and such runs still ended 0.95-0.97x plain
 * serving: requests that drafted well ended 20+ rounds early, the rest ran at 6 slots at 402
 * tokens/s (measured: the commit adding SWITCH_GAIN). */
#define SWITCH_GAIN 0.05
/* A try of the losing mode may cost at most this share of the rounds until the next: the wait
 * after a try that changed nothing is at least its loss (its time less its tokens at the best
 * mode's rate) over this share of a best round's time, and at least twice the last wait. At 8 busy
 * slots on the cost twins (Zen 4) a try of drafting after 15-96 plain rounds took 20-82 ms for
 * 9-29 tokens, against 16.6 ms for 8 in a plain round: the draft model catches up on every token
 * since the last drafting round, and the pass turns compute-bound (measured: the commit adding
 * SWITCH_BUDGET). That catching up grows with the wait, so it is counted apart, per round waited:
 * where it alone takes the budget no wait keeps a try within it, and the wait is the longest. */
#define SWITCH_BUDGET 0.02
/* A batch size met fewer times than this, before both modes are measured there, takes the verdict
 * its measured neighbours imply, where they imply one, rather than paying SWITCH_MIN rounds of the
 * losing mode: at 8 clients on the cost twins (Zen 4) the sizes below 8 were met only as requests
 * ended (2-22 rounds of each in a server's first 200), and their drafting rounds at 6 and 7 slots
 * took 46-48 ms against plain ones' 15-16 ms (measured: the commit adding SWITCH_RARE). */
#define SWITCH_RARE 128
/* Rounds after which a mode's rate is taken as stale (a try's own round is not host drift). */
#define SWITCH_STALE 4

sd_status sd_draft_switch_init(sd_draft_switch *w, int max_batch) {
    memset(w, 0, sizeof *w);
    if (max_batch < 1) return sd_fail(SD_ERR_INVALID_ARG, "draft switch: batch of %d", max_batch);
    if (!(w->size = calloc((size_t)max_batch + 1, sizeof *w->size))) return sd_fail(SD_ERR_NOMEM, "out of memory");
    w->max_batch = max_batch;
    return SD_OK;
}

void sd_draft_switch_free(sd_draft_switch *w) {
    free(w->size);
    memset(w, 0, sizeof *w);
}

double sd_draft_switch_rate(const sd_draft_switch_size *m, int mode) {
    return m->sec[mode] > 0 ? m->tok[mode] / m->sec[mode] : 0.0;
}

/* The squared standard error of a mode's rate: the rounds' variance over the rounds it averages. */
static double switch_se2(const sd_draft_switch_size *m, int mode) {
    const double var = m->r2[mode] - m->r1[mode] * m->r1[mode];
    const int n = m->n[mode] < SWITCH_WINDOW ? m->n[mode] : SWITCH_WINDOW;
    return var > 0 && n > 0 ? var / n : 0.0;
}

static int switch_measured(const sd_draft_switch_size *m) {
    return m->n[0] >= SWITCH_MIN && m->n[1] >= SWITCH_MIN;
}

/* By how much drafting's rate beats plain's beyond SWITCH_Z standard errors of the difference and
 * SWITCH_GAIN, as a share of plain's: drafting is taken where it is positive. A mode not run for
 * a while is compared at the host's speed of now: its rate scaled as the other mode's moved since
 * (on Zen 4 plain rounds at 8 slots went from 15 to 30 ms over 40 rounds while another guest ran,
 * and drafting's rate of before won). */
static double switch_margin(const sd_draft_switch_size *m) {
    double r[2] = {sd_draft_switch_rate(m, 0), sd_draft_switch_rate(m, 1)}, se2[2] = {switch_se2(m, 0), switch_se2(m, 1)};
    const int stale = m->last[0] < m->last[1] ? 0 : 1, now = m->last[!stale];
    if (now - m->last[stale] >= SWITCH_STALE && m->anchor[stale] > 0 && r[!stale] > 0) {
        const double f = r[!stale] / m->anchor[stale];
        r[stale] *= f;
        se2[stale] *= f * f;
    }
    const double d = r[1] - r[0] * (1 + SWITCH_GAIN) - SWITCH_Z * sqrt(se2[0] + se2[1]);
    return r[0] > 0 ? d / r[0] : d;
}

/* The verdict that the nearest measured sizes imply for an unmeasured one (-1: none). A draft pays
 * less the more sequences share the pass (it turns compute-bound), so plain at a smaller size
 * implies plain here and drafting at a larger one drafting; between a smaller size that drafts
 * and a larger one that does not, their margins interpolated. */
static int switch_borrow(const sd_draft_switch *w, int batch) {
    int lo = 0, hi = 0;
    for (int b = batch - 1; b >= 2 && !lo; b--)
        if (switch_measured(&w->size[b])) lo = b;
    for (int b = batch + 1; b <= w->max_batch && !hi; b++)
        if (switch_measured(&w->size[b])) hi = b;
    const double m_lo = lo ? switch_margin(&w->size[lo]) : 0, m_hi = hi ? switch_margin(&w->size[hi]) : 0;
    if (hi && m_hi > 0) return 1;
    if (lo && !(m_lo > 0)) return 0;
    if (!lo || !hi) return -1;
    return m_lo + (m_hi - m_lo) * (batch - lo) / (double)(hi - lo) > 0;
}

int sd_draft_switch_allow(sd_draft_switch *w, int batch) {
    if (batch < 2 || batch > w->max_batch || !w->size) return 1;
    sd_draft_switch_size *m = &w->size[batch];
    if (!switch_measured(m)) { /* drafting measured first, then plain, unless the size is rare */
        const int borrowed = m->seen < SWITCH_RARE ? switch_borrow(w, batch) : -1;
        m->seen++;
        return borrowed >= 0 ? borrowed : m->n[1] < SWITCH_MIN;
    }
    const int best = switch_margin(m) > 0;
    if (!m->every) m->every = SWITCH_EXPLORE;
    if (m->trying) { /* the try is measured: did it change the verdict? */
        m->trying = 0;
        if (best == m->best_before) {
            /* the next try costs its own loss and its drafts' catching up on every round waited:
             * the wait keeps both within the budget where one can */
            const double room = SWITCH_BUDGET * m->sec[best] - m->try_catchup;
            const double wait = room > 0 ? ceil(m->try_loss / room) : SWITCH_EXPLORE_MAX;
            const double next = fmax(2.0 * m->every, wait);
            m->every = next < SWITCH_EXPLORE_MAX ? (int)next : SWITCH_EXPLORE_MAX;
        } else {
            m->every = SWITCH_EXPLORE;
        }
    }
    if (++m->since >= m->every) {
        m->since = 0;
        m->trying = 1;
        m->best_before = best;
        return !best;
    }
    return best;
}

void sd_draft_switch_record(sd_draft_switch *w, int batch, int allowed, double tokens, double seconds, double catchup) {
    if (batch < 2 || batch > w->max_batch || !w->size || !(seconds > 0)) return;
    sd_draft_switch_size *m = &w->size[batch];
    const int i = allowed ? 1 : 0;
    if (m->trying && m->n[!i] > 0) { /* the try: its time beyond its tokens at the other mode's rate */
        const double rate = sd_draft_switch_rate(m, !i), c = catchup > 0 && catchup < seconds ? catchup : 0;
        const double own = seconds - c;
        m->try_loss = rate > 0 && own > tokens / rate ? own - tokens / rate : 0;
        m->try_catchup = c / (m->every > 0 ? m->every : 1);
    }
    const double r = tokens / seconds;
    const int n = ++m->n[i];
    const double w1 = 1.0 / (n < SWITCH_WINDOW ? n : SWITCH_WINDOW);
    m->tok[i] += (tokens - m->tok[i]) * w1;
    m->sec[i] += (seconds - m->sec[i]) * w1;
    m->r1[i] += (r - m->r1[i]) * w1;
    m->r2[i] += (r * r - m->r2[i]) * w1;
    m->last[i] = m->n[0] + m->n[1];
    const double other = sd_draft_switch_rate(m, !i);
    if (other > 0) m->anchor[i] = other;
    if (!(m->anchor[!i] > 0)) m->anchor[!i] = sd_draft_switch_rate(m, i); /* measured back to back */
}
