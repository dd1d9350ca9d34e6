/* Structured output through the API: OpenAI's `response_format`
 * (json_object, json_schema) and llama-server's `grammar` and `json_schema`
 * become the `grammar` of the engine's `gen` line (checked on the parsed
 * request, on the encoded line, and in the fake engine's log through a real
 * `strata serve`), for completions and chat, every choice; bad schemas and
 * two sources at once are 400 `invalid_request_error` naming the keyword's
 * path. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
#include "serve/json_schema.h"
#include "serve/request.h"
#include "serve/wire.h"
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

#define SCHEMA "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":" \
               "{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\"]}"

static char *compiled(const char *schema)
{
    json_t *s = json_loads(schema, 0, NULL);
    assert_non_null(s);
    char *g = NULL;
    strata_err err;
    assert_int_equal(json_schema_to_gbnf(s, &g, &err), 0);
    json_decref(s);
    return g;
}

typedef struct form {
    enum api_kind kind;
    const char *fields; /* JSON members */
    const char *schema; /* the schema it compiles, or NULL */
    const char *gbnf;   /* or the grammar passed through */
    const char *regex;  /* or the regular expression it compiles */
    const char *choice; /* or the choices (a JSON array); none: any object */
} form;

static const form k_forms[] = {
    {API_CHAT, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\","
               "\"schema\":" SCHEMA ",\"strict\":true}}", SCHEMA, NULL},
    {API_COMPLETION, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\","
                     "\"schema\":" SCHEMA "}}", SCHEMA, NULL},
    {API_CHAT, "\"response_format\":{\"type\":\"json_object\"}", NULL, NULL},
    {API_COMPLETION, "\"response_format\":{\"type\":\"json_object\",\"schema\":" SCHEMA "}", SCHEMA, NULL},
    {API_CHAT, "\"json_schema\":" SCHEMA, SCHEMA, NULL},
    {API_COMPLETION, "\"json_schema\":" SCHEMA, SCHEMA, NULL},
    {API_COMPLETION, "\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\\n\"", NULL, "root ::= \"yes\" | \"no\"\n"},
    {API_CHAT, "\"grammar\":\"root ::= [a-z]+\"", NULL, "root ::= [a-z]+"},
    /* vLLM's forms */
    {API_CHAT, "\"guided_json\":" SCHEMA, SCHEMA, NULL},
    {API_COMPLETION, "\"guided_json\":\"{\\\"type\\\":\\\"integer\\\"}\"", "{\"type\":\"integer\"}", NULL},
    {API_COMPLETION, "\"guided_regex\":\"[a-z]+@\\\\d\",\"guided_decoding_backend\":\"xgrammar\"", NULL, NULL,
     "[a-z]+@\\d"},
    {API_CHAT, "\"guided_choice\":[\"yes\",\"no\"]", NULL, NULL, NULL, "[\"yes\",\"no\"]"},
    {API_COMPLETION, "\"guided_grammar\":\"root ::= [0-9]+\"", NULL, "root ::= [0-9]+"},
    {API_CHAT, "\"structured_outputs\":{\"json\":" SCHEMA ",\"disable_any_whitespace\":true}", SCHEMA, NULL},
    {API_COMPLETION, "\"structured_outputs\":{\"regex\":\"(a|b)c\"}", NULL, NULL, "(a|b)c"},
    {API_COMPLETION, "\"structured_outputs\":{\"choice\":[\"x\"]}", NULL, NULL, NULL, "[\"x\"]"},
    {API_CHAT, "\"structured_outputs\":{\"grammar\":\"root ::= \\\"z\\\"\"}", NULL, "root ::= \"z\""},
    {API_CHAT, "\"structured_outputs\":{\"json_object\":true}", NULL, NULL},
};

static char *want_of(const form *f)
{
    if (f->gbnf) return strdup(f->gbnf);
    if (f->schema) return compiled(f->schema);
    char *g = NULL;
    strata_err err;
    if (f->regex) {
        assert_int_equal(json_schema_regex_to_gbnf(f->regex, strlen(f->regex), "r", &g, &err), 0);
        return g;
    }
    if (f->choice) {
        json_t *c = json_loads(f->choice, 0, NULL);
        assert_int_equal(json_schema_choice_to_gbnf(c, "c", &g, &err), 0);
        json_decref(c);
        return g;
    }
    return json_schema_any_object_gbnf();
}

static void body_of(char *out, size_t cap, enum api_kind kind, const char *more)
{
    const char *base = kind == API_COMPLETION ? "\"prompt\":\"Hi\",\"max_tokens\":2"
                                              : "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                                                "\"max_tokens\":2";
    snprintf(out, cap, "{%s%s%s}", base, more[0] ? "," : "", more);
}

static void test_parse_forms(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    char body[2048];
    for (size_t i = 0; i < sizeof(k_forms) / sizeof(k_forms[0]); i++) {
        const form *f = &k_forms[i];
        char more[1600];
        snprintf(more, sizeof(more), "%s,\"n\":2", f->fields);
        body_of(body, sizeof(body), f->kind, more);
        api_gen g;
        api_error e;
        if (api_parse_gen(&env, f->kind, body, strlen(body), &g, &e) != 0) {
            fail_msg("%s: %d %s", body, e.status, e.message);
        }
        char *want = want_of(f);
        if (g.grammar == NULL) fail_msg("%s: no grammar", body);
        assert_string_equal(g.grammar, want);
        for (size_t c = 0; c < 2; c++) { /* every choice carries it */
            sreq *r = sreq_new(1, false);
            assert_int_equal(api_gen_copy_to(&g, c, r), 0);
            assert_string_equal(r->gen.grammar, want);
            char *line = wire_encode_request(r, 5);
            assert_non_null(line);
            json_t *j = json_loads(line, 0, NULL);
            assert_string_equal(json_string_value(json_object_get(j, "grammar")), want);
            json_decref(j);
            free(line);
            sreq_release(r);
        }
        sreq *r = sreq_new(1, false);
        api_gen_move_to(&g, r);
        assert_string_equal(r->gen.grammar, want);
        assert_null(g.grammar);
        sreq_release(r);
        api_gen_free(&g);
        free(want);
    }
    /* none: no grammar on the line */
    const char *plain[] = {"{\"prompt\":\"Hi\"}", "{\"prompt\":\"Hi\",\"response_format\":{\"type\":\"text\"}}",
                           "{\"prompt\":\"Hi\",\"grammar\":\"\",\"json_schema\":null}"};
    for (size_t k = 0; k < 3; k++) {
        api_gen g;
        api_error e;
        assert_int_equal(api_parse_gen(&env, API_COMPLETION, plain[k], strlen(plain[k]), &g, &e), 0);
        assert_null(g.grammar);
        sreq *r = sreq_new(1, false);
        api_gen_move_to(&g, r);
        char *line = wire_encode_request(r, 6);
        assert_null(strstr(line, "\"grammar\""));
        free(line);
        sreq_release(r);
        api_gen_free(&g);
    }
}
ST_MODEL_TEST(test_parse_forms)

typedef struct bad_case {
    enum api_kind kind;
    const char *fields;
    const char *needle; /* in the message */
} bad_case;

static const bad_case k_bad[] = {
    {API_CHAT, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":"
               "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"multipleOf\":2}}}}}",
     "`multipleOf` at /properties/age/multipleOf"},
    {API_COMPLETION, "\"json_schema\":{\"type\":\"string\",\"pattern\":\"^(?=a)$\"}", "/pattern"},
    {API_CHAT, "\"json_schema\":{\"$ref\":\"#/$defs/nope\"}", "/$ref"},
    {API_CHAT, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\"}}",
     "response_format.json_schema.schema"},
    {API_CHAT, "\"response_format\":{\"type\":\"json_schema\"}", "response_format.json_schema"},
    {API_CHAT, "\"response_format\":{\"type\":\"yaml\"}", "response_format.type"},
    {API_CHAT, "\"response_format\":\"json\"", "response_format"},
    {API_COMPLETION, "\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}",
     "`grammar` and `response_format`"},
    {API_CHAT, "\"json_schema\":{},\"response_format\":{\"type\":\"json_object\"}",
     "`json_schema` and `response_format`"},
    {API_COMPLETION, "\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}", "`grammar` and `json_schema`"},
    {API_COMPLETION, "\"grammar\":5", "`grammar`"},
    {API_COMPLETION, "\"json_schema\":[1]", "`json_schema`"},
    {API_COMPLETION, "\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]", "more than one of vLLM's"},
    {API_COMPLETION, "\"guided_regex\":\"a\",\"structured_outputs\":{\"regex\":\"a\"}", "more than one of vLLM's"},
    {API_COMPLETION, "\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"a\"]}", "more than one of vLLM's"},
    {API_CHAT, "\"guided_json\":{},\"response_format\":{\"type\":\"json_object\"}",
     "`response_format` and `guided_json`"},
    {API_COMPLETION, "\"grammar\":\"root ::= \\\"a\\\"\",\"structured_outputs\":{\"json_object\":true}",
     "`grammar` and `structured_outputs`"},
    {API_COMPLETION, "\"guided_json\":\"{not json\"", "`guided_json` is a string but not JSON"},
    {API_COMPLETION, "\"guided_json\":{\"type\":\"string\",\"not\":{}}", "`not`"},
    {API_COMPLETION, "\"guided_regex\":\"(?=a)\"", "`guided_regex`: lookarounds"},
    {API_COMPLETION, "\"guided_regex\":5", "`guided_regex` must be a string"},
    {API_COMPLETION, "\"structured_outputs\":{\"regex\":\"a(b\"}", "`structured_outputs.regex`: an unclosed ("},
    {API_COMPLETION, "\"guided_choice\":[]", "`guided_choice` must be a non-empty array"},
    {API_COMPLETION, "\"guided_choice\":[\"a\",2]", "`guided_choice[1]`"},
    {API_COMPLETION, "\"structured_outputs\":[1]", "`structured_outputs` must be an object"},
    {API_COMPLETION, "\"structured_outputs\":{\"structural_tag\":{}}", "`structured_outputs.structural_tag`"},
    {API_COMPLETION, "\"structured_outputs\":{\"regex\":\"a\",\"whitespace_pattern\":\" \"}",
     "`structured_outputs.whitespace_pattern`"},
    {API_COMPLETION, "\"structured_outputs\":{\"json_object\":1}", "`structured_outputs.json_object`"},
    {API_COMPLETION, "\"guided_json\":{},\"guided_whitespace_pattern\":\" *\"", "`guided_whitespace_pattern`"},
};

static void test_parse_errors(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    char body[2048];
    for (size_t i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
        body_of(body, sizeof(body), k_bad[i].kind, k_bad[i].fields);
        api_gen g;
        api_error e;
        if (api_parse_gen(&env, k_bad[i].kind, body, strlen(body), &g, &e) == 0) {
            api_gen_free(&g);
            fail_msg("%s was accepted", body);
        }
        if (e.status != 400 || strcmp(e.type, "invalid_request_error") != 0 ||
            strstr(e.message, k_bad[i].needle) == NULL) {
            fail_msg("%s: %d %s %s (want `%s`)", body, e.status, e.type, e.message, k_bad[i].needle);
        }
    }
}
ST_MODEL_TEST(test_parse_errors)

/* Every `grammar ` line of the fake engine's log, unescaped, in order. */
static size_t read_grammars(const char *log, char **out, size_t cap)
{
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    size_t n = 0;
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0 && n < cap) {
        if (strncmp(line, "grammar ", 8) != 0) continue;
        char *s = malloc(strlen(line) + 1), *d = s;
        for (const char *p = line + 8; *p && *p != '\n'; p++) {
            if (p[0] == '\\' && p[1] == 'n') { *d++ = '\n'; p++; }
            else if (p[0] == '\\' && p[1] == '\\') { *d++ = '\\'; p++; }
            else *d++ = *p;
        }
        *d = '\0';
        out[n++] = s;
    }
    free(line);
    fclose(f);
    return n;
}

static void test_through_the_server(void **state)
{
    (void)state;
    const char *dir = testdata_scratch_dir();
    char log[512], elog[512], port_file[512];
    snprintf(log, sizeof(log), "%s/structured-serve-%d.log", dir, (int)getpid());
    snprintf(elog, sizeof(elog), "%s/structured-engine-%d.log", dir, (int)getpid());
    snprintf(port_file, sizeof(port_file), "%s/structured-port-%d", dir, (int)getpid());
    unlink(elog);
    setenv("FAKE_ENGINE_LOG", elog, 1);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, NULL};
    int port = st_spawn(argv, port_file, log, 1);
    unsetenv("FAKE_ENGINE_LOG");
    char body[2048];
    size_t n_forms = sizeof(k_forms) / sizeof(k_forms[0]);
    for (size_t i = 0; i < n_forms; i++) {
        const form *f = &k_forms[i];
        char more[1600];
        snprintf(more, sizeof(more), "%s,\"stream\":%s", f->fields, i % 2 ? "true" : "false");
        body_of(body, sizeof(body), f->kind, more);
        http_response hr;
        const char *path = f->kind == API_CHAT ? "/v1/chat/completions" : "/v1/completions";
        assert_int_equal(http_do(port, "POST", path, body, NULL, &hr), 0);
        if (hr.status != 200) fail_msg("%s: %d %s", body, hr.status, hr.body);
        http_response_free(&hr);
    }
    for (size_t i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
        body_of(body, sizeof(body), k_bad[i].kind, k_bad[i].fields);
        http_response hr;
        const char *path = k_bad[i].kind == API_CHAT ? "/v1/chat/completions" : "/v1/completions";
        assert_int_equal(http_do(port, "POST", path, body, NULL, &hr), 0);
        json_t *j = json_loads(hr.body, 0, NULL);
        json_t *e = json_object_get(j, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *type = json_string_value(json_object_get(e, "type"));
        if (hr.status != 400 || msg == NULL || strstr(msg, k_bad[i].needle) == NULL || type == NULL ||
            strcmp(type, "invalid_request_error") != 0) {
            fail_msg("%s: %d %s", body, hr.status, hr.body);
        }
        json_decref(j);
        http_response_free(&hr);
    }
    st_stop(g_live_pid, log);
    char *got[32];
    size_t n = read_grammars(elog, got, 32);
    assert_int_equal(n, n_forms);
    for (size_t i = 0; i < n; i++) {
        char *want = want_of(&k_forms[i]);
        assert_string_equal(got[i], want);
        free(want);
        free(got[i]);
    }
}
ST_MODEL_TEST(test_through_the_server)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms_guard),
        cmocka_unit_test(test_parse_errors_guard),
        cmocka_unit_test_teardown(test_through_the_server_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
