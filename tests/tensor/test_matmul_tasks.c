/* tensor_matmul_tasks (matmul_tasks.h): several products in one dispatch.
 *
 *  (a) For packed (x8) and GGUF-layout weights of several types, five
 *      "experts" with 0, 1, 3, 19 and 2 tokens each (odd group counts, so
 *      pairs and lone groups), run as one task list at every level this CPU
 *      has, with 1 and 2 threads: each task's output has the bits of
 *      tensor_matmul_at_level for that matrix and its tokens alone. Packed
 *      matrices also give the scalar level's bits at every level.
 *  (b) tensor_matmul_act_quantize writes the bytes tensor_matmul's own
 *      activation rows have (shown by (a)), and the errors of the API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "base/err.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "tensor/matmul.h"
#include "tensor/matmul_kernels.h"
#include "tensor/matmul_tasks.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_EXP 5
static const int64_t k_tokens[N_EXP] = {0, 1, 3, 19, 2};

typedef struct case_type {
    uint32_t type;
    bool packed;
} case_type;

static const case_type k_cases[] = {
    {STRATA_TYPE_Q4_0, true},  {STRATA_TYPE_Q8_0, true},  {STRATA_TYPE_Q4_K, true},
    {STRATA_TYPE_Q5_K, true},  {STRATA_TYPE_Q6_K, true},  {STRATA_TYPE_IQ4_NL, true},
    {STRATA_TYPE_IQ4_XS, true}, {STRATA_TYPE_F16, true},  {STRATA_TYPE_Q4_0, false},
    {STRATA_TYPE_Q4_K, false}, {STRATA_TYPE_Q6_K, false}, {STRATA_TYPE_Q5_0, false},
    {STRATA_TYPE_F32, false},  {STRATA_TYPE_Q8_0, false},
};

static int n_levels(void)
{
    return (int)strata_cpu_level_max(strata_cpu_get()) + 1;
}

static int64_t block_elems(uint32_t type)
{
    return (int64_t)strata_type_get(type)->block_elems;
}

static void *random_matrix(uint32_t type, int64_t n_rows, int64_t n, strata_rng *rng)
{
    size_t rb = strata_type_row_bytes(type, n);
    char *w = malloc(rb * (size_t)n_rows);
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_non_null(w);
    assert_non_null(f);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)strata_rng_normal(rng);
        assert_int_equal(tensor_quantize_row(type, f, w + (size_t)r * rb, n), 0);
    }
    free(f);
    return w;
}

static void check_case(const case_type *cs, strata_pool *pool2, uint64_t seed)
{
    const int64_t n_rows = 40, n = 3 * (block_elems(cs->type) > 32 ? block_elems(cs->type) : 64);
    const uint32_t type = cs->packed ? cs->type | TENSOR_PACKED : cs->type;
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    void *w[N_EXP];
    float *x[N_EXP], *want[N_EXP], *got[N_EXP], *scalar[N_EXP];
    void *xq[N_EXP];
    const size_t xs = tensor_matmul_act_row_bytes(type, n);
    assert_true(xs > 0);
    int64_t max_tok = 1;
    for (int e = 0; e < N_EXP; e++) max_tok = k_tokens[e] > max_tok ? k_tokens[e] : max_tok;
    void *scratch = malloc(tensor_matmul_scratch_bytes(type, n, max_tok) + 64);
    assert_non_null(scratch);
    for (int e = 0; e < N_EXP; e++) {
        void *gguf_w = random_matrix(cs->type, n_rows, n, &rng);
        if (cs->packed) {
            w[e] = malloc(tensor_pack_bytes(cs->type, n_rows, n));
            assert_non_null(w[e]);
            assert_int_equal(tensor_pack(cs->type, gguf_w, n_rows, n, w[e]), 0);
            free(gguf_w);
        } else {
            w[e] = gguf_w;
        }
        const size_t nt = (size_t)(k_tokens[e] > 0 ? k_tokens[e] : 1);
        x[e] = malloc(sizeof(float) * (size_t)n * nt);
        xq[e] = malloc(xs * nt);
        want[e] = malloc(sizeof(float) * (size_t)n_rows * nt);
        got[e] = malloc(sizeof(float) * (size_t)n_rows * nt);
        scalar[e] = malloc(sizeof(float) * (size_t)n_rows * nt);
        assert_non_null(x[e]);
        assert_non_null(xq[e]);
        assert_non_null(want[e]);
        assert_non_null(got[e]);
        assert_non_null(scalar[e]);
        for (size_t i = 0; i < (size_t)n * nt; i++) x[e][i] = (float)strata_rng_normal(&rng);
    }
    for (int l = STRATA_SIMD_SCALAR; l < n_levels(); l++) {
        const enum strata_simd_level level = (enum strata_simd_level)l;
        tensor_mm_task tasks[N_EXP];
        for (int e = 0; e < N_EXP; e++) {
            assert_int_equal(tensor_matmul_at_level(NULL, level, type, w[e], n_rows, n, x[e],
                                                    k_tokens[e], want[e], scratch),
                             0);
            for (int64_t t = 0; t < k_tokens[e]; t++)
                assert_int_equal(tensor_matmul_act_quantize_at_level(
                                     level, type, x[e] + t * n, (char *)xq[e] + (size_t)t * xs, n),
                                 0);
            tasks[e] = (tensor_mm_task){.type = type, .w = w[e], .n_rows = n_rows, .n_cols = n,
                                        .xq = xq[e], .n_tok = k_tokens[e], .y = got[e]};
            if (l == STRATA_SIMD_SCALAR)
                memcpy(scalar[e], want[e], sizeof(float) * (size_t)(n_rows * k_tokens[e]));
        }
        for (int th = 0; th < 2; th++) {
            for (int e = 0; e < N_EXP; e++)
                memset(got[e], 0xff, sizeof(float) * (size_t)(n_rows * k_tokens[e]));
            assert_int_equal(tensor_matmul_tasks_at_level(th ? pool2 : NULL, level, tasks, N_EXP),
                             0);
            for (int e = 0; e < N_EXP; e++) {
                const size_t bytes = sizeof(float) * (size_t)(n_rows * k_tokens[e]);
                if (memcmp(got[e], want[e], bytes) != 0)
                    fail_msg("%s%s level %s, %d thread(s): task %d (%lld tokens) differs from "
                             "tensor_matmul",
                             strata_type_name(cs->type), cs->packed ? " x8" : "",
                             strata_simd_level_name(level), th + 1, e, (long long)k_tokens[e]);
                if (cs->packed && memcmp(got[e], scalar[e], bytes) != 0)
                    fail_msg("%s x8 level %s: task %d differs from the scalar level",
                             strata_type_name(cs->type), strata_simd_level_name(level), e);
            }
        }
    }
    for (int e = 0; e < N_EXP; e++) {
        free(w[e]);
        free(x[e]);
        free(xq[e]);
        free(want[e]);
        free(got[e]);
        free(scalar[e]);
    }
    free(scratch);
}

static void test_tasks_match_matmul(void **state)
{
    (void)state;
    strata_pool *pool2 = strata_pool_new(2);
    assert_non_null(pool2);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        check_case(&k_cases[i], pool2, 300 + i);
    strata_pool_free(pool2);
}

static void test_api(void **state)
{
    (void)state;
    float x[64] = {0}, y[8];
    char xq[512], w[1024] = {0};
    /* no tasks: nothing to do */
    assert_int_equal(tensor_matmul_tasks(NULL, NULL, 0), 0);
    assert_int_equal(tensor_matmul_tasks(NULL, NULL, 1), STRATA_EINVAL);
    /* rows of 48 are not whole Q4_0 blocks */
    assert_int_equal(tensor_matmul_act_row_bytes(STRATA_TYPE_Q4_0, 48), 0);
    assert_int_equal(tensor_matmul_act_row_bytes(STRATA_TYPE_Q4_0, 64),
                     strata_type_row_bytes(STRATA_TYPE_Q8_0, 64));
    assert_int_equal(tensor_matmul_act_row_bytes(STRATA_TYPE_F32, 5), 5 * sizeof(float));
    assert_int_equal(tensor_matmul_act_quantize(STRATA_TYPE_Q4_0, x, xq, 48), STRATA_EINVAL);
    assert_int_equal(tensor_matmul_act_quantize(STRATA_TYPE_Q4_0, NULL, xq, 64), STRATA_EINVAL);
    assert_int_equal(tensor_matmul_act_quantize(STRATA_TYPE_Q4_0, x, xq, 64), 0);
    tensor_mm_task t = {.type = STRATA_TYPE_Q4_0, .w = w, .n_rows = 8, .n_cols = 64, .xq = xq,
                        .n_tok = 1, .y = y};
    assert_int_equal(tensor_matmul_tasks(NULL, &t, 1), 0);
    t.y = NULL;
    assert_int_equal(tensor_matmul_tasks(NULL, &t, 1), STRATA_EINVAL);
    t.y = y;
    t.n_cols = 48;
    assert_int_equal(tensor_matmul_tasks(NULL, &t, 1), STRATA_EINVAL);
    t.n_cols = 64;
    t.type = 9999;
    assert_int_equal(tensor_matmul_tasks(NULL, &t, 1), STRATA_EUNSUPPORTED);
    /* an empty task needs no pointers */
    tensor_mm_task empty = {.type = STRATA_TYPE_Q4_0, .n_rows = 8, .n_cols = 64};
    assert_int_equal(tensor_matmul_tasks(NULL, &empty, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api),
        cmocka_unit_test(test_tasks_match_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
