/* Reads a bench report back from its JSON (tests only: they check that what sd_bench_report_json
 * writes holds every field, typed, under its documented name). */
#include "sdtest_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "specdec/status.h"

/* Reading back: every field is required and typed; the first problem names its path. */
typedef struct {
    sd_status st;
    char path[128];
} rd;

static const cJSON *item(rd *c, const cJSON *o, const char *key, int (*is)(const cJSON *), const char *what) {
    if (c->st) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || !is(v)) {
        c->st = sd_fail(SD_ERR_FORMAT, "bench report: %s.%s: expected %s", c->path, key, what);
        return NULL;
    }
    return v;
}
static double num(rd *c, const cJSON *o, const char *key) {
    const cJSON *v = item(c, o, key, cJSON_IsNumber, "a number");
    return v ? v->valuedouble : 0;
}
static int inum(rd *c, const cJSON *o, const char *key) { return (int)num(c, o, key); }
static void str(rd *c, const cJSON *o, const char *key, char *dst, size_t cap);
static int is_num_or_null(const cJSON *v) { return cJSON_IsNumber(v) || cJSON_IsNull(v); }
/* A number that is null where it does not apply (the cost model of a variable draft length). */
static double num_or_nan(rd *c, const cJSON *o, const char *key) {
    const cJSON *v = item(c, o, key, is_num_or_null, "a number or null");
    return v && cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
static sd_bench_strategy strategy(rd *c, const cJSON *o) {
    char s[32] = "";
    str(c, o, "strategy", s, sizeof s);
    for (int i = 0; i < SD_BENCH_N_STRATEGIES; i++)
        if (!strcmp(s, sd_bench_strategy_name((sd_bench_strategy)i))) return (sd_bench_strategy)i;
    if (!c->st) c->st = sd_fail(SD_ERR_FORMAT, "bench report: %s.strategy: unknown strategy '%s'", c->path, s);
    return SD_BENCH_FIXED;
}
static sd_sampling_mode mode_of(rd *c, const cJSON *o, const char *key) {
    char s[32] = "";
    str(c, o, key, s, sizeof s);
    sd_sampling_mode m = SD_SAMPLING_DEFAULT;
    if (!c->st && sd_sampling_mode_from_name(s, &m) != SD_OK)
        c->st = sd_fail(SD_ERR_FORMAT, "bench report: %s.%s: unknown sampling mode '%s'", c->path, key, s);
    return m;
}
static int boolean(rd *c, const cJSON *o, const char *key) {
    const cJSON *v = item(c, o, key, cJSON_IsBool, "true or false");
    return v ? cJSON_IsTrue(v) : 0;
}
static void str(rd *c, const cJSON *o, const char *key, char *dst, size_t cap) {
    const cJSON *v = item(c, o, key, cJSON_IsString, "a string");
    if (v) snprintf(dst, cap, "%s", v->valuestring);
}
static const cJSON *obj(rd *c, const cJSON *o, const char *key) { return item(c, o, key, cJSON_IsObject, "an object"); }
static const cJSON *arr(rd *c, const cJSON *o, const char *key) { return item(c, o, key, cJSON_IsArray, "an array"); }

sd_status sdtest_bench_report_from_json(const char *text, sd_bench_report *r) {
    memset(r, 0, sizeof *r);
    cJSON *o = cJSON_Parse(text);
    if (!o) return sd_fail(SD_ERR_FORMAT, "bench report: invalid JSON");
    rd c = {SD_OK, ""};
    if (!cJSON_IsObject(o)) c.st = sd_fail(SD_ERR_FORMAT, "bench report: expected an object");
    str(&c, o, "schema", r->schema, sizeof r->schema);
    if (!c.st && strcmp(r->schema, SD_BENCH_SCHEMA) != 0)
        c.st = sd_fail(SD_ERR_UNSUPPORTED, "bench report: schema '%s', expected '%s'", r->schema, SD_BENCH_SCHEMA);
    str(&c, o, "config", r->config, sizeof r->config);
    str(&c, o, "name", r->name, sizeof r->name);
    str(&c, o, "description", r->description, sizeof r->description);
    str(&c, o, "date", r->date, sizeof r->date);
    const cJSON *pair = obj(&c, o, "pair");
    snprintf(c.path, sizeof c.path, ".pair");
    str(&c, pair, "target", r->target, sizeof r->target);
    str(&c, pair, "draft", r->draft, sizeof r->draft);
    str(&c, pair, "target_label", r->target_label, sizeof r->target_label);
    str(&c, pair, "draft_label", r->draft_label, sizeof r->draft_label);
    r->cost_only = boolean(&c, pair, "cost_only");
    r->self_draft = boolean(&c, pair, "self_draft");
    c.path[0] = 0;
    const cJSON *m = obj(&c, o, "machine");
    snprintf(c.path, sizeof c.path, ".machine");
    str(&c, m, "cpu", r->cpu, sizeof r->cpu);
    r->cores = inum(&c, m, "cores");
    r->threads = inum(&c, m, "threads");
    r->bandwidth = num(&c, m, "bandwidth_bytes_per_s");
    c.path[0] = 0;
    const cJSON *run = obj(&c, o, "run");
    snprintf(c.path, sizeof c.path, ".run");
    r->quick = boolean(&c, run, "quick");
    r->n_prompts = inum(&c, run, "prompts");
    r->n_predict = inum(&c, run, "n_predict");
    r->repetitions = inum(&c, run, "repetitions");
    r->greedy = boolean(&c, run, "greedy");
    r->constrained = boolean(&c, run, "constrained");
    r->temperature = num(&c, run, "temperature");
    r->top_k = inum(&c, run, "top_k");
    r->top_p = num(&c, run, "top_p");
    r->seed = num(&c, run, "seed");
    const cJSON *modes = arr(&c, run, "sampling_modes");
    for (const cJSON *mo = modes ? modes->child : NULL; mo && r->n_modes < 2 && !c.st; mo = mo->next) {
        if (!cJSON_IsString(mo) || sd_sampling_mode_from_name(mo->valuestring, &r->modes[r->n_modes]) != SD_OK)
            c.st = sd_fail(SD_ERR_FORMAT, "bench report: .run.sampling_modes: expected mode names");
        r->n_modes++;
    }
    c.path[0] = 0;
    const cJSON *cost = obj(&c, o, "costs");
    snprintf(c.path, sizeof c.path, ".costs");
    r->cost_pos = num(&c, cost, "context");
    r->t_decode_target_s = num(&c, cost, "t_decode_target_s");
    r->t_decode_draft_s = num(&c, cost, "t_decode_draft_s");
    c.path[0] = 0;
    const cJSON *res = arr(&c, o, "results");
    if (!c.st && cJSON_GetArraySize(res) > SD_BENCH_MAX_RESULTS)
        c.st = sd_fail(SD_ERR_FORMAT, "bench report: .results: more than %d entries", SD_BENCH_MAX_RESULTS);
    int i = 0;
    for (const cJSON *e = res ? res->child : NULL; e && !c.st; e = e->next, i++) {
        sd_bench_k_result *k = &r->k[i];
        snprintf(c.path, sizeof c.path, ".results[%d]", i);
        if (!cJSON_IsObject(e)) {
            c.st = sd_fail(SD_ERR_FORMAT, "bench report: %s: expected an object", c.path);
            break;
        }
        k->strategy = strategy(&c, e);
        k->mode = mode_of(&c, e, "sampling_mode");
        k->k = inum(&c, e, "k");
        k->runs = inum(&c, e, "runs");
        k->acceptance = num(&c, e, "acceptance_rate");
        k->alpha = num(&c, e, "alpha");
        k->tokens_per_pass = num(&c, e, "tokens_per_pass");
        k->mean_accepted = num(&c, e, "mean_accepted_length");
        k->expected_tokens = num(&c, e, "expected_tokens_per_pass");
        const cJSON *a = arr(&c, e, "acceptance_by_position");
        int j = 0;
        for (const cJSON *x = a ? a->child : NULL; x && j < SD_MAX_DRAFT; x = x->next, j++)
            k->accept_at[j] = cJSON_IsNumber(x) ? x->valuedouble : 0;
        k->ttft_plain_s = num(&c, e, "ttft_plain_s");
        k->ttft_spec_s = num(&c, e, "ttft_spec_s");
        k->tps_plain = num(&c, e, "tokens_per_s_plain");
        k->tps_spec = num(&c, e, "tokens_per_s_spec");
        k->speedup = num(&c, e, "speedup");
        k->predicted_speedup = num_or_nan(&c, e, "predicted_speedup");
        k->break_even_alpha = num_or_nan(&c, e, "break_even_alpha");
        k->t_verify_s = num_or_nan(&c, e, "t_verify_s");
        k->draft_share = num(&c, e, "draft_time_share");
        k->verify_share = num(&c, e, "verify_time_share");
        k->kv_bytes_target = num(&c, e, "kv_bytes_target");
        k->kv_bytes_draft = num(&c, e, "kv_bytes_draft");
        k->diverged = inum(&c, e, "greedy_divergences");
    }
    r->n_k = i;
    c.path[0] = 0;
    r->best_k = inum(&c, o, "best_k");
    r->best = inum(&c, o, "best_result");
    r->peak_rss_bytes = num(&c, o, "peak_rss_bytes");
    const cJSON *dv = obj(&c, o, "divergences");
    snprintf(c.path, sizeof c.path, ".divergences");
    r->n_divergences = inum(&c, dv, "count");
    const cJSON *first = arr(&c, dv, "first");
    i = 0;
    for (const cJSON *e = first ? first->child : NULL; e && !c.st && i < SD_BENCH_MAX_DIVERGENCES; e = e->next, i++) {
        snprintf(c.path, sizeof c.path, ".divergences.first[%d]", i);
        r->div[i].strategy = strategy(&c, e);
        r->div[i].mode = mode_of(&c, e, "sampling_mode");
        r->div[i].prompt = inum(&c, e, "prompt");
        r->div[i].k = inum(&c, e, "k");
        r->div[i].rep = inum(&c, e, "rep");
        r->div[i].index = inum(&c, e, "index");
        r->div[i].plain_token = inum(&c, e, "plain_token");
        r->div[i].spec_token = inum(&c, e, "spec_token");
    }
    cJSON_Delete(o);
    return c.st;
}
