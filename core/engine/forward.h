/* forward.h: one forward step of DeepSeek-V4 over a batch of sequence chunks on the CPU
 * (reference/dsv4-model-spec.md §3), reading and extending their KV in the pool.
 *
 * A step takes, for each sequence, the next n tokens after the `start` tokens already in
 * its KV. All tokens of the step go through every matmul together; per-token work
 * (attention, compressor state, routing) reads only that token's own sequence. Every
 * kernel has a fixed reduction order, so a token's logits are bitwise the same whatever
 * else is in the step and however its prompt was chunked.
 *
 * The workspace is allocated once for at most max_tokens tokens per step and
 * max_context tokens per sequence; a step allocates nothing.
 */
#ifndef DSV4_CORE_FORWARD_H
#define DSV4_CORE_FORWARD_H

#include <dsv4d/indexk.h>

#include "core/engine/kvpool.h"
#include "core/engine/sample.h"
#include "core/model/model.h"
#include "kernels/kernels.h"

typedef struct dsv4_fwd dsv4_fwd;

typedef struct dsv4_fwd_conf {
    const dsv4_model *model;
    dsv4_kv_pool *pool;
    dsv4_threads *threads;
    const dsv4_indexk_ops *indexk; /* stores and scores index-K rows */
    void *indexk_state;
    uint32_t max_tokens;  /* tokens per step */
    uint32_t max_context; /* tokens per sequence */
} dsv4_fwd_conf;

/* A next token the CUDA forward chooses on the device (kernels/cuda/sample.h and
 * logits.h) as the host would from its logits, instead of handing out the logits. */
typedef struct dsv4_fwd_sample {
    const dsv4_choice_req *req;
    dsv4_choice *out;
} dsv4_fwd_sample;

/* One sequence's part of a step. */
typedef struct dsv4_fwd_seq {
    uint32_t slot;         /* its state slot */
    const uint32_t *pages; /* its pages, covering start + n tokens */
    uint32_t start;        /* tokens already in its KV (position of the first) */
    uint32_t n;            /* tokens in this step */
    const int32_t *tokens; /* [n] */
    float *const *logits;  /* [n] outputs of vocab floats, NULL = not wanted;
                              the array itself may be NULL */

    const dsv4_fwd_sample *sample; /* the token after the last of the n, chosen on the
                                      device; NULL = not wanted. The CUDA forward only:
                                      the engine never hands one to dsv4_fwd_step */
    const dsv4_score_req *scores;  /* [n] rows scored on the device, or NULL. The CUDA
                                      forward only, as sample */
} dsv4_fwd_seq;

/* The geometry the kernels rely on (the loader checks shapes, this checks combinations),
 * for this forward and the CUDA one. 0, or -EINVAL with the reason in err. */
int dsv4_fwd_check_model(const dsv4_model *m, char *err, size_t errlen);
/* NULL with the reason in err. */
dsv4_fwd *dsv4_fwd_new(const dsv4_fwd_conf *conf, char *err, size_t errlen);
void dsv4_fwd_free(dsv4_fwd *fwd);
/* Run one step. 0, -EINVAL when the step exceeds max_tokens/max_context or a token id is
 * out of range, or the indexk plugin's status. */
int dsv4_fwd_step(dsv4_fwd *fwd, const dsv4_fwd_seq *seqs, size_t n_seqs);

#endif
