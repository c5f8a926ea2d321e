/* bf16.c: the indexk/bf16 plugin: index-K rows stored as bf16 (2 bytes per value, rounded
 * to nearest even; 16384 B for a page of 64 rows x 128 dims). Half the bytes of f32 at a
 * relative error of at most 2^-8 per value. */
#include "config.h"

#include "plugins/indexk/common.h"

#include "kernels/cpu/numfmt.h"

#include <string.h>

typedef struct bf16_config {
    dsv4_indexk_config common;
} bf16_config;

static size_t bf16_row_bytes(const dsv4_indexk_geom *g)
{
    return (size_t)g->dim * sizeof(uint16_t);
}

static void bf16_encode(const void *config, const dsv4_indexk_geom *g, uint8_t *page, uint32_t slot,
                        const float *row)
{
    uint8_t *dst = page + (size_t)slot * bf16_row_bytes(g);
    uint32_t d;

    for (d = 0; d < g->dim; d++) {
        uint16_t h = dsv4_f32_to_bf16(row[d]);
        memcpy(dst + (size_t)d * sizeof h, &h, sizeof h);
    }
}

static void bf16_decode(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot,
                        float *row_out)
{
    const uint8_t *src = page + (size_t)slot * bf16_row_bytes(g);
    uint32_t d;

    for (d = 0; d < g->dim; d++) {
        uint16_t h;
        memcpy(&h, src + (size_t)d * sizeof h, sizeof h);
        row_out[d] = dsv4_bf16_to_f32(h);
    }
}

static const dsv4_indexk_format bf16_format = {
    .subject = "indexk/bf16",
    .row_bytes = bf16_row_bytes,
    .encode = bf16_encode,
    .decode = bf16_decode,
    .cuda_format = DSV4_CUDA_IK_BF16,
};

static const dsv4_option bf16_options[] = {
    DSV4_INDEXK_COMMON_OPTIONS(bf16_config),
    {.key = NULL},
};

DSV4_INDEXK_PLUGIN("bf16", bf16_format, bf16_row_bytes, bf16_options, bf16_config,
                   "index-K rows as bf16 (2 B per value, round to nearest even)");
