/* sample.h: next-token choice from logits: greedy, or seeded sampling with temperature,
 * top-k and top-p over a portable PRNG (xoshiro256**, seeded through splitmix64), so a
 * seed gives the same tokens on every machine. */
#ifndef DSV4_CORE_SAMPLE_H
#define DSV4_CORE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/engine/adjust.h"

typedef struct dsv4_rng {
    uint64_t s[4];
} dsv4_rng;

void dsv4_rng_seed(dsv4_rng *rng, uint64_t seed);
uint64_t dsv4_rng_next(dsv4_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double dsv4_rng_uniform(dsv4_rng *rng);

typedef struct dsv4_sample_params {
    float temperature; /* <= 0: greedy */
    float top_p;       /* (0, 1]; 1 = off */
    uint32_t top_k;    /* 0 = off */
} dsv4_sample_params;

/* Whether p asks for the highest logit (temperature <= 0 or top_k == 1): no draw. */
bool dsv4_sample_greedy(const dsv4_sample_params *p);
/* The uniform draw dsv4_sample takes from rng for p: one dsv4_rng_uniform when p is not
 * greedy, else none (0). A sampler elsewhere (the CUDA one, kernels/cuda/sample.h) takes
 * its draws here, so a seed gives the same stream of draws on every backend. */
double dsv4_sample_draw(const dsv4_sample_params *p, dsv4_rng *rng);

/* Scratch the sampler needs for a vocabulary of n: the weights, the ranking and its
 * radix sort's buffers. */
#define DSV4_SAMPLE_SCRATCH(n) ((size_t)(n) * (sizeof(uint64_t) + 4 * sizeof(uint32_t)))

/* The chosen token id. Greedy picks the highest logit (the lowest id among equals).
 * Otherwise candidates are the top_k highest logits (ties to the lower id), weighed in
 * fixed point (kernels/sample_weight.h: their probabilities under temperature, exact
 * integers); the smallest best-first prefix whose weight reaches top_p of the total is
 * kept, and one is drawn from rng: the first whose cumulative weight passes draw * kept.
 * scratch holds DSV4_SAMPLE_SCRATCH(n) bytes, 8-byte aligned. */
int32_t dsv4_sample(const float *logits, uint32_t n, const dsv4_sample_params *p, dsv4_rng *rng,
                    void *scratch);

/* Alternatives a choice reports at most (OpenAI's limit for top_logprobs). */
#define DSV4_TOP_LOGPROBS_MAX 20

/* A token and the model's log-probability of it at a position. */
typedef struct dsv4_token_logprob {
    int32_t token;
    float logprob;
} dsv4_token_logprob;

/* A next-token choice the CUDA engine makes on its device (dsv4_engine_decode_sample): the
 * host's dsv4_sample of the row's logits after the edits, with its draw. */
typedef struct dsv4_choice_req {
    dsv4_sample_params params;
    double draw;                  /* dsv4_sample_draw's uniform for params */
    const dsv4_logit_edit *edits; /* the request's adjustments (adjust.h), each token once */
    uint32_t n_edits;
    bool logprob;          /* report the chosen token's log-probability */
    uint32_t top_logprobs; /* and this many likeliest tokens' (<= DSV4_TOP_LOGPROBS_MAX) */
} dsv4_choice_req;

/* What the choice gave: the token and, when asked, log-probabilities from the model's own
 * logits (before the edits): the token's, and the top_logprobs likeliest tokens' best first
 * (ties to the lower id). */
typedef struct dsv4_choice {
    int32_t token;
    float logprob;
    dsv4_token_logprob top[DSV4_TOP_LOGPROBS_MAX];
} dsv4_choice;

/* A row's log-probabilities as the host computes them (the maximum and the sum of
 * exponentials in double; the device's kernels match this): token's into out->logprob and
 * the k likeliest tokens' into out->top, best first (ties to the lower id; k <=
 * DSV4_TOP_LOGPROBS_MAX); out->token is not written. idx is scratch for n ids. */
void dsv4_sample_logprobs(const float *logits, uint32_t n, int32_t token, uint32_t k, uint32_t *idx,
                          dsv4_choice *out);

/* A row of logits scored on the engine's device instead of handed out (a prompt's own
 * log-probabilities): out receives token's log-probability under the row and its
 * top_logprobs likeliest tokens, as a dsv4_choice's logprob and top (out->token is not
 * written). */
typedef struct dsv4_score_req {
    int32_t token;
    uint32_t top_logprobs; /* <= DSV4_TOP_LOGPROBS_MAX */
    dsv4_choice *out;      /* NULL = this row is not scored */
} dsv4_score_req;

#endif
