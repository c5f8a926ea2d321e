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

static const dsv4_option f32_options[] = {
    DSV4_INDEXK_COMMON_OPTIONS(f32_config),
    {.key = NULL},
};

DSV4_INDEXK_PLUGIN("f32", f32_format, f32_row_bytes, f32_options, f32_config,
                   "index-K rows as fp32 (4 B per value, lossless; for fp32 parity runs)");
