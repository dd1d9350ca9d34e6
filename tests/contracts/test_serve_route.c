/* Prefix routing's wait for the replica that holds a prompt's prefix,
 * through the real `strata serve` and the scripted fake engine
 * (fake_engine.c with FAKE_ENGINE_PREFIX=1: a prefix cache of 32-token
 * blocks, and a script at the end of a longer prompt). Two replicas of one
 * slot; a conversation prefix P of two blocks is first sent to one of them
 * (R), whose slot a second request with P then holds. A third request with
 * P must wait for R (queued, counted as waiting for R, while the other
 * replica stays idle), be passed by a request without a prefix, and then
 *   - reach R when R's slot frees;
 *   - when its client leaves while it waits, leave the queue and never
 *     reach an engine;
 *   - when R's engine dies, go to the other replica.
 * No assertion depends on wall-clock time; waits are bounded polls. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "text/vocab.h"

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

enum { OP_NORMAL = 0, OP_SILENT = 4, OP_STOP_DIES = 6 };

typedef struct srv {
    pid_t pid;
    int port;
    char log[512];
    char fake_log[512];
} srv;

/* 2 replicas x 1 slot of the fake engine with its prefix cache on. */
static void srv_start(srv *s)
{
    static int n_started;
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/route-port-%d-%d", dir, (int)getpid(), n_started);
    snprintf(s->log, sizeof(s->log), "%s/route-serve-%d-%d.log", dir, (int)getpid(), n_started);
    snprintf(s->fake_log, sizeof(s->fake_log), "%s/route-fake-%d-%d.log", dir, (int)getpid(),
             n_started++);
    unlink(s->fake_log);
    setenv("FAKE_ENGINE_PREFIX", "1", 1);
    setenv("FAKE_ENGINE_LOG", s->fake_log, 1);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "2", "--slots", "1", "--max-queue", "8", "--port", "0",
                          "--port-file", port_file, NULL};
    s->port = st_spawn(argv, port_file, s->log, 2);
    s->pid = g_live_pid;
    unsetenv("FAKE_ENGINE_PREFIX");
    unsetenv("FAKE_ENGINE_LOG");
}

/* A body whose prompt is P (when with_prefix) and then the fake's script. */
static char *body_for(bool with_prefix, int op, int k, int n, int delay, int arg, bool stream)
{
    int v[4] = {k, n, delay, arg};
    char *b = malloc(4096);
    assert_non_null(b);
    int len = snprintf(b, 4096, "{\"prompt\":[");
    for (int i = 0; with_prefix && i < 64; i++) len += snprintf(b + len, 4096 - (size_t)len, "%d,", 3 + (i * 37) % 200);
    len += snprintf(b + len, 4096 - (size_t)len, "%d", 35 + op);
    for (int i = 0; i < 4; i++) {
        len += snprintf(b + len, 4096 - (size_t)len, ",%d,%d", 35 + v[i] / 90, 35 + v[i] % 90);
    }
    snprintf(b + len, 4096 - (size_t)len, "]%s}", stream ? ",\"stream\":true" : "");
    return b;
}

/* GET /metrics. */
static char *metrics(srv *s)
{
    http_response hr;
    assert_int_equal(http_do(s->port, "GET", "/metrics", NULL, NULL, &hr), 0);
    char *m = strdup(hr.body);
    http_response_free(&hr);
    return m;
}

/* Polls /metrics until the line "<name> <value>" appears (bounded). */
static void wait_metric(srv *s, const char *name, int value)
{
    char line[200];
    snprintf(line, sizeof(line), "%s %d\n", name, value);
    for (int i = 0; i < 400; i++) {
        char *m = metrics(s);
        bool found = strstr(m, line) != NULL;
        free(m);
        if (found) return;
        usleep(25 * 1000);
    }
    fail_msg("metric never reached: %s", line);
}

static void expect_metric(srv *s, const char *name, int value)
{
    char line[200];
    snprintf(line, sizeof(line), "%s %d\n", name, value);
    char *m = metrics(s);
    if (strstr(m, line) == NULL) fail_msg("metric is not %s", line);
    free(m);
}

static char *replica_metric(char *buf, size_t cap, const char *name, int replica)
{
    snprintf(buf, cap, "%s{replica=\"%d\"}", name, replica);
    return buf;
}

/* A completion that must succeed; returns its timings.replica. */
static int complete_ok(srv *s, const char *body)
{
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", "/v1/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("HTTP %d: %s", hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_non_null(j);
    int rep = (int)json_integer_value(json_object_get(json_object_get(j, "timings"), "replica"));
    json_decref(j);
    http_response_free(&hr);
    return rep;
}

/* Sends a request and leaves its connection open, unread. */
static int open_request(srv *s, const char *body)
{
    int fd = http_connect(s->port, 30);
    assert_true(fd >= 0);
    assert_int_equal(http_send_request(fd, "POST", "/v1/completions", body, NULL), 0);
    return fd;
}

/* The common start: P's first request picks R; a second one with P holds
 * R's slot (the holder's script given); a third, W (k 3), is sent and must
 * wait for R while the other replica is idle. Returns R; *fd_hold and
 * *fd_w are the open connections. */
static int setup_waiting(srv *s, int hold_op, int hold_n, int hold_delay, int *fd_hold, int *fd_w)
{
    char *a = body_for(true, OP_NORMAL, 1, 2, 0, 0, false);
    int r = complete_ok(s, a);
    free(a);
    assert_true(r == 0 || r == 1);
    char name[100];
    char *hold = body_for(true, hold_op, 2, hold_n, hold_delay, 0, true);
    *fd_hold = open_request(s, hold);
    free(hold);
    /* the holder went to R by its prefix, not to the idle replica */
    wait_metric(s, replica_metric(name, sizeof(name), "strata_replica_in_flight", r), 1);
    expect_metric(s, replica_metric(name, sizeof(name), "strata_replica_in_flight", 1 - r), 0);
    char *w = body_for(true, OP_NORMAL, 3, 2, 0, 0, false);
    *fd_w = open_request(s, w);
    free(w);
    /* W waits for R although the other replica has a free slot */
    wait_metric(s, replica_metric(name, sizeof(name), "strata_replica_waiting", r), 1);
    expect_metric(s, "strata_queue_depth", 1);
    expect_metric(s, replica_metric(name, sizeof(name), "strata_replica_in_flight", 1 - r), 0);
    /* a request without a prefix passes it, to the other replica */
    char *x = body_for(false, OP_NORMAL, 4, 2, 0, 0, false);
    assert_int_equal(complete_ok(s, x), 1 - r);
    free(x);
    expect_metric(s, replica_metric(name, sizeof(name), "strata_replica_waiting", r), 1);
    expect_metric(s, "strata_queue_depth", 1);
    return r;
}

static char *read_fake_log(srv *s)
{
    size_t n = 0;
    char *raw = testdata_read_file(s->fake_log, &n);
    assert_non_null(raw);
    char *text = strndup(raw, n);
    free(raw);
    return text;
}

static void test_waits_for_the_prefix_replica(void **state)
{
    (void)state;
    srv s;
    srv_start(&s);
    int fd_hold, fd_w;
    int r = setup_waiting(&s, OP_SILENT, 0, 0, &fd_hold, &fd_w);
    /* the holder's client leaves: R's slot frees and W takes it */
    close(fd_hold);
    http_response hw;
    assert_int_equal(http_read_response(fd_w, &hw), 0);
    close(fd_w);
    assert_int_equal(hw.status, 200);
    json_t *j = json_loads(hw.body, 0, NULL);
    json_t *t = json_object_get(j, "timings");
    assert_int_equal(json_integer_value(json_object_get(t, "replica")), r);
    assert_int_equal(json_integer_value(json_object_get(t, "route_cached_n")), 64);
    json_decref(j);
    http_response_free(&hw);
    wait_metric(&s, "strata_queue_depth", 0);
    char name[100];
    expect_metric(&s, replica_metric(name, sizeof(name), "strata_replica_waiting", r), 0);
    st_stop(s.pid, s.log);
}

static void test_waiting_client_leaves(void **state)
{
    (void)state;
    srv s;
    srv_start(&s);
    int fd_hold, fd_w;
    int r = setup_waiting(&s, OP_SILENT, 0, 0, &fd_hold, &fd_w);
    /* W's client leaves while it waits: it leaves the queue at once */
    close(fd_w);
    wait_metric(&s, "strata_queue_depth", 0);
    char name[100];
    expect_metric(&s, replica_metric(name, sizeof(name), "strata_replica_waiting", r), 0);
    close(fd_hold);
    wait_metric(&s, replica_metric(name, sizeof(name), "strata_replica_in_flight", r), 0);
    /* the replica serves again, and W never reached an engine */
    char *b = body_for(true, OP_NORMAL, 5, 2, 0, 0, false);
    assert_int_equal(complete_ok(&s, b), r);
    free(b);
    st_stop(s.pid, s.log);
    char *log = read_fake_log(&s);
    assert_non_null(strstr(log, "gen 2\n"));
    assert_non_null(strstr(log, "gen 5\n"));
    assert_null(strstr(log, "gen 3\n"));
    free(log);
}

static void test_awaited_replica_dies(void **state)
{
    (void)state;
    srv s;
    srv_start(&s);
    int fd_hold, fd_w;
    /* the holder streams until its `stop`, and then its engine exits */
    int r = setup_waiting(&s, OP_STOP_DIES, 0, 20, &fd_hold, &fd_w);
    close(fd_hold);
    /* W is not failed with R's requests: it goes to the other replica */
    http_response hw;
    assert_int_equal(http_read_response(fd_w, &hw), 0);
    close(fd_w);
    if (hw.status != 200) fail_msg("HTTP %d: %s", hw.status, hw.body);
    json_t *j = json_loads(hw.body, 0, NULL);
    json_t *t = json_object_get(j, "timings");
    assert_int_equal(json_integer_value(json_object_get(t, "replica")), 1 - r);
    assert_int_equal(json_integer_value(json_object_get(t, "route_cached_n")), 0);
    json_decref(j);
    http_response_free(&hw);
    char name[100];
    wait_metric(&s, replica_metric(name, sizeof(name), "strata_engine_restarts_total", r), 1);
    wait_metric(&s, replica_metric(name, sizeof(name), "strata_replica_ready", r), 1);
    expect_metric(&s, "strata_queue_depth", 0);
    st_stop(s.pid, s.log);
}

ST_MODEL_TEST(test_waits_for_the_prefix_replica)
ST_MODEL_TEST(test_waiting_client_leaves)
ST_MODEL_TEST(test_awaited_replica_dies)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_waits_for_the_prefix_replica_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_waiting_client_leaves_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_awaited_replica_dies_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
