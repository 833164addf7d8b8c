/* OpenAI's completion and chat completion requests and responses: a request body checked field
 * by field (each error names the field, as a 400 in OpenAI's error shape), tokenized with the
 * model's tokenizer and chat template; responses, stream chunks and llama.cpp's timings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "specdec/stats.h"

void srv_err_set(srv_err *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

char *srv_err_json(const srv_err *e) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, "error");
    srv_buf clean = {0}; /* a message may quote the client's bytes */
    srv_utf8_append_clean(&clean, e->msg, strlen(e->msg));
    cJSON_AddStringToObject(in, "message", clean.p ? clean.p : "");
    cJSON_AddStringToObject(in, "type", e->type);
    if (e->param) cJSON_AddStringToObject(in, "param", e->param);
    else cJSON_AddNullToObject(in, "param");
    if (e->code) cJSON_AddStringToObject(in, "code", e->code);
    else cJSON_AddNullToObject(in, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    srv_buf_free(&clean);
    return s;
}

void srv_gen_free(srv_gen *g) {
    free(g->ids);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    memset(g, 0, sizeof *g);
}

/* ---- checking fields -------------------------------------------------------------------- */

static int bad(srv_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(srv_err *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    e->param = param;
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(e->msg, sizeof e->msg, "%s: ", param);
    vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

/* A field that is absent or null counts as not given. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(const cJSON *o, const char *name, int *out, srv_err *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return bad(e, name, "must be a boolean, got %s", type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_number(const cJSON *o, const char *name, double lo, double hi, int lo_open, double *out, srv_err *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad(e, name, "must be a number, got %s", type_name(v));
    const double x = v->valuedouble;
    if (!isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
        return bad(e, name, "must be in %c%g, %g], got %g", lo_open ? '(' : '[', lo, hi, x);
    *out = x;
    return 0;
}

/* An integer in [lo, hi] (a JSON number without a fraction). */
static int get_int(const cJSON *o, const char *name, double lo, double hi, double *out, srv_err *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return bad(e, name, "must be an integer, got %s", type_name(v));
    const double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x)) return bad(e, name, "must be an integer, got %g", x);
    if (x < lo || x > hi) return bad(e, name, "must be an integer in %.0f..%.0f, got %.0f", lo, hi, x);
    *out = x;
    return 0;
}

/* Fields that would change the result and that specdec does not implement: refused, not ignored
 * (unknown fields are ignored, as OpenAI clients expect). A field at its neutral value passes. */
static int refuse_unsupported(const cJSON *o, int chat, srv_err *e) {
    const cJSON *v;
    if ((v = field(o, "n")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return bad(e, "n", "only one choice per request is supported (n = 1)");
    if ((v = field(o, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return bad(e, "best_of", "only best_of = 1 is supported");
    if ((v = field(o, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return bad(e, "logit_bias", "logit biases are not supported");
    if ((v = field(o, "tools")) && !(cJSON_IsArray(v) && !v->child))
        return bad(e, "tools", "tool calling is not supported");
    if ((v = field(o, "tool_choice")) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "none")))
        return bad(e, "tool_choice", "tool calling is not supported");
    if ((v = field(o, "functions")) && !(cJSON_IsArray(v) && !v->child))
        return bad(e, "functions", "function calling is not supported");
    if ((v = field(o, "function_call")) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "none")))
        return bad(e, "function_call", "function calling is not supported");
    if ((v = field(o, "logprobs")) && !cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return bad(e, "logprobs", "log probabilities are not supported");
    if ((v = field(o, "top_logprobs")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return bad(e, "top_logprobs", "log probabilities are not supported");
    if ((v = field(o, "presence_penalty")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return bad(e, "presence_penalty", "penalties are not supported (only 0)");
    if ((v = field(o, "frequency_penalty")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return bad(e, "frequency_penalty", "penalties are not supported (only 0)");
    if ((v = field(o, "response_format"))) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsObject(v) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return bad(e, "response_format", "only {\"type\": \"text\"} is supported");
    }
    if (!chat) {
        if ((v = field(o, "echo")) && !cJSON_IsFalse(v)) return bad(e, "echo", "echoing the prompt is not supported");
        if ((v = field(o, "suffix")) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return bad(e, "suffix", "suffixes (insertion) are not supported");
    }
    return 0;
}

/* A JSON string escape \u0000 would cut cJSON's C string short: the text would silently lose
 * its tail, so such a body is refused. Backslashes only occur inside strings. */
static long nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '\\') {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return (long)i;
            i++; /* the escaped character */
        }
    return -1;
}

static int parse_stops(const cJSON *o, srv_gen *g, srv_err *e) {
    const cJSON *v = field(o, "stop");
    if (!v) return 0;
    const cJSON *items = v;
    if (cJSON_IsString(v)) {
        items = NULL;
    } else if (!cJSON_IsArray(v)) {
        return bad(e, "stop", "must be a string or an array of strings, got %s", type_name(v));
    } else if (cJSON_GetArraySize(v) > SRV_MAX_STOPS) {
        return bad(e, "stop", "at most %d stop strings, got %d", SRV_MAX_STOPS, cJSON_GetArraySize(v));
    }
    const cJSON *s = items ? items->child : v;
    for (int i = 0; s; i++, s = items ? s->next : NULL) {
        if (!cJSON_IsString(s)) return bad(e, "stop", "stop[%d] must be a string, got %s", i, type_name(s));
        const size_t l = strlen(s->valuestring);
        if (l == 0 || l > SRV_MAX_STOP_LEN)
            return bad(e, "stop", "stop[%d] must have 1..%d bytes, got %zu", i, SRV_MAX_STOP_LEN, l);
        if (!(g->stops[g->n_stops] = strdup(s->valuestring))) return bad(e, "stop", "out of memory");
        g->n_stops++;
    }
    return 0;
}

/* The sampling mode and llama-server's per-request draft settings, with its meaning: n_max the
 * most drafts (0: none), n_min the shortest chain worth verifying (clamped to n_max, as
 * llama-server does), p_min the top probability below which drafting stops (the request then
 * drafts by p_min). Checked as the engine will check them, so a refusal is a 400 naming the
 * field. */
static int parse_spec(const srv_api_ctx *c, const cJSON *o, srv_gen *g, srv_err *e) {
    const cJSON *v;
    if ((v = field(o, "spec_sampling"))) {
        if (!cJSON_IsString(v)) return bad(e, "spec_sampling", "must be a string, got %s", type_name(v));
        if (sd_sampling_mode_from_name(v->valuestring, &g->sampling.mode) != SD_OK)
            return bad(e, "spec_sampling", "must be \"coupled\" or \"rejection\", got '%.40s'", v->valuestring);
    }
    g->spec = *c->spec;
    double x = 0;
    const int k_alloc = c->spec->draft_max > c->spec->tree_budget ? c->spec->draft_max : c->spec->tree_budget;
    const char *given = NULL;
    if (field(o, "speculative.n_max")) {
        if (get_int(o, "speculative.n_max", 0, SD_MAX_DRAFT, &x, e)) return -1;
        if (c->drafting && (int)x > k_alloc)
            return bad(e, "speculative.n_max", "%d exceeds this server's draft length of %d (its --draft-max)", (int)x,
                       k_alloc);
        g->spec.draft_max = (int)x;
        given = "speculative.n_max";
    }
    if (field(o, "speculative.n_min")) {
        if (get_int(o, "speculative.n_min", 0, SD_MAX_DRAFT, &x, e)) return -1;
        g->spec.draft_min = (int)x;
        given = "speculative.n_min";
    }
    if (g->spec.draft_min > g->spec.draft_max) g->spec.draft_min = g->spec.draft_max;
    if (field(o, "speculative.p_min")) {
        if (get_number(o, "speculative.p_min", 0, 1, 0, &x, e)) return -1;
        g->spec.p_min = (float)x;
        g->spec.draft_mode = SD_DRAFT_PMIN;
        given = given ? given : "speculative.p_min";
    }
    if (!c->drafting) return 0; /* plain decoding drafts nothing: any limit holds */
    g->spec.sampling = g->sampling;
    if (sd_spec_params_check(&g->spec, 1, c->model_drafts) != SD_OK)
        return bad(e, given ? given : "spec_sampling", "%s", sd_last_error());
    return 0;
}

/* A tokenizer failure (the text too long for it, say) as a 400. */
static int tokenize_failed(srv_err *e, const char *param, sd_status st) {
    return bad(e, param, "%s", sd_last_error()[0] ? sd_last_error() : sd_status_str(st));
}

static int parse_prompt(const srv_api_ctx *c, const cJSON *o, srv_gen *g, srv_err *e) {
    const cJSON *p = field(o, "prompt");
    if (!p) return bad(e, "prompt", "is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child; /* ["text"] */
    if (cJSON_IsString(p)) {
        sd_status st = sd_tokenizer_tokenize_alloc(c->tok, p->valuestring, strlen(p->valuestring),
                                                   sd_tokenizer_add_bos(c->tok), c->special, &g->ids, &g->n_ids);
        return st == SD_OK ? 0 : tokenize_failed(e, "prompt", st);
    }
    if (!cJSON_IsArray(p)) return bad(e, "prompt", "must be a string or an array of token ids, got %s", type_name(p));
    const int n = cJSON_GetArraySize(p);
    if (n > 0 && !cJSON_IsNumber(p->child))
        return bad(e, "prompt", "one prompt per request: a string or an array of token ids (got an array of %d %s)", n,
                   cJSON_IsString(p->child) ? "strings" : "items");
    if (n == 0) return bad(e, "prompt", "an array of token ids must not be empty");
    if (n >= c->n_ctx) { /* before allocating for it */
        srv_err_set(e, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                    "prompt of %d tokens does not fit the context of %d tokens per slot", n, c->n_ctx);
        return -1;
    }
    if (!(g->ids = malloc((size_t)n * sizeof *g->ids))) return bad(e, "prompt", "out of memory");
    const int V = sd_tokenizer_n_vocab(c->tok);
    int i = 0;
    for (const cJSON *t = p->child; t; t = t->next, i++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= V)
            return bad(e, "prompt", "prompt[%d] must be a token id in 0..%d", i, V - 1);
        g->ids[i] = (int32_t)t->valuedouble;
    }
    g->n_ids = n;
    return 0;
}

/* A message's text: a string, or an array of {"type": "text", "text": ...} parts, joined. */
static int message_text(const cJSON *content, int i, srv_buf *out, srv_err *e) {
    if (cJSON_IsString(content)) {
        srv_buf_puts(out, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content))
        return bad(e, "messages", "messages[%d].content must be a string or an array of text parts, got %s", i,
                   content ? type_name(content) : "nothing");
    int j = 0;
    for (const cJSON *part = content->child; part; part = part->next, j++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"), *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return bad(e, "messages", "messages[%d].content[%d] must be a text part ({\"type\": \"text\", ...}); only text is supported",
                       i, j);
        if (!cJSON_IsString(x))
            return bad(e, "messages", "messages[%d].content[%d].text must be a string, got %s", i, j,
                       x ? type_name(x) : "nothing");
        srv_buf_puts(out, x->valuestring);
    }
    return 0;
}

static int parse_messages(const srv_api_ctx *c, const cJSON *o, srv_gen *g, srv_err *e) {
    const cJSON *m = field(o, "messages");
    if (!m) return bad(e, "messages", "is required");
    if (!cJSON_IsArray(m)) return bad(e, "messages", "must be an array of messages, got %s", type_name(m));
    const int n = cJSON_GetArraySize(m);
    if (n == 0) return bad(e, "messages", "must hold at least one message");
    sd_chat_msg *msgs = calloc((size_t)n, sizeof *msgs);
    srv_buf *texts = calloc((size_t)n, sizeof *texts);
    int rc = msgs && texts ? 0 : bad(e, "messages", "out of memory");
    int i = 0;
    for (const cJSON *it = m->child; it && rc == 0; it = it->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        if (!cJSON_IsObject(it)) {
            rc = bad(e, "messages", "messages[%d] must be an object, got %s", i, type_name(it));
            break;
        }
        if (!cJSON_IsString(role)) {
            rc = bad(e, "messages", "messages[%d].role must be a string, got %s", i, role ? type_name(role) : "nothing");
            break;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system"; /* OpenAI's newer name for it */
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
            rc = bad(e, "messages", "messages[%d].role '%.40s' is not supported (system, developer, user, assistant)", i,
                     role->valuestring);
            break;
        }
        if ((rc = message_text(cJSON_GetObjectItemCaseSensitive(it, "content"), i, &texts[i], e))) break;
        srv_buf_put(&texts[i], "", 0); /* an empty content is still a string */
        if (texts[i].oom) rc = bad(e, "messages", "out of memory");
        msgs[i].role = r;
        msgs[i].content = texts[i].p;
    }
    if (rc == 0) {
        sd_chat_params cp = sd_chat_params_for(c->tok);
        /* the template's refusal of these roles, or the tokenizer's failure, both named as messages */
        if (sd_chat_prompt(c->tok, c->chat, msgs, n, &cp, c->chat_special, &g->ids, &g->n_ids) != SD_OK)
            rc = bad(e, "messages", "%s", sd_last_error());
    }
    for (int k = 0; texts && k < n; k++) srv_buf_free(&texts[k]);
    free(texts);
    free(msgs);
    return rc;
}

int srv_parse_gen(const srv_api_ctx *c, int chat, const char *body, size_t len, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof *g);
    g->chat = chat;
    long at = srv_utf8_check(body, len);
    if (at >= 0) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body is not valid UTF-8 (byte %ld)", at);
        return -1;
    }
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!o) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                    "request body is not valid JSON (at byte %ld of %zu)", end ? (long)(end - body) : 0L, len);
        return -1;
    }
    int rc = 0;
    if (!cJSON_IsObject(o)) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body must be a JSON object, got %s",
                    type_name(o));
        rc = -1;
    } else if ((at = nul_escape(body, len)) >= 0) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                    "request body holds the escape \\u0000 (byte %ld): text may not contain NUL", at);
        rc = -1;
    }
    const cJSON *v;
    if (!rc && (v = field(o, "model")) && !cJSON_IsString(v))
        rc = bad(e, "model", "must be a string, got %s", type_name(v));
    if (!rc) rc = refuse_unsupported(o, chat, e);
    if (!rc) rc = get_bool(o, "stream", &g->stream, e);
    if (!rc && (v = field(o, "stream_options"))) {
        const cJSON *iu = cJSON_IsObject(v) ? field(v, "include_usage") : NULL;
        if (!cJSON_IsObject(v)) rc = bad(e, "stream_options", "must be an object, got %s", type_name(v));
        else if (iu && !cJSON_IsBool(iu))
            rc = bad(e, "stream_options", "include_usage must be a boolean, got %s", type_name(iu));
        else g->include_usage = cJSON_IsTrue(iu);
    }
    if (!rc) rc = get_bool(o, "ignore_eos", &g->ignore_eos, e);
    g->sampling = sd_sampler_default_params();
    g->sampling.mode = c->spec->sampling.mode; /* the server's, unless spec_sampling says */
    g->sampling.temperature = 1.0f; /* OpenAI's default */
    g->sampling.seed = c->seed;
    double x = 1.0;
    if (!rc && !(rc = get_number(o, "temperature", 0, 2, 0, &x, e))) g->sampling.temperature = (float)x;
    x = 1.0;
    if (!rc && !(rc = get_number(o, "top_p", 0, 1, 1, &x, e))) g->sampling.top_p = (float)x;
    x = 0;
    if (!rc && !(rc = get_int(o, "top_k", 0, 1 << 24, &x, e))) g->sampling.top_k = (int)x;
    x = (double)c->seed;
    if (!rc && field(o, "seed") && !(rc = get_int(o, "seed", -9007199254740992.0, 9007199254740992.0, &x, e)))
        g->sampling.seed = (uint64_t)(int64_t)x;
    if (!rc) rc = parse_spec(c, o, g, e);
    double max_tokens = 0;
    const char *max_name = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!rc) rc = get_int(o, max_name, 1, 2147483647.0, &max_tokens, e);
    if (!rc) rc = parse_stops(o, g, e);
    if (!rc) rc = chat ? parse_messages(c, o, g, e) : parse_prompt(c, o, g, e);
    const char *what = chat ? "messages" : "prompt";
    if (!rc && g->n_ids == 0) rc = bad(e, what, "encodes to no tokens");
    if (!rc && g->n_ids >= c->n_ctx) {
        srv_err_set(e, 400, "invalid_request_error", what, "context_length_exceeded",
                    "%s of %d tokens does not fit the context of %d tokens per slot (at most %d prompt tokens)", what,
                    g->n_ids, c->n_ctx, c->n_ctx - 1);
        rc = -1;
    }
    if (!rc) {
        const int room = c->n_ctx - g->n_ids;
        if (max_tokens > room) {
            srv_err_set(e, 400, "invalid_request_error", max_name, "context_length_exceeded",
                        "%s: %.0f tokens do not fit the context of %d tokens per slot: the %s takes %d, leaving %d",
                        max_name, max_tokens, c->n_ctx, what, g->n_ids, room);
            rc = -1;
        }
        g->max_tokens = max_tokens > 0 ? (int)max_tokens : room; /* default: until the context is full */
    }
    cJSON_Delete(o);
    if (rc) srv_gen_free(g);
    return rc;
}

/* ---- responses ---------------------------------------------------------------------------- */

/* llama.cpp's timings object, with the speculative statistics of the request (stats.h). */
static void add_timings(cJSON *o, const srv_outcome *oc) {
    if (!oc->stats) return;
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    if (t) sd_spec_stats_to_json(oc->stats, t);
}

static void add_usage(cJSON *o, const srv_outcome *oc) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", oc->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", oc->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", oc->prompt_tokens + oc->completion_tokens);
}

/* The envelope every response and chunk shares. */
static cJSON *envelope(const srv_gen *g, const char *id, long created, const char *model, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", g->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                 : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "system_fingerprint", "specdec");
    return o;
}

/* A choice: the chat's message (or delta) or the completion's text. text is clean UTF-8. */
static void add_choice(cJSON *o, const srv_gen *g, const char *text, int chunk, int role, const char *finish) {
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (g->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (role || !chunk) cJSON_AddStringToObject(m, "role", "assistant");
        if (text) cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
}

char *srv_response_json(const srv_gen *g, const char *id, long created, const char *model, const char *text,
                        size_t len, const srv_outcome *oc) {
    srv_buf clean = {0};
    srv_utf8_append_clean(&clean, text ? text : "", text ? len : 0);
    cJSON *o = envelope(g, id, created, model, 0);
    add_choice(o, g, clean.p ? clean.p : "", 0, 1, oc->finish_reason);
    add_usage(o, oc);
    add_timings(o, oc);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    srv_buf_free(&clean);
    return s;
}

/* One event, "data: JSON\n\n", of JSON text s (freed). */
static void put_data(srv_buf *out, char *s) {
    if (!s) {
        out->oom = 1;
        return;
    }
    srv_buf_puts(out, "data: ");
    srv_buf_puts(out, s);
    srv_buf_puts(out, "\n\n");
    free(s);
}

static void put_event(srv_buf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    put_data(out, s);
}

void srv_sse_chunk(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model, const char *text,
                   size_t len, int role, const srv_outcome *oc) {
    srv_buf t = {0};
    srv_buf_put(&t, text ? text : "", text ? len : 0);
    cJSON *o = envelope(g, id, created, model, 1);
    /* the chat's last chunk carries an empty delta, as OpenAI's does */
    add_choice(o, g, (g->chat && oc && !len) ? NULL : t.p ? t.p : "", 1, role, oc ? oc->finish_reason : NULL);
    if (oc) {
        add_usage(o, oc);
        add_timings(o, oc);
    }
    put_event(out, o);
    srv_buf_free(&t);
}

void srv_sse_usage(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_outcome *oc) {
    cJSON *o = envelope(g, id, created, model, 1);
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, oc);
    put_event(out, o);
}

void srv_sse_error(srv_buf *out, const srv_err *e) { put_data(out, srv_err_json(e)); }

void srv_sse_done(srv_buf *out) { srv_buf_puts(out, "data: [DONE]\n\n"); }
