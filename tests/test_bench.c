/* `specdec bench` library code: config parsing (shipped configs, every error class with its
 * exact message), prompt files, the model cache, the cost model, the report's JSON round trip
 * and SVG, and the greedy divergence check with a deliberately broken speculative run. */
#include "sdtest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "specdec/bench.h"
#include "specdec/bench_config.h"
#include "specdec/cpu.h"
#include "specdec/bench_report.h"
#include "sdtest_report.h"
#include "specdec/model.h"
#include "specdec/types.h"

/* ---- configs ---- */

static const char *k_valid =
    "{\n"
    "  \"target\": {\"model\": \"stories260K\"},\n"
    "  \"draft\": {\"model\": \"stories-draft\", \"tokenizer\": \"tok512.bin\"},\n"
    "  \"prompts\": {\"text\": [\"Once upon a time\", \"The dog\"]},\n"
    "  \"sweep\": {\"k\": [4, 1, 2]}\n"
    "}\n";

static sd_status parse(const char *text, sd_bench_config *c) {
    return sd_bench_config_parse(text, strlen(text), "configs/x.json", c);
}

/* Parses text, expecting failure with exactly msg. */
static void expect_error(const char *text, sd_status want, const char *msg) {
    sd_bench_config c;
    sd_status st = parse(text, &c);
    if (st != want || strcmp(sd_last_error(), msg) != 0)
        fail_msg("status %d (want %d)\n  got:  %s\n  want: %s", st, want, sd_last_error(), msg);
    /* A failed parse leaves nothing to free. */
    assert_null(c.file);
    assert_null(c.prompts);
}

static void test_config_valid_defaults(void **state) {
    (void)state;
    sd_bench_config c;
    assert_int_equal(parse(k_valid, &c), SD_OK);
    assert_string_equal(c.file, "configs/x.json");
    assert_string_equal(c.name, "x"); /* the file's base name */
    assert_string_equal(c.target.model, "stories260K");
    assert_null(c.target.tokenizer);
    assert_string_equal(c.draft.tokenizer, "tok512.bin");
    assert_int_equal(c.target.generated, 0);
    assert_int_equal(c.n_prompts, 2);
    assert_string_equal(c.prompts[1], "The dog");
    assert_int_equal(c.n_k, 3); /* sorted */
    assert_int_equal(c.k[0], 1);
    assert_int_equal(c.k[1], 2);
    assert_int_equal(c.k[2], 4);
    assert_int_equal(c.n_predict, 128);
    assert_int_equal(c.ignore_eos, 1);
    assert_int_equal(c.repetitions, 3);
    assert_int_equal(c.threads, 0);
    assert_true(c.sampling.temperature == 0.0f);
    assert_int_equal(c.sampling.seed, 42);
    assert_string_equal(c.out_json, "docs/benchmarks/x.json");
    assert_string_equal(c.out_svg, "docs/benchmarks/x.svg");
    sd_bench_config_free(&c);
    assert_null(c.file);
    sd_bench_config_free(NULL);
}

static void test_config_generate(void **state) {
    (void)state;
    sd_bench_config c;
    const char *t = "{\"target\": {\"generate\": {\"shape\": \"stories110M\", \"type\": \"f16\", \"seed\": 7, "
                    "\"arch\": \"qwen3\", \"head_dim\": 128}},\n"
                    " \"draft\": {\"generate\": {\"shape\": \"stories15M\", \"dim\": 96, \"layers\": 2, \"heads\": 2,"
                    " \"kv_heads\": 1, \"tied\": true}},\n"
                    " \"prompts\": {\"file\": \"p.txt\", \"count\": 2, \"first_sentence\": true},\n"
                    " \"sweep\": {\"k\": [3]}, \"sampling\": {\"temperature\": 0.7, \"top_k\": 40, \"top_p\": 0.9, \"seed\": 9},\n"
                    " \"threads\": 2, \"repetitions\": 5, \"n_predict\": 20, \"ignore_eos\": false, \"name\": \"g\",\n"
                    " \"output\": {\"json\": \"o.json\", \"svg\": \"o.svg\"}}";
    assert_int_equal(parse(t, &c), SD_OK);
    assert_int_equal(c.target.generated, 1);
    assert_string_equal(c.target.shape, "stories110M");
    assert_int_equal(c.target.synth.dim, 768);
    assert_int_equal(c.target.synth.n_layers, 12);
    assert_int_equal(c.target.synth.vocab_size, 32000);
    assert_int_equal(c.target.synth.wtype, SD_TYPE_F16);
    assert_int_equal(c.target.synth.seed, 7);
    assert_string_equal(c.target.synth.arch, "qwen3");
    assert_int_equal(c.target.synth.head_dim, 128);
    assert_null(c.draft.synth.arch); /* llama */
    assert_int_equal(c.draft.synth.dim, 96); /* overrides on top of the shape */
    assert_int_equal(c.draft.synth.n_kv_heads, 1);
    assert_int_equal(c.draft.synth.hidden_dim, 768);
    assert_int_equal(c.draft.synth.tied_output, 1);
    assert_int_equal(c.draft.synth.seed, 1); /* default seed */
    assert_string_equal(c.prompt_file, "p.txt");
    assert_int_equal(c.prompt_count, 2);
    assert_int_equal(c.first_sentence, 1);
    assert_true(fabsf(c.sampling.temperature - 0.7f) < 1e-7f);
    assert_int_equal(c.sampling.top_k, 40);
    assert_int_equal(c.sampling.seed, 9);
    assert_int_equal(c.threads, 2);
    assert_int_equal(c.repetitions, 5);
    assert_int_equal(c.n_predict, 20);
    assert_int_equal(c.ignore_eos, 0);
    assert_string_equal(c.name, "g");
    assert_string_equal(c.out_svg, "o.svg");
    sd_bench_config_free(&c);
}

/* Loads configs/NAME.json of the source tree (fails the test on error). */
static void load_shipped(const char *name, sd_bench_config *c) {
    char rel[128];
    snprintf(rel, sizeof rel, "configs/%s.json", name);
    if (sd_bench_config_load(sdtest_source_path(rel), c) != SD_OK) fail_msg("%s: %s", rel, sd_last_error());
}

static void test_config_shipped(void **state) {
    (void)state;
    const char *names[] = {"stories-greedy", "stories-t1", "self-draft-110m", "random-110m-15m"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        sd_bench_config c;
        load_shipped(names[i], &c);
        assert_string_equal(c.name, names[i]);
        assert_true(c.n_k >= 1);
        assert_true(c.n_prompts > 0 || c.prompt_file);
        if (i >= 2) {
            /* The random pairs: 110M-shape target; the self-draft is the very same model. */
            assert_int_equal(c.target.generated, 1);
            assert_int_equal(c.target.synth.dim, 768);
            assert_int_equal(c.draft.synth.vocab_size, c.target.synth.vocab_size);
            if (i == 2) assert_memory_equal(&c.draft.synth, &c.target.synth, sizeof c.target.synth);
            else assert_int_equal(c.draft.synth.dim, 288);
        } else {
            assert_string_equal(c.target.model, "stories260K");
            assert_string_equal(c.draft.model, "stories-draft");
        }
        if (i == 1) assert_true(c.sampling.temperature == 1.0f);
        sd_bench_config_free(&c);
    }
    /* The cost-twin pairs: stories260K's twin at the 110M shape, drafted by stories-draft's
     * twin at the 15M shape or by its own quantised self (the same twin, written quantised). */
    const struct {
        const char *name, *draft_of;
        int draft_dim, draft_type;
        float temp;
    } twins[] = {{"twin-greedy", "stories-draft", 288, SD_TYPE_F32, 0.0f},
                 {"twin-t1", "stories-draft", 288, SD_TYPE_F32, 1.0f},
                 {"twin-self-q4_0", "stories260K", 768, SD_TYPE_Q4_0, 0.0f},
                 {"twin-self-q8_0", "stories260K", 768, SD_TYPE_Q8_0, 0.0f}};
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        sd_bench_config c;
        load_shipped(twins[i].name, &c);
        assert_string_equal(c.name, twins[i].name);
        assert_true(c.target.twin && c.draft.twin && !c.target.generated && !c.draft.generated);
        assert_string_equal(c.target.twin_of, "stories260K");
        assert_int_equal(c.target.synth.dim, 768);
        assert_int_equal(c.target.synth.wtype, SD_TYPE_F32);
        assert_string_equal(c.draft.twin_of, twins[i].draft_of);
        assert_int_equal(c.draft.synth.dim, twins[i].draft_dim);
        assert_int_equal(c.draft.synth.wtype, twins[i].draft_type);
        assert_int_equal(c.draft.synth.seed, c.target.synth.seed);
        assert_true(c.sampling.temperature == twins[i].temp);
        sd_bench_config_free(&c);
    }
    /* The self-speculation pairs: a target and its own quantised copy. */
    const struct {
        const char *name, *quant;
        int generated;
    } self[] = {{"self-q8_0-110m", NULL, 1},
                {"self-q4_0-110m", NULL, 1},
                {"stories-self-q4_0", "q4_0", 0},
                {"stories-self-q8_0", "q8_0", 0},
                {"tinystories656k-self-q4_0", "q4_0", 0},
                {"stories110m-self-q4_0", "q4_0", 0}};
    for (size_t i = 0; i < sizeof self / sizeof self[0]; i++) {
        sd_bench_config c;
        load_shipped(self[i].name, &c);
        assert_int_equal(c.draft.generated, self[i].generated);
        if (self[i].generated) { /* same weights (seed, shape), quantised */
            assert_int_equal(c.draft.synth.seed, c.target.synth.seed);
            assert_int_equal(c.draft.synth.dim, c.target.synth.dim);
            assert_true(c.draft.synth.wtype != c.target.synth.wtype);
        } else {
            assert_string_equal(c.draft.model, c.target.model);
            assert_string_equal(c.draft.quantize, self[i].quant);
            assert_null(c.target.quantize);
        }
        sd_bench_config_free(&c);
    }
}

static void test_config_errors(void **state) {
    (void)state;
    const sd_status A = SD_ERR_INVALID_ARG;
    /* Wrong type. */
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1, 2, \"four\"]}}",
                 A, "configs/x.json: .sweep.k[2]: expected an integer in 1..32, got \"four\"");
    expect_error("{\"target\": \"stories260K\"}", A, "configs/x.json: .target: expected an object, got \"stories260K\"");
    expect_error("{\"target\": {\"model\": 5}}", A, "configs/x.json: .target.model: expected a non-empty string, got 5");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\", {}]}}", A,
                 "configs/x.json: .prompts.text[1]: expected a non-empty string, got an object");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1]}, \"ignore_eos\": 1}",
                 A, "configs/x.json: .ignore_eos: expected true or false, got 1");
    expect_error("[1, 2]", A, "configs/x.json: .: expected an object, got an array");
    /* Out of range. */
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [40]}}",
                 A, "configs/x.json: .sweep.k[0]: expected an integer in 1..32, got 40");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [2, 2]}}",
                 A, "configs/x.json: .sweep.k[1]: expected a draft length not listed before, got 2");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1]}, \"sampling\": {\"top_p\": 0}}",
                 A, "configs/x.json: .sampling.top_p: expected a number in (0, 1], got 0");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1]}, \"sampling\": {\"temperature\": -1}}",
                 A, "configs/x.json: .sampling.temperature: expected a number in [0, 1000], got -1");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1]}, \"n_predict\": 2.5}",
                 A, "configs/x.json: .n_predict: expected an integer in 1..65536, got 2.5");
    expect_error("{\"target\": {\"generate\": {\"shape\": \"stories7B\"}}}", A,
                 "configs/x.json: .target.generate.shape: expected one of stories260K, stories15M, stories42M, "
                 "stories110M, got \"stories7B\"");
    expect_error("{\"target\": {\"generate\": {\"shape\": \"stories15M\", \"arch\": \"gpt2\"}}}", A,
                 "configs/x.json: .target.generate.arch: expected one of \"llama\", \"qwen2\", \"qwen3\", got \"gpt2\"");
    expect_error("{\"target\": {\"generate\": {\"shape\": \"stories15M\", \"head_dim\": 7}}}", A,
                 "configs/x.json: .target.generate: not a buildable shape: synth: head_dim 7 must be even for RoPE");
    expect_error("{\"target\": {\"generate\": {\"shape\": \"stories15M\", \"type\": \"q4\"}}}", A,
                 "configs/x.json: .target.generate.type: expected one of \"f32\", \"f16\", \"bf16\", \"q8_0\", "
                 "\"q4_0\", \"q5_0\", \"q4_k\", \"q6_k\", got \"q4\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"a\", \"quantize\": \"q3\"}}", A,
                 "configs/x.json: .draft.quantize: expected one of \"f32\", \"f16\", \"bf16\", \"q8_0\", \"q4_0\", "
                 "\"q5_0\", \"q4_k\", \"q6_k\", got \"q3\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"generate\": {\"shape\": \"stories15M\"}, "
                 "\"quantize\": \"q4_0\"}}",
                 A, "configs/x.json: .draft.quantize: a generated model takes its type from generate.type");
    /* Unknown key. */
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1]}, \"sampling\": {\"temprature\": 1}}",
                 A, "configs/x.json: .sampling.temprature: unknown key (expected one of: temperature, top_k, top_p, seed, mode)");
    expect_error("{\"tagret\": {}}", A,
                 "configs/x.json: .tagret: unknown key (expected one of: name, description, target, draft, prompts, "
                 "n_predict, ignore_eos, sweep, sampling, constraint, threads, repetitions, output)");
    expect_error("{\"name\": \"a\", \"name\": \"b\"}", A, "configs/x.json: .name: duplicate key");
    /* Missing required key. */
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]}}", A,
                 "configs/x.json: .: missing required key \"sweep\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {}}",
                 A, "configs/x.json: .sweep: missing required key \"k\"");
    expect_error("{\"target\": {}}", A,
                 "configs/x.json: .target: missing required key \"model\" (or \"generate\" or \"twin\")");
    expect_error("{\"target\": {\"generate\": {\"seed\": 1}}}", A,
                 "configs/x.json: .target.generate: missing required key \"shape\"");
    expect_error("{\"target\": {\"model\": \"a\", \"generate\": {\"shape\": \"stories15M\"}}}", A,
                 "configs/x.json: .target: give one of \"model\", \"generate\" and \"twin\"");
    /* Cost twins. */
    expect_error("{\"target\": {\"twin\": {\"shape\": \"stories110M\"}}}", A,
                 "configs/x.json: .target.twin: missing required key \"of\"");
    expect_error("{\"target\": {\"twin\": {\"of\": \"stories260K\"}}}", A,
                 "configs/x.json: .target.twin: missing required key \"shape\"");
    expect_error("{\"target\": {\"twin\": {\"of\": \"stories260K\", \"shape\": \"stories110M\", \"vocab\": 512}}}", A,
                 "configs/x.json: .target.twin.vocab: unknown key (expected one of: of, tokenizer, shape, type, seed, dim, "
                 "layers, heads, kv_heads, hidden)");
    expect_error("{\"target\": {\"twin\": {\"of\": \"\", \"shape\": \"stories110M\"}}}", A,
                 "configs/x.json: .target.twin.of: expected a non-empty string, got \"\"");
    expect_error("{\"target\": {\"twin\": {\"of\": \"a\", \"shape\": \"stories110M\", \"heads\": 5}}}", A,
                 "configs/x.json: .target.twin: not a buildable shape: synth: dim 768 is not divisible by n_heads 5");
    expect_error("{\"target\": {\"twin\": {\"of\": \"a\", \"shape\": \"stories110M\"}, \"tokenizer\": \"t.bin\"}}", A,
                 "configs/x.json: .target.tokenizer: a twin model has its own vocabulary; remove \"tokenizer\" "
                 "(twin.tokenizer is the small model's)");
    expect_error("{\"target\": {\"twin\": {\"of\": \"a\", \"shape\": \"stories110M\"}, \"quantize\": \"q4_0\"}}", A,
                 "configs/x.json: .target.quantize: a twin model takes its type from twin.type");
    expect_error("{\"target\": {\"model\": \"a\", \"twin\": {\"of\": \"a\", \"shape\": \"stories110M\"}}}", A,
                 "configs/x.json: .target: give one of \"model\", \"generate\" and \"twin\"");
    /* Bad JSON syntax, with its position: on line 3, `  "n_predict": 12,,` has its second
     * comma in column 19. */
    expect_error("{\n  \"name\": \"x\",\n  \"n_predict\": 12,,\n}\n", SD_ERR_FORMAT,
                 "configs/x.json: line 3, column 19: invalid JSON: expected a key string, got ','");
    expect_error("{\"name\": \"x\"", SD_ERR_FORMAT,
                 "configs/x.json: line 1, column 13: invalid JSON: expected ',' or '}', got the end of the file");
    expect_error("{} {}", SD_ERR_FORMAT,
                 "configs/x.json: line 1, column 4: invalid JSON: expected the end of the file after the top-level value, got '{}'");
    expect_error("{\"k\": [1, 2 3]}", SD_ERR_FORMAT, "configs/x.json: line 1, column 13: invalid JSON: expected ',' or ']', got '3]}'");
    expect_error("{\"k\": tru}", SD_ERR_FORMAT, "configs/x.json: line 1, column 7: invalid JSON: expected a value, got 'tru}'");
    expect_error("{\"k\": 01}", SD_ERR_FORMAT, "configs/x.json: line 1, column 8: invalid JSON: expected ',' or '}', got '1}'");
    /* numbers (the lexer the server's request scanner shares): where each one stops */
    expect_error("{\"k\": 1.}", SD_ERR_FORMAT, "configs/x.json: line 1, column 9: invalid JSON: expected a digit, got '}'");
    expect_error("{\"k\": -x}", SD_ERR_FORMAT, "configs/x.json: line 1, column 8: invalid JSON: expected a digit, got 'x}'");
    expect_error("{\"k\": 2e+}", SD_ERR_FORMAT, "configs/x.json: line 1, column 10: invalid JSON: expected a digit, got '}'");
    expect_error("", SD_ERR_FORMAT, "configs/x.json: line 1, column 1: invalid JSON: expected a value, got the end of the file");
    /* A file that is not there. */
    sd_bench_config c;
    assert_int_equal(sd_bench_config_load("/nonexistent/x.json", &c), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "/nonexistent/x.json: cannot read the config"));
}

/* ---- prompts and the model cache ---- */

/* sweep.strategies and prompts.template: parsed, checked, applied. */
static void test_config_strategies_template(void **state) {
    (void)state;
    sd_bench_config c;
    const char *t = "{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"},\n"
                    " \"prompts\": {\"text\": [\"One day. Then more.\"], \"template\": \"{text}\\n\\nAgain: {first_sentence}\"},\n"
                    " \"sweep\": {\"k\": [2, 1], \"strategies\": [\"adaptive\", \"fixed\", \"ngram\", \"tree\"], "
                    "\"tree_budget\": 12, \"p_min\": 0.5}}";
    assert_int_equal(parse(t, &c), SD_OK);
    assert_int_equal(c.n_strategies, 4);
    assert_int_equal(c.strategies[0], SD_BENCH_ADAPTIVE);
    assert_int_equal(c.strategies[3], SD_BENCH_TREE);
    assert_int_equal(c.tree_budget, 12);
    assert_true(c.p_min == 0.5f);
    assert_int_equal(sd_bench_apply_template(c.prompt_template, c.prompts, c.n_prompts), SD_OK);
    assert_string_equal(c.prompts[0], "One day. Then more.\n\nAgain: One day.");
    sd_bench_config_free(&c);
    /* defaults: the fixed sweep alone */
    assert_int_equal(parse("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": "
                           "{\"text\": [\"p\"]}, \"sweep\": {\"k\": [1]}}", &c), SD_OK);
    assert_int_equal(c.n_strategies, 1);
    assert_int_equal(c.strategies[0], SD_BENCH_FIXED);
    assert_int_equal(c.tree_budget, 16);
    sd_bench_config_free(&c);
    const sd_status A = SD_ERR_INVALID_ARG;
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1], \"strategies\": [\"fixed\", \"lookahead\"]}}",
                 A, "configs/x.json: .sweep.strategies[1]: expected one of \"fixed\", \"adaptive\", \"p_min\", \"ngram\", "
                    "\"model+ngram\", \"tree\", \"unconstrained\", \"no-grammar-drafts\", got \"lookahead\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1], \"strategies\": [\"ngram\", \"ngram\"]}}",
                 A, "configs/x.json: .sweep.strategies[1]: expected a strategy not listed before, got \"ngram\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1], \"strategies\": []}}",
                 A, "configs/x.json: .sweep.strategies: expected a non-empty array of strategies, got an array");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"],"
                 " \"template\": \"no placeholder\"}, \"sweep\": {\"k\": [1]}}",
                 A, "configs/x.json: .prompts.template: expected a template holding {text} or {first_sentence}, got \"no placeholder\"");
    expect_error("{\"target\": {\"model\": \"a\"}, \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"p\"]},"
                 " \"sweep\": {\"k\": [1], \"tree_budget\": 40}}",
                 A, "configs/x.json: .sweep.tree_budget: expected an integer in 1..32, got 40");
}

static void test_prompt_file(void **state) {
    (void)state;
    const char *path = sdtest_tmp_path("prompts.txt");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("\n\nOnce upon a time. There was\na dog.\n\n\n  Second para! yes  \r\n\nThird \"quoted.\" after\nNo blank "
          "line before this\n",
          f);
    fclose(f);
    char **p;
    int n;
    assert_int_equal(sd_bench_read_prompts(path, 10, 0, &p, &n), SD_OK);
    assert_int_equal(n, 3);
    assert_string_equal(p[0], "Once upon a time. There was a dog.");
    assert_string_equal(p[1], "Second para! yes");
    assert_string_equal(p[2], "Third \"quoted.\" after No blank line before this");
    sd_bench_free_prompts(p, n);
    assert_int_equal(sd_bench_read_prompts(path, 2, 1, &p, &n), SD_OK);
    assert_int_equal(n, 2);
    assert_string_equal(p[0], "Once upon a time.");
    assert_string_equal(p[1], "Second para!");
    sd_bench_free_prompts(p, n);
    assert_int_equal(sd_bench_read_prompts(path, 3, 1, &p, &n), SD_OK);
    assert_string_equal(p[2], "Third \"quoted.\"");
    sd_bench_free_prompts(p, n);
    assert_int_equal(sd_bench_read_prompts("/nonexistent/p.txt", 2, 0, &p, &n), SD_ERR_IO);
}

/* ---- cost model ---- */

static void test_cost_model(void **state) {
    (void)state;
    /* alpha = 0.8, k = 4: E = (1 - 0.8^5) / (1 - 0.8) = (1 - 0.32768) / 0.2 = 3.3616.
     * Cost per pass relative to one target step: k * 0.1 + 1.2 = 0.4 + 1.2 = 1.6.
     * S = 3.3616 / 1.6 = 2.101. */
    assert_true(fabs(sd_bench_expected_tokens(0.8, 4) - 3.3616) < 1e-12);
    assert_true(fabs(sd_bench_predicted_speedup(0.8, 4, 0.1, 1.2) - 2.101) < 1e-12);
    /* alpha = 1: every draft accepted, E = k + 1 (the formula's 0/0 limit). k = 3, draft free,
     * verify 1.0: S = 4. */
    assert_true(sd_bench_expected_tokens(1.0, 3) == 4.0);
    assert_true(fabs(sd_bench_predicted_speedup(1.0, 3, 0.0, 1.0) - 4.0) < 1e-12);
    /* alpha = 0: only the target's own token, E = 1; k = 2, ratios 0.25 and 1.5: S = 1 / 2 = 0.5. */
    assert_true(sd_bench_expected_tokens(0.0, 2) == 1.0);
    assert_true(fabs(sd_bench_predicted_speedup(0.0, 2, 0.25, 1.5) - 0.5) < 1e-12);
    /* alpha = 0.5, k = 1: E = (1 - 0.25) / 0.5 = 1.5; cost 0.2 + 1.1 = 1.3; S = 1.5 / 1.3. */
    assert_true(fabs(sd_bench_predicted_speedup(0.5, 1, 0.2, 1.1) - 1.5 / 1.3) < 1e-12);
    /* Break-even: k = 1, draft 0.2, verify 1.0: E = 1 + alpha = 1.2 -> alpha = 0.2. */
    assert_true(fabs(sd_bench_break_even_alpha(1, 0.2, 1.0) - 0.2) < 1e-9);
    assert_true(sd_bench_break_even_alpha(4, 1.0, 2.0) == 1.0); /* 6 > k + 1 = 5: never */
    assert_true(sd_bench_break_even_alpha(2, 0.0, 0.5) == 0.0); /* wins even at alpha 0 */
    /* alpha from position counts: 100 passes of k = 2; 80 accept position 1, 60 of those
     * position 2: trials 100 + 80, accepted 80 + 60 -> 140 / 180. */
    long drafted[2] = {100, 100}, accepted[2] = {80, 60};
    assert_true(fabs(sd_bench_alpha(drafted, accepted, 2) - 140.0 / 180.0) < 1e-12);
    long d0[1] = {0}, a0[1] = {0};
    assert_true(sd_bench_alpha(d0, a0, 1) == 0.0);
}

/* ---- divergence ---- */

static void test_first_divergence(void **state) {
    (void)state;
    int32_t a[] = {5, 6, 7, 8}, b[] = {5, 6, 9, 8};
    assert_int_equal(sd_bench_first_divergence(a, 4, a, 4), -1);
    assert_int_equal(sd_bench_first_divergence(a, 4, b, 4), 2);
    assert_int_equal(sd_bench_first_divergence(a, 3, a, 4), 3); /* one output stopped early */
    assert_int_equal(sd_bench_first_divergence(a, 0, b, 0), -1);
    assert_int_equal(sd_bench_first_divergence(b, 1, a, 4), 1);
}

/* A tiny config whose models are generated into a temporary cache. */
static const char *k_tiny =
    "{\"name\": \"tiny\",\n"
    " \"target\": {\"generate\": {\"shape\": \"stories260K\", \"dim\": 32, \"layers\": 2, \"heads\": 4, \"kv_heads\": 2,"
    " \"hidden\": 64, \"vocab\": 300, \"ctx\": 96, \"seed\": 3}},\n"
    " \"draft\": {\"generate\": {\"shape\": \"stories260K\", \"dim\": 16, \"layers\": 1, \"heads\": 2, \"kv_heads\": 1,"
    " \"hidden\": 32, \"vocab\": 300, \"ctx\": 96, \"seed\": 4}},\n"
    " \"prompts\": {\"text\": [\"Once upon a time\", \"the cat\"]},\n"
    " \"n_predict\": 16, \"sweep\": {\"k\": [1, 3]}, \"repetitions\": 2}";

typedef struct {
    sd_model *target, *draft;
    sd_bench_config cfg;
} tiny_pair;

static void tiny_load(tiny_pair *tp, int self_draft) {
    setenv("SPECDEC_CACHE", sdtest_tmp_path("cache/models"), 1);
    assert_int_equal(sd_bench_config_parse(k_tiny, strlen(k_tiny), "tiny.json", &tp->cfg), SD_OK);
    char path[4096];
    int created = -1;
    assert_int_equal(sd_bench_model_path(&tp->cfg.target, path, sizeof path, &created), SD_OK);
    assert_non_null(strstr(path, "cache/models/synth-stories260K-d32-l2-h4-kv2-f64-v300-c96-f32-s3.gguf"));
    assert_int_equal(sd_model_load(path, NULL, &tp->target), SD_OK);
    /* A second lookup reuses the cached file. */
    assert_int_equal(sd_bench_model_path(&tp->cfg.target, path, sizeof path, &created), SD_OK);
    assert_int_equal(created, 0);
    if (self_draft) tp->draft = tp->target;
    else {
        assert_int_equal(sd_bench_model_path(&tp->cfg.draft, path, sizeof path, NULL), SD_OK);
        assert_int_equal(sd_model_load(path, NULL, &tp->draft), SD_OK);
    }
}

static void tiny_free(tiny_pair *tp) {
    if (tp->draft != tp->target) sd_model_free(tp->draft);
    sd_model_free(tp->target);
    sd_bench_config_free(&tp->cfg);
}

static sd_bench_run_params tiny_params(tiny_pair *tp) {
    sd_bench_run_params p = {0};
    p.cfg = &tp->cfg;
    p.target = tp->target;
    p.draft = tp->draft;
    p.prompts = tp->cfg.prompts;
    p.n_prompts = tp->cfg.n_prompts;
    p.cost_only = 1;
    p.quick = 1;
    p.threads = 1;
    return p;
}

/* A twin spec: written into the cache on first use from its small model (here a random one
 * written by the test), named by its parameters, reused after; its errors come at that point. */
static void test_config_twin_cache(void **state) {
    (void)state;
    setenv("SPECDEC_CACHE", sdtest_tmp_path("cache/models"), 1);
    const char *small_path = sdtest_tmp_path("small.gguf");
    char small[512];
    snprintf(small, sizeof small, "%s", small_path);
    sd_synth_params sp = sd_synth_default_params(); /* dim 64, 4 heads of 16 (GQA 4:2), hidden 172 */
    sp.n_layers = 2, sp.n_heads = 4, sp.n_kv_heads = 2, sp.ctx_len = 64;
    assert_int_equal(sd_synth_write_file(&sp, small), SD_OK);
    char text[2048];
    snprintf(text, sizeof text,
             "{\"target\": {\"twin\": {\"of\": \"%s\", \"shape\": \"stories15M\", \"type\": \"q8_0\", \"seed\": 5, "
             "\"layers\": 3}},\n \"draft\": {\"twin\": {\"of\": \"%s\", \"shape\": \"stories15M\", \"dim\": 48}},\n"
             " \"prompts\": {\"text\": [\"a\"]}, \"sweep\": {\"k\": [1]}}",
             small, small);
    sd_bench_config c;
    assert_int_equal(parse(text, &c), SD_OK);
    assert_true(c.target.twin && !c.target.generated);
    assert_string_equal(c.target.shape, "stories15M");
    assert_true(c.target.synth.dim == 288 && c.target.synth.n_layers == 3 && c.target.synth.n_heads == 6);
    assert_true(c.target.synth.wtype == SD_TYPE_Q8_0 && c.target.synth.seed == 5);
    assert_int_equal(c.draft.synth.seed, 1); /* default seed */
    char path[4096];
    int created = -1;
    if (sd_bench_model_path(&c.target, path, sizeof path, &created) != SD_OK) fail_msg("%s", sd_last_error());
    assert_int_equal(created, 1);
    assert_non_null(strstr(path, "cache/models/twin-"));
    assert_non_null(strstr(path, "small.gguf-stories15M-d288-l3-h6-kv6-f768-q8_0-s5.gguf"));
    assert_null(strchr(strstr(path, "twin-"), '/')); /* the source path is flattened into the name */
    sd_model *m = NULL;
    assert_int_equal(sd_model_load(path, NULL, &m), SD_OK);
    assert_int_equal(sd_model_hparams(m)->dim, 288);
    assert_int_equal(sd_model_hparams(m)->vocab_size, 512);
    assert_int_equal(sd_model_hparams(m)->ctx_len, 64);
    sd_model_free(m);
    assert_int_equal(sd_bench_model_path(&c.target, path, sizeof path, &created), SD_OK);
    assert_int_equal(created, 0);
    /* dim 48 is below the source's 64: refused when the file would be written, leaving none */
    assert_int_equal(sd_bench_model_path(&c.draft, path, sizeof path, &created), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "twin: dim 48 is smaller than"));
    assert_int_equal(created, 0);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0); /* nothing left behind */
    sd_bench_config_free(&c);
    /* a source that is not there */
    assert_int_equal(parse("{\"target\": {\"twin\": {\"of\": \"/nonexistent.bin\", \"shape\": \"stories15M\"}},"
                           " \"draft\": {\"model\": \"b\"}, \"prompts\": {\"text\": [\"a\"]}, \"sweep\": {\"k\": [1]}}",
                           &c),
                     SD_OK);
    assert_int_equal(sd_bench_model_path(&c.target, path, sizeof path, NULL), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "model '/nonexistent.bin' not found"));
    sd_bench_config_free(&c);
}

/* A broken verifier: lets the real speculative run happen but emits token 5 wrong. */
typedef struct {
    sd_token_cb cb;
    void *user;
    int n;
    int vocab;
} breaker;

static int break_token(int32_t tok, void *user) {
    breaker *b = user;
    if (b->n++ == 5) tok = (tok + 1) % b->vocab;
    return b->cb(tok, b->user);
}

static sd_status broken_gen(sd_spec *s, const int32_t *prompt, int n_prompt, sd_token_cb cb, void *user,
                            sd_spec_stats *stats, void *hook_user) {
    breaker b = {cb, user, 0, *(int *)hook_user};
    return sd_spec_generate(s, prompt, n_prompt, break_token, &b, stats);
}

static void test_run_greedy_identical(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 0);
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_non_null(r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    assert_int_equal(r->n_divergences, 0);
    assert_int_equal(r->n_k, 2);
    assert_int_equal(r->k[0].k, 1);
    assert_int_equal(r->k[1].k, 3);
    assert_int_equal(r->k[1].runs, 4); /* 2 prompts x 2 repetitions */
    assert_true(r->greedy && r->cost_only && !r->self_draft);
    assert_string_equal(r->target_label, "random dim 32, 2 layers (f32)");
    assert_true(r->t_decode_target_s > 0 && r->t_decode_draft_s > 0);
    for (int i = 0; i < r->n_k; i++) {
        assert_true(r->k[i].tps_plain > 0 && r->k[i].tps_spec > 0 && r->k[i].speedup > 0);
        assert_true(r->k[i].acceptance >= 0 && r->k[i].acceptance <= 1);
        assert_true(r->k[i].predicted_speedup > 0);
        assert_true(r->k[i].kv_bytes_target > 0 && r->k[i].kv_bytes_draft > 0);
    }
    free(r);
    tiny_free(&tp);
}

/* Both sampling modes in one run (sampling.mode as an array): a block of results per mode, the
 * modes alternating run by run; sampled at T 0.8, coupled runs must equal plain decoding token for
 * token (counted as divergences otherwise), rejection runs need not. The config refuses an unknown
 * mode and the same mode twice, naming the path. */
static void test_run_sampling_modes(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 0);
    tp.cfg.sampling.temperature = 0.8f;
    tp.cfg.modes[0] = SD_SAMPLING_REJECTION;
    tp.cfg.modes[1] = SD_SAMPLING_COUPLED;
    tp.cfg.n_modes = 2;
    const sd_bench_strategy strats[] = {SD_BENCH_FIXED, SD_BENCH_ADAPTIVE};
    tp.cfg.n_strategies = 2;
    memcpy(tp.cfg.strategies, strats, sizeof strats);
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    assert_int_equal(r->n_modes, 2);
    assert_int_equal(r->n_k, 2 * 3); /* (k 1, k 3, adaptive) x 2 */
    for (int i = 0; i < r->n_k; i++) {
        const sd_bench_k_result *k = &r->k[i];
        printf("  %-9s %-9s k=%d: %.2fx, acceptance %.0f%%\n", sd_bench_strategy_name(k->strategy),
               sd_sampling_mode_name(k->mode), k->k, k->speedup, 100 * k->acceptance);
        assert_int_equal(k->mode, i < 3 ? SD_SAMPLING_REJECTION : SD_SAMPLING_COUPLED);
        assert_int_equal(k->strategy, i % 3 == 2 ? SD_BENCH_ADAPTIVE : SD_BENCH_FIXED);
        assert_int_equal(k->runs, 4);
        assert_true(k->tps_spec > 0);
    }
    assert_int_equal(r->n_divergences, 0); /* coupled runs: plain decoding's text */
    char *js = sd_bench_report_json(r);
    assert_non_null(strstr(js, "\"sampling_modes\":\t[\"rejection\", \"coupled\"]"));
    free(js);
    free(r);
    tiny_free(&tp);
    static const char *bad[] = {
        "{\"sampling\": {\"mode\": \"gumbel\"}}", "{\"sampling\": {\"mode\": [\"coupled\", \"coupled\"]}}",
        "{\"sampling\": {\"mode\": []}}"};
    static const char *want[] = {".sampling.mode: expected \"coupled\" or \"rejection\", got \"gumbel\"",
                                 ".sampling.mode: expected the other mode, got \"coupled\"",
                                 ".sampling.mode: expected \"coupled\", \"rejection\" or an array of one or both"};
    for (int b = 0; b < 3; b++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"target\": {\"model\": \"t\"}, \"draft\": {\"model\": \"d\"}, \"prompts\": {\"text\": [\"a\"]},"
                 " \"sweep\": {\"k\": [1]}, %s", bad[b] + 1);
        sd_bench_config c;
        assert_int_equal(sd_bench_config_parse(text, strlen(text), "m.json", &c), SD_ERR_INVALID_ARG);
        if (!strstr(sd_last_error(), want[b])) fail_msg("got: %s", sd_last_error());
    }
}

/* A "constraint" runs every generation under a grammar (here: a JSON object with two fixed keys),
 * plain and speculative alike: greedy runs still equal plain decoding, and "no-grammar-drafts" and
 * "unconstrained" run beside; a strategy that compares against a constraint without one, and a
 * constraint naming neither a schema nor a grammar, are refused. */
static void test_run_constraint(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 0);
    tp.cfg.constraint_schema = strdup("{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"x\",\"y\"]},"
                                      "\"b\":{\"type\":\"boolean\"}},\"required\":[\"a\",\"b\"],"
                                      "\"additionalProperties\":false}");
    tp.cfg.constraint_compact = 1;
    tp.cfg.ignore_eos = 0;
    const sd_bench_strategy strats[] = {SD_BENCH_FIXED, SD_BENCH_ADAPTIVE, SD_BENCH_NO_GRAMMAR_DRAFTS, SD_BENCH_UNCONSTRAINED};
    tp.cfg.n_strategies = 4;
    memcpy(tp.cfg.strategies, strats, sizeof strats);
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    assert_true(r->constrained);
    assert_int_equal(r->n_divergences, 0);
    assert_int_equal(r->n_k, 2 + 3);
    assert_int_equal(r->k[3].strategy, SD_BENCH_NO_GRAMMAR_DRAFTS);
    assert_int_equal(r->k[4].strategy, SD_BENCH_UNCONSTRAINED);
    for (int i = 0; i < r->n_k; i++) assert_true(r->k[i].tps_spec > 0);
    free(r);
    tiny_free(&tp);
    /* a schema that forces every byte: the object is drafted whole by the grammar, so its closing
     * brace is an accepted draft, after which the finished grammar allows only the end of
     * generation; the speculative run must end there as plain decoding does, not emit that end
     * as one more token */
    tiny_load(&tp, 0);
    tp.cfg.constraint_schema = strdup("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":\"xyz\"}},"
                                      "\"required\":[\"a\"],\"additionalProperties\":false}");
    tp.cfg.constraint_compact = 1;
    tp.cfg.ignore_eos = 0;
    tp.cfg.n_strategies = 1;
    tp.cfg.strategies[0] = SD_BENCH_FIXED;
    p = tiny_params(&tp);
    r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    if (r->n_divergences) fail_msg("%d speculative runs differ from plain decoding under a grammar that ends", r->n_divergences);
    for (int i = 0; i < r->n_k; i++) assert_true(r->k[i].acceptance > 0.5); /* the forced bytes were drafted and kept */
    free(r);
    tiny_free(&tp);
    static const char *bad[] = {
        "\"sweep\": {\"k\": [1], \"strategies\": [\"unconstrained\"]}}",
        "\"sweep\": {\"k\": [1]}, \"constraint\": {\"whitespace\": \"compact\"}}",
        "\"sweep\": {\"k\": [1]}, \"constraint\": {\"gbnf\": \"g\", \"whitespace\": \"tight\"}}"};
    static const char *want[] = {"\"unconstrained\" compares against a \"constraint\", and there is none",
                                 ".constraint: expected exactly one of \"json_schema\" and \"gbnf\"",
                                 ".constraint.whitespace: expected \"bounded\" or \"compact\""};
    for (int b = 0; b < 3; b++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{\"target\": {\"model\": \"t\"}, \"draft\": {\"model\": \"d\"}, \"prompts\": {\"text\": [\"a\"]}, %s",
                 bad[b]);
        sd_bench_config c;
        assert_int_equal(sd_bench_config_parse(text, strlen(text), "c.json", &c), SD_ERR_INVALID_ARG);
        if (!strstr(sd_last_error(), want[b])) fail_msg("got: %s", sd_last_error());
    }
}

/* Every strategy side by side in one run on the tiny pair: one result per fixed k, then one per
 * other strategy at the largest k; each greedy run identical to plain decoding; the cost model
 * only for fixed k; prompt lookup alone drafts without the draft model. */
static void test_run_strategies(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 0);
    const sd_bench_strategy all[] = {SD_BENCH_TREE, SD_BENCH_FIXED, SD_BENCH_ADAPTIVE, SD_BENCH_PMIN, SD_BENCH_NGRAM,
                                     SD_BENCH_MODEL_NGRAM};
    tp.cfg.n_strategies = 6;
    memcpy(tp.cfg.strategies, all, sizeof all);
    tp.cfg.tree_budget = 6;
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    assert_int_equal(r->n_divergences, 0);
    assert_int_equal(r->n_k, 2 + 5);
    const sd_bench_strategy want[] = {SD_BENCH_FIXED, SD_BENCH_FIXED, SD_BENCH_TREE, SD_BENCH_ADAPTIVE,
                                      SD_BENCH_PMIN, SD_BENCH_NGRAM, SD_BENCH_MODEL_NGRAM};
    for (int i = 0; i < r->n_k; i++) {
        const sd_bench_k_result *k = &r->k[i];
        printf("  %-11s k=%d: %.2fx, mean accepted length %.2f, acceptance %.0f%%\n", sd_bench_strategy_name(k->strategy),
               k->k, k->speedup, k->mean_accepted, 100 * k->acceptance);
        assert_int_equal(k->strategy, want[i]);
        assert_int_equal(k->k, i == 0 ? 1 : 3);
        assert_int_equal(k->runs, 4);
        assert_true(k->tps_spec > 0 && k->speedup > 0);
        assert_true(k->mean_accepted == 0 || k->mean_accepted >= 1);
        assert_true(k->strategy == SD_BENCH_FIXED ? k->predicted_speedup > 0 : isnan(k->predicted_speedup));
    }
    assert_true(r->k[5].kv_bytes_draft == 0); /* ngram alone: no draft model, no draft cache */
    assert_true(r->k[6].kv_bytes_draft > 0);
    char *js = sd_bench_report_json(r);
    sd_bench_report *b = calloc(1, sizeof *b);
    assert_int_equal(sdtest_bench_report_from_json(js, b), SD_OK);
    assert_int_equal(b->k[6].strategy, SD_BENCH_MODEL_NGRAM);
    free(b);
    free(js);
    free(r);
    tiny_free(&tp);
}

static void test_run_self_draft_bound(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 1);
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    assert_true(r->self_draft);
    assert_int_equal(r->n_divergences, 0);
    for (int i = 0; i < r->n_k; i++) {
        /* The target drafting for itself: every draft accepted, E = k + 1. */
        assert_true(r->k[i].acceptance == 1.0);
        assert_true(r->k[i].alpha == 1.0);
        assert_true(r->k[i].expected_tokens == r->k[i].k + 1.0);
    }
    free(r);
    tiny_free(&tp);
}

/* A draft whose vocabulary is larger than the target's k+1 logit rows: the cost timings must
 * size their logits for the draft too (ASan caught a heap overflow here). */
static void test_run_draft_larger_vocab(void **state) {
    (void)state;
    static const char *cfg_text =
        "{\"name\": \"v\",\n"
        " \"target\": {\"generate\": {\"shape\": \"stories260K\", \"dim\": 32, \"layers\": 1, \"heads\": 4, "
        "\"kv_heads\": 2, \"hidden\": 64, \"vocab\": 300, \"ctx\": 96, \"seed\": 3}},\n"
        " \"draft\": {\"generate\": {\"shape\": \"stories260K\", \"dim\": 16, \"layers\": 1, \"heads\": 2, "
        "\"kv_heads\": 1, \"hidden\": 32, \"vocab\": 1000, \"ctx\": 96, \"seed\": 4}},\n"
        " \"prompts\": {\"text\": [\"Once upon a time\"]},\n"
        " \"n_predict\": 8, \"sweep\": {\"k\": [1]}, \"repetitions\": 1}";
    tiny_pair tp = {0};
    setenv("SPECDEC_CACHE", sdtest_tmp_path("cache/models"), 1);
    assert_int_equal(sd_bench_config_parse(cfg_text, strlen(cfg_text), "v.json", &tp.cfg), SD_OK);
    char path[4096];
    assert_int_equal(sd_bench_model_path(&tp.cfg.target, path, sizeof path, NULL), SD_OK);
    assert_int_equal(sd_model_load(path, NULL, &tp.target), SD_OK);
    assert_int_equal(sd_bench_model_path(&tp.cfg.draft, path, sizeof path, NULL), SD_OK);
    assert_int_equal(sd_model_load(path, NULL, &tp.draft), SD_OK);
    sd_bench_run_params p = tiny_params(&tp);
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_non_null(r);
    const sd_status st = sd_bench_run(&p, r);
    printf("larger-vocab draft: %s\n", st == SD_OK ? "ok" : sd_last_error());
    /* the costs are timed before the pair check refuses the mismatched vocabularies */
    assert_true(st == SD_OK || st == SD_ERR_MISMATCH);
    assert_true(r->t_decode_draft_s > 0 && r->k[0].t_verify_s > 0);
    free(r);
    tiny_free(&tp);
}

static void test_run_broken_verifier_diverges(void **state) {
    (void)state;
    tiny_pair tp;
    tiny_load(&tp, 0);
    sd_bench_run_params p = tiny_params(&tp);
    int vocab = sd_model_hparams(tp.target)->vocab_size;
    p.spec_generate = broken_gen;
    p.hook_user = &vocab;
    sd_bench_report *r = calloc(1, sizeof *r);
    assert_int_equal(sd_bench_run(&p, r), SD_OK);
    /* Every speculative run is wrong at generated token 5, and the check says so. */
    assert_int_equal(r->n_divergences, 2 * 2 * 2);
    assert_int_equal(r->k[0].diverged, 4);
    assert_int_equal(r->k[1].diverged, 4);
    assert_int_equal(r->div[0].index, 5);
    assert_int_equal(r->div[0].k, 1);
    assert_int_equal(r->div[0].prompt, 0);
    assert_int_equal(r->div[0].spec_token, (r->div[0].plain_token + 1) % vocab);
    assert_int_equal(r->div[7].k, 3);
    assert_int_equal(r->div[7].prompt, 1);
    assert_int_equal(r->div[7].rep, 1);
    /* The table names the failure. */
    const char *path = sdtest_tmp_path("table.txt");
    FILE *f = fopen(path, "w");
    sd_bench_report_print(r, f);
    fclose(f);
    char *text = sdtest_read_file(path, NULL);
    assert_non_null(strstr(text, "FAILED: 8 of 8 speculative runs differ from plain decoding"));
    assert_non_null(strstr(text, "prompt 1, k=1, rep 1: first difference at generated token 5"));
    free(text);
    free(r);
    tiny_free(&tp);
}

/* ---- report ---- */

static void fill_report(sd_bench_report *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->schema, sizeof r->schema, "%s", SD_BENCH_SCHEMA);
    snprintf(r->config, sizeof r->config, "configs/stories-greedy.json");
    snprintf(r->name, sizeof r->name, "stories-greedy");
    snprintf(r->description, sizeof r->description, "a \"quoted\" <description> & more");
    snprintf(r->target, sizeof r->target, "../shared/models/stories260K/stories260K.bin");
    snprintf(r->draft, sizeof r->draft, "../shared/models/stories-draft/stories-draft.bin");
    snprintf(r->target_label, sizeof r->target_label, "stories260K.bin");
    snprintf(r->draft_label, sizeof r->draft_label, "random stories15M (f16)");
    snprintf(r->date, sizeof r->date, "2024-01-02T03:04:05Z");
    snprintf(r->cpu, sizeof r->cpu, "Test CPU @ 3.0GHz");
    r->cores = 16;
    r->threads = 8;
    r->bandwidth = 12.345678901234e9;
    r->cost_only = 0;
    r->self_draft = 1;
    r->greedy = 1;
    r->quick = 1;
    r->n_prompts = 4;
    r->n_predict = 128;
    r->repetitions = 3;
    r->temperature = 0.7f; /* a float widened, as the run stores it */
    r->top_k = 40;
    r->top_p = 0.95f;
    r->seed = 9007199254740991.0;
    r->cost_pos = 80;
    r->t_decode_target_s = 1.0 / 3.0;
    r->t_decode_draft_s = 2.5e-5;
    r->peak_rss_bytes = 123456789;
    r->n_k = 3;
    for (int i = 0; i < r->n_k; i++) {
        sd_bench_k_result *k = &r->k[i];
        k->k = 2 * i + 1;
        k->runs = 12;
        k->acceptance = 0.1 * i + 1.0 / 7.0;
        k->alpha = 0.8 - 0.01 * i;
        k->tokens_per_pass = 1.5 + i;
        k->expected_tokens = sd_bench_expected_tokens(k->alpha, k->k);
        for (int j = 0; j < k->k; j++) k->accept_at[j] = 1.0 / (j + 2);
        k->ttft_plain_s = 1e-3 * (i + 1);
        k->ttft_spec_s = 1.1e-3 * (i + 1);
        k->tps_plain = 1000.0 / 3;
        k->tps_spec = 1200.5;
        k->speedup = 1.23456789;
        k->predicted_speedup = sd_bench_predicted_speedup(k->alpha, k->k, 0.1, 1.2);
        k->break_even_alpha = sd_bench_break_even_alpha(k->k, 0.1, 1.2);
        k->t_verify_s = 4e-4;
        k->draft_share = 0.25;
        k->verify_share = 0.6;
        k->kv_bytes_target = 72000;
        k->kv_bytes_draft = 41000;
        k->diverged = i;
        k->mean_accepted = 1.0 + 0.5 * i;
    }
    /* a strategy besides the fixed sweep: no cost-model figures (null in the JSON) */
    r->k[3] = r->k[2];
    r->k[3].strategy = SD_BENCH_MODEL_NGRAM;
    r->k[3].predicted_speedup = r->k[3].break_even_alpha = r->k[3].t_verify_s = NAN;
    r->k[3].speedup = 1.5;
    r->n_k = 4;
    r->best = 3;
    r->best_k = 3;
    r->n_divergences = 3;
    for (int i = 0; i < 3; i++) {
        r->div[i].strategy = i == 2 ? SD_BENCH_MODEL_NGRAM : SD_BENCH_FIXED;
        r->div[i].prompt = i;
        r->div[i].k = 3;
        r->div[i].rep = 2 - i;
        r->div[i].index = 17 + i;
        r->div[i].plain_token = 100 + i;
        r->div[i].spec_token = i == 2 ? -1 : 200 + i;
    }
}

static void expect_same_report(const sd_bench_report *a, const sd_bench_report *b) {
    assert_string_equal(a->schema, b->schema);
    assert_string_equal(a->config, b->config);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->description, b->description);
    assert_string_equal(a->target, b->target);
    assert_string_equal(a->draft, b->draft);
    assert_string_equal(a->target_label, b->target_label);
    assert_string_equal(a->draft_label, b->draft_label);
    assert_string_equal(a->date, b->date);
    assert_string_equal(a->cpu, b->cpu);
#define SAME(f) assert_true(a->f == b->f || (isnan((double)a->f) && isnan((double)b->f)))
    SAME(cores); SAME(threads); SAME(bandwidth); SAME(cost_only); SAME(self_draft); SAME(greedy); SAME(quick);
    SAME(n_prompts); SAME(n_predict); SAME(repetitions); SAME(temperature); SAME(top_p); SAME(top_k); SAME(seed);
    SAME(cost_pos); SAME(t_decode_target_s); SAME(t_decode_draft_s); SAME(peak_rss_bytes); SAME(n_k); SAME(best_k); SAME(best);
    SAME(n_divergences);
    for (int i = 0; i < a->n_k; i++) {
        SAME(k[i].strategy); SAME(k[i].mean_accepted); SAME(k[i].k); SAME(k[i].runs); SAME(k[i].acceptance); SAME(k[i].alpha); SAME(k[i].tokens_per_pass);
        SAME(k[i].expected_tokens); SAME(k[i].ttft_plain_s); SAME(k[i].ttft_spec_s); SAME(k[i].tps_plain);
        SAME(k[i].tps_spec); SAME(k[i].speedup); SAME(k[i].predicted_speedup); SAME(k[i].break_even_alpha);
        SAME(k[i].t_verify_s); SAME(k[i].draft_share); SAME(k[i].verify_share); SAME(k[i].kv_bytes_target);
        SAME(k[i].kv_bytes_draft); SAME(k[i].diverged);
        for (int j = 0; j < SD_MAX_DRAFT; j++) SAME(k[i].accept_at[j]);
    }
    for (int i = 0; i < SD_BENCH_MAX_DIVERGENCES; i++) {
        SAME(div[i].strategy); SAME(div[i].prompt); SAME(div[i].k); SAME(div[i].rep); SAME(div[i].index); SAME(div[i].plain_token);
        SAME(div[i].spec_token);
    }
#undef SAME
}

static void test_report_json_round_trip(void **state) {
    (void)state;
    sd_bench_report *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    fill_report(a);
    char *js = sd_bench_report_json(a);
    assert_non_null(js);
    assert_int_equal(sdtest_bench_report_from_json(js, b), SD_OK);
    expect_same_report(a, b);
    /* Written again, the text is the same. */
    char *js2 = sd_bench_report_json(b);
    assert_string_equal(js, js2);
    free(js2);
    /* A missing field is named. */
    char *cut = strstr(js, "\"tokens_per_s_spec\"");
    assert_non_null(cut);
    memcpy(cut, "\"tokens_per_s_XXXX\"", 19);
    assert_int_equal(sdtest_bench_report_from_json(js, b), SD_ERR_FORMAT);
    assert_string_equal(sd_last_error(), "bench report: .results[0].tokens_per_s_spec: expected a number");
    assert_int_equal(sdtest_bench_report_from_json("{\"schema\": \"other/2\"}", b), SD_ERR_UNSUPPORTED);
    assert_int_equal(sdtest_bench_report_from_json("not json", b), SD_ERR_FORMAT);
    free(js);
    free(a);
    free(b);
}

static void test_report_svg_and_table(void **state) {
    (void)state;
    sd_bench_report *r = calloc(1, sizeof *r);
    fill_report(r);
    char *svg = sd_bench_report_svg(r);
    assert_non_null(svg);
    assert_true(!strncmp(svg, "<?xml", 5));
    assert_non_null(strstr(svg, "</svg>\n"));
    assert_non_null(strstr(svg, "stories-greedy: speculative vs plain decoding"));
    assert_non_null(strstr(svg, "target stories260K.bin drafting for itself"));
    assert_non_null(strstr(svg, "Test CPU @ 3.0GHz"));
    assert_non_null(strstr(svg, "draft length k"));
    assert_non_null(strstr(svg, "plain decoding (the 1.00x baseline)"));
    assert_non_null(strstr(svg, ">model+ngram 1.50x</text>")); /* its level line's label */
    /* Text is escaped: no raw < or & from the strings reaches the markup. */
    snprintf(r->cpu, sizeof r->cpu, "A<B & C");
    free(svg);
    svg = sd_bench_report_svg(r);
    assert_non_null(strstr(svg, "A&lt;B &amp; C"));
    free(svg);
    const char *path = sdtest_tmp_path("table2.txt");
    FILE *f = fopen(path, "w");
    sd_bench_report_print(r, f);
    fclose(f);
    char *text = sdtest_read_file(path, NULL);
    assert_non_null(strstr(text, "best k:   3: 1.23x plain decoding measured"));
    assert_non_null(strstr(text, "best:     model+ngram (k up to 5): 1.50x plain decoding at 2.00 mean accepted length, "
                                 "ahead of every fixed k"));
    assert_non_null(strstr(text, "model+ngram       greedy      5   34.3%  0.780   2.00   3.50      -     333.3    1200.5    1.50x         -")); /* its row: no cost-model columns */
    assert_non_null(strstr(text, "model+ngram, prompt 3, k=3, rep 1: first difference"));
    assert_non_null(strstr(text, "A<B & C, 16 cores, 8 threads, 12.3 GB/s"));
    free(text);
    free(r);
}

/* ---- cache sizes ---- */

static void write_cache_index(const char *dir, int i, const char *level, const char *type, const char *size) {
    char path[512];
    snprintf(path, sizeof path, "%s/index%d", dir, i);
    mkdir(path, 0700);
    const char *names[3] = {"level", "type", "size"}, *vals[3] = {level, type, size};
    for (int k = 0; k < 3; k++) {
        if (!vals[k]) continue;
        snprintf(path, sizeof path, "%s/index%d/%s", dir, i, names[k]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f, "%s\n", vals[k]);
        fclose(f);
    }
}

/* The sysfs layout of this machine kind (AMD EPYC guest: 32K L1d/L1i, 1024K L2, 32768K L3,
 * where glibc's sysconf says 320 MiB of L3), and what the parser must skip. */
static void test_cache_sizes_sysfs(void **state) {
    (void)state;
    /* indexN entries (level, type, size; NULL: no size file) and what must be found */
    static const struct {
        const char *entries[4][3];
        size_t l2, l3;
    } cases[] = {
        {{{NULL}}, 0, 0}, /* empty: nothing found */
        {{{"1", "Data", "32K"}, {"1", "Instruction", "32K"}, {"2", "Unified", "1024K"}, {"3", "Unified", "32768K"}},
         (size_t)1 << 20, (size_t)32 << 20},
        /* an instruction cache is not where weights live; sizes in M and in bytes */
        {{{"2", "Instruction", "8M"}, {"2", "Data", "524288"}, {"3", "Unified", "16M"}}, (size_t)512 << 10,
         (size_t)16 << 20},
        /* malformed or missing entries count as absent */
        {{{"2", "Unified", "lots"}, {"3", "Unified", "-5K"}, {"3", "Unified", NULL}, {"3", "Unified", "12Q"}}, 0, 0},
    };
    size_t l2 = 1, l3 = 1;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char name[32], dir[256];
        snprintf(name, sizeof name, "cpu0-cache-%zu", c);
        snprintf(dir, sizeof dir, "%s", sdtest_tmp_path(name));
        mkdir(dir, 0700);
        for (int i = 0; i < 4 && cases[c].entries[i][0]; i++)
            write_cache_index(dir, i, cases[c].entries[i][0], cases[c].entries[i][1], cases[c].entries[i][2]);
        assert_int_equal(sd_cache_sizes_sysfs(dir, &l2, &l3), (cases[c].l2 > 0) + (cases[c].l3 > 0));
        assert_int_equal(l2, cases[c].l2);
        assert_int_equal(l3, cases[c].l3);
    }
    assert_int_equal(sd_cache_sizes_sysfs("/nonexistent", &l2, &l3), 0);
    /* sysfs with both levels decides; with less, CPUID; without either the size is unknown (0),
     * never a guess */
    sd_cache_source src = SD_CACHES_UNKNOWN;
    char two[256];
    snprintf(two, sizeof two, "%s", sdtest_tmp_path("cpu0-cache-1"));
    assert_true(sd_cache_bytes_from(two, 1, 2, &src) == (double)(32 << 20) + 2.0 * (1 << 20));
    assert_int_equal(src, SD_CACHES_SYSFS);
    assert_true(sd_cache_bytes_from("/nonexistent", 0, 2, &src) == 0);
    assert_int_equal(src, SD_CACHES_UNKNOWN);
    size_t c2 = 0, c3 = 0;
    const int cpuid_levels = sd_cpu_caches_cpuid(&c2, &c3);
    const double via_cpuid = sd_cache_bytes_from("/nonexistent", 1, 2, &src);
    if (c3) {
        assert_int_equal(src, SD_CACHES_CPUID);
        assert_true(via_cpuid == (double)c3 + 2.0 * (double)c2);
    } else {
        assert_int_equal(src, SD_CACHES_UNKNOWN);
        assert_true(via_cpuid == 0);
    }
    printf("  CPUID: %d levels, L2 %zu KiB, L3 %zu KiB\n", cpuid_levels, c2 >> 10, c3 >> 10);
    /* where the kernel describes the caches, CPUID must say the same (it is read in its place
     * where /sys has no entries) */
    if (sd_cache_sizes_sysfs("/sys/devices/system/cpu/cpu0/cache", &l2, &l3) == 2) {
        assert_true(sd_cache_bytes(2, &src) == (double)l3 + 2.0 * (double)l2);
        assert_int_equal(src, SD_CACHES_SYSFS);
        printf("  this machine: L2 %zu KiB per core, L3 %zu MiB (sysfs)\n", l2 >> 10, l3 >> 20);
        if (cpuid_levels == 2 && (c2 != l2 || c3 != l3))
            fail_msg("CPUID says L2 %zu, L3 %zu bytes; sysfs says %zu, %zu", c2, c3, l2, l3);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_valid_defaults), cmocka_unit_test(test_config_generate),
        cmocka_unit_test(test_config_shipped),        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_prompt_file),           cmocka_unit_test(test_cost_model),
        cmocka_unit_test(test_first_divergence),      cmocka_unit_test(test_run_greedy_identical),
        cmocka_unit_test(test_run_strategies),
        cmocka_unit_test(test_run_sampling_modes),
        cmocka_unit_test(test_run_constraint),        cmocka_unit_test(test_config_strategies_template),
        cmocka_unit_test(test_run_self_draft_bound),  cmocka_unit_test(test_run_broken_verifier_diverges),
        cmocka_unit_test(test_run_draft_larger_vocab),
        cmocka_unit_test(test_report_json_round_trip), cmocka_unit_test(test_report_svg_and_table),
        cmocka_unit_test(test_cache_sizes_sysfs),     cmocka_unit_test(test_config_twin_cache),
    };
    return cmocka_run_group_tests_name("bench", tests, NULL, NULL);
}
