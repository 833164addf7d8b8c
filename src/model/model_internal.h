/* The model object shared by the loaders (gguf, llama2.c) and the forward pass. */
#ifndef SD_MODEL_INTERNAL_H
#define SD_MODEL_INTERNAL_H

#include "specdec/gguf.h"
#include "specdec/model.h"

typedef struct {
    const float *attn_norm; /* [dim] */
    const float *ffn_norm;  /* [dim] */
    sd_tensor wq;           /* [n_heads*head_dim][dim] */
    sd_tensor wk;           /* [n_kv_heads*head_dim][dim] */
    sd_tensor wv;           /* [n_kv_heads*head_dim][dim] */
    sd_tensor wo;           /* [dim][n_heads*head_dim] */
    sd_tensor w1;           /* gate [hidden][dim] */
    sd_tensor w2;           /* down [dim][hidden] */
    sd_tensor w3;           /* up [hidden][dim] */
    const float *bq, *bk, *bv; /* q/k/v projection biases (Qwen2); NULL when absent */
} sd_layer;

/* Activations for up to n_batch tokens, carved from one allocation at load. */
typedef struct {
    float *base;
    int n_batch;
    float *x;       /* [n_batch][dim] residual stream */
    float *xb;      /* [n_batch][dim] normed input */
    float *q;       /* [n_batch][n_heads*head_dim] */
    float *att_out; /* [n_batch][n_heads*head_dim] */
    float *hb;      /* [n_batch][hidden] gate, then silu(gate)*up */
    float *hb2;     /* [n_batch][hidden] up */
    float *att;     /* [threads][n_ctx] attention scores */
    float *tile;    /* [SD_DEQUANT_TILE_ROWS][max cols] dequantised weights for sgemm */
    float *knew;    /* [n_batch][kv_dim] new keys before an F16 cache stores them */
    float *vnew;    /* [n_batch][kv_dim] new values, likewise */
    float *conv;    /* [conv_slots][16][kv_dim] F16 cache blocks as floats (sd_attention_f16) */
    float *rope;    /* [n_batch][rope_dim] each token's RoPE cosines, then sines */
    int att_threads;
    int conv_slots;
} sd_arena;

struct sd_model {
    sd_hparams hp;
    char *path;
    const char *format;
    void *map; /* read-only mmap of the file (NULL when loaded from memory) */
    void *owned_image; /* malloc'd GGUF image the model was loaded from and owns (or NULL) */
    size_t map_len;
    sd_gguf *gguf;
    struct sd_hf_files *hf; /* HF checkpoints: mapped shards and converted tensors (load_hf.c) */
    sd_tensor tok_embd; /* [vocab][dim] */
    sd_tensor output;   /* [vocab][dim]; == tok_embd when tied */
    const float *output_norm;
    sd_layer *layers;
    float *owned;       /* F32 copies of norm vectors stored in other types */
    float *inv_freq;    /* [rope_dim/2] */
    sd_tokenizer *tok;
    int tok_borrowed;   /* tok belongs to another model (an in-memory quantised copy's source) */
    char *tok_path; /* llama2.c: the tokenizer.bin used */
    int n_ctx;
    int n_tensors;
    int type_counts[SD_TYPE_COUNT];
    size_t weight_bytes;
    sd_arena arena;
    void *packed_image; /* the kernels' copies of the matrices (sd_tensor.packed), or NULL */
    sd_type kv_type;    /* element type of the caches sd_model_kv_create makes */
};

/* Validates hyperparameters, computes inv_freq and sizes the arena. */
sd_status sd_model_finish(sd_model *m, const sd_model_params *p);

/* Loaders fill m->hp, the tensors and the tokenizer. */
sd_status sd_model_load_gguf(sd_model *m, const void *buf, size_t len, const sd_model_params *p);
sd_status sd_model_load_llama2c(sd_model *m, const void *buf, size_t len, const sd_model_params *p);
/* HF checkpoint: path is its directory or a config.json / safetensors file inside it. */
sd_status sd_model_load_hf(sd_model *m, const char *path, const sd_model_params *p);
void sd_hf_files_free(struct sd_hf_files *f);
/* llama2.c checkpoint whose tokenizer.bin is given as bytes (copied) instead of a path. */
sd_status sd_model_load_llama2c_buf(sd_model *m, const void *buf, size_t len, const void *tok_buf,
                                    size_t tok_len);

#endif
