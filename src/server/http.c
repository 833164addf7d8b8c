/* The HTTP side of the server (libmicrohttpd, one internal polling thread on epoll, fed by the door
 * of net.c): routes, authentication, CORS, bodies up to a size cap and within a shared budget, and
 * the responses: JSON at once, a JSON result once a tokenizer worker or the engine has it (the
 * connection suspended meanwhile), or server-sent events as the engine produces them (suspended
 * whenever everything so far is sent). Every answer waits until the whole request is in, so a
 * connection stays open for the next request (keep-alive, pipelining), whatever the status. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
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
    p.request_timeout_s = 60;
    p.max_conns = 1024;
    p.max_body = (size_t)4 << 20;
    p.buffer_limit = (size_t)64 << 20;
    p.shutdown_timeout_s = 30;
    p.model_name = "specdec";
    p.spec = sd_spec_default_params();
    return p;
}

/* ---- routes -------------------------------------------------------------------------------- */

static const struct {
    const char *path;
    int prefix; /* the path is followed by an id */
    const char *method;
    int route;
    int open;   /* no API key needed */
} k_routes[] = {
    {"/health", 0, "GET", SRV_ROUTE_HEALTH, 1},
    {"/v1/models", 0, "GET", SRV_ROUTE_MODELS, 0},
    {"/v1/models/", 1, "GET", SRV_ROUTE_MODEL, 0},
    {"/metrics", 0, "GET", SRV_ROUTE_METRICS, 0},
    {"/props", 0, "GET", SRV_ROUTE_PROPS, 0},
    {"/v1/completions", 0, "POST", SRV_ROUTE_COMPLETIONS, 0},
    {"/v1/chat/completions", 0, "POST", SRV_ROUTE_CHAT, 0},
    {"/tokenize", 0, "POST", SRV_ROUTE_TOKENIZE, 0},
    {"/detokenize", 0, "POST", SRV_ROUTE_DETOKENIZE, 0},
};
#define N_ROUTES ((int)(sizeof k_routes / sizeof k_routes[0]))

static int find_route(const char *url) {
    for (int i = 0; i < N_ROUTES; i++) {
        const size_t n = strlen(k_routes[i].path);
        if (k_routes[i].prefix ? !strncmp(url, k_routes[i].path, n) && url[n] : !strcmp(url, k_routes[i].path)) return i;
    }
    return -1;
}

/* What a connection's current request has gathered. */
typedef struct {
    int ri;          /* index in k_routes */
    char *id;        /* /v1/models/{id} */
    srv_err err;     /* an answer decided from the head, given once the body is in (status 0: none) */
    const char *hdr, *hval;
    srv_buf body;
    size_t charged;  /* body bytes counted in s->buffered */
    size_t dropped;  /* body bytes read and dropped (the answer is an error) */
    unsigned long long declared; /* Content-Length */
    int full;        /* the whole request is in */
    int answered;
    int job_queued;  /* handed to a tokenizer worker */
    int http11;      /* HTTP/1.1 or later */
    srv_job job;
    srv_req *req;    /* submitted to the engine */
} conn_state;

void srv_http_count(srv *s, unsigned status) {
    pthread_mutex_lock(&s->mu);
    s->m.http[status < SRV_HTTP_CODES ? status : 0]++;
    pthread_mutex_unlock(&s->mu);
}

/* Headers every response gets: CORS, and while draining an end to keep-alive (a balancer then
 * takes its next request elsewhere). */
static void common_headers(srv *s, struct MHD_Response *resp) {
    if (s->cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cors);
        if (strcmp(s->cors, "*") != 0) MHD_add_response_header(resp, "Vary", "Origin");
    }
    pthread_mutex_lock(&s->mu);
    const int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (draining) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

static enum MHD_Result respond(srv *s, struct MHD_Connection *c, unsigned status, const char *ctype, char *body,
                               const char *hdr, const char *hval) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr) MHD_add_response_header(resp, hdr, hval);
    common_headers(s, resp);
    const enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    srv_http_count(s, status);
    return rc;
}

static enum MHD_Result respond_err(srv *s, struct MHD_Connection *c, const srv_err *e, const char *hdr, const char *hval) {
    if (!hdr && (e->status == 503 || e->status == 429)) { /* retry: after a second, here or elsewhere */
        hdr = MHD_HTTP_HEADER_RETRY_AFTER;
        hval = "1";
    }
    return respond(s, c, (unsigned)e->status, "application/json", srv_err_json(e), hdr, hval);
}

/* The error answered once the request is in. */
static void defer_err(conn_state *cs, int status, const char *type, const char *code, const char *hdr, const char *hval,
                      const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void defer_err(conn_state *cs, int status, const char *type, const char *code, const char *hdr, const char *hval,
                      const char *fmt, ...) {
    srv_err_set(&cs->err, status, type, NULL, code, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cs->err.msg, sizeof cs->err.msg, fmt, ap);
    va_end(ap);
    cs->hdr = hdr;
    cs->hval = hval;
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

srv_api_ctx srv_http_api_ctx(srv *s) {
    srv_api_ctx ac;
    memset(&ac, 0, sizeof ac);
    ac.tok = s->tok;
    ac.chat = s->chat;
    ac.n_ctx = s->n_ctx;
    ac.n_slots = s->n_slots;
    ac.special = s->p.special;
    ac.chat_special = s->p.chat_special;
    ac.spec = &s->p.spec;
    ac.drafting = s->dm || s->p.spec.ngram;
    ac.model_drafts = s->dm != NULL;
    ac.text_per_token = s->text_per_token;
    pthread_mutex_lock(&s->mu); /* a seed for a request that gives none: SplitMix64 */
    uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&s->mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    ac.seed = z ^ (z >> 31);
    return ac;
}

/* ---- GET routes ------------------------------------------------------------------------------ */

static void add_clean(cJSON *o, const char *key, const char *s) {
    srv_buf b = {0}; /* the alias and the template are the user's bytes */
    srv_utf8_append_clean(&b, s ? s : "", s ? strlen(s) : 0);
    cJSON_AddStringToObject(o, key, b.p ? b.p : "");
    srv_buf_free(&b);
}

static const char *draft_kind(const srv *s) {
    return s->dm && s->p.spec.ngram ? "ngram+model" : s->dm ? "model" : s->p.spec.ngram ? "ngram" : "none";
}

static cJSON *model_object(const srv *s) {
    cJSON *m = cJSON_CreateObject();
    add_clean(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "specdec");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx_slot", s->n_ctx);
    cJSON_AddNumberToObject(meta, "slots", s->n_slots);
    cJSON_AddStringToObject(meta, "draft", draft_kind(s));
    cJSON_AddNumberToObject(meta, "n_vocab", sd_tokenizer_n_vocab(s->tok));
    return m;
}

/* GET /props: what a client may want to know before it asks (llama-server's names where it has them). */
static char *props_json(const srv *s) {
    cJSON *o = cJSON_CreateObject();
    add_clean(o, "model", s->model_name);
    cJSON_AddNumberToObject(o, "total_slots", s->n_slots);
    cJSON *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(d, "n_ctx", s->n_ctx);
    size_t tl = 0;
    const char *tmpl = sd_tokenizer_chat_template(s->tok, &tl);
    if (tmpl) add_clean(o, "chat_template", tmpl);
    else cJSON_AddNullToObject(o, "chat_template");
    cJSON_AddStringToObject(o, "chat_format", sd_chat_name(s->chat));
    cJSON *sp = cJSON_AddObjectToObject(o, "speculative");
    cJSON_AddStringToObject(sp, "draft", draft_kind(s));
    const sd_spec_params *p = &s->p.spec;
    cJSON_AddStringToObject(sp, "draft_mode", sd_draft_mode_name(p->draft_mode));
    cJSON_AddNumberToObject(sp, "n_max", p->draft_max);
    if (p->draft_mode == SD_DRAFT_PMIN) cJSON_AddNumberToObject(sp, "p_min", p->p_min);
    if (p->ngram) {
        cJSON_AddNumberToObject(sp, "ngram_min", p->ngram_min);
        cJSON_AddNumberToObject(sp, "ngram_max", p->ngram_max);
    }
    cJSON_AddBoolToObject(sp, "by_batch_size", s->auto_spec);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

/* /health: 200 ready; 503 loading, draining, or (with --health-busy) busy. */
static enum MHD_Result health(srv *s, struct MHD_Connection *c) {
    pthread_mutex_lock(&s->mu);
    const char *st = !s->ready ? "loading" : s->draining ? "draining"
                     : s->p.health_busy && s->n_busy >= s->n_slots && s->q_len >= s->p.queue_max ? "busy"
                                                                                                 : NULL;
    pthread_mutex_unlock(&s->mu);
    if (!st) return respond(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL, NULL);
    srv_err e;
    srv_err_set(&e, 503, "unavailable_error", NULL, st, "%s",
                !strcmp(st, "loading") ? "loading model" : !strcmp(st, "draining") ? "the server is draining: it shuts down once its requests are done"
                                                                                   : "every slot is busy and the queue is full");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", st);
    char *ej = srv_err_json(&e);
    cJSON *ev = ej ? cJSON_Parse(ej) : NULL;
    free(ej);
    if (ev) cJSON_AddItemToObject(o, "error", cJSON_DetachItemFromObject(ev, "error"));
    cJSON_Delete(ev);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return respond(s, c, 503, "application/json", js, MHD_HTTP_HEADER_RETRY_AFTER, "1");
}

static enum MHD_Result get_route(srv *s, struct MHD_Connection *c, conn_state *cs) {
    const int route = k_routes[cs->ri].route;
    if (route == SRV_ROUTE_HEALTH) return health(s, c);
    pthread_mutex_lock(&s->mu);
    const int ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    srv_err e;
    if (!ready) {
        srv_err_set(&e, 503, "unavailable_error", NULL, "loading", "loading model");
        return respond_err(s, c, &e, NULL, NULL);
    }
    if (route == SRV_ROUTE_METRICS)
        return respond(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(s), NULL, NULL);
    if (route == SRV_ROUTE_PROPS) return respond(s, c, 200, "application/json", props_json(s), NULL, NULL);
    if (route == SRV_ROUTE_MODEL && strcmp(cs->id, s->model_name) != 0) {
        srv_err_set(&e, 404, "invalid_request_error", "model", "model_not_found", "The model '%.200s' does not exist", cs->id);
        return respond_err(s, c, &e, NULL, NULL);
    }
    cJSON *o;
    if (route == SRV_ROUTE_MODEL) {
        o = model_object(s);
    } else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(s));
    }
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

int srv_http_client_gone(srv_req *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    /* libmicrohttpd's socket is the door's pair (net.c): hung up when the client reset or a write
     * to it failed, only its reading side ended when the client ended its sending side, which is
     * not the client leaving (a reset after it still hangs the pair up) */
    const int fd = ci->connect_fd;
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) < 0) return 0;
    if (pf.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (!(pf.revents & POLLRDHUP) || r->probed) return 0;
    /* its sending side ended: a probe is written once, which a client that left fails */
    r->probed = 1;
    if (r->g.stream) { /* a comment line: every SSE reader skips it */
        srv_buf_puts(&r->out, ": keep-alive\n\n");
        srv_http_wake(r);
    } else if (r->http11 && r->suspended) { /* nothing of the response is out yet: an interim answer */
        static const char processing[] = "HTTP/1.1 102 Processing\r\n\r\n";
        if (send(fd, processing, sizeof processing - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return 1;
    }
    return 0;
}

/* ---- generation requests ------------------------------------------------------------------- */

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
    return respond(s, c, (unsigned)status, "application/json", body, status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, "1");
}

/* A parsed request into the engine's queue, then its stream or (later) its answer. */
static enum MHD_Result submit(srv *s, struct MHD_Connection *c, conn_state *cs) {
    srv_err e;
    const int stream = cs->job.g.stream;
    srv_req *r = NULL;
    if (srv_submit(s, &cs->job.g, c, &r, &e) != 0) {
        srv_gen_free(&cs->job.g);
        cs->answered = 1;
        return respond_err(s, c, &e, NULL, NULL);
    }
    r->srv = s;
    r->http11 = cs->http11;
    cs->req = r;
    if (stream) {
        cs->answered = 1;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, r, sse_free);
        if (!resp) {
            sse_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        common_headers(s, resp);
        const enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        srv_http_count(s, 200);
        return rc;
    }
    return answer(s, c, cs); /* the answer comes when the engine has it (it may have it already) */
}

/* The body's bytes are done with: its budget goes back. */
static void release_body(srv *s, conn_state *cs) {
    srv_buf_free(&cs->body);
    if (cs->charged) {
        pthread_mutex_lock(&s->net_mu);
        s->buffered -= cs->charged;
        pthread_mutex_unlock(&s->net_mu);
        cs->charged = 0;
    }
}

/* A POST's body is in: tokenized by a worker (the connection waits suspended), then answered or
 * submitted. */
static enum MHD_Result post_route(srv *s, struct MHD_Connection *c, conn_state *cs) {
    if (cs->req) return answer(s, c, cs);
    if (!cs->job_queued) {
        cs->job_queued = 1;
        cs->job.route = k_routes[cs->ri].route;
        cs->job.body = cs->body.p ? cs->body.p : "";
        cs->job.len = cs->body.len;
        cs->job.conn = c;
        pthread_mutex_lock(&s->mu);
        MHD_suspend_connection(c); /* before the job can finish: the worker resumes it */
        srv_work_submit_locked(s, &cs->job);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    pthread_mutex_lock(&s->mu);
    const int done = cs->job.done;
    pthread_mutex_unlock(&s->mu);
    if (!done) return MHD_YES; /* resumed for another reason: the worker resumes it again */
    release_body(s, cs);
    if (cs->job.rc != 0) {
        cs->answered = 1;
        return respond_err(s, c, &cs->job.e, NULL, NULL);
    }
    if (cs->job.resp) {
        char *js = cs->job.resp;
        cs->job.resp = NULL;
        cs->answered = 1;
        return respond(s, c, 200, "application/json", js, NULL, NULL);
    }
    return submit(s, c, cs);
}

/* ---- the request --------------------------------------------------------------------------- */

/* Decides from the head what the request gets: a route, or an error answered once the body is
 * in (keep-alive survives it). Returns MHD_NO only to answer at once and close: a body announced
 * far past the limit, or one a client waits to be invited to send. */
static enum MHD_Result classify(srv *s, struct MHD_Connection *c, conn_state *cs, const char *url, const char *method) {
    const int ri = cs->ri = find_route(url);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    cs->declared = cl ? strtoull(cl, NULL, 10) : 0;
    if (ri < 0) {
        defer_err(cs, 404, "invalid_request_error", "not_found", NULL, NULL, "no route %.16s %.200s", method, url);
        return MHD_YES;
    }
    const char *want = k_routes[ri].method;
    if (!strcmp(method, "OPTIONS")) { /* a CORS preflight: no key needed, the browser sends none */
        if (!s->cors) defer_err(cs, 405, "invalid_request_error", "method_not_allowed", MHD_HTTP_HEADER_ALLOW, want,
                                "%s does not take OPTIONS (the server answers CORS preflights with --cors)", k_routes[ri].path);
        return MHD_YES;
    }
    if (strcmp(method, want) != 0 && !(!strcmp(want, "GET") && !strcmp(method, "HEAD"))) {
        defer_err(cs, 405, "invalid_request_error", "method_not_allowed", MHD_HTTP_HEADER_ALLOW, want, "%s does not take %.16s",
                  k_routes[ri].prefix ? url : k_routes[ri].path, method);
        return MHD_YES;
    }
    if (!k_routes[ri].open && !authorized(s, c)) {
        defer_err(cs, 401, "authentication_error", "invalid_api_key", MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer",
                  "missing or invalid API key (send Authorization: Bearer KEY)");
        return MHD_YES;
    }
    if (k_routes[ri].prefix && !(cs->id = strdup(url + strlen(k_routes[ri].path)))) return MHD_NO;
    if (strcmp(want, "POST") != 0) return MHD_YES;
    pthread_mutex_lock(&s->mu);
    const int ready = s->ready, draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    if (!ready || draining) {
        defer_err(cs, 503, "unavailable_error", draining ? "server_draining" : "loading", MHD_HTTP_HEADER_RETRY_AFTER, "1",
                  "%s", draining ? "the server is draining: retry elsewhere" : "loading model");
        return MHD_YES;
    }
    if (cs->declared > s->p.max_body) {
        /* A client that waits for "100 Continue", or one announcing far more than it may send, is
         * answered now (and the connection closed). Another is already sending: answering
         * mid-upload and closing races its send (it may see a reset, not the 413), so its body is
         * read, dropped, and answered once in. */
        const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
        srv_err e;
        srv_err_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                    "request body of %llu bytes exceeds the limit of %zu bytes", cs->declared, s->p.max_body);
        if ((ex && !strcasecmp(ex, "100-continue")) || cs->declared > 16 * (unsigned long long)s->p.max_body) {
            cs->answered = 1;
            return respond_err(s, c, &e, NULL, NULL);
        }
        cs->err = e;
    }
    return MHD_YES;
}

/* A piece of the body: kept, or (when the answer is already an error) read and dropped. Bytes
 * past each connection's first SRV_BODY_FREE come out of the shared budget; a body that does not
 * fit it gets 503 once in. MHD_NO: cut the connection off (it sends far past any limit). */
static enum MHD_Result take_body(srv *s, conn_state *cs, const char *upload, size_t n) {
    if (!cs->err.status && cs->body.len + n > s->p.max_body) {
        srv_err_set(&cs->err, 413, "invalid_request_error", NULL, "request_too_large",
                    "request body exceeds the limit of %zu bytes", s->p.max_body);
        release_body(s, cs);
    }
    if (!cs->err.status) {
        const size_t after = cs->body.len + n, over = after > SRV_BODY_FREE ? after - SRV_BODY_FREE : 0;
        const size_t need = over > cs->charged ? over - cs->charged : 0;
        int ok = 1;
        if (need) {
            pthread_mutex_lock(&s->net_mu);
            ok = s->buffered + need <= s->p.buffer_limit;
            if (ok) s->buffered += need;
            pthread_mutex_unlock(&s->net_mu);
            if (ok) cs->charged += need;
        }
        if (!ok) {
            srv_err_set(&cs->err, 503, "unavailable_error", NULL, "server_busy",
                        "the server holds as many request bytes as it may (--buffer-limit): retry later");
            release_body(s, cs);
        } else {
            if (!cs->body.cap && cs->declared > n && cs->declared <= s->p.max_body) { /* once, not by doublings */
                if ((cs->body.p = malloc((size_t)cs->declared + 1))) cs->body.cap = (size_t)cs->declared + 1;
            }
            srv_buf_put(&cs->body, upload, n);
            return cs->body.oom ? MHD_NO : MHD_YES;
        }
    }
    cs->dropped += n;
    return cs->dropped > 16 * s->p.max_body ? MHD_NO : MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* the headers are in: decide, but answer only once the body is (keep-alive) */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->http11 = strcmp(version, MHD_HTTP_VERSION_1_0) != 0;
        return classify(s, c, cs, url, method);
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        return take_body(s, cs, upload, n);
    }
    if (!cs->full) { /* the whole request: no deadline while it is answered */
        cs->full = 1;
        srv_net_set_deadline(s, c, 0);
    }
    if (cs->answered) return MHD_YES;
    if (cs->err.status) {
        cs->answered = 1;
        release_body(s, cs);
        return respond_err(s, c, &cs->err, cs->hdr, cs->hval);
    }
    if (!strcmp(method, "OPTIONS")) { /* a CORS preflight */
        cs->answered = 1;
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", rh ? rh : "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        common_headers(s, resp);
        const enum MHD_Result rc = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        srv_http_count(s, 204);
        return rc;
    }
    if (strcmp(k_routes[cs->ri].method, "POST") != 0) {
        cs->answered = 1;
        return get_route(s, c, cs);
    }
    return post_route(s, c, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) return;
    if (cs->req) {
        pthread_mutex_lock(&s->mu);
        srv_req_detach_locked(s, cs->req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        pthread_mutex_unlock(&s->mu);
    }
    if (cs->job_queued) { /* a worker may still hold the body: wait for it (only in a shutdown) */
        pthread_mutex_lock(&s->mu);
        while (!cs->job.done) pthread_cond_wait(&s->work_cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        srv_gen_free(&cs->job.g);
        free(cs->job.resp);
    }
    release_body(s, cs);
    free(cs->id);
    free(cs);
    *con_cls = NULL;
    /* the next request on this connection: --timeout for its first line, then its own deadline */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) srv_net_set_deadline(s, c, s->p.timeout_s);
}

/* The first line of a request is in: it has --request-timeout to arrive whole. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    srv *s = cls;
    srv_net_set_deadline(s, c, s->p.request_timeout_s);
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) srv_net_conn_started(s, c, socket_context);
    else srv_net_conn_closed(s, socket_context);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

sd_status srv_start(const srv_params *p, srv **out) {
    *out = NULL;
    if (p->parallel < 1 || p->queue_max < 0 || p->timeout_s < 1 || p->request_timeout_s < 1 || p->max_body < 1 ||
        p->max_conns < 1 || p->port < 0 || p->port > 65535)
        return sd_fail(SD_ERR_INVALID_ARG, "serve: parallel %d, queue %d, timeout %d, request timeout %d, body limit %zu, "
                                           "connections %d, port %d",
                       p->parallel, p->queue_max, p->timeout_s, p->request_timeout_s, p->max_body, p->max_conns, p->port);
    srv *s = calloc(1, sizeof *s);
    if (!s) return sd_fail(SD_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->listen_fd = s->door_stop_fd = s->door_epoll = -1;
    s->host = strdup(p->host);
    s->api_key = p->api_key ? strdup(p->api_key) : NULL;
    s->model_name = strdup(p->model_name ? p->model_name : "specdec");
    s->cors = p->cors ? strdup(p->cors) : NULL;
    s->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->net_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->net_cv, NULL);
    /* Every connection holds three descriptors (the client's socket and the pair to libmicrohttpd,
     * net.c): take what the hard limit allows, and cap the connections below it. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        const rlim_t room = rl.rlim_cur > 256 ? rl.rlim_cur - 128 : 64; /* models, threads, the door's slack */
        if (3 * (rlim_t)s->p.max_conns + 64 > room) {
            fprintf(stderr, "warning: serve: --max-connections %d needs more descriptors than the limit of %llu: taking %llu\n",
                    s->p.max_conns, (unsigned long long)rl.rlim_cur, (unsigned long long)((room - 64) / 3));
            s->p.max_conns = (int)((room - 64) / 3);
        }
    }
    sd_status st = srv_net_listen(s);
    if (st != SD_OK) {
        srv_free(s);
        return st;
    }
    const unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->p.max_conns + 128, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK,
                            on_uri, s, MHD_OPTION_END);
    if (!s->d) {
        srv_free(s);
        return sd_fail(SD_ERR_IO, "serve: cannot start the HTTP library");
    }
    if ((st = srv_net_start(s)) != SD_OK || (st = srv_work_start(s)) != SD_OK) {
        srv_free(s);
        return st;
    }
    *out = s;
    return SD_OK;
}

int srv_port(const srv *s) { return s->port; }

/* Waits (polling) until pred holds or the time is up; 1 when it holds. */
static int wait_until(srv *s, int (*pred)(srv *), double seconds) {
    for (const double t0 = sd_now();;) {
        pthread_mutex_lock(&s->mu);
        const int ok = pred(s);
        pthread_mutex_unlock(&s->mu);
        if (ok) return 1;
        if (sd_now() - t0 >= seconds) return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int idle(srv *s) { return !s->live && s->n_jobs == 0; }
static int no_live(srv *s) { return !s->live; }

void srv_shutdown(srv *s, double drain_s) {
    if (!s || !s->d) return;
    pthread_mutex_lock(&s->mu);
    s->draining = 1; /* /health 503, new requests 503: the requests already taken finish */
    pthread_mutex_unlock(&s->mu);
    if (drain_s > 0) wait_until(s, idle, drain_s);
    srv_net_close_listener(s); /* no new connections */
    srv_engine_stop(s);  /* the rest end: queued ones with 503, running ones with an error event */
    srv_work_stop(s);
    wait_until(s, no_live, 10.0); /* their last bytes go out */
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
    srv_net_stop(s); /* after libmicrohttpd: the door relays what it wrote last */
}

void srv_free(srv *s) {
    if (!s) return;
    srv_shutdown(s, 0);
    srv_net_stop(s);
    srv_engine_stop(s);
    srv_work_stop(s);
    srv_slots_free(s);
    if (s->listen_fd >= 0) close(s->listen_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->net_mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->net_cv);
    free(s->host);
    free(s->api_key);
    free(s->model_name);
    free(s->cors);
    free(s);
}
