/* cuda.c: the CUDA copy engine of the hostcache plugins (cuda.h): page-locked host pool,
 * one non-blocking copy stream, one cudaMemcpyBatchAsync per layer, one event per layer. */
#include "config.h"

#include "plugins/hostcache/cuda.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* cudaHostRegister locks whole OS pages: ranges sharing a page are locked by one call,
 * since a second call on that page would be refused as already registered. */
#define DSV4_HC_OS_PAGE 4096u

struct dsv4_hc_cuda {
    const dsv4_host *host;
    const char *subject;
    const dsv4_kv_layout *dev, *hst;
    int device;                /* the CUDA ordinal of the device buffers */
    cudaStream_t stream;       /* the copy stream */
    cudaEvent_t after_compute; /* recorded on the compute stream as an op starts */
    const int64_t *delay_ms;   /* test-only delay before each layer of a load */
    void **locked;             /* ranges this engine page-locked (unlocked at detach) */
    size_t n_locked;
};

struct dsv4_hc_cuda_op {
    uint32_t n_layers;
    cudaEvent_t landed[]; /* [n_layers]: recorded after the layer's batch */
};

/* A run of consecutive ids on both sides: one copy per buffer instead of one per page. */
typedef struct dsv4_hc_run {
    uint32_t device, host, n;
} dsv4_hc_run;

typedef struct dsv4_hc_range {
    uint8_t *lo, *hi;
} dsv4_hc_range;

static int dsv4_hc_cuda_fail(const dsv4_host *host, const char *subject, const char *what,
                             cudaError_t e)
{
    host->log(DSV4_LOG_ERROR, subject, "%s failed (%s)", what, cudaGetErrorString(e));
    return -EIO;
}

/* Make the buffers' device current for the calls that create streams and events or queue
 * work; *prev_p is restored by dsv4_hc_cuda_leave, so the daemon's thread keeps its
 * device. */
static cudaError_t dsv4_hc_cuda_enter(int device, int *prev_p)
{
    cudaError_t e = cudaGetDevice(prev_p);
    if (e == cudaSuccess && *prev_p != device)
        e = cudaSetDevice(device);
    return e;
}

static void dsv4_hc_cuda_leave(int device, int prev)
{
    if (prev != device)
        cudaSetDevice(prev);
}

static int dsv4_hc_range_cmp(const void *a, const void *b)
{
    const dsv4_hc_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Page-lock every host buffer: sort the ranges, merge those that touch a common OS page,
 * one cudaHostRegister per merged range. Memory someone else locked already is left to
 * them. */
static int dsv4_hc_cuda_lock(dsv4_hc_cuda *c)
{
    const dsv4_kv_layout *h = c->hst;
    dsv4_hc_range *r = malloc((h->n_buffers ? h->n_buffers : 1) * sizeof(*r));
    c->locked = malloc((h->n_buffers ? h->n_buffers : 1) * sizeof(*c->locked));
    if (!r || !c->locked) {
        free(r);
        return -ENOMEM;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < h->n_buffers; i++) {
        size_t bytes = h->buffers[i].block_bytes * h->buffers[i].n_blocks;
        if (bytes > 0)
            r[n++] = (dsv4_hc_range){h->buffers[i].base, h->buffers[i].base + bytes};
    }
    qsort(r, n, sizeof(*r), dsv4_hc_range_cmp);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        dsv4_hc_range m = r[i++];
        while (i < n && (uintptr_t)r[i].lo / DSV4_HC_OS_PAGE <=
                            ((uintptr_t)m.hi + DSV4_HC_OS_PAGE - 1) / DSV4_HC_OS_PAGE) {
            if (r[i].hi > m.hi)
                m.hi = r[i].hi;
            i++;
        }
        cudaError_t e = cudaHostRegister(m.lo, (size_t)(m.hi - m.lo), cudaHostRegisterPortable);
        if (e == cudaErrorHostMemoryAlreadyRegistered)
            cudaGetLastError();
        else if (e != cudaSuccess)
            rc = dsv4_hc_cuda_fail(c->host, c->subject, "page-locking the host pool", e);
        else
            c->locked[c->n_locked++] = m.lo;
    }
    free(r);
    return rc;
}

int dsv4_hc_cuda_attach(const dsv4_host *host, const char *subject, const dsv4_kv_layout *device,
                        const dsv4_kv_layout *hst, const int64_t *delay_ms, dsv4_hc_cuda **cuda_p)
{
    int ordinal = -1;
    for (uint32_t i = 0; i < device->n_buffers; i++) {
        const dsv4_kv_buffer *b = &device->buffers[i];
        if (b->mem != DSV4_MEM_CUDA)
            continue;
        if (ordinal >= 0 && b->cuda_device != ordinal) {
            host->log(DSV4_LOG_ERROR, subject,
                      "attach refused: device buffers on CUDA devices %d and %d (one copy "
                      "stream serves one device)",
                      ordinal, b->cuda_device);
            return -EINVAL;
        }
        ordinal = b->cuda_device;
    }
    dsv4_hc_cuda *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    *c = (dsv4_hc_cuda){.host = host,
                        .subject = subject,
                        .dev = device,
                        .hst = hst,
                        .device = ordinal,
                        .delay_ms = delay_ms};
    int prev, rc;
    cudaError_t e = dsv4_hc_cuda_enter(c->device, &prev);
    if (e != cudaSuccess) {
        free(c);
        return dsv4_hc_cuda_fail(host, subject, "selecting the KV device", e);
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        rc = dsv4_hc_cuda_fail(host, subject, "creating the copy stream", e);
    else if ((e = cudaEventCreateWithFlags(&c->after_compute, cudaEventDisableTiming)) !=
             cudaSuccess)
        rc = dsv4_hc_cuda_fail(host, subject, "creating the compute-stream event", e);
    else
        rc = dsv4_hc_cuda_lock(c);
    dsv4_hc_cuda_leave(c->device, prev);
    if (rc != 0) {
        dsv4_hc_cuda_detach(c);
        return rc;
    }
    *cuda_p = c;
    return 0;
}

void dsv4_hc_cuda_detach(dsv4_hc_cuda *c)
{
    if (!c)
        return;
    if (c->stream) {
        cudaStreamSynchronize(c->stream);
        cudaStreamDestroy(c->stream);
    }
    if (c->after_compute)
        cudaEventDestroy(c->after_compute);
    for (size_t i = 0; i < c->n_locked; i++)
        cudaHostUnregister(c->locked[i]);
    free(c->locked);
    free(c);
}

/* The host function the copy stream runs before each layer of a delayed load: the copy
 * stream, not the caller, waits, so the fence has something to wait for. */
static void CUDART_CB dsv4_hc_cuda_sleep(void *arg)
{
    int64_t ms = *(const int64_t *)arg;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Split the copy list into runs of ids consecutive on both sides. */
static size_t dsv4_hc_runs(const dsv4_page_copy *copies, size_t n, dsv4_hc_run *runs)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && copies[i].device_page == runs[k - 1].device + runs[k - 1].n &&
            copies[i].host_page == runs[k - 1].host + runs[k - 1].n)
            runs[k - 1].n++;
        else
            runs[k++] = (dsv4_hc_run){copies[i].device_page, copies[i].host_page, 1};
    }
    return k;
}

/* The batch arguments of one op: at most (buffers of a layer) x (runs) copies a layer. */
typedef struct dsv4_hc_batch {
    void **dst;
    const void **src;
    size_t *size;
} dsv4_hc_batch;

/* Queue layer l of an op: one batch over every buffer of the layer of the op's kind and
 * every run, then the layer's event. */
static cudaError_t dsv4_hc_cuda_layer(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, bool load, bool paged,
                                      const dsv4_hc_run *runs, size_t n_runs, dsv4_hc_batch *b,
                                      uint32_t l)
{
    cudaError_t e = cudaSuccess;
    if (load && *c->delay_ms > 0)
        e = cudaLaunchHostFunc(c->stream, dsv4_hc_cuda_sleep, (void *)c->delay_ms);
    size_t k = 0;
    for (uint32_t i = 0; i < c->dev->n_buffers; i++) {
        const dsv4_kv_buffer *d = &c->dev->buffers[i], *h = &c->hst->buffers[i];
        if (d->layer != l || dsv4_buf_is_paged(d->kind) != paged || d->block_bytes == 0)
            continue;
        for (size_t r = 0; r < n_runs; r++) {
            uint8_t *dp = d->base + (size_t)runs[r].device * d->block_bytes;
            uint8_t *hp = h->base + (size_t)runs[r].host * h->block_bytes;
            b->dst[k] = load ? dp : hp;
            b->src[k] = load ? hp : dp;
            b->size[k++] = runs[r].n * d->block_bytes;
        }
    }
    if (e == cudaSuccess && k > 0) {
        /* one set of attributes for the whole batch: read the source in stream order
         * (after the compute-stream wait queued first), and let the copies overlap the
         * forward's kernels */
        struct cudaMemcpyAttributes attr = {.srcAccessOrder = cudaMemcpySrcAccessOrderStream,
                                            .flags = cudaMemcpyFlagPreferOverlapWithCompute};
        size_t attr_idx = 0;
        e = cudaMemcpyBatchAsync(b->dst, b->src, b->size, k, &attr, &attr_idx, 1, c->stream);
    }
    if (e == cudaSuccess)
        e = cudaEventRecord(op->landed[l], c->stream);
    return e;
}

static void dsv4_hc_cuda_op_destroy(dsv4_hc_cuda_op *op)
{
    for (uint32_t l = 0; l < op->n_layers; l++)
        if (op->landed[l])
            cudaEventDestroy(op->landed[l]);
    free(op);
}

/* Queue every layer of an op after the compute stream's work so far. */
static int dsv4_hc_cuda_queue(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, bool load, bool paged,
                              const dsv4_hc_run *runs, size_t n_runs, dsv4_hc_batch *b)
{
    const char *what = "creating the layer events";
    cudaError_t e = cudaSuccess;
    for (uint32_t l = 0; l < op->n_layers && e == cudaSuccess; l++)
        e = cudaEventCreateWithFlags(&op->landed[l], cudaEventDisableTiming);
    if (e == cudaSuccess) {
        what = "ordering the copy stream after the compute stream";
        e = cudaEventRecord(c->after_compute, (cudaStream_t)c->host->cuda_stream);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(c->stream, c->after_compute, 0);
    }
    if (e == cudaSuccess) {
        what = load ? "queueing a load" : "queueing a save";
        for (uint32_t l = 0; l < op->n_layers && e == cudaSuccess; l++)
            e = dsv4_hc_cuda_layer(c, op, load, paged, runs, n_runs, b, l);
    }
    if (e == cudaSuccess)
        return 0;
    /* what was queued still reads and writes the buffers: let it drain before the caller
     * sees the failure */
    cudaStreamSynchronize(c->stream);
    return dsv4_hc_cuda_fail(c->host, c->subject, what, e);
}

int dsv4_hc_cuda_start(dsv4_hc_cuda *c, bool load, bool paged, const dsv4_page_copy *copies,
                       size_t n, dsv4_hc_cuda_op **op_p)
{
    uint32_t per_layer = 0, n_layers = c->dev->n_layers;
    for (uint32_t l = 0; l < n_layers; l++) {
        uint32_t k = 0;
        for (uint32_t i = 0; i < c->dev->n_buffers; i++)
            k += c->dev->buffers[i].layer == l &&
                 dsv4_buf_is_paged(c->dev->buffers[i].kind) == paged;
        if (k > per_layer)
            per_layer = k;
    }
    size_t most = (size_t)per_layer * (n ? n : 1);
    dsv4_hc_cuda_op *op = calloc(1, sizeof(*op) + n_layers * sizeof(cudaEvent_t));
    dsv4_hc_run *runs = malloc((n ? n : 1) * sizeof(*runs));
    dsv4_hc_batch b = {malloc((most ? most : 1) * sizeof(void *)),
                       malloc((most ? most : 1) * sizeof(void *)),
                       malloc((most ? most : 1) * sizeof(size_t))};
    int rc = -ENOMEM, prev;
    if (op && runs && b.dst && b.src && b.size) {
        op->n_layers = n_layers;
        cudaError_t e = dsv4_hc_cuda_enter(c->device, &prev);
        if (e != cudaSuccess) {
            rc = dsv4_hc_cuda_fail(c->host, c->subject, "selecting the KV device", e);
        } else {
            rc = dsv4_hc_cuda_queue(c, op, load, paged, runs, dsv4_hc_runs(copies, n, runs), &b);
            dsv4_hc_cuda_leave(c->device, prev);
        }
    }
    free(runs);
    free(b.dst);
    free(b.src);
    free(b.size);
    if (rc != 0) {
        if (op)
            dsv4_hc_cuda_op_destroy(op);
        return rc;
    }
    *op_p = op;
    return 0;
}

int dsv4_hc_cuda_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer)
{
    cudaError_t e = cudaEventSynchronize(op->landed[layer]);
    return e == cudaSuccess ? 0 : dsv4_hc_cuda_fail(c->host, c->subject, "waiting for a layer", e);
}

int dsv4_hc_cuda_stream_wait(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op, uint32_t layer, void *stream)
{
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, op->landed[layer], 0);
    return e == cudaSuccess
               ? 0
               : dsv4_hc_cuda_fail(c->host, c->subject, "ordering a stream after a layer", e);
}

int dsv4_hc_cuda_poll(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op)
{
    if (op->n_layers == 0)
        return 0;
    cudaError_t e = cudaEventQuery(op->landed[op->n_layers - 1]);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return -EAGAIN;
    }
    return e == cudaSuccess ? 0 : dsv4_hc_cuda_fail(c->host, c->subject, "polling a copy", e);
}

void dsv4_hc_cuda_op_free(dsv4_hc_cuda *c, dsv4_hc_cuda_op *op)
{
    /* the layers land in stream order: the last event covers the whole op */
    if (op->n_layers > 0)
        dsv4_hc_cuda_wait(c, op, op->n_layers - 1);
    dsv4_hc_cuda_op_destroy(op);
}
