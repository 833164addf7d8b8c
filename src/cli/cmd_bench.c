/* `specdec bench CONFIG`: speculative against plain decoding for the pair a JSON config names,
 * over a sweep of draft lengths, with the cost model's prediction, a table, JSON and SVG. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/options.h"
#include "specdec/bench.h"
#include "specdec/quant.h"
#include "specdec/bench_config.h"
#include "specdec/bench_report.h"
#include "specdec/cpu.h"

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
    double t = sd_now();
    sd_status st = sd_bench_model_path(m, buf, cap, &created);
    if (st != SD_OK) return cli_error_status(st);
    if (created) fprintf(stderr, "%s: wrote %s in %.1f s\n", which, buf, sd_now() - t);
    return 0;
}

/* Models whose quantised copies are in use (a copy borrows its source's tokenizer): freed
 * last. */
static sd_model *sources[2];
static int n_sources;

/* *m becomes its own copy quantised to type name q (from src when given, else from *m). */
static sd_status quantize_in_place(sd_model **m, const char *q, sd_model *src) {
    sd_model *from = src ? src : *m, *copy = NULL;
    sd_status st = sd_model_quantize(from, (sd_type)sd_type_from_name(q), &copy);
    if (st != SD_OK) return st;
    if (!src) sources[n_sources++] = from;
    *m = copy;
    return SD_OK;
}

int cmd_bench(int argc, char **argv) {
    n_sources = 0;
    cli_opts o;
    cli_opts_default(&o);
    int prc = cli_parse(argc, argv, CMD_BENCH, &o, 1);
    if (prc) return prc == 1 ? 0 : 2;
    const char *cfg_path = o.pos_args[0], *out_dir = o.out_dir;
    const int quick = o.quick;
    int threads = o.threads_set ? o.threads : 0; /* 0: the config's */
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
    threads = sd_cpu_threads(threads); /* what runs: OMP_THREAD_LIMIT may cap it */
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
    if ((st = sd_bench_apply_template(cfg.prompt_template, prompts, n_prompts)) != SD_OK) {
        rc = cli_error_status(st);
        goto done;
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
        for (int i = 0; i < rep->n_k && i < SD_BENCH_MAX_RESULTS; i++) {
            const sd_bench_k_result *kr = &rep->k[i];
            if (kr->runs < 1) continue;
            if (!n_done++) printf("partial results (runs completed before the interrupt):\n");
            printf("  %s k=%d: %d runs, acceptance %.1f%%, decode %.1f tok/s speculative vs %.1f plain (%.2fx)\n", sd_bench_strategy_name(kr->strategy),
                   kr->k, kr->runs, 100.0 * kr->acceptance, kr->tps_spec, kr->tps_plain, kr->speedup);
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
    double bw = sd_bench_bandwidth((size_t)(quick ? 256 : 1024) << 20, 5, threads);
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
