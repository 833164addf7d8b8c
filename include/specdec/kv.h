/* Per-model KV cache for one or more sequences: each sequence owns K and V rows per layer for
 * its positions [0, len). Truncation to a shorter length is O(1) (speculative rollback only moves
 * the length); keeping an accepted path of a tree pass moves only the accepted rows. */
#ifndef SPECDEC_KV_H
#define SPECDEC_KV_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/status.h"
#include "specdec/types.h"

typedef struct sd_kv sd_kv;

/* n_seq sequences of n_ctx positions each, every position n_layers x kv_dim elements for K and
 * the same for V, allocated up front. type: SD_TYPE_F32, or SD_TYPE_F16 (half the bytes; values
 * rounded to nearest-even when stored). Refused with the bytes it needs when larger than the
 * machine's memory. */
sd_status sd_kv_create(int n_layers, int n_ctx, int kv_dim, sd_type type, int n_seq, sd_kv **out);
void sd_kv_free(sd_kv *kv); /* NULL is fine */

sd_type sd_kv_type(const sd_kv *kv);
int sd_kv_n_seq(const sd_kv *kv);
int sd_kv_capacity(const sd_kv *kv); /* positions per sequence */
int sd_kv_kv_dim(const sd_kv *kv);
int sd_kv_n_layers(const sd_kv *kv);

/* Positions sequence seq holds (0 for a seq out of range). */
int sd_kv_len(const sd_kv *kv, int seq);
/* Keeps positions [0, n) of seq; n must be <= its length. O(1), no data moves. */
sd_status sd_kv_truncate(sd_kv *kv, int seq, int n);
/* Makes room for n more positions of seq (after they were written at [len, len+n)). */
sd_status sd_kv_advance(sd_kv *kv, int seq, int n);
/* Keeps the positions [0, base) of seq, then rows[0..n) (strictly increasing, each in
 * [base, len)) moved down to base..base+n-1, and truncates seq to base + n: the accepted path of
 * a tree pass, whose rows were written in batch order. Moves only rows that change place:
 * O(moved x n_layers x kv_dim). On a bad argument nothing changes. */
sd_status sd_kv_keep_rows(sd_kv *kv, int seq, int base, const int32_t *rows, int n);

/* Copies positions [0, n) of sequence src into dst (every layer, K and V) and sets dst's length
 * to n: a prompt prefilled once serves several sequences. n <= src's length; src != dst. On a bad
 * argument nothing changes. */
sd_status sd_kv_copy(sd_kv *kv, int src, int dst, int n);

/* Row storage of one (sequence, layer): [n_ctx][kv_dim] elements of sd_kv_type. Rows >= len are
 * scratch for the positions being appended. sd_kv_k/sd_kv_v: F32 caches only (NULL for F16). */
void *sd_kv_k_data(sd_kv *kv, int seq, int layer);
void *sd_kv_v_data(sd_kv *kv, int seq, int layer);
float *sd_kv_k(sd_kv *kv, int seq, int layer);
float *sd_kv_v(sd_kv *kv, int seq, int layer);

size_t sd_kv_bytes_used(const sd_kv *kv);     /* the positions every sequence holds */
size_t sd_kv_bytes_reserved(const sd_kv *kv); /* capacity of every sequence */
size_t sd_kv_bytes_per_token(const sd_kv *kv);

#endif
