/* tensor_pack_row: every row of a packed matrix comes back as the bytes of
 * its source row, for each type with an x8 layout; anything else is
 * refused and leaves dst alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/rng.h"
#include "gguf/types.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(uint32_t type, int64_t n_rows, int64_t n_cols, uint64_t seed)
{
    const size_t rb = strata_type_row_bytes(type, n_cols);
    float *x = malloc((size_t)n_cols * sizeof(float));
    uint8_t *src = aligned_alloc(64, (rb * (size_t)n_rows + 63) / 64 * 64);
    size_t pb = tensor_pack_bytes(type, n_rows, n_cols);
    assert_true(pb > 0);
    uint8_t *packed = aligned_alloc(64, (pb + 63) / 64 * 64);
    uint8_t *row = malloc(rb);
    assert_non_null(x), assert_non_null(src), assert_non_null(packed), assert_non_null(row);
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    for (int64_t r = 0; r < n_rows; r++) {
        /* rows of different scales and some with an offset, so the K-quant
         * mins and 6-bit scales take many values */
        float scale = 0.01f + 3.0f * (float)strata_rng_uniform(&rng), off = (r % 3) * 0.5f;
        for (int64_t i = 0; i < n_cols; i++)
            x[i] = off + scale * (2.0f * (float)strata_rng_uniform(&rng) - 1.0f);
        if (tensor_get_quant(type) != NULL)
            tensor_get_quant(type)(x, src + (size_t)r * rb, n_cols);
        else /* no quantizer (MXFP4): random blocks, every byte pattern valid */
            for (size_t i = 0; i < rb; i++) src[(size_t)r * rb + i] = (uint8_t)strata_rng_next(&rng);
    }
    assert_int_equal(tensor_pack(type, src, n_rows, n_cols, packed), 0);
    for (int64_t r = 0; r < n_rows; r++) {
        memset(row, 0xAA, rb);
        assert_true(tensor_pack_row(type, packed, n_rows, n_cols, r, row));
        if (memcmp(row, src + (size_t)r * rb, rb) != 0)
            fail_msg("%s: row %lld of %lld differs from its source", strata_type_name(type),
                     (long long)r, (long long)n_rows);
    }
    /* out of range: refused, dst untouched */
    memset(row, 0x55, rb);
    assert_false(tensor_pack_row(type, packed, n_rows, n_cols, n_rows, row));
    assert_false(tensor_pack_row(type, packed, n_rows, n_cols, -1, row));
    for (size_t i = 0; i < rb; i++) assert_int_equal(row[i], 0x55);
    free(x), free(src), free(packed), free(row);
}

static void test_rows_come_back(void **state)
{
    (void)state;
    roundtrip(STRATA_TYPE_Q4_0, 24, 96, 1);
    roundtrip(STRATA_TYPE_Q4_0, 8, 2048, 2);
    roundtrip(STRATA_TYPE_Q5_0, 16, 1152, 19);
    roundtrip(STRATA_TYPE_Q5_0, 8, 96, 20);
    roundtrip(STRATA_TYPE_Q4_1, 16, 96, 21);
    roundtrip(STRATA_TYPE_Q5_1, 16, 1152, 22);
    roundtrip(STRATA_TYPE_Q5_1, 8, 64, 23);
    roundtrip(STRATA_TYPE_Q8_0, 16, 160, 3);
    roundtrip(STRATA_TYPE_Q8_0, 8, 2048, 4);
    roundtrip(STRATA_TYPE_Q2_K, 16, 256, 24);
    roundtrip(STRATA_TYPE_Q2_K, 8, 2048, 25);
    roundtrip(STRATA_TYPE_Q4_K, 16, 256, 5);
    roundtrip(STRATA_TYPE_Q4_K, 8, 2048, 6);
    roundtrip(STRATA_TYPE_Q6_K, 16, 256, 7);
    roundtrip(STRATA_TYPE_Q6_K, 8, 2048, 8);
    roundtrip(STRATA_TYPE_Q5_K, 16, 256, 9);
    roundtrip(STRATA_TYPE_Q5_K, 8, 2048, 10);
    roundtrip(STRATA_TYPE_IQ4_NL, 16, 96, 11);
    roundtrip(STRATA_TYPE_IQ4_NL, 8, 2048, 12);
    roundtrip(STRATA_TYPE_IQ4_XS, 16, 256, 13);
    roundtrip(STRATA_TYPE_IQ4_XS, 8, 2048, 14);
    roundtrip(STRATA_TYPE_MXFP4, 16, 96, 17);
    roundtrip(STRATA_TYPE_MXFP4, 8, 2048, 18);
    roundtrip(STRATA_TYPE_F16, 16, 40, 15);
    roundtrip(STRATA_TYPE_BF16, 8, 2048, 16);
}

static void test_refuses_what_has_no_layout(void **state)
{
    (void)state;
    uint8_t packed[64] = {0}, dst[64];
    memset(dst, 0x11, sizeof(dst));
    assert_false(tensor_pack_row(STRATA_TYPE_F32, packed, 8, 32, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_Q4_0, packed, 7, 32, 0, dst)); /* rows not x8 */
    assert_false(tensor_pack_row(STRATA_TYPE_Q8_0, packed, 8, 33, 0, dst)); /* partial block */
    /* the IQ layouts (and Q3_K's, which is one) keep values, not the
     * file's bits: no unpacker */
    assert_false(tensor_pack_row(STRATA_TYPE_Q3_K, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ3_S, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ3_XXS, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ2_XXS, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ1_S, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ2_XS, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ2_S, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_IQ1_M, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_TQ1_0, packed, 8, 256, 0, dst));
    assert_false(tensor_pack_row(STRATA_TYPE_TQ2_0, packed, 8, 256, 0, dst));
    for (size_t i = 0; i < sizeof(dst); i++) assert_int_equal(dst[i], 0x11);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_come_back),
        cmocka_unit_test(test_refuses_what_has_no_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
