/* The Q8_0 attention kernels (tensor/attn_q8.h): every SIMD variant this
 * machine runs gives the scalar reference's bits, over shapes that cover
 * the four-head groups and their tails, one to many blocks, rows with
 * padding between them, zero and extreme codes; and the reference itself
 * computes what its contract says (checked against a double-precision
 * evaluation of the same formula). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "tensor/attn_q8.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float frand(uint32_t *s)
{
    return (float)lcg(s) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Rows of n_blk blocks quantized from random floats of varying magnitude,
 * row_bytes apart (padding filled with junk the kernels must not read as
 * codes of the next row). Some blocks are all zero, some use +-127. */
static uint8_t *make_rows(int64_t n_rows, int64_t n_blk, size_t row_bytes, uint32_t *seed)
{
    uint8_t *rows = malloc((size_t)n_rows * row_bytes);
    memset(rows, 0xa5, (size_t)n_rows * row_bytes);
    float x[32 * 16];
    for (int64_t j = 0; j < n_rows; j++) {
        float mag = 0.01f + 10.0f * (float)(lcg(seed) % 100) / 100.0f;
        for (int64_t i = 0; i < n_blk * 32; i++) x[i] = mag * frand(seed);
        if (j % 7 == 3) memset(x, 0, 32 * sizeof(float)); /* a zero block */
        if (j % 5 == 1) x[n_blk * 32 - 1] = -mag * 4.0f;    /* code -127 */
        assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_0, x, rows + (size_t)j * row_bytes,
                                             n_blk * 32),
                         0);
    }
    return rows;
}

static double f16(uint16_t h)
{
    return (double)tensor_f16_to_f32(h);
}

/* The reference against the formula of the contract, in double. */
static void check_reference(void)
{
    uint32_t seed = 7;
    const int64_t n_q = 3, n_rows = 9, n_blk = 2;
    const size_t row_bytes = 2 * sizeof(block_q8_0);
    uint8_t *k = make_rows(n_rows, n_blk, row_bytes, &seed);
    uint8_t *q = make_rows(n_q, n_blk, row_bytes, &seed);
    const tensor_attn_q8 *ref = tensor_attn_q8_for_level(STRATA_SIMD_SCALAR);
    assert_non_null(ref);
    float scores[3 * 9];
    ref->qk(scores, 9, (const block_q8_0 *)(const void *)q, n_q, k, row_bytes, n_rows, n_blk);
    for (int64_t g = 0; g < n_q; g++) {
        const block_q8_0 *qb = (const block_q8_0 *)(const void *)(q + (size_t)g * row_bytes);
        for (int64_t j = 0; j < n_rows; j++) {
            const block_q8_0 *kb = (const block_q8_0 *)(const void *)(k + (size_t)j * row_bytes);
            double want = 0;
            for (int b = 0; b < n_blk; b++) {
                for (int i = 0; i < 32; i++) {
                    want += f16(qb[b].d) * qb[b].qs[i] * f16(kb[b].d) * kb[b].qs[i];
                }
            }
            assert_true(fabs(scores[g * 9 + j] - want) <= 1e-5 * (1 + fabs(want)));
        }
    }
    float p[3 * 9], acc[3 * 64] = {0};
    for (int i = 0; i < 27; i++) p[i] = (float)(lcg(&seed) % 1000) / 1000.0f;
    ref->pv(acc, 64, p, 9, n_q, k, row_bytes, n_rows, n_blk);
    for (int64_t g = 0; g < n_q; g++) {
        for (int e = 0; e < 64; e++) {
            double want = 0;
            for (int64_t j = 0; j < n_rows; j++) {
                const block_q8_0 *vb =
                    (const block_q8_0 *)(const void *)(k + (size_t)j * row_bytes);
                want += p[g * 9 + j] * f16(vb[e / 32].d) * vb[e / 32].qs[e % 32];
            }
            assert_true(fabs(acc[g * 64 + e] - want) <= 1e-5 * (1 + fabs(want)));
        }
    }
    free(k);
    free(q);
}

static void test_reference_formula(void **state)
{
    (void)state;
    check_reference();
}

/* One shape through one variant and the reference; bit for bit. */
static void check_shape(const tensor_attn_q8 *t, int64_t n_q, int64_t n_rows, int64_t n_blk,
                        size_t pad, uint32_t seed)
{
    const tensor_attn_q8 *ref = tensor_attn_q8_for_level(STRATA_SIMD_SCALAR);
    const size_t row_bytes = (size_t)n_blk * sizeof(block_q8_0) + pad;
    uint8_t *k = make_rows(n_rows, n_blk, row_bytes, &seed);
    uint8_t *v = make_rows(n_rows, n_blk, row_bytes, &seed);
    /* queries packed (n_q, n_blk), as attention quantizes them */
    uint8_t *q = make_rows(n_q, n_blk, (size_t)n_blk * sizeof(block_q8_0), &seed);
    const size_t ld_s = (size_t)n_rows + 3, ld_a = (size_t)n_blk * 32 + 5;
    float *s_ref = calloc((size_t)n_q * ld_s, sizeof(float));
    float *s_got = calloc((size_t)n_q * ld_s, sizeof(float));
    float *p = malloc((size_t)n_q * ld_s * sizeof(float));
    float *a_ref = malloc((size_t)n_q * ld_a * sizeof(float));
    float *a_got = malloc((size_t)n_q * ld_a * sizeof(float));
    for (size_t i = 0; i < (size_t)n_q * ld_s; i++) p[i] = (float)(lcg(&seed) % 4096) / 4096.0f;
    for (size_t i = 0; i < (size_t)n_q * ld_a; i++) a_ref[i] = a_got[i] = frand(&seed);

    ref->qk(s_ref, ld_s, (const block_q8_0 *)(const void *)q, n_q, k, row_bytes, n_rows, n_blk);
    t->qk(s_got, ld_s, (const block_q8_0 *)(const void *)q, n_q, k, row_bytes, n_rows, n_blk);
    ref->pv(a_ref, ld_a, p, ld_s, n_q, v, row_bytes, n_rows, n_blk);
    t->pv(a_got, ld_a, p, ld_s, n_q, v, row_bytes, n_rows, n_blk);
    if (memcmp(s_ref, s_got, (size_t)n_q * ld_s * sizeof(float)) != 0) {
        fail_msg("%s qk differs from scalar (heads %lld, rows %lld, blocks %lld)", t->name,
                 (long long)n_q, (long long)n_rows, (long long)n_blk);
    }
    if (memcmp(a_ref, a_got, (size_t)n_q * ld_a * sizeof(float)) != 0) {
        fail_msg("%s pv differs from scalar (heads %lld, rows %lld, blocks %lld)", t->name,
                 (long long)n_q, (long long)n_rows, (long long)n_blk);
    }
    free(k);
    free(v);
    free(q);
    free(s_ref);
    free(s_got);
    free(p);
    free(a_ref);
    free(a_got);
}

static void test_variants_bit_exact(void **state)
{
    (void)state;
    int n_checked = 0;
    for (int level = STRATA_SIMD_SCALAR; level <= STRATA_SIMD_AVX512; level++) {
        const tensor_attn_q8 *t = tensor_attn_q8_for_level((enum strata_simd_level)level);
        if (t == NULL) continue;
        assert_int_equal(t->level, level);
        uint32_t seed = 100;
        static const int64_t heads[] = {1, 2, 3, 4, 5, 8, 9, 13, 64};
        static const int64_t rows[] = {1, 7, 32};
        static const int64_t blks[] = {1, 2, 4, 8};
        for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
            for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
                for (size_t b = 0; b < sizeof(blks) / sizeof(blks[0]); b++) {
                    check_shape(t, heads[h], rows[r], blks[b], (r % 2) * 6, seed++);
                }
            }
        }
        n_checked++;
        print_message("attn q8_0 %s: bit-identical to scalar\n", t->name);
    }
    /* The machine has AVX2 at least (the project's target): make sure the
     * SIMD code actually ran rather than silently skipping. */
    if (strata_cpu_level_max(strata_cpu_get()) >= STRATA_SIMD_AVX2) assert_true(n_checked >= 2);
    assert_non_null(tensor_attn_q8_get());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_formula),
        cmocka_unit_test(test_variants_bit_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
