/* The math of the forward pass: matrix products per weight type, norms, RoPE, softmax,
 * attention. The only module with OpenMP pragmas and BLAS calls. Every call runs on the active
 * kernel path (specdec/cpu.h: AVX-512, AVX2 or portable, chosen once); each path keeps the
 * invariants stated here on its own, so results are the same bits within a path, not across
 * paths. Each fast path has a naive reference (suffix _ref, or the portable path's code) that
 * tests compare against. */
#ifndef SD_KERNELS_H
#define SD_KERNELS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "specdec/types.h"

/* Every kernel runs its parallel regions (and OpenBLAS) on the calling thread's OpenMP team
 * size; there is no process-wide setting. sd_kernels_team(n): the team size for n threads asked
 * (n < 1: the calling thread's current OpenMP setting, i.e. OMP_NUM_THREADS, else the CPUs),
 * at most OMP_THREAD_LIMIT. sd_kernels_enter(n): makes n the calling thread's team size (a
 * context does so before each pass). */
int sd_kernels_team(int n);
void sd_kernels_enter(int n);

/* Batches up to this many tokens use the streaming multi-vector kernel: each weight vector
 * is loaded once for up to 8 tokens, so verifying k+1 tokens costs about one decode step,
 * and every dot product is summed in exactly the order of the decode matvec, so a verify
 * pass reproduces decode logits bit for bit (greedy speculative == greedy plain, even at
 * near-ties). 33 covers k+1 for the largest draft length. Larger batches (prefill) go to
 * cblas_sgemm, which is compute-efficient but sums in its own order. */
#define SD_SMALL_BATCH 33

/* Rows of a non-F32 matrix dequantised per tile for the sgemm path. */
#define SD_DEQUANT_TILE_ROWS 256

/* Floats of scratch sd_matmul needs for a matrix with `cols` columns. */
size_t sd_matmul_scratch_floats(int64_t cols);

/* Inside a parallel region: the calling thread's share [b0, b1) of nblk 16-row blocks, one
 * contiguous range per thread (long ranges keep each weight stream sequential; 16-row blocks
 * keep the threads' output writes in separate cache lines). The float kernels split it this
 * way: they cut a thread's range into 2-8 far-apart streams, which the short chunks of work
 * stealing broke up, making F32 batches slower (measured: commit 9b4faa3;
 * docs/benchmarks/2026-11-26-zen4-kernels.md). */
void sd_thread_blocks(int64_t nblk, int64_t *b0, int64_t *b1);

/* The integer kernels share out their 16-row groups by work stealing. Each thread starts on its
 * contiguous 1/nt of the blocks and claims it from the front in shrinking chunks (a quarter of
 * what is left), so its weights stream sequentially; a thread whose range is empty takes the
 * back half of the fullest other range and carries on with it as its own. With a static split,
 * one thread on the shared 2-vCPU guests ran well past the other in a quantised matmul (a vCPU
 * slowed by its host, a late start; measured: commit 9b4faa3,
 * docs/benchmarks/2026-11-26-zen4-kernels.md). Every block is still computed whole by one
 * thread with the same code, so results do not depend on who took it. Slots sit in their own
 * cache lines; threads beyond SD_STEAL_MAX_THREADS only steal. */
#define SD_STEAL_MAX_THREADS 32
typedef struct {
    _Alignas(64) _Atomic uint64_t range; /* lo in the low 32 bits, hi in the high */
} sd_steal_slot;
typedef struct {
    sd_steal_slot slot[SD_STEAL_MAX_THREADS];
    int n; /* slots in use: the team size the ranges were cut for */
} sd_steal;

/* Before the region: nblk blocks (< 2^31) for a team of up to omp_get_max_threads(). A
 * smaller team still drains every slot (idle slots are stolen from). */
void sd_steal_init(sd_steal *w, int64_t nblk);
/* Inside the region: the calling thread's next blocks [*b0, *b1); 0 when no work is left. */
int sd_steal_next(sd_steal *w, int64_t *b0, int64_t *b1);

/* Rows [*r0, *r1) of matrix i (rows rows, blocks [first[i], first[i+1]) of a range spanning
 * several matrices) that fall in blocks [b0, b1); 0 when none. */
static inline int sd_block_rows(const int64_t *first, int i, int64_t b0, int64_t b1, int64_t rows, int64_t *r0,
                                int64_t *r1) {
    const int64_t lo = b0 > first[i] ? b0 : first[i], hi = b1 < first[i + 1] ? b1 : first[i + 1];
    if (lo >= hi) return 0;
    *r0 = (lo - first[i]) * 16;
    *r1 = (hi - first[i]) * 16 < rows ? (hi - first[i]) * 16 : rows;
    return 1;
}

/* F32 matrices get a copy in panels for the kernels (sd_tensor.packed): SD_F32_PANEL rows a
 * panel, column-major inside it, so that a vector holds one column of 16 rows, a product needs
 * no horizontal sum, and a thread's weights are one sequential stream. Panel p (rows [64p,
 * 64p + w), w = min(64, rows rounded up to 16 - 64p); rows past the matrix are zeros) starts at
 * float 64 * p * cols and holds element (64p + i, c) at c * w + i. sd_matmul uses the panels for
 * every n: each (row, token) is one sum over the columns in order (a single chain of FMAs on
 * the vector paths), whatever the batch, the register blocking or the thread, so batched ==
 * stepwise bit for bit at any batch size, prefill included. sd_f32_can_pack says whether the
 * active path has the kernel for W; sd_f32_pack writes sd_f32_packed_bytes(rows, cols) into dst
 * (64-byte aligned). The model loader packs the matrices (model.c, pack_weights). */
#define SD_F32_PANEL 64
int sd_f32_can_pack(const sd_tensor *W);
size_t sd_f32_packed_bytes(int64_t rows, int64_t cols);
void sd_f32_pack(const float *W, int64_t rows, int64_t cols, float *dst);
/* Rows of the panel that starts at row r (a multiple of SD_F32_PANEL): a multiple of 16. */
static inline int sd_f32_panel_rows(int64_t rows, int64_t r) {
    const int64_t left = ((rows + 15) & ~(int64_t)15) - r;
    return left < SD_F32_PANEL ? (int)left : SD_F32_PANEL;
}

/* Y[n][rows] = X[n][cols] * W^T. n == 1 is the decode matvec. scratch: see above (may be
 * NULL when W is F32). Returns 0, or -1 when W's type has no kernel. Q4_0/Q5_0/Q8_0/Q4_K/
 * Q6_K weights use the integer kernels of kernels/quant.c for every n (bit-identical rows
 * whatever the batch size); BF16 and other dequantisable types the paths above. */
int sd_matmul(const sd_tensor *W, const float *X, int n, float *Y, float *scratch);
/* Y[i] = X * W[i]^T for count matrices with the same columns (Q/K/V, gate/up): one
 * parallel region over all their rows instead of one each, so threads meet at one barrier
 * and keep streaming from one matrix into the next. Results equal separate sd_matmul calls
 * bit for bit. Returns 0 or -1 like sd_matmul. */
int sd_matmul_group(const sd_tensor *const *W, float *const *Y, int count, const float *X, int n,
                    float *scratch);
/* Naive reference: double accumulation, one row at a time. */
int sd_matmul_ref(const sd_tensor *W, const float *X, int n, float *Y);

/* Row r of W as floats (embedding lookup, dequantisation). Returns -1 for unknown types. */
int sd_dequant_row(const sd_tensor *W, int64_t r, float *out);

/* out[i] = x[i] / rms(x) * w[i] for each of n rows of length d. out may alias x. */
void sd_rmsnorm(float *out, const float *x, const float *w, int n, int d, float eps);

/* cs[0..rope_dim/2) = cos(pos * inv_freq[i]), cs[rope_dim/2..rope_dim) = the sines: a
 * position's angles, computed once per forward pass for all layers and both q and k. */
void sd_rope_angles(int pos, const float *inv_freq, int rope_dim, float *cs);

/* Rotates n_heads heads of length head_dim in x (one token) by the angles cs of
 * sd_rope_angles: the first rope_dim dims of each head, as pairs (2i, 2i+1), or (i, i +
 * rope_dim/2) with half_style (HF's rotate-half). */
void sd_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style);
/* sd_rope on n tokens' q rows (n_heads heads) and k rows (n_kv_heads), token t by the angles
 * cs + t * rope_dim; split across the threads for a prefill's rows. */
void sd_rope_tokens(float *q, float *k, int n, int n_heads, int n_kv_heads, int head_dim, int rope_dim,
                    const float *cs, int half_style);
/* The scalar loop sd_rope equals bit for bit. */
void sd_rope_ref(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style);

/* In-place numerically stable softmax. */
void sd_softmax(float *x, int n);

/* Index of the first NaN or infinity in x[0..n), or -1. */
long sd_first_nonfinite(const float *x, size_t n);

/* a[i] = silu(a[i]) * b[i] */
void sd_swiglu(float *a, const float *b, int n);

/* Causal grouped-query attention for n query tokens at positions pos0..pos0+n-1.
 * q: [n][n_heads*head_dim]; K, V caches: [>= pos0+n][n_kv_heads*head_dim] (already holding
 * the new tokens' keys and values); out: [n][n_heads*head_dim].
 * att_scratch: att_slots x (pos0+n) floats; at most att_slots threads run. On the vector paths,
 * with att_slots >= n_heads (and head_dim >= 16 on AVX-512) each thread takes a range of heads,
 * position-major, for up to min(att_slots / n_heads, SD_ATT_TOKENS) tokens per pass over the
 * cache; AVX-512's short heads (head_dim < 16) take the same passes serially, a KV head's block
 * of keys gathered once for all of them. Otherwise, and on the portable path, each (token, head)
 * runs on its own. */
#define SD_ATT_TOKENS 9
void sd_attention(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                  int n_heads, int n_kv_heads, int head_dim, float *att_scratch, int att_slots);
/* sd_attention over an F16 cache (K, V: [>= pos0+n][n_kv_heads*head_dim] halves): equal, bit
 * for bit, to sd_attention over an F32 cache holding the same values. conv_scratch: conv_slots x
 * 16 x n_kv_heads*head_dim floats (at most conv_slots threads run; only the AVX-512 kernels use
 * it, the others convert on load). Needs att_slots >= n_heads, conv_slots >= 1 and
 * sd_attention_f16_ok(head_dim) (head_dim >= 16, on every path); returns -1 otherwise, 0 on
 * success. */
int sd_attention_f16_ok(int head_dim);
int sd_attention_f16(const float *q, const uint16_t *K, const uint16_t *V, float *out, int n, int pos0, int n_heads,
                     int n_kv_heads, int head_dim, float *att_scratch, int att_slots, float *conv_scratch,
                     int conv_slots);

/* y[i] = x[i] rounded to fp16 (nearest even). */
void sd_f32_to_f16_row(const float *x, uint16_t *y, size_t n);

/* Attention of a tree batch: query token j (keys and values at rows pos0..pos0+n-1) attends to
 * positions [0, pos0) and to the rows pos0 + path[path_off[j] .. path_off[j+1]) (its ancestors and
 * itself, root first) as if they followed the prefix contiguously. Equal bit for bit to
 * sd_attention over a cache holding that path as a chain. att_scratch: att_slots x (pos0+n). */
void sd_attention_tree(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                       const int32_t *path, const int32_t *path_off, int n_heads, int n_kv_heads, int head_dim,
                       float *att_scratch, int att_slots);

void sd_attention_ref(const float *q, const float *K, const float *V, float *out, int n, int pos0,
                      int n_heads, int n_kv_heads, int head_dim);

/* The sampling pipeline's loops (sampling.h), the same bits on every path:
 * sd_softmax_numerators: out[i] = exp((x[i] - mx) / t) for n values <= mx (within 2 ulp of expf;
 * 0 below exp(-87.3)); returns their sum, accumulated in double (eight lanes, then the tail).
 * sd_race_scores: sc[i] = probs[x0 + i] / E(key, x0 + i) for i < n, the exponential race's
 * scores (src/sample/race.c: E is sd_coupled_noise; a token without mass scores 0).
 * sd_race_cands: cand[i] = 0 only for tokens whose score cannot exceed floor (by E >= V, the
 * uniform it comes from, bounded below from the hash's first rounds), without computing E: the
 * race's pruning; returns how many it kept.
 * sd_race_top: the race's best count (1..SD_RACE_MAX_TOP) tokens with mass over probs[0..n),
 * n >= 1, best first (ties to the lower id) into out; returns how many. It scores only the
 * tokens sd_race_cands keeps once its list is full, and splits a large row across the calling
 * thread's team: the same list whatever the split.
 * sd_row_argmax: the lowest index of the largest of x[0..n), n >= 1, exactly as a scan with a
 * strict '>' from x[0] (NaN never wins, except a NaN x[0], kept); src/sample's sd_argmax.
 * sd_row_nonfinite: 1 when x[0..n) holds an infinity or a NaN. */
double sd_softmax_numerators(const float *x, int n, float mx, float t, float *out);
void sd_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc);
int sd_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand);
#define SD_RACE_MAX_TOP 64
int sd_race_top(const float *probs, int n, uint64_t key, int count, int32_t *out);
int32_t sd_row_argmax(const float *x, int n);
int sd_row_nonfinite(const float *x, int n);

/* Sum of a large buffer read on `threads` threads (sd_kernels_team) with the active path's
 * streaming loads, as its matrix kernels read weights; the bandwidth probe. */
double sd_stream_read(const float *buf, size_t n, int threads);

#endif
