/* Half-precision conversions (tensor/fp16.h) against references computed
 * here independently, in double precision from the formats' definitions:
 *  - f16 -> f32 for all 65536 bit patterns equals sign * m * 2^(e-25)
 *    (normal) or sign * m * 2^-24 (subnormal), and f32 -> f16 brings every
 *    non-NaN pattern back to itself;
 *  - f32 -> f16 on ~4 million f32 patterns spread over the whole range is
 *    the nearest f16 (ties to even) found by search over all f16 values;
 *  - exact ties, overflow to infinity, underflow, subnormals, signed zero,
 *    NaN; the same for bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "quant_testutil.h"
#include "tensor/fp16.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The value of an f16 bit pattern by the format's definition (inf/NaN
 * excluded). */
static double f16_ref_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024 + m), e - 25);
    return sign ? -v : v;
}

static int is_nan16(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static void test_f16_to_f32_all_patterns(void **state)
{
    (void)state;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u;
        float f = tensor_f16_to_f32(h);
        if (is_nan16(h)) {
            assert_true(isnan(f));
            uint16_t back = tensor_f32_to_f16(f);
            assert_true(is_nan16(back));
            assert_int_equal(back & 0x8000, h & 0x8000); /* sign kept */
            continue;
        }
        if ((h & 0x7fff) == 0x7c00) {
            assert_true(isinf(f));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        } else {
            double want = f16_ref_value(h);
            if ((double)f != want)
                fail_msg("f16 0x%04x -> %.9g, want %.9g", h, (double)f, want);
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0); /* -0 stays -0 */
        }
        uint16_t back = tensor_f32_to_f16(f);
        if (back != h)
            fail_msg("f16 0x%04x -> %.9g -> 0x%04x", h, (double)f, back);
    }
}

/* Nearest f16 to v (finite, >= 0) by binary search over the ordered
 * non-negative patterns; ties to the even pattern; inf past the rounding
 * boundary of 65504. */
static uint16_t ref_f32_to_f16_pos(double v)
{
    if (v >= 65520.0) /* 65504 + half an ulp (16): the tie goes to even = inf */
        return 0x7c00;
    uint16_t lo = 0, hi = 0x7bff;
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (f16_ref_value(mid) <= v)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = v - f16_ref_value(lo), dhi = f16_ref_value(hi) - v;
    if (dlo < 0) /* v below pattern lo: only when lo == 0 */
        return lo;
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1) ? hi : lo;
}

static void test_f32_to_f16_against_search(void **state)
{
    (void)state;
    /* every 1021st pattern (a prime stride: all mantissa residues and every
     * exponent are hit), both signs */
    const uint32_t stride = TEST_SANITIZED ? 4099 : 1021;
    int64_t n_checked = 0;
    for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
        float f = tensor_f32_from_bits((uint32_t)u);
        uint16_t want = ref_f32_to_f16_pos((double)f);
        uint16_t got = tensor_f32_to_f16(f);
        if (got != want)
            fail_msg("f32 %.9g (0x%08x) -> f16 0x%04x, want 0x%04x", (double)f, (unsigned)u, got,
                     want);
        got = tensor_f32_to_f16(-f);
        if (got != (uint16_t)(want | 0x8000))
            fail_msg("f32 %.9g -> f16 0x%04x, want 0x%04x", -(double)f, got, want | 0x8000);
        n_checked++;
    }
    assert_true(n_checked > 500000);
}

static void test_f32_to_f16_edges(void **state)
{
    (void)state;
    /* ties between two normals: 1 + 2^-11 is halfway between 1 (even) and
     * 1 + 2^-10 (odd) -> 1; 1 + 3*2^-11 between odd and even -> up */
    assert_int_equal(tensor_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(tensor_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* just above a tie rounds up */
    assert_int_equal(tensor_f32_to_f16(nextafterf(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
    /* overflow: 65504 is the largest; 65519.99 rounds down, 65520 (a tie
     * with an odd mantissa) and above go to infinity */
    assert_int_equal(tensor_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(tensor_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    assert_int_equal(tensor_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(tensor_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(tensor_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(tensor_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(tensor_f32_to_f16(-INFINITY), 0xfc00);
    /* subnormals: 2^-24 is the smallest; 2^-25 is a tie with 0 (even) ->
     * 0; just above it -> 2^-24; 3 * 2^-25 is a tie between 1 and 2 units
     * -> 2 (even) */
    assert_int_equal(tensor_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(tensor_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(tensor_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    assert_int_equal(tensor_f32_to_f16(3 * 0x1p-25f), 0x0002);
    assert_int_equal(tensor_f32_to_f16(-0x1p-24f), 0x8001);
    /* the largest subnormal and the carry into the smallest normal */
    assert_int_equal(tensor_f32_to_f16(1023 * 0x1p-24f), 0x03ff);
    assert_int_equal(tensor_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
    assert_int_equal(tensor_f32_to_f16(0x1p-14f), 0x0400);
    /* f32 subnormals and zeros */
    assert_int_equal(tensor_f32_to_f16(1e-40f), 0x0000);
    assert_int_equal(tensor_f32_to_f16(-1e-40f), 0x8000);
    assert_int_equal(tensor_f32_to_f16(-0.0f), 0x8000);
    /* NaN stays NaN, with its sign */
    assert_true(is_nan16(tensor_f32_to_f16(NAN)));
    assert_true(is_nan16(tensor_f32_to_f16(tensor_f32_from_bits(0x7f800001u)))); /* payload in low bits */
    assert_true(is_nan16(tensor_f32_to_f16(tensor_f32_from_bits(0xffc00000u))));
    assert_int_equal(tensor_f32_to_f16(tensor_f32_from_bits(0xffc00000u)) & 0x8000, 0x8000);
}

/* bf16: nearest by comparing the two truncation neighbours in double. */
static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = tensor_f32_bits(f);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double v = fabs((double)f);
    double vlo = fabs((double)tensor_f32_from_bits(lo));
    /* past the largest finite bf16 the next step would be 2^128 (the
     * rounding boundary to infinity is halfway to it) */
    double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? ldexp(1.0, 128)
                                                    : fabs((double)tensor_f32_from_bits(hi));
    double dlo = v - vlo, dhi = vhi - v;
    if (dlo < dhi)
        return (uint16_t)(lo >> 16);
    if (dhi < dlo)
        return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static void test_bf16(void **state)
{
    (void)state;
    /* every bf16 pattern decodes to its bits << 16 and encodes back */
    for (uint32_t u = 0; u < 65536; u++) {
        float f = tensor_bf16_to_f32((uint16_t)u);
        assert_int_equal(tensor_f32_bits(f), u << 16);
        if (!isnan(f))
            assert_int_equal(tensor_f32_to_bf16(f), u);
        else
            assert_true(isnan(tensor_bf16_to_f32(tensor_f32_to_bf16(f))));
    }
    const uint32_t stride = TEST_SANITIZED ? 4099 : 1021;
    for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
        float f = tensor_f32_from_bits((uint32_t)u);
        uint16_t want = ref_f32_to_bf16(f);
        if (tensor_f32_to_bf16(f) != want)
            fail_msg("f32 0x%08x -> bf16 0x%04x, want 0x%04x", (unsigned)u, tensor_f32_to_bf16(f), want);
        if (tensor_f32_to_bf16(-f) != (uint16_t)(want | 0x8000))
            fail_msg("f32 -0x%08x -> bf16 wrong sign or value", (unsigned)u);
    }
    /* ties: 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 -> 1;
     * 1 + 3 * 2^-8 -> up to the even 1 + 2^-6 */
    assert_int_equal(tensor_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(tensor_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    /* the largest finite floats round to infinity */
    assert_int_equal(tensor_f32_to_bf16(FLT_MAX), 0x7f80);
    assert_int_equal(tensor_f32_to_bf16(-FLT_MAX), 0xff80);
    assert_int_equal(tensor_f32_to_bf16(tensor_f32_from_bits(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(tensor_f32_to_bf16(INFINITY), 0x7f80);
    /* NaN stays NaN, even one whose payload is only in the low 16 bits
     * (plain rounding would turn it into infinity) */
    uint16_t b = tensor_f32_to_bf16(tensor_f32_from_bits(0x7f800001u));
    assert_true(isnan(tensor_bf16_to_f32(b)));
    b = tensor_f32_to_bf16(tensor_f32_from_bits(0xff800001u));
    assert_true(isnan(tensor_bf16_to_f32(b)));
    assert_int_equal(b & 0x8000, 0x8000);
    /* subnormal f32 values keep their bits (bf16 has the f32 exponent) */
    assert_int_equal(tensor_f32_to_bf16(tensor_f32_from_bits(0x00010000u)), 0x0001);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32_all_patterns),
        cmocka_unit_test(test_f32_to_f16_against_search),
        cmocka_unit_test(test_f32_to_f16_edges),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
