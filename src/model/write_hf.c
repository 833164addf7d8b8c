/* Any loaded model written as a Hugging Face checkpoint: config.json, model.safetensors (every
 * weight as F32, names from the architecture table, q/k in rotate-half order) and the
 * tokenizer.json it is given. Tests use it to check that the HF loader computes what the GGUF
 * one does for the same weights. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/io.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "specdec/convert.h"

/* The config.json class name of each family. */
static const char *hf_class(const sd_arch *a) { return a->hf_names[0]; }

/* Source row, in the model's interleaved order, of rotate-half row r (the inverse of the GGUF
 * converter's permutation): HF dim s * rd/2 + j of a head is interleaved dim 2j + s. */
static int64_t from_interleaved(int64_t r, int heads, int head_dim, int rope_dim) {
    if (!heads) return r;
    const int64_t h = r / head_dim, i = r % head_dim, half = rope_dim / 2;
    if (i >= rope_dim) return r;
    return h * head_dim + 2 * (i % half) + i / half;
}

static sd_status write_config(const sd_model *m, const char *dir, const sd_hf_write_params *p) {
    const sd_hparams *hp = &m->hp;
    cJSON *c = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(hf_class(m->arch)));
    cJSON_AddStringToObject(c, "model_type", strcmp(m->arch->name, "llama") == 0 ? "llama" : m->arch->name);
    cJSON_AddNumberToObject(c, "hidden_size", hp->dim);
    cJSON_AddNumberToObject(c, "num_hidden_layers", hp->n_layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", hp->n_heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", hp->n_kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", hp->head_dim);
    cJSON_AddNumberToObject(c, "intermediate_size", hp->hidden_dim);
    cJSON_AddNumberToObject(c, "vocab_size", hp->vocab_size);
    cJSON_AddNumberToObject(c, "max_position_embeddings", hp->ctx_len);
    cJSON_AddNumberToObject(c, "rms_norm_eps", hp->norm_eps);
    cJSON_AddNumberToObject(c, "rope_theta", hp->rope_theta);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied);
    if (m->tok && sd_tokenizer_bos(m->tok) >= 0) cJSON_AddNumberToObject(c, "bos_token_id", sd_tokenizer_bos(m->tok));
    if (m->tok && sd_tokenizer_eos(m->tok) >= 0) cJSON_AddNumberToObject(c, "eos_token_id", sd_tokenizer_eos(m->tok));
    if (m->g[SD_W_ROPE_FREQS].data) {
        cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
        cJSON_AddNumberToObject(rs, "factor", p->llama3_factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", p->llama3_low_freq_factor);
        cJSON_AddNumberToObject(rs, "high_freq_factor", p->llama3_high_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", p->llama3_original_ctx);
    } else if (hp->rope_scale != 1) {
        cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "linear");
        cJSON_AddNumberToObject(rs, "factor", hp->rope_scale);
    }
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    char path[4352];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = text ? fopen(path, "wb") : NULL;
    sd_status st = SD_OK;
    if (!f || fputs(text, f) < 0) st = sd_fail(SD_ERR_IO, "cannot write %s", path);
    if (f && fclose(f) != 0 && st == SD_OK) st = sd_fail(SD_ERR_IO, "cannot write %s", path);
    free(text);
    return st;
}

/* Every weight HF stores, as F32 rows in rotate-half order. */
static sd_status write_weights(const sd_model *m, const char *dir) {
    const sd_hparams *hp = &m->hp;
    const int permute = hp->rope_style == SD_ROPE_INTERLEAVED;
    const int n = sd_model_n_tensors(m);
    cJSON *hdr = cJSON_CreateObject();
    size_t total = 0;
    char name[160];
    /* pass 1: the header (names, shapes, offsets) */
    for (int i = 0; i < n; i++) {
        sd_weight w;
        int l;
        sd_model_weight_at(m, i, &w, &l);
        if (sd_weight_name(w, l, 1, name, sizeof name) != 0) continue; /* rope_freqs: config.json carries it */
        const sd_tensor *t = sd_model_w(m, l, w);
        cJSON *e = cJSON_AddObjectToObject(hdr, name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        if (!sd_weight_is_vector(w)) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->rows));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->cols));
        const size_t bytes = (size_t)t->rows * (size_t)t->cols * sizeof(float);
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)total));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(total + bytes)));
        total += bytes;
    }
    char *h = cJSON_PrintUnformatted(hdr);
    cJSON_Delete(hdr);
    if (!h) return sd_fail(SD_ERR_NOMEM, "out of memory");
    char path[4352];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return sd_fail(SD_ERR_IO, "cannot create %s", path);
    }
    uint64_t hl = strlen(h);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(h, 1, hl, f) == hl;
    free(h);
    /* pass 2: the data, row by row */
    size_t cols = (size_t)(hp->hidden_dim > hp->dim ? hp->hidden_dim : hp->dim);
    if ((size_t)hp->n_heads * hp->head_dim > cols) cols = (size_t)hp->n_heads * hp->head_dim;
    float *row = malloc(cols * sizeof(float)); /* the widest row or vector */
    for (int i = 0; ok && row && i < n; i++) {
        sd_weight w;
        int l;
        sd_model_weight_at(m, i, &w, &l);
        if (sd_weight_name(w, l, 1, name, sizeof name) != 0) continue;
        const sd_tensor *t = sd_model_w(m, l, w);
        int heads = 0;
        if (permute) {
            if (w == SD_W_ATTN_Q || w == SD_W_ATTN_Q_B) heads = hp->n_heads;
            else if (w == SD_W_ATTN_K || w == SD_W_ATTN_K_B) heads = hp->n_kv_heads;
            else if (w == SD_W_ATTN_Q_NORM || w == SD_W_ATTN_K_NORM) heads = 1;
        }
        if (sd_weight_is_vector(w)) {
            const float *v = t->data;
            for (int64_t c = 0; c < t->cols; c++) row[c] = v[from_interleaved(c, heads, hp->head_dim, hp->rope_dim)];
            ok = fwrite(row, sizeof(float), (size_t)t->cols, f) == (size_t)t->cols;
            continue;
        }
        for (int64_t r = 0; ok && r < t->rows; r++) {
            if (sd_dequant_row(t, from_interleaved(r, heads, hp->head_dim, hp->rope_dim), row) != 0) ok = 0;
            else ok = fwrite(row, sizeof(float), (size_t)t->cols, f) == (size_t)t->cols;
        }
    }
    free(row);
    if (fclose(f) != 0) ok = 0;
    return ok ? SD_OK : sd_fail(SD_ERR_IO, "cannot write %s (disk full, or a weight without an F32 form)", path);
}

static sd_status copy_file(const char *from, const char *to) {
    char *buf;
    size_t n;
    sd_status st = sd_file_read(from, 0, &buf, &n);
    if (st != SD_OK) return st;
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(buf);
    return ok ? SD_OK : sd_fail(SD_ERR_IO, "cannot write %s", to);
}

sd_status sd_model_write_hf(const sd_model *m, const char *dir, const sd_hf_write_params *p) {
    if (!m || !dir || !p) return sd_fail(SD_ERR_INVALID_ARG, "write hf: NULL argument");
    if (!p->tokenizer_json)
        return sd_fail(SD_ERR_INVALID_ARG, "write hf: a tokenizer.json to copy is required (specdec writes none itself)");
    if (m->g[SD_W_ROPE_FREQS].data && !(p->llama3_factor > 0))
        return sd_fail(SD_ERR_INVALID_ARG,
                       "%s: its rope_freqs weight has no Hugging Face form: give the llama3 rope_scaling parameters", m->path);
    if (mkdir(dir, 0755) != 0) {
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return sd_fail(SD_ERR_IO, "cannot create directory %s", dir);
    }
    sd_status st = write_config(m, dir, p);
    if (st == SD_OK) st = write_weights(m, dir);
    if (st == SD_OK) {
        char to[4352];
        snprintf(to, sizeof to, "%s/tokenizer.json", dir);
        st = copy_file(p->tokenizer_json, to);
    }
    return st;
}
