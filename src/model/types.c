/* ggml tensor type traits (block size, bytes per block), row sizes, type names, and the types
 * conversion writes. The numbers mirror ggml's type_traits so that GGUF tensor extents are
 * computed exactly as llama.cpp does. */
#include <ctype.h>

#include "specdec/quant.h"
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

sd_type sd_quant_fallback(sd_type want, int64_t cols) {
    if (sd_type_row_bytes(want, cols)) return want;
    if (want == SD_TYPE_Q4_K && sd_type_row_bytes(SD_TYPE_Q5_0, cols)) return SD_TYPE_Q5_0;
    if (want == SD_TYPE_Q6_K && sd_type_row_bytes(SD_TYPE_Q8_0, cols)) return SD_TYPE_Q8_0;
    return SD_TYPE_F16;
}

int sd_type_from_name(const char *s) {
    static const sd_type k[] = {SD_TYPE_F32,  SD_TYPE_F16,  SD_TYPE_BF16, SD_TYPE_Q8_0,
                                SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K};
    if (!s) return -1;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const char *n = sd_type_info(k[i])->name;
        size_t j = 0;
        while (n[j] && s[j] && tolower((unsigned char)n[j]) == tolower((unsigned char)s[j])) j++;
        if (!n[j] && !s[j]) return (int)k[i];
    }
    return -1;
}

uint32_t sd_quant_file_type(sd_type t) {
    switch (t) {
    case SD_TYPE_F32: return 0;  /* LLAMA_FTYPE_ALL_F32 */
    case SD_TYPE_F16: return 1;  /* MOSTLY_F16 */
    case SD_TYPE_Q4_0: return 2; /* MOSTLY_Q4_0 */
    case SD_TYPE_Q8_0: return 7; /* MOSTLY_Q8_0 */
    case SD_TYPE_Q5_0: return 8; /* MOSTLY_Q5_0 */
    case SD_TYPE_Q4_K: return 14; /* MOSTLY_Q4_K_S: every matrix q4_K */
    case SD_TYPE_Q6_K: return 18; /* MOSTLY_Q6_K */
    case SD_TYPE_BF16: return 32; /* MOSTLY_BF16 */
    default: return 0;
    }
}
