/* `specdec serve`: an OpenAI-compatible HTTP server (libmicrohttpd) over N slots, each a sequence
 * of one target context (and of one draft context) with its own engine, all stepped together by
 * one engine thread so that every round is one batched target pass. */
#ifndef SD_SERVER_H
#define SD_SERVER_H

#include <stddef.h>

#include "specdec/chat.h"
#include "specdec/model.h"
#include "specdec/spec.h"
#include "specdec/status.h"

typedef struct {
    const char *host;       /* address to bind (a numeric IPv4/IPv6 address or a host name) */
    int port;               /* 0: any free port (srv_port tells which) */
    int parallel;           /* slots */
    int queue_max;          /* requests waiting for a slot at most; more get 429 */
    int timeout_s;          /* a connection idle (or stalled) this long is closed */
    int request_timeout_s;  /* a request must arrive whole (headers and body) within this */
    int max_conns;          /* connections at once; more get 503 */
    size_t max_body;        /* request bodies larger than this get 413 */
    size_t buffer_limit;    /* body bytes all connections together hold beyond SRV_BODY_FREE each */
    const char *cors;       /* Access-Control-Allow-Origin for this origin ("*": any); NULL: no CORS */
    int health_busy;        /* /health says 503 busy when every slot is busy and the queue is full */
    int shutdown_timeout_s; /* the drain `specdec serve` gives srv_shutdown on a signal */
    const char *api_key;    /* NULL: no authentication */
    const char *model_name; /* the id /v1/models lists and responses carry */
    int special;            /* completions: parse special tokens written in a prompt */
    int chat_special;       /* chat: parse special tokens written in the messages too */
    sd_spec_params spec;    /* the engine's: drafting (draft_max, draft_mode, p_min, ngram...), the
                               contexts (n_ctx per slot, kv_type); a request sets sampling, budget
                               and its own draft settings */
    int verbose;            /* a log line per request on stderr */
} srv_params;

srv_params srv_default_params(void);

typedef struct srv srv;

/* Binds and starts answering: /health says 503 (loading) until srv_load succeeds. */
sd_status srv_start(const srv_params *p, srv **out);
int srv_port(const srv *s);
/* Takes the models (borrowed: they must outlive the server), creates the contexts, one engine
 * per slot and the engine thread; then the server is ready. draft may be NULL. */
sd_status srv_load(srv *s, const sd_model *target, const sd_model *draft, sd_chat_format chat);
/* Drains, then stops: /health says 503 draining and new requests get 503 with Retry-After while
 * the requests already taken finish, for at most drain_s seconds; then the ones left end with an
 * error (a stream's last event), their responses go out, and the server stops. */
void srv_shutdown(srv *s, double drain_s);
void srv_free(srv *s); /* NULL is fine; shuts down first if needed */

#endif
