/* Model conversion (the tools library): writing any loaded model as a llama.cpp-readable GGUF or
 * as a Hugging Face checkpoint, and a tokenizer as GGUF metadata. The quantisers the engine itself
 * uses are in quant.h. */
#ifndef SPECDEC_CONVERT_H
#define SPECDEC_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/model.h"
#include "specdec/quant.h"
#include "specdec/status.h"
#include "specdec/tokenizer.h"
#include "specdec/types.h"

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
