/* Q5_K x8: the packer and the kernels at every level (pack_internal.h has
 * the layout and the float steps every kernel follows).
 *
 * Q5_K is Q4_K with a fifth code bit, so the layout is Q4_K's x8 layout
 * (unpacked 6-bit scales and mins, low nibbles interleaved 4 by 4) plus
 * one byte per code-vector position holding the fifth bits of the 8 code
 * vectors of a sub-block. A kernel rebuilds each code vector (0..31,
 * unsigned: maddubs's and VPDPBUSD's unsigned operand) with one shift and
 * mask and an or; the mins come in through the Q8_K activation row's
 * bsums, as for Q4_K. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/quant_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Code q (0..31) of element i of a GGUF Q5_K block (blocks.h). */
static int q5_k_code(const block_q5_k *b, int i)
{
    const int s = i / 32, l = i % 32;
    const int lo = (b->qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
    return lo | ((b->qh[l] >> s) & 1) << 4;
}

/* The element of sub-block s that code vector j (0..7) holds in byte
 * 4r + e: 8 (j / 2) + 4 (j % 2) + e, as in Q4_K's. */
static int q5_kx8_elem(int s, int j, int e)
{
    return 32 * s + 8 * (j / 2) + 4 * (j % 2) + e;
}

bool tensor_x8_pack_q5_k(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q5_kx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        block_q5_kx8 *o = &out[ib];
        memset(o->sb, 0, sizeof o->sb);
        for (int r = 0; r < 8; r++) {
            const block_q5_k *b =
                (const block_q5_k *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            o->dmin[r] = b->dmin;
            for (int s = 0; s < 8; s++) {
                int sc, mn;
                tensor_k_scale_get(b->scales, s, &sc, &mn);
                o->sc[8 * s + r] = (uint8_t)sc;
                o->mn[16 * (s / 2) + 2 * r + s % 2] = (uint8_t)mn;
                for (int e = 0; e < 4; e++) {
                    for (int m = 0; m < 4; m++) {
                        int lo = q5_k_code(b, q5_kx8_elem(s, 2 * m, e)) & 15;
                        int hi = q5_k_code(b, q5_kx8_elem(s, 2 * m + 1, e)) & 15;
                        o->sb[s].qs[32 * m + 4 * r + e] = (uint8_t)(lo | hi << 4);
                    }
                    for (int j = 0; j < 8; j++) {
                        int q = q5_k_code(b, q5_kx8_elem(s, j, e));
                        o->sb[s].qh[4 * r + e] |= (uint8_t)((q >> 4) << j);
                    }
                }
            }
        }
    }
    return true; /* every 5-bit code and 6-bit scale fits the layout */
}

/* Code q (0..31) of row r in code vector j of sub-block s, byte e. */
static int q5_kx8_code(const block_q5_kx8 *b, int s, int j, int r, int e)
{
    const uint8_t lo = b->sb[s].qs[32 * (j / 2) + 4 * r + e];
    const int lo4 = j % 2 ? lo >> 4 : lo & 15;
    return lo4 | ((b->sb[s].qh[4 * r + e] >> j) & 1) << 4;
}

void tensor_x8_row_q5_k(const void *group, int64_t n, int r, void *dst)
{
    const block_q5_kx8 *g = group;
    block_q5_k *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const block_q5_kx8 *b = &g[ib];
        block_q5_k *o = &out[ib];
        o->d = b->d[r];
        o->dmin = b->dmin[r];
        int sc[8], mn[8];
        for (int s = 0; s < 8; s++) {
            sc[s] = b->sc[8 * s + r];
            mn[s] = b->mn[16 * (s / 2) + 2 * r + s % 2];
        }
        /* the inverse of blocks.h's 12-byte packing of the 6-bit values */
        for (int s = 0; s < 4; s++) {
            o->scales[s] = (uint8_t)(sc[s] | (sc[s + 4] >> 4) << 6);
            o->scales[s + 4] = (uint8_t)(mn[s] | (mn[s + 4] >> 4) << 6);
            o->scales[s + 8] = (uint8_t)((sc[s + 4] & 15) | (mn[s + 4] & 15) << 4);
        }
        memset(o->qs, 0, sizeof o->qs);
        memset(o->qh, 0, sizeof o->qh);
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++) {
                    const int q = q5_kx8_code(b, s, j, r, e);
                    const int l = q5_kx8_elem(s, j, e) % 32;
                    o->qs[32 * (s / 2) + l] |= (uint8_t)((q & 15) << (4 * (s % 2)));
                    o->qh[l] |= (uint8_t)((q >> 4) << s);
                }
    }
}

/* The reference: pack_internal.h's float steps, one (row, token) pair at a
 * time, with the integer sums taken element by element. */
void tensor_x8_q5_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    const block_q5_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    for (int t = 0; t < nt; t++) {
        const block_q8_k *xb = (const block_q8_k *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q5_kx8 *b = &wb[ib];
            const int8_t *xq = xb[ib].qs;
            const float dx = xb[ib].d;
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0, imin = 0;
                for (int s = 0; s < 8; s++) {
                    int32_t part = 0;
                    for (int j = 0; j < 8; j++)
                        for (int e = 0; e < 4; e++)
                            part += q5_kx8_code(b, s, j, r, e) * xq[q5_kx8_elem(s, j, e)];
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

/* Two interleaved blocks ahead, as Q4_K's (pack_q4_k.c says why). */
#define Q5_KX8_PREFETCH (2 * sizeof(block_q5_kx8))

/* One group x NT tokens, as Q4_K's AVX2 kernel with 5-bit codes.
 *
 * Int16 bound: a maddubs int16 lane is two products of a code 0..31 and an
 * activation in [-128, 127], at most 2 * 31 * 128 = 7936 in magnitude;
 * 4 of them sum to at most 31744 < 32767, 8 could not, so each sub-block
 * is two int16 sums (code vectors 0..3 and 4..7), each taken to int32 by
 * the madd with the scales. Int32: |isum| <= 8 * 63 * 32 * 31 * 128 < 2^27.
 * The mins as Q4_K's (|imin| < 2^22). */
TENSOR_AVX2_INLINE void q5_kx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q5_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    /* the 8 scale bytes of a sub-block to int16 lanes 2r, 2r+1 (Q4_K's) */
    const __m256i sc_pairs = _mm256_setr_epi8(
        0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
        4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q5_kx8 *b = &wb[ib];
        const block_q8_k *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = b->sb[s].qs;
            _mm_prefetch((const char *)qs + Q5_KX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)qs + Q5_KX8_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)b->sb[s].qh + Q5_KX8_PREFETCH, _MM_HINT_T0);
            int64_t sc8;
            memcpy(&sc8, b->sc + 8 * s, 8);
            const __m256i sc16 = _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_pairs);
            __m256i c[8];
            tensor_x8_codes_avx2(qs, b->sb[s].qh, c);
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                isum[t] = _mm256_add_epi32(isum[t], tensor_x8_dot_halves_avx2(c, xq, sc16, sc16));
            }
        }
        __m256i mn16[4];
        for (int p = 0; p < 4; p++)
            mn16[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->mn + 16 * p)));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin));
        for (int t = 0; t < NT; t++) {
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
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q5_k_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q5_kx8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q5_kx8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q5_kx8_tile(n, w, x, xs, y, ys, 3); break;
    default: q5_kx8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

/* AVX-512 VNNI, 16 rows (two groups) x NT tokens (pack_avx512.c has the
 * frame). Per sub-block, VPDPBUSD of the 8 code vectors (0..31) with the
 * broadcast activation bytes in two chains from zero; their sum p is row
 * r's dot over the sub-block, |p| <= 32 * 31 * 128 = 126976, too wide for
 * Q4_K's int16 pair and VPDPWSSD, so it is multiplied by the scale in
 * int32: |isum| <= 8 * 63 * 126976 < 2^26. Mins as Q4_K's. */
X8_AVX512_INLINE void q5_k_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    const block_q5_kx8 *b0 = w;
    const block_q5_kx8 *b1 = (const block_q5_kx8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_QK_K;
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
            const uint8_t *q0 = b0[ib].sb[s].qs, *q1 = b1[ib].sb[s].qs;
            const uint8_t *h0 = b0[ib].sb[s].qh, *h1 = b1[ib].sb[s].qh;
            prefetch_lines(q0, 128, Q5_KX8_PREFETCH);
            prefetch_lines(h0, 32, Q5_KX8_PREFETCH);
            if (NG == 2) {
                prefetch_lines(q1, 128, Q5_KX8_PREFETCH);
                prefetch_lines(h1, 32, Q5_KX8_PREFETCH);
            }
            __m128i sc8 = _mm_loadl_epi64((const __m128i *)(b0[ib].sc + 8 * s));
            if (NG == 2)
                sc8 = _mm_unpacklo_epi64(sc8, _mm_loadl_epi64((const __m128i *)(b1[ib].sc + 8 * s)));
            const __m512i sc32 = _mm512_cvtepu8_epi32(sc8);
            __m512i c[8];
            x8_codes_512(q0, q1, h0, h1, NG, c);
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                for (int j = 0; j < 8; j += 2) {
                    p0 = _mm512_dpbusd_epi32(p0, c[j], bcast4_512(xq + 4 * j));
                    p1 = _mm512_dpbusd_epi32(p1, c[j + 1], bcast4_512(xq + 4 * j + 4));
                }
                isum[t] = _mm512_add_epi32(
                    isum[t], _mm512_mullo_epi32(_mm512_add_epi32(p0, p1), sc32));
            }
        }
        __m512i mn16[4];
        for (int p = 0; p < 4; p++) {
            __m256i m8 = _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(b0[ib].mn + 16 * p)));
            if (NG == 2)
                m8 = _mm256_inserti128_si256(m8, _mm_loadu_si128((const __m128i *)(b1[ib].mn + 16 * p)), 1);
            mn16[p] = _mm512_cvtepu8_epi16(m8);
        }
        const __m512 dw = load_scales(b0[ib].d, b1[ib].d, NG);
        const __m512 dmw = load_scales(b0[ib].dmin, b1[ib].dmin, NG);
        for (int t = 0; t < NT; t++) {
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb[t]->bsums),
                                              _mm_loadu_si128((const __m128i *)xb[t]->bsums + 1));
            __m512i imin = _mm512_madd_epi16(mn16[0], _mm512_set1_epi32(_mm_extract_epi32(bs, 0)));
            imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[1], _mm512_set1_epi32(_mm_extract_epi32(bs, 1))));
            imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[2], _mm512_set1_epi32(_mm_extract_epi32(bs, 2))));
            imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mn16[3], _mm512_set1_epi32(_mm_extract_epi32(bs, 3))));
            const __m512 dx = _mm512_set1_ps(xb[t]->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* One group and one token (decode) on 256-bit vectors with the AVX-512VL
 * forms of VPDPBUSD and VPTERNLOG (a 512-bit vector would hold one group
 * in its low half only): the AVX2 kernel's code vectors, the or with the
 * fifth bit folded into a ternary op, and q5_k_tile's int32 sums (the
 * same exact integers as the AVX2 kernel's): the same bits. */
X8_AVX512_INLINE void q5_k_one256(int64_t n, const void *w, const void *x, float *y)
{
    const block_q5_kx8 *wb = w;
    const block_q8_k *xb = x;
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q5_kx8 *b = &wb[ib];
        __m256i isum = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = b->sb[s].qs;
            _mm_prefetch((const char *)qs + Q5_KX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)qs + Q5_KX8_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)qs + Q5_KX8_PREFETCH + 128, _MM_HINT_T0);
            const __m256i hb = _mm256_loadu_si256((const __m256i *)b->sb[s].qh);
            const int8_t *xq = xb[ib].qs + 32 * s;
            /* code vector j: (low 4 bits & 0x0f) | fifth bit (ternary op
             * 0xea: (a & b) | c); two chains */
            __m256i a = _mm256_setzero_si256(), bb = _mm256_setzero_si256();
            for (int m = 0; m < 4; m++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * m));
                const int j0 = 2 * m, j1 = 2 * m + 1;
                const __m256i h0 = j0 <= 4 ? _mm256_slli_epi16(hb, 4 - j0)
                                           : _mm256_srli_epi16(hb, j0 - 4);
                const __m256i h1 = j1 <= 4 ? _mm256_slli_epi16(hb, 4 - j1)
                                           : _mm256_srli_epi16(hb, j1 - 4);
                const __m256i c0 = _mm256_ternarylogic_epi32(q, m4, _mm256_and_si256(h0, m10), 0xea);
                const __m256i c1 = _mm256_ternarylogic_epi32(_mm256_srli_epi16(q, 4), m4,
                                                             _mm256_and_si256(h1, m10), 0xea);
                a = _mm256_dpbusd_epi32(a, c0, tensor_bcast4(xq + 4 * j0));
                bb = _mm256_dpbusd_epi32(bb, c1, tensor_bcast4(xq + 4 * j1));
            }
            const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->sc + 8 * s)));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(_mm256_add_epi32(a, bb), sc));
        }
        const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb[ib].bsums),
                                          _mm_loadu_si128((const __m128i *)xb[ib].bsums + 1));
        const __m256i bs2 = _mm256_broadcastsi128_si256(bs);
        const __m256i pair[4] = {
            _mm256_shuffle_epi32(bs2, 0x00), _mm256_shuffle_epi32(bs2, 0x55),
            _mm256_shuffle_epi32(bs2, 0xaa), _mm256_shuffle_epi32(bs2, 0xff)};
        __m256i imin = _mm256_madd_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->mn)), pair[0]);
        for (int p = 1; p < 4; p++)
            imin = _mm256_add_epi32(
                imin, _mm256_madd_epi16(
                          _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->mn + 16 * p))),
                          pair[p]));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin));
        const __m256 dx = _mm256_set1_ps(xb[ib].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, dx), acc);
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmw, dx), acc);
    }
    _mm256_storeu_ps(y, acc);
}

X8_AVX512_SET_(q5_k, q5_k_one256(n, w, x, y))

#endif /* __x86_64__ */
