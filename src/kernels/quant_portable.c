/* The portable path's integer kernels: every quantised type on its file layout, one (row, token)
 * at a time in plain C. Q4_0, Q8_0, Q4_K and Q6_K follow the vector kernels' documented
 * sequence (test_quant's emulations), so they give the same bits on every path; Q5_0 has its
 * own order. Each (row, token) is computed alone, so batches equal single tokens at every size. */
#include <math.h>

#include "kernels/isa.h"

/* The activation records of quant_act.h, over the reference's block quantisation. */
static inline float act_block(const float *x, int8_t q[32], int *sum) { return sd_quant_act_block_ref(x, q, sum); }

#include "kernels/quant_act.h"

void sd_portable_act_token(sd_type t, const float *x, int64_t cols, void *out) {
    switch (family_of(t)) {
    case FAM_R: act_r_token(t, x, cols, out); break;
    case FAM_A: act_a_token(t, x, cols, out); break;
    default:
        for (int64_t s = 0; s < cols / 256; s++) sd_quant_act_k_ref(x + 256 * s, (act_k *)out + s);
    }
}

/* Q4_0 / Q8_0 (r_layout records): acc = fma(float(int dot of block b), dw_b * dx_b, acc) over
 * the blocks in order. */
static float dot_r(sd_type t, const uint8_t *row, int64_t nblk, const uint8_t *rec, r_layout L) {
    const size_t bsz = t == SD_TYPE_Q8_0 ? SD_Q8_0_BYTES : SD_Q4_0_BYTES;
    const int8_t *q = (const int8_t *)rec;
    const float *d = (const float *)(rec + L.d);
    float acc = 0.0f;
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *blk = row + (size_t)b * bsz;
        int v[32];
        sd_quant_block_ints(t, blk, v);
        int32_t dot = 0;
        for (int i = 0; i < 32; i++) dot += v[i] * q[32 * b + i];
        acc = fmaf((float)dot, h2f(blk) * d[b], acc);
    }
    return acc;
}

/* Q5_0 (act_quad records, block b in record b / 4, quarter b % 4): the same sequence as dot_r. */
static float dot_a(const uint8_t *row, int64_t nblk, const act_quad *X) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *blk = row + (size_t)b * SD_Q5_0_BYTES;
        const act_quad *a = X + b / 4;
        const int k = (int)(b & 3);
        int v[32];
        sd_quant_block_ints(SD_TYPE_Q5_0, blk, v);
        int32_t dot = 0;
        for (int i = 0; i < 16; i++) dot += v[i] * a->lo[16 * k + i] + v[i + 16] * a->hi[16 * k + i];
        acc = fmaf((float)dot, h2f(blk) * a->d[4 * k], acc);
    }
    return acc;
}

/* Q4_K: per super-block exact integer sums over sub-blocks j of sc_j * (int dot_j) and of m_j *
 * (sum of q in j), then acc = fma(float(sum), d * dx, acc), acc = fma(-float(msum), dmin * dx,
 * acc) (|sum| < 2^31: 8 x 63 x 32 x 15 x 127). */
static float dot_q4_k(const uint8_t *row, int64_t nsb, const act_k *A) {
    float acc = 0.0f;
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *b = row + (size_t)s * SD_Q4_K_BYTES;
        const act_k *a = A + s;
        uint8_t sm[16];
        q4_k_scales(b + 4, sm);
        int32_t f = 0, g = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b + 16 + 32 * (j / 2);
            int32_t dot = 0;
            for (int i = 0; i < 32; i++) dot += (j & 1 ? q[i] >> 4 : q[i] & 15) * a->q[32 * j + i];
            f += dot * sm[j];
            g += sm[8 + j] * a->bs32[j];
        }
        acc = fmaf((float)f, h2f(b) * a->d, acc);
        acc = fmaf(-(float)g, h2f(b + 2) * a->d, acc);
    }
    return acc;
}

/* Q6_K: per super-block an exact integer sum over 16-element sub-blocks j of sc_j * (int dot of
 * (v - 32) and q), then acc = fma(float(sum), d * dx, acc) (|sum| < 2^31: 16 x 128 x 16 x 32 x 127). */
static float dot_q6_k(const uint8_t *row, int64_t nsb, const act_k *A) {
    float acc = 0.0f;
    for (int64_t s = 0; s < nsb; s++) {
        const uint8_t *b = row + (size_t)s * SD_Q6_K_BYTES;
        const act_k *a = A + s;
        int32_t f = 0;
        for (int j = 0; j < 16; j++) {
            int32_t dot = 0;
            for (int e = 16 * j; e < 16 * j + 16; e++) {
                const int half = e / 128, qt = e % 128 / 32, l = e % 32;
                const uint8_t lq = b[64 * half + l + (qt & 1) * 32], hq = b[128 + 32 * half + l];
                const int v = ((qt < 2 ? lq & 15 : lq >> 4) | ((hq >> (2 * qt)) & 3) << 4) - 32;
                dot += v * a->q[e];
            }
            f += dot * (int8_t)b[192 + j];
        }
        acc = fmaf((float)f, h2f(b + 208) * a->d, acc);
    }
    return acc;
}

/* Rows [r0, r1) of W for nb token records act (xs apart: bytes for Q4_0/Q8_0, records for the
 * others, as quant.c passes them); token j's results go to Y + j * W->rows. */
void sd_portable_quant_rows(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1) {
    const int64_t nblk = W->cols / 32;
    const r_layout L = r_layout_of(W->cols);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)W->data + (size_t)r * W->row_bytes;
        for (int j = 0; j < nb; j++) {
            float y;
            switch (W->type) {
            case SD_TYPE_Q4_0:
            case SD_TYPE_Q8_0: y = dot_r(W->type, row, nblk, (const uint8_t *)act + xs * (size_t)j, L); break;
            case SD_TYPE_Q5_0: y = dot_a(row, nblk, (const act_quad *)act + xs * (size_t)j); break;
            case SD_TYPE_Q4_K: y = dot_q4_k(row, nblk / 8, (const act_k *)act + xs * (size_t)j); break;
            default: y = dot_q6_k(row, nblk / 8, (const act_k *)act + xs * (size_t)j); break;
            }
            Y[(size_t)j * W->rows + r] = y;
        }
    }
}
