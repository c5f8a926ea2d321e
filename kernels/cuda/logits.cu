/* logits.cu: logit edits and log-probabilities on the device (logits.h).
 *
 * Edits: one copy of the step's rows (a device-to-device copy), then one thread per edit
 * writes its token's adjusted logit into the copy, from the original.
 * Log-probabilities: the rows' likeliest tokens from the indexer's exact top-k selection
 * (topk.cu) over the original logits, then one block per row that asks: the row's max
 * (NaN first makes it NaN, as the host's loop does; NaN elsewhere is passed over), the sum
 * of exp(logit - max) in double, and the chosen token's and the alternatives'
 * log-probabilities, all into the rows copied back to the host. */
#include "kernels/cuda/logits.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cub/block/block_reduce.cuh>

#include <math.h>
#include <stdlib.h>

#define LG_THREADS 1024
#define LG_EDIT_THREADS 256

struct dsv4_cuda_logits {
    uint32_t max_rows, vocab;
    float *edited;                   /* [max_rows * vocab] the edited copy */
    dsv4_cuda_logit_edit *edits_dev; /* [edits_cap] */
    uint32_t edits_cap;
    dsv4_cuda_logprobs_row *rows_dev;       /* [max_rows] */
    uint32_t *top_rows_host, *top_rows_dev; /* [max_rows]: vocab for a row that wants
                                               alternatives, else 0 (dsv4_cuda_topk) */
    uint32_t *top_idx;                      /* [max_rows * DSV4_CUDA_LOGPROBS_TOP] */
};

__global__ void lg_edit(const float *logits, float *edited, uint32_t vocab,
                        const dsv4_cuda_logit_edit *edits, uint32_t n)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    dsv4_cuda_logit_edit e = edits[i];
    size_t at = (size_t)e.row * vocab + (uint32_t)e.token;
    /* adjust.c's arithmetic, in the same order */
    edited[at] = (float)((double)logits[at] + (double)e.bias - e.penalty);
}

struct lg_max_op {
    __device__ float operator()(const float &a, const float &b) const
    {
        return b > a ? b : a;
    }
};

/* One block per row: rows[r] gets what rows[r].want asks for; top_idx holds k ids a row. */
__global__ void __launch_bounds__(LG_THREADS)
    lg_logprobs(const float *logits, uint32_t vocab, const int32_t *tokens, const uint32_t *top_idx,
                uint32_t k, dsv4_cuda_logprobs_row *rows)
{
    typedef cub::BlockReduce<float, LG_THREADS> max_reduce;
    typedef cub::BlockReduce<double, LG_THREADS> sum_reduce;
    __shared__ union {
        typename max_reduce::TempStorage max;
        typename sum_reduce::TempStorage sum;
    } tmp;
    __shared__ double max_s, log_sum_s;
    uint32_t r = blockIdx.x, t = threadIdx.x, want = rows[r].want;
    if (want == 0)
        return;
    const float *x = logits + (size_t)r * vocab;
    float m = -INFINITY;
    for (uint32_t j = t; j < vocab; j += LG_THREADS)
        m = x[j] > m ? x[j] : m;
    m = max_reduce(tmp.max).Reduce(m, lg_max_op());
    if (t == 0)
        max_s = x[0] != x[0] ? (double)x[0] : (double)m;
    __syncthreads();
    double max = max_s, sum = 0;
    for (uint32_t j = t; j < vocab; j += LG_THREADS)
        sum += exp((double)x[j] - max);
    sum = sum_reduce(tmp.sum).Sum(sum);
    if (t == 0)
        log_sum_s = log(sum);
    __syncthreads();
    double log_sum = log_sum_s;
    int32_t tok = tokens[r];
    if (t == 0 && tok >= 0 && (uint32_t)tok < vocab)
        rows[r].logprob = (float)((double)x[tok] - max - log_sum);
    if (t < want - 1) {
        uint32_t id = top_idx[(size_t)r * k + t];
        rows[r].top_id[t] = id < vocab ? (int32_t)id : -1;
        rows[r].top_logprob[t] = id < vocab ? (float)((double)x[id] - max - log_sum) : -INFINITY;
    }
}

extern "C" dsv4_cuda_logits *dsv4_cuda_logits_new(uint32_t max_rows, uint32_t vocab)
{
    size_t n = (size_t)max_rows * vocab;
    if (max_rows == 0 || vocab == 0 || n >= (size_t)INT32_MAX)
        return NULL;
    dsv4_cuda_logits *w = (dsv4_cuda_logits *)calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->max_rows = max_rows;
    w->vocab = vocab;
    w->top_rows_host = (uint32_t *)calloc(max_rows, sizeof(uint32_t));
    bool ok = w->top_rows_host && cudaMalloc(&w->edited, n * sizeof(float)) == cudaSuccess &&
              cudaMalloc(&w->rows_dev, max_rows * sizeof(*w->rows_dev)) == cudaSuccess &&
              cudaMalloc(&w->top_rows_dev, max_rows * sizeof(uint32_t)) == cudaSuccess &&
              cudaMalloc(&w->top_idx, (size_t)max_rows * DSV4_CUDA_LOGPROBS_TOP *
                                          sizeof(uint32_t)) == cudaSuccess;
    if (!ok) {
        dsv4_cuda_logits_free(w);
        return NULL;
    }
    return w;
}

extern "C" void dsv4_cuda_logits_free(dsv4_cuda_logits *w)
{
    if (!w)
        return;
    cudaFree(w->edited);
    cudaFree(w->edits_dev);
    cudaFree(w->rows_dev);
    cudaFree(w->top_rows_dev);
    cudaFree(w->top_idx);
    free(w->top_rows_host);
    free(w);
}

/* Room for n edits on the device (the old buffer is freed once the device is done with
 * it: cudaFree waits). */
static int lg_reserve(dsv4_cuda_logits *w, uint32_t n)
{
    if (n <= w->edits_cap)
        return 0;
    uint32_t cap = w->edits_cap ? w->edits_cap : 1024;
    while (cap < n)
        cap = cap > UINT32_MAX / 2 ? n : 2 * cap;
    cudaFree(w->edits_dev);
    w->edits_dev = NULL;
    w->edits_cap = 0;
    if (cudaMalloc(&w->edits_dev, (size_t)cap * sizeof(*w->edits_dev)) != cudaSuccess)
        return -ENOMEM;
    w->edits_cap = cap;
    return 0;
}

extern "C" int dsv4_cuda_logits_edit(dsv4_cuda_logits *w, const float *logits_dev, uint32_t n,
                                     const dsv4_cuda_logit_edit *edits, uint32_t n_edits,
                                     const float **edited_p, void *stream)
{
    if (n > w->max_rows)
        return -EINVAL;
    for (uint32_t i = 0; i < n_edits; i++)
        if (edits[i].row >= n || edits[i].token < 0 || (uint32_t)edits[i].token >= w->vocab)
            return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    int rc = lg_reserve(w, n_edits);
    if (rc == 0 && n > 0)
        rc = dsv4_cuda_status(cudaMemcpyAsync(w->edited, logits_dev,
                                              (size_t)n * w->vocab * sizeof(float),
                                              cudaMemcpyDeviceToDevice, st));
    /* from pageable memory: returns once the edits are staged */
    if (rc == 0 && n_edits > 0)
        rc = dsv4_cuda_status(cudaMemcpyAsync(w->edits_dev, edits, n_edits * sizeof(*edits),
                                              cudaMemcpyHostToDevice, st));
    if (rc == 0 && n_edits > 0) {
        lg_edit<<<(n_edits + LG_EDIT_THREADS - 1) / LG_EDIT_THREADS, LG_EDIT_THREADS, 0, st>>>(
            logits_dev, w->edited, w->vocab, w->edits_dev, n_edits);
        rc = dsv4_cuda_launch_status();
    }
    *edited_p = w->edited;
    return rc;
}

extern "C" int dsv4_cuda_logprobs(dsv4_cuda_logits *w, const float *logits_dev, uint32_t n,
                                  const int32_t *tokens_dev, dsv4_cuda_logprobs_row *rows,
                                  void *stream)
{
    if (n > w->max_rows)
        return -EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (rows[i].want > 1 + DSV4_CUDA_LOGPROBS_TOP)
            return -EINVAL;
        uint32_t top = rows[i].want ? rows[i].want - 1 : 0;
        w->top_rows_host[i] = top ? w->vocab : 0;
        k = top > k ? top : k;
    }
    int rc = dsv4_cuda_status(
        cudaMemcpyAsync(w->rows_dev, rows, n * sizeof(*rows), cudaMemcpyHostToDevice, st));
    if (rc == 0 && k > 0) {
        rc = dsv4_cuda_status(cudaMemcpyAsync(w->top_rows_dev, w->top_rows_host,
                                              n * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
        if (rc == 0)
            rc = dsv4_cuda_topk(logits_dev, w->vocab, w->top_rows_dev, n, k, w->top_idx, st);
    }
    if (rc == 0) {
        lg_logprobs<<<n, LG_THREADS, 0, st>>>(logits_dev, w->vocab, tokens_dev, w->top_idx,
                                              k ? k : 1, w->rows_dev);
        rc = dsv4_cuda_launch_status();
    }
    if (rc == 0)
        rc = dsv4_cuda_status(
            cudaMemcpyAsync(rows, w->rows_dev, n * sizeof(*rows), cudaMemcpyDeviceToHost, st));
    return rc;
}
