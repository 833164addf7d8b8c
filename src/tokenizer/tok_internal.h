/* Private layout of sd_tokenizer, shared by the vocabulary store (vocab.c), the loaders
 * (load.c) and the SentencePiece encoder/decoder (spm.c). */
#ifndef SPECDEC_TOK_INTERNAL_H
#define SPECDEC_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/tokenizer.h"

/* Hard cap on the vocabulary so that ids, offsets and hash slots fit in 32 bits with room
 * to spare; real vocabularies are below 300k. */
#define SD_TOK_MAX_VOCAB (1 << 24)

struct sd_tokenizer {
    sd_tokenizer_kind kind;
    int n_vocab;
    char *text;      /* every piece, NUL-terminated, back to back */
    size_t text_cap; /* bytes reserved for text */
    size_t text_len; /* bytes used so far */
    uint32_t *off;   /* [n_vocab] start of piece i in text */
    uint32_t *len;   /* [n_vocab] its length (without the NUL) */
    float *score;    /* [n_vocab] merge priority: higher merges first */
    uint8_t *type;   /* [n_vocab] SD_TOKEN_* */
    int max_piece_len;

    /* Open-addressing piece -> id table (linear probing, at most 1/4 full); id -1 marks an
     * empty slot. The stored hash settles most mismatches without touching the piece text,
     * which matters because encoding probes for every adjacent pair, mostly in vain. */
    struct sd_tok_slot {
        uint32_t hash;
        int32_t id;
    } *slots;
    uint32_t slot_mask;

    int32_t byte_tok[256]; /* byte-fallback token of each byte value, -1 when none */

    int32_t bos, eos, unk, pad; /* -1 when absent */
    int add_bos;
    int add_space_prefix;
};

/* Allocates an empty tokenizer for n_vocab pieces holding text_bytes bytes of piece text
 * (NULs excluded). Pieces are then added in id order with sd_tok_add_piece and the
 * tables built by sd_tok_finish. */
sd_status sd_tok_alloc(int n_vocab, size_t text_bytes, const char *what, sd_tokenizer **out);

/* Stores piece `id` (ids are added in order, each once); bytes may be NULL when len is 0.
 * Returns -1 when the text does not fit the reservation made by sd_tok_alloc. */
int sd_tok_add_piece(sd_tokenizer *t, int32_t id, const char *bytes, size_t len, float score,
                     int type);

/* Validates types and special ids, builds the piece hash table and the byte-fallback
 * table. `what` names the source in error messages. */
sd_status sd_tok_finish(sd_tokenizer *t, const char *what);

/* Id of the piece with exactly these bytes, -1 when absent. */
int32_t sd_tok_lookup(const sd_tokenizer *t, const char *s, size_t n);

/* Type inferred for a piece when the file stores none: the special ids, then
 * "<0xXX>" byte pieces, else normal. */
int sd_tok_infer_type(const sd_tokenizer *t, int32_t id, const char *s, size_t n);

/* 0..255 when s is a byte piece "<0xXX>" (either hex case), else -1. */
int sd_tok_byte_value(const char *s, size_t n);

/* Writes a printable, escaped, truncated rendering of s into buf (for error messages). */
const char *sd_tok_quote(const char *s, size_t n, char *buf, size_t cap);

#endif
