/* Acceptance rules for speculative decoding, as pure functions over distributions.
 * k drafts d[0..k-1]; the target's rows 0..k (row i scores the token after d[0..i-1]). */
#ifndef SPECDEC_VERIFY_H
#define SPECDEC_VERIFY_H

#include <stdint.h>

#include "specdec/sample.h"

/* Greedy: accept while target_argmax[i] == draft[i]. Returns m accepted (0..k) and sets
 * *next to target_argmax[m] (the correction, or the bonus when m == k). */
int sd_verify_greedy(const int32_t *draft, int k, const int32_t *target_argmax, int32_t *next);

/* Exact speculative sampling (Leviathan et al. 2023; Chen et al. 2023).
 * p: [k+1][n] processed target distributions; q: [k][n] processed draft distributions.
 * Accept draft[i] with probability min(1, p_i(d)/q_i(d)); at the first rejection draw
 * *next from normalize(max(0, p_i - q_i)); when all k are accepted draw *next from p_k.
 * residual: n floats of scratch. Returns m accepted.
 * q == NULL: deterministic drafts (q one-hot at each draft): draft[i] is accepted with
 * probability p_i(d), and a rejection draws from p_i with d removed and renormalised.
 * q_i(d) == 0 (a draft that sampling q_i could not produce) is accepted iff p_i(d) > 0, the
 * limit of the ratio; an id outside [0, n) is rejected. RNG use: one uniform per examined
 * draft plus one for *next, so streams stay reproducible for a given seed. */
int sd_verify_stochastic(const float *p, const float *q, const int32_t *draft, int k, int n,
                         sd_rng *rng, float *residual, int32_t *next);

/* One draft of sd_verify_stochastic, at row i: pi, and qi (NULL: a deterministic draft, q one-hot
 * at d). Returns 1 when d is accepted; 0 when it is rejected, with *next drawn from the residual
 * (into residual). The same RNG use as the loop, so a caller may compute the target's rows one
 * at a time and stop at the first rejection (the later rows are never read); after k accepted
 * drafts *next is sd_sample_draw(p_k). */
int sd_verify_stochastic_step(const float *pi, const float *qi, int32_t d, int n, sd_rng *rng, float *residual,
                              int32_t *next);

/* Draws from normalize(max(0, p - q)) (written to residual). When the residual has no mass
 * (p == q up to rounding) draws from p itself, which is then the correct distribution. */
int32_t sd_sample_residual(const float *p, const float *q, int n, sd_rng *rng, float *residual);

/* Trees of drafts. Node 0 is the root (the last accepted token); node i > 0 holds token tok[i]
 * and has parent par[i] < i; a node's children are tried in node order. The target's row i
 * scores the token after node i's path. The accepted path is written to path[0..n_path) (node
 * indices, root first); returns the number of accepted drafts (n_path - 1) and sets *next. */

/* Greedy: from the root, follow the child holding the target's argmax while there is one. */
int sd_verify_tree_greedy(const int32_t *tok, const int32_t *par, int n, const int32_t *target_argmax,
                          int32_t *path, int32_t *next);

/* Multi-candidate speculative sampling (SpecInfer; Miao et al. 2024): at each node the children
 * (drawn i.i.d. from q_u, the draft's distribution at that node, row u of q) are tried in turn:
 * child c is accepted with probability min(1, p_res(c) / q_u(c)), after a rejection p_res =
 * normalize(max(0, p_res - q_u)); p_res starts as the target's row p_u; when every child is
 * rejected *next is drawn from p_res, and at a leaf from p_u. p, q: [n][v]; residual: v floats.
 * The output has the target's distribution exactly. */
int sd_verify_tree_stochastic(const int32_t *tok, const int32_t *par, int n, const float *p, const float *q, int v,
                              sd_rng *rng, float *residual, int32_t *path, int32_t *next);

/* The residual of a one-hot q at d: p with d removed, renormalised (p itself when that leaves no
 * mass). */
int32_t sd_sample_residual_onehot(const float *p, int32_t d, int n, sd_rng *rng, float *residual);


#endif
