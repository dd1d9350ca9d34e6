/* The engine's prefix cache (engine.h "Prefix cache") in-process on
 * stories260K: every request served partly from the cache must give the
 * tokens and log-probabilities of the same request run cold (in an engine
 * with the cache off, with another chunk size and thread count), bit for
 * bit; cached_n must say how much was reused. Cases: a repeated prompt
 * ending mid-block, on a block boundary (the whole prompt cached: its last
 * token is computed again) and shorter than a block; a chat's second turn
 * reusing the first turn's generated tokens; requests sharing the prompt
 * of one still running, which is then cancelled; least recently used
 * eviction in a small pool; the `cache` opt-out, the engine option, the
 * minimum reuse; embeddings (last pooling reuses, mean does not); ready's
 * and pong's KV figures; and a seeded random workload of overlapping
 * prompts in a pool small enough to evict. */
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

#include "base/rng.h"
#include "engine_testutil.h"

#define MODEL "models/stories260K.gguf"

/* Sanitizer builds run several times slower: the random workload thins. */
#include "sanitized.h"

static model *g_model;

typedef et_fixture fixture;

static void fx_open_p(fixture *f, const engine_params *p)
{
    et_open(f, g_model, p);
}

/* The cache on (the default) or off; chunks of n_batch tokens. */
static void fx_open(fixture *f, int slots, int64_t n_ctx, int64_t n_batch, int threads,
                    bool cache)
{
    engine_params p = {.n_slots = slots, .n_ctx = n_ctx, .n_batch = n_batch,
                       .n_threads = threads, .no_prefix_cache = !cache};
    fx_open_p(f, &p);
}

static void fx_close(fixture *f)
{
    et_close(f);
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

/* A sampled gen (temperature 0.9, the seed given) with 3 top logprobs, so
 * that both the tokens and the probabilities are compared. */
static void fx_gen(fixture *f, int64_t id, const int32_t *toks, size_t n, int64_t max_tokens,
                   int64_t seed, const char *extra)
{
    static char line[1 << 16];
    char ex[128];
    snprintf(ex, sizeof(ex), "\"logprobs\":3%s%s", extra ? "," : "", extra ? extra : "");
    et_gen_line(line, sizeof(line), id, toks, n, max_tokens, 0.9, seed, ex);
    fx_send(f, line);
}

/* Two records give the same tokens and the same log-probabilities (the
 * chosen token's and every alternative's), bit for bit. */
static void assert_same_output(const et_rec *a, const et_rec *b, const char *what)
{
    if (!a->done || !b->done) fail_msg("%s: not done (%d, %d)", what, a->done, b->done);
    if (a->finish != b->finish) fail_msg("%s: finish differs", what);
    if (a->n_tok != b->n_tok) fail_msg("%s: %zu tokens vs %zu", what, a->n_tok, b->n_tok);
    for (size_t i = 0; i < a->n_tok; i++) {
        if (a->toks[i] != b->toks[i]) fail_msg("%s: token %zu differs", what, i);
    }
    if (a->n_lps != b->n_lps) fail_msg("%s: logprobs counts differ", what);
    for (size_t i = 0; i < a->n_lps; i++) {
        const proto_logprob *x = &a->lps[i], *y = &b->lps[i];
        if (memcmp(&x->logprob, &y->logprob, sizeof(float)) != 0 || x->n_top != y->n_top) {
            fail_msg("%s: logprob of token %zu differs (%.9g vs %.9g)", what, i, x->logprob,
                     y->logprob);
        }
        for (size_t k = 0; k < x->n_top; k++) {
            if (x->top[k].token != y->top[k].token ||
                memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float)) != 0) {
                fail_msg("%s: top logprob %zu of token %zu differs", what, k, i);
            }
        }
    }
}

static void random_tokens(uint64_t *state, int32_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = 3 + (int32_t)(strata_splitmix64(state) % 500);
}

/* The cold reference: one request alone in an engine without the cache,
 * one slot, chunks of 7 tokens (so its chunking differs from the cached
 * runs'). Its record is copied into *out (tokens and logprobs owned). */
typedef struct cold_ref {
    fixture f;
} cold_ref;

static const et_rec *cold_run(cold_ref *ref, int64_t id, const int32_t *toks, size_t n,
                              int64_t max_tokens, int64_t seed)
{
    fx_gen(&ref->f, id, toks, n, max_tokens, seed, NULL);
    fx_run(&ref->f);
    const et_rec *r = &ref->f.c->recs[id];
    et_assert_done(ref->f.c, id, r->finish);
    assert_int_equal(r->stats.cached_n, 0);
    return r;
}

/* ---- tests ---- */

/* The same prompt twice: the second reuses its full blocks (all but the
 * last token when it ends on a block boundary; nothing when it is shorter
 * than a block) and both equal the cold run. */
static void test_repeat_prompt(void **state)
{
    (void)state;
    const size_t lens[] = {20, 40, 64, 70, 96, 101};
    const int64_t want_cached[] = {0, 32, 63, 64, 95, 96};
    cold_ref ref;
    fx_open(&ref.f, 1, 256, 7, 1, false);
    fixture f;
    fx_open(&f, 2, 256, 64, 2, true);
    uint64_t rs = 12345;
    for (size_t t = 0; t < sizeof(lens) / sizeof(lens[0]); t++) {
        int32_t prompt[128];
        random_tokens(&rs, prompt, lens[t]);
        int64_t id = (int64_t)t * 3;
        const et_rec *cold = cold_run(&ref, id, prompt, lens[t], 12, 77 + (int64_t)t);
        fx_gen(&f, id, prompt, lens[t], 12, 77 + (int64_t)t, NULL);
        fx_run(&f);
        fx_gen(&f, id + 1, prompt, lens[t], 12, 77 + (int64_t)t, NULL);
        fx_run(&f);
        char what[64];
        snprintf(what, sizeof(what), "prompt of %zu, first", lens[t]);
        assert_same_output(&f.c->recs[id], cold, what);
        snprintf(what, sizeof(what), "prompt of %zu, cached", lens[t]);
        assert_same_output(&f.c->recs[id + 1], cold, what);
        assert_int_equal(f.c->recs[id].stats.cached_n, 0);
        if (f.c->recs[id + 1].stats.cached_n != want_cached[t]) {
            fail_msg("prompt of %zu: cached_n %lld, want %lld", lens[t],
                     (long long)f.c->recs[id + 1].stats.cached_n, (long long)want_cached[t]);
        }
        assert_int_equal(f.c->recs[id + 1].stats.prompt_n, (int64_t)lens[t]);
    }
    fx_close(&f);
    fx_close(&ref.f);
}

/* A chat's second turn: the first turn's prompt and generated tokens are
 * reused (its blocks, generated tokens included, stayed cached). */
static void test_second_turn_reuses_generated(void **state)
{
    (void)state;
    int32_t turn[256];
    uint64_t rs = 99;
    random_tokens(&rs, turn, 50);
    fixture f;
    fx_open(&f, 1, 256, 512, 1, true);
    fx_gen(&f, 1, turn, 50, 40, 5, "\"ignore_eos\":true");
    fx_run(&f);
    const et_rec *first = &f.c->recs[1];
    assert_int_equal(first->n_tok, 40);
    /* the second prompt: the first, its answer, and 12 more tokens */
    memcpy(turn + 50, first->toks, 40 * sizeof(int32_t));
    random_tokens(&rs, turn + 90, 12);
    fx_gen(&f, 2, turn, 102, 10, 6, NULL);
    fx_run(&f);
    /* the KV held 50 + 39 positions (the last token is never fed): two
     * full blocks, 14 of their positions generated */
    assert_int_equal(f.c->recs[2].stats.cached_n, 64);
    cold_ref ref;
    fx_open(&ref.f, 1, 256, 13, 2, false);
    assert_same_output(&f.c->recs[2], cold_run(&ref, 2, turn, 102, 10, 6), "second turn");
    fx_close(&ref.f);
    fx_close(&f);
}

/* Requests reusing the prompt of one still decoding, which is cancelled
 * midway: they are not disturbed, and equal their cold runs. */
static void test_concurrent_shared_prefix_and_cancel(void **state)
{
    (void)state;
    int32_t base[100], p[4][120];
    uint64_t rs = 4242;
    random_tokens(&rs, base, 100);
    fixture f;
    fx_open(&f, 4, 256, 16, 2, true);
    fx_gen(&f, 0, base, 100, 60, 1, "\"ignore_eos\":true");
    while (f.c->recs[0].n_tok < 3) fx_step(&f);
    for (int i = 1; i < 4; i++) {
        memcpy(p[i], base, 80 * sizeof(int32_t));
        random_tokens(&rs, p[i] + 80, (size_t)(10 * i));
        fx_gen(&f, i, p[i], (size_t)(80 + 10 * i), 20, 10 + i, NULL);
    }
    /* two steps in (the others are prefilling from block 2 on), cancel 0 */
    fx_step(&f);
    fx_step(&f);
    fx_send(&f, "{\"op\":\"stop\",\"id\":0}");
    fx_run(&f);
    et_assert_done(f.c, 0, PROTO_FINISH_CANCELLED);
    cold_ref ref;
    fx_open(&ref.f, 1, 256, 512, 1, false);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(f.c->recs[i].stats.cached_n, 64);
        char what[32];
        snprintf(what, sizeof(what), "sharer %d", i);
        assert_same_output(&f.c->recs[i], cold_run(&ref, i, p[i], (size_t)(80 + 10 * i), 20, 10 + i),
                           what);
    }
    /* two new prompts that arrive together (admitted in one step: neither
     * finds the other's blocks, both publish the same chain), then a third
     * that reuses what the first published */
    int32_t twin[110];
    random_tokens(&rs, twin, 110);
    fx_gen(&f, 10, twin, 110, 8, 3, NULL);
    fx_gen(&f, 11, twin, 110, 8, 3, NULL);
    fx_run(&f);
    fx_gen(&f, 12, twin, 110, 8, 3, NULL);
    fx_run(&f);
    const et_rec *cold = cold_run(&ref, 10, twin, 110, 8, 3);
    assert_int_equal(f.c->recs[10].stats.cached_n, 0);
    assert_int_equal(f.c->recs[11].stats.cached_n, 0);
    assert_int_equal(f.c->recs[12].stats.cached_n, 96);
    assert_same_output(&f.c->recs[10], cold, "twin 1");
    assert_same_output(&f.c->recs[11], cold, "twin 2");
    assert_same_output(&f.c->recs[12], cold, "after the twins");
    fx_close(&ref.f);
    fx_close(&f);
}

/* One slot of 128 positions: 4 blocks. Idle blocks are evicted least
 * recently used first, and a reuse makes a block recent again: after
 * a, b, c (one cached block each) and a again, the next prompt that needs
 * room evicts b's block, not a's (the oldest published). */
static void test_lru_eviction_small_pool(void **state)
{
    (void)state;
    int32_t a[33], b[33], c[33], d[33];
    uint64_t rs = 7;
    random_tokens(&rs, a, 33);
    random_tokens(&rs, b, 33);
    random_tokens(&rs, c, 33);
    random_tokens(&rs, d, 33);
    fixture f;
    fx_open(&f, 1, 128, 512, 1, true);
    const int32_t *order[] = {a, b, c, a, d, c, a, b};
    /* each holds 2 blocks while it runs and leaves its first cached: after
     * the fourth, 1 block is free and 3 idle, so d takes the free one and
     * evicts one idle block */
    const size_t lens[] = {33, 33, 33, 33, 33, 33, 33, 33};
    const int64_t want[] = {0, 0, 0, 32, 0, 32, 32, 0};
    for (int i = 0; i < 8; i++) {
        fx_gen(&f, i, order[i], lens[i], 1, 1, NULL);
        fx_run(&f);
        if (f.c->recs[i].stats.cached_n != want[i]) {
            fail_msg("request %d: cached_n %lld, want %lld", i,
                     (long long)f.c->recs[i].stats.cached_n, (long long)want[i]);
        }
    }
    cold_ref ref;
    fx_open(&ref.f, 1, 128, 512, 1, false);
    for (int i = 0; i < 8; i++) {
        char what[32];
        snprintf(what, sizeof(what), "request %d", i);
        assert_same_output(&f.c->recs[i], cold_run(&ref, i, order[i], lens[i], 1, 1), what);
    }
    fx_close(&ref.f);
    fx_close(&f);
}

/* `cache` false neither reuses nor publishes; the engine option turns the
 * cache off; min tokens refuses short reuses; ready says which. */
static void test_controls(void **state)
{
    (void)state;
    int32_t p[80];
    uint64_t rs = 31;
    random_tokens(&rs, p, 80);
    fixture f;
    fx_open(&f, 2, 256, 512, 1, true);
    fx_gen(&f, 1, p, 80, 4, 1, "\"cache\":false");
    fx_run(&f);
    fx_gen(&f, 2, p, 80, 4, 1, NULL); /* 1 left nothing: computes all */
    fx_run(&f);
    fx_gen(&f, 3, p, 80, 4, 1, "\"cache\":false"); /* 2 left its blocks: not taken */
    fx_run(&f);
    fx_gen(&f, 4, p, 80, 4, 1, NULL);
    fx_run(&f);
    assert_int_equal(f.c->recs[1].stats.cached_n, 0);
    assert_int_equal(f.c->recs[2].stats.cached_n, 0);
    assert_int_equal(f.c->recs[3].stats.cached_n, 0);
    assert_int_equal(f.c->recs[4].stats.cached_n, 64);
    for (int i = 2; i <= 4; i++) assert_same_output(&f.c->recs[i], &f.c->recs[1], "controls");
    proto_msg rd;
    engine_ready(f.e, &rd);
    assert_true(rd.u.ready.kv_prefix_cache);
    assert_int_equal(rd.u.ready.kv_cache_blocks, rd.u.ready.kv_n_blocks); /* the default */
    assert_int_equal(rd.u.ready.kv_cache_bytes, rd.u.ready.kv_bytes);
    assert_int_equal(rd.u.ready.kv_cache_min_tokens, 32);
    fx_close(&f);

    /* the engine option: off */
    fx_open(&f, 2, 256, 512, 1, false);
    fx_gen(&f, 1, p, 80, 4, 1, NULL);
    fx_run(&f);
    fx_gen(&f, 2, p, 80, 4, 1, NULL);
    fx_run(&f);
    assert_int_equal(f.c->recs[2].stats.cached_n, 0);
    engine_ready(f.e, &rd);
    assert_false(rd.u.ready.kv_prefix_cache);
    assert_int_equal(rd.u.ready.kv_cache_blocks, 0);
    proto_pong pg;
    engine_get_progress(f.e, &pg);
    assert_int_equal(pg.kv_lookup_tokens, 0);
    fx_close(&f);

    /* min tokens 64: a 32-token reuse is none, a 64-token one is taken;
     * a budget of 3 blocks (in bytes) */
    engine_params ep = {.n_slots = 1, .n_ctx = 256, .n_batch = 512, .n_threads = 1,
                        .prefix_min_tokens = 64};
    fx_open_p(&f, &ep);
    engine_ready(f.e, &rd);
    const int64_t block_bytes = rd.u.ready.kv_bytes / rd.u.ready.kv_n_blocks;
    fx_close(&f);
    ep.prefix_cache_bytes = 3 * block_bytes + block_bytes / 2;
    fx_open_p(&f, &ep);
    engine_ready(f.e, &rd);
    assert_int_equal(rd.u.ready.kv_cache_blocks, 3);
    assert_int_equal(rd.u.ready.kv_cache_min_tokens, 64);
    fx_gen(&f, 1, p, 80, 1, 1, NULL);
    fx_run(&f);
    int32_t q[80];
    memcpy(q, p, sizeof(q));
    q[40] = 4; /* shares block 0 only */
    fx_gen(&f, 2, q, 80, 1, 1, NULL);
    fx_run(&f);
    fx_gen(&f, 3, p, 80, 1, 1, NULL);
    fx_run(&f);
    assert_int_equal(f.c->recs[2].stats.cached_n, 0);
    assert_int_equal(f.c->recs[3].stats.cached_n, 64);
    fx_close(&f);
}

/* Embeddings: last pooling reuses a cached prefix, mean pooling does not
 * (it needs every token's hidden state); the vectors equal the cold ones
 * bit for bit either way. */
static void test_embeddings(void **state)
{
    (void)state;
    int32_t p[70];
    uint64_t rs = 5;
    random_tokens(&rs, p, 70);
    char line[2048];
    size_t k = 0;
    k += (size_t)snprintf(line + k, sizeof(line) - k, "[");
    for (int i = 0; i < 70; i++) k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%d", i ? "," : "", p[i]);
    snprintf(line + k, sizeof(line) - k, "]");
    char msg[2200];
    const char *pools[] = {"last", "mean"};
    for (int t = 0; t < 2; t++) {
        fixture f, cold;
        fx_open(&f, 2, 256, 512, 1, true);
        fx_open(&cold, 1, 256, 9, 2, false);
        for (int id = 1; id <= 2; id++) {
            snprintf(msg, sizeof(msg), "{\"op\":\"embed\",\"id\":%d,\"tokens\":%s,\"pooling\":\"%s\"}",
                     id, line, pools[t]);
            fx_send(&f, msg);
            fx_run(&f);
        }
        snprintf(msg, sizeof(msg), "{\"op\":\"embed\",\"id\":1,\"tokens\":%s,\"pooling\":\"%s\"}",
                 line, pools[t]);
        fx_send(&cold, msg);
        fx_run(&cold);
        assert_int_equal(f.c->recs[2].stats.cached_n, t == 0 ? 64 : 0);
        for (int id = 1; id <= 2; id++) {
            assert_int_equal(f.c->recs[id].n_emb, cold.c->recs[1].n_emb);
            assert_memory_equal(f.c->recs[id].emb, cold.c->recs[1].emb,
                                cold.c->recs[1].n_emb * sizeof(float));
        }
        fx_close(&cold);
        fx_close(&f);
    }
}

/* pong's KV figures: cached blocks, lookup and hit tokens, used blocks. */
static void test_pong_kv_figures(void **state)
{
    (void)state;
    int32_t p[70];
    uint64_t rs = 8;
    random_tokens(&rs, p, 70);
    fixture f;
    fx_open(&f, 2, 256, 512, 1, true);
    proto_pong pg;
    engine_get_progress(f.e, &pg);
    assert_int_equal(pg.kv_cached, 0);
    fx_gen(&f, 1, p, 70, 5, 1, "\"ignore_eos\":true");
    fx_run(&f);
    fx_gen(&f, 2, p, 70, 5, 1, "\"ignore_eos\":true");
    fx_step(&f);
    engine_get_progress(f.e, &pg);
    assert_int_equal(pg.kv_lookup_tokens, 140);
    assert_int_equal(pg.kv_hit_tokens, 64);
    assert_int_equal(pg.kv_cached, 2);  /* 70 + 4 positions of request 1: two full blocks */
    assert_int_equal(pg.kv_used, 3);    /* request 2: the two shared and its own third */
    assert_int_equal(pg.kv_preemptions, 0);
    fx_run(&f);
    engine_get_progress(f.e, &pg);
    assert_int_equal(pg.kv_used, 0);    /* idle cached blocks are not in use */
    assert_int_equal(pg.kv_cached, 2);
    fx_close(&f);
}

/* A seeded random workload: prompts cut from three shared bases at random
 * lengths, with random suffixes, submitted in random waves into a pool
 * small enough that blocks are evicted; every output equals its cold run. */
static void test_random_workload(void **state)
{
    (void)state;
    enum { N_REQ = 36, N_BASE = 3, BASE_LEN = 150 };
    const int n_req = TEST_SANITIZED ? 16 : N_REQ;
    int32_t bases[N_BASE][BASE_LEN];
    static int32_t prompts[N_REQ][200];
    size_t lens[N_REQ];
    int64_t max_toks[N_REQ];
    uint64_t rs = 2026;
    for (int i = 0; i < N_BASE; i++) random_tokens(&rs, bases[i], BASE_LEN);
    for (int i = 0; i < n_req; i++) {
        int b = (int)(strata_splitmix64(&rs) % N_BASE);
        size_t cut = (size_t)(strata_splitmix64(&rs) % BASE_LEN) + 1;
        size_t extra = (size_t)(strata_splitmix64(&rs) % 20);
        memcpy(prompts[i], bases[b], cut * sizeof(int32_t));
        random_tokens(&rs, prompts[i] + cut, extra);
        lens[i] = cut + extra;
        max_toks[i] = 1 + (int64_t)(strata_splitmix64(&rs) % 12);
    }
    /* 3 slots of 192 positions: 18 blocks for prompts of up to 169 tokens */
    fixture f;
    fx_open(&f, 3, 192, 24, 2, true);
    int next = 0;
    while (next < n_req || engine_busy(f.e)) {
        int wave = (int)(strata_splitmix64(&rs) % 4);
        for (int k = 0; k < wave && next < n_req; k++, next++) {
            fx_gen(&f, next, prompts[next], lens[next], max_toks[next], 500 + next, NULL);
        }
        int steps = 1 + (int)(strata_splitmix64(&rs) % 6);
        for (int s = 0; s < steps; s++) fx_step(&f);
    }
    proto_pong pg;
    engine_get_progress(f.e, &pg);
    fixture cold;
    fx_open(&cold, 1, 192, 512, 1, false);
    int64_t cached = 0;
    for (int i = 0; i < n_req; i++) {
        fx_gen(&cold, i, prompts[i], lens[i], max_toks[i], 500 + i, NULL);
        fx_run(&cold);
        char what[48];
        snprintf(what, sizeof(what), "request %d (%zu tokens)", i, lens[i]);
        et_assert_done(f.c, i, f.c->recs[i].finish);
        assert_same_output(&f.c->recs[i], &cold.c->recs[i], what);
        cached += f.c->recs[i].stats.cached_n;
    }
    assert_true(cached > 0);
    assert_int_equal(pg.kv_hit_tokens, cached);
    fx_close(&cold);
    fx_close(&f);
}

static int setup(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, MODEL);
    strata_err err;
    if (model_open(&g_model, path, &err) != 0) {
        print_error("%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_close(g_model);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_prompt),
        cmocka_unit_test(test_second_turn_reuses_generated),
        cmocka_unit_test(test_concurrent_shared_prefix_and_cancel),
        cmocka_unit_test(test_lru_eviction_small_pool),
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_embeddings),
        cmocka_unit_test(test_pong_kv_figures),
        cmocka_unit_test(test_random_workload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
