/* hostpool.h: the host-memory pool of the KV host tier (DESIGN.md §9).
 *
 * A mirror of the device pool's buffer table: the same buffers in the same order (every
 * paged buffer of every layer, index-K and compressor carry included, because the table
 * lists them), each in host memory with its own page and state-slot count. A hostcache
 * plugin attaches the device layout and this one and copies blocks between them by id.
 *
 * The pool owns its memory (one page-aligned slab for every buffer, which the hostcache
 * plugin page-locks while attached when the device layout is in CUDA memory) and the two
 * id allocators; residency (which device page a host
 * page backs) is kept by the tier (tier.h). Not thread-safe: the engine thread owns it.
 */
#ifndef DSV4_CORE_HOSTPOOL_H
#define DSV4_CORE_HOSTPOOL_H

#include <dsv4d/kv.h>

typedef struct dsv4_host_pool dsv4_host_pool;

/* Bytes one page takes across every paged buffer of `device`. */
size_t dsv4_host_pool_page_bytes(const dsv4_kv_layout *device);

/* A host mirror of `device` with n_pages pages and n_slots state blocks. NULL with the
 * reason in err (no pages, out of memory). */
dsv4_host_pool *dsv4_host_pool_new(const dsv4_kv_layout *device, uint32_t n_pages, uint32_t n_slots,
                                   char *err, size_t errlen);
void dsv4_host_pool_free(dsv4_host_pool *pool);

const dsv4_kv_layout *dsv4_host_pool_layout(const dsv4_host_pool *pool);

/* Host page and state-slot allocators: 0, or -ENOSPC when none is free. */
int dsv4_host_pool_page_alloc(dsv4_host_pool *pool, uint32_t *page_p);
void dsv4_host_pool_page_free(dsv4_host_pool *pool, uint32_t page);
int dsv4_host_pool_slot_alloc(dsv4_host_pool *pool, uint32_t *slot_p);
void dsv4_host_pool_slot_free(dsv4_host_pool *pool, uint32_t slot);
uint32_t dsv4_host_pool_pages_free(const dsv4_host_pool *pool);
uint32_t dsv4_host_pool_slots_free(const dsv4_host_pool *pool);
/* Bytes of every buffer up to the highest page and state block ever taken: the part of the
 * slab written to so far, which stays resident (a free id is taken again before a fresh
 * one, so this grows only while more are in use at once than ever before). */
size_t dsv4_host_pool_high_water_bytes(const dsv4_host_pool *pool);

#endif
