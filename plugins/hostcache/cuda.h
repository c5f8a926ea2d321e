/* cuda.h: the CUDA copy engine of the hostcache plugins (plugins/hostcache/cuda.c), used by
 * common.c when the device layout is in CUDA memory.
 *
 * Attaching page-locks the host layout's memory (one cudaHostRegister per contiguous
 * range; the host pool is one slab, so one call) and creates a non-blocking copy stream on
 * the layout's device. An op is queued whole when it starts: the copy stream first waits
 * for the work queued so far on the daemon's compute stream (a save reads pages the
 * forward wrote, a load overwrites pages earlier kernels may still read), then per layer
 * one cudaMemcpyBatchAsync of every buffer of the layer times every run of consecutive
 * ids, then one event. The fence is that layer's event. Ops of one state run in queue
 * order on the one stream, so a save queued before a load is on host before the load
 * reads it.
 *
 * Built with CUDA only; without it dsv4_hc_cuda_attach refuses a CUDA layout and nothing
 * else is reached.
 */
#ifndef DSV4_PLUGINS_HOSTCACHE_CUDA_H
#define DSV4_PLUGINS_HOSTCACHE_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include <dsv4d/hostcache.h>

typedef struct dsv4_hc_cuda dsv4_hc_cuda;       /* copy stream and page-locked ranges */
typedef struct dsv4_hc_cuda_op dsv4_hc_cuda_op; /* one event per layer */

#ifdef HAVE_CUDA
/* Page-lock host's memory and create the copy stream for copies between device and host
 * (which mirror each other). delay_ms, read at each load, is the test-only delay queued on
 * the copy stream before each layer; compute_stream is the daemon's (NULL = the legacy
 * default stream). 0, -EINVAL (buffers on several devices), -EIO (CUDA refused; logged). */
int dsv4_hc_cuda_attach(const dsv4_host *host, const char *subject, const dsv4_kv_layout *device,
                        const dsv4_kv_layout *hst, const int64_t *delay_ms, dsv4_hc_cuda **cuda_p);
/* Waits for the copy stream, then unregisters and frees. */
void dsv4_hc_cuda_detach(dsv4_hc_cuda *c);

/* Queue the copies of every layer (ids already checked). 0, -ENOMEM, -EIO. */
int dsv4_hc_cuda_start(dsv4_hc_cuda *c, bool load, bool paged, const dsv4_page_copy *copies,
                       size_t n, dsv4_hc_cuda_op **op_p);
/* The host waits for layer's event. 0 or -EIO. */
int dsv4_hc_cuda_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer);
/* stream waits for layer's event; the host does not. 0 or -EIO. */
int dsv4_hc_cuda_stream_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer, void *stream);
/* 0: every layer landed; -EAGAIN: not yet; -EIO: the copies failed. */
int dsv4_hc_cuda_poll(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op);
/* Waits for the whole op, then frees it. */
void dsv4_hc_cuda_op_free(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op);
#else
#include <errno.h>

/* Without CUDA a CUDA layout is refused at attach, so no copy engine or op of this file
 * ever exists and the rest below is never reached. */
static inline int dsv4_hc_cuda_attach(const dsv4_host *host, const char *subject,
                                      const dsv4_kv_layout *device, const dsv4_kv_layout *hst,
                                      const int64_t *delay_ms, dsv4_hc_cuda **cuda_p)
{
    (void)device;
    (void)hst;
    (void)delay_ms;
    (void)cuda_p;
    host->log(DSV4_LOG_ERROR, subject,
              "attach refused: the device layout is in CUDA memory (plugin built without CUDA)");
    return -ENOTSUP;
}
static inline void dsv4_hc_cuda_detach(dsv4_hc_cuda *c)
{
    (void)c;
}
static inline int dsv4_hc_cuda_start(dsv4_hc_cuda *c, bool load, bool paged,
                                     const dsv4_page_copy *copies, size_t n, dsv4_hc_cuda_op **op_p)
{
    (void)c, (void)load, (void)paged, (void)copies, (void)n, (void)op_p;
    return -ENOTSUP;
}
static inline int dsv4_hc_cuda_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer)
{
    (void)c, (void)op, (void)layer;
    return -ENOTSUP;
}
static inline int dsv4_hc_cuda_stream_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer,
                                           void *stream)
{
    (void)c, (void)op, (void)layer, (void)stream;
    return -ENOTSUP;
}
static inline int dsv4_hc_cuda_poll(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op)
{
    (void)c, (void)op;
    return -ENOTSUP;
}
static inline void dsv4_hc_cuda_op_free(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op)
{
    (void)c, (void)op;
}
#endif

#endif
