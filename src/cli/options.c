/* The option table (see options.h), its parser and its --help printer. */
#include "cli/options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "server/server.h"
#include "specdec/chat.h"
#include "specdec/quant.h"
#include "specdec/spec.h"
#include "specdec/synth.h"

typedef enum { OPT_FLAG, OPT_INT, OPT_FLOAT, OPT_U64, OPT_STR, OPT_FN } opt_kind;

/* A value a number or string option cannot hold by itself: parsed into o, 0 or a usage error. */
typedef int (*opt_fn)(const char *flag, const char *v, cli_opts *o);

typedef struct {
    const char *name, *alias;
    opt_kind kind;
    unsigned cmds;
    const char *section; /* help heading */
    const char *meta;    /* the value's name in help ("N", "PATH") */
    double lo, hi;       /* numbers: the accepted range */
    int lo_open;         /* (lo, hi] */
    size_t off;          /* the field it sets */
    opt_fn fn;           /* OPT_FN */
    const char *help;    /* may hold one %g: hi */
    const char *def;     /* the default as help shows it; NULL: none shown; DEF_OPTS: the field's
                            value in cli_opts_default (the engine's and the server's defaults) */
} cli_opt;

#define F(field) offsetof(cli_opts, field)
#define DEF_OPTS "\x01"
#define GEN_LIKE (CMD_GENERATE | CMD_SERVE)
#define RUNTIME (CMD_GENERATE | CMD_SERVE | CMD_BENCH_DECODE)

static int fn_draft_type(const char *flag, const char *v, cli_opts *o) {
    if ((o->draft_type = sd_type_from_name(v)) < 0)
        return cli_usage_error("%s must be f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k, got '%s'", flag, v);
    return 0;
}
static int fn_type(const char *flag, const char *v, cli_opts *o) {
    if ((o->type = sd_type_from_name(v)) < 0)
        return cli_usage_error("%s must be f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k, got '%s'", flag, v);
    return 0;
}
static int fn_kv_type(const char *flag, const char *v, cli_opts *o) {
    if (!strcmp(v, "f32")) o->kv_type = SD_TYPE_F32;
    else if (!strcmp(v, "f16")) o->kv_type = SD_TYPE_F16;
    else return cli_usage_error("%s must be f32 or f16, got '%s'", flag, v);
    return 0;
}
static int fn_draft(const char *flag, const char *v, cli_opts *o) {
    if (strcmp(v, "ngram") != 0) return cli_usage_error("%s must be ngram (a draft model is given with -md), got '%s'", flag, v);
    o->ngram = 1;
    return 0;
}
static int fn_spec_sampling(const char *flag, const char *v, cli_opts *o) {
    if (sd_sampling_mode_from_name(v, &o->sampling.mode) != SD_OK)
        return cli_usage_error("%s must be coupled or rejection, got '%s'", flag, v);
    return 0;
}
static int fn_json_ws(const char *flag, const char *v, cli_opts *o) {
    if (!strcmp(v, "bounded")) o->json_compact = 0;
    else if (!strcmp(v, "compact")) o->json_compact = 1;
    else return cli_usage_error("%s must be bounded or compact, got '%s'", flag, v);
    return 0;
}
static int fn_chat_template(const char *flag, const char *v, cli_opts *o) {
    sd_chat_format f;
    if (sd_chat_format_from_name(v, &f) != SD_OK)
        return cli_usage_error("%s must be one of %s, got '%s'", flag, sd_chat_known_names(), v);
    o->chat_template = v;
    return 0;
}
static int fn_shape(const char *flag, const char *v, cli_opts *o) {
    sd_synth_params p = sd_synth_default_params();
    if (sd_synth_shape(v, &p) != SD_OK) return cli_usage_error("%s: %s", flag, sd_last_error());
    o->shape = v;
    return 0;
}

static const cli_opt k_opts[] = {
    /* models */
    {"--model", "-m", OPT_STR, GEN_LIKE | CMD_BENCH_DECODE | CMD_BENCH_GRAMMAR, "models", "PATH", 0, 0, 0, F(model), NULL,
     "target model (.gguf, llama2.c .bin or Hugging Face directory)", NULL},
    {"--model-draft", "-md", OPT_STR, GEN_LIKE, "models", "PATH", 0, 0, 0, F(draft), NULL,
     "draft model; without it (and without --draft ngram), plain decoding", NULL},
    {"--tokenizer", "-z", OPT_STR, GEN_LIKE | CMD_BENCH_DECODE | CMD_BENCH_GRAMMAR | CMD_INFO | CMD_CONVERT | CMD_MKMODEL, "models", "PATH", 0, 0, 0,
     F(tokenizer), NULL, "tokenizer of a llama2.c (tokenizer.bin) or HF (tokenizer.json) model (a GGUF with its own tokenizer refuses "
     "it)",
     "beside it"},
    {"--draft-tokenizer", "-zd", OPT_STR, GEN_LIKE, "models", "PATH", 0, 0, 0, F(draft_tokenizer), NULL,
     "tokenizer of a llama2.c draft", "beside it, else the target's"},
    {"--draft-type", NULL, OPT_FN, GEN_LIKE, "models", "T", 0, 0, 0, 0, fn_draft_type,
     "quantise the draft at load, in memory (q4_0, q8_0, q4_k, ...); with -md naming the target itself (or no -md) "
     "the target drafts for itself",
     NULL},
    /* drafting */
    {"--draft-max", "-k", OPT_INT, GEN_LIKE, "drafting", "K", 0, SD_MAX_DRAFT, 0, F(draft_max), NULL,
     "most draft tokens per verify pass, 0..%g (0: none)", DEF_OPTS},
    {"--draft-fixed", NULL, OPT_FLAG, GEN_LIKE, "drafting", NULL, 0, 0, 0, F(draft_fixed), NULL,
     "always draft K tokens per pass; by default the draft length adapts: each pass stops where no number of "
     "further drafts pays for its draft steps and verify cost (measured) given their expected acceptance (learned "
     "by the draft's confidence), and drafts nothing when not even one pays",
     NULL},
    {"--draft-p-min", NULL, OPT_FLOAT, GEN_LIKE, "drafting", "P", 0, 1, 0, F(p_min), NULL,
     "instead, llama.cpp's rule: stop before a draft whose distribution's top probability is below P, in [0, 1]",
     NULL},
    {"--draft-min", NULL, OPT_INT, GEN_LIKE, "drafting", "N", 0, SD_MAX_DRAFT, 0, F(draft_min), NULL,
     "llama.cpp's n_min: a round whose chain has fewer than N drafts decodes plainly instead (refused with "
     "rejection sampling at --temp > 0 when the draft length depends on the draws: adaptive or --draft-p-min)",
     DEF_OPTS},
    {"--draft", NULL, OPT_FN, GEN_LIKE, "drafting", "ngram", 0, 0, 0, 0, fn_draft,
     "prompt lookup: propose the continuation of the latest earlier match of the text's last n tokens (no model "
     "needed); with -md, tried first and the draft model used when it finds no match",
     NULL},
    {"--ngram-min", NULL, OPT_INT, GEN_LIKE, "drafting", "N", 1, 64, 0, F(ngram_min), NULL, "shortest n-gram matched",
     DEF_OPTS},
    {"--ngram-max", NULL, OPT_INT, GEN_LIKE, "drafting", "N", 1, 64, 0, F(ngram_max), NULL,
     "longest n-gram matched, tried first", DEF_OPTS},
    {"--draft-tree", NULL, OPT_INT, CMD_GENERATE, "drafting", "N", 1, SD_MAX_DRAFT, 0, F(tree), NULL,
     "the draft model proposes a tree of at most N drafts (1..%g), at most K deep, branching where it is unsure; "
     "the target verifies every node in one pass and keeps the longest accepted path",
     NULL},
    /* generation */
    {"--prompt", "-p", OPT_STR, CMD_GENERATE, "generation", "TEXT", 0, 0, 0, F(prompt), NULL, "prompt",
     "\"Once upon a time\""},
    {"--file", "-f", OPT_STR, CMD_GENERATE, "generation", "PATH", 0, 0, 0, F(prompt_file), NULL,
     "read the prompt from a file, as it is", NULL},
    {"--n-predict", "-n", OPT_INT, CMD_GENERATE | CMD_BENCH_GRAMMAR, "generation", "N", 1, 1 << 24, 0, F(n_predict), NULL,
     "tokens to generate", DEF_OPTS},
    {"--temp", NULL, OPT_FLOAT, CMD_GENERATE | CMD_BENCH_GRAMMAR, "generation", "T", 0, 1e6, 0, F(sampling.temperature), NULL,
     "temperature; 0 = greedy", DEF_OPTS},
    {"--top-k", NULL, OPT_INT, CMD_GENERATE, "generation", "K", 0, 1 << 24, 0, F(sampling.top_k), NULL,
     "keep the K most likely tokens; 0 = off", DEF_OPTS},
    {"--top-p", NULL, OPT_FLOAT, CMD_GENERATE, "generation", "P", 0, 1, 1, F(sampling.top_p), NULL,
     "nucleus sampling mass in (0, 1]; 1 = off", DEF_OPTS},
    {"--min-p", NULL, OPT_FLOAT, CMD_GENERATE, "generation", "P", 0, 1, 0, F(sampling.min_p), NULL,
     "keep the tokens whose probability is at least P times the most likely one's; 0 = off", DEF_OPTS},
    {"--presence-penalty", NULL, OPT_FLOAT, CMD_GENERATE, "generation", "X", -2, 2, 0, F(sampling.presence_penalty), NULL,
     "OpenAI's: subtract X from the logit of every token the output holds already, in [-2, 2]", DEF_OPTS},
    {"--frequency-penalty", NULL, OPT_FLOAT, CMD_GENERATE, "generation", "X", -2, 2, 0, F(sampling.frequency_penalty), NULL,
     "OpenAI's: subtract X times the count of the token in the output so far, in [-2, 2]", DEF_OPTS},
    {"--repeat-penalty", NULL, OPT_FLOAT, CMD_GENERATE, "generation", "X", 0, 10, 1, F(sampling.repetition_penalty), NULL,
     "HF's and llama.cpp's: divide the logit of a token in the prompt or the output by X (multiply a negative one), "
     "in (0, 10]; 1 = off. Penalties apply before top-k, top-p and min-p, on the whole text",
     DEF_OPTS},
    {"--seed", NULL, OPT_U64, CMD_GENERATE, "generation", "S", 0, 0, 0, F(sampling.seed), NULL,
     "sampling seed: with coupled sampling it keys each position's noise, with rejection sampling it seeds the "
     "RNG stream (xoshiro256**)", DEF_OPTS},
    {"--spec-sampling", NULL, OPT_FN, CMD_GENERATE, "generation", "MODE", 0, 0, 0, 0, fn_spec_sampling,
     "how tokens are drawn at --temp > 0. coupled: each position's token is the exponential race over noise "
     "hashed from (seed, position, token), so a seed gives the same text with or without any drafter (plain "
     "decoding's text); rejection: one RNG stream and speculative sampling by rejection, exact in distribution "
     "but the text for a seed depends on the drafts. Both are distributed exactly as the target",
     SD_SAMPLING_DEFAULT_NAME},
    {"--spec-sampling", NULL, OPT_FN, CMD_SERVE, "server", "MODE", 0, 0, 0, 0, fn_spec_sampling,
     "coupled or rejection (see generate --help): for requests that do not say (\"spec_sampling\")",
     SD_SAMPLING_DEFAULT_NAME},
    {"--seed", NULL, OPT_U64, CMD_BENCH_GRAMMAR, "generation", "S", 0, 0, 0, F(sampling.seed), NULL,
     "RNG seed of the draws (xoshiro256** seeded by SplitMix64); generation r uses S + r", DEF_OPTS},
    {"--ignore-eos", NULL, OPT_FLAG, CMD_GENERATE, "generation", NULL, 0, 0, 0, F(ignore_eos), NULL,
     "keep generating after an end-of-generation token (EOS, <|eot_id|>, <|im_end|>, ...: the model's, as "
     "llama.cpp decides them)",
     NULL},
    {"--chat", NULL, OPT_FLAG, CMD_GENERATE, "generation", NULL, 0, 0, 0, F(chat), NULL,
     "treat the prompt as one user message: render it with the model's chat template (ChatML, with a warning, for "
     "a model without one) and print only the reply, which ends at the end-of-turn token",
     NULL},
    {"--system", NULL, OPT_STR, CMD_GENERATE, "generation", "TEXT", 0, 0, 0, F(system), NULL,
     "with --chat: a system message before the user's", NULL},
    {"--chat-template", NULL, OPT_FN, CMD_GENERATE, "generation", "NAME", 0, 0, 0, 0, fn_chat_template,
     "with --chat: render with NAME instead of the model's template:", NULL},
    {"--special", NULL, OPT_FLAG, CMD_GENERATE, "generation", NULL, 0, 0, 0, F(special), NULL,
     "parse special tokens written in the text (<|im_start|>, <s>, ...) as those tokens; without it they are "
     "plain text (with --chat: in the turns' text, where without it only the template's markers are special)",
     NULL},
    {"--ids", NULL, OPT_FLAG, CMD_GENERATE, "generation", NULL, 0, 0, 0, F(ids), NULL,
     "print the generated token ids, space-separated on one line, instead of the prompt and the text", NULL},
    /* tokenize */
    {"--prompt", "-p", OPT_STR, CMD_TOKENIZE, "text", "TEXT", 0, 0, 0, F(prompt), NULL, "the text", NULL},
    {"--file", "-f", OPT_STR, CMD_TOKENIZE, "text", "PATH", 0, 0, 0, F(prompt_file), NULL,
     "read the text from a file, as it is (a final newline is text too)", NULL},
    {"--special", NULL, OPT_FLAG, CMD_TOKENIZE, "text", NULL, 0, 0, 0, F(special), NULL,
     "special tokens written in the text (<|im_start|>, <s>, ...) become those tokens, as HF's encode and "
     "llama-tokenize do: the default",
     NULL},
    {"--no-parse-special", NULL, OPT_FLAG, CMD_TOKENIZE, "text", NULL, 0, 0, 0, F(no_parse_special), NULL,
     "encode special tokens written in the text as plain text (llama-tokenize's flag; user-defined tokens such as "
     "<think> are split out either way)",
     NULL},
    {"--pieces", NULL, OPT_FLAG, CMD_TOKENIZE, "output", NULL, 0, 0, 0, F(pieces), NULL,
     "one token per line instead: its id and its text, quoted and escaped", NULL},
    {"--no-bos", NULL, OPT_FLAG, CMD_TOKENIZE, "output", NULL, 0, 0, 0, F(no_bos), NULL,
     "leave out the BOS token the tokenizer adds by default", NULL},
    /* runtime */
    {"--threads", "-t", OPT_INT, RUNTIME | CMD_BENCH_GRAMMAR, "runtime", "N", 1, 1024, 0, F(threads), NULL,
     "threads (at most OMP_THREAD_LIMIT, where set)", "online CPUs"},
    {"--threads", "-t", OPT_INT, CMD_BENCH, "options", "N", 1, 1024, 0, F(threads), NULL,
     "threads (at most OMP_THREAD_LIMIT, where set)", "the config's, else online CPUs"},
    {"--ctx", "-c", OPT_INT, GEN_LIKE, "runtime", "N", 2, 1 << 24, 0, F(n_ctx), NULL, "context size",
     "the smaller model context"},
    {"--kv-type", NULL, OPT_FN, RUNTIME, "runtime", "T", 0, 0, 0, 0, fn_kv_type,
     "KV cache elements: f32, or f16 (half the cache memory and attention reads; needs head_dim >= 16)", "f32"},
    {"--compare", NULL, OPT_FLAG, CMD_GENERATE, "runtime", NULL, 0, 0, 0, F(compare), NULL,
     "also run plain decoding of TARGET and print the speedup and the target pass's cost in plain decode steps (the text then comes at the end, so that both runs are timed alike)", NULL},
    {"--stats-json", NULL, OPT_STR, CMD_GENERATE, "runtime", "FILE", 0, 0, 0, F(stats_json), NULL,
     "write the run statistics as JSON", NULL},
    {"--no-stream", NULL, OPT_FLAG, CMD_GENERATE, "runtime", NULL, 0, 0, 0, F(no_stream), NULL,
     "print the text only at the end", NULL},
    /* serve */
    {"--host", NULL, OPT_STR, CMD_SERVE, "server", "ADDR", 0, 0, 0, F(host), NULL, "address to listen on", DEF_OPTS},
    {"--port", NULL, OPT_INT, CMD_SERVE, "server", "N", 0, 65535, 0, F(port), NULL, "port (0: any free one)", DEF_OPTS},
    {"--parallel", "-np", OPT_INT, CMD_SERVE, "server", "N", 1, 256, 0, F(parallel), NULL,
     "slots: sequences served at once", DEF_OPTS},
    {"--api-key", NULL, OPT_STR, CMD_SERVE, "server", "KEY", 0, 0, 0, F(api_key), NULL,
     "require Authorization: Bearer KEY on every route but /health", NULL},
    {"--queue", NULL, OPT_INT, CMD_SERVE, "server", "N", 0, 65536, 0, F(queue), NULL,
     "requests that may wait for a free slot; more get 429 with Retry-After", DEF_OPTS},
    {"--timeout", NULL, OPT_INT, CMD_SERVE, "server", "S", 1, 86400, 0, F(timeout), NULL,
     "close a connection idle or stalled (not sending its request, not reading its response) for S seconds", DEF_OPTS},
    {"--request-timeout", NULL, OPT_INT, CMD_SERVE, "server", "S", 1, 86400, 0, F(request_timeout), NULL,
     "a request must arrive whole, headers and body, within S seconds of its first line (a client trickling it "
     "is cut off)",
     DEF_OPTS},
    {"--max-connections", NULL, OPT_INT, CMD_SERVE, "server", "N", 1, 1 << 20, 0, F(max_conns), NULL,
     "connections at once; more are answered 503 (at most the descriptor limit allows)", DEF_OPTS},
    {"--buffer-limit", NULL, OPT_INT, CMD_SERVE, "server", "MIB", 1, 1 << 20, 0, F(buffer_mib), NULL,
     "MiB of request bodies all connections together may hold in memory beyond the first 16 KiB of each; a body "
     "past it gets 503",
     DEF_OPTS},
    {"--shutdown-timeout", NULL, OPT_INT, CMD_SERVE, "server", "S", 0, 86400, 0, F(shutdown_timeout), NULL,
     "on SIGTERM/SIGINT, drain for at most S seconds: /health says 503 draining, new requests get 503 with "
     "Retry-After, running ones finish; those left then end with an error",
     DEF_OPTS},
    {"--cors", NULL, OPT_STR, CMD_SERVE, "server", "ORIGIN", 0, 0, 0, F(cors), NULL,
     "allow browsers on ORIGIN (or * for any) to call the server: Access-Control-Allow-Origin on every answer, and "
     "OPTIONS preflights answered",
     NULL},
    {"--health-busy", NULL, OPT_FLAG, CMD_SERVE, "server", NULL, 0, 0, 0, F(health_busy), NULL,
     "/health says 503 busy while every slot is busy and the queue is full, so that a balancer skips the server",
     NULL},
    {"--alias", NULL, OPT_STR, CMD_SERVE, "server", "NAME", 0, 0, 0, F(alias), NULL,
     "the model id /v1/models lists and responses carry", "the model file's name without .gguf or .bin"},
    {"--chat-template", NULL, OPT_FN, CMD_SERVE, "server", "NAME", 0, 0, 0, 0, fn_chat_template,
     "render chat requests with NAME instead of the model's template:", NULL},
    {"--special", NULL, OPT_FLAG, CMD_SERVE, "server", NULL, 0, 0, 0, F(special), NULL,
     "parse special tokens written in completion prompts (<|im_start|>, <s>, ...) as those tokens; without it they "
     "are plain text",
     NULL},
    {"--chat-special", NULL, OPT_FLAG, CMD_SERVE, "server", NULL, 0, 0, 0, F(chat_special), NULL,
     "parse special tokens written in chat messages' text too (llama.cpp's and HF's way: a client can then write "
     "the template's role markers); without it a message's text is text and only the template's markers are special",
     NULL},
    /* bench-decode */
    {"--prefill", NULL, OPT_INT, CMD_BENCH_DECODE, "measurement", "N", 1, 1 << 20, 0, F(prefill), NULL,
     "prompt length for the prefill figure", DEF_OPTS},
    {"--pos", NULL, OPT_INT, CMD_BENCH_DECODE, "measurement", "N", 0, 1 << 20, 0, F(pos), NULL,
     "context length before decode/verify steps", DEF_OPTS},
    {"--reps", NULL, OPT_INT, CMD_BENCH_DECODE | CMD_BENCH_GRAMMAR, "measurement", "N", 1, 100000, 0, F(reps), NULL, "measurement rounds",
     DEF_OPTS},
    {"--bw-mib", NULL, OPT_INT, CMD_BENCH_DECODE, "measurement", "N", 64, 1 << 16, 0, F(bw_mib), NULL,
     "bandwidth probe buffer in MiB", DEF_OPTS},
    {"--no-batch", NULL, OPT_FLAG, CMD_BENCH_DECODE, "measurement", NULL, 0, 0, 0, F(no_batch), NULL,
     "skip the several-sequence passes", NULL},
    /* bench-grammar */
    {"--json-schema", NULL, OPT_STR, CMD_BENCH_GRAMMAR | CMD_GENERATE, "grammar", "FILE|JSON", 0, 0, 0, F(json_schema), NULL,
     "constrain the output by this JSON Schema (a file, or the schema itself when it starts with '{'); a keyword "
     "that cannot be honoured is refused by name (docs/grammar.md)",
     NULL},
    {"--grammar", NULL, OPT_STR, CMD_BENCH_GRAMMAR | CMD_GENERATE, "grammar", "FILE", 0, 0, 0, F(grammar_file), NULL,
     "constrain the output by this GBNF grammar (llama.cpp's format); bench-grammar without either: any JSON "
     "object",
     NULL},
    {"--json-ws", NULL, OPT_FN, CMD_BENCH_GRAMMAR | CMD_GENERATE, "grammar", "WS", 0, 0, 0, 0, fn_json_ws,
     "whitespace a JSON Schema allows between tokens: bounded (none, a space, or a line break and up to 20 "
     "spaces) or compact (none: property names and punctuation become forced, drafted for free)",
     "bounded"},
    {"--no-grammar-drafts", NULL, OPT_FLAG, GEN_LIKE, "grammar", NULL, 0, 0, 0, F(no_grammar_drafts), NULL,
     "do not propose the bytes a grammar forces (a schema's, a tool call's) as drafts ahead of the drafter's; "
     "docs/benchmarks/2026-11-27-constrained.md measures when they pay",
     NULL},
    /* bench */
    {"--quick", NULL, OPT_FLAG, CMD_BENCH, "options", NULL, 0, 0, 0, F(quick), NULL,
     "1 repetition, at most 2 prompts and 32 tokens: a smoke run", NULL},
    {"--out", NULL, OPT_STR, CMD_BENCH, "options", "DIR", 0, 0, 0, F(out_dir), NULL,
     "write the JSON report and the SVG chart into DIR", "the config's output paths, docs/benchmarks/NAME.json and .svg"},
    /* convert, mkmodel */
    {"--type", NULL, OPT_FN, CMD_CONVERT, "weights", "T", 0, 0, 0, 0, fn_type,
     "f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k: the type of every matrix, token embeddings and classifier "
     "included (ggml's reference quantisation, byte-identical to llama-quantize without an importance matrix); "
     "vectors stay f32; a matrix whose rows do not divide into the type's blocks falls back as llama.cpp does "
     "(q4_k -> q5_0, q6_k -> q8_0) or else to f16, each such tensor reported",
     "f16"},
    {"--type", NULL, OPT_FN, CMD_MKMODEL, "weights", "T", 0, 0, 0, 0, fn_type,
     "f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k: the type of every matrix, token embeddings and classifier "
     "included (ggml's reference quantisation, byte-identical to llama-quantize without an importance matrix); "
     "vectors stay f32; a matrix whose rows do not divide into the type's blocks falls back as llama.cpp does "
     "(q4_k -> q5_0, q6_k -> q8_0) or else to f16, each such tensor reported",
     "f32"},
    {"--twin", NULL, OPT_STR, CMD_MKMODEL, "shape", "SMALL", 0, 0, 0, F(twin), NULL,
     "a cost twin: the large shape computing SMALL's function (a path or model name)", NULL},
    {"--shape", NULL, OPT_FN, CMD_MKMODEL, "shape", "NAME", 0, 0, 0, 0, fn_shape,
     "stories260K, stories15M, stories42M or stories110M (the llama2.c shapes; the last three with vocab 32000)",
     "stories260K"},
    {"--arch", NULL, OPT_STR, CMD_MKMODEL, "shape", "A", 0, 0, 0, F(arch), NULL,
     "architecture: llama, qwen2 (q/k/v biases) or qwen3 (q/k norms)", "llama"},
    {"--dim", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(dim), NULL, "embedding width", NULL},
    {"--layers", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(layers), NULL, "layers", NULL},
    {"--heads", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(heads), NULL, "attention heads", NULL},
    {"--kv-heads", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(kv_heads), NULL,
     "key/value heads (dividing --heads)", "--heads"},
    {"--head-dim", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 2, 65536, 0, F(head_dim), NULL,
     "attention head size when not dim / heads (as Qwen3's 128 at dim 1024 with 16 heads)", "dim / heads"},
    {"--hidden", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(hidden), NULL, "feed-forward width", NULL},
    {"--vocab", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(vocab), NULL, "vocabulary size", NULL},
    {"--ctx", NULL, OPT_INT, CMD_MKMODEL, "shape", "N", 1, 1 << 24, 0, F(ctx), NULL, "training context", NULL},
    {"--tied", NULL, OPT_FLAG, CMD_MKMODEL, "shape", NULL, 0, 0, 0, F(tied), NULL,
     "no output.weight: the embeddings classify", NULL},
    {"--seed", NULL, OPT_U64, CMD_MKMODEL, "shape", "S", 0, 0, 0, F(model_seed), NULL,
     "the weights' seed (the same seed gives the same weights in every type)", DEF_OPTS},
};
#define N_OPTS (sizeof k_opts / sizeof k_opts[0])

typedef struct {
    unsigned cmd;
    const char *name, *usage, *about, *footer;
    const char *summary;               /* its line in specdec --help */
    int (*run)(int argc, char **argv); /* NULL: not built yet */
} cli_cmd;

static const cli_cmd k_cmds[] = {
    {CMD_GENERATE, "generate", "specdec generate -m TARGET [-md DRAFT | --draft ngram] [options]",
     "Generates text from TARGET. With a drafter it decodes speculatively: the drafter proposes up to\n"
     "--draft-max tokens, TARGET verifies them in one batched pass. Greedy output is identical to plain\n"
     "decoding; sampled output has the same distribution. Models are a path, or a name looked up in\n"
     "$SPECDEC_MODEL_PATH, ./models, ../shared/models.",
     "Statistics go to stderr, text to stdout. Exit status 0 on success, 1 on a runtime error, 2 on a\n"
     "usage error, 130 when interrupted (Ctrl-C stops at the next token).",
     "generate text from a target model, speculatively with a drafter (-md DRAFT, --draft ngram)", cmd_generate},
    {CMD_SERVE, "serve", "specdec serve -m TARGET [-md DRAFT | --draft ngram] [options]",
     "An OpenAI-compatible HTTP server with speculative decoding and batched slots: POST\n"
     "/v1/completions and /v1/chat/completions (streamed with \"stream\": true), POST /tokenize and\n"
     "/detokenize, GET /v1/models, /v1/models/ID, /props, /health and /metrics. Each of --parallel\n"
     "slots is a sequence of TARGET's context (and of DRAFT's); every round steps all busy slots\n"
     "together, their verify passes in ONE batched target pass. Requests beyond the slots wait in a\n"
     "queue of --queue. A request whose prompt extends a slot's cached tokens reuses them. Sampling,\n"
     "max_tokens, stop strings and the seed come with each request; drafting is set here, as for\n"
     "generate (the adaptive draft length weighs each draft against the whole batched round, so\n"
     "drafting stops where the batch makes the pass compute-bound).",
     "Binds 127.0.0.1 unless --host says otherwise. SIGINT/SIGTERM drain the server: /health says\n"
     "503 draining, new requests get 503 with Retry-After, running requests finish for at most\n"
     "--shutdown-timeout seconds and those left end with an error (a stream's last event); then it\n"
     "exits 0. A second signal exits at once (130). Exit status 1 when the models cannot be loaded\n"
     "or the port cannot be bound, 2 on a usage error.",
     "an OpenAI-compatible HTTP server with speculative decoding and batched slots", cmd_serve},
    {CMD_BENCH_DECODE, "bench-decode", "specdec bench-decode -m MODEL [options]",
     "Measures, for MODEL:\n"
     "  - the machine's streaming-read bandwidth (its own kernel reading a --bw-mib buffer once per\n"
     "    round; the limit below is the best of these probes, since a shared host moves them),\n"
     "  - prefill tokens/s (one batched pass of --prefill tokens, the last one's logits only, as a\n"
     "    generation's prefill),\n"
     "  - decode tokens/s (one token per pass at position --pos), and the fraction of the\n"
     "    bandwidth limit it reaches: tokens/s x bytes read per token (the weights and the\n"
     "    KV cache's --pos + 1 positions) / bandwidth,\n"
     "  - the cost of a verify pass of k+1 tokens relative to one decode step, k = 1..8,\n"
     "  - the cost of one pass of S sequences x 5 tokens (S verify passes at once, as a server\n"
     "    batches its slots), S = 1, 2, 4, 8, relative to one decode step;\n"
     "and says which kernels run and how much L2 + L3 the CPU has (sysfs, else CPUID, else\n"
     "unknown), noting when the weights fit in it.\n"
     "The probe, the decode step and the passes run in --reps interleaved rounds; each figure is\n"
     "the median over the rounds (ratios paired within a round), with quartiles to show the\n"
     "spread. Prefill is the median of 5 passes.",
     NULL,
     "measure prefill, decode and verify speed against memory bandwidth", cmd_bench_decode},
    {CMD_INFO, "info", "specdec info [-z TOKENIZER] MODEL",
     "Prints the architecture, hyperparameters, tensor types and counts, vocabulary size, special\n"
     "tokens, bytes of weights (and bytes read per decoded token) and the KV cache bytes per token\n"
     "of MODEL (.gguf, llama2.c .bin with its tokenizer, or a Hugging Face directory), and for a\n"
     "cost twin (specdec mkmodel --twin) what it is a twin of.",
     NULL,
     "describe a model file (hyperparameters, tensors, vocabulary, sizes)", cmd_info},
    {CMD_CONVERT, "convert", "specdec convert IN OUT.gguf [--type T] [-z TOKENIZER]",
     "Reads IN (a .gguf, a llama2.c .bin, a Hugging Face directory) and writes OUT as a GGUF\n"
     "llama.cpp reads (<arch>.* and tokenizer.ggml.* metadata, llama.cpp tensor names).",
     NULL,
     "write a model as a llama.cpp GGUF in f32/f16/bf16 or quantised (q8_0, q4_0, ...)", cmd_convert},
    {CMD_MKMODEL, "mkmodel",
     "specdec mkmodel OUT.gguf [--shape NAME | --dim N --layers N --heads N --hidden N --vocab N] [options]\n"
     "       specdec mkmodel OUT.gguf --twin SMALL [-z TOKENIZER] (--shape NAME | --dim N --layers N --heads N\n"
     "                       --hidden N) [--type T] [--seed S]",
     "Writes a GGUF with random weights of any shape (cost measurements only: its text is noise).\n"
     "\n"
     "--twin SMALL writes a cost twin instead: a model of the given shape that computes the same\n"
     "function as SMALL (a path or name as for generate -m; -z: the tokenizer.bin of a llama2.c\n"
     "SMALL), so it decodes with the large shape's cost and SMALL's predictions. It keeps SMALL's\n"
     "vocabulary, context, RoPE base and epsilon (so no --vocab, --ctx, --tied); every size must be\n"
     "at least SMALL's and the head size (dim / heads) a multiple of SMALL's. --seed seeds the random\n"
     "input weights of its extra heads, units and layers.",
     NULL,
     "write a random-weight GGUF of any shape, or a cost twin (for benchmarks)", cmd_mkmodel},
    {CMD_BENCH, "bench", "specdec bench CONFIG [--quick] [--out DIR] [-t N]",
     "Answers \"how much faster is speculative decoding than plain decoding for this pair, and\n"
     "why?\". For each prompt and draft length k of CONFIG (configs/*.json), runs plain and\n"
     "speculative decoding with the same seed, alternating, and reports medians: acceptance\n"
     "(overall and by draft position), tokens per verify pass, time to first token, tokens/s of\n"
     "both, the speedup, draft and verify time shares, KV bytes, peak RSS. Next to each speedup it\n"
     "prints the cost model's prediction from measured T_decode (target, draft) and\n"
     "T_verify(k+1): S = E / (k Td/Tt + Tv/Tt), with E = (1 - a^(k+1)) / (1 - a) at the measured\n"
     "acceptance a. Greedy runs must match plain decoding token for token; any difference fails\n"
     "the bench (exit 1).",
     "Random-weight models (\"generate\" in a config) are written once into $SPECDEC_CACHE or\n"
     ".cache/models. Paths in a config are relative to the working directory; model names use the\n"
     "model search path. Exit status: 0, 1 runtime error or greedy divergence, 2 bad arguments or\n"
     "config, 130 interrupted.",
     "speculative vs plain decoding for a pair over draft lengths (JSON config)", cmd_bench},
    {CMD_TOKENIZE, "tokenize", "specdec tokenize MODEL_OR_TOKENIZER (-p TEXT | -f FILE) [options]",
     "Prints the token ids of TEXT on one line, separated by spaces. MODEL_OR_TOKENIZER is a GGUF\n"
     "file (only its tokenizer metadata is read, so any architecture works), a Hugging Face model\n"
     "directory, a tokenizer.json, or a llama2.c tokenizer.bin (its vocabulary size is counted\n"
     "from the file); a name that is not a path is looked up as for generate -m.",
     "Exit status 0 on success, 1 when the tokenizer or the file cannot be read, 2 on a usage error.",
     "print the token ids of a text under a model's tokenizer", cmd_tokenize},
    {CMD_BENCH_GRAMMAR, "bench-grammar", "specdec bench-grammar -m MODEL [--json-schema FILE|JSON | --grammar FILE] [options]",
     "Measures constrained decoding's own cost for MODEL's vocabulary: building the vocabulary index\n"
     "(once per tokenizer), compiling the grammar (once per request), and per token the allowed-token\n"
     "mask against the model's decode step. It samples --reps generations of up to -n tokens under the\n"
     "grammar (mask the logits, sample at --temp, accept), each with a fresh grammar so that its caches\n"
     "start cold as a request's do, and prints the mask's mean, median, p90 and maximum per token and\n"
     "its share of a decode step (median).",
     "Without --json-schema or --grammar the grammar is the built-in any-JSON-object one. Exit status 0,\n"
     "1 on a runtime error (a refused schema or grammar), 2 on a usage error.",
     "measure grammar mask cost per token against a decode step (JSON Schema or GBNF)", cmd_bench_grammar},
};

#define N_CMDS (sizeof k_cmds / sizeof k_cmds[0])

void cli_usage(FILE *f) {
    fprintf(f, "specdec: speculative decoding for LLMs on CPUs\n\nusage: specdec <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < N_CMDS; i++)
        if (k_cmds[i].run) fprintf(f, "  %-14s%s\n", k_cmds[i].name, k_cmds[i].summary);
    fprintf(f, "\nRun 'specdec <command> --help' for the options of a command; 'specdec --version' says which\n"
               "kernels run (the best this CPU has; SPECDEC_ISA=avx512|avx2|portable forces a lower path).\n");
}

int cli_run(int argc, char **argv) {
    for (size_t i = 0; i < N_CMDS; i++)
        if (k_cmds[i].run && !strcmp(argv[0], k_cmds[i].name)) return k_cmds[i].run(argc, argv);
    cli_usage(stderr);
    return cli_usage_error("unknown command '%s'", argv[0]);
}

static const cli_cmd *cmd_of(unsigned cmd) {
    for (size_t i = 0; i < N_CMDS; i++)
        if (k_cmds[i].cmd == cmd) return &k_cmds[i];
    return &k_cmds[0];
}

void cli_opts_default(cli_opts *o) {
    memset(o, 0, sizeof *o);
    const sd_spec_params sp = sd_spec_default_params(); /* the engine's defaults are the CLI's */
    o->draft_type = -1;
    o->draft_max = sp.draft_max;
    o->draft_min = sp.draft_min;
    o->ngram_min = sp.ngram_min;
    o->ngram_max = sp.ngram_max;
    o->p_min = sp.p_min;
    o->n_predict = sp.n_predict;
    o->sampling = sp.sampling;
    o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    o->kv_type = sp.kv_type;
    o->prefill = 128;
    o->pos = 64;
    o->reps = 20;
    o->bw_mib = 1024;
    o->type = -1;
    o->model_seed = 1234;
    const srv_params sv = srv_default_params();
    o->host = sv.host;
    o->port = sv.port;
    o->parallel = sv.parallel;
    o->queue = sv.queue_max;
    o->timeout = sv.timeout_s;
    o->request_timeout = sv.request_timeout_s;
    o->max_conns = sv.max_conns;
    o->buffer_mib = (int)(sv.buffer_limit >> 20);
    o->shutdown_timeout = sv.shutdown_timeout_s;
}

void cli_spec_params(const cli_opts *o, sd_spec_params *p) {
    *p = sd_spec_default_params();
    p->n_predict = o->n_predict;
    p->draft_max = o->draft_max;
    p->draft_min = o->draft_min;
    p->draft_mode = o->draft_fixed ? SD_DRAFT_FIXED : o->p_min_set ? SD_DRAFT_PMIN : SD_DRAFT_ADAPTIVE;
    p->p_min = o->p_min;
    p->ngram = o->ngram;
    p->ngram_min = o->ngram_min;
    p->ngram_max = o->ngram_max;
    p->tree_budget = o->tree;
    p->sampling = o->sampling;
    p->stop_at_eos = !o->ignore_eos;
    p->n_ctx = o->n_ctx;
    p->kv_type = o->kv_type;
    p->n_threads = o->threads;
    p->grammar_drafts = !o->no_grammar_drafts;
}

/* The field an option sets. */
static void *field(cli_opts *o, const cli_opt *op) { return (char *)o + op->off; }

/* The default help shows: the option's own text, or (DEF_OPTS) its field's value in the defaults,
 * which come from the engine's and the server's *_default_params. */
static void default_text(const cli_opt *op, char *buf, size_t cap) {
    if (strcmp(op->def, DEF_OPTS) != 0) {
        snprintf(buf, cap, "%s", op->def);
        return;
    }
    cli_opts d;
    cli_opts_default(&d);
    const void *v = field(&d, op);
    switch (op->kind) {
    case OPT_INT: snprintf(buf, cap, "%d", *(const int *)v); break;
    case OPT_FLOAT: snprintf(buf, cap, "%g", (double)*(const float *)v); break;
    case OPT_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)v); break;
    case OPT_STR: snprintf(buf, cap, "%s", *(const char *const *)v ? *(const char *const *)v : ""); break;
    default: snprintf(buf, cap, "?");
    }
}

static int set_value(const cli_opt *op, const char *flag, const char *v, cli_opts *o) {
    switch (op->kind) {
    case OPT_INT:
        return cli_parse_int(flag, v, (long)op->lo, (long)op->hi, field(o, op)) ? 2 : 0;
    case OPT_FLOAT: {
        float x;
        if (cli_parse_float(flag, v, op->lo, op->hi, &x)) return 2;
        if (op->lo_open && x <= op->lo)
            return cli_usage_error("%s expects a number in (%g, %g], got '%s'", flag, op->lo, op->hi, v);
        *(float *)field(o, op) = x;
        return 0;
    }
    case OPT_U64:
        return cli_parse_u64(flag, v, field(o, op)) ? 2 : 0;
    case OPT_STR:
        *(const char **)field(o, op) = v;
        return 0;
    case OPT_FN:
        return op->fn(flag, v, o) ? 2 : 0;
    case OPT_FLAG:
        break;
    }
    return 0;
}

int cli_parse(int argc, char **argv, unsigned cmd, cli_opts *o, int max_pos) {
    const cli_cmd *c = cmd_of(cmd);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_help(stdout, cmd);
            return 1;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->n_pos >= max_pos) {
                if (max_pos == 0)
                    return cli_usage_error("%s: unexpected argument '%s' (see specdec %s --help)", c->name, a, c->name);
                return cli_usage_error("%s: unexpected argument '%s' after '%s' (see specdec %s --help)", c->name, a,
                                       o->pos_args[o->n_pos - 1], c->name);
            }
            o->pos_args[o->n_pos++] = a;
            continue;
        }
        const cli_opt *op = NULL;
        for (size_t k = 0; k < N_OPTS && !op; k++)
            if ((k_opts[k].cmds & cmd) && (!strcmp(a, k_opts[k].name) || (k_opts[k].alias && !strcmp(a, k_opts[k].alias))))
                op = &k_opts[k];
        if (!op) return cli_usage_error("%s: unknown option '%s' (see specdec %s --help)", c->name, a, c->name);
        if (op->kind == OPT_FLAG) {
            *(int *)field(o, op) = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error("%s needs a value", a);
        if (set_value(op, a, argv[++i], o)) return 2;
        if (op->off == F(n_predict)) o->n_predict_set = 1;
        if (op->off == F(threads)) o->threads_set = 1;
        if (op->off == F(p_min) && op->kind == OPT_FLOAT) o->p_min_set = 1;
    }
    return 0;
}

/* Help text wrapped at 100 columns after a 30-column indent. */
static void print_wrapped(FILE *f, const char *text, int col) {
    const int width = 100 - 30;
    const char *p = text;
    int first = 1;
    while (*p) {
        int n = (int)strlen(p);
        if (n > width) {
            n = width;
            while (n > 0 && p[n] != ' ') n--;
            if (n == 0) n = width;
        }
        if (!first || col > 28) fprintf(f, "\n%30s", "");
        else fprintf(f, "%*s", 30 - col, "");
        fprintf(f, "%.*s", n, p);
        first = 0;
        p += n;
        while (*p == ' ') p++;
        col = 30;
    }
    fputc('\n', f);
}

void cli_help(FILE *f, unsigned cmd) {
    const cli_cmd *c = cmd_of(cmd);
    fprintf(f, "usage: %s\n\n%s\n", c->usage, c->about);
    const char *sections[16];
    int n_sec = 0;
    for (size_t k = 0; k < N_OPTS; k++) {
        if (!(k_opts[k].cmds & cmd)) continue;
        int seen = 0;
        for (int s = 0; s < n_sec; s++) seen |= !strcmp(sections[s], k_opts[k].section);
        if (!seen && n_sec < 16) sections[n_sec++] = k_opts[k].section;
    }
    for (int s = 0; s < n_sec; s++) {
        fprintf(f, "\n%s:\n", sections[s]);
        for (size_t k = 0; k < N_OPTS; k++) {
            const cli_opt *op = &k_opts[k];
            if (!(op->cmds & cmd) || strcmp(op->section, sections[s]) != 0) continue;
            char lhs[96];
            int n = snprintf(lhs, sizeof lhs, "  %-4s %s%s%s", op->alias ? op->alias : "", op->name, op->meta ? " " : "",
                             op->meta ? op->meta : "");
            if (op->alias) lhs[2 + strlen(op->alias)] = ',';
            char text[1024];
            snprintf(text, sizeof text, op->help, op->hi);
            if (op->fn == fn_chat_template) { /* the names live in the chat module */
                size_t l = strlen(text);
                snprintf(text + l, sizeof text - l, " %s", sd_chat_known_names());
            }
            if (op->def) {
                size_t l = strlen(text);
                char dv[96];
                default_text(op, dv, sizeof dv);
                snprintf(text + l, sizeof text - l, " (default: %s)", dv);
            }
            fputs(lhs, f);
            print_wrapped(f, text, n);
        }
    }
    fprintf(f, "  %-28s%s\n", "-h,  --help", "this help");
    if (c->footer) fprintf(f, "\n%s\n", c->footer);
}
