/* The x8 (row-interleaved) layouts of pack.h.
 *
 *  (a) Every x8 kernel of every level this CPU runs, for every nt, against
 *      a reference computed here from the GGUF blocks by the float steps
 *      pack_internal.h defines: bit-exact. Random blocks and adversarial
 *      ones (all code bits set, all zero, the extreme codes, the largest
 *      scales, activation codes of -128 where the type allows them).
 *  (b) tensor_matmul of the packed matrix against the unpacked one (close:
 *      only the float rounding order differs) and bit-identical with 1 and
 *      2 threads and inside batches of 1, 3, 5 and 9 tokens; every level
 *      against the scalar level, bit for bit, for odd shapes and every
 *      batch size up to 2 tiles and a tail.
 *      The activation rows' quantizers of every level write the scalar
 *      one's bytes, special values included.
 *  (c) The API: which shapes and types pack, tensor_pack_bytes, errors, a
 *      Q8_0 code of -128 refused with STRATA_ERANGE.
 * The 1-3 bit IQ types, the ternary ones and MXFP4 have no quantizer here: their rows are random bytes (every
 * byte pattern is a valid block) with sane scales; the reference decodes
 * them by the decoder the GGUF-layout kernels use (iq_internal.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "base/err.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/iq_internal.h"
#include "tensor/matmul.h"
#include "tensor/matmul_kernels.h"
#include "tensor/pack.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static const uint32_t k_types[] = {STRATA_TYPE_Q4_0, STRATA_TYPE_Q5_0, STRATA_TYPE_Q4_1,
                                   STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q2_K, STRATA_TYPE_Q3_K,
                                   STRATA_TYPE_Q4_K,
                                   STRATA_TYPE_Q6_K, STRATA_TYPE_Q5_K, STRATA_TYPE_IQ4_NL,
                                   STRATA_TYPE_IQ4_XS, STRATA_TYPE_F16,  STRATA_TYPE_BF16,
                                   STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ2_XXS,
                                   STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S,
                                   STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4, STRATA_TYPE_TQ1_0,
                                   STRATA_TYPE_TQ2_0};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static bool is_half(uint32_t type)
{
    return type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16;
}

static bool is_tq(uint32_t type)
{
    return type == STRATA_TYPE_TQ1_0 || type == STRATA_TYPE_TQ2_0;
}

/* The 1-3 bit IQ types and the ternary ones (x8 blocks over a table of the
 * type's values). */
static bool is_iq_table(uint32_t type)
{
    return type == STRATA_TYPE_IQ3_XXS || type == STRATA_TYPE_IQ3_S ||
           type == STRATA_TYPE_IQ2_XXS || type == STRATA_TYPE_IQ1_S ||
           type == STRATA_TYPE_IQ2_XS || type == STRATA_TYPE_IQ2_S || type == STRATA_TYPE_IQ1_M ||
           is_tq(type);
}

static uint32_t act_type(uint32_t type)
{
    if (is_half(type)) return STRATA_TYPE_F32;
    if (type == STRATA_TYPE_Q4_1 || type == STRATA_TYPE_Q5_1) return STRATA_TYPE_Q8_1;
    return type == STRATA_TYPE_Q2_K || type == STRATA_TYPE_Q3_K || type == STRATA_TYPE_Q4_K || type == STRATA_TYPE_Q5_K ||
                   type == STRATA_TYPE_Q6_K || type == STRATA_TYPE_IQ4_XS || is_iq_table(type)
               ? STRATA_TYPE_Q8_K
               : STRATA_TYPE_Q8_0;
}

/* ---------------------------------------------------- the reference */

/* 6-bit scale and min of sub-block s of a Q4_K block (blocks.h). */
static void q4k_scale_min(const uint8_t *sc, int s, int *scale, int *min)
{
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
        *min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}

/* dot(row, activation row) by the float steps of pack_internal.h, from the
 * GGUF blocks. */
static float ref_dot(uint32_t type, const void *row, const void *xrow, int64_t n)
{
    float acc = 0.0f;
    if (is_half(type)) {
        /* pack_internal.h: sums s[k][p] of elements 8 b + 2 k + p */
        const uint16_t *w = row;
        const float *x = xrow;
        float s[4][2] = {{0}};
        for (int64_t i = 0; i < n; i++) {
            float wv = type == STRATA_TYPE_F16 ? tensor_f16_to_f32(w[i]) : tensor_bf16_to_f32(w[i]);
            s[(i % 8) / 2][i % 2] = fmaf(wv, x[i], s[(i % 8) / 2][i % 2]);
        }
        return ((s[0][0] + s[1][0]) + (s[2][0] + s[3][0])) +
               ((s[0][1] + s[1][1]) + (s[2][1] + s[3][1]));
    }
    if (type == STRATA_TYPE_Q6_K) {
        const block_q6_k *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0;
            for (int g = 0; g < 16; g++) {
                int32_t dot = 0;
                for (int i = 16 * g; i < 16 * g + 16; i++) {
                    int h = i / 128, c = (i % 128) / 32, l = i % 32;
                    uint8_t byte = w[ib].ql[64 * h + l + 32 * (c & 1)];
                    int q = (c < 2 ? byte & 15 : byte >> 4) | ((w[ib].qh[32 * h + l] >> (2 * c)) & 3) << 4;
                    dot += (q - 32) * x[ib].qs[i];
                }
                isum += w[ib].scales[g] * dot;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
        }
        return acc;
    }
    if (is_iq_table(type)) {
        /* w = (d * ls * f) * q with a scale ls per 16 elements */
        const block_q8_k *x = xrow;
        const size_t bb = strata_type_row_bytes(type, TENSOR_QK_K);
        const float f = is_tq(type) ? 1.0f : 1.0f / (float)(1 << tensor_iq_f_shift(type));
        tensor_iq_decoded dec;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            const char *blk = (const char *)row + (size_t)ib * bb;
            if (is_tq(type)) tensor_tq_decode(type, blk, &dec);
            else tensor_iq_decode(type, blk, &dec);
            int32_t isum = 0;
            for (int i = 0; i < TENSOR_QK_K; i++) isum += dec.ls[i / 16] * dec.q[i] * x[ib].qs[i];
            acc = fmaf((float)isum, (dec.d * x[ib].d) * f, acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_Q2_K) {
        /* from the block's bits (blocks.h): w = d sc q - dmin mn per 16 */
        const block_q2_k *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0, imin = 0;
            for (int j = 0; j < 16; j++) {
                int32_t dot = 0, xs = 0;
                for (int i = 16 * j; i < 16 * j + 16; i++) {
                    const int q = (w[ib].qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
                    dot += q * x[ib].qs[i];
                    xs += x[ib].qs[i];
                }
                isum += (w[ib].scales[j] & 15) * dot;
                imin += (w[ib].scales[j] >> 4) * xs;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
            acc = fmaf(-(float)imin, tensor_f16_to_f32(w[ib].dmin) * x[ib].d, acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_Q3_K) {
        /* from the block's bits (blocks.h): w = d (sc - 32) (q - 4) */
        const block_q3_k *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0;
            for (int j = 0; j < 16; j++) {
                const int sc = (((w[ib].scales[j % 8] >> (4 * (j / 8))) & 15) |
                                ((w[ib].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
                int32_t dot = 0;
                for (int i = 16 * j; i < 16 * j + 16; i++) {
                    const int h = i / 128, c = (i % 128) / 32, l = i % 32;
                    const int q = ((w[ib].qs[32 * h + l] >> (2 * c)) & 3) |
                                  ((w[ib].hmask[l] >> (4 * h + c)) & 1) << 2;
                    dot += (q - 4) * x[ib].qs[i];
                }
                isum += sc * dot;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_IQ4_XS) {
        const block_iq4_xs *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0;
            for (int s = 0; s < 8; s++) {
                int ls = ((w[ib].scales_l[s / 2] >> (4 * (s % 2))) & 15) |
                         ((w[ib].scales_h >> (2 * s)) & 3) << 4;
                int32_t dot = 0;
                for (int l = 0; l < 32; l++) {
                    const uint8_t *qs = w[ib].qs + 16 * s;
                    int q = l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
                    dot += tensor_iq4nl_values[q] * x[ib].qs[32 * s + l];
                }
                isum += (ls - 32) * dot;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_Q5_K) {
        const block_q5_k *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0, imin = 0;
            for (int s = 0; s < 8; s++) {
                int sc, mn;
                q4k_scale_min(w[ib].scales, s, &sc, &mn);
                int32_t dot = 0, xs = 0;
                for (int i = 32 * s; i < 32 * s + 32; i++) {
                    int l = i % 32;
                    int q = ((w[ib].qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15) |
                            ((w[ib].qh[l] >> s) & 1) << 4;
                    dot += q * x[ib].qs[i];
                    xs += x[ib].qs[i];
                }
                isum += sc * dot;
                imin += mn * xs;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
            acc = fmaf(-(float)imin, tensor_f16_to_f32(w[ib].dmin) * x[ib].d, acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_Q4_K) {
        const block_q4_k *w = row;
        const block_q8_k *x = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            int32_t isum = 0, imin = 0;
            for (int s = 0; s < 8; s++) {
                int sc, mn;
                q4k_scale_min(w[ib].scales, s, &sc, &mn);
                int32_t dot = 0, xs = 0;
                for (int i = 32 * s; i < 32 * s + 32; i++) {
                    int c = i / 64, l = i % 64;
                    int q = l < 32 ? w[ib].qs[32 * c + l] & 15 : w[ib].qs[32 * c + l - 32] >> 4;
                    dot += q * x[ib].qs[i];
                    xs += x[ib].qs[i];
                }
                isum += sc * dot;
                imin += mn * xs;
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(w[ib].d) * x[ib].d, acc);
            acc = fmaf(-(float)imin, tensor_f16_to_f32(w[ib].dmin) * x[ib].d, acc);
        }
        return acc;
    }
    const block_q8_0 *x = xrow;
    if (type == STRATA_TYPE_MXFP4) {
        const block_mxfp4 *w = row;
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? w[ib].qs[i] & 15 : w[ib].qs[i - 16] >> 4;
                isum += tensor_mxfp4_values[q] * x[ib].qs[i];
            }
            /* 2^(e - 128) */
            const float dw = ldexpf(1.0f, (int)w[ib].e - 128);
            acc = fmaf((float)isum, dw * tensor_f16_to_f32(x[ib].d), acc);
        }
        return acc;
    }
    if (type == STRATA_TYPE_Q4_1 || type == STRATA_TYPE_Q5_1) {
        /* unsigned codes, then the offset times the Q8_1 block's sum s */
        const block_q8_1 *x1 = xrow;
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
            const uint8_t *qs, *qh = NULL;
            uint16_t d, m;
            if (type == STRATA_TYPE_Q4_1) {
                const block_q4_1 *w = (const block_q4_1 *)row + ib;
                qs = w->qs, d = w->d, m = w->m;
            } else {
                const block_q5_1 *w = (const block_q5_1 *)row + ib;
                qs = w->qs, qh = w->qh, d = w->d, m = w->m;
            }
            int32_t isum = 0;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
                if (qh != NULL) q |= ((qh[i / 8] >> (i % 8)) & 1) << 4;
                isum += q * x1[ib].qs[i];
            }
            acc = fmaf((float)isum, tensor_f16_to_f32(d) * tensor_f16_to_f32(x1[ib].d), acc);
            acc = fmaf(tensor_f16_to_f32(m), tensor_f16_to_f32(x1[ib].s), acc);
        }
        return acc;
    }
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int32_t isum = 0;
        uint16_t d;
        if (type == STRATA_TYPE_IQ4_NL) {
            const block_iq4_nl *w = (const block_iq4_nl *)row + ib;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? w->qs[i] & 15 : w->qs[i - 16] >> 4;
                isum += tensor_iq4nl_values[q] * x[ib].qs[i];
            }
            d = w->d;
        } else if (type == STRATA_TYPE_Q4_0) {
            const block_q4_0 *w = (const block_q4_0 *)row + ib;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? w->qs[i] & 15 : w->qs[i - 16] >> 4;
                isum += (q - 8) * x[ib].qs[i];
            }
            d = w->d;
        } else if (type == STRATA_TYPE_Q5_0) {
            const block_q5_0 *w = (const block_q5_0 *)row + ib;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? w->qs[i] & 15 : w->qs[i - 16] >> 4;
                q |= ((w->qh[i / 8] >> (i % 8)) & 1) << 4;
                isum += (q - 16) * x[ib].qs[i];
            }
            d = w->d;
        } else {
            const block_q8_0 *w = (const block_q8_0 *)row + ib;
            for (int i = 0; i < 32; i++) isum += w->qs[i] * x[ib].qs[i];
            d = w->d;
        }
        acc = fmaf((float)isum, tensor_f16_to_f32(d) * tensor_f16_to_f32(x[ib].d), acc);
    }
    return acc;
}

/* ---------------------------------------------------- data */

enum fill { FILL_RANDOM, FILL_ONES, FILL_ZERO, FILL_EXTREME };

/* Rows of raw GGUF blocks: random bytes with sane f16 scales, or every
 * code bit set / clear, or the codes at their extremes. */
static void fill_weights(uint32_t type, void *w, int64_t n_rows, int64_t n, enum fill f,
                         strata_rng *rng)
{
    size_t bytes = strata_type_row_bytes(type, n) * (size_t)n_rows;
    if (is_half(type)) {
        /* finite values: random normals, the largest (all bits set but
         * the exponent's lowest), zeros, or the extremes with subnormals */
        uint16_t *h = w;
        const bool f16 = type == STRATA_TYPE_F16;
        for (size_t i = 0; i < bytes / 2; i++) {
            float v = (float)strata_rng_normal(rng);
            uint16_t big = f16 ? 0xfbff : 0xff7f, tiny = f16 ? 0x8001 : 0x8001;
            h[i] = f == FILL_ONES    ? big
                   : f == FILL_ZERO  ? 0
                   : f == FILL_EXTREME ? (i % 3 == 0 ? tiny : (uint16_t)(big ^ (i & 1 ? 0x8000 : 0)))
                   : f16             ? tensor_f32_to_f16(v)
                                     : tensor_f32_to_bf16(v);
        }
        return;
    }
    uint8_t *p = w;
    for (size_t i = 0; i < bytes; i++)
        p[i] = f == FILL_ONES ? 0xff : f == FILL_ZERO ? 0 : (uint8_t)strata_rng_next(rng);
    int64_t nb = (int64_t)(bytes / strata_type_row_bytes(type, tensor_x8_block_elems(type)));
    for (int64_t b = 0; b < nb; b++) {
        float dv = f == FILL_EXTREME ? 65504.0f : (float)(0.001 + strata_rng_uniform(rng) * 0.01);
        if (type == STRATA_TYPE_Q6_K) {
            block_q6_k *k = (block_q6_k *)w + b;
            k->d = tensor_f32_to_f16(dv);
            if (f == FILL_EXTREME)
                for (int g = 0; g < 16; g++) k->scales[g] = g & 1 ? 127 : -128;
        } else if (type == STRATA_TYPE_Q4_K) {
            block_q4_k *k = (block_q4_k *)w + b;
            k->d = tensor_f32_to_f16(dv);
            k->dmin = tensor_f32_to_f16(f == FILL_EXTREME ? 65504.0f : dv * 0.5f);
        } else if (type == STRATA_TYPE_Q5_K) {
            block_q5_k *k = (block_q5_k *)w + b;
            k->d = tensor_f32_to_f16(dv);
            k->dmin = tensor_f32_to_f16(f == FILL_EXTREME ? 65504.0f : dv * 0.5f);
        } else if (type == STRATA_TYPE_IQ4_XS) {
            block_iq4_xs *k = (block_iq4_xs *)w + b;
            k->d = tensor_f32_to_f16(dv);
        } else if (type == STRATA_TYPE_Q3_K) {
            block_q3_k *k = (block_q3_k *)w + b;
            k->d = tensor_f32_to_f16(dv);
        } else if (type == STRATA_TYPE_Q2_K) {
            block_q2_k *k = (block_q2_k *)w + b;
            k->d = tensor_f32_to_f16(dv);
            k->dmin = tensor_f32_to_f16(f == FILL_EXTREME ? 65504.0f : dv * 0.5f);
        } else if (type == STRATA_TYPE_MXFP4) {
            /* exponents near 2^0, the subnormal scales of e = 0 and 1 in
             * some blocks, 2^12 at the extreme */
            block_mxfp4 *k = (block_mxfp4 *)w + b;
            k->e = f == FILL_EXTREME ? 139 : b % 5 == 3 ? (uint8_t)(b % 2)
                                       : (uint8_t)(120 + strata_rng_next(rng) % 16);
        } else if (type == STRATA_TYPE_IQ1_M) { /* d's nibbles top its 4 scale words */
            const uint16_t d = tensor_f32_to_f16(dv);
            uint16_t sw[4];
            block_iq1_m *k = (block_iq1_m *)w + b;
            memcpy(sw, k->scales, 8);
            for (int i = 0; i < 4; i++)
                sw[i] = (uint16_t)((sw[i] & 0x0fff) | ((d >> (4 * i)) & 15) << 12);
            memcpy(k->scales, sw, 8);
        } else if (is_tq(type)) { /* d ends the ternary blocks */
            const uint16_t d = tensor_f32_to_f16(dv);
            const size_t bb = strata_type_row_bytes(type, TENSOR_QK_K);
            memcpy((char *)w + (size_t)b * bb + bb - 2, &d, 2);
        } else if (is_iq_table(type)) { /* d leads the other IQ blocks */
            const uint16_t d = tensor_f32_to_f16(dv);
            memcpy((char *)w + (size_t)b * strata_type_row_bytes(type, TENSOR_QK_K), &d, 2);
        } else if (type == STRATA_TYPE_IQ4_NL) {
            block_iq4_nl *k = (block_iq4_nl *)w + b;
            k->d = tensor_f32_to_f16(dv);
        } else if (type == STRATA_TYPE_Q8_0) {
            block_q8_0 *q = (block_q8_0 *)w + b;
            q->d = tensor_f32_to_f16(dv);
            for (int i = 0; i < 32; i++) {
                if (f == FILL_ONES || f == FILL_EXTREME) q->qs[i] = (i & 1) ? 127 : -127;
                if (q->qs[i] == -128) q->qs[i] = -127; /* tensor_pack refuses -128 */
            }
        } else if (type == STRATA_TYPE_Q5_0) {
            block_q5_0 *q = (block_q5_0 *)w + b;
            q->d = tensor_f32_to_f16(dv);
        } else if (type == STRATA_TYPE_Q4_1 || type == STRATA_TYPE_Q5_1) {
            /* d, then the offset m: negative, as a block's minimum mostly is */
            const uint16_t d = tensor_f32_to_f16(dv);
            const uint16_t m = tensor_f32_to_f16(f == FILL_EXTREME ? -65504.0f : -8.0f * dv);
            char *blk = (char *)w + (size_t)b * strata_type_row_bytes(type, TENSOR_QK);
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
        } else {
            block_q4_0 *q = (block_q4_0 *)w + b;
            q->d = tensor_f32_to_f16(dv);
        }
    }
}

/* n_tok activation rows in the packed kernels' layout for `type`, from raw
 * codes: random, or all at the extreme (-128 for Q8_K, whose quantizer can
 * write it; -127 / 127 for Q8_0). */
static void *make_act(uint32_t type, int64_t n_tok, int64_t n, bool extreme, strata_rng *rng,
                      size_t *row_bytes)
{
    size_t rb = tensor_x8_act_row_bytes(type, n);
    char *a = calloc((size_t)n_tok, rb);
    assert_non_null(a);
    for (int64_t t = 0; t < n_tok; t++) {
        char *row = a + (size_t)t * rb;
        if (act_type(type) == STRATA_TYPE_F32) {
            /* extremes that keep bf16's largest weights finite in a sum */
            float *x = (float *)row;
            for (int64_t i = 0; i < n; i++)
                x[i] = extreme ? (i % 3 == 0 ? 1e-40f : i % 3 == 1 ? -3.0f : 1e-30f)
                               : (float)strata_rng_normal(rng);
        } else if (act_type(type) == STRATA_TYPE_Q8_K) {
            block_q8_k *x = (block_q8_k *)row;
            for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
                x[ib].d = extreme ? 1e-3f : (float)(strata_rng_uniform(rng) * 0.02);
                for (int i = 0; i < TENSOR_QK_K; i++)
                    x[ib].qs[i] = extreme ? -128 : (int8_t)strata_rng_next(rng);
                for (int j = 0; j < 16; j++) {
                    int s = 0;
                    for (int i = 0; i < 16; i++) s += x[ib].qs[16 * j + i];
                    x[ib].bsums[j] = (int16_t)s;
                }
            }
        } else if (act_type(type) == STRATA_TYPE_Q8_1) {
            /* s: the f16 sum of the decoded values, as the quantizer writes it */
            block_q8_1 *x = (block_q8_1 *)row;
            for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
                const float d = extreme ? 1e-3f : (float)(strata_rng_uniform(rng) * 0.02);
                x[ib].d = tensor_f32_to_f16(d);
                int sum = 0;
                for (int i = 0; i < TENSOR_QK; i++) {
                    int v = extreme ? ((i % 3) ? 127 : -127) : (int)(strata_rng_next(rng) % 255) - 127;
                    x[ib].qs[i] = (int8_t)v;
                    sum += v;
                }
                x[ib].s = tensor_f32_to_f16(tensor_f16_to_f32(x[ib].d) * (float)sum);
            }
        } else {
            block_q8_0 *x = (block_q8_0 *)row;
            for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
                x[ib].d = tensor_f32_to_f16(extreme ? 1e-3f : (float)(strata_rng_uniform(rng) * 0.02));
                for (int i = 0; i < TENSOR_QK; i++) {
                    int v = extreme ? ((i % 3) ? 127 : -127) : (int)(strata_rng_next(rng) % 255) - 127;
                    x[ib].qs[i] = (int8_t)v;
                }
            }
            /* the int32 sums after the blocks (pack_internal.h) */
            const int32_t mult = type == STRATA_TYPE_Q4_0 ? -8 : type == STRATA_TYPE_Q5_0 ? -16 : -128;
            size_t off = ((size_t)(n / TENSOR_QK) * sizeof(block_q8_0) + 3) & ~(size_t)3;
            assert_int_equal(off, tensor_x8_sums_offset(n));
            for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
                int32_t s = 0;
                for (int i = 0; i < TENSOR_QK; i++) s += x[ib].qs[i];
                s *= mult;
                memcpy(row + off + 4 * (size_t)ib, &s, 4);
            }
            /* then the blocks' scales as floats */
            const size_t scales = off + (size_t)(n / TENSOR_QK) * sizeof(int32_t);
            assert_int_equal(scales, tensor_x8_scales_offset(n));
            assert_int_equal(rb, scales + (size_t)(n / TENSOR_QK) * sizeof(float));
            for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
                const float d = tensor_f16_to_f32(x[ib].d);
                memcpy(row + scales + 4 * (size_t)ib, &d, 4);
            }
        }
    }
    *row_bytes = rb;
    return a;
}

static void *pack_new(uint32_t type, const void *w, int64_t n_rows, int64_t n)
{
    size_t bytes = tensor_pack_bytes(type, n_rows, n);
    assert_true(bytes > 0);
    void *p = aligned_alloc(32, (bytes + 31) / 32 * 32);
    assert_non_null(p);
    assert_int_equal(tensor_pack(type, w, n_rows, n, p), 0);
    return p;
}

static bool same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---------------------------------------------------- (a) kernels */

static int n_levels(void)
{
    return (int)strata_cpu_level_max(strata_cpu_get()) + 1;
}

/* Fails unless y[t * ys + r] (t < nt, r < n_r) is the reference of row
 * row0 + r of w with token t0 + t. */
static void check_block(uint32_t type, const char *what, int level, enum fill wf, int nt,
                        const void *w, size_t row_bytes, int64_t row0, int n_r, const char *x,
                        size_t xs, int64_t t0, int64_t n, const float *y, size_t ys)
{
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < n_r; r++) {
            const char *row = (const char *)w + (size_t)(row0 + r) * row_bytes;
            float want = ref_dot(type, row, x + (size_t)(t0 + t) * xs, n);
            float got = y[(size_t)t * ys + (size_t)r];
            if (!same_bits(got, want))
                fail_msg("%s %s level %s fill %d nt %d row %lld token %lld: %.9g, reference %.9g",
                         strata_type_name(type), what,
                         strata_simd_level_name((enum strata_simd_level)level), (int)wf, nt,
                         (long long)(row0 + r), (long long)(t0 + t), (double)got, (double)want);
        }
}

/* A random packed matrix of 24 rows (three groups) and n_tok activation
 * rows for it. */
typedef struct x8_case {
    void *w;           /* the GGUF rows */
    void *p;           /* packed */
    char *x;           /* activation rows, xs bytes apart */
    size_t xs, row_bytes, group_bytes;
    int64_t n_rows;
} x8_case;

static x8_case x8_case_new(uint32_t type, int64_t n, int64_t n_tok, enum fill wf, bool x_extreme,
                           uint64_t seed)
{
    x8_case c = {.n_rows = 24};
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    c.row_bytes = strata_type_row_bytes(type, n);
    c.w = malloc(c.row_bytes * (size_t)c.n_rows);
    assert_non_null(c.w);
    fill_weights(type, c.w, c.n_rows, n, wf, &rng);
    c.p = pack_new(type, c.w, c.n_rows, n);
    c.x = make_act(type, n_tok, n, x_extreme, &rng, &c.xs);
    c.group_bytes = tensor_pack_bytes(type, c.n_rows, n) / (size_t)(c.n_rows / 8);
    return c;
}

static void x8_case_free(x8_case *c)
{
    free(c->x);
    free(c->p);
    free(c->w);
}

/* One call of k->one on every group of the packed matrix p and of k->pair
 * on every adjacent pair, for the nt tokens from t0, each checked against
 * the reference (the pair with a row stride of 17, whose gap it must leave
 * alone). `what` names the kernels in failures. */
static void check_calls(uint32_t type, const tensor_x8_kernels *k, const char *what, int level,
                        enum fill wf, int nt, int64_t t0, const void *w, size_t row_bytes,
                        const void *p, size_t group_bytes, int64_t n_rows, const char *x,
                        size_t xs, int64_t n)
{
    char what_pair[32];
    snprintf(what_pair, sizeof(what_pair), "%s pair", what);
    const char *xt = x + (size_t)t0 * xs;
    for (int64_t g = 0; g < n_rows / 8; g++) {
        float y[TENSOR_X8_AMX_T * 8];
        k->one(n, (const char *)p + (size_t)g * group_bytes, xt, xs, y, 8, nt);
        check_block(type, what, level, wf, nt, w, row_bytes, 8 * g, 8, x, xs, t0, n, y, 8);
        if (k->pair == NULL || g + 1 >= n_rows / 8) continue;
        float y2[TENSOR_X8_AMX_T * 17];
        for (size_t i = 0; i < sizeof y2 / sizeof y2[0]; i++) y2[i] = -1.0f;
        k->pair(n, (const char *)p + (size_t)g * group_bytes, group_bytes, xt, xs, y2, 17, nt);
        check_block(type, what_pair, level, wf, nt, w, row_bytes, 8 * g, 16, x, xs, t0, n, y2,
                    17);
        for (int t = 0; t < nt; t++) assert_true(y2[17 * t + 16] == -1.0f);
    }
}

/* Three groups, so that pair kernels run on both adjacent pairs and a
 * one-group kernel on every group; every nt the level takes, at every
 * token offset. */
static void check_kernels(uint32_t type, int64_t n, enum fill wf, bool x_extreme, uint64_t seed)
{
    const int64_t n_tok = TENSOR_X8_MAX_T + 1;
    x8_case c = x8_case_new(type, n, n_tok, wf, x_extreme, seed);
    int checked = 0;
    for (int l = 0; l < n_levels(); l++) {
        const tensor_x8_kernels *k = tensor_x8_kernels_at(type, (enum strata_simd_level)l);
        if (k == NULL) continue;
        assert_true(k->max_t >= 1 && k->max_t <= TENSOR_X8_MAX_T);
        for (int nt = 1; nt <= k->max_t; nt++)
            for (int64_t t0 = 0; t0 + nt <= n_tok; t0++) {
                check_calls(type, k, "x8", l, wf, nt, t0, c.w, c.row_bytes, c.p, c.group_bytes,
                            c.n_rows, c.x, c.xs, n);
                checked++;
            }
    }
    assert_true(checked > 0);
    x8_case_free(&c);
}

static void test_kernels_vs_reference(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_TYPES; i++) {
        uint32_t type = k_types[i];
        int be = tensor_x8_block_elems(type);
        for (int nb = 1; nb <= 3; nb += 2) {
            check_kernels(type, be * nb, FILL_RANDOM, false, 11 + i);
            check_kernels(type, be * nb, FILL_ONES, true, 12 + i);
            check_kernels(type, be * nb, FILL_ZERO, true, 13 + i);
            check_kernels(type, be * nb, FILL_EXTREME, true, 14 + i);
            check_kernels(type, be * nb, FILL_RANDOM, true, 15 + i);
        }
        /* F16 and BF16 kernels walk a row in spans of 64 blocks (the
         * AVX-512 pair kernel: 32), pausing each sum between spans: whole
         * spans and a part one */
        if (is_half(type)) {
            check_kernels(type, be * (2 * 64 + 5), FILL_RANDOM, false, 16 + i);
            check_kernels(type, be * (2 * 64 + 5), FILL_EXTREME, true, 17 + i);
        }
    }
    for (int l = n_levels(); l <= STRATA_SIMD_AVX512; l++)
        printf("# x8 kernels at %s skipped: this CPU cannot run them\n",
               strata_simd_level_name((enum strata_simd_level)l));
}

/* The AMX kernels (Q8_0, Q4_0, Q4_K) where this CPU has the tile unit, against
 * the reference bit for bit: 16 tokens (the tiles) at three token offsets
 * and the shorter calls they pass to the AVX-512 kernels, one group and
 * pairs, 1, 2, 3 and 5 blocks (the double-buffered block loop's even and
 * odd ends), every fill, activation codes random and at +-127. */
static void check_amx(uint32_t type, const tensor_x8_kernels *k, int64_t n, enum fill wf,
                      bool x_extreme, uint64_t seed)
{
    const int64_t n_tok = TENSOR_X8_AMX_T + 2;
    x8_case c = x8_case_new(type, n, n_tok, wf, x_extreme, seed);
    static const int nts[] = {TENSOR_X8_AMX_T, 1, 8, 9, TENSOR_X8_AMX_T - 1};
    for (size_t i = 0; i < sizeof nts / sizeof nts[0]; i++)
        for (int64_t t0 = 0; t0 + nts[i] <= n_tok; t0++)
            check_calls(type, k, "amx", STRATA_SIMD_AVX512, wf, nts[i], t0, c.w, c.row_bytes,
                        c.p, c.group_bytes, c.n_rows, c.x, c.xs, n);
    x8_case_free(&c);
}

static void test_amx_kernels(void **state)
{
    (void)state;
    const uint32_t types[] = {STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_0, STRATA_TYPE_Q4_K};
    for (size_t i = 0; i < 3; i++) {
        const tensor_x8_kernels *k = tensor_x8_kernels_amx(types[i]);
        if (k == NULL) {
            printf("# AMX kernels skipped: this CPU (or STRATA_AMX=0, or STRATA_CPU) has no AMX\n");
            return;
        }
        assert_int_equal(k->max_t, TENSOR_X8_AMX_T);
        for (int nb = 1; nb <= 5; nb += nb == 3 ? 2 : 1) {
            const int64_t n = (int64_t)tensor_x8_block_elems(types[i]) * nb;
            check_amx(types[i], k, n, FILL_RANDOM, false, 31 + i);
            check_amx(types[i], k, n, FILL_EXTREME, true, 32 + i);
            check_amx(types[i], k, n, FILL_ONES, true, 33 + i);
            check_amx(types[i], k, n, FILL_ZERO, false, 34 + i);
            check_amx(types[i], k, n, FILL_RANDOM, true, 35 + i);
        }
    }
    assert_null(tensor_x8_kernels_amx(STRATA_TYPE_Q6_K));
}

/* The activation rows at every level against the scalar level's bytes:
 * random rows and blocks of special values (zeros, -0, NaN, infinities,
 * values past f16's range, subnormals, exact ties x / d = k + 0.5). */
static void test_act_quant_levels(void **state)
{
    (void)state;
    strata_rng rng;
    strata_rng_seed(&rng, 77);
    const int64_t n = 32 * 32;
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)strata_rng_normal(&rng) * 3.0f;
    float *blk;
    blk = x + 32 * 1; for (int i = 0; i < 32; i++) blk[i] = 0.0f;
    blk = x + 32 * 2; for (int i = 0; i < 32; i++) blk[i] = -0.0f;
    blk = x + 32 * 3; blk[5] = NAN; blk[9] = -NAN;
    blk = x + 32 * 4; blk[0] = INFINITY;
    blk = x + 32 * 5; blk[7] = -INFINITY; blk[8] = NAN;
    blk = x + 32 * 6; for (int i = 0; i < 32; i++) blk[i] = (i & 1 ? -1e30f : 3e6f);
    blk = x + 32 * 7; for (int i = 0; i < 32; i++) blk[i] = (float)(i - 16) * 1e-41f;
    /* d = 1 (amax 127): codes x exactly, ties at k + 0.5 round to even */
    blk = x + 32 * 8; for (int i = 0; i < 32; i++) blk[i] = i == 0 ? 127.0f : (float)(i - 16) + 0.5f;
    blk = x + 32 * 9; for (int i = 0; i < 32; i++) blk[i] = i == 0 ? -127.0f : -(float)i - 0.5f;
    blk = x + 32 * 10; for (int i = 0; i < 32; i++) blk[i] = 65504.0f * 127.0f * (i == 3 ? 1 : 0.5f);
    blk = x + 32 * 11; for (int i = 0; i < 32; i++) blk[i] = NAN;
    /* a whole 256-element block so small that 1 / (amax / 127) overflows
     * (Q8_K stores it as zeros), and one just above that */
    blk = x + 32 * 16; for (int i = 0; i < 256; i++) blk[i] = (float)(i % 7 - 3) * 1e-38f;
    blk = x + 32 * 24; for (int i = 0; i < 32; i++) blk[i] = (float)(i % 5 - 2) * 2e-37f;
    const uint32_t types[] = {STRATA_TYPE_Q4_0,   STRATA_TYPE_Q5_0, STRATA_TYPE_Q4_1,
                              STRATA_TYPE_Q5_1,   STRATA_TYPE_Q8_0, STRATA_TYPE_Q4_K,
                              STRATA_TYPE_Q5_K,   STRATA_TYPE_Q6_K, STRATA_TYPE_IQ4_NL,
                              STRATA_TYPE_IQ4_XS};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const size_t rb = tensor_x8_act_row_bytes(types[ti], n);
        char *want = calloc(1, rb), *got = calloc(1, rb);
        assert_non_null(want);
        assert_non_null(got);
        tensor_quant_fn ref = tensor_x8_act_quant(types[ti], STRATA_SIMD_SCALAR);
        assert_non_null(ref);
        ref(x, want, n);
        for (int l = STRATA_SIMD_AVX2; l < n_levels(); l++) {
            memset(got, 0xa5, rb);
            tensor_x8_act_quant(types[ti], (enum strata_simd_level)l)(x, got, n);
            for (size_t i = 0; i < rb; i++)
                if (want[i] != got[i])
                    fail_msg("%s activation row at %s: byte %zu is %d, scalar %d",
                             strata_type_name(types[ti]),
                             strata_simd_level_name((enum strata_simd_level)l), i, got[i],
                             want[i]);
        }
        free(got);
        free(want);
    }
    free(x);
}

/* ---------------------------------------------------- (b) matmul */

/* Quantized weights of real-looking (normal) values; the IQ types and
 * MXFP4, which have no quantizer, random blocks. */
static void *random_matrix(uint32_t type, int64_t n_rows, int64_t n, strata_rng *rng)
{
    size_t rb = strata_type_row_bytes(type, n);
    char *w = malloc(rb * (size_t)n_rows);
    if (is_iq_table(type) || type == STRATA_TYPE_MXFP4) {
        assert_non_null(w);
        fill_weights(type, w, n_rows, n, FILL_RANDOM, rng);
        return w;
    }
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_non_null(w);
    assert_non_null(f);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)strata_rng_normal(rng);
        assert_int_equal(tensor_quantize_row(type, f, w + (size_t)r * rb, n), 0);
    }
    free(f);
    return w;
}

static void test_matmul_packed(void **state)
{
    (void)state;
    strata_pool *pool2 = strata_pool_new(2);
    assert_non_null(pool2);
    for (size_t i = 0; i < N_TYPES; i++) {
        uint32_t type = k_types[i];
        strata_rng rng;
        strata_rng_seed(&rng, 100 + i);
        const int64_t n_rows = 40, n = 2 * tensor_x8_block_elems(type) * 2, n_tok = 9;
        void *w = random_matrix(type, n_rows, n, &rng);
        void *p = pack_new(type, w, n_rows, n);
        float *x = malloc(sizeof(float) * (size_t)(n * n_tok));
        assert_non_null(x);
        for (int64_t j = 0; j < n * n_tok; j++) x[j] = (float)strata_rng_normal(&rng);
        const uint32_t pt = type | TENSOR_PACKED;
        assert_true(tensor_matmul_supported(pt));
        assert_int_equal(tensor_matmul_vec_dot_type(pt), (int)act_type(type));
        size_t scratch_bytes = tensor_matmul_scratch_bytes(pt, n, n_tok);
        assert_true(scratch_bytes >= tensor_matmul_scratch_bytes(type, n, n_tok));
        void *scratch = malloc(scratch_bytes);
        float *y_all = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
        float *y_un = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
        float *y = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
        assert_non_null(scratch);
        assert_non_null(y_all);
        assert_non_null(y_un);
        assert_non_null(y);
        assert_int_equal(tensor_matmul(NULL, pt, p, n_rows, n, x, n_tok, y_all, scratch), 0);

        /* close to the GGUF layout's product */
        void *scratch_un = malloc(tensor_matmul_scratch_bytes(type, n, n_tok) + 1);
        assert_non_null(scratch_un);
        assert_int_equal(tensor_matmul(NULL, type, w, n_rows, n, x, n_tok, y_un, scratch_un), 0);
        double max_ref = 0, max_diff = 0;
        for (int64_t j = 0; j < n_rows * n_tok; j++) {
            max_ref = fmax(max_ref, fabs((double)y_un[j]));
            max_diff = fmax(max_diff, fabs((double)y_all[j] - (double)y_un[j]));
        }
        assert_true(max_ref > 0);
        if (max_diff > 1e-5 * max_ref)
            fail_msg("%s: packed differs from GGUF layout by %.3g (largest %.3g)",
                     strata_type_name(type), max_diff, max_ref);

        /* 2 threads, and every token alone or in smaller batches */
        assert_int_equal(tensor_matmul(pool2, pt, p, n_rows, n, x, n_tok, y, scratch), 0);
        assert_memory_equal(y, y_all, sizeof(float) * (size_t)(n_rows * n_tok));
        const int64_t sizes[] = {1, 3, 5};
        for (size_t si = 0; si < 3; si++)
            for (int64_t t0 = 0; t0 + sizes[si] <= n_tok; t0 += sizes[si]) {
                strata_pool *pl = (t0 & 1) ? pool2 : NULL;
                assert_int_equal(tensor_matmul(pl, pt, p, n_rows, n, x + t0 * n, sizes[si], y,
                                               scratch),
                                 0);
                assert_memory_equal(y, y_all + t0 * n_rows,
                                    sizeof(float) * (size_t)(n_rows * sizes[si]));
            }
        free(scratch_un);
        free(y);
        free(y_un);
        free(y_all);
        free(scratch);
        free(x);
        free(p);
        free(w);
    }
    strata_pool_free(pool2);
}

/* Every level this CPU runs against the scalar level, through
 * tensor_matmul_at_level: odd group counts (pairs and a lone group), odd
 * block counts, every batch size 1..n_tok (tails of every length beside
 * whole tiles), 1 and 2 threads. Bit-exact. */
static void test_matmul_levels(void **state)
{
    (void)state;
    strata_pool *pool2 = strata_pool_new(2);
    assert_non_null(pool2);
    const int64_t shapes[][2] = {{8, 1}, {24, 3}, {40, 1}, {56, 5}};
    const int64_t n_tok = 2 * TENSOR_X8_MAX_T + 3;
    for (size_t i = 0; i < N_TYPES; i++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            uint32_t type = k_types[i];
            strata_rng rng;
            strata_rng_seed(&rng, 200 + 7 * i + si);
            const int64_t n_rows = shapes[si][0], n = shapes[si][1] * tensor_x8_block_elems(type);
            void *w = random_matrix(type, n_rows, n, &rng);
            void *p = pack_new(type, w, n_rows, n);
            float *x = malloc(sizeof(float) * (size_t)(n * n_tok));
            assert_non_null(x);
            for (int64_t j = 0; j < n * n_tok; j++) x[j] = (float)strata_rng_normal(&rng);
            const uint32_t pt = type | TENSOR_PACKED;
            void *scratch = malloc(tensor_matmul_scratch_bytes(pt, n, n_tok));
            float *want = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
            float *y = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
            assert_non_null(scratch);
            assert_non_null(want);
            assert_non_null(y);
            assert_int_equal(tensor_matmul_at_level(NULL, STRATA_SIMD_SCALAR, pt, p, n_rows, n, x,
                                                    n_tok, want, scratch),
                             0);
            for (int l = STRATA_SIMD_AVX2; l < n_levels(); l++)
                for (int64_t nt = 1; nt <= n_tok; nt++)
                    for (int th = 0; th < 2; th++) {
                        memset(y, 0, sizeof(float) * (size_t)(n_rows * nt));
                        assert_int_equal(tensor_matmul_at_level(th ? pool2 : NULL,
                                                                (enum strata_simd_level)l, pt, p,
                                                                n_rows, n, x, nt, y, scratch),
                                         0);
                        for (int64_t j = 0; j < n_rows * nt; j++)
                            if (!same_bits(y[j], want[j]))
                                fail_msg("%s x8 %lldx%lld level %s, %lld tokens, %d thread(s): "
                                         "row %lld token %lld %.9g, scalar %.9g",
                                         strata_type_name(type), (long long)n_rows, (long long)n,
                                         strata_simd_level_name((enum strata_simd_level)l),
                                         (long long)nt, th + 1, (long long)(j % n_rows),
                                         (long long)(j / n_rows), (double)y[j], (double)want[j]);
                    }
            free(y);
            free(want);
            free(scratch);
            free(x);
            free(p);
            free(w);
        }
    for (int l = n_levels(); l <= STRATA_SIMD_AVX512; l++)
        printf("# packed matmul at %s skipped: this CPU cannot run it\n",
               strata_simd_level_name((enum strata_simd_level)l));
    strata_pool_free(pool2);
}

/* ---------------------------------------------------- VDPBF16PS */

/* The VDPBF16PS kernel (not used by tensor_matmul) against its own scalar
 * reference, bit for bit, where the CPU has AVX512_BF16; the reference
 * against the exact float x8 path within a stated tolerance: bf16
 * activations are rounded to 8 significant bits, so |y - exact| <=
 * 2^-8 * sum |w x| plus the float sums' rounding (taken as 2^-20 of it). */
static void test_bf16_dot(void **state)
{
    (void)state;
    strata_rng rng;
    strata_rng_seed(&rng, 4242);
    const int64_t n_rows = 16, n = 136, n_tok = TENSOR_X8_BF16_DOT_MAX_T + 1;
    const uint32_t type = STRATA_TYPE_BF16;
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)(n_rows * n));
    float *x = malloc(sizeof(float) * (size_t)(n * n_tok));
    assert_non_null(w);
    assert_non_null(x);
    for (int64_t i = 0; i < n_rows * n; i++)
        w[i] = tensor_f32_to_bf16((float)strata_rng_normal(&rng));
    w[3] = 0x0001; /* a subnormal weight: flushed by the instruction */
    for (int64_t i = 0; i < n * n_tok; i++) x[i] = (float)strata_rng_normal(&rng);
    void *p = pack_new(type, w, n_rows, n);
    const size_t group_bytes = tensor_pack_bytes(type, n_rows, n) / (size_t)(n_rows / 8);
    const size_t xb = tensor_x8_bf16_dot_act_bytes(n);
    char *xq = malloc(xb * (size_t)n_tok);
    assert_non_null(xq);
    for (int64_t t = 0; t < n_tok; t++) tensor_x8_bf16_dot_act(x + t * n, xq + (size_t)t * xb, n);
    float want[8 * 8], got[8 * 8], exact[8 * 8];
    for (int64_t g = 0; g < n_rows / 8; g++) {
        const char *pg = (const char *)p + (size_t)g * group_bytes;
        tensor_x8_bf16_dot_scalar(n, pg, xq, xb, want, 8, (int)n_tok);
        tensor_x8_bf16_scalar(n, pg, x, sizeof(float) * (size_t)n, exact, 8, (int)n_tok);
        for (int64_t t = 0; t < n_tok; t++)
            for (int r = 0; r < 8; r++) {
                double mag = 0;
                for (int64_t i = 0; i < n; i++)
                    mag += fabs((double)tensor_bf16_to_f32(w[(8 * g + r) * n + i]) * x[t * n + i]);
                double err = fabs((double)want[8 * t + r] - (double)exact[8 * t + r]);
                if (err > mag * (1.0 / 256 + 1.0 / (1 << 20)))
                    fail_msg("bf16 dot row %lld token %lld: %.9g, exact %.9g (bound %.3g)",
                             (long long)(8 * g + r), (long long)t, (double)want[8 * t + r],
                             (double)exact[8 * t + r], mag / 256);
            }
#if defined(__x86_64__)
        if (!strata_cpu_get()->avx512bf16) continue;
        for (int nt = 1; nt <= TENSOR_X8_BF16_DOT_MAX_T; nt++)
            for (int64_t t0 = 0; t0 + nt <= n_tok; t0++) {
                tensor_x8_bf16_dot_avx512bf16(n, pg, xq + (size_t)t0 * xb, xb, got, 8, nt);
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < 8; r++)
                        if (!same_bits(got[8 * t + r], want[8 * (t0 + t) + r]))
                            fail_msg("bf16 dot avx512bf16 nt %d row %lld token %lld: %.9g, "
                                     "reference %.9g",
                                     nt, (long long)(8 * g + r), (long long)(t0 + t),
                                     (double)got[8 * t + r], (double)want[8 * (t0 + t) + r]);
            }
#endif
    }
#if defined(__x86_64__)
    if (!strata_cpu_get()->avx512bf16)
        printf("# bf16 dot kernel skipped: this CPU has no AVX512_BF16\n");
#endif
    free(xq);
    free(p);
    free(x);
    free(w);
}

/* ---------------------------------------------------- (c) API */

static void test_api(void **state)
{
    (void)state;
    assert_true(tensor_pack_available(STRATA_TYPE_Q4_0, 8, 32));
    assert_true(tensor_pack_available(STRATA_TYPE_Q4_K, 16, 512));
    assert_false(tensor_pack_available(STRATA_TYPE_Q4_0, 12, 32));  /* rows not 8k */
    assert_false(tensor_pack_available(STRATA_TYPE_Q4_0, 0, 32));
    assert_false(tensor_pack_available(STRATA_TYPE_Q4_0, 8, 48));   /* not whole blocks */
    assert_false(tensor_pack_available(STRATA_TYPE_Q4_K, 8, 128));
    assert_true(tensor_pack_available(STRATA_TYPE_Q6_K, 8, 256));
    assert_true(tensor_pack_available(STRATA_TYPE_Q5_K, 8, 256));
    assert_true(tensor_pack_available(STRATA_TYPE_Q5_0, 8, 1152));
    assert_true(tensor_pack_available(STRATA_TYPE_Q5_1, 8, 1152));
    assert_true(tensor_pack_available(STRATA_TYPE_Q4_1, 8, 32));
    assert_true(tensor_pack_available(STRATA_TYPE_Q2_K, 8, 256));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q2_K, 8, 512), 16 * sizeof(block_q2_k));
    assert_false(tensor_pack_available(STRATA_TYPE_Q8_K, 8, 256));  /* no x8 layout */
    assert_true(tensor_pack_available(STRATA_TYPE_F16, 8, 32));
    assert_true(tensor_pack_available(STRATA_TYPE_BF16, 16, 8));
    assert_false(tensor_pack_available(STRATA_TYPE_BF16, 8, 12));   /* not whole pairs of 4 */
    assert_false(tensor_pack_available(STRATA_TYPE_F32, 8, 32));    /* no x8 layout */
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_F16, 16, 24), 16 * 24 * 2);
    assert_int_equal(tensor_x8_act_row_bytes(STRATA_TYPE_BF16, 24), 24 * sizeof(float) + 64);
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q4_0, 16, 64), 16 * 2 * sizeof(block_q4_0));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q8_0, 8, 32), 8 * sizeof(block_q8_0));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q4_K, 8, 512), 2 * sizeof(block_q4_kx8));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q6_K, 16, 512), 4 * sizeof(block_q6_kx8));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q5_K, 16, 256), 2 * sizeof(block_q5_kx8));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q5_0, 16, 64), 16 * 2 * sizeof(block_q5_0));
    assert_int_equal(tensor_x8_act_row_bytes(STRATA_TYPE_Q5_0, 64),
                     tensor_x8_sums_offset(64) + 2 * sizeof(int32_t) + 2 * sizeof(float));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q5_1, 8, 256), 8 * 8 * sizeof(block_q5_1));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q4_1, 16, 64), 16 * 2 * sizeof(block_q4_1));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q8_K, 8, 256), 0);
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_IQ4_NL, 8, 64), 16 * sizeof(block_iq4_nl));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_IQ4_XS, 16, 256), 2 * sizeof(block_iq4_xsx8));
    assert_false(tensor_pack_available(STRATA_TYPE_IQ4_XS, 8, 32));  /* not whole super-blocks */
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_IQ3_S, 8, 512), 2 * sizeof(block_iq4_xsx8));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_IQ3_XXS, 16, 256), 2 * sizeof(block_iq4_xsx8));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_IQ1_M, 8, 256), sizeof(block_iq_s16x8));
    assert_true(tensor_pack_available(STRATA_TYPE_Q3_K, 8, 256));
    assert_int_equal(tensor_pack_bytes(STRATA_TYPE_Q3_K, 16, 512), 4 * sizeof(block_iq_s16x8));
    assert_false(tensor_pack_available(STRATA_TYPE_Q3_K, 8, 128));  /* not whole super-blocks */
    assert_true(tensor_matmul_supported(STRATA_TYPE_Q5_0 | TENSOR_PACKED));
    assert_true(tensor_matmul_supported(STRATA_TYPE_Q5_1 | TENSOR_PACKED));
    assert_true(tensor_matmul_supported(STRATA_TYPE_Q2_K | TENSOR_PACKED));
    assert_false(tensor_matmul_supported(STRATA_TYPE_Q8_K | TENSOR_PACKED));

    char buf[8 * sizeof(block_q8_0)] = {0};
    char out[sizeof buf];
    assert_int_equal(tensor_pack(STRATA_TYPE_Q8_0, NULL, 8, 32, out), STRATA_EINVAL);
    assert_int_equal(tensor_pack(STRATA_TYPE_Q8_0, buf, 8, 32, NULL), STRATA_EINVAL);
    assert_int_equal(tensor_pack(STRATA_TYPE_Q8_0, buf, 7, 32, out), STRATA_EINVAL);
    assert_int_equal(tensor_pack(STRATA_TYPE_Q8_0, buf, 8, 32, out), 0);
    ((block_q8_0 *)buf)[5].qs[17] = -128;
    assert_int_equal(tensor_pack(STRATA_TYPE_Q8_0, buf, 8, 32, out), STRATA_ERANGE);

    /* a packed matmul refuses shapes that do not pack */
    float x[64] = {0}, y[16];
    char scratch[256];
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0 | TENSOR_PACKED, out, 12, 32, x, 1, y,
                                   scratch),
                     STRATA_EINVAL);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0 | TENSOR_PACKED, out, 8, 32, x, 0, y,
                                   scratch),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_kernels_vs_reference),
        cmocka_unit_test(test_amx_kernels),
        cmocka_unit_test(test_act_quant_levels),
        cmocka_unit_test(test_matmul_packed),
        cmocka_unit_test(test_matmul_levels),
        cmocka_unit_test(test_bf16_dot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
