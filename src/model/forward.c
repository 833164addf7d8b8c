/* The Llama forward pass over n tokens, shared by every model: prefill, verification and
 * single-token decode differ only in n (the kernels pick matvec or GEMM). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"

static void add_inplace(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Checking the residual stream after every layer (sd_first_nonfinite, kernels) costs about
 * n*dim compares per layer, noise next to the matrices, and turns NaN logits into an error
 * that names where they started. */

/* Adds bias b[d] to each of n rows of y (Qwen2's q/k/v biases); a no-op without one. Row by
 * row in the same order for any n, so batched and stepwise passes stay equal. */
static void add_bias(float *y, const float *b, int n, int d) {
    if (!b) return;
    for (int t = 0; t < n; t++) add_inplace(y + (size_t)t * d, b, (size_t)d);
}

/* Matrices that read the same input (Q/K/V; gate/up) run in one parallel region. */
static sd_status mm_group(sd_model *m, const sd_tensor *const *W, float *const *Y, int count,
                          const float *X, int n) {
    if (sd_matmul_group(W, Y, count, X, n, m->arena.tile) != 0) {
        const sd_type_traits *ti = sd_type_info(W[0]->type);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: no kernel for %s weights", m->path, ti ? ti->name : "?");
    }
    return SD_OK;
}

static sd_status mm(sd_model *m, const sd_tensor *W, const float *X, int n, float *Y) {
    if (sd_matmul(W, X, n, Y, m->arena.tile) != 0) {
        const sd_type_traits *ti = sd_type_info(W->type);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: no kernel for %s weights", m->path, ti ? ti->name : "?");
    }
    return SD_OK;
}

/* One chunk of nc <= n_batch tokens at positions pos..pos+nc-1; K/V rows are written into
 * the cache in place (the cache length is advanced by the caller). */
static sd_status forward_chunk(sd_model *m, sd_kv *kv, const int32_t *tok, int nc, int pos,
                               float *logits, int all_logits) {
    const sd_hparams *hp = &m->hp;
    const sd_arena *a = &m->arena;
    const int dim = hp->dim, hid = hp->hidden_dim;
    const int q_dim = hp->n_heads * hp->head_dim, kv_dim = hp->n_kv_heads * hp->head_dim;
    const int half = hp->rope_style == SD_ROPE_HALF;
    const int kv_f16 = sd_kv_type(kv) == SD_TYPE_F16;
    if (kv_f16 && !a->knew)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: an f16 KV cache needs the model loaded with kv_type f16", m->path);
    sd_status st;

    for (int t = 0; t < nc; t++)
        if (sd_dequant_row(&m->tok_embd, tok[t], a->x + (size_t)t * dim) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: cannot read token embeddings", m->path);

    for (int t = 0; t < nc; t++) sd_rope_angles(pos + t, m->inv_freq, hp->rope_dim, a->rope + (size_t)t * hp->rope_dim);

    for (int l = 0; l < hp->n_layers; l++) {
        const sd_layer *L = &m->layers[l];
        /* An F32 cache takes the new rows in place; an F16 one after RoPE, rounded. */
        void *kc = sd_kv_k_data(kv, l), *vc = sd_kv_v_data(kv, l);
        float *knew = kv_f16 ? a->knew : (float *)kc + (size_t)pos * kv_dim;
        float *vnew = kv_f16 ? a->vnew : (float *)vc + (size_t)pos * kv_dim;

        sd_rmsnorm(a->xb, a->x, L->attn_norm, nc, dim, hp->norm_eps);
        {
            const sd_tensor *w[3] = {&L->wq, &L->wk, &L->wv};
            float *y[3] = {a->q, knew, vnew};
            if ((st = mm_group(m, w, y, 3, a->xb, nc)) != SD_OK) return st;
        }
        add_bias(a->q, L->bq, nc, q_dim);
        add_bias(knew, L->bk, nc, kv_dim);
        add_bias(vnew, L->bv, nc, kv_dim);
        for (int t = 0; t < nc; t++) {
            const float *cs = a->rope + (size_t)t * hp->rope_dim;
            sd_rope(a->q + (size_t)t * q_dim, hp->n_heads, hp->head_dim, hp->rope_dim, cs, half);
            sd_rope(knew + (size_t)t * kv_dim, hp->n_kv_heads, hp->head_dim, hp->rope_dim, cs, half);
        }
        if (kv_f16) {
            sd_f32_to_f16_row(knew, (uint16_t *)kc + (size_t)pos * kv_dim, (size_t)nc * kv_dim);
            sd_f32_to_f16_row(vnew, (uint16_t *)vc + (size_t)pos * kv_dim, (size_t)nc * kv_dim);
            if (sd_attention_f16(a->q, kc, vc, a->att_out, nc, pos, hp->n_heads, hp->n_kv_heads, hp->head_dim, a->att,
                                 a->att_threads, a->conv, a->conv_slots) != 0)
                return sd_fail(SD_ERR_UNSUPPORTED, "%s: no f16 attention kernel for head_dim %d", m->path, hp->head_dim);
        } else {
            sd_attention(a->q, kc, vc, a->att_out, nc, pos, hp->n_heads, hp->n_kv_heads, hp->head_dim, a->att,
                         a->att_threads);
        }
        if ((st = mm(m, &L->wo, a->att_out, nc, a->xb)) != SD_OK) return st;
        add_inplace(a->x, a->xb, (size_t)nc * dim);

        sd_rmsnorm(a->xb, a->x, L->ffn_norm, nc, dim, hp->norm_eps);
        {
            const sd_tensor *w[2] = {&L->w1, &L->w3};
            float *y[2] = {a->hb, a->hb2};
            if ((st = mm_group(m, w, y, 2, a->xb, nc)) != SD_OK) return st;
        }
        sd_swiglu(a->hb, a->hb2, nc * hid);
        if ((st = mm(m, &L->w2, a->hb, nc, a->xb)) != SD_OK) return st;
        add_inplace(a->x, a->xb, (size_t)nc * dim);
        long bad = sd_first_nonfinite(a->x, (size_t)nc * dim);
        if (bad >= 0)
            return sd_fail(SD_ERR_NUMERIC,
                           "%s: layer %d produced a non-finite activation (%g) at position %d: the weights or the "
                           "inputs hold NaN/Inf, or the activations overflowed%s",
                           m->path, l, (double)a->x[bad], pos + (int)(bad / dim),
                           kv_f16 ? " (an f16 KV cache holds at most 65504: try --kv-type f32)" : "");
    }

    if (!logits) return SD_OK;
    const int n_out = all_logits ? nc : 1;
    sd_rmsnorm(a->xb, a->x + (size_t)(nc - n_out) * dim, m->output_norm, n_out, dim, hp->norm_eps);
    if ((st = mm(m, &m->output, a->xb, n_out, logits)) != SD_OK) return st;
    /* A finite residual stream can still give NaN/Inf logits (output norm or classifier
     * weights holding them, or overflow); samplers must never see those. */
    long bad = sd_first_nonfinite(logits, (size_t)n_out * hp->vocab_size);
    if (bad >= 0)
        return sd_fail(SD_ERR_NUMERIC,
                       "%s: the output layer produced a non-finite logit (%g) for token %ld at position %d: the "
                       "output norm or classifier weights hold NaN/Inf, or the logits overflowed",
                       m->path, (double)logits[bad], bad % hp->vocab_size, pos + nc - n_out + (int)(bad / hp->vocab_size));
    return SD_OK;
}

sd_status sd_model_forward(sd_model *m, sd_kv *kv, const int32_t *tokens, int n, float *logits,
                           int all_logits) {
    const sd_hparams *hp = &m->hp;
    if (n <= 0) return sd_fail(SD_ERR_INVALID_ARG, "forward: %d tokens", n);
    if (sd_kv_n_layers(kv) != hp->n_layers || sd_kv_kv_dim(kv) != hp->n_kv_heads * hp->head_dim)
        return sd_fail(SD_ERR_INVALID_ARG, "forward: KV cache shape does not match %s", m->path);
    if (sd_kv_capacity(kv) > m->n_ctx) /* the attention scratch is sized for n_ctx */
        return sd_fail(SD_ERR_INVALID_ARG, "forward: KV cache of %d positions exceeds the context of %d %s was loaded with",
                       sd_kv_capacity(kv), m->n_ctx, m->path);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->vocab_size)
            return sd_fail(SD_ERR_INVALID_ARG, "forward: token id %d at %d outside vocabulary of %d",
                           (int)tokens[i], i, hp->vocab_size);
    const int len0 = sd_kv_len(kv);
    if (n > sd_kv_capacity(kv) - len0)
        return sd_fail(SD_ERR_CONTEXT_FULL, "context full: %d tokens at position %d exceed the context of %d",
                       n, len0, sd_kv_capacity(kv));
    const int nb = m->arena.n_batch;
    for (int off = 0; off < n; off += nb) {
        int nc = n - off < nb ? n - off : nb;
        int last_chunk = off + nc == n;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + (size_t)off * hp->vocab_size;
        else if (logits && last_chunk) lg = logits;
        sd_status st = forward_chunk(m, kv, tokens + off, nc, len0 + off, lg, all_logits);
        if (st == SD_OK) st = sd_kv_advance(kv, nc);
        if (st != SD_OK) {
            sd_kv_truncate(kv, len0);
            return st;
        }
    }
    return SD_OK;
}
