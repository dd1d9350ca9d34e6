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

_Static_assert(sizeof(block_tq2_0) == 66, "TQ2_0 block is 66 bytes");
_Static_assert(sizeof(block_tq1_0) == 54, "TQ1_0 block is 54 bytes");
_Static_assert(sizeof(block_mxfp4) == 17, "MXFP4 block is 17 bytes");

/* Twice the 16 E2M1 values (sign bit 3, then 2 exponent bits and 1
 * mantissa bit): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled. */
extern const int8_t tensor_mxfp4_values[16];

/* 3^k for the TQ1_0 digits. */
extern const uint8_t tensor_tq1_pow3[5];

/* The E8M0 scale of MXFP4 halved: 2^(e - 128), exact for every e
 * (subnormal for e < 2). */
float tensor_e8m0_half(uint8_t e);

#endif
