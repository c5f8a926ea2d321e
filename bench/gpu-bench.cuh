/* gpu-bench.cuh: what the CUDA benchmarks share: exit with the program's name and CUDA's
 * message on a failed call, and the kernels that fill a buffer with finite pseudo-random
 * bits and stream-read one (the HBM read ceiling each benchmark measures in its own run).
 * Header-only: each benchmark is one .cu file. */
#ifndef DSV4_BENCH_GPU_BENCH_CUH
#define DSV4_BENCH_GPU_BENCH_CUH

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s failed (%s)\n", program_invocation_short_name, what,
                cudaGetErrorString(e));
        exit(1);
    }
}

static void check_rc(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "%s: %s failed (status %d)\n", program_invocation_short_name, what, rc);
        exit(1);
    }
}

/* Hashed bits under mask: random rows that stay finite in every format (the mask clears
 * the exponent bits that would make an f32 or bf16 huge or an e4m3 byte NaN). */
__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t mask, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 0x9e3779b1u ^ seed;
        x ^= x >> 16;
        x *= 0x85ebca6bu;
        x ^= x >> 13;
        x *= 0xc2b2ae35u;
        x ^= x >> 16;
        p[i] = x & mask;
    }
}

/* Streams n 16-byte words through the loads (evict-first), so the time is HBM's. */
__global__ void read_kernel(const uint4 *p, size_t n, uint32_t *sink)
{
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u)
        *sink = acc; /* keeps the loads */
}

#endif
