/* The pair builder: a target (and draft) model's contexts of n sequences, a drafter and an engine
 * per sequence, and the batch that steps them, built one way for the CLI, the bench and the
 * server. */
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

struct sd_pair {
    sd_context *tctx, *dctx; /* owned */
    sd_spec_batch *batch;
    int n_seq, n_ctx;
    sd_drafter **drafters;   /* [n_seq], owned (NULL: plain) */
    sd_spec **specs;         /* [n_seq], owned */
};

void sd_pair_free(sd_pair *pr) {
    if (!pr) return;
    for (int i = 0; pr->specs && i < pr->n_seq; i++)
        if (pr->specs[i]) {
            pr->specs[i]->owner = NULL;
            sd_spec_free(pr->specs[i]);
        }
    for (int i = 0; pr->drafters && i < pr->n_seq; i++) sd_drafter_free(pr->drafters[i]);
    free(pr->specs);
    free(pr->drafters);
    sd_spec_batch_free(pr->batch);
    sd_context_free(pr->dctx);
    sd_context_free(pr->tctx);
    free(pr);
}


int sd_pair_n_seq(const sd_pair *pr) { return pr->n_seq; }
int sd_pair_n_ctx(const sd_pair *pr) { return pr->n_ctx; }
sd_spec *sd_pair_spec(sd_pair *pr, int i) { return i >= 0 && i < pr->n_seq ? pr->specs[i] : NULL; }
sd_spec_batch *sd_pair_batch(sd_pair *pr) { return pr->batch; }

/* Sequence i's drafter: the model's, the n-gram one, both (n-grams first), or none. */
static sd_status make_drafter(sd_pair *pr, const sd_spec_params *p, int i, int V, sd_drafter **out) {
    *out = NULL;
    sd_drafter *model = NULL, *ng = NULL;
    sd_status st = SD_OK;
    if (pr->dctx && (st = sd_drafter_model_create(pr->dctx, i, V, &p->sampling, &model)) != SD_OK) return st;
    if (p->ngram && (st = sd_drafter_ngram_create(p->ngram_min, p->ngram_max, V, &ng)) != SD_OK) {
        sd_drafter_free(model);
        return st;
    }
    if (model && ng) {
        if ((st = sd_drafter_combo_create(ng, model, out)) != SD_OK) {
            sd_drafter_free(ng);
            sd_drafter_free(model);
        }
        return st;
    }
    *out = model ? model : ng;
    return SD_OK;
}

sd_status sd_pair_create(sd_model *target, sd_model *draft, const sd_spec_params *p, int n_seq, sd_pair **out) {
    *out = NULL;
    sd_status st;
    if (!target) return sd_fail(SD_ERR_INVALID_ARG, "no target model");
    if (!p) return sd_fail(SD_ERR_INVALID_ARG, "no parameters");
    if (n_seq < 1 || n_seq > 4096) return sd_fail(SD_ERR_INVALID_ARG, "sequences: %d (1..4096)", n_seq);
    if (p->n_ctx < 0) return sd_fail(SD_ERR_INVALID_ARG, "context size must be >= 0 (got %d)", p->n_ctx);
    if (draft) {
        const sd_tokenizer *tt = sd_model_tokenizer(target), *td = sd_model_tokenizer(draft);
        if (tt && td && (st = sd_tokenizer_check_compatible(tt, td)) != SD_OK) return st;
    }
    sd_pair *pr = calloc(1, sizeof *pr);
    if (!pr) return sd_fail(SD_ERR_NOMEM, "out of memory");
    pr->n_seq = n_seq;
    int n_ctx = sd_model_hparams(target)->ctx_len;
    if (draft && sd_model_hparams(draft)->ctx_len < n_ctx) n_ctx = sd_model_hparams(draft)->ctx_len;
    if (p->n_ctx > 0) n_ctx = p->n_ctx;
    pr->n_ctx = n_ctx;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.kv_type = p->kv_type;
    cp.n_threads = p->n_threads;
    sd_spec_batch_params bp = sd_spec_batch_default_params();
    bp.draft_switch = n_seq > 1 && (draft || p->ngram) && p->draft_mode == SD_DRAFT_ADAPTIVE;
    bp.max_batch = n_seq;
    const int V = sd_model_hparams(target)->vocab_size;
    if ((st = sd_context_create(target, &cp, &pr->tctx)) != SD_OK) goto fail;
    if (draft && (st = sd_context_create(draft, &cp, &pr->dctx)) != SD_OK) goto fail;
    if ((st = sd_spec_batch_create(pr->tctx, &bp, &pr->batch)) != SD_OK) goto fail;
    pr->drafters = calloc((size_t)n_seq, sizeof *pr->drafters);
    pr->specs = calloc((size_t)n_seq, sizeof *pr->specs);
    if (!pr->drafters || !pr->specs) {
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < n_seq; i++) {
        if ((st = make_drafter(pr, p, i, V, &pr->drafters[i])) != SD_OK) goto fail;
        if ((st = sd_spec_create_with(pr->batch, i, pr->drafters[i], p, &pr->specs[i])) != SD_OK) goto fail;
    }
    *out = pr;
    return SD_OK;
fail:
    sd_pair_free(pr);
    return st;
}

sd_status sd_spec_create(sd_model *target, sd_model *draft, const sd_spec_params *p, sd_spec **out) {
    *out = NULL;
    sd_pair *pr = NULL;
    sd_status st = sd_pair_create(target, draft, p, 1, &pr);
    if (st != SD_OK) return st;
    *out = pr->specs[0];
    (*out)->owner = pr;
    return SD_OK;
}
