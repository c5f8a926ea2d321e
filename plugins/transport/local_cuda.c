/* local_cuda.c: transport/local between device pools over CUDA IPC (local_cuda.h). */
#include "config.h"

#include "plugins/transport/local_cuda.h"

#include "plugins/transport/cuda_batch.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LC_SUBJECT "transport/local"

_Static_assert(sizeof(cudaIpcMemHandle_t) == DSV4_LOCAL_IPC_BYTES, "CUDA IPC handle size changed");
_Static_assert(sizeof(((struct cudaDeviceProp *)0)->uuid.bytes) == DSV4_LOCAL_UUID_BYTES,
               "CUDA UUID size changed");

typedef struct lc_peer {
    const dsv4_host *host;
    const dsv4_kv_layout *local;
    dsv4_tp_table t;
    int dev;
    cudaStream_t stream; /* this peer's copies, in post order */
    cudaEvent_t after;   /* the compute stream's work queued before a post */
    uint8_t **dst;       /* [n_buffers] the peer's buffers in our address space */
    bool opened;         /* dst came from cudaIpcOpenMemHandle */
} lc_peer;

typedef struct lc_xfer {
    lc_peer *p;
    cudaEvent_t done;
} lc_xfer;

/* The device every buffer of l lives on: 0 with *dev_p, or -ENOTSUP. */
static int lc_layout_dev(const dsv4_kv_layout *l, int *dev_p)
{
    if (l->n_buffers == 0 || dsv4_local_layout_mem(l) != DSV4_MEM_CUDA)
        return -ENOTSUP;
    for (uint32_t i = 1; i < l->n_buffers; i++)
        if (l->buffers[i].cuda_device != l->buffers[0].cuda_device)
            return -ENOTSUP;
    *dev_p = l->buffers[0].cuda_device;
    return 0;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L names it. */
static void lc_uuid_text(const uint8_t *u, char *buf, size_t len)
{
    int n = snprintf(buf, len, "GPU-");
    for (int i = 0; i < DSV4_LOCAL_UUID_BYTES && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%02x",
                      i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
}

static int lc_uuid(int dev, uint8_t *uuid)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return -ENODEV;
    memcpy(uuid, prop.uuid.bytes, DSV4_LOCAL_UUID_BYTES);
    return 0;
}

static int lc_describe(const dsv4_kv_layout *l, dsv4_local_blob *b)
{
    int dev;
    if (lc_layout_dev(l, &dev) != 0)
        return -ENOTSUP;
    if (cudaSetDevice(dev) != cudaSuccess || lc_uuid(dev, b->uuid) != 0)
        return -ENODEV;
    b->device = dev;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        cudaIpcMemHandle_t h;
        if (cudaIpcGetMemHandle(&h, l->buffers[i].base) != cudaSuccess)
            return -EIO;
        memcpy(b->bufs[i].ipc, &h, sizeof(h));
        b->bufs[i].addr = (uint64_t)(uintptr_t)l->buffers[i].base;
    }
    return 0;
}

/* The ordinal here of the GPU with this UUID: 0 with *dev_p, or -ENODEV. */
static int lc_find_gpu(const uint8_t *uuid, int *dev_p)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return -ENODEV;
    for (int d = 0; d < n; d++) {
        uint8_t u[DSV4_LOCAL_UUID_BYTES];
        if (lc_uuid(d, u) == 0 && memcmp(u, uuid, sizeof(u)) == 0) {
            *dev_p = d;
            return 0;
        }
    }
    return -ENODEV;
}

static void lc_free_peer(lc_peer *p)
{
    if (p->stream)
        cudaStreamDestroy(p->stream);
    if (p->after)
        cudaEventDestroy(p->after);
    for (uint32_t i = 0; p->opened && p->dst && i < p->local->n_buffers; i++)
        if (p->dst[i])
            cudaIpcCloseMemHandle(p->dst[i]);
    free(p->dst);
    free(p);
}

/* The peer's GPU is ours or one ours can reach: 0, else DSV4_EPEER with the reason. */
static int lc_check_gpu(const lc_peer *p, const dsv4_local_blob *b, char *err, size_t errlen)
{
    char g[64];
    lc_uuid_text(b->uuid, g, sizeof(g));
    int peer_dev, can = 0;
    if (lc_find_gpu(b->uuid, &peer_dev) != 0) {
        snprintf(err, errlen,
                 LC_SUBJECT ": the peer's GPU %s (its device %d) is not visible to this process "
                            "(CUDA_VISIBLE_DEVICES?)",
                 g, b->device);
        return DSV4_EPEER;
    }
    if (peer_dev != p->dev &&
        (cudaDeviceCanAccessPeer(&can, p->dev, peer_dev) != cudaSuccess || !can)) {
        snprintf(err, errlen,
                 LC_SUBJECT ": GPU %d cannot reach the peer's GPU %s (device %d here: no peer "
                            "access; put prefill and decode on one GPU or on peer-connected GPUs)",
                 p->dev, g, peer_dev);
        return DSV4_EPEER;
    }
    return 0;
}

static int lc_attach(const dsv4_host *host, const dsv4_kv_layout *local, const dsv4_local_blob *b,
                     bool same_process, void **peer_p, char *err, size_t errlen)
{
    lc_peer *p = calloc(1, sizeof(*p));
    uint8_t **dst = calloc(local->n_buffers ? local->n_buffers : 1, sizeof(*dst));
    if (!p || !dst) {
        free(p);
        free(dst);
        snprintf(err, errlen, LC_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    *p = (lc_peer){.host = host, .local = local, .t = b->t, .dst = dst, .opened = !same_process};
    int rc = 0;
    cudaError_t e = cudaSuccess;
    if (lc_layout_dev(local, &p->dev) != 0) {
        snprintf(err, errlen, LC_SUBJECT ": our kv pool is not in device memory of one GPU");
        rc = DSV4_EPEER;
    } else if ((e = cudaSetDevice(p->dev)) != cudaSuccess) {
        snprintf(err, errlen, LC_SUBJECT ": cannot use CUDA device %d (%s)", p->dev,
                 cudaGetErrorString(e));
        rc = -ENODEV;
    } else {
        rc = lc_check_gpu(p, b, err, errlen);
    }
    for (uint32_t i = 0; rc == 0 && i < local->n_buffers; i++) {
        if (same_process) {
            p->dst[i] = (uint8_t *)(uintptr_t)b->bufs[i].addr;
            continue;
        }
        cudaIpcMemHandle_t h;
        void *ptr = NULL;
        memcpy(&h, b->bufs[i].ipc, sizeof(h));
        if ((e = cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
            snprintf(err, errlen, LC_SUBJECT ": cannot open the peer's buffer %u (%s)", i,
                     cudaGetErrorString(e));
            rc = DSV4_EPEER;
        }
        p->dst[i] = ptr;
    }
    if (rc == 0 &&
        ((e = cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking)) != cudaSuccess ||
         (e = cudaEventCreateWithFlags(&p->after, cudaEventDisableTiming)) != cudaSuccess)) {
        snprintf(err, errlen, LC_SUBJECT ": cannot create the copy stream (%s)",
                 cudaGetErrorString(e));
        rc = -EIO;
    }
    if (rc != 0) {
        lc_free_peer(p);
        return rc;
    }
    *peer_p = p;
    return 0;
}

static void lc_detach(void *peer)
{
    lc_peer *p = peer;
    cudaSetDevice(p->dev);
    cudaStreamSynchronize(p->stream); /* no copy into allocations we are about to close */
    lc_free_peer(p);
}

static int lc_post(void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    lc_peer *p = peer;
    const dsv4_kv_layout *l = p->local;
    int rc = dsv4_tp_check_req(req, l, &p->t);
    if (rc != 0)
        return rc;
    size_t n = dsv4_tp_pieces(l, req, NULL, 0);
    dsv4_tp_piece *pieces = malloc((n ? n : 1) * sizeof(*pieces));
    dsv4_tp_batch batch = {0};
    lc_xfer *x = calloc(1, sizeof(*x));
    if (!pieces || !x || dsv4_tp_batch_init(&batch, n) != 0) {
        rc = -ENOMEM;
        goto free_arrays;
    }
    dsv4_tp_pieces(l, req, pieces, n);
    for (size_t k = 0; k < n; k++)
        dsv4_tp_batch_add(&batch, p->dst[pieces[k].buffer] + pieces[k].dst_off,
                          l->buffers[pieces[k].buffer].base + pieces[k].src_off, pieces[k].bytes);
    cudaError_t e = cudaSetDevice(p->dev);
    /* the copies read what the forward queued on the compute stream before this post */
    cudaStream_t compute = p->host->cuda_stream;
    if (e == cudaSuccess && compute && (e = cudaEventRecord(p->after, compute)) == cudaSuccess)
        e = cudaStreamWaitEvent(p->stream, p->after, 0);
    if (e == cudaSuccess)
        e = dsv4_tp_batch_queue(&batch, p->stream);
    if (e == cudaSuccess &&
        (e = cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming)) == cudaSuccess &&
        (e = cudaEventRecord(x->done, p->stream)) != cudaSuccess)
        cudaEventDestroy(x->done);
    if (e != cudaSuccess) {
        p->host->log(DSV4_LOG_ERROR, LC_SUBJECT, "cannot queue %zu copies of lease %llu.%llu (%s)",
                     n, (unsigned long long)req->room, (unsigned long long)req->generation,
                     cudaGetErrorString(e));
        rc = -EIO;
        goto free_arrays;
    }
    x->p = p;
    *xfer_p = x;
    x = NULL;
free_arrays:
    free(x);
    dsv4_tp_batch_free(&batch);
    free(pieces);
    return rc;
}

static int lc_poll(void *xfer)
{
    lc_xfer *x = xfer;
    cudaError_t e = cudaEventQuery(x->done);
    if (e == cudaErrorNotReady)
        return -EAGAIN;
    if (e != cudaSuccess) {
        x->p->host->log(DSV4_LOG_ERROR, LC_SUBJECT, "copy failed (%s)", cudaGetErrorString(e));
        return -EIO;
    }
    return 0;
}

/* Queued copies cannot be taken back: waits until they are done, after which nothing of the
 * transfer can land (an error means the context is gone, and its copies with it). */
static int lc_cancel(void *xfer)
{
    lc_xfer *x = xfer;
    cudaError_t e = cudaEventSynchronize(x->done);
    if (e != cudaSuccess)
        x->p->host->log(DSV4_LOG_ERROR, LC_SUBJECT, "waiting for a cancelled copy failed (%s)",
                        cudaGetErrorString(e));
    return 0;
}

static void lc_release(void *xfer)
{
    lc_xfer *x = xfer;
    lc_cancel(x); /* released early: the event outlives nothing it tracks */
    cudaEventDestroy(x->done);
    free(x);
}

const dsv4_local_path dsv4_local_cuda_path = {
    .describe = lc_describe,
    .attach = lc_attach,
    .detach = lc_detach,
    .post = lc_post,
    .poll = lc_poll,
    .cancel = lc_cancel,
    .release = lc_release,
};
