/* Quantize/dequantize round trips and the API's contract, without the
 * reference data (test_quant_golden.c checks against llama.cpp's files):
 *  - the block structs have the type table's sizes, and the API refuses
 *    what it must (unknown types, partial blocks, NULL);
 *  - hand-made blocks decode to the values their layout defines (Q8_1 and
 *    Q8_K have no golden file; a few others pin the bit order);
 *  - Gaussian rows round-trip within a per-type error, and adversarial rows
 *    (zeros, one huge outlier, equal values, alternating +-max, 1e-30
 *    values, values near the f16 maximum, values beyond it) produce no NaN
 *    or Inf and the errors each case allows;
 *  - the searched scales beat the plain max-abs / min-max rules;
 *  - quantize(dequantize(quantize(x))) gives back the same codes;
 *  - the activation quantizers' extra fields (Q8_1's s, Q8_K's sums). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/rng.h"
#include "quant_testutil.h"
#include "tensor/blocks.h"
#include "tensor/blocks_iq.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every type with a quantizer and a dequantizer here. */
static const uint32_t k_types[] = {
    STRATA_TYPE_F32,  STRATA_TYPE_F16,  STRATA_TYPE_BF16,   STRATA_TYPE_Q4_0,   STRATA_TYPE_Q4_1,
    STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0,   STRATA_TYPE_Q8_1,   STRATA_TYPE_Q2_K,
    STRATA_TYPE_Q3_K, STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K,   STRATA_TYPE_Q6_K,   STRATA_TYPE_Q8_K,
    STRATA_TYPE_IQ4_NL, STRATA_TYPE_IQ4_XS, STRATA_TYPE_MXFP4,
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

#define ROW 512 /* elements per test row: two K super-blocks, 16 blocks of 32 */

/* Round trip of n elements through `type`; returns the error and leaves
 * the decoded values in y. */
static qt_err round_trip(uint32_t type, const float *x, float *y, int64_t n)
{
    void *q = malloc(qt_row_bytes(type, n) + 1);
    assert_non_null(q);
    assert_int_equal(tensor_quantize_row(type, x, q, n), 0);
    assert_int_equal(tensor_dequantize_row(type, q, y, n), 0);
    free(q);
    qt_err e = {0};
    qt_err_add(&e, x, y, n);
    return e;
}

static void fill_gaussian(strata_rng *r, float *x, int64_t n, double sigma)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(sigma * strata_rng_normal(r));
}

/* --- layout and contract --- */

static void test_block_sizes_match_type_table(void **state)
{
    (void)state;
    static const struct {
        uint32_t type;
        size_t size, elems;
    } blocks[] = {
        {STRATA_TYPE_Q4_0, sizeof(block_q4_0), TENSOR_QK},
        {STRATA_TYPE_Q4_1, sizeof(block_q4_1), TENSOR_QK},
        {STRATA_TYPE_Q5_0, sizeof(block_q5_0), TENSOR_QK},
        {STRATA_TYPE_Q5_1, sizeof(block_q5_1), TENSOR_QK},
        {STRATA_TYPE_Q8_0, sizeof(block_q8_0), TENSOR_QK},
        {STRATA_TYPE_Q8_1, sizeof(block_q8_1), TENSOR_QK},
        {STRATA_TYPE_Q2_K, sizeof(block_q2_k), TENSOR_QK_K},
        {STRATA_TYPE_Q3_K, sizeof(block_q3_k), TENSOR_QK_K},
        {STRATA_TYPE_Q4_K, sizeof(block_q4_k), TENSOR_QK_K},
        {STRATA_TYPE_Q5_K, sizeof(block_q5_k), TENSOR_QK_K},
        {STRATA_TYPE_Q6_K, sizeof(block_q6_k), TENSOR_QK_K},
        {STRATA_TYPE_Q8_K, sizeof(block_q8_k), TENSOR_QK_K},
        {STRATA_TYPE_IQ4_NL, sizeof(block_iq4_nl), TENSOR_QK},
        {STRATA_TYPE_IQ4_XS, sizeof(block_iq4_xs), TENSOR_QK_K},
        {STRATA_TYPE_TQ1_0, sizeof(block_tq1_0), TENSOR_QK_K},
        {STRATA_TYPE_TQ2_0, sizeof(block_tq2_0), TENSOR_QK_K},
        {STRATA_TYPE_MXFP4, sizeof(block_mxfp4), TENSOR_QK},
        {STRATA_TYPE_IQ2_XXS, sizeof(block_iq2_xxs), TENSOR_QK_K},
        {STRATA_TYPE_IQ2_XS, sizeof(block_iq2_xs), TENSOR_QK_K},
        {STRATA_TYPE_IQ2_S, sizeof(block_iq2_s), TENSOR_QK_K},
        {STRATA_TYPE_IQ3_XXS, sizeof(block_iq3_xxs), TENSOR_QK_K},
        {STRATA_TYPE_IQ3_S, sizeof(block_iq3_s), TENSOR_QK_K},
        {STRATA_TYPE_IQ1_S, sizeof(block_iq1_s), TENSOR_QK_K},
        {STRATA_TYPE_IQ1_M, sizeof(block_iq1_m), TENSOR_QK_K},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        const strata_type_info *ti = strata_type_get(blocks[i].type);
        assert_non_null(ti);
        assert_int_equal(ti->block_bytes, blocks[i].size);
        assert_int_equal(ti->block_elems, blocks[i].elems);
    }
}

static void test_api_contract(void **state)
{
    (void)state;
    float x[TENSOR_QK_K] = {0}, y[TENSOR_QK_K];
    uint8_t q[2048];
    for (size_t t = 0; t < N_TYPES; t++)
        assert_true(tensor_type_supported(k_types[t]));
    /* types this build cannot convert: refused, never guessed */
    static const uint32_t unsupported[] = {STRATA_TYPE_I8,       STRATA_TYPE_Q4_2,
                                           STRATA_TYPE_Q4_0_4_4, STRATA_TYPE_COUNT,
                                           0xffffffffu};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        assert_false(tensor_type_supported(unsupported[i]));
        assert_int_equal(tensor_quantize_row(unsupported[i], x, q, 32), STRATA_EUNSUPPORTED);
        assert_int_equal(tensor_dequantize_row(unsupported[i], q, y, 32), STRATA_EUNSUPPORTED);
        assert_null(tensor_get_quant(unsupported[i]));
        assert_null(tensor_get_dequant(unsupported[i]));
    }
    /* decode-only types: decoded, never encoded */
    static const uint32_t decode_only[] = {
        STRATA_TYPE_TQ1_0,   STRATA_TYPE_TQ2_0, STRATA_TYPE_IQ2_XXS,
        STRATA_TYPE_IQ2_XS,  STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ3_XXS, STRATA_TYPE_IQ3_S,
        STRATA_TYPE_IQ1_S,   STRATA_TYPE_IQ1_M};
    memset(q, 0, sizeof q);
    for (size_t i = 0; i < sizeof decode_only / sizeof decode_only[0]; i++) {
        assert_false(tensor_type_supported(decode_only[i]));
        assert_int_equal(tensor_quantize_row(decode_only[i], x, q, TENSOR_QK_K), STRATA_EUNSUPPORTED);
        assert_null(tensor_get_quant(decode_only[i]));
        assert_int_equal(tensor_dequantize_row(decode_only[i], q, y, TENSOR_QK_K), 0);
        assert_int_equal(tensor_dequantize_row(decode_only[i], q, y, 31), STRATA_EINVAL);
    }
    /* partial blocks, negative counts, NULL with work to do */
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q4_0, x, q, 31), STRATA_EINVAL);
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q4_K, x, q, 32), STRATA_EINVAL);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q6_K, q, y, 128), STRATA_EINVAL);
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_0, x, q, -32), STRATA_EINVAL);
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_0, NULL, q, 32), STRATA_EINVAL);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q8_0, q, NULL, 32), STRATA_EINVAL);
    /* nothing to do is fine, even with NULL */
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_0, NULL, NULL, 0), 0);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_F16, NULL, NULL, 0), 0);
    /* F16 rows of any length */
    assert_int_equal(tensor_quantize_row(STRATA_TYPE_F16, x, q, 7), 0);
}

/* --- hand-made blocks --- */

static void test_decode_hand_made_blocks(void **state)
{
    (void)state;
    float y[TENSOR_QK_K];

    /* Q4_0: d = 0.5; element j (< 16) is the low nibble of qs[j], element
     * j + 16 the high nibble: codes j and 15 - j */
    block_q4_0 b40;
    b40.d = tensor_f32_to_f16(0.5f);
    for (int j = 0; j < 16; j++)
        b40.qs[j] = (uint8_t)(j | (15 - j) << 4);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q4_0, &b40, y, 32), 0);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.5f * (float)(j - 8));
        assert_true(y[j + 16] == 0.5f * (float)(15 - j - 8));
    }

    /* Q5_0: the high bit of element j is bit j of the little-endian qh */
    block_q5_0 b50;
    b50.d = tensor_f32_to_f16(1.0f);
    memset(b50.qs, 0, sizeof b50.qs);
    memcpy(b50.qh, (const uint8_t[4]){0x01, 0x00, 0x01, 0x80}, 4); /* bits 0, 16, 31 */
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q5_0, &b50, y, 32), 0);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == ((j == 0 || j == 16 || j == 31) ? 0.0f : -16.0f));

    /* Q8_1: w = d * q; s is not needed to decode */
    block_q8_1 b81;
    b81.d = tensor_f32_to_f16(0.25f);
    b81.s = tensor_f32_to_f16(123.0f);
    for (int j = 0; j < 32; j++)
        b81.qs[j] = (int8_t)(j * 8 - 127);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q8_1, &b81, y, 32), 0);
    for (int j = 0; j < 32; j++)
        assert_true(y[j] == 0.25f * (float)(j * 8 - 127));

    /* Q8_K: float d */
    block_q8_k b8k;
    memset(&b8k, 0, sizeof b8k);
    b8k.d = 1.0f / 64;
    for (int i = 0; i < 256; i++)
        b8k.qs[i] = (int8_t)(i - 128);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q8_K, &b8k, y, 256), 0);
    for (int i = 0; i < 256; i++)
        assert_true(y[i] == (float)(i - 128) / 64);

    /* Q4_K: sub-block j has scale j + 1 and min 2j (the packed field puts
     * sub-blocks 4..7 in split bits); all codes 3 -> w = d (j+1) 3 - dmin 2j */
    block_q4_k b4k;
    b4k.d = tensor_f32_to_f16(1.0f);
    b4k.dmin = tensor_f32_to_f16(0.5f);
    memset(b4k.scales, 0, sizeof b4k.scales);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(j + 1 + (j >= 4 ? 40 : 0)); /* >= 16: uses the top bits */
        mn[j] = (uint8_t)(2 * j + (j >= 4 ? 32 : 0));
    }
    /* the format's packing, written out (independently of the encoder) */
    for (int j = 0; j < 4; j++) {
        b4k.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b4k.scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        b4k.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    memset(b4k.qs, 0x33, sizeof b4k.qs);
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q4_K, &b4k, y, 256), 0);
    for (int i = 0; i < 256; i++) {
        int j = i / 32;
        assert_true(y[i] == 1.0f * (float)(sc[j] * 3) - 0.5f * (float)mn[j]);
    }

    /* Q6_K: one element set in each 32-element quarter of the first half,
     * the rest at code 32 (zero); scales 1..16 */
    block_q6_k b6k;
    memset(&b6k, 0, sizeof b6k);
    b6k.d = tensor_f32_to_f16(1.0f);
    for (int j = 0; j < 16; j++)
        b6k.scales[j] = (int8_t)(j + 1);
    /* every code 32: low nibbles 0, high bits 2 (binary 10) */
    memset(b6k.qh, 0xaa, sizeof b6k.qh);
    /* element 5 (quarter 0): code 32 + 7 -> low nibble of ql[5] = 7 */
    b6k.ql[5] |= 7;
    /* element 32 + 5 (quarter 1): low nibble of ql[32 + 5] */
    b6k.ql[37] |= 1;
    /* element 64 + 5 (quarter 2): high nibble of ql[5] */
    b6k.ql[5] |= 2 << 4;
    /* element 96 + 5 (quarter 3): high nibble of ql[37], and its top bits
     * (qh[5] bits 6-7) from 10 to 00: code 3 - 32 = -29 */
    b6k.ql[37] |= 3 << 4;
    b6k.qh[5] &= 0x3f;
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_Q6_K, &b6k, y, 256), 0);
    for (int i = 0; i < 256; i++) {
        float want = 0;
        if (i == 5)
            want = 1 * 7;
        else if (i == 37)
            want = 3 * 1;
        else if (i == 69)
            want = 5 * 2;
        else if (i == 101)
            want = 7 * -29;
        if (y[i] != want)
            fail_msg("Q6_K element %d: %g, want %g", i, (double)y[i], (double)want);
    }

    /* IQ4_XS: sub-block j's scale is ls - 32 with ls split over scales_l
     * (low 4 bits) and scales_h (2 bits each); code 8 is the grid value 1,
     * code 0 the value -127 */
    static const int ls[8] = {27, 30, 47, 28, 63, 5, 0, 16};
    block_iq4_xs bxs;
    bxs.d = tensor_f32_to_f16(1.0f);
    bxs.scales_h = 0;
    memset(bxs.scales_l, 0, sizeof bxs.scales_l);
    for (int j = 0; j < 8; j++) {
        bxs.scales_l[j / 2] |= (uint8_t)((ls[j] & 15) << (4 * (j % 2)));
        bxs.scales_h |= (uint16_t)((ls[j] >> 4) << (2 * j));
    }
    memset(bxs.qs, 0x88, sizeof bxs.qs);
    bxs.qs[16 * 3 + 2] = 0x08; /* sub-block 3: element 18 (high nibble) has code 0 */
    assert_int_equal(tensor_dequantize_row(STRATA_TYPE_IQ4_XS, &bxs, y, 256), 0);
    for (int i = 0; i < 256; i++) {
        int v = i == 3 * 32 + 18 ? -127 : 1;
        assert_true(y[i] == (float)(ls[i / 32] - 32) * (float)v);
    }
    assert_int_equal(tensor_iq4nl_values[0], -127);
    assert_int_equal(tensor_iq4nl_values[15], 113);
}

/* --- round trips --- */

/* Bounds on the relative RMS error of Gaussian rows, and of rows with one
 * outlier of 1000 sigma (relative to the whole row, so what counts is how
 * the outlier's block treats its 31 or 255 small neighbours). Measured
 * values in the comments (gauss / outlier); bounds ~1.2x above. IQ4 has no
 * zero level: an outlier's neighbours all land on its smallest level. */
static const struct {
    uint32_t type;
    double gauss, outlier;
} k_rt_bounds[] = {
    {STRATA_TYPE_F32, 0, 0},
    {STRATA_TYPE_F16, 0.00025, 6e-6},      /* 0.000207 / 4.82e-6 */
    {STRATA_TYPE_BF16, 0.0020, 4.5e-5},    /* 0.001657 / 3.61e-5 */
    {STRATA_TYPE_Q4_0, 0.098, 0.0068},     /* 0.081451 / 0.00568 */
    {STRATA_TYPE_Q4_1, 0.084, 0.0068},     /* 0.069964 / 0.00561 */
    {STRATA_TYPE_Q5_0, 0.048, 0.0066},     /* 0.040249 / 0.00547 */
    {STRATA_TYPE_Q5_1, 0.040, 0.0066},     /* 0.033602 / 0.00543 */
    {STRATA_TYPE_Q8_0, 0.0065, 0.0065},    /* 0.005363 / 0.00541 */
    {STRATA_TYPE_Q8_1, 0.0065, 0.0065},    /* 0.005363 / 0.00541 */
    {STRATA_TYPE_Q2_K, 0.32, 0.0196},      /* 0.265386 / 0.0163 */
    {STRATA_TYPE_Q3_K, 0.172, 0.0192},     /* 0.142912 / 0.0160 */
    {STRATA_TYPE_Q4_K, 0.084, 0.011},      /* 0.070028 / 0.00909 */
    {STRATA_TYPE_Q5_K, 0.041, 0.0098},     /* 0.034345 / 0.00814 */
    {STRATA_TYPE_Q6_K, 0.0196, 0.0191},    /* 0.016330 / 0.0159 */
    {STRATA_TYPE_Q8_K, 0.0085, 0.0191},    /* 0.007013 / 0.0159 */
    {STRATA_TYPE_IQ4_NL, 0.088, 0.054},    /* 0.073602 / 0.0447 */
    {STRATA_TYPE_IQ4_XS, 0.089, 0.057},    /* 0.074003 / 0.0471 */
    {STRATA_TYPE_MXFP4, 0.135, 0.030},     /* 0.112351 / 0.0247 */
};

static void test_round_trip_gaussian(void **state)
{
    (void)state;
    const int n_rows = TEST_SANITIZED ? 16 : 64;
    float *x = malloc((size_t)n_rows * ROW * sizeof(float));
    float *y = malloc((size_t)n_rows * ROW * sizeof(float));
    assert_true(x && y);
    strata_rng r;
    strata_rng_seed(&r, 42);
    fill_gaussian(&r, x, (int64_t)n_rows * ROW, 0.05);
    for (size_t t = 0; t < sizeof k_rt_bounds / sizeof k_rt_bounds[0]; t++) {
        uint32_t type = k_rt_bounds[t].type;
        qt_err e = round_trip(type, x, y, (int64_t)n_rows * ROW);
        assert_int_equal(e.n_nonfinite, 0);
        print_message("gaussian %-7s relative RMS error %.6f\n", strata_type_name(type), qt_rel_rms(&e));
        if (qt_rel_rms(&e) > k_rt_bounds[t].gauss)
            fail_msg("%s: relative RMS error %.6f > %.6f", strata_type_name(type), qt_rel_rms(&e),
                     k_rt_bounds[t].gauss);
    }
    free(x);
    free(y);
}

enum adv_kind {
    ADV_ZEROS,
    ADV_OUTLIER,
    ADV_EQUAL,
    ADV_ALTERNATING,
    ADV_ALTERNATING_BIG,
    ADV_TINY,
    ADV_NEAR_F16_MAX,
    ADV_BEYOND_F16,
    ADV_COUNT,
};

static const char *const k_adv_names[ADV_COUNT] = {
    "zeros", "outlier", "equal", "alternating", "alternating 6e4", "tiny 1e-30", "near f16 max",
    "beyond f16",
};

static void make_adv_row(enum adv_kind kind, strata_rng *r, float *x)
{
    switch (kind) {
    case ADV_ZEROS:
        memset(x, 0, ROW * sizeof(float));
        break;
    case ADV_OUTLIER:
        fill_gaussian(r, x, ROW, 1.0);
        x[77] = 1000.0f;
        break;
    case ADV_EQUAL:
        for (int i = 0; i < ROW; i++)
            x[i] = -3.75f;
        break;
    case ADV_ALTERNATING:
        for (int i = 0; i < ROW; i++)
            x[i] = i % 2 ? 1.0f : -1.0f;
        break;
    case ADV_ALTERNATING_BIG:
        for (int i = 0; i < ROW; i++)
            x[i] = i % 2 ? 60000.0f : -60000.0f;
        break;
    case ADV_TINY:
        fill_gaussian(r, x, ROW, 1e-30);
        break;
    case ADV_NEAR_F16_MAX: {
        fill_gaussian(r, x, ROW, 1.0);
        float amax = 0;
        for (int i = 0; i < ROW; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        for (int i = 0; i < ROW; i++)
            x[i] *= 65000.0f / amax;
        break;
    }
    case ADV_BEYOND_F16:
        fill_gaussian(r, x, ROW, 1e6);
        break;
    default:
        break;
    }
}

static void test_round_trip_adversarial(void **state)
{
    (void)state;
    float x[ROW], y[ROW];
    strata_rng r;
    for (size_t t = 0; t < sizeof k_rt_bounds / sizeof k_rt_bounds[0]; t++) {
        uint32_t type = k_rt_bounds[t].type;
        const char *name = strata_type_name(type);
        for (int k = 0; k < ADV_COUNT; k++) {
            strata_rng_seed(&r, 1000 + (uint64_t)k);
            make_adv_row((enum adv_kind)k, &r, x);
            qt_err e = round_trip(type, x, y, ROW);
            double rel = qt_rel_rms(&e);
            print_message("adversarial %-7s %-16s relative RMS %.3g, max abs error %.3g\n", name,
                          k_adv_names[k], rel, e.max_abs_err);
            if (k == ADV_BEYOND_F16 && type == STRATA_TYPE_F16) {
                /* F16 itself has no bigger numbers: infinity is the answer */
                continue;
            }
            if (e.n_nonfinite != 0)
                fail_msg("%s on %s: %lld NaN/Inf outputs", name, k_adv_names[k],
                         (long long)e.n_nonfinite);
            switch (k) {
            case ADV_ZEROS:
                for (int i = 0; i < ROW; i++)
                    assert_true(y[i] == 0.0f);
                break;
            case ADV_EQUAL:
            case ADV_ALTERNATING:
            case ADV_ALTERNATING_BIG:
                /* Two distinct values per block at most: every type
                 * represents them up to its f16 scale's rounding, except
                 * that the IQ4 grid has no pair of opposite levels; the
                 * best pair (69, -65) leaves 3% (0.0298 measured); and
                 * MXFP4's scale is a power of two, so a value falls
                 * between two of its levels (at worst halfway from 4 to
                 * 6, a fifth off; -3.75 becomes -4, 0.0667 measured). */
                if (rel > (type == STRATA_TYPE_MXFP4 ? 0.2
                           : k != ADV_EQUAL && (type == STRATA_TYPE_IQ4_NL || type == STRATA_TYPE_IQ4_XS)
                               ? 0.031
                               : 2e-3))
                    fail_msg("%s on %s: relative RMS error %.3g", name, k_adv_names[k], rel);
                break;
            case ADV_OUTLIER:
                if (rel > k_rt_bounds[t].outlier)
                    fail_msg("%s on %s: relative RMS error %.4g > %.4g", name, k_adv_names[k], rel,
                             k_rt_bounds[t].outlier);
                break;
            case ADV_TINY:
                /* f16 scales cannot hold 1e-32: zeros are the expected
                 * result, anything else must be no further off */
                if (e.max_abs_err > e.max_abs_ref)
                    fail_msg("%s on tiny values: max error %.3g > max value %.3g", name,
                             e.max_abs_err, e.max_abs_ref);
                break;
            case ADV_NEAR_F16_MAX:
                /* scale invariance: no worse than Gaussian rows */
                if (rel > k_rt_bounds[t].gauss * 1.3)
                    fail_msg("%s near the f16 maximum: relative RMS error %.4g", name, rel);
                break;
            default:
                break; /* beyond f16: finite is all that is promised */
            }
        }
    }
}

/* --- the searched scales against the plain rules --- */

/* The max-abs rule for symmetric blocks (the largest magnitude on the
 * most negative level, codes rounded) and min-max for affine ones, written
 * into real blocks so our decoder reads them. */
static void maxabs_block(uint32_t type, const float *x, void *dst)
{
    float amax = 0, vmax = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            vmax = x[j];
        }
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    uint8_t q[32];
    if (type == STRATA_TYPE_Q4_0 || type == STRATA_TYPE_Q5_0) {
        int half = type == STRATA_TYPE_Q4_0 ? 8 : 16;
        uint16_t dh = tensor_f32_to_f16(vmax / (float)-half);
        float d = tensor_f16_to_f32(dh);
        for (int j = 0; j < 32; j++) {
            long c = d != 0 ? lrintf(x[j] / d) + half : half;
            q[j] = (uint8_t)(c < 0 ? 0 : c > 2 * half - 1 ? 2 * half - 1 : c);
        }
        if (type == STRATA_TYPE_Q4_0) {
            block_q4_0 *b = dst;
            b->d = dh;
            for (int j = 0; j < 16; j++)
                b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        } else {
            block_q5_0 *b = dst;
            b->d = dh;
            uint32_t qh = 0;
            for (int j = 0; j < 16; j++)
                b->qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            for (int j = 0; j < 32; j++)
                qh |= (uint32_t)(q[j] >> 4) << j;
            memcpy(b->qh, &qh, 4); /* little-endian host */
        }
    } else if (type == STRATA_TYPE_Q4_1 || type == STRATA_TYPE_Q5_1) {
        int nmax = type == STRATA_TYPE_Q4_1 ? 15 : 31;
        uint16_t dh = tensor_f32_to_f16((hi - lo) / (float)nmax), mh = tensor_f32_to_f16(lo);
        float d = tensor_f16_to_f32(dh), m = tensor_f16_to_f32(mh);
        for (int j = 0; j < 32; j++) {
            long c = d != 0 ? lrintf((x[j] - m) / d) : 0;
            q[j] = (uint8_t)(c < 0 ? 0 : c > nmax ? nmax : c);
        }
        if (type == STRATA_TYPE_Q4_1) {
            block_q4_1 *b = dst;
            b->d = dh;
            b->m = mh;
            for (int j = 0; j < 16; j++)
                b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        } else {
            block_q5_1 *b = dst;
            b->d = dh;
            b->m = mh;
            uint32_t qh = 0;
            for (int j = 0; j < 16; j++)
                b->qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            for (int j = 0; j < 32; j++)
                qh |= (uint32_t)(q[j] >> 4) << j;
            memcpy(b->qh, &qh, 4);
        }
    } else { /* IQ4_NL: largest magnitude on -127, nearest grid level */
        block_iq4_nl *b = dst;
        b->d = tensor_f32_to_f16(vmax / -127.0f);
        float d = tensor_f16_to_f32(b->d);
        for (int j = 0; j < 32; j++) {
            int best = 0;
            for (int k = 1; k < 16; k++)
                if (fabsf(x[j] - d * tensor_iq4nl_values[k]) < fabsf(x[j] - d * tensor_iq4nl_values[best]))
                    best = k;
            q[j] = (uint8_t)best;
        }
        for (int j = 0; j < 16; j++)
            b->qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

static void test_search_beats_plain_rules(void **state)
{
    (void)state;
    static const struct {
        uint32_t type;
        double max_ratio; /* ours / plain over all rows (measured in the comment) */
    } cases[] = {
        {STRATA_TYPE_Q4_0, 0.96},   /* 0.940 */
        {STRATA_TYPE_Q5_0, 0.96},   /* 0.935 */
        {STRATA_TYPE_Q4_1, 0.92},   /* 0.889 */
        {STRATA_TYPE_Q5_1, 0.91},   /* 0.879 */
        {STRATA_TYPE_IQ4_NL, 0.98}, /* 0.957 */
    };
    const int n_blocks = TEST_SANITIZED ? 512 : 4096;
    float *x = malloc((size_t)n_blocks * 32 * sizeof(float));
    assert_non_null(x);
    strata_rng r;
    strata_rng_seed(&r, 7);
    fill_gaussian(&r, x, (int64_t)n_blocks * 32, 1.0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t type = cases[c].type;
        size_t bb = strata_type_get(type)->block_bytes;
        uint8_t ours[32], plain[32];
        float yo[32], yp[32];
        double err_o = 0, err_p = 0;
        int n_worse = 0;
        for (int b = 0; b < n_blocks; b++) {
            const float *xb = x + 32 * b;
            assert_int_equal(tensor_quantize_row(type, xb, ours, 32), 0);
            maxabs_block(type, xb, plain);
            assert_int_equal(tensor_dequantize_row(type, ours, yo, 32), 0);
            assert_int_equal(tensor_dequantize_row(type, plain, yp, 32), 0);
            double eo = 0, ep = 0;
            for (int j = 0; j < 32; j++) {
                eo += ((double)yo[j] - xb[j]) * ((double)yo[j] - xb[j]);
                ep += ((double)yp[j] - xb[j]) * ((double)yp[j] - xb[j]);
            }
            /* Per block the search contains the plain rule's codes, so only
             * the f16 rounding of the stored scale can make it lose, and by
             * little. */
            if (eo > ep * 1.01 + 1e-12)
                n_worse++;
            err_o += eo;
            err_p += ep;
        }
        (void)bb;
        double ratio = sqrt(err_o / err_p);
        print_message("%-7s searched / plain RMS error %.4f, %d of %d blocks worse by > 1%%\n",
                      strata_type_name(type), ratio, n_worse, n_blocks);
        assert_true(ratio <= cases[c].max_ratio);
        assert_int_equal(n_worse, 0);
    }
    free(x);
}

/* --- stable codes --- */

static void test_requantize_is_stable(void **state)
{
    (void)state;
    /* quantize(dequantize(quantize(x))) against quantize(x). The float
     * types, the activation types and every single-scale type give back
     * the same bytes for every block. The two-level types may land on
     * another encoding for a few blocks (measured on these rows, blocks
     * with the same values: Q2_K 63/64, Q3_K 63/64, Q5_K 52/64, the rest
     * all; the stored min of an affine sub-block whose codes do not reach 0
     * is not always found again); their decoded values must then move by
     * less than a tenth of the type's own error. */
    static const struct {
        uint32_t type;
        int same_bytes;
        double own_error; /* the type's relative RMS error on Gaussian rows */
    } cases[] = {
        {STRATA_TYPE_F16, 1, 0},      {STRATA_TYPE_BF16, 1, 0},      {STRATA_TYPE_Q8_0, 1, 0},
        {STRATA_TYPE_Q8_1, 1, 0},     {STRATA_TYPE_Q8_K, 1, 0},      {STRATA_TYPE_Q4_0, 1, 0},
        {STRATA_TYPE_Q5_0, 1, 0},     {STRATA_TYPE_Q4_1, 1, 0},      {STRATA_TYPE_Q5_1, 1, 0},
        {STRATA_TYPE_IQ4_NL, 1, 0},   {STRATA_TYPE_Q2_K, 0, 0.265},  {STRATA_TYPE_Q3_K, 0, 0.143},
        {STRATA_TYPE_Q4_K, 0, 0.070}, {STRATA_TYPE_Q5_K, 0, 0.034},  {STRATA_TYPE_Q6_K, 0, 0.016},
        {STRATA_TYPE_IQ4_XS, 0, 0.074}, {STRATA_TYPE_MXFP4, 1, 0},
    };
    const int n_rows = TEST_SANITIZED ? 8 : 32;
    const int64_t n = (int64_t)n_rows * ROW;
    float *x = malloc((size_t)n * sizeof(float)), *y1 = malloc((size_t)n * sizeof(float));
    float *y2 = malloc((size_t)n * sizeof(float));
    uint8_t *q1 = malloc((size_t)n * 4), *q2 = malloc((size_t)n * 4);
    assert_true(x && y1 && y2 && q1 && q2);
    strata_rng r;
    strata_rng_seed(&r, 99);
    fill_gaussian(&r, x, n, 0.02);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t type = cases[c].type;
        const strata_type_info *ti = strata_type_get(type);
        assert_int_equal(tensor_quantize_row(type, x, q1, n), 0);
        assert_int_equal(tensor_dequantize_row(type, q1, y1, n), 0);
        assert_int_equal(tensor_quantize_row(type, y1, q2, n), 0);
        assert_int_equal(tensor_dequantize_row(type, q2, y2, n), 0);
        int64_t n_blocks = n / ti->block_elems, n_same = 0, n_same_values = 0;
        for (int64_t b = 0; b < n_blocks; b++) {
            n_same += memcmp(q1 + b * ti->block_bytes, q2 + b * ti->block_bytes, ti->block_bytes) == 0;
            int same = 1;
            for (uint32_t k = 0; k < ti->block_elems; k++)
                same &= y1[b * ti->block_elems + k] == y2[b * ti->block_elems + k];
            n_same_values += same;
        }
        qt_err e = {0};
        qt_err_add(&e, y1, y2, n);
        print_message("requantize %-7s %lld of %lld blocks identical, %lld same values, "
                      "relative RMS change %.2g\n",
                      strata_type_name(type), (long long)n_same, (long long)n_blocks,
                      (long long)n_same_values, qt_rel_rms(&e));
        if (cases[c].same_bytes)
            assert_int_equal(n_same, n_blocks);
        else if (qt_rel_rms(&e) > 0.1 * cases[c].own_error)
            fail_msg("%s: re-encoding moved the values by %.3g (relative RMS)",
                     strata_type_name(type), qt_rel_rms(&e));
    }
    free(x);
    free(y1);
    free(y2);
    free(q1);
    free(q2);
}

/* --- activation types --- */

static void test_activation_fields(void **state)
{
    (void)state;
    float x[TENSOR_QK_K];
    strata_rng r;
    strata_rng_seed(&r, 5);
    for (int rep = 0; rep < 50; rep++) {
        fill_gaussian(&r, x, TENSOR_QK_K, rep + 1.0);
        /* Q8_1: s is d * sum(q) in f16, the sum of the decoded block */
        block_q8_1 b1[TENSOR_QK_K / TENSOR_QK];
        assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_1, x, b1, TENSOR_QK_K), 0);
        for (int ib = 0; ib < TENSOR_QK_K / TENSOR_QK; ib++) {
            int sum = 0, qmax = 0;
            for (int j = 0; j < TENSOR_QK; j++) {
                sum += b1[ib].qs[j];
                qmax = abs(b1[ib].qs[j]) > qmax ? abs(b1[ib].qs[j]) : qmax;
            }
            float d = tensor_f16_to_f32(b1[ib].d);
            assert_int_equal(b1[ib].s, tensor_f32_to_f16(d * (float)sum));
            assert_int_equal(qmax, 127); /* max-abs: the largest value hits 127 */
        }
        /* Q8_K: float d = max|x| / 127, bsums are the sums of 16 codes */
        block_q8_k bk;
        assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_K, x, &bk, TENSOR_QK_K), 0);
        float amax = 0;
        for (int i = 0; i < TENSOR_QK_K; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        assert_true(bk.d == amax / 127.0f);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += bk.qs[16 * j + l];
            assert_int_equal(bk.bsums[j], sum);
        }
        for (int i = 0; i < TENSOR_QK_K; i++) /* round to nearest: within half a step */
            assert_true(fabsf(x[i] - bk.d * (float)bk.qs[i]) <= 0.5f * bk.d * (1 + 1e-6f));
    }
}

/* --- determinism --- */

static void test_deterministic_and_blockwise(void **state)
{
    (void)state;
    const int64_t n = 4 * ROW;
    float *x = malloc((size_t)n * sizeof(float));
    uint8_t *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    assert_true(x && a && b);
    strata_rng r;
    strata_rng_seed(&r, 3);
    fill_gaussian(&r, x, n, 0.1);
    for (size_t t = 0; t < N_TYPES; t++) {
        uint32_t type = k_types[t];
        const strata_type_info *ti = strata_type_get(type);
        size_t nbytes = qt_row_bytes(type, n);
        memset(a, 0x5a, nbytes);
        memset(b, 0xa5, nbytes);
        assert_int_equal(tensor_quantize_row(type, x, a, n), 0);
        /* block by block, into a buffer with other garbage: same bytes */
        for (int64_t e = 0; e < n; e += ti->block_elems)
            assert_int_equal(tensor_quantize_row(type, x + e, b + e / ti->block_elems * ti->block_bytes,
                                                 ti->block_elems),
                             0);
        if (memcmp(a, b, nbytes) != 0)
            fail_msg("%s: quantizing block by block gives other bytes", strata_type_name(type));
    }
    free(x);
    free(a);
    free(b);
}

/* Non-finite inputs: the codes are unspecified, but every quantizer must
 * finish without touching memory it does not own and without undefined
 * behaviour (the sanitizer build checks that), and finite neighbours in
 * other blocks are unaffected. */
static void test_non_finite_inputs(void **state)
{
    (void)state;
    float x[ROW], y[ROW], ref[ROW];
    uint8_t q[ROW * 4 + 64];
    strata_rng r;
    strata_rng_seed(&r, 8);
    static const float specials[] = {NAN, INFINITY, -INFINITY};
    for (size_t t = 0; t < N_TYPES; t++) {
        uint32_t type = k_types[t];
        for (size_t s = 0; s < 3; s++) {
            fill_gaussian(&r, x, ROW, 1.0);
            /* the untouched second half, quantized alone, for comparison */
            assert_int_equal(tensor_quantize_row(type, x + ROW / 2, q, ROW / 2), 0);
            assert_int_equal(tensor_dequantize_row(type, q, ref, ROW / 2), 0);
            x[3] = specials[s];
            x[100] = specials[(s + 1) % 3];
            assert_int_equal(tensor_quantize_row(type, x, q, ROW), 0);
            assert_int_equal(tensor_dequantize_row(type, q, y, ROW), 0);
            for (int i = 0; i < ROW / 2; i++)
                if (memcmp(&y[ROW / 2 + i], &ref[i], sizeof(float)) != 0)
                    fail_msg("%s: a non-finite value changed another block", strata_type_name(type));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sizes_match_type_table),
        cmocka_unit_test(test_api_contract),
        cmocka_unit_test(test_decode_hand_made_blocks),
        cmocka_unit_test(test_round_trip_gaussian),
        cmocka_unit_test(test_round_trip_adversarial),
        cmocka_unit_test(test_search_beats_plain_rules),
        cmocka_unit_test(test_requantize_is_stable),
        cmocka_unit_test(test_activation_fields),
        cmocka_unit_test(test_deterministic_and_blockwise),
        cmocka_unit_test(test_non_finite_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
