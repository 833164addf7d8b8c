/* Models: loading (GGUF, llama2.c checkpoints, Hugging Face safetensors), hyperparameters and
 * weights. A loaded model is immutable: any number of contexts (specdec/context.h), on any
 * threads, run the one forward pass over it. */
#ifndef SPECDEC_MODEL_H
#define SPECDEC_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "specdec/status.h"
#include "specdec/tokenizer.h"
#include "specdec/types.h"

typedef enum {
    SD_ROPE_INTERLEAVED = 0, /* pairs (2i, 2i+1): llama2.c and GGUF "llama" */
    SD_ROPE_HALF = 1,        /* pairs (i, i + d/2): Hugging Face rotate_half, GGUF qwen2/qwen3 */
} sd_rope_style;

typedef struct {
    int dim;        /* embedding width */
    int n_layers;
    int n_heads;
    int n_kv_heads; /* < n_heads: grouped-query attention */
    int head_dim;   /* dim / n_heads unless the file says otherwise (Qwen3 key_length, HF head_dim) */
    int hidden_dim; /* FFN width */
    int vocab_size; /* logits per token (embedding rows) */
    int ctx_len;    /* training context from the file (capped at a sliding window) */
    int rope_dim;   /* rotated dims per head (== head_dim for llama) */
    float rope_theta;
    float rope_scale; /* linear RoPE scaling: positions are divided by it (1: none) */
    float norm_eps;
    sd_rope_style rope_style;
} sd_hparams;

typedef struct {
    const char *tokenizer_path; /* llama2.c .bin: tokenizer.bin; HF: tokenizer.json; NULL searches
                                   beside the model */
    const char *tokenizer_fallback; /* used when none is given or found (a draft sharing the
                                       target's tokenizer.bin) */
} sd_model_params;

sd_model_params sd_model_default_params(void);

typedef struct sd_model sd_model;

/* Resolves a model argument into buf: an existing path, else NAME, NAME.gguf, NAME.bin,
 * NAME/NAME.bin, NAME/NAME.gguf under each directory of the search path ($SPECDEC_MODEL_PATH,
 * colon-separated; ./models; ../shared/models). SD_ERR_IO naming where it looked if absent. */
sd_status sd_model_resolve(const char *arg, char *buf, size_t cap);

/* Loads a .gguf or llama2.c .bin checkpoint (chosen by magic, not extension), or a Hugging
 * Face checkpoint: a directory (or its config.json or a .safetensors file in it) with
 * config.json (an architecture of sd_model_arch's families), model.safetensors or
 * model.safetensors.index.json shards (F32/F16/BF16), and tokenizer.json. */
sd_status sd_model_load(const char *path, const sd_model_params *p, sd_model **out);
/* Loads a GGUF image from memory (not copied: buf must outlive the model). */
sd_status sd_model_load_gguf_mem(const void *buf, size_t len, const char *what,
                                 const sd_model_params *p, sd_model **out);
/* Loads a llama2.c checkpoint from memory (not copied: buf must outlive the model) with its
 * tokenizer.bin from tok_buf (copied). */
sd_status sd_model_load_llama2c_mem(const void *buf, size_t len, const char *what,
                                    const void *tok_buf, size_t tok_len, sd_model **out);
void sd_model_free(sd_model *m); /* NULL is fine */

const sd_hparams *sd_model_hparams(const sd_model *m);
const sd_tokenizer *sd_model_tokenizer(const sd_model *m);
const char *sd_model_path(const sd_model *m);
const char *sd_model_format(const sd_model *m); /* "gguf", "llama2c" or "hf" */
const char *sd_model_arch(const sd_model *m);   /* "llama", "qwen2", "qwen3" */
/* Path of the tokenizer.bin a llama2.c model was loaded with; NULL for GGUF. */
const char *sd_model_tokenizer_path(const sd_model *m);
size_t sd_model_weight_bytes(const sd_model *m); /* bytes of all weight tensors */
/* Bytes of weights one decode step streams (all matrices, vectors and the classifier; the
 * embedding table contributes one row). The numerator of the bandwidth figure. */
size_t sd_model_bytes_per_token(const sd_model *m);
/* Prints architecture, hyperparameters, tensor type counts, vocab and special tokens,
 * weight bytes and KV bytes per token. */
void sd_model_describe(const sd_model *m, FILE *f);

/* The weights as tensors under llama.cpp's GGUF names, whatever format the model came from:
 * token_embd.weight, rope_freqs.weight, each layer's (blk.N.attn_norm.weight, attn_q.weight,
 * attn_q.bias, ..., ffn_gate.weight, ffn_down.weight, ffn_up.weight), output_norm.weight and
 * output.weight (unless the classifier is tied), each only when the model has it, in the order
 * of the architecture table. Matrices are views of the loaded data (rows = ne[1]);
 * vectors are F32 views with one row. Q/K rows are in the model's own RoPE order (see
 * hparams.rope_style). sd_model_tensor writes the name into name[cap]. */
int sd_model_n_tensors(const sd_model *m);
sd_status sd_model_tensor(const sd_model *m, int i, char *name, size_t cap, sd_tensor *view);

#endif
