/* JSON Schema -> GBNF (the grammar dialect of the engine's `gen`
 * `grammar`, start rule `root`): the server compiles a request's
 * `response_format` / `json_schema` into the grammar the engine's sampler
 * enforces. Pure functions; the schema is untrusted input.
 *
 * Output shape: compact JSON, no whitespace anywhere (no spaces after `:`
 * or `,`, none around brackets), properties in the schema's order, optional
 * ones possibly left out; numbers in JSON's syntax, integers without
 * leading zeros; at most 16 digits before the point, 16 after, 3 in the
 * exponent. `enum`/`const` values and keys are written as compact JSON with
 * UTF-8 as is.
 *
 * Coverage and its limits are in the README ("Structured output"); any
 * keyword outside it is an error naming it and its JSON pointer path
 * (`/properties/age/multipleOf`), never dropped. */
#ifndef STRATA_SERVE_JSON_SCHEMA_H
#define STRATA_SERVE_JSON_SCHEMA_H

#include "base/err.h"

#include <jansson.h>
#include <stddef.h>

/* The largest grammar a schema may compile to (bytes of GBNF text). */
#define JSON_SCHEMA_MAX_GBNF (256 * 1024)
/* The deepest nesting of subschemas (not counting $ref recursion, which
 * the grammar handles itself). */
#define JSON_SCHEMA_MAX_DEPTH 64
/* The largest count in minItems/maxItems/minLength/maxLength. */
#define JSON_SCHEMA_MAX_COUNT 4096

/* Compiles schema to NUL-terminated GBNF in *out (malloc'd, the caller
 * frees). 0, or STRATA_EINVAL with err naming the keyword and its path
 * (unsupported keyword, bad value, over the size bound), or STRATA_ENOMEM. */
int json_schema_to_gbnf(const json_t *schema, char **out, strata_err *err);

/* The grammar of any JSON object (`{"type": "json_object"}`), malloc'd;
 * NULL on ENOMEM. */
char *json_schema_any_object_gbnf(void);

/* The grammar of outputs that match the regular expression re[0..n) as a
 * whole (vLLM's guided_regex; a leading ^ and a trailing $ change
 * nothing): the subset of `pattern` (literals, escapes \d \w \s \D \W
 * \S \n \t ..., classes of ASCII characters, ., groups, |, * + ?
 * {m,n}; `.` is any character but a newline, \s Python's ASCII blanks).
 * 0 and *out (malloc'd); STRATA_EINVAL with err naming `field` and what
 * is not supported; STRATA_ENOMEM. */
int json_schema_regex_to_gbnf(const char *re, size_t n, const char *field, char **out,
                              strata_err *err);

/* The grammar of outputs equal to one of the strings of the array choices
 * (vLLM's guided_choice): non-empty strings, at least one. Errors as
 * above. */
int json_schema_choice_to_gbnf(const json_t *choices, const char *field, char **out,
                               strata_err *err);

#endif
