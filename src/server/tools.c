/* Tool calling on /v1/chat/completions: tools, tool_choice and parallel_tool_calls checked and turned
 * into the template's tools and, for a call that must be made or a strict function under auto, the grammar of the calls; the
 * messages' calls and tool results; the output read back as calls (message.tool_calls, or
 * delta.tool_calls in a stream, with finish_reason "tool_calls"). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "server/internal.h"

enum { CHOICE_AUTO, CHOICE_REQUIRED, CHOICE_NAMED };

struct srv_tools {
    sd_chat_tool_syntax syntax;
    int choice, named; /* named: the tool's index (CHOICE_NAMED) */
    char *json;        /* the tools as the request wrote them, for the template */
    char **names;
    int n;
    sd_chat_tool_parser *stream; /* a streamed response's reading of the output */
};

void srv_tools_free(srv_tools *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->names[i]);
    free(t->names);
    free(t->json);
    sd_chat_tool_parser_free(t->stream);
    free(t);
}

const char *srv_tools_json(const srv_tools *t) { return t ? t->json : NULL; }

/* ---- the request ------------------------------------------------------------------------- */

static int bad(srv_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(srv_err *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param);
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(e->msg, sizeof e->msg, "%s: ", param);
    vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *kind(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

/* absent and null alike */
static const cJSON *get(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Every key of o is one of keys (a null value passes as not given). */
static int keys_ok(const cJSON *o, const char *const *keys, const char *param, const char *where, srv_err *e) {
    for (const cJSON *v = o->child; v; v = v->next) {
        int ok = cJSON_IsNull(v);
        for (int k = 0; keys[k] && !ok; k++) ok = !strcmp(keys[k], v->string);
        if (!ok) return bad(e, param, "%s.%.60s is not supported", where, v->string);
    }
    return 0;
}

static int valid_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_' ||
              s[n] == '-'))
            return 0;
    return n >= 1 && n <= 64;
}

/* The raw text of the body's top-level "tools" value, so that the template writes the numbers as the
 * client wrote them (1.0 stays 1.0, as Python's json reads it). NULL when not found as a plain key. */
static char *raw_member(const char *body, size_t len, const char *key) {
    size_t i = sd_json_skip_ws(body, len, 0);
    if (i >= len || body[i] != '{') return NULL;
    i = sd_json_skip_ws(body, len, i + 1);
    const size_t kl = strlen(key);
    while (i < len && body[i] == '"') {
        const size_t ke = sd_json_value_end(body, len, i);
        if (ke == SD_JSON_BAD) return NULL;
        const size_t v = sd_json_skip_ws(body, len, sd_json_skip_ws(body, len, ke) + 1);
        const size_t ve = sd_json_value_end(body, len, v);
        if (ve == SD_JSON_BAD) return NULL;
        if (ke - i - 2 == kl && !memcmp(body + i + 1, key, kl)) {
            char *s = malloc(ve - v + 1);
            if (s) {
                memcpy(s, body + v, ve - v);
                s[ve - v] = 0;
            }
            return s;
        }
        i = sd_json_skip_ws(body, len, ve);
        if (i < len && body[i] == ',') i = sd_json_skip_ws(body, len, i + 1);
    }
    return NULL;
}

/* A schema compiler message "schema: PATH: what" as tools[i].function.parameters PATH: what. */
static int schema_error(srv_err *e, int i, const char *msg) {
    const char *m = strncmp(msg, "schema: ", 8) ? msg : msg + 8;
    const char *colon = strstr(m, ": ");
    if (m != msg && colon && m[0] == '.') {
        const int path_len = m[1] == ':' ? 0 : (int)(colon - m); /* the root's path "." adds nothing */
        return bad(e, "tools", "tools[%d].function.parameters%.*s: %s", i, path_len, m, colon + 2);
    }
    return bad(e, "tools", "tools[%d].function.parameters: %s", i, m);
}

int srv_tools_parse(const srv_api_ctx *c, const cJSON *o, const char *body, size_t len, srv_gen *g, srv_err *e) {
    const cJSON *tools = get(o, "tools"), *choice = get(o, "tool_choice"), *par = get(o, "parallel_tool_calls");
    if (par && !cJSON_IsBool(par)) return bad(e, "parallel_tool_calls", "must be a boolean, got %s", kind(par));
    if (tools && !cJSON_IsArray(tools)) return bad(e, "tools", "must be an array of tools, got %s", kind(tools));
    const int n = tools ? cJSON_GetArraySize(tools) : 0;
    if (n > SRV_MAX_TOOLS) return bad(e, "tools", "at most %d tools, got %d", SRV_MAX_TOOLS, n);
    /* tool_choice: none (the tools are not shown: the model answers in text), auto, required or one function */
    int mode = n ? CHOICE_AUTO : -1, named = -1;
    const char *named_name = NULL;
    if (choice && cJSON_IsString(choice)) {
        static const char *const modes[] = {"auto", "required"};
        if (!strcmp(choice->valuestring, "none")) mode = -1;
        else if (!strcmp(choice->valuestring, modes[0])) mode = CHOICE_AUTO;
        else if (!strcmp(choice->valuestring, modes[1])) mode = CHOICE_REQUIRED;
        else
            return bad(e, "tool_choice",
                       "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, "
                       "got '%.40s'",
                       choice->valuestring);
    } else if (choice) {
        static const char *const ck[] = {"type", "function", NULL}, *const fk[] = {"name", NULL};
        const cJSON *t = get(choice, "type"), *f = get(choice, "function"), *nm = f ? get(f, "name") : NULL;
        if (!cJSON_IsObject(choice) || !cJSON_IsString(t) || strcmp(t->valuestring, "function") != 0 || !cJSON_IsObject(f) ||
            !cJSON_IsString(nm))
            return bad(e, "tool_choice",
                       "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (keys_ok(choice, ck, "tool_choice", "tool_choice", e) || keys_ok(f, fk, "tool_choice", "tool_choice.function", e))
            return -1;
        mode = CHOICE_NAMED;
        named_name = nm->valuestring;
    }
    if (choice && mode >= 0 && !n) return bad(e, "tool_choice", "needs tools, and none are given");
    if (!n) return 0;
    /* every tool is checked, whatever tool_choice says */
    srv_tools *t = calloc(1, sizeof *t);
    if (!t || !(t->names = calloc((size_t)n, sizeof *t->names))) {
        free(t);
        return bad(e, "tools", "out of memory");
    }
    t->n = n;
    sd_chat_tool *ct = calloc((size_t)n, sizeof *ct);
    char **params = calloc((size_t)n, sizeof *params);
    int rc = ct && params ? 0 : bad(e, "tools", "out of memory");
    int i = 0, strict = 0; /* strict: some function asks for its arguments to follow its parameters */
    for (const cJSON *it = tools->child; it && !rc; it = it->next, i++) {
        static const char *const tk[] = {"type", "function", NULL}, *const fk[] = {"name", "description", "parameters", "strict", NULL};
        char where[48];
        snprintf(where, sizeof where, "tools[%d]", i);
        const cJSON *ty = get(it, "type"), *f = get(it, "function");
        if (!cJSON_IsObject(it)) {
            rc = bad(e, "tools", "%s must be a tool object, got %s", where, kind(it));
            break;
        }
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") != 0) {
            rc = bad(e, "tools", "%s.type must be \"function\"", where);
            break;
        }
        if (!cJSON_IsObject(f)) {
            rc = bad(e, "tools", "%s.function must be an object, got %s", where, kind(f));
            break;
        }
        if ((rc = keys_ok(it, tk, "tools", where, e))) break;
        snprintf(where, sizeof where, "tools[%d].function", i);
        if ((rc = keys_ok(f, fk, "tools", where, e))) break;
        const cJSON *nm = get(f, "name"), *d = get(f, "description"), *p = get(f, "parameters"), *st = get(f, "strict");
        if (!cJSON_IsString(nm) || !valid_name(nm->valuestring)) {
            rc = cJSON_IsString(nm) ? bad(e, "tools", "%s.name must be 1 to 64 letters, digits, _ or -, got '%.70s'", where,
                                          nm->valuestring)
                                    : bad(e, "tools", "%s.name must be a string, got %s", where, kind(nm));
            break;
        }
        for (int k = 0; k < i && !rc; k++)
            if (!strcmp(t->names[k], nm->valuestring))
                rc = bad(e, "tools", "%s.name: '%s' is also the name of tools[%d]", where, nm->valuestring, k);
        if (!rc && d && !cJSON_IsString(d)) rc = bad(e, "tools", "%s.description must be a string, got %s", where, kind(d));
        if (!rc && st && !cJSON_IsBool(st)) rc = bad(e, "tools", "%s.strict must be a boolean, got %s", where, kind(st));
        strict |= cJSON_IsTrue(st);
        if (!rc && p && !cJSON_IsObject(p))
            rc = bad(e, "tools", "%s.parameters must be a JSON Schema (an object), got %s", where, kind(p));
        if (rc) break;
        if (!(t->names[i] = strdup(nm->valuestring)) || (p && !(params[i] = cJSON_PrintUnformatted(p)))) {
            rc = bad(e, "tools", "out of memory");
            break;
        }
        ct[i] = (sd_chat_tool){t->names[i], params[i], params[i] ? strlen(params[i]) : 0};
        if (named_name && !strcmp(named_name, nm->valuestring)) named = i;
    }
    if (!rc && mode == CHOICE_NAMED && named < 0)
        rc = bad(e, "tool_choice", "names the function '%.64s', which is not one of the tools", named_name);
    /* Where calls are constrained: a call required or named, and under auto with a strict function
     * (OpenAI's strict is per function, but a grammar of calls holds them all: every call that is
     * made then follows its parameters, the text before it stays free). */
    const int constrain = mode == CHOICE_REQUIRED || mode == CHOICE_NAMED || (mode == CHOICE_AUTO && strict);
    /* a schema that is not one is refused; one the grammar cannot honour only where it must (the
     * call constrained), else the model only reads it */
    for (int k = 0; k < n && !rc; k++) {
        if (!params[k]) continue;
        sd_grammar *gr = NULL;
        const sd_status st = sd_grammar_from_json_schema(params[k], strlen(params[k]), &gr);
        sd_grammar_free(gr);
        const int used = constrain && (mode != CHOICE_NAMED || k == named);
        if (st != SD_OK && (st != SD_ERR_UNSUPPORTED || used)) rc = schema_error(e, k, sd_last_error());
    }
    if (!rc && mode >= 0) {
        t->syntax = sd_chat_tool_syntax_of(c->chat);
        static const char *const others[] = {"grammar", "json_schema", "guided_json", "response_format"};
        for (int k = 0; k < 4 && !rc; k++) {
            const cJSON *v = get(o, others[k]);
            const cJSON *ty = v && k == 3 ? get(v, "type") : NULL;
            if (v && !(k == 3 && cJSON_GetArraySize(v) == 1 && cJSON_IsString(ty) && !strcmp(ty->valuestring, "text")))
                rc = bad(e, others[k],
                         "cannot be given with tools: a call's arguments follow its function's parameters, and the reply "
                         "is either calls or text");
        }
        /* a streamed reply is read as calls by one parser over one choice's text */
        if (!rc && g->n > 1) rc = bad(e, "n", "must be 1 with tools, got %d", g->n);
        if (!rc && g->logprobs)
            rc = bad(e, "logprobs", "cannot be given with tools: the calls' deltas carry no log-probabilities");
        if (!rc && t->syntax == SD_CHAT_TOOLS_NONE)
            rc = bad(e, "tools",
                     "the chat template %s has no tool calling (it is written for chatml, qwen2.5, qwen3, llama3.1 and "
                     "llama3.2; --chat-template NAME chooses one)",
                     sd_chat_name(c->chat));
    }
    if (!rc && mode >= 0) {
        t->choice = mode;
        t->named = named;
        t->json = raw_member(body, len, "tools");
        if (!t->json && !(t->json = cJSON_PrintUnformatted(tools))) rc = bad(e, "tools", "out of memory");
    }
    if (!rc && constrain) {
        int which = -1;
        const int parallel = !par || cJSON_IsTrue(par);
        const int only = mode == CHOICE_NAMED ? named : mode == CHOICE_AUTO ? SD_CHAT_TOOL_AFTER_TEXT : SD_CHAT_TOOL_ANY;
        const sd_status st = sd_chat_tool_grammar(t->syntax, ct, n, only, parallel, NULL, &which, &g->grammar);
        if (st != SD_OK) rc = which >= 0 ? schema_error(e, which, sd_last_error()) : bad(e, "tools", "%s", sd_last_error());
    }
    for (int k = 0; params && k < n; k++) free(params[k]);
    free(params);
    free(ct);
    if (rc || mode < 0) {
        srv_tools_free(t);
        return rc;
    }
    g->tools = t;
    return 0;
}

static const char *const k_keys_assistant[] = {"role", "content", "tool_calls", NULL};
static const char *const k_keys_tool[] = {"role", "content", "tool_call_id", NULL};
static const char *const k_keys_other[] = {"role", "content", NULL};

const char *const *srv_tools_message_keys(const char *role) {
    return !strcmp(role, "assistant") ? k_keys_assistant : !strcmp(role, "tool") ? k_keys_tool : k_keys_other;
}

int srv_tools_message(const cJSON *msg, int i, sd_chat_msg *m, srv_err *e) {
    const cJSON *id = get(msg, "tool_call_id"), *calls = get(msg, "tool_calls");
    if (id && !cJSON_IsString(id)) return bad(e, "messages", "messages[%d].tool_call_id must be a string, got %s", i, kind(id));
    /* as OpenAI: a tool's result names the call it answers */
    if (!id && m->role && !strcmp(m->role, "tool"))
        return bad(e, "messages", "messages[%d].tool_call_id is required with role 'tool' (the id of the call it answers)", i);
    if (!calls) return 0;
    if (!cJSON_IsArray(calls) || !calls->child)
        return bad(e, "messages", "messages[%d].tool_calls must be an array of at least one call, got %s", i,
                   cJSON_IsArray(calls) ? "an empty array" : kind(calls));
    const int n = cJSON_GetArraySize(calls);
    sd_chat_tool_call *tc = calloc((size_t)n, sizeof *tc);
    if (!tc) return bad(e, "messages", "out of memory");
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        static const char *const ck[] = {"id", "type", "function", NULL}, *const fk[] = {"name", "arguments", NULL};
        char where[64];
        snprintf(where, sizeof where, "messages[%d].tool_calls[%d]", i, k);
        const cJSON *ty = get(c, "type"), *f = get(c, "function"), *cid = get(c, "id");
        const cJSON *nm = f ? get(f, "name") : NULL, *args = f ? get(f, "arguments") : NULL;
        int rc = 0;
        if (!cJSON_IsObject(c) || !cJSON_IsObject(f))
            rc = bad(e, "messages", "%s must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", where);
        else if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") != 0))
            rc = bad(e, "messages", "%s.type must be \"function\"", where);
        else if (cid && !cJSON_IsString(cid))
            rc = bad(e, "messages", "%s.id must be a string, got %s", where, kind(cid));
        else if (!cJSON_IsString(nm))
            rc = bad(e, "messages", "%s.function.name must be a string, got %s", where, kind(nm));
        else if (!cJSON_IsString(args))
            rc = bad(e, "messages", "%s.function.arguments must be a string of JSON, got %s", where, kind(args));
        if (!rc && !(rc = keys_ok(c, ck, "messages", where, e))) {
            char fw[80];
            snprintf(fw, sizeof fw, "%s.function", where);
            rc = keys_ok(f, fk, "messages", fw, e);
        }
        if (!rc) {
            cJSON *parsed = NULL;
            if (sd_json_parse(args->valuestring, strlen(args->valuestring), "arguments", &parsed) != SD_OK)
                rc = bad(e, "messages", "%s.function.arguments must be JSON text: %s", where, sd_last_error());
            cJSON_Delete(parsed);
        }
        if (rc) {
            free(tc);
            return -1;
        }
        tc[k] = (sd_chat_tool_call){nm->valuestring, args->valuestring};
    }
    m->tool_calls = tc;
    m->n_tool_calls = n;
    return 0;
}

/* ---- the response ------------------------------------------------------------------------------ */

static void make_call_id(char *out, size_t cap) {
    char id[48];
    srv_make_id(id, sizeof id, 0); /* "cmpl-" and 24 random letters and digits */
    snprintf(out, cap, "call_%s", id + 5);
}

static sd_status new_parser(const srv_tools *t, sd_chat_tool_parser **p) {
    return sd_chat_tool_parser_create(t->syntax, t->choice != CHOICE_AUTO, (const char *const *)t->names, t->n, p);
}

static const char *finish_of(const sd_chat_tool_parser *p, const char *reason) {
    return reason && !strcmp(reason, "stop") && sd_chat_tool_parser_n_calls(p) > 0 ? "tool_calls" : reason;
}

static void add_str(cJSON *o, const char *key, const char *s, size_t n) {
    char *z = malloc(n + 1);
    if (!z) return;
    memcpy(z, s, n);
    z[n] = 0;
    cJSON_AddStringToObject(o, key, z);
    free(z);
}

void srv_tools_choice(cJSON *choice, const srv_gen *g, const char *text, size_t len) {
    const srv_tools *t = g->tools;
    sd_chat_tool_parser *p = NULL;
    const sd_chat_tool_event *ev = NULL;
    int n_ev = 0;
    if (new_parser(t, &p) != SD_OK || sd_chat_tool_parser_feed(p, text, len, 1, &ev, &n_ev) != SD_OK) {
        sd_chat_tool_parser_free(p);
        return; /* out of memory: the text stays the content */
    }
    srv_buf content = {0};
    cJSON *calls = cJSON_CreateArray(), *fn = NULL;
    srv_buf args = {0};
    for (int i = 0; i <= n_ev; i++) {
        if (fn && (i == n_ev || ev[i].kind == SD_CHAT_TOOL_CALL)) { /* the previous call is whole */
            add_str(fn, "arguments", args.p ? args.p : "", args.len);
            args.len = 0;
            fn = NULL;
        }
        if (i == n_ev) break;
        if (ev[i].kind == SD_CHAT_TOOL_CONTENT) {
            srv_buf_put(&content, ev[i].text, ev[i].len);
        } else if (ev[i].kind == SD_CHAT_TOOL_CALL) {
            cJSON *c = cJSON_CreateObject();
            char id[48];
            make_call_id(id, sizeof id);
            cJSON_AddStringToObject(c, "id", id);
            cJSON_AddStringToObject(c, "type", "function");
            fn = cJSON_AddObjectToObject(c, "function");
            add_str(fn, "name", ev[i].text, ev[i].len);
            cJSON_AddItemToArray(calls, c);
        } else {
            srv_buf_put(&args, ev[i].text, ev[i].len);
        }
    }
    cJSON *m = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const int n_calls = cJSON_GetArraySize(calls);
    cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
    if (n_calls && !content.len) cJSON_AddNullToObject(m, "content");
    else add_str(m, "content", content.p ? content.p : "", content.len);
    if (n_calls) cJSON_AddItemToObject(m, "tool_calls", calls);
    else cJSON_Delete(calls);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    const char *reason = cJSON_IsString(fr) ? fr->valuestring : NULL;
    if (reason && strcmp(finish_of(p, reason), reason) != 0)
        cJSON_ReplaceItemInObjectCaseSensitive(choice, "finish_reason", cJSON_CreateString(finish_of(p, reason)));
    srv_buf_free(&content);
    srv_buf_free(&args);
    sd_chat_tool_parser_free(p);
}

/* delta.tool_calls with one call's piece: its start (id, type, name, arguments "") or more arguments. */
static cJSON *call_delta(const sd_chat_tool_event *ev) {
    cJSON *d = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(d, "tool_calls"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, c);
    cJSON_AddNumberToObject(c, "index", ev->call);
    if (ev->kind == SD_CHAT_TOOL_CALL) {
        char id[48];
        make_call_id(id, sizeof id);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
    }
    cJSON *fn = cJSON_AddObjectToObject(c, "function");
    if (ev->kind == SD_CHAT_TOOL_CALL) {
        add_str(fn, "name", ev->text, ev->len);
        cJSON_AddStringToObject(fn, "arguments", "");
    } else {
        add_str(fn, "arguments", ev->text, ev->len);
    }
    return d;
}

void srv_tools_sse(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_choice_out *co) {
    srv_tools *t = g->tools;
    const int last = co->finish_reason != NULL;
    if (co->role) { /* the first chunk: the role (a call that must be made has no content) */
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "role", "assistant");
        if (t->choice == CHOICE_AUTO) cJSON_AddStringToObject(d, "content", "");
        else cJSON_AddNullToObject(d, "content");
        srv_sse_delta(out, g, id, created, model, d, NULL, NULL);
    }
    if (!t->stream && new_parser(t, &t->stream) != SD_OK) {
        out->oom = 1;
        return;
    }
    const sd_chat_tool_event *ev = NULL;
    int n_ev = 0;
    if (sd_chat_tool_parser_feed(t->stream, co->text ? co->text : "", co->text ? co->len : 0, last, &ev, &n_ev) != SD_OK) {
        out->oom = 1;
        return;
    }
    for (int i = 0; i < n_ev; i++) {
        cJSON *d;
        if (ev[i].kind == SD_CHAT_TOOL_CONTENT) {
            d = cJSON_CreateObject();
            add_str(d, "content", ev[i].text, ev[i].len);
        } else {
            d = call_delta(&ev[i]);
        }
        srv_sse_delta(out, g, id, created, model, d, NULL, NULL);
    }
    if (last)
        srv_sse_delta(out, g, id, created, model, cJSON_CreateObject(), finish_of(t->stream, co->finish_reason), co->stats);
}
