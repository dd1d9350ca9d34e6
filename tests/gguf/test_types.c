/* Tests of the GGML type table: the block sizes and byte counts the GGUF
 * format fixes, name lookups, and row sizes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/types.h"

static void test_block_layouts(void **state)
{
    (void)state;
    /* (type, elements per block, bytes per block) as the format defines. */
    static const struct { uint32_t t; uint32_t elems, bytes; } want[] = {
        {STRATA_TYPE_F32, 1, 4},       {STRATA_TYPE_F16, 1, 2},      {STRATA_TYPE_BF16, 1, 2},
        {STRATA_TYPE_Q4_0, 32, 18},    {STRATA_TYPE_Q4_1, 32, 20},   {STRATA_TYPE_Q5_0, 32, 22},
        {STRATA_TYPE_Q5_1, 32, 24},    {STRATA_TYPE_Q8_0, 32, 34},   {STRATA_TYPE_Q8_1, 32, 36},
        {STRATA_TYPE_Q2_K, 256, 84},   {STRATA_TYPE_Q3_K, 256, 110}, {STRATA_TYPE_Q4_K, 256, 144},
        {STRATA_TYPE_Q5_K, 256, 176},  {STRATA_TYPE_Q6_K, 256, 210}, {STRATA_TYPE_Q8_K, 256, 292},
        {STRATA_TYPE_IQ2_XXS, 256, 66}, {STRATA_TYPE_IQ2_XS, 256, 74}, {STRATA_TYPE_IQ3_XXS, 256, 98},
        {STRATA_TYPE_IQ1_S, 256, 50},  {STRATA_TYPE_IQ4_NL, 32, 18}, {STRATA_TYPE_IQ3_S, 256, 110},
        {STRATA_TYPE_IQ2_S, 256, 82},  {STRATA_TYPE_IQ4_XS, 256, 136}, {STRATA_TYPE_I8, 1, 1},
        {STRATA_TYPE_I16, 1, 2},       {STRATA_TYPE_I32, 1, 4},      {STRATA_TYPE_I64, 1, 8},
        {STRATA_TYPE_F64, 1, 8},       {STRATA_TYPE_IQ1_M, 256, 56}, {STRATA_TYPE_TQ1_0, 256, 54},
        {STRATA_TYPE_TQ2_0, 256, 66},  {STRATA_TYPE_MXFP4, 32, 17},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const strata_type_info *ti = strata_type_get(want[i].t);
        assert_non_null(ti);
        assert_int_equal(ti->block_elems, want[i].elems);
        assert_int_equal(ti->block_bytes, want[i].bytes);
        assert_true(strata_type_usable(want[i].t));
    }
}

static void test_retired_and_unknown_ids(void **state)
{
    (void)state;
    static const uint32_t retired[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof(retired) / sizeof(retired[0]); i++) {
        assert_non_null(strata_type_get(retired[i])); /* named, so a file can be described */
        assert_false(strata_type_usable(retired[i]));
    }
    assert_null(strata_type_get(STRATA_TYPE_COUNT));
    assert_null(strata_type_get(UINT32_MAX));
    assert_string_equal(strata_type_name(1000), "?");
    assert_string_equal(strata_type_name(STRATA_TYPE_Q4_K), "Q4_K");
}

static void test_names_and_row_bytes(void **state)
{
    (void)state;
    assert_int_equal(strata_type_from_name("q4_k"), STRATA_TYPE_Q4_K);
    assert_int_equal(strata_type_from_name("IQ4_XS"), STRATA_TYPE_IQ4_XS);
    assert_int_equal(strata_type_from_name("Q4_K_M"), -1); /* a file type, not a tensor type */
    assert_int_equal(strata_type_row_bytes(STRATA_TYPE_Q4_K, 4096), 16 * 144);
    assert_int_equal(strata_type_row_bytes(STRATA_TYPE_F16, 7), 14);
    assert_int_equal(strata_type_row_bytes(STRATA_TYPE_Q8_0, 33), 0); /* not whole blocks */
    assert_int_equal(strata_type_row_bytes(STRATA_TYPE_Q4_2, 32), 0); /* retired */
    assert_int_equal(strata_type_row_bytes(STRATA_TYPE_F32, -1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_layouts),
        cmocka_unit_test(test_retired_and_unknown_ids),
        cmocka_unit_test(test_names_and_row_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
