/* Hugging Face checkpoints: config.json (Llama/Mistral/Qwen2), safetensors weights (one file
 * or index + shards, mapped, used in place where a kernel takes the dtype) and tokenizer.json. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fp16.h"
#include "core/io.h"
#include "core/json.h"
#include "model/model_internal.h"

/* Caps each dimension so that products of a few of them stay far from overflow. */
#define HF_MAX_DIM (1 << 24)
#define HF_MAX_JSON ((size_t)64 << 20)   /* config.json, index.json */
#define HF_MAX_HEADER ((size_t)100 << 20) /* the safetensors reference limit */
#define HF_MAX_SHARDS 4096

/* ---- safetensors ------------------------------------------------------------------------ */

typedef enum { ST_F32, ST_F16, ST_BF16, ST_OTHER } st_dtype;

typedef struct {
    const char *name; /* the JSON key, owned by the shard's parsed header */
    st_dtype dtype;
    const char *dtype_name;
    int ndim;
    int64_t shape[8];
    const uint8_t *data;
    size_t nbytes;
    const char *file;
    int used; /* bound to a weight of the architecture table */
} st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t len;
    cJSON *header;
} st_shard;

/* Everything an HF model keeps alive: the mapped shards with their parsed headers, the
 * tensor index, and buffers of tensors converted at load. */
struct sd_hf_files {
    st_shard *shards;
    int n_shards;
    st_tensor *tensors; /* sorted by name */
    size_t n_tensors, cap_tensors;
    void **owned;
    size_t n_owned, cap_owned;
};

void sd_hf_files_free(struct sd_hf_files *f) {
    if (!f) return;
    for (int i = 0; i < f->n_shards; i++) {
        sd_file_unmap(f->shards[i].map, f->shards[i].len);
        cJSON_Delete(f->shards[i].header);
        free(f->shards[i].path);
    }
    for (size_t i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    free(f->shards);
    free(f->tensors);
    free(f);
}

static void *own(struct sd_hf_files *f, size_t bytes) {
    if (f->n_owned == f->cap_owned) {
        size_t cap = f->cap_owned ? 2 * f->cap_owned : 64;
        void **p = realloc(f->owned, cap * sizeof *p);
        if (!p) return NULL;
        f->owned = p;
        f->cap_owned = cap;
    }
    void *b = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (b) f->owned[f->n_owned++] = b;
    return b;
}

static const struct {
    const char *name;
    st_dtype dtype;
    size_t size;
} k_dtypes[] = {
    {"F32", ST_F32, 4},   {"F16", ST_F16, 2},       {"BF16", ST_BF16, 2},     {"F64", ST_OTHER, 8},
    {"I64", ST_OTHER, 8}, {"I32", ST_OTHER, 4},     {"I16", ST_OTHER, 2},     {"I8", ST_OTHER, 1},
    {"U64", ST_OTHER, 8}, {"U32", ST_OTHER, 4},     {"U16", ST_OTHER, 2},     {"U8", ST_OTHER, 1},
    {"BOOL", ST_OTHER, 1}, {"F8_E4M3", ST_OTHER, 1}, {"F8_E5M2", ST_OTHER, 1},
};

/* A JSON number that is an integer in [0, 2^53] (exact in a double), else -1. */
static int64_t json_u53(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return -1;
    return (int64_t)d;
}

/* Maps one safetensors file, checks its header and every tensor's extent, and adds the
 * tensors to the index. */
static sd_status add_shard(struct sd_hf_files *f, const char *path) {
    st_shard *sh = &f->shards[f->n_shards];
    memset(sh, 0, sizeof *sh);
    if (!(sh->path = strdup(path))) return sd_fail(SD_ERR_NOMEM, "out of memory");
    f->n_shards++;
    sd_status st = sd_file_map(path, &sh->map, &sh->len);
    if (st != SD_OK) return st;
    if (sh->len < 8)
        return sd_fail(SD_ERR_FORMAT, "%s: %zu bytes is too small for a safetensors file (8-byte header length)",
                       path, sh->len);
    const uint8_t *b = sh->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i]; /* little-endian */
    if (hlen > sh->len - 8)
        return sd_fail(SD_ERR_FORMAT, "%s: safetensors header length %llu runs past the end of the file (%zu bytes)",
                       path, (unsigned long long)hlen, sh->len);
    if (hlen > HF_MAX_HEADER)
        return sd_fail(SD_ERR_FORMAT, "%s: safetensors header length %llu exceeds %zu bytes", path,
                       (unsigned long long)hlen, HF_MAX_HEADER);
    sh->header = cJSON_ParseWithLength((const char *)b + 8, (size_t)hlen);
    if (!cJSON_IsObject(sh->header))
        return sd_fail(SD_ERR_FORMAT, "%s: safetensors header is not a JSON object", path);
    const uint8_t *data = b + 8 + hlen;
    const size_t data_len = sh->len - 8 - (size_t)hlen;

    const cJSON *e;
    cJSON_ArrayForEach(e, sh->header) {
        const char *name = e->string ? e->string : "";
        if (strcmp(name, "__metadata__") == 0) continue;
        if (!cJSON_IsObject(e)) return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: entry is not an object", path, name);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(dt)) return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: missing dtype", path, name);
        size_t k = 0, nd = sizeof k_dtypes / sizeof k_dtypes[0];
        while (k < nd && strcmp(k_dtypes[k].name, dt->valuestring) != 0) k++;
        if (k == nd)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %s has unknown dtype '%.32s'", path, name, dt->valuestring);
        if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > 8)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: shape is not an array of at most 8 sizes", path, name);
        if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: data_offsets is not [begin, end]", path, name);
        st_tensor t = {name, k_dtypes[k].dtype, k_dtypes[k].name, 0, {0}, NULL, 0, sh->path, 0};
        uint64_t numel = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, shape) {
            int64_t v = json_u53(d);
            if (v < 0 || (v > 0 && numel > UINT64_MAX / 8 / (uint64_t)v))
                return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: bad or oversized shape", path, name);
            t.shape[t.ndim++] = v;
            numel *= (uint64_t)v;
        }
        int64_t begin = json_u53(cJSON_GetArrayItem(offs, 0)), end = json_u53(cJSON_GetArrayItem(offs, 1));
        if (begin < 0 || end < begin || (uint64_t)end > data_len)
            return sd_fail(SD_ERR_FORMAT,
                           "%s: tensor %s: data_offsets [%lld, %lld] outside the %zu data bytes of the file", path,
                           name, (long long)begin, (long long)end, data_len);
        if ((uint64_t)(end - begin) != numel * k_dtypes[k].size)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %s: %llu elements of %s need %llu bytes but data_offsets span %lld",
                           path, name, (unsigned long long)numel, t.dtype_name,
                           (unsigned long long)(numel * k_dtypes[k].size), (long long)(end - begin));
        t.data = data + begin;
        t.nbytes = (size_t)(end - begin);
        if (f->n_tensors == f->cap_tensors) {
            size_t cap = f->cap_tensors ? 2 * f->cap_tensors : 256;
            st_tensor *p = realloc(f->tensors, cap * sizeof *p);
            if (!p) return sd_fail(SD_ERR_NOMEM, "out of memory");
            f->tensors = p;
            f->cap_tensors = cap;
        }
        f->tensors[f->n_tensors++] = t;
    }
    return SD_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static st_tensor *find_tensor(const struct sd_hf_files *f, const char *name) {
    st_tensor key;
    memset(&key, 0, sizeof key);
    key.name = name;
    return f->n_tensors ? bsearch(&key, f->tensors, f->n_tensors, sizeof key, by_name) : NULL;
}

/* dir + "/" + name into out; fails rather than truncates. */
static sd_status path_join(char *out, size_t cap, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b + 1 > cap) return sd_fail(SD_ERR_INVALID_ARG, "path too long: %s/%s", dir, name);
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return SD_OK;
}

/* ---- JSON files ---------------------------------------------------------------------------- */

/* Integer config value in [lo, hi]: absent or null gives def, which must be given when def < 0
 * (a required key). eos_token_id may list several ids: the first is read. */
static sd_status cfg_int(sd_json_ctx *c, const cJSON *cfg, const char *key, int64_t def, int64_t lo, int64_t hi,
                         int64_t *out) {
    const cJSON *v = sd_json_item(c, cfg, key);
    if (!v) {
        if (def < 0) return sd_json_missing(c, key);
        *out = def;
        return SD_OK;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        size_t n = sd_json_enter_key(c, key);
        sd_json_enter_index(c, 0);
        sd_status st = sd_json_i64_at(c, cJSON_GetArrayItem(v, 0), lo, hi, out);
        sd_json_leave(c, n);
        return st;
    }
    return sd_json_i64(c, cfg, key, lo, hi, out);
}

/* A positive config number; absent or null gives def. */
static sd_status cfg_pos(sd_json_ctx *c, const cJSON *cfg, const char *key, double def, double *out) {
    *out = def;
    return sd_json_num(c, cfg, key, 0, INFINITY, 1, out);
}

/* ---- tensors -------------------------------------------------------------------------------- */

static uint32_t bf16_bits(const uint8_t *p) { return (uint32_t)(p[0] | p[1] << 8) << 16; }

/* Converts n elements to F32 (for a vector, or a matrix whose type has no kernel). */
static void to_f32(const st_tensor *t, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = t->data + i * (t->dtype == ST_F32 ? 4 : 2);
        if (t->dtype == ST_F32) {
            memcpy(&dst[i], p, 4);
        } else if (t->dtype == ST_F16) {
            dst[i] = sd_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
        } else {
            uint32_t u = bf16_bits(p);
            memcpy(&dst[i], &u, 4);
        }
    }
}

static sd_status lookup(sd_model *m, struct sd_hf_files *f, const char *name, const st_tensor **out) {
    st_tensor *t = find_tensor(f, name);
    *out = t;
    if (t) t->used = 1;
    if (t && t->dtype == ST_OTHER)
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (specdec computes with F32, F16, BF16)",
                       (*out)->file, name, (*out)->dtype_name);
    return SD_OK;
}

/* A [rows][cols] weight: the mapped bytes when a kernel takes them as they are (F32, F16,
 * BF16 where supported, suitably aligned), else an F32 copy. */
static sd_status matrix(sd_model *m, struct sd_hf_files *f, const st_tensor *t, const char *name, int64_t rows,
                        int64_t cols, sd_tensor *out) {
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        char got[96] = "[";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        snprintf(got + strlen(got), sizeof got - strlen(got), "]");
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %s has shape %s, expected [%lld, %lld] from config.json", t->file,
                       name, got, (long long)rows, (long long)cols);
    }
    sd_type type = t->dtype == ST_F32 ? SD_TYPE_F32 : t->dtype == ST_F16 ? SD_TYPE_F16 : SD_TYPE_BF16;
    const sd_type_traits *ti = sd_type_info(type);
    size_t esize = t->dtype == ST_F32 ? 4 : 2;
    const void *data = t->data;
    if (!ti || !ti->supported) { /* BF16 before the kernels know it: compute in F32 */
        float *dst = own(f, (size_t)rows * (size_t)cols * sizeof(float));
        if (!dst) return sd_fail(SD_ERR_NOMEM, "%s: out of memory converting %s", m->path, name);
        to_f32(t, dst, (size_t)rows * (size_t)cols);
        type = SD_TYPE_F32;
        data = dst;
    } else if ((uintptr_t)data % esize != 0) { /* a header length that misaligns the data */
        void *dst = own(f, t->nbytes);
        if (!dst) return sd_fail(SD_ERR_NOMEM, "%s: out of memory copying %s", m->path, name);
        memcpy(dst, t->data, t->nbytes);
        data = dst;
    }
    out->type = type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = sd_type_row_bytes(type, cols);
    out->data = data;
    sd_model_count(m, out->row_bytes * (size_t)rows, type);
    return SD_OK;
}

/* A [n] vector (norm weight, bias) as F32: in place when it is F32 and aligned. */
static sd_status vector(sd_model *m, struct sd_hf_files *f, const st_tensor *t, const char *name, int64_t n,
                        sd_tensor *out) {
    if (t->ndim != 1 || t->shape[0] != n)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: tensor %s has %d dimensions, the first %lld, expected [%lld] from config.json", t->file,
                       name, t->ndim, (long long)(t->ndim ? t->shape[0] : 0), (long long)n);
    const float *data = (const float *)t->data;
    if (t->dtype != ST_F32 || (uintptr_t)t->data % 4 != 0) {
        float *dst = own(f, (size_t)n * sizeof(float));
        if (!dst) return sd_fail(SD_ERR_NOMEM, "%s: out of memory converting %s", m->path, name);
        to_f32(t, dst, (size_t)n);
        data = dst;
    }
    const sd_tensor v = {SD_TYPE_F32, 1, n, (size_t)n * sizeof(float), data, NULL};
    *out = v;
    sd_model_count(m, t->nbytes, t->dtype == ST_F32 ? SD_TYPE_F32 : t->dtype == ST_F16 ? SD_TYPE_F16 : SD_TYPE_BF16);
    return SD_OK;
}

typedef struct {
    struct sd_hf_files *f;
    int tied; /* tie_word_embeddings */
} hf_src;

/* sd_weight_lookup over the checkpoint. A tied classifier may be stored as lm_head.weight only
 * (it then serves as the embeddings) or as both (the same matrix). */
static sd_status hf_lookup(sd_model *m, void *src, const char *name, int64_t rows, int64_t cols, sd_tensor *out,
                           int *found) {
    hf_src *s = src;
    const st_tensor *t;
    sd_status st = lookup(m, s->f, name, &t);
    if (st != SD_OK) return st;
    const int embd = strcmp(name, sd_weight_table[SD_W_TOKEN_EMBD].hf) == 0;
    const int head = strcmp(name, sd_weight_table[SD_W_OUTPUT].hf) == 0;
    if (head && s->tied) t = NULL; /* the embeddings classify */
    if (embd && !t && s->tied) {
        if ((st = lookup(m, s->f, sd_weight_table[SD_W_OUTPUT].hf, &t)) != SD_OK) return st;
        name = sd_weight_table[SD_W_OUTPUT].hf;
    }
    *found = t != NULL;
    if (!t) return SD_OK;
    return rows ? matrix(m, s->f, t, name, rows, cols, out) : vector(m, s->f, t, name, cols, out);
}

/* ---- the checkpoint ---------------------------------------------------------------------- */

static sd_status open_weights(sd_model *m, struct sd_hf_files *f, const char *dir) {
    char path[4352];
    sd_status st = path_join(path, sizeof path, dir, "model.safetensors.index.json");
    if (st != SD_OK) return st;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        cJSON *idx;
        st = sd_json_parse_file(path, HF_MAX_JSON, &idx);
        if (st != SD_OK) return st;
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(idx);
            return sd_fail(SD_ERR_FORMAT, "%s: no \"weight_map\" object", path);
        }
        /* each distinct shard once, in order of first mention */
        int n = cJSON_GetArraySize(wm);
        f->shards = calloc((size_t)(n ? n : 1), sizeof *f->shards);
        if (!f->shards) {
            cJSON_Delete(idx);
            return sd_fail(SD_ERR_NOMEM, "out of memory");
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, wm) {
            const char *file = cJSON_IsString(e) ? e->valuestring : NULL;
            if (!file || !file[0] || strchr(file, '/') || strcmp(file, "..") == 0) {
                st = sd_fail(SD_ERR_FORMAT, "%s: weight_map[\"%.80s\"] is not a file name in the model directory",
                             path, e->string ? e->string : "");
                break;
            }
            char shard[4352];
            if ((st = path_join(shard, sizeof shard, dir, file)) != SD_OK) break;
            int seen = 0;
            for (int i = 0; i < f->n_shards && !seen; i++) seen = strcmp(f->shards[i].path, shard) == 0;
            if (seen) continue;
            if (f->n_shards >= HF_MAX_SHARDS) {
                st = sd_fail(SD_ERR_FORMAT, "%s: more than %d shards", path, HF_MAX_SHARDS);
                break;
            }
            if ((st = add_shard(f, shard)) != SD_OK) break;
        }
        cJSON_Delete(idx);
        if (st != SD_OK) return st;
        if (f->n_shards == 0) return sd_fail(SD_ERR_FORMAT, "%s: weight_map names no shards", path);
    } else {
        if ((st = path_join(path, sizeof path, dir, "model.safetensors")) != SD_OK) return st;
        if (stat(path, &sb) != 0) {
            if (path_join(path, sizeof path, dir, "pytorch_model.bin") == SD_OK && stat(path, &sb) == 0)
                return sd_fail(SD_ERR_UNSUPPORTED, "%s: only pytorch_model.bin here; specdec reads safetensors "
                                                   "(model.safetensors or model.safetensors.index.json)", dir);
            return sd_fail(SD_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
        }
        f->shards = calloc(1, sizeof *f->shards);
        if (!f->shards) return sd_fail(SD_ERR_NOMEM, "out of memory");
        if ((st = add_shard(f, path)) != SD_OK) return st;
    }
    /* a header with no tensors leaves f->tensors NULL, which qsort may not be given */
    if (f->n_tensors > 1) qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_name);
    for (size_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %s appears twice (%s, %s)", dir, f->tensors[i].name,
                           f->tensors[i - 1].file, f->tensors[i].file);
    return SD_OK;
}

typedef struct {
    int64_t bos, eos; /* -1: none given */
    int tied;
} hf_extra;

/* rope_scaling: default (or null) is plain RoPE; linear divides positions by factor; llama3
 * divides the low frequencies by factor and blends the middle band (transformers'
 * _compute_llama3_parameters), which becomes per-pair factors: the rope_freqs weight llama.cpp's
 * converter writes. Any other type is refused by name. */
static sd_status rope_scaling(sd_model *m, sd_json_ctx *c, const cJSON *cfg) {
    const char *path = c->file;
    const cJSON *rs;
    sd_status st = sd_json_obj(c, cfg, "rope_scaling", 0, &rs);
    if (st != SD_OK || !rs) return st;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *name = cJSON_IsString(ty) ? ty->valuestring : "?";
    sd_hparams *hp = &m->hp;
    double factor = 1, low = 0, high = 0, orig = 0;
    if (strcmp(name, "default") == 0) return SD_OK;
    const size_t at = sd_json_enter_key(c, "rope_scaling");
    if (strcmp(name, "linear") == 0) {
        if ((st = sd_json_require(c, rs, "factor")) == SD_OK) st = cfg_pos(c, rs, "factor", 1, &factor);
        sd_json_leave(c, at);
        if (st != SD_OK) return st;
        hp->rope_scale = (float)factor;
        return SD_OK;
    }
    if (strcmp(name, "llama3") != 0) {
        sd_json_leave(c, at);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: rope_scaling type '%.32s' is not supported (default, linear, llama3)", path,
                       name);
    }
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double *val[] = {&factor, &low, &high, &orig};
    for (int i = 0; i < 4 && st == SD_OK; i++)
        if ((st = sd_json_require(c, rs, need[i])) == SD_OK) st = cfg_pos(c, rs, need[i], 1, val[i]);
    sd_json_leave(c, at);
    if (st != SD_OK) return st;
    if (!(high > low))
        return sd_fail(SD_ERR_FORMAT, "%s: rope_scaling.high_freq_factor %g must exceed low_freq_factor %g", path, high, low);
    const int n = hp->rope_dim / 2;
    float *f = sd_model_own(m, (size_t)n * sizeof(float));
    if (!f) return sd_fail(SD_ERR_NOMEM, "out of memory");
    const double low_wavelen = orig / low, high_wavelen = orig / high;
    for (int i = 0; i < n; i++) {
        const double inv = 1.0 / pow((double)hp->rope_theta, (double)(2 * i) / hp->rope_dim);
        const double wavelen = 2 * 3.14159265358979323846 / inv;
        if (wavelen < high_wavelen) f[i] = 1.0f;
        else if (wavelen > low_wavelen) f[i] = (float)factor;
        else {
            const double smooth = (orig / wavelen - low) / (high - low);
            f[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    const sd_tensor t = {SD_TYPE_F32, 1, n, (size_t)n * sizeof(float), f, NULL};
    m->g[SD_W_ROPE_FREQS] = t;
    return SD_OK;
}

static sd_status parse_config(sd_model *m, const char *path, const cJSON *cfg, hf_extra *x) {
    sd_hparams *hp = &m->hp;
    sd_json_ctx jc = sd_json_ctx_make(path, SD_ERR_FORMAT, 1), *c = &jc;
    sd_status st0 = sd_json_check_unique(c, cfg);
    if (st0 != SD_OK) return st0;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
    if (!cJSON_IsString(a0)) return sd_fail(SD_ERR_FORMAT, "%s: missing key \"architectures\"", path);
    const char *arch = a0->valuestring;
    if (!(m->arch = sd_arch_by_hf(arch)))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported (%s)", path, arch,
                       sd_arch_hf_list());
    const int llama = m->arch == sd_arch_llama(), mistral = strcmp(arch, "MistralForCausalLM") == 0;
    int64_t dim, nl, nh, nkv, hid, vocab, ctx, head_dim, sw = 0;
    double eps = 0, theta = 0;
    sd_status st;
    /* defaults are those of the transformers config classes */
    if ((st = cfg_int(c, cfg, "hidden_size", -1, 1, HF_MAX_DIM, &dim)) != SD_OK ||
        (st = cfg_int(c, cfg, "num_hidden_layers", -1, 1, 4096, &nl)) != SD_OK ||
        (st = cfg_int(c, cfg, "num_attention_heads", -1, 1, 65536, &nh)) != SD_OK ||
        (st = cfg_int(c, cfg, "num_key_value_heads", nh, 1, nh, &nkv)) != SD_OK ||
        (st = cfg_int(c, cfg, "intermediate_size", -1, 1, HF_MAX_DIM, &hid)) != SD_OK ||
        (st = cfg_int(c, cfg, "vocab_size", -1, 1, HF_MAX_DIM, &vocab)) != SD_OK ||
        (st = cfg_int(c, cfg, "max_position_embeddings", mistral ? 131072 : m->arch->hf_ctx_default, 1, HF_MAX_DIM,
                      &ctx)) != SD_OK ||
        (st = cfg_pos(c, cfg, "rms_norm_eps", 1e-6, &eps)) != SD_OK ||
        (st = cfg_pos(c, cfg, "rope_theta", 10000.0, &theta)) != SD_OK ||
        (st = cfg_int(c, cfg, "bos_token_id", INT64_MAX, 0, vocab - 1, &x->bos)) != SD_OK ||
        (st = cfg_int(c, cfg, "eos_token_id", INT64_MAX, 0, vocab - 1, &x->eos)) != SD_OK)
        return st;
    if (x->bos == INT64_MAX) x->bos = -1; /* absent: none */
    if (x->eos == INT64_MAX) x->eos = -1;
    if (nh % nkv != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: num_key_value_heads=%lld does not divide num_attention_heads=%lld", path,
                       (long long)nkv, (long long)nh);
    if (sd_json_item(c, cfg, "head_dim")) {
        if ((st = cfg_int(c, cfg, "head_dim", -1, 2, 65536, &head_dim)) != SD_OK) return st;
    } else {
        if (dim % nh != 0)
            return sd_fail(SD_ERR_FORMAT, "%s: num_attention_heads=%lld does not divide hidden_size=%lld", path,
                           (long long)nh, (long long)dim);
        head_dim = dim / nh;
    }
    if (head_dim % 2 != 0) return sd_fail(SD_ERR_FORMAT, "%s: head_dim %lld is odd", path, (long long)head_dim);
    if (nh * head_dim > HF_MAX_DIM) return sd_fail(SD_ERR_FORMAT, "%s: attention width too large", path);

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: hidden_act '%.32s' is not supported (silu only)", path,
                       cJSON_IsString(act) ? act->valuestring : "?");
    int mlp_bias = 0, attn_bias = 0, use_sw = 0;
    x->tied = 0;
    if ((st = sd_json_bool(c, cfg, "mlp_bias", &mlp_bias)) != SD_OK ||
        (st = sd_json_bool(c, cfg, "attention_bias", &attn_bias)) != SD_OK ||
        (st = sd_json_bool(c, cfg, "use_sliding_window", &use_sw)) != SD_OK ||
        (st = sd_json_bool(c, cfg, "tie_word_embeddings", &x->tied)) != SD_OK)
        return st;
    if (mlp_bias) return sd_fail(SD_ERR_UNSUPPORTED, "%s: mlp_bias is not supported", path);
    if (attn_bias) return sd_fail(SD_ERR_UNSUPPORTED, "%s: attention_bias (an o_proj bias) is not supported", path);
    /* Sliding-window attention equals full attention while the context fits in the window,
     * so the usable context is capped there instead of masking. */
    int windowed = mistral || (!llama && use_sw);
    if (windowed && sd_json_item(c, cfg, "sliding_window")) {
        if ((st = cfg_int(c, cfg, "sliding_window", -1, 1, HF_MAX_DIM, &sw)) != SD_OK) return st;
        if (sw < ctx) ctx = sw;
    }

    hp->dim = (int)dim;
    hp->n_layers = (int)nl;
    hp->n_heads = (int)nh;
    hp->n_kv_heads = (int)nkv;
    hp->head_dim = (int)head_dim;
    hp->hidden_dim = (int)hid;
    hp->vocab_size = (int)vocab;
    hp->ctx_len = (int)ctx;
    hp->rope_dim = (int)head_dim;
    hp->rope_theta = (float)theta;
    hp->norm_eps = (float)eps;
    hp->rope_style = SD_ROPE_HALF; /* HF's rotate_half: pairs (i, i + d/2), no permutation */
    hp->rope_scale = 1;
    return rope_scaling(m, c, cfg);
}

/* Directory of an HF model from the path given: the directory itself, or the directory of a
 * config.json / *.safetensors / model.safetensors.index.json inside it. */
static void model_dir(const char *path, char *dir, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(dir, cap, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

sd_status sd_model_load_hf(sd_model *m, const char *path, const sd_model_params *p) {
    char dir[4096], file[4352];
    model_dir(path, dir, sizeof dir);
    sd_status st = path_join(file, sizeof file, dir, "config.json");
    if (st != SD_OK) return st;
    cJSON *cfg = NULL;
    st = sd_json_parse_file(file, HF_MAX_JSON, &cfg);
    if (st != SD_OK) return st;
    if (!cJSON_IsObject(cfg)) {
        sd_json_ctx c = sd_json_ctx_make(file, SD_ERR_FORMAT, 0);
        st = sd_json_expected(&c, "an object", cfg);
        cJSON_Delete(cfg);
        return st;
    }
    hf_extra x = {-1, -1, 0};
    st = parse_config(m, file, cfg, &x);
    cJSON_Delete(cfg);
    if (st != SD_OK) return st;
    if (!(m->hf = calloc(1, sizeof *m->hf))) return sd_fail(SD_ERR_NOMEM, "out of memory");
    struct sd_hf_files *f = m->hf;
    if ((st = open_weights(m, f, dir)) != SD_OK) return st;

    /* Older checkpoints store the RoPE frequencies they compute from rope_theta: not weights. */
    for (size_t i = 0; i < f->n_tensors; i++) {
        const char *n = f->tensors[i].name;
        const size_t len = strlen(n), sl = strlen(".rotary_emb.inv_freq");
        if (len > sl && strcmp(n + len - sl, ".rotary_emb.inv_freq") == 0) f->tensors[i].used = 1;
    }
    hf_src src = {f, x.tied};
    if ((st = sd_model_bind_weights(m, hf_lookup, &src, 1)) != SD_OK) return st;
    if (m->tied && !x.tied)
        return sd_fail(SD_ERR_FORMAT, "%s: missing tensor lm_head.weight (and tie_word_embeddings is false)", m->path);
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!f->tensors[i].used)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: tensor %.96s is not part of a '%s' model as specdec computes it (unknown tensor)",
                           f->tensors[i].file, f->tensors[i].name, m->arch->name);

    /* data_offsets may overlap in a hostile file, letting a few MB describe a model whose
     * every token streams gigabytes; real weights fit in their files (twice over when a 16-bit
     * type without a kernel is computed from an F32 copy). */
    size_t file_bytes = 0;
    for (int i = 0; i < f->n_shards; i++) file_bytes += f->shards[i].len;
    if (m->weight_bytes / 2 > file_bytes)
        return sd_fail(SD_ERR_FORMAT, "%s: the weight tensors total %zu bytes, more than the %zu bytes of the files (data_offsets overlap)",
                       m->path, m->weight_bytes, file_bytes);

    /* tokenizer.json beside the weights (or the one given) */
    const char *tok = p && p->tokenizer_path ? p->tokenizer_path : NULL;
    if (!tok) {
        if ((st = path_join(file, sizeof file, dir, "tokenizer.json")) != SD_OK) return st;
        tok = file;
    }
    struct stat sb;
    if (stat(tok, &sb) != 0)
        return sd_fail(SD_ERR_IO, "%s: no tokenizer.json beside the weights (pass one with -z)", m->path);
    if ((st = sd_tokenizer_load_hf_json(tok, (int32_t)x.bos, (int32_t)x.eos, &m->tok)) != SD_OK) return st;
    /* generation_config.json's eos list and tokenizer_config.json's chat template */
    return sd_tokenizer_load_hf_config(m->tok, dir);
}
