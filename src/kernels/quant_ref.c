/* Naive reference of the integer matmul (sd_quant_dot_ref): the kernels' activation
 * quantisation in scalar code and exact integer block sums, combined in double. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/quant_internal.h"

/* One block of 32 (reference): q, its sum, and the scale (NaN when x is not finite, so a
 * bad activation still poisons the result instead of vanishing into an int8). */
float sd_quant_act_block_ref(const float *x, int8_t *q, int *sum) {
    float amax = 0;
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        bad |= !(a <= FLT_MAX);
        amax = a > amax ? a : amax;
    }
    const float d = sd_fp16_to_fp32(sd_fp32_to_fp16(amax / 127.0f));
    /* d == 0 (amax below fp16 range, or 0): the block contributes nothing, and 127/amax of a
     * subnormal amax would be inf, overflowing the int conversion */
    const float id = d != 0 ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)clamp127(bad ? 0 : nearest_int(x[j] * id));
        s += q[j];
    }
    *sum = s;
    return bad ? NAN : d;
}

/* One super-block of 256 (Q8_K; act_k_block_fast in quant_avx512.c gives the same values). */
void sd_quant_act_k_ref(const float *x, act_k *a) {
    float amax = 0, mx = 0;
    int bad = 0;
    for (int j = 0; j < 256; j++) {
        float v = fabsf(x[j]);
        bad |= !(v <= FLT_MAX);
        if (v > amax) {
            amax = v;
            mx = x[j];
        }
    }
    memset(a, 0, sizeof *a);
    if (bad) {
        a->d = NAN;
        return;
    }
    if (amax == 0) return;
    const float iscale = -127.0f / mx;
    if (!(fabsf(iscale) <= FLT_MAX)) return; /* |mx| < 127 / FLT_MAX: too small to scale, adds 0 */
    for (int j = 0; j < 256; j++) a->q[j] = (int8_t)clamp127(nearest_int(iscale * x[j]));
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += a->q[16 * g + j];
        a->nbs[g] = (int16_t)-s;
        a->bs32[g / 2] = (int16_t)(a->bs32[g / 2] + s);
    }
    for (int g = 0; g < 16; g++) a->nbs32[g] = 32 * a->nbs[g];
    a->d = 1.0f / iscale;
}

/* ------------------------------------------------------------------ reference dot */

/* The signed integer weights of one Q8_0/Q4_0/Q5_0 block (value = d * v). */
void sd_quant_block_ints(sd_type t, const uint8_t *b, int v[32]) {
    if (t == SD_TYPE_Q8_0) {
        for (int j = 0; j < 32; j++) v[j] = (int8_t)b[2 + j];
        return;
    }
    const uint32_t qh = t == SD_TYPE_Q5_0 ? le32(b + 2) : 0;
    const uint8_t *q = t == SD_TYPE_Q5_0 ? b + 6 : b + 2;
    const int off = t == SD_TYPE_Q5_0 ? 16 : 8;
    for (int j = 0; j < 16; j++) {
        v[j] = ((q[j] & 0x0F) | (int)((qh >> j) & 1u) << 4) - off;
        v[j + 16] = ((q[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4) - off;
    }
}

double sd_quant_dot_ref(const sd_tensor *W, int64_t r, const float *x) {
    const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
    const int64_t cols = W->cols;
    double acc = 0;
    if (family_of(W->type) == FAM_A || family_of(W->type) == FAM_R) {
        const size_t bsz = W->type == SD_TYPE_Q8_0 ? SD_Q8_0_BYTES
                           : W->type == SD_TYPE_Q4_0 ? SD_Q4_0_BYTES
                                                     : SD_Q5_0_BYTES;
        for (int64_t b = 0; b < cols / 32; b++) {
            int8_t q[32];
            int sum, v[32];
            const float dx = sd_quant_act_block_ref(x + 32 * b, q, &sum);
            const uint8_t *blk = row + (size_t)b * bsz;
            sd_quant_block_ints(W->type, blk, v);
            long isum = 0;
            for (int j = 0; j < 32; j++) isum += (long)v[j] * q[j];
            acc += (double)h2f(blk) * (double)dx * (double)isum;
        }
        return acc;
    }
    if (W->type == SD_TYPE_Q4_K) {
        for (int64_t s = 0; s < cols / 256; s++) {
            act_k a;
            sd_quant_act_k_ref(x + 256 * s, &a);
            const uint8_t *b = row + s * SD_Q4_K_BYTES;
            uint8_t sm[16];
            q4_k_scales(b + 4, sm);
            long isum = 0, msum = 0;
            for (int sub = 0; sub < 8; sub++) {
                const uint8_t *q = b + 16 + 32 * (sub / 2);
                long dot = 0, xs = 0;
                for (int l = 0; l < 32; l++) {
                    int v = sub & 1 ? q[l] >> 4 : q[l] & 0x0F;
                    dot += (long)v * a.q[32 * sub + l];
                    xs += a.q[32 * sub + l];
                }
                isum += sm[sub] * dot;
                msum += sm[8 + sub] * xs;
            }
            acc += (double)a.d * ((double)h2f(b) * (double)isum - (double)h2f(b + 2) * (double)msum);
        }
        return acc;
    }
    if (W->type == SD_TYPE_Q6_K) {
        float w[256];
        for (int64_t s = 0; s < cols / 256; s++) {
            act_k a;
            sd_quant_act_k_ref(x + 256 * s, &a);
            const uint8_t *b = row + s * SD_Q6_K_BYTES;
            /* integer values: dequantise with d = 1 and unit scales, then apply the scales */
            uint8_t tmp[SD_Q6_K_BYTES];
            memcpy(tmp, b, sizeof tmp);
            memset(tmp + 192, 1, 16);
            const uint16_t one = 0x3c00;
            memcpy(tmp + 208, &one, 2);
            sd_quant_dequant_row_ref(SD_TYPE_Q6_K, tmp, w, 256);
            const int8_t *sc = (const int8_t *)(b + 192);
            long isum = 0;
            for (int j = 0; j < 256; j++) isum += (long)sc[j / 16] * (long)w[j] * a.q[j];
            acc += (double)a.d * (double)h2f(b + 208) * (double)isum;
        }
        return acc;
    }
    return NAN;
}
