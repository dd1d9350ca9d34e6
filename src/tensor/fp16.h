/* Half-precision conversions: IEEE binary16 ("f16", the scale type of every
 * GGUF block and the F16 tensor type) and bfloat16 ("bf16", the top half of
 * a float32).
 *
 * Plain bit manipulation, no intrinsics and no tables, so the results are
 * the same on every host and in every build. Both directions are exact where
 * the format allows: f16 -> f32 and bf16 -> f32 are exact for every bit
 * pattern; f32 -> f16 and f32 -> bf16 round to nearest, ties to even,
 * overflow to infinity, keep NaN a NaN (quiet, sign kept), and f32 -> f16
 * produces f16 subnormals for |x| below 2^-14. */
#ifndef STRATA_TENSOR_FP16_H
#define STRATA_TENSOR_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tensor_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float tensor_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f16 bits -> float32 (exact). */
static inline float tensor_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN with its payload moved to the top of the f32 mantissa */
        return tensor_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float32 */
        float mag = (float)mant * 0x1p-24f;
        return sign ? -mag : mag;
    }
    /* normal: rebias the exponent from 15 to 127 */
    return tensor_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* float32 -> f16 bits, round to nearest even. */
static inline uint16_t tensor_f32_to_f16(float f)
{
    uint32_t x = tensor_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax > 0x7f800000u) /* NaN: keep it NaN (quiet bit set) and keep some payload */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    /* 65520 = 0x477ff000 is halfway between 65504 (the largest f16, odd
     * mantissa) and 2^16; the tie goes to the even neighbour, infinity. */
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Below 2^-14: an f16 subnormal, i.e. a multiple of 2^-24.
         * |x| = m * 2^(e-150) with m the 24-bit significand, so
         * |x| / 2^-24 = m >> (126 - e), rounded to nearest even. */
        uint32_t e = ax >> 23;
        if (e < 102) /* |x| < 2^-25: rounds to zero (2^-25 itself is a tie to 0) */
            return sign;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++; /* may carry into 0x400, the smallest normal: still right */
        return (uint16_t)(sign | q);
    }
    /* Normal: drop 13 mantissa bits and rebias (127 -> 15). A carry out of
     * the mantissa correctly bumps the exponent. */
    uint32_t h = (ax - 0x38000000u) >> 13;
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* bf16 bits -> float32 (exact). */
static inline float tensor_bf16_to_f32(uint16_t b)
{
    return tensor_f32_from_bits((uint32_t)b << 16);
}

/* float32 -> bf16 bits, round to nearest even; finite values too large
 * round to infinity through the carry. */
static inline uint16_t tensor_f32_to_bf16(float f)
{
    uint32_t x = tensor_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, forcing the quiet bit */
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
