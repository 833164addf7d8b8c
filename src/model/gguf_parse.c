/* GGUF v2/v3 parser: treats every byte as hostile (bounds- and overflow-checked views into the
 * caller's buffer, no tensor data copied); lookups and typed getters over the parsed file. */
#include "specdec/gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_format.h"
#include "specdec/types.h"

/* Arrays of arrays are legal GGUF but nobody uses deep ones; the limit keeps the recursion
 * (and the work per byte) bounded on hostile input. */
#define GGUF_MAX_ARRAY_DEPTH 8
/* Names are printed truncated so a hostile 1 GB key cannot flood the error buffer. */
#define NAME_SHOWN 96
#define SHOW(s) (int)((s).len < NAME_SHOWN ? (s).len : NAME_SHOWN), (s).ptr

/* Smallest encodings, used to reject counts the remaining bytes could never hold
 * before anything is allocated for them. */
#define MIN_STR_BYTES 8u          /* u64 length, empty string */
#define MIN_KV_BYTES 13u          /* empty key, u32 type, one-byte value */
#define MIN_TENSOR_BYTES 24u      /* empty name, u32 n_dims = 0, u32 type, u64 offset */
#define MIN_ARRAY_BYTES 12u       /* u32 element type, u64 count */

/* ------------------------------------------------------------------ value types */

static const char *const k_vtype_names[GGUF_N_VTYPES] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

static const char *vtype_name(uint32_t t) { return t < GGUF_N_VTYPES ? k_vtype_names[t] : "unknown"; }

static int vtype_is_unsigned(uint32_t t) {
    return t == SD_GGUF_UINT8 || t == SD_GGUF_UINT16 || t == SD_GGUF_UINT32 || t == SD_GGUF_UINT64;
}

static int vtype_is_signed(uint32_t t) {
    return t == SD_GGUF_INT8 || t == SD_GGUF_INT16 || t == SD_GGUF_INT32 || t == SD_GGUF_INT64;
}

/* Little-endian decoding byte by byte: no alignment assumptions, no host-endianness ones. */
static uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ------------------------------------------------------------------ name index */

/* Open-addressing hash set over names, so duplicate detection and lookups stay O(1) even
 * for files with millions of (hostile) entries. Slots hold index + 1; 0 is empty. */
typedef struct {
    const sd_str *names; /* names[i] for inserted index i */
    int64_t *slots;
    size_t mask;
} name_index;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static sd_status index_init(name_index *ix, const sd_str *names, uint64_t n) {
    size_t cap = 8;
    while (cap < 2 * n) cap *= 2; /* n is bounded by the buffer size, so this cannot overflow */
    ix->names = names;
    ix->mask = cap - 1;
    ix->slots = calloc(cap, sizeof *ix->slots);
    return ix->slots ? SD_OK : SD_ERR_NOMEM;
}

static int64_t index_find(const name_index *ix, const char *p, size_t n) {
    if (!ix->slots) return -1;
    size_t h = (size_t)hash_bytes(p, n) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        int64_t s = ix->slots[h];
        if (s == 0) return -1;
        const sd_str *e = &ix->names[s - 1];
        if (e->len == n && (n == 0 || memcmp(e->ptr, p, n) == 0)) return s - 1;
    }
}

/* Inserts index i (whose name is names[i]); returns the earlier index with that name, or -1. */
static int64_t index_insert(name_index *ix, int64_t i) {
    const sd_str *s = &ix->names[i];
    size_t h = (size_t)hash_bytes(s->ptr, (size_t)s->len) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        int64_t e = ix->slots[h];
        if (e == 0) {
            ix->slots[h] = i + 1;
            return -1;
        }
        const sd_str *o = &ix->names[e - 1];
        if (o->len == s->len && (s->len == 0 || memcmp(o->ptr, s->ptr, (size_t)s->len) == 0)) return e - 1;
    }
}

/* ------------------------------------------------------------------ parsed file */

struct sd_gguf {
    char *what;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    sd_gguf_kv *kv;
    sd_str *kv_names; /* the index needs a dense sd_str array */
    name_index kv_ix;
    int64_t n_tensors;
    sd_gguf_tensor *tensors;
    sd_str *tensor_names;
    name_index tensor_ix;
};

void sd_gguf_free(sd_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].arr_strs);
    free(g->kv);
    free(g->kv_names);
    free(g->kv_ix.slots);
    free(g->tensors);
    free(g->tensor_names);
    free(g->tensor_ix.slots);
    free(g->what);
    free(g);
}

/* ------------------------------------------------------------------ reader */

typedef struct {
    const uint8_t *p;
    size_t len;
    size_t pos;
    const char *what;
    char ctx[160]; /* what is being read, for truncation messages ("value of key general.name") */
} reader;

static size_t left(const reader *r) { return r->len - r->pos; }

static sd_status need(reader *r, uint64_t n) {
    if (n <= left(r)) return SD_OK;
    return sd_fail(SD_ERR_FORMAT, "%s: truncated at byte %zu reading %s (need %" PRIu64 " bytes, %zu left)",
                   r->what, r->pos, r->ctx, n, left(r));
}

static sd_status rd_u32(reader *r, uint32_t *v) {
    sd_status st = need(r, 4);
    if (st) return st;
    *v = (uint32_t)load_le(r->p + r->pos, 4);
    r->pos += 4;
    return SD_OK;
}

static sd_status rd_u64(reader *r, uint64_t *v) {
    sd_status st = need(r, 8);
    if (st) return st;
    *v = load_le(r->p + r->pos, 8);
    r->pos += 8;
    return SD_OK;
}

static sd_status rd_str(reader *r, sd_str *s) {
    uint64_t n;
    size_t at = r->pos;
    sd_status st = rd_u64(r, &n);
    if (st) return st;
    /* Compared against what is left, never added to pos: n may be near UINT64_MAX. */
    if (n > left(r))
        return sd_fail(SD_ERR_FORMAT, "%s: %s: string length %" PRIu64 " at byte %zu runs past the end (%zu bytes left)",
                       r->what, r->ctx, n, at, left(r));
    s->ptr = (const char *)r->p + r->pos;
    s->len = n;
    r->pos += (size_t)n;
    return SD_OK;
}

/* Reads an array header and checks that n elements could fit in what is left. */
static sd_status rd_array_header(reader *r, const char *key_what, uint32_t *et, uint64_t *n) {
    sd_status st = rd_u32(r, et);
    if (!st) st = rd_u64(r, n);
    if (st) return st;
    if (*et >= GGUF_N_VTYPES)
        return sd_fail(SD_ERR_FORMAT, "%s: %s: unknown array element type %" PRIu32, r->what, key_what, *et);
    size_t esz = vtype_size(*et);
    uint64_t min = esz ? esz : (*et == SD_GGUF_STRING ? MIN_STR_BYTES : MIN_ARRAY_BYTES);
    if (*n > left(r) / min)
        return sd_fail(SD_ERR_FORMAT, "%s: %s: array of %" PRIu64 " %s elements runs past the end (%zu bytes left)",
                       r->what, key_what, *n, vtype_name(*et), left(r));
    return SD_OK;
}

static sd_status check_bools(reader *r, const char *key_what, const uint8_t *b, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (b[i] > 1)
            return sd_fail(SD_ERR_FORMAT, "%s: %s: bool value %u is neither 0 nor 1", r->what, key_what, b[i]);
    return SD_OK;
}

/* Walks the elements of an array whose header has been read (used for nested arrays, whose
 * contents the public struct does not expose element by element). */
static sd_status skip_array_body(reader *r, const char *key_what, uint32_t et, uint64_t n, int depth) {
    size_t esz = vtype_size(et);
    if (esz) {
        const uint8_t *b = r->p + r->pos;
        r->pos += (size_t)(n * esz); /* bounded by rd_array_header */
        return et == SD_GGUF_BOOL ? check_bools(r, key_what, b, n) : SD_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        sd_status st;
        if (et == SD_GGUF_STRING) {
            sd_str s;
            st = rd_str(r, &s);
        } else {
            if (depth >= GGUF_MAX_ARRAY_DEPTH)
                return sd_fail(SD_ERR_FORMAT, "%s: %s: arrays nested deeper than %d levels", r->what, key_what,
                               GGUF_MAX_ARRAY_DEPTH);
            uint32_t iet;
            uint64_t in;
            st = rd_array_header(r, key_what, &iet, &in);
            if (!st) st = skip_array_body(r, key_what, iet, in, depth + 1);
        }
        if (st) return st;
    }
    return SD_OK;
}

static sd_status parse_value(reader *r, sd_gguf_kv *kv, const char *key_what) {
    uint32_t t = kv->type;
    size_t esz = vtype_size(t);
    if (esz) {
        sd_status st = need(r, esz);
        if (st) return st;
        uint64_t raw = load_le(r->p + r->pos, esz);
        r->pos += esz;
        switch (t) {
        case SD_GGUF_INT8: kv->v.i64 = (int8_t)raw; break;
        case SD_GGUF_INT16: kv->v.i64 = (int16_t)raw; break;
        case SD_GGUF_INT32: kv->v.i64 = (int32_t)raw; break;
        case SD_GGUF_INT64: kv->v.i64 = (int64_t)raw; break;
        case SD_GGUF_FLOAT32: {
            uint32_t bits = (uint32_t)raw;
            float f;
            memcpy(&f, &bits, sizeof f);
            kv->v.f64 = f;
            break;
        }
        case SD_GGUF_FLOAT64: memcpy(&kv->v.f64, &raw, sizeof kv->v.f64); break;
        case SD_GGUF_BOOL:
            if (raw > 1)
                return sd_fail(SD_ERR_FORMAT, "%s: %s: bool value %" PRIu64 " is neither 0 nor 1", r->what, key_what,
                               raw);
            kv->v.u64 = raw;
            break;
        default: kv->v.u64 = raw; break; /* unsigned integers */
        }
        return SD_OK;
    }
    if (t == SD_GGUF_STRING) return rd_str(r, &kv->v.str);

    /* t == SD_GGUF_ARRAY (unknown types were rejected by the caller) */
    uint32_t et;
    uint64_t n;
    sd_status st = rd_array_header(r, key_what, &et, &n);
    if (st) return st;
    kv->arr_type = (sd_gguf_vtype)et;
    kv->arr_n = n;
    kv->arr_data = r->p + r->pos;
    if (et != SD_GGUF_STRING) return skip_array_body(r, key_what, et, n, 1);
    if (n > 0) {
        kv->arr_strs = malloc((size_t)n * sizeof *kv->arr_strs); /* n <= left/8: no overflow */
        if (!kv->arr_strs)
            return sd_fail(SD_ERR_NOMEM, "%s: %s: no memory for %" PRIu64 " strings", r->what, key_what, n);
    }
    for (uint64_t i = 0; i < n; i++) {
        st = rd_str(r, &kv->arr_strs[i]);
        if (st) return st;
    }
    return SD_OK;
}

static sd_status parse_kvs(reader *r, sd_gguf *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        sd_gguf_kv *kv = &g->kv[i];
        snprintf(r->ctx, sizeof r->ctx, "key of metadata entry #%" PRId64, i);
        sd_status st = rd_str(r, &kv->key);
        if (st) return st;
        g->kv_names[i] = kv->key;
        int64_t dup = index_insert(&g->kv_ix, i);
        if (dup >= 0)
            return sd_fail(SD_ERR_FORMAT, "%s: duplicate key %.*s (metadata entries #%" PRId64 " and #%" PRId64 ")",
                           r->what, SHOW(kv->key), dup, i);
        char key_what[NAME_SHOWN + 8];
        snprintf(key_what, sizeof key_what, "key %.*s", SHOW(kv->key));
        snprintf(r->ctx, sizeof r->ctx, "type of key %.*s", SHOW(kv->key));
        uint32_t t;
        st = rd_u32(r, &t);
        if (st) return st;
        if (t >= GGUF_N_VTYPES)
            return sd_fail(SD_ERR_FORMAT, "%s: key %.*s: unknown value type %" PRIu32, r->what, SHOW(kv->key), t);
        kv->type = (sd_gguf_vtype)t;
        snprintf(r->ctx, sizeof r->ctx, "value of key %.*s", SHOW(kv->key));
        st = parse_value(r, kv, key_what);
        if (st) return st;
    }
    return SD_OK;
}

static sd_status read_alignment(const char *what, sd_gguf *g) {
    g->alignment = SD_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = index_find(&g->kv_ix, "general.alignment", strlen("general.alignment"));
    if (i < 0) return SD_OK;
    const sd_gguf_kv *kv = &g->kv[i];
    if (kv->type != SD_GGUF_UINT32)
        return sd_fail(SD_ERR_FORMAT, "%s: general.alignment has type %s, expected uint32", what,
                       vtype_name(kv->type));
    if (!is_pow2(kv->v.u64))
        return sd_fail(SD_ERR_FORMAT, "%s: general.alignment %" PRIu64 " is not a nonzero power of two", what,
                       kv->v.u64);
    g->alignment = kv->v.u64;
    return SD_OK;
}

static sd_status parse_tensor_info(reader *r, sd_gguf *g, int64_t i) {
    sd_gguf_tensor *t = &g->tensors[i];
    snprintf(r->ctx, sizeof r->ctx, "name of tensor #%" PRId64, i);
    sd_status st = rd_str(r, &t->name);
    if (st) return st;
    g->tensor_names[i] = t->name;
    int64_t dup = index_insert(&g->tensor_ix, i);
    if (dup >= 0)
        return sd_fail(SD_ERR_FORMAT, "%s: duplicate tensor %.*s (tensors #%" PRId64 " and #%" PRId64 ")", r->what,
                       SHOW(t->name), dup, i);
    snprintf(r->ctx, sizeof r->ctx, "info of tensor %.*s", SHOW(t->name));
    if ((st = rd_u32(r, &t->n_dims))) return st;
    if (t->n_dims > GGUF_MAX_DIMS)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: n_dims %" PRIu32 " > %d", r->what, SHOW(t->name), t->n_dims,
                       GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    /* Elements are counted in int64 like ggml does, so every later int64 use is safe. */
    uint64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((st = rd_u64(r, &t->ne[d]))) return st;
        if (t->ne[d] > (uint64_t)INT64_MAX || (t->ne[d] != 0 && nel > (uint64_t)INT64_MAX / t->ne[d]))
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: shape overflows at ne[%" PRIu32 "] = %" PRIu64, r->what,
                           SHOW(t->name), d, t->ne[d]);
        nel *= t->ne[d];
    }
    if ((st = rd_u32(r, &t->type))) return st;
    const sd_type_traits *tt = sd_type_info(t->type);
    if (!tt) {
        /* Inside ggml's id range the file is probably fine and just newer than us. */
        sd_status code = t->type < SD_TYPE_COUNT ? SD_ERR_UNSUPPORTED : SD_ERR_FORMAT;
        return sd_fail(code, "%s: tensor %.*s: unknown ggml type %" PRIu32, r->what, SHOW(t->name), t->type);
    }
    if (t->ne[0] % (uint64_t)tt->block_size != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: ne[0] = %" PRIu64 " is not a multiple of the %s block size %d",
                       r->what, SHOW(t->name), t->ne[0], tt->name, tt->block_size);
    /* nel / block_size blocks of type_size bytes; bounded by INT64_MAX elements, so only the
     * multiplication by type_size (<= 292 > block_size for quantised types) can overflow. */
    uint64_t blocks = nel / (uint64_t)tt->block_size;
    if (blocks > UINT64_MAX / (uint64_t)tt->type_size)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: byte size overflows (%" PRIu64 " %s blocks)", r->what,
                       SHOW(t->name), blocks, tt->name);
    t->nbytes = blocks * (uint64_t)tt->type_size;
    if ((st = rd_u64(r, &t->offset))) return st;
    if (t->offset % g->alignment != 0)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                       r->what, SHOW(t->name), t->offset, g->alignment);
    return SD_OK;
}

static sd_status place_tensors(reader *r, sd_gguf *g) {
    for (int64_t i = 0; i < g->n_tensors; i++) {
        sd_gguf_tensor *t = &g->tensors[i];
        uint64_t start = g->data_offset + t->offset;
        if (start < t->offset || start + t->nbytes < start)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: data at offset %" PRIu64 " + %" PRIu64 " bytes overflows",
                           r->what, SHOW(t->name), t->offset, t->nbytes);
        uint64_t end = start + t->nbytes;
        if (end > r->len)
            return sd_fail(SD_ERR_FORMAT, "%s: tensor %.*s: data [%" PRIu64 ", %" PRIu64 ") outside file of %zu bytes",
                           r->what, SHOW(t->name), start, end, r->len);
        t->data = r->p + start;
    }
    return SD_OK;
}

static sd_status parse_header(reader *r, sd_gguf *g, uint64_t *n_kv, uint64_t *n_tensors) {
    if (r->len == 0) return sd_fail(SD_ERR_FORMAT, "%s: empty file (0 bytes, not a GGUF file)", r->what);
    if (r->len < 4)
        return sd_fail(SD_ERR_FORMAT, "%s: file of %zu bytes is too short for the GGUF magic", r->what, r->len);
    uint32_t magic = (uint32_t)load_le(r->p, 4);
    if (magic != SD_GGUF_MAGIC)
        return sd_fail(SD_ERR_FORMAT, "%s: bad magic 0x%08" PRIx32 " (not a GGUF file)", r->what, magic);
    r->pos = 4;
    snprintf(r->ctx, sizeof r->ctx, "the header");
    sd_status st = rd_u32(r, &g->version);
    if (st) return st;
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
        if (swapped == 2 || swapped == 3)
            return sd_fail(SD_ERR_UNSUPPORTED, "%s: big-endian GGUF (version %" PRIu32 " byte-swapped) is not supported",
                           r->what, swapped);
        return sd_fail(SD_ERR_UNSUPPORTED, "%s: unsupported GGUF version %" PRIu32 " (need 2 or 3)", r->what, v);
    }
    if ((st = rd_u64(r, n_tensors)) || (st = rd_u64(r, n_kv))) return st;
    if (*n_kv > left(r) / MIN_KV_BYTES)
        return sd_fail(SD_ERR_FORMAT, "%s: kv_count %" PRIu64 " cannot fit in the %zu bytes left", r->what, *n_kv,
                       left(r));
    size_t rest = left(r) - (size_t)*n_kv * MIN_KV_BYTES;
    if (*n_tensors > rest / MIN_TENSOR_BYTES)
        return sd_fail(SD_ERR_FORMAT, "%s: tensor_count %" PRIu64 " cannot fit in the %zu bytes left", r->what,
                       *n_tensors, left(r));
    return SD_OK;
}

static sd_status alloc_tables(sd_gguf *g, const char *what, uint64_t n_kv, uint64_t n_tensors) {
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    /* calloc(1, ...) at least, so an empty table is not mistaken for a failed allocation. */
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->kv_names = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv_names);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->tensor_names = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensor_names);
    if (!g->kv || !g->kv_names || !g->tensors || !g->tensor_names ||
        index_init(&g->kv_ix, g->kv_names, n_kv) || index_init(&g->tensor_ix, g->tensor_names, n_tensors)) {
        g->n_kv = 0; /* nothing to free inside the entries yet */
        return sd_fail(SD_ERR_NOMEM, "%s: no memory for %" PRIu64 " keys and %" PRIu64 " tensors", what, n_kv,
                       n_tensors);
    }
    return SD_OK;
}

sd_status sd_gguf_parse(const void *buf, size_t len, const char *what, sd_gguf **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "sd_gguf_parse: out is NULL");
    *out = NULL;
    if (!what) what = "gguf";
    if (!buf && len > 0) return sd_fail(SD_ERR_INVALID_ARG, "%s: buffer is NULL", what);

    reader r = {.p = buf, .len = len, .pos = 0, .what = what};
    sd_gguf *g = calloc(1, sizeof *g);
    if (!g) return sd_fail(SD_ERR_NOMEM, "%s: no memory", what);
    g->what = strdup(what);
    sd_status st = g->what ? SD_OK : sd_fail(SD_ERR_NOMEM, "%s: no memory", what);
    uint64_t n_kv = 0, n_tensors = 0;
    if (!st) st = parse_header(&r, g, &n_kv, &n_tensors);
    if (!st) st = alloc_tables(g, what, n_kv, n_tensors);
    if (!st) st = parse_kvs(&r, g);
    if (!st) st = read_alignment(what, g);
    for (int64_t i = 0; !st && i < g->n_tensors; i++) st = parse_tensor_info(&r, g, i);
    if (!st) {
        /* The data section starts at the next multiple of the alignment. A file without
         * tensors may end before it; only tensor extents are checked against len. */
        g->data_offset = ((uint64_t)r.pos + g->alignment - 1) & ~(g->alignment - 1);
        st = place_tensors(&r, g);
    }
    if (st) {
        sd_gguf_free(g);
        return st;
    }
    *out = g;
    return SD_OK;
}

/* ------------------------------------------------------------------ accessors */

uint32_t sd_gguf_version(const sd_gguf *g) { return g->version; }
uint64_t sd_gguf_alignment(const sd_gguf *g) { return g->alignment; }
uint64_t sd_gguf_data_offset(const sd_gguf *g) { return g->data_offset; }
int64_t sd_gguf_n_kv(const sd_gguf *g) { return g->n_kv; }
int64_t sd_gguf_n_tensors(const sd_gguf *g) { return g->n_tensors; }

const sd_gguf_kv *sd_gguf_kv_at(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const sd_gguf_kv *sd_gguf_find_kv(const sd_gguf *g, const char *key) {
    int64_t i = index_find(&g->kv_ix, key, strlen(key));
    return i >= 0 ? &g->kv[i] : NULL;
}

const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name) {
    int64_t i = index_find(&g->tensor_ix, name, strlen(name));
    return i >= 0 ? &g->tensors[i] : NULL;
}

int sd_str_eq(sd_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

static sd_status find_or_fail(const sd_gguf *g, const char *key, const sd_gguf_kv **kv) {
    *kv = sd_gguf_find_kv(g, key);
    if (!*kv) return sd_fail(SD_ERR_FORMAT, "%s: missing key %s", g->what, key);
    return SD_OK;
}

static sd_status wrong_type(const sd_gguf *g, const char *key, const sd_gguf_kv *kv, const char *expected) {
    return sd_fail(SD_ERR_FORMAT, "%s: key %s has type %s, expected %s", g->what, key, vtype_name(kv->type), expected);
}

sd_status sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out) {
    const sd_gguf_kv *kv;
    sd_status st = find_or_fail(g, key, &kv);
    if (st) return st;
    if (vtype_is_unsigned(kv->type)) {
        if (kv->v.u64 > UINT32_MAX)
            return sd_fail(SD_ERR_FORMAT, "%s: key %s = %" PRIu64 " does not fit in uint32", g->what, key, kv->v.u64);
        *out = (uint32_t)kv->v.u64;
        return SD_OK;
    }
    if (vtype_is_signed(kv->type)) {
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX)
            return sd_fail(SD_ERR_FORMAT, "%s: key %s = %" PRId64 " does not fit in uint32", g->what, key, kv->v.i64);
        *out = (uint32_t)kv->v.i64;
        return SD_OK;
    }
    return wrong_type(g, key, kv, "an integer");
}

sd_status sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out) {
    const sd_gguf_kv *kv;
    sd_status st = find_or_fail(g, key, &kv);
    if (st) return st;
    if (kv->type != SD_GGUF_FLOAT32 && kv->type != SD_GGUF_FLOAT64) return wrong_type(g, key, kv, "float32");
    /* A float64 beyond float range would silently become inf. */
    if (isfinite(kv->v.f64) && fabs(kv->v.f64) > 3.4028234663852886e38)
        return sd_fail(SD_ERR_FORMAT, "%s: key %s = %g does not fit in float32", g->what, key, kv->v.f64);
    *out = (float)kv->v.f64;
    return SD_OK;
}

sd_status sd_gguf_get_str(const sd_gguf *g, const char *key, sd_str *out) {
    const sd_gguf_kv *kv;
    sd_status st = find_or_fail(g, key, &kv);
    if (st) return st;
    if (kv->type != SD_GGUF_STRING) return wrong_type(g, key, kv, "string");
    *out = kv->v.str;
    return SD_OK;
}

sd_status sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out) {
    const sd_gguf_kv *kv;
    sd_status st = find_or_fail(g, key, &kv);
    if (st) return st;
    if (kv->type != SD_GGUF_BOOL) return wrong_type(g, key, kv, "bool");
    *out = kv->v.u64 != 0;
    return SD_OK;
}

sd_status sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype elem, const sd_gguf_kv **out) {
    const sd_gguf_kv *kv;
    sd_status st = find_or_fail(g, key, &kv);
    if (st) return st;
    if (kv->type != SD_GGUF_ARRAY)
        return sd_fail(SD_ERR_FORMAT, "%s: key %s has type %s, expected array of %s", g->what, key,
                       vtype_name(kv->type), vtype_name(elem));
    if (kv->arr_type != elem)
        return sd_fail(SD_ERR_FORMAT, "%s: key %s is an array of %s, expected array of %s", g->what, key,
                       vtype_name(kv->arr_type), vtype_name(elem));
    *out = kv;
    return SD_OK;
}
