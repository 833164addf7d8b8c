/* Drafting strategies behind one interface. A drafter proposes up to k tokens continuing the
 * generation's history (prompt + emitted tokens), with the distribution each was drawn from or
 * none (a deterministic proposal, which verification treats as one-hot). It keeps whatever state
 * it needs (the model drafter: a KV cache) and syncs it to the history it is given, so the
 * engine never rolls a drafter back. */
#ifndef SPECDEC_DRAFT_H
#define SPECDEC_DRAFT_H

#include <stdint.h>

#include "specdec/context.h"
#include "specdec/model.h"
#include "specdec/sample.h"

typedef struct sd_drafter sd_drafter;

typedef struct {
    /* Brings the drafter's state to hist[0..n_hist) (the prompt, at the start of a generation),
     * reusing what it already holds. Optional (NULL): draft() syncs anyway. */
    sd_status (*sync)(sd_drafter *d, const int32_t *hist, int n_hist);
    /* Proposes up to k tokens (k >= 1) continuing hist[0..n_hist). out: k ids; q (NULL when the
     * caller does not need distributions): [k][n_vocab], row i the processed distribution draft
     * i was drawn from, filled only when the drafter has distributions (d->has_q). *n_out may
     * be < k, or 0 (no proposal: the pass is a plain target step). */
    sd_status (*draft)(sd_drafter *d, const int32_t *hist, int n_hist, int k, sd_rng *rng, int32_t *out, float *q,
                       int *n_out);
    void (*destroy)(sd_drafter *d);
} sd_drafter_vtbl;

struct sd_drafter {
    const sd_drafter_vtbl *vt;
    void *impl;
    const char *name;  /* "model", ... */
    int n_vocab;       /* ids it may propose: [0, n_vocab) */
    int has_q;         /* 1: drafts are sampled and q is filled; 0: deterministic (q one-hot) */
    int capacity;      /* most history + drafts its state holds (INT32_MAX: unbounded) */
};

/* The model drafter: a draft model decoding one token at a time in sequence seq of ctx
 * (borrowed: it must outlive the drafter; the drafter owns that sequence). Distributions are
 * computed over the first n_vocab ids (the target's vocabulary), with the same sampling
 * processing as the target so that speculative sampling is exact. */
sd_status sd_drafter_model_create(sd_context *ctx, int seq, int n_vocab, const sd_sampler_params *sp,
                                  sd_drafter **out);
void sd_drafter_free(sd_drafter *d); /* NULL is fine */

/* The model drafter's context and sequence, and the tokens that sequence holds, in order (its
 * accepted history, then any drafts it fed that the next call will drop when rejected); NULL
 * for another kind of drafter. Inspection. */
sd_context *sd_drafter_model_context(const sd_drafter *d);
int sd_drafter_model_seq(const sd_drafter *d);
const int32_t *sd_drafter_model_tokens(const sd_drafter *d, int *n);

#endif
