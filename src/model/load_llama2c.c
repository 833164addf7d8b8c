/* llama2.c checkpoints (karpathy/llama2.c "version 0" export): a 7-int header, then F32
 * tensors in a fixed order; a negative vocab_size means the classifier is stored separately. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_internal.h"

static sd_tensor mat(const float *p, int64_t rows, int64_t cols) {
    sd_tensor t = {0};
    t.type = SD_TYPE_F32;
    t.rows = rows;
    t.cols = cols;
    t.row_bytes = (size_t)cols * sizeof(float);
    t.data = p;
    return t;
}

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

/* tokenizer.bin beside the model, else tok<vocab>.bin (llama2.c's name for custom vocabs). */
static sd_status find_tokenizer(const char *model_path, int vocab, char *out, size_t cap) {
    const char *slash = strrchr(model_path, '/');
    int dlen = slash ? (int)(slash - model_path) : 1;
    const char *dir = slash ? model_path : ".";
    snprintf(out, cap, "%.*s/tokenizer.bin", dlen, dir);
    if (file_exists(out)) return SD_OK;
    snprintf(out, cap, "%.*s/tok%d.bin", dlen, dir, vocab);
    if (file_exists(out)) return SD_OK;
    return sd_fail(SD_ERR_IO,
                   "%s: llama2.c checkpoint needs a tokenizer: none found beside it (tokenizer.bin or tok%d.bin); pass one with -z",
                   model_path, vocab);
}

/* Header, sizes and tensor views; the tokenizer is attached by the callers below. */
static sd_status load_weights(sd_model *m, const void *buf, size_t len) {
    if (len < 7 * sizeof(int32_t))
        return sd_fail(SD_ERR_FORMAT, "%s: truncated llama2.c header (%zu bytes)", m->path, len);
    /* The weights are used in place as floats (a mapped file is page-aligned). */
    if ((uintptr_t)buf % sizeof(float) != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: llama2.c image at a misaligned address", m->path);
    int32_t h[7];
    memcpy(h, buf, sizeof h);
    int32_t dim = h[0], hidden = h[1], nl = h[2], nh = h[3], nkv = h[4], vocab = h[5], seq = h[6];
    /* Anything else (an unknown format, a GGUF with a damaged magic) lands here: a header
     * outside these bounds is reported as not a model rather than as odd numbers. */
    const int32_t lim = 1 << 20;
    if (dim <= 0 || dim > lim || hidden <= 0 || hidden > lim || nl <= 0 || nl > 4096 || nh <= 0 ||
        nh > dim || nkv <= 0 || nkv > nh || vocab == 0 || vocab == INT32_MIN || abs(vocab) > lim ||
        seq <= 0 || seq > lim)
    {
        /* Show the first four bytes as text where printable: usually the clue. */
        const unsigned char *b = buf;
        char magic[5];
        for (int i = 0; i < 4; i++) magic[i] = (b[i] >= 32 && b[i] < 127) ? (char)b[i] : '.';
        magic[4] = 0;
        return sd_fail(SD_ERR_FORMAT,
                       "%s: not a model: bad magic 0x%02x%02x%02x%02x (\"%s\") is not GGUF, and the bytes "
                       "are not a plausible llama2.c header (read as one: dim=%d hidden=%d layers=%d heads=%d kv_heads=%d "
                       "vocab=%d seq_len=%d)",
                       m->path, b[0], b[1], b[2], b[3], magic, dim, hidden, nl, nh, nkv, vocab, seq);
    }
    if (dim % nh != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: n_heads=%d does not divide dim=%d", m->path, nh, dim);
    if (nh % nkv != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: n_kv_heads=%d does not divide n_heads=%d", m->path, nkv, nh);
    const int shared = vocab > 0;
    if (vocab < 0) vocab = -vocab;
    const int64_t hd = dim / nh, kv_dim = (int64_t)nkv * hd;

    /* Sizes in floats; each factor is < 2^20, so 64-bit products cannot overflow. */
    const int64_t n_emb = (int64_t)vocab * dim;
    const int64_t per_layer_att = (int64_t)dim * dim * 2 + (int64_t)dim * kv_dim * 2;
    const int64_t per_layer_ffn = (int64_t)dim * hidden * 3;
    int64_t need = n_emb + (int64_t)nl * (2 * dim + per_layer_att + per_layer_ffn) + dim +
                   (int64_t)seq * hd; /* freq_cis_real + imag: seq * hd/2 each */
    if (!shared) need += n_emb;
    const uint64_t need_bytes = 28 + (uint64_t)need * 4;
    if (need_bytes > len)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: truncated llama2.c checkpoint: header implies %llu bytes, file has %zu",
                       m->path, (unsigned long long)need_bytes, len);

    sd_hparams *hp = &m->hp;
    hp->dim = dim;
    hp->hidden_dim = hidden;
    hp->n_layers = nl;
    hp->n_heads = nh;
    hp->n_kv_heads = nkv;
    hp->head_dim = (int)hd;
    hp->vocab_size = vocab;
    hp->ctx_len = seq;
    hp->rope_dim = (int)hd;
    hp->rope_theta = 10000.0f;
    hp->norm_eps = 1e-5f;
    hp->rope_style = SD_ROPE_INTERLEAVED;

    m->arch = sd_arch_llama();
    m->layers = calloc((size_t)nl, sizeof *m->layers);
    if (!m->layers) return sd_fail(SD_ERR_NOMEM, "out of memory");
    /* The checkpoint stores each weight for all layers in turn, in this order. */
    static const sd_weight k_order[9] = {SD_W_ATTN_NORM, SD_W_ATTN_Q,    SD_W_ATTN_K,     SD_W_ATTN_V,   SD_W_ATTN_OUT,
                                         SD_W_FFN_NORM,  SD_W_FFN_GATE, SD_W_FFN_DOWN, SD_W_FFN_UP};
    const float *w = (const float *)((const uint8_t *)buf + 28);
    m->g[SD_W_TOKEN_EMBD] = mat(w, vocab, dim);
    w += n_emb;
    for (int k = 0; k < 9; k++) {
        const sd_weight_info *wi = &sd_weight_table[k_order[k]];
        const int64_t rows = wi->rows == SD_D_NONE ? 1 : sd_dim_value(hp, wi->rows), cols = sd_dim_value(hp, wi->cols);
        for (int l = 0; l < nl; l++) m->layers[l].w[k_order[k] - SD_W_LAYER0] = mat(w + (size_t)l * rows * cols, rows, cols);
        w += (size_t)nl * rows * cols;
    }
    m->g[SD_W_OUTPUT_NORM] = mat(w, 1, dim);
    w += dim;
    w += (size_t)seq * hd; /* skip the precomputed RoPE tables: we compute them */
    m->tied = shared;
    m->g[SD_W_OUTPUT] = shared ? m->g[SD_W_TOKEN_EMBD] : mat(w, vocab, dim);
    m->n_tensors = 2 + 9 * nl + (shared ? 0 : 1);
    m->type_counts[SD_TYPE_F32] = m->n_tensors;
    m->weight_bytes = (size_t)(need - (int64_t)seq * hd) * 4;
    return SD_OK;
}

sd_status sd_model_load_llama2c(sd_model *m, const void *buf, size_t len, const sd_model_params *p) {
    sd_status st = load_weights(m, buf, len);
    if (st != SD_OK) return st;
    const int vocab = m->hp.vocab_size;
    char tpath[4096];
    const char *tp = p ? p->tokenizer_path : NULL;
    if (!tp) {
        st = find_tokenizer(m->path, vocab, tpath, sizeof tpath);
        if (st == SD_OK) tp = tpath;
        else if (p && p->tokenizer_fallback) tp = p->tokenizer_fallback;
        else return st;
    }
    m->tok_path = strdup(tp);
    if (!m->tok_path) return sd_fail(SD_ERR_NOMEM, "out of memory");
    return sd_tokenizer_load_llama2c(tp, vocab, &m->tok);
}

sd_status sd_model_load_llama2c_buf(sd_model *m, const void *buf, size_t len, const void *tok_buf,
                                    size_t tok_len) {
    sd_status st = load_weights(m, buf, len);
    if (st != SD_OK) return st;
    return sd_tokenizer_from_llama2c_buf(tok_buf, tok_len, m->hp.vocab_size, m->path, &m->tok);
}
