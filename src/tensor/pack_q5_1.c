/* Q4_1 and Q5_1 x8: the packers, the row unpackers and the kernels at
 * every level (pack_internal.h has the layouts and the float steps).
 *
 * The two "offset" legacy types, w = d q + m: Q4_1 is Q4_0's x8 layout
 * with a second row of f16 values (the offsets m), Q5_1 is Q5_0's with
 * the same. The codes are unsigned (0..15, 0..31) and used as they are,
 * maddubs's and VPDPBUSD's unsigned operand. The activations are the file
 * layout's Q8_1 rows, whose blocks carry s, the f16 sum of their decoded
 * values, for the offset term m s: the same s the file layout's kernels
 * (and llama.cpp's) use, so packing moves results only by the order of the
 * float steps.
 *
 * llama.cpp's quantizer writes Q5_1 for the matrices of a Q5_K_M or Q5_K_S
 * file whose rows are no whole K-quant blocks (gemma3's 1152 columns). */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"

#if defined(__x86_64__)
#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"
#endif

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The element that code vector j (0..7) holds in byte 4r + e: 8 (j / 2) +
 * 4 (j % 2) + e, as in Q4_0 x8. */
static int x8_elem(int j, int e)
{
    return 8 * (j / 2) + 4 * (j % 2) + e;
}

/* Code of element i of a GGUF block's nibbles qs and, for Q5_1, high bits
 * qh (NULL for Q4_1). */
static int gguf_code(const uint8_t *qs, const uint8_t *qh, int i)
{
    const int lo = (qs[i % 16] >> (4 * (i / 16))) & 15;
    return qh == NULL ? lo : lo | ((qh[i / 8] >> (i % 8)) & 1) << 4;
}

/* Code of row r in code vector j, byte e of an x8 block's nibbles qs and
 * fifth bits qh (NULL for Q4_1). */
static int x8_code(const uint8_t *qs, const uint8_t *qh, int j, int r, int e)
{
    const uint8_t lo = qs[32 * (j / 2) + 4 * r + e];
    const int lo4 = j % 2 ? lo >> 4 : lo & 15;
    return qh == NULL ? lo4 : lo4 | ((qh[4 * r + e] >> j) & 1) << 4;
}

/* One row's block into an x8 block's nibbles and (qh non-NULL) fifth bits. */
static void pack_codes(const uint8_t *sqs, const uint8_t *sqh, int r, uint8_t *qs, uint8_t *qh)
{
    for (int e = 0; e < 4; e++) {
        for (int m = 0; m < 4; m++) {
            int lo = gguf_code(sqs, sqh, x8_elem(2 * m, e)) & 15;
            int hi = gguf_code(sqs, sqh, x8_elem(2 * m + 1, e)) & 15;
            qs[32 * m + 4 * r + e] = (uint8_t)(lo | hi << 4);
        }
        if (qh != NULL)
            for (int j = 0; j < 8; j++)
                qh[4 * r + e] |= (uint8_t)((gguf_code(sqs, sqh, x8_elem(j, e)) >> 4) << j);
    }
}

/* The inverse of pack_codes. */
static void unpack_codes(const uint8_t *qs, const uint8_t *qh, int r, uint8_t *oqs, uint8_t *oqh)
{
    memset(oqs, 0, TENSOR_QK / 2);
    if (oqh != NULL) memset(oqh, 0, 4);
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int q = x8_code(qs, qh, j, r, e), i = x8_elem(j, e);
            oqs[i % 16] |= (uint8_t)((q & 15) << (4 * (i / 16)));
            if (oqh != NULL) oqh[i / 8] |= (uint8_t)((q >> 4) << (i % 8));
        }
}

bool tensor_x8_pack_q4_1(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q4_1x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++)
        for (int r = 0; r < 8; r++) {
            const block_q4_1 *b =
                (const block_q4_1 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            out[ib].d[r] = b->d;
            out[ib].m[r] = b->m;
            pack_codes(b->qs, NULL, r, out[ib].qs, NULL);
        }
    return true;
}

bool tensor_x8_pack_q5_1(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q5_1x8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        memset(out[ib].qh, 0, sizeof out[ib].qh);
        for (int r = 0; r < 8; r++) {
            const block_q5_1 *b =
                (const block_q5_1 *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            out[ib].d[r] = b->d;
            out[ib].m[r] = b->m;
            pack_codes(b->qs, b->qh, r, out[ib].qs, out[ib].qh);
        }
    }
    return true;
}

void tensor_x8_row_q4_1(const void *group, int64_t n, int r, void *dst)
{
    const block_q4_1x8 *g = group;
    block_q4_1 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        out[ib].d = g[ib].d[r];
        out[ib].m = g[ib].m[r];
        unpack_codes(g[ib].qs, NULL, r, out[ib].qs, NULL);
    }
}

void tensor_x8_row_q5_1(const void *group, int64_t n, int r, void *dst)
{
    const block_q5_1x8 *g = group;
    block_q5_1 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
        out[ib].d = g[ib].d[r];
        out[ib].m = g[ib].m[r];
        unpack_codes(g[ib].qs, g[ib].qh, r, out[ib].qs, out[ib].qh);
    }
}

/* The reference: pack_internal.h's float steps per (row, token), the
 * integer sum taken element by element. Both block structs start with d[8]
 * and m[8], then the 128 nibble bytes (and Q5_1's 32 bytes of fifth bits). */
static void scalar_offset(int64_t n, const void *w, size_t block_bytes, bool five, const void *x,
                          size_t xs, float *y, size_t ys, int nt)
{
    const int64_t nb = n / TENSOR_QK;
    for (int t = 0; t < nt; t++) {
        const block_q8_1 *xb = (const block_q8_1 *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *blk = (const uint8_t *)w + (size_t)ib * block_bytes;
            uint16_t d[8], m[8];
            memcpy(d, blk, sizeof d);
            memcpy(m, blk + 16, sizeof m);
            const uint8_t *qs = blk + 32, *qh = five ? blk + 32 + 128 : NULL;
            const float dx = tensor_f16_to_f32(xb[ib].d), sx = tensor_f16_to_f32(xb[ib].s);
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0;
                for (int j = 0; j < 8; j++)
                    for (int e = 0; e < 4; e++)
                        isum += x8_code(qs, qh, j, r, e) * xb[ib].qs[x8_elem(j, e)];
                acc[r] = fmaf((float)isum, tensor_f16_to_f32(d[r]) * dx, acc[r]);
                acc[r] = fmaf(tensor_f16_to_f32(m[r]), sx, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

void tensor_x8_q4_1_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    scalar_offset(n, w, sizeof(block_q4_1x8), false, x, xs, y, ys, nt);
}

void tensor_x8_q5_1_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    scalar_offset(n, w, sizeof(block_q5_1x8), true, x, xs, y, ys, nt);
}

#if defined(__x86_64__)

/* One group x NT tokens; FIVE: Q5_1 (fifth bits at b + 32 + 128), else
 * Q4_1. Code vectors as Q4_0's and Q5_0's AVX2 kernels; int16: 4 maddubs
 * of codes up to 31 sum to at most 31744 < 32767 in magnitude, so a block
 * is two int16 sums taken to int32 apart (Q4_1's codes would allow 8, the
 * integers are the same). */
TENSOR_AVX2_INLINE void offset_tile(int64_t n, const void *w, size_t block_bytes, const int FIVE,
                                    const void *x, size_t xs, float *y, size_t ys, const int NT)
{
    const int64_t nb = n / TENSOR_QK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = (const uint8_t *)w + (size_t)ib * block_bytes;
        for (size_t off = 0; off < block_bytes; off += 64)
            _mm_prefetch((const char *)b + TENSOR_X8_PREFETCH_AHEAD + off, _MM_HINT_T0);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
        const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16)));
        const uint8_t *qs = b + 32;
        __m256i c[8];
        tensor_x8_codes_avx2(qs, FIVE ? qs + 128 : NULL, c);
        for (int t = 0; t < NT; t++) {
            const block_q8_1 *xb = (const block_q8_1 *)((const char *)x + (size_t)t * xs) + ib;
            const __m256i isum = tensor_x8_dot_halves_avx2(c, xb->qs, ones, ones);
            const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(tensor_h2f(xb->d)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, acc[t]);
            acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(tensor_h2f(xb->s)), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

#define OFFSET_AVX2(t, FIVE)                                                                     \
    TENSOR_AVX2_TARGET void tensor_x8_##t##_avx2(int64_t n, const void *w, const void *x,       \
                                                 size_t xs, float *y, size_t ys, int nt)        \
    {                                                                                            \
        const size_t bb = sizeof(block_##t##x8);                                                 \
        switch (nt) {                                                                            \
        case 1: offset_tile(n, w, bb, FIVE, x, xs, y, ys, 1); break;                             \
        case 2: offset_tile(n, w, bb, FIVE, x, xs, y, ys, 2); break;                             \
        case 3: offset_tile(n, w, bb, FIVE, x, xs, y, ys, 3); break;                             \
        default: offset_tile(n, w, bb, FIVE, x, xs, y, ys, 4); break;                            \
        }                                                                                        \
    }
OFFSET_AVX2(q4_1, 0)
OFFSET_AVX2(q5_1, 1)

/* AVX-512 VNNI, 16 rows (two groups) x NT tokens (pack_avx512.c has the
 * frame): the code vectors as Q4_0's and Q5_0's AVX-512 tiles, VPDPBUSD
 * from zero in two chains (|isum| <= 32 * 31 * 127 < 2^17), then the two
 * float steps. */
X8_AVX512_INLINE void offset_tile512(int64_t n, const void *w, size_t block_bytes, const int FIVE,
                                     size_t gs, const void *x, size_t xs, float *y, size_t ys,
                                     const int NG, const int NT)
{
    const int64_t nb = n / TENSOR_QK;
    __m512 acc[X8_AVX512_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b0 = (const uint8_t *)w + (size_t)ib * block_bytes;
        const uint8_t *b1 = b0 + gs;
        prefetch_lines(b0, block_bytes, TENSOR_X8_AVX512_PREFETCH_AHEAD);
        if (NG == 2) prefetch_lines(b1, block_bytes, TENSOR_X8_AVX512_PREFETCH_AHEAD);
        const __m512 dw = load_scales((const uint16_t *)b0, (const uint16_t *)b1, NG);
        const __m512 mw = load_scales((const uint16_t *)(b0 + 16), (const uint16_t *)(b1 + 16), NG);
        const uint8_t *qs0 = b0 + 32, *qs1 = b1 + 32;
        __m512i c[8];
        x8_codes_512(qs0, qs1, FIVE ? qs0 + 128 : NULL, qs1 + 128, NG, c);
        for (int t = 0; t < NT; t++) {
            const block_q8_1 *xb = (const block_q8_1 *)((const char *)x + (size_t)t * xs) + ib;
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int j = 0; j < 8; j += 2) {
                s0 = _mm512_dpbusd_epi32(s0, c[j], bcast4_512(xb->qs + 4 * j));
                s1 = _mm512_dpbusd_epi32(s1, c[j + 1], bcast4_512(xb->qs + 4 * j + 4));
            }
            const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(tensor_h2f(xb->d)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), dd, acc[t]);
            acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tensor_h2f(xb->s)), acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

X8_AVX512_INLINE void q4_1_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    offset_tile512(n, w, sizeof(block_q4_1x8), 0, gs, x, xs, y, ys, NG, NT);
}

X8_AVX512_INLINE void q5_1_tile(int64_t n, const void *w, size_t gs, const void *x, size_t xs,
                                float *y, size_t ys, const int NG, const int NT)
{
    offset_tile512(n, w, sizeof(block_q5_1x8), 1, gs, x, xs, y, ys, NG, NT);
}

X8_AVX512_SET(q4_1)
X8_AVX512_SET(q5_1)

#endif /* __x86_64__ */
