/* cuda.c: the CUDA ops of the indexk plugins (score, top-k, row store): argument checks in
 * the terms of indexk.h, then the kernels of kernels/cuda, which read and write each
 * plugin's page layout directly. */
#include "config.h"

#include "plugins/indexk/common.h"

#include "kernels/cuda/indexk_store.h"

#include <errno.h>

/* A failure of the kernels is logged once per call with the plugin's subject, so a caller
 * that falls back to the CPU still leaves a trace of why. -ENOTSUP is an answer, not a
 * failure ("these kernels do not take this shape": the caller uses the host path), so it
 * goes back unlogged. */
static int indexk_cuda_done(const dsv4_indexk_state *st, const char *op, int rc)
{
    if (rc != 0 && rc != -ENOTSUP)
        st->host->log(DSV4_LOG_WARN, st->fmt->subject, "%s failed (status %d)", op, rc);
    return rc;
}

int dsv4_indexk_score_cuda(void *state, const dsv4_indexk_geom *g, const void *pool_dev,
                           const uint32_t *pages_dev, const uint32_t *page_start_dev,
                           const uint32_t *n_rows_dev, uint32_t n_queries, uint32_t max_rows,
                           const float *q_dev, const float *w_dev, uint32_t n_heads, float scale,
                           float *scores_dev, void *stream)
{
    const dsv4_indexk_state *st = state;
    const dsv4_cuda_ik_batch batch = {
        .n_queries = n_queries,
        .n_heads = n_heads,
        .max_rows = max_rows,
        .scale = scale,
        .pages_dev = pages_dev,
        .page_start_dev = page_start_dev,
        .n_rows_dev = n_rows_dev,
        .q_dev = q_dev,
        .w_dev = w_dev,
        .query = dsv4_indexk_query(st),
    };

    if (!dsv4_indexk_geom_ok(g))
        return -EINVAL;
    return indexk_cuda_done(st, "score_cuda",
                            dsv4_cuda_indexer_score(st->fmt->cuda_format, g->dim, g->rows_per_page,
                                                    pool_dev, &batch, scores_dev, stream));
}

int dsv4_indexk_topk_cuda(void *state, const float *scores_dev, const uint32_t *n_rows_dev,
                          uint32_t n_queries, uint32_t max_rows, uint32_t k, uint32_t *idx_dev,
                          void *stream)
{
    return indexk_cuda_done(
        state, "topk_cuda",
        dsv4_cuda_topk(scores_dev, max_rows, n_rows_dev, n_queries, k, idx_dev, stream));
}

int dsv4_indexk_store_cuda(void *state, const dsv4_indexk_geom *g, void *pool_dev,
                           const float *rows_dev, const dsv4_indexk_slot *slots_dev, uint32_t n,
                           uint32_t *refused_dev, void *stream)
{
    const dsv4_indexk_state *st = state;

    if (!dsv4_indexk_geom_ok(g))
        return -EINVAL;
    /* the kernel reads slots as (page, row) word pairs */
    _Static_assert(sizeof(dsv4_indexk_slot) == 2 * sizeof(uint32_t), "slot is two words");
    const dsv4_cuda_ik_store_fmt fmt = {
        .format = st->fmt->cuda_format,
        .dim = g->dim,
        .rows_per_page = g->rows_per_page,
        .pow2_scale = st->fmt->pow2_scale && st->fmt->pow2_scale(st->config),
        .reject_nonfinite = st->config->reject_nonfinite,
    };
    int rc = dsv4_cuda_indexk_store(&fmt, pool_dev, rows_dev, (const uint32_t *)slots_dev, n,
                                    refused_dev, stream);
    return indexk_cuda_done(st, "store_cuda", rc);
}
