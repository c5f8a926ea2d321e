/* pd.h: prefill/decode disaggregation inside the serving loop (DESIGN.md §8): what the
 * loop (loop.c) and the server (server.c) call of the prefill role (pd_prefill.c) and the
 * decode role (pd_decode.c). A unified server has srv->pd NULL and every hook is a no-op.
 *
 * Decode role: clients talk to it as to a unified server. A new request with at least two
 * prompt tokens is admitted into the PD state instead of running: it reserves a sequence
 * (state slot and pages for all prompt tokens but the last, starting from the whole pages
 * of its prompt its own prefix cache holds, cache.c) and leases the rest of that KV to the
 * prefill peer with the least outstanding work. When the completion arrives and every
 * block of every buffer verifies against its checksums, the request joins the running
 * batch with the last prompt token left to feed, so sampling starts exactly where a
 * unified server's would (results do not depend on where the KV was computed).
 *
 * Prefill role: leases from decode peers become requests of the loop that stop at their
 * last prompt token (no sampling), enter the PD state, post their KV writes through the
 * transport and answer with COMPLETE (checksums) once the writes landed, or ABORT_ACK once
 * nothing is in flight after an abort. It takes no client completions.
 *
 * All hooks run on the engine thread except dsv4_pd_start/dsv4_pd_stop (server.c, before
 * the engine thread starts and after it ended), dsv4_pd_takes_clients and
 * dsv4_pd_wants_shared_pool.
 */
#ifndef DSV4_CORE_SERVE_PD_H
#define DSV4_CORE_SERVE_PD_H

#include "core/serve/serve_priv.h"

/* The role's state: connections, leases, the transport plugin (pd_priv.h). */
typedef struct dsv4_pd dsv4_pd;

/* Sets srv->pd for the prefill and decode roles and starts the role's threads. 0, or a
 * negative status with the reason in err. */
int dsv4_pd_start(dsv4_server *srv, const dsv4_config *conf, char *err, size_t errlen);
/* Stops the role's threads, detaches every peer and frees srv->pd (after the engine
 * thread ended: no request holds a lease any more). */
void dsv4_pd_stop(dsv4_server *srv);
/* False on a prefill server: client completions are refused there. */
bool dsv4_pd_takes_clients(const dsv4_server *srv);
/* The engine pool must be in shared memory (decode role on the host: peers map it). */
bool dsv4_pd_wants_shared_pool(const dsv4_config *conf);

/* Decode role, admission: true when r's prompt KV should come from a prefill server. */
bool dsv4_pd_decode_takes(const dsv4_server *srv, const dsv4_sreq *r);
/* Decode role: r holds a new sequence, empty or with whole pages adopted from the prefix
 * cache; reserve the rest of its prompt KV, move it to the PD state and start its lease. 0, or a
 * negative status (r is unchanged but for the sequence, which the caller frees). */
int dsv4_pd_decode_reserve(dsv4_server *srv, dsv4_sreq *r);

/* Prefill role: r (a lease) has fed its last prompt token; hand its KV to the transport. */
void dsv4_pd_prefill_handoff(dsv4_server *srv, dsv4_sreq *r);

/* Every step, both roles: messages, transfers, deadlines, cancellations. */
void dsv4_pd_step(dsv4_server *srv);

#endif
