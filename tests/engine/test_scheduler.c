/* The scheduler (src/engine/engine.c) in-process on stories260K: lines in
 * through engine_handle, one engine_step at a time, lines out through the
 * collector. Stepping by hand makes the timing-sensitive cases exact: a
 * `stop` between two prefill chunks, after the fifth token, while queued.
 *
 * What is asserted is what a client sees: tokens equal to llama.cpp's
 * greedy output, the same tokens for a seeded request alone or among
 * others, finish reasons, statistics, error codes, embeddings equal to
 * llama.cpp's, and exactly one terminal message per id. */
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

static void fx_open(fixture *f, int slots, int64_t n_ctx, int64_t n_batch)
{
    memset(f, 0, sizeof(*f));
    char path[4096];
    TESTDATA_FILE(path, MODEL);
    strata_err err;
    if (model_open(&f->m, path, &err) != 0) fail_msg("%s", err.msg);
    engine_params p = {.n_slots = slots, .n_ctx = n_ctx, .n_batch = n_batch, .n_threads = 1};
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

static void fx_gen(fixture *f, int64_t id, const int32_t *toks, size_t n, int64_t max_tokens,
                   double temperature, int64_t seed, const char *extra)
{
    static char line[1 << 16];
    et_gen_line(line, sizeof(line), id, toks, n, max_tokens, temperature, seed, extra);
    fx_send(f, line);
}

/* ---- tests ---- */

static void test_greedy_matches_llamacpp(void **state)
{
    (void)state;
    et_golden g[4];
    size_t n = et_load_greedy(g, 4);
    assert_true(n >= 3);
    fixture f;
    fx_open(&f, 4, 0, 0);
    for (size_t i = 0; i < n; i++) fx_gen(&f, (int64_t)i, g[i].prompt, g[i].n_prompt, (int64_t)g[i].n_gen, 0, -1, NULL);
    fx_run(&f);
    for (size_t i = 0; i < n; i++) {
        et_assert_done(f.c, (int64_t)i, PROTO_FINISH_LENGTH);
        const et_rec *r = &f.c->recs[i];
        assert_int_equal(r->n_tok, g[i].n_gen);
        assert_memory_equal(r->toks, g[i].gen, g[i].n_gen * sizeof(int32_t));
        assert_int_equal(r->stats.prompt_n, g[i].n_prompt);
        assert_int_equal(r->stats.cached_n, 0);
        assert_true(r->stats.prompt_ms >= 0 && r->stats.predicted_ms >= 0);
    }
    fx_close(&f);
}

/* Eight prompts (cut from the golden ones at different lengths, some
 * long enough to need several prefill chunks) and eight seeds. */
static size_t make_prompts(int32_t prompts[8][200], size_t lens[8])
{
    et_golden g[4];
    size_t n = et_load_greedy(g, 4);
    for (int i = 0; i < 8; i++) {
        const et_golden *s = &g[i % n];
        size_t len = 0;
        /* prompt, then the golden continuation, to (i+1)*20 tokens */
        size_t want = (size_t)(i + 1) * 20;
        for (size_t k = 0; k < s->n_prompt && len < want; k++) prompts[i][len++] = s->prompt[k];
        for (size_t k = 0; k < s->n_gen && len < want; k++) prompts[i][len++] = s->gen[k];
        lens[i] = len;
    }
    return 8;
}

static void test_concurrent_equals_alone(void **state)
{
    (void)state;
    int32_t prompts[8][200];
    size_t lens[8];
    make_prompts(prompts, lens);
    const int64_t max_tokens = 40;
    /* alone: one slot, one request at a time */
    int32_t alone[8][64];
    size_t n_alone[8];
    fixture f;
    fx_open(&f, 1, 256, 64);
    for (int i = 0; i < 8; i++) {
        fx_gen(&f, i, prompts[i], lens[i], max_tokens, 0.9, 1000 + i, NULL);
        fx_run(&f);
        const et_rec *r = &f.c->recs[i];
        assert_true(r->done);
        n_alone[i] = r->n_tok;
        memcpy(alone[i], r->toks, r->n_tok * sizeof(int32_t));
    }
    fx_close(&f);
    /* together: 8 slots, then 3 slots (a queue), with a budget small
     * enough that prefill chunks share steps with decoding */
    const int slot_counts[] = {8, 3};
    for (int t = 0; t < 2; t++) {
        fx_open(&f, slot_counts[t], 256, 24);
        for (int i = 0; i < 8; i++) fx_gen(&f, i, prompts[i], lens[i], max_tokens, 0.9, 1000 + i, NULL);
        fx_run(&f);
        for (int i = 0; i < 8; i++) {
            const et_rec *r = &f.c->recs[i];
            assert_true(r->done && r->n_terminal == 1 && !r->after_terminal);
            if (r->n_tok != n_alone[i] || memcmp(r->toks, alone[i], r->n_tok * sizeof(int32_t))) {
                fail_msg("slots %d: request %d differs from its run alone", slot_counts[t], i);
            }
        }
        fx_close(&f);
    }
}

static void test_stop_mid_prefill(void **state)
{
    (void)state;
    int32_t prompts[8][200];
    size_t lens[8];
    make_prompts(prompts, lens);
    fixture f;
    fx_open(&f, 2, 512, 16);
    fx_gen(&f, 1, prompts[7], lens[7], 8, 0, -1, NULL); /* 160 tokens: 10 chunks */
    fx_step(&f);
    fx_step(&f);
    assert_false(f.c->recs[1].seen); /* still prefilling */
    fx_send(&f, "{\"op\":\"stop\",\"id\":1}");
    assert_false(f.c->recs[1].seen); /* effective at the next step */
    fx_step(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_CANCELLED);
    assert_int_equal(f.c->recs[1].stats.prompt_n, 32); /* two chunks of 16 */
    assert_int_equal(f.c->recs[1].n_tok, 0);
    assert_false(engine_busy(f.e));
    /* the slot is free again and works */
    fx_gen(&f, 2, prompts[0], lens[0], 4, 0, -1, NULL);
    fx_run(&f);
    et_assert_done(f.c, 2, PROTO_FINISH_LENGTH);
    fx_close(&f);
}

static void test_stop_mid_decode_and_queued(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1);
    fixture f;
    fx_open(&f, 1, 512, 64);
    fx_gen(&f, 1, g[0].prompt, g[0].n_prompt, 60, 0, -1, NULL);
    fx_gen(&f, 2, g[0].prompt, g[0].n_prompt, 60, 0, -1, NULL); /* queued behind 1 */
    while (f.c->recs[1].n_tok < 5) fx_step(&f);
    fx_send(&f, "{\"op\":\"stop\",\"id\":1}");
    fx_send(&f, "{\"op\":\"stop\",\"id\":2}");
    fx_step(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_CANCELLED);
    et_assert_done(f.c, 2, PROTO_FINISH_CANCELLED);
    assert_int_equal(f.c->recs[1].n_tok, 5);
    assert_memory_equal(f.c->recs[1].toks, g[0].gen, 5 * sizeof(int32_t));
    assert_int_equal(f.c->recs[1].stats.prompt_n, g[0].n_prompt);
    assert_int_equal(f.c->recs[2].stats.prompt_n, 0); /* never started */
    assert_int_equal(f.c->recs[2].n_tok, 0);
    /* stop of an unknown id and of a finished one: no reply at all */
    fx_send(&f, "{\"op\":\"stop\",\"id\":1}");
    fx_send(&f, "{\"op\":\"stop\",\"id\":77}");
    fx_run(&f);
    assert_int_equal(f.c->recs[1].n_terminal, 1);
    assert_false(f.c->recs[1].after_terminal);
    assert_false(f.c->recs[77].seen);
    assert_int_equal(f.c->n_anon_err, 0);
    fx_close(&f);
}

static void test_finish_reasons(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1);
    fixture f;
    fx_open(&f, 4, 512, 64);
    /* max_tokens → length */
    fx_gen(&f, 1, g[0].prompt, g[0].n_prompt, 7, 0, -1, NULL);
    /* max_tokens 0: the prompt only */
    fx_gen(&f, 2, g[0].prompt, g[0].n_prompt, 0, 0, -1, NULL);
    /* EOS (id 2) made certain by a bias: stop, and the EOS is not sent */
    fx_gen(&f, 3, g[0].prompt, g[0].n_prompt, 20, 0, -1, "\"stop_tokens\":[]");
    fx_send(&f, "{\"op\":\"gen\",\"id\":4,\"tokens\":[1,403],\"max_tokens\":20,"
                "\"sampling\":{\"temperature\":0,\"logit_bias\":[[2,100]]}}");
    /* ... unless ignore_eos */
    fx_send(&f, "{\"op\":\"gen\",\"id\":5,\"tokens\":[1,403],\"max_tokens\":3,\"ignore_eos\":true,"
                "\"sampling\":{\"temperature\":0,\"logit_bias\":{\"2\":100}}}");
    fx_run(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[1].n_tok, 7);
    assert_memory_equal(f.c->recs[1].toks, g[0].gen, 7 * sizeof(int32_t));
    et_assert_done(f.c, 2, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[2].n_tok, 0);
    assert_int_equal(f.c->recs[2].stats.prompt_n, g[0].n_prompt);
    et_assert_done(f.c, 3, PROTO_FINISH_LENGTH);
    et_assert_done(f.c, 4, PROTO_FINISH_STOP);
    assert_int_equal(f.c->recs[4].n_tok, 0);
    et_assert_done(f.c, 5, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[5].n_tok, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(f.c->recs[5].toks[i], 2);

    /* a stop token: the greedy output up to its first occurrence */
    size_t k = 10;
    int32_t stop = g[0].gen[k];
    size_t first = 0;
    while (g[0].gen[first] != stop) first++;
    char extra[64];
    snprintf(extra, sizeof(extra), "\"stop_tokens\":[%d]", stop);
    fx_gen(&f, 6, g[0].prompt, g[0].n_prompt, 60, 0, -1, extra);
    fx_run(&f);
    et_assert_done(f.c, 6, PROTO_FINISH_STOP);
    assert_int_equal(f.c->recs[6].n_tok, first);
    assert_memory_equal(f.c->recs[6].toks, g[0].gen, first * sizeof(int32_t));
    fx_close(&f);
}

/* min_tokens: an EOS made certain by a bias comes only after that many
 * tokens; a stop token and a min_bans token are held back the same way. */
static void test_min_tokens(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1);
    fixture f;
    fx_open(&f, 2, 512, 64);
    fx_send(&f, "{\"op\":\"gen\",\"id\":1,\"tokens\":[1,403],\"max_tokens\":20,\"min_tokens\":5,"
                "\"sampling\":{\"temperature\":0,\"logit_bias\":{\"2\":100}}}");
    fx_run(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_STOP);
    assert_int_equal(f.c->recs[1].n_tok, 5);
    for (int i = 0; i < 5; i++) assert_true(f.c->recs[1].toks[i] != 2);
    /* the greedy output's token k as a stop token: banned until min_tokens,
     * so the output runs past its first occurrence to a later one (or to
     * max_tokens) */
    int32_t stop = g[0].gen[0];
    char extra[96];
    snprintf(extra, sizeof(extra), "\"stop_tokens\":[%d],\"min_tokens\":3", stop);
    fx_gen(&f, 2, g[0].prompt, g[0].n_prompt, 30, 0, -1, extra);
    fx_run(&f);
    assert_true(f.c->recs[2].n_tok >= 3);
    for (size_t i = 0; i < 3; i++) assert_true(f.c->recs[2].toks[i] != stop);
    /* min_bans: banned until min_tokens too, then free to come (the
     * token made certain by a bias comes right after) */
    fx_send(&f, "{\"op\":\"gen\",\"id\":4,\"tokens\":[1,403],\"max_tokens\":12,\"min_tokens\":4,"
                "\"min_bans\":[300],\"sampling\":{\"temperature\":0,\"logit_bias\":{\"300\":100}}}");
    fx_send(&f, "{\"op\":\"gen\",\"id\":5,\"tokens\":[1,403],\"min_bans\":[99999]}");
    fx_run(&f);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[4].n_tok, 12);
    for (int i = 0; i < 4; i++) assert_true(f.c->recs[4].toks[i] != 300);
    for (int i = 4; i < 12; i++) assert_int_equal(f.c->recs[4].toks[i], 300);
    et_assert_err(f.c, 5, PROTO_ERR_BAD_REQUEST);
    fx_send(&f, "{\"op\":\"gen\",\"id\":3,\"tokens\":[1,403],\"min_tokens\":-1}");
    fx_run(&f);
    et_assert_err(f.c, 3, PROTO_ERR_BAD_REQUEST);
    fx_close(&f);
}

/* allowed_tokens: only those are sampled, greedy or not; one outside the
 * vocabulary is refused. */
static void test_allowed_tokens(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 2, 512, 64);
    fx_send(&f, "{\"op\":\"gen\",\"id\":1,\"tokens\":[1,403],\"max_tokens\":12,\"allowed_tokens\":[300,301,302],"
                "\"sampling\":{\"temperature\":0}}");
    fx_send(&f, "{\"op\":\"gen\",\"id\":2,\"tokens\":[1,403],\"max_tokens\":30,\"allowed_tokens\":[300,2],"
                "\"sampling\":{\"temperature\":1.5,\"seed\":3}}");
    fx_send(&f, "{\"op\":\"gen\",\"id\":3,\"tokens\":[1,403],\"allowed_tokens\":[99999]}");
    /* only the EOS allowed, and min_tokens bans it: nothing may come, an
     * error says so (never a banned token) */
    fx_send(&f, "{\"op\":\"gen\",\"id\":4,\"tokens\":[1,403],\"max_tokens\":5,\"min_tokens\":2,"
                "\"allowed_tokens\":[2]}");
    fx_run(&f);
    et_assert_err(f.c, 4, PROTO_ERR_BAD_REQUEST);
    assert_int_equal(f.c->recs[4].n_tok, 0);
    assert_non_null(strstr(f.c->recs[4].err_msg, "allowed_tokens"));
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[1].n_tok, 12);
    for (size_t i = 0; i < 12; i++) assert_true(f.c->recs[1].toks[i] >= 300 && f.c->recs[1].toks[i] <= 302);
    /* with the EOS allowed, a sampled reply may end by it */
    for (size_t i = 0; i < f.c->recs[2].n_tok; i++) assert_int_equal(f.c->recs[2].toks[i], 300);
    et_assert_err(f.c, 3, PROTO_ERR_BAD_REQUEST);
    fx_close(&f);
}

/* bad_words: a one-token word is never sampled; a two-token one loses its
 * second token right after its first. */
static void test_bad_words(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1);
    fixture f;
    fx_open(&f, 2, 512, 64);
    char extra[128];
    snprintf(extra, sizeof(extra), "\"bad_words\":[[%d]]", g[0].gen[0]);
    fx_gen(&f, 1, g[0].prompt, g[0].n_prompt, 8, 0, -1, extra);
    snprintf(extra, sizeof(extra), "\"bad_words\":[[%d,%d]]", g[0].gen[0], g[0].gen[1]);
    fx_gen(&f, 2, g[0].prompt, g[0].n_prompt, 8, 0, -1, extra);
    fx_send(&f, "{\"op\":\"gen\",\"id\":3,\"tokens\":[1,403],\"bad_words\":[[]]}");
    fx_run(&f);
    assert_true(f.c->recs[1].toks[0] != g[0].gen[0]);
    assert_int_equal(f.c->recs[2].toks[0], g[0].gen[0]);
    assert_true(f.c->recs[2].toks[1] != g[0].gen[1]);
    et_assert_err(f.c, 3, PROTO_ERR_BAD_REQUEST);
    fx_close(&f);
}

/* The penalties' window covers the prompt's last tokens, as llama.cpp's
 * server and command line have it: a prompt token made the certain
 * greedy choice by a bias is penalised away while it is within the last
 * penalty_last_n tokens of the prompt, and chosen when it is not. */
static void test_penalties_see_the_prompt(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 2, 256, 64);
    const int32_t x = 403;
    /* x, then 4 other tokens */
    static const char *const fmt =
        "{\"op\":\"gen\",\"id\":%d,\"tokens\":[1,403,300,301,302,303],\"max_tokens\":1,"
        "\"sampling\":{\"temperature\":0,\"presence_penalty\":%s,\"penalty_last_n\":%d,"
        "\"logit_bias\":{\"403\":50}}}";
    static const struct {
        const char *penalty;
        int last_n;
        bool want_x;
    } cases[] = {
        {"0", 64, true},     /* no penalty: the bias makes x certain */
        {"100", 64, false},  /* x is in the window: penalised away */
        {"100", 5, false},   /* the last 5 prompt tokens hold x */
        {"100", 4, true},    /* the last 4 do not */
        {"100", 0, true},    /* no window */
    };
    char line[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(line, sizeof(line), fmt, (int)i + 1, cases[i].penalty, cases[i].last_n);
        fx_send(&f, line);
        fx_run(&f);
        et_assert_done(f.c, (int64_t)i + 1, PROTO_FINISH_LENGTH);
        const et_rec *r = &f.c->recs[i + 1]; /* by id */
        assert_int_equal(r->n_tok, 1);
        if ((r->toks[0] == x) != cases[i].want_x) {
            fail_msg("case %zu (penalty %s, last %d): token %d", i, cases[i].penalty, cases[i].last_n,
                     r->toks[0]);
        }
    }
    fx_close(&f);
}

static void test_context_and_bad_requests(void **state)
{
    (void)state;
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 300 + i;
    toks[0] = 1;
    fixture f;
    fx_open(&f, 2, 64, 32);
    fx_gen(&f, 1, toks, 60, 10, 0, -1, NULL);
    et_assert_err(f.c, 1, PROTO_ERR_CONTEXT_LENGTH);
    assert_non_null(strstr(f.c->recs[1].err_msg, "60"));
    assert_non_null(strstr(f.c->recs[1].err_msg, "10"));
    assert_non_null(strstr(f.c->recs[1].err_msg, "64"));
    fx_gen(&f, 2, toks, 64, -1, 0, -1, NULL); /* no room for one token */
    et_assert_err(f.c, 2, PROTO_ERR_CONTEXT_LENGTH);
    fx_gen(&f, 3, toks, 64, 0, 0, -1, NULL); /* fits exactly, generates nothing */
    /* no max: runs until the context is full */
    fx_gen(&f, 4, toks, 60, -1, 0, -1, "\"ignore_eos\":true");
    fx_run(&f);
    et_assert_done(f.c, 3, PROTO_FINISH_LENGTH);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[4].n_tok, 4);
    /* tokens outside the vocabulary (512) */
    fx_send(&f, "{\"op\":\"gen\",\"id\":5,\"tokens\":[1,512]}");
    et_assert_err(f.c, 5, PROTO_ERR_BAD_REQUEST);
    assert_non_null(strstr(f.c->recs[5].err_msg, "tokens[1]"));
    fx_send(&f, "{\"op\":\"gen\",\"id\":6,\"tokens\":[1],\"stop_tokens\":[9999]}");
    et_assert_err(f.c, 6, PROTO_ERR_BAD_REQUEST);
    fx_send(&f, "{\"op\":\"gen\",\"id\":7,\"tokens\":[1],\"sampling\":{\"logit_bias\":[[600,1]]}}");
    et_assert_err(f.c, 7, PROTO_ERR_BAD_REQUEST);
    fx_send(&f, "{\"op\":\"embed\",\"id\":8,\"tokens\":[1,600]}");
    et_assert_err(f.c, 8, PROTO_ERR_BAD_REQUEST);
    /* a malformed line naming a fresh id ends that id ... */
    fx_send(&f, "{\"op\":\"gen\",\"id\":9,\"tokens\":[1,2.5]}");
    et_assert_err(f.c, 9, PROTO_ERR_BAD_REQUEST);
    /* ... but never one in flight: a duplicate and a broken line naming
     * id 10 are answered without an id and 10 runs to its end */
    fx_gen(&f, 10, toks, 8, 5, 0, -1, NULL);
    fx_gen(&f, 10, toks, 8, 5, 0, -1, NULL);
    assert_int_equal(f.c->n_anon_err, 1);
    assert_string_equal(f.c->anon_code, PROTO_ERR_DUPLICATE_ID);
    assert_non_null(strstr(f.c->anon_msg, "10"));
    fx_send(&f, "{\"op\":\"gen\",\"id\":10,\"tokens\":[1,");
    assert_int_equal(f.c->n_anon_err, 2);
    assert_string_equal(f.c->anon_code, PROTO_ERR_BAD_JSON);
    fx_run(&f);
    et_assert_done(f.c, 10, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[10].n_tok, 5);
    /* shutdown: nothing new is accepted, what runs finishes */
    fx_gen(&f, 11, toks, 8, 5, 0, -1, NULL);
    fx_send(&f, "{\"op\":\"shutdown\"}");
    assert_false(engine_accepting(f.e));
    fx_gen(&f, 12, toks, 8, 5, 0, -1, NULL);
    et_assert_err(f.c, 12, PROTO_ERR_SHUTTING_DOWN);
    fx_send(&f, "{\"op\":\"ping\",\"id\":5}");
    assert_int_equal(f.c->n_pong, 1);
    fx_run(&f);
    et_assert_done(f.c, 11, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->n_bad, 0);
    fx_close(&f);
}

static void test_logprobs(void **state)
{
    (void)state;
    et_golden g[1];
    et_load_greedy(g, 1);
    fixture f;
    fx_open(&f, 2, 512, 64);
    fx_gen(&f, 1, g[0].prompt, g[0].n_prompt, 6, 0, -1, "\"logprobs\":5");
    fx_gen(&f, 2, g[0].prompt, g[0].n_prompt, 6, 0, -1, "\"logprobs\":true");
    fx_gen(&f, 3, g[0].prompt, g[0].n_prompt, 6, 0, -1, NULL);
    fx_run(&f);
    const et_rec *r = &f.c->recs[1];
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    assert_int_equal(r->n_lps, 6);
    for (size_t i = 0; i < 6; i++) {
        const proto_logprob *lp = &r->lps[i];
        assert_int_equal(lp->token, r->toks[i]);
        assert_int_equal(lp->n_top, 5);
        /* greedy: the chosen token is the most likely one */
        assert_int_equal(lp->top[0].token, lp->token);
        assert_true(lp->top[0].logprob == lp->logprob);
        double mass = 0;
        for (size_t k = 0; k < 5; k++) {
            assert_true(lp->top[k].logprob <= 0.0f);
            if (k > 0) assert_true(lp->top[k].logprob <= lp->top[k - 1].logprob);
            mass += exp(lp->top[k].logprob);
        }
        assert_true(mass <= 1.0 + 1e-5 && mass > 0.0);
        /* the same numbers for the request that asked for no alternatives */
        assert_true(f.c->recs[2].lps[i].logprob == lp->logprob);
        assert_int_equal(f.c->recs[2].lps[i].n_top, 0);
    }
    assert_int_equal(f.c->recs[3].n_lps, 0);
    fx_close(&f);
}

static void test_embeddings_match_llamacpp(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "golden/stories260K-embeddings.json");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL) fail_msg("%s: %s", path, je.text);
    json_t *results = json_object_get(root, "results");
    size_t n = json_array_size(results);
    assert_true(n >= 1);
    fixture f;
    fx_open(&f, 4, 512, 8); /* chunks of 8: pooling spans several steps */
    et_golden g[1];
    et_load_greedy(g, 1);
    /* a gen runs alongside; it must not change the embeddings */
    fx_gen(&f, 100, g[0].prompt, g[0].n_prompt, 30, 0, -1, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *ids = json_object_get(json_array_get(results, i), "prompt_ids");
        char line[4096];
        size_t k = (size_t)snprintf(line, sizeof(line), "{\"op\":\"embed\",\"id\":%zu,\"tokens\":[", i);
        for (size_t t = 0; t < json_array_size(ids); t++) {
            k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%lld", t ? "," : "",
                                  (long long)json_integer_value(json_array_get(ids, t)));
        }
        snprintf(line + k, sizeof(line) - k, "]}");
        fx_send(&f, line);
        /* the same prompt pooled as "mean" explicitly, alone in a later step */
    }
    fx_run(&f);
    for (size_t i = 0; i < n; i++) {
        json_t *want = json_object_get(json_array_get(results, i), "embedding");
        const et_rec *r = &f.c->recs[i];
        et_assert_done(f.c, (int64_t)i, PROTO_FINISH_STOP);
        assert_int_equal(r->n_emb_msgs, 1);
        assert_int_equal(r->n_emb, json_array_size(want));
        double dot = 0, na = 0, nb = 0, max_diff = 0;
        for (size_t d = 0; d < r->n_emb; d++) {
            double a = r->emb[d], b = json_number_value(json_array_get(want, d));
            dot += a * b;
            na += a * a;
            nb += b * b;
            if (fabs(a - b) > max_diff) max_diff = fabs(a - b);
        }
        double cos = dot / sqrt(na * nb);
        /* llama.cpp's own numbers differ by its F16 KV cache and sums */
        if (cos < 0.99999 || max_diff > 2e-3 || fabs(na - 1.0) > 1e-5) {
            fail_msg("embedding %zu: cosine %.7f, max |diff| %.2e, |v|^2 %.7f", i, cos, max_diff, na);
        }
        assert_int_equal(r->stats.prompt_n, (int64_t)json_array_size(
                                                json_object_get(json_array_get(results, i), "prompt_ids")));
    }
    et_assert_done(f.c, 100, PROTO_FINISH_LENGTH);
    assert_memory_equal(f.c->recs[100].toks, g[0].gen, 30 * sizeof(int32_t));

    /* batch invariance: the first embedding again, alone: bit-identical;
     * cls and last pooling are unit vectors different from the mean */
    json_t *ids0 = json_object_get(json_array_get(results, 0), "prompt_ids");
    char base[1024];
    size_t k = 0;
    for (size_t t = 0; t < json_array_size(ids0); t++) {
        k += (size_t)snprintf(base + k, sizeof(base) - k, "%s%lld", t ? "," : "",
                              (long long)json_integer_value(json_array_get(ids0, t)));
    }
    const char *pool[] = {"mean", "cls", "last"};
    for (int p = 0; p < 3; p++) {
        char line[1200];
        snprintf(line, sizeof(line), "{\"op\":\"embed\",\"id\":%d,\"tokens\":[%s],\"pooling\":\"%s\"}",
                 200 + p, base, pool[p]);
        fx_send(&f, line);
        fx_run(&f);
        et_assert_done(f.c, 200 + p, PROTO_FINISH_STOP);
    }
    const et_rec *mean = &f.c->recs[200], *cls = &f.c->recs[201], *last = &f.c->recs[202];
    assert_memory_equal(mean->emb, f.c->recs[0].emb, mean->n_emb * sizeof(float));
    double n_cls = 0, n_last = 0;
    for (size_t d = 0; d < cls->n_emb; d++) {
        n_cls += (double)cls->emb[d] * cls->emb[d];
        n_last += (double)last->emb[d] * last->emb[d];
    }
    assert_true(fabs(n_cls - 1) < 1e-5 && fabs(n_last - 1) < 1e-5);
    assert_true(memcmp(cls->emb, mean->emb, cls->n_emb * sizeof(float)) != 0);
    assert_true(memcmp(last->emb, mean->emb, last->n_emb * sizeof(float)) != 0);
    json_decref(root);
    fx_close(&f);
}

/* ---- progress and the end hook (engine.h) ---- */

typedef struct ended {
    int count[64]; /* by id */
    int n_calls;
} ended;

static void count_end(void *ctx, int64_t id)
{
    ended *e = ctx;
    e->n_calls++;
    if (id >= 0 && id < 64) e->count[id]++;
}

/* Every id that gets its terminal line gets exactly one end-hook call, on
 * every path (done, cancelled while queued or running, refused at arrival,
 * refused while shutting down), and a duplicate (refused without an id:
 * the request with that id runs on) gets none. The progress figures count
 * every step and none runs between steps. */
static void test_end_hook_and_progress(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f, 1, 64, 16);
    ended en = {0};
    engine_set_end_hook(f.e, count_end, &en);
    proto_pong pg;
    engine_get_progress(f.e, &pg);
    assert_true(pg.has_progress && pg.has_kv);
    assert_int_equal(pg.steps, 0);
    assert_false(pg.running);
    const int32_t toks[] = {1, 403, 407, 261, 378};
    fx_gen(&f, 1, toks, 5, 3, 0, -1, NULL);          /* runs to length */
    fx_gen(&f, 1, toks, 5, 3, 0, -1, NULL);          /* a duplicate: no hook */
    fx_gen(&f, 2, toks, 5, 3, 0, -1, NULL);          /* queued, then cancelled */
    fx_gen(&f, 3, toks, 5, 1000, 0, -1, NULL);       /* context_length at arrival */
    fx_send(&f, "{\"op\":\"stop\",\"id\":2}");
    fx_step(&f);
    et_assert_done(f.c, 2, PROTO_FINISH_CANCELLED);
    et_assert_err(f.c, 3, PROTO_ERR_CONTEXT_LENGTH);
    fx_gen(&f, 4, toks, 5, 30, 0, -1, "\"ignore_eos\":true"); /* waits for 1's slot */
    fx_run(&f);
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    fx_gen(&f, 5, toks, 5, 20, 0, -1, "\"ignore_eos\":true");
    fx_step(&f);
    fx_send(&f, "{\"op\":\"stop\",\"id\":5}"); /* cancelled while running */
    fx_send(&f, "{\"op\":\"shutdown\"}");
    fx_gen(&f, 6, toks, 5, 3, 0, -1, NULL);          /* shutting_down */
    fx_run(&f);
    et_assert_done(f.c, 5, PROTO_FINISH_CANCELLED);
    et_assert_err(f.c, 6, PROTO_ERR_SHUTTING_DOWN);
    for (int id = 1; id <= 6; id++) {
        if (en.count[id] != 1) fail_msg("id %d: %d end-hook calls, want 1", id, en.count[id]);
    }
    assert_int_equal(en.n_calls, 6);
    engine_get_progress(f.e, &pg);
    /* 1: 3 steps; 2: the step that cancelled it (1's first); 4: 30; 5: 1 + the cancelling one */
    assert_int_equal(pg.steps, 3 + 30 + 2);
    assert_false(pg.running);
    assert_int_equal(pg.step_tokens, 0);
    assert_true(pg.ms_per_token > 0);
    assert_int_equal(pg.kv_used, 0);
    engine_set_end_hook(f.e, NULL, NULL);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_matches_llamacpp),
        cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_stop_mid_prefill),
        cmocka_unit_test(test_stop_mid_decode_and_queued),
        cmocka_unit_test(test_finish_reasons),
        cmocka_unit_test(test_penalties_see_the_prompt),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_allowed_tokens),
        cmocka_unit_test(test_bad_words),
        cmocka_unit_test(test_context_and_bad_requests),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_embeddings_match_llamacpp),
        cmocka_unit_test(test_end_hook_and_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
