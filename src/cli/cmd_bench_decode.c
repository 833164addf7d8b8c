/* `specdec bench-decode`: prefill, decode and verify speed of one model, with decode shown
 * as a fraction of the memory-bandwidth limit (bytes read per token / bandwidth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/bench.h"
#include "specdec/cpu.h"

/* P(at least k of n fair coin flips come up heads): the one-sided sign test. */
static double sign_test_p(int k, int n) {
    double p = 0, c = 1; /* c = C(n, i) / 2^n, built up as i goes from 0 */
    for (int i = 0; i < n; i++) c *= 0.5;
    for (int i = 0; i <= n; i++) {
        if (i >= k) p += c;
        c = c * (n - i) / (i + 1);
    }
    return p;
}

/* First quartile, median and third quartile of n values (sorted in place). */
static void quartiles(double *v, int n, double q[3]) {
    q[1] = sd_median(v, n);
    q[0] = v[(n - 1) / 4];
    q[2] = v[n - 1 - (n - 1) / 4];
}

int cmd_bench_decode(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_BENCH_DECODE, &o, 0);
    if (prc) return prc == 1 ? 0 : 2;
    const char *model = o.model, *tokp = o.tokenizer;
    const int threads = o.threads, reps = o.reps, bw_mib = o.bw_mib;
    int n_prefill = o.prefill, pos = o.pos;
    const int batch = !o.no_batch;
    if (!model) return cli_usage_error("bench-decode: -m MODEL is required (see specdec bench-decode --help)");
    sd_model *m = NULL;
    int rc = cli_load_model(model, tokp, NULL, &m);
    if (rc) return rc;
    sd_context *ctx = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.kv_type = o.kv_type;
    cp.n_threads = threads;
    sd_status st = sd_context_create(m, &cp, &ctx);
    if (st != SD_OK) {
        sd_model_free(m);
        return cli_error_status(st);
    }
    const int n_ctx = sd_context_n_ctx(ctx);
    if (n_prefill > n_ctx) {
        fprintf(stderr, "note: --prefill %d lowered to the model's context of %d\n", n_prefill, n_ctx);
        n_prefill = n_ctx;
    }
    if (pos + 9 > n_ctx) { /* room for the longest verify pass after pos */
        const int np = n_ctx - 9 > 0 ? n_ctx - 9 : 0;
        fprintf(stderr, "note: --pos %d lowered to %d: a 9-token pass must fit the context of %d\n", pos, np, n_ctx);
        pos = np;
    }
    const sd_hparams *hp = sd_model_hparams(m);
    /* A decode step at pos reads every weight once and the cache's pos + 1 keys and values of
     * every layer (from memory once pos is large: at 64 positions of the 110M shape, 4.8 MB
     * next to Q4_K's 62 MB of weights). */
    const double wpt = (double)sd_model_bytes_per_token(m);
    const double kvpt = (double)sd_kv_bytes_per_token(sd_context_kv(ctx)) * (pos + 1.0);
    const double bpt = wpt + kvpt;
    printf("model:      %s (dim %d, %d layers, vocab %d)\n", sd_model_path(m), hp->dim, hp->n_layers, hp->vocab_size);
    printf("threads:    %d", sd_context_n_threads(ctx));
    if (sd_context_n_threads(ctx) != threads) printf(" (OMP_THREAD_LIMIT caps the %d asked for)", threads);
    printf("\n");
    char isa[256];
    sd_isa_describe(isa, sizeof isa);
    printf("kernels:    %s\n", isa);
    printf("reads:      %.1f MB per decoded token: %.1f MB of weights, %.1f MB of KV cache (%d positions, %s)\n",
           bpt / 1e6, wpt / 1e6, kvpt / 1e6, pos + 1, sd_type_info(sd_context_kv_type(ctx))->name);
    fflush(stdout);
    const int n_max = 9; /* decode plus verify passes of 2..9 tokens (k = 1..8) */
    double *t_probe = malloc((size_t)reps * sizeof(double));
    double *t_fwd = malloc((size_t)reps * n_max * sizeof(double));
    double *v = malloc((size_t)reps * sizeof(double));
    if (!t_probe || !t_fwd || !v) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto out_free;
    }
    double t_pp = sd_bench_forward(ctx, 0, n_prefill, reps < 5 ? reps : 5);
    if (t_pp < 0) {
        rc = cli_error_status(SD_ERR_INVALID_ARG);
        goto out_free;
    }
    printf("prefill:    %.1f tokens/s (%d tokens in %.2f ms)\n", n_prefill / t_pp, n_prefill, t_pp * 1e3);
    printf("rounds:     %d, each: one %d MiB bandwidth-probe read, a decode step, verify passes of 2..%d tokens\n"
           "            (interleaved so that machine drift hits every figure alike; ratios are paired per round)\n",
           reps, bw_mib, n_max);
    fflush(stdout);
    st = sd_bench_rounds(ctx, pos, n_max, reps, (size_t)bw_mib << 20, t_probe, t_fwd);
    if (st != SD_OK) {
        rc = cli_error_status(st);
        goto out_free;
    }
    /* The limit is the best probe of the run: on a shared host the probe's bandwidth moved
     * severalfold within an hour, and a decode step paired with a slow probe came out far above
     * "the limit" (measured: commit b9ce848). */
    const double probe_bytes = (double)((size_t)bw_mib << 20);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        v[r] = probe_bytes / t_probe[r];
        if (v[r] > best) best = v[r];
    }
    double bw_q[3];
    quartiles(v, reps, bw_q);
    for (int r = 0; r < reps; r++) v[r] = t_fwd[(size_t)r * n_max];
    const double t_tg = sd_median(v, reps);
    for (int r = 0; r < reps; r++) v[r] = 100.0 * (bpt / t_fwd[(size_t)r * n_max]) / best;
    double frac_q[3];
    quartiles(v, reps, frac_q);
    printf("bandwidth:  %.1f GB/s streaming read, the best of %d probes, one per round (median %.1f, quartiles\n"
           "            %.1f-%.1f): the host's load moves a probe from round to round, so the limit is the best\n",
           best / 1e9, reps, bw_q[1] / 1e9, bw_q[0] / 1e9, bw_q[2] / 1e9);
    printf("limit:      %.1f tokens/s if decode streamed those bytes at the best probe's bandwidth\n", best / bpt);
    printf("decode:     %.2f tokens/s (%.3f ms/token) = %.1f%% of the bandwidth limit (quartiles %.1f-%.1f%%)\n",
           1 / t_tg, t_tg * 1e3, frac_q[1], frac_q[0], frac_q[2]);
    sd_cache_source csrc;
    const double cached = cli_cache_bytes(sd_context_n_threads(ctx), &csrc);
    if (csrc == SD_CACHES_UNKNOWN)
        printf("caches:     unknown (no sysfs entries, no CPUID cache leaves): whether %.1f MB of weights stay\n"
               "            cached between steps cannot be told\n",
               wpt / 1e6);
    else
        printf("caches:     %.1f MB of L2 + L3 for %d threads (%s)\n", cached / 1e6, sd_context_n_threads(ctx),
               sd_cache_source_name(csrc));
    if (csrc != SD_CACHES_UNKNOWN && wpt < cached)
        printf("note:       %.1f MB of weights fit in this CPU's caches: decode is not bound by memory bandwidth\n"
               "            here, so the fraction above is not meaningful\n",
               wpt / 1e6);
    printf("verify:     k+1 tokens in one pass, cost relative to one decode step (median of per-round ratios)\n");
    for (int k = 1; k < n_max; k++) {
        for (int r = 0; r < reps; r++) v[r] = t_fwd[(size_t)r * n_max + k];
        const double t = sd_median(v, reps);
        for (int r = 0; r < reps; r++) v[r] = t_fwd[(size_t)r * n_max + k] / t_fwd[(size_t)r * n_max];
        double q[3];
        quartiles(v, reps, q);
        printf("  k=%d: T_verify(%d) = %.3f ms = %.2f x T_decode (quartiles %.2f-%.2f)\n", k, k + 1, t * 1e3, q[1],
               q[0], q[2]);
    }
    /* A pass of more tokens should never cost less. Where it does in more rounds than chance gives
     * (a one-sided sign test over the paired rounds, p < 0.05: 15 of 20), a kernel's blocking is
     * uneven; equal costs (the memory-bound range) split the rounds either way. */
    int dips = 0;
    printf("order:      rounds in which a pass of n+1 tokens was cheaper than one of n (a dip: p < 0.05 that\n"
           "            it is not chance, by a sign test)\n           ");
    for (int n = 2; n < n_max; n++) {
        int cheaper = 0;
        for (int r = 0; r < reps; r++) cheaper += t_fwd[(size_t)r * n_max + n] < t_fwd[(size_t)r * n_max + n - 1];
        const int dip = sign_test_p(cheaper, reps) < 0.05;
        dips += dip;
        printf(" n=%d: %d/%d%s", n, cheaper, reps, dip ? " (dip)" : "");
    }
    printf("\n            %s\n", dips ? "not monotonic" : "monotonic: no dip");
    if (batch) {
        /* its own context: 8 sequences of pos + 5 positions, not 8 full-length caches */
        enum { M = 5, N_S = 4 };
        static const int seqs[N_S] = {1, 2, 4, 8};
        sd_context *bc = NULL;
        sd_context_params bp = sd_context_default_params();
        bp.kv_type = o.kv_type;
        bp.n_seq = 8;
        bp.n_threads = threads;
        bp.n_ctx = pos + M;
        double *tb = malloc((size_t)reps * N_S * sizeof(double));
        if (!tb || (st = sd_context_create(m, &bp, &bc)) != SD_OK ||
            (st = sd_bench_batch_rounds(bc, pos, seqs, N_S, M, reps, t_probe, tb)) != SD_OK) {
            rc = tb ? cli_error_status(st) : cli_usage_error("out of memory");
            free(tb);
            sd_context_free(bc);
            goto out_free;
        }
        printf("batch:      S sequences x %d tokens in one pass (S verify passes at once), cost relative to one\n"
               "            decode step, %d interleaved rounds (median of per-round ratios)\n", M, reps);
        for (int i = 0; i < N_S; i++) {
            for (int r = 0; r < reps; r++) v[r] = tb[(size_t)r * N_S + i] / t_probe[r];
            double q[3];
            quartiles(v, reps, q);
            printf("  S=%d: %2d tokens = %.2f x T_decode (quartiles %.2f-%.2f), %.2f x per sequence\n", seqs[i],
                   seqs[i] * M, q[1], q[0], q[2], q[1] / seqs[i]);
        }
        free(tb);
        sd_context_free(bc);
    }
out_free:
    free(t_probe);
    free(t_fwd);
    free(v);
    sd_context_free(ctx);
    sd_model_free(m);
    return rc;
}
