/* penalty.c: presence and frequency penalties over a request's generated tokens
 * (penalty.h). */
#include "core/engine/penalty.h"

#include <string.h>

bool dsv4_penalty_active(float presence, float frequency)
{
    return presence != 0 || frequency != 0;
}

void dsv4_penalize(float *out, const float *logits, uint32_t vocab, const int32_t *generated,
                   uint32_t n, float presence, float frequency, uint32_t *counts)
{
    memcpy(out, logits, (size_t)vocab * sizeof(float));
    for (uint32_t i = 0; i < n; i++)
        if (generated[i] >= 0 && (uint32_t)generated[i] < vocab)
            counts[generated[i]]++;
    /* each distinct token once: the first of its occurrences applies it and clears its
     * count, so the later ones find 0 */
    for (uint32_t i = 0; i < n; i++) {
        int32_t t = generated[i];
        if (t < 0 || (uint32_t)t >= vocab || counts[t] == 0)
            continue;
        out[t] = logits[t] - (float)((double)counts[t] * frequency + presence);
        counts[t] = 0;
    }
}
