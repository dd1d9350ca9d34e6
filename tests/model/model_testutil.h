/* Helpers shared by the model tests (header-only: each test program is
 * built from one .c file). Include after <cmocka.h>. */
#ifndef STRATA_TESTS_MODEL_TESTUTIL_H
#define STRATA_TESTS_MODEL_TESTUTIL_H

#include "model/forward.h"
#include "model/model.h"
#include "testdata.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sanitizer builds run 3-10x slower: tests thin out their work there. */
#include "sanitized.h"

/* Opens a model of the data folder (rel path), skipping the test when the
 * file is missing and failing it when the load fails. */
#define MT_OPEN(m, rel)                                                  \
    do {                                                                 \
        char mt_path_[4096];                                             \
        TESTDATA_FILE(mt_path_, rel);                                    \
        strata_err mt_err_;                                              \
        if (model_open(&(m), mt_path_, &mt_err_) != 0)                   \
            fail_msg("loading %s: %s", rel, mt_err_.msg);                \
    } while (0)

/* Reads whitespace-separated ids from a data file into a malloc'd array. */
static inline int32_t *mt_read_ids(const char *path, int64_t *n_out)
{
    size_t size;
    char *text = testdata_read_file(path, &size);
    if (text == NULL) return NULL;
    char *z = realloc(text, size + 1);
    if (z == NULL) {
        free(text);
        return NULL;
    }
    z[size] = '\0';
    int64_t cap = 64, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    char *p = z;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, (size_t)cap * sizeof(int32_t));
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(z);
    *n_out = n;
    return ids;
}

/* Reads a float32 little-endian file (this host is little-endian). */
static inline float *mt_read_f32(const char *path, int64_t *n_out)
{
    size_t size;
    float *x = testdata_read_file(path, &size);
    if (x != NULL) *n_out = (int64_t)(size / sizeof(float));
    return x;
}

static inline model_ctx *mt_ctx(const model *m, int64_t n_ctx, int n_seq, int n_threads,
                                int64_t n_batch)
{
    model_ctx_params p = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = n_threads,
                          .n_batch = n_batch};
    model_ctx *ctx = NULL;
    strata_err err;
    if (model_ctx_init(&ctx, m, &p, &err) != 0) fail_msg("model_ctx_init: %s", err.msg);
    return ctx;
}

/* Evaluates ids as one batch of sequence seq (started here, removed
 * after), positions 0..n-1, and writes every position's logits. */
static inline void mt_eval(model_ctx *ctx, int32_t seq, const int32_t *ids, int64_t n,
                           float *logits)
{
    strata_err err;
    kv_cache *kv = model_ctx_kv(ctx);
    if (kv_seq_add(kv, seq, &err) != 0) fail_msg("kv_seq_add: %s", err.msg);
    int32_t *seqs = malloc((size_t)n * sizeof(int32_t));
    int32_t *pos = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        seqs[i] = seq;
        pos[i] = (int32_t)i;
    }
    model_batch b = {.n_tokens = n, .tokens = ids, .seq_ids = seqs, .pos = pos};
    if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("model_forward: %s", err.msg);
    free(seqs);
    free(pos);
    kv_seq_remove(kv, seq);
}

/* Index of the largest value, the lowest index on ties. */
static inline int64_t mt_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = i;
    }
    return best;
}

/* Largest minus second largest. */
static inline float mt_top2_margin(const float *x, int64_t n)
{
    int64_t a = mt_argmax(x, n);
    float second = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (i != a && x[i] > second) second = x[i];
    }
    return x[a] - second;
}

#endif
