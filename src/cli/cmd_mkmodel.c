/* `specdec mkmodel`: random-weight Llama GGUF files of any shape, for cost benchmarks. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "specdec/convert.h"
#include "specdec/synth.h"
#include "specdec/types.h"

static void help(FILE *f) {
    fprintf(f, "usage: specdec mkmodel OUT.gguf [--shape NAME | --dim N --layers N --heads N\n"
               "                        [--kv-heads N] --hidden N --vocab N] [--ctx N] [--type T]\n"
               "                        [--tied] [--seed S]\n\n"
               "Writes a Llama GGUF with random weights (cost measurements only: its text is noise).\n"
               "--type: f32 (default), f16, bf16, q8_0, q4_0, q5_0, q4_k, q6_k (as `specdec convert`).\n"
               "Shapes: stories260K, stories15M, stories42M, stories110M (the llama2.c shapes; the\n"
               "last three with vocab 32000 and a separate classifier unless --tied).\n");
}

int cmd_mkmodel(int argc, char **argv) {
    sd_synth_params p = sd_synth_default_params();
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "--tied")) { p.tied_output = 1; continue; }
        if (a[0] != '-') {
            if (out) return cli_usage_error("mkmodel: one output file");
            out = a;
            continue;
        }
        if (!v) return cli_usage_error("%s needs a value", a);
        i++;
        if (!strcmp(a, "--shape")) {
            if (sd_synth_shape(v, &p) != SD_OK) return cli_usage_error("mkmodel: %s", sd_last_error());
            continue;
        }
        if (!strcmp(a, "--type")) {
            int t = sd_type_from_name(v);
            if (t < 0)
                return cli_usage_error("mkmodel: --type must be f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k, got '%s'", v);
            p.wtype = (uint32_t)t;
            continue;
        }
        if (!strcmp(a, "--seed")) {
            if (cli_parse_u64(a, v, &p.seed)) return 2;
            continue;
        }
        if (!strcmp(a, "--dim")) ip = &p.dim;
        else if (!strcmp(a, "--layers")) ip = &p.n_layers;
        else if (!strcmp(a, "--heads")) ip = &p.n_heads;
        else if (!strcmp(a, "--kv-heads")) ip = &p.n_kv_heads;
        else if (!strcmp(a, "--hidden")) ip = &p.hidden_dim;
        else if (!strcmp(a, "--vocab")) ip = &p.vocab_size;
        else if (!strcmp(a, "--ctx")) ip = &p.ctx_len;
        else return cli_usage_error("mkmodel: unknown option '%s'", a);
        if (cli_parse_int(a, v, 1, 1 << 24, ip)) return 2;
        if (ip == &p.n_heads && p.n_kv_heads > p.n_heads) p.n_kv_heads = p.n_heads;
    }
    if (!out) return cli_usage_error("mkmodel: OUT.gguf is required (see specdec mkmodel --help)");
    double t = sd_now();
    sd_status st = sd_synth_write_file(&p, out);
    if (st != SD_OK) return cli_error_status(st);
    fprintf(stderr, "wrote %s (dim %d, %d layers, %d heads, %d kv heads, hidden %d, vocab %d) in %.1f s\n",
            out, p.dim, p.n_layers, p.n_heads, p.n_kv_heads, p.hidden_dim, p.vocab_size, sd_now() - t);
    return 0;
}
