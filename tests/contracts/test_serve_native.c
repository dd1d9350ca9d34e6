/* llama-server's own POST /completion through a real `strata serve` of
 * stories260K: its request fields (n_predict, n_probs, return_tokens,
 * n_cmpl, prompts mixing token ids and text, several prompts) and its
 * response (content, tokens, stop_type and stopping_word, tokens_predicted
 * and tokens_evaluated, generation_settings, prompt, timings,
 * completion_probabilities), streamed as llama-server streams it (its
 * events, then the whole object; no [DONE]).
 *
 * The answers are those of /v1/completions for the same request: the same
 * text, tokens and logprobs. Side by side with llama-server itself on
 * stories260K (by hand, README), greedy contents, token ids, stop types and
 * counts were equal. */
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

static const char *str_of(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    if (v == NULL) fail_msg("no string `%s`", key);
    return v;
}

static json_int_t int_of(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) fail_msg("no integer `%s`", key);
    return json_integer_value(v);
}

/* The ids of text (with BOS). */
static size_t ids_of(const char *text, int32_t *ids, size_t cap)
{
    size_t n = 0;
    assert_int_equal(tok_tokenize(g_voc, text, strlen(text), true, false, ids, cap, &n, NULL), 0);
    return n;
}

static void check_single(const st_srv *s)
{
    json_t *oai = st_post_ok(s, "/v1/completions",
                          "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":2}");
    json_t *j = st_post_ok(s, "/completion",
                        "{\"prompt\":\"Once upon a time\",\"n_predict\":12,\"temperature\":0,\"n_probs\":2,"
                        "\"return_tokens\":true}");
    json_t *oc = json_array_get(json_object_get(oai, "choices"), 0);
    assert_string_equal(str_of(j, "content"), str_of(oc, "text"));
    assert_int_equal(int_of(j, "index"), 0);
    assert_true(json_is_true(json_object_get(j, "stop")));
    assert_string_equal(str_of(j, "model"), "stories260K");
    assert_string_equal(str_of(j, "stop_type"), "limit");
    assert_string_equal(str_of(j, "stopping_word"), "");
    assert_int_equal(int_of(j, "tokens_predicted"), 12);
    assert_int_equal(int_of(j, "tokens_evaluated"), 5);
    assert_string_equal(str_of(j, "prompt"), "<s> Once upon a time");
    assert_true(json_is_false(json_object_get(j, "truncated")));
    json_t *gs = json_object_get(j, "generation_settings");
    assert_int_equal(int_of(gs, "n_predict"), 12);
    assert_int_equal(int_of(gs, "n_probs"), 2);
    assert_true(json_real_value(json_object_get(gs, "temperature")) == 0.0);
    json_t *t = json_object_get(j, "timings");
    for (const char *const *k = (const char *const[]){"cache_n", "prompt_n", "predicted_n", NULL}; *k; k++) {
        assert_true(json_is_integer(json_object_get(t, *k)));
    }
    assert_int_equal(int_of(t, "predicted_n"), 12);
    assert_true(json_is_number(json_object_get(t, "predicted_per_second")));
    /* tokens: the ids of the text; probabilities: /v1/completions' logprobs */
    json_t *toks = json_object_get(j, "tokens");
    assert_int_equal(json_array_size(toks), 12);
    json_t *probs = json_object_get(j, "completion_probabilities");
    json_t *olp = json_object_get(oc, "logprobs");
    assert_int_equal(json_array_size(probs), 12);
    sbuf joined = {0};
    for (size_t i = 0; i < 12; i++) {
        json_t *p = json_array_get(probs, i);
        assert_int_equal(int_of(p, "id"), json_integer_value(json_array_get(toks, i)));
        assert_string_equal(str_of(p, "token"), json_string_value(json_array_get(json_object_get(olp, "tokens"), i)));
        assert_true(json_equal(json_object_get(p, "logprob"),
                               json_array_get(json_object_get(olp, "token_logprobs"), i)));
        json_t *tops = json_object_get(p, "top_logprobs");
        assert_int_equal(json_array_size(tops), 2);
        json_t *otop = json_array_get(json_object_get(olp, "top_logprobs"), i);
        for (size_t k = 0; k < 2; k++) {
            json_t *a = json_array_get(tops, k);
            assert_true(json_equal(json_object_get(a, "logprob"), json_object_get(otop, str_of(a, "token"))));
            assert_int_equal(json_array_size(json_object_get(a, "bytes")), strlen(str_of(a, "token")));
        }
        sbuf_append(&joined, str_of(p, "token"), strlen(str_of(p, "token")));
    }
    assert_string_equal(joined.data, str_of(j, "content"));
    sbuf_free(&joined);

    /* streamed: llama-server's events (content, the ids whose text begins
     * there, stop false), then the whole object with empty content */
    http_response hr;
    assert_int_equal(http_do(s->port, "POST", "/completion",
                             "{\"prompt\":\"Once upon a time\",\"n_predict\":12,\"temperature\":0,"
                             "\"n_probs\":2,\"stream\":true}",
                             NULL, &hr),
                     0);
    assert_int_equal(hr.status, 200);
    assert_null(strstr(hr.body, "[DONE]"));
    sbuf text = {0};
    json_t *ids = json_array(), *sprobs = json_array(), *last = NULL;
    for (const char *p = hr.body; (p = strstr(p, "data: ")) != NULL;) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        assert_non_null(ev);
        assert_null(last); /* nothing after the last object */
        if (json_is_true(json_object_get(ev, "stop"))) {
            last = ev;
        } else {
            sbuf_append(&text, str_of(ev, "content"), strlen(str_of(ev, "content")));
            json_array_extend(ids, json_object_get(ev, "tokens"));
            json_array_extend(sprobs, json_object_get(ev, "completion_probabilities"));
            assert_int_equal(int_of(ev, "tokens_evaluated"), 5);
            json_decref(ev);
        }
        p = end;
    }
    assert_non_null(last);
    assert_string_equal(text.data, str_of(j, "content"));
    assert_true(json_equal(ids, toks));
    assert_true(json_equal(sprobs, probs));
    assert_string_equal(str_of(last, "content"), "");
    assert_string_equal(str_of(last, "stop_type"), "limit");
    assert_int_equal(int_of(last, "tokens_predicted"), 12);
    json_decref(last);
    json_decref(ids);
    json_decref(sprobs);
    sbuf_free(&text);
    http_response_free(&hr);
    json_decref(j);
    json_decref(oai);
}

/* stop_type and stopping_word; tokens with a stop word hold the token that
 * carried it (as llama-server's do) */
static void check_stops(const st_srv *s)
{
    json_t *whole = st_post_ok(s, "/completion",
                            "{\"prompt\":\"Once upon a time\",\"n_predict\":30,\"temperature\":0,"
                            "\"return_tokens\":true}");
    json_t *j = st_post_ok(s, "/completion",
                        "{\"prompt\":\"Once upon a time\",\"n_predict\":30,\"temperature\":0,"
                        "\"stop\":[\"zzz\",\" was\"],\"return_tokens\":true}");
    assert_string_equal(str_of(j, "stop_type"), "word");
    assert_string_equal(str_of(j, "stopping_word"), " was");
    const char *content = str_of(j, "content");
    assert_null(strstr(content, " was"));
    assert_int_equal(strncmp(str_of(whole, "content"), content, strlen(content)), 0);
    size_t n = json_array_size(json_object_get(j, "tokens"));
    assert_int_equal(n, int_of(j, "tokens_predicted"));
    for (size_t i = 0; i < n; i++) {
        assert_true(json_equal(json_array_get(json_object_get(j, "tokens"), i),
                               json_array_get(json_object_get(whole, "tokens"), i)));
    }
    json_decref(j);
    json_decref(whole);
    /* the end of text first: eos, nothing generated */
    j = st_post_ok(s, "/completion", "{\"prompt\":\"Once\",\"n_predict\":8,\"logit_bias\":[[2,100]]}");
    assert_string_equal(str_of(j, "stop_type"), "eos");
    assert_string_equal(str_of(j, "content"), "");
    assert_int_equal(int_of(j, "tokens_predicted"), 0);
    assert_int_equal(json_array_size(json_object_get(j, "tokens")), 0);
    json_decref(j);
}

/* prompts of ids and text mixed; several prompts and n_cmpl: an array */
static void check_prompts(const st_srv *s)
{
    int32_t ids[32];
    size_t n = ids_of("Once upon a", ids, 32);
    assert_int_equal(n, 4);
    char body[512];
    snprintf(body, sizeof(body), "{\"prompt\":[%d,%d,%d,%d],\"n_predict\":6,\"temperature\":0}", ids[0], ids[1],
             ids[2], ids[3]);
    json_t *by_ids = st_post_ok(s, "/completion", body);
    snprintf(body, sizeof(body), "{\"prompt\":[%d,%d,\"upon a\"],\"n_predict\":6,\"temperature\":0}", ids[0],
             ids[1]);
    json_t *mixed = st_post_ok(s, "/completion", body);
    assert_string_equal(str_of(mixed, "content"), str_of(by_ids, "content"));
    assert_int_equal(int_of(mixed, "tokens_evaluated"), 4);
    snprintf(body, sizeof(body), "{\"prompt\":[\"Once upon a\",[%d,%d,\"upon a\"]],\"n_predict\":6,\"temperature\":0,"
             "\"n_cmpl\":2}", ids[0], ids[1]);
    json_t *arr = st_post_ok(s, "/completion", body);
    assert_true(json_is_array(arr));
    assert_int_equal(json_array_size(arr), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *o = json_array_get(arr, i);
        assert_int_equal(int_of(o, "index"), (json_int_t)i);
        assert_string_equal(str_of(o, "content"), str_of(by_ids, "content"));
        assert_string_equal(str_of(o, "prompt"), "<s> Once upon a");
    }
    json_decref(arr);
    json_decref(mixed);
    json_decref(by_ids);

    /* what only /completion takes is refused by the OpenAI endpoints, and
     * a bad prompt element is named */
    st_expect_error(s, "/v1/completions", "{\"prompt\":\"Once\",\"n_probs\":2}", 400, "n_probs");
    st_expect_error(s, "/v1/completions", "{\"prompt\":[1,\"upon\"]}", 400, "prompt");
    st_expect_error(s, "/completion", "{\"prompt\":[1,{\"x\":1}]}", 400, "prompt[1]");
    st_expect_error(s, "/completion", "{\"prompt\":\"Once\",\"n_probs\":21}", 400, "n_probs");
    /* /infill needs a model with fill-in-the-middle tokens (test_serve_infill.c) */
    st_expect_error(s, "/infill", "{\"input_prefix\":\"Once\",\"input_suffix\":\" end\"}", 501, "fill-in-the-middle");
    st_expect_error(s, "/completion", "{\"prompt\":\"Once\",\"n_indent\":4}", 400, "n_indent");
}

/* llama-server's /tokenize with_pieces and /apply-template (the answers
 * llama-server gave for the same bodies on stories260K); vLLM's /tokenize
 * ({"prompt"} or {"messages"}: the count a chat request's prompt has) and
 * /detokenize's `prompt` */
static void check_tools(const st_srv *s)
{
    json_t *j = st_post_ok(s, "/tokenize", "{\"content\":\"Once upon \xc3\xa1\",\"with_pieces\":true,\"add_special\":true}");
    json_t *want = json_loads("{\"tokens\":[{\"id\":1,\"piece\":\"<s>\"},{\"id\":403,\"piece\":\" Once\"},"
                              "{\"id\":407,\"piece\":\" upon\"},{\"id\":410,\"piece\":\" \"},"
                              "{\"id\":198,\"piece\":[195]},{\"id\":164,\"piece\":[161]}]}",
                              0, NULL);
    assert_true(json_equal(j, want));
    json_decref(want);
    json_decref(j);
    j = st_post_ok(s, "/tokenize", "{\"content\":\"Once\"}");
    assert_true(json_is_integer(json_array_get(json_object_get(j, "tokens"), 0)));
    json_decref(j);
    j = st_post_ok(s, "/apply-template",
                   "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
                   "\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\","
                   "\"content\":\"More\"}]}");
    assert_string_equal(str_of(j, "prompt"), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                             "<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>"
                                             "user\nMore<|im_end|>\n<|im_start|>assistant\n");
    json_decref(j);
    st_expect_error(s, "/apply-template", "{}", 400, "messages");
    /* vLLM's /tokenize and /detokenize fields */
    j = st_post_ok(s, "/tokenize", "{\"prompt\":\"Once upon\",\"return_token_strs\":true}");
    want = json_loads("{\"count\":3,\"max_model_len\":0,\"tokens\":[1,403,407],"
                      "\"token_strs\":[\"<s>\",\" Once\",\" upon\"]}", 0, NULL);
    json_object_set(want, "max_model_len", json_object_get(j, "max_model_len"));
    assert_true(json_integer_value(json_object_get(j, "max_model_len")) > 0);
    assert_true(json_equal(j, want));
    json_decref(want);
    json_decref(j);
    j = st_post_ok(s, "/tokenize", "{\"prompt\":\"Once upon\",\"add_special_tokens\":false}");
    assert_int_equal(json_integer_value(json_object_get(j, "count")), 2);
    json_decref(j);
    const char *msgs = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1}";
    j = st_post_ok(s, "/tokenize", msgs);
    json_t *chat = st_post_ok(s, "/v1/chat/completions", msgs);
    assert_int_equal(json_integer_value(json_object_get(j, "count")),
                     json_integer_value(json_object_get(json_object_get(chat, "usage"), "prompt_tokens")));
    json_decref(chat);
    json_decref(j);
    j = st_post_ok(s, "/detokenize", "{\"tokens\":[403,407]}");
    assert_string_equal(str_of(j, "content"), " Once upon");
    assert_string_equal(str_of(j, "prompt"), " Once upon");
    json_decref(j);
}

/* llama-server's return_progress: streamed chunks with `prompt_progress`
 * before the text, the last one the whole prompt; the text the same as
 * without it. */
static void check_progress(const st_srv *s)
{
    static const char *const bodies[][2] = {
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
                                 "\"max_tokens\":6,\"temperature\":0,\"stream\":true%s}"},
        {"/completion", "{\"prompt\":\"Once upon a time\",\"n_predict\":6,\"temperature\":0,\"stream\":true%s}"},
    };
    for (size_t k = 0; k < 2; k++) {
        sbuf text[2] = {{0}, {0}};
        for (int with = 0; with < 2; with++) {
            char body[512];
            snprintf(body, sizeof(body), bodies[k][1], with ? ",\"return_progress\":true" : "");
            http_response hr;
            assert_int_equal(http_do(s->port, "POST", bodies[k][0], body, NULL, &hr), 0);
            assert_int_equal(hr.status, 200);
            int n_prog = 0;
            bool text_seen = false;
            json_t *last = NULL;
            for (const char *p = hr.body; (p = strstr(p, "data: ")) != NULL;) {
                p += 6;
                const char *end = strstr(p, "\n\n");
                if (strncmp(p, "[DONE]", 6) == 0) break;
                json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
                assert_non_null(ev);
                json_t *pp = json_object_get(ev, "prompt_progress");
                const char *t = k == 0 ? json_string_value(json_object_get(json_object_get(json_array_get(
                                             json_object_get(ev, "choices"), 0), "delta"), "content"))
                                       : json_string_value(json_object_get(ev, "content"));
                if (pp != NULL) {
                    assert_false(text_seen);
                    n_prog++;
                    json_decref(last);
                    last = json_incref(pp);
                }
                if (t != NULL && t[0] != '\0') {
                    text_seen = true;
                    sbuf_append(&text[with], t, strlen(t));
                }
                json_decref(ev);
                p = end;
            }
            http_response_free(&hr);
            if (!with) {
                assert_int_equal(n_prog, 0);
                continue;
            }
            assert_true(n_prog >= 1);
            json_int_t total = json_integer_value(json_object_get(last, "total"));
            assert_true(total > 0);
            assert_int_equal(json_integer_value(json_object_get(last, "processed")), total);
            assert_true(json_is_number(json_object_get(last, "time_ms")));
            assert_true(json_integer_value(json_object_get(last, "cache")) <= total);
            json_decref(last);
        }
        assert_string_equal(text[1].data, text[0].data);
        sbuf_free(&text[0]);
        sbuf_free(&text[1]);
    }
}

static void test_server_native(void **state)
{
    (void)state;
    st_srv s;
    st_real_start(&s);
    check_single(&s);
    check_stops(&s);
    check_prompts(&s);
    check_tools(&s);
    check_progress(&s);
    st_real_stop(&s);
}

ST_MODEL_TEST(test_server_native)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_server_native_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
