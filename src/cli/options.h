/* The command line's one table of options: every flag of every subcommand (name, alias, type,
 * range, default, help text, the field it sets, the commands that take it), parsed by one
 * routine and printed by one --help. Commands that take the same flags (generate, serve,
 * bench-decode) share their rows. */
#ifndef SD_CLI_OPTIONS_H
#define SD_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "specdec/sample.h"
#include "specdec/spec.h"
#include "specdec/types.h"

enum {
    CMD_GENERATE = 1 << 0,
    CMD_SERVE = 1 << 1,
    CMD_BENCH_DECODE = 1 << 2,
    CMD_INFO = 1 << 3,
    CMD_CONVERT = 1 << 4,
    CMD_MKMODEL = 1 << 5,
    CMD_BENCH = 1 << 6,
    CMD_TOKENIZE = 1 << 7,
    CMD_BENCH_GRAMMAR = 1 << 8,
};

/* Everything a command can be told. */
typedef struct {
    /* models */
    const char *model, *draft, *tokenizer, *draft_tokenizer;
    int draft_type; /* -1: none */
    /* drafting */
    int draft_max, draft_min, draft_fixed, ngram, ngram_min, ngram_max, tree;
    float p_min;
    int p_min_set;
    /* generation */
    const char *prompt, *prompt_file, *system, *chat_template;
    int n_predict, n_predict_set, ignore_eos, chat, special, ids;
    sd_sampler_params sampling;
    /* runtime */
    int threads, threads_set, n_ctx, compare, no_stream;
    sd_type kv_type;
    const char *stats_json;
    /* bench-decode */
    int prefill, pos, reps, bw_mib, no_batch;
    /* convert, mkmodel */
    int type;
    const char *twin, *shape;
    int dim, layers, heads, kv_heads, head_dim, hidden, vocab, ctx, tied;
    uint64_t model_seed;
    const char *arch;
    /* bench */
    int quick;
    const char *out_dir;
    /* tokenize */
    int pieces, no_bos, no_parse_special;
    /* bench-grammar */
    const char *json_schema, *grammar_file;
    int json_compact, no_grammar_drafts;
    /* serve */
    const char *host, *api_key, *alias, *cors;
    int port, parallel, timeout, queue, chat_special, request_timeout, max_conns, buffer_mib, shutdown_timeout,
        health_busy;
    /* positional arguments */
    const char *pos_args[4];
    int n_pos;
} cli_opts;

/* The defaults of every field (threads: the online CPUs); the engine's from sd_spec_default_params. */
void cli_opts_default(cli_opts *o);
/* The engine parameters the options give (drafting, sampling, budget, contexts): the one mapping
 * of flags to sd_spec_params for generate, serve and the bench. */
void cli_spec_params(const cli_opts *o, sd_spec_params *p);

/* Parses argv[1..argc) for one command into o. Returns 0 to go on, 1 after printing --help
 * (exit 0), 2 after a usage error (printed). At most max_pos positional arguments. */
int cli_parse(int argc, char **argv, unsigned cmd, cli_opts *o, int max_pos);

/* Prints specdec's usage: the commands, from the table. */
void cli_usage(FILE *f);
/* Runs the command argv[0] names with its arguments; an unknown one is a usage error (2). */
int cli_run(int argc, char **argv);

/* Prints the command's usage, description and options (from the table). */
void cli_help(FILE *f, unsigned cmd);

#endif
