/* sample_weight.h: the integer arithmetic of a drawing row, shared by the host sampler
 * (core/engine/sample.c) and the CUDA one (kernels/cuda/sample.cu), so both choose the
 * same token from the same logits bit for bit.
 *
 * A candidate's probability is (float)exp((logit - max) / temperature), computed in double;
 * its weight is that probability in fixed point, floor(p 2^shift), with shift chosen so that
 * k weights (each at most 2^shift: the best candidate's probability is 1) sum below 2^63.
 * The total, the top_p cut and the draw are then integer sums, exact in any order: a
 * device that adds a row in parallel gets the host's bits, and no candidate order is
 * needed but for the cut and the draw themselves. A candidate below 2^-shift of the best
 * (below 1.4e-14 at a vocabulary of 129280) weighs nothing. */
#ifndef DSV4_KERNELS_SAMPLE_WEIGHT_H
#define DSV4_KERNELS_SAMPLE_WEIGHT_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DSV4_SW_FN __host__ __device__ static inline
#else
#define DSV4_SW_FN static inline
#endif

/* The fixed-point shift for k candidates: 63 minus the bits of k. */
DSV4_SW_FN uint32_t dsv4_sample_weight_shift(uint32_t k)
{
    uint32_t bits = 0;
    while (bits < 32 && k >> bits)
        bits++;
    return 63 - bits;
}

/* A candidate's probability under the row's best logit max (NaN for a NaN logit, and for
 * every candidate when max is infinite). */
DSV4_SW_FN float dsv4_sample_prob(float logit, double max, float temperature)
{
    return (float)exp(((double)logit - max) / temperature);
}

/* A probability's weight (0 for NaN). */
DSV4_SW_FN uint64_t dsv4_sample_weight(float prob, uint32_t shift)
{
    /* times a power of two: exact, as ldexp would be, without the call */
    return prob > 0 ? (uint64_t)((double)prob * (double)(1ull << shift)) : 0;
}

/* The weight the kept candidates reach at least: the smallest best-first prefix whose sum
 * is not below it is kept (top_p * total, at least 1; total when top_p is off). */
DSV4_SW_FN uint64_t dsv4_sample_cut(uint64_t total, float top_p)
{
    if (!(top_p > 0 && top_p < 1))
        return total;
    uint64_t bound = (uint64_t)((double)top_p * (double)total);
    return bound ? bound : 1;
}

/* The drawn position in [0, kept): the candidate chosen is the first, best first, whose
 * cumulative weight passes it. */
DSV4_SW_FN uint64_t dsv4_sample_target(double draw, uint64_t kept)
{
    uint64_t r = (uint64_t)(draw * (double)kept);
    return r < kept ? r : kept - 1;
}

#undef DSV4_SW_FN
#endif
