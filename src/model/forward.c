/* The forward pass over a batch, shared by every model and every use: prefill, decode,
 * verification of a chain or a tree of drafts, several sequences at once. They differ only in
 * which tokens go in (the kernels pick matvec, small-batch or GEMM paths by the token count)
 * and in which positions each token attends to. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"

/* A batch as the pass reads it: the public sd_batch, or a single-sequence chain given as a
 * token array (sd_context_forward), whose other fields are implied. */
typedef struct {
    int n;
    const int32_t *token;
    const int32_t *pos;    /* NULL: chain positions after the sequence's cache */
    const int32_t *seq;    /* NULL: every token in seq0 */
    const int32_t *parent; /* NULL: a chain */
    const int8_t *logits;  /* NULL: logits_mode */
    int seq0;
    int logits_mode; /* without flags: 0 none, 1 the last token, 2 every token */
} bview;

static int bv_seq(const bview *b, int i) { return b->seq ? b->seq[i] : b->seq0; }
static int bv_want(const bview *b, int i) {
    if (b->logits) return b->logits[i] != 0;
    return b->logits_mode == 2 || (b->logits_mode == 1 && i == b->n - 1);
}

/* One sequence's run of tokens: batch [start, start+count), cache rows base.. */
typedef struct {
    int seq, start, count, base;
    int tree;            /* not a chain: attention follows path */
    int32_t *path;       /* tree: each token's ancestors and itself, root first, as ranks */
    int32_t *path_off;   /* [count + 1] */
} group;

typedef struct {
    group *g;
    int n, cap;
    int32_t *pos;  /* [n] resolved positions */
    int32_t *pool; /* tree paths */
} plan;

static void plan_free(plan *p) {
    for (int i = 0; i < p->n; i++) free(p->g[i].path_off);
    free(p->g);
    free(p->pos);
    free(p->pool);
}

/* Adds the Qwen2-style bias b[d] to each of n rows of y; a no-op without one. Row by row in the
 * same order for any n, so batched and stepwise passes stay equal. */
static void add_bias(float *y, const sd_tensor *b, int n, int d) {
    if (!b->data) return;
    const float *v = b->data;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < d; i++) y[(size_t)t * d + i] += v[i];
}

static void add_inplace(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Matrices that read the same input (Q/K/V; gate/up) run in one parallel region. */
static sd_status mm_group(sd_context *c, const sd_tensor *const *W, float *const *Y, int count, const float *X, int n) {
    if (sd_matmul_group(W, Y, count, X, n, c->arena.tile) != 0) {
        const sd_type_traits *ti = sd_type_info(W[0]->type);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: no kernel for %s weights", c->m->path, ti ? ti->name : "?");
    }
    return SD_OK;
}

static sd_status mm(sd_context *c, const sd_tensor *W, const float *X, int n, float *Y) {
    if (sd_matmul(W, X, n, Y, c->arena.tile) != 0) {
        const sd_type_traits *ti = sd_type_info(W->type);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: no kernel for %s weights", c->m->path, ti ? ti->name : "?");
    }
    return SD_OK;
}

/* Attention of chunk rows [t0, t0 + n) of group g (all in g) into out (n rows), against its
 * sequence's cache of layer l, whose rows for the group are already written. */
static sd_status attend(sd_context *c, const group *g, int l, int t0, int n, float *out) {
    const sd_model *m = c->m;
    const sd_hparams *hp = &m->hp;
    const sd_arena *a = &c->arena;
    const int hd = hp->head_dim, q_dim = hp->n_heads * hd;
    const void *kc = sd_kv_k_data(c->kv, g->seq, l), *vc = sd_kv_v_data(c->kv, g->seq, l);
    const float *q = a->q + (size_t)t0 * q_dim;
    const int pos0 = g->base + (t0 - g->start);
    if (g->tree) {
        sd_attention_tree(q, kc, vc, out, n, g->base, g->path, g->path_off, hp->n_heads, hp->n_kv_heads, hd, a->att,
                          a->att_threads);
    } else if (c->p.kv_type == SD_TYPE_F16) {
        if (sd_attention_f16(q, kc, vc, out, n, pos0, hp->n_heads, hp->n_kv_heads, hd, a->att, a->att_threads, a->conv,
                             a->conv_slots) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: no f16 attention kernel for head_dim %d", m->path, hd);
    } else {
        sd_attention(q, kc, vc, out, n, pos0, hp->n_heads, hp->n_kv_heads, hd, a->att, a->att_threads);
    }
    return SD_OK;
}

/* The layers over chunk rows [0, nc) (tokens [off, off+nc) of the batch, whose groups are
 * gs[0..ng), starts relative to off); keys and values go to their sequences' rows in place (the
 * caller advances the lengths). The last layer carries on only the n_last rows keep[0..n_last)
 * (n_last == nc: every row; keep may then be NULL), compacted to rows 0..n_last-1 of a->x.
 * Checking the residual stream after every layer costs about n*dim compares per layer, noise
 * next to the matrices, and turns NaN logits into an error that names where they started. */
static sd_status forward_layers(sd_context *c, const bview *b, const int32_t *pos, int off, int nc, const group *gs,
                                int ng, int n_last, const int32_t *keep) {
    const sd_model *m = c->m;
    const sd_hparams *hp = &m->hp;
    const sd_arena *a = &c->arena;
    const int dim = hp->dim, hid = hp->hidden_dim, hd = hp->head_dim;
    const int q_dim = hp->n_heads * hd, kv_dim = hp->n_kv_heads * hd;
    const int half = hp->rope_style == SD_ROPE_HALF;
    const int kv_f16 = c->p.kv_type == SD_TYPE_F16;
    const int32_t *tok = b->token + off;
    sd_status st;

    for (int t = 0; t < nc; t++)
        if (sd_dequant_row(&m->g[SD_W_TOKEN_EMBD], tok[t], a->x + (size_t)t * dim) != 0)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: cannot read token embeddings", m->path);
    for (int t = 0; t < nc; t++) sd_rope_angles(pos[off + t], m->inv_freq, hp->rope_dim, a->rope + (size_t)t * hp->rope_dim);

    for (int l = 0; l < hp->n_layers; l++) {
        const sd_layer *L = &m->layers[l];
        const int pruned = l == hp->n_layers - 1 && n_last < nc;
#define LW(id) (&L->w[(id) - SD_W_LAYER0])
        sd_rmsnorm(a->xb, a->x, LW(SD_W_ATTN_NORM)->data, nc, dim, hp->norm_eps);
        /* One sequence's rows with an F32 cache (decode, verify, prefill): keys and values go
         * straight into their cache rows, which are as contiguous as the scratch rows, instead of
         * being copied there on one thread afterwards (its first touch of those cold lines was a
         * serial cost in every layer; measured: commit 7b6d8a5). */
        float *kn = a->knew, *vn = a->vnew;
        const int direct = !kv_f16 && ng == 1 && gs[0].start == 0 && gs[0].count == nc;
        if (direct) {
            kn = (float *)sd_kv_k_data(c->kv, gs[0].seq, l) + (size_t)gs[0].base * kv_dim;
            vn = (float *)sd_kv_v_data(c->kv, gs[0].seq, l) + (size_t)gs[0].base * kv_dim;
        }
        {
            const sd_tensor *w[3] = {LW(SD_W_ATTN_Q), LW(SD_W_ATTN_K), LW(SD_W_ATTN_V)};
            float *y[3] = {a->q, kn, vn};
            if ((st = mm_group(c, w, y, 3, a->xb, nc)) != SD_OK) return st;
        }
        add_bias(a->q, LW(SD_W_ATTN_Q_B), nc, q_dim);
        add_bias(kn, LW(SD_W_ATTN_K_B), nc, kv_dim);
        add_bias(vn, LW(SD_W_ATTN_V_B), nc, kv_dim);
        if (LW(SD_W_ATTN_Q_NORM)->data) { /* Qwen3: each head normalised before RoPE */
            sd_rmsnorm(a->q, a->q, LW(SD_W_ATTN_Q_NORM)->data, nc * hp->n_heads, hd, hp->norm_eps);
            sd_rmsnorm(kn, kn, LW(SD_W_ATTN_K_NORM)->data, nc * hp->n_kv_heads, hd, hp->norm_eps);
        }
        sd_rope_tokens(a->q, kn, nc, hp->n_heads, hp->n_kv_heads, hd, hp->rope_dim, a->rope, half);
        for (int gi = 0; gi < ng; gi++) {
            const group *g = &gs[gi];
            void *kc = sd_kv_k_data(c->kv, g->seq, l), *vc = sd_kv_v_data(c->kv, g->seq, l);
            const size_t r0 = (size_t)g->base * kv_dim, s0 = (size_t)g->start * kv_dim, cnt = (size_t)g->count * kv_dim;
            if (kv_f16) {
                sd_f32_to_f16_row(a->knew + s0, (uint16_t *)kc + r0, cnt);
                sd_f32_to_f16_row(a->vnew + s0, (uint16_t *)vc + r0, cnt);
            } else if (!direct) {
                memcpy((float *)kc + r0, a->knew + s0, cnt * sizeof(float));
                memcpy((float *)vc + r0, a->vnew + s0, cnt * sizeof(float));
            }
            if (!pruned && (st = attend(c, g, l, g->start, g->count, a->att_out + (size_t)g->start * q_dim)) != SD_OK)
                return st;
        }
        if (pruned) {
            if (!n_last) break; /* no logits wanted: the cache rows were all this layer had to give */
            for (int i = 0, gi = 0; i < n_last; i++) { /* kept rows one at a time: as in a pass of one */
                while (keep[i] >= gs[gi].start + gs[gi].count) gi++;
                if ((st = attend(c, &gs[gi], l, keep[i], 1, a->att_out + (size_t)i * q_dim)) != SD_OK) return st;
                if (keep[i] != i) memcpy(a->x + (size_t)i * dim, a->x + (size_t)keep[i] * dim, (size_t)dim * sizeof(float));
            }
        }
        const int nr = pruned ? n_last : nc; /* rows carried on from here */
        if ((st = mm(c, LW(SD_W_ATTN_OUT), a->att_out, nr, a->xb)) != SD_OK) return st;
        add_inplace(a->x, a->xb, (size_t)nr * dim);

        sd_rmsnorm(a->xb, a->x, LW(SD_W_FFN_NORM)->data, nr, dim, hp->norm_eps);
        {
            const sd_tensor *w[2] = {LW(SD_W_FFN_GATE), LW(SD_W_FFN_UP)};
            float *y[2] = {a->hb, a->hb2};
            if ((st = mm_group(c, w, y, 2, a->xb, nr)) != SD_OK) return st;
        }
        sd_swiglu(a->hb, a->hb2, nr * hid);
        if ((st = mm(c, LW(SD_W_FFN_DOWN), a->hb, nr, a->xb)) != SD_OK) return st;
#undef LW
        add_inplace(a->x, a->xb, (size_t)nr * dim);
        long bad = sd_first_nonfinite(a->x, (size_t)nr * dim);
        if (bad >= 0) {
            const int row = (int)(bad / dim), t = pruned ? keep[row] : row;
            return sd_fail(SD_ERR_NUMERIC,
                           "%s: layer %d produced a non-finite activation (%g) at position %d: the weights or the "
                           "inputs hold NaN/Inf, or the activations overflowed%s",
                           m->path, l, (double)a->x[bad], pos[off + t],
                           kv_f16 ? " (an f16 KV cache holds at most 65504: try --kv-type f32)" : "");
        }
    }
    return SD_OK;
}

/* Logits of the n wanted rows into logits: chunk rows keep[0..n) (NULL: rows 0..n), held in a->x
 * at row keep[i], or at row i where the last layer compacted them. */
static sd_status output_rows(sd_context *c, const int32_t *pos, int off, const int32_t *keep, int compacted, int n,
                             float *logits) {
    const sd_model *m = c->m;
    const sd_hparams *hp = &m->hp;
    const sd_arena *a = &c->arena;
    const int dim = hp->dim;
    sd_status st;
    for (int i = 0; i < n; i++)
        sd_rmsnorm(a->xb + (size_t)i * dim, a->x + (size_t)(keep && !compacted ? keep[i] : i) * dim, m->g[SD_W_OUTPUT_NORM].data, 1,
                   dim, hp->norm_eps);
    if ((st = mm(c, &m->g[SD_W_OUTPUT], a->xb, n, logits)) != SD_OK) return st;
    /* A finite residual stream can still give NaN/Inf logits (output norm or classifier
     * weights holding them, or overflow); samplers must never see those. */
    long bad = sd_first_nonfinite(logits, (size_t)n * hp->vocab_size);
    if (bad >= 0)
        return sd_fail(SD_ERR_NUMERIC,
                       "%s: the output layer produced a non-finite logit (%g) for token %ld of output row %ld (the first "
                       "at position %d): the output norm or classifier weights hold NaN/Inf, or the logits overflowed",
                       m->path, (double)logits[bad], bad % hp->vocab_size, bad / hp->vocab_size, (int)pos[off + (keep ? keep[0] : 0)]);
    return SD_OK;
}

/* Tokens [off, off+nc) of the batch, whose groups are gs[0..ng) (starts relative to off);
 * logits: rows of the chunk's wanted tokens. */
static sd_status forward_chunk(sd_context *c, const bview *b, const int32_t *pos, int off, int nc, const group *gs,
                               int ng, float *logits) {
    sd_status st;

    /* Rows whose logits are wanted. After the last layer's keys and values are cached, only
     * those rows are carried on (attention, output projection, feed-forward): a prefill keeps
     * its last token, a pass without logits none, as llama.cpp does. Each kept row is computed
     * by the same kernels as in a pass of one token, so nothing changes for batched == stepwise
     * (up to SD_SMALL_BATCH tokens an F32 pass already ran those kernels). Trees attend along
     * paths and want every row: they run whole. */
    int n_keep = 0, prune = 1;
    for (int i = 0; i < ng; i++) prune &= !gs[i].tree;
    for (int t = 0; t < nc; t++) n_keep += logits && bv_want(b, off + t);
    prune &= n_keep < nc;
    int32_t *keep = NULL; /* [n_keep]: chunk rows kept, in order; NULL when every row is (decode, verify) */
    if (n_keep && n_keep < nc && !(keep = malloc((size_t)n_keep * sizeof *keep)))
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    for (int t = 0, i = 0; t < nc && keep; t++)
        if (bv_want(b, off + t)) keep[i++] = t;
    st = forward_layers(c, b, pos, off, nc, gs, ng, prune ? n_keep : nc, keep);
    if (st == SD_OK && n_keep) st = output_rows(c, pos, off, keep, prune, n_keep, logits);
    free(keep);
    return st;
}

/* Checks the whole batch and groups it by sequence; positions resolved into p->pos. */
static sd_status plan_batch(const sd_context *c, const bview *b, plan *p) {
    const sd_model *m = c->m;
    const int n = b->n, n_seq = c->p.n_seq;
    memset(p, 0, sizeof *p);
    if (n <= 0) return sd_fail(SD_ERR_INVALID_ARG, "forward: %d tokens", n);
    p->pos = malloc((size_t)n * sizeof *p->pos);
    p->g = malloc(sizeof *p->g * 4);
    p->cap = 4;
    if (!p->pos || !p->g) return sd_fail(SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->hp.vocab_size)
            return sd_fail(SD_ERR_INVALID_ARG, "forward: token id %d at %d outside vocabulary of %d", (int)b->token[i], i,
                           m->hp.vocab_size);
        const int s = bv_seq(b, i);
        if (s < 0 || s >= n_seq)
            return sd_fail(SD_ERR_INVALID_ARG, "forward: batch token %d names sequence %d; the context has %d", i, s, n_seq);
        if (i == 0 || s != bv_seq(b, i - 1)) {
            for (int k = 0; k < p->n; k++)
                if (p->g[k].seq == s)
                    return sd_fail(SD_ERR_INVALID_ARG,
                                   "forward: sequence %d appears in two separate runs of the batch (at %d and %d): "
                                   "each sequence's tokens must be contiguous", s, p->g[k].start, i);
            if (p->n == p->cap) {
                group *ng = realloc(p->g, sizeof *ng * (size_t)(p->cap *= 2));
                if (!ng) return sd_fail(SD_ERR_NOMEM, "out of memory");
                p->g = ng;
            }
            group g = {s, i, 0, sd_kv_len(c->kv, s), 0, NULL, NULL};
            p->g[p->n++] = g;
        }
        group *g = &p->g[p->n - 1];
        const int par = b->parent ? b->parent[i] : (i > g->start ? i - 1 : -1);
        int want_pos;
        if (par < 0) {
            want_pos = g->base;
        } else {
            if (par < g->start || par >= i)
                return sd_fail(SD_ERR_INVALID_ARG, "forward: batch token %d has parent %d, not an earlier token of its sequence %d",
                               i, par, s);
            want_pos = p->pos[par] + 1;
        }
        if (par != (i > g->start ? i - 1 : -1)) g->tree = 1;
        if (b->pos && b->pos[i] != want_pos)
            return sd_fail(SD_ERR_INVALID_ARG, "forward: batch token %d of sequence %d is at position %d, expected %d (%s)", i,
                           s, (int)b->pos[i], want_pos, par < 0 ? "the sequence's cached length" : "its parent's + 1");
        p->pos[i] = want_pos;
        g->count++;
    }
    size_t pool = 0;
    for (int k = 0; k < p->n; k++) {
        group *g = &p->g[k];
        if (g->count > c->p.n_ctx - g->base)
            return sd_fail(SD_ERR_CONTEXT_FULL, "context full: %d tokens at position %d exceed the context of %d%s", g->count,
                           g->base, c->p.n_ctx, n_seq > 1 ? " (per sequence)" : "");
        if (g->tree) pool += (size_t)g->count * (size_t)(g->count + 1) / 2;
    }
    if (!pool) return SD_OK;
    if (n > c->p.n_batch)
        return sd_fail(SD_ERR_INVALID_ARG, "forward: a batch holding a tree must fit in one pass of %d tokens (it has %d)",
                       c->p.n_batch, n);
    if (c->p.kv_type != SD_TYPE_F32)
        return sd_fail(SD_ERR_UNSUPPORTED, "forward: tree batches need an f32 KV cache");
    if (!(p->pool = malloc(pool * sizeof *p->pool))) return sd_fail(SD_ERR_NOMEM, "out of memory");
    int32_t *cur = p->pool;
    for (int k = 0; k < p->n; k++) {
        group *g = &p->g[k];
        if (!g->tree) continue;
        if (!(g->path_off = malloc((size_t)(g->count + 1) * sizeof *g->path_off)))
            return sd_fail(SD_ERR_NOMEM, "out of memory");
        g->path = cur;
        for (int j = 0; j < g->count; j++) { /* the parent's path, then the token itself */
            const int i = g->start + j, par = b->parent[i];
            g->path_off[j] = (int32_t)(cur - g->path);
            if (par >= 0) {
                const int pj = par - g->start;
                const int32_t len = g->path_off[pj + 1] - g->path_off[pj];
                memcpy(cur, g->path + g->path_off[pj], (size_t)len * sizeof *cur);
                cur += len;
            }
            *cur++ = j;
        }
        g->path_off[g->count] = (int32_t)(cur - g->path);
    }
    return SD_OK;
}

static sd_status decode_view(sd_context *c, const bview *b, float *logits) {
    plan p;
    sd_status st = plan_batch(c, b, &p);
    if (st != SD_OK) {
        plan_free(&p);
        return st;
    }
    sd_kernels_enter(c->p.n_threads);
    const size_t V = (size_t)c->m->hp.vocab_size;
    const int nb = c->arena.n_batch;
    group chunk_groups[64], *cg = chunk_groups;
    if (p.n > 64 && !(cg = malloc(sizeof *cg * (size_t)p.n))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
    size_t out_rows = 0;
    for (int off = 0; off < b->n && st == SD_OK; off += nb) {
        const int nc = b->n - off < nb ? b->n - off : nb;
        /* The groups' parts inside [off, off+nc), each after what its sequence holds now. */
        int ng = 0;
        for (int k = 0; k < p.n; k++) {
            const group *g = &p.g[k];
            const int s = g->start > off ? g->start : off, e = g->start + g->count < off + nc ? g->start + g->count : off + nc;
            if (s >= e) continue;
            group part = *g;
            part.start = s - off;
            part.count = e - s;
            part.base = sd_kv_len(c->kv, g->seq);
            cg[ng++] = part;
        }
        st = forward_chunk(c, b, p.pos, off, nc, cg, ng, logits ? logits + out_rows * V : NULL);
        for (int k = 0; k < ng && st == SD_OK; k++) st = sd_kv_advance(c->kv, cg[k].seq, cg[k].count);
        for (int t = 0; t < nc; t++) out_rows += bv_want(b, off + t);
    }
    if (st != SD_OK) /* no sequence changes: rows past each length are scratch */
        for (int k = 0; k < p.n; k++) sd_kv_truncate(c->kv, p.g[k].seq, p.g[k].base);
    if (cg != chunk_groups) free(cg);
    plan_free(&p);
    return st;
}

sd_status sd_context_decode(sd_context *c, const sd_batch *b, float *logits) {
    if (!c || !b) return sd_fail(SD_ERR_INVALID_ARG, "decode: NULL argument");
    bview v = {b->n, b->token, b->pos, b->seq, b->parent, b->logits, 0, 0};
    return decode_view(c, &v, logits);
}

sd_status sd_context_forward(sd_context *c, int seq, const int32_t *tokens, int n, float *logits, int all_logits) {
    if (!c || (!tokens && n > 0)) return sd_fail(SD_ERR_INVALID_ARG, "forward: NULL argument");
    bview v = {n, tokens, NULL, NULL, NULL, NULL, seq, logits ? (all_logits ? 2 : 1) : 0};
    return decode_view(c, &v, logits);
}
