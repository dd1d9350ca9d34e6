/* `strata tokenize` as a user runs it: the exact output of --ids and of the
 * id<TAB>piece form for real vocabs (Llama SentencePiece, GPT-2 BPE, BERT
 * WordPiece, and a whole model file), the special-token switches, --file,
 * and the exit status and message for bad usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "run.h"
#include "testdata.h"

#include <stdio.h>
#include <string.h>

#define LLAMA "tokenizer/ggml-vocab-llama-spm.gguf"

static run_result run_tok(const char *const *args)
{
    const char *argv[16] = {STRATA_BIN, "tokenize"};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    return r;
}

static void expect_out(const char *const *args, const char *want)
{
    run_result r = run_tok(args);
    if (r.status != 0) fail_msg("exit %d: %s", r.status, r.err);
    if (strcmp(r.out, want) != 0) fail_msg("printed:\n%s\nexpected:\n%s", r.out, want);
    run_result_free(&r);
}

static void test_ids_llama(void **state)
{
    (void)state;
    char m[4096];
    TESTDATA_FILE(m, LLAMA);
    expect_out((const char *[]){"-m", m, "--ids", "Hello world", NULL}, "1 15043 3186\n");
    expect_out((const char *[]){"--ids", "-m", m, "--no-add-special", "Hello world", NULL}, "15043 3186\n");
    /* Special text is parsed by default: "<s>" is BOS, and the space prefix
     * comes back after it. */
    expect_out((const char *[]){"-m", m, "--ids", "<s>Hello", NULL}, "1 1 15043\n");
    expect_out((const char *[]){"-m", m, "--ids", "--no-add-special", "--no-parse-special", "<s>", NULL},
               "529 29879 29958\n");
    /* Empty text: BOS alone; nothing at all without it. */
    expect_out((const char *[]){"-m", m, "--ids", "", NULL}, "1\n");
    expect_out((const char *[]){"-m", m, "--ids", "--no-add-special", "", NULL}, "\n");
}

static void test_pieces_llama(void **state)
{
    (void)state;
    char m[4096];
    TESTDATA_FILE(m, LLAMA);
    expect_out((const char *[]){"-m", m, "Hello world", NULL}, "1\t<s>\n15043\t Hello\n3186\t world\n");
    /* 🦙 is four byte-fallback tokens: each an incomplete character, escaped. */
    expect_out((const char *[]){"-m", m, "--no-add-special", "\xf0\x9f\xa6\x99", NULL},
               "29871\t \n243\t\\xf0\n162\t\\x9f\n169\t\\xa6\n156\t\\x99\n");
    expect_out((const char *[]){"-m", m, "--no-add-special", "a\tb\\", NULL},
               "263\t a\n12\t\\t\n29890\tb\n29905\t\\\\\n");
}

static void test_file_input(void **state)
{
    (void)state;
    char m[4096], path[4200];
    TESTDATA_FILE(m, LLAMA);
    snprintf(path, sizeof(path), "%s/input.txt", testdata_scratch_dir());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("Hello world\n", f);
    fclose(f);
    expect_out((const char *[]){"-m", m, "--ids", "--file", path, NULL}, "1 15043 3186 13\n");
    expect_out((const char *[]){"-m", m, "--file", path, "--no-add-special", NULL},
               "15043\t Hello\n3186\t world\n13\t\\n\n");
}

static void test_other_vocabs(void **state)
{
    (void)state;
    char m[4096];
    TESTDATA_FILE(m, "tokenizer/ggml-vocab-gpt-2.gguf");
    /* GPT-2 adds no BOS; " world" is one token with its space. */
    expect_out((const char *[]){"-m", m, "--ids", "Hello world", NULL}, "15496 995\n");
    expect_out((const char *[]){"-m", m, "Hello world<|endoftext|>", NULL},
               "15496\tHello\n995\t world\n50256\t<|endoftext|>\n");
    TESTDATA_FILE(m, "tokenizer/ggml-vocab-bert-bge.gguf");
    expect_out((const char *[]){"-m", m, "--ids", "Hello world!", NULL}, "101 7592 2088 999 102\n");
    /* A whole model file (weights and all): only its metadata is read. */
    TESTDATA_FILE(m, "models/stories260K.gguf");
    expect_out((const char *[]){"-m", m, "--ids", "Once upon a time", NULL}, "1 403 407 261 378\n");
}

static void expect_fail(const char *const *args, int status, const char *needle)
{
    run_result r = run_tok(args);
    if (r.status != status) fail_msg("exit %d, expected %d: %s", r.status, status, r.err);
    if (strstr(r.err, needle) == NULL) fail_msg("stderr '%s' does not mention '%s'", r.err, needle);
    assert_int_equal(r.out_len, 0);
    run_result_free(&r);
}

static void test_bad_usage(void **state)
{
    (void)state;
    char m[4096];
    TESTDATA_FILE(m, LLAMA);
    expect_fail((const char *[]){"Hello", NULL}, 2, "-m MODEL is required");
    expect_fail((const char *[]){"-m", m, NULL}, 2, "give either --file F or TEXT");
    expect_fail((const char *[]){"-m", m, "--file", "x", "Hello", NULL}, 2, "give either --file F or TEXT");
    expect_fail((const char *[]){"-m", m, "--frobnicate", "Hello", NULL}, 2, "unknown option '--frobnicate'");
    expect_fail((const char *[]){"-m", "/nonexistent/model.gguf", "Hello", NULL}, 1, "/nonexistent/model.gguf");
    expect_fail((const char *[]){"-m", m, "--file", "/nonexistent/input.txt", NULL}, 1, "/nonexistent/input.txt");
    /* A GGUF without a tokenizer: v3, no keys, no tensors. */
    char path[4200];
    snprintf(path, sizeof(path), "%s/empty.gguf", testdata_scratch_dir());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    const unsigned char empty[24] = {'G', 'G', 'U', 'F', 3};
    assert_int_equal(fwrite(empty, 1, sizeof(empty), f), sizeof(empty));
    fclose(f);
    expect_fail((const char *[]){"-m", path, "Hello", NULL}, 1, "no tokenizer.ggml.model");
    run_result r = run_tok((const char *[]){"--help", NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "--no-parse-special"));
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_llama),
        cmocka_unit_test(test_pieces_llama),
        cmocka_unit_test(test_file_input),
        cmocka_unit_test(test_other_vocabs),
        cmocka_unit_test(test_bad_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
