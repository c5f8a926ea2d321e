/* pdl.cuh: programmatic dependent launch (sm_90; nvcc only). A kernel launched by
 * dsv4_pdl_launch may start while the kernel before it in the stream still runs: its blocks
 * are scheduled once every block of that kernel has called dsv4_pdl_trigger (or exited), may
 * run what reads no earlier kernel's output (a GEMM's weights), and call dsv4_pdl_wait before
 * anything else: it returns once the earlier kernels have completed and their writes are
 * visible. The forward's kernels begin with dsv4_pdl_begin, so each launch's blocks are
 * resident and its launch paid while the kernel before it runs, and a GEMM's first weights
 * stream in meanwhile. Both instructions do nothing where the launch is an ordinary one.
 * Only the edge from the kernel before is relaxed: an event wait (a host-tier layer's fence,
 * dsv4_hc_ops stream_wait_layer) or a copy queued between the two launches still holds the
 * second back until it is done. t-gpu-hostcache-async-fence-waits-for-delayed-layers checks
 * that: its page checksums (dsv4_cuda_xxh64, launched so) each follow the last one's launch
 * and a fence on a layer still loading. */
#ifndef DSV4_KERNELS_CUDA_PDL_CUH
#define DSV4_KERNELS_CUDA_PDL_CUH

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/status.cuh"

/* the kernel after this one (if launched by dsv4_pdl_launch) may be scheduled */
__device__ static inline void dsv4_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* until the kernels before this one have completed, their writes visible */
__device__ static inline void dsv4_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* A kernel's start: the kernel after it may be scheduled, then it waits for those before.
 * Triggering first lets launches queue several deep (each waits for its own predecessor, so
 * the order of their effects is the stream's); waiting first kept them one deep and gained
 * less (H200, flash-shape decode at batch 64: 1.08x against 1.03-1.05x over no PDL). */
__device__ static inline void dsv4_pdl_begin(void)
{
    dsv4_pdl_trigger();
    dsv4_pdl_wait();
}

/* kernel<<<grid, block, smem, st>>>(args...), allowed to start before the kernel before it
 * has completed; the launch's status (dsv4_cuda_launch_status) */
template <typename... P, typename... A>
static inline int dsv4_pdl_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t st, A &&...args)
{
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
    return dsv4_cuda_launch_status();
}

#endif
