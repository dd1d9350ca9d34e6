/* The float attention kernels (tensor/attn_f16.h): every SIMD variant this
 * machine runs gives the scalar reference's bits, and the reference's qk
 * gives tensor_dot_f32's bits times the scale, over row lengths that are
 * and are not multiples of 8, 16 and 32 (the lane tails), key counts below,
 * at and past the groups of eight, rows with padding between them, query
 * counts that cover the AVX-512 pairs and their tail, and weights of mixed
 * size (rounding differs visibly if a product and a sum were fused). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "tensor/attn_f16.h"
#include "tensor/fp16.h"
#include "tensor/ops.h"

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

static float *rand_floats(size_t n, float mag, uint32_t *seed)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        /* magnitudes spread over a few powers of two, some exact zeros */
        float e = (float)(lcg(seed) % 7) - 3.0f;
        x[i] = lcg(seed) % 13 == 0 ? 0.0f : mag * frand(seed) * ldexpf(1.0f, (int)e);
    }
    return x;
}

static const int64_t g_lens[] = {1, 3, 8, 15, 16, 31, 32, 33, 40, 64, 72, 96, 100, 128, 200, 256};

static void check_widen(void **state)
{
    (void)state;
    const tensor_attn_f16 *ref = tensor_attn_f16_for_level(STRATA_SIMD_SCALAR);
    uint32_t seed = 11;
    uint16_t src[300];
    for (int i = 0; i < 300; i++) {
        src[i] = (uint16_t)lcg(&seed);
        /* NaNs quiet, as tensor_f32_to_f16 writes every cached row (F16C
         * would quiet a signalling one, the bit copy would not) */
        if ((src[i] & 0x7c00u) == 0x7c00u && (src[i] & 0x3ffu) != 0) src[i] |= 0x200u;
    }
    /* a few special values: +-0, +-inf, a NaN, subnormals */
    src[0] = 0x0000, src[1] = 0x8000, src[2] = 0x7c00, src[3] = 0xfc00, src[4] = 0x7e01,
    src[5] = 0x0001, src[6] = 0x83ff;
    for (int level = STRATA_SIMD_SCALAR; level <= STRATA_SIMD_AVX512; level++) {
        const tensor_attn_f16 *k = tensor_attn_f16_for_level((enum strata_simd_level)level);
        if (k == NULL) continue;
        for (int64_t n = 0; n <= 300; n += 7) {
            float a[300], b[300];
            memset(a, 0x5a, sizeof a);
            memset(b, 0x5a, sizeof b);
            ref->widen(a, src, n);
            k->widen(b, src, n);
            if (memcmp(a, b, sizeof a) != 0) fail_msg("widen %s n=%lld differs", k->name, (long long)n);
        }
    }
}

static void check_qk(void **state)
{
    (void)state;
    const tensor_attn_f16 *ref = tensor_attn_f16_for_level(STRATA_SIMD_SCALAR);
    uint32_t seed = 5;
    const float scale = 0.125f * 1.1f;
    for (size_t il = 0; il < sizeof g_lens / sizeof g_lens[0]; il++) {
        const int64_t n = g_lens[il];
        const size_t ld = (size_t)n + (size_t)(il % 3) * 5; /* padding between rows */
        const int64_t max_rows = 37;
        float *q = rand_floats((size_t)n, 2.0f, &seed);
        float *k = rand_floats(ld * (size_t)max_rows, 2.0f, &seed);
        for (int64_t n_rows = 0; n_rows <= max_rows; n_rows += (n_rows < 17 ? 1 : 5)) {
            float want[40], got[40];
            /* the contract: tensor_dot_f32 times the scale */
            for (int64_t j = 0; j < n_rows; j++)
                want[j] = tensor_dot_f32(q, k + (size_t)j * ld, n) * scale;
            for (int level = STRATA_SIMD_SCALAR; level <= STRATA_SIMD_AVX512; level++) {
                const tensor_attn_f16 *t = tensor_attn_f16_for_level((enum strata_simd_level)level);
                if (t == NULL) continue;
                memset(got, 0x5a, sizeof got);
                t->qk(got, q, k, ld, n_rows, n, scale);
                if (memcmp(want, got, (size_t)n_rows * sizeof(float)) != 0)
                    fail_msg("qk %s n=%lld rows=%lld differs from tensor_dot_f32", t->name,
                             (long long)n, (long long)n_rows);
                /* nothing past n_rows is written */
                for (int64_t j = n_rows; j < 40; j++) {
                    uint32_t u;
                    memcpy(&u, &got[j], 4);
                    assert_int_equal(u, 0x5a5a5a5au);
                }
            }
        }
        (void)ref;
        free(q);
        free(k);
    }
}

static void check_pv(void **state)
{
    (void)state;
    const tensor_attn_f16 *ref = tensor_attn_f16_for_level(STRATA_SIMD_SCALAR);
    uint32_t seed = 9;
    for (size_t il = 0; il < sizeof g_lens / sizeof g_lens[0]; il++) {
        const int64_t n = g_lens[il];
        const size_t ld_v = (size_t)n + (size_t)(il % 2) * 3;
        const size_t ld_acc = (size_t)n + 4, ld_p = 40;
        const int64_t max_q = 5, max_rows = 33;
        float *v = rand_floats(ld_v * (size_t)max_rows, 3.0f, &seed);
        float *p = rand_floats(ld_p * (size_t)max_q, 1.0f, &seed);
        float *acc0 = rand_floats(ld_acc * (size_t)max_q, 10.0f, &seed);
        float c[5];
        for (int g = 0; g < 5; g++) c[g] = 0.25f + 0.7f * fabsf(frand(&seed));
        c[2] = 0.0f; /* the first block's rescale */
        const size_t bytes = ld_acc * (size_t)max_q * sizeof(float);
        float *want = malloc(bytes), *got = malloc(bytes);
        for (int64_t n_q = 1; n_q <= max_q; n_q++) {
            for (int64_t n_rows = 0; n_rows <= max_rows; n_rows += 4) {
                memcpy(want, acc0, bytes);
                ref->pv(want, ld_acc, c, p, ld_p, n_q, v, ld_v, n_rows, n);
                /* the reference's steps, written out once more */
                for (int64_t g = 0; g < n_q; g++) {
                    for (int64_t e = 0; e < n; e++) {
                        volatile float a = acc0[(size_t)g * ld_acc + (size_t)e];
                        a = a * c[g];
                        for (int64_t j = 0; j < n_rows; j++) {
                            volatile float pr = p[(size_t)g * ld_p + (size_t)j] * v[(size_t)j * ld_v + (size_t)e];
                            a = a + pr;
                        }
                        float w = want[(size_t)g * ld_acc + (size_t)e], aa = a;
                        if (memcmp(&w, &aa, 4) != 0) fail_msg("pv scalar differs from its contract");
                    }
                }
                for (int level = STRATA_SIMD_AVX2; level <= STRATA_SIMD_AVX512; level++) {
                    const tensor_attn_f16 *t = tensor_attn_f16_for_level((enum strata_simd_level)level);
                    if (t == NULL) continue;
                    memcpy(got, acc0, bytes);
                    t->pv(got, ld_acc, c, p, ld_p, n_q, v, ld_v, n_rows, n);
                    /* padding between the accumulators is left alone too */
                    if (memcmp(want, got, bytes) != 0)
                        fail_msg("pv %s n=%lld n_q=%lld rows=%lld differs", t->name, (long long)n,
                                 (long long)n_q, (long long)n_rows);
                }
            }
        }
        free(v);
        free(p);
        free(acc0);
        free(want);
        free(got);
    }
}

/* The table of each level: what this machine runs is there. */
static void check_tables(void **state)
{
    (void)state;
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    for (int level = STRATA_SIMD_SCALAR; level <= (int)max; level++) {
        const tensor_attn_f16 *t = tensor_attn_f16_for_level((enum strata_simd_level)level);
        assert_non_null(t);
        assert_int_equal(t->level, level);
    }
    assert_non_null(tensor_attn_f16_get());
    assert_true(tensor_attn_f16_get()->level <= strata_cpu_level());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(check_tables),
        cmocka_unit_test(check_widen),
        cmocka_unit_test(check_qk),
        cmocka_unit_test(check_pv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
