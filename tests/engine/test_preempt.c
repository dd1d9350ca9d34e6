/* The shared KV pool and preemption (engine.h "KV pool") in-process on
 * stories260K: a pool sized on its own (--kv-max), smaller than slots x
 * context; requests that wait for blocks, requests preempted for older
 * ones and resumed, a request too big for the whole pool, cancellation of
 * a request whose blocks are shared.
 *
 * What is asserted is what a client sees: a seeded request (temperature,
 * penalties, logprobs) gives exactly the tokens and log-probabilities of
 * its run alone in a big pool even when it was preempted, its stats say it
 * was, every id gets one terminal message, and the error codes. */
#include "engine/engine.h"
#include "engine/protocol.h"
#include "model/model.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_testutil.h"

#define MODEL "models/stories260K.gguf"

typedef struct fixture {
    model *m;
    engine *e;
    proto_buf out;
    et_collect *c;
} fixture;

static void fx_open(fixture *f, int slots, int64_t n_ctx, int64_t n_batch, int64_t kv_max,
                    bool no_cache)
{
    memset(f, 0, sizeof(*f));
    char path[4096];
    TESTDATA_FILE(path, MODEL);
    strata_err err;
    if (model_open(&f->m, path, &err) != 0) fail_msg("%s", err.msg);
    engine_params p = {.n_slots = slots, .n_ctx = n_ctx, .n_batch = n_batch, .n_threads = 1,
                       .kv_max_tokens = kv_max, .no_prefix_cache = no_cache};
    if (engine_init(&f->e, f->m, &p, &err) != 0) fail_msg("%s", err.msg);
    f->c = et_collect_new();
}

static void fx_close(fixture *f)
{
    engine_free(f->e);
    model_close(f->m);
    proto_buf_free(&f->out);
    et_collect_free(f->c);
}

static void fx_send(fixture *f, const char *line)
{
    et_send(f->e, &f->out, f->c, line);
}

static void fx_step(fixture *f)
{
    et_step(f->e, &f->out, f->c);
}

static void fx_run(fixture *f)
{
    et_run(f->e, &f->out, f->c);
}

/* A seeded gen with penalties and logprobs: every piece of sampler state
 * (RNG, penalty history) must survive a preemption. */
static void fx_gen(fixture *f, int64_t id, const int32_t *toks, size_t n, int64_t max_tokens,
                   int64_t seed)
{
    static char line[1 << 16];
    size_t k = (size_t)snprintf(line, sizeof(line), "{\"op\":\"gen\",\"id\":%lld,\"tokens\":[",
                                (long long)id);
    for (size_t i = 0; i < n; i++) k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%d", i ? "," : "", toks[i]);
    snprintf(line + k, sizeof(line) - k,
             "],\"max_tokens\":%lld,\"logprobs\":2,\"sampling\":{\"temperature\":0.9,"
             "\"seed\":%lld,\"repeat_penalty\":1.1,\"frequency_penalty\":0.3,"
             "\"penalty_last_n\":64}}",
             (long long)max_tokens, (long long)seed);
    fx_send(f, line);
}

static proto_pong fx_pong(fixture *f)
{
    proto_pong pg;
    engine_get_progress(f->e, &pg);
    return pg;
}

/* Four different prompts of 40-55 tokens, cut from the golden ones. */
static void make_prompts(int32_t prompts[4][128], size_t lens[4])
{
    et_golden g[4];
    size_t n = et_load_greedy(g, 4);
    assert_true(n >= 1);
    for (int i = 0; i < 4; i++) {
        const et_golden *s = &g[(size_t)i % n];
        size_t len = 0, want = 40 + (size_t)i * 5;
        /* a distinct first token, so that no two share a cached block */
        prompts[i][len++] = 1;
        prompts[i][len++] = 300 + i;
        for (size_t k = 0; k < s->n_prompt && len < want; k++) prompts[i][len++] = s->prompt[k];
        for (size_t k = 0; k < s->n_gen && len < want; k++) prompts[i][len++] = s->gen[k];
        lens[i] = len;
    }
}

typedef struct run_out {
    int32_t toks[4][128];
    float lps[4][128];
    size_t n[4];
} run_out;

static void keep(const fixture *f, run_out *o)
{
    for (int i = 0; i < 4; i++) {
        const et_rec *r = &f->c->recs[i];
        assert_true(r->done && r->n_terminal == 1 && !r->after_terminal);
        assert_true(r->n_tok <= 128 && r->n_lps == r->n_tok);
        o->n[i] = r->n_tok;
        memcpy(o->toks[i], r->toks, r->n_tok * sizeof(int32_t));
        for (size_t k = 0; k < r->n_tok; k++) o->lps[i][k] = r->lps[k].logprob;
    }
}

/* Four seeded requests in a pool for two: all finish, at least one is
 * preempted (its stats and pong say so), and every output (tokens and
 * log-probabilities) equals its run alone in a pool with room for all.
 * With the prefix cache on (resuming mostly from cached blocks) and off
 * (resuming by recomputing everything), and with two batch sizes. */
static void test_preempted_equals_alone(void **state)
{
    (void)state;
    int32_t prompts[4][128];
    size_t lens[4];
    make_prompts(prompts, lens);
    const int64_t max_tokens = 70; /* <= 125 positions: 4 blocks each */
    run_out *alone = calloc(1, sizeof(run_out)), *got = calloc(1, sizeof(run_out));
    assert_non_null(alone);
    assert_non_null(got);
    fixture f;
    fx_open(&f, 1, 256, 64, 0, true);
    for (int i = 0; i < 4; i++) {
        fx_gen(&f, i, prompts[i], lens[i], max_tokens, 77 + i);
        fx_run(&f);
        assert_int_equal(f.c->recs[i].stats.preempted, 0);
    }
    keep(&f, alone);
    fx_close(&f);
    for (int i = 0; i < 4; i++) assert_int_equal(alone->n[i], max_tokens);

    const struct { bool no_cache; int64_t batch; } cfg[] = {{false, 64}, {true, 64}, {false, 16}};
    for (size_t t = 0; t < sizeof(cfg) / sizeof(cfg[0]); t++) {
        /* 8 blocks: two requests of 4 blocks at most */
        fx_open(&f, 4, 256, cfg[t].batch, 256, cfg[t].no_cache);
        for (int i = 0; i < 4; i++) fx_gen(&f, i, prompts[i], lens[i], max_tokens, 77 + i);
        fx_run(&f);
        keep(&f, got);
        int64_t preempted = 0;
        for (int i = 0; i < 4; i++) {
            const et_rec *r = &f.c->recs[i];
            assert_int_equal(r->finish, PROTO_FINISH_LENGTH);
            assert_int_equal(r->stats.prompt_n, (int64_t)lens[i]);
            preempted += r->stats.preempted;
            if (got->n[i] != alone->n[i] ||
                memcmp(got->toks[i], alone->toks[i], got->n[i] * sizeof(int32_t)) != 0 ||
                memcmp(got->lps[i], alone->lps[i], got->n[i] * sizeof(float)) != 0) {
                fail_msg("config %zu: request %d (preempted %lld times) differs from its run alone",
                         t, i, (long long)r->stats.preempted);
            }
        }
        /* the oldest is never preempted */
        assert_int_equal(f.c->recs[0].stats.preempted, 0);
        assert_true(preempted >= 1);
        proto_pong pg = fx_pong(&f);
        assert_int_equal(pg.kv_preemptions, preempted);
        assert_int_equal(pg.kv_blocks, 8);
        assert_int_equal(pg.kv_used, 0);
        fx_close(&f);
    }
    free(alone);
    free(got);
}

/* --slots 16 --ctx 32768 in a pool of 1024 positions: it starts, ready
 * says the pool, and 16 requests at once are served, those that do not fit
 * waiting in the queue. */
static void test_many_slots_small_pool(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 16, 32768, 512, 1024, false);
    proto_msg ready;
    engine_ready(f.e, &ready);
    assert_int_equal(ready.u.ready.slots, 16);
    assert_int_equal(ready.u.ready.n_ctx, 32768);
    assert_int_equal(ready.u.ready.kv_n_blocks, 32);
    int32_t prompts[4][128];
    size_t lens[4];
    make_prompts(prompts, lens);
    for (int i = 0; i < 16; i++) fx_gen(&f, i, prompts[i % 4], lens[i % 4], 60, i);
    /* 16 x ~100 positions do not fit in 1024: some wait (at first, or
     * preempted once the first ones grow) */
    bool waited = false;
    for (int i = 0; i < 100000 && engine_busy(f.e); i++) {
        fx_step(&f);
        if (engine_busy(f.e) && engine_n_queued(f.e) > 0) {
            waited = true;
            assert_true(engine_n_running(f.e) < 16);
        }
    }
    assert_true(waited);
    assert_true(fx_pong(&f).kv_preemptions > 0);
    for (int i = 0; i < 16; i++) {
        et_assert_done(f.c, i, PROTO_FINISH_LENGTH);
        assert_int_equal(f.c->recs[i].n_tok, 60);
    }
    fx_close(&f);
}

/* The pool's own limit: a request that cannot fit even alone gets
 * context_length naming the pool (though it fits n_ctx); one without
 * max_tokens ends with "length" when it fills the pool. */
static void test_too_big_for_pool(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 2, 2048, 64, 256, false);
    int32_t prompts[4][128];
    size_t lens[4];
    make_prompts(prompts, lens);
    fx_gen(&f, 1, prompts[0], lens[0], 256 - (int64_t)lens[0] + 1, 5);
    et_assert_err(f.c, 1, PROTO_ERR_CONTEXT_LENGTH);
    assert_non_null(strstr(f.c->recs[1].err_msg, "KV pool"));
    char line[256];
    snprintf(line, sizeof(line), "{\"op\":\"embed\",\"id\":2,\"tokens\":[");
    static char big[1 << 14];
    size_t k = (size_t)snprintf(big, sizeof(big), "%s", line);
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(big + k, sizeof(big) - k, "%s%d", i ? "," : "", 1 + i % 500);
    snprintf(big + k, sizeof(big) - k, "]}");
    fx_send(&f, big);
    et_assert_err(f.c, 2, PROTO_ERR_CONTEXT_LENGTH);
    /* exactly the pool fits */
    fx_gen(&f, 3, prompts[0], lens[0], 256 - (int64_t)lens[0], 5);
    /* no max_tokens: until the pool is full */
    snprintf(line, sizeof(line), "{\"op\":\"gen\",\"id\":4,\"tokens\":[1,5,6],\"sampling\":"
             "{\"temperature\":0.8,\"seed\":3},\"ignore_eos\":true}");
    fx_send(&f, line);
    fx_run(&f);
    et_assert_done(f.c, 3, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[3].n_tok, 256 - (int64_t)lens[0]);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[4].n_tok, 256 - 3);
    fx_close(&f);
}

/* Two requests share a cached prompt in a tight pool; the one that started
 * second is cancelled mid-decode: the other goes on unharmed and equals its
 * run alone, the shared blocks stay cached for a third, and no block leaks. */
static void test_cancel_shared(void **state)
{
    (void)state;
    int32_t prompts[4][128];
    size_t lens[4];
    make_prompts(prompts, lens);
    const int32_t *p = prompts[3];
    const size_t n = lens[3]; /* 55 tokens: one full block shared */
    run_out *alone = calloc(1, sizeof(run_out));
    assert_non_null(alone);
    fixture f;
    fx_open(&f, 1, 256, 64, 0, true);
    fx_gen(&f, 0, p, n, 60, 9);
    fx_run(&f);
    alone->n[0] = f.c->recs[0].n_tok;
    memcpy(alone->toks[0], f.c->recs[0].toks, alone->n[0] * sizeof(int32_t));
    fx_close(&f);

    fx_open(&f, 3, 256, 64, 256, false);
    fx_gen(&f, 0, p, n, 60, 9);
    fx_step(&f); /* 0's prompt in, its blocks published */
    fx_gen(&f, 1, p, n, 60, 10);
    for (int i = 0; i < 5; i++) fx_step(&f);
    assert_true(f.c->recs[1].n_tok >= 3);
    fx_send(&f, "{\"op\":\"stop\",\"id\":1}");
    fx_run(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_CANCELLED);
    assert_int_equal(f.c->recs[1].stats.cached_n, 32);
    et_assert_done(f.c, 0, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[0].n_tok, alone->n[0]);
    assert_memory_equal(f.c->recs[0].toks, alone->toks[0], alone->n[0] * sizeof(int32_t));
    assert_int_equal(fx_pong(&f).kv_used, 0);
    fx_gen(&f, 2, p, n, 60, 9);
    fx_run(&f);
    et_assert_done(f.c, 2, PROTO_FINISH_LENGTH);
    assert_true(f.c->recs[2].stats.cached_n >= 32);
    assert_memory_equal(f.c->recs[2].toks, alone->toks[0], alone->n[0] * sizeof(int32_t));
    assert_int_equal(fx_pong(&f).kv_used, 0);
    fx_close(&f);
    free(alone);
}

/* The default pool and its options (engine_pool_tokens). */
static void test_pool_size(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1, 64, 64, 0, false);
    engine_params p = {0};
    /* default: every slot's context, whole blocks */
    assert_int_equal(engine_pool_tokens(f.m, &p, 4, 100), 4 * 128);
    p.kv_max_tokens = 33;
    assert_int_equal(engine_pool_tokens(f.m, &p, 16, 32768), 64);
    p.kv_max_tokens = 0;
    p.kv_max_bytes = 1; /* less than one block: one block */
    assert_int_equal(engine_pool_tokens(f.m, &p, 16, 32768), 32);
    p.kv_max_bytes = -1;
    assert_int_equal(engine_pool_tokens(f.m, &p, 16, 32768), 0);
    fx_close(&f);
}

static void fx_open_pool(fixture *f, const engine_params *p)
{
    memset(f, 0, sizeof(*f));
    char path[4096];
    TESTDATA_FILE(path, MODEL);
    strata_err err;
    if (model_open(&f->m, path, &err) != 0) fail_msg("%s", err.msg);
    if (engine_init(&f->e, f->m, p, &err) != 0) fail_msg("%s", err.msg);
    f->c = et_collect_new();
}

/* The elastic pool through the engine: ready says its profile, pong's
 * committed bytes grow with one long request and fall back to the kept
 * part when it ends (hold 0), or stay until the hold has passed. The
 * resident profile commits everything at start. */
static void test_elastic_and_resident(void **state)
{
    (void)state;
    const char *line = "{\"op\":\"gen\",\"id\":%d,\"tokens\":[1,403,407,261,378],"
                       "\"max_tokens\":600,\"ignore_eos\":true,\"sampling\":{\"temperature\":0}}";
    char buf[256];
    for (int hold = 0; hold < 2; hold++) {
        fixture f;
        engine_params p = {.n_slots = 1, .n_ctx = 2048, .n_batch = 64, .n_threads = 1,
                           .kv_max_tokens = 2048, .kv_step_tokens = 64, .kv_init_tokens = 64,
                           .kv_hold_ms = hold ? 600000 : 0};
        fx_open_pool(&f, &p);
        proto_msg ready;
        engine_ready(f.e, &ready);
        assert_int_equal(ready.u.ready.kv_max_tokens, 2048);
        assert_int_equal(ready.u.ready.kv_step_tokens, 64);
        assert_int_equal(ready.u.ready.kv_init_tokens, 64);
        assert_int_equal(ready.u.ready.kv_hold_ms, hold ? 600000 : 0);
        assert_false(ready.u.ready.kv_resident);
        const int64_t step_bytes = ready.u.ready.kv_bytes / 32; /* 2048 / 64 steps */
        assert_int_equal(fx_pong(&f).kv_committed_bytes, step_bytes);
        snprintf(buf, sizeof(buf), line, 1);
        fx_send(&f, buf);
        int64_t peak = 0;
        while (engine_busy(f.e)) {
            fx_step(&f);
            int64_t c = fx_pong(&f).kv_committed_bytes;
            if (engine_busy(f.e) && c > peak) peak = c;
        }
        et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
        assert_int_equal(f.c->recs[1].n_tok, 600);
        /* 604 positions in the KV (the last token is never fed): 10 steps of 64 */
        assert_int_equal(peak, 10 * step_bytes);
        if (hold == 0) {
            assert_int_equal(fx_pong(&f).kv_committed_bytes, step_bytes);
            assert_true(engine_next_trim_ms(f.e) < 0);
        } else {
            assert_int_equal(fx_pong(&f).kv_committed_bytes, 10 * step_bytes);
            assert_true(engine_next_trim_ms(f.e) > 0);
            engine_trim(f.e); /* not yet due */
            assert_int_equal(fx_pong(&f).kv_committed_bytes, 10 * step_bytes);
        }
        fx_close(&f);
    }
    fixture f;
    engine_params p = {.n_slots = 2, .n_ctx = 1024, .n_threads = 1, .kv_resident_tokens = 500};
    fx_open_pool(&f, &p);
    proto_msg ready;
    engine_ready(f.e, &ready);
    assert_true(ready.u.ready.kv_resident);
    assert_int_equal(ready.u.ready.kv_max_tokens, 512);
    assert_int_equal(fx_pong(&f).kv_committed_bytes, ready.u.ready.kv_bytes);
    snprintf(buf, sizeof(buf), line, 2);
    fx_send(&f, buf); /* 605 positions: more than the resident pool */
    et_assert_err(f.c, 2, PROTO_ERR_CONTEXT_LENGTH);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preempted_equals_alone),
        cmocka_unit_test(test_many_slots_small_pool),
        cmocka_unit_test(test_too_big_for_pool),
        cmocka_unit_test(test_cancel_shared),
        cmocka_unit_test(test_pool_size),
        cmocka_unit_test(test_elastic_and_resident),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
