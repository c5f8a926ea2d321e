/* kvpool.h: the paged KV pool and per-request state slots (DESIGN.md §5, spec §4).
 *
 * The pool owns every KV buffer of every layer and describes them in one
 * dsv4_kv_layout (include/dsv4d/kv.h) that the host tier, PD transfer, checksums and
 * eviction iterate. A page id addresses one block in every paged buffer of every layer:
 * page_tokens source tokens = page_tokens/rate_csa CSA rows, as many index-K rows (in the
 * indexk plugin's page format, block size ops->page_bytes) and page_tokens/rate_hca HCA
 * rows. A state slot addresses one block in every state buffer: the window ring (W rows
 * of D) and the compressor carry (main and indexer for CSA, main for HCA).
 *
 * Pages are reference counted (the radix prefix cache will share them); slots belong to
 * one request. Kernels reach a layer's memory only through dsv4_kv_pool_layer_on() (or
 * dsv4_kv_pool_layer(), its host-fenced form).
 */
#ifndef DSV4_CORE_KVPOOL_H
#define DSV4_CORE_KVPOOL_H

#include <dsv4d/indexk.h>
#include <dsv4d/kv.h>

#include "core/model/model.h"
#include "kernels/kernels.h"

typedef struct dsv4_kv_pool dsv4_kv_pool;

typedef struct dsv4_kv_pool_conf {
    const dsv4_model_config *model;
    dsv4_kv_dtype kv_dtype; /* of compressed and window rows (dsv4_kv_rowfmt) */
    uint32_t page_tokens;   /* source tokens per page (256) */
    uint32_t n_pages;
    uint32_t n_slots;
    const dsv4_indexk_ops *indexk; /* formats DSV4_BUF_INDEXK */
    const char *indexk_name;
} dsv4_kv_pool_conf;

/* One layer's buffers (NULL where the layer has no such buffer). */
typedef struct dsv4_kv_layer_view {
    const dsv4_kv_buffer *buf[DSV4_BUF_KIND_COUNT];
} dsv4_kv_layer_view;

/* The compressor carry inside one state block (f32, spec §3.11): the pending tokens of
 * the incomplete window (kv and logit = gate + ape, both [rate][overlap*dim]) and, for
 * overlapping compressors, the "a" half of the last complete window ([rate][dim] each). */
typedef struct dsv4_kv_carry {
    float *pend_kv, *pend_logit;
    float *prev_kv, *prev_logit; /* NULL without overlap */
} dsv4_kv_carry;

/* The format of the window and compressed rows of model m stored as kv_dtype: f32,
 * bf16, or fp8 with the nope dims (head_dim - rope dims) in e4m3 and the rope dims in
 * bf16 (kernels.h; 584 bytes at head_dim 512, 64 rope dims). */
dsv4_k_rowfmt dsv4_kv_rowfmt(const dsv4_model_config *m, dsv4_kv_dtype kv_dtype);

/* NULL with the reason in err (bad geometry, a kv dtype the model's rows cannot take,
 * out of memory). */
dsv4_kv_pool *dsv4_kv_pool_new(const dsv4_kv_pool_conf *conf, char *err, size_t errlen);
/* The same pool with every buffer in one shared memory object (a memfd) instead of
 * private memory, so another process on the host can map it: the decode side of a PD pair
 * over transport/local needs this. The layout's shm_fd, shm_base and shm_bytes describe
 * the object; it lives until dsv4_kv_pool_free. */
dsv4_kv_pool *dsv4_kv_pool_new_shared(const dsv4_kv_pool_conf *conf, char *err, size_t errlen);
/* The same pool with every buffer in device memory of CUDA device cuda_device, which the
 * caller has made current (kernels/cuda/model.h dsv4_cuda_device_use): same layout and
 * page ids, buffers with mem = DSV4_MEM_CUDA. Only the CUDA forward and device copies
 * may touch it. NULL also in a build without CUDA. */
dsv4_kv_pool *dsv4_kv_pool_new_cuda(const dsv4_kv_pool_conf *conf, int32_t cuda_device, char *err,
                                    size_t errlen);
void dsv4_kv_pool_free(dsv4_kv_pool *pool);

const dsv4_kv_layout *dsv4_kv_pool_layout(const dsv4_kv_pool *pool);

/* The one accessor through which attention and the indexer get a layer's KV memory.
 * It first fences that layer (the host tier's per-layer load fence, DESIGN.md §9), so no
 * kernel can read a layer before its load has landed. With stream NULL the host waits
 * (the pool's fence): the CPU forward and host readers. With a CUDA stream (cudaStream_t
 * as void *) that stream is ordered after the load instead (the pool's stream fence, where
 * one is installed; else the host waits as above): the CUDA forward, whose kernels on that
 * stream are what reads the layer. Returns 0, -EINVAL for a layer out of range, or the
 * fence's failure (view_p is then unset). */
int dsv4_kv_pool_layer_on(dsv4_kv_pool *pool, uint32_t layer, void *stream,
                          dsv4_kv_layer_view *view_p);
/* dsv4_kv_pool_layer_on with the host fence (stream NULL). */
int dsv4_kv_pool_layer(dsv4_kv_pool *pool, uint32_t layer, dsv4_kv_layer_view *view_p);

/* A fence: returns once `layer`'s KV memory may be read (0), or a negative status. */
typedef int (*dsv4_kv_fence_fn)(void *ctx, uint32_t layer);
/* A stream fence: orders `stream` after `layer`'s KV memory is ready and returns without
 * waiting (0), or a negative status. */
typedef int (*dsv4_kv_stream_fence_fn)(void *ctx, uint32_t layer, void *stream);
/* Install the fence dsv4_kv_pool_layer() calls (fn NULL removes it, and the stream fence
 * with it). The host tier (core/hostcache/tier.h) installs one for its lifetime. */
void dsv4_kv_pool_set_fence(dsv4_kv_pool *pool, dsv4_kv_fence_fn fn, void *ctx);
/* Install the stream fence beside the fence, called with the same ctx (fn NULL removes
 * it). Install the fence first: a stream fence without one is never called. */
void dsv4_kv_pool_set_stream_fence(dsv4_kv_pool *pool, dsv4_kv_stream_fence_fn fn);

/* Page allocator: a new page has one reference. -ENOSPC when none is free. */
int dsv4_kv_page_alloc(dsv4_kv_pool *pool, uint32_t *page_p);
void dsv4_kv_page_ref(dsv4_kv_pool *pool, uint32_t page);
/* Drops one reference; the page is free again at zero. */
void dsv4_kv_page_unref(dsv4_kv_pool *pool, uint32_t page);
uint32_t dsv4_kv_pages_free(const dsv4_kv_pool *pool);

/* State slots: -ENOSPC when none is free. */
int dsv4_kv_slot_alloc(dsv4_kv_pool *pool, uint32_t *slot_p);
void dsv4_kv_slot_free(dsv4_kv_pool *pool, uint32_t slot);
uint32_t dsv4_kv_slots_free(const dsv4_kv_pool *pool);

/* Copy block src over block dst of buffer b (a state slot snapshot): memcpy, or for a
 * device buffer a device-to-device copy that has completed on return. 0 or -EIO. */
int dsv4_kv_block_copy(const dsv4_kv_buffer *b, uint32_t dst, uint32_t src);

/* Bytes of one carry block for a compressor of `rate` over `dim` channels. */
size_t dsv4_kv_carry_bytes(bool overlap, uint32_t rate, uint32_t dim);
/* The carry arrays inside block (a state block of a *_CARRY buffer). */
dsv4_kv_carry dsv4_kv_carry_at(uint8_t *block, bool overlap, uint32_t rate, uint32_t dim);

#endif
