/* `strata template` as a user runs it: the exact bytes it prints for real
 * templates (compared with Jinja2's golden renders), where BOS/EOS, the
 * date and the generation prompt come from, the model's own template, and
 * the exit status and message for bad input. */
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

static run_result run_template(const char *const *args)
{
    const char *argv[24] = {STRATA_BIN, "template"};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 23; i++) argv[n++] = args[i];
    argv[n] = NULL;
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    return r;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (strstr(hay, needle) == NULL) fail_msg("expected '%s' in:\n%s", needle, hay);
}

static void assert_golden(const run_result *r, const char *golden_rel)
{
    char path[4096];
    TESTDATA_FILE(path, golden_rel);
    size_t n;
    char *want = testdata_read_file(path, &n);
    assert_non_null(want);
    if (r->status != 0) fail_msg("exit %d: %s", r->status, r->err);
    assert_int_equal(r->out_len, n);
    assert_memory_equal(r->out, want, n);
    free(want);
}

static char *write_scratch(const char *name, const char *text)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", testdata_scratch_dir(), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The prompt is printed exactly: a golden render with a date in it, with
 * everything given as options. */
static void test_golden_with_options(void **state)
{
    (void)state;
    char tmpl[4096], conv[4096];
    TESTDATA_FILE(tmpl, "chat-templates/llama.cpp-jinja/meta-llama-Llama-3.2-3B-Instruct.jinja");
    TESTDATA_FILE(conv, "golden/templates/conversation.json");
    const char *args[] = {"--template-file", tmpl, "--messages", conv, "--bos", "<s>", "--eos", "</s>",
                          "--date", "2026-11-30", NULL};
    run_result r = run_template(args);
    assert_golden(&r, "golden/templates/meta-llama-Llama-3.2-3B-Instruct.txt");
    assert_contains(r.out, "Today Date: 30 Nov 2026");
    run_result_free(&r);
}

/* conversation.json carries bos_token, eos_token, add_generation_prompt and
 * strftime_now_date itself: without options the render is the same. */
static void test_golden_from_the_messages_file(void **state)
{
    (void)state;
    char tmpl[4096], conv[4096];
    TESTDATA_FILE(tmpl, "chat-templates/llama.cpp-jinja/openai-gpt-oss-120b.jinja");
    TESTDATA_FILE(conv, "golden/templates/conversation.json");
    const char *args[] = {"--template-file", tmpl, "--messages", conv, NULL};
    run_result r = run_template(args);
    assert_golden(&r, "golden/templates/openai-gpt-oss-120b.txt");
    run_result_free(&r);

    TESTDATA_FILE(tmpl, "chat-templates/llama.cpp-jinja/Qwen-Qwen2.5-7B-Instruct.jinja");
    const char *args2[] = {"--template-file", tmpl, "--messages", conv, NULL};
    r = run_template(args2);
    assert_golden(&r, "golden/templates/Qwen-Qwen2.5-7B-Instruct.txt");
    run_result_free(&r);
}

static void test_plain_array_and_flags(void **state)
{
    (void)state;
    char *tmpl = strdup(write_scratch("t.jinja", "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                                                  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
                                                  "{{ eos_token }}|{{ strftime_now('%Y-%m-%d') }}|{{ tools is defined }}\n"));
    char *msgs = strdup(write_scratch("m.json", "[{\"role\": \"user\", \"content\": \"hi \\u00e9\"}]"));
    const char *a1[] = {"--template-file", tmpl, "--messages", msgs, "--date", "2024-02-29", NULL};
    run_result r = run_template(a1);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "<user>hi \303\251<assistant>|2024-02-29|False");
    run_result_free(&r);

    const char *a2[] = {"--template-file", tmpl, "--messages", msgs, "--date", "2024-02-29", "--bos", "B",
                        "--eos", "E", "--no-generation-prompt", NULL};
    r = run_template(a2);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "B<user>hi \303\251E|2024-02-29|False");
    run_result_free(&r);

    /* the object form: tools, and options win over the file */
    char *obj = strdup(write_scratch("o.json", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                               "\"tools\": [], \"bos_token\": \"FB\", \"add_generation_prompt\": false}"));
    const char *a3[] = {"--template-file", tmpl, "--messages", obj, "--date", "2024-01-01", "--eos", "E", NULL};
    r = run_template(a3);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "FB<user>xE|2024-01-01|True");
    run_result_free(&r);
    free(tmpl);
    free(msgs);
    free(obj);
}

static void test_model_template(void **state)
{
    (void)state;
    char model[4096];
    TESTDATA_FILE(model, "tokenizer/ggml-vocab-phi-3.gguf");
    char *msgs = strdup(write_scratch("phi.json", "[{\"role\": \"system\", \"content\": \"S\"}, "
                                                  "{\"role\": \"user\", \"content\": \"Hello\"}]"));
    const char *args[] = {"-m", model, "--messages", msgs, NULL};
    run_result r = run_template(args);
    assert_int_equal(r.status, 0);
    /* BOS text from the model's own vocabulary; phi-3's template drops system turns */
    assert_string_equal(r.out, "<s><|user|>\nHello<|end|>\n<|assistant|>\n");
    run_result_free(&r);

    TESTDATA_FILE(model, "models/stories260K.gguf");
    const char *args2[] = {"-m", model, "--messages", msgs, NULL};
    r = run_template(args2);
    assert_int_equal(r.status, 1);
    assert_int_equal(r.out_len, 0);
    assert_contains(r.err, "no chat template");
    run_result_free(&r);
    free(msgs);
}

static void test_errors(void **state)
{
    (void)state;
    char tmpl[4096], conv[4096];
    TESTDATA_FILE(tmpl, "chat-templates/llama.cpp-jinja/google-gemma-2-2b-it.jinja");
    TESTDATA_FILE(conv, "golden/templates/conversation.json");
    const char *raises[] = {"--template-file", tmpl, "--messages", conv, NULL};
    run_result r = run_template(raises);
    assert_int_equal(r.status, 1);
    assert_int_equal(r.out_len, 0);
    assert_contains(r.err, "template 1:59: System role not supported");
    run_result_free(&r);

    const char *bad_date[] = {"--template-file", tmpl, "--messages", conv, "--date", "2026-02-30", NULL};
    r = run_template(bad_date);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "bad date '2026-02-30'");
    run_result_free(&r);

    char *bad_json = strdup(write_scratch("bad.json", "[{\"role\": \"user\",]"));
    const char *a3[] = {"--template-file", tmpl, "--messages", bad_json, NULL};
    r = run_template(a3);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "bad.json:1:");
    run_result_free(&r);
    free(bad_json);

    char *not_msgs = strdup(write_scratch("obj.json", "{\"msgs\": []}"));
    const char *a4[] = {"--template-file", tmpl, "--messages", not_msgs, NULL};
    r = run_template(a4);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "an object with a \"messages\" array");
    run_result_free(&r);
    free(not_msgs);

    char *syntax = strdup(write_scratch("s.jinja", "ok\n{% if x %}never closed"));
    const char *a5[] = {"--template-file", syntax, "--messages", conv, NULL};
    r = run_template(a5);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "unclosed 'if' block (opened at 2:1)");
    run_result_free(&r);
    free(syntax);

    const char *missing[] = {"--template-file", "/nonexistent/t.jinja", "--messages", conv, NULL};
    r = run_template(missing);
    assert_int_equal(r.status, 1);
    assert_contains(r.err, "/nonexistent/t.jinja: cannot open");
    run_result_free(&r);

    /* usage errors */
    const char *no_msgs[] = {"--template-file", tmpl, NULL};
    r = run_template(no_msgs);
    assert_int_equal(r.status, 2);
    run_result_free(&r);
    const char *both[] = {"-m", tmpl, "--template-file", tmpl, "--messages", conv, NULL};
    r = run_template(both);
    assert_int_equal(r.status, 2);
    run_result_free(&r);
    const char *unknown[] = {"--frob", NULL};
    r = run_template(unknown);
    assert_int_equal(r.status, 2);
    assert_contains(r.err, "unknown option '--frob'");
    run_result_free(&r);
    const char *help[] = {"--help", NULL};
    r = run_template(help);
    assert_int_equal(r.status, 0);
    assert_contains(r.out, "usage: strata template");
    run_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_with_options),
        cmocka_unit_test(test_golden_from_the_messages_file),
        cmocka_unit_test(test_plain_array_and_flags),
        cmocka_unit_test(test_model_template),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
