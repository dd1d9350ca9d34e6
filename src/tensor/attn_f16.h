/* Attention kernels on float rows widened from F16 (the KV cache's F16
 * rows): the three inner loops of attention over an f16 KV cache.
 *
 *   widen: a block of F16 rows to float32 (exact);
 *   qk:    the scores of one query against n_rows key rows, each the dot
 *          product of tensor_dot_f32 (its 32 lanes and its reduction tree,
 *          ops.h) times the scale;
 *   pv:    the online-softmax rescale and the weighted sum of n_rows
 *          value rows into the accumulators of n_q queries.
 *
 * The float operations are fixed per output element and written out in
 * the scalar reference (attn_f16.c); every SIMD variant performs the same
 * ones in the same order, so a variant changes speed only: the tests check
 * each against the reference bit for bit, and the reference's qk against
 * tensor_dot_f32. The SIMD qk computes eight keys at a time and does the
 * reduction tree's horizontal steps for the eight together (the tree's
 * pairs stay the same; only which lanes hold them changes). A table per
 * SIMD level, chosen like the Q8_0 kernels' (attn_q8.h). */
#ifndef STRATA_TENSOR_ATTN_F16_H
#define STRATA_TENSOR_ATTN_F16_H

#include "base/cpu.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tensor_attn_f16 {
    const char *name; /* "scalar", "avx2", "avx512" */
    enum strata_simd_level level;

    /* dst[i] = src[i] as float32 for i < n (exact). */
    void (*widen)(float *dst, const uint16_t *src, int64_t n);

    /* For j < n_rows: scores[j] = tensor_dot_f32(q, k + j * ld_k, n) * scale
     * (the dot product rounded, then the product). */
    void (*qk)(float *scores, const float *q, const float *k, size_t ld_k, int64_t n_rows,
               int64_t n, float scale);

    /* For g < n_q and each element e < n of acc_g = acc + g * ld_acc:
     *   acc_g[e] = acc_g[e] * c[g], then for j = 0 .. n_rows-1 in order
     *   acc_g[e] = acc_g[e] + p[g * ld_p + j] * v[j * ld_v + e]
     * (every product and every sum rounded on its own, never fused). */
    void (*pv)(float *acc, size_t ld_acc, const float *c, const float *p, size_t ld_p,
               int64_t n_q, const float *v, size_t ld_v, int64_t n_rows, int64_t n);
} tensor_attn_f16;

/* The table for a level, or NULL when this build or this CPU cannot run it
 * (tests use this to check every variant the machine has). Static storage. */
const tensor_attn_f16 *tensor_attn_f16_for_level(enum strata_simd_level level);

/* The table for strata_cpu_level() (the highest variant at or below it). */
const tensor_attn_f16 *tensor_attn_f16_get(void);

#endif
