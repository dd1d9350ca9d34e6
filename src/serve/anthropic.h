/* Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * over the chat path: a Messages body becomes an OpenAI chat body (system,
 * messages with their text, tool_use and tool_result blocks, tools,
 * tool_choice, stop_sequences, sampling, thinking), which the chat parser
 * takes as any other; its finished response, or each of its streamed
 * chunks, becomes Anthropic's shape (content blocks: thinking, text,
 * tool_use; stop_reason; usage; the stream's message_start,
 * content_block_start/delta/stop, message_delta and message_stop events).
 * No I/O, no threads. */
#ifndef STRATA_SERVE_ANTHROPIC_H
#define STRATA_SERVE_ANTHROPIC_H

#include "serve/api.h"
#include "serve/textgen.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* The chat body (malloc'd JSON text in *out) of Messages body[0..len).
 * count_only: /count_tokens (max_tokens is not required). 0, or -1 with
 * e filled (400 naming the field; 413 is the caller's). */
int anthropic_to_chat(const char *body, size_t len, bool count_only, char **out, api_error *e);

/* {"type":"error","error":{"type","message"}} for e, malloc'd. */
char *anthropic_error_body(const api_error *e);

/* The Messages response of a finished chat response body `chat` (one
 * choice): content blocks from reasoning_content (thinking), content
 * (text) and tool_calls (tool_use, their arguments parsed); stop_reason
 * from the finish reason ("tool_use", "max_tokens", "stop_sequence" when
 * stop_sequence is not NULL, else "end_turn"); usage from usage.
 * serial names it (msg_...). A new reference, NULL when out of memory. */
json_t *anthropic_response(const json_t *chat, uint64_t serial, const char *stop_sequence);

/* A stream's state: which content block is open. */
typedef struct anthropic_stream {
    bool started;       /* message_start sent */
    bool ended;         /* message_stop sent */
    int open;           /* the open block's kind (0 none, 1 thinking, 2 text, 3 tool_use) */
    int open_tool;      /* the open tool_use block's call index */
    size_t next_index;  /* the next content block's index */
    bool had_tool;      /* a tool_use block was sent */
    bool hit_length;    /* the choice ended at max_tokens */
    int64_t input_tokens;
} anthropic_stream;

/* Appends the events that the chat stream chunk `chunk` makes to out
 * (message_start before the first; blocks opened and closed as the delta's
 * kind changes; at the finish reason message_delta and message_stop).
 * stop_sequence as for anthropic_response. */
void anthropic_stream_chunk(anthropic_stream *st, const json_t *chunk, uint64_t serial,
                            const char *model, const char *stop_sequence, sbuf *out);

#endif
