/* Helpers shared by the tests that run a real `strata serve` (header-only:
 * each test program is one .c file): the model and vocabulary they use,
 * starting a server on a free port and waiting until it is ready, stopping
 * it (it must exit 0 by itself), killing one a failed test left behind,
 * scripting the fake engine's output, posting a chat request, and a real
 * server of stories260K with posts and gathered streams. Include
 * after <cmocka.h>. */
#ifndef STRATA_TESTS_CONTRACTS_SERVE_TESTUTIL_H
#define STRATA_TESTS_CONTRACTS_SERVE_TESTUTIL_H

#include "http_client.h"
#include "serve/textgen.h"
#include "testdata.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_model[1024];  /* models/stories260K.gguf */
static vocab *g_voc;        /* its vocabulary; NULL when the data is missing */
static pid_t g_live_pid;    /* the server of the running test, killed if it fails */

/* <build>/tests/fake_engine, beside STRATA_BIN (<build>/strata). */
static inline const char *st_fake_engine_path(void)
{
    static char p[1024];
    snprintf(p, sizeof(p), "%s", STRATA_BIN);
    char *slash = strrchr(p, '/');
    snprintf(slash + 1, sizeof(p) - (size_t)(slash + 1 - p), "tests/fake_engine");
    return p;
}

/* Runs argv (a `strata serve` with `--port 0 --port-file port_file`) with
 * its stderr in log, and waits, bounded, for its port and then for
 * `replicas` ready replicas on /health. Returns the port. */
static inline int st_spawn(const char *const *argv, const char *port_file, const char *log,
                           int replicas)
{
    unlink(port_file);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    g_live_pid = pid;
    int port = 0;
    for (int i = 0; i < 600 && port == 0; i++) { /* ~30 s */
        FILE *f = fopen(port_file, "r");
        if (f != NULL) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (port == 0) usleep(50 * 1000);
    }
    assert_true(port > 0);
    for (int i = 0; i < 600; i++) {
        http_response hr;
        if (http_do(port, "GET", "/health", NULL, NULL, &hr) == 0) {
            json_t *j = json_loads(hr.body, 0, NULL);
            int ready = (int)json_integer_value(json_object_get(j, "replicas_ready"));
            json_decref(j);
            http_response_free(&hr);
            if (ready >= replicas) return port;
        }
        usleep(50 * 1000);
    }
    fail_msg("the server never became ready");
    return -1;
}

/* SIGTERM; the server must exit 0 by itself (its log's tail is shown when
 * it does not). */
static inline void st_stop(pid_t pid, const char *log)
{
    kill(pid, SIGTERM);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    g_live_pid = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "tail -30 %s >&2", log);
        if (system(cmd) != 0) print_message("(no log)\n");
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* Writes text's token ids (in g_voc) to path, for a fake engine started
 * with FAKE_ENGINE_SCRIPT=path: the output of its next plain `gen`. */
static inline void st_script(const char *path, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    strata_err err;
    assert_int_equal(tok_tokenize_alloc(g_voc, text, strlen(text), false, false, &ids, &n, &err), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%d ", ids[i]);
    fclose(f);
    free(ids);
}

/* s without its leading spaces (the SentencePiece vocab's word-start marks
 * the first token of a scripted text). */
static inline const char *st_lstrip(const char *s)
{
    while (*s == ' ') s++;
    return s;
}

/* POSTs body to /v1/chat/completions; the reply must be 200 with JSON. */
static inline json_t *st_post_chat(int port, const char *body)
{
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/chat/completions", body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("%s: %d %s", body, hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_non_null(j);
    http_response_free(&hr);
    return j;
}

/* --- a real server of stories260K (test_serve_logprobs.c, test_serve_echo.c) --- */

typedef struct st_srv {
    pid_t pid;
    int port;
    char log[512];
} st_srv;

/* `strata serve` with real engines, 1 replica x 2 slots. */
static inline void st_real_start(st_srv *s)
{
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/port-%d", dir, (int)getpid());
    snprintf(s->log, sizeof(s->log), "%s/serve.log", dir);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--replicas", "1", "--slots", "2",
                          "-t", "1", "--port", "0", "--port-file", port_file, NULL};
    s->port = st_spawn(argv, port_file, s->log, 1);
    s->pid = g_live_pid;
}

static inline void st_real_stop(st_srv *s)
{
    st_stop(s->pid, s->log);
}

/* POSTs body; returns the parsed JSON (non-streamed) and the status. */
static inline json_t *st_post(const st_srv *s, const char *path, const char *body, int *status)
{
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", path, body, NULL, &hr), 0);
    *status = hr.status;
    json_t *j = json_loads(hr.body, 0, NULL);
    http_response_free(&hr);
    assert_non_null(j);
    return j;
}

/* The same for a 200 (anything else fails the test). */
static inline json_t *st_post_ok(const st_srv *s, const char *path, const char *body)
{
    int status;
    json_t *j = st_post(s, path, body, &status);
    if (status != 200) fail_msg("%s: status %d: %s", body, status, json_dumps(j, 0));
    return j;
}

/* body to path answers `status` with an error whose message holds needle. */
static inline void st_expect_error(const st_srv *s, const char *path, const char *body, int status,
                                   const char *needle)
{
    int got;
    json_t *j = st_post(s, path, body, &got);
    const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    if (got != status || msg == NULL || strstr(msg, needle) == NULL) {
        fail_msg("%s %s: status %d, message %s (want %d naming %s)", path, body, got, msg ? msg : "-", status,
                 needle);
    }
    json_decref(j);
}

/* A streamed answer gathered: its text and its chunks' logprobs, joined the
 * way a client would (completion lists appended, chat content appended). */
typedef struct st_gathered {
    sbuf text;
    json_t *lp; /* the joined object */
    int n_chunks_with_lp;
    bool done;
} st_gathered;

static inline void st_gather_stream(const st_srv *s, const char *path, const char *body, bool chat,
                                    st_gathered *g)
{
    memset(g, 0, sizeof(*g));
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", path, body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    g->lp = chat ? json_pack("{s:[]}", "content")
                 : json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                             "text_offset");
    const char *p = hr.body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (strncmp(p, "[DONE]", 6) == 0) {
            g->done = true;
            break;
        }
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        assert_non_null(ev);
        assert_null(json_object_get(ev, "error"));
        json_t *choice = json_array_get(json_object_get(ev, "choices"), 0);
        if (choice != NULL) {
            json_t *t = chat ? json_object_get(json_object_get(choice, "delta"), "content")
                             : json_object_get(choice, "text");
            if (json_is_string(t)) sbuf_append(&g->text, json_string_value(t), json_string_length(t));
            json_t *lp = json_object_get(choice, "logprobs");
            if (json_is_object(lp)) {
                g->n_chunks_with_lp++;
                const char *key;
                json_t *v;
                json_object_foreach(lp, key, v) {
                    json_t *into = json_object_get(g->lp, key);
                    assert_non_null(into);
                    json_array_extend(into, v);
                }
            }
        }
        json_decref(ev);
        p = end;
    }
    http_response_free(&hr);
    assert_true(g->done);
}

static inline void st_gathered_free(st_gathered *g)
{
    sbuf_free(&g->text);
    json_decref(g->lp);
}

static inline int st_utf8_chars(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Group setup and teardown: the model and its vocabulary. */
static inline int st_setup(void **state)
{
    (void)state;
    if (testdata_path(g_model, sizeof(g_model), "models/stories260K.gguf") == NULL) return 0;
    return vocab_open(&g_voc, g_model, NULL);
}

static inline int st_teardown(void **state)
{
    (void)state;
    vocab_free(g_voc);
    return 0;
}

/* After each test: a server left by a failed assertion is killed. */
static inline int st_kill_leftover(void **state)
{
    (void)state;
    if (g_live_pid > 0) {
        kill(g_live_pid, SIGKILL);
        waitpid(g_live_pid, NULL, 0);
        g_live_pid = 0;
    }
    return 0;
}

/* f_guard: f, or a skip with the reason when the reference data is missing. */
#define ST_MODEL_TEST(f)                                                \
    static void f##_guard(void **state)                                 \
    {                                                                   \
        if (g_voc == NULL) {                                            \
            print_message("skipped: models/stories260K.gguf missing\n"); \
            skip();                                                     \
        }                                                               \
        f(state);                                                       \
    }

#endif
