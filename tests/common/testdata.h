/* Finding the reference data and scratch space for tests.
 *
 * The reference data (real GGUF files, tokenizer suites, golden outputs) is
 * looked for in $STRATA_TEST_DATA, then in ../shared/data beside the
 * project's root. Tests that need it call TESTDATA_REQUIRE, which skips the
 * test with a message saying why when the data is missing. */
#ifndef STRATA_TESTS_TESTDATA_H
#define STRATA_TESTS_TESTDATA_H

#include <stddef.h>

/* The project's root (the folder of the top CMakeLists.txt). */
const char *testdata_source_dir(void);

/* The data folder, or NULL when neither place has it. */
const char *testdata_dir(void);

/* Writes "<data>/<rel>" into out and returns out, or returns NULL when the
 * data folder or that file is missing. */
char *testdata_path(char *out, size_t out_size, const char *rel);

/* A fresh empty folder under the build tree for this test's files. The
 * folder is removed (with its contents) at exit. */
const char *testdata_scratch_dir(void);

/* Reads a whole file into a malloc'd buffer (caller frees). NULL on error. */
void *testdata_read_file(const char *path, size_t *size);

/* Skips the current cmocka test when the data folder is missing. */
#define TESTDATA_REQUIRE()                                                           \
    do {                                                                             \
        if (testdata_dir() == NULL) {                                                \
            print_message("skipped: reference data not found (set STRATA_TEST_DATA " \
                          "or place it at ../shared/data)\n");                       \
            skip();                                                                  \
        }                                                                            \
    } while (0)

/* Skips the current cmocka test when the named data file is missing. */
#define TESTDATA_FILE(buf, rel)                                                      \
    do {                                                                             \
        TESTDATA_REQUIRE();                                                          \
        if (testdata_path((buf), sizeof(buf), (rel)) == NULL) {                      \
            print_message("skipped: reference file %s is missing\n", (rel));         \
            skip();                                                                  \
        }                                                                            \
    } while (0)

#endif
