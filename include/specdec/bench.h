/* Measurement helpers shared by the benchmark commands: memory bandwidth and timed passes. */
#ifndef SPECDEC_BENCH_H
#define SPECDEC_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/context.h"
#include "specdec/cpu.h" /* the cache sizes bench-decode reports */
#include "specdec/model.h"

/* Streaming-read bandwidth in bytes/s on `threads` threads (sd_cpu_threads): reads a buffer of
 * `bytes` (much larger than the last-level cache) `reps` times and keeps the best pass. */
double sd_bench_bandwidth(size_t bytes, int reps, int threads);

/* Median seconds of one prefill of n tokens appended at position pos of sequence 0 of a context (which is
 * truncated back after each run; the last token's logits only), over reps runs. Negative on error
 * (sd_last_error). */
double sd_bench_forward(sd_context *c, int pos, int n, int reps);

/* Interleaved measurement rounds, so that machine drift (other tenants, frequency) hits every
 * figure alike: each of `reps` rounds reads a probe buffer of probe_bytes once (seconds in
 * t_probe[r]), runs one untimed decode step (to warm the caches the probe evicted), then
 * forward passes of n = 1..n_max tokens at position pos (seconds in
 * t_fwd[r * n_max + n - 1]; n == 1 is a decode step, n > 1 a verify pass returning every
 * row). The cache is truncated back to pos after each pass. SD_OK or an error status. */
sd_status sd_bench_rounds(sd_context *c, int pos, int n_max, int reps, size_t probe_bytes,
                          double *t_probe, double *t_fwd);

/* One timed forward of the n tokens tok[pos..pos+n) appended to a cache holding pos tokens
 * (n == 1: last logits, as a decode step; n > 1: every row, as verification), truncated back
 * to pos afterwards, also on failure. Seconds in *seconds. */
sd_status sd_bench_time_forward(sd_context *c, const int32_t *tok, int pos, int n, float *logits,
                                double *seconds);

/* Interleaved rounds of one decode step (sequence 0, seconds in t_dec[r]) and, for each S of
 * seqs[0..n_s), one pass of S sequences x m tokens (t_batch[r * n_s + i]), every sequence holding
 * pos tokens before it: the cost of serving several sequences' verify passes at once. c needs
 * n_seq >= the largest S and room for pos + m tokens; sequences are truncated back to pos. */
sd_status sd_bench_batch_rounds(sd_context *c, int pos, const int *seqs, int n_s, int m, int reps, double *t_dec,
                                double *t_batch);


/* Median of n doubles (sorts them in place). */
double sd_median(double *v, int n);

#endif
