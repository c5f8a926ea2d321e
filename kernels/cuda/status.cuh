/* status.cuh: CUDA errors as the negative errno values of cuda_kernels.h, shared by the
 * .cu files (nvcc only). */
#ifndef DSV4_KERNELS_CUDA_STATUS_CUH
#define DSV4_KERNELS_CUDA_STATUS_CUH

#include <cuda_runtime.h>

#include <errno.h>

static inline int dsv4_cuda_status(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return 0;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return -ENODEV;
    case cudaErrorMemoryAllocation: return -ENOMEM;
    default: return -EIO;
    }
}

/* The status of the launch just queued (and of any earlier asynchronous failure). */
static inline int dsv4_cuda_launch_status(void)
{
    return dsv4_cuda_status(cudaGetLastError());
}

#endif
