/* ggml tensor type traits (block size, bytes per block) and row sizes.
 * The numbers mirror ggml's type_traits so that GGUF tensor extents are computed exactly as llama.cpp does. */
#include "specdec/types.h"

/* Indexed by ggml type id; ids ggml retired or we do not know have a NULL name. */
static const sd_type_traits k_traits[SD_TYPE_COUNT] = {
    [SD_TYPE_F32] = {"f32", 1, 4, 1},
    [SD_TYPE_F16] = {"f16", 1, 2, 1},
    [SD_TYPE_Q4_0] = {"q4_0", 32, 18, 1},
    [SD_TYPE_Q4_1] = {"q4_1", 32, 20, 0},
    [SD_TYPE_Q5_0] = {"q5_0", 32, 22, 1},
    [SD_TYPE_Q5_1] = {"q5_1", 32, 24, 0},
    [SD_TYPE_Q8_0] = {"q8_0", 32, 34, 1},
    [SD_TYPE_Q8_1] = {"q8_1", 32, 36, 0},
    [SD_TYPE_Q2_K] = {"q2_K", 256, 84, 0},
    [SD_TYPE_Q3_K] = {"q3_K", 256, 110, 0},
    [SD_TYPE_Q4_K] = {"q4_K", 256, 144, 1},
    [SD_TYPE_Q5_K] = {"q5_K", 256, 176, 0},
    [SD_TYPE_Q6_K] = {"q6_K", 256, 210, 1},
    [SD_TYPE_Q8_K] = {"q8_K", 256, 292, 0},
    [SD_TYPE_BF16] = {"bf16", 1, 2, 1},
};

const sd_type_traits *sd_type_info(uint32_t type) {
    if (type >= SD_TYPE_COUNT || !k_traits[type].name) return NULL;
    return &k_traits[type];
}

size_t sd_type_row_bytes(uint32_t type, int64_t n) {
    const sd_type_traits *t = sd_type_info(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    uint64_t blocks = (uint64_t)(n / t->block_size);
    /* A row too large for size_t is as unusable as a malformed one: report 0 too. */
    if (blocks > SIZE_MAX / (uint64_t)t->type_size) return 0;
    return (size_t)blocks * (size_t)t->type_size;
}
