/* radix.c: the page trie of the prefix cache, with device and host residency (see
 * radix.h). */
#include "core/serve/radix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(DSV4_RADIX_NO_SLOT == DSV4_HC_NONE, "a missing slot is a missing residency id");

struct dsv4_radix_node {
    dsv4_radix_node *parent, *child, *next; /* first child, next sibling */
    int32_t *toks;                          /* the page_tokens tokens of this page */
    dsv4_hc_entry page;                     /* its page, on device and/or host */
    dsv4_hc_entry snap;                     /* its snapshot; nowhere = none */
    uint32_t lock;                          /* running requests on this node or below */
    uint64_t used;                          /* LRU clock value of the last match */
};

struct dsv4_radix {
    dsv4_radix_node root;
    uint32_t page_tokens;
    bool keep_pages; /* nodes without a snapshot are matched (DSV4_RADIX_PAGES) */
    dsv4_radix_hooks hooks;
    uint64_t clock;
    uint32_t n_pages, n_locked_pages, n_slots; /* on the device */
};

static bool dsv4_radix_on_device(const dsv4_hc_entry *e)
{
    return e->device != DSV4_HC_NONE;
}

static bool dsv4_radix_has_snap(const dsv4_radix_node *nd)
{
    return dsv4_hc_entry_residency(&nd->snap) != DSV4_HC_GONE;
}

dsv4_radix *dsv4_radix_new(uint32_t page_tokens, const dsv4_radix_hooks *hooks, bool keep_pages)
{
    dsv4_radix *rx = calloc(1, sizeof(*rx));
    if (!rx)
        return NULL;
    rx->page_tokens = page_tokens;
    rx->keep_pages = keep_pages;
    rx->hooks = *hooks;
    rx->root.page = rx->root.snap = (dsv4_hc_entry){DSV4_HC_NONE, DSV4_HC_NONE, 0};
    return rx;
}

/* Give the node's device page and snapshot slot back (the ids passed, which the entries
 * may no longer name after a tier eviction). */
static void dsv4_radix_give_back(dsv4_radix *rx, dsv4_radix_node *nd, uint32_t page, uint32_t slot)
{
    if (slot != DSV4_HC_NONE) {
        rx->hooks.slot_free(rx->hooks.ctx, slot);
        rx->n_slots--;
    }
    if (page != DSV4_HC_NONE) {
        rx->hooks.page_unref(rx->hooks.ctx, page);
        rx->n_pages--;
        if (nd->lock)
            rx->n_locked_pages--;
    }
}

/* Unlink a leaf from its parent, give its device copies back and free its host copies. */
static void dsv4_radix_remove(dsv4_radix *rx, dsv4_radix_node *nd)
{
    dsv4_radix_node **pp = &nd->parent->child;
    while (*pp != nd)
        pp = &(*pp)->next;
    *pp = nd->next;
    dsv4_radix_give_back(rx, nd, nd->page.device, nd->snap.device);
    if (rx->hooks.tier) {
        dsv4_hc_entry *pe = &nd->page, *se = &nd->snap;
        dsv4_hc_tier_drop(rx->hooks.tier, DSV4_HC_PAGE, &pe, 1);
        dsv4_hc_tier_drop(rx->hooks.tier, DSV4_HC_SLOT, &se, 1);
    }
    free(nd->toks);
    free(nd);
}

static void dsv4_radix_free_below(dsv4_radix *rx, dsv4_radix_node *nd)
{
    while (nd->child) {
        dsv4_radix_node *c = nd->child;
        dsv4_radix_free_below(rx, c);
        dsv4_radix_remove(rx, c);
    }
}

static void dsv4_radix_remove_subtree(dsv4_radix *rx, dsv4_radix_node *nd)
{
    dsv4_radix_free_below(rx, nd);
    dsv4_radix_remove(rx, nd);
}

void dsv4_radix_free(dsv4_radix *rx)
{
    if (!rx)
        return;
    dsv4_radix_free_below(rx, &rx->root);
    free(rx);
}

static dsv4_radix_node *dsv4_radix_child(const dsv4_radix *rx, const dsv4_radix_node *nd,
                                         const int32_t *toks)
{
    for (dsv4_radix_node *c = nd->child; c; c = c->next)
        if (memcmp(c->toks, toks, rx->page_tokens * sizeof(int32_t)) == 0)
            return c;
    return NULL;
}

/* The deepest node on the whole-page path of toks[0..n) that a match wanting `want` may end
 * at (NULL on a miss), and what the path down to it holds. */
static dsv4_radix_node *dsv4_radix_walk(const dsv4_radix *rx, const int32_t *toks, uint32_t n,
                                        dsv4_radix_want want, dsv4_radix_found *found)
{
    const dsv4_radix_node *nd = &rx->root;
    dsv4_radix_node *best = NULL;
    dsv4_radix_found path = {0};
    *found = path;
    while ((path.pages + 1) * (uint64_t)rx->page_tokens <= n) {
        dsv4_radix_node *c = dsv4_radix_child(rx, nd, toks + (size_t)path.pages * rx->page_tokens);
        if (!c)
            break;
        nd = c;
        path.pages++;
        path.on_host += !dsv4_radix_on_device(&c->page);
        path.locked += c->lock && dsv4_radix_on_device(&c->page);
        if (want == DSV4_RADIX_PAGES || dsv4_radix_has_snap(c)) {
            best = c;
            *found = path;
        }
    }
    return best;
}

uint32_t dsv4_radix_match(dsv4_radix *rx, const int32_t *toks, uint32_t n, dsv4_radix_want want,
                          uint32_t *pages_out, dsv4_radix_node **node_p)
{
    dsv4_radix_found found;
    dsv4_radix_node *best = dsv4_radix_walk(rx, toks, n, want, &found);
    if (!pages_out || !best)
        return found.pages;
    uint64_t now = ++rx->clock;
    uint32_t i = found.pages;
    for (dsv4_radix_node *p = best; p != &rx->root; p = p->parent) {
        pages_out[--i] = p->page.device;
        p->used = now;
    }
    *node_p = best;
    return found.pages;
}

dsv4_radix_found dsv4_radix_peek(const dsv4_radix *rx, const int32_t *toks, uint32_t n,
                                 dsv4_radix_want want)
{
    dsv4_radix_found found;
    dsv4_radix_walk(rx, toks, n, want, &found);
    return found;
}

uint32_t dsv4_radix_node_slot(const dsv4_radix_node *node)
{
    return node->snap.device;
}

void dsv4_radix_lock(dsv4_radix *rx, dsv4_radix_node *node)
{
    for (dsv4_radix_node *p = node; p != &rx->root; p = p->parent)
        if (p->lock++ == 0 && dsv4_radix_on_device(&p->page))
            rx->n_locked_pages++;
}

void dsv4_radix_unlock(dsv4_radix *rx, dsv4_radix_node *node)
{
    for (dsv4_radix_node *p = node; p != &rx->root; p = p->parent)
        if (--p->lock == 0 && dsv4_radix_on_device(&p->page))
            rx->n_locked_pages--;
}

/* The least recently used unlocked leaf on host only at or below nd (NULL when none).
 * Nodes below a host-only node are host-only too, so only those subtrees are searched. */
static dsv4_radix_node *dsv4_radix_lru_host_leaf(dsv4_radix_node *nd, dsv4_radix_node *best)
{
    for (dsv4_radix_node *c = nd->child; c; c = c->next) {
        if (c->child)
            best = dsv4_radix_lru_host_leaf(c, best);
        else if (!c->lock && !dsv4_radix_on_device(&c->page) && (!best || c->used < best->used))
            best = c;
    }
    return best;
}

/* Drop host-only leaves, least recently used first, until `pages` pages and `slots`
 * state blocks are free on host (or none is left to drop). */
static void dsv4_radix_host_room(dsv4_radix *rx, uint32_t pages, uint32_t slots)
{
    dsv4_hc_tier *t = rx->hooks.tier;
    while (dsv4_hc_tier_host_free(t, DSV4_HC_PAGE) < pages ||
           dsv4_hc_tier_host_free(t, DSV4_HC_SLOT) < slots) {
        dsv4_radix_node *leaf = dsv4_radix_lru_host_leaf(&rx->root, NULL);
        if (!leaf)
            return;
        dsv4_radix_remove(rx, leaf);
    }
}

/* Count one use of n path pages and of end's snapshot (end: a node of the path) with the
 * tier (the write policy's backups), making room on host first. A backup the tier cannot make
 * leaves the entry on the device only, which is not an error. */
static void dsv4_radix_use(dsv4_radix *rx, dsv4_hc_entry *const *pages, uint32_t n,
                           dsv4_radix_node *end)
{
    dsv4_hc_tier *t = rx->hooks.tier;
    if (!t)
        return;
    dsv4_hc_entry *snap = &end->snap;
    bool has_snap = dsv4_radix_has_snap(end);
    dsv4_radix_host_room(rx, dsv4_hc_tier_need(t, false, pages, n),
                         has_snap ? dsv4_hc_tier_need(t, false, &snap, 1) : 0);
    dsv4_hc_tier_hit(t, DSV4_HC_PAGE, pages, n);
    if (has_snap)
        dsv4_hc_tier_hit(t, DSV4_HC_SLOT, &snap, 1);
}

/* The page entries of the path to nd, root first, in a new array (*n_p entries). */
static dsv4_hc_entry **dsv4_radix_path(dsv4_radix_node *nd, const dsv4_radix_node *root,
                                       uint32_t *n_p)
{
    uint32_t n = 0;
    for (const dsv4_radix_node *p = nd; p != root; p = p->parent)
        n++;
    dsv4_hc_entry **path = malloc((n ? n : 1) * sizeof(*path));
    if (!path)
        return NULL;
    uint32_t i = n;
    for (dsv4_radix_node *p = nd; p != root; p = p->parent)
        path[--i] = &p->page;
    *n_p = n;
    return path;
}

/* Allocate device pages for the host-only entries of path[0..n) and start the load of
 * them and, when snap_slot is set, of the snapshot into it. On failure every entry is as
 * it was. */
static int dsv4_radix_load(dsv4_radix *rx, dsv4_hc_entry **path, uint32_t n,
                           const dsv4_radix_node *end, uint32_t snap_slot)
{
    dsv4_hc_entry **load = malloc((n ? n : 1) * sizeof(*load));
    if (!load)
        return -ENOMEM;
    uint32_t k = 0;
    int rc = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        if (dsv4_radix_on_device(path[i]))
            continue;
        rc = rx->hooks.page_alloc(rx->hooks.ctx, &path[i]->device);
        if (rc == 0)
            load[k++] = path[i];
    }
    /* the snapshot goes straight into the adopting sequence's slot: the node's own entry
     * stays on host, and the sequence's state is fenced like its pages */
    dsv4_hc_entry snap = {snap_slot, end->snap.host, 0}, *sp = &snap;
    if (rc == 0 && (k > 0 || snap_slot != DSV4_HC_NONE))
        rc = dsv4_hc_tier_load(rx->hooks.tier, load, k, &sp, snap_slot != DSV4_HC_NONE);
    for (uint32_t j = 0; j < k; j++) {
        if (rc == 0) {
            rx->n_pages++;
            rx->n_locked_pages++; /* the caller holds the lock on the whole path */
        } else {
            rx->hooks.page_unref(rx->hooks.ctx, load[j]->device);
            load[j]->device = DSV4_HC_NONE;
        }
    }
    free(load);
    return rc;
}

int dsv4_radix_fetch(dsv4_radix *rx, dsv4_radix_node *node, uint32_t *pages, uint32_t slot)
{
    dsv4_hc_tier *t = rx->hooks.tier;
    if (!t)
        return 0;
    uint32_t n;
    dsv4_hc_entry **path = dsv4_radix_path(node, &rx->root, &n);
    if (!path)
        return -ENOMEM;
    dsv4_radix_use(rx, path, n, node);
    uint32_t snap_slot = dsv4_radix_on_device(&node->snap) ? DSV4_HC_NONE : slot;
    int rc = 0;
    bool any = snap_slot != DSV4_HC_NONE;
    for (uint32_t i = 0; i < n; i++)
        any |= !dsv4_radix_on_device(path[i]);
    if (any) {
        dsv4_hc_tier_load_finish(t);
        rc = dsv4_radix_load(rx, path, n, node, snap_slot);
    }
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        pages[i] = path[i]->device;
    free(path);
    return rc;
}

/* nd takes slot (if any) as its device snapshot, unless it has one there: then slot is
 * freed. */
static void dsv4_radix_snap_keep(dsv4_radix *rx, dsv4_radix_node *nd, uint32_t slot)
{
    if (slot == DSV4_RADIX_NO_SLOT)
        return;
    if (dsv4_radix_on_device(&nd->snap)) {
        rx->hooks.slot_free(rx->hooks.ctx, slot);
    } else {
        nd->snap.device = slot; /* beside a host copy of the same state, if any */
        rx->n_slots++;
    }
}

int dsv4_radix_insert(dsv4_radix *rx, const int32_t *toks, uint32_t n_pages, const uint32_t *pages,
                      uint32_t snap_pages, uint32_t slot)
{
    dsv4_radix_node *nd = &rx->root, *snap_nd = &rx->root;
    uint64_t now = ++rx->clock;
    size_t pt = rx->page_tokens;
    if (snap_pages > n_pages) {
        if (slot != DSV4_RADIX_NO_SLOT)
            rx->hooks.slot_free(rx->hooks.ctx, slot);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < n_pages; i++) {
        dsv4_radix_node *c = dsv4_radix_child(rx, nd, toks + i * pt);
        if (!c) {
            c = calloc(1, sizeof(*c));
            int32_t *t = c ? malloc(pt * sizeof(int32_t)) : NULL;
            if (!t) {
                free(c);
                if (slot != DSV4_RADIX_NO_SLOT && snap_nd == &rx->root)
                    rx->hooks.slot_free(rx->hooks.ctx, slot);
                return -ENOMEM;
            }
            memcpy(t, toks + i * pt, pt * sizeof(int32_t));
            *c = (dsv4_radix_node){.parent = nd,
                                   .next = nd->child,
                                   .toks = t,
                                   .page = {DSV4_HC_NONE, DSV4_HC_NONE, 0},
                                   .snap = {DSV4_HC_NONE, DSV4_HC_NONE, 0}};
            nd->child = c;
        }
        if (!dsv4_radix_on_device(&c->page)) {
            rx->hooks.page_ref(rx->hooks.ctx, pages[i]);
            c->page.device = pages[i];
            rx->n_pages++;
            if (c->lock)
                rx->n_locked_pages++;
        }
        c->used = now;
        nd = c;
        if (i + 1 == snap_pages) {
            snap_nd = c;
            dsv4_radix_snap_keep(rx, c, slot);
        }
    }
    if (slot != DSV4_RADIX_NO_SLOT && snap_pages == 0)
        rx->hooks.slot_free(rx->hooks.ctx, slot);
    if (rx->hooks.tier && nd != &rx->root) {
        uint32_t n;
        dsv4_hc_entry **path = dsv4_radix_path(nd, &rx->root, &n);
        if (path)
            dsv4_radix_use(rx, path, n, snap_pages ? snap_nd : nd);
        free(path);
    }
    return 0;
}

/* The least recently used unlocked node on the device none of whose children is on the
 * device (NULL when none): without a tier, the least recently used unlocked leaf. */
static dsv4_radix_node *dsv4_radix_lru_leaf(dsv4_radix_node *nd, dsv4_radix_node *best)
{
    for (dsv4_radix_node *c = nd->child; c; c = c->next) {
        if (!dsv4_radix_on_device(&c->page))
            continue;
        bool inner = false;
        for (const dsv4_radix_node *g = c->child; g && !inner; g = g->next)
            inner = dsv4_radix_on_device(&g->page);
        if (inner)
            best = dsv4_radix_lru_leaf(c, best);
        else if (!c->lock && (!best || c->used < best->used))
            best = c;
    }
    return best;
}

/* Give nd's device copies back: to the tier, which keeps them on host per its policy, or
 * (no tier, nothing kept, or the tier failed) with the node and what is below it. A node
 * left on host without a snapshot and without children can never be matched unless the
 * cache keeps pages (keep_pages): otherwise it goes. */
static void dsv4_radix_evict_node(dsv4_radix *rx, dsv4_radix_node *nd)
{
    dsv4_hc_tier *t = rx->hooks.tier;
    uint32_t page = nd->page.device, slot = nd->snap.device;
    if (!t) {
        dsv4_radix_remove_subtree(rx, nd);
        return;
    }
    dsv4_hc_entry *pe = &nd->page, *se = &nd->snap;
    bool snap_dev = dsv4_radix_on_device(se);
    dsv4_radix_host_room(rx, dsv4_hc_tier_need(t, true, &pe, 1),
                         snap_dev ? dsv4_hc_tier_need(t, true, &se, 1) : 0);
    int rc = dsv4_hc_tier_evict(t, DSV4_HC_PAGE, &pe, 1);
    if (rc == 0 && snap_dev && dsv4_hc_tier_evict(t, DSV4_HC_SLOT, &se, 1) != 0) {
        nd->page.device = page; /* undo, so the removal below gives the page back */
        rc = -EIO;
    }
    if (rc != 0) {
        dsv4_radix_remove_subtree(rx, nd);
        return;
    }
    dsv4_radix_give_back(rx, nd, page, slot);
    if (dsv4_hc_entry_residency(&nd->page) == DSV4_HC_GONE ||
        (!nd->child && !dsv4_radix_has_snap(nd) && !rx->keep_pages))
        dsv4_radix_remove_subtree(rx, nd);
}

uint32_t dsv4_radix_evict(dsv4_radix *rx, uint32_t pages, uint32_t slots, uint32_t *slots_p)
{
    uint32_t got_pages = 0, got_slots = 0;
    while (got_pages < pages || got_slots < slots) {
        dsv4_radix_node *leaf = dsv4_radix_lru_leaf(&rx->root, NULL);
        if (!leaf)
            break;
        got_slots += dsv4_radix_on_device(&leaf->snap);
        got_pages++;
        dsv4_radix_evict_node(rx, leaf);
    }
    if (slots_p)
        *slots_p = got_slots;
    return got_pages;
}

/* Remove the unlocked subtrees below nd; the locked nodes stay, without host copies. */
static void dsv4_radix_flush_below(dsv4_radix *rx, dsv4_radix_node *nd)
{
    for (dsv4_radix_node *c = nd->child, *next; c; c = next) {
        next = c->next;
        if (!c->lock) {
            dsv4_radix_remove_subtree(rx, c);
            continue;
        }
        dsv4_radix_flush_below(rx, c);
        if (rx->hooks.tier) {
            dsv4_hc_entry *pe = &c->page, *se = &c->snap;
            dsv4_hc_tier_drop(rx->hooks.tier, DSV4_HC_PAGE, &pe, 1);
            dsv4_hc_tier_drop(rx->hooks.tier, DSV4_HC_SLOT, &se, 1);
        }
    }
}

void dsv4_radix_flush(dsv4_radix *rx)
{
    if (rx->hooks.tier)
        dsv4_hc_tier_load_finish(rx->hooks.tier);
    dsv4_radix_flush_below(rx, &rx->root);
}

uint32_t dsv4_radix_pages(const dsv4_radix *rx)
{
    return rx->n_pages;
}

uint32_t dsv4_radix_pages_unlocked(const dsv4_radix *rx)
{
    return rx->n_pages - rx->n_locked_pages;
}

uint32_t dsv4_radix_slots(const dsv4_radix *rx)
{
    return rx->n_slots;
}
