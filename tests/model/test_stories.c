/* A real trained model, token for token: stories260K's greedy output from
 * BOS alone (llama2.c's documented 256 tokens) and llama.cpp's greedy
 * continuations of three prompts, each decoded one token per forward pass
 * through the KV cache (the prompt itself as one batch). Also: the tiny
 * random Llama 2 with the real 32,000-token vocabulary loads and runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model_testutil.h"

#include <inttypes.h>
#include <jansson.h>

#define STORIES_EOS 2

/* Greedy decoding: the prompt as one batch, then n_gen steps of one token
 * each (stopping at EOS, which is not stored). Returns the number made. */
static int64_t greedy(model_ctx *ctx, const int32_t *prompt, int64_t n_prompt, int64_t n_gen,
                      int32_t *out)
{
    const int64_t n_vocab = model_ctx_model(ctx)->hp.n_vocab;
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;
    if (kv_seq_add(kv, 0, &err) != 0) fail_msg("%s", err.msg);
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    int32_t *seqs = calloc((size_t)n_prompt, sizeof(int32_t));
    int32_t *pos = malloc((size_t)n_prompt * sizeof(int32_t));
    int8_t *want = calloc((size_t)n_prompt, 1);
    for (int64_t i = 0; i < n_prompt; i++) pos[i] = (int32_t)i;
    want[n_prompt - 1] = 1;
    model_batch b = {.n_tokens = n_prompt, .tokens = prompt, .seq_ids = seqs, .pos = pos,
                     .want_logits = want};
    if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("prompt: %s", err.msg);
    int64_t n = 0;
    int32_t p = (int32_t)n_prompt;
    while (n < n_gen) {
        int32_t next = (int32_t)mt_argmax(logits, n_vocab);
        if (next == STORIES_EOS) break;
        out[n++] = next;
        int32_t seq0 = 0;
        model_batch d = {.n_tokens = 1, .tokens = &next, .seq_ids = &seq0, .pos = &p};
        if (model_forward(ctx, &d, logits, &err) != 0) fail_msg("step %" PRId64 ": %s", n, err.msg);
        p++;
    }
    kv_seq_remove(kv, 0);
    free(logits);
    free(seqs);
    free(pos);
    free(want);
    return n;
}

static void test_greedy_256_from_bos(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/stories260K.gguf");
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.greedy-256.ids.txt");
    int64_t n_want = 0;
    int32_t *want = mt_read_ids(path, &n_want);
    assert_non_null(want);
    assert_int_equal(n_want, 256);
    assert_int_equal(m->hp.n_vocab, 512);
    assert_true(m->hp.rope_freq_base == 10000.0f); /* the default: the file has no key */

    int32_t got[256];
    const int32_t bos = 1;
    for (int n_threads = 1; n_threads <= 2; n_threads++) {
        model_ctx *ctx = mt_ctx(m, 512, 1, n_threads, 0);
        int64_t n = greedy(ctx, &bos, 1, 256, got);
        for (int64_t i = 0; i < n && i < n_want; i++) {
            if (got[i] != want[i]) {
                fail_msg("%d threads: token %" PRId64 " is %" PRId32 ", expected %" PRId32,
                         n_threads, i, got[i], want[i]);
            }
        }
        assert_int_equal(n, n_want);
        model_ctx_free(ctx);
    }
    free(want);
    model_close(m);
}

static int32_t *json_ids(json_t *arr, int64_t *n)
{
    assert_true(json_is_array(arr));
    *n = (int64_t)json_array_size(arr);
    int32_t *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(int32_t));
    for (int64_t i = 0; i < *n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        assert_true(json_is_integer(v));
        ids[i] = (int32_t)json_integer_value(v);
    }
    return ids;
}

static void test_llama_cpp_greedy_prompts(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/stories260K.gguf");
    char path[4096];
    TESTDATA_FILE(path, "golden/stories260K-greedy.json");
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (root == NULL) fail_msg("%s: %s", path, jerr.text);
    json_t *results = json_object_get(root, "results");
    assert_true(json_is_array(results));
    assert_true(json_array_size(results) >= 4);
    model_ctx *ctx = mt_ctx(m, 512, 1, 2, 0);
    for (size_t r = 0; r < json_array_size(results); r++) {
        json_t *res = json_array_get(results, r);
        int64_t n_prompt, n_gen;
        int32_t *prompt = json_ids(json_object_get(res, "prompt_ids"), &n_prompt);
        int32_t *gen = json_ids(json_object_get(res, "gen_ids"), &n_gen);
        int32_t *got = malloc((size_t)(n_gen > 0 ? n_gen : 1) * sizeof(int32_t));
        int64_t n = greedy(ctx, prompt, n_prompt, n_gen, got);
        const char *text = json_string_value(json_object_get(res, "prompt"));
        for (int64_t i = 0; i < n && i < n_gen; i++) {
            if (got[i] != gen[i]) {
                fail_msg("prompt '%s': token %" PRId64 " is %" PRId32 ", expected %" PRId32,
                         text ? text : "?", i, got[i], gen[i]);
            }
        }
        assert_int_equal(n, n_gen);
        print_message("prompt '%s': %" PRId64 " prompt tokens, %" PRId64 " generated ids match\n",
                      text ? text : "?", n_prompt, n);
        free(prompt);
        free(gen);
        free(got);
    }
    model_ctx_free(ctx);
    json_decref(root);
    model_close(m);
}

/* Width 8, 2 heads of 4 (n_rot 4), F16 matrices, 32,000-token vocabulary
 * and untied output: loads, and a batch then single-token steps give
 * finite logits, with the prompt's last logits the same both ways. */
static void test_llama2_tiny_random(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/llama-2-tiny-random.gguf");
    assert_int_equal(m->hp.n_vocab, 32000);
    assert_int_equal(m->hp.n_embd, 8);
    assert_int_equal(m->hp.head_dim, 4);
    assert_int_equal(m->hp.n_rot, 4);
    assert_false(m->tied_output);
    const int32_t prompt[] = {1, 15043, 3186, 29892, 920, 526, 366, 29973};
    const int64_t n = sizeof(prompt) / sizeof(prompt[0]);
    const int64_t n_vocab = m->hp.n_vocab;
    float *batch = malloc((size_t)(n * n_vocab) * sizeof(float));
    model_ctx *ctx = mt_ctx(m, 64, 1, 2, 0);
    mt_eval(ctx, 0, prompt, n, batch);
    for (int64_t i = 0; i < n * n_vocab; i++) assert_true(isfinite(batch[i]));

    /* the same tokens one at a time, then a few greedy steps */
    strata_err err;
    kv_cache *kv = model_ctx_kv(ctx);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    float *step = malloc((size_t)n_vocab * sizeof(float));
    int32_t seq0 = 0;
    for (int32_t p = 0; p < n + 16; p++) {
        int32_t tok = p < n ? prompt[p] : (int32_t)mt_argmax(step, n_vocab);
        model_batch b = {.n_tokens = 1, .tokens = &tok, .seq_ids = &seq0, .pos = &p};
        assert_int_equal(model_forward(ctx, &b, step, &err), 0);
        if (p < n) assert_memory_equal(step, batch + p * n_vocab, (size_t)n_vocab * sizeof(float));
        for (int64_t i = 0; i < n_vocab; i++) assert_true(isfinite(step[i]));
    }
    assert_int_equal(kv_seq_len(kv, 0), n + 16);
    model_ctx_free(ctx);
    free(step);
    free(batch);
    model_close(m);
}

/* The step buffers given back between two evaluations (an idle engine's
 * trim): the second evaluation faults them in again and gives the same
 * logits, bit for bit, so nothing that outlives a step lived in them. */
static void test_release_scratch(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/stories260K.gguf");
    const int32_t prompt[] = {1, 403, 407, 261, 378, 429, 267, 385, 261, 350, 284, 106};
    const int64_t n = sizeof(prompt) / sizeof(prompt[0]);
    const int64_t n_vocab = m->hp.n_vocab;
    float *a = malloc((size_t)(n * n_vocab) * sizeof(float));
    float *b = malloc((size_t)(n * n_vocab) * sizeof(float));
    model_ctx *ctx = mt_ctx(m, 64, 1, 2, 0);
    mt_eval(ctx, 0, prompt, n, a);
    model_ctx_release_scratch(ctx);
    mt_eval(ctx, 0, prompt, n, b);
    assert_memory_equal(a, b, (size_t)(n * n_vocab) * sizeof(float));
    model_ctx_release_scratch(ctx);
    model_ctx_release_scratch(ctx);
    mt_eval(ctx, 0, prompt, 4, b);
    assert_memory_equal(a, b, (size_t)(4 * n_vocab) * sizeof(float));
    model_ctx_free(ctx);
    free(a);
    free(b);
    model_close(m);
}

/* The same with a mixture of experts, whose per-slot buffers are given
 * back too. */
static void test_release_scratch_moe(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "golden/models/qwen3moe-Q4_K_M.gguf");
    const int32_t prompt[] = {1, 403, 407, 261, 378, 429, 267, 385, 261, 350, 284, 106};
    const int64_t n = sizeof(prompt) / sizeof(prompt[0]);
    const int64_t n_vocab = m->hp.n_vocab;
    float *a = malloc((size_t)(n * n_vocab) * sizeof(float));
    float *b = malloc((size_t)(n * n_vocab) * sizeof(float));
    model_ctx *ctx = mt_ctx(m, 64, 1, 2, 0);
    mt_eval(ctx, 0, prompt, n, a);
    model_ctx_release_scratch(ctx);
    mt_eval(ctx, 0, prompt, n, b);
    assert_memory_equal(a, b, (size_t)(n * n_vocab) * sizeof(float));
    model_ctx_free(ctx);
    free(a);
    free(b);
    model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_scratch_moe),
        cmocka_unit_test(test_greedy_256_from_bos),
        cmocka_unit_test(test_llama_cpp_greedy_prompts),
        cmocka_unit_test(test_llama2_tiny_random),
        cmocka_unit_test(test_release_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
