/* model_gemm.cu: the linear layers of the CUDA forward (model.h).
 *
 * Fast mode hands dense layers to cuBLAS (fp32 SGEMM). cuBLAS picks its kernel, tile
 * and split-K by the problem size, so a token's output may change with the number of
 * tokens in the step. Deterministic mode, and every grouped (MoE expert) layer, use the
 * tiled kernel below instead: each output element is accumulated by one thread over the
 * input dims in ascending order, one fused multiply-add at a time, whatever the tile it
 * lands in. Its value therefore depends only on its own weight row and input row (batch
 * invariance by construction); its cost against cuBLAS is what bench/ measures.
 */
#include "kernels/cuda/model.h"
#include "kernels/cuda/status.cuh"

#include <cublas_v2.h>
#include <stdlib.h>

#define GEMM_TM 64 /* rows (tokens) per tile */
#define GEMM_TN 64 /* outputs per tile */
#define GEMM_TK 32
#define GEMM_THREADS 256
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

/* Y[t][o] for the tile (blockIdx.x: outputs, blockIdx.y: rows) of group blockIdx.z: rows
 * off[g] .. off[g + 1] of X and Y (grouped), or the g-th problem at X + g * xz, Y + g * yz
 * (batched, off NULL); W + g * out * in either way. Each thread owns TM / 16 rows x 4
 * outputs and walks k in order, one fmaf per k from zero: the value of an output does not
 * depend on TM (the tile height is picked by the row count) nor on anything but its own
 * weight row and input row. */
template <uint32_t TM>
__global__ static void dsv4_gemm_kernel(const float *__restrict__ w, size_t out, size_t in,
                                        const float *__restrict__ x, size_t xs, size_t xz,
                                        const uint32_t *__restrict__ off, uint32_t n_dense,
                                        float *__restrict__ y, size_t ys, size_t yz)
{
    constexpr uint32_t RI = TM / 16;
    __shared__ float sx[GEMM_TK][TM + 1];
    __shared__ float sw[GEMM_TK][GEMM_TN + 1];
    uint32_t g = blockIdx.z;
    uint32_t r0 = off ? off[g] : 0, rows = off ? off[g + 1] - off[g] : n_dense;
    uint32_t tr = blockIdx.y * TM, to = blockIdx.x * GEMM_TN;
    if (tr >= rows)
        return;
    w += (size_t)g * out * in;
    x += off ? (size_t)r0 * xs : (size_t)g * xz;
    y += off ? (size_t)r0 * ys : (size_t)g * yz;
    uint32_t tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    float acc[RI][4] = {};
    for (size_t k0 = 0; k0 < in; k0 += GEMM_TK) {
        /* consecutive threads read consecutive k of a row: GEMM_TK floats per row at once */
        for (uint32_t i = tid; i < GEMM_TK * TM; i += GEMM_THREADS) {
            uint32_t r = i / GEMM_TK, k = i % GEMM_TK;
            sx[k][r] = tr + r < rows && k0 + k < in ? x[(size_t)(tr + r) * xs + k0 + k] : 0.0f;
        }
        for (uint32_t i = tid; i < GEMM_TK * GEMM_TN; i += GEMM_THREADS) {
            uint32_t r = i / GEMM_TK, k = i % GEMM_TK;
            sw[k][r] = to + r < out && k0 + k < in ? w[(size_t)(to + r) * in + k0 + k] : 0.0f;
        }
        __syncthreads();
        uint32_t kn = in - k0 < GEMM_TK ? (uint32_t)(in - k0) : GEMM_TK;
        for (uint32_t k = 0; k < kn; k++) {
            float a[RI], b[4];
            for (uint32_t i = 0; i < RI; i++)
                a[i] = sx[k][ty + 16 * i];
            for (int j = 0; j < 4; j++)
                b[j] = sw[k][tx + 16 * j];
            for (uint32_t i = 0; i < RI; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (uint32_t i = 0; i < RI; i++) {
        uint32_t r = tr + ty + 16 * i;
        for (int j = 0; j < 4; j++) {
            uint32_t o = to + tx + 16 * j;
            if (r < rows && o < out)
                y[(size_t)r * ys + o] = acc[i][j];
        }
    }
}

/* rows: the dense row count, or for groups the total (each group holds at most that). A
 * step of few rows per group (decode) takes 16-row tiles, so a block does not spend three
 * quarters of its multiply-adds on padding rows; the results are the same either way. */
static int dsv4_gemm_launch(dsv4_cuda_blas *b, const float *w, size_t out, size_t in,
                            const float *x, size_t xs, size_t xz, const uint32_t *off,
                            uint32_t groups, uint32_t rows, float *y, size_t ys, size_t yz)
{
    if (rows == 0 || out == 0 || groups == 0)
        return 0;
    bool short_rows = off ? rows <= 16u * groups : rows <= 16u;
    uint32_t tm = short_rows ? 16 : GEMM_TM;
    dim3 grid((unsigned)((out + GEMM_TN - 1) / GEMM_TN), (rows + tm - 1) / tm, groups);
    if (grid.y > 65535 || grid.z > 65535)
        return -EINVAL;
    if (short_rows)
        dsv4_gemm_kernel<16>
            <<<grid, GEMM_THREADS, 0, b->stream>>>(w, out, in, x, xs, xz, off, rows, y, ys, yz);
    else
        dsv4_gemm_kernel<GEMM_TM>
            <<<grid, GEMM_THREADS, 0, b->stream>>>(w, out, in, x, xs, xz, off, rows, y, ys, yz);
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
