/* numfmt.h: scalar conversions between f32 and the storage formats dsv4d reads and
 * writes: bf16, OCP FP8 E4M3 (fn: no inf, NaN = S.1111.111, max 448), E8M0 scales
 * (2^(e-127)), and E2M1 (MXFP4) nibbles. Rounding is to nearest, ties to even; conversion
 * to e4m3 saturates to +-448 and maps NaN to 0x7f. Used by the indexk plugins, the
 * checkpoint loader and writer, and the kernels, so there is one definition of each. */
#ifndef DSV4_KERNELS_NUMFMT_H
#define DSV4_KERNELS_NUMFMT_H

#include <stdint.h>
#include <string.h>

/* The two decodings of the inner loops (KV rows, index-K rows, weights) are defined here,
 * inline, so that those loops vectorise instead of calling out per value; by bit patterns,
 * exact. */
static inline float dsv4_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; exponent 0 is subnormal
 * (m/8 * 2^-6); S.1111.111 is NaN; there is no infinity, so S.1111.110 = 448 is the max.
 * A normal code's f32 is its exponent rebiased (e - 7 + 127) and its mantissa moved up; a
 * subnormal's is m times 2^-9 (exact); the NaN code's the quiet NaN; then the sign bit.
 * Chosen by selects, not branches, so a loop over a row vectorises. */
static inline float dsv4_e4m3_to_f32(uint8_t q)
{
    uint32_t e = (q >> 3) & 0xfu, m = q & 0x7u, sub, u;
    float f = (float)m * 0x1p-9f;
    memcpy(&sub, &f, sizeof sub);
    u = e == 0 ? sub : e == 0xfu && m == 0x7u ? 0x7fc00000u : (e + 120u) << 23 | m << 20;
    u |= (uint32_t)(q & 0x80u) << 24;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t dsv4_f32_to_bf16(float f);
uint8_t dsv4_f32_to_e4m3(float f);
float dsv4_e8m0_to_f32(uint8_t e);
/* low 4 bits of nibble: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0 */
float dsv4_e2m1_to_f32(uint8_t nibble);
uint8_t dsv4_f32_to_e2m1(float f);

#endif
