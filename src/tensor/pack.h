/* Row-interleaved ("x8") weight layouts.
 *
 * A matrix of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, the 1-3 bit IQ
 * types (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M), TQ1_0, TQ2_0,
 * F16 or BF16 weights whose row
 * count is a multiple of 8 can be repacked once, at load, so that each group of 8 consecutive rows
 * is stored block by block: the first block of all 8 rows, then the second
 * block of all 8, and so on, with the codes of the 8 rows interleaved 4 by
 * 4 inside each block (pack_internal.h gives the byte layouts). A kernel
 * then produces 8 rows at once with one row per vector lane: the scales of
 * 8 rows come from one load, no per-row horizontal sum is needed, and each
 * thread reads one contiguous stream. Matrix x vector (decode) gets about
 * half the instructions per weight byte of the GGUF layout.
 *
 * A packed matrix is passed to tensor_matmul with its type or'ed with
 * TENSOR_PACKED; everything else about the call is unchanged (the same
 * activation type as the unpacked type; ask tensor_matmul_scratch_bytes
 * with the packed type: F16 and BF16 need scratch packed, none unpacked).
 *
 * Results: per (row, token) pair a packed matrix takes one float step (two
 * with the K-quant mins) per block, accumulated in one float, in block
 * order (F16 and BF16: one fma per weight in four fixed chains,
 * pack_internal.h). That sequence is the same for every batch, tile shape and thread
 * count, and at every SIMD level (the scalar kernels are the reference),
 * so batch invariance holds as for the GGUF layout. Packed and unpacked
 * results of the same matrix differ only by float rounding. */
#ifndef STRATA_TENSOR_PACK_H
#define STRATA_TENSOR_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Or'ed into a weight type: the x8 layout of that type. */
#define TENSOR_PACKED 0x100u

/* Rows per interleaved group. */
#define TENSOR_X8_ROWS 8

/* True when a (n_rows, n_cols) matrix of `type` (a plain GGUF type) can be
 * packed: the type has an x8 layout (those above), n_rows is a
 * positive multiple of 8 and n_cols a whole number of blocks. */
bool tensor_pack_available(uint32_t type, int64_t n_rows, int64_t n_cols);

/* Bytes of the packed matrix; 0 when tensor_pack_available is false. */
size_t tensor_pack_bytes(uint32_t type, int64_t n_rows, int64_t n_cols);

/* Packs the matrix src (GGUF layout, rows contiguous) into dst
 * (tensor_pack_bytes bytes, 32-byte aligned). Returns 0; STRATA_EINVAL when
 * tensor_pack_available is false or a pointer is NULL; STRATA_ERANGE when
 * the data has a value the x8 layout does not take (a Q8_0 code of -128,
 * which no quantizer writes but a file could hold): the caller then keeps
 * the GGUF layout. The layouts of the 1-3 bit IQ and the ternary types hold
 * values, not the codes they came from, so they have no unpacker
 * (tensor_pack_row). dst is unspecified after an error. */
int tensor_pack(uint32_t type, const void *src, int64_t n_rows, int64_t n_cols, void *dst);

/* Rebuilds row `row` of a packed (n_rows, n_cols) matrix of plain type
 * `type` in its GGUF layout at dst (the row's GGUF bytes: packing loses
 * nothing, so they equal the source row's). False when the type has no
 * unpacker or the shape or row is out of range; dst is then untouched. */
bool tensor_pack_row(uint32_t type, const void *packed, int64_t n_rows, int64_t n_cols,
                     int64_t row, void *dst);

#endif
