/* Q4_K x8: the packer and the kernels (pack_internal.h has the layout and
 * the float steps every kernel follows).
 *
 * The packer unpacks each source block's 12-byte field of 6-bit scales and
 * mins into bytes (sc[] per sub-block, mn[] in sub-block pairs) and
 * interleaves the codes of the 8 rows 4 by 4. The codes stay unsigned
 * (0..15), maddubs's unsigned operand; the mins come in through the Q8_K
 * activation row's bsums (sums of 16 codes), so the kernels never sum
 * activation codes themselves. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/quant_internal.h"
#include "tensor/vecdot_x86.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

bool tensor_x8_pack_q4_k(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q4_kx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        block_q4_kx8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_q4_k *b =
                (const block_q4_k *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            o->dmin[r] = b->dmin;
            for (int s = 0; s < 8; s++) {
                int sc, mn;
                tensor_k_scale_get(b->scales, s, &sc, &mn);
                o->sc[8 * s + r] = (uint8_t)sc;
                o->mn[16 * (s / 2) + 2 * r + s % 2] = (uint8_t)mn;
                /* Sub-block s is chunk s / 2's low (s even) or high (s odd)
                 * nibbles: element 32 s + l is in qs[32 (s / 2) + l]. */
                const uint8_t *q = b->qs + 32 * (s / 2);
                const int shift = 4 * (s % 2);
                for (int m = 0; m < 4; m++)
                    for (int e = 0; e < 4; e++) {
                        int q_lo = (q[8 * m + e] >> shift) & 15;
                        int q_hi = (q[8 * m + 4 + e] >> shift) & 15;
                        o->qs[128 * s + 32 * m + 4 * r + e] = (uint8_t)(q_lo | q_hi << 4);
                    }
            }
        }
    }
    return true; /* every 4-bit code and 6-bit scale fits the layout */
}

/* The reference: pack_internal.h's float steps, one (row, token) pair at a
 * time, with the integer sums taken element by element. */
void tensor_x8_q4_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    const block_q4_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    for (int t = 0; t < nt; t++) {
        const block_q8_k *xb = (const block_q8_k *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q4_kx8 *b = &wb[ib];
            const int8_t *xq = xb[ib].qs;
            const float dx = xb[ib].d;
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0, imin = 0;
                for (int s = 0; s < 8; s++) {
                    int32_t part = 0;
                    for (int m = 0; m < 4; m++)
                        for (int e = 0; e < 4; e++) {
                            uint8_t q = b->qs[128 * s + 32 * m + 4 * r + e];
                            part += (q & 15) * xq[32 * s + 8 * m + e];
                            part += (q >> 4) * xq[32 * s + 8 * m + 4 + e];
                        }
                    isum += b->sc[8 * s + r] * part;
                    int32_t xsum = xb[ib].bsums[2 * s] + xb[ib].bsums[2 * s + 1];
                    imin += b->mn[16 * (s / 2) + 2 * r + s % 2] * xsum;
                }
                float dd = tensor_f16_to_f32(b->d[r]) * dx;
                float dm = tensor_f16_to_f32(b->dmin[r]) * dx;
                acc[r] = fmaf((float)isum, dd, acc[r]);
                acc[r] = fmaf(-(float)imin, dm, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

#if defined(__x86_64__)

/* Software prefetch distance in the group stream, in bytes ahead of the
 * sub-block being read: two interleaved blocks. Measured on Zen 3 (2048
 * columns, nt = 1): with the weights in L3, about 15% faster than no
 * prefetch (the hardware prefetcher alone lags) and than one block ahead
 * (too close); in L2, no difference. Rows of one thread are contiguous
 * groups, so the stream runs on across groups. */
#define Q4_KX8_PREFETCH (2 * sizeof(block_q4_kx8))

/* One group x NT tokens.
 *
 * Per super-block and sub-block s, int16 lanes 2r and 2r+1 of s16 hold two
 * halves of row r's dot product of its 32 codes with the 32 activation
 * codes of s: 8 maddubs (4 code bytes x 4 broadcast activation bytes per
 * int32 lane) summed in int16. Bound: each maddubs int16 lane is two
 * products of a code 0..15 and an activation in [-128, 127], so
 * |lane| <= 2 * 15 * 128 = 3840, and 8 of them sum to at most 30720 < 32767
 * (maddubs never saturates and the adds never wrap).
 *
 * The madd of s16 with the scales of s as int16 pairs (lanes 2r, 2r+1 =
 * sc[8 s + r]) gives int32 lane r = sc_s * (row r's dot over s), at most
 * 63 * 2 * 30720 = 3870720 in magnitude; 8 sub-blocks sum to at most
 * 30965760 < 2^31, so isum accumulates in int32 without overflow.
 *
 * The mins: bsums summed in pairs give the 8 sub-block sums S_s of the
 * activations, |S_s| <= 32 * 128 = 4096, so int16 (the activation row comes
 * from the Q8_K quantizer, whose bsums are the true sums). Int32 word p of
 * them is (S_2p, S_2p+1); madd of that word broadcast with mn[16 p ..]
 * widened to int16 (lanes 2r, 2r+1 = row r's mins of sub-blocks 2p, 2p+1)
 * gives lane r = mn_2p * S_2p + mn_2p+1 * S_2p+1; the 4 pairs sum to
 * |imin| <= 8 * 63 * 4096 < 2^22.
 *
 * Cost at nt = 1, per sub-block (128 weight bytes of 8 rows): 4 loads, 12
 * ALU ops to split nibbles, 8 broadcast loads, 8 maddubs, 7 int16 adds,
 * one scale shuffle, one madd and one int32 add; the mins and the two
 * float steps come once per super-block. The multiplies and the nibble
 * split are about all of it: no per-row horizontal sum.
 *
 * For NT > 1 the codes and scales of a sub-block are unpacked once (c[8],
 * sc16) and serve every token in turn; per token only its int16 sum is
 * live besides the NT int32 sums, so NT = 4 needs 8 + 1 + 4 + 1 and a few
 * temporaries of the 16 ymm registers (the float accumulators, touched
 * once per super-block, may live in memory). */
TENSOR_AVX2_INLINE void q4_kx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q4_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* Byte shuffle of the 8 scale bytes of a sub-block (broadcast to every
     * 64-bit lane) to int16 lanes 2r, 2r+1 = scale of row r: rows 0..3 in
     * the low 128-bit lane, rows 4..7 in the high one. */
    const __m256i sc_pairs = _mm256_setr_epi8(
        0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
        4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q4_kx8 *b = &wb[ib];
        const block_q8_k *xb[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++)
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = b->qs + 128 * s;
            _mm_prefetch((const char *)qs + Q4_KX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)qs + Q4_KX8_PREFETCH + 64, _MM_HINT_T0);
            int64_t sc8;
            memcpy(&sc8, b->sc + 8 * s, 8);
            const __m256i sc16 = _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_pairs);
            /* c[2m]: elements 8m + e of the 8 rows, c[2m + 1]: 8m + 4 + e */
            __m256i c[8];
            for (int m = 0; m < 4; m++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * m));
                c[2 * m] = _mm256_and_si256(q, m4);
                c[2 * m + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                __m256i s16 = _mm256_maddubs_epi16(c[0], tensor_bcast4(xq));
                for (int j = 1; j < 8; j++)
                    s16 = _mm256_add_epi16(s16,
                                           _mm256_maddubs_epi16(c[j], tensor_bcast4(xq + 4 * j)));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16, sc16));
            }
        }
        __m256i mn16[4];
        for (int p = 0; p < 4; p++)
            mn16[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->mn + 16 * p)));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin));
        for (int t = 0; t < NT; t++) {
            /* S_0..S_7 as int16, both 128-bit lanes */
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb[t]->bsums),
                                              _mm_loadu_si128((const __m128i *)xb[t]->bsums + 1));
            const __m256i bs2 = _mm256_broadcastsi128_si256(bs);
            const __m256i pair[4] = {
                _mm256_shuffle_epi32(bs2, 0x00), _mm256_shuffle_epi32(bs2, 0x55),
                _mm256_shuffle_epi32(bs2, 0xaa), _mm256_shuffle_epi32(bs2, 0xff)};
            __m256i imin = _mm256_madd_epi16(mn16[0], pair[0]);
            for (int p = 1; p < 4; p++)
                imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn16[p], pair[p]));
            const __m256 dx = _mm256_set1_ps(xb[t]->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t]);
            /* fmaf(-(float)imin, dmin * dx, acc): negation is exact, so fnmadd */
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q4_k_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q4_kx8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q4_kx8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q4_kx8_tile(n, w, x, xs, y, ys, 3); break;
    default: q4_kx8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

/* The Q8_K activation row of the K-quant layouts with the bytes of the
 * scalar quantizer (quantize.c's tensor_quant_row_q8_k), 256 floats per
 * block in 32 vectors of 8:
 *   amax: max of |x| from 0, NaN lanes dropped (VMAXPS returns its second
 *     operand when the first is NaN, as the scalar `a > amax` skips NaN);
 *   d = amax / 127 and its inverse by the same scalar code;
 *   codes: x * (1 / d) clamped to [-127, 127], NaN to -127 (the same
 *     operand rule), then rounded to nearest even (the default rounding
 *     mode, as the scalar rounding); bsum j = the sum of codes 16 j ..
 *     16 j + 15. */
TENSOR_AVX2_TARGET void tensor_x8_q8_k_quantize_act_avx2(const float *x, void *dst, int64_t n)
{
    block_q8_k *b = dst;
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    /* bytes 0..3 of each 128-bit lane after the two packs hold codes
     * 0..3 / 8..11 ...: int32 lanes (0, 4, 1, 5, 2, 6, 3, 7) put them in
     * order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, x += TENSOR_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 32; j++)
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * j), abs_mask), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float d = _mm_cvtss_f32(m4) / 127.0f;
        if (!(1.0f / d <= FLT_MAX)) d = 0;
        b[ib].d = d;
        const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
        for (int k = 0; k < 8; k++) { /* 32 codes */
            __m256i q[4];
            for (int i = 0; i < 4; i++)
                q[i] = _mm256_cvtps_epi32(_mm256_min_ps(
                    _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * i), id), lo), hi));
            for (int h = 0; h < 2; h++) {
                __m256i s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
                b[ib].bsums[2 * k + h] = (int16_t)_mm_cvtsi128_si32(s4);
            }
            const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                                 _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(b[ib].qs + 32 * k), _mm256_permutevar8x32_epi32(p, order));
        }
    }
}

#endif /* __x86_64__ */
