/* OpenAI's Responses API over the chat path (serve/responses.h): a
 * Responses body's translation into the chat body (instructions, input
 * items with consecutive function calls grouped into one assistant turn,
 * tool outputs, reasoning, function tools, tool_choice, text.format,
 * reasoning.effort, max_output_tokens) and its refusals (what needs stored
 * responses, other tool types); a chat response into output items and
 * status; chat stream chunks into the event sequence the openai clients
 * assemble (sequence numbers, indices, the .done events with the whole
 * text). The end to end run is tests/e2e/responses.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "serve/responses.h"
#include "translate_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *chat_of(const char *body)
{
    return tt_chat_of(responses_to_chat, body);
}

static void refused(const char *body, const char *needle)
{
    tt_refused(responses_to_chat, body, needle);
}

static void test_request(void **state)
{
    (void)state;
    json_t *c = chat_of(
        "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"max_output_tokens\":50,\"temperature\":0,\"stream\":true,"
        "\"input\":[{\"role\":\"developer\",\"content\":\"Use tools.\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather \"},"
        "{\"type\":\"input_text\",\"text\":\"in Paris and Rome?\"}]},"
        "{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"two calls\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"20 C\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"25 C\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Warm.\"}]},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"description\":\"d\",\"parameters\":{\"type\":\"object\"},\"strict\":true}],"
        "\"tool_choice\":\"required\",\"parallel_tool_calls\":true,\"reasoning\":{\"effort\":\"low\"},"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{\"type\":\"object\"},\"strict\":true}},"
        "\"store\":true,\"include\":[\"reasoning.encrypted_content\"]}");
    tt_assert_json(c, "{\"model\":\"m\",\"temperature\":0,\"stream\":true,\"parallel_tool_calls\":true,\"max_tokens\":50,"
                   "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"system\",\"content\":\"Use tools.\"},"
                   "{\"role\":\"user\",\"content\":\"Weather in Paris and Rome?\"},"
                   "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"two calls\",\"tool_calls\":["
                   "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                   "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
                   "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"20 C\"},"
                   "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"25 C\"},"
                   "{\"role\":\"assistant\",\"content\":\"Warm.\"},"
                   "{\"role\":\"user\",\"content\":\"Thanks\"}],"
                   "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"description\":\"d\","
                   "\"parameters\":{\"type\":\"object\"}}}],"
                   "\"tool_choice\":\"required\",\"reasoning_effort\":\"low\","
                   "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                   "\"schema\":{\"type\":\"object\"},\"strict\":true}},"
                   "\"stream_options\":{\"include_usage\":true}}");
    json_decref(c);
    c = chat_of("{\"input\":\"hi\",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"text\":{\"format\":{\"type\":\"json_object\"}}}");
    tt_assert_json(json_object_get(c, "messages"), "[{\"role\":\"user\",\"content\":\"hi\"}]");
    tt_assert_json(json_object_get(c, "tool_choice"), "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}");
    tt_assert_json(json_object_get(c, "response_format"), "{\"type\":\"json_object\"}");
    json_decref(c);

    refused("{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id");
    refused("{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation");
    refused("{\"input\":\"x\",\"background\":true}", "background");
    refused("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "`tools[0]`");
    refused("{\"input\":[]}", "`input`");
    refused("{}", "`input`");
    refused("{\"input\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}", "input_image");
    refused("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}", "`input[0].content[0]`");
    refused("{\"input\":[{\"role\":\"critic\",\"content\":\"x\"}]}", "`input[0].role`");
    refused("{\"input\":\"x\",\"max_output_tokens\":0}", "`max_output_tokens`");
    refused("{\"input\":\"x\",\"top_logprobs\":2}", "top_logprobs");
    refused("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "`text.format.type`");
}

static void test_response(void **state)
{
    (void)state;
    json_t *chat = json_loads(
        "{\"model\":\"m\",\"created\":123,\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"ok\","
        "\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":\"abc\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}],"
        "\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4}}}",
        0, NULL);
    json_t *r = responses_response(chat, 7);
    assert_string_equal(json_string_value(json_object_get(r, "id")), "resp_7");
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    assert_int_equal(json_integer_value(json_object_get(r, "created_at")), 123);
    tt_assert_json(json_object_get(r, "output"),
                "[{\"id\":\"rs_7\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"think\"}]},"
                "{\"id\":\"msg_7\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\","
                "\"content\":[{\"type\":\"output_text\",\"text\":\"ok\",\"annotations\":[],\"logprobs\":[]}]},"
                "{\"id\":\"fc_7_0\",\"type\":\"function_call\",\"status\":\"completed\",\"call_id\":\"abc\",\"name\":\"f\","
                "\"arguments\":\"{}\"}]");
    tt_assert_json(json_object_get(r, "usage"), "{\"input_tokens\":10,\"input_tokens_details\":{\"cached_tokens\":4},"
                                             "\"output_tokens\":5,\"output_tokens_details\":{\"reasoning_tokens\":0},"
                                             "\"total_tokens\":15}");
    json_decref(r);
    json_decref(chat);
    chat = json_loads("{\"model\":\"m\",\"choices\":[{\"message\":{\"content\":\"a\"},\"finish_reason\":\"length\"}],"
                      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
                      0, NULL);
    r = responses_response(chat, 1);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "incomplete");
    tt_assert_json(json_object_get(r, "incomplete_details"), "{\"reason\":\"max_output_tokens\"}");
    json_decref(r);
    json_decref(chat);
}

static void test_stream(void **state)
{
    (void)state;
    const char *chunks[] = {
        "{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hm\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"abc\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]},\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},"
        "\"finish_reason\":null}]}",
        "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
        "{\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4}}",
    };
    responses_stream st = {0};
    sbuf out = {0};
    for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
        json_t *c = json_loads(chunks[i], 0, NULL);
        responses_stream_chunk(&st, c, 5, "m", &out);
        json_decref(c);
    }
    /* the events in order, each with its sequence number; the last holds
     * the whole response */
    char names[2048] = "";
    size_t k = 0;
    int64_t seq = 0;
    json_t *last = NULL;
    for (const char *p = out.data; (p = strstr(p, "event: ")) != NULL;) {
        p += 7;
        const char *nl = strchr(p, '\n');
        const char *data = nl + 7, *end = strstr(data, "\n\n");
        json_t *d = json_loadb(data, (size_t)(end - data), 0, NULL);
        assert_non_null(d);
        assert_int_equal(json_integer_value(json_object_get(d, "sequence_number")), seq++);
        assert_int_equal(strncmp(json_string_value(json_object_get(d, "type")), p, (size_t)(nl - p)), 0);
        k += (size_t)snprintf(names + k, sizeof(names) - k, "%.*s %lld; ", (int)(nl - p) - 9, p + 9,
                              (long long)json_integer_value(json_object_get(d, "output_index")));
        json_decref(last);
        last = d;
        p = end;
    }
    assert_string_equal(names,
                        "created 0; in_progress 0; output_item.added 0; content_part.added 0; reasoning_text.delta 0; "
                        "reasoning_text.done 0; content_part.done 0; output_item.done 0; output_item.added 1; "
                        "content_part.added 1; output_text.delta 1; output_text.delta 1; output_text.done 1; "
                        "content_part.done 1; output_item.done 1; output_item.added 2; "
                        "function_call_arguments.delta 2; function_call_arguments.delta 2; "
                        "function_call_arguments.done 2; output_item.done 2; completed 0; ");
    json_t *resp = json_object_get(last, "response");
    assert_string_equal(json_string_value(json_object_get(resp, "status")), "completed");
    json_t *output = json_object_get(resp, "output");
    assert_int_equal(json_array_size(output), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(output, 1),
                                                                                          "content"), 0), "text")),
                        "Hi there");
    assert_string_equal(json_string_value(json_object_get(json_array_get(output, 2), "arguments")), "{\"a\":1}");
    assert_string_equal(json_string_value(json_object_get(json_array_get(output, 2), "call_id")), "abc");
    json_decref(last);
    sbuf_free(&out);
    responses_stream_free(&st);
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
