/* The one draft controller: how many drafts a round makes. Every decision about draft length is
 * here, as functions over plain records (no clock: costs are measured by the engine and handed
 * in), so the CLI, the bench and the server decide alike and the tests can drive it directly.
 *
 * The stop rule that keeps sampling exact (docs/design.md, "Sampling"): a decision may use
 * anything known before a proposal is drawn (the draft's distribution and its top probability,
 * measured costs, the batch, earlier proposals); a proposal once drawn is proposed, never thrown
 * away for being the token it is. So the controller is asked before each draw (judge), and its
 * answers are "draw it and go on", "draw it and end the round after it", or "end the round
 * before it". */
#ifndef SD_DRAFT_CONTROLLER_H
#define SD_DRAFT_CONTROLLER_H

#include "specdec/draft.h"
#include "specdec/spec.h"

#define SD_CTL_BINS 10

/* How a round's proposals are made when it measures costs rather than judging them. */
typedef enum {
    SD_CTL_JUDGED = 0,       /* judged (or fixed / p_min): not a measuring round */
    SD_CTL_MEASURE_ALL,      /* every proposal up to the round's most, unjudged */
    SD_CTL_MEASURE_ONE_UNSURE /* the same, but an unsure first proposal is not made: the round's
                                 pass is then one token, the price everything is weighed against */
} sd_ctl_measure;

/* One sequence's controller: what it has learned of its drafter's proposals, and the round in
 * progress. A sequence keeps it across generations (a server slot's drafts stay as reliable). */
typedef struct {
    sd_draft_policy base; /* judge: sd_draft_ctl_judge */
    /* acceptance of a tried proposal by source and by pre-draw confidence bin */
    double acc[SD_DRAFT_MAX_SOURCES][SD_CTL_BINS], tried[SD_DRAFT_MAX_SOURCES][SD_CTL_BINS];
    /* acceptance of the proposal that follows one of a given confidence bin (tried: both it and
     * every earlier one reached), whatever its own confidence: what one more draft step is worth
     * before its distribution is seen */
    double next_acc[SD_DRAFT_MAX_SOURCES][SD_CTL_BINS], next_tried[SD_DRAFT_MAX_SOURCES][SD_CTL_BINS];
    double first_acc, first_tried; /* the first proposal of a round, whatever its confidence */
    int plain_run;                 /* rounds without drafts in a row (adaptive) */
    int explore_every;             /* plain rounds between probes (doubles while they fail) */
    int probing;                   /* the last round was a probe */
    int plain_last;                /* the last judgement found drafting not to pay (adaptive) */
    sd_ctl_measure measuring;      /* this round's proposals are made to measure costs, unjudged */
    int t1_wait;                   /* rounds that waited for an unsure first proposal */
    unsigned stepping;             /* bit s: source s's proposals each cost a draft step (the
                                      drafter's sd_drafter.stepping; init: every source) */
    /* the round in progress (sd_draft_ctl_plan sets them) */
    sd_draft_mode mode;
    float p_min;
    int k_round;             /* the round's most proposals (sd_draft_ctl_plan's answer) */
    int greedy;              /* the target's sampling is greedy: acceptance is argmax agreement */
    const sd_draft_costs *costs;
    double fit[SD_DRAFT_COST_MAX_N + 1]; /* costs' pass prices as fitted at the round's plan */
    int others_n;            /* what the pass's other sequences put into it (their last round): */
    double others_e;         /* tokens, tokens they emitted, seconds they spent drafting */
    double others_t;
    double cum, e;           /* P(every proposal so far accepted), expected tokens */
    int pass_base;           /* proposals already in the pass that cost no draft step */
} sd_draft_ctl;

/* The source index the grammar's forced proposals are learned under (beside a drafter's). */
#define SD_CTL_SOURCE_GRAMMAR (SD_DRAFT_MAX_SOURCES - 1)

void sd_draft_ctl_init(sd_draft_ctl *c);

/* What bounds a round, besides the request's draft_max. */
typedef struct {
    int room;     /* drafts the context and the token budget can still take */
    int share;    /* drafts this sequence's share of a shared pass may hold */
    int allowed;  /* 0: the batch switch has this round decode plainly */
    int others_n; /* the other sequences of the pass (their last round): tokens in it, */
    double others_e, others_t; /* tokens emitted, seconds drafting (0 when alone) */
} sd_draft_round_in;

/* The most proposals of the round about to start (0: a plain step), and the controller set up
 * to judge them: draft_max within room and share, then, adaptive, what is expected to pay
 * (now and then one probe where nothing pays, to keep the estimates current). */
int sd_draft_ctl_plan(sd_draft_ctl *c, const sd_spec_params *p, const sd_draft_costs *costs,
                      const sd_draft_round_in *in);
/* The policy to hand the drafter for the planned round (NULL: fixed length, no judging). */
sd_draft_policy *sd_draft_ctl_policy(sd_draft_ctl *c);
/* Before proposal i (0-based) of source `source` is drawn; conf is its pre-draw confidence (the
 * top probability of the draft's distribution, an n-gram's match score). */
sd_draft_verdict sd_draft_ctl_judge(sd_draft_policy *policy, int source, int i, float conf);
/* A proposal that costs no draft step (the bytes a grammar forces, ahead of the drafter's): proposed
 * when one more token in the pass pays for its expected gain and, when a drafter follows (its
 * proposals are lost after a rejected one), when it is accepted at least as often as the drafter's
 * first proposals (adaptive; always under fixed and p_min). */
sd_draft_verdict sd_draft_ctl_judge_free(sd_draft_ctl *c, int source, float conf, int drafter_follows);
/* A verified round: pre-draw confidences of the n_drafted proposals, the first n_accepted of
 * which were accepted. */
void sd_draft_ctl_record(sd_draft_ctl *c, int source, const float *conf, int n_drafted, int n_accepted);

/* ---- costs -------------------------------------------------------------------------------- */

void sd_draft_costs_init(sd_draft_costs *c);
/* A target pass of n tokens took `seconds` (a running mean; ignored when c->given). */
void sd_draft_costs_pass(sd_draft_costs *c, int n_tokens, double seconds);
/* A round's n draft steps took `seconds` (ignored when c->given). */
void sd_draft_costs_draft(sd_draft_costs *c, int n_steps, double seconds);
/* A round whose model first caught up on n_tokens of history (more than the last round's), then
 * ran n_steps passes in all (the catch-up's among them), took `seconds` (ignored when c->given). */
void sd_draft_costs_catchup(sd_draft_costs *c, int n_tokens, int n_steps, double seconds);
/* Of such a round's `seconds`, the catching up: what its steps after the first leave over. */
double sd_draft_costs_catchup_seconds(const sd_draft_costs *c, int n_steps, double seconds);
/* Seconds of a pass of n tokens: measured, else interpolated between the nearest measured sizes
 * (extrapolated past the largest); 0 when nothing is measured. */
double sd_draft_costs_verify(const sd_draft_costs *c, int n);

/* ---- the batch switch ---------------------------------------------------------------------- */

/* Rounds of several sequences: for each batch size, the measured tokens per second of rounds
 * with drafting allowed (each sequence's controller then drafts what it judges to pay) and of
 * rounds without; a round takes the better, and now and then the other, to keep both current.
 * It catches what a sequence's own cost model misses in a batch (the drafts' catching up, the
 * pass turning compute-bound). */
typedef struct {
    /* [0] plain rounds, [1] rounds with drafting allowed: running means of a round's tokens and
     * seconds (the mode's rate is their ratio) and of its rate and the rate's square (the rounds'
     * spread) */
    double tok[2], sec[2], r1[2], r2[2];
    int n[2];       /* rounds measured */
    int last[2];    /* the size's round count at each mode's last round */
    double anchor[2]; /* the other mode's rate then (how the host's speed has moved since) */
    int seen;       /* rounds met before both modes were measured (a rare size borrows a verdict) */
    int since;      /* rounds since the other mode was last tried */
    int every;      /* try the other mode after this many rounds (0: not yet set) */
    int trying;     /* the last round tried the other mode */
    int best_before;/* which mode was best before that try */
    double try_loss;/* seconds the last try took beyond its tokens at the best mode's rate, less
                       its drafts' catching up */
    double try_catchup; /* that catching up, per round waited before the try */
} sd_draft_switch_size;

typedef struct {
    sd_draft_switch_size *size; /* [max_batch + 1] */
    int max_batch;
} sd_draft_switch;

sd_status sd_draft_switch_init(sd_draft_switch *w, int max_batch);
void sd_draft_switch_free(sd_draft_switch *w);
/* Whether a round of `batch` sequences may draft (1 for a batch of one: its controller decides). */
int sd_draft_switch_allow(sd_draft_switch *w, int batch);
/* A batch size's measured tokens per second of plain rounds (mode 0) or drafting ones (1); 0 before any. */
double sd_draft_switch_rate(const sd_draft_switch_size *m, int mode);
/* The round's outcome: tokens emitted by all sequences in `seconds`, drafting allowed or not;
 * `catchup` of those seconds the draft models spent catching up on history (after plain rounds). */
void sd_draft_switch_record(sd_draft_switch *w, int batch, int allowed, double tokens, double seconds, double catchup);

#endif
