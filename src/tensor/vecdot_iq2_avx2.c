/* AVX2 (+FMA, F16C) dot products of the IQ types (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with Q8_K activations, checked against
 * vecdot_iq_scalar.c: vecdot_iq_tmpl.h's template with maddubs + madd, as
 * the 1x1, 4x1 and 2x8 prefill shapes (AVX2_SET), so that a (row, token)
 * pair gets the same bits from each; the prefill tile decodes a row's
 * block once for 8 tokens. */
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define TMPL_INLINE TENSOR_AVX2_INLINE
#define TMPL_DOT_SCALED_ADD(acc, u, s, sc16) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16))
#include "tensor/vecdot_iq_tmpl.h"

AVX2_SET(iq2_xxs, 2, 8);
AVX2_SET(iq2_xs, 2, 8);
AVX2_SET(iq2_s, 2, 8);
AVX2_SET(iq3_xxs, 2, 8);
AVX2_SET(iq3_s, 2, 8);
AVX2_SET(iq1_s, 2, 8);
AVX2_SET(iq1_m, 2, 8);

#endif /* __x86_64__ */
