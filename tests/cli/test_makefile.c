/* The README's two commands share one build: `make run` after `make test`
 * (and the other way round) must configure the build folder exactly as the
 * other did, or CMake rebuilds every object. The test reads what make would
 * run (`make -n`, nothing is executed) and compares the configure commands of
 * the build folder across `run`, `check` and `e2e`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "run.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The lines of `make -n TARGET` that configure the folder BUILD=dir, joined
 * by '\n' (malloc'd). A target that configures nothing gives "". */
static char *configure_lines(const char *target, const char *build_dir)
{
    char build_arg[512];
    snprintf(build_arg, sizeof(build_arg), "BUILD=%s", build_dir);
    /* an outer make (make test -> ctest -> here) passes its jobserver and
     * level down; this dry run is a make of its own */
    const char *argv[] = {"/usr/bin/env", "-u", "MAKEFLAGS", "-u", "MFLAGS", "-u", "MAKELEVEL",
                          "make", "-n", "-C", testdata_source_dir(), build_arg, "MODEL=",
                          target, NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    if (r.status != 0) fail_msg("make -n %s exited %d:\n%s", target, r.status, r.err);
    char want[600];
    snprintf(want, sizeof(want), "cmake -S . -B %s ", build_dir);
    size_t cap = strlen(r.out) + 1, n = 0;
    char *out = calloc(1, cap);
    assert_non_null(out);
    for (char *line = strtok(r.out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        while (*line == ' ' || *line == '\t' || *line == '@') line++;
        if (strncmp(line, want, strlen(want)) != 0) continue;
        n += (size_t)snprintf(out + n, cap - n, "%s\n", line);
    }
    run_result_free(&r);
    return out;
}

static void test_run_and_test_configure_the_build_alike(void **state)
{
    (void)state;
    const char *dir = "build-make-dry-run"; /* never created: make -n runs nothing */
    char *run = configure_lines("run", dir);
    char *check = configure_lines("check", dir);
    char *e2e = configure_lines("e2e", dir);
    if (run[0] == '\0') fail_msg("`make -n run` configures no %s", dir);
    if (strcmp(run, check) != 0)
        fail_msg("`make run` and `make check` configure %s differently:\n%s---\n%s", dir, run, check);
    if (strcmp(run, e2e) != 0)
        fail_msg("`make run` and `make e2e` configure %s differently:\n%s---\n%s", dir, run, e2e);
    /* CI's suite builds with warnings as errors; the shared build keeps that */
    if (strstr(check, "-DSTRATA_WERROR=ON") == NULL)
        fail_msg("`make check` no longer treats warnings as errors:\n%s", check);
    free(run);
    free(check);
    free(e2e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_and_test_configure_the_build_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
