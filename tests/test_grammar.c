/* Tests of the grammar module: GBNF parsing against hand-written sentences that must and must not
 * match (llama.cpp's example grammars among them), refusals with line and column, the JSON Schema
 * compiler against valid and invalid instances and its refusal of every unsupported keyword, and
 * the matcher over a vocabulary: mask against a brute-force replay of every token, rollback against
 * replay, end-of-generation and special tokens, forced continuations. */
#include "sdtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/grammar.h"
#include "specdec/sample.h"
#include "specdec/tokenizer.h"

/* ---- helpers ---- */

static sd_grammar *gbnf(const char *text) {
    sd_grammar *g = NULL;
    sd_status st = sd_grammar_from_gbnf(text, strlen(text), NULL, &g);
    if (st != SD_OK) fail_msg("grammar refused: %s\n%s", sd_last_error(), text);
    return g;
}

static sd_grammar *schema(const char *text) {
    sd_grammar *g = NULL;
    sd_status st = sd_grammar_from_json_schema(text, strlen(text), &g);
    if (st != SD_OK) fail_msg("schema refused: %s\n%s", sd_last_error(), text);
    return g;
}

/* Whether the whole of s is a sentence; every byte is also fed one at a time and must agree on
 * where the input is first refused. */
static int matches(sd_grammar *g, const char *s, size_t n) {
    sd_grammar_matcher *a = NULL, *b = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &a), SD_OK);
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &b), SD_OK);
    int whole = sd_grammar_matcher_accept_bytes(a, s, n) == SD_OK && sd_grammar_matcher_can_end(a);
    size_t i = 0;
    while (i < n && sd_grammar_matcher_accept_bytes(b, s + i, 1) == SD_OK) i++;
    int bytewise = i == n && sd_grammar_matcher_can_end(b);
    assert_int_equal(whole, bytewise);
    assert_int_equal(sd_grammar_matcher_n_steps(b), (int)i);
    sd_grammar_matcher_free(a);
    sd_grammar_matcher_free(b);
    return whole;
}

static void expect(sd_grammar *g, const char *const *yes, const char *const *no, const char *what) {
    for (int i = 0; yes[i]; i++)
        if (!matches(g, yes[i], strlen(yes[i]))) fail_msg("%s: should match: %s", what, yes[i]);
    for (int i = 0; no[i]; i++)
        if (matches(g, no[i], strlen(no[i]))) fail_msg("%s: should not match: %s", what, no[i]);
}

/* ---- GBNF ---- */

static void test_gbnf_basics(void **state) {
    (void)state;
    static const struct {
        const char *grammar;
        const char *yes[8], *no[8];
    } cases[] = {
        {"root ::= \"abc\"", {"abc", NULL}, {"", "ab", "abcd", "abd", NULL}},
        {"root ::= \"a\" | \"bc\" | \"\"", {"a", "bc", "", NULL}, {"b", "abc", NULL}},
        {"root ::= [a-c]+ [^a-z]", {"aA", "cba1", "ab\xc3\xa9", NULL}, {"a", "ad", "A", "ab\xc3", NULL}},
        {"root ::= \"x\"* \"y\"? \"z\"+", {"z", "xxz", "xyzz", "yz", NULL}, {"", "xy", "yyz", "zx", NULL}},
        {"root ::= (\"ab\" | \"c\"){2,3}", {"abc", "cc", "ababab", "cabc", NULL}, {"ab", "c", "cccc", "abcabc", NULL}},
        {"root ::= \"a\"{3} \"b\"{,2} \"c\"{1,}", {"aaac", "aaabbcc", NULL}, {"aac", "aaabbbc", "aaab", NULL}},
        {"# a comment\nroot ::= x y # after\nx ::= \"\\x41\\u00e9\\n\\t\\\\\\\"\"\ny ::= [\\[\\]]", {"A\xc3\xa9\n\t\\\"[", "A\xc3\xa9\n\t\\\"]", NULL}, {"A", NULL}},
        {"root ::= . .", {"ab", "\xe2\x82\xac\xf0\x9f\x99\x82", "\n\x7f", NULL}, {"a", "\xff\x41", "\xed\xa0\x80", "abc", NULL}},
        {"root ::= [\\u0100-\\U0001F600]", {"\xc4\x80", "\xf0\x9f\x98\x80", "\xe2\x82\xac", NULL}, {"\xc3\xbf", "\xf0\x9f\x98\x81", "a", NULL}},
        {"root ::= (\n  \"a\"\n  | \"b\"\n)\n\nother ::= \"q\"", {"a", "b", NULL}, {"q", "ab", NULL}},
        {"root ::= list\nlist ::= item (\",\" item)*\nitem ::= [0-9]+", {"1", "12,3,456", NULL}, {"", "1,", ",1", "1,,2", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = gbnf(cases[i].grammar);
        expect(g, cases[i].yes, cases[i].no, cases[i].grammar);
        sd_grammar_free(g);
    }
}

/* llama.cpp's example grammars (grammars/json.gbnf, arithmetic.gbnf, list.gbnf, chess.gbnf), written
 * from their published definitions. */
static const char k_json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char k_arithmetic_gbnf[] = "root  ::= (expr \"=\" ws term \"\\n\")+\n"
                                        "expr  ::= term ([-+*/] term)*\n"
                                        "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                                        "ident ::= [a-z] [a-z0-9_]* ws\n"
                                        "num   ::= [0-9]+ ws\n"
                                        "ws    ::= [ \\t\\n]*\n";

static const char k_list_gbnf[] = "root ::= item+\n"
                                  "\n"
                                  "# Excludes various line break characters\n"
                                  "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static const char k_chess_gbnf[] =
    "# Specifies chess moves as a list in algebraic notation, using PGN conventions\n"
    "\n"
    "# Force first move to \"1. \", then any 1-2 digit number after, relying on model to follow the pattern\n"
    "root    ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
    "move    ::= (pawn | nonpawn | castle) [+#]?\n"
    "\n"
    "# piece type, optional file/rank, optional capture, dest file & rank\n"
    "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "\n"
    "# optional file & capture, dest file & rank, optional promotion\n"
    "pawn    ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
    "\n"
    "castle  ::= \"O-O\" \"-O\"?\n";

static void test_llama_cpp_examples(void **state) {
    (void)state;
    sd_grammar *g = gbnf(k_json_gbnf);
    static const char *const json_yes[] = {"{}", "{\"a\": 1}", "{\"a\":[1, 2.5e3, -0, \"x\\n\\u00e9\"],\"b\":{\"c\":null}} ",
                                           "{ \"k\" : true}", "{\"a\":\n  false}", "{\"\xe2\x82\xac\":\"\xf0\x9f\x99\x82\"}", NULL};
    static const char *const json_no[] = {"", "[]", "{", "{\"a\"}", "{\"a\":01}", "{'a':1}", "{\"a\":1,}", "{\"a\":\"\x01\"}",
                                          "{\"a\":tru}", "{\"a\":1}}", NULL};
    expect(g, json_yes, json_no, "json.gbnf");
    uint64_t mb;
    assert_int_equal(sd_grammar_max_bytes(g, &mb), 0); /* recursive: unbounded */
    sd_grammar_free(g);

    g = gbnf(k_arithmetic_gbnf);
    static const char *const ar_yes[] = {"1+2= 3\n", "x*(y -2)=z\n", "a=b\nc_1 /4 =d \n", "( a )=0\n", NULL};
    static const char *const ar_no[] = {"", "1+2=3", "1+=3\n", "A=1\n", "(a=1\n", "1 2=3\n", "x*(y - 2)=z\n", NULL};
    expect(g, ar_yes, ar_no, "arithmetic.gbnf");
    sd_grammar_free(g);

    g = gbnf(k_list_gbnf);
    static const char *const li_yes[] = {"- a\n", "- milk\n- eggs \xe2\x82\xac\n", NULL};
    static const char *const li_no[] = {"", "- \n", "-a\n", "- a", "- a\r\n", "- a\xe2\x80\xa8" "b\n", "- a\xc2\x85\n", NULL};
    expect(g, li_yes, li_no, "list.gbnf");
    sd_grammar_free(g);

    g = gbnf(k_chess_gbnf);
    static const char *const ch_yes[] = {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n10. O-O O-O-O+\n",
                                         "1. e4 e5\n2. exd8=Q# Rxd8\n", NULL};
    static const char *const ch_no[] = {"1. e4 e5\n", "1. e9 e5\n2. a3 a6\n", "2. e4 e5\n3. a3 a6\n", "1. e4 e5\n0. a3 a6\n",
                                        "1. Pe4 e5\n2. a3 a6\n", NULL};
    expect(g, ch_yes, ch_no, "chess.gbnf");
    sd_grammar_free(g);
}

static void test_gbnf_refused(void **state) {
    (void)state;
    static const struct {
        const char *text, *where, *what;
    } cases[] = {
        {"root ::= \"abc", "line 1, column 14", "'\"' closing the literal"},
        {"root ::= [a-z", "line 1, column 14", "']'"},
        {"root ::= foo", "line 1, column 10", "undefined rule 'foo'"},
        {"root ::= (\"a\"", "line 1, column 14", "')'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1", "defined twice"},
        {"root := \"a\"", "line 1, column 6", "'::='"},
        {"root ::= \"a\"{3,2}", "line 1, column 13", "n < m"},
        {"root ::= \"\\q\"", "line 1, column 12", "escape"},
        {"root ::= *", "line 1, column 10", "an element before the repetition"},
        {"root ::= <think> \"a\"", "line 1, column 10", "token references"},
        {"x ::= \"a\"", NULL, "no rule named 'root'"},
        {"root ::= root \"a\" | \"b\"", NULL, "left recursion"},
        {"root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", NULL, "left recursion"},
        {"root ::= (\"\")*", NULL, "left recursion"},
        {"root ::= \"a\"\n  \"b\"", "line 2, column 3", "expected"},
        {"root ::= [z-a]", "line 1, column 13", "below its start"},
        {"root ::= [^\\x00-\\U0010FFFF]", "line 1, column 10", "no character"},
        {"root ::= \"a\"{100001}", "line 1, column 13", "100000"},
        {"", NULL, "at least one rule"},
        {"root ::= \"\xff\"", "line 1, column 11", "UTF-8"},
        {"root ::= \"a\" )", "line 1, column 14", "expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = NULL;
        sd_status st = sd_grammar_from_gbnf(cases[i].text, strlen(cases[i].text), NULL, &g);
        if (st == SD_OK) fail_msg("accepted: %s", cases[i].text);
        assert_null(g);
        const char *e = sd_last_error();
        if ((cases[i].where && !strstr(e, cases[i].where)) || !strstr(e, cases[i].what))
            fail_msg("grammar %s\nmessage: %s\nexpected: %s / %s", cases[i].text, e, cases[i].where ? cases[i].where : "",
                     cases[i].what);
    }
    /* a text that is not NUL-terminated is read only within len */
    char buf[16];
    memcpy(buf, "root ::= \"a\"XXXX", 16);
    sd_grammar *g = NULL;
    assert_int_equal(sd_grammar_from_gbnf(buf, 12, NULL, &g), SD_OK);
    sd_grammar_free(g);
    /* another start rule */
    const char *t = "a ::= \"x\" b\nb ::= \"y\"";
    assert_int_equal(sd_grammar_from_gbnf(t, strlen(t), "b", &g), SD_OK);
    assert_true(matches(g, "y", 1));
    assert_false(matches(g, "xy", 2));
    sd_grammar_free(g);
}

static void test_max_bytes(void **state) {
    (void)state;
    static const struct {
        const char *g;
        int finite;
        uint64_t max;
    } cases[] = {
        {"root ::= \"ab\" | \"c\"", 1, 2},
        {"root ::= \"a\"{2,5} [\\u20AC]?", 1, 8},
        {"root ::= x x\nx ::= \"abc\"?", 1, 6},
        {"root ::= \"a\"*", 0, 0},
        {"root ::= \"(\" root \")\" | \"\"", 0, 0},
        {"root ::= \"x\"\nunused ::= \"a\" unused | \"b\"", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = gbnf(cases[i].g);
        uint64_t mb = 12345;
        assert_int_equal(sd_grammar_max_bytes(g, &mb), cases[i].finite);
        if (cases[i].finite) assert_int_equal(mb, cases[i].max);
        sd_grammar_free(g);
    }
}

/* ---- JSON Schema ---- */

static void test_schema_instances(void **state) {
    (void)state;
    static const struct {
        const char *schema;
        const char *yes[10], *no[10];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
         "\"required\":[\"name\"]}",
         {"{\"name\":\"a\"}", "{\"name\":\"a\",\"age\":-3}", " { \"name\" : \"\\u00e9\\n\" }\n", NULL},
         {"{}", "{\"age\":1}", "{\"age\":1,\"name\":\"a\"}", "{\"name\":1}", "{\"name\":\"a\",\"x\":1}", "{\"name\":\"a\",\"age\":1.5}", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1},\"b\":{\"enum\":[\"x\",null,[1,2],{\"k\":true}]}},"
         "\"additionalProperties\":false}",
         {"{}", "{\"a\":1}", "{\"b\":null}", "{\"a\":1,\"b\":[1,2]}", "{\"b\":{\"k\":true}}", NULL},
         {"{\"a\":2}", "{\"b\":\"y\"}", "{\"b\":[1, 2]}", "{\"b\":null,\"a\":1}", "{\"c\":1}", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
         {"{\"id\":1,\"ok\":true}", "{\"x\":false,\"y\":true}", "{\"idx\":true}", "{\"i\":false}", "{}", NULL},
         {"{\"id\":true}", "{\"x\":1}", "{\"id\":1,\"id\":false}", NULL}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},\"minItems\":1,\"maxItems\":3}",
         {"[0]", "[0.5, 1, 0.25]", "[1.0]", "[0.999]", NULL},
         {"[]", "[1.5]", "[-0.1]", "[1.01]", "[0,0,0,0]", "[1e-1]", NULL}},
        {"{\"type\":\"integer\",\"minimum\":-15,\"exclusiveMaximum\":210}",
         {"-15", "-1", "0", "9", "10", "99", "100", "209", NULL},
         {"-16", "210", "1000", "-0", "01", "5.0", NULL}},
        {"{\"type\":\"number\",\"exclusiveMinimum\":-2,\"maximum\":3}",
         {"-1.99", "-1.0001", "-1", "0", "3", "3.000", "2.999", "-0.5", NULL},
         {"-2", "-2.000", "-2.0001", "-3", "3.001", "4", "1e2", NULL}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
         {"\"ab\"", "\"abc\"", "\"\\u00e9\\n\"", "\"\xe2\x82\xac\xf0\x9f\x99\x82\"", NULL},
         {"\"a\"", "\"abcd\"", "\"\\ud800\"", "\"a\x01\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}",
         {"\"AB-123\"", "\"ZZ-000x\"", "\"QQ-999yz\"", NULL},
         {"\"ab-123\"", "\"AB-12\"", "\"AB-1234\"", "\" AB-123\"", "\"AB-123y\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"b.c\"}", {"\"abxcd\"", "\"bbc\"", "\"b\xc3\xa9" "c\"", NULL}, {"\"bc\"", "\"abd\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-28\"", "\"1999-12-31\"", "\"2023-04-30\"", NULL},
         {"\"2024-02-30\"", "\"2024-13-01\"", "\"2024-04-31\"", "\"24-01-01\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T23:59:59.123+05:30\"", NULL},
         {"\"2024-01-02 03:04:05Z\"", "\"2024-01-02T24:00:00Z\"", "\"2024-01-02T03:04:05\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\"", NULL},
         {"\"123e4567e89b12d3a456426614174000\"", "\"123E4567-e89b-12d3-a456-426614174000x\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b+c@ex-ample.co\"", NULL}, {"\"a@b\"", "\"@b.c\"", "\"a..b@c.d\"", NULL}},
        {"{\"type\":[\"string\",\"null\"]}", {"null", "\"x\"", NULL}, {"1", "true", NULL}},
        {"{\"type\":\"boolean\",\"nullable\":true}", {"true", "null", NULL}, {"\"true\"", NULL}},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", {"5", "\"a\"", NULL}, {"\"ab\"", "1.5", NULL}},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"v\":{\"type\":\"integer\"}},"
         "\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"b\"}},\"required\":[\"k\"]}]}",
         {"{\"k\":\"a\",\"v\":1}", "{\"k\":\"b\"}", NULL},
         {"{\"k\":\"c\"}", "{\"k\":\"b\",\"v\":1}", NULL}},
        {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"$ref\":\"#/$defs/node\"}},"
         "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}", NULL},
         {"{\"v\":1,\"next\":{}}", NULL}},
        {"{\"definitions\":{\"a\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"]}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/a\"}}",
         {"[]", "[\"x\",\"y\",\"x\"]", NULL}, {"[\"z\"]", NULL}},
        {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}",
         {"[]", "[1]", "[1,\"a\"]", NULL}, {"[\"a\"]", "[1,\"a\",2]", NULL}},
        {"{\"type\":\"array\",\"items\":[{\"const\":1}],\"additionalItems\":{\"type\":\"boolean\"},\"minItems\":2}",
         {"[1,true]", "[1,false,true]", NULL}, {"[1]", "[true,true]", NULL}},
        {"true", {"1", "{\"a\":[null]}", "\"s\"", NULL}, {"", "{", NULL}},
        {"{\"type\":\"object\"}", {"{}", "{\"a\":{\"b\":[1,\"c\"]}}", NULL}, {"[]", NULL}},
        {"{\"allOf\":[{\"type\":\"integer\",\"maximum\":3}],\"description\":\"d\",\"title\":\"t\",\"x-extra\":1}", {"3", NULL}, {"4", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":false}}", {"{}", "{\"a\":1}", NULL}, {"{\"b\":1}", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = schema(cases[i].schema);
        expect(g, cases[i].yes, cases[i].no, cases[i].schema);
        sd_grammar_free(g);
    }
}

static void test_schema_refused(void **state) {
    (void)state;
    static const struct {
        const char *schema, *where, *what;
    } cases[] = {
        {"{\"type\":\"integer\",\"multipleOf\":3}", ".multipleOf", "multipleOf"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", ".patternProperties", "patternProperties"},
        {"{\"type\":\"object\",\"propertyNames\":{}}", ".propertyNames", "propertyNames"},
        {"{\"type\":\"object\",\"minProperties\":1}", ".minProperties", "minProperties"},
        {"{\"type\":\"object\",\"maxProperties\":1}", ".maxProperties", "maxProperties"},
        {"{\"type\":\"object\",\"dependencies\":{}}", ".dependencies", "dependencies"},
        {"{\"type\":\"object\",\"dependentRequired\":{}}", ".dependentRequired", "dependentRequired"},
        {"{\"type\":\"object\",\"dependentSchemas\":{}}", ".dependentSchemas", "dependentSchemas"},
        {"{\"type\":\"object\",\"unevaluatedProperties\":false}", ".unevaluatedProperties", "unevaluatedProperties"},
        {"{\"type\":\"array\",\"unevaluatedItems\":false}", ".unevaluatedItems", "unevaluatedItems"},
        {"{\"type\":\"array\",\"contains\":{}}", ".contains", "contains"},
        {"{\"type\":\"array\",\"minContains\":1}", ".minContains", "minContains"},
        {"{\"type\":\"array\",\"maxContains\":1}", ".maxContains", "maxContains"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", ".uniqueItems", "uniqueItems"},
        {"{\"not\":{}}", ".not", "\"not\""},
        {"{\"if\":{},\"then\":{}}", ".if", "\"if\""},
        {"{\"then\":{}}", ".then", "\"then\""},
        {"{\"else\":{}}", ".else", "\"else\""},
        {"{\"$dynamicRef\":\"#a\"}", ".$dynamicRef", "$dynamicRef"},
        {"{\"$dynamicAnchor\":\"a\"}", ".$dynamicAnchor", "$dynamicAnchor"},
        {"{\"$recursiveRef\":\"#\"}", ".$recursiveRef", "$recursiveRef"},
        {"{\"$recursiveAnchor\":true}", ".$recursiveAnchor", "$recursiveAnchor"},
        {"{\"contentSchema\":{}}", ".contentSchema", "contentSchema"},
        {"{\"$vocabulary\":{}}", ".$vocabulary", "$vocabulary"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"multipleOf\":2}}}", ".properties.a.multipleOf", "multipleOf"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"maxLenght\":2}}}", ".properties.a.maxLenght", "unknown keyword"},
        {"{\"type\":\"string\",\"format\":\"uri\"}", ".format", "\"uri\""},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", ".pattern", "lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", ".pattern", "escape \\1"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", ".pattern", "escape \\b"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", ".pattern", "anchor"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", ".maxLength", "maxLength together with pattern"},
        {"{\"type\":\"number\",\"minimum\":0.5}", ".minimum", "whole number"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", ".oneOf", "oneOf"},
        {"{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":1}]}", ".allOf", "allOf of more than one"},
        {"{\"$ref\":\"http://example.com/s.json\"}", ".$ref", "cannot resolve"},
        {"{\"$ref\":\"#/$defs/missing\"}", ".$ref", "cannot resolve"},
        /* a schema reaching itself through $ref before reading any character: named, not an internal error */
        {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}", "$ref", "before any character"},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "$ref", "before any character"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", ".required[0]", "not in properties"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", ".properties.a", "false"},
        {"{\"type\":\"strin\"}", ".type", "expected null, boolean"},
        {"false", ".", "allows no value"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"properties\":{}}", ".properties", "duplicate"},
        {"{\"type\": \"object\",}", "line 1, column 19", "invalid JSON"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", ".", "no integer"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", ".", "maxItems below minItems"},
        {"{\"enum\":[1,2],\"minimum\":1}", ".minimum", "together with enum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_grammar *g = NULL;
        sd_status st = sd_grammar_from_json_schema(cases[i].schema, strlen(cases[i].schema), &g);
        if (st == SD_OK) fail_msg("schema accepted: %s", cases[i].schema);
        assert_null(g);
        const char *e = sd_last_error();
        if (!strstr(e, cases[i].where) || !strstr(e, cases[i].what))
            fail_msg("schema %s\nmessage: %s\nexpected: %s / %s", cases[i].schema, e, cases[i].where, cases[i].what);
    }
}

static void test_schema_bounds(void **state) {
    (void)state;
    /* bounded strings, arrays and numbers: a finite language with a known longest sentence */
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},"
                    "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":2}},\"required\":[\"a\"]}";
    sd_grammar *g = schema(s);
    uint64_t mb = 0;
    assert_int_equal(sd_grammar_max_bytes(g, &mb), 1);
    /* the longest: ws {ws "a" ws : ws "\uXXXX"x4 ws , ws "b" ws : ws [ws false ws , ws false ws] ws } ws with
     * every ws 21 bytes */
    const uint64_t ws = 21, expect_max = ws + 1 + ws + 3 + ws + 1 + ws + (2 + 4 * 6) + ws + 1 + ws + 3 + ws + 1 + ws +
                                         (1 + ws + 5 + ws + 1 + ws + 5 + ws + 1) + ws + 1 + ws;
    assert_int_equal(mb, expect_max);
    sd_grammar_free(g);
    /* compact: no whitespace, so a required property's name is forced */
    sd_json_schema_params jp = sd_json_schema_default_params();
    jp.whitespace = SD_JSON_WS_COMPACT;
    assert_int_equal(sd_grammar_from_json_schema_ex(s, strlen(s), &jp, &g), SD_OK);
    static const char *const cyes[] = {"{\"a\":\"xy\",\"b\":[true]}", "{\"a\":\"\"}", NULL};
    static const char *const cno[] = {"{ \"a\":\"\"}", "{\"a\":\"\"} ", NULL};
    expect(g, cyes, cno, "compact");
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &m), SD_OK);
    char fb[32];
    size_t nf = sd_grammar_matcher_forced_bytes(m, fb, sizeof fb);
    assert_int_equal(nf, 6);
    assert_memory_equal(fb, "{\"a\":\"", 6);
    sd_grammar_matcher_free(m);
    sd_grammar_free(g);
    jp.whitespace = (sd_json_ws)7;
    assert_int_equal(sd_grammar_from_json_schema_ex(s, strlen(s), &jp, &g), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_grammar_json_object(&jp, &g), SD_ERR_INVALID_ARG);
    g = schema("{\"type\":\"string\"}");
    assert_int_equal(sd_grammar_max_bytes(g, &mb), 0);
    sd_grammar_free(g);
    /* the any-object grammar */
    assert_int_equal(sd_grammar_json_object(NULL, &g), SD_OK);
    static const char *const yes[] = {"{}", " {\"a\": [1, {\"b\": null}]}\n", NULL};
    static const char *const no[] = {"[]", "1", "\"{}\"", "{}}", NULL};
    expect(g, yes, no, "json_object");
    sd_grammar_free(g);
}

/* ---- matchers over a vocabulary ---- */

/* A llama2.c tokenizer.bin in memory: <unk> <s> </s>, the 256 byte tokens, then pieces. */
static sd_tokenizer *make_tokenizer(const char *const *pieces, int n) {
    size_t cap = 1 << 16, len = 0;
    unsigned char *b = malloc(cap);
    assert_non_null(b);
    int32_t maxlen = 64;
    memcpy(b, &maxlen, 4);
    len = 4;
    int total = 3 + 256 + n;
    for (int i = 0; i < total; i++) {
        char tmp[16];
        const char *p = tmp;
        if (i == 0) p = "<unk>";
        else if (i == 1) p = "<s>";
        else if (i == 2) p = "</s>";
        else if (i < 259) snprintf(tmp, sizeof tmp, "<0x%02X>", i - 3);
        else p = pieces[i - 259];
        float score = (float)-i;
        int32_t l = (int32_t)strlen(p);
        memcpy(b + len, &score, 4);
        memcpy(b + len + 4, &l, 4);
        memcpy(b + len + 8, p, (size_t)l);
        len += 8 + (size_t)l;
    }
    sd_tokenizer *t = NULL;
    sd_status st = sd_tokenizer_from_llama2c_buf(b, len, total, "test.bin", &t);
    if (st != SD_OK) fail_msg("%s", sd_last_error());
    free(b);
    return t;
}

static const char *const k_pieces[] = {"{", "}", "\"", "\":", "{\"", "\"}", " ", "  ", "\n", "a", "ab", "abc", "b", "name",
                                       "\"name\":", "true", "tr", "ue", "1", "12", "0", "-", ",", ", \"", "x", "null",
                                       "[", "]", "[1", "\xc3\xa9", "\xe2\x82\xac", "e\xcc\x81", ".", "5",
                                       /* longer than the matcher's short tokens (16 bytes) */
                                       "abcdefghijklmnopqrstuvwxyz", "aaaaaaaaaaaaaaaaaaaa", "01234567890123456789",
                                       "                  ", "abababababababab\"", "aaaaaaaaaaaaaaaaa"};
#define N_PIECES ((int)(sizeof k_pieces / sizeof k_pieces[0]))

static int bit(const uint64_t *m, int t) { return (int)((m[t >> 6] >> (t & 63)) & 1); }

/* The mask against a replay of each token alone on a fresh matcher fed the same history as bytes. */
static void check_mask(sd_grammar *g, const sd_grammar_vocab *v, const sd_tokenizer *t, sd_grammar_matcher *m,
                       const char *hist, size_t hlen, int ended) {
    int n = sd_grammar_vocab_n(v);
    size_t w = sd_grammar_mask_words(v);
    uint64_t *mask = calloc(w, sizeof *mask);
    assert_non_null(mask);
    assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
    for (int id = 0; id < n; id++) {
        int expect_ok;
        if (ended) expect_ok = 0;
        else if (sd_tokenizer_is_eog(t, id)) {
            sd_grammar_matcher *r = NULL;
            assert_int_equal(sd_grammar_matcher_create(g, NULL, &r), SD_OK);
            expect_ok = sd_grammar_matcher_accept_bytes(r, hist, hlen) == SD_OK && sd_grammar_matcher_can_end(r);
            sd_grammar_matcher_free(r);
        } else {
            int ty = sd_tokenizer_token_type(t, id);
            size_t bl;
            const uint8_t *bytes = sd_grammar_vocab_bytes(v, id, &bl);
            if (ty == SD_TOKEN_CONTROL || ty == SD_TOKEN_UNKNOWN || ty == SD_TOKEN_UNUSED) {
                assert_null(bytes);
                expect_ok = 0;
            } else {
                assert_non_null(bytes);
                char *all = malloc(hlen + bl + 1);
                memcpy(all, hist, hlen);
                memcpy(all + hlen, bytes, bl);
                sd_grammar_matcher *r = NULL;
                assert_int_equal(sd_grammar_matcher_create(g, NULL, &r), SD_OK);
                expect_ok = sd_grammar_matcher_accept_bytes(r, all, hlen + bl) == SD_OK;
                sd_grammar_matcher_free(r);
                free(all);
            }
        }
        if (bit(mask, id) != expect_ok) fail_msg("token %d: mask %d, replay %d (after %zu bytes)", id, bit(mask, id), expect_ok, hlen);
        assert_int_equal(sd_grammar_matcher_allows(m, id), expect_ok);
    }
    free(mask);
}

static void random_walks(const char *what, sd_grammar *g, const sd_tokenizer *t, int walks, int steps) {
    sd_grammar_vocab *v = NULL;
    assert_int_equal(sd_grammar_vocab_create(t, &v), SD_OK);
    int n = sd_grammar_vocab_n(v);
    size_t w = sd_grammar_mask_words(v);
    uint64_t *mask = calloc(w, sizeof *mask);
    sd_rng rng;
    sd_rng_seed(&rng, 7);
    int finished = 0;
    for (int walk = 0; walk < walks; walk++) {
        sd_grammar_matcher *m = NULL;
        assert_int_equal(sd_grammar_matcher_create(g, v, &m), SD_OK);
        char hist[4096];
        size_t hlen = 0, hl[256];
        int32_t toks[256];
        int ended = 0, k = 0;
        hl[0] = 0;
        for (; k < steps && k < 255; k++) {
            check_mask(g, v, t, m, hist, hlen, ended);
            assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
            int cnt = 0;
            for (int id = 0; id < n; id++) cnt += bit(mask, id);
            if (!cnt) {
                assert_true(ended || sd_grammar_matcher_is_done(m));
                break;
            }
            /* a token that is not allowed is refused and changes nothing */
            for (int id = 0; id < n; id++)
                if (!bit(mask, id)) {
                    assert_int_equal(sd_grammar_matcher_accept(m, id), SD_ERR_INVALID_ARG);
                    assert_int_equal(sd_grammar_matcher_n_steps(m), k);
                    break;
                }
            int pick = (int)(sd_rng_next(&rng) % (uint64_t)cnt), id = 0;
            /* end the walk early now and then when the grammar allows it */
            for (id = 0; id < n; id++)
                if (bit(mask, id) && pick-- == 0) break;
            assert_int_equal(sd_grammar_matcher_accept(m, id), SD_OK);
            toks[k] = id;
            if (sd_tokenizer_is_eog(t, id)) ended = 1;
            else {
                size_t bl;
                const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
                assert_true(hlen + bl < sizeof hist);
                memcpy(hist + hlen, b, bl);
                hlen += bl;
            }
            hl[k + 1] = hlen;
        }
        if (ended) finished++;
        /* rollback equals replay: back to j steps, the mask of a fresh matcher fed the same j tokens */
        for (int j = k; j >= 0; j -= 1 + (int)(sd_rng_next(&rng) % 3)) {
            assert_int_equal(sd_grammar_matcher_rollback(m, j), SD_OK);
            sd_grammar_matcher *r = NULL;
            assert_int_equal(sd_grammar_matcher_create(g, v, &r), SD_OK);
            for (int q = 0; q < j; q++) assert_int_equal(sd_grammar_matcher_accept(r, toks[q]), SD_OK);
            uint64_t *m2 = calloc(w, sizeof *m2);
            assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
            assert_int_equal(sd_grammar_matcher_mask(r, m2), SD_OK);
            assert_memory_equal(mask, m2, w * sizeof *mask);
            assert_int_equal(sd_grammar_matcher_can_end(m), sd_grammar_matcher_can_end(r));
            int is_end = j > 0 && sd_tokenizer_is_eog(t, toks[j - 1]);
            check_mask(g, v, t, m, hist, hl[j], is_end);
            free(m2);
            sd_grammar_matcher_free(r);
        }
        assert_int_equal(sd_grammar_matcher_rollback(m, k + 1), SD_ERR_INVALID_ARG);
        sd_grammar_matcher_free(m);
    }
    fprintf(stderr, "%s: %d of %d walks ended with end of generation\n", what, finished, walks);
    free(mask);
    sd_grammar_vocab_free(v);
}

static void test_matcher_masks(void **state) {
    (void)state;
    sd_tokenizer *t = make_tokenizer(k_pieces, N_PIECES);
    sd_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
                           "\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12}},"
                           "\"required\":[\"name\"]}");
    random_walks("schema", g, t, 12, 40);
    sd_grammar_free(g);
    g = gbnf(k_json_gbnf);
    random_walks("json.gbnf", g, t, 6, 30);
    sd_grammar_free(g);
    g = gbnf("root ::= [^a]{1,3} \"\xe2\x82\xac\" | \"e\xcc\x81\" .");
    random_walks("utf-8", g, t, 12, 10);
    sd_grammar_free(g);
    /* long bounded repetitions: deep in them the short tokens' mask is shared across positions */
    g = gbnf("root ::= \"\\\"\" [a-z ]{0,70} \"\\\"\" [0-9]{3,40} | ( \"ab\" | \"a\" ){25,60}");
    random_walks("bounded", g, t, 24, 60);
    sd_grammar_free(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":50},"
               "\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"maxItems\":30}},"
               "\"required\":[\"s\",\"a\"]}");
    random_walks("bounded schema", g, t, 12, 60);
    sd_grammar_free(g);
    sd_tokenizer_free(t);
}

static void test_forced(void **state) {
    (void)state;
    sd_tokenizer *t = make_tokenizer(k_pieces, N_PIECES);
    sd_grammar_vocab *v = NULL;
    assert_int_equal(sd_grammar_vocab_create(t, &v), SD_OK);
    sd_grammar *g = gbnf("root ::= \"{\\\"name\\\":\" [0-9] \"}\" | \"{\\\"name\\\":x\"");
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, v, &m), SD_OK);
    char buf[64];
    size_t n = sd_grammar_matcher_forced_bytes(m, buf, sizeof buf);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "{\"name\":", 8);
    assert_int_equal(sd_grammar_matcher_forced_bytes(m, buf, 3), 3); /* stops at cap */
    assert_int_equal(sd_grammar_matcher_forced_token(m), -1);       /* "{" and "{\"" both fit */
    assert_int_equal(sd_grammar_matcher_accept_bytes(m, "{\"name\":1", 9), SD_OK);
    /* only "}" is left: the piece "}" and the byte token <0x7D>, so no single forced token */
    size_t w = sd_grammar_mask_words(v);
    uint64_t *mask = calloc(w, sizeof *mask);
    assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
    int32_t id = -1, count = 0;
    for (int i = 0; i < sd_grammar_vocab_n(v); i++)
        if (bit(mask, i)) {
            size_t bl;
            const uint8_t *b = sd_grammar_vocab_bytes(v, i, &bl);
            assert_int_equal(bl, 1);
            assert_int_equal(b[0], '}');
            id = i, count++;
        }
    assert_int_equal(count, 2);
    assert_int_equal(sd_grammar_matcher_forced_token(m), -1);
    assert_int_equal(sd_grammar_matcher_forced_bytes(m, buf, sizeof buf), 1);
    assert_int_equal(sd_grammar_matcher_accept(m, id), SD_OK);
    /* complete: only end of generation (</s>, id 2), and no forced bytes */
    assert_true(sd_grammar_matcher_can_end(m));
    assert_int_equal(sd_grammar_matcher_forced_token(m), 2);
    assert_int_equal(sd_grammar_matcher_forced_bytes(m, buf, sizeof buf), 0);
    assert_int_equal(sd_grammar_matcher_accept(m, 1), SD_ERR_INVALID_ARG); /* BOS: control */
    assert_int_equal(sd_grammar_matcher_accept(m, 2), SD_OK);
    assert_true(sd_grammar_matcher_is_done(m));
    assert_int_equal(sd_grammar_matcher_accept(m, 2), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_grammar_matcher_accept_bytes(m, "x", 1), SD_ERR_INVALID_ARG);
    /* end of generation before the end is refused */
    assert_int_equal(sd_grammar_matcher_rollback(m, 1), SD_OK);
    assert_int_equal(sd_grammar_matcher_accept(m, 2), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_grammar_matcher_n_steps(m), 1);
    /* logits masking */
    assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
    int nv = sd_grammar_vocab_n(v);
    float *logits = calloc((size_t)nv, sizeof *logits);
    sd_grammar_mask_logits(mask, logits, nv, -1e30f);
    for (int i = 0; i < nv; i++) assert_true(logits[i] == (bit(mask, i) ? 0.0f : -1e30f));
    free(logits);
    free(mask);
    sd_grammar_matcher_free(m);
    /* a matcher of the same grammar on another vocabulary is refused */
    sd_grammar_vocab *v2 = NULL;
    assert_int_equal(sd_grammar_vocab_create(t, &v2), SD_OK);
    assert_int_equal(sd_grammar_matcher_create(g, v2, &m), SD_ERR_INVALID_ARG);
    sd_grammar_vocab_free(v2);
    sd_grammar_free(g);
    sd_grammar_vocab_free(v);
    sd_tokenizer_free(t);
}

/* ---- lazy grammars ---- */

/* The reference of a lazy grammar: where the trigger first appears in text (-1: nowhere yet), found
 * by plain search, independent of the matcher's failure links. */
static long trigger_at(const char *trig, sd_grammar_trigger_where where, const char *text, size_t len) {
    const size_t tl = strlen(trig);
    if (where == SD_GRAMMAR_TRIGGER_AT_START) {
        size_t i = 0;
        while (i < len && strchr(" \t\r\n", text[i])) i++;
        return len - i >= tl && !memcmp(text + i, trig, tl) ? (long)i : -1;
    }
    for (size_t i = 0; i + tl <= len; i++)
        if (!memcmp(text + i, trig, tl)) return (long)i;
    return -1;
}

/* Whether the lazy grammar allows token id after hist: free text until the trigger, then the plain
 * grammar (a copy that is not lazy) from the trigger's first byte. */
static int lazy_allows(sd_grammar *plain, const char *trig, sd_grammar_trigger_where where, const sd_tokenizer *t,
                       const sd_grammar_vocab *v, const char *hist, size_t hlen, int32_t id) {
    const int eog = sd_tokenizer_is_eog(t, id);
    size_t bl = 0;
    const uint8_t *b = eog ? NULL : sd_grammar_vocab_bytes(v, id, &bl);
    const long at = trigger_at(trig, where, hist, hlen);
    if (at < 0 && (eog || !b)) return 1; /* free: control tokens and the end too */
    char *all = malloc(hlen + bl + 1);
    memcpy(all, hist, hlen);
    if (bl) memcpy(all + hlen, b, bl);
    const long at2 = trigger_at(trig, where, all, hlen + bl);
    int ok = 1;
    if (at2 >= 0) {
        sd_grammar_matcher *r = NULL;
        assert_int_equal(sd_grammar_matcher_create(plain, NULL, &r), SD_OK);
        ok = (eog || b) && sd_grammar_matcher_accept_bytes(r, all + at2, hlen + bl - (size_t)at2) == SD_OK &&
             (!eog || sd_grammar_matcher_can_end(r));
        sd_grammar_matcher_free(r);
    }
    free(all);
    return ok;
}

/* Random walks through a lazy grammar, half the picks among the tokens that hold a byte of the
 * trigger (so that it appears): each step's mask and allows against lazy_allows for every token,
 * refused tokens change nothing, and rollback (also back into the free text) equals replay. */
static void lazy_walks(const char *gbnf_text, const char *trig, sd_grammar_trigger_where where, int walks, int steps) {
    sd_tokenizer *t = make_tokenizer(k_pieces, N_PIECES);
    sd_grammar_vocab *v = NULL;
    assert_int_equal(sd_grammar_vocab_create(t, &v), SD_OK);
    sd_grammar *g = gbnf(gbnf_text), *plain = gbnf(gbnf_text);
    assert_int_equal(sd_grammar_set_trigger(g, trig, strlen(trig), where), SD_OK);
    const int n = sd_grammar_vocab_n(v);
    const size_t w = sd_grammar_mask_words(v);
    uint64_t *mask = calloc(w, sizeof *mask), *m2 = calloc(w, sizeof *m2);
    sd_rng rng;
    sd_rng_seed(&rng, 11);
    int triggered = 0, ended = 0;
    for (int walk = 0; walk < walks; walk++) {
        sd_grammar_matcher *m = NULL;
        assert_int_equal(sd_grammar_matcher_create(g, v, &m), SD_OK);
        char hist[4096];
        size_t hlen = 0, hl[256] = {0};
        int32_t toks[256];
        int k = 0, done = 0;
        for (; k < steps && k < 255 && !done; k++) {
            assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
            int cnt = 0, near = 0;
            for (int id = 0; id < n; id++) {
                const int want = lazy_allows(plain, trig, where, t, v, hist, hlen, id);
                if (bit(mask, id) != want) fail_msg("token %d: mask %d, reference %d after '%.*s'", id, bit(mask, id), want, (int)hlen, hist);
                assert_int_equal(sd_grammar_matcher_allows(m, id), want);
                size_t bl = 0;
                const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
                cnt += want;
                near += want && b && memchr(b, trig[0], bl) != NULL;
            }
            if (!cnt) break;
            for (int id = 0; id < n; id++)
                if (!bit(mask, id)) { /* refused: nothing changes */
                    assert_int_equal(sd_grammar_matcher_accept(m, id), SD_ERR_INVALID_ARG);
                    assert_int_equal(sd_grammar_matcher_n_steps(m), k);
                    break;
                }
            const int pick_near = near && sd_rng_next(&rng) % 2;
            int pick = (int)(sd_rng_next(&rng) % (uint64_t)(pick_near ? near : cnt)), id = 0;
            for (id = 0; id < n; id++) {
                size_t bl = 0;
                const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
                if (bit(mask, id) && (!pick_near || (b && memchr(b, trig[0], bl))) && pick-- == 0) break;
            }
            assert_int_equal(sd_grammar_matcher_accept(m, id), SD_OK);
            toks[k] = id;
            size_t bl = 0;
            const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
            if (sd_tokenizer_is_eog(t, id)) done = 1;
            else if (b) {
                assert_true(hlen + bl < sizeof hist);
                memcpy(hist + hlen, b, bl);
                hlen += bl;
            }
            hl[k + 1] = hlen;
            assert_int_equal(sd_grammar_matcher_n_steps(m), k + 1);
            if (trigger_at(trig, where, hist, hlen) < 0) assert_int_equal(sd_grammar_matcher_is_done(m), done); /* free text ends only at the end */
        }
        triggered += trigger_at(trig, where, hist, hlen) >= 0;
        ended += done;
        for (int j = k; j >= 0; j -= 1 + (int)(sd_rng_next(&rng) % 3)) {
            assert_int_equal(sd_grammar_matcher_rollback(m, j), SD_OK);
            sd_grammar_matcher *r = NULL;
            assert_int_equal(sd_grammar_matcher_create(g, v, &r), SD_OK);
            for (int q = 0; q < j; q++) assert_int_equal(sd_grammar_matcher_accept(r, toks[q]), SD_OK);
            assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
            assert_int_equal(sd_grammar_matcher_mask(r, m2), SD_OK);
            assert_memory_equal(mask, m2, w * sizeof *mask);
            assert_int_equal(sd_grammar_matcher_can_end(m), sd_grammar_matcher_can_end(r));
            assert_int_equal(sd_grammar_matcher_n_steps(m), j);
            const int is_end = j > 0 && sd_tokenizer_is_eog(t, toks[j - 1]);
            for (int id = 0; id < n; id++)
                assert_int_equal(bit(mask, id), !is_end && lazy_allows(plain, trig, where, t, v, hist, hl[j], id));
            sd_grammar_matcher_free(r);
        }
        sd_grammar_matcher_free(m);
    }
    fprintf(stderr, "lazy '%s': %d of %d walks reached the trigger, %d ended\n", trig, triggered, walks, ended);
    assert_true(triggered >= walks / 4); /* the walks did test the constrained part */
    free(mask);
    free(m2);
    sd_grammar_free(g);
    sd_grammar_free(plain);
    sd_grammar_vocab_free(v);
    sd_tokenizer_free(t);
}

static void test_lazy(void **state) {
    (void)state;
    /* a one-byte trigger anywhere (a '{' inside free text), one spanning tokens ("\"", "name", "\":" or
     * "\"name\":" whole), one only at the start, as Llama 3.1's calls are, and one overlapping itself */
    lazy_walks("root ::= \"{\" [a-c]{1,4} \"}\"", "{", SD_GRAMMAR_TRIGGER_ANYWHERE, 16, 30);
    lazy_walks("root ::= \"\\\"name\\\":\" ( \"true\" | \"null\" | [0-9]{1,3} )", "\"name\":", SD_GRAMMAR_TRIGGER_ANYWHERE, 16,
               30);
    lazy_walks("root ::= \"{\" [ab]{1,3} \"}\"", "{", SD_GRAMMAR_TRIGGER_AT_START, 24, 12);
    /* a trigger that overlaps itself: "aaab" holds "aab" from its second byte */
    lazy_walks("root ::= \"aab\" [0-9]{1,2}", "aab", SD_GRAMMAR_TRIGGER_ANYWHERE, 24, 30);
    /* the trigger is set once, before any matcher; a lazy grammar is unbounded */
    sd_grammar *g = gbnf("root ::= \"{}\"");
    uint64_t mb = 0;
    assert_int_equal(sd_grammar_max_bytes(g, &mb), 1);
    assert_int_equal(sd_grammar_set_trigger(g, "", 0, SD_GRAMMAR_TRIGGER_ANYWHERE), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_grammar_set_trigger(g, "{", 1, (sd_grammar_trigger_where)7), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_grammar_set_trigger(g, "{", 1, SD_GRAMMAR_TRIGGER_ANYWHERE), SD_OK);
    assert_int_equal(sd_grammar_max_bytes(g, &mb), 0);
    assert_int_equal(sd_grammar_set_trigger(g, "{", 1, SD_GRAMMAR_TRIGGER_ANYWHERE), SD_ERR_INVALID_ARG);
    sd_grammar_free(g);
    g = gbnf("root ::= \"{}\"");
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &m), SD_OK);
    assert_int_equal(sd_grammar_set_trigger(g, "{", 1, SD_GRAMMAR_TRIGGER_ANYWHERE), SD_ERR_INVALID_ARG);
    sd_grammar_matcher_free(m);
    sd_grammar_free(g);
}

/* The vocabulary index of real tokenizers: every normal token's bytes are its decoded text, and a
 * JSON-object mask at the start holds exactly the tokens that are whitespace then '{' prefixes. */
static void test_real_vocab(void **state) {
    (void)state;
    const char *rel[] = {"tokenizers/qwen3/tokenizer.json", "models/stories260K/tok512.bin"};
    for (int k = 0; k < 2; k++) {
        const char *p = sdtest_shared(rel[k]);
        if (!p) {
            sdtest_missing_shared(rel[k]);
            return;
        }
        sd_tokenizer *t = NULL;
        assert_int_equal(sd_tokenizer_load(p, &t), SD_OK);
        sd_grammar_vocab *v = NULL;
        assert_int_equal(sd_grammar_vocab_create(t, &v), SD_OK);
        sd_grammar *g = NULL;
        assert_int_equal(sd_grammar_json_object(NULL, &g), SD_OK);
        sd_grammar_matcher *m = NULL;
        assert_int_equal(sd_grammar_matcher_create(g, v, &m), SD_OK);
        size_t w = sd_grammar_mask_words(v);
        uint64_t *mask = calloc(w, sizeof *mask);
        assert_int_equal(sd_grammar_matcher_mask(m, mask), SD_OK);
        int n = sd_grammar_vocab_n(v), allowed = 0;
        for (int id = 0; id < n; id++) {
            size_t bl;
            const uint8_t *b = sd_grammar_vocab_bytes(v, id, &bl);
            int ok = 0;
            if (b) {
                /* independent check: ws per the grammar (" " or "\n" then spaces/tabs), then "{" and a valid start */
                size_t i = 0;
                if (i < bl && b[i] == ' ') i++;
                else if (i < bl && b[i] == '\n') {
                    i++;
                    while (i < bl && (b[i] == ' ' || b[i] == '\t') && i < 21) i++;
                }
                if (i == bl) ok = 1;
                else if (b[i] == '{') {
                    i++;
                    /* after "{": ws then '"' or '}', checked by a matcher fed the bytes */
                    sd_grammar_matcher *r = NULL;
                    assert_int_equal(sd_grammar_matcher_create(g, NULL, &r), SD_OK);
                    ok = sd_grammar_matcher_accept_bytes(r, b, bl) == SD_OK;
                    sd_grammar_matcher_free(r);
                }
                char dec[256];
                int dl = sd_tokenizer_decode(t, 100, id, dec, sizeof dec);
                if (sd_tokenizer_token_type(t, id) == SD_TOKEN_NORMAL) {
                    assert_int_equal(dl, (int)bl);
                    assert_memory_equal(dec, b, bl);
                }
            }
            assert_int_equal(bit(mask, id), ok);
            allowed += ok;
        }
        fprintf(stderr, "%s: %d of %d tokens allowed at the start of a JSON object\n", rel[k], allowed, n);
        assert_true(allowed > 0);
        free(mask);
        sd_grammar_matcher_free(m);
        sd_grammar_free(g);
        sd_grammar_vocab_free(v);
        sd_tokenizer_free(t);
    }
}

/* GBNF around JSON Schemas (sd_grammar_from_gbnf_schemas): each schema's values where its rule is
 * referenced, with no whitespace around them; $refs resolve within their own schema; errors name the
 * schema by index, or keep the GBNF's lines and columns; a rule the schemas define may not be defined
 * again. */
static void test_gbnf_schemas(void **state) {
    (void)state;
    static const char a[] = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 1, "
                            "\"maximum\": 9}}, \"required\": [\"n\"], \"additionalProperties\": false}";
    static const char b[] = "{\"$defs\": {\"s\": {\"enum\": [\"x\", \"y\"]}}, \"type\": \"array\", \"items\": "
                            "{\"$ref\": \"#/$defs/s\"}, \"maxItems\": 2}";
    const sd_grammar_schema_rule rules[2] = {{"first", a, strlen(a)}, {"second", b, strlen(b)}};
    static const char text[] = "root ::= \"<\" ( \"a=\" first | \"b=\" second ) \">\" ( \";\" root )?\n";
    sd_grammar *g = NULL;
    int bad = 7;
    assert_int_equal(sd_grammar_from_gbnf_schemas(text, strlen(text), NULL, rules, 2, NULL, &bad, &g), SD_OK);
    assert_int_equal(bad, -1);
    static const char *const yes[] = {"<a={\"n\": 3}>", "<a={\"n\":9}>", "<b=[]>", "<b=[\"x\", \"y\"]>;<a={ \"n\" : 1 }>",
                                      NULL};
    static const char *const no[] = {"<a= {\"n\": 3}>", "<a={\"n\": 3} >", "<a={\"n\": 0}>", "<a={}>",
                                     "<b=[\"x\",\"x\",\"y\"]>", "<b=[\"z\"]>", "<a=[]>", NULL};
    expect(g, yes, no, "gbnf with schemas");
    sd_grammar_free(g);
    /* compact whitespace inside the values */
    const sd_json_schema_params compact = {SD_JSON_WS_COMPACT};
    assert_int_equal(sd_grammar_from_gbnf_schemas(text, strlen(text), "root", rules, 2, &compact, NULL, &g), SD_OK);
    static const char *const yes_c[] = {"<a={\"n\":3}>", NULL}, *const no_c[] = {"<a={\"n\": 3}>", NULL};
    expect(g, yes_c, no_c, "compact");
    sd_grammar_free(g);
    /* the second schema is refused: its index and the compiler's message */
    static const char c[] = "{\"type\": \"number\", \"multipleOf\": 2}";
    const sd_grammar_schema_rule bad_rules[2] = {{"first", a, strlen(a)}, {"second", c, strlen(c)}};
    g = (sd_grammar *)1;
    assert_int_equal(sd_grammar_from_gbnf_schemas(text, strlen(text), NULL, bad_rules, 2, NULL, &bad, &g), SD_ERR_UNSUPPORTED);
    assert_null(g);
    assert_int_equal(bad, 1);
    assert_string_equal(sd_last_error(), "schema: .multipleOf: unsupported keyword \"multipleOf\"");
    /* an error in the GBNF keeps its line and column, with bad -1 */
    static const char broken[] = "root ::= first\nx ::= [a\n";
    assert_int_equal(sd_grammar_from_gbnf_schemas(broken, strlen(broken), NULL, rules, 1, NULL, &bad, &g), SD_ERR_INVALID_ARG);
    assert_int_equal(bad, -1);
    assert_non_null(strstr(sd_last_error(), "line 2, column 9"));
    /* the schemas' own rule names are taken */
    static const char clash[] = "root ::= first value\nvalue ::= \"v\"\n";
    assert_int_equal(sd_grammar_from_gbnf_schemas(clash, strlen(clash), NULL, rules, 1, NULL, &bad, &g), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "value"));
    /* a rule referenced and given by no schema is undefined */
    static const char missing[] = "root ::= third\n";
    assert_int_equal(sd_grammar_from_gbnf_schemas(missing, strlen(missing), NULL, rules, 2, NULL, &bad, &g), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "third"));
}

/* The shortest completion: the text it closes is accepted and complete, none is found within one
 * byte fewer, and the matcher does not move. */
static void check_completion(sd_grammar *g, const char *prefix, long want_len, const char *want) {
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &m), SD_OK);
    assert_int_equal(sd_grammar_matcher_accept_bytes(m, prefix, strlen(prefix)), SD_OK);
    const int steps = sd_grammar_matcher_n_steps(m);
    char buf[256];
    const long n = sd_grammar_matcher_completion(m, buf, sizeof buf);
    if (n != want_len) fail_msg("completion of %s: %ld bytes, expected %ld", prefix, n, want_len);
    assert_int_equal(sd_grammar_matcher_n_steps(m), steps);
    if (want) assert_memory_equal(buf, want, (size_t)n);
    if (n > 0) {
        assert_int_equal(sd_grammar_matcher_completion(m, buf, (size_t)n - 1), -1); /* not within cap */
        assert_int_equal(sd_grammar_matcher_completion(m, buf, (size_t)n), n);
        assert_int_equal(sd_grammar_matcher_accept_bytes(m, buf, (size_t)n), SD_OK);
    }
    if (n >= 0) assert_true(sd_grammar_matcher_can_end(m));
    sd_grammar_matcher_free(m);
}

static void test_completion(void **state) {
    (void)state;
    sd_grammar *g = schema("{\"type\": \"string\", \"pattern\": \"ab+c\"}"); /* unanchored: \"...ab+c...\" */
    check_completion(g, "", 5, "\"abc\"");
    check_completion(g, "\"xyz", 4, "abc\"");
    check_completion(g, "\"xab", 2, "c\"");
    check_completion(g, "\"abbc", 1, "\"");
    check_completion(g, "\"abbc\"", 0, NULL);
    sd_grammar_free(g);
    g = schema("{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": [\"id\"]}");
    check_completion(g, "{", 7, NULL); /* "id":0} (quotes and the value, no spaces) */
    check_completion(g, "{\"id\": 12", 1, "}");
    sd_grammar_free(g);
    /* deep inside nested values the shortest search gives up; the stages close them */
    g = schema("{\"type\": \"object\"}");
    {
        char deep[512] = "{\"a\": ";
        for (int i = 0; i < 40; i++) strcat(deep, i % 2 ? "[" : "{\"k\": ");
        strcat(deep, "\"xy");
        sd_grammar_matcher *dm = NULL;
        assert_int_equal(sd_grammar_matcher_create(g, NULL, &dm), SD_OK);
        assert_int_equal(sd_grammar_matcher_accept_bytes(dm, deep, strlen(deep)), SD_OK);
        char out[512];
        const long n = sd_grammar_matcher_completion(dm, out, sizeof out);
        assert_true(n > 40); /* at least the quote and 41 closing brackets */
        assert_int_equal(sd_grammar_matcher_accept_bytes(dm, out, (size_t)n), SD_OK);
        assert_true(sd_grammar_matcher_can_end(dm));
        sd_grammar_matcher_free(dm);
    }
    sd_grammar_free(g);
    g = gbnf("root ::= \"a\"+ \"b\" | \"cd\"");
    check_completion(g, "", 2, "ab"); /* "ab" before "cd": byte order among the shortest */
    check_completion(g, "aaa", 1, "b");
    sd_grammar_matcher *m = NULL;
    assert_int_equal(sd_grammar_matcher_create(g, NULL, &m), SD_OK);
    char buf[4];
    assert_int_equal(sd_grammar_matcher_completion(m, buf, 1), -1); /* needs 2 */
    assert_int_equal(sd_grammar_matcher_completion(m, NULL, 8), 2);  /* no buffer: the length */
    assert_int_equal(sd_grammar_matcher_completion(NULL, buf, 8), -1);
    sd_grammar_matcher_free(m);
    sd_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_basics),       cmocka_unit_test(test_llama_cpp_examples),
        cmocka_unit_test(test_gbnf_refused),      cmocka_unit_test(test_max_bytes),
        cmocka_unit_test(test_schema_instances),  cmocka_unit_test(test_schema_refused),
        cmocka_unit_test(test_schema_bounds),     cmocka_unit_test(test_matcher_masks),
        cmocka_unit_test(test_forced),            cmocka_unit_test(test_real_vocab),
        cmocka_unit_test(test_gbnf_schemas),      cmocka_unit_test(test_lazy),
        cmocka_unit_test(test_completion),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
