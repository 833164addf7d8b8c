/* GGUF models of the architecture table's families: hyperparameters from "<arch>.*" metadata,
 * tensor views into the mapped file (each shape checked against the hyperparameters, every
 * tensor accounted for), tokenizer from metadata. */
#include <math.h>
#include <stdio.h>
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

typedef struct {
    const sd_gguf *g;
    unsigned char *used; /* [n_tensors] bound by the table */
} gguf_src;

/* sd_weight_lookup over the parsed file: views of matrices, vectors as F32. */
static sd_status gguf_lookup(sd_model *m, void *src, const char *name, int64_t rows, int64_t cols, sd_tensor *out,
                             int *found) {
    gguf_src *s = src;
    const sd_gguf_tensor *t = sd_gguf_find_tensor(s->g, name);
    *found = t != NULL;
    if (!t) return SD_OK;
    s->used[t - sd_gguf_tensor_at(s->g, 0)] = 1;
    sd_status st = view(m, name, cols, rows, 1, out, NULL);
    if (st != SD_OK || rows) return st;
    out->rows = 1;
    if (out->type == SD_TYPE_F32) return SD_OK;
    if (out->type != SD_TYPE_F16)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: vector tensor %s must be f32 or f16", m->path, name);
    float *dst = sd_model_own(m, (size_t)cols * sizeof(float));
    if (!dst) return sd_fail(SD_ERR_NOMEM, "out of memory");
    const uint16_t *h = out->data;
    for (int64_t i = 0; i < cols; i++) dst[i] = sd_fp16_to_fp32(h[i]);
    out->type = SD_TYPE_F32;
    out->row_bytes = (size_t)cols * sizeof(float);
    out->data = dst;
    return SD_OK;
}

/* Metadata that would change the computation in ways specdec does not implement. */
static sd_status check_refused_keys(const sd_model *m, const sd_gguf *g, const char *arch) {
    char key[128];
    for (const sd_arch_refused_key *r = sd_arch_refused_keys; r->suffix; r++) {
        snprintf(key, sizeof key, "%s.%s", arch, r->suffix);
        const sd_gguf_kv *kv = sd_gguf_find_kv(g, key);
        if (!kv) continue;
        int neutral = 0;
        switch (r->neutral) {
        case SD_NEUTRAL_NEVER: break;
        case SD_NEUTRAL_NONE: neutral = kv->type == SD_GGUF_STRING && sd_str_eq(kv->v.str, "none"); break;
        case SD_NEUTRAL_ZERO:
            neutral = (kv->type == SD_GGUF_FLOAT32 || kv->type == SD_GGUF_FLOAT64) ? kv->v.f64 == 0
                      : kv->type == SD_GGUF_STRING || kv->type == SD_GGUF_ARRAY ? 0
                      : kv->v.u64 == 0;
            break;
        case SD_NEUTRAL_ONE:
            neutral = (kv->type == SD_GGUF_FLOAT32 || kv->type == SD_GGUF_FLOAT64) && (kv->v.f64 == 1 || kv->v.f64 == 0);
            break;
        }
        if (neutral) continue;
        char val[64] = "?";
        if (kv->type == SD_GGUF_STRING)
            snprintf(val, sizeof val, "'%.*s'", (int)(kv->v.str.len > 40 ? 40 : kv->v.str.len), kv->v.str.ptr);
        else if (kv->type == SD_GGUF_FLOAT32 || kv->type == SD_GGUF_FLOAT64)
            snprintf(val, sizeof val, "%g", kv->v.f64);
        else if (kv->type != SD_GGUF_ARRAY)
            snprintf(val, sizeof val, "%llu", (unsigned long long)kv->v.u64);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: %s = %s (%s) is not implemented by specdec", m->path, key, val, r->what);
    }
    return SD_OK;
}

/* <arch>.rope.scaling.type: none, or linear with <arch>.rope.scaling.factor (a factor without a
 * type is linear too, as llama.cpp reads it); any other type is refused by name. */
static sd_status rope_scaling(sd_model *m, const sd_gguf *g, const char *arch) {
    char k_type[96], k_factor[96];
    snprintf(k_type, sizeof k_type, "%s.rope.scaling.type", arch);
    snprintf(k_factor, sizeof k_factor, "%s.rope.scaling.factor", arch);
    int linear = 1;
    if (sd_gguf_find_kv(g, k_type)) {
        sd_str t;
        sd_status st = sd_gguf_get_str(g, k_type, &t);
        if (st != SD_OK) return st;
        if (sd_str_eq(t, "none")) linear = 0;
        else if (!sd_str_eq(t, "linear"))
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not implemented by specdec (supported: none, linear)",
                           m->path, k_type, (int)(t.len > 40 ? 40 : t.len), t.ptr);
    }
    float factor = 1;
    sd_status st = get_f32_opt(g, k_factor, 1.0f, &factor);
    if (st != SD_OK) return st;
    if (factor == 0) factor = 1; /* llama.cpp: 0 means unset */
    if (!(factor > 0) || !isfinite(factor))
        return sd_fail(SD_ERR_FORMAT, "%s: %s = %g is not a positive factor", m->path, k_factor, (double)factor);
    m->hp.rope_scale = linear ? factor : 1;
    return SD_OK;
}

sd_status sd_model_load_gguf(sd_model *m, const void *buf, size_t len, const sd_model_params *p) {
    sd_status st = sd_gguf_parse(buf, len, m->path, &m->gguf);
    if (st != SD_OK) return st;
    const sd_gguf *g = m->gguf;

    sd_str arch_s;
    if (sd_gguf_get_str(g, "general.architecture", &arch_s) != SD_OK)
        return sd_fail(SD_ERR_FORMAT, "%s: missing general.architecture", m->path);
    m->arch = sd_arch_by_name(arch_s.ptr, (size_t)arch_s.len);
    if (!m->arch) {
        int n = arch_s.len > 64 ? 64 : (int)arch_s.len;
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: unknown architecture '%.*s' (specdec runs %s)", m->path, n, arch_s.ptr,
                       sd_arch_list());
    }
    const char *arch = m->arch->name;
    if ((st = check_refused_keys(m, g, arch)) != SD_OK) return st;
    char k_dim[96], k_nl[96], k_hid[96], k_nh[96], k_nkv[96], k_ctx[96], k_theta[96], k_eps[96], k_rdim[96], k_klen[96],
        k_vlen[96], k_sw[96];
#define KEY(buf, suffix) snprintf(buf, sizeof buf, "%s." suffix, arch)
    KEY(k_dim, "embedding_length");
    KEY(k_nl, "block_count");
    KEY(k_hid, "feed_forward_length");
    KEY(k_nh, "attention.head_count");
    KEY(k_nkv, "attention.head_count_kv");
    KEY(k_ctx, "context_length");
    KEY(k_theta, "rope.freq_base");
    KEY(k_eps, "attention.layer_norm_rms_epsilon");
    KEY(k_rdim, "rope.dimension_count");
    KEY(k_klen, "attention.key_length");
    KEY(k_vlen, "attention.value_length");
    KEY(k_sw, "attention.sliding_window");
#undef KEY
    uint32_t dim, nl, nh, nkv, hid, ctx, rdim, klen, vlen, sw;
    float theta, eps;
    if ((st = sd_gguf_get_u32(g, k_dim, &dim)) != SD_OK || (st = sd_gguf_get_u32(g, k_nl, &nl)) != SD_OK ||
        (st = sd_gguf_get_u32(g, k_hid, &hid)) != SD_OK || (st = sd_gguf_get_u32(g, k_nh, &nh)) != SD_OK ||
        (st = get_u32_opt(g, k_nkv, nh, &nkv)) != SD_OK || (st = get_u32_opt(g, k_ctx, 2048, &ctx)) != SD_OK ||
        (st = get_f32_opt(g, k_theta, 10000.0f, &theta)) != SD_OK || (st = get_f32_opt(g, k_eps, 1e-5f, &eps)) != SD_OK ||
        (st = get_u32_opt(g, k_sw, 0, &sw)) != SD_OK)
        return st;
    if (dim == 0 || dim > SD_MAX_DIM || nl == 0 || nl > 4096 || nh == 0 || nh > SD_MAX_DIM || nkv == 0 ||
        hid == 0 || hid > SD_MAX_DIM || ctx == 0 || ctx > SD_MAX_DIM)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: implausible hyperparameters embedding_length=%u block_count=%u head_count=%u "
                       "head_count_kv=%u feed_forward_length=%u context_length=%u",
                       m->path, dim, nl, nh, nkv, hid, ctx);
    if (nh % nkv != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: %s=%u does not divide head_count=%u", m->path, k_nkv, nkv, nh);
    /* The head size is the embedding split across the heads unless key_length says otherwise
     * (Qwen3: 128 with embedding 1024 and 16 heads). */
    const int klen_given = sd_gguf_find_kv(g, k_klen) != NULL;
    if (!klen_given && dim % nh != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: %s=%u does not divide %s=%u", m->path, k_nh, nh, k_dim, dim);
    if ((st = get_u32_opt(g, k_klen, klen_given ? 0 : dim / nh, &klen)) != SD_OK) return st;
    if (klen == 0 || klen > 65536 || (uint64_t)klen * nh > SD_MAX_DIM)
        return sd_fail(SD_ERR_FORMAT, "%s: %s=%u is not a plausible head size for %u heads", m->path, k_klen, klen, nh);
    if ((st = get_u32_opt(g, k_vlen, klen, &vlen)) != SD_OK) return st;
    if (vlen != klen)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: %s=%u differs from key_length=%u (value heads of another size are not implemented)",
                       m->path, k_vlen, vlen, klen);
    if ((st = get_u32_opt(g, k_rdim, klen, &rdim)) != SD_OK) return st;

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
    hp->head_dim = (int)klen;
    hp->hidden_dim = (int)hid;
    hp->vocab_size = (int)emb->ne[1];
    /* A sliding window equals full attention while the context fits in it: cap the context. */
    hp->ctx_len = sw > 0 && sw < ctx ? (int)sw : (int)ctx;
    hp->rope_dim = (int)rdim;
    hp->rope_theta = theta;
    hp->norm_eps = eps;
    hp->rope_style = m->arch->gguf_rope;
    if (hp->rope_dim <= 0 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: RoPE dimension %d must be even and in 2..head_dim=%d", m->path, hp->rope_dim,
                       hp->head_dim);
    if ((st = rope_scaling(m, g, arch)) != SD_OK) return st;

    gguf_src src = {g, calloc((size_t)sd_gguf_n_tensors(g) + 1, 1)};
    if (!src.used) return sd_fail(SD_ERR_NOMEM, "out of memory");
    st = sd_model_bind_weights(m, gguf_lookup, &src, 0);
    for (int64_t i = 0; st == SD_OK && i < sd_gguf_n_tensors(g); i++) {
        if (src.used[i]) continue;
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        st = sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %.*s is not part of a '%s' model as specdec computes it (unknown tensor)",
                     m->path, (int)(t->name.len > 96 ? 96 : t->name.len), t->name.ptr, arch);
    }
    free(src.used);
    if (st != SD_OK) return st;

    /* Tensors may legally point at the same bytes, but no real file does: with aliasing, a
     * small file could describe a model whose forward pass streams gigabytes. */
    if (m->weight_bytes > len)
        return sd_fail(SD_ERR_FORMAT, "%s: the weight tensors total %zu bytes, more than the file's %zu (tensor data overlaps)",
                       m->path, m->weight_bytes, len);

    if (sd_gguf_find_kv(g, "tokenizer.ggml.model") && p && p->tokenizer_path) {
        /* two tokenizers for one model: refused rather than one silently dropped */
        st = sd_fail(SD_ERR_INVALID_ARG,
                     "%s: the GGUF carries its own tokenizer (tokenizer.ggml.model), so the tokenizer file %s would not "
                     "be used: leave it out",
                     m->path, p->tokenizer_path);
    } else if (sd_gguf_find_kv(g, "tokenizer.ggml.model")) {
        st = sd_tokenizer_from_gguf(g, m->path, &m->tok);
    } else if (p && p->tokenizer_path) {
        st = sd_tokenizer_load_llama2c(p->tokenizer_path, hp->vocab_size, &m->tok);
    } else {
        st = sd_fail(SD_ERR_FORMAT, "%s: no tokenizer in the GGUF metadata (pass a tokenizer.bin with -z)",
                     m->path);
    }
    return st;
}
