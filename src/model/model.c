/* Model loading: maps the file, picks the format by its magic, binds the weights through the
 * architecture table, validates hyperparameters against them, and packs the matrices once. */
#include "model/model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io.h"
#include "specdec/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

sd_model_params sd_model_default_params(void) {
    sd_model_params p = {0};
    return p;
}

static sd_model *model_new(const char *path) {
    sd_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->path = strdup(path ? path : "(memory)");
    if (!m->path) {
        free(m);
        return NULL;
    }
    return m;
}

void sd_model_free(sd_model *m) {
    if (!m) return;
    if (!m->tok_borrowed) sd_tokenizer_free(m->tok);
    free(m->tok_path);
    free(m->layers);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->inv_freq);
    sd_gguf_free(m->gguf);
    sd_hf_files_free(m->hf);
    sd_file_unmap(m->map, m->map_len);
    free(m->owned_image);
    free(m->packed_image);
    free(m->path);
    free(m);
}

void *sd_model_own(sd_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    void *b = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (b) m->owned[m->n_owned++] = b;
    return b;
}

void sd_model_count(sd_model *m, size_t stored_bytes, sd_type stored_type) {
    m->n_tensors++;
    m->type_counts[stored_type]++;
    m->weight_bytes += stored_bytes;
}

sd_status sd_model_bind_weights(sd_model *m, sd_weight_lookup lookup, void *src, int hf) {
    const sd_arch *a = m->arch;
    const sd_hparams *hp = &m->hp;
    if (!(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) return sd_fail(SD_ERR_NOMEM, "out of memory");
    char name[160];
    /* model-level weights, then layer by layer: the first missing one is the one reported */
    for (int l = -1; l < hp->n_layers; l++) {
        for (int w = l < 0 ? 0 : SD_W_LAYER0; w < (l < 0 ? SD_W_LAYER0 : SD_W_COUNT); w++) {
            const sd_weight_info *wi = &sd_weight_table[w];
            if (sd_weight_name((sd_weight)w, l, hf, name, sizeof name) != 0) continue; /* no name in this format */
            const int64_t rows = wi->rows == SD_D_NONE ? 0 : sd_dim_value(hp, wi->rows);
            const int64_t cols = sd_dim_value(hp, wi->cols);
            sd_tensor t = {0};
            int found = 0;
            sd_status st = lookup(m, src, name, rows, cols, &t, &found);
            if (st != SD_OK) return st;
            if (found && a->need[w] == SD_NEED_NO)
                return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %s (%s) is not part of a '%s' model as specdec computes it",
                               m->path, name, wi->what, a->name);
            if (!found && a->need[w] == SD_NEED_YES)
                return sd_fail(SD_ERR_FORMAT, "%s: missing tensor %s (%s, required for '%s')", m->path, name, wi->what,
                               a->name);
            if (found) *sd_model_w_mut(m, l < 0 ? 0 : l, (sd_weight)w) = t;
        }
    }
    if (!m->g[SD_W_OUTPUT].data) { /* tied classifier */
        m->g[SD_W_OUTPUT] = m->g[SD_W_TOKEN_EMBD];
        m->tied = 1;
    }
    return SD_OK;
}

static sd_status map_file(const char *path, void **map, size_t *len) {
    sd_status st = sd_file_map(path, map, len);
    if (st == SD_OK && *len < 8)
        return sd_fail(SD_ERR_FORMAT, "%s: file of %zu bytes is too small to be a model", path, *len);
    return st;
}

/* Regroups the matrices of types with a kernel layout (Q4_0, Q8_0, Q4_K, Q6_K: 16-row groups;
 * F32: panels, kernels.h) into one owned buffer and points their sd_tensor.packed at it; data
 * keeps the file's layout for dequantisation, conversion, embeddings and the references. For a
 * model mapped from a file, the pages that only the kernels read are released, so the resident
 * size stays about one copy of the weights; a model loaded from memory or quantised in memory
 * (a --draft-type copy) keeps both copies (for a 110M-shape Q4_0 draft, 62 MB more). A tied
 * classifier is packed too; its file pages are released like the others' and the embedding
 * lookups fault back the few rows they read. Failing to allocate only costs speed: the kernels
 * then read the file's rows (the quantised types pack 16 rows at a time on the fly). */
static size_t packed_bytes(const sd_tensor *t) {
    if (sd_quant_can_pack(t->type)) return sd_quant_packed_bytes(t->type, t->rows, t->row_bytes);
    if (sd_f32_can_pack(t)) return sd_f32_packed_bytes(t->rows, t->cols);
    return 0;
}

static sd_status pack_weights(sd_model *m) {
    const int nl = m->hp.n_layers, per = SD_LW_COUNT;
    sd_tensor **list = malloc(((size_t)nl * per + 1) * sizeof *list);
    if (!list) return SD_OK;
    int n = 0;
    for (int l = 0; l < nl; l++)
        for (int w = SD_W_LAYER0; w < SD_W_COUNT; w++)
            if (!sd_weight_is_vector((sd_weight)w) && m->layers[l].w[w - SD_W_LAYER0].data)
                list[n++] = &m->layers[l].w[w - SD_W_LAYER0];
    list[n++] = &m->g[SD_W_OUTPUT];
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (packed_bytes(list[i]) + 63) & ~(size_t)63;
    /* 2 MiB pages: a decode step streams every byte of the image, and in 4 KiB pages that is a
     * TLB miss per 4 KiB (15,000 per step for the 110M shape in Q4_K) */
    uint8_t *buf = total ? sd_huge_alloc(total) : NULL;
    m->packed_image = buf;
    const long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n && buf; i++) {
        sd_tensor *t = list[i];
        const size_t kb = packed_bytes(t);
        if (!kb) continue;
        uint8_t *dst = buf;
        buf += (kb + 63) & ~(size_t)63;
        t->packed = dst;
        const size_t bytes = (size_t)t->rows * t->row_bytes;
        if (t->type == SD_TYPE_F32) sd_f32_pack((const float *)t->data, t->rows, t->cols, (float *)dst);
        else sd_quant_pack_rows(t->type, t->data, dst, t->rows, t->row_bytes, t->cols);
        const uintptr_t b = (uintptr_t)t->data, e = b + bytes, mb = (uintptr_t)m->map;
        if (m->map && page > 0 && b >= mb && e <= mb + m->map_len) {
            const uintptr_t pb = (b + (uintptr_t)page - 1) & ~((uintptr_t)page - 1), pe = e & ~((uintptr_t)page - 1);
            if (pe > pb) madvise((void *)pb, pe - pb, MADV_DONTNEED); /* re-read from the file if ever needed */
        }
    }
    free(list);
    return SD_OK;
}


sd_status sd_model_finish(sd_model *m) {
    sd_hparams *hp = &m->hp;
    const char *f = m->path;
    if (hp->dim <= 0 || hp->n_layers <= 0 || hp->n_heads <= 0 || hp->n_kv_heads <= 0 ||
        hp->hidden_dim <= 0 || hp->vocab_size <= 0)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: bad hyperparameters dim=%d layers=%d heads=%d kv_heads=%d hidden=%d vocab=%d",
                       f, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->hidden_dim,
                       hp->vocab_size);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: n_kv_heads=%d does not divide n_heads=%d", f,
                       hp->n_kv_heads, hp->n_heads);
    if (hp->head_dim <= 0)
        return sd_fail(SD_ERR_FORMAT, "%s: head_dim=%d", f, hp->head_dim);
    if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: RoPE dimension %d must be even and in 2..head_dim=%d", f,
                       hp->rope_dim, hp->head_dim);
    if (!(hp->rope_theta > 0) || !isfinite(hp->rope_theta))
        return sd_fail(SD_ERR_FORMAT, "%s: bad RoPE base %g", f, (double)hp->rope_theta);
    if (hp->rope_scale == 0) hp->rope_scale = 1; /* loaders that know no scaling leave it unset */
    if (!(hp->rope_scale > 0) || !isfinite(hp->rope_scale))
        return sd_fail(SD_ERR_FORMAT, "%s: bad RoPE scaling factor %g", f, (double)hp->rope_scale);
    if (!(hp->norm_eps > 0) || !isfinite(hp->norm_eps))
        return sd_fail(SD_ERR_FORMAT, "%s: bad RMSNorm epsilon %g", f, (double)hp->norm_eps);
    if (hp->ctx_len <= 0)
        return sd_fail(SD_ERR_FORMAT, "%s: bad context length %d", f, hp->ctx_len);
    if (m->tok && sd_tokenizer_n_vocab(m->tok) > hp->vocab_size)
        return sd_fail(SD_ERR_FORMAT, "%s: tokenizer has %d tokens but the model only %d logits", f,
                       sd_tokenizer_n_vocab(m->tok), hp->vocab_size);

    m->inv_freq = malloc((size_t)(hp->rope_dim / 2) * sizeof(float));
    if (!m->inv_freq) return sd_fail(SD_ERR_NOMEM, "out of memory");
    const float *factors = (const float *)m->g[SD_W_ROPE_FREQS].data; /* Llama 3: divisors per pair */
    for (int i = 0; i < hp->rope_dim / 2; i++) {
        if (factors && !(factors[i] > 0 && isfinite(factors[i])))
            return sd_fail(SD_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a positive finite factor", f, i,
                           (double)factors[i]);
        double w = 1.0 / pow((double)hp->rope_theta, (double)(2 * i) / hp->rope_dim) / hp->rope_scale;
        if (factors) w /= factors[i];
        m->inv_freq[i] = (float)w;
    }
    return pack_weights(m);
}

static sd_status load_common(sd_model *m, const void *buf, size_t len, const sd_model_params *p) {
    sd_status st;
    if (len >= 4 && memcmp(buf, "GGUF", 4) == 0) {
        m->format = "gguf";
        st = sd_model_load_gguf(m, buf, len, p);
    } else {
        m->format = "llama2c";
        st = sd_model_load_llama2c(m, buf, len, p);
    }
    if (st != SD_OK) return st;
    return sd_model_finish(m);
}

/* A Hugging Face checkpoint is a directory: given as one, or by its config.json or a
 * safetensors file inside it. */
static int is_hf_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 1;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    return strcmp(base, "config.json") == 0 || strcmp(base, "model.safetensors.index.json") == 0 ||
           (n > 12 && strcmp(base + n - 12, ".safetensors") == 0);
}

/* The kernels run the path SPECDEC_ISA asked for or none: a refused request fails every load. */
static sd_status isa_ok(void) { return sd_isa_status(); }

sd_status sd_model_load(const char *path, const sd_model_params *p, sd_model **out) {
    *out = NULL;
    const sd_status isa = isa_ok();
    if (isa != SD_OK) return isa;
    sd_model_params dp = sd_model_default_params();
    if (!p) p = &dp;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "no model path given");
    sd_model *m = model_new(path);
    if (!m) return sd_fail(SD_ERR_NOMEM, "out of memory");
    sd_status st;
    if (is_hf_path(path)) {
        m->format = "hf";
        st = sd_model_load_hf(m, path, p);
        if (st == SD_OK) st = sd_model_finish(m);
    } else {
        st = map_file(path, &m->map, &m->map_len);
        if (st == SD_OK) st = load_common(m, m->map, m->map_len, p);
    }
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}

sd_status sd_model_load_gguf_mem(const void *buf, size_t len, const char *what,
                                 const sd_model_params *p, sd_model **out) {
    *out = NULL;
    const sd_status isa = isa_ok();
    if (isa != SD_OK) return isa;
    sd_model_params dp = sd_model_default_params();
    if (!p) p = &dp;
    sd_model *m = model_new(what);
    if (!m) return sd_fail(SD_ERR_NOMEM, "out of memory");
    sd_status st;
    if (len < 4 || memcmp(buf, "GGUF", 4) != 0) {
        st = sd_fail(SD_ERR_FORMAT, "%s: not a GGUF image", m->path);
    } else {
        m->format = "gguf";
        st = sd_model_load_gguf(m, buf, len, p);
        if (st == SD_OK) st = sd_model_finish(m);
    }
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}

sd_status sd_model_load_llama2c_mem(const void *buf, size_t len, const char *what, const void *tok_buf,
                                    size_t tok_len, sd_model **out) {
    *out = NULL;
    const sd_status isa = isa_ok();
    if (isa != SD_OK) return isa;
    if (!buf && len) return sd_fail(SD_ERR_INVALID_ARG, "llama2.c image: NULL buffer");
    sd_model *m = model_new(what);
    if (!m) return sd_fail(SD_ERR_NOMEM, "out of memory");
    m->format = "llama2c";
    sd_status st = sd_model_load_llama2c_buf(m, buf, len, tok_buf, tok_len);
    if (st == SD_OK) st = sd_model_finish(m);
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}

const sd_hparams *sd_model_hparams(const sd_model *m) { return &m->hp; }
const sd_tokenizer *sd_model_tokenizer(const sd_model *m) { return m->tok; }
const char *sd_model_path(const sd_model *m) { return m->path; }
const char *sd_model_format(const sd_model *m) { return m->format; }
const char *sd_model_arch(const sd_model *m) { return m->arch ? m->arch->name : "llama"; }
const char *sd_model_tokenizer_path(const sd_model *m) { return m->tok_path; }
size_t sd_model_weight_bytes(const sd_model *m) { return m->weight_bytes; }

static size_t tensor_bytes(const sd_tensor *t) { return t->data ? t->row_bytes * (size_t)t->rows : 0; }

size_t sd_model_bytes_per_token(const sd_model *m) {
    size_t b = 0;
    for (int l = 0; l < m->hp.n_layers; l++)
        for (int w = 0; w < SD_LW_COUNT; w++) b += tensor_bytes(&m->layers[l].w[w]);
    b += tensor_bytes(&m->g[SD_W_OUTPUT]) + tensor_bytes(&m->g[SD_W_OUTPUT_NORM]) + tensor_bytes(&m->g[SD_W_ROPE_FREQS]);
    return b + m->g[SD_W_TOKEN_EMBD].row_bytes;
}

int sd_model_weight_at(const sd_model *m, int i, sd_weight *w, int *layer) {
    static const sd_weight head[2] = {SD_W_TOKEN_EMBD, SD_W_ROPE_FREQS}, tail[2] = {SD_W_OUTPUT_NORM, SD_W_OUTPUT};
    int k = 0;
    for (int j = 0; j < 2; j++)
        if (m->g[head[j]].data && k++ == i) {
            *w = head[j];
            *layer = 0;
            return 0;
        }
    for (int l = 0; l < m->hp.n_layers; l++)
        for (int lw = 0; lw < SD_LW_COUNT; lw++)
            if (m->layers[l].w[lw].data && k++ == i) {
                *w = (sd_weight)(SD_W_LAYER0 + lw);
                *layer = l;
                return 0;
            }
    for (int j = 0; j < 2; j++)
        if (m->g[tail[j]].data && !(tail[j] == SD_W_OUTPUT && m->tied) && k++ == i) {
            *w = tail[j];
            *layer = 0;
            return 0;
        }
    return -1;
}

int sd_model_n_tensors(const sd_model *m) {
    int n = 0;
    for (int g = 0; g < SD_W_LAYER0; g++) n += m->g[g].data && !(g == SD_W_OUTPUT && m->tied);
    for (int l = 0; l < m->hp.n_layers; l++)
        for (int lw = 0; lw < SD_LW_COUNT; lw++) n += m->layers[l].w[lw].data != NULL;
    return n;
}

sd_status sd_model_tensor(const sd_model *m, int i, char *name, size_t cap, sd_tensor *view) {
    sd_weight w;
    int l;
    if (sd_model_weight_at(m, i, &w, &l) != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor index %d not in [0, %d)", m->path, i, sd_model_n_tensors(m));
    if (sd_weight_name(w, l, 0, name, cap) != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor name buffer of %zu bytes is too small", m->path, cap);
    *view = *sd_model_w(m, l, w);
    return SD_OK;
}

void sd_model_describe(const sd_model *m, FILE *f) {
    const sd_hparams *hp = &m->hp;
    fprintf(f, "file:           %s\n", m->path);
    fprintf(f, "format:         %s\n", m->format);
    fprintf(f, "architecture:   %s\n", sd_model_arch(m));
    fprintf(f, "dim:            %d\n", hp->dim);
    fprintf(f, "layers:         %d\n", hp->n_layers);
    fprintf(f, "heads:          %d (kv heads %d, head dim %d%s)\n", hp->n_heads, hp->n_kv_heads,
            hp->head_dim, hp->n_kv_heads < hp->n_heads ? ", grouped-query" : "");
    fprintf(f, "ffn hidden:     %d\n", hp->hidden_dim);
    fprintf(f, "vocab:          %d\n", hp->vocab_size);
    fprintf(f, "context:        %d (training)\n", hp->ctx_len);
    fprintf(f, "rope:           %s, dims %d, base %g%s", hp->rope_style == SD_ROPE_HALF ? "rotate-half" : "interleaved pairs",
            hp->rope_dim, (double)hp->rope_theta, m->g[SD_W_ROPE_FREQS].data ? ", frequency factors (rope_freqs)" : "");
    if (hp->rope_scale != 1) fprintf(f, ", linear scaling x%g", (double)hp->rope_scale);
    fputc('\n', f);
    fprintf(f, "rmsnorm eps:    %g\n", (double)hp->norm_eps);
    const sd_layer *L0 = &m->layers[0];
    fprintf(f, "attention:      %s%s\n", L0->w[SD_W_ATTN_Q_B - SD_W_LAYER0].data ? "q/k/v biases" : "no biases",
            L0->w[SD_W_ATTN_Q_NORM - SD_W_LAYER0].data ? ", per-head q/k RMSNorm" : "");
    fprintf(f, "classifier:     %s\n", m->tied ? "tied to token embeddings" : "separate");
    fprintf(f, "tensors:        %d (", m->n_tensors);
    int first = 1;
    for (int t = 0; t < SD_TYPE_COUNT; t++) {
        if (!m->type_counts[t]) continue;
        const sd_type_traits *ti = sd_type_info((uint32_t)t);
        fprintf(f, "%s%d %s", first ? "" : ", ", m->type_counts[t], ti ? ti->name : "?");
        first = 0;
    }
    fprintf(f, ")\n");
    fprintf(f, "weights:        %zu bytes (%.2f MiB); %zu bytes read per decoded token\n",
            m->weight_bytes, m->weight_bytes / 1048576.0, sd_model_bytes_per_token(m));
    size_t kvpt = 2 * (size_t)hp->n_layers * hp->n_kv_heads * hp->head_dim * sizeof(float);
    fprintf(f, "kv cache:       %zu bytes per token (f32), %zu bytes for the training context of %d\n", kvpt,
            kvpt * (size_t)hp->ctx_len, hp->ctx_len);
    if (m->tok) {
        const sd_tokenizer *t = m->tok;
        fprintf(f, "tokenizer:      %s, %d tokens, bos %d, eos %d, add_bos %d\n",
                sd_tokenizer_kind_of(t) == SD_TOKENIZER_SPM ? "sentencepiece (spm)" : "bpe",
                sd_tokenizer_n_vocab(t), (int)sd_tokenizer_bos(t), (int)sd_tokenizer_eos(t),
                sd_tokenizer_add_bos(t));
    }
}
