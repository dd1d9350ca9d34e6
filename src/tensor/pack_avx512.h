/* Helpers shared by the AVX-512 x8 kernels (pack_avx512.c and the
 * AVX-512 parts of pack_<type>.c): a 512-bit vector holds two groups, the
 * low 256 bits group g, the high 256 bits group g + 1 (pack_avx512.c says
 * why). Internal to src/tensor/. Include after <immintrin.h> on x86-64. */
#ifndef STRATA_TENSOR_PACK_AVX512_H
#define STRATA_TENSOR_PACK_AVX512_H

#if defined(__x86_64__)

#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/vecdot_x86.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define X8_AVX512_ATTRS target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define X8_AVX512_TARGET __attribute__((X8_AVX512_ATTRS))
#define X8_AVX512_INLINE static inline __attribute__((always_inline, X8_AVX512_ATTRS))

#define X8_AVX512_MAX_T TENSOR_X8_AVX512_MAX_T

/* 32 bytes at a (group g) in the low half, 32 at b (group g + 1) in the
 * high half; NG == 1: the high half zero. */
X8_AVX512_INLINE __m512i load_pair256(const void *a, const void *b, const int NG)
{
    const __m512i lo = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a));
    if (NG == 1) return lo;
    return _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The 8 f16 scales at a and the 8 at b as 16 floats (lane r = row r). */
X8_AVX512_INLINE __m512 load_scales(const uint16_t *a, const uint16_t *b, const int NG)
{
    __m256i h = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)a));
    if (NG == 2) h = _mm256_inserti128_si256(h, _mm_loadu_si128((const __m128i *)b), 1);
    return _mm512_cvtph_ps(h);
}

/* 4 bytes at p in every int32 lane. */
X8_AVX512_INLINE __m512i bcast4_512(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Asks for every cache line of `bytes` at p + ahead. */
X8_AVX512_INLINE void prefetch_lines(const void *p, size_t bytes, size_t ahead)
{
    for (size_t off = 0; off < bytes; off += 64)
        _mm_prefetch((const char *)p + ahead + off, _MM_HINT_T0);
}

/* tensor_x8_codes_avx2 for a pair of groups (qs0, qh0 in the low half,
 * qs1, qh1 in the high; NG == 1: the low half alone); qh0 NULL: 4-bit
 * codes. The fifth bit goes in by one ternary op, (A & m4) | C. */
X8_AVX512_INLINE void x8_codes_512(const uint8_t *qs0, const uint8_t *qs1, const uint8_t *qh0,
                                   const uint8_t *qh1, const int NG, __m512i c[8])
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m10 = _mm512_set1_epi8(0x10);
    const __m512i hb = qh0 != NULL ? load_pair256(qh0, qh1, NG) : _mm512_setzero_si512();
    for (int m = 0; m < 4; m++) {
        const __m512i q = load_pair256(qs0 + 32 * m, qs1 + 32 * m, NG);
        const __m512i qq[2] = {q, _mm512_srli_epi16(q, 4)};
        for (int k = 0; k < 2; k++) {
            const int j = 2 * m + k;
            if (qh0 == NULL) {
                c[j] = _mm512_and_si512(qq[k], m4);
                continue;
            }
            const __m512i h = _mm512_and_si512(
                j <= 4 ? _mm512_slli_epi16(hb, 4 - j) : _mm512_srli_epi16(hb, j - 4), m10);
            c[j] = _mm512_ternarylogic_epi32(qq[k], m4, h, 0xea); /* (A & B) | C */
        }
    }
}

X8_AVX512_INLINE void store_rows(float *y, __m512 v, const int NG)
{
    if (NG == 2)
        _mm512_storeu_ps(y, v);
    else
        _mm256_storeu_ps(y, _mm512_castps512_ps256(v));
}

/* A table of values plus 128 (IQ4_NL's: 1..241) in every 128-bit lane:
 * VPDPBUSD's unsigned operand. */
X8_AVX512_INLINE __m512i iq4_table_u8(const int8_t values[16])
{
    const __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)values),
                                   _mm_set1_epi8((char)0x80));
    return _mm512_broadcast_i32x4(t);
}

/* The 8 E8M0 exponents at a and the 8 at b as tensor_e8m0_half's floats
 * (lane r = row r). */
X8_AVX512_INLINE __m512 e8m0_scales(const uint8_t *a, const uint8_t *b, const int NG)
{
    __m128i e = _mm_loadl_epi64((const __m128i *)a);
    if (NG == 2) e = _mm_unpacklo_epi64(e, _mm_loadl_epi64((const __m128i *)b));
    const __m512i v = _mm512_cvtepu8_epi32(e);
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
    const __m512i s =
        _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(v, _mm512_set1_epi32(1)), tiny, normal);
    /* One group: lanes 8..15 hold no row, and their exponent 0 would make
     * them the subnormal 2^-128; every multiply of a subnormal takes a slow
     * microcode path (the one-group kernel ran at a third of its speed), so
     * they are zero instead. They are never stored. */
    return _mm512_castsi512_ps(NG == 2 ? s : _mm512_maskz_mov_epi32(0x00ff, s));
}

/* The x8 layouts whose blocks are the rows' 8 scales then the codes, with
 * Q8_0 activations: Q4_0 (f16 d, qs), Q5_0 (f16 d, qs, then qh), Q8_0 (f16
 * d, qs, signed), IQ4_NL (f16 d, qs: indices into its table) and MXFP4 (8
 * E8M0 exponents, qs: indices into its table). One tile serves the five,
 * 16 rows (two groups) x NT tokens; KIND is a constant in each
 * instantiation, so each compiles to its own code. */
enum { X8_TILE_Q4_0, X8_TILE_Q5_0, X8_TILE_Q8_0, X8_TILE_IQ4_NL, X8_TILE_MXFP4 };

_Static_assert(offsetof(block_q4_0x8, qs) == 16 && offsetof(block_q5_0x8, qs) == 16 &&
                   offsetof(block_q8_0x8, qs) == 16 && offsetof(block_q5_0x8, qh) == 16 + 128 &&
                   offsetof(block_iq4_nlx8, qs) == 16 && offsetof(block_mxfp4x8, qs) == 8,
               "x8_q8_0_tile reads the scales at 0, qs after them and Q5_0's qh after qs");

/* Code vector j holds elements 4j..4j+3 of the 16 rows' block (the 4-bit
 * layouts: c[2m] the low nibbles of qs[32m..], c[2m + 1] the high ones, as
 * x8_codes_512). The codes stay unsigned (VPDPBUSD's unsigned operand):
 * Q4_0's 0..15 and Q5_0's 0..31 as stored, Q8_0's with 128 added (xor
 * 0x80; AVX-512 has no byte sign-flip to use |w| as the AVX2 kernel does),
 * IQ4_NL's and MXFP4's table values plus 128 by a byte shuffle of the
 * indices (iq4_table_u8: 1..241, 116..140). isum starts from the
 * activation row's sum of the block's codes times -8, -16 or -128
 * (tensor_x8_sums_offset), so it ends as the signed dot product
 * sum (q - offset) * x. Bounds: |isum| <= 32 * 15 * 128 + 8 * 32 * 128 <
 * 2^17 (Q4_0), 32 * 31 * 128 + 16 * 32 * 128 < 2^18 (Q5_0), 32 * 255 * 128
 * + 128 * 32 * 128 < 2^21 (Q8_0, and the tables, whose values plus 128 are
 * at most 241). */
X8_AVX512_INLINE void x8_q8_0_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                   float *y, size_t ys, const int NG, const int NT, const int KIND)
{
    const size_t bb = KIND == X8_TILE_Q4_0     ? sizeof(block_q4_0x8)
                      : KIND == X8_TILE_Q5_0   ? sizeof(block_q5_0x8)
                      : KIND == X8_TILE_Q8_0   ? sizeof(block_q8_0x8)
                      : KIND == X8_TILE_IQ4_NL ? sizeof(block_iq4_nlx8)
                                               : sizeof(block_mxfp4x8);
    const size_t qo = KIND == X8_TILE_MXFP4 ? 8 : 16; /* the codes after the scales */
    const bool tab = KIND == X8_TILE_IQ4_NL || KIND == X8_TILE_MXFP4;
    const __m512i m4 = _mm512_set1_epi8(0x0f),
                  table = tab ? iq4_table_u8(KIND == X8_TILE_MXFP4 ? tensor_mxfp4_values
                                                                   : tensor_iq4nl_values)
                              : _mm512_setzero_si512();
    const uint8_t *w0 = w, *w1 = (const uint8_t *)w + gs;
    const int64_t nb = n / TENSOR_QK;
    const size_t sums_off = tensor_x8_sums_offset(n);
    const size_t scales_off = tensor_x8_scales_offset(n);
    __m512 acc[X8_AVX512_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *p0 = w0 + (size_t)ib * bb, *p1 = w1 + (size_t)ib * bb;
        prefetch_lines(p0, bb, TENSOR_X8_AVX512_PREFETCH_AHEAD);
        if (NG == 2) prefetch_lines(p1, bb, TENSOR_X8_AVX512_PREFETCH_AHEAD);
        const __m512 dw = KIND == X8_TILE_MXFP4
                              ? e8m0_scales(p0, p1, NG)
                              : load_scales((const uint16_t *)p0, (const uint16_t *)p1, NG);
        const uint8_t *q0 = p0 + qo, *q1 = p1 + qo;
        __m512i c[8];
        if (KIND == X8_TILE_Q8_0) {
            const __m512i bias = _mm512_set1_epi8((char)0x80);
            for (int j = 0; j < 8; j++)
                c[j] = _mm512_xor_si512(load_pair256(q0 + 32 * j, q1 + 32 * j, NG), bias);
        } else if (tab) {
            for (int m = 0; m < 4; m++) {
                const __m512i q = load_pair256(q0 + 32 * m, q1 + 32 * m, NG);
                c[2 * m] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
                c[2 * m + 1] =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            }
        } else {
            x8_codes_512(q0, q1, KIND == X8_TILE_Q5_0 ? q0 + 128 : NULL, q1 + 128, NG, c);
        }
        for (int t = 0; t < NT; t++) {
            const char *xr = (const char *)x + (size_t)t * xs;
            const block_q8_0 *xb = (const block_q8_0 *)xr + ib;
            /* two chains, so that one token's sum is not 8 latencies long
             * (one chain per token was slower on AMD Zen 4 even at 8
             * tokens) */
            __m512i s0 = bcast4_512(xr + sums_off + 4 * (size_t)ib);
            __m512i s1 = _mm512_setzero_si512();
            for (int j = 0; j < 8; j += 2) {
                s0 = _mm512_dpbusd_epi32(s0, c[j], bcast4_512(xb->qs + 4 * j));
                s1 = _mm512_dpbusd_epi32(s1, c[j + 1], bcast4_512(xb->qs + 4 * j + 4));
            }
            const __m512i isum = _mm512_add_epi32(s0, s1);
            /* the activation scale as a float from the row's scale array:
             * one broadcast load, where converting xb->d took a move, a
             * conversion and a broadcast per block and token */
            const __m512 dd =
                _mm512_mul_ps(dw, _mm512_set1_ps(tensor_x8_act_scale(xr, scales_off, ib)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* Q4_K x8 (shared by the AVX-512 and AMX kernels): the 8 rows' 6-bit
 * scales of sub-block s of each group as int32 lanes (lane r = row r). */
X8_AVX512_INLINE __m512i q4_kx8_scales(const block_q4_kx8 *b0, const block_q4_kx8 *b1, int s,
                                       const int NG)
{
    __m128i sc8 = _mm_loadl_epi64((const __m128i *)(b0->sc + 8 * s));
    if (NG == 2) sc8 = _mm_unpacklo_epi64(sc8, _mm_loadl_epi64((const __m128i *)(b1->sc + 8 * s)));
    return _mm512_cvtepu8_epi32(sc8);
}

/* The mins of a super-block widened to int16, mn16[p] the pairs of
 * sub-blocks 2p, 2p + 1 (block_q4_kx8.mn's order). */
X8_AVX512_INLINE void q4_kx8_mins(const block_q4_kx8 *b0, const block_q4_kx8 *b1,
                                  __m512i mn16[4], const int NG)
{
    for (int p = 0; p < 4; p++) {
        __m256i m8 = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(b0->mn + 16 * p)));
        if (NG == 2)
            m8 = _mm256_inserti128_si256(m8, _mm_loadu_si128((const __m128i *)(b1->mn + 16 * p)), 1);
        mn16[p] = _mm512_cvtepu8_epi16(m8);
    }
}

/* imin = sum_s mn_s * S_s for one token, S_s the sum of its activation
 * codes over sub-block s (bsums summed in pairs; |S_s| <= 4096 fits
 * int16): madd of mn16[p] with the word (S_2p, S_2p+1) gives lane r =
 * mn_2p * S_2p + mn_2p+1 * S_2p+1. */
X8_AVX512_INLINE __m512i q4_kx8_imin(const __m512i mn16[4], const int16_t *bsums)
{
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums),
                                      _mm_loadu_si128((const __m128i *)bsums + 1));
    __m512i imin = _mm512_madd_epi16(mn16[0], _mm512_set1_epi32(_mm_extract_epi32(bs, 0)));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[1], _mm512_set1_epi32(_mm_extract_epi32(bs, 1))));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[2], _mm512_set1_epi32(_mm_extract_epi32(bs, 2))));
    return _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[3], _mm512_set1_epi32(_mm_extract_epi32(bs, 3))));
}

/* One instantiation per (groups, tokens) shape: NG and NT are constants in
 * each, so the accumulator arrays live in registers. X8_AVX512_SET_(t, one1)
 * runs `one1` for one group and one token (decode). */
#define X8_AVX512_SET(t) X8_AVX512_SET_(t, t##_tile(n, w, 0, x, xs, y, ys, 1, 1))
/* One group and one token by the AVX2 kernel: a 512-bit vector then holds
 * one group in its low half and nothing in its high half, and on AMD Zen 4
 * (512-bit operations in two 256-bit halves) the 256-bit kernel of the
 * K-quant layouts consumed weights 25-40 % faster (bench_x8, in cache).
 * Same float steps, so the same bits. */
#define X8_AVX512_SET_AVX2_DECODE(t) X8_AVX512_SET_(t, tensor_x8_##t##_avx2(n, w, x, xs, y, ys, 1))
#define X8_AVX512_SET_(t, one1)                                                               \
    X8_AVX512_TARGET void tensor_x8_##t##_avx512(int64_t n, const void *w, const void *x,         \
                                            size_t xs, float *y, size_t ys, int nt)           \
    {                                                                                         \
        switch (nt) {                                                                         \
        case 1: one1; break;                                                                  \
        case 2: t##_tile(n, w, 0, x, xs, y, ys, 1, 2); break;                                 \
        case 3: t##_tile(n, w, 0, x, xs, y, ys, 1, 3); break;                                 \
        case 4: t##_tile(n, w, 0, x, xs, y, ys, 1, 4); break;                                 \
        case 5: t##_tile(n, w, 0, x, xs, y, ys, 1, 5); break;                                 \
        case 6: t##_tile(n, w, 0, x, xs, y, ys, 1, 6); break;                                 \
        case 7: t##_tile(n, w, 0, x, xs, y, ys, 1, 7); break;                                 \
        default: t##_tile(n, w, 0, x, xs, y, ys, 1, 8); break;                                \
        }                                                                                     \
    }                                                                                         \
    X8_AVX512_TARGET void tensor_x8_##t##_avx512_pair(int64_t n, const void *w, size_t gs,            \
                                             const void *x, size_t xs, float *y, size_t ys,   \
                                             int nt)                                          \
    {                                                                                         \
        switch (nt) {                                                                         \
        case 1: t##_tile(n, w, gs, x, xs, y, ys, 2, 1); break;                                \
        case 2: t##_tile(n, w, gs, x, xs, y, ys, 2, 2); break;                                \
        case 3: t##_tile(n, w, gs, x, xs, y, ys, 2, 3); break;                                \
        case 4: t##_tile(n, w, gs, x, xs, y, ys, 2, 4); break;                                \
        case 5: t##_tile(n, w, gs, x, xs, y, ys, 2, 5); break;                                \
        case 6: t##_tile(n, w, gs, x, xs, y, ys, 2, 6); break;                                \
        case 7: t##_tile(n, w, gs, x, xs, y, ys, 2, 7); break;                                \
        default: t##_tile(n, w, gs, x, xs, y, ys, 2, 8); break;                               \
        }                                                                                     \
    }

#endif /* __x86_64__ */

#endif
