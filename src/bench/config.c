/* Bench configs: read strictly (core/json: every error names the file, the JSON path, what was
 * expected and what was found), prompt files, and the cache of generated random models and
 * cost twins. */
#include "specdec/bench_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/io.h"
#include "core/json.h"
#include "specdec/quant.h"
#include "specdec/twin.h"
#include "specdec/types.h"

#define MAX_SEED 9007199254740992.0 /* 2^53: seeds stay exact in the JSON report */

/* "generate" (a random model) or "twin" (a cost twin of "of"): a shape with optional size
 * overrides, "type" and "seed". A twin keeps its small model's vocabulary and context, so it
 * takes "of" and "tokenizer" instead of "vocab", "ctx" and "tied". */
static sd_status parse_generate(sd_json_ctx *c, const cJSON *g, int twin, sd_bench_model_spec *m) {
    static const char *const gen_keys[] = {"shape", "arch", "head_dim", "type", "seed", "dim", "layers", "heads", "kv_heads",
                                           "hidden", "vocab", "ctx", "tied", NULL};
    static const char *const twin_keys[] = {"of", "tokenizer", "shape", "type", "seed", "dim", "layers", "heads",
                                            "kv_heads", "hidden", NULL};
    sd_status st;
    if ((st = sd_json_check_keys(c, g, twin ? twin_keys : gen_keys))) return st;
    if (twin) {
        if (!cJSON_GetObjectItemCaseSensitive(g, "of")) return sd_json_missing(c, "of");
        if ((st = sd_json_str(c, g, "of", &m->twin_of)) || (st = sd_json_str(c, g, "tokenizer", &m->twin_tokenizer)))
            return st;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(g, "shape");
    if (!shape) return sd_json_missing(c, "shape");
    if ((st = sd_json_str(c, g, "shape", &m->shape))) return st;
    m->synth = sd_synth_default_params();
    m->synth.seed = 1;
    if (sd_synth_shape(m->shape, &m->synth) != SD_OK) {
        size_t n = sd_json_enter_key(c, "shape");
        st = sd_json_expected(c, "one of " SD_SYNTH_SHAPES, shape);
        sd_json_leave(c, n);
        return st;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(g, "type");
    if (type) {
        size_t n = sd_json_enter_key(c, "type");
        const int t = cJSON_IsString(type) ? sd_type_from_name(type->valuestring) : -1;
        if (t >= 0) m->synth.wtype = (uint32_t)t;
        else st = sd_json_expected(c, "one of \"f32\", \"f16\", \"bf16\", \"q8_0\", \"q4_0\", \"q5_0\", \"q4_k\", \"q6_k\"", type);
        sd_json_leave(c, n);
        if (st) return st;
    }
    double seed = (double)m->synth.seed;
    int tied = m->synth.tied_output;
    if ((st = sd_json_num(c, g, "seed", 0, MAX_SEED, 0, &seed))) return st;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(g, "seed");
    if (sv && seed != floor(seed)) {
        size_t n = sd_json_enter_key(c, "seed");
        st = sd_json_expected(c, "an integer in 0..2^53", sv);
        sd_json_leave(c, n);
        return st;
    }
    m->synth.seed = (uint64_t)seed;
    const long big = 1 << 20;
    if ((st = sd_json_int(c, g, "dim", 1, big, &m->synth.dim)) || (st = sd_json_int(c, g, "layers", 1, big, &m->synth.n_layers)) ||
        (st = sd_json_int(c, g, "heads", 1, big, &m->synth.n_heads)) ||
        (st = sd_json_int(c, g, "kv_heads", 1, big, &m->synth.n_kv_heads)) ||
        (st = sd_json_int(c, g, "hidden", 1, big, &m->synth.hidden_dim)) ||
        (st = sd_json_int(c, g, "vocab", 3, big, &m->synth.vocab_size)) || (st = sd_json_int(c, g, "ctx", 2, big, &m->synth.ctx_len)) ||
        (st = sd_json_bool(c, g, "tied", &tied)) || (st = sd_json_int(c, g, "head_dim", 2, 65536, &m->synth.head_dim)))
        return st;
    m->synth.tied_output = tied;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(g, "arch");
    if (arch) {
        if ((st = sd_json_str(c, g, "arch", &m->arch))) return st;
        if (strcmp(m->arch, "llama") && strcmp(m->arch, "qwen2") && strcmp(m->arch, "qwen3")) {
            size_t n = sd_json_enter_key(c, "arch");
            st = sd_json_expected(c, "one of \"llama\", \"qwen2\", \"qwen3\"", arch);
            sd_json_leave(c, n);
            return st;
        }
        m->synth.arch = m->arch;
    }
    if (sd_synth_validate(&m->synth) != SD_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", sd_last_error());
        return sd_fail(SD_ERR_INVALID_ARG, "%s: %s: not a buildable shape: %s", c->file, c->path, why);
    }
    if (twin) m->twin = 1;
    else m->generated = 1;
    return SD_OK;
}

static sd_status parse_model(sd_json_ctx *c, const cJSON *root, const char *key, sd_bench_model_spec *m) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, key, 1, &o))) return st;
    size_t n = sd_json_enter_key(c, key);
    static const char *const keys[] = {"model", "tokenizer", "generate", "twin", "quantize", NULL};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(o, "generate");
    const cJSON *twin = cJSON_GetObjectItemCaseSensitive(o, "twin");
    const char *made = gen ? "generate" : "twin"; /* the key of a model the bench writes itself */
    if ((st = sd_json_check_keys(c, o, keys))) goto out;
    if (!!model + !!gen + !!twin > 1) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s: give one of \"model\", \"generate\" and \"twin\"", c->file, c->path);
        goto out;
    }
    if (!model && !gen && !twin) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s: missing required key \"model\" (or \"generate\" or \"twin\")", c->file,
                     c->path);
        goto out;
    }
    if ((gen || twin) && cJSON_GetObjectItemCaseSensitive(o, "tokenizer")) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s.tokenizer: a %s model has its own vocabulary; remove \"tokenizer\"%s",
                     c->file, c->path, gen ? "generated" : "twin", twin ? " (twin.tokenizer is the small model's)" : "");
        goto out;
    }
    const cJSON *quant = cJSON_GetObjectItemCaseSensitive(o, "quantize");
    if ((gen || twin) && quant) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s.quantize: a %s model takes its type from %s.type", c->file, c->path,
                     gen ? "generated" : "twin", made);
        goto out;
    }
    if (quant) {
        size_t n2 = sd_json_enter_key(c, "quantize");
        const int t = cJSON_IsString(quant) ? sd_type_from_name(quant->valuestring) : -1;
        if (t < 0 || !sd_quant_can_write((sd_type)t))
            st = sd_json_expected(c, "one of \"f32\", \"f16\", \"bf16\", \"q8_0\", \"q4_0\", \"q5_0\", \"q4_k\", \"q6_k\"", quant);
        sd_json_leave(c, n2);
        if (st) goto out;
    }
    if ((st = sd_json_str(c, o, "model", &m->model)) || (st = sd_json_str(c, o, "tokenizer", &m->tokenizer)) ||
        (st = sd_json_str(c, o, "quantize", &m->quantize)))
        goto out;
    if (gen || twin) {
        const cJSON *g;
        if ((st = sd_json_obj(c, o, made, 1, &g))) goto out;
        size_t n2 = sd_json_enter_key(c, made);
        st = parse_generate(c, g, twin != NULL, m);
        sd_json_leave(c, n2);
    }
out:
    sd_json_leave(c, n);
    return st;
}

static sd_status parse_prompts(sd_json_ctx *c, const cJSON *root, sd_bench_config *cf) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, "prompts", 1, &o))) return st;
    size_t n = sd_json_enter_key(c, "prompts");
    static const char *const keys[] = {"text", "file", "count", "first_sentence", "template", NULL};
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, "text");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(o, "file");
    if ((st = sd_json_check_keys(c, o, keys))) goto out;
    if (text && file) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s: give \"text\" or \"file\", not both", c->file, c->path);
        goto out;
    }
    if (!text && !file) {
        st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s: missing required key \"text\" (or \"file\")", c->file, c->path);
        goto out;
    }
    if ((st = sd_json_str(c, o, "template", &cf->prompt_template))) goto out;
    if (cf->prompt_template && !strstr(cf->prompt_template, "{text}") && !strstr(cf->prompt_template, "{first_sentence}")) {
        size_t n2 = sd_json_enter_key(c, "template");
        st = sd_json_expected(c, "a template holding {text} or {first_sentence}",
                              cJSON_GetObjectItemCaseSensitive(o, "template"));
        sd_json_leave(c, n2);
        goto out;
    }
    if (text) {
        if (cJSON_GetObjectItemCaseSensitive(o, "count") || cJSON_GetObjectItemCaseSensitive(o, "first_sentence")) {
            st = sd_fail(SD_ERR_INVALID_ARG, "%s: %s: \"count\" and \"first_sentence\" go with \"file\", not \"text\"",
                         c->file, c->path);
            goto out;
        }
        size_t n2 = sd_json_enter_key(c, "text");
        int len = cJSON_GetArraySize(text);
        if (!cJSON_IsArray(text) || len < 1 || len > 10000) {
            st = sd_json_expected(c, "an array of 1..10000 prompt strings", text);
            sd_json_leave(c, n2);
            goto out;
        }
        cf->prompts = calloc((size_t)len, sizeof(char *));
        if (!cf->prompts) st = sd_fail(SD_ERR_NOMEM, "out of memory");
        int i = 0;
        for (const cJSON *it = text->child; it && !st; it = it->next, i++) {
            size_t n3 = sd_json_enter_index(c, i);
            if (!cJSON_IsString(it) || !it->valuestring[0]) st = sd_json_expected(c, "a non-empty string", it);
            else if (!(cf->prompts[i] = strdup(it->valuestring))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
            else cf->n_prompts = i + 1;
            sd_json_leave(c, n3);
        }
        sd_json_leave(c, n2);
    } else {
        if ((st = sd_json_str(c, o, "file", &cf->prompt_file)) ||
            (st = sd_json_int(c, o, "count", 1, 100000, &cf->prompt_count)) ||
            (st = sd_json_bool(c, o, "first_sentence", &cf->first_sentence)))
            goto out;
    }
out:
    sd_json_leave(c, n);
    return st;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static const char *const k_strategy_names[SD_BENCH_N_STRATEGIES] = {
    "fixed", "adaptive", "p_min", "ngram", "model+ngram", "tree", "unconstrained", "no-grammar-drafts"};

const char *sd_bench_strategy_name(sd_bench_strategy s) {
    return (unsigned)s < SD_BENCH_N_STRATEGIES ? k_strategy_names[s] : "?";
}

static sd_status parse_strategies(sd_json_ctx *c, const cJSON *o, sd_bench_config *cf) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "strategies");
    if (!a) return SD_OK;
    size_t n = sd_json_enter_key(c, "strategies");
    sd_status st = SD_OK;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1) st = sd_json_expected(c, "a non-empty array of strategies", a);
    cf->n_strategies = 0;
    int i = 0;
    for (const cJSON *it = st ? NULL : a->child; it && !st; it = it->next, i++) {
        size_t n2 = sd_json_enter_index(c, i);
        int found = -1;
        for (int s = 0; s < SD_BENCH_N_STRATEGIES; s++)
            if (cJSON_IsString(it) && !strcmp(it->valuestring, k_strategy_names[s])) found = s;
        if (found < 0)
            st = sd_json_expected(c,
                                  "one of \"fixed\", \"adaptive\", \"p_min\", \"ngram\", \"model+ngram\", \"tree\", "
                                  "\"unconstrained\", \"no-grammar-drafts\"",
                                  it);
        for (int j = 0; j < cf->n_strategies && !st; j++)
            if ((int)cf->strategies[j] == found) st = sd_json_expected(c, "a strategy not listed before", it);
        if (!st) cf->strategies[cf->n_strategies++] = (sd_bench_strategy)found;
        sd_json_leave(c, n2);
    }
    sd_json_leave(c, n);
    return st;
}

static sd_status parse_sweep(sd_json_ctx *c, const cJSON *root, sd_bench_config *cf) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, "sweep", 1, &o))) return st;
    size_t n = sd_json_enter_key(c, "sweep");
    static const char *const keys[] = {"k", "strategies", "tree_budget", "p_min", NULL};
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "k");
    double p_min = cf->p_min;
    if ((st = sd_json_check_keys(c, o, keys)) || (st = parse_strategies(c, o, cf)) ||
        (st = sd_json_int(c, o, "tree_budget", 1, SD_MAX_DRAFT, &cf->tree_budget)) ||
        (st = sd_json_num(c, o, "p_min", 0, 1, 0, &p_min)))
        goto out;
    cf->p_min = (float)p_min;
    if (!k) {
        st = sd_json_missing(c, "k");
        goto out;
    }
    size_t n2 = sd_json_enter_key(c, "k");
    int len = cJSON_GetArraySize(k);
    if (!cJSON_IsArray(k) || len < 1 || len > SD_MAX_DRAFT) {
        char what[64];
        snprintf(what, sizeof what, "an array of 1..%d draft lengths", SD_MAX_DRAFT);
        st = sd_json_expected(c, what, k);
    }
    int i = 0;
    for (const cJSON *it = k->child; it && !st; it = it->next, i++) {
        size_t n3 = sd_json_enter_index(c, i);
        char what[64];
        snprintf(what, sizeof what, "an integer in 1..%d", SD_MAX_DRAFT);
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
            it->valuedouble > SD_MAX_DRAFT)
            st = sd_json_expected(c, what, it);
        else {
            int v = (int)it->valuedouble;
            for (int j = 0; j < cf->n_k && !st; j++)
                if (cf->k[j] == v) st = sd_json_expected(c, "a draft length not listed before", it);
            if (!st) cf->k[cf->n_k++] = v;
        }
        sd_json_leave(c, n3);
    }
    sd_json_leave(c, n2);
    /* The chart and the table read left to right in k. */
    if (!st) qsort(cf->k, (size_t)cf->n_k, sizeof cf->k[0], cmp_int);
out:
    sd_json_leave(c, n);
    return st;
}

/* "constraint": a JSON Schema (a path, or the schema itself) or a GBNF file, and the whitespace. */
static sd_status parse_constraint(sd_json_ctx *c, const cJSON *root, sd_bench_config *cf) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, "constraint", 0, &o)) || !o) return st;
    size_t n = sd_json_enter_key(c, "constraint");
    static const char *const keys[] = {"json_schema", "gbnf", "whitespace", NULL};
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(o, "json_schema"), *g = cJSON_GetObjectItemCaseSensitive(o, "gbnf");
    char *ws = NULL;
    if ((st = sd_json_check_keys(c, o, keys)) || (st = sd_json_str(c, o, "whitespace", &ws))) goto out;
    if (!js == !g) {
        st = sd_json_expected(c, "exactly one of \"json_schema\" and \"gbnf\"", o);
        goto out;
    }
    if (ws && strcmp(ws, "bounded") != 0 && strcmp(ws, "compact") != 0) {
        size_t n2 = sd_json_enter_key(c, "whitespace");
        st = sd_json_expected(c, "\"bounded\" or \"compact\"", cJSON_GetObjectItemCaseSensitive(o, "whitespace"));
        sd_json_leave(c, n2);
        goto out;
    }
    cf->constraint_compact = ws && !strcmp(ws, "compact");
    if (g) {
        cf->constraint_gbnf = 1;
        st = sd_json_str(c, o, "gbnf", &cf->constraint_file);
    } else if (cJSON_IsString(js)) {
        st = sd_json_str(c, o, "json_schema", &cf->constraint_file);
    } else if (cJSON_IsObject(js) || cJSON_IsBool(js)) {
        if (!(cf->constraint_schema = cJSON_PrintUnformatted(js))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
    } else {
        size_t n2 = sd_json_enter_key(c, "json_schema");
        st = sd_json_expected(c, "a schema file's path or a schema", js);
        sd_json_leave(c, n2);
    }
out:
    free(ws);
    sd_json_leave(c, n);
    return st;
}

/* "mode": a sampling mode's name, or an array of one or two different ones. */
static sd_status parse_modes(sd_json_ctx *c, const cJSON *o, sd_bench_config *cf) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (!m) return SD_OK;
    size_t n = sd_json_enter_key(c, "mode");
    sd_status st = SD_OK;
    const int arr = cJSON_IsArray(m);
    if (!cJSON_IsString(m) && !(arr && cJSON_GetArraySize(m) >= 1 && cJSON_GetArraySize(m) <= 2))
        st = sd_json_expected(c, "\"coupled\", \"rejection\" or an array of one or both", m);
    cf->n_modes = 0;
    for (const cJSON *it = arr ? m->child : m; !st && it; it = arr ? it->next : NULL) {
        sd_sampling_mode mode;
        if (!cJSON_IsString(it) || sd_sampling_mode_from_name(it->valuestring, &mode) != SD_OK ||
            (cf->n_modes == 1 && cf->modes[0] == mode)) {
            st = sd_json_expected(c, cf->n_modes ? "the other mode" : "\"coupled\" or \"rejection\"", it);
            break;
        }
        cf->modes[cf->n_modes++] = mode;
    }
    sd_json_leave(c, n);
    return st;
}

static sd_status parse_sampling(sd_json_ctx *c, const cJSON *root, sd_bench_config *cf) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, "sampling", 0, &o)) || !o) return st;
    size_t n = sd_json_enter_key(c, "sampling");
    static const char *const keys[] = {"temperature", "top_k", "top_p", "seed", "mode", NULL};
    double t = cf->sampling.temperature, p = cf->sampling.top_p, seed = (double)cf->sampling.seed;
    if ((st = sd_json_check_keys(c, o, keys)) || (st = parse_modes(c, o, cf)) ||
        (st = sd_json_num(c, o, "temperature", 0, 1000, 0, &t)) ||
        (st = sd_json_int(c, o, "top_k", 0, 1 << 24, &cf->sampling.top_k)) || (st = sd_json_num(c, o, "top_p", 0, 1, 1, &p)) ||
        (st = sd_json_num(c, o, "seed", 0, MAX_SEED, 0, &seed)))
        goto out;
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (sv && seed != floor(seed)) {
        size_t n2 = sd_json_enter_key(c, "seed");
        st = sd_json_expected(c, "an integer in 0..2^53", sv);
        sd_json_leave(c, n2);
        goto out;
    }
    cf->sampling.temperature = (float)t;
    cf->sampling.top_p = (float)p;
    cf->sampling.seed = (uint64_t)seed;
out:
    sd_json_leave(c, n);
    return st;
}

static sd_status parse_output(sd_json_ctx *c, const cJSON *root, sd_bench_config *cf) {
    const cJSON *o;
    sd_status st;
    if ((st = sd_json_obj(c, root, "output", 0, &o)) || !o) return st;
    size_t n = sd_json_enter_key(c, "output");
    static const char *const keys[] = {"json", "svg", NULL};
    if (!(st = sd_json_check_keys(c, o, keys)) && !(st = sd_json_str(c, o, "json", &cf->out_json)))
        st = sd_json_str(c, o, "svg", &cf->out_svg);
    sd_json_leave(c, n);
    return st;
}

/* "configs/x.json" -> "x" */
static char *base_name(const char *file) {
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".json")) n -= 5;
    return strndup(b, n);
}

sd_status sd_bench_config_parse(const char *text, size_t len, const char *file, sd_bench_config *cf) {
    memset(cf, 0, sizeof *cf);
    sd_json_ctx c = sd_json_ctx_make(file, SD_ERR_INVALID_ARG, 0);
    cJSON *root = NULL;
    sd_status st = sd_json_parse(text, len, file, &root);
    if (st) return st;
    if (!cJSON_IsObject(root)) {
        st = sd_json_expected(&c, "an object", root);
        goto out;
    }
    static const char *const keys[] = {"name",     "description", "target",  "draft",       "prompts", "n_predict",
                                       "ignore_eos", "sweep",     "sampling", "constraint", "threads", "repetitions",
                                       "output",   NULL};
    if ((st = sd_json_check_keys(&c, root, keys))) goto out;
    cf->file = strdup(file);
    cf->prompt_count = 4;
    cf->n_predict = 128;
    cf->ignore_eos = 1;
    cf->sampling = sd_sampler_default_params();
    cf->modes[0] = cf->sampling.mode;
    cf->n_modes = 1;
    cf->repetitions = 3;
    cf->strategies[0] = SD_BENCH_FIXED;
    cf->n_strategies = 1;
    cf->tree_budget = 16;
    cf->p_min = 0.75f;
    if (!cf->file) {
        st = sd_fail(SD_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = sd_json_str(&c, root, "name", &cf->name)) || (st = sd_json_str(&c, root, "description", &cf->description)) ||
        (st = parse_model(&c, root, "target", &cf->target)) || (st = parse_model(&c, root, "draft", &cf->draft)) ||
        (st = parse_prompts(&c, root, cf)) || (st = sd_json_int(&c, root, "n_predict", 1, 1 << 16, &cf->n_predict)) ||
        (st = sd_json_bool(&c, root, "ignore_eos", &cf->ignore_eos)) || (st = parse_sweep(&c, root, cf)) ||
        (st = parse_sampling(&c, root, cf)) || (st = parse_constraint(&c, root, cf)) ||
        (st = sd_json_int(&c, root, "threads", 0, 1024, &cf->threads)) ||
        (st = sd_json_int(&c, root, "repetitions", 1, 1000, &cf->repetitions)) || (st = parse_output(&c, root, cf)))
        goto out;
    for (int i = 0; !st && i < cf->n_strategies; i++)
        if ((cf->strategies[i] == SD_BENCH_UNCONSTRAINED || cf->strategies[i] == SD_BENCH_NO_GRAMMAR_DRAFTS) &&
            !cf->constraint_schema && !cf->constraint_file)
            st = sd_fail(SD_ERR_INVALID_ARG, "%s: .sweep.strategies: \"%s\" compares against a \"constraint\", and there is none",
                         file, sd_bench_strategy_name(cf->strategies[i]));
    if (!st && !cf->name && !(cf->name = base_name(file))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
    char buf[1024];
    if (!st && !cf->out_json) {
        snprintf(buf, sizeof buf, "docs/benchmarks/%s.json", cf->name);
        if (!(cf->out_json = strdup(buf))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    if (!st && !cf->out_svg) {
        snprintf(buf, sizeof buf, "docs/benchmarks/%s.svg", cf->name);
        if (!(cf->out_svg = strdup(buf))) st = sd_fail(SD_ERR_NOMEM, "out of memory");
    }
out:
    cJSON_Delete(root);
    if (st) sd_bench_config_free(cf);
    return st;
}

/* A text file of the bench (config, prompts), the failure named as "PATH: cannot read the WHAT". */
static sd_status read_text(const char *path, const char *what, char **text, size_t *len) {
    sd_status st = sd_file_read(path, (size_t)256 << 20, text, len);
    if (st == SD_OK) return SD_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", sd_last_error());
    return sd_fail(st, "%s: cannot read the %s (%s)", path, what, why);
}

sd_status sd_bench_config_load(const char *path, sd_bench_config *out) {
    memset(out, 0, sizeof *out);
    size_t len = 0;
    char *text = NULL;
    sd_status st = read_text(path, "config", &text, &len);
    if (st != SD_OK) return st;
    st = sd_bench_config_parse(text, len, path, out);
    free(text);
    return st;
}

static void free_model(sd_bench_model_spec *m) {
    free(m->model);
    free(m->tokenizer);
    free(m->quantize);
    free(m->shape);
    free(m->arch);
    free(m->twin_of);
    free(m->twin_tokenizer);
}

void sd_bench_config_free(sd_bench_config *c) {
    if (!c) return;
    free(c->file);
    free(c->name);
    free(c->description);
    free_model(&c->target);
    free_model(&c->draft);
    sd_bench_free_prompts(c->prompts, c->n_prompts);
    free(c->prompt_file);
    free(c->prompt_template);
    free(c->out_json);
    free(c->out_svg);
    free(c->constraint_schema);
    free(c->constraint_file);
    memset(c, 0, sizeof *c);
}

void sd_bench_free_prompts(char **p, int n) {
    if (!p) return;
    for (int i = 0; i < n; i++) free(p[i]);
    free(p);
}

/* Cuts s after its first sentence: the first . ! or ? followed by a space or the end
 * (closing quotes stay with it). */
static void first_sentence(char *s) {
    for (char *p = s; *p; p++) {
        if (*p != '.' && *p != '!' && *p != '?') continue;
        char *e = p + 1;
        while (*e == '"' || *e == '\'') e++;
        if (*e == ' ' || *e == 0) {
            *e = 0;
            return;
        }
    }
}

sd_status sd_bench_apply_template(const char *tmpl, char **prompts, int n) {
    for (int i = 0; tmpl && i < n; i++) {
        char *first = strdup(prompts[i]);
        if (!first) return sd_fail(SD_ERR_NOMEM, "out of memory");
        first_sentence(first);
        /* the length: the template with each placeholder replaced */
        size_t len = 0;
        for (int pass = 0; pass < 2; pass++) {
            char *out = pass ? malloc(len + 1) : NULL;
            if (pass && !out) {
                free(first);
                return sd_fail(SD_ERR_NOMEM, "out of memory");
            }
            size_t o = 0;
            for (const char *t = tmpl; *t;) {
                const char *rep = NULL;
                size_t skip = 0;
                if (!strncmp(t, "{text}", 6)) rep = prompts[i], skip = 6;
                else if (!strncmp(t, "{first_sentence}", 16)) rep = first, skip = 16;
                size_t rl = rep ? strlen(rep) : 1;
                if (pass) memcpy(out + o, rep ? rep : t, rl);
                o += rl;
                t += rep ? skip : 1;
            }
            if (!pass) len = o;
            else {
                out[o] = 0;
                free(prompts[i]);
                prompts[i] = out;
            }
        }
        free(first);
    }
    return SD_OK;
}

sd_status sd_bench_read_prompts(const char *path, int count, int first_sent, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t len = 0;
    char *text = NULL;
    sd_status rs = read_text(path, "prompt file", &text, &len);
    if (rs != SD_OK) return rs;
    char **v = calloc((size_t)(count > 0 ? count : 1), sizeof(char *));
    int n = 0;
    sd_status st = v ? SD_OK : sd_fail(SD_ERR_NOMEM, "out of memory");
    char *p = text;
    while (!st && *p && n < count) {
        /* One paragraph: lines up to a blank line, joined with single spaces. */
        size_t cap = 256, l = 0;
        char *par = malloc(cap);
        if (!par) {
            st = sd_fail(SD_ERR_NOMEM, "out of memory");
            break;
        }
        par[0] = 0;
        while (*p) {
            char *eol = strchr(p, '\n');
            size_t ll = eol ? (size_t)(eol - p) : strlen(p);
            while (ll && (p[ll - 1] == '\r' || p[ll - 1] == ' ' || p[ll - 1] == '\t')) ll--;
            char *q = p;
            while (ll && (*q == ' ' || *q == '\t')) q++, ll--;
            p = eol ? eol + 1 : p + strlen(p);
            if (!ll) {
                if (l) break; /* blank line ends a paragraph; leading blank lines are skipped */
                continue;
            }
            if (l + ll + 2 > cap) {
                while (l + ll + 2 > cap) cap *= 2;
                char *t = realloc(par, cap);
                if (!t) {
                    st = sd_fail(SD_ERR_NOMEM, "out of memory");
                    break;
                }
                par = t;
            }
            if (l) par[l++] = ' ';
            memcpy(par + l, q, ll);
            l += ll;
            par[l] = 0;
        }
        if (st || !l) {
            free(par);
            continue;
        }
        if (first_sent) first_sentence(par);
        v[n++] = par;
    }
    free(text);
    if (!st && n == 0) st = sd_fail(SD_ERR_FORMAT, "%s: no prompts in the file (expected paragraphs separated by blank lines)", path);
    if (st) {
        sd_bench_free_prompts(v, n);
        return st;
    }
    *out = v;
    *n_out = n;
    return SD_OK;
}

const char *sd_bench_cache_dir(void) {
    const char *e = getenv("SPECDEC_CACHE");
    return e && *e ? e : ".cache/models";
}

/* mkdir -p */
static sd_status make_dirs(const char *dir) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", dir) >= sizeof tmp) return sd_fail(SD_ERR_INVALID_ARG, "path too long: %s", dir);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return sd_fail(SD_ERR_IO, "cannot create directory %s: %s", tmp, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return SD_OK;
}

/* Lower-case type name as configs spell it ("f32", "q8_0"). */
static const char *type_name(uint32_t t) {
    switch (t) {
    case SD_TYPE_F16: return "f16";
    case SD_TYPE_BF16: return "bf16";
    case SD_TYPE_Q8_0: return "q8_0";
    case SD_TYPE_Q4_0: return "q4_0";
    case SD_TYPE_Q5_0: return "q5_0";
    case SD_TYPE_Q4_K: return "q4_k";
    case SD_TYPE_Q6_K: return "q6_k";
    default: return "f32";
    }
}

/* Characters safe in a file name; the others become '_'. */
static void sanitize(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) {
        const char ch = src[i];
        dst[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                         ch == '-' || ch == '_'
                     ? ch
                     : '_';
    }
    dst[i] = 0;
}

/* The cache file of a generated model or a twin: every parameter is in the name, so a
 * different shape, source or seed never reuses a file. */
static sd_status cache_name(const sd_bench_model_spec *m, char *buf, size_t cap) {
    const sd_synth_params *s = &m->synth;
    const char *dir = sd_bench_cache_dir();
    int n;
    if (m->twin) {
        char of[256], tok[256] = "";
        sanitize(of, sizeof of, m->twin_of);
        if (m->twin_tokenizer) {
            const char *b = strrchr(m->twin_tokenizer, '/');
            tok[0] = '-', tok[1] = 'z';
            sanitize(tok + 2, sizeof tok - 2, b ? b + 1 : m->twin_tokenizer);
        }
        n = snprintf(buf, cap, "%s/twin-%s%s-%s-d%d-l%d-h%d-kv%d-f%d-%s-s%llu.gguf", dir, of, tok, m->shape, s->dim,
                     s->n_layers, s->n_heads, s->n_kv_heads, s->hidden_dim, type_name(s->wtype),
                     (unsigned long long)s->seed);
    } else {
        char arch[48] = "";
        if (s->arch && strcmp(s->arch, "llama") != 0) snprintf(arch, sizeof arch, "%s-", s->arch);
        if (s->head_dim) snprintf(arch + strlen(arch), sizeof arch - strlen(arch), "hd%d-", s->head_dim);
        n = snprintf(buf, cap, "%s/synth-%s%s-d%d-l%d-h%d-kv%d-f%d-v%d-c%d-%s%s-s%llu.gguf", dir, arch, m->shape, s->dim,
                     s->n_layers, s->n_heads, s->n_kv_heads, s->hidden_dim, s->vocab_size, s->ctx_len,
                     type_name(s->wtype), s->tied_output ? "-tied" : "", (unsigned long long)s->seed);
    }
    if (n < 0 || (size_t)n >= cap) return sd_fail(SD_ERR_INVALID_ARG, "cache path too long under %s", dir);
    return SD_OK;
}

/* Writes the twin of m into path: loads the small model, builds, writes. */
static sd_status write_twin(const sd_bench_model_spec *m, const char *path) {
    char small[4096];
    sd_status st = sd_model_resolve(m->twin_of, small, sizeof small);
    if (st) return st;
    sd_model_params mp = sd_model_default_params();
    mp.tokenizer_path = m->twin_tokenizer;
    sd_model *sm = NULL;
    if ((st = sd_model_load(small, &mp, &sm))) return st;
    sd_twin_params tp = sd_twin_default_params();
    const sd_synth_params *s = &m->synth;
    tp.dim = s->dim, tp.n_layers = s->n_layers, tp.n_heads = s->n_heads, tp.n_kv_heads = s->n_kv_heads;
    tp.hidden_dim = s->hidden_dim, tp.wtype = (sd_type)s->wtype, tp.seed = s->seed, tp.name = m->twin_of;
    st = sd_twin_write_file(sm, &tp, path);
    sd_model_free(sm);
    return st;
}

sd_status sd_bench_model_path(const sd_bench_model_spec *m, char *buf, size_t cap, int *created) {
    if (created) *created = 0;
    if (!m->generated && !m->twin) return sd_model_resolve(m->model, buf, cap);
    sd_status st = cache_name(m, buf, cap);
    if (st) return st;
    struct stat stt;
    if (stat(buf, &stt) == 0 && S_ISREG(stt.st_mode) && stt.st_size > 0) return SD_OK;
    if ((st = make_dirs(sd_bench_cache_dir()))) return st;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", buf, (long)getpid());
    if ((st = m->twin ? write_twin(m, tmp) : sd_synth_write_file(&m->synth, tmp)) != SD_OK) {
        remove(tmp);
        return st;
    }
    if (rename(tmp, buf) != 0) {
        remove(tmp);
        return sd_fail(SD_ERR_IO, "cannot rename %s to %s: %s", tmp, buf, strerror(errno));
    }
    if (created) *created = 1;
    return SD_OK;
}
