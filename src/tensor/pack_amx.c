/* AMX kernels of the Q8_0, Q4_0 and Q4_K x8 layouts: prefill tiles of 16 tokens
 * on Intel's tile unit (Sapphire Rapids and later), for the AVX512 level
 * where strata_cpu_amx() allows (pack_internal.h has the layouts and the
 * float steps every kernel follows).
 *
 * Per block of 32 elements one tile instruction, TDPBSSD, multiplies tile
 * A, 16 rows x 32 signed bytes (the 16 tokens' activation codes of the
 * block, loaded in place from their rows, xs bytes apart), by tile B, 8
 * rows x 64 signed bytes, where row j holds elements 4j..4j+3 of the 16
 * weight rows of a pair of groups (the two groups' code vectors j side by
 * side: Q8_0's packed bytes, Q4_0's nibbles widened to q - 8; a lone
 * group's half is zero). C = A . B, 16 tokens x 16 rows of int32, is the
 * exact isum of every (token, row) pair of the block, as the scalar
 * reference computes it (integer sums are exact in any order). C is
 * stored, read back one token (16 rows) per 512-bit vector, and the float
 * step acc = fmaf((float)isum, d_r * dx, acc) runs in block order on 16
 * lanes: the AVX512 level's bits, and the scalar reference's.
 *
 * The per-block scales force C out of the tiles every 32 elements, so the
 * tile loads and stores (A, B and C: 40 tile rows per 8192 products), not
 * the products, bound the tile side; they share the load and store ports
 * with the float steps. The loop is a pipeline: block k runs on C tile
 * k % 4, A tile 4 + k % 2 and B tile 6 + k % 2; its B is built two steps
 * before its product starts, the product two steps before C is stored, and
 * C one step before its float steps. Measured on a 2-core Xeon with AMX
 * (one thread, 256 x 2048 matrix in L2, thread CPU time): about 1.25-1.3x
 * the AVX-512 VNNI pair kernel for each of the three types. Q4_K (below)
 * runs the same pipeline over its 32-element sub-blocks.
 *
 * Calls with fewer than 16 tokens go to the AVX512 kernels (same bits).
 * Each AMX call loads its tile configuration and releases the tile state
 * when it returns, so no thread holds it between matrix products. */
#include "tensor/fp16.h"
#include "tensor/pack_internal.h"

#if defined(__x86_64__)

#include "tensor/pack_avx512.h"
#include "tensor/vecdot_x86.h"

#include <immintrin.h>
#include <stdalign.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The tile instructions as inline assembly (AT&T operand order: sources
 * first), so that no compiler flag is needed and every load and store of
 * memory is ordered against the C code around it ("memory"). */
#define AMX_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::: "memory")
#define AMX_LOAD(t, base, stride)                                                          \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)),          \
                     "r"((long)(stride))                                                   \
                     : "memory")
#define AMX_STORE(t, base, stride)                                                         \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(base)),            \
                     "r"((long)(stride))                                                   \
                     : "memory")
/* C (tile c) += A (tile a) . B (tile b), signed bytes, int32 sums */
#define AMX_DPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")

/* The 64-byte tile configuration (palette 1): colsb[i] bytes per row and
 * rows[i] rows of tile i. */
typedef struct amx_cfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "the tile configuration is 64 bytes");

static void amx_configure(void)
{
    alignas(64) amx_cfg c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < 4; t++) { /* C: 16 tokens x 16 rows of int32 */
        c.rows[t] = TENSOR_X8_AMX_T;
        c.colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) { /* A: 16 tokens x 32 codes */
        c.rows[t] = TENSOR_X8_AMX_T;
        c.colsb[t] = 32;
    }
    for (int t = 6; t < 8; t++) { /* B: 8 quads x (16 rows x 4 codes) */
        c.rows[t] = 8;
        c.colsb[t] = 64;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory");
}

static void amx_release(void)
{
    __asm__ volatile("tilerelease" ::: "memory");
}

/* B for a pair of groups: row j (64 bytes) = elements 4j..4j+3 of group g's
 * 8 rows, then of group g + 1's (zero when NG == 1). Q8_0: the packed code
 * vectors side by side. */
X8_AVX512_INLINE void b_q8_0(const block_q8_0x8 *w0, const block_q8_0x8 *w1, int8_t *b,
                             const int NG)
{
    for (int j = 0; j < 8; j++)
        _mm512_store_si512((void *)(b + 64 * j), load_pair256(w0->qs + 32 * j, w1->qs + 32 * j, NG));
}

/* Q4_0 and Q4_K: row j from nibble (j odd: high) of q[32 (j / 2) ..], less
 * `offset` (Q4_0's 8; Q4_K's codes stay 0..15). */
X8_AVX512_INLINE void b_nibbles(const uint8_t *q0, const uint8_t *q1, int8_t *b, const int offset,
                                const int NG)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), off = _mm512_set1_epi8((char)offset);
    for (int m = 0; m < 4; m++) {
        const __m512i q = load_pair256(q0 + 32 * m, q1 + 32 * m, NG);
        __m512i lo = _mm512_sub_epi8(_mm512_and_si512(q, m4), off);
        __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), off);
        if (NG == 1 && offset != 0) { /* the absent group's codes must be 0, not -offset */
            lo = _mm512_zextsi256_si512(_mm512_castsi512_si256(lo));
            hi = _mm512_zextsi256_si512(_mm512_castsi512_si256(hi));
        }
        _mm512_store_si512((void *)(b + 128 * m), lo);
        _mm512_store_si512((void *)(b + 128 * m + 64), hi);
    }
}

/* The float steps of block ib for the 16 tokens, isums in cb (row t: the
 * 8 rows of group g, then the 8 of group g + 1). */
X8_AVX512_INLINE void amx_steps(__m512 *acc, const int32_t *cb, __m512 dw, const char *x,
                                size_t xs, int64_t ib, const int NG)
{
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) {
        const block_q8_0 *xb = (const block_q8_0 *)(x + (size_t)t * xs) + ib;
        const __m512i isum = NG == 2 ? _mm512_load_si512((const void *)(cb + 16 * t))
                                     : _mm512_zextsi256_si512(
                                           _mm256_load_si256((const __m256i *)(cb + 16 * t)));
        const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(tensor_h2f(xb->d)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[t]);
    }
}

/* Block k's B, built into bq[k % 4] two pipeline steps before its tile
 * product loads it: a tile load of bytes the vector unit has just stored
 * waits for them to leave the store buffer (it cost more than the
 * product itself when done back to back). */
#define AMX_BUILD(k)                                                                       \
    do {                                                                                   \
        if (Q4) {                                                                          \
            prefetch_lines(&q0[k], sizeof(block_q4_0x8), TENSOR_X8_PREFETCH_AHEAD);        \
            if (NG == 2) prefetch_lines(&q1[k], sizeof(block_q4_0x8), TENSOR_X8_PREFETCH_AHEAD); \
        } else {                                                                           \
            prefetch_lines(&e0[k], sizeof(block_q8_0x8), TENSOR_X8_PREFETCH_AHEAD);        \
            if (NG == 2) prefetch_lines(&e1[k], sizeof(block_q8_0x8), TENSOR_X8_PREFETCH_AHEAD); \
        }                                                                                  \
        if (Q4)                                                                            \
            b_nibbles(q0[k].qs, q1[k].qs, bq[(k) & 3], 8, NG);                             \
        else                                                                               \
            b_q8_0(&e0[k], &e1[k], bq[(k) & 3], NG);                                       \
    } while (0)

/* A block's products into C tile CT, from A tile AT (the 16 tokens' codes
 * at a, read in place, xs apart) and B tile BT (block k's, in bq[k % 4]). */
#define AMX_BLOCK(CT, AT, BT, a, k)                                                        \
    do {                                                                                   \
        AMX_ZERO(CT);                                                                      \
        AMX_LOAD(AT, (a), xs);                                                             \
        AMX_LOAD(BT, bq[(k) & 3], 64);                                                     \
        AMX_DPBSSD(CT, AT, BT);                                                            \
    } while (0)

/* Block k's codes in the activation rows: Q8_0 blocks, Q8_K sub-blocks. */
#define Q8_0_CODES(k) (x + (size_t)(k) * sizeof(block_q8_0) + offsetof(block_q8_0, qs))
#define Q8_K_CODES(k)                                                                      \
    (x + (size_t)((k) / 8) * sizeof(block_q8_k) + offsetof(block_q8_k, qs) + 32 * (size_t)((k) % 8))

/* One step of the pipeline at block j: build block j + 5's B, start block
 * j + 3 on C tile (j + 3) % 4, take block j + 1's sums out of its C tile
 * into cbuf[(j + 1) % 2], and run the float steps of block j from
 * cbuf[j % 2] (stored one step earlier). A tile product takes several
 * times its issue interval to finish and the tile unit runs in order, so
 * a C tile is stored only two products after it was started. */
#define AMX_PHASE(j, C3, A3, B3, C1)                                                       \
    do {                                                                                   \
        if ((j) >= nb) goto done;                                                          \
        if ((j) + 5 < nb) AMX_BUILD((j) + 5);                                              \
        if ((j) + 3 < nb) AMX_BLOCK(C3, A3, B3, Q8_0_CODES((j) + 3), (j) + 3);            \
        if ((j) + 1 < nb) AMX_STORE(C1, cbuf[((j) + 1) & 1], 64);                          \
        const __m512 dw_ = Q4 ? load_scales(q0[j].d, q1[j].d, NG)                          \
                              : load_scales(e0[j].d, e1[j].d, NG);                         \
        amx_steps(acc, cbuf[(j) & 1], dw_, x, xs, (j), NG);                                \
    } while (0)

/* NG groups (1 or 2) x 16 tokens of Q8_0 (Q4 == 0) or Q4_0 (Q4 == 1).
 * Block k runs on C tile k % 4, A tile 4 + k % 2 and B tile 6 + k % 2. */
X8_AVX512_INLINE void amx_tile(int64_t n, const void *w, size_t gs, const char *x, size_t xs,
                               float *y, size_t ys, const int NG, const int Q4)
{
    const block_q8_0x8 *e0 = w;
    const block_q8_0x8 *e1 = (const block_q8_0x8 *)((const char *)w + gs);
    const block_q4_0x8 *q0 = w;
    const block_q4_0x8 *q1 = (const block_q4_0x8 *)((const char *)w + gs);
    const int64_t nb = n / TENSOR_QK;
    alignas(64) int32_t cbuf[2][TENSOR_X8_AMX_T * 16];
    alignas(64) int8_t bq[4][512];
    __m512 acc[TENSOR_X8_AMX_T];
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < nb && k < 4; k++) AMX_BUILD(k);
    amx_configure();
    AMX_BLOCK(0, 4, 6, Q8_0_CODES(0), 0);
    if (nb > 4) AMX_BUILD(4); /* into bq[0], which block 0's load has read */
    if (nb > 1) AMX_BLOCK(1, 5, 7, Q8_0_CODES(1), 1);
    if (nb > 2) AMX_BLOCK(2, 4, 6, Q8_0_CODES(2), 2);
    AMX_STORE(0, cbuf[0], 64);
    for (int64_t ib = 0; ib < nb; ib += 4) {
        AMX_PHASE(ib, 3, 5, 7, 1);
        AMX_PHASE(ib + 1, 0, 4, 6, 2);
        AMX_PHASE(ib + 2, 1, 5, 7, 3);
        AMX_PHASE(ib + 3, 2, 4, 6, 0);
    }
done:
    amx_release();
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* ------------------------------------------------------------ Q4_K */

/* Q4_K (super-blocks of 256 = 8 sub-blocks of 32): sub-block k = 8 ib + s
 * is one tile product, A the 16 tokens' Q8_K codes of the sub-block, B the
 * pair's codes (0..15, widened from the nibbles as Q4_0's, without the
 * offset), C the exact sums p_s of each (token, row) pair. After the 8
 * sub-blocks of a super-block, per token: isum = sum_s sc_s * p_s (int32
 * multiplies: |p_s| <= 32 * 15 * 128 = 61440, |isum| <= 8 * 63 * 61440 <
 * 2^25), imin from the mins and the activation row's bsums as the AVX-512
 * kernel computes it, and the reference's two float steps. */
/* The per-token steps of super-block ib, its 8 sub-blocks' sums in cb[s]. */
X8_AVX512_INLINE void amx_q4_k_steps(__m512 *acc, int32_t (*cb)[TENSOR_X8_AMX_T * 16],
                                     const block_q4_kx8 *w0, const block_q4_kx8 *w1,
                                     const char *x, size_t xs, int64_t ib, const int NG)
{
    __m512i sc[8];
    for (int s = 0; s < 8; s++) sc[s] = q4_kx8_scales(w0, w1, s, NG);
    __m512i mn16[4];
    q4_kx8_mins(w0, w1, mn16, NG);
    const __m512 dw = load_scales(w0->d, w1->d, NG);
    const __m512 dmw = load_scales(w0->dmin, w1->dmin, NG);
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) {
        const block_q8_k *xb = (const block_q8_k *)(x + (size_t)t * xs) + ib;
        __m512i isum = _mm512_mullo_epi32(_mm512_load_si512((const void *)(cb[0] + 16 * t)), sc[0]);
        for (int s = 1; s < 8; s++)
            isum = _mm512_add_epi32(
                isum, _mm512_mullo_epi32(_mm512_load_si512((const void *)(cb[s] + 16 * t)), sc[s]));
        const __m512i imin = q4_kx8_imin(mn16, xb->bsums);
        const __m512 dx = _mm512_set1_ps(xb->d);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, dx), acc[t]);
        acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmw, dx), acc[t]);
    }
}

/* Sub-block k's B into bq[k % 4] (prefetching the weights ahead). */
#define Q4K_BUILD(k)                                                                       \
    do {                                                                                   \
        const int64_t ib_ = (k) / 8, s_ = (k) % 8;                                         \
        const uint8_t *p0_ = w0[ib_].qs + 128 * s_, *p1_ = w1[ib_].qs + 128 * s_;          \
        prefetch_lines(p0_, 128, 2 * sizeof(block_q4_kx8));                                \
        if (NG == 2) prefetch_lines(p1_, 128, 2 * sizeof(block_q4_kx8));                   \
        b_nibbles(p0_, p1_, bq[(k) & 3], 0, NG);                                           \
    } while (0)

/* As AMX_PHASE over sub-blocks k = 8 ib + s: sums of sub-block k + 1 go to
 * cbuf[(k + 1) / 8 % 2][(k + 1) % 8]; after the last sub-block of a
 * super-block (all its sums stored one phase earlier), its token steps. */
#define Q4K_PHASE(k, C3, A3, B3, C1)                                                       \
    do {                                                                                   \
        if ((k) >= nk) goto done;                                                          \
        if ((k) + 5 < nk) Q4K_BUILD((k) + 5);                                              \
        if ((k) + 3 < nk) AMX_BLOCK(C3, A3, B3, Q8_K_CODES((k) + 3), (k) + 3);            \
        if ((k) + 1 < nk) AMX_STORE(C1, cbuf[(((k) + 1) / 8) & 1][((k) + 1) % 8], 64);     \
        if ((k) % 8 == 7)                                                                  \
            amx_q4_k_steps(acc, cbuf[((k) / 8) & 1], &w0[(k) / 8], &w1[(k) / 8], x, xs,    \
                           (k) / 8, NG);                                                   \
    } while (0)

X8_AVX512_INLINE void amx_q4_k(int64_t n, const void *w, size_t gs, const char *x, size_t xs,
                               float *y, size_t ys, const int NG)
{
    const block_q4_kx8 *w0 = w;
    const block_q4_kx8 *w1 = (const block_q4_kx8 *)((const char *)w + gs);
    const int64_t nk = n / TENSOR_QK_K * 8; /* sub-blocks */
    alignas(64) int32_t cbuf[2][8][TENSOR_X8_AMX_T * 16];
    alignas(64) int8_t bq[4][512];
    __m512 acc[TENSOR_X8_AMX_T];
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < 4; k++) Q4K_BUILD(k); /* nk >= 8 */
    amx_configure();
    AMX_BLOCK(0, 4, 6, Q8_K_CODES(0), 0);
    Q4K_BUILD(4);
    AMX_BLOCK(1, 5, 7, Q8_K_CODES(1), 1);
    AMX_BLOCK(2, 4, 6, Q8_K_CODES(2), 2);
    AMX_STORE(0, cbuf[0][0], 64);
    for (int64_t k = 0; k < nk; k += 8) {
        Q4K_PHASE(k, 3, 5, 7, 1);
        Q4K_PHASE(k + 1, 0, 4, 6, 2);
        Q4K_PHASE(k + 2, 1, 5, 7, 3);
        Q4K_PHASE(k + 3, 2, 4, 6, 0);
        Q4K_PHASE(k + 4, 3, 5, 7, 1);
        Q4K_PHASE(k + 5, 0, 4, 6, 2);
        Q4K_PHASE(k + 6, 1, 5, 7, 3);
        Q4K_PHASE(k + 7, 2, 4, 6, 0);
    }
done:
    amx_release();
    for (int t = 0; t < TENSOR_X8_AMX_T; t++) store_rows(y + (size_t)t * ys, acc[t], NG);
}

/* The level's kernels take at most 8 tokens: fewer than 16 go to them in
 * runs of 8. */
#define AMX_SET(t, ONE, PAIR)                                                                        \
    X8_AVX512_TARGET void tensor_x8_##t##_amx(int64_t n, const void *w, const void *x,       \
                                              size_t xs, float *y, size_t ys, int nt)        \
    {                                                                                         \
        if (nt == TENSOR_X8_AMX_T) {                                                          \
            ONE;                                           \
            return;                                                                           \
        }                                                                                     \
        for (int t0 = 0; t0 < nt; t0 += TENSOR_X8_AVX512_MAX_T) {                             \
            int k = nt - t0 < TENSOR_X8_AVX512_MAX_T ? nt - t0 : TENSOR_X8_AVX512_MAX_T;      \
            tensor_x8_##t##_avx512(n, w, (const char *)x + (size_t)t0 * xs, xs,               \
                                   y + (size_t)t0 * ys, ys, k);                               \
        }                                                                                     \
    }                                                                                         \
    X8_AVX512_TARGET void tensor_x8_##t##_amx_pair(int64_t n, const void *w, size_t gs,      \
                                                   const void *x, size_t xs, float *y,       \
                                                   size_t ys, int nt)                         \
    {                                                                                         \
        if (nt == TENSOR_X8_AMX_T) {                                                          \
            PAIR;                                          \
            return;                                                                           \
        }                                                                                     \
        for (int t0 = 0; t0 < nt; t0 += TENSOR_X8_AVX512_MAX_T) {                             \
            int k = nt - t0 < TENSOR_X8_AVX512_MAX_T ? nt - t0 : TENSOR_X8_AVX512_MAX_T;      \
            tensor_x8_##t##_avx512_pair(n, w, gs, (const char *)x + (size_t)t0 * xs, xs,      \
                                        y + (size_t)t0 * ys, ys, k);                          \
        }                                                                                     \
    }

AMX_SET(q8_0, amx_tile(n, w, 0, x, xs, y, ys, 1, 0), amx_tile(n, w, gs, x, xs, y, ys, 2, 0))
AMX_SET(q4_0, amx_tile(n, w, 0, x, xs, y, ys, 1, 1), amx_tile(n, w, gs, x, xs, y, ys, 2, 1))
AMX_SET(q4_k, amx_q4_k(n, w, 0, x, xs, y, ys, 1), amx_q4_k(n, w, gs, x, xs, y, ys, 2))

#endif /* __x86_64__ */
