/* sample.h: next-token choice on the device (sample.cu), the twin of dsv4_sample
 * (core/engine/sample.h), so that a decode step brings back a token id per sequence
 * instead of a row of vocabulary logits.
 *
 * Same semantics as dsv4_sample, the same token bit for bit: greedy (temperature <= 0 or
 * top_k == 1) is the highest logit, the lowest id among equals; otherwise the candidates
 * are the top_k highest logits (ties to the lower id, NaN below everything), weighed in
 * exact integers by their probabilities (kernels/sample_weight.h, computed in double as
 * the CPU does), the smallest best-first prefix reaching the top_p cut is kept, and the
 * first kept candidate whose cumulative weight passes the draw is chosen. The host draws
 * `draw` from the request's rng exactly when dsv4_sample would (core/engine/sample.h:
 * dsv4_sample_draw), so a seed gives the same stream of draws on both backends. Integer
 * sums are exact in any order, so nothing depends on the batch either.
 *
 * Plain C types only, as in model.h: *_dev pointers are device memory, stream is a
 * cudaStream_t passed as void *.
 */
#ifndef DSV4_KERNELS_CUDA_SAMPLE_H
#define DSV4_KERNELS_CUDA_SAMPLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One row's sampling request (the fields of dsv4_sample_params, and the draw). */
typedef struct dsv4_cuda_sample_row {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0, 1); anything else: off */
    uint32_t top_k;    /* 0 = off; 1 = greedy */
    uint32_t skip;     /* nonzero: no token for this row (its token is -1) */
    double draw;       /* uniform in [0, 1); not read when greedy */
} dsv4_cuda_sample_row;

/* The sampler's device workspace for up to max_rows rows of a vocabulary of vocab. */
typedef struct dsv4_cuda_sampler dsv4_cuda_sampler;

/* NULL when the device memory cannot be had or the shape is out of range (max_rows up to
 * 65535, vocab up to 2^31). */
dsv4_cuda_sampler *dsv4_cuda_sampler_new(uint32_t max_rows, uint32_t vocab);
void dsv4_cuda_sampler_free(dsv4_cuda_sampler *s);
/* The rows' tokens: tokens_dev[i] for rows[i] (host memory, free to reuse on return),
 * i < n <= max_rows, from logits logits_dev[i * vocab ..]. One fixed sequence for the
 * whole batch (the rows' params up; when a row draws, two passes over every multiprocessor
 * and radix selections with one block a row; greedy rows a reduction). Queues work only:
 * 0, -EINVAL (n too large), or -EIO. */
int dsv4_cuda_sample(dsv4_cuda_sampler *s, const float *logits_dev, uint32_t n,
                     const dsv4_cuda_sample_row *rows, int32_t *tokens_dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_SAMPLE_H */
