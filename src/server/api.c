/* OpenAI's completion and chat completion requests and responses: a request body checked field
 * by field (each error names the field, as a 400 in OpenAI's error shape), tokenized with the
 * model's tokenizer and chat template; responses, stream chunks and llama.cpp's timings. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/internal.h"
#include "specdec/stats.h"

void srv_err_set(srv_err *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
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
    if (e->param[0]) cJSON_AddStringToObject(in, "param", e->param);
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
    sd_grammar_free(g->grammar);
    srv_tools_free(g->tools);
    for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
    memset(g, 0, sizeof *g);
}

/* ---- checking fields -------------------------------------------------------------------- */

static int bad(srv_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(srv_err *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(e->msg, sizeof e->msg, "%s: ", param ? param : "request");
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

/* ---- the fields ----------------------------------------------------------------------------- */

enum { EP_CMPL = 1, EP_CHAT = 2, EP_BOTH = 3 };

/* Each field of a completion or chat request: taken (read below), refused unless at the value
 * that changes nothing, or ignored on purpose; any other field is refused as unknown, as OpenAI's
 * API refuses it. The README's table of fields is this one. */
static const srv_field k_fields[] = {
    {"model", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "a string; the one model answers whatever it names"},
    {"prompt", EP_CMPL, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "a string, a one-string array or an array of token ids"},
    {"messages", EP_CHAT, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "roles system, developer, user, assistant (with tool_calls), tool (with tool_call_id); text content"},
    {"max_tokens", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "tokens to generate at most; default: until the slot's context is full"},
    {"max_completion_tokens", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "the same, OpenAI's newer name"},
    {"temperature", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "0..2 (0: greedy), default 1"},
    {"top_p", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "nucleus sampling mass in (0, 1]"},
    {"top_k", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "llama.cpp's extension: the k most likely tokens; 0: off"},
    {"seed", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "the sampling seed; default: a fresh one per request"},
    {"stop", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "a string or up to 16 strings"},
    {"stream", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "server-sent events"},
    {"stream_options", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "include_usage: the usage chunk"},
    {"ignore_eos", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "llama.cpp's extension: go on past end-of-generation tokens"},
    {"n", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "choices, 1..the server's slots (--parallel): run in as many slots at once, the prompt prefilled once; "
     "choice i samples with seed + i"},
    {"best_of", EP_CMPL, SRV_FIELD_REFUSED, SRV_NEUTRAL_ONE, "only best_of = 1 is supported"},
    {"logit_bias", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_EMPTY, "logit biases are not supported"},
    {"logprobs", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "chat: true gives each token's log-probability; completions: 0..20, that and the N likeliest tokens'. The "
     "target's distribution at temperature 1, before penalties, truncation and grammar, the same drafted or not"},
    {"top_logprobs", EP_CHAT, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "0..20 likeliest tokens' log-probabilities, with logprobs"},
    {"n_probs", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ZERO, "llama-server's probabilities are not supported (use logprobs)"},
    {"presence_penalty", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "-2..2, subtracted from the logit of every token the completion holds already"},
    {"frequency_penalty", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "-2..2, times how often the completion holds the token already"},
    {"repetition_penalty", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "vLLM's and HF's: a token in the prompt or the completion has its logit divided by it (multiplied when "
     "negative); (0, 10], 1: off"},
    {"repeat_penalty", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "llama.cpp's name for repetition_penalty"},
    {"penalty_last_n", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "llama.cpp's window of the penalties: only -1 (the whole text), which is what they count"},
    {"repeat_last_n", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "the same, llama.cpp's older name"},
    {"min_p", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "keep the tokens with p >= min_p x the top p, in [0, 1]"},
    {"typical_p", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ONE, "typical sampling is not supported (only 1)"},
    {"tfs_z", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ONE, "tail-free sampling is not supported (only 1)"},
    {"mirostat", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ZERO, "mirostat sampling is not supported (only 0)"},
    {"dry_multiplier", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ZERO, "DRY sampling is not supported (only 0)"},
    {"xtc_probability", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ZERO, "XTC sampling is not supported (only 0)"},
    {"samplers", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "the sampler order is fixed (top-k, top-p, temperature)"},
    {"min_tokens", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_ZERO, "a minimum length is not supported (only 0)"},
    {"stop_token_ids", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_EMPTY, "stop token ids are not supported (use stop strings)"},
    {"grammar", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "llama-server's: a GBNF grammar the output must match"},
    {"json_schema", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "llama-server's: a JSON Schema the output must match"},
    {"guided_json", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "vLLM's: a JSON Schema the output must match"},
    {"guided_regex", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "a regular expression is not supported (use grammar)"},
    {"guided_choice", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "guided decoding is not supported"},
    {"guided_grammar", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "guided decoding is not supported"},
    {"response_format", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "{\"type\": \"text\"}, {\"type\": \"json_object\"} (any JSON object) or {\"type\": \"json_schema\", "
     "\"json_schema\": {\"name\", \"schema\", \"strict\"}}"},
    {"tools", EP_CHAT, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "functions the model may call, written into the prompt as the chat template does (chatml, qwen2.5, qwen3, "
     "llama3.1, llama3.2)"},
    {"tool_choice", EP_CHAT, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "\"auto\" (default; the output read as calls; with a `strict` function, a call once started is constrained, the "
     "text before it free), \"none\" (tools not shown), \"required\" or a named function (calls constrained to the "
     "functions' parameters schemas)"},
    {"parallel_tool_calls", EP_CHAT, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "with tool_choice required: false allows one call, true (default) several (chatml and qwen; llama3.x: one)"},
    {"functions", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_EMPTY, "function calling is not supported"},
    {"function_call", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NO_CALL, "function calling is not supported"},
    {"speculative.n_max", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "llama-server's: this request's most drafts per pass, 0..the server's --draft-max (0: none)"},
    {"speculative.n_min", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "llama-server's: a shorter chain is not verified (clamped to n_max)"},
    {"speculative.p_min", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE,
     "llama-server's: stop drafting below this draft probability (the request drafts by p_min)"},
    {"spec_sampling", EP_BOTH, SRV_FIELD_TAKEN, SRV_NEUTRAL_NONE, "\"coupled\" or \"rejection\": how drafts are verified"},
    {"speculative", EP_BOTH, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE,
     "llama-server's keys are flat: speculative.n_max, speculative.n_min, speculative.p_min"},
    {"echo", EP_CMPL, SRV_FIELD_REFUSED, SRV_NEUTRAL_FALSE, "echoing the prompt is not supported"},
    {"suffix", EP_CMPL, SRV_FIELD_REFUSED, SRV_NEUTRAL_EMPTY, "suffixes (insertion) are not supported"},
    {"prediction", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "predicted outputs are not supported"},
    {"modalities", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_TEXT_ONLY, "only [\"text\"] is supported"},
    {"audio", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "audio output is not supported"},
    {"reasoning_effort", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "reasoning effort is not supported"},
    {"web_search_options", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "web search is not supported"},
    {"chat_template_kwargs", EP_CHAT, SRV_FIELD_REFUSED, SRV_NEUTRAL_NONE, "template arguments are not supported"},
    {"user", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "an end-user id for the client's records"},
    {"metadata", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "tags for the client's records"},
    {"store", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "nothing is stored"},
    {"service_tier", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "one tier"},
    {"safety_identifier", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "an end-user id for the client's records"},
    {"prompt_cache_key", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "every slot reuses its cached prefix anyway"},
    {"cache_prompt", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "llama.cpp's; every slot reuses its cached prefix anyway"},
    {"mirostat_tau", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "acts only with mirostat, which is refused"},
    {"mirostat_eta", EP_BOTH, SRV_FIELD_IGNORED, SRV_NEUTRAL_NONE, "acts only with mirostat, which is refused"},
};

const srv_field *srv_fields(int *n) {
    *n = (int)(sizeof k_fields / sizeof k_fields[0]);
    return k_fields;
}

/* Whether v is the value of a refused field that changes nothing. */
static int neutral(const cJSON *v, srv_neutral how) {
    switch (how) {
    case SRV_NEUTRAL_ONE: return cJSON_IsNumber(v) && v->valuedouble == 1;
    case SRV_NEUTRAL_ZERO: return cJSON_IsNumber(v) && v->valuedouble == 0;
    case SRV_NEUTRAL_FALSE: return cJSON_IsFalse(v) || (cJSON_IsNumber(v) && v->valuedouble == 0);
    case SRV_NEUTRAL_EMPTY:
        return ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) || (cJSON_IsString(v) && !v->valuestring[0]);
    case SRV_NEUTRAL_NO_CALL: return cJSON_IsString(v) && !strcmp(v->valuestring, "none");
    case SRV_NEUTRAL_TEXT: {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
        return cJSON_IsObject(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(t) && !strcmp(t->valuestring, "text");
    }
    case SRV_NEUTRAL_TEXT_ONLY:
        return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) && !strcmp(v->child->valuestring, "text");
    default: return 0;
    }
}

/* Every field of the request against the table. A field that is null counts as not given. */
static int check_fields(const cJSON *o, int chat, srv_err *e) {
    const unsigned ep = chat ? EP_CHAT : EP_CMPL;
    const int n = (int)(sizeof k_fields / sizeof k_fields[0]);
    for (const cJSON *v = o->child; v; v = v->next) {
        int k = 0;
        while (k < n && strcmp(k_fields[k].name, v->string) != 0) k++;
        if (k == n || !(k_fields[k].endpoints & ep)) {
            srv_err_set(e, 400, "invalid_request_error", v->string, "unknown_parameter",
                        "%.60s: not a field of %s requests (the fields this server takes, refuses and ignores are listed in "
                        "its docs/serve.md)",
                        v->string, chat ? "chat completion" : "completion");
            return -1;
        }
        if (k_fields[k].kind == SRV_FIELD_REFUSED && !cJSON_IsNull(v) && !neutral(v, k_fields[k].neutral))
            return bad(e, k_fields[k].name, "%s", k_fields[k].note);
    }
    return 0;
}

/* The same check for the keys of a nested object (a message, a content part, stream_options). */
static int check_keys(const cJSON *o, const char *where, const char *const *allowed, srv_err *e, const char *param) {
    for (const cJSON *v = o->child; v; v = v->next) {
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++) ok = !strcmp(allowed[i], v->string);
        if (!ok && !cJSON_IsNull(v)) return bad(e, param, "%s.%.60s is not supported", where, v->string);
    }
    return 0;
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

/* min-p and the penalties; OpenAI's presence/frequency count the completion, the repetition
 * penalty (either name) the prompt too; the penalty window is the whole text. */
static int parse_penalties(const cJSON *o, srv_gen *g, srv_err *e) {
    double x = 0;
    if (get_number(o, "min_p", 0, 1, 0, &x, e)) return -1;
    g->sampling.min_p = (float)x;
    x = 0;
    if (get_number(o, "presence_penalty", -2, 2, 0, &x, e)) return -1;
    g->sampling.presence_penalty = (float)x;
    x = 0;
    if (get_number(o, "frequency_penalty", -2, 2, 0, &x, e)) return -1;
    g->sampling.frequency_penalty = (float)x;
    static const char *const rep_names[2] = {"repetition_penalty", "repeat_penalty"};
    if (field(o, rep_names[0]) && field(o, rep_names[1]))
        return bad(e, rep_names[1], "give repetition_penalty or repeat_penalty (the same penalty), not both");
    for (int i = 0; i < 2; i++) {
        x = 1;
        if (get_number(o, rep_names[i], 0, 10, 1, &x, e)) return -1;
        if (field(o, rep_names[i])) g->sampling.repetition_penalty = (float)x;
    }
    static const char *const win_names[2] = {"penalty_last_n", "repeat_last_n"};
    for (int i = 0; i < 2; i++) {
        x = -1;
        if (get_int(o, win_names[i], -1, 2147483647.0, &x, e)) return -1;
        if (x != -1) return bad(e, win_names[i], "only -1 (the whole text) is supported: the penalties count all of it");
    }
    return 0;
}

/* A schema (a JSON value) compiled for the request; the error named as param. */
static int compile_schema(const cJSON *schema, const char *param, srv_gen *g, srv_err *e) {
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return bad(e, param, "out of memory");
    const sd_status st = sd_grammar_from_json_schema(text, strlen(text), &g->grammar);
    free(text);
    return st == SD_OK ? 0 : bad(e, param, "%s", sd_last_error());
}

/* The output's constraint: llama-server's grammar (GBNF) or json_schema, vLLM's guided_json, or
 * OpenAI's response_format; at most one of them. Compiled here (a worker thread), used by the
 * engine thread only. */
static int parse_constraint(const cJSON *o, srv_gen *g, srv_err *e) {
    static const char *const names[4] = {"grammar", "json_schema", "guided_json", "response_format"};
    const cJSON *v = NULL;
    const char *which = NULL;
    for (int i = 0; i < 4; i++) {
        const cJSON *f = field(o, names[i]);
        if (!f) continue;
        if (which) return bad(e, names[i], "give one of grammar, json_schema, guided_json and response_format, not %s too", which);
        v = f;
        which = names[i];
    }
    if (!which) return 0;
    if (!strcmp(which, "grammar")) {
        if (!cJSON_IsString(v)) return bad(e, "grammar", "must be a GBNF grammar (a string), got %s", type_name(v));
        const sd_status st = sd_grammar_from_gbnf(v->valuestring, strlen(v->valuestring), NULL, &g->grammar);
        if (st == SD_OK) return 0;
        const char *m = sd_last_error();
        return bad(e, "grammar", "%s", strncmp(m, "grammar: ", 9) ? m : m + 9); /* not "grammar: grammar: " */
    }
    if (strcmp(which, "response_format") != 0) {
        if (!cJSON_IsObject(v) && !cJSON_IsBool(v)) return bad(e, which, "must be a JSON Schema (an object), got %s", type_name(v));
        return compile_schema(v, which, g, e);
    }
    const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
    if (!cJSON_IsString(t)) return bad(e, "response_format", "must be an object with a \"type\"");
    if (!strcmp(t->valuestring, "text")) {
        static const char *const keys[] = {"type", NULL};
        return check_keys(v, "response_format", keys, e, "response_format");
    }
    if (!strcmp(t->valuestring, "json_object")) {
        static const char *const keys[] = {"type", NULL};
        if (check_keys(v, "response_format", keys, e, "response_format")) return -1;
        return sd_grammar_json_object(NULL, &g->grammar) == SD_OK ? 0 : bad(e, "response_format", "%s", sd_last_error());
    }
    if (strcmp(t->valuestring, "json_schema") != 0)
        return bad(e, "response_format", "type must be \"text\", \"json_object\" or \"json_schema\", got '%.40s'",
                   t->valuestring);
    static const char *const keys[] = {"type", "json_schema", NULL};
    if (check_keys(v, "response_format", keys, e, "response_format")) return -1;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
    if (!cJSON_IsObject(js)) return bad(e, "response_format", "json_schema must be an object holding the schema");
    static const char *const js_keys[] = {"name", "schema", "strict", "description", NULL};
    if (check_keys(js, "response_format.json_schema", js_keys, e, "response_format")) return -1;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema"), *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
        return bad(e, "response_format", "json_schema.strict must be a boolean, got %s", type_name(strict));
    /* strict or not, the output follows the schema: a constraint is never approximated */
    if (!schema || cJSON_IsNull(schema))
        return sd_grammar_json_object(NULL, &g->grammar) == SD_OK ? 0 : bad(e, "response_format", "%s", sd_last_error());
    return compile_schema(schema, "response_format", g, e);
}

/* n choices and log-probabilities: OpenAI's chat takes logprobs (a boolean) and top_logprobs,
 * its completions logprobs (the count of top tokens). */
static int parse_choices(const srv_api_ctx *c, const cJSON *o, srv_gen *g, srv_err *e) {
    double x = 1;
    const int most = c->n_slots > 0 ? c->n_slots : 1;
    if (get_int(o, "n", 1, 2147483647.0, &x, e)) return -1;
    if (x > most)
        return bad(e, "n", "%.0f choices need as many slots at once, and this server has %d (its --parallel)", x, most);
    g->n = (int)x;
    if (g->chat) {
        if (get_bool(o, "logprobs", &g->logprobs, e)) return -1;
        x = 0;
        if (get_int(o, "top_logprobs", 0, SD_MAX_LOGPROBS, &x, e)) return -1;
        if (field(o, "top_logprobs") && !g->logprobs) return bad(e, "top_logprobs", "needs \"logprobs\": true");
        g->top_logprobs = (int)x;
        return 0;
    }
    const cJSON *v = field(o, "logprobs");
    if (cJSON_IsBool(v)) /* false: none (the neutral value clients send); true is the chat's form */
        return cJSON_IsTrue(v) ? bad(e, "logprobs", "completions take the number of top tokens, 0..%d (chat takes true)",
                                     SD_MAX_LOGPROBS)
                               : 0;
    x = -1;
    if (get_int(o, "logprobs", 0, SD_MAX_LOGPROBS, &x, e)) return -1;
    g->logprobs = x >= 0;
    g->top_logprobs = x > 0 ? (int)x : 0;
    return 0;
}

/* A tokenizer failure (the text too long for it, say) as a 400. */
static int tokenize_failed(srv_err *e, const char *param, sd_status st) {
    return bad(e, param, "%s", sd_last_error()[0] ? sd_last_error() : sd_status_str(st));
}

/* A text of len bytes cannot take fewer tokens than len over the longest text one token stands
 * for: refused before tokenizing when even that many do not fit. */
static int too_long(const srv_api_ctx *c, const char *what, size_t len, int extra, srv_err *e) {
    const int per = c->text_per_token;
    if (per <= 0) return 0;
    const size_t least = (len + (size_t)per - 1) / (size_t)per + (size_t)extra;
    if (least < (size_t)c->n_ctx) return 0;
    srv_err_set(e, 400, "invalid_request_error", what, "context_length_exceeded",
                "%s of %zu bytes does not fit the context of %d tokens per slot: it takes at least %zu tokens (no token "
                "stands for more than %d bytes)",
                what, len, c->n_ctx, least, per);
    return -1;
}

static int parse_prompt(const srv_api_ctx *c, const cJSON *o, srv_gen *g, srv_err *e) {
    const cJSON *p = field(o, "prompt");
    if (!p) return bad(e, "prompt", "is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child; /* ["text"] */
    if (cJSON_IsString(p)) {
        const size_t len = strlen(p->valuestring);
        const int bos = sd_tokenizer_add_bos(c->tok) && sd_tokenizer_bos(c->tok) >= 0;
        if (too_long(c, "prompt", len, bos, e)) return -1;
        sd_status st = sd_tokenizer_tokenize_alloc(c->tok, p->valuestring, len, sd_tokenizer_add_bos(c->tok), c->special,
                                                   &g->ids, &g->n_ids);
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
    static const char *const part_keys[] = {"type", "text", NULL};
    int j = 0;
    for (const cJSON *part = content->child; part; part = part->next, j++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type"), *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
            return bad(e, "messages", "messages[%d].content[%d] must be a text part ({\"type\": \"text\", ...}); only text is supported",
                       i, j);
        if (!cJSON_IsString(x))
            return bad(e, "messages", "messages[%d].content[%d].text must be a string, got %s", i, j,
                       x ? type_name(x) : "nothing");
        char where[48];
        snprintf(where, sizeof where, "messages[%d].content[%d]", i, j);
        if (check_keys(part, where, part_keys, e, "messages")) return -1;
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
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 && strcmp(r, "tool") != 0) {
            rc = bad(e, "messages", "messages[%d].role '%.40s' is not supported (system, developer, user, assistant, tool)",
                     i, role->valuestring);
            break;
        }
        char where[32];
        snprintf(where, sizeof where, "messages[%d]", i);
        if ((rc = check_keys(it, where, srv_tools_message_keys(r), e, "messages"))) break;
        msgs[i].role = r;
        if ((rc = srv_tools_message(it, i, &msgs[i], e))) break; /* tool_calls, tool_call_id */
        if (msgs[i].n_tool_calls && !field(it, "content")) continue; /* calls without text */
        if ((rc = message_text(cJSON_GetObjectItemCaseSensitive(it, "content"), i, &texts[i], e))) break;
        srv_buf_put(&texts[i], "", 0); /* an empty content is still a string */
        if (texts[i].oom) rc = bad(e, "messages", "out of memory");
        msgs[i].content = texts[i].p;
    }
    if (rc == 0) {
        sd_chat_params cp = sd_chat_params_for(c->tok);
        cp.tools = srv_tools_json(g->tools);
        char *text = NULL;
        size_t len = 0;
        sd_tok_span *spans = NULL;
        int n_spans = 0;
        /* the template's refusal of these roles, or the tokenizer's failure, both named as messages */
        if (sd_chat_render_spans(c->chat, msgs, n, &cp, &text, &len, &spans, &n_spans) != SD_OK)
            rc = bad(e, "messages", "%s", sd_last_error());
        else if (too_long(c, "messages", len, sd_tokenizer_add_bos(c->tok), e))
            rc = -1;
        else if (sd_chat_tokenize_rendered(c->tok, text, len, spans, n_spans, c->chat_special, &g->ids, &g->n_ids) != SD_OK)
            rc = bad(e, "messages", "%s", sd_last_error());
        free(spans);
        free(text);
    }
    for (int k = 0; texts && k < n; k++) srv_buf_free(&texts[k]);
    for (int k = 0; msgs && k < n; k++) free((void *)msgs[k].tool_calls);
    free(texts);
    free(msgs);
    return rc;
}

int srv_parse_gen(const srv_api_ctx *c, int chat, const char *body, size_t len, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof *g);
    memset(e, 0, sizeof *e);
    g->chat = chat;
    size_t prompt_bytes = 0;
    if (srv_json_check(body, len, &prompt_bytes, e) != 0) return -1;
    /* a prompt too long even at the longest token: refused before a tree of it is built */
    if (!chat && prompt_bytes && too_long(c, "prompt", prompt_bytes, sd_tokenizer_add_bos(c->tok) && sd_tokenizer_bos(c->tok) >= 0, e))
        return -1;
    cJSON *o = srv_json_tree(body, len, e);
    if (!o) return -1;
    int rc = 0;
    if (!cJSON_IsObject(o)) {
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body must be a JSON object, got %s",
                    type_name(o));
        rc = -1;
    }
    const cJSON *v;
    if (!rc) rc = check_fields(o, chat, e);
    if (!rc && (v = field(o, "model")) && !cJSON_IsString(v))
        rc = bad(e, "model", "must be a string, got %s", type_name(v));
    if (!rc) rc = get_bool(o, "stream", &g->stream, e);
    if (!rc && (v = field(o, "stream_options"))) {
        static const char *const keys[] = {"include_usage", NULL};
        const cJSON *iu = cJSON_IsObject(v) ? field(v, "include_usage") : NULL;
        if (!cJSON_IsObject(v)) rc = bad(e, "stream_options", "must be an object, got %s", type_name(v));
        else if (iu && !cJSON_IsBool(iu))
            rc = bad(e, "stream_options", "include_usage must be a boolean, got %s", type_name(iu));
        else if (!(rc = check_keys(v, "stream_options", keys, e, "stream_options")))
            g->include_usage = cJSON_IsTrue(iu);
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
    if (!rc) rc = parse_penalties(o, g, e);
    if (!rc) rc = parse_choices(c, o, g, e);
    if (!rc) rc = parse_spec(c, o, g, e);
    if (!rc && chat) rc = srv_tools_parse(c, o, body, len, g, e);
    if (!rc) rc = parse_constraint(o, g, e);
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

/* ---- /tokenize and /detokenize ------------------------------------------------------------- */

/* One token's text for /tokenize's pieces and /detokenize: what decoding prints, and for tokens
 * that print nothing (control tokens) their own text, as llama-server shows them. */
static void token_text(const sd_tokenizer *t, int32_t prev, int32_t id, char *buf, srv_buf *out) {
    const int n = sd_tokenizer_decode(t, prev, id, buf, (size_t)sd_tokenizer_max_piece_len(t));
    const int ty = sd_tokenizer_token_type(t, id);
    if (n <= 0 && (ty == SD_TOKEN_CONTROL || ty == SD_TOKEN_UNKNOWN)) {
        size_t pl = 0;
        const char *p = sd_tokenizer_piece(t, id, &pl);
        srv_buf_put(out, p ? p : "", p ? pl : 0);
        return;
    }
    srv_buf_put(out, buf, n > 0 ? (size_t)n : 0);
}

char *srv_tokenize_json(const srv_api_ctx *c, const char *body, size_t len, srv_err *e) {
    memset(e, 0, sizeof *e);
    cJSON *o = srv_json_parse(body, len, e);
    if (!o) return NULL;
    static const char *const keys[] = {"content", "add_special", "parse_special", "with_pieces", NULL};
    int add_special = 0, parse_special = 1, pieces = 0, rc = 0;
    const cJSON *content = cJSON_IsObject(o) ? field(o, "content") : NULL;
    if (!cJSON_IsObject(o))
        rc = (srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body must be a JSON object, got %s", type_name(o)), -1);
    else if ((rc = check_keys(o, "request", keys, e, NULL)) != 0)
        ;
    else if (!content)
        rc = bad(e, "content", "is required");
    else if (!cJSON_IsString(content))
        rc = bad(e, "content", "must be a string, got %s", type_name(content));
    if (!rc) rc = get_bool(o, "add_special", &add_special, e);
    if (!rc) rc = get_bool(o, "parse_special", &parse_special, e);
    if (!rc) rc = get_bool(o, "with_pieces", &pieces, e);
    int32_t *ids = NULL;
    int n = 0;
    if (!rc) {
        sd_status st = sd_tokenizer_tokenize_alloc(c->tok, content->valuestring, strlen(content->valuestring),
                                                   add_special && sd_tokenizer_add_bos(c->tok), parse_special, &ids, &n);
        if (st != SD_OK) rc = tokenize_failed(e, "content", st);
    }
    char *js = NULL;
    if (!rc) {
        cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "tokens");
        char *buf = malloc((size_t)sd_tokenizer_max_piece_len(c->tok) + 1);
        for (int i = 0; buf && i < n; i++) {
            if (!pieces) {
                cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
                continue;
            }
            srv_buf text = {0};
            /* the token's own text: no predecessor that would drop a leading space */
            token_text(c->tok, sd_tokenizer_bos(c->tok) == 0 ? 1 : 0, ids[i], buf, &text);
            cJSON *tok = cJSON_CreateObject();
            cJSON_AddNumberToObject(tok, "id", ids[i]);
            if (srv_utf8_check(text.p ? text.p : "", text.len) < 0) {
                cJSON_AddStringToObject(tok, "piece", text.p ? text.p : "");
            } else { /* part of a character: its bytes, as llama-server gives them */
                cJSON *bytes = cJSON_AddArrayToObject(tok, "piece");
                for (size_t k = 0; k < text.len; k++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)text.p[k]));
            }
            cJSON_AddItemToArray(arr, tok);
            srv_buf_free(&text);
        }
        js = buf ? cJSON_PrintUnformatted(r) : NULL;
        free(buf);
        cJSON_Delete(r);
        if (!js) srv_err_set(e, 503, "server_error", NULL, NULL, "out of memory");
    }
    free(ids);
    cJSON_Delete(o);
    return js;
}

char *srv_detokenize_json(const srv_api_ctx *c, const char *body, size_t len, srv_err *e) {
    memset(e, 0, sizeof *e);
    cJSON *o = srv_json_parse(body, len, e);
    if (!o) return NULL;
    static const char *const keys[] = {"tokens", NULL};
    const cJSON *toks = cJSON_IsObject(o) ? field(o, "tokens") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(o))
        rc = (srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "request body must be a JSON object, got %s", type_name(o)), -1);
    else if ((rc = check_keys(o, "request", keys, e, NULL)) != 0)
        ;
    else if (!toks)
        rc = bad(e, "tokens", "is required");
    else if (!cJSON_IsArray(toks))
        rc = bad(e, "tokens", "must be an array of token ids, got %s", type_name(toks));
    const int V = sd_tokenizer_n_vocab(c->tok);
    srv_buf text = {0};
    char *buf = rc ? NULL : malloc((size_t)sd_tokenizer_max_piece_len(c->tok) + 1);
    if (!rc && !buf) rc = (srv_err_set(e, 503, "server_error", NULL, NULL, "out of memory"), -1);
    int i = 0;
    int32_t prev = -1;
    for (const cJSON *t = rc ? NULL : toks->child; t; t = t->next, i++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= V) {
            rc = bad(e, "tokens", "tokens[%d] must be a token id in 0..%d", i, V - 1);
            break;
        }
        token_text(c->tok, prev, (int32_t)t->valuedouble, buf, &text);
        prev = (int32_t)t->valuedouble;
    }
    char *js = NULL;
    if (!rc) {
        srv_buf clean = {0}; /* byte tokens may leave a character unfinished */
        srv_utf8_append_clean(&clean, text.p ? text.p : "", text.len);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "content", clean.p ? clean.p : "");
        js = cJSON_PrintUnformatted(r);
        cJSON_Delete(r);
        srv_buf_free(&clean);
        if (!js) srv_err_set(e, 503, "server_error", NULL, NULL, "out of memory");
    }
    free(buf);
    srv_buf_free(&text);
    cJSON_Delete(o);
    return js;
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
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", oc->cached_tokens);
}

void srv_make_id(char *out, size_t cap, int chat) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[24];
    size_t got = 0;
    while (got < sizeof r) {
        const ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n > 0) got += (size_t)n;
        else if (errno != EINTR) break;
    }
    if (got < sizeof r) { /* no entropy source: the clock and the address, still unlikely to repeat */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)out;
        for (size_t i = got; i < sizeof r; i++) {
            z = (z ^ (z >> 31)) * 0x9E3779B97F4A7C15ull + i;
            r[i] = (unsigned char)(z >> 56);
        }
    }
    char tail[sizeof r + 1];
    for (size_t i = 0; i < sizeof r; i++) tail[i] = al[r[i] % 62]; /* 256 % 62: a bias too small to matter for ids */
    tail[sizeof r] = 0;
    snprintf(out, cap, "%s-%s", chat ? "chatcmpl" : "cmpl", tail);
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
    if (chunk && g->include_usage) cJSON_AddNullToObject(o, "usage"); /* the usage chunk replaces it */
    return o;
}

/* Bytes as JSON's array of numbers (OpenAI's "bytes" of a token). */
static void add_bytes(cJSON *o, const char *p, size_t n) {
    cJSON *a = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)p[i]));
}

/* A token's text for its log-probability entry: clean UTF-8 (a byte of a character alone shows as
 * U+FFFD; its "bytes" say what it is), its raw bytes in raw. */
static const char *lp_token(const sd_tokenizer *t, int32_t prev, int32_t id, char *buf, srv_buf *raw, srv_buf *clean) {
    raw->len = clean->len = 0;
    token_text(t, prev, id, buf, raw);
    srv_utf8_append_clean(clean, raw->p ? raw->p : "", raw->len);
    srv_buf_put(clean, "", 1); /* NUL-terminated */
    return clean->oom || raw->oom ? "" : clean->p;
}

/* The log-probabilities of a choice's tokens, in the shape of its endpoint: the chat's
 * {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}, the completions'
 * {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}. */
static cJSON *logprobs_json(const srv_gen *g, const sd_tokenizer *t, const srv_lp *lp, int n) {
    cJSON *o = cJSON_CreateObject();
    char *buf = malloc((size_t)sd_tokenizer_max_piece_len(t) + 1);
    srv_buf raw = {0}, clean = {0};
    if (!o || !buf) {
        free(buf);
        return o;
    }
    if (g->chat) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddItemToArray(content, e);
            cJSON_AddStringToObject(e, "token", lp_token(t, lp[i].prev, lp[i].id, buf, &raw, &clean));
            cJSON_AddNumberToObject(e, "logprob", lp[i].lp.logprob);
            add_bytes(e, raw.p, raw.len);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int j = 0; j < lp[i].lp.n_top; j++) {
                cJSON *x = cJSON_CreateObject();
                cJSON_AddItemToArray(top, x);
                cJSON_AddStringToObject(x, "token", lp_token(t, lp[i].prev, lp[i].lp.top_id[j], buf, &raw, &clean));
                cJSON_AddNumberToObject(x, "logprob", lp[i].lp.top_logprob[j]);
                add_bytes(x, raw.p, raw.len);
            }
        }
        cJSON_AddNullToObject(o, "refusal");
    } else {
        cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs"),
              *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
        for (int i = 0; i < n; i++) {
            cJSON_AddItemToArray(toks, cJSON_CreateString(lp_token(t, lp[i].prev, lp[i].id, buf, &raw, &clean)));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[i].lp.logprob));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber(lp[i].coff));
            /* the likeliest tokens and the chosen one, as OpenAI gives up to logprobs + 1 (a text
             * two tokens share is one key: the likelier one's) */
            cJSON *d = cJSON_CreateObject();
            cJSON_AddItemToArray(tops, d);
            for (int j = 0; j <= lp[i].lp.n_top; j++) {
                const int chosen = j == lp[i].lp.n_top;
                const char *k = lp_token(t, lp[i].prev, chosen ? lp[i].id : lp[i].lp.top_id[j], buf, &raw, &clean);
                if (!cJSON_GetObjectItemCaseSensitive(d, k))
                    cJSON_AddNumberToObject(d, k, chosen ? lp[i].lp.logprob : lp[i].lp.top_logprob[j]);
            }
        }
    }
    srv_buf_free(&raw);
    srv_buf_free(&clean);
    free(buf);
    return o;
}

/* One choice: the chat's message (or delta) or the completion's text, cleaned to UTF-8. */
static void add_choice(cJSON *choices, const srv_gen *g, const sd_tokenizer *t, const srv_choice_out *co, int chunk,
                       int timings) {
    srv_buf clean = {0};
    srv_utf8_append_clean(&clean, co->text ? co->text : "", co->text ? co->len : 0);
    srv_buf_put(&clean, "", 1);
    const char *text = clean.oom ? "" : clean.p;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", co->index);
    if (g->chat) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (co->role || !chunk) cJSON_AddStringToObject(m, "role", "assistant");
        /* the chat's last chunk carries an empty delta, as OpenAI's does */
        if (!chunk || co->len || !co->finish_reason) cJSON_AddStringToObject(m, "content", text);
    } else {
        cJSON_AddStringToObject(c, "text", text);
    }
    if (g->logprobs && (!chunk || co->n_lp > 0)) cJSON_AddItemToObject(c, "logprobs", logprobs_json(g, t, co->lp, co->n_lp));
    else cJSON_AddNullToObject(c, "logprobs");
    if (co->finish_reason) cJSON_AddStringToObject(c, "finish_reason", co->finish_reason);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (g->chat && g->tools && !chunk) srv_tools_choice(c, g, text, strlen(text));
    if (timings && co->stats) sd_spec_stats_to_json(co->stats, cJSON_AddObjectToObject(c, "timings"));
    srv_buf_free(&clean);
}

char *srv_response_json(const srv_gen *g, const sd_tokenizer *t, const char *id, long created, const char *model,
                        const srv_choice_out *ch, int n, const srv_outcome *oc) {
    cJSON *o = envelope(g, id, created, model, 0);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n; i++) add_choice(choices, g, t, &ch[i], 0, n > 1); /* timings per choice when several */
    add_usage(o, oc);
    if (n == 1) add_timings(o, oc);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
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

void srv_sse_chunk(srv_buf *out, const srv_gen *g, const sd_tokenizer *t, const char *id, long created, const char *model,
                   const srv_choice_out *co) {
    if (g->chat && g->tools) {
        srv_tools_sse(out, g, id, created, model, co);
        return;
    }
    cJSON *o = envelope(g, id, created, model, 1);
    add_choice(cJSON_AddArrayToObject(o, "choices"), g, t, co, 1, g->n > 1);
    if (co->stats && g->n <= 1) sd_spec_stats_to_json(co->stats, cJSON_AddObjectToObject(o, "timings"));
    put_event(out, o);
}

void srv_sse_usage(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model,
                   const srv_outcome *oc) {
    cJSON *o = envelope(g, id, created, model, 1);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "usage");
    add_usage(o, oc);
    put_event(out, o);
}

void srv_sse_delta(srv_buf *out, const srv_gen *g, const char *id, long created, const char *model, cJSON *delta,
                   const char *finish, const sd_spec_stats *stats) {
    cJSON *o = envelope(g, id, created, model, 1), *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddItemToObject(c, "delta", delta);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (stats) sd_spec_stats_to_json(stats, cJSON_AddObjectToObject(o, "timings"));
    put_event(out, o);
}

void srv_sse_error(srv_buf *out, const srv_err *e) { put_data(out, srv_err_json(e)); }

void srv_sse_done(srv_buf *out) { srv_buf_puts(out, "data: [DONE]\n\n"); }
