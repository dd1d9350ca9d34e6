/* Helpers shared by the AVX-512 x8 kernels (pack_avx512.c and the
 * AVX-512 parts of pack_<type>.c): a 512-bit vector holds two groups, the
 * low 256 bits group g, the high 256 bits group g + 1 (pack_avx512.c says
 * why). Internal to src/tensor/. Include after <immintrin.h> on x86-64. */
#ifndef STRATA_TENSOR_PACK_AVX512_H
#define STRATA_TENSOR_PACK_AVX512_H

#if defined(__x86_64__)

#include "tensor/pack_internal.h"

#include <immintrin.h>
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
