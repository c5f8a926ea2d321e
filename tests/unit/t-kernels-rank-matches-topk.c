/* t-kernels-rank-matches-topk: dsv4_k_rank (the radix ranking the sampler uses for a whole
 * vocabulary) gives exactly dsv4_k_topk's order with k = n: higher first, equal scores by
 * the lower index, -0 equal to +0, infinities in place, NaN below everything (NaNs by
 * index), on arrays built to hit every one of those rules and on the sampler's own sizes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

/* splitmix64: a fixed stream, so a failure replays. */
static uint64_t next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A score of kind `mix`: 0 spread floats, 1 few distinct values (ties everywhere), 2 the
 * special values among ties (NaN, +-0, +-inf, denormals), 3 logits of a peaked softmax. */
static float score(uint64_t *x, int mix)
{
    uint64_t r = next(x);
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f, 3.4e38f};
    switch (mix) {
    case 0: return (float)((int64_t)(r >> 11) - (1ll << 52)) * 0x1.0p-40f;
    case 1: return (float)(r % 5) - 2.0f;
    case 2:
        switch (r % 10) {
        case 0: return NAN;
        case 1: return INFINITY;
        case 2: return -INFINITY;
        default: return special[(r >> 8) % 7];
        }
    default: return r % 100 == 0 ? 12.0f + (float)(r % 7) : (float)(r % 1000) * 1e-3f;
    }
}

int main(void)
{
    static const uint32_t sizes[] = {1, 2, 7, 255, 256, 257, 1000, 4099, 129280};
    const size_t n_sizes = sizeof(sizes) / sizeof(sizes[0]);
    plan((int)(4 * n_sizes + 1));
    uint64_t seed = 42;
    for (size_t z = 0; z < n_sizes; z++) {
        uint32_t n = sizes[z];
        float *s = malloc(n * sizeof(*s));
        uint32_t *want = malloc(n * sizeof(*want)), *got = malloc(n * sizeof(*got)),
                 *scratch = malloc(3 * (size_t)n * sizeof(*scratch));
        if (!s || !want || !got || !scratch)
            bail_out("out of memory");
        for (int mix = 0; mix < 4; mix++) {
            for (uint32_t i = 0; i < n; i++)
                s[i] = score(&seed, mix);
            dsv4_k_topk(s, n, n, want);
            memset(got, 0xff, n * sizeof(*got));
            dsv4_k_rank(s, n, got, scratch);
            uint32_t bad = n;
            for (uint32_t i = 0; i < n && bad == n; i++)
                if (got[i] != want[i])
                    bad = i;
            ok(bad == n, "n %u, scores of kind %d: the rank is the top-k order%s", n, mix,
               bad == n ? "" : " (first difference at a position below)");
            if (bad != n)
                diag("position %u: rank gives %u (%a), top-k %u (%a)", bad, got[bad],
                     s[got[bad]], want[bad], s[want[bad]]);
        }
        free(s);
        free(want);
        free(got);
        free(scratch);
    }
    /* -0 and +0 tie (the lower index first), NaNs last by index */
    float edge[6] = {NAN, -0.0f, 0.0f, NAN, -INFINITY, 1.0f};
    uint32_t got[6], scratch[18], want[6] = {5, 1, 2, 4, 0, 3};
    dsv4_k_rank(edge, 6, got, scratch);
    ok(memcmp(got, want, sizeof(want)) == 0, "1, -0, +0, -inf, then the NaNs: %u %u %u %u %u %u",
       got[0], got[1], got[2], got[3], got[4], got[5]);
    return done_testing();
}
