/* cuda_batch.c: one cudaMemcpyBatchAsync for a list of copies (cuda_batch.h). */
#include "config.h"

#include "plugins/transport/cuda_batch.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

int dsv4_tp_batch_init(dsv4_tp_batch *b, size_t cap)
{
    size_t n = cap ? cap : 1;
    *b = (dsv4_tp_batch){.dst = malloc(n * sizeof(*b->dst)),
                         .src = malloc(n * sizeof(*b->src)),
                         .size = malloc(n * sizeof(*b->size)),
                         .cap = cap};
    if (b->dst && b->src && b->size)
        return 0;
    dsv4_tp_batch_free(b);
    return -ENOMEM;
}

void dsv4_tp_batch_free(dsv4_tp_batch *b)
{
    free(b->dst);
    free(b->src);
    free(b->size);
    *b = (dsv4_tp_batch){0};
}

void dsv4_tp_batch_add(dsv4_tp_batch *b, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return;
    if (b->n >= b->cap) {
        b->overflow = true; /* a caller bug: queue refuses the batch rather than drop a copy */
        return;
    }
    b->dst[b->n] = dst;
    b->src[b->n] = src;
    b->size[b->n++] = bytes;
}

cudaError_t dsv4_tp_batch_queue(dsv4_tp_batch *b, cudaStream_t stream)
{
    if (b->overflow)
        return cudaErrorInvalidValue;
    if (b->n == 0)
        return cudaSuccess;
    /* one set of attributes for the whole batch: the sources are read in stream order,
     * after the event waits queued on the stream before it */
    struct cudaMemcpyAttributes attr = {.srcAccessOrder = cudaMemcpySrcAccessOrderStream};
    size_t attr_at = 0;
    return cudaMemcpyBatchAsync(b->dst, b->src, b->size, b->n, &attr, &attr_at, 1, stream);
}
