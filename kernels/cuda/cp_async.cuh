/* cp_async.cuh: 16-byte copies from global to shared memory that hold no register while in
 * flight (cp.async), and their groups: what the mma.sync GEMM's weight ring
 * (model_gemm.cu) and the attention's key tiles (model_attn.cu) share (nvcc only). */
#ifndef DSV4_KERNELS_CUDA_CP_ASYNC_CUH
#define DSV4_KERNELS_CUDA_CP_ASYNC_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* Starts the copy of 16 bytes at src (global, 16-byte aligned) to dst (shared). */
__device__ static inline void dsv4_cp_async16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}

/* Closes this thread's group of the copies started since the last one. */
__device__ static inline void dsv4_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Until at most PENDING of this thread's groups are still in flight. */
template <int PENDING> __device__ static inline void dsv4_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

#endif /* DSV4_KERNELS_CUDA_CP_ASYNC_CUH */
