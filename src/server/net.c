/* The server's sockets: the listening socket and the door in front of libmicrohttpd, and the
 * connections' deadlines. The door accepts, waits for a connection's first request head (peeked,
 * not read), and answers there what libmicrohttpd would answer in HTML of its own (a head too
 * large, a version other than HTTP/1.x, a Content-Length past 64 bits, a malformed request line),
 * what it would take silently cut (a NUL byte in the head) or what the connection cap refuses, in OpenAI's error JSON; everything else is handed to
 * libmicrohttpd whole. The janitor cuts off connections past their deadline: a request must
 * arrive whole within --request-timeout of its first line, and an idle keep-alive connection may
 * wait --timeout for its next one (libmicrohttpd's timeout is idle time only, which a client
 * sending one byte a minute never exceeds). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/io.h"
#include "server/internal.h"

/* Connections beyond the cap are accepted (up to this many more) to be told 503, then closed. */
#define DOOR_SLACK 64
/* A refused connection is read (and dropped) for this long after its answer, so that closing it
 * with its request unread does not reset it before the client reads the answer. */
#define LINGER_S 2.0

struct srv_pending {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    double t0;
    int refuse;  /* over the connection cap: answered 503 once its head is in */
    int closing; /* answered: read until EOF, then closed */
    srv_pending *prev, *next;
};

/* ---- the listening socket ------------------------------------------------------------------ */

sd_status srv_net_listen(srv *s) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->p.port);
    const int gai = getaddrinfo(s->p.host, port, &hints, &ai);
    if (gai != 0) return sd_fail(SD_ERR_INVALID_ARG, "serve: --host %s: %s", s->p.host, gai_strerror(gai));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = errno;
    if (fd >= 0) {
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) return sd_fail(SD_ERR_IO, "serve: cannot listen on %s port %d: %s", s->p.host, s->p.port, strerror(err));
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    s->port = s->p.port;
    if (getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        s->port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port : ((struct sockaddr_in *)&a)->sin_port);
    s->listen_fd = fd;
    return SD_OK;
}

void srv_net_close_listener(srv *s) {
    pthread_mutex_lock(&s->net_mu);
    const int fd = s->listen_fd;
    s->listen_fd = -1;
    pthread_mutex_unlock(&s->net_mu);
    if (fd >= 0) {
        if (s->door_epoll >= 0) epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
    }
}

/* ---- answers from the door ------------------------------------------------------------------ */

static const char *reason_phrase(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

void srv_net_reply(srv *s, int fd, const srv_err *e, const char *extra_headers) {
    char *body = srv_err_json(e);
    char head[512];
    const size_t bl = body ? strlen(body) : 0;
    const int hl = snprintf(head, sizeof head,
                            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: "
                            "close\r\n%s%s%s%s\r\n",
                            e->status, reason_phrase(e->status), bl, extra_headers ? extra_headers : "",
                            s->cors ? "Access-Control-Allow-Origin: " : "", s->cors ? s->cors : "", s->cors ? "\r\n" : "");
    /* one small write on a fresh socket: it fits the send buffer; what does not is lost with
     * the connection, as a response to a client that does not read would be */
    struct iovec iov[2] = {{head, (size_t)hl}, {body, bl}};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = body ? 2 : 1;
    if (sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* the client is gone: nothing to tell */
    }
    free(body);
    srv_http_count(s, (unsigned)e->status);
}

/* ---- the door -------------------------------------------------------------------------------- */

static void pending_unlink(srv *s, srv_pending *p) {
    if (p->prev) p->prev->next = p->next;
    else s->pending = p->next;
    if (p->next) p->next->prev = p->prev;
}

/* Closes a connection the door holds (net_mu held): what it sent (peeked, not read) is read
 * first, or the close would be a reset. */
static void pending_close(srv *s, srv_pending *p) {
    char sink[4096];
    for (int i = 0; i < 64 && recv(p->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {
    }
    epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, p->fd, NULL);
    close(p->fd);
    pending_unlink(s, p);
    s->n_conns--;
    free(p);
}

/* Answered: shut the sending side, and read what the client still sends until it closes. */
static void pending_answered(srv *s, srv_pending *p) {
    char sink[4096];
    while (recv(p->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    shutdown(p->fd, SHUT_WR);
    p->closing = 1;
    p->t0 = sd_now();
}

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
static int check_head(const srv *s, const char *b, size_t n, srv_err *e) {
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
                            s->p.max_body);
                return -1;
            }
        }
        p = end + 1;
    }
    return 0;
}

/* A connection's first head: wait for it, check it, and answer or hand the connection over. */
static void door_look(srv *s, srv_pending *p) {
    char buf[SRV_HEAD_MAX + 1];
    if (p->closing) {
        char sink[4096];
        ssize_t n;
        while ((n = recv(p->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) pending_close(s, p);
        return;
    }
    const ssize_t n = recv(p->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        pending_close(s, p);
        return;
    }
    if (n < 0) return;
    const size_t end = head_end(buf, (size_t)n);
    srv_err e;
    if (!end) {
        if ((size_t)n <= SRV_HEAD_MAX) return; /* more to come */
        srv_err_set(&e, 431, "invalid_request_error", NULL, "request_header_too_large",
                    "the request's line and headers exceed %zu bytes", SRV_HEAD_MAX);
        srv_net_reply(s, p->fd, &e, NULL);
        pending_answered(s, p);
        return;
    }
    memset(&e, 0, sizeof e);
    int refused = check_head(s, buf, end, &e) != 0;
    if (!refused && p->refuse) {
        srv_err_set(&e, 503, "unavailable_error", NULL, "too_many_connections",
                    "too many connections (the server takes %d at once): retry later", s->p.max_conns);
        refused = 1;
    }
    if (!refused) {
        epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, p->fd, NULL);
        pending_unlink(s, p);
        /* libmicrohttpd counts it from here; the door's count stays until it is closed */
        if (MHD_add_connection(s->d, p->fd, (const struct sockaddr *)&p->addr, p->addr_len) != MHD_YES) s->n_conns--;
        free(p);
        return;
    }
    srv_net_reply(s, p->fd, &e, e.status == 503 ? "Retry-After: 1\r\n" : NULL);
    pending_answered(s, p);
}

static void door_accept(srv *s) {
    for (;;) {
        srv_pending *p = calloc(1, sizeof *p);
        if (!p) return;
        p->addr_len = sizeof p->addr;
        const int fd = s->listen_fd < 0 ? -1 : accept4(s->listen_fd, (struct sockaddr *)&p->addr, &p->addr_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            free(p);
            return; /* EAGAIN, or out of descriptors: the backlog waits */
        }
        if (s->n_conns >= s->p.max_conns + DOOR_SLACK) { /* far over the cap: no word at all */
            close(fd);
            free(p);
            continue;
        }
        p->fd = fd;
        p->t0 = sd_now();
        p->refuse = s->n_conns >= s->p.max_conns;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(s->door_epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(p);
            continue;
        }
        p->next = s->pending;
        if (s->pending) s->pending->prev = p;
        s->pending = p;
        s->n_conns++;
        door_look(s, p); /* the head may be in already */
    }
}

static void *door_main(void *arg) {
    srv *s = arg;
    struct epoll_event ev[64];
    for (;;) {
        const int n = epoll_wait(s->door_epoll, ev, 64, 200);
        pthread_mutex_lock(&s->net_mu);
        int stop = 0;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &s->door_stop_fd) stop = 1;
            else if (ev[i].data.ptr == &s->listen_fd) door_accept(s);
            else door_look(s, ev[i].data.ptr);
        }
        /* heads that take too long (as long as a whole request may, or a connection may be idle),
         * and answered connections that never close */
        const double now = sd_now(),
                     head_s = s->p.request_timeout_s < s->p.timeout_s ? s->p.request_timeout_s : s->p.timeout_s;
        for (srv_pending *p = s->pending, *next; p; p = next) {
            next = p->next;
            if (now - p->t0 > (p->closing ? LINGER_S : head_s)) {
                if (!p->closing) s->timed_out++;
                pending_close(s, p);
            }
        }
        pthread_mutex_unlock(&s->net_mu);
        if (stop) break;
    }
    return NULL;
}

/* ---- deadlines ------------------------------------------------------------------------------ */

void srv_net_conn_started(srv *s, struct MHD_Connection *c, void **socket_context) {
    srv_conn *r = calloc(1, sizeof *r);
    *socket_context = r;
    if (!r) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_lock(&s->net_mu);
    r->deadline = sd_now() + s->p.request_timeout_s; /* its first request's body */
    r->next = s->conns;
    if (s->conns) s->conns->prev = r;
    s->conns = r;
    pthread_mutex_unlock(&s->net_mu);
}

void srv_net_conn_closed(srv *s, void **socket_context) {
    srv_conn *r = *socket_context;
    pthread_mutex_lock(&s->net_mu);
    if (r) { /* before libmicrohttpd closes the socket: the janitor never touches a reused one */
        if (r->prev) r->prev->next = r->next;
        else s->conns = r->next;
        if (r->next) r->next->prev = r->prev;
    }
    s->n_conns--;
    pthread_mutex_unlock(&s->net_mu);
    free(r);
    *socket_context = NULL;
}

void srv_net_set_deadline(srv *s, struct MHD_Connection *c, double seconds) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    srv_conn *r = ci ? ci->socket_context : NULL;
    if (!r) return;
    pthread_mutex_lock(&s->net_mu);
    r->deadline = seconds > 0 ? sd_now() + seconds : 0;
    pthread_mutex_unlock(&s->net_mu);
}

/* Cuts off connections past their deadline: libmicrohttpd sees the socket shut and closes it. */
static void *janitor_main(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&s->net_mu);
    while (!s->janitor_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->net_cv, &s->net_mu, &ts);
        const double now = sd_now();
        for (srv_conn *r = s->conns; r; r = r->next)
            if (r->deadline > 0 && now > r->deadline && !r->killed && r->fd >= 0) {
                r->killed = 1;
                s->timed_out++;
                shutdown(r->fd, SHUT_RDWR);
            }
    }
    pthread_mutex_unlock(&s->net_mu);
    return NULL;
}

sd_status srv_net_start(srv *s) {
    s->door_epoll = epoll_create1(EPOLL_CLOEXEC);
    s->door_stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->door_epoll < 0 || s->door_stop_fd < 0) return sd_fail(SD_ERR_IO, "serve: epoll: %s", strerror(errno));
    struct epoll_event a = {.events = EPOLLIN, .data.ptr = &s->listen_fd}, b = {.events = EPOLLIN, .data.ptr = &s->door_stop_fd};
    if (epoll_ctl(s->door_epoll, EPOLL_CTL_ADD, s->listen_fd, &a) != 0 ||
        epoll_ctl(s->door_epoll, EPOLL_CTL_ADD, s->door_stop_fd, &b) != 0)
        return sd_fail(SD_ERR_IO, "serve: epoll: %s", strerror(errno));
    if (pthread_create(&s->door, NULL, door_main, s) != 0) return sd_fail(SD_ERR_NOMEM, "serve: cannot start a thread");
    s->door_started = 1;
    if (pthread_create(&s->janitor, NULL, janitor_main, s) != 0) return sd_fail(SD_ERR_NOMEM, "serve: cannot start a thread");
    s->janitor_started = 1;
    return SD_OK;
}

void srv_net_stop(srv *s) {
    srv_net_close_listener(s);
    if (s->door_started) {
        const uint64_t one = 1;
        if (write(s->door_stop_fd, &one, sizeof one) < 0) { /* the thread still stops at its next timeout */
        }
        pthread_join(s->door, NULL);
        s->door_started = 0;
    }
    pthread_mutex_lock(&s->net_mu);
    while (s->pending) pending_close(s, s->pending);
    s->janitor_stop = 1;
    pthread_cond_broadcast(&s->net_cv);
    pthread_mutex_unlock(&s->net_mu);
    if (s->janitor_started) pthread_join(s->janitor, NULL);
    s->janitor_started = 0;
    if (s->door_epoll >= 0) close(s->door_epoll);
    if (s->door_stop_fd >= 0) close(s->door_stop_fd);
    s->door_epoll = s->door_stop_fd = -1;
}
