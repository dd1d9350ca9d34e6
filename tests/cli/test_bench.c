/* `strata bench` as a user runs it: the table and JSON it prints for a
 * small model, and its errors. Speeds are printed, never asserted. */
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
        snprintf(path, sizeof(path), "%s/tiny-Q8_0.gguf", testdata_scratch_dir());
        const char *argv[] = {STRATA_BIN, "mkmodel", "--preset", "tiny", "--type", "Q8_0",
                              "--quiet", "-o", path, NULL};
        run_result r;
        assert_int_equal(run_capture(argv, &r), 0);
        assert_int_equal(r.status, 0);
        run_result_free(&r);
    }
    return path;
}

static void test_table_and_json(void **state)
{
    (void)state;
    const char *argv[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-p", "16", "-n", "8",
                          "-r", "2", "-t", "2", NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    if (r.status != 0) fail_msg("bench failed: %s", r.err);
    assert_non_null(strstr(r.out, "| llama 1.44M Q8_0"));
    assert_non_null(strstr(r.out, "pp16"));
    assert_non_null(strstr(r.out, "tg8"));
    run_result_free(&r);

    const char *argv_json[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-p", "0", "-n", "4",
                               "-r", "1", "--json", NULL};
    assert_int_equal(run_capture(argv_json, &r), 0);
    assert_int_equal(r.status, 0);
    json_error_t je;
    json_t *o = json_loads(r.out, 0, &je);
    if (o == NULL) fail_msg("not one JSON object: %s\n%s", je.text, r.out);
    assert_string_equal(json_string_value(json_object_get(o, "test")), "tg4");
    assert_true(json_real_value(json_object_get(o, "tokens_per_second")) > 0);
    json_decref(o);
    run_result_free(&r);
}

static void test_errors(void **state)
{
    (void)state;
    run_result r;
    const char *no_model[] = {STRATA_BIN, "bench", "-m", "/nonexistent.gguf", NULL};
    assert_int_equal(run_capture(no_model, &r), 0);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent.gguf"));
    run_result_free(&r);

    const char *bad_count[] = {STRATA_BIN, "bench", "-m", tiny_model(), "-p", "lots", NULL};
    assert_int_equal(run_capture(bad_count, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "-p"));
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_and_json),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
