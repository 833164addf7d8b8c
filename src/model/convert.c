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

sd_status sd_writer_set_meta(sd_gguf_writer *w, const char *arch, const char *name, sd_type t, const sd_hparams *hp,
                             const sd_tokenizer *tok) {
    char k[12][96];
    static const char *const suffix[12] = {"vocab_size", "context_length", "embedding_length", "block_count",
                                           "feed_forward_length", "attention.head_count", "attention.head_count_kv",
                                           "rope.dimension_count", "attention.key_length", "attention.value_length",
                                           "rope.freq_base", "attention.layer_norm_rms_epsilon"};
    for (int i = 0; i < 12; i++) snprintf(k[i], sizeof k[i], "%s.%s", arch, suffix[i]);
    const uint32_t u[10] = {(uint32_t)hp->vocab_size, (uint32_t)hp->ctx_len, (uint32_t)hp->dim, (uint32_t)hp->n_layers,
                            (uint32_t)hp->hidden_dim, (uint32_t)hp->n_heads, (uint32_t)hp->n_kv_heads,
                            (uint32_t)hp->rope_dim, (uint32_t)hp->head_dim, (uint32_t)hp->head_dim};
    /* key/value_length only where the head size is not the embedding split across the heads */
    const int n_u = hp->head_dim * hp->n_heads == hp->dim ? 8 : 10;
    sd_status st;
    if ((st = sd_gguf_set_str(w, "general.architecture", arch)) || (st = sd_gguf_set_str(w, "general.name", name)) ||
        (st = sd_gguf_set_u32(w, "general.file_type", sd_quant_file_type(t))) ||
        (is_quantised(t) && (st = sd_gguf_set_u32(w, "general.quantization_version", 2))))
        return st;
    for (int i = 0; i < n_u; i++)
        if ((st = sd_gguf_set_u32(w, k[i], u[i])) != SD_OK) return st;
    if ((st = sd_gguf_set_f32(w, k[10], hp->rope_theta)) || (st = sd_gguf_set_f32(w, k[11], hp->norm_eps))) return st;
    return tok ? sd_tokenizer_write_gguf(tok, w) : SD_OK;
}

static sd_status add_metadata(const sd_model *m, sd_type t, sd_gguf_writer *w) {
    char name[256];
    model_name(m->path, name, sizeof name);
    if (!m->tok) return sd_fail(SD_ERR_INVALID_ARG, "%s: the model has no tokenizer to write", m->path);
    return sd_writer_set_meta(w, m->arch->name, name, t, &m->hp, m->tok);
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
    /* HF's rotate-half q/k become the family's GGUF pairing (llama: interleaved) by reordering the
     * dims of each head, as llama.cpp's converter does; so do everything indexed by them. */
    const int permute = hp->rope_style != m->arch->gguf_rope;
    if (permute && hp->rope_style != SD_ROPE_HALF)
        st = sd_fail(SD_ERR_UNSUPPORTED, "%s: interleaved RoPE cannot be written as a rotate-half family", m->path);
    char name[96];
    for (int i = 0; i < n && st == SD_OK; i++) {
        sd_tensor v;
        sd_weight wid;
        int layer;
        if ((st = sd_model_tensor(m, i, name, sizeof name, &v)) != SD_OK) break;
        sd_model_weight_at(m, i, &wid, &layer);
        int heads = 0;
        if (permute) {
            if (wid == SD_W_ATTN_Q || wid == SD_W_ATTN_Q_B) heads = hp->n_heads;
            else if (wid == SD_W_ATTN_K || wid == SD_W_ATTN_K_B) heads = hp->n_kv_heads;
            else if (wid == SD_W_ATTN_Q_NORM || wid == SD_W_ATTN_K_NORM) heads = 1;
        }
        if (sd_weight_is_vector(wid)) { /* F32 views (converted at load when stored otherwise) */
            const sd_type type = SD_TYPE_F32;
            if (p->progress) p->progress(i, n, name, type, p->progress_user);
            float *buf = malloc((size_t)v.cols * sizeof(float));
            if (!buf) {
                st = sd_fail(SD_ERR_NOMEM, "convert: out of memory");
                break;
            }
            const float *src = v.data;
            for (int64_t c = 0; c < v.cols; c++) buf[c] = src[sd_writer_rope_half_row(c, heads, hp->head_dim, hp->rope_dim)];
            const uint64_t ne[1] = {(uint64_t)v.cols};
            st = sd_gguf_add_tensor(w, name, SD_TYPE_F32, 1, ne, buf, (size_t)v.cols * sizeof(float));
            free(buf);
            continue;
        }
        const sd_type type = sd_quant_fallback(p->type, v.cols);
        if (p->progress) p->progress(i, n, name, type, p->progress_user);
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
sd_status sd_model_quantize(const sd_model *src, sd_type t, sd_model **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "quantize: NULL output");
    *out = NULL;
    if (!src) return sd_fail(SD_ERR_INVALID_ARG, "quantize: NULL model");
    const sd_type_traits *ti = sd_type_info(t);
    if (!ti || !sd_quant_can_write(t))
        return sd_fail(SD_ERR_UNSUPPORTED, "quantize: cannot write tensors of type %s (f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q6_K)",
                       ti ? ti->name : "unknown");
    const int n = sd_model_n_tensors(src), nl = src->hp.n_layers;
    sd_model *m = calloc(1, sizeof *m);
    char path[512];
    snprintf(path, sizeof path, "%s (%s, in memory)", src->path, ti->name);
    if (!m || !(m->path = strdup(path)) || !(m->layers = calloc((size_t)nl, sizeof *m->layers))) {
        sd_model_free(m);
        return sd_fail(SD_ERR_NOMEM, "quantize: out of memory");
    }
    m->hp = src->hp;
    m->arch = src->arch;
    m->format = src->format;
    m->tok = src->tok;
    m->tok_borrowed = 1;
    m->tied = src->tied;
    /* the tokenizer file too, so a llama2.c draft of another file can still fall back to it */
    if (src->tok_path && !(m->tok_path = strdup(src->tok_path))) {
        sd_model_free(m);
        return sd_fail(SD_ERR_NOMEM, "quantize: out of memory");
    }
    /* Pass 1: bytes of every weight in its stored type (vectors as F32), one buffer for all. */
    size_t total = 0;
    char name[96];
    sd_tensor v;
    sd_weight wid;
    int layer;
    sd_status st = SD_OK;
    for (int i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_model_tensor(src, i, name, sizeof name, &v)) != SD_OK) break;
        sd_model_weight_at(src, i, &wid, &layer);
        const size_t b = sd_weight_is_vector(wid) ? (size_t)v.cols * sizeof(float)
                                                  : stored_bytes(&v, sd_quant_fallback(t, v.cols));
        total += (b + 63) & ~(size_t)63;
    }
    uint8_t *buf = st == SD_OK ? aligned_alloc(64, total ? total : 64) : NULL;
    if (st == SD_OK && !buf) st = sd_fail(SD_ERR_NOMEM, "quantize: no memory for %zu bytes of weights", total);
    m->owned_image = buf;
    /* Pass 2: fill; every weight the source has (biases and norms included) is carried over. */
    size_t off = 0;
    for (int i = 0; i < n && st == SD_OK; i++) {
        if ((st = sd_model_tensor(src, i, name, sizeof name, &v)) != SD_OK) break;
        sd_model_weight_at(src, i, &wid, &layer);
        sd_tensor *dst = sd_model_w_mut(m, layer, wid);
        if (sd_weight_is_vector(wid)) {
            memcpy(buf + off, v.data, (size_t)v.cols * sizeof(float));
            *dst = v;
            dst->data = buf + off;
            dst->packed = NULL;
            off += ((size_t)v.cols * sizeof(float) + 63) & ~(size_t)63;
            sd_model_count(m, (size_t)v.cols * sizeof(float), SD_TYPE_F32);
            continue;
        }
        const sd_type type = sd_quant_fallback(t, v.cols);
        sd_tensor q = {type, v.rows, v.cols, sd_type_row_bytes(type, v.cols), buf + off, NULL};
        if ((st = quantize_view(src, name, &v, type, 0, buf + off)) != SD_OK) break;
        off += (stored_bytes(&v, type) + 63) & ~(size_t)63;
        *dst = q;
        sd_model_count(m, stored_bytes(&v, type), type);
    }
    if (st == SD_OK && m->tied) m->g[SD_W_OUTPUT] = m->g[SD_W_TOKEN_EMBD];
    if (st == SD_OK) st = sd_model_finish(m);
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}
