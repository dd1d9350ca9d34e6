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

#endif
