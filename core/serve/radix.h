/* radix.h: the radix prefix cache over KV pages (DESIGN.md §7).
 *
 * A trie whose edges are whole pages: each node below the root stands for one page of
 * page_tokens tokens (the tokens it covers are the key) and holds one reference on that
 * page. A node may also hold a state snapshot: a state slot with the per-request state
 * (window ring, compressor carry) exactly at the end of its page, which is what a new
 * request needs besides the pages to continue from there. A match therefore ends at a
 * node with a snapshot, except on a decode server, whose PD requests get the state with
 * their KV: there any cached whole-page prefix saves moving those pages (DSV4_RADIX_PAGES).
 *
 * Running requests lock the node they started from (and with it its ancestors); only
 * unlocked leaves are evicted, least recently used first. The cache knows nothing of the
 * engine: pages and slots are numbers, given back through the hooks.
 *
 * With a host tier (hooks.tier, core/hostcache/tier.h) a node's page and snapshot each
 * have a residency: device, host or both. Eviction then takes the least recently used
 * unlocked node on the device none of whose children is on the device, and hands its
 * device copies to the tier, which keeps them on host per its write policy; the node
 * stays, on host only, unless nothing was kept (then it goes, with what is below it).
 * So what is on the device is closed under ancestors, and a path is on the device down
 * to some node and on host below it. A match may end on host: dsv4_radix_fetch allocates
 * device pages for those pages and starts the tier's load (the forward's KV accessor
 * waits per layer for it). Room on host is made by dropping the least recently used
 * unlocked host-only leaves. Without a tier an evicted node is gone, as before.
 *
 * Not thread-safe: the engine thread owns it.
 */
#ifndef DSV4_CORE_RADIX_H
#define DSV4_CORE_RADIX_H

#include <stdbool.h>
#include <stdint.h>

#include "core/hostcache/tier.h"

#define DSV4_RADIX_NO_SLOT UINT32_MAX
/* A matched page that is on host only (dsv4_radix_fetch loads it). */
#define DSV4_RADIX_ON_HOST DSV4_HC_NONE

typedef struct dsv4_radix dsv4_radix;
typedef struct dsv4_radix_node dsv4_radix_node;

/* What a match must end at. A request that prefills from the cached prefix needs the
 * state at its end (a snapshot); a decode server's PD request gets the state with the
 * KV from its prefill server, so any whole-page prefix of its prompt is worth adopting. */
typedef enum dsv4_radix_want { DSV4_RADIX_WITH_STATE, DSV4_RADIX_PAGES } dsv4_radix_want;

typedef struct dsv4_radix_hooks {
    void *ctx;
    void (*page_ref)(void *ctx, uint32_t page);
    void (*page_unref)(void *ctx, uint32_t page);
    void (*slot_free)(void *ctx, uint32_t slot);
    /* Appended: the host tier (NULL: none) and the device page allocator its loads need
     * (a new page with one reference, the cache's; -ENOSPC). */
    dsv4_hc_tier *tier;
    int (*page_alloc)(void *ctx, uint32_t *page_p);
} dsv4_radix_hooks;

/* NULL on out of memory. keep_pages: a node without a snapshot is worth keeping on host
 * (DSV4_RADIX_PAGES matches use it: a decode server); without, such a node evicted to
 * host with nothing below it can never be matched, and goes. */
dsv4_radix *dsv4_radix_new(uint32_t page_tokens, const dsv4_radix_hooks *hooks, bool keep_pages);
/* Gives every page reference and snapshot slot back through the hooks. */
void dsv4_radix_free(dsv4_radix *rx);

/* The longest cached prefix of toks[0..n) in whole pages that ends at a node with a
 * snapshot (want DSV4_RADIX_WITH_STATE) or at any node (DSV4_RADIX_PAGES): its page
 * count (0 on a miss). With pages_out (room for n / page_tokens
 * entries) the device pages are written there (DSV4_RADIX_ON_HOST for a page on host
 * only), *node_p is set and the path counts as used (LRU); without, the cache is only
 * looked at (for the sched plugin's view). */
uint32_t dsv4_radix_match(dsv4_radix *rx, const int32_t *toks, uint32_t n, dsv4_radix_want want,
                          uint32_t *pages_out, dsv4_radix_node **node_p);
/* What a match finds: its pages, how many of them are on host only, and how many of those
 * on the device are locked already (by running requests: not among the pages eviction
 * could free). */
typedef struct dsv4_radix_found {
    uint32_t pages, on_host, locked;
} dsv4_radix_found;
/* A look, as dsv4_radix_match without pages_out. */
dsv4_radix_found dsv4_radix_peek(const dsv4_radix *rx, const int32_t *toks, uint32_t n,
                                 dsv4_radix_want want);
/* The device snapshot slot of a matched node (DSV4_RADIX_NO_SLOT when on host only). */
uint32_t dsv4_radix_node_slot(const dsv4_radix_node *node);
/* Use a matched node the caller has locked, with pages as dsv4_radix_match wrote them:
 * count the use with the tier (write-through backups), then for every page on host only
 * allocate a device page (the cache's reference; written into pages) and start one tier
 * load of them, with the snapshot loaded into `slot` (the adopting sequence's own slot)
 * when it is on host only. A load still active is finished first. Without a tier, or
 * with everything on the device, nothing is loaded. 0, -ENOSPC (too few free device
 * pages: nothing was started), or the tier's failure. */
int dsv4_radix_fetch(dsv4_radix *rx, dsv4_radix_node *node, uint32_t *pages, uint32_t slot);
/* Lock a node and its ancestors against eviction (counted), and release that lock. */
void dsv4_radix_lock(dsv4_radix *rx, dsv4_radix_node *node);
void dsv4_radix_unlock(dsv4_radix *rx, dsv4_radix_node *node);

/* Cache toks[0..n_pages*page_tokens) held in pages[0..n_pages), with the state at the end
 * of the first snap_pages pages (at most n_pages) in slot (or DSV4_RADIX_NO_SLOT). Pages
 * of a prefix already cached on the device stay as they are (the caller's copies are not
 * referenced); new nodes, and nodes on host only (the same tokens after the same prefix:
 * the same KV), take a reference on the caller's page. The slot is owned by the cache
 * from here on: kept by the node snap_pages deep, or freed when that node already has a
 * snapshot on the device (or snap_pages is 0). With a tier the path and the snapshot
 * count as used (write-through backups). 0, -EINVAL (snap_pages past n_pages: the slot is
 * freed, nothing cached) or -ENOMEM (the cache unchanged past what fitted: the slot kept
 * when its node fitted, else freed). */
int dsv4_radix_insert(dsv4_radix *rx, const int32_t *toks, uint32_t n_pages, const uint32_t *pages,
                      uint32_t snap_pages, uint32_t slot);

/* Evict unlocked leaves (with a tier: of what is on the device), least recently used
 * first, until `pages` page references and `slots` snapshot slots have been given back or
 * nothing is left to evict. Returns the page references given back; *slots_p (may be
 * NULL) gets the slots. A tier load in flight is left running: its pages are on the
 * locked path of the request it is for (and its slot is that request's), so none of them
 * is evicted; the request finishes the load before it lets go of them. */
uint32_t dsv4_radix_evict(dsv4_radix *rx, uint32_t pages, uint32_t slots, uint32_t *slots_p);
/* Remove every node no running request uses, on device and host, and free the host
 * copies of those that stay. */
void dsv4_radix_flush(dsv4_radix *rx);

/* Device pages the cache references, and those of them in unlocked nodes (the cache
 * alone holds these, and eviction can free them). */
uint32_t dsv4_radix_pages(const dsv4_radix *rx);
uint32_t dsv4_radix_pages_unlocked(const dsv4_radix *rx);
/* Device snapshot slots the cache holds. */
uint32_t dsv4_radix_slots(const dsv4_radix *rx);

#endif
