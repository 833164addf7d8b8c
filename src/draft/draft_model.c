/* The model drafter: a small model decoding k tokens one at a time in its own KV cache sequence,
 * recording the processed distribution each draft was drawn from. It remembers the tokens its
 * cache holds, so it syncs itself to any history by keeping the common prefix. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/draft.h"

typedef struct {
    sd_context *ctx;
    int seq;
    sd_sampler_params sp;
    int n_vocab;       /* width of the distributions: the target's vocabulary */
    int model_vocab;   /* the draft model's logit count */
    int32_t *fed;      /* [n_ctx] the tokens the cache holds, in order */
    int n_fed;
    int synced;        /* fed[0..synced) is known to equal the history's prefix */
    float *logits;     /* [model_vocab] after the last fed token */
    int have_logits;   /* logits belong to fed[n_fed - 1] */
    float *row;        /* [n_vocab] logits restricted/padded to the target's vocabulary */
    float *probs;      /* [n_vocab] when q is not requested */
    void *scratch;     /* sd_sample_scratch_bytes(n_vocab) */
} model_drafter;

/* Ids the target cannot score get a logit that underflows to probability 0, so the draft
 * never proposes them and q stays the distribution actually sampled from. */
#define SD_MASKED_LOGIT (-1e30f)

/* Feeds tokens[0..n) after what the cache holds; logits of the last one. */
static sd_status feed(model_drafter *md, const int32_t *tokens, int n) {
    sd_status st = sd_context_forward(md->ctx, md->seq, tokens, n, md->logits, 0);
    if (st != SD_OK) return st;
    memcpy(md->fed + md->n_fed, tokens, (size_t)n * sizeof *tokens);
    md->n_fed += n;
    md->have_logits = 1;
    return SD_OK;
}

/* Keeps the longest prefix of the cache that the history shares (fed[0..c) is known to be
 * shared; at most n_hist - 1 tokens are kept, so that the last history token is fed and gives
 * the logits to draft from), then feeds the rest of the history. */
static sd_status sync_from(model_drafter *md, const int32_t *hist, int n_hist, int c) {
    if (n_hist < 1) return sd_fail(SD_ERR_INVALID_ARG, "drafter: empty history");
    if (n_hist > sd_context_n_ctx(md->ctx))
        return sd_fail(SD_ERR_CONTEXT_FULL, "drafter: a history of %d tokens exceeds its context of %d", n_hist,
                       sd_context_n_ctx(md->ctx));
    while (c < md->n_fed && c < n_hist && md->fed[c] == hist[c]) c++;
    if (c == n_hist && md->n_fed == n_hist && md->have_logits) {
        md->synced = c;
        return SD_OK; /* already there, logits in hand */
    }
    if (c > n_hist - 1) c = n_hist - 1;
    sd_status st = sd_context_seq_truncate(md->ctx, md->seq, c);
    if (st != SD_OK) return st;
    md->n_fed = c;
    md->have_logits = 0;
    md->synced = c;
    if ((st = feed(md, hist + c, n_hist - c)) != SD_OK) return st;
    md->synced = n_hist;
    return SD_OK;
}

/* A new history: compared from its start. */
static sd_status md_sync(sd_drafter *d, const int32_t *hist, int n_hist) {
    return sync_from(d->impl, hist, n_hist, 0);
}

/* The next proposal from the logits in hand: sampled from (and recorded in) q, or the argmax;
 * *conf its probability (the processed distribution's, or the raw softmax's when greedy and a
 * confidence is wanted). */
static sd_status md_pick(model_drafter *md, sd_rng *rng, float *q, int want_conf, int32_t *tok, float *conf) {
    int nv = md->n_vocab, common = md->model_vocab < nv ? md->model_vocab : nv;
    memcpy(md->row, md->logits, (size_t)common * sizeof(float));
    for (int i = common; i < nv; i++) md->row[i] = SD_MASKED_LOGIT;
    *conf = 1.0f;
    if (md->sp.temperature == 0 && !q) {
        *tok = sd_argmax(md->row, nv);
        if (want_conf) { /* the top-1 probability: exp(0) over the sum of exp(x - max) */
            const float mx = md->row[*tok];
            double sum = 0;
            for (int i = 0; i < nv; i++) sum += exp((double)(md->row[i] - mx));
            *conf = (float)(1.0 / sum);
        }
        return SD_OK;
    }
    float *probs = q ? q : md->probs;
    sd_status st = sd_sample_probs(&md->sp, md->row, nv, probs, md->scratch);
    if (st != SD_OK) return st;
    *tok = md->sp.temperature == 0 ? sd_argmax(probs, nv) : sd_sample_draw(probs, nv, rng);
    *conf = probs[*tok];
    return SD_OK;
}

static sd_status md_draft(sd_drafter *d, sd_draft_req *r) {
    model_drafter *md = d->impl;
    r->n_out = 0;
    r->source = 0;
    r->q_filled = r->q != NULL;
    /* The history extends the last one: its first `synced` tokens are the cache's. */
    int c = md->synced < md->n_fed ? md->synced : md->n_fed;
    sd_status st = sync_from(md, r->hist, r->n_hist, c < r->n_hist ? c : r->n_hist);
    if (st != SD_OK) return st;
    /* Drafts go into the cache too (all but the last); the next sync keeps those accepted. */
    int k = r->k;
    const int room = sd_context_n_ctx(md->ctx) - md->n_fed;
    if (k > room + 1) k = room + 1;
    for (int i = 0; i < k; i++) {
        float conf;
        if ((st = md_pick(md, r->rng, r->q ? r->q + (size_t)i * md->n_vocab : NULL, r->policy != NULL, &r->out[i], &conf)) !=
            SD_OK)
            return st;
        if (r->conf) r->conf[i] = conf;
        const sd_draft_verdict v = r->policy ? r->policy->judge(r->policy, 0, i, conf) : SD_DRAFT_MORE;
        if (v == SD_DRAFT_DROP) break;
        r->n_out = i + 1;
        if (v == SD_DRAFT_STOP || i + 1 == k) break; /* the last draft is fed only if it is accepted */
        if ((st = feed(md, &r->out[i], 1)) != SD_OK) return st;
    }
    return SD_OK;
}

static void md_destroy(sd_drafter *d) {
    model_drafter *md = d->impl;
    if (md) {
        free(md->fed);
        free(md->logits);
        free(md->row);
        free(md->probs);
        free(md->scratch);
        free(md);
    }
    free(d);
}

static const sd_drafter_vtbl k_model_vtbl = {md_sync, md_draft, md_destroy};

sd_status sd_drafter_model_create(sd_context *ctx, int seq, int n_vocab, const sd_sampler_params *sp,
                                  sd_drafter **out) {
    *out = NULL;
    if (!ctx) return sd_fail(SD_ERR_INVALID_ARG, "drafter: no context");
    if (n_vocab <= 0) return sd_fail(SD_ERR_INVALID_ARG, "drafter: vocabulary of %d", n_vocab);
    if (seq < 0 || seq >= sd_context_n_seq(ctx))
        return sd_fail(SD_ERR_INVALID_ARG, "drafter: sequence %d not in the context's %d", seq, sd_context_n_seq(ctx));
    sd_drafter *d = calloc(1, sizeof *d);
    model_drafter *md = calloc(1, sizeof *md);
    if (!d || !md) {
        free(d);
        free(md);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    d->vt = &k_model_vtbl;
    d->impl = md;
    d->name = "model";
    d->sources[0] = "model";
    d->n_sources = 1;
    d->n_vocab = n_vocab;
    d->capacity = sd_context_n_ctx(ctx);
    md->ctx = ctx;
    md->seq = seq;
    md->sp = *sp;
    md->n_vocab = n_vocab;
    md->model_vocab = sd_model_hparams(sd_context_model(ctx))->vocab_size;
    md->n_fed = sd_context_seq_len(ctx, seq);
    if (md->n_fed > 0) sd_context_seq_truncate(ctx, seq, 0); /* unknown tokens: start empty */
    md->n_fed = 0;
    md->fed = malloc((size_t)sd_context_n_ctx(ctx) * sizeof *md->fed);
    md->logits = malloc((size_t)md->model_vocab * sizeof(float));
    md->row = malloc((size_t)n_vocab * sizeof(float));
    md->probs = malloc((size_t)n_vocab * sizeof(float));
    md->scratch = malloc(sd_sample_scratch_bytes(n_vocab));
    if (!md->fed || !md->logits || !md->row || !md->probs || !md->scratch) {
        md_destroy(d);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}

void sd_drafter_free(sd_drafter *d) {
    if (d) d->vt->destroy(d);
}

/* d itself, or the model drafter inside a combined one; NULL otherwise. */
static const model_drafter *model_of(const sd_drafter *d) {
    if (d && d->vt != &k_model_vtbl) d = sd_drafter_combo_model((sd_drafter *)d);
    return d && d->vt == &k_model_vtbl ? d->impl : NULL;
}

sd_context *sd_drafter_model_context(const sd_drafter *d) {
    const model_drafter *md = model_of(d);
    return md ? md->ctx : NULL;
}

int sd_drafter_model_seq(const sd_drafter *d) {
    const model_drafter *md = model_of(d);
    return md ? md->seq : -1;
}

const int32_t *sd_drafter_model_tokens(const sd_drafter *d, int *n) {
    *n = 0;
    d = d && d->vt != &k_model_vtbl ? sd_drafter_combo_model((sd_drafter *)d) : d;
    if (!d || d->vt != &k_model_vtbl) return NULL;
    const model_drafter *md = d->impl;
    *n = md->n_fed;
    return md->fed;
}
