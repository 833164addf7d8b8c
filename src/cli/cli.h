/* Shared pieces of the specdec command line: argument helpers, model lookup, errors. */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/options.h"
#include "specdec/grammar.h"
#include "core/io.h"
#include "specdec/bench.h"
#include "specdec/chat.h"
#include "specdec/model.h"
#include "specdec/status.h"

/* Prints "error: <msg>" for a failed status (message from sd_last_error) and returns 1. */
int cli_error_status(sd_status st);
/* Prints "error: <formatted>" and returns 2 (usage errors). */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Strict number parsing: the whole string must be a number in [lo, hi]. 0 on success. */
int cli_parse_int(const char *flag, const char *s, long lo, long hi, int *out);
int cli_parse_float(const char *flag, const char *s, double lo, double hi, float *out);
int cli_parse_u64(const char *flag, const char *s, uint64_t *out);

/* Resolves a model argument: an existing path, else NAME, NAME.gguf, NAME.bin,
 * NAME/NAME.bin, NAME/NAME.gguf under each directory of the model search path
 * ($SPECDEC_MODEL_PATH, colon-separated; ./models; ../shared/models). Returns a static
 * buffer or NULL (with an error printed listing where it looked). */
const char *cli_resolve_model(const char *arg, char *buf, size_t cap);

/* sd_cache_bytes: last-level cache plus the L2 of `threads` cores (sysfs, else CPUID), 0 when
 * unknown: weights smaller than this can stay cached between decode steps. */
double cli_cache_bytes(int threads, sd_cache_source *src);

/* Loads a model with a tokenizer override; prints the error. */
int cli_load_model(const char *arg, const char *tokenizer, const char *tokenizer_fallback, sd_model **out);

/* The target and the draft model of o (-m, -md, -z, -zd, --draft-type): a llama2.c draft without a
 * tokenizer beside it shares the target's; --draft-type quantises the draft in memory, or the
 * target itself when -md names it or is absent. *dm is NULL without a draft. 0, or the exit
 * status after printing the error (nothing loaded). */
int cli_load_pair(const cli_opts *o, sd_model **tm, sd_model **dm);

/* The grammar options (grammar_opts.c): the text of --grammar FILE or --json-schema FILE|JSON (an
 * argument starting with '{' is the schema itself); *text NULL when neither is given. 0, or the
 * exit status after printing the error. */
int cli_grammar_text(const cli_opts *o, char **text, size_t *len, int *is_schema);
/* Compiles such a text (NULL text: any JSON object), JSON whitespace as --json-ws says. */
sd_status cli_grammar_compile(const cli_opts *o, const char *text, size_t len, int is_schema, sd_grammar **g);
/* Both: *g NULL when no grammar option is given; 0 or the exit status after printing the error
 * (naming the file; a schema's unsupported keyword by name and path). */
int cli_grammar(const cli_opts *o, sd_grammar **g);

/* How generate turns -p into prompt ids (gen_prompt.c). */
typedef struct {
    int chat;                  /* --chat: the text is one user turn, rendered by the chat template */
    const char *system;        /* --system TEXT: a system turn before it (NULL: none) */
    const char *template_name; /* --chat-template NAME (NULL: the model's template) */
    int special;               /* --special: parse special tokens written in the prompt (with --chat: in its text) */
} cli_prompt_opts;

/* The chat format of tokenizer t of `model`: template_name's (NULL: the model's template,
 * recognised by its text; ChatML with a warning when it has none). 0, or the exit status after
 * printing the error. */
int cli_chat_format(const sd_tokenizer *t, const char *template_name, const char *model, sd_chat_format *f);

/* The prompt ids of text for tokenizer t of `model` (named in messages), malloc'd into *ids.
 * Returns 0, or the exit status after printing the error (1 runtime, 2 usage). */
int cli_prompt_ids(const sd_tokenizer *t, const char *model, const cli_prompt_opts *o, const char *text,
                   int32_t **ids, int *n_ids);

/* SIGINT sets this; engines poll it between tokens. */
extern volatile sig_atomic_t cli_interrupted;
void cli_install_sigint(void);


int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench_decode(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench_grammar(int argc, char **argv);

#endif
