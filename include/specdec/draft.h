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

typedef struct sd_drafter sd_drafter;

/* After each proposal: go on, keep this one and stop, or drop this one and stop. */
typedef enum { SD_DRAFT_MORE = 0, SD_DRAFT_STOP = 1, SD_DRAFT_DROP = 2 } sd_draft_verdict;

typedef struct sd_draft_policy sd_draft_policy;
struct sd_draft_policy {
    /* Called with proposal i (0-based) and its confidence: the drafter's probability of it (its
     * top-1 probability when greedy). Return the verdict. */
    sd_draft_verdict (*judge)(sd_draft_policy *p, int source, int i, float conf);
};

/* One round's request and its answer. */
typedef struct {
    const int32_t *hist; /* in: the history, hist[0..n_hist) */
    int n_hist;
    int k;               /* in: most proposals (>= 1) */
    sd_rng *rng;         /* in */
    float *q;            /* in: [k][n_vocab] room for distributions, or NULL when none are needed */
    sd_draft_policy *policy; /* in: may be NULL (k proposals when the drafter has them) */
    int32_t *out;        /* out: [k] proposals */
    float *conf;         /* out: [k] each proposal's confidence (as given to the policy) */
    int n_out;           /* out: proposals made, 0..k */
    int q_filled;        /* out: 1 when q holds the distributions the proposals were drawn from */
    int source;          /* out: which of the drafter's sources proposed (sd_drafter.sources) */
} sd_draft_req;

/* A tree of proposals (see sd_verify_tree_*): node 0 is the root, the history's last token;
 * node i > 0 holds tok[i] with parent par[i] < i. */
typedef struct {
    const int32_t *hist; /* in: the history */
    int n_hist;
    sd_rng *rng;         /* in */
    int budget;          /* in: most proposals (nodes besides the root) */
    int depth;           /* in: most levels */
    int branch;          /* in: most children of a node */
    int width;           /* in: most nodes expanded per level */
    int sample;          /* in: 1 draws each node's children i.i.d. from its distribution (the number
                            fixed before drawing, none dropped: multi-candidate sampling stays
                            exact); 0 takes its likeliest tokens */
    int32_t *tok;        /* out: [budget + 1] */
    int32_t *par;        /* out: [budget + 1] */
    float *q;            /* out with sample: [budget + 1][n_vocab], row u the distribution node u's
                            children were drawn from */
    int n;               /* out: nodes, root included */
} sd_draft_tree_req;

typedef struct {
    /* Brings the drafter's state to hist[0..n_hist) (the prompt, at the start of a generation),
     * reusing what it already holds. Optional (NULL): draft() syncs anyway. A history that
     * does not extend the last one must come through sync first. */
    sd_status (*sync)(sd_drafter *d, const int32_t *hist, int n_hist);
    sd_status (*draft)(sd_drafter *d, sd_draft_req *r);
    void (*destroy)(sd_drafter *d);
    /* Proposes a tree; NULL when the drafter has no trees. */
    sd_status (*draft_tree)(sd_drafter *d, sd_draft_tree_req *r);
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
};

/* The model drafter: a draft model decoding one token at a time in sequence seq of ctx
 * (borrowed: it must outlive the drafter; the drafter owns that sequence). Distributions are
 * computed over the first n_vocab ids (the target's vocabulary), with the same sampling
 * processing as the target so that speculative sampling is exact. */
sd_status sd_drafter_model_create(sd_context *ctx, int seq, int n_vocab, const sd_sampler_params *sp,
                                  sd_drafter **out);
void sd_drafter_free(sd_drafter *d); /* NULL is fine */
/* The sampling of the model drafter d, or of the one inside a combined drafter (the next draft()
 * uses it; its cache is kept). SD_ERR_INVALID_ARG for bad values or a drafter with no model. */
sd_status sd_drafter_model_set_sampling(sd_drafter *d, const sd_sampler_params *sp);

/* 1 when a and b are model drafters on one context (different sequences): their rounds can
 * draft in lockstep, every draft step of all of them in one pass. */
int sd_drafter_model_batchable(const sd_drafter *a, const sd_drafter *b);
/* One round of each of n such drafters, in lockstep: the missing history of all of them in one
 * pass, then each draft step of all that go on in one pass. Same proposals as n separate
 * draft() calls. */
sd_status sd_drafter_model_draft_many(sd_drafter *const *ds, sd_draft_req *const *reqs, int n);

/* Prompt lookup: proposes the continuation of the most recent earlier occurrence of the history's
 * last n tokens, n from n_max down to n_min (1 <= n_min <= n_max <= 64); no model, deterministic
 * proposals (q one-hot), confidence n / (n_max + 1). */
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
