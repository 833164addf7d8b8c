/* `specdec generate`: plain or speculative generation with streamed text, statistics,
 * an optional plain-decode comparison run and a JSON statistics file. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "specdec/convert.h"
#include "specdec/spec.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: specdec generate -m TARGET [-md DRAFT] [options]\n"
            "\n"
            "Generates text from TARGET. With -md it decodes speculatively: DRAFT proposes\n"
            "--draft-max tokens, TARGET verifies them in one batched pass. Greedy output is\n"
            "identical to plain decoding; sampled output has the same distribution.\n"
            "\n"
            "models (a path, or a name looked up in $SPECDEC_MODEL_PATH, ./models, ../shared/models):\n"
            "  -m,  --model PATH        target model (.gguf or llama2.c .bin)\n"
            "  -md, --draft PATH        draft model; without it, plain decoding\n"
            "  -z,  --tokenizer PATH    tokenizer.bin for a llama2.c target (default: beside it)\n"
            "  -zd, --draft-tokenizer PATH  tokenizer for a llama2.c draft (default: beside it, else the target's)\n"
            "       --draft-type T      quantise the draft at load, in memory (q4_0, q8_0, q4_k, ...); with\n"
            "                           -md naming the target itself (or no -md) the target drafts for itself\n"
            "\n"
            "generation:\n"
            "  -p,  --prompt TEXT       prompt (default \"Once upon a time\")\n"
            "  -f,  --file PATH         read the prompt from a file\n"
            "  -n,  --n-predict N       tokens to generate (default 128)\n"
            "  -k,  --draft-max K       draft tokens per verify pass, 1..%d (default 4)\n"
            "       --temp T            temperature; 0 = greedy (default 0)\n"
            "       --top-k K           keep the K most likely tokens; 0 = off (default 0)\n"
            "       --top-p P           nucleus sampling mass in (0, 1]; 1 = off (default 1)\n"
            "       --seed S            RNG seed: xoshiro256** seeded by SplitMix64 (default 42)\n"
            "       --ignore-eos        keep generating after the end-of-sequence token\n"
            "\n"
            "runtime:\n"
            "  -t,  --threads N         threads (default: online CPUs)\n"
            "  -c,  --ctx N             context size (default: the smaller model context)\n"
            "       --kv-type T         KV cache elements of both models: f32 (default) or f16 (half the\n"
            "                           cache memory and attention reads; needs head_dim >= 16)\n"
            "       --compare           also run plain decoding of TARGET and print the speedup\n"
            "       --stats-json FILE   write the run statistics as JSON\n"
            "       --no-stream         print the text only at the end\n"
            "  -h,  --help              this help\n"
            "\n"
            "Statistics go to stderr, text to stdout. Exit status 0 on success, 1 on a runtime\n"
            "error, 2 on a usage error, 130 when interrupted (Ctrl-C stops at the next token).\n",
            SD_MAX_DRAFT);
}

typedef struct {
    const sd_tokenizer *tok;
    int32_t prev;
    int stream;
    char *text; /* accumulated output */
    size_t len, cap;
} printer;

static int on_token(int32_t tok, void *user) {
    printer *pr = user;
    char buf[256];
    int n = sd_tokenizer_decode(pr->tok, pr->prev, tok, buf, sizeof buf);
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
    cJSON_AddNumberToObject(o, "prompt_tokens", s->n_prompt);
    cJSON_AddNumberToObject(o, "generated_tokens", s->n_generated);
    cJSON_AddStringToObject(o, "stop_reason", s->stop_reason);
    cJSON_AddNumberToObject(o, "draft_max", s->k);
    cJSON_AddNumberToObject(o, "verify_passes", s->n_verify);
    cJSON_AddNumberToObject(o, "target_single_steps", s->n_target_steps);
    cJSON_AddNumberToObject(o, "drafted", s->n_drafted);
    cJSON_AddNumberToObject(o, "accepted", s->n_accepted);
    cJSON_AddNumberToObject(o, "acceptance_rate", sd_spec_acceptance(s));
    cJSON_AddNumberToObject(o, "tokens_per_pass", sd_spec_tokens_per_pass(s));
    cJSON *pos = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int i = 0; i < s->k && i < SD_MAX_DRAFT; i++)
        cJSON_AddItemToArray(pos, cJSON_CreateNumber(s->drafted_at[i] ? (double)s->accepted_at[i] / s->drafted_at[i] : 0));
    cJSON_AddNumberToObject(o, "time_to_first_token_s", s->t_prefill);
    cJSON_AddNumberToObject(o, "prefill_tokens_per_s", s->t_prefill > 0 ? s->n_prompt / s->t_prefill : 0);
    cJSON_AddNumberToObject(o, "decode_tokens_per_s", sd_spec_decode_tps(s));
    cJSON_AddNumberToObject(o, "time_draft_s", s->t_draft);
    cJSON_AddNumberToObject(o, "time_verify_s", s->t_verify);
    cJSON_AddNumberToObject(o, "time_sample_s", s->t_sample);
    cJSON_AddNumberToObject(o, "time_total_s", s->t_total);
    cJSON_AddNumberToObject(o, "kv_bytes_target", (double)s->kv_bytes_target);
    cJSON_AddNumberToObject(o, "kv_bytes_draft", (double)s->kv_bytes_draft);
    return o;
}

static void print_stats(const sd_spec_stats *s, int spec) {
    double decode_t = s->t_total - s->t_prefill;
    fprintf(stderr, "\n--- %s ---\n", spec ? "speculative decoding" : "plain decoding");
    fprintf(stderr, "prompt tokens:       %d\n", s->n_prompt);
    fprintf(stderr, "generated tokens:    %d (stopped: %s)\n", s->n_generated, s->stop_reason);
    fprintf(stderr, "time to first token: %.2f ms (prefill %.1f tokens/s)\n", s->t_prefill * 1e3,
            s->t_prefill > 0 ? s->n_prompt / s->t_prefill : 0.0);
    fprintf(stderr, "decode:              %.1f tokens/s (%d tokens in %.2f ms)\n", sd_spec_decode_tps(s),
            s->n_generated > 0 ? s->n_generated - 1 : 0, decode_t * 1e3);
    if (spec) {
        fprintf(stderr, "draft length k:      %d\n", s->k);
        fprintf(stderr, "verify passes:       %d (+%d single target steps)\n", s->n_verify, s->n_target_steps);
        fprintf(stderr, "acceptance rate:     %.1f%% (%d of %d drafted)\n", 100 * sd_spec_acceptance(s),
                s->n_accepted, s->n_drafted);
        fprintf(stderr, "tokens per pass:     %.2f\n", sd_spec_tokens_per_pass(s));
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
    const char *model = NULL, *draft = NULL, *tokp = NULL, *dtokp = NULL, *prompt = NULL;
    const char *prompt_file = NULL, *stats_path = NULL;
    int n_predict = 128, k = 4, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n_ctx = 0;
    int compare = 0, stream = 1, ignore_eos = 0;
    int n_set = 0, draft_type = -1;
    sd_sampler_params sp = sd_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                        \
    do {                                                               \
        if (!v) return cli_usage_error("%s needs a value", a);         \
        i++;                                                           \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEEDV(); model = v; }
        else if (!strcmp(a, "-md") || !strcmp(a, "--draft")) { NEEDV(); draft = v; }
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) { NEEDV(); tokp = v; }
        else if (!strcmp(a, "-zd") || !strcmp(a, "--draft-tokenizer")) { NEEDV(); dtokp = v; }
        else if (!strcmp(a, "--draft-type")) {
            NEEDV();
            if ((draft_type = sd_type_from_name(v)) < 0)
                return cli_usage_error("--draft-type must be f32, f16, bf16, q8_0, q4_0, q5_0, q4_k or q6_k, got '%s'", v);
        }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEEDV(); prompt = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEEDV(); prompt_file = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            NEEDV();
            if (cli_parse_int(a, v, 1, 1 << 24, &n_predict)) return 2;
            n_set = 1;
        } else if (!strcmp(a, "-k") || !strcmp(a, "--draft-max")) {
            NEEDV();
            if (cli_parse_int(a, v, 1, SD_MAX_DRAFT, &k)) return 2;
        } else if (!strcmp(a, "--temp")) {
            NEEDV();
            if (cli_parse_float(a, v, 0, 1e6, &sp.temperature)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            NEEDV();
            if (cli_parse_int(a, v, 0, 1 << 24, &sp.top_k)) return 2;
        } else if (!strcmp(a, "--top-p")) {
            NEEDV();
            if (cli_parse_float(a, v, 0, 1, &sp.top_p)) return 2;
            if (sp.top_p <= 0) return cli_usage_error("--top-p must be in (0, 1], got '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            NEEDV();
            if (cli_parse_u64(a, v, &sp.seed)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            NEEDV();
            if (cli_parse_int(a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            NEEDV();
            if (cli_parse_int(a, v, 2, 1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            NEEDV();
            if (cli_parse_kv_type(a, v)) return 2;
        } else if (!strcmp(a, "--compare")) compare = 1;
        else if (!strcmp(a, "--stats-json")) { NEEDV(); stats_path = v; }
        else if (!strcmp(a, "--no-stream")) stream = 0;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else return cli_usage_error("generate: unknown option '%s' (see specdec generate --help)", a);
#undef NEEDV
    }
    if (!model) return cli_usage_error("generate: -m MODEL is required (see specdec generate --help)");
    if (prompt && prompt_file) return cli_usage_error("generate: give -p or -f, not both");
    if (draft_type >= 0 && !draft) draft = model; /* --draft-type alone: self-speculation */
    if (compare && !draft) return cli_usage_error("generate: --compare needs a draft model (-md)");

    char *file_text = NULL;
    if (prompt_file) {
        FILE *f = fopen(prompt_file, "rb");
        if (!f) return cli_usage_error("cannot open prompt file %s", prompt_file);
        size_t cap = 1 << 16, len = 0;
        file_text = malloc(cap);
        size_t r;
        while (file_text && (r = fread(file_text + len, 1, cap - len - 1, f)) > 0) {
            len += r;
            if (len + 1 == cap) {
                char *t = realloc(file_text, cap *= 2);
                if (!t) { free(file_text); file_text = NULL; }
                file_text = t;
            }
        }
        fclose(f);
        if (!file_text) return cli_usage_error("out of memory reading %s", prompt_file);
        file_text[len] = 0;
        prompt = file_text;
    }
    if (!prompt) prompt = "Once upon a time";

    sd_set_threads(threads);
    cli_install_sigint();
    int rc = 0;
    sd_model *tm = NULL, *dm = NULL;
    sd_spec *spec = NULL, *plain = NULL;
    int32_t *ids = NULL;
    printer pr = {0};
    cJSON *root = NULL;

    if ((rc = cli_load_model(model, tokp, NULL, n_ctx, &tm))) goto done;
    /* A llama2.c draft without a tokenizer beside it shares the target's. */
    if (draft && !(draft_type >= 0 && !strcmp(draft, model)) &&
        (rc = cli_load_model(draft, dtokp, sd_model_tokenizer_path(tm), n_ctx, &dm)))
        goto done;
    if (draft_type >= 0) { /* the draft (or the target itself) quantised in memory */
        sd_model_params qp = sd_model_default_params();
        qp.n_ctx = n_ctx;
        qp.kv_type = cli_kv_type;
        sd_model *q = NULL;
        sd_status qs = sd_model_quantize(dm ? dm : tm, (sd_type)draft_type, &qp, &q);
        if (qs != SD_OK) { rc = cli_error_status(qs); goto done; }
        sd_model_free(dm);
        dm = q;
    }

    const sd_tokenizer *tok = sd_model_tokenizer(tm);
    int cap = sd_model_n_ctx(tm) + 8;
    size_t plen = strlen(prompt);
    if ((size_t)cap < plen + 8) cap = (int)plen + 8; /* every byte can become at most one token */
    ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids) { rc = cli_usage_error("out of memory"); goto done; }
    int n_ids = 0;
    sd_status st = sd_tokenizer_encode(tok, prompt, plen, sd_tokenizer_add_bos(tok), ids, cap, &n_ids);
    if (st != SD_OK) { rc = cli_error_status(st); goto done; }
    if (n_ids == 0) { rc = cli_usage_error("the prompt encodes to no tokens"); goto done; }

    sd_spec_params p = sd_spec_default_params();
    p.n_predict = n_predict;
    p.draft_max = k;
    p.sampling = sp;
    p.stop_at_eos = !ignore_eos;
    p.n_ctx = 0;
    p.stop_flag = &cli_interrupted;
    if ((st = sd_spec_create(tm, dm, &p, &spec)) != SD_OK) { rc = cli_error_status(st); goto done; }
    int ctx = sd_model_n_ctx(tm);
    if (dm && sd_model_n_ctx(dm) < ctx) ctx = sd_model_n_ctx(dm);
    if (n_ids >= ctx) {
        rc = cli_usage_error("prompt of %d tokens does not fit the context of %d tokens (use a shorter prompt or a larger -c)",
                             n_ids, ctx);
        goto done;
    }
    if (n_set && n_ids + n_predict > ctx) {
        rc = cli_usage_error("cannot generate %d tokens: the %d-token prompt leaves room for %d in the context of %d (lower -n or raise -c)",
                             n_predict, n_ids, ctx - n_ids, ctx);
        goto done;
    }

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
    pr.prev = -1;
    pr.stream = stream;
    fwrite(prompt, 1, plen, stdout); /* echo the prompt, then the continuation */
    pr.prev = ids[n_ids - 1];
    fflush(stdout);
    sd_spec_stats stats;
    st = sd_spec_generate(spec, ids, n_ids, on_token, &pr, &stats);
    if (!stream && pr.text) fputs(pr.text, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (st != SD_OK) { rc = cli_error_status(st); goto done; }
    print_stats(&stats, dm != NULL);
    if (!strcmp(stats.stop_reason, "context"))
        fprintf(stderr, "note: generation stopped because the context of %d tokens is full\n", ctx);
    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "target", sd_model_path(tm));
    if (dm) cJSON_AddStringToObject(root, "draft", sd_model_path(dm));
    cJSON_AddItemToObject(root, dm ? "speculative" : "plain", stats_json(&stats));

    if (compare && !cli_interrupted) {
        sd_spec_stats ps;
        printer pp = {tok, ids[n_ids - 1], 0, NULL, 0, 0};
        p.draft_max = 0;
        if ((st = sd_spec_create(tm, NULL, &p, &plain)) != SD_OK ||
            (st = sd_spec_generate(plain, ids, n_ids, on_token, &pp, &ps)) != SD_OK) {
            free(pp.text);
            rc = cli_error_status(st);
            goto done;
        }
        print_stats(&ps, 0);
        double ts = sd_spec_decode_tps(&stats), tp = sd_spec_decode_tps(&ps);
        int same = pp.text && pr.text ? !strcmp(pp.text, pr.text) : pp.text == pr.text;
        fprintf(stderr, "\n--- comparison ---\n");
        fprintf(stderr, "speculative %.1f tokens/s vs plain %.1f tokens/s: speedup %.2fx at %.1f%% acceptance (k=%d)\n",
                ts, tp, tp > 0 ? ts / tp : 0.0, 100 * sd_spec_acceptance(&stats), k);
        if (sp.temperature == 0)
            fprintf(stderr, "greedy outputs identical: %s\n", same ? "yes" : "NO (this is a bug)");
        double tb = (double)sd_model_bytes_per_token(tm);
        if (tp > 0 && ts < tp && tb < cli_cache_bytes(threads)) /* weights that fit in L2 + L3 */
            fprintf(stderr,
                    "note: the target reads only %.1f MB of weights per token, which stay in the CPU caches: its\n"
                    "      decode step is compute-bound, so verifying k+1 tokens costs about k+1 steps and\n"
                    "      speculation cannot win; it pays off for targets whose decode streams weights from\n"
                    "      memory (scripts/demo.sh runs cost twins of stories260K and stories-draft: the same\n"
                    "      predictions at the cost of 110M/15M shapes; specdec mkmodel --twin).\n",
                    tb / 1e6);
        cJSON_AddItemToObject(root, "plain", stats_json(&ps));
        cJSON_AddNumberToObject(root, "speedup", tp > 0 ? ts / tp : 0.0);
        if (sp.temperature == 0) cJSON_AddBoolToObject(root, "greedy_identical", same);
        free(pp.text);
        if (sp.temperature == 0 && !same) rc = 1;
    }
    if (stats_path) {
        char *js = cJSON_Print(root);
        FILE *f = js ? fopen(stats_path, "w") : NULL;
        if (!f || fputs(js, f) < 0 || fclose(f) != 0) {
            rc = cli_usage_error("cannot write statistics to %s", stats_path);
        }
        free(js);
    }
    if (cli_interrupted) rc = 130;
done:
    cJSON_Delete(root);
    free(pr.text);
    free(ids);
    free(file_text);
    sd_spec_free(plain);
    sd_spec_free(spec);
    sd_model_free(dm);
    sd_model_free(tm);
    return rc;
}
