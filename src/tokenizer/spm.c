/* SentencePiece BPE encoding and decoding, matching llama.cpp's llm_tokenizer_spm:
 * escape spaces, split into UTF-8 characters, merge best-scoring pairs, byte fallback. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
    uint32_t off, n;    /* bytes of the escaped text; n == 0 once merged into its left */
} spm_sym;

/* A queued pair. key orders the queue the way llama.cpp's comparator does (higher score
 * first, ties to the leftmost pair) as one integer, so the heap compares without branches
 * on floats: the score's bits made monotone in the high half, ~left in the low half. */
typedef struct {
    uint64_t key;
    int32_t right;
    uint32_t size; /* n(left) + n(right) when queued: a stale entry no longer matches */
} spm_bigram;

typedef struct {
    const sd_tokenizer *t;
    const char *text;
    spm_sym *sym;
    spm_bigram *heap;
    size_t n_heap;
} spm_state;

static uint64_t bigram_key(float score, int32_t left) {
    uint32_t bits;
    score += 0.0f; /* -0.0 -> +0.0: they compare equal as floats and must tie here too */
    memcpy(&bits, &score, sizeof bits);
    bits = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u; /* scores are never NaN */
    return (uint64_t)bits << 32 | (uint32_t)~(uint32_t)left;
}

static int32_t bigram_left(const spm_bigram *b) { return (int32_t) ~(uint32_t)b->key; }

static void heap_push(spm_state *s, spm_bigram b) {
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (s->heap[parent].key >= b.key) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static spm_bigram heap_pop(spm_state *s) {
    spm_bigram top = s->heap[0];
    spm_bigram last = s->heap[--s->n_heap];
    size_t n = s->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        c += c + 1 < n && s->heap[c + 1].key > s->heap[c].key;
        if (s->heap[c].key <= last.key) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Queues the pair (left, right) if their concatenation is a piece. Any piece type counts,
 * as in llama.cpp (which has a "do we need to support is_unused?" note here too). */
static void try_add_bigram(spm_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const spm_sym *l = &s->sym[left];
    uint32_t size = l->n + s->sym[right].n;
    int32_t id = sd_tok_lookup(s->t, s->text + l->off, size);
    if (id < 0) return;
    spm_bigram b = {bigram_key(s->t->score[id], left), right, size};
    heap_push(s, b);
}

static void merge_at(spm_state *s, int32_t left, int32_t right) {
    spm_sym *l = &s->sym[left], *r = &s->sym[right];
    l->n += r->n;
    r->n = 0;
    l->next = r->next;
    if (r->next >= 0) s->sym[r->next].prev = left;
}

/* The pair (left, right) into the merge queue when it makes a piece: the priority is the score
 * turned so that the best pops first (bigram_key's high half, inverted), the entry remembers the
 * pair's length to tell when it is stale. */
static int mq_try(spm_state *s, sd_mq *q, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const spm_sym *l = &s->sym[left];
    const uint32_t size = l->n + s->sym[right].n;
    const int32_t id = sd_tok_lookup(s->t, s->text + l->off, size);
    if (id < 0) return 0;
    return sd_mq_push(q, ~(uint32_t)(bigram_key(s->t->score[id], 0) >> 32), left, size);
}

/* The heap loop's merges for a long text, in the same order, by the merge queue. */
static sd_status merge_long(spm_state *s, size_t n_sym) {
    sd_mq *q = sd_mq_create();
    int rc = q ? 0 : -1;
    for (size_t i = 1; rc == 0 && i < n_sym; i++) rc = mq_try(s, q, (int32_t)i - 1, (int32_t)i);
    uint32_t prio;
    sd_mq_entry e;
    while (rc == 0 && (rc = sd_mq_pop(q, &prio, &e)) == 1) {
        rc = 0;
        const int32_t ahead = sd_mq_ahead(q, 8); /* a sweep jumps across the text */
        if (ahead >= 0) __builtin_prefetch(&s->sym[ahead]);
        const int32_t left = e.pos, right = s->sym[left].next;
        if (s->sym[left].n == 0 || right < 0 || s->sym[left].n + s->sym[right].n != e.aux) continue; /* stale */
        merge_at(s, left, right);
        rc = mq_try(s, q, s->sym[left].prev, left);
        if (rc == 0) rc = mq_try(s, q, left, s->sym[left].next);
    }
    sd_mq_free(q);
    return rc == 0 ? SD_OK : sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %zu symbols", n_sym);
}

/* Length of the character starting at p (n bytes left): the lead byte's high nibble gives
 * the length, as llama.cpp's unicode_len_utf8 does, but only if that many bytes remain and
 * the rest are continuation bytes; otherwise the byte stands alone. llama.cpp skips that
 * check, so a stray lead byte swallows what follows, e.g. the "▁" escaping a following
 * space, which then decodes as "▁" instead of ' '. Valid UTF-8 splits identically. */
static size_t char_len(const unsigned char *p, size_t n) {
    static const uint8_t by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t len = by_nibble[p[0] >> 4];
    if (len > n) return 1;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 1;
    return len;
}

/* Encodes one piece of text (no special tokens in it) into k, with the U+2581 prefix when
 * prefix is set. */
static sd_status encode_piece(const sd_tokenizer *t, const char *text, size_t len, int prefix_space,
                              sd_tok_sink *k) {
    static const char esc[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 "▁" */
    size_t n_space = 0;
    for (size_t i = 0; i < len; i++) n_space += text[i] == ' ';
    size_t prefix = prefix_space ? sizeof esc : 0;
    size_t n_text = prefix + len + n_space * (sizeof esc - 1);

    spm_state s = {t, NULL, NULL, NULL, 0};
    char *buf = malloc(n_text);
    if (!buf) return sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %zu bytes", n_text);
    size_t o = 0;
    if (prefix) {
        memcpy(buf, esc, sizeof esc);
        o = sizeof esc;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + o, esc, sizeof esc);
            o += sizeof esc;
        } else {
            buf[o++] = text[i];
        }
    }
    s.text = buf;

    const unsigned char *ubuf = (const unsigned char *)buf;
    size_t n_sym = 0;
    for (size_t i = 0; i < n_text; n_sym++) i += char_len(ubuf + i, n_text - i);
    s.sym = malloc(n_sym * sizeof *s.sym);
    sd_status st = SD_OK;
    if (!s.sym) {
        st = sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %zu symbols", n_sym);
        goto done;
    }
    size_t pos = 0;
    for (size_t i = 0; i < n_sym; i++) {
        size_t n = char_len(ubuf + pos, n_text - pos);
        s.sym[i].off = (uint32_t)pos;
        s.sym[i].n = (uint32_t)n;
        s.sym[i].prev = (int32_t)i - 1;
        s.sym[i].next = i + 1 < n_sym ? (int32_t)i + 1 : -1;
        pos += n;
    }
    if (n_sym >= SD_MQ_MIN) {
        st = merge_long(&s, n_sym);
        if (st != SD_OK) goto done;
    } else {
        /* Each merge queues at most two new pairs on top of the n_sym - 1 initial ones. */
        s.heap = malloc(3 * n_sym * sizeof *s.heap);
        if (!s.heap) {
            st = sd_fail(SD_ERR_NOMEM, "tokenizer encode: out of memory for %zu symbols", n_sym);
            goto done;
        }
        for (size_t i = 1; i < n_sym; i++) try_add_bigram(&s, (int32_t)i - 1, (int32_t)i);
        while (s.n_heap) {
            spm_bigram b = heap_pop(&s);
            int32_t left = bigram_left(&b);
            spm_sym *l = &s.sym[left], *r = &s.sym[b.right];
            if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale: a side was merged */
            merge_at(&s, left, b.right);
            try_add_bigram(&s, l->prev, left);
            try_add_bigram(&s, left, l->next);
        }
    }

    /* Every merged symbol is a piece by construction, so llama.cpp's rev_merge re-split never
     * fires; only single characters missing from the vocabulary fall back to byte tokens. */
    for (int32_t i = 0; n_sym && i >= 0; i = s.sym[i].next) {
        const spm_sym *y = &s.sym[i];
        int32_t id = sd_tok_lookup(t, buf + y->off, y->n);
        if (id >= 0) {
            sd_tok_emit(k, id);
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            unsigned char c = (unsigned char)buf[y->off + j];
            id = t->byte_tok[c] >= 0 ? t->byte_tok[c] : t->unk;
            if (id < 0) {
                st = sd_fail(SD_ERR_UNSUPPORTED,
                             "tokenizer encode: byte 0x%02X has no token and the vocabulary has "
                             "no byte fallback or unknown token", c);
                goto done;
            }
            sd_tok_emit(k, id);
        }
    }

done:
    free(buf);
    free(s.sym);
    free(s.heap);
    return st;
}

/* As llama.cpp's SPM path: the text after a special token (or at the start) gets the space
 * prefix, so "<s>Hi" encodes like BOS + "Hi". */
sd_status sd_spm_encode_frags(const sd_tokenizer *t, const char *text, const sd_tok_frag *f, size_t n,
                              sd_tok_sink *k) {
    int prev_special = 1;
    for (size_t i = 0; i < n; i++) {
        if (f[i].id >= 0) {
            sd_tok_emit(k, f[i].id);
            prev_special = 1;
            continue;
        }
        sd_status st = encode_piece(t, text + f[i].off, f[i].len, t->add_space_prefix && prev_special, k);
        if (st != SD_OK) return st;
        prev_special = 0;
    }
    return SD_OK;
}

int sd_tokenizer_decode(const sd_tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap) {
    if (!t || (!buf && cap)) {
        sd_fail(SD_ERR_INVALID_ARG, "tokenizer decode: bad arguments");
        return -1;
    }
    if (id < 0 || id >= t->n_vocab) {
        sd_fail(SD_ERR_INVALID_ARG, "tokenizer decode: token id %d is out of range (vocabulary of %d)",
                (int)id, t->n_vocab);
        return -1;
    }
    /* Byte-level pieces decode through GPT-2's byte table; SentencePiece-style BPE
     * (HF tokenizer.json with byte fallback) decodes exactly like SPM below. */
    if (t->kind == SD_TOKENIZER_BPE && t->byte_level) return sd_bpe_decode_byte_level(t, id, buf, cap);
    const char *p = t->text + t->off[id];
    size_t n = t->len[id], o = 0;
    switch (t->type[id]) {
    case SD_TOKEN_BYTE:
        if (cap) {
            buf[0] = (char)sd_tok_byte_value(p, n);
            return 1;
        }
        return 0;
    case SD_TOKEN_USER_DEFINED: /* printed verbatim, like llama.cpp */
        o = n < cap ? n : cap;
        if (o) memcpy(buf, p, o);
        return (int)o;
    case SD_TOKEN_NORMAL:
        break;
    default: /* control, unknown and unused tokens print nothing (llama.cpp without "special") */
        return 0;
    }
    size_t i = 0;
    /* SentencePiece decoding drops the space that add_space_prefix put before the first word. */
    if (t->add_space_prefix && (prev < 0 || prev == t->bos) && n >= 3 && memcmp(p, "\xe2\x96\x81", 3) == 0)
        i = 3;
    while (i < n && o < cap) {
        if (n - i >= 3 && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
            buf[o++] = ' ';
            i += 3;
        } else {
            buf[o++] = p[i++];
        }
    }
    return (int)o;
}
