/* AVX2 (+FMA, F16C) dot-product kernels for TQ1_0, TQ2_0 (activations
 * Q8_K) and MXFP4 (activations Q8_0), checked against vecdot_iq_scalar.c.
 *
 * The scheme of vecdot_avx2.c: one always_inline template per type over an
 * NR x NT tile, instantiated as 1x1, 4x1 and a prefill tile (AVX2_SET), so
 * that every shape gives a (row, token) pair the same bits. Per block the
 * integer dot products accumulate exactly in int32 lanes, then one float
 * step per block: acc = fma(broadcast(d_w * d_x), float(isum), acc). The
 * integer sums equal the scalar reference's; only the order of the float
 * additions differs (8 lanes, summed at the end by tensor_hsum8). */
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ------------------------------------------------------------- TQ2_0, TQ1_0 */

/* Byte lanes: (v * p) mod 256 per byte, from two 16-bit multiplies (the
 * high byte is multiplied with its low byte cleared, so no carry enters). */
TENSOR_AVX2_INLINE __m256i mul_bytes(__m256i v, __m256i p)
{
    const __m256i lo8 = _mm256_set1_epi16(0x00ff);
    __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(v, _mm256_and_si256(p, lo8)), lo8);
    __m256i hi = _mm256_mullo_epi16(_mm256_andnot_si256(lo8, v), _mm256_srli_epi16(p, 8));
    return _mm256_or_si256(lo, hi);
}

/* Byte lanes: (s * 3) >> 8 per byte s, the leading base-3 digit (0..2). */
TENSOR_AVX2_INLINE __m256i top_trit(__m256i s)
{
    const __m256i lo8 = _mm256_set1_epi16(0x00ff), three = _mm256_set1_epi16(3);
    __m256i lo = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_and_si256(s, lo8), three), 8);
    __m256i hi = _mm256_andnot_si256(lo8, _mm256_mullo_epi16(_mm256_srli_epi16(s, 8), three));
    return _mm256_or_si256(lo, hi);
}

/* The 32 ternary codes (0..2) of elements 32c..32c+31 of a TQ1_0 block
 * (element order in blocks_iq.h). Chunks 0..4 are digit c of qs[0..31];
 * chunks 5 and 6 digits 0,1 and 2,3 of qs[32..47]; chunk 7 digit 4 of
 * qs[32..47], then the 16 qh codes (byte 4k + m: digit k of qh[m]). */
TENSOR_AVX2_INLINE __m256i tq1_codes(const block_tq1_0 *b, int c)
{
    __m256i v, p;
    if (c < 5) {
        v = _mm256_loadu_si256((const __m256i *)b->qs);
        p = _mm256_set1_epi8((char)tensor_tq1_pow3[c]);
    } else {
        __m128i tail = _mm_loadu_si128((const __m128i *)(b->qs + 32));
        if (c < 7) {
            v = _mm256_set_m128i(tail, tail);
            p = _mm256_set_m128i(_mm_set1_epi8((char)tensor_tq1_pow3[2 * (c - 5) + 1]),
                                 _mm_set1_epi8((char)tensor_tq1_pow3[2 * (c - 5)]));
        } else {
            uint32_t qh;
            memcpy(&qh, b->qh, 4);
            v = _mm256_set_m128i(_mm_set1_epi32((int)qh), tail);
            p = _mm256_set_m128i(_mm_set_epi32(0x1b1b1b1b, 0x09090909, 0x03030303, 0x01010101),
                                 _mm_set1_epi8((char)tensor_tq1_pow3[4]));
        }
    }
    return top_trit(mul_bytes(v, p));
}

/* TQ2_0 (TQ1 = 0) and TQ1_0 (TQ1 = 1). The codes t (0..2) are maddubs's
 * unsigned operand (pairs <= 2 * 2 * 128); isum = sum t x - sum x. */
TENSOR_AVX2_INLINE void tq_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                float *y, size_t ys, const int NR, const int NT, const int TQ1)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    const __m256i ones8 = _mm256_set1_epi8(1), m3 = _mm256_set1_epi8(3);
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        /* int32 lane k of xsum[t]: the sum of the activations that lane k
         * of isum multiplies (bytes 4k..4k+3 of each 32-byte chunk), so
         * that isum - xsum is exact per lane (zero weights give 0.0) */
        __m256i xsum[MT];
        for (int t = 0; t < NT; t++) {
            const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
            xsum[t] = _mm256_setzero_si256();
            for (int c = 0; c < 8; c++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * c));
                xsum[t] = _mm256_add_epi32(xsum[t], tensor_dot4_u8s8(ones8, xv));
            }
        }
        __m256i isum[MR][MT];
        float dw[MR];
        for (int r = 0; r < NR; r++) {
            for (int t = 0; t < NT; t++)
                isum[r][t] = _mm256_setzero_si256();
            __m256i q[8];
            if (TQ1) {
                const block_tq1_0 *b = ROW_BLOCK(block_tq1_0, w, r, ws, ib);
                if (NT == 1) tensor_prefetch(b, (size_t)NR * ws);
                dw[r] = tensor_h2f(b->d);
                for (int c = 0; c < 8; c++)
                    q[c] = tq1_codes(b, c);
            } else {
                const block_tq2_0 *b = ROW_BLOCK(block_tq2_0, w, r, ws, ib);
                if (NT == 1) {
                    tensor_prefetch(b, (size_t)NR * ws);
                    tensor_prefetch((const char *)b + 64, (size_t)NR * ws);
                }
                dw[r] = tensor_h2f(b->d);
                for (int h = 0; h < 2; h++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                    for (int c = 0; c < 4; c++)
                        q[4 * h + c] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * c), m3);
                }
            }
            for (int t = 0; t < NT; t++) {
                const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
                for (int c = 0; c < 8; c++) {
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * c));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], tensor_dot4_u8s8(q[c], xv));
                }
            }
        }
        for (int t = 0; t < NT; t++) {
            const float dx = ROW_BLOCK(block_q8_k, x, t, xs, ib)->d;
            for (int r = 0; r < NR; r++) {
                __m256i s = _mm256_sub_epi32(isum[r][t], xsum[t]);
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(s),
                                            acc[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

TENSOR_AVX2_INLINE void tq1_0_tile(int64_t n, const void *w, size_t ws, const void *x,
                                   size_t xs, float *y, size_t ys, const int NR, const int NT)
{
    tq_tile(n, w, ws, x, xs, y, ys, NR, NT, 1);
}
TENSOR_AVX2_INLINE void tq2_0_tile(int64_t n, const void *w, size_t ws, const void *x,
                                   size_t xs, float *y, size_t ys, const int NR, const int NT)
{
    tq_tile(n, w, ws, x, xs, y, ys, NR, NT, 0);
}

AVX2_SET(tq1_0, 2, 4);
AVX2_SET(tq2_0, 2, 4);

/* -------------------------------------------------------------------- MXFP4 */

/* MXFP4 x Q8_0: codes v = tensor_mxfp4_values[q] (|v| <= 12) by byte
 * shuffle; |x| (<= 127) is the unsigned operand and v * sign(x) the signed
 * one, pairs <= 2 * 127 * 12. */
TENSOR_AVX2_INLINE void mxfp4_tile(int64_t n, const void *w, size_t ws, const void *x,
                                   size_t xs, float *y, size_t ys, const int NR, const int NT)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tensor_mxfp4_values));
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        __m256i wq[MR];
        float dw[MR];
        for (int r = 0; r < NR; r++) {
            const block_mxfp4 *b = ROW_BLOCK(block_mxfp4, w, r, ws, ib);
            if (NT == 1) tensor_prefetch(b, (size_t)NR * ws);
            dw[r] = tensor_e8m0_half(b->e);
            wq[r] = _mm256_shuffle_epi8(grid, tensor_nibbles32(b->qs));
        }
        for (int t = 0; t < NT; t++) {
            const block_q8_0 *xb = ROW_BLOCK(block_q8_0, x, t, xs, ib);
            const float dx = tensor_h2f(xb->d);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->qs);
            const __m256i xabs = _mm256_abs_epi8(xv);
            for (int r = 0; r < NR; r++) {
                __m256i d4 = tensor_dot4_u8s8(xabs, _mm256_sign_epi8(wq[r], xv));
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(d4),
                                            acc[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

AVX2_SET(mxfp4, 2, 4);

#endif /* __x86_64__ */
