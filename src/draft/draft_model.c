/* The model drafter: a small model decoding k tokens one at a time with its own KV cache,
 * recording the processed distribution each draft was drawn from. */
#include <stdlib.h>
#include <string.h>

#include "specdec/draft.h"

typedef struct {
    sd_model *model;
    sd_kv *kv;
    sd_sampler_params sp;
    int n_vocab;       /* width of the distributions: the target's vocabulary */
    int model_vocab;   /* the draft model's logit count */
    float *logits;     /* [model_vocab] */
    float *row;        /* [n_vocab] logits restricted/padded to the target's vocabulary */
    float *probs;      /* [n_vocab] when q is not requested */
    void *scratch;     /* sd_sample_scratch_bytes(n_vocab) */
} model_drafter;

/* Ids the target cannot score get a logit that underflows to probability 0, so the draft
 * never proposes them and q stays the distribution actually sampled from. */
#define SD_MASKED_LOGIT (-1e30f)

static sd_status md_prefill(sd_drafter *d, const int32_t *tokens, int n) {
    model_drafter *md = d->impl;
    return sd_model_forward(md->model, md->kv, tokens, n, NULL, 0);
}

static sd_status md_pick(model_drafter *md, sd_rng *rng, float *q, int32_t *tok) {
    int nv = md->n_vocab, common = md->model_vocab < nv ? md->model_vocab : nv;
    memcpy(md->row, md->logits, (size_t)common * sizeof(float));
    for (int i = common; i < nv; i++) md->row[i] = SD_MASKED_LOGIT;
    if (md->sp.temperature == 0 && !q) {
        *tok = sd_argmax(md->row, nv);
        return SD_OK;
    }
    float *probs = q ? q : md->probs;
    sd_status st = sd_sample_probs(&md->sp, md->row, nv, probs, md->scratch);
    if (st != SD_OK) return st;
    *tok = md->sp.temperature == 0 ? sd_argmax(probs, nv) : sd_sample_draw(probs, nv, rng);
    return SD_OK;
}

static sd_status md_draft(sd_drafter *d, const int32_t *pending, int n_pending, int k, sd_rng *rng,
                          int32_t *out, float *q, int *n_out) {
    model_drafter *md = d->impl;
    *n_out = 0;
    sd_status st;
    if (n_pending > 0) {
        st = sd_model_forward(md->model, md->kv, pending, n_pending, md->logits, 0);
        if (st != SD_OK) return st;
    }
    for (int i = 0; i < k; i++) {
        st = md_pick(md, rng, q ? q + (size_t)i * md->n_vocab : NULL, &out[i]);
        if (st != SD_OK) return st;
        *n_out = i + 1;
        if (i + 1 == k) break; /* the last draft is fed only if it is accepted */
        st = sd_model_forward(md->model, md->kv, &out[i], 1, md->logits, 0);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status md_rollback(sd_drafter *d, int n) {
    model_drafter *md = d->impl;
    return sd_kv_truncate(md->kv, n);
}

static int md_consumed(const sd_drafter *d) { return sd_kv_len(((const model_drafter *)d->impl)->kv); }
static int md_capacity(const sd_drafter *d) {
    return sd_kv_capacity(((const model_drafter *)d->impl)->kv);
}

static void md_destroy(sd_drafter *d) {
    model_drafter *md = d->impl;
    if (md) {
        sd_kv_free(md->kv);
        free(md->logits);
        free(md->row);
        free(md->probs);
        free(md->scratch);
        free(md);
    }
    free(d);
}

static const sd_drafter_vtbl k_model_vtbl = {md_prefill, md_draft, md_rollback, md_consumed,
                                             md_capacity, md_destroy};

sd_status sd_drafter_model_create(sd_model *draft, int n_ctx, int n_vocab,
                                  const sd_sampler_params *sp, sd_drafter **out) {
    *out = NULL;
    if (n_vocab <= 0) return sd_fail(SD_ERR_INVALID_ARG, "drafter: vocabulary of %d", n_vocab);
    sd_drafter *d = calloc(1, sizeof *d);
    model_drafter *md = calloc(1, sizeof *md);
    if (!d || !md) {
        free(d);
        free(md);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    d->vt = &k_model_vtbl;
    d->impl = md;
    md->model = draft;
    md->sp = *sp;
    md->n_vocab = n_vocab;
    md->model_vocab = sd_model_hparams(draft)->vocab_size;
    sd_status st = sd_model_kv_create(draft, n_ctx, &md->kv);
    if (st != SD_OK) {
        md_destroy(d);
        return st;
    }
    md->logits = malloc((size_t)md->model_vocab * sizeof(float));
    md->row = malloc((size_t)n_vocab * sizeof(float));
    md->probs = malloc((size_t)n_vocab * sizeof(float));
    md->scratch = malloc(sd_sample_scratch_bytes(n_vocab));
    if (!md->logits || !md->row || !md->probs || !md->scratch) {
        md_destroy(d);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}

void sd_drafter_free(sd_drafter *d) {
    if (d) d->vt->destroy(d);
}

sd_kv *sd_drafter_model_kv(sd_drafter *d) { return ((model_drafter *)d->impl)->kv; }
