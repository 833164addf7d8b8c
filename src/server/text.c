/* The server's text handling: buffers, UTF-8 well-formedness (RFC 3629), and a request's output
 * text with what may still change held back (see text.h). */
#include "server/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_put(b, s, strlen(s)); }

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Length of the well-formed character at s[0..n), 0 when ill-formed; *partial is set when the
 * bytes are a proper prefix of a well-formed character. Table 3-7 of the Unicode standard. */
static size_t utf8_char(const unsigned char *s, size_t n, int *partial) {
    *partial = 0;
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;       /* no overlongs */
        else if (c == 0xED) hi = 0x9F;  /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;       /* no overlongs */
        else if (c == 0xF4) hi = 0x8F;  /* nothing above U+10FFFF */
    } else
        return 0;
    for (size_t i = 1; i < len; i++) {
        if (i >= n) {
            *partial = 1;
            return 0;
        }
        const unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return len;
}

long srv_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (i + 8 <= n) { /* ASCII runs, most text, eight bytes at a time */
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        int partial;
        const size_t l = utf8_char(u + i, n - i, &partial);
        if (!l) return (long)i;
        i += l;
    }
    return -1;
}

size_t srv_utf8_incomplete_tail(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned c = u[n - back];
        if ((c & 0xC0) != 0x80) { /* the last lead byte: a prefix of a character or not */
            int partial;
            utf8_char(u + n - back, back, &partial);
            return partial ? back : 0;
        }
    }
    return 0;
}

void srv_utf8_append_clean(srv_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; /* start of the well-formed run not yet copied */
    for (size_t i = 0; i < n;) {
        int partial;
        const size_t l = utf8_char(u + i, n - i, &partial);
        if (l) {
            i += l;
            continue;
        }
        srv_buf_put(b, s + run, i - run);
        srv_buf_put(b, "\xEF\xBF\xBD", 3);
        /* skip the ill-formed sequence: the lead byte and the continuation bytes after it */
        i++;
        while (i < n && (u[i] & 0xC0) == 0x80) i++;
        run = i;
    }
    srv_buf_put(b, s + run, n - run);
}

int srv_text_init(srv_text *t, const sd_tokenizer *tok, int32_t prev, char *const *stops, int n_stops) {
    memset(t, 0, sizeof *t);
    t->tok = tok;
    t->prev = prev;
    t->stops = stops;
    t->n_stops = n_stops;
    t->piece = malloc((size_t)sd_tokenizer_max_piece_len(tok) + 1);
    return t->piece ? 0 : -1;
}

void srv_text_free(srv_text *t) {
    srv_buf_free(&t->text);
    free(t->piece);
    t->piece = NULL;
}

int srv_text_push(srv_text *t, int32_t tok) {
    if (t->stopped) return 1;
    const int n = sd_tokenizer_decode(t->tok, t->prev, tok, t->piece, (size_t)sd_tokenizer_max_piece_len(t->tok));
    t->prev = tok;
    if (n <= 0) return 0;
    srv_buf_put(&t->text, t->piece, (size_t)n);
    if (t->text.oom) return -1;
    /* Nothing handed out can hold a stop string's start (srv_text_take holds such a tail
     * back), so the earliest match starts at or after `sent`. */
    size_t best = t->text.len;
    for (int i = 0; i < t->n_stops; i++) {
        const size_t sl = strlen(t->stops[i]);
        for (size_t at = t->sent; at + sl <= t->text.len && at < best; at++)
            if (!memcmp(t->text.p + at, t->stops[i], sl)) {
                best = at;
                break;
            }
    }
    if (best < t->text.len) {
        t->text.len = best;
        t->text.p[best] = 0;
        t->stopped = 1;
        return 1;
    }
    return 0;
}

/* Bytes at the end of the text that are a proper prefix of a stop string: they may yet become
 * one, so they are not handed out. */
static size_t stop_tail(const srv_text *t) {
    size_t hold = 0;
    for (int i = 0; i < t->n_stops; i++) {
        const size_t sl = strlen(t->stops[i]);
        for (size_t k = sl - 1; k > hold; k--) /* longest first */
            if (k <= t->text.len && !memcmp(t->text.p + t->text.len - k, t->stops[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

size_t srv_text_take(srv_text *t, int final, srv_buf *out) {
    size_t end = t->text.len;
    if (!final && !t->stopped) {
        const size_t hold = stop_tail(t);
        end -= hold;
        end -= srv_utf8_incomplete_tail(t->text.p, end);
    }
    if (end <= t->sent) return 0;
    const size_t n = end - t->sent;
    srv_utf8_append_clean(out, t->text.p + t->sent, n);
    t->sent = end;
    return n;
}
