/* The server's pieces and what they share: the parsed request (api.c), the request as it lives in
 * the server and the server itself (sched.c runs the slots, http.c the connections, metrics.c
 * the Prometheus text). Fields marked "mu" are guarded by srv.mu. */
#ifndef SD_SERVER_INTERNAL_H
#define SD_SERVER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "server/server.h"
#include "server/text.h"
#include "specdec/draft.h"

struct MHD_Daemon;
struct MHD_Connection;

/* ---- api.c: OpenAI requests and responses ---------------------------------------------- */

/* An error as OpenAI's error JSON carries it: {"error": {"message", "type", "param", "code"}}. */
typedef struct {
    int status;        /* HTTP status */
    const char *type;  /* "invalid_request_error", "authentication_error", ... */
    const char *param; /* the request field at fault, or NULL */
    const char *code;  /* a machine-readable code ("context_length_exceeded") or NULL */
    char msg[600];
} srv_err;

void srv_err_set(srv_err *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error's JSON (malloc'd). */
char *srv_err_json(const srv_err *e);

/* A generation request, parsed and checked. */
typedef struct {
    int chat;              /* /v1/chat/completions */
    int stream, include_usage;
    int32_t *ids;          /* the prompt */
    int n_ids;
    int max_tokens;        /* tokens to generate at most (> 0, fits the context) */
    sd_sampler_params sampling; /* with the mode: spec_sampling, else the server's */
    sd_spec_params spec;   /* the server's engine parameters with the request's draft settings
                              (llama-server's speculative.n_max, n_min, p_min) */
    int ignore_eos;
    char *stops[SRV_MAX_STOPS];
    int n_stops;
} srv_gen;

void srv_gen_free(srv_gen *g);

/* What parsing needs to know of the server. */
typedef struct {
    const sd_tokenizer *tok;
    sd_chat_format chat;
    int n_ctx;        /* positions per slot */
    int special;      /* completions: parse special tokens in prompt text */
    int chat_special; /* chat: parse special tokens in the messages' text too */
    uint64_t seed;    /* the seed of a request that gives none */
    const sd_spec_params *spec; /* the server's engine parameters (draft settings, sampling mode) */
    int drafting, model_drafts; /* the slots have a drafter; it draws from a draft model */
} srv_api_ctx;

/* Parses a request body (len bytes; need not be NUL-terminated) of /v1/completions (chat 0) or
 * /v1/chat/completions (chat 1). 0 on success; -1 with *e filled (400 naming the field). */
int srv_parse_gen(const srv_api_ctx *c, int chat, const char *body, size_t len, srv_gen *g, srv_err *e);

/* What a finished (or finishing) request reports. */
typedef struct {
    const char *finish_reason; /* "stop", "length", "abort" */
    int prompt_tokens, completion_tokens;
    const sd_spec_stats *stats; /* the engine's, for timings (NULL: none) */
} srv_outcome;

/* The whole response of a request that is not streamed (malloc'd JSON). */
char *srv_response_json(const srv_gen *g, const char *id, long created, const char *model, const char *text,
                        size_t len, const srv_outcome *o);
/* One server-sent event of a streamed response: "data: {chunk}\n\n". role: the chat's first chunk;
 * o: the last chunk (finish_reason, usage, timings), else NULL. */
void srv_sse_chunk(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model, const char *text,
                   size_t len, int role, const srv_outcome *o);
/* The usage-only chunk (stream_options.include_usage): empty choices, usage. */
void srv_sse_usage(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_outcome *o);
void srv_sse_error(srv_buf *out, const srv_err *e);
/* "data: [DONE]\n\n" */
void srv_sse_done(srv_buf *out);

/* ---- the server ---------------------------------------------------------------------- */

typedef struct srv_req srv_req;
typedef struct srv srv;
struct srv_req {
    srv *srv;
    srv_gen g;
    char id[48];
    long created;
    double t_arrival;
    /* mu */
    int refs;                 /* the connection, the queue or slot, a stream response */
    int cancelled;            /* the client is gone */
    struct MHD_Connection *conn; /* until MHD completes the request */
    int suspended;
    srv_buf out;              /* stream: bytes not yet sent, from out_pos */
    size_t out_pos;
    int finished;             /* every byte of the response is produced */
    int status;               /* not streamed: the response */
    char *body;
    srv_req *q_next;          /* waiting for a slot */
    srv_req *live_prev, *live_next; /* requests with a connection */
    /* engine thread */
    srv_text text;
    int n_gen;                /* tokens taken into the text */
    int slot;
};

typedef struct {
    int id;
    sd_spec *spec;              /* the pair's engine of sequence id */
    volatile sig_atomic_t stop; /* polled by the engine between tokens */
    srv_req *req;               /* mu; NULL: free */
    unsigned long last_used;
} srv_slot;

/* The batch switch's figures for one batch size, as /metrics shows them (copied from the engine
 * after each round, under mu). */
typedef struct {
    double rate[2]; /* [0] plain rounds, [1] drafting allowed: tokens per second */
    int n[2];       /* rounds measured */
} srv_mode;

#define SRV_HTTP_CODES 600

typedef struct {
    unsigned long http[SRV_HTTP_CODES]; /* responses by status */
    unsigned long requests;             /* generation requests queued */
    unsigned long finished_stop, finished_length, finished_abort, finished_cancelled, finished_error;
    unsigned long prompt_tokens, prompt_cached, gen_tokens;
    double prompt_s, gen_s;             /* engine-thread seconds in prefills and in rounds */
    unsigned long rounds, rounds_drafting, pass_tokens;
    unsigned long drafts, draft_tokens, accepted, accepted_at[SD_MAX_DRAFT];
} srv_metrics;

struct srv {
    srv_params p;
    char *host, *api_key, *model_name; /* copies */
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* mu */
    int ready, stopping;
    srv_req *q_head, *q_tail;
    int q_len, n_busy;
    srv_req *live;
    srv_metrics m;
    unsigned long next_id;
    uint64_t rng;
    /* set by srv_load */
    const sd_model *tm, *dm;
    const sd_tokenizer *tok;
    sd_chat_format chat;
    int n_ctx;
    sd_pair *pair;    /* the contexts, drafters and engines of every slot */
    srv_slot *slots;
    int n_slots;
    srv_mode *modes;  /* [n_slots + 1], by busy slots: the batch switch's figures (mu) */
    int auto_spec;    /* the engine switches drafting per batch size (sd_draft_switch) */
    pthread_t engine;
    int engine_started;
    unsigned long use_clock;
};

/* sched.c */
/* Queues a parsed request (taking over g): 0, or the error (429 queue full, 503 stopping). On
 * success *out holds the request with references for the caller's connection (and its stream
 * response when g->stream). */
int srv_submit(srv *s, srv_gen *g, struct MHD_Connection *conn, srv_req **out, srv_err *e);
/* Drops one reference; the last frees the request. Called with mu held. */
void srv_req_unref_locked(srv_req *r);
/* The connection is done with r (completed: the whole response went out; else the client left or
 * timed out, and r is cancelled); drops its reference. mu held. */
void srv_req_detach_locked(srv *s, srv_req *r, int completed);
sd_status srv_engine_start(srv *s);
void srv_engine_stop(srv *s); /* ends every request, joins the thread */
void srv_slots_free(srv *s);

/* http.c */
/* 1 when the client of r's connection has closed it (a peek at its socket). mu held. */
int srv_http_client_gone(const srv_req *r);
/* Wakes r's suspended connection (new stream bytes, or the response). mu held. */
void srv_http_wake(srv_req *r);

/* metrics.c */
char *srv_metrics_text(srv *s); /* takes mu */

#endif
