/* OpenAI's Responses API (POST /v1/responses) over the chat path: a
 * Responses body becomes a chat body (instructions, input items: messages,
 * function_call, function_call_output, reasoning; function tools,
 * tool_choice, text.format, reasoning.effort, max_output_tokens), which
 * the chat parser takes as any other; its finished response, or its
 * stream's chunks, become the Responses shape (output items: reasoning,
 * message with output_text, function_call; status and usage; the stream's
 * response.created ... response.completed events with sequence numbers).
 * Nothing is stored: previous_response_id and conversation are refused.
 * No I/O, no threads. */
#ifndef STRATA_SERVE_RESPONSES_H
#define STRATA_SERVE_RESPONSES_H

#include "serve/api.h"
#include "serve/textgen.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* The chat body (malloc'd JSON text in *out) of Responses body[0..len).
 * 0, or -1 with e filled (400 naming the field). */
int responses_to_chat(const char *body, size_t len, char **out, api_error *e);

/* The Responses object of a finished chat response body (one choice):
 * output items from reasoning_content, content and tool_calls; status
 * "completed", or "incomplete" (max_output_tokens) when it ended by
 * length; usage. serial names it (resp_...). NULL when out of memory. */
json_t *responses_response(const json_t *chat, uint64_t serial);

/* A stream's state: the items so far and the open one. */
typedef struct responses_stream {
    bool started, ended;
    int64_t seq;          /* the next sequence_number */
    int open;             /* the open item's kind (0 none, 1 reasoning, 2 message, 3 function_call) */
    int open_tool;        /* the open function_call's call index */
    sbuf acc;             /* the open item's text (or arguments) so far */
    json_t *items;        /* the finished items */
    json_t *open_item;    /* the open item as added (id, call_id, name) */
    bool hit_length;      /* the choice ended at max_output_tokens */
    int64_t created_at;
} responses_stream;

/* Appends the SSE events ("event: X\ndata: {...}") that chat stream chunk
 * `chunk` makes; response.completed (or incomplete) with the whole
 * response on the usage chunk. */
void responses_stream_chunk(responses_stream *st, const json_t *chunk, uint64_t serial, const char *model,
                            sbuf *out);
void responses_stream_free(responses_stream *st);

#endif
