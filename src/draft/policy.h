/* Draft policies (see policy.c): p_min and the adaptive controller the engine drives. */
#ifndef SD_DRAFT_POLICY_H
#define SD_DRAFT_POLICY_H

#include "specdec/draft.h"

typedef struct {
    sd_draft_policy base;
    float p_min;
} sd_pmin_policy;

void sd_pmin_policy_init(sd_pmin_policy *p, float p_min);

#define SD_ADAPT_BINS 10
#define SD_ADAPT_MAX_N 33 /* pass sizes whose cost is tracked: 1..SD_MAX_DRAFT + 1 */

typedef struct {
    sd_draft_policy base;
    /* acceptance of a tried proposal by source and confidence bin */
    double acc[SD_DRAFT_MAX_SOURCES][SD_ADAPT_BINS], tried[SD_DRAFT_MAX_SOURCES][SD_ADAPT_BINS];
    double first_acc, first_tried; /* the first proposal of a round, whatever its confidence */
    double t_pass[SD_ADAPT_MAX_N + 1]; /* seconds of a target pass of n tokens (0: not measured) */
    double t_draft;                    /* seconds per proposal */
    int plain_run;                     /* rounds without drafts in a row */
    int explore_every;                 /* plain rounds between probes (doubles while they fail) */
    int probing;                       /* the last round was a probe */
    double cum, e;                     /* this round: P(all so far accepted), expected tokens */
    /* What the other engines of a shared round (sd_spec_step_many) put into it, from their last
     * round: tokens in the pass, tokens emitted, seconds of drafting. A draft pays when it raises
     * the whole round's tokens per second, so the larger the batch, the costlier one more token
     * in the pass and the less a draft adds; all 0 for an engine alone. */
    int others_n;
    double others_e, others_t;
} sd_adaptive;

void sd_adaptive_init(sd_adaptive *a);
/* The most proposals this round may make: k_max, or 0 when not even one draft is expected to pay
 * (now and then 1 instead, to keep the estimates current). Resets the round's running figures. */
int sd_adaptive_begin_round(sd_adaptive *a, int k_max);
/* A verified round: confidences of the n_drafted proposals, of which the first n_accepted were. */
void sd_adaptive_record(sd_adaptive *a, int source, const float *conf, int n_drafted, int n_accepted);
void sd_adaptive_time_pass(sd_adaptive *a, int n_tokens, double seconds);
void sd_adaptive_time_draft(sd_adaptive *a, int n_steps, double seconds);

#endif
