/* numfmt.c: the one scalar definition of each storage-format conversion (see numfmt.h;
 * the decodings of bf16 and e4m3 are inline there).
 * Everything works on the IEEE bit patterns with integer arithmetic so the result does
 * not depend on the FPU rounding mode or on compiler contraction; rounding is to nearest,
 * ties to even, everywhere. */
#include "kernels/cpu/numfmt.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint16_t dsv4_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    /* Keep NaN a NaN (quiet it) instead of letting rounding carry it into infinity. */
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    /* RNE on the dropped 16 bits: add 0x7fff plus the lowest kept bit. Overflow of the
     * largest finite values correctly carries into infinity. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint8_t dsv4_f32_to_e4m3(float f)
{
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    uint32_t e32, mant, shift, q, rem, half;

    if (a > 0x7f800000u)
        return 0x7f;
    /* 448 is 0x43e00000; anything at or above the 464 midpoint would round past 448, and
     * 448 < x < 464 rounds down to 448 anyway, so saturate everything >= 448. */
    if (a >= 0x43e00000u)
        return sign | 0x7e;
    e32 = a >> 23;
    /* Below 2^-10 (half the smallest subnormal 2^-9) everything rounds to zero; the
     * general path below handles 2^-10 itself as a tie that goes to even (zero). */
    if (e32 < 127 - 10)
        return sign;
    mant = (a & 0x7fffffu) | 0x800000u; /* 24-bit significand incl. hidden bit */
    if (e32 >= 127 - 6) {
        /* Normal target: keep 3 fraction bits (drop 20) and rebias exponent. */
        shift = 20;
        q = ((e32 - 127 + 7) << 3) | ((mant >> shift) & 0x7u);
    } else {
        /* Subnormal target: value = mant * 2^(e32-150), unit is 2^-9, so the code
         * is mant >> (150 - 9 - e32) = mant >> (141 - e32). */
        shift = 141 - e32;
        q = mant >> shift;
    }
    rem = mant & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
    /* Rounding up can carry from subnormal into the first normal code and from one
     * binade into the next: the packed layout makes both a plain +1. */
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    if (q > 0x7e)
        q = 0x7e;
    return sign | (uint8_t)q;
}

float dsv4_e8m0_to_f32(uint8_t e)
{
    if (e == 0xff)
        return NAN;
    return ldexpf(1.0f, (int)e - 127);
}

static const float e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float dsv4_e2m1_to_f32(uint8_t nibble)
{
    float mag = e2m1_mag[nibble & 0x7u];
    return (nibble & 0x8u) ? -mag : mag;
}

uint8_t dsv4_f32_to_e2m1(float f)
{
    uint8_t sign = signbit(f) ? 0x8u : 0x0u;
    float a = fabsf(f);
    uint8_t i;

    /* E2M1 has no NaN; map it to zero rather than a value the data never held. */
    if (isnan(a))
        return 0;
    if (a >= 6.0f)
        return sign | 0x7u;
    /* Find the bracketing pair of magnitudes and round to the nearer one; on an exact
     * midpoint pick the even code (mantissa bit 0 clear). */
    for (i = 0; i < 7; i++) {
        float lo = e2m1_mag[i], hi = e2m1_mag[i + 1];
        if (a < hi) {
            float mid = (lo + hi) * 0.5f;
            if (a < mid || (a == mid && (i & 1u) == 0))
                return sign | i;
            return sign | (uint8_t)(i + 1);
        }
    }
    return sign | 0x7u;
}
