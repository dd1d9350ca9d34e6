/* The HTTP API's statuses for engine failures and the embeddings'
 * `encoding_format`: an engine's `err` or an engine that sends what the
 * server cannot use is the engine's failure (503, worth a retry), never a
 * 500; embeddings come as JSON numbers or, as OpenAI's clients ask by
 * default, base64 of little-endian float32. Also the pieces of requests
 * served by several engine requests (api.h): embeddings inputs, the seeds
 * of `n` choices, the summed figures; and how timings print. System
 * messages for a template that takes none (Gemma 2's raises) join the
 * next user message, as llama-server does; `ignore_eos` as bans of the
 * end-of-generation tokens; vLLM's continue_final_message and
 * add_generation_prompt. */
#define _GNU_SOURCE
#include "http_client.h"
#include "testdata.h"

#include "serve/api.h"
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


/* --- embeddings --- */

static int parse_embedding(const char *body, bool *base64, char *msg, size_t cap)
{
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_EMBEDDING, body, strlen(body), &g, &e) != 0) {
        snprintf(msg, cap, "%s", e.message);
        return e.status;
    }
    *base64 = g.base64;
    api_gen_free(&g);
    return 200;
}

static void test_encoding_format(void **state)
{
    (void)state;
    bool b64 = true;
    char msg[400];
    assert_int_equal(parse_embedding("{\"input\":\"Hi\"}", &b64, msg, sizeof(msg)), 200);
    assert_false(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"float\"}", &b64, msg, sizeof(msg)), 200);
    assert_false(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"base64\"}", &b64, msg, sizeof(msg)), 200);
    assert_true(b64);
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":\"hex\"}", &b64, msg, sizeof(msg)), 400);
    assert_non_null(strstr(msg, "`encoding_format`"));
    assert_int_equal(parse_embedding("{\"input\":\"Hi\",\"encoding_format\":1}", &b64, msg, sizeof(msg)), 400);
    assert_non_null(strstr(msg, "`encoding_format`"));
}

/* An error that quotes the client's bytes still has a JSON body: the JSON
 * parser's message can cut a character in two ("\xe2" of "\xe2\x96\x81"),
 * and a field's name can be any bytes. */
static void test_error_bodies_are_json(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"in\\\xe2\x96\x81\\\\\":[1]}",     /* a bad escape before a 3-byte character */
        "{\"input\":\"Hi\",\"encoding_format\":\"\xff\xfe\"}",
        "{\"input\":[\"a\",\"\"],\"\xc3\":1}",
    };
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 512};
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        api_gen g;
        api_error e;
        assert_int_equal(api_parse_gen(&env, API_EMBEDDING, bodies[i], strlen(bodies[i]), &g, &e), -1);
        assert_int_equal(e.status, 400);
        char *body = api_error_body(&e);
        if (body == NULL) fail_msg("body %zu: no error body for \"%s\"", i, e.message);
        json_error_t je;
        json_t *j = json_loads(body, 0, &je);
        assert_non_null(j);
        assert_true(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
        json_decref(j);
        free(body);
    }
}

static const char *embedding_of(json_t *body)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(body, "data"), 0), "embedding"));
}

static void test_base64_floats(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m"};
    api_result res = {.prompt_tokens = 3};
    /* 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0, 0.5f = 00 00 00 3f (little-endian) */
    const float v[3] = {1.0f, -2.5f, 0.5f};
    api_vec one = {v, 1}, two = {v, 2}, three = {v, 3};
    json_t *j = api_embedding_body(&env, &res, &one, 1, true);
    assert_string_equal(embedding_of(j), "AACAPw==");
    json_decref(j);
    j = api_embedding_body(&env, &res, &two, 1, true);
    assert_string_equal(embedding_of(j), "AACAPwAAIMA=");
    json_decref(j);
    j = api_embedding_body(&env, &res, &three, 1, true);
    assert_string_equal(embedding_of(j), "AACAPwAAIMAAAAA/");
    json_decref(j);
    j = api_embedding_body(&env, &res, &three, 1, false);
    json_t *a = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
    assert_int_equal(json_array_size(a), 3);
    assert_true(json_real_value(json_array_get(a, 1)) == -2.5);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 3);
    json_decref(j);
}

/* Timings print rounded to 3 decimals; float32 values (logprobs,
 * embeddings) still print exactly enough to give back the same float. */
static void test_timings_print_short(void **state)
{
    (void)state;
    api_result res = {.queue_ms = 0.029763999999999999, .ttft_ms = 115.91849999,
                      .stats = {.prompt_n = 5, .prompt_ms = 108.0004, .predicted_n = 3,
                                .predicted_ms = 7.0},
                      .replica = 1, .route_cached_n = 64};
    json_t *t = api_timings(&res);
    char *s = api_dumps(t);
    assert_string_equal(s, "{\"queue_ms\":0.03,\"prompt_n\":5,\"cached_n\":0,\"prompt_ms\":108.0,"
                           "\"ttft_ms\":115.918,\"predicted_n\":3,\"predicted_ms\":7.0,"
                           "\"predicted_per_second\":428.571,\"replica\":1,\"route_cached_n\":64,"
                           "\"draft_n\":0,\"draft_n_accepted\":0}");
    free(s);
    json_decref(t);
    const float xs[] = {-0.1f, 1e-8f, -12.3456789f, 3.40282347e38f, 1.17549435e-38f};
    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
        json_t *a = json_pack("[f]", (double)xs[i]);
        char *d = api_dumps(a);
        json_t *back = json_loads(d, 0, NULL);
        assert_true((float)json_real_value(json_array_get(back, 0)) == xs[i]);
        assert_true(strlen(d) <= 2 + 16);
        json_decref(back);
        free(d);
        json_decref(a);
    }
}

static int parse_inputs(const char *body, api_gen *g, char *msg, size_t cap)
{
    api_env env = {.voc = g_voc, .model_name = "stories260K", .n_ctx = 8};
    api_error e;
    if (api_parse_gen(&env, API_EMBEDDING, body, strlen(body), g, &e) != 0) {
        snprintf(msg, cap, "%s", e.message);
        return e.status;
    }
    return 200;
}

static void test_embedding_input_forms(void **state)
{
    (void)state;
    api_gen g;
    char msg[400];
    assert_int_equal(parse_inputs("{\"input\":[3,4,5]}", &g, msg, sizeof(msg)), 200);
    assert_int_equal(g.n_inputs, 1);
    assert_int_equal(g.inputs[0].n, 3);
    assert_int_equal(g.inputs[0].ids[2], 5);
    api_gen_free(&g);
    assert_int_equal(parse_inputs("{\"input\":[[3],[4,5],[6,7,8,9,10,11,12,13]]}", &g, msg, sizeof(msg)), 200);
    assert_int_equal(g.n_inputs, 3);
    assert_int_equal(g.inputs[1].n, 2);
    assert_int_equal(g.inputs[2].n, 8); /* the whole context: an embedding may fill it */
    assert_int_equal(g.inputs[2].ids[7], 13);
    /* each copied into its own engine request, in order */
    sreq *r = sreq_new(1, true);
    assert_int_equal(api_gen_copy_to(&g, 1, r), 0);
    assert_int_equal(r->emb.n_tokens, 2);
    assert_int_equal(r->emb.tokens[0], 4);
    assert_true(r->emb.tokens != g.inputs[1].ids);
    sreq_release(r);
    api_gen_free(&g);
    assert_int_equal(parse_inputs("{\"input\":[\"Hi\",\"Once\",\"a\"]}", &g, msg, sizeof(msg)), 200);
    assert_int_equal(g.n_inputs, 3);
    assert_int_equal(g.inputs[0].ids[0], 1); /* BOS */
    api_gen_free(&g);
    assert_int_equal(parse_inputs("{\"input\":[[3],[4,5,6,7,8,9,10,11,12]]}", &g, msg, sizeof(msg)), 400);
    assert_string_equal(msg, "`input[1]` has 9 tokens; the context holds 8");
    assert_int_equal(parse_inputs("{\"input\":[[3],[4,\"5\"]]}", &g, msg, sizeof(msg)), 400);
    assert_non_null(strstr(msg, "`input[1][1]`"));
}

/* Choice i samples with seed + i (wrapping in [0, 2^63)), each with its own
 * copy of the prompt and bias; without a seed none is set (the engine then
 * draws one per request). */
/* The chat prompt of body under template tmpl (token ids, malloc'd), or
 * NULL with the error's message in msg. */
static int32_t *chat_prompt(const char *tmpl, const char *body, size_t *n, char *msg, size_t cap)
{
    /* as a server sets it up: the template asked once whether it takes system messages */
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 4096, .chat_template = tmpl,
                   .bos = "<bos>", .eos = "<eos>",
                   .merge_system = !api_template_takes_system(tmpl, "<bos>", "<eos>")};
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_CHAT, body, strlen(body), &g, &e) != 0) {
        snprintf(msg, cap, "%s", e.message);
        return NULL;
    }
    int32_t *ids = malloc(g.n_prompt * sizeof(int32_t));
    assert_non_null(ids);
    memcpy(ids, g.prompt, g.n_prompt * sizeof(int32_t));
    *n = g.n_prompt;
    api_gen_free(&g);
    return ids;
}

static void assert_same_prompt(const char *tmpl, const char *a, const char *b, bool same)
{
    char msg[512] = "";
    size_t na = 0, nb = 0;
    int32_t *pa = chat_prompt(tmpl, a, &na, msg, sizeof(msg));
    if (pa == NULL) fail_msg("%s: %s", a, msg);
    int32_t *pb = chat_prompt(tmpl, b, &nb, msg, sizeof(msg));
    if (pb == NULL) fail_msg("%s: %s", b, msg);
    bool eq = na == nb && memcmp(pa, pb, na * sizeof(int32_t)) == 0;
    if (eq != same) fail_msg("%s and %s: prompts %s", a, b, eq ? "equal" : "differ");
    free(pa);
    free(pb);
}

static void test_system_messages_merged(void **state)
{
    (void)state;
    char path[4096];
    if (testdata_path(path, sizeof(path), "chat-templates/llama.cpp-jinja/google-gemma-2-2b-it.jinja") == NULL) {
        print_message("skipped: chat templates missing\n");
        skip();
    }
    size_t n;
    char *raw = testdata_read_file(path, &n);
    assert_non_null(raw);
    char *gemma = strndup(raw, n);
    free(raw);
    assert_false(api_template_takes_system(gemma, "<bos>", "<eos>"));
    assert_true(api_template_takes_system(NULL, "<bos>", "<eos>"));
#define U(c) "{\"role\":\"user\",\"content\":\"" c "\"}"
#define S(c) "{\"role\":\"system\",\"content\":\"" c "\"}"
#define A(c) "{\"role\":\"assistant\",\"content\":\"" c "\"}"
    /* the system text goes before the first user message's, by "\n" */
    assert_same_prompt(gemma, "{\"messages\":[" S("Be brief.") "," U("Hi") "]}",
                       "{\"messages\":[" U("Be brief.\\nHi") "]}", true);
    /* two system messages join; a later one joins the next user turn */
    assert_same_prompt(gemma,
                       "{\"messages\":[" S("A") "," S("B") "," U("Hi") "," A("Yo") "," S("C") "," U("Q") "]}",
                       "{\"messages\":[" U("A\\nB\\nHi") "," A("Yo") "," U("C\\nQ") "]}", true);
    /* without system messages nothing changes; the model's own prompt
     * differs from the merged one where the template takes system
     * messages (ChatML) */
    assert_same_prompt(gemma, "{\"messages\":[" U("Hi") "]}", "{\"messages\":[" U("Hi") "]}", true);
    assert_same_prompt(NULL, "{\"messages\":[" S("Be brief.") "," U("Hi") "]}",
                       "{\"messages\":[" U("Be brief.\\nHi") "]}", false);
#undef U
#undef S
#undef A
    free(gemma);
}

/* The prompt of completion text (the reference for a chat prompt). */
static int32_t *text_prompt(const char *text, size_t *n)
{
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 4096, .bos = "<bos>", .eos = "<eos>"};
    json_t *b = json_pack("{s:s}", "prompt", text);
    char *body = json_dumps(b, 0);
    json_decref(b);
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e) != 0) fail_msg("%s", e.message);
    free(body);
    int32_t *ids = malloc(g.n_prompt * sizeof(int32_t));
    assert_non_null(ids);
    memcpy(ids, g.prompt, g.n_prompt * sizeof(int32_t));
    *n = g.n_prompt;
    api_gen_free(&g);
    return ids;
}

static void assert_prompt_is(const char *tmpl, const char *body, const char *text)
{
    char msg[512] = "";
    size_t na = 0, nb = 0;
    int32_t *pa = chat_prompt(tmpl, body, &na, msg, sizeof(msg));
    if (pa == NULL) fail_msg("%s: %s", body, msg);
    int32_t *pb = text_prompt(text, &nb);
    if (na != nb || memcmp(pa, pb, na * sizeof(int32_t)) != 0) fail_msg("%s: not the prompt of \"%s\"", body, text);
    free(pa);
    free(pb);
}

/* vLLM's continue_final_message (the reply continues the final message,
 * cut as Hugging Face cuts it) and add_generation_prompt */
static void test_continue_final_message(void **state)
{
    (void)state;
    const char *keep = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>\n{% endfor %}"
                       "{% if add_generation_prompt %}<assistant>{% endif %}";
    const char *trim = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>\n{% endfor %}"
                       "{% if add_generation_prompt %}<assistant>{% endif %}";
    const char *upper = "{% for m in messages %}<{{ m.role }}>{{ m.content | upper }}</{{ m.role }}>\n{% endfor %}";
#define TURNS(last) "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"" last "\"}]"
    assert_prompt_is(keep, TURNS("The answer is") ",\"continue_final_message\":true}",
                     "<user>Hi</user>\n<assistant>The answer is");
    assert_prompt_is(keep, TURNS("The answer is") ",\"continue_final_message\":true,\"add_generation_prompt\":false}",
                     "<user>Hi</user>\n<assistant>The answer is");
    /* trailing blanks stay where the template kept them... */
    assert_prompt_is(keep, TURNS("The answer is ") ",\"continue_final_message\":true}",
                     "<user>Hi</user>\n<assistant>The answer is ");
    /* ...and the cut is after the text where it trimmed them */
    assert_prompt_is(trim, TURNS("  The answer is  ") ",\"continue_final_message\":true}",
                     "<user>Hi</user>\n<assistant>The answer is");
    /* the last occurrence of the text is the final message's */
    assert_prompt_is(keep, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
                           "\"content\":\"Hi\"}],\"continue_final_message\":true}",
                     "<user>Hi</user>\n<assistant>Hi");
    /* add_generation_prompt false alone: no assistant header */
    assert_prompt_is(keep, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"add_generation_prompt\":false}",
                     "<user>Hi</user>\n");
    assert_prompt_is(keep, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", "<user>Hi</user>\n<assistant>");
    char msg[512] = "";
    size_t n = 0;
    assert_null(chat_prompt(upper, TURNS("abc") ",\"continue_final_message\":true}", &n, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "`continue_final_message`: the final message does not appear"));
    assert_null(chat_prompt(keep, TURNS("abc") ",\"continue_final_message\":true,\"add_generation_prompt\":true}",
                            &n, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "cannot both be true"));
    assert_null(chat_prompt(keep, TURNS("abc") ",\"continue_final_message\":1}", &n, msg, sizeof(msg)));
    assert_non_null(strstr(msg, "`continue_final_message`"));
#undef TURNS
}

static void test_choices_seeds(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 64};
    api_gen g;
    api_error e;
    const char *body = "{\"prompt\":[1,2,3],\"n\":3,\"seed\":9223372036854775806,"
                       "\"logit_bias\":{\"7\":2},\"max_tokens\":5}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    assert_int_equal(g.n_choices, 3);
    uint64_t want[3] = {9223372036854775806ULL, 9223372036854775807ULL, 0};
    for (size_t i = 0; i < 3; i++) {
        sreq *r = sreq_new(1, false);
        assert_int_equal(api_gen_copy_to(&g, i, r), 0);
        assert_true(r->gen.sampling.has_seed);
        assert_true(r->gen.sampling.seed == want[i]);
        assert_int_equal(r->gen.n_tokens, 3);
        assert_int_equal(r->gen.max_tokens, 5);
        assert_int_equal(r->gen.sampling.n_logit_bias, 1);
        assert_true(r->gen.sampling.logit_bias != g.sampling.logit_bias);
        sreq_release(r);
    }
    api_gen_free(&g);
    body = "{\"prompt\":[1,2,3],\"n\":2}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    sreq *r = sreq_new(1, false);
    assert_int_equal(api_gen_copy_to(&g, 1, r), 0);
    assert_false(r->gen.sampling.has_seed);
    sreq_release(r);
    api_gen_free(&g);
}

/* ignore_eos bans every end-of-generation token, over any bias the
 * request gives one, and leaves the other biases. */
static void test_ignore_eos(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 64};
    api_gen g;
    api_error e;
    size_t n_eog = 0;
    int32_t eog = -1;
    for (int32_t t = 0; t < vocab_n_tokens(g_voc); t++) {
        if (vocab_is_eog(g_voc, t)) {
            n_eog++;
            eog = t;
        }
    }
    assert_true(n_eog >= 1);
    char body[256];
    snprintf(body, sizeof(body), "{\"prompt\":[1,2],\"logit_bias\":{\"%d\":100,\"7\":2},\"ignore_eos\":true}", eog);
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    assert_int_equal(g.sampling.n_logit_bias, 1 + n_eog);
    size_t banned = 0;
    for (size_t i = 0; i < g.sampling.n_logit_bias; i++) {
        const proto_bias *b = &g.sampling.logit_bias[i];
        if (b->token == 7) {
            assert_true(b->bias == 2.0f);
        } else {
            assert_true(vocab_is_eog(g_voc, b->token));
            assert_true(isinf(b->bias) && b->bias < 0);
            banned++;
        }
    }
    assert_int_equal(banned, n_eog);
    api_gen_free(&g);
    snprintf(body, sizeof(body), "{\"prompt\":[1,2],\"logit_bias\":{\"%d\":100},\"ignore_eos\":false}", eog);
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    assert_int_equal(g.sampling.n_logit_bias, 1);
    assert_true(g.sampling.logit_bias[0].bias == 100.0f);
    api_gen_free(&g);
    const char *bad = "{\"prompt\":[1,2],\"ignore_eos\":1}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, bad, strlen(bad), &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "`ignore_eos`"));
    /* llama-server's pairs: an id, or a text (each of its tokens), with a
     * bias or false (banned); on /completion and the OpenAI endpoints */
    int32_t once[8];
    size_t n_once = 0;
    assert_int_equal(tok_tokenize(g_voc, "Once upon", 9, false, false, once, 8, &n_once, NULL), 0);
    assert_true(n_once == 2);
    const char *pairs = "{\"prompt\":[1,2],\"logit_bias\":[[7,2],[\"Once upon\",false],[9,-1.5]]}";
    for (int k = 0; k < 2; k++) {
        assert_int_equal(api_parse_gen(&env, k ? API_NATIVE : API_COMPLETION, pairs, strlen(pairs), &g, &e), 0);
        assert_int_equal(g.sampling.n_logit_bias, 4);
        assert_int_equal(g.sampling.logit_bias[0].token, 7);
        assert_true(g.sampling.logit_bias[0].bias == 2.0f);
        for (size_t i = 0; i < 2; i++) {
            assert_int_equal(g.sampling.logit_bias[1 + i].token, once[i]);
            assert_true(isinf(g.sampling.logit_bias[1 + i].bias) && g.sampling.logit_bias[1 + i].bias < 0);
        }
        assert_true(g.sampling.logit_bias[3].bias == -1.5f);
        api_gen_free(&g);
    }
    const char *bad_pairs[] = {"[[7]]", "[[7,\"x\"]]", "[[-1,1]]", "[[7,101]]", "[7]", "\"x\"", "[[7,true]]"};
    for (size_t i = 0; i < sizeof(bad_pairs) / sizeof(bad_pairs[0]); i++) {
        snprintf(body, sizeof(body), "{\"prompt\":[1,2],\"logit_bias\":%s}", bad_pairs[i]);
        assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), -1);
        assert_int_equal(e.status, 400);
        assert_non_null(strstr(e.message, "`logit_bias"));
    }
}

/* llama-server's repeat_last_n: the penalties' window (-1: the context);
 * penalty_last_n, which it does not read, only while no penalty is set;
 * vLLM's repetition_penalty, over the whole sequence */
/* body is a 400 whose message holds needle. */
static void assert_refused(const api_env *env, enum api_kind kind, const char *body, const char *needle)
{
    api_gen g;
    api_error e;
    if (api_parse_gen(env, kind, body, strlen(body), &g, &e) == 0) {
        api_gen_free(&g);
        fail_msg("%s was accepted", body);
    }
    assert_int_equal(e.status, 400);
    if (strstr(e.message, needle) == NULL) fail_msg("%s: \"%s\" lacks %s", body, e.message, needle);
}

/* llama-server's `samplers`: the stages named run (names, aliases,
 * letters; unknown ones skipped), the others are off; only llama.cpp's
 * default order is taken; with Mirostat the list does not matter. */
static void test_samplers(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 64};
    api_gen g;
    api_error e;
    const char *base = "\"prompt\":[1,2],\"temperature\":0,\"top_k\":7,\"top_p\":0.5,\"min_p\":0.2,"
                       "\"typical_p\":0.9,\"repeat_penalty\":1.3,\"presence_penalty\":0.5,"
                       "\"dry_multiplier\":0.8,\"xtc_probability\":0.5,\"top_n_sigma\":1.5";
    const char *all[] = {"[\"penalties\",\"dry\",\"top_n_sigma\",\"top_k\",\"typ_p\",\"top_p\",\"min_p\",\"xtc\","
                         "\"temperature\"]",
                         "\"edskypmxt\"",
                         "[\"PENALTIES\",\"dry\",\"top-n-sigma\",\"topk\",\"typ\",\"nucleus\",\"min-p\",\"xtc\","
                         "\"tfs_z\",\"temp\"]"};
    char body[1024];
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
            snprintf(body, sizeof(body), "{%s,\"samplers\":%s}", base, all[i]);
            assert_int_equal(api_parse_gen(&env, k ? API_NATIVE : API_COMPLETION, body, strlen(body), &g, &e), 0);
            const proto_sampling *p = &g.sampling;
            assert_true(p->temperature == 0.0f && p->top_k == 7 && p->top_p == 0.5f && p->min_p == 0.2f &&
                        p->typical_p == 0.9f && p->repeat_penalty == 1.3f && p->presence_penalty == 0.5f &&
                        p->dry_multiplier == 0.8f && p->xtc_probability == 0.5f && p->top_n_sigma == 1.5f);
            api_gen_free(&g);
        }
    }
    /* a subset: the rest off; no temperature: a draw at temperature 1 */
    snprintf(body, sizeof(body), "{%s,\"samplers\":[\"top_k\",\"min_p\"]}", base);
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    const proto_sampling *p = &g.sampling;
    assert_true(p->top_k == 7 && p->min_p == 0.2f);
    assert_true(p->top_p == 1.0f && p->typical_p == 1.0f && p->repeat_penalty == 1.0f &&
                p->presence_penalty == 0.0f && p->dry_multiplier == 0.0f && p->xtc_probability == 0.0f &&
                p->top_n_sigma <= 0.0f && p->temperature == 1.0f);
    api_gen_free(&g);
    snprintf(body, sizeof(body), "{%s,\"samplers\":\"\"}", base);
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    assert_true(g.sampling.top_k == 0 && g.sampling.temperature == 1.0f);
    api_gen_free(&g);
    /* Mirostat's chain does not read it */
    snprintf(body, sizeof(body), "{%s,\"mirostat\":2,\"samplers\":[\"top_k\"]}", base);
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, body, strlen(body), &g, &e), 0);
    assert_true(g.sampling.temperature == 0.0f && g.sampling.top_p == 0.5f);
    api_gen_free(&g);
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":[\"temperature\",\"top_k\"]}", "order");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":\"kk\"}", "order");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":[\"infill\"]}", "infill");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":\"ka\"}", "adaptive_p");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":[1]}", "`samplers[0]`");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1],\"samplers\":{}}", "`samplers`");
}

static void test_repeat_last_n(void **state)
{
    (void)state;
    api_env env = {.voc = g_voc, .model_name = "m", .n_ctx = 64};
    api_gen g;
    api_error e;
    static const struct {
        const char *body;
        int status;
        int32_t last_n;
    } cases[] = {
        {"{\"prompt\":[1,2]}", 0, 64},
        {"{\"prompt\":[1,2],\"repeat_last_n\":16,\"repeat_penalty\":1.1}", 0, 16},
        {"{\"prompt\":[1,2],\"repeat_last_n\":0}", 0, 0},
        {"{\"prompt\":[1,2],\"repeat_last_n\":-1}", 0, 64},
        {"{\"prompt\":[1,2],\"repeat_last_n\":-2}", 400, 0},
        {"{\"prompt\":[1,2],\"repeat_last_n\":1.5}", 400, 0},
        {"{\"prompt\":[1,2],\"penalty_last_n\":16}", 0, 64},
        {"{\"prompt\":[1,2],\"penalty_last_n\":16,\"repeat_penalty\":1.1}", 400, 0},
        /* vLLM's repetition_penalty: the repeat penalty over the whole sequence */
        {"{\"prompt\":[1,2],\"repetition_penalty\":1.2}", 0, 64 /* n_ctx */},
        {"{\"prompt\":[1,2],\"repetition_penalty\":1.2,\"repeat_last_n\":8}", 0, 8},
        {"{\"prompt\":[1,2],\"repetition_penalty\":1}", 0, 64},
        {"{\"prompt\":[1,2],\"repetition_penalty\":1.2,\"repeat_penalty\":1.1}", 400, 0},
        {"{\"prompt\":[1,2],\"repetition_penalty\":0}", 400, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = api_parse_gen(&env, API_COMPLETION, cases[i].body, strlen(cases[i].body), &g, &e);
        if (cases[i].status == 0) {
            if (rc != 0) fail_msg("%s: %s", cases[i].body, e.message);
            assert_int_equal(g.sampling.penalty_last_n, cases[i].last_n);
            if (strstr(cases[i].body, "\"repetition_penalty\":1.2") != NULL) {
                assert_true(g.sampling.repeat_penalty == 1.2f);
            }
            api_gen_free(&g);
        } else {
            if (rc == 0) fail_msg("%s was accepted", cases[i].body);
            assert_int_equal(e.status, cases[i].status);
        }
    }
    /* llama-server's top_n_sigma, XTC and dynamic temperature reach the engine */
    const char *b = "{\"prompt\":[1,2],\"top_n_sigma\":1.5,\"xtc_probability\":0.25,\"xtc_threshold\":0.125,"
                    "\"dynatemp_range\":0.75,\"dynatemp_exponent\":2}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    assert_true(g.sampling.top_n_sigma == 1.5f && g.sampling.xtc_probability == 0.25f);
    assert_true(g.sampling.xtc_threshold == 0.125f && g.sampling.dynatemp_range == 0.75f);
    assert_true(g.sampling.dynatemp_exponent == 2.0f);
    api_gen_free(&g);
    b = "{\"prompt\":[1,2],\"mirostat\":2,\"mirostat_tau\":3.5,\"mirostat_eta\":0.25}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    assert_true(g.sampling.mirostat == 2 && g.sampling.mirostat_tau == 3.5f && g.sampling.mirostat_eta == 0.25f);
    api_gen_free(&g);
    /* DRY: the fields, -1 as the context, the breakers (llama.cpp's four
     * by default; long ones cut to 40 bytes at a character) */
    b = "{\"prompt\":[1,2],\"dry_multiplier\":0.8}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    assert_true(g.sampling.dry_multiplier == 0.8f && g.sampling.dry_base == 1.75f);
    assert_int_equal(g.sampling.dry_allowed_length, 2);
    assert_int_equal(g.sampling.n_dry_breakers, 4);
    assert_string_equal(g.sampling.dry_breakers[0], "\n");
    api_gen_free(&g);
    b = "{\"prompt\":[1,2],\"dry_multiplier\":0.8,\"dry_penalty_last_n\":-1,\"dry_allowed_length\":1,"
        "\"dry_sequence_breakers\":[\"ab\",\"0123456789012345678901234567890123456789\u00e9\u00e9\"]}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    assert_int_equal(g.sampling.dry_penalty_last_n, 64);
    assert_int_equal(g.sampling.dry_allowed_length, 1);
    assert_int_equal(g.sampling.n_dry_breakers, 2);
    assert_int_equal(strlen(g.sampling.dry_breakers[1]), 40);
    api_gen_free(&g);
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"dry_sequence_breakers\":[\"\"]}", "`dry_sequence_breakers[0]`");
    /* vLLM's truncate_prompt_tokens: the last k tokens; -1 whatever fits */
    b = "{\"prompt\":[1,2,3,4,5,6],\"truncate_prompt_tokens\":4}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    assert_int_equal(g.n_prompt, 4);
    assert_int_equal(g.prompt[0], 3);
    api_gen_free(&g);
    char longp[1024];
    size_t k = (size_t)snprintf(longp, sizeof(longp), "{\"prompt\":[1");
    for (int i = 0; i < 99; i++) k += (size_t)snprintf(longp + k, sizeof(longp) - k, ",%d", 3 + i % 50);
    snprintf(longp + k, sizeof(longp) - k, "],\"truncate_prompt_tokens\":-1}");
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, longp, strlen(longp), &g, &e), 0);
    assert_int_equal(g.n_prompt, 63); /* n_ctx 64, one token of room */
    assert_int_equal(g.max_tokens, 1);
    api_gen_free(&g);
    b = "{\"input\":[[1,2,3,4,5],[6,7]],\"truncate_prompt_tokens\":3}";
    assert_int_equal(api_parse_gen(&env, API_EMBEDDING, b, strlen(b), &g, &e), 0);
    assert_int_equal(g.inputs[0].n, 3);
    assert_int_equal(g.inputs[0].ids[0], 3);
    assert_int_equal(g.inputs[1].n, 2);
    api_gen_free(&g);
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"truncate_prompt_tokens\":0}", "`truncate_prompt_tokens`");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"mirostat\":3}", "`mirostat`");
    /* vLLM's min_tokens reaches the engine; never over max_tokens */
    b = "{\"prompt\":[1,2],\"min_tokens\":4,\"max_tokens\":9}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    sreq *r = sreq_new(1, false);
    assert_int_equal(api_gen_copy_to(&g, 0, r), 0);
    assert_int_equal(r->gen.min_tokens, 4);
    sreq_release(r);
    api_gen_free(&g);
    /* vLLM's allowed_token_ids reach the engine */
    b = "{\"prompt\":[1,2],\"allowed_token_ids\":[5,6,7]}";
    assert_int_equal(api_parse_gen(&env, API_COMPLETION, b, strlen(b), &g, &e), 0);
    r = sreq_new(1, false);
    assert_int_equal(api_gen_copy_to(&g, 0, r), 0);
    assert_int_equal(r->gen.n_allowed_tokens, 3);
    assert_int_equal(r->gen.allowed_tokens[2], 7);
    sreq_release(r);
    api_gen_free(&g);
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"allowed_token_ids\":[]}", "`allowed_token_ids`");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"min_tokens\":10,\"max_tokens\":9}", "`min_tokens`");
    assert_refused(&env, API_COMPLETION, "{\"prompt\":[1,2],\"xtc_probability\":1.5}", "`xtc_probability`");
}

static void test_result_sum(void **state)
{
    (void)state;
    api_result rs[3] = {
        {.finish_reason = "stop", .prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2,
         .queue_ms = 1.0, .ttft_ms = 4.0, .replica = 0,
         .stats = {.prompt_n = 5, .cached_n = 2, .predicted_n = 3, .prompt_ms = 1.5, .predicted_ms = 2.0}},
        {.finish_reason = "length", .prompt_tokens = 5, .completion_tokens = 7, .cached_tokens = 5,
         .queue_ms = 3.0, .ttft_ms = 2.0, .replica = 0,
         .stats = {.prompt_n = 5, .cached_n = 5, .predicted_n = 7, .prompt_ms = 0.5, .predicted_ms = 3.0}},
        {.finish_reason = "stop", .prompt_tokens = 5, .completion_tokens = 1, .queue_ms = 2.0,
         .ttft_ms = 0.0, .replica = 1, .stats = {.prompt_n = 5, .predicted_n = 1}},
    };
    api_result t;
    api_result_sum(rs, 3, 3, &t);
    assert_int_equal(t.prompt_tokens, 5);
    assert_int_equal(t.cached_tokens, 2);
    assert_int_equal(t.completion_tokens, 11);
    assert_int_equal(t.stats.prompt_n, 15);
    assert_int_equal(t.stats.predicted_n, 11);
    assert_true(t.stats.prompt_ms == 2.0 && t.stats.predicted_ms == 5.0);
    assert_true(t.queue_ms == 3.0 && t.ttft_ms == 2.0);
    assert_int_equal(t.replica, -1);
    assert_string_equal(t.finish_reason, "stop");
    api_result_sum(rs, 2, 1, &t);
    assert_int_equal(t.prompt_tokens, 10);
    assert_int_equal(t.cached_tokens, 7);
    assert_int_equal(t.replica, 0);    /* two prompts of 2 choices each, the second's first alone: results 0
     * and 2 count their prompts */
    api_result_sum(rs, 3, 2, &t);
    assert_int_equal(t.prompt_tokens, 10);
    assert_int_equal(t.cached_tokens, 2);
    assert_int_equal(t.completion_tokens, 11);
}

static char g_log[512];

/* `strata serve` with the fake engine, 1 replica x 2 slots; returns its port. */
static int srv_start(void)
{
    const char *dir = testdata_scratch_dir();
    char port_file[512];
    snprintf(port_file, sizeof(port_file), "%s/port-%d", dir, (int)getpid());
    snprintf(g_log, sizeof(g_log), "%s/serve.log", dir);
    const char *argv[] = {STRATA_BIN, "serve", "-m", g_model, "--engine", st_fake_engine_path(),
                          "--replicas", "1", "--slots", "2", "--port", "0", "--port-file",
                          port_file, NULL};
    return st_spawn(argv, port_file, g_log, 1);
}

static void srv_stop(void)
{
    st_stop(g_live_pid, g_log);
}

/* The fake's script (fake_engine.c) as a prompt of token ids. */
static void script(char *out, size_t cap, int op, int k, int n, int delay, int arg, const char *more)
{
    int v[4] = {k, n, delay, arg};
    int len = snprintf(out, cap, "{\"prompt\":[%d", 35 + op);
    for (int i = 0; i < 4; i++) {
        len += snprintf(out + len, cap - (size_t)len, ",%d,%d", 35 + v[i] / 90, 35 + v[i] % 90);
    }
    snprintf(out + len, cap - (size_t)len, "]%s%s}", more ? "," : "", more ? more : "");
}

static void expect_error(int port, const char *body, int status, const char *code)
{
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, status);
    if (status == 503) assert_non_null(strcasestr(hr.headers, "Retry-After:"));
    json_t *j = json_loads(hr.body, 0, NULL);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    assert_string_equal(json_string_value(json_object_get(e, "type")), "server_error");
    json_decref(j);
    http_response_free(&hr);
}

static void test_engine_failures_are_503(void **state)
{
    (void)state;
    int port = srv_start();
    char body[256];
    script(body, sizeof(body), 1 /* ERR */, 7, 0, 0, 2, NULL);
    expect_error(port, body, 503, "internal");
    script(body, sizeof(body), 5 /* BAD_TOKEN */, 8, 0, 5, 50, NULL);
    expect_error(port, body, 503, "bad_engine_output");
    /* streamed: the tokens, then an error event with the same code */
    script(body, sizeof(body), 1, 9, 0, 0, 2, "\"stream\":true");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    assert_non_null(strstr(hr.body, "data: {\"error\":"));
    assert_non_null(strstr(hr.body, "\"code\":\"internal\""));
    http_response_free(&hr);
    /* and the engine serves on */
    script(body, sizeof(body), 0 /* NORMAL */, 10, 3, 0, 0, NULL);
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    http_response_free(&hr);
    srv_stop();
}

static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[128];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL) n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

/* Polls until path has n lines starting with prefix (bounded: ~10 s). */
static void wait_lines(const char *path, const char *prefix, int n)
{
    for (int i = 0; i < 200 && count_lines(path, prefix) < n; i++) usleep(50 * 1000);
    assert_int_equal(count_lines(path, prefix), n);
}

/* The choices of one request fail together (one failure fails the request)
 * and a client that leaves cancels every one: those running get `stop`,
 * the one still queued is dropped, and the slots are free again. */
static void test_choices_fail_and_cancel_together(void **state)
{
    (void)state;
    char log[600];
    snprintf(log, sizeof(log), "%s/fake-choices-%d.log", testdata_scratch_dir(), (int)getpid());
    setenv("FAKE_ENGINE_LOG", log, 1);
    int port = srv_start();
    unsetenv("FAKE_ENGINE_LOG");
    char body[256];
    script(body, sizeof(body), 1 /* ERR */, 21, 0, 0, 2, "\"n\":2");
    expect_error(port, body, 503, "internal");
    script(body, sizeof(body), 1, 22, 0, 0, 2, "\"n\":2,\"stream\":true");
    http_response hr;
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    assert_non_null(strstr(hr.body, "data: {\"error\":"));
    assert_non_null(strstr(hr.body, "\"code\":\"internal\""));
    assert_null(strstr(hr.body, "\"finish_reason\":\"")); /* no choice ends well */
    assert_non_null(strstr(hr.body, "data: [DONE]"));
    http_response_free(&hr);
    /* 3 silent choices on 2 slots; the client leaves */
    script(body, sizeof(body), 4 /* SILENT */, 23, 0, 0, 0, "\"n\":3");
    int fd = http_connect(port, 30);
    assert_true(fd >= 0);
    assert_int_equal(http_send_request(fd, "POST", "/v1/completions", body, NULL), 0);
    wait_lines(log, "gen 23", 2);
    close(fd);
    wait_lines(log, "stop 23", 2);
    usleep(200 * 1000);
    assert_int_equal(count_lines(log, "gen 23"), 2); /* the queued one never started */
    /* the slots are free: two choices at once */
    script(body, sizeof(body), 0 /* NORMAL */, 24, 3, 0, 0, "\"n\":2");
    assert_int_equal(http_do(port, "POST", "/v1/completions", body, NULL, &hr), 0);
    assert_int_equal(hr.status, 200);
    json_t *j = json_loads(hr.body, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "choices")), 2);
    json_decref(j);
    http_response_free(&hr);
    srv_stop();
}

ST_MODEL_TEST(test_encoding_format)
ST_MODEL_TEST(test_error_bodies_are_json)
ST_MODEL_TEST(test_base64_floats)
ST_MODEL_TEST(test_engine_failures_are_503)
ST_MODEL_TEST(test_timings_print_short)
ST_MODEL_TEST(test_embedding_input_forms)
ST_MODEL_TEST(test_choices_seeds)
ST_MODEL_TEST(test_samplers)
ST_MODEL_TEST(test_repeat_last_n)
ST_MODEL_TEST(test_continue_final_message)
ST_MODEL_TEST(test_ignore_eos)
ST_MODEL_TEST(test_system_messages_merged)
ST_MODEL_TEST(test_result_sum)
ST_MODEL_TEST(test_choices_fail_and_cancel_together)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoding_format_guard),
        cmocka_unit_test(test_error_bodies_are_json_guard),
        cmocka_unit_test(test_base64_floats_guard),
        cmocka_unit_test_teardown(test_engine_failures_are_503_guard, st_kill_leftover),
        cmocka_unit_test(test_timings_print_short_guard),
        cmocka_unit_test(test_embedding_input_forms_guard),
        cmocka_unit_test(test_choices_seeds_guard),
        cmocka_unit_test(test_samplers_guard),
        cmocka_unit_test(test_repeat_last_n_guard),
        cmocka_unit_test(test_continue_final_message_guard),
        cmocka_unit_test(test_ignore_eos_guard),
        cmocka_unit_test(test_system_messages_merged_guard),
        cmocka_unit_test(test_result_sum_guard),
        cmocka_unit_test_teardown(test_choices_fail_and_cancel_together_guard, st_kill_leftover),
    };
    return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
