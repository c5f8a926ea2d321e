/* sample.h: next-token choice on the device (sample.cu), the twin of dsv4_sample
 * (core/engine/sample.h), so that a decode step brings back a token id per sequence
 * instead of a row of vocabulary logits.
 *
 * Same semantics as dsv4_sample: greedy (temperature <= 0 or top_k == 1) is the highest
 * logit, the lowest id among equals; otherwise the candidates are the top_k highest logits
 * best first (ties to the lower id, NaN below everything), their probabilities
 * (float)exp((logit - max) / temperature) computed in double as the CPU does, the
 * smallest best-first prefix whose probability reaches top_p, and the first candidate
 * whose cumulative probability exceeds draw * total. The host draws `draw` from the
 * request's rng exactly when dsv4_sample would (core/engine/sample.h: dsv4_sample_draw),
 * so a seed gives the same stream of draws on both backends.
 *
 * The sums run in double in a fixed order (runs of up to k / 4096 candidates added in
 * order, the run sums scanned in a fixed tree), not the CPU's one-by-one order: a draw
 * that lies within rounding of a cumulative boundary may pick the neighbouring candidate.
 * Everything else is exact and deterministic: the sort is a stable radix sort, the sums'
 * order depends on the vocabulary and top_k only, never on the batch.
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

/* NULL when the device memory cannot be had or the shape is out of range (max_rows *
 * vocab must stay below 2^31). */
dsv4_cuda_sampler *dsv4_cuda_sampler_new(uint32_t max_rows, uint32_t vocab);
void dsv4_cuda_sampler_free(dsv4_cuda_sampler *s);
/* The rows' tokens: tokens_dev[i] for rows[i] (host memory, free to reuse on return),
 * i < n <= max_rows, from logits logits_dev[i * vocab ..]. One fixed sequence for the
 * whole batch (the rows' params up, a prep kernel, one radix sort of the rows that draw,
 * a pick kernel with one block per row); greedy rows skip the sort, and drawing rows with
 * 1 < top_k <= DSV4_CUDA_TOPK_MAX below the vocabulary take the exact top-k selection
 * (dsv4_cuda_topk, the same order) instead. Queues work only: 0, -EINVAL (n too large), or
 * -EIO. */
int dsv4_cuda_sample(dsv4_cuda_sampler *s, const float *logits_dev, uint32_t n,
                     const dsv4_cuda_sample_row *rows, int32_t *tokens_dev, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_SAMPLE_H */
