/* The quantised types' entry points (kernels/quant.h): each call goes to the active path's code
 * (quant_avx512.c, quant_avx2.c; the scalar code where a path has none); threads the matmul. */
#include <omp.h>
#include <stdlib.h>

#include "kernels/isa.h"

/* Same threshold as matmul.c (SD_PAR_MIN_WORK): below ~2^19 multiply-adds a parallel region costs more than
 * the second core saves (stories260K-sized matrices stay single-threaded). */
#define SD_QPAR_MIN_WORK (1 << 19)

int sd_quant_dequant_row(sd_type t, const void *src, float *dst, int64_t n) {
    const sd_isa_kernels *K = sd_kernels();
    if (!K->dequant) return sd_quant_dequant_row_ref(t, src, dst, n);
    const int64_t nb = blocks_of(t, n);
    if (nb < 0) return -1;
    return K->dequant(t, src, dst, nb);
}

static size_t act_bytes(sd_type t, int64_t cols) {
    switch (family_of(t)) {
    case FAM_A: return (size_t)((cols / 32 + 3) / 4) * sizeof(act_quad);
    case FAM_R: return r_layout_of(cols).bytes;
    case FAM_K: return (size_t)(cols / 256) * sizeof(act_k);
    default: return 0;
    }
}

size_t sd_quant_scratch_bytes(sd_type t, int64_t cols, int n) { return act_bytes(t, cols) * (size_t)n; }

/* Tokens in the next pass over the weights for `left` tokens: up to 9 in one pass (a k = 8
 * verify), else ceil(left / 8) passes of near-equal size: against passes of 8 and the rest, a
 * 9-token pass was faster and near-equal passes for 10-12 tokens as fast or faster; kernels for
 * 10-12 tokens in one pass spilled and were slower from 12 (measured: commit d5e8e44). */
static inline int r16_chunk(int left) {
    if (left <= SD_R16_MAX_TOKENS) return left;
    const int passes = (left + 7) / 8;
    return (left + passes - 1) / passes;
}

/* job for all n tokens (xs bytes apart from job.act), in passes of r16_chunk tokens. */
static void r16_tokens(const sd_isa_kernels *K, sd_type t, sd_r16_job job, int n) {
    const uint8_t *act = job.act;
    float *Y = job.Y;
    for (int j0 = 0, nb; j0 < n; j0 += nb) {
        nb = r16_chunk(n - j0);
        job.act = act + job.xs * (size_t)j0;
        job.Y = Y + (size_t)j0 * job.rows;
        K->r16(t, nb, &job);
    }
}

int sd_quant_has_dot(sd_type t) { return sd_kernels()->act_token && family_of(t) != FAM_NONE; }

int sd_quant_matmul(const sd_tensor *W, const float *X, int n, float *Y, void *scratch,
                    size_t scratch_bytes) {
    return sd_quant_matmul_group(&W, &Y, 1, X, n, scratch, scratch_bytes);
}

int sd_quant_matmul_group(const sd_tensor *const *W, float *const *Y, int count, const float *X,
                          int n, void *scratch, size_t scratch_bytes) {
    enum { MAXG = 4 };
    const sd_isa_kernels *K = sd_kernels();
    if (count < 1 || count > MAXG || n < 1 || !K->act_token) return -1;
    const sd_type type = W[0]->type;
    const family fam = family_of(type);
    const int r16 = sd_quant_can_pack(type); /* else the file layout's row kernel */
    const int64_t cols = W[0]->cols;
    if (fam == FAM_NONE || cols <= 0) return -1;
    for (int i = 0; i < count; i++)
        if (W[i]->type != type || W[i]->cols != cols) return -1;
    if (K->quant_init) K->quant_init();
    const size_t tok = act_bytes(type, cols);
    if (tok == 0) return -1;
    void *tmp = NULL, *act = scratch;
    if (!act || scratch_bytes < tok * (size_t)n) {
        tmp = aligned_alloc(64, tok * (size_t)n);
        if (!tmp) return -1;
        act = tmp;
    }
    const size_t xs = fam == FAM_R ? tok : tok / (fam == FAM_A ? sizeof(act_quad) : sizeof(act_k));
    const r_layout L = r_layout_of(cols);
    int64_t first[MAXG + 1]; /* first 16-row block of each matrix in the combined range */
    double work = 0;
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        first[i + 1] = first[i] + (W[i]->rows + 15) / 16; /* 16-row blocks: own output lines */
        work += (double)W[i]->rows * (double)cols * n;
    }
    /* Each token is quantised alone, identically whatever n is and whichever thread does it,
     * once for all matrices. A prefill's tokens are shared out inside the parallel region (on
     * one thread before it, the others waited); up to a verify pass's SD_R16_MAX_TOKENS the
     * barrier this needs cost more than it saved, so those stay on the calling thread. */
    const int par = work >= SD_QPAR_MIN_WORK;
    const int split = par && n > SD_R16_MAX_TOKENS && omp_get_max_threads() > 1;
    if (!split)
        for (int j = 0; j < n; j++) K->act_token(type, X + (size_t)j * cols, cols, (uint8_t *)act + tok * (size_t)j);
    int failed = 0;
    sd_steal steal;
    sd_steal_init(&steal, first[count]);
#pragma omp parallel if (par)
    {
        if (split) { /* every thread of the team takes this branch, so all meet at the barrier */
            const int id = omp_get_thread_num(), nt = omp_get_num_threads(); /* contiguous: no shared lines */
            for (int j = n * id / nt; j < n * (id + 1) / nt; j++)
                K->act_token(type, X + (size_t)j * cols, cols, (uint8_t *)act + tok * (size_t)j);
#pragma omp barrier
        }
        /* Blocks by work stealing (kernels.h): mostly one contiguous range per thread, across
         * the matrices, so that each thread's weights stream sequentially. */
        int64_t b0, b1, r0, r1;
        uint8_t *grp = NULL; /* one group packed on the fly, for matrices without a packed copy */
        while (sd_steal_next(&steal, &b0, &b1)) {
            for (int i = 0; i < count; i++) {
                const int64_t rows = W[i]->rows;
                if (!sd_block_rows(first, i, b0, b1, rows, &r0, &r1)) continue;
                if (!r16) {
                    for (int j0 = 0; j0 < n; j0 += 8) {
                        const int nb = n - j0 < 8 ? n - j0 : 8;
                        K->qrows(nb, W[i], (const uint8_t *)act + tok * (size_t)j0, xs,
                                           Y[i] + (size_t)j0 * rows, r0, r1);
                    }
                    continue;
                }
                const size_t gbytes = r_gstride(type, W[i]->row_bytes);
                const int64_t g0 = r0 / 16, g1 = (r1 + 15) / 16, nblk = cols / 32;
                sd_r16_job job = {NULL, gbytes, nblk, rows, act, tok, L, Y[i], g0, g1};
                if (W[i]->packed) {
                    job.P = (const uint8_t *)W[i]->packed + (size_t)g0 * gbytes;
                    r16_tokens(K, type, job, n);
                    continue;
                }
                if (!grp && !(grp = aligned_alloc(64, (gbytes + 63) & ~(size_t)63))) {
#pragma omp atomic write
                    failed = 1;
                    break;
                }
                for (int64_t g = g0; g < g1; g++) {
                    const int nrows = rows - 16 * g < 16 ? (int)(rows - 16 * g) : 16;
                    sd_quant_pack_group(type, (const uint8_t *)W[i]->data + (size_t)(16 * g) * W[i]->row_bytes,
                                        W[i]->row_bytes, nrows, nblk, grp);
                    job.P = grp;
                    job.g0 = g;
                    job.g1 = g + 1;
                    r16_tokens(K, type, job, n);
                }
            }
        }
        free(grp);
    }
    free(tmp);
    return failed ? -1 : 0;
}
