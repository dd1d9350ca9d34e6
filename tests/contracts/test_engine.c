/* The engine protocol's contract, against a real `strata engine` process on
 * stories260K through real OS pipes (tests/common/pipeproc.h): `ready`
 * first; greedy output equal to llama.cpp's; a seeded request equal to
 * `strata run` with the same settings; eight requests at once equal to
 * each alone; bad, unknown and oversized lines answered with `err` while
 * the engine keeps serving; `shutdown` and end of input finish what was
 * accepted and exit 0; and the terminal-message invariant (exactly one
 * `done`/`err` per id, nothing after it) under four client threads sending
 * 80 requests each with random stops. And the prefix cache: ready's and
 * pong's figures, a repeated prompt's cached_n and identical output, the
 * `cache` opt-out and the option that turns it off.
 *
 * Timeouts here only guard against a hung engine; nothing is asserted
 * about how long anything takes. */
#include "engine/protocol.h"
#include "pipeproc.h"
#include "run.h"
#include "sanitized.h"
#include "testdata.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../engine/engine_testutil.h"

#define MODEL "models/stories260K.gguf"
#define LINE_TIMEOUT_MS 60000

typedef struct eng {
    pipeproc p;
    et_collect *c;
    pthread_mutex_t lock; /* protects c when client threads look at it */
    proto_msg ready;
    char model_path[4096];
} eng;

/* Starts the engine with one more option and its value when opt is not
 * NULL. */
static void eng_start_opt(eng *e, const char *slots, const char *ctx, const char *batch,
                          const char *opt, const char *val)
{
    memset(e, 0, sizeof(*e));
    TESTDATA_FILE(e->model_path, MODEL);
    char err_path[4200];
    snprintf(err_path, sizeof(err_path), "%s/engine-stderr.txt", testdata_scratch_dir());
    const char *argv[] = {STRATA_BIN, "engine", "-m", e->model_path, "--slots", slots,
                          "--ctx", ctx, "--batch", batch, "-t", "1", opt, val, NULL};
    if (pipeproc_start(&e->p, argv, err_path) != 0) fail_msg("cannot start %s", STRATA_BIN);
    e->c = et_collect_new();
    pthread_mutex_init(&e->lock, NULL);
    /* the first line is ready */
    char *line;
    if (pipeproc_read_line(&e->p, &line, LINE_TIMEOUT_MS) != 1) fail_msg("no ready line");
    proto_error pe;
    if (proto_decode(line, strlen(line), PROTO_DIR_TO_SERVER, &e->ready, &pe) != 0) {
        fail_msg("ready: %s: %s", pe.message, line);
    }
    assert_int_equal(e->ready.op, PROTO_OP_READY);
    free(line);
}

static void eng_start(eng *e, const char *slots, const char *ctx, const char *batch)
{
    eng_start_opt(e, slots, ctx, batch, NULL, NULL);
}

/* Reads one line into the collector. Returns false at end of output. */
static bool eng_read(eng *e)
{
    char *line;
    int k = pipeproc_read_line(&e->p, &line, LINE_TIMEOUT_MS);
    if (k < 0) fail_msg("the engine said nothing for %d s", LINE_TIMEOUT_MS / 1000);
    if (k == 0) return false;
    pthread_mutex_lock(&e->lock);
    et_collect_line(e->c, line, strlen(line));
    pthread_mutex_unlock(&e->lock);
    free(line);
    return true;
}

static bool all_terminal(eng *e, const int64_t *ids, size_t n)
{
    pthread_mutex_lock(&e->lock);
    bool all = true;
    for (size_t i = 0; i < n && all; i++) all = e->c->recs[ids[i]].n_terminal > 0;
    pthread_mutex_unlock(&e->lock);
    return all;
}

/* Reads until every id has its terminal message. */
static void eng_wait(eng *e, const int64_t *ids, size_t n)
{
    while (!all_terminal(e, ids, n)) {
        if (!eng_read(e)) fail_msg("the engine's output ended early");
    }
}

static void eng_send(eng *e, const char *s)
{
    if (pipeproc_write_str(&e->p, s) != 0) fail_msg("writing to the engine failed");
}

/* Ends the engine with shutdown; reads to the end; returns the exit status. */
static int eng_finish(eng *e)
{
    pipeproc_write_str(&e->p, "{\"op\":\"shutdown\"}\n");
    while (eng_read(e)) {
    }
    int status = pipeproc_finish(&e->p, LINE_TIMEOUT_MS);
    assert_int_equal(e->c->n_bad, 0);
    et_collect_free(e->c);
    proto_msg_free(&e->ready);
    pthread_mutex_destroy(&e->lock);
    return status;
}

static void test_ready_and_greedy(void **state)
{
    (void)state;
    et_golden g[4];
    size_t n = et_load_greedy(g, 4);
    eng e;
    eng_start(&e, "4", "1024", "64");
    const proto_ready *r = &e.ready.u.ready;
    assert_int_equal(r->protocol, 1);
    assert_string_equal(r->arch, "llama");
    assert_int_equal(r->n_vocab, 512);
    assert_int_equal(r->n_embd, 64);
    assert_int_equal(r->n_ctx_train, 2048);
    assert_int_equal(r->slots, 4);
    assert_int_equal(r->n_ctx, 1024);
    assert_int_equal(r->n_batch, 64);
    assert_string_equal(r->kv_type, "f16");
    assert_true(r->kv_n_blocks * r->kv_block_tokens >= 4 * 1024);
    /* all golden prompts at once, in one write */
    static char lines[1 << 16];
    size_t k = 0;
    int64_t ids[4];
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)i + 1;
        et_gen_line(lines + k, sizeof(lines) - k, ids[i], g[i].prompt, g[i].n_prompt,
                    (int64_t)g[i].n_gen, 0, -1, NULL);
        k += strlen(lines + k);
    }
    eng_send(&e, lines);
    eng_wait(&e, ids, n);
    for (size_t i = 0; i < n; i++) {
        et_assert_done(e.c, ids[i], PROTO_FINISH_LENGTH);
        assert_int_equal(e.c->recs[ids[i]].n_tok, g[i].n_gen);
        assert_memory_equal(e.c->recs[ids[i]].toks, g[i].gen, g[i].n_gen * sizeof(int32_t));
    }
    assert_int_equal(eng_finish(&e), 0);
}

/* A seeded, sampled request gives the text `strata run` prints for the
 * same prompt and settings. */
static void test_seeded_equals_strata_run(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1); /* prompt_ids of "Once upon a time" */
    eng e;
    eng_start(&e, "2", "512", "64");
    const char *argv[] = {STRATA_BIN, "run", "-m", e.model_path, "-p", "Once upon a time",
                          "-n", "40", "--seed", "7", "--temp", "0.8", "-t", "1", NULL};
    run_result rr;
    assert_int_equal(run_capture(argv, &rr), 0);
    if (rr.status != 0) fail_msg("strata run: %s", rr.err);
    char line[4096];
    et_gen_line(line, sizeof(line), 1, g[0].prompt, g[0].n_prompt, 40, 0.8, 7, NULL);
    eng_send(&e, line);
    int64_t id = 1;
    eng_wait(&e, &id, 1);
    const et_rec *rec = &e.c->recs[1];
    assert_true(rec->done);
    /* detokenize as strata run does: the prompt primes the stream */
    vocab *v;
    strata_err err;
    if (vocab_open(&v, e.model_path, &err) != 0) fail_msg("%s", err.msg);
    tok_stream st;
    tok_stream_init(&st, v, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE);
    char text[8192];
    size_t n_text = 0;
    const char *piece;
    size_t n_piece;
    for (size_t i = 0; i < g[0].n_prompt; i++) {
        assert_int_equal(tok_stream_push(&st, g[0].prompt[i], &piece, &n_piece, &err), 0);
    }
    for (size_t i = 0; i < rec->n_tok; i++) {
        assert_int_equal(tok_stream_push(&st, rec->toks[i], &piece, &n_piece, &err), 0);
        assert_true(n_text + n_piece < sizeof(text));
        memcpy(text + n_text, piece, n_piece);
        n_text += n_piece;
    }
    size_t n_incomplete;
    assert_int_equal(tok_stream_finish(&st, &piece, &n_piece, &n_incomplete, &err), 0);
    memcpy(text + n_text, piece, n_piece - n_incomplete);
    n_text += n_piece - n_incomplete;
    text[n_text] = '\0';
    tok_stream_free(&st);
    vocab_free(v);
    assert_true(rec->n_tok > 0);
    assert_string_equal(text, rr.out);
    run_result_free(&rr);
    assert_int_equal(eng_finish(&e), 0);
}

static void test_concurrent_equals_alone(void **state)
{
    (void)state;
    et_golden g[4];
    size_t n_g = et_load_greedy(g, 4);
    eng e;
    eng_start(&e, "4", "512", "32");
    static char lines[1 << 16];
    int64_t alone_ids[8], together_ids[8];
    for (int i = 0; i < 8; i++) {
        const et_golden *s = &g[i % n_g];
        /* the prompts differ: golden prompt plus 5i tokens of its continuation */
        alone_ids[i] = 10 + i;
        int32_t prompt[128];
        size_t n = 0;
        for (size_t k = 0; k < s->n_prompt; k++) prompt[n++] = s->prompt[k];
        for (int k = 0; k < i * 5; k++) prompt[n++] = s->gen[k];
        et_gen_line(lines, sizeof(lines), alone_ids[i], prompt, n, 24, 0.8, 100 + i, NULL);
        eng_send(&e, lines);
        eng_wait(&e, &alone_ids[i], 1);
        together_ids[i] = 20 + i;
    }
    size_t k = 0;
    for (int i = 0; i < 8; i++) {
        const et_golden *s = &g[i % n_g];
        int32_t prompt[128];
        size_t n = 0;
        for (size_t j = 0; j < s->n_prompt; j++) prompt[n++] = s->prompt[j];
        for (int j = 0; j < i * 5; j++) prompt[n++] = s->gen[j];
        et_gen_line(lines + k, sizeof(lines) - k, together_ids[i], prompt, n, 24, 0.8, 100 + i,
                    NULL);
        k += strlen(lines + k);
    }
    eng_send(&e, lines);
    eng_wait(&e, together_ids, 8);
    for (int i = 0; i < 8; i++) {
        const et_rec *a = &e.c->recs[alone_ids[i]], *t = &e.c->recs[together_ids[i]];
        assert_true(a->done && t->done && t->n_terminal == 1);
        if (a->n_tok == 0 || a->n_tok != t->n_tok ||
            memcmp(a->toks, t->toks, a->n_tok * sizeof(int32_t)) != 0) {
            fail_msg("request %d: under load it differs from its run alone", i);
        }
        assert_int_equal(a->finish, t->finish);
        assert_int_equal(a->stats.prompt_n, t->stats.prompt_n);
    }
    assert_int_equal(eng_finish(&e), 0);
}

static void test_bad_lines_keep_serving(void **state)
{
    (void)state;
    eng e;
    eng_start(&e, "2", "256", "32");
    eng_send(&e, "this is not json\n"
                 "{\"op\":\"launch\",\"id\":20}\n"
                 "{\"op\":\"tok\",\"id\":21,\"tokens\":[1]}\n"
                 "[1,2,3]\n"
                 "{\"op\":\"gen\",\"id\":30,\"tokens\":[1,2],\"sampling\":{\"top_p\":7}}\n"
                 "{\"op\":\"gen\",\"id\":31,\"tokens\":[1,9999]}\n"
                 "{\"op\":\"gen\",\"id\":32,\"tokens\":[1,2]\n"
                 "{\"op\":\"stop\",\"id\":\"x\"}\n"
                 "\n");
    /* a line over 16 MiB: the engine skips it and answers with its id */
    size_t big = PROTOCOL_MAX_LINE + 4096;
    char *line = malloc(big + 1);
    assert_non_null(line);
    const char *head = "{\"op\":\"gen\",\"id\":33,\"tokens\":[1";
    memcpy(line, head, strlen(head));
    for (size_t i = strlen(head); i + 2 < big; i += 2) memcpy(line + i, ",7", 2);
    memcpy(line + big - 2, "]}", 2);
    line[big] = '\n';
    if (pipeproc_write(&e.p, line, big + 1) != 0) fail_msg("writing the long line failed");
    free(line);
    eng_send(&e, "{\"op\":\"ping\",\"id\":8}\n{\"op\":\"gen\",\"id\":34,\"tokens\":[1,403],"
                 "\"max_tokens\":3,\"sampling\":{\"temperature\":0}}\n");
    int64_t ids[] = {20, 21, 30, 31, 32, 33, 34};
    eng_wait(&e, ids, 7);
    et_assert_err(e.c, 20, PROTO_ERR_UNKNOWN_OP);
    assert_non_null(strstr(e.c->recs[20].err_msg, "launch"));
    et_assert_err(e.c, 21, PROTO_ERR_UNKNOWN_OP);
    et_assert_err(e.c, 30, PROTO_ERR_BAD_REQUEST);
    assert_non_null(strstr(e.c->recs[30].err_msg, "top_p"));
    et_assert_err(e.c, 31, PROTO_ERR_BAD_REQUEST);
    et_assert_err(e.c, 32, PROTO_ERR_BAD_JSON);
    et_assert_err(e.c, 33, PROTO_ERR_LINE_TOO_LONG);
    et_assert_done(e.c, 34, PROTO_FINISH_LENGTH);
    assert_int_equal(e.c->recs[34].n_tok, 3);
    /* not JSON, an array, the stop with a string id: err without an id */
    assert_int_equal(e.c->n_anon_err, 3);
    assert_int_equal(e.c->n_pong, 1);
    assert_int_equal(e.c->last_pong, 8);
    assert_int_equal(eng_finish(&e), 0);
}

/* A ping is answered at once even while a long step runs: here one
 * prefill step of 1000 tokens (about a second at one thread; 300 tokens,
 * several seconds, under a sanitizer). The pong must come before the
 * step's first token, not after the step. */
static void test_ping_during_long_step(void **state)
{
    (void)state;
    eng e;
    eng_start(&e, "1", "2048", "2048");
    enum { N = TEST_SANITIZED ? 300 : 1000 };
    size_t cap = 64 + (size_t)N * 8;
    char *gen = malloc(cap);
    assert_non_null(gen);
    size_t off = (size_t)snprintf(gen, cap, "{\"op\":\"gen\",\"id\":40,\"tokens\":[1");
    for (int i = 1; i < N; i++) off += (size_t)snprintf(gen + off, cap - off, ",%d", 300 + i % 200);
    snprintf(gen + off, cap - off, "],\"max_tokens\":1,\"sampling\":{\"temperature\":0}}\n");
    eng_send(&e, gen);
    free(gen);
    usleep(20000); /* the scheduler is inside the step by now */
    eng_send(&e, "{\"op\":\"ping\",\"id\":9}\n");
    char *line;
    if (pipeproc_read_line(&e.p, &line, LINE_TIMEOUT_MS) != 1) fail_msg("no line after the ping");
    proto_msg m;
    proto_error pe;
    if (proto_decode(line, strlen(line), PROTO_DIR_TO_SERVER, &m, &pe) != 0)
        fail_msg("%s: %s", pe.message, line);
    if (m.op != PROTO_OP_PONG) fail_msg("the first line after the ping is not its pong: %s", line);
    assert_int_equal(m.id, 9);
    proto_msg_free(&m);
    free(line);
    int64_t ids[] = {40};
    eng_wait(&e, ids, 1);
    et_assert_done(e.c, 40, PROTO_FINISH_LENGTH);
    assert_int_equal(e.c->recs[40].stats.prompt_n, N);
    assert_int_equal(eng_finish(&e), 0);
}

/* Reads one line and decodes it (the test fails on a hang or a bad line). */
static void eng_read_msg(eng *e, proto_msg *m, char **line_out)
{
    char *line;
    if (pipeproc_read_line(&e->p, &line, LINE_TIMEOUT_MS) != 1) fail_msg("no line from the engine");
    proto_error pe;
    if (proto_decode(line, strlen(line), PROTO_DIR_TO_SERVER, m, &pe) != 0) {
        fail_msg("%s: %s", pe.message, line);
    }
    if (line_out != NULL) *line_out = line;
    else free(line);
}

/* Sends ping `id` and reads until its pong, giving every other line to the
 * collector; returns the pong's figures. */
static proto_pong eng_ping(eng *e, int64_t id)
{
    char ping[64];
    snprintf(ping, sizeof(ping), "{\"op\":\"ping\",\"id\":%lld}\n", (long long)id);
    eng_send(e, ping);
    for (;;) {
        proto_msg m;
        char *line;
        eng_read_msg(e, &m, &line);
        if (m.op == PROTO_OP_PONG && m.id == id) {
            proto_pong pg = m.u.pong;
            free(line);
            proto_msg_free(&m);
            return pg;
        }
        et_collect_line(e->c, line, strlen(line));
        free(line);
        proto_msg_free(&m);
    }
}

/* A pong carries the scheduler's progress: no step before any work; after
 * a gen of 5 tokens, exactly 5 steps (one prefill step that samples the
 * first token, then one per token), none running, a measured cost per
 * token, and the KV pool's figures with every block free again. */
static void test_pong_reports_progress(void **state)
{
    (void)state;
    eng e;
    eng_start(&e, "2", "256", "64");
    proto_pong pg = eng_ping(&e, 1);
    assert_true(pg.has_progress && pg.has_kv);
    assert_int_equal(pg.steps, 0);
    assert_false(pg.running);
    assert_int_equal(pg.step_tokens, 0);
    assert_true(pg.ms_per_token == 0.0);
    assert_int_equal(pg.kv_blocks, e.ready.u.ready.kv_n_blocks);
    assert_int_equal(pg.kv_bytes, e.ready.u.ready.kv_bytes);
    assert_int_equal(pg.kv_used, 0);
    eng_send(&e, "{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403,407],\"max_tokens\":5,"
                 "\"ignore_eos\":true,\"sampling\":{\"temperature\":0}}\n");
    int64_t ids[] = {2};
    eng_wait(&e, ids, 1);
    et_assert_done(e.c, 2, PROTO_FINISH_LENGTH);
    pg = eng_ping(&e, 3);
    assert_int_equal(pg.steps, 5);
    assert_false(pg.running);
    assert_true(pg.step_ms == 0.0);
    assert_true(pg.ms_per_token > 0.0);
    assert_int_equal(pg.kv_used, 0);
    assert_int_equal(eng_finish(&e), 0);
}

/* The prefix cache over pipes: ready reports it (on by default, the whole
 * pool as budget); the same seeded prompt again reuses its two full blocks
 * (cached_n 64) and gives the same tokens and log-probabilities; `cache`
 * false reuses nothing; the pong counts lookups and hits and the cached
 * blocks; --prefix-cache-mib 0 turns it off. */
static void test_prefix_cache_over_pipes(void **state)
{
    (void)state;
    int32_t prompt[70];
    for (int i = 0; i < 70; i++) prompt[i] = 1 + (i * 37) % 500;
    const char *opts[][2] = {{NULL, NULL}, {"--prefix-cache-mib", "0"}};
    for (int t = 0; t < 2; t++) {
        eng e;
        eng_start_opt(&e, "2", "256", "16", opts[t][0], opts[t][1]);
        const proto_ready *r = &e.ready.u.ready;
        assert_int_equal(r->kv_prefix_cache, t == 0);
        assert_int_equal(r->kv_cache_blocks, t == 0 ? r->kv_n_blocks : 0);
        assert_int_equal(r->kv_cache_bytes, t == 0 ? r->kv_bytes : 0);
        static char line[1 << 14];
        const char *extra[] = {"\"logprobs\":2", "\"logprobs\":2", "\"logprobs\":2,\"cache\":false"};
        for (int64_t id = 1; id <= 3; id++) {
            et_gen_line(line, sizeof(line), id, prompt, 70, 10, 0.8, 4321, extra[id - 1]);
            eng_send(&e, line);
            eng_wait(&e, &id, 1);
            et_assert_done(e.c, id, e.c->recs[id].finish);
        }
        assert_int_equal(e.c->recs[1].stats.cached_n, 0);
        assert_int_equal(e.c->recs[2].stats.cached_n, t == 0 ? 64 : 0);
        assert_int_equal(e.c->recs[3].stats.cached_n, 0);
        for (int id = 2; id <= 3; id++) {
            const et_rec *a = &e.c->recs[1], *b = &e.c->recs[id];
            assert_int_equal(a->n_tok, b->n_tok);
            assert_memory_equal(a->toks, b->toks, a->n_tok * sizeof(int32_t));
            assert_int_equal(a->n_lps, b->n_lps);
            for (size_t k = 0; k < a->n_lps; k++) {
                assert_memory_equal(&a->lps[k].logprob, &b->lps[k].logprob, sizeof(float));
                assert_int_equal(a->lps[k].n_top, b->lps[k].n_top);
                for (size_t j = 0; j < a->lps[k].n_top; j++) {
                    assert_int_equal(a->lps[k].top[j].token, b->lps[k].top[j].token);
                    assert_memory_equal(&a->lps[k].top[j].logprob, &b->lps[k].top[j].logprob,
                                        sizeof(float));
                }
            }
        }
        proto_pong pg = eng_ping(&e, 9);
        assert_int_equal(pg.kv_lookup_tokens, t == 0 ? 140 : 0); /* the opt-out looks nothing up */
        assert_int_equal(pg.kv_hit_tokens, t == 0 ? 64 : 0);
        assert_true(t == 0 ? pg.kv_cached >= 2 : pg.kv_cached == 0);
        assert_int_equal(pg.kv_used, 0);
        assert_int_equal(pg.kv_preemptions, 0);
        assert_int_equal(eng_finish(&e), 0);
    }
}

/* The fault hook (STRATA_TEST_HANG_AT_STEP=3): the scheduler runs steps 1
 * and 2 (two tokens) and then hangs inside step 3 for good, while the
 * reader goes on answering pings: every pong says 2 steps, a step running
 * over 1 token (the decode of one sequence) for longer and longer, and the
 * request's KV blocks held. That is the engine the server's watchdog must
 * catch; the test kills it. */
static void test_hang_hook_stops_steps_not_pongs(void **state)
{
    (void)state;
    eng e;
    setenv("STRATA_TEST_HANG_AT_STEP", "3", 1);
    eng_start(&e, "1", "256", "64");
    unsetenv("STRATA_TEST_HANG_AT_STEP");
    eng_send(&e, "{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403,407],\"max_tokens\":20,"
                 "\"ignore_eos\":true,\"sampling\":{\"temperature\":0}}\n");
    while (e.c->recs[2].n_tok < 2) {
        if (!eng_read(&e)) fail_msg("the engine's output ended");
    }
    double last_ms = -1.0;
    for (int i = 0; i < 4; i++) {
        usleep(150 * 1000);
        proto_pong pg = eng_ping(&e, 10 + i);
        assert_true(pg.has_progress);
        assert_int_equal(pg.steps, 2);
        assert_true(pg.running);
        assert_int_equal(pg.step_tokens, 1);
        assert_true(pg.step_ms > last_ms);
        assert_true(pg.kv_used > 0);
        last_ms = pg.step_ms;
    }
    assert_true(last_ms > 0.0);
    assert_int_equal(e.c->recs[2].n_tok, 2); /* nothing came after step 2 */
    assert_int_equal(e.c->recs[2].n_terminal, 0);
    kill(e.p.pid, SIGKILL);
    assert_int_equal(pipeproc_finish(&e.p, LINE_TIMEOUT_MS), 128 + SIGKILL);
    assert_int_equal(e.c->n_bad, 0);
    et_collect_free(e.c);
    proto_msg_free(&e.ready);
    pthread_mutex_destroy(&e.lock);
}

/* Broken lines are answered by the reader, in the order the lines came, even
 * while a long prefill step runs: a broken line naming an id that is not in
 * flight gets its `err` with that id, one naming the id of the running
 * request gets one without (and the request runs on), and a ping sent after
 * them gets its `pong` after both errs and before the step's token. */
static void test_bad_line_answered_before_later_ping(void **state)
{
    (void)state;
    eng e;
    eng_start(&e, "1", "2048", "2048");
    enum { N = TEST_SANITIZED ? 300 : 1000 };
    size_t cap = 256 + (size_t)N * 8;
    char *lines = malloc(cap);
    assert_non_null(lines);
    size_t off = (size_t)snprintf(lines, cap, "{\"op\":\"gen\",\"id\":40,\"tokens\":[1");
    for (int i = 1; i < N; i++) off += (size_t)snprintf(lines + off, cap - off, ",%d", 300 + i % 200);
    snprintf(lines + off, cap - off,
             "],\"max_tokens\":1,\"sampling\":{\"temperature\":0}}\n"
             "{\"op\":\"gen\",\"id\":41,\"tokens\":[1,\n"
             "{\"op\":\"stop\",\"id\":40,\"bogus\":}\n"
             "{\"op\":\"ping\",\"id\":9}\n");
    eng_send(&e, lines);
    free(lines);
    proto_msg m;
    eng_read_msg(&e, &m, NULL);
    if (m.op != PROTO_OP_ERR) fail_msg("the first line is a %s, not the err", proto_op_name(m.op));
    assert_true(m.has_id);
    assert_int_equal(m.id, 41);
    assert_string_equal(m.u.err.code, PROTO_ERR_BAD_JSON);
    proto_msg_free(&m);
    eng_read_msg(&e, &m, NULL);
    if (m.op != PROTO_OP_ERR) fail_msg("the second line is a %s, not the err", proto_op_name(m.op));
    assert_false(m.has_id); /* 40 is in flight: not ended by a broken line */
    assert_non_null(strstr(m.u.err.message, "40"));
    proto_msg_free(&m);
    eng_read_msg(&e, &m, NULL);
    if (m.op != PROTO_OP_PONG) fail_msg("the third line is a %s, not the pong", proto_op_name(m.op));
    assert_int_equal(m.id, 9);
    proto_msg_free(&m);
    int64_t ids[] = {40};
    eng_wait(&e, ids, 1);
    et_assert_done(e.c, 40, PROTO_FINISH_LENGTH);
    assert_int_equal(e.c->recs[40].n_tok, 1);
    /* 40 has ended: a broken line naming it now gets the id (nothing of 40
     * can follow), and the engine serves on */
    eng_send(&e, "{\"op\":\"gen\",\"id\":40,\"tokens\":7}\n");
    eng_read_msg(&e, &m, NULL);
    assert_int_equal(m.op, PROTO_OP_ERR);
    assert_true(m.has_id && m.id == 40);
    proto_msg_free(&m);
    assert_int_equal(eng_finish(&e), 0);
}

static void test_shutdown_and_eof(void **state)
{
    (void)state;
    /* shutdown: the running request finishes, a later one is refused */
    eng e;
    eng_start(&e, "2", "256", "32");
    eng_send(&e, "{\"op\":\"gen\",\"id\":1,\"tokens\":[1,403],\"max_tokens\":30,"
                 "\"ignore_eos\":true}\n{\"op\":\"shutdown\"}\n"
                 "{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403],\"max_tokens\":3}\n");
    while (eng_read(&e)) {
    }
    et_assert_done(e.c, 1, PROTO_FINISH_LENGTH);
    assert_int_equal(e.c->recs[1].n_tok, 30);
    et_assert_err(e.c, 2, PROTO_ERR_SHUTTING_DOWN);
    assert_int_equal(eng_finish(&e), 0);

    /* end of input: the same (what was accepted finishes), exit 0 */
    eng_start(&e, "1", "256", "32");
    eng_send(&e, "{\"op\":\"gen\",\"id\":1,\"tokens\":[1,403],\"max_tokens\":20,"
                 "\"ignore_eos\":true}\n{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403],"
                 "\"max_tokens\":20,\"ignore_eos\":true}\n");
    pipeproc_close_input(&e.p);
    while (eng_read(&e)) {
    }
    et_assert_done(e.c, 1, PROTO_FINISH_LENGTH);
    et_assert_done(e.c, 2, PROTO_FINISH_LENGTH);
    assert_int_equal(e.c->recs[2].n_tok, 20);
    assert_int_equal(eng_finish(&e), 0);
}

static void test_stop_over_pipes(void **state)
{
    (void)state;
    eng e;
    eng_start(&e, "2", "2048", "8");
    /* a long prompt: hundreds of chunks of 8; the stop lands somewhere in
     * its prefill or decode, and the request ends cancelled either way */
    static char line[1 << 16];
    int32_t prompt[1900];
    prompt[0] = 1;
    for (int i = 1; i < 1900; i++) prompt[i] = 260 + i % 200;
    et_gen_line(line, sizeof(line), 1, prompt, 1900, 100, 0, -1, "\"ignore_eos\":true");
    eng_send(&e, line);
    eng_send(&e, "{\"op\":\"stop\",\"id\":1}\n");
    int64_t id = 1;
    eng_wait(&e, &id, 1);
    et_assert_done(e.c, 1, PROTO_FINISH_CANCELLED);
    assert_true(e.c->recs[1].stats.prompt_n <= 1900);
    /* mid-decode: stop after three tokens */
    eng_send(&e, "{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403],\"max_tokens\":-1,"
                 "\"ignore_eos\":true}\n");
    for (;;) {
        pthread_mutex_lock(&e.lock);
        size_t n = e.c->recs[2].n_tok;
        pthread_mutex_unlock(&e.lock);
        if (n >= 3) break;
        if (!eng_read(&e)) fail_msg("output ended");
    }
    eng_send(&e, "{\"op\":\"stop\",\"id\":2}\n");
    id = 2;
    eng_wait(&e, &id, 1);
    et_assert_done(e.c, 2, PROTO_FINISH_CANCELLED);
    assert_true(e.c->recs[2].n_tok >= 3);
    assert_int_equal(eng_finish(&e), 0);
}

/* ---- four clients, 80 requests each, random stops ---- */

#define N_CLIENTS 4
#define N_PER_CLIENT 80
#define N_PROMPTS 4
#define MAX_TOKENS 12

typedef struct client {
    eng *e;
    int index;
    const et_golden *g;
    size_t n_g;
    unsigned seed;
    int n_stops;
} client;

static void sleep_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static int64_t client_id(int c, int j)
{
    return 1 + c * N_PER_CLIENT + j;
}

static void *client_main(void *arg)
{
    client *cl = arg;
    char line[4096];
    for (int j = 0; j < N_PER_CLIENT; j++) {
        int64_t id = client_id(cl->index, j);
        const et_golden *s = &cl->g[j % N_PROMPTS % cl->n_g];
        et_gen_line(line, sizeof(line), id, s->prompt, s->n_prompt, MAX_TOKENS, 0.8,
                    500 + j % N_PROMPTS, NULL);
        unsigned r = (unsigned)rand_r(&cl->seed) % 100;
        if (r < 15) { /* gen and stop in one write: cancelled before or as it starts */
            size_t k = strlen(line);
            snprintf(line + k, sizeof(line) - k, "{\"op\":\"stop\",\"id\":%lld}\n", (long long)id);
            pipeproc_write_str(&cl->e->p, line);
            cl->n_stops++;
        } else if (r < 40) { /* a stop after a random pause */
            pipeproc_write_str(&cl->e->p, line);
            sleep_us((unsigned)rand_r(&cl->seed) % 3000);
            snprintf(line, sizeof(line), "{\"op\":\"stop\",\"id\":%lld}\n", (long long)id);
            pipeproc_write_str(&cl->e->p, line);
            cl->n_stops++;
        } else {
            pipeproc_write_str(&cl->e->p, line);
        }
        if (r % 10 == 0) { /* stop of an id nobody uses, and a ping */
            snprintf(line, sizeof(line), "{\"op\":\"stop\",\"id\":%lld}\n{\"op\":\"ping\",\"id\":%lld}\n",
                     (long long)(100000 + id), (long long)id);
            pipeproc_write_str(&cl->e->p, line);
        }
        if (j > 10 && r % 7 == 0) { /* stop of an id that may have finished */
            snprintf(line, sizeof(line), "{\"op\":\"stop\",\"id\":%lld}\n",
                     (long long)client_id(cl->index, j - 10));
            pipeproc_write_str(&cl->e->p, line);
            cl->n_stops++;
        }
        sleep_us((unsigned)rand_r(&cl->seed) % 1000);
    }
    return NULL;
}

static void test_terminal_invariant_under_load(void **state)
{
    (void)state;
    et_golden g[4];
    size_t n_g = et_load_greedy(g, 4);
    eng e;
    eng_start(&e, "4", "256", "32");
    /* references: each prompt alone */
    char line[4096];
    int32_t ref[N_PROMPTS][MAX_TOKENS];
    size_t n_ref[N_PROMPTS];
    for (int p = 0; p < N_PROMPTS; p++) {
        const et_golden *s = &g[p % n_g];
        int64_t id = 900 + p;
        et_gen_line(line, sizeof(line), id, s->prompt, s->n_prompt, MAX_TOKENS, 0.8, 500 + p, NULL);
        eng_send(&e, line);
        eng_wait(&e, &id, 1);
        n_ref[p] = e.c->recs[id].n_tok;
        memcpy(ref[p], e.c->recs[id].toks, n_ref[p] * sizeof(int32_t));
    }
    client cl[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int c = 0; c < N_CLIENTS; c++) {
        cl[c] = (client){.e = &e, .index = c, .g = g, .n_g = n_g, .seed = 1234u + (unsigned)c};
        assert_int_equal(pthread_create(&th[c], NULL, client_main, &cl[c]), 0);
    }
    int64_t ids[N_CLIENTS * N_PER_CLIENT];
    for (int c = 0; c < N_CLIENTS; c++) {
        for (int j = 0; j < N_PER_CLIENT; j++) ids[c * N_PER_CLIENT + j] = client_id(c, j);
    }
    eng_wait(&e, ids, N_CLIENTS * N_PER_CLIENT);
    int n_stops = 0;
    for (int c = 0; c < N_CLIENTS; c++) {
        pthread_join(th[c], NULL);
        n_stops += cl[c].n_stops;
    }
    /* late stops of finished ids must produce nothing: read to the end */
    pipeproc_write_str(&e.p, "{\"op\":\"shutdown\"}\n");
    while (eng_read(&e)) {
    }
    int n_cancelled = 0;
    for (int c = 0; c < N_CLIENTS; c++) {
        for (int j = 0; j < N_PER_CLIENT; j++) {
            int64_t id = client_id(c, j);
            const et_rec *r = &e.c->recs[id];
            int p = j % N_PROMPTS;
            if (r->n_terminal != 1 || !r->done || r->after_terminal) {
                fail_msg("id %lld: %d terminal messages (done %d), after terminal %d",
                         (long long)id, r->n_terminal, r->done, r->after_terminal);
            }
            if (r->stats.predicted_n != (int64_t)r->n_tok) fail_msg("id %lld: stats", (long long)id);
            /* never another request's tokens: a prefix of (or equal to) its reference */
            if (r->n_tok > n_ref[p] ||
                (r->n_tok > 0 && memcmp(r->toks, ref[p], r->n_tok * sizeof(int32_t)) != 0)) {
                fail_msg("id %lld: tokens differ from its prompt's reference", (long long)id);
            }
            if (r->finish == PROTO_FINISH_CANCELLED) n_cancelled++;
            else assert_int_equal(r->n_tok, n_ref[p]);
        }
    }
    print_message("%d requests, %d stops sent, %d cancelled\n", N_CLIENTS * N_PER_CLIENT,
                  n_stops, n_cancelled);
    assert_true(n_cancelled > 0 && n_cancelled <= n_stops);
    assert_int_equal(e.c->n_anon_err, 0);
    assert_int_equal(eng_finish(&e), 0);
}

/* Starts the engine with the options of extra (NULL-terminated, at most 12). */
static void eng_start_argv(eng *e, const char *const *extra)
{
    memset(e, 0, sizeof(*e));
    TESTDATA_FILE(e->model_path, MODEL);
    char err_path[4200];
    snprintf(err_path, sizeof(err_path), "%s/engine-stderr.txt", testdata_scratch_dir());
    const char *argv[24] = {STRATA_BIN, "engine", "-m", e->model_path, "-t", "1"};
    int n = 6;
    for (int i = 0; extra[i] != NULL && n < 23; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    if (pipeproc_start(&e->p, argv, err_path) != 0) fail_msg("cannot start %s", STRATA_BIN);
    e->c = et_collect_new();
    pthread_mutex_init(&e->lock, NULL);
    char *line;
    if (pipeproc_read_line(&e->p, &line, LINE_TIMEOUT_MS) != 1) fail_msg("no ready line");
    proto_error pe;
    if (proto_decode(line, strlen(line), PROTO_DIR_TO_SERVER, &e->ready, &pe) != 0) {
        fail_msg("ready: %s: %s", pe.message, line);
    }
    free(line);
}

/* The shared, elastic KV pool over pipes: ready reports it; four seeded
 * requests in a pool for two finish with the tokens and log-probabilities
 * each gives alone, at least one of them preempted (its stats and the
 * pong say so); and once idle, the engine gives the pool's steps back
 * after the hold (pong's committed bytes fall to the kept part) without
 * any request to drive it. */
static void test_kv_pool_over_pipes(void **state)
{
    (void)state;
    const char *opts[] = {"--slots", "4", "--ctx", "256", "--batch", "32", "--kv-max", "256",
                          "--kv-step", "64", "--kv-init", "64", "--kv-hold-ms", "300", NULL};
    eng e;
    eng_start_argv(&e, opts);
    const proto_ready *r = &e.ready.u.ready;
    assert_int_equal(r->kv_n_blocks, 8);
    assert_int_equal(r->kv_max_tokens, 256);
    assert_int_equal(r->kv_step_tokens, 64);
    assert_int_equal(r->kv_init_tokens, 64);
    assert_int_equal(r->kv_hold_ms, 300);
    assert_false(r->kv_resident);
    const int64_t init_bytes = r->kv_bytes / 4;
    int32_t prompts[4][40];
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 40; k++) prompts[i][k] = 1 + (i * 131 + k * 37) % 500;
    }
    static char line[1 << 14];
    const char *extra = "\"logprobs\":1,\"ignore_eos\":true";
    /* alone, one after the other */
    for (int64_t i = 0; i < 4; i++) {
        et_gen_line(line, sizeof(line), 1 + i, prompts[i], 40, 80, 0.9, 500 + i, extra);
        eng_send(&e, line);
        int64_t id = 1 + i;
        eng_wait(&e, &id, 1);
    }
    /* together: 4 x 120 positions in a pool of 256 */
    int64_t ids[4];
    for (int64_t i = 0; i < 4; i++) {
        ids[i] = 11 + i;
        et_gen_line(line, sizeof(line), ids[i], prompts[i], 40, 80, 0.9, 500 + i, extra);
        eng_send(&e, line);
    }
    eng_wait(&e, ids, 4);
    int64_t preempted = 0;
    for (int i = 0; i < 4; i++) {
        const et_rec *a = &e.c->recs[1 + i], *b = &e.c->recs[11 + i];
        et_assert_done(e.c, 1 + i, PROTO_FINISH_LENGTH);
        et_assert_done(e.c, 11 + i, PROTO_FINISH_LENGTH);
        assert_int_equal(a->n_tok, 80);
        assert_int_equal(b->n_tok, 80);
        assert_memory_equal(a->toks, b->toks, 80 * sizeof(int32_t));
        for (size_t k = 0; k < 80; k++) {
            assert_memory_equal(&a->lps[k].logprob, &b->lps[k].logprob, sizeof(float));
        }
        assert_int_equal(a->stats.preempted, 0);
        preempted += b->stats.preempted;
    }
    assert_true(preempted >= 1);
    proto_pong pg = eng_ping(&e, 900);
    assert_int_equal(pg.kv_preemptions, preempted);
    assert_true(pg.kv_committed_bytes > init_bytes);
    /* idle now: within a few holds the steps go back (bounded: 10 s) */
    bool fell = false;
    for (int i = 0; i < 100 && !fell; i++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pg = eng_ping(&e, 901 + i);
        fell = pg.kv_committed_bytes == init_bytes;
    }
    assert_true(fell);
    assert_int_equal(eng_finish(&e), 0);
}

/* Entries of /dev/shm (-1 when it cannot be read). */
static int count_shm(void)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL) return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* An engine killed mid-request loses nothing outside itself: two engines
 * with elastic pools run the same seeded request; one is killed with
 * SIGKILL while its request is mid-way (blocks held, preempting another);
 * the other's output is still exactly the request's run alone, and the
 * killed one leaves no shared memory behind (its pool is private anonymous
 * memory, gone with the process). */
static void test_killed_engine_loses_nothing_outside(void **state)
{
    (void)state;
    const char *opts[] = {"--slots", "2", "--ctx", "256", "--kv-max", "128", "--kv-step", "32",
                          "--kv-hold-ms", "0", NULL};
    int shm_before = count_shm();
    int32_t prompt[30];
    for (int k = 0; k < 30; k++) prompt[k] = 1 + (k * 53) % 500;
    static char line[1 << 14];
    eng alone;
    eng_start_argv(&alone, opts);
    et_gen_line(line, sizeof(line), 1, prompt, 30, 90, 0.9, 77, "\"ignore_eos\":true");
    eng_send(&alone, line);
    int64_t id = 1;
    eng_wait(&alone, &id, 1);
    et_assert_done(alone.c, 1, PROTO_FINISH_LENGTH);

    eng a, b;
    eng_start_argv(&a, opts);
    eng_start_argv(&b, opts);
    /* two requests each, in a pool for about one: preemption on both */
    for (int64_t k = 1; k <= 2; k++) {
        et_gen_line(line, sizeof(line), k, prompt, 30, 90, 0.9, 77, "\"ignore_eos\":true");
        eng_send(&a, line);
        eng_send(&b, line);
    }
    /* a is killed once it has sent some tokens of request 1 */
    while (a.c->recs[1].n_tok < 20) {
        if (!eng_read(&a)) fail_msg("engine a ended early");
    }
    kill(a.p.pid, SIGKILL);
    assert_int_equal(pipeproc_finish(&a.p, LINE_TIMEOUT_MS), 128 + SIGKILL);
    assert_int_equal(a.c->recs[1].n_terminal, 0);
    et_collect_free(a.c);
    proto_msg_free(&a.ready);
    pthread_mutex_destroy(&a.lock);

    int64_t ids[2] = {1, 2};
    eng_wait(&b, ids, 2);
    for (int k = 1; k <= 2; k++) {
        et_assert_done(b.c, k, PROTO_FINISH_LENGTH);
        assert_int_equal(b.c->recs[k].n_tok, alone.c->recs[1].n_tok);
        assert_memory_equal(b.c->recs[k].toks, alone.c->recs[1].toks,
                            alone.c->recs[1].n_tok * sizeof(int32_t));
    }
    assert_true(b.c->recs[2].stats.preempted >= 1 || b.c->recs[1].stats.preempted >= 1);
    assert_int_equal(eng_finish(&b), 0);
    assert_int_equal(eng_finish(&alone), 0);
    assert_int_equal(count_shm(), shm_before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_and_greedy),
        cmocka_unit_test(test_seeded_equals_strata_run),
        cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_bad_lines_keep_serving),
        cmocka_unit_test(test_ping_during_long_step),
        cmocka_unit_test(test_pong_reports_progress),
        cmocka_unit_test(test_prefix_cache_over_pipes),
        cmocka_unit_test(test_hang_hook_stops_steps_not_pongs),
        cmocka_unit_test(test_bad_line_answered_before_later_ping),
        cmocka_unit_test(test_shutdown_and_eof),
        cmocka_unit_test(test_stop_over_pipes),
        cmocka_unit_test(test_terminal_invariant_under_load),
        cmocka_unit_test(test_kv_pool_over_pipes),
        cmocka_unit_test(test_killed_engine_loses_nothing_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
