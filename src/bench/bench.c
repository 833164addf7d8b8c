/* Benchmark helpers: the machine's streaming-read bandwidth, measured with the same load
 * pattern as the decode kernels, and median timings of forward passes. */
#include "specdec/bench.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/io.h"
#include "specdec/cpu.h"
#include "kernels/kernels.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double sd_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *probe_buffer(size_t bytes);

sd_status sd_bench_time_forward(sd_context *c, const int32_t *tok, int pos, int n, float *logits,
                                double *seconds) {
    const double t0 = sd_now();
    const sd_status st = sd_context_forward(c, 0, tok + pos, n, logits, n > 1);
    *seconds = sd_now() - t0;
    sd_context_seq_truncate(c, 0, pos);
    return st;
}

double sd_bench_bandwidth(size_t bytes, int reps, int threads) {
    size_t n = bytes / sizeof(float);
    float *buf = probe_buffer(bytes);
    if (!buf) return -1;
    volatile double sink = 0;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = sd_now();
        sink += sd_stream_read(buf, n, threads);
        t = sd_now() - t;
        if (t < best) best = t;
    }
    (void)sink;
    free(buf);
    return (double)(n * sizeof(float)) / best;
}

/* Touched buffer of `bytes` for the probe (page faults outside the timings), or NULL. */
static float *probe_buffer(size_t bytes) {
    size_t n = bytes / sizeof(float);
    float *buf = aligned_alloc(64, n * sizeof(float));
    if (buf)
        for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    return buf;
}

sd_status sd_bench_rounds(sd_context *c, int pos, int n_max, int reps, size_t probe_bytes,
                          double *t_probe, double *t_fwd) {
    const sd_hparams *hp = sd_model_hparams(sd_context_model(c));
    if (n_max < 1 || reps < 1 || pos < 0 || pos + n_max > sd_context_n_ctx(c))
        return sd_fail(SD_ERR_INVALID_ARG, "bench: %d + %d tokens do not fit the cache of %d", pos, n_max,
                       sd_context_n_ctx(c));
    const size_t nf = probe_bytes / sizeof(float);
    int32_t *tok = malloc((size_t)(pos + n_max) * sizeof(int32_t));
    float *logits = malloc((size_t)n_max * hp->vocab_size * sizeof(float));
    float *buf = probe_buffer(probe_bytes);
    sd_status st = SD_OK;
    if (!buf) {
        st = sd_fail(SD_ERR_NOMEM, "bench: cannot allocate the %zu MiB probe buffer", probe_bytes >> 20);
        goto out;
    }
    if (!tok || !logits) {
        st = sd_fail(SD_ERR_NOMEM, "bench: out of memory");
        goto out;
    }
    for (int i = 0; i < pos + n_max; i++) tok[i] = (int32_t)((i * 7919 + 3) % hp->vocab_size);
    sd_context_seq_truncate(c, 0, 0);
    if (pos > 0 && (st = sd_context_forward(c, 0, tok, pos, NULL, 0)) != SD_OK) goto out;
    volatile double sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = sd_now();
        sink += sd_stream_read(buf, nf, sd_context_n_threads(c));
        t_probe[r] = sd_now() - t0;
        /* an untimed step first: the probe evicted the caches, and a model whose weights fit
         * in them would otherwise time its decode step cold and its verify passes warm */
        if ((st = sd_context_forward(c, 0, tok + pos, 1, logits, 0)) != SD_OK) goto out;
        sd_context_seq_truncate(c, 0, pos);
        for (int n = 1; n <= n_max; n++)
            if ((st = sd_bench_time_forward(c, tok, pos, n, logits, &t_fwd[(size_t)r * n_max + n - 1])) != SD_OK)
                goto out;
    }
    (void)sink;
out:
    free(tok);
    free(logits);
    free(buf);
    return st;
}

double sd_bench_forward(sd_context *c, int pos, int n, int reps) {
    const sd_hparams *hp = sd_model_hparams(sd_context_model(c));
    int32_t *tok = malloc((size_t)(pos + n) * sizeof(int32_t));
    float *logits = malloc((size_t)hp->vocab_size * sizeof(float));
    double *t = malloc((size_t)reps * sizeof(double));
    double res = -1;
    if (!tok || !logits || !t) goto out;
    for (int i = 0; i < pos + n; i++) tok[i] = (int32_t)((i * 7919 + 3) % hp->vocab_size);
    sd_context_seq_truncate(c, 0, 0);
    if (pos > 0 && sd_context_forward(c, 0, tok, pos, NULL, 0) != SD_OK) goto out;
    /* a prefill: the last token's logits only, as generation asks for them (and as llama-bench's
     * pp figures are taken); every row's added a classifier product per token, a large share of
     * the work of 512 tokens of the 110M shape (measured: commit 57d72fe) */
    for (int r = 0; r < reps; r++) {
        const double t0 = sd_now();
        const sd_status st = sd_context_forward(c, 0, tok + pos, n, logits, 0);
        t[r] = sd_now() - t0;
        sd_context_seq_truncate(c, 0, pos);
        if (st != SD_OK) goto out;
    }
    res = sd_median(t, reps);
out:
    free(tok);
    free(logits);
    free(t);
    return res;
}

sd_status sd_bench_batch_rounds(sd_context *c, int pos, const int *seqs, int n_s, int m, int reps, double *t_dec,
                                double *t_batch) {
    const sd_hparams *hp = sd_model_hparams(sd_context_model(c));
    int s_max = 1;
    for (int i = 0; i < n_s; i++) s_max = seqs[i] > s_max ? seqs[i] : s_max;
    if (s_max > sd_context_n_seq(c) || pos + m > sd_context_n_ctx(c) || m < 1 || reps < 1)
        return sd_fail(SD_ERR_INVALID_ARG, "bench: %d sequences x %d + %d tokens do not fit the context (%d x %d)",
                       s_max, pos, m, sd_context_n_seq(c), sd_context_n_ctx(c));
    int32_t *tok = malloc((size_t)(pos + m) * sizeof(int32_t));
    float *logits = malloc((size_t)s_max * m * hp->vocab_size * sizeof(float));
    sd_batch b = {0};
    sd_status st = tok && logits ? sd_batch_init(&b, s_max * m) : sd_fail(SD_ERR_NOMEM, "bench: out of memory");
    for (int i = 0; st == SD_OK && i < pos + m; i++) tok[i] = (int32_t)((i * 7919 + 3) % hp->vocab_size);
    for (int s = 0; st == SD_OK && s < s_max; s++) {
        sd_context_seq_truncate(c, s, 0);
        if (pos > 0) st = sd_context_forward(c, s, tok, pos, NULL, 0);
    }
    for (int r = 0; st == SD_OK && r < reps; r++) {
        double t0 = sd_now();
        st = sd_context_forward(c, 0, tok + pos, 1, logits, 0);
        t_dec[r] = sd_now() - t0;
        sd_context_seq_truncate(c, 0, pos);
        for (int i = 0; st == SD_OK && i < n_s; i++) {
            sd_batch_clear(&b);
            for (int s = 0; s < seqs[i]; s++)
                for (int j = 0; j < m; j++) sd_batch_add(&b, tok[pos + j], pos + j, s, 1);
            t0 = sd_now();
            st = sd_context_decode(c, &b, logits);
            t_batch[(size_t)r * n_s + i] = sd_now() - t0;
            for (int s = 0; s < seqs[i]; s++) sd_context_seq_truncate(c, s, pos);
        }
    }
    sd_batch_free(&b);
    free(tok);
    free(logits);
    return st;
}
