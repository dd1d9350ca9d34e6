/* Prompt logprobs through a real `strata serve` of stories260K: OpenAI's
 * `echo` on /v1/completions (the prompt's text before the reply, and with
 * `logprobs` the prompt's tokens before the reply's, the first with null
 * logprob and alternatives; streamed as a first chunk), vLLM's
 * `prompt_logprobs` (completions per choice, chat at the top), and
 * several prompts in one /v1/completions request (OpenAI's array forms,
 * choices ordered prompt by prompt), which evaluation harnesses send with
 * echo to score continuations.
 *
 * The figures are the engine's own: a reply fed back as a prompt gets, for
 * its tokens, the very logprobs (the same JSON numbers) it was generated
 * with; a prompt's logprobs are the same in an echo and in
 * prompt_logprobs; each prompt of a batch gets what it gets alone. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "serve_testutil.h"

#ifndef STRATA_BIN
#error STRATA_BIN must name the strata binary
#endif

static json_t *choice_of(json_t *j, size_t i)
{
    return json_array_get(json_object_get(j, "choices"), i);
}

/* list[from..] of a completions logprobs object equals other's whole list
 * (the key's), JSON value for value. */
static void assert_tail_equal(json_t *lp, json_t *other, const char *key, size_t from)
{
    json_t *a = json_object_get(lp, key), *b = json_object_get(other, key);
    assert_int_equal(json_array_size(a), from + json_array_size(b));
    for (size_t i = 0; i < json_array_size(b); i++) {
        if (!json_equal(json_array_get(a, from + i), json_array_get(b, i))) {
            fail_msg("%s[%zu]: %s vs %s", key, from + i, json_dumps(json_array_get(a, from + i), JSON_ENCODE_ANY),
                     json_dumps(json_array_get(b, i), JSON_ENCODE_ANY));
        }
    }
}

static void check_echo(const st_srv *s)
{
    const char *prompt = "Once upon a time";
    json_t *plain = st_post_ok(s, "/v1/completions",
                            "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
                            "\"logprobs\":2}");
    json_t *echo = st_post_ok(s, "/v1/completions",
                           "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
                           "\"logprobs\":2,\"echo\":true}");
    const char *reply = json_string_value(json_object_get(choice_of(plain, 0), "text"));
    const char *text = json_string_value(json_object_get(choice_of(echo, 0), "text"));
    char want[512];
    snprintf(want, sizeof(want), "%s%s", prompt, reply);
    assert_string_equal(text, want);
    size_t n_prompt = (size_t)json_integer_value(json_object_get(json_object_get(echo, "usage"), "prompt_tokens"));
    assert_int_equal(n_prompt, 5); /* BOS and four words */
    assert_int_equal(json_integer_value(json_object_get(json_object_get(echo, "usage"), "completion_tokens")),
                     json_integer_value(json_object_get(json_object_get(plain, "usage"), "completion_tokens")));

    /* the prompt's tokens, then the reply's as without echo, offsets moved */
    json_t *lp = json_object_get(choice_of(echo, 0), "logprobs");
    json_t *lp0 = json_object_get(choice_of(plain, 0), "logprobs");
    json_t *tokens = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs"),
           *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    assert_tail_equal(lp, lp0, "tokens", n_prompt);
    assert_tail_equal(lp, lp0, "token_logprobs", n_prompt);
    assert_tail_equal(lp, lp0, "top_logprobs", n_prompt);
    assert_true(json_is_null(json_array_get(lps, 0)));
    assert_true(json_is_null(json_array_get(tops, 0)));
    assert_string_equal(json_string_value(json_array_get(tokens, 0)), "<s>");
    sbuf joined = {0};
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        assert_int_equal(json_integer_value(json_array_get(offs, i)),
                         st_utf8_chars(joined.data ? joined.data : "", joined.len));
        const char *tok = json_string_value(json_array_get(tokens, i));
        if (i > 0) sbuf_append(&joined, tok, strlen(tok)); /* BOS has no text */
        if (i > 0 && i < n_prompt) {
            double v = json_real_value(json_array_get(lps, i));
            assert_true(v <= 0 && isfinite(v));
            size_t n_top = json_object_size(json_array_get(tops, i));
            assert_true(n_top >= 1 && n_top <= 2);
        }
    }
    assert_string_equal(joined.data, text);

    /* the reply fed back: its tokens' logprobs are those it was generated
     * with; max_tokens 0 echoes the prompt alone */
    char body[1024];
    size_t k = (size_t)snprintf(body, sizeof(body), "{\"prompt\":[");
    int32_t ids[64];
    size_t n_ids = 0;
    assert_int_equal(tok_tokenize(g_voc, want, strlen(want), true, false, ids, 64, &n_ids, NULL), 0);
    for (size_t i = 0; i < n_ids; i++) k += (size_t)snprintf(body + k, sizeof(body) - k, "%s%d", i ? "," : "", ids[i]);
    snprintf(body + k, sizeof(body) - k, "],\"max_tokens\":0,\"logprobs\":2,\"echo\":true}");
    json_t *fed = st_post_ok(s, "/v1/completions", body);
    json_t *flp = json_object_get(choice_of(fed, 0), "logprobs");
    assert_string_equal(json_string_value(json_object_get(choice_of(fed, 0), "text")), text);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(fed, "usage"), "completion_tokens")), 0);
    assert_int_equal(json_array_size(json_object_get(flp, "tokens")), json_array_size(tokens));
    /* (the text tokenizes back to the ids it came from) */
    assert_int_equal(n_ids, json_array_size(tokens));
    assert_true(json_equal(json_object_get(flp, "token_logprobs"), lps));
    assert_true(json_equal(json_object_get(flp, "top_logprobs"), tops));
    assert_true(json_equal(json_object_get(flp, "text_offset"), offs));

    /* streamed: the prompt first, then the reply; the same text and lists */
    st_gathered g;
    st_gather_stream(s, "/v1/completions",
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
                     "\"logprobs\":2,\"echo\":true,\"stream\":true}",
                     false, &g);
    assert_string_equal(g.text.data, text);
    assert_true(json_equal(g.lp, lp));
    assert_true(g.n_chunks_with_lp >= 2);
    st_gathered_free(&g);
    st_gather_stream(s, "/v1/completions",
                     "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
                     "\"echo\":true,\"stream\":true}",
                     false, &g);
    assert_string_equal(g.text.data, text);
    assert_int_equal(g.n_chunks_with_lp, 0);
    st_gathered_free(&g);

    /* without logprobs: the text only */
    json_t *bare = st_post_ok(s, "/v1/completions",
                           "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,\"echo\":true}");
    assert_string_equal(json_string_value(json_object_get(choice_of(bare, 0), "text")), text);
    assert_true(json_is_null(json_object_get(choice_of(bare, 0), "logprobs")));
    json_decref(bare);
    sbuf_free(&joined);
    json_decref(fed);
    json_decref(plain);
    json_decref(echo);
}

/* vLLM's prompt_logprobs: per prompt token after the first, an object
 * keyed by token id (the prompt's token, then the top N), each with
 * logprob, rank and decoded_token; the same numbers as an echo's. */
static void check_prompt_logprobs(const st_srv *s)
{
    json_t *echo = st_post_ok(s, "/v1/completions",
                           "{\"prompt\":\"Once upon a time there was\",\"max_tokens\":1,\"temperature\":0,"
                           "\"logprobs\":0,\"echo\":true}");
    json_t *j = st_post_ok(s, "/v1/completions",
                        "{\"prompt\":\"Once upon a time there was\",\"max_tokens\":1,\"temperature\":0,"
                        "\"prompt_logprobs\":3}");
    json_t *plp = json_object_get(choice_of(j, 0), "prompt_logprobs");
    json_t *elps = json_object_get(json_object_get(choice_of(echo, 0), "logprobs"), "token_logprobs");
    int32_t ids[64];
    size_t n = 0;
    const char *p = "Once upon a time there was";
    assert_int_equal(tok_tokenize(g_voc, p, strlen(p), true, false, ids, 64, &n, NULL), 0);
    assert_int_equal(json_array_size(plp), n);
    assert_true(json_is_null(json_array_get(plp, 0)));
    for (size_t i = 1; i < n; i++) {
        json_t *e = json_array_get(plp, i);
        char key[16];
        snprintf(key, sizeof(key), "%d", ids[i]);
        json_t *own = json_object_get(e, key);
        assert_non_null(own);
        assert_true(json_equal(json_object_get(own, "logprob"), json_array_get(elps, i)));
        json_int_t rank = json_integer_value(json_object_get(own, "rank"));
        assert_true(rank >= 1);
        /* the prompt's token first, then the three most likely */
        const char *first_key = NULL;
        const char *kk;
        json_t *v;
        size_t ranked = 0;
        json_object_foreach(e, kk, v) {
            if (first_key == NULL) first_key = kk;
            assert_non_null(json_object_get(v, "decoded_token"));
            if (strcmp(kk, key) != 0 || rank <= 3) ranked++;
            json_int_t r = json_integer_value(json_object_get(v, "rank"));
            assert_true(r >= 1 && (r <= 3 || strcmp(kk, key) == 0));
            if (r == 1) {
                json_t *o2;
                const char *k2;
                json_object_foreach(e, k2, o2) {
                    assert_true(json_real_value(json_object_get(o2, "logprob")) <=
                                json_real_value(json_object_get(v, "logprob")));
                }
            }
        }
        assert_string_equal(first_key, key);
        assert_int_equal(ranked, 3);
        assert_int_equal(json_object_size(e), rank <= 3 ? 3 : 4);
    }
    json_decref(j);
    json_decref(echo);

    /* chat: at the top of the response, the token's own only */
    j = st_post_ok(s, "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,"
                "\"prompt_logprobs\":0}");
    plp = json_object_get(j, "prompt_logprobs");
    assert_true(json_array_size(plp) > 3);
    assert_true(json_is_null(json_array_get(plp, 0)));
    for (size_t i = 1; i < json_array_size(plp); i++) assert_int_equal(json_object_size(json_array_get(plp, i)), 1);
    assert_int_equal(json_array_size(plp),
                     json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")));
    json_decref(j);

    st_expect_error(s, "/v1/completions", "{\"prompt\":\"Once\",\"prompt_logprobs\":1,\"stream\":true}", 400,
                    "`prompt_logprobs`");
    st_expect_error(s, "/v1/completions", "{\"prompt\":\"Once\",\"prompt_logprobs\":21}", 400, "`prompt_logprobs`");
    st_expect_error(s, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"echo\":true}",
                    400, "`echo`");
}

/* Several prompts: prompt p's choice c is choice p * n + c, and equals
 * what the prompt gets alone (seeded: the seed goes with the choice). */
static void check_batch(const st_srv *s)
{
    json_t *j = st_post_ok(s, "/v1/completions",
                        "{\"prompt\":[\"Once upon a time\",\"The cat\"],\"n\":2,\"max_tokens\":8,"
                        "\"temperature\":0.8,\"seed\":5,\"echo\":true,\"logprobs\":1}");
    const char *prompts[] = {"Once upon a time", "The cat"};
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 4);
    json_int_t prompt_tokens = 0;
    for (size_t p = 0; p < 2; p++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"%s\",\"n\":2,\"max_tokens\":8,\"temperature\":0.8,\"seed\":5,"
                 "\"echo\":true,\"logprobs\":1}",
                 prompts[p]);
        json_t *alone = st_post_ok(s, "/v1/completions", body);
        prompt_tokens += json_integer_value(json_object_get(json_object_get(alone, "usage"), "prompt_tokens"));
        for (size_t c = 0; c < 2; c++) {
            json_t *a = choice_of(j, p * 2 + c), *b = choice_of(alone, c);
            assert_int_equal(json_integer_value(json_object_get(a, "index")), (json_int_t)(p * 2 + c));
            assert_string_equal(json_string_value(json_object_get(a, "text")),
                                json_string_value(json_object_get(b, "text")));
            assert_true(json_equal(json_object_get(a, "logprobs"), json_object_get(b, "logprobs")));
        }
        json_decref(alone);
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")),
                     prompt_tokens);
    json_decref(j);

    /* token id arrays (what harnesses send), one and several; streamed */
    j = st_post_ok(s, "/v1/completions",
                "{\"prompt\":[[1,403,407],[1,403,407,261]],\"max_tokens\":0,\"echo\":true,\"logprobs\":0}");
    assert_string_equal(json_string_value(json_object_get(choice_of(j, 0), "text")), "Once upon");
    assert_string_equal(json_string_value(json_object_get(choice_of(j, 1), "text")), "Once upon a");
    json_t *l0 = json_object_get(json_object_get(choice_of(j, 0), "logprobs"), "token_logprobs");
    json_t *l1 = json_object_get(json_object_get(choice_of(j, 1), "logprobs"), "token_logprobs");
    assert_int_equal(json_array_size(l0), 3);
    assert_int_equal(json_array_size(l1), 4);
    for (size_t i = 0; i < 3; i++) assert_true(json_equal(json_array_get(l0, i), json_array_get(l1, i)));
    json_decref(j);
    j = st_post_ok(s, "/v1/completions", "{\"prompt\":[[1,403,407]],\"max_tokens\":2,\"temperature\":0}");
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 1);
    json_decref(j);
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", "/v1/completions",
                             "{\"prompt\":[\"Once\",\"The\",\"A\"],\"max_tokens\":3,\"stream\":true}", NULL, &hr),
                     0);
    assert_int_equal(hr.status, 200);
    for (int i = 0; i < 3; i++) {
        char idx[32];
        snprintf(idx, sizeof(idx), "\"index\":%d,", i);
        assert_non_null(strstr(hr.body, idx));
    }
    assert_null(strstr(hr.body, "\"index\":3,"));
    http_response_free(&hr);

    st_expect_error(s, "/v1/completions", "{\"prompt\":[\"Once\",[1,403]]}", 400, "`prompt`");
    st_expect_error(s, "/v1/completions", "{\"prompt\":[[1,403],[]]}", 400, "`prompt[1]`");
    st_expect_error(s, "/v1/completions", "{\"prompt\":[]}", 400, "`prompt`");
    /* 1025 prompts of 2 choices: over the 2048 engine requests */
    sbuf big = {0};
    sbuf_append(&big, "{\"n\":2,\"prompt\":[", 17);
    for (int i = 0; i < 1025; i++) sbuf_append(&big, i ? ",\"a\"" : "\"a\"", i ? 4 : 3);
    sbuf_append(&big, "]}", 2);
    st_expect_error(s, "/v1/completions", big.data, 400, "at most 2048");
    sbuf_free(&big);
}

static void test_server_echo(void **state)
{
    (void)state;
    st_srv s;
    st_real_start(&s);
    check_echo(&s);
    check_prompt_logprobs(&s);
    check_batch(&s);
    st_real_stop(&s);
}

ST_MODEL_TEST(test_server_echo)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_server_echo_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
