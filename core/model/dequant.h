/* dequant.h: stored checkpoint weights to f32 (spec §5).
 *
 * F32 and BF16 convert element by element. F8_E4M3 weights carry one scale per 128x128
 * block, [ceil(rows/128), ceil(cols/128)], as F32 or F8_E8M0. Packed MXFP4 (I8 or U8
 * [rows, cols/2], low nibble = even column) carries one F8_E8M0 scale per 32 inputs,
 * [rows, cols/32]. A leading expert dimension ([E, ...] on the weight and its scale) is
 * addressed with `mat`. The per-element products are defined here once so that the
 * synthetic generator predicts the loader's values bit for bit. */
#ifndef DSV4_CORE_MODEL_DEQUANT_H
#define DSV4_CORE_MODEL_DEQUANT_H

#include <stdint.h>

#include "core/model/safetensors.h"
#include "kernels/cpu/numfmt.h"

#define DSV4_FP8_BLOCK 128
#define DSV4_FP4_GROUP 32

typedef struct dsv4_wsrc {
    const dsv4_st_tensor *t;     /* the stored weight */
    const dsv4_st_tensor *scale; /* its scales (FP8, FP4), else NULL */
    uint64_t mat;                /* matrix index along a leading expert dimension, else 0 */
    uint64_t rows, cols;         /* the logical shape of one matrix */
} dsv4_wsrc;

static inline float dsv4_dq_fp8(uint8_t q, float scale)
{
    return dsv4_e4m3_to_f32(q) * scale;
}
static inline float dsv4_dq_fp4(uint8_t nibble, float scale)
{
    return dsv4_e2m1_to_f32(nibble) * scale;
}

/* Rows [row0, row0 + n) of the matrix into out[n * cols]. The caller has checked the
 * shapes above and that the weight is F32, BF16, F8_E4M3 or I8/U8 and its scale F32 or
 * F8_E8M0 where one is needed. */
void dsv4_dequant_rows(const dsv4_wsrc *s, uint64_t row0, uint64_t n, float *out);

#endif
