/* From generated token ids to the text a client sees: streaming
 * detokenization (whole UTF-8 characters only), end-of-generation tokens
 * dropped, and stop strings — text that could still become a stop string is
 * held back, and the stop string itself is never returned.
 *
 * One textgen per request, used by one thread (the request's handler). */
#ifndef STRATA_SERVE_TEXTGEN_H
#define STRATA_SERVE_TEXTGEN_H

#include "base/err.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable byte string, NUL-terminated when data != NULL. */
typedef struct sbuf {
    char *data;
    size_t len, cap;
} sbuf;

int sbuf_append(sbuf *b, const char *s, size_t n);
int sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(sbuf *b);

#define TEXTGEN_MAX_STOPS 8

typedef struct textgen {
    const vocab *v;
    tok_stream st;
    const char *stops[TEXTGEN_MAX_STOPS]; /* borrowed; non-empty */
    size_t n_stops;
    sbuf held;         /* text not yet released (could start a stop string) */
    size_t n_consumed; /* tokens taken, the ending one included */
    bool ended;        /* an end-of-generation token or a stop string was seen */
    bool hit_stop;     /* ended by a stop string */
} textgen;

/* prompt[0..n_prompt) primes the detokenizer so spacing rules see the whole
 * sequence; nothing of it is output. stops are borrowed (must outlive tg). */
int textgen_init(textgen *tg, const vocab *v, const int32_t *prompt, size_t n_prompt,
                 const char *const *stops, size_t n_stops, strata_err *err);
/* Feeds one generated id; appends releasable text to out. After it returns
 * with tg->ended set, further ids are ignored. */
int textgen_push(textgen *tg, int32_t id, sbuf *out, strata_err *err);
/* The end of the sequence: releases what was held (an incomplete character
 * becomes U+FFFD). */
int textgen_finish(textgen *tg, sbuf *out, strata_err *err);
void textgen_free(textgen *tg);

#endif
