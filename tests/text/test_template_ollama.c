/* Real Hugging Face chat templates of 17 families against Ollama's
 * expected prompts (../shared/data/chat-templates/ollama/).
 *
 * templates.jsonl maps a family name to a real Jinja template of that
 * family (35 lines); <family>.gotmpl/ holds the prompts Ollama's own Go
 * template of the family makes of three conversations. Each line is
 * rendered for each conversation with:
 * - bos_token "": Ollama's expected prompts have no BOS text, because the
 *   tokenizer adds BOS as a token id, not as text. A template that prints
 *   `{{ bos_token }}` must then print nothing there to match.
 * - eos_token "</s>": the expected prompts of zephyr and solar carry the
 *   EOS text "</s>" after assistant turns, which the HF templates print
 *   as `eos_token`.
 * - add_generation_prompt true (the expected prompts end ready for the
 *   assistant).
 *
 * A HF template and Ollama's Go template of a family are different
 * programs: some add a default system prompt, some drop or reject system
 * messages, some space differently. So not every render can equal the
 * expected prompt. The table below says, per line and conversation, what
 * Python's Jinja2 3.1 (HF's settings) makes of it, and this engine must do
 * the same:
 *   'E' the render equals Ollama's expected prompt byte for byte;
 *   'd' it differs by the template's own wording, with every message's
 *       text in order;
 *   's' as 'd', but the template drops the system message;
 *   'R' the template raises (message in `raises`). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "text/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_conv_names[3] = {"user", "user-assistant-user", "system-user-assistant-user"};

static const char *const g_system = "You are a helpful assistant.";
static const char *const g_user1 = "Hello, how are you?";
static const char *const g_assistant = "I'm doing great. How can I help you today?";
static const char *const g_user2 = "I'd like to show off how chat templating works!";

typedef struct line_expect {
    const char *family;
    const char *codes;  /* one per conversation, in g_conv_names order */
    const char *raises; /* for 'R' */
} line_expect;

/* Line i of templates.jsonl (1-based in the comments). */
static const line_expect g_expect[] = {
    {"chatml", "EEd", NULL},                                  /* 1: prints the system text bare */
    {"chatml", "EEE", NULL},                                  /* 2 */
    {"zephyr", "EEE", NULL},                                  /* 3 */
    {"chatml", "EEE", NULL},                                  /* 4 */
    {"openchat", "EEE", NULL},                                /* 5 */
    {"chatml", "EEE", NULL},                                  /* 6 */
    {"chatml", "EEE", NULL},                                  /* 7 */
    {"chatml", "ddE", NULL},                                  /* 8: default system prompt */
    {"chatml", "ddE", NULL},                                  /* 9: default system prompt */
    {"zephyr", "dds", NULL},                                  /* 10: no </s> after user turns */
    {"mistral-instruct", "ddR", "Conversation roles must alternate"}, /* 11 */
    {"starcoder2-instruct", "ddR", "System messages are not allowed"}, /* 12 */
    {"llama2-chat", "ddd", NULL},                             /* 13 */
    {"codellama-70b-instruct", "ddd", NULL},                  /* 14: prints "<s>" literally */
    {"mistral-instruct", "ddR", "Conversation roles must alternate"}, /* 15 */
    {"chatml", "EEE", NULL},                                  /* 16 */
    {"chatml", "EEE", NULL},                                  /* 17 */
    {"chatml", "ddE", NULL},                                  /* 18: default system prompt */
    {"chatml", "ddE", NULL},                                  /* 19: default system prompt */
    {"alpaca", "ddd", NULL},                                  /* 20: DeepSeek Coder's own prompt */
    {"chatqa", "Edd", NULL},                                  /* 21 */
    {"gemma-instruct", "EER", "System role not supported"},   /* 22 */
    {"llama3-instruct", "EEE", NULL},                         /* 23 */
    {"granite-instruct", "EEE", NULL},                        /* 24 */
    {"magicoder", "ddR", "System messages are not allowed"},  /* 25 */
    {"alfred", "EEE", NULL},                                  /* 26 */
    {"llama2-chat", "ddd", NULL},                             /* 27 */
    {"phi-3", "EEs", NULL},                                   /* 28 */
    {"phi-3", "EEs", NULL},                                   /* 29 */
    {"phi-3", "EEE", NULL},                                   /* 30 */
    {"chatqa", "dds", NULL},                                  /* 31: its own system prompt */
    {"falcon-instruct", "ddd", NULL},                         /* 32 */
    {"falcon-instruct", "ddd", NULL},                         /* 33 */
    {"solar-instruct", "Edd", NULL},                          /* 34 */
    {"chatml", "ddE", NULL},                                  /* 35: default system prompt */
};
#define N_LINES (sizeof(g_expect) / sizeof(g_expect[0]))

static json_t *message(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static json_t *conversation(int k)
{
    json_t *a = json_array();
    if (k == 2) json_array_append_new(a, message("system", g_system));
    json_array_append_new(a, message("user", g_user1));
    if (k >= 1) {
        json_array_append_new(a, message("assistant", g_assistant));
        json_array_append_new(a, message("user", g_user2));
    }
    return a;
}

/* Each text of the conversation appears in out, in order. */
static bool texts_in_order(const char *out, int k, bool skip_system)
{
    const char *texts[4];
    int n = 0;
    if (k == 2 && !skip_system) texts[n++] = g_system;
    texts[n++] = g_user1;
    if (k >= 1) {
        texts[n++] = g_assistant;
        texts[n++] = g_user2;
    }
    const char *p = out;
    for (int i = 0; i < n; i++) {
        const char *hit = strstr(p, texts[i]);
        if (hit == NULL) return false;
        p = hit + strlen(texts[i]);
    }
    return true;
}

static void test_ollama_families(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "chat-templates/ollama/templates.jsonl");
    size_t n_bytes;
    char *text = testdata_read_file(path, &n_bytes);
    assert_non_null(text);

    size_t line = 0, n_exact = 0, n_differ = 0, n_raise = 0, n_fail = 0;
    const char *family_full[N_LINES];
    size_t n_family_full = 0;
    for (char *p = text, *nl; p < text + n_bytes && *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (nl == NULL) nl = p + strlen(p);
        if (nl == p) continue;
        json_error_t je;
        json_t *obj = json_loadb(p, (size_t)(nl - p), 0, &je);
        if (obj == NULL) fail_msg("templates.jsonl line %zu: %s", line + 1, je.text);
        assert_true(line < N_LINES);
        const line_expect *ex = &g_expect[line];
        const char *family = json_object_iter_key(json_object_iter(obj));
        const json_t *tv = json_object_iter_value(json_object_iter(obj));
        assert_string_equal(family, ex->family);
        assert_true(json_is_string(tv));
        jinja_template *t;
        strata_err err = {0};
        if (jinja_template_parse(&t, json_string_value(tv), json_string_length(tv), &err) != 0)
            fail_msg("line %zu (%s): %s", line + 1, family, err.msg);
        int n_exact_here = 0;
        for (int k = 0; k < 3; k++) {
            char rel[512], *want;
            size_t want_len;
            snprintf(rel, sizeof(rel), "chat-templates/ollama/%s.gotmpl/%s", family, g_conv_names[k]);
            TESTDATA_FILE(path, rel);
            want = testdata_read_file(path, &want_len);
            assert_non_null(want);
            json_t *msgs = conversation(k);
            chat_template_opts o = {.add_generation_prompt = true, .bos_token = "", .eos_token = "</s>",
                                    .year = 2026, .month = 11, .day = 30};
            char *out;
            size_t len;
            int rc = chat_template_render_parsed(t, msgs, &o, &out, &len, &err);
            char code = ex->codes[k];
            bool ok;
            if (code == 'R') {
                ok = rc == STRATA_EINVAL && strstr(err.msg, ex->raises) != NULL;
                n_raise += ok;
            } else if (rc != 0) {
                ok = false;
                print_message("line %zu (%s) %s: %s\n", line + 1, family, g_conv_names[k], err.msg);
            } else if (code == 'E') {
                ok = len == want_len && memcmp(out, want, len) == 0;
                n_exact += ok;
                n_exact_here += ok;
            } else {
                /* as Jinja2: not the expected prompt, but every text in order */
                ok = !(len == want_len && memcmp(out, want, len) == 0) &&
                     texts_in_order(out, k, code == 's');
                n_differ += ok;
            }
            if (!ok) {
                n_fail++;
                print_message("FAIL line %zu (%s) %s, want '%c':\n  want [%s]\n  got  [%.*s]\n", line + 1,
                              family, g_conv_names[k], code, want, rc == 0 ? (int)len : 0, rc == 0 ? out : "");
            }
            free(out);
            free(want);
            json_decref(msgs);
        }
        if (n_exact_here == 3) {
            bool seen = false;
            for (size_t i = 0; i < n_family_full; i++) seen |= strcmp(family_full[i], ex->family) == 0;
            if (!seen) family_full[n_family_full++] = ex->family;
        }
        jinja_template_free(t);
        json_decref(obj);
        line++;
    }
    print_message("ollama: %zu templates x 3 conversations: %zu equal the expected prompt, %zu differ "
                  "by the template's own wording, %zu raise (all as in Jinja2); %zu families are "
                  "reproduced exactly by at least one template\n",
                  line, n_exact, n_differ, n_raise, n_family_full);
    free(text);
    assert_int_equal(line, N_LINES);
    assert_int_equal(n_fail, 0);
    assert_int_equal(n_exact, 51);
    assert_int_equal(n_family_full, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ollama_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
