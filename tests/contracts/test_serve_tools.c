/* Tool calls through the API: `tools`, `tool_choice` and
 * `parallel_tool_calls` on the parsed request (the grammar a forcing
 * choice puts on the engine's `gen`, the tools the template renders, the
 * errors, each a 400 naming the field), then a real `strata serve` over the
 * fake engine with scripted output (FAKE_ENGINE_SCRIPT): a call becomes
 * `message.tool_calls` with finish_reason "tool_calls", streamed as
 * OpenAI's tool_calls deltas with no call text in a content delta; text
 * before a call is the content; a cut or malformed call is left as
 * content; with tool_choice "none" nothing is parsed; usage counts every
 * token. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
#include "serve/request.h"
#include "serve/tool_calls.h"
#include "serve/wire.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

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

#define PARAMS "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":" \
               "[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"]}"
#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":" \
              "\"Weather of a city\",\"parameters\":" PARAMS "}},{\"type\":\"function\",\"function\":" \
              "{\"name\":\"ping\"}}]"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]"

static char *read_template(const char *name)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof(rel), "chat-templates/llama.cpp-jinja/%s.jinja", name);
    if (testdata_path(path, sizeof(path), rel) == NULL) return NULL;
    size_t n;
    char *raw = testdata_read_file(path, &n);
    char *t = raw ? strndup(raw, n) : NULL; /* the API takes a C string */
    free(raw);
    return t;
}

static int parse(const api_env *env, const char *body, api_gen *g, api_error *e)
{
    return api_parse_gen(env, API_CHAT, body, strlen(body), g, e);
}

static char *want_grammar(tool_format f, bool both, bool parallel)
{
    json_t *p = json_loads(PARAMS, 0, NULL);
    tool_decl d[2] = {{"get_weather", p}, {"ping", NULL}};
    char *g = NULL;
    strata_err err;
    assert_int_equal(tool_calls_grammar(f, both ? d : d, both ? 2 : 1, parallel, &g, &err), 0);
    json_decref(p);
    return g;
}

static void test_parse_choices(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 4096};
    api_gen g;
    api_error e;
    /* required: both tools, several calls; parallel false: one */
    const char *req = "{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}";
    assert_int_equal(parse(&env, req, &g, &e), 0);
    assert_true(g.tool_calls);
    char *want = want_grammar(TOOL_FORMAT_HERMES, true, true);
    assert_string_equal(g.grammar, want);
    free(want);
    /* the grammar goes on the gen line */
    sreq *r = sreq_new(1, false);
    api_gen_move_to(&g, r);
    char *line = wire_encode_request(r, 3);
    json_t *j = json_loads(line, 0, NULL);
    assert_non_null(json_string_value(json_object_get(j, "grammar")));
    json_decref(j);
    free(line);
    sreq_release(r);
    api_gen_free(&g);
    const char *one = "{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false}";
    assert_int_equal(parse(&env, one, &g, &e), 0);
    want = want_grammar(TOOL_FORMAT_HERMES, true, false);
    assert_string_equal(g.grammar, want);
    free(want);
    api_gen_free(&g);
    /* a named function: that one only, once */
    const char *named = "{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}";
    assert_int_equal(parse(&env, named, &g, &e), 0);
    want = want_grammar(TOOL_FORMAT_HERMES, false, false);
    assert_string_equal(g.grammar, want);
    free(want);
    api_gen_free(&g);
    /* auto (the default with tools): parsed, not constrained */
    const char *autos[] = {"{" MSGS "," TOOLS "}", "{" MSGS "," TOOLS ",\"tool_choice\":\"auto\"}"};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(parse(&env, autos[i], &g, &e), 0);
        assert_true(g.tool_calls);
        assert_null(g.grammar);
        api_gen_free(&g);
    }
    /* auto with a response_format: the reply is that format's, not parsed */
    assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"response_format\":{\"type\":\"json_object\"}}", &g, &e), 0);
    assert_false(g.tool_calls);
    assert_non_null(g.grammar);
    api_gen_free(&g);
    /* none: nothing parsed or forced */
    assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", &g, &e), 0);
    assert_false(g.tool_calls);
    assert_null(g.grammar);
    api_gen_free(&g);
    /* a template that renders tools sees them (also with none), and the
     * family sets the syntax */
    char *qwen = read_template("Qwen-Qwen2.5-7B-Instruct");
    char *llama = read_template("meta-llama-Llama-3.1-8B-Instruct");
    assert_non_null(qwen);
    assert_non_null(llama);
    env.chat_template = qwen;
    assert_int_equal(parse(&env, "{" MSGS "}", &g, &e), 0);
    size_t n_plain = g.n_prompt;
    api_gen_free(&g);
    assert_int_equal(parse(&env, "{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", &g, &e), 0);
    assert_true(g.n_prompt > n_plain + 20);
    api_gen_free(&g);
    env.chat_template = llama;
    assert_int_equal(parse(&env, req, &g, &e), 0);
    assert_int_equal(g.tool_fmt, TOOL_FORMAT_LLAMA3);
    want = want_grammar(TOOL_FORMAT_LLAMA3, true, true);
    assert_string_equal(g.grammar, want);
    free(want);
    api_gen_free(&g);
    /* a round trip: the call's arguments (a JSON string) and the tool's
     * answer render */
    const char *trip = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\","
                       "\"content\":null,\"tool_calls\":[{\"id\":\"abcdefghi\",\"type\":\"function\",\"function\":"
                       "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":"
                       "\"tool\",\"tool_call_id\":\"abcdefghi\",\"content\":\"18 C\"}]," TOOLS "}";
    env.chat_template = qwen;
    assert_int_equal(parse(&env, trip, &g, &e), 0);
    char *text = NULL;
    size_t n_text = 0;
    strata_err err;
    assert_int_equal(tok_detokenize_alloc(g_voc, g.prompt, g.n_prompt, 0, &text, &n_text, &err), 0);
    assert_non_null(strstr(text, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));
    assert_non_null(strstr(text, "<tool_response>\n18 C\n</tool_response>"));
    free(text);
    api_gen_free(&g);
    free(qwen);
    free(llama);
}
ST_MODEL_TEST(test_parse_choices)

typedef struct bad_case {
    const char *tmpl;   /* a template of the data, or NULL: ChatML */
    const char *body;
    const char *needle; /* in the message */
} bad_case;

static const bad_case k_bad[] = {
    {NULL, "{" MSGS ",\"tools\":{}}", "`tools` must be an array"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"code\"}]}", "`tools[0].type`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\"}]}", "`tools[0].function`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", "`tools[0].function.name`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "`tools[0].function.name`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]}",
     "`tools[0].function.parameters`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"description\":1}}]}",
     "`tools[0].function.description`"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\","
           "\"function\":{\"name\":\"a\"}}]}", "declared twice"},
    {NULL, "{" MSGS "," TOOLS ",\"tool_choice\":\"always\"}", "`tool_choice`"},
    {NULL, "{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
     "\"nope\", which `tools` does not declare"},
    {NULL, "{" MSGS ",\"tool_choice\":\"required\"}", "needs `tools`"},
    {NULL, "{" MSGS "," TOOLS ",\"parallel_tool_calls\":\"yes\"}", "`parallel_tool_calls`"},
    {NULL, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
     "cannot both be set"},
    {NULL, "{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"calc\",\"parameters\":"
           "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":3}}}}}],"
           "\"tool_choice\":\"required\"}", "(`calc`) parameters: unsupported JSON Schema keyword `multipleOf`"},
    {NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
           "\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
           "\"{city: Paris}\"}}]}]}", "`messages[1].tool_calls[0].function.arguments` is not JSON"},
    {NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
           "\"tool_calls\":[{\"id\":\"x\"}]}]}", "`messages[1].tool_calls[0]`"},
    {"GLM-4.6", "{" MSGS "," TOOLS "}", "`glm` syntax"},
};

static void test_parse_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
        char *tmpl = k_bad[i].tmpl ? read_template(k_bad[i].tmpl) : NULL;
        if (k_bad[i].tmpl != NULL) assert_non_null(tmpl);
        api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 4096, .chat_template = tmpl};
        api_gen g;
        api_error e;
        if (parse(&env, k_bad[i].body, &g, &e) == 0) {
            api_gen_free(&g);
            fail_msg("%s was accepted", k_bad[i].body);
        }
        if (e.status != 400 || strcmp(e.type, "invalid_request_error") != 0 ||
            strstr(e.message, k_bad[i].needle) == NULL) {
            fail_msg("%s: %d %s %s (want `%s`)", k_bad[i].body, e.status, e.type, e.message, k_bad[i].needle);
        }
        free(tmpl);
    }
    /* /v1/completions has no tools */
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 4096};
    api_gen g;
    api_error e;
    const char *b = "{\"prompt\":\"Hi\"," TOOLS "}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), -1);
    assert_non_null(strstr(e.message, "`tools`"));
}
ST_MODEL_TEST(test_parse_errors)

/* --- through the server --- */

static char g_script[512];

/* What a stream carried for choice 0. */
typedef struct streamed {
    sbuf content;
    int n_calls;
    char id[3][16], name[3][64];
    sbuf args[3];
    int first_deltas; /* deltas that opened a call (with id and name) */
    char finish[16];
    int n_finish;
    json_t *usage;
    bool done;
} streamed;

static void streamed_free(streamed *s)
{
    sbuf_free(&s->content);
    for (int i = 0; i < 3; i++) sbuf_free(&s->args[i]);
    json_decref(s->usage);
}

static void gather(int port, const char *body, streamed *st)
{
    memset(st, 0, sizeof(*st));
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/chat/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("%s: %d %s", body, hr.status, hr.body);
    const char *p = hr.body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (strncmp(p, "[DONE]", 6) == 0) {
            st->done = true;
            break;
        }
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        assert_non_null(ev);
        if (json_object_get(ev, "usage") != NULL) st->usage = json_incref(json_object_get(ev, "usage"));
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        json_t *t = json_object_get(d, "content");
        if (json_is_string(t)) sbuf_append(&st->content, json_string_value(t), json_string_length(t));
        json_t *tcs = json_object_get(d, "tool_calls");
        size_t k;
        json_t *tc;
        json_array_foreach(tcs, k, tc) {
            json_int_t idx = json_integer_value(json_object_get(tc, "index"));
            assert_true(idx >= 0 && idx < 3);
            json_t *f = json_object_get(tc, "function");
            if (json_object_get(tc, "id") != NULL) {
                /* the opening delta: id, type, name, empty arguments */
                assert_int_equal(idx, st->n_calls);
                st->first_deltas++;
                snprintf(st->id[idx], sizeof(st->id[idx]), "%s", json_string_value(json_object_get(tc, "id")));
                assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
                snprintf(st->name[idx], sizeof(st->name[idx]), "%s", json_string_value(json_object_get(f, "name")));
                assert_string_equal(json_string_value(json_object_get(f, "arguments")), "");
                st->n_calls++;
            } else {
                assert_true(idx < st->n_calls);
                assert_null(json_object_get(f, "name"));
            }
            json_t *a = json_object_get(f, "arguments");
            assert_true(json_is_string(a));
            sbuf_append(&st->args[idx], json_string_value(a), json_string_length(a));
        }
        json_t *fin = json_object_get(c, "finish_reason");
        if (json_is_string(fin)) {
            st->n_finish++;
            snprintf(st->finish, sizeof(st->finish), "%s", json_string_value(fin));
        }
        json_decref(ev);
    }
    http_response_free(&hr);
}

static void assert_args(const char *args, const char *want_json)
{
    json_t *a = json_loads(args, 0, NULL), *w = json_loads(want_json, 0, NULL);
    if (a == NULL || !json_equal(a, w)) fail_msg("arguments %s, want %s", args, want_json);
    json_decref(a);
    json_decref(w);
}

typedef struct out_case {
    const char *output;     /* what the model writes */
    const char *choice;     /* the tool_choice member, or "" */
    const char *content;    /* content after lstrip; NULL: null */
    int n_calls;
    const char *name0, *args0, *name1, *args1;
} out_case;

#define CALL(n, a) "<tool_call>\n{\"name\": \"" n "\", \"arguments\": " a "}\n</tool_call>"

static const out_case k_out[] = {
    {CALL("get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}"), "", NULL, 1, "get_weather",
     "{\"city\":\"Paris\",\"unit\":\"celsius\"}", NULL, NULL},
    {"Let me check. " CALL("get_weather", "{\"city\": \"Oslo\"}") "\n" CALL("ping", "{}"),
     ",\"tool_choice\":\"auto\"", "Let me check. ", 2, "get_weather", "{\"city\":\"Oslo\"}", "ping", "{}"},
    /* cut short, or malformed: all content */
    {"Sure <tool_call>\n{\"name\": \"get_weather\", \"argum", "", "Sure <tool_call>\n{\"name\": \"get_weather\", \"argum", 0,
     NULL, NULL, NULL, NULL},
    {"<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>", "",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>", 0, NULL, NULL, NULL, NULL},
    /* none: not parsed */
    {CALL("ping", "{}"), ",\"tool_choice\":\"none\"", CALL("ping", "{}"), 0, NULL, NULL, NULL, NULL},
    /* plain text with a '<' that starts no call */
    {"A <b> and < c", "", "A <b> and < c", 0, NULL, NULL, NULL, NULL},
};

static void check_message(const out_case *oc, json_t *resp)
{
    json_t *c = json_array_get(json_object_get(resp, "choices"), 0);
    json_t *m = json_object_get(c, "message");
    const char *fin = json_string_value(json_object_get(c, "finish_reason"));
    json_t *content = json_object_get(m, "content");
    json_t *tcs = json_object_get(m, "tool_calls");
    if (oc->content == NULL) {
        assert_true(json_is_null(content));
    } else {
        assert_true(json_is_string(content));
        assert_string_equal(st_lstrip(json_string_value(content)), oc->content);
    }
    if (oc->n_calls == 0) {
        assert_null(tcs);
        assert_string_equal(fin, "stop");
        return;
    }
    assert_string_equal(fin, "tool_calls");
    assert_int_equal(json_array_size(tcs), oc->n_calls);
    for (int k = 0; k < oc->n_calls; k++) {
        json_t *tc = json_array_get(tcs, (size_t)k);
        const char *id = json_string_value(json_object_get(tc, "id"));
        assert_non_null(id);
        assert_int_equal(strlen(id), 9);
        assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
        json_t *f = json_object_get(tc, "function");
        assert_string_equal(json_string_value(json_object_get(f, "name")), k ? oc->name1 : oc->name0);
        assert_args(json_string_value(json_object_get(f, "arguments")), k ? oc->args1 : oc->args0);
    }
    /* usage counts every generated token, the call's included */
    json_t *u = json_object_get(resp, "usage"), *t = json_object_get(resp, "timings");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")),
                     json_integer_value(json_object_get(t, "predicted_n")));
    assert_true(json_integer_value(json_object_get(u, "completion_tokens")) > 10);
}

static void check_stream(const out_case *oc, streamed *st)
{
    assert_true(st->done);
    assert_int_equal(st->n_finish, 1);
    /* no call text in any content delta */
    if (oc->n_calls > 0) assert_null(strstr(st->content.data ? st->content.data : "", "<tool_call>"));
    const char *content = st->content.data ? st->content.data : "";
    assert_string_equal(st_lstrip(content), oc->content ? oc->content : "");
    assert_int_equal(st->n_calls, oc->n_calls);
    assert_int_equal(st->first_deltas, oc->n_calls);
    assert_string_equal(st->finish, oc->n_calls ? "tool_calls" : "stop");
    for (int k = 0; k < oc->n_calls; k++) {
        assert_int_equal(strlen(st->id[k]), 9);
        assert_string_equal(st->name[k], k ? oc->name1 : oc->name0);
        assert_args(st->args[k].data, k ? oc->args1 : oc->args0);
    }
    assert_non_null(st->usage);
    assert_true(json_integer_value(json_object_get(st->usage, "completion_tokens")) > 3);
}

static void test_through_the_server(void **state)
{
    (void)state;
    const char *dir = testdata_scratch_dir();
    char log[512], elog[512], port_file[512];
    snprintf(log, sizeof(log), "%s/tools-serve-%d.log", dir, (int)getpid());
    snprintf(elog, sizeof(elog), "%s/tools-engine-%d.log", dir, (int)getpid());
    snprintf(port_file, sizeof(port_file), "%s/tools-port-%d", dir, (int)getpid());
    snprintf(g_script, sizeof(g_script), "%s/tools-script-%d", dir, (int)getpid());
    unlink(elog);
    st_script(g_script, "");
    setenv("FAKE_ENGINE_LOG", elog, 1);
    setenv("FAKE_ENGINE_SCRIPT", g_script, 1);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, NULL};
    int port = st_spawn(argv, port_file, log, 1);
    unsetenv("FAKE_ENGINE_LOG");
    unsetenv("FAKE_ENGINE_SCRIPT");
    char body[4096];
    for (size_t i = 0; i < sizeof(k_out) / sizeof(k_out[0]); i++) {
        const out_case *oc = &k_out[i];
        st_script(g_script, oc->output);
        snprintf(body, sizeof(body), "{" MSGS "," TOOLS "%s,\"max_tokens\":400}", oc->choice);
        json_t *resp = st_post_chat(port, body);
        check_message(oc, resp);
        json_decref(resp);
        snprintf(body, sizeof(body), "{" MSGS "," TOOLS "%s,\"max_tokens\":400,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}", oc->choice);
        streamed st;
        gather(port, body, &st);
        check_stream(oc, &st);
        streamed_free(&st);
    }
    /* n choices: each its own calls, every id distinct */
    st_script(g_script, CALL("ping", "{}"));
    json_t *resp = st_post_chat(port, "{" MSGS "," TOOLS ",\"n\":3,\"max_tokens\":400}");
    json_t *chs = json_object_get(resp, "choices");
    assert_int_equal(json_array_size(chs), 3);
    const char *ids[3];
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(chs, i);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "tool_calls");
        json_t *tc = json_array_get(json_object_get(json_object_get(c, "message"), "tool_calls"), 0);
        ids[i] = json_string_value(json_object_get(tc, "id"));
        assert_non_null(ids[i]);
        for (size_t k = 0; k < i; k++) assert_string_not_equal(ids[i], ids[k]);
    }
    json_decref(resp);
    /* a call cut by max_tokens is content, with finish_reason length */
    st_script(g_script, CALL("get_weather", "{\"city\": \"Paris\"}"));
    resp = st_post_chat(port, "{" MSGS "," TOOLS ",\"max_tokens\":5}");
    json_t *c = json_array_get(json_object_get(resp, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    assert_null(json_object_get(json_object_get(c, "message"), "tool_calls"));
    json_decref(resp);
    /* required puts the forcing grammar on the gen line */
    st_script(g_script, CALL("ping", "{}"));
    resp = st_post_chat(port, "{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"max_tokens\":400}");
    json_decref(resp);
    st_stop(g_live_pid, log);
    FILE *f = fopen(elog, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    int n_grammar = 0;
    while (getline(&line, &cap, f) > 0) {
        if (strncmp(line, "grammar ", 8) == 0) {
            n_grammar++;
            assert_non_null(strstr(line, "root ::= \"\" call (\"\\\\n\" call)*"));
            assert_non_null(strstr(line, "get_weather"));
        }
    }
    free(line);
    fclose(f);
    assert_int_equal(n_grammar, 1);
    unlink(g_script);
}
ST_MODEL_TEST(test_through_the_server)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_choices_guard),
        cmocka_unit_test(test_parse_errors_guard),
        cmocka_unit_test_teardown(test_through_the_server_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
