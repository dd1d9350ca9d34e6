/* The Q8_0 attention kernels of attn_q8.h: the scalar reference, an AVX2
 * variant and an AVX-512 (VNNI) variant, and the table per SIMD level.
 *
 * Why the variants give the reference's bits:
 *   qk: the per-block dot product of two code vectors is an int32 that
 *       every variant computes exactly (codes are in [-127, 127], as
 *       tensor_quant_row_q8_0 writes them, so the AVX2 maddubs pairs stay
 *       below 2 * 127 * 127 < 2^15 and never saturate); then per block the
 *       float steps are the reference's: the scale product d_q * d_k, the
 *       int32 converted to float, one multiply, one add into the row's sum,
 *       blocks in ascending order. SIMD puts four query heads in four
 *       lanes, so each lane does exactly the scalar steps of its head.
 *   pv: per element, w = p * d_v (one rounding), then acc += w * code (a
 *       rounded multiply, then a rounded add), rows in ascending order; the
 *       lanes hold consecutive elements, each doing the scalar steps.
 * No fused multiply-add anywhere: ISO C mode keeps GCC from contracting
 * (-std=c11 means -ffp-contract=off), and the pragma does it for clang. */
#include "attn_q8.h"

#include "tensor/fp16.h"

#include <stdbool.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTN_Q8_X86 1
#endif

_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");

static inline const block_q8_0 *row_block(const uint8_t *row, int64_t b)
{
    return (const block_q8_0 *)(const void *)(row + (size_t)b * sizeof(block_q8_0));
}

/* --- scalar reference --- */

static void qk_scalar(float *scores, size_t ld_scores, const block_q8_0 *q, int64_t n_q,
                      const uint8_t *k, size_t k_row_bytes, int64_t n_rows, int64_t n_blk)
{
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *kr = k + (size_t)j * k_row_bytes;
        for (int64_t g = 0; g < n_q; g++) {
            const block_q8_0 *qg = q + g * n_blk;
            float s = 0.0f;
            for (int64_t b = 0; b < n_blk; b++) {
                const block_q8_0 *kb = row_block(kr, b);
                int32_t isum = 0;
                for (int i = 0; i < TENSOR_QK; i++) isum += (int32_t)qg[b].qs[i] * kb->qs[i];
                float d = tensor_f16_to_f32(qg[b].d) * tensor_f16_to_f32(kb->d);
                s += (float)isum * d;
            }
            scores[(size_t)g * ld_scores + (size_t)j] = s;
        }
    }
}

static void pv_scalar(float *acc, size_t ld_acc, const float *p, size_t ld_p, int64_t n_q,
                      const uint8_t *v, size_t v_row_bytes, int64_t n_rows, int64_t n_blk)
{
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *vr = v + (size_t)j * v_row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            const block_q8_0 *vb = row_block(vr, b);
            const float dv = tensor_f16_to_f32(vb->d);
            for (int64_t g = 0; g < n_q; g++) {
                const float w = p[(size_t)g * ld_p + (size_t)j] * dv;
                float *a = acc + (size_t)g * ld_acc + (size_t)(b * TENSOR_QK);
                for (int i = 0; i < TENSOR_QK; i++) a[i] += w * (float)vb->qs[i];
            }
        }
    }
}

static const tensor_attn_q8 g_scalar = {
    .name = "scalar", .level = STRATA_SIMD_SCALAR, .qk = qk_scalar, .pv = pv_scalar};

#ifdef ATTN_Q8_X86

/* --- AVX2 and AVX-512: one template, two integer dot products --- */

#define AVX2_ATTRS "avx2,f16c"
#define AVX512_ATTRS "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni"

/* The 8 int32 lanes of a code dot product: lane l holds the sum over
 * elements 4l .. 4l+3 of q * k. Both forms multiply |k| (unsigned) by q
 * with k's sign moved onto it. */
static inline __attribute__((always_inline, target(AVX2_ATTRS))) __m256i
dot8_avx2(__m256i absk, __m256i sq)
{
    const __m256i ones = _mm256_set1_epi16(1);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(absk, sq), ones);
}

static inline __attribute__((always_inline, target(AVX512_ATTRS))) __m256i
dot8_avx512(__m256i absk, __m256i sq)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), absk, sq);
}

/* Sums of four lane vectors: lane i of the result = the sum of all lanes
 * of v_i (exact: integers). */
static inline __attribute__((always_inline, target(AVX2_ATTRS))) __m128i
hsum4_i32(__m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    /* lanes: v0 0..3, v1 0..3, v2 0..3, v3 0..3 | the same of lanes 4..7 */
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

static inline __attribute__((always_inline, target(AVX2_ATTRS))) int32_t hsum1_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* qk with four query heads per pass: lanes of `s` are heads g..g+3, each
 * doing the reference's per-block steps; a tail of fewer heads goes one at
 * a time. */
#define QK_BODY(DOT)                                                                        \
    for (int64_t j = 0; j < n_rows; j++) {                                                  \
        const uint8_t *kr = k + (size_t)j * k_row_bytes;                                    \
        int64_t g = 0;                                                                      \
        for (; g + 4 <= n_q; g += 4) {                                                      \
            const block_q8_0 *q0 = q + g * n_blk, *q1 = q0 + n_blk, *q2 = q1 + n_blk,       \
                             *q3 = q2 + n_blk;                                              \
            __m128 s = _mm_setzero_ps();                                                    \
            for (int64_t b = 0; b < n_blk; b++) {                                           \
                const block_q8_0 *kb = row_block(kr, b);                                    \
                __m256i kq = _mm256_loadu_si256((const __m256i *)(const void *)kb->qs);     \
                __m256i ak = _mm256_sign_epi8(kq, kq);                                      \
                __m256i p0 = DOT(ak, _mm256_sign_epi8(                                      \
                    _mm256_loadu_si256((const __m256i *)(const void *)q0[b].qs), kq));      \
                __m256i p1 = DOT(ak, _mm256_sign_epi8(                                      \
                    _mm256_loadu_si256((const __m256i *)(const void *)q1[b].qs), kq));      \
                __m256i p2 = DOT(ak, _mm256_sign_epi8(                                      \
                    _mm256_loadu_si256((const __m256i *)(const void *)q2[b].qs), kq));      \
                __m256i p3 = DOT(ak, _mm256_sign_epi8(                                      \
                    _mm256_loadu_si256((const __m256i *)(const void *)q3[b].qs), kq));      \
                __m128i is = hsum4_i32(p0, p1, p2, p3);                                     \
                /* lane i: d(q_{g+i}[b]) * d(k[b]), as the reference rounds it */           \
                __m128 dq = _mm_cvtph_ps(_mm_setr_epi16((short)q0[b].d, (short)q1[b].d,     \
                                                        (short)q2[b].d, (short)q3[b].d, 0, 0, \
                                                        0, 0));                              \
                __m128 d = _mm_mul_ps(dq, _mm_set1_ps(tensor_f16_to_f32(kb->d)));           \
                s = _mm_add_ps(s, _mm_mul_ps(_mm_cvtepi32_ps(is), d));                      \
            }                                                                               \
            float out[4];                                                                   \
            _mm_storeu_ps(out, s);                                                          \
            for (int i = 0; i < 4; i++) scores[(size_t)(g + i) * ld_scores + (size_t)j] = out[i]; \
        }                                                                                   \
        for (; g < n_q; g++) {                                                              \
            const block_q8_0 *qg = q + g * n_blk;                                           \
            float s = 0.0f;                                                                 \
            for (int64_t b = 0; b < n_blk; b++) {                                           \
                const block_q8_0 *kb = row_block(kr, b);                                    \
                __m256i kq = _mm256_loadu_si256((const __m256i *)(const void *)kb->qs);     \
                __m256i p = DOT(_mm256_sign_epi8(kq, kq),                                   \
                                _mm256_sign_epi8(_mm256_loadu_si256(                        \
                                                     (const __m256i *)(const void *)qg[b].qs), \
                                                 kq));                                      \
                float d = tensor_f16_to_f32(qg[b].d) * tensor_f16_to_f32(kb->d);            \
                s += (float)hsum1_i32(p) * d;                                               \
            }                                                                               \
            scores[(size_t)g * ld_scores + (size_t)j] = s;                                  \
        }                                                                                   \
    }

static __attribute__((target(AVX2_ATTRS))) void
qk_avx2(float *scores, size_t ld_scores, const block_q8_0 *q, int64_t n_q, const uint8_t *k,
        size_t k_row_bytes, int64_t n_rows, int64_t n_blk)
{
    QK_BODY(dot8_avx2)
}

/* qk, AVX-512, the sign-move form (QK_BODY): heads past the last four, and
 * rows longer than QK_VNNI_MAX_BLK blocks. */
static __attribute__((target(AVX512_ATTRS))) void
qk_avx512_plain(float *scores, size_t ld_scores, const block_q8_0 *q, int64_t n_q,
                const uint8_t *k, size_t k_row_bytes, int64_t n_rows, int64_t n_blk)
{
    QK_BODY(dot8_avx512)
}

/* qk, AVX-512 VNNI: keys offset to unsigned (k + 128, a flip of the sign
 * bit), so VPDPBUSD multiplies them by the signed query codes directly;
 * the offset adds 128 * (sum of the query block's codes), an exact integer
 * taken off again (precomputed per query block, as are the query scales).
 * The int32 block sums, and the float steps after them, are the
 * reference's. Four heads at a time as in QK_BODY; the rest through it. */
#define QK_VNNI_MAX_BLK 8

static __attribute__((target(AVX512_ATTRS))) void
qk_avx512(float *scores, size_t ld_scores, const block_q8_0 *q, int64_t n_q, const uint8_t *k,
          size_t k_row_bytes, int64_t n_rows, int64_t n_blk)
{
    if (n_blk > QK_VNNI_MAX_BLK) {
        qk_avx512_plain(scores, ld_scores, q, n_q, k, k_row_bytes, n_rows, n_blk);
        return;
    }
    /* 0x80 in every byte: the sign flip, and 128 as VPDPBUSD's unsigned operand */
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    int64_t g = 0;
    for (; g + 4 <= n_q; g += 4) {
        const block_q8_0 *qg[4] = {q + g * n_blk, q + (g + 1) * n_blk, q + (g + 2) * n_blk,
                                   q + (g + 3) * n_blk};
        __m128i corr[QK_VNNI_MAX_BLK];
        __m128 dq[QK_VNNI_MAX_BLK];
        for (int64_t b = 0; b < n_blk; b++) {
            __m256i c[4];
            for (int i = 0; i < 4; i++) {
                /* 128 * sum(q): VPDPBUSD of 128 (unsigned) and the codes */
                c[i] = _mm256_dpbusd_epi32(
                    _mm256_setzero_si256(), flip,
                    _mm256_loadu_si256((const __m256i *)(const void *)qg[i][b].qs));
            }
            corr[b] = hsum4_i32(c[0], c[1], c[2], c[3]);
            dq[b] = _mm_cvtph_ps(_mm_setr_epi16((short)qg[0][b].d, (short)qg[1][b].d,
                                                (short)qg[2][b].d, (short)qg[3][b].d, 0, 0, 0, 0));
        }
        for (int64_t j = 0; j < n_rows; j++) {
            const uint8_t *kr = k + (size_t)j * k_row_bytes;
            __m128 s = _mm_setzero_ps();
            for (int64_t b = 0; b < n_blk; b++) {
                const block_q8_0 *kb = row_block(kr, b);
                const __m256i kx = _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)(const void *)kb->qs), flip);
                __m256i p[4];
                for (int i = 0; i < 4; i++) {
                    p[i] = _mm256_dpbusd_epi32(
                        _mm256_setzero_si256(), kx,
                        _mm256_loadu_si256((const __m256i *)(const void *)qg[i][b].qs));
                }
                __m128i is = _mm_sub_epi32(hsum4_i32(p[0], p[1], p[2], p[3]), corr[b]);
                __m128 dk = _mm_cvtph_ps(_mm_set1_epi16((short)kb->d));
                s = _mm_add_ps(s, _mm_mul_ps(_mm_cvtepi32_ps(is), _mm_mul_ps(dq[b], dk)));
            }
            float out[4];
            _mm_storeu_ps(out, s);
            for (int i = 0; i < 4; i++) scores[(size_t)(g + i) * ld_scores + (size_t)j] = out[i];
        }
    }
    if (g < n_q) {
        /* the remaining heads (fewer than four) */
        qk_avx512_plain(scores + (size_t)g * ld_scores, ld_scores, q + g * n_blk, n_q - g, k,
                        k_row_bytes, n_rows, n_blk);
    }
}

/* pv, AVX2: a block's 32 codes become 4 x 8 float lanes (elements 8c ..
 * 8c+7), used by every query head: acc lanes += w * code lanes. */
static __attribute__((target(AVX2_ATTRS))) void
pv_avx2(float *acc, size_t ld_acc, const float *p, size_t ld_p, int64_t n_q, const uint8_t *v,
        size_t v_row_bytes, int64_t n_rows, int64_t n_blk)
{
    for (int64_t j = 0; j < n_rows; j++) {
        const uint8_t *vr = v + (size_t)j * v_row_bytes;
        for (int64_t b = 0; b < n_blk; b++) {
            const block_q8_0 *vb = row_block(vr, b);
            const float dv = tensor_f16_to_f32(vb->d);
            __m128i c0 = _mm_loadu_si128((const __m128i *)(const void *)vb->qs);
            __m128i c1 = _mm_loadu_si128((const __m128i *)(const void *)(vb->qs + 16));
            __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c0));
            __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c0, 8)));
            __m256 f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c1));
            __m256 f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c1, 8)));
            for (int64_t g = 0; g < n_q; g++) {
                const __m256 w = _mm256_set1_ps(p[(size_t)g * ld_p + (size_t)j] * dv);
                float *a = acc + (size_t)g * ld_acc + (size_t)(b * TENSOR_QK);
                _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_mul_ps(w, f0)));
                _mm256_storeu_ps(a + 8,
                                 _mm256_add_ps(_mm256_loadu_ps(a + 8), _mm256_mul_ps(w, f1)));
                _mm256_storeu_ps(a + 16,
                                 _mm256_add_ps(_mm256_loadu_ps(a + 16), _mm256_mul_ps(w, f2)));
                _mm256_storeu_ps(a + 24,
                                 _mm256_add_ps(_mm256_loadu_ps(a + 24), _mm256_mul_ps(w, f3)));
            }
        }
    }
}

/* pv, AVX-512: NG query heads at a time keep their 32 accumulators of
 * block b in 2 x NG registers while the rows go by in order; each row's
 * codes are widened once per group (elements 16c .. 16c+15 in lane c).
 * Per element the steps stay the reference's: w = p * d_v, then acc +=
 * w * code, rows ascending. */
static inline __attribute__((always_inline, target(AVX512_ATTRS))) void
pv_group_avx512(float *acc, size_t ld_acc, const float *p, size_t ld_p, const uint8_t *v,
                size_t v_row_bytes, int64_t n_rows, int64_t b, const int ng)
{
    __m512 a0[8], a1[8];
    for (int g = 0; g < ng; g++) {
        const float *ag = acc + (size_t)g * ld_acc + (size_t)(b * TENSOR_QK);
        a0[g] = _mm512_loadu_ps(ag);
        a1[g] = _mm512_loadu_ps(ag + 16);
    }
    for (int64_t j = 0; j < n_rows; j++) {
        const block_q8_0 *vb = row_block(v + (size_t)j * v_row_bytes, b);
        const float dv = tensor_f16_to_f32(vb->d);
        const __m512 f0 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)vb->qs)));
        const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128((const __m128i *)(const void *)(vb->qs + 16))));
        for (int g = 0; g < ng; g++) {
            const __m512 w = _mm512_set1_ps(p[(size_t)g * ld_p + (size_t)j] * dv);
            a0[g] = _mm512_add_ps(a0[g], _mm512_mul_ps(w, f0));
            a1[g] = _mm512_add_ps(a1[g], _mm512_mul_ps(w, f1));
        }
    }
    for (int g = 0; g < ng; g++) {
        float *ag = acc + (size_t)g * ld_acc + (size_t)(b * TENSOR_QK);
        _mm512_storeu_ps(ag, a0[g]);
        _mm512_storeu_ps(ag + 16, a1[g]);
    }
}

static __attribute__((target(AVX512_ATTRS))) void
pv_avx512(float *acc, size_t ld_acc, const float *p, size_t ld_p, int64_t n_q, const uint8_t *v,
          size_t v_row_bytes, int64_t n_rows, int64_t n_blk)
{
    for (int64_t b = 0; b < n_blk; b++) {
        int64_t g = 0;
        for (; g + 8 <= n_q; g += 8) {
            pv_group_avx512(acc + (size_t)g * ld_acc, ld_acc, p + (size_t)g * ld_p, ld_p, v,
                            v_row_bytes, n_rows, b, 8);
        }
        for (; g + 4 <= n_q; g += 4) {
            pv_group_avx512(acc + (size_t)g * ld_acc, ld_acc, p + (size_t)g * ld_p, ld_p, v,
                            v_row_bytes, n_rows, b, 4);
        }
        for (; g < n_q; g++) {
            pv_group_avx512(acc + (size_t)g * ld_acc, ld_acc, p + (size_t)g * ld_p, ld_p, v,
                            v_row_bytes, n_rows, b, 1);
        }
    }
}

static const tensor_attn_q8 g_avx2 = {
    .name = "avx2", .level = STRATA_SIMD_AVX2, .qk = qk_avx2, .pv = pv_avx2};
static const tensor_attn_q8 g_avx512 = {
    .name = "avx512", .level = STRATA_SIMD_AVX512, .qk = qk_avx512, .pv = pv_avx512};

#endif /* ATTN_Q8_X86 */

const tensor_attn_q8 *tensor_attn_q8_for_level(enum strata_simd_level level)
{
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    if (level > max) return NULL;
    switch (level) {
    case STRATA_SIMD_SCALAR:
        return &g_scalar;
#ifdef ATTN_Q8_X86
    case STRATA_SIMD_AVX2:
        return &g_avx2;
    case STRATA_SIMD_AVX512:
        return &g_avx512;
#endif
    default:
        return NULL;
    }
}

const tensor_attn_q8 *tensor_attn_q8_get(void)
{
    for (int level = (int)strata_cpu_level(); level > STRATA_SIMD_SCALAR; level--) {
        const tensor_attn_q8 *t = tensor_attn_q8_for_level((enum strata_simd_level)level);
        if (t != NULL) return t;
    }
    return &g_scalar;
}
