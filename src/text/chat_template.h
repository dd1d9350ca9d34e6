/* Chat templates: turning a list of chat messages into the prompt a model
 * expects, with the Jinja template the model ships (tokenizer.chat_template
 * in its GGUF), rendered as Hugging Face renders it (text/jinja.h).
 *
 * The template sees `messages` (the JSON array as given), `bos_token`,
 * `eos_token`, `add_generation_prompt`, `tools` when given (otherwise it is
 * undefined, as `tools is defined` checks expect), and any extra variables
 * the caller passes (`enable_thinking`, `documents`, ...). */
#ifndef STRATA_TEXT_CHAT_TEMPLATE_H
#define STRATA_TEXT_CHAT_TEMPLATE_H

#include "base/err.h"
#include "gguf/gguf.h"
#include "text/jinja.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct chat_template_opts {
    bool add_generation_prompt;
    const char *bos_token; /* NULL: "" */
    const char *eos_token; /* NULL: "" */
    const json_t *tools;   /* NULL: `tools` is undefined */
    const json_t *extra;   /* a JSON object of more variables, or NULL; the
                              fields above take precedence over its keys */
    int year, month, day;  /* the date strftime_now sees; 0: today */
    jinja_limits limits;   /* zero fields: jinja.h's defaults */
} chat_template_opts;

/* Parses and renders len bytes of template for messages (a JSON array of
 * message objects). On success *out is a malloc'd NUL-terminated prompt of
 * *out_len bytes (caller frees). Errors as jinja_template_parse and
 * jinja_render (err holds "template line:col: reason"), plus STRATA_EINVAL
 * when messages is not an array or extra not an object. */
int chat_template_render(const char *tmpl, size_t len, const json_t *messages,
                         const chat_template_opts *o, char **out, size_t *out_len,
                         strata_err *err);

/* As chat_template_render with a template parsed once by the caller, for
 * rendering many conversations (a server parses at model load). */
int chat_template_render_parsed(const jinja_template *t, const json_t *messages,
                                const chat_template_opts *o, char **out, size_t *out_len,
                                strata_err *err);

/* What a GGUF says about chat formatting: the template and the text of its
 * BOS and EOS tokens. All strings are malloc'd copies, NUL-terminated;
 * free with chat_template_src_free. */
typedef struct chat_template_src {
    char *tmpl;
    size_t tmpl_len;
    char *bos; /* "" when the model names no BOS token */
    char *eos; /* "" when the model names no EOS token */
} chat_template_src;

/* Reads tokenizer.chat_template (or tokenizer.chat_template.<name> when name
 * is not NULL) and the BOS/EOS token texts (tokenizer.ggml.bos_token_id and
 * eos_token_id looked up in tokenizer.ggml.tokens). Errors: STRATA_ENOTFOUND
 * when the model has no such template, STRATA_EFORMAT when a key has the
 * wrong type, STRATA_ENOMEM. */
int chat_template_from_gguf(const gguf *g, const char *name, chat_template_src *out,
                            strata_err *err);

void chat_template_src_free(chat_template_src *s);

#endif
