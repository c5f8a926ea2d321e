/* numfmt.h: scalar conversions between f32 and the storage formats dsv4d reads and
 * writes: bf16, OCP FP8 E4M3 (fn: no inf, NaN = S.1111.111, max 448), E8M0 scales
 * (2^(e-127)), and E2M1 (MXFP4) nibbles. Rounding is to nearest, ties to even; conversion
 * to e4m3 saturates to +-448 and maps NaN to 0x7f. Used by the indexk plugins, the
 * checkpoint loader and writer, and the kernels, so there is one definition of each. */
#ifndef DSV4_KERNELS_NUMFMT_H
#define DSV4_KERNELS_NUMFMT_H

#include <stdint.h>

float dsv4_bf16_to_f32(uint16_t h);
uint16_t dsv4_f32_to_bf16(float f);
float dsv4_e4m3_to_f32(uint8_t q);
uint8_t dsv4_f32_to_e4m3(float f);
float dsv4_e8m0_to_f32(uint8_t e);
/* low 4 bits of nibble: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0 */
float dsv4_e2m1_to_f32(uint8_t nibble);
uint8_t dsv4_f32_to_e2m1(float f);

#endif
