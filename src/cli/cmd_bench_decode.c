/* `specdec bench-decode`: prefill, decode and verify speed of one model, with decode shown
 * as a fraction of the memory-bandwidth limit (bytes of weights per token / bandwidth). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "specdec/bench.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: specdec bench-decode -m MODEL [options]\n\n"
            "Measures, for MODEL:\n"
            "  - the machine's streaming-read bandwidth (its own kernel, a 1 GiB buffer),\n"
            "  - prefill tokens/s (one batched pass of --prefill tokens),\n"
            "  - decode tokens/s (one token per pass at position --pos), and the fraction of the\n"
            "    bandwidth limit it reaches: tokens/s x weight bytes read per token / bandwidth,\n"
            "  - the cost of a verify pass of k+1 tokens relative to one decode step, k = 1..8.\n"
            "Each figure is the median of --reps runs.\n\n"
            "options:\n"
            "  -m, --model PATH     model (.gguf or llama2.c .bin)\n"
            "  -z, --tokenizer PATH tokenizer for a llama2.c model\n"
            "  -t, --threads N      threads (default: online CPUs)\n"
            "  --prefill N          prompt length for the prefill figure (default 128)\n"
            "  --pos N              context length before decode/verify steps (default 64)\n"
            "  --reps N             repetitions per figure (default 20)\n"
            "  --bw-mib N           bandwidth probe buffer in MiB (default 1024)\n");
}

int cmd_bench_decode(int argc, char **argv) {
    const char *model = NULL, *tokp = NULL;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n_prefill = 128, pos = 64, reps = 20, bw_mib = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        if (!v) return cli_usage_error("bench-decode: unknown option or missing value '%s'", a);
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tokp = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_int(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--prefill")) { if (cli_parse_int(a, v, 1, 1 << 20, &n_prefill)) return 2; }
        else if (!strcmp(a, "--pos")) { if (cli_parse_int(a, v, 0, 1 << 20, &pos)) return 2; }
        else if (!strcmp(a, "--reps")) { if (cli_parse_int(a, v, 1, 100000, &reps)) return 2; }
        else if (!strcmp(a, "--bw-mib")) { if (cli_parse_int(a, v, 64, 1 << 16, &bw_mib)) return 2; }
        else return cli_usage_error("bench-decode: unknown option '%s'", a);
    }
    if (!model) return cli_usage_error("bench-decode: -m MODEL is required (see --help)");
    sd_set_threads(threads);
    sd_model *m = NULL;
    int rc = cli_load_model(model, tokp, NULL, 0, &m);
    if (rc) return rc;
    sd_kv *kv = NULL;
    int n_ctx = sd_model_n_ctx(m);
    if (n_prefill > n_ctx) n_prefill = n_ctx;
    if (pos + 9 > n_ctx) pos = n_ctx - 9 > 0 ? n_ctx - 9 : 0;
    sd_status st = sd_model_kv_create(m, 0, &kv);
    if (st != SD_OK) {
        sd_model_free(m);
        return cli_error_status(st);
    }
    const sd_hparams *hp = sd_model_hparams(m);
    const double bpt = (double)sd_model_bytes_per_token(m);
    printf("model:      %s (dim %d, %d layers, vocab %d)\n", sd_model_path(m), hp->dim, hp->n_layers, hp->vocab_size);
    printf("threads:    %d\n", threads);
    printf("weights:    %.1f MB read per decoded token\n", bpt / 1e6);
    fflush(stdout);
    double bw = sd_bench_bandwidth((size_t)bw_mib << 20, 5);
    printf("bandwidth:  %.1f GB/s streaming read (%d MiB buffer, best of 5)\n", bw / 1e9, bw_mib);
    printf("limit:      %.1f tokens/s if decode streamed the weights at that bandwidth\n", bw / bpt);
    fflush(stdout);

    double t_pp = sd_bench_forward(m, kv, 0, n_prefill, reps < 5 ? reps : 5);
    double t_tg = sd_bench_forward(m, kv, pos, 1, reps);
    if (t_pp < 0 || t_tg < 0) {
        rc = cli_error_status(SD_ERR_INVALID_ARG);
        goto out;
    }
    printf("prefill:    %.1f tokens/s (%d tokens in %.2f ms)\n", n_prefill / t_pp, n_prefill, t_pp * 1e3);
    printf("decode:     %.2f tokens/s (%.3f ms/token) = %.1f%% of the bandwidth limit\n", 1 / t_tg, t_tg * 1e3,
           100.0 * (bpt / t_tg) / bw);
    if (bpt < 64e6) /* 32 MiB L3 + 2 MiB L2: such weights stay cached between tokens */
        printf("note:       %.1f MB of weights stay in the CPU caches between tokens: decode is not bound by\n"
               "            memory bandwidth here, so the fraction above is not meaningful\n", bpt / 1e6);
    printf("verify:     k+1 tokens in one pass, cost relative to one decode step\n");
    for (int k = 1; k <= 8; k++) {
        double t = sd_bench_forward(m, kv, pos, k + 1, reps);
        if (t < 0) {
            rc = cli_error_status(SD_ERR_INVALID_ARG);
            goto out;
        }
        printf("  k=%d: T_verify(%d) = %.3f ms = %.2f x T_decode\n", k, k + 1, t * 1e3, t / t_tg);
    }
out:
    sd_kv_free(kv);
    sd_model_free(m);
    return rc;
}
