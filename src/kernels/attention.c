/* Attention: how many threads a call gets and whether it forks (the same rule for every path),
 * the active path's kernels, the portable per-(token, head) kernel for chains, trees and F16
 * caches, and the naive reference. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/isa.h"
#include "kernels/portable.h"

/* Attention is small next to the matrices, but run serially it left the other thread idle for a
 * noticeable share of a quantised 110M-shape decode (measured: commit ead8448). A chain splits
 * when the model's own q_dim x q_dim products already run parallel (the team is awake, so forking
 * is cheap) and there is enough work to repay the fork (SD_ATT_PAR_MIN_WORK); tiny draft models
 * stay serial. */
static int warm(int n_heads, int head_dim, int n) {
    const double q_dim = (double)n_heads * head_dim;
    return q_dim * q_dim * n >= SD_PAR_MIN_WORK;
}

static double work_of(int n, int n_heads, int pos0, int head_dim) {
    return (double)n * n_heads * (pos0 + n) * head_dim;
}

void sd_attention(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                  int n_heads, int n_kv_heads, int head_dim, float *att_scratch, int att_slots) {
    const int items = n * n_heads;
    int nt = omp_get_max_threads() < att_slots ? omp_get_max_threads() : att_slots;
    if (nt > items) nt = items;
    const sd_att_call c = {q,        K,           V,          0,     out, n, pos0, NULL, NULL, n_heads, n_kv_heads,
                           head_dim, att_scratch, att_slots,  NULL,  0,   nt,
                           warm(n_heads, head_dim, n) && work_of(n, n_heads, pos0, head_dim) >= SD_ATT_PAR_MIN_WORK && nt >= 2};
    sd_kernels()->attention(&c);
}

int sd_attention_f16_ok(int head_dim) { return head_dim >= 16; }

int sd_attention_f16(const float *q, const uint16_t *K, const uint16_t *V, float *out, int n, int pos0, int n_heads,
                     int n_kv_heads, int head_dim, float *att_scratch, int att_slots, float *conv_scratch,
                     int conv_slots) {
    if (!sd_attention_f16_ok(head_dim) || att_slots < n_heads || conv_slots < 1) return -1;
    int nt = omp_get_max_threads() < n_heads ? omp_get_max_threads() : n_heads;
    if (nt > conv_slots) nt = conv_slots;
    const sd_att_call c = {q,        K,           V,         1,            out, n, pos0, NULL, NULL, n_heads, n_kv_heads,
                           head_dim, att_scratch, att_slots, conv_scratch, conv_slots, nt,
                           warm(n_heads, head_dim, n) && work_of(n, n_heads, pos0, head_dim) >= SD_ATT_PAR_MIN_WORK && nt >= 2};
    sd_kernels()->attention(&c);
    return 0;
}

void sd_attention_tree(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                       const int32_t *path, const int32_t *path_off, int n_heads, int n_kv_heads, int head_dim,
                       float *att_scratch, int att_slots) {
    const int items = n * n_heads;
    int nt = omp_get_max_threads() < att_slots ? omp_get_max_threads() : att_slots;
    if (nt > items) nt = items;
    const sd_att_call c = {q,        K,           V,         0,    out, n, pos0, path, path_off, n_heads, n_kv_heads,
                           head_dim, att_scratch, att_slots, NULL, 0,   nt,
                           work_of(n, n_heads, pos0, head_dim) >= SD_ATT_PAR_MIN_WORK && nt >= 2};
    sd_kernels()->attention(&c);
}

/* ---------------------------------------------------------------- every (token, head) on its own */

void sd_att_items(const sd_att_call *c, sd_att_item_fn one) {
    const int items = c->n * c->n_heads;
    const size_t ctx_max = (size_t)(c->pos0 + c->n);
    if (!c->par) { /* serial, no OpenMP (see sd_matmul) */
        for (int it = 0; it < items; it++) one(c, it / c->n_heads, it % c->n_heads, c->att);
        return;
    }
#pragma omp parallel num_threads(c->nt)
    {
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        float *att = c->att + (size_t)id * ctx_max;
        /* later tokens attend to more positions: interleave items so each thread gets a mix */
        for (int it = id; it < items; it += tn) one(c, it / c->n_heads, it % c->n_heads, att);
    }
}

/* Positions token t attends to, and the cache row of its position i: a chain's rows in place; a
 * tree token's prefix [0, pos0) in place, then its path's rows (its ancestors and itself). */
static inline int item_ctx(const sd_att_call *c, int t) {
    return c->path ? c->pos0 + (c->path_off[t + 1] - c->path_off[t]) : c->pos0 + t + 1;
}
static inline int64_t item_row(const sd_att_call *c, int t, int i) {
    return !c->path || i < c->pos0 ? i : c->pos0 + c->path[c->path_off[t] + (i - c->pos0)];
}

/* Element e of cache row r (an F16 cache's values convert exactly). */
static inline float cache_at(const sd_att_call *c, const void *C, int64_t r, int64_t e) {
    const size_t at = (size_t)r * (size_t)(c->n_kv_heads * c->head_dim) + (size_t)e;
    return c->f16 ? sd_fp16_to_fp32(((const uint16_t *)C)[at]) : ((const float *)C)[at];
}

/* Token t, query head h: scores in position order, softmax, values summed in position order. A
 * tree path gives the bits of the chain that holds it, an F16 cache those of an F32 cache
 * holding the same values. */
static void portable_item(const sd_att_call *c, int t, int h, float *att) {
    const int hd = c->head_dim, kvh = h / (c->n_heads / c->n_kv_heads), n_ctx = item_ctx(c, t);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *q = c->q + ((size_t)t * c->n_heads + h) * hd;
    float *out = c->out + ((size_t)t * c->n_heads + h) * hd;
    for (int i = 0; i < n_ctx; i++) {
        const int64_t r = item_row(c, t, i);
        float s = 0;
        for (int d = 0; d < hd; d++) s += q[d] * cache_at(c, c->K, r, (int64_t)kvh * hd + d);
        att[i] = s * scale;
    }
    sd_portable_softmax(att, n_ctx);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int i = 0; i < n_ctx; i++) {
        const int64_t r = item_row(c, t, i);
        const float a = att[i];
        for (int d = 0; d < hd; d++) out[d] += a * cache_at(c, c->V, r, (int64_t)kvh * hd + d);
    }
}

void sd_portable_attention(const sd_att_call *c) { sd_att_items(c, portable_item); }

/* ---------------------------------------------------------------- reference */

void sd_attention_ref(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                      int n_heads, int n_kv_heads, int head_dim) {
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const int group = n_heads / n_kv_heads;
    double *att = malloc((size_t)(pos0 + n) * sizeof(double));
    if (!att) return;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)t * q_dim + (size_t)h * head_dim;
            const int kvh = h / group, len = pos0 + t + 1;
            double mx = -INFINITY, sum = 0;
            for (int s = 0; s < len; s++) {
                double d = 0;
                for (int i = 0; i < head_dim; i++)
                    d += (double)qh[i] * K[(size_t)s * kv_dim + (size_t)kvh * head_dim + i];
                att[s] = d / sqrt((double)head_dim);
                if (att[s] > mx) mx = att[s];
            }
            for (int s = 0; s < len; s++) sum += (att[s] = exp(att[s] - mx));
            for (int i = 0; i < head_dim; i++) {
                double o = 0;
                for (int s = 0; s < len; s++)
                    o += att[s] / sum * V[(size_t)s * kv_dim + (size_t)kvh * head_dim + i];
                out[(size_t)t * q_dim + (size_t)h * head_dim + i] = (float)o;
            }
        }
    }
    free(att);
}
