/* The architecture table: every weight a model may have (its GGUF and Hugging Face names and its
 * shape in hyperparameters) and, per model family, which weights it requires, allows or forbids,
 * its file names and its RoPE pairing. Loaders, the converter, the quantiser, the synthetic-model
 * writer and `info` all walk it; the forward pass follows from which weights are present. */
#ifndef SD_MODEL_ARCH_H
#define SD_MODEL_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/model.h"

/* Model-level weights first, then per-layer ones (SD_W_LAYER0 on). sd_model_tensor lists
 * token_embd and rope_freqs, then each layer's weights in this order, then output_norm and
 * output (llama.cpp's order). */
typedef enum {
    SD_W_TOKEN_EMBD,
    SD_W_ROPE_FREQS, /* Llama 3 RoPE frequency divisors */
    SD_W_OUTPUT_NORM,
    SD_W_OUTPUT, /* absent: the classifier is tied to the token embeddings */
    SD_W_ATTN_NORM,
    SD_W_ATTN_Q,
    SD_W_ATTN_Q_B,
    SD_W_ATTN_K,
    SD_W_ATTN_K_B,
    SD_W_ATTN_V,
    SD_W_ATTN_V_B,
    SD_W_ATTN_Q_NORM, /* per-head RMSNorm of q before RoPE (Qwen3) */
    SD_W_ATTN_K_NORM,
    SD_W_ATTN_OUT,
    SD_W_FFN_NORM,
    SD_W_FFN_GATE,
    SD_W_FFN_DOWN,
    SD_W_FFN_UP,
    SD_W_COUNT
} sd_weight;
#define SD_W_LAYER0 SD_W_ATTN_NORM
#define SD_LW_COUNT (SD_W_COUNT - SD_W_LAYER0)

/* Sizes a weight's shape is made of. */
typedef enum { SD_D_EMBD, SD_D_Q, SD_D_KV, SD_D_FF, SD_D_VOCAB, SD_D_HEAD, SD_D_ROPE_PAIRS, SD_D_NONE } sd_dim;

typedef struct {
    const char *gguf; /* llama.cpp's name; %d is the layer */
    const char *hf;   /* transformers' name, NULL when HF checkpoints never store it */
    sd_dim rows;      /* SD_D_NONE: a vector of `cols` (norm gains, biases), used as F32 */
    sd_dim cols;      /* a matrix multiplies vectors of cols: y = W x */
    const char *what; /* words for messages */
} sd_weight_info;

extern const sd_weight_info sd_weight_table[SD_W_COUNT];

enum { SD_NEED_NO = 0, SD_NEED_OPT = 1, SD_NEED_YES = 2 };

typedef struct {
    const char *name;         /* GGUF general.architecture */
    const char *hf_names[3];  /* config.json "architectures" values, NULL-terminated */
    unsigned char need[SD_W_COUNT];
    sd_rope_style gguf_rope;  /* pairing of q/k dims in this family's GGUF files */
    int hf_ctx_default;       /* max_position_embeddings when config.json has none */
} sd_arch;

/* The known families; NULL when unknown. */
const sd_arch *sd_arch_by_name(const char *name, size_t len);
const sd_arch *sd_arch_by_hf(const char *hf_name);
const sd_arch *sd_arch_llama(void);
/* "llama, qwen2, qwen3" / the HF class names, for messages. */
const char *sd_arch_list(void);
const char *sd_arch_hf_list(void);

/* Value of a size for these hyperparameters. */
int64_t sd_dim_value(const sd_hparams *hp, sd_dim d);
static inline int sd_weight_is_layer(sd_weight w) { return w >= SD_W_LAYER0; }
static inline int sd_weight_is_vector(sd_weight w) { return sd_weight_table[w].rows == SD_D_NONE; }

/* The weight's name in GGUF (hf = 0) or HF (hf = 1) form for a layer into buf; -1 when it has no
 * name in that form or buf is too small. */
int sd_weight_name(sd_weight w, int layer, int hf, char *buf, size_t cap);

/* GGUF metadata keys, "<arch>.<suffix>", that change the computation and that specdec does not
 * implement; a file holding one with a value other than its neutral one is refused by name. */
typedef enum {
    SD_NEUTRAL_NEVER, /* any value changes the computation */
    SD_NEUTRAL_NONE,  /* the string "none" */
    SD_NEUTRAL_ZERO,  /* 0 (or false) */
    SD_NEUTRAL_ONE,   /* 1 (0 also means "unset" for llama.cpp's factors) */
} sd_neutral;
typedef struct {
    const char *suffix;
    const char *what;
    sd_neutral neutral;
} sd_arch_refused_key;
extern const sd_arch_refused_key sd_arch_refused_keys[];

#endif
