/* The AVX2 path's float kernels (CPUs with AVX2, FMA and F16C; compiled for them alone,
 * CMakeLists.txt): matrix rows of F32/F16/BF16 weights for decode and small batches, the 16-row
 * packed F32 kernel of small models, norms' dot products, RoPE, softmax, SwiGLU, conversions,
 * attention over F32 and F16 caches and trees, and the bandwidth probe's loads; its table joins
 * them to the integer kernels of quant_avx2.c. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/avx2.h"
#include "kernels/isa.h"
#include "kernels/portable.h"

static inline const uint8_t *row_ptr(const sd_tensor *W, int64_t r) {
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

/* The line SD_WEIGHT_PREFETCH_BYTES past p, into L2, as the AVX-512 kernels do (isa.h). */
static inline void weight_prefetch(const uint8_t *p) {
    _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES, SD_WEIGHT_PREFETCH_HINT);
}

/* ---------------------------------------------------------------- weight loads: 8 elements as floats */

static inline __m256 load8_f32(const void *p) { return _mm256_loadu_ps(p); }
static inline __m256 load8_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* BF16 is the top half of an F32: widening is exact. */
static inline __m256 load8_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* The first n (1..7) elements, zeros after: a masked load for F32, a copy for the halves
 * (AVX2 has no 16-bit masked load; this is once per row). */
static inline __m256 tail8_f32(const void *p, int n) { return _mm256_maskload_ps(p, tail8(n)); }
static inline __m256 tail8_f16(const void *p, int n) {
    uint16_t h[8] = {0};
    memcpy(h, p, (size_t)n * 2);
    return load8_f16(h);
}
static inline __m256 tail8_bf16(const void *p, int n) {
    uint16_t h[8] = {0};
    memcpy(h, p, (size_t)n * 2);
    return load8_bf16(h);
}

/* ---------------------------------------------------------------- decode and small batches
 *
 * As the AVX-512 kernels: a thread's rows [r0, r1) are cut into S equal sub-ranges and row j of
 * each is computed together, so that S weight streams run sequentially through contiguous rows;
 * each weight vector is loaded once for all NB tokens of a small batch. Each (row, token) keeps
 * one 8-lane accumulator, columns in order (the tail lanes masked to zero), summed by hsum8: the
 * same operations whatever NB and S are, so a verify pass reproduces decode bit for bit. With 16
 * vector registers, S * NB accumulators + S weight vectors + 1 activation stay within them. */
#define DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, NB, S)                                                          \
    static void rows_##SUF##_##NB(const sd_tensor *W, const float *X, float *Y, int64_t r0, int64_t r1) { \
        const int64_t cols = W->cols, rows = W->rows;                                                      \
        const int64_t cv = cols & ~(int64_t)7;                                                             \
        const int tail = (int)(cols - cv);                                                                 \
        const __m256i xm = tail8(tail);                                                                    \
        const int64_t per = (r1 - r0) / S;                                                                 \
        for (int64_t j = 0; j < per; j++) {                                                                \
            const uint8_t *w[S];                                                                           \
            __m256 acc[S][NB];                                                                             \
            for (int s = 0; s < S; s++) {                                                                  \
                w[s] = row_ptr(W, r0 + s * per + j);                                                       \
                for (int t = 0; t < NB; t++) acc[s][t] = _mm256_setzero_ps();                              \
            }                                                                                              \
            for (int64_t c = 0; c < cv; c += 8) {                                                          \
                __m256 wv[S];                                                                              \
                for (int s = 0; s < S; s++) weight_prefetch(w[s] + c * ESZ);                               \
                for (int s = 0; s < S; s++) wv[s] = LOAD(w[s] + c * ESZ);                                  \
                for (int t = 0; t < NB; t++) {                                                             \
                    const __m256 xv = _mm256_loadu_ps(X + t * cols + c);                                   \
                    for (int s = 0; s < S; s++) acc[s][t] = _mm256_fmadd_ps(wv[s], xv, acc[s][t]);         \
                }                                                                                          \
            }                                                                                              \
            if (tail) {                                                                                    \
                __m256 wv[S];                                                                              \
                for (int s = 0; s < S; s++) wv[s] = TLOAD(w[s] + cv * ESZ, tail);                          \
                for (int t = 0; t < NB; t++) {                                                             \
                    const __m256 xv = _mm256_maskload_ps(X + t * cols + cv, xm);                           \
                    for (int s = 0; s < S; s++) acc[s][t] = _mm256_fmadd_ps(wv[s], xv, acc[s][t]);         \
                }                                                                                          \
            }                                                                                              \
            for (int s = 0; s < S; s++)                                                                    \
                for (int t = 0; t < NB; t++) Y[t * rows + r0 + s * per + j] = hsum8(acc[s][t]);            \
        }                                                                                                  \
        for (int64_t r = r0 + per * S; r < r1; r++) {                                                      \
            const uint8_t *w0 = row_ptr(W, r);                                                             \
            __m256 acc[NB];                                                                                \
            for (int t = 0; t < NB; t++) acc[t] = _mm256_setzero_ps();                                     \
            for (int64_t c = 0; c < cv; c += 8) {                                                          \
                const __m256 wv = LOAD(w0 + c * ESZ);                                                      \
                for (int t = 0; t < NB; t++)                                                               \
                    acc[t] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(X + t * cols + c), acc[t]);               \
            }                                                                                              \
            if (tail) {                                                                                    \
                const __m256 wv = TLOAD(w0 + cv * ESZ, tail);                                              \
                for (int t = 0; t < NB; t++)                                                               \
                    acc[t] = _mm256_fmadd_ps(wv, _mm256_maskload_ps(X + t * cols + cv, xm), acc[t]);       \
            }                                                                                              \
            for (int t = 0; t < NB; t++) Y[t * rows + r] = hsum8(acc[t]);                                  \
        }                                                                                                  \
    }

/* Streams per token count (S * NB + S + 1 <= 16 registers where the weights are converted:
 * F32 weight loads fold into the FMA and need none). Decode keeps 8 streams, as the AVX-512
 * matvec, for the prefetchers: F16/BF16 then hold 17 vectors and spill one per column step
 * (a store and a load to L1, beside 8 rows' 64 bytes each from memory). */
#define DEFINE_ROWS_ALL(SUF, ESZ, LOAD, TLOAD)    \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 1, 8)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 2, 4)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 3, 3)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 4, 2)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 5, 2)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 6, 2)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 7, 1)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 8, 1)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 9, 1)      \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 10, 1)     \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 11, 1)     \
    DEFINE_ROWS(SUF, ESZ, LOAD, TLOAD, 12, 1)

DEFINE_ROWS_ALL(f32, 4, load8_f32, tail8_f32)
DEFINE_ROWS_ALL(f16, 2, load8_f16, tail8_f16)
DEFINE_ROWS_ALL(bf16, 2, load8_bf16, tail8_bf16)

typedef void (*rows_fn)(const sd_tensor *, const float *, float *, int64_t, int64_t);
/* Tokens per pass over the weights: a verify pass of up to 12 tokens (k <= 11) reads them once. */
#define ROWS_MAX 12
#define ROWS_TABLE(SUF)                                                                                     \
    {NULL,         rows_##SUF##_1, rows_##SUF##_2, rows_##SUF##_3,  rows_##SUF##_4,  rows_##SUF##_5,        \
     rows_##SUF##_6, rows_##SUF##_7, rows_##SUF##_8, rows_##SUF##_9, rows_##SUF##_10, rows_##SUF##_11, \
     rows_##SUF##_12}
static const rows_fn k_rows[3][ROWS_MAX + 1] = {ROWS_TABLE(f32), ROWS_TABLE(f16), ROWS_TABLE(bf16)};

/* ---------------------------------------------------------------- F32 panels
 *
 * The layout of sd_f32_pack: panels of up to 64 rows, column-major, so a column of 8 rows is one
 * vector and a product needs no horizontal sum. Each (row, token) is one chain of FMAs over the
 * columns in order, started from zero, whatever the batch: the same bits for decode, verify and
 * prefill. A register block is VV vectors of 8 rows x NB tokens: decode takes the whole panel
 * (up to 8 chains), a batch half a panel (32 rows) and up to 3 tokens (12 chains), over blocks of
 * PANEL_CB columns (16 KiB of weights, read from memory once and then from L1 by the other
 * half and token chunks), the accumulators carried in Y between blocks. The calls after a
 * block's first prefetch shares of the next block, so that memory keeps streaming while they
 * compute from L1. */
#define PANEL_TB 3
#define PANEL_CB 64

/* Token t's element of column c: broadcast from X, or (XB, a constant once inlined) read from
 * avx2_broadcast_x's copies (xn tokens per column), which the FMA takes from memory. */
static inline __attribute__((always_inline)) __m256 panel_x(const float *X, int64_t cols, int64_t c, int t,
                                                            const int XB, int xn) {
    return XB ? _mm256_loadu_ps(X + ((size_t)c * xn + t) * 8) : _mm256_broadcast_ss(X + (size_t)t * cols + c);
}

/* Columns [c0, c1) of vectors [h0, h0 + VV) of panel P (w rows: a column is w floats) for NB
 * tokens into Y (the panel's first row of token 0), from zero (first) or from Y; `left` rows of
 * the matrix from the panel's first. pf: 1, prefetch the whole column SD_PANEL_PREFETCH_BYTES
 * ahead (the first pass that reads it); 2 + (lo << 3 | hi), its lines [lo, hi) in the next
 * block of PANEL_CB columns (panel_tokens' later calls); 0, none. */
static inline __attribute__((always_inline)) void panel_block(const float *P, int w, int h0, const int VV, int64_t c0,
                                                              int64_t c1, const float *X, int64_t cols, const int NB,
                                                              float *Y, int64_t rows, int64_t left, int first, int pf,
                                                              const int XB, int xn) {
    __m256 acc[8][PANEL_TB];
    for (int t = 0; t < NB; t++)
        for (int v = 0; v < VV; v++) {
            const int64_t l = left - 8 * (h0 + v);
            const float *y = Y + (size_t)t * rows + 8 * (h0 + v);
            acc[v][t] = first ? _mm256_setzero_ps() : l >= 8 ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, tail8((int)l));
        }
    for (int64_t c = c0; c < c1; c++) {
        const float *col = P + (size_t)c * w;
        if (pf == 1)
            for (int k = 0; k < w; k += 16) _mm_prefetch((const char *)(col + k) + SD_PANEL_PREFETCH_BYTES, SD_PANEL_PREFETCH_HINT);
        else if (pf > 1) /* lines [lo, hi) of this column in the next block: pf = 2 + (lo << 3 | hi) */
            for (int i = (pf - 2) >> 3; i < ((pf - 2) & 7); i++)
                _mm_prefetch((const char *)(col + (size_t)PANEL_CB * w + 16 * i), _MM_HINT_T1);
        for (int t = 0; t < NB; t++) {
            const __m256 x = panel_x(X, cols, c, t, XB, xn);
            for (int v = 0; v < VV; v++) acc[v][t] = _mm256_fmadd_ps(_mm256_load_ps(col + 8 * (h0 + v)), x, acc[v][t]);
        }
    }
    for (int t = 0; t < NB; t++)
        for (int v = 0; v < VV; v++) {
            const int64_t l = left - 8 * (h0 + v);
            float *y = Y + (size_t)t * rows + 8 * (h0 + v);
            if (l >= 8) _mm256_storeu_ps(y, acc[v][t]);
            else _mm256_maskstore_ps(y, tail8((int)l), acc[v][t]);
        }
}

#define PANEL_B(VV, NB) panel_block(P, w, h0, VV, c0, c1, X, cols, NB, Y, rows, left, first, pf, XB, xn)
/* A batch's block: VV (1..4) x nb (1..3) as constants. */
static inline __attribute__((always_inline)) void panel_batch(const float *P, int w, int h0, int vv, int64_t c0,
                                                              int64_t c1, const float *X, int64_t cols, int nb, float *Y,
                                                              int64_t rows, int64_t left, int first, int pf, const int XB,
                                                              int xn) {
#define PANEL_NBS(VV)                                                                                                 \
    switch (nb) {                                                                                                    \
    case 1: PANEL_B(VV, 1); break;                                                                                   \
    case 2: PANEL_B(VV, 2); break;                                                                                   \
    default: PANEL_B(VV, 3); break;                                                                                  \
    }
    switch (vv) {
    case 1: PANEL_NBS(1); break;
    case 2: PANEL_NBS(2); break;
    case 3: PANEL_NBS(3); break;
    default: PANEL_NBS(4); break;
    }
#undef PANEL_NBS
}

/* Decode: the whole panel (w / 8 vectors), one token. */
static void panel_decode(const float *P, int w, const float *X, int64_t cols, float *Y, int64_t rows, int64_t left) {
    const int h0 = 0, first = 1, pf = 1, XB = 0, xn = 1;
    const int64_t c0 = 0, c1 = cols;
    switch (w / 8) {
    case 2: PANEL_B(2, 1); break;
    case 4: PANEL_B(4, 1); break;
    case 6: PANEL_B(6, 1); break;
    default: PANEL_B(8, 1); break;
    }
}
#undef PANEL_B

/* A batch of n tokens over one panel, from X or (XB) from xb (n tokens per column). */
static inline __attribute__((always_inline)) void panel_tokens(const float *P, int w, const float *X, int64_t cols,
                                                               int n, float *Y, int64_t rows, int64_t left, const int XB) {
    const int chunks = (n + PANEL_TB - 1) / PANEL_TB, per = (n + chunks - 1) / chunks;
    const int L = w / 16, K = (w / 8 + 3) / 4 * chunks; /* lines a column, calls a block */
    for (int64_t c0 = 0; c0 < cols; c0 += PANEL_CB) {
        const int64_t c1 = cols - c0 < PANEL_CB ? cols : c0 + PANEL_CB;
        const int more = c1 < cols && cols - c1 >= c1 - c0; /* a whole next block to prefetch */
        int k = 0;
        for (int h0 = 0; h0 < w / 8; h0 += 4)
            for (int t0 = 0; t0 < n; t0 += per, k++) {
                /* the first call streams the block; the others prefetch a share of the next */
                const int lo = k ? (k - 1) * L / (K - 1) : 0, hi = k ? k * L / (K - 1) : 0;
                const int pf = k == 0 ? 1 : more && hi > lo ? 2 + (lo << 3 | hi) : 0;
                panel_batch(P, w, h0, w / 8 - h0 < 4 ? w / 8 - h0 : 4, c0, c1, XB ? X + (size_t)t0 * 8 : X + (size_t)t0 * cols,
                            cols, n - t0 < per ? n - t0 : per, Y + (size_t)t0 * rows, rows, left, c0 == 0, pf, XB, n);
            }
    }
}

/* Rows [r0, r1) (r0 a multiple of SD_F32_PANEL) of a packed F32 matrix for n tokens. A batch
 * reads its activations from xb when given: a broadcast per column, token and 8 rows (the FMA
 * cannot take one from memory on AVX2) was a large share of the kernel's instructions
 * (stories260K, callgrind; measured: commit 55dd82e). */
static void panel_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb) {
    const int64_t cols = W->cols, rows = W->rows;
    for (int64_t r = r0; r < r1; r += SD_F32_PANEL) {
        const float *P = (const float *)W->packed + (size_t)r * cols;
        const int w = sd_f32_panel_rows(rows, r);
        if (n == 1) panel_decode(P, w, X, cols, Y + r, rows, rows - r);
        else if (xb) panel_tokens(P, w, xb, cols, n, Y + r, rows, rows - r, 1);
        else panel_tokens(P, w, X, cols, n, Y + r, rows, rows - r, 0);
    }
}

static size_t avx2_xb_floats(int64_t cols, int n) { return (size_t)cols * (size_t)n * 8; }

static void avx2_broadcast_x(const float *X, int n, int64_t cols, float *xb) {
    for (int t = 0; t < n; t++) {
        const float *x = X + (size_t)t * cols;
        int64_t c = 0;
        for (; c + 8 <= cols; c += 8) { /* 8 elements per load, each lane spread by a permute */
            const __m256 v = _mm256_loadu_ps(x + c);
            for (int i = 0; i < 8; i++)
                _mm256_storeu_ps(xb + ((size_t)(c + i) * n + t) * 8, _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i)));
        }
        for (; c < cols; c++) _mm256_storeu_ps(xb + ((size_t)c * n + t) * 8, _mm256_broadcast_ss(x + c));
    }
}

static void avx2_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb) {
    if (W->packed && W->type == SD_TYPE_F32) {
        panel_rows(W, X, n, Y, r0, r1, xb);
        return;
    }
    const rows_fn *tab = k_rows[W->type == SD_TYPE_F16 ? 1 : W->type == SD_TYPE_BF16 ? 2 : 0];
    for (int j0 = 0; j0 < n; j0 += ROWS_MAX) {
        const int nb = n - j0 < ROWS_MAX ? n - j0 : ROWS_MAX;
        tab[nb](W, X + (size_t)j0 * W->cols, Y + (size_t)j0 * W->rows, r0, r1);
    }
}

/* ---------------------------------------------------------------- elementwise */

static float avx2_dot(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    if (i < n) {
        const __m256i m = tail8(n - i);
        acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc);
    }
    return hsum8(acc);
}

static void avx2_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
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
    sd_rope_ref(x, n_heads, head_dim, rope_dim, cs, half_style);
}

static void avx2_softmax(float *x, int n) {
    int i = 0;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mxs = -INFINITY;
    for (int j = i; j < n; j++) mxs = x[j] > mxs ? x[j] : mxs;
    const float vm = hmax8(vmax);
    mxs = vm > mxs ? vm : mxs;
    const __m256 mx = _mm256_set1_ps(mxs);
    __m256 vsum = _mm256_setzero_ps();
    /* full vectors unmasked, the tail masked (the same values: masking every vector added many
     * instructions to a short attention row; measured: commit f16ded9) */
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
}

static long avx2_first_nonfinite(const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const int bad = nonfinite8(_mm256_loadu_ps(x + i));
        if (bad) return (long)(i + (size_t)__builtin_ctz((unsigned)bad));
    }
    const long rest = sd_portable_first_nonfinite(x + i, n - i);
    return rest < 0 ? -1 : (long)i + rest;
}

/* SwiGLU on [i0, i1): each element on its own, so any split gives the same bits. */
static void avx2_swiglu(float *a, const float *b, int64_t i0, int64_t i1) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t i = i0; i < i1; i += 8) {
        const __m256i m = tail8((int)(i1 - i < 8 ? i1 - i : 8));
        const __m256 g = _mm256_maskload_ps(a + i, m);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_maskstore_ps(a + i, m, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_maskload_ps(b + i, m)));
    }
}

static void avx2_f32_to_f16(const float *x, uint16_t *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) y[i] = sd_fp32_to_fp16(x[i]);
}

/* A thread's part of the bandwidth probe, prefetching as the matrix kernels do (isa.h). */
static float avx2_stream(const float *buf, size_t per) {
    __m256 acc[8];
    for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_ps();
    for (size_t i = 0; i < per; i += 8)
        for (int k = 0; k < 8; k++) {
            const float *p = buf + (size_t)k * per + i;
            if (!(i & 15)) _mm_prefetch((const char *)p + SD_WEIGHT_PREFETCH_BYTES, SD_WEIGHT_PREFETCH_HINT);
            acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p));
        }
    __m256 a = acc[0];
    for (int k = 1; k < 8; k++) a = _mm256_add_ps(a, acc[k]);
    return hsum8(a);
}

/* ---------------------------------------------------------------- attention
 *
 * Per (token, query head): scores of 8 positions at a time (heads over 16 dimensions: 8
 * accumulators over the head's dimensions, summed by transpose_sum8; shorter heads: a chain of
 * FMAs over the dimensions from the block's keys transposed, keys_t, once for every query that
 * sees them; then times the scale), softmax, then the value rows summed
 * in position order: with nacc(head_dim) accumulators taking positions in turn (4 for heads of
 * at most 8 dimensions, 2 up to 16, else 1; a single FMA chain per vector left short heads
 * latency-bound), added as (a0 + a1) + (a2 + a3), 64 dimensions at a time. These operations
 * depend only on the (token, head) and its positions, so the batch, the threads and the loop
 * order around them never change the result; an F16 cache's elements are converted exactly on
 * load, so it gives the bits of an F32 cache holding the same values.
 *
 * Heads over 16 dimensions sum their values block by block of 16 positions, every (token, head)
 * of a block in turn with its accumulators kept in out (the same operations in the same order):
 * a block's rows are read for all of them, where a pass over all positions per (token, head)
 * walked rows kv_dim apart once per head and token. At long contexts, decode and verify(5) were
 * faster this way with an F32 and with an F16 cache. Prefetching the next block's rows into L2
 * as well (the AVX-512 kernels do) changed neither and was not kept (measured: commit 02aeaa9). */

typedef struct {
    const float *q;
    const char *K, *V; /* element 0 of the cache */
    int esz;           /* bytes per element: 4, or 2 for an F16 cache */
    float *out;
    int pos0;
    const int32_t *path, *path_off; /* a tree batch, or NULL */
    int n_heads, kv_dim, head_dim, group;
    float scale;
} att_job;

/* Positions token j attends to. */
static inline int tok_ctx(const att_job *J, int j) {
    return J->path ? J->pos0 + (J->path_off[j + 1] - J->path_off[j]) : J->pos0 + j + 1;
}

/* Cache row of token j's position t: the prefix in place, then its path's rows. */
static inline int64_t row_of(const att_job *J, int j, int t) {
    return !J->path || t < J->pos0 ? t : J->pos0 + J->path[J->path_off[j] + (t - J->pos0)];
}

static inline __m256 att_load(const char *p, int f16) { return f16 ? load8_f16(p) : load8_f32(p); }
static inline __m256 att_tail(const char *p, int n, int f16) { return f16 ? tail8_f16(p, n) : tail8_f32(p, n); }

/* att[t0 .. t0 + cnt) for query q (HD > 16 dims, a constant once inlined) of token j against
 * KV head kvh; positions past cnt re-read the last row (their lanes are not stored). */
static inline __attribute__((always_inline)) void score8(const att_job *J, const float *q, int j, int kvh, int t0,
                                                         int cnt, float *att, const int HD, const int f16) {
    const char *kp[8], *k0 = J->K + (size_t)kvh * HD * J->esz;
    const size_t rb = (size_t)J->kv_dim * J->esz;
    if (!J->path || t0 + 8 <= J->pos0) /* rows t0.. in order: no path lookups */
        for (int i = 0; i < 8; i++) kp[i] = k0 + (size_t)(t0 + (i < cnt ? i : cnt - 1)) * rb;
    else
        for (int i = 0; i < 8; i++) kp[i] = k0 + (size_t)row_of(J, j, t0 + (i < cnt ? i : cnt - 1)) * rb;
    __m256 p[8]; /* HD > 16: the first 8 dimensions are whole */
    const __m256 q0 = _mm256_loadu_ps(q);
    for (int i = 0; i < 8; i++) p[i] = _mm256_mul_ps(q0, att_load(kp[i], f16));
    for (int c = 8; c < HD; c += 8) {
        const int w = HD - c < 8 ? HD - c : 8;
        const __m256 qc = w == 8 ? _mm256_loadu_ps(q + c) : _mm256_maskload_ps(q + c, tail8(w));
        for (int i = 0; i < 8; i++) {
            const char *k = kp[i] + (size_t)c * J->esz;
            p[i] = _mm256_fmadd_ps(qc, w == 8 ? att_load(k, f16) : att_tail(k, w, f16), p[i]);
        }
    }
    const __m256 s = _mm256_mul_ps(transpose_sum8(p), _mm256_set1_ps(J->scale));
    if (cnt == 8) _mm256_storeu_ps(att, s);
    else _mm256_maskstore_ps(att, tail8(cnt), s);
}

/* Short heads (HD <= 16): the 8 key rows of positions t0.. (past cnt the last one again; with
 * use_path token j's rows) of KV head kvh, transposed so that kt[d] holds dimension d of the 8
 * positions: built once for every query that sees the block. */
static inline __attribute__((always_inline)) void keys_t(const att_job *J, int j, int kvh, int t0, int cnt, __m256 *kt,
                                                         const int HD, const int f16, const int use_path) {
    const char *k0 = J->K + (size_t)kvh * HD * J->esz;
    const size_t rb = (size_t)J->kv_dim * J->esz;
    for (int c = 0; c < HD; c += 8) {
        const int w = HD - c < 8 ? HD - c : 8;
        __m256 r[8];
        for (int i = 0; i < 8; i++) {
            const int t = t0 + (i < cnt ? i : cnt - 1);
            const char *k = k0 + ((size_t)(use_path ? row_of(J, j, t) : t) * rb + (size_t)c * J->esz);
            r[i] = w == 8 ? att_load(k, f16) : att_tail(k, w, f16);
        }
        transpose8(r);
        for (int d = 0; d < w; d++) kt[c + d] = r[d];
    }
}

/* att[t0 .. t0 + cnt) for query q from transposed keys: a chain of FMAs over the dimensions,
 * each lane one position, times the scale. */
static inline __attribute__((always_inline)) void score_t(const __m256 *kt, const float *q, float scale, int cnt,
                                                          float *att, const int HD) {
    __m256 s = _mm256_mul_ps(_mm256_broadcast_ss(q), kt[0]);
    for (int d = 1; d < HD; d++) s = _mm256_fmadd_ps(_mm256_broadcast_ss(q + d), kt[d], s);
    s = _mm256_mul_ps(s, _mm256_set1_ps(scale));
    if (cnt == 8) _mm256_storeu_ps(att, s);
    else _mm256_maskstore_ps(att, tail8(cnt), s);
}

/* out[0..HD) = sum over token j's positions of att[t] * value row, for heads of at most 16
 * dimensions (others: values_blk): NA accumulators take the positions in turn, added as (a0 +
 * a1) + (a2 + a3). NA and every loop bound are constants once inlined, so the accumulators stay
 * in registers (a remainder loop indexing them by a variable spilled them all to the stack). */
static inline __attribute__((always_inline)) void values(const att_job *J, int j, int kvh, const float *att, int n_ctx,
                                                         float *out, const int HD, const int f16, const int use_path) {
    const int NA = HD <= 8 ? 4 : 2, nv = (HD + 7) / 8, last = HD - 8 * (nv - 1);
    __m256 a[4][2];
    for (int u = 0; u < 4; u++) a[u][0] = a[u][1] = _mm256_setzero_ps();
    const char *vb = J->V + (size_t)kvh * HD * J->esz;
    const size_t rb = (size_t)J->kv_dim * J->esz;
#define VALUE_AT(u, t)                                                                                        \
    do {                                                                                                      \
        const __m256 w = _mm256_broadcast_ss(att + (t));                                                     \
        const char *vr = vb + (size_t)(use_path ? row_of(J, j, (t)) : (t)) * rb;                              \
        for (int v = 0; v < nv; v++) {                                                                        \
            const char *p = vr + (size_t)(8 * v) * J->esz;                                                    \
            a[u][v] = _mm256_fmadd_ps(w, v < nv - 1 || last == 8 ? att_load(p, f16) : att_tail(p, last, f16), a[u][v]); \
        }                                                                                                     \
    } while (0)
    int t = 0;
    for (; t + NA <= n_ctx; t += NA)
        for (int u = 0; u < NA; u++) VALUE_AT(u, t + u);
    for (int u = 0; u < NA; u++) /* the last positions, each into its own accumulator */
        if (t + u < n_ctx) VALUE_AT(u, t + u);
#undef VALUE_AT
    for (int v = 0; v < nv; v++) {
        const __m256 s = NA == 2 ? _mm256_add_ps(a[0][v], a[1][v])
                                 : _mm256_add_ps(_mm256_add_ps(a[0][v], a[1][v]), _mm256_add_ps(a[2][v], a[3][v]));
        if (v < nv - 1 || last == 8) _mm256_storeu_ps(out + 8 * v, s);
        else _mm256_maskstore_ps(out + 8 * v, tail8(last), s);
    }
}

/* out[0..HD) += sum over positions [t0, t1) of token j of att[t] * value row: values() for a
 * head over 16 dimensions (one accumulator per vector), from and back to out. */
static inline __attribute__((always_inline)) void values_blk(const att_job *J, int j, int kvh, const float *att, int t0,
                                                             int t1, float *out, const int HD, const int f16) {
    for (int c0 = 0; c0 < HD; c0 += 64) {
        const int span = HD - c0 < 64 ? HD - c0 : 64, nv = (span + 7) / 8, last = span - 8 * (nv - 1);
        __m256 a[8];
        for (int v = 0; v < nv; v++)
            a[v] = v < nv - 1 || last == 8 ? _mm256_loadu_ps(out + c0 + 8 * v) : _mm256_maskload_ps(out + c0 + 8 * v, tail8(last));
        const char *vb = J->V + ((size_t)kvh * HD + c0) * J->esz;
        const size_t rb = (size_t)J->kv_dim * J->esz;
        for (int t = t0; t < t1; t++) {
            const __m256 w = _mm256_broadcast_ss(att + t);
            const char *vr = vb + (size_t)row_of(J, j, t) * rb;
            for (int v = 0; v < nv; v++) {
                const char *p = vr + (size_t)(8 * v) * J->esz;
                a[v] = _mm256_fmadd_ps(w, v < nv - 1 || last == 8 ? att_load(p, f16) : att_tail(p, last, f16), a[v]);
            }
        }
        for (int v = 0; v < nv; v++) {
            float *o = out + c0 + 8 * v;
            if (v < nv - 1 || last == 8) _mm256_storeu_ps(o, a[v]);
            else _mm256_maskstore_ps(o, tail8(last), a[v]);
        }
    }
}

/* Query heads [h0, h1) of tokens [j0, j1); att row ((j - j0) * (h1 - h0) + h - h0) of stride
 * floats for each. Scores go block by block of 8 positions, every head and token that sees a
 * block in turn, so a head's 8 key rows are read from memory once for all the tokens of a
 * verify pass. */
static inline __attribute__((always_inline)) void att_range(const att_job *J, int j0, int j1, int h0, int h1,
                                                            float *att, size_t stride, const int HD, const int f16) {
    const int nh = h1 - h0;
    int nmax = 0;
    for (int j = j0; j < j1; j++) nmax = tok_ctx(J, j) > nmax ? tok_ctx(J, j) : nmax;
#define ATT_ROW(j, h) (att + ((size_t)((j) - j0) * nh + ((h) - h0)) * stride)
    if (HD <= 16) /* transposed keys, shared by the block's queries where their rows are */
        for (int t0 = 0; t0 < nmax; t0 += 8) {
            const int shared = !J->path || t0 + 8 <= J->pos0, g = J->group;
            for (int kvh = h0 / g; kvh <= (h1 - 1) / g; kvh++) {
                const int ha = kvh * g > h0 ? kvh * g : h0, hb = (kvh + 1) * g < h1 ? (kvh + 1) * g : h1;
                __m256 kt[16];
                if (shared) keys_t(J, j0, kvh, t0, nmax - t0 < 8 ? nmax - t0 : 8, kt, HD, f16, 0);
                else
                    for (int d = 0; d < HD; d++) kt[d] = _mm256_setzero_ps(); /* each token's below */
                for (int j = j0; j < j1; j++) {
                    const int nj = tok_ctx(J, j), cnt = nj - t0 < 8 ? nj - t0 : 8;
                    if (cnt <= 0) continue;
                    if (!shared) keys_t(J, j, kvh, t0, cnt, kt, HD, f16, 1);
                    for (int h = ha; h < hb; h++)
                        score_t(kt, J->q + ((size_t)j * J->n_heads + h) * HD, J->scale, cnt, ATT_ROW(j, h) + t0, HD);
                }
            }
        }
    else
        for (int t0 = 0; t0 < nmax; t0 += 8)
            for (int h = h0; h < h1; h++)
                for (int j = j0; j < j1; j++) {
                    const int nj = tok_ctx(J, j);
                    if (t0 >= nj) continue;
                    score8(J, J->q + ((size_t)j * J->n_heads + h) * HD, j, h / J->group, t0, nj - t0 < 8 ? nj - t0 : 8,
                           ATT_ROW(j, h) + t0, HD, f16);
                }
    const int blocked = HD > 16; /* one accumulator per vector: values may go block by block */
    for (int j = j0; j < j1; j++)
        for (int h = h0; h < h1; h++) {
            float *a = ATT_ROW(j, h), *o = J->out + ((size_t)j * J->n_heads + h) * HD;
            const int nj = tok_ctx(J, j);
            avx2_softmax(a, nj);
            if (blocked) memset(o, 0, (size_t)HD * sizeof(float));
            else if (J->path) values(J, j, h / J->group, a, nj, o, HD, f16, 1);
            else values(J, j, h / J->group, a, nj, o, HD, f16, 0); /* no lookups in the loop */
        }
    if (!blocked) return;
    for (int t0 = 0; t0 < nmax; t0 += 16)
        for (int h = h0; h < h1; h++)
            for (int j = j0; j < j1; j++) {
                const int nj = tok_ctx(J, j);
                if (t0 >= nj) continue;
                values_blk(J, j, h / J->group, ATT_ROW(j, h), t0, nj < t0 + 16 ? nj : t0 + 16,
                           J->out + ((size_t)j * J->n_heads + h) * HD, HD, f16);
            }
#undef ATT_ROW
}

/* att_range with the head size a constant for the common sizes (loops unroll, p[] stays in
 * registers), else a runtime one. */
static void att_range_hd(const att_job *J, int j0, int j1, int h0, int h1, float *att, size_t stride) {
    const int f16 = J->esz == 2;
#define ATT_CASE(HD)                                                                       \
    case HD:                                                                               \
        if (f16) att_range(J, j0, j1, h0, h1, att, stride, HD, 1);                         \
        else att_range(J, j0, j1, h0, h1, att, stride, HD, 0);                             \
        return;
    switch (J->head_dim) {
        ATT_CASE(8)
        ATT_CASE(16)
        ATT_CASE(32)
        ATT_CASE(48)
        ATT_CASE(64)
        ATT_CASE(128)
    default:
        if (f16) att_range(J, j0, j1, h0, h1, att, stride, J->head_dim, 1);
        else att_range(J, j0, j1, h0, h1, att, stride, J->head_dim, 0);
    }
#undef ATT_CASE
}

static void avx2_attention_run(const float *q, const void *K, const void *V, int f16, float *out, int n, int pos0,
                       const int32_t *path, const int32_t *path_off, int n_heads, int n_kv_heads, int head_dim,
                       float *att_scratch, int att_slots, int nt, int par) {
    const att_job J = {q,        (const char *)K, (const char *)V,         f16 ? 2 : 4, out,
                       pos0,     path,            path_off,                n_heads,     n_kv_heads * head_dim,
                       head_dim, n_heads / n_kv_heads, 1.0f / sqrtf((float)head_dim)};
    const size_t stride = (size_t)(pos0 + n);
    if (att_slots >= n_heads) { /* passes of tg tokens, each thread a range of heads */
        const int tg = att_slots / n_heads < SD_ATT_TOKENS ? att_slots / n_heads : SD_ATT_TOKENS;
        if (!par) {
            for (int j0 = 0; j0 < n; j0 += tg) att_range_hd(&J, j0, j0 + tg < n ? j0 + tg : n, 0, n_heads, att_scratch, stride);
            return;
        }
#pragma omp parallel num_threads(nt)
        {
            const int id = omp_get_thread_num(), tn = omp_get_num_threads();
            const int h0 = n_heads * id / tn, h1 = n_heads * (id + 1) / tn;
            float *att = att_scratch + (size_t)h0 * tg * stride; /* rows of this thread's heads */
            for (int j0 = 0; j0 < n && h0 < h1; j0 += tg)
                att_range_hd(&J, j0, j0 + tg < n ? j0 + tg : n, h0, h1, att, stride);
        }
        return;
    }
    /* fewer scratch rows than heads: one (token, head) at a time, a row per thread */
    const int items = n * n_heads;
    if (!par) {
        for (int it = 0; it < items; it++)
            att_range_hd(&J, it / n_heads, it / n_heads + 1, it % n_heads, it % n_heads + 1, att_scratch, stride);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), tn = omp_get_num_threads();
        for (int it = id; it < items; it += tn)
            att_range_hd(&J, it / n_heads, it / n_heads + 1, it % n_heads, it % n_heads + 1,
                         att_scratch + (size_t)id * stride, stride);
    }
}

static void avx2_attention(const sd_att_call *c) {
    /* F16 caches convert on load: no conversion rows; c->nt <= n_heads there already */
    avx2_attention_run(c->q, c->K, c->V, c->f16, c->out, c->n, c->pos0, c->path, c->path_off, c->n_heads, c->n_kv_heads,
                       c->head_dim, c->att, c->att_slots, c->att_slots >= c->n_heads && c->nt > c->n_heads ? c->n_heads : c->nt,
                       c->par);
}

const sd_isa_kernels sd_kernels_avx2 = {
    .isa = SD_ISA_AVX2,
    .float_types = SD_TYPE_BIT(SD_TYPE_F32) | SD_TYPE_BIT(SD_TYPE_F16) | SD_TYPE_BIT(SD_TYPE_BF16),
    .f32_packed = 1,
    .rows = avx2_rows,
    .xb_floats = avx2_xb_floats,
    .broadcast_x = avx2_broadcast_x,
    .dot = avx2_dot,
    .rope = avx2_rope,
    .softmax = avx2_softmax,
    .first_nonfinite = avx2_first_nonfinite,
    .swiglu = avx2_swiglu,
    .f32_to_f16 = avx2_f32_to_f16,
    .stream = avx2_stream,
    .attention = avx2_attention,
    .softmax_numerators = sd_avx2_softmax_numerators,
    .race_scores = sd_avx2_race_scores,
    .race_cands = sd_avx2_race_cands,
    .row_argmax = sd_avx2_row_argmax,
    .row_nonfinite = sd_avx2_row_nonfinite,
    .quant_packed = 1,
    .quant_init = NULL,
    .act_token = sd_avx2_act_token,
    .qrows = sd_avx2_rows_q5_0,
    .r16 = sd_avx2_r16,
};
