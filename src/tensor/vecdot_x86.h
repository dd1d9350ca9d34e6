/* Helpers shared by the x86 dot-product kernels (vecdot_avx2*.c,
 * vecdot_avx512.c): the AVX2 target attribute, the one horizontal sum every
 * kernel ends with, and bit/nibble unpacking. Internal to src/tensor/.
 *
 * Everything here is always_inline and compiled for avx2+fma+f16c, so it
 * inlines into functions compiled for that target or for a superset
 * (the AVX-512 ones); nothing here runs unless strata_cpu_level() allowed
 * it. */
#ifndef STRATA_TENSOR_VECDOT_X86_H
#define STRATA_TENSOR_VECDOT_X86_H

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TENSOR_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define TENSOR_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Most rows and tokens a tile template takes (sizes its accumulator
 * arrays; the instantiations use constant shapes within these). */
#define TENSOR_TILE_MAX_R 4
#define TENSOR_TILE_MAX_T 4

/* The horizontal sum of the 8 lanes, in one fixed order: (lo128 + hi128),
 * then lanes {0,1} + {2,3}, then lane 0 + lane 1. Every kernel of a set
 * ends each pair with this, so tiles and 1x1 agree bit for bit. */
TENSOR_AVX2_INLINE float tensor_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* f16 bits -> float, exact (F16C). */
TENSOR_AVX2_INLINE float tensor_h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* 16 bytes of nibbles -> 32 bytes 0..15 in element order of the legacy
 * layout: lanes 0..15 hold the low nibbles (elements 0..15), lanes 16..31
 * the high nibbles (elements 16..31). */
TENSOR_AVX2_INLINE __m256i tensor_nibbles32(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* The 32 bits of a little-endian word as 32 bytes: byte i is 0xff where
 * bit i is set, else 0. Each byte first receives the source byte that
 * holds its bit (byte i <- byte i/8), then all bits but its own are forced
 * to 1, so the byte is all-ones exactly when its bit was set. */
TENSOR_AVX2_INLINE __m256i tensor_bits32_to_bytes(const uint8_t *p)
{
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                             0x0101010101010101, 0x0000000000000000);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    const __m256i others = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL);
    v = _mm256_or_si256(v, others);
    return _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1));
}

/* Sum of 4 adjacent u8 x s8 products per int32 lane: lane k holds
 * sum_{j<4} u[4k+j] * s[4k+j]. The intermediate int16 pair sums must not
 * saturate: callers keep |u| * |s| * 2 <= 32767 (documented per kernel). */
TENSOR_AVX2_INLINE __m256i tensor_dot4_u8s8(__m256i u, __m256i s)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Decode (NT == 1) streams rows of a few hundred bytes to a few KB: too
 * short for the hardware prefetcher to ramp up on each. A decode tile
 * therefore asks for the same block of the rows one tile further on
 * (ahead = NR * ws bytes: the thread's rows are contiguous) while it
 * works on this one. Prefetching past the end of the matrix is harmless
 * (a prefetch never faults). */
TENSOR_AVX2_INLINE void tensor_prefetch(const void *p, size_t ahead)
{
    _mm_prefetch((const char *)p + ahead, _MM_HINT_T0);
}

/* The 4 bytes at p in every int32 lane: the x8 kernels (pack_*.c) multiply
 * 4 activation bytes with the same 4 elements of 8 interleaved rows. */
TENSOR_AVX2_INLINE __m256i tensor_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The 8 code vectors of an x8 block in Q4_0 x8's order from its 128
 * nibble bytes qs (c[2m]: low nibbles of qs[32m..], c[2m + 1]: high) and,
 * where qh is not NULL, its 32 bytes of fifth bits (bit j of each byte:
 * code vector j's), as Q5_0, Q5_1 and a Q5_K sub-block hold them. A
 * 16-bit shift by at most 4 brings no bit of the neighbouring byte to bit
 * 4, so one shift and mask place a fifth bit. */
TENSOR_AVX2_INLINE void tensor_x8_codes_avx2(const uint8_t *qs, const uint8_t *qh, __m256i c[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    const __m256i hb = qh != NULL ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int m = 0; m < 4; m++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * m));
        c[2 * m] = _mm256_and_si256(q, m4);
        c[2 * m + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh == NULL) continue;
        for (int k = 0; k < 2; k++) {
            const int j = 2 * m + k;
            const __m256i h = j <= 4 ? _mm256_slli_epi16(hb, 4 - j) : _mm256_srli_epi16(hb, j - 4);
            c[j] = _mm256_or_si256(c[j], _mm256_and_si256(h, m10));
        }
    }
}

/* The dot products of 8 code vectors (unsigned, at most 31) with the 32
 * activation bytes at xq, rows as int32 lanes: code vectors 0..3 (the
 * first 16 elements) and 4..7 each summed in int16 (4 maddubs lanes of
 * codes <= 31 and |x| <= 128 stay within 31744) and taken to int32 by a
 * madd with w0 and w1, the int16 pairs of their scales (ones for none). */
TENSOR_AVX2_INLINE __m256i tensor_x8_dot_halves_avx2(const __m256i c[8], const int8_t *xq,
                                                     __m256i w0, __m256i w1)
{
    __m256i r = _mm256_setzero_si256();
    for (int half = 0; half < 2; half++) {
        const int j = 4 * half;
        __m256i s16 = _mm256_maddubs_epi16(c[j], tensor_bcast4(xq + 4 * j));
        for (int k = 1; k < 4; k++)
            s16 = _mm256_add_epi16(s16,
                                   _mm256_maddubs_epi16(c[j + k], tensor_bcast4(xq + 4 * (j + k))));
        r = _mm256_add_epi32(r, _mm256_madd_epi16(s16, half == 0 ? w0 : w1));
    }
    return r;
}

/* How far ahead, in bytes, the Q4_0 and Q8_0 x8 kernels prefetch in their
 * group stream: every cache line of the block this far ahead is asked for
 * (one prefetch per block would leave most lines of these 144- and
 * 272-byte blocks to the hardware prefetcher, which lags). 1 KB measured
 * best on Zen 3 among 1, 2, 4, 8 and 16 KB. */
#define TENSOR_X8_PREFETCH_AHEAD 1024

/* The same for the AVX-512 kernels of those layouts (Q4_0, Q8_0, IQ4_NL,
 * MXFP4, F16/BF16 one-group decode): on AMD Zen 5, llama-1b decode with
 * 2 threads ran 5-10 % (Q8_0) and 10-20 % (Q4_0) faster at 4 KB than at
 * 1 KB, in three interleaved rounds; 8 KB was as fast as 4, 2 KB between. */
#define TENSOR_X8_AVX512_PREFETCH_AHEAD 4096

/* Byte-shuffle control that fills every int16 lane with int16 lane s of
 * the source 128-bit lane (bytes 2s, 2s+1). */
TENSOR_AVX2_INLINE __m256i tensor_sel16(int s)
{
    return _mm256_set1_epi16((short)(0x0100 + 0x0202 * s));
}

/* For the AVX2 kernel files: tile bounds, block addressing, and the
 * instantiation of a type's kernel set from its tile template. */
#define MR TENSOR_TILE_MAX_R
#define MT TENSOR_TILE_MAX_T

/* Pointer to block ib of row r (rows ws bytes apart). */
#define ROW_BLOCK(type, base, r, stride, ib) \
    ((const type *)((const char *)(base) + (size_t)(r) * (stride)) + (ib))

/* Instantiates the three shapes of template fn_tile and the kernel set
 * tensor_mmk_<t>_avx2. */
#define AVX2_SET(t, TR, TT)                                                                   \
    static TENSOR_AVX2_TARGET float vd_##t(int64_t n, const void *w, const void *x)          \
    {                                                                                         \
        float y;                                                                              \
        t##_tile(n, w, 0, x, 0, &y, 0, 1, 1);                                                 \
        return y;                                                                             \
    }                                                                                         \
    static TENSOR_AVX2_TARGET void rows_##t(int64_t n, const void *w, size_t ws,              \
                                            const void *x, size_t xs, float *y, size_t ys)    \
    {                                                                                         \
        t##_tile(n, w, ws, x, xs, y, ys, 4, 1);                                               \
    }                                                                                         \
    static TENSOR_AVX2_TARGET void tile_##t(int64_t n, const void *w, size_t ws,              \
                                            const void *x, size_t xs, float *y, size_t ys)    \
    {                                                                                         \
        t##_tile(n, w, ws, x, xs, y, ys, TR, TT);                                             \
    }                                                                                         \
    const tensor_mm_kernels tensor_mmk_##t##_avx2 = {                                         \
        .name = #t "/avx2", .vec_dot = vd_##t, .tile_rows = rows_##t, .tile = tile_##t,      \
        .rows_r = 4, .tile_r = TR, .tile_t = TT}

#endif /* __x86_64__ */
#endif
