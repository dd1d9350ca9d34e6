/* The KV row type options as a user meets them.
 * `strata bench` at depth and with q8_0 KV: -d runs each test after DEPTH
 * tokens and names it "ppN @ dDEPTH" as llama-bench does; -ctk/-ctv and
 * --kv-type pick the KV row types, each reported per row; bad lists and
 * types are refused with exit status 2 and a message. Speeds are printed,
 * never asserted. `strata eval` and `strata engine` take --kv-type (and
 * eval -ctk/-ctv): the logits change with the type, and the engine's
 * `ready` names the type its rows have. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "run.h"
#include "testdata.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
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
    /* one line per (depth, test, type), in that order */
    static const char *const want_test[] = {"pp16", "tg4", "pp16 @ d40", "tg4 @ d40"};
    static const int64_t want_depth[] = {0, 0, 40, 40};
    int n = 0;
    for (char *line = strtok(r.out, "\n"); line != NULL; line = strtok(NULL, "\n"), n++) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (o == NULL) fail_msg("not a JSON line: %s: %s", je.text, line);
        assert_true(n < 8);
        const char *type = n % 2 == 0 ? "f16" : "q8_0";
        assert_string_equal(json_string_value(json_object_get(o, "test")), want_test[n / 2]);
        assert_int_equal(json_integer_value(json_object_get(o, "n_depth")), want_depth[n / 2]);
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

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

static void test_eval_types(void **state)
{
    (void)state;
    static const char *const opts[4][2] = {
        {"--kv-type", "f16"}, {"--kv-type", "q8_0"}, {"-ctk", "q8_0"}, {"-ctv", "q8_0"}};
    char *out[4];
    size_t n[4];
    for (int i = 0; i < 4; i++) {
        char path[4300];
        snprintf(path, sizeof(path), "%s/kv-eval-%d.f32", testdata_scratch_dir(), i);
        const char *argv[] = {STRATA_BIN, "eval", "-m", tiny_model(), "--tokens",
                              "1 5 9 33 2 7 40 41", "--logits-out", path, opts[i][0],
                              opts[i][1], "-t", "1", NULL};
        run_result r;
        assert_int_equal(run_capture(argv, &r), 0);
        if (r.status != 0) fail_msg("eval %s %s: %s", opts[i][0], opts[i][1], r.err);
        run_result_free(&r);
        out[i] = read_all(path, &n[i]);
        assert_true(n[i] > 0);
        assert_int_equal(n[i], n[0]);
    }
    /* four different caches, four different sets of logits */
    for (int i = 0; i < 4; i++) {
        for (int j = i + 1; j < 4; j++) assert_true(memcmp(out[i], out[j], n[0]) != 0);
    }
    for (int i = 0; i < 4; i++) free(out[i]);

    const char *bad[] = {STRATA_BIN, "eval", "-m", tiny_model(), "--tokens", "1 2",
                         "--logits-out", "/dev/null", "-ctv", "int4", NULL};
    run_result r;
    assert_int_equal(run_capture(bad, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "int4"));
    run_result_free(&r);
}

/* ready's kv: the type asked for, and q8_0 rows take less than f16's */
static json_t *engine_ready_kv(const char *type)
{
    const char *argv[] = {STRATA_BIN, "engine", "-m", tiny_model(), "--slots", "1", "--ctx",
                          "64", "--kv-type", type, NULL};
    const char *input = "{\"op\":\"shutdown\"}\n";
    run_result r;
    assert_int_equal(run_capture_input(argv, input, strlen(input), &r), 0);
    if (r.status != 0) fail_msg("engine --kv-type %s: %s", type, r.err);
    char *nl = strchr(r.out, '\n');
    if (nl != NULL) *nl = '\0';
    json_error_t je;
    json_t *o = json_loads(r.out, 0, &je);
    if (o == NULL) fail_msg("ready is not JSON: %s: %s", je.text, r.out);
    assert_string_equal(json_string_value(json_object_get(o, "op")), "ready");
    json_t *kv = json_incref(json_object_get(o, "kv"));
    json_decref(o);
    run_result_free(&r);
    return kv;
}

static void test_engine_type(void **state)
{
    (void)state;
    json_t *f16 = engine_ready_kv("f16"), *q8 = engine_ready_kv("q8_0");
    assert_string_equal(json_string_value(json_object_get(f16, "type")), "f16");
    assert_string_equal(json_string_value(json_object_get(q8, "type")), "q8_0");
    json_int_t b16 = json_integer_value(json_object_get(f16, "bytes"));
    json_int_t b8 = json_integer_value(json_object_get(q8, "bytes"));
    /* 34 bytes per 32 elements instead of 64 */
    assert_int_equal(b8 * 64, b16 * 34);
    json_decref(f16);
    json_decref(q8);

    const char *bad[] = {STRATA_BIN, "engine", "-m", tiny_model(), "--kv-type", "q4", NULL};
    run_result r;
    assert_int_equal(run_capture(bad, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "f16 or q8_0"));
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depths_and_types),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_eval_types),
        cmocka_unit_test(test_engine_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
