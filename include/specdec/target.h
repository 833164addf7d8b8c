/* The target's role in speculative decoding: scoring drafts. A verify round gathers the
 * proposals of any number of sequences of one target context (a chain of drafts each, or a tree)
 * into ONE batched forward pass, so the weights are read once for all of them, and hands each
 * sequence its logit rows; afterwards each sequence keeps what was accepted. */
#ifndef SPECDEC_TARGET_H
#define SPECDEC_TARGET_H

#include <stdint.h>

#include "specdec/context.h"

typedef struct sd_verify_round sd_verify_round;

sd_status sd_verify_round_create(sd_context *ctx, sd_verify_round **out);
void sd_verify_round_free(sd_verify_round *r); /* NULL is fine */
void sd_verify_round_clear(sd_verify_round *r);
sd_context *sd_verify_round_context(const sd_verify_round *r);

/* Adds tokens[0..n) as a chain after seq's cache (the first is the last accepted token, the
 * rest drafts); all their logits are wanted. *row: index of the first one's logit row. */
sd_status sd_verify_round_add_chain(sd_verify_round *r, int seq, const int32_t *tokens, int n, int *row);
/* Adds a tree of n nodes after seq's cache: node 0 is the root (the last accepted token), node
 * i > 0 has parent[i] < i. Logits of every node, rows in node order from *row. */
sd_status sd_verify_round_add_tree(sd_verify_round *r, int seq, const int32_t *tokens, const int32_t *parent, int n,
                                   int *row);
int sd_verify_round_n_tokens(const sd_verify_round *r);

/* Runs the round's batch (one forward pass). On error no sequence changes. */
sd_status sd_verify_round_run(sd_verify_round *r);
const float *sd_verify_round_logits(const sd_verify_round *r, int row);

/* After a tree pass whose root went to cache row base: keeps the nodes path[0..n) (increasing
 * node indices from the root) as positions base..base+n-1 of seq, moving only their rows. */
sd_status sd_target_keep_path(sd_context *ctx, int seq, int base, const int32_t *path, int n);

#endif
