/* specdec command line: subcommand dispatch and the shared helpers of cli.h. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "specdec/bench.h"

volatile sig_atomic_t cli_interrupted = 0;

static void on_sigint(int sig) {
    (void)sig;
    if (cli_interrupted) _exit(130); /* a second Ctrl-C leaves at once */
    cli_interrupted = 1;
}

void cli_install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_error_status(sd_status st) {
    const char *msg = sd_last_error();
    fprintf(stderr, "error: %s\n", msg && msg[0] ? msg : sd_status_str(st));
    return 1;
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int cli_parse_int(const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error("%s expects an integer in %ld..%ld, got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_float(const char *flag, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (s[0] == '-') {
        cli_usage_error("%s expects a non-negative integer, got '%s'", flag, s);
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        cli_usage_error("%s expects a non-negative integer, got '%s'", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* The lookup itself is library code (sd_model_resolve), shared with the bench configs. */
const char *cli_resolve_model(const char *arg, char *buf, size_t cap) {
    sd_status st = sd_model_resolve(arg, buf, cap);
    if (st != SD_OK) {
        cli_error_status(st);
        return NULL;
    }
    return buf;
}

double cli_cache_bytes(int threads) { return sd_cache_bytes(threads); }

sd_type cli_kv_type = SD_TYPE_F32;

int cli_parse_kv_type(const char *flag, const char *v) {
    if (!strcmp(v, "f32")) cli_kv_type = SD_TYPE_F32;
    else if (!strcmp(v, "f16")) cli_kv_type = SD_TYPE_F16;
    else return cli_usage_error("%s must be f32 or f16, got '%s'", flag, v);
    return 0;
}

int cli_load_model(const char *arg, const char *tokenizer, const char *tokenizer_fallback, int n_ctx,
                   sd_model **out) {
    char path[4096];
    if (!cli_resolve_model(arg, path, sizeof path)) return 1;
    sd_model_params mp = sd_model_default_params();
    mp.tokenizer_path = tokenizer;
    mp.tokenizer_fallback = tokenizer_fallback;
    mp.n_ctx = n_ctx;
    mp.kv_type = cli_kv_type;
    sd_status st = sd_model_load(path, &mp, out);
    if (st != SD_OK) return cli_error_status(st);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "specdec: speculative decoding for Llama models on CPUs\n"
            "\n"
            "usage: specdec <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate     generate text from a target model, speculatively with -md DRAFT\n"
            "  info         describe a model file (hyperparameters, tensors, vocabulary, sizes)\n"
            "  bench-decode measure prefill, decode and verify speed against memory bandwidth\n"
            "  bench        speculative vs plain decoding for a pair over draft lengths (JSON config)\n"
            "  mkmodel      write a random-weight Llama GGUF of any shape, or a cost twin of a trained model\n"
            "  convert      write a model as a llama.cpp GGUF in f32/f16/bf16 or quantised (q8_0, q4_0, ...)\n"
            "\n"
            "Run 'specdec <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-decode")) return cmd_bench_decode(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "mkmodel")) return cmd_mkmodel(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    usage(stderr);
    return cli_usage_error("unknown command '%s'", cmd);
}
