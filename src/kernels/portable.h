/* The portable path's kernels (plain C, compiled for the generic baseline), which the portable
 * table of cpu.c points at and the vector paths fall back to for what they leave to plain code. */
#ifndef SD_KERNELS_PORTABLE_H
#define SD_KERNELS_PORTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/isa.h"

/* matmul.c: F32 rows, from the rows or a packed copy. */
void sd_portable_rows(const sd_tensor *W, const float *X, int n, float *Y, int64_t r0, int64_t r1, const float *xb);

/* elementwise.c; sd_rope_ref (kernels.h) is the portable RoPE. */
float sd_portable_dot(const float *a, const float *b, int n);
void sd_portable_softmax(float *x, int n);
long sd_portable_first_nonfinite(const float *x, size_t n);
void sd_portable_swiglu(float *a, const float *b, int64_t i0, int64_t i1);
void sd_portable_f32_to_f16(const float *x, uint16_t *y, size_t n);
float sd_portable_stream(const float *buf, size_t per);

/* sampling.c: the sampling loops (sampling.h). */
double sd_portable_softmax_numerators(const float *x, int n, float mx, float t, float *out);
void sd_portable_race_scores(const float *probs, uint64_t key, int32_t x0, int n, float *sc);
int sd_portable_race_cands(const float *probs, uint64_t key, int32_t x0, int n, float floor, uint8_t *cand);
int32_t sd_portable_row_argmax(const float *x, int n);
int sd_portable_row_nonfinite(const float *x, int n);

/* attention.c: every (token, head) on its own, chains, trees and F16 caches. */
void sd_portable_attention(const sd_att_call *c);

/* Runs one(c, token, head, att row) for every (token, head) of c: serially, or on c->nt threads
 * (items interleaved: later tokens attend to more positions) when c->par. att: c->nt rows of
 * pos0 + n floats. The vector paths use it where their blocked kernels do not apply. */
typedef void (*sd_att_item_fn)(const sd_att_call *c, int t, int h, float *att);
void sd_att_items(const sd_att_call *c, sd_att_item_fn one);

#endif
