/* The server's pieces and what they share: the parsed request (api.c), the request as it lives in
 * the server and the server itself (sched.c runs the slots, http.c the connections, metrics.c
 * the Prometheus text). Fields marked "mu" are guarded by srv.mu. */
#ifndef SD_SERVER_INTERNAL_H
#define SD_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "server/server.h"
#include "server/text.h"
#include "specdec/chat.h"
#include "specdec/draft.h"
#include "specdec/grammar.h"

struct MHD_Daemon;
struct MHD_Connection;

/* ---- api.c: OpenAI requests and responses ---------------------------------------------- */

/* An error as OpenAI's error JSON carries it: {"error": {"message", "type", "param", "code"}}. */
typedef struct {
    int status;        /* HTTP status */
    const char *type;  /* "invalid_request_error", "authentication_error", ... */
    char param[64];    /* the request field at fault, "" for none (a copy: the request is freed first) */
    const char *code;  /* a machine-readable code ("context_length_exceeded") or NULL */
    char msg[600];
} srv_err;

void srv_err_set(srv_err *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error's JSON (malloc'd). */
char *srv_err_json(const srv_err *e);

typedef struct srv_tools srv_tools; /* tools.c: a request's tool calling */

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
    sd_grammar *grammar;   /* owned: the output's constraint (grammar, json_schema, response_format, or the
                              calls tool_choice requires), or NULL */
    int n;                 /* choices, 1..the slots */
    int logprobs;          /* report each token's log-probability */
    int top_logprobs;      /* and the likeliest 0..SD_MAX_LOGPROBS tokens' */
    srv_tools *tools;      /* owned: the tools shown and the output read as calls, or NULL */
} srv_gen;

void srv_gen_free(srv_gen *g);

/* What parsing needs to know of the server. */
typedef struct {
    const sd_tokenizer *tok;
    sd_chat_format chat;
    int n_ctx;        /* positions per slot */
    int special;      /* completions: parse special tokens in prompt text */
    int chat_special; /* chat: parse special tokens in the messages' text too */
    int text_per_token; /* sd_tokenizer_max_text_per_token (0: none), for refusing by bytes */
    uint64_t seed;    /* the seed of a request that gives none */
    int n_slots;      /* the most choices a request may ask for */
    const sd_spec_params *spec; /* the server's engine parameters (draft settings, sampling mode) */
    int drafting, model_drafts; /* the slots have a drafter; it draws from a draft model */
} srv_api_ctx;

/* The fields of completion and chat requests (api.c's table, which the README mirrors). */
typedef enum { SRV_FIELD_TAKEN, SRV_FIELD_REFUSED, SRV_FIELD_IGNORED } srv_field_kind;
/* The value at which a refused field changes nothing, and passes. */
typedef enum {
    SRV_NEUTRAL_NONE,      /* none: any value but null is refused */
    SRV_NEUTRAL_ONE,       /* 1 */
    SRV_NEUTRAL_ZERO,      /* 0 */
    SRV_NEUTRAL_FALSE,     /* false or 0 */
    SRV_NEUTRAL_EMPTY,     /* [], {} or "" */
    SRV_NEUTRAL_NO_CALL,   /* "none" */
    SRV_NEUTRAL_TEXT,      /* {"type": "text"} */
    SRV_NEUTRAL_TEXT_ONLY, /* ["text"] */
} srv_neutral;
typedef struct {
    const char *name;
    unsigned endpoints; /* 1: completions, 2: chat, 3: both */
    srv_field_kind kind;
    srv_neutral neutral;
    const char *note;   /* refused: the message; else what it is */
} srv_field;
const srv_field *srv_fields(int *n);

/* A request body checked and parsed (json_req.c): UTF-8, strict JSON syntax, one value, no key
 * given twice, no \u0000 in a string; NULL with *e filled (a 400 naming the byte or the field). */
struct cJSON;
struct cJSON *srv_json_parse(const char *body, size_t len, srv_err *e);
/* Its two halves: the checks of the text (and the top-level "prompt" string's length once
 * unescaped into *prompt_bytes, 0 when there is none: a prompt may be refused by its length
 * before any tree is built), then the tree and the duplicate keys. */
int srv_json_check(const char *body, size_t len, size_t *prompt_bytes, srv_err *e);
struct cJSON *srv_json_tree(const char *body, size_t len, srv_err *e);

/* Parses a request body (len bytes; need not be NUL-terminated) of /v1/completions (chat 0) or
 * /v1/chat/completions (chat 1). 0 on success; -1 with *e filled (400 naming the field). */
int srv_parse_gen(const srv_api_ctx *c, int chat, const char *body, size_t len, srv_gen *g, srv_err *e);

/* POST /tokenize and /detokenize with llama-server's shapes: the response JSON (malloc'd), or
 * NULL with *e filled. */
char *srv_tokenize_json(const srv_api_ctx *c, const char *body, size_t len, srv_err *e);
char *srv_detokenize_json(const srv_api_ctx *c, const char *body, size_t len, srv_err *e);

/* A response id as OpenAI writes them, "chatcmpl-" or "cmpl-" and 24 random letters and digits:
 * unique across restarts. */
void srv_make_id(char *out, size_t cap, int chat);

/* What a finished request reports besides its choices. */
typedef struct {
    int prompt_tokens, completion_tokens; /* completion: every choice's */
    int cached_tokens;          /* prompt tokens the slot already held */
    const sd_spec_stats *stats; /* the engine's (one choice), for timings (NULL: none) */
} srv_outcome;

/* One emitted token's log-probabilities, placed in its choice's text. */
typedef struct {
    sd_token_logprobs lp;
    int32_t id, prev;   /* prev: the token before it, which its text depends on */
    uint32_t off, coff; /* its first byte, and character, in the choice's text */
} srv_lp;

/* A choice of a response, or its part in a chunk. */
typedef struct {
    int index;
    const char *text;           /* raw bytes, cleaned to UTF-8 when written */
    size_t len;
    const char *finish_reason;  /* "stop" or "length"; NULL: a chunk before the end */
    const srv_lp *lp;           /* its tokens' log-probabilities, with g->logprobs */
    int n_lp;
    int role;                   /* a chat chunk: the first, carrying the role */
    const sd_spec_stats *stats; /* the last chunk's or the response's timings (NULL: none) */
} srv_choice_out;

/* The whole response of a request that is not streamed (malloc'd JSON); timings at the top for
 * one choice (llama-server's place), in each choice for several. */
char *srv_response_json(const srv_gen *g, const sd_tokenizer *t, const char *id, long created, const char *model,
                        const srv_choice_out *ch, int n, const srv_outcome *o);
/* One server-sent event of a streamed response: "data: {chunk}\n\n" of one choice. Its last chunk
 * has finish_reason and timings; usage comes only in the usage chunk, as OpenAI sends it. With
 * include_usage every chunk carries "usage": null, as OpenAI's do. */
void srv_sse_chunk(srv_buf *out, const srv_gen *g, const sd_tokenizer *t, const char *id, long created, const char *model,
                   const srv_choice_out *c);
/* The usage-only chunk (stream_options.include_usage): empty choices, usage. */
void srv_sse_usage(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_outcome *o);
void srv_sse_error(srv_buf *out, const srv_err *e);
/* One chunk whose choice has delta (taken over) and finish (NULL: none); o: timings, as the last chunk. */
void srv_sse_delta(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model, struct cJSON *delta,
                   const char *finish, const sd_spec_stats *stats);
/* "data: [DONE]\n\n" */
void srv_sse_done(srv_buf *out);

/* ---- tools.c: tool calling ---------------------------------------------------------------- */

#define SRV_MAX_TOOLS 128

/* tools, tool_choice and parallel_tool_calls of a chat request o (body: its text, whose "tools" the
 * template writes as given): 0 with g->tools set (NULL: no tools, or tool_choice none: nothing is
 * shown to the model or read as a call) and for required or a named function g->grammar; -1 with *e. */
int srv_tools_parse(const srv_api_ctx *c, const struct cJSON *o, const char *body, size_t len, srv_gen *g, srv_err *e);
void srv_tools_free(srv_tools *t);
/* The tools' JSON for the template (NULL: none). */
const char *srv_tools_json(const srv_tools *t);
/* The keys a message of role may have (NULL-terminated). */
const char *const *srv_tools_message_keys(const char *role);
/* An assistant message's tool_calls (and a tool message's tool_call_id) into m: m->tool_calls is
 * malloc'd (the caller frees it), its strings point into msg. 0, or -1 with *e. */
int srv_tools_message(const struct cJSON *msg, int i, sd_chat_msg *m, srv_err *e);
/* The response's choice (its message and finish_reason) with the text read as calls. */
void srv_tools_choice(struct cJSON *choice, const srv_gen *g, const char *text, size_t len);
/* srv_sse_chunk for a request with tools (one choice, no logprobs: srv_tools_parse refuses more):
 * the text read as calls as it comes (co->role: the first chunk; co->finish_reason: the last). */
void srv_tools_sse(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_choice_out *co);

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
    int http11;               /* the request is HTTP/1.1 (an interim 1xx answer is allowed) */
    int probed;               /* the client's end of sending was seen and a probe written */
    srv_buf out;              /* stream: bytes not yet sent, from out_pos */
    size_t out_pos;
    int finished;             /* every byte of the response is produced */
    int status;               /* not streamed: the response */
    char *body;
    srv_req *q_next;          /* waiting for a slot */
    srv_req *live_prev, *live_next; /* requests with a connection */
    /* engine thread */
    struct srv_choice *ch;    /* [g.n] */
    int n_done;               /* choices finished */
    int slots_held;           /* slots still running or holding a choice */
    int ended;                /* the response is complete (or failed): its slots are released */
    srv_buf pend;             /* bytes for the connection, produced this round */
    int end_status;           /* ... and the response, once ended */
    char *end_body;
    const char *reason;       /* for the metrics: "stop", "length"; NULL: an error */
    int shutdown;             /* ended by the server's shutdown */
};

/* One choice of a request, as its slot generates it (engine thread). */
typedef struct srv_choice {
    srv_text text;
    int n_gen;                /* tokens taken into the text */
    int slot;                 /* -1: none yet */
    const char *finish;       /* "stop" or "length" once finished */
    srv_lp *lp;               /* with g.logprobs: every token's */
    int n_lp, cap_lp, lp_sent; /* entries, room, entries handed out in chunks */
    uint32_t chars;           /* characters of text so far (text_offset) */
    sd_spec_stats st;         /* the engine's at the end */
} srv_choice;

typedef struct {
    int id;
    sd_spec *spec;              /* the pair's engine of sequence id */
    srv_req *req;               /* mu; NULL: free */
    int choice;                 /* which of req's */
    unsigned long last_used;
} srv_slot;

/* The batch switch's figures for one batch size, as /metrics shows them (copied from the engine
 * after each round, under mu). */
typedef struct {
    double rate[2]; /* [0] plain rounds, [1] drafting allowed: tokens per second */
    int n[2];       /* rounds measured */
} srv_mode;

#define SRV_HTTP_CODES 600
#define SRV_WORKERS 2                 /* tokenizer threads */
#define SRV_BODY_FREE ((size_t)16 << 10) /* body bytes a connection holds outside the shared budget */
#define SRV_HEAD_MAX ((size_t)16 << 10)  /* a request's head (line and headers), at most */

typedef struct {
    unsigned long http[SRV_HTTP_CODES]; /* responses by status */
    unsigned long requests;             /* generation requests queued */
    unsigned long finished_stop, finished_length, finished_shutdown, finished_cancelled, finished_error;
    unsigned long prompt_tokens, prompt_cached, gen_tokens;
    double prompt_s, gen_s;             /* engine-thread seconds in prefills and in rounds */
    unsigned long rounds, rounds_drafting, pass_tokens;
    unsigned long drafts, draft_tokens, accepted, accepted_at[SD_MAX_DRAFT];
} srv_metrics;

/* A connection libmicrohttpd serves (net.c), for the deadlines: a request must arrive whole
 * (headers and body) within --request-timeout of its first line, and an idle keep-alive connection
 * may wait --timeout for it. net_mu. */
typedef struct srv_conn {
    int fd;
    double deadline; /* sd_now() past which it is cut off; 0: none (a request is being answered) */
    int killed;
    struct srv_conn *prev, *next;
} srv_conn;

/* Where a client's request stream is (frame.c): in a request head, or in the body it announced. */
typedef enum {
    SRV_FRAME_HEAD,
    SRV_FRAME_BODY,       /* left: bytes of a Content-Length body still to come */
    SRV_FRAME_CHUNK_SIZE, /* a chunked body's next size line */
    SRV_FRAME_CHUNK_DATA, /* left: bytes of the chunk still to come */
    SRV_FRAME_CHUNK_END,  /* the CRLF after a chunk's data */
    SRV_FRAME_TRAILER,    /* the trailer's lines, up to the empty one */
} srv_frame_at;
typedef struct {
    srv_frame_at at;
    unsigned long long left;
} srv_frame;
/* One step over the client's next bytes b[0..n) from where f is: the bytes that make its next
 * part (a whole request head, checked as libmicrohttpd would refuse it, *head then 1; body bytes;
 * a chunk's size line; ...), 0 when more bytes are needed first, or -1 with e set (f is then
 * not to be used again). */
long srv_frame_step(srv_frame *f, const char *b, size_t n, size_t max_body, int *head, srv_err *e);

/* A connection as the door holds it (net.c): the client's socket, the pair to libmicrohttpd, and
 * the bytes between them. */
typedef struct srv_link srv_link;

/* The routes (http.c). */
enum {
    SRV_ROUTE_HEALTH,
    SRV_ROUTE_MODELS,
    SRV_ROUTE_MODEL, /* /v1/models/{id} */
    SRV_ROUTE_METRICS,
    SRV_ROUTE_PROPS,
    SRV_ROUTE_COMPLETIONS,
    SRV_ROUTE_CHAT,
    SRV_ROUTE_TOKENIZE,
    SRV_ROUTE_DETOKENIZE,
};

/* Tokenizing a request body (work.c), off the HTTP thread. */
typedef struct srv_job {
    int route;
    const char *body;
    size_t len;
    /* results: the request (generation), or a response body (/tokenize), or the error */
    int rc;
    srv_gen g;
    char *resp;
    srv_err e;
    int done;
    struct MHD_Connection *conn; /* resumed when done */
    struct srv_job *next;
} srv_job;

/* Tokens generated per wall-clock second, in one-second buckets (metrics.c). */
#define SRV_RATE_BUCKETS 16
typedef struct {
    long sec[SRV_RATE_BUCKETS];
    double tokens[SRV_RATE_BUCKETS];
} srv_rate;

struct srv {
    srv_params p;
    char *host, *api_key, *model_name, *cors; /* copies */
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv, work_cv; /* the engine's; the tokenizer workers' */
    /* mu */
    int ready, draining, stopping;
    srv_req *q_head, *q_tail;
    int q_len, n_busy;
    srv_req *live;
    srv_metrics m;
    srv_rate rate;
    uint64_t rng;
    /* the door, the connections and their deadlines (net.c); net_mu */
    int listen_fd, door_stop_fd, door_epoll;
    pthread_t door, janitor;
    int door_started, janitor_started, janitor_stop;
    pthread_mutex_t net_mu;
    pthread_cond_t net_cv;
    srv_conn *conns;
    srv_link *links, *dead_links;
    int n_conns;              /* accepted and not yet closed */
    size_t buffered;          /* request body bytes held beyond each connection's first SRV_BODY_FREE */
    unsigned long timed_out;  /* connections cut off at a deadline */
    /* the tokenizer workers (work.c); mu */
    srv_job *jobs_small, *jobs_large; /* waiting, small bodies first */
    int n_jobs;                       /* waiting or being tokenized */
    int workers_stop, n_workers, picks;
    struct srv_worker {
        struct srv *s;
        int small_only; /* takes small bodies only: a usual request never waits behind a large one */
        pthread_t t;
    } workers[SRV_WORKERS];
    /* set by srv_load */
    const sd_model *tm, *dm;
    const sd_tokenizer *tok;
    sd_grammar_vocab *gvocab; /* the target tokenizer's, for every request's constraint */
    int text_per_token;
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
/* 1 when the client of r's connection is gone: its socket reset or in error. A client that only
 * closed its sending side (a half-close, legal HTTP) still reads its response; one that closed
 * the whole connection looks the same until it is written to, so on that end the server writes
 * once what any client ignores (an SSE comment, or an interim 102 Processing), and a client that
 * is gone answers it with a reset, seen at the next look. mu held. */
int srv_http_client_gone(srv_req *r);
/* Wakes r's suspended connection (new stream bytes, or the response). mu held. */
void srv_http_wake(srv_req *r);
/* Counts a response by status (takes mu). */
void srv_http_count(srv *s, unsigned status);
/* The context api.c parses with. */
srv_api_ctx srv_http_api_ctx(srv *s);

/* net.c: the listening socket and the door, the connections' deadlines */
sd_status srv_net_listen(srv *s);              /* binds; s->port */
sd_status srv_net_start(srv *s);               /* the door and the janitor threads */
void srv_net_close_listener(srv *s);           /* no new connections */
void srv_net_stop(srv *s);                     /* joins the threads, closes what the door holds */
void srv_net_conn_started(srv *s, struct MHD_Connection *c, void **socket_context);
void srv_net_conn_closed(srv *s, void **socket_context);
void srv_net_set_deadline(srv *s, struct MHD_Connection *c, double seconds); /* 0: none */
/* The door's answer to a request it refuses: OpenAI's error JSON with Connection: close. */
void srv_net_reply(srv *s, int fd, const srv_err *e, const char *extra_headers);

/* work.c: the tokenizer workers */
sd_status srv_work_start(srv *s);
void srv_work_stop(srv *s);   /* every job ends (waiting ones with 503), the threads are joined */
/* Queues j (mu held): a worker tokenizes it and resumes j->conn. */
void srv_work_submit_locked(srv *s, srv_job *j);

/* metrics.c */
char *srv_metrics_text(srv *s); /* takes mu */
void srv_rate_add(srv_rate *r, double now, double tokens); /* mu held */
double srv_rate_recent(const srv_rate *r, double now, int seconds); /* tokens per second */

#endif
