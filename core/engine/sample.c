/* sample.c: greedy and seeded top-k/top-p sampling (sample.h). */
#include "core/engine/sample.h"

#include <math.h>

#include "kernels/kernels.h"
#include "kernels/sample_weight.h"

static uint64_t dsv4_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dsv4_rng_seed(dsv4_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = dsv4_splitmix64(&seed);
}

static uint64_t dsv4_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t dsv4_rng_next(dsv4_rng *rng)
{
    uint64_t *s = rng->s, r = dsv4_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = dsv4_rotl(s[3], 45);
    return r;
}

double dsv4_rng_uniform(dsv4_rng *rng)
{
    return (double)(dsv4_rng_next(rng) >> 11) * 0x1.0p-53;
}

bool dsv4_sample_greedy(const dsv4_sample_params *p)
{
    return p->temperature <= 0 || p->top_k == 1;
}

double dsv4_sample_draw(const dsv4_sample_params *p, dsv4_rng *rng)
{
    return dsv4_sample_greedy(p) ? 0 : dsv4_rng_uniform(rng);
}

void dsv4_sample_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, uint32_t *idx,
                          dsv4_choice *out)
{
    double max = logits[0], sum = 0;
    for (uint32_t i = 1; i < n; i++)
        max = logits[i] > max ? logits[i] : max;
    for (uint32_t i = 0; i < n; i++)
        sum += exp(logits[i] - max);
    double log_sum = log(sum);
    out->logprob = (float)(logits[token] - max - log_sum);
    dsv4_k_topk(logits, n, k, idx);
    for (uint32_t i = 0; i < k; i++)
        out->top[i] =
            (dsv4_token_logprob){(int32_t)idx[i], (float)(logits[idx[i]] - max - log_sum)};
}

/* The first index of the highest logit, as the loop `if (x[i] > x[best]) best = i` from
 * best = 0 finds it (so index 0 when x[0] is NaN, and NaN elsewhere never wins), in two
 * passes the compiler vectorises: the highest value (`a > b ? a : b` is what a vector max
 * computes, NaN skipped), then the first index holding it (-0 equals +0, as in the loop). */
static uint32_t dsv4_argmax(const float *x, uint32_t n)
{
    if (x[0] != x[0])
        return 0;
    float best = x[0];
    for (uint32_t i = 1; i < n; i++)
        best = x[i] > best ? x[i] : best;
    uint32_t i = 0;
    while (!(x[i] == best))
        i++;
    return i;
}

/* Candidates from which the whole vocabulary is ranked instead of heap-selected, and the
 * share of it (1 / SAMPLE_RANK_SHARE) from which the same holds: the radix sort costs ~9 ns
 * a candidate whatever k, the heap more once k is a sixteenth of them (2-core CI box, 320
 * candidates: all kept 12.3 us by heap, 3.0 ranked; 16 kept 1.4 and 3.1; 4096: 256 kept
 * 38.8 and 38.4). */
#define SAMPLE_RANK_FROM 1024
#define SAMPLE_RANK_SHARE 16

int32_t dsv4_sample(const float *logits, uint32_t n, const dsv4_sample_params *p, dsv4_rng *rng,
                    void *scratch)
{
    uint64_t *w = scratch;
    uint32_t *idx = (uint32_t *)(w + n);
    if (dsv4_sample_greedy(p))
        return (int32_t)dsv4_argmax(logits, n);
    uint32_t k = p->top_k && p->top_k < n ? p->top_k : n;
    /* the same order either way: the heap keeps a few candidates cheaply, the radix sort
     * ranks a whole vocabulary in linear time (at 129280 entries on the 2-core CI box the
     * heap alone took 36 ms, a whole top_p call with the radix sort 3.4 ms) */
    if (k > SAMPLE_RANK_FROM || (uint64_t)k * SAMPLE_RANK_SHARE >= n)
        dsv4_k_rank(logits, n, idx, idx + n);
    else
        dsv4_k_topk(logits, n, k, idx);

    /* the candidates' weights, best first; integer sums are exact in any order */
    double m = logits[idx[0]];
    uint32_t shift = dsv4_sample_weight_shift(k);
    uint64_t total = 0;
    for (uint32_t i = 0; i < k; i++)
        total += w[i] =
            dsv4_sample_weight(dsv4_sample_prob(logits[idx[i]], m, p->temperature), shift);
    double draw = dsv4_sample_draw(p, rng);
    if (total == 0) /* the best logit is infinite or NaN: no probabilities */
        return (int32_t)idx[0];
    /* kept: the sum of the smallest best-first prefix reaching the top_p cut */
    uint64_t cut = dsv4_sample_cut(total, p->top_p), kept = 0;
    for (uint32_t i = 0; kept < cut && i < k; i++)
        kept += w[i];
    uint64_t r = dsv4_sample_target(draw, kept), acc = 0;
    for (uint32_t i = 0;; i++)
        if (r < (acc += w[i]))
            return (int32_t)idx[i];
}
