/* device_once.cuh: a kernel file's set-up once per device and process (nvcc only).
 * cudaFuncSetAttribute and the device's attributes hold for one device's context, so a
 * process with engines on two devices must make them on each; a file keeps its per-device
 * facts in arrays of DSV4_CUDA_MAX_DEVICES, indexed by the ordinal this returns. */
#ifndef DSV4_KERNELS_CUDA_DEVICE_ONCE_CUH
#define DSV4_KERNELS_CUDA_DEVICE_ONCE_CUH

#include <mutex>

#include "kernels/cuda/status.cuh"

#define DSV4_CUDA_MAX_DEVICES 64 /* device ordinals a process sets up kernels on */

/* The current device's ordinal in *dev_p, setup(dev) run once for it (on its first call for
 * that device, by one thread; the others wait); -ENOTSUP for an ordinal past the arrays. */
template <typename Setup>
static int dsv4_cuda_once_per_device(std::once_flag (&once)[DSV4_CUDA_MAX_DEVICES], Setup &&setup,
                                     int *dev_p)
{
    int dev, rc = dsv4_cuda_status(cudaGetDevice(&dev));
    if (rc != 0)
        return rc;
    if (dev < 0 || dev >= DSV4_CUDA_MAX_DEVICES)
        return -ENOTSUP;
    std::call_once(once[dev], setup, dev);
    *dev_p = dev;
    return 0;
}

#endif
