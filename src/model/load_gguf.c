/* GGUF "llama" models: hyperparameters from metadata, tensor views into the mapped file,
 * each shape checked against the hyperparameters, tokenizer from metadata. */
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "model/model_internal.h"

/* Finds a tensor, checks type support and shape {cols, rows} (rows == 0 for a vector),
 * and fills a view. required == 0 lets it be absent (*found = 0). */
static sd_status view(sd_model *m, const char *name, int64_t cols, int64_t rows, int required,
                      sd_tensor *out, int *found) {
    const sd_gguf_tensor *t = sd_gguf_find_tensor(m->gguf, name);
    if (found) *found = t != NULL;
    if (!t) {
        if (!required) return SD_OK;
        return sd_fail(SD_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
    }
    const sd_type_traits *ti = sd_type_info(t->type);
    if (!ti) return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %s has unknown type %u", m->path, name, t->type);
    if (!ti->supported)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which specdec cannot compute with yet",
                       m->path, name, ti->name);
    int want_dims = rows ? 2 : 1;
    int ok = t->ne[0] == (uint64_t)cols && t->ne[1] == (uint64_t)(rows ? rows : 1) && t->ne[2] == 1 &&
             t->ne[3] == 1 && (int)t->n_dims <= want_dims;
    if (!ok) {
        if (rows)
            return sd_fail(SD_ERR_FORMAT,
                           "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld] from the hyperparameters",
                           m->path, name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)cols,
                           (long long)rows);
        return sd_fail(SD_ERR_FORMAT,
                       "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%lld] from the hyperparameters",
                       m->path, name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)cols);
    }
    /* Weights are read in place through float / uint16 pointers, so the data must sit on
     * its element alignment; general.alignment 1 or 2 (or a misaligned caller buffer)
     * could otherwise place it anywhere. */
    const uintptr_t elem_align = t->type == SD_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % elem_align != 0)
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "%s: tensor %s data (offset %llu, general.alignment %llu) is not %u-byte aligned",
                       m->path, name, (unsigned long long)t->offset,
                       (unsigned long long)sd_gguf_alignment(m->gguf), (unsigned)elem_align);
    out->type = (sd_type)t->type;
    out->cols = cols;
    out->rows = rows ? rows : 1;
    out->row_bytes = sd_type_row_bytes(t->type, cols);
    if (out->row_bytes == 0)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: row of %lld does not divide into %s blocks",
                       m->path, name, (long long)cols, ti->name);
    out->data = t->data;
    m->n_tensors++;
    m->type_counts[t->type]++;
    m->weight_bytes += (size_t)t->nbytes;
    return SD_OK;
}

/* Norm vectors are used as F32; other storage types are converted once into m->owned. */
static sd_status norm_vec(sd_model *m, const char *name, int dim, float **owned_cur,
                          const float **out) {
    sd_tensor t = {0};
    sd_status st = view(m, name, dim, 0, 1, &t, NULL);
    if (st != SD_OK) return st;
    if (t.type == SD_TYPE_F32) {
        *out = (const float *)t.data;
        return SD_OK;
    }
    float *dst = *owned_cur;
    if (t.type == SD_TYPE_F16) {
        const uint16_t *h = t.data;
        for (int i = 0; i < dim; i++) dst[i] = sd_fp16_to_fp32(h[i]);
    } else {
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: norm tensor %s must be f32 or f16", m->path, name);
    }
    *owned_cur += dim;
    *out = dst;
    return SD_OK;
}

static sd_status get_u32_opt(const sd_gguf *g, const char *key, uint32_t def, uint32_t *out) {
    if (!sd_gguf_find_kv(g, key)) {
        *out = def;
        return SD_OK;
    }
    return sd_gguf_get_u32(g, key, out);
}

static sd_status get_f32_opt(const sd_gguf *g, const char *key, float def, float *out) {
    if (!sd_gguf_find_kv(g, key)) {
        *out = def;
        return SD_OK;
    }
    return sd_gguf_get_f32(g, key, out);
}

/* Caps every dimension so products of a few of them cannot overflow 64 bits. */
#define SD_MAX_DIM (1u << 24)

sd_status sd_model_load_gguf(sd_model *m, const void *buf, size_t len, const sd_model_params *p) {
    sd_status st = sd_gguf_parse(buf, len, m->path, &m->gguf);
    if (st != SD_OK) return st;
    const sd_gguf *g = m->gguf;

    sd_str arch;
    if (sd_gguf_get_str(g, "general.architecture", &arch) != SD_OK)
        return sd_fail(SD_ERR_FORMAT, "%s: missing general.architecture", m->path);
    if (!sd_str_eq(arch, "llama")) {
        int n = arch.len > 64 ? 64 : (int)arch.len;
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: unknown architecture '%.*s' (specdec runs 'llama')",
                       m->path, n, arch.ptr);
    }
    uint32_t dim, nl, nh, nkv, hid, ctx, rdim;
    float theta, eps;
    if ((st = sd_gguf_get_u32(g, "llama.embedding_length", &dim)) != SD_OK ||
        (st = sd_gguf_get_u32(g, "llama.block_count", &nl)) != SD_OK ||
        (st = sd_gguf_get_u32(g, "llama.feed_forward_length", &hid)) != SD_OK ||
        (st = sd_gguf_get_u32(g, "llama.attention.head_count", &nh)) != SD_OK ||
        (st = get_u32_opt(g, "llama.attention.head_count_kv", nh, &nkv)) != SD_OK ||
        (st = get_u32_opt(g, "llama.context_length", 2048, &ctx)) != SD_OK ||
        (st = get_f32_opt(g, "llama.rope.freq_base", 10000.0f, &theta)) != SD_OK ||
        (st = get_f32_opt(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f, &eps)) != SD_OK)
        return st;
    if (dim == 0 || dim > SD_MAX_DIM || nl == 0 || nl > 4096 || nh == 0 || nh > dim || nkv == 0 ||
        hid == 0 || hid > SD_MAX_DIM || ctx == 0 || ctx > SD_MAX_DIM)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: implausible hyperparameters embedding_length=%u block_count=%u head_count=%u "
                       "head_count_kv=%u feed_forward_length=%u context_length=%u",
                       m->path, dim, nl, nh, nkv, hid, ctx);
    if (dim % nh != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: llama.attention.head_count=%u does not divide llama.embedding_length=%u",
                       m->path, nh, dim);
    if (nh % nkv != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: llama.attention.head_count_kv=%u does not divide head_count=%u",
                       m->path, nkv, nh);
    if ((st = get_u32_opt(g, "llama.rope.dimension_count", dim / nh, &rdim)) != SD_OK) return st;

    const sd_gguf_tensor *emb = sd_gguf_find_tensor(g, "token_embd.weight");
    if (!emb) return sd_fail(SD_ERR_FORMAT, "%s: missing tensor token_embd.weight", m->path);
    if (emb->ne[1] == 0 || emb->ne[1] > SD_MAX_DIM)
        return sd_fail(SD_ERR_FORMAT, "%s: token_embd.weight has implausible vocab size %llu", m->path,
                       (unsigned long long)emb->ne[1]);

    sd_hparams *hp = &m->hp;
    hp->dim = (int)dim;
    hp->n_layers = (int)nl;
    hp->n_heads = (int)nh;
    hp->n_kv_heads = (int)nkv;
    hp->head_dim = (int)(dim / nh);
    hp->hidden_dim = (int)hid;
    hp->vocab_size = (int)emb->ne[1];
    hp->ctx_len = (int)ctx;
    hp->rope_dim = (int)rdim;
    hp->rope_theta = theta;
    hp->norm_eps = eps;
    hp->rope_style = SD_ROPE_INTERLEAVED;
    const int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;

    /* Every norm vector ([dim], f32 or f16, required) is stored in the file, so a real file
     * holds at least half the bytes of their f32 copies; checking that first keeps a hostile
     * header (4096 layers of 2^24) from allocating gigabytes before any tensor is looked at. */
    const uint64_t owned_bytes = ((uint64_t)nl * 2 + 1) * dim * sizeof(float);
    if (owned_bytes / 2 > len)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: block_count=%u and embedding_length=%u imply %llu bytes of norm weights, more "
                       "than the file's %zu bytes",
                       m->path, nl, dim, (unsigned long long)(owned_bytes / 2), len);
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    m->owned = malloc((size_t)owned_bytes);
    if (!m->layers || !m->owned) return sd_fail(SD_ERR_NOMEM, "out of memory");
    float *owned_cur = m->owned;

    if ((st = view(m, "token_embd.weight", dim, hp->vocab_size, 1, &m->tok_embd, NULL)) != SD_OK) return st;
    int has_out = 0;
    if ((st = view(m, "output.weight", dim, hp->vocab_size, 0, &m->output, &has_out)) != SD_OK) return st;
    if (!has_out) m->output = m->tok_embd; /* tied classifier */
    if ((st = norm_vec(m, "output_norm.weight", (int)dim, &owned_cur, &m->output_norm)) != SD_OK) return st;

    char name[96];
    for (uint32_t l = 0; l < nl; l++) {
        sd_layer *L = &m->layers[l];
#define W(suffix, cols, rows, dst)                                                   \
    snprintf(name, sizeof name, "blk.%u." suffix ".weight", l);                      \
    if ((st = view(m, name, cols, rows, 1, dst, NULL)) != SD_OK) return st;
        W("attn_q", dim, q_dim, &L->wq)
        W("attn_k", dim, kv_dim, &L->wk)
        W("attn_v", dim, kv_dim, &L->wv)
        W("attn_output", q_dim, dim, &L->wo)
        W("ffn_gate", dim, hid, &L->w1)
        W("ffn_down", hid, dim, &L->w2)
        W("ffn_up", dim, hid, &L->w3)
#undef W
        snprintf(name, sizeof name, "blk.%u.attn_norm.weight", l);
        if ((st = norm_vec(m, name, (int)dim, &owned_cur, &L->attn_norm)) != SD_OK) return st;
        snprintf(name, sizeof name, "blk.%u.ffn_norm.weight", l);
        if ((st = norm_vec(m, name, (int)dim, &owned_cur, &L->ffn_norm)) != SD_OK) return st;
    }

    /* Tensors may legally point at the same bytes, but no real file does: with aliasing, a
     * small file could describe a model whose forward pass streams gigabytes. */
    if (m->weight_bytes > len)
        return sd_fail(SD_ERR_FORMAT, "%s: the weight tensors total %zu bytes, more than the file's %zu (tensor data overlaps)",
                       m->path, m->weight_bytes, len);

    if (sd_gguf_find_kv(g, "tokenizer.ggml.model")) {
        st = sd_tokenizer_from_gguf(g, m->path, &m->tok);
    } else if (p && p->tokenizer_path) {
        st = sd_tokenizer_load_llama2c(p->tokenizer_path, hp->vocab_size, &m->tok);
    } else {
        st = sd_fail(SD_ERR_FORMAT, "%s: no tokenizer in the GGUF metadata (pass a tokenizer.bin with -z)",
                     m->path);
    }
    return st;
}
