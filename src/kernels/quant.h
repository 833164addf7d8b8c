/* Quantised weight types in ggml's block layouts (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K, BF16):
 * scalar reference dequantisation, fast dequantisation, and the integer dot kernels that
 * decode and verification run on the quantised blocks directly. Used by matmul.c. */
#ifndef SD_KERNELS_QUANT_H
#define SD_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/types.h"

/* Bytes per block of the types handled here (ggml's block_q*_* structs). */
#define SD_Q8_0_BYTES 34  /* fp16 d; int8 qs[32] */
#define SD_Q4_0_BYTES 18  /* fp16 d; uint8 qs[16]: element j in the low nibble of qs[j], j+16 high */
#define SD_Q5_0_BYTES 22  /* fp16 d; uint8 qh[4] (5th bits); uint8 qs[16] as in Q4_0 */
#define SD_Q4_K_BYTES 144 /* fp16 d, dmin; uint8 scales[12] (8 x 6-bit scale/min); uint8 qs[128] */
#define SD_Q6_K_BYTES 210 /* uint8 ql[128]; uint8 qh[64]; int8 scales[16]; fp16 d */

/* 1 when this file can dequantise the type (every type except F32/F16, which matmul.c owns). */
int sd_quant_has_dequant(sd_type t);

/* n elements (a multiple of the block size) from src. Return -1 for types without support.
 * The fast version equals the reference bit for bit (the same float operations per element). */
int sd_quant_dequant_row(sd_type t, const void *src, float *dst, int64_t n);
int sd_quant_dequant_row_ref(sd_type t, const void *src, float *dst, int64_t n);

/* 1 when sd_quant_matmul has an integer kernel for the type on this build and CPU. */
int sd_quant_has_dot(sd_type t);

/* Scratch bytes sd_quant_matmul needs for n tokens of `cols` columns. */
size_t sd_quant_scratch_bytes(sd_type t, int64_t cols, int n);

/* Y[n][rows] = X[n][cols] * W^T for any n >= 1 with integer dot products: each token's
 * activations are quantised to 8 bits (Q8_0-style blocks of 32 with an fp16 scale for
 * Q4_0/Q5_0/Q8_0 weights, one float scale per 256 for Q4_K/Q6_K, as llama.cpp does), then
 * every row is multiplied with VNNI, up to 8 tokens per pass over the weights (9 for
 * Q4_0/Q8_0/Q4_K/Q6_K: a k = 8 verify). Each (row, token) result is computed by the same
 * sequence of operations whatever n is, so a batch equals n single-token calls bit for bit
 * (prefill included). scratch (scratch_bytes) holds the quantised activations (~2 bytes per element
 * per token, well inside sd_matmul_scratch_floats for n <= 256); when NULL or too small a
 * temporary buffer is allocated. Returns 0, or -1 without a kernel / memory. */
int sd_quant_matmul(const sd_tensor *W, const float *X, int n, float *Y, void *scratch,
                    size_t scratch_bytes);

/* sd_quant_matmul for count <= 4 matrices of one type and width that read the same X
 * (Q/K/V, gate/up): X is quantised once and all rows share one parallel region. Results
 * equal one sd_quant_matmul per matrix bit for bit. -1 when the types or widths differ. */
int sd_quant_matmul_group(const sd_tensor *const *W, float *const *Y, int count, const float *X,
                          int n, void *scratch, size_t scratch_bytes);

/* 1 when sd_quant_pack_rows has a kernel layout for type t on this build (Q4_0, Q8_0, Q4_K, Q6_K). */
int sd_quant_can_pack(sd_type t);

/* Bytes of the kernels' layout of rows x row_bytes: groups of 16 rows (the last padded), each
 * rounded up to 64 bytes. */
size_t sd_quant_packed_bytes(sd_type t, int64_t rows, size_t row_bytes);

/* Writes t-typed rows from src into dst (sd_quant_packed_bytes) in the kernels' layout: groups
 * of 16 rows whose blocks are interleaved so that each int32 lane of a vector belongs to one
 * row (quant_internal.h describes it). Set sd_tensor.packed to dst; results are bit-identical
 * to the file layout's, which the kernels pack 16 rows at a time on the fly. */
void sd_quant_pack_rows(sd_type t, const void *src, void *dst, int64_t rows, size_t row_bytes, int64_t cols);

/* Naive reference of what sd_quant_matmul computes for row r and one token x: the same
 * activation quantisation in scalar code, exact integer block sums, combined in double. */
double sd_quant_dot_ref(const sd_tensor *W, int64_t r, const float *x);

#endif
