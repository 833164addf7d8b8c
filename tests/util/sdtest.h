/* Shared test helpers: locating ../shared test data (skip with a message when absent),
 * temporary files, and float comparisons with named tolerances. */
#ifndef SDTEST_H
#define SDTEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Path of a file under the shared test-data directory ($SPECDEC_SHARED, else ../shared
 * relative to the working directory, else the source tree's ../shared), or NULL when
 * absent. The returned string is static storage overwritten by the next call. */
const char *sdtest_shared(const char *rel);

/* Same, but when the file is missing: fails the test if SPECDEC_REQUIRE_SHARED=1 (CI: real-model
 * tests must not pass as skips), else prints "SKIP: needs shared test data <rel> ..." and calls
 * cmocka's skip(). Returns a strdup'd path the caller frees. */
char *sdtest_shared_or_skip(const char *rel);
/* 1 when SPECDEC_REQUIRE_SHARED=1. */
int sdtest_require_shared(void);
/* The missing-data exit of a test that found no shared file itself: fail or skip as above. */
void sdtest_missing_shared(const char *what);

/* Path of a file in the project's source tree (configs, tests data); static storage. */
const char *sdtest_source_path(const char *rel);

/* A fresh path in a per-process temporary directory, removed with its contents at exit. */
const char *sdtest_tmp_path(const char *name);

/* Reads a whole file into a malloc'd buffer (NULL on error). */
void *sdtest_read_file(const char *path, size_t *len);

/* Largest |a[i] - b[i]|. */
double sdtest_max_abs_diff(const float *a, const float *b, size_t n);

/* Chi-square cells need an expected count of at least this to be used on their own; rarer
 * cells are pooled (the usual rule for Pearson's approximation). */
#define SDTEST_CHI2_MIN_EXPECTED 5.0

/* Upper 0.001 quantile of chi-square with df degrees of freedom (Wilson-Hilferty). */
double sdtest_chi2_crit_001(int df);
/* Pearson statistic of counts obs[0..n) against probabilities prob (total draws); rare cells
 * pooled; +inf when a cell of probability 0 was hit. *df receives the degrees of freedom. */
double sdtest_chi2_pooled(const long *obs, const double *prob, int n, long total, int *df);

#endif
