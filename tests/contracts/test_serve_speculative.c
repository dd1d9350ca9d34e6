/* Speculative decoding through the real server and engine on stories260K:
 * `strata serve --draft-ngram` passes the option to its engine; a greedy
 * completion's text is the same with drafts and with `speculative: false`
 * (or `speculative.n_max: 0`), its timings say how many tokens were drafted
 * and accepted, and /metrics counts them; the same with `--draft-model`
 * (stories260K drafting for itself). Those runs turn the cost gate off
 * (`--draft-gate off`), so that drafts are proposed whatever the step
 * times; with its default (on) the text is still the same, and the
 * engine's log says the gate is on. Bad values of the draft options
 * fail `strata serve` at once with status 2, and `strata engine` refuses a
 * draft model with another vocabulary at start (status 1, a message that
 * names the vocabularies). */
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

/* A greedy completion of "Once upon a time" (120 tokens, extra fields
 * appended); its text into text (malloc'd) and its timings' draft figures. */
static void complete(int port, const char *extra, char **text, json_int_t *drafted,
                     json_int_t *accepted)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":120,\"temperature\":0%s%s}",
             extra ? "," : "", extra ? extra : "");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("status %d: %s", hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_non_null(j);
    json_t *t = json_object_get(j, "timings");
    *drafted = json_integer_value(json_object_get(t, "draft_n"));
    *accepted = json_integer_value(json_object_get(t, "draft_n_accepted"));
    const char *s = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(s);
    *text = strdup(s);
    json_decref(j);
    http_response_free(&hr);
}

/* A server with the given draft source's options (NULL-terminated). */
static void drafts_through_the_server(const char *const *source)
{
    bool gate = true; /* the default */
    for (size_t i = 0; source[i] != NULL && source[i + 1] != NULL; i++) {
        if (strcmp(source[i], "--draft-gate") == 0) gate = strcmp(source[i + 1], "on") == 0;
    }
    char log[512], port_file[512];
    snprintf(log, sizeof(log), "%s/serve-spec-%d.log", testdata_scratch_dir(), (int)getpid());
    snprintf(port_file, sizeof(port_file), "%s/port-spec-%d", testdata_scratch_dir(),
             (int)getpid());
    const char *argv[24] = {STRATA_BIN, "serve", "-m", g_model, "--slots", "2", "--ctx", "256",
                            "-t", "1", "--port", "0", "--port-file", port_file};
    size_t na = 14;
    for (size_t i = 0; source[i] != NULL && na < 23; i++) argv[na++] = source[i];
    argv[na] = NULL;
    int port = st_spawn(argv, port_file, log, 1);
    char *with = NULL, *without = NULL, *capped = NULL;
    json_int_t d1, a1, d2, a2, d3, a3;
    complete(port, NULL, &with, &d1, &a1);
    complete(port, "\"speculative\":false", &without, &d2, &a2);
    complete(port, "\"speculative.n_max\":0", &capped, &d3, &a3);
    assert_string_equal(with, without);
    assert_string_equal(with, capped);
    /* with the gate, how many drafts run depends on the step times */
    assert_true(a1 <= d1 && (gate || (d1 > 0 && a1 > 0)));
    assert_int_equal(d2, 0);
    assert_int_equal(d3, 0);
    char line[128];
    snprintf(line, sizeof(line), "strata_draft_tokens_total %lld\n", (long long)d1);
    http_response hr;
    assert_int_equal(http_do(port, "GET", "/metrics", NULL, NULL, &hr), 0);
    if (strstr(hr.body, line) == NULL) fail_msg("no '%s' in /metrics", line);
    snprintf(line, sizeof(line), "strata_draft_accepted_tokens_total %lld\n", (long long)a1);
    if (strstr(hr.body, line) == NULL) fail_msg("no '%s' in /metrics", line);
    assert_non_null(strstr(hr.body, "strata_draft_acceptance_rate_count 1\n"));
    http_response_free(&hr);
    free(with);
    free(without);
    free(capped);
    st_stop(g_live_pid, log);
    size_t n_log = 0;
    char *raw = testdata_read_file(log, &n_log);
    assert_non_null(raw);
    char *text = strndup(raw, n_log);
    free(raw);
    const char *want = gate ? "cost gate on" : "cost gate off";
    if (strstr(text, want) == NULL) fail_msg("no '%s' in the log: %s", want, text);
    free(text);
}

static void test_drafts_through_the_server(void **state)
{
    (void)state;
    const char *const source[] = {"--draft-ngram", "--draft-max", "3", "--draft-gate", "off",
                                  NULL};
    drafts_through_the_server(source);
}
ST_MODEL_TEST(test_drafts_through_the_server)

static void test_gate_through_the_server(void **state)
{
    (void)state;
    const char *const source[] = {"--draft-ngram", NULL};
    drafts_through_the_server(source);
}
ST_MODEL_TEST(test_gate_through_the_server)

static void test_draft_model_through_the_server(void **state)
{
    (void)state;
    const char *const source[] = {"--draft-model", g_model, "--draft-max", "3",
                                  "--draft-gate",  "off",   NULL};
    drafts_through_the_server(source);
}
ST_MODEL_TEST(test_draft_model_through_the_server)

/* Runs strata with args (stdin empty, stderr into a file) and returns its
 * exit status and stderr (malloc'd). */
static int run_strata(const char *const *args, char **err_text)
{
    char log[512];
    snprintf(log, sizeof(log), "%s/spec-run-%d.log", testdata_scratch_dir(), (int)getpid());
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0) dup2(in, 0);
        execv(STRATA_BIN, (char *const *)args);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    size_t n;
    char *raw = testdata_read_file(log, &n);
    assert_non_null(raw);
    *err_text = strndup(raw, n);
    free(raw);
    return WEXITSTATUS(status);
}

static void test_draft_model_refused(void **state)
{
    (void)state;
    char other[4096];
    if (testdata_path(other, sizeof(other), "models/llama-2-tiny-random.gguf") == NULL) skip();
    char *text = NULL;
    const char *const engine_args[] = {STRATA_BIN, "engine", "-m", g_model, "-t", "1",
                                       "--draft-model", other, NULL};
    assert_int_equal(run_strata(engine_args, &text), 1);
    if (strstr(text, "vocabulary has 32000 tokens, the target's 512") == NULL) {
        fail_msg("not refused for its vocabulary: %s", text);
    }
    free(text);
    /* the server checks what it can before starting engines */
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/no-such-draft-%d.gguf", testdata_scratch_dir(),
             (int)getpid());
    const char *const serve_missing[] = {STRATA_BIN, "serve", "-m", g_model, "--port", "0",
                                         "--draft-model", missing, NULL};
    assert_int_equal(run_strata(serve_missing, &text), 2);
    assert_non_null(strstr(text, "bad value for --draft-model"));
    free(text);
    const char *const serve_both[] = {STRATA_BIN, "serve", "-m", g_model, "--port", "0",
                                      "--draft-ngram", "--draft-model", g_model, NULL};
    assert_int_equal(run_strata(serve_both, &text), 2);
    assert_non_null(strstr(text, "give one"));
    free(text);
}
ST_MODEL_TEST(test_draft_model_refused)

static void test_bad_values_fail_at_once(void **state)
{
    (void)state;
    const char *cases[][2] = {{"--draft-max", "0"}, {"--draft-max", "17"},
                              {"--draft-min", "x"}, {"--draft-p-min", "2"},
                              {"--draft-p-min", "-0.5"}, {"--draft-gate", "maybe"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char log[512];
        snprintf(log, sizeof(log), "%s/serve-spec-bad-%d.log", testdata_scratch_dir(),
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
        if (strstr(text, "bad value for") == NULL || strstr(text, cases[i][0]) == NULL) {
            fail_msg("%s %s: not refused as a bad value: %s", cases[i][0], cases[i][1], text);
        }
        free(text);
    }
}
ST_MODEL_TEST(test_bad_values_fail_at_once)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_drafts_through_the_server_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_gate_through_the_server_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_bad_values_fail_at_once_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_draft_model_through_the_server_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_draft_model_refused_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
