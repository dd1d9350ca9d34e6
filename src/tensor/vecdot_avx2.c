/* AVX2 (+FMA, F16C) dot-product kernels for the float weight types and the
 * 32-element block types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL. The K-quants are in vecdot_avx2_k.c.
 *
 * Each type is one always_inline template over a tile of NR weight rows x
 * NT tokens, instantiated three times with constant shapes: 1x1 (vec_dot),
 * 4x1 (decode) and a prefill tile. One __m256 accumulator per (row, token)
 * pair receives, per block, exactly one float step
 *     acc = fma(broadcast(d_w * d_x), float(int32 lane sums), acc)
 * (plus the offset term of Q4_1/Q5_1 in its own scalar accumulator), in
 * block order, and is reduced by tensor_hsum8. The integer lane sums are
 * exact and land in the same lanes in every shape, so every shape gives a
 * pair the same bits: this is what makes tensor_matmul batch invariant.
 *
 * Integer products use maddubs (u8 x s8 -> s16 pairs), so one operand must
 * be unsigned. For signed codes we use the sign trick: |a| * (b * sign(a))
 * = a * b, with |a| the unsigned operand. Which side takes the absolute
 * value is chosen so that the value -128 (whose absolute value is not an
 * s8) can only appear on the unsigned side: the activations' int8 codes
 * may be -128 for Q4_0/Q5_0/IQ4_NL (we take |x|, the weights are >= -127);
 * for Q8_0 weights, which may hold -128, we take |w| and rely on the Q8_0
 * activation quantizer's max-abs rule keeping x in [-127, 127]. */
#include "tensor/blocks.h"
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---------------------------------------------------------------------
 * F32, F16, BF16 weights x F32 activations.
 * Lanes: 8 consecutive columns. Per 8 columns each pair does one fma into
 * its accumulator. A tail of n % 8 columns is copied into zero-padded
 * 8-float buffers and takes one more step of the same kind (zeros add
 * nothing), so the tail is the same operation in every shape too.
 * --------------------------------------------------------------------- */

enum { WF32, WF16, WBF16 };

/* 8 weights from p as floats (all three conversions are exact). */
TENSOR_AVX2_INLINE __m256 load_w8(const void *p, int kind)
{
    if (kind == WF32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (kind == WF16) return _mm256_cvtph_ps(h);
    /* bf16 is the top half of a float32 */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TENSOR_AVX2_INLINE void float_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                   float *y, size_t ys, const int NR, const int NT,
                                   const int kind)
{
    const size_t esize = kind == WF32 ? 4 : 2;
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[MR];
        for (int r = 0; r < NR; r++)
            wv[r] = load_w8((const char *)w + r * ws + (size_t)i * esize, kind);
        for (int t = 0; t < NT; t++) {
            __m256 xv = _mm256_loadu_ps((const float *)((const char *)x + t * xs) + i);
            for (int r = 0; r < NR; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (i < n) {
        const int64_t rem = n - i;
        __m256 wv[MR];
        for (int r = 0; r < NR; r++) {
            uint32_t buf[8] = {0}; /* room for 8 f32 or 16 halves, zero padded */
            memcpy(buf, (const char *)w + r * ws + (size_t)i * esize, (size_t)rem * esize);
            wv[r] = load_w8(buf, kind);
        }
        for (int t = 0; t < NT; t++) {
            float buf[8] = {0};
            memcpy(buf, (const float *)((const char *)x + t * xs) + i, (size_t)rem * 4);
            __m256 xv = _mm256_loadu_ps(buf);
            for (int r = 0; r < NR; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

TENSOR_AVX2_INLINE void f32_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                 float *y, size_t ys, const int NR, const int NT)
{
    float_tile(n, w, ws, x, xs, y, ys, NR, NT, WF32);
}
TENSOR_AVX2_INLINE void f16_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                 float *y, size_t ys, const int NR, const int NT)
{
    float_tile(n, w, ws, x, xs, y, ys, NR, NT, WF16);
}
TENSOR_AVX2_INLINE void bf16_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    float_tile(n, w, ws, x, xs, y, ys, NR, NT, WBF16);
}

AVX2_SET(f32, 2, 4);
AVX2_SET(f16, 2, 4);
AVX2_SET(bf16, 2, 4);

/* ---------------------------------------------------------------------
 * Blocks of 32 with activations Q8_0 (Q4_0, Q5_0, Q8_0, IQ4_NL) or Q8_1
 * (Q4_1, Q5_1). Lanes: the 32 int8 codes of a block; after tensor_dot4
 * int32 lane k holds the products of elements 4k..4k+3.
 *
 * Each template decodes a weight block to 32 int8 codes once per row
 * (shared by the NT tokens) and loads an activation block once per token
 * (shared by the NR rows).
 * --------------------------------------------------------------------- */

/* the shared templates, with AVX2's integer dot products */
#define TMPL_INLINE TENSOR_AVX2_INLINE
#define TMPL_DOT4(u, s) tensor_dot4_u8s8(u, s)
#define TMPL_DOT_SCALED_ADD(acc, u, s, sc16) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16))
#include "tensor/vecdot_x86_tmpl.h"

AVX2_SET(q4_0, 2, 4);
AVX2_SET(q5_0, 2, 4);
AVX2_SET(iq4_nl, 2, 4);

AVX2_SET(q8_0, 2, 4);

/* Q4_1 and Q5_1 x Q8_1: unsigned codes q (0..15 or 0..31) are maddubs's
 * unsigned operand directly (pairs <= 2 * 31 * 128). Per block:
 *   acc  = fma(broadcast(d_w * d_x), float(lanes of q * x), acc)
 *   macc = macc + m_w * s_x          (s_x = d_x * sum x, from the block)
 * and the pair's result is hsum(acc) + macc. */
TENSOR_AVX2_INLINE __m256i q4_1_codes(const block_q4_1 *b)
{
    return tensor_nibbles32(b->qs);
}
TENSOR_AVX2_INLINE __m256i q5_1_codes(const block_q5_1 *b)
{
    __m256i hi = _mm256_and_si256(tensor_bits32_to_bytes(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(tensor_nibbles32(b->qs), hi);
}

#define OFFSET_Q8_1_TILE(t, block_t)                                                          \
    TENSOR_AVX2_INLINE void t##_tile(int64_t n, const void *w, size_t ws, const void *x,      \
                                     size_t xs, float *y, size_t ys, const int NR,           \
                                     const int NT)                                            \
    {                                                                                         \
        __m256 acc[MR][MT];                                                                   \
        float macc[MR][MT];                                                                   \
        for (int r = 0; r < NR; r++)                                                          \
            for (int tt = 0; tt < NT; tt++) {                                                 \
                acc[r][tt] = _mm256_setzero_ps();                                             \
                macc[r][tt] = 0.0f;                                                           \
            }                                                                                 \
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {                                      \
            __m256i wq[MR];                                                                   \
            float dw[MR], mw[MR];                                                             \
            for (int r = 0; r < NR; r++) {                                                    \
                const block_t *b = ROW_BLOCK(block_t, w, r, ws, ib);                          \
                if (NT == 1) tensor_prefetch(b, (size_t)NR * ws);                             \
                dw[r] = tensor_h2f(b->d);                                                     \
                mw[r] = tensor_h2f(b->m);                                                     \
                wq[r] = t##_codes(b);                                                         \
            }                                                                                 \
            for (int tt = 0; tt < NT; tt++) {                                                 \
                const block_q8_1 *xb = ROW_BLOCK(block_q8_1, x, tt, xs, ib);                  \
                const float dx = tensor_h2f(xb->d), sx = tensor_h2f(xb->s);                   \
                const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);               \
                for (int r = 0; r < NR; r++) {                                                \
                    __m256 p = _mm256_cvtepi32_ps(tensor_dot4_u8s8(wq[r], xv));               \
                    acc[r][tt] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), p, acc[r][tt]);  \
                    const float off = mw[r] * sx;                                             \
                    macc[r][tt] = macc[r][tt] + off;                                          \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (int r = 0; r < NR; r++)                                                          \
            for (int tt = 0; tt < NT; tt++)                                                   \
                y[tt * ys + r] = tensor_hsum8(acc[r][tt]) + macc[r][tt];                      \
    }

OFFSET_Q8_1_TILE(q4_1, block_q4_1)
OFFSET_Q8_1_TILE(q5_1, block_q5_1)

AVX2_SET(q4_1, 2, 4);
AVX2_SET(q5_1, 2, 4);

#endif /* __x86_64__ */
