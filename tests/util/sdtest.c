/* Shared test helpers (see sdtest.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "sdtest.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>
#include <sys/stat.h>

#include "core/io.h"

#ifndef SDTEST_SOURCE_DIR
#define SDTEST_SOURCE_DIR "."
#endif

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

const char *sdtest_shared(const char *rel) {
    static char buf[4096];
    const char *env = getenv("SPECDEC_SHARED");
    const char *bases[3] = {env, "../shared", SDTEST_SOURCE_DIR "/../shared"};
    for (int i = 0; i < 3; i++) {
        if (!bases[i] || !bases[i][0]) continue;
        snprintf(buf, sizeof buf, "%s/%s", bases[i], rel);
        if (file_exists(buf)) return buf;
    }
    return NULL;
}

int sdtest_require_shared(void) {
    const char *v = getenv("SPECDEC_REQUIRE_SHARED");
    return v && strcmp(v, "1") == 0;
}

void sdtest_missing_shared(const char *what) {
    if (sdtest_require_shared())
        fail_msg("needs shared test data %s (not found under $SPECDEC_SHARED or ../shared, and SPECDEC_REQUIRE_SHARED=1)",
                 what);
    printf("SKIP: needs shared test data %s (not found under $SPECDEC_SHARED or ../shared)\n", what);
    fflush(stdout);
    skip();
}

char *sdtest_shared_or_skip(const char *rel) {
    const char *p = sdtest_shared(rel);
    if (!p) {
        sdtest_missing_shared(rel);
        return NULL;
    }
    return strdup(p);
}

const char *sdtest_source_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", SDTEST_SOURCE_DIR, rel);
    return buf;
}

static char tmp_dir[256];
static pid_t tmp_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    remove(path);
    return 0;
}

/* At exit the process that made the directory removes it (a forked child leaves it be): nothing
 * else does, and test models of a few hundred MB a run filled a disk. */
static void remove_tmp_dir(void) {
    if (tmp_dir[0] && getpid() == tmp_owner) nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *sdtest_tmp_path(const char *name) {
    static char buf[512];
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/sdtest.%ld", (long)getpid());
        mkdir(tmp_dir, 0700);
        tmp_owner = getpid();
        atexit(remove_tmp_dir);
    }
    snprintf(buf, sizeof buf, "%s/%s", tmp_dir, name);
    return buf;
}

void *sdtest_read_file(const char *path, size_t *len) {
    char *b = NULL;
    size_t n = 0;
    if (sd_file_read(path, 0, &b, &n) != SD_OK) return NULL;
    if (len) *len = n;
    return b;
}

double sdtest_max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) m = (d != d) ? INFINITY : d;
    }
    return m;
}

/* Upper 0.001 quantile of chi-square by Wilson-Hilferty: (X/df)^(1/3) is nearly normal with
 * mean 1 - h and variance h, h = 2/(9 df); within 1% for df >= 3 and slightly high
 * (conservative). Seeds are fixed, so a correct engine passes deterministically: p = 0.001
 * bounds the chance that the fixed seeds happened to be unlucky, while the controls show that
 * genuine errors exceed the critical value (wrong q ~2x, unverified drafts ~9x). */
double sdtest_chi2_crit_001(int df) {
    const double z = 3.090232306167813;
    const double h = 2.0 / (9.0 * df);
    const double c = 1.0 - h + z * sqrt(h);
    return df * c * c * c;
}

/* Pearson statistic of counts against probabilities; cells with expectation below
 * SDTEST_CHI2_MIN_EXPECTED are pooled into one (itself folded into the smallest kept cell if still
 * too small). A hit in a cell of probability 0 is an outright failure (returns +inf). */
double sdtest_chi2_pooled(const long *obs, const double *prob, int n, long total, int *df) {
    double x = 0, pool_e = 0, pool_o = 0, min_e = INFINITY, min_o = 0;
    int cells = 0, min_i = -1;
    for (int i = 0; i < n; i++) {
        if (prob[i] <= 0) {
            if (obs[i] != 0) return INFINITY;
            continue;
        }
        double e = prob[i] * (double)total;
        if (e < SDTEST_CHI2_MIN_EXPECTED) {
            pool_e += e;
            pool_o += (double)obs[i];
            continue;
        }
        x += ((double)obs[i] - e) * ((double)obs[i] - e) / e;
        cells++;
        if (e < min_e) {
            min_e = e;
            min_o = (double)obs[i];
            min_i = i;
        }
    }
    if (pool_e >= SDTEST_CHI2_MIN_EXPECTED) {
        x += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    } else if (pool_e > 0 && min_i >= 0) { /* merge the pool into the smallest kept cell */
        x -= (min_o - min_e) * (min_o - min_e) / min_e;
        double e = min_e + pool_e, o = min_o + pool_o;
        x += (o - e) * (o - e) / e;
    }
    *df = cells - 1;
    return x;
}
