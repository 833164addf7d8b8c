/* Any loaded model (GGUF, llama2.c, ...) as a llama.cpp GGUF: metadata, tokenizer and every
 * tensor re-typed through sd_quantize_row; and in-memory quantised copies of a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "model/writer_internal.h"
#include "specdec/convert.h"

/* general.name: the file name without directory and extension. */
static void model_name(const char *path, char *buf, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, cap, "%s", *b ? b : "specdec");
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf) *dot = 0;
}

static int is_quantised(sd_type t) { return t != SD_TYPE_F32 && t != SD_TYPE_F16 && t != SD_TYPE_BF16; }

sd_status sd_writer_set_llama(sd_gguf_writer *w, const char *name, sd_type t, const sd_hparams *hp,
                              const sd_tokenizer *tok) {
    sd_status st;
    if ((st = sd_gguf_set_str(w, "general.architecture", "llama")) ||
        (st = sd_gguf_set_str(w, "general.name", name)) ||
        (st = sd_gguf_set_u32(w, "general.file_type", sd_quant_file_type(t))) ||
        (is_quantised(t) && (st = sd_gguf_set_u32(w, "general.quantization_version", 2))) ||
        (st = sd_gguf_set_u32(w, "llama.vocab_size", (uint32_t)hp->vocab_size)) ||
        (st = sd_gguf_set_u32(w, "llama.context_length", (uint32_t)hp->ctx_len)) ||
        (st = sd_gguf_set_u32(w, "llama.embedding_length", (uint32_t)hp->dim)) ||
        (st = sd_gguf_set_u32(w, "llama.block_count", (uint32_t)hp->n_layers)) ||
        (st = sd_gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)hp->hidden_dim)) ||
        (st = sd_gguf_set_u32(w, "llama.attention.head_count", (uint32_t)hp->n_heads)) ||
        (st = sd_gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_kv_heads)) ||
        (st = sd_gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hp->rope_dim)) ||
        (st = sd_gguf_set_f32(w, "llama.rope.freq_base", hp->rope_theta)) ||
        (st = sd_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->norm_eps)))
        return st;
    if (!tok) return sd_fail(SD_ERR_INVALID_ARG, "%s: the model has no tokenizer to write", name);
    return sd_tokenizer_write_gguf(tok, w);
}

static sd_status add_metadata(const sd_model *m, sd_type t, sd_gguf_writer *w) {
    char name[256];
    model_name(m->path, name, sizeof name);
    if (!m->tok) return sd_fail(SD_ERR_INVALID_ARG, "%s: the model has no tokenizer to write", m->path);
    return sd_writer_set_llama(w, name, t, &m->hp, m->tok);
}

int64_t sd_writer_rope_half_row(int64_t r, int heads, int head_dim, int rope_dim) {
    if (!heads) return r;
    const int64_t h = r / head_dim, i = r % head_dim;
    if (i >= rope_dim) return r;
    return h * head_dim + (i % 2) * (rope_dim / 2) + i / 2;
}

/* v (rows x cols, any readable type) as `type` into dst (rows * sd_type_row_bytes), rows
 * permuted for GGUF when heads != 0; a view already in `type` is copied byte for byte. */
static sd_status quantize_view(const sd_model *m, const char *name, const sd_tensor *v, sd_type type, int heads,
                               uint8_t *dst) {
    const int64_t cols = v->cols;
    const size_t rb = sd_type_row_bytes(type, cols);
    float *row = malloc((size_t)cols * sizeof(float));
    if (!row) return sd_fail(SD_ERR_NOMEM, "%s: no memory to convert tensor %s", m->path, name);
    sd_status st = SD_OK;
    for (int64_t r = 0; r < v->rows && st == SD_OK; r++) {
        const int64_t s = sd_writer_rope_half_row(r, heads, m->hp.head_dim, m->hp.rope_dim);
        if (v->type == type) { /* already in the wanted type: the bytes as they are */
            memcpy(dst + (size_t)r * rb, (const uint8_t *)v->data + (size_t)s * v->row_bytes, rb);
            continue;
        }
        if (sd_dequant_row(v, s, row) != 0) {
            const sd_type_traits *ti = sd_type_info(v->type);
            st = sd_fail(SD_ERR_UNSUPPORTED, "%s: cannot read tensor %s of type %s", m->path, name,
                         ti ? ti->name : "?");
            break;
        }
        st = sd_quantize_row(type, row, dst + (size_t)r * rb, cols);
    }
    free(row);
    return st;
}

/* Bytes of v stored as type; 0 when it cannot be (rows do not divide, or overflow). */
static size_t stored_bytes(const sd_tensor *v, sd_type type) {
    const size_t rb = sd_type_row_bytes(type, v->cols);
    if (rb == 0 || v->rows <= 0 || rb > SIZE_MAX / (size_t)v->rows) return 0;
    return rb * (size_t)v->rows;
}

static sd_status convert_matrix(const sd_model *m, const char *name, const sd_tensor *v, sd_type type,
                                int heads, sd_gguf_writer *w) {
    const size_t bytes = stored_bytes(v, type);
    if (!bytes)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor %s [%lld x %lld] cannot be stored as %s", m->path, name,
                       (long long)v->rows, (long long)v->cols, sd_type_info(type)->name);
    uint8_t *dst = malloc(bytes);
    if (!dst) return sd_fail(SD_ERR_NOMEM, "%s: no memory to convert tensor %s (%zu bytes)", m->path, name, bytes);
    sd_status st = quantize_view(m, name, v, type, heads, dst);
    if (st == SD_OK) {
        const uint64_t ne[2] = {(uint64_t)v->cols, (uint64_t)v->rows};
        st = sd_gguf_add_tensor(w, name, type, 2, ne, dst, bytes);
    }
    free(dst);
    return st;
}

sd_status sd_model_to_gguf(const sd_model *m, const sd_convert_params *p, sd_gguf_writer **out) {
    if (!m || !p || !out) return sd_fail(SD_ERR_INVALID_ARG, "convert: NULL argument");
    *out = NULL;
    const sd_type_traits *ti = sd_type_info(p->type);
    if (!ti || !sd_quant_can_write(p->type))
        return sd_fail(SD_ERR_UNSUPPORTED, "convert: cannot write tensors of type %s (f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q6_K)",
                       ti ? ti->name : "unknown");
    const sd_hparams *hp = &m->hp;
    if (hp->rope_style == SD_ROPE_HALF && hp->rope_dim % 2)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: odd RoPE dimension %d cannot be reordered for GGUF", m->path, hp->rope_dim);
    sd_gguf_writer *w = sd_gguf_writer_create();
    if (!w) return sd_fail(SD_ERR_NOMEM, "convert: no memory for the writer");
    sd_status st = add_metadata(m, p->type, w);
    const int n = sd_model_n_tensors(m);
    char name[96];
    for (int i = 0; i < n && st == SD_OK; i++) {
        sd_tensor v;
        if ((st = sd_model_tensor(m, i, name, sizeof name, &v)) != SD_OK) break;
        const int norm = v.rows == 1 && strstr(name, "norm") != NULL;
        const sd_type type = norm ? SD_TYPE_F32 : sd_quant_fallback(p->type, v.cols);
        if (p->progress) p->progress(i, n, name, type, p->progress_user);
        if (norm) { /* norms are F32 views (converted at load when stored otherwise) */
            const uint64_t ne[1] = {(uint64_t)v.cols};
            st = sd_gguf_add_tensor(w, name, SD_TYPE_F32, 1, ne, v.data, (size_t)v.cols * sizeof(float));
            continue;
        }
        int heads = 0;
        if (hp->rope_style == SD_ROPE_HALF) {
            if (strstr(name, ".attn_q.")) heads = hp->n_heads;
            else if (strstr(name, ".attn_k.")) heads = hp->n_kv_heads;
        }
        st = convert_matrix(m, name, &v, type, heads, w);
    }
    if (st != SD_OK) {
        sd_gguf_writer_free(w);
        return st;
    }
    *out = w;
    return SD_OK;
}

/* The copy is built directly (no GGUF round trip): every matrix requantised into one owned
 * buffer, norms copied, hyperparameters (RoPE style included) as they are, and the source's
 * tokenizer borrowed, so any model specdec loads can be quantised, whatever its vocabulary. */
sd_status sd_model_quantize(const sd_model *src, sd_type t, const sd_model_params *p, sd_model **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "quantize: NULL output");
    *out = NULL;
    if (!src) return sd_fail(SD_ERR_INVALID_ARG, "quantize: NULL model");
    const sd_type_traits *ti = sd_type_info(t);
    if (!ti || !sd_quant_can_write(t))
        return sd_fail(SD_ERR_UNSUPPORTED, "quantize: cannot write tensors of type %s (f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q6_K)",
                       ti ? ti->name : "unknown");
    sd_model_params dp = sd_model_default_params();
    if (!p) p = &dp;
    const int n = sd_model_n_tensors(src), nl = src->hp.n_layers, dim = src->hp.dim;
    const int tied = src->output.data == src->tok_embd.data;
    sd_model *m = calloc(1, sizeof *m);
    char path[512];
    snprintf(path, sizeof path, "%s (%s, in memory)", src->path, ti->name);
    if (!m || !(m->path = strdup(path)) || !(m->layers = calloc((size_t)nl, sizeof *m->layers)) ||
        !(m->owned = malloc(((size_t)nl * 2 + 1) * dim * sizeof(float)))) {
        sd_model_free(m);
        return sd_fail(SD_ERR_NOMEM, "quantize: out of memory");
    }
    m->hp = src->hp;
    m->format = src->format;
    m->tok = src->tok;
    m->tok_borrowed = 1;
    /* the tokenizer file too, so a llama2.c draft of another file can still fall back to it */
    if (src->tok_path && !(m->tok_path = strdup(src->tok_path))) {
        sd_model_free(m);
        return sd_fail(SD_ERR_NOMEM, "quantize: out of memory");
    }
    /* Pass 1: sizes of the matrices in their stored types, one buffer for all of them. */
    size_t total = 0;
    char name[96];
    sd_tensor v;
    sd_status st = SD_OK;
    for (int i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_model_tensor(src, i, name, sizeof name, &v)) != SD_OK) break;
        if (strstr(name, "norm")) continue;
        const size_t b = stored_bytes(&v, sd_quant_fallback(t, v.cols));
        total += (b + 63) & ~(size_t)63;
    }
    uint8_t *buf = st == SD_OK ? aligned_alloc(64, total ? total : 64) : NULL;
    if (st == SD_OK && !buf) st = sd_fail(SD_ERR_NOMEM, "quantize: no memory for %zu bytes of weights", total);
    m->owned_image = buf;
    /* Pass 2: fill. */
    size_t off = 0;
    float *norms = m->owned;
    for (int i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_model_tensor(src, i, name, sizeof name, &v)) != SD_OK) break;
        const int l = i >= 1 && i <= 9 * nl ? (i - 1) / 9 : -1, k = l >= 0 ? (i - 1) % 9 : -1;
        if (strstr(name, "norm")) {
            memcpy(norms, v.data, (size_t)dim * sizeof(float));
            const float **dst = k == 0 ? &m->layers[l].attn_norm : k == 5 ? &m->layers[l].ffn_norm : &m->output_norm;
            *dst = norms;
            norms += dim;
            m->n_tensors++;
            m->type_counts[SD_TYPE_F32]++;
            m->weight_bytes += (size_t)dim * sizeof(float);
            continue;
        }
        const sd_type type = sd_quant_fallback(t, v.cols);
        sd_tensor q = {type, v.rows, v.cols, sd_type_row_bytes(type, v.cols), buf + off, NULL};
        if ((st = quantize_view(src, name, &v, type, 0, buf + off)) != SD_OK) break;
        off += (stored_bytes(&v, type) + 63) & ~(size_t)63;
        sd_tensor *slots[9] = {NULL};
        if (l >= 0) {
            sd_layer *L = &m->layers[l];
            sd_tensor *ls[9] = {NULL, &L->wq, &L->wk, &L->wv, &L->wo, NULL, &L->w1, &L->w2, &L->w3};
            memcpy(slots, ls, sizeof slots);
        }
        sd_tensor *dst = l >= 0 ? slots[k] : i == 0 ? &m->tok_embd : &m->output;
        *dst = q;
        m->n_tensors++;
        m->type_counts[type]++;
        m->weight_bytes += stored_bytes(&v, type);
    }
    if (st == SD_OK && tied) m->output = m->tok_embd;
    if (st == SD_OK) st = sd_model_finish(m, p);
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}
