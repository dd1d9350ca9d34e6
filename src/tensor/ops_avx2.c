/* Element ops for x86-64 with AVX2 + FMA (see ops.h for the contracts).
 *
 * Every function here carries the target attribute, so this file builds
 * with the baseline x86-64 flags and its code runs only when ops.c picked
 * this table (strata_cpu_level() >= STRATA_SIMD_AVX2).
 *
 * Conventions of the loops: a __m256 holds 8 consecutive floats of a row
 * (lane j = element i + j). Rows of any length are handled without a scalar
 * tail: the last partial vector is read and written with masked loads and
 * stores (lanes past the end read as 0 and are never written, and the
 * hardware does not touch their memory), so every element goes through the
 * same arithmetic whatever its index, and nothing depends on the pointers'
 * alignment (all loads are unaligned loads). */
#include "ops_internal.h"

#if defined(__x86_64__)

#include <assert.h>
#include <immintrin.h>
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

/* Lanes [0, rem) set (all ones), the rest clear; rem is clamped to [0, 8]. */
AVX2_TARGET static inline __m256i avx2_mask(int64_t rem)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int r = rem < 0 ? 0 : rem > 8 ? 8 : (int)rem;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), lane);
}

/* e^x in each lane.
 *
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2/2 (r computed with
 * ln2 split in a high part with few bits, so n * ln2_hi is exact, and a low
 * part); e^r - 1 ~ r + r^2/2 + ... by a degree-5 minimax polynomial
 * (coefficients from ARM's optimized-routines vector expf, max error 1.45
 * ulp + 0.5); e^x = 2^n (1 + p). 2^n is applied as two factors
 * 2^(n/2) 2^(n - n/2), each a normal float for the clamped range, so
 * results down into the subnormals and up to overflow come out right with
 * no special-case branch: x is clamped to [-150, 100] first, where e^x is
 * already 0 or inf in float. The clamp keeps NaN (max/min return their
 * second operand when either is NaN), and NaN propagates through p.
 * Measured error: 1.91 ulp at most against e^x in double, over every 37th
 * float in [-87.3, 88.7]; tests/tensor/test_ops.c checks every 4099th float
 * in (-104, 89) against TENSOR_TOL_EXP_*. */
AVX2_TARGET static inline __m256 avx2_exp(__m256 x)
{
    const __m256 inv_ln2 = _mm256_set1_ps(0x1.715476p+0f);
    const __m256 neg_ln2_hi = _mm256_set1_ps(-0x1.62e4p-1f);
    const __m256 neg_ln2_lo = _mm256_set1_ps(-0x1.7f7d1cp-20f);
    const __m256 c0 = _mm256_set1_ps(0x1.0e4020p-7f);
    const __m256 c1 = _mm256_set1_ps(0x1.573e2ep-5f);
    const __m256 c2 = _mm256_set1_ps(0x1.555e66p-3f);
    const __m256 c3 = _mm256_set1_ps(0x1.fffdb6p-2f);
    const __m256 c4 = _mm256_set1_ps(0x1.ffffecp-1f);

    x = _mm256_max_ps(_mm256_set1_ps(-150.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(100.0f), x);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, inv_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, neg_ln2_hi, x);
    r = _mm256_fmadd_ps(n, neg_ln2_lo, r);

    /* p = c4 r + c3 r^2 + c2 r^3 + c1 r^4 + c0 r^5, as (c0 r + c1) r^2 + (c2 r + c3)
     * times r^2, plus c4 r: shorter dependency chains than Horner. */
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p01 = _mm256_fmadd_ps(c0, r, c1);
    __m256 p23 = _mm256_fmadd_ps(c2, r, c3);
    __m256 q = _mm256_fmadd_ps(p01, r2, p23);
    __m256 p = _mm256_fmadd_ps(q, r2, _mm256_mul_ps(c4, r));

    /* n in [-217, 145] after the clamp: halves in [-109, 73], so each factor's
     * biased exponent (half + 127) is in [18, 200], a normal float. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    /* s1 (1 + p) rounds once (s1 is a power of two in the normal range);
     * the product with s2 is exact unless the result is subnormal or
     * overflows, where it rounds as it must. */
    return _mm256_mul_ps(_mm256_fmadd_ps(p, s1, s1), s2);
}

/* x / (1 + e^-x) per lane. */
AVX2_TARGET static inline __m256 avx2_silu(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 e = avx2_exp(_mm256_xor_ps(x, sign));
    return _mm256_div_ps(x, _mm256_add_ps(one, e));
}

/* x / (1 + e^-(x (C2 + C2A x^2))) per lane, rounded as gelu_scalar. */
AVX2_TARGET static inline __m256 avx2_gelu(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 inner = _mm256_mul_ps(_mm256_set1_ps(TENSOR_GELU_C2A), _mm256_mul_ps(x, x));
    __m256 y2 = _mm256_mul_ps(x, _mm256_add_ps(inner, _mm256_set1_ps(TENSOR_GELU_C2)));
    __m256 e = avx2_exp(_mm256_xor_ps(y2, sign));
    return _mm256_div_ps(x, _mm256_add_ps(one, e));
}

/* c tanh(x (1/c)) per lane, tanh |y| as (1 - e^-2|y|) / (1 + e^-2|y|)
 * with y's sign: e^-2|y| is in [0, 1], so neither overflows, and +-inf
 * comes out +-1 (the exp's clamp turns -inf into 0). */
AVX2_TARGET static inline __m256 avx2_softcap(__m256 x, __m256 c, __m256 inv_c)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 y = _mm256_mul_ps(x, inv_c);
    __m256 a = _mm256_andnot_ps(sign, y);
    __m256 t = avx2_exp(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
    __m256 th = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
    return _mm256_mul_ps(c, _mm256_or_ps(th, _mm256_and_ps(sign, y)));
}

/* Adds the 8 floats of v, widened to double, into the 16-lane double sum
 * of ops.c: v holds elements i..i+7 with i = 0 or 8 mod 16, which belong to
 * lanes half*8 + 0..7, i.e. to acc[2*half] (lanes +0..3) and acc[2*half+1]
 * (lanes +4..7). */
AVX2_TARGET static inline void avx2_sum16_add(__m256d acc[4], int half, __m256 v)
{
    acc[2 * half + 0] = _mm256_add_pd(acc[2 * half + 0], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc[2 * half + 1] = _mm256_add_pd(acc[2 * half + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* The pairwise tree of sum16_tree in ops.c over acc[0..3] = lanes 0-3, 4-7,
 * 8-11, 12-15: +8, +4, +2, +1. */
AVX2_TARGET static inline double avx2_sum16_tree(__m256d acc[4])
{
    __m256d l0 = _mm256_add_pd(acc[0], acc[2]); /* lanes 0-3 += 8-11 */
    __m256d l1 = _mm256_add_pd(acc[1], acc[3]); /* lanes 4-7 += 12-15 */
    __m256d l = _mm256_add_pd(l0, l1);          /* lanes 0-3 += 4-7 */
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(l), _mm256_extractf128_pd(l, 1)); /* 0-1 += 2-3 */
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));                     /* 0 += 1 */
}

/* --- the ops --- */

AVX2_TARGET static void rmsnorm_avx2(float *out, const float *x, const float *w, int64_t n, float eps)
{
    if (n <= 0) return;
    /* Squares in float, widened and summed in the 16 double lanes: each step
     * takes 16 elements, elements i..i+7 into lanes 0-7, i+8..i+15 into 8-15.
     * Masked-off tail lanes read 0 and add +0.0, which leaves a sum of
     * squares (never -0.0) unchanged. */
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        avx2_sum16_add(acc, 0, _mm256_mul_ps(v0, v0));
        avx2_sum16_add(acc, 1, _mm256_mul_ps(v1, v1));
    }
    if (i < n) {
        __m256 v0 = _mm256_maskload_ps(x + i, avx2_mask(n - i));
        __m256 v1 = _mm256_maskload_ps(x + i + 8, avx2_mask(n - i - 8));
        avx2_sum16_add(acc, 0, _mm256_mul_ps(v0, v0));
        avx2_sum16_add(acc, 1, _mm256_mul_ps(v1, v1));
    }
    float mean = (float)(avx2_sum16_tree(acc) / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);

    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w != NULL) y = _mm256_mul_ps(y, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, y);
    }
    if (i < n) {
        __m256i m = avx2_mask(n - i);
        __m256 y = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), vs);
        if (w != NULL) y = _mm256_mul_ps(y, _mm256_maskload_ps(w + i, m));
        _mm256_maskstore_ps(out + i, m, y);
    }
}

/* Rotates n_vals floats of the NORMAL layout in place: lanes hold
 * (a0, b0, a1, b1, ...), cc holds (c0, c0, c1, c1, ...) and ss holds
 * (-s0, s0, -s1, s1, ...). Swapping each pair of lanes gives (b0, a0, ...),
 * so x cc + swap(x) ss = (a c - b s, b c + a s, ...): the same products and
 * sums as rope_scalar (negating a product and commuting a sum are exact). */
AVX2_TARGET static void rope_normal_avx2(float *xh, const float *cc, const float *ss, int n_vals)
{
    int j = 0;
    for (; j + 8 <= n_vals; j += 8) {
        __m256 v = _mm256_loadu_ps(xh + j);
        __m256 sw = _mm256_permute_ps(v, 0xb1); /* lanes (1,0,3,2) in each half */
        __m256 y = _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(cc + j)),
                                 _mm256_mul_ps(sw, _mm256_loadu_ps(ss + j)));
        _mm256_storeu_ps(xh + j, y);
    }
    if (j < n_vals) {
        __m256i m = avx2_mask(n_vals - j);
        __m256 v = _mm256_maskload_ps(xh + j, m);
        __m256 sw = _mm256_permute_ps(v, 0xb1);
        __m256 y = _mm256_add_ps(_mm256_mul_ps(v, _mm256_maskload_ps(cc + j, m)),
                                 _mm256_mul_ps(sw, _mm256_maskload_ps(ss + j, m)));
        _mm256_maskstore_ps(xh + j, m, y);
    }
}

/* Rotates n_pairs pairs of the NEOX layout in place: lanes of va hold the
 * first members a_k of 8 consecutive pairs, lanes of vb their partners b_k
 * n_rot/2 floats later; c and s hold the pairs' cos and sin. */
AVX2_TARGET static inline void rope_neox_rotate(__m256 va, __m256 vb, __m256 c, __m256 s, __m256 *ya, __m256 *yb)
{
    *ya = _mm256_sub_ps(_mm256_mul_ps(va, c), _mm256_mul_ps(vb, s));
    *yb = _mm256_add_ps(_mm256_mul_ps(va, s), _mm256_mul_ps(vb, c));
}

AVX2_TARGET static void rope_neox_avx2(float *xa, float *xb, const float *cos_k, const float *sin_k,
                                       int n_pairs)
{
    __m256 ya, yb;
    int k = 0;
    for (; k + 8 <= n_pairs; k += 8) {
        rope_neox_rotate(_mm256_loadu_ps(xa + k), _mm256_loadu_ps(xb + k), _mm256_loadu_ps(cos_k + k),
                         _mm256_loadu_ps(sin_k + k), &ya, &yb);
        _mm256_storeu_ps(xa + k, ya);
        _mm256_storeu_ps(xb + k, yb);
    }
    if (k < n_pairs) {
        /* Masked stores are slow on some cores (microcoded on AMD's), so
         * only the last partial vector uses them. */
        __m256i m = avx2_mask(n_pairs - k);
        rope_neox_rotate(_mm256_maskload_ps(xa + k, m), _mm256_maskload_ps(xb + k, m),
                         _mm256_maskload_ps(cos_k + k, m), _mm256_maskload_ps(sin_k + k, m), &ya, &yb);
        _mm256_maskstore_ps(xa + k, m, ya);
        _mm256_maskstore_ps(xb + k, m, yb);
    }
}

AVX2_TARGET static void rope_avx2(float *x, int n_head, int head_dim, int n_rot, int64_t pos,
                                  float freq_base, float freq_scale, const float *freq_factors,
                                  int mode)
{
    assert(n_rot % 2 == 0 && n_rot <= head_dim);
    assert(mode == TENSOR_ROPE_NORMAL || mode == TENSOR_ROPE_NEOX);
    if (n_rot <= 0 || n_head <= 0) return;
    const int half = n_rot / 2;
    tensor_rope_angles ang;
    tensor_rope_angles_init(&ang, pos, freq_base, freq_scale, freq_factors, n_rot);
    float cos_k[TENSOR_ROPE_CHUNK], sin_k[TENSOR_ROPE_CHUNK];
    float cc[2 * TENSOR_ROPE_CHUNK], ss[2 * TENSOR_ROPE_CHUNK];
    for (int k0 = 0; k0 < half; k0 += TENSOR_ROPE_CHUNK) {
        int n_pairs = half - k0 < TENSOR_ROPE_CHUNK ? half - k0 : TENSOR_ROPE_CHUNK;
        tensor_rope_angles_next(&ang, cos_k, sin_k, n_pairs);
        if (mode == TENSOR_ROPE_NEOX) {
            for (int h = 0; h < n_head; h++) {
                float *xh = x + (int64_t)h * head_dim;
                rope_neox_avx2(xh + k0, xh + half + k0, cos_k, sin_k, n_pairs);
            }
        } else {
            for (int k = 0; k < n_pairs; k++) {
                cc[2 * k] = cc[2 * k + 1] = cos_k[k];
                ss[2 * k] = -sin_k[k];
                ss[2 * k + 1] = sin_k[k];
            }
            for (int h = 0; h < n_head; h++)
                rope_normal_avx2(x + (int64_t)h * head_dim + 2 * k0, cc, ss, 2 * n_pairs);
        }
    }
}

AVX2_TARGET static void softmax_avx2(float *x, int64_t n)
{
    if (n <= 0) return;
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);

    /* The maximum: masked-off tail lanes hold -inf, which never wins. */
    __m256 vmax = neg_inf;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    if (i < n) {
        __m256i m = avx2_mask(n - i);
        __m256 v = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m));
        vmax = _mm256_max_ps(vmax, v);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float max = _mm_cvtss_f32(m4);
    if (max == -INFINITY) {
        for (i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }

    /* e^(x - max), stored, and summed in the 16 double lanes (16 elements a
     * step; tail lanes are zeroed before the sum, so they add +0.0). */
    const __m256 vm = _mm256_set1_ps(max);
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 e0 = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        __m256 e1 = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        _mm256_storeu_ps(x + i, e0);
        _mm256_storeu_ps(x + i + 8, e1);
        avx2_sum16_add(acc, 0, e0);
        avx2_sum16_add(acc, 1, e1);
    }
    if (i < n) {
        for (int half = 0; half < 2; half++) {
            int64_t at = i + 8 * half;
            __m256i m = avx2_mask(n - at);
            __m256 e = avx2_exp(_mm256_sub_ps(_mm256_maskload_ps(x + at, m), vm));
            e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
            _mm256_maskstore_ps(x + at, m, e);
            avx2_sum16_add(acc, half, e);
        }
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / avx2_sum16_tree(acc)));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    if (i < n) {
        __m256i m = avx2_mask(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}

/* The element-wise ops share one loop shape: whole vectors, then one masked
 * vector for the tail. */
#define AVX2_UNARY_LOOP(out, x, n, f)                                                     \
    do {                                                                                  \
        int64_t i_ = 0;                                                                   \
        for (; i_ + 8 <= (n); i_ += 8) _mm256_storeu_ps((out) + i_, f(_mm256_loadu_ps((x) + i_))); \
        if (i_ < (n)) {                                                                   \
            __m256i m_ = avx2_mask((n) - i_);                                             \
            _mm256_maskstore_ps((out) + i_, m_, f(_mm256_maskload_ps((x) + i_, m_)));     \
        }                                                                                 \
    } while (0)

#define AVX2_BINARY_LOOP(out, a, b, n, f)                                                 \
    do {                                                                                  \
        int64_t i_ = 0;                                                                   \
        for (; i_ + 8 <= (n); i_ += 8)                                                    \
            _mm256_storeu_ps((out) + i_, f(_mm256_loadu_ps((a) + i_), _mm256_loadu_ps((b) + i_))); \
        if (i_ < (n)) {                                                                   \
            __m256i m_ = avx2_mask((n) - i_);                                             \
            _mm256_maskstore_ps((out) + i_, m_,                                           \
                                f(_mm256_maskload_ps((a) + i_, m_), _mm256_maskload_ps((b) + i_, m_))); \
        }                                                                                 \
    } while (0)

AVX2_TARGET static void exp_avx2(float *out, const float *x, int64_t n)
{
    AVX2_UNARY_LOOP(out, x, n, avx2_exp);
}

AVX2_TARGET static void silu_avx2(float *out, const float *x, int64_t n)
{
    AVX2_UNARY_LOOP(out, x, n, avx2_silu);
}

AVX2_TARGET static void gelu_avx2(float *out, const float *x, int64_t n)
{
    AVX2_UNARY_LOOP(out, x, n, avx2_gelu);
}

AVX2_TARGET static void softcap_avx2(float *x, float c, int64_t n)
{
    const __m256 cv = _mm256_set1_ps(c), inv_c = _mm256_set1_ps(1.0f / c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, avx2_softcap(_mm256_loadu_ps(x + i), cv, inv_c));
    if (i < n) {
        __m256i m = avx2_mask(n - i);
        _mm256_maskstore_ps(x + i, m, avx2_softcap(_mm256_maskload_ps(x + i, m), cv, inv_c));
    }
}

AVX2_TARGET static void add_avx2(float *out, const float *a, const float *b, int64_t n)
{
    AVX2_BINARY_LOOP(out, a, b, n, _mm256_add_ps);
}

AVX2_TARGET static void mul_avx2(float *out, const float *a, const float *b, int64_t n)
{
    AVX2_BINARY_LOOP(out, a, b, n, _mm256_mul_ps);
}

AVX2_TARGET static void scale_avx2(float *x, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
#define AVX2_SCALE(v) _mm256_mul_ps((v), vs)
    AVX2_UNARY_LOOP(x, x, n, AVX2_SCALE);
#undef AVX2_SCALE
}

AVX2_TARGET static inline __m256 avx2_swiglu(__m256 g, __m256 u)
{
    return _mm256_mul_ps(avx2_silu(g), u);
}

AVX2_TARGET static void swiglu_avx2(float *out, const float *gate, const float *up, int64_t n)
{
    AVX2_BINARY_LOOP(out, gate, up, n, avx2_swiglu);
}

AVX2_TARGET static float dot_avx2(const float *a, const float *b, int64_t n)
{
    /* The 32 lanes of dot_scalar as four vectors: acc[q] lane j is lane
     * 8q + j, fed by elements i = 8q + j mod 32. The tail's masked-off lanes
     * read 0 on both sides, and fma(0, 0, s) = s exactly (s is never -0.0:
     * it starts at +0.0 and a sum that is exactly zero rounds to +0.0). */
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int q = 0; q < 4; q++)
            acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * q), _mm256_loadu_ps(b + i + 8 * q), acc[q]);
    if (i < n) {
        for (int q = 0; q < 4; q++) {
            __m256i m = avx2_mask(n - i - 8 * q);
            acc[q] = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8 * q, m),
                                     _mm256_maskload_ps(b + i + 8 * q, m), acc[q]);
        }
    }
    /* The tree: +16 (acc 0 += 2, 1 += 3), +8 (0 += 1), +4, +2, +1 within acc 0. */
    __m256 l = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

const tensor_ops tensor_ops_avx2 = {
    .name = "avx2",
    .level = STRATA_SIMD_AVX2,
    .rmsnorm = rmsnorm_avx2,
    .rope = rope_avx2,
    .softmax = softmax_avx2,
    .exp = exp_avx2,
    .silu = silu_avx2,
    .gelu = gelu_avx2,
    .softcap = softcap_avx2,
    .add = add_avx2,
    .mul = mul_avx2,
    .scale = scale_avx2,
    .swiglu = swiglu_avx2,
    .dot_f32 = dot_avx2,
};

#endif /* __x86_64__ */
