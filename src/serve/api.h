/* The OpenAI API's request parsing and response shapes (no I/O, no threads):
 * a request body becomes a validated api_gen (prompt ids, sampling, stops,
 * streaming options) or an api_error naming the bad parameter; a finished
 * request becomes the JSON OpenAI clients expect, plus Strata's `timings`. */
#ifndef STRATA_SERVE_API_H
#define STRATA_SERVE_API_H

#include "engine/protocol.h"
#include "serve/request.h"
#include "serve/textgen.h"
#include "text/vocab.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct api_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    char code[48];
    char message[400];
} api_error;

/* Fills e and returns -1 (so a failing path reads `return api_fail(...)`). */
int api_fail(api_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error":{"message","type","code"}} as a malloc'd string. */
char *api_error_body(const api_error *e);

enum api_kind { API_COMPLETION, API_CHAT, API_EMBEDDING };

/* What a handler needs to parse a request. */
typedef struct api_env {
    const vocab *voc;
    const char *chat_template; /* NULL: ChatML */
    const char *bos, *eos;
    const char *model_name;
    int64_t n_ctx;             /* per request; 0 when unknown */
} api_env;

typedef struct api_gen {
    enum api_kind kind;
    bool stream, include_usage;
    char *stops[TEXTGEN_MAX_STOPS]; /* malloc'd */
    size_t n_stops;
    int32_t *prompt;                /* malloc'd */
    size_t n_prompt;
    int64_t max_tokens;             /* -1: up to the context */
    proto_sampling sampling;        /* logit_bias malloc'd */
    int32_t logprobs;               /* -1: none; N >= 0: each token's and the top N */
    bool base64;                    /* embeddings: `encoding_format` "base64" */
} api_gen;

/* The most alternatives per token: `logprobs` of /v1/completions (OpenAI's
 * legacy limit) and `top_logprobs` of /v1/chat/completions. */
#define API_MAX_LOGPROBS_COMPLETION 5
#define API_MAX_TOP_LOGPROBS_CHAT 20

/* Parses a /v1/completions, /v1/chat/completions or /v1/embeddings body.
 * Returns 0, or -1 with e filled (400/404/413...). Free with api_gen_free. */
int api_parse_gen(const api_env *env, enum api_kind kind, const char *body, size_t len,
                  api_gen *g, api_error *e);
void api_gen_free(api_gen *g);
/* Moves prompt, sampling and limits into r's gen (or emb); g keeps the stops. */
void api_gen_move_to(api_gen *g, sreq *r);

/* A request's figures once it is terminal (read under its result_lock). */
typedef struct api_result {
    uint64_t serial;
    const char *finish_reason; /* "stop", "length" */
    sreq_stats stats;
    int64_t prompt_tokens, completion_tokens;
    double queue_ms, ttft_ms;
    int replica;
} api_result;

/* The `timings` and `usage` objects. */
json_t *api_timings(const api_result *res);
json_t *api_usage(const api_result *res);

/* One generated token as a response's logprobs show it. */
typedef struct api_lp_token {
    int32_t id;
    const char *bytes;   /* its bytes in the returned text (borrowed; may be part of a
                          * character); none: the token's own text is shown */
    size_t n_bytes;
    size_t text_offset;  /* where it starts in the returned text, in characters */
    float logprob;       /* NAN: unknown (null) */
    const proto_top *top; /* (n_top) alternatives, most likely first; borrowed */
    size_t n_top;
} api_lp_token;

/* The `logprobs` object of a choice for toks[0..n): for API_COMPLETION
 * {"tokens","token_logprobs","top_logprobs","text_offset"}, for API_CHAT
 * {"content":[{"token","logprob","bytes","top_logprobs"}]}. A token's text
 * that is not valid UTF-8 is written "bytes:\xNN..." (the chat form also
 * carries the raw bytes). n_top caps the alternatives shown. NULL on ENOMEM. */
json_t *api_logprobs(const api_env *env, enum api_kind kind, const api_lp_token *toks, size_t n,
                     size_t n_top);

/* The whole non-streamed response. logprobs (stolen; NULL: null) is the
 * choice's. */
json_t *api_completion_body(const api_env *env, enum api_kind kind, const api_result *res,
                            const char *text, size_t n_text, json_t *logprobs);
/* One streamed chunk: text (may be empty), finish_reason NULL until the last
 * chunk, first: the chat chunk carries role; logprobs (stolen; NULL: null)
 * those of the tokens whose text this chunk begins. */
json_t *api_stream_chunk(const api_env *env, enum api_kind kind, uint64_t serial,
                         const char *text, size_t n_text, const char *finish_reason, bool first,
                         json_t *logprobs);
/* The /v1/embeddings response for vec[0..n): each number as JSON, or with
 * base64 the little-endian float32 bytes in base64 (OpenAI's
 * `encoding_format`, which its clients ask for by default). */
json_t *api_embedding_body(const api_env *env, const api_result *res, const float *vec, size_t n,
                           bool base64);
/* Writes "data: <json>\n\n" to out and frees j. */
int api_sse_event(sbuf *out, json_t *j);

#endif
