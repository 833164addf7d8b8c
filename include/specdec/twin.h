/* Cost twins: a Llama GGUF of a large shape that computes the same function as a small trained
 * model (same logits up to float rounding). Its decode streams the large shape's bytes while
 * its predictions, and so a draft's acceptance, stay those of trained weights. */
#ifndef SPECDEC_TWIN_H
#define SPECDEC_TWIN_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/model.h"
#include "specdec/status.h"
#include "specdec/types.h"

typedef struct {
    int dim;        /* the large shape; every size at least the small model's */
    int n_layers;
    int n_heads;    /* dim / n_heads must be a multiple of the small model's head size */
    int n_kv_heads;
    int hidden_dim;
    sd_type wtype;  /* matrices (f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q6_K); norms F32 */
    uint64_t seed;  /* the random input weights of the extra heads, dims, units and layers */
    const char *name; /* how specdec.twin_of names the small model; NULL: its path */
} sd_twin_params;

/* The stories110M shape (dim 768, 12 layers, 12 heads, 12 kv heads, hidden 2048), F32, seed 1. */
sd_twin_params sd_twin_default_params(void);

/* Sets the sizes of a named shape (the names of sd_synth_shape; its vocabulary and context are
 * not used: a twin keeps the small model's). SD_ERR_INVALID_ARG for an unknown name. */
sd_status sd_twin_shape(const char *name, sd_twin_params *p);

/* SD_ERR_INVALID_ARG (SD_ERR_UNSUPPORTED for a small model the construction cannot copy, e.g.
 * one with q/k/v biases) naming the field unless small has a twin of shape p: every size at
 * least small's, dim divisible by n_heads and n_heads by n_kv_heads, the head size a multiple
 * of small's, and each group of q heads that share a kv head in the twin using one kv head in
 * small. */
sd_status sd_twin_check(const sd_model *small, const sd_twin_params *p);

/* Builds the twin into a new writer (the caller frees it): llama metadata with small's
 * vocabulary (sd_tokenizer_write_gguf), context, RoPE base and epsilon, a separate classifier,
 * and specdec.twin_of describing the construction:
 *  - residual stream: small's d dims first, the rest written only with zeros (embedding
 *    columns, attention-output and FFN-down rows), so they stay exactly zero; embedding,
 *    attention-output and FFN-down weights times c = sqrt(D/d), norm gains over c, so every
 *    normalised vector (eps included) is small's;
 *  - head h is small's head h; small RoPE pair p is pair p*HS/hs (the same frequency); q rows
 *    times sqrt(HS/hs) to undo the larger 1/sqrt(head_dim); the extra dims of a head have zero
 *    K rows (q.k unchanged), random Q and V rows and zero attention-output columns; small kv
 *    heads are copied to every twin kv head their q heads use;
 *  - extra heads, FFN units and layers: random input weights, zero output weights.
 * Random weights have the magnitude of the small matrix they extend; in rows that hold small
 * weights, the extras sharing a 256-column block with them are zero, so quantising the twin
 * (any block type, k-quant super-blocks included) rounds small's weights as quantising small
 * would. */
sd_status sd_twin_build(const sd_model *small, const sd_twin_params *p, sd_gguf_writer **out);
sd_status sd_twin_write_file(const sd_model *small, const sd_twin_params *p, const char *path);

/* 1 and the specdec.twin_of text in buf (cut to cap) when m was loaded from a GGUF that has
 * one; else 0 and buf "". */
int sd_model_twin_of(const sd_model *m, char *buf, size_t cap);

#endif
