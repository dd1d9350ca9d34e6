/* What the variants of ops.c share: the tables and the rope angle
 * generator. Private to src/tensor/ops*.c. */
#ifndef STRATA_TENSOR_OPS_INTERNAL_H
#define STRATA_TENSOR_OPS_INTERNAL_H

#include "ops.h"

/* The scalar reference table (ops.c) and, on x86-64, the AVX2 table
 * (ops_avx2.c, whose functions may run only where strata_cpu_level() is at
 * least STRATA_SIMD_AVX2). */
extern const tensor_ops tensor_ops_scalar;
#if defined(__x86_64__)
extern const tensor_ops tensor_ops_avx2;
#endif

/* GELU's constants, as GGML writes them, folded for x / (1 + e^-y2):
 * y2 = 2 sqrt(2/pi) (x + 0.044715 x^3) = x (C2 + C2A x^2). */
#define TENSOR_GELU_C2 1.5957691216057308f   /* 2 * sqrt(2/pi) */
#define TENSOR_GELU_C2A 0.07135481627260025f /* 2 * sqrt(2/pi) * 0.044715 */

/* Pairs of rope are processed in chunks of this many, so the angles of a
 * chunk are computed once and applied to every head. */
#define TENSOR_ROPE_CHUNK 64

/* The angles of rope's pairs, generated in GGML's order (see tensor_rope in
 * ops.h): the running theta is multiplied by theta_scale once per pair. */
typedef struct tensor_rope_angles {
    float theta;       /* the running (undivided, unscaled) theta of the next pair */
    float theta_scale; /* powf(freq_base, -2.0f / n_rot) */
    float freq_scale;
    const float *freq_factors; /* NULL, or indexed by the pair */
    int k_next;                /* the pair whose angle comes next */
} tensor_rope_angles;

void tensor_rope_angles_init(tensor_rope_angles *a, int64_t pos, float freq_base,
                             float freq_scale, const float *freq_factors, int n_rot);

/* Fills cos_k[0..n_pairs) and sin_k[0..n_pairs) for the next n_pairs pairs. */
void tensor_rope_angles_next(tensor_rope_angles *a, float *cos_k, float *sin_k, int n_pairs);

#endif
