/* The AVX-512 path's float kernels (CPUs with AVX-512 F/BW/VL/DQ; compiled for them alone,
 * CMakeLists.txt): matrix rows of F32/F16/BF16 weights for decode and small batches, the 16-row
 * packed F32 kernel of small models, norms' dot products, RoPE, softmax, SwiGLU, conversions,
 * attention over F32 and F16 caches and trees, and the bandwidth probe's loads; its table joins
 * them to the integer kernels of quant_avx512.c. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/isa.h"
#include "kernels/portable.h"
#include "kernels/reduce.h"

static inline const uint8_t *row_ptr(const sd_tensor *W, int64_t r) {
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

/* ---------------------------------------------------------------- streaming kernels */

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

/* The line SD_WEIGHT_PREFETCH_BYTES past p, into L2: one per stream and 64-byte step. Against the
 * kernels without it, decode (matvec) and the verify passes of 5 and 9 tokens (multi) were
 * faster, verify(2) unchanged (measured: commit 9919e50;
 * docs/benchmarks/f32-prefetch-ab-2026-11-23.md). The hardware prefetchers alone fell behind once
 * the kernels did more than one FMA per weight vector. */
static inline void weight_prefetch(const uint8_t *p) {
    _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES, SD_WEIGHT_PREFETCH_HINT);
}

/* One decode step. The thread's rows [r0, r1) are cut into MV_STREAMS equal sub-ranges and row
 * j of every sub-range is computed together, so each of the 8 weight streams runs sequentially
 * through contiguous rows: the access pattern of the bandwidth probe, which the hardware
 * prefetchers keep far ahead. Four adjacent rows at a time (the previous kernel) restarted
 * every stream after one row and drew well short of the probe's bandwidth (measured: commit
 * caaa6ba). Each row keeps its own accumulator in column order, so results do not depend on how
 * the rows are grouped (batched == stepwise, bit for bit). */
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

/* ---- F32 panels (sd_f32_pack): a column of a panel is up to 4 vectors of 16 rows, and each
 * (row, token) is one chain of FMAs over the columns in order, started from zero, whatever the
 * batch: the same bits for decode, verify and prefill. A register block is V vectors (the
 * panel's rows) x NB <= 7 tokens (28 accumulators at most), each weight vector loaded once for
 * the NB tokens, each activation broadcast from memory into the FMAs. A batch of more than 7
 * tokens takes the panel in blocks of PANEL_CB columns, each block (32 KiB of weights) read from
 * memory once by a chunk of 7 tokens and then from L1 by the other chunks, the accumulators
 * carried in Y between blocks. Only the first chunk's FMAs overlap the memory stream, so it is
 * the largest: 8 tokens as 7 + 1 cost 1.10-1.12 decode steps where 4 + 4 cost 1.31-1.43, and 7
 * in one block 1.06 where 4 + 3 cost 1.25-1.32 (Zen 4, 36 GB/s). Prefetching the next block
 * during the later chunks (into L2 or L3) made 8 and 9 tokens slower. Against the row kernels
 * this replaced (110M-shape F32 rows, one thread, streaming): the weights of a 5-token pass are
 * one sequential stream where the 4 far-apart streams of multi_f32_5 drew about half the
 * bandwidth of decode, and no horizontal sums are left. */
#define PANEL_TB 7    /* tokens per register block */
#define PANEL_CB 128  /* columns per block of a batch that takes several token chunks */

/* Columns [c0, c1) of panel P (V vectors a column) for NB tokens of X into Y (the panel's first
 * row of token 0; tokens `rows` apart), from zero (first) or from what Y holds; the last
 * vector's stores masked to `last`. pf: prefetch the panel SD_PANEL_PREFETCH_BYTES ahead. */
static inline __attribute__((always_inline)) void panel_block(const float *P, const int V, int64_t c0, int64_t c1,
                                                              const float *X, int64_t cols, const int NB, float *Y,
                                                              int64_t rows, __mmask16 last, int first, int pf) {
    __m512 acc[4][PANEL_TB];
    for (int t = 0; t < NB; t++)
        for (int v = 0; v < V; v++)
            acc[v][t] = first ? _mm512_setzero_ps()
                              : _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xFFFF, Y + (size_t)t * rows + 16 * v);
    const float *w = P + (size_t)c0 * 16 * V;
    if (pf)
        for (int64_t c = c0; c < c1; c++, w += 16 * V) {
            for (int v = 0; v < V; v++) _mm_prefetch((const char *)(w + 16 * v) + SD_PANEL_PREFETCH_BYTES, SD_PANEL_PREFETCH_HINT);
            __m512 wv[4];
            for (int v = 0; v < V; v++) wv[v] = _mm512_load_ps(w + 16 * v);
            for (int t = 0; t < NB; t++) {
                const __m512 x = _mm512_set1_ps(X[(size_t)t * cols + c]);
                for (int v = 0; v < V; v++) acc[v][t] = _mm512_fmadd_ps(wv[v], x, acc[v][t]);
            }
        }
    else
        for (int64_t c = c0; c < c1; c++, w += 16 * V) {
            __m512 wv[4];
            for (int v = 0; v < V; v++) wv[v] = _mm512_load_ps(w + 16 * v);
            for (int t = 0; t < NB; t++) {
                const __m512 x = _mm512_set1_ps(X[(size_t)t * cols + c]);
                for (int v = 0; v < V; v++) acc[v][t] = _mm512_fmadd_ps(wv[v], x, acc[v][t]);
            }
        }
    for (int t = 0; t < NB; t++)
        for (int v = 0; v < V; v++) {
            float *y = Y + (size_t)t * rows + 16 * v;
            if (v == V - 1 && last != 0xFFFF) _mm512_mask_storeu_ps(y, last, acc[v][t]);
            else _mm512_storeu_ps(y, acc[v][t]);
        }
}

/* panel_block with V and NB as constants (each combination its own unrolled code). */
#define PANEL_NB(V, NB) panel_block(P, V, c0, c1, X, cols, NB, Y, rows, last, first, pf)
#define PANEL_V(V)                                                                                 \
    switch (nb) {                                                                                  \
    case 1: PANEL_NB(V, 1); break;                                                                 \
    case 2: PANEL_NB(V, 2); break;                                                                 \
    case 3: PANEL_NB(V, 3); break;                                                                 \
    case 4: PANEL_NB(V, 4); break;                                                                 \
    case 5: PANEL_NB(V, 5); break;                                                                 \
    case 6: PANEL_NB(V, 6); break;                                                                 \
    default: PANEL_NB(V, 7); break;                                                                \
    }
static void panel_call(const float *P, int v, int64_t c0, int64_t c1, const float *X, int64_t cols, int nb, float *Y,
                       int64_t rows, __mmask16 last, int first, int pf) {
    switch (v) {
    case 1: PANEL_V(1); break;
    case 2: PANEL_V(2); break;
    case 3: PANEL_V(3); break;
    default: PANEL_V(4); break;
    }
}
#undef PANEL_V
#undef PANEL_NB

/* Rows [r0, r1) (r0 a multiple of SD_F32_PANEL) of a packed F32 matrix for n tokens: up to 7 in
 * one pass over each panel; more as 7 and the rest in near-equal chunks (15: 7 + 4 + 4) over each
 * block of columns. */
static void panel_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1) {
    const int64_t cols = W->cols, rows = W->rows;
    const int rest = n - PANEL_TB, chunks = n <= PANEL_TB ? 1 : 1 + (rest + PANEL_TB - 1) / PANEL_TB,
              per = chunks > 1 ? (rest + chunks - 2) / (chunks - 1) : n;
    for (int64_t r = r0; r < r1; r += SD_F32_PANEL) {
        const float *P = (const float *)W->packed + (size_t)r * cols;
        const int v = sd_f32_panel_rows(rows, r) / 16;
        const int64_t tail = rows - (r + 16 * (v - 1)); /* rows of the last vector */
        const __mmask16 last = tail >= 16 ? 0xFFFF : (__mmask16)((1u << tail) - 1u);
        if (chunks == 1) {
            panel_call(P, v, 0, cols, X, cols, n, Y + r, rows, last, 1, 1);
            continue;
        }
        for (int64_t c0 = 0; c0 < cols; c0 += PANEL_CB) {
            const int64_t c1 = cols - c0 < PANEL_CB ? cols : c0 + PANEL_CB;
            for (int t0 = 0, nb = PANEL_TB; t0 < n; t0 += nb, nb = n - t0 < per ? n - t0 : per)
                panel_call(P, v, c0, c1, X + (size_t)t0 * cols, cols, nb, Y + (size_t)t0 * rows + r, rows, last,
                           c0 == 0, t0 == 0);
        }
    }
}

/* Rows [r0, r1) for n tokens, in groups of at most MULTI_MAX tokens (a packed F32 copy: its panels). */
static void avx512_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb) {
    (void)xb;
    if (W->packed && W->type == SD_TYPE_F32) {
        panel_rows(W, X, n, Y, r0, r1);
        return;
    }
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
}

/* ---------------------------------------------------------------- elementwise */

static float avx512_dot(const float *a, const float *b, int n) {
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

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

static void avx512_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
    /* The reference's multiplies and subtractions per element, 16 lanes at a time: the same
     * bits (x - y*s is computed as x + y*(-s), which IEEE makes equal). The scalar loop was
     * a cost per head set, q and k of every token of every layer, on one thread (measured:
     * commit c0c0e42). */
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
    sd_rope_ref(x, n_heads, head_dim, rope_dim, cs, half_style);
}

static void avx512_softmax(float *x, int n) {
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
}

static long avx512_first_nonfinite(const float *x, size_t n) {
    size_t i = 0;
    /* 16 at a time (the scalar loop was a cost per step over every entry of a logit row;
     * measured: commit 288b021) */
    for (; i + 16 <= n; i += 16) {
        const __mmask16 bad = _mm512_fpclass_ps_mask(_mm512_loadu_ps(x + i), 0x99); /* NaN, +-inf */
        if (bad) return (long)(i + (size_t)__builtin_ctz(bad));
    }
    const long rest = sd_portable_first_nonfinite(x + i, n - i);
    return rest < 0 ? -1 : (long)i + rest;
}

/* SwiGLU on [i0, i1): each element on its own, so any split gives the same bits. */
static void avx512_swiglu(float *a, const float *b, int64_t i0, int64_t i1) {
    /* The vectorised exp of softmax: scalar expf here was a measurable share of a quantised
     * decode step (measured: commit 99febcd). */
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = tail_mask((int)(i1 - i < 16 ? i1 - i : 16));
        const __m512 g = _mm512_maskz_loadu_ps(m, a + i);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_mask_storeu_ps(a + i, m,
                              _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

static void avx512_f32_to_f16(const float *x, uint16_t *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = sd_fp32_to_fp16(x[i]);
}

/* ---------------------------------------------------------------- attention */

/* Prefetch of the n floats at p: the same slice of the next block of 16 positions, one line at
 * a time as the current block is read (key and value slices of a head are kv_dim apart, a
 * stride the hardware prefetchers do not follow; a burst of a whole block at once stalled),
 * into L2 (T1): against T0, decode and verify(5) over long contexts were faster (measured:
 * commit 6e60049). */
#define ATT_PF_MIN_CTX 128

static inline void prefetch_next(const float *p, int n) {
    for (int i = 0; i < n; i += 16) _mm_prefetch((const char *)(p + i), _MM_HINT_T1);
}

/* Rows of the block after the one at t0 to prefetch (0..16): only for contexts of at least
 * ATT_PF_MIN_CTX positions. Prefetching at every length (T1, Q4_K decode) made short contexts
 * slower and gained from about this length up (measured: commit 6e60049). */
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
     * lacked): with it, decode and verify(5) over an F16 cache were faster at every context
     * length tried (measured: commit 0e3962d; docs/benchmarks/2026-11-26-zen4-kernels.md). */
    const int next = att_prefetch_rows(n_ctx, t0);
    const uint16_t *nb = (const uint16_t *)C + (size_t)(t0 + 16) * kv_dim + c0;
    for (int r = 0; r < next; r++)
        for (int c = 0; c < c1 - c0; c += 32) _mm_prefetch((const char *)(nb + (size_t)r * kv_dim + c), _MM_HINT_T1);
    rows_f16_to_f32((const uint16_t *)C + (size_t)t0 * kv_dim, kv_dim, n_ctx - t0 < 16 ? n_ctx - t0 : 16, c0, c1, conv);
    return conv;
}

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

/* One query head against positions 0..n_ctx-1 of its KV head. */
static void attend_one(const float *q, const float *K, const float *V, float *out, int n_ctx,
                       int kv_dim, int head_dim, int kvh, float *att) {
    const float scale = 1.0f / sqrtf((float)head_dim);
    const float *Kh = K + (size_t)kvh * head_dim;
    const float *Vh = V + (size_t)kvh * head_dim;
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
        avx512_softmax(att, n_ctx);
        short_head_values(att, Vh, kv_dim, n_ctx, tail_mask(head_dim), out);
        return;
    }
    /* The same blocks as attend_heads, so both give the same bits. */
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
        const int cnt = n_ctx - t0 < 16 ? n_ctx - t0 : 16;
        score_block(q, Kh + (size_t)t0 * kv_dim, kv_dim, head_dim, cnt, scale, att + t0, att_prefetch_rows(n_ctx, t0));
    }
    avx512_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int c = 0; c < head_dim; c += 64)
        value_block(out + c, att, Vh + c, kv_dim, n_ctx, head_dim - c < 64 ? head_dim - c : 64, 0);
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
        avx512_softmax(att, n_ctx);
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
    avx512_softmax(att, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int c = 0; c < head_dim; c += 64) {
        const int span = head_dim - c < 64 ? head_dim - c : 64;
        value_block(out + c, att, Vh + c, kv_dim, pos0, span, 0); /* the prefix in place */
        for (int t = pos0; t < n_ctx; t++)
            value_block(out + c, att + t, Vh + c + (size_t)path_row(t, pos0, path) * kv_dim, kv_dim, 1, span, 0);
    }
}

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
        for (int h = h0; h < h1; h++) avx512_softmax(ATT_ROW(j, h), pos0 + j + 1);
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
            avx512_softmax(a, nj);
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

/* ---------------------------------------------------------------- bandwidth probe */

static float avx512_stream(const float *buf, size_t per) {
    __m512 acc[8];
    for (int k = 0; k < 8; k++) acc[k] = _mm512_setzero_ps();
    for (size_t i = 0; i < per; i += 16)
        for (int k = 0; k < 8; k++) {
            weight_prefetch((const uint8_t *)(buf + (size_t)k * per + i));
            acc[k] = _mm512_add_ps(acc[k], _mm512_loadu_ps(buf + (size_t)k * per + i));
        }
    __m512 a = acc[0];
    for (int k = 1; k < 8; k++) a = _mm512_add_ps(a, acc[k]);
    return _mm512_reduce_add_ps(a);
}

/* ---------------------------------------------------------------- attention entry */

static void item_chain(const sd_att_call *c, int t, int h, float *att) {
    const int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    attend_one(c->q + (size_t)t * q_dim + (size_t)h * c->head_dim, c->K, c->V,
               c->out + (size_t)t * q_dim + (size_t)h * c->head_dim, c->pos0 + t + 1, kv_dim, c->head_dim,
               h / (c->n_heads / c->n_kv_heads), att);
}

static void item_tree(const sd_att_call *c, int t, int h, float *att) {
    const int q_dim = c->n_heads * c->head_dim, kv_dim = c->n_kv_heads * c->head_dim;
    attend_one_path(c->q + (size_t)t * q_dim + (size_t)h * c->head_dim, c->K, c->V,
                    c->out + (size_t)t * q_dim + (size_t)h * c->head_dim, c->pos0, c->path + c->path_off[t],
                    c->pos0 + (c->path_off[t + 1] - c->path_off[t]), kv_dim, c->head_dim,
                    h / (c->n_heads / c->n_kv_heads), att);
}

static void avx512_attention(const sd_att_call *c) {
    const int n = c->n, n_heads = c->n_heads, head_dim = c->head_dim;
    if (c->path) { /* trees: every (token, head) along its path */
        sd_att_items(c, item_tree);
        return;
    }
    if (c->f16) { /* attention.c checked head_dim >= 16 and att_slots >= n_heads */
        attend_by_heads(c->q, c->K, c->V, 1, c->conv, c->out, n, c->pos0, n_heads, c->n_kv_heads, head_dim, c->att,
                        c->att_slots, c->nt, c->par);
        return;
    }
    if (head_dim < 16 && !c->par && c->att_slots >= n_heads) { /* tiny models: serial, a gather per block */
        const int tg = c->att_slots / n_heads < SD_ATT_TOKENS ? c->att_slots / n_heads : SD_ATT_TOKENS;
        for (int j0 = 0; j0 < n; j0 += tg)
            attend_short(c->q, c->K, c->V, c->out, c->pos0, j0, j0 + tg < n ? j0 + tg : n, n_heads,
                         c->n_kv_heads * head_dim, head_dim, n_heads / c->n_kv_heads, c->att, (size_t)(c->pos0 + n));
        return;
    }
    if (head_dim >= 16 && c->att_slots >= n_heads) { /* blocks of positions over each thread's heads */
        attend_by_heads(c->q, c->K, c->V, 0, NULL, c->out, n, c->pos0, n_heads, c->n_kv_heads, head_dim, c->att,
                        c->att_slots, c->nt < n_heads ? c->nt : n_heads, c->par);
        return;
    }
    sd_att_items(c, item_chain);
}

/* ---------------------------------------------------------------- the table */

const sd_isa_kernels sd_kernels_avx512 = {
    .isa = SD_ISA_AVX512,
    .float_types = SD_TYPE_BIT(SD_TYPE_F32) | SD_TYPE_BIT(SD_TYPE_F16) | SD_TYPE_BIT(SD_TYPE_BF16),
    .f32_packed = 1,
    .rows = avx512_rows,
    .dot = avx512_dot,
    .rope = avx512_rope,
    .softmax = avx512_softmax,
    .first_nonfinite = avx512_first_nonfinite,
    .swiglu = avx512_swiglu,
    .f32_to_f16 = avx512_f32_to_f16,
    .stream = avx512_stream,
    .attention = avx512_attention,
    .softmax_numerators = sd_avx512_softmax_numerators,
    .race_scores = sd_avx512_race_scores,
    .race_cands = sd_avx512_race_cands,
    .row_argmax = sd_avx512_row_argmax,
    .row_nonfinite = sd_avx512_row_nonfinite,
    .quant_packed = 1,
    .dequant = sd_avx512_dequant,
    .quant_init = sd_avx512_quant_init,
    .act_token = sd_avx512_act_token,
    .qrows = sd_avx512_rows_q5_0,
    .r16 = sd_avx512_r16,
    .pack_group = sd_avx512_pack_group,
};
