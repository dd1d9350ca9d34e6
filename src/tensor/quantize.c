/* Encoding float32 rows into GGUF tensor types: the float types, the legacy
 * blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1), IQ4_NL, MXFP4, and the
 * dispatch table. The K-quants and IQ4_XS are in quantize_k.c; the scale
 * searches in quant_search.c.
 *
 * Weight types choose each block's scale (and offset) with the exact
 * least-squares search, then store it as f16 and recompute every code as
 * the nearest level for the stored scale, so the codes are optimal for what
 * the decoder will actually use. Activation types (Q8_0, Q8_1, Q8_K) take
 * d = max|x| / 127 and round x / d: one pass, exact on the largest value,
 * and what the matmul kernels expect. */
#include "tensor/quant.h"
#include "tensor/blocks_iq.h"
#include "tensor/quant_internal.h"

#include <float.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* --- float types --- */

void tensor_quant_row_f32(const float *src, void *dst, int64_t n)
{
    memmove(dst, src, (size_t)n * sizeof(float));
}

void tensor_quant_row_f16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = tensor_f32_to_f16(src[i]);
}

void tensor_quant_row_bf16(const float *src, void *dst, int64_t n)
{
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = tensor_f32_to_bf16(src[i]);
}

/* --- helpers for blocks of 32 --- */

/* Stores 32 codes (0..15 each) in the nibble layout: element j in the low
 * half of qs[j], element j + 16 in the high half. */
static void pack_nibbles32(uint8_t *qs, const uint8_t *q)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

/* Stores 32 five-bit codes: low nibbles as above, bit 4 of code j in bit j
 * of the little-endian word qh. */
static void pack_5bit32(uint8_t *qs, uint8_t *qh, const uint8_t *q)
{
    uint8_t lo[TENSOR_QK];
    uint32_t hbits = 0;
    for (int j = 0; j < TENSOR_QK; j++) {
        lo[j] = q[j] & 15;
        hbits |= (uint32_t)(q[j] >> 4) << j;
    }
    pack_nibbles32(qs, lo);
    tensor_store_u32le(qh, hbits);
}

/* Symmetric block: x ~ d * c with codes c in lo..hi (lo = -hi - 1),
 * stored as c - lo. Returns the stored f16 scale and writes the stored
 * codes.
 *
 * When no code is lo, (-d, -c) decodes to the same values as (d, c). The
 * encoding is then made canonical: the first code of largest magnitude is
 * negative. Without this, re-encoding decoded data could flip the sign of
 * d (the search orients by the largest input, and after decoding two
 * elements can tie for it). */
static uint16_t quant_symmetric32(const float *x, int lo, int hi, uint8_t *q)
{
    const tensor_ladder lad = tensor_ladder_uniform(lo, hi);
    uint16_t dh = tensor_f32_to_f16_sat(tensor_search_scale(x, NULL, TENSOR_QK, &lad));
    float d = tensor_f16_to_f32(dh), inv = d != 0 ? 1.0f / d : 0.0f;
    int c[TENSOR_QK], first_big = 0, mirrorable = 1;
    for (int j = 0; j < TENSOR_QK; j++) {
        c[j] = tensor_round_clamp(x[j] * inv, lo, hi);
        mirrorable &= c[j] != lo;
        if (abs(c[j]) > abs(c[first_big]))
            first_big = j;
    }
    int flip = mirrorable && c[first_big] > 0;
    if (flip)
        dh ^= 0x8000u;
    for (int j = 0; j < TENSOR_QK; j++)
        q[j] = (uint8_t)((flip ? -c[j] : c[j]) - lo);
    return dh;
}

/* Affine block: x ~ d * q + m with codes q in 0..nmax. */
static void quant_affine32(const float *x, int nmax, uint16_t *dh, uint16_t *mh, uint8_t *q)
{
    float s, m;
    tensor_search_affine(x, NULL, TENSOR_QK, nmax, 0, &s, &m);
    *dh = tensor_f32_to_f16_sat(s);
    *mh = tensor_f32_to_f16_sat(m);
    float d = tensor_f16_to_f32(*dh), mm = tensor_f16_to_f32(*mh);
    float inv = d > 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < TENSOR_QK; j++)
        q[j] = (uint8_t)tensor_round_clamp((x[j] - mm) * inv, 0, nmax);
}

/* --- legacy weight types --- */

void tensor_quant_row_q4_0(const float *src, void *dst, int64_t n)
{
    block_q4_0 *b = dst;
    uint8_t q[TENSOR_QK];
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        b->d = quant_symmetric32(src, -8, 7, q);
        pack_nibbles32(b->qs, q);
    }
}

void tensor_quant_row_q5_0(const float *src, void *dst, int64_t n)
{
    block_q5_0 *b = dst;
    uint8_t q[TENSOR_QK];
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        b->d = quant_symmetric32(src, -16, 15, q);
        pack_5bit32(b->qs, b->qh, q);
    }
}

void tensor_quant_row_q4_1(const float *src, void *dst, int64_t n)
{
    block_q4_1 *b = dst;
    uint8_t q[TENSOR_QK];
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        quant_affine32(src, 15, &b->d, &b->m, q);
        pack_nibbles32(b->qs, q);
    }
}

void tensor_quant_row_q5_1(const float *src, void *dst, int64_t n)
{
    block_q5_1 *b = dst;
    uint8_t q[TENSOR_QK];
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        quant_affine32(src, 31, &b->d, &b->m, q);
        pack_5bit32(b->qs, b->qh, q);
    }
}

void tensor_quant_row_iq4_nl(const float *src, void *dst, int64_t n)
{
    block_iq4_nl *b = dst;
    const tensor_ladder lad = tensor_ladder_iq4();
    uint8_t q[TENSOR_QK];
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        b->d = tensor_f32_to_f16_sat(tensor_search_scale(src, NULL, TENSOR_QK, &lad));
        float d = tensor_f16_to_f32(b->d), inv = d != 0 ? 1.0f / d : 0.0f;
        /* with d == 0 every level decodes to 0 and z = 0 picks level 1 */
        for (int j = 0; j < TENSOR_QK; j++)
            q[j] = (uint8_t)tensor_iq4_nearest(src[j] * inv);
        pack_nibbles32(b->qs, q);
    }
}

/* --- activation types: max-abs --- */

/* The f16 scale for a block whose largest magnitude is amax and whose codes
 * reach +-127: amax / 127, rounded to f16 and bumped up one f16 step where
 * rounding (only in the f16 subnormal range) went down so far that amax
 * would no longer round to 127. */
uint16_t tensor_q8_scale_f16(float amax)
{
    uint16_t dh = tensor_f32_to_f16_sat(amax / 127.0f);
    float d = tensor_f16_to_f32(dh);
    if (d > 0 && d < 65504.0f && amax > 127.5f * d)
        dh++;
    return dh;
}

static float amax32(const float *x, int n)
{
    float amax = 0;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax)
            amax = a;
    }
    return amax;
}

/* Codes round(x / d) as x * (1 / d): the form vector kernels use. */
static int q8_codes(const float *x, float d, int8_t *q, int n)
{
    float id = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < n; j++) {
        q[j] = (int8_t)tensor_round_clamp(x[j] * id, -127, 127);
        sum += q[j];
    }
    return sum;
}

void tensor_quant_row_q8_0(const float *src, void *dst, int64_t n)
{
    block_q8_0 *b = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        b->d = tensor_q8_scale_f16(amax32(src, TENSOR_QK));
        q8_codes(src, tensor_f16_to_f32(b->d), b->qs, TENSOR_QK);
    }
}

void tensor_quant_row_q8_1(const float *src, void *dst, int64_t n)
{
    block_q8_1 *b = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        b->d = tensor_q8_scale_f16(amax32(src, TENSOR_QK));
        float d = tensor_f16_to_f32(b->d);
        int sum = q8_codes(src, d, b->qs, TENSOR_QK);
        /* s = sum of the decoded values, exact before the f16 rounding;
         * saturates (rather than overflowing to inf) past 65504. */
        b->s = tensor_f32_to_f16_sat(d * (float)sum);
    }
}

void tensor_quant_row_q8_k(const float *src, void *dst, int64_t n)
{
    block_q8_k *b = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++, src += TENSOR_QK_K) {
        /* float32 scale: no rounding step. A block so small that 1 / d
         * overflows (max |x| below ~4e-37) is stored as zeros. */
        float d = amax32(src, TENSOR_QK_K) / 127.0f;
        if (!(1.0f / d <= FLT_MAX))
            d = 0;
        b->d = d;
        q8_codes(src, d, b->qs, TENSOR_QK_K);
        for (int j = 0; j < TENSOR_QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)s;
        }
    }
}

/* MXFP4: a power-of-two scale 2^(e - 127) per 32 values and each value the
 * nearest of the 16 E2M1 codes times it. Two exponents are tried: the
 * smallest that holds the block's largest magnitude within the top code 6,
 * and the one below it (which clips the largest values to 6 but halves
 * every step); the one with the smaller squared error is kept (the larger on
 * a tie). A zero block takes e = 127 and zero codes; a non-finite largest
 * magnitude takes e = 254, the largest finite scale. */
static float mxfp4_codes(const float *x, uint8_t e, uint8_t *qs)
{
    const float d = tensor_e8m0_half(e); /* the table holds doubled values */
    float sse = 0;
    memset(qs, 0, 16);
    for (int j = 0; j < TENSOR_QK; j++) {
        int best = 0;
        float best_err = fabsf(x[j]);
        for (int q = 1; q < 16; q++) {
            float err = fabsf(x[j] - d * (float)tensor_mxfp4_values[q]);
            if (err < best_err) {
                best_err = err;
                best = q;
            }
        }
        sse += best_err * best_err;
        qs[j & 15] |= (uint8_t)(j < 16 ? best : best << 4);
    }
    return sse;
}

void tensor_quant_row_mxfp4(const float *src, void *dst, int64_t n)
{
    block_mxfp4 *b = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++, src += TENSOR_QK) {
        const float amax = amax32(src, TENSOR_QK);
        int e = 127;
        if (!(amax <= FLT_MAX)) {
            e = 254;
        } else if (amax > 0) {
            int k;
            const float m = frexpf(amax / 6.0f, &k); /* amax / 6 = m 2^k, m in [0.5, 1) */
            e = 127 + (m == 0.5f ? k - 1 : k);
        }
        e = e < 1 ? 1 : e > 254 ? 254 : e;
        uint8_t qs[16];
        b->e = (uint8_t)e;
        const float sse = mxfp4_codes(src, b->e, b->qs);
        if (amax > 0 && mxfp4_codes(src, (uint8_t)(e - 1), qs) < sse) {
            b->e = (uint8_t)(e - 1);
            memcpy(b->qs, qs, 16);
        }
    }
}

/* --- dispatch --- */

static const tensor_quant_fn k_quant[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = tensor_quant_row_f32,
    [STRATA_TYPE_F16] = tensor_quant_row_f16,
    [STRATA_TYPE_BF16] = tensor_quant_row_bf16,
    [STRATA_TYPE_Q4_0] = tensor_quant_row_q4_0,
    [STRATA_TYPE_Q4_1] = tensor_quant_row_q4_1,
    [STRATA_TYPE_Q5_0] = tensor_quant_row_q5_0,
    [STRATA_TYPE_Q5_1] = tensor_quant_row_q5_1,
    [STRATA_TYPE_Q8_0] = tensor_quant_row_q8_0,
    [STRATA_TYPE_Q8_1] = tensor_quant_row_q8_1,
    [STRATA_TYPE_Q2_K] = tensor_quant_row_q2_k,
    [STRATA_TYPE_Q3_K] = tensor_quant_row_q3_k,
    [STRATA_TYPE_Q4_K] = tensor_quant_row_q4_k,
    [STRATA_TYPE_Q5_K] = tensor_quant_row_q5_k,
    [STRATA_TYPE_Q6_K] = tensor_quant_row_q6_k,
    [STRATA_TYPE_Q8_K] = tensor_quant_row_q8_k,
    [STRATA_TYPE_IQ4_NL] = tensor_quant_row_iq4_nl,
    [STRATA_TYPE_IQ4_XS] = tensor_quant_row_iq4_xs,
    [STRATA_TYPE_MXFP4] = tensor_quant_row_mxfp4,
};

tensor_quant_fn tensor_get_quant(uint32_t type)
{
    return type < STRATA_TYPE_COUNT ? k_quant[type] : NULL;
}

bool tensor_type_supported(uint32_t type)
{
    return tensor_get_quant(type) != NULL && tensor_get_dequant(type) != NULL;
}

int tensor_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    tensor_quant_fn fn = tensor_get_quant(type);
    int rc = tensor_row_check((const void *)fn, type, n, src, dst);
    if (rc != 0) return rc < 0 ? rc : 0;
    fn(src, dst, n);
    return 0;
}
