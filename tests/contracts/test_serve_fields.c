/* What the HTTP API does with the fields a client sends, through a real
 * `strata serve` with the scripted fake engine (fake_engine.c): a field
 * Strata knows but does not implement is refused with 400 naming it, unless
 * its value changes nothing; fields that do not change the answer, and
 * unknown ones, are accepted. Also: `timings` are printed rounded (bytes on
 * the wire), /v1/embeddings' input forms are checked with errors naming the
 * bad index, and a request that arrives before any engine was ever ready
 * waits for one instead of getting a 503.
 *
 * Every test talks HTTP only, so it runs against any build of the server. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/textgen.h"

#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
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

typedef struct srv {
    pid_t pid;
    int port;
    char log[512];
} srv;

/* `strata serve` with the fake engine, 1 replica x 2 slots; ready_replicas
 * 0: returns once it listens, without waiting for an engine. */
static void srv_start(srv *s, int ready_replicas)
{
    static int n_started;
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/fields-port-%d-%d", dir, (int)getpid(), n_started);
    snprintf(s->log, sizeof(s->log), "%s/fields-serve-%d.log", dir, n_started++);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, NULL};
    s->port = st_spawn(argv, port_file, s->log, ready_replicas);
    s->pid = g_live_pid;
}

static void srv_stop(srv *s)
{
    st_stop(s->pid, s->log);
}

/* POSTs body to path; the status, and the error message (or "") in msg. */
static int post_status(const srv *s, const char *path, const char *body, char *msg, size_t cap,
                       char *code, size_t code_cap)
{
    http_response hr;
    if (http_do(s->port, "POST", path, body, NULL, &hr) != 0) fail_msg("no answer to %s %s", path, body);
    json_t *j = json_loads(hr.body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    snprintf(msg, cap, "%s", e ? json_string_value(json_object_get(e, "message")) : "");
    if (code != NULL) snprintf(code, code_cap, "%s", e ? json_string_value(json_object_get(e, "code")) : "");
    json_decref(j);
    int st = hr.status;
    http_response_free(&hr);
    return st;
}

static const char *path_of(char kind)
{
    return kind == 'c' ? "/v1/completions" : kind == 'h' ? "/v1/chat/completions" : "/v1/embeddings";
}

/* A body for endpoint kind ('c' completions, 'h' chat, 'e' embeddings) with
 * the extra fields `more` (JSON members, may be empty). */
static void body_of(char *out, size_t cap, char kind, const char *more)
{
    const char *base = kind == 'c'   ? "\"prompt\":\"Hi\",\"max_tokens\":2"
                       : kind == 'h' ? "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2"
                                     : "\"input\":\"Hi\"";
    snprintf(out, cap, "{%s%s%s}", base, more[0] ? "," : "", more);
}

typedef struct field_case {
    char kind;
    const char *field;
    const char *value;
} field_case;

/* Each known-but-unimplemented field with a value that would change the
 * answer. */
static const field_case k_refused[] = {
    /* chat implements tools (test_serve_tools.c); completions do not */
    {'c', "tools", "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"},
    {'c', "tool_choice", "\"required\""},
    {'h', "functions", "[{\"name\":\"f\"}]"},
    {'h', "function_call", "{\"name\":\"f\"}"},
    {'h', "audio", "{\"voice\":\"alloy\",\"format\":\"wav\"}"},
    {'h', "modalities", "[\"text\",\"audio\"]"},
    {'h', "prediction", "{\"type\":\"content\",\"content\":\"x\"}"},
    {'h', "web_search_options", "{}"},
    {'h', "reasoning_effort", "\"high\""},
    {'h', "verbosity", "\"low\""},
    {'c', "suffix", "\" the end\""},
    {'h', "echo", "true"}, /* completions implement it (test_serve_echo.c) */
    {'c', "best_of", "3"},
    {'e', "dimensions", "8"},
    {'c', "n_probs", "3"},
    {'c', "penalty_last_n", "16,\"presence_penalty\":0.5"},
    {'c', "lora", "[{\"id\":0,\"scale\":1}]"},
    {'c', "t_max_predict_ms", "100"},
    {'c', "post_sampling_probs", "true"},
    {'c', "return_tokens", "true"},
    {'e', "embd_normalize", "-1"},
    {'c', "guided_whitespace_pattern", "\" *\""},
    {'c', "use_beam_search", "true"},
    {'c', "length_penalty", "0.5"},
    {'h', "chat_template", "\"{{ messages }}\""},
    {'c', "logits_processors", "[\"x\"]"},
};

/* Fields that do not change the answer, values of the refused fields that
 * change nothing, and a field nobody knows: accepted. */
static const char *const k_accepted[][2] = {
    {"c", "\"user\":\"u-1\",\"metadata\":{\"k\":\"v\"},\"store\":false,\"service_tier\":\"auto\""},
    {"h", "\"user\":\"u-1\",\"parallel_tool_calls\":true,\"prompt_cache_key\":\"k\","
          "\"safety_identifier\":\"s\",\"stream_options\":null"},
    {"h", "\"response_format\":{\"type\":\"text\"},\"tools\":[],\"tool_choice\":\"none\","
          "\"modalities\":[\"text\"],\"functions\":[],\"function_call\":\"auto\","
          "\"audio\":null,\"prediction\":null"},
    {"h", "\"tool_choice\":\"auto\",\"add_generation_prompt\":true,\"continue_final_message\":false,"
          "\"chat_template_kwargs\":{\"enable_thinking\":false},\"reasoning_format\":\"none\""},
    {"c", "\"echo\":false,\"suffix\":\"\",\"best_of\":1,\"ignore_eos\":false,\"min_tokens\":0,"
          "\"mirostat\":0,\"n_probs\":0,\"grammar\":\"\",\"top_n_sigma\":-1,"
          "\"repetition_penalty\":1,\"skip_special_tokens\":true,\"stop_token_ids\":[]"},
    {"c", "\"repeat_last_n\":64,\"penalty_last_n\":128,\"cache_prompt\":true"},
    {"c", "\"n\":2,\"best_of\":2"},
    {"c", "\"x_strata_unknown_field\":{\"anything\":[1,2]}"},
};

static void test_unsupported_fields(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1);
    char body[1024], msg[512], code[64], want[96];
    for (size_t i = 0; i < sizeof(k_refused) / sizeof(k_refused[0]); i++) {
        const field_case *f = &k_refused[i];
        char more[600];
        snprintf(more, sizeof(more), "\"%s\":%s", f->field, f->value);
        body_of(body, sizeof(body), f->kind, more);
        int st = post_status(&s, path_of(f->kind), body, msg, sizeof(msg), code, sizeof(code));
        snprintf(want, sizeof(want), "`%s`", f->field);
        if (st != 400 || strstr(msg, want) == NULL || strcmp(code, "unsupported_parameter") != 0) {
            fail_msg("%s %s: status %d, code \"%s\", message \"%s\"", path_of(f->kind), body, st,
                     code, msg);
        }
    }
    for (size_t i = 0; i < sizeof(k_accepted) / sizeof(k_accepted[0]); i++) {
        char kind = k_accepted[i][0][0];
        if (kind == 'e') continue; /* the fake engine does not embed: test_serve_choices.c */
        body_of(body, sizeof(body), kind, k_accepted[i][1]);
        int st = post_status(&s, path_of(kind), body, msg, sizeof(msg), NULL, 0);
        if (st != 200) fail_msg("%s %s: status %d: %s", path_of(kind), body, st, msg);
    }
    int st;
    /* a message part that is not text */
    st = post_status(&s, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},"
                     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:,\"}}]}]}",
                     msg, sizeof(msg), code, sizeof(code));
    assert_int_equal(st, 400);
    assert_non_null(strstr(msg, "messages[0].content[1]"));
    assert_non_null(strstr(msg, "image_url"));
    /* text parts are joined */
    st = post_status(&s, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}],"
                     "\"max_tokens\":2}",
                     msg, sizeof(msg), NULL, 0);
    assert_int_equal(st, 200);
    /* n out of its bounds */
    st = post_status(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"n\":17}", msg, sizeof(msg), NULL, 0);
    assert_int_equal(st, 400);
    assert_non_null(strstr(msg, "`n`"));
    st = post_status(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"n\":0}", msg, sizeof(msg), NULL, 0);
    assert_int_equal(st, 400);
    srv_stop(&s);
}

/* --- timings on the wire --- */

/* Every number in each "timings":{...} object of text has at most 3
 * decimals and no exponent. Returns how many objects were checked. */
static int check_timings_bytes(const char *text)
{
    int n = 0;
    regex_t re;
    assert_int_equal(regcomp(&re, "^-?[0-9]+(\\.[0-9]{1,3})?$", REG_EXTENDED | REG_NOSUB), 0);
    const char *p = text;
    while ((p = strstr(p, "\"timings\":{")) != NULL) {
        p += strlen("\"timings\":{");
        const char *end = strchr(p, '}');
        assert_non_null(end);
        const char *q = p;
        while (q < end) {
            const char *colon = memchr(q, ':', (size_t)(end - q));
            if (colon == NULL) break;
            const char *v = colon + 1;
            const char *stop = v;
            while (stop < end && *stop != ',') stop++;
            char num[64];
            snprintf(num, sizeof(num), "%.*s", (int)(stop - v), v);
            if (regexec(&re, num, 0, NULL, 0) != 0) {
                regfree(&re);
                fail_msg("a timing printed as %s in %.*s", num, (int)(end - p), p);
            }
            q = stop + 1;
        }
        n++;
        p = end;
    }
    regfree(&re);
    return n;
}

static void test_timings_rounded(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1);
    const char *bodies[] = {
        "{\"prompt\":\"Hi\",\"max_tokens\":3}",
        "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3}",
    };
    const char *paths[] = {"/v1/completions", "/v1/completions", "/v1/chat/completions"};
    int want[] = {1, 2, 1};
    /* measured figures (queue_ms, ttft_ms, predicted_per_second) rarely
     * print short by chance; several requests make that negligible */
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < 3; i++) {
            http_response hr;
            assert_int_equal(http_do(s.port, "POST", paths[i], bodies[i], NULL, &hr), 0);
            assert_int_equal(hr.status, 200);
            assert_int_equal(check_timings_bytes(hr.body), want[i]);
            http_response_free(&hr);
        }
    }
    srv_stop(&s);
}

/* --- embeddings input forms (checked before any engine sees them) --- */

static void test_embedding_input_errors(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1);
    struct {
        const char *input, *names;
    } bad[] = {
        {"[]", "`input`"},
        {"\"\"", "`input`"},
        {"[\"a\",\"\"]", "`input[1]`"},
        {"[[1,2],[]]", "`input[1]`"},
        {"[\"a\",[1,2]]", "`input[1]`"},
        {"[[1,2],\"a\"]", "`input[1]`"},
        {"[[1,2],[3,99999]]", "`input[1][1]`"},
        {"[[1,2],[3,-1]]", "`input[1][1]`"},
        {"[1,2,99999]", "`input[2]`"},
        {"[1,\"a\"]", "`input[1]`"},
        {"{\"a\":1}", "`input`"},
        {"null", "`input`"},
        {"[true]", "`input`"},
    };
    char body[512], msg[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "{\"input\":%s}", bad[i].input);
        int st = post_status(&s, "/v1/embeddings", body, msg, sizeof(msg), NULL, 0);
        if (st != 400 || strstr(msg, bad[i].names) == NULL) {
            fail_msg("input %s: status %d, message \"%s\" (should name %s)", bad[i].input, st, msg,
                     bad[i].names);
        }
    }
    /* too many inputs, and one input too long for the context (512 here) */
    sbuf many = {0};
    sbuf_append(&many, "{\"input\":[", 10);
    for (int i = 0; i < 2049; i++) sbuf_append(&many, i ? ",\"a\"" : "\"a\"", i ? 4 : 3);
    sbuf_append(&many, "]}", 2);
    int st = post_status(&s, "/v1/embeddings", many.data, msg, sizeof(msg), NULL, 0);
    assert_int_equal(st, 400);
    assert_non_null(strstr(msg, "2049"));
    assert_non_null(strstr(msg, "2048"));
    sbuf_free(&many);
    sbuf lng = {0};
    sbuf_append(&lng, "{\"input\":[[1],[1,2],[", 21);
    for (int i = 0; i < 600; i++) sbuf_append(&lng, i ? ",5" : "5", i ? 2 : 1);
    sbuf_append(&lng, "]]}", 3);
    st = post_status(&s, "/v1/embeddings", lng.data, msg, sizeof(msg), NULL, 0);
    assert_int_equal(st, 400);
    if (strstr(msg, "`input[2]` has 600 tokens; the context holds 512") == NULL) {
        fail_msg("too long: \"%s\"", msg);
    }
    sbuf_free(&lng);
    srv_stop(&s);
}

/* --- requests before any engine was ready --- */

static int touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* Whether fd has something to read within ms. */
static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

static void test_early_request_waits(void **state)
{
    (void)state;
    char gate[600];
    snprintf(gate, sizeof(gate), "%s/fields-hold-%d", testdata_scratch_dir(), (int)getpid());
    assert_int_equal(touch(gate), 0);
    setenv("FAKE_ENGINE_HOLD", gate, 1);
    srv s;
    srv_start(&s, 0);
    unsetenv("FAKE_ENGINE_HOLD");
    /* the engine holds back `ready`: nothing was ever ready */
    http_response hh;
    assert_int_equal(http_do(s.port, "GET", "/health", NULL, NULL, &hh), 0);
    assert_int_equal(hh.status, 503);
    http_response_free(&hh);
    int fd_a = http_connect(s.port, 30);
    assert_true(fd_a >= 0);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions",
                                       "{\"prompt\":\"Hi\",\"max_tokens\":3}", NULL), 0);
    int fd_b = http_connect(s.port, 30);
    assert_true(fd_b >= 0);
    assert_int_equal(http_send_request(fd_b, "POST", "/v1/chat/completions",
                                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                                       "\"max_tokens\":2,\"stream\":true}", NULL), 0);
    /* a body that is bad anyway is answered at once */
    char msg[512];
    assert_int_equal(post_status(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"top_p\":7}", msg,
                                 sizeof(msg), NULL, 0),
                     400);
    assert_non_null(strstr(msg, "`top_p`"));
    /* the others wait (a 503 would come at once) */
    assert_false(readable(fd_a, 500));
    assert_false(readable(fd_b, 0));
    assert_int_equal(unlink(gate), 0); /* the engine gets ready */
    http_response ha, hb;
    assert_int_equal(http_read_response(fd_a, &ha), 0);
    close(fd_a);
    assert_int_equal(http_read_response(fd_b, &hb), 0);
    close(fd_b);
    if (ha.status != 200) fail_msg("the early completion: %d %s", ha.status, ha.body);
    json_t *j = json_loads(ha.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                          "finish_reason")),
                        "length");
    json_decref(j);
    assert_int_equal(hb.status, 200);
    assert_non_null(strstr(hb.body, "data: [DONE]"));
    assert_null(strstr(hb.body, "\"error\""));
    http_response_free(&ha);
    http_response_free(&hb);
    srv_stop(&s);
}

/* An engine that can never start: an early request is not held for the
 * whole wait, it gets the 503 once every start has failed (pool.h). */
static void test_early_request_engine_failing(void **state)
{
    (void)state;
    char crash[600];
    snprintf(crash, sizeof(crash), "%s/fields-crash-%d", testdata_scratch_dir(), (int)getpid());
    assert_int_equal(touch(crash), 0);
    setenv("FAKE_ENGINE_CRASH", crash, 1);
    srv s;
    srv_start(&s, 0);
    unsetenv("FAKE_ENGINE_CRASH");
    char msg[512], code[64];
    int st = post_status(&s, "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}", msg,
                         sizeof(msg), code, sizeof(code));
    assert_int_equal(st, 503);
    assert_string_equal(code, "no_engine");
    /* held until the starts had failed, not refused at once */
    if (strstr(msg, "failing to start") == NULL) fail_msg("the 503 says \"%s\"", msg);
    unlink(crash);
    srv_stop(&s);
}

ST_MODEL_TEST(test_unsupported_fields)
ST_MODEL_TEST(test_timings_rounded)
ST_MODEL_TEST(test_embedding_input_errors)
ST_MODEL_TEST(test_early_request_waits)
ST_MODEL_TEST(test_early_request_engine_failing)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_unsupported_fields_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_timings_rounded_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_embedding_input_errors_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_early_request_waits_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_early_request_engine_failing_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
