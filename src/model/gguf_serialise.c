/* GGUF writer (sd_gguf_writer): collects metadata and tensors, then serialises them as GGUF v3
 * to memory or a file; used by tests, synthetic models and convert. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_format.h"
#include "specdec/gguf.h"
#include "specdec/types.h"

typedef struct {
    char *key;
    sd_gguf_vtype type;
    uint64_t bits; /* scalar payload, written as the low vtype_size(type) bytes */
    char *str;
    sd_gguf_vtype arr_type;
    uint64_t arr_n;
    void *arr; /* fixed-size elements in host order, or char *[arr_n] for strings */
} wkv;

typedef struct {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    void *data;
    size_t nbytes;
} wtensor;

struct sd_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

sd_gguf_writer *sd_gguf_writer_create(void) { return calloc(1, sizeof(sd_gguf_writer)); }

static void wkv_clear(wkv *e) {
    if (e->arr_type == SD_GGUF_STRING && e->arr) {
        char **s = e->arr;
        for (uint64_t i = 0; i < e->arr_n; i++) free(s[i]);
    }
    free(e->arr);
    free(e->str);
    e->arr = NULL;
    e->str = NULL;
}

void sd_gguf_writer_free(sd_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv_clear(&w->kv[i]);
        free(w->kv[i].key);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 1;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * elem);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

/* Takes ownership of the payload in `e` (freed on failure). Setting an existing key
 * replaces its value in place, so the original insertion order is kept. */
static sd_status put_kv(sd_gguf_writer *w, const char *key, wkv *e) {
    if (!w || !key) {
        wkv_clear(e);
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: NULL writer or key");
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            wkv_clear(&w->kv[i]);
            e->key = w->kv[i].key;
            w->kv[i] = *e;
            return SD_OK;
        }
    }
    e->key = strdup(key);
    if (!e->key || !grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) {
        free(e->key);
        wkv_clear(e);
        return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for key %s", key);
    }
    w->kv[w->n_kv++] = *e;
    return SD_OK;
}

static sd_status set_scalar(sd_gguf_writer *w, const char *key, sd_gguf_vtype t, uint64_t bits) {
    wkv e = {.type = t, .bits = bits};
    return put_kv(w, key, &e);
}

sd_status sd_gguf_set_u32(sd_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, SD_GGUF_UINT32, v);
}

sd_status sd_gguf_set_i32(sd_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, SD_GGUF_INT32, (uint32_t)v);
}

sd_status sd_gguf_set_f32(sd_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, SD_GGUF_FLOAT32, bits);
}

sd_status sd_gguf_set_bool(sd_gguf_writer *w, const char *key, int v) {
    return set_scalar(w, key, SD_GGUF_BOOL, v != 0);
}

sd_status sd_gguf_set_str(sd_gguf_writer *w, const char *key, const char *v) {
    if (!v) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: NULL string", key ? key : "(null)");
    wkv e = {.type = SD_GGUF_STRING, .str = strdup(v)};
    if (!e.str) return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for key %s", key ? key : "(null)");
    return put_kv(w, key, &e);
}

static sd_status set_arr_fixed(sd_gguf_writer *w, const char *key, sd_gguf_vtype et, const void *v, uint64_t n) {
    const char *k = key ? key : "(null)";
    if (n > 0 && !v) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: NULL array of %" PRIu64, k, n);
    if (n > SIZE_MAX / 8) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: array of %" PRIu64 " is too large", k, n);
    size_t bytes = (size_t)n * vtype_size(et);
    wkv e = {.type = SD_GGUF_ARRAY, .arr_type = et, .arr_n = n, .arr = malloc(bytes ? bytes : 1)};
    if (!e.arr) return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for key %s", k);
    if (bytes) memcpy(e.arr, v, bytes);
    return put_kv(w, key, &e);
}

sd_status sd_gguf_set_arr_f32(sd_gguf_writer *w, const char *key, const float *v, uint64_t n) {
    return set_arr_fixed(w, key, SD_GGUF_FLOAT32, v, n);
}

sd_status sd_gguf_set_arr_i32(sd_gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    return set_arr_fixed(w, key, SD_GGUF_INT32, v, n);
}

sd_status sd_gguf_set_arr_str(sd_gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    const char *k = key ? key : "(null)";
    if (n > 0 && !v) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: NULL array of %" PRIu64, k, n);
    if (n > SIZE_MAX / sizeof(char *))
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: array of %" PRIu64 " is too large", k, n);
    wkv e = {.type = SD_GGUF_ARRAY, .arr_type = SD_GGUF_STRING, .arr_n = n,
             .arr = calloc(n ? (size_t)n : 1, sizeof(char *))};
    if (!e.arr) return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for key %s", k);
    char **dst = e.arr;
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i]) {
            wkv_clear(&e);
            return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: key %s: string #%" PRIu64 " is NULL", k, i);
        }
        dst[i] = strdup(v[i]);
        if (!dst[i]) {
            wkv_clear(&e);
            return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for key %s", k);
        }
    }
    return put_kv(w, key, &e);
}

sd_status sd_gguf_add_tensor(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                             const uint64_t *ne, const void *data, size_t nbytes) {
    if (!w || !name || !ne || (nbytes > 0 && !data))
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: NULL argument", name ? name : "(null)");
    const sd_type_traits *tt = sd_type_info(type);
    if (!tt) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: unknown ggml type %" PRIu32, name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: n_dims %" PRIu32 " not in [1, %d]", name, n_dims,
                       GGUF_MAX_DIMS);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; d++) {
        if (ne[d] > (uint64_t)INT64_MAX || (ne[d] && rows > (uint64_t)INT64_MAX / ne[d]))
            return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: shape overflows", name);
        rows *= ne[d];
    }
    if (ne[0] > (uint64_t)INT64_MAX)
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: ne[0] = %" PRIu64 " is too large", name, ne[0]);
    size_t row = sd_type_row_bytes(type, (int64_t)ne[0]);
    if (row == 0 && ne[0] != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: ne[0] = %" PRIu64 " is not a multiple of the %s block size %d",
                       name, ne[0], tt->name, tt->block_size);
    if (rows && row > SIZE_MAX / rows)
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: byte size overflows", name);
    if (row * rows != nbytes)
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: tensor %s: %zu bytes given, its shape and type %s need %zu",
                       name, nbytes, tt->name, row * rows);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: duplicate tensor %s", name);
    wtensor t = {.name = strdup(name), .type = type, .n_dims = n_dims, .data = malloc(nbytes ? nbytes : 1),
                 .nbytes = nbytes};
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    if (!t.name || !t.data || !grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) {
        free(t.name);
        free(t.data);
        return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for tensor %s (%zu bytes)", name, nbytes);
    }
    if (nbytes) memcpy(t.data, data, nbytes);
    w->t[w->n_t++] = t;
    return SD_OK;
}

/* One serialiser for three sinks: counting only (mem == f == NULL), memory, or a FILE. */
typedef struct {
    uint8_t *mem;
    FILE *f;
    uint64_t pos;
    int err;
} sink;

static void put(sink *s, const void *b, size_t n) {
    if (s->mem) memcpy(s->mem + s->pos, b, n);
    else if (s->f && !s->err && n && fwrite(b, 1, n, s->f) != n) s->err = errno ? errno : EIO;
    s->pos += n;
}

static void put_le(sink *s, uint64_t v, size_t n) {
    uint8_t b[8];
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(s, b, n);
}

static void put_str(sink *s, const char *str) {
    size_t n = strlen(str);
    put_le(s, n, 8);
    put(s, str, n);
}

static void put_pad(sink *s, uint64_t align) {
    static const uint8_t zeros[64];
    uint64_t n = (align - s->pos % align) % align;
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        put(s, zeros, k);
        n -= k;
    }
}

static uint64_t writer_alignment(const sd_gguf_writer *w) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, "general.alignment") == 0)
            return w->kv[i].type == SD_GGUF_UINT32 ? w->kv[i].bits : 0;
    return SD_GGUF_DEFAULT_ALIGNMENT;
}

static void serialise(const sd_gguf_writer *w, uint64_t align, sink *s) {
    put_le(s, SD_GGUF_MAGIC, 4);
    put_le(s, 3, 4);
    put_le(s, w->n_t, 8);
    put_le(s, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *e = &w->kv[i];
        put_str(s, e->key);
        put_le(s, e->type, 4);
        if (e->type == SD_GGUF_STRING) {
            put_str(s, e->str);
        } else if (e->type == SD_GGUF_ARRAY) {
            put_le(s, e->arr_type, 4);
            put_le(s, e->arr_n, 8);
            if (e->arr_type == SD_GGUF_STRING) {
                char *const *strs = e->arr;
                for (uint64_t j = 0; j < e->arr_n; j++) put_str(s, strs[j]);
            } else {
                size_t esz = vtype_size(e->arr_type);
                const uint8_t *a = e->arr;
                for (uint64_t j = 0; j < e->arr_n; j++) {
                    uint64_t v = 0;
                    memcpy(&v, a + j * esz, esz); /* host order: little-endian hosts only, like ggml */
                    put_le(s, v, esz);
                }
            }
        } else {
            put_le(s, e->bits, vtype_size(e->type));
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(s, t->name);
        put_le(s, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) put_le(s, t->ne[d], 8);
        put_le(s, t->type, 4);
        put_le(s, off, 8);
        off += (t->nbytes + align - 1) / align * align;
    }
    put_pad(s, align);
    for (size_t i = 0; i < w->n_t; i++) {
        put(s, w->t[i].data, w->t[i].nbytes);
        put_pad(s, align);
    }
}

static sd_status check_alignment(const sd_gguf_writer *w, uint64_t *align) {
    if (!w) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: NULL writer");
    *align = writer_alignment(w);
    if (!is_pow2(*align) || *align > (1u << 20))
        return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: general.alignment must be a uint32 power of two <= 2^20");
    return SD_OK;
}

sd_status sd_gguf_write_mem(const sd_gguf_writer *w, void **buf, size_t *len) {
    uint64_t align;
    sd_status st = check_alignment(w, &align);
    if (st) return st;
    if (!buf || !len) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: NULL output pointer");
    *buf = NULL;
    *len = 0;
    sink count = {0};
    serialise(w, align, &count);
    if (count.pos > SIZE_MAX) return sd_fail(SD_ERR_NOMEM, "gguf writer: %" PRIu64 " bytes do not fit in memory", count.pos);
    sink s = {.mem = malloc((size_t)count.pos)};
    if (!s.mem) return sd_fail(SD_ERR_NOMEM, "gguf writer: no memory for %" PRIu64 " bytes", count.pos);
    serialise(w, align, &s);
    *buf = s.mem;
    *len = (size_t)s.pos;
    return SD_OK;
}

sd_status sd_gguf_write_file(const sd_gguf_writer *w, const char *path) {
    uint64_t align;
    sd_status st = check_alignment(w, &align);
    if (st) return st;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "gguf writer: NULL path");
    FILE *f = fopen(path, "wb");
    if (!f) return sd_fail(SD_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    sink s = {.f = f};
    errno = 0;
    serialise(w, align, &s);
    int close_err = fclose(f) != 0 ? errno : 0;
    if (s.err || close_err) {
        remove(path); /* a truncated model file would only fail later, less clearly */
        return sd_fail(SD_ERR_IO, "%s: write failed: %s", path, strerror(s.err ? s.err : close_err));
    }
    return SD_OK;
}
