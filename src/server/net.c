/* The server's sockets: the listening socket, the door in front of libmicrohttpd, and the
 * connections' deadlines. The door accepts every connection and relays its bytes to libmicrohttpd
 * through a socket pair. It reads every request head whole before passing it on and answers there
 * what libmicrohttpd would answer in HTML of its own (a head too large, a version other than
 * HTTP/1.x, a Content-Length past 64 bits, a malformed request line), what it would take silently
 * cut (a NUL byte in the head) or what the connection cap refuses, in OpenAI's error JSON: on a
 * kept-alive connection's later requests as on its first, where libmicrohttpd has no hook. Bodies
 * pass as they come. The client's reset reaches libmicrohttpd as its socket hung up, the client's
 * end of sending as the pair's. The janitor cuts off connections past their deadline: a request
 * must arrive whole within --request-timeout of its first line, and an idle keep-alive connection
 * may wait --timeout for its next one (libmicrohttpd's timeout is idle time only, which a client
 * sending one byte a minute never exceeds). */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
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

/* Client bytes a connection holds: a whole head must fit behind what is still being passed on. */
#define RELAY_UP (2 * SRV_HEAD_MAX + 2)
/* libmicrohttpd's bytes a connection holds on their way to the client */
#define RELAY_DOWN ((size_t)16 << 10)
/* each end's send buffer in the socket pair to libmicrohttpd */
#define RELAY_PAIR_BUF ((size_t)64 << 10)

typedef struct {
    srv_link *l;
    int client; /* 1: the client's socket; 0: the pair's end */
} link_end;

struct srv_link {
    int cfd;        /* the client's socket */
    int mfd;        /* the door's end of the pair whose other end libmicrohttpd serves; -1 until the first head passed */
    struct sockaddr_storage addr;
    socklen_t addr_len;
    link_end end[2]; /* the epoll tags of cfd and mfd */
    double t0;      /* accepted, or (closing) answered */
    double t_head;  /* when the head now awaited began; 0: none is */
    int refuse;     /* over the connection cap: its first head is answered 503 */
    srv_frame frame; /* where the client's byte stream is */
    char *up;       /* [RELAY_UP] the client's bytes: [0, up_fwd) passed checks and go on */
    size_t up_len, up_fwd;
    char *down;     /* [RELAY_DOWN] libmicrohttpd's bytes for the client */
    size_t down_len;
    int c_eof;      /* the client ended its sending side */
    int c_gone;     /* the client reset, or a write to it failed */
    int m_shut;     /* libmicrohttpd was told the client's sending side ended */
    int m_eof;      /* libmicrohttpd closed its end */
    int failed;     /* a refused head: err answers it once libmicrohttpd is done with what came before */
    srv_err err;
    int closing;    /* answered: read until EOF, then closed */
    int dead;       /* closed: freed once the events at hand are handled */
    srv_link *prev, *next;
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

/* ---- the door: every connection's bytes pass through it ------------------------------------ */

static void link_unlink(srv *s, srv_link *l) {
    if (l->prev) l->prev->next = l->next;
    else s->links = l->next;
    if (l->next) l->next->prev = l->prev;
}

static void link_free(srv *s, srv_link *l) {
    epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, l->cfd, NULL);
    close(l->cfd);
    if (l->mfd >= 0) { /* libmicrohttpd sees its socket hung up: the client is gone */
        epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, l->mfd, NULL);
        close(l->mfd);
    }
    link_unlink(s, l);
    s->n_conns--;
    /* freed after the events at hand: one of them may still name it */
    l->dead = 1;
    l->next = s->dead_links;
    s->dead_links = l;
}

static void links_bury(srv *s) {
    while (s->dead_links) {
        srv_link *l = s->dead_links;
        s->dead_links = l->next;
        free(l->up);
        free(l->down);
        free(l);
    }
}

/* Answered, or libmicrohttpd is done with it: the sending side is shut, and what the client still
 * sends is read (and dropped) until it closes, so that the close is not a reset that could destroy
 * the answer before the client reads it. */
static int link_linger(srv *s, srv_link *l) {
    if (l->mfd >= 0) {
        epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, l->mfd, NULL);
        close(l->mfd);
        l->mfd = -1;
    }
    if (l->c_eof) { /* nothing more can come from it */
        link_free(s, l);
        return 1;
    }
    shutdown(l->cfd, SHUT_WR);
    l->closing = 1;
    l->t0 = sd_now();
    return 0;
}

/* Hands a connection whose first head passed to libmicrohttpd, through a socket pair: the door
 * keeps the client's socket and relays. */
static int link_connect(srv *s, srv_link *l) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    /* what the pair holds is on top of what each side buffers: kept small */
    const int buf = (int)RELAY_PAIR_BUF;
    for (int i = 0; i < 2; i++) setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &l->end[1]};
    if (epoll_ctl(s->door_epoll, EPOLL_CTL_ADD, sv[0], &ev) != 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (MHD_add_connection(s->d, sv[1], (const struct sockaddr *)&l->addr, l->addr_len) != MHD_YES) { /* it closed sv[1] */
        const int err = errno;
        epoll_ctl(s->door_epoll, EPOLL_CTL_DEL, sv[0], NULL);
        close(sv[0]);
        errno = err;
        return -1;
    }
    l->mfd = sv[0];
    return 0;
}

/* Reads the client's bytes from up_fwd on (frame.c says where each request's parts end): heads are
 * checked whole before any of them goes on, bodies go on as they come. Returns 1 when anything
 * moved. */
static int link_parse(srv *s, srv_link *l) {
    int moved = 0;
    while (!l->failed && l->up_fwd < l->up_len) {
        const char *b = l->up + l->up_fwd;
        const size_t n = l->up_len - l->up_fwd;
        if (l->frame.at == SRV_FRAME_HEAD && !l->t_head && b[0] != '\r' && b[0] != '\n') l->t_head = sd_now();
        int head = 0;
        const long take = srv_frame_step(&l->frame, b, n, s->p.max_body, &head, &l->err);
        if (take < 0) {
            l->failed = 1;
            return 1;
        }
        if (take == 0) return moved;
        if (head && l->mfd < 0) { /* the connection's first request */
            if (l->refuse) {
                srv_err_set(&l->err, 503, "unavailable_error", NULL, "too_many_connections",
                            "too many connections (the server takes %d at once): retry later", s->p.max_conns);
                l->failed = 1;
                return 1;
            }
            if (link_connect(s, l) != 0) {
                srv_err_set(&l->err, 503, "unavailable_error", NULL, "server_busy", "the server cannot take the connection: %s",
                            strerror(errno));
                l->failed = 1;
                return 1;
            }
        }
        if (head) l->t_head = 0;
        l->up_fwd += (size_t)take;
        moved = 1;
    }
    return moved;
}

static int would_block(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

/* Moves what can move on one connection, both ways, until nothing does; then ends it where its
 * ends are reached. 1 when it is freed. */
static int link_pump(srv *s, srv_link *l, uint32_t events) {
    if (l->dead) return 1;
    if (l->closing) {
        char sink[4096];
        ssize_t n;
        while ((n = recv(l->cfd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        }
        if (n == 0 || !would_block()) {
            link_free(s, l);
            return 1;
        }
        return 0;
    }
    if (events & (EPOLLERR | EPOLLHUP)) l->c_gone = 1; /* the client's socket: a reset */
    for (int moved = 1; moved && !l->c_gone;) {
        moved = 0;
        if (l->up_len < RELAY_UP) { /* read past its end too: a reset after it shows here */
            const ssize_t n = recv(l->cfd, l->up + l->up_len, RELAY_UP - l->up_len, MSG_DONTWAIT);
            if (n > 0) {
                if (!l->failed) l->up_len += (size_t)n; /* after a refused head nothing more is read as a request */
                moved = 1;
            } else if (n == 0) {
                moved |= !l->c_eof;
                l->c_eof = 1;
            } else if (!would_block()) {
                l->c_gone = 1;
                break;
            }
        }
        moved |= link_parse(s, l);
        if (l->failed) l->up_len = l->up_fwd; /* the refused head and whatever follows it are dropped */
        if (l->mfd >= 0 && l->up_fwd > 0 && !l->m_shut) {
            const ssize_t n = send(l->mfd, l->up, l->up_fwd, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                memmove(l->up, l->up + n, l->up_len - (size_t)n);
                l->up_len -= (size_t)n;
                l->up_fwd -= (size_t)n;
                moved = 1;
            } else if (n < 0 && !would_block()) {
                l->m_shut = 1; /* libmicrohttpd closed its end: what is left is dropped */
            }
        }
        /* nothing more will go on (the client's end, or a refused head): libmicrohttpd sees the end of
         * the client's sending side, answers what it has and closes. Only once it has read all the
         * rest: an end that comes with the last bytes goes unseen by its reads until something new
         * arrives (the pair's reads then wake the door) */
        int queued = 0;
        if (l->mfd >= 0 && !l->m_shut && !l->up_fwd && (l->c_eof || l->failed) && ioctl(l->mfd, SIOCOUTQ, &queued) == 0 &&
            queued == 0) {
            shutdown(l->mfd, SHUT_WR);
            l->m_shut = 1;
            moved = 1;
        }
        if (l->mfd >= 0 && !l->m_eof && l->down_len < RELAY_DOWN) {
            const ssize_t n = recv(l->mfd, l->down + l->down_len, RELAY_DOWN - l->down_len, MSG_DONTWAIT);
            if (n > 0) l->down_len += (size_t)n;
            else if (n == 0 || !would_block()) l->m_eof = 1;
            if (n >= 0 || l->m_eof) moved = 1;
        }
        if (l->down_len > 0) {
            const ssize_t n = send(l->cfd, l->down, l->down_len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                memmove(l->down, l->down + n, l->down_len - (size_t)n);
                l->down_len -= (size_t)n;
                moved = 1;
            } else if (n < 0 && !would_block()) {
                l->c_gone = 1;
            }
        }
    }
    if (l->c_gone || (l->mfd < 0 && l->c_eof && !l->failed)) {
        link_free(s, l);
        return 1;
    }
    /* a refused head is answered after everything libmicrohttpd had to say before it */
    if (l->failed ? (l->mfd < 0 || (l->m_eof && !l->down_len)) : (l->m_eof && !l->down_len)) {
        if (l->failed) srv_net_reply(s, l->cfd, &l->err, l->err.status == 503 ? "Retry-After: 1\r\n" : NULL);
        return link_linger(s, l);
    }
    return 0;
}

static void door_accept(srv *s) {
    for (;;) {
        struct sockaddr_storage addr;
        socklen_t addr_len = sizeof addr;
        const int fd = s->listen_fd < 0 ? -1 : accept4(s->listen_fd, (struct sockaddr *)&addr, &addr_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or out of descriptors: the backlog waits */
        srv_link *l = s->n_conns >= s->p.max_conns + DOOR_SLACK ? NULL : calloc(1, sizeof *l); /* far over the cap: no word at all */
        if (l) {
            l->up = malloc(RELAY_UP);
            l->down = malloc(RELAY_DOWN);
        }
        if (!l || !l->up || !l->down) {
            if (l) free(l->up), free(l->down);
            free(l);
            close(fd);
            continue;
        }
        const int one = 1; /* the relay's writes are whole messages already: no waiting for more */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        l->cfd = fd;
        l->mfd = -1;
        l->addr = addr;
        l->addr_len = addr_len;
        l->t0 = l->t_head = sd_now();
        l->refuse = s->n_conns >= s->p.max_conns;
        l->end[0] = (link_end){l, 1};
        l->end[1] = (link_end){l, 0};
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &l->end[0]};
        if (epoll_ctl(s->door_epoll, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(l->up);
            free(l->down);
            free(l);
            continue;
        }
        l->next = s->links;
        if (s->links) s->links->prev = l;
        s->links = l;
        s->n_conns++;
        link_pump(s, l, 0); /* the head may be in already */
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
            void *p = ev[i].data.ptr;
            if (p == &s->door_stop_fd) stop = 1;
            else if (p == &s->listen_fd) door_accept(s);
            else if (p) {
                link_end *end = p;
                link_pump(s, end->l, end->client ? ev[i].events : 0); /* the pair's hang-up is not the client's */
            }
        }
        /* heads that take too long (as long as a whole request may, or a connection may be idle),
         * and answered connections that never close */
        const double now = sd_now(),
                     head_s = s->p.request_timeout_s < s->p.timeout_s ? s->p.request_timeout_s : s->p.timeout_s;
        for (srv_link *l = s->links, *next; l; l = next) {
            next = l->next;
            if (l->closing ? now - l->t0 > LINGER_S : l->frame.at == SRV_FRAME_HEAD && l->t_head && !l->up_fwd && now - l->t_head > head_s) {
                if (!l->closing) s->timed_out++;
                link_free(s, l);
            }
        }
        links_bury(s);
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
    while (s->links) { /* libmicrohttpd has stopped: what it wrote goes out, as far as it can now */
        srv_link *l = s->links;
        if (l->closing || !link_pump(s, l, 0)) link_free(s, l);
    }
    links_bury(s);
    s->janitor_stop = 1;
    pthread_cond_broadcast(&s->net_cv);
    pthread_mutex_unlock(&s->net_mu);
    if (s->janitor_started) pthread_join(s->janitor, NULL);
    s->janitor_started = 0;
    if (s->door_epoll >= 0) close(s->door_epoll);
    if (s->door_stop_fd >= 0) close(s->door_stop_fd);
    s->door_epoll = s->door_stop_fd = -1;
}
