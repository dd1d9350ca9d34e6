/* Running a program (usually the strata binary) from a test and capturing
 * what it printed. */
#ifndef STRATA_TESTS_RUN_H
#define STRATA_TESTS_RUN_H

#include <stddef.h>

typedef struct run_result {
    int status;  /* exit status, or 128 + signal number when killed */
    char *out;   /* stdout, NUL-terminated (malloc'd) */
    size_t out_len;
    char *err;   /* stderr, NUL-terminated (malloc'd) */
    size_t err_len;
} run_result;

/* Runs argv (argv[0] is the program's path; NULL-terminated) with stdin
 * from /dev/null, waits for it, and fills *r. Returns 0, or -1 when the
 * program could not be started. */
int run_capture(const char *const *argv, run_result *r);

/* As run_capture, with stdin reading the n_input bytes of input. */
int run_capture_input(const char *const *argv, const char *input, size_t n_input, run_result *r);

void run_result_free(run_result *r);

#endif
