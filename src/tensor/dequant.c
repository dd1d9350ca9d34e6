/* Decoding rows of GGUF tensor types into float32: the scalar reference.
 *
 * Each decoder reads its block layout exactly as blocks.h describes it and
 * reconstructs every element with the format's formula; the loops follow
 * element order (not the storage order of the bits) so that each line reads
 * as "element i is ...". The dispatch table at the end maps type ids to
 * decoders; quantize.c has the matching encoders. */
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

#include <stddef.h>
#include <string.h>

const int8_t tensor_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* --- plain float types --- */

void tensor_dequant_row_f32(const void *src, float *dst, int64_t n)
{
    memmove(dst, src, (size_t)n * sizeof(float));
}

void tensor_dequant_row_f16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = tensor_f16_to_f32(h[i]);
}

void tensor_dequant_row_bf16(const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = tensor_bf16_to_f32(h[i]);
}

/* --- legacy blocks of 32 --- */

/* Code of element j (0..31) in the nibble layout of a 32-element block. */
static inline int nibble32(const uint8_t *qs, int j)
{
    return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
}

void tensor_dequant_row_q4_0(const void *src, float *dst, int64_t n)
{
    const block_q4_0 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int j = 0; j < TENSOR_QK; j++)
            *dst++ = d * (float)(nibble32(b->qs, j) - 8);
    }
}

void tensor_dequant_row_q4_1(const void *src, float *dst, int64_t n)
{
    const block_q4_1 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d), m = tensor_f16_to_f32(b->m);
        for (int j = 0; j < TENSOR_QK; j++)
            *dst++ = d * (float)nibble32(b->qs, j) + m;
    }
}

void tensor_dequant_row_q5_0(const void *src, float *dst, int64_t n)
{
    const block_q5_0 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        uint32_t qh = tensor_load_u32le(b->qh);
        for (int j = 0; j < TENSOR_QK; j++) {
            int q = nibble32(b->qs, j) | (int)((qh >> j) & 1u) << 4;
            *dst++ = d * (float)(q - 16);
        }
    }
}

void tensor_dequant_row_q5_1(const void *src, float *dst, int64_t n)
{
    const block_q5_1 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d), m = tensor_f16_to_f32(b->m);
        uint32_t qh = tensor_load_u32le(b->qh);
        for (int j = 0; j < TENSOR_QK; j++) {
            int q = nibble32(b->qs, j) | (int)((qh >> j) & 1u) << 4;
            *dst++ = d * (float)q + m;
        }
    }
}

void tensor_dequant_row_q8_0(const void *src, float *dst, int64_t n)
{
    const block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int j = 0; j < TENSOR_QK; j++)
            *dst++ = d * (float)b->qs[j];
    }
}

void tensor_dequant_row_q8_1(const void *src, float *dst, int64_t n)
{
    const block_q8_1 *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d); /* s is redundant for decoding */
        for (int j = 0; j < TENSOR_QK; j++)
            *dst++ = d * (float)b->qs[j];
    }
}

void tensor_dequant_row_iq4_nl(const void *src, float *dst, int64_t n)
{
    const block_iq4_nl *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int j = 0; j < TENSOR_QK; j++)
            *dst++ = d * (float)tensor_iq4nl_values[nibble32(b->qs, j)];
    }
}

/* --- K-quants: super-blocks of 256 --- */

void tensor_dequant_row_q2_k(const void *src, float *dst, int64_t n)
{
    const block_q2_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d), dmin = tensor_f16_to_f32(b->dmin);
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int sc = b->scales[i / 16] & 15, mn = b->scales[i / 16] >> 4;
            int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
            *dst++ = d * (float)(sc * q) - dmin * (float)mn;
        }
    }
}

void tensor_dequant_row_q3_k(const void *src, float *dst, int64_t n)
{
    const block_q3_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            int q = (b->qs[32 * h + l] >> (2 * c)) & 3;
            q |= ((b->hmask[l] >> (4 * h + c)) & 1) << 2;
            int sc = tensor_q3k_scale_get(b->scales, i / 16) - 32;
            *dst++ = d * (float)(sc * (q - 4));
        }
    }
}

void tensor_dequant_row_q4_k(const void *src, float *dst, int64_t n)
{
    const block_q4_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d), dmin = tensor_f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) { /* sub-block j: elements 32j..32j+31 */
            int sc, mn;
            tensor_k_scale_get(b->scales, j, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *qs = b->qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++)
                *dst++ = dl * (float)((qs[l] >> shift) & 15) - ml;
        }
    }
}

void tensor_dequant_row_q5_k(const void *src, float *dst, int64_t n)
{
    const block_q5_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d), dmin = tensor_f16_to_f32(b->dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            tensor_k_scale_get(b->scales, j, &sc, &mn);
            float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *qs = b->qs + 32 * (j / 2);
            int shift = 4 * (j % 2);
            for (int l = 0; l < 32; l++) {
                int q = ((qs[l] >> shift) & 15) | ((b->qh[l] >> j) & 1) << 4;
                *dst++ = dl * (float)q - ml;
            }
        }
    }
}

void tensor_dequant_row_q6_k(const void *src, float *dst, int64_t n)
{
    const block_q6_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < TENSOR_QK_K; i++) {
            int h = i / 128, c = (i % 128) / 32, l = i % 32;
            int lo = (b->ql[64 * h + l + 32 * (c & 1)] >> (4 * (c / 2))) & 15;
            int hi = (b->qh[32 * h + l] >> (2 * c)) & 3;
            int q = (lo | hi << 4) - 32;
            *dst++ = d * (float)(b->scales[i / 16] * q);
        }
    }
}

void tensor_dequant_row_q8_k(const void *src, float *dst, int64_t n)
{
    const block_q8_k *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++)
        for (int i = 0; i < TENSOR_QK_K; i++)
            *dst++ = b->d * (float)b->qs[i];
}

void tensor_dequant_row_iq4_xs(const void *src, float *dst, int64_t n)
{
    const block_iq4_xs *b = src;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int j = 0; j < 8; j++) {
            int ls = ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b->scales_h >> (2 * j)) & 3) << 4;
            float dl = d * (float)(ls - 32);
            for (int l = 0; l < 32; l++)
                *dst++ = dl * (float)tensor_iq4nl_values[nibble32(b->qs + 16 * j, l)];
        }
    }
}

/* --- dispatch --- */

static const tensor_dequant_fn k_dequant[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = tensor_dequant_row_f32,
    [STRATA_TYPE_F16] = tensor_dequant_row_f16,
    [STRATA_TYPE_BF16] = tensor_dequant_row_bf16,
    [STRATA_TYPE_Q4_0] = tensor_dequant_row_q4_0,
    [STRATA_TYPE_Q4_1] = tensor_dequant_row_q4_1,
    [STRATA_TYPE_Q5_0] = tensor_dequant_row_q5_0,
    [STRATA_TYPE_Q5_1] = tensor_dequant_row_q5_1,
    [STRATA_TYPE_Q8_0] = tensor_dequant_row_q8_0,
    [STRATA_TYPE_Q8_1] = tensor_dequant_row_q8_1,
    [STRATA_TYPE_Q2_K] = tensor_dequant_row_q2_k,
    [STRATA_TYPE_Q3_K] = tensor_dequant_row_q3_k,
    [STRATA_TYPE_Q4_K] = tensor_dequant_row_q4_k,
    [STRATA_TYPE_Q5_K] = tensor_dequant_row_q5_k,
    [STRATA_TYPE_Q6_K] = tensor_dequant_row_q6_k,
    [STRATA_TYPE_Q8_K] = tensor_dequant_row_q8_k,
    [STRATA_TYPE_IQ4_NL] = tensor_dequant_row_iq4_nl,
    [STRATA_TYPE_IQ4_XS] = tensor_dequant_row_iq4_xs,
    [STRATA_TYPE_TQ1_0] = tensor_dequant_row_tq1_0,
    [STRATA_TYPE_TQ2_0] = tensor_dequant_row_tq2_0,
    [STRATA_TYPE_MXFP4] = tensor_dequant_row_mxfp4,
    [STRATA_TYPE_IQ2_XXS] = tensor_dequant_row_iq2_xxs,
    [STRATA_TYPE_IQ2_XS] = tensor_dequant_row_iq2_xs,
    [STRATA_TYPE_IQ2_S] = tensor_dequant_row_iq2_s,
    [STRATA_TYPE_IQ3_XXS] = tensor_dequant_row_iq3_xxs,
    [STRATA_TYPE_IQ3_S] = tensor_dequant_row_iq3_s,
    [STRATA_TYPE_IQ1_S] = tensor_dequant_row_iq1_s,
    [STRATA_TYPE_IQ1_M] = tensor_dequant_row_iq1_m,
};

tensor_dequant_fn tensor_get_dequant(uint32_t type)
{
    return type < STRATA_TYPE_COUNT ? k_dequant[type] : NULL;
}

int tensor_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    tensor_dequant_fn fn = tensor_get_dequant(type);
    int rc = tensor_row_check((const void *)fn, type, n, src, dst);
    if (rc != 0) return rc < 0 ? rc : 0;
    fn(src, dst, n);
    return 0;
}
