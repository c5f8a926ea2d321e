/* t-graph-cache-keeps-the-shape-met-every-step: the CUDA forward's cache of step shapes and
 * their graphs (core/engine/graph_cache.h), on the host with stand-in graphs. A shape met
 * again is found with its graph; a new shape takes an empty entry, else the one met least
 * recently, whose graph is freed once; a decode shape met between every one-off prefill
 * shape keeps its graph however many prefills pass (replacing the oldest entry evicted it
 * every DSV4_GRAPH_CACHE_ENTRIES prefills); clearing frees every graph once. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/engine/graph_cache.h"
#include "tests/tap.h"

typedef struct shape {
    uint32_t n_tok, n_seqs;
} shape;

/* Stand-in graphs: graph i is &graphs[i], freed[i] counts its frees. */
static int graphs[64], freed[64];

static void free_graph(void *graph)
{
    freed[(int *)graph - graphs]++;
}

static void **slot_of(dsv4_graph_cache *c, uint32_t n_tok, uint32_t n_seqs, bool *seen)
{
    shape sh = {n_tok, n_seqs};
    return dsv4_graph_cache_slot(c, &sh, seen);
}

static int frees(void)
{
    int n = 0;
    for (size_t i = 0; i < sizeof(freed) / sizeof(freed[0]); i++)
        n += freed[i];
    return n;
}

int main(void)
{
    plan(9);
    dsv4_graph_cache c;
    ok(dsv4_graph_cache_init(&c, DSV4_GRAPH_CACHE_KEY_BYTES + 1, free_graph) == -EINVAL &&
           dsv4_graph_cache_init(&c, 0, free_graph) == -EINVAL,
       "a key longer than the cache keeps, or an empty one, is refused");
    ok(dsv4_graph_cache_init(&c, sizeof(shape), free_graph) == 0, "init");

    bool seen;
    void **decode = slot_of(&c, 64, 64, &seen);
    ok(!seen && *decode == NULL, "a shape met first: not seen, no graph");
    ok(slot_of(&c, 64, 64, &seen) == decode && seen && *decode == NULL,
       "met again: the same entry, still without a graph until the caller records one");
    *decode = &graphs[0];

    /* a serving loop: a decode step between every one-off prefill shape */
    int prefills = 4 * DSV4_GRAPH_CACHE_ENTRIES, decode_kept = 1, prefill_new = 1;
    for (int i = 0; i < prefills; i++) {
        void **p = slot_of(&c, 1000 + (uint32_t)i, 1, &seen);
        prefill_new &= !seen;
        *p = &graphs[1 + i];
        void **d = slot_of(&c, 64, 64, &seen);
        decode_kept &= seen && *d == &graphs[0];
    }
    ok(decode_kept, "the decode shape kept its graph through %d one-off prefill shapes", prefills);
    ok(prefill_new && freed[0] == 0,
       "every prefill shape was new; the decode graph was never freed");
    ok(frees() == prefills - (DSV4_GRAPH_CACHE_ENTRIES - 1),
       "each prefill past the entries the decode shape leaves freed one graph (%d)", frees());

    /* the least recently met goes: touch all but the oldest prefill left, then a new shape */
    int oldest = prefills - (DSV4_GRAPH_CACHE_ENTRIES - 1);
    for (int i = oldest + 1; i < prefills; i++)
        slot_of(&c, 1000 + (uint32_t)i, 1, &seen);
    slot_of(&c, 64, 64, &seen);
    int before = freed[1 + oldest];
    slot_of(&c, 5000, 1, &seen);
    ok(freed[1 + oldest] == before + 1 && !seen,
       "a new shape replaces the entry met least recently and frees its graph");

    memset(freed, 0, sizeof(freed));
    dsv4_graph_cache_clear(&c);
    int once = 1;
    for (int i = 0; i < 64; i++)
        once &= freed[i] <= 1;
    ok(once && freed[0] == 1 && frees() == DSV4_GRAPH_CACHE_ENTRIES - 1,
       "clear frees every graph left once (the new shape had none): %d", frees());
    return done_testing();
}
