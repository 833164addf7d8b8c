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
#include "specdec/quant.h"
#include "cli/options.h"
#include "specdec/bench.h"
#include "specdec/cpu.h"

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

double cli_cache_bytes(int threads, sd_cache_source *src) { return sd_cache_bytes(threads, src); }

int cli_load_model(const char *arg, const char *tokenizer, const char *tokenizer_fallback, sd_model **out) {
    char path[4096];
    if (!cli_resolve_model(arg, path, sizeof path)) return 1;
    sd_model_params mp = sd_model_default_params();
    mp.tokenizer_path = tokenizer;
    mp.tokenizer_fallback = tokenizer_fallback;
    sd_status st = sd_model_load(path, &mp, out);
    if (st != SD_OK) return cli_error_status(st);
    return 0;
}

int cli_load_pair(const cli_opts *o, sd_model **tm, sd_model **dm) {
    *tm = *dm = NULL;
    const char *draft = o->draft ? o->draft : o->draft_type >= 0 ? o->model : NULL;
    int rc = cli_load_model(o->model, o->tokenizer, NULL, tm);
    /* A llama2.c draft without a tokenizer beside it shares the target's. */
    if (!rc && draft && !(o->draft_type >= 0 && !strcmp(draft, o->model)))
        rc = cli_load_model(draft, o->draft_tokenizer, sd_model_tokenizer_path(*tm), dm);
    if (!rc && o->draft_type >= 0) { /* the draft (or the target itself) quantised in memory */
        sd_model *q = NULL;
        sd_status qs = sd_model_quantize(*dm ? *dm : *tm, (sd_type)o->draft_type, &q);
        if (qs != SD_OK) rc = cli_error_status(qs);
        sd_model_free(*dm);
        *dm = q;
    }
    if (rc) {
        sd_model_free(*dm);
        sd_model_free(*tm);
        *tm = *dm = NULL;
    }
    return rc;
}

/* libgomp's default wait spins up to 300000 times before sleeping. When two such programs share
 * the two cores (two specdec processes, or specdec beside another OpenMP program), each spins
 * for a thread the other has descheduled, and every parallel region waits a time slice: a
 * decode at 2 threads all but stopped. Spinning 1000 times keeps the quiet-machine speed
 * (passive waiting lost much of it), keeps decode going beside a spinning neighbour, and is no
 * slower than the default beside a plain CPU hog (measured: commit 6ed66f3). libgomp reads the
 * setting when it loads, before main, so it is set here and the process re-executes itself
 * once; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept. */
static void omp_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("SPECDEC_OMP_SET")) return;
    setenv("GOMP_SPINCOUNT", "1000", 0);
    setenv("SPECDEC_OMP_SET", "1", 1); /* once: no loop if the exec fails halfway */
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc): go on with the defaults */
}

int main(int argc, char **argv) {
    omp_wait_policy(argv);
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        cli_usage(stdout);
        return 0;
    }
    /* SPECDEC_ISA naming no path, or one this CPU cannot run, stops every command at once. */
    const sd_status isa = sd_isa_status();
    if (isa != SD_OK) return cli_error_status(isa);
    if (!strcmp(cmd, "--version")) {
        char k[256];
        sd_isa_describe(k, sizeof k);
        printf("specdec: speculative decoding for LLMs on CPUs (C11), built with %s\nkernels: %s\n",
#if defined(__clang__)
               "clang " __clang_version__,
#elif defined(__GNUC__)
               "gcc " __VERSION__,
#else
               "an unknown compiler",
#endif
               k);
        return 0;
    }
    return cli_run(argc - 1, argv + 1);
}
