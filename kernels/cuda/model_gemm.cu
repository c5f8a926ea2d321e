/* model_gemm.cu: the linear layers of the CUDA forward (model.h): weights stored in the
 * checkpoint's formats (F32, BF16, block-scaled FP8, MXFP4) and the GEMMs that dequantise
 * them in registers: a streaming kernel on CUDA cores and a tensor-core kernel.
 *
 * The streaming kernel: a warp owns OW outputs and walks the input in chunks of
 * GEMM_CHUNK = 512, lane j taking the GEMM_SLICE = 16 consecutive inputs 16 j .. 16 j + 15
 * of each chunk (one 16-byte load of FP8, two of BF16, four of F32; eight bytes of FP4)
 * and accumulating them in ascending order, one fused multiply-add each, for each of the
 * R rows it carries; the 32 partial sums are then added by a fixed butterfly. That order
 * depends only on the input length: not on the row count, the rows' tiling, OW, R or the
 * weight's format, so an output's value depends only on its weight row and input row
 * (batch invariance by construction), and a weight stored as FP8 gives the bits the same
 * weight stored as its f32 values would. Each warp streams its OW weight rows once per R
 * rows; the R-row tiles of one output tile are neighbouring blocks of the launch, so a
 * step of up to a few hundred rows reads a weight from HBM once and its repeats from L2.
 * A one-row warp (batch 1) takes four outputs of a wide layer and loads chunks ahead, 128
 * bytes a lane in flight whatever the format.
 *
 * BF16, FP8 and MXFP4 weights run on tensor cores (below): in deterministic mode at every
 * row count, with a k split fixed by the weight's shape and the splits added in order
 * (batch-invariant by construction, like the streaming kernel, though not its bits); in
 * fast mode when a group has more than one row, split-K by the grid with atomics (grouped
 * BF16 weights on wgmma: a tile's splits in one block, in order). BF16 weights take wgmma
 * where the device code is built for sm_90a (model_gemm_wgmma.cu: weights streamed into
 * shared memory by TMA), the other formats, and BF16 elsewhere, mma.sync. Fast
 * mode hands long steps (prefill) of f32 weights to cuBLAS (fp32 SGEMM, pedantic math), and
 * of BF16 weights to its bf16 GEMM on the inputs' hi and lo parts (dsv4_gemm_blas_bf16);
 * cuBLAS picks its kernel, tile and split-K by the problem size: in fast mode a token's
 * output may change with the number of tokens in the step.
 */
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/evict_first.cuh"
#include "kernels/cuda/model_gemm.cuh"
#include "kernels/cuda/status.cuh"
#include "kernels/cuda/pdl.cuh"

#include <cuda_fp8.h>
#include <stdlib.h>

#define GEMM_WARPS 8                 /* warps per block */
#define GEMM_SLICE 16                /* consecutive inputs a lane takes per chunk */
#define GEMM_CHUNK (32 * GEMM_SLICE) /* inputs a warp covers per step of its walk */
#define GEMM_WIDE_OUTPUTS 16384      /* outputs (all groups) from which a warp takes four */
#define FP8_BLOCK 128                /* FP8 scale block (rows and inputs) */
#define FP4_GROUP 32                 /* MXFP4 scale group (inputs) */
#define PACK_THREADS 256
/* fast mode, one row, fewer outputs than that: the weight bytes from which k is split on the
 * tensor cores rather than streamed */
#define GEMM_SPLIT_ONE_ROW_BYTES ((size_t)8 << 20)
/* cuBLAS's workspace, given to it once (the size NVIDIA recommends for Hopper), so a step
 * captured into a CUDA graph never makes cuBLAS allocate one while capturing */
#define BLAS_WORKSPACE (32u << 20)
/* the deterministic tensor-core splits' sums (floats, 64 MiB): a step with more rows than
 * it holds runs in windows of rows, each window's splits added before the next starts */
#define MMA_PART_FLOATS ((size_t)16 << 20)

dsv4_cuda_blas *dsv4_cuda_blas_new(void *stream, bool deterministic)
{
    dsv4_cuda_blas *b = (dsv4_cuda_blas *)calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    if (cublasCreate(&b->handle) != CUBLAS_STATUS_SUCCESS) {
        free(b);
        return NULL;
    }
    b->stream = (cudaStream_t)stream;
    b->deterministic = deterministic;
    /* fp32 throughout: no TF32 tensor-op shortcut, so fast mode stays within fp32
     * rounding of the CPU reference */
    if (cublasSetStream(b->handle, b->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(b->handle, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&b->workspace, BLAS_WORKSPACE) != cudaSuccess ||
        cublasSetWorkspace(b->handle, b->workspace, BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS ||
        (deterministic &&
         cudaMalloc((void **)&b->part, MMA_PART_FLOATS * sizeof(float)) != cudaSuccess)) {
        dsv4_cuda_blas_free(b);
        return NULL;
    }
    /* the wgmma kernel where the device code has it and the driver hands out the tensor-map
     * encoder (queried here, never while a step is being captured) */
    b->encode = dsv4_wg_encoder();
    int dev = 0, sms = 0;
    if (b->encode &&
        (cudaMalloc(&b->split, WG_SPLIT_BYTES) != cudaSuccess ||
         cudaGetDevice(&dev) != cudaSuccess ||
         cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)) {
        dsv4_cuda_blas_free(b);
        return NULL;
    }
    b->sms = (uint32_t)sms;
    return b;
}

void dsv4_cuda_blas_free(dsv4_cuda_blas *b)
{
    if (!b)
        return;
    cublasDestroy(b->handle);
    cudaFree(b->workspace);
    cudaFree(b->part);
    cudaFree(b->split);
    free(b);
}

/* ---- element decoding: the same values as kernels/cpu/numfmt.c, exactly ------------------ */

__device__ static inline float dsv4_w_e4m3(uint8_t q)
{
    /* E4M3 -> half is exact (every E4M3 value is a half), then half -> float */
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
    return __half2float(__half(h));
}

__device__ static inline float dsv4_w_e2m1(uint32_t n)
{
    /* 0, 0.5, 1, 1.5, 2, 3, 4, 6: exponent field e (bias 1), mantissa bit m */
    uint32_t e = (n >> 1) & 3u, m = n & 1u;
    uint32_t bits = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3f000000u : 0u);
    return __uint_as_float(bits | ((n & 8u) << 28));
}

__device__ static inline float dsv4_w_e8m0(uint32_t b)
{
    /* 2^(b - 127); b = 0 is the subnormal 2^-127, b = 255 NaN */
    return b == 255u ? __uint_as_float(0x7fc00000u) : __uint_as_float(b ? b << 23 : 0x00400000u);
}

/* The 16 E2M1 values, looked up by the GEMM kernels (one shared-memory read a nibble
 * instead of its decode; the same values): dsv4_w_e2m1_table fills it. */
__shared__ float dsv4_w_e2m1_lut[16];

/* Fill the block's E2M1 table (an MXFP4 kernel, before its first barrier). */
template <int F> __device__ static inline void dsv4_w_e2m1_table(void)
{
    if (F == DSV4_CUDA_W_FP4 && threadIdx.x < 16)
        dsv4_w_e2m1_lut[threadIdx.x] = dsv4_w_e2m1(threadIdx.x);
}

__device__ static inline float dsv4_w_bf16(uint32_t h)
{
    return __uint_as_float(h << 16);
}

/* Where matrix g's weights of one format start and how a slice is read. */
struct dsv4_wdev {
    const uint8_t *data, *scale;
};

/* Weights k + 4 q .. k + 4 q + 3 of output row o of matrix g, those below k + cnt, read
 * one element at a time (k a multiple of GEMM_SLICE, so one scale covers them). */
template <int F>
__device__ static inline void dsv4_w_quarter(dsv4_wdev W, size_t g, size_t o, size_t out, size_t in,
                                             size_t k, uint32_t q, uint32_t cnt, float (&w)[4])
{
    size_t e0 = (g * out + o) * in + k + 4 * q; /* element index of w[0] */
    float s = 1.0f;
    if (F == DSV4_CUDA_W_FP8) {
        size_t sr = (out + FP8_BLOCK - 1) / FP8_BLOCK, sc = (in + FP8_BLOCK - 1) / FP8_BLOCK;
        s = __ldg((const float *)W.scale + (g * sr + o / FP8_BLOCK) * sc + k / FP8_BLOCK);
    } else if (F == DSV4_CUDA_W_FP4) {
        s = dsv4_w_e8m0(__ldg(W.scale + (g * out + o) * (in / FP4_GROUP) + k / FP4_GROUP));
    }
#pragma unroll
    for (uint32_t e = 0; e < 4; e++) {
        size_t i = e0 + e;
        w[e] = 0.0f;
        if (4 * q + e >= cnt)
            continue;
        if (F == DSV4_CUDA_W_F32)
            w[e] = __ldg((const float *)W.data + i);
        else if (F == DSV4_CUDA_W_BF16)
            w[e] = dsv4_w_bf16(__ldg((const uint16_t *)W.data + i));
        else if (F == DSV4_CUDA_W_FP8)
            w[e] = dsv4_w_e4m3(__ldg(W.data + i)) * s;
        else
            w[e] = dsv4_w_e2m1_lut[(__ldg(W.data + i / 2) >> (4 * (i % 2))) & 0xfu] * s;
    }
}

/* One output's slice of GEMM_SLICE weights as loaded (16-byte loads; F32 is read a
 * quarter at a time instead, to spare registers), dequantised four at a time. */
template <int F> struct dsv4_wq {
    uint32_t u[F == DSV4_CUDA_W_BF16 ? 8 : F == DSV4_CUDA_W_FP8 ? 4 : 2];
    const float *p;
    float s;
};

template <int F>
__device__ static inline void dsv4_wq_load(dsv4_wdev W, size_t g, size_t o, size_t out, size_t in,
                                           size_t k, dsv4_wq<F> &r)
{
    size_t e0 = (g * out + o) * in + k;
    if (F == DSV4_CUDA_W_F32) {
        r.p = (const float *)W.data + e0;
    } else if (F == DSV4_CUDA_W_BF16) {
        const uint4 *p = (const uint4 *)((const uint16_t *)W.data + e0);
        uint4 a = dsv4_ld_once16(p), b = dsv4_ld_once16(p + 1);
        r.u[0] = a.x, r.u[1] = a.y, r.u[2] = a.z, r.u[3] = a.w;
        r.u[4] = b.x, r.u[5] = b.y, r.u[6] = b.z, r.u[7] = b.w;
    } else if (F == DSV4_CUDA_W_FP8) {
        uint4 a = dsv4_ld_once16(W.data + e0);
        r.u[0] = a.x, r.u[1] = a.y, r.u[2] = a.z, r.u[3] = a.w;
        size_t sr = (out + FP8_BLOCK - 1) / FP8_BLOCK, sc = (in + FP8_BLOCK - 1) / FP8_BLOCK;
        r.s = __ldg((const float *)W.scale + (g * sr + o / FP8_BLOCK) * sc + k / FP8_BLOCK);
    } else {
        uint2 a = dsv4_ld_once8(W.data + e0 / 2);
        r.u[0] = a.x, r.u[1] = a.y;
        r.s = dsv4_w_e8m0(__ldg(W.scale + (g * out + o) * (in / FP4_GROUP) + k / FP4_GROUP));
    }
}

/* Weights 4 q .. 4 q + 3 of the slice (q a constant after unrolling). */
template <int F>
__device__ static inline void dsv4_wq_quarter(const dsv4_wq<F> &r, uint32_t q, float (&w)[4])
{
    if (F == DSV4_CUDA_W_F32) {
        uint4 v = dsv4_ld_once16((const float4 *)r.p + q);
        w[0] = __uint_as_float(v.x), w[1] = __uint_as_float(v.y);
        w[2] = __uint_as_float(v.z), w[3] = __uint_as_float(v.w);
    } else if (F == DSV4_CUDA_W_BF16) {
        w[0] = dsv4_w_bf16(r.u[2 * q] & 0xffffu), w[1] = dsv4_w_bf16(r.u[2 * q] >> 16);
        w[2] = dsv4_w_bf16(r.u[2 * q + 1] & 0xffffu), w[3] = dsv4_w_bf16(r.u[2 * q + 1] >> 16);
    } else if (F == DSV4_CUDA_W_FP8) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[e] = dsv4_w_e4m3((uint8_t)(r.u[q] >> (8 * e))) * r.s;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[e] = dsv4_w_e2m1_lut[(r.u[q / 2] >> (16 * (q % 2) + 4 * e)) & 0xfu] * r.s;
    }
}

/* Y[r][o] for the OW outputs of this warp (block y, warp) and the rows of group
 * blockIdx.z: rows off[g] .. off[g + 1] of X and Y (grouped), or the g-th problem at
 * X + g * xz, Y + g * yz (batched, off NULL), matrix g of W either way. Block x takes row
 * tiles x, x + gridDim.x, ... of R rows. A lane's slice is used four inputs at a time,
 * each input's float4 shared by the OW outputs. No block-wide barrier: a warp with nothing
 * to do leaves. */
template <int F, uint32_t OW, uint32_t R>
__global__ static void __launch_bounds__(GEMM_WARPS * 32, (OW * R) > 32 ? 1 : 2)
    dsv4_gemm_kernel(dsv4_wdev W, size_t out, size_t in, const float *__restrict__ x, size_t xs,
                     size_t xz, const uint32_t *__restrict__ off, uint32_t n_dense,
                     float *__restrict__ y, size_t ys, size_t yz, bool vec)
{
    dsv4_pdl_begin();
    /* chunks a one-row warp loads ahead: 128 bytes of weights a lane in flight (F32 reads
     * a quarter at a time, so one chunk: two measured slower on a narrow layer) */
    constexpr uint32_t SB = F == DSV4_CUDA_W_BF16 ? 32 : F == DSV4_CUDA_W_FP8 ? 16 : 8;
    constexpr uint32_t U = R > 1 || F == DSV4_CUDA_W_F32 || OW * SB >= 128 ? 1 : 128 / (OW * SB);
    uint32_t g = blockIdx.z, lane = threadIdx.x % 32;
    uint32_t r0 = off ? off[g] : 0, rows = off ? off[g + 1] - off[g] : n_dense;
    size_t o0 = ((size_t)blockIdx.y * GEMM_WARPS + threadIdx.x / 32) * OW;
    dsv4_w_e2m1_table<F>();
    if (F == DSV4_CUDA_W_FP4)
        __syncthreads();
    if (o0 >= out)
        return;
    x += off ? (size_t)r0 * xs : (size_t)g * xz;
    y += off ? (size_t)r0 * ys : (size_t)g * yz;
    for (uint32_t tr = blockIdx.x * R; tr < rows; tr += gridDim.x * R) {
        uint32_t nr = rows - tr < R ? rows - tr : R;
        const float *xt = x + (size_t)tr * xs;
        float acc[OW][R];
#pragma unroll
        for (uint32_t i = 0; i < OW; i++)
#pragma unroll
            for (uint32_t r = 0; r < R; r++)
                acc[i][r] = 0.0f;
        /* U chunks' weights are loaded before any is used: a one-output warp keeps that
         * many 16-byte loads in flight */
        for (size_t c0 = 0; c0 < in; c0 += U * GEMM_CHUNK) {
            dsv4_wq<F> wr[U][OW];
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                size_t k = c0 + u * GEMM_CHUNK + (size_t)GEMM_SLICE * lane;
                if (vec && k + GEMM_SLICE <= in)
#pragma unroll
                    for (uint32_t i = 0; i < OW; i++)
                        dsv4_wq_load<F>(W, g, o0 + i < out ? o0 + i : o0, out, in, k, wr[u][i]);
            }
#pragma unroll
            for (uint32_t u = 0; u < U; u++) {
                size_t k = c0 + u * GEMM_CHUNK + (size_t)GEMM_SLICE * lane;
                if (k >= in)
                    break;
                uint32_t cnt = in - k < GEMM_SLICE ? (uint32_t)(in - k) : GEMM_SLICE;
                if (vec && cnt == GEMM_SLICE) {
#pragma unroll
                    for (uint32_t q = 0; q < GEMM_SLICE / 4; q++) {
                        float w[OW][4];
#pragma unroll
                        for (uint32_t i = 0; i < OW; i++)
                            dsv4_wq_quarter<F>(wr[u][i], q, w[i]);
#pragma unroll
                        for (uint32_t r = 0; r < R; r++)
                            if (r < nr) {
                                float4 xv = __ldg((const float4 *)(xt + r * xs + k) + q);
#pragma unroll
                                for (uint32_t i = 0; i < OW; i++) {
                                    acc[i][r] = fmaf(xv.x, w[i][0], acc[i][r]);
                                    acc[i][r] = fmaf(xv.y, w[i][1], acc[i][r]);
                                    acc[i][r] = fmaf(xv.z, w[i][2], acc[i][r]);
                                    acc[i][r] = fmaf(xv.w, w[i][3], acc[i][r]);
                                }
                            }
                    }
                } else {
                    /* the same order one element at a time (unaligned rows, the input's tail) */
#pragma unroll
                    for (uint32_t q = 0; q < GEMM_SLICE / 4; q++) {
                        float w[OW][4];
#pragma unroll
                        for (uint32_t i = 0; i < OW; i++)
                            dsv4_w_quarter<F>(W, g, o0 + i < out ? o0 + i : o0, out, in, k, q, cnt,
                                              w[i]);
#pragma unroll
                        for (uint32_t e = 0; e < 4; e++)
#pragma unroll
                            for (uint32_t r = 0; r < R; r++)
                                if (4 * q + e < cnt && r < nr) {
                                    float xv = __ldg(xt + r * xs + k + 4 * q + e);
#pragma unroll
                                    for (uint32_t i = 0; i < OW; i++)
                                        acc[i][r] = fmaf(xv, w[i][e], acc[i][r]);
                                }
                    }
                }
            }
        }
#pragma unroll
        for (uint32_t i = 0; i < OW; i++)
#pragma unroll
            for (uint32_t r = 0; r < R; r++) {
                /* the fixed tree: every lane ends with the same sum (a + b == b + a) */
                for (uint32_t m = 16; m > 0; m /= 2)
                    acc[i][r] += __shfl_xor_sync(0xffffffffu, acc[i][r], m);
                if (lane == (i * R + r) % 32 && r < nr && o0 + i < out)
                    y[(size_t)(tr + r) * ys + o0 + i] = acc[i][r];
            }
    }
}

/* One launch of the warp shape <OW, R>: output tiles of GEMM_WARPS * OW on y, groups on
 * z, row tiles on x (at most GEMM_ROW_SPLIT blocks; each walks its tiles in turn). */
template <int F, uint32_t OW, uint32_t R>
static int dsv4_gemm_shape(cudaStream_t st, dsv4_wdev W, size_t out, size_t in, const float *x,
                           size_t xs, size_t xz, const uint32_t *off, uint32_t groups,
                           uint32_t rows_each, uint32_t n_dense, float *y, size_t ys, size_t yz,
                           bool vec)
{
    uint32_t tiles = (rows_each + R - 1) / R;
    dim3 grid(tiles < GEMM_ROW_SPLIT ? tiles : GEMM_ROW_SPLIT,
              (unsigned)((out + GEMM_WARPS * OW - 1) / (GEMM_WARPS * OW)), groups);
    if (grid.y > 65535 || grid.z > 65535)
        return -EINVAL;
    return dsv4_pdl_launch(dsv4_gemm_kernel<F, OW, R>, grid, GEMM_WARPS * 32, 0, st, W, out, in, x,
                           xs, xz, off, n_dense, y, ys, yz, vec);
}

/* The warp shape by the rows a group holds (rows_each: the dense row count, or a
 * grouped step's average doubled): one row a warp for a batch-1 step, with one output so
 * a narrow layer's outputs spread over the most warps; more rows and outputs as rows
 * share weight loads. The results are the same whichever shape runs. */
template <int F>
static int dsv4_gemm_format(cudaStream_t st, dsv4_wdev W, size_t out, size_t in, const float *x,
                            size_t xs, size_t xz, const uint32_t *off, uint32_t groups,
                            uint32_t rows_each, uint32_t n_dense, float *y, size_t ys, size_t yz,
                            bool vec)
{
    /* one row: four outputs a warp where that still leaves a few blocks per SM, so a warp
     * has enough weight bytes to hide its fixed costs */
    if (rows_each <= 1 && out * groups >= GEMM_WIDE_OUTPUTS)
        return dsv4_gemm_shape<F, 4, 1>(st, W, out, in, x, xs, xz, off, groups, rows_each, n_dense,
                                        y, ys, yz, vec);
    if (rows_each <= 1)
        return dsv4_gemm_shape<F, 1, 1>(st, W, out, in, x, xs, xz, off, groups, rows_each, n_dense,
                                        y, ys, yz, vec);
    if (rows_each <= 4)
        return dsv4_gemm_shape<F, 2, 4>(st, W, out, in, x, xs, xz, off, groups, rows_each, n_dense,
                                        y, ys, yz, vec);
    return dsv4_gemm_shape<F, 4, 8>(st, W, out, in, x, xs, xz, off, groups, rows_each, n_dense, y,
                                    ys, yz, vec);
}

/* ---- tensor cores --------------------------------------------------------------------------
 *
 * For BF16, FP8 and MXFP4 weights, whose values are all exact in bf16 (an E4M3 or E2M1 code
 * times a power of two has at most 4 significant bits), mma.sync m16n8k16 bf16 with f32
 * accumulation: the weight exactly, each input as the sum of two bf16 (hi + lo, 16
 * significant bits), two MMAs per tile, so a product is off the f32 one by about 2^-17 of
 * the input. A warp owns 16 outputs; a block of GEMM_WARPS warps shares a tile of MMA_TOK
 * rows x MMA_KB inputs staged in shared memory as hi/lo pairs, or, for tiles of up to 16
 * rows, each thread splits the inputs of its own fragments (no staging, no barriers; the
 * warps share the inputs through L1).
 * Thread (g = lane / 4, t = lane % 4) reads 16 inputs of its weight rows g and g + 8 per k
 * block (dsv4_mma_q: one 16-byte FP8 load, two of BF16) and feeds their quarter j to MMA j
 * as its fragment's k slots 2t, 2t+1, 2t+8, 2t+9; its B fragment maps the same slots to
 * the same inputs, so the dot products are unchanged.
 *
 * Batch invariance: an MMA's output element depends only on its weight row, its input row
 * and its accumulator, so an output's bits are fixed by the sequence of MMAs that build it:
 * the k blocks of its k split in ascending order, hi then lo, each split from zero, and the
 * splits' sums added in split order. Deterministic mode takes the split from the weight's
 * shape alone (dsv4_mma_ksplit); a launch writes each split's sums to the workspace and a
 * second kernel adds them (H200, 64 rows: wo_b 91 -> 50 us against the tile's last block
 * adding them alone), or, wide enough unsplit, one block takes a tile's splits in turn
 * and adds them the same way. The row count, the rows' tiling, the grid and the group
 * sizes never enter, and it runs every row count, one row included (steps of up to 16
 * rows a group take kernels that read the inputs directly, larger ones stage them: the
 * MMAs are the same).
 * Fast mode splits k by the grid instead (its row tiles) and adds the splits with atomics,
 * so its bits may change with the row count and from run to run. */
#define MMA_KB 64  /* inputs per k block */
#define MMA_TOK 64 /* rows per pass (8 n tiles of 8) */
/* blocks a launch should have (two per SM of an H100 or H200) before it splits k */
#define MMA_BLOCKS_WANTED 264
/* k blocks a split takes at least (a shorter one spends its time filling its pipeline,
 * and each split is sums to write and add) */
#define MMA_SPLIT_KB 8
/* the same for deterministic mode's split, fixed by the weight's shape: a narrow layer
 * (wq_a 4096 -> 1024: 8 output tiles) takes 16 splits, 128 blocks at one row (H200: one
 * row 11.7 -> 9.6 us, 16..64 rows 14.8..18.2 -> 11.0..13.6 us, 256 rows 26 -> 30 us) */
#define MMA_FIXED_SPLIT_KB 4
/* unsplit blocks (row tiles x output tiles x problems) from which a deterministic launch
 * takes each row tile's splits in one block rather than one block a split: its sums need
 * no workspace (H200: wq_b 1024 -> 32768, 256 output tiles, split in 2: 256 rows
 * 189 -> 155 us, 64 rows 55 -> 44; wo_a at 256 rows 190 -> 152). Grouped weights keep a
 * block a split on mma.sync (experts at 256 rows: 242 us split, 285 whole); on wgmma they
 * take a tile's splits in one block at every row count (8 experts 4096 -> 2048, 2 splits:
 * 0.86-0.92x the time at 1-256 rows, no sum kernel). */
#define MMA_WHOLE_BLOCKS 256
/* matrices of a grouped weight a one-row step is taken to run (the experts a token routes
 * to: DeepSeek-V4 takes 6) */
#define MMA_GROUPS_RUN 8

/* The 16 weights of a row that dsv4_wq_load read raw, as 8 bf16 pairs (exact). */
template <int F> __device__ static inline void dsv4_mma_pairs(const dsv4_wq<F> &r, uint32_t (&a)[8])
{
    if constexpr (F == DSV4_CUDA_W_BF16) {
#pragma unroll
        for (uint32_t i = 0; i < 8; i++)
            a[i] = r.u[i];
    } else {
#pragma unroll
        for (uint32_t q = 0; q < 4; q++) {
            float w[4];
            dsv4_wq_quarter<F>(r, q, w);
            a[2 * q] = dsv4_bf16x2(w[0], w[1]);
            a[2 * q + 1] = dsv4_bf16x2(w[2], w[3]);
        }
    }
}

__device__ static inline void dsv4_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The four MMA_KB / 16 steps of one k block on one n tile: weights wa (row g), wb (row
 * g + 8), inputs b[j] for MMA j; hi then lo. Every path runs this sequence. */
__device__ static inline void dsv4_mma_kblock(float (&c)[4], const uint32_t (&wa)[8],
                                              const uint32_t (&wb)[8], uint32_t j, uint4 b)
{
    dsv4_mma(c, wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], b.x, b.y);
    dsv4_mma(c, wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], b.z, b.w);
}

/* Where record c (inputs 4c .. 4c + 3) of tile row r sits in its shared-memory row: the
 * eight lanes of a quarter warp read records 4 t + j of rows g and g + 1 (t = 0..3), which
 * would share two of the eight 16-byte bank groups; flipping bits 0 and 1 of c by the row's
 * parity and by c / 8 spreads them over all eight. */
__device__ static inline uint32_t dsv4_mma_col(uint32_t r, uint32_t c)
{
    return c ^ (r & 1u) ^ (((c >> 3) & 1u) << 1);
}

/* Records (4 inputs of one row) of the MMA_TOK x MMA_KB input tile a thread stages */
#define MMA_XREC (MMA_TOK * MMA_KB / 4 / (GEMM_WARPS * 32))

/* This thread's records of the input tile at rows tr.., inputs k0..: zeros past nr rows. */
__device__ static inline void dsv4_mma_xload(const float *__restrict__ x, size_t xs, uint32_t tr,
                                             uint32_t nr, size_t k0, float4 (&xr)[MMA_XREC])
{
#pragma unroll
    for (uint32_t i = 0; i < MMA_XREC; i++) {
        uint32_t rec = threadIdx.x + i * GEMM_WARPS * 32;
        uint32_t r = rec / (MMA_KB / 4), q = rec % (MMA_KB / 4);
        xr[i] = r < nr ? __ldg((const float4 *)(x + (size_t)(tr + r) * xs + k0) + q)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* Where quarter j (inputs 4 j .. 4 j + 3 of thread t's 16, MMA j's k slots) sits in a k
 * block: BF16 as two runs of 8 inputs (inputs 8 t .. and 32 + 8 t ..: each 16-byte load of
 * the four threads of a row then reads whole 32-byte sectors), the other formats as one
 * run of 16 (16 t ..: one 16-byte load of FP8, 8 bytes of MXFP4). */
template <int F> __device__ static inline uint32_t dsv4_mma_q(uint32_t t, uint32_t j)
{
    return F == DSV4_CUDA_W_BF16 ? 32 * (j / 2) + 8 * t + 4 * (j % 2) : 16 * t + 4 * j;
}

/* Thread t's 16 weights of row o in the k block at k0, raw (dsv4_mma_q's inputs). */
template <int F>
__device__ static inline void dsv4_mma_wload(dsv4_wdev W, size_t g, size_t o, size_t out, size_t in,
                                             size_t k0, dsv4_wq<F> &r)
{
    uint32_t t = threadIdx.x % 4;
    if (F == DSV4_CUDA_W_BF16) {
        const uint16_t *p = (const uint16_t *)W.data + (g * out + o) * in + k0 + 8 * t;
        uint4 a = dsv4_ld_once16(p), b = dsv4_ld_once16(p + 32);
        r.u[0] = a.x, r.u[1] = a.y, r.u[2] = a.z, r.u[3] = a.w;
        r.u[4] = b.x, r.u[5] = b.y, r.u[6] = b.z, r.u[7] = b.w;
    } else {
        dsv4_wq_load<F>(W, g, o, out, in, k0 + 16 * t, r);
    }
}

/* Walk k blocks kbeg .. kend of weight rows oa and ob (this thread's 16 inputs of each),
 * calling body(k0, wa, wb) per block in ascending order with the block's weights as bf16
 * pairs. The weights are loaded raw D blocks ahead and decoded when their block comes. */
template <int F, uint32_t D, typename Body>
__device__ static inline void dsv4_mma_walk(dsv4_wdev W, size_t g, size_t oa, size_t ob, size_t out,
                                            size_t in, size_t kbeg, size_t kend, Body body)
{
    dsv4_wq<F> ra[D], rb[D];
#pragma unroll
    for (uint32_t u = 0; u < D; u++)
        if (kbeg + u * MMA_KB < kend) {
            dsv4_mma_wload<F>(W, g, oa, out, in, kbeg + u * MMA_KB, ra[u]);
            dsv4_mma_wload<F>(W, g, ob, out, in, kbeg + u * MMA_KB, rb[u]);
        }
    for (size_t k0 = kbeg; k0 < kend; k0 += D * MMA_KB)
#pragma unroll
        for (uint32_t u = 0; u < D; u++) {
            size_t kb = k0 + u * MMA_KB;
            if (kb >= kend)
                break;
            uint32_t wa[8], wb[8];
            dsv4_mma_pairs<F>(ra[u], wa);
            dsv4_mma_pairs<F>(rb[u], wb);
            if (kb + D * MMA_KB < kend) {
                dsv4_mma_wload<F>(W, g, oa, out, in, kb + D * MMA_KB, ra[u]);
                dsv4_mma_wload<F>(W, g, ob, out, in, kb + D * MMA_KB, rb[u]);
            }
            body(kb, wa, wb);
        }
}

/* BF16 weights of the tiles of up to 8 rows stream through a ring of MMA_RING k blocks a
 * thread in shared memory (cp.async: 96 bytes a row in flight without the registers to hold
 * them, and fewer registers, so the kernel keeps more loads in flight: H200, one row, head
 * 293 -> 277 us, experts 44 -> 41; tiles of 16 rows were slower with it) */
#define MMA_RING 4
#define MMA_RING_BYTES (MMA_RING * 4 * GEMM_WARPS * 32 * 16)

/* As dsv4_mma_walk for BF16 weights, the raw weights MMA_RING - 1 blocks ahead in ring
 * (4 records of 16 bytes a thread and slot: row oa's two halves, then ob's). A thread reads
 * only what it copied: no barrier. */
template <typename Body>
__device__ static inline void dsv4_mma_walk_ring(dsv4_wdev W, size_t g, size_t oa, size_t ob,
                                                 size_t out, size_t in, size_t kbeg, size_t kend,
                                                 uint4 *ring, Body body)
{
    constexpr uint32_t T = GEMM_WARPS * 32;
    uint32_t t = threadIdx.x % 4;
    uint32_t q0 = dsv4_mma_q<DSV4_CUDA_W_BF16>(t, 0), h2 = dsv4_mma_q<DSV4_CUDA_W_BF16>(t, 2) - q0;
    const uint16_t *pa = (const uint16_t *)W.data + (g * out + oa) * in + q0;
    const uint16_t *pb = (const uint16_t *)W.data + (g * out + ob) * in + q0;
    ring += threadIdx.x;
    auto issue = [&](size_t kb, uint32_t slot) {
        uint4 *d = ring + slot * 4 * T;
        dsv4_cp_async16_once(d, pa + kb);
        dsv4_cp_async16_once(d + T, pa + kb + h2);
        dsv4_cp_async16_once(d + 2 * T, pb + kb);
        dsv4_cp_async16_once(d + 3 * T, pb + kb + h2);
    };
#pragma unroll
    for (uint32_t u = 0; u + 1 < MMA_RING; u++) {
        if (kbeg + u * MMA_KB < kend)
            issue(kbeg + u * MMA_KB, u);
        dsv4_cp_async_commit();
    }
    uint32_t slot = 0;
    for (size_t kb = kbeg; kb < kend; kb += MMA_KB) {
        size_t kn = kb + (MMA_RING - 1) * MMA_KB;
        if (kn < kend)
            issue(kn, slot ? slot - 1 : MMA_RING - 1);
        dsv4_cp_async_commit();
        dsv4_cp_async_wait<MMA_RING - 1>();
        const uint4 *d = ring + slot * 4 * T;
        uint4 a0 = d[0], a1 = d[T], b0 = d[2 * T], b1 = d[3 * T];
        uint32_t wa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        uint32_t wb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
        body(kb, wa, wb);
        slot = slot + 1 == MMA_RING ? 0 : slot + 1;
    }
}

/* Stage records xr (dsv4_mma_xload's) into xt as hi/lo pairs. */
__device__ static inline void dsv4_mma_stage(const float4 (&xr)[MMA_XREC], uint4 (*xt)[MMA_KB / 4])
{
#pragma unroll
    for (uint32_t i = 0; i < MMA_XREC; i++) {
        uint32_t rec = threadIdx.x + i * GEMM_WARPS * 32, r = rec / (MMA_KB / 4);
        xt[r][dsv4_mma_col(r, rec % (MMA_KB / 4))] = dsv4_mma_split(xr[i]);
    }
}

/* acc += the tile of rows tr .. tr + nr (nr > 8) over k blocks kbeg .. kend, the inputs
 * staged through xt[2] (every warp of the block takes part: barriers). Block i computes
 * from xt[i % 2] while block i + 1 is staged into the other and block i + 2's inputs
 * load: one barrier a block. */
template <int F>
__device__ static inline void
dsv4_mma_tile(dsv4_wdev W, size_t g, size_t oa, size_t ob, size_t out, size_t in,
              const float *__restrict__ x, size_t xs, uint32_t tr, uint32_t nr, size_t kbeg,
              size_t kend, uint4 (*xt)[MMA_TOK][MMA_KB / 4], float (&acc)[MMA_TOK / 8][4])
{
    uint32_t gi = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    float4 xr[MMA_XREC];
    dsv4_mma_xload(x, xs, tr, nr, kbeg, xr);
    dsv4_mma_stage(xr, xt[0]);
    if (kbeg + MMA_KB < kend)
        dsv4_mma_xload(x, xs, tr, nr, kbeg + MMA_KB, xr);
    __syncthreads();
    /* weights one k block ahead: the tile's sums take the registers for more */
    dsv4_mma_walk<F, 1>(
        W, g, oa, ob, out, in, kbeg, kend,
        [&](size_t k0, const uint32_t(&wa)[8], const uint32_t(&wb)[8]) {
            uint32_t cur = (uint32_t)((k0 - kbeg) / MMA_KB) & 1u;
#pragma unroll
            for (uint32_t j = 0; j < MMA_KB / 16; j++)
#pragma unroll
                for (uint32_t n = 0; n < MMA_TOK / 8; n++)
                    if (n * 8 < nr)
                        dsv4_mma_kblock(
                            acc[n], wa, wb, j,
                            xt[cur][n * 8 + gi][dsv4_mma_col(gi, dsv4_mma_q<F>(t, j) / 4)]);
            if (k0 + MMA_KB < kend) {
                dsv4_mma_stage(xr, xt[cur ^ 1u]);
                if (k0 + 2 * MMA_KB < kend)
                    dsv4_mma_xload(x, xs, tr, nr, k0 + 2 * MMA_KB, xr);
            }
            __syncthreads();
        });
}

/* acc += the tile of rows tr .. tr + nr (nr <= 8 NT) over k blocks kbeg .. kend, each
 * thread reading and splitting its own fragments' inputs (no staging, no barriers: the
 * block's warps share the inputs through L1), the weights D k blocks ahead. */
template <int F, uint32_t D, uint32_t NT, bool RING>
__device__ static inline void
dsv4_mma_tile_direct(dsv4_wdev W, size_t g, size_t oa, size_t ob, size_t out, size_t in,
                     const float *__restrict__ x, size_t xs, uint32_t tr, uint32_t nr, size_t kbeg,
                     size_t kend, uint4 *ring, float (&acc)[MMA_TOK / 8][4])
{
    uint32_t gi = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const float4 *xp[NT];
#pragma unroll
    for (uint32_t n = 0; n < NT; n++)
        xp[n] = n * 8 + gi < nr ? (const float4 *)(x + (size_t)(tr + n * 8 + gi) * xs) : NULL;
    auto body = [&](size_t k0, const uint32_t(&wa)[8], const uint32_t(&wb)[8]) {
#pragma unroll
        for (uint32_t n = 0; n < NT; n++) {
            if (n * 8 >= nr)
                break;
            float4 xa[4];
#pragma unroll
            for (uint32_t j = 0; j < 4; j++)
                xa[j] = xp[n] ? __ldg(xp[n] + (k0 + dsv4_mma_q<F>(t, j)) / 4)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (uint32_t j = 0; j < MMA_KB / 16; j++)
                dsv4_mma_kblock(acc[n], wa, wb, j, dsv4_mma_split(xa[j]));
        }
    };
    if constexpr (RING)
        dsv4_mma_walk_ring(W, g, oa, ob, out, in, kbeg, kend, ring, body);
    else
        dsv4_mma_walk<F, D>(W, g, oa, ob, out, in, kbeg, kend, body);
}

/* fn(output, row in the tile, sum) for each of this thread's sums in acc's first NT n
 * tiles: acc[n][e] is row n * 8 + 2 t + (e & 1), output o0 + g (+ 8 from e = 2). */
template <uint32_t NT, typename Fn>
__device__ static inline void dsv4_mma_each(float (&acc)[MMA_TOK / 8][4], size_t o0, size_t out,
                                            uint32_t nr, Fn fn)
{
    uint32_t gi = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (uint32_t n = 0; n < NT; n++)
#pragma unroll
        for (uint32_t e = 0; e < 4; e++) {
            size_t o = o0 + gi + (e >= 2 ? 8 : 0);
            uint32_t r = n * 8 + 2 * t + (e & 1);
            if (o < out && r < nr)
                fn(o, r, acc[n][e]);
        }
}

/* As dsv4_gemm_kernel (groups on z, GEMM_WARPS * 16 outputs a block on y), rows per R; in %
 * MMA_KB == 0 and 16-byte aligned rows. Block x takes the k blocks of split x % ksplit and
 * row tiles x / ksplit, x / ksplit + gridDim.x / ksplit, ... of its group's rows. With a
 * workspace, each split's sums go there (dsv4_mma_sum_kernel adds them). NT > 0: tiles of 8 NT
 * rows, inputs read directly (dsv4_mma_tile_direct); NT = 0: tiles of MMA_TOK rows, those of more
 * than 8 staged through shared memory. The bits are the same either way. */
template <int F, uint32_t NT, bool WHOLE>
__global__ static void __launch_bounds__(GEMM_WARPS * 32, 2)
    dsv4_mma_kernel(dsv4_wdev W, size_t out, size_t in, const float *__restrict__ x, size_t xs,
                    size_t xz, dsv4_mma_rows R, float *__restrict__ y, size_t ys, size_t yz)
{
    dsv4_pdl_begin();
    /* two input tiles, [row][input group of 4]: hi[4] then lo[4] as bf16 (16 bytes) */
    __shared__ uint4 xt[2][MMA_TOK][MMA_KB / 4];
    extern __shared__ uint4 dsv4_mma_ring[];
    dsv4_w_e2m1_table<F>();
    if (F == DSV4_CUDA_W_FP4)
        __syncthreads();
    uint32_t g = blockIdx.z, gi = threadIdx.x % 32 / 4;
    uint32_t lo = R.w0, hi = R.w1;
    if (R.off) {
        lo = R.off[g] > lo ? R.off[g] : lo;
        hi = R.off[g + 1] < hi ? R.off[g + 1] : hi;
    } else {
        x += (size_t)g * xz;
        y += (size_t)g * yz;
    }
    size_t o0 = ((size_t)blockIdx.y * GEMM_WARPS + threadIdx.x / 32) * 16;
    /* every warp stays for the barriers; one past the outputs reads a valid row */
    size_t oa = o0 + gi < out ? o0 + gi : out - 1, ob = o0 + gi + 8 < out ? o0 + gi + 8 : out - 1;
    size_t kbs = in / MMA_KB;
    uint32_t s0 = blockIdx.x % R.kgrid; /* the split of this block (WHOLE: all) */
    /* split s's sums of problem g (batched) or of every group's rows: part + s * pstride */
    size_t wn = R.w1 - R.w0, pstride = (size_t)(R.off ? 1 : gridDim.z) * wn * out;
    float *part = R.part ? R.part + (R.off ? 0 : (size_t)g * wn * out) : NULL;
    constexpr uint32_t TOK = NT ? 8 * NT : MMA_TOK; /* rows a tile */
    constexpr uint32_t DNT = NT ? NT : 1;           /* n tiles of the direct path */
    constexpr uint32_t ENT = NT ? NT : MMA_TOK / 8; /* n tiles a tile can have */
    constexpr bool RING = F == DSV4_CUDA_W_BF16 && NT == 1;
    /* the direct path's weights 96 bytes a row ahead at one n tile (64 for MXFP4), as a
     * step of a few rows needs to stream; fewer beside more sums (registers) */
    constexpr uint32_t BYTES_AHEAD = F == DSV4_CUDA_W_BF16 ? 3 : F == DSV4_CUDA_W_FP8 ? 6 : 8;
    constexpr uint32_t AHEAD = BYTES_AHEAD / DNT ? BYTES_AHEAD / DNT : 1;
    for (uint32_t tr = lo + blockIdx.x / R.kgrid * TOK; tr < hi; tr += gridDim.x / R.kgrid * TOK) {
        uint32_t nr = hi - tr < TOK ? hi - tr : TOK;
        float acc[MMA_TOK / 8][4];
        /* acc = the sums of split s (its k blocks, from zero) */
        auto split = [&](uint32_t s) {
            size_t kbeg = s * kbs / R.ksplit * MMA_KB, kend = (s + 1) * kbs / R.ksplit * MMA_KB;
#pragma unroll
            for (int n = 0; n < MMA_TOK / 8; n++)
                acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
            /* nr is the same for the whole block: the barriers of the staged path are safe */
            if (NT)
                dsv4_mma_tile_direct<F, AHEAD, DNT, RING>(W, g, oa, ob, out, in, x, xs, tr, nr,
                                                          kbeg, kend, dsv4_mma_ring, acc);
            else if (nr <= 8)
                dsv4_mma_tile_direct<F, 1, 1, false>(W, g, oa, ob, out, in, x, xs, tr, nr, kbeg,
                                                     kend, NULL, acc);
            else
                dsv4_mma_tile<F>(W, g, oa, ob, out, in, x, xs, tr, nr, kbeg, kend, xt, acc);
        };
        if constexpr (WHOLE) {
            /* the splits in turn, added in split order as dsv4_mma_sum_kernel adds them */
            float tot[ENT][4];
            for (uint32_t s = 0; s < R.ksplit; s++) {
                split(s);
#pragma unroll
                for (uint32_t n = 0; n < ENT; n++)
#pragma unroll
                    for (uint32_t e = 0; e < 4; e++)
                        tot[n][e] = s ? tot[n][e] + acc[n][e] : acc[n][e];
            }
#pragma unroll
            for (uint32_t n = 0; n < ENT; n++)
#pragma unroll
                for (uint32_t e = 0; e < 4; e++)
                    acc[n][e] = tot[n][e];
        } else {
            split(s0);
        }
        dsv4_mma_each<ENT>(acc, o0, out, nr, [&](size_t o, uint32_t r, float &v) {
            if (part)
                part[s0 * pstride + (size_t)(tr + r - R.w0) * out + o] = v;
            else if (R.kgrid > 1)
                atomicAdd(&y[(size_t)(tr + r) * ys + o], v);
            else
                y[(size_t)(tr + r) * ys + o] = v;
        });
    }
}

__global__ static void dsv4_mma_zero_kernel(float *y, size_t out, uint32_t rows, size_t ys,
                                            size_t yz)
{
    dsv4_pdl_begin();
    dsv4_mma_zero_rows(y, out, rows, ys, yz);
}

int dsv4_mma_zero(cudaStream_t st, const dsv4_mma_rows &R, float *y, size_t out, size_t ys,
                  size_t yz, uint32_t probs)
{
    if (!dsv4_mma_adds_to_y(R))
        return 0;
    uint32_t n = R.w1 - R.w0;
    dim3 zg(n < 1024 ? n : 1024, probs);
    return dsv4_pdl_launch(dsv4_mma_zero_kernel, zg, 256, 0, st, y + (size_t)R.w0 * ys, out, n, ys,
                           yz);
}

/* Deterministic mode's add: Y rows w0 .. w1 of problem g = blockIdx.y (grouped: those below
 * off[groups], the rows some group computed) = the splits' sums of part in split order, one
 * thread an output (the loads of every split in flight together). */
__global__ static void dsv4_mma_sum_kernel(const float *__restrict__ part, uint32_t ksplit,
                                           size_t out, uint32_t w0, uint32_t w1,
                                           const uint32_t *__restrict__ off, uint32_t groups,
                                           float *__restrict__ y, size_t ys, size_t yz)
{
    dsv4_pdl_begin();
    uint32_t hi = off && off[groups] < w1 ? off[groups] : w1;
    size_t wn = w1 - w0, n = hi > w0 ? (hi - w0) * out : 0;
    size_t pstride = (size_t)gridDim.y * wn * out;
    part += (size_t)blockIdx.y * wn * out;
    y += (size_t)blockIdx.y * yz + (size_t)w0 * ys;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = part[i];
#pragma unroll 8
        for (uint32_t sp = 1; sp < ksplit; sp++)
            v += part[sp * pstride + i];
        y[i / out * ys + i % out] = v;
    }
}

/* The deterministic k split of a weight of `tiles` output tiles (of the matrices a
 * one-row step runs: every problem of a batched call, MMA_GROUPS_RUN of a grouped one)
 * and `in` inputs, each split MMA_FIXED_SPLIT_KB k blocks or more: for mma.sync, until the
 * launch fills the GPU twice over at one row; for wgmma (wave), the most splits whose
 * blocks at one row stay within that, one wave of its two blocks a multiprocessor rather
 * than two (H200, one row: wo_b 8192->4096 8 -> 4 splits, 26.8 -> 22.0 us; wo_a 8x
 * 4096->1024 4 -> 2, 25.4 -> 21.7; at 64 rows 33.0 -> 28.1 and 37.5 -> 31.0). A function of
 * the weight's shape alone: a row's bits never depend on the rows beside it. */
static uint32_t dsv4_mma_ksplit(size_t tiles, size_t in, bool wave)
{
    uint32_t ks = 1;
    while ((wave ? tiles * ks * 2 <= MMA_BLOCKS_WANTED : tiles * ks < MMA_BLOCKS_WANTED) &&
           in / MMA_KB / (2 * ks) >= MMA_FIXED_SPLIT_KB)
        ks *= 2;
    return ks;
}

/* One launch (rows_each: the row count, or a grouped step's average doubled) of tiles of
 * 8 NT rows. */
template <int F, uint32_t NT>
static int dsv4_mma_run_tiles(cudaStream_t st, dsv4_wdev W, size_t out, size_t in, const float *x,
                              size_t xs, size_t xz, const dsv4_mma_rows &R, uint32_t groups,
                              uint32_t rows_each, float *y, size_t ys, size_t yz)
{
    uint32_t tok = NT ? 8 * NT : MMA_TOK, tiles = (rows_each + tok - 1) / tok;
    dim3 grid((tiles < GEMM_ROW_SPLIT ? tiles : GEMM_ROW_SPLIT) * R.kgrid,
              (unsigned)((out + GEMM_WARPS * 16 - 1) / (GEMM_WARPS * 16)), groups);
    if (grid.y > 65535 || grid.z > 65535)
        return -EINVAL;
    size_t smem = 0;
    if (F == DSV4_CUDA_W_BF16 && NT && MMA_RING > 1) {
        static dsv4_gemm_once opted;
        smem = MMA_RING_BYTES;
        int rc = dsv4_gemm_setup(
            opted,
            [](int *) {
                if (cudaFuncSetAttribute(dsv4_mma_kernel<F, NT, false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)MMA_RING_BYTES) != cudaSuccess ||
                    cudaFuncSetAttribute(dsv4_mma_kernel<F, NT, true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)MMA_RING_BYTES) != cudaSuccess)
                    return dsv4_cuda_launch_status();
                return 0;
            },
            NULL);
        if (rc != 0)
            return rc;
    }
    return dsv4_pdl_launch(R.kgrid == 1 && R.ksplit > 1 ? dsv4_mma_kernel<F, NT, true>
                                                        : dsv4_mma_kernel<F, NT, false>,
                           grid, GEMM_WARPS * 32, smem, st, W, out, in, x, xs, xz, R, y, ys, yz);
}

/* The tile height by the rows a group holds: inputs read directly up to 16 rows, staged
 * above (H200: tiles of 32 rows read directly took the head 884 us at 32 rows, staged
 * 465; at 16 rows direct tiles win where k is split). */
static uint32_t dsv4_mma_tok(uint32_t rows_each, uint32_t rows)
{
    return rows_each <= 8 || rows <= 8 ? 8 : rows_each <= 16 ? 16 : MMA_TOK;
}

template <int F>
static int dsv4_mma_run(cudaStream_t st, dsv4_wdev W, size_t out, size_t in, const float *x,
                        size_t xs, size_t xz, const dsv4_mma_rows &R, uint32_t groups,
                        uint32_t rows_each, float *y, size_t ys, size_t yz)
{
    switch (dsv4_mma_tok(rows_each, R.w1 - R.w0)) {
    case 8:
        return dsv4_mma_run_tiles<F, 1>(st, W, out, in, x, xs, xz, R, groups, rows_each, y, ys, yz);
    case 16:
        return dsv4_mma_run_tiles<F, 2>(st, W, out, in, x, xs, xz, R, groups, rows_each, y, ys, yz);
    default:
        return dsv4_mma_run_tiles<F, 0>(st, W, out, in, x, xs, xz, R, groups, rows_each, y, ys, yz);
    }
}

/* How a tensor-core launch of n rows splits k and adds its splits (R over rows [0, n)), and
 * the rows one launch takes at most (*win_p; 0 where not one fits). Deterministic: the
 * split from the shape, each split's sums to the workspace, then added in split order by a
 * second kernel, in windows of rows that fit the workspace; or, for a launch wide enough
 * unsplit, a tile's splits in one block. Fast: split k until the launch, row tiles
 * included, fills the GPU twice over (a dense wgmma launch of one row tile:
 * dsv4_wg_stream_ksplit's waves); the splits add into Y with atomics (grouped on wgmma: a
 * tile's splits in one block, as deterministic mode takes them: no zeroing, no atomics;
 * H200, 8 experts 4096 -> 2048 at 16 rows: 45 -> 41-42 us). */
static dsv4_mma_rows dsv4_mma_plan(const dsv4_cuda_blas *b, const dsv4_wg_call *wg, size_t out,
                                   size_t in, const uint32_t *off, uint32_t groups,
                                   uint32_t rows_each, uint32_t n, size_t *win_p)
{
    if (b->deterministic) {
        uint32_t probs = off ? 1 : groups, touts = wg ? WG_OUT : GEMM_WARPS * 16;
        size_t otiles = (out + touts - 1) / touts;
        uint32_t ksplit = dsv4_mma_ksplit(
            otiles * (off ? (groups < MMA_GROUPS_RUN ? groups : MMA_GROUPS_RUN) : groups), in,
            wg != NULL);
        uint32_t tok = dsv4_mma_tok(rows_each, n), rtiles = (rows_each + tok - 1) / tok;
        bool whole =
            off ? wg != NULL
                : (size_t)(rtiles < GEMM_ROW_SPLIT ? rtiles : GEMM_ROW_SPLIT) * otiles * groups >=
                      MMA_WHOLE_BLOCKS;
        uint32_t kgrid = whole ? 1 : ksplit;
        *win_p = kgrid > 1 ? MMA_PART_FLOATS / ((size_t)ksplit * probs * out) : n;
        return dsv4_mma_rows{off, 0, n, ksplit, kgrid, kgrid > 1 ? b->part : NULL};
    }
    uint32_t ksplit = wg && !off ? dsv4_wg_stream_ksplit(*wg, out, in, groups, rows_each, n) : 0;
    if (ksplit == 0) {
        uint32_t tiles = (rows_each + MMA_TOK - 1) / MMA_TOK;
        uint32_t touts = wg ? WG_OUT : GEMM_WARPS * 16;
        size_t blocks = (size_t)(tiles < GEMM_ROW_SPLIT ? tiles : GEMM_ROW_SPLIT) *
                        ((out + touts - 1) / touts) * groups;
        ksplit = 1;
        while (blocks * ksplit < MMA_BLOCKS_WANTED && in / MMA_KB / (2 * ksplit) >= MMA_SPLIT_KB)
            ksplit *= 2;
    }
    *win_p = n;
    return dsv4_mma_rows{off, 0, n, ksplit, wg && off ? 1 : ksplit, NULL};
}

/* The plan's launches, a window of rows each: the wgmma kernel (which zeroes Y itself where
 * its splits add into it, with its inputs' split where it splits them once) or mma.sync
 * (Y zeroed by a launch of its own there), then deterministic mode's split sums. Grouped
 * rows are one block of n rows, batched problems each their own. */
template <int F>
static int dsv4_mma_format(const dsv4_cuda_blas *b, dsv4_wdev W, size_t out, size_t in,
                           const float *x, size_t xs, size_t xz, const uint32_t *off,
                           uint32_t groups, uint32_t rows_each, uint32_t n, float *y, size_t ys,
                           size_t yz)
{
    /* BF16 weights on wgmma where the device code and the driver have it */
    dsv4_wg_call call = {b, W.data, x, xs, xz};
    const dsv4_wg_call *wg = F == DSV4_CUDA_W_BF16 && b->encode ? &call : NULL;
    size_t win;
    const dsv4_mma_rows plan = dsv4_mma_plan(b, wg, out, in, off, groups, rows_each, n, &win);
    if (win == 0)
        return -ENOMEM;
    uint32_t probs = off ? 1 : groups;
    int rc = 0;
    for (uint32_t w0 = 0; rc == 0 && w0 < n; w0 += (uint32_t)win) {
        dsv4_mma_rows R = plan;
        R.w0 = w0;
        R.w1 = n - w0 < win ? n : w0 + (uint32_t)win;
        uint32_t each = rows_each < R.w1 - w0 ? rows_each : R.w1 - w0;
        if (wg) {
            rc = dsv4_wg_run(b->stream, *wg, out, in, R, groups, each, y, ys, yz);
        } else {
            rc = dsv4_mma_zero(b->stream, R, y, out, ys, off ? 0 : yz, probs);
            if (rc == 0)
                rc = dsv4_mma_run<F>(b->stream, W, out, in, x, xs, xz, R, groups, each, y, ys, yz);
        }
        if (rc != 0 || !R.part)
            continue;
        size_t want = ((size_t)(R.w1 - w0) * out + 255) / 256;
        dim3 grid(want < 4096 ? (unsigned)want : 4096u, probs);
        rc = dsv4_pdl_launch(dsv4_mma_sum_kernel, grid, 256, 0, b->stream, b->part, R.ksplit, out,
                             w0, R.w1, off, groups, y, ys, yz);
    }
    return rc;
}

/* Whether fast mode's one-row step of w splits k on the tensor cores: the streaming kernel
 * would have too few outputs to fill the GPU with warps each reading a whole weight row,
 * and the weight is large enough for the k split's extra blocks to pay. H200, one row,
 * streaming -> tensor cores: bf16 wo_b 8192->4096 28.7 -> 21.5 us, wo_a 8x 4096->1024 31.0
 * -> 21.2, wq_a 4096->1024 7.2 -> 6.2; MXFP4 wo_a, wo_b 29-31 -> 23; but FP8 wq_a 6.6 ->
 * 9.1, MXFP4 wq_a 8.5 -> 9.7 (4, 2 MB). */
static bool dsv4_gemm_one_row_splits(const dsv4_cuda_weight *w, size_t out, size_t in,
                                     uint32_t groups)
{
    size_t scale_bytes;
    return out * groups < GEMM_WIDE_OUTPUTS &&
           dsv4_cuda_weight_bytes(w->fmt, groups, out, in, &scale_bytes) >=
               GEMM_SPLIT_ONE_ROW_BYTES;
}

/* Every slice 16-byte aligned: rows of whole 16-byte units, 16-byte aligned inputs. */
static bool dsv4_gemm_vec(const dsv4_cuda_weight *w, size_t in, const float *x, size_t xs,
                          size_t xz)
{
    static const size_t elem_bits[] = {32, 16, 8, 4};
    return (in * elem_bits[w->fmt] / 8) % 16 == 0 && (uintptr_t)w->data % 16 == 0 && xs % 4 == 0 &&
           xz % 4 == 0 && (uintptr_t)x % 16 == 0;
}

/* The rows a launch sizes its tiles by: the row count, or for groups their average doubled
 * (at most the rows). */
static uint32_t dsv4_gemm_each(bool grouped, uint32_t groups, uint32_t rows)
{
    uint32_t each = !grouped ? rows : rows <= groups ? 1 : (rows + groups - 1) / groups * 2;
    return each < rows ? each : rows;
}

/* Tensor cores: in deterministic mode for every row count (the choice follows the weight
 * and the call's layout, never the rows), in fast mode from two rows a group, and for one
 * row where the streaming kernel is too narrow (dsv4_gemm_one_row_splits). */
static bool dsv4_gemm_mma(const dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                          uint32_t groups, uint32_t each, bool vec)
{
    return w->fmt != DSV4_CUDA_W_F32 && vec && in % MMA_KB == 0 &&
           (b->deterministic || each > 1 || dsv4_gemm_one_row_splits(w, out, in, groups));
}

/* The split buffer where dsv4_gemm_launch of these arguments, grouped or one dense problem,
 * splits its inputs once on wgmma, or NULL; for a dense one only where one launch takes all
 * the rows (one window), with *zero_p set where that launch adds its splits into Y. */
static void *dsv4_gemm_split_buffer(const dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out,
                                    size_t in, size_t x_stride, bool grouped, uint32_t groups,
                                    uint32_t rows, bool *zero_p)
{
    /* dsv4_gemm_launch's way to dsv4_wg_run, whose one launch covers the rows from 0 */
    *zero_p = false;
    if (rows == 0 || out == 0 || groups == 0 || w->fmt != DSV4_CUDA_W_BF16 || !b->encode)
        return NULL;
    uint32_t each = dsv4_gemm_each(grouped, groups, rows);
    if (!dsv4_gemm_mma(b, w, out, in, groups, each, dsv4_gemm_vec(w, in, NULL, x_stride, 0)) ||
        !dsv4_wg_splits_inputs(out, in, groups, each, grouped ? 1 : groups, rows))
        return NULL;
    if (grouped)
        return b->split;
    const dsv4_wg_call call = {b, w->data, NULL, x_stride, 0};
    size_t win;
    dsv4_mma_rows R = dsv4_mma_plan(b, &call, out, in, NULL, groups, each, rows, &win);
    if (win < rows)
        return NULL;
    *zero_p = dsv4_mma_adds_to_y(R);
    return b->split;
}

void *dsv4_cuda_linear_grouped_split(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out,
                                     size_t in, size_t x_stride, uint32_t groups, uint32_t max_rows)
{
    bool zero;
    return dsv4_gemm_split_buffer(b, w, out, in, x_stride, true, groups, max_rows, &zero);
}

/* rows: the dense row count, or for groups the total (each group holds at most that). x
 * NULL: rows whose producer split them (dsv4_cuda_linear_grouped_split,
 * dsv4_cuda_linear_split). */
static int dsv4_gemm_launch(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                            const float *x, size_t xs, size_t xz, const uint32_t *off,
                            uint32_t groups, uint32_t rows, float *y, size_t ys, size_t yz)
{
    if (rows == 0 || out == 0 || groups == 0)
        return 0;
    bool zero;
    if (in == 0 || (w->fmt == DSV4_CUDA_W_FP4 && in % FP4_GROUP != 0) ||
        (!x && ((!off && groups != 1) ||
                !dsv4_gemm_split_buffer(b, w, out, in, xs, off != NULL, groups, rows, &zero))))
        return -EINVAL;
    bool vec = dsv4_gemm_vec(w, in, x, xs, xz);
    uint32_t each = dsv4_gemm_each(off != NULL, groups, rows);
    dsv4_wdev W = {(const uint8_t *)w->data, (const uint8_t *)w->scale};
    if (dsv4_gemm_mma(b, w, out, in, groups, each, vec)) {
        switch (w->fmt) {
        case DSV4_CUDA_W_BF16:
            return dsv4_mma_format<DSV4_CUDA_W_BF16>(b, W, out, in, x, xs, xz, off, groups, each,
                                                     rows, y, ys, yz);
        case DSV4_CUDA_W_FP8:
            return dsv4_mma_format<DSV4_CUDA_W_FP8>(b, W, out, in, x, xs, xz, off, groups, each,
                                                    rows, y, ys, yz);
        default:
            return dsv4_mma_format<DSV4_CUDA_W_FP4>(b, W, out, in, x, xs, xz, off, groups, each,
                                                    rows, y, ys, yz);
        }
    }
    switch (w->fmt) {
    case DSV4_CUDA_W_F32:
        return dsv4_gemm_format<DSV4_CUDA_W_F32>(b->stream, W, out, in, x, xs, xz, off, groups,
                                                 each, rows, y, ys, yz, vec);
    case DSV4_CUDA_W_BF16:
        return dsv4_gemm_format<DSV4_CUDA_W_BF16>(b->stream, W, out, in, x, xs, xz, off, groups,
                                                  each, rows, y, ys, yz, vec);
    case DSV4_CUDA_W_FP8:
        return dsv4_gemm_format<DSV4_CUDA_W_FP8>(b->stream, W, out, in, x, xs, xz, off, groups,
                                                 each, rows, y, ys, yz, vec);
    case DSV4_CUDA_W_FP4:
        return dsv4_gemm_format<DSV4_CUDA_W_FP4>(b->stream, W, out, in, x, xs, xz, off, groups,
                                                 each, rows, y, ys, yz, vec);
    }
    return -EINVAL;
}

/* cuBLAS takes the step: fast mode, a long step, f32 weights or BF16 ones whose inputs split
 * into the split buffer at least a row at a time (dsv4_gemm_blas_bf16), sizes it can
 * address. */
static bool dsv4_gemm_blas(const dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out,
                           size_t in, size_t n, const float *x, size_t xs, size_t xz,
                           uint32_t batch)
{
    bool bf16 = w->fmt == DSV4_CUDA_W_BF16 && b->split && in % 4 == 0 && xs % 4 == 0 &&
                xz % 4 == 0 && (uintptr_t)x % 16 == 0 && (size_t)batch * 4 * in <= WG_SPLIT_BYTES;
    return !b->deterministic && (w->fmt == DSV4_CUDA_W_F32 || bf16) &&
           n > DSV4_CUDA_GEMM_STREAM_ROWS && n <= INT32_MAX && out <= INT32_MAX && in <= INT32_MAX;
}

/* A long fast-mode step of BF16 weights on cuBLAS's bf16 GEMM at our precision: the inputs
 * split into bf16 hi and lo parts (dsv4_wg_split_inputs: hi + lo is each input to 16
 * significant bits, as the tensor-core kernels take it), then Y = W hi and Y += W lo, each
 * accumulated in f32 (cuBLAS picks kernel, tile and split-K by the shape, as for f32
 * weights), in windows of rows whose split fits the split buffer; `batch` problems W + g out
 * in, X + g xz, Y + g yz. H200, 4- and 6-layer flash shapes: prefill of 8k-32k tokens
 * 1.04-1.05x; a 2048-token step's dense GEMMs 7.1 ms (the split included) against the
 * wgmma kernel's 7.7 (under ncu); the handle's pedantic math made no difference; the first
 * step of a new shape pays cuBLAS's kernel loading (bench/results/2026-12-01-prefill-h200.md). */
static int dsv4_gemm_blas_bf16(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                               const float *x, size_t xs, size_t xz, size_t n, float *y, size_t ys,
                               size_t yz, uint32_t batch)
{
    const float one = 1.0f, zero = 0.0f;
    size_t win = WG_SPLIT_BYTES / ((size_t)batch * 4 * in);
    int rc = 0;
    for (size_t r0 = 0; rc == 0 && r0 < n; r0 += win) {
        size_t r = n - r0 < win ? n - r0 : win;
        rc = dsv4_wg_split_inputs(b->stream, x + r0 * xs, xs, xz, in, 0, (uint32_t)r, batch,
                                  b->split, NULL, out, ys, yz);
        for (int part = 0; rc == 0 && part < 2; part++) {
            const uint16_t *xp = (const uint16_t *)b->split + part * r * in;
            cublasStatus_t st = cublasGemmStridedBatchedEx(
                b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)r, (int)in, &one, w->data,
                CUDA_R_16BF, (int)in, (long long)(out * in), xp, CUDA_R_16BF, (int)in,
                (long long)(2 * r * in), part ? &one : &zero, y + r0 * ys, CUDA_R_32F, (int)ys,
                (long long)yz, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            rc = st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
        }
    }
    return rc;
}

void *dsv4_cuda_linear_split(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                             size_t x_stride, size_t n, bool *zero_p)
{
    *zero_p = false;
    if (n > UINT32_MAX || dsv4_gemm_blas(b, w, out, in, n, NULL, x_stride, 0, 1))
        return NULL;
    return dsv4_gemm_split_buffer(b, w, out, in, x_stride, false, 1, (uint32_t)n, zero_p);
}

int dsv4_cuda_linear(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                     const float *x_dev, size_t x_stride, size_t n, float *y_dev, size_t y_stride)
{
    if (n == 0 || out == 0)
        return 0;
    if (!x_dev || !dsv4_gemm_blas(b, w, out, in, n, x_dev, x_stride, 0, 1) ||
        x_stride > INT32_MAX || y_stride > INT32_MAX)
        return n > UINT32_MAX ? -EINVAL
                              : dsv4_gemm_launch(b, w, out, in, x_dev, x_stride, 0, NULL, 1,
                                                 (uint32_t)n, y_dev, y_stride, 0);
    if (w->fmt == DSV4_CUDA_W_BF16)
        return dsv4_gemm_blas_bf16(b, w, out, in, x_dev, x_stride, 0, n, y_dev, y_stride, 0, 1);
    /* cuBLAS is column-major: it sees W as an in x out matrix (op T gives out x in), X as
     * in x n and Y as out x n, all with our row strides as leading dimensions */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasSgemm(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in,
                                    &one, (const float *)w->data, (int)in, x_dev, (int)x_stride,
                                    &zero, y_dev, (int)y_stride);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

int dsv4_cuda_linear_grouped(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, const uint32_t *off_dev,
                             uint32_t groups, uint32_t max_rows, float *y_dev, size_t y_stride)
{
    return dsv4_gemm_launch(b, w, out, in, x_dev, x_stride, 0, off_dev, groups, max_rows, y_dev,
                            y_stride, 0);
}

int dsv4_cuda_linear_batched(dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, size_t x_batch, size_t n,
                             float *y_dev, size_t y_stride, size_t y_batch, uint32_t batch)
{
    if (n == 0 || out == 0 || batch == 0)
        return 0;
    if (!x_dev || !dsv4_gemm_blas(b, w, out, in, n, x_dev, x_stride, x_batch, batch) ||
        x_stride > INT32_MAX || y_stride > INT32_MAX || x_batch > INT32_MAX || y_batch > INT32_MAX)
        return n > UINT32_MAX ? -EINVAL
                              : dsv4_gemm_launch(b, w, out, in, x_dev, x_stride, x_batch, NULL,
                                                 batch, (uint32_t)n, y_dev, y_stride, y_batch);
    if (w->fmt == DSV4_CUDA_W_BF16)
        return dsv4_gemm_blas_bf16(b, w, out, in, x_dev, x_stride, x_batch, n, y_dev, y_stride,
                                   y_batch, batch);
    /* as dsv4_cuda_linear, problem g at W + g out in, X + g x_batch, Y + g y_batch */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasSgemmStridedBatched(
        b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one,
        (const float *)w->data, (int)in, (long long)(out * in), x_dev, (int)x_stride,
        (long long)x_batch, &zero, y_dev, (int)y_stride, (long long)y_batch, (int)batch);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

/* ---- storing f32 weights in a checkpoint format ------------------------------------------ */

size_t dsv4_cuda_weight_bytes(dsv4_cuda_wfmt fmt, size_t mats, size_t out, size_t in,
                              size_t *scale_bytes_p)
{
    size_t n = mats * out * in, scale = 0, data = 0;
    *scale_bytes_p = 0;
    switch (fmt) {
    case DSV4_CUDA_W_F32: data = 4 * n; break;
    case DSV4_CUDA_W_BF16: data = 2 * n; break;
    case DSV4_CUDA_W_FP8:
        data = n;
        scale = 4 * mats * ((out + FP8_BLOCK - 1) / FP8_BLOCK) * ((in + FP8_BLOCK - 1) / FP8_BLOCK);
        break;
    case DSV4_CUDA_W_FP4:
        if (in % FP4_GROUP != 0)
            return 0;
        data = n / 2;
        scale = n / FP4_GROUP;
        break;
    }
    *scale_bytes_p = scale;
    return data;
}

/* The smallest power of two p with max <= top * p, as its exponent (max >= 0, finite). */
__device__ static inline int dsv4_pack_exp(float max, float top)
{
    if (!(max > 0.0f))
        return 0;
    int e = ilogbf(max) - ilogbf(top);
    while (ldexpf(top, e) < max)
        e++;
    while (ldexpf(top, e - 1) >= max)
        e--;
    return e;
}

__global__ static void dsv4_pack_bf16_kernel(const float *__restrict__ src, size_t n,
                                             uint16_t *__restrict__ dst, uint32_t *bad)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t u = __float_as_uint(src[i]);
        dst[i] = (uint16_t)(u >> 16);
        if (u & 0xffffu)
            *bad = 1;
    }
}

/* One block per 128x128 scale block (x: block column, y: block row, z: matrix). */
__global__ static void __launch_bounds__(PACK_THREADS)
    dsv4_pack_fp8_kernel(const float *__restrict__ src, size_t out, size_t in,
                         uint8_t *__restrict__ dst, float *__restrict__ scale, uint32_t *bad)
{
    __shared__ float part[PACK_THREADS];
    size_t g = blockIdx.z, r0 = (size_t)blockIdx.y * FP8_BLOCK, c0 = (size_t)blockIdx.x * FP8_BLOCK;
    size_t nr = out - r0 < FP8_BLOCK ? out - r0 : FP8_BLOCK;
    size_t nc = in - c0 < FP8_BLOCK ? in - c0 : FP8_BLOCK;
    const float *s = src + (g * out + r0) * in + c0;
    uint8_t *d = dst + (g * out + r0) * in + c0;
    float m = 0.0f;
    bool finite = true;
    for (size_t i = threadIdx.x; i < nr * nc; i += PACK_THREADS) {
        float v = fabsf(s[i / nc * in + i % nc]);
        finite &= isfinite(v);
        m = fmaxf(m, v);
    }
    part[threadIdx.x] = finite ? m : INFINITY;
    __syncthreads();
    for (uint32_t h = PACK_THREADS / 2; h > 0; h /= 2) {
        if (threadIdx.x < h)
            part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + h]);
        __syncthreads();
    }
    float max = part[0];
    if (!isfinite(max)) {
        *bad = 1;
        return;
    }
    int e = dsv4_pack_exp(max, 448.0f);
    float sc = ldexpf(1.0f, e), inv = ldexpf(1.0f, -e);
    if (threadIdx.x == 0)
        scale[(g * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = sc;
    for (size_t i = threadIdx.x; i < nr * nc; i += PACK_THREADS) {
        float v = s[i / nc * in + i % nc];
        uint8_t q = (uint8_t)__nv_cvt_float_to_fp8(v * inv, __NV_SATFINITE, __NV_E4M3);
        d[i / nc * in + i % nc] = q;
        if (__float_as_uint(dsv4_w_e4m3(q) * sc) != __float_as_uint(v))
            *bad = 1;
    }
}

/* One thread per 32-input group: its scale byte and 16 bytes of codes. */
__global__ static void dsv4_pack_fp4_kernel(const float *__restrict__ src, size_t groups,
                                            uint8_t *__restrict__ dst, uint8_t *__restrict__ scale,
                                            uint32_t *bad)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= groups)
        return;
    const float *s = src + i * FP4_GROUP;
    float m = 0.0f;
    for (int j = 0; j < FP4_GROUP; j++)
        m = fmaxf(m, fabsf(s[j]));
    int e = dsv4_pack_exp(m, 6.0f);
    if (!isfinite(m) || e < -127 || e > 127) {
        *bad = 1;
        return;
    }
    float sc = dsv4_w_e8m0((uint32_t)(e + 127)), inv = ldexpf(1.0f, -e);
    scale[i] = (uint8_t)(e + 127);
    bool ok = true;
    for (int j = 0; j < FP4_GROUP; j += 2) {
        uint32_t code[2];
        for (int h = 0; h < 2; h++) {
            float v = s[j + h], a = fabsf(v) * inv;
            /* the code of the magnitude: 0 0.5 1 1.5 2 3 4 6 */
            uint32_t c = 0;
            for (uint32_t k = 1; k < 8; k++)
                if (dsv4_w_e2m1(k) == a)
                    c = k;
            c |= signbit(v) ? 8u : 0u;
            code[h] = c;
            ok &= __float_as_uint(dsv4_w_e2m1(c) * sc) == __float_as_uint(v);
        }
        dst[i * (FP4_GROUP / 2) + j / 2] = (uint8_t)(code[0] | code[1] << 4);
    }
    if (!ok)
        *bad = 1;
}

int dsv4_cuda_weight_pack(const float *src_dev, size_t mats, size_t out, size_t in,
                          dsv4_cuda_wfmt fmt, void *data_dev, void *scale_dev, uint32_t *flag_dev,
                          void *stream, bool *exact_p)
{
    cudaStream_t st = (cudaStream_t)stream;
    size_t n = mats * out * in, sb;
    if (dsv4_cuda_weight_bytes(fmt, mats, out, in, &sb) == 0 && n != 0)
        return -EINVAL;
    if (n == 0) {
        *exact_p = true;
        return 0;
    }
    int rc = dsv4_cuda_status(cudaMemsetAsync(flag_dev, 0, sizeof(uint32_t), st));
    if (rc != 0)
        return rc;
    switch (fmt) {
    case DSV4_CUDA_W_F32:
        rc = dsv4_cuda_status(
            cudaMemcpyAsync(data_dev, src_dev, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
        break;
    case DSV4_CUDA_W_BF16: {
        size_t want = (n + PACK_THREADS - 1) / PACK_THREADS;
        unsigned blocks = want < 65536 ? (unsigned)want : 65536u;
        dsv4_pack_bf16_kernel<<<blocks, PACK_THREADS, 0, st>>>(src_dev, n, (uint16_t *)data_dev,
                                                               flag_dev);
        rc = dsv4_cuda_launch_status();
        break;
    }
    case DSV4_CUDA_W_FP8: {
        dim3 grid((unsigned)((in + FP8_BLOCK - 1) / FP8_BLOCK),
                  (unsigned)((out + FP8_BLOCK - 1) / FP8_BLOCK), (unsigned)mats);
        if (grid.y > 65535 || grid.z > 65535)
            return -EINVAL;
        dsv4_pack_fp8_kernel<<<grid, PACK_THREADS, 0, st>>>(src_dev, out, in, (uint8_t *)data_dev,
                                                            (float *)scale_dev, flag_dev);
        rc = dsv4_cuda_launch_status();
        break;
    }
    case DSV4_CUDA_W_FP4: {
        size_t groups = n / FP4_GROUP;
        dsv4_pack_fp4_kernel<<<(unsigned)((groups + PACK_THREADS - 1) / PACK_THREADS), PACK_THREADS,
                               0, st>>>(src_dev, groups, (uint8_t *)data_dev, (uint8_t *)scale_dev,
                                        flag_dev);
        rc = dsv4_cuda_launch_status();
        break;
    }
    }
    uint32_t bad = 1;
    if (rc == 0)
        rc = dsv4_cuda_status(
            cudaMemcpyAsync(&bad, flag_dev, sizeof(bad), cudaMemcpyDeviceToHost, st));
    if (rc == 0)
        rc = dsv4_cuda_status(cudaStreamSynchronize(st));
    if (rc == 0)
        *exact_p = bad == 0;
    return rc;
}
