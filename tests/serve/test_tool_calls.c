/* The tool-call module (serve/tool_calls.h): format detection over the
 * real templates of the reference data, the parser of each format on
 * well-formed, partial and malformed output (partial and malformed are
 * left as content, whole), the streamed plain-text prefix at every split
 * point, and the forcing grammar checked with the engine's own grammar
 * automaton (a valid call passes, an undeclared name or bad arguments do
 * not). */
#define _GNU_SOURCE /* strndup */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "sample/grammar.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_B "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_E "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_C "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CE "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_S "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

static void test_detect_real_templates(void **state)
{
    (void)state;
    static const struct {
        const char *file, *family;
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
        {"Qwen-Qwen3-0.6B", "hermes"},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
        {"ibm-granite-granite-4.0", "hermes"},
        {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
        {"meta-llama-Llama-3.2-3B-Instruct", "llama3"},
        {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
        {"mistralai-Mistral-Nemo-Instruct-2407", "mistral"},
        {"Mistral-Small-3.2-24B-Instruct-2506", "mistral"},
        {"unsloth-mistral-Devstral-Small-2507", "mistral"},
        {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral"},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek"},
        {"deepseek-ai-DeepSeek-V3.1", "deepseek"},
        {"llama-cpp-deepseek-r1", "deepseek"},
        {"Qwen3-Coder", "qwen3-xml"},
        {"Qwen3.5-4B", "qwen3-xml"},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "qwen3-xml"},
        {"StepFun3.5-Flash", "qwen3-xml"},
        {"ByteDance-Seed-OSS", "seed-oss"},
        {"meetkai-functionary-medium-v3.1", "functionary"},
        {"meetkai-functionary-medium-v3.2", "functionary-v3.2"},
        {"fireworks-ai-llama-3-firefunction-v2", "firefunction"},
        {"GLM-4.6", "glm"},
        {"moonshotai-Kimi-K2", "kimi"},
        {"openai-gpt-oss-120b", "harmony"},
        {"MiniMax-M3", "minimax"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char rel[256], path[4096];
        snprintf(rel, sizeof(rel), "chat-templates/llama.cpp-jinja/%s.jinja", cases[i].file);
        TESTDATA_FILE(path, rel);
        size_t n;
        char *raw = testdata_read_file(path, &n);
        assert_non_null(raw);
        char *t = strndup(raw, n); /* the detector takes a C string */
        free(raw);
        assert_non_null(t);
        const char *fam = NULL;
        tool_format f = tool_format_detect(t, &fam);
        if (strcmp(fam, cases[i].family) != 0) fail_msg("%s: %s, want %s", cases[i].file, fam, cases[i].family);
        bool unsupported = !strcmp(fam, "seed-oss") || !strcmp(fam, "glm") ||
                           !strcmp(fam, "kimi") || !strcmp(fam, "minimax");
        assert_int_equal(f == TOOL_FORMAT_UNSUPPORTED, unsupported);
        assert_int_equal(f == TOOL_FORMAT_HARMONY, !strcmp(fam, "harmony"));
        assert_int_equal(f == TOOL_FORMAT_XML, !strcmp(fam, "qwen3-xml"));
        assert_int_equal(f == TOOL_FORMAT_FUNCTIONARY, !strcmp(fam, "functionary"));
        assert_int_equal(f == TOOL_FORMAT_RECIPIENTS, !strcmp(fam, "functionary-v3.2"));
        assert_int_equal(f == TOOL_FORMAT_FIREFUNCTION, !strcmp(fam, "firefunction"));
        free(t);
    }
    const char *fam = NULL;
    assert_int_equal(tool_format_detect(NULL, &fam), TOOL_FORMAT_HERMES);
    assert_string_equal(fam, "hermes");
}

typedef struct pcase {
    tool_format f;
    const char *text;
    const char *content;  /* expected content */
    size_t n_calls;
    const char *name0, *args0; /* the first call */
    const char *name1, *args1; /* the second, when two */
} pcase;

static const pcase k_cases[] = {
    /* Hermes */
    {TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "", 1, "get_weather", "{\"city\":\"Paris\"}", NULL, NULL},
    {TOOL_FORMAT_HERMES, "Let me look.\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call>\n",
     "Let me look.\n", 2, "a", "{}", "b", "{\"x\":1}"},
    {TOOL_FORMAT_HERMES, "Hi <tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call> bye", "Hi  bye", 1, "a", "{}", NULL, NULL},
    {TOOL_FORMAT_HERMES, "plain text, no call", "plain text, no call", 0, NULL, NULL, NULL, NULL},
    /* partial and malformed: all content */
    {TOOL_FORMAT_HERMES, "x <tool_call>{\"name\":\"a\",\"argum", "x <tool_call>{\"name\":\"a\",\"argum", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>{\"name\":\"a\",\"arguments\":{}}", "<tool_call>{\"name\":\"a\",\"arguments\":{}}", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>{\"arguments\":{}}</tool_call>", "<tool_call>{\"arguments\":{}}</tool_call>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>{\"name\":\"a b\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"a b\",\"arguments\":{}}</tool_call>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>{\"name\":\"a\",\"arguments\":[1]}</tool_call>", "<tool_call>{\"name\":\"a\",\"arguments\":[1]}</tool_call>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>{\"name\":\"a\",\"arguments\":\"not json\"}</tool_call>", "<tool_call>{\"name\":\"a\",\"arguments\":\"not json\"}</tool_call>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_HERMES, "<tool_call>", "<tool_call>", 0, NULL, NULL, NULL, NULL},
    /* Llama 3 */
    {TOOL_FORMAT_LLAMA3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "", 1, "get_weather", "{\"city\":\"Oslo\"}", NULL, NULL},
    {TOOL_FORMAT_LLAMA3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": [1, 2]}}", "", 2, "a", "{}", "b", "{\"k\":[1,2]}"},
    {TOOL_FORMAT_LLAMA3, "Sure: <|python_tag|>{\"name\": \"a\", \"parameters\": {}}", "Sure: ", 1, "a", "{}", NULL, NULL},
    {TOOL_FORMAT_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_LLAMA3, "{\"name\": \"a\", \"parameters\": {}} and more", "{\"name\": \"a\", \"parameters\": {}} and more", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_LLAMA3, "The answer is 4.", "The answer is 4.", 0, NULL, NULL, NULL, NULL},
    /* Mistral */
    {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abcdefghi\"}, {\"name\": \"b\", \"arguments\": {}}]",
     "", 2, "a", "{\"q\":\"x\"}", "b", "{}"},
    {TOOL_FORMAT_MISTRAL, "ok[TOOL_CALLS]a[ARGS]{\"q\": 1}[TOOL_CALLS]b[ARGS]{}", "ok", 2, "a", "{\"q\":1}", "b", "{}"},
    {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]a[ARGS]", "[TOOL_CALLS]a[ARGS]", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][]", "[TOOL_CALLS][]", 0, NULL, NULL, NULL, NULL},
    /* DeepSeek R1 and V3.1 */
    {TOOL_FORMAT_DEEPSEEK, "Hmm." DS_B DS_C "function" DS_S "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DS_CE "\n" DS_C "function" DS_S "b\n```json\n{}\n```" DS_CE DS_E,
     "Hmm.", 2, "get_weather", "{\"city\":\"Paris\"}", "b", "{}"},
    {TOOL_FORMAT_DEEPSEEK, DS_B DS_C "get_weather" DS_S "{\"city\": \"Oslo\"}" DS_CE DS_E, "", 1, "get_weather", "{\"city\":\"Oslo\"}", NULL, NULL},
    {TOOL_FORMAT_DEEPSEEK, DS_B DS_C "get_weather" DS_S "{\"city\": \"Oslo\"}" DS_CE, DS_B DS_C "get_weather" DS_S "{\"city\": \"Oslo\"}" DS_CE, 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_DEEPSEEK, DS_B DS_C "function" DS_S "f\n```json\n{}\n" DS_CE DS_E, DS_B DS_C "function" DS_S "f\n```json\n{}\n" DS_CE DS_E, 0, NULL, NULL, NULL, NULL},
    /* XML (Qwen3-Coder): values typed as JSON where they are JSON (no tools here) */
    {TOOL_FORMAT_XML, "I will check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "I will check.\n", 1, "get_weather", "{\"city\":\"Paris\",\"days\":3}", NULL, NULL},
    {TOOL_FORMAT_XML, "<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call><function=b><parameter=x>{\"k\": [1]}</parameter>"
                      "<parameter=t>two\nlines</parameter></function></tool_call>",
     "", 2, "a", "{}", "b", "{\"x\":{\"k\":[1]},\"t\":\"two\\nlines\"}"},
    {TOOL_FORMAT_XML, "<tool_call>\n<function=a>\n<parameter=city>\nPar", "<tool_call>\n<function=a>\n<parameter=city>\nPar", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_XML, "<tool_call><function=a><parameter=c>x</parameter></function>", "<tool_call><function=a><parameter=c>x</parameter></function>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_XML, "<tool_call><function=a b></function></tool_call>", "<tool_call><function=a b></function></tool_call>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_XML, "<tool_call><function=a><x>1</x></function></tool_call>", "<tool_call><function=a><x>1</x></function></tool_call>", 0, NULL, NULL, NULL, NULL},
    /* Mistral's name[CALL_ID]id[ARGS]{...} */
    {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Oslo\"}", "", 1, "get_weather",
     "{\"city\":\"Oslo\"}", NULL, NULL},
    /* functionary v3.1 */
    {TOOL_FORMAT_FUNCTIONARY, "<function=get_weather>{\"city\": \"Paris\"}</function>", "", 1, "get_weather",
     "{\"city\":\"Paris\"}", NULL, NULL},
    {TOOL_FORMAT_FUNCTIONARY, "Let me see.<function=a>{}</function>\n<function=b>{\"x\": [1]}</function>\n", "Let me see.", 2,
     "a", "{}", "b", "{\"x\":[1]}"},
    /* the last closing tag missing at the end */
    {TOOL_FORMAT_FUNCTIONARY, "<function=a>{\"x\":1} \n", "", 1, "a", "{\"x\":1}", NULL, NULL},
    /* ... but not with text after it, and malformed calls: all content */
    {TOOL_FORMAT_FUNCTIONARY, "<function=a>{\"x\":1} more", "<function=a>{\"x\":1} more", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FUNCTIONARY, "<function=a>{\"x\":</function>", "<function=a>{\"x\":</function>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FUNCTIONARY, "<function=a b>{}</function>", "<function=a b>{}</function>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FUNCTIONARY, "<function=a>[1]</function>", "<function=a>[1]</function>", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FUNCTIONARY, "<function=a", "<function=a", 0, NULL, NULL, NULL, NULL},
    /* firefunction v2 */
    {TOOL_FORMAT_FIREFUNCTION, " functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", " ", 1,
     "get_weather", "{\"city\":\"Paris\"}", NULL, NULL},
    {TOOL_FORMAT_FIREFUNCTION, "Sure. functools[{\"name\":\"a\",\"arguments\":{}}, {\"name\":\"b\",\"arguments\":{\"x\":1}}]\n",
     "Sure. ", 2, "a", "{}", "b", "{\"x\":1}"},
    {TOOL_FORMAT_FIREFUNCTION, "functools[]", "functools[]", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FIREFUNCTION, "functools[{\"name\":\"a\"", "functools[{\"name\":\"a\"", 0, NULL, NULL, NULL, NULL},
    {TOOL_FORMAT_FIREFUNCTION, "the functools library", "the functools library", 0, NULL, NULL, NULL, NULL},
    /* a format that is not parsed leaves everything as content */
    {TOOL_FORMAT_UNSUPPORTED, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", 0, NULL, NULL, NULL, NULL},
};

static void test_parse_formats(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const pcase *c = &k_cases[i];
        tool_parsed p;
        assert_int_equal(tool_calls_parse(c->f, c->text, strlen(c->text), &p), 0);
        if (p.n_calls != c->n_calls || strcmp(p.content, c->content) != 0) {
            fail_msg("case %zu: %zu calls, content \"%s\" (want %zu, \"%s\")", i, p.n_calls, p.content,
                     c->n_calls, c->content);
        }
        assert_int_equal(p.n_content, strlen(p.content));
        if (c->n_calls > 0) {
            assert_string_equal(p.calls[0].name, c->name0);
            assert_string_equal(p.calls[0].arguments, c->args0);
        }
        if (c->n_calls > 1) {
            assert_string_equal(p.calls[1].name, c->name1);
            assert_string_equal(p.calls[1].arguments, c->args1);
        }
        tool_parsed_free(&p);
    }
}

/* Every prefix of every case (a stream cut anywhere) parses without harm,
 * (without a call its content is all of it),
 * and the streamed text prefix never reaches into a call: what the stream
 * sent as content before the end is a prefix of the final content. */
static void test_every_split_point(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const pcase *c = &k_cases[i];
        size_t n = strlen(c->text);
        tool_parsed full;
        assert_int_equal(tool_calls_parse(c->f, c->text, n, &full), 0);
        size_t sent = 0;
        for (size_t k = 0; k <= n; k++) {
            tool_parsed p;
            assert_int_equal(tool_calls_parse(c->f, c->text, k, &p), 0);
            /* no call: the text is the content, byte for byte */
            if (p.n_calls == 0) assert_true(p.n_content == k && memcmp(p.content, c->text, k) == 0);
            tool_parsed_free(&p);
            size_t safe = tool_calls_text_prefix(c->f, c->text, k);
            assert_true(safe <= k);
            if (safe > sent) sent = safe;
        }
        if (sent > full.n_content || memcmp(full.content, c->text, sent) != 0) {
            fail_msg("case %zu: %zu bytes streamed as content, final content \"%s\"", i, sent, full.content);
        }
        tool_parsed_free(&full);
    }
    /* the tools' schemas type XML values: a string stays a string */
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"zip\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
                               "\"lvl\":{\"enum\":[\"1\",\"2\"]}}}}}]", 0, NULL);
    assert_non_null(tools);
    const char *xml = "<tool_call>\n<function=f>\n<parameter=zip>\n0501\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
                      "<parameter=flag>\ntrue\n</parameter>\n<parameter=s>\nplain\n</parameter>\n"
                      "<parameter=lvl>\n2\n</parameter>\n</function>\n</tool_call>";
    tool_parsed tp;
    assert_int_equal(tool_calls_parse_typed(TOOL_FORMAT_XML, xml, strlen(xml), tools, &tp), 0);
    assert_int_equal(tp.n_calls, 1);
    assert_string_equal(tp.calls[0].arguments, "{\"zip\":\"0501\",\"n\":7,\"flag\":true,\"s\":\"plain\",\"lvl\":\"2\"}");
    tool_parsed_free(&tp);
    json_decref(tools);
    /* a tail that may begin a marker is held; one that cannot is not */
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_HERMES, "Hello <tool", 11), 6);
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_HERMES, "Hello <b>", 9), 9);
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_MISTRAL, "Hi [TOOL_", 9), 3);
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_LLAMA3, "  ", 2), 0);
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_LLAMA3, " {\"na", 5), 0);
    assert_int_equal(tool_calls_text_prefix(TOOL_FORMAT_LLAMA3, "It is", 5), 5);
}

/* Whether the grammar accepts text as a whole output. */
static bool accepts(const char *gbnf, const char *text)
{
    grammar *g = NULL;
    strata_err err;
    if (grammar_parse(&g, gbnf, strlen(gbnf), &err) != 0) fail_msg("grammar: %s\n%s", err.msg, gbnf);
    grammar_state *s = NULL;
    assert_int_equal(grammar_state_new(&s, g, &err), 0);
    bool ok = grammar_state_accept_bytes(s, (const uint8_t *)text, strlen(text)) && grammar_state_can_end(s);
    grammar_state_free(s);
    grammar_free(g);
    return ok;
}

static void test_grammar_forces_a_declared_call(void **state)
{
    (void)state;
    json_t *weather = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                                 "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"],"
                                 "\"additionalProperties\":false}", 0, NULL);
    assert_non_null(weather);
    tool_decl tools[] = {{"get_weather", weather}, {"ping", NULL}};
    static const struct {
        tool_format f;
        const char *good, *good2, *bad_name, *bad_args;
    } k[] = {
        {TOOL_FORMAT_HERMES,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"celsius\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\":\"celsius\"}}\n</tool_call>"},
        {TOOL_FORMAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}",
         "{\"name\": \"ping\", \"parameters\": {}}; {\"name\": \"ping\", \"parameters\": {}}",
         "{\"name\": \"pong\", \"parameters\": {}}", "{\"name\": \"get_weather\", \"parameters\": {\"city\":1}}"},
        {TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}]",
         "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]",
         "[TOOL_CALLS][{\"name\": \"x\", \"arguments\": {}}]",
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"x\":1}}]"},
        {TOOL_FORMAT_DEEPSEEK, DS_B DS_C "function" DS_S "get_weather\n```json\n{\"city\":\"Oslo\"}\n```" DS_CE DS_E,
         DS_B DS_C "function" DS_S "ping\n```json\n{}\n```" DS_CE "\n" DS_C "function" DS_S "ping\n```json\n{}\n```" DS_CE DS_E,
         DS_B DS_C "function" DS_S "nope\n```json\n{}\n```" DS_CE DS_E,
         DS_B DS_C "function" DS_S "get_weather\n```json\n{}\n```" DS_CE DS_E},
        {TOOL_FORMAT_FIREFUNCTION, "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}]",
         "functools[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]",
         "functools[{\"name\": \"x\", \"arguments\": {}}]",
         "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\":2}}]"},
        {TOOL_FORMAT_FUNCTIONARY, "<function=get_weather>{\"city\":\"Oslo\"}</function>",
         "<function=ping>{}</function><function=get_weather>{\"city\":\"Rome\",\"unit\":\"celsius\"}</function>",
         "<function=get_time>{}</function>", "<function=get_weather>{\"unit\":\"kelvin\"}</function>"},
    };
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        char *one = NULL, *many = NULL;
        strata_err err;
        assert_int_equal(tool_calls_grammar(k[i].f, tools, 2, false, &one, &err), 0);
        assert_int_equal(tool_calls_grammar(k[i].f, tools, 2, true, &many, &err), 0);
        assert_true(accepts(one, k[i].good));
        assert_true(accepts(many, k[i].good));
        assert_false(accepts(one, k[i].good2));
        assert_true(accepts(many, k[i].good2));
        assert_false(accepts(many, k[i].bad_name));
        assert_false(accepts(many, k[i].bad_args));
        /* what the grammar forces, the parser takes */
        tool_parsed p;
        assert_int_equal(tool_calls_parse(k[i].f, k[i].good2, strlen(k[i].good2), &p), 0);
        assert_int_equal(p.n_calls, 2);
        tool_parsed_free(&p);
        free(one);
        free(many);
    }
    /* a schema the compiler refuses names the tool */
    json_t *bad = json_loads("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":3}}}", 0, NULL);
    tool_decl t2[] = {{"calc", bad}};
    char *g = NULL;
    strata_err err;
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_HERMES, t2, 1, true, &g, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "`calc`"));
    assert_non_null(strstr(err.msg, "multipleOf"));
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_UNSUPPORTED, tools, 2, true, &g, &err), STRATA_EINVAL);
    /* XML: the schema's properties in order, string values as text; what
     * the grammar forces, the parser takes with the same types */
    char *xg1 = NULL, *xgn = NULL;
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_XML, tools, 2, false, &xg1, &err), 0);
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_XML, tools, 2, true, &xgn, &err), 0);
    const char *x_one = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
                        "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>";
    const char *x_two = "<tool_call>\n<function=ping>\n<parameter=any>\n42\n</parameter>\n</function>\n</tool_call>\n"
                        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
    assert_true(accepts(xg1, x_one));
    assert_true(accepts(xgn, x_one));
    assert_false(accepts(xg1, x_two));
    assert_true(accepts(xgn, x_two));
    /* an unknown function, a missing required parameter, a value outside the enum, the wrong order */
    assert_false(accepts(xgn, "<tool_call>\n<function=pong>\n</function>\n</tool_call>"));
    /* a string's maxLength (get_weather's city: none; a bounded one below) */
    json_t *bounded = json_loads("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\",\"minLength\":2,"
                                 "\"maxLength\":4}},\"required\":[\"q\"]}", 0, NULL);
    tool_decl tb[] = {{"find", bounded}};
    char *bg = NULL;
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_XML, tb, 1, false, &bg, &err), 0);
    assert_true(accepts(bg, "<tool_call>\n<function=find>\n<parameter=q>\nabcd\n</parameter>\n</function>\n</tool_call>"));
    assert_false(accepts(bg, "<tool_call>\n<function=find>\n<parameter=q>\nabcde\n</parameter>\n</function>\n</tool_call>"));
    assert_false(accepts(bg, "<tool_call>\n<function=find>\n<parameter=q>\na\n</parameter>\n</function>\n</tool_call>"));
    free(bg);
    json_decref(bounded);
    assert_false(accepts(xgn, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
    assert_false(accepts(xgn, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                              "<parameter=unit>\nkelvin\n</parameter>\n</function>\n</tool_call>"));
    assert_false(accepts(xgn, "<tool_call>\n<function=get_weather>\n<parameter=unit>\ncelsius\n</parameter>\n"
                              "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"));
    json_t *decl = json_pack("[{s:s,s:{s:s,s:O}}]", "type", "function", "function", "name", "get_weather",
                             "parameters", weather);
    tool_parsed xp;
    assert_int_equal(tool_calls_parse_typed(TOOL_FORMAT_XML, x_two, strlen(x_two), decl, &xp), 0);
    assert_int_equal(xp.n_calls, 2);
    assert_string_equal(xp.calls[0].arguments, "{\"any\":42}");
    assert_string_equal(xp.calls[1].arguments, "{\"city\":\"Oslo\"}");
    tool_parsed_free(&xp);
    json_decref(decl);
    free(xg1);
    free(xgn);
    /* harmony: one call, after an optional analysis message; what the
     * grammar forces, the reasoning split (reasoning.h) takes as the call */
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_HARMONY, tools, 2, true, &g, &err), 0);
    const char *h_call = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}";
    const char *h_both = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
                         "<|channel|>commentary to=functions.ping <|constrain|>json<|message|>{}";
    assert_true(accepts(g, h_call));
    assert_true(accepts(g, h_both));
    assert_false(accepts(g, "<|channel|>commentary to=functions.pong <|constrain|>json<|message|>{}"));
    assert_false(accepts(g, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}"));
    assert_false(accepts(g, "<|channel|>final<|message|>Hi"));
    assert_false(accepts(g, "<|channel|>analysis<|message|>a<b<|end|><|start|>assistant<|channel|>commentary "
                            "to=functions.ping <|constrain|>json<|message|>{}"));
    reasoning_parts rp;
    assert_int_equal(reasoning_split(REASONING_HARMONY, false, h_both, strlen(h_both), true, &rp), 0);
    assert_int_equal(rp.n_calls, 1);
    assert_string_equal(rp.calls[0].name, "ping");
    assert_string_equal(rp.reasoning, "Need the weather.");
    reasoning_parts_free(&rp);
    free(g);
    /* functionary v3.2: after the prompt's ">>>", an optional "all"
     * message without '>', then calls joined by ">>>"; the split takes them */
    char *r1 = NULL, *rn = NULL;
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_RECIPIENTS, tools, 2, false, &r1, &err), 0);
    assert_int_equal(tool_calls_grammar(TOOL_FORMAT_RECIPIENTS, tools, 2, true, &rn, &err), 0);
    const char *r_call = "get_weather\n{\"city\":\"Oslo\"}";
    const char *r_both = "all\nLet me look.\n>>>ping\n{}>>>get_weather\n{\"city\":\"Rome\"}";
    assert_true(accepts(r1, r_call));
    assert_true(accepts(rn, r_call));
    assert_false(accepts(r1, r_both));
    assert_true(accepts(rn, r_both));
    assert_false(accepts(rn, "get_time\n{}"));
    assert_false(accepts(rn, "get_weather\n{}"));
    assert_false(accepts(rn, "all\nHi"));
    assert_false(accepts(rn, "all\na>b>>>ping\n{}"));
    assert_int_equal(reasoning_split(REASONING_RECIPIENTS, false, r_both, strlen(r_both), true, &rp), 0);
    assert_int_equal(rp.n_calls, 2);
    assert_string_equal(rp.calls[0].name, "ping");
    assert_string_equal(rp.calls[1].name, "get_weather");
    assert_string_equal(rp.calls[1].arguments, "{\"city\":\"Rome\"}");
    assert_string_equal(rp.content, "Let me look.");
    reasoning_parts_free(&rp);
    free(r1);
    free(rn);
    json_decref(bad);
    json_decref(weather);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_parse_formats),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_grammar_forces_a_declared_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
