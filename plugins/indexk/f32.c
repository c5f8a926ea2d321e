/* f32.c: the indexk/f32 plugin: index-K rows stored as plain fp32 (4 bytes per value,
 * 32768 B for a page of 64 rows x 128 dims). Lossless; the reference the other formats
 * are measured against and the choice for parity with Hugging Face's fp32 model. */
#include "config.h"

#include "plugins/indexk/common.h"

#include <string.h>

typedef struct f32_config {
    dsv4_indexk_config common;
} f32_config;

static size_t f32_row_bytes(const dsv4_indexk_geom *g)
{
    return (size_t)g->dim * sizeof(float);
}

static void f32_encode(const void *config, const dsv4_indexk_geom *g, uint8_t *page, uint32_t slot,
                       const float *row)
{
    memcpy(page + (size_t)slot * f32_row_bytes(g), row, f32_row_bytes(g));
}

static void f32_decode(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot,
                       float *row_out)
{
    memcpy(row_out, page + (size_t)slot * f32_row_bytes(g), f32_row_bytes(g));
}

static const dsv4_indexk_format f32_format = {
    .subject = "indexk/f32",
    .row_bytes = f32_row_bytes,
    .encode = f32_encode,
    .decode = f32_decode,
    .cuda_format = DSV4_CUDA_IK_F32,
};

static size_t f32_page_bytes(const dsv4_indexk_geom *g)
{
    return dsv4_indexk_page_bytes(&f32_format, g);
}

static int f32_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen)
{
    return dsv4_indexk_init(&f32_format, host, config, state_p, err, errlen);
}

static const dsv4_option f32_options[] = {
    DSV4_INDEXK_COMMON_OPTIONS(f32_config),
    {.key = NULL},
};

static const dsv4_indexk_ops f32_ops = {
    .struct_size = sizeof(dsv4_indexk_ops),
    .page_bytes = f32_page_bytes,
    .row_bytes = f32_row_bytes,
    .store = dsv4_indexk_store,
    .load = dsv4_indexk_load,
    .score = dsv4_indexk_score,
    DSV4_INDEXK_CUDA_OPS,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_INDEXK_DESC_HEADER,
    .name = "f32",
    .version = PACKAGE_VERSION,
    .description = "index-K rows as fp32 (4 B per value, lossless; for fp32 parity runs)",
    .flags = 0,
    .options = f32_options,
    .config_size = sizeof(f32_config),
    .init = f32_init,
    .ops = &f32_ops,
};
