/* graph_cache.h: the step shapes a forward has met, each with the CUDA graph recorded for
 * it once it comes again. A new shape takes the place of the shape met least recently, so
 * a serving loop's decode shape, met every step, outlives the one-off prefill shapes that
 * pass between its steps (replacing the oldest entry instead evicted it every few prefills,
 * and each time it came back it was launched directly once and recorded again).
 *
 * Host code only: the graphs are opaque here, freed through the function given at init. */
#ifndef DSV4_GRAPH_CACHE_H
#define DSV4_GRAPH_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSV4_GRAPH_CACHE_ENTRIES 8
#define DSV4_GRAPH_CACHE_KEY_BYTES 64

typedef struct dsv4_graph_cache_entry {
    unsigned char key[DSV4_GRAPH_CACHE_KEY_BYTES];
    void *graph;   /* NULL: met once, nothing recorded yet */
    uint64_t last; /* the cache's clock when last met; 0: empty */
} dsv4_graph_cache_entry;

typedef struct dsv4_graph_cache {
    dsv4_graph_cache_entry entries[DSV4_GRAPH_CACHE_ENTRIES];
    size_t key_bytes;
    uint64_t clock;
    void (*free_graph)(void *graph);
} dsv4_graph_cache;

/* An empty cache of keys of key_bytes bytes; -EINVAL where key_bytes is 0 or more than
 * DSV4_GRAPH_CACHE_KEY_BYTES. */
int dsv4_graph_cache_init(dsv4_graph_cache *c, size_t key_bytes, void (*free_graph)(void *graph));

/* The graph slot of the shape key (compared byte for byte): the entry met before (*seen_p
 * true; its slot may still be NULL), or a fresh one with a NULL slot that replaced an empty
 * entry or the one met least recently, whose graph is freed (*seen_p false). The caller
 * stores a recorded graph in the slot; the cache frees it. */
void **dsv4_graph_cache_slot(dsv4_graph_cache *c, const void *key, bool *seen_p);

/* Free every graph and empty the cache. */
void dsv4_graph_cache_clear(dsv4_graph_cache *c);

#endif
