/* Attention kernels on Q8_0 rows (GGUF's block layout, blocks.h): the two
 * inner loops of attention over a q8_0 KV cache, working on the int8 codes
 * directly instead of widening whole blocks to float first.
 *
 *   qk: scores of G query heads (each quantized to Q8_0 per 32-block of
 *       head_dim) against n_rows key rows, as integer dot products per
 *       block times both scales;
 *   pv: the weighted sum of n_rows value rows into G float accumulators,
 *       each int8 code times its row's block scale times the row's weight.
 *
 * The float operations are fixed per output element and written out in the
 * scalar reference (attn_q8.c); every SIMD variant performs the same ones
 * in the same order (integer sums are exact whatever the lane split; float
 * products and sums are rounded one at a time, never fused), so a variant
 * changes speed only: the tests check each against the reference bit for
 * bit. A table per SIMD level, chosen at start-up like the vecdot tables. */
#ifndef STRATA_TENSOR_ATTN_Q8_H
#define STRATA_TENSOR_ATTN_Q8_H

#include "base/cpu.h"
#include "tensor/blocks.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tensor_attn_q8 {
    const char *name; /* "scalar", "avx2", "avx512" */
    enum strata_simd_level level;

    /* For g < n_q and j < n_rows:
     *   scores[g * ld_scores + j] = sum over b = 0 .. n_blk-1, in order, of
     *       (float)isum(q[g][b], k_j[b]) * (d(q[g][b]) * d(k_j[b]))
     * where q is (n_q, n_blk) blocks, row k_j starts at k + j * k_row_bytes
     * and holds n_blk blocks, isum is the exact int32 dot product of the 32
     * codes and d the f16 scale widened to float. */
    void (*qk)(float *scores, size_t ld_scores, const block_q8_0 *q, int64_t n_q,
               const uint8_t *k, size_t k_row_bytes, int64_t n_rows, int64_t n_blk);

    /* For g < n_q, then for j = 0 .. n_rows-1 in order, for each element e
     * of block b of row v_j (starting at v + j * v_row_bytes, n_blk blocks):
     *   acc[g * ld_acc + 32 b + e] += (p[g * ld_p + j] * d(v_j[b])) * (float)code
     * (the product rounded, then the sum). */
    void (*pv)(float *acc, size_t ld_acc, const float *p, size_t ld_p, int64_t n_q,
               const uint8_t *v, size_t v_row_bytes, int64_t n_rows, int64_t n_blk);
} tensor_attn_q8;

/* The table for a level, or NULL when this build or this CPU cannot run it
 * (tests use this to check every variant the machine has). Static storage. */
const tensor_attn_q8 *tensor_attn_q8_for_level(enum strata_simd_level level);

/* The table for strata_cpu_level() (the highest variant at or below it). */
const tensor_attn_q8 *tensor_attn_q8_get(void);

#endif
