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
} dsv4_transport_ops;

#ifdef __cplusplus
}
#endif
#endif /* DSV4D_TRANSPORT_H */
