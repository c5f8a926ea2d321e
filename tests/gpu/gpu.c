/* gpu.c: GPU test helpers (gpu.h). Without CUDA, gpu_require skips and nothing else is
 * reached. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdlib.h>

static void gpu_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        bail_out("%s failed (%s)", what, cudaGetErrorString(e));
}

void gpu_require(void)
{
    struct cudaDeviceProp prop;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);

    if (e != cudaSuccess)
        skip_all("no CUDA device (%s)", cudaGetErrorString(e));
    if (n == 0)
        skip_all("no CUDA device");
    gpu_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    if (prop.major < 9)
        skip_all("the kernels are built for sm_90 (device 0 is %s, sm_%d%d)", prop.name, prop.major,
                 prop.minor);
    diag("device 0: %s", prop.name);
}

void *gpu_alloc(size_t n)
{
    void *p = NULL;

    gpu_check(cudaMalloc(&p, n ? n : 1), "cudaMalloc");
    gpu_check(cudaMemset(p, 0xff, n), "cudaMemset");
    return p;
}

void gpu_free(void *dev)
{
    gpu_check(cudaFree(dev), "cudaFree");
}

void gpu_put(void *dev, const void *host, size_t n)
{
    gpu_check(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void gpu_get(void *host, const void *dev, size_t n)
{
    gpu_check(cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}

void gpu_sync(void)
{
    gpu_check(cudaDeviceSynchronize(), "the kernels");
}

float gpu_uniform(uint32_t *rng)
{
    *rng = *rng * 1664525u + 1013904223u;
    return (float)(*rng >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

float *gpu_random(size_t n, uint32_t *rng)
{
    float *h = malloc(n * sizeof(float)), *d = gpu_alloc(n * sizeof(float));
    if (!h)
        bail_out("out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = gpu_uniform(rng);
    gpu_put(d, h, n * sizeof(float));
    free(h);
    return d;
}
#else
void gpu_require(void)
{
    skip_all("built without CUDA (configure --with-cuda)");
}
#endif
