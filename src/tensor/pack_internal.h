/* The x8 layouts and their kernels: internal to src/tensor/ (pack.c, the
 * pack_*.c files, matmul.c) and the tests. pack.h says what they are for.
 *
 * A packed matrix is n_rows / 8 groups, one after the other. A group is
 * n_cols / block_elems interleaved blocks (the structs below), one per
 * block index of the source rows, in order. Inside an interleaved block,
 * "row r" is row r of the group (0..7) and element indices count within
 * the source block. Codes keep the source's values (nothing is requantized):
 * packing is a permutation of the bytes plus, for Q4_K, unpacking the 6-bit
 * scales into bytes.
 *
 * Interleaving by 4: a 32-byte vector of codes covers 4 consecutive
 * elements of each of the 8 rows, bytes 4r..4r+3 being row r's. Multiplied
 * with the 4 matching activation bytes broadcast to all 8 int32 lanes
 * (maddubs, then madd), it gives int32 lane r = row r's partial dot product.
 *
 * THE FLOAT STEPS, per (row r, token t) pair, in block order, starting from
 * acc = 0.0f, with isum the exact int32 dot product of the block's codes
 * (as signed values: Q4_0's q - 8) with the activation codes:
 *   Q4_0, Q5_0, Q8_0: acc = fmaf((float)isum, d_r * dx, acc)
 *   Q4_1, Q5_1:  acc = fmaf((float)isum, d_r * dx, acc);
 *                acc = fmaf(m_r, sx, acc)
 *                with isum over the unsigned codes, m_r the f16 offset and
 *                sx the Q8_1 activation block's f16 sum s, widened
 *   Q4_K:        acc = fmaf((float)isum, d_r * dx, acc);
 *                acc = fmaf(-(float)imin, dmin_r * dx, acc)
 *                where isum = sum_s sc_s * (codes . x over sub-block s) and
 *                imin = sum_s mn_s * (x summed over sub-block s)
 *   Q5_K:        as Q4_K, with the 5-bit codes
 *   Q2_K:        as Q4_K over 16-element sub-blocks h: isum = sum_h sc_h *
 *                (codes . x over h), imin = sum_h mn_h * (x summed over h)
 *   IQ4_NL:      as Q8_0, isum over the table values v[q]
 *   MXFP4:       as IQ4_NL over its table, with d_r = 2^(e_r - 128)
 *   IQ4_XS:      acc = fmaf((float)isum, d_r * dx, acc)
 *                where isum = sum_s sc_s * (v[q] . x over sub-block s)
 *   IQ3_XXS, IQ3_S, IQ2_XXS, IQ1_S: acc = fmaf((float)isum, (d_r * dx) * f,
 *                acc), isum as IQ4_XS's over the type's table; f = 1/4
 *                (IQ3_XXS), 1 (IQ3_S), 1/8 (IQ2_XXS, IQ1_S)
 *   TQ1_0, TQ2_0: as IQ3_S (f = 1) over the values -1, 0, 1, every sc_s 1
 *   IQ2_XS, IQ2_S, IQ1_M: as IQ2_XXS with a scale per 16 elements, isum =
 *                sum_h sc_h * (v[q] . x over 16-element sub-block h)
 *   Q6_K:        acc = fmaf((float)isum, d_r * dx, acc)
 *                where isum = sum_g sc_g * ((q - 32) . x over group g)
 *   F16, BF16:   no integer step; four pairs of float sums s[k][p] (k < 4,
 *                p < 2) start at 0.0f and, for every block in order and
 *                k, p: s[k][p] = fmaf(w, x, s[k][p]) with w row r's
 *                element 8 b + 2 k + p (exactly widened) and x the float
 *                activation of that element; then
 *                y = ((s00 + s10) + (s20 + s30)) + ((s01 + s11) + (s21 + s31))
 * where d_r, dmin_r are the f16 scales widened to float and dx the
 * activation block's scale (f16 for Q8_0, float for Q8_K); the products
 * d_r * dx are rounded float multiplies. y = acc. Every kernel (scalar or
 * SIMD, any nt) performs exactly these steps per pair, so all give the same
 * bits. */
#ifndef STRATA_TENSOR_PACK_INTERNAL_H
#define STRATA_TENSOR_PACK_INTERNAL_H

#include "base/cpu.h"
#include "tensor/blocks.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Q4_0 x8: block b of rows 0..7.
 *   d[r]: row r's f16 scale.
 *   qs[32 m + 4 r + e], m = 0..3, e = 0..3: low nibble = the code (0..15,
 *   value (q - 8) * d) of row r's element 8m + e, high nibble = that of
 *   element 8m + 4 + e. */
typedef struct block_q4_0x8 {
    uint16_t d[8];
    uint8_t qs[128];
} block_q4_0x8;

/* Q2_K x8: super-block b of rows 0..7 (8 sub-blocks s of 32, 16 halves
 * h of 16).
 *   d[r], dmin[r]: row r's f16 scales.
 *   scales[8 h + r]: row r's scale byte of half h, as in the file (low
 *   nibble the scale, high nibble the minimum).
 *   qs[64 s + 32 t + 4 r + e], t = 0..1: bits 2k, 2k + 1 = row r's code
 *   (0..3) in code vector j = 4t + k of sub-block s, byte e, which holds
 *   element 32 s + 8 (j / 2) + 4 (j % 2) + e (Q4_K x8's order).
 * w = d * sc_h * q - dmin * mn_h, as in Q2_K; the file's size. */
typedef struct block_q2_kx8 {
    uint16_t d[8];
    uint16_t dmin[8];
    uint8_t scales[128];
    uint8_t qs[512];
} block_q2_kx8;

/* Q5_0 x8: block b of rows 0..7, Q4_0 x8's nibbles and one byte per
 * code-vector position for the fifth bits (as a Q5_K x8 sub-block).
 *   d[r]: row r's f16 scale.
 *   qs[32 m + 4 r + e]: as Q4_0 x8's, the low 4 bits of code vector
 *   j = 2m (low nibble, element 8m + e) and j = 2m + 1 (high nibble,
 *   element 8m + 4 + e).
 *   qh[4 r + e]: bit j = bit 4 of code vector j's code in byte 4r + e.
 * w = d * (q - 16), q in 0..31, as in Q5_0. */
typedef struct block_q5_0x8 {
    uint16_t d[8];
    uint8_t qs[128];
    uint8_t qh[32];
} block_q5_0x8;

/* Q4_1 x8: Q4_0 x8 with the rows' f16 offsets m[r] after their scales;
 * the codes 0..15 are unsigned, w = d * q + m. */
typedef struct block_q4_1x8 {
    uint16_t d[8];
    uint16_t m[8];
    uint8_t qs[128];
} block_q4_1x8;

/* Q5_1 x8: Q5_0 x8 with the rows' f16 offsets m[r] after their scales;
 * w = d * q + m, q in 0..31. */
typedef struct block_q5_1x8 {
    uint16_t d[8];
    uint16_t m[8];
    uint8_t qs[128];
    uint8_t qh[32];
} block_q5_1x8;

/* Q8_0 x8: qs[32 j + 4 r + e], j = 0..7, e = 0..3: row r's element 4j + e.
 * Codes are in [-127, 127] (tensor_pack refuses -128). */
typedef struct block_q8_0x8 {
    uint16_t d[8];
    int8_t qs[256];
} block_q8_0x8;

/* Q4_K x8: super-block b of rows 0..7 (8 sub-blocks s of 32 elements).
 *   d[r], dmin[r]: row r's f16 scales.
 *   sc[8 s + r]: row r's 6-bit scale of sub-block s (0..63).
 *   mn[16 p + 2 r + k], p = 0..3, k = 0..1: row r's 6-bit min of sub-block
 *   2p + k (pairs, so that a madd with two sub-blocks' activation sums
 *   gives int32 lane r).
 *   qs[128 s + 32 m + 4 r + e], m = 0..3, e = 0..3: low nibble = row r's
 *   code (0..15) of element 32 s + 8 m + e, high nibble = of element
 *   32 s + 8 m + 4 + e.
 * w = d * sc_s * q - dmin * mn_s, as in Q4_K. */
typedef struct block_q4_kx8 {
    uint16_t d[8];
    uint16_t dmin[8];
    uint8_t sc[64];
    uint8_t mn[64];
    uint8_t qs[1024];
} block_q4_kx8;

/* Q6_K x8: super-block b of rows 0..7 (8 sub-blocks s of 32 elements, 16
 * scale groups g of 16).
 *   d[r]: row r's f16 scale.
 *   sc[8 g + r]: row r's int8 scale of elements 16 g .. 16 g + 15.
 *   Code vector j = 0..7 of sub-block s holds in byte 4r + e row r's code
 *   (0..63, value q - 32) of element 32 s + 8 (j / 2) + 4 (j % 2) + e:
 *   sb[s].ql[32 m + 4 r + e]: low nibble = the low 4 bits of vector
 *   j = 2m's code, high nibble = of vector 2m + 1's (as Q4_K's qs);
 *   sb[s].qh[32 h + 4 r + e]: bits 2k, 2k + 1 = the high 2 bits of vector
 *   j = 4h + k's code.
 * A sub-block's low and high bits are adjacent (192 bytes), so a kernel
 * reads its block as one ascending stream: with the low bits of all
 * sub-blocks first and the high bits after them (two streams 1 KB apart),
 * matrix x vector from memory ran at less than half the rate (AMD Zen 4,
 * bench_x8).
 * w = d * sc_g * (q - 32), as in Q6_K. */
typedef struct block_q6_kx8 {
    uint16_t d[8];
    int8_t sc[128];
    struct {
        uint8_t ql[128];
        uint8_t qh[64];
    } sb[8];
} block_q6_kx8;

/* Q5_K x8: Q4_K x8's scales and mins, then per sub-block s
 *   sb[s].qs[32 m + 4 r + e]: the low 4 bits of the codes, as Q4_K x8's
 *   qs[128 s + 32 m + 4 r + e];
 *   sb[s].qh[4 r + e]: bit j = bit 4 of row r's code in code vector j
 *   (0..7) of sub-block s, i.e. of element 32 s + 8 (j / 2) + 4 (j % 2) + e
 *   (vector j = 2m's low 4 bits are sb[s].qs[32 m + 4 r + e]'s low
 *   nibble, vector 2m + 1's its high nibble).
 * A sub-block's low and high bits are adjacent, so a kernel reads its block
 * as one ascending stream (Q6_K x8 says why).
 * w = d * sc_s * q - dmin * mn_s, q in 0..31, as in Q5_K. */
typedef struct block_q5_kx8 {
    uint16_t d[8];
    uint16_t dmin[8];
    uint8_t sc[64];
    uint8_t mn[64];
    struct {
        uint8_t qs[128];
        uint8_t qh[32];
    } sb[8];
} block_q5_kx8;

/* IQ4_NL x8: as Q4_0 x8, the nibbles being indices into
 * tensor_iq4nl_values (w = d * value[q]). */
typedef struct block_iq4_nlx8 {
    uint16_t d[8];
    uint8_t qs[128];
} block_iq4_nlx8;

/* MXFP4 x8: block b of rows 0..7: e[r] row r's E8M0 exponent, qs as
 * IQ4_NL x8's, indices into tensor_mxfp4_values (twice the E2M1 values):
 * w = 2^(e - 128) * value[q] (tensor_e8m0_half). */
typedef struct block_mxfp4x8 {
    uint8_t e[8];
    uint8_t qs[128];
} block_mxfp4x8;

/* IQ4_XS x8: super-block b of rows 0..7 (8 sub-blocks s of 32).
 *   d[r]: row r's f16 scale.
 *   sc[8 s + r]: row r's scale of sub-block s, ls - 32 (-32..31).
 *   qs[]: the indices, interleaved as Q4_K x8's codes.
 * w = d * sc_s * value[q], as in IQ4_XS.
 *
 * IQ3_XXS x8, IQ3_S x8, IQ2_XXS x8 and IQ1_S x8 are this block too, with
 *   d[r]: the source block's f16 d;
 *   sc[8 s + r]: the sub-block's scale 2 s' + 1 (1..31; the source's two
 *   16-element halves of a 32-element sub-block share it);
 *   qs[]: indices into the type's table of signed codebook values,
 *   tensor_iq3xxs_x8_values (magnitudes 4..62), tensor_iq3s_x8_values
 *   (1..15), tensor_iq2xxs_x8_values (8, 25, 43), tensor_iq1s_x8_values
 *   (1, 7, 9; IQ1_S's 8 v + delta): index k is magnitude k & 7, negated
 *   when k & 8;
 * w = d * sc_s * f * value[q] with f = 1/4 (IQ3_XXS), 1 (IQ3_S) or 1/8,
 * the source's weights exactly. TQ1_0 x8 and TQ2_0 x8 are this block with
 * every scale 1, f = 1 and the indices into tensor_tq_x8_values (-1, 0, 1
 * and TQ2_0's 2). */
typedef struct block_iq4_xsx8 {
    uint16_t d[8];
    int8_t sc[64];
    uint8_t qs[1024];
} block_iq4_xsx8;

/* IQ2_XS x8, IQ2_S x8, IQ1_M x8: the IQ2_XXS x8 (IQ1_M: IQ1_S x8) block
 * with a scale per 16 elements:
 *   sc[8 h + r]: row r's scale 2 s' + 1 of 16-element sub-block h (0..15);
 *   d, qs as in IQ4_XS x8, the indices into tensor_iq2xxs_x8_values
 *   (IQ1_M: tensor_iq1s_x8_values).
 * Q3_K x8 is this block too: d[r] the source's d, sc[8 h + r] its scale
 * sc - 32 of sub-block h (-32..31), the indices into tensor_q3k_x8_values
 * (the codes q - 4, -4..3), f = 1: w = d * (sc - 32) * (q - 4) exactly. */
typedef struct block_iq_s16x8 {
    uint16_t d[8];
    int8_t sc[128];
    uint8_t qs[1024];
} block_iq_s16x8;

extern const int8_t tensor_iq3xxs_x8_values[16];
extern const int8_t tensor_iq3s_x8_values[16];
extern const int8_t tensor_iq2xxs_x8_values[16];
extern const int8_t tensor_iq1s_x8_values[16];
extern const int8_t tensor_tq_x8_values[16];
extern const int8_t tensor_q3k_x8_values[16];

/* F16 / BF16 x8: a block is 8 elements of rows 0..7,
 *   w[8 j + r], j = 0..7: row r's element j (the type's 16-bit value,
 *   unchanged).
 * 8 consecutive halves are float lane r = row r of an 8-lane vector, all
 * lanes multiplied by the same activation element. */
#define TENSOR_X8_HALF_ELEMS 8
typedef struct block_halfx8 {
    uint16_t w[8 * TENSOR_X8_HALF_ELEMS];
} block_halfx8;

_Static_assert(sizeof(block_q4_0x8) == 8 * sizeof(block_q4_0), "Q4_0x8 is 8 Q4_0 blocks");
_Static_assert(sizeof(block_q5_0x8) == 8 * sizeof(block_q5_0), "Q5_0x8 is 8 Q5_0 blocks");
_Static_assert(sizeof(block_q4_1x8) == 8 * sizeof(block_q4_1), "Q4_1x8 is 8 Q4_1 blocks");
_Static_assert(sizeof(block_q5_1x8) == 8 * sizeof(block_q5_1), "Q5_1x8 is 8 Q5_1 blocks");
_Static_assert(sizeof(block_q2_kx8) == 8 * sizeof(block_q2_k), "Q2_Kx8 is 8 Q2_K blocks");
_Static_assert(sizeof(block_q6_kx8) == 8 * sizeof(block_q6_k), "Q6_Kx8 is 8 Q6_K blocks");
_Static_assert(sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0), "Q8_0x8 is 8 Q8_0 blocks");
_Static_assert(sizeof(block_q4_kx8) == 1184, "Q4_Kx8 is 8 Q4_K blocks + 32 bytes");
_Static_assert(sizeof(block_iq4_nlx8) == 8 * sizeof(block_iq4_nl), "IQ4_NLx8 is 8 IQ4_NL blocks");
_Static_assert(sizeof(block_mxfp4x8) == 136, "MXFP4x8 is 8 MXFP4 blocks");
_Static_assert(sizeof(block_iq4_xsx8) == 8 * sizeof(block_iq4_xs) + 16, "IQ4_XSx8 is 8 IQ4_XS blocks + 16 bytes");
_Static_assert(sizeof(block_q5_kx8) == 8 * sizeof(block_q5_k) + 32, "Q5_Kx8 is 8 Q5_K blocks + 32 bytes");

/* Most tokens one kernel call takes, at any level (a level's own limit is
 * tensor_x8_kernels.max_t). */
#define TENSOR_X8_MAX_T 8

/* One group (8 rows) x nt tokens, 1 <= nt <= the level's max_t:
 *   y[t * ys + r] = dot(row r of the group, token t)   (r < 8, t < nt)
 * n: elements per row; w: the group's first interleaved block; x: token 0's
 * activation row (the type's vec_dot_type), tokens xs bytes apart. */
typedef void (*tensor_x8_fn)(int64_t n, const void *w, const void *x, size_t xs, float *y,
                             size_t ys, int nt);

/* Two consecutive groups (16 rows) x nt tokens: as tensor_x8_fn with w the
 * first group, the second gs bytes after it, and r < 16. Every pair gets
 * the same bits as from two one-group calls. */
typedef void (*tensor_x8_pair_fn)(int64_t n, const void *w, size_t gs, const void *x,
                                  size_t xs, float *y, size_t ys, int nt);

/* A level's kernels for one type. */
typedef struct tensor_x8_kernels {
    tensor_x8_fn one;
    tensor_x8_pair_fn pair;  /* NULL: the level has only `one` */
    int max_t;               /* most tokens per call, <= TENSOR_X8_MAX_T (the AMX
                                kernels: TENSOR_X8_AMX_T) */
} tensor_x8_kernels;

/* Packs 8 source rows (GGUF layout, src_row_bytes apart, n elements each)
 * into one group at dst. False when a value does not fit the layout. */
typedef bool (*tensor_x8_pack_fn)(const void *src, size_t src_row_bytes, int64_t n, void *dst);

/* Per type: the packer and the kernels. Defined in pack_<type>.c. */
bool tensor_x8_pack_q4_0(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q5_0(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q4_1(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q5_1(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q8_0(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q4_k(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q6_k(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q5_k(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq4_nl(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_mxfp4(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq4_xs(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq3_xxs(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq3_s(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq2_xxs(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq1_s(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq2_xs(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_tq1_0(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_tq2_0(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq2_s(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_iq1_m(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q2_k(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_q3_k(const void *src, size_t src_row_bytes, int64_t n, void *dst);
bool tensor_x8_pack_half(const void *src, size_t src_row_bytes, int64_t n, void *dst); /* F16, BF16 */

/* Row r (0..7) of one packed group of n elements per row back in its GGUF
 * layout at dst (pack_unpack.c's row_<type> for the types of their own
 * files). */
void tensor_x8_row_q2_k(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_q5_0(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_q4_1(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_q5_1(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_q5_k(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_iq4_nl(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_mxfp4(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_iq4_xs(const void *group, int64_t n, int r, void *dst);
void tensor_x8_row_half(const void *group, int64_t n, int r, void *dst);

void tensor_x8_q4_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q5_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q4_1_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q5_1_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q8_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q4_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q6_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q5_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_mxfp4_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq4_nl_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                             size_t ys, int nt);
void tensor_x8_iq3_xxs_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                              size_t ys, int nt);
void tensor_x8_iq3_s_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq2_xxs_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                              size_t ys, int nt);
void tensor_x8_iq1_s_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq2_xs_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                             size_t ys, int nt);
void tensor_x8_tq1_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_tq2_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq2_s_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq1_m_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_q2_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_q3_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_iq4_xs_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                             size_t ys, int nt);
void tensor_x8_f16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_bf16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);

#if defined(__x86_64__)
/* Compiled for avx2+fma+f16c; call only where strata_cpu_level() allows. */
void tensor_x8_q4_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q5_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q4_1_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q5_1_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q8_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q4_k_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q6_k_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q5_k_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_mxfp4_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_iq4_nl_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_iq3_xxs_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq3_s_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_iq2_xxs_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                            size_t ys, int nt);
void tensor_x8_iq1_s_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_iq2_xs_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_tq1_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_tq2_0_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_iq2_s_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_iq1_m_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_q2_k_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_q3_k_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_iq4_xs_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
/* F16 / BF16 (pack_bf16.c): one group and up to TENSOR_X8_MAX_T tokens at
 * AVX2; one group and pairs, up to TENSOR_X8_HALF_AVX512_MAX_T tokens, at
 * AVX-512. */
#define TENSOR_X8_HALF_AVX512_MAX_T 8
void tensor_x8_f16_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                        size_t ys, int nt);
void tensor_x8_bf16_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                         size_t ys, int nt);
void tensor_x8_f16_avx512(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt);
void tensor_x8_bf16_avx512(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt);
void tensor_x8_f16_avx512_pair(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                               float *y, size_t ys, int nt);
void tensor_x8_bf16_avx512_pair(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, int nt);

/* Compiled for AVX-512 F/BW/VL/VNNI (pack_avx512.c); call only where
 * strata_cpu_level() says AVX512. One group and pairs, up to
 * TENSOR_X8_AVX512_MAX_T tokens. */
#define TENSOR_X8_AVX512_MAX_T 8
#define TENSOR_X8_AVX512_DECL(t)                                                             \
    void tensor_x8_##t##_avx512(int64_t n, const void *w, const void *x, size_t xs, float *y, \
                                size_t ys, int nt);                                          \
    void tensor_x8_##t##_avx512_pair(int64_t n, const void *w, size_t gs, const void *x,      \
                                     size_t xs, float *y, size_t ys, int nt)
TENSOR_X8_AVX512_DECL(q4_0);
TENSOR_X8_AVX512_DECL(q5_0);   /* pack_q5_0.c */
TENSOR_X8_AVX512_DECL(q4_1);   /* pack_q5_1.c */
TENSOR_X8_AVX512_DECL(q5_1);
TENSOR_X8_AVX512_DECL(q8_0);
TENSOR_X8_AVX512_DECL(q4_k);
TENSOR_X8_AVX512_DECL(q6_k);
TENSOR_X8_AVX512_DECL(q5_k);   /* pack_q5_k.c */
TENSOR_X8_AVX512_DECL(iq4_nl); /* pack_iq4.c */
TENSOR_X8_AVX512_DECL(mxfp4);
TENSOR_X8_AVX512_DECL(iq4_xs);
TENSOR_X8_AVX512_DECL(iq3_xxs);
TENSOR_X8_AVX512_DECL(iq3_s);
TENSOR_X8_AVX512_DECL(iq2_xxs);
TENSOR_X8_AVX512_DECL(iq1_s);
TENSOR_X8_AVX512_DECL(iq2_xs);
TENSOR_X8_AVX512_DECL(tq1_0);
TENSOR_X8_AVX512_DECL(tq2_0);
TENSOR_X8_AVX512_DECL(iq2_s);
TENSOR_X8_AVX512_DECL(iq1_m);
TENSOR_X8_AVX512_DECL(q3_k);
TENSOR_X8_AVX512_DECL(q2_k);   /* pack_q2_k.c */
/* AMX (pack_amx.c): Q8_0, Q4_0 and Q4_K, one group and pairs, up to
 * TENSOR_X8_AMX_T tokens, the tile unit for exactly that many and the
 * AVX-512 kernels for fewer. Call only where strata_cpu_amx() is true. */
#define TENSOR_X8_AMX_T 16
void tensor_x8_q8_0_amx(int64_t n, const void *w, const void *x, size_t xs, float *y,
                        size_t ys, int nt);
void tensor_x8_q8_0_amx_pair(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                             float *y, size_t ys, int nt);
void tensor_x8_q4_0_amx(int64_t n, const void *w, const void *x, size_t xs, float *y,
                        size_t ys, int nt);
void tensor_x8_q4_0_amx_pair(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                             float *y, size_t ys, int nt);
void tensor_x8_q4_k_amx(int64_t n, const void *w, const void *x, size_t xs, float *y,
                        size_t ys, int nt);
void tensor_x8_q4_k_amx_pair(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                             float *y, size_t ys, int nt);
void tensor_x8_q4_0_quantize_act_avx512(const float *x, void *dst, int64_t n);
void tensor_x8_q5_0_quantize_act_avx512(const float *x, void *dst, int64_t n);
void tensor_x8_q8_0_quantize_act_avx512(const float *x, void *dst, int64_t n);
void tensor_x8_q8_k_quantize_act_avx2(const float *x, void *dst, int64_t n);
#endif

/* The scalar references of the 32-element types (Q4_0, Q8_0, with Q8_0
 * activations) share their frame: the float steps above, per token, block
 * and row, around isum(block, r, codes), the exact dot product of row r of
 * an interleaved block with a block's 32 activation codes. Both block
 * structs start with the 8 rows' f16 scales. */
typedef int32_t (*tensor_x8_isum32_fn)(const void *block, int r, const int8_t *xq);
void tensor_x8_scalar32(int64_t n, const void *w, size_t block_bytes, tensor_x8_isum32_fn isum,
                        const void *x, size_t xs, float *y, size_t ys, int nt);

/* The x8 kernels for a plain type at exactly `level` (no fallback), or
 * NULL. For tests and benchmarks; tensor_matmul uses the process's level. */
const tensor_x8_kernels *tensor_x8_kernels_at(uint32_t type, enum strata_simd_level level);

/* The AMX kernels of a plain type (Q8_0, Q4_0, Q4_K), or NULL: for the type,
 * or where strata_cpu_amx() is false. tensor_matmul takes them at the
 * AVX512 level for 16 tokens or more; their bits are that level's. */
const tensor_x8_kernels *tensor_x8_kernels_amx(uint32_t type);

/* The kernels a product of n_tok tokens runs on at `level`: the AMX ones
 * for 16 tokens or more at the AVX512 level where they exist, else the
 * level's own or, where it has none, the highest lower level's. NULL for
 * a type without an x8 layout. tensor_matmul and tensor_matmul_tasks both
 * choose through it. */
const tensor_x8_kernels *tensor_x8_kernels_for(uint32_t type, enum strata_simd_level level,
                                               int64_t n_tok);

/* The activation rows a packed matmul reads (x above): the rows of the
 * type's vec_dot_type (Q8_0 for Q4_0, Q5_0, Q8_0 and IQ4_NL, Q8_K for Q4_K, Q5_K, Q6_K and
 * IQ4_XS (and Q2_K, Q3_K and the other IQ types), Q8_1 for Q4_1 and Q5_1, F32 for F16 and BF16, each row padded with 64 bytes
 * that nothing reads), except that a row of Q8_0 blocks is followed, from the next
 * 4-byte boundary (tensor_x8_sums_offset), by one int32 per block: the sum of the block's
 * activation codes times -8 (Q4_0), -16 (Q5_0) or -128 (Q8_0, IQ4_NL, MXFP4), then
 * (tensor_x8_scales_offset) by one float per block: its scale d widened from f16. The
 * kernels that keep the weight codes unsigned (Q4_0's and Q5_0's q, Q8_0's q + 128 at
 * AVX-512) take that offset off with it; the others ignore it. The AVX2 and AVX-512
 * tiles of Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4 read the float scales (a broadcast load
 * instead of a conversion per block and token; the same value, so the same bits); the
 * AMX step still widens the f16 one. Bytes per row of n
 * elements (0 for a type without an x8 layout), and the function that
 * fills one from n floats at `level` or the best one below it (NULL for
 * such a type): every level writes the same bytes. */
size_t tensor_x8_act_row_bytes(uint32_t type, int64_t n);
tensor_quant_fn tensor_x8_act_quant(uint32_t type, enum strata_simd_level level);
size_t tensor_x8_sums_offset(int64_t n);
size_t tensor_x8_scales_offset(int64_t n);
/* Block ib's scale as a float from such a row (scales_off: tensor_x8_scales_offset). */
static inline float tensor_x8_act_scale(const void *row, size_t scales_off, int64_t ib)
{
    float d;
    memcpy(&d, (const char *)row + scales_off + sizeof(float) * (size_t)ib, sizeof d);
    return d;
}
void tensor_x8_q4_0_quantize_act(const float *x, void *dst, int64_t n);
void tensor_x8_q5_0_quantize_act(const float *x, void *dst, int64_t n);
void tensor_x8_f32_act(const float *x, void *dst, int64_t n); /* F16, BF16: a copy */

/* BF16 weights (x8 layout) x bf16 activations by VDPBF16PS (pack_bf16.c):
 * not the float steps above, and not used by tensor_matmul (the activations
 * are rounded to bf16). Per (row, token) four sums s[k] (k < 4), each
 * taking per block the instruction's step on the pair 2k, 2k + 1:
 *   s = ftz(ftz(s + w1 * x1) + w0 * x0)   (exact products, inputs flushed)
 * then y = (s0 + s1) + (s2 + s3). The activation row (tensor_x8_bf16_dot_act,
 * tensor_x8_bf16_dot_act_bytes) holds, per block b and pair k, 16 halves:
 * the bf16 values of elements 8 b + 2 k and 8 b + 2 k + 1, repeated for the
 * 8 rows (128 bytes per 8 elements), so a kernel loads it as it loads the
 * weights. The AVX-512 kernel needs strata_cpu_get()->avx512bf16; nt <=
 * TENSOR_X8_BF16_DOT_MAX_T. */
#define TENSOR_X8_BF16_DOT_MAX_T 6
void tensor_x8_bf16_dot_act(const float *x, void *dst, int64_t n);
size_t tensor_x8_bf16_dot_act_bytes(int64_t n);
void tensor_x8_bf16_dot_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                               size_t ys, int nt);
#if defined(__x86_64__)
void tensor_x8_bf16_dot_avx512bf16(int64_t n, const void *w, const void *x, size_t xs, float *y,
                                   size_t ys, int nt);
#endif
void tensor_x8_q8_0_quantize_act(const float *x, void *dst, int64_t n);

/* Bytes of one interleaved block of 8 rows, and elements per source block;
 * 0 for a type without an x8 layout. */
size_t tensor_x8_block_bytes(uint32_t type);
int tensor_x8_block_elems(uint32_t type);

#endif
