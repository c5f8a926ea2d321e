/* transport.h: the KV transport family (plugins/transport/: local, ucx, nccl, chaos).
 *
 * Moves a request's KV from a prefill server's pages into the pages a decode server
 * reserved (DESIGN.md §8). Memory is registered once per peer, covering every buffer of
 * the layout; per request only page runs travel. Writes are one-sided where the transport
 * allows and always batched: one post per request, never a call per page.
 *
 * Life of a transfer: decode calls expose() once and sends the blob at handshake; prefill
 * calls attach() once per peer; per request prefill post()s all runs, poll()s until 0, then
 * sends the completion message with checksums over the control channel. cancel() returns
 * 0 only when no write of that transfer can still land: that is the drain the decode side
 * waits for before it frees pages.
 *
 * Two-sided transports (transport/nccl: every send needs a matching receive, and the
 * connection is a collective both sides set up with one id) also fill the ops appended at
 * the end of the table. The sender's bootstrap() hands out a message (a communicator id)
 * after attach() and again whenever an abort tore the connection down; the daemon sends
 * it over the PD control channel and the receiver passes it to accept(), which creates or
 * rebuilds its side. Per request the sender post()s and the daemon sends the request
 * (dsv4_xfer_req: runs and state slots) to the receiver, which recv_post()s the same
 * request: both sides derive the same ordered list of sends and receives from it, and the
 * receiver posts requests in the order the sender posted them (the control channel keeps
 * that order). poll(), cancel(), release() and detach() serve both sides' handles. On the
 * receiver cancel() returns 0 only once its receives can no longer write into its pages.
 */
#ifndef DSV4D_TRANSPORT_H
#define DSV4D_TRANSPORT_H

#include <dsv4d/kv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_TRANSPORT_VERSION 1

/* A run of consecutive pages; applied to every paged buffer of the layout. */
typedef struct dsv4_xfer_run {
    uint32_t src_page;
    uint32_t dst_page;
    uint32_t n_pages;
} dsv4_xfer_run;

typedef struct dsv4_xfer_req {
    uint32_t struct_size;
    uint64_t room;             /* transfer lease: room ... */
    uint64_t generation;       /* ... and generation; stale completions are rejected */
    const dsv4_xfer_run *runs; /* merged contiguous runs */
    size_t n_runs;
    bool with_state;           /* also copy state slot src_state -> dst_state (all buffers) */
    uint32_t src_state;
    uint32_t dst_state;
} dsv4_xfer_req;

typedef struct dsv4_transport_ops {
    uint32_t struct_size;
    /* Receiver: register every buffer of `local` once; write what a peer needs to reach it
     * (keys, segment names, IPC handles) into blob (capacity *len_p; *len_p set to the
     * length used). -ENOSPC when it does not fit: *len_p is then the length needed. */
    int (*expose)(void *state, const dsv4_kv_layout *local, void *blob, size_t *len_p);
    /* Sender: attach once to a peer's exposed layout. */
    int (*attach)(void *state, const dsv4_kv_layout *local, const void *blob, size_t len,
                  void **peer_p, char *err, size_t errlen);
    void (*detach)(void *state, void *peer);
    /* Post every write of one request. Asynchronous; *xfer_p tracks it. */
    int (*post)(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p);
    /* 0: complete and visible at the receiver; -EAGAIN: in flight; else failed. */
    int (*poll)(void *state, void *xfer);
    /* Abort: 0 once nothing of xfer is in flight any more; -EAGAIN: call again. */
    int (*cancel)(void *state, void *xfer);
    void (*release)(void *state, void *xfer);

    /* ---- appended for two-sided transports (read with DSV4_HAS_FIELD; NULL in one-sided
     * ones: local, ucx). Not part of DSV4_TRANSPORT_VERSION 1's required ops. ---- */
    /* Sender: when the receiver must (re)build its side of the connection to this peer
     * (after attach, after an abort), writes the message for its accept() into blob
     * (capacity *len_p; *len_p set to the length used) and returns 0; -EAGAIN when none is
     * due; -ENOTSUP when this instance is one-sided (transport/chaos around local);
     * -ENOSPC when it does not fit (*len_p is then the length needed; call again). A
     * request posted after a call that returned 0 uses the connection that message
     * announces, so the caller sends the message before that request's XFER. */
    int (*bootstrap)(void *state, void *peer, void *blob, size_t *len_p);
    /* Receiver: takes the sender's bootstrap message. *peer_p NULL: creates the receiving
     * end of a new peer; else rebuilds that peer's connection (what the old one still had
     * in flight fails and drains). 0, DSV4_ESTALE for a message older than the current
     * connection (ignored), else a negative status with the reason in err. */
    int (*accept)(void *state, const dsv4_kv_layout *local, const void *msg, size_t len,
                  void **peer_p, char *err, size_t errlen);
    /* Receiver: posts every receive of one request into the local pool: req is the sender's
     * request (runs: src_page at the sender, dst_page here; dst_state here). Asynchronous;
     * *xfer_p is polled, cancelled and released like a sender's. */
    int (*recv_post)(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p);
} dsv4_transport_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_TRANSPORT_H */
