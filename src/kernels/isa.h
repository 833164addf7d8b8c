/* The kernels of one instruction-set path as a table of function pointers (kernels_avx512.c,
 * kernels_avx2.c, and the portable one of cpu.c), and the active table. Generic code (matmul.c, attention.c,
 * elementwise.c, quant.c) decides sizes, threads and fallbacks, then calls through the table
 * once per kernel call (a matmul: once per thread's range), never per row or block. */
#ifndef SD_KERNELS_ISA_H
#define SD_KERNELS_ISA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/quant_internal.h"
#include "specdec/cpu.h"

/* The vector paths exist on x86-64 only; elsewhere the portable one is the build's only path. */
#if defined(__x86_64__)
#define SD_KERNELS_X86 1
#else
#define SD_KERNELS_X86 0
#endif

/* Below this many multiply-adds a parallel region's fork/join, and on a busy machine the wait
 * for a descheduled thread, cost more than a second core saves (measured: commit e6c0a1a).
 * Draft models and stories260K stay single-threaded; every 110M-shape matrix goes parallel. */
#define SD_PAR_MIN_WORK (1 << 19)
#define SD_ATT_PAR_MIN_WORK (1 << 14)

/* Software prefetch of streamed weights (the vector paths' F32/F16/BF16 and integer matrix
 * kernels and their probe loads): this many bytes ahead of the row being read, into L2 (T1). On
 * the AMD EPYC (Zen 4) guest it beat both the hardware prefetchers alone and 4 KiB ahead into L1;
 * the commits with the measurements are cited beside the kernels (kernels_avx512.c matvec and
 * multi, quant_avx512.c). Used with <immintrin.h>. */
#define SD_WEIGHT_PREFETCH_BYTES 8192
#define SD_WEIGHT_PREFETCH_HINT _MM_HINT_T1
/* The F32 panel kernels' prefetch: one sequential stream per thread, each line this many bytes
 * ahead of the column being read (kernels_avx512.c, kernels_avx2.c: panel_block). */
#define SD_PANEL_PREFETCH_BYTES 4096
#define SD_PANEL_PREFETCH_HINT _MM_HINT_T0

/* One attention call: a chain (path NULL: token j at position pos0 + j attends to 0..pos0+j)
 * or a tree (sd_attention_tree's path/path_off), over an F32 or (f16) F16 cache. nt: the most
 * threads to use, par: whether to fork at all (attention.c decides both, as for every path). */
typedef struct {
    const float *q;
    const void *K, *V;
    int f16;
    float *out;
    int n, pos0;
    const int32_t *path, *path_off;
    int n_heads, n_kv_heads, head_dim;
    float *att;
    int att_slots;
    float *conv; /* conv_slots x 16 x kv_dim floats for an F16 cache (a path may use none) */
    int conv_slots;
    int nt, par;
} sd_att_call;

typedef struct {
    sd_isa isa;
    /* ---- float weights */
    unsigned float_types; /* bit t: rows takes weights of type t (others: dequantised rows) */
    int f32_packed;       /* rows reads an F32 matrix's sd_f32_pack copy when W->packed is set */
    /* Rows [r0, r1) of W for n <= SD_SMALL_BATCH tokens (any n with a packed copy): Y[t *
     * W->rows + r] = X[t] . row r, each (row, token) summed in one order whatever n and the
     * range are. xb: NULL, or X staged by broadcast_x. */
    void (*rows)(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb);
    /* NULL, or the staging of n >= 2 tokens' activations for the packed kernel (floats needed). */
    size_t (*xb_floats)(int64_t cols, int n);
    void (*broadcast_x)(const float *X, int n, int64_t cols, float *xb);
    /* ---- elementwise (attention.c and elementwise.c split the work) */
    float (*dot)(const float *a, const float *b, int n);
    void (*rope)(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style);
    void (*softmax)(float *x, int n);
    long (*first_nonfinite)(const float *x, size_t n);
    void (*swiglu)(float *a, const float *b, int64_t i0, int64_t i1);
    void (*f32_to_f16)(const float *x, uint16_t *y, size_t n);
    /* The sum of per (floats, a multiple of 64) floats from each of 8 streams starting at buf,
     * per apart: a thread's part of the bandwidth probe, loaded as the matrix kernels load. */
    float (*stream)(const float *buf, size_t per);
    /* ---- attention */
    void (*attention)(const sd_att_call *c);
    /* ---- the sampling pipeline's loops (sampling.h: the softmax, the race, argmax, the non-finite scan) */
    double (*softmax_numerators)(const float *x, int n, float mx, float t, float *out);
    void (*race_scores)(const float *probs, uint64_t key, int32_t x0, int n, float *sc);
    int (*race_cands)(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand);
    int32_t (*row_argmax)(const float *x, int n);
    int (*row_nonfinite)(const float *x, int n);
    /* ---- quantised weights (quant.c) */
    int quant_packed; /* r16 reads the 16-row layout (sd_quant_pack_rows) */
    int (*dequant)(sd_type t, const uint8_t *src, float *dst, int64_t nb); /* NULL: the reference */
    void (*quant_init)(void);                                              /* NULL: nothing to fill */
    void (*act_token)(sd_type t, const float *x, int64_t cols, void *out);
    /* rows of the file layout for 1..8 tokens: Q5_0 on the vector paths, every type on the
     * portable one (which has no r16) */
    void (*qrows)(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1);
    void (*r16)(sd_type t, int nb, const sd_r16_job *job); /* the types with a 16-row layout */
    /* NULL: quant_pack.c's scalar packing (every path's is the same layout, bit for bit) */
    void (*pack_group)(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst);
} sd_isa_kernels;

#define SD_TYPE_BIT(t) (1u << (unsigned)(t))

extern const sd_isa_kernels sd_kernels_portable;
#if SD_KERNELS_X86
extern const sd_isa_kernels sd_kernels_avx2;
extern const sd_isa_kernels sd_kernels_avx512;
#endif

/* sampling_avx512.c, sampling_avx2.c: the sampling loops of those paths. */
double sd_avx512_softmax_numerators(const float *x, int n, float mx, float t, float *out);
void sd_avx512_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc);
int sd_avx512_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand);
int32_t sd_avx512_row_argmax(const float *x, int n);
int sd_avx512_row_nonfinite(const float *x, int n);
double sd_avx2_softmax_numerators(const float *x, int n, float mx, float t, float *out);
void sd_avx2_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc);
int sd_avx2_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand);
int32_t sd_avx2_row_argmax(const float *x, int n);
int sd_avx2_row_nonfinite(const float *x, int n);

/* The active path's table (chosen once: cpu.c). */
const sd_isa_kernels *sd_kernels(void);

/* Switches every later kernel call to isa's table (tests run each path in one process; never
 * while kernels run). SD_ERR_UNSUPPORTED, the active path unchanged, when this CPU lacks it. */
sd_status sd_isa_select(sd_isa isa);

#endif
