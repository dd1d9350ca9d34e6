/* Marker tokens that are control tokens of a vocabulary (Mistral's
 * [TOOL_CALLS], [ARGS], [THINK] and [/THINK]): api_keep_markers picks
 * those the request's reply format parses, and a textgen told to keep
 * them writes them as text, so that the reasoning split and the call
 * parser find them; without it they vanish and the call is lost in the
 * content. The vocabulary is made here (an SPM vocab written with
 * gguf_writer), so the test needs no reference data. */
#define _GNU_SOURCE /* open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "serve/api.h"
#include "serve/reasoning.h"
#include "serve/textgen.h"
#include "serve/tool_calls.h"
#include "text/vocab.h"
#include "vocab_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GGUF token types */
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3 };

static const char *const k_tokens[] = {
    "<unk>", "<s>", "</s>", "[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]", "<think>",
    "\xe2\x96\x81hmm", "Sure", "get_weather", "{\"city\":\"Paris\"}",
};
enum { ID_TOOL_CALLS = 3, ID_ARGS = 4, ID_THINK = 5, ID_END_THINK = 6, ID_TEXT_THINK = 7,
       ID_HMM = 8, ID_SURE = 9, ID_NAME = 10, ID_ARGS_JSON = 11 };
#define N_TOKENS (sizeof(k_tokens) / sizeof(k_tokens[0]))

static vocab *make_vocab(void)
{
    int32_t types[N_TOKENS];
    float scores[N_TOKENS];
    for (size_t i = 0; i < N_TOKENS; i++) {
        types[i] = i == 0 ? T_UNKNOWN : (i <= ID_END_THINK ? T_CONTROL : T_NORMAL);
        scores[i] = -(float)i;
    }
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", NULL), 0);
    assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", N_TOKENS, k_tokens, NULL), 0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, N_TOKENS, scores, NULL), 0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, N_TOKENS, types, NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, NULL), 0);
    vocab *v = NULL;
    assert_int_equal(tu_vocab_from_writer(w, &v, NULL), 0);
    return v;
}

/* The text a reply of ids gets, keeping keep[0..n_keep). */
static char *reply_text(const vocab *v, const int32_t *ids, size_t n, const int32_t *keep, size_t n_keep)
{
    textgen tg;
    strata_err err;
    assert_int_equal(textgen_init(&tg, v, NULL, 0, NULL, 0, &err), 0);
    textgen_keep(&tg, keep, n_keep);
    sbuf out = {0};
    for (size_t i = 0; i < n; i++) assert_int_equal(textgen_push(&tg, ids[i], &out, &err), 0);
    assert_int_equal(textgen_finish(&tg, &out, &err), 0);
    textgen_free(&tg);
    char *s = strdup(out.data ? out.data : "");
    sbuf_free(&out);
    return s;
}

static bool has(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == id) return true;
    }
    return false;
}

static void test_keep_markers(void **state)
{
    (void)state;
    vocab *v = make_vocab();
    /* which markers a request keeps */
    api_gen g = {0};
    int32_t keep[16];
    assert_int_equal(api_keep_markers(v, &g, keep, 16), 0);
    g.reasoning = REASONING_THINK_BRACKET;
    g.tool_calls = true;
    g.tool_fmt = TOOL_FORMAT_MISTRAL;
    size_t n_keep = api_keep_markers(v, &g, keep, 16);
    assert_int_equal(n_keep, 4);
    assert_true(has(keep, n_keep, ID_TOOL_CALLS) && has(keep, n_keep, ID_ARGS) && has(keep, n_keep, ID_THINK) &&
                has(keep, n_keep, ID_END_THINK));
    /* a marker that is a text token needs nothing ("<think>" here) */
    api_gen think = {.reasoning = REASONING_THINK};
    assert_int_equal(api_keep_markers(v, &think, keep, 16), 0);
    /* no room: never more than asked */
    assert_int_equal(api_keep_markers(v, &g, keep, 1), 1);
    n_keep = api_keep_markers(v, &g, keep, 16);

    /* Ministral's reply: reasoning, an answer, a call, all with control markers */
    const int32_t ids[] = {ID_THINK, ID_HMM, ID_END_THINK, ID_SURE, ID_TOOL_CALLS, ID_NAME, ID_ARGS, ID_ARGS_JSON};
    const size_t n = sizeof(ids) / sizeof(ids[0]);
    char *kept = reply_text(v, ids, n, keep, n_keep);
    assert_string_equal(kept, "[THINK]hmm[/THINK]Sure[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\"}");
    reasoning_parts rp;
    assert_int_equal(reasoning_split(REASONING_THINK_BRACKET, false, kept, strlen(kept), true, &rp), 0);
    assert_string_equal(rp.reasoning, "hmm");
    tool_parsed tp;
    assert_int_equal(tool_calls_parse(TOOL_FORMAT_MISTRAL, rp.content, rp.n_content, &tp), 0);
    assert_int_equal(tp.n_calls, 1);
    assert_string_equal(tp.calls[0].name, "get_weather");
    assert_string_equal(tp.calls[0].arguments, "{\"city\":\"Paris\"}");
    assert_string_equal(tp.content, "Sure");
    tool_parsed_free(&tp);
    reasoning_parts_free(&rp);
    free(kept);
    /* without keeping them the markers vanish: no reasoning, no call */
    char *lost = reply_text(v, ids, n, NULL, 0);
    assert_string_equal(lost, "hmmSureget_weather{\"city\":\"Paris\"}");
    assert_int_equal(tool_calls_parse(TOOL_FORMAT_MISTRAL, lost, strlen(lost), &tp), 0);
    assert_int_equal(tp.n_calls, 0);
    tool_parsed_free(&tp);
    free(lost);
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_markers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
