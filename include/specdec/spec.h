/* The generation engine: plain decoding of a target model, or speculative decoding with a
 * draft model (draft k tokens, verify them in one batched target pass, accept, roll back). */
#ifndef SPECDEC_SPEC_H
#define SPECDEC_SPEC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "specdec/model.h"
#include "specdec/sample.h"
#include "specdec/status.h"

#define SD_MAX_DRAFT 32

typedef struct sd_spec sd_spec;

/* Called once per emitted token, in order; a nonzero return stops generation. */
typedef int (*sd_token_cb)(int32_t token, void *user);

/* Called after every verification step (tests use it to inspect both caches). */
typedef void (*sd_step_cb)(sd_spec *s, void *user);

typedef struct {
    int n_predict;          /* tokens to generate at most (> 0) */
    int draft_max;          /* k: drafts per verify pass, 1..SD_MAX_DRAFT */
    sd_sampler_params sampling;
    int stop_at_eos;        /* stop after the target's EOS (default 1) */
    int n_ctx;              /* 0: the smaller of the two models' contexts */
    volatile sig_atomic_t *stop_flag; /* polled between tokens: nonzero stops (SIGINT) */
    sd_step_cb on_step;
    void *step_user;
} sd_spec_params;

sd_spec_params sd_spec_default_params(void); /* n_predict 128, k 4, greedy, stop at EOS */

typedef struct {
    int n_prompt;
    int n_generated;       /* tokens emitted */
    int n_verify;          /* target verification passes */
    int n_target_steps;    /* target single-token steps (plain decoding, or k shrunk to 0) */
    int n_drafted;         /* draft tokens proposed */
    int n_accepted;        /* draft tokens accepted */
    int k;                 /* draft_max of the run */
    int drafted_at[SD_MAX_DRAFT];  /* passes that proposed a draft at position i */
    int accepted_at[SD_MAX_DRAFT]; /* ... and accepted it */
    double t_prefill;      /* seconds: prompt through both models and the first token */
    double t_draft;        /* seconds in the draft model after the prefill */
    double t_verify;       /* seconds in target forwards after the prefill */
    double t_sample;       /* seconds turning logits into tokens (sampling, acceptance) */
    double t_total;        /* seconds from start to the last token */
    size_t kv_bytes_target;
    size_t kv_bytes_draft;
    const char *stop_reason; /* "length", "eos", "context", "interrupted", "callback" */
} sd_spec_stats;

/* Checks the pair (tokenizer compatibility) and allocates both KV caches and buffers.
 * draft may be NULL (plain decoding) or the target itself (self-drafting). */
sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out);
void sd_spec_free(sd_spec *s); /* NULL is fine */

/* Generates from prompt (ids, BOS included if wanted). Resets both caches first, so one
 * sd_spec serves many generations. stats may be NULL. Context exhaustion is not an error:
 * generation stops with stop_reason "context". */
sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb,
                           void *user, sd_spec_stats *stats);

/* Inspection, valid inside on_step and after a generation. */
sd_kv *sd_spec_target_kv(sd_spec *s);
sd_kv *sd_spec_draft_kv(sd_spec *s);          /* NULL in plain mode */
const int32_t *sd_spec_tokens(const sd_spec *s, int *n); /* prompt + emitted tokens */
int sd_spec_draft_consumed(const sd_spec *s); /* tokens the draft cache holds */

/* Derived figures. */
double sd_spec_acceptance(const sd_spec_stats *st); /* accepted / drafted */
double sd_spec_tokens_per_pass(const sd_spec_stats *st);
double sd_spec_decode_tps(const sd_spec_stats *st); /* tokens after the first / decode time */

#endif
