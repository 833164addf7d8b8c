/* The server's text handling, free of HTTP: a growable byte buffer, UTF-8 checks, and the output
 * text of one request built token by token, holding back what may still change (an incomplete
 * UTF-8 character, the start of a stop string). */
#ifndef SD_SERVER_TEXT_H
#define SD_SERVER_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/tokenizer.h"

/* A growable buffer; a failed allocation sets oom and drops further writes. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} srv_buf;

void srv_buf_put(srv_buf *b, const char *s, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);

/* Offset of the first byte that does not start a well-formed UTF-8 character (overlong forms,
 * surrogates, values above U+10FFFF and truncated sequences are ill-formed), or -1 when all n
 * bytes are well-formed. */
long srv_utf8_check(const char *s, size_t n);
/* Bytes at the end of s[0..n) that begin a character and could still be completed by more bytes
 * (0..3). */
size_t srv_utf8_incomplete_tail(const char *s, size_t n);
/* Appends s[0..n) to b with every ill-formed sequence replaced by U+FFFD, so the result is UTF-8
 * whatever the model produced (a byte token alone, a cut character). */
void srv_utf8_append_clean(srv_buf *b, const char *s, size_t n);

/* Stop strings as OpenAI defines them: generation ends where any of them first occurs in the
 * output, which is cut before it. */
#define SRV_MAX_STOPS 16
#define SRV_MAX_STOP_LEN 256

/* The output text of one request. */
typedef struct {
    const sd_tokenizer *tok;
    int32_t prev;      /* the token before the next one (decoding drops a leading space after BOS) */
    srv_buf text;      /* everything decoded so far, cut at a stop string once one is found */
    size_t sent;       /* bytes of text already handed out */
    char *const *stops;
    int n_stops;
    char *piece;       /* sd_tokenizer_max_piece_len bytes */
    int stopped;       /* a stop string was found */
} srv_text;

/* prev: the prompt's last token. stops (borrowed) must outlive t. */
int srv_text_init(srv_text *t, const sd_tokenizer *tok, int32_t prev, char *const *stops, int n_stops);
void srv_text_free(srv_text *t);
/* Appends one token's text; returns 1 when it completed a stop string (the text now ends
 * before it and nothing more may be pushed), 0 otherwise, -1 when out of memory. */
int srv_text_push(srv_text *t, int32_t tok);
/* Appends to out the text that can no longer change (all of it when final), as clean UTF-8, and
 * marks it handed out. Returns the number of bytes of text it covered. */
size_t srv_text_take(srv_text *t, int final, srv_buf *out);

#endif
