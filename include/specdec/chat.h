/* Chat prompts: recognising a model's chat template by its text and rendering messages the
 * way that template does, natively (no Jinja interpreter). */
#ifndef SPECDEC_CHAT_H
#define SPECDEC_CHAT_H

#include <stddef.h>

#include "specdec/grammar.h"
#include "specdec/status.h"
#include "specdec/tokenizer.h"

/* The formats specdec renders, each exactly as the template named beside it renders system, user
 * and assistant messages, and for the formats with tool calling (sd_chat_tool_syntax_of) the tools,
 * the assistant's calls and the tools' results (reasoning fields are not modelled). */
typedef enum {
    SD_CHAT_CHATML,   /* "chatml": teknium/OpenHermes-2.5-Mistral-7B's ChatML */
    SD_CHAT_QWEN25,   /* "qwen2.5": Qwen2.5-Instruct, ChatML with a default system message */
    SD_CHAT_QWEN3,    /* "qwen3": Qwen3, ChatML with <think> blocks after the last user turn */
    SD_CHAT_LLAMA3,   /* "llama3": Meta-Llama-3-8B-Instruct */
    SD_CHAT_LLAMA31,  /* "llama3.1": Llama-3.1/3.3-Instruct, system header with dates */
    SD_CHAT_LLAMA32,  /* "llama3.2": Llama-3.2-Instruct, the same with today's date */
    SD_CHAT_LLAMA2,   /* "llama2": Llama-2-chat, [INST] with <<SYS>> */
    SD_CHAT_MISTRAL,  /* "mistral": Mistral-7B-Instruct-v0.2, [INST] without system */
    SD_CHAT_GEMMA,    /* "gemma": gemma-2-it, <start_of_turn> without system */
    SD_CHAT_PHI3,     /* "phi3": Phi-3.5-mini-instruct */
    SD_CHAT_N_FORMATS
} sd_chat_format;

/* The names, comma-separated: "chatml, qwen2.5, ...". */
const char *sd_chat_known_names(void);
const char *sd_chat_name(sd_chat_format f); /* NULL when out of range */
/* The format of a --chat-template NAME; SD_ERR_INVALID_ARG naming the known ones. */
sd_status sd_chat_format_from_name(const char *name, sd_chat_format *out);

/* Recognises a template by its text, as llama.cpp does: <|im_start|> is ChatML (qwen3 when
 * it also has <think>, qwen2.5 when it has Qwen2.5's default system message), <|start_header_id|>
 * Llama 3 (llama3.2 with strftime_now, llama3.1 with "Cutting Knowledge Date"),
 * <start_of_turn> gemma, <|assistant|> with <|end|> phi3, [INST] llama2 with <<SYS>> and
 * mistral without. Anything else is SD_ERR_UNSUPPORTED, naming the known formats. */
sd_status sd_chat_detect(const char *tmpl, size_t len, sd_chat_format *out);

/* ---- tool calling ---- */

/* How a format writes the tools offered, the assistant's calls and the tools' results, and how its
 * model writes a call. */
typedef enum {
    SD_CHAT_TOOLS_NONE,   /* no tool calling: llama3 (Meta-Llama-3's template), llama2, mistral, gemma, phi3 */
    SD_CHAT_TOOLS_HERMES, /* chatml, qwen2.5, qwen3: the tools as JSON lines in <tools></tools> in the system
                             message; a call is <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
                             several one per line; results in <tool_response> blocks of a user turn */
    SD_CHAT_TOOLS_LLAMA3, /* llama3.1, llama3.2 (and 3.3): the tools as indented JSON in the first user message;
                             a call is the whole reply {"name": ..., "parameters": {...}}, one per turn;
                             results in ipython turns */
} sd_chat_tool_syntax;

sd_chat_tool_syntax sd_chat_tool_syntax_of(sd_chat_format f);

/* A call the assistant made (in a message given back to the template). */
typedef struct {
    const char *name;      /* the function's name */
    const char *arguments; /* its arguments: JSON text (an object) */
} sd_chat_tool_call;

typedef struct {
    const char *role;    /* "system", "user", "assistant" or "tool" (a tool's result) */
    const char *content; /* NUL-terminated UTF-8; NULL only for an assistant message with calls */
    const sd_chat_tool_call *tool_calls; /* an assistant message's calls (n_tool_calls), else NULL */
    int n_tool_calls;
} sd_chat_msg;

typedef struct {
    int add_generation_prompt; /* end with the assistant's header (default 1) */
    const char *bos_token;     /* what {{ bos_token }} writes (default "") */
    const char *eos_token;     /* what {{ eos_token }} writes (default "") */
    const char *date;          /* llama3.1/3.2 "Today Date: ..."; NULL: the template's default,
                                  "26 Jul 2024" for llama3.1, today ("%d %b %Y") for llama3.2 */
    const char *tools;         /* the tools offered, NULL: none: the JSON text of a non-empty array of
                                  OpenAI's tool objects ({"type": "function", "function": {...}}), each
                                  written as the template's tojson writes it (HF's: Python's json.dumps) */
} sd_chat_params;

sd_chat_params sd_chat_default_params(void);
/* Defaults with bos_token and eos_token set to the tokenizer's pieces (when it has them). */
sd_chat_params sd_chat_params_for(const sd_tokenizer *t);

/* Renders n >= 1 messages into *out (malloc'd, NUL-terminated, *out_len bytes; the caller
 * frees it). Where the template raises an exception (roles that do not alternate, a system
 * message the format has no place for, several calls in one Llama 3.1 turn) this returns
 * SD_ERR_INVALID_ARG with the template's own message; tools, calls or tool results for a format
 * without tool calling are SD_ERR_UNSUPPORTED naming it; on error *out is NULL. The text holds the
 * special tokens as text: tokenize it with parse_special (sd_tokenizer_tokenize). What the
 * templates do with JSON: qwen3 and chatml write a call's arguments as given (the template's case
 * of a string); qwen2.5 and llama3.1/3.2 write them, and llama3.1/3.2 a tool's result, through
 * tojson (Python's json.dumps of the parsed value: ", " and ": " separators, non-ASCII kept). */
sd_status sd_chat_render(sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p, char **out,
                         size_t *out_len);

/* sd_chat_render, also giving the byte ranges of *out that hold the messages' own text, ascending
 * (*spans malloc'd, NULL when there are none): everything else is the template's. */
sd_status sd_chat_render_spans(sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p, char **out,
                               size_t *out_len, sd_tok_span **spans, int *n_spans);

/* The prompt ids of text rendered by sd_chat_render for tokenizer t: every special token written
 * in it parsed, the messages' text included; BOS added (when t adds one) unless the template
 * already wrote it. *ids is malloc'd. */
sd_status sd_chat_tokenize(const sd_tokenizer *t, const char *text, size_t len, int32_t **ids, int *n_ids);

/* The prompt ids of messages: rendered by format f (errors as sd_chat_render's), then tokenized
 * with the template's markers as special tokens and the messages' text as text, so that a user
 * who writes "<|im_end|>" in a message gets those characters, not a turn of their own (as
 * content_special would give, parsing special tokens in the text too: llama.cpp's and HF's
 * behaviour). BOS as sd_chat_tokenize adds it. *ids is malloc'd. */
sd_status sd_chat_prompt(const sd_tokenizer *t, sd_chat_format f, const sd_chat_msg *msgs, int n, const sd_chat_params *p,
                         int content_special, int32_t **ids, int *n_ids);
/* sd_chat_prompt's second half, for a caller that looks at the rendering first (its length):
 * text and spans from sd_chat_render_spans. */
sd_status sd_chat_tokenize_rendered(const sd_tokenizer *t, const char *text, size_t len, const sd_tok_span *spans,
                                    int n_spans, int content_special, int32_t **ids, int *n_ids);

/* ---- the calls in a model's output ---- */

/* A tool as the grammar of its calls needs it. */
typedef struct {
    const char *name;       /* [A-Za-z0-9_-]{1,64} */
    const char *parameters; /* the JSON Schema of its arguments (parameters_len bytes); NULL: no
                               arguments, the empty object */
    size_t parameters_len;
} sd_chat_tool;

enum {
    SD_CHAT_TOOL_ANY = -1,        /* sd_chat_tool_grammar's only: a call of any tool */
    SD_CHAT_TOOL_AFTER_TEXT = -2, /* text, or calls of any tool where one starts (tool_choice auto) */
};

/* The grammar of what a model of syntax s writes when it must call a tool: only >= 0 one call of
 * tools[only]; only SD_CHAT_TOOL_ANY one call of any of them, or with parallel (HERMES) one or more,
 * one per line. SD_CHAT_TOOL_AFTER_TEXT: the same calls, but as a lazy grammar
 * (sd_grammar_set_trigger) whose text is free until a call starts as the reader below sees one start
 * (HERMES: "<tool_call>" anywhere; LLAMA3: "{" as the reply's first character), so that a reply
 * may be text, and a call, once started, is well-formed. Each call's arguments follow its tool's
 * parameters schema, compiled as
 * sd_grammar_from_json_schema_ex compiles it with p (NULL: bounded whitespace). Errors: a bad name
 * SD_ERR_INVALID_ARG; a schema's errors as the schema compiler gives them ("schema: .path: ..."),
 * with *bad (when not NULL) the tool's index, else -1. */
sd_status sd_chat_tool_grammar(sd_chat_tool_syntax s, const sd_chat_tool *tools, int n, int only, int parallel,
                               const sd_json_schema_params *p, int *bad, sd_grammar **out);

/* Reading calls out of a model's output as it is generated.
 *
 * constrained: the output was generated under sd_chat_tool_grammar's grammar, so it is calls from
 * its first byte: each call is reported as soon as its name is complete, and its arguments as they
 * come (the bytes the model wrote). Otherwise (tool_choice auto) the output is text until a call
 * may start (HERMES: "<tool_call>"; LLAMA3: a reply starting with "{"); text is reported as it
 * comes, holding back what may begin a call, and from there everything is held to the end, then read
 * as calls when it is well-formed: HERMES blocks <tool_call> JSON </tool_call> (whitespace between,
 * nothing after), each a JSON object of exactly "name" and "arguments"; LLAMA3 one JSON object of
 * "name" and "parameters" (or "arguments"); every name one of names, every arguments a JSON object.
 * Anything else is text, all of it, so that reading the output whole or in pieces gives the same.
 * The text before a HERMES call loses its trailing whitespace. */
typedef struct sd_chat_tool_parser sd_chat_tool_parser;

typedef enum {
    SD_CHAT_TOOL_CONTENT, /* text of the reply */
    SD_CHAT_TOOL_CALL,    /* a call starts: text is the function's name */
    SD_CHAT_TOOL_ARGS,    /* more of the call's arguments */
} sd_chat_tool_event_kind;

typedef struct {
    sd_chat_tool_event_kind kind;
    int call;         /* CALL, ARGS: the call's index (0, 1, ...) */
    const char *text; /* len bytes (not NUL-terminated) */
    size_t len;
} sd_chat_tool_event;

/* names: the tools' names (copied). */
sd_status sd_chat_tool_parser_create(sd_chat_tool_syntax s, int constrained, const char *const *names, int n_names,
                                     sd_chat_tool_parser **out);
void sd_chat_tool_parser_free(sd_chat_tool_parser *p); /* NULL is fine */

/* Feeds len more bytes of output (final: the output ends with them) and gives the events they
 * complete, in order: *events stays valid until the next call. After final nothing more may be fed.
 * A constrained output cut short (max_tokens) ends with the calls whose names were complete, the
 * last one's arguments as far as they came; a call cut before its name is complete is text. */
sd_status sd_chat_tool_parser_feed(sd_chat_tool_parser *p, const char *text, size_t len, int final,
                                   const sd_chat_tool_event **events, int *n_events);
/* Calls reported so far. */
int sd_chat_tool_parser_n_calls(const sd_chat_tool_parser *p);

#endif
