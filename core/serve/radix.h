/* radix.h: the radix prefix cache over KV pages (DESIGN.md §7).
 *
 * A trie whose edges are whole pages: each node below the root stands for one page of
 * page_tokens tokens (the tokens it covers are the key) and holds one reference on that
 * page. A node may also hold a state snapshot: a state slot with the per-request state
 * (window ring, compressor carry) exactly at the end of its page, which is what a new
 * request needs besides the pages to continue from there. A match therefore ends only at
 * a node with a snapshot.
 *
 * Running requests lock the node they started from (and with it its ancestors); only
 * unlocked leaves are evicted, least recently used first. The cache knows nothing of the
 * engine: pages and slots are numbers, given back through the hooks.
 *
 * Not thread-safe: the engine thread owns it.
 */
#ifndef DSV4_CORE_RADIX_H
#define DSV4_CORE_RADIX_H

#include <stdbool.h>
#include <stdint.h>

#define DSV4_RADIX_NO_SLOT UINT32_MAX

typedef struct dsv4_radix dsv4_radix;
typedef struct dsv4_radix_node dsv4_radix_node;

typedef struct dsv4_radix_hooks {
    void *ctx;
    void (*page_ref)(void *ctx, uint32_t page);
    void (*page_unref)(void *ctx, uint32_t page);
    void (*slot_free)(void *ctx, uint32_t slot);
} dsv4_radix_hooks;

/* NULL on out of memory. */
dsv4_radix *dsv4_radix_new(uint32_t page_tokens, const dsv4_radix_hooks *hooks);
/* Gives every page reference and snapshot slot back through the hooks. */
void dsv4_radix_free(dsv4_radix *rx);

/* The longest cached prefix of toks[0..n) in whole pages that ends at a node with a
 * snapshot: its page count (0 on a miss). With pages_out (room for n / page_tokens
 * entries) the pages are written there, *node_p is set and the path counts as used
 * (LRU); without, the cache is only looked at (for the sched plugin's view). */
uint32_t dsv4_radix_match(dsv4_radix *rx, const int32_t *toks, uint32_t n, uint32_t *pages_out,
                          dsv4_radix_node **node_p);
/* The snapshot slot of a matched node. */
uint32_t dsv4_radix_node_slot(const dsv4_radix_node *node);
/* Lock a node and its ancestors against eviction (counted), and release that lock. */
void dsv4_radix_lock(dsv4_radix *rx, dsv4_radix_node *node);
void dsv4_radix_unlock(dsv4_radix *rx, dsv4_radix_node *node);

/* Cache toks[0..n_pages*page_tokens) held in pages[0..n_pages), with the state at its
 * end in slot (or DSV4_RADIX_NO_SLOT). Pages of a prefix already cached stay as they are
 * (the caller's copies are not referenced); new nodes take a reference on their page.
 * The slot is owned by the cache from here on: kept by the end node, or freed when that
 * node already has a snapshot. 0, or -ENOMEM (the slot is freed, the cache unchanged
 * past what fitted). */
int dsv4_radix_insert(dsv4_radix *rx, const int32_t *toks, uint32_t n_pages, const uint32_t *pages,
                      uint32_t slot);

/* Evict unlocked leaves, least recently used first, until `pages` page references and
 * `slots` snapshot slots have been given back or nothing is left to evict. Returns the
 * page references given back; *slots_p (may be NULL) gets the slots. */
uint32_t dsv4_radix_evict(dsv4_radix *rx, uint32_t pages, uint32_t slots, uint32_t *slots_p);

/* Pages the cache references, and those of them in unlocked nodes (the cache alone
 * holds these, and eviction can free them). */
uint32_t dsv4_radix_pages(const dsv4_radix *rx);
uint32_t dsv4_radix_pages_unlocked(const dsv4_radix *rx);
/* Snapshot slots the cache holds. */
uint32_t dsv4_radix_slots(const dsv4_radix *rx);

#endif
