/* Drafting strategies behind one interface. A drafter keeps its own context (for the model
 * drafter, a KV cache), proposes up to k tokens with the distribution each was drawn from,
 * and rolls back to the accepted context in O(1). */
#ifndef SPECDEC_DRAFT_H
#define SPECDEC_DRAFT_H

#include <stdint.h>

#include "specdec/kv.h"
#include "specdec/model.h"
#include "specdec/sample.h"

typedef struct sd_drafter sd_drafter;

typedef struct {
    /* Consumes tokens (the prompt) into the drafter's context. */
    sd_status (*prefill)(sd_drafter *d, const int32_t *tokens, int n);
    /* Feeds pending[0..n_pending) (accepted tokens it has not seen), then proposes up to k
     * tokens. q (may be NULL when greedy): [k][n_vocab] processed distributions the drafts
     * were drawn from. *n_out may be < k. */
    sd_status (*draft)(sd_drafter *d, const int32_t *pending, int n_pending, int k, sd_rng *rng,
                       int32_t *out, float *q, int *n_out);
    /* Keeps the first n tokens of the drafter's context. */
    sd_status (*rollback)(sd_drafter *d, int n);
    int (*consumed)(const sd_drafter *d); /* tokens in the drafter's context */
    int (*capacity)(const sd_drafter *d);
    void (*destroy)(sd_drafter *d);
} sd_drafter_vtbl;

struct sd_drafter {
    const sd_drafter_vtbl *vt;
    void *impl;
};

/* The model drafter: decodes one token at a time with its own KV cache. Distributions are
 * computed over the first n_vocab ids (the target's vocabulary), using the same sampling
 * processing as the target so that speculative sampling is exact. */
sd_status sd_drafter_model_create(sd_model *draft, int n_ctx, int n_vocab,
                                  const sd_sampler_params *sp, sd_drafter **out);
void sd_drafter_free(sd_drafter *d); /* NULL is fine */

sd_kv *sd_drafter_model_kv(sd_drafter *d);

#endif
