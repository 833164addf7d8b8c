/* Verify rounds: the proposals of several sequences as one batch, one forward pass, logit rows
 * handed back per sequence; and keeping the accepted path of a tree. */
#include "specdec/target.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "specdec/draft.h"

/* A verify pass of k+1 tokens must take the small-batch kernels, whose rows equal token-by-token
 * decoding bit for bit: that is what keeps greedy speculative output identical to plain. */
_Static_assert(SD_MAX_DRAFT + 1 <= SD_SMALL_BATCH, "a verify pass must fit the bit-exact small-batch kernels");

struct sd_verify_round {
    sd_context *ctx;
    sd_batch b;
    float *logits; /* [cap_rows][vocab] */
    int cap_rows;
    size_t vocab;
};

sd_status sd_verify_round_create(sd_context *ctx, sd_verify_round **out) {
    *out = NULL;
    if (!ctx) return sd_fail(SD_ERR_INVALID_ARG, "verify round: no context");
    sd_verify_round *r = calloc(1, sizeof *r);
    if (!r) return sd_fail(SD_ERR_NOMEM, "out of memory");
    r->ctx = ctx;
    r->vocab = (size_t)sd_model_hparams(sd_context_model(ctx))->vocab_size;
    sd_status st = sd_batch_init(&r->b, SD_MAX_DRAFT + 1);
    if (st != SD_OK) {
        free(r);
        return st;
    }
    *out = r;
    return SD_OK;
}

void sd_verify_round_free(sd_verify_round *r) {
    if (!r) return;
    sd_batch_free(&r->b);
    free(r->logits);
    free(r);
}

void sd_verify_round_clear(sd_verify_round *r) { sd_batch_clear(&r->b); }
sd_context *sd_verify_round_context(const sd_verify_round *r) { return r->ctx; }
int sd_verify_round_n_tokens(const sd_verify_round *r) { return r->b.n; }

/* Room for n more tokens in the batch. */
static sd_status reserve(sd_verify_round *r, int n) {
    if (r->b.n + n <= r->b.cap) return SD_OK;
    sd_batch nb;
    int cap = r->b.cap * 2 > r->b.n + n ? r->b.cap * 2 : r->b.n + n;
    sd_status st = sd_batch_init(&nb, cap);
    if (st != SD_OK) return st;
    nb.n = r->b.n;
    memcpy(nb.token, r->b.token, (size_t)r->b.n * sizeof *nb.token);
    memcpy(nb.pos, r->b.pos, (size_t)r->b.n * sizeof *nb.pos);
    memcpy(nb.seq, r->b.seq, (size_t)r->b.n * sizeof *nb.seq);
    memcpy(nb.parent, r->b.parent, (size_t)r->b.n * sizeof *nb.parent);
    memcpy(nb.logits, r->b.logits, (size_t)r->b.n * sizeof *nb.logits);
    sd_batch_free(&r->b);
    r->b = nb;
    return SD_OK;
}

sd_status sd_verify_round_add_chain(sd_verify_round *r, int seq, const int32_t *tokens, int n, int *row) {
    if (n < 1) return sd_fail(SD_ERR_INVALID_ARG, "verify round: a chain of %d tokens", n);
    sd_status st = reserve(r, n);
    if (st != SD_OK) return st;
    *row = r->b.n;
    const int base = sd_context_seq_len(r->ctx, seq);
    for (int i = 0; i < n; i++)
        sd_batch_add_child(&r->b, tokens[i], base + i, seq, i ? r->b.n - 1 : -1, 1);
    return SD_OK;
}

sd_status sd_verify_round_add_tree(sd_verify_round *r, int seq, const int32_t *tokens, const int32_t *parent, int n,
                                   int *row) {
    if (n < 1) return sd_fail(SD_ERR_INVALID_ARG, "verify round: a tree of %d nodes", n);
    if (parent[0] != -1) return sd_fail(SD_ERR_INVALID_ARG, "verify round: tree node 0 must be the root (parent -1)");
    for (int i = 1; i < n; i++)
        if (parent[i] < 0 || parent[i] >= i)
            return sd_fail(SD_ERR_INVALID_ARG, "verify round: tree node %d has parent %d (must be in [0, %d))", i,
                           (int)parent[i], i);
    sd_status st = reserve(r, n);
    if (st != SD_OK) return st;
    const int first = r->b.n, base = sd_context_seq_len(r->ctx, seq);
    *row = first;
    for (int i = 0; i < n; i++) {
        const int par = i ? first + parent[i] : -1;
        sd_batch_add_child(&r->b, tokens[i], i ? r->b.pos[par] + 1 : base, seq, par, 1);
    }
    return SD_OK;
}

sd_status sd_verify_round_run(sd_verify_round *r) {
    if (r->b.n == 0) return SD_OK;
    if (r->b.n > r->cap_rows) {
        float *l = realloc(r->logits, (size_t)r->b.n * r->vocab * sizeof(float));
        if (!l) return sd_fail(SD_ERR_NOMEM, "verify round: no memory for %d logit rows", r->b.n);
        r->logits = l;
        r->cap_rows = r->b.n;
    }
    return sd_context_decode(r->ctx, &r->b, r->logits);
}

const float *sd_verify_round_logits(const sd_verify_round *r, int row) { return r->logits + (size_t)row * r->vocab; }

sd_status sd_target_keep_path(sd_context *ctx, int seq, int base, const int32_t *path, int n) {
    int32_t rows[SD_MAX_DRAFT + 1];
    if (n < 0 || n > SD_MAX_DRAFT + 1) return sd_fail(SD_ERR_INVALID_ARG, "keep path: %d nodes", n);
    for (int i = 0; i < n; i++) rows[i] = base + path[i];
    return sd_context_seq_keep(ctx, seq, base, rows, n);
}
