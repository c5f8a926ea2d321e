/* indexk_store.cu: index-K rows encoded into the indexk plugins' pages on the device
 * (indexk_store.h), so a CUDA forward writes them where the indexer reads them without a
 * staged copy of the pages through the host.
 *
 * One launch: every block first checks the whole batch (a store that refuses must leave
 * every page as it was, and blocks cannot wait for each other), then one warp encodes
 * each of its block's rows. Rows are short (dim 128: 512 bytes of input) and a batch is at
 * most one step's worth of them, so the check reads little and from L2.
 *
 * Byte identity with the host encoders (plugins/indexk/f32.c, bf16.c, fp8.c): bf16 uses the
 * integer rounding of kernels/cpu/numfmt.c (model_common.cuh); fp8 takes the maximum of the
 * finite values (a maximum does not depend on the order it is taken in) and the e4m3 codes
 * of the IEEE quotients by the scale (as the host's `/`, dsv4_e4m3x4_quotient_bits). */
#include "kernels/cuda/e4m3.cuh"
#include "kernels/cuda/indexk_store.h"
#include "kernels/cuda/model_common.cuh"
#include "kernels/cuda/status.cuh"
#include "kernels/cuda/pdl.cuh"

#define IKS_WARPS 8 /* rows per block */
#define IKS_THREADS (32 * IKS_WARPS)

__device__ static float iks_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ static void iks_kernel(dsv4_cuda_ik_store_fmt f, uint8_t *pool, size_t page_bytes,
                                  const float *__restrict__ rows,
                                  const uint32_t *__restrict__ slots, uint32_t n, uint32_t *refused)
{
    dsv4_pdl_begin();
    int bad = 0;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        bad |= slots[2 * i + 1] >= f.rows_per_page;
    if (f.reject_nonfinite)
        for (size_t i = threadIdx.x; i < (size_t)n * f.dim; i += blockDim.x)
            bad |= !isfinite(rows[i]);
    if (__syncthreads_or(bad)) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            *refused = 1;
        return;
    }

    uint32_t r = blockIdx.x * IKS_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= n)
        return;
    const float *v = rows + (size_t)r * f.dim;
    uint8_t *page = pool + (size_t)slots[2 * r] * page_bytes;
    uint32_t slot = slots[2 * r + 1], words = f.dim / 4;
    if (f.format == DSV4_CUDA_IK_F32) {
        float4 *dst = (float4 *)(page + (size_t)slot * f.dim * 4);
        for (uint32_t w = lane; w < words; w += 32)
            dst[w] = make_float4(v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]);
        return;
    }
    if (f.format == DSV4_CUDA_IK_BF16) {
        uint2 *dst = (uint2 *)(page + (size_t)slot * f.dim * 2);
        for (uint32_t w = lane; w < words; w += 32)
            dst[w] = make_uint2(dsv4_bf16_bits(v[4 * w]) | dsv4_bf16_bits(v[4 * w + 1]) << 16,
                                dsv4_bf16_bits(v[4 * w + 2]) | dsv4_bf16_bits(v[4 * w + 3]) << 16);
        return;
    }
    float amax = 0.0f;
    for (uint32_t d = lane; d < f.dim; d += 32)
        if (isfinite(v[d]))
            amax = fmaxf(amax, fabsf(v[d]));
    amax = iks_warp_max(amax);
    const float scale = dsv4_e4m3_scale(amax, f.pow2_scale);
    uint32_t *dst = (uint32_t *)(page + (size_t)slot * f.dim);
    const float inv = 1.0f / scale;
    for (uint32_t w = lane; w < words; w += 32)
        dst[w] = dsv4_e4m3x4_quotient_bits(
            make_float4(v[4 * w], v[4 * w + 1], v[4 * w + 2], v[4 * w + 3]), scale, inv);
    if (lane == 0)
        ((float *)(page + (size_t)f.rows_per_page * f.dim))[slot] = scale;
}

extern "C" int dsv4_cuda_indexk_store(const dsv4_cuda_ik_store_fmt *fmt, void *pool_dev,
                                      const float *rows_dev, const uint32_t *slots_dev, uint32_t n,
                                      uint32_t *refused_dev, void *stream)
{
    if (!fmt || fmt->dim == 0 || fmt->rows_per_page == 0 ||
        (n > 0 && (!pool_dev || !rows_dev || !slots_dev || !refused_dev)))
        return -EINVAL;
    if (fmt->dim % 4 != 0)
        return -ENOTSUP;
    if (n == 0)
        return 0;
    size_t row_bytes = fmt->format == DSV4_CUDA_IK_F32    ? (size_t)fmt->dim * 4
                       : fmt->format == DSV4_CUDA_IK_BF16 ? (size_t)fmt->dim * 2
                                                          : (size_t)fmt->dim + 4;
    uint32_t blocks = (n + IKS_WARPS - 1) / IKS_WARPS;
    return dsv4_pdl_launch(iks_kernel, blocks, IKS_THREADS, 0, (cudaStream_t)stream, *fmt,
                           (uint8_t *)pool_dev, row_bytes * fmt->rows_per_page, rows_dev, slots_dev,
                           n, refused_dev);
}
