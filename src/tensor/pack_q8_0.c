/* Q8_0 x8: the packer and the kernels (pack_internal.h has the layout and
 * the float steps every kernel follows).
 *
 * Weights and activations are both signed bytes, and maddubs wants one
 * unsigned operand. The AVX2 kernel uses |w| as that operand and
 * sign(w) * x as the signed one: |w| is computed once per code vector and
 * shared by all the tokens of a call. This needs x != -128 (negating -128
 * overflows), which holds for every activation row: the Q8_0 quantizer
 * clamps its codes to [-127, 127] (max-abs rule). The weights could even
 * hold -128 here (|-128| = 128 as an unsigned byte), but the layout keeps
 * them in [-127, 127] (tensor_pack refuses -128) so that a kernel may
 * equally take |x| as the unsigned operand. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/vecdot_x86.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

bool tensor_x8_pack_q8_0(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q8_0x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        block_q8_0x8 *o = &out[ib];
        for (int r = 0; r < 8; r++) {
            const block_q8_0 *b =
                (const block_q8_0 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            bool has_min = false;
            for (int i = 0; i < TENSOR_QK; i++) has_min |= b->qs[i] == -128;
            if (has_min) return false;
            o->d[r] = b->d;
            for (int j = 0; j < 8; j++) memcpy(o->qs + 32 * j + 4 * r, b->qs + 4 * j, 4);
        }
    }
    return true;
}

static int32_t q8_0x8_isum(const void *block, int r, const int8_t *xq)
{
    const block_q8_0x8 *b = block;
    int32_t isum = 0;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) isum += b->qs[32 * j + 4 * r + e] * xq[4 * j + e];
    return isum;
}

void tensor_x8_q8_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    tensor_x8_scalar32(n, w, sizeof(block_q8_0x8), q8_0x8_isum, x, xs, y, ys, nt);
}

#if defined(__x86_64__)

/* NT tokens, one interleaved block at a time. Step j takes the code vector
 * of elements 4j..4j+3 of the 8 rows (bytes 4r..4r+3 = row r's) and, per
 * token, those 4 activation bytes in every int32 lane: maddubs(|w|,
 * sign(w) * x) gives int16 lane 2r + k = row r's products 4j + 2k and
 * 4j + 2k + 1, and madd with ones their sum in int32 lane r.
 *
 * Int16 bound: |w|, |x| <= 127, so an int16 pair is at most 2 * 127 * 127
 * = 32258 in magnitude; two of them (64516) could overflow int16, so every
 * step is widened to int32 at once (any grouping of two or more steps in
 * int16 fails for codes at +-127). In int32 a block sums to at most
 * 32 * 127 * 127 < 2^19, exact, and so is its conversion to float.
 *
 * For NT > 1 the empty asm after each int32 add pins the running sum: left
 * free, the compiler regroups the 8 * NT madd results of a block into
 * trees that keep them all live, which spills from NT = 2 on. */
TENSOR_AVX2_INLINE void q8_0x8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q8_0x8 *wb = w;
    const int64_t nb = n / TENSOR_QK;
    const size_t scales_off = tensor_x8_scales_offset(n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q8_0x8 *b = &wb[ib];
        /* the group is one contiguous stream: ask for a line ~4 blocks on */
        for (size_t off = 0; off < sizeof(block_q8_0x8); off += 64)
            _mm_prefetch((const char *)b + TENSOR_X8_PREFETCH_AHEAD + off, _MM_HINT_T0);
        const block_q8_0 *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_0 *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
            const __m256i qa = _mm256_abs_epi8(q);
            for (int t = 0; t < NT; t++) {
                const __m256i xq = _mm256_sign_epi8(tensor_bcast4(xb[t]->qs + 4 * j), q);
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, xq), ones);
                isum[t] = _mm256_add_epi32(isum[t], p);
                if (NT > 1) __asm__("" : "+x"(isum[t]));
            }
        }
        /* lane r: d_r * dx, then acc = fma(isum, that, acc) as in the
         * scalar reference */
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        for (int t = 0; t < NT; t++) {
            const float xd = tensor_x8_act_scale((const char *)x + (size_t)t * xs, scales_off, ib);
            const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xd));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q8_0_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q8_0x8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q8_0x8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q8_0x8_tile(n, w, x, xs, y, ys, 3); break;
    default: q8_0x8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

#endif /* __x86_64__ */
