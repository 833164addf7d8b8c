/* Tool calling in the chat module: each family's rendering of tools, calls and results against text
 * written from its template (Qwen3's from ../shared/tokenizers/qwen3/tokenizer_config.json, Qwen2.5's
 * and Llama 3.1/3.2's from Meta's and Qwen's published templates; each was also checked once against
 * Jinja2 rendering the template with Hugging Face's tojson), Python's json.dumps of numbers and
 * strings against values Python prints, the grammar of required and named calls (sentences in and
 * out), reading calls out of outputs (auto and constrained; whole, byte by byte and in random pieces
 * alike), and every output drawn at random under the grammar with a real vocabulary read back as
 * calls whose arguments are JSON. The server's side: tools, tool_choice and the messages' calls and
 * results checked field by field, the prompt the template's, responses and streams of calls. */
#include "sdtest.h"
#include "sdtest_tok.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"
#include "server/internal.h"
#include "specdec/chat.h"
#include "specdec/grammar.h"
#include "specdec/sample.h"
#include "specdec/tokenizer.h"

/* ---- rendering ------------------------------------------------------------------------------ */

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"M\\u00e9t\\u00e9o, \\\"now\\\"\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": "
    "\"integer\", \"maximum\": 1e1}}, \"required\": [\"city\"]}}}]";
static const sd_chat_tool_call k_call = {"get_weather", "{\"city\": \"Paris\", \"days\": 2.50}"};
/* a system message, a question, a call, its result, an answer, a thank-you */
static const sd_chat_msg k_conv[] = {
    {"system", "Be brief.", NULL, 0},
    {"user", "Weather in Paris?", NULL, 0},
    {"assistant", NULL, &k_call, 1},
    {"tool", "22 C, \"sunny\"", NULL, 0},
    {"assistant", "It is 22.", NULL, 0},
    {"user", "Thanks", NULL, 0},
};

static char *render(sd_chat_format f, const sd_chat_msg *m, int n, const char *tools, int gen) {
    sd_chat_params p = sd_chat_default_params();
    p.add_generation_prompt = gen;
    p.bos_token = "<s>";
    p.date = "01 Jan 2025";
    p.tools = tools;
    char *out = NULL;
    size_t len = 0;
    const sd_status st = sd_chat_render(f, m, n, &p, &out, &len);
    if (st != SD_OK) fail_msg("%s: %s", sd_chat_name(f), sd_last_error());
    assert_int_equal(strlen(out), len);
    return out;
}

static void expect(sd_chat_format f, const sd_chat_msg *m, int n, const char *tools, int gen, const char *want) {
    char *got = render(f, m, n, tools, gen);
    if (strcmp(got, want) != 0) {
        print_error("%s renders differently\n", sd_chat_name(f));
        sdtest_print_text("  expected", want, strlen(want));
        sdtest_print_text("  got     ", got, strlen(got));
        fail();
    }
    free(got);
}

static void expect_error(sd_chat_format f, const sd_chat_msg *m, int n, const char *tools, sd_status want,
                         const char *msg) {
    sd_chat_params p = sd_chat_default_params();
    p.tools = tools;
    char *out = (char *)1;
    assert_int_equal(sd_chat_render(f, m, n, &p, &out, NULL), want);
    assert_null(out);
    assert_string_equal(sd_last_error(), msg);
}

#define HERMES_HEAD(sys)                                                                                                 \
    "<|im_start|>system\n" sys "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"      \
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"                              \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"M\xc3\xa9t\xc3\xa9o, "      \
    "\\\"now\\\"\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": " \
    "{\"type\": \"integer\", \"maximum\": 10.0}}, \"required\": [\"city\"]}}}\n</tools>\n\n"                             \
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "  \
    "XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
#define HERMES_TAIL(args)                                                                                                \
    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "   \
    "\"arguments\": " args "}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22 C, \"sunny\"\n"             \
    "</tool_response><|im_end|>\n<|im_start|>assistant\nIt is 22.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n"       \
    "<|im_start|>assistant\n"

/* Qwen3: the tools in the system turn after the system message; the call's arguments written as
 * the string they are (the template's `arguments is string`); results in a user turn. Qwen2.5: the
 * same, its arguments through tojson (2.50 becomes 2.5), its default system message when there is
 * none. ChatML takes Qwen3's form. */
static void test_render_hermes(void **state) {
    (void)state;
    expect(SD_CHAT_QWEN3, k_conv, 6, k_tools, 1, HERMES_HEAD("Be brief.\n\n") HERMES_TAIL("{\"city\": \"Paris\", \"days\": 2.50}"));
    expect(SD_CHAT_CHATML, k_conv, 6, k_tools, 1, HERMES_HEAD("Be brief.\n\n") HERMES_TAIL("{\"city\": \"Paris\", \"days\": 2.50}"));
    expect(SD_CHAT_QWEN25, k_conv, 6, k_tools, 1, HERMES_HEAD("Be brief.\n\n") HERMES_TAIL("{\"city\": \"Paris\", \"days\": 2.5}"));
    expect(SD_CHAT_QWEN25, k_conv + 1, 1, k_tools, 0,
           HERMES_HEAD("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n")
           "<|im_start|>user\nWeather in Paris?<|im_end|>\n");
    expect(SD_CHAT_QWEN3, k_conv + 1, 1, k_tools, 0, HERMES_HEAD("") "<|im_start|>user\nWeather in Paris?<|im_end|>\n");
    /* without tools the calls and results are written all the same */
    expect(SD_CHAT_QWEN3, k_conv + 1, 3, NULL, 0,
           "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
           "\"arguments\": {\"city\": \"Paris\", \"days\": 2.50}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
           "<tool_response>\n22 C, \"sunny\"\n</tool_response><|im_end|>\n");
    /* text before calls, two calls, two results in one user turn */
    static const sd_chat_tool_call two[] = {{"a", "{}"}, {"b", "{\"x\":1}"}};
    const sd_chat_msg m[] = {{"user", "q", NULL, 0}, {"assistant", "Let me see.", two, 2}, {"tool", "r1", NULL, 0},
                             {"tool", "r2", NULL, 0}};
    static const char calls[] = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
                                "\"b\", \"arguments\": {\"x\":1}}\n</tool_call>";
    static const char results[] = "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
                                  "</tool_response><|im_end|>\n";
    char want[1024];
    snprintf(want, sizeof want, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nLet me see.\n%s<|im_end|>\n%s", calls,
             results);
    expect(SD_CHAT_QWEN3, m, 4, NULL, 0, want);
    expect(SD_CHAT_CHATML, m, 4, NULL, 0, want);
    const sd_chat_msg m2[] = {{"user", "q", NULL, 0}, {"assistant", "", two, 2}, {"tool", "r1", NULL, 0}, {"tool", "r2", NULL, 0}};
    snprintf(want, sizeof want, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n%s", calls, results);
    expect(SD_CHAT_QWEN3, m2, 4, NULL, 0, want);
    /* Qwen2.5 (tojson: {"x": 1}) */
    snprintf(want, sizeof want,
             "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
             "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"
             "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n%s",
             results);
    expect(SD_CHAT_QWEN25, m2, 4, NULL, 0, want);
    /* Qwen3's last turn after the query: the empty <think> block, then the call */
    const sd_chat_msg m3[] = {{"user", "q", NULL, 0}, {"assistant", NULL, two, 1}};
    expect(SD_CHAT_QWEN3, m3, 2, NULL, 0,
           "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"a\", "
           "\"arguments\": {}}\n</tool_call><|im_end|>\n");
}

/* Llama 3.1 and 3.2 (3.3 is 3.1's): "Environment: ipython" in the system header, the tools indented
 * in the first user message with Meta's instructions, the call as the assistant's whole turn with its
 * arguments through tojson, the result as an ipython turn through tojson (a string is iterable to
 * Jinja, so it is quoted). */
static void test_render_llama3(void **state) {
    (void)state;
    static const char want[] =
        "<s><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\n"
        "Today Date: 01 Jan 2025\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
        "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
        "argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    \"function\": {\n"
        "        \"name\": \"get_weather\",\n        \"description\": \"M\xc3\xa9t\xc3\xa9o, \\\"now\\\"\",\n"
        "        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n"
        "                \"city\": {\n                    \"type\": \"string\"\n                },\n"
        "                \"days\": {\n                    \"type\": \"integer\",\n                    \"maximum\": 10.0\n"
        "                }\n            },\n            \"required\": [\n                \"city\"\n            ]\n"
        "        }\n    }\n}\n\nWeather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2.5}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"22 C, \\\"sunny\\\"\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 22.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "Thanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    expect(SD_CHAT_LLAMA31, k_conv, 6, k_tools, 1, want);
    expect(SD_CHAT_LLAMA32, k_conv, 6, k_tools, 1, want);
    /* the first message after the system's takes the tools whatever its role, trimmed */
    const sd_chat_msg first[] = {{"user", "  q  ", NULL, 0}};
    char *got = render(SD_CHAT_LLAMA31, first, 1, k_tools, 0);
    assert_string_equal(got + strlen(got) - 15, "\n}\n\nq<|eot_id|>");
    free(got);
    /* without tools: no ipython environment, the calls and results all the same */
    got = render(SD_CHAT_LLAMA31, k_conv, 4, NULL, 0);
    assert_null(strstr(got, "Environment"));
    assert_non_null(strstr(got, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2.5}}<|eot_id|>"));
    free(got);
    /* the template's exceptions */
    static const sd_chat_tool_call two[] = {{"a", "{}"}, {"b", "{}"}};
    const sd_chat_msg m[] = {{"user", "q", NULL, 0}, {"assistant", NULL, two, 2}};
    expect_error(SD_CHAT_LLAMA31, m, 2, NULL, SD_ERR_INVALID_ARG,
                 "chat template llama3.1: This model only supports single tool-calls at once!");
    expect_error(SD_CHAT_LLAMA32, k_conv, 1, k_tools, SD_ERR_INVALID_ARG,
                 "chat template llama3.2: Cannot put tools in the first user message when there's no first user message!");
}

/* Formats without tool calling refuse tools, calls and results by name; bad calls and tools are
 * refused too. */
static void test_render_refused(void **state) {
    (void)state;
    static const sd_chat_format none[] = {SD_CHAT_LLAMA3, SD_CHAT_LLAMA2, SD_CHAT_MISTRAL, SD_CHAT_GEMMA, SD_CHAT_PHI3};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        assert_int_equal(sd_chat_tool_syntax_of(none[i]), SD_CHAT_TOOLS_NONE);
        char msg[300];
        snprintf(msg, sizeof msg,
                 "chat template %s has no tool calling (it is written for chatml, qwen2.5, qwen3, llama3.1 and llama3.2)",
                 sd_chat_name(none[i]));
        expect_error(none[i], k_conv + 1, 1, k_tools, SD_ERR_UNSUPPORTED, msg);
        snprintf(msg, sizeof msg,
                 "chat template %s has no tool calling: message 1 is an assistant's tool call (tool calling is written for "
                 "chatml, qwen2.5, qwen3, llama3.1 and llama3.2)",
                 sd_chat_name(none[i]));
        expect_error(none[i], k_conv + 1, 3, NULL, SD_ERR_UNSUPPORTED, msg);
    }
    assert_int_equal(sd_chat_tool_syntax_of(SD_CHAT_QWEN25), SD_CHAT_TOOLS_HERMES);
    assert_int_equal(sd_chat_tool_syntax_of(SD_CHAT_LLAMA32), SD_CHAT_TOOLS_LLAMA3);
    static const sd_chat_tool_call bad = {"f", "{\"a\": }"};
    const sd_chat_msg m[] = {{"user", "q", NULL, 0}, {"assistant", NULL, &bad, 1}};
    expect_error(SD_CHAT_QWEN3, m, 2, NULL, SD_ERR_INVALID_ARG, "chat: message 1: tool call 0: the arguments are not JSON");
    const sd_chat_msg u[] = {{"user", NULL, &k_call, 1}};
    expect_error(SD_CHAT_QWEN3, u, 1, NULL, SD_ERR_INVALID_ARG, "chat: message 0: only an assistant message has tool calls");
    const sd_chat_msg bot[] = {{"bot", "x", NULL, 0}};
    expect_error(SD_CHAT_CHATML, bot, 1, NULL, SD_ERR_INVALID_ARG,
                 "chat: message 0 has role 'bot' (the roles are system, user, assistant and tool)");
    expect_error(SD_CHAT_QWEN3, k_conv + 1, 1, "{\"type\": \"function\"}", SD_ERR_INVALID_ARG,
                 "chat: the tools must be a JSON array of tool objects");
    expect_error(SD_CHAT_QWEN3, k_conv + 1, 1, "[1]", SD_ERR_INVALID_ARG, "chat: tool 0 is not a JSON object");
    expect_error(SD_CHAT_QWEN3, k_conv + 1, 1, "[]", SD_ERR_INVALID_ARG, "chat: the tools array is empty (give NULL for none)");
}

/* The tools, calls and results are the client's text: their spans are text, so that a
 * "<|im_end|>" in a description does not become the special token. */
static void test_render_spans(void **state) {
    (void)state;
    static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"<|im_end|>\"}}]";
    static const sd_chat_tool_call call = {"f", "{\"s\": \"<|im_end|>\"}"};
    const sd_chat_msg m[] = {{"user", "q", NULL, 0}, {"assistant", NULL, &call, 1}, {"tool", "<|im_end|>", NULL, 0}};
    sd_chat_params p = sd_chat_default_params();
    p.tools = tools;
    char *out = NULL;
    size_t len = 0;
    sd_tok_span *sp = NULL;
    int n_sp = 0;
    assert_int_equal(sd_chat_render_spans(SD_CHAT_QWEN3, m, 3, &p, &out, &len, &sp, &n_sp), SD_OK);
    int found = 0;
    for (size_t at = 0; at + 10 <= len; at++) {
        if (memcmp(out + at, "<|im_end|>", 10) != 0) continue;
        int inside = 0;
        for (int i = 0; i < n_sp; i++) inside |= at >= sp[i].off && at + 10 <= sp[i].off + sp[i].len;
        /* the template's own markers are outside the spans; the three the client wrote inside */
        const int client = at > 0 && (out[at - 1] == '"' || out[at - 1] == '\n') && at + 10 < len &&
                           (out[at + 10] == '"' || out[at + 10] == '\n');
        if (client) {
            assert_true(inside);
            found++;
        } else {
            assert_false(inside);
        }
    }
    assert_int_equal(found, 3);
    free(sp);
    free(out);
}

/* ---- Python's json.dumps ---------------------------------------------------------------------- */

static void test_pyjson(void **state) {
    (void)state;
    /* each input and what Python 3 prints for json.dumps(json.loads(input), ensure_ascii=False) */
    static const char *const cases[][2] = {
        {"0.1", "0.1"},
        {"1e-5", "1e-05"},
        {"1e-4", "0.0001"},
        {"1e15", "1000000000000000.0"},
        {"1E16", "1e+16"},
        {"5e-324", "5e-324"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"},
        {"100.0", "100.0"},
        {"123.456e5", "12345600.0"},
        {"-0", "0"},
        {"-0.0", "-0.0"},
        {"1e400", "Infinity"},
        {"-1e400", "-Infinity"},
        {"9007199254740993", "9007199254740993"},
        {"9007199254740993.0", "9007199254740992.0"},
        {"0.30000000000000004", "0.30000000000000004"},
        {"123456789012345678901234567890", "123456789012345678901234567890"},
        {"12e-1", "1.2"},
        {"-6.281874682105646e+21", "-6.281874682105646e+21"},
        {"696603148925121.1", "696603148925121.1"},
        {" [ 1 ,2, {\"a\" :true,\"b\":null} , [ ] , { } ] ", "[1, 2, {\"a\": true, \"b\": null}, [], {}]"},
        {"\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\u0001\\u001f\\\"\\\\\x7f\"",
         "\"\xc3\xa9\xf0\x9f\x98\x80/\\b\\f\\n\\r\\t\\u0001\\u001f\\\"\\\\\x7f\""},
        {"\"\\ud800x\"", "\"\\ud800x\""}, /* a lone surrogate cannot be UTF-8: kept as an escape */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0;
        char *got = chat_pyjson(cases[i][0], strlen(cases[i][0]), -1, &n);
        if (!got || strcmp(got, cases[i][1]) != 0) fail_msg("%s: got %s, want %s", cases[i][0], got ? got : "NULL", cases[i][1]);
        assert_int_equal(n, strlen(got));
        free(got);
    }
    size_t n = 0;
    char *got = chat_pyjson("{\"a\": [1, {}], \"b\": []}", 23, 4, &n);
    assert_string_equal(got, "{\n    \"a\": [\n        1,\n        {}\n    ],\n    \"b\": []\n}");
    free(got);
    static const char *const not_json[] = {"", "{", "[1,]", "01", "{\"a\" 1}", "\"\\x\"", "1 2", "tru", "\"a\x01\""};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++)
        assert_null(chat_pyjson(not_json[i], strlen(not_json[i]), -1, NULL));
    got = chat_pystring("a\"b\\c\nd\x01\xc3\xa9", 10, &n);
    assert_string_equal(got, "\"a\\\"b\\\\c\\nd\\u0001\xc3\xa9\"");
    free(got);
}

/* ---- the grammar of calls ----------------------------------------------------------------------- */

static const char k_params_weather[] = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 8}, "
                                       "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}}, \"required\": "
                                       "[\"city\"], \"additionalProperties\": false}";
static const sd_chat_tool k_tool_list[] = {
    {"get_weather", k_params_weather, sizeof k_params_weather - 1},
    {"get", NULL, 0}, /* no parameters: {} only */
};

static int sentence(sd_grammar *g, const char *s) {
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &m), SD_OK);
    const int ok = sd_grammar_matcher_accept_bytes(m, s, strlen(s)) == SD_OK && sd_grammar_matcher_can_end(m);
    sd_grammar_matcher_free(m);
    return ok;
}

static sd_grammar *tool_grammar(sd_chat_tool_syntax s, int only, int parallel) {
    sd_grammar *g = NULL;
    int bad = 5;
    if (sd_chat_tool_grammar(s, k_tool_list, 2, only, parallel, NULL, &bad, &g) != SD_OK) fail_msg("%s", sd_last_error());
    assert_int_equal(bad, -1);
    return g;
}

#define W1 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
#define W2 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": { \"city\" : \"Oslo\", \"days\": 3 }}\n</tool_call>"
#define G1 "<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>"

static void test_grammar(void **state) {
    (void)state;
    static const struct {
        sd_chat_tool_syntax syn;
        int only, parallel;
        const char *yes[6], *no[8];
    } cases[] = {
        {SD_CHAT_TOOLS_HERMES,
         -1,
         1,
         {W1, W2, G1, W1 "\n" G1, W1 "\n" W2 "\n" G1, NULL},
         {"", "x" W1, W1 "\n", W1 " ", W1 G1, "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": 1}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 8}}\n</tool_call>", NULL}},
        {SD_CHAT_TOOLS_HERMES, -1, 0, {W1, G1, NULL}, {W1 "\n" G1, "", NULL}},
        {SD_CHAT_TOOLS_HERMES, 0, 1, {W1, W2, NULL}, {G1, W1 "\n" W2, NULL}},
        {SD_CHAT_TOOLS_HERMES, 1, 1, {G1, NULL}, {W1, NULL}},
        {SD_CHAT_TOOLS_LLAMA3,
         -1,
         1,
         {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 1}}", "{\"name\": \"get\", \"parameters\": {}}",
          NULL},
         {"{\"name\": \"get\", \"parameters\": {}}\n{\"name\": \"get\", \"parameters\": {}}",
          "{\"name\": \"get\", \"arguments\": {}}", " {\"name\": \"get\", \"parameters\": {}}",
          "{\"name\": \"get_weather\", \"parameters\": {\"days\": 1}}", NULL}},
        {SD_CHAT_TOOLS_LLAMA3, 1, 1, {"{\"name\": \"get\", \"parameters\": { }}", NULL},
         {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = tool_grammar(cases[i].syn, cases[i].only, cases[i].parallel);
        for (int k = 0; cases[i].yes[k]; k++)
            if (!sentence(g, cases[i].yes[k])) fail_msg("case %zu: should match: %s", i, cases[i].yes[k]);
        for (int k = 0; cases[i].no[k]; k++)
            if (sentence(g, cases[i].no[k])) fail_msg("case %zu: should not match: %s", i, cases[i].no[k]);
        sd_grammar_free(g);
    }
    /* a schema the compiler refuses names its tool; so does a bad name */
    static const char bad_schema[] = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"number\", \"multipleOf\": 3}}}";
    const sd_chat_tool tools[2] = {{"ok", NULL, 0}, {"bad", bad_schema, sizeof bad_schema - 1}};
    sd_grammar *g = (sd_grammar *)1;
    int bad = -1;
    assert_int_equal(sd_chat_tool_grammar(SD_CHAT_TOOLS_HERMES, tools, 2, -1, 1, NULL, &bad, &g), SD_ERR_UNSUPPORTED);
    assert_null(g);
    assert_int_equal(bad, 1);
    assert_string_equal(sd_last_error(), "schema: .properties.n.multipleOf: unsupported keyword \"multipleOf\"");
    /* named: only that tool's schema is compiled */
    assert_int_equal(sd_chat_tool_grammar(SD_CHAT_TOOLS_HERMES, tools, 2, 0, 1, NULL, &bad, &g), SD_OK);
    sd_grammar_free(g);
    const sd_chat_tool named_badly[1] = {{"a b", NULL, 0}};
    assert_int_equal(sd_chat_tool_grammar(SD_CHAT_TOOLS_LLAMA3, named_badly, 1, -1, 1, NULL, &bad, &g), SD_ERR_INVALID_ARG);
    assert_int_equal(bad, 0);
    assert_int_equal(sd_chat_tool_grammar(SD_CHAT_TOOLS_NONE, tools, 1, -1, 1, NULL, &bad, &g), SD_ERR_UNSUPPORTED);
}

/* ---- reading calls -------------------------------------------------------------------------- */

typedef struct {
    char content[4096];
    int n_calls;
    char names[8][80];
    char args[8][1024];
} reading;

static void take(reading *r, const sd_chat_tool_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == SD_CHAT_TOOL_CONTENT) {
            strncat(r->content, ev[i].text, ev[i].len);
        } else if (ev[i].kind == SD_CHAT_TOOL_CALL) {
            assert_int_equal(ev[i].call, r->n_calls);
            assert_true(r->n_calls < 8);
            snprintf(r->names[r->n_calls++], sizeof r->names[0], "%.*s", (int)ev[i].len, ev[i].text);
        } else {
            assert_int_equal(ev[i].call, r->n_calls - 1);
            strncat(r->args[ev[i].call], ev[i].text, ev[i].len);
        }
    }
}

/* The output fed in pieces of at most `piece` bytes (0: whole; <0: random sizes, seeded by -piece). */
static void read_out(sd_chat_tool_syntax s, int constrained, const char *text, int piece, reading *r) {
    static const char *const names[] = {"get_weather", "get"};
    memset(r, 0, sizeof *r);
    sd_chat_tool_parser *p = NULL;
    assert_int_equal(sd_chat_tool_parser_create(s, constrained, names, 2, &p), SD_OK);
    const size_t n = strlen(text);
    sd_rng rng;
    sd_rng_seed(&rng, (uint64_t)(piece < 0 ? -piece : 1));
    size_t at = 0;
    do {
        size_t k = piece == 0 ? n - at : piece > 0 ? (size_t)piece : 1 + (size_t)(sd_rng_uniform(&rng) * 7);
        if (k > n - at) k = n - at;
        const sd_chat_tool_event *ev = NULL;
        int n_ev = 0;
        assert_int_equal(sd_chat_tool_parser_feed(p, text + at, k, at + k == n, &ev, &n_ev), SD_OK);
        take(r, ev, n_ev);
        at += k;
    } while (at < n);
    assert_int_equal(sd_chat_tool_parser_n_calls(p), r->n_calls);
    const sd_chat_tool_event *ev = NULL;
    int n_ev = 0;
    assert_int_equal(sd_chat_tool_parser_feed(p, "x", 1, 1, &ev, &n_ev), SD_ERR_INVALID_ARG); /* after the end */
    sd_chat_tool_parser_free(p);
}

/* Every way of cutting the output into pieces reads the same. */
static void expect_reading(sd_chat_tool_syntax s, int constrained, const char *text, const char *content, int n_calls,
                           const char *const *names, const char *const *args) {
    const int pieces[] = {0, 1, 2, 3, 5, -1, -2, -3, -4};
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        reading r;
        read_out(s, constrained, text, pieces[k], &r);
        if (strcmp(r.content, content) != 0 || r.n_calls != n_calls)
            fail_msg("pieces %d of %s: content \"%s\" and %d calls, want \"%s\" and %d", pieces[k], text, r.content, r.n_calls,
                     content, n_calls);
        for (int c = 0; c < n_calls; c++) {
            assert_string_equal(r.names[c], names[c]);
            assert_string_equal(r.args[c], args[c]);
        }
    }
}

static void test_read_auto(void **state) {
    (void)state;
    const sd_chat_tool_syntax H = SD_CHAT_TOOLS_HERMES, L = SD_CHAT_TOOLS_LLAMA3;
    static const char *const w[] = {"get_weather"}, *const wa[] = {"{\"city\": \"Rome\"}"};
    static const char *const two[] = {"get_weather", "get"}, *const two_a[] = {"{\"city\": \"Rome\"}", "{}"};
    /* text only, text that looks like a tag's start, whitespace */
    expect_reading(H, 0, "Hello there.", "Hello there.", 0, NULL, NULL);
    expect_reading(H, 0, "a <tool_ b <tool\n", "a <tool_ b <tool\n", 0, NULL, NULL);
    expect_reading(H, 0, "", "", 0, NULL, NULL);
    /* well-formed: one call, two calls with whitespace between, text before (its trailing whitespace dropped) */
    expect_reading(H, 0, W1, "", 1, w, wa);
    expect_reading(H, 0, "\n" W1 "\n\n" G1 "\n", "", 2, two, two_a);
    expect_reading(H, 0, "I will look.\n\n" W1, "I will look.", 1, w, wa);
    expect_reading(H, 0, "<think>\nok\n</think>\n\n" W1, "<think>\nok\n</think>", 1, w, wa);
    /* any key order and spacing a model writes, "arguments" only */
    static const char *const sp[] = {"{ \"city\":\"Rome\" }"};
    expect_reading(H, 0, "<tool_call>{\"arguments\": { \"city\":\"Rome\" } , \"name\":\"get_weather\"}</tool_call>", "", 1, w, sp);
    /* malformed: all of it is text */
    static const char *const malformed[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}\n</tool_call>", /* a brace short */
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n",           /* not closed */
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",                          /* unknown function */
        "<tool_call>\n{\"name\": \"get\", \"arguments\": \"{}\"}\n</tool_call>",                       /* arguments a string */
        "<tool_call>\n{\"name\": \"get\", \"parameters\": {}}\n</tool_call>",                          /* Llama's key */
        "<tool_call>\n{\"name\": \"get\", \"arguments\": {}, \"x\": 1}\n</tool_call>",                 /* another key */
        "<tool_call>\n{\"name\": \"get\", \"name\": \"get\", \"arguments\": {}}\n</tool_call>",        /* twice */
        W1 " and more",                                                                                  /* text after */
        "Sure." W1 "<tool_call>x</tool_call>",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        expect_reading(H, 0, malformed[i], malformed[i], 0, NULL, NULL);
    /* Llama 3: the reply is one call, or text */
    static const char *const la[] = {"{\"city\": \"Rome\"}"};
    expect_reading(L, 0, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "", 1, w, la);
    expect_reading(L, 0, "  {\"parameters\": {\"city\": \"Rome\"}, \"name\": \"get_weather\"} \n", "", 1, w, la);
    expect_reading(L, 0, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}", "", 1, w, la);
    expect_reading(L, 0, "It is {\"name\": \"get\"}", "It is {\"name\": \"get\"}", 0, NULL, NULL);
    expect_reading(L, 0, " {\"name\": \"get\", \"parameters\": {}} {", " {\"name\": \"get\", \"parameters\": {}} {", 0, NULL, NULL);
    expect_reading(L, 0, "{\"a\": 1}", "{\"a\": 1}", 0, NULL, NULL);
    expect_reading(L, 0, "  \n", "  \n", 0, NULL, NULL);
}

static void test_read_constrained(void **state) {
    (void)state;
    const sd_chat_tool_syntax H = SD_CHAT_TOOLS_HERMES, L = SD_CHAT_TOOLS_LLAMA3;
    static const char *const three[] = {"get_weather", "get_weather", "get"};
    static const char *const three_a[] = {"{\"city\": \"Rome\"}", "{ \"city\" : \"Oslo\", \"days\": 3 }", "{}"};
    expect_reading(H, 1, W1 "\n" W2 "\n" G1, "", 3, three, three_a);
    /* cut short: the last call's arguments as far as they came; a call cut before its name is whole is text */
    static const char *const cut_a[] = {"{\"city\": \"Rome\"}", "{ \"city\" : \"Os"};
    expect_reading(H, 1, W1 "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": { \"city\" : \"Os", "", 2, three, cut_a);
    static const char *const one_a[] = {"{\"city\": \"Rome\"}"};
    expect_reading(H, 1, W1 "\n<tool_call>\n{\"name\": \"get_w", "<tool_call>\n{\"name\": \"get_w", 1, three, one_a);
    expect_reading(H, 1, "", "", 0, NULL, NULL);
    /* Llama 3 */
    static const char *const l_a[] = {"{\"city\": \"Rome\", \"days\": 2}"};
    expect_reading(L, 1, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 2}}", "", 1, three, l_a);
    /* arguments that are not an object: a number ends where the close begins */
    static const char *const num[] = {"12.5e3"}, *const str[] = {"\"a}\\\"b\""};
    expect_reading(L, 1, "{\"name\": \"get_weather\", \"parameters\": 12.5e3}", "", 1, three, num);
    expect_reading(L, 1, "{\"name\": \"get_weather\", \"parameters\": \"a}\\\"b\"}", "", 1, three, str);
    /* text that the grammar would never give is read as text from where it departs */
    expect_reading(L, 1, "{\"name\": \"get\", \"parameters\": {}} extra", " extra", 1, three + 2, three_a + 2);
    expect_reading(H, 1, "hello", "hello", 0, NULL, NULL);
}

/* Outputs drawn at random under the grammar, token by token with stories260K's vocabulary (every
 * allowed token equally likely), read back as calls: each reads as calls only, with a known name and
 * arguments that are JSON, and the calls' text is the output's. */
static void test_grammar_outputs_read_back(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_llama2c_tokenizer("models/stories260K/tok512.bin", 0);
    sd_grammar_vocab *v = NULL;
    assert_int_equal(sd_grammar_vocab_create(t, &v), SD_OK);
    uint64_t *mask = malloc(sizeof(uint64_t) * sd_grammar_mask_words(v));
    const int n_vocab = sd_grammar_vocab_n(v);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)n_vocab);
    int finished = 0, total = 0;
    for (int syn = SD_CHAT_TOOLS_HERMES; syn <= SD_CHAT_TOOLS_LLAMA3; syn++) {
        for (int only = -1; only < 2; only++) {
            sd_grammar *g = tool_grammar((sd_chat_tool_syntax)syn, only, 1);
            for (int seed = 1; seed <= 6; seed++) {
                sd_grammar_matcher *m = NULL;
                assert_int_equal(sd_grammar_matcher_create(g, v, &m), SD_OK);
                sd_rng rng;
                sd_rng_seed(&rng, (uint64_t)(seed * 100 + only * 10 + syn));
                char text[4096];
                size_t len = 0;
                int done = 0;
                for (int step = 0; step < 600 && !done; step++) {
                    assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
                    int n = 0;
                    for (int id = 0; id < n_vocab; id++)
                        if ((mask[id >> 6] >> (id & 63)) & 1) allowed[n++] = id;
                    assert_true(n > 0);
                    /* end of generation, when allowed, half the time: outputs stay short */
                    int32_t id = allowed[(int)(sd_rng_uniform(&rng) * n) % n];
                    for (int k = 0; k < n; k++)
                        if (sd_tokenizer_is_eog(t, allowed[k]) && sd_rng_uniform(&rng) < 0.5) id = allowed[k];
                    assert_int_equal(sd_grammar_matcher_accept(m, id), SD_OK);
                    if (sd_tokenizer_is_eog(t, id)) {
                        done = 1;
                        break;
                    }
                    size_t bl = 0;
                    const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
                    assert_true(len + bl < sizeof text);
                    memcpy(text + len, b, bl);
                    len += bl;
                }
                text[len] = 0;
                total++;
                sd_grammar_matcher_free(m);
                if (!done) continue; /* cut by the step budget: not a whole output */
                finished++;
                reading r;
                read_out((sd_chat_tool_syntax)syn, 1, text, -seed, &r);
                if (r.content[0] || r.n_calls < 1) fail_msg("not read as calls: %s", text);
                if (only >= 0 || syn == SD_CHAT_TOOLS_LLAMA3) assert_int_equal(r.n_calls, 1);
                for (int c = 0; c < r.n_calls; c++) {
                    if (only >= 0) assert_string_equal(r.names[c], k_tool_list[only].name);
                    cJSON *a = cJSON_Parse(r.args[c]);
                    if (!cJSON_IsObject(a)) fail_msg("arguments are not a JSON object: %s in %s", r.args[c], text);
                    if (!strcmp(r.names[c], "get")) assert_null(a->child);
                    else assert_true(cJSON_IsString(cJSON_GetObjectItem(a, "city")));
                    cJSON_Delete(a);
                }
                /* the same output read in auto mode gives the same calls */
                reading r2;
                read_out((sd_chat_tool_syntax)syn, 0, text, 0, &r2);
                assert_int_equal(r2.n_calls, r.n_calls);
                for (int c = 0; c < r.n_calls; c++) assert_string_equal(r2.args[c], r.args[c]);
            }
            sd_grammar_free(g);
        }
    }
    print_message("%d of %d random outputs under the grammars finished, all read back as calls\n", finished, total);
    assert_true(finished >= total / 2);
    free(allowed);
    free(mask);
    sd_grammar_vocab_free(v);
    sd_tokenizer_free(t);
}

/* ---- the server's side -------------------------------------------------------------------------- */

static sd_spec_params k_spec;

static srv_api_ctx api(const sd_tokenizer *t) {
    k_spec = sd_spec_default_params();
    srv_api_ctx c;
    memset(&c, 0, sizeof c);
    c.tok = t;
    c.chat = SD_CHAT_CHATML;
    c.n_ctx = 4096;
    c.n_slots = 4;
    c.seed = 1234;
    c.spec = &k_spec;
    c.text_per_token = sd_tokenizer_max_text_per_token(t);
    return c;
}

#define TOOLS                                                                                                          \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\", \"parameters\": " \
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 8}}, \"required\": "         \
    "[\"city\"]}, \"strict\": true}}, {\"type\": \"function\", \"function\": {\"name\": \"get\"}}]"
#define MSGS "\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}]"

static void test_server_errors(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_llama2c_tokenizer("models/stories260K/tok512.bin", 0);
    srv_api_ctx c = api(t);
    static const struct {
        const char *body, *param, *msg;
    } cases[] = {
        {"{" MSGS ", \"tools\": {}}", "tools", "tools: must be an array of tools, got an object"},
        {"{" MSGS ", \"tools\": [1]}", "tools", "tools: tools[0] must be a tool object, got a number"},
        {"{" MSGS ", \"tools\": [{\"type\": \"code\", \"function\": {\"name\": \"f\"}}]}", "tools",
         "tools: tools[0].type must be \"function\""},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\"}]}", "tools", "tools: tools[0].function must be an object, got nothing"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}, \"x\": 1}]}", "tools",
         "tools: tools[0].x is not supported"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"returns\": {}}}]}", "tools",
         "tools: tools[0].function.returns is not supported"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get weather\"}}]}", "tools",
         "tools: tools[0].function.name must be 1 to 64 letters, digits, _ or -, got 'get weather'"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {}}]}", "tools",
         "tools: tools[0].function.name must be a string, got nothing"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", "
         "\"function\": {\"name\": \"f\"}}]}",
         "tools", "tools: tools[1].function.name: 'f' is also the name of tools[0]"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": []}}]}", "tools",
         "tools: tools[0].function.parameters must be a JSON Schema (an object), got an array"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": 1}}]}", "tools",
         "tools: tools[0].function.description must be a string, got a number"},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"strict\": \"yes\"}}]}", "tools",
         "tools: tools[0].function.strict must be a boolean, got a string"},
        /* a schema that is not one: refused whatever tool_choice says */
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
         "\"object\", \"properties\": {\"a\": {\"type\": \"frob\"}}}}}]}",
         "tools",
         "tools: tools[0].function.parameters.properties.a.type: expected null, boolean, integer, number, string, object or "
         "array"},
        /* one the grammar cannot honour: refused where the call is constrained */
        {"{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"x\": 1}", "x", NULL},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
         "\"object\", \"properties\": {\"n\": {\"type\": \"number\", \"multipleOf\": 2}}}}}], \"tool_choice\": \"required\"}",
         "tools", "tools: tools[0].function.parameters.properties.n.multipleOf: unsupported keyword \"multipleOf\""},
        {"{" MSGS ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
         "\"object\", \"minProperties\": 1}}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}",
         "tools", "tools: tools[0].function.parameters.minProperties: unsupported keyword \"minProperties\""},
        {"{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": \"always\"}", "tool_choice",
         "tool_choice: must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got "
         "'always'"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": {\"type\": \"function\", \"name\": \"get\"}}", "tool_choice",
         "tool_choice: must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"put\"}}}",
         "tool_choice", "tool_choice: names the function 'put', which is not one of the tools"},
        {"{" MSGS ", \"tool_choice\": \"required\"}", "tool_choice", "tool_choice: needs tools, and none are given"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"parallel_tool_calls\": 1}", "parallel_tool_calls",
         "parallel_tool_calls: must be a boolean, got a number"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"response_format\": {\"type\": \"json_object\"}}", "response_format",
         "response_format: cannot be given with tools: a call's arguments follow its function's parameters, and the reply is "
         "either calls or text"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": \"required\", \"grammar\": \"root ::= \\\"x\\\"\"}", "grammar",
         "grammar: cannot be given with tools: a call's arguments follow its function's parameters, and the reply is either "
         "calls or text"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"n\": 2}", "n", "n: must be 1 with tools, got 2"},
        {"{" MSGS ", \"tools\": " TOOLS ", \"logprobs\": true}", "logprobs",
         "logprobs: cannot be given with tools: the calls' deltas carry no log-probabilities"},
        /* the messages' calls and results */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": []}]}", "messages",
         "messages: messages[1].tool_calls must be an array of at least one call, got an empty array"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{x}\"}}]}]}",
         "messages",
         "messages: messages[1].tool_calls[0].function.arguments must be JSON text: arguments: line 1, column 2: invalid "
         "JSON: expected a key string, got 'x}'"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}]}",
         "messages", "messages: messages[1].tool_calls[0].function.arguments must be a string of JSON, got an object"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\", \"x\": 1}}]}]}",
         "messages", "messages: messages[1].tool_calls[0].function.x is not supported"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"tool_calls\": []}]}", "messages",
         "messages: messages[0].tool_calls is not supported"},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"r\", \"tool_call_id\": 5}]}", "messages",
         "messages: messages[0].tool_call_id must be a string, got a number"},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"r\"}]}", "messages",
         "messages: messages[0].tool_call_id is required with role 'tool' (the id of the call it answers)"},
        {"{\"messages\": [{\"role\": \"tool\", \"content\": \"r\", \"name\": \"f\"}]}", "messages",
         "messages: messages[0].name is not supported"},
        {"{\"messages\": [{\"role\": \"function\", \"content\": \"r\"}]}", "messages",
         "messages: messages[0].role 'function' is not supported (system, developer, user, assistant, tool)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_gen g;
        srv_err e;
        memset(&e, 0, sizeof e);
        if (srv_parse_gen(&c, 1, cases[i].body, strlen(cases[i].body), &g, &e) == 0) fail_msg("case %zu accepted", i);
        assert_int_equal(e.status, 400);
        if (strcmp(e.param, cases[i].param) != 0) fail_msg("case %zu: param %s, want %s (%s)", i, e.param, cases[i].param, e.msg);
        if (cases[i].msg && strcmp(e.msg, cases[i].msg) != 0) fail_msg("case %zu: message\n  %s\nwant\n  %s", i, e.msg, cases[i].msg);
    }
    /* a template without tool calling refuses tools by name, and their messages */
    c.chat = SD_CHAT_GEMMA;
    srv_gen g;
    srv_err e;
    static const char with_tools[] = "{" MSGS ", \"tools\": " TOOLS "}";
    assert_int_equal(srv_parse_gen(&c, 1, with_tools, strlen(with_tools), &g, &e), -1);
    assert_string_equal(e.msg, "tools: the chat template gemma has no tool calling (it is written for chatml, qwen2.5, qwen3, "
                               "llama3.1 and llama3.2; --chat-template NAME chooses one)");
    static const char none[] = "{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": \"none\"}"; /* not shown: nothing to refuse */
    assert_int_equal(srv_parse_gen(&c, 1, none, strlen(none), &g, &e), 0);
    assert_null(g.tools);
    srv_gen_free(&g);
    static const char result[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"tool\", "
                                 "\"tool_call_id\": \"call_1\", \"content\": \"r\"}]}";
    assert_int_equal(srv_parse_gen(&c, 1, result, strlen(result), &g, &e), -1);
    assert_string_equal(e.param, "messages");
    assert_non_null(strstr(e.msg, "chat template gemma has no tool calling: message 1 is a tool's result"));
    sd_tokenizer_free(t);
}

/* What each tool_choice makes of a request: the prompt is the template's (the tools as the client
 * wrote them, 1.0 kept), the grammar there exactly when a call must be made. */
static void test_server_requests(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_llama2c_tokenizer("models/stories260K/tok512.bin", 0);
    const srv_api_ctx c = api(t);
    static const char *const choices[] = {NULL, "\"auto\"", "\"none\"", "\"required\"",
                                          "{\"type\": \"function\", \"function\": {\"name\": \"get\"}}"};
    static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": {\"type\": "
                                "\"object\", \"properties\": {\"n\": {\"type\": \"number\", \"maximum\": 1.0}}}}}]";
    for (int k = 0; k < 5; k++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, "
                 "\"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\": "
                 "\"{\\\"n\\\": 0.5}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"done\"}], "
                 "\"tools\": %s%s%s}",
                 tools, choices[k] ? ", \"tool_choice\": " : "", choices[k] ? choices[k] : "");
        srv_gen g;
        srv_err e;
        if (srv_parse_gen(&c, 1, body, strlen(body), &g, &e) != 0) fail_msg("choice %d: %s", k, e.msg);
        const int shown = k != 2, constrained = k >= 3;
        assert_int_equal(g.tools != NULL, shown);
        assert_int_equal(g.grammar != NULL, constrained);
        /* the same prompt from the chat module directly */
        static const sd_chat_tool_call call = {"get", "{\"n\": 0.5}"};
        const sd_chat_msg m[] = {{"user", "q", NULL, 0}, {"assistant", NULL, &call, 1}, {"tool", "done", NULL, 0}};
        sd_chat_params p = sd_chat_params_for(t);
        p.tools = shown ? tools : NULL;
        int32_t *ids = NULL;
        int n = 0;
        assert_int_equal(sd_chat_prompt(t, SD_CHAT_CHATML, m, 3, &p, 0, &ids, &n), SD_OK);
        assert_int_equal(n, g.n_ids);
        assert_memory_equal(ids, g.ids, sizeof *ids * (size_t)n);
        if (shown) { /* "maximum": 1.0 as written */
            char *text = NULL;
            assert_int_equal(sd_chat_render(SD_CHAT_CHATML, m, 3, &p, &text, NULL), SD_OK);
            assert_non_null(strstr(text, "\"maximum\": 1.0}"));
            free(text);
        }
        free(ids);
        srv_gen_free(&g);
    }
    sd_tokenizer_free(t);
}

/* The choice of one response, parsed. */
static cJSON *choice_of(const char *js, cJSON **root) {
    *root = cJSON_Parse(js);
    assert_non_null(*root);
    return cJSON_GetArrayItem(cJSON_GetObjectItem(*root, "choices"), 0);
}

/* Streamed in pieces of `piece` bytes: the chunks' deltas put together as a client does (content
 * joined, tool_calls by index: id, type and name from the first, arguments joined), and the last
 * finish_reason. Each call's first chunk has index, id, type and name with arguments "". */
static void stream_collect(const srv_gen *g, const char *text, size_t piece, const char *reason, srv_buf *content,
                           char names[4][64], srv_buf args[4], int *n_calls, char *finish) {
    srv_buf out = {0};
    const srv_choice_out first = {.text = "", .role = 1};
    srv_sse_chunk(&out, g, NULL, "c", 1, "m", &first);
    const size_t n = strlen(text);
    for (size_t at = 0; at < n; at += piece) {
        const srv_choice_out mid = {.text = text + at, .len = at + piece < n ? piece : n - at};
        srv_sse_chunk(&out, g, NULL, "c", 1, "m", &mid);
    }
    const srv_choice_out last = {.finish_reason = reason};
    srv_sse_chunk(&out, g, NULL, "c", 1, "m", &last);
    *n_calls = 0;
    char *p = out.p;
    for (char *end; (end = strstr(p, "\n\n")); p = end + 2) {
        *end = 0;
        assert_true(!strncmp(p, "data: ", 6));
        cJSON *o = cJSON_Parse(p + 6);
        assert_non_null(o);
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(ch, "delta"), *fr = cJSON_GetObjectItem(ch, "finish_reason");
        if (cJSON_IsString(fr)) strcpy(finish, fr->valuestring);
        const cJSON *ct = cJSON_GetObjectItem(d, "content");
        if (cJSON_IsString(ct)) srv_buf_puts(content, ct->valuestring);
        for (const cJSON *tc = cJSON_GetObjectItem(d, "tool_calls") ? cJSON_GetObjectItem(d, "tool_calls")->child : NULL; tc;
             tc = tc->next) {
            const int idx = cJSON_GetObjectItem(tc, "index")->valueint;
            const cJSON *fn = cJSON_GetObjectItem(tc, "function"), *nm = cJSON_GetObjectItem(fn, "name");
            if (idx == *n_calls) { /* a new call: everything but its arguments */
                assert_true(idx < 4);
                assert_true(cJSON_IsString(nm));
                assert_string_equal(cJSON_GetObjectItem(tc, "type")->valuestring, "function");
                assert_true(!strncmp(cJSON_GetObjectItem(tc, "id")->valuestring, "call_", 5));
                assert_string_equal(cJSON_GetObjectItem(fn, "arguments")->valuestring, "");
                snprintf(names[idx], 64, "%s", nm->valuestring);
                (*n_calls)++;
            } else {
                assert_int_equal(idx, *n_calls - 1);
                assert_null(nm);
                assert_null(cJSON_GetObjectItem(tc, "id"));
                srv_buf_puts(&args[idx], cJSON_GetObjectItem(fn, "arguments")->valuestring);
            }
        }
        cJSON_Delete(o);
    }
    assert_string_equal(p, "");
    srv_buf_free(&out);
}

/* A response and its stream in pieces of 1, 3 and 64 bytes say the same: content (null when there are
 * calls and no text), the calls (ids call_ and 24 characters) and finish_reason tool_calls after a stop. */
static void test_server_responses(void **state) {
    (void)state;
    sd_tokenizer *t = sdtest_load_llama2c_tokenizer("models/stories260K/tok512.bin", 0);
    const srv_api_ctx c = api(t);
    static const struct {
        const char *choice, *text, *reason;
        const char *content; /* NULL: null */
        int n_calls;
        const char *names[2], *args[2];
        const char *finish;
    } cases[] = {
        {"\"required\"",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n<tool_call>\n"
         "{\"name\": \"get\", \"arguments\": {}}\n</tool_call>",
         "stop", NULL, 2, {"get_weather", "get"}, {"{\"city\": \"Rome\"}", "{}"}, "tool_calls"},
        {"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro", "length", NULL, 1, {"get_weather"},
         {"{\"city\": \"Ro"}, "length"},
        {"\"auto\"", "Let me check.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {}}\n</tool_call>", "stop", "Let me check.",
         1, {"get"}, {"{}"}, "tool_calls"},
        {"\"auto\"", "It is sunny <tool_call> maybe", "stop", "It is sunny <tool_call> maybe", 0, {NULL}, {NULL}, "stop"},
        {"\"auto\"", "<tool_call>\n{\"name\": \"get\", \"arguments\": {}\n</tool_call>", "stop",
         "<tool_call>\n{\"name\": \"get\", \"arguments\": {}\n</tool_call>", 0, {NULL}, {NULL}, "stop"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{" MSGS ", \"tools\": " TOOLS ", \"tool_choice\": %s}", cases[i].choice);
        srv_gen g;
        srv_err e;
        if (srv_parse_gen(&c, 1, body, strlen(body), &g, &e) != 0) fail_msg("case %zu: %s", i, e.msg);
        const srv_outcome oc = {3, 9, 0, NULL};
        const srv_choice_out co = {.text = cases[i].text, .len = strlen(cases[i].text), .finish_reason = cases[i].reason};
        char *js = srv_response_json(&g, t, "chatcmpl-1", 1, "m", &co, 1, &oc);
        cJSON *root;
        const cJSON *ch = choice_of(js, &root), *msg = cJSON_GetObjectItem(ch, "message");
        const cJSON *content = cJSON_GetObjectItem(msg, "content"), *calls = cJSON_GetObjectItem(msg, "tool_calls");
        if (cases[i].content) assert_string_equal(content->valuestring, cases[i].content);
        else assert_true(cJSON_IsNull(content));
        assert_int_equal(cJSON_GetArraySize(calls), cases[i].n_calls);
        assert_int_equal(cJSON_HasObjectItem(msg, "tool_calls"), cases[i].n_calls > 0);
        assert_string_equal(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, cases[i].finish);
        for (int k = 0; k < cases[i].n_calls; k++) {
            const cJSON *call = cJSON_GetArrayItem(calls, k), *fn = cJSON_GetObjectItem(call, "function");
            const char *id = cJSON_GetObjectItem(call, "id")->valuestring;
            assert_true(strlen(id) == 29 && !strncmp(id, "call_", 5));
            assert_string_equal(cJSON_GetObjectItem(call, "type")->valuestring, "function");
            assert_string_equal(cJSON_GetObjectItem(fn, "name")->valuestring, cases[i].names[k]);
            assert_string_equal(cJSON_GetObjectItem(fn, "arguments")->valuestring, cases[i].args[k]);
        }
        /* streamed alike, whatever the pieces */
        static const size_t pieces[] = {1, 3, 64};
        for (size_t pi = 0; pi < 3; pi++) {
            srv_gen gs;
            assert_int_equal(srv_parse_gen(&c, 1, body, strlen(body), &gs, &e), 0);
            gs.stream = 1;
            srv_buf sc = {0}, sa[4] = {{0}};
            char names[4][64], finish[32] = "";
            int n_calls = 0;
            stream_collect(&gs, cases[i].text, pieces[pi], cases[i].reason, &sc, names, sa, &n_calls, finish);
            assert_string_equal(sc.p ? sc.p : "", cases[i].content ? cases[i].content : "");
            assert_int_equal(n_calls, cases[i].n_calls);
            assert_string_equal(finish, cases[i].finish);
            for (int k = 0; k < n_calls; k++) {
                assert_string_equal(names[k], cases[i].names[k]);
                assert_string_equal(sa[k].p, cases[i].args[k]);
                srv_buf_free(&sa[k]);
            }
            srv_buf_free(&sc);
            srv_gen_free(&gs);
        }
        cJSON_Delete(root);
        free(js);
        srv_gen_free(&g);
    }
    sd_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_hermes),   cmocka_unit_test(test_render_llama3),
        cmocka_unit_test(test_render_refused),  cmocka_unit_test(test_render_spans),
        cmocka_unit_test(test_pyjson),          cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_read_auto),       cmocka_unit_test(test_read_constrained),
        cmocka_unit_test(test_grammar_outputs_read_back),
        cmocka_unit_test(test_server_errors),   cmocka_unit_test(test_server_requests),
        cmocka_unit_test(test_server_responses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
