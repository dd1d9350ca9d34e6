/* Block layouts of the ternary, MXFP4 and 1-3 bit IQ types, byte for byte
 * as GGUF stores them (the conventions of blocks.h: little-endian fields,
 * f16 scales as bit patterns, element i of a block is x[i]).
 *
 * Their decoders are in dequant_iq.c, their dot products in
 * vecdot_iq_scalar.c (reference) and vecdot_iq_avx2.c; the value tables
 * the formats define are in iq_tables.c. */
#ifndef STRATA_TENSOR_BLOCKS_IQ_H
#define STRATA_TENSOR_BLOCKS_IQ_H

#include <stdint.h>
#include <string.h>

/* TQ2_0: ternary weights, 2 bits each: element i, with h = i / 128,
 * c = (i % 128) / 32, l = i % 32, has code q = (qs[32h + l] >> 2c) & 3
 * (0..2) and w = d * (q - 1). */
typedef struct block_tq2_0 {
    uint8_t qs[256 / 4];
    uint16_t d; /* f16 */
} block_tq2_0;

/* TQ1_0: ternary weights packed 5 per byte (and 4 per byte in qh) as
 * base-3 digits scaled into a byte: digit k of byte b is
 *   trit(b, k) = (((uint8_t)(b * 3^k)) * 3) >> 8   (0..2),
 * and w = d * (trit - 1). Element order:
 *   i <  160: i = 32k + m,          trit(qs[m], k),        k < 5, m < 32
 *   i <  240: i = 160 + 16k + m,    trit(qs[32 + m], k),   k < 5, m < 16
 *   i <  256: i = 240 + 4k + m,     trit(qh[m], k),        k < 4, m < 4 */
typedef struct block_tq1_0 {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d; /* f16 */
} block_tq1_0;

/* MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 scale.
 * Nibble layout of the legacy types (element j in the low nibble of qs[j],
 * element j + 16 in the high nibble). With v = tensor_mxfp4_values[q]
 * (twice the E2M1 value, an integer), w = v * 2^(e - 128), i.e. the E2M1
 * value times the E8M0 scale 2^(e - 127). */
typedef struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[16];
} block_mxfp4;

/* --- the IQ types: 256-element super-blocks of 8-element (IQ2, IQ1) or
 * 4-element (IQ3) groups, each group an entry of a fixed codebook
 * (iq_grids.c) with per-element signs. Every type decodes to
 *   w[i] = (d * ls[i / 16] * f) * q[i],
 * an odd integer sub-block scale ls = 2s + 1 (s the stored 3- or 4-bit
 * field), a per-type power of two f, and a signed integer code q (see
 * tensor_iq_decode in iq_internal.h). "sign byte" below: bit j set makes
 * element j of the group negative; tensor_iq_ksigns[k] expands a 7-bit
 * field k to such a byte. Groups are in element order, 32g + 8l + j for
 * group l of 32-element part g. */

/* IQ2_XXS (f = 1/8): per part g, the 32-bit words a0 = qs[4g] | qs[4g+1] << 16
 * and a1 = qs[4g+2] | qs[4g+3] << 16. Group l: grid entry byte l of a0 in
 * tensor_iq2xxs_grid, signs tensor_iq_ksigns[(a1 >> 7l) & 127];
 * ls = 2 (a1 >> 28) + 1 for the whole part. */
typedef struct block_iq2_xxs {
    uint16_t d;
    uint16_t qs[32];
} block_iq2_xxs;

/* IQ2_XS (f = 1/8): group l of part g is qs[4g + l]: grid entry bits 0..8
 * (tensor_iq2xs_grid), signs tensor_iq_ksigns[bits 9..15]. ls of the first
 * 16 elements of part g is 2 (scales[g] & 15) + 1, of the second
 * 2 (scales[g] >> 4) + 1. */
typedef struct block_iq2_xs {
    uint16_t d;
    uint16_t qs[32];
    uint8_t scales[8];
} block_iq2_xs;

/* IQ2_S (f = 1/8): group l of part g: grid entry qs[4g + l] |
 * ((qh[g] << (8 - 2l)) & 0x300) of tensor_iq2s_grid, sign byte
 * qs[32 + 4g + l]; scales as IQ2_XS. */
typedef struct block_iq2_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
} block_iq2_s;

/* IQ3_XXS (f = 1/4): 4-element groups. Part g: a = the 32-bit word at
 * qs[64 + 4g]; ls = 2 (a >> 28) + 1. Its 8-element half l: elements 0..3
 * from tensor_iq3xxs_grid[qs[8g + 2l]], 4..7 from [qs[8g + 2l + 1]], signs
 * tensor_iq_ksigns[(a >> 7l) & 127]. */
typedef struct block_iq3_xxs {
    uint16_t d;
    uint8_t qs[96];
} block_iq3_xxs;

/* IQ3_S (f = 1): part g, half l: elements 0..3 from tensor_iq3s_grid[
 * qs[8g + 2l] | ((qh[g] << (8 - 2l)) & 256)], 4..7 from [qs[8g + 2l + 1] |
 * ((qh[g] << (7 - 2l)) & 256)], sign byte signs[4g + l];
 * ls = 2 ((scales[g / 2] >> 4 (g % 2)) & 15) + 1. */
typedef struct block_iq3_s {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
} block_iq3_s;

/* IQ1_S (f = 1/8): grid bytes v in {-1, 0, 1}. Part g, with h = qh[g]:
 * group l is tensor_iq1s_grid[qs[4g + l] | ((h >> 3l) & 7) << 8];
 * ls = 2 ((h >> 12) & 7) + 1; q = 8 v - 1 if bit 15 of h is set, else 8 v + 1
 * (the format's shift of the grid by -+1/8). */
typedef struct block_iq1_s {
    uint16_t d;
    uint8_t qs[32];
    uint16_t qh[8];
} block_iq1_s;

/* IQ1_M (f = 1/8): no d field: with the four 16-bit words s_k of scales,
 * d is the f16 (s0 >> 12) | (s1 >> 8 & 0xf0) | (s2 >> 4 & 0xf00) |
 * (s3 & 0xf000). Part g: group l's grid entry qs[4g + l] | ((qh[2g + l/2]
 * << (8 - 4 (l % 2))) & 0x700) of tensor_iq1s_grid; q = 8 v - 1 where bit
 * 3 + 4 (l % 2) of qh[2g + l/2] is set, else 8 v + 1; ls of sub-block
 * 2g + k (k = 0, 1) is 2 ((s_{g/2} >> (6 (g % 2) + 3k)) & 7) + 1. */
typedef struct block_iq1_m {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
} block_iq1_m;

_Static_assert(sizeof(block_iq2_xxs) == 66, "IQ2_XXS block is 66 bytes");
_Static_assert(sizeof(block_iq2_xs) == 74, "IQ2_XS block is 74 bytes");
_Static_assert(sizeof(block_iq2_s) == 82, "IQ2_S block is 82 bytes");
_Static_assert(sizeof(block_iq3_xxs) == 98, "IQ3_XXS block is 98 bytes");
_Static_assert(sizeof(block_iq3_s) == 110, "IQ3_S block is 110 bytes");
_Static_assert(sizeof(block_iq1_s) == 50, "IQ1_S block is 50 bytes");
_Static_assert(sizeof(block_iq1_m) == 56, "IQ1_M block is 56 bytes");
_Static_assert(sizeof(block_tq2_0) == 66, "TQ2_0 block is 66 bytes");
_Static_assert(sizeof(block_tq1_0) == 54, "TQ1_0 block is 54 bytes");
_Static_assert(sizeof(block_mxfp4) == 17, "MXFP4 block is 17 bytes");

/* Twice the 16 E2M1 values (sign bit 3, then 2 exponent bits and 1
 * mantissa bit): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled. */
extern const int8_t tensor_mxfp4_values[16];

/* 3^k for the TQ1_0 digits. */
extern const uint8_t tensor_tq1_pow3[5];

/* The E8M0 scale of MXFP4 halved: 2^(e - 128), exact for every e: the
 * float with exponent field e - 1 for e >= 2, the subnormals 2^-128 and
 * 2^-127 (bit 21 and 22 of the fraction) for e = 0 and 1. Built from bits
 * because the kernels take it once per block. */
static inline float tensor_e8m0_half(uint8_t e)
{
    uint32_t bits = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* The codebooks (iq_grids.c). */
extern const uint8_t tensor_iq_ksigns[128];
extern const uint64_t tensor_iq_ksigns_mask[128]; /* the same as byte masks */
extern const uint64_t tensor_iq2xxs_grid[256];
extern const uint64_t tensor_iq2xs_grid[512];
extern const uint64_t tensor_iq2s_grid[1024];
extern const uint32_t tensor_iq3xxs_grid[256];
extern const uint32_t tensor_iq3s_grid[512];
extern const uint64_t tensor_iq1s_grid[2048];

#endif
