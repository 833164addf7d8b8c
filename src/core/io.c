/* File reads, read-only mappings, huge-page memory and the clock shared by the library, the CLI
 * and the tests. */
#include "core/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

sd_status sd_file_read(const char *path, size_t max, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return sd_fail(SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return sd_fail(SD_ERR_IO, "%s: not a regular file", path);
    }
    if (max && (uint64_t)st.st_size > max) {
        fclose(f);
        return sd_fail(SD_ERR_FORMAT, "%s: %lld bytes is too large (at most %zu)", path, (long long)st.st_size, max);
    }
    /* read to the end rather than trusting st_size: the file may grow or shrink meanwhile */
    size_t cap = (size_t)st.st_size + 1, n = 0, r;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 == cap) {
            if (max && n > max) break;
            char *t = realloc(b, cap *= 2);
            if (!t) {
                free(b);
                b = NULL;
                break;
            }
            b = t;
        }
        if ((r = fread(b + n, 1, cap - n - 1, f)) == 0) break;
        n += r;
    }
    const int err = ferror(f);
    fclose(f);
    if (!b) return sd_fail(SD_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, cap);
    if (err) {
        free(b);
        return sd_fail(SD_ERR_IO, "%s: read failed", path);
    }
    if (max && n > max) {
        free(b);
        return sd_fail(SD_ERR_FORMAT, "%s: more than %zu bytes", path, max);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return SD_OK;
}

sd_status sd_file_map(const char *path, void **map, size_t *len) {
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return sd_fail(SD_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sd_fail(SD_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return SD_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return sd_fail(SD_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
    *map = p;
    *len = (size_t)st.st_size;
    return SD_OK;
}

void sd_file_unmap(void *map, size_t len) {
    if (map) munmap(map, len);
}

double sd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *sd_huge_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (!bytes || bytes > SIZE_MAX - huge) return NULL;
    const size_t rounded = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, rounded);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, rounded, MADV_HUGEPAGE); /* advice only */
#endif
    return p;
}
