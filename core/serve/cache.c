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
 * A decode server (PD) keeps more: every whole page of a request that ran, with or
 * without a snapshot, since its PD requests get the state with their KV from the prefill
 * server. A new PD request adopts the longest cached whole-page prefix of its prompt
 * (leaving at least one page to move) and leases only the pages after it (pd_decode.c):
 * a multi-turn session's history is moved once, not again every turn.
 *
 * Snapshot slots come from the state slots requests use; a request takes one only while
 * a slot stays free for every request max_running could still admit, evicting the cache's
 * least recently used snapshots for it when the cache holds the rest (the slots beyond
 * max_running are the snapshots' to share: the cache keeps taking new prefixes).
 *
 * With a [hostcache] plugin that keeps pages on host, the tier (core/hostcache/tier.h)
 * lives here, over the engine's pool: eviction moves cached pages and snapshots to host
 * per the write policy, and a request whose match ends on host gets device pages for
 * those pages and a load into them and into its own state slot (radix.h). Its forward
 * then runs while the load is in flight: the KV accessor waits for each layer. The step
 * ends with dsv4_serve_cache_step_done, which finishes the load. Without a plugin (or
 * with hostcache/off) an evicted prefix is gone and recomputed, as before.
 */
#include "core/serve/serve_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/serve/metrics.h"
#include "core/serve/pd.h"
#include "core/util/log.h"
#include "core/util/status.h"

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

static int dsv4_serve_hook_page_alloc(void *ctx, uint32_t *page_p)
{
    return dsv4_engine_page_alloc(ctx, page_p);
}

/* The host tier of the selected hostcache plugin; none without one, or when the plugin
 * keeps nothing on host (off). */
static int dsv4_serve_cache_tier(dsv4_server *srv, const dsv4_config *conf, char *err,
                                 size_t errlen)
{
    const dsv4_plugin_desc *d = conf->desc[DSV4_FAMILY_HOSTCACHE];
    if (!d)
        return 0;
    dsv4_hc_tier_conf tc = {.pool = dsv4_engine_kv_pool(srv->eng),
                            .plugin = d,
                            .plugin_conf = conf->plugin_conf[DSV4_FAMILY_HOSTCACHE]};
    if (!(srv->tier = dsv4_hc_tier_new(&tc, err, errlen)))
        return -EINVAL;
    if (!dsv4_hc_tier_keeps(srv->tier)) {
        dsv4_hc_tier_free(srv->tier);
        srv->tier = NULL;
        dsv4_log(DSV4_LOG_INFO, "server", "hostcache/%s: evicted prefixes are recomputed", d->name);
        return 0;
    }
    dsv4_hc_stats st;
    dsv4_hc_tier_stats(srv->tier, &st);
    dsv4_log(DSV4_LOG_INFO, "server", "hostcache/%s: %u host pages, %u host state blocks", d->name,
             st.host_pages, st.host_slots);
    return 0;
}

int dsv4_serve_cache_new(dsv4_server *srv, const dsv4_config *conf, char *err, size_t errlen)
{
    int rc = dsv4_serve_cache_tier(srv, conf, err, errlen);
    if (rc != 0)
        return rc;
    dsv4_radix_hooks hooks = {
        srv->eng,  dsv4_serve_hook_ref,       dsv4_serve_hook_unref, dsv4_serve_hook_slot_free,
        srv->tier, dsv4_serve_hook_page_alloc};
    srv->keep_pages = conf->server.role == DSV4_ROLE_DECODE;
    srv->cache = dsv4_radix_new(srv->page_tokens, &hooks, srv->keep_pages);
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
    dsv4_hc_tier_free(srv->tier);
    free(srv->cache_pages);
}

/* What r's cached prefix must end at, and in how many of its tokens (*n_p) it may lie. A
 * decode server's PD request takes whole pages only (its prefill server sends the state)
 * and leaves at least one page of its prompt's KV to move (the state travels with it);
 * any other request needs the state at the prefix's end and one token to prefill, and
 * one that scores its prompt must compute every row it still owes (the row before token
 * plp_next scores that token). */
static dsv4_radix_want dsv4_serve_cache_want(const dsv4_server *srv, const dsv4_sreq *r,
                                             uint32_t *n_p)
{
    bool pd = dsv4_pd_decode_takes(srv, r);
    *n_p = dsv4_sreq_len(r) - (pd ? 2 : 1);
    if (dsv4_sreq_scores_prompt(r) && *n_p > r->plp_next - 1)
        *n_p = r->plp_next - 1;
    return pd ? DSV4_RADIX_PAGES : DSV4_RADIX_WITH_STATE;
}

uint32_t dsv4_serve_cache_peek(dsv4_server *srv, const dsv4_sreq *r)
{
    uint32_t n;
    dsv4_radix_want want = dsv4_serve_cache_want(srv, r, &n);
    return dsv4_radix_peek(srv->cache, r->toks, n, want).pages * srv->page_tokens;
}

uint32_t dsv4_serve_cache_hit_pages(const dsv4_server *srv, const dsv4_sreq *r,
                                    uint32_t *unlocked_p)
{
    uint32_t n;
    dsv4_radix_want want = dsv4_serve_cache_want(srv, r, &n);
    dsv4_radix_found f = dsv4_radix_peek(srv->cache, r->toks, n, want);
    *unlocked_p = f.pages - f.on_host - f.locked;
    return f.pages - f.on_host;
}

/* Bring the matched path of a locked node onto the device (radix.h): free device pages
 * for the pages on host by evicting others first, then start the load; the snapshot, when
 * on host only and `want` needs it, is loaded into r's own slot. 0, or why the prefix
 * cannot be used. */
static int dsv4_serve_cache_fetch(dsv4_server *srv, dsv4_sreq *r, dsv4_radix_node *node, uint32_t m,
                                  dsv4_radix_want want)
{
    uint32_t on_host = 0, free = dsv4_kv_pages_free(dsv4_engine_kv(srv->eng)), slot, n_pages;
    for (uint32_t i = 0; i < m; i++)
        on_host += srv->cache_pages[i] == DSV4_RADIX_ON_HOST;
    if (on_host > free)
        dsv4_serve_cache_evict(srv, on_host - free, 0);
    if (!dsv4_engine_seq_pages(srv->eng, r->seq, &slot, &n_pages))
        return -EINVAL;
    return dsv4_radix_fetch(srv->cache, node, srv->cache_pages,
                            want == DSV4_RADIX_WITH_STATE ? slot : DSV4_RADIX_NO_SLOT);
}

uint32_t dsv4_serve_cache_adopt(dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_radix_node *node;
    uint32_t n;
    dsv4_radix_want want = dsv4_serve_cache_want(srv, r, &n);
    uint32_t m = dsv4_radix_match(srv->cache, r->toks, n, want, srv->cache_pages, &node);
    if (m == 0)
        return 0;
    /* locked first: evicting room for a load must not take this path */
    dsv4_radix_lock(srv->cache, node);
    /* a PD request's state comes from its prefill server: no snapshot is copied */
    uint32_t snap = want == DSV4_RADIX_WITH_STATE ? dsv4_radix_node_slot(node) : DSV4_RADIX_NO_SLOT;
    int rc = srv->tier ? dsv4_serve_cache_fetch(srv, r, node, m, want) : 0;
    if (rc == 0)
        rc = dsv4_engine_seq_adopt(srv->eng, r->seq, srv->cache_pages, m,
                                   snap == DSV4_RADIX_NO_SLOT ? DSV4_ENGINE_NO_SLOT : snap);
    if (rc != 0) {
        dsv4_radix_unlock(srv->cache, node);
        /* a load into r's slot must land before r prefills from scratch */
        if (srv->tier)
            dsv4_hc_tier_load_finish(srv->tier);
        dsv4_log(DSV4_LOG_DEBUG, "server", "request %llu: cached prefix not used (%s)",
                 (unsigned long long)r->id, dsv4_strerror(rc));
        return 0;
    }
    r->node = node;
    r->n_fed = m * srv->page_tokens;
    return r->n_fed;
}

void dsv4_serve_cache_boundary(dsv4_server *srv, dsv4_sreq *r)
{
    if (r->snap_slot == DSV4_RADIX_NO_SLOT) {
        /* a slot stays free for every request max_running could still admit; past that
         * the cache's least recently used snapshots make way, so that the cache keeps
         * taking new prefixes instead of holding its first ones for good */
        const dsv4_kv_pool *pool = dsv4_engine_kv(srv->eng);
        uint32_t keep = srv->max_running - srv->n_running, free = dsv4_kv_slots_free(pool);
        if (free <= keep)
            dsv4_serve_cache_evict(srv, 0, keep + 1 - free);
        if (dsv4_kv_slots_free(pool) <= keep ||
            dsv4_engine_slot_alloc(srv->eng, &r->snap_slot) != 0)
            return;
    }
    if (dsv4_engine_seq_snapshot(srv->eng, r->seq, r->snap_slot) != 0) {
        dsv4_engine_slot_free(srv->eng, r->snap_slot);
        r->snap_slot = DSV4_RADIX_NO_SLOT;
        return;
    }
    r->snap_pages = r->n_fed / srv->page_tokens;
    if (r->snap_pages == r->fork_pages)
        dsv4_serve_cache_publish(srv, r, true);
}

void dsv4_serve_cache_note_fork(dsv4_server *srv, dsv4_sreq *r)
{
    uint32_t n;
    dsv4_serve_cache_want(srv, r, &n);
    /* the whole pages of r's prompt that cached paths hold, with a state or not */
    uint32_t shared = dsv4_radix_peek(srv->cache, r->toks, n, DSV4_RADIX_PAGES).pages;
    r->fork_pages = shared * srv->page_tokens > r->n_fed ? shared : 0;
}

bool dsv4_serve_cache_publish(dsv4_server *srv, dsv4_sreq *r, bool state)
{
    uint32_t slot, n_pages = 0, whole = state ? r->snap_pages : r->n_fed / srv->page_tokens;
    if (state && whole != 0 && whole == r->published)
        return true; /* there already */
    if (state && r->snap_slot == DSV4_RADIX_NO_SLOT)
        return false;
    const uint32_t *pages = dsv4_engine_seq_pages(srv->eng, r->seq, &slot, &n_pages);
    if (!pages || n_pages < whole || whole == 0)
        return false;
    /* the slot is the cache's now whatever the outcome (kept by the node, or freed) */
    int rc = dsv4_radix_insert(srv->cache, r->toks, whole, pages, state ? whole : 0,
                               state ? r->snap_slot : DSV4_RADIX_NO_SLOT);
    if (state)
        r->snap_slot = DSV4_RADIX_NO_SLOT;
    /* r runs from the published node now: locked, its pages (r's too) are not counted as
     * pages eviction could free, and they stay for the requests waiting to adopt them */
    dsv4_radix_node *node;
    if (rc != 0 || dsv4_radix_match(srv->cache, r->toks, whole * srv->page_tokens,
                                    state ? DSV4_RADIX_WITH_STATE : DSV4_RADIX_PAGES,
                                    srv->cache_pages, &node) != whole)
        return false;
    dsv4_radix_lock(srv->cache, node);
    if (r->node)
        dsv4_radix_unlock(srv->cache, r->node);
    r->node = node;
    r->published = state ? whole : r->published;
    return true;
}

void dsv4_serve_cache_release(dsv4_server *srv, dsv4_sreq *r, bool insert)
{
    /* r's slot may be the target of the active load: it lands before the slot is reused */
    if (srv->tier)
        dsv4_hc_tier_load_finish(srv->tier);
    bool snap = r->snap_slot != DSV4_RADIX_NO_SLOT;
    uint32_t snap_pages = snap ? r->snap_pages : 0;
    /* a decode server keeps every whole page of a request that ran (its KV verified or
     * computed here): the next turn's PD request adopts them instead of moving them */
    uint32_t whole =
        srv->keep_pages && r->where == DSV4_SREQ_RUNNING ? r->n_fed / srv->page_tokens : 0;
    whole = whole > snap_pages ? whole : snap_pages;
    uint32_t slot, n_pages = 0;
    const uint32_t *pages =
        insert && whole ? dsv4_engine_seq_pages(srv->eng, r->seq, &slot, &n_pages) : NULL;
    if (pages && n_pages >= whole)
        dsv4_radix_insert(srv->cache, r->toks, whole, pages, snap_pages,
                          snap ? r->snap_slot : DSV4_RADIX_NO_SLOT);
    else if (snap)
        dsv4_engine_slot_free(srv->eng, r->snap_slot);
    r->snap_slot = DSV4_RADIX_NO_SLOT;
    if (r->node) {
        dsv4_radix_unlock(srv->cache, r->node);
        r->node = NULL;
        r->published = 0;
    }
}

bool dsv4_serve_cache_evict(dsv4_server *srv, uint32_t pages, uint32_t slots)
{
    uint32_t got_slots = 0, got = dsv4_radix_evict(srv->cache, pages, slots, &got_slots);
    dsv4_metric_add(DSV4_M_EVICTED_PAGES, got);
    return got > 0 || got_slots > 0;
}

void dsv4_serve_cache_flush(dsv4_server *srv)
{
    uint32_t before = dsv4_radix_pages(srv->cache);
    dsv4_radix_flush(srv->cache);
    dsv4_metric_add(DSV4_M_EVICTED_PAGES, before - dsv4_radix_pages(srv->cache));
}

uint32_t dsv4_serve_cache_evictable_pages(const dsv4_server *srv)
{
    return dsv4_radix_pages_unlocked(srv->cache);
}

void dsv4_serve_cache_step_done(dsv4_server *srv)
{
    if (!srv->tier)
        return;
    int rc = dsv4_hc_tier_load_finish(srv->tier);
    if (rc != 0)
        dsv4_log(DSV4_LOG_ERROR, "server", "host tier load failed (%s)", dsv4_strerror(rc));
}

void dsv4_serve_cache_metrics(const dsv4_server *srv)
{
    if (!srv->tier)
        return;
    dsv4_hc_stats st;
    dsv4_hc_tier_stats(srv->tier, &st);
    dsv4_metric_set(DSV4_M_HOSTCACHE_HITS, (int64_t)st.hits);
    dsv4_metric_set(DSV4_M_HOSTCACHE_LOADS, (int64_t)st.loads);
    dsv4_metric_set(DSV4_M_HOSTCACHE_LOAD_BYTES, (int64_t)st.load_bytes);
    dsv4_metric_set(DSV4_M_HOSTCACHE_SAVE_BYTES, (int64_t)st.save_bytes);
    dsv4_metric_set(DSV4_M_HOSTCACHE_LOAD_WAIT, (int64_t)st.load_wait_ns);
    dsv4_metric_set(DSV4_M_HOST_PAGES_USED, st.host_pages_used);
    dsv4_metric_set(DSV4_M_HOST_PAGES_TOTAL, st.host_pages);
    dsv4_metric_set(DSV4_M_HOST_SLOTS_USED, st.host_slots_used);
    dsv4_metric_set(DSV4_M_HOST_HIGH_WATER, (int64_t)st.host_high_water_bytes);
}
