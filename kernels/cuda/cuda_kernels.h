/* cuda_kernels.h: the C ABI of the CUDA kernels (the .cu files beside it, built for sm_90).
 *
 * Plain C types only: no CUDA header leaks to callers. Every pointer argument named *_dev
 * is device memory; stream is a cudaStream_t passed as void * (NULL = the legacy default
 * stream). Calls are asynchronous: they queue work on stream and return 0, or a negative
 * errno: -EINVAL for bad arguments, -ENOTSUP for a shape the kernels do not handle,
 * -ENODEV when no usable CUDA device is present, -EIO when CUDA refused the launch.
 *
 * Determinism: every kernel here has a reduction order fixed by the kernel alone, never by
 * the grid size, the batch or the other queries in it (DESIGN.md §6).
 */
#ifndef DSV4_KERNELS_CUDA_H
#define DSV4_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- page checksums -------------------------------------------------------------------- */
/* hashes_dev[i] = XXH64(blocks_dev[i], lens_dev[i], seed) for i < n, bit for bit what
 * libxxhash computes, in one launch. Blocks may have any alignment and length. */
int dsv4_cuda_xxh64(const void *const *blocks_dev, const uint64_t *lens_dev, uint32_t n,
                    uint64_t seed, uint64_t *hashes_dev, void *stream);

/* ---- lightning indexer ----------------------------------------------------------------- */
/* Index-K page formats, byte for byte those of plugins/indexk (f32.c, bf16.c, fp8.c): a
 * page is rows_per_page rows of dim values, row-major; fp8 pages hold the e4m3 bytes of
 * all rows first, then one fp32 scale per row. */
typedef enum dsv4_cuda_ik_format {
    DSV4_CUDA_IK_F32,
    DSV4_CUDA_IK_BF16,
    DSV4_CUDA_IK_FP8,
} dsv4_cuda_ik_format;

/* How the kernels take a batch's queries. F32: each head as the scores' formula has it,
 * rounded inside the kernel as dsv4_cuda_indexer_score says. E4M3 (fp8 keys only): each
 * head quantised as the fp8 rows are (plugins/indexk/fp8.c): scale s = max(amax, 1e-4) / 448
 * over its finite values, each value e4m3(q / s) (IEEE division, saturating, NaN kept), and
 * scored as e4m3 x e4m3 with s moved into the head weight; E4M3_UE8M0 rounds s up to a power
 * of two first. The CPU plugin quantises the same way, so both score the same query. */
typedef enum dsv4_cuda_ik_query {
    DSV4_CUDA_IK_QUERY_F32,
    DSV4_CUDA_IK_QUERY_E4M3,
    DSV4_CUDA_IK_QUERY_E4M3_UE8M0,
} dsv4_cuda_ik_query;

/* A batch of decode queries, each against its own sequence of index-K rows. Query b has
 * n_rows_dev[b] rows (at most max_rows) in the pages listed from
 * pages_dev[page_start_dev[b]] on (row r in page list entry r / rows_per_page, slot
 * r % rows_per_page), heads q_dev[b][n_heads][dim] and head weights w_dev[b][n_heads]. */
typedef struct dsv4_cuda_ik_batch {
    uint32_t n_queries;
    uint32_t n_heads;
    uint32_t max_rows;
    float scale;
    const uint32_t *pages_dev;
    const uint32_t *page_start_dev;
    const uint32_t *n_rows_dev;
    const float *q_dev;
    const float *w_dev;
    dsv4_cuda_ik_query query; /* 0 (F32) unless set */
} dsv4_cuda_ik_batch;

/* scores_dev[b * max_rows + r] = scale * sum_h w[h] * relu(q[h] . k_r) for r < n_rows[b]
 * (entries past n_rows are left alone), reading the pages of pool_dev (page p at
 * pool_dev + p * page bytes) in their stored format. The dots run on tensor cores: keys
 * exactly as stored, queries rounded per head to f16 (fp8 keys) or bf16 (bf16 keys) after
 * dividing by the head's largest |q|; f32 keys and queries are split into two bf16 terms
 * each, which keeps about 16 bits. With an e4m3 query (batch->query) fp8 keys are scored on
 * e4m3 MMAs where the device code has them (dim 128, pages of a multiple of 64 rows), whose
 * accumulation is not full f32 (bench/results/2026-11-30-indexer-e4m3q-h200.md measures
 * it), or as f16 values of the e4m3 query otherwise; -EINVAL for other keys. Handles dim
 * 64 or 128, n_heads <= 64 and rows_per_page a multiple of 8 up to 256 whose pages fit
 * twice in 200 KiB of shared memory; -ENOTSUP otherwise. */
int dsv4_cuda_indexer_score(dsv4_cuda_ik_format format, uint32_t dim, uint32_t rows_per_page,
                            const void *pool_dev, const dsv4_cuda_ik_batch *batch,
                            float *scores_dev, void *stream);

/* ---- top-k ----------------------------------------------------------------------------- */
#define DSV4_CUDA_TOPK_MAX 2048u
/* For each query b < n_queries: idx_dev[b * k + i] for i < min(k, n_rows[b]) = the rows of
 * scores_dev[b * stride ..] ranked best first: higher score first, ties to the lower row,
 * NaN below everything (the CPU engine's dsv4_k_topk order); the entries from min(k, n)
 * to k are set to UINT32_MAX. k <= DSV4_CUDA_TOPK_MAX; n_rows[b] is clamped to stride.
 * One cluster of thread blocks per query (radix select), exact. */
int dsv4_cuda_topk(const float *scores_dev, size_t stride, const uint32_t *n_rows_dev,
                   uint32_t n_queries, uint32_t k, uint32_t *idx_dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_H */
