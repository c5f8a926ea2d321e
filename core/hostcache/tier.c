/* tier.c: the host tier (tier.h): the plugin, the host pool, write policies, residency
 * updates and the per-layer fence on the device pool. */
#include "core/hostcache/tier.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/config/schema.h"
#include "core/hostcache/hostpool.h"
#include "core/plugin/registry.h"

struct dsv4_hc_tier {
    dsv4_kv_pool *pool;
    const dsv4_plugin_desc *desc;
    const dsv4_hostcache_ops *ops;
    const dsv4_host *host;
    void *own_conf; /* the defaults, when the caller gave no config */
    void *state;
    bool inited;        /* state exists: fini it */
    dsv4_host_pool *hp; /* NULL for a plugin that keeps nothing (off) */
    dsv4_hostcache_policy policy;
    size_t unit_bytes[2]; /* one page, one state block, over every buffer */
    void *load_op[2];     /* the active load: its page op and its state op */
    dsv4_hc_stats stats;
};

dsv4_hc_entry dsv4_hc_entry_on_device(uint32_t device)
{
    return (dsv4_hc_entry){.device = device, .host = DSV4_HC_NONE, .hits = 0};
}

dsv4_hc_residency dsv4_hc_entry_residency(const dsv4_hc_entry *e)
{
    return (dsv4_hc_residency)((e->device != DSV4_HC_NONE ? DSV4_HC_DEVICE : 0) |
                               (e->host != DSV4_HC_NONE ? DSV4_HC_HOST : 0));
}

/* The fence dsv4_kv_pool_layer() calls: wait for `layer` of the active load, pages and
 * state blocks both (the window ring and compressor carry are read by the same layer's
 * attention and indexer as its pages). */
static int dsv4_hc_tier_fence(void *ctx, uint32_t layer)
{
    dsv4_hc_tier *t = ctx;
    if (!t->load_op[0] && !t->load_op[1])
        return 0;
    uint64_t t0 = t->host->now_ns();
    for (int u = 0; u < 2; u++) {
        if (!t->load_op[u])
            continue;
        int rc = t->ops->wait_layer(t->state, t->load_op[u], layer);
        if (rc != 0)
            return rc;
    }
    t->stats.load_wait_ns += t->host->now_ns() - t0;
    return 0;
}

/* The same fence for a CUDA stream (the CUDA forward's): the stream waits on the layer's
 * events of the active load, the host does not. Installed only for a plugin with
 * stream_wait_layer (which waits on the host itself for host layouts). */
static int dsv4_hc_tier_stream_fence(void *ctx, uint32_t layer, void *stream)
{
    dsv4_hc_tier *t = ctx;
    for (int u = 0; u < 2; u++) {
        if (!t->load_op[u])
            continue;
        int rc = t->ops->stream_wait_layer(t->state, t->load_op[u], layer, stream);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Size the host pool from the plugin's config head, attach both layouts, install the
 * fences. */
static int dsv4_hc_tier_pool(dsv4_hc_tier *t, const dsv4_hostcache_config *hc, char *err,
                             size_t errlen)
{
    const dsv4_kv_layout *dev = dsv4_kv_pool_layout(t->pool);
    uint64_t pages = hc->host_size / t->unit_bytes[DSV4_HC_PAGE];
    if (pages > UINT32_MAX - 1)
        pages = UINT32_MAX - 1;
    if (!(t->hp = dsv4_host_pool_new(dev, (uint32_t)pages, (uint32_t)hc->host_slots, err, errlen)))
        return -ENOMEM;
    t->policy = (dsv4_hostcache_policy)hc->write_policy;
    t->stats.host_pages = (uint32_t)pages;
    t->stats.host_slots = (uint32_t)hc->host_slots;
    int rc = t->ops->attach(t->state, dev, dsv4_host_pool_layout(t->hp));
    if (rc != 0) {
        snprintf(err, errlen, "plugin hostcache/%s: attach failed (%d)", t->desc->name, rc);
        return rc;
    }
    dsv4_kv_pool_set_fence(t->pool, dsv4_hc_tier_fence, t);
    if (DSV4_HAS_FIELD(t->ops, dsv4_hostcache_ops, stream_wait_layer) && t->ops->stream_wait_layer)
        dsv4_kv_pool_set_stream_fence(t->pool, dsv4_hc_tier_stream_fence);
    return 0;
}

static int dsv4_hc_tier_plugin(dsv4_hc_tier *t, const dsv4_hc_tier_conf *conf, char *err,
                               size_t errlen)
{
    const dsv4_plugin_desc *d = conf->plugin;
    if (!d || d->family != DSV4_FAMILY_HOSTCACHE || !d->ops || !d->init) {
        snprintf(err, errlen, "host tier: no hostcache plugin (family hostcache expected)");
        return -EINVAL;
    }
    const dsv4_hostcache_ops *ops = d->ops;
    t->desc = d;
    t->ops = ops;
    if (!DSV4_HAS_FIELD(ops, dsv4_hostcache_ops, load_state)) {
        snprintf(err, errlen,
                 "plugin hostcache/%s: ops lack save_state/load_state (state blocks could not "
                 "move with their pages)",
                 d->name);
        return -EINVAL;
    }
    const void *pconf = conf->plugin_conf;
    if (!pconf && d->config_size > 0) {
        if (!(t->own_conf = calloc(1, d->config_size))) {
            snprintf(err, errlen, "host tier: out of memory");
            return -ENOMEM;
        }
        int rc = dsv4_schema_defaults(d->options, t->own_conf, err, errlen);
        if (rc != 0)
            return rc;
        pconf = t->own_conf;
    }
    char why[256] = "";
    int rc = d->init(t->host, pconf, &t->state, why, sizeof(why));
    if (rc != 0) {
        snprintf(err, errlen, "plugin hostcache/%s: init failed (%s)", d->name, why);
        return rc;
    }
    t->inited = true;
    if (d->config_size >= sizeof(dsv4_hostcache_config))
        return dsv4_hc_tier_pool(t, (const dsv4_hostcache_config *)pconf, err, errlen);
    return 0;
}

dsv4_hc_tier *dsv4_hc_tier_new(const dsv4_hc_tier_conf *conf, char *err, size_t errlen)
{
    dsv4_hc_tier *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errlen, "host tier: out of memory");
        return NULL;
    }
    t->pool = conf->pool;
    t->host = conf->host ? conf->host : dsv4_host_default();
    const dsv4_kv_layout *dev = dsv4_kv_pool_layout(t->pool);
    for (uint32_t i = 0; i < dev->n_buffers; i++)
        t->unit_bytes[dsv4_buf_is_paged(dev->buffers[i].kind) ? DSV4_HC_PAGE : DSV4_HC_SLOT] +=
            dev->buffers[i].block_bytes;
    if (dsv4_hc_tier_plugin(t, conf, err, errlen) != 0) {
        dsv4_hc_tier_free(t);
        return NULL;
    }
    return t;
}

void dsv4_hc_tier_free(dsv4_hc_tier *t)
{
    if (!t)
        return;
    if (t->hp) {
        dsv4_hc_tier_load_finish(t);
        dsv4_kv_pool_set_fence(t->pool, NULL, NULL);
    }
    if (t->inited && t->desc->fini)
        t->desc->fini(t->state);
    dsv4_host_pool_free(t->hp);
    if (t->own_conf) {
        dsv4_schema_release(t->desc->options, t->own_conf);
        free(t->own_conf);
    }
    free(t);
}

bool dsv4_hc_tier_keeps(const dsv4_hc_tier *t)
{
    return t->hp != NULL;
}

static int dsv4_hc_host_alloc(dsv4_hc_tier *t, dsv4_hc_unit unit, uint32_t *id_p)
{
    return unit == DSV4_HC_PAGE ? dsv4_host_pool_page_alloc(t->hp, id_p)
                                : dsv4_host_pool_slot_alloc(t->hp, id_p);
}

static void dsv4_hc_host_free(dsv4_hc_tier *t, dsv4_hc_unit unit, uint32_t id)
{
    if (unit == DSV4_HC_PAGE)
        dsv4_host_pool_page_free(t->hp, id);
    else
        dsv4_host_pool_slot_free(t->hp, id);
}

/* Wait for every layer of op, then give it back (release waits for the rest too). */
static int dsv4_hc_tier_wait_all(dsv4_hc_tier *t, void *op)
{
    int rc = 0;
    uint32_t layers = dsv4_kv_pool_layout(t->pool)->n_layers;
    for (uint32_t l = 0; l < layers && rc == 0; l++)
        rc = t->ops->wait_layer(t->state, op, l);
    return rc;
}

static int dsv4_hc_tier_complete(dsv4_hc_tier *t, void *op)
{
    int rc = dsv4_hc_tier_wait_all(t, op);
    t->ops->release(t->state, op);
    return rc;
}

/* Copy the entries that `want` selects (all when NULL; on device, not on host) to new
 * host ids, and return once they are on host. Entries that find the host pool full stay
 * device-only. */
static int dsv4_hc_tier_backup(dsv4_hc_tier *t, dsv4_hc_unit unit, dsv4_hc_entry *const *e,
                               size_t n, const bool *want)
{
    dsv4_page_copy *copies = malloc((n ? n : 1) * sizeof(*copies));
    size_t *which = malloc((n ? n : 1) * sizeof(*which));
    size_t k = 0;
    int rc = 0;
    if (!copies || !which) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        if ((want && !want[i]) || e[i]->device == DSV4_HC_NONE || e[i]->host != DSV4_HC_NONE ||
            dsv4_hc_host_alloc(t, unit, &id) != 0)
            continue;
        copies[k] = (dsv4_page_copy){.device_page = e[i]->device, .host_page = id};
        which[k++] = i;
    }
    if (k == 0)
        goto out;
    void *op = NULL;
    rc = unit == DSV4_HC_PAGE ? t->ops->save(t->state, copies, k, &op)
                              : t->ops->save_state(t->state, copies, k, &op);
    if (rc == 0)
        rc = dsv4_hc_tier_complete(t, op);
    for (size_t j = 0; j < k; j++) {
        if (rc == 0)
            e[which[j]]->host = copies[j].host_page;
        else
            dsv4_hc_host_free(t, unit, copies[j].host_page);
    }
    if (rc == 0)
        t->stats.save_bytes += k * t->unit_bytes[unit];
out:
    free(copies);
    free(which);
    return rc;
}

/* The use at which the write policy backs an entry up (0: only at eviction). */
static uint32_t dsv4_hc_tier_threshold(const dsv4_hc_tier *t)
{
    return t->policy == DSV4_HOSTCACHE_WRITE_THROUGH             ? 1
           : t->policy == DSV4_HOSTCACHE_WRITE_THROUGH_SELECTIVE ? 2
                                                                 : 0;
}

/* Whether a backup of e is due: at its use number `hits` (a hit), or at eviction. */
static bool dsv4_hc_tier_due(const dsv4_hc_tier *t, const dsv4_hc_entry *e, uint32_t hits,
                             bool evict)
{
    if (!t->hp || e->device == DSV4_HC_NONE || e->host != DSV4_HC_NONE)
        return false;
    uint32_t threshold = dsv4_hc_tier_threshold(t);
    return evict ? threshold == 0 : threshold > 0 && hits >= threshold;
}

uint32_t dsv4_hc_tier_need(const dsv4_hc_tier *t, bool evict, dsv4_hc_entry *const *e, size_t n)
{
    uint32_t need = 0;
    for (size_t i = 0; i < n; i++)
        need += dsv4_hc_tier_due(t, e[i], e[i]->hits + !evict, evict);
    return need;
}

uint32_t dsv4_hc_tier_host_free(const dsv4_hc_tier *t, dsv4_hc_unit unit)
{
    if (!t->hp)
        return 0;
    return unit == DSV4_HC_PAGE ? dsv4_host_pool_pages_free(t->hp)
                                : dsv4_host_pool_slots_free(t->hp);
}

int dsv4_hc_tier_hit(dsv4_hc_tier *t, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n)
{
    bool *want = calloc(n ? n : 1, sizeof(bool));
    if (!want)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        e[i]->hits++;
        want[i] = dsv4_hc_tier_due(t, e[i], e[i]->hits, false);
    }
    int rc = t->hp ? dsv4_hc_tier_backup(t, unit, e, n, want) : 0;
    free(want);
    return rc;
}

int dsv4_hc_tier_evict(dsv4_hc_tier *t, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n)
{
    if (t->hp && dsv4_hc_tier_threshold(t) == 0) {
        int rc = dsv4_hc_tier_backup(t, unit, e, n, NULL);
        if (rc != 0)
            return rc;
    }
    for (size_t i = 0; i < n; i++)
        e[i]->device = DSV4_HC_NONE;
    return 0;
}

void dsv4_hc_tier_drop(dsv4_hc_tier *t, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t->hp && e[i]->host != DSV4_HC_NONE)
            dsv4_hc_host_free(t, unit, e[i]->host);
        e[i]->host = DSV4_HC_NONE;
    }
}

/* Start the load op of one unit; *op_p stays NULL when there is nothing to load. */
static int dsv4_hc_tier_start(dsv4_hc_tier *t, dsv4_hc_unit unit, dsv4_hc_entry *const *e, size_t n,
                              void **op_p)
{
    if (n == 0)
        return 0;
    dsv4_page_copy *copies = malloc(n * sizeof(*copies));
    if (!copies)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        copies[i] = (dsv4_page_copy){.device_page = e[i]->device, .host_page = e[i]->host};
    int rc = unit == DSV4_HC_PAGE ? t->ops->load(t->state, copies, n, op_p)
                                  : t->ops->load_state(t->state, copies, n, op_p);
    free(copies);
    if (rc == 0)
        t->stats.load_bytes += n * t->unit_bytes[unit];
    return rc;
}

int dsv4_hc_tier_load(dsv4_hc_tier *t, dsv4_hc_entry *const *pages, size_t n_pages,
                      dsv4_hc_entry *const *slots, size_t n_slots)
{
    if (!t->hp)
        return -ENOTSUP;
    if (t->load_op[0] || t->load_op[1])
        return -EBUSY;
    for (size_t i = 0; i < n_pages + n_slots; i++) {
        const dsv4_hc_entry *x = i < n_pages ? pages[i] : slots[i - n_pages];
        if (x->host == DSV4_HC_NONE || x->device == DSV4_HC_NONE)
            return -EINVAL;
    }
    /* state first: the async worker runs ops in order, so the small state op lands
     * before the pages and dsv4_hc_tier_wait_state is short */
    int rc = dsv4_hc_tier_start(t, DSV4_HC_SLOT, slots, n_slots, &t->load_op[1]);
    if (rc == 0)
        rc = dsv4_hc_tier_start(t, DSV4_HC_PAGE, pages, n_pages, &t->load_op[0]);
    if (rc != 0) {
        dsv4_hc_tier_load_finish(t);
        return rc;
    }
    t->stats.loads++;
    t->stats.hits += n_pages + n_slots;
    return 0;
}

int dsv4_hc_tier_wait_state(dsv4_hc_tier *t)
{
    return t->load_op[1] ? dsv4_hc_tier_wait_all(t, t->load_op[1]) : 0;
}

int dsv4_hc_tier_load_finish(dsv4_hc_tier *t)
{
    int rc = 0;
    for (int u = 0; u < 2; u++) {
        if (!t->load_op[u])
            continue;
        int r = dsv4_hc_tier_complete(t, t->load_op[u]);
        rc = rc ? rc : r;
        t->load_op[u] = NULL;
    }
    return rc;
}

void dsv4_hc_tier_stats(const dsv4_hc_tier *t, dsv4_hc_stats *stats_p)
{
    *stats_p = t->stats;
    if (t->hp) {
        stats_p->host_pages_used = t->stats.host_pages - dsv4_host_pool_pages_free(t->hp);
        stats_p->host_slots_used = t->stats.host_slots - dsv4_host_pool_slots_free(t->hp);
        stats_p->host_high_water_bytes = dsv4_host_pool_high_water_bytes(t->hp);
    }
}
