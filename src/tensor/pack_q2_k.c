/* Q2_K x8: the packer, the row unpacker and the kernels at every level
 * (pack_internal.h has the layout and the float steps every kernel
 * follows).
 *
 * Q2_K is the bulk of Q2_K files: 2-bit codes, and per 16 elements a 4-bit
 * scale and a 4-bit minimum (w = d * sc * q - dmin * mn). The x8 block is
 * the file's size: the rows' d and dmin, their scale bytes (scale and
 * minimum nibbles as in the file) by sub-block, and the codes four code
 * vectors to a byte vector. A kernel takes each code vector (0..3,
 * unsigned: maddubs's and VPDPBUSD's unsigned operand) with a shift and a
 * mask; the minima meet the Q8_K activation row's sums per 16 elements
 * (bsums), as Q4_K's meet them per 32. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Code (0..3) of element i of a GGUF Q2_K block (blocks.h). */
static int q2_k_code(const block_q2_k *b, int i)
{
    return (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

/* The element of sub-block s (32 elements) that code vector j (0..7)
 * holds in byte 4r + e: 32 s + 8 (j / 2) + 4 (j % 2) + e, as in Q4_K x8. */
static int q2_kx8_elem(int s, int j, int e)
{
    return 32 * s + 8 * (j / 2) + 4 * (j % 2) + e;
}

/* Code of row r in code vector j of sub-block s, byte e. */
static int q2_kx8_code(const block_q2_kx8 *b, int s, int j, int r, int e)
{
    return (b->qs[64 * s + 32 * (j / 4) + 4 * r + e] >> (2 * (j % 4))) & 3;
}

bool tensor_x8_pack_q2_k(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q2_kx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        block_q2_kx8 *o = &out[ib];
        memset(o->qs, 0, sizeof o->qs);
        for (int r = 0; r < 8; r++) {
            const block_q2_k *b =
                (const block_q2_k *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            o->dmin[r] = b->dmin;
            for (int h = 0; h < 16; h++) o->scales[8 * h + r] = b->scales[h];
            for (int s = 0; s < 8; s++)
                for (int j = 0; j < 8; j++)
                    for (int e = 0; e < 4; e++)
                        o->qs[64 * s + 32 * (j / 4) + 4 * r + e] |=
                            (uint8_t)(q2_k_code(b, q2_kx8_elem(s, j, e)) << (2 * (j % 4)));
        }
    }
    return true; /* every code and scale byte fits */
}

void tensor_x8_row_q2_k(const void *group, int64_t n, int r, void *dst)
{
    const block_q2_kx8 *g = group;
    block_q2_k *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const block_q2_kx8 *b = &g[ib];
        block_q2_k *o = &out[ib];
        o->d = b->d[r];
        o->dmin = b->dmin[r];
        for (int h = 0; h < 16; h++) o->scales[h] = b->scales[8 * h + r];
        memset(o->qs, 0, sizeof o->qs);
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++) {
                    const int i = q2_kx8_elem(s, j, e);
                    o->qs[32 * (i / 128) + i % 32] |=
                        (uint8_t)(q2_kx8_code(b, s, j, r, e) << (2 * ((i % 128) / 32)));
                }
    }
}

/* The reference: pack_internal.h's float steps, one (row, token) pair at a
 * time, the integer sums element by element. */
void tensor_x8_q2_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    const block_q2_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    for (int t = 0; t < nt; t++) {
        const block_q8_k *xb = (const block_q8_k *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q2_kx8 *b = &wb[ib];
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0, imin = 0;
                for (int h = 0; h < 16; h++) {
                    const int s = h / 2;
                    int32_t dot = 0;
                    for (int j = 4 * (h % 2); j < 4 * (h % 2) + 4; j++)
                        for (int e = 0; e < 4; e++)
                            dot += q2_kx8_code(b, s, j, r, e) * xb[ib].qs[q2_kx8_elem(s, j, e)];
                    isum += (b->scales[8 * h + r] & 15) * dot;
                    imin += (b->scales[8 * h + r] >> 4) * xb[ib].bsums[h];
                }
                const float dx = xb[ib].d;
                acc[r] = fmaf((float)isum, tensor_f16_to_f32(b->d[r]) * dx, acc[r]);
                acc[r] = fmaf(-(float)imin, tensor_f16_to_f32(b->dmin[r]) * dx, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

#if defined(__x86_64__)

/* Two interleaved blocks ahead, as the other K-quant kernels. */
#define Q2_KX8_PREFETCH (2 * sizeof(block_q2_kx8))

/* One group x NT tokens. Int16: a maddubs lane is two products of a code
 * 0..3 and an activation in [-128, 127], at most 768 in magnitude; the 4
 * of a 16-element half sum to at most 3072, taken to int32 by the madd
 * with that half's scales (0..15). Int32: |isum| <= 256 * 15 * 3 * 128 <
 * 2^21; |imin| <= 16 * 15 * 16 * 128 < 2^19. */
TENSOR_AVX2_INLINE void q2_kx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q2_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0f);
    /* the 8 scale bytes of a half to int16 lanes 2r, 2r+1 */
    const __m256i sc_pairs = _mm256_setr_epi8(
        0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
        4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q2_kx8 *b = &wb[ib];
        const block_q8_k *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = b->qs + 64 * s;
            _mm_prefetch((const char *)qs + Q2_KX8_PREFETCH, _MM_HINT_T0);
            __m256i sc16[2];
            for (int half = 0; half < 2; half++) {
                int64_t sc8;
                memcpy(&sc8, b->scales + 8 * (2 * s + half), 8);
                sc16[half] = _mm256_and_si256(
                    _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_pairs), _mm256_set1_epi16(15));
            }
            __m256i c[8];
            for (int t2 = 0; t2 < 2; t2++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * t2));
                c[4 * t2] = _mm256_and_si256(q, m3);
                c[4 * t2 + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
                c[4 * t2 + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
                c[4 * t2 + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                isum[t] = _mm256_add_epi32(isum[t],
                                           tensor_x8_dot_halves_avx2(c, xq, sc16[0], sc16[1]));
            }
        }
        /* the minima of sub-blocks 2p and 2p + 1 as int16 pairs (r, k) */
        __m256i mn16[8];
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(b->scales + 16 * p));
            const __m128i c8 = _mm_loadl_epi64((const __m128i *)(b->scales + 16 * p + 8));
            const __m128i pr = _mm_and_si128(_mm_srli_epi16(_mm_unpacklo_epi8(a, c8), 4),
                                             _mm256_castsi256_si128(m4));
            mn16[p] = _mm256_cvtepu8_epi16(pr);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->dmin));
        for (int t = 0; t < NT; t++) {
            __m256i imin = _mm256_setzero_si256();
            for (int p = 0; p < 8; p++) {
                int32_t bs;
                memcpy(&bs, xb[t]->bsums + 2 * p, 4);
                imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn16[p], _mm256_set1_epi32(bs)));
            }
            const __m256 dx = _mm256_set1_ps(xb[t]->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q2_k_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q2_kx8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q2_kx8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q2_kx8_tile(n, w, x, xs, y, ys, 3); break;
    default: q2_kx8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

/* AVX-512 VNNI, 16 rows (two groups) x NT tokens (pack_avx512.c has the
 * frame): per 16-element half, VPDPBUSD of its 4 code vectors with the
 * broadcast activation bytes from zero, times the half's scale in int32;
 * the minima as the AVX2 kernel's on 16 lanes. */
X8_AVX512_INLINE void q2_k_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    const block_q2_kx8 *b0 = w;
    const block_q2_kx8 *b1 = (const block_q2_kx8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_QK_K;
    const __m512i m3 = _mm512_set1_epi8(3);
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
            const uint8_t *q0 = b0[ib].qs + 64 * s, *q1 = b1[ib].qs + 64 * s;
            prefetch_lines(q0, 64, Q2_KX8_PREFETCH);
            if (NG == 2) prefetch_lines(q1, 64, Q2_KX8_PREFETCH);
            __m512i sc32[2];
            for (int half = 0; half < 2; half++) {
                const int h = 2 * s + half;
                __m128i sc8 = _mm_loadl_epi64((const __m128i *)(b0[ib].scales + 8 * h));
                if (NG == 2)
                    sc8 = _mm_unpacklo_epi64(
                        sc8, _mm_loadl_epi64((const __m128i *)(b1[ib].scales + 8 * h)));
                sc32[half] = _mm512_and_si512(_mm512_cvtepu8_epi32(sc8), _mm512_set1_epi32(15));
            }
            __m512i c[8];
            for (int t2 = 0; t2 < 2; t2++) {
                const __m512i q = load_pair256(q0 + 32 * t2, q1 + 32 * t2, NG);
                c[4 * t2] = _mm512_and_si512(q, m3);
                c[4 * t2 + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 2), m3);
                c[4 * t2 + 2] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m3);
                c[4 * t2 + 3] = _mm512_and_si512(_mm512_srli_epi16(q, 6), m3);
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                for (int j = 0; j < 4; j++) {
                    p0 = _mm512_dpbusd_epi32(p0, c[j], bcast4_512(xq + 4 * j));
                    p1 = _mm512_dpbusd_epi32(p1, c[4 + j], bcast4_512(xq + 16 + 4 * j));
                }
                isum[t] = _mm512_add_epi32(isum[t],
                                           _mm512_add_epi32(_mm512_mullo_epi32(p0, sc32[0]),
                                                            _mm512_mullo_epi32(p1, sc32[1])));
            }
        }
        __m512i mn16[8];
        for (int p = 0; p < 8; p++) {
            __m128i pr = _mm_unpacklo_epi8(
                _mm_loadl_epi64((const __m128i *)(b0[ib].scales + 16 * p)),
                _mm_loadl_epi64((const __m128i *)(b0[ib].scales + 16 * p + 8)));
            __m256i m8 = _mm256_zextsi128_si256(pr);
            if (NG == 2)
                m8 = _mm256_inserti128_si256(
                    m8,
                    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(b1[ib].scales + 16 * p)),
                                      _mm_loadl_epi64((const __m128i *)(b1[ib].scales + 16 * p + 8))),
                    1);
            mn16[p] = _mm512_srli_epi16(_mm512_cvtepu8_epi16(m8), 4);
        }
        const __m512 dw = load_scales(b0[ib].d, b1[ib].d, NG);
        const __m512 dmw = load_scales(b0[ib].dmin, b1[ib].dmin, NG);
        for (int t = 0; t < NT; t++) {
            __m512i imin = _mm512_setzero_si512();
            for (int p = 0; p < 8; p++)
                imin = _mm512_add_epi32(
                    imin, _mm512_madd_epi16(mn16[p], bcast4_512(xb[t]->bsums + 2 * p)));
            const __m512 dx = _mm512_set1_ps(xb[t]->d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmw, dx), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

X8_AVX512_SET(q2_k)

#endif /* __x86_64__ */
