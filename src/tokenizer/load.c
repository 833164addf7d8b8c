/* Tokenizer loaders: llama2.c tokenizer.bin and GGUF "llama" (SentencePiece) and "gpt2"
 * (byte-level BPE, set up by bpe.c) metadata.
 * Both produce the same canonical pieces ("▁the", "<s>") so vocabularies from either compare equal. */
#include "core/io.h"
#include "tok_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char SPACE_ESC[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 "▁" */

/* ---- llama2.c tokenizer.bin ---- */

static int32_t rd_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v); /* the format is little-endian, like every host we target */
    return v;
}

static float rd_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Walks the records once to validate every length and size the text store.
 * llama2.c's exporter replaced "▁" by ' ', so each space grows by 2 bytes on the way back. */
static sd_status scan_llama2c(const uint8_t *p, size_t len, int n, const char *what,
                              size_t *text_bytes, size_t *max_piece) {
    if (len < 4) return sd_fail(SD_ERR_FORMAT, "%s: truncated (%zu bytes, no header)", what, len);
    int32_t max_token_length = rd_i32(p);
    if (max_token_length < 0)
        return sd_fail(SD_ERR_FORMAT, "%s: negative max_token_length %d", what, (int)max_token_length);
    size_t pos = 4, total = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        if (len - pos < 8)
            return sd_fail(SD_ERR_FORMAT, "%s: truncated at token %d of %d (offset %zu of %zu)",
                           what, i, n, pos, len);
        float score = rd_f32(p + pos);
        int32_t l = rd_i32(p + pos + 4);
        pos += 8;
        if (isnan(score))
            return sd_fail(SD_ERR_FORMAT, "%s: token %d has a NaN score", what, i);
        if (l < 0)
            return sd_fail(SD_ERR_FORMAT, "%s: token %d has negative length %d", what, i, (int)l);
        if ((size_t)l > len - pos)
            return sd_fail(SD_ERR_FORMAT,
                           "%s: token %d has length %d but only %zu bytes remain (offset %zu)", what,
                           i, (int)l, len - pos, pos);
        size_t grown = (size_t)l;
        for (int32_t k = 0; k < l; k++)
            if (p[pos + (size_t)k] == ' ') grown += sizeof SPACE_ESC - 1;
        total += grown;
        if (grown > longest) longest = grown;
        pos += (size_t)l;
    }
    if (pos != len)
        return sd_fail(SD_ERR_FORMAT,
                       "%s: %zu bytes left after %d tokens (does vocab_size match this file?)",
                       what, len - pos, n);
    *text_bytes = total;
    *max_piece = longest;
    return SD_OK;
}

/* The number of records: the file does not store it, but each record gives its own length,
 * so walking them to the end of the file finds it. */
static sd_status count_llama2c(const uint8_t *p, size_t len, const char *what, int *n) {
    if (len < 4) return sd_fail(SD_ERR_FORMAT, "%s: truncated (%zu bytes, no header)", what, len);
    size_t pos = 4;
    int count = 0;
    while (pos < len) {
        int32_t l = len - pos >= 8 ? rd_i32(p + pos + 4) : -1;
        if (l < 0 || (size_t)l > len - pos - 8)
            return sd_fail(SD_ERR_FORMAT,
                           "%s: record %d at offset %zu does not fit the %zu-byte file",
                           what, count, pos, len);
        pos += 8 + (size_t)l;
        if (++count > SD_TOK_MAX_VOCAB)
            return sd_fail(SD_ERR_FORMAT, "%s: more than %d records", what, SD_TOK_MAX_VOCAB);
    }
    *n = count;
    return SD_OK;
}

sd_status sd_tokenizer_from_llama2c_buf(const void *buf, size_t len, int vocab_size,
                                        const char *what, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!what) what = "tokenizer.bin";
    if (!buf && len) return sd_fail(SD_ERR_INVALID_ARG, "%s: NULL buffer", what);
    const uint8_t *p = buf;
    if (vocab_size == 0) {
        sd_status cs = count_llama2c(p, len, what, &vocab_size);
        if (cs != SD_OK) return cs;
    }
    /* ids 0..2 are fixed by the format, so smaller vocabularies cannot be llama2.c ones */
    if (vocab_size < 3 || vocab_size > SD_TOK_MAX_VOCAB)
        return sd_fail(SD_ERR_INVALID_ARG, "%s: vocab_size %d is out of range (3..%d)", what,
                       vocab_size, SD_TOK_MAX_VOCAB);
    size_t text_bytes = 0, max_piece = 0;
    sd_status st = scan_llama2c(p, len, vocab_size, what, &text_bytes, &max_piece);
    if (st != SD_OK) return st;

    sd_tokenizer *t;
    st = sd_tok_alloc(vocab_size, text_bytes, what, &t);
    if (st != SD_OK) return st;
    char *scratch = malloc(max_piece + 1);
    if (!scratch) {
        sd_tokenizer_free(t);
        return sd_fail(SD_ERR_NOMEM, "%s: out of memory", what);
    }
    t->unk = 0;
    t->bos = 1;
    t->eos = 2;
    size_t pos = 4;
    for (int32_t id = 0; id < vocab_size; id++) {
        float score = rd_f32(p + pos);
        size_t l = (size_t)rd_i32(p + pos + 4);
        const char *src = (const char *)p + pos + 8;
        pos += 8 + l;
        size_t n = 0;
        for (size_t k = 0; k < l; k++) {
            if (src[k] == ' ') {
                memcpy(scratch + n, SPACE_ESC, sizeof SPACE_ESC);
                n += sizeof SPACE_ESC;
            } else {
                scratch[n++] = src[k];
            }
        }
        char *s = scratch;
        /* llama2.c's exporter wrote BOS/EOS as "\n<s>\n" and "\n</s>\n"; GGUF has "<s>". */
        if ((id == t->bos || id == t->eos) && n > 2 && s[0] == '\n' && s[n - 1] == '\n') {
            s++;
            n -= 2;
        }
        int type = sd_tok_infer_type(t, id, s, n);
        if (sd_tok_add_piece(t, id, s, n, score, type) != 0) {
            free(scratch);
            sd_tokenizer_free(t);
            return sd_fail(SD_ERR_FORMAT, "%s: token text store overflow at id %d", what, (int)id);
        }
    }
    free(scratch);
    st = sd_tok_finish(t, what);
    if (st == SD_OK) st = sd_tok_finish_special(t, NULL, what);
    if (st != SD_OK) {
        sd_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

sd_status sd_tokenizer_load_llama2c(const char *path, int vocab_size, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: path is NULL");
    char *buf;
    size_t len;
    sd_status st = sd_file_read(path, (size_t)1 << 30, &buf, &len);
    if (st == SD_OK) st = sd_tokenizer_from_llama2c_buf(buf, len, vocab_size, path, out);
    free(buf);
    return st;
}

/* ---- GGUF ---- */

static const char K_MODEL[] = "tokenizer.ggml.model";
static const char K_TOKENS[] = "tokenizer.ggml.tokens";
static const char K_SCORES[] = "tokenizer.ggml.scores";
static const char K_TYPES[] = "tokenizer.ggml.token_type";

static int is_int_type(sd_gguf_vtype ty) {
    return ty <= SD_GGUF_INT32 || ty == SD_GGUF_UINT64 || ty == SD_GGUF_INT64;
}

static int is_signed_type(sd_gguf_vtype ty) {
    return ty == SD_GGUF_INT8 || ty == SD_GGUF_INT16 || ty == SD_GGUF_INT32 || ty == SD_GGUF_INT64;
}

/* Optional special-token id. Converters write "none" as -1 stored in a uint32
 * (4294967295), so all-ones and -1 both mean absent; anything else must be a valid id. */
static sd_status get_special_id(const sd_gguf *g, const char *key, int32_t def, int n_vocab,
                                const char *what, int32_t *out) {
    const sd_gguf_kv *kv = sd_gguf_find_kv(g, key);
    if (!kv) {
        *out = def < n_vocab ? def : -1;
        return SD_OK;
    }
    if (!is_int_type(kv->type))
        return sd_fail(SD_ERR_FORMAT, "%s: %s has value type %d, expected an integer", what, key,
                       (int)kv->type);
    if (is_signed_type(kv->type)) {
        int64_t v = kv->v.i64;
        if (v == -1) {
            *out = -1;
            return SD_OK;
        }
        if (v < 0 || v >= n_vocab)
            return sd_fail(SD_ERR_FORMAT, "%s: %s = %lld is out of range (vocabulary of %d)", what,
                           key, (long long)v, n_vocab);
        *out = (int32_t)v;
        return SD_OK;
    }
    uint64_t v = kv->v.u64;
    if (v == UINT32_MAX || v == UINT64_MAX) {
        *out = -1;
        return SD_OK;
    }
    if (v >= (uint64_t)n_vocab)
        return sd_fail(SD_ERR_FORMAT, "%s: %s = %llu is out of range (vocabulary of %d)", what, key,
                       (unsigned long long)v, n_vocab);
    *out = (int32_t)v;
    return SD_OK;
}

static sd_status get_flag(const sd_gguf *g, const char *key, int def, const char *what, int *out) {
    const sd_gguf_kv *kv = sd_gguf_find_kv(g, key);
    if (!kv) {
        *out = def;
        return SD_OK;
    }
    if (kv->type != SD_GGUF_BOOL)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has value type %d, expected a bool", what, key,
                       (int)kv->type);
    *out = kv->v.u64 != 0;
    return SD_OK;
}

/* Optional per-token array: NULL when absent, else it must hold one elem per token. */
static sd_status get_token_array(const sd_gguf *g, const char *key, sd_gguf_vtype elem,
                                 uint64_t n, const char *what, const uint8_t **data) {
    *data = NULL;
    const sd_gguf_kv *kv = sd_gguf_find_kv(g, key);
    if (!kv) return SD_OK;
    if (kv->type != SD_GGUF_ARRAY || kv->arr_type != elem)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has type %d (element type %d), expected an array of %d",
                       what, key, (int)kv->type, (int)kv->arr_type, (int)elem);
    if (kv->arr_n != n)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has %llu entries but %s has %llu", what, key,
                       (unsigned long long)kv->arr_n, K_TOKENS, (unsigned long long)n);
    if (n && !kv->arr_data)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has no data", what, key);
    *data = kv->arr_data;
    return SD_OK;
}

/* GGUF "gpt2": byte-level pieces, tokenizer.ggml.merges (required, "left right" in rank
 * order) and the pre-tokenizer named by tokenizer.ggml.pre, whose family also decides
 * add_bos when the file does not. */
/* specdec's own "llama" + specdec.tokenizer.bpe form of an HF BPE over U+2581-escaped text
 * (written by sd_tokenizer_write_gguf): its flags and pre-tokenizer steps. */
static sd_status escaped_bpe_from_gguf(const sd_gguf *g, sd_tokenizer *t, const char *what) {
    static const char *const keys[] = {"specdec.tokenizer.prefix_first", "specdec.tokenizer.prefix_missing",
                                       "specdec.tokenizer.byte_fallback", "specdec.tokenizer.fuse_unk",
                                       "specdec.tokenizer.ignore_merges"};
    int *flags[] = {&t->prefix_first, &t->prefix_missing, &t->byte_fallback, &t->fuse_unk, &t->ignore_merges};
    sd_status st;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if ((st = get_flag(g, keys[i], 0, what, flags[i])) != SD_OK) return st;
    t->escape_spaces = 1;
    const sd_gguf_kv *ps = sd_gguf_find_kv(g, "specdec.tokenizer.pre_steps");
    if (ps) {
        if (ps->type != SD_GGUF_ARRAY || ps->arr_type != SD_GGUF_INT32 || ps->arr_n > sizeof t->pre ||
            (ps->arr_n && !ps->arr_data))
            return sd_fail(SD_ERR_FORMAT, "%s: specdec.tokenizer.pre_steps is not an array of at most %zu int32",
                           what, sizeof t->pre);
        for (uint64_t i = 0; i < ps->arr_n; i++) {
            int32_t v;
            memcpy(&v, (const uint8_t *)ps->arr_data + i * 4, 4);
            if (v < SD_PRE_GPT2 || v > SD_PRE_METASPACE)
                return sd_fail(SD_ERR_FORMAT, "%s: specdec.tokenizer.pre_steps[%llu] = %d is not a step", what,
                               (unsigned long long)i, (int)v);
            t->pre[t->n_pre++] = (uint8_t)v;
        }
    }
    return SD_OK;
}

static sd_status bpe_from_gguf(const sd_gguf *g, sd_tokenizer *t, int byte_level, const char *what) {
    sd_status st;
    if (byte_level) {
        const sd_gguf_kv *pre = sd_gguf_find_kv(g, "tokenizer.ggml.pre");
        if (pre && pre->type != SD_GGUF_STRING)
            return sd_fail(SD_ERR_FORMAT, "%s: tokenizer.ggml.pre has value type %d, expected a string",
                           what, (int)pre->type);
        int add_bos = 0;
        st = sd_bpe_set_pre_name(t, pre ? pre->v.str.ptr : NULL, pre ? (size_t)pre->v.str.len : 0, what, &add_bos);
        if (st != SD_OK) return st;
        if (!sd_gguf_find_kv(g, "tokenizer.ggml.add_bos_token")) t->add_bos = add_bos;
        t->add_space_prefix = 0; /* llama.cpp's BPE never adds one */
        t->byte_level = 1;
    } else if ((st = escaped_bpe_from_gguf(g, t, what)) != SD_OK) {
        return st;
    }
    const sd_gguf_kv *mg = sd_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (!mg) return sd_fail(SD_ERR_FORMAT, "%s: missing key tokenizer.ggml.merges (a gpt2 vocabulary needs merges)", what);
    if (mg->type != SD_GGUF_ARRAY || mg->arr_type != SD_GGUF_STRING || (mg->arr_n && !mg->arr_strs))
        return sd_fail(SD_ERR_FORMAT, "%s: tokenizer.ggml.merges is not an array of strings", what);
    if ((st = sd_bpe_merges_alloc(t, (size_t)mg->arr_n, what)) != SD_OK) return st;
    for (uint64_t i = 0; i < mg->arr_n; i++) {
        const char *m = mg->arr_strs[i].ptr;
        size_t n = (size_t)mg->arr_strs[i].len;
        /* split at the first space after the first byte, as llama.cpp does */
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) {
            char q[96];
            return sd_fail(SD_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] = %s is not \"left right\"",
                           what, (unsigned long long)i, sd_tok_quote(m, n, q, sizeof q));
        }
        sd_bpe_merge_add(t, m, (size_t)(sp - m), sp + 1, n - (size_t)(sp - m) - 1);
    }
    return sd_bpe_finish(t, what);
}

/* The end-of-generation roles a GGUF names by id (-1 for those it leaves out). */
static sd_status eog_roles_from_gguf(const sd_gguf *g, int n_vocab, const char *what, sd_tok_eog_roles *r) {
    static const char *const keys[] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                                       "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id"};
    int32_t *ids[] = {&r->eot, &r->eom, &r->fim_pad, &r->fim_rep, &r->fim_sep};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        sd_status st = get_special_id(g, keys[i], -1, n_vocab, what, ids[i]);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

/* tokenizer.chat_template, kept for the chat module (sd_tokenizer_chat_template). */
static sd_status chat_template_from_gguf(const sd_gguf *g, sd_tokenizer *t, const char *what) {
    const sd_gguf_kv *kv = sd_gguf_find_kv(g, "tokenizer.chat_template");
    if (!kv) return SD_OK;
    if (kv->type != SD_GGUF_STRING)
        return sd_fail(SD_ERR_FORMAT, "%s: tokenizer.chat_template has value type %d, expected a string", what,
                       (int)kv->type);
    return sd_tok_set_chat_template(t, kv->v.str.ptr, (size_t)kv->v.str.len, what);
}

sd_status sd_tokenizer_from_gguf(const sd_gguf *g, const char *what, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!what) what = "gguf";
    if (!g) return sd_fail(SD_ERR_INVALID_ARG, "%s: NULL gguf", what);

    const sd_gguf_kv *kv = sd_gguf_find_kv(g, K_MODEL);
    if (!kv) return sd_fail(SD_ERR_FORMAT, "%s: missing key %s (no tokenizer in this file)", what, K_MODEL);
    if (kv->type != SD_GGUF_STRING)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has value type %d, expected a string", what, K_MODEL,
                       (int)kv->type);
    const int is_bpe = sd_str_eq(kv->v.str, "gpt2");
    if (!sd_str_eq(kv->v.str, "llama") && !is_bpe) {
        char q[96];
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "%s: %s is %s; only \"llama\" (SentencePiece) and \"gpt2\" (byte-level BPE) "
                       "vocabularies are supported",
                       what, K_MODEL, sd_tok_quote(kv->v.str.ptr, (size_t)kv->v.str.len, q, sizeof q));
    }

    const sd_gguf_kv *toks = sd_gguf_find_kv(g, K_TOKENS);
    if (!toks) return sd_fail(SD_ERR_FORMAT, "%s: missing key %s", what, K_TOKENS);
    if (toks->type != SD_GGUF_ARRAY || toks->arr_type != SD_GGUF_STRING || (toks->arr_n && !toks->arr_strs))
        return sd_fail(SD_ERR_FORMAT, "%s: %s is not an array of strings", what, K_TOKENS);
    uint64_t n = toks->arr_n;
    if (n == 0 || n > SD_TOK_MAX_VOCAB)
        return sd_fail(SD_ERR_FORMAT, "%s: %s has %llu entries (expected 1..%d)", what, K_TOKENS,
                       (unsigned long long)n, SD_TOK_MAX_VOCAB);
    int n_vocab = (int)n;
    size_t text_bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = toks->arr_strs[i].len;
        if (l > UINT32_MAX || text_bytes > (size_t)UINT32_MAX)
            return sd_fail(SD_ERR_FORMAT, "%s: %s[%llu] is %llu bytes long (too long)", what,
                           K_TOKENS, (unsigned long long)i, (unsigned long long)l);
        text_bytes += (size_t)l;
    }

    const uint8_t *scores, *types;
    sd_status st = get_token_array(g, K_SCORES, SD_GGUF_FLOAT32, n, what, &scores);
    if (st == SD_OK) st = get_token_array(g, K_TYPES, SD_GGUF_INT32, n, what, &types);
    if (st != SD_OK) return st;

    int32_t bos, eos, unk, pad;
    int add_bos = 1, add_space_prefix = 1;
    /* defaults are llama.cpp's for "llama" vocabularies; a "gpt2" one has none (llama.cpp's
     * id 11 there is a leftover that names an ordinary piece) */
    st = get_special_id(g, "tokenizer.ggml.bos_token_id", is_bpe ? -1 : 1, n_vocab, what, &bos);
    if (st == SD_OK) st = get_special_id(g, "tokenizer.ggml.eos_token_id", is_bpe ? -1 : 2, n_vocab, what, &eos);
    if (st == SD_OK) st = get_special_id(g, "tokenizer.ggml.unknown_token_id", is_bpe ? -1 : 0, n_vocab, what, &unk);
    if (st == SD_OK) st = get_special_id(g, "tokenizer.ggml.padding_token_id", -1, n_vocab, what, &pad);
    if (st == SD_OK) st = get_flag(g, "tokenizer.ggml.add_bos_token", 1, what, &add_bos);
    if (st == SD_OK) st = get_flag(g, "tokenizer.ggml.add_space_prefix", 1, what, &add_space_prefix);
    if (st != SD_OK) return st;

    sd_tokenizer *t;
    st = sd_tok_alloc(n_vocab, text_bytes, what, &t);
    if (st != SD_OK) return st;
    t->bos = bos;
    t->eos = eos;
    t->unk = unk;
    t->pad = pad;
    t->add_bos = add_bos;
    t->add_space_prefix = add_space_prefix;
    for (int32_t id = 0; id < n_vocab; id++) {
        sd_str s = toks->arr_strs[id];
        float score = 0.0f;
        if (scores) memcpy(&score, scores + (size_t)id * 4, 4);
        if (isnan(score)) {
            sd_tokenizer_free(t);
            return sd_fail(SD_ERR_FORMAT, "%s: %s[%d] is NaN", what, K_SCORES, (int)id);
        }
        int type;
        if (types) {
            int32_t v;
            memcpy(&v, types + (size_t)id * 4, 4);
            if (v < SD_TOKEN_NORMAL || v > SD_TOKEN_BYTE) {
                sd_tokenizer_free(t);
                return sd_fail(SD_ERR_FORMAT, "%s: %s[%d] = %d is not a token type (%d..%d)", what,
                               K_TYPES, (int)id, (int)v, SD_TOKEN_NORMAL, SD_TOKEN_BYTE);
            }
            type = v;
        } else {
            type = sd_tok_infer_type(t, id, s.ptr, (size_t)s.len);
        }
        if (sd_tok_add_piece(t, id, s.ptr, (size_t)s.len, score, type) != 0) {
            sd_tokenizer_free(t);
            return sd_fail(SD_ERR_FORMAT, "%s: token text store overflow at id %d", what, (int)id);
        }
    }
    /* a "llama" vocabulary that specdec wrote from an HF BPE (see gguf_write.c) */
    int escaped_bpe = 0;
    if (!is_bpe && (st = get_flag(g, "specdec.tokenizer.bpe", 0, what, &escaped_bpe)) != SD_OK) {
        sd_tokenizer_free(t);
        return st;
    }
    st = sd_tok_finish(t, what);
    if (st == SD_OK && (is_bpe || escaped_bpe)) st = bpe_from_gguf(g, t, is_bpe, what);
    sd_tok_eog_roles roles;
    if (st == SD_OK) st = eog_roles_from_gguf(g, n_vocab, what, &roles);
    if (st == SD_OK) st = sd_tok_finish_special(t, &roles, what);
    if (st == SD_OK) st = chat_template_from_gguf(g, t, what);
    if (st != SD_OK) {
        sd_tokenizer_free(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

/* ---- any tokenizer file ----------------------------------------------------------------- */

/* A GGUF's tokenizer without its weights: the file is mapped, and the parser reads only the
 * header and metadata pages of it (it checks tensor extents against the size, not the data). */
static sd_status from_gguf_file(const char *path, sd_tokenizer **out) {
    void *map;
    size_t len;
    sd_status s = sd_file_map(path, &map, &len);
    if (s != SD_OK) return s;
    sd_gguf *g = NULL;
    s = sd_gguf_parse(map, len, path, &g);
    if (s == SD_OK) s = sd_tokenizer_from_gguf(g, path, out);
    sd_gguf_free(g);
    sd_file_unmap(map, len);
    return s;
}

/* tokenizer.json with the HF files beside it (generation_config.json, tokenizer_config.json). */
static sd_status from_hf_json_file(const char *json, const char *dir, sd_tokenizer **out) {
    sd_status s = sd_tokenizer_load_hf_json(json, -1, -1, out);
    if (s == SD_OK && (s = sd_tokenizer_load_hf_config(*out, dir)) != SD_OK) {
        sd_tokenizer_free(*out);
        *out = NULL;
    }
    return s;
}

sd_status sd_tokenizer_load(const char *path, sd_tokenizer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (!path) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer: path is NULL");
    char buf[4096];
    struct stat st;
    if (stat(path, &st) != 0) return sd_fail(SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (snprintf(buf, sizeof buf, "%s/tokenizer.json", path) >= (int)sizeof buf)
            return sd_fail(SD_ERR_INVALID_ARG, "%s: path too long", path);
        if (access(buf, R_OK) != 0)
            return sd_fail(SD_ERR_IO, "%s: a directory without tokenizer.json (not a Hugging Face model)", path);
        return from_hf_json_file(buf, path, out);
    }
    /* the first bytes tell GGUF and JSON apart; anything else is read as tokenizer.bin */
    unsigned char head[16] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return sd_fail(SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    if (got >= 4 && memcmp(head, "GGUF", 4) == 0) return from_gguf_file(path, out);
    size_t i = 0;
    while (i < got && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) i++;
    if (i < got && head[i] == '{') {
        snprintf(buf, sizeof buf, "%s", path);
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
        else snprintf(buf, sizeof buf, ".");
        return from_hf_json_file(path, buf, out);
    }
    sd_status s = sd_tokenizer_load_llama2c(path, 0, out);
    if (s == SD_ERR_FORMAT) {
        char why[512];
        const char *e = sd_last_error();
        size_t pl = strlen(path);
        if (!strncmp(e, path, pl) && e[pl] == ':' && e[pl + 1] == ' ') e += pl + 2; /* said once is enough */
        snprintf(why, sizeof why, "%s", e);
        s = sd_fail(SD_ERR_FORMAT,
                    "%s: not a GGUF file, a tokenizer.json or a llama2.c tokenizer.bin (read as tokenizer.bin: %s; "
                    "for a llama2.c checkpoint give its tokenizer.bin)",
                    path, why);
    }
    return s;
}
