/* The model and context objects shared by the loaders, the forward pass and the converters. */
#ifndef SD_MODEL_INTERNAL_H
#define SD_MODEL_INTERNAL_H

#include "model/arch.h"
#include "specdec/context.h"
#include "specdec/gguf.h"
#include "specdec/model.h"

/* One layer's weights by sd_weight - SD_W_LAYER0; absent ones have data == NULL. Vectors
 * (norm gains, biases) are F32 with one row. */
typedef struct {
    sd_tensor w[SD_LW_COUNT];
} sd_layer;

struct sd_model {
    sd_hparams hp;
    const sd_arch *arch;
    char *path;
    const char *format;
    void *map; /* read-only mmap of the file (NULL when loaded from memory) */
    void *owned_image; /* malloc'd weights the model owns (an in-memory quantised copy), or NULL */
    size_t map_len;
    sd_gguf *gguf;
    struct sd_hf_files *hf; /* HF checkpoints: mapped shards and converted tensors (load_hf.c) */
    sd_tensor g[SD_W_LAYER0]; /* model-level weights; g[SD_W_OUTPUT] == the embeddings when tied */
    int tied;                 /* classifier tied to the token embeddings */
    sd_layer *layers;
    void **owned;       /* F32 copies of vectors stored in other types, and the like */
    int n_owned, cap_owned;
    float *inv_freq;    /* [rope_dim/2], RoPE frequency factors applied */
    sd_tokenizer *tok;
    int tok_borrowed;   /* tok belongs to another model (an in-memory quantised copy's source) */
    char *tok_path;     /* llama2.c: the tokenizer.bin used */
    int n_tensors;
    int type_counts[SD_TYPE_COUNT];
    size_t weight_bytes;
    void *packed_image; /* the kernels' copies of the matrices (sd_tensor.packed), or NULL */
};

/* Weight w of layer l (l ignored for model-level weights). */
static inline const sd_tensor *sd_model_w(const sd_model *m, int l, sd_weight w) {
    return w < SD_W_LAYER0 ? &m->g[w] : &m->layers[l].w[w - SD_W_LAYER0];
}
static inline sd_tensor *sd_model_w_mut(sd_model *m, int l, sd_weight w) {
    return w < SD_W_LAYER0 ? &m->g[w] : &m->layers[l].w[w - SD_W_LAYER0];
}
static inline const float *sd_model_vec(const sd_model *m, int l, sd_weight w) {
    return (const float *)sd_model_w(m, l, w)->data;
}

/* The i-th weight the model has, in sd_model_tensor's order: its id and layer; -1 past the end. */
int sd_model_weight_at(const sd_model *m, int i, sd_weight *w, int *layer);

/* A malloc'd, 64-byte aligned buffer freed with the model; NULL when out of memory. */
void *sd_model_own(sd_model *m, size_t bytes);

/* Counts a bound weight in the tensor statistics: its bytes and type as stored in the file. */
void sd_model_count(sd_model *m, size_t stored_bytes, sd_type stored_type);

/* Looks up the weight named `name` of shape rows x cols (rows == 0: a vector of cols) in the
 * file being loaded and fills *out (a vector converted to F32 when stored otherwise); *found = 0
 * when the file has no such tensor. */
typedef sd_status (*sd_weight_lookup)(sd_model *m, void *src, const char *name, int64_t rows, int64_t cols,
                                      sd_tensor *out, int *found);

/* Walks the architecture table for m->arch with m->hp set: binds every weight the family
 * allows through lookup (HF names when hf), fails on a missing required one, ties the
 * classifier when output is absent, and counts what was bound. Allocates m->layers. */
sd_status sd_model_bind_weights(sd_model *m, sd_weight_lookup lookup, void *src, int hf);

/* Validates hyperparameters against each other, computes inv_freq, packs the weights. */
sd_status sd_model_finish(sd_model *m);

/* Loaders fill m->arch, m->hp, the weights and the tokenizer. */
sd_status sd_model_load_gguf(sd_model *m, const void *buf, size_t len, const sd_model_params *p);
sd_status sd_model_load_llama2c(sd_model *m, const void *buf, size_t len, const sd_model_params *p);
/* HF checkpoint: path is its directory or a config.json / safetensors file inside it. */
sd_status sd_model_load_hf(sd_model *m, const char *path, const sd_model_params *p);
void sd_hf_files_free(struct sd_hf_files *f);
/* llama2.c checkpoint whose tokenizer.bin is given as bytes (copied) instead of a path. */
sd_status sd_model_load_llama2c_buf(sd_model *m, const void *buf, size_t len, const void *tok_buf,
                                    size_t tok_len);

/* ---- contexts ---------------------------------------------------------------------------- */

/* Activations for up to n_batch tokens, carved from one allocation. */
typedef struct {
    float *base;
    int n_batch;
    float *x;       /* [n_batch][dim] residual stream */
    float *xb;      /* [n_batch][dim] normed input */
    float *q;       /* [n_batch][n_heads*head_dim] */
    float *att_out; /* [n_batch][n_heads*head_dim] */
    float *hb;      /* [n_batch][hidden] gate, then silu(gate)*up */
    float *hb2;     /* [n_batch][hidden] up */
    float *att;     /* [att_threads][n_ctx] attention scores */
    float *tile;    /* [SD_DEQUANT_TILE_ROWS][max cols] dequantised weights for sgemm */
    float *knew;    /* [n_batch][kv_dim] new keys before they go to their sequences' rows */
    float *vnew;    /* [n_batch][kv_dim] new values, likewise */
    float *conv;    /* [conv_slots][16][kv_dim] F16 cache blocks as floats (sd_attention_f16) */
    float *rope;    /* [n_batch][rope_dim] each token's RoPE cosines, then sines */
    int att_threads;
    int conv_slots;
} sd_arena;

struct sd_context {
    const sd_model *m;
    sd_context_params p; /* resolved: every field set */
    sd_kv *kv;
    sd_arena arena;
};

#endif
