/* e4m3.cuh: e4m3 quantisation as plugins/indexk/fp8.c does it, shared by the index-K row
 * store (indexk_store.cu) and the e4m3 query of the scorer (indexer.cu), so that both match
 * the CPU plugin bit for bit (nvcc only). */
#ifndef DSV4_KERNELS_CUDA_E4M3_CUH
#define DSV4_KERNELS_CUDA_E4M3_CUH

#include <cuda_fp8.h>
#include <stdint.h>

/* The scale of a row (or query head) whose largest finite |value| is amax: max(amax, 1e-4)
 * / 448 by IEEE division (as the host's `/`), so the largest value lands on the top e4m3
 * code; with pow2 (scale_format = ue8m0) the smallest power of two >= that, as fp8.c's
 * fp8_pow2_ceil. */
__device__ static inline float dsv4_e4m3_scale(float amax, bool pow2)
{
    const float s = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
    if (!pow2)
        return s;
    int e;
    const float m = frexpf(s, &e); /* s = m 2^e, m in [0.5, 1) */
    return ldexpf(1.0f, m == 0.5f ? e - 1 : e);
}

/* The e4m3 bits of v: saturating to +-448, NaN as 0x7f for either sign (as
 * kernels/cpu/numfmt.c's dsv4_f32_to_e4m3). */
__device__ static inline uint32_t dsv4_e4m3_bits(float v)
{
    return isnan(v) ? 0x7fu : (uint32_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

#endif /* DSV4_KERNELS_CUDA_E4M3_CUH */
