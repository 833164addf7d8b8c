/* Model loading: maps the file, picks the format by its magic, validates hyperparameters
 * against the tensors, and sizes the activation arena once. */
#include "model/model_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

sd_model_params sd_model_default_params(void) {
    sd_model_params p = {0};
    p.tokenizer_path = NULL;
    p.n_ctx = 0;
    p.n_batch = 256;
    return p;
}

void sd_set_threads(int n) { sd_kernels_set_threads(n); }
int sd_get_threads(void) { return sd_kernels_threads(); }

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
    free(m->arena.base);
    if (!m->tok_borrowed) sd_tokenizer_free(m->tok);
    free(m->tok_path);
    free(m->layers);
    free(m->owned);
    free(m->inv_freq);
    sd_gguf_free(m->gguf);
    sd_hf_files_free(m->hf);
    if (m->map) munmap(m->map, m->map_len);
    free(m->owned_image);
    free(m->packed_image);
    free(m->path);
    free(m);
}

static sd_status map_file(const char *path, void **map, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sd_fail(SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sd_fail(SD_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size < 8) {
        close(fd);
        return sd_fail(SD_ERR_FORMAT, "%s: file of %lld bytes is too small to be a model", path,
                       (long long)st.st_size);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return sd_fail(SD_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
    *map = p;
    *len = (size_t)st.st_size;
    return SD_OK;
}

/* Regroups the matrices of types with a kernel layout (Q4_0, Q8_0, Q4_K, Q6_K) into one owned buffer and
 * points their sd_tensor.packed at it; data keeps the file's layout for dequantisation,
 * conversion and the references. For a model mapped from a file, the pages that only the
 * kernels read are released, so the resident size stays about one copy of the weights; a model
 * loaded from memory or quantised in memory (a --draft-type copy) keeps both copies (for a
 * 110M-shape Q4_0 draft, 62 MB more). A tied classifier is packed too; its file pages are
 * released like the others' and the embedding lookups fault back the few rows they read.
 * Failing to allocate only costs speed: the kernels then pack 16 rows at a time on the fly. */
static sd_status pack_weights(sd_model *m) {
    sd_tensor **list = malloc(((size_t)m->hp.n_layers * 7 + 1) * sizeof *list);
    if (!list) return SD_OK;
    int n = 0;
    for (int l = 0; l < m->hp.n_layers; l++) {
        sd_layer *L = &m->layers[l];
        sd_tensor *ls[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        for (int i = 0; i < 7; i++) list[n++] = ls[i];
    }
    list[n++] = &m->output;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (sd_quant_can_pack(list[i]->type))
            total += (sd_quant_packed_bytes(list[i]->type, list[i]->rows, list[i]->row_bytes) + 63) & ~(size_t)63;
    uint8_t *buf = total ? aligned_alloc(64, total) : NULL;
    m->packed_image = buf;
    const long page = sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n && buf; i++) {
        sd_tensor *t = list[i];
        if (!sd_quant_can_pack(t->type)) continue;
        const size_t bytes = (size_t)t->rows * t->row_bytes;
        sd_quant_pack_rows(t->type, t->data, buf, t->rows, t->row_bytes, t->cols);
        t->packed = buf;
        buf += (sd_quant_packed_bytes(t->type, t->rows, t->row_bytes) + 63) & ~(size_t)63;
        const uintptr_t b = (uintptr_t)t->data, e = b + bytes, mb = (uintptr_t)m->map;
        if (m->map && page > 0 && b >= mb && e <= mb + m->map_len) {
            const uintptr_t pb = (b + (uintptr_t)page - 1) & ~((uintptr_t)page - 1), pe = e & ~((uintptr_t)page - 1);
            if (pe > pb) madvise((void *)pb, pe - pb, MADV_DONTNEED); /* re-read from the file if ever needed */
        }
    }
    free(list);
    return SD_OK;
}

sd_status sd_model_finish(sd_model *m, const sd_model_params *p) {
    sd_hparams *hp = &m->hp;
    const char *f = m->path;
    if (hp->dim <= 0 || hp->n_layers <= 0 || hp->n_heads <= 0 || hp->n_kv_heads <= 0 ||
        hp->hidden_dim <= 0 || hp->vocab_size <= 0)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: bad hyperparameters dim=%d layers=%d heads=%d kv_heads=%d hidden=%d vocab=%d",
                       f, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->hidden_dim,
                       hp->vocab_size);
    /* head_dim is dim / n_heads, except where an HF config.json sets it (Mistral Nemo) */
    const int free_head_dim = m->format && strcmp(m->format, "hf") == 0;
    if (!free_head_dim && hp->dim % hp->n_heads != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: n_heads=%d does not divide dim=%d", f, hp->n_heads, hp->dim);
    if (hp->n_heads % hp->n_kv_heads != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: n_kv_heads=%d does not divide n_heads=%d", f,
                       hp->n_kv_heads, hp->n_heads);
    if (hp->head_dim <= 0 || (!free_head_dim && hp->head_dim != hp->dim / hp->n_heads))
        return sd_fail(SD_ERR_FORMAT, "%s: head_dim=%d but dim/n_heads=%d", f, hp->head_dim,
                       hp->dim / hp->n_heads);
    if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: RoPE dimension %d must be even and in 2..head_dim=%d", f,
                       hp->rope_dim, hp->head_dim);
    if (!(hp->rope_theta > 0) || !isfinite(hp->rope_theta))
        return sd_fail(SD_ERR_FORMAT, "%s: bad RoPE base %g", f, (double)hp->rope_theta);
    if (!(hp->norm_eps > 0) || !isfinite(hp->norm_eps))
        return sd_fail(SD_ERR_FORMAT, "%s: bad RMSNorm epsilon %g", f, (double)hp->norm_eps);
    if (hp->ctx_len <= 0)
        return sd_fail(SD_ERR_FORMAT, "%s: bad context length %d", f, hp->ctx_len);
    if (m->tok && sd_tokenizer_n_vocab(m->tok) > hp->vocab_size)
        return sd_fail(SD_ERR_FORMAT, "%s: tokenizer has %d tokens but the model only %d logits", f,
                       sd_tokenizer_n_vocab(m->tok), hp->vocab_size);

    m->n_ctx = p && p->n_ctx > 0 ? p->n_ctx : hp->ctx_len;
    if (p && p->n_ctx < 0) return sd_fail(SD_ERR_INVALID_ARG, "context size %d must be >= 0", p->n_ctx);

    m->inv_freq = malloc((size_t)(hp->rope_dim / 2) * sizeof(float));
    if (!m->inv_freq) return sd_fail(SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < hp->rope_dim / 2; i++)
        m->inv_freq[i] = (float)(1.0 / pow((double)hp->rope_theta, (double)(2 * i) / hp->rope_dim));

    /* Arena: one allocation sized for n_batch tokens, carved into the buffers below. */
    int nb = p && p->n_batch > 0 ? p->n_batch : 256;
    if (nb > m->n_ctx) nb = m->n_ctx;
    const size_t q_dim = (size_t)hp->n_heads * hp->head_dim;
    int slots = omp_get_max_threads();
    if (omp_get_num_procs() > slots) slots = omp_get_num_procs();
    const int conv_slots = slots;
    const size_t kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    m->kv_type = p ? p->kv_type : SD_TYPE_F32;
    if (m->kv_type != SD_TYPE_F32 && m->kv_type != SD_TYPE_F16)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: KV cache type %d: f32 or f16", f, (int)m->kv_type);
    if (m->kv_type == SD_TYPE_F16 && !sd_attention_f16_ok(hp->head_dim))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: an f16 KV cache needs head_dim >= 16 and the AVX-512 build (head_dim %d)",
                       f, hp->head_dim);
    /* Attention rows for every head of up to SD_ATT_TOKENS tokens (a verify pass then reads the
     * cache once), fewer tokens when that would exceed 64 MiB (long contexts, many heads), and
     * at least one row per head (the position-major path). */
    {
        const size_t row = (size_t)m->n_ctx * sizeof(float), cap = (size_t)64 << 20;
        size_t tokens = nb < SD_ATT_TOKENS ? (size_t)nb : SD_ATT_TOKENS;
        while (tokens > 1 && (size_t)hp->n_heads * tokens * row > cap) tokens--;
        if ((size_t)hp->n_heads * tokens > (size_t)slots) slots = (int)((size_t)hp->n_heads * tokens);
    }
    size_t max_cols = (size_t)(hp->hidden_dim > hp->dim ? hp->hidden_dim : hp->dim);
    if (q_dim > max_cols) max_cols = q_dim;
    const int f16 = m->kv_type == SD_TYPE_F16;
    size_t sizes[12] = {
        (size_t)nb * hp->dim, (size_t)nb * hp->dim, (size_t)nb * q_dim, (size_t)nb * q_dim,
        (size_t)nb * hp->hidden_dim, (size_t)nb * hp->hidden_dim, (size_t)slots * m->n_ctx,
        sd_matmul_scratch_floats((int64_t)max_cols), f16 ? (size_t)nb * kv_dim : 0, f16 ? (size_t)nb * kv_dim : 0,
        f16 ? (size_t)conv_slots * 16 * kv_dim : 0, (size_t)nb * hp->rope_dim};
    size_t total = 0;
    for (int i = 0; i < 12; i++) total += (sizes[i] + 15) & ~(size_t)15; /* 64-byte aligned parts */
    float *base = aligned_alloc(64, total * sizeof(float));
    if (!base)
        return sd_fail(SD_ERR_NOMEM, "%s: cannot allocate %zu bytes of activations", f,
                       total * sizeof(float));
    float **parts[12] = {&m->arena.x,    &m->arena.xb,   &m->arena.q,    &m->arena.att_out,
                         &m->arena.hb,   &m->arena.hb2,  &m->arena.att,  &m->arena.tile,
                         &m->arena.knew, &m->arena.vnew, &m->arena.conv, &m->arena.rope};
    float *cur = base;
    for (int i = 0; i < 12; i++) {
        *parts[i] = sizes[i] ? cur : NULL;
        cur += (sizes[i] + 15) & ~(size_t)15;
    }
    m->arena.conv_slots = conv_slots;
    m->arena.base = base;
    m->arena.n_batch = nb;
    m->arena.att_threads = slots;
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
    return sd_model_finish(m, p);
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

sd_status sd_model_load(const char *path, const sd_model_params *p, sd_model **out) {
    *out = NULL;
    sd_model_params dp = sd_model_default_params();
    if (!p) p = &dp;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "no model path given");
    sd_model *m = model_new(path);
    if (!m) return sd_fail(SD_ERR_NOMEM, "out of memory");
    sd_status st;
    if (is_hf_path(path)) {
        m->format = "hf";
        st = sd_model_load_hf(m, path, p);
        if (st == SD_OK) st = sd_model_finish(m, p);
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
        if (st == SD_OK) st = sd_model_finish(m, p);
    }
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    *out = m;
    return SD_OK;
}

sd_status sd_model_load_llama2c_mem(const void *buf, size_t len, const char *what,
                                    const sd_model_params *p, const void *tok_buf, size_t tok_len,
                                    sd_model **out) {
    *out = NULL;
    sd_model_params dp = sd_model_default_params();
    if (!p) p = &dp;
    if (!buf && len) return sd_fail(SD_ERR_INVALID_ARG, "llama2.c image: NULL buffer");
    sd_model *m = model_new(what);
    if (!m) return sd_fail(SD_ERR_NOMEM, "out of memory");
    m->format = "llama2c";
    sd_status st = sd_model_load_llama2c_buf(m, buf, len, tok_buf, tok_len);
    if (st == SD_OK) st = sd_model_finish(m, p);
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
const char *sd_model_tokenizer_path(const sd_model *m) { return m->tok_path; }
int sd_model_n_ctx(const sd_model *m) { return m->n_ctx; }
size_t sd_model_weight_bytes(const sd_model *m) { return m->weight_bytes; }

static size_t tensor_bytes(const sd_tensor *t) { return t->row_bytes * (size_t)t->rows; }

size_t sd_model_bytes_per_token(const sd_model *m) {
    size_t b = 0;
    for (int l = 0; l < m->hp.n_layers; l++) {
        const sd_layer *L = &m->layers[l];
        b += tensor_bytes(&L->wq) + tensor_bytes(&L->wk) + tensor_bytes(&L->wv) +
             tensor_bytes(&L->wo) + tensor_bytes(&L->w1) + tensor_bytes(&L->w2) +
             tensor_bytes(&L->w3) + 2 * (size_t)m->hp.dim * sizeof(float);
    }
    b += tensor_bytes(&m->output) + m->tok_embd.row_bytes + (size_t)m->hp.dim * sizeof(float);
    return b;
}

int sd_model_n_tensors(const sd_model *m) {
    const int tied = m->output.data == m->tok_embd.data;
    return 2 + 9 * m->hp.n_layers + (tied ? 0 : 1);
}

sd_status sd_model_tensor(const sd_model *m, int i, char *name, size_t cap, sd_tensor *view) {
    static const char *const k_layer[9] = {"attn_norm", "attn_q",   "attn_k",   "attn_v", "attn_output",
                                           "ffn_norm",  "ffn_gate", "ffn_down", "ffn_up"};
    const int n = sd_model_n_tensors(m), nl9 = 9 * m->hp.n_layers;
    if (i < 0 || i >= n) return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor index %d not in [0, %d)", m->path, i, n);
    const sd_tensor norm = {SD_TYPE_F32, 1, m->hp.dim, (size_t)m->hp.dim * sizeof(float), NULL, NULL};
    int len;
    if (i == 0) {
        len = snprintf(name, cap, "token_embd.weight");
        *view = m->tok_embd;
    } else if (i <= nl9) {
        const int l = (i - 1) / 9, k = (i - 1) % 9;
        const sd_layer *L = &m->layers[l];
        len = snprintf(name, cap, "blk.%d.%s.weight", l, k_layer[k]);
        const sd_tensor *mats[9] = {NULL, &L->wq, &L->wk, &L->wv, &L->wo, NULL, &L->w1, &L->w2, &L->w3};
        if (mats[k]) {
            *view = *mats[k];
        } else {
            *view = norm;
            view->data = k == 0 ? L->attn_norm : L->ffn_norm;
        }
    } else if (i == nl9 + 1) {
        len = snprintf(name, cap, "output_norm.weight");
        *view = norm;
        view->data = m->output_norm;
    } else {
        len = snprintf(name, cap, "output.weight");
        *view = m->output;
    }
    if (len < 0 || (size_t)len >= cap)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: tensor name buffer of %zu bytes is too small", m->path, cap);
    return SD_OK;
}

sd_status sd_model_kv_create(const sd_model *m, int n_ctx, sd_kv **out) {
    if (n_ctx <= 0) n_ctx = m->n_ctx;
    return sd_kv_create_typed(m->hp.n_layers, n_ctx, m->hp.n_kv_heads * m->hp.head_dim, m->kv_type, out);
}

void sd_model_describe(const sd_model *m, FILE *f) {
    const sd_hparams *hp = &m->hp;
    fprintf(f, "file:           %s\n", m->path);
    fprintf(f, "format:         %s\n", m->format);
    fprintf(f, "architecture:   llama\n");
    fprintf(f, "dim:            %d\n", hp->dim);
    fprintf(f, "layers:         %d\n", hp->n_layers);
    fprintf(f, "heads:          %d (kv heads %d, head dim %d%s)\n", hp->n_heads, hp->n_kv_heads,
            hp->head_dim, hp->n_kv_heads < hp->n_heads ? ", grouped-query" : "");
    fprintf(f, "ffn hidden:     %d\n", hp->hidden_dim);
    fprintf(f, "vocab:          %d\n", hp->vocab_size);
    fprintf(f, "context:        %d (training), %d (this run)\n", hp->ctx_len, m->n_ctx);
    fprintf(f, "rope:           %s, dims %d, base %g\n",
            hp->rope_style == SD_ROPE_HALF ? "rotate-half" : "interleaved pairs", hp->rope_dim,
            (double)hp->rope_theta);
    fprintf(f, "rmsnorm eps:    %g\n", (double)hp->norm_eps);
    fprintf(f, "classifier:     %s\n", m->output.data == m->tok_embd.data ? "tied to token embeddings" : "separate");
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
    fprintf(f, "kv cache:       %zu bytes per token (f32), %zu bytes for %d tokens\n", kvpt,
            kvpt * (size_t)m->n_ctx, m->n_ctx);
    if (m->tok) {
        const sd_tokenizer *t = m->tok;
        fprintf(f, "tokenizer:      %s, %d tokens, bos %d, eos %d, add_bos %d\n",
                sd_tokenizer_kind_of(t) == SD_TOKENIZER_SPM ? "sentencepiece (spm)" : "bpe",
                sd_tokenizer_n_vocab(t), (int)sd_tokenizer_bos(t), (int)sd_tokenizer_eos(t),
                sd_tokenizer_add_bos(t));
    }
}
