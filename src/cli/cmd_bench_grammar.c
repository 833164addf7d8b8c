/* `specdec bench-grammar`: the cost of constrained decoding: the vocabulary index, compiling the
 * grammar, and per token the mask against the model's decode step, over generations sampled under
 * the grammar (a fresh grammar each, so its caches start cold as in a request). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/bench.h"
#include "specdec/context.h"
#include "specdec/grammar.h"
#include "specdec/sample.h"
#include "specdec/tokenizer.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_bench_grammar(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_BENCH_GRAMMAR, &o, 0);
    if (prc) return prc == 1 ? 0 : 2;
    if (!o.model) return cli_usage_error("bench-grammar: -m MODEL is required (see specdec bench-grammar --help)");
    if (o.grammar_file && o.json_schema) return cli_usage_error("bench-grammar: --grammar and --json-schema exclude each other");
    char *text = NULL;
    size_t tlen = 0;
    int is_schema = 0;
    int rc = cli_grammar_text(&o, &text, &tlen, &is_schema);
    if (rc) return rc;
    sd_model *m = NULL;
    if ((rc = cli_load_model(o.model, o.tokenizer, NULL, &m))) {
        free(text);
        return rc;
    }
    /* -z also names the vocabulary the grammar masks: a random-weight GGUF carries a synthetic
     * vocabulary, so a real tokenizer of the same size stands in for it */
    const sd_tokenizer *tok = sd_model_tokenizer(m);
    sd_tokenizer *own = NULL;
    if (o.tokenizer) {
        sd_status ts = sd_tokenizer_load(o.tokenizer, &own);
        if (ts != SD_OK) {
            sd_model_free(m);
            free(text);
            return cli_error_status(ts);
        }
        if (sd_tokenizer_n_vocab(own) != sd_tokenizer_n_vocab(tok)) {
            fprintf(stderr, "error: bench-grammar: %s has %d tokens, the model %d\n", o.tokenizer, sd_tokenizer_n_vocab(own),
                    sd_tokenizer_n_vocab(tok));
            sd_tokenizer_free(own);
            sd_model_free(m);
            free(text);
            return 1;
        }
        tok = own;
    }
    sd_grammar_vocab *v = NULL;
    sd_grammar *g = NULL;
    sd_context *ctx = NULL;
    double t0 = sd_now();
    sd_status st = sd_grammar_vocab_create(tok, &v);
    const double t_vocab = sd_now() - t0;
    if (st == SD_OK) st = cli_grammar_compile(&o, text, tlen, is_schema, &g); /* checked once before the timed runs */
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = o.n_predict + 64;
    cp.n_threads = o.threads;
    if (st == SD_OK) st = sd_context_create(m, &cp, &ctx);
    if (st != SD_OK) {
        rc = cli_error_status(st);
        goto out;
    }
    sd_grammar_free(g);
    g = NULL;
    const int nv = sd_grammar_vocab_n(v), reps = o.reps, n_max = o.n_predict;
    float *logits = malloc(sizeof(float) * (size_t)nv), *probs = malloc(sizeof(float) * (size_t)nv);
    uint64_t *mask = malloc(sizeof(uint64_t) * sd_grammar_mask_words(v));
    double *t_mask = malloc(sizeof(double) * (size_t)reps * (size_t)n_max);
    double *t_fwd = malloc(sizeof(double) * (size_t)reps * (size_t)n_max);
    double *t_comp = malloc(sizeof(double) * (size_t)reps);
    int32_t *prompt = NULL, n_prompt = 0;
    const char *ptext = "The answer as JSON: ";
    if (!logits || !probs || !mask || !t_mask || !t_fwd || !t_comp ||
        sd_tokenizer_tokenize_alloc(tok, ptext, strlen(ptext), 1, 0, &prompt, &n_prompt) != SD_OK) {
        rc = cli_error_status(SD_ERR_NOMEM);
        goto out_free;
    }
    printf("model:      %s (vocab %d%s%s)\n", sd_model_path(m), nv, own ? ", masked with the tokenizer " : "",
           own ? o.tokenizer : "");
    printf("grammar:    %s\n", o.grammar_file ? o.grammar_file : o.json_schema ? "JSON Schema" : "any JSON object");
    printf("index:      %.1f ms to build the vocabulary index (once per tokenizer)\n", t_vocab * 1e3);
    int n = 0, finished = 0;
    double sum_mask = 0, sum_fwd = 0;
    for (int r = 0; r < reps; r++) {
        t0 = sd_now();
        st = cli_grammar_compile(&o, text, tlen, is_schema, &g);
        t_comp[r] = sd_now() - t0;
        sd_grammar_matcher *gm = NULL;
        if (st == SD_OK) st = sd_grammar_matcher_create(g, v, &gm);
        if (st == SD_OK) st = sd_context_seq_truncate(ctx, 0, 0);
        if (st == SD_OK) st = sd_context_forward(ctx, 0, prompt, n_prompt, logits, 0);
        sd_rng rng;
        sd_rng_seed(&rng, o.sampling.seed + (uint64_t)r);
        sd_sampler_params sp = o.sampling;
        if (sp.temperature == 0) sp.temperature = 1; /* a random model's greedy text repeats itself */
        for (int i = 0; i < n_max && st == SD_OK; i++) {
            t0 = sd_now();
            st = sd_grammar_matcher_mask(gm, mask);
            const double dm = sd_now() - t0;
            if (st != SD_OK) break;
            sd_grammar_mask_logits(mask, logits, nv, -1e30f);
            if ((st = sd_sample_probs(&sp, logits, nv, probs, NULL)) != SD_OK) break;
            int32_t id = sd_sample_draw(probs, nv, &rng);
            if ((st = sd_grammar_matcher_accept(gm, id)) != SD_OK) break;
            t_mask[n] = dm;
            sum_mask += dm;
            if (sd_tokenizer_is_eog(tok, id)) {
                t_fwd[n++] = NAN;
                finished++;
                break;
            }
            t0 = sd_now();
            st = sd_context_forward(ctx, 0, &id, 1, logits, 0);
            t_fwd[n] = sd_now() - t0;
            sum_fwd += t_fwd[n++];
        }
        sd_grammar_matcher_free(gm);
        sd_grammar_free(g);
        g = NULL;
    }
    if (st != SD_OK) {
        rc = cli_error_status(st);
        goto out_free;
    }
    int nf = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(t_fwd[i])) t_fwd[nf++] = t_fwd[i];
    qsort(t_mask, (size_t)n, sizeof *t_mask, cmp_d);
    qsort(t_fwd, (size_t)nf, sizeof *t_fwd, cmp_d);
    qsort(t_comp, (size_t)reps, sizeof *t_comp, cmp_d);
    const double mean_mask = sum_mask / n, med_fwd = nf ? t_fwd[nf / 2] : NAN;
    printf("compile:    %.2f ms median over %d grammars\n", t_comp[reps / 2] * 1e3, reps);
    printf("runs:       %d generations of at most %d tokens (temperature %g, seed %llu+): %d tokens, %d ended by the grammar\n",
           reps, n_max, o.sampling.temperature == 0 ? 1.0 : (double)o.sampling.temperature,
           (unsigned long long)o.sampling.seed, n, finished);
    printf("mask:       %.3f ms per token (mean; median %.3f, p90 %.3f, max %.3f): cold caches included\n", mean_mask * 1e3,
           t_mask[n / 2] * 1e3, t_mask[(n * 9) / 10] * 1e3, t_mask[n - 1] * 1e3);
    printf("decode:     %.3f ms per step (median; mean %.3f)\n", med_fwd * 1e3, nf ? sum_fwd / nf * 1e3 : NAN);
    printf("share:      mask = %.1f%% of a decode step (mean mask / median step)\n", 100 * mean_mask / med_fwd);
out_free:
    free(prompt);
    free(logits);
    free(probs);
    free(mask);
    free(t_mask);
    free(t_fwd);
    free(t_comp);
out:
    sd_context_free(ctx);
    sd_grammar_free(g);
    sd_grammar_vocab_free(v);
    sd_model_free(m);
    sd_tokenizer_free(own);
    free(text);
    return rc;
}
