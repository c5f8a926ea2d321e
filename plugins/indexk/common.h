/* common.h: what the three indexk plugins (f32, bf16, fp8) share.
 *
 * A plugin is a row format: how many bytes a row takes, how a row of floats is encoded
 * into its slot of a page and decoded back. Everything else lives here once: page and
 * slot addressing, argument checks, the store/load loops, the score loop and the shared
 * config key. The plugin files only add their encoder, decoder and descriptor.
 *
 * Page layout: every format stores a page as rows_per_page equal "row records"; the fp8
 * format splits its record into an e4m3 part (first rows_per_page * dim bytes of the
 * page, row-major) and an fp32 scale part (after them), like vLLM's indexer cache, so a
 * page is always rows_per_page * row_bytes bytes.
 *
 * Score: decode each row into floats (exactly what load returns), then
 *     dot_h  = sum over d ascending of q[h][d] * k[d]          (float accumulator)
 *     acc    = sum over h ascending of w[h] * relu(dot_h)      (float accumulator)
 *     score  = scale * acc
 * This order is fixed and documented so scores do not depend on threading or batching,
 * and a score can be reproduced exactly from load()'s output. A format whose config asks
 * for an e4m3 query (fp8's query_format) first replaces each head q[h] by its e4m3
 * quantisation, decoded: code * s, with codes and s from dsv4_indexk_e4m3_quantise (the
 * quantisation of an fp8 row), which is what the CUDA kernels score too.
 */
#ifndef DSV4_PLUGINS_INDEXK_COMMON_H
#define DSV4_PLUGINS_INDEXK_COMMON_H

#include <dsv4d/indexk.h>

#include "kernels/cuda/cuda_kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The head of every indexk plugin's config struct (the fp8 struct extends it). */
typedef struct dsv4_indexk_config {
    bool reject_nonfinite;
} dsv4_indexk_config;

/* The schema entry for the shared keys; `conf_type` is the plugin's config struct. */
#define DSV4_INDEXK_COMMON_OPTIONS(conf_type)                                                      \
    {                                                                                              \
        .key = "reject_nonfinite", .type = DSV4_OPT_BOOL, .def = "true", .min = 1, .max = 0,       \
        .help = "refuse to store a row holding NaN or infinity (it would poison top-k "            \
                "selection for every later query)",                                                \
        .offset = offsetof(conf_type, common.reject_nonfinite)                                     \
    }

typedef struct dsv4_indexk_format {
    const char *subject; /* "indexk/fp8", for log messages */
    /* Bytes one row takes in a page, its share of scales included. */
    size_t (*row_bytes)(const dsv4_indexk_geom *g);
    /* Encode row (g->dim floats, all finite unless the config allows otherwise) into
     * slot of the page that starts at page. */
    void (*encode)(const void *config, const dsv4_indexk_geom *g, uint8_t *page, uint32_t slot,
                   const float *row);
    void (*decode)(const dsv4_indexk_geom *g, const uint8_t *page, uint32_t slot, float *row_out);
    dsv4_cuda_ik_format cuda_format; /* the same page layout, for the CUDA kernels */
    /* The encoder rounds its scale up to a power of two under this config (NULL: never),
     * which the device encoder must do alike. */
    bool (*pow2_scale)(const void *config);
    /* How this config scores queries (NULL: DSV4_CUDA_IK_QUERY_F32, the query as given). */
    dsv4_cuda_ik_query (*query)(const void *config);
} dsv4_indexk_format;

/* What init creates: the state every op receives. */
typedef struct dsv4_indexk_state {
    const dsv4_indexk_format *fmt;
    const dsv4_host *host;
    const dsv4_indexk_config *config;
} dsv4_indexk_state;

/* The e4m3 codes[0 .. n) of x[0 .. n) and their scale s (returned): s = max(amax, 1e-4) / 448
 * with amax the largest finite |x| (only finite values set it: an infinity saturates to
 * +-448 and a NaN stays NaN instead of wiping out the rest), rounded up to a power of two
 * with pow2; codes[i] = e4m3(x[i] / s). An fp8 row is stored so, an e4m3 query scored so. */
float dsv4_indexk_e4m3_quantise(const float *x, uint32_t n, bool pow2, uint8_t *codes);

/* How state's config scores queries (its format's query hook, or the query as given). */
dsv4_cuda_ik_query dsv4_indexk_query(const dsv4_indexk_state *st);

/* g is present, new enough and describes non-empty rows and pages. */
bool dsv4_indexk_geom_ok(const dsv4_indexk_geom *g);

/* rows_per_page * fmt->row_bytes(g), or 0 for an unusable geometry. */
size_t dsv4_indexk_page_bytes(const dsv4_indexk_format *fmt, const dsv4_indexk_geom *g);

/* Create the shared state for fmt; config is the daemon's parsed struct, which starts
 * with dsv4_indexk_config and outlives the state. 0 or -ENOMEM (err says so). */
int dsv4_indexk_init(const dsv4_indexk_format *fmt, const dsv4_host *host, const void *config,
                     void **state_p, char *err, size_t errlen);

/* The hooks and ops every indexk plugin uses unchanged. store fails with -EINVAL on a bad
 * geometry or a slot row >= rows_per_page and with -EDOM on a non-finite value (when
 * reject_nonfinite is on); it checks every row before writing any. load and score fail
 * with -EINVAL on bad arguments and -ENOMEM when scratch memory cannot be had. */
int dsv4_indexk_probe(const dsv4_host *host, char *why, size_t whylen);
int dsv4_indexk_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                      dsv4_diag *diag);
void dsv4_indexk_fini(void *state);
int dsv4_indexk_store(void *state, const dsv4_indexk_geom *g, void *pool, const float *rows,
                      const dsv4_indexk_slot *slots, size_t n);
int dsv4_indexk_load(void *state, const dsv4_indexk_geom *g, const void *pool,
                     const dsv4_indexk_slot *slots, size_t n, float *rows_out);
int dsv4_indexk_score(void *state, const dsv4_indexk_geom *g, const void *pool,
                      const uint32_t *pages, uint32_t n_rows, const float *q, const float *w,
                      uint32_t n_heads, float scale, float *scores_out);

/* The CUDA ops (cuda.c, built with CUDA only): argument checks, then kernels/cuda. The ops
 * table lists them through DSV4_INDEXK_CUDA_OPS, which leaves them NULL in a build without
 * CUDA. */
#ifdef HAVE_CUDA
int dsv4_indexk_score_cuda(void *state, const dsv4_indexk_geom *g, const void *pool_dev,
                           const uint32_t *pages_dev, const uint32_t *page_start_dev,
                           const uint32_t *n_rows_dev, uint32_t n_queries, uint32_t max_rows,
                           const float *q_dev, const float *w_dev, uint32_t n_heads, float scale,
                           float *scores_dev, void *stream);
int dsv4_indexk_topk_cuda(void *state, const float *scores_dev, const uint32_t *n_rows_dev,
                          uint32_t n_queries, uint32_t max_rows, uint32_t k, uint32_t *idx_dev,
                          void *stream);
int dsv4_indexk_store_cuda(void *state, const dsv4_indexk_geom *g, void *pool_dev,
                           const float *rows_dev, const dsv4_indexk_slot *slots_dev, uint32_t n,
                           uint32_t *refused_dev, void *stream);
#define DSV4_INDEXK_CUDA_OPS                                                                       \
    .score_cuda = dsv4_indexk_score_cuda, .topk_cuda = dsv4_indexk_topk_cuda,                      \
    .store_cuda = dsv4_indexk_store_cuda
#else
#define DSV4_INDEXK_CUDA_OPS .score_cuda = NULL, .topk_cuda = NULL, .store_cuda = NULL
#endif

/* What the plugins differ in only by their format: the page size and init bound to format
 * (a dsv4_indexk_format whose row_bytes is row_bytes), the ops table and the exported
 * descriptor of plugin `name` with its options (ending in {.key = NULL}) filling a
 * conf_type. */
#define DSV4_INDEXK_PLUGIN(name_, format, row_bytes_, options_, conf_type, description_)           \
    static size_t indexk_page_bytes(const dsv4_indexk_geom *g)                                     \
    {                                                                                              \
        return dsv4_indexk_page_bytes(&(format), g);                                               \
    }                                                                                              \
    static int indexk_init(const dsv4_host *host, const void *config, void **state_p, char *err,   \
                           size_t errlen)                                                          \
    {                                                                                              \
        return dsv4_indexk_init(&(format), host, config, state_p, err, errlen);                    \
    }                                                                                              \
    static const dsv4_indexk_ops indexk_ops = {                                                    \
        .struct_size = sizeof(dsv4_indexk_ops),                                                    \
        .page_bytes = indexk_page_bytes,                                                           \
        .row_bytes = row_bytes_,                                                                   \
        .store = dsv4_indexk_store,                                                                \
        .load = dsv4_indexk_load,                                                                  \
        .score = dsv4_indexk_score,                                                                \
        DSV4_INDEXK_CUDA_OPS,                                                                      \
    };                                                                                             \
    const dsv4_plugin_desc dsv4_plugin = {                                                         \
        .abi_major = DSV4_ABI_MAJOR,                                                               \
        .abi_minor = DSV4_ABI_MINOR,                                                               \
        .struct_size = sizeof(dsv4_plugin_desc),                                                   \
        .build_signature = DSV4_BUILD_SIGNATURE,                                                   \
        .family = DSV4_FAMILY_INDEXK,                                                              \
        .family_version = DSV4_INDEXK_VERSION,                                                     \
        .name = name_,                                                                             \
        .version = PACKAGE_VERSION,                                                                \
        .description = description_,                                                               \
        .flags = 0,                                                                                \
        .options = options_,                                                                       \
        .config_size = sizeof(conf_type),                                                          \
        .probe = dsv4_indexk_probe,                                                                \
        .check = dsv4_indexk_check,                                                                \
        .init = indexk_init,                                                                       \
        .fini = dsv4_indexk_fini,                                                                  \
        .ops = &indexk_ops,                                                                        \
    }

#endif
