/* What the quantised-type files (quant_blocks.c, quant_ref.c, quant_pack.c, quant.c and each
 * path's quant_*.c) share: block-format helpers, the activation records and the 16-row layout. */
#ifndef SD_KERNELS_QUANT_INTERNAL_H
#define SD_KERNELS_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/quant.h"

#if defined(__F16C__) /* the files of the vector paths */
#include <immintrin.h>
#endif

/* The fp16 at p as a float. */
static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return sd_fp16_to_fp32(h);
#endif
}

/* The little-endian uint32 at p. */
static inline uint32_t le32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ggml's 6-bit scales and mins of Q4_K's 8 sub-blocks, unpacked as get_scale_min_k4 does:
 * sub-blocks 0..3 take the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 take a
 * nibble of bytes 8..11 plus the top 2 bits of bytes 0..3 / 4..7. out: 8 scales, 8 mins. */
static inline void q4_k_scales(const uint8_t *s, uint8_t out[16]) {
    for (int j = 0; j < 4; j++) {
        out[j] = s[j] & 63;
        out[8 + j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        out[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        out[8 + j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Blocks in n elements of type t, or -1 when n is not a whole number of blocks. */
static inline int64_t blocks_of(sd_type t, int64_t n) {
    const sd_type_traits *ti = sd_type_info(t);
    if (!ti || n < 0 || n % ti->block_size) return -1;
    return n / ti->block_size;
}

/* ------------------------------------------------------------------ activation quantisation
 *
 * Q4_0 / Q5_0 / Q8_0 weights: each token's activations become blocks of 32 int8 with an
 * fp16-rounded scale amax/127 (as llama.cpp's quantize_row_q8_0: q = round-to-even(x*127/amax)),
 * stored in groups of four blocks (act_quad: Q5_0) or in order with the scales and offset
 * corrections after them (r_layout: Q4_0, Q8_0). A weight type's kernel reads one layout; a
 * batch quantises each token on its own, exactly as a single-token call would.
 * Q4_K / Q6_K: one float scale per 256 (llama.cpp's Q8_K: q = round(-127/max * x), max being
 * the element of largest magnitude), with per-16 and per-32 sums for the offset/min terms. */

/* Four blocks (128 activations) as two 64-byte halves: lo holds elements 0..15 of blocks
 * 0..3 (16 bytes each), hi elements 16..31. Int32 lane l of a VNNI sum over either half
 * (4 bytes per lane) belongs to block l/4, so both halves accumulate into the same lanes and
 * the float work (convert, scale, add) is done once per four blocks per token. d and init
 * hold per lane its block's scale and its share -offset*sum/4 of the correction for weights
 * stored with an unsigned offset (8 for Q4_0, 16 for Q5_0, 128 for Q8_0 read as uint8). */
typedef struct {
    int8_t lo[64];
    int8_t hi[64];
    float d[16];
    int32_t init[16];
} act_quad;

/* One 256-element super-block: q, nbs[0..15] = -(sum of each 16) (lanes 16..31 zero),
 * bs32 = sum of each 32, d the float scale, nbs32 = 32 * nbs as int32 (the AVX-512 Q6_K
 * kernel's chain starts, one broadcast load each). 448 bytes keeps every record 64-aligned. */
typedef struct {
    int8_t q[256];
    int16_t nbs[32];
    int16_t bs32[8];
    float d;
    int32_t nbs32[16];
    uint8_t pad[44];
} act_k;
_Static_assert(sizeof(act_k) % 64 == 0, "act_k records stay 64-byte aligned");

typedef enum { FAM_NONE, FAM_A, FAM_R, FAM_K } family;

static inline family family_of(sd_type t) {
    switch (t) {
    case SD_TYPE_Q5_0: return FAM_A;
    case SD_TYPE_Q4_0:
    case SD_TYPE_Q8_0: return FAM_R;
    case SD_TYPE_Q4_K:
    case SD_TYPE_Q6_K: return FAM_K;
    default: return FAM_NONE;
    }
}

/* ggml's nearest_int: round to nearest, ties to even, for |v| < 2^22, by the float-add trick
 * (no UB for NaN or out-of-range input, where it returns garbage exactly as ggml's does). */
static inline int nearest_int(float v) {
    float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clamp127(int v) { return v > 127 ? 127 : v < -127 ? -127 : v; }

/* Q4_0 / Q8_0 (the 16-row kernels): one token as its int8 activations in order (q, 32 per
 * block), then each block's scale (d) and the correction -offset * (sum of its q) for weights
 * stored with an unsigned offset (init); each part 64-byte aligned. */
typedef struct {
    size_t d, init, bytes; /* offsets of d and init, record size; q is at 0 */
} r_layout;

static inline r_layout r_layout_of(int64_t cols) {
    const size_t nb = (size_t)(cols / 32), f = (nb * 4 + 63) & ~(size_t)63;
    r_layout L;
    L.d = (nb * 32 + 63) & ~(size_t)63;
    L.init = L.d + f;
    L.bytes = L.init + f;
    return L;
}

/* ------------------------------------------------------------------ the 16-row layout
 *
 * sd_quant_pack_rows groups Q4_0/Q8_0 rows by 16 (the last group zero-padded: zero scales,
 * so padding rows compute 0). A group stores its blocks in order, two at a time: [quant
 * vectors of block 2u][of block 2u+1][their 2 x 16 fp16 scales], a lone last block as [quant
 * vectors][16 scales]: 16 rows' bytes, each group starting 64-byte aligned (the stride is
 * rounded up: with an odd block count 16 rows' bytes are 32 mod 64), so vector loads do not
 * straddle cache lines. Quant vector k of a block holds in int32 lane n row n's quant bytes 4k..4k+3:
 * Q4_0 has 4 (QB = 256 bytes; low nibbles are elements 4k..4k+3, high ones 16+4k..), Q8_0
 * has 8 (QB = 512; elements 4k..4k+3 + 128, as uint8). */
static inline size_t r_qoff(int64_t b, int qb) {
    return (size_t)(b >> 1) * (size_t)(2 * qb + 64) + (size_t)(b & 1) * (size_t)qb;
}

static inline size_t r_soff(int64_t b, int64_t nblk, int qb) {
    const size_t u = (size_t)(b >> 1) * (size_t)(2 * qb + 64);
    return (b & 1) ? u + 2 * (size_t)qb + 32 : b == nblk - 1 ? u + (size_t)qb : u + 2 * (size_t)qb;
}

/* Q4_K in groups of 16 rows, R16K_SB bytes per super-block: the 16 rows' fp16 d, then dmin
 * (32 bytes each), their 8 sub-block scales and 8 mins unpacked to bytes (sc[j][row],
 * m[j][row]: 128 bytes each), then for each 64-element chunk c the 8 vectors whose lane n holds
 * row n's quant bytes 32c + 4k .. 32c + 4k + 3 (low nibbles: sub-block 2c, high: 2c + 1). */
#define R16K_SB 2368

/* Q6_K in groups of 16 rows, R16Q6_SB bytes per super-block (16 x 210 = 3360, padded to 64):
 * the 16 rows' fp16 d (32 bytes), their 16 int8 sub-block scales (sc[j][row], 256 bytes), then
 * the low 4 bits of the 6-bit values as 32 vectors (pair p of 32-element units, k: lane n holds
 * row n's elements 4k..4k+3 of unit 2p in the low nibbles, of unit 2p+1 in the high ones) and
 * the high 2 bits as 16 vectors (r, k: bits 2j, 2j+1 of a byte from unit 4r+j), the same
 * 3360 bytes of data as the file's. Each half of the high bits comes just before the low
 * bits it serves, so the kernel reads a super-block front to back. */
#define R16Q6_SB 3392
/* in reading order: high bits H0, low bits V0, V1 (units 0..3), then H1, V2, V3 */
#define R16Q6_H(r) (288 + 1536 * (r))
#define R16Q6_V(p) (288 + 1536 * ((p) / 2) + 512 + 512 * ((p) % 2))

/* Bytes of one packed group of 16 rows. */
static inline size_t r_gstride(sd_type t, size_t row_bytes) {
    if (t == SD_TYPE_Q4_K) return row_bytes / SD_Q4_K_BYTES * R16K_SB;
    if (t == SD_TYPE_Q6_K) return row_bytes / SD_Q6_K_BYTES * R16Q6_SB;
    return (16 * row_bytes + 63) & ~(size_t)63;
}

/* quant_pack.c: one group of nrows (<= 16) t-typed rows of row_bytes from src into dst
 * (r_gstride bytes) in the 16-row layout; the kernels pack on the fly with it. The scalar
 * version is every path's layout, bit for bit; the other takes the active path's (faster) one. */
void sd_quant_pack_group_scalar(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst);
void sd_quant_pack_group(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst);

/* A 16-row kernel's work: groups [g0, g1) of a matrix of `rows` rows and nblk blocks of 32
 * per row in the 16-row layout (P: group g0, gbytes per group), for token records act (xs
 * bytes apart; L: the Q4_0/Q8_0 record layout); token j's results go to Y + j * rows. */
typedef struct {
    const uint8_t *P;
    size_t gbytes;
    int64_t nblk, rows;
    const uint8_t *act;
    size_t xs;
    r_layout L;
    float *Y;
    int64_t g0, g1;
} sd_r16_job;

/* Most tokens of one pass of a 16-row kernel (a k = 8 verify). */
#define SD_R16_MAX_TOKENS 9

/* quant_ref.c, shared with the portable kernels (quant_portable.c): one block of 32 activations
 * as int8 q, their sum and the fp16-rounded scale (Q4_0/Q5_0/Q8_0 weights); one super-block of
 * 256 as Q8_K (Q4_K/Q6_K weights); the signed integer weights of a Q8_0/Q4_0/Q5_0 block. The
 * vector paths compute the same values. */
float sd_quant_act_block_ref(const float *x, int8_t *q, int *sum);
void sd_quant_act_k_ref(const float *x, act_k *a);
void sd_quant_block_ints(sd_type t, const uint8_t *b, int v[32]);

/* The portable path's (quant_portable.c): activation records and every type's kernel on the
 * file layout, nb (1..8) tokens per call. */
void sd_portable_act_token(sd_type t, const float *x, int64_t cols, void *out);
void sd_portable_quant_rows(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1);

/* The vector paths' code (quant_avx512.c, quant_avx2.c), in their tables:
 *   dequant: nb blocks of type t at src as floats, equal to sd_quant_dequant_row_ref bit for
 *     bit; -1 for types without a fast path;
 *   quant_init: fills the tables the kernels read (once; thread-safe);
 *   act_token: one token's activations x (cols) as the record of t's kernel (act_bytes bytes);
 *   rows_q5_0: Q5_0 (file layout): rows [r0, r1) of W for nb (1..8) token records act, xs
 *     records apart; token j's results go to Y + j * W->rows;
 *   r16: the 16-row kernel of type t (Q4_0, Q8_0, Q4_K, Q6_K) for nb (1..SD_R16_MAX_TOKENS) tokens. */
int sd_avx512_dequant(sd_type t, const uint8_t *src, float *dst, int64_t nb);
void sd_avx512_quant_init(void);
void sd_avx512_act_token(sd_type t, const float *x, int64_t cols, void *out);
void sd_avx512_rows_q5_0(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1);
void sd_avx512_r16(sd_type t, int nb, const sd_r16_job *job);
void sd_avx512_pack_group(sd_type t, const uint8_t *src, size_t row_bytes, int nrows, int64_t nblk, uint8_t *dst);
void sd_avx2_act_token(sd_type t, const float *x, int64_t cols, void *out);
void sd_avx2_rows_q5_0(int nb, const sd_tensor *W, const void *act, size_t xs, float *Y, int64_t r0, int64_t r1);
void sd_avx2_r16(sd_type t, int nb, const sd_r16_job *job);

#endif
