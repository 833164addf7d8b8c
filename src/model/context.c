/* Contexts (activation arena + multi-sequence KV cache over a shared, immutable model) and the
 * batch container. The forward pass that runs a batch is in forward.c. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"

/* Tokens per forward chunk unless asked otherwise: a 512-token prefill in one chunk runs each
 * matrix as one sgemm (one packing of the weights instead of two), and ran faster than two chunks
 * of 256 (measured: commit 3acbb7d). The activations double (about 37 KB a token at the 110M
 * shape: 19 MB). */
#define SD_DEFAULT_N_BATCH 512

sd_context_params sd_context_default_params(void) {
    sd_context_params p = {0};
    p.n_batch = SD_DEFAULT_N_BATCH;
    p.n_seq = 1;
    p.kv_type = SD_TYPE_F32;
    return p;
}

void sd_context_free(sd_context *c) {
    if (!c) return;
    free(c->arena.base);
    sd_kv_free(c->kv);
    free(c);
}

/* One allocation sized for n_batch tokens, carved into the arena's buffers. */
static sd_status arena_create(sd_context *c) {
    const sd_hparams *hp = &c->m->hp;
    const int nb = c->p.n_batch, n_ctx = c->p.n_ctx;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    int slots = c->p.n_threads;
    const int conv_slots = slots;
    /* Attention rows for every head of up to SD_ATT_TOKENS tokens (a verify pass then reads the
     * cache once), fewer tokens when that would exceed 64 MiB (long contexts, many heads), and
     * at least one row per head (the position-major path). */
    {
        const size_t row = (size_t)n_ctx * sizeof(float), cap = (size_t)64 << 20;
        size_t tokens = nb < SD_ATT_TOKENS ? (size_t)nb : SD_ATT_TOKENS;
        while (tokens > 1 && (size_t)hp->n_heads * tokens * row > cap) tokens--;
        if ((size_t)hp->n_heads * tokens > (size_t)slots) slots = (int)((size_t)hp->n_heads * tokens);
    }
    size_t max_cols = (size_t)(hp->hidden_dim > hp->dim ? hp->hidden_dim : hp->dim);
    if (q_dim > max_cols) max_cols = q_dim;
    const int f16 = c->p.kv_type == SD_TYPE_F16;
    const size_t sizes[12] = {(size_t)nb * hp->dim,
                              (size_t)nb * hp->dim,
                              (size_t)nb * q_dim,
                              (size_t)nb * q_dim,
                              (size_t)nb * hp->hidden_dim,
                              (size_t)nb * hp->hidden_dim,
                              (size_t)slots * n_ctx,
                              sd_matmul_scratch_floats((int64_t)max_cols),
                              (size_t)nb * kv_dim,
                              (size_t)nb * kv_dim,
                              f16 ? (size_t)conv_slots * 16 * kv_dim : 0,
                              (size_t)nb * hp->rope_dim};
    size_t total = 0;
    for (int i = 0; i < 12; i++) total += (sizes[i] + 15) & ~(size_t)15; /* 64-byte aligned parts */
    float *base = aligned_alloc(64, total * sizeof(float));
    if (!base)
        return sd_fail(SD_ERR_NOMEM, "%s: cannot allocate %zu bytes of activations", c->m->path, total * sizeof(float));
    sd_arena *a = &c->arena;
    float **parts[12] = {&a->x, &a->xb, &a->q, &a->att_out, &a->hb, &a->hb2, &a->att, &a->tile, &a->knew, &a->vnew,
                         &a->conv, &a->rope};
    float *cur = base;
    for (int i = 0; i < 12; i++) {
        *parts[i] = sizes[i] ? cur : NULL;
        cur += (sizes[i] + 15) & ~(size_t)15;
    }
    a->base = base;
    a->n_batch = nb;
    a->att_threads = slots;
    a->conv_slots = conv_slots;
    return SD_OK;
}

sd_status sd_context_create(const sd_model *m, const sd_context_params *p, sd_context **out) {
    *out = NULL;
    if (!m) return sd_fail(SD_ERR_INVALID_ARG, "context: no model");
    sd_context_params dp = sd_context_default_params();
    if (!p) p = &dp;
    const sd_hparams *hp = &m->hp;
    if (p->n_ctx < 0 || p->n_batch < 0 || p->n_seq < 0)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: context size %d, batch %d and sequences %d must be >= 0", m->path,
                       p->n_ctx, p->n_batch, p->n_seq);
    if (p->kv_type != SD_TYPE_F32 && p->kv_type != SD_TYPE_F16)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: KV cache type %d: f32 or f16", m->path, (int)p->kv_type);
    if (p->n_threads < 0)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: threads %d must be >= 0 (0: OpenMP's default)", m->path, p->n_threads);
    if (p->kv_type == SD_TYPE_F16 && !sd_attention_f16_ok(hp->head_dim))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: an f16 KV cache needs head_dim >= 16 (head_dim %d)",
                       m->path, hp->head_dim);
    sd_context *c = calloc(1, sizeof *c);
    if (!c) return sd_fail(SD_ERR_NOMEM, "out of memory");
    c->m = m;
    c->p = *p;
    if (c->p.n_ctx == 0) c->p.n_ctx = hp->ctx_len;
    if (c->p.n_batch == 0) c->p.n_batch = SD_DEFAULT_N_BATCH;
    if (c->p.n_batch > c->p.n_ctx * (c->p.n_seq > 0 ? c->p.n_seq : 1)) c->p.n_batch = c->p.n_ctx * (c->p.n_seq > 0 ? c->p.n_seq : 1);
    if (c->p.n_seq == 0) c->p.n_seq = 1;
    c->p.n_threads = sd_kernels_team(c->p.n_threads);
    sd_status st = sd_kv_create(hp->n_layers, c->p.n_ctx, hp->n_kv_heads * hp->head_dim, c->p.kv_type, c->p.n_seq, &c->kv);
    if (st == SD_OK) st = arena_create(c);
    if (st != SD_OK) {
        sd_context_free(c);
        return st;
    }
    *out = c;
    return SD_OK;
}

const sd_model *sd_context_model(const sd_context *c) { return c->m; }
int sd_context_n_ctx(const sd_context *c) { return c->p.n_ctx; }
int sd_context_n_seq(const sd_context *c) { return c->p.n_seq; }
int sd_context_n_batch(const sd_context *c) { return c->p.n_batch; }
sd_type sd_context_kv_type(const sd_context *c) { return c->p.kv_type; }
int sd_context_n_threads(const sd_context *c) { return c->p.n_threads; }
sd_kv *sd_context_kv(sd_context *c) { return c->kv; }
int sd_context_seq_len(const sd_context *c, int seq) { return sd_kv_len(c->kv, seq); }
sd_status sd_context_seq_truncate(sd_context *c, int seq, int n) { return sd_kv_truncate(c->kv, seq, n); }
sd_status sd_context_seq_copy(sd_context *c, int src, int dst, int n) { return sd_kv_copy(c->kv, src, dst, n); }
sd_status sd_context_seq_keep(sd_context *c, int seq, int base, const int32_t *rows, int n) {
    return sd_kv_keep_rows(c->kv, seq, base, rows, n);
}

/* ---- batches ------------------------------------------------------------------------------- */

sd_status sd_batch_init(sd_batch *b, int cap) {
    memset(b, 0, sizeof *b);
    if (cap < 1) return sd_fail(SD_ERR_INVALID_ARG, "batch: capacity %d must be >= 1", cap);
    b->token = malloc((size_t)cap * sizeof *b->token);
    b->pos = malloc((size_t)cap * sizeof *b->pos);
    b->seq = malloc((size_t)cap * sizeof *b->seq);
    b->parent = malloc((size_t)cap * sizeof *b->parent);
    b->logits = malloc((size_t)cap * sizeof *b->logits);
    if (!b->token || !b->pos || !b->seq || !b->parent || !b->logits) {
        sd_batch_free(b);
        return sd_fail(SD_ERR_NOMEM, "batch: out of memory for %d tokens", cap);
    }
    b->cap = cap;
    return SD_OK;
}

void sd_batch_free(sd_batch *b) {
    if (!b) return;
    free(b->token);
    free(b->pos);
    free(b->seq);
    free(b->parent);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

void sd_batch_clear(sd_batch *b) { b->n = 0; }

sd_status sd_batch_add_child(sd_batch *b, int32_t token, int32_t pos, int32_t seq, int32_t parent, int logits) {
    if (b->n >= b->cap) return sd_fail(SD_ERR_INVALID_ARG, "batch: full at %d tokens", b->cap);
    const int i = b->n++;
    b->token[i] = token;
    b->pos[i] = pos;
    b->seq[i] = seq;
    b->parent[i] = parent;
    b->logits[i] = logits != 0;
    return SD_OK;
}

sd_status sd_batch_add(sd_batch *b, int32_t token, int32_t pos, int32_t seq, int logits) {
    int parent = -1;
    if (b->n > 0 && b->seq[b->n - 1] == seq) parent = b->n - 1;
    return sd_batch_add_child(b, token, pos, seq, parent, logits);
}

int sd_batch_n_logits(const sd_batch *b) {
    int n = 0;
    for (int i = 0; i < b->n; i++) n += b->logits[i] != 0;
    return n;
}
