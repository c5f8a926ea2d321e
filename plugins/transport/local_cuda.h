/* local_cuda.h: transport/local between device pools (CUDA IPC), built with CUDA only.
 *
 * The receiver's expose() fills the device part of the blob: its GPU and the IPC handle of
 * every buffer's allocation. The sender's attach() opens those handles once per peer on its
 * own GPU (the same one, or one with peer access to it; anything else is refused by name),
 * or, in the receiver's own process, uses the addresses as they are. Per request post()
 * queues every run of every buffer and the state slot as ONE cudaMemcpyBatchAsync on the
 * peer's own stream, after the daemon's compute stream (host->cuda_stream, when set), and
 * records an event: poll() is cudaEventQuery, cancel() waits for that event (a queued copy
 * cannot be taken back, and once it is done nothing of the request can land). detach()
 * waits for the stream and closes the handles.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_LOCAL_CUDA_H
#define DSV4_PLUGINS_TRANSPORT_LOCAL_CUDA_H

#include "plugins/transport/local_blob.h"

/* The device path behind local.c's ops; peers and transfers are its own handles. */
typedef struct dsv4_local_path {
    /* Receiver: b's device fields (GPU, every buffer's address and IPC handle) for l. */
    int (*describe)(const dsv4_kv_layout *l, dsv4_local_blob *b);
    /* Sender: reach the pool b describes from ours (local); same_process: the addresses
     * are ours already. */
    int (*attach)(const dsv4_host *host, const dsv4_kv_layout *local, const dsv4_local_blob *b,
                  bool same_process, void **peer_p, char *err, size_t errlen);
    void (*detach)(void *peer);
    int (*post)(void *peer, const dsv4_xfer_req *req, void **xfer_p);
    int (*poll)(void *xfer);
    int (*cancel)(void *xfer);
    void (*release)(void *xfer);
} dsv4_local_path;

extern const dsv4_local_path dsv4_local_cuda_path;

#endif
