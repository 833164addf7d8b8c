/* What the GGUF parser (gguf_parse.c) and writer (gguf_serialise.c) share about the encoding:
 * the value types' sizes, the tensor dimension limit, the alignment rule. */
#ifndef SD_MODEL_GGUF_FORMAT_H
#define SD_MODEL_GGUF_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define GGUF_MAX_DIMS 4
#define GGUF_N_VTYPES 13 /* value types SD_GGUF_UINT8 .. SD_GGUF_FLOAT64 */

/* Encoded size of a fixed-size value type; 0 for string, array and unknown ids. */
static inline size_t vtype_size(uint32_t t) {
    static const unsigned char sizes[GGUF_N_VTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_N_VTYPES ? sizes[t] : 0;
}

static inline int is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

#endif
