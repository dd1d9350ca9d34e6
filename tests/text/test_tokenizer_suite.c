/* llama.cpp's tokenizer regression suite (../shared/data/tokenizer): for
 * every ggml-vocab-X.gguf with X.gguf.inp / X.gguf.out, each input must
 * tokenize to exactly the expected ids, with no BOS/EOS added and special
 * text not parsed. Each vocab is its own test and prints how many of its
 * inputs pass; a failure lists the inputs that differ with both id lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "text/tokenizer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEPARATOR "\n__ggml_vocab_test__\n"
#define MAX_CASES 256

typedef struct suite_case {
    const char *text;
    size_t len;
    int32_t *want;
    size_t n_want;
} suite_case;

/* Cuts the .inp into tests: the file is each test followed by SEPARATOR
 * (whose leading newline is not part of the test). Cases point into buf. */
static size_t parse_inputs(const char *buf, size_t size, suite_case *cases)
{
    size_t n = 0, pos = 0, sep_len = strlen(SEPARATOR);
    while (pos < size && n < MAX_CASES) {
        size_t at = pos;
        while (at + sep_len <= size && memcmp(buf + at, SEPARATOR, sep_len) != 0) at++;
        if (at + sep_len > size) break;
        cases[n].text = buf + pos;
        cases[n].len = at - pos;
        n++;
        pos = at + sep_len;
    }
    return n;
}

static size_t parse_ids(const char *line, size_t len, int32_t **ids)
{
    size_t n = 0, cap = 16;
    *ids = malloc(cap * sizeof(**ids));
    assert_non_null(*ids);
    const char *p = line, *e = line + len;
    while (p < e) {
        while (p < e && *p == ' ') p++;
        if (p >= e) break;
        char *q;
        long v = strtol(p, &q, 10);
        assert_true(q > p);
        if (n == cap) {
            cap *= 2;
            *ids = realloc(*ids, cap * sizeof(**ids));
            assert_non_null(*ids);
        }
        (*ids)[n++] = (int32_t)v;
        p = q;
    }
    return n;
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    print_message("      %s:", label);
    for (size_t i = 0; i < n; i++) print_message(" %d", ids[i]);
    print_message("\n");
}

static void print_text(const char *s, size_t n)
{
    print_message("    input (%zu bytes): \"", n);
    for (size_t i = 0; i < n && i < 160; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') print_message("\\n");
        else if (c == '\t') print_message("\\t");
        else if (c < 0x20) print_message("\\x%02x", c);
        else print_message("%c", c);
    }
    print_message("%s\"\n", n > 160 ? "..." : "");
}

/* Runs the suite of one vocab; returns the number of failures. */
static int run_suite(const char *name)
{
    char gguf_path[4096], inp_path[4096], out_path[4096], rel[512];
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", name);
    if (testdata_path(gguf_path, sizeof(gguf_path), rel) == NULL) return -1;
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf.inp", name);
    assert_non_null(testdata_path(inp_path, sizeof(inp_path), rel));
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf.out", name);
    assert_non_null(testdata_path(out_path, sizeof(out_path), rel));

    vocab *v;
    strata_err err;
    if (vocab_open(&v, gguf_path, &err) != 0) fail_msg("%s: %s", name, err.msg);

    size_t inp_size, out_size;
    char *inp = testdata_read_file(inp_path, &inp_size);
    char *outs = testdata_read_file(out_path, &out_size);
    assert_non_null(inp);
    assert_non_null(outs);
    suite_case *cases = calloc(MAX_CASES, sizeof(*cases));
    size_t n_cases = parse_inputs(inp, inp_size, cases);
    assert_true(n_cases > 0);

    /* One line of ids per test. */
    size_t line = 0;
    for (const char *p = outs; p < outs + out_size && line < n_cases; line++) {
        const char *nl = memchr(p, '\n', (size_t)(outs + out_size - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(outs + out_size - p);
        cases[line].n_want = parse_ids(p, len, &cases[line].want);
        p += len + 1;
    }
    assert_int_equal(line, n_cases);

    int n_fail = 0;
    for (size_t i = 0; i < n_cases; i++) {
        int32_t *got;
        size_t n_got;
        if (tok_tokenize_alloc(v, cases[i].text, cases[i].len, false, false, &got, &n_got, &err) != 0) {
            fail_msg("%s test %zu: %s", name, i, err.msg);
        }
        bool same = n_got == cases[i].n_want &&
                    (n_got == 0 || memcmp(got, cases[i].want, n_got * sizeof(*got)) == 0);
        if (!same) {
            n_fail++;
            print_message("  %s test %zu differs\n", name, i);
            print_text(cases[i].text, cases[i].len);
            print_ids("want", cases[i].want, cases[i].n_want);
            print_ids("got ", got, n_got);
        }
        free(got);
    }
    const char *pre = vocab_pretok_name(v);
    print_message("suite: %-16s %zu/%zu inputs exact (%s%s%s)\n", name, n_cases - (size_t)n_fail, n_cases,
                  vocab_kind_name(vocab_get_kind(v)), pre[0] ? ", pre-tokenizer " : "", pre);
    for (size_t i = 0; i < n_cases; i++) free(cases[i].want);
    free(cases);
    free(inp);
    free(outs);
    vocab_free(v);
    return n_fail;
}

#define SUITE(fn, name)                                                         \
    static void fn(void **state)                                                \
    {                                                                           \
        (void)state;                                                            \
        char path[4096];                                                        \
        TESTDATA_FILE(path, "tokenizer/ggml-vocab-" name ".gguf.inp");          \
        int n_fail = run_suite(name);                                           \
        if (n_fail != 0) fail_msg("%s: %d inputs tokenize differently", name, n_fail); \
    }

SUITE(test_llama_spm, "llama-spm")
SUITE(test_phi_3, "phi-3")
SUITE(test_gpt_2, "gpt-2")
SUITE(test_mpt, "mpt")
SUITE(test_starcoder, "starcoder")
SUITE(test_refact, "refact")
SUITE(test_falcon, "falcon")
SUITE(test_deepseek_llm, "deepseek-llm")
SUITE(test_deepseek_coder, "deepseek-coder")
SUITE(test_bert_bge, "bert-bge")
SUITE(test_llama_bpe, "llama-bpe")
SUITE(test_qwen2, "qwen2")
SUITE(test_qwen35, "qwen35")
SUITE(test_gemma_4, "gemma-4")
SUITE(test_command_r, "command-r")

/* Every suite in the folder is one of the above: a new file must not be
 * skipped silently. */
static void test_every_suite_is_run(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    static const char *known[] = {"llama-spm", "phi-3", "gpt-2", "mpt", "starcoder", "refact",
                                  "falcon", "deepseek-llm", "deepseek-coder", "bert-bge",
                                  "llama-bpe", "qwen2", "qwen35", "gemma-4", "command-r"};
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tokenizer", testdata_dir());
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n_found = 0;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        size_t n = strlen(s);
        const char *pre = "ggml-vocab-", *suf = ".gguf.inp";
        if (n <= strlen(pre) + strlen(suf) || strncmp(s, pre, strlen(pre)) != 0 ||
            strcmp(s + n - strlen(suf), suf) != 0) {
            continue;
        }
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(n - strlen(pre) - strlen(suf)), s + strlen(pre));
        bool ok = false;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) ok = ok || strcmp(known[i], name) == 0;
        if (!ok) fail_msg("suite %s has no test here", name);
        n_found++;
    }
    closedir(d);
    assert_int_equal(n_found, (int)(sizeof(known) / sizeof(known[0])));
}

/* The vocabs without a suite load and tokenize (baichuan: SPM with
 * different byte pieces; gpt-neox: BPE without tokenizer.ggml.pre). */
static void test_vocabs_without_suite_load(void **state)
{
    (void)state;
    char path[4096];
    strata_err err;
    vocab *v;
    int32_t ids[64];
    size_t n;

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-gpt-neox.gguf");
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_get_kind(v), VOCAB_KIND_BPE);
    assert_string_equal(vocab_pretok_name(v), "gpt-2");
    assert_int_equal(tok_tokenize(v, "Hello world", 11, false, false, ids, 64, &n, &err), 0);
    assert_int_equal(n, 2);
    char out[64];
    size_t n_out;
    assert_int_equal(tok_detokenize(v, ids, n, 0, out, sizeof(out), &n_out, &err), 0);
    assert_int_equal(n_out, 11);
    assert_memory_equal(out, "Hello world", 11);
    vocab_free(v);

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-baichuan.gguf");
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_get_kind(v), VOCAB_KIND_SPM);
    assert_int_equal(tok_tokenize(v, "Hello world", 11, true, false, ids, 64, &n, &err), 0);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1); /* BOS by default for SentencePiece */
    assert_int_equal(tok_detokenize(v, ids, n, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE,
                                    out, sizeof(out), &n_out, &err), 0);
    assert_int_equal(n_out, 11);
    assert_memory_equal(out, "Hello world", 11);
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_phi_3),
        cmocka_unit_test(test_gpt_2),
        cmocka_unit_test(test_mpt),
        cmocka_unit_test(test_starcoder),
        cmocka_unit_test(test_refact),
        cmocka_unit_test(test_falcon),
        cmocka_unit_test(test_deepseek_llm),
        cmocka_unit_test(test_deepseek_coder),
        cmocka_unit_test(test_bert_bge),
        cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen35),
        cmocka_unit_test(test_gemma_4),
        cmocka_unit_test(test_command_r),
        cmocka_unit_test(test_every_suite_is_run),
        cmocka_unit_test(test_vocabs_without_suite_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
