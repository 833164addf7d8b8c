/* The activation records of Q5_0 (act_quad) and Q4_0 / Q8_0 (r_layout), written with the
 * including file's act_block (q, sum and fp16-rounded scale of 32 activations, exactly as
 * sd_quant_act_block_ref): each path's quant_*.c includes this after defining it. */
#ifndef SD_KERNELS_QUANT_ACT_H
#define SD_KERNELS_QUANT_ACT_H

static int weight_offset(sd_type t) { return t == SD_TYPE_Q8_0 ? 128 : t == SD_TYPE_Q5_0 ? 16 : 8; }

static void act_a_place(act_quad *P, int k, const int8_t *q, float d, int32_t init) {
    memcpy(P->lo + 16 * k, q, 16);
    memcpy(P->hi + 16 * k, q + 16, 16);
    for (int l = 4 * k; l < 4 * k + 4; l++) {
        P->d[l] = d;
        P->init[l] = init;
    }
}

/* Quantises one token for Q5_0 (act_quad records). */
static void act_a_token(sd_type t, const float *x, int64_t cols, void *out) {
    const int64_t nb = cols / 32;
    const int off = weight_offset(t);
    for (int64_t b = 0; b < nb; b++) {
        int8_t q[32];
        int sum;
        const float d = act_block(x + 32 * b, q, &sum);
        act_a_place((act_quad *)out + b / 4, (int)(b & 3), q, d, -(off * sum) / 4);
    }
    for (int64_t b = nb; b % 4; b++) { /* the rest of the last group: zero meets zero weights */
        static const int8_t zq[32];
        act_a_place((act_quad *)out + b / 4, (int)(b & 3), zq, 0.0f, 0);
    }
}

static void act_r_token(sd_type t, const float *x, int64_t cols, uint8_t *out) {
    const r_layout L = r_layout_of(cols);
    const int off = weight_offset(t);
    float *d = (float *)(out + L.d);
    int32_t *init = (int32_t *)(out + L.init);
    for (int64_t b = 0; b < cols / 32; b++) {
        int sum;
        d[b] = act_block(x + 32 * b, (int8_t *)out + 32 * b, &sum);
        init[b] = -off * sum;
    }
}

#endif
