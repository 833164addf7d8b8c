/* Shared test helpers (see sdtest.h). */
#include "sdtest.h"

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

const char *sdtest_tmp_path(const char *name) {
    static char dir[256];
    static char buf[512];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/sdtest.%ld", (long)getpid());
        mkdir(dir, 0700);
    }
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
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
