/* cuda_batch.h: one cudaMemcpyBatchAsync for a list of copies, shared by the transports'
 * device paths (transport/local over CUDA IPC, transport/ucx staging through pinned
 * buffers). A request is queued as ONE batch, never a copy call per page: the list is
 * built with dsv4_tp_batch_add and queued on a stream with the sources read in stream
 * order (after whatever the stream was made to wait for). Built with CUDA only.
 */
#ifndef DSV4_PLUGINS_TRANSPORT_CUDA_BATCH_H
#define DSV4_PLUGINS_TRANSPORT_CUDA_BATCH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct dsv4_tp_batch {
    void **dst;
    const void **src;
    size_t *size;
    size_t n, cap;
    bool overflow; /* more copies were added than cap */
} dsv4_tp_batch;

/* Room for cap copies: 0 or -ENOMEM. */
int dsv4_tp_batch_init(dsv4_tp_batch *b, size_t cap);
void dsv4_tp_batch_free(dsv4_tp_batch *b);
/* Appends one copy (empty ones are left out); the caller sized the batch for it. */
void dsv4_tp_batch_add(dsv4_tp_batch *b, void *dst, const void *src, size_t bytes);
/* Queues every copy as one cudaMemcpyBatchAsync on stream (nothing for an empty batch);
 * cudaErrorInvalidValue when more copies were added than the batch has room for. */
cudaError_t dsv4_tp_batch_queue(dsv4_tp_batch *b, cudaStream_t stream);

#endif
