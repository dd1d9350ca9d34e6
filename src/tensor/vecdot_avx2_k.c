/* AVX2 (+FMA, F16C) dot-product kernels for the 256-element super-block
 * types with Q8_K activations: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS.
 *
 * Same scheme as vecdot_avx2.c: one always_inline template per type over an
 * NR x NT tile, instantiated as 1x1, 4x1 and a prefill tile, so every shape
 * gives a (row, token) pair the same bits. Per super-block each pair
 * accumulates its integer dot products (codes x activation codes, times the
 * sub-block scales) exactly in an int32 vector, then takes one or two float
 * steps:
 *     acc = fma(broadcast(d_w * d_x), float(isum), acc)
 *     acc = fnma(broadcast(dmin_w * d_x), float(imin), acc)   (types with mins)
 * where imin = sum_s mn_s * (sum of x over s) comes from Q8_K's bsums.
 * Signed codes (Q3_K's q - 4, Q6_K's q - 32) are multiplied as the unsigned
 * stored q, and the offset is taken off in integers: isum -= off * sum_s
 * sc_s * bsum_s. maddubs's unsigned operand is always the weight code here
 * (0..63), so an activation code of -128 is harmless; IQ4_XS is the
 * exception and uses the sign trick with |x| (see vecdot_avx2.c).
 *
 * Lane bookkeeping: a 32-byte activation load covers two 16-element
 * sub-blocks (Q2_K, Q3_K, Q6_K) or one 32-element sub-block (Q4_K, Q5_K,
 * IQ4_XS). After maddubs, int16 lanes 0..7 hold pairs of the first 16
 * elements and lanes 8..15 the second 16, so a scale vector whose low
 * 128 bits hold one sub-block's scale and high 128 bits the next one's
 * weights each half by its own scale in the following madd. */
#include "tensor/blocks.h"
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Control that fills the low 128 bits with int16 lane s0 and the high 128
 * bits with lane s1 (of the respective source 128-bit lanes). */
TENSOR_AVX2_INLINE __m256i sel16_pair(int s0, int s1)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * s1)),
                            _mm_set1_epi16((short)(0x0100 + 0x0202 * s0)));
}

/* The 16 int16 scales of a 16-sub-block type as two 8-lane halves: for the
 * half h = 0 (sub-blocks 0..7) or 1 (8..15), both 128-bit lanes hold that
 * half's 8 scales. */
TENSOR_AVX2_INLINE __m256i half_scales(__m256i sc16, int h)
{
    return h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                  : _mm256_permute2x128_si256(sc16, sc16, 0x11);
}

/* ------------------------------------------------------------------ Q4_K/Q5_K */

/* the shared templates, with AVX2's integer dot products */
#define TMPL_INLINE TENSOR_AVX2_INLINE
#define TMPL_DOT4(u, s) tensor_dot4_u8s8(u, s)
#define TMPL_DOT_SCALED_ADD(acc, u, s, sc16) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16))
#include "tensor/vecdot_x86_tmpl.h"

TENSOR_AVX2_INLINE void q4_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    k45_tile(n, w, ws, x, xs, y, ys, NR, NT, 0);
}
TENSOR_AVX2_INLINE void q5_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    k45_tile(n, w, ws, x, xs, y, ys, NR, NT, 1);
}

AVX2_SET(q4_k, 2, 4);
AVX2_SET(q5_k, 2, 4);

/* ------------------------------------------------------- Q2_K, Q3_K, Q6_K */

/* Q3_K's 16 six-bit scales, minus 32, as 16 int8 in sub-block order
 * (blocks.h: low 4 bits in the nibbles of bytes 0..7, low nibbles for
 * sub-blocks 0..7; high 2 bits in bytes 8..11, bit pair j / 4 of byte
 * 8 + j % 4). One 32-bit word per 4 sub-blocks. */
TENSOR_AVX2_INLINE __m128i q3k_scales(const uint8_t *s)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t w0 = (u0 & 0x0f0f0f0fu) | ((u2 << 4) & 0x30303030u);        /* 0..3 */
    uint32_t w1 = (u1 & 0x0f0f0f0fu) | ((u2 << 2) & 0x30303030u);        /* 4..7 */
    uint32_t w2 = ((u0 >> 4) & 0x0f0f0f0fu) | (u2 & 0x30303030u);        /* 8..11 */
    uint32_t w3 = ((u1 >> 4) & 0x0f0f0f0fu) | ((u2 >> 2) & 0x30303030u); /* 12..15 */
    return _mm_sub_epi8(_mm_set_epi32((int)w3, (int)w2, (int)w1, (int)w0), _mm_set1_epi8(32));
}

enum { K2, K3, K6 };

/* Q2_K, Q3_K and Q6_K: 16 sub-blocks of 16. Per half h (128 elements) and
 * chunk c (32 elements: sub-blocks 8h + 2c and 8h + 2c + 1) the unsigned
 * codes q are built in the 32 byte lanes, multiplied with the activations
 * (pairs <= 2 * 63 * 128) and weighted by the pair of sub-block scales.
 * Then per pair:
 *   Q2_K: imin = sum_s mn_s bsum_s, two float steps;
 *   Q3_K: isum -= 4 * sum_s sc_s bsum_s   (codes are q - 4), one float step;
 *   Q6_K: isum -= 32 * sum_s sc_s bsum_s  (codes are q - 32), one float step. */
TENSOR_AVX2_INLINE void k16_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                 float *y, size_t ys, const int NR, const int NT, const int KIND)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0f);
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        float dw[MR], dmw[MR];
        __m256i sc16[MR], mn16[MR]; /* int16 per sub-block */
        const void *blk[MR];
        for (int r = 0; r < NR; r++) {
            if (NT == 1) {
                const char *b0 = (const char *)w + (size_t)r * ws;
                const size_t bb = KIND == K2 ? sizeof(block_q2_k)
                                  : KIND == K3 ? sizeof(block_q3_k) : sizeof(block_q6_k);
                for (size_t off = 0; off < bb; off += 64)
                    tensor_prefetch(b0 + (size_t)ib * bb + off, (size_t)NR * ws);
            }
            if (KIND == K2) {
                const block_q2_k *b = ROW_BLOCK(block_q2_k, w, r, ws, ib);
                dw[r] = tensor_h2f(b->d), dmw[r] = tensor_h2f(b->dmin);
                __m128i s = _mm_loadu_si128((const __m128i *)b->scales);
                sc16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(0x0f)));
                mn16[r] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0f)));
                blk[r] = b;
            } else if (KIND == K3) {
                const block_q3_k *b = ROW_BLOCK(block_q3_k, w, r, ws, ib);
                dw[r] = tensor_h2f(b->d), dmw[r] = 0.0f;
                sc16[r] = _mm256_cvtepi8_epi16(q3k_scales(b->scales));
                mn16[r] = _mm256_setzero_si256();
                blk[r] = b;
            } else {
                const block_q6_k *b = ROW_BLOCK(block_q6_k, w, r, ws, ib);
                dw[r] = tensor_h2f(b->d), dmw[r] = 0.0f;
                sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
                mn16[r] = _mm256_setzero_si256();
                blk[r] = b;
            }
        }
        __m256i isum[MR][MT];
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < NT; t++)
                isum[r][t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < NR; r++) {
                const __m256i scb = half_scales(sc16[r], h);
                __m256i v0, v1 = _mm256_setzero_si256(), vh = _mm256_setzero_si256();
                if (KIND == K2) {
                    v0 = _mm256_loadu_si256((const __m256i *)(((const block_q2_k *)blk[r])->qs + 32 * h));
                } else if (KIND == K3) {
                    const block_q3_k *b = blk[r];
                    v0 = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                    vh = _mm256_loadu_si256((const __m256i *)b->hmask);
                } else {
                    const block_q6_k *b = blk[r];
                    v0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
                    v1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
                    vh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
                }
                for (int c = 0; c < 4; c++) {
                    __m256i q;
                    if (KIND == K2) {
                        q = _mm256_and_si256(_mm256_srli_epi16(v0, 2 * c), m3);
                    } else if (KIND == K3) {
                        /* low 2 bits from qs, bit 2 from hmask bit 4h + c */
                        __m256i b2 = _mm256_and_si256(_mm256_srli_epi16(vh, 4 * h + c),
                                                      _mm256_set1_epi8(1));
                        q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 2 * c), m3),
                                            _mm256_slli_epi16(b2, 2));
                    } else {
                        /* low 4 bits: ql[l] (c even) or ql[32 + l] (c odd), low nibble
                         * for c < 2, high for c >= 2; high 2 bits from qh >> 2c */
                        __m256i l4 = (c & 1) ? v1 : v0;
                        l4 = c < 2 ? _mm256_and_si256(l4, m4)
                                   : _mm256_and_si256(_mm256_srli_epi16(l4, 4), m4);
                        __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(vh, 2 * c), m3);
                        q = _mm256_or_si256(l4, _mm256_slli_epi16(h2, 4));
                    }
                    const __m256i scv = _mm256_shuffle_epi8(scb, sel16_pair(2 * c, 2 * c + 1));
                    for (int t = 0; t < NT; t++) {
                        const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
                        __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 128 * h + 32 * c));
                        isum[r][t] = _mm256_add_epi32(
                            isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), scv));
                    }
                }
            }
        }
        for (int t = 0; t < NT; t++) {
            const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
            const float dx = xb->d;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
            for (int r = 0; r < NR; r++) {
                __m256i s = isum[r][t];
                if (KIND == K3)
                    s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[r]), 2));
                if (KIND == K6)
                    s = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[r]), 5));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(s),
                                            acc[r][t]);
                if (KIND == K2)
                    acc[r][t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw[r] * dx),
                                                 _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mn16[r])),
                                                 acc[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

TENSOR_AVX2_INLINE void q2_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    k16_tile(n, w, ws, x, xs, y, ys, NR, NT, K2);
}
TENSOR_AVX2_INLINE void q3_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    k16_tile(n, w, ws, x, xs, y, ys, NR, NT, K3);
}
TENSOR_AVX2_INLINE void q6_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                  float *y, size_t ys, const int NR, const int NT)
{
    k16_tile(n, w, ws, x, xs, y, ys, NR, NT, K6);
}

AVX2_SET(q2_k, 2, 4);
AVX2_SET(q3_k, 2, 4);
AVX2_SET(q6_k, 2, 4);

/* ------------------------------------------------------------------ IQ4_XS */

/* IQ4_XS: 8 sub-blocks of 32, grid codes (-127..113) and signed 6-bit
 * scales ls - 32. The activations here are Q8_K and may hold -128, so the
 * sign trick takes |x| as the unsigned operand (pairs <= 2 * 128 * 127). */
TENSOR_AVX2_INLINE void iq4_xs_tile(int64_t n, const void *w, size_t ws, const void *x,
                                    size_t xs, float *y, size_t ys, const int NR, const int NT)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_iq4nl_values));
    /* int32 lane s: the shifts that bring sub-block s's scale bits down */
    const __m256i sh_lo = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i sh_hi = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        float dw[MR];
        __m256i scb[MR];
        const uint8_t *qs[MR];
        for (int r = 0; r < NR; r++) {
            const block_iq4_xs *b = ROW_BLOCK(block_iq4_xs, w, r, ws, ib);
            if (NT == 1)
                for (size_t off = 0; off < sizeof *b; off += 64)
                    tensor_prefetch((const char *)b + off, (size_t)NR * ws);
            dw[r] = tensor_h2f(b->d);
            qs[r] = b->qs;
            /* ls_s = (bits 4s..4s+3 of scales_l) | (bits 2s..2s+1 of scales_h) << 4,
             * one sub-block per int32 lane, then packed to 8 int16 */
            uint32_t sl;
            memcpy(&sl, b->scales_l, 4);
            __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), sh_lo),
                                          _mm256_set1_epi32(15));
            __m256i hi = _mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32((int)b->scales_h), sh_hi), _mm256_set1_epi32(3));
            __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                          _mm256_set1_epi32(32));
            __m128i ls16 = _mm_packs_epi32(_mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1));
            scb[r] = _mm256_broadcastsi128_si256(ls16);
        }
        __m256i isum[MR][MT];
        for (int r = 0; r < NR; r++)
            for (int t = 0; t < NT; t++)
                isum[r][t] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            for (int r = 0; r < NR; r++) {
                __m256i wq = _mm256_shuffle_epi8(grid, tensor_nibbles32(qs[r] + 16 * s));
                __m256i scv = _mm256_shuffle_epi8(scb[r], tensor_sel16(s));
                for (int t = 0; t < NT; t++) {
                    const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * s));
                    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wq, xv));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(p, scv));
                }
            }
        }
        for (int t = 0; t < NT; t++) {
            const float dx = ROW_BLOCK(block_q8_k, x, t, xs, ib)->d;
            for (int r = 0; r < NR; r++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx),
                                            _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

AVX2_SET(iq4_xs, 2, 4);

#endif /* __x86_64__ */
