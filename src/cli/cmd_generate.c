/* `specdec generate`: plain or speculative generation with streamed text, statistics,
 * an optional plain-decode comparison run and a JSON statistics file. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/chat.h"
#include "specdec/quant.h"
#include "specdec/spec.h"
#include "specdec/stats.h"

typedef struct {
    const sd_tokenizer *tok;
    int32_t prev;
    int stream;
    char *text; /* accumulated output */
    size_t len, cap;
    int ids;         /* --ids: ids instead of text */
    char *piece;     /* sd_tokenizer_max_piece_len() + 16 bytes: any token's text, or an id */
} printer;

static int on_token(int32_t tok, void *user) {
    printer *pr = user;
    const size_t cap = (size_t)sd_tokenizer_max_piece_len(pr->tok) + 16;
    if (!pr->piece && !(pr->piece = malloc(cap))) return 1;
    char *buf = pr->piece;
    int n = pr->ids ? snprintf(buf, cap, pr->len ? " %d" : "%d", (int)tok)
                    : sd_tokenizer_decode(pr->tok, pr->prev, tok, buf, cap);
    pr->prev = tok;
    if (n <= 0) return 0;
    if (pr->len + (size_t)n + 1 > pr->cap) {
        size_t nc = pr->cap ? pr->cap * 2 : 4096;
        while (nc < pr->len + (size_t)n + 1) nc *= 2;
        char *t = realloc(pr->text, nc);
        if (!t) return 1;
        pr->text = t;
        pr->cap = nc;
    }
    memcpy(pr->text + pr->len, buf, (size_t)n);
    pr->len += (size_t)n;
    pr->text[pr->len] = 0;
    if (pr->stream) {
        fwrite(buf, 1, (size_t)n, stdout);
        fflush(stdout);
    }
    return 0;
}

static cJSON *stats_json(const sd_spec_stats *s) {
    cJSON *o = cJSON_CreateObject();
    if (o && sd_spec_stats_to_json(s, o) != SD_OK) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void print_stats(const sd_spec_stats *s, int spec, const char *mode) {
    double decode_t = s->t_total - s->t_prefill;
    fprintf(stderr, "\n--- %s ---\n", spec ? "speculative decoding" : "plain decoding");
    fprintf(stderr, "prompt tokens:       %d\n", s->n_prompt);
    fprintf(stderr, "generated tokens:    %d (stopped: %s)\n", s->n_generated, sd_stop_reason_name(s->stop_reason));
    fprintf(stderr, "time to first token: %.2f ms (prefill %.1f tokens/s)\n", s->t_first * 1e3,
            s->t_prefill > 0 ? s->n_prompt / s->t_prefill : 0.0);
    fprintf(stderr, "decode:              %.1f tokens/s (%d tokens in %.2f ms)\n", sd_spec_decode_tps(s),
            s->n_generated > 0 ? s->n_generated - 1 : 0, decode_t * 1e3);
    if (spec) {
        fprintf(stderr, "draft length k:      %d at most (%s)\n", s->k, mode);
        fprintf(stderr, "verify passes:       %d (+%d single target steps)\n", s->n_verify, s->n_target_steps);
        fprintf(stderr, "acceptance rate:     %.1f%% (%d of %d drafted)\n", 100 * sd_spec_acceptance(s),
                s->n_accepted, s->n_drafted);
        fprintf(stderr, "mean accepted len:   %.2f (1 + accepted per verify pass)\n", sd_spec_mean_accepted(s));
        fprintf(stderr, "tokens per pass:     %.2f\n", sd_spec_tokens_per_pass(s));
        if (s->n_sources > 1)
            for (int i = 0; i < s->n_sources; i++)
                fprintf(stderr, "drafts by %-10s %d proposed, %d accepted\n", s->sources[i], s->drafted_by[i],
                        s->accepted_by[i]);
        fprintf(stderr, "acceptance by pos:  ");
        for (int i = 0; i < s->k && i < SD_MAX_DRAFT; i++)
            fprintf(stderr, " %d:%.0f%%", i + 1, s->drafted_at[i] ? 100.0 * s->accepted_at[i] / s->drafted_at[i] : 0.0);
        fprintf(stderr, "\n");
    }
    double other = s->t_total - s->t_prefill - s->t_draft - s->t_verify - s->t_sample;
    fprintf(stderr, "time:                total %.2f ms = prefill %.2f + draft %.2f + target %.2f + sampling %.2f + other %.2f\n",
            s->t_total * 1e3, s->t_prefill * 1e3, (s->t_draft) * 1e3, s->t_verify * 1e3,
            s->t_sample * 1e3, other * 1e3);
    fprintf(stderr, "kv cache:            target %zu bytes%s", s->kv_bytes_target, spec ? "" : "\n");
    if (spec) fprintf(stderr, ", draft %zu bytes\n", s->kv_bytes_draft);
}

int cmd_generate(int argc, char **argv) {
    cli_opts o;
    cli_opts_default(&o);
    int pr_rc = cli_parse(argc, argv, CMD_GENERATE, &o, 0);
    if (pr_rc) return pr_rc == 1 ? 0 : 2;
    const char *model = o.model, *draft = o.draft, *prompt = o.prompt;
    const int n_predict = o.n_predict, k = o.draft_max, threads = o.threads, n_ctx = o.n_ctx, compare = o.compare;
    const int ngram = o.ngram, tree = o.tree, draft_type = o.draft_type, print_ids = o.ids;
    const sd_sampler_params sp = o.sampling;
    cli_prompt_opts po = {o.chat, o.system, o.chat_template, o.special};
    if (!model) return cli_usage_error("generate: -m MODEL is required (see specdec generate --help)");
    if (prompt && o.prompt_file) return cli_usage_error("generate: give -p or -f, not both");
    if (o.draft_fixed && o.p_min_set) return cli_usage_error("generate: give --draft-fixed or --draft-p-min, not both");
    if (draft_type >= 0 && !draft) draft = model; /* --draft-type alone: self-speculation */
    if (compare && !draft && !ngram) return cli_usage_error("generate: --compare needs a drafter (-md or --draft ngram)");
    if (tree && !draft) return cli_usage_error("generate: --draft-tree needs a draft model (-md)");
    if (tree && o.p_min_set)
        return cli_usage_error("generate: --draft-p-min judges each draft of a chain; a --draft-tree is --draft-max deep");
    if (tree && ngram) return cli_usage_error("generate: --draft-tree and --draft ngram do not combine");
    if (o.ngram_min > o.ngram_max)
        return cli_usage_error("generate: --ngram-min %d exceeds --ngram-max %d", o.ngram_min, o.ngram_max);
    if (!po.chat && (po.system || po.template_name))
        return cli_usage_error("generate: %s needs --chat", po.system ? "--system" : "--chat-template");

    char *file_text = NULL;
    if (o.prompt_file) {
        size_t flen;
        sd_status fs = sd_file_read(o.prompt_file, (size_t)1 << 30, &file_text, &flen);
        if (fs != SD_OK) return cli_error_status(fs);
        prompt = file_text;
    }
    if (!prompt) prompt = "Once upon a time";

    cli_install_sigint();
    int rc = 0;
    sd_model *tm = NULL, *dm = NULL;
    sd_spec *spec = NULL, *plain = NULL;
    sd_grammar *grammar = NULL;
    sd_grammar_vocab *gvocab = NULL;
    int32_t *ids = NULL;
    printer pr = {0};
    cJSON *root = NULL;

    if ((rc = cli_load_pair(&o, &tm, &dm))) goto done;

    const sd_tokenizer *tok = sd_model_tokenizer(tm);
    int ctx = n_ctx > 0 ? n_ctx : sd_model_hparams(tm)->ctx_len;
    if (!n_ctx && dm && sd_model_hparams(dm)->ctx_len < ctx) ctx = sd_model_hparams(dm)->ctx_len;
    size_t plen = strlen(prompt);
    int n_ids = 0;
    if ((rc = cli_prompt_ids(tok, model, &po, prompt, &ids, &n_ids))) goto done;
    sd_status st;

    sd_spec_params p;
    cli_spec_params(&o, &p);
    p.n_ctx = ctx;
    p.stop_flag = &cli_interrupted;
    if ((rc = cli_grammar(&o, &grammar))) goto done;
    if (grammar) {
        if (tree) {
            rc = cli_usage_error("generate: --draft-tree does not combine with --grammar/--json-schema (chains only)");
            goto done;
        }
        if ((st = sd_grammar_vocab_create(tok, &gvocab)) != SD_OK) {
            rc = cli_error_status(st);
            goto done;
        }
        p.grammar = grammar;
        p.grammar_vocab = gvocab;
    }
    if (n_ids >= ctx) {
        rc = cli_usage_error("prompt of %d tokens does not fit the context of %d tokens (use a shorter prompt or a larger -c)",
                             n_ids, ctx);
        goto done;
    }
    if (o.n_predict_set && n_ids + n_predict > ctx) {
        rc = cli_usage_error("cannot generate %d tokens: the %d-token prompt leaves room for %d in the context of %d (lower -n or raise -c)",
                             n_predict, n_ids, ctx - n_ids, ctx);
        goto done;
    }
    if ((st = sd_spec_create(tm, dm, &p, &spec)) != SD_OK) { rc = cli_error_status(st); goto done; }

    if (compare) {
        /* Warm both paths (page faults on the mapped weights, thread pools) so neither
         * timed run pays one-time costs the other does not. */
        sd_spec_params wp = p;
        wp.n_predict = 8;
        sd_spec *w = NULL;
        if (sd_spec_create(tm, dm, &wp, &w) == SD_OK) sd_spec_generate(w, ids, n_ids, NULL, NULL, NULL);
        sd_spec_free(w);
    }
    pr.tok = tok;
    /* --compare: the plain run prints nothing while it runs, so the speculative one may not either
     * (a write per token is a decode step of a tiny model) */
    pr.stream = !o.no_stream && !compare;
    pr.ids = print_ids;
    if (!print_ids && !po.chat) fwrite(prompt, 1, plen, stdout); /* echo the prompt, then the continuation */
    pr.prev = ids[n_ids - 1];
    fflush(stdout);
    sd_spec_stats stats;
    st = sd_spec_generate(spec, ids, n_ids, on_token, &pr, &stats);
    if (!pr.stream && pr.text) fputs(pr.text, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (st != SD_OK) { rc = cli_error_status(st); goto done; }
    const char *mode = tree ? "tree" : sd_draft_mode_name(p.draft_mode); /* a tree's depth is fixed */
    print_stats(&stats, dm != NULL || ngram, mode);
    if (stats.stop_reason == SD_STOP_CONTEXT)
        fprintf(stderr, "note: generation stopped because the context of %d tokens is full\n", ctx);
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "target", sd_model_path(tm));
    if (dm) cJSON_AddStringToObject(root, "draft", sd_model_path(dm));
    cJSON_AddItemToObject(root, dm || ngram ? "speculative" : "plain", stats_json(&stats));

    if (compare && !cli_interrupted) {
        sd_spec_stats ps;
        printer pp = {tok, ids[n_ids - 1], 0, NULL, 0, 0, print_ids, NULL};
        p.draft_max = 0;
        p.ngram = 0;
        p.tree_budget = 0;
        if ((st = sd_spec_create(tm, NULL, &p, &plain)) != SD_OK ||
            (st = sd_spec_generate(plain, ids, n_ids, on_token, &pp, &ps)) != SD_OK) {
            free(pp.text);
            free(pp.piece);
            rc = cli_error_status(st);
            goto done;
        }
        print_stats(&ps, 0, mode);
        double ts = sd_spec_decode_tps(&stats), tp = sd_spec_decode_tps(&ps);
        int same = pp.text && pr.text ? !strcmp(pp.text, pr.text) : pp.text == pr.text;
        fprintf(stderr, "\n--- comparison ---\n");
        fprintf(stderr, "speculative %.1f tokens/s vs plain %.1f tokens/s: speedup %.2fx at %.1f%% acceptance (k=%d)\n",
                ts, tp, tp > 0 ? ts / tp : 0.0, 100 * sd_spec_acceptance(&stats), k);
        /* greedy and coupled sampling promise plain decoding's text; rejection sampling only its
         * distribution */
        const int promised = sp.temperature == 0 || sp.mode == SD_SAMPLING_COUPLED;
        if (promised)
            fprintf(stderr, "%s outputs identical: %s\n", sp.temperature == 0 ? "greedy" : "coupled sampling",
                    same ? "yes" : "NO (this is a bug)");
        /* the verify pass's price in this run's own decode steps: what decides whether speculation
         * pays (bench-decode measures it per pass size) */
        const int spec_passes = stats.n_verify + stats.n_target_steps, plain_steps = ps.n_target_steps;
        const double t_pass = spec_passes > 0 ? stats.t_verify / spec_passes : 0.0;
        const double t_step = plain_steps > 0 ? ps.t_verify / plain_steps : 0.0;
        if (t_pass > 0 && t_step > 0)
            fprintf(stderr, "target pass:         %.3f ms (%.2f tokens on average) = %.2f plain decode steps of %.3f ms\n",
                    t_pass * 1e3, (double)(stats.n_drafted + spec_passes) / spec_passes, t_pass / t_step, t_step * 1e3);
        double tb = (double)sd_model_bytes_per_token(tm);
        const double cached = cli_cache_bytes(threads, NULL); /* 0: unknown, and then no claim */
        if (tp > 0 && ts < tp && tb < cached) /* weights that fit in L2 + L3 */
            fprintf(stderr,
                    "note: the target reads only %.1f MB of weights per token, which stay in the CPU caches: its\n"
                    "      decode step is compute-bound, so a pass of several tokens costs several steps (the\n"
                    "      'target pass' line above) and speculation rarely wins; it pays off for targets whose\n"
                    "      decode streams weights from memory (scripts/demo.sh runs cost twins of stories260K and\n"
                    "      stories-draft: the same predictions at the cost of 110M/15M shapes; specdec mkmodel --twin).\n",
                    tb / 1e6);
        cJSON_AddItemToObject(root, "plain", stats_json(&ps));
        cJSON_AddNumberToObject(root, "speedup", tp > 0 ? ts / tp : 0.0);
        if (t_pass > 0 && t_step > 0) cJSON_AddNumberToObject(root, "target_pass_steps", t_pass / t_step);
        if (promised) cJSON_AddBoolToObject(root, sp.temperature == 0 ? "greedy_identical" : "coupled_identical", same);
        free(pp.text);
        free(pp.piece);
        if (promised && !same) rc = 1;
    }
    if (o.stats_json) {
        char *js = cJSON_Print(root);
        FILE *f = js ? fopen(o.stats_json, "w") : NULL;
        if (!f || fputs(js, f) < 0 || fclose(f) != 0) {
            rc = cli_usage_error("cannot write statistics to %s", o.stats_json);
        }
        free(js);
    }
    if (cli_interrupted) rc = 130;
done:
    cJSON_Delete(root);
    free(pr.text);
    free(pr.piece);
    free(ids);
    free(file_text);
    sd_spec_free(plain);
    sd_spec_free(spec);
    sd_grammar_free(grammar);
    sd_grammar_vocab_free(gvocab);
    sd_model_free(dm);
    sd_model_free(tm);
    return rc;
}
