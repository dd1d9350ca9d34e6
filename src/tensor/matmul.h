/* Matrix products of GGUF weights with float activations:
 *   y[t][r] = sum_c W[r][c] * x[t][c]
 * for every weight type a model's linear layers use.
 *
 * The activations are first quantized, once per call, to the type that
 * pairs with the weights (tensor_matmul_vec_dot_type): Q8_0 for Q4_0, Q5_0,
 * Q8_0, IQ4_NL and MXFP4; Q8_1 for Q4_1 and Q5_1; Q8_K for the K-quants,
 * IQ4_XS, TQ1_0 and TQ2_0. The codes are then multiplied in integer arithmetic, and float
 * only enters for the block scales. F32, F16 and BF16 weights are
 * multiplied with the float32 activations as they are (no scratch): f16 and
 * bf16 values are widened to float32 (exactly) and the products summed in
 * float32, which keeps the activations' full precision.
 *
 * Batch invariance: y[t][r] depends only on row r of W and row t of x: it
 * is bit-for-bit the same whatever n_tok is, whatever the other tokens
 * hold, and however many threads the pool has. (It may differ between SIMD
 * levels; the level is fixed for the life of the process, see base/cpu.h.)
 *
 * Threads: tensor_matmul is called by the pool's owner thread and uses the
 * pool for both phases; it allocates nothing. */
#ifndef STRATA_TENSOR_MATMUL_H
#define STRATA_TENSOR_MATMUL_H

#include "base/threadpool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when tensor_matmul takes weights of this type: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
 * TQ1_0, TQ2_0, MXFP4. */
bool tensor_matmul_supported(uint32_t type);

/* The activation type for weights of `type` (F32 for the float types), or
 * -1 when the type is not supported. */
int tensor_matmul_vec_dot_type(uint32_t type);

/* Bytes of scratch tensor_matmul needs for these shapes: n_tok rows of
 * n_cols activations in the vec_dot_type. 0 for F32/F16/BF16 weights, and 0
 * when the type is unsupported or n_cols is not a whole number of blocks
 * (tensor_matmul then fails before touching scratch). */
size_t tensor_matmul_scratch_bytes(uint32_t type, int64_t n_cols, int64_t n_tok);

/* y = x W^T.
 *   w:  (n_rows, n_cols) weights of `type`, rows contiguous in GGUF's block
 *       layout (strata_type_row_bytes(type, n_cols) bytes per row), aligned
 *       to the block struct (GGUF data is).
 *   x:  (n_tok, n_cols) float32, rows contiguous.
 *   y:  (n_tok, n_rows) float32, written in full; must not overlap x or w.
 *   scratch: tensor_matmul_scratch_bytes(type, n_cols, n_tok) bytes, 4-byte
 *       aligned (NULL allowed when that is 0); overwritten.
 *   pool: may be NULL (the caller's thread does everything).
 * n_cols must be a whole number of the type's blocks (32 or 256 elements;
 * any n_cols >= 1 for the float types).
 * Returns 0; STRATA_EINVAL for a bad shape or a NULL pointer;
 * STRATA_EUNSUPPORTED for a weight type without kernels. n_rows == 0 or
 * n_tok == 0 is a valid empty product. */
int tensor_matmul(strata_pool *pool, uint32_t type, const void *w, int64_t n_rows,
                  int64_t n_cols, const float *x, int64_t n_tok, float *y, void *scratch);

#endif
