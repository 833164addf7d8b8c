/* GGUF v2/v3 container: a bounds-checked parser over (buf, len) and a writer.
 * The parser never copies tensor data: views point into the caller's buffer (the mmap). */
#ifndef SPECDEC_GGUF_H
#define SPECDEC_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/status.h"

#define SD_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define SD_GGUF_DEFAULT_ALIGNMENT 32

typedef enum {
    SD_GGUF_UINT8 = 0,
    SD_GGUF_INT8 = 1,
    SD_GGUF_UINT16 = 2,
    SD_GGUF_INT16 = 3,
    SD_GGUF_UINT32 = 4,
    SD_GGUF_INT32 = 5,
    SD_GGUF_FLOAT32 = 6,
    SD_GGUF_BOOL = 7,
    SD_GGUF_STRING = 8,
    SD_GGUF_ARRAY = 9,
    SD_GGUF_UINT64 = 10,
    SD_GGUF_INT64 = 11,
    SD_GGUF_FLOAT64 = 12,
} sd_gguf_vtype;

/* A string inside the buffer: not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} sd_str;

typedef struct {
    sd_str key;
    sd_gguf_vtype type;
    union {
        uint64_t u64; /* every unsigned integer type and bool */
        int64_t i64;  /* every signed integer type */
        double f64;   /* FLOAT32 and FLOAT64 */
        sd_str str;
    } v;
    /* type == SD_GGUF_ARRAY: */
    sd_gguf_vtype arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data; /* first element (fixed-size element types) */
    sd_str *arr_strs;        /* arr_type == STRING: arr_n entries (owned by the sd_gguf) */
} sd_gguf_kv;

typedef struct {
    sd_str name;
    uint32_t n_dims;
    uint64_t ne[4];   /* ne[0] is the contiguous (innermost) dimension; unused dims are 1 */
    uint32_t type;    /* ggml type id (sd_type) */
    uint64_t offset;  /* relative to the start of the data section */
    const void *data; /* buf + data_start + offset, checked to lie inside buf */
    uint64_t nbytes;
} sd_gguf_tensor;

typedef struct sd_gguf sd_gguf;

/* Parses a whole GGUF image. `what` names the source in error messages (a path).
 * Checks: magic, version 2 or 3, counts, every string/array length and tensor extent
 * against len (no size_t overflow), known value and tensor types, n_dims <= 4, the
 * alignment, and that tensor data lies inside buf. On failure *out is NULL. */
sd_status sd_gguf_parse(const void *buf, size_t len, const char *what, sd_gguf **out);
void sd_gguf_free(sd_gguf *g); /* NULL is fine */

uint32_t sd_gguf_version(const sd_gguf *g);
uint64_t sd_gguf_alignment(const sd_gguf *g);
uint64_t sd_gguf_data_offset(const sd_gguf *g); /* start of the tensor data section */

int64_t sd_gguf_n_kv(const sd_gguf *g);
const sd_gguf_kv *sd_gguf_kv_at(const sd_gguf *g, int64_t i);
const sd_gguf_kv *sd_gguf_find_kv(const sd_gguf *g, const char *key); /* NULL if absent */

int64_t sd_gguf_n_tensors(const sd_gguf *g);
const sd_gguf_tensor *sd_gguf_tensor_at(const sd_gguf *g, int64_t i);
const sd_gguf_tensor *sd_gguf_find_tensor(const sd_gguf *g, const char *name);

/* Typed getters. Absent key -> SD_ERR_FORMAT ("missing key"); a value of the wrong
 * type or out of range -> SD_ERR_FORMAT naming the key. Integer getters accept any
 * integer type whose value fits. */
sd_status sd_gguf_get_u32(const sd_gguf *g, const char *key, uint32_t *out);
sd_status sd_gguf_get_f32(const sd_gguf *g, const char *key, float *out);
sd_status sd_gguf_get_str(const sd_gguf *g, const char *key, sd_str *out);
sd_status sd_gguf_get_bool(const sd_gguf *g, const char *key, int *out);
/* Array getter: checks the element type, returns the kv. */
sd_status sd_gguf_get_arr(const sd_gguf *g, const char *key, sd_gguf_vtype elem, const sd_gguf_kv **out);

/* 1 when the sd_str equals the C string. */
int sd_str_eq(sd_str s, const char *c);

/* ---- writer ---- */
typedef struct sd_gguf_writer sd_gguf_writer;

sd_gguf_writer *sd_gguf_writer_create(void); /* NULL on OOM */
void sd_gguf_writer_free(sd_gguf_writer *w);  /* NULL is fine */

/* Metadata setters copy key and value. Order of insertion is kept. */
sd_status sd_gguf_set_u32(sd_gguf_writer *w, const char *key, uint32_t v);
sd_status sd_gguf_set_i32(sd_gguf_writer *w, const char *key, int32_t v);
sd_status sd_gguf_set_f32(sd_gguf_writer *w, const char *key, float v);
sd_status sd_gguf_set_bool(sd_gguf_writer *w, const char *key, int v);
sd_status sd_gguf_set_str(sd_gguf_writer *w, const char *key, const char *v);
sd_status sd_gguf_set_arr_str(sd_gguf_writer *w, const char *key, const char *const *v, uint64_t n);
sd_status sd_gguf_set_arr_f32(sd_gguf_writer *w, const char *key, const float *v, uint64_t n);
sd_status sd_gguf_set_arr_i32(sd_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);

/* Adds a tensor; data is copied. ne[0] is the innermost dimension. nbytes must equal
 * what the type and shape imply. */
sd_status sd_gguf_add_tensor(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                             const uint64_t *ne, const void *data, size_t nbytes);

/* Serialises (version 3, alignment 32) to a malloc'd buffer or a file. */
sd_status sd_gguf_write_mem(const sd_gguf_writer *w, void **buf, size_t *len);
sd_status sd_gguf_write_file(const sd_gguf_writer *w, const char *path);

#endif
