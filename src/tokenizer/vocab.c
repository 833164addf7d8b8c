/* Vocabulary store shared by every tokenizer kind: piece text, scores and types, the
 * piece -> id hash table, the byte-fallback table, accessors and the draft/target check. */
#include "tok_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a: pieces are short, so a simple byte hash is plenty */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

sd_status sd_tok_alloc(int n_vocab, size_t text_bytes, const char *what, sd_tokenizer **out) {
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > SD_TOK_MAX_VOCAB)
        return sd_fail(SD_ERR_FORMAT, "%s: vocabulary size %d is out of range (1..%d)", what,
                       n_vocab, SD_TOK_MAX_VOCAB);
    /* Offsets are 32-bit; no real vocabulary comes near 4 GiB of piece text. */
    if (text_bytes > UINT32_MAX - (size_t)n_vocab)
        return sd_fail(SD_ERR_FORMAT, "%s: %zu bytes of token text is too large", what, text_bytes);
    sd_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return sd_fail(SD_ERR_NOMEM, "%s: out of memory for the tokenizer", what);
    size_t n = (size_t)n_vocab;
    t->text_cap = text_bytes + n;
    t->text = malloc(t->text_cap);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->score = malloc(n * sizeof *t->score);
    t->type = malloc(n);
    if (!t->text || !t->off || !t->len || !t->score || !t->type) {
        sd_tokenizer_free(t);
        return sd_fail(SD_ERR_NOMEM, "%s: out of memory for %d tokens", what, n_vocab);
    }
    t->kind = SD_TOKENIZER_SPM;
    t->n_vocab = n_vocab;
    t->bos = t->eos = t->unk = t->pad = -1;
    t->add_bos = 1;
    t->add_space_prefix = 1;
    *out = t;
    return SD_OK;
}

int sd_tok_add_piece(sd_tokenizer *t, int32_t id, const char *bytes, size_t len, float score,
                     int type) {
    if (id < 0 || id >= t->n_vocab || len + 1 > t->text_cap - t->text_len) return -1;
    char *dst = t->text + t->text_len;
    if (len) memcpy(dst, bytes, len);
    dst[len] = '\0';
    t->off[id] = (uint32_t)t->text_len;
    t->len[id] = (uint32_t)len;
    t->score[id] = score;
    t->type[id] = (uint8_t)type;
    t->text_len += len + 1;
    return 0;
}

int sd_tok_byte_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                         : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

int sd_tok_infer_type(const sd_tokenizer *t, int32_t id, const char *s, size_t n) {
    if (id == t->unk) return SD_TOKEN_UNKNOWN;
    if (id == t->bos || id == t->eos || id == t->pad) return SD_TOKEN_CONTROL;
    if (sd_tok_byte_value(s, n) >= 0) return SD_TOKEN_BYTE;
    return SD_TOKEN_NORMAL;
}

int32_t sd_tok_lookup(const sd_tokenizer *t, const char *s, size_t n) {
    if (n > (size_t)t->max_piece_len) return -1;
    uint32_t h = hash_bytes(s, n);
    for (uint32_t i = h & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        const struct sd_tok_slot *e = &t->slots[i];
        if (e->id < 0) return -1;
        if (e->hash == h && t->len[e->id] == n && memcmp(t->text + t->off[e->id], s, n) == 0)
            return e->id;
    }
}

static int check_special(const sd_tokenizer *t, int32_t id, const char *name, const char *what) {
    if (id >= -1 && id < t->n_vocab) return 0;
    sd_fail(SD_ERR_FORMAT, "%s: %s id %d is out of range (vocabulary of %d)", what, name, (int)id,
            t->n_vocab);
    return -1;
}

sd_status sd_tok_finish(sd_tokenizer *t, const char *what) {
    if (check_special(t, t->bos, "BOS", what) || check_special(t, t->eos, "EOS", what) ||
        check_special(t, t->unk, "unknown", what) || check_special(t, t->pad, "padding", what))
        return SD_ERR_FORMAT;
    int max_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->off[id];
        int ty = t->type[id];
        if (ty < SD_TOKEN_NORMAL || ty > SD_TOKEN_BYTE)
            return sd_fail(SD_ERR_FORMAT, "%s: token %d has type %d (expected %d..%d)", what,
                           (int)id, ty, SD_TOKEN_NORMAL, SD_TOKEN_BYTE);
        /* decode turns byte tokens into raw bytes by parsing their text, so it must parse */
        if (ty == SD_TOKEN_BYTE && sd_tok_byte_value(s, t->len[id]) < 0) {
            char q[96];
            return sd_fail(SD_ERR_FORMAT, "%s: byte token %d is %s, not of the form <0xXX>", what,
                           (int)id, sd_tok_quote(s, t->len[id], q, sizeof q));
        }
        if ((int)t->len[id] > max_len) max_len = (int)t->len[id];
    }
    t->max_piece_len = max_len > 3 ? max_len : 3;

    uint32_t cap = 16;
    while (cap < 4u * (uint32_t)t->n_vocab) cap <<= 1;
    free(t->slots);
    t->slots = malloc((size_t)cap * sizeof *t->slots);
    if (!t->slots) return sd_fail(SD_ERR_NOMEM, "%s: out of memory for the token table", what);
    for (uint32_t i = 0; i < cap; i++) t->slots[i].id = -1;
    t->slot_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->off[id];
        uint32_t n = t->len[id];
        uint32_t h = hash_bytes(s, n);
        for (uint32_t i = h & t->slot_mask;; i = (i + 1) & t->slot_mask) {
            struct sd_tok_slot *e = &t->slots[i];
            /* A duplicated piece resolves to its last id, as llama.cpp's token_to_id map does. */
            if (e->id < 0 || (e->hash == h && t->len[e->id] == n &&
                              memcmp(t->text + t->off[e->id], s, n) == 0)) {
                e->hash = h;
                e->id = id;
                break;
            }
        }
    }

    /* Byte fallback looks up "<0xXX>" in upper-case hex, then the bare byte, like llama.cpp. */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = sd_tok_lookup(t, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = sd_tok_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id;
    }
    return SD_OK;
}

sd_status sd_tok_set_chat_template(sd_tokenizer *t, const char *s, size_t n, const char *what) {
    char *c = malloc(n + 1);
    if (!c) return sd_fail(SD_ERR_NOMEM, "%s: out of memory for a chat template of %zu bytes", what, n);
    if (n) memcpy(c, s, n);
    c[n] = '\0';
    free(t->chat_template);
    t->chat_template = c;
    t->chat_template_len = n;
    return SD_OK;
}

const char *sd_tok_quote(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    if (cap < 8) {
        if (cap) buf[0] = '\0';
        return buf;
    }
    buf[o++] = '\'';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        int k;
        if (c == '\n') k = snprintf(tmp, sizeof tmp, "\\n");
        else if (c == '\t') k = snprintf(tmp, sizeof tmp, "\\t");
        else if (c == '\'' || c == '\\') k = snprintf(tmp, sizeof tmp, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) k = snprintf(tmp, sizeof tmp, "\\x%02x", c);
        else {
            tmp[0] = (char)c;
            k = 1;
        }
        if (o + (size_t)k + 5 > cap) { /* room for "...'" and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, tmp, (size_t)k);
        o += (size_t)k;
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}

void sd_tokenizer_free(sd_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->slots);
    free(t->merges);
    free(t->special);
    free(t->trie);
    free(t->eog);
    free(t->chat_template);
    free(t);
}

sd_tokenizer_kind sd_tokenizer_kind_of(const sd_tokenizer *t) { return t->kind; }
int sd_tokenizer_n_vocab(const sd_tokenizer *t) { return t->n_vocab; }
int32_t sd_tokenizer_bos(const sd_tokenizer *t) { return t->bos; }
int32_t sd_tokenizer_eos(const sd_tokenizer *t) { return t->eos; }
int sd_tokenizer_add_bos(const sd_tokenizer *t) { return t->add_bos; }
int sd_tokenizer_max_piece_len(const sd_tokenizer *t) { return t->max_piece_len; }

int sd_tokenizer_max_text_per_token(const sd_tokenizer *t) {
    /* A token stands for the text it decodes to (after a token that is not BOS: nothing dropped),
     * a special token parsed from text for its own text, an unknown one for one character; text
     * the vocabulary cannot spell becomes byte or unknown tokens. Two cases break any bound:
     * fused unknown characters (one token for a run), and bytes a byte-level vocabulary lacks
     * with no unknown token to stand in (dropped). */
    if (t->kind == SD_TOKENIZER_BPE && !t->byte_level && t->fuse_unk && t->unk >= 0) {
        int all_bytes = t->byte_fallback; /* then no character is ever unknown */
        for (int b = 0; all_bytes && b < 256; b++) all_bytes = t->byte_tok[b] >= 0;
        if (!all_bytes) return 0;
    }
    if (t->kind == SD_TOKENIZER_BPE && t->byte_level && t->unk < 0)
        for (int b = 0; b < 256; b++)
            if (t->bl_tok[b] < 0) return 0;
    char *buf = malloc((size_t)t->max_piece_len + 1);
    if (!buf) return t->max_piece_len; /* the piece length bounds it too, more loosely */
    const int32_t prev = t->bos == 0 ? 1 : 0;
    int most = 4;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int n = sd_tokenizer_decode(t, prev, id, buf, (size_t)t->max_piece_len);
        const int ty = t->type[id];
        if (ty == SD_TOKEN_CONTROL || ty == SD_TOKEN_UNKNOWN || ty == SD_TOKEN_UNUSED)
            n = n > (int)t->len[id] ? n : (int)t->len[id];
        if (n > most) most = n;
    }
    free(buf);
    return most;
}

const char *sd_tokenizer_piece(const sd_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->len[id];
    return t->text + t->off[id];
}

int sd_tokenizer_token_type(const sd_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return -1;
    return t->type[id];
}

/* Ids past the shared range are harmless only if the model never emits them as text. */
static int is_padding(const sd_tokenizer *t, int32_t id) {
    return t->type[id] == SD_TOKEN_UNUSED || t->type[id] == SD_TOKEN_CONTROL;
}

sd_status sd_tokenizer_check_compatible(const sd_tokenizer *target, const sd_tokenizer *draft) {
    char qa[96], qb[96];
    if (!target || !draft) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer check: NULL tokenizer");
    /* What must agree is the text each id stands for. SentencePiece vocabularies and
     * SentencePiece-style BPE ones (HF tokenizer.json with byte fallback, a GGUF "llama"
     * conversion of the same model) write pieces alike, so their kinds may differ; byte-level
     * pieces encode text another way, so equal pieces there would mean different text. */
    if (target->byte_level != draft->byte_level)
        return sd_fail(SD_ERR_MISMATCH, "tokenizers differ in piece encoding: target %s, draft %s",
                       target->byte_level ? "byte-level BPE" : "SentencePiece-style",
                       draft->byte_level ? "byte-level BPE" : "SentencePiece-style");
    if (target->bos != draft->bos || target->eos != draft->eos)
        return sd_fail(SD_ERR_MISMATCH,
                       "tokenizers differ in special ids: target BOS %d EOS %d, draft BOS %d EOS %d",
                       (int)target->bos, (int)target->eos, (int)draft->bos, (int)draft->eos);
    int n = target->n_vocab < draft->n_vocab ? target->n_vocab : draft->n_vocab;
    for (int32_t id = 0; id < n; id++) {
        /* Padding rows (Qwen2.5-7B's 152064 against 0.5B's 151936 for 151665 tokens) are
         * named by each converter its own way; neither side can produce their text. */
        if (target->type[id] == SD_TOKEN_UNUSED && draft->type[id] == SD_TOKEN_UNUSED) continue;
        uint32_t la = target->len[id], lb = draft->len[id];
        const char *a = target->text + target->off[id];
        const char *b = draft->text + draft->off[id];
        if (la != lb || memcmp(a, b, la) != 0)
            return sd_fail(SD_ERR_MISMATCH, "tokenizers differ at id %d: target %s, draft %s",
                           (int)id, sd_tok_quote(a, la, qa, sizeof qa),
                           sd_tok_quote(b, lb, qb, sizeof qb));
    }
    const sd_tokenizer *big = target->n_vocab > draft->n_vocab ? target : draft;
    for (int32_t id = n; id < big->n_vocab; id++) {
        if (!is_padding(big, id))
            return sd_fail(SD_ERR_MISMATCH,
                           "tokenizers differ at id %d: only the %s has it (%s, type %d; "
                           "vocabularies of %d and %d may differ only by unused/control padding)",
                           (int)id, big == target ? "target" : "draft",
                           sd_tok_quote(big->text + big->off[id], big->len[id], qa, sizeof qa),
                           big->type[id], target->n_vocab, draft->n_vocab);
    }
    return SD_OK;
}
