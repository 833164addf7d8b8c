/* `specdec mkmodel`: GGUF files of any shape for cost benchmarks: random weights, or a cost twin
 * of a trained model (its function at the cost of the larger shape). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/quant.h"
#include "specdec/synth.h"
#include "specdec/twin.h"
#include "specdec/types.h"

static int write_twin(const char *out, const char *small, const char *tok, const sd_synth_params *p) {
    sd_twin_params tp = sd_twin_default_params();
    tp.dim = p->dim, tp.n_layers = p->n_layers, tp.n_heads = p->n_heads, tp.n_kv_heads = p->n_kv_heads;
    tp.hidden_dim = p->hidden_dim, tp.wtype = (sd_type)p->wtype, tp.seed = p->seed, tp.name = small;
    sd_model *m = NULL;
    int rc = cli_load_model(small, tok, NULL, &m);
    if (rc) return rc;
    double t = sd_now();
    sd_status st = sd_twin_write_file(m, &tp, out);
    const sd_hparams *h = sd_model_hparams(m);
    if (st == SD_OK)
        fprintf(stderr, "wrote %s: cost twin of %s (dim %d -> %d, %d -> %d layers, %d -> %d heads, %d -> %d kv heads, "
                        "hidden %d -> %d; vocab %d) in %.1f s\n",
                out, small, h->dim, tp.dim, h->n_layers, tp.n_layers, h->n_heads, tp.n_heads, h->n_kv_heads,
                tp.n_kv_heads, h->hidden_dim, tp.hidden_dim, h->vocab_size, sd_now() - t);
    sd_model_free(m);
    return st == SD_OK ? 0 : cli_error_status(st);
}

int cmd_mkmodel(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_MKMODEL, &o, 1);
    if (prc) return prc == 1 ? 0 : 2;
    const char *out = o.pos_args[0];
    if (!out) return cli_usage_error("mkmodel: OUT.gguf is required (see specdec mkmodel --help)");
    sd_synth_params p = sd_synth_default_params();
    if (o.shape && sd_synth_shape(o.shape, &p) != SD_OK) return cli_usage_error("mkmodel: %s", sd_last_error());
    /* sizes given one by one override the shape's */
    const struct { int v; int *dst; } sizes[] = {{o.dim, &p.dim},           {o.layers, &p.n_layers},
                                                 {o.heads, &p.n_heads},     {o.kv_heads, &p.n_kv_heads},
                                                 {o.hidden, &p.hidden_dim}, {o.vocab, &p.vocab_size},
                                                 {o.ctx, &p.ctx_len}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v) *sizes[i].dst = sizes[i].v;
    if (o.heads && !o.kv_heads && p.n_kv_heads > p.n_heads) p.n_kv_heads = p.n_heads;
    if (o.tied) p.tied_output = 1;
    p.arch = o.arch;
    p.head_dim = o.head_dim;
    if (o.type >= 0) p.wtype = (uint32_t)o.type;
    p.seed = o.model_seed;
    const int shape_given = o.shape || o.dim || o.layers || o.heads || o.kv_heads || o.hidden;
    if (!o.twin) {
        if (o.tokenizer) return cli_usage_error("mkmodel: -z goes with --twin (the tokenizer of a llama2.c SMALL)");
        double t = sd_now();
        sd_status st = sd_synth_validate(&p);
        if (st != SD_OK) return cli_usage_error("mkmodel: %s", sd_last_error());
        st = sd_synth_write_file(&p, out);
        if (st != SD_OK) return cli_error_status(st);
        fprintf(stderr, "wrote %s (%s, dim %d, %d layers, %d heads, %d kv heads, hidden %d, vocab %d) in %.1f s\n",
                out, p.arch ? p.arch : "llama", p.dim, p.n_layers, p.n_heads, p.n_kv_heads, p.hidden_dim, p.vocab_size,
                sd_now() - t);
        return 0;
    }
    if ((o.arch && strcmp(o.arch, "llama") != 0) || o.head_dim)
        return cli_usage_error("mkmodel: a cost twin is a llama model with head size dim / heads (no %s)",
                               o.head_dim ? "--head-dim" : "--arch");
    const char *conflict = o.vocab ? "--vocab" : o.ctx ? "--ctx" : o.tied ? "--tied" : NULL;
    if (conflict)
        return cli_usage_error("mkmodel: %s cannot be used with --twin (a twin keeps SMALL's vocabulary, context and "
                               "separate classifier)", conflict);
    if (!shape_given)
        return cli_usage_error("mkmodel: --twin needs the large shape: --shape NAME, or --dim/--layers/--heads/--hidden");
    return write_twin(out, o.twin, o.tokenizer, &p);
}
