/* Real chat templates against Python Jinja2's renders.
 *
 * ../shared/data/golden/templates/<name>.txt is what Hugging Face's way of
 * rendering (Jinja2, trim_blocks, lstrip_blocks, loop controls, tojson
 * without ASCII escapes, strftime_now fixed to 2026-11-30) made of
 * templates/conversation.json with add_generation_prompt true, bos "<s>",
 * eos "</s>" and tools undefined. Every template of
 * chat-templates/llama.cpp-jinja/ that has such a file must give the same
 * bytes; the ones without (firefunction-v2, gemma-2-2b-it) raise on this
 * conversation in Jinja2, and must fail here too, with a message that says
 * why and where.
 *
 * golden/templates-tools/ is the same for a conversation with a tool call,
 * the tool's result and `tools` defined (its conversation.json); 64 of the
 * templates render it, the others raise in Jinja2 and must raise here, but
 * for the few g_deliberate_renders lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "text/chat_template.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TEMPLATES 256

/* Where this renderer departs from Hugging Face's sandbox on purpose
 * (jinja_methods.c, jinja_filters.c): Jinja2 raises on these for the tool
 * conversation, this renderer renders them, and what it renders equals
 * Jinja2 without the sandbox (plain Environment, a tojson that takes a
 * generator as its list). Listed, so that any other template which renders
 * where Jinja2 raises still fails the test. */
static const struct {
    const char *golden_dir, *name, *why;
} g_deliberate_renders[] = {
    {"golden/templates-tools", "Kimi-K2-Instruct", "list.append is allowed (unsafe in the sandbox)"},
    {"golden/templates-tools", "Kimi-K2-Thinking", "list.append is allowed (unsafe in the sandbox)"},
    {"golden/templates-tools", "llama-cpp-deepseek-r1",
     "map returns a list, which tojson takes (Jinja2's generator is not JSON serializable)"},
};

static const char *deliberate_render(const char *golden_dir, const char *name)
{
    for (size_t i = 0; i < sizeof(g_deliberate_renders) / sizeof(g_deliberate_renders[0]); i++)
        if (!strcmp(g_deliberate_renders[i].golden_dir, golden_dir) && !strcmp(g_deliberate_renders[i].name, name))
            return g_deliberate_renders[i].why;
    return NULL;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The stems of dir/ *.ext, sorted; returns how many (caller frees). */
static size_t list_stems(const char *dir, const char *ext, char **names, size_t max)
{
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    size_t n = 0, el = strlen(ext);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        size_t len = strlen(e->d_name);
        if (len > el && strcmp(e->d_name + len - el, ext) == 0) {
            names[n] = strndup(e->d_name, len - el);
            assert_non_null(names[n]);
            n++;
        }
    }
    closedir(d);
    qsort(names, n, sizeof(char *), cmp_names);
    return n;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static json_t *load_conversation(const char *golden_dir)
{
    char conv[4096], rel[256];
    snprintf(rel, sizeof(rel), "%s/conversation.json", golden_dir);
    if (testdata_path(conv, sizeof(conv), rel) == NULL) return NULL;
    json_error_t je;
    json_t *doc = json_load_file(conv, 0, &je);
    if (doc == NULL) fail_msg("conversation.json: %s", je.text);
    return doc;
}

static json_t *load_messages(void) { return load_conversation("golden/templates"); }

/* Renders one template file for the golden conversation. */
static int render_file_tools(const char *path, const json_t *messages, const json_t *tools,
                             char **out, size_t *len, strata_err *err)
{
    size_t n;
    char *src = testdata_read_file(path, &n);
    if (src == NULL) fail_msg("cannot read %s", path);
    chat_template_opts o = {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>",
                            .tools = tools, .year = 2026, .month = 11, .day = 30};
    int rc = chat_template_render(src, n, messages, &o, out, len, err);
    free(src);
    return rc;
}

static int render_file(const char *path, const json_t *messages, char **out, size_t *len,
                       strata_err *err)
{
    return render_file_tools(path, messages, NULL, out, len, err);
}

/* The first line where a and b differ, for the failure message. */
static void first_difference(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0, line = 1, line_start = 0;
    while (i < na && i < nb && a[i] == b[i]) {
        if (a[i] == '\n') {
            line++;
            line_start = i + 1;
        }
        i++;
    }
    print_message("  first difference at byte %zu (line %zu):\n  want: %.80s\n  got:  %.80s\n", i, line,
                  b + (line_start < nb ? line_start : nb), a + (line_start < na ? line_start : na));
}

/* Renders every template of llama.cpp-jinja/ for golden_dir's conversation
 * (with its `tools` when it has them) and compares with golden_dir/NAME.txt;
 * a template without a file must raise. min_golden is a floor, not an
 * equality, so that data which grows keeps passing while a partial copy of
 * it does not. */
static void check_golden_dir(const char *golden_dir, size_t min_golden)
{
    TESTDATA_REQUIRE();
    char dir[4096];
    TESTDATA_FILE(dir, "chat-templates/llama.cpp-jinja");
    json_t *doc = load_conversation(golden_dir);
    assert_non_null(doc);
    const json_t *messages = json_object_get(doc, "messages");
    assert_true(json_is_array(messages));
    const json_t *tools = json_object_get(doc, "tools"); /* NULL: undefined */

    char *names[MAX_TEMPLATES];
    size_t n = list_stems(dir, ".jinja", names, MAX_TEMPLATES);
    /* the reference data holds 71 templates */
    assert_true(n >= 71);
    size_t n_golden = 0, n_pass = 0, n_raise = 0, n_deliberate = 0;
    for (size_t i = 0; i < n; i++) {
        char tpath[4400], gpath[4096], rel[512];
        snprintf(tpath, sizeof(tpath), "%s/%s.jinja", dir, names[i]);
        snprintf(rel, sizeof(rel), "%s/%s.txt", golden_dir, names[i]);
        bool has_golden = testdata_path(gpath, sizeof(gpath), rel) != NULL && file_exists(gpath);
        strata_err err = {0};
        char *out;
        size_t len;
        int rc = render_file_tools(tpath, messages, tools, &out, &len, &err);
        const char *why = deliberate_render(golden_dir, names[i]);
        if (!has_golden && why != NULL) {
            if (rc == 0) {
                print_message("renders %s: %s\n", names[i], why);
                n_deliberate++;
            } else {
                print_message("FAIL %s: should render (%s): %s\n", names[i], why, err.msg);
            }
            free(out);
            continue;
        }
        if (!has_golden) {
            /* Jinja2 raised here; so must we */
            if (rc == 0) {
                print_message("FAIL %s: Jinja2 raises on this conversation, this rendered %zu bytes\n", names[i], len);
            } else {
                print_message("raises %s: %s\n", names[i], err.msg);
                n_raise++;
            }
            free(out);
            continue;
        }
        n_golden++;
        size_t want_len;
        char *want = testdata_read_file(gpath, &want_len);
        assert_non_null(want);
        if (rc != 0) {
            print_message("FAIL %s: %s\n", names[i], err.msg);
        } else if (len != want_len || memcmp(out, want, len) != 0) {
            print_message("FAIL %s: output differs (%zu bytes, want %zu)\n", names[i], len, want_len);
            first_difference(out, len, want, want_len);
        } else {
            n_pass++;
        }
        free(want);
        free(out);
    }
    print_message("%s: %zu of %zu golden renders match byte for byte; %zu of %zu "
                  "templates without a golden file raise, %zu render on purpose\n",
                  golden_dir, n_pass, n_golden, n_raise, n - n_golden, n_deliberate);
    for (size_t i = 0; i < n; i++) free(names[i]);
    json_decref(doc);
    /* every render of golden_dir was compared (none skipped) */
    char gdir[4096];
    TESTDATA_FILE(gdir, golden_dir);
    char *gnames[MAX_TEMPLATES];
    size_t n_golden_files = list_stems(gdir, ".txt", gnames, MAX_TEMPLATES);
    for (size_t i = 0; i < n_golden_files; i++) free(gnames[i]);
    assert_true(n_golden >= min_golden);
    assert_int_equal(n_golden, n_golden_files);
    assert_int_equal(n_pass, n_golden);
    assert_int_equal(n_raise + n_deliberate, n - n_golden);
}

static void test_every_golden_render_matches(void **state)
{
    (void)state;
    /* 69 renders: two templates raise */
    check_golden_dir("golden/templates", 69);
}

/* The tool conversation: 64 renders; seven templates raise in Jinja2, four
 * of them here (g_deliberate_renders has the other three). */
static void test_every_tools_render_matches(void **state)
{
    (void)state;
    check_golden_dir("golden/templates-tools", 64);
}

/* The two templates that raise do so for the reason Jinja2 gives. */
static void test_raising_templates_say_why(void **state)
{
    (void)state;
    static const struct {
        const char *file, *msg;
    } cases[] = {
        {"chat-templates/llama.cpp-jinja/google-gemma-2-2b-it.jinja",
         "template 1:59: System role not supported"},
        {"chat-templates/llama.cpp-jinja/fireworks-ai-llama-3-firefunction-v2.jinja",
         "template 21:60: 'functions' is undefined"},
    };
    json_t *doc = load_messages();
    if (doc == NULL) skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[4096];
        TESTDATA_FILE(path, cases[i].file);
        strata_err err = {0};
        char *out;
        size_t len;
        assert_int_equal(render_file(path, json_object_get(doc, "messages"), &out, &len, &err), STRATA_EINVAL);
        assert_null(out);
        assert_string_equal(err.msg, cases[i].msg);
    }
    json_decref(doc);
}

/* Every golden file belongs to a template: none is skipped unnoticed. */
static void check_no_orphans(const char *golden_dir, size_t min_golden)
{
    char gdir[4096], tdir[4096];
    TESTDATA_FILE(gdir, golden_dir);
    TESTDATA_FILE(tdir, "chat-templates/llama.cpp-jinja");
    char *names[MAX_TEMPLATES];
    size_t n = list_stems(gdir, ".txt", names, MAX_TEMPLATES);
    assert_true(n >= min_golden);
    for (size_t i = 0; i < n; i++) {
        char p[4400];
        snprintf(p, sizeof(p), "%s/%s.jinja", tdir, names[i]);
        if (!file_exists(p)) fail_msg("golden file %s.txt has no template", names[i]);
        free(names[i]);
    }
}

static void test_no_orphan_golden_files(void **state)
{
    (void)state;
    check_no_orphans("golden/templates", 69);
    check_no_orphans("golden/templates-tools", 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_golden_render_matches),
        cmocka_unit_test(test_every_tools_render_matches),
        cmocka_unit_test(test_raising_templates_say_why),
        cmocka_unit_test(test_no_orphan_golden_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
