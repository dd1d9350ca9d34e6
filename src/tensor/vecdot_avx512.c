/* AVX-512 VNNI kernels (on 256-bit vectors, AVX512VL) for Q4_0, Q5_0, Q8_0
 * and Q4_K: the AVX2 templates of vecdot_x86_tmpl.h with VNNI's fused integer
 * dot products in place of maddubs + madd (and, at the end, the IQ types'
 * 512-bit kernels of vecdot_iq_tmpl.h, which give the scalar kernels' bits):
 *   dpbusd: int32 lane k += sum_{j<4} u[4k+j] * s[4k+j], no int16 step;
 *   dpwssd: int32 lane k += s16[2k] * t16[2k] + s16[2k+1] * t16[2k+1].
 * The int32 lanes hold the same exact integers as the AVX2 code's, and the
 * float steps are the same, so results equal AVX2's bit for bit (the tests
 * check it). 32 vector registers allow a 4 x 4 prefill tile.
 *
 * Compiled everywhere (per-function target attributes), run only when
 * strata_cpu_level() says AVX512 (which implies VNNI, see base/cpu.h). */
#include "tensor/blocks.h"
#include "tensor/matmul_kernels.h"
#include "tensor/vecdot_x86.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define AVX512_ATTRS target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define AVX512_TARGET __attribute__((AVX512_ATTRS))

#define TMPL_INLINE static inline __attribute__((always_inline, AVX512_ATTRS))
#define TMPL_DOT4(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define TMPL_DOT_SCALED_ADD(acc, u, s, sc16) \
    _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16)
#include "tensor/vecdot_x86_tmpl.h"
#define IQ_TMPL_ZMM 1
#include "tensor/vecdot_iq_tmpl.h"

TMPL_INLINE void q4_k_tile(int64_t n, const void *w, size_t ws, const void *x, size_t xs,
                           float *y, size_t ys, const int NR, const int NT)
{
    k45_tile(n, w, ws, x, xs, y, ys, NR, NT, 0);
}


#define AVX512_SET(t, TR, TT)                                                                 \
    static AVX512_TARGET float vd_##t(int64_t n, const void *w, const void *x)               \
    {                                                                                         \
        float y;                                                                              \
        t##_tile(n, w, 0, x, 0, &y, 0, 1, 1);                                                 \
        return y;                                                                             \
    }                                                                                         \
    static AVX512_TARGET void rows_##t(int64_t n, const void *w, size_t ws, const void *x,   \
                                       size_t xs, float *y, size_t ys)                        \
    {                                                                                         \
        t##_tile(n, w, ws, x, xs, y, ys, 4, 1);                                               \
    }                                                                                         \
    static AVX512_TARGET void tile_##t(int64_t n, const void *w, size_t ws, const void *x,   \
                                       size_t xs, float *y, size_t ys)                        \
    {                                                                                         \
        t##_tile(n, w, ws, x, xs, y, ys, TR, TT);                                             \
    }                                                                                         \
    const tensor_mm_kernels tensor_mmk_##t##_avx512 = {                                       \
        .name = #t "/avx512", .vec_dot = vd_##t, .tile_rows = rows_##t, .tile = tile_##t,    \
        .rows_r = 4, .tile_r = TR, .tile_t = TT}

AVX512_SET(q4_0, 4, 4);
AVX512_SET(q5_0, 4, 4); /* gemma3's Q4_K_M mixes: rows of 1152 are no whole K-quant blocks */
/* The IQ types: vecdot_iq_tmpl.h's 512-bit kernels, bit-identical to the scalar ones. */
AVX512_SET(iq2_xxs, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq2_xs, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq2_s, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq3_xxs, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq3_s, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq1_s, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(iq1_m, IQ_PANEL_R, IQ_PANEL_T);
AVX512_SET(q8_0, 4, 4);
AVX512_SET(q4_k, 4, 4);

#endif /* __x86_64__ */
