/* indexk.h: the index-K precision family (plugins/indexk/: f32, bf16, fp8).
 *
 * An indexk plugin decides how the lightning indexer's key rows are stored in a page of
 * the DSV4_BUF_INDEXK buffer, how they are written and how a query is scored against
 * them. The model never touches index-K bytes itself: it stores and scores only through
 * these ops, so the storage format is the plugin's alone.
 *
 * Geometry (row width, rows per page) comes from the model through dsv4_indexk_geom, never
 * from constants. Rows of one sequence are numbered 0..n-1; row r lives in
 * pages[r / rows_per_page] at slot r % rows_per_page.
 *
 * Score (reference/dsv4-model-spec.md §3.6), for one query with n_heads heads:
 *   score[r] = scale * sum_h w[h] * relu(q[h] . k_r)
 * accumulated in a fixed order (heads ascending, dims ascending), so a plugin's scores do
 * not depend on threading or batching.
 */
#ifndef DSV4D_INDEXK_H
#define DSV4D_INDEXK_H

#include <dsv4d/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_INDEXK_VERSION 1

typedef struct dsv4_indexk_geom {
    uint32_t struct_size;
    uint32_t dim;            /* DI: values per row */
    uint32_t rows_per_page;  /* index-K rows per page (page_tokens / 4) */
} dsv4_indexk_geom;

typedef struct dsv4_indexk_slot {
    uint32_t page;           /* page id (block in the DSV4_BUF_INDEXK buffer) */
    uint32_t row;            /* row inside the page, < rows_per_page */
} dsv4_indexk_slot;

typedef struct dsv4_indexk_ops {
    uint32_t struct_size;
    /* Bytes of one page for this geometry (the block size of a DSV4_BUF_INDEXK buffer). */
    size_t (*page_bytes)(const dsv4_indexk_geom *g);
    /* Bytes per row as stored, including its share of scales (for sizing and docs). */
    size_t (*row_bytes)(const dsv4_indexk_geom *g);
    /* Write n rows (rows[i] has g->dim floats) to their slots. pool is the buffer's base;
     * page p starts at pool + p * page_bytes. 0 or a negative status. */
    int (*store)(void *state, const dsv4_indexk_geom *g, void *pool, const float *rows,
                 const dsv4_indexk_slot *slots, size_t n);
    /* Read n rows back as floats (dequantised). */
    int (*load)(void *state, const dsv4_indexk_geom *g, const void *pool,
                const dsv4_indexk_slot *slots, size_t n, float *rows_out);
    /* Score one query (q: [n_heads][dim], w: [n_heads]) against rows 0..n_rows-1 of a
     * sequence whose pages are listed in pages. Writes scores_out[0..n_rows-1]. */
    int (*score)(void *state, const dsv4_indexk_geom *g, const void *pool,
                 const uint32_t *pages, uint32_t n_rows, const float *q, const float *w,
                 uint32_t n_heads, float scale, float *scores_out);

    /* ---- CUDA paths (appended; check DSV4_HAS_FIELD, then non-NULL) ----------------------
     * NULL when the plugin was built without CUDA: the CPU ops above never need a GPU.
     * Pointers named *_dev are device memory, pool_dev is the DSV4_BUF_INDEXK buffer on the
     * device (same page layout as on the host), stream is a cudaStream_t. Both only queue
     * work on stream; they return 0 or a negative status (-ENOTSUP for a shape the kernels
     * do not handle, -ENODEV without a device, -EIO when CUDA refused the launch).
     *
     * score_cuda: a batch of n_queries decode queries, query b with n_rows_dev[b] rows (at
     * most max_rows) in the pages listed from pages_dev[page_start_dev[b]] on, heads
     * q_dev[b][n_heads][dim] and weights w_dev[b][n_heads]; writes
     * scores_dev[b * max_rows + r] for r < n_rows_dev[b]. Same formula as score; the dots
     * run on tensor cores, so values differ from score within the format's tolerance
     * (kernels/cuda/cuda_kernels.h says how), and are reproducible bit for bit. */
    int (*score_cuda)(void *state, const dsv4_indexk_geom *g, const void *pool_dev,
                      const uint32_t *pages_dev, const uint32_t *page_start_dev,
                      const uint32_t *n_rows_dev, uint32_t n_queries, uint32_t max_rows,
                      const float *q_dev, const float *w_dev, uint32_t n_heads, float scale,
                      float *scores_dev, void *stream);
    /* topk_cuda: for each query, idx_dev[b * k + i] (i < min(k, n_rows_dev[b])) = its rows
     * ranked by scores_dev[b * max_rows + r]: higher score first, ties to the lower row,
     * NaN last (the CPU engine's order); entries from min(k, n) to k are UINT32_MAX. */
    int (*topk_cuda)(void *state, const float *scores_dev, const uint32_t *n_rows_dev,
                     uint32_t n_queries, uint32_t max_rows, uint32_t k, uint32_t *idx_dev,
                     void *stream);
    /* store_cuda (appended after topk_cuda; check DSV4_HAS_FIELD, then non-NULL): store's
     * device twin, so a CUDA forward never stages index-K pages on the host. Writes the n
     * rows rows_dev[i][g->dim] (device floats) to slots_dev[i] (device dsv4_indexk_slot) of
     * pool_dev, byte for byte what store writes for the same rows. Argument checks are
     * done on the host; slot and value checks happen on the device, where no status can be
     * returned, so a batch store would refuse (a slot row >= rows_per_page, or a non-finite
     * value while reject_nonfinite is on) writes nothing and sets *refused_dev to a
     * non-zero value (it is left alone otherwise); the caller reads it once its stream has
     * been waited for. */
    int (*store_cuda)(void *state, const dsv4_indexk_geom *g, void *pool_dev,
                      const float *rows_dev, const dsv4_indexk_slot *slots_dev, uint32_t n,
                      uint32_t *refused_dev, void *stream);
} dsv4_indexk_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_INDEXK_H */
