/* Element ops over float rows: the non-matmul arithmetic of a forward pass.
 *
 * Each op has a portable scalar reference and SIMD variants with the same
 * signature; one table of them is chosen on first use from
 * strata_cpu_level() (so STRATA_CPU=scalar forces the reference) and the
 * tensor_* functions below call through it. Rows are plain float arrays of
 * any alignment and length; `out` may be the same pointer as an input (in
 * place), but must not otherwise overlap one.
 *
 * Guarantees every variant keeps:
 *  - Deterministic: the same inputs give the same bits, whatever the
 *    pointers' alignment, the thread, or what ran before.
 *  - Element-wise ops (exp, silu, gelu, swiglu, add, mul, scale) compute each
 *    output from its own inputs only: the value at index i does not depend
 *    on n or on i.
 *  - Reductions (dot, the sums in rmsnorm and softmax) use a fixed order
 *    that depends only on n, documented per function. For dot and rmsnorm
 *    that order is the same in every variant, which makes them bit-exact
 *    across variants; rope and add/mul/scale are bit-exact too.
 *  - The rest may differ between variants in the last bits, within the
 *    TENSOR_TOL_* bounds below, which the tests check against a
 *    double-precision evaluation of the same formula.
 *
 * NaN inputs give NaN outputs where the math says so; infinities are
 * handled where noted. */
#ifndef STRATA_TENSOR_OPS_H
#define STRATA_TENSOR_OPS_H

#include "base/cpu.h"

#include <stdint.h>

/* --- error bounds against the exact result for the same float inputs ---
 *
 * Per element: |got - exact| <= REL * |exact| (+ ABS where given), derived
 * from the roundings each variant makes (2^-24 relative each) and checked
 * by tests/tensor/test_ops.c against a double-precision evaluation. The
 * worst errors measured (2.6 million random inputs a variant) are noted.
 * Results below 1e-35 in magnitude may come out as +-0 for silu, gelu and
 * swiglu (e^-x overflows first; GGML does the same): TENSOR_TOL_ACT_ABS. */

/* exp: glibc's expf is within 1 ulp (measured 0.502), the SIMD exp within
 * 2 ulp (measured 1.91); subnormal results within 2 subnormal steps. */
#define TENSOR_TOL_EXP_REL 2.5e-7
#define TENSOR_TOL_EXP_ABS 3e-45
/* silu = x / (1 + e^-x): exp's 2.4e-7, then 1 + e and the division
 * (measured 2.5e-7). */
#define TENSOR_TOL_SILU_REL 4e-7
/* swiglu = silu(gate) * up: one rounding more (measured 2.7e-7). */
#define TENSOR_TOL_SWIGLU_REL 5e-7
#define TENSOR_TOL_ACT_ABS 1e-35
/* gelu = x / (1 + e^-2y): the four roundings in 2y = x (C2 + C2A x^2) move
 * e^-2y by |2y| times their relative size, so the bound is
 * TENSOR_TOL_GELU_REL * (1 + |2y|) * |exact| (measured 1.6e-7 * (1 + |2y|)). */
#define TENSOR_TOL_GELU_REL 4e-7
/* rmsnorm: squares rounded to float, the sum in double (negligible), then
 * mean, + eps, sqrtf, 1/x, * x, * w in float: 7 roundings (measured 2e-7). */
#define TENSOR_TOL_RMSNORM_REL 5e-7
/* softmax: e^d within 2 ulp, where d = x - max is itself rounded (relative
 * error |d| 2^-24 of the result), then 1/sum and the product; the bound is
 * TENSOR_TOL_SOFTMAX_REL * (1 + |x_i - max|) * exact + TENSOR_TOL_SOFTMAX_ABS
 * (measured 1.7e-7 * (1 + |d|)). */
#define TENSOR_TOL_SOFTMAX_REL 4e-7
#define TENSOR_TOL_SOFTMAX_ABS 1e-44
/* softcap = c tanh(x / c): an absolute bound in units of the cap c, since
 * the SIMD variant takes tanh as (1 - e^-2|y|) / (1 + e^-2|y|), whose
 * 1 - e^-2|y| loses relative (not absolute) accuracy near 0: the product
 * x (1/c) moves tanh by at most 0.45 of its rounding, exp's 2 ulp, the
 * sum, difference, quotient and final product a rounding each
 * (measured 1.7e-7 c). */
#define TENSOR_TOL_SOFTCAP_ABS 4e-7
/* dot: n products fused into 32 running sums (each sees n/32 roundings),
 * then 5 levels of the tree; the classic worst-case bound, relative to
 * sum |a_i b_i| (random data lands ~50x inside it). */
#define TENSOR_TOL_DOT(n) (((double)(n) / 32.0 + 7.0) * 0x1p-24)

/* --- the ops ---
 * n is an element count; n <= 0 does nothing (dot returns 0). */

/* out[i] = x[i] * (1 / sqrt(mean(x^2) + eps)) * w[i]; w NULL means all 1.
 * Matches GGML's rms_norm followed by mul: squares in float, the sum of
 * squares in double (lane j of 16 sums i = j mod 16, then a pairwise tree:
 * lane j += lane j+8, j+4, j+2, j+1), mean and scale in float. As in
 * GGML, a square above FLT_MAX (|x| > 1.8e19) makes the sum inf and the
 * row 0. */
void tensor_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* Rotary position embedding, in place, of one token's heads.
 * x: (n_head, head_dim). In each head, the first n_rot dims are rotated in
 * n_rot/2 pairs; dims n_rot..head_dim-1 are left alone. Pair k is
 * (2k, 2k+1) for TENSOR_ROPE_NORMAL and (k, k + n_rot/2) for
 * TENSOR_ROPE_NEOX, rotated by the angle
 *     theta_k = pos * freq_scale * freq_base^(-2k/n_rot) / freq_factors[k]
 * (freq_factors NULL means all 1; Llama 3's long-context factors):
 *     (a, b) -> (a cos theta_k - b sin theta_k, a sin theta_k + b cos theta_k).
 * The angles are computed exactly as GGML computes them, in float:
 * theta_0 = (float)pos, theta_k = theta_{k-1} * powf(base, -2/n_rot), then
 * / factor and * freq_scale, then cosf/sinf, so results match llama.cpp's
 * to the last bits. That order is not the most accurate: theta_k carries up
 * to ~k+3 roundings (relative error ~(k+3)*2^-24), which matters at large
 * pos * theta (see tests/tensor/test_ops.c for the bound tested).
 * n_rot must be even and <= head_dim; n_rot == 0 does nothing. */
enum tensor_rope_mode {
    TENSOR_ROPE_NORMAL = 0, /* GGML's rope type 0 (Llama and most) */
    TENSOR_ROPE_NEOX = 2,   /* GGML_ROPE_TYPE_NEOX (Qwen, Gemma, Falcon, ...) */
};
void tensor_rope(float *x, int n_head, int head_dim, int n_rot, int64_t pos, float freq_base,
                 float freq_scale, const float *freq_factors, int mode);

/* x[i] = e^(x[i] - max) / sum_j e^(x[j] - max), in place. -inf entries give
 * 0. A row of only -inf (fully masked) gives all 0 rather than NaN; a NaN or
 * +inf entry makes the whole row NaN. The sum
 * is in double, in index order within each variant (16 lanes, j = i mod 16,
 * then the pairwise tree of rmsnorm). */
void tensor_softmax(float *x, int64_t n);

/* out[i] = e^x[i]. 0 below ~-103.97 (past the smallest subnormal), +inf
 * above ~88.72, NaN for NaN. */
void tensor_exp(float *out, const float *x, int64_t n);

/* out[i] = x[i] / (1 + e^-x[i]) (SiLU, "swish"). -inf gives NaN, as in GGML. */
void tensor_silu(float *out, const float *x, int64_t n);

/* out[i] = GELU(x[i]) with GGML's tanh approximation,
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated in the equal
 * form x / (1 + e^(-2 sqrt(2/pi) (x + 0.044715 x^3))), which has no
 * cancellation for negative x. (GGML itself reads the value from a float16
 * table for |x| < 10, which is less accurate than this.) */
void tensor_gelu(float *out, const float *x, int64_t n);

/* x[i] = c tanh(x[i] / c), in place (Gemma 2's soft-capping of attention
 * scores and of the final logits), the division taken as a product by
 * 1 / c as GGML does. c > 0. +-inf gives +-c, NaN gives NaN. Within
 * TENSOR_TOL_SOFTCAP_ABS * c of the exact value. */
void tensor_softcap(float *x, float c, int64_t n);

/* out[i] = a[i] + b[i]. Exact IEEE operations: bit-identical everywhere. */
void tensor_add(float *out, const float *a, const float *b, int64_t n);

/* out[i] = a[i] * b[i]. Exact IEEE operations: bit-identical everywhere. */
void tensor_mul(float *out, const float *a, const float *b, int64_t n);

/* x[i] *= s, in place. Bit-identical everywhere. */
void tensor_scale(float *x, float s, int64_t n);

/* out[i] = silu(gate[i]) * up[i] (the SwiGLU feed-forward's gate), rounded
 * after the silu as GGML does. */
void tensor_swiglu(float *out, const float *gate, const float *up, int64_t n);

/* sum_i a[i] * b[i], in this fixed order, the same in every variant and for
 * any thread count (the caller splits rows, never one dot):
 *   lane j (0..31) = fma(a[i], b[i], lane j) for i = j, j+32, j+64, ... < n,
 *   starting from 0; then lane j += lane j+16, j+8, j+4, j+2, j+1 for the
 *   lanes below each step; the result is lane 0.
 * Fused multiply-adds (one rounding per term), so the scalar reference
 * needs fmaf, which is an instruction on every machine with AVX2 or NEON. */
float tensor_dot_f32(const float *a, const float *b, int64_t n);

/* --- the variant tables --- */

typedef struct tensor_ops {
    const char *name; /* "scalar", "avx2" */
    enum strata_simd_level level;
    void (*rmsnorm)(float *out, const float *x, const float *w, int64_t n, float eps);
    void (*rope)(float *x, int n_head, int head_dim, int n_rot, int64_t pos, float freq_base,
                 float freq_scale, const float *freq_factors, int mode);
    void (*softmax)(float *x, int64_t n);
    void (*exp)(float *out, const float *x, int64_t n);
    void (*silu)(float *out, const float *x, int64_t n);
    void (*gelu)(float *out, const float *x, int64_t n);
    void (*softcap)(float *x, float c, int64_t n);
    void (*add)(float *out, const float *a, const float *b, int64_t n);
    void (*mul)(float *out, const float *a, const float *b, int64_t n);
    void (*scale)(float *x, float s, int64_t n);
    void (*swiglu)(float *out, const float *gate, const float *up, int64_t n);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
} tensor_ops;

/* The table for a level, or NULL when this build has none for it or this
 * CPU cannot run it. The AVX-512 level has no table of its own yet and gets
 * the AVX2 one (these ops are bound by memory, not by vector width). For
 * tests and benchmarks that compare variants; static storage. */
const tensor_ops *tensor_ops_for_level(enum strata_simd_level level);

/* The table the tensor_* functions use: the one for strata_cpu_level(),
 * chosen on the first call (thread-safe) and fixed from then on. */
const tensor_ops *tensor_ops_active(void);

#endif
