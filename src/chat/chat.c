/* Chat templates rendered natively: recognition by the template's marker strings (as llama.cpp
 * does) and one renderer per format that writes what its Jinja template writes for plain
 * messages, whitespace trimming and raised exceptions included. */
#include "specdec/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat_internal.h"
#include "core/json.h"

/* ---- names ------------------------------------------------------------------------------- */

static const char *const k_names[SD_CHAT_N_FORMATS] = {
    "chatml", "qwen2.5", "qwen3", "llama3", "llama3.1", "llama3.2", "llama2", "mistral", "gemma", "phi3",
};

const char *sd_chat_known_names(void) {
    return "chatml, qwen2.5, qwen3, llama3, llama3.1, llama3.2, llama2, mistral, gemma, phi3";
}

const char *sd_chat_name(sd_chat_format f) {
    return (unsigned)f < SD_CHAT_N_FORMATS ? k_names[f] : NULL;
}

sd_status sd_chat_format_from_name(const char *name, sd_chat_format *out) {
    for (int i = 0; name && i < SD_CHAT_N_FORMATS; i++) {
        if (!strcmp(name, k_names[i])) {
            *out = (sd_chat_format)i;
            return SD_OK;
        }
    }
    return sd_fail(SD_ERR_INVALID_ARG, "unknown chat template '%s' (known: %s)", name ? name : "(null)",
                   sd_chat_known_names());
}

/* ---- recognition ------------------------------------------------------------------------- */

static int has(const char *t, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; m <= n && i + m <= n; i++)
        if (t[i] == needle[0] && memcmp(t + i, needle, m) == 0) return 1;
    return 0;
}

/* First match wins: each row's markers (all of them), then the narrower variants before
 * their family's plain form. */
static const struct {
    const char *marker, *also;
    sd_chat_format f;
} k_rules[] = {
    {"<|im_start|>", "<think>", SD_CHAT_QWEN3},
    {"<|im_start|>", "You are Qwen, created by Alibaba Cloud", SD_CHAT_QWEN25},
    {"<|im_start|>", NULL, SD_CHAT_CHATML},
    {"<|start_header_id|>", "strftime_now", SD_CHAT_LLAMA32},
    {"<|start_header_id|>", "Cutting Knowledge Date", SD_CHAT_LLAMA31},
    {"<|start_header_id|>", NULL, SD_CHAT_LLAMA3},
    {"<start_of_turn>", NULL, SD_CHAT_GEMMA},
    {"<|assistant|>", "<|end|>", SD_CHAT_PHI3},
    {"[INST]", "<<SYS>>", SD_CHAT_LLAMA2},
    {"[INST]", NULL, SD_CHAT_MISTRAL},
};

sd_status sd_chat_detect(const char *tmpl, size_t len, sd_chat_format *out) {
    if (!out || (!tmpl && len)) return sd_fail(SD_ERR_INVALID_ARG, "chat template: bad arguments");
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) {
        if (has(tmpl, len, k_rules[i].marker) && (!k_rules[i].also || has(tmpl, len, k_rules[i].also))) {
            *out = k_rules[i].f;
            return SD_OK;
        }
    }
    /* show where it starts, printable and short (sd_fail replaces other bytes) */
    char head[41];
    size_t k = 0;
    for (size_t i = 0; i < len && k < sizeof head - 1; i++) head[k++] = tmpl[i] == '\n' ? ' ' : tmpl[i];
    head[k] = '\0';
    return sd_fail(SD_ERR_UNSUPPORTED,
                   "chat template not recognised (it starts \"%s%s\" and has none of the markers <|im_start|>, "
                   "<|start_header_id|>, <start_of_turn>, <|assistant|> with <|end|>, [INST]); known formats: %s",
                   head, len > k ? "..." : "", sd_chat_known_names());
}

/* ---- text helpers ----------------------------------------------------------------------- */

typedef struct {
    const char *p;
    size_t n;
} view;

static view V(const char *s) { return (view){s, strlen(s)}; }

/* Length of the character at s[i] when it is Python whitespace (str.isspace, what Jinja's
 * trim and str.strip() remove), else 0. */
static size_t space_at(const char *s, size_t n, size_t i) {
    const unsigned char *u = (const unsigned char *)s + i;
    size_t left = n - i;
    if (u[0] < 0x80) return (u[0] >= 0x09 && u[0] <= 0x0D) || (u[0] >= 0x1C && u[0] <= 0x20) ? 1 : 0;
    uint32_t cp;
    size_t l;
    if ((u[0] & 0xE0) == 0xC0 && left >= 2 && (u[1] & 0xC0) == 0x80) {
        cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
        l = 2;
    } else if ((u[0] & 0xF0) == 0xE0 && left >= 3 && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80) {
        cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
        l = 3;
    } else {
        return 0;
    }
    int sp = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
             cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return sp ? l : 0;
}

/* Jinja's trim filter and Python's str.strip(). */
static view trim(view v) {
    size_t a = 0, b = v.n, l;
    while (a < b && (l = space_at(v.p, b, a)) > 0) a += l;
    while (b > a) {
        size_t s = b - 1; /* the lead byte of the last character */
        while (s > a && b - s < 3 && ((unsigned char)v.p[s] & 0xC0) == 0x80) s--;
        l = space_at(v.p, b, s);
        if (l != b - s) break;
        b = s;
    }
    return (view){v.p + a, b - a};
}

static view lstrip_nl(view v) {
    while (v.n && v.p[0] == '\n') v.p++, v.n--;
    return v;
}

static view rstrip_nl(view v) {
    while (v.n && v.p[v.n - 1] == '\n') v.n--;
    return v;
}

/* Offset of the first (last) occurrence of s in v, or -1. */
static long find(view v, const char *s, int last) {
    size_t m = strlen(s);
    long at = -1;
    for (size_t i = 0; m <= v.n && i + m <= v.n; i++) {
        if (memcmp(v.p + i, s, m) == 0) {
            at = (long)i;
            if (!last) break;
        }
    }
    return at;
}

static int starts(view v, const char *s) { return v.n >= strlen(s) && !memcmp(v.p, s, strlen(s)); }
static int ends(view v, const char *s) {
    size_t m = strlen(s);
    return v.n >= m && !memcmp(v.p + v.n - m, s, m);
}

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
    sd_tok_span *sp; /* where the messages' own text went (text, not markers) */
    int n_sp, cap_sp;
} buf;

static void putv(buf *b, view v) {
    if (b->oom) return;
    if (b->n + v.n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + v.n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    if (v.n) memcpy(b->p + b->n, v.p, v.n);
    b->n += v.n;
    b->p[b->n] = '\0';
}

static void put(buf *b, const char *s) { putv(b, V(s)); }

/* A message's text: written as putv does, and remembered as text. */
static void put_text(buf *b, view v) {
    const size_t at = b->n;
    putv(b, v);
    if (b->oom || !v.n) return;
    if (b->n_sp && b->sp[b->n_sp - 1].off + b->sp[b->n_sp - 1].len == at) { /* continues the last one */
        b->sp[b->n_sp - 1].len += v.n;
        return;
    }
    if (b->n_sp == b->cap_sp) {
        const int cap = b->cap_sp ? 2 * b->cap_sp : 16;
        sd_tok_span *q = realloc(b->sp, (size_t)cap * sizeof *q);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->sp = q;
        b->cap_sp = cap;
    }
    b->sp[b->n_sp++] = (sd_tok_span){at, v.n};
}

/* v, a view into from's text, copied to b with the parts of it that are message text. */
static void put_from(buf *b, const buf *from, view v) {
    size_t pos = (size_t)(v.p - from->p);
    const size_t end = pos + v.n;
    for (int i = 0; i < from->n_sp && pos < end; i++) {
        const size_t a = from->sp[i].off, z = a + from->sp[i].len;
        if (z <= pos) continue;
        if (a >= end) break;
        if (a > pos) putv(b, (view){from->p + pos, a - pos});
        const size_t stop = z < end ? z : end, from_at = a > pos ? a : pos;
        put_text(b, (view){from->p + from_at, stop - from_at});
        pos = stop;
    }
    if (pos < end) putv(b, (view){from->p + pos, end - pos});
}

/* JSON text written as the template's tojson writes it (indent < 0: none), as message text. */
static void put_json(buf *b, const char *json, size_t len, int indent) {
    size_t n = 0;
    char *t = chat_pyjson(json, len, indent, &n);
    if (!t) { /* the JSON was checked before rendering: only memory can fail here */
        b->oom = 1;
        return;
    }
    put_text(b, (view){t, n});
    free(t);
}

/* ---- renderers ------------------------------------------------------------------------- */

typedef struct {
    const sd_chat_msg *m;
    int n;
    const sd_chat_params *p;
    buf *out;
} ctx;

static int is(const sd_chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* A message's text; an assistant message with calls may have none, which templates read as "". */
static view text_of(const sd_chat_msg *m) { return V(m->content ? m->content : ""); }

/* Each of the tools (the checked JSON array p->tools) in turn: *at, *len span the next one; 0 at
 * the end. */
static int next_tool(const char *tools, size_t *at, size_t *len) {
    const size_t n = strlen(tools);
    size_t i = *at + *len;
    i = sd_json_skip_ws(tools, n, i);
    if (i < n && (tools[i] == '[' || tools[i] == ',')) i = sd_json_skip_ws(tools, n, i + 1);
    if (i >= n || tools[i] == ']') return 0;
    const size_t e = sd_json_value_end(tools, n, i);
    *at = i;
    *len = e - i;
    return 1;
}

/* ---- Hermes-style tool calling (chatml, qwen2.5, qwen3) ---- */

static const char HERMES_TOOLS[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char HERMES_CALL_FORMAT[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

/* The system turn that lists the tools; the first message when it is the system's goes in it
 * (qwen2.5: its default system message when there is none). Returns the messages it used. */
static int hermes_tools(const ctx *c, sd_chat_format f) {
    buf *o = c->out;
    const int sys = is(&c->m[0], "system");
    put(o, "<|im_start|>system\n");
    if (sys) put_text(o, text_of(&c->m[0]));
    else if (f == SD_CHAT_QWEN25) put(o, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    if (sys || f == SD_CHAT_QWEN25) put(o, "\n\n");
    put(o, HERMES_TOOLS);
    size_t at = 0, len = 0;
    while (next_tool(c->p->tools, &at, &len)) {
        put(o, "\n");
        put_json(o, c->p->tools + at, len, -1);
    }
    put(o, HERMES_CALL_FORMAT);
    return sys;
}

/* An assistant message's calls: one <tool_call> block each, a line break before every one but a
 * first that follows no text. Qwen2.5 writes the arguments through tojson, qwen3 (and chatml) as
 * the string they are. */
static void hermes_calls(buf *o, const sd_chat_msg *m, int text_before, sd_chat_format f) {
    for (int k = 0; k < m->n_tool_calls; k++) {
        if (k || text_before) put(o, "\n");
        put(o, "<tool_call>\n{\"name\": \"");
        put_text(o, V(m->tool_calls[k].name));
        put(o, "\", \"arguments\": ");
        if (f == SD_CHAT_QWEN25) put_json(o, m->tool_calls[k].arguments, strlen(m->tool_calls[k].arguments), -1);
        else put_text(o, V(m->tool_calls[k].arguments));
        put(o, "}\n</tool_call>");
    }
}

/* A tool's result: consecutive results share one user turn. */
static void hermes_result(const ctx *c, int i) {
    buf *o = c->out;
    if (i == 0 || !is(&c->m[i - 1], "tool")) put(o, "<|im_start|>user");
    put(o, "\n<tool_response>\n");
    put_text(o, text_of(&c->m[i]));
    put(o, "\n</tool_response>");
    if (i == c->n - 1 || !is(&c->m[i + 1], "tool")) put(o, "<|im_end|>\n");
}

static sd_status template_error(sd_chat_format f, const char *msg) {
    return sd_fail(SD_ERR_INVALID_ARG, "chat template %s: %s", k_names[f], msg);
}

static const char ALTERNATE[] = "Conversation roles must alternate user/assistant/user/assistant/...";

static void chatml_turn(buf *o, const char *role, view content) {
    put(o, "<|im_start|>");
    put(o, role);
    put(o, "\n");
    put_text(o, content);
    put(o, "<|im_end|>\n");
}

/* ChatML and Qwen2.5; with tools, Qwen2.5's tool calling (chatml takes Qwen3's form of it). */
static sd_status render_chatml(const ctx *c, sd_chat_format f) {
    buf *o = c->out;
    int first = 0;
    if (c->p->tools) first = hermes_tools(c, f);
    else if (f == SD_CHAT_QWEN25 && !is(&c->m[0], "system"))
        put(o, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    for (int i = first; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "tool")) {
            hermes_result(c, i);
        } else if (is(m, "assistant") && m->n_tool_calls) {
            const view t = text_of(m);
            put(o, "<|im_start|>assistant");
            if (t.n) put(o, "\n");
            put_text(o, t);
            if (!t.n && f != SD_CHAT_QWEN25) put(o, "\n"); /* qwen3's form: the header's line break, then the call */
            hermes_calls(o, m, t.n > 0 || f == SD_CHAT_QWEN25, f);
            put(o, "<|im_end|>\n");
        } else {
            chatml_turn(o, m->role, text_of(m));
        }
    }
    if (c->p->add_generation_prompt) put(o, "<|im_start|>assistant\n");
    return SD_OK;
}

/* Qwen3: an assistant turn after the last real user query carries its reasoning in a <think>
 * block (an empty one when it is the last message); earlier ones lose theirs. */
static sd_status render_qwen3(const ctx *c) {
    buf *o = c->out;
    if (c->p->tools) hermes_tools(c, SD_CHAT_QWEN3);
    else if (is(&c->m[0], "system")) chatml_turn(o, "system", V(c->m[0].content));
    int last_query = c->n - 1;
    for (int i = c->n - 1; i >= 0; i--) {
        view v = text_of(&c->m[i]);
        if (is(&c->m[i], "user") && !(starts(v, "<tool_response>") && ends(v, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "user") || (is(m, "system") && i > 0)) {
            chatml_turn(o, m->role, V(m->content));
            continue;
        }
        if (is(m, "tool")) {
            hermes_result(c, i);
            continue;
        }
        if (!is(m, "assistant")) continue;
        view content = text_of(m), reasoning = {"", 0};
        long first = find(content, "</think>", 0);
        if (first >= 0) {
            long last = find(content, "</think>", 1);
            view before = rstrip_nl((view){content.p, (size_t)first});
            long open = find(before, "<think>", 1);
            if (open >= 0) before = (view){before.p + open + 7, before.n - (size_t)open - 7};
            reasoning = lstrip_nl(before);
            content = lstrip_nl((view){content.p + last + 8, content.n - (size_t)last - 8});
        }
        const int has_text = content.n > 0; /* what the template tests before a call, unstripped */
        put(o, "<|im_start|>assistant\n");
        if (i > last_query && (i == c->n - 1 || reasoning.n)) {
            put(o, "<think>\n");
            put_text(o, lstrip_nl(rstrip_nl(reasoning)));
            put(o, "\n</think>\n\n");
            content = lstrip_nl(content);
        }
        put_text(o, content);
        hermes_calls(o, m, has_text, SD_CHAT_QWEN3);
        put(o, "<|im_end|>\n");
    }
    if (c->p->add_generation_prompt) put(o, "<|im_start|>assistant\n");
    return SD_OK;
}

static void llama3_turn(buf *o, const char *role, const char *content) {
    put(o, "<|start_header_id|>");
    put(o, role);
    put(o, "<|end_header_id|>\n\n");
    put_text(o, trim(V(content)));
    put(o, "<|eot_id|>");
}

static const char LLAMA_TOOLS[] =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";

static sd_status render_llama3(const ctx *c, sd_chat_format f) {
    buf *o = c->out;
    int first = 0;
    if (f == SD_CHAT_LLAMA3) {
        put(o, c->p->bos_token);
    } else { /* 3.1 and later: a system header with dates, the system message (or nothing) in it */
        char today[32];
        const char *date = c->p->date;
        if (!date && f == SD_CHAT_LLAMA31) date = "26 Jul 2024";
        if (!date) {
            time_t now = time(NULL);
            struct tm tm;
            date = localtime_r(&now, &tm) && strftime(today, sizeof today, "%d %b %Y", &tm) ? today : "26 Jul 2024";
        }
        put(o, c->p->bos_token);
        put(o, "<|start_header_id|>system<|end_header_id|>\n\n");
        if (c->p->tools) put(o, "Environment: ipython\n");
        put(o, "Cutting Knowledge Date: December 2023\nToday Date: ");
        put(o, date);
        put(o, "\n\n");
        if (is(&c->m[0], "system")) {
            put_text(o, trim(V(c->m[0].content)));
            first = 1;
        }
        put(o, "<|eot_id|>");
    }
    /* the tools go in the first message after the system's (whatever its role), as a user turn */
    if (c->p->tools) {
        if (first == c->n)
            return template_error(f, "Cannot put tools in the first user message when there's no first user message!");
        put(o, "<|start_header_id|>user<|end_header_id|>\n\n");
        put(o, LLAMA_TOOLS);
        size_t at = 0, len = 0;
        while (next_tool(c->p->tools, &at, &len)) {
            put_json(o, c->p->tools + at, len, 4);
            put(o, "\n\n");
        }
        put_text(o, trim(text_of(&c->m[first])));
        put(o, "<|eot_id|>");
        first++;
    }
    for (int i = first; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (m->n_tool_calls) {
            if (m->n_tool_calls != 1) return template_error(f, "This model only supports single tool-calls at once!");
            put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"");
            put_text(o, V(m->tool_calls[0].name));
            put(o, "\", \"parameters\": ");
            put_json(o, m->tool_calls[0].arguments, strlen(m->tool_calls[0].arguments), -1);
            put(o, "}<|eot_id|>");
        } else if (is(m, "tool")) { /* a string is iterable to Jinja: the result goes through tojson */
            put(o, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            size_t n = 0;
            char *js = chat_pystring(m->content, strlen(m->content), &n);
            if (js) put_text(o, (view){js, n});
            else o->oom = 1;
            free(js);
            put(o, "<|eot_id|>");
        } else {
            llama3_turn(o, m->role, text_of(m).p);
        }
    }
    if (c->p->add_generation_prompt) put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return SD_OK;
}

static sd_status render_llama2(const ctx *c) {
    buf *o = c->out;
    int sys = is(&c->m[0], "system");
    for (int i = sys, j = 0; i < c->n; i++, j++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "user") != (j % 2 == 0)) return template_error(SD_CHAT_LLAMA2, ALTERNATE);
        view content = V(m->content);
        buf tmp = {0};
        if (j == 0 && sys) {
            put(&tmp, "<<SYS>>\n");
            put_text(&tmp, V(c->m[0].content));
            put(&tmp, "\n<</SYS>>\n\n");
            put_text(&tmp, V(m->content));
            if (tmp.oom) {
                free(tmp.p);
                free(tmp.sp);
                return sd_fail(SD_ERR_NOMEM, "chat template llama2: out of memory");
            }
            content = (view){tmp.p, tmp.n};
        } else {
            put_text(&tmp, content); /* one path for both: the text's spans travel through tmp */
            content = (view){tmp.p ? tmp.p : "", tmp.n};
        }
        if (is(m, "user")) {
            put(o, c->p->bos_token);
            put(o, "[INST] ");
            put_from(o, &tmp, trim(content));
            put(o, " [/INST]");
        } else if (is(m, "assistant")) {
            put(o, " ");
            put_from(o, &tmp, trim(content));
            put(o, " ");
            put(o, c->p->eos_token);
        }
        free(tmp.p);
        free(tmp.sp);
    }
    return SD_OK;
}

static sd_status render_mistral(const ctx *c) {
    buf *o = c->out;
    put(o, c->p->bos_token);
    for (int i = 0; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "user") != (i % 2 == 0)) return template_error(SD_CHAT_MISTRAL, ALTERNATE);
        if (is(m, "user")) {
            put(o, "[INST] ");
            put_text(o, V(m->content));
            put(o, " [/INST]");
        } else if (is(m, "assistant")) {
            put_text(o, V(m->content));
            put(o, c->p->eos_token);
        } else {
            return template_error(SD_CHAT_MISTRAL, "Only user and assistant roles are supported!");
        }
    }
    return SD_OK;
}

static sd_status render_gemma(const ctx *c) {
    buf *o = c->out;
    put(o, c->p->bos_token);
    if (is(&c->m[0], "system")) return template_error(SD_CHAT_GEMMA, "System role not supported");
    for (int i = 0; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "user") != (i % 2 == 0)) return template_error(SD_CHAT_GEMMA, ALTERNATE);
        put(o, "<start_of_turn>");
        put(o, is(m, "assistant") ? "model" : m->role);
        put(o, "\n");
        put_text(o, trim(V(m->content)));
        put(o, "<end_of_turn>\n");
    }
    if (c->p->add_generation_prompt) put(o, "<start_of_turn>model\n");
    return SD_OK;
}

static sd_status render_phi3(const ctx *c) {
    buf *o = c->out;
    for (int i = 0; i < c->n; i++) {
        const sd_chat_msg *m = &c->m[i];
        if (is(m, "system") && !m->content[0]) continue; /* an empty system message is left out */
        put(o, "<|");
        put(o, m->role);
        put(o, "|>\n");
        put_text(o, V(m->content));
        put(o, "<|end|>\n");
    }
    put(o, c->p->add_generation_prompt ? "<|assistant|>\n" : c->p->eos_token);
    return SD_OK;
}

/* ---- entry points ------------------------------------------------------------------------ */

static int json_ok(const char *s) {
    const size_t n = strlen(s), i = sd_json_skip_ws(s, n, 0);
    const size_t e = sd_json_value_end(s, n, i);
    return e != SD_JSON_BAD && sd_json_skip_ws(s, n, e) == n;
}

/* Roles, contents, calls and tools as the renderers take them; tool calling only where the format
 * has it. */
static sd_status check_messages(sd_chat_format f, const sd_chat_msg *msgs, int n, const char *tools) {
    const int has_tools = sd_chat_tool_syntax_of(f) != SD_CHAT_TOOLS_NONE;
    for (int i = 0; i < n; i++) {
        const sd_chat_msg *m = &msgs[i];
        if (!m->role) return sd_fail(SD_ERR_INVALID_ARG, "chat: message %d has no role", i);
        if (!is(m, "system") && !is(m, "user") && !is(m, "assistant") && !is(m, "tool"))
            return sd_fail(SD_ERR_INVALID_ARG,
                           "chat: message %d has role '%.40s' (the roles are system, user, assistant and tool)", i, m->role);
        if (m->n_tool_calls < 0 || (m->n_tool_calls && (!m->tool_calls || !is(m, "assistant"))))
            return sd_fail(SD_ERR_INVALID_ARG, "chat: message %d: only an assistant message has tool calls", i);
        if (!m->content && !m->n_tool_calls) return sd_fail(SD_ERR_INVALID_ARG, "chat: message %d has no content", i);
        if (!has_tools && (m->n_tool_calls || is(m, "tool")))
            return sd_fail(SD_ERR_UNSUPPORTED,
                           "chat template %s has no tool calling: message %d is %s (tool calling is written for "
                           "chatml, qwen2.5, qwen3, llama3.1 and llama3.2)",
                           k_names[f], i, m->n_tool_calls ? "an assistant's tool call" : "a tool's result");
        for (int k = 0; k < m->n_tool_calls; k++) {
            const sd_chat_tool_call *tc = &m->tool_calls[k];
            if (!tc->name || !tc->arguments)
                return sd_fail(SD_ERR_INVALID_ARG, "chat: message %d: tool call %d has no %s", i, k,
                               tc->name ? "arguments" : "name");
            if (!json_ok(tc->arguments))
                return sd_fail(SD_ERR_INVALID_ARG, "chat: message %d: tool call %d: the arguments are not JSON", i, k);
        }
    }
    if (!tools) return SD_OK;
    if (!has_tools)
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "chat template %s has no tool calling (it is written for chatml, qwen2.5, qwen3, llama3.1 and "
                       "llama3.2)",
                       k_names[f]);
    const size_t tn = strlen(tools), i0 = sd_json_skip_ws(tools, tn, 0);
    if (!json_ok(tools) || tools[i0] != '[')
        return sd_fail(SD_ERR_INVALID_ARG, "chat: the tools must be a JSON array of tool objects");
    size_t at = 0, len = 0;
    int k = 0;
    for (; next_tool(tools, &at, &len); k++)
        if (tools[at] != '{') return sd_fail(SD_ERR_INVALID_ARG, "chat: tool %d is not a JSON object", k);
    if (k == 0) return sd_fail(SD_ERR_INVALID_ARG, "chat: the tools array is empty (give NULL for none)");
    return SD_OK;
}

sd_chat_params sd_chat_default_params(void) {
    sd_chat_params p = {.add_generation_prompt = 1, .bos_token = "", .eos_token = "", .date = NULL, .tools = NULL};
    return p;
}

sd_chat_params sd_chat_params_for(const sd_tokenizer *t) {
    sd_chat_params p = sd_chat_default_params();
    const char *bos = t ? sd_tokenizer_piece(t, sd_tokenizer_bos(t), NULL) : NULL;
    const char *eos = t ? sd_tokenizer_piece(t, sd_tokenizer_eos(t), NULL) : NULL;
    if (bos) p.bos_token = bos;
    if (eos) p.eos_token = eos;
    return p;
}

sd_status sd_chat_render_spans(sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p, char **out,
                               size_t *out_len, sd_tok_span **spans, int *n_spans) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (!out || (unsigned)f >= SD_CHAT_N_FORMATS || (!msgs && n))
        return sd_fail(SD_ERR_INVALID_ARG, "chat: bad arguments");
    if (n < 1) return sd_fail(SD_ERR_INVALID_ARG, "chat: no messages to render");
    sd_chat_params d = sd_chat_default_params();
    if (!p) p = &d;
    sd_status st = check_messages(f, msgs, n, p->tools);
    if (st != SD_OK) return st;
    sd_chat_params q = *p; /* NULL tokens write nothing */
    if (!q.bos_token) q.bos_token = "";
    if (!q.eos_token) q.eos_token = "";
    buf b = {0};
    ctx c = {msgs, n, &q, &b};
    switch (f) {
    case SD_CHAT_CHATML:
    case SD_CHAT_QWEN25: st = render_chatml(&c, f); break;
    case SD_CHAT_QWEN3: st = render_qwen3(&c); break;
    case SD_CHAT_LLAMA3:
    case SD_CHAT_LLAMA31:
    case SD_CHAT_LLAMA32: st = render_llama3(&c, f); break;
    case SD_CHAT_LLAMA2: st = render_llama2(&c); break;
    case SD_CHAT_MISTRAL: st = render_mistral(&c); break;
    case SD_CHAT_GEMMA: st = render_gemma(&c); break;
    default: st = render_phi3(&c); break;
    }
    if (st == SD_OK && b.oom) st = sd_fail(SD_ERR_NOMEM, "chat: out of memory rendering %d messages", n);
    if (st == SD_OK && !b.p) put(&b, ""); /* an empty rendering is still a string */
    if (st == SD_OK && b.oom) st = sd_fail(SD_ERR_NOMEM, "chat: out of memory");
    if (st != SD_OK) {
        free(b.p);
        free(b.sp);
        return st;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    if (spans) {
        *spans = b.sp;
        if (n_spans) *n_spans = b.n_sp;
    } else {
        free(b.sp);
    }
    return SD_OK;
}

sd_status sd_chat_render(sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p, char **out,
                         size_t *out_len) {
    return sd_chat_render_spans(f, msgs, n, p, out, out_len, NULL, NULL);
}

/* BOS unless the template wrote it already ({{ bos_token }}). */
static int needs_bos(const sd_tokenizer *t, const char *text, size_t len) {
    size_t bl = 0;
    const char *bos = sd_tokenizer_piece(t, sd_tokenizer_bos(t), &bl);
    return sd_tokenizer_add_bos(t) && !(bos && bl && len >= bl && !memcmp(text, bos, bl));
}

sd_status sd_chat_tokenize(const sd_tokenizer *t, const char *text, size_t len, int32_t **ids, int *n_ids) {
    return sd_tokenizer_tokenize_alloc(t, text, len, needs_bos(t, text, len), 1, ids, n_ids);
}

sd_status sd_chat_tokenize_rendered(const sd_tokenizer *t, const char *text, size_t len, const sd_tok_span *spans,
                                    int n_spans, int content_special, int32_t **ids, int *n_ids) {
    /* The template may write BOS itself only in its own text: a message starting with BOS's
     * piece is text, not the template's BOS. */
    int bos = needs_bos(t, text, len);
    if (!bos && sd_tokenizer_add_bos(t) && !content_special && n_spans && spans[0].off == 0) bos = 1;
    return sd_tokenizer_tokenize_outside(t, text, len, bos, spans, content_special ? 0 : n_spans, ids, n_ids);
}

sd_status sd_chat_prompt(const sd_tokenizer *t, sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p,
                         int content_special, int32_t **ids, int *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    char *text = NULL;
    size_t len = 0;
    sd_tok_span *spans = NULL;
    int n_spans = 0;
    sd_status st = sd_chat_render_spans(f, msgs, n, p, &text, &len, &spans, &n_spans);
    if (st == SD_OK) st = sd_chat_tokenize_rendered(t, text, len, spans, n_spans, content_special, ids, n_ids);
    free(spans);
    free(text);
    return st;
}
