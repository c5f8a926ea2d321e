/* evict_first.cuh: loads of what a launch reads once and no kernel after it wants (the
 * linear layers' weights), their lines in L2 evicted before any other's, so that the
 * activations, the k splits' sums and the KV pages the kernels around them read again stay
 * there (a weight's row tiles run side by side, so their repeats still find it). H200,
 * flash-shape decode, 4 and 6 layers, against the same loads without the hint: BF16 and FP8
 * weights alike 1.02-1.05x at batch 1-4, 1.01-1.03x at 16, 1.00-1.01x at 64, batch 256
 * unchanged; a policy of evict_normal was slower than no hint (0.94x at batch 4)
 * (bench/results/2026-12-01-evict-first-h200.md). nvcc only. */
#ifndef DSV4_KERNELS_CUDA_EVICT_FIRST_CUH
#define DSV4_KERNELS_CUDA_EVICT_FIRST_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* The L2 cache policy of such loads (an operand of their .L2::cache_hint). Not volatile:
 * the compiler may compute it once for a kernel's loads. */
__device__ static inline uint64_t dsv4_evict_first(void)
{
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

/* 16 bytes at p (global, 16-byte aligned, unchanged while the kernel runs) */
__device__ static inline uint4 dsv4_ld_once16(const void *p)
{
    uint4 v;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(dsv4_evict_first()));
    return v;
}

/* 8 bytes at p (global, 8-byte aligned, unchanged while the kernel runs) */
__device__ static inline uint2 dsv4_ld_once8(const void *p)
{
    uint2 v;
    asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\n"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p), "l"(dsv4_evict_first()));
    return v;
}

/* dsv4_cp_async16 (cp_async.cuh) for such bytes */
__device__ static inline void dsv4_cp_async16_once(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "l"(dsv4_evict_first())
                 : "memory");
}

#endif /* DSV4_KERNELS_CUDA_EVICT_FIRST_CUH */
