/* kvpool.c: allocation of the KV buffers, the buffer table, and the page and state-slot
 * allocators (see kvpool.h). */
#include "config.h" /* _GNU_SOURCE for memfd_create */

#include "core/engine/kvpool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"
#endif

/* Buffers and carry blocks start on cache lines. */
#define DSV4_KV_ALIGN 64

struct dsv4_kv_pool {
    dsv4_kv_layout layout;
    dsv4_kv_buffer *buffers;                             /* layout.buffers */
    int16_t index[DSV4_MAX_LAYERS][DSV4_BUF_KIND_COUNT]; /* buffer per (layer, kind), -1 */
    uint8_t layer_kind[DSV4_MAX_LAYERS];
    char *indexk_name;
    uint32_t *page_refs; /* [n_pages] */
    uint32_t *page_free; /* stack of free page ids */
    uint32_t n_page_free;
    uint32_t *slot_free; /* stack of free slot ids */
    uint32_t n_slot_free;
    dsv4_kv_fence_fn fence;               /* the host tier's per-layer load fence, or NULL */
    dsv4_kv_stream_fence_fn stream_fence; /* its form for a CUDA stream, or NULL */
    void *fence_ctx;
    /* Shared pools (conf->shared): every buffer is carved out of one memfd mapping. The
     * first pass over the geometry only adds up shm_bytes (measuring), the second places
     * the buffers at shm_used. */
    bool measuring;
    int shm_fd;
    uint8_t *shm_base;
    size_t shm_bytes, shm_used;
    dsv4_mem mem; /* where every buffer lives */
    int32_t cuda_device;
};

dsv4_k_rowfmt dsv4_kv_rowfmt(const dsv4_model_config *m, dsv4_kv_dtype kv_dtype)
{
    dsv4_k_dtype t = kv_dtype == DSV4_KV_FP8    ? DSV4_K_FP8
                     : kv_dtype == DSV4_KV_BF16 ? DSV4_K_BF16
                                                : DSV4_K_F32;
    return (dsv4_k_rowfmt){t, m->head_dim, m->rope_main.dims};
}

size_t dsv4_kv_carry_bytes(bool overlap, uint32_t rate, uint32_t dim)
{
    size_t c = overlap ? 2 : 1;
    size_t floats = 2 * (size_t)rate * c * dim + (overlap ? 2 * (size_t)rate * dim : 0);
    return (floats * sizeof(float) + DSV4_KV_ALIGN - 1) / DSV4_KV_ALIGN * DSV4_KV_ALIGN;
}

dsv4_kv_carry dsv4_kv_carry_at(uint8_t *block, bool overlap, uint32_t rate, uint32_t dim)
{
    size_t width = (overlap ? 2 : 1) * (size_t)dim;
    float *f = (float *)block;
    dsv4_kv_carry c = {f, f + rate * width, NULL, NULL};
    if (overlap) {
        c.prev_kv = f + 2 * rate * width;
        c.prev_logit = c.prev_kv + (size_t)rate * dim;
    }
    return c;
}

static int dsv4_kv_add(dsv4_kv_pool *pool, uint32_t kind, uint32_t layer, size_t block_bytes,
                       uint32_t n_blocks, uint32_t rows, size_t row_bytes, char *err, size_t errlen)
{
    /* blocks are exactly block_bytes apart: the indexk plugin addresses page p at
     * base + p * page_bytes */
    size_t block = block_bytes, bytes = block * n_blocks;
    size_t alloc = (bytes + DSV4_KV_ALIGN) / DSV4_KV_ALIGN * DSV4_KV_ALIGN;
    if (pool->measuring) {
        pool->shm_bytes += alloc;
        return 0;
    }
    uint8_t *base;
    if (pool->mem == DSV4_MEM_CUDA) {
#ifdef HAVE_CUDA
        base = dsv4_cuda_alloc(alloc); /* zeroed there */
#else
        base = NULL;
#endif
    } else if (pool->shm_base) {
        base = pool->shm_base + pool->shm_used;
        pool->shm_used += alloc;
    } else {
        base = aligned_alloc(DSV4_KV_ALIGN, alloc);
    }
    if (!base) {
        snprintf(err, errlen, "kv pool: out of %s memory (%zu bytes for layer %u)",
                 pool->mem == DSV4_MEM_CUDA ? "device" : "host", bytes, layer);
        return -ENOMEM;
    }
    /* zeroed so transfers and checksums of never-written rows are reproducible */
    if (pool->mem == DSV4_MEM_HOST)
        memset(base, 0, bytes);
    dsv4_kv_buffer *b = &pool->buffers[pool->layout.n_buffers];
    *b = (dsv4_kv_buffer){.kind = kind,
                          .layer = layer,
                          .mem = pool->mem,
                          .cuda_device = pool->mem == DSV4_MEM_CUDA ? pool->cuda_device : -1,
                          .base = base,
                          .block_bytes = block,
                          .n_blocks = n_blocks,
                          .rows_per_block = rows,
                          .row_bytes = row_bytes};
    pool->index[layer][kind] = (int16_t)pool->layout.n_buffers++;
    return 0;
}

static int dsv4_kv_check(const dsv4_kv_pool_conf *c, char *err, size_t errlen)
{
    const dsv4_model_config *m = c->model;
    if (c->kv_dtype != DSV4_KV_F32 && c->kv_dtype != DSV4_KV_BF16 && c->kv_dtype != DSV4_KV_FP8) {
        snprintf(err, errlen, "kv pool: unknown kv_dtype %d", (int)c->kv_dtype);
        return -EINVAL;
    }
    if (c->kv_dtype == DSV4_KV_FP8) {
        dsv4_k_rowfmt f = dsv4_kv_rowfmt(m, c->kv_dtype);
        if (m->rope_compress.dims != m->rope_main.dims || dsv4_k_row_bytes(&f) == 0) {
            snprintf(err, errlen,
                     "kv pool: kv_dtype fp8 needs head_dim minus the rope dims to be a multiple "
                     "of %d (head_dim %u, rope dims %u, compress rope dims %u)",
                     DSV4_K_FP8_BLOCK, m->head_dim, m->rope_main.dims, m->rope_compress.dims);
            return -EINVAL;
        }
    }
    if (m->n_layers == 0 || m->n_layers > DSV4_MAX_LAYERS || c->n_pages == 0 || c->n_slots == 0 ||
        c->page_tokens == 0) {
        snprintf(err, errlen, "kv pool: empty geometry (layers %u, pages %u, slots %u)",
                 m->n_layers, c->n_pages, c->n_slots);
        return -EINVAL;
    }
    for (uint32_t l = 0; l < m->n_layers; l++) {
        uint32_t rate = m->layer_kind[l] == DSV4_LAYER_CSA   ? m->rate_csa
                        : m->layer_kind[l] == DSV4_LAYER_HCA ? m->rate_hca
                                                             : 1;
        if (rate == 0 || c->page_tokens % rate != 0) {
            snprintf(err, errlen,
                     "kv pool: page of %u tokens is not a whole number of rows (layer %u, "
                     "compress rate %u)",
                     c->page_tokens, l, rate);
            return -EINVAL;
        }
        if (m->layer_kind[l] == DSV4_LAYER_CSA && !c->indexk) {
            snprintf(err, errlen, "kv pool: layer %u is CSA but no indexk plugin is given", l);
            return -EINVAL;
        }
    }
    return 0;
}

/* Adds every buffer of every layer, in the order of the buffer table. */
static int dsv4_kv_add_all(dsv4_kv_pool *pool, const dsv4_kv_pool_conf *c, char *err, size_t errlen)
{
    const dsv4_model_config *m = c->model;
    dsv4_k_rowfmt fmt = dsv4_kv_rowfmt(m, c->kv_dtype);
    size_t row = dsv4_k_row_bytes(&fmt);
    dsv4_indexk_geom geom = {sizeof(geom), m->index_dim, c->page_tokens / m->rate_csa};
    for (uint32_t l = 0; l < m->n_layers; l++) {
        int rc = dsv4_kv_add(pool, DSV4_BUF_WINDOW, l, row * m->window, c->n_slots, m->window, row,
                             err, errlen);
        if (rc == 0 && m->layer_kind[l] == DSV4_LAYER_CSA) {
            uint32_t rows = c->page_tokens / m->rate_csa;
            rc = dsv4_kv_add(pool, DSV4_BUF_CSA_KV, l, row * rows, c->n_pages, rows, row, err,
                             errlen);
            if (rc == 0)
                rc = dsv4_kv_add(pool, DSV4_BUF_INDEXK, l, c->indexk->page_bytes(&geom), c->n_pages,
                                 rows, c->indexk->row_bytes(&geom), err, errlen);
            if (rc == 0)
                rc = dsv4_kv_add(pool, DSV4_BUF_CSA_CARRY, l,
                                 dsv4_kv_carry_bytes(true, m->rate_csa, m->head_dim), c->n_slots, 0,
                                 0, err, errlen);
            if (rc == 0)
                rc = dsv4_kv_add(pool, DSV4_BUF_INDEX_CARRY, l,
                                 dsv4_kv_carry_bytes(true, m->rate_csa, m->index_dim), c->n_slots,
                                 0, 0, err, errlen);
        } else if (rc == 0 && m->layer_kind[l] == DSV4_LAYER_HCA) {
            uint32_t rows = c->page_tokens / m->rate_hca;
            rc = dsv4_kv_add(pool, DSV4_BUF_HCA_KV, l, row * rows, c->n_pages, rows, row, err,
                             errlen);
            if (rc == 0)
                rc = dsv4_kv_add(pool, DSV4_BUF_HCA_CARRY, l,
                                 dsv4_kv_carry_bytes(false, m->rate_hca, m->head_dim), c->n_slots,
                                 0, 0, err, errlen);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Creates the memfd a shared pool lives in, sized by a measuring pass over the geometry. */
static int dsv4_kv_map_shared(dsv4_kv_pool *pool, const dsv4_kv_pool_conf *c, char *err,
                              size_t errlen)
{
    pool->measuring = true;
    int rc = dsv4_kv_add_all(pool, c, err, errlen);
    pool->measuring = false;
    if (rc != 0)
        return rc;
    pool->shm_fd = memfd_create("dsv4d-kv", MFD_CLOEXEC);
    if (pool->shm_fd < 0 || ftruncate(pool->shm_fd, (off_t)pool->shm_bytes) != 0) {
        rc = -errno;
        snprintf(err, errlen, "kv pool: cannot create shared memory (%zu bytes: %s)",
                 pool->shm_bytes, strerror(errno));
        return rc;
    }
    void *p = mmap(NULL, pool->shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pool->shm_fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        snprintf(err, errlen, "kv pool: cannot map shared memory (%zu bytes: %s)", pool->shm_bytes,
                 strerror(errno));
        return rc;
    }
    pool->shm_base = p;
    return 0;
}

/* mem DSV4_MEM_CUDA: on device cuda_device (never shared). */
static dsv4_kv_pool *dsv4_kv_pool_create(const dsv4_kv_pool_conf *c, bool shared, dsv4_mem mem,
                                         int32_t cuda_device, char *err, size_t errlen)
{
    if (dsv4_kv_check(c, err, errlen) != 0)
        return NULL;
    const dsv4_model_config *m = c->model;
    dsv4_kv_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        goto fail_oom;
    pool->shm_fd = -1;
    pool->mem = mem;
    pool->cuda_device = cuda_device;
    memset(pool->index, 0xff, sizeof(pool->index));
    memcpy(pool->layer_kind, m->layer_kind, m->n_layers);
    pool->buffers = calloc((size_t)m->n_layers * DSV4_BUF_KIND_COUNT, sizeof(dsv4_kv_buffer));
    pool->page_refs = calloc(c->n_pages, sizeof(uint32_t));
    pool->page_free = malloc(c->n_pages * sizeof(uint32_t));
    pool->slot_free = malloc(c->n_slots * sizeof(uint32_t));
    pool->indexk_name = strdup(c->indexk_name ? c->indexk_name : "");
    if (!pool->buffers || !pool->page_refs || !pool->page_free || !pool->slot_free ||
        !pool->indexk_name)
        goto fail_oom;

    if ((shared && dsv4_kv_map_shared(pool, c, err, errlen) != 0) ||
        dsv4_kv_add_all(pool, c, err, errlen) != 0) {
        dsv4_kv_pool_free(pool);
        return NULL;
    }
    for (uint32_t i = 0; i < c->n_pages; i++)
        pool->page_free[i] = c->n_pages - 1 - i;
    pool->n_page_free = c->n_pages;
    for (uint32_t i = 0; i < c->n_slots; i++)
        pool->slot_free[i] = c->n_slots - 1 - i;
    pool->n_slot_free = c->n_slots;

    pool->layout = (dsv4_kv_layout){
        .struct_size = sizeof(dsv4_kv_layout),
        .page_tokens = c->page_tokens,
        .n_pages = c->n_pages,
        .n_state_slots = c->n_slots,
        .n_layers = m->n_layers,
        .layer_kind = pool->layer_kind,
        .kv_dtype = c->kv_dtype,
        .indexk = pool->indexk_name,
        .index_dim = m->index_dim,
        .n_buffers = pool->layout.n_buffers,
        .buffers = pool->buffers,
        .shm_fd = pool->shm_fd,
        .shm_base = pool->shm_base,
        .shm_bytes = pool->shm_bytes,
    };
    return pool;

fail_oom:
    snprintf(err, errlen, "kv pool: out of memory");
    dsv4_kv_pool_free(pool);
    return NULL;
}

dsv4_kv_pool *dsv4_kv_pool_new(const dsv4_kv_pool_conf *c, char *err, size_t errlen)
{
    return dsv4_kv_pool_create(c, false, DSV4_MEM_HOST, -1, err, errlen);
}

dsv4_kv_pool *dsv4_kv_pool_new_shared(const dsv4_kv_pool_conf *c, char *err, size_t errlen)
{
    return dsv4_kv_pool_create(c, true, DSV4_MEM_HOST, -1, err, errlen);
}

dsv4_kv_pool *dsv4_kv_pool_new_cuda(const dsv4_kv_pool_conf *c, int32_t cuda_device, char *err,
                                    size_t errlen)
{
#ifdef HAVE_CUDA
    return dsv4_kv_pool_create(c, false, DSV4_MEM_CUDA, cuda_device, err, errlen);
#else
    (void)c;
    snprintf(err, errlen, "kv pool: device %d asked of a build without CUDA", cuda_device);
    return NULL;
#endif
}

static void dsv4_kv_base_free(const dsv4_kv_pool *pool, uint8_t *base)
{
#ifdef HAVE_CUDA
    if (pool->mem == DSV4_MEM_CUDA) {
        dsv4_cuda_free(base);
        return;
    }
#endif
    (void)pool;
    free(base);
}

int dsv4_kv_block_copy(const dsv4_kv_buffer *b, uint32_t dst, uint32_t src)
{
    uint8_t *to = b->base + (size_t)dst * b->block_bytes;
    const uint8_t *from = b->base + (size_t)src * b->block_bytes;
#ifdef HAVE_CUDA
    if (b->mem == DSV4_MEM_CUDA) {
        /* the legacy stream orders it after the forward's work on its blocking stream */
        int rc = dsv4_cuda_copy(to, from, b->block_bytes, NULL);
        return rc == 0 ? dsv4_cuda_sync(NULL) : rc;
    }
#endif
    memcpy(to, from, b->block_bytes);
    return 0;
}

void dsv4_kv_pool_free(dsv4_kv_pool *pool)
{
    if (!pool)
        return;
    if (pool->shm_base)
        munmap(pool->shm_base, pool->shm_bytes);
    else
        for (uint32_t i = 0; i < pool->layout.n_buffers; i++)
            dsv4_kv_base_free(pool, pool->buffers[i].base);
    if (pool->shm_fd >= 0)
        close(pool->shm_fd);
    free(pool->buffers);
    free(pool->page_refs);
    free(pool->page_free);
    free(pool->slot_free);
    free(pool->indexk_name);
    free(pool);
}

const dsv4_kv_layout *dsv4_kv_pool_layout(const dsv4_kv_pool *pool)
{
    return &pool->layout;
}

int dsv4_kv_pool_layer_on(dsv4_kv_pool *pool, uint32_t layer, void *stream,
                          dsv4_kv_layer_view *view_p)
{
    if (layer >= pool->layout.n_layers)
        return -EINVAL;
    /* The fence (DESIGN.md §9). A host-tier load copies pages and state layer by layer
     * while the forward runs; this layer's pointers are handed out only once its copy has
     * landed. It sits here, in the one accessor, because sglang fenced its KV getters
     * but not the index-K ones, and the indexer read index-K pages before the load had
     * landed (reference/sglang.md §3.6, PR #22811): wrong top-k, garbled text. With every
     * buffer of the layer behind one call, no reader can skip the wait. A reader on a
     * CUDA stream has that stream wait instead of the host, so the copy of layer l + 1
     * overlaps the kernels of layer l without the host in between. */
    if (pool->fence) {
        int rc = stream && pool->stream_fence ? pool->stream_fence(pool->fence_ctx, layer, stream)
                                              : pool->fence(pool->fence_ctx, layer);
        if (rc != 0)
            return rc;
    }
    for (uint32_t k = 0; k < DSV4_BUF_KIND_COUNT; k++) {
        int16_t i = pool->index[layer][k];
        view_p->buf[k] = i < 0 ? NULL : &pool->buffers[i];
    }
    return 0;
}

int dsv4_kv_pool_layer(dsv4_kv_pool *pool, uint32_t layer, dsv4_kv_layer_view *view_p)
{
    return dsv4_kv_pool_layer_on(pool, layer, NULL, view_p);
}

void dsv4_kv_pool_set_fence(dsv4_kv_pool *pool, dsv4_kv_fence_fn fn, void *ctx)
{
    pool->fence = fn;
    pool->fence_ctx = ctx;
    if (!fn)
        pool->stream_fence = NULL;
}

void dsv4_kv_pool_set_stream_fence(dsv4_kv_pool *pool, dsv4_kv_stream_fence_fn fn)
{
    pool->stream_fence = fn;
}

int dsv4_kv_page_alloc(dsv4_kv_pool *pool, uint32_t *page_p)
{
    if (pool->n_page_free == 0)
        return -ENOSPC;
    uint32_t p = pool->page_free[--pool->n_page_free];
    pool->page_refs[p] = 1;
    *page_p = p;
    return 0;
}

void dsv4_kv_page_ref(dsv4_kv_pool *pool, uint32_t page)
{
    pool->page_refs[page]++;
}

void dsv4_kv_page_unref(dsv4_kv_pool *pool, uint32_t page)
{
    if (pool->page_refs[page] > 0 && --pool->page_refs[page] == 0)
        pool->page_free[pool->n_page_free++] = page;
}

uint32_t dsv4_kv_pages_free(const dsv4_kv_pool *pool)
{
    return pool->n_page_free;
}

int dsv4_kv_slot_alloc(dsv4_kv_pool *pool, uint32_t *slot_p)
{
    if (pool->n_slot_free == 0)
        return -ENOSPC;
    *slot_p = pool->slot_free[--pool->n_slot_free];
    return 0;
}

void dsv4_kv_slot_free(dsv4_kv_pool *pool, uint32_t slot)
{
    pool->slot_free[pool->n_slot_free++] = slot;
}

uint32_t dsv4_kv_slots_free(const dsv4_kv_pool *pool)
{
    return pool->n_slot_free;
}
