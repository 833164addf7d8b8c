/* Drafting strategies behind one interface. A drafter proposes up to k tokens continuing the
 * generation's history (prompt + emitted tokens), with the distribution each was drawn from or
 * none (a deterministic proposal, which verification treats as one-hot). It keeps whatever state
 * it needs (the model drafter: a KV cache) and syncs it to the history it is given, so the
 * engine never rolls a drafter back. A draft policy decides, proposal by proposal, how far a
 * round goes. */
#ifndef SPECDEC_DRAFT_H
#define SPECDEC_DRAFT_H

#include <stdint.h>

#include "specdec/context.h"
#include "specdec/model.h"
#include "specdec/sample.h"

/* Most proposals one round verifies for one sequence (a chain's length, a tree's nodes but the
 * root): a verify pass of SD_MAX_DRAFT + 1 tokens fits the kernels whose rows equal decoding each
 * token alone. */
#define SD_MAX_DRAFT 32

typedef struct sd_drafter sd_drafter;

/* The answer to "draw proposal i?", asked BEFORE it is drawn (so the answer cannot depend on
 * which token it turns out to be: that is what keeps speculative sampling exact; see
 * src/draft/controller.h). */
typedef enum {
    SD_DRAFT_MORE = 0, /* draw it, propose it, and ask again before the next */
    SD_DRAFT_LAST = 1, /* draw it, propose it, and end the round after it */
    SD_DRAFT_STOP = 2, /* end the round before it: nothing drawn */
} sd_draft_verdict;

typedef struct sd_draft_policy sd_draft_policy;
struct sd_draft_policy {
    /* Before proposal i (0-based) of `source` is drawn, with its pre-draw confidence: the top
     * probability of the distribution it is about to be drawn from (the raw softmax's when
     * greedy), or a deterministic drafter's own score. */
    sd_draft_verdict (*judge)(sd_draft_policy *p, int source, int i, float conf);
};

/* Measured costs the draft controller weighs drafts against: a target pass by its token count
 * and a draft step (seconds). One record per target context, fed by every round's pass. */
#define SD_DRAFT_COST_MAX_N (SD_MAX_DRAFT + 1) /* pass sizes tracked (larger: extrapolated) */
typedef struct {
    double t_pass[SD_DRAFT_COST_MAX_N + 1]; /* [n]: a pass of n tokens (0: not measured) */
    double t_draft;                         /* one more draft step in a round (0: not measured) */
    double t_draft_first;                   /* a round's first (0: as t_draft): the catch-up's pass,
                                               which, right after the target's pass, reads a draft
                                               model that fits the caches cold */
    int n_pass[SD_DRAFT_COST_MAX_N + 1];    /* measurements behind t_pass[n] (their plain mean at first) */
    int warm;                               /* 1 once a 1-token pass has run (the first is
                                               provisional: t_pass[1] with n_pass[1] = 0, replaced
                                               by the next) */
    int n_draft;                            /* rounds behind t_draft */
    double draft_mom[4];                    /* their running means of steps, seconds, steps^2 and
                                               steps x seconds: the line the two prices come from */
    double t_catchup;                       /* a history token the draft model catches up on after
                                               rounds without drafts (0: not measured) */
    int n_catchup;                          /* ... the catch-ups behind it */
    double ref1[SD_DRAFT_COST_MAX_N + 1];   /* t_pass[1] when t_pass[n] last moved (0: unknown then):
                                               a larger pass is weighed by its ratio to one step */
    int given; /* 1: set by the caller (reproducible runs, tests): never measured or updated */
    int streamed; /* the target's weights are more than the CPU's caches (CPUID): each pass streams
                     them, and one of a few tokens costs about a step (set at creation, not measured) */
} sd_draft_costs;

/* One round's request and its answer. */
typedef struct {
    const int32_t *hist; /* in: the history, hist[0..n_hist) */
    int n_hist;
    int n_prompt;        /* in: the generated tokens start here (the sampling penalties count them) */
    int k;               /* in: most proposals (>= 1) */
    sd_rng *rng;         /* in */
    float *q;            /* in: [k][n_vocab] room for distributions, or NULL when none are needed */
    sd_draft_policy *policy; /* in: asked before each draw; may be NULL (k proposals when the
                                drafter has them) */
    struct sd_grammar_matcher *grammar; /* in: NULL, or the constraint at the history's end: a model
                                drafter masks its distributions with it and accepts each proposal
                                into it (the engine rolls it back) */
    uint64_t *mask;      /* in with grammar: room for a token mask of the target's vocabulary */
    int32_t *out;        /* out: [k] proposals */
    float *conf;         /* out: [k] each proposal's pre-draw confidence (as given to the policy) */
    int n_out;           /* out: proposals made, 0..k */
    int q_filled;        /* out: 1 when q holds the distributions the proposals were drawn from */
    int source;          /* out: which of the drafter's sources proposed (sd_drafter.sources) */
    int n_synced;        /* out: history tokens a model fed before its first proposal: 1-2 after a
                            round that drafted or a sync, more after rounds without drafts */
    int n_steps;         /* out: the model's forward passes this round (the catch-up on the history
                            among them; 0: a lookup): what the round's drafting time bought. A
                            round the policy ended before a proposal ran one pass more than it
                            proposed, so its time per proposal is not a step's price */
} sd_draft_req;

/* A tree of proposals (see sd_verify_tree_*): node 0 is the root, the history's last token;
 * node i > 0 holds tok[i] with parent par[i] < i. How a node's children are chosen follows the
 * drafter's sampling (sd_drafter_set_sampling): greedy, its likeliest tokens; coupled, the race's
 * best at the children's position; rejection, i.i.d. draws from its distribution (their number
 * fixed before drawing and none dropped: multi-candidate sampling stays exact), recorded in q. */
typedef struct {
    const int32_t *hist; /* in: the history */
    int n_hist;
    int n_prompt;        /* in: the generated tokens start here */
    sd_rng *rng;         /* in */
    int budget;          /* in: most proposals (nodes besides the root) */
    int depth;           /* in: most levels */
    int branch;          /* in: most children of a node */
    int width;           /* in: most nodes expanded per level */
    int32_t *tok;        /* out: [budget + 1] */
    int32_t *par;        /* out: [budget + 1] */
    float *q;            /* in: room for [budget + 1][n_vocab], or NULL; out when q_filled: row u
                            the distribution node u's children were drawn from */
    int q_filled;        /* out */
    int n;               /* out: nodes, root included */
} sd_draft_tree_req;

typedef struct {
    /* Tells the drafter of a new history hist[0..n_hist) (the prompt, at the start of a
     * generation): what it holds of it is reused, and a model feeds the rest but the last token
     * now, as the target's prefill does (a generation's first round drafts, and its drafting time
     * is then a step's price). Optional (NULL): draft() syncs anyway. A history that does not
     * extend the last one must come through sync first. */
    sd_status (*sync)(sd_drafter *d, const int32_t *hist, int n_hist);
    sd_status (*draft)(sd_drafter *d, sd_draft_req *r);
    void (*destroy)(sd_drafter *d);
    /* Proposes a tree; NULL when the drafter has no trees. */
    sd_status (*draft_tree)(sd_drafter *d, sd_draft_tree_req *r);
    /* The generation's sampling (temperature, top-k/top-p, mode, seed), so that a model's
     * proposals are drawn as the target's tokens will be; NULL when proposals do not depend on it
     * (prompt lookup). */
    sd_status (*set_sampling)(sd_drafter *d, const sd_sampler_params *sp);
} sd_drafter_vtbl;

#define SD_DRAFT_MAX_SOURCES 4

struct sd_drafter {
    const sd_drafter_vtbl *vt;
    void *impl;
    const char *name;  /* "model", "ngram", "ngram+model", ... */
    const char *sources[SD_DRAFT_MAX_SOURCES]; /* names of what can propose, by req.source */
    int n_sources;
    int n_vocab;       /* ids it may propose: [0, n_vocab) */
    int capacity;      /* most history + drafts its state holds (INT32_MAX: unbounded) */
    unsigned stepping; /* bit s: each proposal of source s costs a draft step (a model's forward
                          pass); clear: a lookup, next to free. The controller prices drafts by it */
};

/* The model drafter: a draft model decoding one token at a time in sequence seq of ctx
 * (borrowed: it must outlive the drafter; the drafter owns that sequence). Distributions are
 * computed over the first n_vocab ids (the target's vocabulary) with the generation's sampling
 * processing (sp, then sd_drafter_set_sampling); proposals follow its mode: greedy, the argmax;
 * coupled, the race at the proposal's position (no q needed); rejection, a draw recorded in q. */
sd_status sd_drafter_model_create(sd_context *ctx, int seq, int n_vocab, const sd_sampler_params *sp,
                                  sd_drafter **out);
void sd_drafter_free(sd_drafter *d); /* NULL is fine */
/* The generation's sampling for any drafter (the next round uses it; caches are kept); the engine
 * calls it whenever its own sampling is set. SD_ERR_INVALID_ARG for bad values. */
sd_status sd_drafter_set_sampling(sd_drafter *d, const sd_sampler_params *sp);

/* 1 when a and b are model drafters on one context (different sequences): their rounds can
 * draft in lockstep, every draft step of all of them in one pass. */
int sd_drafter_model_batchable(const sd_drafter *a, const sd_drafter *b);
/* One round of each of n such drafters, in lockstep: the missing history of all of them in one
 * pass, then each draft step of all that go on in one pass. Same proposals as n separate
 * draft() calls. */
sd_status sd_drafter_model_draft_many(sd_drafter *const *ds, sd_draft_req *const *reqs, int n);

/* Prompt lookup: proposes the continuation of the most recent earlier occurrence of the history's
 * last n tokens, n from n_max down to n_min (1 <= n_min <= n_max <= 64); no model, deterministic
 * proposals (q one-hot), confidence n / (n_max + 1), known before each proposal is taken. */
sd_status sd_drafter_ngram_create(int n_min, int n_max, int n_vocab, sd_drafter **out);
/* The n-gram drafter's proposal when it has one, else the model drafter's (sources "ngram" and
 * "model"). Takes ownership of both. */
sd_status sd_drafter_combo_create(sd_drafter *ngram, sd_drafter *model, sd_drafter **out);
sd_drafter *sd_drafter_combo_model(sd_drafter *d); /* the model drafter inside, or NULL */

/* The model drafter's context and sequence, and the tokens that sequence holds, in order (its
 * accepted history, then any drafts it fed that the next call will drop when rejected), of d or
 * of the model drafter inside a combined one; NULL for another kind of drafter. Inspection. */
sd_context *sd_drafter_model_context(const sd_drafter *d);
int sd_drafter_model_seq(const sd_drafter *d);
const int32_t *sd_drafter_model_tokens(const sd_drafter *d, int *n);

#endif
