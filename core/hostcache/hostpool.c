/* hostpool.c: the host mirror of the KV buffer table and its page and slot allocators
 * (hostpool.h). */
#include "core/hostcache/hostpool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Buffers start on cache lines, as in the device pool; the slab holding them all starts
 * and ends on an OS page. */
#define DSV4_HOST_POOL_ALIGN 64
#define DSV4_HOST_POOL_PAGE 4096

/* A stack of free ids plus who is taken, so a double free is ignored, not a corruption. */
typedef struct dsv4_hp_ids {
    uint32_t *free;
    uint8_t *taken;
    uint32_t n_free;
    uint32_t high_water; /* one past the highest id ever taken */
} dsv4_hp_ids;

struct dsv4_host_pool {
    dsv4_kv_layout layout;
    dsv4_kv_buffer *buffers;
    uint8_t *slab; /* every buffer's memory */
    dsv4_hp_ids pages, slots;
};

size_t dsv4_host_pool_page_bytes(const dsv4_kv_layout *device)
{
    size_t bytes = 0;
    for (uint32_t i = 0; i < device->n_buffers; i++)
        if (dsv4_buf_is_paged(device->buffers[i].kind))
            bytes += device->buffers[i].block_bytes;
    return bytes;
}

static size_t dsv4_host_pool_round(size_t bytes, size_t align)
{
    return (bytes + align - 1) / align * align;
}

/* The one place host-tier memory comes from: one page-aligned slab for every buffer. When
 * the device layout is in CUDA memory the hostcache plugin page-locks it at attach (core
 * holds no CUDA code), and one slab makes that one cudaHostRegister call, so asynchronous
 * copies to the device run at PCIe speed without staging. */
static uint8_t *dsv4_host_pool_slab(const dsv4_kv_layout *device, uint32_t n_pages,
                                    uint32_t n_slots)
{
    size_t bytes = 0;
    for (uint32_t i = 0; i < device->n_buffers; i++) {
        const dsv4_kv_buffer *b = &device->buffers[i];
        size_t n = dsv4_buf_is_paged(b->kind) ? n_pages : n_slots;
        bytes += dsv4_host_pool_round(b->block_bytes * n, DSV4_HOST_POOL_ALIGN);
    }
    return aligned_alloc(DSV4_HOST_POOL_PAGE,
                         dsv4_host_pool_round(bytes ? bytes : 1, DSV4_HOST_POOL_PAGE));
}

static int dsv4_hp_ids_init(dsv4_hp_ids *ids, uint32_t n)
{
    ids->free = malloc((n ? n : 1) * sizeof(uint32_t));
    ids->taken = calloc(n ? n : 1, 1);
    if (!ids->free || !ids->taken)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        ids->free[i] = n - 1 - i;
    ids->n_free = n;
    return 0;
}

static int dsv4_hp_ids_alloc(dsv4_hp_ids *ids, uint32_t *id_p)
{
    if (ids->n_free == 0)
        return -ENOSPC;
    uint32_t id = ids->free[--ids->n_free];
    ids->taken[id] = 1;
    if (id >= ids->high_water)
        ids->high_water = id + 1;
    *id_p = id;
    return 0;
}

static void dsv4_hp_ids_free(dsv4_hp_ids *ids, uint32_t id)
{
    if (!ids->taken[id])
        return;
    ids->taken[id] = 0;
    ids->free[ids->n_free++] = id;
}

dsv4_host_pool *dsv4_host_pool_new(const dsv4_kv_layout *device, uint32_t n_pages, uint32_t n_slots,
                                   char *err, size_t errlen)
{
    if (n_pages == 0) {
        snprintf(err, errlen, "host pool: no pages (host_size below one page of %zu bytes)",
                 dsv4_host_pool_page_bytes(device));
        return NULL;
    }
    dsv4_host_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        goto fail_oom;
    pool->buffers = calloc(device->n_buffers ? device->n_buffers : 1, sizeof(dsv4_kv_buffer));
    if (!pool->buffers || dsv4_hp_ids_init(&pool->pages, n_pages) != 0 ||
        dsv4_hp_ids_init(&pool->slots, n_slots) != 0)
        goto fail_oom;
    pool->layout = *device;
    pool->layout.struct_size = sizeof(pool->layout);
    pool->layout.n_pages = n_pages;
    pool->layout.n_state_slots = n_slots;
    pool->layout.buffers = pool->buffers;
    pool->layout.n_buffers = 0;
    pool->layout.shm_fd = -1;
    pool->layout.shm_base = NULL;
    pool->layout.shm_bytes = 0;
    if (!(pool->slab = dsv4_host_pool_slab(device, n_pages, n_slots)))
        goto fail_oom;
    size_t off = 0;
    for (uint32_t i = 0; i < device->n_buffers; i++) {
        dsv4_kv_buffer b = device->buffers[i];
        b.mem = DSV4_MEM_HOST;
        b.cuda_device = -1;
        b.n_blocks = dsv4_buf_is_paged(b.kind) ? n_pages : n_slots;
        b.base = pool->slab + off;
        off += dsv4_host_pool_round(b.block_bytes * b.n_blocks, DSV4_HOST_POOL_ALIGN);
        pool->buffers[pool->layout.n_buffers++] = b;
    }
    return pool;

fail_oom:
    snprintf(err, errlen, "host pool: out of memory (%u pages, %u state blocks)", n_pages, n_slots);
    dsv4_host_pool_free(pool);
    return NULL;
}

void dsv4_host_pool_free(dsv4_host_pool *pool)
{
    if (!pool)
        return;
    free(pool->slab);
    free(pool->buffers);
    free(pool->pages.free);
    free(pool->pages.taken);
    free(pool->slots.free);
    free(pool->slots.taken);
    free(pool);
}

const dsv4_kv_layout *dsv4_host_pool_layout(const dsv4_host_pool *pool)
{
    return &pool->layout;
}

int dsv4_host_pool_page_alloc(dsv4_host_pool *pool, uint32_t *page_p)
{
    return dsv4_hp_ids_alloc(&pool->pages, page_p);
}

void dsv4_host_pool_page_free(dsv4_host_pool *pool, uint32_t page)
{
    if (page < pool->layout.n_pages)
        dsv4_hp_ids_free(&pool->pages, page);
}

int dsv4_host_pool_slot_alloc(dsv4_host_pool *pool, uint32_t *slot_p)
{
    return dsv4_hp_ids_alloc(&pool->slots, slot_p);
}

void dsv4_host_pool_slot_free(dsv4_host_pool *pool, uint32_t slot)
{
    if (slot < pool->layout.n_state_slots)
        dsv4_hp_ids_free(&pool->slots, slot);
}

uint32_t dsv4_host_pool_pages_free(const dsv4_host_pool *pool)
{
    return pool->pages.n_free;
}

uint32_t dsv4_host_pool_slots_free(const dsv4_host_pool *pool)
{
    return pool->slots.n_free;
}

size_t dsv4_host_pool_high_water_bytes(const dsv4_host_pool *pool)
{
    size_t bytes = 0;
    for (uint32_t i = 0; i < pool->layout.n_buffers; i++) {
        const dsv4_kv_buffer *b = &pool->buffers[i];
        bytes += b->block_bytes *
                 (dsv4_buf_is_paged(b->kind) ? pool->pages.high_water : pool->slots.high_water);
    }
    return bytes;
}
