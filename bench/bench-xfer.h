/* bench-xfer.h: what the KV handoff benchmarks (pd-handoff, pd-ipc-handoff) share: a
 * transport plugin set up from its defaults and KEY=VALUE overrides, the receiver's exposed
 * pool description sent over a pipe, the pages one request moves and their bytes, and the
 * request's timed repetitions. Each exits with "<program>: <why>" when it cannot go on. */
#ifndef DSV4_BENCH_XFER_H
#define DSV4_BENCH_XFER_H

#include <stdint.h>

#include <dsv4d/transport.h>

#include "core/plugin/registry.h"

/* The transport of plugin d with its defaults, then each kv[i] ("KEY=VALUE") set. */
void *bench_transport_new(const dsv4_plugin_desc *d, char *const *kv, uint32_t n_kv);

/* The receiver's side: expose `layout` through transport rx and write the description,
 * its length first (8 bytes), to fd; a failed expose writes length 0. 0, or -1 when fd
 * took less. */
int bench_send_exposed(const dsv4_transport_ops *ops, void *rx, const dsv4_kv_layout *layout,
                       int fd);
/* The sender's side: the description bench_send_exposed wrote to fd, into blob (cap
 * bytes); its length. */
size_t bench_read_exposed(int fd, uint8_t *blob, size_t cap);

/* A request of n pages: source pages 2 .. n + 1 to destination pages n + 3 .. (its first
 * half) and 0 .. (its second half), so the plan has two runs. */
void bench_plan_pages(uint32_t n, uint32_t *sp, uint32_t *dp);
/* Bytes a request of n pages and one state slot moves in layout l. */
uint64_t bench_request_bytes(const dsv4_kv_layout *l, uint32_t n);

/* reps + 1 posts of req from tx to peer, each polled to completion: t[r] its time in ns,
 * t[0] the warm-up. */
void bench_time_transfers(const dsv4_transport_ops *ops, void *tx, void *peer,
                          const dsv4_xfer_req *req, uint64_t *t, uint32_t reps);

#endif
