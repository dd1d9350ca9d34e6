/* The OpenAI API's request parsing and response shapes (no I/O, no threads):
 * a request body becomes a validated api_gen (prompt ids, sampling, stops,
 * streaming options, the number of choices; for embeddings, every input) or
 * an api_error naming the bad parameter; finished requests become the JSON
 * OpenAI clients expect, plus Strata's `timings`.
 *
 * Fields: every request field Strata implements is parsed and checked; a
 * field it knows (OpenAI's, and the common llama-server and vLLM extras)
 * but does not implement is refused with a 400 naming it, unless its value
 * is the one that changes nothing (`tools` [], `echo` false, ...), so an answer is never silently not what
 * was asked; fields that do not change the result (`user`, `metadata`,
 * `store`, ...) and fields it does not know are accepted. */
#ifndef STRATA_SERVE_API_H
#define STRATA_SERVE_API_H

#include "engine/protocol.h"
#include "serve/request.h"
#include "serve/textgen.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"
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

/* Every response body is printed with these flags: reals with 9
 * significant digits, which give back each float32 (logprobs, embeddings)
 * exactly, instead of jansson's 17 (0.029763999999999999); timings are
 * rounded to 3 decimals before (api_timings). */
#define API_JSON_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))
/* j printed with API_JSON_FLAGS, malloc'd; NULL for NULL or on ENOMEM. */
char *api_dumps(const json_t *j);

/* API_NATIVE: llama-server's own POST /completion (its request fields, its
 * response shape: api_native_body); API_INFILL: its POST /infill, the same
 * with a fill-in-the-middle prompt (api_infill_tokens). */
enum api_kind { API_COMPLETION, API_CHAT, API_EMBEDDING, API_NATIVE, API_INFILL };

/* Whether kind answers in llama-server's own shape. */
static inline bool api_is_native(enum api_kind kind)
{
    return kind == API_NATIVE || kind == API_INFILL;
}

/* What a handler needs to parse a request. */
typedef struct api_env {
    const vocab *voc;
    const char *chat_template; /* NULL: ChatML */
    const char *bos, *eos;
    const char *model_name;
    const char *const *model_aliases; /* (n_model_aliases) other names a request may give */
    size_t n_model_aliases;
    int64_t n_ctx;             /* per request; 0 when unknown */
    bool reasoning_off;        /* `strata serve --reasoning-format none`: replies are not
                                  split into reasoning and content unless a request asks */
    bool merge_system;         /* the template takes no system message
                                  (api_template_takes_system, asked once at start): system
                                  texts join the next user message */
} api_env;

/* The chat template a server renders with: tmpl, or ChatML when the
 * model has none. */
const char *api_chat_template(const char *tmpl);

/* Whether chat template tmpl (NULL: ChatML) shows a system message: a
 * probe conversation (a system message, then a user one) renders without
 * error and its prompt holds the system text. Gemma 2's template raises on
 * a system message; some drop it. A server asks once, at start. */
bool api_template_takes_system(const char *tmpl, const char *bos, const char *eos);


/* The most choices (`n`) of one request, and inputs of one /v1/embeddings
 * request (OpenAI's limit). */
#define API_MAX_CHOICES 16
#define API_MAX_EMBED_INPUTS 2048
/* The most engine requests of one completions request: prompts x `n`. */
#define API_MAX_PROMPT_CHOICES 2048

/* One embeddings input as token ids (malloc'd). */
typedef struct api_input {
    int32_t *ids;
    size_t n;
} api_input;

/* The most ids of vLLM's `stop_token_ids`. */
#define API_MAX_STOP_IDS 16

typedef struct api_gen {
    enum api_kind kind;
    size_t n_choices;               /* `n`, 1..API_MAX_CHOICES (1 for embeddings) */
    bool stream, include_usage;
    char *stops[TEXTGEN_MAX_STOPS]; /* malloc'd */
    size_t n_stops;
    int32_t stop_ids[API_MAX_STOP_IDS]; /* vLLM's stop_token_ids (textgen_stop_on) */
    size_t n_stop_ids;
    bool include_stop;              /* vLLM's include_stop_str_in_output */
    int64_t min_tokens;             /* vLLM's min_tokens (protocol `min_tokens`) */
    int32_t *allowed;               /* vLLM's allowed_token_ids (protocol `allowed_tokens`),
                                       malloc'd; NULL: every token */
    size_t n_allowed;
    int32_t *bad_ids;               /* vLLM's bad_words as token sequences (protocol
                                       `bad_words`), one after another, malloc'd */
    int32_t *bad_len;               /* (n_bad) their lengths, malloc'd */
    size_t n_bad;
    bool keep_special;              /* vLLM's skip_special_tokens false: control tokens
                                       come out as their text */
    size_t truncate;                /* vLLM's truncate_prompt_tokens: the prompt's (each
                                       input's) last this many tokens; 0: all */
    int32_t *prompt;                /* completions and chat; malloc'd (completions with
                                       several prompts: the first) */
    size_t n_prompt;
    size_t n_prompts;               /* completions: the prompts of `prompt` (an array of
                                       strings or of token id arrays); 1 otherwise */
    api_input *more;                /* (n_prompts - 1) the ones after the first, malloc'd */
    int64_t n_ctx;                  /* the context it was checked against (0: unknown):
                                       each prompt's max_tokens is cut to its room */
    api_input *inputs;              /* embeddings: (n_inputs), malloc'd; prompt unused */
    size_t n_inputs;
    int64_t max_tokens;             /* -1: up to the context */
    proto_sampling sampling;        /* logit_bias malloc'd */
    int32_t logprobs;               /* -1: none; N >= 0: each token's and the top N */
    bool return_tokens;             /* native: llama-server's `return_tokens` */
    bool progress;                  /* llama-server's `return_progress` (streamed only):
                                       the prompt's progress in `prompt_progress` */
    bool echo;                      /* completions' `echo`: the prompt's text (and, with
                                       logprobs, its tokens') before the reply's */
    int32_t prompt_logprobs;        /* vLLM's `prompt_logprobs`: -1 none; N >= 0: each
                                       prompt token's logprob and the top N (not streamed) */
    bool base64;                    /* embeddings: `encoding_format` "base64" */
    bool no_cache;                  /* llama-server's `cache_prompt: false`: the engine's
                                       prefix cache is not used (protocol `cache` false) */
    char *grammar;                  /* GBNF the output must match (protocol `grammar`):
                                       `grammar` as given, or compiled from `json_schema` /
                                       `response_format`, or a forced call's; with a THINK
                                       reply split, the reasoning block before the answer's
                                       (reasoning_grammar); NULL: none. malloc'd */
    bool grammar_given;             /* `grammar` as given: it holds the whole output, so
                                       no reasoning is split before it */
    bool no_speculative;            /* `speculative: false`: no drafts for this request
                                       (protocol `speculative` false) */
    bool has_draft_max;             /* `speculative.n_max` given (llama-server's name) */
    int32_t draft_max;              /* its value: drafted tokens per step at most; 0: none */
    bool tool_calls;                /* chat with `tools` and a `tool_choice` other than
                                       "none": the output is parsed for calls */
    tool_format tool_fmt;           /* the template's call syntax (tool_calls.h) */
    json_t *tools;                  /* `tools` when parsed for calls (their schemas type
                                       the XML syntax's values), a reference; else NULL */
    reasoning_format reasoning;     /* chat: the reasoning syntax split from the reply
                                       (reasoning.h); NONE: the reply is all content */
    bool reasoning_open;            /* the rendered prompt ends inside a THINK block */
    char *rendered;                 /* chat: the prompt the template rendered (malloc'd) */
    char *model;                    /* the `model` asked for, one of the served names
                                       (malloc'd; NULL: none given): answers carry it */
    size_t n_rendered;
} api_gen;

/* The most alternatives per token: `logprobs` of /v1/completions (OpenAI's
 * legacy limit) and `top_logprobs` of /v1/chat/completions. */
#define API_MAX_LOGPROBS_COMPLETION 5
#define API_MAX_TOP_LOGPROBS_CHAT 20

/* Structured output (completions and chat): OpenAI's `response_format`
 * ({"type":"text"}, {"type":"json_object"}, {"type":"json_schema",
 * "json_schema":{"name","schema","strict"}}), llama-server's `grammar`
 * (GBNF, passed through) and `json_schema` (an object); at most one of the
 * three; JSON Schema is compiled by serve/json_schema.h and its errors are
 * a 400 naming the keyword's path. */
#define API_MAX_GRAMMAR_BYTES (256 * 1024)

/* Tools (chat): `tools` (OpenAI's [{"type":"function","function":{"name",
 * "description","parameters"}}], names [A-Za-z0-9_-]{1,64}, unique;
 * rendered by the template), `tool_choice` ("auto", the default with
 * tools; "none": tools rendered, output not parsed; "required" and
 * {"type":"function","function":{"name"}}: the grammar forces a call of a
 * declared tool, one named tool for the latter), `parallel_tool_calls`
 * (default true: "required" allows several calls). Assistant messages'
 * `tool_calls[].function.arguments` (a JSON string) are parsed into
 * objects before rendering, as Hugging Face templates expect. A tool choice
 * that forces a call cannot be combined with `response_format`, `grammar`
 * or `json_schema`; with "auto" the reply follows that format and is not
 * parsed for calls. */
#define API_MAX_TOOLS 128

/* /infill's prompt, as llama-server builds it (its order and budgets):
 * the repository context (extra[0..n_extra), already tokenized as
 * llama-server tokenizes it: with the vocab's FIM_REP "myproject\n" when it
 * has one, then per chunk FIM_SEP "filename\n" (or, without FIM_SEP, a
 * "\n\n--- snippet ---\n\n" separator) and its text, then FIM_SEP
 * "filename\n") cut to its last n_ctx - 2048 - 2 x n_predict tokens, BOS
 * when the vocab adds one, FIM_PRE, the prefix's last 1536 tokens, the
 * prompt, FIM_SUF, the suffix's first 512 - 2 - |prompt| tokens, FIM_MID.
 * Into a malloc'd *out of *n. -1 (out of memory) or 0. */
int api_infill_tokens(const vocab *v, const int32_t *extra, size_t n_extra, const int32_t *prefix,
                      size_t n_prefix, const int32_t *suffix, size_t n_suffix, const int32_t *prompt,
                      size_t n_prompt, int64_t n_ctx, int64_t n_predict, int32_t **out, size_t *n);

/* Parses a /v1/completions, /v1/chat/completions or /v1/embeddings body.
 * Returns 0, or -1 with e filled (400/404/413...). Free with api_gen_free. */
int api_parse_gen(const api_env *env, enum api_kind kind, const char *body, size_t len,
                  api_gen *g, api_error *e);
void api_gen_free(api_gen *g);
/* Moves prompt, sampling and limits into r's gen (or inputs[0] into r's
 * emb); g keeps the stops. For a request of one choice and one input. */
void api_gen_move_to(api_gen *g, sreq *r);
/* Copies into r what its engine request needs: for completions and chat,
 * engine request i of api_gen_n_requests (prompt i / n_choices, choice
 * i % n_choices: the prompt, limits and sampling, with a given seed as
 * seed + the choice, modulo 2^63, so each choice of a prompt has its own
 * stream and a prompt's are those it gets alone); for embeddings,
 * inputs[i]. g is unchanged. 0, or STRATA_ENOMEM. */
int api_gen_copy_to(const api_gen *g, size_t i, sreq *r);
/* The engine requests g makes: n_prompts x n_choices, or n_inputs. */
size_t api_gen_n_requests(const api_gen *g);
/* Prompt p (< n_prompts) of g: *n ids. */
const int32_t *api_gen_prompt(const api_gen *g, size_t p, size_t *n);

/* A request's figures once it is terminal (read under its result_lock). */
typedef struct api_result {
    uint64_t serial;
    const char *finish_reason; /* "stop", "length" */
    sreq_stats stats;
    int64_t prompt_tokens, completion_tokens;
    int64_t cached_tokens;     /* usage.prompt_tokens_details.cached_tokens */
    double queue_ms, ttft_ms;
    int replica;               /* -1: none, or (a sum) not all the same */
    int64_t route_cached_n;    /* prompt tokens the router expected cached (summed) */
} api_result;

/* The figures of a request served as n engine requests (choices, or
 * embeddings inputs), into out: tokens and engine statistics summed;
 * prompt_tokens and cached_tokens once per prompt, as OpenAI counts a
 * prompt once: rs[k] is choice k % per_prompt of prompt k / per_prompt
 * (per_prompt <= 1: every one is its own prompt); queue_ms the longest
 * wait; ttft_ms the first token of any; replica the one they share, else -1;
 * finish_reason the first's. n >= 1. */
void api_result_sum(const api_result *rs, size_t n, size_t per_prompt, api_result *out);

/* The `timings` (milliseconds and per-second rates rounded to 3 decimals)
 * and `usage` objects. */
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
    bool null_top;       /* its alternatives are null, not a list (an echoed prompt's
                            first token, which has no logprob) */
} api_lp_token;

/* The `logprobs` object of a choice for toks[0..n): for API_COMPLETION
 * {"tokens","token_logprobs","top_logprobs","text_offset"}, for API_CHAT
 * {"content":[{"token","logprob","bytes","top_logprobs"}]}. A token's text
 * that is not valid UTF-8 is written "bytes:\xNN..." (the chat form also
 * carries the raw bytes). n_top caps the alternatives shown. NULL on ENOMEM. */
json_t *api_logprobs(const api_env *env, enum api_kind kind, const api_lp_token *toks, size_t n,
                     size_t n_top);

/* The prompt of an echo (`echo` true): its tokens' text as the reply's
 * text is rendered (the prompt as given, wherever tokenization round
 * trips), and where each token's bytes start in it. */
typedef struct api_echo {
    char *text;        /* malloc'd, NUL-terminated; may hold bytes that are not UTF-8 */
    size_t n_text;
    size_t *start;     /* (n + 1) token i's bytes are text[start[i], start[i+1]) */
    size_t *chars;     /* (n) the character holding token i's first byte */
    size_t n_chars;    /* characters of text */
    size_t n;
} api_echo;

/* The echo of prompt ids[0..n) (keep_special: control tokens as their
 * text, as skip_special_tokens false does for the reply). 0, or -1 out of
 * memory or for an id the vocabulary lacks. */
int api_echo_make(const vocab *voc, const int32_t *ids, size_t n, bool keep_special, api_echo *out);
void api_echo_free(api_echo *e);

/* vLLM's `prompt_logprobs` list for prompt ids[0..n): null for the first
 * token, then per token an object keyed by token id: the prompt's token
 * first, then the alternatives (the n_top most likely), each
 * {"logprob", "rank", "decoded_token"}. plps (n entries; may be NULL)
 * as the request stored them: an entry whose logprob is NAN never came
 * (an ended request) and is null. NULL on ENOMEM. */
json_t *api_prompt_logprobs(const api_env *env, const int32_t *ids, size_t n,
                            const proto_logprob *plps, size_t n_top);

/* llama-server's /completion (API_NATIVE). A finished choice: */
typedef struct api_native_choice {
    const char *text;           /* its content */
    size_t n_text;
    const int32_t *ids;         /* its token ids (`tokens`, with return_tokens) */
    size_t n_ids;
    json_t *probs;              /* `completion_probabilities` (stolen); NULL: none */
    const api_result *res;
    const char *stop_type;      /* "eos", "limit" or "word" */
    const char *stopping_word;  /* the stop string that ended it, or "" */
    const int32_t *prompt;      /* its prompt, shown as `prompt` with its special tokens */
    size_t n_prompt;
} api_native_choice;

/* The response object of choice `index`: index, content, tokens, id_slot,
 * stop true, model, tokens_predicted, tokens_evaluated,
 * generation_settings (the request's), prompt, has_new_line, truncated,
 * stop_type, stopping_word, tokens_cached, timings (llama-server's, then
 * Strata's own figures) and completion_probabilities when asked. A request
 * of several prompts or `n` answers an array of these. */
json_t *api_native_body(const api_env *env, const api_gen *g, size_t index, api_native_choice *c);
/* A streamed event of choice `index`: its new content, the ids whose text
 * begins in it, stop false, the tokens so far and the prompt's, and
 * probs (stolen; NULL: none). The last event is api_native_body's. */
json_t *api_native_chunk(size_t index, const char *text, size_t n_text, const int32_t *ids,
                         size_t n_ids, int64_t predicted, int64_t evaluated, json_t *probs);
/* `completion_probabilities` of toks[0..n): per token {id, token, bytes,
 * logprob, top_logprobs: [{id, token, bytes, logprob}]} (at most n_top). */
json_t *api_native_probs(const api_env *env, const api_lp_token *toks, size_t n, size_t n_top);

/* One choice of a finished response. */
typedef struct api_choice {
    const char *text;
    size_t n_text;
    const tool_parsed *tools; /* chat: the calls parsed from text (when it has any,
                                 they replace text: `content` is tools->content, or
                                 null when blank, and finish_reason "tool_calls");
                                 NULL: none */
    const char *reasoning; /* chat: `reasoning_content` when n_reasoning > 0 */
    size_t n_reasoning;
    json_t *logprobs;      /* stolen; NULL: null */
    json_t *prompt_logprobs; /* stolen; NULL: none. Completions: the choice's
                                `prompt_logprobs`; chat: the first choice's is the
                                response's (vLLM's places) */
    const api_result *res; /* its finish_reason and figures */
} api_choice;

/* The whole non-streamed response of one choice. logprobs (stolen; NULL:
 * null) is the choice's. */
json_t *api_completion_body(const api_env *env, enum api_kind kind, const api_result *res,
                            const char *text, size_t n_text, json_t *logprobs);
/* The same for n >= 1 choices (choices[i] has index i): usage and the
 * top-level timings are total's; with n > 1 each choice also carries its
 * own `timings`. Each ch[i].logprobs is stolen. */
json_t *api_completion_body_n(const api_env *env, enum api_kind kind, uint64_t serial,
                              api_choice *ch, size_t n, const api_result *total);
/* One streamed chunk of choice `index`: text (may be empty), finish_reason
 * NULL until the choice's last chunk, first: the chat chunk carries role;
 * logprobs (stolen; NULL: null) those of the tokens whose text this chunk
 * begins. */
json_t *api_stream_chunk(const api_env *env, enum api_kind kind, uint64_t serial, size_t index,
                         const char *text, size_t n_text, const char *finish_reason, bool first,
                         json_t *logprobs);

/* The id of call k of choice `index` of request serial: 9 letters and
 * digits (what Mistral's templates insist on), NUL-terminated in out. */
void api_tool_call_id(char out[10], uint64_t serial, size_t index, size_t k);
/* A streamed chat chunk of choice `index` whose delta is reasoning text
 * {reasoning_content} (with the role when first). */
json_t *api_stream_reasoning(const api_env *env, uint64_t serial, size_t index, const char *text,
                             size_t n_text, bool first);
/* A streamed chunk of call k of choice `index`: with name, the call's
 * first delta {index, id, type, function: {name, arguments: ""}}; without,
 * an argument fragment {index, function: {arguments}}. */
json_t *api_stream_tool_delta(const api_env *env, uint64_t serial, size_t index, size_t k,
                              const char *name, const char *arguments);
/* Generated text s[0..n) (NULL: "") as a JSON string (new reference; NULL
 * only when out of memory). Text can hold bytes that are not UTF-8 (a
 * byte token of a multi-byte character cut by max_tokens, a model's stray
 * byte tokens), which JSON strings cannot carry: each maximal subpart
 * that is no whole valid sequence (the longest start of one, or a single
 * byte no sequence starts with) becomes one U+FFFD, as llama-server's JSON
 * writer and Hugging Face's decode(errors="replace") do. */
json_t *api_text_json(const char *s, size_t n);
/* For the APIs translated into chat bodies (anthropic.h, responses.h):
 * a body that must be a JSON object (a new reference; NULL with a 400 in
 * e), and the chat body `chat` dumped into *out (malloc'd), with the usage
 * chunk asked for when it streams (the translations end on it). */
json_t *api_load_object(const char *body, size_t len, api_error *e);
int api_dump_chat(json_t *chat, bool stream, char **out, api_error *e);
/* The text of a `content` that is a string, or an array of blocks
 * {"type": one of types (NULL-terminated), "text": string}, joined; a new
 * string reference, or NULL with e filled (400 naming where and the block). */
json_t *api_text_parts(json_t *content, const char *const *types, const char *where, api_error *e);
/* A text that is only whitespace (or empty). */
bool api_blank(const char *s, size_t n);

/* One embedding: v[0..n). */
typedef struct api_vec {
    const float *v;
    size_t n;
} api_vec;

/* The /v1/embeddings response: data[i] (with index i) for vecs[i], each
 * number as JSON or, with base64, the little-endian float32 bytes in base64
 * (OpenAI's `encoding_format`, which its clients ask for by default); usage
 * and timings are total's. */
json_t *api_embedding_body(const api_env *env, const api_result *total, const api_vec *vecs,
                           size_t n, bool base64);
/* Writes "data: <json>\n\n" to out and frees j. */
int api_sse_event(sbuf *out, json_t *j);

/* The control tokens of v that g's reply format parses (the reasoning
 * split's markers when g splits, the call syntax's when g parses calls:
 * Mistral's [TOOL_CALLS], [ARGS] and [THINK], Llama 3's <|python_tag|>,
 * ...) into ids[0..cap), returned count: the detokenizer writes them as
 * text (textgen_keep) so that the parsers see them. Markers that are
 * ordinary text tokens of v need nothing. */
size_t api_keep_markers(const vocab *v, const api_gen *g, int32_t *ids, size_t cap);

#endif
