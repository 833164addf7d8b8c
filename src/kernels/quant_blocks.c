/* ggml's block formats of the weight types in scalar code: the quantisers (ggml's reference
 * algorithms, for convert and --draft-type) and the dequantisers the fast paths are held to. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/quant_internal.h"
#include "specdec/quant.h"

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

/* ------------------------------------------------------------------ quantisation
 *
 * Row quantisers in ggml's block layouts, reproducing ggml's reference algorithms (the ones
 * llama.cpp's quantizer runs without an importance matrix) operation for operation, so a
 * model quantised here and one quantised by llama.cpp agree block for block. */

/* Scales below this make a group "all zero" (ggml's GROUP_MAX_EPS). */
#define GROUP_MAX_EPS 1e-15f

/* (int)v clamped to [0, hi]: ggml's MIN(hi, (int8_t)v) for the v >= 0 it produces, without
 * C's undefined float-to-int conversion when a NaN or infinite weight slips in. */
static inline int trunc_to(float v, int hi) {
    if (!(v > 0)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = sd_fp32_to_fp16(v);
    memcpy(p, &h, sizeof h);
}

static inline float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return sd_fp16_to_fp32(h);
}

/* ------------------------------------------------------------------ 32-element blocks */

/* Q8_0: d = amax / 127, q = roundf(x / d) (half away from zero). */
static void quant_q8_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += SD_Q8_0_BYTES) {
        float amax = 0;
        for (int j = 0; j < 32; j++) {
            float a = fabsf(x[j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        put_f16(y, d);
        for (int j = 0; j < 32; j++) {
            float r = roundf(x[j] * id);
            r = r > 127 ? 127 : r < -128 ? -128 : r == r ? r : 0;
            y[2 + j] = (uint8_t)(int8_t)r;
        }
    }
}

/* Q4_0 / Q5_0: d = m / -2^(bits-1) where m is the element of largest magnitude (so it maps
 * to the most negative level exactly), q = trunc(x / d + 2^(bits-1) + 0.5) capped at the top. */
static void quant_q4_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += SD_Q4_0_BYTES) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        put_f16(y, d);
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_to(x[j] * id + 8.5f, 15);
            const int q1 = trunc_to(x[j + 16] * id + 8.5f, 15);
            y[2 + j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void quant_q5_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += SD_Q5_0_BYTES) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        put_f16(y, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_to(x[j] * id + 16.5f, 31);
            const int q1 = trunc_to(x[j + 16] * id + 16.5f, 31);
            y[6 + j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
            qh |= (uint32_t)(q0 >> 4) << j;
            qh |= (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y + 2, &qh, sizeof qh);
    }
}

/* ------------------------------------------------------------------ Q4_K */

/* ggml's make_qkx2_quants: fits x ~ scale * L - min with L in [0, nmax] and min <= 0 under
 * the weights w, starting from the min/max grid and trying nstep+1 rescaled grids, each
 * refined by weighted least squares; keeps the one with the smallest weighted squared error.
 * Every float operation is in ggml's order (results are compared bit for bit). */
static float make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Q4_K (quantize_row_q4_K_ref): per 32-element sub-block a (scale, min) fit weighted by
 * rms + |x|; scales and mins are then quantised to 6 bits against the block's largest
 * (d = max_scale/63, dmin = max_min/63) and the 4-bit values recomputed from them. */
static void quant_q4_k(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[256], Laux[32];
    float w[32], mins[8], scales[8];
    for (int64_t i = 0; i < nb; i++, x += 256, y += SD_Q4_K_BYTES) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = make_qkx2(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
        const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        uint8_t *sc = y + 4;
        for (int j = 0; j < 8; j++) {
            uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]); /* wraps as ggml's does */
            uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                sc[j] = ls;
                sc[j + 4] = lm;
            } else {
                sc[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
                sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
                sc[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        put_f16(y, max_scale / 63.0f);
        put_f16(y + 2, max_min / 63.0f);
        const float d16 = get_f16(y), dmin16 = get_f16(y + 2);
        for (int j = 0; j < 8; j++) {
            /* get_scale_min_k4 */
            const int s6 = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | (sc[j - 4] >> 6) << 4;
            const int m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
            const float d = d16 * s6;
            if (!d) continue;
            const float dm = dmin16 * m6;
            for (int l = 0; l < 32; l++) {
                int q = nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > 15 ? 15 : q);
            }
        }
        uint8_t *q = y + 16;
        for (int j = 0; j < 256; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

/* ------------------------------------------------------------------ Q6_K */

/* ggml's make_qx_quants with rmse_type 1 and no importance weights: symmetric levels
 * [-nmax, nmax-1] scaled so the largest-magnitude element maps to -nmax, then 18 nearby
 * scales tried, keeping the one with the best x^2-weighted least-squares fit. */
static float make_qx(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
                L[i] = (int8_t)(l + nmax);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q6_K (quantize_row_q6_K_ref): 16 groups of 16 fitted by make_qx, group scales quantised
 * to int8 against the largest (d = max/-128), 6-bit values recomputed from them. */
static void quant_q6_k(const float *x, uint8_t *y, int64_t nb) {
    int8_t L[256];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += 256, y += SD_Q6_K_BYTES) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            const float s = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = s;
            if (fabsf(s) > max_abs_scale) {
                max_abs_scale = fabsf(s);
                max_scale = s;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(y, 0, SD_Q6_K_BYTES); /* d = +0 */
            continue;
        }
        const float iscale = -128.0f / max_scale;
        put_f16(y + 208, 1 / iscale);
        int8_t *sc = (int8_t *)(y + 192);
        for (int ib = 0; ib < 16; ib++) {
            int v = nearest_int(iscale * scales[ib]);
            sc[ib] = (int8_t)(v < 127 ? v : 127);
        }
        const float d16 = get_f16(y + 208);
        for (int j = 0; j < 16; j++) {
            const float d = d16 * sc[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                int q = nearest_int(x[16 * j + l] / d);
                q = q < -32 ? -32 : q > 31 ? 31 : q;
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        uint8_t *ql = y, *qh = y + 128;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
                ql[l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
                qh[l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}

/* ------------------------------------------------------------------ plain floats */

static uint16_t fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ------------------------------------------------------------------ API */

int sd_quant_can_write(sd_type t) {
    switch (t) {
    case SD_TYPE_F32:
    case SD_TYPE_F16:
    case SD_TYPE_BF16:
    case SD_TYPE_Q8_0:
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q5_0:
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q6_K: return 1;
    default: return 0;
    }
}

sd_status sd_quantize_row(sd_type t, const float *x, void *dst, int64_t n) {
    const sd_type_traits *ti = sd_type_info(t);
    if (!ti || !sd_quant_can_write(t))
        return sd_fail(SD_ERR_UNSUPPORTED, "quantize: cannot write type %s", ti ? ti->name : "unknown");
    if (n < 0 || n % ti->block_size)
        return sd_fail(SD_ERR_INVALID_ARG, "quantize: %lld values do not divide into %s blocks of %d",
                       (long long)n, ti->name, ti->block_size);
    const int64_t nb = n / ti->block_size;
    uint8_t *y = dst;
    switch (t) {
    case SD_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); break;
    case SD_TYPE_F16:
        for (int64_t i = 0; i < n; i++) put_f16(y + 2 * i, x[i]);
        break;
    case SD_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = fp32_to_bf16(x[i]);
            memcpy(y + 2 * i, &h, sizeof h);
        }
        break;
    case SD_TYPE_Q8_0: quant_q8_0(x, y, nb); break;
    case SD_TYPE_Q4_0: quant_q4_0(x, y, nb); break;
    case SD_TYPE_Q5_0: quant_q5_0(x, y, nb); break;
    case SD_TYPE_Q4_K: quant_q4_k(x, y, nb); break;
    case SD_TYPE_Q6_K: quant_q6_k(x, y, nb); break;
    default: break;
    }
    return SD_OK;
}
