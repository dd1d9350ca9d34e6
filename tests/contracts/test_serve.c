/* Contract tests of `strata serve` (DESIGN.md "Ownership in the server")
 * against the scripted fake engine (fake_engine.c) over real pipes, driven
 * over HTTP on 127.0.0.1. Each request's prompt tells the fake what to do and
 * carries a number k; the fake's tokens and stats are functions of k, so a
 * test knows the exact text and timings each response must have — a token or
 * a statistic handed to the wrong request cannot go unnoticed. No assertion
 * depends on wall-clock time; waits are bounded polls. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "text/tokenizer.h"
#include "text/vocab.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "serve_testutil.h"

#include <ctype.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/wait.h>

#ifndef STRATA_BIN
#error STRATA_BIN must name the strata binary
#endif

enum { OP_NORMAL = 0, OP_ERR = 1, OP_DIE = 2, OP_LATE_DONE = 3, OP_SILENT = 4, OP_BAD_TOKEN = 5,
       OP_STOP_DIES = 6, OP_OVERRUN = 7, OP_WEDGE = 8, OP_LONG_STEP = 9 };

typedef struct srv {
    pid_t pid;
    int port;
    char log[512];
} srv;

static const char *g_auth_header; /* sent by wait_metric when the server has a key */

/* Starts `strata serve` with the fake engine; extra args NULL-terminated. */
static void srv_start(srv *s, int replicas, int slots, int max_queue, ...)
{
    static int n_started;
    const char *dir = testdata_scratch_dir();
    char port_file[512], r[16], k[16], q[16];
    snprintf(port_file, sizeof(port_file), "%s/port-%d-%d", dir, (int)getpid(), n_started);
    snprintf(s->log, sizeof(s->log), "%s/serve-%d.log", dir, n_started++);
    snprintf(r, sizeof(r), "%d", replicas);
    snprintf(k, sizeof(k), "%d", slots);
    snprintf(q, sizeof(q), "%d", max_queue);
    const char *argv[40] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                            "--replicas", r, "--slots", k, "--max-queue", q, "--port", "0",
                            "--port-file", port_file};
    int na = 16;
    va_list ap;
    va_start(ap, max_queue);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && na < 38) argv[na++] = a;
    va_end(ap);
    argv[na] = NULL;
    s->port = st_spawn(argv, port_file, s->log, replicas);
    s->pid = g_live_pid;
}

/* SIGTERM, and the server must exit 0 by itself. */
static void srv_stop(srv *s)
{
    st_stop(s->pid, s->log);
}

/* The fake's script as a prompt of printable-ASCII byte tokens. */
static void script(char *out, size_t cap, int op, int k, int n, int delay, int arg)
{
    int v[4] = {k, n, delay, arg};
    int len = snprintf(out, cap, "[%d", 35 + op);
    for (int i = 0; i < 4; i++) len += snprintf(out + len, cap - (size_t)len, ",%d,%d", 35 + v[i] / 90, 35 + v[i] % 90);
    snprintf(out + len, cap - (size_t)len, "]");
}

static void script_ids(int32_t *ids, int op, int k, int n, int delay, int arg)
{
    int v[4] = {k, n, delay, arg};
    ids[0] = 35 + op;
    for (int i = 0; i < 4; i++) {
        ids[1 + 2 * i] = 35 + v[i] / 90;
        ids[2 + 2 * i] = 35 + v[i] % 90;
    }
}

/* The text the server must return for request k's first n_gen tokens. */
static char *expected_text(int op, int k, int n, int delay, int arg, int n_gen)
{
    int32_t *ids = malloc((9 + (size_t)n_gen) * sizeof(*ids));
    assert_non_null(ids);
    script_ids(ids, op, k, n, delay, arg);
    for (int i = 0; i < n_gen; i++) ids[9 + i] = 259 + (k * 31 + i * 17) % 253;
    unsigned flags = TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE;
    char *all, *pre;
    size_t n_all, n_pre;
    assert_int_equal(tok_detokenize_alloc(g_voc, ids, 9 + (size_t)n_gen, flags, &all, &n_all, NULL), 0);
    assert_int_equal(tok_detokenize_alloc(g_voc, ids, 9, flags, &pre, &n_pre, NULL), 0);
    assert_true(n_all >= n_pre && memcmp(all, pre, n_pre) == 0);
    memmove(all, all + n_pre, n_all - n_pre + 1);
    free(pre);
    free(ids);
    return all;
}

static char *completion_body(int op, int k, int n, int delay, int arg, const char *more)
{
    char prompt[256];
    script(prompt, sizeof(prompt), op, k, n, delay, arg);
    char *b = malloc(1024);
    snprintf(b, 1024, "{\"prompt\":%s%s%s}", prompt, more ? "," : "", more ? more : "");
    return b;
}

/* Checks timings (and usage) against what the fake produced for k. Returns
 * the number of mismatches (so threads can count them). */
static int check_timings(json_t *t, int k, int predicted_n)
{
    int bad = 0;
    bad += json_integer_value(json_object_get(t, "prompt_n")) != 9;
    bad += json_integer_value(json_object_get(t, "cached_n")) != k % 5;
    bad += json_integer_value(json_object_get(t, "predicted_n")) != predicted_n;
    bad += json_real_value(json_object_get(t, "prompt_ms")) != k * 0.5 + 0.25;
    bad += json_real_value(json_object_get(t, "predicted_ms")) != k * 1.25 + 0.5;
    return bad;
}

/* A parsed SSE stream. */
typedef struct sse {
    char text[8192];
    bool done;
    json_t *error, *usage, *timings;
    const char *finish;
    char finish_buf[16];
    int n_events;
} sse;

static void sse_parse(const char *body, sse *s)
{
    memset(s, 0, sizeof(*s));
    const char *p = body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (end == NULL) break;
        if (strncmp(p, "[DONE]", 6) == 0) {
            s->done = true;
        } else {
            json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
            s->n_events++;
            if (json_object_get(j, "error")) s->error = json_incref(json_object_get(j, "error"));
            if (json_object_get(j, "usage")) s->usage = json_incref(json_object_get(j, "usage"));
            if (json_object_get(j, "timings")) {
                json_decref(s->timings);
                s->timings = json_incref(json_object_get(j, "timings"));
            }
            json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            const char *t = json_string_value(json_object_get(c, "text"));
            if (t == NULL) t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
            if (t != NULL) strncat(s->text, t, sizeof(s->text) - strlen(s->text) - 1);
            const char *f = json_string_value(json_object_get(c, "finish_reason"));
            if (f != NULL) {
                snprintf(s->finish_buf, sizeof(s->finish_buf), "%s", f);
                s->finish = s->finish_buf;
            }
            json_decref(j);
        }
        p = end;
    }
}

static void sse_free(sse *s)
{
    json_decref(s->error);
    json_decref(s->usage);
    json_decref(s->timings);
}

/* POST /v1/completions and the parsed JSON body. */
static json_t *complete(srv *s, const char *body, int *status)
{
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", "/v1/completions", body, g_auth_header, &hr), 0);
    *status = hr.status;
    json_t *j = json_loads(hr.body, 0, NULL);
    if (j == NULL) print_message("unparsable body: %s\n", hr.body);
    http_response_free(&hr);
    return j;
}

/* A normal request k must come back exactly as the fake made it; returns
 * the replica that served it. */
static int expect_normal_replica(srv *s, int k, int n)
{
    char *body = completion_body(OP_NORMAL, k, n, 0, 0, NULL);
    int status;
    json_t *j = complete(s, body, &status);
    assert_int_equal(status, 200);
    char *want = expected_text(OP_NORMAL, k, n, 0, 0, n);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), want);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    assert_int_equal(check_timings(json_object_get(j, "timings"), k, n + 1), 0);
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), 9);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), n + 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), k % 5);
    int replica = (int)json_integer_value(json_object_get(json_object_get(j, "timings"), "replica"));
    free(want);
    free(body);
    json_decref(j);
    return replica;
}

static void expect_normal(srv *s, int k, int n)
{
    expect_normal_replica(s, k, n);
}

/* Opens a streamed request and reads until its first data event. */
static int open_stream_until_first_event(srv *s, const char *body)
{
    int fd = http_connect(s->port, 30);
    assert_true(fd >= 0);
    assert_int_equal(http_send_request(fd, "POST", "/v1/completions", body, NULL), 0);
    char buf[4096];
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t k = http_recv_some(fd, buf + len, sizeof(buf) - 1 - len);
        assert_true(k > 0);
        len += (size_t)k;
        buf[len] = '\0';
        if (strstr(buf, "data: ") != NULL) break;
    }
    return fd;
}

/* Polls /metrics until `line` appears (bounded). */
static void wait_metric(srv *s, const char *line)
{
    for (int i = 0; i < 400; i++) {
        http_response hr;
        if (http_do(s->port, "GET", "/metrics", NULL, g_auth_header, &hr) == 0) {
            bool found = strstr(hr.body, line) != NULL;
            http_response_free(&hr);
            if (found) return;
        }
        usleep(25 * 1000);
    }
    fail_msg("metric never reached: %s", line);
}

/* --- tests --- */

static void test_ends_at_eos_and_length(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 2, 8, NULL);
    expect_normal(&s, 11, 5);
    char *body = completion_body(OP_NORMAL, 12, 20, 0, 0, "\"max_tokens\":3");
    int status;
    json_t *j = complete(&s, body, &status);
    assert_int_equal(status, 200);
    char *want = expected_text(OP_NORMAL, 12, 20, 0, 0, 3);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), want);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    assert_int_equal(check_timings(json_object_get(j, "timings"), 12, 3), 0);
    free(want);
    free(body);
    json_decref(j);
    srv_stop(&s);
}

static void test_stream_with_usage(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 2, 8, NULL);
    char *body = completion_body(OP_NORMAL, 21, 6, 2, 0, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    http_response hr;
    assert_int_equal(http_do(s.port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    assert_non_null(strcasestr(hr.headers, "Content-Type: text/event-stream"));
    sse ev;
    sse_parse(hr.body, &ev);
    char *want = expected_text(OP_NORMAL, 21, 6, 2, 0, 6);
    assert_string_equal(ev.text, want);
    assert_true(ev.done);
    assert_null(ev.error);
    assert_string_equal(ev.finish, "stop");
    assert_non_null(ev.usage);
    assert_int_equal(json_integer_value(json_object_get(ev.usage, "completion_tokens")), 7);
    assert_int_equal(check_timings(ev.timings, 21, 7), 0);
    sse_free(&ev);
    free(want);
    free(body);
    http_response_free(&hr);
    srv_stop(&s);
}

static void test_stop_string(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *full = expected_text(OP_NORMAL, 31, 30, 0, 0, 30);
    size_t L = strlen(full);
    assert_true(L > 10);
    size_t at = L / 3; /* two ASCII letters from the middle on */
    while (at + 1 < L && !(isalpha((unsigned char)full[at]) && isalpha((unsigned char)full[at + 1]))) at++;
    assert_true(at + 1 < L);
    char stop[3] = {full[at], full[at + 1], 0};
    size_t n_want = 0;
    while (n_want + 1 < L && !(full[n_want] == stop[0] && full[n_want + 1] == stop[1])) n_want++;
    char more[64];
    snprintf(more, sizeof(more), "\"stop\":[\"%s\"]", stop);
    assert_null(strpbrk(stop, "\"\\"));
    char *body = completion_body(OP_NORMAL, 31, 30, 0, 0, more);
    int status;
    json_t *j = complete(&s, body, &status);
    assert_int_equal(status, 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(c, "text"));
    assert_int_equal(strlen(text), n_want);
    assert_memory_equal(text, full, n_want);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    json_decref(j);
    free(body);
    free(full);
    expect_normal(&s, 32, 3); /* the slot came back */
    srv_stop(&s);
}

/* A client that leaves mid-stream frees its slot (the engine got `stop`). */
static void test_client_closes_early(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *body = completion_body(OP_LATE_DONE, 41, 0, 10, 0, "\"stream\":true");
    int fd = open_stream_until_first_event(&s, body);
    close(fd);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
    expect_normal(&s, 42, 4);
    free(body);
    srv_stop(&s);
}

/* `done` of a request whose client left arrives late, while the next request
 * waits for that slot: the next request gets its own stats, not those. */
static void test_late_done_not_mixed(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *body = completion_body(OP_LATE_DONE, 51, 0, 5, 300, "\"stream\":true");
    int fd = open_stream_until_first_event(&s, body);
    close(fd);
    expect_normal(&s, 52, 3);
    free(body);
    srv_stop(&s);
}

/* The handler fails after the engine started (the engine sent a token the
 * vocab does not have): an error (the engine's fault: 503), and the slot is
 * kept until `done`. */
static void test_handler_fails_after_start(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *body = completion_body(OP_BAD_TOKEN, 61, 0, 5, 100, NULL);
    int status;
    json_t *j = complete(&s, body, &status);
    assert_int_equal(status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "bad_engine_output");
    json_decref(j);
    expect_normal(&s, 62, 2);
    free(body);
    srv_stop(&s);
}

static void test_engine_err(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *body = completion_body(OP_ERR, 71, 0, 0, 2, NULL);
    int status;
    json_t *j = complete(&s, body, &status);
    assert_int_equal(status, 503); /* the engine failed: worth a retry */
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "fake failure 71"));
    json_decref(j);
    free(body);
    /* streamed: tokens, then a final error event */
    body = completion_body(OP_ERR, 72, 0, 0, 2, "\"stream\":true");
    http_response hr;
    assert_int_equal(http_do(s.port, "POST", "/v1/completions", body, NULL, &hr), 0);
    sse ev;
    sse_parse(hr.body, &ev);
    assert_non_null(ev.error);
    assert_non_null(strstr(json_string_value(json_object_get(ev.error, "message")), "fake failure 72"));
    char *want = expected_text(OP_ERR, 72, 0, 0, 2, 2);
    assert_string_equal(ev.text, want);
    free(want);
    sse_free(&ev);
    http_response_free(&hr);
    free(body);
    expect_normal(&s, 73, 2);
    srv_stop(&s);
}

/* One engine dies mid-stream: its request ends with an error event, the other
 * replica's stream finishes intact, and the dead one is restarted. */
static void test_engine_dies_others_continue(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 1, 8, NULL);
    char *a_body = completion_body(OP_NORMAL, 81, 30, 20, 0, "\"stream\":true");
    int fd_a = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions", a_body, NULL), 0);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 1");
    char *b_body = completion_body(OP_DIE, 82, 0, 5, 3, "\"stream\":true");
    http_response hb;
    assert_int_equal(http_do(s.port, "POST", "/v1/completions", b_body, NULL, &hb), 0);
    sse eb;
    sse_parse(hb.body, &eb);
    assert_non_null(eb.error);
    assert_string_equal(json_string_value(json_object_get(eb.error, "code")), "engine_died");
    char *want_b = expected_text(OP_DIE, 82, 0, 5, 3, 3);
    assert_string_equal(eb.text, want_b);
    http_response ha;
    assert_int_equal(http_read_response(fd_a, &ha), 0);
    close(fd_a);
    sse ea;
    sse_parse(ha.body, &ea);
    assert_null(ea.error);
    char *want_a = expected_text(OP_NORMAL, 81, 30, 20, 0, 30);
    assert_string_equal(ea.text, want_a);
    assert_int_equal(check_timings(ea.timings, 81, 31), 0);
    assert_int_equal(json_integer_value(json_object_get(ea.timings, "replica")), 0);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"1\"} 1");
    wait_metric(&s, "strata_replica_ready{replica=\"1\"} 1");
    expect_normal(&s, 83, 2);
    sse_free(&ea);
    sse_free(&eb);
    free(want_a);
    free(want_b);
    free(a_body);
    free(b_body);
    http_response_free(&ha);
    http_response_free(&hb);
    srv_stop(&s);
}

/* A request cancelled while queued never reaches an engine. */
static void test_cancel_while_queued(void **state)
{
    (void)state;
    char log[600];
    snprintf(log, sizeof(log), "%s/fake-%d.log", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_LOG", log, 1);
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    unsetenv("FAKE_ENGINE_LOG");
    char *a_body = completion_body(OP_SILENT, 91, 0, 0, 0, "\"stream\":true");
    int fd_a = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions", a_body, NULL), 0);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 1");
    char *b_body = completion_body(OP_NORMAL, 92, 3, 0, 0, NULL);
    int fd_b = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_b, "POST", "/v1/completions", b_body, NULL), 0);
    wait_metric(&s, "strata_queue_depth 1");
    close(fd_b);
    wait_metric(&s, "strata_queue_depth 0");
    close(fd_a);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
    expect_normal(&s, 93, 2);
    srv_stop(&s);
    size_t n;
    char *raw = testdata_read_file(log, &n);
    assert_non_null(raw);
    char *seen = strndup(raw, n); /* testdata_read_file gives bytes, not a string */
    free(raw);
    assert_non_null(strstr(seen, "gen 91\n"));
    assert_non_null(strstr(seen, "gen 93\n"));
    assert_null(strstr(seen, "gen 92\n"));
    free(seen);
    free(a_body);
    free(b_body);
}

/* 4 callers x 80 requests over 2 replicas x 2 slots: every response has
 * exactly its own text and timings. */
typedef struct caller {
    srv *s;
    int index;
    int bad;
} caller;

static void *caller_main(void *arg)
{
    caller *c = arg;
    for (int i = 0; i < 80; i++) {
        int k = 100 + c->index * 80 + i, n = 1 + k % 4;
        char *body = completion_body(OP_NORMAL, k, n, k % 3, 0, NULL);
        http_response hr;
        if (http_do(c->s->port, "POST", "/v1/completions", body, NULL, &hr) != 0) {
            c->bad++;
            free(body);
            continue;
        }
        json_t *j = json_loads(hr.body, 0, NULL);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        char *want = expected_text(OP_NORMAL, k, n, k % 3, 0, n);
        const char *got = json_string_value(json_object_get(ch, "text"));
        if (hr.status != 200 || got == NULL || strcmp(got, want) != 0) c->bad++;
        c->bad += check_timings(json_object_get(j, "timings"), k, n + 1);
        free(want);
        json_decref(j);
        http_response_free(&hr);
        free(body);
    }
    return NULL;
}

static void test_four_callers_never_mixed(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 2, 64, NULL);
    pthread_t t[4];
    caller c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (caller){.s = &s, .index = i};
        assert_int_equal(pthread_create(&t[i], NULL, caller_main, &c[i]), 0);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        bad += c[i].bad;
    }
    assert_int_equal(bad, 0);
    wait_metric(&s, "strata_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 320");
    srv_stop(&s);
}

static int status_of(srv *s, const char *method, const char *path, const char *body,
                     const char *extra, char **headers);

/* --- raw streams, read at the test's own pace --- */

typedef struct rawbuf {
    char *data;
    size_t len, cap;
} rawbuf;

static void rawbuf_append(rawbuf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        b->data = realloc(b->data, cap);
        assert_non_null(b->data);
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static size_t count_events(const rawbuf *b)
{
    size_t n = 0;
    for (const char *p = b->data; p != NULL && (p = strstr(p, "data: ")) != NULL; p += 6) n++;
    return n;
}

/* A client socket that takes little at a time: its receive buffer is as
 * small as the kernel allows, and its segments small (both set before
 * connecting). On loopback the server's send buffer grows with the peer's
 * segment size, to megabytes with the default one; with small segments it
 * stays at tens of kilobytes, so a client that stops reading soon blocks the
 * server's writes to it, which is the case under test. */
static int connect_small_rcvbuf(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int small = 1024, mss = 536;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss)), 0);
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Reads until b holds at least min_events SSE events (bounded by the
 * socket's receive timeout). */
static void read_events(int fd, rawbuf *b, size_t min_events)
{
    char chunk[4096];
    while (count_events(b) < min_events) {
        ssize_t k = http_recv_some(fd, chunk, sizeof(chunk));
        assert_true(k > 0);
        rawbuf_append(b, chunk, (size_t)k);
    }
}

/* Reads to the end in small pieces with a pause between them. */
static void read_slowly_to_end(int fd, rawbuf *b)
{
    char chunk[512];
    for (int i = 0; i < 200000; i++) { /* bounded: the stream is far shorter */
        ssize_t k = http_recv_some(fd, chunk, sizeof(chunk));
        assert_true(k >= 0);
        if (k == 0) return;
        rawbuf_append(b, chunk, (size_t)k);
        usleep(300);
    }
    fail_msg("the stream never ended");
}

/* The SSE events of a raw chunked response (status must be 200). */
static void raw_parse_sse(rawbuf *b, sse *ev)
{
    int status = 0;
    assert_int_equal(sscanf(b->data, "HTTP/1.%*d %d", &status), 1);
    assert_int_equal(status, 200);
    char *body = strstr(b->data, "\r\n\r\n");
    assert_non_null(body);
    body += 4;
    http_dechunk(body, b->len - (size_t)(body - b->data));
    sse_parse(body, ev);
}

/* A slow consumer: a streaming client with a tiny receive buffer that stops
 * reading after its first event while its engine produces hundreds of
 * tokens. The server buffers that request's ids (bounded by its max_tokens)
 * instead of pushing back on the engine: the engine finishes and frees the
 * slot, requests on both replicas complete meanwhile, and the slow client
 * later reads every token, exactly, and its own timings. */
static void test_slow_consumer(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 2, 8, "--ctx", "2048", NULL);
    enum { N_SLOW = 800 };
    char *a_body = completion_body(OP_NORMAL, 201, N_SLOW, 1, 0, "\"stream\":true");
    int fd_a = connect_small_rcvbuf(s.port);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions", a_body, NULL), 0);
    rawbuf ra = {0};
    read_events(fd_a, &ra, 1);
    /* A is not read from here on. Other requests, streamed and not: */
    char *b_body = completion_body(OP_NORMAL, 202, 12, 2, 0, "\"stream\":true");
    int fd_b = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_b, "POST", "/v1/completions", b_body, NULL), 0);
    expect_normal(&s, 203, 5);
    expect_normal(&s, 204, 3);
    http_response hb;
    assert_int_equal(http_read_response(fd_b, &hb), 0);
    close(fd_b);
    sse eb;
    sse_parse(hb.body, &eb);
    char *want_b = expected_text(OP_NORMAL, 202, 12, 2, 0, 12);
    assert_string_equal(eb.text, want_b);
    assert_true(eb.done);
    assert_int_equal(check_timings(eb.timings, 202, 13), 0);
    /* A's engine finished and gave its slot back although its client has
     * read one event: nothing waits on that client. */
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
    wait_metric(&s, "strata_replica_in_flight{replica=\"1\"} 0");
    expect_normal(&s, 205, 4);
    /* Now A reads, slowly, and gets everything. */
    read_slowly_to_end(fd_a, &ra);
    close(fd_a);
    sse ea;
    raw_parse_sse(&ra, &ea);
    char *want_a = expected_text(OP_NORMAL, 201, N_SLOW, 1, 0, N_SLOW);
    assert_true(strlen(want_a) < sizeof(ea.text) - 1);
    assert_null(ea.error);
    assert_string_equal(ea.text, want_a);
    assert_true(ea.done);
    assert_string_equal(ea.finish, "stop");
    assert_int_equal(check_timings(ea.timings, 201, N_SLOW + 1), 0);
    sse_free(&ea);
    sse_free(&eb);
    free(want_a);
    free(want_b);
    free(ra.data);
    free(a_body);
    free(b_body);
    http_response_free(&hb);
    srv_stop(&s);
}

/* What bounds the ids a request buffers: an engine that sends a request more
 * tokens than its max_tokens breaks the protocol. The server kills it, the
 * request gets a 503, and the engine is started again. */
static void test_engine_overrun_is_a_fault(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    char *body = completion_body(OP_OVERRUN, 211, 10, 0, 0, "\"max_tokens\":3");
    int status;
    json_t *j = complete(&s, body, &status);
    assert_int_equal(status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "engine_died");
    json_decref(j);
    free(body);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
    wait_metric(&s, "strata_replica_ready{replica=\"0\"} 1");
    /* within its limit the same op is a normal request */
    body = completion_body(OP_OVERRUN, 212, 10, 0, 0, "\"max_tokens\":11");
    j = complete(&s, body, &status);
    assert_int_equal(status, 200);
    char *want = expected_text(OP_OVERRUN, 212, 10, 0, 0, 10);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), want);
    free(want);
    json_decref(j);
    free(body);
    srv_stop(&s);
}

static char *read_log(const char *path)
{
    size_t n;
    char *raw = testdata_read_file(path, &n);
    assert_non_null(raw);
    char *text = strndup(raw, n); /* testdata_read_file gives bytes, not a string */
    free(raw);
    return text;
}

/* The engine dies while draining a `stop`: a client leaves, the server sends
 * `stop`, and the engine exits (mode 0) or closes its stdout (mode 1) before
 * any `done`. The cancelled request, which still held its slot, is released
 * once (ASan: no leak, no double free); the replica restarts; a stream on
 * the other replica goes on untouched; the next request on the restarted
 * replica is served. */
static void test_engine_dies_draining_stop(void **state)
{
    (void)state;
    char log[600];
    snprintf(log, sizeof(log), "%s/fake-drain-%d.log", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_LOG", log, 1);
    srv s;
    srv_start(&s, 2, 2, 8, NULL);
    unsetenv("FAKE_ENGINE_LOG");
    /* H streams on replica 0 (ties go to the lowest index) until we leave */
    char *h_body = completion_body(OP_LATE_DONE, 301, 0, 10, 0, "\"stream\":true");
    int fd_h = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_h, "POST", "/v1/completions", h_body, NULL), 0);
    rawbuf rh = {0};
    read_events(fd_h, &rh, 1);
    for (int mode = 0; mode < 2; mode++) {
        int k = 302 + 10 * mode;
        /* replica 1 has more free slots than replica 0 (H): A goes there */
        char *a_body = completion_body(OP_STOP_DIES, k, mode, 5, 50, "\"stream\":true");
        int fd_a = open_stream_until_first_event(&s, a_body);
        close(fd_a); /* the server sends `stop`; the engine dies 50 ms later */
        char line[128];
        snprintf(line, sizeof(line), "strata_engine_restarts_total{replica=\"1\"} %d", mode + 1);
        wait_metric(&s, line);
        wait_metric(&s, "strata_replica_ready{replica=\"1\"} 1");
        wait_metric(&s, "strata_replica_in_flight{replica=\"1\"} 0");
        /* H still holds replica 0: this one goes to the restarted replica */
        assert_int_equal(expect_normal_replica(&s, k + 1, 3), 1);
        read_events(fd_h, &rh, count_events(&rh) + 2); /* H keeps streaming */
        char *seen = read_log(log);
        char want_stop[32];
        snprintf(want_stop, sizeof(want_stop), "stop %d\n", k);
        assert_non_null(strstr(seen, want_stop)); /* it died draining, not before */
        free(seen);
        free(a_body);
    }
    close(fd_h);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
    /* what H got is its own tokens, in order, with no error */
    char *body = strstr(rh.data, "\r\n\r\n");
    assert_non_null(body);
    body += 4;
    http_dechunk(body, rh.len - (size_t)(body - rh.data));
    sse eh;
    sse_parse(body, &eh);
    assert_null(eh.error);
    char *want_h = expected_text(OP_LATE_DONE, 301, 0, 10, 0, 2000);
    assert_true(strlen(eh.text) > 0 && strlen(eh.text) <= strlen(want_h));
    assert_memory_equal(eh.text, want_h, strlen(eh.text));
    free(want_h);
    sse_free(&eh);
    expect_normal(&s, 330, 2);
    free(rh.data);
    free(h_body);
    srv_stop(&s);
}

/* A client that leaves while its request is in the engine but before any
 * token (prefill: the fake engine stays silent), streaming or not: the
 * server sends `stop` for it, the slot comes back, and the next request on
 * that replica is served. */
static void test_client_leaves_during_prefill(void **state)
{
    (void)state;
    char log[600];
    snprintf(log, sizeof(log), "%s/fake-prefill-%d.log", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_LOG", log, 1);
    srv s;
    srv_start(&s, 1, 1, 8, NULL);
    unsetenv("FAKE_ENGINE_LOG");
    for (int streaming = 0; streaming < 2; streaming++) {
        int k = 350 + streaming;
        char *body = completion_body(OP_SILENT, k, 0, 0, 0,
                                     streaming ? "\"stream\":true" : "\"stream\":false");
        int fd = http_connect(s.port, 30);
        assert_int_equal(http_send_request(fd, "POST", "/v1/completions", body, NULL), 0);
        wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 1");
        char want_gen[32], want_stop[32];
        snprintf(want_gen, sizeof(want_gen), "gen %d\n", k);
        snprintf(want_stop, sizeof(want_stop), "stop %d\n", k);
        for (int i = 0; i < 500; i++) { /* until the engine has it */
            size_t n;
            char *raw = testdata_read_file(log, &n);
            bool there = raw != NULL && memmem(raw, n, want_gen, strlen(want_gen)) != NULL;
            free(raw);
            if (there) break;
            usleep(10000);
        }
        close(fd);
        wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
        char *seen = read_log(log);
        assert_non_null(strstr(seen, want_gen));
        assert_non_null(strstr(seen, want_stop));
        free(seen);
        expect_normal(&s, k + 10, 2);
        free(body);
    }
    srv_stop(&s);
}

/* Sends a request and leaves the response for later. */
static int send_later(srv *s, const char *body)
{
    int fd = http_connect(s->port, 30);
    assert_true(fd >= 0);
    assert_int_equal(http_send_request(fd, "POST", "/v1/completions", body, NULL), 0);
    return fd;
}

static int touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* Requests that arrive while the only engine is down wait in the queue for
 * its restart (within the queue's bound; past it they get 503 at once) and
 * are then served first come first served, streamed or not. */
static void test_queued_wait_for_restart(void **state)
{
    (void)state;
    char log[600], gate[600];
    snprintf(log, sizeof(log), "%s/fake-fifo-%d.log", testdata_scratch_dir(), (int)getpid());
    snprintf(gate, sizeof(gate), "%s/hold-%d", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_LOG", log, 1);
    setenv("FAKE_ENGINE_HOLD", gate, 1);
    srv s;
    srv_start(&s, 1, 1, 2, NULL);
    unsetenv("FAKE_ENGINE_LOG");
    unsetenv("FAKE_ENGINE_HOLD");
    assert_int_equal(touch(gate), 0); /* the next start holds back `ready` */
    char *a_body = completion_body(OP_DIE, 401, 0, 0, 1, NULL);
    int status;
    json_t *j = complete(&s, a_body, &status);
    assert_int_equal(status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "engine_died");
    json_decref(j);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
    assert_int_equal(status_of(&s, "GET", "/health", NULL, NULL, NULL), 503);
    char *b_body = completion_body(OP_NORMAL, 402, 3, 0, 0, NULL);
    int fd_b = send_later(&s, b_body);
    wait_metric(&s, "strata_queue_depth 1");
    char *c_body = completion_body(OP_NORMAL, 403, 4, 1, 0, "\"stream\":true");
    int fd_c = send_later(&s, c_body);
    wait_metric(&s, "strata_queue_depth 2");
    /* the queue (2) is full and no engine is ready: 503 at once */
    char *d_body = completion_body(OP_NORMAL, 404, 2, 0, 0, NULL);
    j = complete(&s, d_body, &status);
    assert_int_equal(status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "no_engine");
    json_decref(j);
    assert_int_equal(unlink(gate), 0); /* the engine gets ready */
    http_response hb;
    assert_int_equal(http_read_response(fd_b, &hb), 0);
    close(fd_b);
    assert_int_equal(hb.status, 200);
    j = json_loads(hb.body, 0, NULL);
    char *want_b = expected_text(OP_NORMAL, 402, 3, 0, 0, 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")), want_b);
    assert_int_equal(check_timings(json_object_get(j, "timings"), 402, 4), 0);
    json_decref(j);
    http_response hc;
    assert_int_equal(http_read_response(fd_c, &hc), 0);
    close(fd_c);
    assert_int_equal(hc.status, 200);
    sse ec;
    sse_parse(hc.body, &ec);
    char *want_c = expected_text(OP_NORMAL, 403, 4, 1, 0, 4);
    assert_null(ec.error);
    assert_string_equal(ec.text, want_c);
    assert_true(ec.done);
    assert_int_equal(check_timings(ec.timings, 403, 5), 0);
    srv_stop(&s);
    /* the engines saw A, then B, then C; never D */
    char *seen = read_log(log);
    char *pa = strstr(seen, "gen 401\n"), *pb = strstr(seen, "gen 402\n"), *pc = strstr(seen, "gen 403\n");
    assert_non_null(pa);
    assert_non_null(pb);
    assert_non_null(pc);
    assert_true(pa < pb && pb < pc);
    assert_null(strstr(seen, "gen 404\n"));
    free(seen);
    sse_free(&ec);
    http_response_free(&hb);
    http_response_free(&hc);
    free(want_b);
    free(want_c);
    free(a_body);
    free(b_body);
    free(c_body);
    free(d_body);
}

/* The engine keeps failing to start: a queued request gets 503 `no_engine`
 * once the replica has failed 3 starts in a row, later requests get it at
 * once, and requests are served again when a start succeeds. */
static void test_queued_fails_when_engine_keeps_failing(void **state)
{
    (void)state;
    char gate[600], crash[600];
    snprintf(gate, sizeof(gate), "%s/hold2-%d", testdata_scratch_dir(), (int)getpid());
    snprintf(crash, sizeof(crash), "%s/crash-%d", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_HOLD", gate, 1);
    setenv("FAKE_ENGINE_CRASH", crash, 1);
    srv s;
    srv_start(&s, 1, 1, 4, NULL);
    unsetenv("FAKE_ENGINE_HOLD");
    unsetenv("FAKE_ENGINE_CRASH");
    assert_int_equal(touch(gate), 0);
    char *a_body = completion_body(OP_DIE, 411, 0, 0, 0, NULL);
    int status;
    json_t *j = complete(&s, a_body, &status);
    assert_int_equal(status, 503);
    json_decref(j);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
    /* the restarted engine holds: B waits in the queue */
    char *b_body = completion_body(OP_NORMAL, 412, 3, 0, 0, NULL);
    int fd_b = send_later(&s, b_body);
    wait_metric(&s, "strata_queue_depth 1");
    /* from here every start fails (the held one too) */
    assert_int_equal(touch(crash), 0);
    http_response hb;
    assert_int_equal(http_read_response(fd_b, &hb), 0);
    close(fd_b);
    assert_int_equal(hb.status, 503);
    assert_non_null(strcasestr(hb.headers, "Retry-After:"));
    j = json_loads(hb.body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "no_engine");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "failed 3 starts"));
    json_decref(j);
    wait_metric(&s, "strata_queue_depth 0");
    /* while it keeps failing, a new request is not held */
    char *c_body = completion_body(OP_NORMAL, 413, 3, 0, 0, "\"stream\":true");
    j = complete(&s, c_body, &status);
    assert_int_equal(status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "no_engine");
    json_decref(j);
    /* starts succeed again */
    assert_int_equal(unlink(crash), 0);
    assert_int_equal(unlink(gate), 0);
    wait_metric(&s, "strata_replica_ready{replica=\"0\"} 1");
    expect_normal(&s, 414, 3);
    http_response_free(&hb);
    free(a_body);
    free(b_body);
    free(c_body);
    srv_stop(&s);
}

static int status_of(srv *s, const char *method, const char *path, const char *body,
                     const char *extra, char **headers)
{
    http_response hr;
    assert_int_equal(http_do(s->port, method, path, body, extra, &hr), 0);
    int st = hr.status;
    if (st >= 400 && st != 413) {
        json_t *j = json_loads(hr.body, 0, NULL);
        json_t *e = json_object_get(j, "error");
        assert_true(json_is_string(json_object_get(e, "message")));
        assert_true(json_is_string(json_object_get(e, "type")));
        json_decref(j);
    }
    if (headers != NULL) *headers = strdup(hr.headers);
    http_response_free(&hr);
    return st;
}

static void test_http_errors(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 0, "--api-key", "sekret", "--max-body-bytes", "4096", NULL);
    const char *key = "Authorization: Bearer sekret\r\n";
    g_auth_header = key;
    char *ok = completion_body(OP_NORMAL, 5, 2, 0, 0, NULL);
    assert_int_equal(status_of(&s, "GET", "/health", NULL, NULL, NULL), 200);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", ok, NULL, NULL), 401);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", ok, "Authorization: Bearer sekreT\r\n", NULL), 401);
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, NULL, NULL), 401);
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, key, NULL), 200);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", ok, key, NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/v1/nothing", NULL, key, NULL), 404);
    assert_int_equal(status_of(&s, "GET", "/v1/completions", NULL, key, NULL), 405);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":", key, NULL), 400);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"n\":17}", key, NULL), 400);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":[1,99999]}", key, NULL), 400);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"temperature\":\"hot\"}", key, NULL), 400);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", key, NULL), 400);
    assert_int_equal(status_of(&s, "POST", "/v1/completions", "{\"prompt\":\"a\",\"model\":\"gpt-9\"}", key, NULL), 404);
    assert_int_equal(status_of(&s, "POST", "/v1/chat/completions", "{\"messages\":[]}", key, NULL), 400);
    char *big = malloc(8192);
    memset(big, ' ', 8191);
    big[8191] = '\0';
    assert_int_equal(status_of(&s, "POST", "/v1/completions", big, key, NULL), 413);
    free(big);
    /* queue of 0 and the only slot busy: 429 with Retry-After */
    char *a_body = completion_body(OP_SILENT, 6, 0, 0, 0, "\"stream\":true");
    int fd_a = http_connect(s.port, 30);
    char hdr[128];
    snprintf(hdr, sizeof(hdr), "%s", key);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions", a_body, hdr), 0);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 1");
    char *headers = NULL;
    assert_int_equal(status_of(&s, "POST", "/v1/completions", ok, key, &headers), 429);
    assert_non_null(strcasestr(headers, "Retry-After:"));
    free(headers);
    close(fd_a);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 0");
    assert_int_equal(status_of(&s, "POST", "/v1/completions", ok, key, NULL), 200);
    free(a_body);
    free(ok);
    srv_stop(&s);
    g_auth_header = NULL;
}

/* --- the watchdog (pool.h "Liveness") --- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The watchdog's floor in these tests, and how long past its bound a
 * detection may come: one ping interval (1 s), plus slack for a loaded or
 * sanitized machine (a guard against a watchdog that never fires, not a
 * measure of speed). */
#define WD_FLOOR_MS 1000
#define WD_SLACK_S 20.0

/* Reads a response to its end, failing after limit_s (a server that sends
 * SSE keep-alives but never ends the stream must not hang the test). */
static void read_to_end_within(int fd, rawbuf *b, double limit_s)
{
    double end = now_s() + limit_s;
    char chunk[4096];
    for (;;) {
        if (now_s() > end) fail_msg("the response did not end within %.0f s", limit_s);
        ssize_t k = http_recv_some(fd, chunk, sizeof(chunk));
        if (k == 0) return;
        assert_true(k > 0);
        rawbuf_append(b, chunk, (size_t)k);
    }
}

/* An engine wedged inside a step (pongs keep coming, its step never ends)
 * and one wedged outside any step (no step runs, the count is frozen) are
 * each killed and restarted within the documented bound; their requests get
 * a 503 (a final SSE error event when streaming) that says why, while a
 * stream on the other replica goes on and ends intact. */
static void test_wedged_engine_is_replaced(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 1, 8, "--wedge-floor-ms", "1000", NULL);
    /* A streams on replica 0 for about 2 s */
    char *a_body = completion_body(OP_NORMAL, 501, 40, 50, 0, "\"stream\":true");
    int fd_a = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_a, "POST", "/v1/completions", a_body, NULL), 0);
    wait_metric(&s, "strata_replica_in_flight{replica=\"0\"} 1");
    /* W gets 2 tokens on replica 1, then its engine hangs inside a step of 8
     * tokens: bound 1000 + 8 x max(1, 10 x 0.5) ms */
    char *w_body = completion_body(OP_WEDGE, 502, 8, 5, 2, "\"stream\":true");
    int fd_w = http_connect(s.port, 30);
    assert_int_equal(http_send_request(fd_w, "POST", "/v1/completions", w_body, NULL), 0);
    rawbuf rw = {0};
    read_to_end_within(fd_w, &rw, (WD_FLOOR_MS + 8 * 5) / 1000.0 + 1.0 + WD_SLACK_S);
    close(fd_w);
    sse ew;
    raw_parse_sse(&rw, &ew);
    assert_non_null(ew.error);
    assert_string_equal(json_string_value(json_object_get(ew.error, "code")), "engine_died");
    assert_non_null(strstr(json_string_value(json_object_get(ew.error, "message")),
                           "stopped making progress"));
    char *want_w = expected_text(OP_WEDGE, 502, 8, 5, 2, 2);
    assert_string_equal(ew.text, want_w);
    /* A never noticed */
    http_response ha;
    assert_int_equal(http_read_response(fd_a, &ha), 0);
    close(fd_a);
    sse ea;
    sse_parse(ha.body, &ea);
    assert_null(ea.error);
    char *want_a = expected_text(OP_NORMAL, 501, 40, 50, 0, 40);
    assert_string_equal(ea.text, want_a);
    assert_true(ea.done);
    assert_int_equal(check_timings(ea.timings, 501, 41), 0);
    assert_int_equal(json_integer_value(json_object_get(ea.timings, "replica")), 0);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"1\"} 1");
    wait_metric(&s, "strata_replica_ready{replica=\"1\"} 1");
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 0");
    /* wedged outside any step, not streamed: both replicas are free, so it
     * goes to replica 0; bound: the floor */
    char *x_body = completion_body(OP_WEDGE, 503, 0, 0, 1, NULL);
    double t0 = now_s();
    int status;
    json_t *j = complete(&s, x_body, &status); /* fails after 30 s of silence */
    assert_true(now_s() - t0 < WD_FLOOR_MS / 1000.0 + 1.0 + WD_SLACK_S);
    assert_int_equal(status, 503);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "engine_died");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "stopped making progress"));
    json_decref(j);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
    wait_metric(&s, "strata_replica_ready{replica=\"0\"} 1");
    expect_normal(&s, 504, 3);
    srv_stop(&s);
    char *log = read_log(s.log);
    assert_non_null(strstr(log, "wedged: a step of 8 tokens has run"));
    assert_non_null(strstr(log, "wedged: no step completed"));
    free(log);
    sse_free(&ea);
    sse_free(&ew);
    free(want_a);
    free(want_w);
    free(a_body);
    free(w_body);
    free(x_body);
    free(rw.data);
    http_response_free(&ha);
}

/* A long step is not a wedge when its size accounts for it: one step of
 * 2000 tokens that runs 3.5 s, past the 1 s floor, is within 1000 + 2000 x
 * 5 ms (the per-token allowance learned from the engine's 0.5 ms per token)
 * and completes untouched. With the allowance fixed small by
 * --wedge-per-token-ms (1000 + 2000 x 0.1 ms), the same step is a wedge. */
static void test_long_step_is_not_a_wedge(void **state)
{
    (void)state;
    for (int fixed = 0; fixed < 2; fixed++) {
        srv s;
        if (fixed) srv_start(&s, 1, 1, 8, "--wedge-floor-ms", "1000", "--wedge-per-token-ms", "0.1", NULL);
        else srv_start(&s, 1, 1, 8, "--wedge-floor-ms", "1000", NULL);
        int k = 511 + fixed;
        char *body = completion_body(OP_LONG_STEP, k, 2000, 3500, 3, NULL);
        int status;
        json_t *j = complete(&s, body, &status);
        if (!fixed) {
            assert_int_equal(status, 200);
            char *want = expected_text(OP_LONG_STEP, k, 2000, 3500, 3, 3);
            json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c, "text")), want);
            free(want);
            wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 0");
        } else {
            assert_int_equal(status, 503);
            assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                                   "stopped making progress"));
            wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
        }
        json_decref(j);
        free(body);
        wait_metric(&s, "strata_replica_ready{replica=\"0\"} 1");
        expect_normal(&s, k + 10, 2);
        srv_stop(&s);
    }
}

/* The whole chain with the real engine: STRATA_TEST_HANG_AT_STEP=3 in the
 * server's environment reaches its engine, which hangs inside its third
 * step while answering pings; the watchdog (bound: the floor plus the
 * allowance learned from the engine's own first two steps) restarts it, the
 * request gets a 503, and the restarted engine serves a request of two
 * steps. */
static void test_real_engine_hang_is_caught(void **state)
{
    (void)state;
    static int n;
    const char *dir = testdata_scratch_dir();
    char port_file[512], log[512];
    snprintf(port_file, sizeof(port_file), "%s/port-hang-%d-%d", dir, (int)getpid(), n);
    snprintf(log, sizeof(log), "%s/serve-hang-%d.log", dir, n++);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--replicas", "1", "--slots", "1",
                          "-t", "1", "--wedge-floor-ms", "1000", "--port", "0", "--port-file",
                          port_file, NULL};
    setenv("STRATA_TEST_HANG_AT_STEP", "3", 1);
    srv s;
    s.port = st_spawn(argv, port_file, log, 1);
    s.pid = g_live_pid; /* set by st_spawn: after it, not in one initializer */
    unsetenv("STRATA_TEST_HANG_AT_STEP");
    snprintf(s.log, sizeof(s.log), "%s", log);
    double t0 = now_s();
    int status;
    json_t *j = complete(&s, "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"temperature\":0}",
                         &status);
    assert_true(now_s() - t0 < WD_FLOOR_MS / 1000.0 + 1.0 + WD_SLACK_S);
    assert_int_equal(status, 503);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "engine_died");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "stopped making progress"));
    json_decref(j);
    wait_metric(&s, "strata_engine_restarts_total{replica=\"0\"} 1");
    wait_metric(&s, "strata_replica_ready{replica=\"0\"} 1");
    j = complete(&s, "{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"temperature\":0}", &status);
    assert_int_equal(status, 200);
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 2);
    json_decref(j);
    srv_stop(&s);
    char *text = read_log(log);
    assert_non_null(strstr(text, "wedged: a step of 1 tokens has run"));
    free(text);
}

/* After each test: a server left by a failed assertion is killed. */
static int kill_leftover(void **state)
{
    g_auth_header = NULL;
    return st_kill_leftover(state);
}

/* /metrics carries each replica's KV figures from its engine's latest pong,
 * and vLLM's names over all replicas. The fake's figures (fake_engine.c) are
 * known: 16 blocks, one used per live request, 3 cached, 1024 bytes (512
 * committed), the
 * prompt tokens of its gens looked up and their k % 5 hit, 2 preemptions. */
static void test_metrics_kv_per_replica(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 1, 8, NULL);
    int rep = expect_normal_replica(&s, 12, 2); /* 9 prompt tokens, 2 hit */
    assert_true(rep == 0 || rep == 1);
    char line[160];
    snprintf(line, sizeof(line), "strata_prefix_cache_lookup_tokens_total{replica=\"%d\"} 9\n", rep);
    wait_metric(&s, line); /* a pong after the gen */
    /* Polled, not read once: the pong that first showed the gen may have
     * come while the request still held its block. */
    const char *want[] = {
        "# TYPE strata_kv_blocks gauge\n",
        "strata_kv_blocks{replica=\"%d\",state=\"total\"} 16\n",
        "strata_kv_blocks{replica=\"%d\",state=\"used\"} 0\n",
        "strata_kv_blocks{replica=\"%d\",state=\"cached\"} 3\n",
        "strata_kv_bytes{replica=\"%d\"} 1024\n",
        "# TYPE strata_kv_committed_bytes gauge\n",
        "strata_kv_committed_bytes{replica=\"%d\"} 512\n",
        "# TYPE strata_prefix_cache_hit_tokens_total counter\n",
        "strata_prefix_cache_hit_tokens_total{replica=\"%d\"} 2\n",
        "strata_kv_preemptions_total{replica=\"%d\"} 2\n",
        "vllm:num_requests_waiting{model_name=\"stories260K\"} 0\n",
        "vllm:num_requests_running{model_name=\"stories260K\"} 0\n",
        "vllm:kv_cache_usage_perc{model_name=\"stories260K\"} 0\n",
        "vllm:prefix_cache_queries_total{model_name=\"stories260K\"} 9\n",
        "vllm:prefix_cache_hits_total{model_name=\"stories260K\"} 2\n",
        "vllm:num_preemptions_total{model_name=\"stories260K\"} 4\n", /* 2 per replica */
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char w[200];
        snprintf(w, sizeof(w), want[i], rep);
        wait_metric(&s, w);
    }
    /* the other replica's engine looked up nothing */
    snprintf(line, sizeof(line), "strata_prefix_cache_lookup_tokens_total{replica=\"%d\"} 0\n", 1 - rep);
    wait_metric(&s, line);

    /* Both slots held and one request queued: usage 2 of 32 blocks. */
    int fd[3];
    for (int i = 0; i < 3; i++) {
        char *b = completion_body(OP_SILENT, 40 + i, 0, 0, 0, "\"stream\":true");
        fd[i] = http_connect(s.port, 30);
        assert_true(fd[i] >= 0);
        assert_int_equal(http_send_request(fd[i], "POST", "/v1/completions", b, NULL), 0);
        free(b);
        if (i < 2) {
            snprintf(line, sizeof(line), "vllm:num_requests_running{model_name=\"stories260K\"} %d\n", i + 1);
            wait_metric(&s, line);
        }
    }
    wait_metric(&s, "vllm:num_requests_waiting{model_name=\"stories260K\"} 1\n");
    wait_metric(&s, "vllm:kv_cache_usage_perc{model_name=\"stories260K\"} 0.0625\n");
    wait_metric(&s, "strata_kv_blocks{replica=\"0\",state=\"used\"} 1\n");
    wait_metric(&s, "strata_kv_blocks{replica=\"1\",state=\"used\"} 1\n");
    close(fd[2]); /* the queued one first, so it is dropped, never dispatched */
    wait_metric(&s, "vllm:num_requests_waiting{model_name=\"stories260K\"} 0\n");
    close(fd[0]);
    close(fd[1]);
    wait_metric(&s, "vllm:num_requests_running{model_name=\"stories260K\"} 0\n");
    wait_metric(&s, "vllm:kv_cache_usage_perc{model_name=\"stories260K\"} 0\n");
    srv_stop(&s);
}

/* Polls GET /slots (with g_auth_header) until pred says yes (bounded);
 * returns the view that satisfied it. */
static json_t *wait_slots(srv *s, bool (*pred)(json_t *, int), int arg, const char *what)
{
    for (int i = 0; i < 400; i++) {
        http_response hr;
        if (http_do(s->port, "GET", "/slots", NULL, g_auth_header, &hr) == 0) {
            json_t *j = hr.status == 200 ? json_loads(hr.body, 0, NULL) : NULL;
            http_response_free(&hr);
            if (j != NULL && pred(j, arg)) return j;
            json_decref(j);
        }
        usleep(25 * 1000);
    }
    fail_msg("/slots never showed %s", what);
    return NULL;
}

static json_t *slot_rep(json_t *j, int i)
{
    return json_array_get(json_object_get(j, "replicas"), (size_t)i);
}

static int64_t slot_int(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* Replica rep's engine has reported its gen and holds no block. */
static bool slots_after_gen(json_t *j, int rep)
{
    json_t *kv = json_object_get(slot_rep(j, rep), "kv");
    return slot_int(kv, "lookup_tokens") == 9 && slot_int(kv, "blocks_used") == 0;
}

/* Both replicas busy, arg requests queued, each engine showing its block. */
static bool slots_busy(json_t *j, int queued)
{
    if (slot_int(j, "queued") != queued) return false;
    for (int i = 0; i < 2; i++) {
        json_t *r = slot_rep(j, i);
        if (slot_int(r, "busy") != 1 || slot_int(json_object_get(r, "kv"), "blocks_used") != 1) {
            return false;
        }
    }
    return true;
}

static bool slots_idle(json_t *j, int unused)
{
    (void)unused;
    return slot_int(j, "queued") == 0 && slot_int(slot_rep(j, 0), "busy") == 0 &&
           slot_int(slot_rep(j, 1), "busy") == 0;
}

/* GET /slots: behind the API key, GET only; per replica its readiness,
 * slots, busy slots, n_ctx, restarts and its engine's KV figures (the
 * fake's, fake_engine.c), and the shared queue. */
static void test_slots_view(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 1, 8, "--api-key", "sekret", NULL);
    const char *key = "Authorization: Bearer sekret\r\n";
    g_auth_header = key;
    assert_int_equal(status_of(&s, "GET", "/slots", NULL, NULL, NULL), 401);
    assert_int_equal(status_of(&s, "POST", "/slots", "{}", key, NULL), 405);
    int rep = expect_normal_replica(&s, 12, 2); /* 9 prompt tokens, 2 hit */
    assert_true(rep == 0 || rep == 1);
    json_t *j = wait_slots(&s, slots_after_gen, rep, "the gen's figures");
    assert_int_equal(slot_int(j, "replicas_total"), 2);
    assert_int_equal(slot_int(j, "replicas_ready"), 2);
    assert_int_equal(slot_int(j, "queued"), 0);
    assert_int_equal(json_array_size(json_object_get(j, "replicas")), 2);
    json_t *r = slot_rep(j, rep);
    assert_int_equal(slot_int(r, "replica"), rep);
    assert_true(json_is_true(json_object_get(r, "ready")));
    assert_int_equal(slot_int(r, "slots"), 1);
    assert_int_equal(slot_int(r, "busy"), 0);
    assert_true(slot_int(r, "n_ctx") > 0);
    assert_int_equal(slot_int(r, "restarts"), 0);
    json_t *kv = json_object_get(r, "kv");
    assert_int_equal(slot_int(kv, "blocks_total"), 16);
    assert_int_equal(slot_int(kv, "blocks_cached"), 3);
    assert_int_equal(slot_int(kv, "bytes"), 1024);
    assert_int_equal(slot_int(kv, "committed_bytes"), 512);
    assert_int_equal(slot_int(kv, "hit_tokens"), 2);
    assert_int_equal(slot_int(kv, "preemptions"), 2);
    json_decref(j);

    /* Both slots held and one request queued. */
    int fd[3];
    for (int i = 0; i < 3; i++) {
        char *b = completion_body(OP_SILENT, 40 + i, 0, 0, 0, "\"stream\":true");
        fd[i] = http_connect(s.port, 30);
        assert_true(fd[i] >= 0);
        assert_int_equal(http_send_request(fd[i], "POST", "/v1/completions", b, key), 0);
        free(b);
        if (i == 1) json_decref(wait_slots(&s, slots_busy, 0, "both slots busy"));
    }
    json_decref(wait_slots(&s, slots_busy, 1, "one request queued"));
    close(fd[2]); /* the queued one first, so it is dropped, never dispatched */
    close(fd[0]);
    close(fd[1]);
    json_decref(wait_slots(&s, slots_idle, 0, "all idle"));
    srv_stop(&s);
    g_auth_header = NULL;
}

/* llama-server's GET /props (the context, the slots, the template in use,
 * ChatML for a model without one) and its paths without /v1, behind the
 * API key as the others (/health and /v1/health without it). */
static void test_props_and_aliases(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 2, 1, 8, "--api-key", "sekret", NULL);
    const char *key = "Authorization: Bearer sekret\r\n";
    assert_int_equal(status_of(&s, "GET", "/props", NULL, NULL, NULL), 401);
    http_response hr;
    assert_int_equal(http_do(s.port, "GET", "/props", NULL, key, &hr), 0);
    assert_int_equal(hr.status, 200);
    json_t *j = json_loads(hr.body, 0, NULL);
    http_response_free(&hr);
    assert_non_null(j);
    assert_true(json_integer_value(json_object_get(json_object_get(j, "default_generation_settings"), "n_ctx")) > 0);
    assert_int_equal(json_integer_value(json_object_get(j, "total_slots")), 2);
    assert_non_null(strstr(json_string_value(json_object_get(j, "chat_template")), "<|im_start|>"));
    assert_string_equal(json_string_value(json_object_get(j, "model_alias")), "stories260K");
    json_decref(j);
    assert_int_equal(status_of(&s, "GET", "/v1/health", NULL, NULL, NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/models", NULL, key, NULL), 200);
    assert_int_equal(status_of(&s, "POST", "/models", "{}", key, NULL), 405);
    char *b = completion_body(OP_NORMAL, 50, 2, 0, 0, NULL);
    assert_int_equal(status_of(&s, "POST", "/completions", b, NULL, NULL), 401);
    free(b);
    /* /completions is llama-server's own /completion there, not OpenAI's */
    b = completion_body(OP_NORMAL, 50, 2, 0, 0, NULL);
    assert_int_equal(http_do(s.port, "POST", "/completions", b, key, &hr), 0);
    assert_int_equal(hr.status, 200);
    j = json_loads(hr.body, 0, NULL);
    http_response_free(&hr);
    assert_true(json_is_string(json_object_get(j, "content")));
    assert_null(json_object_get(j, "choices"));
    json_decref(j);
    free(b);
    srv_stop(&s);
}

/* --alias / --served-model-name: the first is the name /v1/models lists
 * first, every one is taken in requests (and the answer names the one
 * asked for), the file's name no more; a key in x-api-key (Anthropic's
 * header) is taken too. */
static void test_model_names(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, "--alias", "gpt-4o-mini", "--served-model-name", "stories", "--api-key", "k2", NULL);
    const char *key = "x-api-key: k2\r\n";
    http_response hr;
    assert_int_equal(http_do(s.port, "GET", "/v1/models", NULL, key, &hr), 0);
    assert_int_equal(hr.status, 200);
    json_t *j = json_loads(hr.body, 0, NULL);
    http_response_free(&hr);
    json_t *data = json_object_get(j, "data");
    assert_int_equal(json_array_size(data), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(data, 0), "id")), "gpt-4o-mini");
    assert_string_equal(json_string_value(json_object_get(json_array_get(data, 1), "id")), "stories");
    json_decref(j);
    static const char *const names[] = {"gpt-4o-mini", "stories", "stories260K"};
    for (int i = 0; i < 3; i++) {
        char more[64];
        snprintf(more, sizeof(more), "\"model\":\"%s\"", names[i]);
        char *b = completion_body(OP_NORMAL, 60 + i, 2, 0, 0, more);
        assert_int_equal(http_do(s.port, "POST", "/v1/completions", b, key, &hr), 0);
        assert_int_equal(hr.status, i < 2 ? 200 : 404);
        if (i < 2) {
            /* the answer names the model as it was asked for */
            j = json_loads(hr.body, 0, NULL);
            assert_string_equal(json_string_value(json_object_get(j, "model")), names[i]);
            json_decref(j);
        }
        http_response_free(&hr);
        free(b);
    }
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "x-api-key: wrong\r\n", NULL), 401);
    /* retrieved by any of its names */
    assert_int_equal(status_of(&s, "GET", "/v1/models/stories", NULL, key, NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/v1/models/gpt-4o-mini", NULL, key, NULL), 200);
    assert_int_equal(status_of(&s, "GET", "/v1/models/stories260K", NULL, key, NULL), 404);
    assert_int_equal(status_of(&s, "GET", "/v1/models/stories", NULL, NULL, NULL), 401);
    srv_stop(&s);
}

/* CORS: a preflight is answered without the key (the methods, the headers
 * asked for), every answer to a page's Origin echoes it, and
 * --allowed-origins limits which origins get that. */
static void test_cors(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, 1, 1, 8, "--api-key", "k3", NULL);
    char *h = NULL;
    assert_int_equal(status_of(&s, "OPTIONS", "/v1/chat/completions", NULL,
                               "Origin: http://page.example\r\nAccess-Control-Request-Method: POST\r\n"
                               "Access-Control-Request-Headers: content-type,authorization\r\n",
                               &h),
                     204);
    assert_non_null(strcasestr(h, "Access-Control-Allow-Origin: http://page.example"));
    assert_non_null(strcasestr(h, "Access-Control-Allow-Methods: POST, OPTIONS"));
    assert_non_null(strcasestr(h, "Access-Control-Allow-Headers: content-type,authorization"));
    free(h);
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "Origin: http://page.example\r\nx-api-key: k3\r\n", &h),
                     200);
    assert_non_null(strcasestr(h, "Access-Control-Allow-Origin: http://page.example"));
    free(h);
    /* an error too, so the page can read why */
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "Origin: http://page.example\r\n", &h), 401);
    assert_non_null(strcasestr(h, "Access-Control-Allow-Origin"));
    free(h);
    /* no Origin: no CORS headers */
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "x-api-key: k3\r\n", &h), 200);
    assert_null(strcasestr(h, "Access-Control"));
    free(h);
    assert_int_equal(status_of(&s, "OPTIONS", "/nowhere", NULL, "Origin: http://page.example\r\n", NULL), 404);
    srv_stop(&s);

    srv_start(&s, 1, 1, 8, "--allowed-origins", "http://a.example,http://b.example", NULL);
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "Origin: http://b.example\r\n", &h), 200);
    assert_non_null(strcasestr(h, "Access-Control-Allow-Origin: http://b.example"));
    free(h);
    assert_int_equal(status_of(&s, "GET", "/v1/models", NULL, "Origin: http://c.example\r\n", &h), 200);
    assert_null(strcasestr(h, "Access-Control"));
    free(h);
    assert_int_equal(status_of(&s, "OPTIONS", "/v1/models", NULL, "Origin: http://c.example\r\n", &h), 204);
    assert_null(strcasestr(h, "Access-Control"));
    free(h);
    srv_stop(&s);
}

ST_MODEL_TEST(test_metrics_kv_per_replica)
ST_MODEL_TEST(test_props_and_aliases)
ST_MODEL_TEST(test_model_names)
ST_MODEL_TEST(test_cors)
ST_MODEL_TEST(test_slots_view)
ST_MODEL_TEST(test_ends_at_eos_and_length)
ST_MODEL_TEST(test_stream_with_usage)
ST_MODEL_TEST(test_stop_string)
ST_MODEL_TEST(test_client_closes_early)
ST_MODEL_TEST(test_late_done_not_mixed)
ST_MODEL_TEST(test_handler_fails_after_start)
ST_MODEL_TEST(test_engine_err)
ST_MODEL_TEST(test_engine_dies_others_continue)
ST_MODEL_TEST(test_cancel_while_queued)
ST_MODEL_TEST(test_client_leaves_during_prefill)
ST_MODEL_TEST(test_four_callers_never_mixed)
ST_MODEL_TEST(test_http_errors)
ST_MODEL_TEST(test_slow_consumer)
ST_MODEL_TEST(test_engine_overrun_is_a_fault)
ST_MODEL_TEST(test_engine_dies_draining_stop)
ST_MODEL_TEST(test_queued_wait_for_restart)
ST_MODEL_TEST(test_queued_fails_when_engine_keeps_failing)
ST_MODEL_TEST(test_wedged_engine_is_replaced)
ST_MODEL_TEST(test_long_step_is_not_a_wedge)
ST_MODEL_TEST(test_real_engine_hang_is_caught)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_ends_at_eos_and_length_guard, kill_leftover),
        cmocka_unit_test_teardown(test_stream_with_usage_guard, kill_leftover),
        cmocka_unit_test_teardown(test_stop_string_guard, kill_leftover),
        cmocka_unit_test_teardown(test_client_closes_early_guard, kill_leftover),
        cmocka_unit_test_teardown(test_late_done_not_mixed_guard, kill_leftover),
        cmocka_unit_test_teardown(test_handler_fails_after_start_guard, kill_leftover),
        cmocka_unit_test_teardown(test_engine_err_guard, kill_leftover),
        cmocka_unit_test_teardown(test_engine_dies_others_continue_guard, kill_leftover),
        cmocka_unit_test_teardown(test_cancel_while_queued_guard, kill_leftover),
        cmocka_unit_test_teardown(test_client_leaves_during_prefill_guard, kill_leftover),
        cmocka_unit_test_teardown(test_four_callers_never_mixed_guard, kill_leftover),
        cmocka_unit_test_teardown(test_http_errors_guard, kill_leftover),
        cmocka_unit_test_teardown(test_slow_consumer_guard, kill_leftover),
        cmocka_unit_test_teardown(test_engine_overrun_is_a_fault_guard, kill_leftover),
        cmocka_unit_test_teardown(test_engine_dies_draining_stop_guard, kill_leftover),
        cmocka_unit_test_teardown(test_queued_wait_for_restart_guard, kill_leftover),
        cmocka_unit_test_teardown(test_queued_fails_when_engine_keeps_failing_guard, kill_leftover),
        cmocka_unit_test_teardown(test_wedged_engine_is_replaced_guard, kill_leftover),
        cmocka_unit_test_teardown(test_long_step_is_not_a_wedge_guard, kill_leftover),
        cmocka_unit_test_teardown(test_real_engine_hang_is_caught_guard, kill_leftover),
        cmocka_unit_test_teardown(test_metrics_kv_per_replica_guard, kill_leftover),
        cmocka_unit_test_teardown(test_props_and_aliases_guard, kill_leftover),
        cmocka_unit_test_teardown(test_model_names_guard, kill_leftover),
        cmocka_unit_test_teardown(test_cors_guard, kill_leftover),
        cmocka_unit_test_teardown(test_slots_view_guard, kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
