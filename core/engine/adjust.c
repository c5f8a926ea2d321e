/* adjust.c: logit_bias and presence/frequency penalties as edits of a request's logits
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

/* Token t's edit for `count` generations of it and bias. */
static dsv4_logit_edit dsv4_edit(const dsv4_logit_adjust *a, int32_t t, float bias, uint32_t count)
{
    double penalty = count ? (double)count * a->frequency + a->presence : 0;
    return (dsv4_logit_edit){t, bias, penalty};
}

uint32_t dsv4_logit_adjust_edits(const dsv4_logit_adjust *a, uint32_t vocab,
                                 const int32_t *generated, uint32_t n, uint32_t *counts,
                                 dsv4_logit_edit *edits)
{
    uint32_t n_edits = 0;
    bool penalized = a->presence != 0 || a->frequency != 0;
    for (uint32_t i = 0; penalized && i < n; i++)
        if (dsv4_in_vocab(generated[i], vocab))
            counts[generated[i]]++;
    /* every token once: the one who makes a token's edit clears its count, so a generated
     * token with a bias is done here and its later occurrences find 0 */
    for (uint32_t i = 0; i < a->n_bias; i++) {
        int32_t t = a->bias[i].token;
        if (!dsv4_in_vocab(t, vocab))
            continue;
        edits[n_edits++] = dsv4_edit(a, t, a->bias[i].bias, counts[t]);
        counts[t] = 0;
    }
    for (uint32_t i = 0; penalized && i < n; i++) {
        int32_t t = generated[i];
        if (!dsv4_in_vocab(t, vocab) || counts[t] == 0)
            continue;
        edits[n_edits++] = dsv4_edit(a, t, 0, counts[t]);
        counts[t] = 0;
    }
    return n_edits;
}

void dsv4_logit_edits_apply(float *out, const float *logits, uint32_t vocab,
                            const dsv4_logit_edit *edits, uint32_t n)
{
    memcpy(out, logits, (size_t)vocab * sizeof(float));
    for (uint32_t i = 0; i < n; i++) {
        const dsv4_logit_edit *e = &edits[i];
        out[e->token] = (float)((double)logits[e->token] + e->bias - e->penalty);
    }
}
