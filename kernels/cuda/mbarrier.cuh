/* mbarrier.cuh: the shared-memory address and the mbarrier phase wait that the kernels fed by
 * the copy engine share (indexer.cu, topk.cu, model_gemm_wgmma.cu; nvcc only). */
#ifndef DSV4_KERNELS_CUDA_MBARRIER_CUH
#define DSV4_KERNELS_CUDA_MBARRIER_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* p's address in the block's shared memory window, as PTX's shared-memory operands take it */
__device__ static inline uint32_t dsv4_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Until the phase of the mbarrier at shared address bar with this parity has completed. */
__device__ static inline void dsv4_mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

#endif
