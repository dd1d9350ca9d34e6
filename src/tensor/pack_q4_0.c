/* Q4_0 x8: the packer and the kernels (pack_internal.h has the layout and
 * the float steps every kernel follows).
 *
 * The codes stay unsigned (0..15) so that they can be maddubs's unsigned
 * operand directly; the -8 of each code is taken off once per block and
 * token as -8 * (sum of the activation codes), a sum the quantizer of the
 * activation row stores after the Q8_0 blocks (tensor_x8_act_row_bytes,
 * filled in pack.c). */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"
#include "tensor/vecdot_x86.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

bool tensor_x8_pack_q4_0(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q4_0x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        block_q4_0x8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_q4_0 *b =
                (const block_q4_0 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            /* elements 8m + e and 8m + 4 + e (e < 4) sit in source bytes
             * 8 (m & 1) + e and 8 (m & 1) + 4 + e, low nibbles for m < 2,
             * high nibbles for m >= 2 */
            for (int m = 0; m < 4; m++) {
                const uint8_t *q = b->qs + 8 * (m & 1);
                const int sh = 4 * (m >> 1);
                for (int e = 0; e < 4; e++)
                    o->qs[32 * m + 4 * r + e] =
                        (uint8_t)(((q[e] >> sh) & 15) | ((q[4 + e] >> sh) & 15) << 4);
            }
        }
    }
    return true;
}

static int32_t q4_0x8_isum(const void *block, int r, const int8_t *xq)
{
    const block_q4_0x8 *b = block;
    int32_t isum = 0;
    for (int m = 0; m < 4; m++)
        for (int e = 0; e < 4; e++) {
            uint8_t q = b->qs[32 * m + 4 * r + e];
            isum += ((q & 15) - 8) * xq[8 * m + e];
            isum += ((q >> 4) - 8) * xq[8 * m + 4 + e];
        }
    return isum;
}

void tensor_x8_q4_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    tensor_x8_scalar32(n, w, sizeof(block_q4_0x8), q4_0x8_isum, x, xs, y, ys, nt);
}

#if defined(__x86_64__)

/* NT tokens. Int16 bound: 8 maddubs results of codes 0..15 with
 * activations in [-128, 127] sum to at most 8 * 2 * 15 * 128 < 32768. */
TENSOR_AVX2_INLINE void q4_0x8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q4_0x8 *wb = w;
    const int64_t nb = n / TENSOR_QK;
    const size_t corr_off = tensor_x8_sums_offset(n);
    const size_t scales_off = tensor_x8_scales_offset(n);
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q4_0x8 *b = &wb[ib];
        for (size_t off = 0; off < sizeof(block_q4_0x8); off += 64)
            _mm_prefetch((const char *)b + TENSOR_X8_PREFETCH_AHEAD + off, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        __m256i c[8];
        for (int m = 0; m < 4; m++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * m));
            c[2 * m] = _mm256_and_si256(q, m4);
            c[2 * m + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        for (int t = 0; t < NT; t++) {
            const char *xr = (const char *)x + (size_t)t * xs;
            const block_q8_0 *xb = (const block_q8_0 *)xr + ib;
            __m256i s16 = _mm256_maddubs_epi16(c[0], tensor_bcast4(xb->qs));
            for (int j = 1; j < 8; j++)
                s16 = _mm256_add_epi16(s16,
                                       _mm256_maddubs_epi16(c[j], tensor_bcast4(xb->qs + 4 * j)));
            int32_t corr;
            memcpy(&corr, xr + corr_off + 4 * (size_t)ib, 4);
            __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(corr));
            const __m256 dd =
                _mm256_mul_ps(dw, _mm256_set1_ps(tensor_x8_act_scale(xr, scales_off, ib)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q4_0_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q4_0x8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q4_0x8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q4_0x8_tile(n, w, x, xs, y, ys, 3); break;
    default: q4_0x8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

#endif /* __x86_64__ */
