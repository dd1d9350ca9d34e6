/* Anthropic's Messages API over the chat path (serve/anthropic.h): a
 * Messages body's translation into the chat body (system, text blocks,
 * tool_use and tool_result turns, tools, tool_choice, stop sequences,
 * thinking, streaming usage) and its refusals; a chat response into
 * Anthropic's message (thinking, text and tool_use blocks, stop reasons,
 * usage); chat stream chunks into Anthropic's event sequence (blocks
 * opened and closed as the kind changes, indices, input_json_delta, the
 * stop reason with the usage). The end to end run with the official
 * client is tests/e2e/anthropic.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/anthropic.h"
#include "translate_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int full(const char *body, size_t len, char **out, api_error *e)
{
    return anthropic_to_chat(body, len, false, out, e);
}

static int count_only(const char *body, size_t len, char **out, api_error *e)
{
    return anthropic_to_chat(body, len, true, out, e);
}

static json_t *chat_of(const char *body, bool counting)
{
    return tt_chat_of(counting ? count_only : full, body);
}

static void refused(const char *body, const char *needle)
{
    tt_refused(full, body, needle);
}

static void test_request(void **state)
{
    (void)state;
    json_t *c = chat_of("{\"model\":\"claude-x\",\"max_tokens\":64,\"temperature\":0.5,\"top_k\":5,"
                        "\"system\":[{\"type\":\"text\",\"text\":\"Be \"},{\"type\":\"text\",\"text\":\"brief.\"}],"
                        "\"stop_sequences\":[\"END\"],\"stream\":true,"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
                        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
                        "{\"type\":\"text\",\"text\":\"Let me see.\"},"
                        "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
                        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
                        "\"content\":[{\"type\":\"text\",\"text\":\"21 C\"}]},{\"type\":\"text\",\"text\":\"And?\"}]}],"
                        "\"tools\":[{\"name\":\"get_weather\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
                        "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
                        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
                        false);
    tt_assert_json(c, "{\"temperature\":0.5,\"top_k\":5,\"stream\":true,\"max_tokens\":64,"
                   "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":\"Weather?\"},"
                   "{\"role\":\"assistant\",\"content\":\"Let me see.\",\"tool_calls\":[{\"id\":\"toolu_1\","
                   "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}],"
                   "\"reasoning_content\":\"hmm\"},"
                   "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"21 C\"},"
                   "{\"role\":\"user\",\"content\":\"And?\"}],"
                   "\"stop\":[\"END\"],"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
                   "\"parameters\":{\"type\":\"object\"}}}],"
                   "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
                   "\"chat_template_kwargs\":{\"enable_thinking\":true},"
                   "\"stream_options\":{\"include_usage\":true}}");
    json_decref(c);
    /* tool_choice forms; count_tokens needs no max_tokens */
    c = chat_of("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"}}", true);
    tt_assert_json(json_object_get(c, "tool_choice"), "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}");
    json_decref(c);
    c = chat_of("{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"none\"},"
                "\"thinking\":{\"type\":\"disabled\"}}",
                false);
    assert_string_equal(json_string_value(json_object_get(c, "tool_choice")), "none");
    tt_assert_json(json_object_get(c, "chat_template_kwargs"), "{\"enable_thinking\":false}");
    json_decref(c);

    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "`max_tokens`");
    refused("{\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "`max_tokens`");
    refused("{\"max_tokens\":5,\"messages\":[]}", "`messages`");
    refused("{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "`messages[0].role`");
    refused("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
            "image");
    refused("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\","
            "\"name\":\"f\",\"input\":{}}]}]}",
            "tool_use");
    refused("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":\"x\"}}",
            "`tool_choice`");
    refused("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
            "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}",
            "`tools[0]`");
    refused("{\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
            "`system[0]`");
    refused("[1]", "JSON object");
}

static void test_response(void **state)
{
    (void)state;
    json_t *chat = json_loads(
        "{\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
        "\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":\"abc123def\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}],"
        "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,"
        "\"prompt_tokens_details\":{\"cached_tokens\":4}}}",
        0, NULL);
    json_t *a = anthropic_response(chat, 7, NULL);
    tt_assert_json(a, "{\"id\":\"msg_7\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\","
                   "\"content\":[{\"type\":\"thinking\",\"thinking\":\"think\",\"signature\":\"\"},"
                   "{\"type\":\"tool_use\",\"id\":\"abc123def\",\"name\":\"f\",\"input\":{\"a\":1}}],"
                   "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,"
                   "\"usage\":{\"input_tokens\":10,\"output_tokens\":5,\"cache_read_input_tokens\":4}}");
    json_decref(a);
    json_decref(chat);
    static const struct {
        const char *finish, *stop, *reason;
    } cases[] = {{"length", NULL, "max_tokens"}, {"stop", NULL, "end_turn"}, {"stop", "END", "stop_sequence"}};
    for (size_t i = 0; i < 3; i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"model\":\"m\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},"
                 "\"finish_reason\":\"%s\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
                 cases[i].finish);
        chat = json_loads(body, 0, NULL);
        a = anthropic_response(chat, 1, cases[i].stop);
        assert_string_equal(json_string_value(json_object_get(a, "stop_reason")), cases[i].reason);
        tt_assert_json(json_object_get(a, "content"), "[{\"type\":\"text\",\"text\":\"hi\"}]");
        if (cases[i].stop) assert_string_equal(json_string_value(json_object_get(a, "stop_sequence")), "END");
        json_decref(a);
        json_decref(chat);
    }
}

/* The events of chunks[] (JSON texts), as "name index; ..." */
static void events_of(const char *const *chunks, size_t n, const char *stop, char *out, size_t cap)
{
    anthropic_stream st = {.input_tokens = 9};
    sbuf buf = {0};
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_loads(chunks[i], 0, NULL);
        assert_non_null(c);
        anthropic_stream_chunk(&st, c, 3, "m", stop, &buf);
        json_decref(c);
    }
    size_t k = 0;
    out[0] = '\0';
    for (const char *p = buf.data; p != NULL && (p = strstr(p, "event: ")) != NULL;) {
        p += 7;
        const char *nl = strchr(p, '\n');
        const char *data = strstr(nl, "data: ") + 6;
        const char *end = strstr(data, "\n\n");
        json_t *d = json_loadb(data, (size_t)(end - data), 0, NULL);
        assert_non_null(d);
        assert_int_equal(strncmp(json_string_value(json_object_get(d, "type")), p, (size_t)(nl - p)), 0);
        json_t *idx = json_object_get(d, "index");
        json_t *delta = json_object_get(d, "delta");
        const char *dt = json_string_value(json_object_get(delta, "type"));
        const char *reason = json_string_value(json_object_get(delta, "stop_reason"));
        k += (size_t)snprintf(out + k, cap - k, "%.*s", (int)(nl - p), p);
        if (idx != NULL) k += (size_t)snprintf(out + k, cap - k, " %lld", (long long)json_integer_value(idx));
        if (dt != NULL) k += (size_t)snprintf(out + k, cap - k, " %s", dt);
        if (reason != NULL) k += (size_t)snprintf(out + k, cap - k, " %s", reason);
        k += (size_t)snprintf(out + k, cap - k, "; ");
        json_decref(d);
        p = end;
    }
    sbuf_free(&buf);
}

static void test_stream(void **state)
{
    (void)state;
    const char *chunks[] = {
        "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"m\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"abc\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]},"
        "\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"def\",\"type\":\"function\","
        "\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"},\"finish_reason\":null}]}",
    };
    char ev[2048];
    events_of(chunks, sizeof(chunks) / sizeof(chunks[0]), NULL, ev, sizeof(ev));
    assert_string_equal(ev, "message_start; content_block_start 0; content_block_delta 0 thinking_delta; "
                            "content_block_delta 0 thinking_delta; content_block_delta 0 signature_delta; "
                            "content_block_stop 0; content_block_start 1; content_block_delta 1 text_delta; "
                            "content_block_stop 1; content_block_start 2; content_block_delta 2 input_json_delta; "
                            "content_block_stop 2; content_block_start 3; content_block_stop 3; "
                            "message_delta tool_use; message_stop; ");
    const char *text[] = {
        "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"a\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}",
    };
    events_of(text, 3, "END", ev, sizeof(ev));
    assert_string_equal(ev, "message_start; content_block_start 0; content_block_delta 0 text_delta; "
                            "content_block_stop 0; message_delta stop_sequence; message_stop; ");
    text[1] = "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}";
    events_of(text, 3, NULL, ev, sizeof(ev));
    assert_non_null(strstr(ev, "message_delta max_tokens;"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_response),
        cmocka_unit_test(test_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
