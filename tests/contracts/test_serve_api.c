/* The HTTP API's statuses for engine failures and the embeddings'
 * `encoding_format`: an engine's `err` or an engine that sends what the
 * server cannot use is the engine's failure (503, worth a retry), never a
 * 500; embeddings come as JSON numbers or, as OpenAI's clients ask by
 * default, base64 of little-endian float32. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
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


/* --- embeddings --- */

static int parse_embedding(const char *body, bool *base64, char *msg, size_t cap)
{
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_EMBEDDING, body, strlen(body), &g, &e) != 0) {
        snprintf(msg, cap, "%s", e.message);
        return e.status;
    }
    *base64 = g.base64;
    api_gen_free(&g);
    return 200;
}

static void test_encoding_format(void **state)
{
    (void)state;
    bool b64 = true;
    char msg[400];
    assert_int_equal(parse_embedding("{\"input\":\"Hi\"}", &b64, msg, sizeof(msg)), 200);
    assert_false(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"float\"}", &b64, msg, sizeof(msg)), 200);
    assert_false(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"base64\"}", &b64, msg, sizeof(msg)), 200);
    assert_true(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"hex\"}", &b64, msg, sizeof(msg)), 400);
    assert_non_null(strstr(msg, "`encoding_format`"));
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":1}", &b64, msg, sizeof(msg)), 400);
    assert_non_null(strstr(msg, "`encoding_format`"));
}

static const char *embedding_of(json_t *body)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(body, "data"), 0), "embedding"));
}

static void test_base64_floats(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m"};
    api_result res = {.prompt_tokens = 3};
    /* 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0, 0.5f = 00 00 00 3f (little-endian) */
    const float v[3] = {1.0f, -2.5f, 0.5f};
    json_t *j = api_embedding_body(&env, &res, v, 1, true);
    assert_string_equal(embedding_of(j), "AACAPw==");
    json_decref(j);
    j = api_embedding_body(&env, &res, v, 2, true);
    assert_string_equal(embedding_of(j), "AACAPwAAIMA=");
    json_decref(j);
    j = api_embedding_body(&env, &res, v, 3, true);
    assert_string_equal(embedding_of(j), "AACAPwAAIMAAAAA/");
    json_decref(j);
    j = api_embedding_body(&env, &res, v, 3, false);
    json_t *a = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
    assert_int_equal(json_array_size(a), 3);
    assert_true(json_real_value(json_array_get(a, 1)) == -2.5);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 3);
    json_decref(j);
}

static char g_log[512];

/* `strata serve` with the fake engine, 1 replica x 2 slots; returns its port. */
static int srv_start(void)
{
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/port-%d", dir, (int)getpid());
    snprintf(g_log, sizeof(g_log), "%s/serve.log", dir);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, NULL};
    return st_spawn(argv, port_file, g_log, 1);
}

static void srv_stop(void)
{
    st_stop(g_live_pid, g_log);
}

/* The fake's script (fake_engine.c) as a prompt of token ids. */
static void script(char *out, size_t cap, int op, int k, int n, int delay, int arg, const char *more)
{
    int v[4] = {k, n, delay, arg};
    int len = snprintf(out, cap, "{\"prompt\":[%d", 35 + op);
    for (int i = 0; i < 4; i++) {
        len += snprintf(out + len, cap - (size_t)len, ",%d,%d", 35 + v[i] / 90, 35 + v[i] % 90);
    }
    snprintf(out + len, cap - (size_t)len, "]%s%s}", more ? "," : "", more ? more : "");
}

static void expect_error(int port, const char *body, int status, const char *code)
{
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, status);
    if (status == 503) assert_non_null(strcasestr(hr.headers, "Retry-After:"));
    json_t *j = json_loads(hr.body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "server_error");
    json_decref(j);
    http_response_free(&hr);
}

static void test_engine_failures_are_503(void **state)
{
    (void)state;
    int port = srv_start();
    char body[256];
    script(body, sizeof(body), 1 /* ERR */, 7, 0, 0, 2, NULL);
    expect_error(port, body, 503, "internal");
    script(body, sizeof(body), 5 /* BAD_TOKEN */, 8, 0, 5, 50, NULL);
    expect_error(port, body, 503, "bad_engine_output");
    /* streamed: the tokens, then an error event with the same code */
    script(body, sizeof(body), 1, 9, 0, 0, 2, "\"stream\":true");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    assert_non_null(strstr(hr.body, "data: {\"error\":"));
    assert_non_null(strstr(hr.body, "\"code\":\"internal\""));
    http_response_free(&hr);
    /* and the engine serves on */
    script(body, sizeof(body), 0 /* NORMAL */, 10, 3, 0, 0, NULL);
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    http_response_free(&hr);
    srv_stop();
}

ST_MODEL_TEST(test_encoding_format)
ST_MODEL_TEST(test_base64_floats)
ST_MODEL_TEST(test_engine_failures_are_503)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoding_format_guard),
        cmocka_unit_test(test_base64_floats_guard),
        cmocka_unit_test_teardown(test_engine_failures_are_503_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
