/* fp8.c: the indexk/fp8 plugin: index-K rows stored as OCP e4m3 with one fp32 scale per
 * row (dim + 4 bytes per row; 8448 B for a page of 64 rows x 128 dims).
 *
 * Page layout, as in vLLM's indexer cache: the e4m3 bytes of all rows first (row-major,
 * rows_per_page * dim bytes), then rows_per_page fp32 scales. The scale of a row is
 * max(amax, 1e-4) / 448 so the largest value lands on the top e4m3 code; with
 * scale_format = ue8m0 it is rounded up to a power of two (vLLM's ue8m0 option), which
 * costs up to one bit of precision but makes dequantisation an exact exponent shift. */
#include "config.h"

#include "plugins/indexk/common.h"

#include "kernels/cpu/numfmt.h"

#include <math.h>
#include <string.h>

/* Rows whose values are all tiny get this amax, so the scale never reaches zero. */
#define FP8_AMAX_FLOOR 1e-4f
#define FP8_E4M3_MAX 448.0f

enum { FP8_SCALE_F32, FP8_SCALE_UE8M0 };
static const char *const fp8_scale_formats[] = {"f32", "ue8m0", NULL};

typedef struct fp8_config {
    dsv4_indexk_config common;
    int scale_format;
} fp8_config;

static size_t fp8_row_bytes(const dsv4_indexk_geom *g)
{
    return (size_t)g->dim + sizeof(float);
}

static uint8_t *fp8_scale_at(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot)
{
    return (uint8_t *)page + (size_t)g->rows_per_page * g->dim + (size_t)slot * sizeof(float);
}

/* The smallest power of two >= s (s > 0 and finite). */
static float fp8_pow2_ceil(float s)
{
    int e;
    float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */

    return ldexpf(1.0f, m == 0.5f ? e - 1 : e);
}

static void fp8_encode(const void *config, const dsv4_indexk_geom *g, uint8_t *page, uint32_t slot,
                       const float *row)
{
    const fp8_config *cfg = config;
    uint8_t *dst = page + (size_t)slot * g->dim;
    float amax = 0.0f, scale;
    uint32_t d;

    /* Only finite values set the scale: with reject_nonfinite off an infinity then
     * saturates to +-448 and a NaN stays NaN, instead of wiping out the whole row. */
    for (d = 0; d < g->dim; d++)
        if (isfinite(row[d]))
            amax = fmaxf(amax, fabsf(row[d]));
    scale = fmaxf(amax, FP8_AMAX_FLOOR) / FP8_E4M3_MAX;
    if (cfg->scale_format == FP8_SCALE_UE8M0)
        scale = fp8_pow2_ceil(scale);
    for (d = 0; d < g->dim; d++)
        dst[d] = dsv4_f32_to_e4m3(row[d] / scale);
    memcpy(fp8_scale_at(g, page, slot), &scale, sizeof scale);
}

static void fp8_decode(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot,
                       float *row_out)
{
    const uint8_t *src = page + (size_t)slot * g->dim;
    float scale;
    uint32_t d;

    memcpy(&scale, fp8_scale_at(g, page, slot), sizeof scale);
    for (d = 0; d < g->dim; d++)
        row_out[d] = dsv4_e4m3_to_f32(src[d]) * scale;
}

static bool fp8_pow2_scale(const void *config)
{
    return ((const fp8_config *)config)->scale_format == FP8_SCALE_UE8M0;
}

static const dsv4_indexk_format fp8_format = {
    .subject = "indexk/fp8",
    .row_bytes = fp8_row_bytes,
    .encode = fp8_encode,
    .decode = fp8_decode,
    .cuda_format = DSV4_CUDA_IK_FP8,
    .pow2_scale = fp8_pow2_scale,
};

static size_t fp8_page_bytes(const dsv4_indexk_geom *g)
{
    return dsv4_indexk_page_bytes(&fp8_format, g);
}

static int fp8_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen)
{
    return dsv4_indexk_init(&fp8_format, host, config, state_p, err, errlen);
}

static const dsv4_option fp8_options[] = {
    DSV4_INDEXK_COMMON_OPTIONS(fp8_config),
    {.key = "scale_format",
     .type = DSV4_OPT_ENUM,
     .def = "f32",
     .min = 1,
     .max = 0,
     .enum_values = fp8_scale_formats,
     .help = "per-row scale: f32 = max(amax, 1e-4)/448 exactly, ue8m0 = that rounded up to "
             "a power of two (as vLLM's ue8m0 option)",
     .offset = offsetof(fp8_config, scale_format)},
    {.key = NULL},
};

static const dsv4_indexk_ops fp8_ops = {
    .struct_size = sizeof(dsv4_indexk_ops),
    .page_bytes = fp8_page_bytes,
    .row_bytes = fp8_row_bytes,
    .store = dsv4_indexk_store,
    .load = dsv4_indexk_load,
    .score = dsv4_indexk_score,
    DSV4_INDEXK_CUDA_OPS,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_INDEXK_DESC_HEADER,
    .name = "fp8",
    .version = PACKAGE_VERSION,
    .description = "index-K rows as e4m3 with one fp32 scale per row (dim + 4 B per row)",
    .flags = 0,
    .options = fp8_options,
    .config_size = sizeof(fp8_config),
    .init = fp8_init,
    .ops = &fp8_ops,
};
