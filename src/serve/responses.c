/* OpenAI's Responses API over the chat path (responses.h). */
#include "serve/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const k_text_types[] = {"input_text", "output_text", "text", NULL};

/* ---- request ---- */

/* The assistant message being assembled from consecutive items (its text,
 * its calls, its reasoning), appended to msgs when something else comes. */
typedef struct pending {
    json_t *msg; /* NULL: none */
} pending;

static json_t *pending_msg(pending *p)
{
    if (p->msg == NULL) p->msg = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
    return p->msg;
}

static void pending_flush(pending *p, json_t *msgs)
{
    if (p->msg != NULL) json_array_append_new(msgs, p->msg);
    p->msg = NULL;
}

static int add_item(json_t *it, size_t i, json_t *msgs, pending *p, api_error *e)
{
    char where[64];
    snprintf(where, sizeof(where), "input[%zu]", i);
    if (!json_is_object(it)) return api_fail(e, 400, "invalid_type", "`%s` must be an object", where);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (type == NULL || strcmp(type, "message") == 0) {
        char cw[80];
        snprintf(cw, sizeof(cw), "%s.content", where);
        if (role == NULL) return api_fail(e, 400, "invalid_value", "`%s.role` is required", where);
        json_t *t = api_text_parts(json_object_get(it, "content"), k_text_types, cw, e);
        if (t == NULL) return -1;
        if (strcmp(role, "assistant") == 0) {
            json_t *m = pending_msg(p);
            if (json_string_length(json_object_get(m, "content")) > 0 || json_object_get(m, "tool_calls") != NULL) {
                pending_flush(p, msgs);
                m = pending_msg(p);
            }
            json_object_set_new(m, "content", t);
            return 0;
        }
        if (strcmp(role, "user") != 0 && strcmp(role, "system") != 0 && strcmp(role, "developer") != 0) {
            json_decref(t);
            return api_fail(e, 400, "invalid_value", "`%s.role` must be user, assistant, system or developer", where);
        }
        pending_flush(p, msgs);
        json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", strcmp(role, "user") == 0 ? "user" : "system",
                                              "content", t));
        return 0;
    }
    if (strcmp(type, "function_call") == 0) {
        const char *call_id = json_string_value(json_object_get(it, "call_id"));
        const char *name = json_string_value(json_object_get(it, "name"));
        const char *args = json_string_value(json_object_get(it, "arguments"));
        if (call_id == NULL || name == NULL || args == NULL) {
            return api_fail(e, 400, "invalid_value", "`%s` needs `call_id`, `name` and `arguments`", where);
        }
        json_t *m = pending_msg(p);
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls == NULL) {
            calls = json_array();
            json_object_set_new(m, "tool_calls", calls);
        }
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", call_id, "type", "function",
                                               "function", "name", name, "arguments", args));
        return 0;
    }
    if (strcmp(type, "function_call_output") == 0) {
        const char *call_id = json_string_value(json_object_get(it, "call_id"));
        char ow[80];
        snprintf(ow, sizeof(ow), "%s.output", where);
        json_t *t = api_text_parts(json_object_get(it, "output"), k_text_types, ow, e);
        if (t == NULL) return -1;
        if (call_id == NULL) {
            json_decref(t);
            return api_fail(e, 400, "invalid_value", "`%s.call_id` is required", where);
        }
        pending_flush(p, msgs);
        json_array_append_new(msgs, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", call_id, "content", t));
        return 0;
    }
    if (strcmp(type, "reasoning") == 0) {
        /* its text goes back with the assistant turn it belongs to */
        json_t *content = json_object_get(it, "content");
        if (json_array_size(content) > 0) {
            static const char *const rt[] = {"reasoning_text", NULL};
            char cw[80];
            snprintf(cw, sizeof(cw), "%s.content", where);
            json_t *t = api_text_parts(content, rt, cw, e);
            if (t == NULL) return -1;
            json_t *m = pending_msg(p);
            if (json_string_length(json_object_get(m, "content")) > 0 || json_object_get(m, "tool_calls") != NULL) {
                pending_flush(p, msgs);
                m = pending_msg(p);
            }
            json_object_set_new(m, "reasoning_content", t);
        }
        return 0;
    }
    return api_fail(e, 400, "unsupported_value", "`%s`: an item of type %s is not supported", where, type);
}

int responses_to_chat(const char *body, size_t len, char **out, api_error *e)
{
    *out = NULL;
    json_t *o = api_load_object(body, len, e);
    if (o == NULL) return -1;
    json_t *c = json_object(), *msgs = json_array();
    json_object_set_new(c, "messages", msgs);
    int rc = 0;
    static const char *const same[] = {"model", "temperature", "top_p", "seed", "stream", "parallel_tool_calls",
                                       "user", "metadata", "service_tier", "prompt_cache_key", "safety_identifier"};
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        json_t *v = json_object_get(o, same[i]);
        if (v != NULL) json_object_set(c, same[i], v);
    }
    /* nothing is stored, so nothing can be continued */
    static const char *const stateful[] = {"previous_response_id", "conversation", "background", "prompt"};
    for (size_t i = 0; rc == 0 && i < sizeof(stateful) / sizeof(stateful[0]); i++) {
        json_t *v = json_object_get(o, stateful[i]);
        if (v != NULL && !json_is_null(v) && !json_is_false(v)) {
            rc = api_fail(e, 400, "unsupported_parameter",
                          "unsupported parameter `%s`: Strata stores no responses (send the whole input)", stateful[i]);
        }
    }
    json_t *tl = json_object_get(o, "top_logprobs");
    if (rc == 0 && tl != NULL && !json_is_null(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0)) {
        rc = api_fail(e, 400, "unsupported_parameter", "unsupported parameter `top_logprobs`");
    }
    json_t *mt = json_object_get(o, "max_output_tokens");
    if (rc == 0 && mt != NULL && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
            rc = api_fail(e, 400, "invalid_value", "`max_output_tokens` must be an integer >= 1");
        } else {
            json_object_set(c, "max_tokens", mt);
        }
    }
    json_t *ins = json_object_get(o, "instructions");
    if (rc == 0 && ins != NULL && !json_is_null(ins)) {
        json_t *t = api_text_parts(ins, k_text_types, "instructions", e);
        if (t == NULL) rc = -1;
        else json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", t));
    }
    json_t *in = json_object_get(o, "input");
    if (rc == 0 && json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
    } else if (rc == 0 && json_is_array(in) && json_array_size(in) > 0) {
        pending p = {0};
        for (size_t i = 0; rc == 0 && i < json_array_size(in); i++) rc = add_item(json_array_get(in, i), i, msgs, &p, e);
        pending_flush(&p, msgs);
    } else if (rc == 0) {
        rc = api_fail(e, 400, "invalid_value", "`input` must be a string or a non-empty array of items");
    }
    json_t *tools = json_object_get(o, "tools");
    if (rc == 0 && json_is_array(tools) && json_array_size(tools) > 0) {
        json_t *ot = json_array();
        for (size_t i = 0; rc == 0 && i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i);
            const char *type = json_string_value(json_object_get(t, "type"));
            const char *name = json_string_value(json_object_get(t, "name"));
            if (type == NULL || strcmp(type, "function") != 0 || name == NULL) {
                rc = api_fail(e, 400, "unsupported_value", "`tools[%zu]`: only function tools are supported (got %s)", i,
                              type ? type : "no type");
                break;
            }
            json_t *f = json_pack("{s:s}", "name", name);
            json_t *d = json_object_get(t, "description"), *params = json_object_get(t, "parameters");
            if (json_is_string(d)) json_object_set(f, "description", d);
            if (params != NULL && !json_is_null(params)) json_object_set(f, "parameters", params);
            json_array_append_new(ot, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
        json_object_set_new(c, "tools", ot);
    }
    json_t *tc = json_object_get(o, "tool_choice");
    if (rc == 0 && json_is_string(tc)) {
        json_object_set(c, "tool_choice", tc);
    } else if (rc == 0 && json_is_object(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (type == NULL || strcmp(type, "function") != 0 || name == NULL) {
            rc = api_fail(e, 400, "unsupported_value", "`tool_choice` must be auto, none, required or {\"type\": \"function\", \"name\"}");
        } else {
            json_object_set_new(c, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name));
        }
    }
    json_t *fmt = json_object_get(json_object_get(o, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (rc == 0 && ft != NULL && strcmp(ft, "json_schema") == 0) {
        json_t *js = json_pack("{s:O*,s:O*}", "name", json_object_get(fmt, "name"), "schema", json_object_get(fmt, "schema"));
        json_t *strict = json_object_get(fmt, "strict");
        if (strict != NULL) json_object_set(js, "strict", strict);
        json_object_set_new(c, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    } else if (rc == 0 && ft != NULL && strcmp(ft, "json_object") == 0) {
        json_object_set_new(c, "response_format", json_pack("{s:s}", "type", "json_object"));
    } else if (rc == 0 && ft != NULL && strcmp(ft, "text") != 0) {
        rc = api_fail(e, 400, "invalid_value", "`text.format.type` must be text, json_object or json_schema");
    }
    json_t *effort = json_object_get(json_object_get(o, "reasoning"), "effort");
    if (rc == 0 && json_is_string(effort)) json_object_set(c, "reasoning_effort", effort);
    if (rc == 0) rc = api_dump_chat(c, json_is_true(json_object_get(o, "stream")), out, e);
    json_decref(c);
    json_decref(o);
    return rc;
}

/* ---- response ---- */

static json_t *usage_of(const json_t *u)
{
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t outn = json_integer_value(json_object_get(u, "completion_tokens"));
    return json_pack("{s:I,s:{s:I},s:I,s:{s:i},s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")),
                     "output_tokens", outn, "output_tokens_details", "reasoning_tokens", 0, "total_tokens", in + outn);
}

static json_t *reasoning_item(uint64_t serial, const char *text, size_t n)
{
    char id[48];
    snprintf(id, sizeof(id), "rs_%llu", (unsigned long long)serial);
    return json_pack("{s:s,s:s,s:[],s:[{s:s,s:s%}]}", "id", id, "type", "reasoning", "summary", "content", "type",
                     "reasoning_text", "text", text, n);
}

static json_t *message_item(uint64_t serial, const char *text, size_t n)
{
    char id[48];
    snprintf(id, sizeof(id), "msg_%llu", (unsigned long long)serial);
    return json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:s%,s:[],s:[]}]}", "id", id, "type", "message", "status", "completed",
                     "role", "assistant", "content", "type", "output_text", "text", text, n, "annotations", "logprobs");
}

static json_t *call_item(uint64_t serial, size_t k, const char *call_id, const char *name, const char *args)
{
    char id[48];
    snprintf(id, sizeof(id), "fc_%llu_%zu", (unsigned long long)serial, k);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", id, "type", "function_call", "status", "completed", "call_id",
                     call_id ? call_id : "", "name", name ? name : "", "arguments", args ? args : "");
}

/* The response object around output items and usage. */
static json_t *envelope(uint64_t serial, int64_t created, const char *model, const char *status, bool length,
                        json_t *output, json_t *usage)
{
    char id[48];
    snprintf(id, sizeof(id), "resp_%llu", (unsigned long long)serial);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:n,s:o,s:n,s:{},s:b,s:s,s:[],s:{s:{s:s}}}", "id", id, "object",
                     "response", "created_at", (json_int_t)created, "status", status, "model", model ? model : "",
                     "output", output, "usage", usage ? usage : json_null(), "error", "incomplete_details",
                     length ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "instructions",
                     "metadata", "parallel_tool_calls", 1, "tool_choice", "auto", "tools", "text", "format", "type",
                     "text");
}

json_t *responses_response(const json_t *chat, uint64_t serial)
{
    json_t *ch = json_array_get(json_object_get(chat, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    json_t *output = json_array();
    json_t *r = json_object_get(msg, "reasoning_content");
    if (json_is_string(r) && json_string_length(r) > 0) {
        json_array_append_new(output, reasoning_item(serial, json_string_value(r), json_string_length(r)));
    }
    json_t *t = json_object_get(msg, "content");
    json_t *calls = json_object_get(msg, "tool_calls");
    if (json_is_string(t) && (json_string_length(t) > 0 || json_array_size(calls) == 0)) {
        json_array_append_new(output, message_item(serial, json_string_value(t), json_string_length(t)));
    }
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
        json_array_append_new(output, call_item(serial, k, json_string_value(json_object_get(c, "id")),
                                                json_string_value(json_object_get(f, "name")),
                                                json_string_value(json_object_get(f, "arguments"))));
    }
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    bool length = finish != NULL && strcmp(finish, "length") == 0;
    json_t *j = envelope(serial, (int64_t)json_integer_value(json_object_get(chat, "created")),
                         json_string_value(json_object_get(chat, "model")), length ? "incomplete" : "completed", length,
                         output, usage_of(json_object_get(chat, "usage")));
    json_t *timings = json_object_get(chat, "timings");
    if (j != NULL && timings != NULL) json_object_set(j, "timings", timings);
    return j;
}

/* ---- stream ---- */

static void event(responses_stream *st, sbuf *out, const char *name, json_t *data)
{
    if (data == NULL) return;
    json_object_set_new(data, "type", json_string(name));
    json_object_set_new(data, "sequence_number", json_integer(st->seq++));
    char *s = api_dumps(data);
    if (s != NULL) sbuf_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(data);
}

static const char *item_id(const responses_stream *st)
{
    return json_string_value(json_object_get(st->open_item, "id"));
}

/* Ends the open item: its ".done" events with the whole text. */
static void close_item(responses_stream *st, uint64_t serial, sbuf *out)
{
    if (st->open == 0) return;
    size_t idx = json_array_size(st->items);
    const char *text = st->acc.data ? st->acc.data : "";
    json_t *done;
    if (st->open == 3) {
        event(st, out, "response.function_call_arguments.done",
              json_pack("{s:s,s:I,s:s%}", "item_id", item_id(st), "output_index", (json_int_t)idx, "arguments", text,
                        st->acc.len));
        done = call_item(serial, idx, json_string_value(json_object_get(st->open_item, "call_id")),
                         json_string_value(json_object_get(st->open_item, "name")), text);
        json_object_set(done, "id", json_object_get(st->open_item, "id"));
    } else {
        bool reasoning = st->open == 1;
        json_t *part = reasoning ? json_pack("{s:s,s:s%}", "type", "reasoning_text", "text", text, st->acc.len)
                                 : json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", text, st->acc.len,
                                             "annotations", "logprobs");
        event(st, out, reasoning ? "response.reasoning_text.done" : "response.output_text.done",
              json_pack("{s:s,s:I,s:i,s:s%}", "item_id", item_id(st), "output_index", (json_int_t)idx,
                        "content_index", 0, "text", text, st->acc.len));
        event(st, out, "response.content_part.done",
              json_pack("{s:s,s:I,s:i,s:O}", "item_id", item_id(st), "output_index", (json_int_t)idx, "content_index", 0,
                        "part", part));
        json_decref(part);
        done = reasoning ? reasoning_item(serial, text, st->acc.len) : message_item(serial, text, st->acc.len);
        json_object_set(done, "id", json_object_get(st->open_item, "id"));
    }
    event(st, out, "response.output_item.done",
          json_pack("{s:I,s:O}", "output_index", (json_int_t)idx, "item", done));
    json_array_append_new(st->items, done);
    json_decref(st->open_item);
    st->open_item = NULL;
    st->acc.len = 0;
    st->open = 0;
}

static void open_item(responses_stream *st, int kind, json_t *item, uint64_t serial, sbuf *out)
{
    close_item(st, serial, out);
    size_t idx = json_array_size(st->items);
    st->open = kind;
    st->open_item = item;
    event(st, out, "response.output_item.added", json_pack("{s:I,s:O}", "output_index", (json_int_t)idx, "item", item));
    if (kind != 3) {
        json_t *part = kind == 1 ? json_pack("{s:s,s:s}", "type", "reasoning_text", "text", "")
                                 : json_pack("{s:s,s:s,s:[],s:[]}", "type", "output_text", "text", "", "annotations",
                                             "logprobs");
        event(st, out, "response.content_part.added",
              json_pack("{s:s,s:I,s:i,s:o}", "item_id", item_id(st), "output_index", (json_int_t)idx, "content_index", 0,
                        "part", part));
    }
}

void responses_stream_chunk(responses_stream *st, const json_t *chunk, uint64_t serial, const char *model,
                            sbuf *out)
{
    if (st->ended) return;
    if (!st->started) {
        st->items = json_array();
        st->created_at = (int64_t)time(NULL);
        json_t *r = envelope(serial, st->created_at, model, "in_progress", false, json_array(), NULL);
        event(st, out, "response.created", json_pack("{s:O}", "response", r));
        event(st, out, "response.in_progress", json_pack("{s:o}", "response", r));
        st->started = true;
    }
    char id[48];
    json_t *choices = json_object_get(chunk, "choices");
    json_t *ch = json_array_get(choices, 0);
    json_t *d = json_object_get(ch, "delta");
    size_t idx = json_array_size(st->items);
    json_t *r = json_object_get(d, "reasoning_content");
    if (json_is_string(r) && json_string_length(r) > 0) {
        if (st->open != 1) {
            snprintf(id, sizeof(id), "rs_%llu", (unsigned long long)serial);
            open_item(st, 1, json_pack("{s:s,s:s,s:[],s:[]}", "id", id, "type", "reasoning", "summary", "content"),
                      serial, out);
            idx = json_array_size(st->items);
        }
        sbuf_append(&st->acc, json_string_value(r), json_string_length(r));
        event(st, out, "response.reasoning_text.delta",
              json_pack("{s:s,s:I,s:i,s:O}", "item_id", item_id(st), "output_index", (json_int_t)idx, "content_index",
                        0, "delta", r));
    }
    json_t *t = json_object_get(d, "content");
    if (json_is_string(t) && json_string_length(t) > 0) {
        if (st->open != 2) {
            snprintf(id, sizeof(id), "msg_%llu", (unsigned long long)serial);
            open_item(st, 2,
                      json_pack("{s:s,s:s,s:s,s:s,s:[]}", "id", id, "type", "message", "status", "in_progress", "role",
                                "assistant", "content"),
                      serial, out);
            idx = json_array_size(st->items);
        }
        sbuf_append(&st->acc, json_string_value(t), json_string_length(t));
        event(st, out, "response.output_text.delta",
              json_pack("{s:s,s:I,s:i,s:O,s:[]}", "item_id", item_id(st), "output_index", (json_int_t)idx,
                        "content_index", 0, "delta", t, "logprobs"));
    }
    json_t *calls = json_object_get(d, "tool_calls");
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k), *f = json_object_get(c, "function");
        int index = (int)json_integer_value(json_object_get(c, "index"));
        json_t *name = json_object_get(f, "name");
        if (json_is_string(name) && (st->open != 3 || st->open_tool != index)) {
            close_item(st, serial, out);
            idx = json_array_size(st->items);
            snprintf(id, sizeof(id), "fc_%llu_%zu", (unsigned long long)serial, idx);
            open_item(st, 3,
                      json_pack("{s:s,s:s,s:s,s:O,s:O,s:s}", "id", id, "type", "function_call", "status", "in_progress",
                                "call_id", json_object_get(c, "id"), "name", name, "arguments", ""),
                      serial, out);
            st->open_tool = index;
        }
        json_t *args = json_object_get(f, "arguments");
        if (st->open == 3 && json_is_string(args) && json_string_length(args) > 0) {
            sbuf_append(&st->acc, json_string_value(args), json_string_length(args));
            event(st, out, "response.function_call_arguments.delta",
                  json_pack("{s:s,s:I,s:O}", "item_id", item_id(st), "output_index", (json_int_t)idx, "delta", args));
        }
    }
    const char *finish = json_string_value(json_object_get(ch, "finish_reason"));
    if (finish != NULL) {
        close_item(st, serial, out);
        st->hit_length = strcmp(finish, "length") == 0;
    }
    json_t *usage = json_object_get(chunk, "usage");
    if (json_is_array(choices) && json_array_size(choices) == 0 && usage != NULL) {
        close_item(st, serial, out);
        json_t *resp = envelope(serial, st->created_at, model, st->hit_length ? "incomplete" : "completed",
                                st->hit_length, json_incref(st->items), usage_of(usage));
        json_t *timings = json_object_get(chunk, "timings");
        if (resp != NULL && timings != NULL) json_object_set(resp, "timings", timings);
        event(st, out, st->hit_length ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", resp));
        st->ended = true;
    }
}

void responses_stream_free(responses_stream *st)
{
    json_decref(st->items);
    json_decref(st->open_item);
    sbuf_free(&st->acc);
    memset(st, 0, sizeof(*st));
}
