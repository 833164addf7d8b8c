/* Chat prompts: recognising a model's chat template by its text and rendering messages the
 * way that template does, natively (no Jinja interpreter). */
#ifndef SPECDEC_CHAT_H
#define SPECDEC_CHAT_H

#include <stddef.h>

#include "specdec/status.h"
#include "specdec/tokenizer.h"

/* The formats specdec renders, each exactly as the template named beside it renders plain
 * system/user/assistant messages (tools, tool calls and reasoning fields are not modelled). */
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

typedef struct {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* NUL-terminated UTF-8 */
} sd_chat_msg;

typedef struct {
    int add_generation_prompt; /* end with the assistant's header (default 1) */
    const char *bos_token;     /* what {{ bos_token }} writes (default "") */
    const char *eos_token;     /* what {{ eos_token }} writes (default "") */
    const char *date;          /* llama3.1/3.2 "Today Date: ..."; NULL: the template's default,
                                  "26 Jul 2024" for llama3.1, today ("%d %b %Y") for llama3.2 */
} sd_chat_params;

sd_chat_params sd_chat_default_params(void);
/* Defaults with bos_token and eos_token set to the tokenizer's pieces (when it has them). */
sd_chat_params sd_chat_params_for(const sd_tokenizer *t);

/* Renders n >= 1 messages into *out (malloc'd, NUL-terminated, *out_len bytes; the caller
 * frees it). Where the template raises an exception (roles that do not alternate, a system
 * message the format has no place for) this returns SD_ERR_INVALID_ARG with the template's
 * own message; on error *out is NULL. The text holds the special tokens as text: tokenize it
 * with parse_special (sd_tokenizer_tokenize). */
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

#endif
