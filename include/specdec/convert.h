/* Model conversion: ggml's reference quantisers for single rows, writing any loaded model as
 * a llama.cpp-readable GGUF, and in-memory quantised copies of a model (self-speculation). */
#ifndef SPECDEC_CONVERT_H
#define SPECDEC_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/model.h"
#include "specdec/status.h"
#include "specdec/tokenizer.h"
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

/* Writes a loaded tokenizer as GGUF metadata (tokenizer.ggml.model "llama", tokens, scores,
 * token_type, bos/eos/unknown/padding ids, add_bos_token, add_eos_token, add_space_prefix).
 * SentencePiece-style vocabularies only for now (SD_ERR_UNSUPPORTED for BPE). */
sd_status sd_tokenizer_write_gguf(const sd_tokenizer *t, sd_gguf_writer *w);

/* Called before each tensor is converted (i counts from 0 to n-1). */
typedef void (*sd_convert_progress)(int i, int n, const char *name, sd_type type, void *user);

typedef struct {
    sd_type type;                 /* matrices (embedding and classifier included); norms stay F32 */
    sd_convert_progress progress; /* may be NULL */
    void *progress_user;
} sd_convert_params;

/* Builds a writer holding m as a GGUF that llama.cpp reads: general.* and <arch>.* metadata,
 * the tokenizer (tokenizer.ggml.*), and every tensor under llama.cpp's name, matrices in
 * p->type (sd_quant_fallback per tensor; a tensor already stored in the requested type is
 * copied unchanged), norms in F32. Models with Hugging Face rotate-half RoPE get their Q/K
 * rows permuted into the interleaved order GGUF "llama" uses, as llama.cpp's converter does.
 * The caller frees the writer. */
sd_status sd_model_to_gguf(const sd_model *m, const sd_convert_params *p, sd_gguf_writer **out);

/* An in-memory copy of src whose matrices are quantised to t (with sd_quant_fallback per
 * matrix; vectors (norms, biases) F32; architecture, hyperparameters and RoPE order unchanged).
 * It owns its weights but borrows src's tokenizer: free it before src. This is the draft of
 * self-speculation (`specdec generate --draft-type`). */
sd_status sd_model_quantize(const sd_model *src, sd_type t, sd_model **out);

/* Hugging Face output (tests compare the HF loader with the GGUF one on the same weights). */
typedef struct {
    const char *tokenizer_json;     /* copied beside the weights (required) */
    double llama3_factor;           /* rope_scaling of a model with rope_freqs: the llama3 */
    double llama3_low_freq_factor;  /* parameters its factors came from (HF stores those, not */
    double llama3_high_freq_factor; /* the factors) */
    double llama3_original_ctx;
} sd_hf_write_params;

/* Writes dir/config.json (the family's class, hyperparameters, rope_scaling), dir/model.safetensors
 * (every weight as F32 under transformers' names, q/k rows in rotate-half order) and a copy of
 * p->tokenizer_json. */
sd_status sd_model_write_hf(const sd_model *m, const char *dir, const sd_hf_write_params *p);

#endif
