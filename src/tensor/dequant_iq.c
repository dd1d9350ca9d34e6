/* Decoding rows of the ternary (TQ1_0, TQ2_0) and MXFP4 types into
 * float32: the scalar reference, element by element in the order
 * blocks_iq.h describes. Registered in dequant.c's dispatch table. */
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/quant_internal.h"

#define QK_K 256

/* Ternary digit k of byte b (blocks_iq.h). */
static inline int tq1_trit(uint8_t b, int k)
{
    uint8_t s = (uint8_t)(b * tensor_tq1_pow3[k]);
    return ((int)s * 3) >> 8;
}

void tensor_dequant_row_tq1_0(const void *src, float *dst, int64_t n)
{
    const block_tq1_0 *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < QK_K; i++) {
            int t;
            if (i < 160)
                t = tq1_trit(b->qs[i % 32], i / 32);
            else if (i < 240)
                t = tq1_trit(b->qs[32 + (i - 160) % 16], (i - 160) / 16);
            else
                t = tq1_trit(b->qh[(i - 240) % 4], (i - 240) / 4);
            *dst++ = d * (float)(t - 1);
        }
    }
}

void tensor_dequant_row_tq2_0(const void *src, float *dst, int64_t n)
{
    const block_tq2_0 *b = src;
    for (int64_t ib = 0; ib < n / QK_K; ib++, b++) {
        float d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < QK_K; i++) {
            int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
            *dst++ = d * (float)(q - 1);
        }
    }
}

void tensor_dequant_row_mxfp4(const void *src, float *dst, int64_t n)
{
    const block_mxfp4 *b = src;
    for (int64_t ib = 0; ib < n / 32; ib++, b++) {
        float d = tensor_e8m0_half(b->e);
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? (b->qs[j] & 15) : (b->qs[j - 16] >> 4);
            *dst++ = d * (float)tensor_mxfp4_values[q];
        }
    }
}
