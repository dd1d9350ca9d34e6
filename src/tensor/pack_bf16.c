/* F16 and BF16 x8: the packers and the kernels at every level
 * (pack_internal.h has the layout and the float steps).
 *
 * Float weights need no integer step: per (row, token) the kernels take
 * one fused multiply-add per weight, with the activations kept as float32
 * (the same F32 rows the GGUF layout's kernels read). Per (row, token)
 * there are eight running sums, one per element j = 2k + p of a block
 * (s[k][p] in pack_internal.h), so eight fma chains are in flight; they are
 * added in one fixed order at the end, so every level performs the same
 * float steps and returns the same bits.
 *
 * The layout stores, per block, element j of the 8 rows side by side: 8
 * halves, converted to 8 floats, are lane r = row r's element j, and the
 * activation operand is the one float x_j broadcast to every lane, which
 * AVX-512 folds into the fma as a memory operand ({1to8}, {1to16}) at no
 * cost. The AVX-512 pair kernel puts element j of two groups in one zmm
 * (lanes 0..7 the first group's rows, 8..15 the second's), so each
 * broadcast feeds 16 rows: on AMD Zen 4 the 64-bit pair broadcasts of the
 * previous layout took a shuffle slot per fma and held the prefill tile to
 * about 60 % of the fma peak; this one runs near it (bench_matmul).
 *
 * The conversions are exact (f16 and bf16 values are floats), so the only
 * roundings are the fmas and the final adds.
 *
 * VDPBF16PS (AVX512_BF16) takes bf16 activations, which rounds them, so it
 * cannot give the float kernels' results: its kernel below
 * (tensor_x8_bf16_dot_*) is not registered for tensor_matmul. It has its
 * own scalar reference (the instruction's documented steps) and test. */
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

bool tensor_x8_pack_half(const void *src, size_t src_row_bytes, int64_t n, void *dst)
{
    block_halfx8 *out = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int r = 0; r < 8; r++) {
            const uint16_t *row = (const uint16_t *)((const char *)src + (size_t)r * src_row_bytes);
            for (int j = 0; j < TENSOR_X8_HALF_ELEMS; j++)
                out[ib].w[8 * j + r] = row[TENSOR_X8_HALF_ELEMS * ib + j];
        }
    return true; /* a permutation of the halves */
}

void tensor_x8_row_half(const void *group, int64_t n, int r, void *dst)
{
    const block_halfx8 *g = group;
    uint16_t *row = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int j = 0; j < TENSOR_X8_HALF_ELEMS; j++)
            row[TENSOR_X8_HALF_ELEMS * ib + j] = g[ib].w[8 * j + r];
}

/* The F32 activation row: the floats themselves. */
void tensor_x8_f32_act(const float *x, void *dst, int64_t n)
{
    memcpy(dst, x, (size_t)n * sizeof(float));
}

/* The final adds of the float steps: sums s[k][p] (k < 4, p < 2) of one
 * row to its result. */
static float half_finish(const float s[4][2])
{
    const float e = (s[0][0] + s[1][0]) + (s[2][0] + s[3][0]);
    const float o = (s[0][1] + s[1][1]) + (s[2][1] + s[3][1]);
    return e + o;
}

static void half_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y, size_t ys,
                        int nt, bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    for (int t = 0; t < nt; t++) {
        const float *xt = (const float *)((const char *)x + (size_t)t * xs);
        for (int r = 0; r < 8; r++) {
            float s[4][2] = {{0}};
            for (int64_t ib = 0; ib < nb; ib++)
                for (int k = 0; k < 4; k++)
                    for (int p = 0; p < 2; p++) {
                        const uint16_t h = wb[ib].w[8 * (2 * k + p) + r];
                        const float wv = bf16 ? tensor_bf16_to_f32(h) : tensor_f16_to_f32(h);
                        s[k][p] = fmaf(wv, xt[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p], s[k][p]);
                    }
            y[(size_t)t * ys + r] = half_finish(s);
        }
    }
}

void tensor_x8_f16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                          size_t ys, int nt)
{
    half_scalar(n, w, x, xs, y, ys, nt, false);
}

void tensor_x8_bf16_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                           size_t ys, int nt)
{
    half_scalar(n, w, x, xs, y, ys, nt, true);
}

#if defined(__x86_64__)

/* 8 halves at p to 8 floats, exactly. */
TENSOR_AVX2_INLINE __m256 half8_avx2(const uint16_t *p, const bool bf16)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (!bf16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* half_finish on 8 rows at once: a[j] holds sum j = 2k + p of rows 0..7. */
TENSOR_AVX2_INLINE __m256 half_finish8(const __m256 a[8])
{
    const __m256 e = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[4], a[6]));
    const __m256 o = _mm256_add_ps(_mm256_add_ps(a[1], a[3]), _mm256_add_ps(a[5], a[7]));
    return _mm256_add_ps(e, o);
}

/* The one-group kernels walk the row in spans of HALF_SPAN_BLOCKS blocks
 * (8 KB of the group's weights, which stay in L1 while every token of the
 * call passes over them; the AVX-512 pair kernel has its own span,
 * HALF_PAIR_SPAN_BLOCKS); each token's sums are loaded from
 * and stored back to a `state` array around a span. A chain only pauses
 * between spans, so every sum takes the same fmas in the same order as in
 * one pass. */
#define HALF_SPAN_BLOCKS 64
#define HALF_TRIO 3

/* Tokens in the part of a span's tokens that starts at t0: three, but two
 * and two rather than three and a lone one (a lone token makes each
 * converted weight vector feed one fma). */
static inline int half_trio(int nt, int t0)
{
    const int left = nt - t0;
    return left == 4 ? 2 : left < HALF_TRIO ? left : HALF_TRIO;
}

/* AVX2, one group, blocks [b0, b1), sums j0 .. j0 + J - 1 of tokens t0 ..
 * t0 + NT - 1: J = 4 with NT <= 3 (12 accumulators of the 16 ymm
 * registers), J = 8 with NT = 1 (matrix x vector: all 8 sums in one pass,
 * so each weight line is read once); lane r of state[t][j] = row r's sum
 * j (j = 2k + p). The sums of a block are independent chains, so they can
 * take turns. */
TENSOR_AVX2_INLINE void half_avx2_span(const block_halfx8 *wb, int64_t b0, int64_t b1,
                                       const void *x, size_t xs, int t0, int j0,
                                       __m256 (*state)[8], const int NT, const int J,
                                       const bool pf, const bool bf16)
{
    __m256 acc[HALF_TRIO][8];
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < J; j++) acc[t][j] = state[t0 + t][j0 + j];
    for (int64_t ib = b0; ib < b1; ib++) {
        const uint16_t *blk = wb[ib].w + 8 * j0;
        if (pf)
            for (int l = 0; l < J / 4; l++)
                _mm_prefetch((const char *)blk + TENSOR_X8_PREFETCH_AHEAD + 64 * l, _MM_HINT_T0);
        for (int j = 0; j < J; j++) {
            const __m256 wv = half8_avx2(blk + 8 * j, bf16);
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)((const char *)x + (size_t)(t0 + t) * xs);
                const __m256 xv = _mm256_broadcast_ss(xt + TENSOR_X8_HALF_ELEMS * ib + j0 + j);
                acc[t][j] = _mm256_fmadd_ps(wv, xv, acc[t][j]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < J; j++) state[t0 + t][j0 + j] = acc[t][j];
}

TENSOR_AVX2_INLINE void half_avx2(int64_t n, const void *w, const void *x, size_t xs, float *y,
                                  size_t ys, const int nt, const bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m256 state[TENSOR_X8_MAX_T][8];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 8; j++) state[t][j] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += HALF_SPAN_BLOCKS) {
        const int64_t b1 = b0 + HALF_SPAN_BLOCKS < nb ? b0 + HALF_SPAN_BLOCKS : nb;
        for (int t0 = 0, m; t0 < nt; t0 += m) {
            m = half_trio(nt, t0);
            if (m == 1) {
                half_avx2_span(wb, b0, b1, x, xs, t0, 0, state, 1, 8, t0 == 0, bf16);
                continue;
            }
            for (int j0 = 0; j0 < 8; j0 += 4) {
                if (m == 2) half_avx2_span(wb, b0, b1, x, xs, t0, j0, state, 2, 4, t0 == 0, bf16);
                else half_avx2_span(wb, b0, b1, x, xs, t0, j0, state, 3, 4, t0 == 0, bf16);
            }
        }
    }
    for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ys, half_finish8(state[t]));
}

TENSOR_AVX2_TARGET void tensor_x8_f16_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                           float *y, size_t ys, int nt)
{
    half_avx2(n, w, x, xs, y, ys, nt, false);
}

TENSOR_AVX2_TARGET void tensor_x8_bf16_avx2(int64_t n, const void *w, const void *x, size_t xs,
                                            float *y, size_t ys, int nt)
{
    half_avx2(n, w, x, xs, y, ys, nt, true);
}

/* The AVX-512 kernels: up to TENSOR_X8_HALF_AVX512_MAX_T tokens per
 * call. The one-group kernel walks spans as the AVX2 one, three tokens at
 * a time with all eight sums; the pair kernel (below) takes all the
 * call's tokens per span, in passes over part of the sums. */

/* One group, blocks [b0, b1), tokens t0 .. t0 + NT - 1 (NT <= 3): lane r
 * of state[t][j] = row r's sum j (j = 2k + p); the broadcast activation
 * is folded into each fma. */
X8_AVX512_INLINE void half_one_span(const block_halfx8 *wb, int64_t b0, int64_t b1,
                                    const void *x, size_t xs, int t0, __m256 (*state)[8],
                                    const int NT, const bool bf16)
{
    __m256 acc[HALF_TRIO][8];
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < 8; j++) acc[t][j] = state[t0 + t][j];
    for (int64_t ib = b0; ib < b1; ib++) {
        const uint16_t *blk = wb[ib].w;
        if (t0 == 0) prefetch_lines(blk, sizeof(block_halfx8), TENSOR_X8_AVX512_PREFETCH_AHEAD);
        for (int j = 0; j < 8; j++) {
            const __m256 wv = half8_avx2(blk + 8 * j, bf16);
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)((const char *)x + (size_t)(t0 + t) * xs);
                acc[t][j] = _mm256_fmadd_ps(wv, _mm256_set1_ps(xt[TENSOR_X8_HALF_ELEMS * ib + j]),
                                            acc[t][j]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < 8; j++) state[t0 + t][j] = acc[t][j];
}

/* One group x nt tokens (nt <= TENSOR_X8_HALF_AVX512_MAX_T). Matrix x
 * vector (decode) runs here: one weight stream, at the memory's rate. */
X8_AVX512_INLINE void half_avx512_one(int64_t n, const void *w, const void *x, size_t xs,
                                      float *y, size_t ys, const int nt, const bool bf16)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m256 state[TENSOR_X8_HALF_AVX512_MAX_T][8];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 8; j++) state[t][j] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += HALF_SPAN_BLOCKS) {
        const int64_t b1 = b0 + HALF_SPAN_BLOCKS < nb ? b0 + HALF_SPAN_BLOCKS : nb;
        for (int t0 = 0, m; t0 < nt; t0 += m) {
            m = half_trio(nt, t0);
            switch (m) {
            case 1: half_one_span(wb, b0, b1, x, xs, t0, state, 1, bf16); break;
            case 2: half_one_span(wb, b0, b1, x, xs, t0, state, 2, bf16); break;
            default: half_one_span(wb, b0, b1, x, xs, t0, state, 3, bf16); break;
            }
        }
    }
    for (int t = 0; t < nt; t++) _mm256_storeu_ps(y + (size_t)t * ys, half_finish8(state[t]));
}

/* Element j of two groups' blocks (8 halves at a, 8 at b) as 16 floats:
 * lanes 0..7 the first group's rows, 8..15 the second's. */
X8_AVX512_INLINE __m512 half16_pair(const uint16_t *a, const uint16_t *b, const bool bf16)
{
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
        _mm_loadu_si128((const __m128i *)b), 1);
    if (!bf16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The pair kernel walks a row in spans of HALF_PAIR_SPAN_BLOCKS blocks (8 KB
 * of the pair's weights and 8 KB of 8 tokens' activations, in L1 while the
 * passes below go over them) and holds HALF_PAIR_ACC sums in registers. */
#define HALF_PAIR_SPAN_BLOCKS 32
#define HALF_PAIR_ACC 24

/* Two groups (16 rows), blocks [b0, b1), sums j0 .. j0 + J - 1 of tokens
 * 0 .. NT - 1 (NT * J <= HALF_PAIR_ACC zmm, lane = row of the pair); each
 * weight vector feeds NT fmas, each broadcast activation 16 rows. Every
 * fma loads its broadcast; a weight vector's two loads, its insert and its
 * conversion are shared by NT fmas, so the more tokens per vector, the
 * closer to the fma peak the tile runs: on AMD Zen 5 (two 512-bit fma
 * pipes) three tokens with all eight sums at once ran at about half the
 * peak, eight tokens in three passes at about 60 % (bench_matmul), which
 * took llama-1b F16 prefill up by 13-26 %. The passes change no result:
 * each sum still takes its fmas in block order. */
X8_AVX512_INLINE void half_pair_span(const block_halfx8 *wa, const block_halfx8 *wb, int64_t b0,
                                     int64_t b1, const void *x, size_t xs, const int j0,
                                     __m512 (*state)[8], const int NT, const int J,
                                     const bool pf, const bool bf16)
{
    __m512 acc[HALF_PAIR_ACC];
    for (int t = 0; t < NT; t++)
        for (int jj = 0; jj < J; jj++) acc[t * J + jj] = state[t][j0 + jj];
    for (int64_t ib = b0; ib < b1; ib++) {
        if (pf) { /* later passes find the span in L1 */
            prefetch_lines(wa[ib].w, sizeof(block_halfx8), TENSOR_X8_AVX512_PREFETCH_AHEAD);
            prefetch_lines(wb[ib].w, sizeof(block_halfx8), TENSOR_X8_AVX512_PREFETCH_AHEAD);
        }
        for (int jj = 0; jj < J; jj++) {
            const int j = j0 + jj;
            const __m512 wv = half16_pair(wa[ib].w + 8 * j, wb[ib].w + 8 * j, bf16);
            for (int t = 0; t < NT; t++) {
                const float *xt = (const float *)((const char *)x + (size_t)t * xs);
                acc[t * J + jj] = _mm512_fmadd_ps(
                    wv, _mm512_set1_ps(xt[TENSOR_X8_HALF_ELEMS * ib + j]), acc[t * J + jj]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        for (int jj = 0; jj < J; jj++) state[t][j0 + jj] = acc[t * J + jj];
}

/* One span for NT tokens, in as few passes as the registers allow: all
 * eight sums of up to three tokens at once, four at a time for up to six,
 * three, three and two for seven or eight. */
#define HALF_PAIR_PASSES(NT)                                                                   \
    do {                                                                                       \
        if ((NT) <= 3) {                                                                       \
            half_pair_span(wa, wb, b0, b1, x, xs, 0, state, (NT), 8, true, bf16);              \
        } else if ((NT) <= 6) {                                                                \
            half_pair_span(wa, wb, b0, b1, x, xs, 0, state, (NT), 4, true, bf16);              \
            half_pair_span(wa, wb, b0, b1, x, xs, 4, state, (NT), 4, false, bf16);             \
        } else {                                                                               \
            half_pair_span(wa, wb, b0, b1, x, xs, 0, state, (NT), 3, true, bf16);              \
            half_pair_span(wa, wb, b0, b1, x, xs, 3, state, (NT), 3, false, bf16);             \
            half_pair_span(wa, wb, b0, b1, x, xs, 6, state, (NT), 2, false, bf16);             \
        }                                                                                      \
    } while (0)

X8_AVX512_INLINE void half_avx512_pair(int64_t n, const void *w, size_t gs, const void *x,
                                       size_t xs, float *y, size_t ys, const int nt,
                                       const bool bf16)
{
    const block_halfx8 *wa = w;
    const block_halfx8 *wb = (const block_halfx8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m512 state[TENSOR_X8_HALF_AVX512_MAX_T][8];
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 8; j++) state[t][j] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += HALF_PAIR_SPAN_BLOCKS) {
        const int64_t b1 = b0 + HALF_PAIR_SPAN_BLOCKS < nb ? b0 + HALF_PAIR_SPAN_BLOCKS : nb;
        switch (nt) {
        case 1: HALF_PAIR_PASSES(1); break;
        case 2: HALF_PAIR_PASSES(2); break;
        case 3: HALF_PAIR_PASSES(3); break;
        case 4: HALF_PAIR_PASSES(4); break;
        case 5: HALF_PAIR_PASSES(5); break;
        case 6: HALF_PAIR_PASSES(6); break;
        case 7: HALF_PAIR_PASSES(7); break;
        default: HALF_PAIR_PASSES(8); break;
        }
    }
    for (int t = 0; t < nt; t++) {
        const __m512 *a = state[t];
        const __m512 e = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[4], a[6]));
        const __m512 o = _mm512_add_ps(_mm512_add_ps(a[1], a[3]), _mm512_add_ps(a[5], a[7]));
        _mm512_storeu_ps(y + (size_t)t * ys, _mm512_add_ps(e, o));
    }
}

#define HALF_AVX512_SET(name, bf16)                                                            \
    X8_AVX512_TARGET void tensor_x8_##name##_avx512(int64_t n, const void *w, const void *x,   \
                                                    size_t xs, float *y, size_t ys, int nt)    \
    {                                                                                          \
        half_avx512_one(n, w, x, xs, y, ys, nt, bf16);                                         \
    }                                                                                          \
    X8_AVX512_TARGET void tensor_x8_##name##_avx512_pair(int64_t n, const void *w, size_t gs,  \
                                                         const void *x, size_t xs, float *y,   \
                                                         size_t ys, int nt)                    \
    {                                                                                          \
        half_avx512_pair(n, w, gs, x, xs, y, ys, nt, bf16);                                    \
    }

HALF_AVX512_SET(f16, false)
HALF_AVX512_SET(bf16, true)

#endif /* __x86_64__ */

/* ------------------------------------------------------------ VDPBF16PS */

/* Float32 flushed to zero when subnormal (VDPBF16PS's DAZ and FTZ). */
static float bf16_dot_ftz(float v)
{
    return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v;
}

void tensor_x8_bf16_dot_act(const float *x, void *dst, int64_t n)
{
    uint16_t *o = dst;
    for (int64_t ib = 0; ib < n / TENSOR_X8_HALF_ELEMS; ib++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 8; l++)
                for (int p = 0; p < 2; p++)
                    o[64 * ib + 16 * k + 2 * l + p] =
                        tensor_f32_to_bf16(x[TENSOR_X8_HALF_ELEMS * ib + 2 * k + p]);
}

size_t tensor_x8_bf16_dot_act_bytes(int64_t n)
{
    return (size_t)(n / TENSOR_X8_HALF_ELEMS) * 64 * sizeof(uint16_t);
}

/* One VDPBF16PS lane: acc + w1 * x1, then + w0 * x0, inputs and outputs
 * flushed to zero; a product of two bf16 values is exact in float32. */
static float bf16_dot_step(float acc, uint16_t w0, uint16_t w1, uint16_t x0, uint16_t x1)
{
    const float a0 = bf16_dot_ftz(tensor_bf16_to_f32(w0)), a1 = bf16_dot_ftz(tensor_bf16_to_f32(w1));
    const float b0 = bf16_dot_ftz(tensor_bf16_to_f32(x0)), b1 = bf16_dot_ftz(tensor_bf16_to_f32(x1));
    float t = bf16_dot_ftz(bf16_dot_ftz(acc) + a1 * b1);
    return bf16_dot_ftz(t + a0 * b0);
}

void tensor_x8_bf16_dot_scalar(int64_t n, const void *w, const void *x, size_t xs, float *y,
                               size_t ys, int nt)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    for (int t = 0; t < nt; t++) {
        const uint16_t *xt = (const uint16_t *)((const char *)x + (size_t)t * xs);
        for (int r = 0; r < 8; r++) {
            float s[4] = {0};
            for (int64_t ib = 0; ib < nb; ib++)
                for (int k = 0; k < 4; k++) {
                    const uint16_t w0 = wb[ib].w[8 * (2 * k) + r], w1 = wb[ib].w[8 * (2 * k + 1) + r];
                    const uint16_t *xp = xt + 64 * ib + 16 * k + 2 * r;
                    s[k] = bf16_dot_step(s[k], w0, w1, xp[0], xp[1]);
                }
            y[(size_t)t * ys + r] = (s[0] + s[1]) + (s[2] + s[3]);
        }
    }
}

#if defined(__x86_64__)

#define BF16_DOT_ATTRS target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")

/* One group x NT tokens: the 32 halves w[32 h ..] (elements 4h .. 4h + 3
 * of the 8 rows) are permuted so that dword lane j holds row j % 8's pair
 * k = 2h + j / 8 (elements 2k, 2k + 1), as dword j of the activation row's
 * 64 bytes at (block, h) does. Sums s[k] live in the two accumulators of
 * h = k / 2 (lanes 8 (k % 2) ..). */
static inline __attribute__((always_inline, BF16_DOT_ATTRS)) void
bf16_dot_tile(int64_t n, const void *w, const void *x, size_t xs, float *y, size_t ys,
              const int NT)
{
    const block_halfx8 *wb = w;
    const int64_t nb = n / TENSOR_X8_HALF_ELEMS;
    __m512 acc[TENSOR_X8_BF16_DOT_MAX_T][2];
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    /* half q = 2 j + p of the permuted vector: row j % 8's element
     * 2 (j / 8) + p of the 4, at 8 (2 (j / 8) + p) + j % 8 */
    uint16_t perm_idx[32];
    for (int q = 0; q < 32; q++)
        perm_idx[q] = (uint16_t)(8 * (2 * (q / 2 / 8) + q % 2) + q / 2 % 8);
    const __m512i perm = _mm512_loadu_si512((const void *)perm_idx);
    for (int64_t ib = 0; ib < nb; ib++) {
        _mm_prefetch((const char *)wb[ib].w + TENSOR_X8_PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)wb[ib].w + TENSOR_X8_PREFETCH_AHEAD + 64, _MM_HINT_T0);
        for (int h = 0; h < 2; h++) {
            const __m512bh wv = (__m512bh)_mm512_permutexvar_epi16(
                perm, _mm512_loadu_si512((const void *)(wb[ib].w + 32 * h)));
            for (int t = 0; t < NT; t++) {
                const uint16_t *xt = (const uint16_t *)((const char *)x + (size_t)t * xs);
                const __m512bh xv =
                    (__m512bh)_mm512_loadu_si512((const void *)(xt + 64 * ib + 32 * h));
                acc[t][h] = _mm512_dpbf16_ps(acc[t][h], wv, xv);
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        float s[2][16];
        _mm512_storeu_ps(s[0], acc[t][0]);
        _mm512_storeu_ps(s[1], acc[t][1]);
        for (int r = 0; r < 8; r++)
            y[(size_t)t * ys + r] = (s[0][r] + s[0][8 + r]) + (s[1][r] + s[1][8 + r]);
    }
}

__attribute__((BF16_DOT_ATTRS)) void tensor_x8_bf16_dot_avx512bf16(int64_t n, const void *w,
                                                                  const void *x, size_t xs,
                                                                  float *y, size_t ys, int nt)
{
    switch (nt) {
    case 1: bf16_dot_tile(n, w, x, xs, y, ys, 1); break;
    case 2: bf16_dot_tile(n, w, x, xs, y, ys, 2); break;
    case 3: bf16_dot_tile(n, w, x, xs, y, ys, 3); break;
    case 4: bf16_dot_tile(n, w, x, xs, y, ys, 4); break;
    case 5: bf16_dot_tile(n, w, x, xs, y, ys, 5); break;
    default: bf16_dot_tile(n, w, x, xs, y, ys, 6); break;
    }
}

#endif /* __x86_64__ */
