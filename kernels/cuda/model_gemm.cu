/* model_gemm.cu: the linear layers of the CUDA forward (model.h).
 *
 * Fast mode hands dense layers to cuBLAS (fp32 SGEMM). cuBLAS picks its kernel, tile
 * and split-K by the problem size, so a token's output may change with the number of
 * tokens in the step. Deterministic mode, and every grouped (MoE expert) layer, use the
 * kernel below instead: one warp per output, lane j accumulating the input dims
 * 128 i + 4 j .. 128 i + 4 j + 3 in ascending order (one fused multiply-add each), then the
 * 32 partial sums added by a fixed butterfly tree. The order depends only on the input
 * length, never on the number of rows in the step or how they are tiled, so an output's
 * value depends only on its own weight row and input row (batch invariance by
 * construction); and a decode step's few rows still spread over one warp per output
 * instead of one thread walking the whole input. Its cost against cuBLAS is what bench/
 * measures.
 */
#include "kernels/cuda/model.h"
#include "kernels/cuda/status.cuh"

#include <cublas_v2.h>
#include <stdlib.h>

#define GEMM_WARPS 8 /* outputs per block, one warp each */
#define GEMM_ROWS 8  /* rows a warp carries at most (rows share its weight loads) */
/* cuBLAS's workspace, given to it once (the size NVIDIA recommends for Hopper), so a step
 * captured into a CUDA graph never makes cuBLAS allocate one while capturing */
#define BLAS_WORKSPACE (32u << 20)

struct dsv4_cuda_blas {
    cublasHandle_t handle;
    cudaStream_t stream;
    void *workspace;
    bool deterministic;
};

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
        cublasSetWorkspace(b->handle, b->workspace, BLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        dsv4_cuda_blas_free(b);
        return NULL;
    }
    return b;
}

void dsv4_cuda_blas_free(dsv4_cuda_blas *b)
{
    if (!b)
        return;
    cublasDestroy(b->handle);
    cudaFree(b->workspace);
    free(b);
}

/* Lane j's partial sums over its dims of one 128-wide slice at k0 (4 j .. 4 j + 3 of it), for
 * rows i < nr: four fmaf in ascending k each; `vec` reads them as one 16-byte load (every
 * row 16-byte aligned), else one float at a time, the same arithmetic either way. */
template <uint32_t R>
__device__ static inline void dsv4_gemm_slice(const float *__restrict__ w,
                                              const float *__restrict__ x, size_t xs, size_t in,
                                              size_t k, uint32_t nr, bool vec, float (&acc)[R])
{
    if (vec && k + 4 <= in) {
        float4 wv = __ldg((const float4 *)(w + k));
#pragma unroll
        for (uint32_t i = 0; i < R; i++)
            if (i < nr) {
                float4 xv = __ldg((const float4 *)(x + i * xs + k));
                acc[i] = fmaf(xv.x, wv.x, acc[i]);
                acc[i] = fmaf(xv.y, wv.y, acc[i]);
                acc[i] = fmaf(xv.z, wv.z, acc[i]);
                acc[i] = fmaf(xv.w, wv.w, acc[i]);
            }
        return;
    }
    for (size_t e = k; e < k + 4 && e < in; e++) {
        float wv = __ldg(w + e);
#pragma unroll
        for (uint32_t i = 0; i < R; i++)
            if (i < nr)
                acc[i] = fmaf(__ldg(x + i * xs + e), wv, acc[i]);
    }
}

/* Y[r][o] for output o = blockIdx.x * GEMM_WARPS + warp and rows blockIdx.y * R .. + R of
 * group blockIdx.z: rows off[g] .. off[g + 1] of X and Y (grouped), or the g-th problem at
 * X + g * xz, Y + g * yz (batched, off NULL); W + g * out * in either way. No block-wide
 * barrier: a warp with nothing to do leaves. */
template <uint32_t R>
__global__ static void __launch_bounds__(GEMM_WARPS * 32)
    dsv4_gemm_kernel(const float *__restrict__ w, size_t out, size_t in,
                     const float *__restrict__ x, size_t xs, size_t xz,
                     const uint32_t *__restrict__ off, uint32_t n_dense, float *__restrict__ y,
                     size_t ys, size_t yz, bool vec)
{
    uint32_t g = blockIdx.z, lane = threadIdx.x % 32;
    uint32_t r0 = off ? off[g] : 0, rows = off ? off[g + 1] - off[g] : n_dense;
    uint32_t tr = blockIdx.y * R, o = blockIdx.x * GEMM_WARPS + threadIdx.x / 32;
    if (tr >= rows || o >= out)
        return;
    uint32_t nr = rows - tr < R ? rows - tr : R;
    w += ((size_t)g * out + o) * in;
    x += (off ? (size_t)r0 * xs : (size_t)g * xz) + (size_t)tr * xs;
    y += (off ? (size_t)r0 * ys : (size_t)g * yz) + (size_t)tr * ys;
    float acc[R];
#pragma unroll
    for (uint32_t i = 0; i < R; i++)
        acc[i] = 0.0f;
    for (size_t k = 4 * lane; k < in; k += 128)
        dsv4_gemm_slice<R>(w, x, xs, in, k, nr, vec, acc);
#pragma unroll
    for (uint32_t i = 0; i < R; i++) {
        /* the fixed tree: every lane ends with the same sum (a + b == b + a) */
        for (uint32_t m = 16; m > 0; m /= 2)
            acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], m);
        if (lane == i && i < nr)
            y[(size_t)i * ys + o] = acc[i];
    }
}

/* rows: the dense row count, or for groups the total (each group holds at most that). A
 * step of one row per group (batch-1 decode) takes warps of one row, so no lane runs
 * predicated-off rows; the results are the same either way. */
static int dsv4_gemm_launch(dsv4_cuda_blas *b, const float *w, size_t out, size_t in,
                            const float *x, size_t xs, size_t xz, const uint32_t *off,
                            uint32_t groups, uint32_t rows, float *y, size_t ys, size_t yz)
{
    if (rows == 0 || out == 0 || groups == 0)
        return 0;
    bool one_row = off ? rows <= groups : rows <= 1;
    uint32_t rpw = one_row ? 1 : GEMM_ROWS;
    bool vec = in % 4 == 0 && xs % 4 == 0 && xz % 4 == 0 && (uintptr_t)w % 16 == 0 &&
               (uintptr_t)x % 16 == 0;
    dim3 grid((unsigned)((out + GEMM_WARPS - 1) / GEMM_WARPS), (rows + rpw - 1) / rpw, groups);
    if (grid.y > 65535 || grid.z > 65535)
        return -EINVAL;
    if (one_row)
        dsv4_gemm_kernel<1><<<grid, GEMM_WARPS * 32, 0, b->stream>>>(w, out, in, x, xs, xz, off,
                                                                     rows, y, ys, yz, vec);
    else
        dsv4_gemm_kernel<GEMM_ROWS><<<grid, GEMM_WARPS * 32, 0, b->stream>>>(
            w, out, in, x, xs, xz, off, rows, y, ys, yz, vec);
    return dsv4_cuda_launch_status();
}

int dsv4_cuda_linear(dsv4_cuda_blas *b, const float *w_dev, size_t out, size_t in,
                     const float *x_dev, size_t x_stride, size_t n, float *y_dev, size_t y_stride)
{
    if (n == 0 || out == 0)
        return 0;
    if (b->deterministic || n > INT32_MAX || out > INT32_MAX || in > INT32_MAX)
        return dsv4_gemm_launch(b, w_dev, out, in, x_dev, x_stride, 0, NULL, 1, (uint32_t)n, y_dev,
                                y_stride, 0);
    /* cuBLAS is column-major: it sees W as an in x out matrix (op T gives out x in), X as
     * in x n and Y as out x n, all with our row strides as leading dimensions */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st =
        cublasSgemm(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w_dev,
                    (int)in, x_dev, (int)x_stride, &zero, y_dev, (int)y_stride);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

int dsv4_cuda_linear_grouped(dsv4_cuda_blas *b, const float *w_dev, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, const uint32_t *off_dev,
                             uint32_t groups, uint32_t max_rows, float *y_dev, size_t y_stride)
{
    return dsv4_gemm_launch(b, w_dev, out, in, x_dev, x_stride, 0, off_dev, groups, max_rows, y_dev,
                            y_stride, 0);
}

int dsv4_cuda_linear_batched(dsv4_cuda_blas *b, const float *w_dev, size_t out, size_t in,
                             const float *x_dev, size_t x_stride, size_t x_batch, size_t n,
                             float *y_dev, size_t y_stride, size_t y_batch, uint32_t batch)
{
    if (n == 0 || out == 0 || batch == 0)
        return 0;
    if (b->deterministic || n > INT32_MAX || out > INT32_MAX || in > INT32_MAX ||
        x_batch > INT32_MAX || y_batch > INT32_MAX)
        return dsv4_gemm_launch(b, w_dev, out, in, x_dev, x_stride, x_batch, NULL, batch,
                                (uint32_t)n, y_dev, y_stride, y_batch);
    /* as dsv4_cuda_linear, problem g at W + g out in, X + g x_batch, Y + g y_batch */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasSgemmStridedBatched(
        b->handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)n, (int)in, &one, w_dev, (int)in,
        (long long)(out * in), x_dev, (int)x_stride, (long long)x_batch, &zero, y_dev,
        (int)y_stride, (long long)y_batch, (int)batch);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}
