/* bf16_split.cuh: an f32 input as the bf16 hi and lo parts the tensor-core GEMMs multiply
 * (model_gemm.cu, model_gemm_wgmma.cu), and the split rows a kernel writing a grouped GEMM's
 * inputs leaves for it (dsv4_cuda_linear_grouped_split; nvcc only). */
#ifndef DSV4_KERNELS_CUDA_BF16_SPLIT_CUH
#define DSV4_KERNELS_CUDA_BF16_SPLIT_CUH

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

/* Four inputs as bf16 pairs: hi[0..1], hi[2..3], lo[0..1], lo[2..3] (hi + lo = v to 16
 * significant bits). One rounding a value, each pair's two in one conversion: hi = v
 * rounded to bf16, lo = v - hi rounded to bf16. */
__device__ static inline uint4 dsv4_mma_split(float4 v)
{
    __nv_bfloat162 h01 = __floats2bfloat162_rn(v.x, v.y), h23 = __floats2bfloat162_rn(v.z, v.w);
    float2 f01 = __bfloat1622float2(h01), f23 = __bfloat1622float2(h23);
    __nv_bfloat162 l01 = __floats2bfloat162_rn(v.x - f01.x, v.y - f01.y);
    __nv_bfloat162 l23 = __floats2bfloat162_rn(v.z - f23.x, v.w - f23.y);
    return make_uint4(*(uint32_t *)&h01, *(uint32_t *)&h23, *(uint32_t *)&l01, *(uint32_t *)&l23);
}

/* Inputs 4 q .. 4 q + 3 of row r, v, into split rows [2][rows][in] bf16 (the hi rows, then
 * the lo rows: dsv4_wg_split_kernel's layout of one problem). */
__device__ static inline void dsv4_split_store(void *split, size_t rows, size_t in, size_t r,
                                               size_t q, float4 v)
{
    uint4 s = dsv4_mma_split(v);
    uint2 *hl = (uint2 *)split;
    size_t recs = rows * (in / 4), i = r * (in / 4) + q;
    hl[i] = make_uint2(s.x, s.y);
    hl[recs + i] = make_uint2(s.z, s.w);
}

#endif /* DSV4_KERNELS_CUDA_BF16_SPLIT_CUH */
