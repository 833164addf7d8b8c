/* Private layout of sd_tokenizer, shared by the vocabulary store (vocab.c), the loaders
 * (load.c, hf_json.c), the SentencePiece coder (spm.c) and the rank BPE coder (bpe.c). */
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

    /* Tokens split out of the text before encoding, longest first: user-defined ones always,
     * control and unknown ones when parsing specials (llama.cpp's cache_special_tokens). */
    int32_t *special;
    int n_special;
    /* The special tokens' texts as a trie (first child, next sibling), so that one walk from each
     * position of a text finds every special token that starts there. prio: the index in special
     * of the token ending at the node, -1 for none. Node 0 is the root. */
    struct sd_tok_trie {
        int32_t child, sibling, prio;
        uint8_t byte;
    } *trie;
    int n_trie;
    uint8_t first_byte[32]; /* bit set: bytes that start a special token */
    int32_t *eog;        /* end-of-generation ids, ascending, no repeats */
    int n_eog;
    char *chat_template; /* NUL-terminated copy, NULL when the source has none */
    size_t chat_template_len;

    /* ---- SD_TOKENIZER_BPE only (bpe.c) ---- */
    /* (left id, right id) -> (rank, merged id), open addressing; rank -1 marks a free slot. */
    struct sd_bpe_merge {
        uint64_t key;
        int32_t rank, id;
    } *merges;
    uint32_t merge_mask;
    int n_merges;
    int byte_level;     /* pieces are GPT-2 byte-to-unicode text (GGUF "gpt2", HF ByteLevel) */
    int bl_prefix;      /* HF ByteLevel add_prefix_space: ' ' before text not starting with one */
    int escape_spaces;  /* HF Replace ' ' -> U+2581 (SentencePiece-style BPE) */
    int prefix_first;   /* HF Metaspace "first": the U+2581 prefix only where the text starts */
    int prefix_missing; /* HF Metaspace: no prefix when the text already starts with U+2581 */
    int byte_fallback;  /* unknown characters become <0xXX> tokens (HF byte_fallback) */
    int fuse_unk;       /* runs of unknown characters give one unknown token (HF fuse_unk) */
    int ignore_merges;  /* a word that is itself a token is not merged (llama3, HF) */
    uint8_t pre[8];     /* pre-tokenizer: sd_pre_step splits applied in order */
    int n_pre;
    int32_t bl_tok[256]; /* byte-level: token of each byte's stand-in character, -1 when none */
};

/* Longest text sd_tokenizer_tokenize takes: keeps code point and symbol indices, byte offsets
 * and token counts inside int32 (a text grows at most 3x when spaces are escaped). */
#define SD_TOK_MAX_TEXT ((size_t)1 << 28)

/* Where encoded ids go: the first cap are stored, all are counted. */
typedef struct {
    int32_t *out;
    int cap, count;
} sd_tok_sink;

static inline void sd_tok_emit(sd_tok_sink *k, int32_t id) {
    if (k->count < k->cap) k->out[k->count] = id;
    k->count++;
}

/* A piece of the text to encode: bytes [off, off + len) of text when id is -1, else the
 * special token id that those bytes spell. */
typedef struct {
    size_t off, len;
    int32_t id;
} sd_tok_frag;

/* The encoders of the text between special tokens (spm.c, bpe.c). */
sd_status sd_spm_encode_frags(const sd_tokenizer *t, const char *text, const sd_tok_frag *f, size_t n,
                              sd_tok_sink *k);
sd_status sd_bpe_encode_frags(const sd_tokenizer *t, const char *text, const sd_tok_frag *f, size_t n,
                              sd_tok_sink *k);

/* The merge queue of long words (mergeq.c): entries pop in (prio, pos) order, lowest first, the
 * order one binary heap of all of them would give, at a cost close to linear in the entries
 * when pushes mostly come in rising priority (as a trained vocabulary's merges do). Words shorter
 * than SD_MQ_MIN symbols keep the plain heap, which is cheaper to set up. */
#define SD_MQ_MIN 256
typedef struct {
    int32_t pos;
    uint32_t aux;
} sd_mq_entry;
typedef struct sd_mq sd_mq;
sd_mq *sd_mq_create(void);
void sd_mq_free(sd_mq *q); /* NULL is fine */
void sd_mq_reset(sd_mq *q); /* empties it for the next word, keeping its memory */
/* 0, or -1 when out of memory (the queue then stays failed until reset). */
int sd_mq_push(sd_mq *q, uint32_t prio, int32_t pos, uint32_t aux);
/* 1 with the lowest entry taken out, 0 when empty, -1 out of memory. */
int sd_mq_pop(sd_mq *q, uint32_t *prio, sd_mq_entry *out);
/* The position of the entry k places after the next one of the bucket being swept (-1: none or
 * not known): what to prefetch, since a sweep jumps across the word. */
int32_t sd_mq_ahead(const sd_mq *q, uint32_t k);

/* The merge of the pair (a, b) by rank, NULL when none (bpe.c). */
const struct sd_bpe_merge *sd_bpe_find_merge(const sd_tokenizer *t, int32_t a, int32_t b);

/* Ids a GGUF names for the end-of-generation roles llama.cpp knows (tokenizer.ggml.eot/eom/
 * fim_pad/fim_rep/fim_sep_token_id); -1 where the file names none, so the role is found by
 * the token's text instead, as llama.cpp does. */
typedef struct {
    int32_t eot, eom, fim_pad, fim_rep, fim_sep;
} sd_tok_eog_roles;

/* Last step of every loader, once pieces, types, BOS and EOS are final: the end-of-generation
 * set (llama.cpp's rules: the roles, tokens whose text is a known end-of-turn marker, which
 * become control tokens, and EOS) and the special-token list (encode.c). roles may be NULL. */
sd_status sd_tok_finish_special(sd_tokenizer *t, const sd_tok_eog_roles *roles, const char *what);


/* Replaces the chat template with a copy of s[0..n). */
sd_status sd_tok_set_chat_template(sd_tokenizer *t, const char *s, size_t n, const char *what);

/* Adds id to the end-of-generation set (valid ids only). */
sd_status sd_tok_add_eog(sd_tokenizer *t, int32_t id, const char *what);

/* Pre-tokenizer splits (bpe.c): each cuts every piece of text into matches and the gaps
 * between them, like one regex of llama.cpp's unicode_regex_split list. */
typedef enum {
    SD_PRE_GPT2 = 1,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    SD_PRE_LLAMA3,     /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|... */
    SD_PRE_QWEN2,      /* the llama3 pattern with \p{N} instead of \p{N}{1,3} */
    SD_PRE_CRLF,       /* [\r\n] */
    SD_PRE_WS_LETTERS, /* \s?\p{L}+ */
    SD_PRE_WS_PUNCT,   /* \s?\p{P}+ */
    SD_PRE_CJK,        /* [一-龥ࠀ-一가-퟿]+ */
    SD_PRE_DIGIT,      /* \p{N} */
    SD_PRE_DIGITS,     /* \p{N}+ */
    SD_PRE_DIGITS3,    /* [0-9][0-9][0-9] */
    SD_PRE_PUNCT_SYM,  /* [\p{P}\$\+<=>\^~\|]+ */
    SD_PRE_METASPACE,  /* HF Metaspace split: a piece starts at each U+2581 */
} sd_pre_step;

/* Sets t->pre from a GGUF tokenizer.ggml.pre name (NULL: llama.cpp's "default"); also
 * ignore_merges and the add_bos default of that family (*add_bos_default). */
sd_status sd_bpe_set_pre_name(sd_tokenizer *t, const char *name, size_t len, const char *what,
                              int *add_bos_default);
/* Writes into name (returned) a tokenizer.ggml.pre name that sd_bpe_set_pre_name maps back to t's steps and
 * ignore_merges; NULL when none does. */
const char *sd_bpe_pre_name(const sd_tokenizer *t, char name[32]);
/* Appends the pre-tokenizer step whose HF Split regex is exactly re; -1 when unknown. */
int sd_bpe_pre_from_regex(sd_tokenizer *t, const char *re);

/* Merge table: sd_bpe_merges_alloc once for at most n merges (after sd_tok_finish, as it
 * looks pieces up), then sd_bpe_merge_add in rank order. A merge whose parts or result are
 * not tokens can never fire and is skipped (returns 0); a repeated pair keeps its first
 * rank, like llama.cpp. Returns 1 when stored. */
sd_status sd_bpe_merges_alloc(sd_tokenizer *t, size_t n, const char *what);
int sd_bpe_merge_add(sd_tokenizer *t, const char *a, size_t na, const char *b, size_t nb);

/* After pieces, types, merges and flags are set: builds the byte-level table. */
sd_status sd_bpe_finish(sd_tokenizer *t, const char *what);

/* The byte-level half of sd_tokenizer_decode. */
int sd_bpe_decode_byte_level(const sd_tokenizer *t, int32_t id, char *buf, size_t cap);

/* The words BPE would merge for text (no user-defined token splitting): normalised text
 * cut by the pre-tokenizer, each passed to cb. For tests of the splitters. */
sd_status sd_bpe_pretokenize(const sd_tokenizer *t, const char *text, size_t len,
                             void (*cb)(const char *w, size_t n, void *u), void *u);

/* Unicode classes from unicode_data.c (generated): (first << 2) | class, sorted. */
extern const uint32_t sd_unicode_class_ranges[];
extern const int sd_unicode_class_n;

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
