/* dequant.c: F32, BF16, block-scaled F8_E4M3 and packed MXFP4 weights to f32. Elements are
 * read with memcpy: safetensors data is not aligned for its dtype. Little-endian host. */
#include "config.h"

#include "core/model/dequant.h"

#include <string.h>

static float scale_at(const dsv4_st_tensor *s, uint64_t i)
{
    const unsigned char *p = s->data;
    if (s->dtype == DSV4_ST_F8_E8M0)
        return dsv4_e8m0_to_f32(p[i]);
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
}

void dsv4_dequant_rows(const dsv4_wsrc *s, uint64_t row0, uint64_t n, float *out)
{
    const uint64_t R = s->rows, C = s->cols;
    const unsigned char *p = s->t->data;
    switch (s->t->dtype) {
    case DSV4_ST_F32: memcpy(out, p + 4 * (s->mat * R + row0) * C, 4 * n * C); break;
    case DSV4_ST_BF16: {
        const unsigned char *src = p + 2 * (s->mat * R + row0) * C;
        for (uint64_t i = 0; i < n * C; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = dsv4_bf16_to_f32(h);
        }
        break;
    }
    case DSV4_ST_F8_E4M3: {
        const uint64_t sr = (R + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK,
                       sc = (C + DSV4_FP8_BLOCK - 1) / DSV4_FP8_BLOCK;
        for (uint64_t r = 0; r < n; r++) {
            const uint64_t row = row0 + r;
            const unsigned char *q = p + (s->mat * R + row) * C;
            const uint64_t srow = s->mat * sr * sc + row / DSV4_FP8_BLOCK * sc;
            for (uint64_t c = 0; c < C; c++)
                out[r * C + c] = dsv4_dq_fp8(q[c], scale_at(s->scale, srow + c / DSV4_FP8_BLOCK));
        }
        break;
    }
    default: { /* I8 / U8: packed MXFP4 */
        const uint64_t groups = C / DSV4_FP4_GROUP;
        for (uint64_t r = 0; r < n; r++) {
            const uint64_t row = s->mat * R + row0 + r;
            const unsigned char *q = p + row * (C / 2);
            for (uint64_t c = 0; c < C; c++) {
                uint8_t nib = c % 2 ? q[c / 2] >> 4 : q[c / 2] & 0xf;
                out[r * C + c] =
                    dsv4_dq_fp4(nib, scale_at(s->scale, row * groups + c / DSV4_FP4_GROUP));
            }
        }
        break;
    }
    }
}
