/* Shared between dequant.c, quantize.c, quantize_k.c, quant_search.c and
 * pack_q4_k.c (which unpacks Q4_K scales); not part of the tensor layer's
 * interface.
 *
 * Holds the bit packing helpers that the encoder and decoder must agree on
 * (one definition, so they cannot drift apart), the per-type row functions
 * that the dispatch tables of dequant.c and quantize.c point at, and the
 * scale searches of quant_search.c. */
#ifndef STRATA_TENSOR_QUANT_INTERNAL_H
#define STRATA_TENSOR_QUANT_INTERNAL_H

#include "base/err.h"
#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

/* --- packing helpers --- */

/* Sub-block j (0..7) of the 12-byte scale field of Q4_K/Q5_K: 6-bit scale
 * and 6-bit min. Sub-blocks 0..3 keep both in the low 6 bits of bytes j and
 * j + 4; sub-blocks 4..7 keep their low 4 bits in the nibbles of byte j + 4
 * and their top 2 bits in the spare top bits of bytes j - 4 and j. */
static inline void tensor_k_scale_get(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Packs 8 scales and 8 mins (each 0..63) into the 12-byte field. */
static inline void tensor_k_scale_put(uint8_t *s, const uint8_t *sc, const uint8_t *mn)
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
}

/* Scale j (0..15) of Q3_K as stored (0..63; the signed scale is this - 32). */
static inline int tensor_q3k_scale_get(const uint8_t *s, int j)
{
    int lo = (s[j % 8] >> (4 * (j / 8))) & 15;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return lo | (hi << 4);
}

/* Packs 16 stored Q3_K scales (each 0..63) into 12 bytes. */
static inline void tensor_q3k_scale_put(uint8_t *s, const uint8_t *stored)
{
    for (int k = 0; k < 12; k++)
        s[k] = 0;
    for (int j = 0; j < 16; j++) {
        s[j % 8] |= (uint8_t)((stored[j] & 15) << (4 * (j / 8)));
        s[8 + j % 4] |= (uint8_t)(((stored[j] >> 4) & 3) << (2 * (j / 4)));
    }
}

/* The 32-bit little-endian high-bit word of Q5_0/Q5_1. */
static inline uint32_t tensor_load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void tensor_store_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* --- rounding and f16 storage for the quantizers --- */

/* round(x) clamped to [lo, hi]; NaN gives lo. Rounding is to nearest with
 * ties to even (rintf under the default rounding mode, which nothing in
 * Strata changes), the rounding SIMD conversions use, so vector variants can
 * match this reference bit for bit. Written so that no out-of-range float is
 * ever converted to int (that would be undefined behaviour). */
static inline int tensor_round_clamp(float x, int lo, int hi)
{
    if (!(x > (float)lo))
        return lo;
    if (x >= (float)hi)
        return hi;
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    /* |x| < 2^22 here: adding 1.5 * 2^23 leaves no fraction bits, so the
     * addition itself rounds x to nearest even, exactly as rintf does, but
     * inline (rintf is a library call without SSE4.1). Needs float
     * arithmetic evaluated in float, hence the FLT_EVAL_METHOD check. */
    return (int)((x + 12582912.0f) - 12582912.0f);
#else
    return (int)rintf(x);
#endif
}

/* float -> f16 bits, saturating finite values at +-65504 instead of rounding
 * them to infinity: a scale stored in a block must stay finite. */
static inline uint16_t tensor_f32_to_f16_sat(float f)
{
    if (f > 65504.0f)
        f = 65504.0f;
    else if (f < -65504.0f)
        f = -65504.0f;
    return tensor_f32_to_f16(f);
}

/* --- scale searches (quant_search.c) --- */

/* A ladder of reconstruction levels for a scale search: codes start at
 * level v0 (the level nearest zero) and walk up through up[1..n_up] or down
 * through down[1..n_down] as |x / scale| grows. Uniform ladders (table NULL)
 * have levels k and -k; table ladders take the levels from an ascending
 * table around index `start`. */
typedef struct tensor_ladder {
    const int8_t *table; /* NULL: uniform integer levels */
    int start;           /* index of the starting level in table */
    int n_up, n_down;    /* levels above and below the start */
} tensor_ladder;

/* Uniform codes lo..hi (lo <= 0 <= hi). */
static inline tensor_ladder tensor_ladder_uniform(int lo, int hi)
{
    tensor_ladder l = {NULL, 0, hi, -lo};
    return l;
}

/* The IQ4_NL grid. */
static inline tensor_ladder tensor_ladder_iq4(void)
{
    tensor_ladder l = {tensor_iq4nl_values, 8, 7, 8};
    return l;
}

#define TENSOR_SEARCH_MAX_N 32 /* largest group one search takes */

/* The scale D minimising sum_i w_i (x_i - D * v_i)^2 over D and the codes
 * v_i on the ladder (each v_i the level nearest x_i / D). Exact global
 * optimum (see quant_search.c). w may be NULL for unit weights; n <= 32.
 * Returns 0 when every x is 0. */
float tensor_search_scale(const float *x, const float *w, int n, const tensor_ladder *lad);

/* The same, over scales with 1/|D| in [t_lo, t_hi] only (the optimum within
 * that window; 0 if no state there has a nonzero level). */
float tensor_search_scale_in(const float *x, const float *w, int n, const tensor_ladder *lad,
                             float t_lo, float t_hi);

/* The affine fit x ~ s * q + m with codes q in 0..nmax and s >= 0 that
 * minimises sum_i w_i (x_i - s q_i - m)^2, by alternating an exact scale
 * search at fixed m with a least-squares refit of (s, m). With
 * min_nonpos, m is kept <= 0 (the K-quants store -m as an unsigned min).
 * Writes s and m. */
void tensor_search_affine(const float *x, const float *w, int n, int nmax, int min_nonpos,
                          float *s, float *m);

/* The level index (into the IQ4_NL table) nearest to v. */
int tensor_iq4_nearest(float v);

/* The f16 scale of a Q8_0 block whose largest |x| is amax (quantize.c):
 * amax / 127 rounded to f16 and raised one step where that rounding went
 * down so far that amax would not fit 127 codes. Shared with the SIMD
 * activation quantizers, which must give the same bytes. */
uint16_t tensor_q8_scale_f16(float amax);

/* The code of the ladder level nearest z: for uniform ladders the integer
 * level itself (-n_down..n_up), for table ladders the table index. */
static inline int tensor_ladder_nearest(const tensor_ladder *lad, float z)
{
    if (lad->table == NULL)
        return tensor_round_clamp(z, -lad->n_down, lad->n_up);
    return tensor_iq4_nearest(z);
}

/* The level a code stands for. */
static inline float tensor_ladder_value(const tensor_ladder *lad, int code)
{
    return lad->table == NULL ? (float)code : (float)lad->table[code];
}

/* --- row functions (n a whole number of blocks) --- */

#define TENSOR_ROW_FNS(name)                                                  \
    void tensor_dequant_row_##name(const void *src, float *dst, int64_t n); \
    void tensor_quant_row_##name(const float *src, void *dst, int64_t n);

TENSOR_ROW_FNS(f32)
TENSOR_ROW_FNS(f16)
TENSOR_ROW_FNS(bf16)
TENSOR_ROW_FNS(q4_0)
TENSOR_ROW_FNS(q4_1)
TENSOR_ROW_FNS(q5_0)
TENSOR_ROW_FNS(q5_1)
TENSOR_ROW_FNS(q8_0)
TENSOR_ROW_FNS(q8_1)
TENSOR_ROW_FNS(q2_k)
TENSOR_ROW_FNS(q3_k)
TENSOR_ROW_FNS(q4_k)
TENSOR_ROW_FNS(q5_k)
TENSOR_ROW_FNS(q6_k)
TENSOR_ROW_FNS(q8_k)
TENSOR_ROW_FNS(iq4_nl)
TENSOR_ROW_FNS(iq4_xs)
TENSOR_ROW_FNS(mxfp4)

#undef TENSOR_ROW_FNS

/* Decode-only types (dequant_iq.c): no encoder. (MXFP4's decoder is there
 * too; its encoder is in quantize.c.) */
#define TENSOR_DEQUANT_FN(name) void tensor_dequant_row_##name(const void *src, float *dst, int64_t n);
TENSOR_DEQUANT_FN(tq1_0)
TENSOR_DEQUANT_FN(tq2_0)
TENSOR_DEQUANT_FN(iq2_xxs)
TENSOR_DEQUANT_FN(iq2_xs)
TENSOR_DEQUANT_FN(iq2_s)
TENSOR_DEQUANT_FN(iq3_xxs)
TENSOR_DEQUANT_FN(iq3_s)
TENSOR_DEQUANT_FN(iq1_s)
TENSOR_DEQUANT_FN(iq1_m)
#undef TENSOR_DEQUANT_FN

/* The argument checks tensor_dequantize_row and tensor_quantize_row share,
 * for a row function fn of `type`: 0 to convert, 1 for an empty row
 * (nothing to do), or a negative code (STRATA_EUNSUPPORTED when fn is NULL,
 * STRATA_EINVAL for a bad length or a NULL pointer). */
static inline int tensor_row_check(const void *fn, uint32_t type, int64_t n, const void *src,
                                   const void *dst)
{
    if (fn == NULL) return STRATA_EUNSUPPORTED;
    const strata_type_info *ti = strata_type_get(type);
    if (n < 0 || n % ti->block_elems != 0) return STRATA_EINVAL;
    if (n == 0) return 1;
    if (src == NULL || dst == NULL) return STRATA_EINVAL;
    return 0;
}

#endif
