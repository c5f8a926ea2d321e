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

static size_t bf16_page_bytes(const dsv4_indexk_geom *g)
{
    return dsv4_indexk_page_bytes(&bf16_format, g);
}

static int bf16_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                     size_t errlen)
{
    return dsv4_indexk_init(&bf16_format, host, config, state_p, err, errlen);
}

static const dsv4_option bf16_options[] = {
    DSV4_INDEXK_COMMON_OPTIONS(bf16_config),
    {.key = NULL},
};

static const dsv4_indexk_ops bf16_ops = {
    .struct_size = sizeof(dsv4_indexk_ops),
    .page_bytes = bf16_page_bytes,
    .row_bytes = bf16_row_bytes,
    .store = dsv4_indexk_store,
    .load = dsv4_indexk_load,
    .score = dsv4_indexk_score,
    DSV4_INDEXK_CUDA_OPS,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_INDEXK_DESC_HEADER,
    .name = "bf16",
    .version = PACKAGE_VERSION,
    .description = "index-K rows as bf16 (2 B per value, round to nearest even)",
    .flags = 0,
    .options = bf16_options,
    .config_size = sizeof(bf16_config),
    .init = bf16_init,
    .ops = &bf16_ops,
};
