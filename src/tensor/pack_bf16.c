/* F16 and BF16 x8: the packers and the kernels at every level
 * (pack_internal.h has the layout and the float steps).
 *
 * Float weights need no integer step: per (row, token) the kernels take
 * one fused multiply-add per weight, with the activations kept as float32
 * (the same F32 rows the GGUF layout's kernels read). The layout puts two
 * consecutive elements of each of the 8 rows of a group side by side, so
 * that 16 halves (one 256-bit load, converted to 16 floats: a zmm, or two
 * ymm at AVX2) give float lane 2r + p = row r's element 2k + p, and the
 * activation operand is the float pair (x_2k, x_2k+1) broadcast as one
 * 64-bit value. Each lane is a running sum of one parity of one row; four
 * of them per lane (pair k of a block goes to sum k) keep four fma chains
 * in flight. The sums are added in one fixed order at the end, so every
 * level performs the same float steps and returns the same bits.
 *
 * The conversions are exact (f16 and bf16 values are floats), so the only
 * roundings are the fmas and the final adds.
 *
 * VDPBF16PS (AVX512_BF16) takes bf16 activations, which rounds them, so it
 * cannot give the float kernels' results: its kernel below
 * (tensor_x8_bf16_dot_*) is not registered for tensor_matmul. It has its
 * own scalar reference (the instruction's documented steps) and test. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

bool tensor_x8_pack_half(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_halfx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int r = 0; r < 8; r++) {
            const uint16_t *row = (const uint16_t *)((const char *)src + (size_t)r * src_row_bytes);
            for (int k = 0; k < 4; k++)
                for (int p = 0; p < 2; p++)
                    out[ib].w[16 * k + 2 * r + p] = row[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p];
        }
    return true; /* a permutation of the halves */
}

void tensor_x8_row_half(const void *group, int64_t n, int r, void *dst)
{
    const block_halfx8 *g = group;
    uint16_t *row = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int k = 0; k < 4; k++)
            for (int p = 0; p < 2; p++)
                row[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p] = g[ib].w[16 * k + 2 * r + p];
}

/* The F32 activation row: the floats themselves. */
void tensor_x8_f32_act(const float *x, void *dst, int64_t n)
{
    memcpy(dst, x, (size_t)n * sizeof(float));
}

/* The final adds of the float steps: sums s[k][p] (k < 4, p < 2) of one
 * row to its result. */
static float half_finish(const float s[4][2])
{
    const float e = (s[0][0] + s[1][0]) + (s[2][0] + s[3][0]);
    const float o = (s[0][1] + s[1][1]) + (s[2][1] + s[3][1]);
    return e + o;
}

static void half_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y, size_t ys,
                        int nt, bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    for (int t = 0; t < nt; t++) {
        const float *xt = (const float *)((const char *)x + (size_t)t * xs);
        for (int r = 0; r < 8; r++) {
            float s[4][2] = {{0}};
            for (int64_t ib = 0; ib < nb; ib++)
                for (int k = 0; k < 4; k++)
                    for (int p = 0; p < 2; p++) {
                        const uint16_t h = wb[ib].w[16 * k + 2 * r + p];
                        const float wv = bf16 ? tensor_bf16_to_f32(h) : tensor_f16_to_f32(h);
                        s[k][p] = fmaf(wv, xt[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p], s[k][p]);
                    }
            y[(size_t)t * ys + r] = half_finish(s);
        }
    }
}

void tensor_x8_f16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt)
{
    half_scalar(n, w, x, xs, y, ys, nt, false);
}

void tensor_x8_bf16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    half_scalar(n, w, x, xs, y, ys, nt, true);
}

#if defined(__x86_64__)

/* Lane sums (lane 2r + p, the 16 of a group) to the 8 rows' results, in
 * half_finish's order: s[k] is sum k's 16 lanes. */
static inline void half_store(const float s[4][16], float *y)
{
    for (int r = 0; r < 8; r++) {
        float t[4][2];
        for (int k = 0; k < 4; k++) t[k][0] = s[k][2 * r], t[k][1] = s[k][2 * r + 1];
        y[r] = half_finish((const float(*)[2])t);
    }
}

/* 8 halves at p to 8 floats, exactly. */
TENSOR_AVX2_INLINE __m256 half8_avx2(const uint16_t *p, const bool bf16)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (!bf16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The pair (x[0], x[1]) in every 64-bit lane. */
TENSOR_AVX2_INLINE __m256 xpair_avx2(const float *x)
{
    double d;
    memcpy(&d, x, sizeof d);
    return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* One group x NT tokens (NT <= 2): per token 4 sums x 2 ymm (rows 0..3
 * and 4..7), 16 ymm for two tokens (the compiler keeps what fits). */
TENSOR_AVX2_INLINE void half_avx2_tile(int64_t n, const void *w, const void *x, size_t xs,
                                       float *y, size_t ys, const int NT, const bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m256 acc[2][4][2];
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < 4; k++) acc[t][k][0] = acc[t][k][1] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint16_t *blk = wb[ib].w;
        _mm_prefetch((const char *)blk + TENSOR_X8_PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)blk + TENSOR_X8_PREFETCH_AHEAD + 64, _MM_HINT_T0);
        for (int k = 0; k < 4; k++) {
            const __m256 w0 = half8_avx2(blk + 16 * k, bf16);
            const __m256 w1 = half8_avx2(blk + 16 * k + 8, bf16);
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)((const char *)x + (size_t)t * xs);
                const __m256 xv = xpair_avx2(xt + TENSOR_X8_HALF_ELEMS * ib + 2 * k);
                acc[t][k][0] = _mm256_fmadd_ps(w0, xv, acc[t][k][0]);
                acc[t][k][1] = _mm256_fmadd_ps(w1, xv, acc[t][k][1]);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        float s[4][16];
        for (int k = 0; k < 4; k++) {
            _mm256_storeu_ps(s[k], acc[t][k][0]);
            _mm256_storeu_ps(s[k] + 8, acc[t][k][1]);
        }
        half_store((const float(*)[16])s, y + (size_t)t * ys);
    }
}

TENSOR_AVX2_TARGET void tensor_x8_f16_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                           float *y, size_t ys, int nt)
{
    if (nt == 1) half_avx2_tile(n, w, x, xs, y, ys, 1, false);
    else half_avx2_tile(n, w, x, xs, y, ys, 2, false);
}

TENSOR_AVX2_TARGET void tensor_x8_bf16_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    if (nt == 1) half_avx2_tile(n, w, x, xs, y, ys, 1, true);
    else half_avx2_tile(n, w, x, xs, y, ys, 2, true);
}

/* 16 halves at p to 16 floats, exactly. */
X8_AVX512_INLINE __m512 half16_avx512(const uint16_t *p, const bool bf16)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (!bf16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* One group x NT tokens: 4 zmm sums per token, the 16 lanes of a group. */
X8_AVX512_INLINE void half_avx512_tile(int64_t n, const void *w, const void *x, size_t xs,
                                       float *y, size_t ys, const int NT, const bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m512 acc[TENSOR_X8_HALF_AVX512_MAX_T][4];
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < 4; k++) acc[t][k] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint16_t *blk = wb[ib].w;
        prefetch_lines(blk, sizeof(block_halfx8), TENSOR_X8_PREFETCH_AHEAD);
        for (int k = 0; k < 4; k++) {
            const __m512 wv = half16_avx512(blk + 16 * k, bf16);
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)((const char *)x + (size_t)t * xs);
                double d;
                memcpy(&d, xt + TENSOR_X8_HALF_ELEMS * ib + 2 * k, sizeof d);
                acc[t][k] = _mm512_fmadd_ps(wv, _mm512_castpd_ps(_mm512_set1_pd(d)), acc[t][k]);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        float s[4][16];
        for (int k = 0; k < 4; k++) _mm512_storeu_ps(s[k], acc[t][k]);
        half_store((const float(*)[16])s, y + (size_t)t * ys);
    }
}

#define HALF_AVX512_SET(name, bf16)                                                            \
    X8_AVX512_TARGET void tensor_x8_##name##_avx512(int64_t n, const void *w, const void *x,   \
                                                    size_t xs, float *y, size_t ys, int nt)    \
    {                                                                                          \
        switch (nt) {                                                                          \
        case 1: half_avx512_tile(n, w, x, xs, y, ys, 1, bf16); break;                          \
        case 2: half_avx512_tile(n, w, x, xs, y, ys, 2, bf16); break;                          \
        case 3: half_avx512_tile(n, w, x, xs, y, ys, 3, bf16); break;                          \
        case 4: half_avx512_tile(n, w, x, xs, y, ys, 4, bf16); break;                          \
        case 5: half_avx512_tile(n, w, x, xs, y, ys, 5, bf16); break;                          \
        default: half_avx512_tile(n, w, x, xs, y, ys, 6, bf16); break;                         \
        }                                                                                      \
    }

HALF_AVX512_SET(f16, false)
HALF_AVX512_SET(bf16, true)

#endif /* __x86_64__ */

/* ------------------------------------------------------------ VDPBF16PS */

/* Float32 flushed to zero when subnormal (VDPBF16PS's DAZ and FTZ). */
static float bf16_dot_ftz(float v)
{
    return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v;
}

void tensor_x8_bf16_dot_act(const float *x, void *dst, int64_t n)
{
    uint16_t *o = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 8; l++)
                for (int p = 0; p < 2; p++)
                    o[64 * ib + 16 * k + 2 * l + p] =
                        tensor_f32_to_bf16(x[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p]);
}

size_t tensor_x8_bf16_dot_act_bytes(int64_t n)
{
    return (size_t)(n / TENSOR_X8_HALF_ELEMS) * 64 * sizeof(uint16_t);
}

/* One VDPBF16PS lane: acc + w1 * x1, then + w0 * x0, inputs and outputs
 * flushed to zero; a product of two bf16 values is exact in float32. */
static float bf16_dot_step(float acc, uint16_t w0, uint16_t w1, uint16_t x0, uint16_t x1)
{
    const float a0 = bf16_dot_ftz(tensor_bf16_to_f32(w0)), a1 = bf16_dot_ftz(tensor_bf16_to_f32(w1));
    const float b0 = bf16_dot_ftz(tensor_bf16_to_f32(x0)), b1 = bf16_dot_ftz(tensor_bf16_to_f32(x1));
    float t = bf16_dot_ftz(bf16_dot_ftz(acc) + a1 * b1);
    return bf16_dot_ftz(t + a0 * b0);
}

void tensor_x8_bf16_dot_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                               size_t ys, int nt)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    for (int t = 0; t < nt; t++) {
        const uint16_t *xt = (const uint16_t *)((const char *)x + (size_t)t * xs);
        for (int r = 0; r < 8; r++) {
            float s[4] = {0};
            for (int64_t ib = 0; ib < nb; ib++)
                for (int k = 0; k < 4; k++) {
                    const uint16_t *wp = wb[ib].w + 16 * k + 2 * r;
                    const uint16_t *xp = xt + 64 * ib + 16 * k + 2 * r;
                    s[k] = bf16_dot_step(s[k], wp[0], wp[1], xp[0], xp[1]);
                }
            y[(size_t)t * ys + r] = (s[0] + s[1]) + (s[2] + s[3]);
        }
    }
}

#if defined(__x86_64__)

#define BF16_DOT_ATTRS target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")

/* One group x NT tokens: dword lane j of 32 halves w[32 h ..] is row j % 8,
 * element pair k = 2h + j / 8, and so is dword j of the activation row's 64
 * bytes at (block, h): one load each, no shuffle. Sums s[k] live in the two
 * accumulators of h = k / 2 (lanes 8 (k % 2) ..). */
static inline __attribute__((always_inline, BF16_DOT_ATTRS)) void
bf16_dot_tile(int64_t n, const void *w, const void *x, size_t xs, float *y, size_t ys,
              const int NT)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m512 acc[TENSOR_X8_HALF_AVX512_MAX_T][2];
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        _mm_prefetch((const char *)wb[ib].w + TENSOR_X8_PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)wb[ib].w + TENSOR_X8_PREFETCH_AHEAD + 64, _MM_HINT_T0);
        for (int h = 0; h < 2; h++) {
            const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(wb[ib].w + 32 * h));
            for (int t = 0; t < NT; t++) {
                const uint16_t *xt = (const uint16_t *)((const char *)x + (size_t)t * xs);
                const __m512bh xv =
                    (__m512bh)_mm512_loadu_si512((const void *)(xt + 64 * ib + 32 * h));
                acc[t][h] = _mm512_dpbf16_ps(acc[t][h], wv, xv);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        float s[2][16];
        _mm512_storeu_ps(s[0], acc[t][0]);
        _mm512_storeu_ps(s[1], acc[t][1]);
        for (int r = 0; r < 8; r++)
            y[(size_t)t * ys + r] = (s[0][r] + s[0][8 + r]) + (s[1][r] + s[1][8 + r]);
    }
}

__attribute__((BF16_DOT_ATTRS)) void tensor_x8_bf16_dot_avx512bf16(int64_t n, const void *w,
                                                                  const void *x, size_t xs,
                                                                  float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: bf16_dot_tile(n, w, x, xs, y, ys, 1); break;
    case 2: bf16_dot_tile(n, w, x, xs, y, ys, 2); break;
    case 3: bf16_dot_tile(n, w, x, xs, y, ys, 3); break;
    case 4: bf16_dot_tile(n, w, x, xs, y, ys, 4); break;
    case 5: bf16_dot_tile(n, w, x, xs, y, ys, 5); break;
    default: bf16_dot_tile(n, w, x, xs, y, ys, 6); break;
    }
}

#endif /* __x86_64__ */
