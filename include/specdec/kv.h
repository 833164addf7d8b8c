/* Per-model KV cache: K and V rows per layer for positions [0, len). Truncation to any
 * shorter length is O(1): speculative rollback only moves the length. */
#ifndef SPECDEC_KV_H
#define SPECDEC_KV_H

#include <stddef.h>

#include "specdec/status.h"
#include "specdec/types.h"

typedef struct sd_kv sd_kv;

/* n_layers x n_ctx x kv_dim floats for K and the same for V, allocated up front. */
sd_status sd_kv_create(int n_layers, int n_ctx, int kv_dim, sd_kv **out);
/* The same with elements of type SD_TYPE_F32 or SD_TYPE_F16 (half the bytes; values rounded
 * to nearest-even when stored). */
sd_status sd_kv_create_typed(int n_layers, int n_ctx, int kv_dim, sd_type type, sd_kv **out);
sd_type sd_kv_type(const sd_kv *kv);
void sd_kv_free(sd_kv *kv); /* NULL is fine */

int sd_kv_len(const sd_kv *kv);
int sd_kv_capacity(const sd_kv *kv);
int sd_kv_kv_dim(const sd_kv *kv);
int sd_kv_n_layers(const sd_kv *kv);

/* Keeps positions [0, n); n must be <= len. O(1), no data moves. */
sd_status sd_kv_truncate(sd_kv *kv, int n);
/* Makes room for n more positions (after they were written at [len, len+n)). */
sd_status sd_kv_advance(sd_kv *kv, int n);

/* Row pointers: [n_ctx][kv_dim] for one layer. Rows >= len are scratch space for the
 * positions being appended. sd_kv_k/sd_kv_v: F32 caches only (NULL for F16); the _data forms
 * point at the elements of either type. */
float *sd_kv_k(sd_kv *kv, int layer);
float *sd_kv_v(sd_kv *kv, int layer);
void *sd_kv_k_data(sd_kv *kv, int layer);
void *sd_kv_v_data(sd_kv *kv, int layer);

size_t sd_kv_bytes_used(const sd_kv *kv);     /* len positions */
size_t sd_kv_bytes_reserved(const sd_kv *kv); /* capacity positions */
size_t sd_kv_bytes_per_token(const sd_kv *kv);

#endif
