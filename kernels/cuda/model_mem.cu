/* model_mem.cu: devices, device and page-locked host memory, streams and events, copies, the
 * one-launch block copy, the CUDA graphs of the CUDA forward and the device KV pool, and the
 * profiler range (model.h). */
#include "kernels/cuda/model.h"
#include "kernels/cuda/status.cuh"

#include <cuda_profiler_api.h>

#include <stdio.h>
#include <stdlib.h>

int dsv4_cuda_device_use(int ordinal, char *name, size_t namelen)
{
    int n = 0;
    cudaDeviceProp prop;
    int rc = dsv4_cuda_status(cudaGetDeviceCount(&n));
    if (rc != 0 || n == 0)
        return -ENODEV;
    if (ordinal < 0)
        ordinal = 0;
    if (ordinal >= n)
        return -ENODEV;
    if ((rc = dsv4_cuda_status(cudaSetDevice(ordinal))) != 0 ||
        (rc = dsv4_cuda_status(cudaGetDeviceProperties(&prop, ordinal))) != 0)
        return rc;
    if (name)
        snprintf(name, namelen, "%s", prop.name);
    return 0;
}

void *dsv4_cuda_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    /* zeroed so transfers and checksums of never-written rows are reproducible */
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

void dsv4_cuda_free(void *dev)
{
    if (dev)
        cudaFree(dev);
}

void *dsv4_cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

void dsv4_cuda_host_free(void *host)
{
    if (host)
        cudaFreeHost(host);
}

int dsv4_cuda_stream_new(void **stream_p)
{
    cudaStream_t s;
    int rc = dsv4_cuda_status(cudaStreamCreate(&s));
    if (rc == 0)
        *stream_p = s;
    return rc;
}

void dsv4_cuda_stream_free(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

int dsv4_cuda_event_new(void **event_p)
{
    cudaEvent_t e;
    int rc = dsv4_cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (rc == 0)
        *event_p = e;
    return rc;
}

void dsv4_cuda_event_free(void *event)
{
    if (event)
        cudaEventDestroy((cudaEvent_t)event);
}

int dsv4_cuda_event_record(void *event, void *stream)
{
    return dsv4_cuda_status(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}

int dsv4_cuda_stream_wait(void *stream, void *event)
{
    return dsv4_cuda_status(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
}

int dsv4_cuda_event_sync(void *event)
{
    return dsv4_cuda_status(cudaEventSynchronize((cudaEvent_t)event));
}

int dsv4_cuda_copy(void *dst, const void *src, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    return dsv4_cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream));
}

int dsv4_cuda_sync(void *stream)
{
    return dsv4_cuda_status(cudaStreamSynchronize((cudaStream_t)stream));
}

/* One block per copied block; 16-byte words where every block start allows it. */
template <typename T>
__global__ static void dsv4_blocks_copy_kernel(uint8_t *dst, const uint32_t *dst_ids,
                                               const uint8_t *src, const uint32_t *src_ids,
                                               size_t block_bytes)
{
    uint32_t i = blockIdx.x;
    size_t d = dst_ids ? dst_ids[i] : i, s = src_ids ? src_ids[i] : i;
    T *o = (T *)(dst + d * block_bytes);
    const T *in = (const T *)(src + s * block_bytes);
    for (size_t w = threadIdx.x; w < block_bytes / sizeof(T); w += blockDim.x)
        o[w] = in[w];
}

int dsv4_cuda_blocks_copy(uint8_t *dst_dev, const uint32_t *dst_ids_dev, const uint8_t *src_dev,
                          const uint32_t *src_ids_dev, size_t block_bytes, uint32_t n, void *stream)
{
    if (n == 0 || block_bytes == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    bool wide =
        block_bytes % 16 == 0 && (uintptr_t)dst_dev % 16 == 0 && (uintptr_t)src_dev % 16 == 0;
    if (wide)
        dsv4_blocks_copy_kernel<uint4>
            <<<n, 256, 0, st>>>(dst_dev, dst_ids_dev, src_dev, src_ids_dev, block_bytes);
    else
        dsv4_blocks_copy_kernel<uint8_t>
            <<<n, 256, 0, st>>>(dst_dev, dst_ids_dev, src_dev, src_ids_dev, block_bytes);
    return dsv4_cuda_launch_status();
}

/* ---- CUDA graphs ---- */

struct dsv4_cuda_graph {
    cudaGraphExec_t exec;
};

int dsv4_cuda_capture_begin(void *stream)
{
    /* thread-local: another thread's unrelated CUDA calls do not break this capture */
    return dsv4_cuda_status(
        cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
}

int dsv4_cuda_capture_end(void *stream, bool keep, dsv4_cuda_graph **graph_p)
{
    cudaGraph_t graph = NULL;
    int rc = dsv4_cuda_status(cudaStreamEndCapture((cudaStream_t)stream, &graph));
    /* a launch that failed inside the capture invalidated it: clear that error */
    cudaGetLastError();
    dsv4_cuda_graph *g = NULL;
    if (rc == 0 && keep) {
        g = (dsv4_cuda_graph *)calloc(1, sizeof(*g));
        rc = g ? dsv4_cuda_status(cudaGraphInstantiate(&g->exec, graph, 0)) : -ENOMEM;
        if (rc != 0) {
            cudaGetLastError();
            free(g);
            g = NULL;
        }
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (rc == 0 && keep)
        *graph_p = g;
    return rc;
}

int dsv4_cuda_graph_launch(dsv4_cuda_graph *g, void *stream)
{
    return dsv4_cuda_status(cudaGraphLaunch(g->exec, (cudaStream_t)stream));
}

void dsv4_cuda_graph_free(dsv4_cuda_graph *g)
{
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* ---- profiler range ---- */

int dsv4_cuda_profile(bool on)
{
    return dsv4_cuda_status(on ? cudaProfilerStart() : cudaProfilerStop());
}
