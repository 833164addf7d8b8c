/* In-memory quantised copies of a model (generate --draft-type, bench "quantize"): part of the
 * engine, unlike the GGUF converter, which shares its row conversion. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "model/writer_internal.h"
#include "specdec/quant.h"

int64_t sd_writer_rope_half_row(int64_t r, int heads, int head_dim, int rope_dim) {
    if (!heads) return r;
    const int64_t h = r / head_dim, i = r % head_dim;
    if (i >= rope_dim) return r;
    return h * head_dim + (i % 2) * (rope_dim / 2) + i / 2;
}

/* v (rows x cols, any readable type) as `type` into dst (rows * sd_type_row_bytes), rows
 * permuted for GGUF when heads != 0; a view already in `type` is copied byte for byte. */
sd_status sd_model_convert_rows(const sd_model *m, const char *name, const sd_tensor *v, sd_type type, int heads,
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
size_t sd_model_stored_bytes(const sd_tensor *v, sd_type type) {
    const size_t rb = sd_type_row_bytes(type, v->cols);
    if (rb == 0 || v->rows <= 0 || rb > SIZE_MAX / (size_t)v->rows) return 0;
    return rb * (size_t)v->rows;
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
                                                  : sd_model_stored_bytes(&v, sd_quant_fallback(t, v.cols));
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
        if ((st = sd_model_convert_rows(src, name, &v, type, 0, buf + off)) != SD_OK) break;
        off += (sd_model_stored_bytes(&v, type) + 63) & ~(size_t)63;
        *dst = q;
        sd_model_count(m, sd_model_stored_bytes(&v, type), type);
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
