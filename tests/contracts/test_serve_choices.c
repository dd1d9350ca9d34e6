/* Requests served by several engine requests, through a real `strata serve`
 * of stories260K with a real engine: `n` choices of completions and chat
 * (choice i is exactly the single request with seed + i, with its own stop
 * strings and logprobs; streamed and not the same; usage counts the prompt
 * once and sums the completions) and batched /v1/embeddings (one item per
 * input, in order, each the vector of that input alone; usage summed; a
 * batch larger than the slots and the queue is served whole).
 *
 * Every test talks HTTP only, so it runs against any build of the server. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/textgen.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
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

/* `strata serve` with a real engine: 1 replica x 2 slots, max_queue. */
static void srv_start(srv *s, const char *max_queue)
{
    static int n_started;
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/choices-port-%d-%d", dir, (int)getpid(), n_started);
    snprintf(s->log, sizeof(s->log), "%s/choices-serve-%d.log", dir, n_started++);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--replicas", "1", "--slots", "2",
                          "--max-queue", max_queue, "-t", "1", "--port", "0", "--port-file",
                          port_file, NULL};
    s->port = st_spawn(argv, port_file, s->log, 1);
    s->pid = g_live_pid;
}

static void srv_stop(srv *s)
{
    st_stop(s->pid, s->log);
}

/* POSTs body; the parsed JSON, which must be a 200's. */
static json_t *post_ok(const srv *s, const char *path, const char *body)
{
    http_response hr;
    if (http_do(s->port, "POST", path, body, NULL, &hr) != 0) fail_msg("no answer to %s", body);
    if (hr.status != 200) fail_msg("%s %s: %d %s", path, body, hr.status, hr.body);
    json_t *j = json_loads(hr.body, 0, NULL);
    http_response_free(&hr);
    assert_non_null(j);
    return j;
}

static json_t *choice_at(json_t *j, size_t i)
{
    return json_array_get(json_object_get(j, "choices"), i);
}

static const char *choice_text(json_t *c, bool chat)
{
    json_t *t = chat ? json_object_get(json_object_get(c, "message"), "content")
                     : json_object_get(c, "text");
    assert_true(json_is_string(t));
    return json_string_value(t);
}

static json_int_t usage_of(json_t *j, const char *key)
{
    json_t *v = json_object_get(json_object_get(j, "usage"), key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

/* A streamed answer of n choices, gathered per choice index. */
#define MAX_N 8
typedef struct gathered {
    sbuf text[MAX_N];
    json_t *lp[MAX_N];  /* joined logprobs, or NULL */
    int n_finish[MAX_N];
    char finish[MAX_N][16];
    json_t *usage;      /* of the usage chunk */
    int chunks_after_usage;
    bool done;
} gathered;

static void gather_stream(const srv *s, const char *path, const char *body, bool chat, gathered *g)
{
    memset(g, 0, sizeof(*g));
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", path, body, NULL, &hr), 0);
    if (hr.status != 200) fail_msg("%s %s: %d %s", path, body, hr.status, hr.body);
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
        if (json_object_get(ev, "error") != NULL) fail_msg("stream error: %.*s", (int)(end - p), p);
        if (g->usage != NULL) g->chunks_after_usage++;
        if (json_object_get(ev, "usage") != NULL && json_array_size(json_object_get(ev, "choices")) == 0) {
            g->usage = json_incref(json_object_get(ev, "usage"));
        }
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        if (c != NULL) {
            json_int_t i = json_integer_value(json_object_get(c, "index"));
            assert_true(i >= 0 && i < MAX_N);
            json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content")
                             : json_object_get(c, "text");
            if (json_is_string(t)) sbuf_append(&g->text[i], json_string_value(t), json_string_length(t));
            json_t *fin = json_object_get(c, "finish_reason");
            if (json_is_string(fin)) {
                g->n_finish[i]++;
                snprintf(g->finish[i], sizeof(g->finish[i]), "%s", json_string_value(fin));
            }
            json_t *lp = json_object_get(c, "logprobs");
            if (json_is_object(lp)) {
                if (g->lp[i] == NULL) {
                    g->lp[i] = json_deep_copy(lp);
                } else {
                    const char *key;
                    json_t *v;
                    json_object_foreach(lp, key, v) json_array_extend(json_object_get(g->lp[i], key), v);
                }
            }
        }
        json_decref(ev);
        p = end;
    }
    http_response_free(&hr);
    assert_true(g->done);
}

static void gathered_free(gathered *g)
{
    for (int i = 0; i < MAX_N; i++) {
        sbuf_free(&g->text[i]);
        json_decref(g->lp[i]);
    }
    json_decref(g->usage);
}

/* body_fmt has one %d for the seed and one %s for more fields. */
static void check_choices(const srv *s, const char *path, bool chat, const char *fields, int n,
                          int seed)
{
    char body[1024];
    snprintf(body, sizeof(body), "{%s,\"n\":%d,\"seed\":%d}", fields, n, seed);
    json_t *all = post_ok(s, path, body);
    assert_int_equal(json_array_size(json_object_get(all, "choices")), n);
    json_int_t completion_sum = 0;
    for (int i = 0; i < n; i++) {
        json_t *c = choice_at(all, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
        snprintf(body, sizeof(body), "{%s,\"seed\":%d}", fields, seed + i);
        json_t *one = post_ok(s, path, body);
        json_t *c1 = choice_at(one, 0);
        const char *want = choice_text(c1, chat), *got = choice_text(c, chat);
        if (strcmp(want, got) != 0) fail_msg("choice %d: \"%s\"; alone with seed %d: \"%s\"", i, got, seed + i, want);
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                            json_string_value(json_object_get(c1, "finish_reason")));
        /* the same logprobs (or both null) */
        assert_true(json_equal(json_object_get(c, "logprobs"), json_object_get(c1, "logprobs")));
        assert_int_equal(usage_of(all, "prompt_tokens"), usage_of(one, "prompt_tokens"));
        completion_sum += usage_of(one, "completion_tokens");
        assert_non_null(json_object_get(c, "timings")); /* each choice's own figures */
        json_decref(one);
    }
    assert_int_equal(usage_of(all, "completion_tokens"), completion_sum);
    assert_int_equal(usage_of(all, "total_tokens"), usage_of(all, "prompt_tokens") + completion_sum);
    /* streamed: the same choices, each with one finish chunk, usage last */
    snprintf(body, sizeof(body),
             "{%s,\"n\":%d,\"seed\":%d,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             fields, n, seed);
    gathered g;
    gather_stream(s, path, body, chat, &g);
    for (int i = 0; i < n; i++) {
        json_t *c = choice_at(all, (size_t)i);
        assert_string_equal(g.text[i].data ? g.text[i].data : "", choice_text(c, chat));
        assert_int_equal(g.n_finish[i], 1);
        assert_string_equal(g.finish[i], json_string_value(json_object_get(c, "finish_reason")));
        json_t *lp = json_object_get(c, "logprobs");
        if (json_is_null(lp)) assert_null(g.lp[i]);
        else assert_true(json_equal(g.lp[i], lp));
    }
    assert_int_equal(g.n_finish[n], 0);
    assert_non_null(g.usage);
    assert_int_equal(g.chunks_after_usage, 0);
    /* the same counts; prompt_tokens_details.cached_tokens may differ, as
     * the engine's prefix cache holds this prompt by now */
    const char *counts[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
    for (size_t k = 0; k < 3; k++) {
        json_t *gv = json_object_get(g.usage, counts[k]);
        assert_true(json_is_integer(gv));
        assert_int_equal(json_integer_value(gv), usage_of(all, counts[k]));
    }
    gathered_free(&g);
    json_decref(all);
}

static void test_n_choices(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, "64");
    const char *prompt = "\"prompt\":\"Once upon a time\",\"max_tokens\":20,\"temperature\":1";
    check_choices(&s, "/v1/completions", false, prompt, 3, 42);
    /* more choices than slots, with stop strings and logprobs */
    check_choices(&s, "/v1/completions", false,
                  "\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0.9,"
                  "\"stop\":[\" was\",\".\"],\"logprobs\":2",
                  5, 7);
    check_choices(&s, "/v1/chat/completions", true,
                  "\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],\"max_tokens\":16,"
                  "\"temperature\":1,\"logprobs\":true,\"top_logprobs\":2",
                  2, 1000);
    /* the seeds wrap within [0, 2^63) */
    char body[256];
    snprintf(body, sizeof(body), "{%s,\"n\":2,\"seed\":9223372036854775807}", prompt);
    json_t *j = post_ok(&s, "/v1/completions", body);
    snprintf(body, sizeof(body), "{%s,\"seed\":0}", prompt);
    json_t *zero = post_ok(&s, "/v1/completions", body);
    assert_string_equal(choice_text(choice_at(j, 1), false), choice_text(choice_at(zero, 0), false));
    json_decref(zero);
    json_decref(j);
    srv_stop(&s);
}

/* --- embeddings --- */

static json_t *data_of(json_t *j, size_t i)
{
    json_t *d = json_array_get(json_object_get(j, "data"), i);
    assert_non_null(d);
    assert_int_equal(json_integer_value(json_object_get(d, "index")), i);
    return json_object_get(d, "embedding");
}

static void assert_same_vector(json_t *a, json_t *b)
{
    assert_int_equal(json_array_size(a), json_array_size(b));
    assert_true(json_array_size(a) > 0);
    for (size_t k = 0; k < json_array_size(a); k++) {
        double x = json_real_value(json_array_get(a, k)), y = json_real_value(json_array_get(b, k));
        if (x != y) fail_msg("element %zu: %.9g in the batch, %.9g alone", k, x, y);
    }
}

static void test_embeddings_batch(void **state)
{
    (void)state;
    srv s;
    srv_start(&s, "0"); /* no queue: 2 slots for 64 inputs */
    enum { N = 64 };
    sbuf body = {0};
    sbuf_append(&body, "{\"input\":[", 10);
    for (int i = 0; i < N; i++) {
        sbuf_printf(&body, "%s\"Once upon a time %d there was a %s\"", i ? "," : "", i,
                    i % 3 ? "cat" : "little dog");
    }
    sbuf_append(&body, "],\"user\":\"u\",\"embd_normalize\":2}", 33);
    json_t *all = post_ok(&s, "/v1/embeddings", body.data);
    assert_int_equal(json_array_size(json_object_get(all, "data")), N);
    json_int_t sum = 0;
    for (int i = 0; i < N; i++) {
        char one[256];
        snprintf(one, sizeof(one), "{\"input\":\"Once upon a time %d there was a %s\"}", i,
                 i % 3 ? "cat" : "little dog");
        json_t *j = post_ok(&s, "/v1/embeddings", one);
        if (i % 9 == 0 || i == N - 1) assert_same_vector(data_of(all, (size_t)i), data_of(j, 0));
        sum += usage_of(j, "prompt_tokens");
        json_decref(j);
    }
    assert_int_equal(usage_of(all, "prompt_tokens"), sum);
    assert_int_equal(usage_of(all, "total_tokens"), sum);
    json_decref(all);
    sbuf_free(&body);
    /* token ids: one input, and several */
    json_t *ids1 = post_ok(&s, "/v1/embeddings", "{\"input\":[1,300,301,302]}");
    json_t *ids2 = post_ok(&s, "/v1/embeddings", "{\"input\":[[1,300],[1,300,301,302],[1,400]]}");
    assert_int_equal(json_array_size(json_object_get(ids1, "data")), 1);
    assert_int_equal(json_array_size(json_object_get(ids2, "data")), 3);
    assert_same_vector(data_of(ids2, 1), data_of(ids1, 0));
    assert_int_equal(usage_of(ids2, "prompt_tokens"), 8);
    json_decref(ids1);
    json_decref(ids2);
    /* base64, one string per input */
    json_t *b = post_ok(&s, "/v1/embeddings", "{\"input\":[\"a\",\"b\"],\"encoding_format\":\"base64\"}");
    assert_true(json_is_string(data_of(b, 0)) && json_is_string(data_of(b, 1)));
    assert_true(strcmp(json_string_value(data_of(b, 0)), json_string_value(data_of(b, 1))) != 0);
    json_decref(b);
    srv_stop(&s);
}

ST_MODEL_TEST(test_n_choices)
ST_MODEL_TEST(test_embeddings_batch)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_n_choices_guard, st_kill_leftover),
        cmocka_unit_test_teardown(test_embeddings_batch_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
