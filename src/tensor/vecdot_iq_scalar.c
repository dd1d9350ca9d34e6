/* Scalar reference dot products for TQ1_0, TQ2_0, the IQ types
 * (activations Q8_K) and MXFP4 (activations Q8_0), in the scheme of vecdot_scalar.c: integer sums
 * of codes times activation codes per block, and float only for the scales,
 * once per block:
 *   TQ1_0, TQ2_0:  sum += (d_w * d_x) * (sum_i t_i x_i - sum_i x_i)
 *                  (t the stored ternary digit 0..2, w = d (t - 1); the
 *                  SIMD kernels take the sum of x from Q8_K's bsums, this
 *                  one sums (t - 1) x, the same integer);
 *   MXFP4:         sum += (2^(e-128) * d_x) * sum_i v_i x_i
 *                  (v twice the E2M1 value, an integer).
 *   IQ types:      see vd_iq below.
 * These define what the SIMD variants compute (vecdot_iq_avx2.c). */
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "gguf/types.h"
#include "tensor/iq_internal.h"
#include "tensor/matmul_kernels.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* TQ1_0, TQ2_0: the digits decoded by tensor_tq_decode (q = t - 1), whose
 * dot product is the same integer as sum_i t_i x_i - sum_i x_i. */
static float vd_tq(uint32_t type, size_t block_bytes, int64_t n, const void *w, const void *x)
{
    const block_q8_k *xb = x;
    tensor_iq_decoded dec;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        tensor_tq_decode(type, (const char *)w + (size_t)ib * block_bytes, &dec);
        int isum = 0;
        for (int i = 0; i < TENSOR_QK_K; i++) isum += dec.q[i] * xb[ib].qs[i];
        sum += (dec.d * xb[ib].d) * (float)isum;
    }
    return sum;
}

static float vd_tq1_0(int64_t n, const void *w, const void *x)
{
    return vd_tq(STRATA_TYPE_TQ1_0, sizeof(block_tq1_0), n, w, x);
}

static float vd_tq2_0(int64_t n, const void *w, const void *x)
{
    return vd_tq(STRATA_TYPE_TQ2_0, sizeof(block_tq2_0), n, w, x);
}

static float vd_mxfp4(int64_t n, const void *w, const void *x)
{
    const block_mxfp4 *wb = w;
    const block_q8_0 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++)
            isum += tensor_mxfp4_values[wb[ib].qs[j] & 15] * xb[ib].qs[j] +
                    tensor_mxfp4_values[wb[ib].qs[j] >> 4] * xb[ib].qs[j + 16];
        sum += (tensor_e8m0_half(wb[ib].e) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
    }
    return sum;
}

/* The IQ types x Q8_K: decode the super-block (iq_internal.h), then
 *   isum = sum_s ls_s * sum_{i in s} q_i x_i   (16-element sub-blocks)
 *   sum += ((d_w * d_x) * f) * isum. */
static float vd_iq(uint32_t type, size_t block_bytes, int64_t n, const void *w, const void *x)
{
    const block_q8_k *xb = x;
    const float f = 1.0f / (float)(1 << tensor_iq_f_shift(type));
    tensor_iq_decoded dec;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        tensor_iq_decode(type, (const char *)w + (size_t)ib * block_bytes, &dec);
        int isum = 0;
        for (int s = 0; s < 16; s++) {
            int d16 = 0;
            for (int i = 16 * s; i < 16 * s + 16; i++)
                d16 += dec.q[i] * xb[ib].qs[i];
            isum += dec.ls[s] * d16;
        }
        sum += ((dec.d * xb[ib].d) * f) * (float)isum;
    }
    return sum;
}

#define VD_IQ(name, TYPE)                                                  \
    static float vd_##name(int64_t n, const void *w, const void *x)       \
    {                                                                      \
        return vd_iq(STRATA_TYPE_##TYPE, sizeof(block_##name), n, w, x);   \
    }

VD_IQ(iq2_xxs, IQ2_XXS)
VD_IQ(iq2_xs, IQ2_XS)
VD_IQ(iq2_s, IQ2_S)
VD_IQ(iq3_xxs, IQ3_XXS)
VD_IQ(iq3_s, IQ3_S)
VD_IQ(iq1_s, IQ1_S)
VD_IQ(iq1_m, IQ1_M)

#define SCALAR_SET(t) \
    const tensor_mm_kernels tensor_mmk_##t##_scalar = { \
        .name = #t "/scalar", .vec_dot = vd_##t, .rows_r = 1, .tile_r = 1, .tile_t = 1}

SCALAR_SET(tq1_0);
SCALAR_SET(tq2_0);
SCALAR_SET(mxfp4);
SCALAR_SET(iq2_xxs);
SCALAR_SET(iq2_xs);
SCALAR_SET(iq2_s);
SCALAR_SET(iq3_xxs);
SCALAR_SET(iq3_s);
SCALAR_SET(iq1_s);
SCALAR_SET(iq1_m);
