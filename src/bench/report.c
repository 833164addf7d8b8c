/* The bench report in three forms: JSON (and back, for tools and the schema test), a
 * hand-written SVG chart, and the table a person reads at the end of `specdec bench`. */
#include "specdec/bench_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON ---- */

/* cJSON prints 15 significant digits (1.7.15 accepts a near miss), which does not give back
 * the same double; the report writes the shortest of 15..17 digits that does. */
static cJSON *number(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return cJSON_CreateRaw(buf);
}

static void add_number(cJSON *o, const char *key, double v) { cJSON_AddItemToObject(o, key, number(v)); }

static cJSON *k_json(const sd_bench_k_result *k) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "strategy", sd_bench_strategy_name(k->strategy));
    cJSON_AddStringToObject(o, "sampling_mode", sd_sampling_mode_name(k->mode));
    add_number(o, "k", k->k);
    add_number(o, "runs", k->runs);
    add_number(o, "acceptance_rate", k->acceptance);
    add_number(o, "alpha", k->alpha);
    add_number(o, "tokens_per_pass", k->tokens_per_pass);
    add_number(o, "mean_accepted_length", k->mean_accepted);
    add_number(o, "expected_tokens_per_pass", k->expected_tokens);
    cJSON *a = cJSON_AddArrayToObject(o, "acceptance_by_position");
    for (int i = 0; a && i < k->k && i < SD_MAX_DRAFT; i++) cJSON_AddItemToArray(a, number(k->accept_at[i]));
    add_number(o, "ttft_plain_s", k->ttft_plain_s);
    add_number(o, "ttft_spec_s", k->ttft_spec_s);
    add_number(o, "tokens_per_s_plain", k->tps_plain);
    add_number(o, "tokens_per_s_spec", k->tps_spec);
    add_number(o, "speedup", k->speedup);
    add_number(o, "predicted_speedup", k->predicted_speedup);
    add_number(o, "break_even_alpha", k->break_even_alpha);
    add_number(o, "t_verify_s", k->t_verify_s);
    add_number(o, "draft_time_share", k->draft_share);
    add_number(o, "verify_time_share", k->verify_share);
    add_number(o, "kv_bytes_target", k->kv_bytes_target);
    add_number(o, "kv_bytes_draft", k->kv_bytes_draft);
    add_number(o, "greedy_divergences", k->diverged);
    return o;
}

char *sd_bench_report_json(const sd_bench_report *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "schema", r->schema);
    cJSON_AddStringToObject(o, "config", r->config);
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "description", r->description);
    cJSON_AddStringToObject(o, "date", r->date);
    cJSON *pair = cJSON_AddObjectToObject(o, "pair");
    cJSON_AddStringToObject(pair, "target", r->target);
    cJSON_AddStringToObject(pair, "draft", r->draft);
    cJSON_AddStringToObject(pair, "target_label", r->target_label);
    cJSON_AddStringToObject(pair, "draft_label", r->draft_label);
    cJSON_AddBoolToObject(pair, "cost_only", r->cost_only);
    cJSON_AddBoolToObject(pair, "self_draft", r->self_draft);
    cJSON *m = cJSON_AddObjectToObject(o, "machine");
    cJSON_AddStringToObject(m, "cpu", r->cpu);
    add_number(m, "cores", r->cores);
    add_number(m, "threads", r->threads);
    add_number(m, "bandwidth_bytes_per_s", r->bandwidth);
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddBoolToObject(run, "quick", r->quick);
    add_number(run, "prompts", r->n_prompts);
    add_number(run, "n_predict", r->n_predict);
    add_number(run, "repetitions", r->repetitions);
    cJSON_AddBoolToObject(run, "greedy", r->greedy);
    cJSON_AddBoolToObject(run, "constrained", r->constrained);
    add_number(run, "temperature", r->temperature);
    add_number(run, "top_k", r->top_k);
    add_number(run, "top_p", r->top_p);
    add_number(run, "seed", r->seed);
    cJSON *modes = cJSON_AddArrayToObject(run, "sampling_modes");
    for (int i = 0; modes && i < r->n_modes; i++) cJSON_AddItemToArray(modes, cJSON_CreateString(sd_sampling_mode_name(r->modes[i])));
    cJSON *c = cJSON_AddObjectToObject(o, "costs");
    add_number(c, "context", r->cost_pos);
    add_number(c, "t_decode_target_s", r->t_decode_target_s);
    add_number(c, "t_decode_draft_s", r->t_decode_draft_s);
    cJSON *res = cJSON_AddArrayToObject(o, "results");
    for (int i = 0; res && i < r->n_k && i < SD_BENCH_MAX_RESULTS; i++) cJSON_AddItemToArray(res, k_json(&r->k[i]));
    add_number(o, "best_k", r->best_k);
    add_number(o, "best_result", r->best);
    add_number(o, "peak_rss_bytes", r->peak_rss_bytes);
    cJSON *dv = cJSON_AddObjectToObject(o, "divergences");
    add_number(dv, "count", r->n_divergences);
    cJSON *first = cJSON_AddArrayToObject(dv, "first");
    int nd = r->n_divergences < SD_BENCH_MAX_DIVERGENCES ? r->n_divergences : SD_BENCH_MAX_DIVERGENCES;
    for (int i = 0; first && i < nd; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "strategy", sd_bench_strategy_name(r->div[i].strategy));
        cJSON_AddStringToObject(d, "sampling_mode", sd_sampling_mode_name(r->div[i].mode));
        add_number(d, "prompt", r->div[i].prompt);
        add_number(d, "k", r->div[i].k);
        add_number(d, "rep", r->div[i].rep);
        add_number(d, "index", r->div[i].index);
        add_number(d, "plain_token", r->div[i].plain_token);
        add_number(d, "spec_token", r->div[i].spec_token);
        cJSON_AddItemToArray(first, d);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* ---- SVG ---- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)n < b->cap) {
            b->n += (size_t)n;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 8192;
        while (nc < b->n + (size_t)n + 1) nc *= 2;
        char *t = realloc(b->s, nc);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = nc;
    }
}

/* Text for SVG: the five XML specials escaped. */
static void sb_text(sbuf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '&': sb_printf(b, "&amp;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&apos;"); break;
        default: sb_printf(b, "%c", *s);
        }
    }
}

static const char *base(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Chart geometry: plot area [X0, X1] x [Y0, Y1] (SVG y grows downwards). */
enum { W = 760, H = 510, X0 = 70, X1 = 660, Y0 = 92, Y1 = 392 };

char *sd_bench_report_svg(const sd_bench_report *r) {
    sbuf b = {0};
    /* The fixed sweep is drawn against k; every other strategy as a level line across the plot. A
     * second sampling mode's block (results nb..) draws its sweep in green, its strategies labelled. */
    const int nb = r->n_modes > 1 ? r->n_k / r->n_modes : r->n_k;
    int nf = 0;
    while (nf < nb && r->k[nf].strategy == SD_BENCH_FIXED) nf++;
    int kmin = nf ? r->k[0].k : 1, kmax = nf ? r->k[nf - 1].k : 1;
    double smax = 1.25;
    for (int i = 0; i < r->n_k; i++) {
        if (r->k[i].speedup > smax) smax = r->k[i].speedup;
        if (isfinite(r->k[i].predicted_speedup) && r->k[i].predicted_speedup > smax) smax = r->k[i].predicted_speedup;
    }
    /* A round top for the speedup axis, in steps of 0.25, 0.5 or 1. */
    double step = smax <= 2 ? 0.25 : smax <= 4 ? 0.5 : 1.0;
    double ytop = ceil(smax * 1.05 / step) * step;
#define XK(k) (kmax > kmin ? X0 + 20 + (double)((k) - kmin) * (X1 - X0 - 40) / (kmax - kmin) : (X0 + X1) / 2.0)
#define YS(v) (Y1 - (v) / ytop * (Y1 - Y0))
#define YA(v) (Y1 - (v) * (Y1 - Y0))
    sb_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    sb_printf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    /* Title: the pair and the machine. */
    sb_printf(&b, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", X0);
    sb_text(&b, r->name);
    sb_printf(&b, ": speculative vs plain decoding</text>\n<text x=\"%d\" y=\"40\">target ", X0);
    sb_text(&b, r->target_label[0] ? r->target_label : base(r->target));
    sb_printf(&b, r->self_draft ? " drafting for itself" : ", draft ");
    if (!r->self_draft) sb_text(&b, r->draft_label[0] ? r->draft_label : base(r->draft));
    sb_printf(&b, "</text>\n<text x=\"%d\" y=\"56\" fill=\"#444\">", X0);
    sb_text(&b, r->cpu);
    sb_printf(&b, ", %d cores, %d threads, %.1f GB/s; %s, %d prompts x %d reps x %d tokens%s</text>\n", r->cores, r->threads,
              r->bandwidth / 1e9, r->greedy ? "greedy" : "sampled", r->n_prompts, r->repetitions, r->n_predict,
              r->quick ? " (quick)" : "");
    if (r->cost_only)
        sb_printf(&b, "<text x=\"%d\" y=\"72\" fill=\"#b00\">cost only: random weights, so acceptance means nothing%s</text>\n", X0,
                  r->self_draft ? " (self-draft: always 100%, the upper bound)" : "");
    /* Axes and grid. */
    sb_printf(&b, "<g stroke=\"#ddd\">\n");
    for (double v = 0; v <= ytop + 1e-9; v += step)
        sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", X0, YS(v), X1, YS(v));
    sb_printf(&b, "</g>\n<g fill=\"#333\" text-anchor=\"end\">\n");
    for (double v = 0; v <= ytop + 1e-9; v += step)
        sb_printf(&b, "<text x=\"%d\" y=\"%.1f\">%.2fx</text>\n", X0 - 6, YS(v) + 4, v);
    sb_printf(&b, "</g>\n<g fill=\"#c60\" text-anchor=\"start\">\n");
    for (int a = 0; a <= 100; a += 25) sb_printf(&b, "<text x=\"%d\" y=\"%.1f\">%d%%</text>\n", X1 + 6, YA(a / 100.0) + 4, a);
    sb_printf(&b, "</g>\n<g fill=\"#333\" text-anchor=\"middle\">\n");
    for (int i = 0; i < nf; i++) sb_printf(&b, "<text x=\"%.1f\" y=\"%d\">%d</text>\n", XK(r->k[i].k), Y1 + 18, r->k[i].k);
    sb_printf(&b, "</g>\n");
    sb_printf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", X0, Y0, X1 - X0, Y1 - Y0);
    sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (X0 + X1) / 2, Y1 + 38,
              nf ? "draft length k (tokens drafted per verify pass; fixed k)" : "strategies (level lines)");
    sb_printf(&b, "<text transform=\"translate(20 %d) rotate(-90)\" text-anchor=\"middle\">speedup over plain decoding "
                  "(decode tokens/s ratio)</text>\n", (Y0 + Y1) / 2);
    sb_printf(&b, "<text transform=\"translate(%d %d) rotate(90)\" text-anchor=\"middle\" fill=\"#c60\">acceptance rate "
                  "(accepted / drafted)</text>\n", W - 20, (Y0 + Y1) / 2);
    /* Plain decoding: the baseline y = 1. */
    sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" stroke-width=\"1.5\" "
                  "stroke-dasharray=\"2 3\"/>\n", X0, YS(1.0), X1, YS(1.0));
    /* Series. */
    char lab[3][96];
    const char *m0 = r->n_modes > 1 ? sd_sampling_mode_name(r->modes[0]) : NULL;
    snprintf(lab[0], sizeof lab[0], "measured speedup (median)%s%s", m0 ? ", " : "", m0 ? m0 : "");
    snprintf(lab[1], sizeof lab[1], "predicted speedup (cost model)");
    snprintf(lab[2], sizeof lab[2], "acceptance rate%s%s", m0 ? ", " : "", m0 ? m0 : "");
    struct {
        const char *color, *dash, *label;
        int which; /* 0 speedup, 1 predicted, 2 acceptance */
        int block; /* which sampling mode's results */
    } series[] = {
        {"#1f5fbf", "", lab[0], 0, 0},
        {"#1f5fbf", "6 4", lab[1], 1, 0},
        {"#d07000", "", lab[2], 2, 0},
        {"#2a9d3a", "", "measured speedup (median), second mode", 0, 1},
        {"#b8860b", "4 3", "acceptance rate, second mode", 2, 1},
    };
    const size_t n_series = r->n_modes > 1 ? 5 : 3;
    char lab2[2][96];
    if (r->n_modes > 1) {
        snprintf(lab2[0], sizeof lab2[0], "measured speedup (median), %s", sd_sampling_mode_name(r->modes[1]));
        snprintf(lab2[1], sizeof lab2[1], "acceptance rate, %s", sd_sampling_mode_name(r->modes[1]));
        series[3].label = lab2[0];
        series[4].label = lab2[1];
    }
    for (size_t s = 0; s < n_series; s++) {
        const int off = series[s].block * nb;
        if (nf > 1) {
            sb_printf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"", series[s].color,
                      series[s].dash[0] ? " stroke-dasharray=\"" : "", series[s].dash, series[s].dash[0] ? "\"" : "");
            for (int i = 0; i < nf; i++) {
                const sd_bench_k_result *k = &r->k[off + i];
                double y = series[s].which == 0 ? YS(k->speedup) : series[s].which == 1 ? YS(k->predicted_speedup) : YA(k->acceptance);
                sb_printf(&b, "%s%.1f,%.1f", i ? " " : "", XK(k->k), y);
            }
            sb_printf(&b, "\"/>\n");
        }
        for (int i = 0; i < nf; i++) {
            const sd_bench_k_result *k = &r->k[off + i];
            double x = XK(k->k);
            if (series[s].which == 0)
                sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>k=%d: %.2fx measured</title></circle>\n", x,
                          YS(k->speedup), series[s].color, k->k, k->speedup);
            else if (series[s].which == 1)
                sb_printf(&b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"white\" stroke=\"%s\" stroke-width=\"1.5\">"
                              "<title>k=%d: %.2fx predicted</title></circle>\n", x, YS(k->predicted_speedup), series[s].color,
                          k->k, k->predicted_speedup);
            else
                sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"><title>k=%d: %.1f%% accepted"
                              "</title></rect>\n", x - 3.5, YA(k->acceptance) - 3.5, series[s].color, k->k, 100 * k->acceptance);
        }
    }
    /* The other strategies: a labelled level line each at its measured speedup. */
    static const char *const level_colors[] = {"#2a9d3a", "#8e44ad", "#c0392b", "#16a085", "#7f6000"};
    for (int i = nf, li = 0; i < r->n_k; i++) {
        if (i % nb < nf) continue; /* a second mode's fixed sweep: a series above */
        const sd_bench_k_result *k = &r->k[i];
        const char *col = level_colors[li % 5];
        char nm[64];
        snprintf(nm, sizeof nm, "%s%s%s", sd_bench_strategy_name(k->strategy), r->n_modes > 1 ? ", " : "",
                 r->n_modes > 1 ? sd_sampling_mode_name(k->mode) : "");
        sb_printf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
                      "stroke-dasharray=\"8 3\"><title>%s (k up to %d): %.2fx measured, %.2f mean accepted length</title></line>\n",
                  X0, YS(k->speedup), X1, YS(k->speedup), col, nm, k->k, k->speedup, k->mean_accepted);
        sb_printf(&b, "<text x=\"%d\" y=\"%.1f\" fill=\"%s\" text-anchor=\"end\">%s %.2fx</text>\n", X1 - 4,
                  YS(k->speedup) - 4 - 12 * (li % 2), col, nm, k->speedup);
        li++;
    }
    /* Legend: two rows under the axis label, clear of the data. */
    for (size_t s = 0; s < n_series + 1; s++) {
        int x = X0 + 10 + (int)(s % 2) * 290, y = Y1 + 60 + (int)(s / 2) * 18;
        const int is_series = s < n_series;
        const char *color = is_series ? series[s].color : "#555";
        const char *dash = is_series ? series[s].dash : "2 3";
        sb_printf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>", x, y, x + 26, y,
                  color, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
        sb_printf(&b, "<text x=\"%d\" y=\"%d\">%s</text>\n", x + 34, y + 4, is_series ? series[s].label : "plain decoding (the 1.00x baseline)");
    }
    sb_printf(&b, "<text x=\"%d\" y=\"%d\" fill=\"#666\" font-size=\"11\">%s; specdec bench ", X0, H - 10, r->date);
    sb_text(&b, r->config);
    sb_printf(&b, "</text>\n</svg>\n");
#undef XK
#undef YS
#undef YA
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- the table ---- */

static void human_bytes(double v, char *buf, size_t cap) {
    if (v >= 1e9) snprintf(buf, cap, "%.2f GB", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.1f MB", v / 1e6);
    else if (v >= 1e3) snprintf(buf, cap, "%.1f KB", v / 1e3);
    else snprintf(buf, cap, "%.0f B", v);
}

void sd_bench_report_print(const sd_bench_report *r, FILE *f) {
    fprintf(f, "\nspecdec bench: %s (%s)%s\n", r->name, r->config, r->quick ? " [quick]" : "");
    if (r->description[0]) fprintf(f, "  %s\n", r->description);
    if (r->self_draft) fprintf(f, "pair:     %s drafting for itself\n", r->target);
    else fprintf(f, "pair:     target %s\n          draft  %s\n", r->target, r->draft);
    fprintf(f, "machine:  %s, %d cores, %d threads, %.1f GB/s streaming read (the best of 5 reads)\n", r->cpu, r->cores,
            r->threads, r->bandwidth / 1e9);
    fprintf(f, "runs:     %d prompts x %d repetitions x %d tokens, ", r->n_prompts, r->repetitions, r->n_predict);
    if (r->constrained) fprintf(f, "under the config's constraint (a grammar), ");
    if (r->greedy) fprintf(f, "greedy\n");
    else fprintf(f, "temperature %g, top-k %d, top-p %g, seed %.0f\n", r->temperature, r->top_k, r->top_p, r->seed);
    double dr = r->t_decode_target_s > 0 ? r->t_decode_draft_s / r->t_decode_target_s : 0;
    fprintf(f, "costs:    T_decode target %.3f ms, draft %.3f ms (draft/target %.3f), at context %.0f\n",
            r->t_decode_target_s * 1e3, r->t_decode_draft_s * 1e3, dr, r->cost_pos);
    if (r->cost_only)
        fprintf(f, "note:     cost only: %s\n", r->self_draft
                    ? "random weights; the target drafts for itself, so every draft is accepted: the upper bound"
                    : "random weights, so acceptance means nothing; read the costs and the break-even alpha");
    fprintf(f, "\n%-17s %-9s %3s %7s %6s %6s %6s %6s %9s %9s %8s %9s %8s %7s %7s %7s %15s\n", "strategy", "sampling", "k", "accept",
            "alpha", "mal", "tok/vp", "E[tok]", "plain t/s", "spec t/s", "speedup", "predicted", "Tver/Tt", "be.alpha",
            "draft%", "verif%", "TTFT plain/spec");
    for (int i = 0; i < r->n_k; i++) {
        const sd_bench_k_result *k = &r->k[i];
        char pred[16] = "-", tv[16] = "-", be[16] = "-", e[16] = "-";
        if (k->strategy == SD_BENCH_FIXED) { /* the cost model assumes k drafts every pass */
            snprintf(pred, sizeof pred, "%.2fx", k->predicted_speedup);
            snprintf(tv, sizeof tv, "%.2f", r->t_decode_target_s > 0 ? k->t_verify_s / r->t_decode_target_s : 0.0);
            snprintf(be, sizeof be, "%.3f", k->break_even_alpha);
            snprintf(e, sizeof e, "%.2f", k->expected_tokens);
        }
        fprintf(f, "%-17s %-9s %3d %6.1f%% %6.3f %6.2f %6.2f %6s %9.1f %9.1f %7.2fx %9s %8s %8s %6.1f%% %6.1f%% %7.2f/%.2f ms\n",
                sd_bench_strategy_name(k->strategy), r->greedy ? "greedy" : sd_sampling_mode_name(k->mode), k->k, 100 * k->acceptance, k->alpha, k->mean_accepted,
                k->tokens_per_pass, e, k->tps_plain, k->tps_spec, k->speedup, pred, tv, be, 100 * k->draft_share,
                100 * k->verify_share, k->ttft_plain_s * 1e3, k->ttft_spec_s * 1e3);
    }
    fprintf(f, "\ncolumns: strategy: fixed k, or what else drafts with k as its cap (adaptive length, p_min threshold,\n"
               "prompt-lookup ngram, model+ngram, tree); sampling: coupled (plain decoding's text for a seed) or\n"
               "rejection (exact in distribution), plain and speculative runs alike; accept = accepted/drafted; alpha = per-token acceptance given\n"
               "the earlier drafts were accepted; mal = mean accepted length, 1 + accepted per verify pass;\n"
               "tok/vp = tokens per target pass (measured), E[tok] = (1-alpha^(k+1))/(1-alpha); t/s = decode tokens/s\n"
               "(medians); speedup = median of paired spec/plain ratios; predicted = E[tok] / (k*Tdraft/Tt + Tver/Tt);\n"
               "be.alpha = alpha at which speculation breaks even; draft%%/verif%% = share of speculative wall time.\n");
    fprintf(f, "\nacceptance by draft position:\n");
    for (int i = 0; i < r->n_k; i++) {
        fprintf(f, "  %-17s %-9s k=%-2d", sd_bench_strategy_name(r->k[i].strategy),
                r->greedy ? "" : sd_sampling_mode_name(r->k[i].mode), r->k[i].k);
        for (int j = 0; j < r->k[i].k && j < SD_MAX_DRAFT; j++) fprintf(f, " %d:%.0f%%", j + 1, 100 * r->k[i].accept_at[j]);
        fprintf(f, "\n");
    }
    if (r->n_k > 0) {
        char kt[32], kd[32], rss[32];
        human_bytes(r->k[r->n_k - 1].kv_bytes_target, kt, sizeof kt);
        human_bytes(r->k[r->n_k - 1].kv_bytes_draft, kd, sizeof kd);
        human_bytes(r->peak_rss_bytes, rss, sizeof rss);
        fprintf(f, "memory:   KV cache in use at the end of a run: target %s, draft %s; peak RSS %s\n", kt, kd, rss);
    }
    /* greedy and coupled runs promise plain decoding's text */
    int runs = 0;
    for (int i = 0; i < r->n_k; i++) runs += r->greedy || r->k[i].mode == SD_SAMPLING_COUPLED ? r->k[i].runs : 0;
    if (runs) {
        const char *what = r->greedy ? "greedy:  " : "coupled: ";
        if (!r->n_divergences) fprintf(f, "%s speculative output identical to plain decoding in all %d runs\n", what, runs);
        else {
            fprintf(f, "%s FAILED: %d of %d speculative runs differ from plain decoding (a bug)\n", what, r->n_divergences, runs);
            int nd = r->n_divergences < SD_BENCH_MAX_DIVERGENCES ? r->n_divergences : SD_BENCH_MAX_DIVERGENCES;
            for (int i = 0; i < nd; i++)
                fprintf(f, "          %s%s%s, prompt %d, k=%d, rep %d: first difference at generated token %d (plain %d, speculative %d)\n",
                        sd_bench_strategy_name(r->div[i].strategy), r->greedy ? "" : " ",
                        r->greedy ? "" : sd_sampling_mode_name(r->div[i].mode), r->div[i].prompt + 1,
                        r->div[i].k, r->div[i].rep + 1, r->div[i].index, (int)r->div[i].plain_token, (int)r->div[i].spec_token);
        }
    }
    /* Recommendation and the reading of the gap between measurement and model. */
    const int nb = r->n_modes > 1 ? r->n_k / r->n_modes : r->n_k; /* results per sampling mode */
    int nf = 0; /* the fixed sweep comes first in each mode's block */
    while (nf < nb && r->k[nf].strategy == SD_BENCH_FIXED) nf++;
    const sd_bench_k_result *best = NULL; /* the fastest fixed k of any mode, if it beats plain */
    for (int i = 0; i < r->n_k; i++)
        if (i % nb < nf && r->k[i].k == r->best_k && (!best || r->k[i].speedup > best->speedup)) best = &r->k[i];
    if (r->cost_only && !r->self_draft)
        fprintf(f, "best k:   none recommended: random weights, so the measured acceptance is not a real draft's\n");
    else if (best)
        fprintf(f, "best k:   %d%s%s: %.2fx plain decoding measured (%.2fx predicted) at %.0f%% acceptance%s\n", best->k,
                r->n_modes > 1 ? ", " : "", r->n_modes > 1 ? sd_sampling_mode_name(best->mode) : "", best->speedup,
                best->predicted_speedup, 100 * best->acceptance, r->self_draft ? " (the self-draft bound)" : "");
    else if (r->best < 0) { /* neither a fixed k nor another strategy beats plain decoding */
        const sd_bench_k_result *top = NULL;
        for (int i = 0; i < r->n_k; i++)
            if (!top || r->k[i].speedup > top->speedup) top = &r->k[i];
        fprintf(f, "best:     none: plain decoding is fastest here");
        if (top) fprintf(f, " (best speculative: %s k=%d at %.2fx)", sd_bench_strategy_name(top->strategy), top->k, top->speedup);
        fprintf(f, "\n");
    }
    if (r->best >= 0 && r->best < r->n_k && r->best % nb >= nf) { /* a strategy beats every fixed k */
        const sd_bench_k_result *b = &r->k[r->best];
        fprintf(f, "best:     %s%s%s (k up to %d): %.2fx plain decoding at %.2f mean accepted length%s\n",
                sd_bench_strategy_name(b->strategy), r->n_modes > 1 ? ", " : "",
                r->n_modes > 1 ? sd_sampling_mode_name(b->mode) : "", b->k, b->speedup, b->mean_accepted,
                best ? ", ahead of every fixed k" : "");
    }
    for (int i = 0; i < nf; i++) {
        const sd_bench_k_result *k = &r->k[i];
        if (k->predicted_speedup > 0 && k->speedup < 0.8 * k->predicted_speedup) {
            fprintf(f, "reading:  at k=%d the measured speedup is %.0f%% of the predicted one: time outside the draft and\n"
                       "          verify forwards (sampling, the draft catching up on accepted tokens, bookkeeping) is\n"
                       "          large next to a forward pass of these models.\n",
                    k->k, 100 * k->speedup / k->predicted_speedup);
            break;
        }
    }
    /* The k that needs the least acceptance to pay for itself. */
    const sd_bench_k_result *easiest = NULL;
    for (int i = 0; i < nf; i++)
        if (!easiest || r->k[i].break_even_alpha < easiest->break_even_alpha) easiest = &r->k[i];
    if (easiest && easiest->break_even_alpha >= 1.0) {
        double vlo = 1e30, vhi = 0;
        for (int i = 0; i < nf; i++) {
            double v = r->t_decode_target_s > 0 ? r->k[i].t_verify_s / r->t_decode_target_s : 0;
            vlo = v < vlo ? v : vlo;
            vhi = v > vhi ? v : vhi;
        }
        fprintf(f, "reading:  even a draft that is always right cannot beat plain decoding here: verifying k+1 tokens\n"
                   "          costs %.2f..%.2f target steps and each draft token %.2f of one. Speculation pays when\n"
                   "          the target's decode step is bound by streaming its weights (verify ~ 1 step), not by\n"
                   "          per-pass compute and overhead as with models this small.\n",
                vlo, vhi, dr);
    } else if (easiest && r->cost_only && !r->self_draft)
        fprintf(f, "reading:  a real draft of this cost needs alpha >= %.2f (at k=%d, the cheapest) to beat plain decoding.\n",
                easiest->break_even_alpha, easiest->k);
    else if (easiest && !r->self_draft && easiest->alpha < easiest->break_even_alpha)
        fprintf(f, "reading:  at k=%d alpha %.2f is below the %.2f needed to break even: the draft is too slow for how\n"
                   "          often it is right.\n",
                easiest->k, easiest->alpha, easiest->break_even_alpha);
}
