/* Tile templates shared by the AVX2 kernels and their AVX-512 VNNI
 * variants (Q4_0, Q5_0, IQ4_NL, Q8_0, Q4_K, Q5_K). Internal to
 * src/tensor/; included once by vecdot_avx2.c / vecdot_avx2_k.c and once by
 * vecdot_avx512.c, each defining first:
 *
 *   TMPL_INLINE          the storage and target attributes of a template
 *   TMPL_DOT4(u, s)      int32 lane k = sum_{j<4} u[4k+j] * s[4k+j]
 *                        (u unsigned bytes, s signed bytes)
 *   TMPL_DOT_SCALED_ADD(acc, u, s, sc16)
 *                        acc + (int32 lane k = sc16[2k] * (products 4k, 4k+1)
 *                        + sc16[2k+1] * (products 4k+2, 4k+3))
 *
 * AVX2 builds both from maddubs + madd; VNNI uses dpbusd / dpwssd. The
 * int32 lanes hold the same exact integers either way (maddubs cannot
 * saturate under the operand bounds each template states), so the two
 * levels give identical bits, and within a level every tile shape gives a
 * pair the same bits (see vecdot_avx2.c). */
#ifndef STRATA_TENSOR_VECDOT_X86_TMPL_H
#define STRATA_TENSOR_VECDOT_X86_TMPL_H

#include "tensor/blocks.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#ifndef MR
#define MR TENSOR_TILE_MAX_R
#define MT TENSOR_TILE_MAX_T
#endif

#ifndef ROW_BLOCK
#define ROW_BLOCK(type, base, r, stride, ib) \
    ((const type *)((const char *)(base) + (size_t)(r) * (stride)) + (ib))
#endif

/* ------------------------------------------------ Q4_0, Q5_0, IQ4_NL, Q8_0 */

/* Weights with signed codes w in [-127, 127] x activations x (any int8):
 * |x| * sign(w, x) = w * x; pairs sum to at most 2 * 128 * 127 < 32768. */
TMPL_INLINE __m256i dot_ws_xabs(__m256i wq, __m256i xv, __m256i xabs)
{
    return TMPL_DOT4(xabs, _mm256_sign_epi8(wq, xv));
}

/* One decode function per signed-code type: 32 codes in [-127, 127]. */
TENSOR_AVX2_INLINE __m256i q4_0_codes(const block_q4_0 *b)
{
    return _mm256_sub_epi8(tensor_nibbles32(b->qs), _mm256_set1_epi8(8));
}
TENSOR_AVX2_INLINE __m256i q5_0_codes(const block_q5_0 *b)
{
    /* q - 16 = nibble, with 0xf0 or'ed in (i.e. -16 added) where bit 4 is 0 */
    __m256i hi = _mm256_andnot_si256(tensor_bits32_to_bytes(b->qh), _mm256_set1_epi8((char)0xf0));
    return _mm256_or_si256(tensor_nibbles32(b->qs), hi);
}
TENSOR_AVX2_INLINE __m256i iq4_nl_codes(const block_iq4_nl *b)
{
    /* the 16 grid values, in both 128-bit lanes for the byte shuffle */
    const __m256i grid = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)tensor_iq4nl_values));
    return _mm256_shuffle_epi8(grid, tensor_nibbles32(b->qs));
}

/* Template for the signed-code types with Q8_0 activations. */
#define SIGNED_Q8_0_TILE(t, block_t)                                                          \
    TMPL_INLINE void t##_tile(       int64_t n, const void *w, size_t ws, const void *x,      \
                                     size_t xs, float *y, size_t ys, const int NR,           \
                                     const int NT)                                            \
    {                                                                                         \
        __m256 acc[MR][MT];                                                                   \
        for (int r = 0; r < NR; r++)                                                          \
            for (int tt = 0; tt < NT; tt++)                                                   \
                acc[r][tt] = _mm256_setzero_ps();                                             \
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {                                      \
            __m256i wq[MR];                                                                   \
            float dw[MR];                                                                     \
            for (int r = 0; r < NR; r++) {                                                    \
                const block_t *b = ROW_BLOCK(block_t, w, r, ws, ib);                          \
                if (NT == 1) tensor_prefetch(b, (size_t)NR * ws);                             \
                dw[r] = tensor_h2f(b->d);                                                     \
                wq[r] = t##_codes(b);                                                         \
            }                                                                                 \
            for (int tt = 0; tt < NT; tt++) {                                                 \
                const block_q8_0 *xb = ROW_BLOCK(block_q8_0, x, tt, xs, ib);                  \
                const float dx = tensor_h2f(xb->d);                                           \
                const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);               \
                const __m256i xabs = _mm256_abs_epi8(xv);                                     \
                for (int r = 0; r < NR; r++) {                                                \
                    __m256 p = _mm256_cvtepi32_ps(dot_ws_xabs(wq[r], xv, xabs));              \
                    acc[r][tt] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), p, acc[r][tt]);  \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        for (int r = 0; r < NR; r++)                                                          \
            for (int tt = 0; tt < NT; tt++)                                                   \
                y[tt * ys + r] = tensor_hsum8(acc[r][tt]);                                    \
    }

SIGNED_Q8_0_TILE(q4_0, block_q4_0)
SIGNED_Q8_0_TILE(q5_0, block_q5_0)
SIGNED_Q8_0_TILE(iq4_nl, block_iq4_nl)

/* Q8_0 x Q8_0: here the weights may hold -128, so |w| is the unsigned
 * operand (computed once per row) and x * sign(w) the signed one; x is in
 * [-127, 127] (max-abs rule), so negating it cannot overflow, and pairs sum
 * to at most 2 * 128 * 127. */
TMPL_INLINE void q8_0_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        __m256i wq[MR], wabs[MR];
        float dw[MR];
        for (int r = 0; r < NR; r++) {
            const block_q8_0 *b = ROW_BLOCK(block_q8_0, w, r, ws, ib);
            if (NT == 1) tensor_prefetch(b, (size_t)NR * ws);
            dw[r] = tensor_h2f(b->d);
            wq[r] = _mm256_loadu_si256((const __m256i *)b->qs);
            wabs[r] = _mm256_abs_epi8(wq[r]);
        }
        for (int t = 0; t < NT; t++) {
            const block_q8_0 *xb = ROW_BLOCK(block_q8_0, x, t, xs, ib);
            const float dx = tensor_h2f(xb->d);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);
            for (int r = 0; r < NR; r++) {
                __m256i d4 = TMPL_DOT4(wabs[r], _mm256_sign_epi8(xv, wq[r]));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(d4),
                                            acc[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}


/* ------------------------------------------------------------ Q4_K, Q5_K */

/* The 12-byte scale field of Q4_K/Q5_K as 16 bytes: bytes 0..7 the 6-bit
 * scales of sub-blocks 0..7, bytes 8..15 the 6-bit mins (blocks.h gives
 * the packing: sub-blocks 0..3 in the low 6 bits of bytes 0..7; 4..7 with
 * low 4 bits in the nibbles of bytes 8..11 and top 2 bits in the top bits
 * of bytes 0..7). Done on 32-bit words, 4 sub-blocks per word. */
TENSOR_AVX2_INLINE __m128i k4_scales_mins(const uint8_t *s)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t mn_lo = u1 & 0x3f3f3f3fu;
    uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    return _mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo);
}

/* Q4_K (HIGHBIT 0) and Q5_K (HIGHBIT 1). Codes q in 0..15 / 0..31 are
 * maddubs's unsigned operand: pairs <= 2 * 31 * 128; scales <= 63, so an
 * int32 lane stays below 8 * 2 * 7936 * 63. */
TMPL_INLINE void k45_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                 float *y, size_t ys, const int NR, const int NT,
                                 const int HIGHBIT)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const uint8_t *qs[MR], *qh[MR];
        float dw[MR], dmw[MR];
        __m256i scb[MR], mnd[MR];
        for (int r = 0; r < NR; r++) {
            const uint8_t *scales;
            if (HIGHBIT) {
                const block_q5_k *b = ROW_BLOCK(block_q5_k, w, r, ws, ib);
                dw[r] = tensor_h2f(b->d), dmw[r] = tensor_h2f(b->dmin);
                qs[r] = b->qs, qh[r] = b->qh, scales = b->scales;
            } else {
                const block_q4_k *b = ROW_BLOCK(block_q4_k, w, r, ws, ib);
                dw[r] = tensor_h2f(b->d), dmw[r] = tensor_h2f(b->dmin);
                qs[r] = b->qs, qh[r] = NULL, scales = b->scales;
            }
            if (NT == 1)
                for (int off = 0; off < (HIGHBIT ? 176 : 144); off += 64)
                    tensor_prefetch(qs[r] + off - 16 - (HIGHBIT ? 32 : 0), (size_t)NR * ws);
            /* int16 lanes: 0..7 scales, 8..15 mins */
            __m256i sm16 = _mm256_cvtepu8_epi16(k4_scales_mins(scales));
            /* both 128-bit halves: the 8 scales (for sel16) */
            scb[r] = _mm256_permute2x128_si256(sm16, sm16, 0x00);
            /* each min twice, lined up with the 16 bsums (two per sub-block) */
            __m128i mn = _mm256_extracti128_si256(sm16, 1);
            mnd[r] = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
        }
        __m256i isum[MR][MT];
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < NT; t++)
                isum[r][t] = _mm256_setzero_si256();
        /* chunk c: 64 elements = sub-block 2c (low nibbles of qs[32c..]) and
         * 2c + 1 (high nibbles) */
        for (int c = 0; c < 4; c++) {
            for (int r = 0; r < NR; r++) {
                const __m256i m4 = _mm256_set1_epi8(0x0f);
                __m256i q = _mm256_loadu_si256((const __m256i *)(qs[r] + 32 * c));
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (HIGHBIT) {
                    /* bit 2c / 2c+1 of qh[l] is bit 4 of element l of the sub-block */
                    const __m256i one = _mm256_set1_epi8(1);
                    __m256i h = _mm256_loadu_si256((const __m256i *)qh[r]);
                    lo = _mm256_or_si256(
                        lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one), 4));
                    hi = _mm256_or_si256(
                        hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one), 4));
                }
                __m256i s_lo = _mm256_shuffle_epi8(scb[r], tensor_sel16(2 * c));
                __m256i s_hi = _mm256_shuffle_epi8(scb[r], tensor_sel16(2 * c + 1));
                for (int t = 0; t < NT; t++) {
                    const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
                    __m256i x_lo = _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * c));
                    __m256i x_hi = _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * c + 32));
                    isum[r][t] = TMPL_DOT_SCALED_ADD(isum[r][t], lo, x_lo, s_lo);
                    isum[r][t] = TMPL_DOT_SCALED_ADD(isum[r][t], hi, x_hi, s_hi);
                }
            }
        }
        for (int t = 0; t < NT; t++) {
            const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
            const float dx = xb->d;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
            for (int r = 0; r < NR; r++) {
                __m256i imin = _mm256_madd_epi16(bs, mnd[r]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx),
                                            _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
                acc[r][t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw[r] * dx),
                                             _mm256_cvtepi32_ps(imin), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}


#endif /* __x86_64__ */
#endif
