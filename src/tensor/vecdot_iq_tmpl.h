/* The tile template of the IQ types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S, IQ1_M) x Q8_K activations, shared by the AVX2 kernels
 * (vecdot_iq2_avx2.c) and their AVX-512 VNNI variants (vecdot_avx512.c).
 * Internal to src/tensor/; each includer defines first TMPL_INLINE and
 * TMPL_DOT_SCALED_ADD as for vecdot_x86_tmpl.h (maddubs + madd on AVX2),
 * and the AVX-512 includer IQ_TMPL_ZMM, which selects the 512-bit kernels
 * at the end of this file (they give the scalar kernels' bits, AVX2 its
 * own).
 *
 * Per row and super-block the codes are decoded once into 8 vectors of 32
 * signed bytes (one per 32-element part): the codebook entries of the
 * part's groups are gathered by index into the 64-bit (or, for IQ3, 32-bit)
 * lanes, and the part's 32 sign bits become a byte mask that negates the
 * magnitudes (IQ1: 8 v + delta). Then, per token, maddubs(|x|, q * sign(x))
 * forms pair sums (|q| <= 62, so pairs <= 2 * 128 * 62), the scaled add
 * weights the two 16-element halves of the part by their sub-block scales
 * (low and high 128 bits) into an int32 vector that accumulates the
 * super-block exactly. */
#ifndef STRATA_TENSOR_VECDOT_IQ_TMPL_H
#define STRATA_TENSOR_VECDOT_IQ_TMPL_H

#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/vecdot_x86.h"

#include <string.h>

#if defined(__x86_64__)

/* The largest tile shapes iq_tile takes. */
#define IQ_MR 4
#define IQ_MT 8

#ifndef ROW_BLOCK
#define ROW_BLOCK(type, base, r, stride, ib) \
    ((const type *)((const char *)(base) + (size_t)(r) * (stride)) + (ib))
#endif

/* 32 sign bits (bit i: element i negative) -> bytes +1 / -1. */
TMPL_INLINE __m256i iq_signs_pm1(uint32_t bits)
{
    uint8_t b[4];
    memcpy(b, &bits, 4);
    __m256i neg = tensor_bits32_to_bytes(b);
    return _mm256_or_si256(neg, _mm256_set1_epi8(1));
}

/* Negates the bytes of m where mask is 0xff (two's complement: (m ^ -1) + 1). */
TMPL_INLINE __m256i iq_negate_where(__m256i m, __m256i mask)
{
    return _mm256_sub_epi8(_mm256_xor_si256(m, mask), mask);
}

/* The sign masks of 4 groups from 4 seven-bit fields of a, 7 bits apart. */
TMPL_INLINE __m256i iq_ksigns_mask4(uint32_t a)
{
    const uint64_t *m = tensor_iq_ksigns_mask;
    return _mm256_set_epi64x((long long)m[(a >> 21) & 127], (long long)m[(a >> 14) & 127],
                             (long long)m[(a >> 7) & 127], (long long)m[a & 127]);
}

TMPL_INLINE __m256i iq_grid64x4(const uint64_t *grid, int i0, int i1, int i2, int i3)
{
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1],
                             (long long)grid[i0]);
}

TMPL_INLINE uint32_t iq_load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 32 signed codes of part g of a block of `type` (blocks_iq.h). */
TMPL_INLINE __m256i iq_part(const uint32_t type, const void *blk, int g)
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = blk;
        uint32_t a0 = b->qs[4 * g] | (uint32_t)b->qs[4 * g + 1] << 16;
        uint32_t a1 = b->qs[4 * g + 2] | (uint32_t)b->qs[4 * g + 3] << 16;
        __m256i m = iq_grid64x4(tensor_iq2xxs_grid, a0 & 255, (a0 >> 8) & 255, (a0 >> 16) & 255, a0 >> 24);
        return iq_negate_where(m, iq_ksigns_mask4(a1));
    }
    case STRATA_TYPE_IQ2_XS: {
        const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * g;
        __m256i m = iq_grid64x4(tensor_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        const uint64_t *sm = tensor_iq_ksigns_mask;
        return iq_negate_where(m, _mm256_set_epi64x((long long)sm[q[3] >> 9], (long long)sm[q[2] >> 9],
                                                 (long long)sm[q[1] >> 9], (long long)sm[q[0] >> 9]));
    }
    case STRATA_TYPE_IQ2_S: {
        const block_iq2_s *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const int h = b->qh[g];
        __m256i m = iq_grid64x4(tensor_iq2s_grid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300),
                             q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300));
        return _mm256_sign_epi8(m, iq_signs_pm1(iq_load_u32(b->qs + 32 + 4 * g)));
    }
    case STRATA_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = blk;
        uint64_t q8;
        memcpy(&q8, b->qs + 8 * g, 8);
        const __m256i m = _mm256_i32gather_epi32((const int *)tensor_iq3xxs_grid,
                                                 _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)q8)), 4);
        return iq_negate_where(m, iq_ksigns_mask4(iq_load_u32(b->qs + 64 + 4 * g)));
    }
    case STRATA_TYPE_IQ3_S: {
        /* index k = q[k] + 256 * (bit k of h), gathered from the 512 entries */
        const block_iq3_s *b = blk;
        uint64_t q8;
        memcpy(&q8, b->qs + 8 * g, 8);
        const __m256i lo = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)q8));
        const __m256i hi = _mm256_and_si256(
            _mm256_sllv_epi32(_mm256_set1_epi32(b->qh[g]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
            _mm256_set1_epi32(256));
        const __m256i m = _mm256_i32gather_epi32((const int *)tensor_iq3s_grid, _mm256_or_si256(lo, hi), 4);
        return _mm256_sign_epi8(m, iq_signs_pm1(iq_load_u32(b->signs + 4 * g)));
    }
    case STRATA_TYPE_IQ1_S: {
        const block_iq1_s *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const unsigned h = b->qh[g];
        __m256i v = iq_grid64x4(tensor_iq1s_grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8,
                             q[2] | ((h >> 6) & 7) << 8, q[3] | ((h >> 9) & 7) << 8);
        __m256i v8 = _mm256_sign_epi8(_mm256_set1_epi8(8), v);
        return _mm256_add_epi8(v8, _mm256_set1_epi8((h & 0x8000) ? -1 : 1));
    }
    default: { /* IQ1_M */
        const block_iq1_m *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const unsigned h0 = b->qh[2 * g], h1 = b->qh[2 * g + 1];
        __m256i v = iq_grid64x4(tensor_iq1s_grid, q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 4) & 0x700),
                             q[2] | ((h1 << 8) & 0x700), q[3] | ((h1 << 4) & 0x700));
        __m256i v8 = _mm256_sign_epi8(_mm256_set1_epi8(8), v);
        __m256i delta = _mm256_set_epi64x((long long)(h1 & 0x80 ? -1LL : 0x0101010101010101LL),
                                          (long long)(h1 & 0x08 ? -1LL : 0x0101010101010101LL),
                                          (long long)(h0 & 0x80 ? -1LL : 0x0101010101010101LL),
                                          (long long)(h0 & 0x08 ? -1LL : 0x0101010101010101LL));
        return _mm256_add_epi8(v8, delta);
    }
    }
}

/* d and the 16 sub-block scales of a block of `type`. */
TMPL_INLINE float iq_scales(const uint32_t type, const void *blk, int16_t ls[16])
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = blk;
        for (int g = 0; g < 8; g++)
            ls[2 * g] = ls[2 * g + 1] = (int16_t)(2 * (b->qs[4 * g + 3] >> 12) + 1);
        return tensor_h2f(b->d);
    }
    case STRATA_TYPE_IQ2_XS:
    case STRATA_TYPE_IQ2_S: {
        const uint8_t *sc = type == STRATA_TYPE_IQ2_XS ? ((const block_iq2_xs *)blk)->scales
                                                       : ((const block_iq2_s *)blk)->scales;
        for (int g = 0; g < 8; g++) {
            ls[2 * g] = (int16_t)(2 * (sc[g] & 15) + 1);
            ls[2 * g + 1] = (int16_t)(2 * (sc[g] >> 4) + 1);
        }
        uint16_t d;
        memcpy(&d, blk, 2); /* d is the first field of both */
        return tensor_h2f(d);
    }
    case STRATA_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = blk;
        for (int g = 0; g < 8; g++)
            ls[2 * g] = ls[2 * g + 1] = (int16_t)(2 * (b->qs[64 + 4 * g + 3] >> 4) + 1);
        return tensor_h2f(b->d);
    }
    case STRATA_TYPE_IQ3_S: {
        const block_iq3_s *b = blk;
        for (int g = 0; g < 8; g++)
            ls[2 * g] = ls[2 * g + 1] = (int16_t)(2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1);
        return tensor_h2f(b->d);
    }
    case STRATA_TYPE_IQ1_S: {
        const block_iq1_s *b = blk;
        for (int g = 0; g < 8; g++)
            ls[2 * g] = ls[2 * g + 1] = (int16_t)(2 * ((b->qh[g] >> 12) & 7) + 1);
        return tensor_h2f(b->d);
    }
    default: { /* IQ1_M */
        const block_iq1_m *b = blk;
        uint16_t s[4];
        memcpy(s, b->scales, 8);
        for (int g = 0; g < 8; g++)
            for (int k = 0; k < 2; k++)
                ls[2 * g + k] = (int16_t)(2 * ((s[g / 2] >> (6 * (g % 2) + 3 * k)) & 7) + 1);
        return tensor_h2f((uint16_t)((s[0] >> 12) | ((s[1] >> 8) & 0xf0) | ((s[2] >> 4) & 0xf00) |
                                     (s[3] & 0xf000)));
    }
    }
}

/* Per row (the outer loop, so that a row's per-token sums live in
 * registers whatever NR is) and super-block: the scales and the 8 code
 * vectors are decoded once and serve the NT tokens; per token an int32
 * vector accumulates the super-block exactly, then one float step:
 * acc = fma((d_w * d_x) * f, float(isum), acc). The same sequence per
 * (row, token) pair for every NR x NT, so all shapes give the same bits. */
TMPL_INLINE void iq_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                         float *y, size_t ys, const int NR, const int NT, const uint32_t TYPE,
                         const size_t BB, const float F)
{
    __m256 acc[IQ_MR][IQ_MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const block_q8_k *xb[IQ_MT];
        for (int t = 0; t < NT; t++)
            xb[t] = ROW_BLOCK(block_q8_k, x, t, xs, ib);
        for (int r = 0; r < NR; r++) {
            const char *blk = (const char *)w + (size_t)r * ws + (size_t)ib * BB;
            if (NT == 1)
                for (size_t off = 0; off < BB; off += 64)
                    tensor_prefetch(blk + off, (size_t)NR * ws);
            int16_t ls[16];
            const float dw = iq_scales(TYPE, blk, ls);
            __m256i isum[IQ_MT];
            for (int t = 0; t < NT; t++)
                isum[t] = _mm256_setzero_si256();
            for (int g = 0; g < 8; g++) {
                const __m256i q = iq_part(TYPE, blk, g);
                /* low 128 bits: sub-block 2g's scale, high: 2g + 1's */
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(ls[2 * g + 1]),
                                                    _mm_set1_epi16(ls[2 * g]));
                for (int t = 0; t < NT; t++) {
                    const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb[t]->qs + 32 * g));
                    isum[t] = TMPL_DOT_SCALED_ADD(isum[t], _mm256_abs_epi8(xv),
                                                  _mm256_sign_epi8(q, xv), sc);
                }
            }
            for (int t = 0; t < NT; t++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps((dw * xb[t]->d) * F),
                                            _mm256_cvtepi32_ps(isum[t]), acc[r][t]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

#if defined(IQ_TMPL_ZMM)
/* The AVX-512 level (IQ_TMPL_ZMM defined by the includer, with AVX-512
 * F/BW/VL/VNNI enabled) computes, per (row, token) pair and block, the
 * scalar reference's exact integer isum = sum_s ls_s * sum_{i in s} q_i x_i
 * and then the reference's float steps, sum += ((d_w * d_x) * f) *
 * (float)isum, in block order (no fma), so it gives the scalar kernels'
 * bits in every shape:
 *
 * - rows (1 or 4 rows, one token: decode): per row, 512-bit vectors hold
 *   parts 2h and 2h + 1 of the codes; the activations enter maddubs as
 *   unsigned bytes u = x + 128 (x xor 0x80) with the codes q as the signed
 *   operand (pairs <= 2 * 255 * 62 < 32768, no saturation); dpwssd with the
 *   four sub-block scales (one per 128 bits) accumulates ls * sum q u per
 *   int32 lane, the same with u = 128 gives the offset 128 * ls * sum q,
 *   and the difference summed over the 16 lanes is isum.
 * - panel (16 rows x IQ_PANEL_T tokens: prefill): the 16 rows' blocks are
 *   decoded once into a panel of 64 vectors, vector j holding codes 4j..4j+3
 *   of row r in int32 lane r, as unsigned bytes q + 64 (1..126: |q| <= 62).
 *   Per token and sub-block s, 4 dpbusd with the token's codes 4j..4j+3
 *   broadcast give lane r = sum_{i in s} (q_i + 64) x_i (<= 16 * 126 * 128),
 *   an int32 multiply by ls_s (<= 31) adds it to isum, and 64 * sum_s ls_s
 *   * S_s, with S_s the activations' sub-block sums (Q8_K's bsums), is
 *   subtracted at the end (dpwssd of the scale pairs with the bsums pairs);
 *   |isum| stays below 2^27 throughout. */
#define IQ_PANEL_R 16
#define IQ_PANEL_T 16

/* Parts 2h (low 256 bits) and 2h + 1 (high) of a block's codes. (Building
 * them with 512-bit gathers measured slower here than two iq_part calls.) */
TMPL_INLINE __m512i iq_part2(const uint32_t type, const void *blk, int h)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(iq_part(type, blk, 2 * h)),
                              iq_part(type, blk, 2 * h + 1), 1);
}

/* The four sub-block scales of parts 2h, 2h + 1 as int16, one per 128 bits. */
TMPL_INLINE __m512i iq_scales4(const int16_t ls[16], int h)
{
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(ls[4 * h + 1]), _mm_set1_epi16(ls[4 * h]))),
        _mm256_set_m128i(_mm_set1_epi16(ls[4 * h + 3]), _mm_set1_epi16(ls[4 * h + 2])), 1);
}

TMPL_INLINE void iq_rows_zmm(int64_t n, const void *w, size_t ws, const void *x, float *y,
                             const int NR, const uint32_t TYPE, const size_t BB, const float F)
{
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    float sum[IQ_MR];
    for (int r = 0; r < NR; r++)
        sum[r] = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const block_q8_k *xb = (const block_q8_k *)x + ib;
        __m512i u[4];
        for (int h = 0; h < 4; h++)
            u[h] = _mm512_xor_si512(_mm512_loadu_si512(xb->qs + 64 * h), bias);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const char *blk = (const char *)w + (size_t)r * ws + (size_t)ib * BB;
            for (size_t off = 0; off < BB; off += 64)
                tensor_prefetch(blk + off, (size_t)NR * ws);
            int16_t ls[16];
            const float dw = iq_scales(TYPE, blk, ls);
            __m512i is = _mm512_setzero_si512(), off = _mm512_setzero_si512();
            for (int h = 0; h < 4; h++) {
                const __m512i q = iq_part2(TYPE, blk, h), sc = iq_scales4(ls, h);
                is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(u[h], q), sc);
                off = _mm512_dpwssd_epi32(off, _mm512_maddubs_epi16(bias, q), sc);
            }
            const int isum = _mm512_reduce_add_epi32(_mm512_sub_epi32(is, off));
            sum[r] += ((dw * xb->d) * F) * (float)isum;
        }
    }
    for (int r = 0; r < NR; r++)
        y[r] = sum[r];
}

/* In place: lane r of v[k] becomes lane k of v[r] (16 x 16 int32). */
TMPL_INLINE void iq_transpose16(__m512i v[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    /* u[4a + c], 128-bit lane L: column 4L + c of rows 4a..4a+3 */
    for (int a = 0; a < 4; a++) {
        u[4 * a] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
        u[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
        v[c] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
        v[8 + c] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
        v[4 + c] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
        v[12 + c] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

TMPL_INLINE void iq_panel_zmm(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                              float *y, size_t ys, const int NT, const uint32_t TYPE,
                              const size_t BB, const float F)
{
    enum { G = 8 }; /* tokens per pass over the panel */
    __m512 acc[IQ_PANEL_T];
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i c64 = _mm512_set1_epi8(64);
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        __m512i panel[64];
        int16_t ls[16][IQ_PANEL_R]; /* ls[s][r] */
        float dwr[IQ_PANEL_R];
        for (int h = 0; h < 4; h++) {
            __m512i v[16];
            for (int r = 0; r < IQ_PANEL_R; r++) {
                const char *blk = (const char *)w + (size_t)r * ws + (size_t)ib * BB;
                if (h == 0) {
                    int16_t l[16];
                    dwr[r] = iq_scales(TYPE, blk, l);
                    for (int s = 0; s < 16; s++)
                        ls[s][r] = l[s];
                }
                v[r] = _mm512_add_epi8(iq_part2(TYPE, blk, h), c64);
            }
            iq_transpose16(v);
            for (int k = 0; k < 16; k++)
                panel[16 * h + k] = v[k];
        }
        /* int32 lane r: ls[s][r]; pairs (ls[2p][r], ls[2p+1][r]) as int16 */
        __m512i lsv[16], lsp[8];
        for (int s = 0; s < 16; s++)
            lsv[s] = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)ls[s]));
        for (int p = 0; p < 8; p++)
            lsp[p] = _mm512_or_si512(lsv[2 * p], _mm512_slli_epi32(lsv[2 * p + 1], 16));
        const __m512 dw = _mm512_loadu_ps(dwr);
        for (int t0 = 0; t0 < NT; t0 += G) {
            const block_q8_k *xb[G];
            __m512i isum[G];
            for (int g = 0; g < G; g++) {
                xb[g] = ROW_BLOCK(block_q8_k, x, t0 + g, xs, ib);
                isum[g] = _mm512_setzero_si512();
            }
            for (int s = 0; s < 16; s++) {
                __m512i p[G];
                for (int g = 0; g < G; g++)
                    p[g] = _mm512_setzero_si512();
                for (int jj = 0; jj < 4; jj++) {
                    const int j = 4 * s + jj;
                    const __m512i pj = panel[j];
                    for (int g = 0; g < G; g++)
                        p[g] = _mm512_dpbusd_epi32(p[g], pj,
                                                   _mm512_set1_epi32((int)iq_load_u32((const uint8_t *)xb[g]->qs + 4 * j)));
                }
                for (int g = 0; g < G; g++)
                    isum[g] = _mm512_add_epi32(isum[g], _mm512_mullo_epi32(p[g], lsv[s]));
            }
            for (int g = 0; g < G; g++) {
                __m512i off = _mm512_setzero_si512();
                for (int q = 0; q < 8; q++)
                    off = _mm512_dpwssd_epi32(off, lsp[q],
                                              _mm512_set1_epi32((int)iq_load_u32((const uint8_t *)(xb[g]->bsums + 2 * q))));
                const __m512i is = _mm512_sub_epi32(isum[g], _mm512_slli_epi32(off, 6));
                const __m512 sc = _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xb[g]->d)),
                                                _mm512_set1_ps(F));
                acc[t0 + g] = _mm512_add_ps(acc[t0 + g], _mm512_mul_ps(sc, _mm512_cvtepi32_ps(is)));
            }
        }
    }
    for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TMPL_INLINE void iq_tile_zmm(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                             float *y, size_t ys, const int NR, const int NT,
                             const uint32_t TYPE, const size_t BB, const float F)
{
    if (NR == IQ_PANEL_R)
        iq_panel_zmm(n, w, ws, x, xs, y, ys, NT, TYPE, BB, F);
    else /* NT == 1 */
        iq_rows_zmm(n, w, ws, x, y, NR, TYPE, BB, F);
}
#define IQ_TILE_IMPL iq_tile_zmm
#else
#define IQ_TILE_IMPL iq_tile
#endif

/* The 1x1, rows and prefill tiles of each type, for SET(name, TR, TT). */
#define IQ_TILE(name, TYPE, F)                                                                  \
    TMPL_INLINE void name##_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs, \
                                 float *y, size_t ys, const int NR, const int NT)               \
    {                                                                                           \
        IQ_TILE_IMPL(n, w, ws, x, xs, y, ys, NR, NT, STRATA_TYPE_##TYPE, sizeof(block_##name), F); \
    }

IQ_TILE(iq2_xxs, IQ2_XXS, 0.125f)
IQ_TILE(iq2_xs, IQ2_XS, 0.125f)
IQ_TILE(iq2_s, IQ2_S, 0.125f)
IQ_TILE(iq3_xxs, IQ3_XXS, 0.25f)
IQ_TILE(iq3_s, IQ3_S, 1.0f)
IQ_TILE(iq1_s, IQ1_S, 0.125f)
IQ_TILE(iq1_m, IQ1_M, 0.125f)

#undef IQ_TILE
#undef IQ_TILE_IMPL

#endif /* __x86_64__ */
#endif
