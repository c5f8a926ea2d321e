/* nccl_proto.h: what the two ranks of a transport/nccl connection agree on, as pure
 * functions (no CUDA, no NCCL: unit-tested without a GPU).
 *
 * The expose blob (receiver -> sender, in the PD handshake) and the bootstrap message
 * (sender -> receiver, over the control channel after attach and after every abort) each
 * start with the writer's buffer table (common.h), so either side refuses a peer whose
 * table differs before anything moves, and carry the writer's GPU (UUID and PCI bus id:
 * two ranks of one communicator cannot share a device) and its buffer base addresses.
 * The bootstrap message adds the communicator epoch and the NCCL unique id.
 *
 * The plan: NCCL matches the n-th send to a peer with the n-th receive from it, so both
 * sides must issue the same list of (size) operations in the same order. Both compute it
 * with dsv4_nccl_plan from the same dsv4_xfer_req and the same two address sets (own bases
 * and the peer's, learnt from the blob or the message): buffers in table order; a paged
 * buffer contributes one operation per run, a state buffer one block when the request
 * carries state; an operation that continues the previous one in both memories is merged
 * into it (runs merge, and so do neighbouring buffers of one allocation). The sender sends
 * from `src`, the receiver receives into `dst`: one ncclGroupStart/End per request.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_NCCL_PROTO_H
#define DSV4_PLUGINS_TRANSPORT_NCCL_PROTO_H

#include "plugins/transport/common.h"

#define DSV4_NCCL_PROTO_VERSION 1
#define DSV4_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES (nccl.c asserts it) */
#define DSV4_NCCL_UUID_BYTES 16
#define DSV4_NCCL_BUS_ID_BYTES 32

/* A GPU as both sides name it. */
typedef struct dsv4_nccl_gpu {
    uint8_t uuid[DSV4_NCCL_UUID_BYTES];
    char bus_id[DSV4_NCCL_BUS_ID_BYTES]; /* "0000:3b:00.0", NUL-terminated */
} dsv4_nccl_gpu;

/* One side's pool as an address set: base of every buffer (device addresses, compared and
 * offset, never dereferenced by the other side) and its page and slot counts. */
typedef struct dsv4_nccl_side {
    uint64_t *base; /* [n_buffers] */
    uint32_t n_pages, n_slots;
} dsv4_nccl_side;

/* The peer as a message describes it (free base with dsv4_nccl_peer_info_clear). */
typedef struct dsv4_nccl_peer_info {
    dsv4_nccl_side side;
    dsv4_nccl_gpu gpu;
    uint32_t epoch;                 /* bootstrap message only */
    uint8_t id[DSV4_NCCL_ID_BYTES]; /* bootstrap message only */
} dsv4_nccl_peer_info;

/* One send (at src) matched by one receive (at dst) of `bytes` bytes. */
typedef struct dsv4_nccl_op {
    uint64_t src, dst, bytes;
} dsv4_nccl_op;

/* The address set of a local layout (base filled from its buffers; free it). NULL on
 * out of memory. */
uint64_t *dsv4_nccl_bases(const dsv4_kv_layout *l);

/* "GPU-1a2b... (bus 0000:3b:00.0)", for messages. */
void dsv4_nccl_gpu_text(const dsv4_nccl_gpu *g, char *buf, size_t len);
bool dsv4_nccl_same_gpu(const dsv4_nccl_gpu *a, const dsv4_nccl_gpu *b);

/* Receiver: the expose blob of layout l (every buffer in device memory) on gpu, into blob
 * (capacity *len_p; *len_p set to the length used). 0; -ENOSPC when it does not fit
 * (*len_p is the length needed); -ENOTSUP when a buffer is not in device memory. */
int dsv4_nccl_expose_encode(const dsv4_kv_layout *l, const dsv4_nccl_gpu *gpu, void *blob,
                            size_t *len_p);
/* Sender: decodes a peer's expose blob against the local layout. 0 with *info_p filled;
 * DSV4_EPEER with the reason in err (another transport, other version, table differs,
 * truncated, trailing bytes). */
int dsv4_nccl_expose_decode(const void *blob, size_t len, const dsv4_kv_layout *local,
                            dsv4_nccl_peer_info *info_p, char *err, size_t errlen);

/* Sender: the bootstrap message for connection `epoch` with NCCL unique id `id`. Same
 * returns as dsv4_nccl_expose_encode. */
int dsv4_nccl_boot_encode(const dsv4_kv_layout *l, const dsv4_nccl_gpu *gpu, uint32_t epoch,
                          const uint8_t id[DSV4_NCCL_ID_BYTES], void *msg, size_t *len_p);
/* Receiver: decodes a bootstrap message against the local layout; as
 * dsv4_nccl_expose_decode. */
int dsv4_nccl_boot_decode(const void *msg, size_t len, const dsv4_kv_layout *local,
                          dsv4_nccl_peer_info *info_p, char *err, size_t errlen);

void dsv4_nccl_peer_info_clear(dsv4_nccl_peer_info *info);

/* The ordered operations of req between the two pools (l: either side's layout; the
 * tables are equal). *ops_p is malloc'd. 0; -ERANGE when a run or slot lies outside
 * either pool or a run has no pages; -ENOMEM. */
int dsv4_nccl_plan(const dsv4_kv_layout *l, const dsv4_nccl_side *src, const dsv4_nccl_side *dst,
                   const dsv4_xfer_req *req, dsv4_nccl_op **ops_p, size_t *n_ops_p);

#endif
