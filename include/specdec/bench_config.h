/* Bench configurations: a JSON file naming a draft/target pair, prompts, a sweep of draft
 * lengths, sampling, threads and report paths, checked strictly (unknown keys are errors). */
#ifndef SPECDEC_BENCH_CONFIG_H
#define SPECDEC_BENCH_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/spec.h"
#include "specdec/status.h"
#include "specdec/synth.h"

/* One model of the pair: a path or search-path name, a random-weight shape (cost measurements
 * only), or a cost twin of a trained model; the bench writes the last two on demand into the
 * model cache. */
typedef struct {
    char *model;      /* "model": path or name (NULL when generated) */
    char *tokenizer;  /* "tokenizer": tokenizer.bin of a llama2.c model (optional) */
    char *quantize;   /* "quantize": type name ("q4_0") the loaded model is quantised to in
                         memory (as generate --draft-type), or NULL */
    int generated;    /* 1: "generate" was given */
    int twin;         /* 1: "twin" was given: a cost twin of twin_of (specdec/twin.h) */
    char *twin_of;    /* "twin.of": path or name of the small model */
    char *twin_tokenizer; /* "twin.tokenizer": tokenizer.bin of a llama2.c small model (optional) */
    char *shape;      /* "generate.shape" or "twin.shape" */
    char *arch;       /* "generate.arch" (NULL: llama), which synth.arch points to */
    sd_synth_params synth; /* the full shape, seed and weight type of a generated model or twin
                              (a twin uses dim, layers, heads, kv heads, hidden, wtype, seed) */
} sd_bench_model_spec;

/* What drafts in a bench run. Every strategy but "fixed" runs once, with the sweep's largest k as
 * its cap; "fixed" runs once per k. */
typedef enum {
    SD_BENCH_FIXED,       /* the draft model, always k tokens (--draft-fixed) */
    SD_BENCH_ADAPTIVE,    /* the draft model, the length chosen per pass (the default) */
    SD_BENCH_PMIN,        /* the draft model, stopping below draft probability p_min (--draft-p-min) */
    SD_BENCH_NGRAM,       /* prompt lookup alone, no draft model (--draft ngram) */
    SD_BENCH_MODEL_NGRAM, /* prompt lookup, the draft model where it finds no match (-md M --draft ngram) */
    SD_BENCH_TREE,        /* the draft model's tree of tree_budget nodes (--draft-tree) */
    /* with a "constraint" only: the adaptive draft model ... */
    SD_BENCH_UNCONSTRAINED,     /* ... with no constraint at all (plain runs unconstrained too) */
    SD_BENCH_NO_GRAMMAR_DRAFTS, /* ... under the constraint, without its forced bytes as drafts */
    SD_BENCH_N_STRATEGIES
} sd_bench_strategy;

/* "fixed", "adaptive", "p_min", "ngram", "model+ngram", "tree", "unconstrained", "no-grammar-drafts" */
const char *sd_bench_strategy_name(sd_bench_strategy s);

typedef struct {
    char *file;        /* the path the config was read from (for messages and the report) */
    char *name;        /* "name"; default: the file's base name without .json */
    char *description; /* "description" (optional) */
    sd_bench_model_spec target, draft;

    /* "prompts": {"text": [...]} or {"file": PATH, "count": N, "first_sentence": bool} */
    char **prompts;    /* inline prompts (n_prompts of them), NULL with a prompt file */
    int n_prompts;
    char *prompt_file; /* one prompt per paragraph (blank-line separated) */
    int prompt_count;  /* paragraphs to take from the file (default 4) */
    int first_sentence;/* cut each paragraph after its first sentence */
    char *prompt_template; /* "prompts.template": each prompt becomes this text with {text} replaced by
                            * the prompt and {first_sentence} by its first sentence (NULL: as is) */

    int n_predict;     /* "n_predict": tokens to generate (default 128) */
    int ignore_eos;    /* "ignore_eos" (default true: every run generates n_predict tokens) */
    int k[SD_MAX_DRAFT]; /* "sweep.k": draft lengths, 1..SD_MAX_DRAFT */
    int n_k;
    /* "sweep.strategies": what drafts, in the report's order (default: fixed only) */
    sd_bench_strategy strategies[SD_BENCH_N_STRATEGIES];
    int n_strategies;
    int tree_budget;   /* "sweep.tree_budget": nodes per pass of "tree" (default 16) */
    float p_min;       /* "sweep.p_min": threshold of "p_min" (default 0.75, llama.cpp's) */
    sd_sampler_params sampling; /* "sampling": temperature, top_k, top_p, seed */
    /* "sampling.mode": "coupled", "rejection", or both as an array: every run is made in each
     * (plain and speculative alike), the modes alternating run by run (default: the engine's) */
    sd_sampling_mode modes[2];
    int n_modes;
    /* "constraint": every run (plain and speculative) generates under a grammar:
     * {"json_schema": PATH or the schema object, or "gbnf": PATH; "whitespace": "bounded" or
     * "compact"}; the grammar's forced bytes are drafted (but by "no-grammar-drafts") */
    char *constraint_schema;   /* the schema's JSON text (inline), or NULL */
    char *constraint_file;     /* the schema's or the grammar's file, or NULL */
    int constraint_gbnf;       /* constraint_file is GBNF */
    int constraint_compact;    /* whitespace "compact" */
    int threads;       /* "threads": 0 = online CPUs */
    int repetitions;   /* "repetitions": plain/speculative pairs per prompt and k (default 3) */
    char *out_json;    /* "output.json" (default docs/benchmarks/NAME.json) */
    char *out_svg;     /* "output.svg" (default docs/benchmarks/NAME.svg) */
} sd_bench_config;

/* Parses a config from text; `file` names it in messages. Errors are SD_ERR_FORMAT (bad JSON,
 * "FILE: line L, column C: ...") or SD_ERR_INVALID_ARG ("FILE: .json.path: expected ..., got
 * ..."), the message in sd_last_error(). Files named in the config are not opened here. */
sd_status sd_bench_config_parse(const char *text, size_t len, const char *file, sd_bench_config *out);
sd_status sd_bench_config_load(const char *path, sd_bench_config *out);
void sd_bench_config_free(sd_bench_config *c); /* NULL is fine; leaves *c zeroed */

/* Prompts from a text file: paragraphs separated by blank lines (lines joined by a space),
 * the first `count` non-empty ones, each cut after its first sentence when asked. */
sd_status sd_bench_read_prompts(const char *path, int count, int first_sentence, char ***out, int *n_out);
void sd_bench_free_prompts(char **p, int n);

/* Rewrites each prompt by the template (see prompt_template); tmpl NULL leaves them. Input-grounded
 * workloads ("repeat this passage") are built this way from any prompt source. */
sd_status sd_bench_apply_template(const char *tmpl, char **prompts, int n);

/* Where generated models live: $SPECDEC_CACHE, else .cache/models. */
const char *sd_bench_cache_dir(void);

/* Path of a model spec: the resolved path (search path) or, for a generated one or a twin, its
 * file in the cache (named by all its parameters), written there first if absent (atomically,
 * so an interrupted write leaves no half file; a twin loads its small model to write it).
 * *created says whether it was written now (may be NULL). */
sd_status sd_bench_model_path(const sd_bench_model_spec *m, char *buf, size_t cap, int *created);

#endif
