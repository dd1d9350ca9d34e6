/* llama-server's `cache_prompt` and the engine's prefix cache through the
 * real `strata serve` and `strata engine`: a repeated prompt reports the
 * reused tokens in usage.prompt_tokens_details.cached_tokens and
 * timings.cached_n, and gives the same text; `cache_prompt: false` opts a
 * request out (0 reused, nothing left for the next one); a cache_prompt
 * that is not a boolean is a 400. The parser's part (api.c) is checked
 * directly too: the opt-out reaches the engine request of every choice
 * and every embeddings input. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
#include "serve/request.h"
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

static void test_parse_cache_prompt(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    api_gen g;
    api_error e;
    const char *off = "{\"prompt\":[1,2,3],\"n\":2,\"max_tokens\":2,\"cache_prompt\":false}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, off, strlen(off), &g, &e), 0);
    for (size_t i = 0; i < 2; i++) {
        sreq *r = sreq_new(1, false);
        assert_int_equal(api_gen_copy_to(&g, i, r), 0);
        assert_true(r->gen.no_cache);
        sreq_release(r);
    }
    sreq *r = sreq_new(1, false);
    api_gen_move_to(&g, r);
    assert_true(r->gen.no_cache);
    sreq_release(r);
    api_gen_free(&g);

    /* streamed, completion and chat: the same opt-out */
    const char *streamed[] = {
        "{\"prompt\":[1,2,3],\"stream\":true,\"cache_prompt\":false}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
        "\"cache_prompt\":false}"};
    for (size_t k = 0; k < 2; k++) {
        enum api_kind kind = k == 0 ? API_COMPLETION : API_CHAT;
        assert_int_equal(api_parse_gen(&env, kind, streamed[k], strlen(streamed[k]), &g, &e), 0);
        assert_true(g.stream);
        r = sreq_new(1, false);
        api_gen_move_to(&g, r);
        assert_true(r->gen.no_cache);
        sreq_release(r);
        api_gen_free(&g);
    }

    const char *on[] = {"{\"prompt\":[1,2,3]}", "{\"prompt\":[1,2,3],\"cache_prompt\":true}",
                        "{\"prompt\":[1,2,3],\"cache_prompt\":null}"};
    for (size_t k = 0; k < 3; k++) {
        assert_int_equal(api_parse_gen(&env, API_COMPLETION, on[k], strlen(on[k]), &g, &e), 0);
        r = sreq_new(1, false);
        api_gen_move_to(&g, r);
        assert_false(r->gen.no_cache);
        sreq_release(r);
        api_gen_free(&g);
    }

    const char *emb = "{\"input\":[[3,4],[5,6]],\"cache_prompt\":false}";
    assert_int_equal(api_parse_gen(&env, API_EMBEDDING, emb, strlen(emb), &g, &e), 0);
    for (size_t i = 0; i < 2; i++) {
        r = sreq_new(1, true);
        assert_int_equal(api_gen_copy_to(&g, i, r), 0);
        assert_true(r->emb.no_cache);
        sreq_release(r);
    }
    api_gen_free(&g);

    const char *bad = "{\"prompt\":[1,2,3],\"cache_prompt\":\"no\"}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, bad, strlen(bad), &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "cache_prompt"));
}
ST_MODEL_TEST(test_parse_cache_prompt)

typedef struct outcome {
    char text[512];
    json_int_t cached_tokens, timings_cached_n, prompt_tokens;
} outcome;

static void complete(int port, const char *extra, outcome *o)
{
    /* 45 token ids: one full block of 32 is reusable */
    char body[1024];
    size_t k = (size_t)snprintf(body, sizeof(body), "{\"prompt\":[1");
    for (int i = 1; i < 45; i++) k += (size_t)snprintf(body + k, sizeof(body) - k, ",%d", 300 + i);
    snprintf(body + k, sizeof(body) - k, "],\"max_tokens\":6,\"temperature\":0%s}", extra);
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("status %d: %s", hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_non_null(j);
    json_t *usage = json_object_get(j, "usage");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    snprintf(o->text, sizeof(o->text), "%s", json_string_value(json_object_get(c0, "text")));
    o->prompt_tokens = json_integer_value(json_object_get(usage, "prompt_tokens"));
    o->cached_tokens = json_integer_value(
        json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
    o->timings_cached_n =
        json_integer_value(json_object_get(json_object_get(j, "timings"), "cached_n"));
    json_decref(j);
    http_response_free(&hr);
}

static void test_repeat_through_the_server(void **state)
{
    (void)state;
    const char *dir = testdata_scratch_dir();
    char port_file[512], log[512];
    snprintf(port_file, sizeof(port_file), "%s/port-cache-%d", dir, (int)getpid());
    snprintf(log, sizeof(log), "%s/serve-cache-%d.log", dir, (int)getpid());
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--slots", "1", "--ctx", "256",
                          "-t", "1", "--port", "0", "--port-file", port_file, NULL};
    int port = st_spawn(argv, port_file, log, 1);
    outcome a, b, c, d;
    complete(port, ",\"cache_prompt\":false", &a); /* leaves nothing cached */
    complete(port, "", &b);
    complete(port, "", &c);
    complete(port, ",\"cache_prompt\":false", &d);
    assert_int_equal(a.prompt_tokens, 45);
    assert_int_equal(a.cached_tokens, 0);
    assert_int_equal(b.cached_tokens, 0);
    assert_int_equal(c.cached_tokens, 32);
    assert_int_equal(c.timings_cached_n, 32);
    assert_int_equal(c.prompt_tokens, 45);
    assert_int_equal(d.cached_tokens, 0);
    assert_string_equal(b.text, a.text);
    assert_string_equal(c.text, a.text);
    assert_string_equal(d.text, a.text);

    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions",
                             "{\"prompt\":\"Once\",\"cache_prompt\":1}", NULL, &hr), 0);
    assert_int_equal(hr.status, 400);
    assert_non_null(strstr(hr.body, "cache_prompt"));
    http_response_free(&hr);
    st_stop(g_live_pid, log);
}
ST_MODEL_TEST(test_repeat_through_the_server)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_cache_prompt_guard),
        cmocka_unit_test_teardown(test_repeat_through_the_server_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
