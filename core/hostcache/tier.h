/* tier.h: the host-memory KV tier as the serving loop uses it (DESIGN.md §9).
 *
 * The tier owns the hostcache plugin's state and the host pool (hostpool.h, a mirror of
 * the device buffer table: index-K and compressor carry are buffers like the rest), and
 * installs the per-layer load fence on the device KV pool for its whole life: from then
 * on every dsv4_kv_pool_layer() call waits until that layer of the active load has
 * landed. The device pool must outlive the tier.
 *
 * Residency is kept by the caller, one dsv4_hc_entry per cached page and per state
 * snapshot (the radix node holds them): device id, host id, or both. The tier moves data
 * and updates the entries; the caller keeps owning the device ids (page references and
 * slots of the KV pool: it allocates them before a load and frees them after an evict).
 * Cached pages and snapshots are immutable, so a host copy stays valid once made.
 *
 * Write policy (the plugin's write_policy key): write_through backs an entry up to host at
 * its first dsv4_hc_tier_hit, write_through_selective at its second, write_back only when
 * it is evicted. Under the write_through policies an entry evicted before its backup is
 * gone; when the host pool is full a backup is skipped (the caller frees host copies it no
 * longer wants with dsv4_hc_tier_drop, least recently used first). With hostcache/off
 * nothing is ever on host and evicted entries are gone.
 *
 * The serving loop's calls (core/serve/radix.c and cache.c), on its engine thread (the
 * tier is not thread-safe):
 *   radix insert, or use of a matched node -> dsv4_hc_tier_need (make room), _hit
 *   radix eviction of device copies        -> dsv4_hc_tier_need (make room), _evict, then
 *                                             unref/free the device ids
 *   radix removal of host copies           -> dsv4_hc_tier_drop
 *   admitting a request whose prefix is partly on host: allocate device pages, set
 *   entry->device, dsv4_hc_tier_load of them with the snapshot loaded straight into the
 *   request's own slot (so the forward's fence covers it and nothing copies it
 *   afterwards), run the step, dsv4_hc_tier_load_finish. Code that copies a loaded state
 *   block outside the forward waits first (dsv4_hc_tier_wait_state, or the fenced
 *   accessor, as dsv4_engine_seq_adopt's copy does).
 */
#ifndef DSV4_CORE_HOSTCACHE_TIER_H
#define DSV4_CORE_HOSTCACHE_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include <dsv4d/hostcache.h>

#include "core/engine/kvpool.h"

#define DSV4_HC_NONE UINT32_MAX

typedef struct dsv4_hc_tier dsv4_hc_tier;

/* Where an entry's bytes are. */
typedef enum dsv4_hc_residency {
    DSV4_HC_GONE = 0,   /* nowhere: the node must go */
    DSV4_HC_DEVICE = 1, /* device only */
    DSV4_HC_HOST = 2,   /* host only: load it back before use */
    DSV4_HC_BOTH = 3,
} dsv4_hc_residency;

/* What entries stand for: pages (every paged buffer) or state blocks (every state
 * buffer: window ring and compressor carry). */
typedef enum dsv4_hc_unit { DSV4_HC_PAGE = 0, DSV4_HC_SLOT = 1 } dsv4_hc_unit;

typedef struct dsv4_hc_entry {
    uint32_t device; /* device page or state slot, DSV4_HC_NONE when not on the device */
    uint32_t host;   /* host page or state block, DSV4_HC_NONE when not on host */
    uint32_t hits;   /* uses counted by dsv4_hc_tier_hit */
} dsv4_hc_entry;

/* An entry for a page or slot that is on the device only. */
dsv4_hc_entry dsv4_hc_entry_on_device(uint32_t device);
dsv4_hc_residency dsv4_hc_entry_residency(const dsv4_hc_entry *e);

typedef struct dsv4_hc_tier_conf {
    dsv4_kv_pool *pool;             /* the device pool; gets the fence */
    const dsv4_plugin_desc *plugin; /* family hostcache */
    const void *plugin_conf;        /* its parsed config; NULL = its schema defaults */
    const dsv4_host *host;          /* handed to the plugin; NULL = dsv4_host_default() */
} dsv4_hc_tier_conf;

/* NULL with the reason in err (not a hostcache plugin, plugin init or attach failed,
 * host_size below one page, out of memory). */
dsv4_hc_tier *dsv4_hc_tier_new(const dsv4_hc_tier_conf *conf, char *err, size_t errlen);
/* Waits for an active load, removes the fence, frees the host pool and the plugin. */
void dsv4_hc_tier_free(dsv4_hc_tier *tier);

/* false for hostcache/off (no host pool). */
bool dsv4_hc_tier_keeps(const dsv4_hc_tier *tier);

/* Count one use of each entry (a radix insert or match) and back up, per the write
 * policy, those that reach its threshold and are not on host yet. The backup is on host
 * when the call returns. 0, or the plugin's failure (entries stay as they were). */
int dsv4_hc_tier_hit(dsv4_hc_tier *tier, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n);
/* The device copies of these entries are about to be freed: under write_back, back up
 * those not on host yet; then every entry's device id becomes DSV4_HC_NONE (what is then
 * DSV4_HC_GONE was dropped). The caller frees the device ids after the call. 0, or the
 * plugin's failure (entries unchanged: do not free the device ids). */
int dsv4_hc_tier_evict(dsv4_hc_tier *tier, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n);
/* Host blocks that dsv4_hc_tier_hit (evict false) or dsv4_hc_tier_evict (evict true)
 * would take for these entries under the write policy, and those free now: the caller
 * frees what it wants least (dsv4_hc_tier_drop) to make room before the call. The hit
 * counts in the entries are read, not changed. 0 for hostcache/off. */
uint32_t dsv4_hc_tier_need(const dsv4_hc_tier *tier, bool evict, dsv4_hc_entry *const *e, size_t n);
uint32_t dsv4_hc_tier_host_free(const dsv4_hc_tier *tier, dsv4_hc_unit unit);
/* Free the host copies of these entries (their host id becomes DSV4_HC_NONE). */
void dsv4_hc_tier_drop(dsv4_hc_tier *tier, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n);

/* Start loading entries back: each has a host copy and a device id the caller has just
 * allocated. Returns once the copy is started (async) or done (sync); the forward that
 * follows reads each layer only after it landed (the fence). One load at a time: finish
 * it before the next. 0, -EBUSY (a load is active), -EINVAL (an entry without host copy
 * or device id), -ENOTSUP (hostcache/off), or the plugin's failure. */
int dsv4_hc_tier_load(dsv4_hc_tier *tier, dsv4_hc_entry *const *pages, size_t n_pages,
                      dsv4_hc_entry *const *slots, size_t n_slots);
/* Wait until every state block of the active load has landed. The forward needs no
 * such call (its accessor fences per layer), but code that reads or copies a loaded state
 * block outside the forward does, e.g. dsv4_engine_seq_adopt copying a snapshot slot
 * into a request's slot. State blocks are queued ahead of the pages, so this waits for
 * the small part of the load only. 0 (also without an active load), or the plugin's
 * failure. */
int dsv4_hc_tier_wait_state(dsv4_hc_tier *tier);
/* After the step(s) that needed the load: wait for all of it, release it. 0 (also when no
 * load is active), or the plugin's failure. */
int dsv4_hc_tier_load_finish(dsv4_hc_tier *tier);

/* For /metrics. Counters only grow. */
typedef struct dsv4_hc_stats {
    uint64_t hits;         /* pages and state blocks loaded back from host */
    uint64_t loads;        /* load operations started */
    uint64_t load_bytes;   /* bytes copied host -> device */
    uint64_t save_bytes;   /* bytes copied device -> host */
    uint64_t load_wait_ns; /* time the forward spent waiting in the fence */
    uint32_t host_pages, host_pages_used;
    uint32_t host_slots, host_slots_used;
    uint64_t host_high_water_bytes; /* dsv4_host_pool_high_water_bytes: never shrinks */
} dsv4_hc_stats;
void dsv4_hc_tier_stats(const dsv4_hc_tier *tier, dsv4_hc_stats *stats_p);

#endif
