/* Contexts and batches. A context is the state of forward passes over one loaded model: the
 * activation arena and the KV cache of one or more sequences. Any number of contexts share a
 * model; each is used by one thread at a time. A batch lists tokens of any sequences, each
 * attending to its sequence's cache and to its ancestors in the batch: a chain (prefill,
 * verification of k drafts), several sequences at once (server slots), or a tree of drafts. */
#ifndef SPECDEC_CONTEXT_H
#define SPECDEC_CONTEXT_H

#include <stdint.h>

#include "specdec/kv.h"
#include "specdec/model.h"
#include "specdec/status.h"

typedef struct sd_context sd_context;

typedef struct {
    int n_ctx;       /* positions each sequence holds; 0: the model's training context */
    int n_batch;     /* most tokens one forward chunk holds (activation memory); 0: 512 */
    int n_seq;       /* sequences, each with its own cache rows; 0: 1 */
    sd_type kv_type; /* SD_TYPE_F32 (default) or SD_TYPE_F16 (half the cache bytes; needs
                        head_dim >= 16, on every kernel path) */
    int n_threads;   /* threads of this context's passes (OpenMP and OpenBLAS), at most
                        OMP_THREAD_LIMIT; 0: the creating thread's OpenMP default
                        (OMP_NUM_THREADS, else the CPUs). Contexts on different threads may
                        use different counts. */
} sd_context_params;

sd_context_params sd_context_default_params(void);

sd_status sd_context_create(const sd_model *m, const sd_context_params *p, sd_context **out);
void sd_context_free(sd_context *c); /* NULL is fine */

const sd_model *sd_context_model(const sd_context *c);
int sd_context_n_ctx(const sd_context *c);
int sd_context_n_seq(const sd_context *c);
int sd_context_n_batch(const sd_context *c);
sd_type sd_context_kv_type(const sd_context *c);
int sd_context_n_threads(const sd_context *c); /* what its passes run on */
sd_kv *sd_context_kv(sd_context *c); /* the cache itself, for inspection */

int sd_context_seq_len(const sd_context *c, int seq);
/* Keeps positions [0, n) of seq: O(1). */
sd_status sd_context_seq_truncate(sd_context *c, int seq, int n);
/* Copies positions [0, n) of sequence src into dst (sd_kv_copy): a prefix computed once serves
 * another sequence. */
sd_status sd_context_seq_copy(sd_context *c, int src, int dst, int n);
/* After a tree pass: keeps [0, base) and the batch rows rows[0..n) (increasing, each >= base;
 * a row is base + the token's rank among the pass's tokens of seq) as base..base+n-1. */
sd_status sd_context_seq_keep(sd_context *c, int seq, int base, const int32_t *rows, int n);

/* n tokens; token i at position pos[i] of sequence seq[i]. parent[i] is -1 for a token that
 * follows the sequence's cache directly (its position is the sequence's length), else the
 * index of an earlier token of the same sequence in this batch (its position is the parent's
 * + 1). logits[i] != 0 asks for the token's logit row. sd_batch_add fills a chain: each token's
 * parent is the previous token of its sequence in the batch. */
typedef struct {
    int n, cap;
    int32_t *token;
    int32_t *pos;
    int32_t *seq;
    int32_t *parent;
    int8_t *logits;
} sd_batch;

sd_status sd_batch_init(sd_batch *b, int cap);
void sd_batch_free(sd_batch *b); /* leaves it empty; a zeroed batch is fine */
void sd_batch_clear(sd_batch *b);
/* Appends a token continuing its sequence's chain in the batch (pos is checked by decode). */
sd_status sd_batch_add(sd_batch *b, int32_t token, int32_t pos, int32_t seq, int logits);
/* Appends a child of batch token parent (-1: a root after the sequence's cache). */
sd_status sd_batch_add_child(sd_batch *b, int32_t token, int32_t pos, int32_t seq, int32_t parent, int logits);
int sd_batch_n_logits(const sd_batch *b);

/* Runs the batch in one forward pass (weights read once for all its tokens). Each sequence's
 * tokens must be contiguous in the batch; the token of rank r among them writes its keys and
 * values at cache row len + r of the sequence, and the sequence's length grows by its token
 * count. A sequence whose tokens are not a chain (a tree) must then keep one path with
 * sd_context_seq_keep (or truncate). logits: [sd_batch_n_logits][vocab] in batch order (may be
 * NULL when none are asked for). A batch larger than n_batch runs in chunks unless it holds a
 * tree. Every id, sequence, parent and position is checked; on any error no sequence changes. */
sd_status sd_context_decode(sd_context *c, const sd_batch *b, float *logits);

/* tokens[0..n) appended to seq as a chain, without a batch: logits [n][vocab] when all_logits,
 * else [vocab] of the last token (logits may be NULL). One decode step is n == 1. */
sd_status sd_context_forward(sd_context *c, int seq, const int32_t *tokens, int n, float *logits, int all_logits);

#endif
