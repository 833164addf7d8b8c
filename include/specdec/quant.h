/* Quantisation as the engine uses it: ggml's reference quantisers for single rows, the types'
 * names and fallbacks, and in-memory quantised copies of a model (self-speculation). */
#ifndef SPECDEC_QUANT_H
#define SPECDEC_QUANT_H

#include <stdint.h>

#include "specdec/model.h"
#include "specdec/status.h"
#include "specdec/types.h"

/* 1 when sd_quantize_row writes the type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q6_K. */
int sd_quant_can_write(sd_type t);

/* Quantises n floats (a multiple of the block size) into dst, sd_type_row_bytes(t, n) bytes,
 * exactly as ggml's reference quantisers do (quantize_row_{q8_0,q4_0,q5_0,q4_K,q6_K}_ref,
 * which llama.cpp's quantizer uses without an importance matrix), so the blocks agree byte
 * for byte with llama.cpp's. F16 and BF16 round to nearest, ties to even (NaN stays NaN). */
sd_status sd_quantize_row(sd_type t, const float *x, void *dst, int64_t n);

/* The type a matrix with rows of `cols` is stored as when `want` is asked for: want when
 * cols divides into its blocks; else llama.cpp's fallback for k-quants (q4_K -> q5_0,
 * q6_K -> q8_0) when that divides; else F16. */
sd_type sd_quant_fallback(sd_type want, int64_t cols);

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_k", "q6_k" (either case) -> the type;
 * -1 when unknown. */
int sd_type_from_name(const char *s);

/* llama.cpp's general.file_type (llama_ftype) for a model whose matrices are mostly t. */
uint32_t sd_quant_file_type(sd_type t);

/* An in-memory copy of src whose matrices are quantised to t (with sd_quant_fallback per
 * matrix; vectors (norms, biases) F32; architecture, hyperparameters and RoPE order unchanged).
 * It owns its weights but borrows src's tokenizer: free it before src. This is the draft of
 * self-speculation (`specdec generate --draft-type`). */
sd_status sd_model_quantize(const sd_model *src, sd_type t, sd_model **out);

#endif
