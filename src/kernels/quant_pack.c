/* The kernels' 16-row layouts of Q4_0, Q8_0, Q4_K and Q6_K matrices (quant_internal.h
 * describes them): packing at load and one group at a time on the fly. */
#include <string.h>

#include "kernels/isa.h"

static void r_pack_group_k(const uint8_t *src, size_t row_bytes, int nrows, int64_t nsb, uint8_t *dst) {
    memset(dst, 0, (size_t)nsb * R16K_SB);
    for (int64_t sb = 0; sb < nsb; sb++) {
        uint8_t *D = dst + (size_t)sb * R16K_SB;
        for (int n = 0; n < nrows; n++) {
            const uint8_t *b = src + (size_t)n * row_bytes + (size_t)sb * SD_Q4_K_BYTES;
            uint8_t sm[16];
            q4_k_scales(b + 4, sm);
            memcpy(D + 2 * n, b, 2);
            memcpy(D + 32 + 2 * n, b + 2, 2);
            for (int j = 0; j < 8; j++) {
                D[64 + 16 * j + n] = sm[j];
                D[192 + 16 * j + n] = sm[8 + j];
            }
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 8; k++) memcpy(D + 320 + 512 * c + 64 * k + 4 * n, b + 16 + 32 * c + 4 * k, 4);
        }
    }
}

static void r_pack_group_q6(const uint8_t *src, size_t row_bytes, int nrows, int64_t nsb, uint8_t *dst) {
    if (nrows < 16) memset(dst, 0, (size_t)nsb * R16Q6_SB);
    for (int64_t sb = 0; sb < nsb; sb++) {
        uint8_t *D = dst + (size_t)sb * R16Q6_SB;
        for (int n = 0; n < nrows; n++) {
            const uint8_t *b = src + (size_t)n * row_bytes + (size_t)sb * SD_Q6_K_BYTES;
            uint8_t v[256]; /* the 6-bit values in element order, as dequantize_row_q6_K reads them */
            for (int half = 0; half < 2; half++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t *ql = b + 64 * half, hq = b[128 + 32 * half + l];
                    v[128 * half + l] = (uint8_t)((ql[l] & 15) | (hq & 3) << 4);
                    v[128 * half + l + 32] = (uint8_t)((ql[l + 32] & 15) | ((hq >> 2) & 3) << 4);
                    v[128 * half + l + 64] = (uint8_t)((ql[l] >> 4) | ((hq >> 4) & 3) << 4);
                    v[128 * half + l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((hq >> 6) & 3) << 4);
                }
            memcpy(D + 2 * n, b + 208, 2);
            for (int j = 0; j < 16; j++) D[32 + 16 * j + n] = b[192 + j];
            if (n == 0) memset(D + 3360, 0, R16Q6_SB - 3360); /* padding: deterministic bytes */
            for (int k = 0; k < 8; k++)
                for (int i = 0; i < 4; i++) {
                    const int e = 4 * k + i;
                    for (int p = 0; p < 4; p++)
                        D[R16Q6_V(p) + 64 * k + 4 * n + i] = (uint8_t)((v[64 * p + e] & 15) | (v[64 * p + 32 + e] & 15) << 4);
                    for (int r = 0; r < 2; r++)
                        D[R16Q6_H(r) + 64 * k + 4 * n + i] =
                            (uint8_t)(v[128 * r + e] >> 4 | (v[128 * r + 32 + e] >> 4) << 2 | (v[128 * r + 64 + e] >> 4) << 4 |
                                      (v[128 * r + 96 + e] >> 4) << 6);
                }
        }
    }
}

void sd_quant_pack_group_scalar(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst) {
    if (t == SD_TYPE_Q4_K) {
        r_pack_group_k(src, row_bytes, nrows, nblk / 8, dst);
        return;
    }
    if (t == SD_TYPE_Q6_K) {
        r_pack_group_q6(src, row_bytes, nrows, nblk / 8, dst);
        return;
    }
    const int q8 = t == SD_TYPE_Q8_0, qb = q8 ? 512 : 256, bsz = q8 ? SD_Q8_0_BYTES : SD_Q4_0_BYTES;
    const uint32_t flip = q8 ? 0x80808080u : 0;
    if (nrows < 16) memset(dst, 0, 16 * row_bytes);
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *qd = dst + r_qoff(b, qb), *sd = dst + r_soff(b, nblk, qb);
        for (int n = 0; n < nrows; n++) {
            const uint8_t *blk = src + (size_t)n * row_bytes + (size_t)b * bsz;
            for (int k = 0; k < qb / 64; k++) {
                const uint32_t v = le32(blk + 2 + 4 * k) ^ flip;
                memcpy(qd + 64 * k + 4 * n, &v, 4);
            }
            memcpy(sd + 2 * n, blk, 2);
        }
    }
}

void sd_quant_pack_group(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst) {
    const sd_isa_kernels *K = sd_kernels();
    (K->pack_group ? K->pack_group : sd_quant_pack_group_scalar)(t, src, row_bytes, nrows, nblk, dst);
}

static int has_layout(sd_type t) {
    return t == SD_TYPE_Q4_0 || t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_K || t == SD_TYPE_Q6_K;
}

int sd_quant_can_pack(sd_type t) { return sd_kernels()->quant_packed && has_layout(t); }

size_t sd_quant_packed_bytes(sd_type t, int64_t rows, size_t row_bytes) {
    return (size_t)((rows + 15) / 16) * r_gstride(t, row_bytes);
}

void sd_quant_pack_rows(sd_type t, const void *src, void *dst, int64_t rows, size_t row_bytes, int64_t cols) {
    if (!has_layout(t)) return;
    const sd_isa_kernels *K = sd_kernels();
    void (*pack)(sd_type, const uint8_t *, size_t, int, int64_t, uint8_t *) =
        K->pack_group ? K->pack_group : sd_quant_pack_group_scalar;
    /* groups are independent: packing a model at load runs on every thread */
#pragma omp parallel for schedule(static) if (rows >= 1024)
    for (int64_t g = 0; g < (rows + 15) / 16; g++) {
        const int nrows = rows - 16 * g < 16 ? (int)(rows - 16 * g) : 16;
        pack(t, (const uint8_t *)src + (size_t)(16 * g) * row_bytes, row_bytes, nrows, cols / 32,
             (uint8_t *)dst + (size_t)g * r_gstride(t, row_bytes));
    }
}
