/* radix.c: the page trie of the prefix cache (see radix.h). */
#include "core/serve/radix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct dsv4_radix_node {
    dsv4_radix_node *parent, *child, *next; /* first child, next sibling */
    int32_t *toks;                          /* the page_tokens tokens of this page */
    uint32_t page, slot;
    uint32_t lock; /* running requests on this node or below */
    uint64_t used; /* LRU clock value of the last match */
};

struct dsv4_radix {
    dsv4_radix_node root;
    uint32_t page_tokens;
    dsv4_radix_hooks hooks;
    uint64_t clock;
    uint32_t n_pages, n_locked_pages, n_slots;
};

dsv4_radix *dsv4_radix_new(uint32_t page_tokens, const dsv4_radix_hooks *hooks)
{
    dsv4_radix *rx = calloc(1, sizeof(*rx));
    if (!rx)
        return NULL;
    rx->page_tokens = page_tokens;
    rx->hooks = *hooks;
    rx->root.slot = DSV4_RADIX_NO_SLOT;
    return rx;
}

static void dsv4_radix_drop_slot(dsv4_radix *rx, dsv4_radix_node *nd)
{
    if (nd->slot == DSV4_RADIX_NO_SLOT)
        return;
    rx->hooks.slot_free(rx->hooks.ctx, nd->slot);
    nd->slot = DSV4_RADIX_NO_SLOT;
    rx->n_slots--;
}

/* Unlink a leaf from its parent and give its page and slot back. */
static void dsv4_radix_remove(dsv4_radix *rx, dsv4_radix_node *nd)
{
    dsv4_radix_node **pp = &nd->parent->child;
    while (*pp != nd)
        pp = &(*pp)->next;
    *pp = nd->next;
    dsv4_radix_drop_slot(rx, nd);
    rx->hooks.page_unref(rx->hooks.ctx, nd->page);
    rx->n_pages--;
    if (nd->lock)
        rx->n_locked_pages--;
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

uint32_t dsv4_radix_match(dsv4_radix *rx, const int32_t *toks, uint32_t n, uint32_t *pages_out,
                          dsv4_radix_node **node_p)
{
    dsv4_radix_node *nd = &rx->root, *best = NULL;
    uint32_t depth = 0, best_depth = 0;
    uint64_t now = ++rx->clock;
    while ((depth + 1) * (uint64_t)rx->page_tokens <= n) {
        nd = dsv4_radix_child(rx, nd, toks + (size_t)depth * rx->page_tokens);
        if (!nd)
            break;
        depth++;
        if (nd->slot != DSV4_RADIX_NO_SLOT) {
            best = nd;
            best_depth = depth;
        }
    }
    if (!pages_out || !best)
        return best_depth;
    depth = best_depth;
    for (dsv4_radix_node *p = best; p != &rx->root; p = p->parent) {
        pages_out[--depth] = p->page;
        p->used = now;
    }
    *node_p = best;
    return best_depth;
}

uint32_t dsv4_radix_node_slot(const dsv4_radix_node *node)
{
    return node->slot;
}

void dsv4_radix_lock(dsv4_radix *rx, dsv4_radix_node *node)
{
    for (dsv4_radix_node *p = node; p != &rx->root; p = p->parent)
        if (p->lock++ == 0)
            rx->n_locked_pages++;
}

void dsv4_radix_unlock(dsv4_radix *rx, dsv4_radix_node *node)
{
    for (dsv4_radix_node *p = node; p != &rx->root; p = p->parent)
        if (--p->lock == 0)
            rx->n_locked_pages--;
}

int dsv4_radix_insert(dsv4_radix *rx, const int32_t *toks, uint32_t n_pages, const uint32_t *pages,
                      uint32_t slot)
{
    dsv4_radix_node *nd = &rx->root;
    uint64_t now = ++rx->clock;
    size_t pt = rx->page_tokens;
    for (uint32_t i = 0; i < n_pages; i++) {
        dsv4_radix_node *c = dsv4_radix_child(rx, nd, toks + i * pt);
        if (!c) {
            c = calloc(1, sizeof(*c));
            int32_t *t = c ? malloc(pt * sizeof(int32_t)) : NULL;
            if (!t) {
                free(c);
                if (slot != DSV4_RADIX_NO_SLOT)
                    rx->hooks.slot_free(rx->hooks.ctx, slot);
                return -ENOMEM;
            }
            memcpy(t, toks + i * pt, pt * sizeof(int32_t));
            *c = (dsv4_radix_node){.parent = nd,
                                   .next = nd->child,
                                   .toks = t,
                                   .page = pages[i],
                                   .slot = DSV4_RADIX_NO_SLOT};
            nd->child = c;
            rx->hooks.page_ref(rx->hooks.ctx, pages[i]);
            rx->n_pages++;
        }
        c->used = now;
        nd = c;
    }
    if (slot == DSV4_RADIX_NO_SLOT)
        return 0;
    if (nd == &rx->root || nd->slot != DSV4_RADIX_NO_SLOT) {
        rx->hooks.slot_free(rx->hooks.ctx, slot);
        return 0;
    }
    nd->slot = slot;
    rx->n_slots++;
    return 0;
}

/* The least recently used unlocked leaf at or below nd (NULL when none). */
static dsv4_radix_node *dsv4_radix_lru_leaf(dsv4_radix_node *nd, dsv4_radix_node *best)
{
    for (dsv4_radix_node *c = nd->child; c; c = c->next) {
        if (c->child)
            best = dsv4_radix_lru_leaf(c, best);
        else if (!c->lock && (!best || c->used < best->used))
            best = c;
    }
    return best;
}

uint32_t dsv4_radix_evict(dsv4_radix *rx, uint32_t pages, uint32_t slots, uint32_t *slots_p)
{
    uint32_t got_pages = 0, got_slots = 0;
    while (got_pages < pages || got_slots < slots) {
        dsv4_radix_node *leaf = dsv4_radix_lru_leaf(&rx->root, NULL);
        if (!leaf)
            break;
        got_slots += leaf->slot != DSV4_RADIX_NO_SLOT;
        got_pages++;
        dsv4_radix_remove(rx, leaf);
    }
    if (slots_p)
        *slots_p = got_slots;
    return got_pages;
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
