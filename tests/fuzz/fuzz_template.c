/* libFuzzer target for the chat-template engine (src/text/jinja*.c): any
 * bytes are a template; it is parsed and, when that works, rendered with a
 * conversation that has every kind of message chat templates look at
 * (system, user, assistant with tool calls and reasoning, tool results,
 * multi-part content) and a tools list, under small limits so each input
 * runs quickly. A crash, a sanitizer report, a hang past libFuzzer's
 * -timeout or an error without a "template" message is a finding.
 *
 * The input is copied into an exactly sized heap block so ASan sees any
 * read past the end of the source. */
#include "text/jinja.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const g_vars_json =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    "{\"role\": \"user\", \"content\": \"Hello \\u00e9\\u65e5 \\\"quoted\\\"\\n\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\","
    " \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"days\": 3}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\", \"content\": \"{\\\"t\\\": 21}\"},"
    "{\"role\": \"assistant\", \"content\": \"It is 21.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part one\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
    " \"days\": {\"type\": \"integer\"}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}},"
    " \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"enable_thinking\": false, \"n\": null, \"x\": 1.5}";

static json_t *g_vars;

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (g_vars == NULL) {
        g_vars = json_loads(g_vars_json, 0, NULL);
        check(g_vars != NULL);
    }
    char *src = malloc(size ? size : 1);
    check(src != NULL);
    if (size) memcpy(src, data, size);

    jinja_template *t;
    strata_err err = {0};
    int rc = jinja_template_parse(&t, src, size, &err);
    if (rc != 0) {
        check(rc < 0 && strncmp(err.msg, "template", 8) == 0);
    } else {
        jinja_render_opts o = {.vars = g_vars, .year = 2026, .month = 11, .day = 30,
                               .limits = {.max_steps = 200000, .max_output_bytes = 1 << 20,
                                          .max_memory_bytes = 64 << 20}};
        char *out = NULL;
        size_t len = 0;
        rc = jinja_render(t, &o, &out, &len, &err);
        if (rc == 0) {
            check(out != NULL && out[len] == '\0' && len <= (1u << 20));
        } else {
            check(out == NULL && strncmp(err.msg, "template", 8) == 0);
        }
        free(out);
        jinja_template_free(t);
    }
    free(src);
    return 0;
}
