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


static sd_status convert_matrix(const sd_model *m, const char *name, const sd_tensor *v, sd_type type,
                                int heads, sd_gguf_writer *w) {
    const size_t bytes = sd_model_stored_bytes(v, type);
    if (!bytes)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor %s [%lld x %lld] cannot be stored as %s", m->path, name,
                       (long long)v->rows, (long long)v->cols, sd_type_info(type)->name);
    uint8_t *dst = malloc(bytes);
    if (!dst) return sd_fail(SD_ERR_NOMEM, "%s: no memory to convert tensor %s (%zu bytes)", m->path, name, bytes);
    sd_status st = sd_model_convert_rows(m, name, v, type, heads, dst);
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
