/* The bench sweep: paired plain/speculative generations per prompt and draft length, the
 * greedy identity check, the measured costs and the cost model's predicted speedup. */
#include "specdec/bench_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/io.h"
#include "specdec/bench.h"
#include "specdec/grammar.h"

double sd_bench_expected_tokens(double alpha, int k) {
    if (alpha >= 1.0) return k + 1.0;
    if (alpha <= 0.0) return 1.0;
    return (1.0 - pow(alpha, k + 1)) / (1.0 - alpha);
}

double sd_bench_predicted_speedup(double alpha, int k, double draft_ratio, double verify_ratio) {
    double cost = k * draft_ratio + verify_ratio;
    return cost > 0 ? sd_bench_expected_tokens(alpha, k) / cost : 0.0;
}

double sd_bench_break_even_alpha(int k, double draft_ratio, double verify_ratio) {
    if (sd_bench_predicted_speedup(0.0, k, draft_ratio, verify_ratio) >= 1.0) return 0.0;
    if (sd_bench_predicted_speedup(1.0, k, draft_ratio, verify_ratio) < 1.0) return 1.0;
    /* E(alpha, k) grows monotonically in alpha, so bisection finds the crossing. */
    double lo = 0.0, hi = 1.0;
    for (int i = 0; i < 60; i++) {
        double mid = 0.5 * (lo + hi);
        if (sd_bench_predicted_speedup(mid, k, draft_ratio, verify_ratio) < 1.0) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

double sd_bench_alpha(const long *drafted_at, const long *accepted_at, int k) {
    /* Position i is a trial when it was drafted and 0..i-1 were accepted. From the pooled
     * counts that is min(drafted_at[i], accepted_at[i-1]); it overcounts only passes cut
     * short (fewer than k drafts near the end of a generation) that accepted everything. */
    double acc = 0, trials = 0;
    for (int i = 0; i < k; i++) {
        long t = i == 0 ? drafted_at[0] : (drafted_at[i] < accepted_at[i - 1] ? drafted_at[i] : accepted_at[i - 1]);
        trials += (double)t;
        acc += (double)accepted_at[i];
    }
    return trials > 0 ? acc / trials : 0.0;
}

int sd_bench_first_divergence(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return na == nb ? -1 : n;
}

void sd_bench_machine(char *cpu, size_t cap, int *cores) {
    snprintf(cpu, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) != 0) continue;
            char *v = strchr(line, ':');
            if (!v) continue;
            v++;
            while (*v == ' ' || *v == '\t') v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(cpu, cap, "%s", v);
            break;
        }
        fclose(f);
    }
    *cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* ---- one generation ---- */

typedef struct {
    int32_t *tok;
    int n, cap;
} collector;

static int collect(int32_t t, void *user) {
    collector *c = user;
    if (c->n < c->cap) c->tok[c->n++] = t;
    return 0;
}

static sd_status default_gen(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                             sd_spec_stats *stats, void *hook_user) {
    (void)hook_user;
    return sd_spec_generate(s, prompt, n_prompt, cb, user, stats);
}

/* The cost model's inputs, measured in interleaved rounds (a target decode step, a draft decode
 * step, then a target verify pass of k+1 tokens for each k) so that machine drift hits them
 * alike: the ratios are medians of per-round ratios (timed one after another, two separate
 * medians of the same model differed widely on this machine; measured: commit 3679e2b). Rounds
 * fill about budget seconds per figure. t_verify[i] is reported as verify_ratio x t_target. */
static sd_status time_costs(sd_context *ct, sd_context *cd, int pos, const int *ks,
                            int nk, double budget, volatile sig_atomic_t *stop, double *t_target, double *t_draft,
                            double *draft_ratio, double *t_verify, double *verify_ratio) {
    const sd_hparams *ht = sd_model_hparams(sd_context_model(ct)), *hd = sd_model_hparams(sd_context_model(cd));
    int kmax = ks[nk - 1];
    int32_t *tok = malloc((size_t)(pos + kmax + 1) * sizeof(int32_t));
    /* logits of the widest pass: k+1 target rows, or one row of a draft with a larger vocabulary */
    size_t n_logits = (size_t)(kmax + 1) * ht->vocab_size;
    if ((size_t)hd->vocab_size > n_logits) n_logits = (size_t)hd->vocab_size;
    float *logits = malloc(n_logits * sizeof(float));
    const int max_reps = 40;
    double *v = malloc((size_t)max_reps * (nk + 3) * sizeof(double));
    sd_status st = SD_OK;
    if (!tok || !logits || !v) {
        st = sd_fail(SD_ERR_NOMEM, "bench: out of memory");
        goto out;
    }
    const int vocab = ht->vocab_size < hd->vocab_size ? ht->vocab_size : hd->vocab_size;
    for (int i = 0; i < pos + kmax + 1; i++) tok[i] = (int32_t)((i * 7919 + 3) % vocab);
    sd_context_seq_truncate(ct, 0, 0);
    sd_context_seq_truncate(cd, 0, 0);
    if (pos > 0 && ((st = sd_context_forward(ct, 0, tok, pos, NULL, 0)) != SD_OK ||
                    (st = sd_context_forward(cd, 0, tok, pos, NULL, 0)) != SD_OK))
        goto out;
    /* warm-up round, also the estimate of a round's length */
    double round = 0, t;
    for (int i = -2; i < nk; i++) {
        st = i == -2 ? sd_bench_time_forward(ct, tok, pos, 1, logits, &t)
           : i == -1 ? sd_bench_time_forward(cd, tok, pos, 1, logits, &t)
                     : sd_bench_time_forward(ct, tok, pos, ks[i] + 1, logits, &t);
        if (st != SD_OK) goto out;
        round += t;
    }
    int reps = round > 0 ? (int)(budget * (nk + 2) / round) : max_reps;
    reps = reps < 5 ? 5 : reps > max_reps ? max_reps : reps;
    double *tt = v, *td = v + max_reps, *tv = v + 2 * max_reps, *w = v + (size_t)(nk + 2) * max_reps;
    for (int r = 0; r < reps; r++) {
        if ((st = sd_bench_time_forward(ct, tok, pos, 1, logits, &tt[r])) != SD_OK ||
            (st = sd_bench_time_forward(cd, tok, pos, 1, logits, &td[r])) != SD_OK)
            goto out;
        for (int i = 0; i < nk; i++)
            if ((st = sd_bench_time_forward(ct, tok, pos, ks[i] + 1, logits, &tv[(size_t)i * max_reps + r])) != SD_OK)
                goto out;
        if (stop && *stop) {
            st = sd_fail(SD_ERR_INTERRUPTED, "bench interrupted");
            goto out;
        }
    }
    for (int r = 0; r < reps; r++) w[r] = td[r] / tt[r];
    *draft_ratio = sd_median(w, reps);
    for (int i = 0; i < nk; i++) {
        for (int r = 0; r < reps; r++) w[r] = tv[(size_t)i * max_reps + r] / tt[r];
        verify_ratio[i] = sd_median(w, reps);
    }
    *t_target = sd_median(tt, reps);
    *t_draft = *draft_ratio * *t_target;
    for (int i = 0; i < nk; i++) t_verify[i] = verify_ratio[i] * *t_target;
out:
    free(tok);
    free(logits);
    free(v);
    return st;
}

static void copy_str(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src ? src : ""); }

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

/* A model's name for titles: the file name, or the shape of a generated one or a twin (their
 * cache file names spell out every parameter and are too long for a chart). */
static void label(char *dst, size_t cap, const sd_bench_model_spec *m, const char *path) {
    if (m->twin) {
        const sd_type_traits *ti = sd_type_info(m->synth.wtype);
        const char *b = strrchr(m->twin_of, '/');
        snprintf(dst, cap, "%s twin (%s shape, %s)", b ? b + 1 : m->twin_of, m->shape, ti ? ti->name : "?");
        return;
    }
    if (m->generated) {
        sd_synth_params named = m->synth;
        const sd_type_traits *ti = sd_type_info(m->synth.wtype);
        const char *wt = ti ? ti->name : "?";
        sd_synth_shape(m->shape, &named);
        const sd_synth_params *g = &m->synth;
        if (named.dim == g->dim && named.n_layers == g->n_layers && named.n_heads == g->n_heads &&
            named.n_kv_heads == g->n_kv_heads && named.hidden_dim == g->hidden_dim && named.vocab_size == g->vocab_size &&
            named.ctx_len == g->ctx_len)
            snprintf(dst, cap, "random %s (%s)", m->shape, wt);
        else snprintf(dst, cap, "random dim %d, %d layers (%s)", m->synth.dim, m->synth.n_layers, wt);
        return;
    }
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b) < cap ? strlen(b) : cap - 1; /* cut, as snprintf would */
    memcpy(dst, b, n);
    dst[n] = 0;
}

sd_status sd_bench_run(const sd_bench_run_params *p, sd_bench_report *r) {
    const sd_bench_config *cfg = p->cfg;
    char cpu[sizeof r->cpu];
    int cores = r->cores;
    memcpy(cpu, r->cpu, sizeof cpu);
    memset(r, 0, sizeof *r);
    memcpy(r->cpu, cpu, sizeof cpu);
    r->cores = cores;
    copy_str(r->schema, sizeof r->schema, SD_BENCH_SCHEMA);
    copy_str(r->config, sizeof r->config, cfg->file);
    copy_str(r->name, sizeof r->name, cfg->name);
    copy_str(r->description, sizeof r->description, cfg->description);
    copy_str(r->target, sizeof r->target, sd_model_path(p->target));
    copy_str(r->draft, sizeof r->draft, sd_model_path(p->draft));
    label(r->target_label, sizeof r->target_label, &cfg->target, r->target);
    label(r->draft_label, sizeof r->draft_label, &cfg->draft, r->draft);
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    r->threads = p->threads;
    r->bandwidth = p->bandwidth;
    r->cost_only = p->cost_only;
    r->self_draft = p->target == p->draft;
    r->greedy = cfg->sampling.temperature == 0;
    r->quick = p->quick;
    r->n_prompts = p->n_prompts;
    r->n_predict = cfg->n_predict;
    r->repetitions = cfg->repetitions;
    r->temperature = cfg->sampling.temperature;
    r->top_k = cfg->sampling.top_k;
    r->top_p = cfg->sampling.top_p;
    r->seed = (double)cfg->sampling.seed;
    r->best = -1;
    if (p->n_prompts < 1 || cfg->n_k < 1 || cfg->n_strategies < 1)
        return sd_fail(SD_ERR_INVALID_ARG, "bench: no prompts, draft lengths or strategies");

    sd_bench_gen_fn gen = p->spec_generate ? p->spec_generate : default_gen;
    const int reps = cfg->repetitions, n_runs = p->n_prompts * reps;
    const int n_predict = cfg->n_predict;
    int n_ctx = sd_model_hparams(p->target)->ctx_len;
    if (sd_model_hparams(p->draft)->ctx_len < n_ctx) n_ctx = sd_model_hparams(p->draft)->ctx_len;
    const sd_tokenizer *tok = sd_model_tokenizer(p->target);

    sd_status st = SD_OK;
    int32_t **ids = calloc((size_t)p->n_prompts, sizeof *ids);
    int *n_ids = calloc((size_t)p->n_prompts, sizeof *n_ids);
    collector cp = {0}, cs = {0};
    cp.cap = cs.cap = n_predict;
    cp.tok = malloc((size_t)n_predict * sizeof(int32_t));
    cs.tok = malloc((size_t)n_predict * sizeof(int32_t));
    const size_t n_v = 2 * (size_t)n_runs; /* per sampling mode */
    double *v_tps_p = malloc(n_v * sizeof(double)), *v_tps_s = malloc(n_v * sizeof(double));
    double *v_ttft_p = malloc(n_v * sizeof(double)), *v_ttft_s = malloc(n_v * sizeof(double));
    double *v_speed = malloc(n_v * sizeof(double)), *v_draft = malloc(n_v * sizeof(double));
    double *v_verify = malloc(n_v * sizeof(double));
    sd_spec *plain = NULL, *spec = NULL;
    sd_context *ctx_t = NULL, *ctx_d = NULL;
    sd_grammar *grammar = NULL;
    sd_grammar_vocab *gvocab = NULL;
    if (!ids || !n_ids || !cp.tok || !cs.tok || !v_tps_p || !v_tps_s || !v_ttft_p || !v_ttft_s || !v_speed || !v_draft ||
        !v_verify) {
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
        goto out;
    }

    /* Prompts through the target's tokenizer; each must leave room for n_predict tokens. */
    double mean_prompt = 0;
    for (int i = 0; i < p->n_prompts; i++) {
        size_t len = strlen(p->prompts[i]);
        int cap = (int)len + 8;
        if (!(ids[i] = malloc((size_t)cap * sizeof(int32_t)))) {
            st = sd_fail(SD_ERR_NOMEM, "out of memory");
            goto out;
        }
        if ((st = sd_tokenizer_encode(tok, p->prompts[i], len, sd_tokenizer_add_bos(tok), ids[i], cap, &n_ids[i])) != SD_OK)
            goto out;
        if (n_ids[i] < 1) {
            st = sd_fail(SD_ERR_INVALID_ARG, "%s: prompt %d encodes to no tokens", cfg->file, i + 1);
            goto out;
        }
        if (n_ids[i] + n_predict > n_ctx) {
            st = sd_fail(SD_ERR_INVALID_ARG,
                         "%s: prompt %d (\"%.40s%s\") is %d tokens: with n_predict %d it needs %d of the context of %d "
                         "(lower n_predict or shorten the prompt)",
                         cfg->file, i + 1, p->prompts[i], len > 40 ? "..." : "", n_ids[i], n_predict,
                         n_ids[i] + n_predict, n_ctx);
            goto out;
        }
        mean_prompt += n_ids[i];
    }
    mean_prompt /= p->n_prompts;

    /* The constraint, compiled once: every run (but "unconstrained"'s) generates under it. */
    if (cfg->constraint_schema || cfg->constraint_file) {
        char *text = NULL;
        size_t tlen = 0;
        if (cfg->constraint_file) {
            if ((st = sd_file_read(cfg->constraint_file, (size_t)16 << 20, &text, &tlen)) != SD_OK) goto out;
        } else {
            text = cfg->constraint_schema;
            tlen = strlen(text);
        }
        sd_json_schema_params jp = sd_json_schema_default_params();
        jp.whitespace = cfg->constraint_compact ? SD_JSON_WS_COMPACT : SD_JSON_WS_BOUNDED;
        st = cfg->constraint_gbnf ? sd_grammar_from_gbnf(text, tlen, NULL, &grammar)
                                  : sd_grammar_from_json_schema_ex(text, tlen, &jp, &grammar);
        if (text != cfg->constraint_schema) free(text);
        if (st == SD_OK) st = sd_grammar_vocab_create(tok, &gvocab);
        if (st != SD_OK) {
            char why[600];
            snprintf(why, sizeof why, "%s", sd_last_error());
            st = sd_fail(st, "%s: .constraint: %s", cfg->file, why);
            goto out;
        }
    }
    r->constrained = grammar != NULL;

    sd_spec_params sp = sd_spec_default_params();
    sp.draft_mode = SD_DRAFT_FIXED; /* the sweep is over fixed draft lengths */
    sp.n_predict = n_predict;
    sp.sampling = cfg->sampling;
    sp.stop_at_eos = !cfg->ignore_eos;
    sp.stop_flag = p->stop_flag;
    sp.draft_max = 0;
    sp.n_threads = p->threads;
    if ((st = sd_spec_create(p->target, NULL, &sp, &plain)) != SD_OK) goto out;

    /* Costs at the context length of the middle of a generation. */
    int kmax = cfg->k[cfg->n_k - 1];
    int pos = (int)(mean_prompt + n_predict / 2.0);
    if (pos > n_ctx - (kmax + 1)) pos = n_ctx - (kmax + 1);
    if (pos < 0) pos = 0;
    r->cost_pos = pos;
    const double budget = p->quick ? 0.05 : 0.3;
    sd_context_params cp_costs = sd_context_default_params();
    cp_costs.n_ctx = n_ctx;
    cp_costs.n_threads = p->threads;
    if ((st = sd_context_create(p->target, &cp_costs, &ctx_t)) != SD_OK ||
        (st = sd_context_create(p->draft, &cp_costs, &ctx_d)) != SD_OK)
        goto out;
    double draft_ratio = 0, t_verify[SD_MAX_DRAFT], verify_ratio[SD_MAX_DRAFT];
    st = time_costs(ctx_t, ctx_d, pos, cfg->k, cfg->n_k, budget, p->stop_flag,
                    &r->t_decode_target_s, &r->t_decode_draft_s, &draft_ratio, t_verify, verify_ratio);
    if (st != SD_OK) goto out;
    if (p->stop_flag && *p->stop_flag) { /* the cost timings run no generation to poll it */
        st = sd_fail(SD_ERR_INTERRUPTED, "bench interrupted");
        goto out;
    }

    /* What runs: the fixed sweep first, then each other strategy at the largest k as its cap. */
    struct {
        sd_bench_strategy s;
        int k, ki; /* ki: the index into cfg->k of a fixed k, else -1 */
    } var[SD_BENCH_MAX_VARIANTS];
    int nv = 0;
    for (int si = 0; si < cfg->n_strategies; si++)
        if (cfg->strategies[si] == SD_BENCH_FIXED)
            for (int ki = 0; ki < cfg->n_k; ki++) var[nv].s = SD_BENCH_FIXED, var[nv].k = cfg->k[ki], var[nv++].ki = ki;
    for (int si = 0; si < cfg->n_strategies; si++)
        if (cfg->strategies[si] != SD_BENCH_FIXED) var[nv].s = cfg->strategies[si], var[nv].k = kmax, var[nv++].ki = -1;
    const int nm = cfg->n_modes > 0 ? cfg->n_modes : 1;
    r->n_modes = nm;
    for (int m = 0; m < nm; m++) r->modes[m] = cfg->n_modes > 0 ? cfg->modes[m] : sp.sampling.mode;
    r->n_k = nv * nm; /* a block of results per mode, in the variants' order */
    int done = 0, total = nv * n_runs * nm;
    for (int vi = 0; vi < nv; vi++) {
        const int k = var[vi].k, ki = var[vi].ki;
        const sd_bench_strategy strat = var[vi].s;
        const char *sname = sd_bench_strategy_name(strat);
        sd_spec_params vp = sp;
        vp.draft_max = k;
        vp.draft_mode = strat == SD_BENCH_FIXED ? SD_DRAFT_FIXED : strat == SD_BENCH_PMIN ? SD_DRAFT_PMIN : SD_DRAFT_ADAPTIVE;
        /* under the constraint (but "unconstrained"), its forced bytes drafted (but "no-grammar-drafts") */
        const int constrained = grammar && strat != SD_BENCH_UNCONSTRAINED;
        vp.grammar = constrained ? grammar : NULL;
        vp.grammar_vocab = gvocab;
        vp.grammar_drafts = strat != SD_BENCH_NO_GRAMMAR_DRAFTS;
        vp.p_min = cfg->p_min;
        vp.ngram = strat == SD_BENCH_NGRAM || strat == SD_BENCH_MODEL_NGRAM;
        vp.tree_budget = strat == SD_BENCH_TREE ? cfg->tree_budget : 0;
        sd_model *dm = strat == SD_BENCH_NGRAM ? NULL : p->draft;
        for (int m = 0; m < nm; m++) {
            sd_bench_k_result *kr = &r->k[m * nv + vi];
            kr->strategy = strat;
            kr->mode = r->modes[m];
            kr->k = k;
            kr->t_verify_s = ki >= 0 ? t_verify[ki] : NAN;
        }
        sd_spec_free(spec);
        spec = NULL;
        if ((st = sd_spec_create(p->target, dm, &vp, &spec)) != SD_OK) goto out;

        /* Warm both paths (page faults, thread pools) so neither timed run pays them alone. */
        sd_spec_params wp = vp;
        wp.n_predict = 8;
        sd_spec *w = NULL;
        if (sd_spec_create(p->target, dm, &wp, &w) == SD_OK) sd_spec_generate(w, ids[0], n_ids[0], NULL, NULL, NULL);
        sd_spec_free(w);
        w = NULL;
        wp = sp;
        wp.n_predict = 8;
        wp.grammar = vp.grammar;
        wp.grammar_vocab = gvocab;
        if (sd_spec_create(p->target, NULL, &wp, &w) == SD_OK) sd_spec_generate(w, ids[0], n_ids[0], NULL, NULL, NULL);
        sd_spec_free(w);

        struct {
            long drafted_at[SD_MAX_DRAFT], accepted_at[SD_MAX_DRAFT];
            sd_spec_stats sum; /* the runs' counts, for the figure functions of spec.h (one definition each) */
            int nr;
        } acc[2];
        memset(acc, 0, sizeof acc);
        for (int pi = 0; pi < p->n_prompts; pi++) {
            for (int rep = 0; rep < reps; rep++) {
                /* the modes alternate run by run, so drift hits them alike too */
                for (int m = 0; m < nm; m++) {
                    sd_bench_k_result *kr = &r->k[m * nv + vi];
                    if (p->stop_flag && *p->stop_flag) {
                        st = sd_fail(SD_ERR_INTERRUPTED, "bench interrupted");
                        goto out;
                    }
                    if (p->progress) {
                        char what[128];
                        snprintf(what, sizeof what, "%s k=%d%s%s prompt %d/%d rep %d/%d", sname, k, nm > 1 ? " " : "",
                                 nm > 1 ? sd_sampling_mode_name(kr->mode) : "", pi + 1, p->n_prompts, rep + 1, reps);
                        p->progress(done, total, what, p->progress_user);
                    }
                    sd_spec_params pm = sp, vm = vp;
                    pm.sampling.mode = vm.sampling.mode = kr->mode;
                    pm.grammar = vp.grammar; /* plain decoding under the same constraint */
                    pm.grammar_vocab = gvocab;
                    if ((st = sd_spec_set_params(plain, &pm)) != SD_OK || (st = sd_spec_set_params(spec, &vm)) != SD_OK)
                        goto out;
                    /* Plain then speculative, back to back with the same seed: slow drift of the
                     * machine (frequency, other load) hits both sides of the pair alike. */
                    sd_spec_stats ps, ss;
                    cp.n = cs.n = 0;
                    if ((st = sd_spec_generate(plain, ids[pi], n_ids[pi], collect, &cp, &ps)) != SD_OK) goto out;
                    if ((st = gen(spec, ids[pi], n_ids[pi], collect, &cs, &ss, p->hook_user)) != SD_OK) goto out;
                    if ((p->stop_flag && *p->stop_flag) || ps.stop_reason == SD_STOP_CANCELLED ||
                        ss.stop_reason == SD_STOP_CANCELLED) {
                        st = sd_fail(SD_ERR_INTERRUPTED, "bench interrupted");
                        goto out;
                    }
                    done++;
                    /* greedy and coupled runs promise plain decoding's text */
                    if (r->greedy || kr->mode == SD_SAMPLING_COUPLED) {
                        int d = sd_bench_first_divergence(cp.tok, cp.n, cs.tok, cs.n);
                        if (d >= 0) {
                            kr->diverged++;
                            if (r->n_divergences < SD_BENCH_MAX_DIVERGENCES) {
                                sd_bench_divergence *dv = &r->div[r->n_divergences];
                                dv->strategy = strat;
                                dv->mode = kr->mode;
                                dv->prompt = pi;
                                dv->k = k;
                                dv->rep = rep;
                                dv->index = d;
                                dv->plain_token = d < cp.n ? cp.tok[d] : -1;
                                dv->spec_token = d < cs.n ? cs.tok[d] : -1;
                            }
                            r->n_divergences++;
                        }
                    }
                    const size_t at = (size_t)m * n_runs + (size_t)acc[m].nr;
                    double tp = sd_spec_decode_tps(&ps), ts = sd_spec_decode_tps(&ss);
                    v_tps_p[at] = tp;
                    v_tps_s[at] = ts;
                    v_ttft_p[at] = ps.t_first; /* stats.h's ttft: from the start to the first token */
                    v_ttft_s[at] = ss.t_first;
                    v_speed[at] = ratio(ts, tp);
                    v_draft[at] = ratio(ss.t_draft, ss.t_total);
                    v_verify[at] = ratio(ss.t_verify, ss.t_total);
                    acc[m].nr++;
                    for (int i = 0; i < k; i++) {
                        acc[m].drafted_at[i] += ss.drafted_at[i];
                        acc[m].accepted_at[i] += ss.accepted_at[i];
                    }
                    acc[m].sum.n_drafted += ss.n_drafted;
                    acc[m].sum.n_accepted += ss.n_accepted;
                    acc[m].sum.n_generated += ss.n_generated;
                    acc[m].sum.n_verify += ss.n_verify;
                    acc[m].sum.n_target_steps += ss.n_target_steps;
                    kr->kv_bytes_target = (double)ss.kv_bytes_target;
                    kr->kv_bytes_draft = (double)ss.kv_bytes_draft;
                }
            }
        }
        for (int m = 0; m < nm; m++) {
            sd_bench_k_result *kr = &r->k[m * nv + vi];
            const int nr = acc[m].nr;
            double *vt = v_tps_p + (size_t)m * n_runs, *vs = v_tps_s + (size_t)m * n_runs;
            kr->runs = nr;
            kr->acceptance = sd_spec_acceptance(&acc[m].sum);
            kr->alpha = sd_bench_alpha(acc[m].drafted_at, acc[m].accepted_at, k);
            kr->tokens_per_pass = sd_spec_tokens_per_pass(&acc[m].sum);
            kr->mean_accepted = sd_spec_mean_accepted(&acc[m].sum);
            kr->expected_tokens = sd_bench_expected_tokens(kr->alpha, k);
            for (int i = 0; i < k; i++)
                kr->accept_at[i] = acc[m].drafted_at[i] ? (double)acc[m].accepted_at[i] / (double)acc[m].drafted_at[i] : 0.0;
            kr->tps_plain = sd_median(vt, nr);
            kr->tps_spec = sd_median(vs, nr);
            kr->ttft_plain_s = sd_median(v_ttft_p + (size_t)m * n_runs, nr);
            kr->ttft_spec_s = sd_median(v_ttft_s + (size_t)m * n_runs, nr);
            kr->speedup = sd_median(v_speed + (size_t)m * n_runs, nr);
            kr->draft_share = sd_median(v_draft + (size_t)m * n_runs, nr);
            kr->verify_share = sd_median(v_verify + (size_t)m * n_runs, nr);
            kr->predicted_speedup = ki >= 0 ? sd_bench_predicted_speedup(kr->alpha, k, draft_ratio, verify_ratio[ki]) : NAN;
            kr->break_even_alpha = ki >= 0 ? sd_bench_break_even_alpha(k, draft_ratio, verify_ratio[ki]) : NAN;
        }
    }
    if (p->progress) p->progress(done, total, NULL, p->progress_user);

    /* Recommend the fastest k, if any beats plain decoding; not for a random pair, whose
     * acceptance (and so speed) says nothing about a real draft of that size. */
    double best = 1.0, best_fixed = 1.0;
    r->best = -1;
    for (int i = 0; i < r->n_k && !(r->cost_only && !r->self_draft); i++) {
        if (r->k[i].speedup > best) {
            best = r->k[i].speedup;
            r->best = i;
        }
        if (r->k[i].strategy == SD_BENCH_FIXED && r->k[i].speedup > best_fixed) {
            best_fixed = r->k[i].speedup;
            r->best_k = r->k[i].k;
        }
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) r->peak_rss_bytes = (double)ru.ru_maxrss * 1024.0; /* Linux: KiB */

out:
    sd_spec_free(spec);
    sd_spec_free(plain);
    sd_grammar_free(grammar);
    sd_grammar_vocab_free(gvocab);
    sd_context_free(ctx_t);
    sd_context_free(ctx_d);
    if (ids)
        for (int i = 0; i < p->n_prompts; i++) free(ids[i]);
    free(ids);
    free(n_ids);
    free(cp.tok);
    free(cs.tok);
    free(v_tps_p);
    free(v_tps_s);
    free(v_ttft_p);
    free(v_ttft_s);
    free(v_speed);
    free(v_draft);
    free(v_verify);
    return st;
}
