/* cache.c: the prefix cache in the serving loop: the radix trie (radix.c) over the
 * engine's pages and state slots (core/engine/prefix.c).
 *
 * A running request keeps the state at its newest page boundary in a snapshot slot of
 * its own (the loop cuts prefill chunks at page boundaries so that state exists); when it
 * ends, its whole pages up to that boundary and the snapshot go to the trie. A new
 * request starts from the longest cached prefix that ends at a snapshot: it references
 * those pages, copies the snapshot into its own slot and prefills only the rest. At least
 * one token is always left to prefill, since sampling needs the logits of the last one.
 *
 * Snapshot slots come from the state slots requests use; a request takes one only while
 * a slot stays free for every request max_running could still admit.
 */
#include "core/serve/serve_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/serve/metrics.h"

static void dsv4_serve_hook_ref(void *ctx, uint32_t page)
{
    dsv4_engine_page_ref(ctx, page);
}

static void dsv4_serve_hook_unref(void *ctx, uint32_t page)
{
    dsv4_engine_page_unref(ctx, page);
}

static void dsv4_serve_hook_slot_free(void *ctx, uint32_t slot)
{
    dsv4_engine_slot_free(ctx, slot);
}

int dsv4_serve_cache_new(dsv4_server *srv, char *err, size_t errlen)
{
    dsv4_radix_hooks hooks = {srv->eng, dsv4_serve_hook_ref, dsv4_serve_hook_unref,
                              dsv4_serve_hook_slot_free};
    srv->cache = dsv4_radix_new(srv->page_tokens, &hooks);
    srv->cache_pages = malloc((srv->max_context / srv->page_tokens + 1) * sizeof(uint32_t));
    if (!srv->cache || !srv->cache_pages) {
        snprintf(err, errlen, "server: out of memory");
        return -ENOMEM;
    }
    return 0;
}

void dsv4_serve_cache_free(dsv4_server *srv)
{
    dsv4_radix_free(srv->cache);
    free(srv->cache_pages);
}

uint32_t dsv4_serve_cache_peek(dsv4_server *srv, const dsv4_sreq *r)
{
    return dsv4_radix_match(srv->cache, r->toks, dsv4_sreq_len(r) - 1, NULL, NULL) *
           srv->page_tokens;
}

uint32_t dsv4_serve_cache_adopt(dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_radix_node *node;
    uint32_t m =
        dsv4_radix_match(srv->cache, r->toks, dsv4_sreq_len(r) - 1, srv->cache_pages, &node);
    if (m == 0 || dsv4_engine_seq_adopt(srv->eng, r->seq, srv->cache_pages, m,
                                        dsv4_radix_node_slot(node)) != 0)
        return 0;
    dsv4_radix_lock(srv->cache, node);
    r->node = node;
    r->n_fed = m * srv->page_tokens;
    return r->n_fed;
}

void dsv4_serve_cache_boundary(dsv4_server *srv, dsv4_sreq *r)
{
    if (r->snap_slot == DSV4_RADIX_NO_SLOT) {
        uint32_t free = dsv4_kv_slots_free(dsv4_engine_kv(srv->eng));
        if (free <= srv->max_running - srv->n_running ||
            dsv4_engine_slot_alloc(srv->eng, &r->snap_slot) != 0)
            return;
    }
    if (dsv4_engine_seq_snapshot(srv->eng, r->seq, r->snap_slot) != 0) {
        dsv4_engine_slot_free(srv->eng, r->snap_slot);
        r->snap_slot = DSV4_RADIX_NO_SLOT;
        return;
    }
    r->snap_pages = r->n_fed / srv->page_tokens;
}

void dsv4_serve_cache_release(dsv4_server *srv, dsv4_sreq *r, bool insert)
{
    if (r->snap_slot != DSV4_RADIX_NO_SLOT) {
        uint32_t slot, n_pages = 0;
        const uint32_t *pages = dsv4_engine_seq_pages(srv->eng, r->seq, &slot, &n_pages);
        if (insert && pages && n_pages >= r->snap_pages)
            dsv4_radix_insert(srv->cache, r->toks, r->snap_pages, pages, r->snap_slot);
        else
            dsv4_engine_slot_free(srv->eng, r->snap_slot);
        r->snap_slot = DSV4_RADIX_NO_SLOT;
    }
    if (r->node) {
        dsv4_radix_unlock(srv->cache, r->node);
        r->node = NULL;
    }
}

bool dsv4_serve_cache_evict(dsv4_server *srv, uint32_t pages, uint32_t slots)
{
    uint32_t got_slots = 0, got = dsv4_radix_evict(srv->cache, pages, slots, &got_slots);
    dsv4_metric_add(DSV4_M_EVICTED_PAGES, got);
    return got > 0 || got_slots > 0;
}

uint32_t dsv4_serve_cache_evictable_pages(const dsv4_server *srv)
{
    return dsv4_radix_pages_unlocked(srv->cache);
}
