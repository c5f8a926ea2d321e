/* model_gemm.cuh: what the GEMMs of model_gemm.cu and the wgmma kernel of
 * model_gemm_wgmma.cu share (nvcc only, internal to the two): the handle, the rows a
 * tensor-core launch covers, the inputs' bf16 hi/lo split and the wgmma launch. */
#ifndef DSV4_KERNELS_CUDA_MODEL_GEMM_CUH
#define DSV4_KERNELS_CUDA_MODEL_GEMM_CUH

#include "kernels/cuda/model.h"

#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <mutex>

#include "kernels/cuda/bf16_split.cuh"
#include "kernels/cuda/device_once.cuh"
#include "kernels/cuda/status.cuh"

#define GEMM_ROW_SPLIT 64                 /* blocks sharing one output tile's rows */
#define WG_OUT 64                         /* outputs a block (wgmma's M) */
#define WG_SPLIT_BYTES ((size_t)64 << 20) /* the inputs split once (dsv4_cuda_blas split) */

/* A launch's set-up (shared-memory opt-ins, occupancy), once a device (device_once.cuh).
 * setup(&value) returns 0 or a negative errno; dsv4_gemm_setup runs it on the first call
 * for the current device and returns its status, and its value in *value_p, then and
 * after. */
struct dsv4_gemm_once {
    std::once_flag once[DSV4_CUDA_MAX_DEVICES];
    int rc[DSV4_CUDA_MAX_DEVICES];
    int value[DSV4_CUDA_MAX_DEVICES];
};

template <typename Setup> static int dsv4_gemm_setup(dsv4_gemm_once &o, Setup setup, int *value_p)
{
    int dev, rc = dsv4_cuda_once_per_device(
                 o.once, [&](int d) { o.rc[d] = setup(&o.value[d]); }, &dev);
    if (rc != 0)
        return rc;
    if (value_p)
        *value_p = o.value[dev];
    return o.rc[dev];
}

struct dsv4_cuda_blas {
    cublasHandle_t handle;
    cudaStream_t stream;
    void *workspace;
    float *part; /* deterministic mode: the tensor-core splits' sums (MMA_PART_FLOATS) */
    /* the wgmma launch's inputs split once into bf16 hi and lo (WG_SPLIT_BYTES): a launch
     * whose rows' split fits reads its B from here rather than splitting per output tile */
    void *split;
    uint32_t sms; /* multiprocessors (a persistent wgmma launch's blocks: dsv4_wg_run) */
    bool deterministic;
    /* the device code has the wgmma kernel (sm_90a) and the driver encodes tensor maps */
    PFN_cuTensorMapEncodeTiled_v12000 encode;
};

__device__ static inline uint32_t dsv4_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The rows a tensor-core launch covers and where its sums go. */
struct dsv4_mma_rows {
    const uint32_t *off; /* grouped: group g's rows [off[g], off[g + 1]); NULL: dense, batched */
    uint32_t w0, w1;     /* the rows of this launch (grouped: of all groups together) */
    uint32_t ksplit;
    uint32_t kgrid; /* blocks a row tile's splits take: ksplit (one split each) or 1 (every
                       split in turn, added in split order in registers: the same bits) */
    float *part;    /* ksplit > 1: each split's sums, [split][problem][w1 - w0][out]
                       (dsv4_mma_sum_kernel adds them); NULL: added to Y (zeroed before) with
                       atomics */
};

/* Whether R's k splits add into Y with atomics (Y zeroed before), rather than into R.part or
 * in registers. */
static inline bool dsv4_mma_adds_to_y(const dsv4_mma_rows &R)
{
    return R.kgrid > 1 && !R.part;
}

/* Y[p][w0 + r][o] = 0 for r < rows, o < out, problem p = blockIdx.y, by the blocks of a launch
 * along x (y is row w0's address): split-K's start where its splits add into Y. */
__device__ static inline void dsv4_mma_zero_rows(float *y, size_t out, uint32_t rows, size_t ys,
                                                 size_t yz)
{
    for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x)
        for (size_t o = threadIdx.x; o < out; o += blockDim.x)
            y[blockIdx.y * yz + (size_t)r * ys + o] = 0.0f;
}

/* The rows of R zeroed where its splits add into Y (dsv4_mma_adds_to_y), in a launch of their
 * own; probs problems yz apart. */
int dsv4_mma_zero(cudaStream_t st, const dsv4_mma_rows &R, float *y, size_t out, size_t ys,
                  size_t yz, uint32_t probs);

/* The weights and inputs that the wgmma kernel takes, where the device code has it. */
struct dsv4_wg_call {
    const dsv4_cuda_blas *b;
    const void *w;
    const float *x;
    size_t xs, xz;
};

/* The tensor-map encoder where the device code has the wgmma kernel (sm_90a) and the driver
 * hands it out, else NULL (dsv4_cuda_blas_new, never while a step is being captured). */
PFN_cuTensorMapEncodeTiled_v12000 dsv4_wg_encoder(void);

/* Whether dsv4_wg_run splits the inputs of a launch of these rows once, into the split
 * buffer, before its GEMM. */
bool dsv4_wg_splits_inputs(size_t out, size_t in, uint32_t groups, uint32_t rows_each, size_t probs,
                           size_t rows);

/* Y = W X for BF16 weights on wgmma (c.b->encode set), with dsv4_mma_kernel's rows, splits
 * and sums; c.x NULL where the rows come split in the split buffer already, and Y's rows
 * zeroed where the splits add into them (a launch of rows from 0 that dsv4_wg_splits_inputs
 * splits once; else -EINVAL). */
int dsv4_wg_run(cudaStream_t st, const dsv4_wg_call &c, size_t out, size_t in,
                const dsv4_mma_rows &R, uint32_t groups, uint32_t rows_each, float *y, size_t ys,
                size_t yz);

/* Rows w0 .. w0 + rows of probs problems' inputs (x: rows xs apart, problems xz apart; in a
 * multiple of 4, rows 16-byte aligned) split into bf16 hi and lo parts (dsv4_mma_split's
 * bits) as [problem][hi, lo][rows][in] at split (WG_SPLIT_BYTES at most); with y set, those
 * rows of Y zeroed too (row w0's address, out outputs a row, rows ys and problems yz apart). */
int dsv4_wg_split_inputs(cudaStream_t st, const float *x, size_t xs, size_t xz, size_t in,
                         uint32_t w0, uint32_t rows, uint32_t probs, void *split, float *y,
                         size_t out, size_t ys, size_t yz);

/* Fast mode's k split for a dense or batched wgmma launch of one row tile, or 0 where it
 * has more (the caller's rule then). */
uint32_t dsv4_wg_stream_ksplit(const dsv4_wg_call &c, size_t out, size_t in, uint32_t groups,
                               uint32_t rows_each, uint32_t rows);

#endif
