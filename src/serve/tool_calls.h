/* Tool calls in model output: which syntax a chat template's model writes
 * calls in (detected from the template's text), the parser that turns a
 * finished output into OpenAI's `tool_calls` plus the text around them,
 * how much of a growing output is surely plain text (for streaming), and
 * the GBNF that forces a call of declared functions in that syntax.
 * Pure functions; the output parsed is untrusted (the model wrote it).
 *
 * Formats (the README's "Tool calls" has the template -> format table):
 *   HERMES    <tool_call>{"name": N, "arguments": {...}}</tool_call>, one
 *             or more (Hermes, Qwen 2.5/3, Granite 4, MiMo, ...; also the
 *             fallback for a template with no known marker, ChatML included)
 *   LLAMA3    the whole output one JSON object {"name": N, "parameters":
 *             {...}} (several separated by ';'), or such objects after
 *             <|python_tag|> (Llama 3.1/3.2/3.3)
 *   MISTRAL   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...], or the
 *             newer [TOOL_CALLS]N[ARGS]{...} repeated (Nemo, Small 3.2,
 *             Devstral, Ministral 3)
 *   DEEPSEEK  <｜tool▁calls▁begin｜> then calls <｜tool▁call▁begin｜>
 *             [function<｜tool▁sep｜>N\n```json\n{...}\n``` | N<｜tool▁sep｜>{...}]
 *             <｜tool▁call▁end｜>, then <｜tool▁calls▁end｜> (R1, V3, V3.1)
 *   HARMONY   gpt-oss: a message <|channel|>commentary to=functions.N
 *             ... <|message|>{...}; its calls come from the reasoning
 *             split (reasoning.h), so tool_calls_parse finds none here;
 *             forced as one call (the format's one call a turn), after an
 *             optional analysis message
 *   XML       <tool_call><function=N><parameter=K>V</parameter>...
 *             </function></tool_call>, repeated (Qwen3-Coder, Qwen 3.5,
 *             Nemotron 3, Step 3.5): V is the value's text (one newline on
 *             each side dropped), a string where the tool's schema says
 *             "string" (or the text is not JSON), else the JSON it holds;
 *             forced with the schema's properties in order (string values
 *             as text without '<')
 *   FUNCTIONARY  <function=N>{...}</function>, repeated (functionary
 *             medium/small v3.1, on Llama 3.1; the closing tag may be
 *             missing at the very end)
 *   FIREFUNCTION  functools[{"name": N, "arguments": {...}}, ...] (firefunction
 *             v2, on Llama 3; no closing marker after the list)
 *   RECIPIENTS functionary v3.2: messages RECIPIENT\nBODY joined by
 *             ">>>" (the prompt ends with the first ">>>"), "all" for
 *             text and a function's name for a call; parsed with the
 *             reasoning split (reasoning.h) as HARMONY is; forced as an
 *             optional "all" message whose text has no '>', then one
 *             call (or, with parallel, several)
 * Families recognized but not parsed (TOOL_FORMAT_UNSUPPORTED, with their
 * name): Seed-OSS's <seed:tool_call>, MiniMax's <invoke name=...>, GLM's
 * <arg_key>/<arg_value>, Kimi K2's sections. */
#ifndef STRATA_SERVE_TOOL_CALLS_H
#define STRATA_SERVE_TOOL_CALLS_H

#include "base/err.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum tool_format {
    TOOL_FORMAT_HERMES,
    TOOL_FORMAT_LLAMA3,
    TOOL_FORMAT_MISTRAL,
    TOOL_FORMAT_DEEPSEEK,
    TOOL_FORMAT_HARMONY, /* parsed with the reasoning (reasoning.h) */
    TOOL_FORMAT_XML,
    TOOL_FORMAT_FUNCTIONARY,
    TOOL_FORMAT_RECIPIENTS, /* parsed with the reasoning split (reasoning.h) */
    TOOL_FORMAT_FIREFUNCTION,
    TOOL_FORMAT_UNSUPPORTED,
} tool_format;

/* The format of the model whose chat template is tmpl (NUL-terminated;
 * NULL: no template, ChatML). *family, when not NULL, gets a static name
 * of the family ("hermes", "llama3", "mistral", "deepseek", "qwen3-xml",
 * "seed-oss", "functionary", "functionary-v3.2", "firefunction", "glm",
 * "kimi", "harmony", "minimax"). */
tool_format tool_format_detect(const char *tmpl, const char **family);

/* The marker texts format f's calls are written with ([n]; NULL when
 * none): a server keeps those that are control tokens of its vocabulary
 * (Mistral's [TOOL_CALLS] and [ARGS], Llama 3's <|python_tag|>,
 * DeepSeek's) in the text it detokenizes, so the parser sees them. The
 * formats parsed with the reply split (HARMONY, RECIPIENTS) have theirs in
 * reasoning_markers: their calls are always split. */
const char *const *tool_calls_markers(tool_format f, size_t *n);

/* One parsed call. */
typedef struct tool_call {
    char *name;      /* malloc'd */
    char *arguments; /* compact JSON text of an object, malloc'd */
} tool_call;

typedef struct tool_parsed {
    char *content;   /* the text outside the calls, malloc'd, NUL-terminated */
    size_t n_content;
    tool_call *calls; /* (n_calls), malloc'd */
    size_t n_calls;
} tool_parsed;

/* Parses a finished output text[0..n). When every call in it is well
 * formed (a name and an argument object), calls holds them in order and
 * content the text before the first call (plus any text after the last);
 * otherwise (no call, or one cut short or malformed) no call and content is
 * the whole text: model output never fails the request. 0, or -1 when
 * memory ran out. Free with tool_parsed_free. */
int tool_calls_parse(tool_format f, const char *text, size_t n, tool_parsed *out);
/* Frees n calls (their names and arguments) and the array v. */
void tool_calls_free(tool_call *v, size_t n);
/* As tool_calls_parse, with the request's `tools` (OpenAI's array, or
 * NULL), whose parameter schemas type the XML syntax's values. */
int tool_calls_parse_typed(tool_format f, const char *text, size_t n, const json_t *tools,
                           tool_parsed *out);
void tool_parsed_free(tool_parsed *p);

/* How many bytes at the start of a growing output text[0..n) are surely
 * plain text, whatever comes next: up to the first call marker, and short of
 * a tail that could still become one (or, for LLAMA3, nothing while the
 * output may be a bare JSON call). Streaming sends only those as content
 * until the output ends. */
size_t tool_calls_text_prefix(tool_format f, const char *text, size_t n);

/* One declared function as the grammar sees it. */
typedef struct tool_decl {
    const char *name;
    const json_t *parameters; /* a JSON Schema, or NULL: any object */
} tool_decl;

/* GBNF (start rule `root`) of one call, or with parallel one or more, of
 * the declared tools[0..n) in format f, arguments valid against each
 * tool's parameters (compiled by serve/json_schema.h). *out malloc'd.
 * 0; STRATA_EINVAL with err naming the tool (its schema does not compile,
 * or f is TOOL_FORMAT_UNSUPPORTED); STRATA_ENOMEM. */
int tool_calls_grammar(tool_format f, const tool_decl *tools, size_t n, bool parallel, char **out,
                       strata_err *err);

/* Appends gbnf (a grammar the server wrote) to b with every rule name
 * prefixed by pre ("t3-"): names are the identifiers outside string
 * literals, character classes and comments. 0, or -1 when memory ran out. */
struct sbuf;
int gbnf_append_renamed(struct sbuf *b, const char *gbnf, const char *pre);

#endif
