/* The generation engine: plain decoding of a target, or speculative decoding with any drafter
 * (draft up to k tokens, verify them in one batched target pass, accept, roll back), driven one
 * round at a time (begin / step / end) or to the end (sd_spec_generate). */
#ifndef SPECDEC_SPEC_H
#define SPECDEC_SPEC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "specdec/context.h"
#include "specdec/draft.h"
#include "specdec/model.h"
#include "specdec/sample.h"
#include "specdec/status.h"

#define SD_MAX_DRAFT 32

typedef struct sd_spec sd_spec;

/* Called once per emitted token, in order; a nonzero return stops generation after it. */
typedef int (*sd_token_cb)(int32_t token, void *user);

/* Called after every verification round (tests use it to inspect both caches). */
typedef void (*sd_step_cb)(sd_spec *s, void *user);

/* How many drafts a round makes (at most draft_max). */
typedef enum {
    SD_DRAFT_ADAPTIVE = 0, /* stop where one more draft no longer pays for its draft step and verify
                              cost (measured) given its expected acceptance (learned, by the
                              drafter's confidence); none when not even one pays */
    SD_DRAFT_FIXED = 1,    /* always draft_max (less near the context or budget end) */
    SD_DRAFT_PMIN = 2,     /* llama.cpp's p_min: stop before a draft the drafter gives less than p_min */
} sd_draft_mode;

typedef struct {
    int n_predict;          /* tokens to generate at most (> 0) */
    int draft_max;          /* k: drafts per verify pass at most, 1..SD_MAX_DRAFT */
    sd_draft_mode draft_mode;
    float p_min;            /* SD_DRAFT_PMIN's threshold, in [0, 1] */
    int ngram;              /* sd_spec_create: prompt-lookup drafting, alone without a draft model,
                               else tried before it */
    int ngram_min, ngram_max; /* n-gram sizes it matches, 1 <= min <= max <= 64 (default 1, 4) */
    int tree_budget;        /* > 0: a tree of at most this many drafts per pass (<= SD_MAX_DRAFT), at
                               most draft_max deep, from a drafter that has trees; 0: chains */
    int tree_branch;        /* most children of a tree node (default 3) */
    int tree_width;         /* most nodes expanded per tree level (default 4) */
    sd_sampler_params sampling;
    int stop_at_eos;        /* stop after any of the target's end-of-generation tokens: EOS,
                               <|eot_id|>, <|im_end|>, ... (sd_tokenizer_is_eog; default 1) */
    int n_ctx;              /* sd_spec_create's contexts: 0 = the smaller model's training context */
    sd_type kv_type;        /* sd_spec_create's contexts: SD_TYPE_F32 (default) or SD_TYPE_F16 */
    volatile sig_atomic_t *stop_flag; /* polled between tokens: nonzero stops (SIGINT) */
    sd_step_cb on_step;
    void *step_user;
} sd_spec_params;

sd_spec_params sd_spec_default_params(void); /* n_predict 128, k 4 adaptive, greedy, stop at EOS */

typedef struct {
    int n_prompt;
    int n_reused;          /* prompt tokens already in the target's cache (sd_spec_begin) */
    int n_generated;       /* tokens emitted */
    int n_verify;          /* verification rounds that carried drafts */
    int n_target_steps;    /* rounds without drafts (plain decoding, no room, no proposal) */
    int n_drafted;         /* draft tokens proposed */
    int n_accepted;        /* draft tokens accepted and emitted */
    int k;                 /* draft_max of the run */
    int drafted_at[SD_MAX_DRAFT];  /* rounds that proposed a draft at position i */
    int accepted_at[SD_MAX_DRAFT]; /* ... and emitted it as accepted */
    int n_sources;                 /* the drafter's sources (model, ngram, ...) */
    const char *sources[SD_DRAFT_MAX_SOURCES];
    int drafted_by[SD_DRAFT_MAX_SOURCES]; /* drafts each source proposed */
    int accepted_by[SD_DRAFT_MAX_SOURCES]; /* ... and got accepted and emitted */
    double t_prefill;      /* seconds: the prompt through the target (and the drafter) */
    double t_first;        /* seconds from the start to the first emitted token */
    double t_draft;        /* seconds in the drafter after the prefill */
    double t_verify;       /* seconds in target forwards after the prefill */
    double t_sample;       /* seconds turning logits into tokens (sampling, acceptance) */
    double t_total;        /* seconds from the start to the last token */
    size_t kv_bytes_target;
    size_t kv_bytes_draft;
    const char *stop_reason; /* "length", "eos", "context", "interrupted", "callback", NULL while running */
} sd_spec_stats;

/* The whole setup in one call: a context for the target (and one for the draft model) sized by
 * p->n_ctx and p->kv_type, the drafter (the model's, the n-gram one with p->ngram, or both), and
 * the engine, all owned by the sd_spec. Checks the pair (tokenizer compatibility). draft may be
 * NULL (plain decoding, or n-gram drafting alone) or the target itself (self-drafting). */
sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out);
/* The engine over sequence seq of a target context and any drafter (NULL: plain decoding), both
 * borrowed: they must outlive the sd_spec, and nothing else may use that sequence meanwhile. */
sd_status sd_spec_create_with(sd_context *target, int seq, sd_drafter *drafter, const sd_spec_params *p,
                              sd_spec **out);
void sd_spec_free(sd_spec *s); /* NULL is fine */
/* Changes an engine's parameters between generations (a server reusing a slot's engine, and so
 * its cached prompt, for the next request's sampling, budget and stop flag): every field but
 * ngram, n_ctx and kv_type, which stay as created. draft_max and tree_budget may not exceed the
 * creation's. A model drafter keeps its own sampling (sd_drafter_model_set_sampling). On error
 * (bad values, a generation running) nothing changes. */
sd_status sd_spec_set_params(sd_spec *s, const sd_spec_params *p);
/* Caps the drafts of the rounds that follow at k (0: plain steps), also in the middle of a
 * generation: a server turns drafting off for rounds where it measures that it does not pay.
 * The cap stays until changed (SD_MAX_DRAFT: none, the default). */
sd_status sd_spec_set_draft_limit(sd_spec *s, int k);

/* Starts a generation from prompt (ids, BOS included if wanted): the target's cache keeps the
 * longest prefix it already holds of the prompt (a follow-up turn reuses the conversation),
 * the rest is prefilled, the drafter syncs to it. Statistics restart. */
sd_status sd_spec_begin(sd_spec *s, const int32_t *prompt, int n_prompt);
/* One round: draft, verify in one batched pass, accept, roll back; emits 1..k+1 tokens (0 once
 * the generation has ended), each passed to cb (may be NULL) as it is appended to the history
 * and written to out (may be NULL; room for draft_max + 1). Context exhaustion, n_predict, EOS,
 * the stop flag and cb end the generation (see sd_spec_done and stats.stop_reason). */
sd_status sd_spec_step(sd_spec *s, sd_token_cb cb, void *user, int32_t *out, int *n_out);
int sd_spec_done(const sd_spec *s);
/* One round of several engines that share a target context (each on its own sequence): their
 * drafts and their verify passes go into ONE forward pass over the round (the weights are read
 * once for all of them). outs[i] (room for draft_max + 1, or outs NULL) receives engine i's
 * emitted tokens, n_outs[i] their count (0 for an engine that has ended). The pass holds at most
 * SD_MAX_DRAFT + 1 tokens while the engines fit in it (each of E engines drafts at most
 * (SD_MAX_DRAFT + 1) / E - 1 tokens): the kernels whose rows equal decoding each token alone, so
 * that every engine emits exactly what it emits alone (greedy). The adaptive draft policy weighs
 * each draft against the rate of the whole round (the others' tokens and costs of their last
 * round), so drafting stops where the larger pass no longer pays for it. */
struct sd_verify_round;
sd_status sd_spec_step_many(struct sd_verify_round *round, sd_spec *const *specs, int n, int32_t *const *outs,
                            int *n_outs);
/* Statistics of the current (or last) generation; finishes the timing when it has ended. */
void sd_spec_get_stats(const sd_spec *s, sd_spec_stats *st);

/* begin, then step until done. stats may be NULL. Context exhaustion is not an error:
 * generation stops with stop_reason "context". */
sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                           sd_spec_stats *stats);

/* Inspection, valid inside on_step and after a generation. */
sd_context *sd_spec_target_context(sd_spec *s);
int sd_spec_seq(const sd_spec *s);
sd_drafter *sd_spec_drafter(sd_spec *s);              /* NULL in plain mode */
const int32_t *sd_spec_tokens(const sd_spec *s, int *n); /* prompt + emitted tokens */

/* Derived figures. */
double sd_spec_acceptance(const sd_spec_stats *st); /* accepted / drafted */
double sd_spec_tokens_per_pass(const sd_spec_stats *st);
double sd_spec_mean_accepted(const sd_spec_stats *st); /* 1 + accepted / verify rounds (vLLM's mean
                                                          acceptance length) */
double sd_spec_decode_tps(const sd_spec_stats *st); /* tokens after the first / time after the first */

#endif
