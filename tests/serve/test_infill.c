/* llama-server's /infill in the API layer: the fill-in-the-middle tokens a
 * vocabulary has (metadata, else their usual texts), and the prompt built
 * from input_prefix, input_suffix, input_extra and prompt in llama-server's
 * order and budgets, checked against a sequence assembled here from the
 * parts' own tokenizations, on real code-model vocabularies: StarCoder
 * (FIM tokens, no repository token), Refact (a repository token, no file
 * separator), DeepSeek Coder (BOS, its own FIM names, neither) and one
 * without FIM tokens (Llama's SPM: 501). On tiny random-weight models
 * with these vocabularies, llama-server built the same prompts and
 * generated the same tokens (checked by hand, README). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "serve/api.h"
#include "testdata.h"
#include "text/tokenizer.h"
#include "text/vocab.h"
#include "vocab_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vocab *open_vocab(const char *name)
{
    char rel[128], path[4096];
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", name);
    TESTDATA_FILE(path, rel);
    vocab *v = NULL;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s: %s", rel, err.msg);
    return v;
}

static int32_t id_of(const vocab *v, const char *text)
{
    return vocab_find(v, text, strlen(text));
}

static void test_fim_tokens(void **state)
{
    (void)state;
    vocab *v = open_vocab("starcoder");
    const vocab_special *sp = vocab_specials(v);
    assert_int_equal(sp->fim_pre, 1);
    assert_int_equal(sp->fim_mid, 2);
    assert_int_equal(sp->fim_suf, 3);
    assert_int_equal(sp->fim_pad, 4);
    assert_int_equal(sp->fim_rep, -1);
    assert_int_equal(sp->fim_sep, -1); /* "<file_sep>" is not one of llama.cpp's names either */
    vocab_free(v);
    v = open_vocab("refact");
    sp = vocab_specials(v);
    assert_int_equal(sp->fim_pre, id_of(v, "<fim_prefix>"));
    assert_int_equal(sp->fim_rep, id_of(v, "<reponame>"));
    assert_true(sp->fim_rep >= 0);
    vocab_free(v);
    v = open_vocab("deepseek-coder");
    sp = vocab_specials(v);
    assert_int_equal(sp->fim_pre, id_of(v, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>"));
    assert_int_equal(sp->fim_suf, id_of(v, "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>"));
    assert_int_equal(sp->fim_mid, id_of(v, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"));
    assert_true(sp->fim_pre >= 0 && sp->fim_suf >= 0 && sp->fim_mid >= 0);
    vocab_free(v);
    v = open_vocab("llama-spm");
    sp = vocab_specials(v);
    assert_true(sp->fim_pre < 0 && sp->fim_suf < 0 && sp->fim_mid < 0);
    vocab_free(v);

    /* metadata names them: the ids given win over any text */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<PRE>", "<SUF>", "<MID>", "a"};
    int32_t types[7] = {2, 3, 3, 3, 3, 3, 1};
    float scores[7] = {0, 0, 0, 0, 0, 0, -1};
    gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", NULL), 0);
    assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", 7, toks, NULL), 0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, 7, scores, NULL), 0);
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, 7, types, NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.fim_pre_token_id", 5, NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.suffix_token_id", 6, NULL), 0);
    assert_int_equal(tu_vocab_from_writer(w, &v, NULL), 0);
    sp = vocab_specials(v);
    assert_int_equal(sp->fim_pre, 5);
    assert_int_equal(sp->fim_suf, 6);
    assert_int_equal(sp->fim_mid, 5); /* "<MID>" by its text */
    vocab_free(v);
}

/* The budgets: prefix's last 1536, suffix's first 512 - 2 - |prompt|,
 * extra's last n_ctx - 2048 - 2 n_predict, BOS when the vocab adds one. */
static void test_budgets(void **state)
{
    (void)state;
    vocab *v = open_vocab("deepseek-coder"); /* adds BOS */
    const vocab_special *sp = vocab_specials(v);
    assert_true(vocab_adds_bos(v));
    enum { NP = 2000, NS = 600, NX = 5000, NQ = 10 };
    int32_t *pre = malloc(NP * sizeof(int32_t)), *suf = malloc(NS * sizeof(int32_t)),
            *ext = malloc(NX * sizeof(int32_t)), q[NQ];
    for (int i = 0; i < NP; i++) pre[i] = 1000 + i % 500;
    for (int i = 0; i < NS; i++) suf[i] = 2000 + i % 500;
    for (int i = 0; i < NX; i++) ext[i] = 3000 + i % 500;
    for (int i = 0; i < NQ; i++) q[i] = 4000 + i;
    const int64_t cases[][2] = {{4096, 100}, {4096, -1}, {2048, 10}, {8192, 0}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t n_ctx = cases[c][0], n_predict = cases[c][1];
        int32_t *out = NULL;
        size_t n = 0;
        assert_int_equal(api_infill_tokens(v, ext, NX, pre, NP, suf, NS, q, NQ, n_ctx, n_predict, &out, &n), 0);
        int64_t room = n_ctx - 2048 - 2 * n_predict;
        size_t n_ext = room <= 0 ? 0 : room < NX ? (size_t)room : NX;
        size_t n_suf = 512 - 2 - NQ;
        assert_int_equal(n, n_ext + 1 + 1 + 1536 + NQ + 1 + n_suf + 1);
        size_t k = 0;
        for (size_t i = 0; i < n_ext; i++, k++) assert_int_equal(out[k], ext[NX - n_ext + i]);
        assert_int_equal(out[k++], sp->bos);
        assert_int_equal(out[k++], sp->fim_pre);
        for (size_t i = 0; i < 1536; i++, k++) assert_int_equal(out[k], pre[NP - 1536 + i]);
        for (size_t i = 0; i < NQ; i++, k++) assert_int_equal(out[k], q[i]);
        assert_int_equal(out[k++], sp->fim_suf);
        for (size_t i = 0; i < n_suf; i++, k++) assert_int_equal(out[k], suf[i]);
        assert_int_equal(out[k++], sp->fim_mid);
        assert_int_equal(k, n);
        free(out);
    }
    /* a prompt that leaves the suffix no room; short parts whole */
    int32_t *out = NULL;
    size_t n = 0;
    int32_t *long_q = malloc(600 * sizeof(int32_t));
    for (int i = 0; i < 600; i++) long_q[i] = 5;
    assert_int_equal(api_infill_tokens(v, NULL, 0, pre, 3, suf, NS, long_q, 600, 4096, -1, &out, &n), 0);
    assert_int_equal(n, 1 + 1 + 3 + 600 + 1 + 0 + 1);
    free(out);
    free(long_q);
    free(pre);
    free(suf);
    free(ext);
    vocab_free(v);
}

/* ids of text as the parts are tokenized (no BOS, special texts as text) */
static void append_text(const vocab *v, const char *text, int32_t *out, size_t *n)
{
    size_t k = 0;
    assert_int_equal(tok_tokenize(v, text, strlen(text), false, false, out + *n, 4096 - *n, &k, NULL), 0);
    *n += k;
}

static void check_request(const char *name)
{
    vocab *v = open_vocab(name);
    const vocab_special *sp = vocab_specials(v);
    api_env env = {.voc = v, .model_name = name, .n_ctx = 4096};
    const char *body = "{\"input_prefix\":\"def add(a, b):\\n    \",\"input_suffix\":\"\\n    return c\\n\","
                       "\"prompt\":\"c =\",\"input_extra\":[{\"filename\":\"util.py\",\"text\":\"def f():\\n"
                       "    pass\\n\"},{\"text\":\"import os\\n\"}],\"n_predict\":16,\"temperature\":0}";
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_INFILL, body, strlen(body), &g, &e) != 0) fail_msg("%s: %s", name, e.message);
    int32_t want[4096];
    size_t n = 0;
    if (sp->fim_rep >= 0) {
        want[n++] = sp->fim_rep;
        append_text(v, "myproject\n", want, &n);
    }
    const char *files[2] = {"util.py\n", "tmp\n"}, *texts[2] = {"def f():\n    pass\n", "import os\n"};
    for (int i = 0; i < 2; i++) {
        if (sp->fim_sep >= 0) {
            want[n++] = sp->fim_sep;
            append_text(v, files[i], want, &n);
        } else {
            append_text(v, "\n\n--- snippet ---\n\n", want, &n);
        }
        append_text(v, texts[i], want, &n);
    }
    if (sp->fim_sep >= 0) {
        want[n++] = sp->fim_sep;
        append_text(v, "filename\n", want, &n);
    }
    if (vocab_adds_bos(v)) want[n++] = sp->bos;
    want[n++] = sp->fim_pre;
    append_text(v, "def add(a, b):\n    ", want, &n);
    size_t k = 0; /* the prompt: special tokens parsed, no BOS */
    assert_int_equal(tok_tokenize(v, "c =", 3, false, true, want + n, 4096 - n, &k, NULL), 0);
    n += k;
    want[n++] = sp->fim_suf;
    append_text(v, "\n    return c\n", want, &n);
    want[n++] = sp->fim_mid;
    assert_int_equal(g.n_prompt, n);
    assert_memory_equal(g.prompt, want, n * sizeof(int32_t));
    assert_int_equal(g.max_tokens, 16);
    api_gen_free(&g);

    /* nothing but the FIM tokens; bad parts refused by name */
    body = "{}";
    assert_int_equal(api_parse_gen(&env, API_INFILL, body, strlen(body), &g, &e), 0);
    assert_true(g.n_prompt >= 3);
    assert_int_equal(g.prompt[g.n_prompt - 1], sp->fim_mid);
    api_gen_free(&g);
    static const char *const bad[][2] = {{"{\"input_prefix\":3}", "`input_prefix`"},
                                         {"{\"input_extra\":{}}", "`input_extra`"},
                                         {"{\"input_extra\":[{\"text\":1}]}", "`input_extra[0]`"},
                                         {"{\"prompt\":{}}", "`prompt`"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(api_parse_gen(&env, API_INFILL, bad[i][0], strlen(bad[i][0]), &g, &e), -1);
        assert_int_equal(e.status, 400);
        if (strstr(e.message, bad[i][1]) == NULL) fail_msg("%s: %s", bad[i][0], e.message);
    }
    vocab_free(v);
}

static void test_prompts(void **state)
{
    (void)state;
    check_request("starcoder");
    check_request("refact");
    check_request("deepseek-coder");
}

static void test_no_fim_tokens(void **state)
{
    (void)state;
    vocab *v = open_vocab("llama-spm");
    api_env env = {.voc = v, .model_name = "m", .n_ctx = 4096};
    api_gen g;
    api_error e;
    const char *body = "{\"input_prefix\":\"a\"}";
    assert_int_equal(api_parse_gen(&env, API_INFILL, body, strlen(body), &g, &e), -1);
    assert_int_equal(e.status, 501);
    assert_string_equal(e.code, "not_supported");
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fim_tokens),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_no_fim_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
