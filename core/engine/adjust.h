/* adjust.h: what a request changes in its logits before each choice of a token, as
 * OpenAI's API defines it:
 *   - logit_bias: a fixed amount added to the logits of the tokens it names;
 *   - presence and frequency penalties: the logit of every token the request has generated
 *     so far lowered by count * frequency_penalty + presence_penalty, count being how often
 *     it was generated (the prompt does not count).
 * A token's adjusted logit is (float)(logit + bias - (count * frequency + presence)),
 * computed in double; tokens neither named nor generated keep theirs. The choice (greedy or
 * drawn) is made from the adjusted logits; a logprob stays the model's own.
 *
 * The adjustment of one step is a list of edits, one per token it touches, which the host
 * applies to a row of logits (dsv4_logit_edits_apply) or the CUDA forward to its device
 * rows (kernels/cuda/logits.h), with the same arithmetic. */
#ifndef DSV4_CORE_ADJUST_H
#define DSV4_CORE_ADJUST_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dsv4_logit_bias {
    int32_t token;
    float bias;
} dsv4_logit_bias;

typedef struct dsv4_logit_adjust {
    float presence, frequency;   /* penalties; 0 = off */
    const dsv4_logit_bias *bias; /* n_bias entries, each token once */
    uint32_t n_bias;
} dsv4_logit_adjust;

/* One token's adjustment: its logit becomes (float)((double)logit + bias - penalty). */
typedef struct dsv4_logit_edit {
    int32_t token;
    float bias;
    double penalty;
} dsv4_logit_edit;

/* Whether a changes any logit. */
bool dsv4_logit_adjust_active(const dsv4_logit_adjust *a);

/* The edits a makes for a request that generated the n tokens of `generated` (ids outside
 * the vocabulary are skipped, in both), each token once, into edits, which has room for
 * a->n_bias + n; returns their count. counts: vocab zeroed scratch counters, left zeroed.
 * O(n + n_bias). */
uint32_t dsv4_logit_adjust_edits(const dsv4_logit_adjust *a, uint32_t vocab,
                                 const int32_t *generated, uint32_t n, uint32_t *counts,
                                 dsv4_logit_edit *edits);

/* out (vocab floats) = logits with the n edits applied. */
void dsv4_logit_edits_apply(float *out, const float *logits, uint32_t vocab,
                            const dsv4_logit_edit *edits, uint32_t n);

#endif
