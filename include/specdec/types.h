/* Tensor element types (numbered as ggml numbers them, so GGUF type ids map 1:1) and
 * the 2-D weight view that kernels consume. */
#ifndef SPECDEC_TYPES_H
#define SPECDEC_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SD_TYPE_F32 = 0,
    SD_TYPE_F16 = 1,
    SD_TYPE_Q4_0 = 2,
    SD_TYPE_Q4_1 = 3,
    SD_TYPE_Q5_0 = 6,
    SD_TYPE_Q5_1 = 7,
    SD_TYPE_Q8_0 = 8,
    SD_TYPE_Q8_1 = 9,
    SD_TYPE_Q2_K = 10,
    SD_TYPE_Q3_K = 11,
    SD_TYPE_Q4_K = 12,
    SD_TYPE_Q5_K = 13,
    SD_TYPE_Q6_K = 14,
    SD_TYPE_Q8_K = 15,
    SD_TYPE_BF16 = 30,
    SD_TYPE_COUNT = 40,
} sd_type;

typedef struct {
    const char *name;  /* "f32", "q4_0", ... */
    int block_size;    /* elements per block (1 for plain floats) */
    int type_size;     /* bytes per block */
    int supported;     /* 1 when the kernels can compute with it */
} sd_type_traits;

/* Traits of a ggml type id, or NULL when the id is unknown. */
const sd_type_traits *sd_type_info(uint32_t type);

/* Bytes of one row of n elements; 0 when n is not a multiple of the block size
 * or the type is unknown. */
size_t sd_type_row_bytes(uint32_t type, int64_t n);

/* A weight matrix as kernels see it: rows x cols, row-major, rows of row_bytes each.
 * y = W x means y[r] = dot(row r, x). A GGUF tensor with ne = {cols, rows}. */
typedef struct {
    sd_type type;
    int64_t rows;
    int64_t cols;
    size_t row_bytes;
    const void *data; /* usually points into the read-only mmap of the model file */
    const void *packed; /* the same rows regrouped for the kernels (Q4_0), owned by the
                           model, or NULL; data stays the file's layout for everything else */
} sd_tensor;

#endif
