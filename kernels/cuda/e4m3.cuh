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

/* The e4m3 bits of x.x / s .. x.w / s (x.x in the low byte), each as dsv4_e4m3_bits(
 * __fdiv_rn(x, s)) gives it, for a normal s and inv = 1.0f / s (IEEE, as written): x inv
 * is two roundings (2^-24 relative each) from x / s and the IEEE quotient one, so the
 * quotient lies between x inv (1 - 2^-20) and x inv (1 + 2^-20) (an f32 subnormal x inv is
 * under e4m3's least half-step, as are both ends and the quotient); the saturating
 * conversion is monotonic, so where both ends give one code the quotient gives it. Four
 * values whose ends differ (a quotient near a rounding boundary) or give a NaN code (0x7f,
 * 0xff) are divided: some 20 instructions a division, more for tiny dividends, against the
 * handful a value here. */
__device__ static inline uint32_t dsv4_e4m3x4_quotient_bits(float4 x, float s, float inv)
{
    const float q[4] = {x.x * inv, x.y * inv, x.z * inv, x.w * inv};
    uint32_t ends[2];
    for (int e = 0; e < 2; e++) {
        const float m = e ? 1.0f + 0x1p-20f : 1.0f - 0x1p-20f;
        ends[e] = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(q[0] * m, q[1] * m),
                                                     __NV_SATFINITE, __NV_E4M3) |
                  (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(q[2] * m, q[3] * m),
                                                     __NV_SATFINITE, __NV_E4M3)
                      << 16;
    }
    const uint32_t nan_codes = ((ends[0] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    if (ends[0] == ends[1] && nan_codes == 0)
        return ends[0];
    return dsv4_e4m3_bits(__fdiv_rn(x.x, s)) | dsv4_e4m3_bits(__fdiv_rn(x.y, s)) << 8 |
           dsv4_e4m3_bits(__fdiv_rn(x.z, s)) << 16 | dsv4_e4m3_bits(__fdiv_rn(x.w, s)) << 24;
}

#endif /* DSV4_KERNELS_CUDA_E4M3_CUH */
