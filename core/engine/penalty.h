/* penalty.h: OpenAI's presence and frequency penalties. Before a request's next token is
 * chosen, the logit of every token it has generated so far is lowered by
 *     count * frequency_penalty + presence_penalty
 * where count is how often that token was generated (the prompt does not count): positive
 * penalties discourage repeating, negative ones encourage it. The choice (greedy or drawn)
 * is made from the penalized logits; a logprob stays the model's own. */
#ifndef DSV4_CORE_PENALTY_H
#define DSV4_CORE_PENALTY_H

#include <stdbool.h>
#include <stdint.h>

/* Whether either penalty changes anything. */
bool dsv4_penalty_active(float presence, float frequency);

/* out (vocab floats) = logits with the penalties for the n tokens of `generated` applied,
 * each token's as logits[t] - (float)(count * frequency + presence) computed in double
 * (an id outside the vocabulary is skipped). counts: vocab zeroed scratch counters, left
 * zeroed. O(vocab) for the copy, O(n) for the penalties. */
void dsv4_penalize(float *out, const float *logits, uint32_t vocab, const int32_t *generated,
                   uint32_t n, float presence, float frequency, uint32_t *counts);

#endif
