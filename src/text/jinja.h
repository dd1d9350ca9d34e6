/* A Jinja template engine for chat templates: the subset of Jinja2 that
 * real model chat templates use, with the environment Hugging Face renders
 * them in (trim_blocks, lstrip_blocks, loop controls, no autoescape, no
 * trailing newline kept, `raise_exception` and `strftime_now`).
 *
 * A template is parsed once (jinja_template_parse) and rendered any number
 * of times, from any number of threads at once (a render only reads the
 * template). Every render is bounded: a step budget, a cap on nesting and
 * recursion, a cap on the bytes of output and on the bytes of values alive
 * at once, so no template, however hostile, can hang the process or
 * exhaust its memory. Errors carry the template's line and column.
 *
 * Supported: {{ }}, {# #}, {% raw %}, whitespace control (- and +),
 * if/elif/else, for (loop.*, `if` filter, else, tuple targets, break,
 * continue), set (names, namespace attributes, tuples, blocks with
 * filters), macro (defaults, keyword arguments, caller), call, filter,
 * with, generation; literals, attribute/item access, slicing, calls, the
 * operators of Jinja, tests, filters, Python string/list/dict methods.
 * Not supported (a clear error): extends, block, include, import, from,
 * recursive loops, argument unpacking (* and **) in calls, macro varargs. */
#ifndef STRATA_TEXT_JINJA_H
#define STRATA_TEXT_JINJA_H

#include "base/err.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct jinja_template jinja_template;

/* Bounds of one render; a zero field takes the default below. */
typedef struct jinja_limits {
    uint64_t max_steps;      /* expression and statement evaluations */
    size_t max_output_bytes; /* bytes written, the result included */
    size_t max_memory_bytes; /* bytes of values alive at once */
    int max_depth;           /* nesting of evaluation (macro recursion included) */
} jinja_limits;

#define JINJA_DEFAULT_MAX_STEPS 20000000u
#define JINJA_DEFAULT_MAX_OUTPUT (64u << 20)
#define JINJA_DEFAULT_MAX_MEMORY (256u << 20)
#define JINJA_DEFAULT_MAX_DEPTH 800
#define JINJA_MAX_SOURCE (1u << 20) /* bytes of template source (real ones are < 64 KiB) */

/* Parses len bytes of template source. On success *out owns the template
 * (free with jinja_template_free). Errors: STRATA_EFORMAT for a syntax
 * error, STRATA_EUNSUPPORTED for a construct this engine does not have,
 * STRATA_ERANGE for a source over JINJA_MAX_SOURCE; err holds
 * "template line:col: reason". */
int jinja_template_parse(jinja_template **out, const char *src, size_t len, strata_err *err);

void jinja_template_free(jinja_template *t);

typedef struct jinja_render_opts {
    const json_t *vars;   /* a JSON object: the template's variables (may be NULL) */
    int year, month, day; /* the date strftime_now sees (year 1..9999); year 0: today,
                             local time */
    jinja_limits limits;
} jinja_render_opts;

/* Renders t. On success *out is a malloc'd NUL-terminated string (free()
 * it) of *out_len bytes (the output may itself contain NUL bytes). Errors:
 * STRATA_EINVAL for a template that fails at run time (an undefined value
 * used, a type error, raise_exception: its message), STRATA_ERANGE for a
 * limit reached, STRATA_ENOMEM; err holds "template line:col: reason". */
int jinja_render(const jinja_template *t, const jinja_render_opts *o, char **out,
                 size_t *out_len, strata_err *err);

#endif
