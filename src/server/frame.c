/* A client's request stream read as libmicrohttpd reads it (RFC 9112): where each request head ends
 * and whether libmicrohttpd would take it, and where the body it announces ends, so that the door
 * (net.c) checks every head whole and knows where the next one starts. No sockets here. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "server/internal.h"

/* The end of a request head in b[0..n): the byte after its blank line, 0 when not there yet. */
static size_t head_end(const char *b, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (b[i] != '\n') continue;
        if (b[i + 1] == '\n') return i + 2;
        if (b[i + 1] == '\r' && i + 2 < n && b[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* Checks a complete head as libmicrohttpd would refuse it; 0 when it may go on, else the error. */
static int check_head(const char *b, size_t n, size_t max_body, srv_err *e) {
    const char *eol = memchr(b, '\n', n), *sp1 = memchr(b, ' ', n);
    /* libmicrohttpd hands the target and the headers on as C strings, cut at a NUL: refused instead
     * (RFC 9110 5.5), naming where it is */
    const char *nul = memchr(b, '\0', n);
    if (nul && nul < eol) {
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "the request line holds a NUL byte (at byte %zu, after '%.*s')",
                    (size_t)(nul - b), (int)(nul - b < 60 ? nul - b : 60), b);
        return -1;
    }
    if (nul) { /* a header: named, its value not echoed (it may be a key) */
        const char *h = nul;
        while (h > b && h[-1] != '\n') h--;
        const char *colon = memchr(h, ':', (size_t)(nul - h));
        const int nl = (int)((colon ? colon : nul) - h);
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "the request header '%.*s' holds a NUL byte (at byte %zu of the head)",
                    nl < 60 ? nl : 60, h, (size_t)(nul - b));
        return -1;
    }
    const size_t line = (size_t)(eol - b) - (eol > b && eol[-1] == '\r');
    const char *sp2 = sp1 && sp1 < b + line ? memchr(sp1 + 1, ' ', (size_t)(b + line - sp1 - 1)) : NULL;
    if (!sp1 || sp1 == b || sp1 >= b + line || !sp2) {
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request",
                    "the request line is not METHOD TARGET HTTP/1.1 (got %.*s)", (int)(line < 60 ? line : 60), b);
        return -1;
    }
    const char *v = sp2 + 1;
    const size_t vl = (size_t)(b + line - v);
    if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9') {
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "the request line's version is not HTTP/d.d (got %.*s)",
                    (int)(vl < 20 ? vl : 20), v);
        return -1;
    }
    if (v[5] != '1') {
        srv_err_set(e, 505, "invalid_request_error", NULL, "http_version_not_supported",
                    "HTTP/%c.%c is not supported: this server speaks HTTP/1.0 and HTTP/1.1", v[5], v[7]);
        return -1;
    }
    /* Content-Length: digits that fit 64 bits (libmicrohttpd answers 413 in HTML past them) */
    for (const char *p = eol + 1; p < b + n;) {
        const char *end = memchr(p, '\n', (size_t)(b + n - p));
        if (!end) break;
        if ((size_t)(end - p) > 15 && !strncasecmp(p, "Content-Length:", 15)) {
            const char *d = p + 15;
            while (d < end && (*d == ' ' || *d == '\t')) d++;
            const char *z = end;
            while (z > d && (z[-1] == '\r' || z[-1] == ' ' || z[-1] == '\t')) z--;
            unsigned long long x = 0;
            int over = 0;
            const char *q = d;
            for (; q < z && *q >= '0' && *q <= '9'; q++) {
                if (x > (~0ull - 9) / 10) over = 1;
                x = x * 10 + (unsigned)(*q - '0');
            }
            if (q == d || q != z) {
                srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "Content-Length is not a number (got %.*s)",
                            (int)(z - d < 30 ? z - d : 30), d);
                return -1;
            }
            if (over) {
                srv_err_set(e, 413, "invalid_request_error", NULL, "request_too_large",
                            "request body of %.*s bytes exceeds the limit of %zu bytes", (int)(z - d < 40 ? z - d : 40), d,
                            max_body);
                return -1;
            }
        }
        p = end + 1;
    }
    return 0;
}

/* The body a checked head announces: Content-Length, or chunked alone (libmicrohttpd frames no other
 * transfer coding the same way); 0, or -1 with e set. */
static int head_framing(srv_frame *f, const char *b, size_t n, srv_err *e) {
    int chunked = 0, has_len = 0;
    unsigned long long len = 0;
    const char *eol = memchr(b, '\n', n);
    for (const char *p = eol + 1; p < b + n;) {
        const char *end = memchr(p, '\n', (size_t)(b + n - p));
        if (!end) break;
        const char *z = end;
        while (z > p && (z[-1] == '\r' || z[-1] == ' ' || z[-1] == '\t')) z--;
        if ((size_t)(z - p) > 15 && !strncasecmp(p, "Content-Length:", 15)) {
            const char *d = p + 15;
            while (d < z && (*d == ' ' || *d == '\t')) d++;
            unsigned long long x = 0;
            for (const char *q = d; q < z; q++) x = x * 10 + (unsigned)(*q - '0'); /* digits that fit: check_head */
            if (has_len && x != len) {
                srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request",
                            "two different Content-Length headers (the second %.*s)", (int)(z - d < 30 ? z - d : 30), d);
                return -1;
            }
            has_len = 1;
            len = x;
        } else if ((size_t)(z - p) > 18 && !strncasecmp(p, "Transfer-Encoding:", 18)) {
            const char *v = p + 18;
            while (v < z && (*v == ' ' || *v == '\t')) v++;
            if ((size_t)(z - v) != 7 || strncasecmp(v, "chunked", 7) != 0) {
                srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request",
                            "Transfer-Encoding %.*s is not supported: send chunked, or a Content-Length", (int)(z - v < 40 ? z - v : 40), v);
                return -1;
            }
            chunked = 1;
        }
        p = end + 1;
    }
    if (chunked && has_len) { /* RFC 9112 6.1: a request with both may be an attempt to smuggle one */
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "both Transfer-Encoding and Content-Length are given");
        return -1;
    }
    f->at = chunked ? SRV_FRAME_CHUNK_SIZE : len > 0 ? SRV_FRAME_BODY : SRV_FRAME_HEAD;
    f->left = len;
    return 0;
}

static long too_large_head(srv_err *e) {
    srv_err_set(e, 431, "invalid_request_error", NULL, "request_header_too_large", "the request's line and headers exceed %zu bytes",
                SRV_HEAD_MAX);
    return -1;
}

/* How much of b[0..n) a message quotes: up to its line's end (a CR or LF is no part of the value
 * and would put a control character into the message), at most cap bytes. */
static int quote_len(const char *b, size_t n, size_t cap) {
    size_t i = 0;
    while (i < n && i < cap && b[i] != '\r' && b[i] != '\n') i++;
    return (int)i;
}

long srv_frame_step(srv_frame *f, const char *b, size_t n, size_t max_body, int *head, srv_err *e) {
    *head = 0;
    if (n == 0) return 0;
    switch (f->at) {
    case SRV_FRAME_HEAD: {
        if (b[0] == '\r' || b[0] == '\n') return 1; /* empty lines before a request line are ignored (RFC 9112 2.2) */
        const size_t end = head_end(b, n);
        if (!end) return n > SRV_HEAD_MAX ? too_large_head(e) : 0;
        if (end > SRV_HEAD_MAX + 1) return too_large_head(e); /* the same limit however the head arrived */
        if (check_head(b, end, max_body, e) != 0 || head_framing(f, b, end, e) != 0) return -1;
        *head = 1;
        return (long)end;
    }
    case SRV_FRAME_BODY:
    case SRV_FRAME_CHUNK_DATA: {
        const size_t take = n < f->left ? n : (size_t)f->left;
        f->left -= take;
        if (!f->left) f->at = f->at == SRV_FRAME_BODY ? SRV_FRAME_HEAD : SRV_FRAME_CHUNK_END;
        return (long)take;
    }
    case SRV_FRAME_CHUNK_SIZE:
    case SRV_FRAME_TRAILER: {
        const char *nl = memchr(b, '\n', n);
        if (!nl) {
            if (n <= SRV_HEAD_MAX) return 0;
            srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "a chunk's size line or a trailer exceeds %zu bytes",
                        SRV_HEAD_MAX);
            return -1;
        }
        const size_t take = (size_t)(nl - b) + 1;
        if (f->at == SRV_FRAME_TRAILER) {
            if (take == 1 || (take == 2 && b[0] == '\r')) f->at = SRV_FRAME_HEAD; /* the empty line ends the request */
            return (long)take;
        }
        unsigned long long x = 0;
        size_t i = 0;
        for (; i < take && isxdigit((unsigned char)b[i]); i++) {
            if (x >> 56) { /* past what any body may hold: libmicrohttpd refuses it too */
                srv_err_set(e, 413, "invalid_request_error", NULL, "request_too_large",
                            "a chunk's size %.*s exceeds the limit of %zu bytes", quote_len(b, take, 30), b, max_body);
                return -1;
            }
            x = x * 16 + (unsigned)(isdigit((unsigned char)b[i]) ? b[i] - '0' : (b[i] | 0x20) - 'a' + 10);
        }
        if (i == 0 || (b[i] != ';' && b[i] != '\r' && b[i] != '\n' && b[i] != ' ' && b[i] != '\t')) {
            srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request", "a chunk's size is not hexadecimal (got '%.*s')",
                        quote_len(b, take, 30), b);
            return -1;
        }
        f->left = x;
        f->at = x ? SRV_FRAME_CHUNK_DATA : SRV_FRAME_TRAILER;
        return (long)take;
    }
    case SRV_FRAME_CHUNK_END:
        if (b[0] == '\r' && n < 2) return 0;
        if (b[0] == '\n' || (b[0] == '\r' && b[1] == '\n')) {
            f->at = SRV_FRAME_CHUNK_SIZE;
            return b[0] == '\n' ? 1 : 2;
        }
        srv_err_set(e, 400, "invalid_request_error", NULL, "bad_request",
                    "a chunk's data does not end where its size says (no CRLF after it: got '%.*s%s')", quote_len(b, n, 8), b,
                    b[0] == '\r' ? "\\r" : "");
        return -1;
    }
    return -1;
}
