/* tensor_pack and the table of x8 layouts (pack.h, pack_internal.h). */
#include "tensor/pack.h"

#include "base/err.h"
#include "gguf/types.h"
#include "tensor/pack_internal.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

typedef struct x8_type {
    size_t block_bytes;            /* one interleaved block of 8 rows */
    int block_elems;               /* elements per source block */
    tensor_x8_pack_fn pack;
    tensor_x8_kernels k[3];        /* per enum strata_simd_level; .one NULL: none */
} x8_type;

#if defined(__x86_64__)
#define AVX2(f) {.one = (f), .max_t = 4}
#define AVX512(t) \
    {.one = tensor_x8_##t##_avx512, .pair = tensor_x8_##t##_avx512_pair, \
     .max_t = TENSOR_X8_AVX512_MAX_T}
#else
#define AVX2(f) {0}
#define AVX512(t) {0}
#endif

/* The scalar references take any nt up to TENSOR_X8_MAX_T; the AVX2
 * kernels up to 4 (16 ymm registers), the AVX-512 ones their own. */
static const x8_type *x8_lookup(uint32_t type)
{
    static const x8_type q4_0 = {
        sizeof(block_q4_0x8), TENSOR_QK, tensor_x8_pack_q4_0,
        {{.one = tensor_x8_q4_0_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q4_0_avx2), AVX512(q4_0)}};
    static const x8_type q5_0 = {
        sizeof(block_q5_0x8), TENSOR_QK, tensor_x8_pack_q5_0,
        {{.one = tensor_x8_q5_0_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q5_0_avx2), AVX512(q5_0)}};
    static const x8_type q4_1 = {
        sizeof(block_q4_1x8), TENSOR_QK, tensor_x8_pack_q4_1,
        {{.one = tensor_x8_q4_1_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q4_1_avx2), AVX512(q4_1)}};
    static const x8_type q5_1 = {
        sizeof(block_q5_1x8), TENSOR_QK, tensor_x8_pack_q5_1,
        {{.one = tensor_x8_q5_1_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q5_1_avx2), AVX512(q5_1)}};
    static const x8_type q8_0 = {
        sizeof(block_q8_0x8), TENSOR_QK, tensor_x8_pack_q8_0,
        {{.one = tensor_x8_q8_0_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q8_0_avx2), AVX512(q8_0)}};
    static const x8_type q4_k = {
        sizeof(block_q4_kx8), TENSOR_QK_K, tensor_x8_pack_q4_k,
        {{.one = tensor_x8_q4_k_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q4_k_avx2), AVX512(q4_k)}};
    static const x8_type q6_k = {
        sizeof(block_q6_kx8), TENSOR_QK_K, tensor_x8_pack_q6_k,
        {{.one = tensor_x8_q6_k_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q6_k_avx2), AVX512(q6_k)}};
    static const x8_type q5_k = {
        sizeof(block_q5_kx8), TENSOR_QK_K, tensor_x8_pack_q5_k,
        {{.one = tensor_x8_q5_k_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q5_k_avx2), AVX512(q5_k)}};
    static const x8_type iq4_nl = {
        sizeof(block_iq4_nlx8), TENSOR_QK, tensor_x8_pack_iq4_nl,
        {{.one = tensor_x8_iq4_nl_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq4_nl_avx2), AVX512(iq4_nl)}};
    static const x8_type mxfp4 = {
        sizeof(block_mxfp4x8), TENSOR_QK, tensor_x8_pack_mxfp4,
        {{.one = tensor_x8_mxfp4_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_mxfp4_avx2), AVX512(mxfp4)}};
    static const x8_type iq4_xs = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_iq4_xs,
        {{.one = tensor_x8_iq4_xs_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq4_xs_avx2), AVX512(iq4_xs)}};
    static const x8_type iq3_xxs = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_iq3_xxs,
        {{.one = tensor_x8_iq3_xxs_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq3_xxs_avx2), AVX512(iq3_xxs)}};
    static const x8_type iq3_s = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_iq3_s,
        {{.one = tensor_x8_iq3_s_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq3_s_avx2), AVX512(iq3_s)}};
    static const x8_type iq2_xxs = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_iq2_xxs,
        {{.one = tensor_x8_iq2_xxs_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq2_xxs_avx2), AVX512(iq2_xxs)}};
    static const x8_type iq2_xs = {
        sizeof(block_iq_s16x8), TENSOR_QK_K, tensor_x8_pack_iq2_xs,
        {{.one = tensor_x8_iq2_xs_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq2_xs_avx2), AVX512(iq2_xs)}};
    static const x8_type iq2_s = {
        sizeof(block_iq_s16x8), TENSOR_QK_K, tensor_x8_pack_iq2_s,
        {{.one = tensor_x8_iq2_s_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq2_s_avx2), AVX512(iq2_s)}};
    static const x8_type q2_k = {
        sizeof(block_q2_kx8), TENSOR_QK_K, tensor_x8_pack_q2_k,
        {{.one = tensor_x8_q2_k_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q2_k_avx2), AVX512(q2_k)}};
    static const x8_type q3_k = {
        sizeof(block_iq_s16x8), TENSOR_QK_K, tensor_x8_pack_q3_k,
        {{.one = tensor_x8_q3_k_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_q3_k_avx2), AVX512(q3_k)}};
    static const x8_type iq1_m = {
        sizeof(block_iq_s16x8), TENSOR_QK_K, tensor_x8_pack_iq1_m,
        {{.one = tensor_x8_iq1_m_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq1_m_avx2), AVX512(iq1_m)}};
    static const x8_type tq1_0 = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_tq1_0,
        {{.one = tensor_x8_tq1_0_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_tq1_0_avx2), AVX512(tq1_0)}};
    static const x8_type tq2_0 = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_tq2_0,
        {{.one = tensor_x8_tq2_0_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_tq2_0_avx2), AVX512(tq2_0)}};
    static const x8_type iq1_s = {
        sizeof(block_iq4_xsx8), TENSOR_QK_K, tensor_x8_pack_iq1_s,
        {{.one = tensor_x8_iq1_s_scalar, .max_t = TENSOR_X8_MAX_T},
         AVX2(tensor_x8_iq1_s_avx2), AVX512(iq1_s)}};
#if defined(__x86_64__)
#define HALF_LEVELS(t)                                                                  \
    {.one = tensor_x8_##t##_avx2, .max_t = TENSOR_X8_MAX_T},                           \
    {.one = tensor_x8_##t##_avx512, .pair = tensor_x8_##t##_avx512_pair,               \
     .max_t = TENSOR_X8_HALF_AVX512_MAX_T}
#else
#define HALF_LEVELS(t) {0}, {0}
#endif
    static const x8_type f16 = {
        sizeof(block_halfx8), TENSOR_X8_HALF_ELEMS, tensor_x8_pack_half,
        {{.one = tensor_x8_f16_scalar, .max_t = TENSOR_X8_MAX_T}, HALF_LEVELS(f16)}};
    static const x8_type bf16 = {
        sizeof(block_halfx8), TENSOR_X8_HALF_ELEMS, tensor_x8_pack_half,
        {{.one = tensor_x8_bf16_scalar, .max_t = TENSOR_X8_MAX_T}, HALF_LEVELS(bf16)}};
#undef HALF_LEVELS
    switch (type) {
    case STRATA_TYPE_F16: return &f16;
    case STRATA_TYPE_BF16: return &bf16;
    case STRATA_TYPE_Q4_0: return &q4_0;
    case STRATA_TYPE_Q5_0: return &q5_0;
    case STRATA_TYPE_Q4_1: return &q4_1;
    case STRATA_TYPE_Q5_1: return &q5_1;
    case STRATA_TYPE_Q8_0: return &q8_0;
    case STRATA_TYPE_Q4_K: return &q4_k;
    case STRATA_TYPE_Q5_K: return &q5_k;
    case STRATA_TYPE_Q6_K: return &q6_k;
    case STRATA_TYPE_IQ4_NL: return &iq4_nl;
    case STRATA_TYPE_MXFP4: return &mxfp4;
    case STRATA_TYPE_IQ4_XS: return &iq4_xs;
    case STRATA_TYPE_IQ3_XXS: return &iq3_xxs;
    case STRATA_TYPE_IQ3_S: return &iq3_s;
    case STRATA_TYPE_IQ2_XXS: return &iq2_xxs;
    case STRATA_TYPE_IQ1_S: return &iq1_s;
    case STRATA_TYPE_IQ2_XS: return &iq2_xs;
    case STRATA_TYPE_IQ2_S: return &iq2_s;
    case STRATA_TYPE_IQ1_M: return &iq1_m;
    case STRATA_TYPE_Q2_K: return &q2_k;
    case STRATA_TYPE_Q3_K: return &q3_k;
    case STRATA_TYPE_TQ1_0: return &tq1_0;
    case STRATA_TYPE_TQ2_0: return &tq2_0;
    default: return NULL;
    }
}

const tensor_x8_kernels *tensor_x8_kernels_at(uint32_t type, enum strata_simd_level level)
{
    const x8_type *t = x8_lookup(type);
    if (t == NULL || (int)level < STRATA_SIMD_SCALAR || level > STRATA_SIMD_AVX512) return NULL;
    return t->k[level].one != NULL ? &t->k[level] : NULL;
}

const tensor_x8_kernels *tensor_x8_kernels_amx(uint32_t type)
{
#if defined(__x86_64__)
    static const tensor_x8_kernels q8_0 = {.one = tensor_x8_q8_0_amx,
                                           .pair = tensor_x8_q8_0_amx_pair,
                                           .max_t = TENSOR_X8_AMX_T};
    static const tensor_x8_kernels q4_0 = {.one = tensor_x8_q4_0_amx,
                                           .pair = tensor_x8_q4_0_amx_pair,
                                           .max_t = TENSOR_X8_AMX_T};
    static const tensor_x8_kernels q4_k = {.one = tensor_x8_q4_k_amx,
                                           .pair = tensor_x8_q4_k_amx_pair,
                                           .max_t = TENSOR_X8_AMX_T};
    if (!strata_cpu_amx()) return NULL;
    if (type == STRATA_TYPE_Q4_K) return &q4_k;
    if (type == STRATA_TYPE_Q8_0) return &q8_0;
    if (type == STRATA_TYPE_Q4_0) return &q4_0;
#else
    (void)type;
#endif
    return NULL;
}

const tensor_x8_kernels *tensor_x8_kernels_for(uint32_t type, enum strata_simd_level level,
                                               int64_t n_tok)
{
    if (level >= STRATA_SIMD_AVX512 && n_tok >= TENSOR_X8_AMX_T) {
        const tensor_x8_kernels *amx = tensor_x8_kernels_amx(type);
        if (amx != NULL) return amx;
    }
    const tensor_x8_kernels *k = NULL;
    for (int l = (int)level; l >= STRATA_SIMD_SCALAR && k == NULL; l--)
        k = tensor_x8_kernels_at(type, (enum strata_simd_level)l);
    return k;
}

size_t tensor_x8_block_bytes(uint32_t type)
{
    const x8_type *t = x8_lookup(type);
    return t != NULL ? t->block_bytes : 0;
}

int tensor_x8_block_elems(uint32_t type)
{
    const x8_type *t = x8_lookup(type);
    return t != NULL ? t->block_elems : 0;
}

bool tensor_pack_available(uint32_t type, int64_t n_rows, int64_t n_cols)
{
    const x8_type *t = x8_lookup(type);
    return t != NULL && n_rows > 0 && n_rows % TENSOR_X8_ROWS == 0 && n_cols > 0 &&
           n_cols % t->block_elems == 0;
}

size_t tensor_pack_bytes(uint32_t type, int64_t n_rows, int64_t n_cols)
{
    if (!tensor_pack_available(type, n_rows, n_cols)) return 0;
    const x8_type *t = x8_lookup(type);
    uint64_t groups = (uint64_t)n_rows / TENSOR_X8_ROWS;
    uint64_t blocks = (uint64_t)n_cols / (uint64_t)t->block_elems;
    if (blocks > SIZE_MAX / t->block_bytes || groups > SIZE_MAX / (blocks * t->block_bytes))
        return 0;
    return (size_t)(groups * blocks * t->block_bytes);
}

int tensor_pack(uint32_t type, const void *src, int64_t n_rows, int64_t n_cols, void *dst)
{
    size_t bytes = tensor_pack_bytes(type, n_rows, n_cols);
    if (bytes == 0 || src == NULL || dst == NULL) return STRATA_EINVAL;
    const x8_type *t = x8_lookup(type);
    size_t row_bytes = strata_type_row_bytes(type, n_cols);
    size_t group_bytes = bytes / (size_t)(n_rows / TENSOR_X8_ROWS);
    for (int64_t g = 0; g < n_rows / TENSOR_X8_ROWS; g++) {
        const char *s = (const char *)src + (size_t)g * TENSOR_X8_ROWS * row_bytes;
        if (!t->pack(s, row_bytes, n_cols, (char *)dst + (size_t)g * group_bytes))
            return STRATA_ERANGE;
    }
    return 0;
}

size_t tensor_x8_sums_offset(int64_t n)
{
    return ((size_t)(n / TENSOR_QK) * sizeof(block_q8_0) + 3) & ~(size_t)3;
}

size_t tensor_x8_scales_offset(int64_t n)
{
    return tensor_x8_sums_offset(n) + (size_t)(n / TENSOR_QK) * sizeof(int32_t);
}

size_t tensor_x8_act_row_bytes(uint32_t type, int64_t n)
{
    if (tensor_x8_block_elems(type) == 0 || n <= 0 || n % tensor_x8_block_elems(type) != 0)
        return 0;
    /* F16, BF16: the floats and one cache line of padding. The kernels
     * read up to 8 token rows side by side; rows of 2048 or 8192 floats
     * are a multiple of 4 KB apart, so without the pad the same offset of
     * every row maps to the same L1 set, and 8 rows plus the weights
     * overflow its 8 ways (the 6- and 8-token tiles ran at 60 % of the
     * 3-token one on AMD Zen 4). */
    if (type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16) return (size_t)n * sizeof(float) + 64;
    if (type == STRATA_TYPE_Q2_K || type == STRATA_TYPE_Q3_K || type == STRATA_TYPE_Q4_K ||
        type == STRATA_TYPE_Q5_K || type == STRATA_TYPE_Q6_K ||
        type == STRATA_TYPE_IQ4_XS || type == STRATA_TYPE_IQ3_XXS || type == STRATA_TYPE_IQ3_S ||
        type == STRATA_TYPE_IQ2_XXS || type == STRATA_TYPE_IQ1_S || type == STRATA_TYPE_IQ2_XS ||
        type == STRATA_TYPE_IQ2_S || type == STRATA_TYPE_IQ1_M || type == STRATA_TYPE_TQ1_0 ||
        type == STRATA_TYPE_TQ2_0)
        return strata_type_row_bytes(STRATA_TYPE_Q8_K, n);
    if (type == STRATA_TYPE_Q4_1 || type == STRATA_TYPE_Q5_1)
        return strata_type_row_bytes(STRATA_TYPE_Q8_1, n);
    return tensor_x8_scales_offset(n) + (size_t)(n / TENSOR_QK) * sizeof(float);
}

/* A Q8_0 row, then per block mult * (sum of its codes), then per block its
 * scale as a float. */
static void quantize_act_sums(const float *x, void *dst, int64_t n, int32_t mult)
{
    tensor_get_quant(STRATA_TYPE_Q8_0)(x, dst, n);
    const block_q8_0 *b = dst;
    int32_t *sums = (int32_t *)((char *)dst + tensor_x8_sums_offset(n));
    float *scales = (float *)((char *)dst + tensor_x8_scales_offset(n));
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        int32_t s = 0;
        for (int i = 0; i < TENSOR_QK; i++) s += b[ib].qs[i];
        sums[ib] = mult * s;
        scales[ib] = tensor_f16_to_f32(b[ib].d);
    }
}

void tensor_x8_q4_0_quantize_act(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -8);
}

void tensor_x8_q5_0_quantize_act(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -16);
}

void tensor_x8_q8_0_quantize_act(const float *x, void *dst, int64_t n)
{
    quantize_act_sums(x, dst, n, -128);
}

tensor_quant_fn tensor_x8_act_quant(uint32_t type, enum strata_simd_level level)
{
#if defined(__x86_64__)
    const bool avx512 = level >= STRATA_SIMD_AVX512;
#else
    const bool avx512 = false;
    (void)level;
#endif
    switch (type) {
#if defined(__x86_64__)
    case STRATA_TYPE_Q4_0:
        return avx512 ? tensor_x8_q4_0_quantize_act_avx512 : tensor_x8_q4_0_quantize_act;
    case STRATA_TYPE_Q5_0:
        return avx512 ? tensor_x8_q5_0_quantize_act_avx512 : tensor_x8_q5_0_quantize_act;
    case STRATA_TYPE_Q8_0:
    case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_MXFP4:
        return avx512 ? tensor_x8_q8_0_quantize_act_avx512 : tensor_x8_q8_0_quantize_act;
#else
    case STRATA_TYPE_Q4_0: return tensor_x8_q4_0_quantize_act;
    case STRATA_TYPE_Q5_0: return tensor_x8_q5_0_quantize_act;
    case STRATA_TYPE_Q8_0:
    case STRATA_TYPE_IQ4_NL:
    case STRATA_TYPE_MXFP4: return tensor_x8_q8_0_quantize_act;
#endif
    case STRATA_TYPE_Q2_K:
    case STRATA_TYPE_Q3_K:
    case STRATA_TYPE_Q4_K:
    case STRATA_TYPE_Q5_K:
    case STRATA_TYPE_Q6_K:
    case STRATA_TYPE_IQ4_XS:
    case STRATA_TYPE_IQ3_XXS:
    case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ2_XXS:
    case STRATA_TYPE_IQ1_S:
    case STRATA_TYPE_IQ2_XS:
    case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ1_M:
    case STRATA_TYPE_TQ1_0:
    case STRATA_TYPE_TQ2_0:
#if defined(__x86_64__)
        if (level >= STRATA_SIMD_AVX2) return tensor_x8_q8_k_quantize_act_avx2;
#endif
        return tensor_get_quant(STRATA_TYPE_Q8_K);
    case STRATA_TYPE_Q4_1:
    case STRATA_TYPE_Q5_1: return tensor_get_quant(STRATA_TYPE_Q8_1);
    case STRATA_TYPE_F16:
    case STRATA_TYPE_BF16: return tensor_x8_f32_act;
    default: return NULL;
    }
}

void tensor_x8_scalar32(int64_t n, const void *w, size_t block_bytes, tensor_x8_isum32_fn isum,
                        const void *x, size_t xs, float *y, size_t ys, int nt)
{
    const int64_t nb = n / TENSOR_QK;
    for (int t = 0; t < nt; t++) {
        const block_q8_0 *xb = (const block_q8_0 *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const char *blk = (const char *)w + (size_t)ib * block_bytes;
            uint16_t d[8];
            memcpy(d, blk, sizeof d);
            const float dx = tensor_f16_to_f32(xb[ib].d);
            for (int r = 0; r < 8; r++) {
                float dd = tensor_f16_to_f32(d[r]) * dx;
                acc[r] = fmaf((float)isum(blk, r, xb[ib].qs), dd, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}
