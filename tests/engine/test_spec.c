/* Speculative decoding (engine.h "Speculative decoding"): the n-gram draft
 * source on hand-made sequences, and the engine on stories260K and a
 * random-weight model: with --draft-ngram every request gives exactly the
 * tokens (and logprobs) it gives without speculation, greedy and seeded,
 * alone and batched with requests that opted out, across chunk sizes and
 * slot counts; drafts really are verified (draft_n / draft_accepted_n);
 * a source that proposes nothing degrades to plain decoding; `ready` names
 * the configuration; grammar-constrained requests give their tokens too;
 * and the acceptance rule keeps the distribution of
 * sampled tokens (a chi-square bound over a fixed seed set).
 *
 * The draft-model source (--draft-model) the same way: stories260K as its
 * own draft, and random-weight pairs made here with model_make (the tiny
 * preset: an F32 target with a Q4_0 draft of the same seed, which agrees
 * often, and a draft of another seed, which does not); a draft whose
 * vocabulary differs is refused at start; a draft that proposes nothing,
 * or only rejected tokens, degrades to plain decoding, and the throttle
 * keeps failing drafts few. */
#include "engine/engine.h"
#include "engine/protocol.h"
#include "engine/spec.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "gguf/types.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_testutil.h"

/* Sanitizer builds run many times slower: the configuration sweeps take
 * every other configuration and the seed set thins. The full sweeps run in
 * the normal build. */
#include "sanitized.h"
#define SP_CFG_STEP (TEST_SANITIZED ? 2 : 1)

static model *g_stories;
static model *g_random;
/* made by setup: the tiny preset, seed 1 in F32 and Q4_0, and seed 2 */
static model *g_tiny, *g_tiny_q4, *g_tiny_other;
static char g_tmpdir[512];

/* ---- the draft source ---- */

static void test_ngram_source(void **state)
{
    (void)state;
    int32_t d[SPEC_DRAFT_MAX_LIMIT];
    /* "5 6 7 8 9 5 6 7": the suffix 5 6 7 was followed by 8 9 5 6 ... */
    const int32_t a[] = {5, 6, 7, 8, 9, 5, 6, 7};
    int n = spec_ngram_draft(a, 8, d, 4, 1, 0.5f);
    assert_int_equal(n, 4);
    assert_int_equal(d[0], 8);
    assert_int_equal(d[1], 9);
    assert_int_equal(d[2], 5);
    assert_int_equal(d[3], 6);
    /* max and min */
    assert_int_equal(spec_ngram_draft(a, 8, d, 2, 1, 0.5f), 2);
    /* nothing repeats: nothing proposed */
    const int32_t b[] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(spec_ngram_draft(b, 8, d, 4, 1, 0.0f), 0);
    /* "1 2 3 | 1 2 4 | 1 2": followers of "1 2" are 3 and 4, one each:
     * p = 0.5; the most recent (4) wins the tie; p-min 0.6 refuses it */
    const int32_t c[] = {1, 2, 3, 1, 2, 4, 1, 2};
    n = spec_ngram_draft(c, 8, d, 1, 1, 0.5f);
    assert_int_equal(n, 1);
    assert_int_equal(d[0], 4);
    assert_int_equal(spec_ngram_draft(c, 8, d, 1, 1, 0.6f), 0);
    /* fewer than draft_min: none */
    const int32_t e[] = {9, 1, 2, 3, 1, 2};
    assert_int_equal(spec_ngram_draft(e, 6, d, 4, 1, 0.5f) >= 1, 1);
    int got = spec_ngram_draft(e, 6, d, 16, 1, 1.0f);
    assert_true(got >= 1);
    assert_int_equal(spec_ngram_draft(e, 6, d, 16, got + 1, 1.0f), 0);
    /* a single token never matches (the shortest n-gram is SPEC_NGRAM_MIN) */
    const int32_t f1[] = {3, 3};
    assert_int_equal(spec_ngram_draft(f1, 1, d, 4, 1, 0.0f), 0);
}

/* ---- the engine ---- */

typedef struct job {
    int32_t prompt[96];
    size_t n_prompt;
    int64_t max_tokens;
    double temperature;
    int64_t seed;
    const char *extra;
    const char *sampling; /* more sampling fields, or NULL */
} job;

/* Runs the jobs (all sent at once, ids 1..n) and returns the collector;
 * the fixture is closed. */
static et_collect *run_jobs(const model *m, const engine_params *p, const job *jobs, int n)
{
    et_fixture f;
    et_open(&f, m, p);
    for (int i = 0; i < n; i++) {
        char line[8192];
        et_gen_line_s(line, sizeof(line), i + 1, jobs[i].prompt, jobs[i].n_prompt, jobs[i].max_tokens,
                      jobs[i].temperature, jobs[i].seed, jobs[i].sampling, jobs[i].extra);
        et_send(f.e, &f.out, f.c, line);
    }
    et_run(f.e, &f.out, f.c);
    et_collect *c = f.c;
    f.c = et_collect_new();
    et_close(&f);
    return c;
}

/* Every job's tokens and logprobs are the same in a and b. */
static void assert_same(const et_collect *a, const et_collect *b, int n)
{
    for (int i = 1; i <= n; i++) {
        const et_rec *x = &a->recs[i], *y = &b->recs[i];
        if (!(x->done && y->done)) fail_msg("id %d: not done (%s / %s)", i, x->err_msg, y->err_msg);
        assert_int_equal(x->finish, y->finish);
        if (x->n_tok != y->n_tok) fail_msg("id %d: %zu vs %zu tokens", i, x->n_tok, y->n_tok);
        for (size_t k = 0; k < x->n_tok; k++) {
            if (x->toks[k] != y->toks[k]) {
                fail_msg("id %d: token %zu is %d vs %d", i, k, x->toks[k], y->toks[k]);
            }
        }
        assert_int_equal(x->n_lps, y->n_lps);
        for (size_t k = 0; k < x->n_lps; k++) {
            assert_int_equal(x->lps[k].token, y->lps[k].token);
            assert_memory_equal(&x->lps[k].logprob, &y->lps[k].logprob, sizeof(float));
        }
    }
}

static int64_t sum_stat(const et_collect *c, int n, bool accepted)
{
    int64_t s = 0;
    for (int i = 1; i <= n; i++) {
        s += accepted ? c->recs[i].stats.draft_accepted_n : c->recs[i].stats.draft_n;
        assert_true(c->recs[i].stats.draft_accepted_n <= c->recs[i].stats.draft_n);
    }
    return s;
}

/* The golden prompts, greedy, plus seeded sampled copies of them. */
static int stories_jobs(job *jobs, int max, int64_t max_tokens)
{
    et_golden g[8];
    size_t n_g = et_load_greedy(g, 8);
    int n = 0;
    for (size_t i = 0; i < n_g && n + 2 <= max; i++) {
        for (int s = 0; s < 2; s++) {
            job *j = &jobs[n++];
            memset(j, 0, sizeof(*j));
            memcpy(j->prompt, g[i].prompt, g[i].n_prompt * sizeof(int32_t));
            j->n_prompt = g[i].n_prompt;
            j->max_tokens = max_tokens;
            j->temperature = s == 0 ? 0.0 : 0.8;
            j->seed = s == 0 ? -1 : 1000 + (int64_t)i;
            j->extra = s == 0 ? "\"logprobs\":2" : NULL;
        }
    }
    return n;
}

static void test_stories_equal(void **state)
{
    (void)state;
    job jobs[16];
    int n = stories_jobs(jobs, 16, 160);
    assert_true(n >= 2);
    engine_params plain = {.n_slots = 4, .n_ctx = 512, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    assert_int_equal(sum_stat(ref, n, false), 0);
    /* the golden greedy tokens, as a check of the reference itself */
    et_golden g[8];
    size_t n_g = et_load_greedy(g, 8);
    for (size_t i = 0; i < n_g && (int)(2 * i) < n; i++) {
        const et_rec *r = &ref->recs[2 * i + 1];
        for (size_t k = 0; k < r->n_tok && k < g[i].n_gen; k++) assert_int_equal(r->toks[k], g[i].gen[k]);
    }
    /* speculation on: slot counts, chunk sizes and thread counts */
    const struct { int slots; int64_t batch; int threads; int draft_max; } cfg[] = {
        {4, 64, 1, 0}, {1, 512, 2, 4}, {8, 8, 1, 8}, {3, 5, 2, 16}, {16, 256, 1, 2},
    };
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c += SP_CFG_STEP) {
        engine_params p = {.n_slots = cfg[c].slots, .n_ctx = 512, .n_batch = cfg[c].batch,
                           .n_threads = cfg[c].threads, .draft_ngram = true,
                           .draft_max = cfg[c].draft_max};
        et_collect *got = run_jobs(g_stories, &p, jobs, n);
        assert_same(ref, got, n);
        int64_t drafted = sum_stat(got, n, false), accepted = sum_stat(got, n, true);
        print_message("slots %d batch %lld draft-max %d: %lld drafted, %lld accepted\n",
                      cfg[c].slots, (long long)cfg[c].batch, cfg[c].draft_max,
                      (long long)drafted, (long long)accepted);
        assert_true(accepted > 0);
        et_collect_free(got);
    }
    et_collect_free(ref);
}

/* The samplers with state or draws of their own (XTC's chance, Mirostat's
 * mu, DRY's and the penalties' windows, the dynamic temperature, and
 * min_tokens' count) see every verified position in order, so seeded
 * outputs stay those of plain decoding. */
static void test_samplers_equal(void **state)
{
    (void)state;
    static const char *const sampling[] = {
        "\"xtc_probability\":0.5,\"xtc_threshold\":0.1",
        "\"mirostat\":2,\"mirostat_tau\":3",
        "\"mirostat\":1,\"mirostat_tau\":4",
        "\"dry_multiplier\":0.8,\"dry_allowed_length\":2,\"repeat_penalty\":1.2,\"presence_penalty\":0.3",
        "\"dynatemp_range\":0.5,\"top_n_sigma\":1.5",
    };
    job jobs[16];
    int n = stories_jobs(jobs, 16, 120);
    for (int i = 0; i < n; i++) {
        jobs[i].sampling = sampling[i % 5];
        if (i % 4 == 3) jobs[i].extra = "\"min_tokens\":30";
        /* greedy with XTC draws too: every job seeded */
        if (jobs[i].seed < 0) jobs[i].seed = 500 + i;
    }
    engine_params plain = {.n_slots = 4, .n_ctx = 512, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    engine_params p = {.n_slots = 4, .n_ctx = 512, .n_batch = 64, .n_threads = 1, .draft_ngram = true,
                       .draft_max = 4};
    et_collect *got = run_jobs(g_stories, &p, jobs, n);
    assert_same(ref, got, n);
    assert_true(sum_stat(got, n, true) > 0);
    et_collect_free(got);
    et_collect_free(ref);
}

/* Requests that opt out, and ones without the prefix cache, share the
 * batch with speculating ones; both give the reference tokens. */
static void test_mixed_batch(void **state)
{
    (void)state;
    job jobs[16];
    int n = stories_jobs(jobs, 16, 120);
    for (int i = 0; i < n; i++) {
        if (i % 3 == 1) jobs[i].extra = "\"speculative\":false";
        if (i % 3 == 2) jobs[i].extra = "\"cache\":false,\"draft_max\":2,\"logprobs\":1";
    }
    /* the fields change nothing without a draft source */
    engine_params plain = {.n_slots = 8, .n_ctx = 512, .n_batch = 48, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    engine_params p = plain;
    p.draft_ngram = true;
    et_collect *got = run_jobs(g_stories, &p, jobs, n);
    assert_same(ref, got, n);
    for (int i = 0; i < n; i++) {
        if (i % 3 == 1) assert_int_equal(got->recs[i + 1].stats.draft_n, 0);
    }
    assert_true(sum_stat(got, n, true) > 0);
    /* a small pool: drafts only from blocks left over, preemptions still exact */
    p.kv_max_tokens = 256;
    p.n_slots = 4;
    et_collect *small = run_jobs(g_stories, &p, jobs, n);
    assert_same(ref, small, n);
    et_collect_free(small);
    et_collect_free(got);
    et_collect_free(ref);
}

/* The random-weight model, with a prompt that repeats (its output is
 * noise, so drafts come from the prompt or not at all). */
static void test_random_model(void **state)
{
    (void)state;
    if (g_random == NULL) skip();
    job jobs[6];
    int n = 0;
    int64_t vocab = g_random->hp.n_vocab;
    for (int i = 0; i < 6; i++) {
        job *j = &jobs[n++];
        memset(j, 0, sizeof(*j));
        j->n_prompt = 48;
        for (size_t k = 0; k < j->n_prompt; k++) {
            j->prompt[k] = (int32_t)((k % (size_t)(5 + i)) * 37 % vocab + 1);
        }
        j->max_tokens = 40;
        j->temperature = i % 2 ? 0.7 : 0.0;
        j->seed = 7 + i;
    }
    engine_params plain = {.n_slots = 3, .n_ctx = 256, .n_batch = 16, .n_threads = 1};
    et_collect *ref = run_jobs(g_random, &plain, jobs, n);
    engine_params p = plain;
    p.draft_ngram = true;
    p.draft_p_min = -1.0f; /* no threshold: draft whatever matches */
    et_collect *got = run_jobs(g_random, &p, jobs, n);
    assert_same(ref, got, n);
    assert_true(sum_stat(got, n, false) > 0);
    et_collect_free(got);
    et_collect_free(ref);
}

/* A source that proposes nothing (a prompt without repeats on the
 * random-weight model, whose first tokens do not repeat 16 tokens either, and
 * draft-min 16) decodes exactly as without it, with draft_n 0. */
static void test_no_proposals(void **state)
{
    (void)state;
    if (g_random == NULL) skip();
    job jobs[2];
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < 2; i++) {
        jobs[i].n_prompt = 64;
        for (size_t k = 0; k < 64; k++) jobs[i].prompt[k] = (int32_t)(1 + k * 7 + (size_t)i);
        jobs[i].max_tokens = 24;
        jobs[i].temperature = i ? 0.9 : 0.0;
        jobs[i].seed = 3;
    }
    engine_params plain = {.n_slots = 2, .n_ctx = 256, .n_batch = 32, .n_threads = 1};
    et_collect *ref = run_jobs(g_random, &plain, jobs, 2);
    engine_params p = plain;
    p.draft_ngram = true;
    p.draft_max = 16;
    p.draft_min = 16;
    p.draft_p_min = 1.0f;
    et_collect *got = run_jobs(g_random, &p, jobs, 2);
    assert_same(ref, got, 2);
    assert_int_equal(sum_stat(got, 2, false), 0);
    et_collect_free(got);
    et_collect_free(ref);
}

/* Grammar-constrained requests speculate too: each verified row is
 * masked with the grammar's state after the tokens before it, as one-token
 * decoding masks it, so the output is the same. */
static void test_grammar(void **state)
{
    (void)state;
    json_t *gs = json_string("root ::= (\"the cat \" | \"the dog \" | \"ran \" | \"and \")+");
    char *enc = json_dumps(gs, JSON_ENCODE_ANY);
    json_decref(gs);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"grammar\":%s", enc);
    free(enc);
    job jobs[4];
    int n = stories_jobs(jobs, 4, 60);
    for (int i = 0; i < n; i++) jobs[i].extra = extra;
    engine_params plain = {.n_slots = 2, .n_ctx = 256, .n_batch = 32, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    engine_params p = plain;
    p.draft_ngram = true;
    et_collect *got = run_jobs(g_stories, &p, jobs, n);
    assert_same(ref, got, n);
    for (int i = 1; i <= n; i++) assert_true(ref->recs[i].n_tok > 0);
    assert_true(sum_stat(got, n, true) > 0);
    et_collect_free(got);
    et_collect_free(ref);
}

static void test_ready_and_params(void **state)
{
    (void)state;
    engine_params p = {.n_slots = 1, .n_ctx = 128, .draft_ngram = true, .draft_max = 6};
    engine *e = NULL;
    strata_err err;
    assert_int_equal(engine_init(&e, g_stories, &p, &err), 0);
    proto_msg r;
    engine_ready(e, &r);
    assert_string_equal(r.u.ready.draft_source, "ngram");
    assert_int_equal(r.u.ready.draft_max, 6);
    assert_int_equal(r.u.ready.draft_min, 1);
    assert_true(fabs(r.u.ready.draft_p_min - 0.5) < 1e-6);
    /* and it survives the wire */
    proto_buf b = {0};
    assert_int_equal(proto_encode(&r, &b, &err), 0);
    proto_msg back;
    proto_error pe;
    assert_int_equal(proto_decode(b.data, b.len - 1, PROTO_DIR_TO_SERVER, &back, &pe), 0);
    assert_string_equal(back.u.ready.draft_source, "ngram");
    assert_int_equal(back.u.ready.draft_max, 6);
    proto_msg_free(&back);
    proto_buf_free(&b);
    engine_free(e);
    /* without a source: no draft object */
    engine_params q = {.n_slots = 1, .n_ctx = 128};
    assert_int_equal(engine_init(&e, g_stories, &q, &err), 0);
    engine_ready(e, &r);
    assert_null(r.u.ready.draft_source);
    engine_free(e);
    /* out of range */
    engine_params bad = {.n_slots = 1, .n_ctx = 128, .draft_ngram = true, .draft_max = 17};
    assert_int_equal(engine_init(&e, g_stories, &bad, &err), STRATA_EINVAL);
    /* a gen's fields */
    const char *line = "{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"speculative\":false,"
                       "\"draft_max\":3}";
    proto_msg g;
    assert_int_equal(proto_decode(line, strlen(line), PROTO_DIR_TO_ENGINE, &g, &pe), 0);
    assert_true(g.u.gen.no_speculative);
    assert_true(g.u.gen.has_draft_max);
    assert_int_equal(g.u.gen.draft_max, 3);
    proto_msg_free(&g);
    line = "{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"speculative\":1}";
    assert_int_not_equal(proto_decode(line, strlen(line), PROTO_DIR_TO_ENGINE, &g, &pe), 0);
}

/* The acceptance rule: over a fixed set of seeds, the token at a position
 * where drafts are verified has the same empirical distribution with and
 * without speculation (two-sample chi-square, bins with too few counts
 * merged, below the 0.999 quantile). With this rule the seeded outputs
 * are even equal, which assert_same checks first. */
static void acceptance_check(const engine_params *spec)
{
    et_golden g[1];
    assert_int_equal(et_load_greedy(g, 1), 1);
    enum { AT = 24 };
    const int N_SEEDS = TEST_SANITIZED ? 96 : 240;
    job *jobs = calloc(N_SEEDS, sizeof(job));
    assert_non_null(jobs);
    for (int i = 0; i < N_SEEDS; i++) {
        memcpy(jobs[i].prompt, g[0].prompt, g[0].n_prompt * sizeof(int32_t));
        /* the prompt and the start of its greedy story: repeats to draft from */
        size_t np = g[0].n_prompt;
        for (size_t k = 0; k < 48 && np < 96; k++) jobs[i].prompt[np++] = g[0].gen[k];
        jobs[i].n_prompt = np;
        jobs[i].max_tokens = AT + 1;
        jobs[i].temperature = 1.0;
        jobs[i].seed = 5000 + i;
        jobs[i].extra = "\"ignore_eos\":true";
    }
    engine_params plain = {.n_slots = 16, .n_ctx = 256, .n_batch = 256, .n_threads = 2};
    engine_params p = *spec;
    et_collect *a = run_jobs(g_stories, &plain, jobs, N_SEEDS);
    et_collect *b = run_jobs(g_stories, &p, jobs, N_SEEDS);
    assert_true(sum_stat(b, N_SEEDS, false) > 0);
    int32_t vocab = (int32_t)g_stories->hp.n_vocab;
    int *ca = calloc((size_t)vocab, sizeof(int)), *cb = calloc((size_t)vocab, sizeof(int));
    assert_true(ca != NULL && cb != NULL);
    for (int i = 1; i <= N_SEEDS; i++) {
        assert_true(a->recs[i].n_tok > AT && b->recs[i].n_tok > AT);
        ca[a->recs[i].toks[AT]]++;
        cb[b->recs[i].toks[AT]]++;
    }
    /* two-sample chi-square over bins of >= 5 expected, the rest pooled */
    double chi = 0.0;
    int df = -1, ra = 0, rb = 0;
    for (int32_t t = 0; t < vocab; t++) {
        if (ca[t] + cb[t] < 10) {
            ra += ca[t];
            rb += cb[t];
            continue;
        }
        double e = (ca[t] + cb[t]) / 2.0;
        chi += (ca[t] - e) * (ca[t] - e) / e + (cb[t] - e) * (cb[t] - e) / e;
        df++;
    }
    if (ra + rb > 0) {
        double e = (ra + rb) / 2.0;
        chi += (ra - e) * (ra - e) / e + (rb - e) * (rb - e) / e;
        df++;
    }
    assert_true(df >= 1);
    /* the 0.999 quantile, Wilson-Hilferty */
    double z = 3.09, k = df;
    double bound = k * pow(1.0 - 2.0 / (9.0 * k) + z * sqrt(2.0 / (9.0 * k)), 3.0);
    print_message("chi-square %.2f, df %d, bound %.2f\n", chi, df, bound);
    assert_true(chi < bound);
    assert_same(a, b, N_SEEDS);
    free(ca);
    free(cb);
    free(jobs);
    et_collect_free(a);
    et_collect_free(b);
}

static void test_acceptance_distribution(void **state)
{
    (void)state;
    engine_params p = {.n_slots = 16, .n_ctx = 256, .n_batch = 256, .n_threads = 2,
                       .draft_ngram = true, .draft_p_min = -1.0f};
    acceptance_check(&p);
}

/* The same with a draft model: stories260K drafting for itself, whose
 * greedy drafts the sampled target often takes and often rejects. */
static void test_acceptance_distribution_model(void **state)
{
    (void)state;
    engine_params p = {.n_slots = 16, .n_ctx = 256, .n_batch = 256, .n_threads = 2,
                       .draft_model = g_stories, .draft_p_min = -1.0f};
    acceptance_check(&p);
}

/* ---- the draft-model source ---- */

/* stories260K as its own draft: every request gives the reference tokens
 * (greedy with logprobs, seeded), across slot counts, chunk sizes, thread
 * counts and draft limits, mixed with requests that opt out and with a
 * pool small enough to preempt; and its drafts are mostly accepted. */
static void test_model_stories_equal(void **state)
{
    (void)state;
    job jobs[16];
    int n = stories_jobs(jobs, 16, 120);
    assert_true(n >= 2);
    engine_params plain = {.n_slots = 4, .n_ctx = 512, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    const struct { int slots; int64_t batch; int threads; int draft_max; float p_min; } cfg[] = {
        {4, 64, 1, 0, 0.0f}, {1, 512, 2, 4, 0.0f}, {8, 12, 1, 8, -1.0f}, {3, 5, 2, 16, 0.3f},
        {16, 256, 1, 2, 0.9f},
    };
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c += SP_CFG_STEP) {
        engine_params p = {.n_slots = cfg[c].slots, .n_ctx = 512, .n_batch = cfg[c].batch,
                           .n_threads = cfg[c].threads, .draft_model = g_stories,
                           .draft_max = cfg[c].draft_max, .draft_p_min = cfg[c].p_min};
        et_collect *got = run_jobs(g_stories, &p, jobs, n);
        assert_same(ref, got, n);
        int64_t drafted = sum_stat(got, n, false), accepted = sum_stat(got, n, true);
        print_message("draft model: slots %d batch %lld draft-max %d p-min %.1f: %lld drafted, "
                      "%lld accepted\n", cfg[c].slots, (long long)cfg[c].batch, cfg[c].draft_max,
                      (double)cfg[c].p_min, (long long)drafted, (long long)accepted);
        assert_true(accepted > 0);
        /* the same model: its greedy drafts are the greedy requests' tokens
         * (up to the penalties these requests do not use) */
        int64_t gd = 0, ga = 0;
        for (int i = 1; i <= n; i += 2) {
            gd += got->recs[i].stats.draft_n;
            ga += got->recs[i].stats.draft_accepted_n;
        }
        assert_true(gd > 0 && ga * 10 >= gd * 9);
        et_collect_free(got);
    }
    /* opted out, no prefix cache, a per-request cap; then a small pool */
    for (int i = 0; i < n; i++) {
        if (i % 3 == 1) jobs[i].extra = "\"speculative\":false";
        if (i % 3 == 2) jobs[i].extra = "\"cache\":false,\"draft_max\":2,\"logprobs\":1";
    }
    et_collect_free(ref);
    engine_params mix = {.n_slots = 8, .n_ctx = 512, .n_batch = 48, .n_threads = 1};
    ref = run_jobs(g_stories, &mix, jobs, n);
    mix.draft_model = g_stories;
    et_collect *got = run_jobs(g_stories, &mix, jobs, n);
    assert_same(ref, got, n);
    for (int i = 0; i < n; i++) {
        if (i % 3 == 1) assert_int_equal(got->recs[i + 1].stats.draft_n, 0);
    }
    mix.kv_max_tokens = 256;
    mix.n_slots = 4;
    et_collect *small = run_jobs(g_stories, &mix, jobs, n);
    assert_same(ref, small, n);
    int64_t preempted = 0;
    for (int i = 1; i <= n; i++) preempted += small->recs[i].stats.preempted;
    print_message("draft model, small pool: %lld preemptions\n", (long long)preempted);
    assert_true(preempted > 0);
    et_collect_free(small);
    et_collect_free(got);
    et_collect_free(ref);
}

/* Prompts of the random-weight pairs: some repeat, some do not; greedy
 * and seeded. */
static int tiny_jobs(job *jobs, int n, int64_t vocab, int64_t max_tokens)
{
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        memset(j, 0, sizeof(*j));
        j->n_prompt = 20 + (size_t)(i * 13 % 70);
        for (size_t k = 0; k < j->n_prompt; k++) {
            j->prompt[k] = (int32_t)((i % 2 ? k % (size_t)(3 + i) : k * 7 + (size_t)i) * 37 %
                                     (size_t)vocab);
        }
        j->max_tokens = max_tokens;
        j->temperature = i % 3 == 2 ? 0.8 : 0.0;
        j->seed = 11 + i;
        j->extra = i % 3 == 0 ? "\"logprobs\":1" : NULL;
    }
    return n;
}

/* Random-weight pairs: an F32 target with its own Q4_0 quantization as the
 * draft, and with an unrelated draft (another seed), alone and batched,
 * across chunk sizes. */
static void test_model_random_pairs(void **state)
{
    (void)state;
    if (g_tiny == NULL) skip();
    job jobs[8];
    int n = tiny_jobs(jobs, 8, g_tiny->hp.n_vocab, 48);
    engine_params plain = {.n_slots = 4, .n_ctx = 256, .n_batch = 32, .n_threads = 1};
    et_collect *ref = run_jobs(g_tiny, &plain, jobs, n);
    et_collect *ref1 = run_jobs(g_tiny, &plain, jobs, 1); /* alone */
    const struct { const model *draft; int slots; int64_t batch; int threads; float p_min; } cfg[] = {
        {g_tiny_q4, 4, 32, 1, -1.0f}, {g_tiny_q4, 1, 7, 1, -1.0f}, {g_tiny_q4, 8, 256, 2, -1.0f},
        {g_tiny_other, 4, 32, 1, -1.0f}, {g_tiny_other, 3, 5, 1, -1.0f},
    };
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c += SP_CFG_STEP) {
        engine_params p = {.n_slots = cfg[c].slots, .n_ctx = 256, .n_batch = cfg[c].batch,
                           .n_threads = cfg[c].threads, .draft_model = cfg[c].draft,
                           .draft_p_min = cfg[c].p_min};
        et_collect *got = run_jobs(g_tiny, &p, jobs, n);
        assert_same(ref, got, n);
        et_collect *one = run_jobs(g_tiny, &p, jobs, 1);
        assert_same(ref1, one, 1);
        int64_t drafted = sum_stat(got, n, false), accepted = sum_stat(got, n, true);
        print_message("tiny pair %s: slots %d batch %lld p-min %.1f: %lld drafted, %lld "
                      "accepted\n", cfg[c].draft == g_tiny_q4 ? "q4_0" : "other seed",
                      cfg[c].slots, (long long)cfg[c].batch, (double)cfg[c].p_min,
                      (long long)drafted, (long long)accepted);
        if (cfg[c].p_min < 0) assert_true(drafted > 0);
        if (cfg[c].draft == g_tiny_q4 && cfg[c].p_min < 0) assert_true(accepted > 0);
        et_collect_free(one);
        et_collect_free(got);
    }
    et_collect_free(ref1);
    et_collect_free(ref);
}

/* A draft that proposes nothing (p-min 1: no softmax reaches it) decodes
 * exactly as without it, draft_n 0; one whose drafts are all rejected is
 * throttled: after a few failed rounds it drafts ever more rarely. */
static void test_model_degrades(void **state)
{
    (void)state;
    if (g_tiny == NULL) skip();
    job jobs[3];
    int n = tiny_jobs(jobs, 3, g_tiny->hp.n_vocab, 200);
    engine_params plain = {.n_slots = 3, .n_ctx = 256, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_tiny, &plain, jobs, n);
    engine_params p = plain;
    p.draft_model = g_tiny_q4;
    p.draft_p_min = 1.0f;
    et_collect *got = run_jobs(g_tiny, &p, jobs, n);
    assert_same(ref, got, n);
    assert_int_equal(sum_stat(got, n, false), 0);
    et_collect_free(got);
    /* the unrelated draft without a threshold: drafts whatever it thinks */
    p.draft_model = g_tiny_other;
    p.draft_p_min = -1.0f;
    p.draft_max = 4;
    got = run_jobs(g_tiny, &p, jobs, n);
    assert_same(ref, got, n);
    for (int i = 1; i <= n; i++) {
        const proto_stats *st = &got->recs[i].stats;
        print_message("unrelated draft, id %d: %lld tokens, %lld drafted, %lld accepted\n", i,
                      (long long)st->predicted_n, (long long)st->draft_n,
                      (long long)st->draft_accepted_n);
        /* with no accepted draft the throttle lets at most 2 + 7 rounds
         * (pauses 1, 2, 4 .. 64) through in 200 steps; every accepted
         * draft may restart it, so the bound grows with them */
        assert_true(st->draft_n <= 4 * (10 + 10 * st->draft_accepted_n));
    }
    et_collect_free(got);
    et_collect_free(ref);
}

/* Pauses of the throttle: two failed rounds, then 1, 2, 4 ... 64 steps;
 * an accepted draft starts over. */
static void test_throttle(void **state)
{
    (void)state;
    spec_throttle t = {0};
    int rounds = 0, steps = 0;
    int pauses[16], n_pauses = 0;
    while (steps < 400) {
        int skipped = 0;
        while (spec_throttle_skip(&t)) {
            skipped++;
            steps++;
        }
        if (skipped > 0 && n_pauses < 16) pauses[n_pauses++] = skipped;
        spec_throttle_round(&t, false);
        rounds++;
        steps++;
    }
    assert_true(n_pauses >= 8);
    int want = 1;
    for (int i = 0; i < n_pauses; i++) {
        assert_int_equal(pauses[i], want);
        if (want < SPEC_THROTTLE_MAX) want *= 2;
    }
    /* 400 steps of failures: a small share of rounds */
    print_message("throttle: %d rounds in %d steps\n", rounds, steps);
    assert_true(rounds <= 2 + 7 + (400 - 127) / 64 + 1);
    /* success resets it */
    spec_throttle_round(&t, true);
    assert_false(spec_throttle_skip(&t) && spec_throttle_skip(&t) && spec_throttle_skip(&t) &&
                 spec_throttle_skip(&t) && spec_throttle_skip(&t) && spec_throttle_skip(&t) &&
                 spec_throttle_skip(&t) && spec_throttle_skip(&t) && spec_throttle_skip(&t));
    t = (spec_throttle){0};
    assert_int_equal(spec_throttle_cap(&t, 4, 1), 4);
    assert_int_equal(spec_throttle_cap(&t, 3, 1), 3);
    spec_throttle_round(&t, false);
    assert_false(spec_throttle_skip(&t));
    /* one failure halves the next round's drafts, two leave one (or draft_min) */
    assert_int_equal(spec_throttle_cap(&t, 4, 1), 2);
    spec_throttle round2 = t;
    spec_throttle_round(&round2, false);
    assert_int_equal(spec_throttle_cap(&round2, 4, 1), 1);
    assert_int_equal(spec_throttle_cap(&round2, 16, 3), 4);
    assert_int_equal(spec_throttle_cap(&round2, 2, 3), 2);
    spec_throttle_round(&t, true);
    spec_throttle_round(&t, false);
    assert_false(spec_throttle_skip(&t)); /* the failures must be in a row */
}

/* The cost gate's estimates and choices (spec.h "Cost gate") on made-up
 * step times: unknown costs let the cap through; a step bound by memory
 * (drafts nearly free) drafts the cap; one bound by arithmetic (each
 * token costs a step) drafts nothing, however good the acceptance; a
 * draft model's cost counts; stray slow steps do not move the times;
 * stale times are forgotten; the acceptance estimate follows the rounds
 * and drifts back to the engine's while a sequence does not draft. */
static void steps_of(spec_cost *c, int64_t n, double ms, int times)
{
    for (int i = 0; i < times; i++) spec_cost_step(c, n, ms);
}

static void test_cost_gate(void **state)
{
    (void)state;
    spec_cost c = {0};
    double t;
    /* nothing measured: the cap, and no time */
    assert_int_equal(spec_cost_pick(&c, 1, 1, 0.9, 0.0, 4, 1), 4);
    assert_false(spec_cost_time(&c, 1, 1, 5, &t));
    /* one count measured: still unknown beyond it */
    steps_of(&c, 1, 10.0, 5);
    assert_true(spec_cost_time(&c, 1, 1, 5, &t));
    assert_true(t == 10.0);
    assert_false(spec_cost_time(&c, 5, 1, 5, &t));
    assert_int_equal(spec_cost_pick(&c, 1, 1, 0.2, 0.0, 4, 1), 4);
    /* bound by memory: 5 tokens cost 1.2x one */
    spec_cost mem = c;
    steps_of(&mem, 5, 12.0, 5);
    assert_true(spec_cost_time(&mem, 3, -3, 5, &t)); /* on the line: 11 */
    assert_true(fabs(t - 11.0) < 1e-9);
    assert_int_equal(spec_cost_pick(&mem, 1, 1, 0.7, 0.0, 4, 1), 4);
    assert_int_equal(spec_cost_pick(&mem, 1, 1, 0.1, 0.0, 4, 1), 1); /* +10 % for +5 % */
    assert_int_equal(spec_cost_pick(&mem, 1, 1, 0.02, 0.0, 4, 1), 0);
    /* bound by arithmetic: every token costs a step; nothing pays */
    spec_cost cpu = c;
    steps_of(&cpu, 2, 20.0, 5);
    steps_of(&cpu, 5, 50.0, 5);
    assert_int_equal(spec_cost_pick(&cpu, 1, 1, 0.99, 0.0, 4, 1), 0);
    /* in between (a step of 5 costs 2x one): good acceptance pays, poor does not */
    spec_cost mid = c;
    steps_of(&mid, 5, 20.0, 5);
    assert_int_equal(spec_cost_pick(&mid, 1, 1, 0.9, 0.0, 4, 1), 4);
    assert_int_equal(spec_cost_pick(&mid, 1, 1, 0.2, 0.0, 4, 1), 0);
    /* a draft model's forward per drafted token: a cheap one pays, one
     * nearly as costly as the target does not; unmeasured: the cap */
    assert_int_equal(spec_cost_pick(&mem, 1, 1, 0.7, -1.0, 4, 1), 4);
    spec_cost_draft(&mem, 1, 1.0);
    assert_int_equal(spec_cost_pick(&mem, 1, 1, 0.8, -1.0, 4, 1), 4);
    spec_cost_draft(&mem, 40, 1000.0); /* a forward carrying a prompt chunk: not timed */
    assert_true(mem.d_ms == 1.0);
    spec_cost dear = mem;
    for (int i = 0; i < 20; i++) spec_cost_draft(&dear, 1, 8.0);
    assert_int_equal(spec_cost_pick(&dear, 1, 1, 0.7, -1.0, 4, 1), 0);
    assert_int_equal(spec_cost_pick(&dear, 1, 1, 0.7, 8.0, 4, 1), 0);
    /* never fewer than min_draft (but 0) */
    int k = spec_cost_pick(&mid, 1, 1, 0.6, 0.0, 4, 3);
    assert_true(k == 0 || k >= 3);
    /* the median: a stray slow step does not move a count's time */
    spec_cost noisy = mem;
    spec_cost_step(&noisy, 5, 500.0);
    assert_true(spec_cost_time(&noisy, 5, 1, 5, &t));
    assert_true(t == 12.0);
    assert_int_equal(spec_cost_pick(&noisy, 1, 1, 0.7, 0.0, 4, 1), 4);
    /* only counts near the step's count: a far one leaves the estimate unknown */
    spec_cost far = c;
    steps_of(&far, 40, 400.0, 5);
    assert_false(spec_cost_time(&far, 5, -3, 5, &t));
    assert_int_equal(spec_cost_pick(&far, 1, 1, 0.1, 0.0, 4, 1), 4);
    /* steps the model cannot time (more than SPEC_COST_NMAX tokens) draft the cap */
    assert_int_equal(spec_cost_pick(&cpu, SPEC_COST_NMAX - 2, 8, 0.1, 0.0, 4, 1), 4);
    /* stale times are forgotten: after SPEC_COST_FRESH untimed steps, the
     * cap again (which measures them anew) */
    spec_cost stale = cpu;
    steps_of(&stale, 0, 1.0, SPEC_COST_FRESH);
    assert_int_equal(spec_cost_pick(&stale, 1, 1, 0.1, 0.0, 4, 1), 4);
    steps_of(&stale, 1, 10.0, 1);
    steps_of(&stale, 5, 50.0, 1);
    assert_int_equal(spec_cost_pick(&stale, 1, 1, 0.1, 0.0, 4, 1), 0);

    /* acceptance: the prior, then the sequence's rounds, then the drift back */
    spec_cost e = {0};
    spec_accept a = {0}, b = {0};
    assert_true(fabs(spec_accept_p(&e, &a) - 0.5) < 1e-12);
    for (int i = 0; i < 20; i++) spec_accept_round(&e, &a, 4, 4);
    double hi = spec_accept_p(&e, &a);
    assert_true(hi > 0.95 && hi < 1.0);
    /* a new sequence starts from the engine's estimate */
    assert_true(spec_accept_p(&e, &b) > 0.9);
    for (int i = 0; i < 20; i++) spec_accept_round(&e, &b, 4, 0);
    double lo = spec_accept_p(&e, &b);
    assert_true(lo > 0.0 && lo < 0.2);
    spec_accept_round(&e, &b, 0, 0); /* proposed nothing: no change */
    assert_true(spec_accept_p(&e, &b) == lo);
    for (int i = 0; i < 400; i++) spec_accept_idle(&b);
    double back = spec_accept_p(&e, &b), prior = spec_accept_p(&e, &(spec_accept){0});
    assert_true(fabs(back - prior) < 0.02);
}

/* The gate in the engine, with step times from a model of the machine
 * instead of the clock (engine_params.test_step_ms), so the outcome is
 * fixed: on a "memory-bound" machine (a step of 5 tokens costs 1.1x one)
 * the n-gram drafts of stories260K go through about as without the gate;
 * on an "arithmetic-bound" one (each token costs as much as a step) they
 * stop after the few rounds that measure the costs; a draft model that
 * costs as much as the target drafts little even on the memory-bound one.
 * The tokens are the reference's throughout. */
static double mem_ms(int64_t n, bool draft)
{
    return draft ? 1.0 : 10.0 + 0.25 * (double)(n - 1);
}

static double cpu_ms(int64_t n, bool draft)
{
    return draft ? 1.0 : 10.0 * (double)n;
}

static double dear_draft_ms(int64_t n, bool draft)
{
    return draft ? 10.0 : 10.0 + 0.25 * (double)(n - 1);
}

static void test_gate_model_costs(void **state)
{
    (void)state;
    job jobs[16];
    /* (shorter under sanitizers: the counts below still hold at 96) */
    int n = stories_jobs(jobs, 16, TEST_SANITIZED ? 96 : 160);
    engine_params plain = {.n_slots = 1, .n_ctx = 512, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    engine_params p = plain;
    p.draft_ngram = true;
    et_collect *free_run = run_jobs(g_stories, &p, jobs, n);
    int64_t d_free = sum_stat(free_run, n, false);
    p.draft_gate = true;
    p.test_step_ms = mem_ms;
    et_collect *mem = run_jobs(g_stories, &p, jobs, n);
    p.test_step_ms = cpu_ms;
    et_collect *cpu = run_jobs(g_stories, &p, jobs, n);
    p.draft_ngram = false;
    p.draft_model = g_stories;
    p.test_step_ms = dear_draft_ms;
    et_collect *dear = run_jobs(g_stories, &p, jobs, n);
    p.draft_gate = false;
    et_collect *dear_free = run_jobs(g_stories, &p, jobs, n);
    int64_t d_mem = sum_stat(mem, n, false), d_cpu = sum_stat(cpu, n, false);
    int64_t d_dear = sum_stat(dear, n, false), d_dear_free = sum_stat(dear_free, n, false);
    print_message("n-gram drafts: %lld without the gate, %lld memory-bound, %lld "
                  "arithmetic-bound; draft model as dear as the target: %lld (%lld without "
                  "the gate)\n",
                  (long long)d_free, (long long)d_mem, (long long)d_cpu, (long long)d_dear,
                  (long long)d_dear_free);
    assert_same(ref, free_run, n);
    assert_same(ref, mem, n);
    assert_same(ref, cpu, n);
    assert_same(ref, dear, n);
    assert_true(d_free > 100);
    assert_true(d_mem * 10 >= d_free * 8);
    assert_true(d_cpu * 10 <= d_free);
    assert_true(d_dear_free > 100);
    assert_true(d_dear * 10 <= d_dear_free);
    et_collect_free(ref);
    et_collect_free(free_run);
    et_collect_free(mem);
    et_collect_free(cpu);
    et_collect_free(dear);
    et_collect_free(dear_free);
}

/* With the cost gate on, every request still gives its tokens: n-gram
 * and draft-model sources, batched, across slot counts. (How many drafts
 * the gate lets through depends on the step times, so only exactness and
 * the counts' consistency are asserted.) */
static void test_gate_exact(void **state)
{
    (void)state;
    job jobs[16];
    int n = stories_jobs(jobs, 16, 120);
    engine_params plain = {.n_slots = 4, .n_ctx = 512, .n_batch = 64, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    for (int src = 0; src < 2; src++) {
        for (int slots = 1; slots <= 4; slots += 3 * SP_CFG_STEP) {
            engine_params p = plain;
            p.n_slots = slots;
            p.draft_gate = true;
            if (src == 0) p.draft_ngram = true;
            else p.draft_model = g_stories;
            et_collect *got = run_jobs(g_stories, &p, jobs, n);
            assert_same(ref, got, n);
            print_message("gate, %s, %d slots: %lld drafted, %lld accepted\n",
                          src == 0 ? "ngram" : "model", slots,
                          (long long)sum_stat(got, n, false), (long long)sum_stat(got, n, true));
            et_collect_free(got);
        }
    }
    et_collect_free(ref);
}

/* Vocabularies that differ are refused at start, naming the difference:
 * sizes (stories260K's 512 against llama-2-tiny-random's 32000), and the
 * same size with other token texts (stories260K against the tiny preset's
 * byte vocabulary, 512 both). Both sources at once are refused too. */
static void test_model_vocab_refused(void **state)
{
    (void)state;
    engine *e = NULL;
    strata_err err;
    engine_params p = {.n_slots = 2, .n_ctx = 128};
    if (g_random != NULL) {
        p.draft_model = g_random;
        assert_int_equal(engine_init(&e, g_stories, &p, &err), STRATA_EINVAL);
        assert_null(e);
        print_message("%s\n", err.msg);
        assert_non_null(strstr(err.msg, "32000"));
        assert_non_null(strstr(err.msg, "vocabulary"));
    }
    if (g_tiny != NULL) {
        assert_int_equal(g_tiny->hp.n_vocab, g_stories->hp.n_vocab);
        p.draft_model = g_tiny;
        assert_int_equal(engine_init(&e, g_stories, &p, &err), STRATA_EINVAL);
        print_message("%s\n", err.msg);
        assert_non_null(strstr(err.msg, "token "));
        assert_non_null(strstr(err.msg, "vocabulary"));
        /* the pair that agrees is taken, and `ready` says so */
        p.draft_model = g_tiny_q4;
        assert_int_equal(engine_init(&e, g_tiny, &p, &err), 0);
        proto_msg r;
        engine_ready(e, &r);
        assert_string_equal(r.u.ready.draft_source, "model");
        assert_int_equal(r.u.ready.draft_max, 4);
        engine_free(e);
        e = NULL;
    }
    p.draft_model = g_stories;
    p.draft_ngram = true;
    assert_int_equal(engine_init(&e, g_stories, &p, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "give one"));
}

/* Grammar-constrained requests with the draft model. */
static void test_model_grammar(void **state)
{
    (void)state;
    json_t *gs = json_string("root ::= (\"the cat \" | \"the dog \" | \"ran \" | \"and \")+");
    char *enc = json_dumps(gs, JSON_ENCODE_ANY);
    json_decref(gs);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"grammar\":%s", enc);
    free(enc);
    job jobs[4];
    int n = stories_jobs(jobs, 4, 60);
    for (int i = 0; i < n; i++) jobs[i].extra = extra;
    engine_params plain = {.n_slots = 2, .n_ctx = 256, .n_batch = 32, .n_threads = 1};
    et_collect *ref = run_jobs(g_stories, &plain, jobs, n);
    engine_params p = plain;
    p.draft_model = g_stories;
    p.draft_p_min = -1.0f;
    et_collect *got = run_jobs(g_stories, &p, jobs, n);
    assert_same(ref, got, n);
    assert_true(sum_stat(got, n, false) > 0);
    et_collect_free(got);
    et_collect_free(ref);
}

static model *make_tiny(const char *name, uint32_t type, uint64_t seed)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", g_tmpdir, name);
    model_make_opts o = {.preset = model_preset_find("tiny"), .type = type, .seed = seed,
                         .out_path = path, .quiet = true, .n_threads = 1};
    strata_err err;
    model *m = NULL;
    if (model_make(&o, &err) != 0 || model_open(&m, path, &err) != 0) {
        print_error("%s: %s\n", path, err.msg);
        return NULL;
    }
    return m;
}

static int setup(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    strata_err err;
    if (model_open(&g_stories, path, &err) != 0) {
        print_error("%s\n", err.msg);
        return -1;
    }
    if (testdata_path(path, sizeof(path), "models/llama-2-tiny-random.gguf") == NULL ||
        model_open(&g_random, path, &err) != 0) {
        g_random = NULL;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof(g_tmpdir), "%s/strata-spec-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
    if (mkdtemp(g_tmpdir) != NULL) {
        g_tiny = make_tiny("tiny-f32.gguf", STRATA_TYPE_F32, 1);
        g_tiny_q4 = make_tiny("tiny-q4_0.gguf", STRATA_TYPE_Q4_0, 1);
        g_tiny_other = make_tiny("tiny-seed2.gguf", STRATA_TYPE_Q4_0, 2);
    }
    if (g_tiny == NULL || g_tiny_q4 == NULL || g_tiny_other == NULL) {
        print_error("the random-weight pairs could not be made: their tests are skipped\n");
        model_close(g_tiny);
        model_close(g_tiny_q4);
        model_close(g_tiny_other);
        g_tiny = g_tiny_q4 = g_tiny_other = NULL;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_close(g_stories);
    if (g_random != NULL) model_close(g_random);
    model_close(g_tiny);
    model_close(g_tiny_q4);
    model_close(g_tiny_other);
    if (g_tmpdir[0] != '\0') {
        const char *names[] = {"tiny-f32.gguf", "tiny-q4_0.gguf", "tiny-seed2.gguf"};
        char path[700];
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", g_tmpdir, names[i]);
            unlink(path);
        }
        rmdir(g_tmpdir);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_source),
        cmocka_unit_test(test_stories_equal),
        cmocka_unit_test(test_samplers_equal),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_random_model),
        cmocka_unit_test(test_no_proposals),
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_ready_and_params),
        cmocka_unit_test(test_acceptance_distribution),
        cmocka_unit_test(test_throttle),
        cmocka_unit_test(test_cost_gate),
        cmocka_unit_test(test_gate_exact),
        cmocka_unit_test(test_gate_model_costs),
        cmocka_unit_test(test_model_vocab_refused),
        cmocka_unit_test(test_model_stories_equal),
        cmocka_unit_test(test_model_random_pairs),
        cmocka_unit_test(test_model_degrades),
        cmocka_unit_test(test_model_grammar),
        cmocka_unit_test(test_acceptance_distribution_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
