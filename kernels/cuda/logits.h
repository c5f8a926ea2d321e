/* logits.h: what the CUDA forward does to a step's logits around the device sampler
 * (sample.h), so that requests with logit adjustments or log-probabilities keep their
 * tokens on the device too:
 *   - edits (core/engine/adjust.h): a copy of the rows with each edited token's logit set
 *     to (float)((double)logit + bias - penalty), the host's arithmetic, for the sampler to
 *     choose from; the step's own logits stay as they are;
 *   - log-probabilities from the step's own logits: per row that asks, the chosen token's
 *     (float)((double)logit - max - log(sum of exp(logit - max))) with the sum in double,
 *     and up to DSV4_CUDA_LOGPROBS_TOP likeliest tokens' (dsv4_cuda_topk's exact order:
 *     higher first, ties to the lower id) with theirs.
 * The host (core/serve/loop.c) adds its exponentials one by one in index order; here a block
 * adds them in a tree, so a log-probability may differ from the host's in its last bit.
 *
 * Plain C types only, as in model.h: *_dev pointers are device memory, stream is a
 * cudaStream_t passed as void *. */
#ifndef DSV4_KERNELS_CUDA_LOGITS_H
#define DSV4_KERNELS_CUDA_LOGITS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSV4_CUDA_LOGPROBS_TOP 20

/* One edit of row `row`'s logit of `token` (each (row, token) at most once a step). */
typedef struct dsv4_cuda_logit_edit {
    uint32_t row;
    int32_t token;
    float bias;
    uint32_t unused;
    double penalty;
} dsv4_cuda_logit_edit;

/* What a row asked for and got: want is 0 (nothing), or 1 + the number of alternatives;
 * the rest is written for rows that want. */
typedef struct dsv4_cuda_logprobs_row {
    uint32_t want;
    float logprob; /* the chosen token's */
    int32_t top_id[DSV4_CUDA_LOGPROBS_TOP];
    float top_logprob[DSV4_CUDA_LOGPROBS_TOP];
} dsv4_cuda_logprobs_row;

/* Workspace for up to max_rows rows of a vocabulary of vocab. */
typedef struct dsv4_cuda_logits dsv4_cuda_logits;

/* NULL when the device memory cannot be had or max_rows * vocab reaches 2^31. */
dsv4_cuda_logits *dsv4_cuda_logits_new(uint32_t max_rows, uint32_t vocab);
void dsv4_cuda_logits_free(dsv4_cuda_logits *w);

/* *edited_p = a device copy of the n rows of logits_dev with the n_edits edits (host
 * memory, free to reuse on return) applied; valid until the next call. Queues work only:
 * 0, -EINVAL (n past max_rows, an edit's row or token out of range), -ENOMEM or -EIO. */
int dsv4_cuda_logits_edit(dsv4_cuda_logits *w, const float *logits_dev, uint32_t n,
                          const dsv4_cuda_logit_edit *edits, uint32_t n_edits,
                          const float **edited_p, void *stream);

/* The log-probabilities rows[i].want asks for (rows: host memory, n <= max_rows) of the
 * chosen tokens tokens_dev[i] (a row whose token is negative gets none) from logits_dev,
 * copied into rows (which must stay valid, and should be page-locked, until the stream has
 * done). Queues work only: 0, -EINVAL or -EIO. */
int dsv4_cuda_logprobs(dsv4_cuda_logits *w, const float *logits_dev, uint32_t n,
                       const int32_t *tokens_dev, dsv4_cuda_logprobs_row *rows, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* DSV4_KERNELS_CUDA_LOGITS_H */
