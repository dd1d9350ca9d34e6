/* The KV cache options of `strata serve` reach every engine, through the
 * real server and engine on stories260K: with the defaults a repeated
 * 45-token prompt reuses one 32-token block (cached_tokens 32), with
 * `--prefix-cache-mib 0` nothing (0), and with `--prefix-min-tokens 64` a
 * 32-token hit is not worth taking (0). /metrics shows the real engine's KV
 * figures from its pongs (blocks, bytes, lookup and hit tokens). A bad value
 * of one of these options fails `strata serve` at once with status 2. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

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

/* POSTs a 45-token prompt (the same every time) and returns its
 * usage.prompt_tokens_details.cached_tokens. */
static json_int_t cached_tokens_of_repeat(int port)
{
    char body[1024];
    size_t k = (size_t)snprintf(body, sizeof(body), "{\"prompt\":[1");
    for (int i = 1; i < 45; i++) k += (size_t)snprintf(body + k, sizeof(body) - k, ",%d", 300 + i);
    snprintf(body + k, sizeof(body) - k, "],\"max_tokens\":4,\"temperature\":0}");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("status %d: %s", hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_non_null(j);
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 45);
    json_int_t c = json_integer_value(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    http_response_free(&hr);
    return c;
}

/* Polls /metrics until it holds `line` (bounded: ~10 s; pongs come every
 * second). */
static void wait_metric(int port, const char *line)
{
    for (int i = 0; i < 200; i++) {
        http_response hr;
        if (http_do(port, "GET", "/metrics", NULL, NULL, &hr) == 0) {
            bool found = strstr(hr.body, line) != NULL;
            if (!found && i == 199) print_message("%s\n", hr.body);
            http_response_free(&hr);
            if (found) return;
        }
        usleep(50 * 1000);
    }
    fail_msg("metric never reached: %s", line);
}

/* Starts the server with extra options (NULL-terminated), sends the prompt
 * twice, and returns the second one's cached_tokens; *port_out keeps the
 * server running when non-NULL (the caller stops it). */
static json_int_t repeat_with(const char *log, int *port_out, ...)
{
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/port-kvflags-%d", testdata_scratch_dir(),
             (int)getpid());
    const char *argv[32] = {STRATA_BIN, "serve", "-m", g_model, "--slots", "1", "--ctx", "256",
                            "-t", "1", "--port", "0", "--port-file", port_file};
    int na = 14;
    va_list ap;
    va_start(ap, port_out);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && na < 30) argv[na++] = a;
    va_end(ap);
    argv[na] = NULL;
    int port = st_spawn(argv, port_file, log, 1);
    assert_int_equal(cached_tokens_of_repeat(port), 0);
    json_int_t c = cached_tokens_of_repeat(port);
    if (port_out != NULL) *port_out = port;
    else st_stop(g_live_pid, log);
    return c;
}

static void test_flags_reach_the_engine(void **state)
{
    (void)state;
    char log[512];
    snprintf(log, sizeof(log), "%s/serve-kvflags-%d.log", testdata_scratch_dir(), (int)getpid());
    int port = 0;
    assert_int_equal(repeat_with(log, &port, NULL), 32);
    /* the real engine's pong figures: 2 x 45 looked up, 32 reused */
    wait_metric(port, "strata_prefix_cache_lookup_tokens_total{replica=\"0\"} 90\n");
    wait_metric(port, "strata_prefix_cache_hit_tokens_total{replica=\"0\"} 32\n");
    wait_metric(port, "vllm:prefix_cache_hits_total{model_name=\"stories260K\"} 32\n");
    http_response hr;
    assert_int_equal(http_do(port, "GET", "/metrics", NULL, NULL, &hr), 0);
    long long total = -1, used = -1, cached = -1, bytes = -1;
    const char *t = strstr(hr.body, "strata_kv_blocks{replica=\"0\",state=\"total\"} ");
    const char *u = strstr(hr.body, "strata_kv_blocks{replica=\"0\",state=\"used\"} ");
    const char *c = strstr(hr.body, "strata_kv_blocks{replica=\"0\",state=\"cached\"} ");
    const char *b = strstr(hr.body, "strata_kv_bytes{replica=\"0\"} ");
    assert_true(t && u && c && b);
    assert_int_equal(sscanf(strchr(t, '}') + 1, "%lld", &total), 1);
    assert_int_equal(sscanf(strchr(u, '}') + 1, "%lld", &used), 1);
    assert_int_equal(sscanf(strchr(c, '}') + 1, "%lld", &cached), 1);
    assert_int_equal(sscanf(strchr(b, '}') + 1, "%lld", &bytes), 1);
    http_response_free(&hr);
    assert_true(total >= 8); /* one slot of 256 positions in 32-token blocks */
    assert_int_equal(used, 0); /* idle */
    assert_true(cached >= 1 && cached <= total);
    assert_true(bytes > 0);
    st_stop(g_live_pid, log);

    assert_int_equal(repeat_with(log, NULL, "--prefix-cache-mib", "0", NULL), 0);
    assert_int_equal(repeat_with(log, NULL, "--prefix-min-tokens", "64", NULL), 0);
    assert_int_equal(repeat_with(log, NULL, "--prefix-min-tokens", "32", NULL), 32);
}
ST_MODEL_TEST(test_flags_reach_the_engine)

/* A bad value is refused by `strata serve` itself (status 2, the option
 * named), before any engine starts. */
static void test_bad_values_fail_at_once(void **state)
{
    (void)state;
    const char *cases[][2] = {{"--prefix-cache-mib", "-1"}, {"--prefix-cache-mib", "lots"},
                              {"--prefix-min-tokens", "x"}, {"--batch", "0"},
                              {"--kv-max", "0"}, {"--kv-hold-ms", "soon"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char log[512];
        snprintf(log, sizeof(log), "%s/serve-kvflags-bad-%d.log", testdata_scratch_dir(),
                 (int)getpid());
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) dup2(fd, 2);
            execl(STRATA_BIN, STRATA_BIN, "serve", "-m", g_model, "--port", "0", cases[i][0],
                  cases[i][1], (char *)NULL);
            _exit(127);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 2);
        size_t n;
        char *raw = testdata_read_file(log, &n);
        assert_non_null(raw);
        char *text = strndup(raw, n);
        free(raw);
        /* a known option with a bad value, not an unknown option */
        if (strstr(text, "bad value for") == NULL || strstr(text, cases[i][0]) == NULL) {
            fail_msg("%s %s: not refused as a bad value: %s", cases[i][0], cases[i][1], text);
        }
        free(text);
    }
}
ST_MODEL_TEST(test_bad_values_fail_at_once)

/* The status of a completion of n_prompt ids and max_tokens 4. */
static int status_of_prompt(int port, int n_prompt)
{
    char body[2048];
    size_t k = (size_t)snprintf(body, sizeof(body), "{\"prompt\":[1");
    for (int i = 1; i < n_prompt; i++) k += (size_t)snprintf(body + k, sizeof(body) - k, ",%d", 300 + i);
    snprintf(body + k, sizeof(body) - k, "],\"max_tokens\":4,\"temperature\":0}");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    int status = hr.status;
    http_response_free(&hr);
    return status;
}

/* The pool options reach the engines: with `--kv-max 64` a request that
 * needs 84 positions cannot fit the pool (400) although it fits the
 * 256-token context, while one of 49 positions is served. */
static void test_pool_options_reach_the_engine(void **state)
{
    (void)state;
    char log[512], port_file[512];
    snprintf(log, sizeof(log), "%s/serve-kvpool-%d.log", testdata_scratch_dir(), (int)getpid());
    snprintf(port_file, sizeof(port_file), "%s/port-kvpool-%d", testdata_scratch_dir(), (int)getpid());
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--slots", "1", "--ctx", "256",
                          "-t", "1", "--port", "0", "--port-file", port_file,
                          "--kv-max", "64", "--kv-hold-ms", "0", NULL};
    int port = st_spawn(argv, port_file, log, 1);
    assert_int_equal(status_of_prompt(port, 45), 200);
    assert_int_equal(status_of_prompt(port, 80), 400);
    st_stop(g_live_pid, log);
    /* without the option the same request is served */
    const char *argv2[] = {STRATA_BIN, "serve", "-m", g_model, "--slots", "1", "--ctx", "256",
                           "-t", "1", "--port", "0", "--port-file", port_file, NULL};
    port = st_spawn(argv2, port_file, log, 1);
    assert_int_equal(status_of_prompt(port, 80), 200);
    st_stop(g_live_pid, log);
}
ST_MODEL_TEST(test_pool_options_reach_the_engine)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_flags_reach_the_engine_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_bad_values_fail_at_once_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_pool_options_reach_the_engine_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
