/* transport-harness.h: what the PD and transport tests share: a real KV pool (the default
 * test model's S C H C layers, fp8 index-K, bf16 rows) filled with deterministic bytes,
 * and comparison of a request's blocks between two pools. */
#ifndef DSV4_TESTS_PLUGIN_TRANSPORT_HARNESS_H
#define DSV4_TESTS_PLUGIN_TRANSPORT_HARNESS_H

#include "core/engine/kvpool.h"

#include <dsv4d/transport.h>

typedef struct tpool {
    dsv4_kv_pool *pool;
    const dsv4_kv_layout *l;
} tpool;

/* A pool of n_pages pages and n_slots slots, in shared memory when shared; every byte of
 * every buffer set from seed (seed 0 leaves it zero). Bails out on failure. */
tpool tpool_new(uint32_t n_pages, uint32_t n_slots, bool shared, uint64_t seed);
void tpool_free(tpool *p);
/* Every byte of every buffer from seed. */
void tpool_fill(const dsv4_kv_layout *l, uint64_t seed);
/* True when block src_pages[i] of every paged buffer of a equals block dst_pages[i] of b,
 * and (with_state) slot src_slot of every state buffer of a equals dst_slot of b. */
bool tpool_same(const dsv4_kv_layout *a, const uint32_t *src_pages, const dsv4_kv_layout *b,
                const uint32_t *dst_pages, uint32_t n_pages, bool with_state, uint32_t src_slot,
                uint32_t dst_slot);
/* True when the checksums of a request's blocks in src (pages sp, state slot ss) verify
 * against its blocks in dst (pages dp, slot ds), as a decode server checks a transfer. */
bool tpool_sums_agree(const dsv4_kv_layout *src, const uint32_t *sp, const dsv4_kv_layout *dst,
                      const uint32_t *dp, uint32_t n, uint32_t ss, uint32_t ds);

/* Polls until the transfer leaves -EAGAIN, at most ms milliseconds (a guard against a
 * hung test, not a timing assertion); returns the last poll result. */
int tx_wait(const dsv4_transport_ops *ops, void *state, void *xfer, uint32_t ms);
/* The same with cancel: returns when cancel stops answering -EAGAIN. */
int tx_drain(const dsv4_transport_ops *ops, void *state, void *xfer, uint32_t ms);
/* Merged runs of the pairs (src[i] -> dst[i]) into runs (room for n). */
size_t tx_runs(const uint32_t *src, const uint32_t *dst, uint32_t n, dsv4_xfer_run *runs);

#endif
