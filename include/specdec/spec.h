/* The generation engine: plain decoding of a target, or speculative decoding with any drafter
 * (draft up to k tokens, verify them in one batched target pass, accept, roll back), driven one
 * round at a time (begin / step) or to the end (sd_spec_generate); several sequences of one
 * target context step together in one pass (sd_spec_batch); sd_pair builds it all. */
#ifndef SPECDEC_SPEC_H
#define SPECDEC_SPEC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "specdec/context.h"
#include "specdec/draft.h"
#include "specdec/grammar.h"
#include "specdec/model.h"
#include "specdec/sample.h"
#include "specdec/status.h"

typedef struct sd_spec sd_spec;             /* one sequence's generation */
typedef struct sd_spec_batch sd_spec_batch; /* the rounds of a target context's sequences, one pass each */
typedef struct sd_pair sd_pair;             /* a target (and draft) model ready to generate on n sequences */

/* Called once per emitted token, in order; a nonzero return stops generation after it. */
typedef int (*sd_token_cb)(int32_t token, void *user);

/* Called after every verification round (tests use it to inspect both caches). */
typedef void (*sd_step_cb)(sd_spec *s, void *user);

/* How many drafts a round makes (at most draft_max); decided by the draft controller
 * (src/draft/controller.h) before each draw, never after. */
typedef enum {
    SD_DRAFT_ADAPTIVE = 0, /* stop where one more draft no longer pays for its draft step and verify
                              cost (measured) given its expected acceptance (learned, by the
                              drafter's pre-draw confidence); none when not even one pays */
    SD_DRAFT_FIXED = 1,    /* always draft_max (less near the context or budget end) */
    SD_DRAFT_PMIN = 2,     /* llama.cpp's p_min: stop before a draft whose distribution's top
                              probability is below p_min */
} sd_draft_mode;
const char *sd_draft_mode_name(sd_draft_mode m); /* "adaptive", "fixed", "p_min" */
/* Parses a name of sd_draft_mode_name; SD_ERR_INVALID_ARG naming the value otherwise. */
sd_status sd_draft_mode_from_name(const char *name, sd_draft_mode *out);

/* Why a generation ended. */
typedef enum {
    SD_STOP_NONE = 0,  /* still running, or not started */
    SD_STOP_LENGTH,    /* n_predict tokens generated */
    SD_STOP_EOS,       /* an end-of-generation token (stop_at_eos) */
    SD_STOP_CONTEXT,   /* the context is full */
    SD_STOP_CANCELLED, /* sd_spec_cancel, or the stop flag */
    SD_STOP_CALLBACK,  /* the token callback asked to stop */
} sd_stop_reason;
const char *sd_stop_reason_name(sd_stop_reason r); /* "none", "length", "eos", "context", "cancelled", "callback" */

typedef struct {
    int n_predict;          /* tokens to generate at most (> 0) */
    int draft_max;          /* k: drafts per verify pass at most, 0..SD_MAX_DRAFT (0: none) */
    int draft_min;          /* llama-server's speculative.n_min: a chain of fewer drafts is not
                               verified (the round decodes plainly); 0 or 1: any length. Refused
                               where dropping a chain by its length would bias the output: rejection
                               sampling at temperature > 0 with a draft model and a length that
                               depends on the draws (adaptive, p_min) */
    sd_draft_mode draft_mode;
    float p_min;            /* SD_DRAFT_PMIN's threshold, in [0, 1] */
    int ngram;              /* sd_pair_create: prompt-lookup drafting, alone without a draft model,
                               else tried before it */
    int ngram_min, ngram_max; /* n-gram sizes it matches, 1 <= min <= max <= 64 (default 1, 4) */
    int tree_budget;        /* > 0: a tree of at most this many drafts per pass (<= SD_MAX_DRAFT), at
                               most draft_max deep, from a drafter that has trees; 0: chains */
    int tree_branch;        /* most children of a tree node (default 3) */
    int tree_width;         /* most nodes expanded per tree level (default 4) */
    sd_sampler_params sampling; /* the target's, and the drafter's (the engine sets it) */
    int stop_at_eos;        /* stop after any of the target's end-of-generation tokens: EOS,
                               <|eot_id|>, <|im_end|>, ... (sd_tokenizer_is_eog; default 1) */
    int n_ctx;              /* sd_pair_create's contexts: 0 = the smaller model's training context */
    sd_type kv_type;        /* sd_pair_create's contexts: SD_TYPE_F32 (default) or SD_TYPE_F16 */
    int n_threads;          /* sd_pair_create's contexts: sd_context_params.n_threads (0: OpenMP's default) */
    sd_grammar *grammar;    /* borrowed, NULL: unconstrained. The target's distribution at each position
                               is p restricted to what the grammar allows and renormalised; the
                               drafter's q is masked alike; an end-of-generation token ends the
                               generation. Used from the engine's thread only (sd_grammar's rule) */
    const sd_grammar_vocab *grammar_vocab; /* the target tokenizer's index, with grammar */
    int grammar_drafts;     /* 1 (default): the bytes the grammar forces next (property names,
                               punctuation, const values) are proposed as drafts, tokenized, at no
                               draft-model cost, ahead of the drafter's; 0: not */
    int logprobs;           /* 1: each emitted token's log-probability in sd_spec_round (the model's
                               distribution, the same whether the token was drafted or not) */
    int top_logprobs;       /* with logprobs: also the likeliest 0..SD_MAX_LOGPROBS tokens' */
    sd_draft_costs costs;   /* costs.given: the adaptive controller weighs drafts against these
                               instead of measured ones (reproducible draft lengths: tests, benches) */
    volatile sig_atomic_t *stop_flag; /* polled between tokens: nonzero stops (SIGINT) */
    sd_step_cb on_step;
    void *step_user;
} sd_spec_params;

/* n_predict 128, k 4 adaptive, greedy, stop at EOS: the one source of the engine's defaults */
sd_spec_params sd_spec_default_params(void);
/* The checks sd_spec_create_with and sd_spec_set_params make, for an engine that drafts or not
 * (drafting) and whose drafter draws from a draft model (model_drafts): a caller validates a
 * request before it reaches an engine. */
sd_status sd_spec_params_check(const sd_spec_params *p, int drafting, int model_drafts);

/* Statistics of a generation: the one record the CLI, the bench and the server report from. */
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
    sd_stop_reason stop_reason; /* SD_STOP_NONE while running */
} sd_spec_stats;

/* One round of one sequence, as a step returns it: its tokens and what the round adds to the
 * statistics (so a caller counts rounds without diffing snapshots). */
typedef struct {
    int32_t tokens[SD_MAX_DRAFT + 1]; /* emitted this round, in order */
    int n_tokens;
    int n_drafted;   /* proposals verified (a tree's nodes but the root) */
    int n_accepted;  /* ... of them accepted and emitted */
    int depth;       /* deepest proposal (a chain: n_drafted); positions 0..depth-1 were drafted */
    int source;      /* the drafter's source of a chain's proposals */
    int done;        /* the generation has ended (in this round or before) */
    sd_token_logprobs logprobs[SD_MAX_DRAFT + 1]; /* with params.logprobs: tokens[i]'s */
} sd_spec_round;

/* ---- one sequence --------------------------------------------------------------------------- */

/* The whole setup in one call: a pair of one sequence (sd_pair_create) whose engine is returned;
 * freeing the engine frees the pair. draft may be NULL (plain decoding, or n-gram drafting alone)
 * or the target itself (self-drafting). */
sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out);
/* The engine over sequence seq of the batch's target context with any drafter (NULL: plain
 * decoding), both borrowed: they must outlive the sd_spec, and nothing else may use that
 * sequence meanwhile. The drafter's sampling is set to p->sampling. */
sd_status sd_spec_create_with(sd_spec_batch *batch, int seq, sd_drafter *drafter, const sd_spec_params *p,
                              sd_spec **out);
void sd_spec_free(sd_spec *s); /* NULL is fine */
/* Changes an engine's parameters between generations (a server reusing a slot's engine, and so
 * its cached prompt, for the next request): every field but ngram, n_ctx, kv_type and n_threads,
 * which stay as created; the drafter's sampling follows. draft_max and tree_budget may not exceed the
 * creation's. On error (bad values, a generation running) nothing changes. */
sd_status sd_spec_set_params(sd_spec *s, const sd_spec_params *p);
/* The parameters in force. */
const sd_spec_params *sd_spec_get_params(const sd_spec *s);

/* Starts a generation from prompt (ids, BOS included if wanted): the target's cache keeps the
 * longest prefix it already holds of the prompt (a follow-up turn reuses the conversation),
 * the rest is prefilled, the drafter syncs to it. Statistics restart. */
sd_status sd_spec_begin(sd_spec *s, const int32_t *prompt, int n_prompt);
/* Begins the generation src began (its prompt), on another sequence of the same target context,
 * copying src's cached prompt rows instead of prefilling them: several choices of one prompt (a
 * server's n > 1). src may be running or ended, as long as it has not begun another prompt. s
 * keeps its own parameters (seed, budget, ...). */
sd_status sd_spec_begin_from(sd_spec *s, const sd_spec *src);
/* One round as a batch of one (sd_spec_batch_step): draft, verify in one batched pass, accept,
 * roll back; emits 1..k+1 tokens (none once the generation has ended), each passed to cb (may be
 * NULL) as it is appended to the history. round (may be NULL) receives the round. Context
 * exhaustion, n_predict, EOS, the stop flag and cb end the generation (sd_spec_done). */
sd_status sd_spec_step(sd_spec *s, sd_token_cb cb, void *user, sd_spec_round *round);
/* Ends the running generation now, without a pass (stop reason SD_STOP_CANCELLED); the caches
 * stay consistent with the history. Nothing when none runs. */
void sd_spec_cancel(sd_spec *s);
int sd_spec_done(const sd_spec *s);
/* Statistics of the current (or last) generation; finishes the timing when it has ended. */
void sd_spec_get_stats(const sd_spec *s, sd_spec_stats *st);

/* begin, then step until done. stats may be NULL. Context exhaustion is not an error:
 * generation stops with SD_STOP_CONTEXT. */
sd_status sd_spec_generate(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                           sd_spec_stats *stats);

/* Inspection, valid inside on_step and after a generation. */
sd_context *sd_spec_target_context(sd_spec *s);
int sd_spec_seq(const sd_spec *s);
sd_drafter *sd_spec_drafter(sd_spec *s);              /* NULL in plain mode */
const int32_t *sd_spec_tokens(const sd_spec *s, int *n); /* prompt + emitted tokens */

/* ---- many sequences, one pass --------------------------------------------------------------- */

typedef struct {
    int draft_switch; /* rounds of 2+ sequences draft or not as measured per batch size
                         (sd_draft_switch; a server's slots); 0: every round may draft */
    int max_batch;    /* most sequences a round steps (the switch's table); 0: 256 */
} sd_spec_batch_params;

sd_spec_batch_params sd_spec_batch_default_params(void); /* no switch */

/* The round engine of a target context (borrowed): its verify pass, the measured costs every
 * sequence's draft controller weighs drafts against, and the batch switch. */
sd_status sd_spec_batch_create(sd_context *target, const sd_spec_batch_params *p, sd_spec_batch **out);
void sd_spec_batch_free(sd_spec_batch *b); /* NULL is fine */
/* One round of n engines of this batch (each on its own sequence): their drafts (model drafters
 * on one draft context in lockstep) and their verify passes go into ONE forward pass over the
 * round. rounds[i] (or rounds NULL) receives engine i's round (n_tokens 0 for an engine that has
 * ended). The pass holds at most SD_MAX_DRAFT + 1 tokens while the engines fit in it (each of E
 * engines drafts at most (SD_MAX_DRAFT + 1) / E - 1 tokens): the kernels whose rows equal decoding
 * each token alone, so every engine emits exactly what it emits alone (greedy, coupled). */
sd_status sd_spec_batch_step(sd_spec_batch *b, sd_spec *const *specs, int n, sd_spec_round *rounds);
int sd_spec_batch_pass_tokens(const sd_spec_batch *b); /* tokens in the last round's pass */
/* The batch switch's figures for rounds of `batch` sequences: tokens per second and rounds
 * measured, [0] plain rounds, [1] drafting allowed. 0 when the batch has no switch. */
int sd_spec_batch_switch_rates(const sd_spec_batch *b, int batch, double rate[2], int n[2]);
sd_context *sd_spec_batch_context(sd_spec_batch *b);

/* ---- a pair, built once --------------------------------------------------------------------- */

/* Everything generation needs, built the same way for the CLI, the bench and the server: a target
 * context (and a draft context) of n_seq sequences sized by p->n_ctx and p->kv_type, a drafter
 * per sequence (the model's, the n-gram one with p->ngram, or both), an engine per sequence with
 * parameters p, and the batch that steps them (with the batch switch when n_seq > 1). Checks the
 * pair (tokenizer compatibility). The models are borrowed. */
sd_status sd_pair_create(sd_model *target, sd_model *draft, const sd_spec_params *p, int n_seq, sd_pair **out);
void sd_pair_free(sd_pair *pr); /* NULL is fine */
int sd_pair_n_seq(const sd_pair *pr);
int sd_pair_n_ctx(const sd_pair *pr); /* positions per sequence */
sd_spec *sd_pair_spec(sd_pair *pr, int i);
sd_spec_batch *sd_pair_batch(sd_pair *pr);

/* ---- derived figures: one definition each ---------------------------------------------------- */

double sd_spec_acceptance(const sd_spec_stats *st); /* accepted / drafted */
double sd_spec_tokens_per_pass(const sd_spec_stats *st); /* generated / target passes (verify + plain) */
double sd_spec_mean_accepted(const sd_spec_stats *st); /* 1 + accepted / verify rounds (vLLM's mean
                                                          acceptance length) */
double sd_spec_decode_tps(const sd_spec_stats *st); /* tokens after the first / time after the first */

#endif
