/* Fuzz body for the GGUF container parser: arbitrary bytes in; on success every key, string,
 * (nested) array element and tensor extent is re-walked and touched at both ends. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/gguf.h"
#include "specdec/types.h"

static volatile uint8_t g_sink; /* reads the compiler must keep, so ASan sees them */

static int inside(const uint8_t *buf, size_t size, const void *p, uint64_t n) {
    const uint8_t *q = p;
    return q >= buf && q <= buf + size && n <= (uint64_t)(buf + size - q);
}

static void touch(const void *p, uint64_t n) {
    if (n == 0) return;
    const uint8_t *q = p;
    g_sink ^= q[0];
    g_sink ^= q[n - 1];
}

static void check_str(const uint8_t *buf, size_t size, sd_str s) {
    SD_FUZZ_CHECK(s.len == 0 || s.ptr != NULL);
    SD_FUZZ_CHECK(s.len == 0 || inside(buf, size, s.ptr, s.len));
    touch(s.ptr, s.len);
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t elem_size(uint32_t t) {
    static const unsigned char sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sz ? sz[t] : 0;
}

/* Independent re-walk of n elements of type et at p: the parser accepted the array, so the
 * walk must stay inside the buffer. Returns the end, or NULL when it would not. */
static const uint8_t *walk(const uint8_t *p, const uint8_t *end, uint32_t et, uint64_t n, int depth) {
    SD_FUZZ_CHECK(depth <= 64);
    size_t es = elem_size(et);
    if (es) {
        if (n > (uint64_t)(end - p) / es) return NULL;
        touch(p, n * es);
        return p + n * es;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (et == SD_GGUF_STRING) {
            if (end - p < 8) return NULL;
            uint64_t l = le(p, 8);
            p += 8;
            if (l > (uint64_t)(end - p)) return NULL;
            touch(p, l);
            p += l;
        } else if (et == SD_GGUF_ARRAY) {
            if (end - p < 12) return NULL;
            uint32_t iet = (uint32_t)le(p, 4);
            uint64_t in = le(p + 4, 8);
            p = walk(p + 12, end, iet, in, depth + 1);
            if (!p) return NULL;
        } else {
            return NULL; /* the parser rejects unknown element types */
        }
    }
    return p;
}

/* NUL-terminated copy of s, or NULL when s holds a NUL (then no C-string lookup can name it). */
static char *cstr(sd_str s) {
    if (s.len && memchr(s.ptr, 0, (size_t)s.len)) return NULL;
    char *c = malloc((size_t)s.len + 1);
    if (!c) return NULL;
    if (s.len) memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = 0;
    return c;
}

static void walk_kv(const uint8_t *buf, size_t size, const sd_gguf *g, const sd_gguf_kv *kv) {
    check_str(buf, size, kv->key);
    SD_FUZZ_CHECK((uint32_t)kv->type <= SD_GGUF_FLOAT64);
    if (kv->type == SD_GGUF_STRING) check_str(buf, size, kv->v.str);
    if (kv->type == SD_GGUF_BOOL) SD_FUZZ_CHECK(kv->v.u64 <= 1);
    if (kv->type == SD_GGUF_ARRAY) {
        if (kv->arr_type == SD_GGUF_STRING) {
            SD_FUZZ_CHECK(kv->arr_n == 0 || kv->arr_strs != NULL);
            for (uint64_t i = 0; i < kv->arr_n; i++) check_str(buf, size, kv->arr_strs[i]);
        } else {
            SD_FUZZ_CHECK(inside(buf, size, kv->arr_data, 0));
            const uint8_t *e = walk(kv->arr_data, buf + size, kv->arr_type, kv->arr_n, 1);
            SD_FUZZ_CHECK(e != NULL);
        }
    }
    char *key = cstr(kv->key);
    if (!key) return;
    SD_FUZZ_CHECK(sd_gguf_find_kv(g, key) == kv); /* keys are unique */
    /* every typed getter either succeeds or explains itself */
    uint32_t u;
    float f;
    sd_str s;
    int b;
    const sd_gguf_kv *arr;
    if (sd_gguf_get_u32(g, key, &u) != SD_OK) sd_fuzz_check_error();
    if (sd_gguf_get_f32(g, key, &f) != SD_OK) sd_fuzz_check_error();
    if (sd_gguf_get_str(g, key, &s) != SD_OK) sd_fuzz_check_error();
    else check_str(buf, size, s);
    if (sd_gguf_get_bool(g, key, &b) != SD_OK) sd_fuzz_check_error();
    if (sd_gguf_get_arr(g, key, SD_GGUF_STRING, &arr) != SD_OK) sd_fuzz_check_error();
    else SD_FUZZ_CHECK(arr == kv);
    free(key);
}

static void walk_tensor(const uint8_t *buf, size_t size, const sd_gguf *g, const sd_gguf_tensor *t) {
    check_str(buf, size, t->name);
    SD_FUZZ_CHECK(t->n_dims <= 4);
    for (uint32_t d = t->n_dims; d < 4; d++) SD_FUZZ_CHECK(t->ne[d] == 1);
    const sd_type_traits *tt = sd_type_info(t->type);
    SD_FUZZ_CHECK(tt != NULL);
    SD_FUZZ_CHECK(t->ne[0] % (uint64_t)tt->block_size == 0);
    /* nbytes agrees with the shape (the parser bounded the element count by INT64_MAX) */
    unsigned __int128 nel = 1;
    for (int d = 0; d < 4; d++) nel *= t->ne[d];
    SD_FUZZ_CHECK(nel / (unsigned)tt->block_size * (unsigned)tt->type_size == t->nbytes);
    SD_FUZZ_CHECK(t->data != NULL && inside(buf, size, t->data, t->nbytes));
    const uint64_t at = (uint64_t)((const uint8_t *)t->data - buf);
    SD_FUZZ_CHECK(at == sd_gguf_data_offset(g) + t->offset);
    SD_FUZZ_CHECK(at % sd_gguf_alignment(g) == 0);
    touch(t->data, t->nbytes);
    char *name = cstr(t->name);
    if (name) SD_FUZZ_CHECK(sd_gguf_find_tensor(g, name) == t);
    free(name);
}

int sd_fuzz_gguf(const uint8_t *data, size_t size) {
    sd_gguf *g = (sd_gguf *)1; /* must come back NULL on failure */
    sd_clear_error();
    sd_status st = sd_gguf_parse(data, size, "fuzz.gguf", &g);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(g == NULL);
        sd_fuzz_check_error();
        return 0;
    }
    SD_FUZZ_CHECK(g != NULL);
    SD_FUZZ_CHECK(sd_gguf_version(g) == 2 || sd_gguf_version(g) == 3);
    const uint64_t al = sd_gguf_alignment(g);
    SD_FUZZ_CHECK(al && (al & (al - 1)) == 0);
    SD_FUZZ_CHECK(sd_gguf_data_offset(g) % al == 0);
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) walk_kv(data, size, g, sd_gguf_kv_at(g, i));
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) walk_tensor(data, size, g, sd_gguf_tensor_at(g, i));
    SD_FUZZ_CHECK(sd_gguf_kv_at(g, sd_gguf_n_kv(g)) == NULL);
    SD_FUZZ_CHECK(sd_gguf_tensor_at(g, -1) == NULL);
    sd_gguf_free(g);
    return 0;
}
