/* nccl-pair.h: what the device transport tests and benches share (transport/nccl across
 * two GPUs; transport/ucx staged, both processes on one GPU): two processes, one GPU
 * each, joined by a socketpair standing in for the PD control channel. Rank 0 is the
 * sender (prefill), rank 1 the receiver (decode). Each loads the built plugin from
 * $DSV4D_PLUGIN_PATH, allocates a device KV layout of the real buffer kinds (a sliding, a
 * CSA and an HCA layer, repeated) and, through nccl_pair_connect, runs what the PD code
 * runs: expose -> attach, then bootstrap -> accept for a two-sided transport. CUDA is
 * first touched after the fork.
 *
 * Failures of the harness itself (CUDA, sockets, the plugin's set-up) end the process with
 * a TAP "Bail out!", so nothing passes on a call that failed. */
#ifndef DSV4_TESTS_GPU_NCCL_PAIR_H
#define DSV4_TESTS_GPU_NCCL_PAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dsv4d/transport.h>

#define NCCL_PAIR_MAX_BUFS 512

typedef struct nccl_pair {
    int rank; /* 0 sender, 1 receiver */
    int dev;
    int fd;  /* the control channel */
    int pid; /* rank 0: the receiver process */
    const dsv4_plugin_desc *desc;
    const dsv4_transport_ops *ops;
    void *conf, *state, *peer;
    dsv4_kv_layout l;
    dsv4_kv_buffer b[NCCL_PAIR_MAX_BUFS];
    uint8_t kinds[NCCL_PAIR_MAX_BUFS];
} nccl_pair;

/* A request of n runs, with the state slot s -> d when state. */
dsv4_xfer_req nccl_pair_req(const dsv4_xfer_run *runs, size_t n, bool state, uint32_t s,
                            uint32_t d);
/* CUDA devices visible, asked in a child process (so the caller can still fork). */
int nccl_pair_gpus(void);
/* Forks the receiver; returns in both processes with the layout of n_layers layers
 * (n_pages pages, n_slots slots) allocated on GPU dev0 (rank 0) or dev1 (rank 1). The
 * sender's blocks hold nccl_pair_byte patterns (fill = true) or zeros; the receiver's are
 * zero. */
void nccl_pair_start(nccl_pair *p, int dev0, int dev1, uint32_t n_layers, uint32_t n_pages,
                     uint32_t n_slots, bool fill);
/* The same with transport/<plugin>, and key = value set in its config when key is not
 * NULL (nccl_pair_start is transport/nccl with its defaults). */
void nccl_pair_start_with(nccl_pair *p, const char *plugin, const char *key, const char *value,
                          int dev0, int dev1, uint32_t n_layers, uint32_t n_pages, uint32_t n_slots,
                          bool fill);
/* Length-prefixed messages on the control channel ('tag' tells them apart). */
void nccl_pair_send(nccl_pair *p, char tag, const void *m, uint32_t len);
/* Receives one message of `tag` into a malloc'd buffer (*len_p bytes). */
void *nccl_pair_recv(nccl_pair *p, char tag, uint32_t *len_p);
/* expose/attach, and bootstrap/accept where the transport is two-sided; p->peer is set at
 * the sender, and at the receiver of a two-sided transport. */
void nccl_pair_connect(nccl_pair *p);
/* The sender's request travels as the PD XFER frame would carry it. */
void nccl_pair_send_req(nccl_pair *p, const dsv4_xfer_req *req);
/* Receives it (runs malloc'd into *req_p; free req_p->runs). */
void nccl_pair_recv_req(nccl_pair *p, dsv4_xfer_req *req_p);
/* Polls xfer until it is not -EAGAIN or timeout_s passed (-ETIMEDOUT). */
int nccl_pair_wait(nccl_pair *p, void *xfer, double timeout_s);
/* Calls cancel until it returns 0 or timeout_s passed (-ETIMEDOUT). */
int nccl_pair_drain(nccl_pair *p, void *xfer, double timeout_s);
/* Receiver: every block req wrote holds the sender's pattern of its source block, and
 * `untouched` (a page no run writes) is still zero. false with the first difference in why. */
bool nccl_pair_check(nccl_pair *p, const dsv4_xfer_req *req, uint32_t untouched, char *why,
                     size_t len);
/* The sender's byte at offset o of block `block` of buffer i. */
uint8_t nccl_pair_byte(uint32_t i, uint32_t block, size_t o);
/* Bytes one request of n_pages pages (with its state slot) moves. */
uint64_t nccl_pair_bytes(const nccl_pair *p, uint32_t n_pages);
/* Monotonic seconds. */
double nccl_pair_now(void);
/* Rank 1: tears down and exits with status; rank 0: tears down, waits for the receiver
 * and returns true when it exited 0. */
bool nccl_pair_end(nccl_pair *p, int status);

#endif
