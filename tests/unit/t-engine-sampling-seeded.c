/* t-engine-sampling-seeded: next-token choice (core/engine/sample.h). The PRNG is
 * splitmix64-seeded xoshiro256** (its first outputs for seed 0 are pinned, so every
 * machine draws the same numbers); greedy takes the highest logit and the lower id on a
 * tie; top-k keeps only the k best; top-p keeps the smallest best-first set reaching p,
 * in exact integer weights (a cut at an exact boundary keeps exactly that prefix); with a
 * seed the draws are reproducible and follow the softmax of logits/temperature. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/sample.h"
#include "kernels/sample_weight.h"
#include "tests/tap.h"

#define V 8

int main(void)
{
    plan(12);
    dsv4_rng rng;
    dsv4_rng_seed(&rng, 0);
    /* splitmix64(0) = e220a8397b1dcdaf, the seed expansion's first word */
    ok(rng.s[0] == 0xe220a8397b1dcdafull, "seed expansion is splitmix64");
    uint64_t first = dsv4_rng_next(&rng), second = dsv4_rng_next(&rng);
    dsv4_rng again;
    dsv4_rng_seed(&again, 0);
    ok(dsv4_rng_next(&again) == first && dsv4_rng_next(&again) == second && first != second,
       "a seed reproduces the stream");
    double u = dsv4_rng_uniform(&rng);
    ok(u >= 0 && u < 1, "uniform in [0, 1)");

    float logits[V] = {0.5f, 2.0f, 2.0f, -1.0f, 1.5f, 0.0f, 1.9f, -3.0f};
    uint64_t scratch[DSV4_SAMPLE_SCRATCH(V) / 8];
    dsv4_sample_params greedy = {0, 1, 0};
    is_int(dsv4_sample(logits, V, &greedy, &rng, scratch), 1,
           "greedy: highest logit, lower id on a tie");

    dsv4_sample_params topk = {1.0f, 1.0f, 3};
    bool only_top = true;
    for (int i = 0; i < 500; i++) {
        int32_t t = dsv4_sample(logits, V, &topk, &rng, scratch);
        only_top = only_top && (t == 1 || t == 2 || t == 6);
    }
    ok(only_top, "top-k 3 draws only from the 3 best");

    /* softmax(1, 2, 2, 1.9 ...) at T = 1: p(1) + p(2) ~ 0.50 of the mass */
    dsv4_sample_params topp = {1.0f, 0.3f, 0};
    bool only_p = true;
    for (int i = 0; i < 500; i++) {
        int32_t t = dsv4_sample(logits, V, &topp, &rng, scratch);
        only_p = only_p && (t == 1 || t == 2);
    }
    ok(only_p, "top-p 0.3 keeps the two best (their mass passes 0.3)");

    /* four equal logits weigh 2^shift each: top_p 0.5 cuts at exactly two of them, and a
     * draw of 0.5 is the first position of the second half of what is kept */
    float even[4] = {1, 1, 1, 1};
    dsv4_sample_params half = {1.0f, 0.5f, 0};
    bool first_two = true;
    for (int i = 0; i < 500; i++) {
        int32_t t = dsv4_sample(even, 4, &half, &rng, scratch);
        first_two = first_two && (t == 0 || t == 1);
    }
    ok(first_two, "top-p 0.5 over four equal candidates keeps exactly the first two");
    uint32_t shift = dsv4_sample_weight_shift(4);
    ok(shift == 60 && dsv4_sample_weight(dsv4_sample_prob(1, 1, 1), shift) == 1ull << 60 &&
           dsv4_sample_cut(4ull << 60, 0.5f) == 2ull << 60 &&
           dsv4_sample_target(0.5, 2ull << 60) == 1ull << 60 &&
           dsv4_sample_target(0.9999999999999999, 3) == 2 &&
           dsv4_sample_weight(dsv4_sample_prob(NAN, 1, 1), 60) == 0,
       "weights: 2^shift for the best, the cut and the draw exact, NaN weighs nothing");

    int counts[V] = {0};
    dsv4_rng_seed(&rng, 7);
    dsv4_sample_params full = {2.0f, 1.0f, 0};
    for (int i = 0; i < 20000; i++)
        counts[dsv4_sample(logits, V, &full, &rng, scratch)]++;
    double z = 0, worst = 0;
    for (int i = 0; i < V; i++)
        z += exp(logits[i] / 2.0);
    for (int i = 0; i < V; i++)
        worst = fmax(worst, fabs(counts[i] / 20000.0 - exp(logits[i] / 2.0) / z));
    ok(worst < 0.02, "draws follow softmax(logits / T) (max deviation %.4f)", worst);

    dsv4_rng a, b;
    dsv4_rng_seed(&a, 99);
    dsv4_rng_seed(&b, 99);
    bool same = true;
    for (int i = 0; i < 50; i++)
        same = same && dsv4_sample(logits, V, &full, &a, scratch) ==
                           dsv4_sample(logits, V, &full, &b, scratch);
    ok(same, "the same seed draws the same tokens");
    dsv4_sample_params k1 = {5.0f, 1.0f, 1};
    is_int(dsv4_sample(logits, V, &k1, &rng, scratch), 1, "top-k 1 is greedy");

    /* greedy against the plain loop over rows full of ties, signed zeros, infinities and
     * NaN (index 0 when the first logit is NaN, NaN elsewhere never chosen) */
    const float pool[] = {NAN, -INFINITY, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, INFINITY};
    enum { N = 300 };
    float row[N];
    uint64_t big[DSV4_SAMPLE_SCRATCH(N) / 8];
    dsv4_rng pick;
    dsv4_rng_seed(&pick, 3);
    int agree = 0;
    for (int t = 0; t < 2000; t++) {
        uint32_t n = 1 + (uint32_t)(dsv4_rng_next(&pick) % N);
        for (uint32_t i = 0; i < n; i++)
            row[i] = pool[dsv4_rng_next(&pick) % (t % 3 == 0 ? 8 : 7)];
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
            if (row[i] > row[best])
                best = i;
        agree += dsv4_sample(row, n, &greedy, &rng, big) == (int32_t)best;
    }
    is_int(agree, 2000, "greedy picks what the plain first-highest loop picks, 2000 rows");
    return done_testing();
}
