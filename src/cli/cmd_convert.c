/* `specdec convert`: any model specdec loads, written as a llama.cpp-readable GGUF with its
 * matrices in one type (f32, f16, bf16 or a ggml quantisation). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/convert.h"

typedef struct {
    sd_type want;
    int verbose;  /* a progress line per tensor (big models) */
    int n_fallback;
    char first_fallback[96];
    int type_counts[SD_TYPE_COUNT];
} progress;

static void on_tensor(int i, int n, const char *name, sd_type type, void *user) {
    progress *p = user;
    if ((unsigned)type < SD_TYPE_COUNT) p->type_counts[type]++;
    const int is_norm = strstr(name, "norm") != NULL;
    if (!is_norm && type != p->want) {
        if (!p->n_fallback) snprintf(p->first_fallback, sizeof p->first_fallback, "%s", name);
        p->n_fallback++;
        fprintf(stderr, "%snote: %s stays %s: its rows do not divide into %s blocks of %d\n",
                p->verbose ? "\n" : "", name, sd_type_info(type)->name, sd_type_info(p->want)->name,
                sd_type_info(p->want)->block_size);
    }
    if (p->verbose) {
        fprintf(stderr, "\r[%3d/%3d] %-32s -> %-5s", i + 1, n, name, sd_type_info(type)->name);
        fflush(stderr);
    }
}

int cmd_convert(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_CONVERT, &o, 2);
    if (prc) return prc == 1 ? 0 : 2;
    const char *in = o.pos_args[0], *out = o.pos_args[1], *tokp = o.tokenizer;
    const int type = o.type >= 0 ? o.type : SD_TYPE_F16;
    if (!in || !out) return cli_usage_error("convert: IN and OUT.gguf are required (see specdec convert --help)");

    double t0 = sd_now();
    sd_model *m = NULL;
    int rc = cli_load_model(in, tokp, NULL, &m);
    if (rc) return rc;
    progress pr = {0};
    pr.want = (sd_type)type;
    pr.verbose = sd_model_weight_bytes(m) > ((size_t)64 << 20);
    sd_convert_params cp = {(sd_type)type, on_tensor, &pr};
    sd_gguf_writer *w = NULL;
    sd_status st = sd_model_to_gguf(m, &cp, &w);
    if (pr.verbose) fputc('\n', stderr);
    if (st == SD_OK) st = sd_gguf_write_file(w, out);
    sd_gguf_writer_free(w);
    if (st != SD_OK) {
        sd_model_free(m);
        return cli_error_status(st);
    }
    fprintf(stderr, "wrote %s: %d tensors (", out, sd_model_n_tensors(m));
    int first = 1;
    for (int t = 0; t < SD_TYPE_COUNT; t++) {
        if (!pr.type_counts[t]) continue;
        fprintf(stderr, "%s%d %s", first ? "" : ", ", pr.type_counts[t], sd_type_info((uint32_t)t)->name);
        first = 0;
    }
    fprintf(stderr, ") in %.1f s\n", sd_now() - t0);
    sd_model_free(m);
    return 0;
}
