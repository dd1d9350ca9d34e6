/* Logprobs in the HTTP API: the request parameters (api.c), the JSON shapes
 * of both endpoints (api_logprobs), which tokens count as returned when stop
 * strings hold text back or cut it (textgen.c), and the whole path through a
 * real `strata serve` of stories260K with a real engine, streamed and not.
 *
 * The shapes are OpenAI's: /v1/completions (`logprobs` N in [0, 5]) gives
 * {"tokens","token_logprobs","top_logprobs","text_offset"}; chat
 * (`logprobs: true`, `top_logprobs` N in [0, 20]) gives
 * {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
#include "serve/request.h"
#include "serve/textgen.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

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


static api_env test_env(void)
{
    return (api_env){.voc = g_voc, .bos = "<s>", .eos = "</s>", .model_name = "stories260K",
                     .n_ctx = 512};
}

static int32_t find_token(const char *text)
{
    int32_t id = vocab_find(g_voc, text, strlen(text));
    assert_true(id >= 0);
    return id;
}

/* Token ids of text, without BOS. */
static size_t tokenize(const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;
    assert_int_equal(tok_tokenize(g_voc, text, strlen(text), false, false, ids, cap, &n, NULL), 0);
    return n;
}

/* --- parameters --- */

/* Parses body; returns the HTTP status (200 when it parsed) and, for an
 * error, checks that the message names `param`. */
static int parse(enum api_kind kind, const char *body, const char *param, int32_t *logprobs)
{
    api_env env = test_env();
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, kind, body, strlen(body), &g, &e) != 0) {
        if (param != NULL && strstr(e.message, param) == NULL) {
            fail_msg("error \"%s\" does not name %s", e.message, param);
        }
        return e.status;
    }
    *logprobs = g.logprobs;
    api_gen_free(&g);
    return 200;
}

static void test_parse_completion_logprobs(void **state)
{
    (void)state;
    int32_t lp = 99;
    assert_int_equal(parse(API_COMPLETION, "{\"prompt\":\"Hi\"}", NULL, &lp), 200);
    assert_int_equal(lp, -1);
    assert_int_equal(parse(API_COMPLETION, "{\"prompt\":\"Hi\",\"logprobs\":null}", NULL, &lp), 200);
    assert_int_equal(lp, -1);
    assert_int_equal(parse(API_COMPLETION, "{\"prompt\":\"Hi\",\"logprobs\":false}", NULL, &lp), 200);
    assert_int_equal(lp, -1);
    assert_int_equal(parse(API_COMPLETION, "{\"prompt\":\"Hi\",\"logprobs\":0}", NULL, &lp), 200);
    assert_int_equal(lp, 0);
    assert_int_equal(parse(API_COMPLETION, "{\"prompt\":\"Hi\",\"logprobs\":5}", NULL, &lp), 200);
    assert_int_equal(lp, 5);
    const char *bad[] = {"6", "-1", "true", "\"2\"", "2.5", "[1]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"prompt\":\"Hi\",\"logprobs\":%s}", bad[i]);
        assert_int_equal(parse(API_COMPLETION, body, "`logprobs`", &lp), 400);
    }
}

static void test_parse_chat_logprobs(void **state)
{
    (void)state;
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]";
    char body[256];
    int32_t lp = 99;
    snprintf(body, sizeof(body), "{%s}", msgs);
    assert_int_equal(parse(API_CHAT, body, NULL, &lp), 200);
    assert_int_equal(lp, -1);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":true}", msgs);
    assert_int_equal(parse(API_CHAT, body, NULL, &lp), 200);
    assert_int_equal(lp, 0);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":true,\"top_logprobs\":20}", msgs);
    assert_int_equal(parse(API_CHAT, body, NULL, &lp), 200);
    assert_int_equal(lp, 20);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":false}", msgs);
    assert_int_equal(parse(API_CHAT, body, NULL, &lp), 200);
    assert_int_equal(lp, -1);
    /* top_logprobs needs logprobs: true */
    snprintf(body, sizeof(body), "{%s,\"top_logprobs\":2}", msgs);
    assert_int_equal(parse(API_CHAT, body, "`top_logprobs`", &lp), 400);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":false,\"top_logprobs\":0}", msgs);
    assert_int_equal(parse(API_CHAT, body, "`top_logprobs`", &lp), 400);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":true,\"top_logprobs\":21}", msgs);
    assert_int_equal(parse(API_CHAT, body, "`top_logprobs`", &lp), 400);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":true,\"top_logprobs\":-1}", msgs);
    assert_int_equal(parse(API_CHAT, body, "`top_logprobs`", &lp), 400);
    snprintf(body, sizeof(body), "{%s,\"logprobs\":1}", msgs);
    assert_int_equal(parse(API_CHAT, body, "`logprobs`", &lp), 400);
}

/* The engine is asked for what the client asked. */
static void test_gen_carries_logprobs(void **state)
{
    (void)state;
    api_env env = test_env();
    const char *body = "{\"prompt\":\"Hi\",\"logprobs\":3}";
    api_gen g;
    api_error e;
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    sreq *r = sreq_new(1, false);
    assert_non_null(r);
    api_gen_move_to(&g, r);
    assert_int_equal(r->gen.logprobs, 3);
    /* stored per token, alternatives copied */
    proto_top top[2] = {{.token = 7, .logprob = -0.5f}, {.token = 9, .logprob = -1.5f}};
    proto_logprob lps[2] = {{.token = 7, .logprob = -0.5f, .top = top, .n_top = 2},
                            {.token = 8, .logprob = -2.0f}};
    int32_t ids[2] = {7, 8};
    assert_int_equal(sreq_push_tokens_lp(r, ids, lps, 2), 0);
    assert_int_equal(sreq_push_tokens(r, ids, 1), 0); /* none sent: unknown */
    assert_int_equal(r->n_toks, 3);
    assert_non_null(r->lps);
    assert_true(r->lps[0].top != top && r->lps[0].n_top == 2 && r->lps[0].top[1].token == 9);
    assert_true(r->lps[1].logprob == -2.0f && r->lps[1].n_top == 0);
    assert_true(isnan(r->lps[2].logprob) && r->lps[2].token == 7);
    sreq_release(r);
    api_gen_free(&g);
}

/* Prompt logprobs asked of the engine: an echo with logprobs and vLLM's
 * prompt_logprobs, the larger top of the two; stored by position, each
 * checked against the prompt; vLLM's stop_token_ids banned until
 * min_tokens (min_bans). */
static void test_gen_carries_prompt_logprobs(void **state)
{
    (void)state;
    api_env env = test_env();
    static const struct {
        const char *body;
        bool want;
        int32_t top;
    } cases[] = {{"{\"prompt\":[1,403,407],\"logprobs\":2}", false, 0},
                 {"{\"prompt\":[1,403,407],\"logprobs\":2,\"echo\":true}", true, 2},
                 {"{\"prompt\":[1,403,407],\"echo\":true}", false, 0},
                 {"{\"prompt\":[1,403,407],\"prompt_logprobs\":0}", true, 0},
                 {"{\"prompt\":[1,403,407],\"logprobs\":1,\"echo\":true,\"prompt_logprobs\":4}", true, 4}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        api_gen g;
        api_error e;
        assert_int_equal(api_parse_gen(&env, API_COMPLETION, cases[i].body, strlen(cases[i].body), &g, &e), 0);
        sreq *r = sreq_new(1, false);
        assert_int_equal(api_gen_copy_to(&g, 0, r), 0);
        assert_int_equal(r->gen.prompt_logprobs, cases[i].want);
        assert_int_equal(r->gen.prompt_top, cases[i].top);
        if (cases[i].want) {
            proto_logprob ok[2] = {{.token = 403, .logprob = -1.0f}, {.token = 407, .logprob = -2.0f, .rank = 3}};
            proto_logprob wrong[1] = {{.token = 1, .logprob = -1.0f}};
            assert_true(sreq_plp_fits(r, 1, ok, 2));
            assert_false(sreq_plp_fits(r, 0, ok, 2));    /* the first token has none */
            assert_false(sreq_plp_fits(r, 2, ok, 2));    /* past the prompt */
            assert_false(sreq_plp_fits(r, 1, wrong, 1)); /* not the prompt's token */
            assert_int_equal(sreq_push_prompt_lp(r, 2, ok + 1, 1), 0);
            assert_non_null(r->plps);
            assert_true(isnan(r->plps[0].logprob) && isnan(r->plps[1].logprob));
            assert_true(r->plps[2].logprob == -2.0f && r->plps[2].rank == 3);
        }
        sreq_release(r);
        api_gen_free(&g);
    }
    const char *body = "{\"prompt\":[1,403],\"min_tokens\":3,\"stop_token_ids\":[407,261]}";
    api_gen g;
    api_error e;
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    sreq *r = sreq_new(1, false);
    assert_int_equal(api_gen_copy_to(&g, 0, r), 0);
    assert_int_equal(r->gen.n_min_bans, 2);
    assert_int_equal(r->gen.min_bans[1], 261);
    assert_int_equal(r->gen.min_tokens, 3);
    sreq_release(r);
    api_gen_free(&g);
    body = "{\"prompt\":[1,403],\"stop_token_ids\":[407]}"; /* no min_tokens: nothing banned */
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    r = sreq_new(1, false);
    assert_int_equal(api_gen_copy_to(&g, 0, r), 0);
    assert_int_equal(r->gen.n_min_bans, 0);
    sreq_release(r);
    api_gen_free(&g);
}

/* --- shapes --- */

static void test_completion_shape(void **state)
{
    (void)state;
    api_env env = test_env();
    int32_t a = find_token("A"), a_byte = find_token("<0x41>"), the = find_token("▁the");
    int32_t e2 = find_token("<0xE2>");
    /* ids a and a_byte both read "A": the more likely one keeps the key */
    proto_top top0[3] = {{a, -0.25f}, {a_byte, -1.0f}, {the, -2.0f}};
    proto_top top1[1] = {{e2, -0.5f}};
    api_lp_token t[3] = {
        {.id = a, .bytes = "A", .n_bytes = 1, .text_offset = 0, .logprob = -0.25f, .top = top0,
         .n_top = 3},
        {.id = e2, .bytes = "\xe2", .n_bytes = 1, .text_offset = 1, .logprob = -0.5f, .top = top1,
         .n_top = 1},
        {.id = 2, .bytes = NULL, .n_bytes = 0, .text_offset = 2, .logprob = NAN},
    };
    json_t *j = api_logprobs(&env, API_COMPLETION, t, 3, 2);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    /* the top list is cut to 2; the duplicate text keeps the first; bytes
     * that are not UTF-8 are spelled out; an unknown logprob is null; a
     * token with no text shows its own */
    assert_string_equal(s, "{\"text_offset\":[0,1,2],"
                           "\"token_logprobs\":[-0.25,-0.5,null],"
                           "\"tokens\":[\"A\",\"bytes:\\\\xe2\",\"</s>\"],"
                           "\"top_logprobs\":[{\"A\":-0.25},{\"bytes:\\\\xe2\":-0.5},{}]}");
    free(s);
    json_decref(j);
    /* no tokens: empty lists */
    j = api_logprobs(&env, API_COMPLETION, t, 0, 2);
    s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(s, "{\"text_offset\":[],\"token_logprobs\":[],\"tokens\":[],\"top_logprobs\":[]}");
    free(s);
    json_decref(j);
}

static void test_chat_shape(void **state)
{
    (void)state;
    api_env env = test_env();
    int32_t the = find_token("▁the"), a = find_token("A");
    proto_top top[2] = {{the, -0.125f}, {a, -3.0f}};
    api_lp_token t[2] = {
        {.id = the, .bytes = " the", .n_bytes = 4, .logprob = -0.125f, .top = top, .n_top = 2},
        {.id = a, .bytes = "\xe2\x80", .n_bytes = 2, .logprob = -1.0f, .top = top, .n_top = 2},
    };
    json_t *j = api_logprobs(&env, API_CHAT, t, 2, 1);
    assert_non_null(j);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        s, "{\"content\":["
           "{\"bytes\":[32,116,104,101],\"logprob\":-0.125,\"token\":\" the\","
           "\"top_logprobs\":[{\"bytes\":[32,116,104,101],\"logprob\":-0.125,\"token\":\" the\"}]},"
           "{\"bytes\":[226,128],\"logprob\":-1.0,\"token\":\"bytes:\\\\xe2\\\\x80\","
           "\"top_logprobs\":[{\"bytes\":[32,116,104,101],\"logprob\":-0.125,\"token\":\" the\"}]}]}");
    free(s);
    json_decref(j);
    /* top_logprobs 0: an empty list per token */
    j = api_logprobs(&env, API_CHAT, t, 1, 0);
    assert_int_equal(json_array_size(json_object_get(json_array_get(json_object_get(j, "content"), 0),
                                                     "top_logprobs")),
                     0);
    json_decref(j);
}

/* A choice carries its logprobs (or null), streamed and not. */
static void test_choice_carries_logprobs(void **state)
{
    (void)state;
    api_env env = test_env();
    api_result res = {.serial = 5, .finish_reason = "stop", .replica = 0};
    json_t *lp = json_pack("{s:[]}", "content");
    json_t *j = api_completion_body(&env, API_CHAT, &res, "x", 1, lp);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_true(json_is_array(json_object_get(json_object_get(choice, "logprobs"), "content")));
    json_decref(j);
    j = api_completion_body(&env, API_COMPLETION, &res, "x", 1, NULL);
    choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_true(json_is_null(json_object_get(choice, "logprobs")));
    json_decref(j);
    lp = json_pack("{s:[s]}", "tokens", "x");
    j = api_stream_chunk(&env, API_COMPLETION, 5, 0, "x", 1, NULL, true, lp);
    choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(json_object_get(choice, "logprobs"), "tokens"), 0)),
                        "x");
    json_decref(j);
}

/* --- which tokens are returned --- */

typedef struct tg_run {
    textgen tg;
    sbuf out;
    int32_t prompt[8];
    size_t n_prompt;
    const char *stops[2];
} tg_run;

static void tg_start(tg_run *t, const char *stop)
{
    memset(t, 0, sizeof(*t));
    t->prompt[0] = 1; /* BOS */
    t->n_prompt = 1 + tokenize("Once", t->prompt + 1, 7);
    t->stops[0] = stop;
    assert_int_equal(textgen_init(&t->tg, g_voc, t->prompt, t->n_prompt, t->stops, stop ? 1 : 0, NULL), 0);
}

static void tg_end(tg_run *t)
{
    textgen_free(&t->tg);
    sbuf_free(&t->out);
}

static char *token_text(const textgen *tg, size_t i)
{
    size_t n;
    const char *b = textgen_token_bytes(tg, i, &n);
    return strndup(b, n);
}

static void test_visible_without_stop(void **state)
{
    (void)state;
    int32_t ids[3] = {find_token(","), find_token("▁there"), find_token("▁was")};
    size_t n = 3;
    tg_run t;
    tg_start(&t, NULL);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
        assert_int_equal(t.tg.n_visible, i + 1); /* nothing held: visible at once */
    }
    assert_int_equal(textgen_push(&t.tg, 2, &t.out, NULL), 0); /* EOS */
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there was");
    assert_int_equal(t.tg.n_toks, 4);
    assert_int_equal(t.tg.n_visible, 3); /* never the end-of-generation token */
    const char *want[3] = {",", " there", " was"};
    size_t offsets[3] = {0, 1, 7};
    for (size_t i = 0; i < 3; i++) {
        char *s = token_text(&t.tg, i);
        assert_string_equal(s, want[i]);
        free(s);
        assert_int_equal(t.tg.toks[i].char_start, offsets[i]);
    }
    tg_end(&t);
}

static void test_visible_with_stop(void **state)
{
    (void)state;
    int32_t ids[5] = {find_token(","), find_token("▁there"), find_token("▁was"), find_token("▁a"),
                      find_token("▁little")};
    size_t n = 5;
    /* "as a": " was" is held back (it could begin the stop), then " a"
     * completes it: ", there w" is returned; " was" began before the stop
     * string and counts, " a" lies inside it and does not */
    tg_run t;
    tg_start(&t, "as a");
    assert_int_equal(textgen_push(&t.tg, ids[0], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, ids[1], &t.out, NULL), 0);
    assert_int_equal(t.tg.n_visible, 2);
    assert_int_equal(textgen_push(&t.tg, ids[2], &t.out, NULL), 0); /* " w" out, "as" held */
    assert_int_equal(t.tg.n_visible, 3);
    assert_int_equal(textgen_push(&t.tg, ids[3], &t.out, NULL), 0);
    assert_true(t.tg.hit_stop);
    assert_int_equal(textgen_push(&t.tg, ids[4], &t.out, NULL), 0); /* ignored */
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there w");
    assert_int_equal(t.tg.n_toks, 4);
    assert_int_equal(t.tg.n_visible, 3);
    tg_end(&t);

    /* a stop string that is a whole token: that token is not returned */
    tg_start(&t, " was");
    for (size_t i = 0; i < n; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there");
    assert_int_equal(t.tg.n_visible, 2);
    tg_end(&t);

    /* held back but never completed: released, and visible, at the end */
    tg_start(&t, " was not");
    for (size_t i = 0; i < 3; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there");
    assert_int_equal(t.tg.n_visible, 2);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there was");
    assert_int_equal(t.tg.n_visible, 3);
    tg_end(&t);
}

/* vLLM's stop_token_ids: the text ends after the stop token's own text
 * (held-back text released with it); include_stop_str_in_output returns
 * a matched stop string */
static void test_stop_ids_and_included_stops(void **state)
{
    (void)state;
    int32_t ids[5] = {find_token(","), find_token("▁there"), find_token("▁was"), find_token("▁a"),
                      find_token("▁little")};
    tg_run t;
    tg_start(&t, "as not"); /* holds " was" back until the stop id */
    int32_t stop_id[1] = {ids[2]};
    textgen_stop_on(&t.tg, stop_id, 1, false, 0);
    for (size_t i = 0; i < 5; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_true(t.tg.hit_stop);
    assert_string_equal(t.out.data, ", there was");
    assert_int_equal(t.tg.n_consumed, 3);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there was");
    assert_int_equal(t.tg.n_visible, 3); /* the stop token counts: its text was returned */
    tg_end(&t);

    /* a stop string completed by the stop token still cuts first */
    tg_start(&t, "ere w");
    textgen_stop_on(&t.tg, stop_id, 1, false, 0);
    for (size_t i = 0; i < 5; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", th");
    tg_end(&t);

    /* include_stop_str_in_output */
    tg_start(&t, "as a");
    textgen_stop_on(&t.tg, NULL, 0, true, 0);
    for (size_t i = 0; i < 5; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_true(t.tg.hit_stop);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there was a");
    assert_int_equal(t.tg.n_visible, 4);
    tg_end(&t);

    /* min_tokens: neither the stop id at token 3 nor the stop string in
     * tokens 1-3 ends the text before token 4; " a" then ends it by id */
    tg_start(&t, "there");
    int32_t stops2[2] = {ids[2], ids[3]};
    textgen_stop_on(&t.tg, stops2, 2, false, 4);
    for (size_t i = 0; i < 5; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_true(t.tg.hit_stop);
    assert_string_equal(t.out.data, ", there was a");
    assert_int_equal(t.tg.n_consumed, 4);
    tg_end(&t);
    /* a stop string completed by the min_tokens-th token still stops */
    tg_start(&t, "as a");
    textgen_stop_on(&t.tg, NULL, 0, false, 4);
    for (size_t i = 0; i < 5; i++) assert_int_equal(textgen_push(&t.tg, ids[i], &t.out, NULL), 0);
    assert_string_equal(t.out.data, ", there w");
    tg_end(&t);

    /* skip_special_tokens false: a control token (BOS) as its text; the
     * EOS still ends the text without one */
    tg_start(&t, NULL);
    textgen_render_special(&t.tg);
    assert_int_equal(textgen_push(&t.tg, ids[0], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, 1, &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, 2, &t.out, NULL), 0);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ",<s>");
    tg_end(&t);
    tg_start(&t, NULL); /* by default it gives nothing */
    assert_int_equal(textgen_push(&t.tg, ids[0], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, 1, &t.out, NULL), 0);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ",");
    tg_end(&t);

    /* a control token (EOS here) as a stop id: no text of its own */
    tg_start(&t, NULL);
    int32_t eos[1] = {2};
    textgen_stop_on(&t.tg, eos, 1, false, 0);
    assert_int_equal(textgen_push(&t.tg, ids[0], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, 2, &t.out, NULL), 0);
    assert_true(t.tg.ended);
    assert_int_equal(textgen_finish(&t.tg, &t.out, NULL), 0);
    assert_string_equal(t.out.data, ",");
    tg_end(&t);
}

/* Byte tokens of one character: each is returned once the character is
 * complete, and all sit at that character's offset. */
static void test_visible_partial_character(void **state)
{
    (void)state;
    int32_t ids[4] = {find_token("A"), find_token("<0xE2>"), find_token("<0x80>"),
                      find_token("<0x99>")};
    tg_run t;
    tg_start(&t, NULL);
    assert_int_equal(textgen_push(&t.tg, ids[0], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, ids[1], &t.out, NULL), 0);
    assert_int_equal(textgen_push(&t.tg, ids[2], &t.out, NULL), 0);
    assert_int_equal(t.tg.n_visible, 1); /* "\xe2\x80" not released yet */
    assert_int_equal(textgen_push(&t.tg, ids[3], &t.out, NULL), 0);
    assert_int_equal(t.tg.n_visible, 4);
    assert_string_equal(t.out.data, "A\xe2\x80\x99");
    size_t nb;
    const char *b = textgen_token_bytes(&t.tg, 2, &nb);
    assert_int_equal(nb, 1);
    assert_int_equal((unsigned char)b[0], 0x80);
    assert_int_equal(t.tg.toks[1].char_start, 1);
    assert_int_equal(t.tg.toks[2].char_start, 1);
    assert_int_equal(t.tg.toks[3].char_start, 1);
    tg_end(&t);
}

/* --- through a real server --- */

/* Completion logprobs of a greedy answer: the tokens spell the text, each
 * chosen token is its own most likely alternative, the offsets add up; the
 * stream carries exactly the same. */
static void check_completion(const st_srv *s, const char *stop)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,\"logprobs\":3%s%s%s}",
             stop ? ",\"stop\":\"" : "", stop ? stop : "", stop ? "\"" : "");
    int status;
    json_t *j = st_post(s, "/v1/completions", body, &status);
    assert_int_equal(status, 200);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(choice, "text"));
    json_t *lp = json_object_get(choice, "logprobs");
    json_t *tokens = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    size_t n = json_array_size(tokens);
    assert_true(n > 0);
    assert_int_equal(json_array_size(lps), n);
    assert_int_equal(json_array_size(tops), n);
    assert_int_equal(json_array_size(offs), n);
    sbuf joined = {0}, all_but_last = {0};
    for (size_t i = 0; i < n; i++) {
        const char *tok = json_string_value(json_array_get(tokens, i));
        assert_non_null(tok);
        assert_int_equal(json_integer_value(json_array_get(offs, i)),
                         st_utf8_chars(joined.data ? joined.data : "", joined.len));
        if (i + 1 < n) sbuf_append(&all_but_last, tok, strlen(tok));
        sbuf_append(&joined, tok, strlen(tok));
        double v = json_real_value(json_array_get(lps, i));
        assert_true(json_is_real(json_array_get(lps, i)) && v <= 0.0 && isfinite(v));
        json_t *top = json_array_get(tops, i);
        assert_true(json_object_size(top) >= 1 && json_object_size(top) <= 3);
        /* greedy: nothing is more likely than the chosen token */
        const char *key;
        json_t *alt;
        json_object_foreach(top, key, alt) assert_true(json_real_value(alt) <= v + 1e-6);
        assert_true(fabs(json_real_value(json_object_get(top, tok)) - v) < 1e-6);
    }
    if (stop == NULL) {
        assert_string_equal(joined.data, text);
        if (strcmp(json_string_value(json_object_get(choice, "finish_reason")), "length") == 0) {
            assert_int_equal(n, json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                                   "completion_tokens")));
        }
    } else {
        /* every token returned, and no other: each has a byte of the text */
        if (strcmp(json_string_value(json_object_get(choice, "finish_reason")), "stop") != 0) {
            fail_msg("stop %s not met in \"%s\"", stop, text);
        }
        assert_null(strstr(text, stop));
        assert_int_equal(strncmp(joined.data, text, strlen(text)), 0);
        assert_true(all_but_last.len < strlen(text));
    }
    /* the same, streamed */
    char sbody[600];
    snprintf(sbody, sizeof(sbody), "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    st_gathered g;
    st_gather_stream(s, "/v1/completions", sbody, false, &g);
    assert_string_equal(g.text.data ? g.text.data : "", text);
    assert_true(json_equal(g.lp, lp));
    assert_true(g.n_chunks_with_lp >= 1);
    st_gathered_free(&g);
    sbuf_free(&joined);
    sbuf_free(&all_but_last);
    json_decref(j);
}

static void check_chat(const st_srv *s)
{
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
                       "\"max_tokens\":24,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2}";
    int status;
    json_t *j = st_post(s, "/v1/chat/completions", body, &status);
    assert_int_equal(status, 200);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(json_object_get(choice, "message"), "content"));
    json_t *content = json_object_get(json_object_get(choice, "logprobs"), "content");
    size_t n = json_array_size(content);
    assert_true(n > 0);
    sbuf joined = {0};
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(content, i);
        const char *tok = json_string_value(json_object_get(e, "token"));
        json_t *bytes = json_object_get(e, "bytes");
        assert_non_null(tok);
        assert_int_equal(json_array_size(bytes), strlen(tok));
        for (size_t k = 0; k < strlen(tok); k++) {
            assert_int_equal(json_integer_value(json_array_get(bytes, k)), (unsigned char)tok[k]);
        }
        sbuf_append(&joined, tok, strlen(tok));
        json_t *top = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(top), 2);
        double v = json_real_value(json_object_get(e, "logprob"));
        /* greedy: the first alternative is the chosen token */
        assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "token")), tok);
        assert_true(fabs(json_real_value(json_object_get(json_array_get(top, 0), "logprob")) - v) < 1e-6);
        assert_true(json_real_value(json_object_get(json_array_get(top, 1), "logprob")) <= v + 1e-6);
    }
    assert_string_equal(joined.data, text);
    char sbody[600];
    snprintf(sbody, sizeof(sbody), "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    st_gathered g;
    st_gather_stream(s, "/v1/chat/completions", sbody, true, &g);
    assert_string_equal(g.text.data ? g.text.data : "", text);
    assert_true(json_equal(g.lp, json_object_get(choice, "logprobs")));
    st_gathered_free(&g);
    sbuf_free(&joined);
    json_decref(j);
}

static void test_server_logprobs(void **state)
{
    (void)state;
    st_srv s;
    st_real_start(&s);
    check_completion(&s, NULL);
    check_completion(&s, " was");
    check_completion(&s, "ere w"); /* inside " there" */
    check_chat(&s);
    /* asked for none: null */
    int status;
    json_t *j = st_post(&s, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}", &status);
    assert_int_equal(status, 200);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs")));
    json_decref(j);
    /* out of range: 400 naming the parameter */
    j = st_post(&s, "/v1/completions", "{\"prompt\":\"Once\",\"logprobs\":6}", &status);
    assert_int_equal(status, 400);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "`logprobs`"));
    json_decref(j);
    j = st_post(&s, "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"top_logprobs\":3}", &status);
    assert_int_equal(status, 400);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")), "`top_logprobs`"));
    json_decref(j);
    st_real_stop(&s);
}

ST_MODEL_TEST(test_parse_completion_logprobs)
ST_MODEL_TEST(test_parse_chat_logprobs)
ST_MODEL_TEST(test_gen_carries_logprobs)
ST_MODEL_TEST(test_gen_carries_prompt_logprobs)
ST_MODEL_TEST(test_completion_shape)
ST_MODEL_TEST(test_chat_shape)
ST_MODEL_TEST(test_choice_carries_logprobs)
ST_MODEL_TEST(test_visible_without_stop)
ST_MODEL_TEST(test_visible_with_stop)
ST_MODEL_TEST(test_stop_ids_and_included_stops)
ST_MODEL_TEST(test_visible_partial_character)
ST_MODEL_TEST(test_server_logprobs)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_completion_logprobs_guard),
        cmocka_unit_test(test_parse_chat_logprobs_guard),
        cmocka_unit_test(test_gen_carries_logprobs_guard),
        cmocka_unit_test(test_gen_carries_prompt_logprobs_guard),
        cmocka_unit_test(test_completion_shape_guard),
        cmocka_unit_test(test_chat_shape_guard),
        cmocka_unit_test(test_choice_carries_logprobs_guard),
        cmocka_unit_test(test_visible_without_stop_guard),
        cmocka_unit_test(test_visible_with_stop_guard),
        cmocka_unit_test(test_stop_ids_and_included_stops_guard),
        cmocka_unit_test(test_visible_partial_character_guard),
        cmocka_unit_test_teardown(test_server_logprobs_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
