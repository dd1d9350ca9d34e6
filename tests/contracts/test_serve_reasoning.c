/* Reasoning replies through the API: on the parsed request, the format a
 * template gets, `reasoning_format`, `chat_template_kwargs` reaching the
 * template (DeepSeek-R1's enable_thinking leaves the prompt inside
 * <think>), `reasoning_effort` for templates that read it and refused by
 * name for the others, a split under the server's grammars (a JSON
 * Schema's, a forced call's: the reasoning block goes in front of them)
 * but none under a `grammar` as given; then a real `strata serve` over the fake engine with scripted
 * output and real templates (Qwen3's, gpt-oss's, Qwen 3.5's): the reasoning is
 * `message.reasoning_content` and the answer `content`, streamed as
 * reasoning_content deltas then content deltas that concatenate to the same
 * texts; `reasoning_format: "none"` and `--reasoning-format none` leave the
 * output whole; gpt-oss's and Qwen 3.5's (XML) calls become tool_calls,
 * and so do functionary v3.1's <function=N>{...}</function> ones and
 * v3.2's ">>>" messages (whose "all" framing never reaches content), and
 * firefunction v2's functools[...] lists. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
#include "serve/reasoning.h"
#include "text/vocab.h"
#include "text/tokenizer.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "serve_testutil.h"
#include <sys/wait.h>

#ifndef STRATA_BIN
#error STRATA_BIN must name the strata binary
#endif

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"What is 2+2?\"}]"
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"description\":\"d\"," \
              "\"parameters\":{\"type\":\"object\"}}}]"

static bool template_path(char *out, size_t cap, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "chat-templates/llama.cpp-jinja/%s.jinja", name);
    return testdata_path(out, cap, rel) != NULL;
}

static char *read_template(const char *name)
{
    char path[4096];
    if (!template_path(path, sizeof(path), name)) return NULL;
    size_t n;
    char *raw = testdata_read_file(path, &n);
    char *t = raw ? strndup(raw, n) : NULL;
    free(raw);
    return t;
}

static int parse(const api_env *env, const char *body, api_gen *g, api_error *e)
{
    return api_parse_gen(env, API_CHAT, body, strlen(body), g, e);
}

/* The reply split body's request gets (it must parse). */
static reasoning_format reasoning_of(const api_env *env, const char *body)
{
    api_gen g;
    api_error e;
    if (parse(env, body, &g, &e) != 0) fail_msg("%s: %s", body, e.message);
    reasoning_format f = g.reasoning;
    api_gen_free(&g);
    return f;
}

static void test_parse(void **state)
{
    (void)state;
    char *qwen = read_template("Qwen-Qwen3-0.6B"), *r1 = read_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"),
         *oss = read_template("openai-gpt-oss-120b");
    if (qwen == NULL || r1 == NULL || oss == NULL) {
        free(qwen);
        free(r1);
        free(oss);
        print_message("skipped: chat templates missing\n");
        skip();
    }
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 4096, .chat_template = qwen};
    api_gen g;
    api_error e;
    assert_int_equal(parse(&env, "{" MSGS "}", &g, &e), 0);
    assert_int_equal(g.reasoning, REASONING_THINK);
    assert_false(g.reasoning_open);
    api_gen_free(&g);
    assert_int_equal(reasoning_of(&env, "{" MSGS ",\"reasoning_format\":\"none\"}"), REASONING_NONE);
    assert_int_equal(reasoning_of(&env, "{" MSGS ",\"reasoning_format\":\"deepseek\"}"), REASONING_THINK);
    assert_int_equal(parse(&env, "{" MSGS ",\"reasoning_format\":\"loud\"}", &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "`reasoning_format`"));
    /* a reply held to the server's grammar may reason first: the block
     * (optional, as Qwen3's prompt does not open it) before the answer's
     * grammar; one held to a `grammar` as given has no reasoning */
    assert_int_equal(parse(&env, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}", &g, &e), 0);
    assert_int_equal(g.reasoning, REASONING_THINK);
    assert_non_null(strstr(g.grammar, "root ::= (\"<think>\" rsn-0 rsn-ws)? ans-root\n"));
    api_gen_free(&g);
    assert_int_equal(reasoning_of(&env, "{" MSGS ",\"grammar\":\"root ::= [a-z]+\"}"), REASONING_NONE);
    /* a prompt that closed the block (reasoning off) keeps the answer's grammar */
    assert_int_equal(parse(&env, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"},"
                                 "\"chat_template_kwargs\":{\"enable_thinking\":false}}", &g, &e), 0);
    assert_null(strstr(g.grammar, "rsn-0"));
    api_gen_free(&g);
    assert_int_equal(reasoning_of(&env, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"},"
                                      "\"reasoning_format\":\"none\"}"),
                     REASONING_NONE);
    /* the server's switch, and a request that overrides it */
    env.reasoning_off = true;
    assert_int_equal(reasoning_of(&env, "{" MSGS "}"), REASONING_NONE);
    assert_int_equal(reasoning_of(&env, "{" MSGS ",\"reasoning_format\":\"auto\"}"), REASONING_THINK);
    env.reasoning_off = false;
    /* reasoning_effort: Qwen3's template does not read it */
    assert_int_equal(parse(&env, "{" MSGS ",\"reasoning_effort\":\"low\"}", &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "`reasoning_effort`"));
    assert_int_equal(parse(&env, "{" MSGS ",\"chat_template_kwargs\":[1]}", &g, &e), -1);
    assert_non_null(strstr(e.message, "`chat_template_kwargs`"));
    /* chat_template_kwargs reach the template: R1's prompt closes the
     * block unless enable_thinking, which leaves the model inside it */
    env.chat_template = r1;
    assert_int_equal(parse(&env, "{" MSGS "}", &g, &e), 0);
    assert_int_equal(g.reasoning, REASONING_THINK);
    assert_false(g.reasoning_open);
    api_gen_free(&g);
    assert_int_equal(parse(&env, "{" MSGS ",\"chat_template_kwargs\":{\"enable_thinking\":true}}", &g, &e), 0);
    assert_true(g.reasoning_open);
    api_gen_free(&g);
    /* inside the block, the grammar starts with its text */
    assert_int_equal(parse(&env, "{" MSGS ",\"chat_template_kwargs\":{\"enable_thinking\":true},"
                                 "\"response_format\":{\"type\":\"json_object\"}}", &g, &e), 0);
    assert_true(g.reasoning_open);
    assert_non_null(strstr(g.grammar, "root ::= rsn-0 rsn-ws ans-root\n"));
    api_gen_free(&g);
    /* gpt-oss: harmony; reasoning_effort is read (a different prompt) */
    env.chat_template = oss;
    assert_int_equal(parse(&env, "{" MSGS "}", &g, &e), 0);
    assert_int_equal(g.reasoning, REASONING_HARMONY);
    size_t n_medium = g.n_prompt;
    int32_t *medium = malloc(n_medium * sizeof(int32_t));
    assert_non_null(medium);
    memcpy(medium, g.prompt, n_medium * sizeof(int32_t));
    api_gen_free(&g);
    assert_int_equal(parse(&env, "{" MSGS ",\"reasoning_effort\":\"high\"}", &g, &e), 0);
    assert_true(g.n_prompt != n_medium || memcmp(g.prompt, medium, n_medium * sizeof(int32_t)) != 0);
    api_gen_free(&g);
    free(medium);
    /* an earlier reply's reasoning_content reaches gpt-oss's template as `thinking` */
    const char *turns = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
                        "\"content\":null,%s\"tool_calls\":[{\"id\":\"abcdefghi\",\"type\":\"function\","
                        "\"function\":{\"name\":\"w\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                        "\"tool_call_id\":\"abcdefghi\",\"content\":\"sunny\"}]}";
    char body[1024];
    snprintf(body, sizeof(body), turns, "");
    assert_int_equal(parse(&env, body, &g, &e), 0);
    size_t n_without = g.n_prompt;
    api_gen_free(&g);
    snprintf(body, sizeof(body), turns, "\"reasoning_content\":\"Need the weather tool.\",");
    assert_int_equal(parse(&env, body, &g, &e), 0);
    assert_true(g.n_prompt > n_without);
    api_gen_free(&g);
    assert_int_equal(parse(&env, "{" MSGS ",\"reasoning_effort\":\"extreme\"}", &g, &e), -1);
    assert_non_null(strstr(e.message, "`reasoning_effort`"));
    /* harmony calls: parsed with tool_choice auto (even with reasoning_format
     * none: the calls are messages), never forced */
    if (parse(&env, "{" MSGS "," TOOLS ",\"reasoning_format\":\"none\"}", &g, &e) != 0) fail_msg("%s", e.message);
    assert_true(g.tool_calls);
    assert_int_equal(g.tool_fmt, TOOL_FORMAT_HARMONY);
    assert_int_equal(g.reasoning, REASONING_HARMONY);
    api_gen_free(&g);
    /* Qwen 3.5 (XML calls): forced by a grammar of its syntax */
    char *q35 = read_template("Qwen3.5-4B");
    if (q35 != NULL) {
        env.chat_template = q35;
        assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", &g, &e), 0);
        assert_int_equal(g.tool_fmt, TOOL_FORMAT_XML);
        assert_non_null(g.grammar);
        assert_non_null(strstr(g.grammar, "<function=w>"));
        assert_int_equal(g.reasoning, REASONING_THINK); /* the call after the reasoning */
        assert_true(g.reasoning_open);
        assert_non_null(strstr(g.grammar, "root ::= rsn-0 rsn-ws ans-root\n"));
        api_gen_free(&g);
        env.chat_template = oss;
        free(q35);
    }
    /* forced: the grammar of one harmony call, and the reply still split */
    assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", &g, &e), 0);
    assert_non_null(g.grammar);
    assert_non_null(strstr(g.grammar, "to=functions.w"));
    assert_int_equal(g.reasoning, REASONING_HARMONY);
    api_gen_free(&g);
    /* functionary v3.2: its framing is split whatever reasoning_format says,
     * not under a grammar from the first token, and always for forced calls */
    char *f32 = read_template("meetkai-functionary-medium-v3.2");
    if (f32 != NULL) {
        env.chat_template = f32;
        assert_int_equal(reasoning_of(&env, "{" MSGS ",\"reasoning_format\":\"none\"}"), REASONING_RECIPIENTS);
        assert_int_equal(reasoning_of(&env, "{" MSGS ",\"response_format\":{\"type\":\"json_object\"}}"), REASONING_NONE);
        assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", &g, &e), 0);
        assert_int_equal(g.tool_fmt, TOOL_FORMAT_RECIPIENTS);
        assert_int_equal(g.reasoning, REASONING_RECIPIENTS);
        assert_non_null(g.grammar);
        assert_non_null(strstr(g.grammar, "\"w\\n\""));
        api_gen_free(&g);
        free(f32);
    }
    /* firefunction v2's template reads `functions` and `datetime`: set from
     * the tools (its prompt grows with them), or by the request */
    char *fire = read_template("fireworks-ai-llama-3-firefunction-v2");
    if (fire != NULL) {
        env.chat_template = fire;
        assert_int_equal(parse(&env, "{" MSGS "}", &g, &e), 0);
        size_t n_plain = g.n_prompt;
        api_gen_free(&g);
        if (parse(&env, "{" MSGS "," TOOLS "}", &g, &e) != 0) fail_msg("%s", e.message);
        assert_true(g.n_prompt > n_plain + 10);
        assert_int_equal(g.tool_fmt, TOOL_FORMAT_FIREFUNCTION);
        api_gen_free(&g);
        assert_int_equal(parse(&env, "{" MSGS ",\"chat_template_kwargs\":{\"functions\":\"[]\"}}", &g, &e), 0);
        assert_true(g.n_prompt != n_plain);
        api_gen_free(&g);
        free(fire);
    }
    free(qwen);
    free(r1);
    free(oss);
}
ST_MODEL_TEST(test_parse)

/* --- through the server --- */

static char g_script[512];

typedef struct streamed {
    sbuf reasoning, content;
    int n_reasoning_after_content; /* reasoning deltas after a content delta */
    bool saw_content;
    int n_roles;
    char name[64];
    sbuf args;
    char finish[16];
} streamed;

static void gather(int port, const char *body, streamed *st)
{
    memset(st, 0, sizeof(*st));
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/chat/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("%s: %d %s", body, hr.status, hr.body);
    const char *p = hr.body;
    bool done = false;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (strncmp(p, "[DONE]", 6) == 0) {
            done = true;
            break;
        }
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        assert_non_null(ev);
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        if (json_object_get(d, "role") != NULL) st->n_roles++;
        json_t *r = json_object_get(d, "reasoning_content");
        if (json_is_string(r)) {
            if (st->saw_content) st->n_reasoning_after_content++;
            sbuf_append(&st->reasoning, json_string_value(r), json_string_length(r));
        }
        json_t *t = json_object_get(d, "content");
        if (json_is_string(t) && json_string_length(t) > 0) {
            st->saw_content = true;
            sbuf_append(&st->content, json_string_value(t), json_string_length(t));
        }
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        json_t *f = json_object_get(tc, "function");
        if (json_is_string(json_object_get(f, "name"))) {
            snprintf(st->name, sizeof(st->name), "%s", json_string_value(json_object_get(f, "name")));
        }
        json_t *a = json_object_get(f, "arguments");
        if (json_is_string(a)) sbuf_append(&st->args, json_string_value(a), json_string_length(a));
        json_t *fin = json_object_get(c, "finish_reason");
        if (json_is_string(fin)) snprintf(st->finish, sizeof(st->finish), "%s", json_string_value(fin));
        json_decref(ev);
    }
    assert_true(done);
    http_response_free(&hr);
}

static void streamed_free(streamed *s)
{
    sbuf_free(&s->reasoning);
    sbuf_free(&s->content);
    sbuf_free(&s->args);
}

typedef struct rcase {
    const char *output; /* what the model writes */
    const char *extra;  /* more request members, or "" */
    const char *reasoning; /* NULL: no reasoning_content */
    const char *content;   /* after lstrip; NULL: null */
    const char *call, *args; /* the one call, or NULL */
} rcase;

#define AN "<|channel|>analysis<|message|>"

static const rcase k_think[] = {
    {"<think>\nThe user adds.\n</think>\n\nIt is 4.", "", "The user adds.", "It is 4.", NULL, NULL},
    {"It is 4.", "", NULL, "It is 4.", NULL, NULL},
    {"<think>cut", "", "cut", "", NULL, NULL},
    {"<think>x</think>y", ",\"reasoning_format\":\"none\"", NULL, "<think>x</think>y", NULL, NULL},
    /* Qwen3's calls are Hermes calls after the reasoning */
    {"<think>Need w.</think>\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 1}}\n</tool_call>",
     "," TOOLS, "Need w.", NULL, "w", "{\"c\":1}"},
    /* under the server's grammar (what it allows: the fake engine does not
     * apply it) the reasoning is still split: a forced call, a JSON answer */
    {"<think>Need w.</think>\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
     "," TOOLS ",\"tool_choice\":\"required\"", "Need w.", NULL, "w", "{}"},
    {"<think>Sum.</think>\n\n{\"a\":4}", ",\"response_format\":{\"type\":\"json_object\"}", "Sum.",
     "{\"a\":4}", NULL, NULL},
    /* under a `grammar` as given, the output is the answer, whole */
    {"<think>x</think>y", ",\"grammar\":\"root ::= [a-z<>/]+\"", NULL, "<think>x</think>y", NULL, NULL},
};

static const rcase k_harmony[] = {
    {AN "Simple sum.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.", "", "Simple sum.",
     "It is 4.", NULL, NULL},
    {AN "Need w.<|end|><|start|>assistant<|channel|>commentary to=functions.w "
        "<|constrain|>json<|message|>{\"c\": 1}",
     "," TOOLS, "Need w.", NULL, "w", "{\"c\":1}"},
    /* forced: what the grammar allows (the fake engine does not apply it) */
    {AN "x<|end|><|start|>assistant<|channel|>commentary to=functions.w <|constrain|>json<|message|>{\"c\": 2}",
     "," TOOLS ",\"tool_choice\":\"required\"", "x", NULL, "w", "{\"c\":2}"},
    {AN "a<|end|><|start|>assistant<|channel|>final<|message|>b", ",\"reasoning_format\":\"none\"", NULL,
     AN "a<|end|><|start|>assistant<|channel|>final<|message|>b", NULL, NULL},
};

/* Qwen 3.5: the prompt opens the <think> block; calls in the XML syntax */
static const rcase k_qwen35[] = {
    {"Thinking.\n</think>\n\nHello.", "", "Thinking.", "Hello.", NULL, NULL},
    {"Call w.\n</think>\n\n<tool_call>\n<function=w>\n<parameter=c>\n1\n</parameter>\n"
     "<parameter=s>\nOslo\n</parameter>\n</function>\n</tool_call>",
     "," TOOLS, "Call w.", NULL, "w", "{\"c\":1,\"s\":\"Oslo\"}"},
    /* forced (the grammar is the engine's; the fake one writes the script):
     * the reasoning block, then the call */
    {"Call w.\n</think>\n\n<tool_call>\n<function=w>\n</function>\n</tool_call>",
     "," TOOLS ",\"tool_choice\":\"required\"", "Call w.", NULL, "w", "{}"},
};

/* functionary v3.1: <function=N>{...}</function> calls */
static const rcase k_func31[] = {
    {"Hello.", "", NULL, "Hello.", NULL, NULL},
    {"<function=w>{\"c\": 1}</function>", "," TOOLS, NULL, NULL, "w", "{\"c\":1}"},
    {"Checking.<function=w>{\"s\": \"Oslo\"}</function>", "," TOOLS, NULL, "Checking.", "w",
     "{\"s\":\"Oslo\"}"},
    {"<function=w>{}</function>", "," TOOLS ",\"tool_choice\":\"required\"", NULL, NULL, "w", "{}"},
};

/* functionary v3.2: messages after the prompt's ">>>"; the framing goes
 * whatever reasoning_format says */
static const rcase k_func32[] = {
    {"all\nHello.", "", NULL, "Hello.", NULL, NULL},
    {"all\nHello.", ",\"reasoning_format\":\"none\"", NULL, "Hello.", NULL, NULL},
    {"all\nChecking.\n>>>w\n{\"c\": 1}", "," TOOLS, NULL, "Checking.", "w", "{\"c\":1}"},
    {"w\n{}", "," TOOLS ",\"tool_choice\":\"required\"", NULL, NULL, "w", "{}"},
};

/* Ministral 3 Reasoning: [THINK]...[/THINK] (text tokens in this
 * vocabulary; control tokens in Ministral's own, kept as text by the
 * server: tests/serve/test_markers.c) */
static const rcase k_ministral[] = {
    {"[THINK]Let me see.[/THINK]It is 4.", "", "Let me see.", "It is 4.", NULL, NULL},
    {"[THINK]x[/THINK]y", ",\"reasoning_format\":\"none\"", NULL, "[THINK]x[/THINK]y", NULL, NULL},
};

/* firefunction v2: functools[...] */
static const rcase k_fire[] = {
    {"Hello.", "", NULL, "Hello.", NULL, NULL},
    {"functools[{\"name\": \"w\", \"arguments\": {\"c\": 1}}]", "," TOOLS, NULL, NULL, "w", "{\"c\":1}"},
};

static void check_case(int port, const rcase *rc)
{
    char body[2048];
    st_script(g_script, rc->output);
    snprintf(body, sizeof(body), "{" MSGS "%s,\"max_tokens\":400}", rc->extra);
    json_t *resp = st_post_chat(port, body);
    json_t *c = json_array_get(json_object_get(resp, "choices"), 0);
    json_t *m = json_object_get(c, "message");
    json_t *r = json_object_get(m, "reasoning_content");
    if (rc->reasoning == NULL) {
        if (r != NULL) fail_msg("%s: reasoning_content \"%s\"", rc->output, json_string_value(r));
    } else {
        assert_true(json_is_string(r));
        assert_string_equal(json_string_value(r), rc->reasoning);
    }
    json_t *content = json_object_get(m, "content");
    if (rc->content == NULL) {
        if (!json_is_null(content)) fail_msg("content \"%s\"", json_string_value(content));
    } else {
        assert_true(json_is_string(content));
        assert_string_equal(st_lstrip(json_string_value(content)), rc->content);
    }
    json_t *tc = json_array_get(json_object_get(m, "tool_calls"), 0);
    if (rc->call == NULL) {
        assert_null(tc);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    } else {
        json_t *f = json_object_get(tc, "function");
        assert_string_equal(json_string_value(json_object_get(f, "name")), rc->call);
        assert_string_equal(json_string_value(json_object_get(f, "arguments")), rc->args);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "tool_calls");
    }
    json_decref(resp);
    /* streamed: the same texts, reasoning first, one role */
    snprintf(body, sizeof(body), "{" MSGS "%s,\"max_tokens\":400,\"stream\":true}", rc->extra);
    streamed st;
    gather(port, body, &st);
    assert_string_equal(st.reasoning.data ? st.reasoning.data : "", rc->reasoning ? rc->reasoning : "");
    assert_string_equal(st_lstrip(st.content.data ? st.content.data : ""), rc->content ? rc->content : "");
    assert_int_equal(st.n_reasoning_after_content, 0);
    assert_int_equal(st.n_roles, 1);
    assert_string_equal(st.name, rc->call ? rc->call : "");
    assert_string_equal(st.args.data ? st.args.data : "", rc->args ? rc->args : "");
    assert_string_equal(st.finish, rc->call ? "tool_calls" : "stop");
    streamed_free(&st);
}

static int start(const char *tmpl_path, bool off, const char *tag, char *log, size_t cap)
{
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(log, cap, "%s/reasoning-%s-%d.log", dir, tag, (int)getpid());
    snprintf(port_file, sizeof(port_file), "%s/reasoning-port-%d", dir, (int)getpid());
    setenv("FAKE_ENGINE_SCRIPT", g_script, 1);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, "--ctx", "4096", "--chat-template-file", tmpl_path,
                          off ? "--reasoning-format" : NULL, "none", NULL};
    int port = st_spawn(argv, port_file, log, 1);
    unsetenv("FAKE_ENGINE_SCRIPT");
    return port;
}

static void test_through_the_server(void **state)
{
    (void)state;
    char qwen[4096], oss[4096], log[512];
    if (!template_path(qwen, sizeof(qwen), "Qwen-Qwen3-0.6B") ||
        !template_path(oss, sizeof(oss), "openai-gpt-oss-120b")) {
        print_message("skipped: chat templates missing\n");
        skip();
    }
    snprintf(g_script, sizeof(g_script), "%s/reasoning-script-%d", testdata_scratch_dir(), (int)getpid());
    st_script(g_script, "");
    int port = start(qwen, false, "qwen", log, sizeof(log));
    for (size_t i = 0; i < sizeof(k_think) / sizeof(k_think[0]); i++) check_case(port, &k_think[i]);
    st_stop(g_live_pid, log);
    port = start(oss, false, "oss", log, sizeof(log));
    for (size_t i = 0; i < sizeof(k_harmony) / sizeof(k_harmony[0]); i++) check_case(port, &k_harmony[i]);
    st_stop(g_live_pid, log);
    static const struct {
        const char *file, *tag;
        const rcase *cases;
        size_t n;
        const char *log_line;
    } more[] = {
#define CASES(file, tag, arr, line) {file, tag, arr, sizeof(arr) / sizeof(arr[0]), line}
        CASES("Qwen3.5-4B", "q35", k_qwen35, "tool calls in the qwen3-xml syntax; replies split: <think> blocks"),
        CASES("meetkai-functionary-medium-v3.1", "f31", k_func31, "tool calls in the functionary syntax; replies split: none"),
        CASES("mistralai-Ministral-3-14B-Reasoning-2512", "mini", k_ministral,
              "tool calls in the mistral syntax; replies split: [THINK] blocks"),
        CASES("fireworks-ai-llama-3-firefunction-v2", "fire", k_fire, "tool calls in the firefunction syntax"),
        CASES("meetkai-functionary-medium-v3.2", "f32", k_func32,
              "tool calls in the functionary-v3.2 syntax; replies split: >>> recipients"),
#undef CASES
    };
    for (size_t t = 0; t < sizeof(more) / sizeof(more[0]); t++) {
        char path[4096];
        if (!template_path(path, sizeof(path), more[t].file)) continue;
        port = start(path, false, more[t].tag, log, sizeof(log));
        for (size_t i = 0; i < more[t].n; i++) check_case(port, &more[t].cases[i]);
        st_stop(g_live_pid, log);
        /* the start-up log names what the server makes of the template */
        size_t n_log = 0;
        char *raw = testdata_read_file(log, &n_log);
        assert_non_null(raw);
        char *text = strndup(raw, n_log);
        free(raw);
        if (strstr(text, more[t].log_line) == NULL) fail_msg("%s: no '%s' in the log", more[t].file, more[t].log_line);
        free(text);
    }
    /* --reasoning-format none: whole, unless a request asks */
    port = start(qwen, true, "off", log, sizeof(log));
    const rcase whole = {"<think>x</think>y", "", NULL, "<think>x</think>y", NULL, NULL};
    check_case(port, &whole);
    const rcase asked = {"<think>x</think>y", ",\"reasoning_format\":\"auto\"", "x", "y", NULL, NULL};
    check_case(port, &asked);
    st_stop(g_live_pid, log);
    unlink(g_script);
}
ST_MODEL_TEST(test_through_the_server)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_guard),
        cmocka_unit_test_teardown(test_through_the_server_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
