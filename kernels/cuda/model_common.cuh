/* model_common.cuh: device helpers the forward kernels share (nvcc only): the block sum
 * with a fixed reduction tree, RoPE, and the KV row formats of kernels.h (f32, bf16, fp8
 * with UE8M0 block scales), byte for byte what kernels/cpu/attn.c stores. */
#ifndef DSV4_KERNELS_CUDA_MODEL_COMMON_CUH
#define DSV4_KERNELS_CUDA_MODEL_COMMON_CUH

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

/* The cosine and sine of rotary pair i at pos (the sine negated when inverse): every
 * rotation's angle, so a pair rotated by a thread or by two lanes gets the same bits. */
__device__ static inline void dsv4_rope_cs(const float *freq, uint32_t i, float pos, bool inverse,
                                           float *c_p, float *s_p)
{
    float angle = pos * freq[i];
    *c_p = cosf(angle);
    *s_p = inverse ? -sinf(angle) : sinf(angle);
}

/* Rotate pair i of x (the trailing rope slice) by pos * freq[i] (negated when inverse). */
__device__ static inline void dsv4_rope_pair(float *x, const float *freq, uint32_t i, float pos,
                                             bool inverse)
{
    float c, s;
    dsv4_rope_cs(freq, i, pos, inverse, &c, &s);
    float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * c - b * s;
    x[2 * i + 1] = a * s + b * c;
}

/* The bf16 bits of x, with kernels/cpu/numfmt.c's integer rounding (to nearest, ties to even;
 * NaN stays a quiet NaN), so device rows hold the CPU's bytes, NaN included. Integer
 * operations rather than __float2bfloat16_rn: with it (stored byte by byte) every bf16 half
 * came out one byte off the CPU's on the H200, cause not understood
 * (bench/results/2026-11-29-gpu-forward-h200.md). */
__device__ static inline uint32_t dsv4_bf16_bits(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x0040u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* A bf16 half of a row (rows keep them 2-byte aligned). */
__device__ static inline float dsv4_bf16_load(const uint8_t *p)
{
    return __uint_as_float((uint32_t) * (const uint16_t *)p << 16);
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

/* Byte i of row v encoded in f (bf16, or fp8 with the block exponents exps). */
__device__ static inline uint32_t dsv4_row_byte(const float *v, dsv4_k_rowfmt f, const int *exps,
                                                uint32_t i)
{
    if (f.dtype == DSV4_K_BF16) {
        uint32_t h = dsv4_bf16_bits(v[i / 2]);
        return i % 2 ? h >> 8 : h & 0xffu;
    }
    uint32_t nope = f.dims - f.rope, nb = nope / DSV4_K_FP8_BLOCK;
    if (i < nope) /* scaling by a power of two is exact, so the only rounding is e4m3's */
        return __nv_cvt_float_to_fp8(ldexpf(v[i], -exps[i / DSV4_K_FP8_BLOCK]), __NV_SATFINITE,
                                     __NV_E4M3);
    if (i < nope + 2 * f.rope) {
        uint32_t k = i - nope, h = dsv4_bf16_bits(v[nope + k / 2]);
        return k % 2 ? h >> 8 : h & 0xffu;
    }
    if (i < nope + 2 * f.rope + nb)
        return (uint32_t)(exps[i - nope - 2 * f.rope] + 127);
    return 0;
}

/* Store the row v (dims floats, readable by every thread) in f at dst (4-byte aligned, as
 * every row is: row sizes are multiples of 4). Every thread of the block calls it. Each
 * 32-bit word of the row is assembled and written by one thread, so no two threads ever
 * store into the same word; the caller synchronises before the row is read back. */
#define DSV4_ROW_MAX_BLOCKS 16 /* fp8 scale blocks of a 1024-dim row */
__device__ static inline void dsv4_row_store_block(uint8_t *dst, const float *v, dsv4_k_rowfmt f,
                                                   size_t row_bytes)
{
    __shared__ int exps[DSV4_ROW_MAX_BLOCKS];
    if (f.dtype == DSV4_K_F32) {
        for (uint32_t d = threadIdx.x; d < f.dims; d += blockDim.x)
            ((float *)dst)[d] = v[d];
        return;
    }
    if (f.dtype == DSV4_K_FP8) {
        uint32_t nb = (f.dims - f.rope) / DSV4_K_FP8_BLOCK;
        for (uint32_t b = threadIdx.x; b < nb && b < DSV4_ROW_MAX_BLOCKS; b += blockDim.x)
            exps[b] = dsv4_fp8_block_exp(v + b * DSV4_K_FP8_BLOCK);
        __syncthreads();
    }
    for (uint32_t w = threadIdx.x; w < row_bytes / 4; w += blockDim.x) {
        uint32_t word = 0;
        for (uint32_t j = 0; j < 4; j++)
            word |= dsv4_row_byte(v, f, exps, 4 * w + j) << (8 * j);
        ((uint32_t *)dst)[w] = word;
    }
}

#endif
