/* gemm-cublaslt.c: cuBLASLt as gemm-stream's peer (gemm-cublaslt.h). */
#include "config.h"

/* cublasLt.h declares one function with an empty parameter list */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <cuda_runtime.h>
#include <errno.h>
#include <stdlib.h>

#include "bench/bench-util.h"
#include "bench/gemm-cublaslt.h"

#define PEER_WORKSPACE ((size_t)32 << 20)
#define PEER_ALGOS 8

struct gemm_peer {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace;
};

gemm_peer *gemm_peer_new(void *stream)
{
    gemm_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->stream = (cudaStream_t)stream;
    if (cublasLtCreate(&p->lt) != CUBLAS_STATUS_SUCCESS) {
        free(p);
        return NULL;
    }
    if (cudaMalloc(&p->workspace, PEER_WORKSPACE) != cudaSuccess) {
        cublasLtDestroy(p->lt);
        free(p);
        return NULL;
    }
    return p;
}

void gemm_peer_free(gemm_peer *p)
{
    if (!p)
        return;
    cudaFree(p->workspace);
    cublasLtDestroy(p->lt);
    free(p);
}

/* A column-major layout of rows x cols (leading dimension ld), `batch` of them `stride`
 * elements apart. */
static cublasLtMatrixLayout_t peer_layout(cudaDataType_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld, int32_t batch, int64_t stride)
{
    cublasLtMatrixLayout_t l;
    if (cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                         sizeof(batch)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                         sizeof(stride)) != CUBLAS_STATUS_SUCCESS) {
        cublasLtMatrixLayoutDestroy(l);
        return NULL;
    }
    return l;
}

double gemm_peer_time(gemm_peer *p, const uint16_t *w_dev, const uint16_t *x_dev, float *y_dev,
                      size_t mats, size_t out, size_t in, uint32_t rows, size_t x_stride,
                      size_t y_stride, int iters, int *algos)
{
    /* Column-major, cuBLAS sees Y^T (out x rows) = op_T(W as in x out) X^T (in x rows). */
    *algos = 0;
    double best = -ENOTSUP;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t a =
        peer_layout(CUDA_R_16BF, in, out, (int64_t)in, (int32_t)mats, (int64_t)(out * in));
    cublasLtMatrixLayout_t b =
        peer_layout(CUDA_R_16BF, in, rows, (int64_t)x_stride, (int32_t)mats, (int64_t)in);
    cublasLtMatrixLayout_t c =
        peer_layout(CUDA_R_32F, out, rows, (int64_t)y_stride, (int32_t)mats, (int64_t)out);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    size_t ws = PEER_WORKSPACE;
    cublasLtMatmulPreference_t pref = NULL;
    if (!a || !b || !c ||
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof(ws)) != CUBLAS_STATUS_SUCCESS) {
        best = -EIO;
        goto out;
    }
    cublasLtMatmulHeuristicResult_t found[PEER_ALGOS];
    int n_found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(p->lt, op, a, b, c, c, pref, PEER_ALGOS, found, &n_found) !=
        CUBLAS_STATUS_SUCCESS)
        goto out;
    const float one = 1.0f, zero = 0.0f;
    for (int k = 0; k < n_found; k++) {
        if (found[k].state != CUBLAS_STATUS_SUCCESS)
            continue;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        uint64_t t0 = 0;
        for (int it = -2; st == CUBLAS_STATUS_SUCCESS && it < iters; it++) {
            if (it == 0) {
                if (cudaStreamSynchronize(p->stream) != cudaSuccess)
                    break;
                t0 = bench_now_ns();
            }
            st = cublasLtMatmul(p->lt, op, &one, w_dev, a, x_dev, b, &zero, y_dev, c, y_dev, c,
                                &found[k].algo, p->workspace, PEER_WORKSPACE, p->stream);
        }
        if (st != CUBLAS_STATUS_SUCCESS || cudaStreamSynchronize(p->stream) != cudaSuccess)
            continue;
        double dt = (double)(bench_now_ns() - t0) * 1e-9 / iters;
        (*algos)++;
        if (best < 0 || dt < best)
            best = dt;
    }
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (op)
        cublasLtMatmulDescDestroy(op);
    cublasLtMatrixLayout_t layouts[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            cublasLtMatrixLayoutDestroy(layouts[i]);
    return best;
}
