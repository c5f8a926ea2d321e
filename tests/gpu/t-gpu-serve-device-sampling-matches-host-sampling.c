/* t-gpu-serve-device-sampling-matches-host-sampling: a server on the CUDA backend
 * ([core] device = auto on a machine with a GPU, deterministic kernels) generates the same
 * tokens for seeded requests whether its decode steps sample on the device (requests
 * without logprobs: only token ids come back) or hand the logits to the host sampler
 * (requests with logprobs, which need them): greedy, temperature, top-k and top-p
 * requests, batched together, several seeds each. Requests with presence and frequency
 * penalties take the host path either way (the device sampler has no penalties): their
 * tokens are the same with and without logprobs, and not the unpenalized ones. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <string.h>

#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define KINDS 4
#define SEEDS 3
#define REQS (KINDS * SEEDS)
#define TOKENS 40

static const dsv4_th_server cfg = {
    .max_running = REQS, .prefill_chunk = 64, .state_slots = REQS + 2, .n_pages = 96};

/* Every kind x seed request at once, with or without logprobs, with both penalties at
 * `penalty`. */
static void run(const int32_t *prompt, bool logprobs, float penalty, dsv4_th_req *reqs)
{
    static const struct {
        float temperature, top_p;
        uint32_t top_k;
    } kinds[KINDS] = {{0, 1, 0}, {0.8f, 1, 0}, {1.3f, 1, 8}, {0.7f, 0.9f, 0}};
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_req *ptrs[REQS];
    for (uint32_t i = 0; i < REQS; i++) {
        dsv4_gen_params p = {.max_tokens = TOKENS,
                             .temperature = kinds[i % KINDS].temperature,
                             .top_p = kinds[i % KINDS].top_p,
                             .top_k = kinds[i % KINDS].top_k,
                             .seed = 100 + i / KINDS,
                             .ignore_eos = true,
                             .logprobs = logprobs,
                             .presence_penalty = penalty,
                             .frequency_penalty = penalty};
        memset(&reqs[i], 0, sizeof(reqs[i]));
        dsv4_th_submit(srv, &reqs[i], prompt + i, 11, &p);
        ptrs[i] = &reqs[i];
    }
    dsv4_th_wait(ptrs, REQS);
    dsv4_server_stop(srv, 0);
}

int main(void)
{
    gpu_require();
    plan(4);
    dsv4_th_init(12);
    int32_t prompt[REQS + 11];
    dsv4_test_tokens(prompt, REQS + 11, dsv4_th_model()->cfg.vocab_size, 33);
    static dsv4_th_req dev[REQS], host[REQS], pen_dev[REQS], pen_host[REQS];
    run(prompt, false, 0, dev);
    run(prompt, true, 0, host);
    run(prompt, false, 1.0f, pen_dev);
    run(prompt, true, 1.0f, pen_host);
    uint32_t same = 0, full = 0, differs_from_greedy = 0, pen_same = 0, pen_differs = 0;
    for (uint32_t i = 0; i < REQS; i++) {
        same += dsv4_th_same_tokens(&dev[i], &host[i]);
        full += dev[i].n_tokens == TOKENS && host[i].n_tokens == TOKENS;
        if (i % KINDS != 0)
            differs_from_greedy += !dsv4_th_same_tokens(&dev[i], &dev[i - i % KINDS]);
        pen_same += pen_dev[i].n_tokens == TOKENS && dsv4_th_same_tokens(&pen_dev[i], &pen_host[i]);
        pen_differs += !dsv4_th_same_tokens(&pen_dev[i], &dev[i]);
    }
    ok(full == REQS && same == REQS,
       "%u of %u seeded requests: the same %u tokens sampled on the device as on the host", same,
       REQS, TOKENS);
    ok(differs_from_greedy == REQS - SEEDS,
       "every sampled request left the greedy path (%u of %u): the draws were used",
       differs_from_greedy, REQS - SEEDS);
    ok(pen_same == REQS,
       "with presence and frequency penalties 1: the same tokens with and "
       "without logprobs (%u of %u)",
       pen_same, REQS);
    ok(pen_differs == REQS, "and not the unpenalized ones (%u of %u differ)", pen_differs, REQS);
    dsv4_th_fini();
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
