/* fp8.c: the indexk/fp8 plugin: index-K rows stored as OCP e4m3 with one fp32 scale per
 * row (dim + 4 bytes per row; 8448 B for a page of 64 rows x 128 dims).
 *
 * Page layout, as in vLLM's indexer cache: the e4m3 bytes of all rows first (row-major,
 * rows_per_page * dim bytes), then rows_per_page fp32 scales. The scale of a row is
 * max(amax, 1e-4) / 448 so the largest value lands on the top e4m3 code; with
 * scale_format = ue8m0 it is rounded up to a power of two (vLLM's ue8m0 option), which
 * costs up to one bit of precision but makes dequantisation an exact exponent shift.
 *
 * query_format = e4m3 scores each query head quantised the same way (its own scale, the
 * same scale_format) as e4m3 against the e4m3 keys, as DeepSeek-V3.2's indexer runs in vLLM
 * and SGLang (fp8 query x fp8 key); on the GPU that runs on e4m3 tensor cores, with half the
 * f16 path's tensor work per byte read. The default, f32, scores the query as given. */
#include "config.h"

#include "plugins/indexk/common.h"

#include "kernels/cpu/numfmt.h"

#include <string.h>

enum { FP8_SCALE_F32, FP8_SCALE_UE8M0 };
static const char *const fp8_scale_formats[] = {"f32", "ue8m0", NULL};

enum { FP8_QUERY_F32, FP8_QUERY_E4M3 };
static const char *const fp8_query_formats[] = {"f32", "e4m3", NULL};

typedef struct fp8_config {
    dsv4_indexk_config common;
    int scale_format;
    int query_format;
} fp8_config;

static size_t fp8_row_bytes(const dsv4_indexk_geom *g)
{
    return (size_t)g->dim + sizeof(float);
}

static uint8_t *fp8_scale_at(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot)
{
    return (uint8_t *)page + (size_t)g->rows_per_page * g->dim + (size_t)slot * sizeof(float);
}

static void fp8_encode(const void *config, const dsv4_indexk_geom *g, uint8_t *page, uint32_t slot,
                       const float *row)
{
    const fp8_config *cfg = config;
    float scale = dsv4_indexk_e4m3_quantise(row, g->dim, cfg->scale_format == FP8_SCALE_UE8M0,
                                            page + (size_t)slot * g->dim);

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

static dsv4_cuda_ik_query fp8_query(const void *config)
{
    if (((const fp8_config *)config)->query_format == FP8_QUERY_F32)
        return DSV4_CUDA_IK_QUERY_F32;
    return fp8_pow2_scale(config) ? DSV4_CUDA_IK_QUERY_E4M3_UE8M0 : DSV4_CUDA_IK_QUERY_E4M3;
}

static const dsv4_indexk_format fp8_format = {
    .subject = "indexk/fp8",
    .row_bytes = fp8_row_bytes,
    .encode = fp8_encode,
    .decode = fp8_decode,
    .cuda_format = DSV4_CUDA_IK_FP8,
    .pow2_scale = fp8_pow2_scale,
    .query = fp8_query,
};

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
    {.key = "query_format",
     .type = DSV4_OPT_ENUM,
     .def = "f32",
     .min = 1,
     .max = 0,
     .enum_values = fp8_query_formats,
     .help = "query in the score: f32 = as given, e4m3 = each head quantised as a row is (its "
             "own scale, scale_format) and scored e4m3 x e4m3, as DeepSeek-V3.2's indexer in "
             "vLLM/SGLang",
     .offset = offsetof(fp8_config, query_format)},
    {.key = NULL},
};

DSV4_INDEXK_PLUGIN("fp8", fp8_format, fp8_row_bytes, fp8_options, fp8_config,
                   "index-K rows as e4m3 with one fp32 scale per row (dim + 4 B per row)");
