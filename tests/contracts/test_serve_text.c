/* Generated text that is not UTF-8 in responses: each maximal invalid
 * subpart becomes one U+FFFD (the cases are Python's decode(errors=
 * "replace") results), so that a choice whose text holds a cut multi-byte character or
 * stray byte tokens still has its text (it used to vanish: the choices
 * array came back empty, and a streamed chunk lost its choice). Then the
 * real server on the golden phi3 model, whose greedy output is such bytes. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/api.h"
#include "serve_testutil.h"

#define FFFD "\xEF\xBF\xBD"

static void expect_text(const char *in, size_t n, const char *want)
{
    json_t *j = api_text_json(in, n);
    assert_non_null(j);
    assert_int_equal(json_string_length(j), strlen(want));
    assert_memory_equal(json_string_value(j), want, strlen(want));
    json_decref(j);
}

static void test_text_json(void **state)
{
    (void)state;
    expect_text("hello", 5, "hello");
    expect_text(NULL, 0, "");
    expect_text("caf\xC3\xA9 \xF0\x9F\x98\x80", 10, "caf\xC3\xA9 \xF0\x9F\x98\x80");
    expect_text("a\xFF" "b", 3, "a" FFFD "b");
    /* a character cut by the end of the text (max_tokens mid-character) */
    expect_text("x\xE2\x82", 3, "x" FFFD);
    expect_text("\xF0\x9F\x98", 3, FFFD);
    expect_text("\xF0\x9F\x98 \xE8\xBF x", 8, FFFD " " FFFD " x");
    expect_text("\xE2\xE2", 2, FFFD FFFD);
    /* stray continuation, overlong form, surrogate, past U+10FFFF */
    expect_text("\x80", 1, FFFD);
    expect_text("\xC0\xAF", 2, FFFD FFFD);
    expect_text("\xED\xA0\x80", 3, FFFD FFFD FFFD);
    expect_text("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
    /* a valid sequence right after an invalid byte survives */
    expect_text("\xE2\xC3\xA9", 3, FFFD "\xC3\xA9");
    /* the length counts, not a NUL: a sequence is not completed by bytes
     * past n */
    expect_text("\xC3\xA9", 1, FFFD);
}

/* The response bodies keep their choice and its text. */
static void test_bodies_keep_the_choice(void **state)
{
    (void)state;
    api_env env = {.bos = "<s>", .eos = "</s>", .model_name = "m", .n_ctx = 512};
    api_result res = {.serial = 3, .finish_reason = "length", .replica = 0};
    const char *bad = "ok\xE2\x82";
    for (int kind = 0; kind < 2; kind++) {
        const enum api_kind k = kind ? API_CHAT : API_COMPLETION;
        json_t *j = api_completion_body(&env, k, &res, bad, 4, NULL);
        json_t *choices = json_object_get(j, "choices");
        assert_int_equal(json_array_size(choices), 1);
        json_t *c = json_array_get(choices, 0);
        const char *text = k == API_CHAT
                               ? json_string_value(json_object_get(json_object_get(c, "message"),
                                                                   "content"))
                               : json_string_value(json_object_get(c, "text"));
        assert_non_null(text);
        assert_string_equal(text, "ok" FFFD);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
        json_decref(j);

        j = api_stream_chunk(&env, k, 3, 0, bad, 4, NULL, true, NULL);
        choices = json_object_get(j, "choices");
        assert_int_equal(json_array_size(choices), 1);
        c = json_array_get(choices, 0);
        text = k == API_CHAT
                   ? json_string_value(json_object_get(json_object_get(c, "delta"), "content"))
                   : json_string_value(json_object_get(c, "text"));
        assert_non_null(text);
        assert_string_equal(text, "ok" FFFD);
        json_decref(j);
    }
}

/* The real server and engine on golden phi3-F32 (512 tokens, many of them
 * single bytes): every response has its one choice with a text, streamed
 * or not, and the text the client reads is valid UTF-8 by construction;
 * /detokenize likewise. */
static void test_server_on_byte_tokens(void **state)
{
    (void)state;
    char model[4096];
    TESTDATA_FILE(model, "golden/models/phi3-F32.gguf");
    char port_file[512], log[512];
    snprintf(port_file, sizeof(port_file), "%s/port", testdata_scratch_dir());
    snprintf(log, sizeof(log), "%s/serve.log", testdata_scratch_dir());
    const char *argv[] = {STRATA_BIN, "serve", "-m", model, "--port", "0", "--port-file",
                          port_file, "--replicas", "1", "--slots", "1", "-t", "1", NULL};
    pid_t pid = 0;
    const int port = st_spawn(argv, port_file, log, 1);
    pid = g_live_pid;
    static const char *const prompts[] = {"Once upon", "The", "hello world", "x y z"};
    int with_fffd = 0;
    for (size_t i = 0; i < sizeof(prompts) / sizeof(prompts[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"%s\",\"max_tokens\":12,\"temperature\":0}", prompts[i]);
        http_response r;
        assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        json_error_t e;
        json_t *j = json_loads(r.body, 0, &e);
        assert_non_null(j);
        json_t *choices = json_object_get(j, "choices");
        if (json_array_size(choices) != 1) fail_msg("no choice in %s", r.body);
        const char *text = json_string_value(json_object_get(json_array_get(choices, 0), "text"));
        assert_non_null(text);
        with_fffd += strstr(text, FFFD) != NULL;
        json_decref(j);
        http_response_free(&r);

        /* streamed: every data chunk but [DONE] carries one choice */
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"%s\",\"max_tokens\":12,\"temperature\":0,\"stream\":true}",
                 prompts[i]);
        assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        int chunks = 0;
        for (const char *p = strstr(r.body, "data: "); p != NULL; p = strstr(p + 1, "data: ")) {
            if (strncmp(p, "data: [DONE]", 12) == 0) break;
            const char *end = strstr(p, "\n\n");
            assert_non_null(end);
            char *line = strndup(p + 6, (size_t)(end - p - 6));
            json_t *c = json_loads(line, 0, &e);
            assert_non_null(c);
            if (json_array_size(json_object_get(c, "choices")) != 1)
                fail_msg("a chunk without its choice: %s", line);
            chunks++;
            json_decref(c);
            free(line);
        }
        assert_true(chunks >= 1);
        http_response_free(&r);
    }
    print_message("%d of 4 replies held replaced bytes\n", with_fffd);
    /* /detokenize of byte tokens that make no character (<0xE2> is id
     * 3 + 0xE2 in this SentencePiece vocabulary): U+FFFD, not a dropped
     * connection */
    http_response r;
    assert_int_equal(http_do(port, "POST", "/detokenize", "{\"tokens\":[229, 229]}", NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "content")), FFFD FFFD);
    json_decref(j);
    http_response_free(&r);
    st_stop(pid, log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_json),
        cmocka_unit_test(test_bodies_keep_the_choice),
        cmocka_unit_test_teardown(test_server_on_byte_tokens, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
