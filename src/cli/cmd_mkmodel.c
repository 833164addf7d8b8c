/* `specdec mkmodel`: Llama GGUF files of any shape for cost benchmarks: random weights, or a
 * cost twin of a trained model (its function at the cost of the larger shape). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "specdec/convert.h"
#include "specdec/synth.h"
#include "specdec/twin.h"
#include "specdec/types.h"

static void help(FILE *f) {
    fprintf(f, "usage: specdec mkmodel OUT.gguf [--shape NAME | --dim N --layers N --heads N\n"
               "                        [--kv-heads N] --hidden N --vocab N] [--ctx N] [--type T]\n"
               "                        [--tied] [--seed S]\n"
               "       specdec mkmodel OUT.gguf --twin SMALL [-z TOKENIZER] (--shape NAME | --dim N\n"
               "                        --layers N --heads N [--kv-heads N] --hidden N) [--type T] [--seed S]\n\n"
               "Writes a Llama GGUF with random weights (cost measurements only: its text is noise).\n"
               "--type: f32 (default), f16, bf16, q8_0, q4_0, q5_0, q4_k, q6_k (as `specdec convert`).\n"
               "Shapes: stories260K, stories15M, stories42M, stories110M (the llama2.c shapes; the\n"
               "last three with vocab 32000 and a separate classifier unless --tied).\n\n"
               "--twin SMALL writes a cost twin instead: a model of the given shape that computes the\n"
               "same function as SMALL (a path or name as for -m; -z: the tokenizer.bin of a llama2.c\n"
               "SMALL), so it decodes with the large shape's cost and SMALL's predictions. It keeps\n"
               "SMALL's vocabulary, context, RoPE base and epsilon (so no --vocab, --ctx, --tied);\n"
               "every size must be at least SMALL's and the head size (dim / heads) a multiple of\n"
               "SMALL's. --seed seeds the random input weights of its extra heads, units and layers.\n");
}

/* Flags that a twin takes from its small model. */
static const char *const k_not_with_twin[] = {"--vocab", "--ctx", "--tied"};

static int write_twin(const char *out, const char *small, const char *tok, const sd_synth_params *p) {
    sd_twin_params tp = sd_twin_default_params();
    tp.dim = p->dim, tp.n_layers = p->n_layers, tp.n_heads = p->n_heads, tp.n_kv_heads = p->n_kv_heads;
    tp.hidden_dim = p->hidden_dim, tp.wtype = (sd_type)p->wtype, tp.seed = p->seed, tp.name = small;
    sd_model *m = NULL;
    int rc = cli_load_model(small, tok, NULL, 0, &m);
    if (rc) return rc;
    double t = cli_now();
    sd_status st = sd_twin_write_file(m, &tp, out);
    const sd_hparams *h = sd_model_hparams(m);
    if (st == SD_OK)
        fprintf(stderr, "wrote %s: cost twin of %s (dim %d -> %d, %d -> %d layers, %d -> %d heads, %d -> %d kv heads, "
                        "hidden %d -> %d; vocab %d) in %.1f s\n",
                out, small, h->dim, tp.dim, h->n_layers, tp.n_layers, h->n_heads, tp.n_heads, h->n_kv_heads,
                tp.n_kv_heads, h->hidden_dim, tp.hidden_dim, h->vocab_size, cli_now() - t);
    sd_model_free(m);
    return st == SD_OK ? 0 : cli_error_status(st);
}

int cmd_mkmodel(int argc, char **argv) {
    sd_synth_params p = sd_synth_default_params();
    const char *out = NULL, *twin = NULL, *tok = NULL, *twin_conflict = NULL;
    int shape_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        for (size_t k = 0; k < sizeof k_not_with_twin / sizeof *k_not_with_twin; k++)
            if (!strcmp(a, k_not_with_twin[k])) twin_conflict = k_not_with_twin[k];
        if (!strcmp(a, "--tied")) { p.tied_output = 1; continue; }
        if (a[0] != '-') {
            if (out) return cli_usage_error("mkmodel: one output file");
            out = a;
            continue;
        }
        if (!v) return cli_usage_error("%s needs a value", a);
        i++;
        if (!strcmp(a, "--twin")) { twin = v; continue; }
        if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) { tok = v; continue; }
        if (!strcmp(a, "--shape")) {
            if (sd_synth_shape(v, &p) != SD_OK) return cli_usage_error("mkmodel: %s", sd_last_error());
            shape_given = 1;
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
        if (ip != &p.vocab_size && ip != &p.ctx_len) shape_given = 1;
        if (ip == &p.n_heads && p.n_kv_heads > p.n_heads) p.n_kv_heads = p.n_heads;
    }
    if (!out) return cli_usage_error("mkmodel: OUT.gguf is required (see specdec mkmodel --help)");
    if (!twin) {
        if (tok) return cli_usage_error("mkmodel: -z goes with --twin (the tokenizer of a llama2.c SMALL)");
        double t = cli_now();
        sd_status st = sd_synth_write_file(&p, out);
        if (st != SD_OK) return cli_error_status(st);
        fprintf(stderr, "wrote %s (dim %d, %d layers, %d heads, %d kv heads, hidden %d, vocab %d) in %.1f s\n",
                out, p.dim, p.n_layers, p.n_heads, p.n_kv_heads, p.hidden_dim, p.vocab_size, cli_now() - t);
        return 0;
    }
    if (twin_conflict)
        return cli_usage_error("mkmodel: %s cannot be used with --twin (a twin keeps SMALL's vocabulary, context and "
                               "separate classifier)", twin_conflict);
    if (!shape_given)
        return cli_usage_error("mkmodel: --twin needs the large shape: --shape NAME, or --dim/--layers/--heads/--hidden");
    return write_twin(out, twin, tok, &p);
}
