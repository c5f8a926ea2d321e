/* ucx_stage.h: transport/ucx between device pools, staged through pinned host buffers
 * (ucx_stage.c; built with CUDA only).
 *
 * Why staging: Debian's libucx (1.13) has no CUDA transport (ucp_context_query lists no
 * UCS_MEMORY_TYPE_CUDA), so UCX cannot read or write device memory. The plugin therefore
 * always stages device pools; ucx.c logs what the UCX it runs on supports.
 *
 * The transfer stays one-sided for the daemon: the receiver has no per-request state.
 * Sender: post() splits the request's pieces (every run of every buffer and the state
 * slot, common.h) into chunks that fit the receiver's staging buffer; each chunk is
 * self-describing: a table (buffer, destination offset, bytes per piece) followed by the
 * payload. A chunk is gathered from the device pool into one of the peer's two pinned
 * staging buffers by ONE cudaMemcpyBatchAsync (ordered after the daemon's compute stream
 * as it was at post), then sent as one rendezvous active message. A request that fits one
 * staging buffer is one batched copy and one message.
 * Receiver: its progress thread takes each chunk into a free pinned staging buffer (a
 * chunk that finds none waits in UCX, so staging memory stays bounded), checks every
 * table entry against its own pool, scatters the payload into the device pool by ONE
 * cudaMemcpyBatchAsync, and only once that copy's event has completed answers the sender
 * with an acknowledgement. poll() returns 0 when every chunk was acknowledged: the bytes
 * are in the receiver's device pool.
 *
 * cancel() stops gathering new chunks and waits for the gathers in flight (they read our
 * pages) and for the acknowledgement of every chunk sent (the receiver scatters what it
 * took); a peer whose endpoint failed acknowledges nothing more and drains at once. A
 * peer that cannot be seen failing (shared-memory transports) and stays silent for
 * DSV4_UCX_DRAIN_SECONDS gets its endpoint force-closed: nothing of it lands afterwards,
 * and the transfer is drained.
 *
 * Ownership: the receiver's stage lives from expose to fini; the sender's acknowledgement
 * table (dsv4_ucx_sender) from the first device attach to fini; a peer from attach to
 * detach; a transfer from post to release.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_UCX_STAGE_H
#define DSV4_PLUGINS_TRANSPORT_UCX_STAGE_H

#include "plugins/transport/common.h"

#include <ucp/api/ucp.h>

#define DSV4_UCX_DRAIN_SECONDS 5
#define DSV4_UCX_DRAIN_NS ((uint64_t)DSV4_UCX_DRAIN_SECONDS * 1000000000u)

typedef struct dsv4_ucx_stage dsv4_ucx_stage;   /* receiver: staging buffers, copy stream */
typedef struct dsv4_ucx_sender dsv4_ucx_sender; /* sender: transfers awaiting acks */
typedef struct dsv4_ucx_speer dsv4_ucx_speer;   /* sender: one receiver's staging path */
typedef struct dsv4_ucx_tx dsv4_ucx_tx;         /* sender: one request */

/* From ucx.c: close ep, waiting a bounded time for the peer to confirm unless forced. */
void dsv4_ucx_ep_close(ucp_worker_h worker, const dsv4_host *host, ucp_ep_h ep, bool force);

#ifdef HAVE_CUDA
/* Receiver: pinned staging buffers of slot_bytes for the device pool l (one GPU), a copy
 * stream, and the chunk handler on worker. 0, -ENOTSUP (not one GPU), -ENOMEM, -EIO. */
int dsv4_ucx_stage_open(const dsv4_host *host, ucp_worker_h worker, const dsv4_kv_layout *l,
                        size_t slot_bytes, dsv4_ucx_stage **st_p);
/* The fd the progress thread also waits on: scatters that finished, chunks that landed. */
int dsv4_ucx_stage_wake_fd(const dsv4_ucx_stage *st);
/* The progress thread's turn after ucp_worker_progress: takes waiting chunks into free
 * buffers, scatters landed ones, acknowledges finished scatters. */
void dsv4_ucx_stage_turn(dsv4_ucx_stage *st);
/* After the progress thread stopped: drains and frees. */
void dsv4_ucx_stage_close(dsv4_ucx_stage *st);

/* Sender: the acknowledgement handler on worker. 0 or -EIO. */
int dsv4_ucx_sender_open(const dsv4_host *host, ucp_worker_h worker, dsv4_ucx_sender **snd_p);
void dsv4_ucx_sender_close(dsv4_ucx_sender *snd);
/* Sender: the staging path to one receiver whose staging buffers hold remote_bytes, over
 * *ep (ucx.c's endpoint, whose failure lands in *error; a force-close sets *ep NULL).
 * 0, -ENOTSUP (our pool is not on one GPU), -ENOMEM, -EIO; err says why. */
int dsv4_ucx_speer_open(dsv4_ucx_sender *snd, const dsv4_kv_layout *local, const dsv4_tp_table *t,
                        size_t slot_bytes, size_t remote_bytes, ucp_ep_h *ep,
                        const ucs_status_t *error, dsv4_ucx_speer **sp_p, char *err, size_t errlen);
/* Waits for every gather, fails what is in flight, frees (the endpoint is ucx.c's). */
void dsv4_ucx_speer_close(dsv4_ucx_speer *sp);
int dsv4_ucx_tx_post(dsv4_ucx_speer *sp, const dsv4_xfer_req *req, dsv4_ucx_tx **tx_p);
/* 0: every chunk acknowledged; -EAGAIN; else failed. */
int dsv4_ucx_tx_poll(dsv4_ucx_tx *tx);
/* 0 once nothing of tx can land any more; -EAGAIN: call again. */
int dsv4_ucx_tx_cancel(dsv4_ucx_tx *tx);
void dsv4_ucx_tx_release(dsv4_ucx_tx *tx);
#else
#include <errno.h>

/* Without CUDA no device layout exists: opening refuses, so nothing below is reached. */
static inline int dsv4_ucx_stage_open(const dsv4_host *host, ucp_worker_h worker,
                                      const dsv4_kv_layout *l, size_t slot_bytes,
                                      dsv4_ucx_stage **st_p)
{
    (void)host, (void)worker, (void)l, (void)slot_bytes, (void)st_p;
    return -ENOTSUP;
}
static inline int dsv4_ucx_stage_wake_fd(const dsv4_ucx_stage *st)
{
    (void)st;
    return -1;
}
static inline void dsv4_ucx_stage_turn(dsv4_ucx_stage *st)
{
    (void)st;
}
static inline void dsv4_ucx_stage_close(dsv4_ucx_stage *st)
{
    (void)st;
}
static inline int dsv4_ucx_sender_open(const dsv4_host *host, ucp_worker_h worker,
                                       dsv4_ucx_sender **snd_p)
{
    (void)host, (void)worker, (void)snd_p;
    return -ENOTSUP;
}
static inline void dsv4_ucx_sender_close(dsv4_ucx_sender *snd)
{
    (void)snd;
}
static inline int dsv4_ucx_speer_open(dsv4_ucx_sender *snd, const dsv4_kv_layout *local,
                                      const dsv4_tp_table *t, size_t slot_bytes,
                                      size_t remote_bytes, ucp_ep_h *ep, const ucs_status_t *error,
                                      dsv4_ucx_speer **sp_p, char *err, size_t errlen)
{
    (void)snd, (void)local, (void)t, (void)slot_bytes, (void)remote_bytes, (void)ep, (void)error;
    (void)sp_p, (void)err, (void)errlen;
    return -ENOTSUP;
}
static inline void dsv4_ucx_speer_close(dsv4_ucx_speer *sp)
{
    (void)sp;
}
static inline int dsv4_ucx_tx_post(dsv4_ucx_speer *sp, const dsv4_xfer_req *req, dsv4_ucx_tx **tx_p)
{
    (void)sp, (void)req, (void)tx_p;
    return -ENOTSUP;
}
static inline int dsv4_ucx_tx_poll(dsv4_ucx_tx *tx)
{
    (void)tx;
    return -ENOTSUP;
}
static inline int dsv4_ucx_tx_cancel(dsv4_ucx_tx *tx)
{
    (void)tx;
    return 0;
}
static inline void dsv4_ucx_tx_release(dsv4_ucx_tx *tx)
{
    (void)tx;
}
#endif

#endif
