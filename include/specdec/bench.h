/* Measurement helpers shared by the benchmark commands: memory bandwidth and timed passes. */
#ifndef SPECDEC_BENCH_H
#define SPECDEC_BENCH_H

#include <stddef.h>

#include "specdec/model.h"

/* Streaming-read bandwidth in bytes/s with the current thread count: reads a buffer of
 * `bytes` (much larger than the last-level cache) `reps` times and keeps the best pass. */
double sd_bench_bandwidth(size_t bytes, int reps);

/* Median seconds of one forward of n tokens appended at position pos of a cache (which is
 * truncated back after each run), over reps runs. Negative on error (sd_last_error). */
double sd_bench_forward(sd_model *m, sd_kv *kv, int pos, int n, int reps);

/* Median of n doubles (sorts them in place). */
double sd_median(double *v, int n);

#endif
