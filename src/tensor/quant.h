/* Converting rows between float32 and GGUF's tensor types.
 *
 * Supported types (tensor_type_supported): F32, F16, BF16, the legacy
 * block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, the non-linear IQ4_NL and IQ4_XS, MXFP4, and the activation types
 * Q8_1 (pairs with Q4_1/Q5_1) and Q8_K (pairs with the K-quants). Block
 * layouts are in blocks.h.
 *
 * Quantizing weights searches each block's scales for the least squared
 * error rather than taking max-abs or min-max scales (see quant_search.c
 * for the method); Q8_0, Q8_1 and Q8_K, which quantize activations on the
 * decode path, use the plain max-abs rule with round-to-nearest. All
 * quantizers are deterministic (the same bytes for the same input, whatever
 * else runs) and allocate nothing. Non-finite inputs give unspecified but
 * memory-safe codes; finite inputs never produce Inf or NaN scales (scales
 * saturate at the f16 range).
 *
 * This is the scalar reference: SIMD variants, when they come, keep these
 * signatures and are checked against these functions. */
#ifndef STRATA_TENSOR_QUANT_H
#define STRATA_TENSOR_QUANT_H

#include "base/err.h"
#include "gguf/types.h"

#include <stdbool.h>
#include <stdint.h>

/* Decodes n elements (a whole number of blocks of `type`) from src into dst.
 * src holds strata_type_row_bytes(type, n) bytes aligned as its block struct
 * (blocks.h); dst holds n floats. Returns 0; STRATA_EINVAL when n is
 * negative or not a multiple of the block size or a pointer is NULL with
 * n > 0; STRATA_EUNSUPPORTED for a type without a decoder here. */
int tensor_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Encodes n floats (a whole number of blocks) from src into dst, which
 * holds strata_type_row_bytes(type, n) bytes. Same errors as above. */
int tensor_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* True when this build can both quantize and dequantize `type`. */
bool tensor_type_supported(uint32_t type);

/* The per-type row functions behind the two calls above, for loops that
 * convert many rows of one type and want no per-call checks: n must be a
 * multiple of the block size and the pointers valid. NULL for types that
 * are not supported. */
typedef void (*tensor_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*tensor_quant_fn)(const float *src, void *dst, int64_t n);
tensor_dequant_fn tensor_get_dequant(uint32_t type);
tensor_quant_fn tensor_get_quant(uint32_t type);

#endif
