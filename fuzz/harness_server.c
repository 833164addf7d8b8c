/* Fuzz harness for the server's reading of a client's request stream (src/server/frame.c, what the
 * door checks before libmicrohttpd sees a byte): no crash, every step within the bytes given, and
 * the same heads, refusal and bytes read however the stream arrives. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server/internal.h"

/* Steps through s[0..n) arriving `chunk` bytes at a time (0: at once): writes what it saw to out. */
static void frames(const uint8_t *s, size_t n, size_t chunk, char *out, size_t cap) {
    srv_frame f = {SRV_FRAME_HEAD, 0};
    size_t got = 0, pos = 0, len = 0;
    out[0] = 0;
    for (int failed = 0; !failed;) {
        got = chunk && got + chunk < n ? got + chunk : n;
        for (;;) {
            int head = 0;
            srv_err e;
            const long t = srv_frame_step(&f, (const char *)s + pos, got - pos, (size_t)4 << 20, &head, &e);
            SD_FUZZ_CHECK(t <= (long)(got - pos));
            if (t < 0) {
                SD_FUZZ_CHECK(e.status >= 400 && e.status < 600 && e.msg[0]);
                if (len < cap) len += (size_t)snprintf(out + len, cap - len, " E%d", e.status);
                failed = 1;
                break;
            }
            if (t == 0) break;
            if (head) {
                SD_FUZZ_CHECK(s[pos] != '\r' && s[pos] != '\n' && t <= (long)SRV_HEAD_MAX + 1);
                if (len < cap) len += (size_t)snprintf(out + len, cap - len, " H%zu", pos);
            }
            pos += (size_t)t;
        }
        if (got == n) break;
    }
    if (len < cap) snprintf(out + len, cap - len, " @%zu", pos);
}

/* data[0]: a chunk size (1 + data[0] % 64) for the third reading; the rest: the stream. */
int sd_fuzz_http_frames(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static char whole[1 << 16], bytes[1 << 16], chunks[1 << 16];
    frames(data + 1, size - 1, 0, whole, sizeof whole);
    frames(data + 1, size - 1, 1, bytes, sizeof bytes);
    frames(data + 1, size - 1, 1 + data[0] % 64u, chunks, sizeof chunks);
    SD_FUZZ_CHECK(strcmp(whole, bytes) == 0);
    SD_FUZZ_CHECK(strcmp(whole, chunks) == 0);
    return 0;
}
