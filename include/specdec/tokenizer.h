/* Tokenizers behind one handle: SentencePiece-style BPE (llama2.c tokenizer.bin, GGUF "llama"
 * vocab) and BPE by merge ranks (GGUF "gpt2" byte-level vocab, HF tokenizer.json "BPE"). */
#ifndef SPECDEC_TOKENIZER_H
#define SPECDEC_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/status.h"

typedef enum {
    SD_TOKENIZER_SPM = 1, /* SentencePiece BPE by merge scores, byte fallback */
    SD_TOKENIZER_BPE = 2, /* BPE by merge ranks: byte-level (GPT-2 style) or with byte fallback */
} sd_tokenizer_kind;

/* SentencePiece token types, as GGUF tokenizer.ggml.token_type stores them. */
enum {
    SD_TOKEN_NORMAL = 1,
    SD_TOKEN_UNKNOWN = 2,
    SD_TOKEN_CONTROL = 3,
    SD_TOKEN_USER_DEFINED = 4,
    SD_TOKEN_UNUSED = 5,
    SD_TOKEN_BYTE = 6,
};

typedef struct sd_tokenizer sd_tokenizer;

/* llama2.c tokenizer.bin: int32 max_token_length, then vocab_size records of
 * (float score, int32 len, len bytes). vocab_size comes from the model header; the file
 * must end right after the last record. BOS = 1, EOS = 2, UNK = 0, add_bos = 1,
 * add_space_prefix = 1, byte tokens "<0x00>".."<0xFF>" found by text. Pieces are brought
 * back to SentencePiece form (' ' -> U+2581, "\n<s>\n" -> "<s>") so they equal the GGUF ones.
 * `what` names the source in error messages. On failure *out is NULL. */
sd_status sd_tokenizer_load_llama2c(const char *path, int vocab_size, sd_tokenizer **out);
sd_status sd_tokenizer_from_llama2c_buf(const void *buf, size_t len, int vocab_size,
                                        const char *what, sd_tokenizer **out);

/* From GGUF metadata: tokenizer.ggml.model must be "llama" or "gpt2" (else
 * SD_ERR_UNSUPPORTED); tokens (required), scores (default 0), token_type (default: inferred),
 * bos/eos/unknown/padding_token_id (default 1/2/0/none for "llama", none for "gpt2"; -1 or
 * 4294967295 mean none), add_bos_token and add_space_prefix (default 1 for "llama").
 * "gpt2" also needs tokenizer.ggml.merges and takes its pre-tokenizer from tokenizer.ggml.pre
 * (default, gpt-2, llama-bpe/llama3, qwen2, deepseek-coder, starcoder and llama.cpp's aliases
 * of them; absent means "default"), whose family sets add_bos when add_bos_token is absent.
 * Everything is copied: g may be freed afterwards. */
sd_status sd_tokenizer_from_gguf(const sd_gguf *g, const char *what, sd_tokenizer **out);

/* From a Hugging Face tokenizer.json with model.type "BPE" (else SD_ERR_UNSUPPORTED): vocab,
 * merges (strings or pairs), added_tokens (special ones become control tokens, the others
 * user-defined tokens split out of text before BPE), byte_fallback, unk_token, fuse_unk,
 * ignore_merges; normalizer null, NFC (not applied, as in llama.cpp) or Prepend/Replace
 * with U+2581; pre_tokenizer null, ByteLevel, Metaspace (U+2581), Digits or Split with a
 * gpt2/llama3/qwen2/deepseek-coder pattern (each exact); decoder ByteLevel, Metaspace or the
 * SentencePiece-style Replace/ByteFallback/Fuse/Strip sequence. BOS and add_bos come from a TemplateProcessing
 * post-processor that starts with a special token, else bos; eos is taken as given (ids
 * from config.json; -1 for none). Ids nothing names become unused "[PADn]" pieces. */
sd_status sd_tokenizer_load_hf_json(const char *path, int32_t bos, int32_t eos, sd_tokenizer **out);
sd_status sd_tokenizer_from_hf_json(const char *json, size_t len, const char *what, int32_t bos,
                                    int32_t eos, sd_tokenizer **out);

void sd_tokenizer_free(sd_tokenizer *t); /* NULL is fine */

sd_tokenizer_kind sd_tokenizer_kind_of(const sd_tokenizer *t);
int sd_tokenizer_n_vocab(const sd_tokenizer *t);
int32_t sd_tokenizer_bos(const sd_tokenizer *t); /* -1 when none */
int32_t sd_tokenizer_eos(const sd_tokenizer *t);
int sd_tokenizer_add_bos(const sd_tokenizer *t);

/* Raw piece text of id (e.g. "▁the", "<0x0A>"), NULL if out of range. */
const char *sd_tokenizer_piece(const sd_tokenizer *t, int32_t id, size_t *len);
int sd_tokenizer_token_type(const sd_tokenizer *t, int32_t id); /* SD_TOKEN_*, -1 if out of range */

/* Encodes len bytes of text. add_bos prepends BOS when the vocab has one. For BPE vocabs
 * this matches llama.cpp's BPE tokenizer (parse_special off: user-defined tokens are split out
 * first, longest first; then the pre-tokenizer; merges by rank, ties leftmost) and HF's for
 * tokenizer.json; the rest of this comment is about SPM vocabs.
 * Writes at most cap ids; *n_out receives the full count even when it exceeds cap
 * (then SD_ERR_INVALID_ARG is returned and out holds the first cap ids; out may be NULL
 * with cap 0 to count). Matches llama.cpp's SPM tokenizer with parse_special off: spaces
 * escaped to U+2581, a leading U+2581 added when add_space_prefix (and the text is
 * non-empty), merges by best score (ties: leftmost), byte fallback ("<0xXX>", else the
 * unknown token). Unlike llama.cpp it does not split user-defined pieces out of the text
 * first (Llama-2-style vocabularies have none). Safe to call from several threads. */
sd_status sd_tokenizer_encode(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                              int32_t *out, int cap, int *n_out);

/* Text of token id as it should be printed after token prev (-1 at start): U+2581 -> ' ',
 * byte tokens -> the raw byte, control/unknown/unused tokens (BOS/EOS) -> "", user-defined
 * tokens verbatim, and the leading space that add_space_prefix introduced is dropped when
 * prev is BOS or -1; byte-level BPE pieces map each character back to its byte (GPT-2's
 * table), with nothing dropped. Writes up to cap bytes (no NUL) and returns the number written, or -1
 * on a bad id. A buffer of sd_tokenizer_max_piece_len() bytes always holds the whole text. */
int sd_tokenizer_decode(const sd_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);

/* Upper bound on the bytes sd_tokenizer_decode writes for any single token. */
int sd_tokenizer_max_piece_len(const sd_tokenizer *t);

/* Compatibility of a draft tokenizer with a target's: same piece encoding (byte-level BPE, or
 * SentencePiece-style for SPM and byte-fallback BPE alike, so a GGUF "llama" vocab pairs with
 * the tokenizer.json of the same model), same BOS/EOS, same piece
 * text for every id both have, sizes equal or differing only by trailing ids that are
 * unused/control padding. On mismatch returns SD_ERR_MISMATCH with a message naming
 * the first differing id and both texts. */
sd_status sd_tokenizer_check_compatible(const sd_tokenizer *target, const sd_tokenizer *draft);

#endif
