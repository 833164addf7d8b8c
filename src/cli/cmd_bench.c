/* `specdec bench CONFIG`: speculative against plain decoding for the pair a JSON config names,
 * over a sweep of draft lengths, with the cost model's prediction, a table, JSON and SVG. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "specdec/bench.h"
#include "specdec/convert.h"
#include "specdec/bench_config.h"
#include "specdec/bench_report.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: specdec bench CONFIG [--quick] [--out DIR] [-t N]\n"
            "\n"
            "Answers \"how much faster is speculative decoding than plain decoding for this pair,\n"
            "and why?\". For each prompt and draft length k of CONFIG (configs/*.json), runs plain\n"
            "and speculative decoding with the same seed, alternating, and reports medians:\n"
            "acceptance (overall and by draft position), tokens per verify pass, time to first\n"
            "token, tokens/s of both, the speedup, draft and verify time shares, KV bytes, peak\n"
            "RSS. Next to each speedup it prints the cost model's prediction from measured\n"
            "T_decode (target, draft) and T_verify(k+1): S = E / (k Td/Tt + Tv/Tt), with\n"
            "E = (1 - a^(k+1)) / (1 - a) at the measured acceptance a. Greedy runs must match\n"
            "plain decoding token for token; any difference fails the bench (exit 1).\n"
            "\n"
            "options:\n"
            "  --quick       1 repetition, at most 2 prompts and 32 tokens: a smoke run\n"
            "  --out DIR     write the JSON report and the SVG chart into DIR (default: the\n"
            "                config's output paths, bench/results/NAME.json and .svg)\n"
            "  -t, --threads N  threads (default: the config's, else online CPUs)\n"
            "  -h, --help    this help\n"
            "\n"
            "Random-weight models (\"generate\" in a config) are written once into $SPECDEC_CACHE\n"
            "or .cache/models. Paths in a config are relative to the working directory; model\n"
            "names use the model search path. Exit status: 0, 1 runtime error or greedy\n"
            "divergence, 2 bad arguments or config, 130 interrupted.\n");
}

static void progress(int done, int total, const char *what, void *user) {
    (void)user;
    if (!what) {
        fprintf(stderr, "\r\033[K");
        return;
    }
    fprintf(stderr, "\r\033[K[%d/%d] %s", done, total, what);
    fflush(stderr);
}

/* mkdir -p of the directory part of path. */
static int make_parent(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    char *slash = strrchr(tmp, '/');
    if (!slash || slash == tmp) return 0;
    *slash = 0;
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

static int write_text(const char *path, const char *text) {
    if (!text) return cli_usage_error("out of memory writing %s", path), 1;
    FILE *f = make_parent(path) == 0 ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static const char *base(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* The model file of a spec (generating a random one into the cache on first use). */
static int model_path(const char *which, const sd_bench_model_spec *m, char *buf, size_t cap) {
    const sd_type_traits *ti = sd_type_info(m->synth.wtype);
    if (m->generated)
        fprintf(stderr, "%s: random %s (%s, seed %llu), cached under %s\n", which, m->shape, ti ? ti->name : "?",
                (unsigned long long)m->synth.seed, sd_bench_cache_dir());
    if (m->twin)
        fprintf(stderr, "%s: cost twin of %s at the %s shape (%s, seed %llu), cached under %s\n", which, m->twin_of,
                m->shape, ti ? ti->name : "?", (unsigned long long)m->synth.seed, sd_bench_cache_dir());
    int created = 0;
    double t = cli_now();
    sd_status st = sd_bench_model_path(m, buf, cap, &created);
    if (st != SD_OK) return cli_error_status(st);
    if (created) fprintf(stderr, "%s: wrote %s in %.1f s\n", which, buf, cli_now() - t);
    return 0;
}

/* Models whose quantised copies are in use (a copy borrows its source's tokenizer): freed
 * last. */
static sd_model *sources[2];
static int n_sources;

/* *m becomes its own copy quantised to type name q (from src when given, else from *m). */
static sd_status quantize_in_place(sd_model **m, const char *q, sd_model *src) {
    const sd_model_params mp = sd_model_default_params();
    sd_model *from = src ? src : *m, *copy = NULL;
    sd_status st = sd_model_quantize(from, (sd_type)sd_type_from_name(q), &mp, &copy);
    if (st != SD_OK) return st;
    if (!src) sources[n_sources++] = from;
    *m = copy;
    return SD_OK;
}

int cmd_bench(int argc, char **argv) {
    n_sources = 0;
    const char *cfg_path = NULL, *out_dir = NULL;
    int quick = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--out")) {
            if (!v) return cli_usage_error("--out needs a value");
            out_dir = v;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!v) return cli_usage_error("%s needs a value", a);
            if (cli_parse_int(a, v, 1, 1024, &threads)) return 2;
            i++;
        } else if (a[0] == '-') return cli_usage_error("bench: unknown option '%s' (see specdec bench --help)", a);
        else if (cfg_path) return cli_usage_error("bench: one CONFIG at a time (got '%s' and '%s')", cfg_path, a);
        else cfg_path = a;
    }
    if (!cfg_path) return cli_usage_error("bench: CONFIG is required, e.g. specdec bench configs/stories-greedy.json");

    sd_bench_config cfg;
    sd_status st = sd_bench_config_load(cfg_path, &cfg);
    if (st != SD_OK) {
        fprintf(stderr, "error: %s\n", sd_last_error());
        return 2;
    }
    int rc = 0;
    char **prompts = NULL;
    int n_prompts = 0, own_prompts = 0;
    sd_model *tm = NULL, *dm = NULL;
    sd_bench_report *rep = calloc(1, sizeof *rep);
    char *json = NULL, *svg = NULL;
    if (!rep) {
        rc = cli_usage_error("out of memory");
        goto done;
    }
    if (quick) {
        cfg.repetitions = 1;
        if (cfg.n_predict > 32) cfg.n_predict = 32;
        if (cfg.prompt_count > 2) cfg.prompt_count = 2;
        if (cfg.n_prompts > 2) {
            for (int i = 2; i < cfg.n_prompts; i++) free(cfg.prompts[i]);
            cfg.n_prompts = 2;
        }
    }
    if (!threads) threads = cfg.threads ? cfg.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    sd_set_threads(threads);
    cli_install_sigint();

    if (cfg.prompts) {
        prompts = cfg.prompts;
        n_prompts = cfg.n_prompts;
    } else {
        if ((st = sd_bench_read_prompts(cfg.prompt_file, cfg.prompt_count, cfg.first_sentence, &prompts, &n_prompts))) {
            rc = cli_error_status(st);
            goto done;
        }
        own_prompts = 1;
    }

    char tpath[4096], dpath[4096];
    if ((rc = model_path("target", &cfg.target, tpath, sizeof tpath))) goto done;
    if ((rc = model_path("draft", &cfg.draft, dpath, sizeof dpath))) goto done;
    sd_model_params mp = sd_model_default_params();
    mp.tokenizer_path = cfg.target.tokenizer;
    if ((st = sd_model_load(tpath, &mp, &tm)) != SD_OK) {
        rc = cli_error_status(st);
        goto done;
    }
    if (cfg.target.quantize && (st = quantize_in_place(&tm, cfg.target.quantize, NULL)) != SD_OK) {
        rc = cli_error_status(st);
        goto done;
    }
    const char *dtok = cfg.draft.tokenizer ? cfg.draft.tokenizer : NULL;
    const char *ttok = cfg.target.tokenizer ? cfg.target.tokenizer : NULL;
    const char *tq = cfg.target.quantize ? cfg.target.quantize : "", *dq = cfg.draft.quantize ? cfg.draft.quantize : "";
    /* The same file with the same tokenizer is self-drafting: one model, two caches. */
    const int same_file = !strcmp(tpath, dpath) && ((!dtok && !ttok) || (dtok && ttok && !strcmp(dtok, ttok)));
    if (same_file && !strcmp(tq, dq)) dm = tm;
    else if (same_file && !cfg.target.quantize) { /* the target drafting with its own quantised copy */
        if ((st = quantize_in_place(&dm, cfg.draft.quantize, tm)) != SD_OK) {
            rc = cli_error_status(st);
            goto done;
        }
    } else {
        mp.tokenizer_path = dtok;
        mp.tokenizer_fallback = sd_model_tokenizer_path(tm); /* a llama2.c draft shares the target's */
        if ((st = sd_model_load(dpath, &mp, &dm)) != SD_OK ||
            (cfg.draft.quantize && (st = quantize_in_place(&dm, cfg.draft.quantize, NULL)) != SD_OK)) {
            rc = cli_error_status(st);
            goto done;
        }
    }

    sd_bench_machine(rep->cpu, sizeof rep->cpu, &rep->cores);
    fprintf(stderr, "machine: %s, %d cores, %d threads\n", rep->cpu, rep->cores, threads);

    sd_bench_run_params rp = {0};
    rp.cfg = &cfg;
    rp.target = tm;
    rp.draft = dm;
    rp.prompts = prompts;
    rp.n_prompts = n_prompts;
    rp.cost_only = cfg.target.generated || cfg.draft.generated;
    rp.quick = quick;
    rp.threads = threads;
    rp.stop_flag = &cli_interrupted;
    if (isatty(STDERR_FILENO)) rp.progress = progress;
    st = sd_bench_run(&rp, rep);
    if (st == SD_ERR_INTERRUPTED || cli_interrupted) {
        if (rp.progress) progress(0, 0, NULL, NULL);
        /* Partial results: the draft lengths whose runs all finished before Ctrl-C. */
        int n_done = 0;
        for (int i = 0; i < rep->n_k && i < SD_MAX_DRAFT; i++) {
            const sd_bench_k_result *kr = &rep->k[i];
            if (kr->runs < 1) continue;
            if (!n_done++) printf("partial results (draft lengths completed before the interrupt):\n");
            printf("  k=%d: %d runs, acceptance %.1f%%, decode %.1f tok/s speculative vs %.1f plain (%.2fx)\n", kr->k,
                   kr->runs, 100.0 * kr->acceptance, kr->tps_spec, kr->tps_plain, kr->speedup);
        }
        if (!n_done) printf("partial results: no draft length completed before the interrupt\n");
        fflush(stdout);
        fprintf(stderr, "interrupted: no report written\n");
        rc = 130;
        goto done;
    }
    if (st != SD_OK) {
        if (rp.progress) progress(0, 0, NULL, NULL);
        rc = cli_error_status(st);
        goto done;
    }
    /* Bandwidth last: its buffer (1 GiB) would otherwise be the peak RSS the report shows. */
    double bw = sd_bench_bandwidth((size_t)(quick ? 256 : 1024) << 20, 5);
    rep->bandwidth = bw > 0 ? bw : 0;
    sd_bench_report_print(rep, stdout);
    fflush(stdout);

    char jpath[4096], spath[4096];
    if (out_dir) {
        snprintf(jpath, sizeof jpath, "%s/%s", out_dir, base(cfg.out_json));
        snprintf(spath, sizeof spath, "%s/%s", out_dir, base(cfg.out_svg));
    } else {
        snprintf(jpath, sizeof jpath, "%s", cfg.out_json);
        snprintf(spath, sizeof spath, "%s", cfg.out_svg);
    }
    json = sd_bench_report_json(rep);
    svg = sd_bench_report_svg(rep);
    if ((rc = write_text(jpath, json)) || (rc = write_text(spath, svg))) goto done;
    printf("report:   %s\nchart:    %s\n", jpath, spath);
    if (rep->n_divergences) {
        const sd_bench_divergence *d = &rep->div[0];
        fprintf(stderr, "error: greedy speculative output differs from plain decoding in %d run%s (first: prompt %d, k=%d, at generated token %d)\n",
                rep->n_divergences, rep->n_divergences == 1 ? "" : "s", d->prompt + 1, d->k, d->index);
        rc = 1;
    }
done:
    free(json);
    free(svg);
    free(rep);
    if (dm != tm) sd_model_free(dm);
    sd_model_free(tm);
    for (int i = 0; i < n_sources; i++) sd_model_free(sources[i]);
    if (own_prompts) sd_bench_free_prompts(prompts, n_prompts);
    sd_bench_config_free(&cfg);
    return rc;
}
