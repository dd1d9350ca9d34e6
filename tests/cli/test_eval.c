/* `strata eval` as other checks call it: the exact command form, the file
 * it writes ([n_tokens][n_vocab] float32 little-endian) against
 * llama.cpp's logits, the same bytes for 1 and 2 threads, and clean
 * failures for bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "run.h"
#include "testdata.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_text(const char *path)
{
    size_t n;
    char *t = testdata_read_file(path, &n);
    assert_non_null(t);
    char *z = realloc(t, n + 1);
    z[n] = '\0';
    /* one line of ids */
    for (size_t i = 0; i < n; i++) {
        if (z[i] == '\n') z[i] = ' ';
    }
    return z;
}

static run_result eval(const char *model, const char *tokens, const char *out, const char *threads)
{
    const char *argv[] = {STRATA_BIN, "eval", "-m", model, "--tokens", tokens, "--logits-out",
                          out, "-t", threads, NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    return r;
}

static void test_eval_matches_golden(void **state)
{
    (void)state;
    char model[4096], seq[4096], gold_path[4096], out1[4200], out2[4200];
    TESTDATA_FILE(model, "golden/models/qwen3-F32.gguf");
    TESTDATA_FILE(seq, "golden/seq2.txt");
    TESTDATA_FILE(gold_path, "golden/logits/qwen3-F32.seq2.logits.f32");
    char *tokens = read_text(seq);
    snprintf(out1, sizeof(out1), "%s/t1.f32", testdata_scratch_dir());
    snprintf(out2, sizeof(out2), "%s/t2.f32", testdata_scratch_dir());

    run_result r = eval(model, tokens, out1, "1");
    if (r.status != 0) fail_msg("strata eval: %s", r.err);
    assert_int_equal(r.out_len, 0); /* nothing on stdout */
    run_result_free(&r);
    r = eval(model, tokens, out2, "2");
    assert_int_equal(r.status, 0);
    run_result_free(&r);

    size_t n1, n2, ng;
    float *a = testdata_read_file(out1, &n1);
    float *b = testdata_read_file(out2, &n2);
    float *g = testdata_read_file(gold_path, &ng);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(g);
    assert_int_equal(n1, 32 * 512 * sizeof(float));
    assert_int_equal(n1, ng);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1); /* thread count changes nothing */
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < ng / sizeof(float); i++) {
        max_diff = fmax(max_diff, fabs((double)a[i] - (double)g[i]));
        max_ref = fmax(max_ref, fabs((double)g[i]));
    }
    if (!(max_diff <= 1e-3 * max_ref)) {
        fail_msg("max |diff| %.4g vs llama.cpp, max |logit| %.4g", max_diff, max_ref);
    }
    free(a);
    free(b);
    free(g);
    free(tokens);
}

static void test_eval_bad_arguments(void **state)
{
    (void)state;
    char model[4096], out[4200];
    TESTDATA_FILE(model, "models/stories260K.gguf");
    snprintf(out, sizeof(out), "%s/bad.f32", testdata_scratch_dir());

    /* usage errors: status 2 */
    run_result r = eval(model, "1 2 x", out, "1");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "--tokens"));
    run_result_free(&r);
    r = eval(model, "", out, "1");
    assert_int_equal(r.status, 2);
    run_result_free(&r);
    r = eval(model, "1 2 3", out, "0");
    assert_int_equal(r.status, 2);
    run_result_free(&r);
    const char *no_out[] = {STRATA_BIN, "eval", "-m", model, "--tokens", "1 2", NULL};
    assert_int_equal(run_capture(no_out, &r), 0);
    assert_int_equal(r.status, 2);
    run_result_free(&r);

    /* failures: status 1 with the reason */
    r = eval("/nonexistent/model.gguf", "1 2", out, "1");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent/model.gguf"));
    run_result_free(&r);
    r = eval(model, "1 512", out, "1"); /* the vocabulary is 512 */
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "vocabulary"));
    run_result_free(&r);
    r = eval(model, "1 2", "/nonexistent/dir/out.f32", "1");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent/dir/out.f32"));
    run_result_free(&r);

    /* --help works */
    const char *help[] = {STRATA_BIN, "eval", "--help", NULL};
    assert_int_equal(run_capture(help, &r), 0);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--logits-out"));
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_matches_golden),
        cmocka_unit_test(test_eval_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
