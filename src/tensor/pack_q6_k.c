/* Q6_K x8: the packer and the kernels (pack_internal.h has the layout and
 * the float steps every kernel follows).
 *
 * The 6-bit codes stay 6-bit (1680 bytes per 8 rows, as 8 Q6_K blocks):
 * low nibbles interleaved as Q4_K's, the high 2 bits of 4 code vectors in
 * one vector of bit pairs, so a kernel rebuilds each code vector (0..63,
 * unsigned, maddubs's and VPDPBUSD's unsigned operand) with a shift and a
 * mask or two. The code's offset of 32 comes in through the Q8_K
 * activation row's bsums, as Q4_K's mins do. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"
#include "tensor/vecdot_x86.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Code q (0..63) of element i of a GGUF Q6_K block (blocks.h). */
static int q6_k_code(const block_q6_k *b, int i)
{
    int h = i / 128, c = (i % 128) / 32, l = i % 32;
    uint8_t byte = b->ql[64 * h + l + 32 * (c & 1)];
    int lo4 = c < 2 ? (byte & 15) : (byte >> 4);
    int hi2 = (b->qh[32 * h + l] >> (2 * c)) & 3;
    return lo4 | hi2 << 4;
}

/* The element of sub-block s that code vector j (0..7) holds in byte
 * 4r + e: 8 (j / 2) + 4 (j % 2) + e, as in Q4_K's c[j]. */
static int q6_kx8_elem(int s, int j, int e)
{
    return 32 * s + 8 * (j / 2) + 4 * (j % 2) + e;
}

bool tensor_x8_pack_q6_k(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_q6_kx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
        block_q6_kx8 *o = &out[ib];
        memset(o->sb, 0, sizeof o->sb);
        for (int r = 0; r < 8; r++) {
            const block_q6_k *b =
                (const block_q6_k *)((const char *)src + (size_t)r * src_row_bytes) + ib;
            o->d[r] = b->d;
            for (int j = 0; j < 16; j++) o->sc[8 * j + r] = b->scales[j];
            for (int s = 0; s < 8; s++)
                for (int e = 0; e < 4; e++) {
                    for (int m = 0; m < 4; m++) {
                        int lo = q6_k_code(b, q6_kx8_elem(s, 2 * m, e)) & 15;
                        int hi = q6_k_code(b, q6_kx8_elem(s, 2 * m + 1, e)) & 15;
                        o->sb[s].ql[32 * m + 4 * r + e] = (uint8_t)(lo | hi << 4);
                    }
                    for (int j = 0; j < 8; j++) {
                        int q = q6_k_code(b, q6_kx8_elem(s, j, e));
                        o->sb[s].qh[32 * (j / 4) + 4 * r + e] |= (uint8_t)((q >> 4) << (2 * (j % 4)));
                    }
                }
        }
    }
    return true; /* every code and scale fits the layout */
}

/* Code q (0..63) of row r's element 32 s + 8 m + 4 hi + e. */
static int q6_kx8_code(const block_q6_kx8 *b, int s, int j, int r, int e)
{
    uint8_t lo = b->sb[s].ql[32 * (j / 2) + 4 * r + e];
    int lo4 = j % 2 ? lo >> 4 : lo & 15;
    int hi2 = (b->sb[s].qh[32 * (j / 4) + 4 * r + e] >> (2 * (j % 4))) & 3;
    return lo4 | hi2 << 4;
}

/* The reference: pack_internal.h's float steps, one (row, token) pair at a
 * time, the integer sums element by element. */
void tensor_x8_q6_k_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    const block_q6_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    for (int t = 0; t < nt; t++) {
        const block_q8_k *xb = (const block_q8_k *)((const char *)x + (size_t)t * xs);
        float acc[8] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const block_q6_kx8 *b = &wb[ib];
            const int8_t *xq = xb[ib].qs;
            for (int r = 0; r < 8; r++) {
                int32_t isum = 0;
                for (int g = 0; g < 16; g++) { /* 16 elements per scale */
                    int32_t part = 0;
                    const int s = g / 2;
                    for (int jj = 0; jj < 4; jj++) {
                        const int j = 4 * (g % 2) + jj;
                        for (int e = 0; e < 4; e++)
                            part += q6_kx8_code(b, s, j, r, e) * xq[q6_kx8_elem(s, j, e)];
                    }
                    isum += b->sc[8 * g + r] * (part - 32 * xb[ib].bsums[g]);
                }
                float dd = tensor_f16_to_f32(b->d[r]) * xb[ib].d;
                acc[r] = fmaf((float)isum, dd, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) y[(size_t)t * ys + r] = acc[r];
    }
}

#if defined(__x86_64__)

/* Same distance as Q4_K's (pack_q4_k.c): two interleaved blocks. */
#define Q6_KX8_PREFETCH (2 * sizeof(block_q6_kx8))

/* One group x NT tokens.
 *
 * Per sub-block s (groups 2s and 2s + 1 of 16 elements): c[0..3] hold
 * group 2s's codes, c[4..7] group 2s + 1's. maddubs of a code vector
 * (0..63) with 4 broadcast activation bytes gives int16 pairs of at most
 * 2 * 63 * 128 = 16128; two of them sum to at most 32256 < 32767 (8
 * elements of one row per int16 pair of lanes 2r, 2r+1), and madd with the
 * row's scale in both lanes gives int32 lane r = sc * that dot. The
 * 6-bit codes' offset: isum -= 32 * sum_g sc_g * bsum_g, by madd of the
 * scales in pairs (groups 2p, 2p+1) with the bsums word p. Bounds:
 * |sum_g sc_g * dot_g| <= 16 * 128 * 16 * 63 * 128 < 2^28, the offset
 * term 32 * 16 * 128 * 2048 = 2^27: int32 throughout. */
TENSOR_AVX2_INLINE void q6_kx8_tile(int64_t n, const void *w, const void *x, size_t xs,
                                    float *y, size_t ys, const int NT)
{
    const block_q6_kx8 *wb = w;
    const int64_t nb = n / TENSOR_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    /* scale byte r (of 8, broadcast to each 64-bit lane) to the high byte
     * of int16 lanes 2r, 2r+1; an arithmetic shift then sign-extends it */
    const __m256i sc_hi = _mm256_setr_epi8(
        -1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,
        -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
    __m256 acc[TENSOR_X8_MAX_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const block_q6_kx8 *b = &wb[ib];
        const block_q8_k *xb[TENSOR_X8_MAX_T];
        __m256i isum[TENSOR_X8_MAX_T];
        for (int t = 0; t < NT; t++) {
            xb[t] = (const block_q8_k *)((const char *)x + (size_t)t * xs) + ib;
            isum[t] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; s++) {
            const uint8_t *ql = b->sb[s].ql, *qh = b->sb[s].qh;
            _mm_prefetch((const char *)ql + Q6_KX8_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)ql + Q6_KX8_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)qh + Q6_KX8_PREFETCH, _MM_HINT_T0);
            __m256i sc16[2];
            for (int k = 0; k < 2; k++) {
                int64_t sc8;
                memcpy(&sc8, b->sc + 8 * (2 * s + k), 8);
                sc16[k] = _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_hi), 8);
            }
            __m256i c[8];
            for (int h = 0; h < 2; h++) {
                const __m256i hb = _mm256_loadu_si256((const __m256i *)(qh + 32 * h));
                const __m256i hbits[4] = {
                    _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30),
                    _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30),
                    _mm256_and_si256(hb, m30),
                    _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)};
                for (int mm = 0; mm < 2; mm++) {
                    const int m = 2 * h + mm;
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(ql + 32 * m));
                    c[2 * m] = _mm256_or_si256(_mm256_and_si256(q, m4), hbits[2 * mm]);
                    c[2 * m + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                                   hbits[2 * mm + 1]);
                }
            }
            for (int t = 0; t < NT; t++) {
                const int8_t *xq = xb[t]->qs + 32 * s;
                for (int p = 0; p < 4; p++) { /* elements 8p..8p+7 of s */
                    __m256i s16 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(c[2 * p], tensor_bcast4(xq + 8 * p)),
                        _mm256_maddubs_epi16(c[2 * p + 1], tensor_bcast4(xq + 8 * p + 4)));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16, sc16[p / 2]));
                }
            }
        }
        /* scales in pairs: int16 lanes 2r, 2r+1 = groups 2p, 2p+1 of row r */
        __m256i scp[8];
        for (int p = 0; p < 8; p++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(b->sc + 16 * p));
            const __m128i bb = _mm_loadl_epi64((const __m128i *)(b->sc + 16 * p + 8));
            scp[p] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, bb));
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d));
        for (int t = 0; t < NT; t++) {
            __m256i off = _mm256_setzero_si256();
            for (int p = 0; p < 8; p++) {
                int32_t pair;
                memcpy(&pair, xb[t]->bsums + 2 * p, 4);
                off = _mm256_add_epi32(off, _mm256_madd_epi16(scp[p], _mm256_set1_epi32(pair)));
            }
            const __m256i is = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
            const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xb[t]->d));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), dd, acc[t]);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(y + (size_t)t * ys, acc[t]);
}

TENSOR_AVX2_TARGET void tensor_x8_q6_k_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: q6_kx8_tile(n, w, x, xs, y, ys, 1); break;
    case 2: q6_kx8_tile(n, w, x, xs, y, ys, 2); break;
    case 3: q6_kx8_tile(n, w, x, xs, y, ys, 3); break;
    default: q6_kx8_tile(n, w, x, xs, y, ys, 4); break;
    }
}

#endif /* __x86_64__ */
