/* `specdec bench` as library code: plain against speculative decoding over a sweep of draft
 * lengths, the cost model that predicts the speedup, and the report (struct, JSON, SVG, table). */
#ifndef SPECDEC_BENCH_REPORT_H
#define SPECDEC_BENCH_REPORT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "specdec/bench_config.h"
#include "specdec/model.h"
#include "specdec/spec.h"

#define SD_BENCH_SCHEMA "specdec-bench/2"
/* One result per fixed k, one per other strategy, for each of up to two sampling modes. */
#define SD_BENCH_MAX_VARIANTS (SD_MAX_DRAFT + SD_BENCH_N_STRATEGIES - 1)
#define SD_BENCH_MAX_RESULTS (2 * SD_BENCH_MAX_VARIANTS)
#define SD_BENCH_MAX_DIVERGENCES 16

/* ---- cost model (Leviathan et al. 2023, section 3.4, with measured costs) ---- */

/* Expected tokens per verify pass when each draft token is accepted with probability alpha
 * independently: (1 - alpha^(k+1)) / (1 - alpha); k + 1 at alpha = 1. */
double sd_bench_expected_tokens(double alpha, int k);

/* Predicted speedup over plain decoding: E(alpha, k) / (k * draft_ratio + verify_ratio), where
 * draft_ratio = T_decode(draft) / T_decode(target) and verify_ratio = T_verify(k+1) / T_decode(target). */
double sd_bench_predicted_speedup(double alpha, int k, double draft_ratio, double verify_ratio);

/* The alpha at which the predicted speedup is 1 (speculation breaks even); 1 when even alpha = 1
 * cannot pay for the draft and verify costs, 0 when any alpha wins. */
double sd_bench_break_even_alpha(int k, double draft_ratio, double verify_ratio);

/* Per-token acceptance probability from position counts (drafted_at/accepted_at of
 * sd_spec_stats, summed over runs): accepted / trials, where position i is a trial only when
 * positions 0..i-1 were accepted. Unlike accepted/drafted, this is the alpha of the formula. */
double sd_bench_alpha(const long *drafted_at, const long *accepted_at, int k);

/* ---- greedy check ---- */

/* Index of the first position where a[0..na) and b[0..nb) differ (a shorter sequence differs
 * at its end), or -1 when they are identical. */
int sd_bench_first_divergence(const int32_t *a, int na, const int32_t *b, int nb);

/* ---- report ---- */

typedef struct {
    sd_bench_strategy strategy;
    sd_sampling_mode mode;
    int prompt, k, rep; /* which run */
    int index;          /* first differing generated token */
    int32_t plain_token, spec_token; /* -1 where that output had already ended */
} sd_bench_divergence;

typedef struct {
    sd_bench_strategy strategy;
    sd_sampling_mode mode;    /* how the runs sampled (plain and speculative alike) */
    int k;                    /* the draft length (fixed), else the cap on it */
    int runs;                 /* speculative runs (prompts x repetitions) */
    double acceptance;        /* accepted / drafted, pooled over runs */
    double alpha;             /* per-token acceptance probability (sd_bench_alpha) */
    double tokens_per_pass;   /* measured: tokens generated / target passes (sd_spec_tokens_per_pass, pooled) */
    double mean_accepted;     /* 1 + accepted / verify passes (vLLM's mean acceptance length) */
    double expected_tokens;   /* E(alpha, k) */
    double accept_at[SD_MAX_DRAFT]; /* acceptance rate at draft position i (k entries) */
    double ttft_plain_s, ttft_spec_s; /* medians of the time to the first token (stats.h's ttft) */
    double tps_plain, tps_spec;       /* medians of decode tokens/s */
    double speedup;           /* median over runs of spec tokens/s / the paired plain run's */
    /* fixed k only (NAN for the others, whose draft length varies per pass): */
    double predicted_speedup; /* cost model at the measured alpha */
    double break_even_alpha;  /* alpha needed to beat plain decoding at this k */
    double t_verify_s;        /* T_verify(k+1) of the target */
    double draft_share, verify_share; /* of speculative wall time (median) */
    double kv_bytes_target, kv_bytes_draft; /* cache bytes in use at the end of a run */
    int diverged;             /* greedy runs whose output differed from plain decoding */
} sd_bench_k_result;

typedef struct {
    char schema[32];
    char config[512], name[128], description[512];
    char target[512], draft[512];  /* model paths */
    char target_label[128], draft_label[128]; /* short names: file name, or "random SHAPE (f32)" */
    char date[32];                 /* UTC, ISO 8601 */
    char cpu[256];                 /* CPU model from /proc/cpuinfo */
    int cores;                     /* online CPUs */
    int threads;
    double bandwidth;              /* bytes/s, streaming read */
    int cost_only;                 /* a model has random weights: acceptance means nothing */
    int self_draft;                /* the draft is the target */
    int greedy, quick;
    int constrained;               /* the config's "constraint": runs generate under a grammar */
    int n_prompts, n_predict, repetitions;
    double temperature, top_p;
    int top_k;
    double seed;                   /* a double so the JSON holds it exactly (< 2^53) */
    double cost_pos;               /* context length at which the costs were measured */
    double t_decode_target_s, t_decode_draft_s; /* T_decode(1) medians */
    double peak_rss_bytes;
    int n_modes;                   /* sampling modes run (1 or 2), each a block of results */
    sd_sampling_mode modes[2];
    int n_k;                       /* results: per mode, the fixed sweep first (k ascending), then the strategies */
    sd_bench_k_result k[SD_BENCH_MAX_RESULTS];
    int best_k;                    /* the fastest fixed k; 0 when plain decoding beats them all */
    int best;                      /* the fastest result of all; -1 when plain decoding is fastest */
    int n_divergences;             /* all of them; the first SD_BENCH_MAX_DIVERGENCES are listed */
    sd_bench_divergence div[SD_BENCH_MAX_DIVERGENCES];
} sd_bench_report;

/* The speculative generation a run uses: sd_spec_generate normally; tests plug in a broken
 * one to check that divergence from plain decoding is caught. */
typedef sd_status (*sd_bench_gen_fn)(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb,
                                     void *user, sd_spec_stats *stats, void *hook_user);

typedef struct {
    const sd_bench_config *cfg;
    sd_model *target, *draft;  /* draft may equal target (self-drafting) */
    char *const *prompts;      /* the prompt texts */
    int n_prompts;
    int cost_only, quick;
    int threads;               /* every context's (sd_context_params.n_threads), and the report's */
    double bandwidth;          /* bytes/s for the report (sd_bench_bandwidth), 0 if unmeasured */
    sd_bench_gen_fn spec_generate; /* NULL: sd_spec_generate */
    void *hook_user;
    /* Called before each run: done of total runs, and what runs next. */
    void (*progress)(int done, int total, const char *what, void *user);
    void *progress_user;
    volatile sig_atomic_t *stop_flag; /* nonzero: stop (SD_ERR_INTERRUPTED) */
} sd_bench_run_params;

/* Runs the sweep: for each k, each prompt, `repetitions` alternating plain and speculative
 * generations with the same seed; medians; greedy outputs compared token by token; the cost
 * model measured with sd_bench_forward. Divergence is not an error: it is counted in the
 * report (the caller fails on it). Fills everything but the machine fields cpu/cores. */
sd_status sd_bench_run(const sd_bench_run_params *p, sd_bench_report *out);

/* CPU model and online cores. */
void sd_bench_machine(char *cpu, size_t cap, int *cores);

/* The report as JSON (schema SD_BENCH_SCHEMA): malloc'd; NULL on failure. */
char *sd_bench_report_json(const sd_bench_report *r);

/* Hand-written SVG: speedup (measured and predicted) and acceptance rate against k, with plain
 * decoding as the line y = 1. malloc'd; NULL on failure. */
char *sd_bench_report_svg(const sd_bench_report *r);

/* The table and the reading of it (machine, costs, per-k figures, recommendation). */
void sd_bench_report_print(const sd_bench_report *r, FILE *f);

#endif
