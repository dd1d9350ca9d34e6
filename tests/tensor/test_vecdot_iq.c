/* Dot-product kernels of the ternary, MXFP4 and IQ types (vecdot_iq_*.c).
 *
 * There is no encoder for these types, so weight rows are random bytes
 * (every bit pattern is a valid block) with sane or extreme scales written
 * in, and activation rows are random int8 codes over the full range of
 * their type (Q8_K down to -128) with a random scale. Checked:
 *  (a) the scalar reference against the double-precision dot product of
 *      the decoded weights (tensor_dequantize_row) and decoded activations:
 *      this ties the kernels to the decoders, which test_quant_golden ties
 *      to llama.cpp's files;
 *  (b) every SIMD level this CPU runs against the scalar reference, both
 *      within REL_TOL of the sum of |terms| (the integer sums are exact, so
 *      only the order of float additions differs), and each level's decode
 *      and prefill tiles against its own vec_dot bit for bit;
 *  (c) tensor_matmul at each level (threads, tiles, edge rows) against (a)'s
 *      reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/matmul.h"
#include "tensor/matmul_kernels.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-5

/* Where a type keeps its block scale: an f16 at d_off, an E8M0 byte, or
 * IQ1_M's f16 spread over the top nibbles of 4 words at d_off. */
enum scale_kind { SCALE_F16, SCALE_E8M0, SCALE_IQ1M };

typedef struct iq_type {
    uint32_t type;
    enum scale_kind kind;
    size_t d_off; /* byte offset of the scale in the block */
    int zero_byte; /* a code byte whose elements are all 0; -1: none */
} iq_type;

static const iq_type k_types[] = {
    {STRATA_TYPE_TQ1_0, SCALE_F16, 52, 0x80}, /* every base-3 digit 1 */
    {STRATA_TYPE_TQ2_0, SCALE_F16, 64, 0x55}, /* every 2-bit code 1 */
    {STRATA_TYPE_MXFP4, SCALE_E8M0, 0, 0x00},
    {STRATA_TYPE_IQ2_XXS, SCALE_F16, 0, -1}, /* no codebook entry is 0 */
    {STRATA_TYPE_IQ2_XS, SCALE_F16, 0, -1},
    {STRATA_TYPE_IQ2_S, SCALE_F16, 0, -1},
    {STRATA_TYPE_IQ3_XXS, SCALE_F16, 0, -1},
    {STRATA_TYPE_IQ3_S, SCALE_F16, 0, -1},
    {STRATA_TYPE_IQ1_S, SCALE_F16, 0, -1}, /* 8v +- 1 is never 0 */
    {STRATA_TYPE_IQ1_M, SCALE_IQ1M, 48, -1},
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

enum wmode { W_RANDOM, W_ONES, W_ZERO, W_BIG, W_COUNT };

static size_t block_bytes(uint32_t t)
{
    return strata_type_get(t)->block_bytes;
}

static int64_t block_elems(uint32_t t)
{
    return strata_type_get(t)->block_elems;
}

static void make_weights(const iq_type *ty, enum wmode mode, int64_t n, uint8_t *w, strata_rng *rng)
{
    size_t bb = block_bytes(ty->type), nb = (size_t)(n / block_elems(ty->type));
    for (size_t i = 0; i < bb * nb; i++)
        w[i] = mode == W_ONES || mode == W_BIG ? 0xff
               : mode == W_ZERO                ? (uint8_t)ty->zero_byte
                                               : (uint8_t)strata_rng_next(rng);
    for (size_t ib = 0; ib < nb; ib++) {
        uint8_t *d = w + ib * bb + ty->d_off;
        if (ty->kind == SCALE_F16 || ty->kind == SCALE_IQ1M) {
            float v = (float)(strata_rng_uniform(rng) + 0.5) * (strata_rng_next(rng) & 1 ? 1 : -1);
            uint16_t h = mode == W_BIG ? 0x7bff : tensor_f32_to_f16(v * 0.05f);
            if (ty->kind == SCALE_F16) {
                memcpy(d, &h, 2);
            } else {
                for (int k = 0; k < 4; k++) /* nibble k of h -> top nibble of word k */
                    d[2 * k + 1] = (uint8_t)((d[2 * k + 1] & 0x0f) | ((h >> (4 * k)) & 15) << 4);
            }
        } else {
            /* 2^(e-128) * 12 * 127 * d_x stays finite well past e = 160 */
            *d = mode == W_BIG ? 160 : (uint8_t)(110 + strata_rng_next(rng) % 30);
        }
    }
}

/* Random activation codes over the type's full range, scale in [0.005, 0.015). */
static void make_acts(uint32_t act_type, int64_t n, uint8_t *x, strata_rng *rng)
{
    if (act_type == STRATA_TYPE_Q8_K) {
        block_q8_k *b = (block_q8_k *)x;
        for (int64_t ib = 0; ib < n / TENSOR_QK_K; ib++) {
            b[ib].d = (float)(0.005 + 0.01 * strata_rng_uniform(rng));
            for (int j = 0; j < TENSOR_QK_K; j++)
                b[ib].qs[j] = (int8_t)(strata_rng_next(rng) & 0xff);
            for (int s = 0; s < TENSOR_QK_K / 16; s++) {
                int sum = 0;
                for (int j = 0; j < 16; j++)
                    sum += b[ib].qs[16 * s + j];
                b[ib].bsums[s] = (int16_t)sum;
            }
        }
    } else {
        block_q8_0 *b = (block_q8_0 *)x;
        for (int64_t ib = 0; ib < n / TENSOR_QK; ib++) {
            b[ib].d = tensor_f32_to_f16((float)(0.005 + 0.01 * strata_rng_uniform(rng)));
            for (int j = 0; j < TENSOR_QK; j++)
                b[ib].qs[j] = (int8_t)((int)(strata_rng_next(rng) % 255) - 127);
        }
    }
}

/* The exact dot product of the decoded rows, and the sum of |terms|. */
static double ref_dot(uint32_t t, int64_t n, const void *w, const void *x, double *mag)
{
    float *wf = malloc((size_t)n * sizeof(float)), *xf = malloc((size_t)n * sizeof(float));
    assert_non_null(wf);
    assert_non_null(xf);
    assert_int_equal(tensor_dequantize_row(t, w, wf, n), 0);
    assert_int_equal(tensor_dequantize_row((uint32_t)tensor_matmul_vec_dot_type(t), x, xf, n), 0);
    double s = 0;
    *mag = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)wf[i] * (double)xf[i];
        *mag += fabs((double)wf[i] * (double)xf[i]);
    }
    free(wf);
    free(xf);
    return s;
}

static void expect_close(const char *what, uint32_t t, double got, double want, double mag)
{
    if (!(fabs(got - want) <= REL_TOL * mag + 1e-30))
        fail_msg("%s %s: %.9g, want %.9g (sum |terms| %.3g)", strata_type_name(t), what, got,
                 want, mag);
}

/* --- (a) and (b) --- */

static void test_kernels(void **state)
{
    (void)state;
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    int n_simd = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const iq_type *ty = &k_types[ti];
        const uint32_t t = ty->type, at = (uint32_t)tensor_matmul_vec_dot_type(t);
        const tensor_mm_kernels *ks = tensor_mm_kernels_exact(t, STRATA_SIMD_SCALAR);
        assert_non_null(ks);
        if (max >= STRATA_SIMD_AVX2) /* every type here has AVX2 kernels */
            assert_non_null(tensor_mm_kernels_exact(t, STRATA_SIMD_AVX2));
        const int64_t blocks[] = {1, 3, 16};
        for (size_t bi = 0; bi < 3; bi++) {
            const int64_t n = blocks[bi] * block_elems(t);
            const int R = 16, T = 16;
            const size_t wrb = strata_type_row_bytes(t, n), xrb = strata_type_row_bytes(at, n);
            uint8_t *w = malloc(wrb * R), *x = malloc(xrb * T);
            assert_non_null(w);
            assert_non_null(x);
            strata_rng rng;
            strata_rng_seed(&rng, 100 + 10 * ti + bi);
            for (int tt = 0; tt < T; tt++)
                make_acts(at, n, x + tt * xrb, &rng);
            for (int mode = 0; mode < W_COUNT; mode++) {
                if (mode == W_ZERO && ty->zero_byte < 0) continue;
                for (int r = 0; r < R; r++)
                    make_weights(ty, (enum wmode)mode, n, w + r * wrb, &rng);
                float ys[16][16];
                for (int r = 0; r < R; r++)
                    for (int tt = 0; tt < T; tt++) {
                        double mag, want = ref_dot(t, n, w + r * wrb, x + tt * xrb, &mag);
                        ys[r][tt] = ks->vec_dot(n, w + r * wrb, x + tt * xrb);
                        expect_close("scalar", t, ys[r][tt], want, mag);
                        if (mode == W_ZERO) assert_true(ys[r][tt] == 0.0f);
                    }
                for (int l = STRATA_SIMD_AVX2; l <= (int)max; l++) {
                    const tensor_mm_kernels *k = tensor_mm_kernels_exact(t, (enum strata_simd_level)l);
                    if (k == NULL) continue;
                    n_simd++;
                    float v[16][16], yt[16 * 16];
                    for (int r = 0; r < R; r++)
                        for (int tt = 0; tt < T; tt++) {
                            double mag;
                            ref_dot(t, n, w + r * wrb, x + tt * xrb, &mag);
                            v[r][tt] = k->vec_dot(n, w + r * wrb, x + tt * xrb);
                            expect_close(k->name, t, v[r][tt], ys[r][tt], mag);
                            /* the AVX-512 level runs the scalar kernels' integers
                             * and float steps */
                            if (l == STRATA_SIMD_AVX512 && v[r][tt] != ys[r][tt])
                                fail_msg("%s (%d, %d) differs from the scalar kernel", k->name, r, tt);
                        }
                    if (k->tile_rows != NULL) {
                        assert_true(k->rows_r <= R);
                        for (int tt = 0; tt < T; tt++) {
                            k->tile_rows(n, w, wrb, x + tt * xrb, xrb, yt, 1);
                            for (int r = 0; r < k->rows_r; r++)
                                if (yt[r] != v[r][tt])
                                    fail_msg("%s rows tile (%d, %d) differs from vec_dot", k->name, r, tt);
                        }
                    }
                    if (k->tile != NULL) {
                        assert_true(k->tile_r <= R && k->tile_t <= T);
                        k->tile(n, w, wrb, x, xrb, yt, (size_t)k->tile_r);
                        for (int r = 0; r < k->tile_r; r++)
                            for (int tt = 0; tt < k->tile_t; tt++)
                                if (yt[tt * k->tile_r + r] != v[r][tt])
                                    fail_msg("%s tile (%d, %d) differs from vec_dot", k->name, r, tt);
                    }
                }
            }
            free(w);
            free(x);
        }
    }
    if (max >= STRATA_SIMD_AVX2) assert_true(n_simd > 0);
}

/* The E8M0 scale built from bits is 2^(e - 128) for every e. */
static void test_e8m0(void **state)
{
    (void)state;
    for (int e = 0; e < 256; e++)
        assert_true(tensor_e8m0_half((uint8_t)e) == ldexpf(1.0f, e - 128));
}

/* --- (c) --- */

static void check_matmul(strata_pool *pool, enum strata_simd_level level, const iq_type *ty,
                         int64_t n_rows, int64_t n_blocks, int64_t n_tok, uint64_t seed)
{
    const uint32_t t = ty->type, at = (uint32_t)tensor_matmul_vec_dot_type(t);
    const int64_t n = n_blocks * block_elems(t);
    const size_t wrb = strata_type_row_bytes(t, n), xrb = strata_type_row_bytes(at, n);
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    uint8_t *w = malloc(wrb * (size_t)n_rows);
    float *x = malloc((size_t)(n * n_tok) * sizeof(float));
    float *y = malloc((size_t)(n_rows * n_tok) * sizeof(float));
    size_t sb = tensor_matmul_scratch_bytes(t, n, n_tok);
    void *scratch = malloc(sb), *xq = malloc(xrb * (size_t)n_tok);
    assert_true(w && x && y && scratch && xq);
    assert_int_equal(sb, xrb * (size_t)n_tok);
    for (int64_t r = 0; r < n_rows; r++)
        make_weights(ty, W_RANDOM, n, w + r * wrb, &rng);
    for (int64_t i = 0; i < n * n_tok; i++)
        x[i] = (float)strata_rng_normal(&rng);
    assert_int_equal(tensor_matmul_at_level(pool, level, t, w, n_rows, n, x, n_tok, y, scratch), 0);
    for (int64_t i = 0; i < n_tok; i++) {
        /* the activations as the driver quantizes them */
        assert_int_equal(tensor_quantize_row(at, x + i * n, (char *)xq + i * xrb, n), 0);
        for (int64_t r = 0; r < n_rows; r++) {
            double mag, want = ref_dot(t, n, w + r * wrb, (char *)xq + i * xrb, &mag);
            expect_close(strata_simd_level_name(level), t, y[i * n_rows + r], want, mag);
        }
    }
    free(w);
    free(x);
    free(y);
    free(scratch);
    free(xq);
}

static void test_matmul(void **state)
{
    (void)state;
    strata_pool *pool = strata_pool_new(2);
    assert_non_null(pool);
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (int l = STRATA_SIMD_SCALAR; l <= (int)max; l++) {
            enum strata_simd_level lv = (enum strata_simd_level)l;
            check_matmul(pool, lv, &k_types[ti], 1, 1, 1, 7 + ti);
            check_matmul(pool, lv, &k_types[ti], 17, 4, 1, 8 + ti);
            check_matmul(pool, lv, &k_types[ti], 17, 4, 9, 9 + ti);
            check_matmul(NULL, lv, &k_types[ti], 6, 2, 5, 10 + ti);
            /* whole prefill tiles of every level (AVX-512: 16 x 16) and their edges */
            check_matmul(pool, lv, &k_types[ti], 35, 2, 19, 11 + ti);
        }
    strata_pool_free(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e8m0),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
