/* AVX-512 VNNI kernels of the x8 layouts (Q4_0, Q8_0, Q4_K, Q6_K; Q5_K in pack_q5_k.c; pack_internal.h
 * has the layouts and the float steps every kernel follows).
 *
 * A 512-bit vector covers two groups: its low 256 bits are a code vector of
 * group g (bytes 4r..4r+3 = row r's 4 elements), its high 256 bits the same
 * code vector of group g + 1, so int32 lane r (r < 16) is row r of the pair
 * and every activation operand is 4 bytes broadcast to all 16 lanes, one
 * load with no shuffle. The two groups are two streams of the matrix
 * (group_bytes apart); a pair call reads both at once. An odd last group
 * runs alone in the low half (the high half is zero and never stored).
 *
 * The integer dot products are VPDPBUSD (int32 lane += sum of 4 unsigned x
 * signed byte products), with no int16 step to bound; each kernel states
 * why its int32 sums cannot overflow. They are the exact integers the
 * scalar reference computes (only their order of addition differs, which
 * is exact), and the float steps per (row, token) are the reference's in
 * its order, on 16 lanes instead of 1: results are the same bits.
 *
 * Tokens: a call takes up to 8 (max_t); the codes of a block are unpacked
 * once into 8 vectors and serve every token, each of which keeps one int32
 * and one float accumulator: 8 + 2 * 8 of the 32 zmm registers.
 *
 * Compiled everywhere (per-function target attributes), run only when
 * strata_cpu_level() says AVX512 (F, BW, VL and VNNI; base/cpu.h). */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/quant_internal.h"
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ------------------------------------------------------------ Q4_0, Q8_0 */

/* pack_avx512.h's x8_q8_0_tile (shared with Q5_0) says how the codes stay
 * unsigned and bounds the sums. */
X8_AVX512_INLINE void q4_0_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    x8_q8_0_tile(n, w, gs, x, xs, y, ys, NG, NT, X8_TILE_Q4_0);
}

X8_AVX512_INLINE void q8_0_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    x8_q8_0_tile(n, w, gs, x, xs, y, ys, NG, NT, X8_TILE_Q8_0);
}

/* ------------------------------------------------------------ Q4_K */

/* See pack_q4_k.c for the prefetch distance (two interleaved blocks). */
#define Q4_KX8_PREFETCH (2 * sizeof(block_q4_kx8))

/* Per super-block and sub-block s, row r's dot product of its 32 codes
 * (0..15) with the 32 activation codes of s is taken in two halves by
 * VPDPBUSD from zero: p0 over the low nibbles (elements 8m + e), p1 over
 * the high ones (8m + 4 + e), 16 products each, so |p0|, |p1| <= 16 * 15 *
 * 128 = 30720 fit int16. They become the int16 pair (p0, p1) of int32 lane
 * r, and VPDPWSSD with the pair (sc_s, sc_s) adds sc_s * (p0 + p1) to isum
 * (one instruction where an int32 multiply takes two); |isum| <= 8 * 63 *
 * 61440 < 2^22 over the 8 sub-blocks. The mins as in the AVX2 kernel: the activation row's bsums
 * summed in pairs give the sub-block sums S_s (|S_s| <= 4096, int16), and
 * madd of mn[16 p ..] widened to int16 with the word (S_2p, S_2p+1) gives
 * lane r = mn_2p * S_2p + mn_2p+1 * S_2p+1. */
X8_AVX512_INLINE void q4_k_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    const block_q4_kx8 *b0 = w;
    const block_q4_kx8 *b1 = (const block_q4_kx8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[X8_AVX512_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q8_k *xb[X8_AVX512_MAX_T];
        __m512i isum[X8_AVX512_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm512_setzero_si512();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *q0 = b0[ib].qs + 128 * s, *q1 = b1[ib].qs + 128 * s;
            prefetch_lines(q0, 128, Q4_KX8_PREFETCH);
            if (NG == 2) prefetch_lines(q1, 128, Q4_KX8_PREFETCH);
            /* lane r: sc[8 s + r] of its group */
            const __m512i sc32 = q4_kx8_scales(&b0[ib], &b1[ib], s, NG);
            const __m512i sc16 = _mm512_or_si512(sc32, _mm512_slli_epi32(sc32, 16));
            __m512i c[8];
            for (int m = 0; m < 4; m++) {
                const __m512i q = load_pair256(q0 + 32 * m, q1 + 32 * m, NG);
                c[2 * m] = _mm512_and_si512(q, m4);
                c[2 * m + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                for (int j = 0; j < 8; j += 2) {
                    p0 = _mm512_dpbusd_epi32(p0, c[j], bcast4_512(xq + 4 * j));
                    p1 = _mm512_dpbusd_epi32(p1, c[j + 1], bcast4_512(xq + 4 * j + 4));
                }
                const __m512i pair = _mm512_mask_blend_epi16(0xaaaaaaaa, p0, _mm512_slli_epi32(p1, 16));
                isum[t] = _mm512_dpwssd_epi32(isum[t], pair, sc16);
            }
        }
        __m512i mn16[4];
        q4_kx8_mins(&b0[ib], &b1[ib], mn16, NG);
        const __m512 dw = load_scales(b0[ib].d, b1[ib].d, NG);
        const __m512 dmw = load_scales(b0[ib].dmin, b1[ib].dmin, NG);
        for (int t = 0; t < NT; t++) {
            const __m512i imin = q4_kx8_imin(mn16, xb[t]->bsums);
            const __m512 dx = _mm512_set1_ps(xb[t]->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            /* fmaf(-(float)imin, dmin * dx, acc): negation is exact */
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* ------------------------------------------------------------ Q6_K */

#define Q6_KX8_PREFETCH (2 * sizeof(block_q6_kx8))

/* The AVX2 kernel's sums (pack_q6_k.c has the bounds) on 16 rows:
 * maddubs pairs of the 6-bit codes with the activations, two summed in
 * int16, VPDPWSSD with the row's scale in both int16 lanes of int32 lane
 * r; the offset of 32 through the bsums. */
X8_AVX512_INLINE void q6_k_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    const block_q6_kx8 *b0 = w;
    const block_q6_kx8 *b1 = (const block_q6_kx8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    __m512 acc[X8_AVX512_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q8_k *xb[X8_AVX512_MAX_T];
        __m512i isum[X8_AVX512_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm512_setzero_si512();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *ql0 = b0[ib].sb[s].ql, *ql1 = b1[ib].sb[s].ql;
            const uint8_t *qh0 = b0[ib].sb[s].qh, *qh1 = b1[ib].sb[s].qh;
            prefetch_lines(ql0, 128, Q6_KX8_PREFETCH);
            prefetch_lines(qh0, 64, Q6_KX8_PREFETCH);
            if (NG == 2) {
                prefetch_lines(ql1, 128, Q6_KX8_PREFETCH);
                prefetch_lines(qh1, 64, Q6_KX8_PREFETCH);
            }
            /* int16 lanes 2r, 2r+1: row r's scale of group 2s + k */
            __m512i sc16[2];
            for (int k = 0; k < 2; k++) {
                const int g = 2 * s + k;
                __m128i sc8 = _mm_loadl_epi64((const __m128i *)(b0[ib].sc + 8 * g));
                if (NG == 2)
                    sc8 = _mm_unpacklo_epi64(sc8, _mm_loadl_epi64((const __m128i *)(b1[ib].sc + 8 * g)));
                const __m512i v = _mm512_cvtepi8_epi32(sc8);
                sc16[k] = _mm512_or_si512(_mm512_and_si512(v, lo16), _mm512_slli_epi32(v, 16));
            }
            __m512i c[8];
            for (int h = 0; h < 2; h++) {
                const __m512i hb = load_pair256(qh0 + 32 * h, qh1 + 32 * h, NG);
                const __m512i hbits[4] = {
                    _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30),
                    _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30),
                    _mm512_and_si512(hb, m30),
                    _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30)};
                for (int mm = 0; mm < 2; mm++) {
                    const int m = 2 * h + mm;
                    const __m512i q = load_pair256(ql0 + 32 * m, ql1 + 32 * m, NG);
                    c[2 * m] = _mm512_or_si512(_mm512_and_si512(q, m4), hbits[2 * mm]);
                    c[2 * m + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                                   hbits[2 * mm + 1]);
                }
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                for (int p = 0; p < 4; p++) {
                    const __m512i s16 = _mm512_add_epi16(
                        _mm512_maddubs_epi16(c[2 * p], bcast4_512(xq + 8 * p)),
                        _mm512_maddubs_epi16(c[2 * p + 1], bcast4_512(xq + 8 * p + 4)));
                    isum[t] = _mm512_dpwssd_epi32(isum[t], s16, sc16[p / 2]);
                }
            }
        }
        /* scales in pairs: int16 lanes 2r, 2r+1 = groups 2p, 2p+1 of row r */
        __m512i scp[8];
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_unpacklo_epi8(
                _mm_loadl_epi64((const __m128i *)(b0[ib].sc + 16 * p)),
                _mm_loadl_epi64((const __m128i *)(b0[ib].sc + 16 * p + 8)));
            __m256i ab = _mm256_zextsi128_si256(a);
            if (NG == 2)
                ab = _mm256_inserti128_si256(
                    ab,
                    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(b1[ib].sc + 16 * p)),
                                      _mm_loadl_epi64((const __m128i *)(b1[ib].sc + 16 * p + 8))),
                    1);
            scp[p] = _mm512_cvtepi8_epi16(ab);
        }
        const __m512 dw = load_scales(b0[ib].d, b1[ib].d, NG);
        for (int t = 0; t < NT; t++) {
            __m512i off = _mm512_setzero_si512();
            for (int p = 0; p < 8; p++)
                off = _mm512_dpwssd_epi32(off, scp[p], bcast4_512(xb[t]->bsums + 2 * p));
            const __m512i is = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 5));
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xb[t]->d));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* Q6_K, one group and one token (decode), on 256-bit vectors with the
 * AVX-512VL forms of VPDPBUSD and VPTERNLOG: a 512-bit vector would hold
 * one group in its low half only. The code vectors are rebuilt as in the
 * AVX2 kernel, the or with the high bits folded into a ternary op; each
 * scale group's dot product is summed by VPDPBUSD in int32 (at most
 * 16 * 63 * 128 = 129024 per row, no int16 step) and multiplied by its
 * scale in int32. isum and the offset are the AVX2 kernel's integers
 * (exact, |isum| < 2^28: pack_q6_k.c), the float step the same: the same
 * bits. */
X8_AVX512_INLINE void q6_k_one256(int64_t n, const void *w, const void *x, float *y)
{
    const block_q6_kx8 *wb = w;
    const block_q8_k *xb = x;
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q6_kx8 *b = &wb[ib];
        __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const uint8_t *ql = b->sb[s].ql, *qh = b->sb[s].qh;
            _mm_prefetch((const char *)ql + Q6_KX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)ql + Q6_KX8_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)qh + Q6_KX8_PREFETCH, _MM_HINT_T0);
            /* c[j]: code vector j, (low 4 bits & 0x0f) | high 2 bits at 4, 5
             * (ternary op 0xea: (a & b) | c) */
            __m256i c[8];
            for (int h = 0; h < 2; h++) {
                const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
                const __m256i hbits[4] = {
                    _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30),
                    _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30),
                    _mm256_and_si256(hb, m30),
                    _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)};
                for (int mm = 0; mm < 2; mm++) {
                    const int m = 2 * h + mm;
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(ql + 32 * m));
                    c[2 * m] = _mm256_ternarylogic_epi32(q, m4, hbits[2 * mm], 0xea);
                    c[2 * m + 1] =
                        _mm256_ternarylogic_epi32(_mm256_srli_epi16(q, 4), m4, hbits[2 * mm + 1], 0xea);
                }
            }
            const int8_t *xq = xb[ib].qs + 32 * s;
            /* groups 2s (c[0..3]) and 2s + 1 (c[4..7]), two chains each */
            __m256i p[2];
            for (int k = 0; k < 2; k++) {
                __m256i a = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c[4 * k],
                                                tensor_bcast4(xq + 16 * k));
                __m256i bb = _mm256_dpbusd_epi32(_mm256_setzero_si256(), c[4 * k + 1],
                                                 tensor_bcast4(xq + 16 * k + 4));
                a = _mm256_dpbusd_epi32(a, c[4 * k + 2], tensor_bcast4(xq + 16 * k + 8));
                bb = _mm256_dpbusd_epi32(bb, c[4 * k + 3], tensor_bcast4(xq + 16 * k + 12));
                const __m256i sc = _mm256_cvtepi8_epi32(
                    _mm_loadl_epi64((const __m128i *)(b->sc + 8 * (2 * s + k))));
                p[k] = _mm256_mullo_epi32(_mm256_add_epi32(a, bb), sc);
            }
            isum0 = _mm256_add_epi32(isum0, p[0]);
            isum1 = _mm256_add_epi32(isum1, p[1]);
        }
        /* the offset of 32: scales in pairs (int16 lanes 2r, 2r+1 = groups
         * 2p, 2p+1 of row r) by the bsums in pairs, as the AVX2 kernel */
        __m256i off = _mm256_setzero_si256();
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(b->sc + 16 * p));
            const __m128i bb = _mm_loadl_epi64((const __m128i *)(b->sc + 16 * p + 8));
            const __m256i scp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, bb));
            off = _mm256_add_epi32(off, _mm256_madd_epi16(scp, tensor_bcast4(xb[ib].bsums + 2 * p)));
        }
        const __m256i is =
            _mm256_sub_epi32(_mm256_add_epi32(isum0, isum1), _mm256_slli_epi32(off, 5));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xb[ib].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), dd, acc);
    }
    _mm256_storeu_ps(y, acc);
}

/* ------------------------------------------------------------ activations */

/* The Q4_0 / Q8_0 activation row (pack_internal.h) with the bytes of the
 * scalar quantizer (quantize.c's Q8_0 rule, then mult * the sum of the
 * codes), 32 floats per block in two vectors:
 *   amax: max of |x| from 0, NaN lanes dropped (VMAXPS returns its second
 *     operand when the first is NaN, as the scalar `a > amax` skips NaN);
 *     a maximum does not depend on the order it is taken in;
 *   the f16 scale and its inverse by the same scalar code;
 *   codes: x * (1 / d) clamped to [-127, 127], NaN to -127 (the same
 *     operand rule; the scalar returns lo where !(v > lo)), then rounded
 *     to nearest even, as the scalar rounding does. */
X8_AVX512_INLINE void quantize_act_sums(const float *x, void *dst, int64_t n, int32_t mult)
{
    block_q8_0 *b = dst;
    int32_t *sums = (int32_t *)((char *)dst + tensor_x8_sums_offset(n));
    float *scales = (float *)((char *)dst + tensor_x8_scales_offset(n));
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, x += TENSOR_QK) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(v1), m);
        const float amax = _mm512_reduce_max_ps(m);
        const uint16_t dh = tensor_q8_scale_f16(amax);
        const float d = tensor_f16_to_f32(dh);
        const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
        const __m512i q0 = _mm512_cvt_roundps_epi32(
            _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, id), lo), hi),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i q1 = _mm512_cvt_roundps_epi32(
            _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, id), lo), hi),
            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        b[ib].d = dh;
        _mm_storeu_si128((__m128i *)b[ib].qs, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b[ib].qs + 16), _mm512_cvtepi32_epi8(q1));
        sums[ib] = mult * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        scales[ib] = d;
    }
}

X8_AVX512_TARGET void tensor_x8_q4_0_quantize_act_avx512(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -8);
}

X8_AVX512_TARGET void tensor_x8_q5_0_quantize_act_avx512(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -16);
}

X8_AVX512_TARGET void tensor_x8_q8_0_quantize_act_avx512(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -128);
}

/* ------------------------------------------------------------ entry points */

X8_AVX512_SET(q4_0);
X8_AVX512_SET(q8_0);
X8_AVX512_SET_AVX2_DECODE(q4_k);
X8_AVX512_SET_(q6_k, q6_k_one256(n, w, x, y));

_Static_assert(X8_AVX512_MAX_T <= TENSOR_X8_MAX_T, "the driver's token limit covers AVX-512's");

#endif /* __x86_64__ */
