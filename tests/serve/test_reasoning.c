/* The reasoning split (serve/reasoning.h): format detection over the real
 * templates of the reference data, where a rendered prompt leaves the
 * model inside <think>, the THINK, HARMONY and RECIPIENTS splits of
 * finished outputs (closed, open, cut short, absent; analysis, final,
 * preamble and call messages, malformed calls; functionary v3.2's "all"
 * and call messages, replies without its framing), and the streaming
 * contract: at every split
 * point of every case, the settled reasoning and content are prefixes of
 * the finished output's, and grow with the output. Also the grammar of a
 * THINK reply held to an answer's grammar: the block then the answer,
 * against a direct check of "the first </think> ends the block" over
 * random texts. */
#define _GNU_SOURCE /* strndup */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "sample/grammar.h"
#include "serve/reasoning.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_detect_real_templates(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        reasoning_format f;
    } cases[] = {
        {"Qwen-Qwen3-0.6B", REASONING_THINK},
        {"Qwen-QwQ-32B", REASONING_THINK},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", REASONING_THINK},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", REASONING_THINK},
        {"HuggingFaceTB-SmolLM3-3B", REASONING_THINK},
        {"openai-gpt-oss-120b", REASONING_HARMONY},
        {"meetkai-functionary-medium-v3.2", REASONING_RECIPIENTS},
        {"mistralai-Ministral-3-14B-Reasoning-2512", REASONING_THINK_BRACKET},
        {"meetkai-functionary-medium-v3.1", REASONING_NONE},
        {"meta-llama-Llama-3.1-8B-Instruct", REASONING_NONE},
        {"Qwen-Qwen2.5-7B-Instruct", REASONING_NONE},
        {"microsoft-Phi-3.5-mini-instruct", REASONING_NONE},
        {"google-gemma-2-2b-it", REASONING_NONE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char rel[256], path[4096];
        snprintf(rel, sizeof(rel), "chat-templates/llama.cpp-jinja/%s.jinja", cases[i].file);
        TESTDATA_FILE(path, rel);
        size_t n;
        char *raw = testdata_read_file(path, &n);
        assert_non_null(raw);
        char *t = strndup(raw, n);
        free(raw);
        assert_non_null(t);
        reasoning_format f = reasoning_detect(t);
        if (f != cases[i].f) fail_msg("%s: format %d, want %d", cases[i].file, (int)f, (int)cases[i].f);
        free(t);
    }
    assert_int_equal(reasoning_detect(NULL), REASONING_NONE);
}

static void test_prompt_open(void **state)
{
    (void)state;
    static const struct {
        const char *prompt;
        bool open, closed;
    } cases[] = {
        {"<|im_start|>assistant\n<think>\n", true, false},
        {"<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>", true, false},
        {"<|im_start|>assistant\n<think>\n\n</think>\n\n", false, true},
        {"<|im_start|>assistant\n", false, false},
        {"think>", false, false},
        {"/think>", false, false},
        {"", false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (reasoning_prompt_open(cases[i].prompt, strlen(cases[i].prompt)) != cases[i].open) {
            fail_msg("\"%s\": open %d", cases[i].prompt, !cases[i].open);
        }
        if (reasoning_prompt_closed(cases[i].prompt, strlen(cases[i].prompt)) != cases[i].closed) {
            fail_msg("\"%s\": closed %d", cases[i].prompt, !cases[i].closed);
        }
    }
}

typedef struct scase {
    reasoning_format f;
    bool open;
    const char *text;
    const char *reasoning, *content;
    const char *call_name, *call_args; /* the one call, or NULL */
} scase;

#define H_AN "<|channel|>analysis<|message|>"
#define H_FIN "<|start|>assistant<|channel|>final<|message|>"

static const scase k_cases[] = {
    /* THINK */
    {REASONING_THINK, false, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.", "The answer is 4.", NULL, NULL},
    {REASONING_THINK, false, "\n<think>a < b</think>c", "a < b", "c", NULL, NULL},
    {REASONING_THINK, false, "<think>\n\n</think>\n\nHi", "", "Hi", NULL, NULL},
    {REASONING_THINK, false, "Just an answer.", "", "Just an answer.", NULL, NULL},
    {REASONING_THINK, false, "  <thin air", "", "  <thin air", NULL, NULL},
    {REASONING_THINK, false, "<think>cut short", "cut short", "", NULL, NULL},
    {REASONING_THINK, false, "", "", "", NULL, NULL},
    {REASONING_THINK, true, "Okay, 2+2.\n</think>\n\n4", "Okay, 2+2.", "4", NULL, NULL},
    {REASONING_THINK, true, "still thinking </thi", "still thinking </thi", "", NULL, NULL},
    {REASONING_THINK, false, "<think>x</think>y</think>z", "x", "y</think>z", NULL, NULL},
    /* HARMONY */
    {REASONING_HARMONY, false, H_AN "User greets.<|end|>" H_FIN "Hello!", "User greets.", "Hello!", NULL, NULL},
    {REASONING_HARMONY, false, "<|channel|>final<|message|>Only this.", "", "Only this.", NULL, NULL},
    {REASONING_HARMONY, false, "No markers at all.", "", "No markers at all.", NULL, NULL},
    {REASONING_HARMONY, false, H_AN "Need weather.<|end|><|start|>assistant<|channel|>commentary "
                               "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
     "Need weather.", "", "get_weather", "{\"city\":\"Paris\"}"},
    {REASONING_HARMONY, false, "<|start|>assistant to=functions.ping<|channel|>commentary json<|message|>{}",
     "", "", "ping", "{}"},
    {REASONING_HARMONY, false, H_AN "x<|end|><|start|>assistant<|channel|>commentary to=functions.f"
                               "<|message|>{not json",
     "x", "{not json", NULL, NULL},
    {REASONING_HARMONY, false, "<|channel|>commentary<|message|>Let me check.<|end|>" H_FIN "Done.",
     "", "Let me check.Done.", NULL, NULL},
    {REASONING_HARMONY, false, H_AN "a<|end|>" H_AN "b<|end|>" H_FIN "c", "ab", "c", NULL, NULL},
    {REASONING_HARMONY, false, H_AN "cut sho", "cut sho", "", NULL, NULL},
    {REASONING_HARMONY, false, "<|channel|>anal", "", "", NULL, NULL},
    {REASONING_HARMONY, false, "a <| b", "", "a <| b", NULL, NULL},
    {REASONING_HARMONY, false, " \n" H_AN "r<|end|>\n" H_FIN "c", "r", "c", NULL, NULL},
    {REASONING_HARMONY, false, " x " H_AN "r", "r", " x ", NULL, NULL},
    /* a stray end marker near the end (read past the output once, found by fuzz_tool_calls) */
    {REASONING_HARMONY, false, "<|:hanne <|end|>>al", "", "<|:hanne >al", NULL, NULL},
    {REASONING_HARMONY, false, "x<|end|>a", "", "xa", NULL, NULL},
    /* a recipient with no name is no call (fuzz_tool_calls) */
    {REASONING_HARMONY, false, "<|channel|>commentary to=<|message|>{}", "", "{}", NULL, NULL},
    {REASONING_HARMONY, false, "<|channel|>commentary to=functions.a/b<|message|>{}", "", "{}", NULL, NULL},
    /* THINK_BRACKET (Ministral 3 Reasoning) */
    {REASONING_THINK_BRACKET, false, "[THINK]Let me see.[/THINK]It is 4.", "Let me see.", "It is 4.", NULL, NULL},
    {REASONING_THINK_BRACKET, false, "It is 4.", "", "It is 4.", NULL, NULL},
    {REASONING_THINK_BRACKET, false, "[THINK]cut", "cut", "", NULL, NULL},
    {REASONING_THINK_BRACKET, false, "<think>x</think>y", "", "<think>x</think>y", NULL, NULL},
    /* RECIPIENTS (functionary v3.2; the prompt ended with ">>>") */
    {REASONING_RECIPIENTS, false, "all\nHello there.", "", "Hello there.", NULL, NULL},
    {REASONING_RECIPIENTS, false, "all\nLet me check.\n>>>get_weather\n{\"city\": \"Paris\"}", "", "Let me check.",
     "get_weather", "{\"city\":\"Paris\"}"},
    {REASONING_RECIPIENTS, false, "get_weather\n{\"city\": \"Oslo\"}\n", "", "", "get_weather", "{\"city\":\"Oslo\"}"},
    {REASONING_RECIPIENTS, false, "all\nA \n>>>all\nB\n", "", "AB", NULL, NULL},
    /* no framing: all content */
    {REASONING_RECIPIENTS, false, "Hello world, no framing.", "", "Hello world, no framing.", NULL, NULL},
    {REASONING_RECIPIENTS, false, "\nHello", "", "Hello", NULL, NULL},
    {REASONING_RECIPIENTS, false, " all\nHi", "", "Hi", NULL, NULL},
    {REASONING_RECIPIENTS, false, "all\n\nline two\n", "", "\nline two", NULL, NULL},
    {REASONING_RECIPIENTS, false, "hi", "", "hi", NULL, NULL},
    {REASONING_RECIPIENTS, false, "all", "", "", NULL, NULL},
    {REASONING_RECIPIENTS, false, "", "", "", NULL, NULL},
    /* a body that is no JSON object is content; so is a bad recipient's message */
    {REASONING_RECIPIENTS, false, "python\nprint(1)", "", "print(1)", NULL, NULL},
    {REASONING_RECIPIENTS, false, "all\nok>>>bad name\n{}", "", "okbad name\n{}", NULL, NULL},
    {REASONING_RECIPIENTS, false, "all\nx >> y", "", "x >> y", NULL, NULL},
    /* NONE */
    {REASONING_NONE, false, "<think>kept</think>", "", "<think>kept</think>", NULL, NULL},
};

static bool is_prefix(const char *p, size_t np, const char *s, size_t ns)
{
    return np <= ns && memcmp(p, s, np) == 0;
}

static void test_split_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const scase *c = &k_cases[i];
        reasoning_parts p;
        assert_int_equal(reasoning_split(c->f, c->open, c->text, strlen(c->text), true, &p), 0);
        if (strcmp(p.reasoning, c->reasoning) != 0 || strcmp(p.content, c->content) != 0) {
            fail_msg("case %zu \"%s\": reasoning \"%s\" content \"%s\"", i, c->text, p.reasoning, p.content);
        }
        assert_int_equal(strlen(p.reasoning), p.n_reasoning);
        assert_int_equal(strlen(p.content), p.n_content);
        if (c->call_name == NULL) {
            assert_int_equal(p.n_calls, 0);
        } else {
            assert_int_equal(p.n_calls, 1);
            assert_string_equal(p.calls[0].name, c->call_name);
            assert_string_equal(p.calls[0].arguments, c->call_args);
        }
        reasoning_parts_free(&p);
    }
}

/* Streaming: at every split point the settled parts are prefixes of the
 * finished ones and of the next point's; calls only come when final. */
static void test_every_split_point(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
        const scase *c = &k_cases[i];
        size_t n = strlen(c->text);
        reasoning_parts fin;
        assert_int_equal(reasoning_split(c->f, c->open, c->text, n, true, &fin), 0);
        size_t last_r = 0, last_c = 0;
        for (size_t k = 0; k <= n; k++) {
            reasoning_parts p;
            assert_int_equal(reasoning_split(c->f, c->open, c->text, k, false, &p), 0);
            if (!is_prefix(p.reasoning, p.n_reasoning, fin.reasoning, fin.n_reasoning) ||
                !is_prefix(p.content, p.n_content, fin.content, fin.n_content)) {
                fail_msg("case %zu at %zu: \"%s\" / \"%s\" not prefixes of \"%s\" / \"%s\"", i, k,
                         p.reasoning, p.content, fin.reasoning, fin.content);
            }
            if (p.n_reasoning < last_r || p.n_content < last_c) fail_msg("case %zu at %zu: shrank", i, k);
            last_r = p.n_reasoning;
            last_c = p.n_content;
            assert_int_equal(p.n_calls, 0);
            reasoning_parts_free(&p);
        }
        reasoning_parts_free(&fin);
    }
}

/* Whether text as a whole matches grammar g. */
static bool matches(const grammar *g, const char *text)
{
    grammar_state *st = NULL;
    strata_err err = {0};
    if (grammar_state_new(&st, g, &err) != 0) fail_msg("%s", err.msg);
    bool ok = grammar_state_accept_bytes(st, (const uint8_t *)text, strlen(text)) && grammar_state_can_end(st);
    assert_false(grammar_state_overflowed(st));
    grammar_state_free(st);
    return ok;
}

static grammar *think_grammar(const char *answer, bool open)
{
    char *text = NULL;
    assert_int_equal(reasoning_grammar(answer, open, &text), 0);
    grammar *g = NULL;
    strata_err err = {0};
    if (grammar_parse(&g, text, strlen(text), &err) != 0) fail_msg("%s\n%s", err.msg, text);
    free(text);
    return g;
}

static void test_reasoning_grammar(void **state)
{
    (void)state;
    /* an answer grammar with a rule of its own, named like the block's
     * would be without the renaming */
    const char *answer = "root ::= \"{\" rsn-0 \"}\"\nrsn-0 ::= [a-z]*\n";
    grammar *open = think_grammar(answer, true), *closed = think_grammar(answer, false);
    static const struct {
        const char *text;
        bool open, closed;
    } cases[] = {
        {"Let me see.</think>\n\n{ab}", true, false},
        {"</think>{}", true, false},
        {"a</thin</think>{x}", true, false},
        {"<<</think> {}", true, false},
        {"</th<</think>\n{}", true, false},
        {"\xc3\xa9t\xc3\xa9</think>{}", true, false},
        {"</think>\n\n\n\n\n\n\n\n{}", true, false},   /* 8 blanks */
        {"</think>\n\n\n\n\n\n\n\n\n{}", false, false}, /* 9 */
        {"</think></think>{}", false, false},         /* the first closes the block */
        {"no close {}", false, false},
        {"</think>{}x", false, false},
        {"{}", false, true},
        {"{abc}", false, true},
        {"<think>x</think>\n{ab}", true, true}, /* open: "<think>" is reasoning text */
        {"<think>\nhmm</think>{}", true, true},
        {"<think>x{}", false, false},
        {"x</think>{}", true, false},
        {"{1}", false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (matches(open, cases[i].text) != cases[i].open) fail_msg("open, case %zu: \"%s\"", i, cases[i].text);
        if (matches(closed, cases[i].text) != cases[i].closed) fail_msg("closed, case %zu: \"%s\"", i, cases[i].text);
    }
    /* random texts over the marker's bytes (and a two-byte character):
     * TEXT + "</think>{}" matches the open grammar exactly when the first
     * "</think>" of it is the one appended */
    static const char *const pieces[] = {"<", "<", "/", "t", "h", "i", "n", "k", ">", "x", "\xc3\xa9", "</think", "</think>"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t n_match = 0;
    for (int round = 0; round < 20000; round++) {
        char text[256] = "";
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int len = (int)((rng >> 33) % 14);
        for (int k = 0; k < len; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            strcat(text, pieces[(rng >> 33) % (sizeof(pieces) / sizeof(pieces[0]))]);
        }
        size_t body = strlen(text);
        strcat(text, "</think>{}");
        bool want = strstr(text, "</think>") == text + body;
        if (matches(open, text) != want) fail_msg("random text \"%s\": expected %d", text, want);
        n_match += want;
    }
    if (n_match < 1000 || n_match > 19000) fail_msg("%zu of 20000 matched", n_match); /* both outcomes */
    grammar_free(open);
    grammar_free(closed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_prompt_open),
        cmocka_unit_test(test_split_cases),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_reasoning_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
