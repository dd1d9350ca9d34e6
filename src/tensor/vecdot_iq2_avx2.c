/* AVX2 (+FMA, F16C) dot products of the IQ types (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with Q8_K activations, checked against
 * vecdot_iq_scalar.c.
 *
 * Per row and super-block the codes are decoded once into 8 vectors of 32
 * signed bytes (one per 32-element part): the codebook entries of the
 * part's groups are gathered by index into the 64-bit (or, for IQ3, 32-bit)
 * lanes, and the part's 32 sign bits become a byte mask that negates the
 * magnitudes (IQ1: 8 v + delta). Then, per token, maddubs(|x|, q * sign(x))
 * forms pair sums (|q| <= 62, so pairs <= 2 * 128 * 62), madd weights the
 * two 16-element halves of the part by their sub-block scales (low and high
 * 128 bits), and an int32 vector accumulates the super-block exactly; one
 * float step per super-block: acc = fma((d_w * d_x) * f, float(isum), acc).
 * The same inline template makes the 1x1, 4x1 and prefill shapes, so a
 * (row, token) pair gets the same bits from each. */
#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/iq_internal.h"
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* 32 sign bits (bit i: element i negative) -> bytes +1 / -1. */
TENSOR_AVX2_INLINE __m256i signs_pm1(uint32_t bits)
{
    uint8_t b[4];
    memcpy(b, &bits, 4);
    __m256i neg = tensor_bits32_to_bytes(b);
    return _mm256_or_si256(neg, _mm256_set1_epi8(1));
}

/* Negates the bytes of m where mask is 0xff (two's complement: (m ^ -1) + 1). */
TENSOR_AVX2_INLINE __m256i negate_where(__m256i m, __m256i mask)
{
    return _mm256_sub_epi8(_mm256_xor_si256(m, mask), mask);
}

/* The sign masks of 4 groups from 4 seven-bit fields of a, 7 bits apart. */
TENSOR_AVX2_INLINE __m256i ksigns_mask4(uint32_t a)
{
    const uint64_t *m = tensor_iq_ksigns_mask;
    return _mm256_set_epi64x((long long)m[(a >> 21) & 127], (long long)m[(a >> 14) & 127],
                             (long long)m[(a >> 7) & 127], (long long)m[a & 127]);
}

TENSOR_AVX2_INLINE __m256i grid64x4(const uint64_t *grid, int i0, int i1, int i2, int i3)
{
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1],
                             (long long)grid[i0]);
}

static inline uint32_t load_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 32 signed codes of part g of a block of `type` (blocks_iq.h). */
TENSOR_AVX2_INLINE __m256i iq_part(const uint32_t type, const void *blk, int g)
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = blk;
        uint32_t a0 = b->qs[4 * g] | (uint32_t)b->qs[4 * g + 1] << 16;
        uint32_t a1 = b->qs[4 * g + 2] | (uint32_t)b->qs[4 * g + 3] << 16;
        __m256i m = grid64x4(tensor_iq2xxs_grid, a0 & 255, (a0 >> 8) & 255, (a0 >> 16) & 255, a0 >> 24);
        return negate_where(m, ksigns_mask4(a1));
    }
    case STRATA_TYPE_IQ2_XS: {
        const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * g;
        __m256i m = grid64x4(tensor_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        const uint64_t *sm = tensor_iq_ksigns_mask;
        return negate_where(m, _mm256_set_epi64x((long long)sm[q[3] >> 9], (long long)sm[q[2] >> 9],
                                                 (long long)sm[q[1] >> 9], (long long)sm[q[0] >> 9]));
    }
    case STRATA_TYPE_IQ2_S: {
        const block_iq2_s *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const int h = b->qh[g];
        __m256i m = grid64x4(tensor_iq2s_grid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300),
                             q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300));
        return _mm256_sign_epi8(m, signs_pm1(load_u32(b->qs + 32 + 4 * g)));
    }
    case STRATA_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = blk;
        const uint8_t *q = b->qs + 8 * g;
        const uint32_t *gr = tensor_iq3xxs_grid;
        __m256i m = _mm256_set_epi32((int)gr[q[7]], (int)gr[q[6]], (int)gr[q[5]], (int)gr[q[4]],
                                     (int)gr[q[3]], (int)gr[q[2]], (int)gr[q[1]], (int)gr[q[0]]);
        return negate_where(m, ksigns_mask4(load_u32(b->qs + 64 + 4 * g)));
    }
    case STRATA_TYPE_IQ3_S: {
        const block_iq3_s *b = blk;
        const uint8_t *q = b->qs + 8 * g;
        const int h = b->qh[g];
        const uint32_t *gr = tensor_iq3s_grid;
        int idx[8];
        for (int k = 0; k < 8; k++)
            idx[k] = q[k] | ((h << (8 - k)) & 256);
        __m256i m = _mm256_set_epi32((int)gr[idx[7]], (int)gr[idx[6]], (int)gr[idx[5]],
                                     (int)gr[idx[4]], (int)gr[idx[3]], (int)gr[idx[2]],
                                     (int)gr[idx[1]], (int)gr[idx[0]]);
        return _mm256_sign_epi8(m, signs_pm1(load_u32(b->signs + 4 * g)));
    }
    case STRATA_TYPE_IQ1_S: {
        const block_iq1_s *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const unsigned h = b->qh[g];
        __m256i v = grid64x4(tensor_iq1s_grid, q[0] | (h & 7) << 8, q[1] | ((h >> 3) & 7) << 8,
                             q[2] | ((h >> 6) & 7) << 8, q[3] | ((h >> 9) & 7) << 8);
        __m256i v8 = _mm256_sign_epi8(_mm256_set1_epi8(8), v);
        return _mm256_add_epi8(v8, _mm256_set1_epi8((h & 0x8000) ? -1 : 1));
    }
    default: { /* IQ1_M */
        const block_iq1_m *b = blk;
        const uint8_t *q = b->qs + 4 * g;
        const unsigned h0 = b->qh[2 * g], h1 = b->qh[2 * g + 1];
        __m256i v = grid64x4(tensor_iq1s_grid, q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 4) & 0x700),
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
TENSOR_AVX2_INLINE float iq_scales(const uint32_t type, const void *blk, int16_t ls[16])
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

TENSOR_AVX2_INLINE void iq_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                                float *y, size_t ys, const int NR, const int NT,
                                const uint32_t TYPE, const size_t BB, const float F)
{
    __m256 acc[MR][MT];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            acc[r][t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        float dw[MR];
        __m256i isum[MR][MT];
        for (int r = 0; r < NR; r++) {
            const char *blk = (const char *)w + (size_t)r * ws + (size_t)ib * BB;
            if (NT == 1)
                for (size_t off = 0; off < BB; off += 64)
                    tensor_prefetch(blk + off, (size_t)NR * ws);
            int16_t ls[16];
            dw[r] = iq_scales(TYPE, blk, ls);
            for (int t = 0; t < NT; t++)
                isum[r][t] = _mm256_setzero_si256();
            for (int g = 0; g < 8; g++) {
                const __m256i q = iq_part(TYPE, blk, g);
                /* low 128 bits: sub-block 2g's scale, high: 2g + 1's */
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(ls[2 * g + 1]),
                                                    _mm_set1_epi16(ls[2 * g]));
                for (int t = 0; t < NT; t++) {
                    const block_q8_k *xb = ROW_BLOCK(block_q8_k, x, t, xs, ib);
                    __m256i xv = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * g));
                    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(q, xv));
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(p, sc));
                }
            }
        }
        for (int t = 0; t < NT; t++) {
            const float dx = ROW_BLOCK(block_q8_k, x, t, xs, ib)->d;
            for (int r = 0; r < NR; r++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps((dw[r] * dx) * F),
                                            _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++)
            y[t * ys + r] = tensor_hsum8(acc[r][t]);
}

#define IQ_TILE(name, TYPE, F)                                                                  \
    TENSOR_AVX2_INLINE void name##_tile(int64_t n, const void *w, size_t ws, const void *x,     \
                                        size_t xs, float *y, size_t ys, const int NR,           \
                                        const int NT)                                           \
    {                                                                                           \
        iq_tile(n, w, ws, x, xs, y, ys, NR, NT, STRATA_TYPE_##TYPE, sizeof(block_##name), F);   \
    }                                                                                           \
    AVX2_SET(name, 2, 4)

IQ_TILE(iq2_xxs, IQ2_XXS, 0.125f);
IQ_TILE(iq2_xs, IQ2_XS, 0.125f);
IQ_TILE(iq2_s, IQ2_S, 0.125f);
IQ_TILE(iq3_xxs, IQ3_XXS, 0.25f);
IQ_TILE(iq3_s, IQ3_S, 1.0f);
IQ_TILE(iq1_s, IQ1_S, 0.125f);
IQ_TILE(iq1_m, IQ1_M, 0.125f);

#endif /* __x86_64__ */
