/* Helpers shared by the model writers (synthetic models, the converter, cost twins): seeded
 * uniform noise, float matrices stored in any writable type, the rotate-half row order, and the
 * row conversion the in-memory quantiser (engine) shares with the converter (tools). */
#ifndef SD_WRITER_INTERNAL_H
#define SD_WRITER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/model.h"
#include "specdec/status.h"

/* Fills buf[0..n) with mean + uniform noise of standard deviation std from the stream keyed by
 * (seed, key): the same key and seed give the same values whatever else is generated. */
void sd_writer_fill_uniform(float *buf, size_t n, float mean, float std, uint64_t seed, const char *key);

/* Adds rows x cols floats as a tensor of `type` (F32 as they are; other types quantised row by
 * row, with sd_quant_fallback for rows that do not divide into the type's blocks). n_dims 1 is
 * a vector (rows must be 1). */
sd_status sd_writer_add_floats(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, int64_t cols,
                               int64_t rows, const float *buf);

/* general.* and <arch>.* metadata of a GGUF whose matrices are mostly t (file type,
 * quantisation version), with hp's sizes (rope_dim included; key/value_length where the head size
 * is not dim / heads) and tok's vocabulary (sd_tokenizer_write_gguf; NULL: the caller writes one).
 * name is general.name. */
sd_status sd_writer_set_meta(sd_gguf_writer *w, const char *arch, const char *name, sd_type t, const sd_hparams *hp,
                             const sd_tokenizer *tok);

/* The row of a Hugging Face (rotate-half: pairs i, i + rope_dim/2) Q or K matrix that holds
 * row r of the same matrix in GGUF's interleaved order (pairs 2i, 2i+1): llama.cpp's
 * permute() on the first rope_dim dims of each head. heads == 0: r itself. */
int64_t sd_writer_rope_half_row(int64_t r, int heads, int head_dim, int rope_dim);

/* Rows of weight v (any readable type) converted to `type` into dst (rows * sd_type_row_bytes),
 * permuted for GGUF when heads != 0; a view already in `type` is copied byte for byte. name
 * names the tensor in messages. (quantize.c, in the engine: --draft-type uses it too.) */
sd_status sd_model_convert_rows(const sd_model *m, const char *name, const sd_tensor *v, sd_type type, int heads,
                                uint8_t *dst);
/* Bytes of v stored as type; 0 when it cannot be (rows do not divide, or overflow). */
size_t sd_model_stored_bytes(const sd_tensor *v, sd_type type);

#endif
