/* `strata bench` at depth and with q8_0 KV: -d runs each test after DEPTH
 * tokens and names it "ppN @ dDEPTH" as llama-bench does; -ctk/-ctv and
 * --kv-type pick the KV row types, each reported per row; bad lists and
 * types are refused with exit status 2 and a message. Speeds are printed,
 * never asserted. */
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

static const char *tiny_model(void)
{
    static char path[4200];
    if (path[0] == '\0') {
        snprintf(path, sizeof(path), "%s/tiny-kv-Q8_0.gguf", testdata_scratch_dir());
        const char *argv[] = {STRATA_BIN, "mkmodel", "--preset", "tiny", "--type", "Q8_0",
                              "--quiet", "-o", path, NULL};
        run_result r;
        assert_int_equal(run_capture(argv, &r), 0);
        assert_int_equal(r.status, 0);
        run_result_free(&r);
    }
    return path;
}

static void test_depths_and_types(void **state)
{
    (void)state;
    const char *argv[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-p", "16", "-n", "4",
                          "-d", "0,40", "--kv-type", "f16,q8_0", "-r", "1", "-t", "2",
                          "--json", NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    if (r.status != 0) fail_msg("bench failed: %s", r.err);
    /* one line per (type, depth, test), in that order */
    static const char *const want_test[] = {"pp16", "tg4", "pp16 @ d40", "tg4 @ d40"};
    static const int64_t want_depth[] = {0, 0, 40, 40};
    int n = 0;
    for (char *line = strtok(r.out, "\n"); line != NULL; line = strtok(NULL, "\n"), n++) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (o == NULL) fail_msg("not a JSON line: %s: %s", je.text, line);
        assert_true(n < 8);
        const char *type = n < 4 ? "f16" : "q8_0";
        assert_string_equal(json_string_value(json_object_get(o, "test")), want_test[n % 4]);
        assert_int_equal(json_integer_value(json_object_get(o, "n_depth")), want_depth[n % 4]);
        assert_string_equal(json_string_value(json_object_get(o, "type_k")), type);
        assert_string_equal(json_string_value(json_object_get(o, "type_v")), type);
        assert_true(json_real_value(json_object_get(o, "tokens_per_second")) > 0);
        json_decref(o);
    }
    assert_int_equal(n, 8);
    run_result_free(&r);

    /* -ctk x -ctv: every pair, in the table */
    const char *argv_tab[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-p", "8", "-n", "0",
                              "-d", "33", "-ctk", "q8_0", "-ctv", "f16,q8_0", "-r", "1", NULL};
    assert_int_equal(run_capture(argv_tab, &r), 0);
    if (r.status != 0) fail_msg("bench failed: %s", r.err);
    assert_non_null(strstr(r.out, "type_k"));
    assert_non_null(strstr(r.out, "|   q8_0 |    f16 |      pp8 @ d33 |"));
    assert_non_null(strstr(r.out, "|   q8_0 |   q8_0 |      pp8 @ d33 |"));
    run_result_free(&r);
}

static void test_errors(void **state)
{
    (void)state;
    run_result r;
    const char *bad_depth[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-d", "0,x", NULL};
    assert_int_equal(run_capture(bad_depth, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "-d"));
    run_result_free(&r);

    const char *bad_type[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-ctk", "q4_0", NULL};
    assert_int_equal(run_capture(bad_type, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "q4_0"));
    assert_non_null(strstr(r.err, "f16 or q8_0"));
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depths_and_types),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
