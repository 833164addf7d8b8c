/* Fuzz bodies for chat prompts and the Hugging Face files beside tokenizer.json: template
 * recognition and rendering of arbitrary messages (tools and calls included), reading tool calls
 * out of arbitrary output, and generation_config.json / tokenizer_config.json applied to a
 * tokenizer (which must be unchanged when they fail). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "specdec/chat.h"
#include "specdec/tokenizer.h"

/* Renders msgs in format f and checks the result: a NUL-terminated string of the stated
 * length, or a printable refusal with nothing returned. */
static void render_checked(sd_chat_format f, const sd_chat_msg *msgs, int n, int gen, size_t content_bytes,
                           const char *tools) {
    sd_chat_params p = sd_chat_default_params();
    p.add_generation_prompt = gen;
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.date = "01 Jan 2025";
    char *out = (char *)1;
    size_t len = 12345;
    sd_clear_error();
    p.tools = tools;
    sd_status st = sd_chat_render(f, msgs, n, &p, &out, &len);
    if (st != SD_OK) {
        SD_FUZZ_CHECK((st == SD_ERR_INVALID_ARG || st == SD_ERR_UNSUPPORTED) && out == NULL && len == 0);
        sd_fuzz_check_error();
        return;
    }
    SD_FUZZ_CHECK(out != NULL && strlen(out) == len);
    int has_tool = 0;
    size_t json = tools ? 4 * strlen(tools) + 600 : 0; /* the tools and their instructions, indented at most 4 times */
    for (int i = 0; i < n; i++) {
        has_tool |= !strcmp(msgs[i].role, "tool") || msgs[i].n_tool_calls;
        /* llama3.x writes a result through tojson: quoted, a control character as \u00XX */
        if (!strcmp(msgs[i].role, "tool")) json += 5 * strlen(msgs[i].content) + 2;
        /* arguments written again by json.dumps: ", " for ",", and "1e9" as "1000000000.0" */
        for (int k = 0; k < msgs[i].n_tool_calls; k++) json += 6 * strlen(msgs[i].tool_calls[k].arguments) + 64;
    }
    /* every format writes at most each content once plus its markers (and a date header), and the
     * JSON above */
    SD_FUZZ_CHECK(len <= content_bytes + 64 * (size_t)n + 160 + json);
    if (f == SD_CHAT_CHATML && !tools && !has_tool) { /* exactly: <|im_start|>role\ncontent<|im_end|>\n per message */
        size_t want = gen ? 22 : 0;
        for (int i = 0; i < n; i++) want += 12 + strlen(msgs[i].role) + 1 + strlen(msgs[i].content) + 11;
        SD_FUZZ_CHECK(len == want);
    }
    /* the same text with the messages' spans: ascending, inside it, no more than the content (all
     * of it where nothing is trimmed) */
    char *out2 = NULL;
    size_t len2 = 0;
    sd_tok_span *sp = NULL;
    int n_sp = 0;
    SD_FUZZ_CHECK(sd_chat_render_spans(f, msgs, n, &p, &out2, &len2, &sp, &n_sp) == SD_OK);
    SD_FUZZ_CHECK(len2 == len && memcmp(out, out2, len) == 0);
    size_t covered = 0, text = json;
    for (int i = 0; i < n; i++) text += msgs[i].content ? strlen(msgs[i].content) : 0;
    for (int i = 0; i < n_sp; i++) {
        SD_FUZZ_CHECK(sp[i].len > 0 && sp[i].off + sp[i].len <= len);
        SD_FUZZ_CHECK(i == 0 || sp[i].off >= sp[i - 1].off + sp[i - 1].len);
        covered += sp[i].len;
    }
    SD_FUZZ_CHECK(covered <= text);
    if (f == SD_CHAT_CHATML && !tools && !has_tool) SD_FUZZ_CHECK(covered == text);
    free(sp);
    free(out2);
    free(out);
}

/* Input: a mode byte (low 4 bits: the format for the messages; bit 4: generation prompt; bit 5:
 * with tools), then text that is (a) a chat template to recognise and (b) messages: segments split
 * at 0x00, each a role byte (system, user, assistant, tool, an unknown role, or an assistant that
 * calls a tool with the content as arguments) and its content. */
int sd_fuzz_chat(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const sd_chat_format f = (sd_chat_format)((data[0] & 15) % SD_CHAT_N_FORMATS);
    const int gen = (data[0] >> 4) & 1;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    sd_chat_format d = SD_CHAT_N_FORMATS;
    sd_clear_error();
    if (sd_chat_detect(text, len, &d) == SD_OK) {
        SD_FUZZ_CHECK((unsigned)d < SD_CHAT_N_FORMATS && sd_chat_name(d) != NULL);
        static const sd_chat_msg conv[] = {{"system", "Be brief.", NULL, 0}, {"user", "Hello", NULL, 0}};
        render_checked(d, conv, 2, 1, 14, NULL);
        render_checked(d, conv + 1, 1, 0, 5, NULL);
    } else {
        sd_fuzz_check_error();
    }

    enum { MAX_MSGS = 8 };
    static const char *const roles[] = {"system", "user", "assistant", "tool", "bot", "assistant"};
    static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                                "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"minimum\": 1e-7}}}}}]";
    char *copy = malloc(len + 1);
    SD_FUZZ_CHECK(copy != NULL);
    if (len) memcpy(copy, text, len);
    copy[len] = '\0';
    sd_chat_msg msgs[MAX_MSGS];
    sd_chat_tool_call calls[MAX_MSGS];
    int n = 0;
    for (size_t pos = 0; pos < len && n < MAX_MSGS;) {
        size_t end = pos;
        while (end < len && copy[end]) end++;
        const int r = (unsigned char)copy[pos] % 6;
        msgs[n].role = roles[r];
        msgs[n].content = copy + pos + 1 <= copy + end ? copy + pos + 1 : copy + end;
        msgs[n].tool_calls = NULL;
        msgs[n].n_tool_calls = 0;
        if (r == 5) { /* a call: its arguments the content (JSON or not), no content */
            calls[n] = (sd_chat_tool_call){"f", msgs[n].content};
            msgs[n].tool_calls = &calls[n];
            msgs[n].n_tool_calls = 1;
            msgs[n].content = NULL;
        }
        n++;
        pos = end + 1;
    }
    if (n > 0) render_checked(f, msgs, n, gen, len, (data[0] >> 5) & 1 ? tools : NULL);
    free(copy);
    return 0;
}

/* An output's reading: every event's text joined (content marked by a leading 'c', calls by 'n',
 * arguments by 'a' and the call's index), and the call count. */
typedef struct {
    char *p;
    size_t n, cap;
    int calls;
} tc_log;

static void tc_put(tc_log *l, const void *s, size_t n) {
    if (l->n + n + 1 > l->cap) {
        l->cap = (l->n + n + 1) * 2;
        l->p = realloc(l->p, l->cap);
        SD_FUZZ_CHECK(l->p != NULL);
    }
    memcpy(l->p + l->n, s, n);
    l->n += n;
}

/* Reads text in pieces (sizes: 1 + the low 4 bits of each byte in turn; a 0 byte: the whole rest),
 * each event logged; consecutive content and argument pieces merged, which differ only in the cuts. */
static void tc_read(sd_chat_tool_syntax syn, int constrained, const char *text, size_t len, const uint8_t *sizes,
                    size_t n_sizes, tc_log *l) {
    static const char *const names[] = {"f", "get_weather"};
    sd_chat_tool_parser *p = NULL;
    SD_FUZZ_CHECK(sd_chat_tool_parser_create(syn, constrained, names, 2, &p) == SD_OK);
    size_t at = 0, k = 0;
    char last = 0;
    int last_call = -1;
    do {
        size_t step = len - at;
        if (n_sizes && sizes[k % n_sizes]) step = 1 + (sizes[k % n_sizes] & 15);
        k++;
        if (step > len - at) step = len - at;
        const sd_chat_tool_event *ev = NULL;
        int n_ev = 0;
        SD_FUZZ_CHECK(sd_chat_tool_parser_feed(p, text + at, step, at + step == len, &ev, &n_ev) == SD_OK);
        for (int i = 0; i < n_ev; i++) {
            const char kind = ev[i].kind == SD_CHAT_TOOL_CONTENT ? 'c' : ev[i].kind == SD_CHAT_TOOL_CALL ? 'n' : 'a';
            SD_FUZZ_CHECK(ev[i].len > 0 || kind == 'n');
            if (kind == 'n') {
                SD_FUZZ_CHECK(ev[i].call == l->calls);
                l->calls++;
            } else if (kind == 'a') {
                SD_FUZZ_CHECK(ev[i].call == l->calls - 1);
            }
            if (kind == 'n' || kind != last || ev[i].call != last_call) { /* a new event, not more of the last */
                const char mark[2] = {kind, (char)('0' + (ev[i].call & 31))};
                tc_put(l, mark, 2);
            }
            tc_put(l, ev[i].text, ev[i].len);
            last = kind;
            last_call = ev[i].call;
        }
        at += step;
    } while (at < len);
    SD_FUZZ_CHECK(sd_chat_tool_parser_n_calls(p) == l->calls);
    sd_chat_tool_parser_free(p);
}

/* Input: a mode byte (bit 0: Llama 3 syntax, else Hermes; bit 1: constrained), 4 bytes of piece
 * sizes (low 4 bits; 0: the rest), then an output. Read whole and in pieces it reads the same;
 * nothing is invented (the events' text adds up to at most the output, content and names as they are
 * in it); in auto mode the reply is either all text, as it came, or calls of known functions whose
 * arguments are JSON objects, after text that starts the output. */
int sd_fuzz_tool_calls(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    const sd_chat_tool_syntax syn = (data[0] & 1) ? SD_CHAT_TOOLS_LLAMA3 : SD_CHAT_TOOLS_HERMES;
    const int constrained = (data[0] >> 1) & 1;
    const char *text = (const char *)data + 5;
    const size_t len = size - 5;
    tc_log whole = {0}, pieces = {0};
    tc_read(syn, constrained, text, len, NULL, 0, &whole);
    tc_read(syn, constrained, text, len, data + 1, 4, &pieces);
    SD_FUZZ_CHECK(whole.calls == pieces.calls && whole.n == pieces.n && (!whole.n || !memcmp(whole.p, pieces.p, whole.n)));
    static const char *const names[] = {"f", "get_weather"};
    sd_chat_tool_parser *p = NULL;
    SD_FUZZ_CHECK(sd_chat_tool_parser_create(syn, constrained, names, 2, &p) == SD_OK);
    const sd_chat_tool_event *ev = NULL;
    int n_ev = 0;
    SD_FUZZ_CHECK(sd_chat_tool_parser_feed(p, text, len, 1, &ev, &n_ev) == SD_OK);
    size_t bytes = 0, content = 0;
    for (int i = 0; i < n_ev; i++) {
        bytes += ev[i].len;
        if (ev[i].kind == SD_CHAT_TOOL_CONTENT) {
            /* auto: text comes first, as it is in the output */
            if (!constrained) SD_FUZZ_CHECK(content + ev[i].len <= len && !memcmp(ev[i].text, text + content, ev[i].len));
            content += ev[i].len;
        } else if (ev[i].kind == SD_CHAT_TOOL_CALL) {
            SD_FUZZ_CHECK((ev[i].len == 1 && ev[i].text[0] == 'f') || (ev[i].len == 11 && !memcmp(ev[i].text, "get_weather", 11)) ||
                          constrained);
        } else if (!constrained) {
            cJSON *a = cJSON_ParseWithLength(ev[i].text, ev[i].len);
            SD_FUZZ_CHECK(cJSON_IsObject(a));
            cJSON_Delete(a);
        }
    }
    SD_FUZZ_CHECK(bytes <= len);
    if (!constrained && whole.calls == 0) SD_FUZZ_CHECK(content == len);
    sd_chat_tool_parser_free(p);
    free(whole.p);
    free(pieces.p);
    return 0;
}

/* Input: one JSON file (generation_config.json or tokenizer_config.json) applied to a fresh
 * synthetic tokenizer (64 ids). A failure must leave the tokenizer as it was; a success may
 * only add valid end-of-generation ids (kept ascending) and a template. */
int sd_fuzz_hf_config(const uint8_t *data, size_t size) {
    static char *json;
    static size_t json_len;
    if (!json) {
        json = sd_fuzz_hf_tokenizer_json(64, &json_len);
        SD_FUZZ_CHECK(json != NULL);
    }
    sd_tokenizer *t = NULL;
    SD_FUZZ_CHECK(sd_tokenizer_from_hf_json(json, json_len, "synth.tokenizer.json", -1, -1, &t) == SD_OK);
    const int32_t *before;
    const int n_before = sd_tokenizer_eog(t, &before);
    int32_t saved[8];
    SD_FUZZ_CHECK(n_before <= 8);
    memcpy(saved, before, (size_t)n_before * sizeof *saved);
    const int32_t bos = sd_tokenizer_bos(t), eos = sd_tokenizer_eos(t);

    char *in = malloc(size ? size : 1); /* exact size, no terminator */
    SD_FUZZ_CHECK(in != NULL);
    if (size) memcpy(in, data, size);
    sd_clear_error();
    sd_status st = sd_tokenizer_apply_hf_config(t, in, size, "fuzz.config.json");
    free(in);
    const int32_t *ids;
    const int n = sd_tokenizer_eog(t, &ids);
    size_t tl = 0;
    const char *tmpl = sd_tokenizer_chat_template(t, &tl);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(st == SD_ERR_FORMAT);
        sd_fuzz_check_error();
        SD_FUZZ_CHECK(n == n_before && !memcmp(ids, saved, (size_t)n * sizeof *ids));
        SD_FUZZ_CHECK(tmpl == NULL && sd_tokenizer_bos(t) == bos && sd_tokenizer_eos(t) == eos);
    } else {
        SD_FUZZ_CHECK(n >= n_before);
        for (int i = 0; i < n; i++) {
            SD_FUZZ_CHECK(ids[i] >= 0 && ids[i] < sd_tokenizer_n_vocab(t));
            SD_FUZZ_CHECK(i == 0 || ids[i - 1] < ids[i]);
            SD_FUZZ_CHECK(sd_tokenizer_is_eog(t, ids[i]));
        }
        SD_FUZZ_CHECK(sd_tokenizer_eos(t) >= -1 && sd_tokenizer_eos(t) < sd_tokenizer_n_vocab(t));
        if (tmpl) {
            SD_FUZZ_CHECK(strlen(tmpl) == tl);
            sd_chat_format f;
            if (sd_chat_detect(tmpl, tl, &f) != SD_OK) sd_fuzz_check_error();
        }
    }
    sd_tokenizer_free(t);
    return 0;
}
