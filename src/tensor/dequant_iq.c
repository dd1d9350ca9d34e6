/* Decoding rows of the ternary (TQ1_0, TQ2_0) and MXFP4 types into
 * float32: the scalar reference, element by element in the order
 * blocks_iq.h describes. Registered in dequant.c's dispatch table. */
#include "gguf/types.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/iq_internal.h"
#include "tensor/quant_internal.h"

#define QK_K 256

/* Ternary digit k of byte b (blocks_iq.h). */
static inline int tq1_trit(uint8_t b, int k)
{
    uint8_t s = (uint8_t)(b * tensor_tq1_pow3[k]);
    return ((int)s * 3) >> 8;
}

void tensor_tq_decode(uint32_t type, const void *block, tensor_iq_decoded *o)
{
    for (int s = 0; s < 16; s++) o->ls[s] = 1;
    if (type == STRATA_TYPE_TQ1_0) {
        const block_tq1_0 *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < QK_K; i++) {
            int t;
            if (i < 160)
                t = tq1_trit(b->qs[i % 32], i / 32);
            else if (i < 240)
                t = tq1_trit(b->qs[32 + (i - 160) % 16], (i - 160) / 16);
            else
                t = tq1_trit(b->qh[(i - 240) % 4], (i - 240) / 4);
            o->q[i] = (int8_t)(t - 1);
        }
    } else {
        const block_tq2_0 *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int i = 0; i < QK_K; i++)
            o->q[i] = (int8_t)(((b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3) - 1);
    }
}

static void dequant_tq(uint32_t type, size_t block_bytes, const void *src, float *dst, int64_t n)
{
    tensor_iq_decoded dec;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        tensor_tq_decode(type, (const char *)src + (size_t)ib * block_bytes, &dec);
        for (int i = 0; i < QK_K; i++) *dst++ = dec.d * (float)dec.q[i];
    }
}

void tensor_dequant_row_tq1_0(const void *src, float *dst, int64_t n)
{
    dequant_tq(STRATA_TYPE_TQ1_0, sizeof(block_tq1_0), src, dst, n);
}

void tensor_dequant_row_tq2_0(const void *src, float *dst, int64_t n)
{
    dequant_tq(STRATA_TYPE_TQ2_0, sizeof(block_tq2_0), src, dst, n);
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

/* --- the IQ types --- */

static inline int grid8(uint64_t e, int j)
{
    return (int)((e >> (8 * j)) & 0xff);
}

/* q[0..7] = magnitudes of an 8-byte grid entry with the sign byte s. */
static void put8(int8_t *q, uint64_t e, uint8_t s)
{
    for (int j = 0; j < 8; j++)
        q[j] = (int8_t)((s >> j) & 1 ? -grid8(e, j) : grid8(e, j));
}

/* Two 4-byte entries as one group of 8. */
static uint64_t pair4(uint32_t lo, uint32_t hi)
{
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* q[0..7] = 8 v + delta for the signed grid bytes v of an IQ1 entry. */
static void put8_iq1(int8_t *q, uint64_t e, int delta)
{
    for (int j = 0; j < 8; j++)
        q[j] = (int8_t)(8 * (int8_t)grid8(e, j) + delta);
}

int tensor_iq_f_shift(uint32_t type)
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: case STRATA_TYPE_IQ2_XS: case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_S: case STRATA_TYPE_IQ1_M: return 3;
    case STRATA_TYPE_IQ3_XXS: return 2;
    case STRATA_TYPE_IQ3_S: return 0;
    default: return -1;
    }
}

void tensor_iq_decode(uint32_t type, const void *block, tensor_iq_decoded *o)
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            uint32_t a0 = b->qs[4 * g] | (uint32_t)b->qs[4 * g + 1] << 16;
            uint32_t a1 = b->qs[4 * g + 2] | (uint32_t)b->qs[4 * g + 3] << 16;
            o->ls[2 * g] = o->ls[2 * g + 1] = (int8_t)(2 * (a1 >> 28) + 1);
            for (int l = 0; l < 4; l++)
                put8(o->q + 32 * g + 8 * l, tensor_iq2xxs_grid[(a0 >> (8 * l)) & 255],
                     tensor_iq_ksigns[(a1 >> (7 * l)) & 127]);
        }
        break;
    }
    case STRATA_TYPE_IQ2_XS: {
        const block_iq2_xs *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            o->ls[2 * g] = (int8_t)(2 * (b->scales[g] & 15) + 1);
            o->ls[2 * g + 1] = (int8_t)(2 * (b->scales[g] >> 4) + 1);
            for (int l = 0; l < 4; l++) {
                uint16_t v = b->qs[4 * g + l];
                put8(o->q + 32 * g + 8 * l, tensor_iq2xs_grid[v & 511], tensor_iq_ksigns[v >> 9]);
            }
        }
        break;
    }
    case STRATA_TYPE_IQ2_S: {
        const block_iq2_s *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            o->ls[2 * g] = (int8_t)(2 * (b->scales[g] & 15) + 1);
            o->ls[2 * g + 1] = (int8_t)(2 * (b->scales[g] >> 4) + 1);
            for (int l = 0; l < 4; l++) {
                int idx = b->qs[4 * g + l] | ((b->qh[g] << (8 - 2 * l)) & 0x300);
                put8(o->q + 32 * g + 8 * l, tensor_iq2s_grid[idx], b->qs[32 + 4 * g + l]);
            }
        }
        break;
    }
    case STRATA_TYPE_IQ3_XXS: {
        const block_iq3_xxs *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            const uint8_t *p = b->qs + 64 + 4 * g;
            uint32_t a = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            o->ls[2 * g] = o->ls[2 * g + 1] = (int8_t)(2 * (a >> 28) + 1);
            for (int l = 0; l < 4; l++)
                put8(o->q + 32 * g + 8 * l,
                     pair4(tensor_iq3xxs_grid[b->qs[8 * g + 2 * l]],
                           tensor_iq3xxs_grid[b->qs[8 * g + 2 * l + 1]]),
                     tensor_iq_ksigns[(a >> (7 * l)) & 127]);
        }
        break;
    }
    case STRATA_TYPE_IQ3_S: {
        const block_iq3_s *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            o->ls[2 * g] = o->ls[2 * g + 1] = (int8_t)(2 * ((b->scales[g / 2] >> (4 * (g % 2))) & 15) + 1);
            for (int l = 0; l < 4; l++) {
                int i1 = b->qs[8 * g + 2 * l] | ((b->qh[g] << (8 - 2 * l)) & 256);
                int i2 = b->qs[8 * g + 2 * l + 1] | ((b->qh[g] << (7 - 2 * l)) & 256);
                put8(o->q + 32 * g + 8 * l, pair4(tensor_iq3s_grid[i1], tensor_iq3s_grid[i2]),
                     b->signs[4 * g + l]);
            }
        }
        break;
    }
    case STRATA_TYPE_IQ1_S: {
        const block_iq1_s *b = block;
        o->d = tensor_f16_to_f32(b->d);
        for (int g = 0; g < 8; g++) {
            unsigned h = b->qh[g];
            o->ls[2 * g] = o->ls[2 * g + 1] = (int8_t)(2 * ((h >> 12) & 7) + 1);
            int delta = (h & 0x8000) ? -1 : 1;
            for (int l = 0; l < 4; l++)
                put8_iq1(o->q + 32 * g + 8 * l,
                         tensor_iq1s_grid[b->qs[4 * g + l] | ((h >> (3 * l)) & 7) << 8], delta);
        }
        break;
    }
    case STRATA_TYPE_IQ1_M: {
        const block_iq1_m *b = block;
        uint16_t s[4];
        for (int k = 0; k < 4; k++)
            s[k] = (uint16_t)(b->scales[2 * k] | b->scales[2 * k + 1] << 8);
        o->d = tensor_f16_to_f32((uint16_t)((s[0] >> 12) | ((s[1] >> 8) & 0xf0) |
                                            ((s[2] >> 4) & 0xf00) | (s[3] & 0xf000)));
        for (int g = 0; g < 8; g++) {
            for (int k = 0; k < 2; k++)
                o->ls[2 * g + k] = (int8_t)(2 * ((s[g / 2] >> (6 * (g % 2) + 3 * k)) & 7) + 1);
            for (int l = 0; l < 4; l++) {
                unsigned h = b->qh[2 * g + l / 2];
                int idx = b->qs[4 * g + l] | ((h << (8 - 4 * (l % 2))) & 0x700);
                int delta = (h >> (3 + 4 * (l % 2))) & 1 ? -1 : 1;
                put8_iq1(o->q + 32 * g + 8 * l, tensor_iq1s_grid[idx], delta);
            }
        }
        break;
    }
    default:
        break;
    }
}

/* w = (d * ls) * f * q, in the order of the format's own decoders: the
 * product d * ls rounds once, f is a power of two, the code multiplies
 * last. */
static void dequant_iq(uint32_t type, size_t block_bytes, const void *src, float *dst, int64_t n)
{
    const float f = 1.0f / (float)(1 << tensor_iq_f_shift(type));
    tensor_iq_decoded dec;
    for (int64_t ib = 0; ib < n / QK_K; ib++) {
        tensor_iq_decode(type, (const char *)src + (size_t)ib * block_bytes, &dec);
        for (int i = 0; i < QK_K; i++)
            *dst++ = (dec.d * (float)dec.ls[i / 16]) * f * (float)dec.q[i];
    }
}

#define DEQUANT_IQ(name, TYPE)                                                   \
    void tensor_dequant_row_##name(const void *src, float *dst, int64_t n)      \
    {                                                                            \
        dequant_iq(STRATA_TYPE_##TYPE, sizeof(block_##name), src, dst, n);       \
    }

DEQUANT_IQ(iq2_xxs, IQ2_XXS)
DEQUANT_IQ(iq2_xs, IQ2_XS)
DEQUANT_IQ(iq2_s, IQ2_S)
DEQUANT_IQ(iq3_xxs, IQ3_XXS)
DEQUANT_IQ(iq3_s, IQ3_S)
DEQUANT_IQ(iq1_s, IQ1_S)
DEQUANT_IQ(iq1_m, IQ1_M)
