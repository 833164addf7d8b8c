/* ggml's block formats of the quantised weight types (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K) and BF16 in
 * scalar code: the reference dequantisers that the fast paths are held to. */
#include <string.h>

#include "kernels/quant_internal.h"

/* ------------------------------------------------------------------ reference dequantisation */

static void deq_q8_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q8_0_BYTES, y += 32) {
        const float d = h2f(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = q[j] * d;
    }
}

static void deq_q4_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q4_0_BYTES, y += 32) {
        const float d = h2f(b);
        const uint8_t *q = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = ((q[j] & 0x0F) - 8) * d;
            y[j + 16] = ((q[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q5_0_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q5_0_BYTES, y += 32) {
        const float d = h2f(b);
        const uint32_t qh = le32(b + 2);
        const uint8_t *q = b + 6;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1u) << 4, h1 = (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = (((q[j] & 0x0F) | h0) - 16) * d;
            y[j + 16] = (((q[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void deq_q4_k_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q4_K_BYTES) {
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sm[16];
        q4_k_scales(b + 4, sm);
        const uint8_t *q = b + 16;
        for (int c = 0; c < 4; c++, q += 32) {
            const float d1 = d * sm[2 * c], m1 = dmin * sm[8 + 2 * c];
            const float d2 = d * sm[2 * c + 1], m2 = dmin * sm[8 + 2 * c + 1];
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void deq_q6_k_ref(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += SD_Q6_K_BYTES) {
        const float d = h2f(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void deq_bf16_ref(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * i, sizeof h);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&y[i], &u, sizeof u);
    }
}

int sd_quant_has_dequant(sd_type t) {
    return t == SD_TYPE_Q8_0 || t == SD_TYPE_Q4_0 || t == SD_TYPE_Q5_0 || t == SD_TYPE_Q4_K ||
           t == SD_TYPE_Q6_K || t == SD_TYPE_BF16;
}

int sd_quant_dequant_row_ref(sd_type t, const void *src, float *dst, int64_t n) {
    const int64_t nb = blocks_of(t, n);
    if (nb < 0) return -1;
    const uint8_t *b = src;
    switch (t) {
    case SD_TYPE_Q8_0: deq_q8_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q4_0: deq_q4_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q5_0: deq_q5_0_ref(b, dst, nb); return 0;
    case SD_TYPE_Q4_K: deq_q4_k_ref(b, dst, nb); return 0;
    case SD_TYPE_Q6_K: deq_q6_k_ref(b, dst, nb); return 0;
    case SD_TYPE_BF16: deq_bf16_ref(b, dst, nb); return 0;
    default: return -1;
    }
}
