/* `strata info` as a user runs it: the text and JSON it prints for real
 * files, and the exit status and message for bad ones. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "run.h"
#include "testdata.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static run_result run_info(const char *a1, const char *a2, const char *a3)
{
    const char *argv[] = {STRATA_BIN, "info", a1, a2, a3, NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    return r;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) {
        fail_msg("expected to find '%s' in:\n%s", needle, hay);
    }
}

static void test_text_facts_of_stories260k(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "models/stories260K.gguf");
    run_result r = run_info(path, NULL, NULL);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "architecture:     llama");
    assert_contains(r.out, "context length:   2048");
    assert_contains(r.out, "embedding width:  64");
    assert_contains(r.out, "layers:           5");
    assert_contains(r.out, "heads:            8");
    assert_contains(r.out, "KV heads:         4");
    assert_contains(r.out, "FFN width:        172");
    assert_contains(r.out, "norm epsilon:     1e-05");
    assert_contains(r.out, "tokenizer:        llama, 512 tokens");
    assert_contains(r.out, "bos 1 eos 2 unk 0 sep none pad none");
    assert_contains(r.out, "chat template:    no");
    assert_contains(r.out, "tensors:          48");
    assert_contains(r.out, "(292800)");
    assert_null(strstr(r.out, "blk.0.attn_q.weight")); /* only with --tensors */
    run_result_free(&r);

    r = run_info(path, "--tensors", NULL);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "blk.4.ffn_norm.weight");
    assert_contains(r.out, "[64, 512]");
    run_result_free(&r);
}

static void test_json_matches_info_file(void **state)
{
    (void)state;
    char path[4096], info[4096];
    TESTDATA_FILE(path, "models/llama-2-tiny-random.gguf");
    TESTDATA_FILE(info, "models/llama-2-tiny-random.gguf.info.json");
    run_result r = run_info(path, "--json", "--tensors");
    assert_int_equal(r.status, 0);
    json_error_t je;
    json_t *got = json_loads(r.out, 0, &je);
    if (got == NULL) fail_msg("strata info --json printed invalid JSON: %s", je.text);
    json_t *want = json_load_file(info, 0, &je);
    assert_non_null(want);

    assert_int_equal(json_integer_value(json_object_get(got, "file_size")),
                     json_integer_value(json_object_get(want, "size")));
    assert_int_equal(json_integer_value(json_object_get(got, "gguf_version")),
                     json_integer_value(json_object_get(want, "gguf_version")));
    assert_int_equal(json_integer_value(json_object_get(got, "n_tensors")),
                     json_integer_value(json_object_get(want, "n_tensors")));
    assert_int_equal(json_integer_value(json_object_get(got, "n_kv")),
                     json_integer_value(json_object_get(want, "n_kv")));
    assert_int_equal(json_integer_value(json_object_get(got, "data_offset")),
                     json_integer_value(json_object_get(want, "data_offset")));
    assert_int_equal(json_integer_value(json_object_get(got, "n_params")),
                     json_integer_value(json_object_get(want, "n_params")));
    json_t *hp = json_object_get(got, "hparams");
    assert_int_equal(json_integer_value(json_object_get(hp, "context_length")), 4096);
    assert_int_equal(json_integer_value(json_object_get(hp, "embedding_length")), 8);
    json_t *tk = json_object_get(got, "tokenizer");
    assert_int_equal(json_integer_value(json_object_get(tk, "vocab_size")), 32000);
    assert_string_equal(json_string_value(json_object_get(tk, "model")), "llama");
    assert_true(json_is_null(json_object_get(tk, "padding_token_id")));

    /* Per-type counts and every tensor's name, type and shape. */
    json_t *types = json_object_get(got, "tensor_types");
    const char *tname;
    json_t *count;
    json_object_foreach(json_object_get(want, "tensor_types"), tname, count) {
        json_t *e = json_object_get(types, tname);
        assert_non_null(e);
        assert_int_equal(json_integer_value(json_object_get(e, "count")), json_integer_value(count));
    }
    json_t *gt = json_object_get(got, "tensors");
    json_t *wt = json_object_get(want, "tensors");
    assert_int_equal(json_array_size(gt), json_array_size(wt));
    for (size_t i = 0; i < json_array_size(wt); i++) {
        json_t *w = json_array_get(wt, i), *g = json_array_get(gt, i);
        assert_string_equal(json_string_value(json_object_get(g, "name")),
                            json_string_value(json_array_get(w, 0)));
        assert_string_equal(json_string_value(json_object_get(g, "type")),
                            json_string_value(json_array_get(w, 2)));
        assert_true(json_equal(json_object_get(g, "shape"), json_array_get(w, 1)));
    }
    json_decref(got);
    json_decref(want);
    run_result_free(&r);
}

static void test_bad_files_fail_with_message(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/legacy/ggml-vocab-llama.gguf-v1");
    run_result r = run_info(path, NULL, NULL);
    assert_int_not_equal(r.status, 0);
    assert_contains(r.err, "version 1");
    assert_int_equal(r.out_len, 0);
    run_result_free(&r);

    r = run_info("/nonexistent/model.gguf", NULL, NULL);
    assert_int_not_equal(r.status, 0);
    assert_contains(r.err, "/nonexistent/model.gguf");
    run_result_free(&r);

    r = run_info(STRATA_BIN, NULL, NULL); /* not a GGUF at all */
    assert_int_not_equal(r.status, 0);
    assert_contains(r.err, "not a GGUF file");
    run_result_free(&r);

    r = run_info("--bogus", NULL, NULL);
    assert_int_equal(r.status, 2);
    run_result_free(&r);
}

static void test_vocab_only_file(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    run_result r = run_info(path, "--json", NULL);
    assert_int_equal(r.status, 0);
    json_t *got = json_loads(r.out, 0, NULL);
    assert_non_null(got);
    assert_int_equal(json_integer_value(json_object_get(got, "n_tensors")), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(got, "tokenizer"), "model")),
                        "bert");
    json_decref(got);
    run_result_free(&r);
}

/* The graph line: what Strata would run for each architecture of the
 * golden files, and why it refuses one it has no graph for. */
/* general.file_type by the name llama.cpp's tools print; a file without
 * the key has no such line. */
static void test_file_type_line(void **state)
{
    (void)state;
    static const char *const files[][2] = {
        {"golden/models/gemma3-Q4_K_M.gguf", "file type:        Q4_K - Medium\n"},
        {"golden/models/llama-Q3_K.gguf", "file type:        Q3_K - Medium\n"},
    };
    char path[4096];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        TESTDATA_FILE(path, files[i][0]);
        run_result r = run_info(path, NULL, NULL);
        assert_int_equal(r.status, 0);
        assert_contains(r.out, files[i][1]);
        run_result_free(&r);
    }
    TESTDATA_FILE(path, "models/stories260K.gguf");
    run_result r = run_info(path, NULL, NULL);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "file type:"));
    run_result_free(&r);
}

static void test_graph_line(void **state)
{
    (void)state;
    static const char *const archs[][2] = {
        {"gemma3", "graph:            gemma3: GeGLU (tanh) FFN, NEOX rope base 1e+06"},
        {"gemma2", "attention soft-cap 1, logit soft-cap 2"},
        {"phi3", "fused QKV and gate/up"},
        {"smollm3", "(none in 1 of every 4 layers)"},
        {"mistral3", "with YaRN (x16 from 16 positions), query temperature 0.1"},
        {"qwen3moe", "2 of 8 experts of FFN 64 per token, q/k norms"},
        {"gpt-oss", "clamped SwiGLU (gpt-oss) FFN"},
    };
    char path[4096], rel[256];
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        snprintf(rel, sizeof(rel), "golden/models/%s-F32.gguf", archs[i][0]);
        TESTDATA_FILE(path, rel);
        run_result r = run_info(path, NULL, NULL);
        assert_int_equal(r.status, 0);
        assert_contains(r.out, archs[i][1]);
        run_result_free(&r);
    }
    TESTDATA_FILE(path, "golden/models/gemma3-F32.gguf");
    run_result r = run_info(path, NULL, NULL);
    assert_contains(r.out, "window 8 on 1 of 2 layers (rope base 10000 there)");
    run_result_free(&r);
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-falcon.gguf");
    r = run_info(path, "--json", NULL);
    assert_int_equal(r.status, 0);
    json_t *got = json_loads(r.out, 0, NULL);
    assert_non_null(got);
    assert_true(json_is_null(json_object_get(got, "graph")));
    const char *why = json_string_value(json_object_get(got, "graph_error"));
    assert_non_null(why);
    assert_contains(why, "architecture 'falcon' is not supported");
    json_decref(got);
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_facts_of_stories260k),
        cmocka_unit_test(test_json_matches_info_file),
        cmocka_unit_test(test_bad_files_fail_with_message),
        cmocka_unit_test(test_vocab_only_file),
        cmocka_unit_test(test_graph_line),
        cmocka_unit_test(test_file_type_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
