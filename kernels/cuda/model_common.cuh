/* model_common.cuh: device helpers the forward kernels share (nvcc only): the block sum
 * with a fixed reduction tree, RoPE, and the KV row formats of kernels.h (f32, bf16, fp8
 * with UE8M0 block scales), byte for byte what kernels/cpu/attn.c stores. */
#ifndef DSV4_KERNELS_CUDA_MODEL_COMMON_CUH
#define DSV4_KERNELS_CUDA_MODEL_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/model.h"
#include "kernels/cuda/status.cuh"

/* Every block-reducing kernel runs with this many threads, so a sum's tree never depends
 * on the launch. */
#define DSV4_CUDA_BLOCK 256

/* Sum of v over the block: per-warp butterflies, then warp 0 over the warp sums. The order
 * depends only on the thread index, so it is reproducible. Every thread gets the sum;
 * red needs 32 floats of shared memory. */
__device__ static inline float dsv4_block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float s = lane < blockDim.x / 32 ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* 1 / sqrt(mean(x^2) + eps) over n values, all threads taking part. */
__device__ static inline float dsv4_block_rms_scale(const float *x, uint32_t n, float eps,
                                                    float *red)
{
    float ss = 0.0f;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        ss = fmaf(x[i], x[i], ss);
    ss = dsv4_block_sum(ss, red);
    return 1.0f / sqrtf(ss / (float)n + eps);
}

/* Rotate pair i of x (the trailing rope slice) by pos * freq[i] (negated when inverse). */
__device__ static inline void dsv4_rope_pair(float *x, const float *freq, uint32_t i, float pos,
                                             bool inverse)
{
    float angle = pos * freq[i];
    float c = cosf(angle), s = sinf(angle);
    if (inverse)
        s = -s;
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
}

/* bf16 halves are read and written as 16-bit words (rows keep them 2-byte aligned), with
 * the conversion intrinsics' own bit casts. */
__device__ static inline float dsv4_bf16_load(const uint8_t *p)
{
    return __bfloat162float(__ushort_as_bfloat16(*(const uint16_t *)p));
}

__device__ static inline void dsv4_bf16_store(uint8_t *p, float v)
{
    *(uint16_t *)p = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* Value d of a stored row. */
__device__ static inline float dsv4_row_value(const uint8_t *row, dsv4_k_rowfmt f, uint32_t d)
{
    if (f.dtype == DSV4_K_F32)
        return ((const float *)row)[d];
    if (f.dtype == DSV4_K_BF16)
        return dsv4_bf16_load(row + 2 * (size_t)d);
    uint32_t nope = f.dims - f.rope;
    if (d >= nope)
        return dsv4_bf16_load(row + nope + 2 * (size_t)(d - nope));
    uint8_t e = row[nope + 2 * f.rope + d / DSV4_K_FP8_BLOCK];
    __half_raw h = __nv_cvt_fp8_to_halfraw(row[d], __NV_E4M3);
    return ldexpf(__half2float(__half(h)), (int)e - 127);
}

/* The scale exponent of one fp8 block (kernels/cpu/attn.c dsv4_fp8_block_exp). */
__device__ static inline int dsv4_fp8_block_exp(const float *x)
{
    float amax = 1e-4f;
    for (int i = 0; i < DSV4_K_FP8_BLOCK; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    if (isinf(amax))
        return 127;
    int k;
    float m = frexpf(amax, &k);
    int e = m <= 0.875f ? k - 9 : k - 8;
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* Store the row v (dims floats, readable by every thread) in f at dst; the block's threads
 * share the work, the caller synchronises before the row is read back. */
__device__ static inline void dsv4_row_store_block(uint8_t *dst, const float *v, dsv4_k_rowfmt f,
                                                   size_t row_bytes)
{
    if (f.dtype == DSV4_K_F32) {
        for (uint32_t d = threadIdx.x; d < f.dims; d += blockDim.x)
            ((float *)dst)[d] = v[d];
        return;
    }
    if (f.dtype == DSV4_K_BF16) {
        for (uint32_t d = threadIdx.x; d < f.dims; d += blockDim.x)
            dsv4_bf16_store(dst + 2 * (size_t)d, v[d]);
        return;
    }
    uint32_t nope = f.dims - f.rope, nb = nope / DSV4_K_FP8_BLOCK;
    for (uint32_t b = threadIdx.x; b < nb; b += blockDim.x) {
        const float *x = v + b * DSV4_K_FP8_BLOCK;
        int e = dsv4_fp8_block_exp(x);
        dst[nope + 2 * f.rope + b] = (uint8_t)(e + 127);
        /* scaling by a power of two is exact, so the only rounding is e4m3's */
        for (int i = 0; i < DSV4_K_FP8_BLOCK; i++)
            dst[b * DSV4_K_FP8_BLOCK + i] =
                (uint8_t)__nv_cvt_float_to_fp8(ldexpf(x[i], -e), __NV_SATFINITE, __NV_E4M3);
    }
    for (uint32_t i = threadIdx.x; i < f.rope; i += blockDim.x)
        dsv4_bf16_store(dst + nope + 2 * (size_t)i, v[nope + i]);
    for (size_t i = nope + 2 * (size_t)f.rope + nb + threadIdx.x; i < row_bytes; i += blockDim.x)
        dst[i] = 0;
}

#endif
