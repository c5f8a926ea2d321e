/* adjust.h: what a request changes in its logits before each choice of a token, as
 * OpenAI's API defines it:
 *   - logit_bias: a fixed amount added to the logits of the tokens it names;
 *   - presence and frequency penalties: the logit of every token the request has generated
 *     so far lowered by count * frequency_penalty + presence_penalty, count being how often
 *     it was generated (the prompt does not count).
 * A token's adjusted logit is (float)(logit + bias - (count * frequency + presence)),
 * computed in double; tokens neither named nor generated keep theirs. The choice (greedy or
 * drawn) is made from the adjusted logits; a logprob stays the model's own. */
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

/* Whether a changes any logit. */
bool dsv4_logit_adjust_active(const dsv4_logit_adjust *a);

/* out (vocab floats) = logits adjusted by a for a request that generated the n tokens of
 * `generated` (ids outside the vocabulary are skipped, in both). counts: vocab zeroed
 * scratch counters, left zeroed. O(vocab) for the copy, O(n + n_bias) for the rest. */
void dsv4_logit_adjust_apply(float *out, const float *logits, uint32_t vocab,
                             const dsv4_logit_adjust *a, const int32_t *generated, uint32_t n,
                             uint32_t *counts);

#endif
