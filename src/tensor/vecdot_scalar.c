/* Scalar reference dot products for tensor_matmul: one function per weight
 * type, dot(weight row, activation row) with the activation row already in
 * the type's vec_dot_type (matmul.c's table). Portable C11, written for
 * clarity: these define what the SIMD variants must compute, and are the
 * kernels on hosts without them.
 *
 * Quantized types: each block's (or sub-block's) codes are multiplied with
 * the activation codes in exact integer arithmetic; float only enters for
 * the scales, once per block (legacy types) or per super-block (K-quants):
 *   sum += (d_w * d_x) * isum            (and the min/offset terms).
 * F32/F16/BF16: the activations stay float32 (no scratch); each product is
 * formed in float (exact for f16/bf16 weights: their values are floats) and
 * the sum is kept in double, so this reference is more accurate than any
 * SIMD variant, not just different.
 *
 * Every kernel set here has a 1x1 shape only: the driver then computes
 * every pair with vec_dot, which is batch invariant by construction. */
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/matmul_kernels.h"

#include <string.h>

/* No fused multiply-adds behind our back: the sums below must be the same
 * whatever the compiler's contraction default (clang contracts by default;
 * gcc in ISO C mode does not). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* --- float types (activations F32) --- */

static float vd_f32(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(a[i] * b[i]);
    return (float)sum;
}

static float vd_f16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)tensor_f16_to_f32(a[i]) * (double)b[i];
    return (float)sum;
}

static float vd_bf16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w;
    const float *b = x;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)tensor_bf16_to_f32(a[i]) * (double)b[i];
    return (float)sum;
}

/* --- legacy 32-element blocks --- */

/* Q4_0 x Q8_0: w = d (q - 8). */
static float vd_q4_0(int64_t n, const void *w, const void *x)
{
    const block_q4_0 *wb = w;
    const block_q8_0 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++) {
            int lo = (wb[ib].qs[j] & 15) - 8, hi = (wb[ib].qs[j] >> 4) - 8;
            isum += lo * xb[ib].qs[j] + hi * xb[ib].qs[j + 16];
        }
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
    }
    return sum;
}

/* Q4_1 x Q8_1: w = d q + m; sum_i w_i x_i = d dx sum q y + m (dx sum y),
 * and the Q8_1 block carries s = dx sum y. */
static float vd_q4_1(int64_t n, const void *w, const void *x)
{
    const block_q4_1 *wb = w;
    const block_q8_1 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++)
            isum += (wb[ib].qs[j] & 15) * xb[ib].qs[j] + (wb[ib].qs[j] >> 4) * xb[ib].qs[j + 16];
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
        sum += tensor_f16_to_f32(wb[ib].m) * tensor_f16_to_f32(xb[ib].s);
    }
    return sum;
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Q5_0 x Q8_0: w = d (q - 16), bit 4 of q[j] is bit j of qh. */
static float vd_q5_0(int64_t n, const void *w, const void *x)
{
    const block_q5_0 *wb = w;
    const block_q8_0 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        uint32_t qh = load_u32le(wb[ib].qh);
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++) {
            int lo = ((wb[ib].qs[j] & 15) | (int)((qh >> j) & 1) << 4) - 16;
            int hi = ((wb[ib].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
            isum += lo * xb[ib].qs[j] + hi * xb[ib].qs[j + 16];
        }
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
    }
    return sum;
}

/* Q5_1 x Q8_1: w = d q + m, q in 0..31. */
static float vd_q5_1(int64_t n, const void *w, const void *x)
{
    const block_q5_1 *wb = w;
    const block_q8_1 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        uint32_t qh = load_u32le(wb[ib].qh);
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++) {
            int lo = (wb[ib].qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (wb[ib].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            isum += lo * xb[ib].qs[j] + hi * xb[ib].qs[j + 16];
        }
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
        sum += tensor_f16_to_f32(wb[ib].m) * tensor_f16_to_f32(xb[ib].s);
    }
    return sum;
}

/* Q8_0 x Q8_0. */
static float vd_q8_0(int64_t n, const void *w, const void *x)
{
    const block_q8_0 *wb = w;
    const block_q8_0 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int isum = 0;
        for (int j = 0; j < TENSOR_QK; j++)
            isum += wb[ib].qs[j] * xb[ib].qs[j];
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
    }
    return sum;
}

/* IQ4_NL x Q8_0: w = d * values[q]. */
static float vd_iq4_nl(int64_t n, const void *w, const void *x)
{
    const block_iq4_nl *wb = w;
    const block_q8_0 *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int isum = 0;
        for (int j = 0; j < TENSOR_QK / 2; j++)
            isum += tensor_iq4nl_values[wb[ib].qs[j] & 15] * xb[ib].qs[j] +
                    tensor_iq4nl_values[wb[ib].qs[j] >> 4] * xb[ib].qs[j + 16];
        sum += (tensor_f16_to_f32(wb[ib].d) * tensor_f16_to_f32(xb[ib].d)) * (float)isum;
    }
    return sum;
}

/* --- K-quants and IQ4_XS (256-element super-blocks, activations Q8_K) ---
 *
 * Each decodes a super-block's codes into q[256] (as the unsigned code the
 * format stores, before any offset), then forms per sub-block
 *   isum = sum_s sc_s * sum_{i in s} q_i x_i
 *   imin = sum_s mn_s * sum_{i in s} x_i   (from Q8_K's bsums, per 16)
 * and adds d dx isum - dmin dx imin. Offsets of signed codes (Q3_K's -4,
 * Q6_K's -32) fold into imin the same way, with mn_s = offset * sc_s. */

/* sum of q[i] x[i] over [i0, i0 + len) */
static int dot_i8(const int8_t *q, const int8_t *x, int i0, int len)
{
    int s = 0;
    for (int i = i0; i < i0 + len; i++)
        s += q[i] * x[i];
    return s;
}

static float vd_q2_k(int64_t n, const void *w, const void *x)
{
    const block_q2_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int i = 0; i < TENSOR_QK_K; i++)
            q[i] = (int8_t)((wb[ib].qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3);
        int isum = 0, imin = 0;
        for (int s = 0; s < 16; s++) {
            isum += (wb[ib].scales[s] & 15) * dot_i8(q, xb[ib].qs, 16 * s, 16);
            imin += (wb[ib].scales[s] >> 4) * xb[ib].bsums[s];
        }
        float dx = xb[ib].d;
        sum += (tensor_f16_to_f32(wb[ib].d) * dx) * (float)isum;
        sum -= (tensor_f16_to_f32(wb[ib].dmin) * dx) * (float)imin;
    }
    return sum;
}

static float vd_q3_k(int64_t n, const void *w, const void *x)
{
    const block_q3_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            int lo = (wb[ib].qs[32 * h + l] >> (2 * c)) & 3;
            int b2 = (wb[ib].hmask[l] >> (4 * h + c)) & 1;
            q[i] = (int8_t)(lo | b2 << 2);
        }
        int isum = 0;
        for (int s = 0; s < 16; s++) {
            int lo4 = (wb[ib].scales[s % 8] >> (4 * (s / 8))) & 15;
            int hi2 = (wb[ib].scales[8 + s % 4] >> (2 * (s / 4))) & 3;
            int sc = (lo4 | hi2 << 4) - 32;
            isum += sc * (dot_i8(q, xb[ib].qs, 16 * s, 16) - 4 * xb[ib].bsums[s]);
        }
        sum += (tensor_f16_to_f32(wb[ib].d) * xb[ib].d) * (float)isum;
    }
    return sum;
}

/* The 6-bit scale and min of sub-block j of Q4_K/Q5_K (blocks.h). */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static float vd_q4_k(int64_t n, const void *w, const void *x)
{
    const block_q4_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int c = i / 64, l = i % 32;
            uint8_t byte = wb[ib].qs[32 * c + l];
            q[i] = (int8_t)((i % 64) < 32 ? (byte & 15) : (byte >> 4));
        }
        int isum = 0, imin = 0;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_scale_min(wb[ib].scales, s, &sc, &mn);
            isum += sc * dot_i8(q, xb[ib].qs, 32 * s, 32);
            imin += mn * (xb[ib].bsums[2 * s] + xb[ib].bsums[2 * s + 1]);
        }
        float dx = xb[ib].d;
        sum += (tensor_f16_to_f32(wb[ib].d) * dx) * (float)isum;
        sum -= (tensor_f16_to_f32(wb[ib].dmin) * dx) * (float)imin;
    }
    return sum;
}

static float vd_q5_k(int64_t n, const void *w, const void *x)
{
    const block_q5_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int c = i / 64, l = i % 32;
            uint8_t byte = wb[ib].qs[32 * c + l];
            int lo4 = (i % 64) < 32 ? (byte & 15) : (byte >> 4);
            int b4 = (wb[ib].qh[l] >> (i / 32)) & 1;
            q[i] = (int8_t)(lo4 | b4 << 4);
        }
        int isum = 0, imin = 0;
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            k4_scale_min(wb[ib].scales, s, &sc, &mn);
            isum += sc * dot_i8(q, xb[ib].qs, 32 * s, 32);
            imin += mn * (xb[ib].bsums[2 * s] + xb[ib].bsums[2 * s + 1]);
        }
        float dx = xb[ib].d;
        sum += (tensor_f16_to_f32(wb[ib].d) * dx) * (float)isum;
        sum -= (tensor_f16_to_f32(wb[ib].dmin) * dx) * (float)imin;
    }
    return sum;
}

static float vd_q6_k(int64_t n, const void *w, const void *x)
{
    const block_q6_k *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            uint8_t byte = wb[ib].ql[64 * h + l + 32 * (c & 1)];
            int lo4 = c < 2 ? (byte & 15) : (byte >> 4);
            int hi2 = (wb[ib].qh[32 * h + l] >> (2 * c)) & 3;
            q[i] = (int8_t)(lo4 | hi2 << 4);
        }
        int isum = 0;
        for (int s = 0; s < 16; s++)
            isum += wb[ib].scales[s] * (dot_i8(q, xb[ib].qs, 16 * s, 16) - 32 * xb[ib].bsums[s]);
        sum += (tensor_f16_to_f32(wb[ib].d) * xb[ib].d) * (float)isum;
    }
    return sum;
}

static float vd_iq4_xs(int64_t n, const void *w, const void *x)
{
    const block_iq4_xs *wb = w;
    const block_q8_k *xb = x;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        int8_t q[TENSOR_QK_K];
        for (int s = 0; s < 8; s++)
            for (int j = 0; j < 16; j++) {
                uint8_t byte = wb[ib].qs[16 * s + j];
                q[32 * s + j] = tensor_iq4nl_values[byte & 15];
                q[32 * s + j + 16] = tensor_iq4nl_values[byte >> 4];
            }
        int isum = 0;
        for (int s = 0; s < 8; s++) {
            int ls = ((wb[ib].scales_l[s / 2] >> (4 * (s % 2))) & 15) |
                     ((wb[ib].scales_h >> (2 * s)) & 3) << 4;
            isum += (ls - 32) * dot_i8(q, xb[ib].qs, 32 * s, 32);
        }
        sum += (tensor_f16_to_f32(wb[ib].d) * xb[ib].d) * (float)isum;
    }
    return sum;
}

/* --- the kernel sets --- */

#define SCALAR_SET(t) \
    const tensor_mm_kernels tensor_mmk_##t##_scalar = { \
        .name = #t "/scalar", .vec_dot = vd_##t, .rows_r = 1, .tile_r = 1, .tile_t = 1}

SCALAR_SET(f32);
SCALAR_SET(f16);
SCALAR_SET(bf16);
SCALAR_SET(q4_0);
SCALAR_SET(q4_1);
SCALAR_SET(q5_0);
SCALAR_SET(q5_1);
SCALAR_SET(q8_0);
SCALAR_SET(q2_k);
SCALAR_SET(q3_k);
SCALAR_SET(q4_k);
SCALAR_SET(q5_k);
SCALAR_SET(q6_k);
SCALAR_SET(iq4_nl);
SCALAR_SET(iq4_xs);
