/* Anthropic's Messages API over the chat path (anthropic.h). */
#include "serve/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- request ---- */

static const char *const k_text_types[] = {"text", NULL};

/* The text of a `content` that is a string or an array of text blocks. */
static json_t *text_of(json_t *content, const char *where, api_error *e)
{
    return api_text_parts(content, k_text_types, where, e);
}

/* One Messages message into chat messages appended to out: a user's
 * tool_result blocks become `tool` messages (before its text), an
 * assistant's tool_use blocks its tool_calls and its thinking blocks its
 * reasoning_content. */
static int add_message(json_t *m, size_t i, json_t *out, api_error *e)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *content = json_object_get(m, "content");
    char where[48];
    snprintf(where, sizeof(where), "messages[%zu].content", i);
    if (role == NULL || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
        return api_fail(e, 400, "invalid_value", "`messages[%zu].role` must be \"user\" or \"assistant\"", i);
    }
    bool user = strcmp(role, "user") == 0;
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", content));
        return 0;
    }
    if (!json_is_array(content)) {
        return api_fail(e, 400, "invalid_type", "`%s` must be a string or an array of content blocks", where);
    }
    json_t *texts = json_array(), *calls = json_array();
    json_t *thinking = NULL;
    int rc = 0;
    for (size_t k = 0; k < json_array_size(content) && rc == 0; k++) {
        json_t *b = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        char bw[96];
        snprintf(bw, sizeof(bw), "%s[%zu]", where, k);
        if (type == NULL) {
            rc = api_fail(e, 400, "invalid_value", "`%s` has no `type`", bw);
        } else if (strcmp(type, "text") == 0 && json_is_string(json_object_get(b, "text"))) {
            json_array_append(texts, b);
        } else if (user && strcmp(type, "tool_result") == 0) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            json_t *c = json_object_get(b, "content");
            json_t *t = c == NULL ? json_string("") : text_of(c, bw, e);
            if (id == NULL) rc = api_fail(e, 400, "invalid_value", "`%s.tool_use_id` is required", bw);
            else if (t == NULL) rc = -1;
            else json_array_append_new(out, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", id, "content", t));
            if (t != NULL && id == NULL) json_decref(t);
        } else if (!user && strcmp(type, "tool_use") == 0) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *input = json_object_get(b, "input");
            char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{}");
            if (id == NULL || name == NULL || args == NULL) {
                rc = api_fail(e, 400, "invalid_value", "`%s` needs `id`, `name` and `input`", bw);
            } else {
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args));
            }
            free(args);
        } else if (!user && (strcmp(type, "thinking") == 0 || strcmp(type, "redacted_thinking") == 0)) {
            json_t *t = json_object_get(b, "thinking");
            if (json_is_string(t)) thinking = t;
        } else {
            rc = api_fail(e, 400, "unsupported_value", "`%s`: a %s block is not supported in a %s message", bw, type,
                          role);
        }
    }
    if (rc == 0 && (json_array_size(texts) > 0 || json_array_size(calls) > 0 || thinking != NULL)) {
        json_t *t = text_of(texts, where, e);
        if (t == NULL) {
            rc = -1;
        } else {
            json_t *msg = json_pack("{s:s,s:o}", "role", role, "content", t);
            if (json_array_size(calls) > 0) json_object_set(msg, "tool_calls", calls);
            if (thinking != NULL) json_object_set(msg, "reasoning_content", thinking);
            json_array_append_new(out, msg);
        }
    }
    json_decref(texts);
    json_decref(calls);
    return rc;
}

int anthropic_to_chat(const char *body, size_t len, bool count_only, char **out, api_error *e)
{
    *out = NULL;
    json_t *o = api_load_object(body, len, e);
    if (o == NULL) return -1;
    json_t *c = json_object();
    json_t *msgs = json_array();
    json_object_set_new(c, "messages", msgs);
    int rc = 0;
    /* the fields the chat parser reads under the same name and meaning;
     * `model` is not checked here: Anthropic's clients name their own
     * models (claude-...), and the server answers with its one */
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream", "metadata"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        json_t *v = json_object_get(o, same[i]);
        if (v != NULL) json_object_set(c, same[i], v);
    }
    json_t *mt = json_object_get(o, "max_tokens");
    if (mt == NULL && !count_only) {
        rc = api_fail(e, 400, "missing_field", "`max_tokens` is required");
    } else if (mt != NULL && (!json_is_integer(mt) || json_integer_value(mt) < 1)) {
        rc = api_fail(e, 400, "invalid_value", "`max_tokens` must be an integer >= 1");
    } else if (mt != NULL) {
        json_object_set(c, "max_tokens", mt);
    }
    json_t *sys = json_object_get(o, "system");
    if (rc == 0 && sys != NULL && !json_is_null(sys)) {
        json_t *t = text_of(sys, "system", e);
        if (t == NULL) rc = -1;
        else json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", t));
    }
    json_t *m = json_object_get(o, "messages");
    if (rc == 0 && (!json_is_array(m) || json_array_size(m) == 0)) {
        rc = api_fail(e, 400, "invalid_value", "`messages` must be a non-empty array");
    }
    for (size_t i = 0; rc == 0 && i < json_array_size(m); i++) {
        if (!json_is_object(json_array_get(m, i))) {
            rc = api_fail(e, 400, "invalid_type", "`messages[%zu]` must be an object", i);
        } else {
            rc = add_message(json_array_get(m, i), i, msgs, e);
        }
    }
    json_t *stops = json_object_get(o, "stop_sequences");
    if (rc == 0 && stops != NULL && !json_is_null(stops)) {
        if (!json_is_array(stops)) rc = api_fail(e, 400, "invalid_type", "`stop_sequences` must be an array of strings");
        else json_object_set(c, "stop", stops);
    }
    json_t *tools = json_object_get(o, "tools");
    if (rc == 0 && json_is_array(tools) && json_array_size(tools) > 0) {
        json_t *ot = json_array();
        for (size_t i = 0; rc == 0 && i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i);
            const char *name = json_string_value(json_object_get(t, "name"));
            json_t *schema = json_object_get(t, "input_schema");
            json_t *desc = json_object_get(t, "description");
            const char *type = json_string_value(json_object_get(t, "type"));
            if (name == NULL || (type != NULL && strcmp(type, "custom") != 0)) {
                rc = api_fail(e, 400, "unsupported_value", "`tools[%zu]`: only client tools ({name, description, "
                              "input_schema}) are supported", i);
                break;
            }
            json_t *f = json_pack("{s:s}", "name", name);
            if (json_is_string(desc)) json_object_set(f, "description", desc);
            if (schema != NULL) json_object_set(f, "parameters", schema);
            json_array_append_new(ot, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
        json_object_set_new(c, "tools", ot);
    } else if (rc == 0 && tools != NULL && !json_is_null(tools) && !json_is_array(tools)) {
        rc = api_fail(e, 400, "invalid_type", "`tools` must be an array");
    }
    json_t *tc = json_object_get(o, "tool_choice");
    if (rc == 0 && tc != NULL && !json_is_null(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (type != NULL && strcmp(type, "auto") == 0) json_object_set_new(c, "tool_choice", json_string("auto"));
        else if (type != NULL && strcmp(type, "any") == 0) json_object_set_new(c, "tool_choice", json_string("required"));
        else if (type != NULL && strcmp(type, "none") == 0) json_object_set_new(c, "tool_choice", json_string("none"));
        else if (type != NULL && strcmp(type, "tool") == 0 && name != NULL) {
            json_object_set_new(c, "tool_choice",
                                json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name));
        } else {
            rc = api_fail(e, 400, "invalid_value",
                          "`tool_choice` must be {\"type\": \"auto\"}, \"any\", \"none\" or {\"type\": \"tool\", \"name\"}");
        }
        if (rc == 0 && json_is_true(json_object_get(tc, "disable_parallel_tool_use"))) {
            json_object_set_new(c, "parallel_tool_calls", json_false());
        }
    }
    /* extended thinking: the template's switch, where it has one */
    json_t *th = json_object_get(o, "thinking");
    const char *th_type = json_string_value(json_object_get(th, "type"));
    if (rc == 0 && th_type != NULL && (strcmp(th_type, "enabled") == 0 || strcmp(th_type, "disabled") == 0)) {
        json_object_set_new(c, "chat_template_kwargs",
                            json_pack("{s:b}", "enable_thinking", strcmp(th_type, "enabled") == 0));
    }
    if (rc == 0) rc = api_dump_chat(c, json_is_true(json_object_get(o, "stream")), out, e);
    json_decref(c);
    json_decref(o);
    return rc;
}

char *anthropic_error_body(const api_error *e)
{
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    json_t *j = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message", e->message);
    char *s = api_dumps(j);
    json_decref(j);
    return s;
}

/* ---- response ---- */

static const char *stop_reason(const char *finish, bool tools, const char *stop_sequence)
{
    if (tools || (finish != NULL && strcmp(finish, "tool_calls") == 0)) return "tool_use";
    if (finish != NULL && strcmp(finish, "length") == 0) return "max_tokens";
    return stop_sequence != NULL ? "stop_sequence" : "end_turn";
}

/* A call's arguments (JSON text) as the tool_use block's input. */
static json_t *input_of(const char *args)
{
    json_t *j = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
    return j != NULL ? j : json_object();
}

static json_t *usage_of(const json_t *u)
{
    return json_pack("{s:I,s:I,s:I}", "input_tokens", json_integer_value(json_object_get(u, "prompt_tokens")),
                     "output_tokens", json_integer_value(json_object_get(u, "completion_tokens")),
                     "cache_read_input_tokens",
                     json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")));
}

json_t *anthropic_response(const json_t *chat, uint64_t serial, const char *stop_sequence)
{
    json_t *ch = json_array_get(json_object_get(chat, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    json_t *content = json_array();
    json_t *r = json_object_get(msg, "reasoning_content");
    if (json_is_string(r) && json_string_length(r) > 0) {
        json_array_append_new(content, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking", r, "signature", ""));
    }
    json_t *t = json_object_get(msg, "content");
    json_t *calls = json_object_get(msg, "tool_calls");
    if (json_is_string(t) && (json_string_length(t) > 0 || json_array_size(calls) == 0)) {
        json_array_append_new(content, json_pack("{s:s,s:O}", "type", "text", "text", t));
    }
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
        json_array_append_new(content, json_pack("{s:s,s:O,s:O,s:o}", "type", "tool_use", "id",
                                                 json_object_get(c, "id"), "name", json_object_get(f, "name"),
                                                 "input", input_of(json_string_value(json_object_get(f, "arguments")))));
    }
    char id[40];
    snprintf(id, sizeof(id), "msg_%llu", (unsigned long long)serial);
    const char *reason = stop_reason(json_string_value(json_object_get(ch, "finish_reason")),
                                     json_array_size(calls) > 0, stop_sequence);
    json_t *j = json_pack("{s:s,s:s,s:s,s:O,s:o,s:s,s:o,s:o}", "id", id, "type", "message", "role", "assistant",
                          "model", json_object_get(chat, "model"), "content", content, "stop_reason", reason,
                          "stop_sequence",
                          strcmp(reason, "stop_sequence") == 0 ? json_string(stop_sequence) : json_null(),
                          "usage", usage_of(json_object_get(chat, "usage")));
    json_t *timings = json_object_get(chat, "timings");
    if (j != NULL && timings != NULL) json_object_set(j, "timings", timings);
    return j;
}

/* ---- stream ---- */

static void event(sbuf *out, const char *name, json_t *data)
{
    char *s = api_dumps(data);
    if (s != NULL) sbuf_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(data);
}

static void close_block(anthropic_stream *st, sbuf *out)
{
    if (st->open == 0) return;
    if (st->open == 1) {
        /* a thinking block ends with its signature (none here) */
        event(out, "content_block_delta",
              json_pack("{s:s,s:I,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                        (json_int_t)(st->next_index - 1), "delta", "type", "signature_delta", "signature", ""));
    }
    event(out, "content_block_stop",
          json_pack("{s:s,s:I}", "type", "content_block_stop", "index", (json_int_t)(st->next_index - 1)));
    st->open = 0;
}

static void open_block(anthropic_stream *st, int kind, json_t *block, sbuf *out)
{
    close_block(st, out);
    event(out, "content_block_start",
          json_pack("{s:s,s:I,s:o}", "type", "content_block_start", "index", (json_int_t)st->next_index,
                    "content_block", block));
    st->next_index++;
    st->open = kind;
}

static void delta(anthropic_stream *st, json_t *d, sbuf *out)
{
    event(out, "content_block_delta",
          json_pack("{s:s,s:I,s:o}", "type", "content_block_delta", "index", (json_int_t)(st->next_index - 1),
                    "delta", d));
}

void anthropic_stream_chunk(anthropic_stream *st, const json_t *chunk, uint64_t serial,
                            const char *model, const char *stop_sequence, sbuf *out)
{
    if (st->ended) return;
    if (!st->started) {
        char id[40];
        snprintf(id, sizeof(id), "msg_%llu", (unsigned long long)serial);
        event(out, "message_start",
              json_pack("{s:s,s:{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:{s:I,s:i}}}", "type", "message_start", "message", "id",
                        id, "type", "message", "role", "assistant", "content", "model", model, "stop_reason",
                        "stop_sequence", "usage", "input_tokens", (json_int_t)st->input_tokens, "output_tokens", 0));
        st->started = true;
    }
    json_t *choices = json_object_get(chunk, "choices");
    json_t *ch = json_array_get(choices, 0);
    json_t *d = json_object_get(ch, "delta");
    json_t *r = json_object_get(d, "reasoning_content");
    if (json_is_string(r) && json_string_length(r) > 0) {
        if (st->open != 1) open_block(st, 1, json_pack("{s:s,s:s}", "type", "thinking", "thinking", ""), out);
        delta(st, json_pack("{s:s,s:O}", "type", "thinking_delta", "thinking", r), out);
    }
    json_t *t = json_object_get(d, "content");
    if (json_is_string(t) && json_string_length(t) > 0) {
        if (st->open != 2) open_block(st, 2, json_pack("{s:s,s:s}", "type", "text", "text", ""), out);
        delta(st, json_pack("{s:s,s:O}", "type", "text_delta", "text", t), out);
    }
    json_t *calls = json_object_get(d, "tool_calls");
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
        int index = (int)json_integer_value(json_object_get(c, "index"));
        json_t *name = json_object_get(f, "name");
        if (json_is_string(name) && (st->open != 3 || st->open_tool != index)) {
            open_block(st, 3,
                       json_pack("{s:s,s:O,s:O,s:{}}", "type", "tool_use", "id", json_object_get(c, "id"), "name",
                                 name, "input"),
                       out);
            st->open_tool = index;
            st->had_tool = true;
        }
        json_t *args = json_object_get(f, "arguments");
        if (st->open == 3 && json_is_string(args) && json_string_length(args) > 0) {
            delta(st, json_pack("{s:s,s:O}", "type", "input_json_delta", "partial_json", args), out);
        }
    }
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    json_t *usage = json_object_get(chunk, "usage");
    if (finish != NULL) {
        /* the choice's end: its last block closes; the reason waits for the usage */
        close_block(st, out);
        st->had_tool = st->had_tool || strcmp(finish, "tool_calls") == 0;
        st->hit_length = strcmp(finish, "length") == 0;
    }
    if (json_is_array(choices) && json_array_size(choices) == 0 && usage != NULL) {
        close_block(st, out);
        const char *reason = st->had_tool             ? "tool_use"
                             : st->hit_length         ? "max_tokens"
                             : stop_sequence != NULL ? "stop_sequence"
                                                     : "end_turn";
        json_t *md = json_pack("{s:s,s:{s:s,s:o},s:{s:I}}", "type", "message_delta", "delta", "stop_reason", reason,
                               "stop_sequence",
                               strcmp(reason, "stop_sequence") == 0 ? json_string(stop_sequence) : json_null(),
                               "usage", "output_tokens", json_integer_value(json_object_get(usage, "completion_tokens")));
        json_t *timings = json_object_get(chunk, "timings");
        if (timings != NULL) json_object_set(md, "timings", timings);
        event(out, "message_delta", md);
        event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        st->ended = true;
    }
}
