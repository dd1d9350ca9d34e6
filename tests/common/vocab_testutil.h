/* Hand-made vocabularies for tests: the tokenizer keys a test wrote with
 * gguf_writer, turned into a GGUF in memory and loaded as a vocab. For
 * cmocka tests (it asserts); include after <cmocka.h>. */
#ifndef STRATA_TESTS_VOCAB_TESTUTIL_H
#define STRATA_TESTS_VOCAB_TESTUTIL_H

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "text/vocab.h"

#include <stdio.h>
#include <stdlib.h>

/* Loads a vocab from w's keys (w is freed): vocab_load's status. */
static inline int tu_vocab_from_writer(gguf_writer *w, vocab **v, strata_err *err)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    assert_non_null(f);
    assert_int_equal(gguf_writer_write(w, f, "mem", NULL), 0);
    fclose(f);
    gguf_writer_free(w);
    gguf *g;
    assert_int_equal(gguf_open_buffer(&g, buf, size, "mem.gguf", NULL), 0);
    int rc = vocab_load(v, g, err);
    gguf_close(g);
    free(buf); /* the vocab keeps its own copy */
    return rc;
}

#endif
