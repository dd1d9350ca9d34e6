/* IQ4_NL x8, IQ4_XS x8, MXFP4 x8 and the 1-3 bit IQ x8 layouts: the packers and the kernels
 * at every level (pack_internal.h has the layouts and the float steps).
 *
 * Both types store 4-bit indices into one fixed table of 16 int8 values
 * (tensor_iq4nl_values). The packed layouts keep the indices, interleaved
 * as Q4_0's (IQ4_NL) and Q4_K's (IQ4_XS) codes; a kernel turns 32 of them
 * into values with one byte shuffle of the table. IQ4_NL's activations are
 * Q8_0 rows with the -128 sums (as Q8_0's: the AVX-512 kernel adds 128 to
 * the values to make them VPDPBUSD's unsigned operand); IQ4_XS's are Q8_K
 * rows, whose bsums take the same offset off per sub-block.
 *
 * IQ3_XXS and IQ3_S decode each group of 4 weights through a codebook of
 * 256 or 512 entries (a gather per 8 entries), which bound their GGUF
 * layout's matrix x vector to about a tenth of the memory's rate. Their
 * weights take only 16 values (8 magnitudes, each sign), and their scales
 * are per 32 elements, so their x8 layout is IQ4_XS x8's with the type's
 * own 16-value table: a byte shuffle decodes them as it decodes IQ4_XS.
 * The layout holds 4.3 bits per weight against the file's 3.1 (IQ3_XXS)
 * and 3.4 (IQ3_S). IQ2_XXS (2.1 bits) and IQ1_S (1.6) take six values each,
 * with scales per 32 elements too, so they use the same layout, at twice
 * and nearly three times their files' size. IQ2_XS, IQ2_S and IQ1_M (six
 * values too) have a scale per 16 elements: their blocks hold 16 scales a
 * row (4.6 bits a weight), and the kernels take the two halves of each
 * 32-element sub-block in separate sums. The ternary TQ1_0 (1.7 bits) and
 * TQ2_0 (2.1) take -1, 0 and 1 and one scale a super-block: the same
 * layout with every sub-block's scale 1. Q3_K (3.4 bits: codes -4..3, a
 * signed 6-bit scale per 16 elements) is the scale-per-16 block with the
 * table -4..3, 4.6 bits a weight: its file layout's kernels ran at about
 * a third of the packed types' prefill rate. */
#include "gguf/types.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/iq_internal.h"
#include "tensor/pack_internal.h"
#include "tensor/quant_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Index (0..15) of element i (0..31) of 16 bytes in Q4_0's nibble layout. */
static int nibble_code(const uint8_t *qs, int i)
{
    return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

/* Puts index q of element i into 16 bytes of that layout (zeroed first). */
static void nibble_put(uint8_t *qs, int i, int q)
{
    qs[i % 16] |= (uint8_t)(q << (i < 16 ? 0 : 4));
}

/* The element of a 32-element block that code vector j (0..7) holds in
 * byte 4r + e (as Q4_0's and Q4_K's: low nibbles j even, high j odd). */
static int x8_elem(int j, int e)
{
    return 8 * (j / 2) + 4 * (j % 2) + e;
}

/* Row r's 32 codes in Q4_0's nibble layout (16 bytes at src) into 128
 * interleaved bytes at dst (IQ4_NL x8's and MXFP4 x8's codes). */
static void nl_codes_put(const uint8_t *src, uint8_t *dst, int r)
{
    for (int m = 0; m < 4; m++)
        for (int e = 0; e < 4; e++)
            dst[32 * m + 4 * r + e] = (uint8_t)(nibble_code(src, x8_elem(2 * m, e)) |
                                                nibble_code(src, x8_elem(2 * m + 1, e)) << 4);
}

/* ------------------------------------------------------------ IQ4_NL */

bool tensor_x8_pack_iq4_nl(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_iq4_nlx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        block_iq4_nlx8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_iq4_nl *b =
                (const block_iq4_nl *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            nl_codes_put(b->qs, o->qs, r);
        }
    }
    return true; /* every index fits */
}

/* Index of row r in code vector j, byte e, of 128 interleaved bytes. */
static int x8_code(const uint8_t *qs, int j, int r, int e)
{
    const uint8_t q = qs[32 * (j / 2) + 4 * r + e];
    return j % 2 ? q >> 4 : q & 15;
}

/* The inverse of nl_codes_put: row r's codes back into 16 bytes at dst. */
static void nl_codes_get(const uint8_t *src, uint8_t *dst, int r)
{
    memset(dst, 0, 16);
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) nibble_put(dst, x8_elem(j, e), x8_code(src, j, r, e));
}

void tensor_x8_row_iq4_nl(const void *group, int64_t n, int r, void *dst)
{
    const block_iq4_nlx8 *g = group;
    block_iq4_nl *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        out[ib].d = g[ib].d[r];
        nl_codes_get(g[ib].qs, out[ib].qs, r);
    }
}

static int32_t iq4_nlx8_isum(const void *block, int r, const int8_t *xq)
{
    const block_iq4_nlx8 *b = block;
    int32_t isum = 0;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++)
            isum += tensor_iq4nl_values[x8_code(b->qs, j, r, e)] * xq[x8_elem(j, e)];
    return isum;
}

void tensor_x8_iq4_nl_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                             size_t ys, int nt)
{
    tensor_x8_scalar32(n, w, sizeof(block_iq4_nlx8), iq4_nlx8_isum, x, xs, y, ys, nt);
}

/* ------------------------------------------------------------ MXFP4 */

/* MXFP4's codes are IQ4_NL's nibbles over another table (twice the E2M1
 * values) and its scale an E8M0 exponent byte: its x8 block is IQ4_NL
 * x8's with the 8 rows' exponents in place of the f16 scales, the same
 * 136 bytes as 8 MXFP4 blocks. */
bool tensor_x8_pack_mxfp4(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_mxfp4x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        block_mxfp4x8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_mxfp4 *b =
                (const block_mxfp4 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->e[r] = b->e;
            nl_codes_put(b->qs, o->qs, r);
        }
    }
    return true; /* every code fits */
}

void tensor_x8_row_mxfp4(const void *group, int64_t n, int r, void *dst)
{
    const block_mxfp4x8 *g = group;
    block_mxfp4 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        out[ib].e = g[ib].e[r];
        nl_codes_get(g[ib].qs, out[ib].qs, r);
    }
}

void tensor_x8_mxfp4_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt)
{
    const block_mxfp4x8 *wb = w;
    for (int t = 0; t < nt; t++) {
        const block_q8_0 *xb = (const block_q8_0 *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
            const float dx = tensor_f16_to_f32(xb[ib].d);
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0;
                for (int j = 0; j < 8; j++)
                    for (int e = 0; e < 4; e++)
                        isum += tensor_mxfp4_values[x8_code(wb[ib].qs, j, r, e)] *
                                xb[ib].qs[x8_elem(j, e)];
                acc[r] = fmaf((float)isum, tensor_e8m0_half(wb[ib].e[r]) * dx, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

/* ------------------------------------------------------------ IQ4_XS */

bool tensor_x8_pack_iq4_xs(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_iq4_xsx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        block_iq4_xsx8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_iq4_xs *b =
                (const block_iq4_xs *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            for (int s = 0; s < 8; s++) {
                const int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 15) |
                               ((b->scales_h >> (2 * s)) & 3) << 4;
                o->sc[8 * s + r] = (int8_t)(ls - 32);
                const uint8_t *qs = b->qs + 16 * s;
                for (int m = 0; m < 4; m++)
                    for (int e = 0; e < 4; e++)
                        o->qs[128 * s + 32 * m + 4 * r + e] =
                            (uint8_t)(nibble_code(qs, x8_elem(2 * m, e)) |
                                      nibble_code(qs, x8_elem(2 * m + 1, e)) << 4);
            }
        }
    }
    return true; /* every index and 6-bit scale fits */
}

void tensor_x8_row_iq4_xs(const void *group, int64_t n, int r, void *dst)
{
    const block_iq4_xsx8 *g = group;
    block_iq4_xs *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        const block_iq4_xsx8 *b = &g[ib];
        block_iq4_xs *o = &out[ib];
        o->d = b->d[r];
        o->scales_h = 0;
        memset(o->scales_l, 0, sizeof o->scales_l);
        memset(o->qs, 0, sizeof o->qs);
        for (int s = 0; s < 8; s++) {
            const int ls = b->sc[8 * s + r] + 32;
            o->scales_l[s / 2] |= (uint8_t)((ls & 15) << (4 * (s % 2)));
            o->scales_h |= (uint16_t)((ls >> 4) << (2 * s));
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 4; e++)
                    nibble_put(o->qs + 16 * s, x8_elem(j, e), x8_code(b->qs + 128 * s, j, r, e));
        }
    }
}

/* ------------------------------------------------------------ IQ3 */

/* The 16 values of the IQ3 x8 layouts: index k = magnitude (k & 7) and
 * sign (k & 8) of the type's codebook bytes. */
const int8_t tensor_iq3s_x8_values[16] = {1,  3,  5,  7,  9,   11,  13,  15,
                                          -1, -3, -5, -7, -9, -11, -13, -15};
const int8_t tensor_iq3xxs_x8_values[16] = {4,  12,  20,  28,  36,  44,  52,  62,
                                            -4, -12, -20, -28, -36, -44, -52, -62};
/* IQ2_XXS's codebook bytes 8, 25, 43 and IQ1_S's 8 v + delta (v in -1..1,
 * delta +-1): six values each, the other indices unused. */
const int8_t tensor_iq2xxs_x8_values[16] = {8, 25, 43, 0, 0, 0, 0, 0, -8, -25, -43, 0, 0, 0, 0, 0};
const int8_t tensor_iq1s_x8_values[16] = {1, 7, 9, 0, 0, 0, 0, 0, -1, -7, -9, 0, 0, 0, 0, 0};
/* TQ1_0's and TQ2_0's -1, 0, 1, and the 2 of a TQ2_0 code 3 (no quantizer
 * writes one, but a file could hold it). */
const int8_t tensor_tq_x8_values[16] = {0, 1, 2, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0};
/* Q3_K's codes q - 4 (-4..3) at indices 0..7; 8..15 unused (values no
 * Q3_K weight takes, so each used value has one index). */
const int8_t tensor_q3k_x8_values[16] = {-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5};

/* One Q3_K block as the table layouts take it (blocks.h has the bits):
 * d, the 16 scales sc - 32 (-32..31) and the codes q - 4. */
static void q3_k_decode(const void *block, tensor_iq_decoded *out)
{
    const block_q3_k *b = block;
    out->d = tensor_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) out->ls[j] = (int8_t)(tensor_q3k_scale_get(b->scales, j) - 32);
    for (int i = 0; i < TENSOR_QK_K; i++) {
        const int h = i / 128, c = (i % 128) / 32, l = i % 32;
        const int q = ((b->qs[32 * h + l] >> (2 * c)) & 3) | ((b->hmask[l] >> (4 * h + c)) & 1) << 2;
        out->q[i] = (int8_t)(q - 4);
    }
}

/* An x8 block of the table layouts: IQ4_XS x8 (8 scales a row) or, with
 * s16, the block with a scale per 16 elements (16 a row). */
#define IQX8_BYTES(s16) ((s16) ? sizeof(block_iq_s16x8) : sizeof(block_iq4_xsx8))
#define IQX8_BLOCK(w, ib, s16) ((const uint8_t *)(w) + (size_t)(ib) * IQX8_BYTES(s16))
#define IQX8_D(b) ((const uint16_t *)(b))
#define IQX8_SC(b) ((const int8_t *)(b) + 16)
#define IQX8_QS(b, s16) ((const uint8_t *)(b) + 16 + ((s16) ? 128 : 64))
_Static_assert(offsetof(block_iq4_xsx8, sc) == 16 && offsetof(block_iq4_xsx8, qs) == 16 + 64,
               "IQ4_XS x8 field offsets");
_Static_assert(offsetof(block_iq_s16x8, sc) == 16 && offsetof(block_iq_s16x8, qs) == 16 + 128,
               "scale-per-16 x8 field offsets");

/* The x8 block of the table layouts from 8 rows of an IQ type whose every
 * weight is one of `table`'s values: with s16 a scale per 16 elements,
 * else per 32, which needs the source's 16-element halves to share theirs
 * (true of every IQ3_XXS, IQ3_S, IQ2_XXS and IQ1_S block). False (the
 * caller keeps the file's layout) when the data does not fit. */
static bool pack_iq_table(uint32_t type, const int8_t table[16], const bool s16,
                          const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    const size_t bb = strata_type_row_bytes(type, TENSOR_QK_K);
    tensor_iq_decoded dec;
    int8_t index[256]; /* value (as a byte) -> its index in the table, or -1 */
    memset(index, -1, sizeof index);
    for (int k = 0; k < 16; k++) index[(uint8_t)table[k]] = (int8_t)k;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        uint8_t *o = (uint8_t *)dst + (size_t)ib * IQX8_BYTES(s16);
        uint16_t *od = (uint16_t *)o;
        int8_t *osc = (int8_t *)o + 16;
        uint8_t *oqs = o + 16 + (s16 ? 128 : 64);
        for (int r = 0; r < 8; r++) {
            const char *blk = (const char *)src + (size_t)r * src_row_bytes + (size_t)ib * bb;
            if (type == STRATA_TYPE_TQ1_0 || type == STRATA_TYPE_TQ2_0) tensor_tq_decode(type, blk, &dec);
            else if (type == STRATA_TYPE_Q3_K) q3_k_decode(blk, &dec);
            else tensor_iq_decode(type, blk, &dec);
            od[r] = tensor_f32_to_f16(dec.d); /* a widened f16: exact */
            for (int h = 0; h < 16; h++) {
                if (s16) osc[8 * h + r] = dec.ls[h];
                else if (h % 2 == 0) osc[8 * (h / 2) + r] = dec.ls[h];
                else if (dec.ls[h] != dec.ls[h - 1]) return false;
            }
            for (int s = 0; s < 8; s++) {
                const int8_t *q = dec.q + 32 * s;
                for (int m = 0; m < 4; m++)
                    for (int e = 0; e < 4; e++) {
                        const int lo = index[(uint8_t)q[x8_elem(2 * m, e)]];
                        const int hi = index[(uint8_t)q[x8_elem(2 * m + 1, e)]];
                        if (lo < 0 || hi < 0) return false;
                        oqs[128 * s + 32 * m + 4 * r + e] = (uint8_t)(lo | hi << 4);
                    }
            }
        }
    }
    return true;
}

/* The reference: pack_internal.h's float steps, one (row, token) pair at a
 * time, the integer sums element by element; table-layout blocks (s16:
 * a scale per 16 elements) with the values of `table` and the factor f (1
 * for IQ4_XS: the same bits). */
static void iq_table_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt, const int8_t table[16], float f, bool s16)
{
    const int64_t nb = n / TENSOR_QK_K;
    for (int t = 0; t < nt; t++) {
        const block_q8_k *xb = (const block_q8_k *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *b = IQX8_BLOCK(w, ib, s16);
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0;
                for (int h = 0; h < 16; h++) { /* 16-element halves of the sub-blocks */
                    const int s = h / 2;
                    int32_t part = 0;
                    for (int j = 4 * (h % 2); j < 4 * (h % 2) + 4; j++)
                        for (int e = 0; e < 4; e++)
                            part += table[x8_code(IQX8_QS(b, s16) + 128 * s, j, r, e)] *
                                    xb[ib].qs[32 * s + x8_elem(j, e)];
                    isum += IQX8_SC(b)[8 * (s16 ? h : s) + r] * part;
                }
                float dd = (tensor_f16_to_f32(IQX8_D(b)[r]) * xb[ib].d) * f;
                acc[r] = fmaf((float)isum, dd, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

#define IQ_TABLE_SCALAR(name, values, f, s16)                                                 \
    void tensor_x8_##name##_scalar(int64_t n, const void *w, const void *x, size_t xs,        \
                                   float *y, size_t ys, int nt)                               \
    {                                                                                         \
        iq_table_scalar(n, w, x, xs, y, ys, nt, values, f, s16);                              \
    }

/* A type of the table layouts (IQ4_XS's packer and row are its own): its
 * packer and its scalar reference. */
#define IQ_TABLE_TYPE(name, TYPE, values, f, s16)                                             \
    bool tensor_x8_pack_##name(const void *src, size_t src_row_bytes, int64_t n, void *dst)  \
    {                                                                                         \
        return pack_iq_table(STRATA_TYPE_##TYPE, values, s16, src, src_row_bytes, n, dst);    \
    }                                                                                         \
    IQ_TABLE_SCALAR(name, values, f, s16)

IQ_TABLE_SCALAR(iq4_xs, tensor_iq4nl_values, 1.0f, false)
IQ_TABLE_TYPE(iq3_xxs, IQ3_XXS, tensor_iq3xxs_x8_values, 0.25f, false)
IQ_TABLE_TYPE(iq3_s, IQ3_S, tensor_iq3s_x8_values, 1.0f, false)
IQ_TABLE_TYPE(iq2_xxs, IQ2_XXS, tensor_iq2xxs_x8_values, 0.125f, false)
IQ_TABLE_TYPE(iq1_s, IQ1_S, tensor_iq1s_x8_values, 0.125f, false)
IQ_TABLE_TYPE(tq1_0, TQ1_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_TYPE(tq2_0, TQ2_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_TYPE(iq2_xs, IQ2_XS, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_TYPE(iq2_s, IQ2_S, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_TYPE(iq1_m, IQ1_M, tensor_iq1s_x8_values, 0.125f, true)
IQ_TABLE_TYPE(q3_k, Q3_K, tensor_q3k_x8_values, 1.0f, true)

#if defined(__x86_64__)

/* Two interleaved blocks ahead, as Q4_K's (pack_q4_k.c says why). */
#define IQ4_XSX8_PREFETCH (2 * sizeof(block_iq4_xsx8))

/* ------------------------------------------------------------ AVX2 */

/* IQ4_NL, one group x NT tokens: Q8_0's x8 kernel (pack_q8_0.c) on the
 * values v (in [-127, 113], from the table by a byte shuffle of the
 * indices): maddubs(|v|, sign(x, v)) with |x| <= 127 (the Q8_0 quantizer's
 * clamp), each int16 pair at most 2 * 127 * 127 = 32258, widened to int32
 * at once by madd with ones. |isum| <= 32 * 127 * 127 < 2^19. */
/* The 8 E8M0 exponents at e as tensor_e8m0_half's floats. */
TENSOR_AVX2_INLINE __m256 e8m0_half8(const uint8_t *e)
{
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    return _mm256_castsi256_ps(
        _mm256_blendv_epi8(tiny, normal, _mm256_cmpgt_epi32(v, _mm256_set1_epi32(1))));
}

/* (With mx, MXFP4 x8: its table and its exponents in place of the f16
 * scales, the codes 8 bytes into the block.) */
TENSOR_AVX2_INLINE void iq4_nlx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                      float *y, size_t ys, const int NT, const bool mx)
{
    const size_t bb = mx ? sizeof(block_mxfp4x8) : sizeof(block_iq4_nlx8);
    const int64_t nb = n / TENSOR_QK;
    const size_t scales_off = tensor_x8_scales_offset(n);
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(mx ? tensor_mxfp4_values : tensor_iq4nl_values)));
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)ib * bb;
        const uint8_t *qs = blk + (mx ? 8 : 16);
        for (size_t off = 0; off < bb; off += 64)
            _mm_prefetch((const char *)blk + TENSOR_X8_PREFETCH_AHEAD + off, _MM_HINT_T0);
        const block_q8_0 *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_0 *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int m = 0; m < 4; m++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * m));
            const __m256i v[2] = {
                _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4)),
                _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4))};
            for (int k = 0; k < 2; k++) {
                const __m256i va = _mm256_abs_epi8(v[k]);
                for (int t = 0; t < NT; t++) {
                    const __m256i xq =
                        _mm256_sign_epi8(tensor_bcast4(xb[t]->qs + 4 * (2 * m + k)), v[k]);
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(va, xq), ones);
                    isum[t] = _mm256_add_epi32(isum[t], p);
                    if (NT > 1) __asm__("" : "+x"(isum[t]));
                }
            }
        }
        const __m256 dw =
            mx ? e8m0_half8(blk) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
        for (int t = 0; t < NT; t++) {
            const float xd = tensor_x8_act_scale((const char *)x + (size_t)t * xs, scales_off, ib);
            const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xd));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_iq4_nl_avx2(int64_t n, const void *w, const void *x,
                                              size_t xs, float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: iq4_nlx8_tile(n, w, x, xs, y, ys, 1, false); break;
    case 2: iq4_nlx8_tile(n, w, x, xs, y, ys, 2, false); break;
    case 3: iq4_nlx8_tile(n, w, x, xs, y, ys, 3, false); break;
    default: iq4_nlx8_tile(n, w, x, xs, y, ys, 4, false); break;
    }
}

TENSOR_AVX2_TARGET void tensor_x8_mxfp4_avx2(int64_t n, const void *w, const void *x,
                                              size_t xs, float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: iq4_nlx8_tile(n, w, x, xs, y, ys, 1, true); break;
    case 2: iq4_nlx8_tile(n, w, x, xs, y, ys, 2, true); break;
    case 3: iq4_nlx8_tile(n, w, x, xs, y, ys, 3, true); break;
    default: iq4_nlx8_tile(n, w, x, xs, y, ys, 4, true); break;
    }
}

/* IQ4_XS, one group x NT tokens. The Q8_K activations can be -128, which
 * sign(x, v) cannot negate, so the roles swap: maddubs(|x|, sign(v, x))
 * (|x| <= 128 as an unsigned byte, v in [-127, 113] negates exactly) gives
 * int16 pairs of x * v, each at most 2 * 128 * 127 = 32512, and the madd
 * with the row's scale in both int16 lanes of int32 lane r (int8 scales in
 * [-32, 31], sign-extended) adds sc * (4 products) in int32 at once.
 * |isum| <= 256 * 32 * 128 * 127 < 2^28. */
TENSOR_AVX2_INLINE void iq4_xsx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                      float *y, size_t ys, const int NT,
                                      const int8_t values[16], const float f, const bool s16)
{
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)values));
    /* scale byte r (of 8, broadcast to each 64-bit lane) to the high byte
     * of int16 lanes 2r, 2r+1; an arithmetic shift then sign-extends it */
    const __m256i sc_hi = _mm256_setr_epi8(
        -1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,
        -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = IQX8_BLOCK(w, ib, s16);
        const block_q8_k *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *qs = IQX8_QS(b, s16) + 128 * s;
            _mm_prefetch((const char *)qs + IQ4_XSX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)qs + IQ4_XSX8_PREFETCH + 64, _MM_HINT_T0);
            /* the scales of elements 0..15 and 16..31 (the same without s16) */
            int64_t sc8[2];
            memcpy(&sc8[0], IQX8_SC(b) + 8 * (s16 ? 2 * s : s), 8);
            memcpy(&sc8[1], IQX8_SC(b) + 8 * (s16 ? 2 * s + 1 : s), 8);
            const __m256i sc16[2] = {
                _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(sc8[0]), sc_hi), 8),
                _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(sc8[1]), sc_hi), 8)};
            __m256i v[8];
            for (int m = 0; m < 4; m++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * m));
                v[2 * m] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
                v[2 * m + 1] =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                for (int j = 0; j < 8; j++) {
                    const __m256i xv = tensor_bcast4(xq + 4 * j);
                    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(xv),
                                                           _mm256_sign_epi8(v[j], xv));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc16[j / 4]));
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)IQX8_D(b)));
        for (int t = 0; t < NT; t++) {
            __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xb[t]->d));
            if (f != 1.0f) dd = _mm256_mul_ps(dd, _mm256_set1_ps(f));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

#define IQ_TABLE_AVX2(name, values, f, s16)                                                   \
    TENSOR_AVX2_TARGET void tensor_x8_##name##_avx2(int64_t n, const void *w, const void *x,  \
                                                    size_t xs, float *y, size_t ys, int nt)   \
    {                                                                                         \
        switch (nt) {                                                                         \
        case 1: iq4_xsx8_tile(n, w, x, xs, y, ys, 1, values, f, s16); break;                  \
        case 2: iq4_xsx8_tile(n, w, x, xs, y, ys, 2, values, f, s16); break;                  \
        case 3: iq4_xsx8_tile(n, w, x, xs, y, ys, 3, values, f, s16); break;                  \
        default: iq4_xsx8_tile(n, w, x, xs, y, ys, 4, values, f, s16); break;                 \
        }                                                                                     \
    }

IQ_TABLE_AVX2(iq4_xs, tensor_iq4nl_values, 1.0f, false)
IQ_TABLE_AVX2(iq3_xxs, tensor_iq3xxs_x8_values, 0.25f, false)
IQ_TABLE_AVX2(iq3_s, tensor_iq3s_x8_values, 1.0f, false)
IQ_TABLE_AVX2(iq2_xxs, tensor_iq2xxs_x8_values, 0.125f, false)
IQ_TABLE_AVX2(iq1_s, tensor_iq1s_x8_values, 0.125f, false)
IQ_TABLE_AVX2(tq1_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_AVX2(tq2_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_AVX2(iq2_xs, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_AVX2(iq2_s, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_AVX2(iq1_m, tensor_iq1s_x8_values, 0.125f, true)
IQ_TABLE_AVX2(q3_k, tensor_q3k_x8_values, 1.0f, true)

/* ------------------------------------------------------------ AVX-512 */

/* IQ4_NL and MXFP4, 16 rows x NT tokens: Q8_0's tile (pack_avx512.h's
 * x8_q8_0_tile) on the table values plus 128, with f16 scales or E8M0
 * exponents. */
X8_AVX512_INLINE void iq4_nl_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                  float *y, size_t ys, const int NG, const int NT)
{
    x8_q8_0_tile(n, w, gs, x, xs, y, ys, NG, NT, X8_TILE_IQ4_NL);
}

X8_AVX512_INLINE void mxfp4_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                 float *y, size_t ys, const int NG, const int NT)
{
    x8_q8_0_tile(n, w, gs, x, xs, y, ys, NG, NT, X8_TILE_MXFP4);
}

/* IQ4_XS, 16 rows x NT tokens. Per sub-block s, VPDPBUSD of the values
 * plus 128 with the activations in two chains from zero gives p_s, with
 * |p_s| <= 32 * 241 * 128 = 987136, multiplied by the int8 scale in int32:
 * |sum_s sc_s p_s| <= 8 * 32 * 987136 < 2^28. The 128 comes off once per
 * super-block: isum = sum_s sc_s p_s - 128 * sum_s sc_s S_s, S_s the
 * sub-block sums of the activations (from the bsums, |S_s| <= 4096, int16),
 * by madd of the scales in pairs (int16 lanes 2r, 2r+1 = sub-blocks 2p,
 * 2p+1 of row r) with the word (S_2p, S_2p+1): |sum_s sc_s S_s| < 2^21.
 * The IQ3 layouts run the same steps on their tables (values + 128 in
 * 66..190, scales 1..31: smaller bounds) and their factor f. */
X8_AVX512_INLINE void iq_table_tile(int64_t n, const void *w, size_t gs, const void *x,
                                    size_t xs, float *y, size_t ys, const int NG, const int NT,
                                    const int8_t values[16], const float f, const bool s16)
{
    const char *w1 = (const char *)w + gs;
    const int64_t nb = n / TENSOR_QK_K;
    const int n_sc = s16 ? 16 : 8; /* scales a row */
    const __m512i m4 = _mm512_set1_epi8(0x0f), table = iq4_table_u8(values);
    __m512 acc[X8_AVX512_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b0 = IQX8_BLOCK(w, ib, s16), *b1 = IQX8_BLOCK(w1, ib, s16);
        const block_q8_k *xb[X8_AVX512_MAX_T];
        __m512i isum[X8_AVX512_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm512_setzero_si512();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *q0 = IQX8_QS(b0, s16) + 128 * s, *q1 = IQX8_QS(b1, s16) + 128 * s;
            prefetch_lines(q0, 128, IQ4_XSX8_PREFETCH);
            if (NG == 2) prefetch_lines(q1, 128, IQ4_XSX8_PREFETCH);
            /* the scales of elements 0..15 and 16..31 (the same without s16) */
            __m512i sc32[2];
            for (int h = 0; h < 2; h++) {
                const int k = s16 ? 2 * s + h : s;
                __m128i sc8 = _mm_loadl_epi64((const __m128i *)(IQX8_SC(b0) + 8 * k));
                if (NG == 2)
                    sc8 = _mm_unpacklo_epi64(sc8, _mm_loadl_epi64((const __m128i *)(IQX8_SC(b1) + 8 * k)));
                sc32[h] = _mm512_cvtepi8_epi32(sc8);
            }
            __m512i c[8];
            for (int m = 0; m < 4; m++) {
                const __m512i q = load_pair256(q0 + 32 * m, q1 + 32 * m, NG);
                c[2 * m] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
                c[2 * m + 1] =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                if (s16) { /* p0: elements 0..15, p1: 16..31 */
                    for (int j = 0; j < 4; j++) {
                        p0 = _mm512_dpbusd_epi32(p0, c[j], bcast4_512(xq + 4 * j));
                        p1 = _mm512_dpbusd_epi32(p1, c[j + 4], bcast4_512(xq + 4 * j + 16));
                    }
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(p0, sc32[0]),
                                                                         _mm512_mullo_epi32(p1, sc32[1])));
                } else {
                    for (int j = 0; j < 8; j += 2) {
                        p0 = _mm512_dpbusd_epi32(p0, c[j], bcast4_512(xq + 4 * j));
                        p1 = _mm512_dpbusd_epi32(p1, c[j + 1], bcast4_512(xq + 4 * j + 4));
                    }
                    isum[t] = _mm512_add_epi32(
                        isum[t], _mm512_mullo_epi32(_mm512_add_epi32(p0, p1), sc32[0]));
                }
            }
        }
        /* scale pairs: int16 lanes 2r, 2r+1 = row r's scales 2p, 2p+1 */
        __m512i scp[8];
        for (int p = 0; p < n_sc / 2; p++) {
            const __m128i a = _mm_unpacklo_epi8(
                _mm_loadl_epi64((const __m128i *)(IQX8_SC(b0) + 16 * p)),
                _mm_loadl_epi64((const __m128i *)(IQX8_SC(b0) + 16 * p + 8)));
            __m256i ab = _mm256_zextsi128_si256(a);
            if (NG == 2)
                ab = _mm256_inserti128_si256(
                    ab,
                    _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(IQX8_SC(b1) + 16 * p)),
                                      _mm_loadl_epi64((const __m128i *)(IQX8_SC(b1) + 16 * p + 8))),
                    1);
            scp[p] = _mm512_cvtepi8_epi16(ab);
        }
        const __m512 dw = load_scales(IQX8_D(b0), IQX8_D(b1), NG);
        for (int t = 0; t < NT; t++) {
            /* the activation sums of the scales' elements, in pairs of
             * int16: with s16 the bsums themselves, else S_0..S_7 (sums of
             * bsums pairs) in the low 128 bits */
            __m512i off = _mm512_setzero_si512();
            if (s16) {
                for (int p = 0; p < 8; p++) {
                    int32_t word;
                    memcpy(&word, xb[t]->bsums + 2 * p, 4);
                    off = _mm512_add_epi32(off, _mm512_madd_epi16(scp[p], _mm512_set1_epi32(word)));
                }
            } else {
                const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)xb[t]->bsums),
                                                  _mm_loadu_si128((const __m128i *)xb[t]->bsums + 1));
                off = _mm512_madd_epi16(scp[0], _mm512_set1_epi32(_mm_extract_epi32(bs, 0)));
                off = _mm512_add_epi32(off, _mm512_madd_epi16(scp[1], _mm512_set1_epi32(_mm_extract_epi32(bs, 1))));
                off = _mm512_add_epi32(off, _mm512_madd_epi16(scp[2], _mm512_set1_epi32(_mm_extract_epi32(bs, 2))));
                off = _mm512_add_epi32(off, _mm512_madd_epi16(scp[3], _mm512_set1_epi32(_mm_extract_epi32(bs, 3))));
            }
            const __m512i is = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(off, 7));
            __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xb[t]->d));
            if (f != 1.0f) dd = _mm512_mul_ps(dd, _mm512_set1_ps(f));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

#define IQ_TABLE_TILE(name, values, f, s16)                                                    \
    X8_AVX512_INLINE void name##_tile(int64_t n, const void *w, size_t gs, const void *x,      \
                                      size_t xs, float *y, size_t ys, const int NG,            \
                                      const int NT)                                            \
    {                                                                                          \
        iq_table_tile(n, w, gs, x, xs, y, ys, NG, NT, values, f, s16);                         \
    }

IQ_TABLE_TILE(iq4_xs, tensor_iq4nl_values, 1.0f, false)
IQ_TABLE_TILE(iq3_xxs, tensor_iq3xxs_x8_values, 0.25f, false)
IQ_TABLE_TILE(iq3_s, tensor_iq3s_x8_values, 1.0f, false)
IQ_TABLE_TILE(iq2_xxs, tensor_iq2xxs_x8_values, 0.125f, false)
IQ_TABLE_TILE(iq1_s, tensor_iq1s_x8_values, 0.125f, false)
IQ_TABLE_TILE(tq1_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_TILE(tq2_0, tensor_tq_x8_values, 1.0f, false)
IQ_TABLE_TILE(iq2_xs, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_TILE(iq2_s, tensor_iq2xxs_x8_values, 0.125f, true)
IQ_TABLE_TILE(iq1_m, tensor_iq1s_x8_values, 0.125f, true)
IQ_TABLE_TILE(q3_k, tensor_q3k_x8_values, 1.0f, true)

X8_AVX512_SET(iq4_nl)
X8_AVX512_SET(mxfp4)
X8_AVX512_SET(iq4_xs)
X8_AVX512_SET(iq3_xxs)
X8_AVX512_SET(iq3_s)
X8_AVX512_SET(iq2_xxs)
X8_AVX512_SET(iq1_s)
X8_AVX512_SET(tq1_0)
X8_AVX512_SET(tq2_0)
X8_AVX512_SET(iq2_xs)
X8_AVX512_SET(iq2_s)
X8_AVX512_SET(iq1_m)
X8_AVX512_SET(q3_k)

#endif /* __x86_64__ */
