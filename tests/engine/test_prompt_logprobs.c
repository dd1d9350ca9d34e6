/* Prompt logprobs (gen `prompt_logprobs`, engine → server `plp`) in-process:
 *
 * - against llama.cpp: on the golden models, every prompt token's logprob
 *   is the log-softmax of llama.cpp's logits at the position before it,
 *   within the golden test's tolerance (twice it: a logprob is a logit less
 *   the log-sum), and its rank and top alternative agree wherever no
 *   near-tie makes them uncertain;
 * - exactness inside Strata: the entries are bit-identical whatever the
 *   chunking, threads, neighbours in the batch and prefix cache, and equal
 *   to the logprobs that the same tokens get when generated (a greedy
 *   run's output fed back as a prompt);
 * - the protocol's order: from 1, each prompt token once, all before the
 *   first `tok`; a one-token prompt gets none; max_tokens 0 ends after
 *   them;
 * - a request preempted in the middle of its prompt reports each token
 *   once and the same figures as alone;
 * - gen `progress` (llama-server's return_progress): `prog` lines. */
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

#define STORIES "models/stories260K.gguf"

static model *open_model(const char *rel)
{
    char path[4096];
    TESTDATA_FILE(path, rel);
    model *m = NULL;
    strata_err err;
    if (model_open(&m, path, &err) != 0) fail_msg("loading %s: %s", rel, err.msg);
    return m;
}

static void *read_file(const char *rel, size_t *size)
{
    char path[4096];
    TESTDATA_FILE(path, rel);
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* A greedy gen line asking for prompt logprobs with n_top alternatives
 * (and the generated tokens' logprobs with as many); n_top < 0: no prompt
 * logprobs (3 alternatives for the generated ones). */
static void send_gen(et_fixture *f, int64_t id, const int32_t *toks, size_t n, int64_t max_tokens,
                     int n_top, const char *extra)
{
    static char line[1 << 16];
    char ex[256];
    snprintf(ex, sizeof(ex), "\"logprobs\":%d,\"prompt_logprobs\":%d%s%s", n_top > 0 ? n_top : 0,
             n_top, extra ? "," : "", extra ? extra : "");
    if (n_top == 0) {
        snprintf(ex, sizeof(ex), "\"logprobs\":true,\"prompt_logprobs\":true%s%s",
                 extra ? "," : "", extra ? extra : "");
    } else if (n_top < 0) {
        snprintf(ex, sizeof(ex), "\"logprobs\":3%s%s", extra ? "," : "", extra ? extra : "");
    }
    et_gen_line(line, sizeof(line), id, toks, n, max_tokens, 0.0, -1, ex);
    et_send(f->e, &f->out, f->c, line);
}

/* Every prompt token after the first reported once, in order, before any
 * generated token, each naming its own token. */
static void assert_plp_shape(const et_rec *r, const int32_t *toks, size_t n, const char *what)
{
    if (r->plp_bad) fail_msg("%s: a plp line out of order or after a tok", what);
    if (r->n_plp != n - 1) fail_msg("%s: %zu prompt logprobs for %zu tokens", what, r->n_plp, n);
    for (size_t i = 0; i < r->n_plp; i++) {
        const proto_logprob *lp = &r->plp[i];
        if (lp->token != toks[i + 1]) fail_msg("%s: entry %zu names token %d, not %d", what, i,
                                               lp->token, toks[i + 1]);
        if (!(lp->logprob <= 0) || lp->rank < 1) fail_msg("%s: entry %zu: logprob %g rank %d", what, i,
                                                         lp->logprob, lp->rank);
        for (size_t k = 0; k < lp->n_top; k++) {
            if (k > 0 && lp->top[k].logprob > lp->top[k - 1].logprob) {
                fail_msg("%s: entry %zu: alternatives not most likely first", what, i);
            }
        }
        if (lp->n_top > 0) {
            if (lp->logprob > lp->top[0].logprob) fail_msg("%s: entry %zu above the top", what, i);
            /* rank r <= n_top: the token is the r-th alternative (or tied with it) */
            if ((size_t)lp->rank <= lp->n_top && lp->top[lp->rank - 1].logprob != lp->logprob) {
                fail_msg("%s: entry %zu: rank %d but alternative %d has %g, not %g", what, i,
                         lp->rank, lp->rank, lp->top[lp->rank - 1].logprob, lp->logprob);
            }
            if (lp->rank == 1 && lp->top[0].logprob != lp->logprob) {
                fail_msg("%s: entry %zu: rank 1 below the top", what, i);
            }
        }
    }
}

static void assert_same_plp(const et_rec *a, const et_rec *b, const char *what)
{
    if (a->n_plp != b->n_plp) fail_msg("%s: %zu vs %zu entries", what, a->n_plp, b->n_plp);
    for (size_t i = 0; i < a->n_plp; i++) {
        const proto_logprob *x = &a->plp[i], *y = &b->plp[i];
        if (x->token != y->token || memcmp(&x->logprob, &y->logprob, sizeof(float)) != 0 ||
            x->rank != y->rank || x->n_top != y->n_top) {
            fail_msg("%s: entry %zu differs (%d %.9g rank %d vs %d %.9g rank %d)", what, i, x->token,
                     x->logprob, x->rank, y->token, y->logprob, y->rank);
        }
        for (size_t k = 0; k < x->n_top; k++) {
            if (x->top[k].token != y->top[k].token ||
                memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float)) != 0) {
                fail_msg("%s: alternative %zu of entry %zu differs", what, k, i);
            }
        }
    }
}

/* ---- against llama.cpp's logits ---- */

static void check_golden(const char *name, double tol)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/models/%s.gguf", name);
    model *m = open_model(rel);
    const int64_t n_vocab = m->hp.n_vocab;
    for (int k = 1; k <= 3; k++) {
        size_t size;
        snprintf(rel, sizeof(rel), "golden/seq%d.txt", k);
        char *txt = read_file(rel, &size);
        int32_t toks[64];
        size_t n = 0;
        for (char *p = txt, *q; n < 64; p = q) {
            long v = strtol(p, &q, 10);
            if (q == p) break;
            toks[n++] = (int32_t)v;
        }
        free(txt);
        assert_int_equal(n, 32);
        snprintf(rel, sizeof(rel), "golden/logits/%s.seq%d.logits.f32", name, k);
        float *gold = read_file(rel, &size);
        assert_int_equal(size, n * (size_t)n_vocab * sizeof(float));
        double max_ref = 0;
        for (size_t i = 0; i < n * (size_t)n_vocab; i++) max_ref = fmax(max_ref, fabs(gold[i]));
        const double bound = 2 * tol * max_ref;

        /* chunks of 5 tokens, 2 threads: several plp lines */
        engine_params p = {.n_slots = 2, .n_ctx = 64, .n_batch = 5, .n_threads = 2};
        et_fixture f;
        et_open(&f, m, &p);
        send_gen(&f, 1, toks, n, 0, 5, NULL);
        et_run(f.e, &f.out, f.c);
        et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
        const et_rec *r = &f.c->recs[1];
        char what[96];
        snprintf(what, sizeof(what), "%s seq%d", name, k);
        assert_plp_shape(r, toks, n, what);
        assert_true(r->n_plp_msgs >= 6);
        double worst = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            const float *g = gold + i * (size_t)n_vocab;
            double mx = g[0];
            for (int64_t v = 1; v < n_vocab; v++) mx = fmax(mx, g[v]);
            double s = 0;
            for (int64_t v = 0; v < n_vocab; v++) s += exp(g[v] - mx);
            double lse = mx + log(s);
            const proto_logprob *lp = &r->plp[i];
            double want = g[toks[i + 1]] - lse;
            worst = fmax(worst, fabs(lp->logprob - want));
            if (!(fabs(lp->logprob - want) <= bound)) {
                fail_msg("%s: token %zu: logprob %.6g, llama.cpp's %.6g (bound %.3g)", what, i + 1,
                         lp->logprob, want, bound);
            }
            /* the rank: between the tokens surely above and those maybe above */
            int64_t sure = 0, maybe = 0;
            for (int64_t v = 0; v < n_vocab; v++) {
                sure += g[v] > g[toks[i + 1]] + bound;
                maybe += g[v] > g[toks[i + 1]] - bound && v != toks[i + 1];
            }
            if (lp->rank < sure + 1 || lp->rank > maybe + 1) {
                fail_msg("%s: token %zu: rank %d, llama.cpp's between %lld and %lld", what, i + 1,
                         lp->rank, (long long)sure + 1, (long long)maybe + 1);
            }
            /* the first alternative is llama.cpp's most likely, up to ties */
            assert_true(lp->n_top == 5);
            if (!(g[lp->top[0].token] >= mx - bound)) {
                fail_msg("%s: token %zu: top %d, not llama.cpp's argmax", what, i + 1, lp->top[0].token);
            }
        }
        print_message("%s: max |logprob - llama.cpp's| %.3g (bound %.3g)\n", what, worst, bound);
        et_close(&f);
        free(gold);
    }
    model_close(m);
}

static void test_golden_llama_f32(void **state)
{
    (void)state;
    check_golden("llama-F32", 1e-3);
}

/* sliding windows, soft-caps, per-layer rope bases */
static void test_golden_gemma3_f32(void **state)
{
    (void)state;
    check_golden("gemma3-F32", 1e-3);
}

static void test_golden_llama_q8_0(void **state)
{
    (void)state;
    check_golden("llama-Q8_0", 4e-2);
}

/* ---- exact inside Strata (stories260K) ---- */

static void prompt_of(int32_t *out, size_t n, uint64_t seed)
{
    out[0] = 1;
    for (size_t i = 1; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = 3 + (int32_t)((seed >> 33) % 500);
    }
}

static void test_invariant(void **state)
{
    (void)state;
    model *m = open_model(STORIES);
    enum { N = 150 }; /* over PROTO_PLP_CHUNK: several chunks of rows */
    int32_t toks[N], other[40];
    prompt_of(toks, N, 7);
    prompt_of(other, 40, 8);

    /* the reference: alone, no prefix cache, big chunks, one thread */
    engine_params p1 = {.n_slots = 1, .n_ctx = 512, .n_batch = 512, .n_threads = 1,
                        .no_prefix_cache = true};
    et_fixture ref;
    et_open(&ref, m, &p1);
    send_gen(&ref, 1, toks, N, 4, 3, NULL);
    et_run(ref.e, &ref.out, ref.c);
    et_assert_done(ref.c, 1, PROTO_FINISH_LENGTH);
    assert_plp_shape(&ref.c->recs[1], toks, N, "alone");
    assert_true(ref.c->recs[1].n_plp_msgs >= 3);

    /* chunks of 7, two threads, beside a decoding request; then again
     * with the first run's blocks in the prefix cache */
    engine_params p2 = {.n_slots = 3, .n_ctx = 512, .n_batch = 7, .n_threads = 2};
    et_fixture f;
    et_open(&f, m, &p2);
    send_gen(&f, 2, other, 40, 30, 3, NULL);
    et_step(f.e, &f.out, f.c);
    send_gen(&f, 3, toks, N, 4, 3, NULL);
    et_run(f.e, &f.out, f.c);
    et_assert_done(f.c, 3, PROTO_FINISH_LENGTH);
    assert_same_plp(&f.c->recs[3], &ref.c->recs[1], "chunks of 7 beside another");
    send_gen(&f, 4, toks, N, 4, 3, NULL);
    send_gen(&f, 5, toks, N, 4, -1, NULL); /* the same prompt without: it may reuse */
    et_run(f.e, &f.out, f.c);
    et_assert_done(f.c, 4, PROTO_FINISH_LENGTH);
    assert_int_equal(f.c->recs[4].stats.cached_n, 0);
    assert_same_plp(&f.c->recs[4], &ref.c->recs[1], "a prompt the cache holds");
    for (size_t i = 0; i < 4; i++) assert_int_equal(f.c->recs[4].toks[i], ref.c->recs[1].toks[i]);
    assert_true(f.c->recs[5].stats.cached_n > 0);
    assert_int_equal(f.c->recs[5].n_plp, 0);

    /* teacher forcing: the greedy output of `other` fed back as a prompt
     * gets, for those tokens, the logprobs they were generated with */
    const et_rec *g = &f.c->recs[2];
    et_assert_done(f.c, 2, PROTO_FINISH_LENGTH);
    int32_t fed[70];
    memcpy(fed, other, sizeof(other));
    for (size_t i = 0; i < g->n_tok; i++) fed[40 + i] = g->toks[i];
    send_gen(&ref, 6, fed, 40 + g->n_tok, 1, 3, NULL);
    et_run(ref.e, &ref.out, ref.c);
    const et_rec *t = &ref.c->recs[6];
    assert_plp_shape(t, fed, 40 + g->n_tok, "fed back");
    for (size_t i = 0; i < g->n_tok; i++) {
        const proto_logprob *x = &t->plp[39 + i], *y = &g->lps[i];
        if (x->token != y->token || memcmp(&x->logprob, &y->logprob, sizeof(float)) != 0 ||
            x->n_top != y->n_top) {
            fail_msg("fed back: token %zu: %d %.9g vs generated %d %.9g", i, x->token, x->logprob,
                     y->token, y->logprob);
        }
        for (size_t k = 0; k < x->n_top; k++) {
            assert_int_equal(x->top[k].token, y->top[k].token);
            assert_memory_equal(&x->top[k].logprob, &y->top[k].logprob, sizeof(float));
        }
        assert_int_equal(x->rank, 1); /* greedy: each was the most likely */
    }

    /* one token: nothing to report; max_tokens 0: ends after the entries */
    send_gen(&ref, 7, toks, 1, 2, 2, NULL);
    send_gen(&ref, 8, toks, 10, 0, 0, NULL);
    et_run(ref.e, &ref.out, ref.c);
    et_assert_done(ref.c, 7, PROTO_FINISH_LENGTH);
    assert_int_equal(ref.c->recs[7].n_plp, 0);
    assert_int_equal(ref.c->recs[7].n_plp_msgs, 0);
    et_assert_done(ref.c, 8, PROTO_FINISH_LENGTH);
    assert_plp_shape(&ref.c->recs[8], toks, 10, "max_tokens 0");
    assert_int_equal(ref.c->recs[8].plp[0].n_top, 0);
    assert_int_equal(ref.c->recs[8].n_tok, 0);
    for (size_t i = 0; i < 9; i++) {
        assert_memory_equal(&ref.c->recs[8].plp[i].logprob, &ref.c->recs[1].plp[i].logprob,
                            sizeof(float));
    }

    et_close(&f);
    et_close(&ref);
    model_close(m);
}

/* A pool of 5 blocks of 32: the younger request's 150-token prompt stalls
 * at 4 blocks while the older one decodes, and is preempted when that one
 * needs its second block; it resumes once the older one is done, its
 * reported positions possibly from the prefix cache. */
static void test_preempted_mid_prompt(void **state)
{
    (void)state;
    model *m = open_model(STORIES);
    enum { N = 150 };
    int32_t toks[N], first[20];
    prompt_of(toks, N, 11);
    prompt_of(first, 20, 12);

    engine_params p1 = {.n_slots = 1, .n_ctx = 512, .n_batch = 512, .n_threads = 1,
                        .no_prefix_cache = true};
    et_fixture ref;
    et_open(&ref, m, &p1);
    send_gen(&ref, 1, toks, N, 1, 2, NULL);
    send_gen(&ref, 2, first, 20, 100, 2, NULL);
    et_run(ref.e, &ref.out, ref.c);

    engine_params p2 = {.n_slots = 2, .n_ctx = 512, .n_batch = 16, .n_threads = 1,
                        .kv_max_tokens = 160};
    et_fixture f;
    et_open(&f, m, &p2);
    send_gen(&f, 2, first, 20, 100, 2, NULL);
    et_step(f.e, &f.out, f.c);
    send_gen(&f, 1, toks, N, 1, 2, NULL);
    et_run(f.e, &f.out, f.c);
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    et_assert_done(f.c, 2, PROTO_FINISH_LENGTH);
    const et_rec *r = &f.c->recs[1];
    assert_true(r->stats.preempted >= 1);
    assert_plp_shape(r, toks, N, "preempted");
    assert_same_plp(r, &ref.c->recs[1], "preempted");
    assert_int_equal(r->toks[0], ref.c->recs[1].toks[0]);
    assert_int_equal(f.c->recs[2].n_tok, ref.c->recs[2].n_tok);
    for (size_t i = 0; i < f.c->recs[2].n_tok; i++) {
        assert_int_equal(f.c->recs[2].toks[i], ref.c->recs[2].toks[i]);
    }
    et_close(&f);
    et_close(&ref);
    model_close(m);
}

/* gen `progress`: a `prog` after each step that prefilled part of the
 * prompt, growing to the whole prompt, all before the first token; the
 * cached part counted; none without it. */
static void test_progress(void **state)
{
    (void)state;
    model *m = open_model(STORIES);
    enum { N = 70 };
    int32_t toks[N];
    prompt_of(toks, N, 21);
    engine_params p = {.n_slots = 2, .n_ctx = 512, .n_batch = 16, .n_threads = 1};
    et_fixture f;
    et_open(&f, m, &p);
    static char line[1 << 14];
    et_gen_line(line, sizeof(line), 1, toks, N, 3, 0.0, -1, "\"progress\":true");
    et_send(f.e, &f.out, f.c, line);
    et_gen_line(line, sizeof(line), 2, toks, N, 3, 0.0, -1, NULL);
    et_send(f.e, &f.out, f.c, line);
    et_run(f.e, &f.out, f.c);
    const et_rec *r = &f.c->recs[1];
    et_assert_done(f.c, 1, PROTO_FINISH_LENGTH);
    assert_false(r->prog_bad);
    assert_true(r->n_prog >= N / 16);
    assert_int_equal(r->last_prog.processed, N);
    assert_int_equal(r->last_prog.total, N);
    assert_int_equal(r->last_prog.cached, 0);
    assert_true(r->last_prog.ms >= 0);
    assert_int_equal(f.c->recs[2].n_prog, 0);
    /* again: the prefix cache gives its full blocks, and says so */
    et_gen_line(line, sizeof(line), 3, toks, N, 3, 0.0, -1, "\"progress\":true");
    et_send(f.e, &f.out, f.c, line);
    et_run(f.e, &f.out, f.c);
    r = &f.c->recs[3];
    assert_false(r->prog_bad);
    assert_int_equal(r->last_prog.cached, r->stats.cached_n);
    assert_true(r->stats.cached_n >= 32);
    assert_int_equal(r->last_prog.processed, N);
    for (size_t i = 0; i < 3; i++) assert_int_equal(r->toks[i], f.c->recs[1].toks[i]);
    et_close(&f);
    model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_llama_f32),
        cmocka_unit_test(test_golden_gemma3_f32),
        cmocka_unit_test(test_golden_llama_q8_0),
        cmocka_unit_test(test_invariant),
        cmocka_unit_test(test_preempted_mid_prompt),
        cmocka_unit_test(test_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
