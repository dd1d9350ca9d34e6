/* The float attention kernels of attn_f16.h: the scalar reference, an AVX2
 * variant and an AVX-512 variant, and the table per SIMD level.
 *
 * Why the variants give the reference's bits:
 *   widen: F16 -> F32 is exact (F16C / AVX-512 conversion vs the bit
 *       manipulation of fp16.h).
 *   qk: tensor_dot_f32's order, from ops.c: element i is fused-multiply-
 *       added into lane i mod 32 of 32 running sums (elements in ascending
 *       order), then the tree lane j += lane j + w for w = 16, 8, 4, 2, 1.
 *       The AVX2 form holds the 32 lanes as four 8-lane vectors, the
 *       AVX-512 form as two 16-lane vectors; both do the w = 16 and w = 8
 *       steps as vertical adds, which leaves 8 lanes per key. The w = 4, 2,
 *       1 steps are then done for eight keys at once: the same additions of
 *       the same pairs (a + b and b + a round alike), with the lanes of
 *       eight keys shuffled together so one add serves all of them. Then
 *       one rounded multiply by the scale.
 *   pv: per element, acc * c (rounded), then per row acc + p * v (the
 *       product rounded, then the sum), rows in ascending order; lanes hold
 *       consecutive elements, registers keep acc across the rows.
 * No fused multiply-add outside qk's dot product: ISO C mode keeps GCC from
 * contracting (-std=c11 means -ffp-contract=off), the pragma does it for
 * clang, and qk's fmaf / _mm*_fmadd_ps are the fusions the reference asks
 * for. */
#include "attn_f16.h"

#include "tensor/fp16.h"

#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTN_F16_X86 1
#endif

/* --- scalar reference --- */

static void widen_scalar(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = tensor_f16_to_f32(src[i]);
}

/* tensor_dot_f32's reference (ops.c dot_scalar), step for step. */
static float dot_ref(const float *a, const float *b, int64_t n)
{
    float acc[32] = {0};
    for (int64_t i = 0; i < n; i++) acc[i & 31] = fmaf(a[i], b[i], acc[i & 31]);
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

static void qk_scalar(float *scores, const float *q, const float *k, size_t ld_k, int64_t n_rows,
                      int64_t n, float scale)
{
    for (int64_t j = 0; j < n_rows; j++) scores[j] = dot_ref(q, k + (size_t)j * ld_k, n) * scale;
}

static void pv_scalar(float *acc, size_t ld_acc, const float *c, const float *p, size_t ld_p,
                      int64_t n_q, const float *v, size_t ld_v, int64_t n_rows, int64_t n)
{
    for (int64_t g = 0; g < n_q; g++) {
        float *a = acc + (size_t)g * ld_acc;
        const float *pg = p + (size_t)g * ld_p;
        for (int64_t e = 0; e < n; e++) a[e] = a[e] * c[g];
        for (int64_t j = 0; j < n_rows; j++) {
            const float *vj = v + (size_t)j * ld_v;
            for (int64_t e = 0; e < n; e++) a[e] = a[e] + pg[j] * vj[e];
        }
    }
}

static const tensor_attn_f16 g_scalar = {.name = "scalar",
                                         .level = STRATA_SIMD_SCALAR,
                                         .widen = widen_scalar,
                                         .qk = qk_scalar,
                                         .pv = pv_scalar};

#ifdef ATTN_F16_X86

#define AVX2_ATTRS "avx2,fma,f16c"
#define AVX512_ATTRS "avx2,fma,f16c,avx512f,avx512bw,avx512vl"
#define AVX2_INLINE static inline __attribute__((always_inline, target(AVX2_ATTRS)))
#define AVX512_INLINE static inline __attribute__((always_inline, target(AVX512_ATTRS)))

/* Lanes 0 .. k-1 set (k may be <= 0 or >= 8). */
AVX2_INLINE __m256i mask8(int64_t k)
{
    int32_t kk = k < 0 ? 0 : k > 8 ? 8 : (int32_t)k;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(kk), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The 32 lanes of the dot product of a and b after the tree's w = 16 and
 * w = 8 steps: lane j (< 8) = ((s_j + s_{j+16}) + (s_{j+8} + s_{j+24})),
 * where s_l is the running sum of lane l. acc[q] lane j is lane 8q + j. */
AVX2_INLINE __m256 dot_lanes8_avx2(const float *a, const float *b, int64_t n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    if (i < n) {
        /* masked-off lanes read 0 on both sides: fma(0, 0, s) = s, as s is
         * never -0 (it starts at +0, an exactly zero sum rounds to +0) */
        __m256i m0 = mask8(n - i), m1 = mask8(n - i - 8), m2 = mask8(n - i - 16),
                m3 = mask8(n - i - 24);
        acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m0), _mm256_maskload_ps(b + i, m0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8, m1),
                               _mm256_maskload_ps(b + i + 8, m1), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 16, m2),
                               _mm256_maskload_ps(b + i + 16, m2), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 24, m3),
                               _mm256_maskload_ps(b + i + 24, m3), acc3);
    }
    /* w = 16: lanes 0..15 += 16..31 (acc0 += acc2, acc1 += acc3); w = 8 */
    return _mm256_add_ps(_mm256_add_ps(acc0, acc2), _mm256_add_ps(acc1, acc3));
}

/* The tree's w = 4, 2, 1 steps of one key's 8 lanes. */
AVX2_INLINE float reduce1(__m256 l)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

/* The w = 4, 2, 1 steps of eight keys at once; lane k of the result is key
 * k's sum. Keys are paired (k, k + 4) so the lanes come out in order:
 *   u: [x_k lanes 0..3 + 4..7 | x_{k+4} lanes 0..3 + 4..7]    (w = 4)
 *   w: per 128-bit half, lanes 0,1 + 2,3 of two u's           (w = 2)
 *   r: per half, lane 0 + 1 of four keys                      (w = 1) */
AVX2_INLINE __m256 reduce8(__m256 x0, __m256 x1, __m256 x2, __m256 x3, __m256 x4, __m256 x5,
                           __m256 x6, __m256 x7)
{
    __m256 u0 = _mm256_add_ps(_mm256_permute2f128_ps(x0, x4, 0x20),
                              _mm256_permute2f128_ps(x0, x4, 0x31)); /* keys 0 | 4 */
    __m256 u1 = _mm256_add_ps(_mm256_permute2f128_ps(x1, x5, 0x20),
                              _mm256_permute2f128_ps(x1, x5, 0x31)); /* keys 1 | 5 */
    __m256 u2 = _mm256_add_ps(_mm256_permute2f128_ps(x2, x6, 0x20),
                              _mm256_permute2f128_ps(x2, x6, 0x31)); /* keys 2 | 6 */
    __m256 u3 = _mm256_add_ps(_mm256_permute2f128_ps(x3, x7, 0x20),
                              _mm256_permute2f128_ps(x3, x7, 0x31)); /* keys 3 | 7 */
    /* halves: [k0 l0, k0 l1, k1 l0, k1 l1] | the same for keys 4, 5 */
    __m256 w01 = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
    /* [k2 l0, k2 l1, k3 l0, k3 l1] | keys 6, 7 */
    __m256 w23 = _mm256_add_ps(_mm256_shuffle_ps(u2, u3, _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(u2, u3, _MM_SHUFFLE(3, 2, 3, 2)));
    /* [k0, k1, k2, k3] | [k4, k5, k6, k7] */
    return _mm256_add_ps(_mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* qk over rows in groups of eight, DOT8 giving a key's 8 lanes. */
#define QK_BODY(DOT8)                                                                          \
    const __m256 vs = _mm256_set1_ps(scale);                                                   \
    int64_t j = 0;                                                                             \
    for (; j + 8 <= n_rows; j += 8) {                                                          \
        const float *kj = k + (size_t)j * ld_k;                                                \
        __m256 x0 = DOT8(q, kj, n), x1 = DOT8(q, kj + ld_k, n);                                \
        __m256 x2 = DOT8(q, kj + 2 * ld_k, n), x3 = DOT8(q, kj + 3 * ld_k, n);                 \
        __m256 x4 = DOT8(q, kj + 4 * ld_k, n), x5 = DOT8(q, kj + 5 * ld_k, n);                 \
        __m256 x6 = DOT8(q, kj + 6 * ld_k, n), x7 = DOT8(q, kj + 7 * ld_k, n);                 \
        _mm256_storeu_ps(scores + j,                                                           \
                         _mm256_mul_ps(reduce8(x0, x1, x2, x3, x4, x5, x6, x7), vs));          \
    }                                                                                          \
    for (; j < n_rows; j++) scores[j] = reduce1(DOT8(q, k + (size_t)j * ld_k, n)) * scale;

static __attribute__((target(AVX2_ATTRS))) void
qk_avx2(float *scores, const float *q, const float *k, size_t ld_k, int64_t n_rows, int64_t n,
        float scale)
{
    QK_BODY(dot_lanes8_avx2)
}

static __attribute__((target(AVX2_ATTRS))) void widen_avx2(float *dst, const uint16_t *src,
                                                          int64_t n)
{
    int64_t i = 0;
    /* each step: 8 halves in, 8 floats out */
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = tensor_f16_to_f32(src[i]);
}

/* The scalar steps for elements [e0, n) of one query (the tails). */
static inline void pv_tail(float *a, float c, const float *p, const float *v, size_t ld_v,
                           int64_t n_rows, int64_t e0, int64_t n)
{
    for (int64_t e = e0; e < n; e++) a[e] = a[e] * c;
    for (int64_t j = 0; j < n_rows; j++) {
        const float *vj = v + (size_t)j * ld_v;
        for (int64_t e = e0; e < n; e++) a[e] = a[e] + p[j] * vj[e];
    }
}

/* pv, AVX2: per query, 64 elements at a time in eight registers (eight
 * independent add chains), then 8 at a time, then the scalar tail. */
static __attribute__((target(AVX2_ATTRS))) void
pv_avx2(float *acc, size_t ld_acc, const float *c, const float *p, size_t ld_p, int64_t n_q,
        const float *v, size_t ld_v, int64_t n_rows, int64_t n)
{
    for (int64_t g = 0; g < n_q; g++) {
        float *a = acc + (size_t)g * ld_acc;
        const float *pg = p + (size_t)g * ld_p;
        const __m256 vc = _mm256_set1_ps(c[g]);
        int64_t e = 0;
        for (; e + 64 <= n; e += 64) {
            __m256 r[8];
            for (int u = 0; u < 8; u++) r[u] = _mm256_mul_ps(_mm256_loadu_ps(a + e + 8 * u), vc);
            for (int64_t j = 0; j < n_rows; j++) {
                const __m256 w = _mm256_set1_ps(pg[j]);
                const float *vj = v + (size_t)j * ld_v + e;
                for (int u = 0; u < 8; u++)
                    r[u] = _mm256_add_ps(r[u], _mm256_mul_ps(w, _mm256_loadu_ps(vj + 8 * u)));
            }
            for (int u = 0; u < 8; u++) _mm256_storeu_ps(a + e + 8 * u, r[u]);
        }
        for (; e + 8 <= n; e += 8) {
            __m256 r = _mm256_mul_ps(_mm256_loadu_ps(a + e), vc);
            for (int64_t j = 0; j < n_rows; j++) {
                r = _mm256_add_ps(r, _mm256_mul_ps(_mm256_set1_ps(pg[j]),
                                                   _mm256_loadu_ps(v + (size_t)j * ld_v + e)));
            }
            _mm256_storeu_ps(a + e, r);
        }
        pv_tail(a, c[g], pg, v, ld_v, n_rows, e, n);
    }
}

/* --- AVX-512 --- */

static inline __mmask16 mask16(int64_t k)
{
    return k <= 0 ? (__mmask16)0 : k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1u);
}

/* dot_lanes8_avx2's result with the 32 lanes as two 16-lane vectors
 * (acc0 = lanes 0..15, acc1 = 16..31): w = 16 is acc0 + acc1, w = 8 the
 * two 256-bit halves of that. */
AVX512_INLINE __m256 dot_lanes8_avx512(const float *a, const float *b, int64_t n)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    if (i < n) {
        /* zeroed lanes: fma(0, 0, s) = s, as in the AVX2 form */
        __mmask16 m0 = mask16(n - i), m1 = mask16(n - i - 16);
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, a + i), _mm512_maskz_loadu_ps(m0, b + i),
                               acc0);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, a + i + 16),
                               _mm512_maskz_loadu_ps(m1, b + i + 16), acc1);
    }
    __m512 s = _mm512_add_ps(acc0, acc1);
    return _mm256_add_ps(_mm512_castps512_ps256(s),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
}

static __attribute__((target(AVX512_ATTRS))) void
qk_avx512(float *scores, const float *q, const float *k, size_t ld_k, int64_t n_rows, int64_t n,
          float scale)
{
    QK_BODY(dot_lanes8_avx512)
}

static __attribute__((target(AVX512_ATTRS))) void widen_avx512(float *dst, const uint16_t *src,
                                                              int64_t n)
{
    int64_t i = 0;
    /* each step: 16 halves in, 16 floats out */
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = tensor_f16_to_f32(src[i]);
}

/* pv, AVX-512: two queries at a time over 64 elements (eight 16-lane add
 * chains), one query over 64, then 16 at a time, then the scalar tail. */
static __attribute__((target(AVX512_ATTRS))) void
pv_avx512(float *acc, size_t ld_acc, const float *c, const float *p, size_t ld_p, int64_t n_q,
          const float *v, size_t ld_v, int64_t n_rows, int64_t n)
{
    int64_t g = 0;
    const int64_t n64 = n / 64 * 64;
    for (; g + 2 <= n_q; g += 2) {
        float *a0 = acc + (size_t)g * ld_acc, *a1 = a0 + ld_acc;
        const float *p0 = p + (size_t)g * ld_p, *p1 = p0 + ld_p;
        const __m512 c0 = _mm512_set1_ps(c[g]), c1 = _mm512_set1_ps(c[g + 1]);
        for (int64_t e = 0; e < n64; e += 64) {
            __m512 r0[4], r1[4];
            for (int u = 0; u < 4; u++) {
                r0[u] = _mm512_mul_ps(_mm512_loadu_ps(a0 + e + 16 * u), c0);
                r1[u] = _mm512_mul_ps(_mm512_loadu_ps(a1 + e + 16 * u), c1);
            }
            for (int64_t j = 0; j < n_rows; j++) {
                const __m512 w0 = _mm512_set1_ps(p0[j]), w1 = _mm512_set1_ps(p1[j]);
                const float *vj = v + (size_t)j * ld_v + e;
                for (int u = 0; u < 4; u++) {
                    __m512 x = _mm512_loadu_ps(vj + 16 * u);
                    r0[u] = _mm512_add_ps(r0[u], _mm512_mul_ps(w0, x));
                    r1[u] = _mm512_add_ps(r1[u], _mm512_mul_ps(w1, x));
                }
            }
            for (int u = 0; u < 4; u++) {
                _mm512_storeu_ps(a0 + e + 16 * u, r0[u]);
                _mm512_storeu_ps(a1 + e + 16 * u, r1[u]);
            }
        }
    }
    for (; g < n_q; g++) {
        float *a = acc + (size_t)g * ld_acc;
        const float *pg = p + (size_t)g * ld_p;
        const __m512 vc = _mm512_set1_ps(c[g]);
        for (int64_t e = 0; e < n64; e += 64) {
            __m512 r[4];
            for (int u = 0; u < 4; u++) r[u] = _mm512_mul_ps(_mm512_loadu_ps(a + e + 16 * u), vc);
            for (int64_t j = 0; j < n_rows; j++) {
                const __m512 w = _mm512_set1_ps(pg[j]);
                const float *vj = v + (size_t)j * ld_v + e;
                for (int u = 0; u < 4; u++)
                    r[u] = _mm512_add_ps(r[u], _mm512_mul_ps(w, _mm512_loadu_ps(vj + 16 * u)));
            }
            for (int u = 0; u < 4; u++) _mm512_storeu_ps(a + e + 16 * u, r[u]);
        }
    }
    /* the elements past the last 64 of every query */
    if (n64 < n) {
        for (g = 0; g < n_q; g++) {
            float *a = acc + (size_t)g * ld_acc;
            const float *pg = p + (size_t)g * ld_p;
            int64_t e = n64;
            for (; e + 16 <= n; e += 16) {
                __m512 r = _mm512_mul_ps(_mm512_loadu_ps(a + e), _mm512_set1_ps(c[g]));
                for (int64_t j = 0; j < n_rows; j++) {
                    r = _mm512_add_ps(r, _mm512_mul_ps(_mm512_set1_ps(pg[j]),
                                                       _mm512_loadu_ps(v + (size_t)j * ld_v + e)));
                }
                _mm512_storeu_ps(a + e, r);
            }
            pv_tail(a, c[g], pg, v, ld_v, n_rows, e, n);
        }
    }
}

static const tensor_attn_f16 g_avx2 = {.name = "avx2",
                                       .level = STRATA_SIMD_AVX2,
                                       .widen = widen_avx2,
                                       .qk = qk_avx2,
                                       .pv = pv_avx2};
static const tensor_attn_f16 g_avx512 = {.name = "avx512",
                                         .level = STRATA_SIMD_AVX512,
                                         .widen = widen_avx512,
                                         .qk = qk_avx512,
                                         .pv = pv_avx512};

#endif /* ATTN_F16_X86 */

const tensor_attn_f16 *tensor_attn_f16_for_level(enum strata_simd_level level)
{
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    if (level > max) return NULL;
    switch (level) {
    case STRATA_SIMD_SCALAR:
        return &g_scalar;
#ifdef ATTN_F16_X86
    case STRATA_SIMD_AVX2:
        return &g_avx2;
    case STRATA_SIMD_AVX512:
        return &g_avx512;
#endif
    default:
        return NULL;
    }
}

const tensor_attn_f16 *tensor_attn_f16_get(void)
{
    for (int level = (int)strata_cpu_level(); level > STRATA_SIMD_SCALAR; level--) {
        const tensor_attn_f16 *t = tensor_attn_f16_for_level((enum strata_simd_level)level);
        if (t != NULL) return t;
    }
    return &g_scalar;
}
