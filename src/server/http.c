/* The HTTP side of the server (libmicrohttpd, one internal polling thread on epoll): routes,
 * authentication, bodies up to a size cap, and the responses: JSON at once, a JSON result once
 * the engine has it (the connection suspended meanwhile), or server-sent events as the engine
 * produces them (the connection suspended whenever it has sent everything so far). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/io.h"
#include "server/internal.h"

srv_params srv_default_params(void) {
    srv_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.parallel = 4;
    p.queue_max = 64;
    p.timeout_s = 60;
    p.max_body = (size_t)4 << 20;
    p.model_name = "specdec";
    p.spec = sd_spec_default_params();
    return p;
}

/* ---- routes -------------------------------------------------------------------------------- */

enum { R_HEALTH, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT };

static const struct {
    const char *path, *method;
    int open; /* no API key needed */
} k_routes[] = {
    {"/health", "GET", 1},
    {"/v1/models", "GET", 0},
    {"/metrics", "GET", 0},
    {"/v1/completions", "POST", 0},
    {"/v1/chat/completions", "POST", 0},
};
#define N_ROUTES ((int)(sizeof k_routes / sizeof k_routes[0]))

static int find_route(const char *url) {
    for (int i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, k_routes[i].path)) return i;
    return -1;
}

/* What a connection's current request has gathered. */
typedef struct {
    int route;
    srv_buf body;
    size_t too_big; /* bytes past the size limit, dropped */
    unsigned long long declared; /* a Content-Length over the limit, answered once the body is in */
    srv_req *req;  /* submitted to the engine */
    int answered;  /* a response is queued */
} conn_state;

static enum MHD_Result respond(srv *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *body,
                               const char *hdr, const char *hval) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr) MHD_add_response_header(resp, hdr, hval);
    const enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&s->mu);
    s->m.http[status < SRV_HTTP_CODES ? status : 0]++;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static enum MHD_Result respond_err(srv *s, struct MHD_Connection *c, const srv_err *e, const char *hdr,
                                   const char *hval) {
    return respond(s, c, (unsigned)e->status, "application/json", srv_err_json(e), hdr, hval);
}

static enum MHD_Result fail(srv *s, struct MHD_Connection *c, int status, const char *type, const char *code,
                            const char *hdr, const char *hval, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static enum MHD_Result fail(srv *s, struct MHD_Connection *c, int status, const char *type, const char *code,
                            const char *hdr, const char *hval, const char *fmt, ...) {
    srv_err e;
    srv_err_set(&e, status, type, NULL, code, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return respond_err(s, c, &e, hdr, hval);
}

/* "Bearer KEY" against the key, in time that depends on the key's length only. */
static int authorized(const srv *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    const char *given = h + 7, *key = s->api_key;
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned diff = gl != kl;
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, int route) {
    pthread_mutex_lock(&s->mu);
    const int ready = s->ready, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (route == R_HEALTH) {
        if (ready && !stopping) return respond(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL, NULL);
        return fail(s, c, 503, "unavailable_error", NULL, NULL, NULL, "%s", stopping ? "shutting down" : "loading model");
    }
    if (!ready) return fail(s, c, 503, "unavailable_error", NULL, NULL, NULL, "loading model");
    if (route == R_METRICS)
        return respond(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(s), NULL, NULL);
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject(), *meta;
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    srv_buf name = {0}; /* the alias is the user's bytes */
    srv_utf8_append_clean(&name, s->model_name, strlen(s->model_name));
    cJSON_AddStringToObject(m, "id", name.p ? name.p : "");
    srv_buf_free(&name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "specdec");
    meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx_slot", s->n_ctx);
    cJSON_AddNumberToObject(meta, "slots", s->n_slots);
    cJSON_AddStringToObject(meta, "draft", s->dm && s->p.spec.ngram ? "ngram+model" : s->dm ? "model" : s->p.spec.ngram ? "ngram" : "none");
    cJSON_AddNumberToObject(meta, "n_vocab", sd_tokenizer_n_vocab(s->tok));
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return respond(s, c, 200, "application/json", js, NULL, NULL);
}

/* ---- streams ------------------------------------------------------------------------------- */

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_req *r = cls;
    srv *s = r->srv;
    pthread_mutex_lock(&s->mu);
    ssize_t n;
    if (r->out_pos < r->out.len) {
        const size_t k = r->out.len - r->out_pos < max ? r->out.len - r->out_pos : max;
        memcpy(buf, r->out.p + r->out_pos, k);
        r->out_pos += k;
        if (r->out_pos == r->out.len) r->out.len = r->out_pos = 0;
        n = (ssize_t)k;
    } else if (r->finished) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (!r->conn) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else { /* nothing yet: wait for the engine (srv_http_wake) */
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
        n = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void sse_free(void *cls) {
    srv_req *r = cls;
    srv *s = r->srv;
    pthread_mutex_lock(&s->mu);
    srv_req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

void srv_http_wake(srv_req *r) {
    if (r->conn && r->suspended && (r->out_pos < r->out.len || r->finished)) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

int srv_http_client_gone(const srv_req *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    char ch;
    const ssize_t n = recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- generation requests ------------------------------------------------------------------- */

static uint64_t next_seed(srv *s) { /* SplitMix64 */
    pthread_mutex_lock(&s->mu);
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&s->mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The response of a request that is not streamed, once the engine has it; until then the
 * connection is suspended (the engine wakes it). */
static enum MHD_Result answer(srv *s, struct MHD_Connection *c, conn_state *cs) {
    srv_req *r = cs->req;
    pthread_mutex_lock(&s->mu);
    if (!r->finished) { /* not yet: wait on */
        r->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    char *body = r->body;
    const int status = r->status;
    r->body = NULL;
    pthread_mutex_unlock(&s->mu);
    cs->answered = 1;
    return respond(s, c, (unsigned)status, "application/json", body, NULL, NULL);
}

static enum MHD_Result submit(srv *s, struct MHD_Connection *c, conn_state *cs) {
    srv_api_ctx ac = {.tok = s->tok, .chat = s->chat, .n_ctx = s->n_ctx, .special = s->p.special,
                      .chat_special = s->p.chat_special, .seed = next_seed(s), .spec = &s->p.spec,
                      .drafting = s->dm || s->p.spec.ngram, .model_drafts = s->dm != NULL};
    srv_gen g;
    srv_err e;
    cs->answered = 1;
    if (srv_parse_gen(&ac, cs->route == R_CHAT, cs->body.p ? cs->body.p : "", cs->body.len, &g, &e) != 0)
        return respond_err(s, c, &e, NULL, NULL);
    const int stream = g.stream;
    srv_req *r = NULL;
    if (srv_submit(s, &g, c, &r, &e) != 0) {
        srv_gen_free(&g);
        return respond_err(s, c, &e, e.status == 429 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, "1");
    }
    r->srv = s;
    cs->req = r;
    if (stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, r, sse_free);
        if (!resp) {
            sse_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        const enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        pthread_mutex_lock(&s->mu);
        s->m.http[200]++;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    cs->answered = 0; /* the answer comes when the engine has it (it may have it already) */
    return answer(s, c, cs);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* the headers are in */
        const int route = find_route(url);
        if (route < 0) return fail(s, c, 404, "invalid_request_error", "not_found", NULL, NULL, "no route %.16s %.200s", method, url);
        const char *want = k_routes[route].method;
        if (strcmp(method, want) != 0 && !(!strcmp(want, "GET") && !strcmp(method, "HEAD")))
            return fail(s, c, 405, "invalid_request_error", "method_not_allowed", MHD_HTTP_HEADER_ALLOW, want,
                        "%s does not take %.16s", url, method);
        if (!k_routes[route].open && !authorized(s, c))
            return fail(s, c, 401, "authentication_error", "invalid_api_key", MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer",
                        "missing or invalid API key (send Authorization: Bearer KEY)");
        if (strcmp(want, "POST") != 0) return get_route(s, c, route);
        pthread_mutex_lock(&s->mu);
        const int ready = s->ready, stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (!ready || stopping)
            return fail(s, c, 503, "unavailable_error", NULL, NULL, NULL, "%s", stopping ? "the server is shutting down" : "loading model");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared > s->p.max_body) {
            /* A client that waits for "100 Continue", or one announcing far more than it may
             * send, is answered now. Another is already sending: answering mid-upload and
             * closing races its send (it may see a reset, not the 413: the test's client did,
             * now and then), so its body is read, dropped, and answered once in. */
            const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
            if ((ex && !strcasecmp(ex, "100-continue")) || declared > 16 * (unsigned long long)s->p.max_body)
                return fail(s, c, 413, "invalid_request_error", "request_too_large", NULL, NULL,
                            "request body of %.30s bytes exceeds the limit of %zu bytes", cl, s->p.max_body);
        }
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        cs->route = route;
        if (declared > s->p.max_body) {
            cs->declared = declared;
            cs->too_big = 1; /* every piece is dropped */
        }
        *con_cls = cs;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        const size_t n = *upload_size;
        *upload_size = 0;
        if (cs->too_big || cs->body.len + n > s->p.max_body) {
            /* libmicrohttpd answers only once the body is in: the rest is read and dropped, and
             * a client that keeps sending far beyond the limit is cut off */
            srv_buf_free(&cs->body);
            cs->too_big += n;
            return cs->too_big > 16 * s->p.max_body ? MHD_NO : MHD_YES;
        }
        srv_buf_put(&cs->body, upload, n);
        return cs->body.oom ? MHD_NO : MHD_YES;
    }
    if (cs->answered) return MHD_YES;
    if (cs->too_big) {
        cs->answered = 1;
        if (cs->declared)
            return fail(s, c, 413, "invalid_request_error", "request_too_large", NULL, NULL,
                        "request body of %llu bytes exceeds the limit of %zu bytes", cs->declared, s->p.max_body);
        return fail(s, c, 413, "invalid_request_error", "request_too_large", NULL, NULL,
                    "request body exceeds the limit of %zu bytes", s->p.max_body);
    }
    if (cs->req) return answer(s, c, cs);
    return submit(s, c, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    srv *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) return;
    if (cs->req) {
        pthread_mutex_lock(&s->mu);
        srv_req_detach_locked(s, cs->req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        pthread_mutex_unlock(&s->mu);
    }
    srv_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

sd_status srv_start(const srv_params *p, srv **out) {
    *out = NULL;
    if (p->parallel < 1 || p->queue_max < 0 || p->timeout_s < 1 || p->max_body < 1 || p->port < 0 || p->port > 65535)
        return sd_fail(SD_ERR_INVALID_ARG, "serve: parallel %d, queue %d, timeout %d, body limit %zu, port %d", p->parallel,
                       p->queue_max, p->timeout_s, p->max_body, p->port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    const int gai = getaddrinfo(p->host, port, &hints, &ai);
    if (gai != 0) return sd_fail(SD_ERR_INVALID_ARG, "serve: --host %s: %s", p->host, gai_strerror(gai));
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        freeaddrinfo(ai);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    s->p = *p;
    s->host = strdup(p->host);
    s->api_key = p->api_key ? strdup(p->api_key) : NULL;
    s->model_name = strdup(p->model_name ? p->model_name : "specdec");
    s->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* Every idle connection holds a descriptor: take what the hard limit allows. */
    struct rlimit rl;
    unsigned limit = 1000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        limit = rl.rlim_cur > 65536 + 64 ? 65536 : rl.rlim_cur > 128 ? (unsigned)(rl.rlim_cur - 64) : 64;
    }
    const unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                           (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    const int err = errno;
    freeaddrinfo(ai);
    if (!s->d) {
        srv_free(s);
        return sd_fail(SD_ERR_IO, "serve: cannot listen on %s port %d: %s", p->host, p->port,
                       err ? strerror(err) : "the HTTP library refused");
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : p->port;
    *out = s;
    return SD_OK;
}

int srv_port(const srv *s) { return s->port; }

void srv_shutdown(srv *s, double wait_s) {
    if (!s || !s->d) return;
    const MHD_socket lfd = MHD_quiesce_daemon(s->d); /* no new connections */
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    srv_engine_stop(s); /* every request ends: queued ones with 503, running ones with a last chunk */
    for (const double t0 = sd_now(); sd_now() - t0 < wait_s;) { /* the last bytes go out */
        pthread_mutex_lock(&s->mu);
        const int live = s->live != NULL;
        pthread_mutex_unlock(&s->mu);
        if (!live) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu); /* stopping the daemon with suspended connections is not allowed */
    for (srv_req *r = s->live; r; r = r->live_next)
        if (r->suspended) {
            r->suspended = 0;
            r->cancelled = 1;
            MHD_resume_connection(r->conn);
        }
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void srv_free(srv *s) {
    if (!s) return;
    srv_shutdown(s, 0);
    srv_engine_stop(s);
    srv_slots_free(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->host);
    free(s->api_key);
    free(s->model_name);
    free(s);
}
