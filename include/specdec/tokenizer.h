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
 * (float score, int32 len, len bytes). vocab_size comes from the model header (0: as many
 * records as the file holds, read until its end); the file must end right after the last
 * record. BOS = 1, EOS = 2, UNK = 0, add_bos = 1,
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

/* Whatever path names: a GGUF file (its tokenizer.* metadata only: the architecture need not be
 * one specdec runs, and the weights are not read), a Hugging Face model directory (its
 * tokenizer.json), a tokenizer.json (both with sd_tokenizer_load_hf_config applied from their
 * directory), or else a llama2.c tokenizer.bin, its vocabulary size counted from the file. */
sd_status sd_tokenizer_load(const char *path, sd_tokenizer **out);

void sd_tokenizer_free(sd_tokenizer *t); /* NULL is fine */

sd_tokenizer_kind sd_tokenizer_kind_of(const sd_tokenizer *t);
int sd_tokenizer_n_vocab(const sd_tokenizer *t);
int32_t sd_tokenizer_bos(const sd_tokenizer *t); /* -1 when none */
int32_t sd_tokenizer_eos(const sd_tokenizer *t);
int sd_tokenizer_add_bos(const sd_tokenizer *t);

/* Raw piece text of id (e.g. "▁the", "<0x0A>"), NULL if out of range. */
const char *sd_tokenizer_piece(const sd_tokenizer *t, int32_t id, size_t *len);
int sd_tokenizer_token_type(const sd_tokenizer *t, int32_t id); /* SD_TOKEN_*, -1 if out of range */

/* Encodes len bytes of text as llama.cpp's llama_tokenize(add_special, parse_special) does.
 * add_bos prepends BOS when the vocab has one. Special tokens are split out of the text first,
 * longest first: user-defined ones always, control and unknown ones (e.g. "<|im_start|>",
 * "<s>") only when parse_special; otherwise their text is encoded like any other text.
 * The text between them: for BPE vocabs, the pre-tokenizer, then merges by rank (ties
 * leftmost), as llama.cpp's BPE tokenizer and HF's for tokenizer.json; for SPM vocabs, spaces
 * escaped to U+2581, a leading U+2581 before the text at the start and after each special
 * token when add_space_prefix, merges by best score (ties: leftmost), byte fallback ("<0xXX>",
 * else the unknown token). Writes at most cap ids; *n_out receives the full count even when
 * it exceeds cap (then SD_ERR_INVALID_ARG is returned and out holds the first cap ids; out
 * may be NULL with cap 0 to count). Safe to call from several threads. */
sd_status sd_tokenizer_tokenize(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                int parse_special, int32_t *out, int cap, int *n_out);
/* sd_tokenizer_tokenize into a malloc'd array of exactly the ids (*ids; NULL when there are none
 * or on error; the caller frees it). */
sd_status sd_tokenizer_tokenize_alloc(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                      int parse_special, int32_t **ids, int *n_ids);
/* A byte range [off, off + len) of a text. */
typedef struct {
    size_t off, len;
} sd_tok_span;
/* sd_tokenizer_tokenize_alloc with parse_special, except that a control or unknown token is
 * recognised only where none of its bytes lies in one of the n_plain spans (ascending, not
 * overlapping): written inside a span it is text. A chat prompt passes its messages' text as the
 * spans, so that only the template's own markers are special. User-defined tokens are split out
 * everywhere, as always. */
sd_status sd_tokenizer_tokenize_outside(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                                        const sd_tok_span *plain, int n_plain, int32_t **ids, int *n_ids);
/* sd_tokenizer_tokenize with parse_special off: prompt text is always plain text. */
sd_status sd_tokenizer_encode(const sd_tokenizer *t, const char *text, size_t len, int add_bos,
                              int32_t *out, int cap, int *n_out);

/* End of generation, as llama.cpp decides it: EOS; the ids a GGUF names in
 * tokenizer.ggml.eot_token_id, eom_token_id, fim_pad/fim_rep/fim_sep_token_id (when absent,
 * found by their text: "<|eot_id|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>",
 * "<|file_sep|>", ...); every token whose text is one of "<|eot_id|>", "<|im_end|>", "<|end|>",
 * "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
 * "<end_of_utterance>" (those become control tokens); and, for Hugging Face files, the ids
 * that sd_tokenizer_apply_hf_config adds. Llama 3 instruct: <|eot_id|>, <|eom_id|>,
 * <|end_of_text|>; Qwen2.5/3: <|im_end|>, <|endoftext|> and the FIM pad/repo/file-separator
 * tokens. A generator stops after emitting any of them. */
int sd_tokenizer_is_eog(const sd_tokenizer *t, int32_t id);
/* The end-of-generation ids (ascending) into *ids (owned by t; never NULL, even for none);
 * returns their count. */
int sd_tokenizer_eog(const sd_tokenizer *t, const int32_t **ids);

/* The model's chat template (GGUF tokenizer.chat_template, or chat_template from
 * tokenizer_config.json through sd_tokenizer_apply_hf_config): NUL-terminated, owned by t;
 * NULL when there is none. *len (may be NULL) receives its length. */
const char *sd_tokenizer_chat_template(const sd_tokenizer *t, size_t *len);

/* Applies one Hugging Face JSON file that sits beside tokenizer.json: generation_config.json's
 * "eos_token_id" (an id or a list of ids: each ends generation; the first becomes EOS and
 * "bos_token_id" BOS where the tokenizer has none; add_bos is not changed), tokenizer_config.json's
 * "eos_token" (a string or {"content": ...}: that token ends generation) and "chat_template"
 * (a string, or a list of {"name", "template"} whose "default" entry is taken). Other keys
 * are ignored. `what` names the file in error messages; on error t is unchanged. */
sd_status sd_tokenizer_apply_hf_config(sd_tokenizer *t, const char *json, size_t len, const char *what);
/* Applies dir/generation_config.json and dir/tokenizer_config.json, each when present. */
sd_status sd_tokenizer_load_hf_config(sd_tokenizer *t, const char *dir);

/* Text of token id as it should be printed after token prev (-1 at start): U+2581 -> ' ',
 * byte tokens -> the raw byte, control/unknown/unused tokens (BOS/EOS) -> "", user-defined
 * tokens verbatim, and the leading space that add_space_prefix introduced is dropped when
 * prev is BOS or -1; byte-level BPE pieces map each character back to its byte (GPT-2's
 * table), with nothing dropped. Writes up to cap bytes (no NUL) and returns the number written, or -1
 * on a bad id. A buffer of sd_tokenizer_max_piece_len() bytes always holds the whole text. */
int sd_tokenizer_decode(const sd_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);

/* Upper bound on the bytes sd_tokenizer_decode writes for any single token. */
int sd_tokenizer_max_piece_len(const sd_tokenizer *t);
/* The most bytes of text one token can stand for when encoding, so that a text of n bytes has at
 * least n / that many tokens: the longest text a token decodes to (a special token's own text),
 * or 0 when nothing bounds it (a vocabulary that fuses runs of unknown characters into one token,
 * or drops bytes it cannot spell). It walks the vocabulary: call it once. */
int sd_tokenizer_max_text_per_token(const sd_tokenizer *t);

/* Compatibility of a draft tokenizer with a target's: same piece encoding (byte-level BPE, or
 * SentencePiece-style for SPM and byte-fallback BPE alike, so a GGUF "llama" vocab pairs with
 * the tokenizer.json of the same model), same BOS/EOS, same piece
 * text for every id both have unless both mark it unused (padding, whatever each converter
 * called it), sizes equal or differing only by trailing ids that are unused/control padding
 * (Qwen2.5-7B's 152064 ids against 0.5B's 151936 for the same 151665 tokens). On mismatch
 * returns SD_ERR_MISMATCH with a message naming the first differing id and both texts. */
sd_status sd_tokenizer_check_compatible(const sd_tokenizer *target, const sd_tokenizer *draft);

#endif
