/* graph_cache.c: step shapes and their CUDA graphs, least recently met replaced (graph_cache.h). */
#include "core/engine/graph_cache.h"

#include <errno.h>
#include <string.h>

int dsv4_graph_cache_init(dsv4_graph_cache *c, size_t key_bytes, void (*free_graph)(void *graph))
{
    memset(c, 0, sizeof(*c));
    if (key_bytes == 0 || key_bytes > DSV4_GRAPH_CACHE_KEY_BYTES)
        return -EINVAL;
    c->key_bytes = key_bytes;
    c->free_graph = free_graph;
    return 0;
}

void **dsv4_graph_cache_slot(dsv4_graph_cache *c, const void *key, bool *seen_p)
{
    dsv4_graph_cache_entry *victim = &c->entries[0];
    c->clock++;
    for (size_t i = 0; i < DSV4_GRAPH_CACHE_ENTRIES; i++) {
        dsv4_graph_cache_entry *e = &c->entries[i];
        if (e->last && !memcmp(e->key, key, c->key_bytes)) {
            e->last = c->clock;
            *seen_p = true;
            return &e->graph;
        }
        if (e->last < victim->last)
            victim = e;
    }
    if (victim->graph)
        c->free_graph(victim->graph);
    victim->graph = NULL;
    victim->last = c->clock;
    memcpy(victim->key, key, c->key_bytes);
    *seen_p = false;
    return &victim->graph;
}

void dsv4_graph_cache_clear(dsv4_graph_cache *c)
{
    for (size_t i = 0; i < DSV4_GRAPH_CACHE_ENTRIES; i++) {
        dsv4_graph_cache_entry *e = &c->entries[i];
        if (e->graph)
            c->free_graph(e->graph);
        e->graph = NULL;
        e->last = 0;
    }
}
