/* Kernels: matrix products (streaming AVX-512 for decode and small batches, cblas_sgemm for
 * large batches), RMSNorm, RoPE, softmax, SwiGLU, attention, with naive references. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/quant.h"

#include "kernels/cpu.h"
#if SD_HAVE_AVX512
#include <immintrin.h>

#include "kernels/reduce.h"
#elif SD_HAVE_AVX2
#include "kernels/avx2.h"
#endif

/* Below this many multiply-adds (~20 us of one core) a parallel region's fork/join, and on a
 * busy machine the wait for a descheduled thread, cost more than a second core saves.
 * Draft models and stories260K stay single-threaded; every 110M-shape matrix goes parallel. */
#define SD_PAR_MIN_WORK (1 << 19)
#define SD_ATT_PAR_MIN_WORK (1 << 14)
/* Elementwise work (norms, RoPE, SwiGLU) splits across the threads from this many elements:
 * a prefill's rows (512 x 768 per norm), never a decode or verify pass's few, where the fork
 * would cost more than the ~0.1-0.4 ns per element it shares out. Run serially, they were
 * 13-19 ms of a 500-575 ms F32 pp512 pass on the 110M shape, the other thread waiting. */
#define SD_EW_PAR_MIN_ELEMS (1 << 16)

/* OpenBLAS exports this; declared here so any cblas.h works. */
extern void openblas_set_num_threads(int);
extern int openblas_get_num_threads(void);

static int g_threads = 0;

void sd_kernels_set_threads(int n) {
    if (n < 1) return;
    const int limit = omp_get_thread_limit(); /* OMP_THREAD_LIMIT: what OpenMP will give (see sgemm_locked) */
    if (limit > 0 && n > limit) n = limit;
    g_threads = n;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int sd_kernels_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

/* omp_set_num_threads sets the calling thread's team size only: a context run from another
 * thread would otherwise use OpenMP's default team. */
void sd_kernels_enter(void) {
    if (g_threads > 0 && omp_get_max_threads() != g_threads) omp_set_num_threads(g_threads);
}

int sd_kernels_max_threads(void) {
    int n = omp_get_max_threads();
    if (omp_get_num_procs() > n) n = omp_get_num_procs();
    if (g_threads > n) n = g_threads;
    return n;
}

/* OpenBLAS built for OpenMP shares per-process buffers between calls; contexts running on
 * several threads take turns in sgemm (prefill), which then uses every core anyway. */
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;

static void sgemm_locked(int n, int rows, int cols, const float *X, const float *W, int ldw, float *Y, int ldy) {
    pthread_mutex_lock(&g_blas_lock);
    /* OpenBLAS's OpenMP build waits for every thread it was told to use: given fewer (a team
     * capped by OMP_THREAD_LIMIT, or shrunk under OMP_DYNAMIC=true), its sgemm hung for good.
     * Both settings are the calling thread's, so they are checked here, on it. */
    if (omp_get_dynamic()) omp_set_dynamic(0);
    const int limit = omp_get_thread_limit();
    if (limit > 0 && openblas_get_num_threads() > limit) openblas_set_num_threads(limit);
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

/* ---------------------------------------------------------------- streaming kernels */

#if SD_HAVE_AVX512
static inline __m512 load16_f32(const void *p) { return _mm512_loadu_ps(p); }
static inline __m512 load16_f16(const void *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 maskload_f32(const void *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 maskload_f16(const void *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
/* BF16 is the top half of an F32: widening is exact, so BF16 rides the F32/F16 kernels. */
static inline __m512 load16_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m512 maskload_bf16(const void *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

/* The line SD_WEIGHT_PREFETCH_BYTES past p, into L2: one per stream and 64-byte step. 110M
 * shape, F32, 2 threads, paired runs alternating with the kernels without it (median of the
 * per-pair ratios of mean step times, AMD EPYC guest): decode (matvec) 0.948 [0.884-0.973],
 * faster in 15 of 16 pairs; verify(5) (multi) 0.755 [0.702-0.842], 12 of 12; verify(9) 27-28
 * -> 19-20 ms; verify(2) unchanged. The hardware prefetchers alone fell behind once the
 * kernels did more than one FMA per weight vector. */
static inline void weight_prefetch(const uint8_t *p) {
    _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES, SD_WEIGHT_PREFETCH_HINT);
}

/* One decode step. The thread's rows [r0, r1) are cut into MV_STREAMS equal sub-ranges and
 * row j of every sub-range is computed together, so each of the 8 weight streams runs
 * sequentially through contiguous rows: the access pattern of the bandwidth probe, which the
 * hardware prefetchers keep far ahead. Four adjacent rows at a time (the previous kernel)
 * restarted every stream after one row and drew about 75% of the probe's bandwidth.
 * Each row keeps its own accumulator in column order, so results do not depend on how the
 * rows are grouped (batched == stepwise, bit for bit). */
#define MV_STREAMS 8
#define DEFINE_MATVEC(SUF, ESZ, LOAD, MLOAD)                                                   \
    static void matvec_##SUF(const sd_tensor *W, const float *x, float *y, int64_t r0,        \
                             int64_t r1) {                                                     \
        const int64_t cols = W->cols;                                                          \
        const int64_t cv = cols & ~(int64_t)15;                                                \
        const __mmask16 tail = (__mmask16)((1u << (cols - cv)) - 1u);                          \
        const int64_t per = (r1 - r0) / MV_STREAMS;                                            \
        for (int64_t j = 0; j < per; j++) {                                                    \
            const uint8_t *w[MV_STREAMS];                                                      \
            __m512 a[MV_STREAMS];                                                              \
            for (int s = 0; s < MV_STREAMS; s++) {                                             \
                w[s] = row_ptr(W, r0 + s * per + j);                                           \
                a[s] = _mm512_setzero_ps();                                                    \
            }                                                                                  \
            for (int64_t c = 0; c < cv; c += 16) {                                             \
                __m512 xv = _mm512_loadu_ps(x + c);                                            \
                for (int s = 0; s < MV_STREAMS; s++) weight_prefetch(w[s] + c * ESZ);          \
                for (int s = 0; s < MV_STREAMS; s++)                                           \
                    a[s] = _mm512_fmadd_ps(LOAD(w[s] + c * ESZ), xv, a[s]);                    \
            }                                                                                  \
            if (tail) {                                                                        \
                __m512 xv = _mm512_maskz_loadu_ps(tail, x + cv);                               \
                for (int s = 0; s < MV_STREAMS; s++)                                           \
                    a[s] = _mm512_fmadd_ps(MLOAD(w[s] + cv * ESZ, tail), xv, a[s]);            \
            }                                                                                  \
            for (int s = 0; s < MV_STREAMS; s++)                                               \
                y[r0 + s * per + j] = _mm512_reduce_add_ps(a[s]);                              \
        }                                                                                      \
        for (int64_t r = r0 + per * MV_STREAMS; r < r1; r++) {                                 \
            const uint8_t *w0 = row_ptr(W, r);                                                 \
            __m512 a0 = _mm512_setzero_ps();                                                   \
            for (int64_t c = 0; c < cv; c += 16)                                               \
                a0 = _mm512_fmadd_ps(LOAD(w0 + c * ESZ), _mm512_loadu_ps(x + c), a0);          \
            if (tail)                                                                          \
                a0 = _mm512_fmadd_ps(MLOAD(w0 + cv * ESZ, tail),                               \
                                     _mm512_maskz_loadu_ps(tail, x + cv), a0);                 \
            y[r] = _mm512_reduce_add_ps(a0);                                                   \
        }                                                                                      \
    }

DEFINE_MATVEC(f32, 4, load16_f32, maskload_f32)
DEFINE_MATVEC(f16, 2, load16_f16, maskload_f16)
DEFINE_MATVEC(bf16, 2, load16_bf16, maskload_bf16)

/* Small batch: each weight vector is loaded once and multiplied into NB token rows held
 * in L1/L2, so verifying k+1 tokens streams the weights once, like one decode step. As in
 * matvec, S rows from S far-apart sub-ranges are computed together so every weight stream
 * stays sequential; S shrinks as NB grows to keep S*NB accumulators and S weight vectors in
 * the 32 vector registers. */
#define DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, NB, S)                                             \
    static void multi_##SUF##_##NB(const sd_tensor *W, const float *X, float *Y, int64_t r0,  \
                                   int64_t r1) {                                               \
        const int64_t cols = W->cols, rows = W->rows;                                          \
        const int64_t cv = cols & ~(int64_t)15;                                                \
        const __mmask16 tail = (__mmask16)((1u << (cols - cv)) - 1u);                          \
        const int64_t per = (r1 - r0) / S;                                                     \
        for (int64_t j = 0; j < per; j++) {                                                    \
            const uint8_t *w[S];                                                               \
            __m512 acc[S][NB];                                                                 \
            for (int s = 0; s < S; s++) {                                                      \
                w[s] = row_ptr(W, r0 + s * per + j);                                           \
                for (int t = 0; t < NB; t++) acc[s][t] = _mm512_setzero_ps();                  \
            }                                                                                  \
            for (int64_t c = 0; c < cv; c += 16) {                                             \
                __m512 wv[S];                                                                  \
                for (int s = 0; s < S; s++) weight_prefetch(w[s] + c * ESZ);                   \
                for (int s = 0; s < S; s++) wv[s] = LOAD(w[s] + c * ESZ);                      \
                for (int t = 0; t < NB; t++) {                                                 \
                    __m512 xv = _mm512_loadu_ps(X + t * cols + c);                             \
                    for (int s = 0; s < S; s++) acc[s][t] = _mm512_fmadd_ps(wv[s], xv, acc[s][t]); \
                }                                                                              \
            }                                                                                  \
            if (tail) {                                                                        \
                __m512 wv[S];                                                                  \
                for (int s = 0; s < S; s++) wv[s] = MLOAD(w[s] + cv * ESZ, tail);               \
                for (int t = 0; t < NB; t++) {                                                 \
                    __m512 xv = _mm512_maskz_loadu_ps(tail, X + t * cols + cv);                \
                    for (int s = 0; s < S; s++) acc[s][t] = _mm512_fmadd_ps(wv[s], xv, acc[s][t]); \
                }                                                                              \
            }                                                                                  \
            for (int s = 0; s < S; s++)                                                        \
                for (int t = 0; t < NB; t++)                                                   \
                    Y[t * rows + r0 + s * per + j] = _mm512_reduce_add_ps(acc[s][t]);          \
        }                                                                                      \
        for (int64_t r = r0 + per * S; r < r1; r++) {                                          \
            const uint8_t *w = row_ptr(W, r);                                                  \
            __m512 acc[NB];                                                                    \
            for (int t = 0; t < NB; t++) acc[t] = _mm512_setzero_ps();                         \
            for (int64_t c = 0; c < cv; c += 16) {                                             \
                __m512 wv = LOAD(w + c * ESZ);                                                 \
                for (int t = 0; t < NB; t++)                                                   \
                    acc[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(X + t * cols + c), acc[t]);   \
            }                                                                                  \
            if (tail) {                                                                        \
                __m512 wv = MLOAD(w + cv * ESZ, tail);                                         \
                for (int t = 0; t < NB; t++)                                                   \
                    acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(tail, X + t * cols + cv), \
                                             acc[t]);                                          \
            }                                                                                  \
            for (int t = 0; t < NB; t++) Y[t * rows + r] = _mm512_reduce_add_ps(acc[t]);      \
        }                                                                                      \
    }

/* Streams per token count: S*NB <= 24 accumulators, S + S*NB + 1 <= 32 registers. */
#define DEFINE_MULTI_ALL(SUF, ESZ, LOAD, MLOAD)                                                \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 2, 8)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 3, 7)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 4, 5)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 5, 4)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 6, 4)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 7, 3)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 8, 3)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 9, 2)                                                  \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 10, 2)                                                 \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 11, 2)                                                 \
    DEFINE_MULTI(SUF, ESZ, LOAD, MLOAD, 12, 2)

DEFINE_MULTI_ALL(f32, 4, load16_f32, maskload_f32)
DEFINE_MULTI_ALL(f16, 2, load16_f16, maskload_f16)
DEFINE_MULTI_ALL(bf16, 2, load16_bf16, maskload_bf16)

typedef void (*multi_fn)(const sd_tensor *, const float *, float *, int64_t, int64_t);
/* Tokens per pass over the weights: a verify pass of up to 12 tokens (k <= 11) reads them once. */
#define MULTI_MAX 12
static const multi_fn k_multi_f32[MULTI_MAX + 1] = {
    NULL, NULL, multi_f32_2, multi_f32_3, multi_f32_4, multi_f32_5, multi_f32_6, multi_f32_7, multi_f32_8, multi_f32_9, multi_f32_10, multi_f32_11, multi_f32_12};
static const multi_fn k_multi_f16[MULTI_MAX + 1] = {
    NULL, NULL, multi_f16_2, multi_f16_3, multi_f16_4, multi_f16_5, multi_f16_6, multi_f16_7, multi_f16_8, multi_f16_9, multi_f16_10, multi_f16_11, multi_f16_12};
static const multi_fn k_multi_bf16[MULTI_MAX + 1] = {
    NULL, NULL, multi_bf16_2, multi_bf16_3, multi_bf16_4, multi_bf16_5, multi_bf16_6, multi_bf16_7, multi_bf16_8, multi_bf16_9, multi_bf16_10, multi_bf16_11, multi_bf16_12};
#define SD_FLOAT_KERNEL(t) ((t) == SD_TYPE_F32 || (t) == SD_TYPE_F16 || (t) == SD_TYPE_BF16)
#elif SD_HAVE_AVX2 /* kernels_avx2.c */
#define SD_FLOAT_KERNEL(t) ((t) == SD_TYPE_F32 || (t) == SD_TYPE_F16 || (t) == SD_TYPE_BF16)
#else
#define SD_FLOAT_KERNEL(t) ((t) == SD_TYPE_F32)
#endif /* SD_HAVE_AVX512 */

#if SD_HAVE_AVX512
/* ---- F32 matrices of small models, regrouped at load (model.c decides which): 16 rows a group,
 * column-major inside it (sd_f32_pack), so a vector holds one column of 16 rows and a product
 * needs no horizontal sum: per column and token one FMA with the activation broadcast from
 * memory. For a tiny model (64 columns) the row kernels spent more on the horizontal sums than
 * on the products. Each (row, token) sums its columns in 4 interleaved partial sums (column c
 * into partial c % 4, in column order), then (p0 + p1) + (p2 + p3): the same for every batch
 * size and token chunk, so batched == stepwise, bit for bit. */
#define T16_TB 6 /* tokens per pass over a group: 4 x 6 accumulators in registers */

static inline __attribute__((always_inline)) void t16_col(const float *W, const float *X, int64_t cols, int64_t c,
                                                          const int NB, __m512 *acc) {
    const __m512 w = _mm512_load_ps(W + (size_t)c * 16);
    for (int t = 0; t < NB; t++) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(X[(size_t)t * cols + c]), acc[t]);
}

/* One group of 16 rows (m masks rows past the matrix) for NB (a constant once inlined) tokens. */
static inline __attribute__((always_inline)) void t16_group(const float *W, int64_t cols, const float *X, const int NB,
                                                            float *Y, int64_t rows, __mmask16 m) {
    __m512 a0[T16_TB], a1[T16_TB], a2[T16_TB], a3[T16_TB];
    for (int t = 0; t < NB; t++) a0[t] = a1[t] = a2[t] = a3[t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 4 <= cols; c += 4) {
        t16_col(W, X, cols, c, NB, a0);
        t16_col(W, X, cols, c + 1, NB, a1);
        t16_col(W, X, cols, c + 2, NB, a2);
        t16_col(W, X, cols, c + 3, NB, a3);
    }
    if (c < cols) t16_col(W, X, cols, c, NB, a0);
    if (c + 1 < cols) t16_col(W, X, cols, c + 1, NB, a1);
    if (c + 2 < cols) t16_col(W, X, cols, c + 2, NB, a2);
    for (int t = 0; t < NB; t++)
        _mm512_mask_storeu_ps(Y + (size_t)t * rows, m, _mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), _mm512_add_ps(a2[t], a3[t])));
}

/* Rows [r0, r1) (r0 a multiple of 16) of a packed F32 matrix for n tokens. */
static void t16_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1) {
    const int64_t cols = W->cols, rows = W->rows;
    for (int64_t r = r0; r < r1; r += 16) {
        const float *G = (const float *)W->packed + (size_t)r * cols;
        const __mmask16 m = rows - r >= 16 ? 0xFFFF : (__mmask16)((1u << (rows - r)) - 1);
        for (int t0 = 0; t0 < n; t0 += T16_TB) {
            const float *Xt = X + (size_t)t0 * cols;
            float *Yt = Y + (size_t)t0 * rows + r;
            switch (n - t0 < T16_TB ? n - t0 : T16_TB) {
            case 1: t16_group(G, cols, Xt, 1, Yt, rows, m); break;
            case 2: t16_group(G, cols, Xt, 2, Yt, rows, m); break;
            case 3: t16_group(G, cols, Xt, 3, Yt, rows, m); break;
            case 4: t16_group(G, cols, Xt, 4, Yt, rows, m); break;
            case 5: t16_group(G, cols, Xt, 5, Yt, rows, m); break;
            default: t16_group(G, cols, Xt, 6, Yt, rows, m); break;
            }
        }
    }
}
#endif

int sd_f32_can_pack(const sd_tensor *W) {
    return (SD_HAVE_AVX512 || SD_HAVE_AVX2) && W->type == SD_TYPE_F32 && W->row_bytes == (size_t)W->cols * sizeof(float);
}

size_t sd_f32_packed_bytes(int64_t rows, int64_t cols) { return (size_t)((rows + 15) / 16) * 16 * (size_t)cols * sizeof(float); }

void sd_f32_pack(const float *W, int64_t rows, int64_t cols, float *dst) {
    for (int64_t g = 0; g < (rows + 15) / 16; g++)
        for (int64_t c = 0; c < cols; c++)
            for (int i = 0; i < 16; i++) {
                const int64_t r = 16 * g + i;
                dst[((size_t)g * cols + c) * 16 + i] = r < rows ? W[(size_t)r * cols + c] : 0.0f;
            }
}

/* Portable fallback for machines without AVX-512 or AVX2: same structure, scalar. */
static void multi_generic(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0,
                          int64_t r1, float *rowbuf) {
    for (int64_t r = r0; r < r1; r++) {
        const float *w;
        if (W->type == SD_TYPE_F32) {
            w = (const float *)row_ptr(W, r);
        } else {
            sd_dequant_row(W, r, rowbuf);
            w = rowbuf;
        }
        for (int j = 0; j < n; j++) {
            const float *x = X + (size_t)j * W->cols;
            float acc = 0;
            for (int64_t c = 0; c < W->cols; c++) acc += w[c] * x[c];
            Y[(size_t)j * W->rows + r] = acc;
        }
    }
}

/* Rows [r0, r1) for n <= SD_SMALL_BATCH tokens, in groups of at most MULTI_MAX tokens. xb:
 * NULL, or X broadcast by prepare_xb (AVX2 builds, packed F32). */
static void small_batch_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0,
                             int64_t r1, float *rowbuf, const float *xb) {
#if SD_HAVE_AVX512
    if (W->packed && W->type == SD_TYPE_F32) {
        t16_rows(W, X, n, Y, r0, r1);
        return;
    }
    if (SD_FLOAT_KERNEL(W->type)) {
        const sd_type t = W->type;
        for (int j0 = 0; j0 < n; j0 += MULTI_MAX) {
            int nb = n - j0 < MULTI_MAX ? n - j0 : MULTI_MAX;
            const float *Xg = X + (size_t)j0 * W->cols;
            float *Yg = Y + (size_t)j0 * W->rows;
            if (nb == 1) {
                if (t == SD_TYPE_F16) matvec_f16(W, Xg, Yg, r0, r1);
                else if (t == SD_TYPE_BF16) matvec_bf16(W, Xg, Yg, r0, r1);
                else matvec_f32(W, Xg, Yg, r0, r1);
            } else {
                (t == SD_TYPE_F16 ? k_multi_f16 : t == SD_TYPE_BF16 ? k_multi_bf16 : k_multi_f32)[nb](W, Xg, Yg, r0, r1);
            }
        }
        return;
    }
#elif SD_HAVE_AVX2
    if (SD_FLOAT_KERNEL(W->type)) {
        sd_avx2_rows(W, X, n, Y, r0, r1, xb);
        return;
    }
#else
    (void)xb;
#endif
    multi_generic(W, X, n, Y, r0, r1, rowbuf);
}

/* AVX2 builds: the n >= 2 tokens of X broadcast into scratch for the packed F32 kernel of
 * matrices of `cols` columns (sd_avx2_broadcast_x), when it fits; else NULL. Done once per
 * matmul, before its threads, instead of once per column, token and 8 rows in the kernel. */
static const float *prepare_xb(const sd_tensor *W, const float *X, int n, float *scratch) {
#if SD_HAVE_AVX2
    if (W->packed && W->type == SD_TYPE_F32 && n >= 2 && scratch &&
        sd_avx2_xb_floats(W->cols, n) <= sd_matmul_scratch_floats(W->cols)) {
        sd_avx2_broadcast_x(X, n, W->cols, scratch);
        return scratch;
    }
#else
    (void)W; (void)X; (void)n; (void)scratch;
#endif
    return NULL;
}

void sd_thread_blocks(int64_t nblk, int64_t *b0, int64_t *b1) {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    *b0 = nblk * id / nt;
    *b1 = nblk * (id + 1) / nt;
}

static inline uint64_t steal_pack(uint32_t lo, uint32_t hi) { return (uint64_t)hi << 32 | lo; }

void sd_steal_init(sd_steal *w, int64_t nblk) {
    int nt = omp_get_max_threads();
    if (nt > SD_STEAL_MAX_THREADS) nt = SD_STEAL_MAX_THREADS;
    w->n = nt;
    for (int i = 0; i < nt; i++)
        atomic_store_explicit(&w->slot[i].range, steal_pack((uint32_t)(nblk * i / nt), (uint32_t)(nblk * (i + 1) / nt)),
                              memory_order_relaxed);
}

int sd_steal_next(sd_steal *w, int64_t *b0, int64_t *b1) {
    const int me = omp_get_thread_num();
    /* A thread beyond the slots (a team larger than SD_STEAL_MAX_THREADS, or than the team the
     * ranges were cut for) has no range of its own: it only steals, and computes what it took. */
    _Atomic uint64_t *mine = me < w->n ? &w->slot[me].range : NULL;
    for (;;) {
        uint64_t v = mine ? atomic_load_explicit(mine, memory_order_relaxed) : 0;
        uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo < hi) { /* claim a quarter of what is left of my range, from its front */
            uint32_t take = (hi - lo) / 4 ? (hi - lo) / 4 : 1;
            if (atomic_compare_exchange_weak_explicit(mine, &v, steal_pack(lo + take, hi), memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *b0 = lo;
                *b1 = lo + take;
                return 1;
            }
            continue;
        }
        /* Mine is empty: the back half of the fullest other range becomes mine. Only its
         * owner and thieves change a slot, each by compare-and-swap, and a claimed block never
         * returns to any slot, so a stale read can only make a swap fail. */
        int victim = -1;
        uint32_t most = 0;
        for (int i = 0; i < w->n; i++) {
            if (i == me) continue;
            uint64_t u = atomic_load_explicit(&w->slot[i].range, memory_order_relaxed);
            uint32_t rem = (uint32_t)(u >> 32) > (uint32_t)u ? (uint32_t)(u >> 32) - (uint32_t)u : 0;
            if (rem > most) most = rem, victim = i;
        }
        if (victim < 0) return 0;
        _Atomic uint64_t *theirs = &w->slot[victim].range;
        uint64_t u = atomic_load_explicit(theirs, memory_order_relaxed);
        uint32_t ulo = (uint32_t)u, uhi = (uint32_t)(u >> 32);
        if (ulo >= uhi) continue;
        uint32_t take = (uhi - ulo + 1) / 2;
        if (!atomic_compare_exchange_strong_explicit(theirs, &u, steal_pack(ulo, uhi - take), memory_order_relaxed,
                                                     memory_order_relaxed))
            continue;
        if (!mine) {
            *b0 = uhi - take;
            *b1 = uhi;
            return 1;
        }
        atomic_store_explicit(mine, steal_pack(uhi - take, uhi), memory_order_relaxed);
    }
}

static int type_has_kernel(sd_type t) {
    return t == SD_TYPE_F32 || t == SD_TYPE_F16 || sd_quant_has_dequant(t);
}

int sd_matmul(const sd_tensor *W, const float *X, int n, float *Y, float *scratch) {
    if (!type_has_kernel(W->type) || n < 1) return -1;
    const int64_t rows = W->rows, cols = W->cols;
    /* Quantised weights: integer kernels (kernels/quant.c) for every n. Prefill is faster
     * than sgemm on dequantised tiles, and every batch equals token-by-token bit for bit. */
    if (sd_quant_has_dot(W->type))
        return sd_quant_matmul(W, X, n, Y, scratch,
                               scratch ? sd_matmul_scratch_floats(cols) * sizeof(float) : 0);
    /* A packed F32 matrix (a small model) takes its kernel for every n: sgemm on a 48-column
     * draft cost more in OpenBLAS's start-up than in arithmetic (a 128-token catch-up of the
     * stories draft: ~250 us). */
    if (n <= SD_SMALL_BATCH || (W->packed && W->type == SD_TYPE_F32)) {
        const double work = (double)rows * (double)cols * n;
        /* Blocks of 16 rows keep each thread's output writes in separate cache lines. */
        const int64_t nblk = (rows + 15) / 16;
        const float *xb = prepare_xb(W, X, n, scratch);
        if (work < SD_PAR_MIN_WORK && SD_FLOAT_KERNEL(W->type)) {
            /* Small work runs without entering OpenMP at all: even a team of one costs
             * libgomp barrier futex calls, twice per matmul of a tiny model. */
            small_batch_rows(W, X, n, Y, 0, rows, NULL, xb);
            return 0;
        }
        int fail = 0;
#pragma omp parallel if (work >= SD_PAR_MIN_WORK)
        {
            float *rowbuf = NULL;
            if (!SD_FLOAT_KERNEL(W->type)) { /* dequantise each row for the generic kernel */
                rowbuf = malloc((size_t)cols * sizeof(float));
                if (!rowbuf) {
#pragma omp atomic write
                    fail = 1;
                }
            }
            int64_t b0, b1;
            sd_thread_blocks(nblk, &b0, &b1);
            int64_t r0 = b0 * 16, r1 = b1 * 16 < rows ? b1 * 16 : rows;
            if (r0 < r1 && (SD_FLOAT_KERNEL(W->type) || rowbuf))
                small_batch_rows(W, X, n, Y, r0, r1, rowbuf, xb);
            free(rowbuf);
        }
        return fail ? -1 : 0;
    }
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
    enum { MAXG = 4 };
    int same_quant = count <= MAXG && sd_quant_has_dot(W[0]->type);
    for (int i = 1; i < count && same_quant; i++)
        same_quant = W[i]->type == W[0]->type && W[i]->cols == W[0]->cols;
    if (same_quant)
        return sd_quant_matmul_group(W, Y, count, X, n, scratch,
                                     scratch ? sd_matmul_scratch_floats(W[0]->cols) * sizeof(float) : 0);
    int fused = count <= MAXG && n <= SD_SMALL_BATCH;
    for (int i = 0; i < count && fused; i++)
        fused = SD_FLOAT_KERNEL(W[i]->type) && W[i]->cols == W[0]->cols;
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
    const float *xb[MAXG], *xb1 = NULL; /* one broadcast of X serves every packed matrix (same columns) */
    for (int i = 0, done = 0; i < count; i++) {
        xb[i] = NULL;
        if (!W[i]->packed || W[i]->type != SD_TYPE_F32) continue;
        if (!done) xb1 = prepare_xb(W[i], X, n, scratch), done = 1;
        xb[i] = xb1;
    }
#pragma omp parallel
    {
        int64_t b0, b1, r0, r1;
        sd_thread_blocks(first[count], &b0, &b1);
        for (int i = 0; i < count; i++) /* this thread's rows of each matrix */
            if (sd_block_rows(first, i, b0, b1, W[i]->rows, &r0, &r1))
                small_batch_rows(W[i], X, n, Y[i], r0, r1, NULL, xb[i]);
    }
    return 0;
}

/* ---------------------------------------------------------------- elementwise */

static inline float dot_f32(const float *a, const float *b, int n) {
#if SD_HAVE_AVX512
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
#elif SD_HAVE_AVX2
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        const __m256i m = tail8(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc);
    }
    return hsum8(acc);
#else
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
#endif
}

static void rmsnorm_row(float *o, const float *xr, const float *w, int d, float eps) {
    float ss = dot_f32(xr, xr, d);
    float scale = 1.0f / sqrtf(ss / (float)d + eps);
    for (int i = 0; i < d; i++) o[i] = xr[i] * scale * w[i];
}

void sd_rmsnorm(float *out, const float *x, const float *w, int n, int d, float eps) {
    if ((int64_t)n * d < SD_EW_PAR_MIN_ELEMS) { /* not even a team of one: see sd_matmul */
        for (int t = 0; t < n; t++) rmsnorm_row(out + (size_t)t * d, x + (size_t)t * d, w, d, eps);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) rmsnorm_row(out + (size_t)t * d, x + (size_t)t * d, w, d, eps);
}

void sd_rope_angles(int pos, const float *inv_freq, int rope_dim, float *cs) {
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        cs[i] = cosf((float)pos * inv_freq[i]);
        cs[half + i] = sinf((float)pos * inv_freq[i]);
    }
}

#if SD_HAVE_AVX512
/* exp for 16 lanes: 2^n * e^r with n = round(x / ln 2), |r| <= ln2/2, Cephes' degree-6
 * polynomial for e^r (about 1 ulp), and scalef for the 2^n. Softmax of a 32000-entry
 * vocabulary or of a few hundred attention scores is dominated by exp otherwise. */
static inline __m512 exp512(__m512 x) {
    /* Above expf's overflow threshold the result is +inf as expf's (the clamp below left a
     * finite 3.4e38 there: SwiGLU of a gate of -1e38 gave -0.29 instead of -0). x goes second
     * in max and min, which return their second operand when one is NaN, so a NaN stays NaN
     * (the other order made a NaN attention score a weight of 1e-38, hiding NaN weights). */
    const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(88.72283f), _mm512_max_ps(_mm512_set1_ps(-87.33654f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), over, _mm512_set1_ps(INFINITY));
}

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
}
#endif

void sd_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
#if SD_HAVE_AVX512
    /* The reference's multiplies and subtractions per element, 16 lanes at a time: the same
     * bits (x - y*s is computed as x + y*(-s), which IEEE makes equal). The scalar loop cost
     * ~0.3 us per head set, q and k of every token of every layer, on one thread. */
    const int half = rope_dim / 2;
    if (half_style) {
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int i = 0; i < half; i += 16) {
                const __mmask16 m = tail_mask(half - i);
                const __m512 c = _mm512_maskz_loadu_ps(m, cs + i), s = _mm512_maskz_loadu_ps(m, cs + half + i);
                const __m512 lo = _mm512_maskz_loadu_ps(m, v + i), hi = _mm512_maskz_loadu_ps(m, v + half + i);
                _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(lo, c), _mm512_mul_ps(hi, s)));
                _mm512_mask_storeu_ps(v + half + i, m, _mm512_add_ps(_mm512_mul_ps(lo, s), _mm512_mul_ps(hi, c)));
            }
        }
        return;
    }
    enum { MAXD = 512 };
    if (rope_dim <= MAXD) { /* pairs (2i, 2i+1): each lane's cosine, and its sine signed for its side */
        float cd[MAXD], sd[MAXD];
        for (int i = 0; i < half; i++) {
            cd[2 * i] = cd[2 * i + 1] = cs[i];
            sd[2 * i] = -cs[half + i];
            sd[2 * i + 1] = cs[half + i];
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int i = 0; i < rope_dim; i += 16) {
                const __mmask16 m = tail_mask(rope_dim - i);
                const __m512 a = _mm512_maskz_loadu_ps(m, v + i);
                const __m512 b = _mm512_permute_ps(a, 0xB1); /* each pair swapped */
                _mm512_mask_storeu_ps(v + i, m,
                                      _mm512_add_ps(_mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, cd + i)),
                                                    _mm512_mul_ps(b, _mm512_maskz_loadu_ps(m, sd + i))));
            }
        }
        return;
    }
#elif SD_HAVE_AVX2
    /* sd_rope_ref's operations, 8 lanes at a time (as the AVX-512 path above). */
    const int half = rope_dim / 2;
    if (half_style) {
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int i = 0; i < half; i += 8) {
                const __m256i m = tail8(half - i);
                const __m256 c = _mm256_maskload_ps(cs + i, m), s = _mm256_maskload_ps(cs + half + i, m);
                const __m256 lo = _mm256_maskload_ps(v + i, m), hi = _mm256_maskload_ps(v + half + i, m);
                _mm256_maskstore_ps(v + i, m, _mm256_sub_ps(_mm256_mul_ps(lo, c), _mm256_mul_ps(hi, s)));
                _mm256_maskstore_ps(v + half + i, m, _mm256_add_ps(_mm256_mul_ps(lo, s), _mm256_mul_ps(hi, c)));
            }
        }
        return;
    }
    enum { MAXD = 512 };
    if (rope_dim <= MAXD) {
        float cd[MAXD], sd[MAXD];
        for (int i = 0; i < half; i++) {
            cd[2 * i] = cd[2 * i + 1] = cs[i];
            sd[2 * i] = -cs[half + i];
            sd[2 * i + 1] = cs[half + i];
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            for (int i = 0; i < rope_dim; i += 8) {
                const __m256i m = tail8(rope_dim - i);
                const __m256 a = _mm256_maskload_ps(v + i, m);
                const __m256 b = _mm256_permute_ps(a, 0xB1); /* each pair swapped */
                _mm256_maskstore_ps(v + i, m,
                                    _mm256_add_ps(_mm256_mul_ps(a, _mm256_maskload_ps(cd + i, m)),
                                                  _mm256_mul_ps(b, _mm256_maskload_ps(sd + i, m))));
            }
        }
        return;
    }
#endif
    sd_rope_ref(x, n_heads, head_dim, rope_dim, cs, half_style);
}

void sd_rope_tokens(float *q, float *k, int n, int n_heads, int n_kv_heads, int head_dim, int rope_dim,
                    const float *cs, int half_style) {
    const int64_t qd = (int64_t)n_heads * head_dim, kd = (int64_t)n_kv_heads * head_dim;
#define ROPE_TOKEN(t)                                                                                   \
    do {                                                                                                \
        sd_rope(q + (size_t)(t) * qd, n_heads, head_dim, rope_dim, cs + (size_t)(t) * rope_dim, half_style); \
        sd_rope(k + (size_t)(t) * kd, n_kv_heads, head_dim, rope_dim, cs + (size_t)(t) * rope_dim, half_style); \
    } while (0)
    if ((int64_t)n * (qd + kd) < SD_EW_PAR_MIN_ELEMS) { /* not even a team of one: see sd_matmul */
        for (int t = 0; t < n; t++) ROPE_TOKEN(t);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) ROPE_TOKEN(t);
#undef ROPE_TOKEN
}

void sd_rope_ref(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[i], s = cs[half + i];
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            /* interleaved: pair (2i, 2i+1); rotate-half: pair (i, i + rope_dim/2) */
            int a = half_style ? i : 2 * i;
            int b = half_style ? i + half : 2 * i + 1;
            float v0 = v[a], v1 = v[b];
            v[a] = v0 * c - v1 * s;
            v[b] = v0 * s + v1 * c;
        }
    }
}

void sd_softmax(float *x, int n) {
#if SD_HAVE_AVX512
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16)
        vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - i), x + i));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
        e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(x + i, m, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
#elif SD_HAVE_AVX2
    int i = 0;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mxs = -INFINITY;
    for (int j = i; j < n; j++) mxs = x[j] > mxs ? x[j] : mxs;
    const float vm = hmax8(vmax);
    mxs = vm > mxs ? vm : mxs;
    const __m256 mx = _mm256_set1_ps(mxs);
    __m256 vsum = _mm256_setzero_ps();
    /* full vectors unmasked, the tail masked (the same values: masking per vector cost ~30% of
     * the instructions of an attention row of 65) */
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    const __m256i m = tail8(n - i);
    if (i < n) {
        const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mx)), _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum8(vsum));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    if (i < n) _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
#else
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
#endif
}

long sd_first_nonfinite(const float *x, size_t n) {
    size_t i = 0;
#if SD_HAVE_AVX512
    /* 16 at a time (the scalar loop was ~10 us over a 32000-entry logit row per step) */
    for (; i + 16 <= n; i += 16) {
        const __mmask16 bad = _mm512_fpclass_ps_mask(_mm512_loadu_ps(x + i), 0x99); /* NaN, +-inf */
        if (bad) return (long)(i + (size_t)__builtin_ctz(bad));
    }
#elif SD_HAVE_AVX2
    for (; i + 8 <= n; i += 8) {
        const int bad = nonfinite8(_mm256_loadu_ps(x + i));
        if (bad) return (long)(i + (size_t)__builtin_ctz((unsigned)bad));
    }
#endif
    for (; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

/* SwiGLU on [i0, i1): each element on its own, so any split gives the same bits. */
static void swiglu_range(float *a, const float *b, int64_t i0, int64_t i1) {
#if SD_HAVE_AVX512
    /* The vectorised exp of softmax: scalar expf here was ~3% of a quantised decode step. */
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = tail_mask((int)(i1 - i < 16 ? i1 - i : 16));
        const __m512 g = _mm512_maskz_loadu_ps(m, a + i);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(a + i, m,
                              _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, b + i)));
    }
#elif SD_HAVE_AVX2
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = i0; i < i1; i += 8) {
        const __m256i m = tail8((int)(i1 - i < 8 ? i1 - i : 8));
        const __m256 g = _mm256_maskload_ps(a + i, m);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_maskstore_ps(a + i, m, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_maskload_ps(b + i, m)));
    }
#else
    for (int64_t i = i0; i < i1; i++) {
        float g = a[i];
        a[i] = g / (1.0f + expf(-g)) * b[i];
    }
#endif
}

void sd_swiglu(float *a, const float *b, int n) {
    if (n < SD_EW_PAR_MIN_ELEMS) {
        swiglu_range(a, b, 0, n);
        return;
    }
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num(), nv = ((int64_t)n + 15) / 16;
        const int64_t i0 = nv * id / nt * 16, i1 = nv * (id + 1) / nt * 16; /* whole vectors per thread */
        swiglu_range(a, b, i0, i1 < n ? i1 : n);
    }
}

/* ---------------------------------------------------------------- attention */

#if SD_HAVE_AVX512
/* Prefetch of the n floats at p: the same slice of the next block of 16 positions, one line at
 * a time as the current block is read (key and value slices of a head are kv_dim apart, a
 * stride the hardware prefetchers do not follow; a burst of a whole block at once stalled),
 * into L2 (T1). Q4_K 110M shape, 2 threads, paired runs against T0 (median ratio of mean step
 * times, AMD EPYC guest): decode at position 600 0.825 [0.799-0.895], 10 of 10 faster; at 2000
 * 0.798; verify(5) at 600 0.790. */
#define ATT_PF_MIN_CTX 128

static inline void prefetch_next(const float *p, int n) {
    for (int i = 0; i < n; i += 16) _mm_prefetch((const char *)(p + i), _MM_HINT_T1);
}

/* Rows of the block after the one at t0 to prefetch (0..16): only for contexts of at least
 * ATT_PF_MIN_CTX positions. Against prefetching at every length (T1, Q4_K decode): at 64
 * positions 1.052 (slower), at 120 0.973, at 160 0.954. */
static inline int att_prefetch_rows(int n_ctx, int t0) {
    const int next = n_ctx < ATT_PF_MIN_CTX ? 0 : n_ctx - t0 - 16;
    return next < 0 ? 0 : next > 16 ? 16 : next;
}

/* Position by position with q in NC registers (head_dim == 16 * NC): one key pointer at a
 * time, so nothing spills; the same operations in the same order as the generic loop. */
#define DEFINE_SCORE_BLOCK(NC)                                                                 \
    static inline void score_block_##NC(const float *q, const float *k0, int kv_dim, int cnt,  \
                                        float scale, float *att, int pf) {                      \
        __m512 qv[NC], p[16];                                                                  \
        for (int c = 0; c < NC; c++) qv[c] = _mm512_loadu_ps(q + 16 * c);                      \
        _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) {                                \
            const float *k = k0 + (size_t)(i < cnt ? i : cnt - 1) * kv_dim;                    \
            if (i < pf) prefetch_next(k0 + (size_t)(16 + i) * kv_dim, 16 * NC);                 \
            __m512 acc = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k));                             \
            for (int c = 1; c < NC; c++) acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + 16 * c), acc); \
            p[i] = acc;                                                                        \
        }                                                                                      \
        _mm512_mask_storeu_ps(att, tail_mask(cnt), _mm512_mul_ps(transpose_sum16(p), _mm512_set1_ps(scale))); \
    }
DEFINE_SCORE_BLOCK(4)
DEFINE_SCORE_BLOCK(8)

/* Scaled scores q . k for cnt (1..16) positions whose key slices start at k0, kv_dim apart,
 * into att[0..cnt). head_dim >= 16. Positions past cnt re-read the last key (in bounds; their
 * lanes are not stored), so the 16 accumulators stay in registers without branches. */
static inline void score_block(const float *q, const float *k0, int kv_dim, int head_dim, int cnt,
                               float scale, float *att, int pf) {
    if (head_dim == 64) {
        score_block_4(q, k0, kv_dim, cnt, scale, att, pf);
        return;
    }
    if (head_dim == 128) {
        score_block_8(q, k0, kv_dim, cnt, scale, att, pf);
        return;
    }
    for (int i = 0; i < pf; i++) prefetch_next(k0 + (size_t)(16 + i) * kv_dim, head_dim);
    const float *k[16];
    for (int i = 0; i < 16; i++) k[i] = k0 + (size_t)(i < cnt ? i : cnt - 1) * kv_dim;
    __m512 p[16];
    const __mmask16 m0 = tail_mask(head_dim);
    const __m512 q0 = _mm512_maskz_loadu_ps(m0, q);
    for (int i = 0; i < 16; i++) p[i] = _mm512_mul_ps(q0, _mm512_maskz_loadu_ps(m0, k[i]));
    for (int c = 16; c < head_dim; c += 16) {
        const __mmask16 m = tail_mask(head_dim - c);
        const __m512 qc = _mm512_maskz_loadu_ps(m, q + c);
        for (int i = 0; i < 16; i++) p[i] = _mm512_fmadd_ps(qc, _mm512_maskz_loadu_ps(m, k[i] + c), p[i]);
    }
    _mm512_mask_storeu_ps(att, tail_mask(cnt), _mm512_mul_ps(transpose_sum16(p), _mm512_set1_ps(scale)));
}

/* o[0..span) += sum over positions t < count of att[t] * value slice t (from v, kv_dim
 * apart), span <= 64: four accumulators in registers (masks zero the dims past span). */
static inline void value_block(float *o, const float *att, const float *v, int kv_dim, int count, int span,
                               int pf) {
    const __mmask16 m0 = tail_mask(span), m1 = tail_mask(span - 16), m2 = tail_mask(span - 32),
                    m3 = tail_mask(span - 48);
    __m512 a0 = _mm512_maskz_loadu_ps(m0, o), a1 = _mm512_maskz_loadu_ps(m1, o + 16);
    __m512 a2 = _mm512_maskz_loadu_ps(m2, o + 32), a3 = _mm512_maskz_loadu_ps(m3, o + 48);
    for (int t = 0; t < count; t++, v += kv_dim) {
        if (t < pf) prefetch_next(v + (size_t)16 * kv_dim, span);
        const __m512 a = _mm512_set1_ps(att[t]);
        a0 = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m0, v), a0);
        a1 = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m1, v + 16), a1);
        a2 = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m2, v + 32), a2);
        a3 = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m3, v + 48), a3);
    }
    _mm512_mask_storeu_ps(o, m0, a0);
    _mm512_mask_storeu_ps(o + 16, m1, a1);
    _mm512_mask_storeu_ps(o + 32, m2, a2);
    _mm512_mask_storeu_ps(o + 48, m3, a3);
}

/* value_block (span 64) for two tokens over the same value rows: o0/o1[0..64) += sum over
 * t < n0/n1 of a0/a1[t] * value slice t, n0 <= n1. Each row is loaded once for both, and
 * the two give 8 independent FMA chains where one token's 4 left the FMA latency exposed;
 * per token the operations and their order are value_block's, so the sums are its bits. */
static inline void value_pair64(float *o0, float *o1, const float *a0, const float *a1, int n0, int n1, const float *v,
                                int kv_dim, int pf) {
    __m512 x[4], y[4];
    for (int c = 0; c < 4; c++) {
        x[c] = _mm512_loadu_ps(o0 + 16 * c);
        y[c] = _mm512_loadu_ps(o1 + 16 * c);
    }
    int t = 0;
    for (; t < n0; t++, v += kv_dim) {
        if (t < pf) prefetch_next(v + (size_t)16 * kv_dim, 64);
        const __m512 w0 = _mm512_set1_ps(a0[t]), w1 = _mm512_set1_ps(a1[t]);
        for (int c = 0; c < 4; c++) {
            const __m512 r = _mm512_loadu_ps(v + 16 * c);
            x[c] = _mm512_fmadd_ps(w0, r, x[c]);
            y[c] = _mm512_fmadd_ps(w1, r, y[c]);
        }
    }
    for (; t < n1; t++, v += kv_dim) { /* the second token's extra row */
        if (t < pf) prefetch_next(v + (size_t)16 * kv_dim, 64);
        const __m512 w1 = _mm512_set1_ps(a1[t]);
        for (int c = 0; c < 4; c++) y[c] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(v + 16 * c), y[c]);
    }
    for (int c = 0; c < 4; c++) {
        _mm512_storeu_ps(o0 + 16 * c, x[c]);
        _mm512_storeu_ps(o1 + 16 * c, y[c]);
    }
}

/* Rows [0, rows) of columns [c0, c1) of an F16 cache block (kv_dim apart) as floats, span =
 * c1 - c0 apart, into dst: conversion is exact, so attention over them equals attention over
 * an F32 cache holding the same rounded values, bit for bit. */
static inline void rows_f16_to_f32(const uint16_t *src, int kv_dim, int rows, int c0, int c1, float *dst) {
    const int span = c1 - c0;
    for (int r = 0; r < rows; r++) {
        const uint16_t *s = src + (size_t)r * kv_dim + c0;
        float *d = dst + (size_t)r * span;
        for (int c = 0; c < span; c += 16) {
            const __mmask16 m = tail_mask(span - c);
            _mm512_mask_storeu_ps(d + c, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + c)));
        }
    }
}

/* The cache block of positions t0..t0+15 (n_ctx bounds it) as floats: an F32 cache's rows in
 * place (kv_dim apart), an F16 cache's columns [c0, c1) converted into conv (c1 - c0 apart). */
static inline const float *att_block(const void *C, int f16, int kv_dim, int n_ctx, int t0, int c0, int c1,
                                     float *conv) {
    if (!f16) return (const float *)C + (size_t)t0 * kv_dim;
    /* The next block's halves, as prefetch_next does for an F32 cache (which the F16 path
     * lacked). Q4_K 110M shape, --kv-type f16, paired runs without/with (median ratio of mean
     * step times): decode at 160 positions 0.801, at 600 0.679 (6.06 -> 3.92 ms), at 2000 0.749;
     * verify(5) at 600 0.827; faster in 25 of 26 pairs. */
    const int next = att_prefetch_rows(n_ctx, t0);
    const uint16_t *nb = (const uint16_t *)C + (size_t)(t0 + 16) * kv_dim + c0;
    for (int r = 0; r < next; r++)
        for (int c = 0; c < c1 - c0; c += 32) _mm_prefetch((const char *)(nb + (size_t)r * kv_dim + c), _MM_HINT_T1);
    rows_f16_to_f32((const uint16_t *)C + (size_t)t0 * kv_dim, kv_dim, n_ctx - t0 < 16 ? n_ctx - t0 : 16, c0, c1, conv);
    return conv;
}
#endif

#if SD_HAVE_AVX512
/* out[0..head_dim) = sum over t < n of att[t] * value row t (kv_dim apart from Vh), for a
 * short head (head_dim < 16, m its mask): one register of value dims, two accumulators over
 * alternating positions, added at the end. */
static inline void short_head_values(const float *att, const float *Vh, int kv_dim, int n, __mmask16 m, float *out) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int t = 0;
    for (; t + 2 <= n; t += 2) {
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), _mm512_maskz_loadu_ps(m, Vh + (size_t)t * kv_dim), a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 1]), _mm512_maskz_loadu_ps(m, Vh + (size_t)(t + 1) * kv_dim), a1);
    }
    if (t < n) a0 = _mm512_fmadd_ps(_mm512_set1_ps(att[t]), _mm512_maskz_loadu_ps(m, Vh + (size_t)t * kv_dim), a0);
    _mm512_mask_storeu_ps(out, m, _mm512_add_ps(a0, a1));
}
#endif

/* One query head against positions 0..n_ctx-1 of its KV head. */
static void attend_one(const float *q, const float *K, const float *V, float *out, int n_ctx,
                       int kv_dim, int head_dim, int kvh, float *att) {
    const float scale = 1.0f / sqrtf((float)head_dim);
    const float *Kh = K + (size_t)kvh * head_dim;
    const float *Vh = V + (size_t)kvh * head_dim;
#if SD_HAVE_AVX512
    if (head_dim < 16) {
        /* Short heads: 16 positions per step, gathering one dimension of 16 keys at a time,
         * instead of a horizontal sum per position. */
        const __m512i idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(kv_dim));
        for (int t0 = 0; t0 < n_ctx; t0 += 16) {
            const __mmask16 m = tail_mask(n_ctx - t0);
            const float *base = Kh + (size_t)t0 * kv_dim;
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < head_dim; d++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(q[d]),
                                      _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, base + d, 4), acc);
            _mm512_mask_storeu_ps(att + t0, m, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
        }
        sd_softmax(att, n_ctx);
        short_head_values(att, Vh, kv_dim, n_ctx, tail_mask(head_dim), out);
        return;
    }
    /* The same blocks as attend_heads, so both give the same bits. */
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
        const int cnt = n_ctx - t0 < 16 ? n_ctx - t0 : 16;
        score_block(q, Kh + (size_t)t0 * kv_dim, kv_dim, head_dim, cnt, scale, att + t0, att_prefetch_rows(n_ctx, t0));
    }
    sd_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int c = 0; c < head_dim; c += 64)
        value_block(out + c, att, Vh + c, kv_dim, n_ctx, head_dim - c < 64 ? head_dim - c : 64, 0);
#else
    for (int t = 0; t < n_ctx; t++) att[t] = dot_f32(q, Kh + (size_t)t * kv_dim, head_dim) * scale;
    sd_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int t = 0; t < n_ctx; t++) {
        const float *v = Vh + (size_t)t * kv_dim;
        const float a = att[t];
        for (int i = 0; i < head_dim; i++) out[i] += a * v[i];
    }
#endif
}

/* ---- tree attention: a query attends to the cache prefix and to its own path of batch rows */

/* Row of attended position t: the prefix [0, pos0) in place, then the path's rows. */
static inline int path_row(int t, int pos0, const int32_t *path) { return t < pos0 ? t : pos0 + path[t - pos0]; }

/* attend_one for a query whose positions are rows path_row(0..n_ctx): every operation and its
 * order are attend_one's (scores per position, softmax over the same vector, values summed in
 * position order), so a path gives the bits of the chain that holds it contiguously. */
static void attend_one_path(const float *q, const float *K, const float *V, float *out, int pos0, const int32_t *path,
                            int n_ctx, int kv_dim, int head_dim, int kvh, float *att) {
    const float scale = 1.0f / sqrtf((float)head_dim);
    const float *Kh = K + (size_t)kvh * head_dim;
    const float *Vh = V + (size_t)kvh * head_dim;
#if SD_HAVE_AVX512
    if (head_dim < 16) {
        for (int t0 = 0; t0 < n_ctx; t0 += 16) {
            const __mmask16 m = tail_mask(n_ctx - t0);
            /* offsets from the block's first row keep the 32-bit gather indices small */
            const int r0 = path_row(t0, pos0, path);
            int32_t off[16];
            for (int i = 0; i < 16; i++) off[i] = t0 + i < n_ctx ? (path_row(t0 + i, pos0, path) - r0) * kv_dim : 0;
            const __m512i idx = _mm512_loadu_si512(off);
            const float *base = Kh + (size_t)r0 * kv_dim;
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < head_dim; d++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(q[d]),
                                      _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, base + d, 4), acc);
            _mm512_mask_storeu_ps(att + t0, m, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
        }
        sd_softmax(att, n_ctx);
        const __mmask16 m = tail_mask(head_dim);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int t = 0;
        for (; t + 2 <= n_ctx; t += 2) {
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(att[t]),
                                 _mm512_maskz_loadu_ps(m, Vh + (size_t)path_row(t, pos0, path) * kv_dim), a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(att[t + 1]),
                                 _mm512_maskz_loadu_ps(m, Vh + (size_t)path_row(t + 1, pos0, path) * kv_dim), a1);
        }
        if (t < n_ctx)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(att[t]),
                                 _mm512_maskz_loadu_ps(m, Vh + (size_t)path_row(t, pos0, path) * kv_dim), a0);
        _mm512_mask_storeu_ps(out, m, _mm512_add_ps(a0, a1));
        return;
    }
    /* score_block's arithmetic on 16 row pointers (its 64/128-wide forms are this with full masks) */
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
        const int cnt = n_ctx - t0 < 16 ? n_ctx - t0 : 16;
        const float *k[16];
        for (int i = 0; i < 16; i++) k[i] = Kh + (size_t)path_row(t0 + (i < cnt ? i : cnt - 1), pos0, path) * kv_dim;
        __m512 p[16];
        const __mmask16 m0 = tail_mask(head_dim);
        const __m512 q0 = _mm512_maskz_loadu_ps(m0, q);
        for (int i = 0; i < 16; i++) p[i] = _mm512_mul_ps(q0, _mm512_maskz_loadu_ps(m0, k[i]));
        for (int c = 16; c < head_dim; c += 16) {
            const __mmask16 m = tail_mask(head_dim - c);
            const __m512 qc = _mm512_maskz_loadu_ps(m, q + c);
            for (int i = 0; i < 16; i++) p[i] = _mm512_fmadd_ps(qc, _mm512_maskz_loadu_ps(m, k[i] + c), p[i]);
        }
        _mm512_mask_storeu_ps(att + t0, tail_mask(cnt), _mm512_mul_ps(transpose_sum16(p), _mm512_set1_ps(scale)));
    }
    sd_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int c = 0; c < head_dim; c += 64) {
        const int span = head_dim - c < 64 ? head_dim - c : 64;
        value_block(out + c, att, Vh + c, kv_dim, pos0, span, 0); /* the prefix in place */
        for (int t = pos0; t < n_ctx; t++)
            value_block(out + c, att + t, Vh + c + (size_t)path_row(t, pos0, path) * kv_dim, kv_dim, 1, span, 0);
    }
#else
    for (int t = 0; t < n_ctx; t++) att[t] = dot_f32(q, Kh + (size_t)path_row(t, pos0, path) * kv_dim, head_dim) * scale;
    sd_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int t = 0; t < n_ctx; t++) {
        const float *v = Vh + (size_t)path_row(t, pos0, path) * kv_dim;
        const float a = att[t];
        for (int i = 0; i < head_dim; i++) out[i] += a * v[i];
    }
#endif
}

void sd_attention_tree(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                       const int32_t *path, const int32_t *path_off, int n_heads, int n_kv_heads, int head_dim,
                       float *att_scratch, int att_slots) {
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const int items = n * n_heads, ctx_max = pos0 + n;
    const double work = (double)items * ctx_max * head_dim;
    int nt = sd_kernels_threads() < att_slots ? sd_kernels_threads() : att_slots;
    if (nt > items) nt = items;
#if SD_HAVE_AVX2
    sd_avx2_attention(q, K, V, 0, out, n, pos0, path, path_off, n_heads, n_kv_heads, head_dim, att_scratch, att_slots,
                      att_slots >= n_heads && nt > n_heads ? n_heads : nt, work >= SD_ATT_PAR_MIN_WORK && nt >= 2);
    return;
#endif
#pragma omp parallel num_threads(nt) if (work >= SD_ATT_PAR_MIN_WORK && nt >= 2)
    {
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        float *att = att_scratch + (size_t)id * ctx_max;
        for (int it = id; it < items; it += tn) {
            const int t = it / n_heads, h = it % n_heads;
            const int32_t *pt = path + path_off[t];
            attend_one_path(q + (size_t)t * q_dim + (size_t)h * head_dim, K, V, out + (size_t)t * q_dim + (size_t)h * head_dim,
                            pos0, pt, pos0 + (path_off[t + 1] - path_off[t]), kv_dim, head_dim, h / group, att);
        }
    }
}

#if SD_HAVE_AVX512
/* Query heads [h0, h1) of tokens j0..j1-1 (token j at position pos0 + j attends to positions
 * 0..pos0+j), in blocks of 16 positions: a block's key and value slices for these heads
 * (adjacent in each cache row) are read once for all the tokens and stay in L1 while every
 * (token, head) uses them; a verify pass no longer reads the cache once per token.
 * att: row (j - j0) * n_heads + h of att_stride floats for each (token, head). Per (token,
 * head) the operations and their order are those of attend_one (head_dim >= 16). */
static void attend_heads(const float *q, const void *K, const void *V, int f16, float *conv, float *out, int pos0,
                         int j0, int j1, int n_heads, int kv_dim, int head_dim, int h0, int h1, int group,
                         float *att, size_t att_stride) {
    const int q_dim = n_heads * head_dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int n_ctx = pos0 + j1; /* positions the last token attends to */
    /* An F16 cache: each block's rows of this thread's columns [c0, c1) are converted into
     * conv (16 x span floats) first, and read from there. */
    const int c0 = h0 / group * head_dim, c1 = ((h1 - 1) / group + 1) * head_dim;
    const int stride = f16 ? c1 - c0 : kv_dim, coff = f16 ? c0 : 0;
#define ATT_ROW(j, h) (att + ((size_t)((j) - j0) * n_heads + (h)) * att_stride)
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
        const float *kb = att_block(K, f16, kv_dim, n_ctx, t0, c0, c1, conv);
        const int pf = att_prefetch_rows(n_ctx, t0);
        const int jb = t0 > pos0 + j0 ? t0 - pos0 : j0;
        for (int h = h0; h < h1; h++) /* a head's 16 keys stay in L1 for all the tokens that see them */
            for (int j = jb; j < j1; j++) { /* tokens that see position t0 */
                const int nj = pos0 + j + 1, cnt = nj - t0 < 16 ? nj - t0 : 16;
                score_block(q + (size_t)j * q_dim + (size_t)h * head_dim, kb + (size_t)(h / group) * head_dim - coff,
                            stride, head_dim, cnt, scale, ATT_ROW(j, h) + t0, j == jb && !f16 && h % group == 0 ? pf : 0);
            }
    }
    for (int j = j0; j < j1; j++) {
        for (int h = h0; h < h1; h++) sd_softmax(ATT_ROW(j, h), pos0 + j + 1);
        memset(out + (size_t)j * q_dim + (size_t)h0 * head_dim, 0, (size_t)(h1 - h0) * head_dim * sizeof(float));
    }
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
        const float *vb = att_block(V, f16, kv_dim, n_ctx, t0, c0, c1, conv);
        const int pfv = att_prefetch_rows(n_ctx, t0);
        const int jbv = t0 > pos0 + j0 ? t0 - pos0 : j0;
        for (int h = h0; h < h1; h++) {
            const float *vh = vb + (size_t)(h / group) * head_dim - coff;
            const int pfh = !f16 && h % group == 0 ? pfv : 0;
            int j = jbv;
            if (head_dim % 64 == 0) /* tokens in pairs, each value row loaded once for both */
                for (; j + 2 <= j1; j += 2) {
                    const int n0 = pos0 + j + 1 - t0 < 16 ? pos0 + j + 1 - t0 : 16;
                    const int n1 = pos0 + j + 2 - t0 < 16 ? pos0 + j + 2 - t0 : 16;
                    for (int c = 0; c < head_dim; c += 64)
                        value_pair64(out + (size_t)j * q_dim + (size_t)h * head_dim + c,
                                     out + (size_t)(j + 1) * q_dim + (size_t)h * head_dim + c, ATT_ROW(j, h) + t0,
                                     ATT_ROW(j + 1, h) + t0, n0, n1, vh + c, stride, j == jbv ? pfh : 0);
                }
            for (; j < j1; j++) {
                const int nj = pos0 + j + 1, t1 = nj < t0 + 16 ? nj : t0 + 16;
                for (int c = 0; c < head_dim; c += 64)
                    value_block(out + (size_t)j * q_dim + (size_t)h * head_dim + c, ATT_ROW(j, h) + t0, vh + c,
                                stride, t1 - t0, head_dim - c < 64 ? head_dim - c : 64, j == jbv ? pfh : 0);
            }
        }
    }
#undef ATT_ROW
}
#endif


#if SD_HAVE_AVX512
/* Short heads (head_dim < 16) of tokens j0..j1-1, every head: per KV head, each block of 16
 * positions is gathered once into head_dim registers (dimension d of the 16 keys) and serves
 * every (token, query head) of the group that sees it. attend_one gathered the block again for
 * each of them, so a verify pass of 5 tokens on stories260K (8 heads, 4 KV heads) gathered it
 * 10 times instead of once. Per (token, head) the scores, softmax and value sums are attend_one's
 * operations in its order: the stored lanes are the same bits. */
static void attend_short(const float *q, const float *K, const float *V, float *out, int pos0, int j0, int j1,
                         int n_heads, int kv_dim, int head_dim, int group, float *att, size_t att_stride) {
    const int q_dim = n_heads * head_dim, n_kv = n_heads / group;
    const float scale = 1.0f / sqrtf((float)head_dim);
    const int n_ctx = pos0 + j1;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(kv_dim));
#define ATT_ROW(j, h) (att + ((size_t)((j) - j0) * n_heads + (h)) * att_stride)
    for (int g = 0; g < n_kv; g++) {
        const float *Kh = K + (size_t)g * head_dim;
        for (int t0 = 0; t0 < n_ctx; t0 += 16) {
            const __mmask16 mb = tail_mask(n_ctx - t0);
            __m512 kt[15];
            for (int d = 0; d < head_dim; d++)
                kt[d] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mb, idx, Kh + (size_t)t0 * kv_dim + d, 4);
            const int jb = t0 > pos0 + j0 ? t0 - pos0 : j0;
            for (int j = jb; j < j1; j++) {
                const __mmask16 m = tail_mask(pos0 + j + 1 - t0);
                for (int h = g * group; h < (g + 1) * group; h++) {
                    const float *qh = q + (size_t)j * q_dim + (size_t)h * head_dim;
                    __m512 acc = _mm512_setzero_ps();
                    for (int d = 0; d < head_dim; d++) acc = _mm512_fmadd_ps(_mm512_set1_ps(qh[d]), kt[d], acc);
                    _mm512_mask_storeu_ps(ATT_ROW(j, h) + t0, m, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
                }
            }
        }
    }
    const __mmask16 m = tail_mask(head_dim);
    for (int j = j0; j < j1; j++) {
        const int nj = pos0 + j + 1;
        for (int h = 0; h < n_heads; h++) {
            float *a = ATT_ROW(j, h);
            sd_softmax(a, nj);
            short_head_values(a, V + (size_t)(h / group) * head_dim, kv_dim, nj, m,
                              out + (size_t)j * q_dim + (size_t)h * head_dim);
        }
    }
#undef ATT_ROW
}

/* attend_heads over all tokens in passes of up to SD_ATT_TOKENS, each of nt threads taking a
 * range of heads (one thread without OpenMP unless par); an F16 cache gives each thread its
 * own 16 x kv_dim conversion rows of conv. */
static void attend_by_heads(const float *q, const void *K, const void *V, int f16, float *conv, float *out, int n,
                            int pos0, int n_heads, int n_kv_heads, int head_dim, float *att_scratch, int att_slots,
                            int nt, int par) {
    const int kv_dim = n_kv_heads * head_dim, group = n_heads / n_kv_heads;
    const size_t ctx_max = (size_t)(pos0 + n);
    const int tg = att_slots / n_heads < SD_ATT_TOKENS ? att_slots / n_heads : SD_ATT_TOKENS;
    if (!par) { /* serial, no OpenMP (see sd_matmul) */
        for (int j0 = 0; j0 < n; j0 += tg)
            attend_heads(q, K, V, f16, conv, out, pos0, j0, j0 + tg < n ? j0 + tg : n, n_heads, kv_dim, head_dim, 0,
                         n_heads, group, att_scratch, ctx_max);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        const int h0 = n_heads * id / tn, h1 = n_heads * (id + 1) / tn;
        float *cv = f16 ? conv + (size_t)id * 16 * kv_dim : NULL;
        for (int j0 = 0; j0 < n && h0 < h1; j0 += tg)
            attend_heads(q, K, V, f16, cv, out, pos0, j0, j0 + tg < n ? j0 + tg : n, n_heads, kv_dim, head_dim, h0, h1,
                         group, att_scratch, ctx_max);
    }
}
#endif

void sd_attention(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                  int n_heads, int n_kv_heads, int head_dim, float *att_scratch, int att_slots) {
    const int q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim;
    const int group = n_heads / n_kv_heads;
    const int items = n * n_heads;
    const int ctx_max = pos0 + n;
    const double work = (double)items * ctx_max * head_dim;
    /* Attention is small next to the matrices, but run serially it left the other thread
     * idle for ~10% of a quantised 110M-shape decode. Split it when the model's own q_dim x
     * q_dim products already run parallel (the team is awake, forking costs ~1 us) and there
     * are at least ~5 us of work; tiny draft models stay serial. */
    const int warm = (double)q_dim * q_dim * n >= SD_PAR_MIN_WORK;
    int nt = sd_kernels_threads() < att_slots ? sd_kernels_threads() : att_slots;
    if (nt > items) nt = items;
    const int par = warm && work >= SD_ATT_PAR_MIN_WORK && nt >= 2;
#if SD_HAVE_AVX512
    if (head_dim < 16 && !par && att_slots >= n_heads) { /* tiny models: serial, a gather per block */
        const int tg = att_slots / n_heads < SD_ATT_TOKENS ? att_slots / n_heads : SD_ATT_TOKENS;
        for (int j0 = 0; j0 < n; j0 += tg)
            attend_short(q, K, V, out, pos0, j0, j0 + tg < n ? j0 + tg : n, n_heads, kv_dim, head_dim, group,
                         att_scratch, (size_t)ctx_max);
        return;
    }
    if (head_dim >= 16 && att_slots >= n_heads) { /* blocks of positions over each thread's heads */
        attend_by_heads(q, K, V, 0, NULL, out, n, pos0, n_heads, n_kv_heads, head_dim, att_scratch, att_slots,
                        nt < n_heads ? nt : n_heads, par);
        return;
    }
#elif SD_HAVE_AVX2
    sd_avx2_attention(q, K, V, 0, out, n, pos0, NULL, NULL, n_heads, n_kv_heads, head_dim, att_scratch, att_slots,
                      att_slots >= n_heads && nt > n_heads ? n_heads : nt, par);
    return;
#endif
    if (!par) { /* serial, no OpenMP (see sd_matmul) */
        for (int it = 0; it < items; it++) {
            int t = it / n_heads, h = it % n_heads;
            attend_one(q + (size_t)t * q_dim + (size_t)h * head_dim, K, V,
                       out + (size_t)t * q_dim + (size_t)h * head_dim, pos0 + t + 1, kv_dim, head_dim,
                       h / group, att_scratch);
        }
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        float *att = att_scratch + (size_t)id * ctx_max;
        /* later tokens attend to more positions: interleave items so each thread gets a mix */
        for (int it = id; it < items; it += tn) {
            int t = it / n_heads, h = it % n_heads;
            attend_one(q + (size_t)t * q_dim + (size_t)h * head_dim, K, V,
                       out + (size_t)t * q_dim + (size_t)h * head_dim, pos0 + t + 1, kv_dim, head_dim,
                       h / group, att);
        }
    }
}

int sd_attention_f16_ok(int head_dim) { return (SD_HAVE_AVX512 || SD_HAVE_AVX2) && head_dim >= 16; }

int sd_attention_f16(const float *q, const uint16_t *K, const uint16_t *V, float *out, int n, int pos0, int n_heads,
                     int n_kv_heads, int head_dim, float *att_scratch, int att_slots, float *conv_scratch,
                     int conv_slots) {
#if SD_HAVE_AVX512
    if (head_dim < 16 || att_slots < n_heads) return -1;
    const int q_dim = n_heads * head_dim;
    const double work = (double)n * n_heads * (pos0 + n) * head_dim;
    const int warm = (double)q_dim * q_dim * n >= SD_PAR_MIN_WORK; /* as sd_attention */
    int nt = sd_kernels_threads() < n_heads ? sd_kernels_threads() : n_heads;
    if (nt > conv_slots) nt = conv_slots;
    attend_by_heads(q, K, V, 1, conv_scratch, out, n, pos0, n_heads, n_kv_heads, head_dim, att_scratch, att_slots, nt,
                    warm && work >= SD_ATT_PAR_MIN_WORK && nt >= 2);
    return 0;
#elif SD_HAVE_AVX2 /* converts on load: no conversion rows */
    (void)conv_scratch; (void)conv_slots;
    if (head_dim < 16 || att_slots < n_heads) return -1;
    const int q_dim = n_heads * head_dim;
    const double work = (double)n * n_heads * (pos0 + n) * head_dim;
    const int warm = (double)q_dim * q_dim * n >= SD_PAR_MIN_WORK; /* as sd_attention */
    const int nt = sd_kernels_threads() < n_heads ? sd_kernels_threads() : n_heads;
    sd_avx2_attention(q, K, V, 1, out, n, pos0, NULL, NULL, n_heads, n_kv_heads, head_dim, att_scratch, att_slots, nt,
                      warm && work >= SD_ATT_PAR_MIN_WORK && nt >= 2);
    return 0;
#else
    (void)q; (void)K; (void)V; (void)out; (void)n; (void)pos0; (void)n_heads; (void)n_kv_heads; (void)head_dim;
    (void)att_scratch; (void)att_slots; (void)conv_scratch; (void)conv_slots;
    return -1;
#endif
}

void sd_f32_to_f16_row(const float *x, uint16_t *y, size_t n) {
    size_t i = 0;
#if SD_HAVE_AVX512
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif SD_HAVE_AVX2
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++) y[i] = sd_fp32_to_fp16(x[i]);
}

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

/* ---------------------------------------------------------------- bandwidth probe */

double sd_stream_read(const float *buf, size_t n) {
    double total = 0;
    /* Each thread reads its half as 8 interleaved streams: one sequential stream per core
     * leaves the prefetchers short of the bandwidth that decode (4 rows at a time per
     * thread) draws, so a single-stream probe reported less than decode achieved. For the
     * same reason it prefetches as the matrix kernels do: without it the F32 decode step read
     * 95-98% of the probe's rate, with it 91-95% (the probe 28.9-31.4 -> 32.4-33.1 GB/s,
     * three runs alternating). */
    enum { STREAMS = 8 };
#pragma omp parallel reduction(+ : total)
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        size_t chunk = (n / (size_t)nt) & ~(size_t)1023;
        size_t b = chunk * (size_t)id;
        size_t per = (chunk / STREAMS) & ~(size_t)63;
#if SD_HAVE_AVX512
        __m512 acc[STREAMS];
        for (int k = 0; k < STREAMS; k++) acc[k] = _mm512_setzero_ps();
        for (size_t i = 0; i < per; i += 16)
            for (int k = 0; k < STREAMS; k++) {
                weight_prefetch((const uint8_t *)(buf + b + (size_t)k * per + i));
                acc[k] = _mm512_add_ps(acc[k], _mm512_loadu_ps(buf + b + (size_t)k * per + i));
            }
        __m512 a = acc[0];
        for (int k = 1; k < STREAMS; k++) a = _mm512_add_ps(a, acc[k]);
        float s = _mm512_reduce_add_ps(a);
#elif SD_HAVE_AVX2
        __m256 acc[STREAMS];
        for (int k = 0; k < STREAMS; k++) acc[k] = _mm256_setzero_ps();
        for (size_t i = 0; i < per; i += 8)
            for (int k = 0; k < STREAMS; k++) {
                const float *p = buf + b + (size_t)k * per + i;
                if (!(i & 15)) _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES, SD_WEIGHT_PREFETCH_HINT);
                acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p));
            }
        __m256 a = acc[0];
        for (int k = 1; k < STREAMS; k++) a = _mm256_add_ps(a, acc[k]);
        float s = hsum8(a);
#else
        float s = 0;
        for (size_t i = 0; i < per; i++)
            for (int k = 0; k < STREAMS; k++) s += buf[b + (size_t)k * per + i];
#endif
        total += s;
    }
    return total;
}

int sd_cpu_check(char *why, size_t cap) {
    size_t o = 0;
    int missing = 0;
    if (cap) why[0] = 0;
    __builtin_cpu_init();
    /* __builtin_cpu_supports takes a string literal, hence one line per feature */
#define NEED(name)                                                                                        \
    if (!__builtin_cpu_supports(name)) {                                                                  \
        missing++;                                                                                        \
        if (o < cap) o += (size_t)snprintf(why + o, cap - o, "%s%s", missing > 1 ? ", " : "", name);      \
    }
#if defined(__AVX512F__)
    NEED("avx512f")
#endif
#if defined(__AVX512BW__)
    NEED("avx512bw")
#endif
#if defined(__AVX512VL__)
    NEED("avx512vl")
#endif
#if defined(__AVX512DQ__)
    NEED("avx512dq")
#endif
#if defined(__AVX512VNNI__)
    NEED("avx512vnni")
#endif
#if defined(__AVX512VBMI__)
    NEED("avx512vbmi")
#endif
#if defined(__GFNI__)
    NEED("gfni")
#endif
#if defined(__F16C__)
    NEED("f16c")
#endif
#if defined(__FMA__)
    NEED("fma")
#endif
#if defined(__AVX2__)
    NEED("avx2")
#endif
#undef NEED
    (void)o; /* a portable build checks no feature */
    return missing ? -1 : 0;
}
