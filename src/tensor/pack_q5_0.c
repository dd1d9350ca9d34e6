/* Q5_0 x8: the packer, the row unpacker and the kernels at every level
 * (pack_internal.h has the layout and the float steps every kernel
 * follows).
 *
 * Q5_0 is Q4_0 with a fifth code bit, laid out as one Q5_K x8 sub-block:
 * Q4_0 x8's interleaved nibbles plus one byte per code-vector position
 * holding the fifth bits of the 8 code vectors. A kernel rebuilds each
 * code vector (0..31, unsigned: maddubs's and VPDPBUSD's unsigned operand)
 * with a shift, a mask and an or; the -16 of each code is taken off once
 * per block and token as -16 * (sum of the activation codes), which the
 * activation row stores after its Q8_0 blocks (tensor_x8_act_row_bytes).
 *
 * The rows of 1152 elements of gemma3-1b's Q4_K_M file are Q5_0 (no whole
 * K-quant blocks), 117 of its matrices; in the GGUF layout they ran at
 * about half the read rate of the packed ones. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Code q (0..31) of element i of a GGUF Q5_0 block (blocks.h). */
static int q5_0_code(const block_q5_0 *b, int i)
{
    const int lo = (b->qs[i % 16] >> (4 * (i / 16))) & 15;
    return lo | ((b->qh[i / 8] >> (i % 8)) & 1) << 4;
}

/* The element that code vector j (0..7) holds in byte 4r + e, as in Q4_0
 * x8: 8 (j / 2) + 4 (j % 2) + e. */
static int q5_0x8_elem(int j, int e)
{
    return 8 * (j / 2) + 4 * (j % 2) + e;
}

/* Code q (0..31) of row r in code vector j, byte e. */
static int q5_0x8_code(const block_q5_0x8 *b, int j, int r, int e)
{
    const uint8_t lo = b->qs[32 * (j / 2) + 4 * r + e];
    const int lo4 = j % 2 ? lo >> 4 : lo & 15;
    return lo4 | ((b->qh[4 * r + e] >> j) & 1) << 4;
}

bool tensor_x8_pack_q5_0(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q5_0x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        block_q5_0x8 *o = &out[ib];
        memset(o->qh, 0, sizeof o->qh);
        for (int r = 0; r < 8; r++) {
            const block_q5_0 *b =
                (const block_q5_0 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            for (int e = 0; e < 4; e++) {
                for (int m = 0; m < 4; m++) {
                    int lo = q5_0_code(b, q5_0x8_elem(2 * m, e)) & 15;
                    int hi = q5_0_code(b, q5_0x8_elem(2 * m + 1, e)) & 15;
                    o->qs[32 * m + 4 * r + e] = (uint8_t)(lo | hi << 4);
                }
                for (int j = 0; j < 8; j++)
                    o->qh[4 * r + e] |= (uint8_t)((q5_0_code(b, q5_0x8_elem(j, e)) >> 4) << j);
            }
        }
    }
    return true; /* every 5-bit code fits the layout */
}

void tensor_x8_row_q5_0(const void *group, int64_t n, int r, void *dst)
{
    const block_q5_0x8 *g = group;
    block_q5_0 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        const block_q5_0x8 *b = &g[ib];
        block_q5_0 *o = &out[ib];
        o->d = b->d[r];
        memset(o->qs, 0, sizeof o->qs);
        memset(o->qh, 0, sizeof o->qh);
        for (int j = 0; j < 8; j++)
            for (int e = 0; e < 4; e++) {
                const int q = q5_0x8_code(b, j, r, e), i = q5_0x8_elem(j, e);
                o->qs[i % 16] |= (uint8_t)((q & 15) << (4 * (i / 16)));
                o->qh[i / 8] |= (uint8_t)((q >> 4) << (i % 8));
            }
    }
}

static int32_t q5_0x8_isum(const void *block, int r, const int8_t *xq)
{
    const block_q5_0x8 *b = block;
    int32_t isum = 0;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++)
            isum += (q5_0x8_code(b, j, r, e) - 16) * xq[q5_0x8_elem(j, e)];
    return isum;
}

void tensor_x8_q5_0_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    tensor_x8_scalar32(n, w, sizeof(block_q5_0x8), q5_0x8_isum, x, xs, y, ys, nt);
}

#if defined(__x86_64__)

/* NT tokens, Q4_0's AVX2 kernel with 5-bit codes. Int16 bound: a maddubs
 * lane is two products of a code 0..31 and an activation in [-128, 127],
 * at most 7936 in magnitude; 4 sum to at most 31744 < 32767, 8 could not,
 * so a block is two int16 sums (code vectors 0..3 and 4..7) taken to int32
 * apart. Int32: |isum| <= 32 * 31 * 128 + 16 * 32 * 128 < 2^18. */
TENSOR_AVX2_INLINE void q5_0x8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q5_0x8 *wb = w;
    const int64_t nb = n / TENSOR_QK;
    const size_t corr_off = tensor_x8_sums_offset(n);
    const size_t scales_off = tensor_x8_scales_offset(n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q5_0x8 *b = &wb[ib];
        for (size_t off = 0; off < sizeof(block_q5_0x8); off += 64)
            _mm_prefetch((const char *)b + TENSOR_X8_PREFETCH_AHEAD + off, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        __m256i c[8];
        tensor_x8_codes_avx2(b->qs, b->qh, c);
        for (int t = 0; t < NT; t++) {
            const char *xr = (const char *)x + (size_t)t * xs;
            const block_q8_0 *xb = (const block_q8_0 *)xr + ib;
            int32_t corr;
            memcpy(&corr, xr + corr_off + 4 * (size_t)ib, 4);
            const __m256i isum = _mm256_add_epi32(_mm256_set1_epi32(corr),
                                                  tensor_x8_dot_halves_avx2(c, xb->qs, ones, ones));
            const __m256 dd =
                _mm256_mul_ps(dw, _mm256_set1_ps(tensor_x8_act_scale(xr, scales_off, ib)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q5_0_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q5_0x8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q5_0x8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q5_0x8_tile(n, w, x, xs, y, ys, 3); break;
    default: q5_0x8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

/* AVX-512 VNNI, 16 rows (two groups) x NT tokens: Q4_0's tile with the
 * fifth bit or-ed into each code vector (pack_avx512.h's x8_q8_0_tile). */
X8_AVX512_INLINE void q5_0_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    x8_q8_0_tile(n, w, gs, x, xs, y, ys, NG, NT, X8_TILE_Q5_0);
}

X8_AVX512_SET(q5_0)

#endif /* __x86_64__ */
