/* The block layouts of GGUF's quantized tensor types, byte for byte as the
 * format stores them, so tensors written by other tools are used in place.
 *
 * A row of n elements of a block type is n / block_elems consecutive blocks.
 * Every multi-byte field is little-endian (this code assumes a little-endian
 * host, as the GGUF reader does). Scales written "f16" are IEEE half floats
 * held as their bit patterns in uint16_t (see fp16.h). Each struct's size is
 * checked against the format's block size below and against the type table
 * in gguf/types.c by the tests.
 *
 * Naming in the comments: element i of a block is x[i]; "nibble" layouts
 * put element j in the low 4 bits of qs[j] and element j + 16 in the high 4
 * bits (blocks of 32), or per 64-element chunk c, element 64c + l in the low
 * bits of qs[32c + l] and element 64c + 32 + l in the high bits (K-quants).
 *
 * Structs of f16 fields have alignment 2, block_q8_k alignment 4: a source
 * pointer must be aligned to its block's alignment (GGUF data is aligned to
 * 32 bytes, and every block size here keeps that alignment from block to
 * block). */
#ifndef STRATA_TENSOR_BLOCKS_H
#define STRATA_TENSOR_BLOCKS_H

#include <stdint.h>

#define TENSOR_QK 32   /* elements per block of the legacy types, IQ4_NL and Q8_0/Q8_1 */
#define TENSOR_QK_K 256 /* elements per super-block of the K-quants and IQ4_XS */
#define TENSOR_K_SCALE_BYTES 12 /* 8 six-bit scales + 8 six-bit mins (Q4_K, Q5_K) */

/* Q4_0: w[i] = d * (q[i] - 8), q in 0..15 (4-bit, nibble layout). */
typedef struct block_q4_0 {
    uint16_t d;                  /* f16 scale */
    uint8_t qs[TENSOR_QK / 2];   /* nibbles */
} block_q4_0;

/* Q4_1: w[i] = d * q[i] + m, q in 0..15 (nibble layout). */
typedef struct block_q4_1 {
    uint16_t d;                  /* f16 scale */
    uint16_t m;                  /* f16 offset (the block's minimum) */
    uint8_t qs[TENSOR_QK / 2];
} block_q4_1;

/* Q5_0: w[i] = d * (q[i] - 16), q in 0..31. The low 4 bits are nibbles as
 * in Q4_0; bit i of the little-endian 32-bit word qh is bit 4 of q[i]. */
typedef struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];               /* one high bit per element (kept as bytes: the
                                    word is unaligned at offset 2) */
    uint8_t qs[TENSOR_QK / 2];
} block_q5_0;

/* Q5_1: w[i] = d * q[i] + m, q in 0..31, bits stored as in Q5_0. */
typedef struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[TENSOR_QK / 2];
} block_q5_1;

/* Q8_0: w[i] = d * qs[i]. */
typedef struct block_q8_0 {
    uint16_t d;
    int8_t qs[TENSOR_QK];
} block_q8_0;

/* Q8_1: w[i] = d * qs[i]; s = d * sum(qs) (f16), which lets a dot product
 * with Q4_1/Q5_1 weights (w = d*q + m) add the m term as m * s instead of
 * summing the activations again. The activation type of Q4_1 and Q5_1. */
typedef struct block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[TENSOR_QK];
} block_q8_1;

/* Q2_K: 16 sub-blocks of 16. Element i: sub-block j = i / 16 with 4-bit
 * scale sc = scales[j] & 15 and 4-bit min mn = scales[j] >> 4; 2-bit code
 * q = (qs[32*(i/128) + i%32] >> (2 * ((i%128) / 32))) & 3;
 * w = d * sc * q - dmin * mn. */
typedef struct block_q2_k {
    uint8_t scales[TENSOR_QK_K / 16];
    uint8_t qs[TENSOR_QK_K / 4];
    uint16_t d;                  /* f16 scale of the scales */
    uint16_t dmin;               /* f16 scale of the mins */
} block_q2_k;

/* Q3_K: 16 sub-blocks of 16, signed 3-bit codes, signed 6-bit scales.
 * Element i, with h = i / 128, c = (i % 128) / 32, l = i % 32:
 *   low 2 bits  (qs[32h + l] >> 2c) & 3,
 *   bit 2       (hmask[l] >> (4h + c)) & 1,
 *   q = low | bit2 << 2, in 0..7, and the code is q - 4 (-4..3).
 * Scale of sub-block j = i / 16 is a 6-bit value minus 32: its low 4 bits
 * are (scales[j % 8] >> (4 * (j / 8))) & 15, its high 2 bits
 * (scales[8 + j % 4] >> (2 * (j / 4))) & 3.
 * w = d * (sc - 32) * (q - 4). */
typedef struct block_q3_k {
    uint8_t hmask[TENSOR_QK_K / 8];
    uint8_t qs[TENSOR_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_k;

/* Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes;
 * 4-bit codes in the K nibble layout (sub-block 2c in the low nibbles of
 * qs[32c..32c+31], sub-block 2c+1 in their high nibbles).
 * For sub-block j < 4: sc = scales[j] & 63, mn = scales[j + 4] & 63;
 * for j >= 4: sc = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
 *             mn = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
 * w = d * sc * q - dmin * mn. */
typedef struct block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[TENSOR_K_SCALE_BYTES];
    uint8_t qs[TENSOR_QK_K / 2];
} block_q4_k;

/* Q5_K: Q4_K's layout plus a fifth bit per element: bit j of qh[l] is bit 4
 * of element 32j + l. w = d * sc * q - dmin * mn, q in 0..31. */
typedef struct block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[TENSOR_K_SCALE_BYTES];
    uint8_t qh[TENSOR_QK_K / 8];
    uint8_t qs[TENSOR_QK_K / 2];
} block_q5_k;

/* Q6_K: 16 sub-blocks of 16, signed 6-bit codes, int8 scales.
 * Element i, with h = i / 128, c = (i % 128) / 32, l = i % 32:
 *   low 4 bits  ql[64h + l + 32 * (c & 1)], low nibble for c < 2, high for c >= 2,
 *   high 2 bits (qh[32h + l] >> 2c) & 3,
 *   q in 0..63, code q - 32.
 * w = d * scales[i / 16] * (q - 32). */
typedef struct block_q6_k {
    uint8_t ql[TENSOR_QK_K / 2];
    uint8_t qh[TENSOR_QK_K / 4];
    int8_t scales[TENSOR_QK_K / 16];
    uint16_t d;
} block_q6_k;

/* Q8_K: w[i] = d * qs[i] with a float32 d; bsums[j] is the sum of
 * qs[16j..16j+15], which the K-quant dot products use for their min terms.
 * The activation type of the K-quants and IQ4_XS. */
typedef struct block_q8_k {
    float d;
    int8_t qs[TENSOR_QK_K];
    int16_t bsums[TENSOR_QK_K / 16];
} block_q8_k;

/* IQ4_NL: w[i] = d * tensor_iq4nl_values[q[i]], q in 0..15, nibble layout
 * as Q4_0. The 16 values are a fixed non-uniform grid (denser near zero,
 * closer to the shape of normally distributed weights). */
typedef struct block_iq4_nl {
    uint16_t d;
    uint8_t qs[TENSOR_QK / 2];
} block_iq4_nl;

/* IQ4_XS: 8 sub-blocks of 32, each with a signed 6-bit scale ls - 32 where
 * ls = ((scales_l[j/2] >> (4 * (j % 2))) & 15) | ((scales_h >> 2j) & 3) << 4.
 * Sub-block j's codes are 16 bytes qs[16j..16j+15] in the nibble layout of
 * IQ4_NL. w = d * (ls - 32) * tensor_iq4nl_values[q]. */
typedef struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[TENSOR_QK_K / 64];
    uint8_t qs[TENSOR_QK_K / 2];
} block_iq4_xs;

_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(block_q8_1) == 36, "Q8_1 block is 36 bytes");
_Static_assert(sizeof(block_q2_k) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(block_q3_k) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(block_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(block_q5_k) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(block_q6_k) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(block_q8_k) == 292, "Q8_K block is 292 bytes");
_Static_assert(sizeof(block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

/* The 16 reconstruction values of IQ4_NL and IQ4_XS, ascending (a fact of
 * the format). Defined in dequant.c. */
extern const int8_t tensor_iq4nl_values[16];

#endif
