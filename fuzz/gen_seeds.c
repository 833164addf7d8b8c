/* Writes the generated seed corpus of each fuzz target: sd_fuzz_seeds OUTDIR [TARGET...]
 * creates OUTDIR/<target>/<seed name> (scripts/fuzz.sh adds ../shared files at run time). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static int write_file(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

static int one(const char *dir, const char *target) {
    sd_fuzz_seed *s;
    int n;
    if (sd_fuzz_make_seeds(target, &s, &n) != 0) {
        fprintf(stderr, "sd_fuzz_seeds: cannot build seeds for '%s'\n", target);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "sd_fuzz_seeds: mkdir %s: %s\n", path, strerror(errno));
        sd_fuzz_free_seeds(s, n);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        snprintf(path, sizeof path, "%s/%s/seed_%s", dir, target, s[i].name);
        if (write_file(path, s[i].data, s[i].len) != 0) {
            fprintf(stderr, "sd_fuzz_seeds: cannot write %s\n", path);
            rc = 1;
        }
    }
    sd_fuzz_free_seeds(s, n);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sd_fuzz_seeds OUTDIR [TARGET...]\n");
        return 2;
    }
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "sd_fuzz_seeds: mkdir %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    int rc = 0;
    if (argc == 2) {
        for (const sd_fuzz_target *t = sd_fuzz_targets; t->name; t++) rc |= one(argv[1], t->name);
    } else {
        for (int i = 2; i < argc; i++) rc |= one(argv[1], argv[i]);
    }
    return rc;
}
