/* indexk_store.h: the C ABI of the index-K row store on the device (indexk_store.cu), the
 * kernel behind the indexk plugins' store_cuda (include/dsv4d/indexk.h).
 *
 * Plain C types, as in cuda_kernels.h: *_dev pointers are device memory, stream is a
 * cudaStream_t passed as void *. The call only queues work: 0, -EINVAL for bad arguments,
 * -ENOTSUP for a shape the kernel does not take, -EIO when CUDA refused the launch.
 */
#ifndef DSV4_KERNELS_CUDA_INDEXK_STORE_H
#define DSV4_KERNELS_CUDA_INDEXK_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How one plugin writes its rows: the page format of cuda_kernels.h and the encoder's
 * settings (the same ones its host encoder reads from its config). */
typedef struct dsv4_cuda_ik_store_fmt {
    dsv4_cuda_ik_format format;
    uint32_t dim, rows_per_page;
    bool pow2_scale;       /* fp8: the row scale rounded up to a power of two (ue8m0) */
    bool reject_nonfinite; /* a batch holding NaN or infinity is refused */
} dsv4_cuda_ik_store_fmt;

/* Encode the n rows rows_dev[i][dim] into their slots of pool_dev (page p at pool_dev + p *
 * page bytes), byte for byte what plugins/indexk's host encoders write: f32 as is, bf16
 * rounded to nearest even with NaN kept quiet, fp8 as e4m3 (saturating, NaN 0x7f) of
 * value / scale with scale = max(amax of the finite values, 1e-4) / 448 (rounded up to a
 * power of two with pow2_scale). slots_dev holds n (page, row) pairs of uint32_t, the
 * layout of dsv4_indexk_slot. A batch with a row >= rows_per_page, or a non-finite value
 * while reject_nonfinite is set, is written nowhere and sets *refused_dev to 1. dim must be
 * a multiple of 4 (rows are written as whole 32-bit words), else -ENOTSUP. */
int dsv4_cuda_indexk_store(const dsv4_cuda_ik_store_fmt *fmt, void *pool_dev, const float *rows_dev,
                           const uint32_t *slots_dev, uint32_t n, uint32_t *refused_dev,
                           void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_INDEXK_STORE_H */
