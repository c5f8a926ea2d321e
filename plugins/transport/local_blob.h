/* local_blob.h: transport/local's expose blob, as pure functions (no CUDA: unit-tested
 * without a GPU).
 *
 * The blob starts with the receiver's buffer table (common.h), then says where the pool
 * lives (host or device memory; every buffer in one kind) and who exposed it (a random
 * per-process token and the pid, so a sender in the same process uses the addresses as
 * they are). Then, for a host pool: the shared memory object (/proc/<pid>/fd/<fd>, its
 * size, device and inode; fd UINT32_MAX for private memory) and per buffer its address
 * and its offset in that object. For a device pool: the GPU (UUID and the receiver's
 * ordinal, for messages) and per buffer its address and the CUDA IPC handle of its
 * allocation (every buffer is an allocation of its own: core/engine/kvpool.c).
 *
 * Decoding checks the table against the sender's own pool and refuses, each with its own
 * message, a pool in the other kind of memory (prefill and decode must both run on
 * device = cuda, or both not), a truncated blob and trailing bytes.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_LOCAL_BLOB_H
#define DSV4_PLUGINS_TRANSPORT_LOCAL_BLOB_H

#include "plugins/transport/common.h"

#define DSV4_LOCAL_MAGIC 0x4c543444u /* "D4TL" */
#define DSV4_LOCAL_UUID_BYTES 16
#define DSV4_LOCAL_IPC_BYTES 64 /* CUDA_IPC_HANDLE_SIZE (local_cuda.c asserts it) */
#define DSV4_LOCAL_NO_FD UINT32_MAX

/* One buffer as the receiver exposes it. */
typedef struct dsv4_local_buf {
    uint64_t addr;                     /* its base in the receiver's address space */
    uint64_t off;                      /* host: offset in the shared memory object */
    uint8_t ipc[DSV4_LOCAL_IPC_BYTES]; /* device: cudaIpcMemHandle_t of its allocation */
} dsv4_local_buf;

/* The receiver's pool as the blob describes it (free bufs with dsv4_local_blob_clear). */
typedef struct dsv4_local_blob {
    uint32_t mem;   /* dsv4_mem of every buffer */
    uint64_t token; /* the exposing process's random token */
    uint32_t pid;
    /* host pools */
    uint32_t fd; /* DSV4_LOCAL_NO_FD: private memory */
    uint64_t shm_bytes, shm_dev, shm_ino;
    /* device pools */
    uint8_t uuid[DSV4_LOCAL_UUID_BYTES];
    int32_t device;
    dsv4_tp_table t;
    dsv4_local_buf *bufs; /* [t.n_buffers] */
} dsv4_local_blob;

/* The memory every buffer of l lives in (host for a pool without buffers); -1 when the
 * buffers differ. */
int dsv4_local_layout_mem(const dsv4_kv_layout *l);

/* Writes b (fields of b->mem's kind; bufs[l->n_buffers]) as the blob of layout l into blob
 * (capacity *len_p; *len_p set to the length used). 0; -ENOSPC when it does not fit
 * (*len_p is the length needed); -ENOTSUP when a buffer of l is not in b->mem. */
int dsv4_local_blob_encode(const dsv4_kv_layout *l, const dsv4_local_blob *b, void *blob,
                           size_t *len_p);
/* Reads a peer's blob against the sender's layout. 0 with *b_p filled; DSV4_EPEER with the
 * reason in err (another transport, table differs, other memory, truncated, trailing
 * bytes); -ENOMEM. */
int dsv4_local_blob_decode(const void *blob, size_t len, const dsv4_kv_layout *local,
                           dsv4_local_blob *b_p, char *err, size_t errlen);
void dsv4_local_blob_clear(dsv4_local_blob *b);

#endif
