/* Fuzz bodies for the tokenizer: encoding arbitrary text and decoding arbitrary ids (fixed
 * vocabularies built once), and loading arbitrary tokenizer.bin files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/gguf.h"
#include "specdec/synth.h"
#include "specdec/tokenizer.h"

/* Synthetic vocabulary of n pieces through the GGUF writer and parser (as a model carries it). */
static sd_tokenizer *synth_tokenizer(int n) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    void *buf = NULL;
    size_t len = 0;
    sd_gguf *g = NULL;
    sd_tokenizer *t = NULL;
    if (w && sd_synth_add_tokenizer(w, n) == SD_OK && sd_gguf_write_mem(w, &buf, &len) == SD_OK &&
        sd_gguf_parse(buf, len, "synth", &g) == SD_OK)
        sd_tokenizer_from_gguf(g, "synth", &t);
    sd_gguf_free(g);
    free(buf);
    sd_gguf_writer_free(w);
    SD_FUZZ_CHECK(t != NULL);
    return t;
}

/* A vocabulary from a GGUF file under ../shared (NULL when absent or unloadable). */
static sd_tokenizer *gguf_tokenizer(const char *rel) {
    const char *p = sd_fuzz_shared(rel);
    size_t len = 0;
    uint8_t *buf = p ? sd_fuzz_read_file(p, &len) : NULL;
    sd_gguf *g = NULL;
    sd_tokenizer *t = NULL;
    if (buf && sd_gguf_parse(buf, len, rel, &g) == SD_OK) sd_tokenizer_from_gguf(g, rel, &t);
    sd_gguf_free(g);
    free(buf);
    return t;
}

static sd_tokenizer *hf_tokenizer(const char *rel) {
    const char *p = sd_fuzz_shared(rel);
    size_t len = 0;
    uint8_t *buf = p ? sd_fuzz_read_file(p, &len) : NULL;
    sd_tokenizer *t = NULL;
    if (buf) sd_tokenizer_from_hf_json((const char *)buf, len, rel, 1, 2, &t);
    free(buf);
    if (!t) { /* the synthetic tokenizer.json */
        char *j = sd_fuzz_hf_tokenizer_json(64, &len);
        SD_FUZZ_CHECK(j != NULL);
        SD_FUZZ_CHECK(sd_tokenizer_from_hf_json(j, len, "synth.tokenizer.json", 1, 2, &t) == SD_OK);
        free(j);
    }
    return t;
}

#define N_VOCABS 6
static int lossless(const sd_tokenizer *t);

/* [0]: the real stories260K vocabulary when ../shared has it (else synthetic, 512 pieces),
 * [1]: synthetic with byte fallback (300), [2]: synthetic without byte tokens (64), so the
 * unknown-token path runs too; byte-level BPE from ../shared: [3] GPT-2 and [4] DeepSeek-Coder
 * GGUF vocabularies (else [0]), [5] the tinystories-656k tokenizer.json (else a synthetic
 * one). Built once: libFuzzer calls the body millions of times. */
static const sd_tokenizer *get_tokenizer(int which, int *is_lossless) {
    static sd_tokenizer *toks[N_VOCABS];
    static int lossless_[N_VOCABS];
    static int done;
    if (!done) {
        done = 1;
        const char *p = sd_fuzz_shared("models/stories260K/tok512.bin");
        if (p) sd_tokenizer_load_llama2c(p, 512, &toks[0]);
        if (!toks[0]) toks[0] = synth_tokenizer(512);
        toks[1] = synth_tokenizer(300);
        toks[2] = synth_tokenizer(64);
        toks[3] = gguf_tokenizer("vocab-tests/ggml-vocab-gpt-2.gguf");
        toks[4] = gguf_tokenizer("vocab-tests/ggml-vocab-deepseek-coder.gguf");
        toks[5] = hf_tokenizer("models/tinystories-656k/tokenizer.json");
        for (int i = 0; i < N_VOCABS; i++) lossless_[i] = toks[i] ? lossless(toks[i]) : 0;
    }
    if (!toks[which]) which = 0;
    *is_lossless = lossless_[which];
    return toks[which];
}

/* Whether the tokenizer maps every byte to a token (then decode(encode(x)) must give x back). */
static int lossless(const sd_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int found = 0;
        for (int32_t id = 0; id < sd_tokenizer_n_vocab(t) && !found; id++) {
            size_t n;
            const char *p = sd_tokenizer_piece(t, id, &n);
            found = n == 6 && memcmp(p, name, 6) == 0 && sd_tokenizer_token_type(t, id) == SD_TOKEN_BYTE;
        }
        if (!found) return 0;
    }
    return 1;
}

/* Decodes ids[0..n) (prev chained) into a malloc'd string of *len bytes. Each call gets an
 * exact-size buffer of max_piece_len bytes, the documented bound, so any write past it is
 * an ASan report. */
static char *decode_all(const sd_tokenizer *t, const int32_t *ids, int n, size_t *len) {
    const int maxp = sd_tokenizer_max_piece_len(t);
    char *out = malloc((size_t)n * (size_t)maxp + 1);
    char *piece = malloc((size_t)maxp);
    SD_FUZZ_CHECK(out && piece);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        int w = sd_tokenizer_decode(t, i ? ids[i - 1] : -1, ids[i], piece, (size_t)maxp);
        SD_FUZZ_CHECK(w >= 0 && w <= maxp);
        memcpy(out + o, piece, (size_t)w);
        o += (size_t)w;
    }
    free(piece);
    *len = o;
    return out;
}

void sd_fuzz_check_encode(const sd_tokenizer *t, const char *text, size_t len, int add_bos, int roundtrip) {
    sd_fuzz_check_tokenize(t, text, len, add_bos, 0, roundtrip);
}

void sd_fuzz_check_tokenize(const sd_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                            int roundtrip) {
    const int nv = sd_tokenizer_n_vocab(t);
    int n = -1;
    sd_clear_error();
    sd_status st = sd_tokenizer_tokenize(t, text, len, add_bos, parse_special, NULL, 0, &n);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(st == SD_ERR_INVALID_ARG || st == SD_ERR_UNSUPPORTED);
        sd_fuzz_check_error();
        if (st != SD_ERR_INVALID_ARG) return;
    }
    /* 3 per (escaped) byte, the prefix, BOS; with specials parsed, each piece of text after a
     * special token may carry its own 3-byte prefix */
    SD_FUZZ_CHECK(n >= 0 && (size_t)n <= (parse_special ? 6 : 3) * len + 4);
    if (n == 0) return;
    int32_t *ids = malloc((size_t)n * sizeof *ids); /* exact: a write past n is caught */
    SD_FUZZ_CHECK(ids != NULL);
    int n2 = -1;
    SD_FUZZ_CHECK(sd_tokenizer_tokenize(t, text, len, add_bos, parse_special, ids, n, &n2) == SD_OK && n2 == n);
    for (int i = 0; i < n; i++) SD_FUZZ_CHECK(ids[i] >= 0 && ids[i] < nv);
    if (n > 1) { /* truncated: the first cap ids, the full count, an error */
        int32_t *part = malloc((size_t)(n - 1) * sizeof *part);
        SD_FUZZ_CHECK(part != NULL);
        int n3 = -1;
        sd_clear_error();
        SD_FUZZ_CHECK(sd_tokenizer_tokenize(t, text, len, add_bos, parse_special, part, n - 1, &n3) == SD_ERR_INVALID_ARG);
        sd_fuzz_check_error();
        SD_FUZZ_CHECK(n3 == n && memcmp(part, ids, (size_t)(n - 1) * sizeof *ids) == 0);
        free(part);
    }
    /* Round trip, where it is defined: every byte has a token and only normal and byte
     * pieces came out (control/unknown pieces print nothing by design). U+2581 in the
     * input is SentencePiece's escaped space and comes back as ' '. */
    int plain = roundtrip;
    for (int i = add_bos && sd_tokenizer_bos(t) >= 0 ? 1 : 0; i < n && plain; i++) {
        int ty = sd_tokenizer_token_type(t, ids[i]);
        plain = ty == SD_TOKEN_NORMAL || ty == SD_TOKEN_BYTE;
    }
    if (plain) {
        size_t dlen;
        char *dec = decode_all(t, ids, n, &dlen);
        char *want = malloc(len + 1);
        SD_FUZZ_CHECK(want != NULL);
        size_t w = 0;
        for (size_t i = 0; i < len;) {
            if (len - i >= 3 && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                want[w++] = ' ';
                i += 3;
            } else {
                want[w++] = text[i++];
            }
        }
        SD_FUZZ_CHECK(dlen == w && memcmp(dec, want, w) == 0);
        free(want);
        free(dec);
    }
    free(ids);
}

/* Every id (in range or not) decodes into a buffer of cap bytes without writing past it;
 * out-of-range ids give -1; with cap >= max_piece_len the whole piece fits. */
void sd_fuzz_check_decode(const sd_tokenizer *t, const uint8_t *data, size_t size) {
    const int nv = sd_tokenizer_n_vocab(t), maxp = sd_tokenizer_max_piece_len(t);
    char *full = malloc((size_t)maxp);
    SD_FUZZ_CHECK(full != NULL);
    int32_t prev = -1;
    for (size_t i = 0; i + 4 <= size && i < 4 * 256; i += 4) {
        int32_t raw;
        memcpy(&raw, data + i, 4);
        /* mostly in-range ids (so pieces are reached), with the raw value kept for odd bytes */
        int32_t id = (data[i] & 1) ? raw : (int32_t)((uint32_t)raw % (uint32_t)(nv + 2)) - 1;
        int w = sd_tokenizer_decode(t, prev, id, full, (size_t)maxp);
        if (id < 0 || id >= nv) {
            SD_FUZZ_CHECK(w == -1);
        } else {
            SD_FUZZ_CHECK(w >= 0 && w <= maxp);
            size_t pl;
            SD_FUZZ_CHECK(sd_tokenizer_piece(t, id, &pl) != NULL);
            const size_t cap = (size_t)(data[i + 1] % (maxp + 1));
            char *small = malloc(cap ? cap : 1);
            SD_FUZZ_CHECK(small != NULL);
            int ws = sd_tokenizer_decode(t, prev, id, cap ? small : NULL, cap);
            SD_FUZZ_CHECK(ws >= 0 && (size_t)ws <= cap && ws <= w);
            SD_FUZZ_CHECK(memcmp(small, full, (size_t)ws) == 0); /* a prefix of the full text */
            free(small);
        }
        SD_FUZZ_CHECK(sd_tokenizer_decode(t, prev, id, full, 0) <= 0);
        prev = id;
    }
    free(full);
}

/* Input: a mode byte (bits 0-2: vocabulary, 6 and 7 meaning 0; bit 3: add BOS; bit 4: parse
 * special tokens), then text; the same bytes read as int32 ids are decoded. */
int sd_fuzz_tokenizer(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int which = data[0] & 7;
    int is_lossless;
    const sd_tokenizer *t = get_tokenizer(which < N_VOCABS ? which : 0, &is_lossless);
    const int add_bos = (data[0] >> 3) & 1;
    /* exact-size copy without a terminator: encode must not look for a NUL */
    const size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    SD_FUZZ_CHECK(text != NULL);
    memcpy(text, data + 1, len);
    sd_fuzz_check_tokenize(t, text, len, add_bos, (data[0] >> 4) & 1, is_lossless);
    sd_fuzz_check_decode(t, data + 1, len);
    free(text);
    return 0;
}

/* Input: u32 vocabulary size (mod 65536: small and invalid sizes included), then the file. */
int sd_fuzz_tokenizer_file(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    const int vocab = (int)(sd_fuzz_u32(data, size) % 65536u);
    const size_t len = size - 4;
    uint8_t *buf = malloc(len ? len : 1);
    SD_FUZZ_CHECK(buf != NULL);
    memcpy(buf, data + 4, len);
    sd_tokenizer *t = (sd_tokenizer *)1;
    sd_clear_error();
    sd_status st = sd_tokenizer_from_llama2c_buf(buf, len, vocab, "fuzz.tokenizer.bin", &t);
    free(buf); /* everything is copied */
    if (st != SD_OK) {
        SD_FUZZ_CHECK(t == NULL);
        sd_fuzz_check_error();
        return 0;
    }
    SD_FUZZ_CHECK(t != NULL && sd_tokenizer_n_vocab(t) == vocab);
    SD_FUZZ_CHECK(sd_tokenizer_bos(t) == 1 && sd_tokenizer_eos(t) == 2);
    SD_FUZZ_CHECK(sd_tokenizer_kind_of(t) == SD_TOKENIZER_SPM);
    for (int32_t id = 0; id < vocab; id++) {
        int ty = sd_tokenizer_token_type(t, id);
        SD_FUZZ_CHECK(ty >= SD_TOKEN_NORMAL && ty <= SD_TOKEN_BYTE);
    }
    SD_FUZZ_CHECK(sd_tokenizer_token_type(t, vocab) == -1 && sd_tokenizer_piece(t, -1, NULL) == NULL);
    SD_FUZZ_CHECK(sd_tokenizer_check_compatible(t, t) == SD_OK);
    /* encode/decode with this vocabulary: the file's own first bytes as text */
    const size_t tl = len < 64 ? len : 64;
    sd_fuzz_check_encode(t, (const char *)data + 4, tl, 1, 0);
    sd_fuzz_check_encode(t, "Once upon a time, there was a cat.", 34, 0, 0);
    sd_fuzz_check_decode(t, data + 4, len < 256 ? len : 256);
    sd_tokenizer_free(t);
    return 0;
}
