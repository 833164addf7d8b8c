/* Synthetic models: random weights of any shape and architecture (llama, qwen2, qwen3) in
 * llama.cpp's GGUF layout, with a SentencePiece-style vocabulary, for tests (tiny models) and
 * benchmarks (real-sized shapes). */
#ifndef SPECDEC_SYNTH_H
#define SPECDEC_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/status.h"

typedef struct {
    const char *arch; /* "llama" (NULL too), "qwen2" (q/k/v biases) or "qwen3" (q/k norms): the
                       * tensors are those the architecture table requires */
    int dim;          /* embedding length */
    int n_layers;
    int n_heads;
    int n_kv_heads;   /* divides n_heads (grouped-query attention) */
    int head_dim;     /* 0: dim / n_heads; else written as attention.key_length (Qwen3: 128
                       * with dim 1024 and 16 heads) */
    int hidden_dim;   /* feed-forward length */
    int vocab_size;   /* >= 3; byte tokens are included from 259 up */
    int ctx_len;
    float rope_theta;
    float norm_eps;
    uint32_t wtype;   /* matrices: f32, f16, bf16, q8_0, q4_0, q5_0, q4_K or q6_K (norms are always
                       * F32); rows that do not divide into its blocks fall back (sd_quant_fallback) */
    int tied_output;  /* 1: no output.weight, the embedding doubles as the classifier */
    uint64_t seed;
    float weight_scale; /* std of every matrix; 0: 0.02 for embeddings, 1/sqrt(cols) for matrices */
} sd_synth_params;

/* The stories260K shape: dim 64, 5 layers, 8 heads, 4 KV heads, hidden 172, vocab 512,
 * context 512, theta 10000, eps 1e-5, F32, untied, seed 1234, default scales. */
sd_synth_params sd_synth_default_params(void);

/* Sets the sizes (dim, layers, heads, kv heads, hidden, vocab, ctx) of a named llama2.c
 * shape, leaving the other fields; SD_ERR_INVALID_ARG for an unknown name. */
#define SD_SYNTH_SHAPES "stories260K, stories15M, stories42M, stories110M"
sd_status sd_synth_shape(const char *name, sd_synth_params *p);

/* SD_ERR_INVALID_ARG naming the offending field unless the shape is buildable: a known arch,
 * positive sizes, dim % n_heads == 0 (without head_dim), n_heads % n_kv_heads == 0, even head_dim,
 * vocab_size >= 3, finite positive theta and eps, a writable wtype (sd_quant_can_write), sizes that
 * fit in memory. */
sd_status sd_synth_validate(const sd_synth_params *p);

/* Builds the metadata and tensors into a new writer (the caller frees it), which the caller
 * may extend or override (a set on an existing key replaces it) before writing. */
sd_status sd_synth_build(const sd_synth_params *p, sd_gguf_writer **out);
sd_status sd_synth_write_file(const sd_synth_params *p, const char *path);
sd_status sd_synth_write_mem(const sd_synth_params *p, void **buf, size_t *len); /* free(*buf) */

/* The synthetic vocabulary, every piece distinct: id 0 "<unk>" (unknown), 1 "<s>", 2 "</s>"
 * (control); when vocab_size >= 259 the byte tokens "<0x00>".."<0xFF>"; then normal pieces
 * ("▁", letters, digits, punctuation, pieces reachable by merges such as "▁the", then "▁w<id>")
 * scored 0, -1, -2, ... Special and byte tokens score 0. */
typedef struct {
    int n;
    char **pieces;  /* n NUL-terminated UTF-8 strings */
    float *scores;
    int32_t *types; /* SentencePiece token types (1 normal, 2 unknown, 3 control, 6 byte) */
} sd_synth_vocab;

sd_status sd_synth_vocab_build(int vocab_size, sd_synth_vocab *out);
void sd_synth_vocab_free(sd_synth_vocab *v); /* NULL is fine; leaves *v zeroed */

/* Writes the tokenizer.ggml.* metadata of the synthetic vocabulary (model "llama",
 * tokens, scores, token_type, bos 1, eos 2, unk 0, add_bos_token, add_space_prefix). */
sd_status sd_synth_add_tokenizer(sd_gguf_writer *w, int vocab_size);

#endif
