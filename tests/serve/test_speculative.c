/* The server's side of speculative decoding: the request fields
 * (`speculative`, `speculative.n_max`) as they reach the engine's gen,
 * the `timings` figures, and the /metrics counters and acceptance-rate
 * histogram. */
#include "engine/protocol.h"
#include "gguf/gguf.h"
#include "text/vocab.h"
#include "serve/api.h"
#include "serve/metrics.h"
#include "serve/request.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testdata.h"

static gguf *g_gguf;
static vocab *g_vocab;

static int parse(const char *body, api_gen *g, api_error *e)
{
    api_env env = {.voc = g_vocab, .model_name = "m", .n_ctx = 4096};
    memset(g, 0, sizeof(*g));
    return api_parse_gen(&env, API_COMPLETION, body, strlen(body), g, e);
}

static void test_request_fields(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    strata_err lerr;
    if (gguf_open(&g_gguf, path, &lerr) != 0 || vocab_load(&g_vocab, g_gguf, &lerr) != 0) {
        fail_msg("%s", lerr.msg);
    }
    api_gen g;
    api_error e;
    assert_int_equal(parse("{\"prompt\":[1,2,3],\"max_tokens\":4}", &g, &e), 0);
    assert_false(g.no_speculative);
    assert_false(g.has_draft_max);
    sreq r;
    memset(&r, 0, sizeof(r));
    api_gen_move_to(&g, &r);
    assert_false(r.gen.no_speculative);
    assert_false(r.gen.has_draft_max);
    free(r.gen.tokens);
    api_gen_free(&g);

    assert_int_equal(parse("{\"prompt\":[1,2,3],\"speculative\":false,\"speculative.n_max\":2}",
                           &g, &e), 0);
    assert_true(g.no_speculative);
    assert_true(g.has_draft_max);
    assert_int_equal(g.draft_max, 2);
    memset(&r, 0, sizeof(r));
    assert_int_equal(api_gen_copy_to(&g, 0, &r), 0);
    assert_true(r.gen.no_speculative);
    assert_int_equal(r.gen.draft_max, 2);
    /* on the wire to the engine */
    proto_msg m = {.op = PROTO_OP_GEN, .has_id = true, .id = 1};
    m.u.gen = r.gen;
    proto_buf b = {0};
    strata_err err;
    assert_int_equal(proto_encode(&m, &b, &err), 0);
    assert_non_null(strstr(b.data, "\"speculative\":false"));
    assert_non_null(strstr(b.data, "\"draft_max\":2"));
    proto_buf_free(&b);
    free(r.gen.tokens);
    free(r.gen.grammar);
    free(r.gen.sampling.logit_bias);
    api_gen_free(&g);

    assert_int_not_equal(parse("{\"prompt\":[1],\"speculative\":\"no\"}", &g, &e), 0);
    assert_int_equal(e.status, 400);
    api_gen_free(&g);
    assert_int_not_equal(parse("{\"prompt\":[1],\"speculative.n_max\":17}", &g, &e), 0);
    assert_int_equal(e.status, 400);
    api_gen_free(&g);
    vocab_free(g_vocab);
    gguf_close(g_gguf);
}

static void test_timings(void **state)
{
    (void)state;
    api_result res = {.replica = 0};
    res.stats.draft_n = 12;
    res.stats.draft_accepted_n = 9;
    json_t *t = api_timings(&res);
    assert_int_equal(json_integer_value(json_object_get(t, "draft_n")), 12);
    assert_int_equal(json_integer_value(json_object_get(t, "draft_n_accepted")), 9);
    json_decref(t);
}

static void test_metrics(void **state)
{
    (void)state;
    metrics m;
    metrics_init(&m);
    metrics_add_drafts(&m, 0, 0);   /* drafted nothing: not observed */
    metrics_add_drafts(&m, 10, 9);  /* 0.9 */
    metrics_add_drafts(&m, 4, 1);   /* 0.25 */
    metrics_add_drafts(&m, 8, 8);   /* 1.0 */
    pool_info pi;
    memset(&pi, 0, sizeof(pi));
    sbuf out = {0};
    assert_int_equal(metrics_render(&m, &pi, "m", &out), 0);
    assert_non_null(strstr(out.data, "strata_draft_tokens_total 22\n"));
    assert_non_null(strstr(out.data, "strata_draft_accepted_tokens_total 18\n"));
    assert_non_null(strstr(out.data, "strata_draft_acceptance_rate_bucket{le=\"0.2\"} 0\n"));
    assert_non_null(strstr(out.data, "strata_draft_acceptance_rate_bucket{le=\"0.3\"} 1\n"));
    assert_non_null(strstr(out.data, "strata_draft_acceptance_rate_bucket{le=\"0.9\"} 2\n"));
    assert_non_null(strstr(out.data, "strata_draft_acceptance_rate_bucket{le=\"1\"} 3\n"));
    assert_non_null(strstr(out.data, "strata_draft_acceptance_rate_count 3\n"));
    sbuf_free(&out);
    metrics_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_timings),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
