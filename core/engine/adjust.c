/* adjust.c: logit_bias and presence/frequency penalties on a request's logits
 * (adjust.h). */
#include "core/engine/adjust.h"

#include <string.h>

bool dsv4_logit_adjust_active(const dsv4_logit_adjust *a)
{
    return a->presence != 0 || a->frequency != 0 || a->n_bias > 0;
}

static bool dsv4_in_vocab(int32_t t, uint32_t vocab)
{
    return t >= 0 && (uint32_t)t < vocab;
}

/* Token t's adjusted logit for `count` generations of it and bias. */
static float dsv4_adjusted(const dsv4_logit_adjust *a, float logit, double bias, uint32_t count)
{
    double penalty = count ? (double)count * a->frequency + a->presence : 0;
    return (float)((double)logit + bias - penalty);
}

void dsv4_logit_adjust_apply(float *out, const float *logits, uint32_t vocab,
                             const dsv4_logit_adjust *a, const int32_t *generated, uint32_t n,
                             uint32_t *counts)
{
    memcpy(out, logits, (size_t)vocab * sizeof(float));
    bool penalized = a->presence != 0 || a->frequency != 0;
    for (uint32_t i = 0; penalized && i < n; i++)
        if (dsv4_in_vocab(generated[i], vocab))
            counts[generated[i]]++;
    /* every token once: the one who applies a token's adjustment clears its count, so a
     * generated token with a bias is done here and its later occurrences find 0 */
    for (uint32_t i = 0; i < a->n_bias; i++) {
        int32_t t = a->bias[i].token;
        if (!dsv4_in_vocab(t, vocab))
            continue;
        out[t] = dsv4_adjusted(a, logits[t], a->bias[i].bias, counts[t]);
        counts[t] = 0;
    }
    for (uint32_t i = 0; penalized && i < n; i++) {
        int32_t t = generated[i];
        if (!dsv4_in_vocab(t, vocab) || counts[t] == 0)
            continue;
        out[t] = dsv4_adjusted(a, logits[t], 0, counts[t]);
        counts[t] = 0;
    }
}
