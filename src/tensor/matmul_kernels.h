/* The kernels behind tensor_matmul, shared between matmul.c (the driver and
 * the traits table), the vecdot_*.c files that implement them per SIMD
 * level, and the tests. Not part of the tensor layer's interface.
 *
 * A weight type has one kernel set per SIMD level. Every function of a set
 * computes dot products of weight rows (the weight type, GGUF blocks) with
 * activation rows (the type's vec_dot_type, already quantized), and they
 * differ only in how many (row, token) pairs one call covers:
 *
 *   vec_dot    1 row  x 1 token
 *   tile_rows  rows_r rows x 1 token         (decode: matrix x vector)
 *   tile       tile_r rows x tile_t tokens   (prefill)
 *
 * BATCH INVARIANCE. Within one set, each (row, token) pair gets the same
 * float operations in the same order whichever function computes it: a
 * tile keeps one accumulator per pair and runs, per pair, exactly the
 * sequence of the 1x1 kernel (in practice all three are instantiations of
 * one inline template with different constant shapes). Integer partial
 * sums are exact, so only the float steps need to agree; they do, and the
 * final horizontal reduction is one shared function. So y[t][r] is
 * bit-identical whatever the batch, the tile shape or the thread split.
 * Results may differ between SIMD levels. */
#ifndef STRATA_TENSOR_MATMUL_KERNELS_H
#define STRATA_TENSOR_MATMUL_KERNELS_H

#include "base/cpu.h"

#include <stddef.h>
#include <stdint.h>

/* dot(weight row w, activation row x) over n elements (n a whole number of
 * blocks of the weight type; any n for F32/F16/BF16). */
typedef float (*tensor_vec_dot_fn)(int64_t n, const void *w, const void *x);

/* A fixed-shape tile: for r < R and t < T,
 *   y[t * y_stride + r] = dot(w + r * w_stride bytes, x + t * x_stride bytes). */
typedef void (*tensor_tile_fn)(int64_t n, const void *w, size_t w_stride, const void *x,
                               size_t x_stride, float *y, size_t y_stride);

typedef struct tensor_mm_kernels {
    const char *name;          /* "q4_0/avx2", for test and bench output */
    tensor_vec_dot_fn vec_dot; /* never NULL */
    tensor_tile_fn tile_rows;  /* rows_r x 1; NULL when rows_r == 1 */
    tensor_tile_fn tile;       /* tile_r x tile_t; NULL when both are 1 */
    int rows_r;                /* >= 1 */
    int tile_r, tile_t;        /* >= 1 */
} tensor_mm_kernels;

/* The kernel set for `type` at SIMD level `level` or, where that level has
 * none for the type, the highest lower level that does. NULL for a type
 * tensor_matmul does not take. For tests and benchmarks: the production
 * path uses the level of strata_cpu_level(), resolved once. */
const tensor_mm_kernels *tensor_mm_kernels_at(uint32_t type, enum strata_simd_level level);

/* The kernel set defined exactly at `level` (no fallback), or NULL. */
const tensor_mm_kernels *tensor_mm_kernels_exact(uint32_t type, enum strata_simd_level level);

/* tensor_matmul with the kernels of an explicit level (tests compare
 * levels through it). Same contract as tensor_matmul otherwise, plus
 * STRATA_EUNSUPPORTED when this CPU cannot run that level (STRATA_CPU does
 * not cap it: only the hardware does). */
struct strata_pool;
int tensor_matmul_at_level(struct strata_pool *pool, enum strata_simd_level level, uint32_t type,
                           const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                           int64_t n_tok, float *y, void *scratch);

/* --- the kernel sets, one object per (type, level) --- */

#define TENSOR_MM_DECLARE(level)                   \
    extern const tensor_mm_kernels tensor_mmk_f32_##level;    \
    extern const tensor_mm_kernels tensor_mmk_f16_##level;    \
    extern const tensor_mm_kernels tensor_mmk_bf16_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q4_0_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q4_1_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q5_0_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q5_1_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q8_0_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q2_k_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q3_k_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q4_k_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q5_k_##level;   \
    extern const tensor_mm_kernels tensor_mmk_q6_k_##level;   \
    extern const tensor_mm_kernels tensor_mmk_iq4_nl_##level; \
    extern const tensor_mm_kernels tensor_mmk_iq4_xs_##level; \
    extern const tensor_mm_kernels tensor_mmk_tq1_0_##level;  \
    extern const tensor_mm_kernels tensor_mmk_tq2_0_##level;  \
    extern const tensor_mm_kernels tensor_mmk_mxfp4_##level;  \
    extern const tensor_mm_kernels tensor_mmk_iq2_xxs_##level; \
    extern const tensor_mm_kernels tensor_mmk_iq2_xs_##level; \
    extern const tensor_mm_kernels tensor_mmk_iq2_s_##level;  \
    extern const tensor_mm_kernels tensor_mmk_iq3_xxs_##level; \
    extern const tensor_mm_kernels tensor_mmk_iq3_s_##level;  \
    extern const tensor_mm_kernels tensor_mmk_iq1_s_##level;  \
    extern const tensor_mm_kernels tensor_mmk_iq1_m_##level;

TENSOR_MM_DECLARE(scalar)

#if defined(__x86_64__)
TENSOR_MM_DECLARE(avx2)
/* AVX-512 (VNNI on 256-bit vectors) exists for the types whose
 * tensor_mmk_*_avx512 objects vecdot_avx512.c defines; the table in
 * matmul.c names only those. */
extern const tensor_mm_kernels tensor_mmk_q4_0_avx512;
extern const tensor_mm_kernels tensor_mmk_q5_0_avx512;
extern const tensor_mm_kernels tensor_mmk_q8_0_avx512;
extern const tensor_mm_kernels tensor_mmk_q4_k_avx512;
extern const tensor_mm_kernels tensor_mmk_iq2_xxs_avx512;
extern const tensor_mm_kernels tensor_mmk_iq2_xs_avx512;
extern const tensor_mm_kernels tensor_mmk_iq2_s_avx512;
extern const tensor_mm_kernels tensor_mmk_iq3_xxs_avx512;
extern const tensor_mm_kernels tensor_mmk_iq3_s_avx512;
extern const tensor_mm_kernels tensor_mmk_iq1_s_avx512;
extern const tensor_mm_kernels tensor_mmk_iq1_m_avx512;
#endif

#undef TENSOR_MM_DECLARE

#endif
