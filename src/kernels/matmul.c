/* Matrix products: which kernel a product takes (the active path's float rows, the integer
 * kernels of quant.c, cblas_sgemm for large batches), how its rows are shared among the threads,
 * and the naive reference. */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/isa.h"
#include "kernels/portable.h"
#include "kernels/quant.h"

/* OpenBLAS exports these; declared here so any cblas.h works. */
extern void openblas_set_num_threads(int);
extern int openblas_get_num_threads(void);

/* OpenBLAS built for OpenMP shares per-process buffers between calls; contexts running on
 * several threads take turns in sgemm (prefill), which then uses every core anyway. */
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;

static void sgemm_locked(int n, int rows, int cols, const float *X, const float *W, int ldw, float *Y, int ldy) {
    pthread_mutex_lock(&g_blas_lock);
    /* OpenBLAS's OpenMP build waits for every thread it was told to use: given fewer (a team
     * capped by OMP_THREAD_LIMIT, or shrunk under OMP_DYNAMIC=true), its sgemm hung for good.
     * Both settings are the calling thread's, so they are checked here, on it. */
    if (omp_get_dynamic()) omp_set_dynamic(0);
    /* OpenBLAS keeps one process-wide count: it takes the calling context's, in the lock */
    const int team = sd_kernels_team(omp_get_max_threads());
    if (openblas_get_num_threads() != team) openblas_set_num_threads(team);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, X, cols, W, ldw, 0.0f, Y, ldy);
    pthread_mutex_unlock(&g_blas_lock);
}

size_t sd_matmul_scratch_floats(int64_t cols) { return (size_t)SD_DEQUANT_TILE_ROWS * (size_t)cols; }

/* ---------------------------------------------------------------- row access */

static inline const uint8_t *row_ptr(const sd_tensor *W, int64_t r) {
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

int sd_dequant_row(const sd_tensor *W, int64_t r, float *out) {
    const uint8_t *p = row_ptr(W, r);
    switch (W->type) {
    case SD_TYPE_F32:
        memcpy(out, p, (size_t)W->cols * sizeof(float));
        return 0;
    case SD_TYPE_F16: {
        const uint16_t *h = (const uint16_t *)p;
        for (int64_t i = 0; i < W->cols; i++) out[i] = sd_fp16_to_fp32(h[i]);
        return 0;
    }
    default: /* quantised and BF16 rows: kernels/quant.c */
        return sd_quant_dequant_row(W->type, p, out, W->cols);
    }
}

/* ---------------------------------------------------------------- reference matmul */

int sd_matmul_ref(const sd_tensor *W, const float *X, int n, float *Y) {
    float *row = malloc((size_t)W->cols * sizeof(float));
    if (!row) return -1;
    for (int64_t r = 0; r < W->rows; r++) {
        if (sd_dequant_row(W, r, row) != 0) {
            free(row);
            return -1;
        }
        for (int j = 0; j < n; j++) {
            double acc = 0;
            const float *x = X + (size_t)j * W->cols;
            for (int64_t c = 0; c < W->cols; c++) acc += (double)row[c] * x[c];
            Y[(size_t)j * W->rows + r] = (float)acc;
        }
    }
    free(row);
    return 0;
}

/* ---------------------------------------------------------------- packed F32 copies */

int sd_f32_can_pack(const sd_tensor *W) {
    return sd_kernels()->f32_packed && W->type == SD_TYPE_F32 && W->row_bytes == (size_t)W->cols * sizeof(float);
}

size_t sd_f32_packed_bytes(int64_t rows, int64_t cols) { return (size_t)((rows + 15) / 16) * 16 * (size_t)cols * sizeof(float); }

/* Panel by panel (each one thread's: 64 rows x cols, read and written within a few hundred KiB);
 * a 343 MB model packs in well under a second. */
void sd_f32_pack(const float *W, int64_t rows, int64_t cols, float *dst) {
    const int64_t np = (rows + SD_F32_PANEL - 1) / SD_F32_PANEL;
#pragma omp parallel for schedule(dynamic, 1) if (rows * cols >= SD_PAR_MIN_WORK)
    for (int64_t p = 0; p < np; p++) {
        const int64_t r0 = p * SD_F32_PANEL;
        const int w = sd_f32_panel_rows(rows, r0);
        float *P = dst + (size_t)r0 * (size_t)cols;
        for (int i = 0; i < w; i++) {
            const int64_t r = r0 + i;
            if (r < rows) {
                const float *src = W + (size_t)r * (size_t)cols;
                for (int64_t c = 0; c < cols; c++) P[(size_t)c * w + i] = src[c];
            } else {
                for (int64_t c = 0; c < cols; c++) P[(size_t)c * w + i] = 0.0f;
            }
        }
    }
}

/* ---------------------------------------------------------------- small batches */

/* Weights of a type the path's float rows do not take (F16 and BF16 on the portable path, and
 * dequantisable types without integer kernels): each row dequantised into rowbuf, then the
 * portable dot products. */
static void rows_dequant(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, float *rowbuf) {
    for (int64_t r = r0; r < r1; r++) {
        sd_dequant_row(W, r, rowbuf);
        for (int j = 0; j < n; j++) {
            const float *x = X + (size_t)j * W->cols;
            float acc = 0;
            for (int64_t c = 0; c < W->cols; c++) acc += rowbuf[c] * x[c];
            Y[(size_t)j * W->rows + r] = acc;
        }
    }
}

/* The portable path's F32 rows: each (row, token) one sum in column order, from the rows, or
 * from the panels of a packed copy, where the panel's rows of a column are independent sums the
 * compiler may vectorise without reordering any of them. */
void sd_portable_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb) {
    (void)xb;
    const int64_t cols = W->cols, rows = W->rows;
    if (W->packed && W->type == SD_TYPE_F32) {
        for (int64_t r = r0; r < r1; r += SD_F32_PANEL) {
            const float *P = (const float *)W->packed + (size_t)r * cols;
            const int w = sd_f32_panel_rows(rows, r);
            const int m = rows - r < w ? (int)(rows - r) : w;
            for (int j = 0; j < n; j++) {
                const float *x = X + (size_t)j * cols;
                float acc[SD_F32_PANEL] = {0};
                for (int64_t c = 0; c < cols; c++)
                    for (int i = 0; i < w; i++) acc[i] += P[(size_t)c * w + i] * x[c];
                for (int i = 0; i < m; i++) Y[(size_t)j * rows + r + i] = acc[i];
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *w = (const float *)row_ptr(W, r);
        for (int j = 0; j < n; j++) {
            const float *x = X + (size_t)j * cols;
            float acc = 0;
            for (int64_t c = 0; c < cols; c++) acc += w[c] * x[c];
            Y[(size_t)j * rows + r] = acc;
        }
    }
}

static inline int float_kernel(const sd_isa_kernels *K, sd_type t) { return (K->float_types & SD_TYPE_BIT(t)) != 0; }

/* Rows [r0, r1) for n <= SD_SMALL_BATCH tokens of a matrix without a packed copy. */
static void small_batch_rows(const sd_isa_kernels *K, const sd_tensor *W, const float *X, int n, float *Y, int64_t r0,
                             int64_t r1, float *rowbuf, const float *xb) {
    if (float_kernel(K, W->type)) K->rows(W, X, n, Y, r0, r1, xb);
    else rows_dequant(W, X, n, Y, r0, r1, rowbuf);
}

/* The n >= 2 tokens of X staged in scratch for the path's packed F32 kernel (the AVX2 one
 * broadcasts each activation to a vector), when it wants it and it fits; else NULL. Done once
 * per matmul, before its threads, instead of once per column, token and 8 rows in the kernel. */
static const float *prepare_xb(const sd_isa_kernels *K, const sd_tensor *W, const float *X, int n, float *scratch) {
    if (K->xb_floats && n >= 2 && scratch && K->xb_floats(W->cols, n) <= sd_matmul_scratch_floats(W->cols)) {
        K->broadcast_x(X, n, W->cols, scratch);
        return scratch;
    }
    return NULL;
}

static int type_has_kernel(sd_type t) {
    return t == SD_TYPE_F32 || t == SD_TYPE_F16 || sd_quant_has_dequant(t);
}

/* W's packed F32 copy is one the active path reads. */
static inline int packed_f32(const sd_isa_kernels *K, const sd_tensor *W) {
    return W->packed && W->type == SD_TYPE_F32 && K->f32_packed;
}

enum { MAXG = 4 }; /* matrices in one group (Q/K/V, gate/up) */

/* Rows [*r0, *r1) of matrix i (rows rows) in panels [b0, b1) of a range whose matrix i holds
 * panels [first[i], first[i+1]); 0 when none. */
static inline int panel_rows(const int64_t *first, int i, int64_t b0, int64_t b1, int64_t rows, int64_t *r0,
                             int64_t *r1) {
    const int64_t lo = b0 > first[i] ? b0 : first[i], hi = b1 < first[i + 1] ? b1 : first[i + 1];
    if (lo >= hi) return 0;
    *r0 = (lo - first[i]) * SD_F32_PANEL;
    *r1 = (hi - first[i]) * SD_F32_PANEL < rows ? (hi - first[i]) * SD_F32_PANEL : rows;
    return 1;
}

/* Packed F32 matrices with the same columns, every n (decode, verify, prefill): their panels
 * shared out by work stealing (kernels.h) across the matrices, each panel one thread's
 * sequential stream; a panel is computed whole by whoever takes it, so the bits do not depend
 * on the schedule. */
static void f32_panels(const sd_isa_kernels *K, const sd_tensor *const *W, float *const *Y, int count, const float *X,
                       int n, float *scratch) {
    int64_t first[MAXG + 1];
    double work = 0;
    first[0] = 0;
    for (int i = 0; i < count; i++) {
        first[i + 1] = first[i] + (W[i]->rows + SD_F32_PANEL - 1) / SD_F32_PANEL;
        work += (double)W[i]->rows * (double)W[i]->cols * n;
    }
    const float *xb = prepare_xb(K, W[0], X, n, scratch); /* one staging serves every matrix */
    if (work < SD_PAR_MIN_WORK) {
        /* Small work runs without entering OpenMP at all: even a team of one costs libgomp
         * barrier futex calls, twice per matmul of a tiny model. */
        for (int i = 0; i < count; i++) K->rows(W[i], X, n, Y[i], 0, W[i]->rows, xb);
        return;
    }
    sd_steal steal;
    sd_steal_init(&steal, first[count]);
#pragma omp parallel
    {
        int64_t b0, b1, r0, r1;
        while (sd_steal_next(&steal, &b0, &b1))
            for (int i = 0; i < count; i++)
                if (panel_rows(first, i, b0, b1, W[i]->rows, &r0, &r1)) K->rows(W[i], X, n, Y[i], r0, r1, xb);
    }
}

int sd_matmul(const sd_tensor *W, const float *X, int n, float *Y, float *scratch) {
    if (!type_has_kernel(W->type) || n < 1) return -1;
    const sd_isa_kernels *K = sd_kernels();
    const int64_t rows = W->rows, cols = W->cols;
    /* Quantised weights: integer kernels (kernels/quant.c) for every n. Prefill is faster
     * than sgemm on dequantised tiles, and every batch equals token-by-token bit for bit. */
    if (sd_quant_has_dot(W->type))
        return sd_quant_matmul(W, X, n, Y, scratch,
                               scratch ? sd_matmul_scratch_floats(cols) * sizeof(float) : 0);
    /* Packed F32 (every F32 matrix of a loaded model): the panel kernels for every n. */
    if (packed_f32(K, W)) {
        f32_panels(K, &W, &Y, 1, X, n, scratch);
        return 0;
    }
    if (n <= SD_SMALL_BATCH) {
        const double work = (double)rows * (double)cols * n;
        /* Blocks of 16 rows keep each thread's output writes in separate cache lines. */
        const int64_t nblk = (rows + 15) / 16;
        const int fk = float_kernel(K, W->type);
        if (work < SD_PAR_MIN_WORK && fk) { /* without OpenMP, as in f32_panels */
            K->rows(W, X, n, Y, 0, rows, NULL);
            return 0;
        }
        int fail = 0;
#pragma omp parallel if (work >= SD_PAR_MIN_WORK)
        {
            float *rowbuf = NULL;
            if (!fk) { /* dequantise each row for the portable dot products */
                rowbuf = malloc((size_t)cols * sizeof(float));
                if (!rowbuf) {
#pragma omp atomic write
                    fail = 1;
                }
            }
            int64_t b0, b1;
            sd_thread_blocks(nblk, &b0, &b1);
            int64_t r0 = b0 * 16, r1 = b1 * 16 < rows ? b1 * 16 : rows;
            if (r0 < r1 && (fk || rowbuf)) small_batch_rows(K, W, X, n, Y, r0, r1, rowbuf, NULL);
            free(rowbuf);
        }
        return fail ? -1 : 0;
    }
    /* Larger batches of row-major weights (F32 without a packed copy, F16, BF16): OpenBLAS. */
    if (W->type == SD_TYPE_F32) {
        sgemm_locked(n, (int)rows, (int)cols, X, (const float *)W->data, (int)(W->row_bytes / sizeof(float)), Y,
                     (int)rows);
        return 0;
    }
    /* Other types: dequantise a tile of rows into scratch and multiply it, so no call
     * ever expands the whole matrix. */
    if (!scratch) return -1;
    for (int64_t r0 = 0; r0 < rows; r0 += SD_DEQUANT_TILE_ROWS) {
        int64_t nr = rows - r0 < SD_DEQUANT_TILE_ROWS ? rows - r0 : SD_DEQUANT_TILE_ROWS;
#pragma omp parallel for schedule(static) if (nr * cols >= SD_PAR_MIN_WORK)
        for (int64_t r = 0; r < nr; r++) sd_dequant_row(W, r0 + r, scratch + (size_t)r * cols);
        sgemm_locked(n, (int)nr, (int)cols, X, scratch, (int)cols, Y + r0, (int)rows);
    }
    return 0;
}

int sd_matmul_group(const sd_tensor *const *W, float *const *Y, int count, const float *X, int n,
                    float *scratch) {
    const sd_isa_kernels *K = sd_kernels();
    int same_quant = count <= MAXG && sd_quant_has_dot(W[0]->type);
    for (int i = 1; i < count && same_quant; i++)
        same_quant = W[i]->type == W[0]->type && W[i]->cols == W[0]->cols;
    if (same_quant)
        return sd_quant_matmul_group(W, Y, count, X, n, scratch,
                                     scratch ? sd_matmul_scratch_floats(W[0]->cols) * sizeof(float) : 0);
    int panels = count <= MAXG;
    for (int i = 0; i < count && panels; i++) panels = packed_f32(K, W[i]) && W[i]->cols == W[0]->cols;
    if (panels) {
        f32_panels(K, W, Y, count, X, n, scratch);
        return 0;
    }
    int fused = count <= MAXG && n <= SD_SMALL_BATCH;
    for (int i = 0; i < count && fused; i++)
        fused = float_kernel(K, W[i]->type) && !packed_f32(K, W[i]) && W[i]->cols == W[0]->cols;
    double work = 0;
    for (int i = 0; i < count; i++) work += (double)W[i]->rows * (double)W[i]->cols * n;
    if (!fused || work < SD_PAR_MIN_WORK) {
        for (int i = 0; i < count; i++)
            if (sd_matmul(W[i], X, n, Y[i], scratch) != 0) return -1;
        return 0;
    }
    int64_t first[MAXG + 1]; /* first 16-row block of each matrix in the combined range */
    first[0] = 0;
    for (int i = 0; i < count; i++) first[i + 1] = first[i] + (W[i]->rows + 15) / 16;
#pragma omp parallel
    {
        int64_t b0, b1, r0, r1;
        sd_thread_blocks(first[count], &b0, &b1);
        for (int i = 0; i < count; i++) /* this thread's rows of each matrix */
            if (sd_block_rows(first, i, b0, b1, W[i]->rows, &r0, &r1)) K->rows(W[i], X, n, Y[i], r0, r1, NULL);
    }
    return 0;
}

/* ---------------------------------------------------------------- bandwidth probe */

double sd_stream_read(const float *buf, size_t n, int threads) {
    const sd_isa_kernels *K = sd_kernels();
    double total = 0;
    /* Each thread reads its share as 8 interleaved streams: one sequential stream per core
     * leaves the prefetchers short of the bandwidth that decode (its rows cut into 8 streams
     * per thread) draws, so a single-stream probe reported less than decode achieved. For the
     * same reason each path prefetches as its matrix kernels do. */
#pragma omp parallel num_threads(sd_kernels_team(threads)) reduction(+ : total)
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
        const size_t chunk = (n / (size_t)nt) & ~(size_t)1023;
        const size_t per = (chunk / 8) & ~(size_t)63;
        total += K->stream(buf + chunk * (size_t)id, per);
    }
    return total;
}
