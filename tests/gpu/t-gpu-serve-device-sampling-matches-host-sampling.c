/* t-gpu-serve-device-sampling-matches-host-sampling: a server on the CUDA backend
 * ([core] device = auto on a machine with a GPU, deterministic kernels) generates the same
 * tokens for seeded requests whether its decode steps choose them on the device (only the
 * tokens and the log-probabilities asked for come back) or hand the logits to the host
 * sampler (dsv4_server_opts.host_sampling): greedy, temperature, top-k and top-p requests,
 * batched together, several seeds each; then the same with presence and frequency
 * penalties, a logit_bias and log-probabilities with alternatives, which the device applies
 * and computes as the host does: the same tokens, the same alternatives, log-probabilities
 * within 2e-6, and not the unadjusted tokens; their decode tokens are all chosen on the
 * device (dsv4d_engine_decode_host_choices_total does not move). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <math.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define KINDS 4
#define SEEDS 3
#define REQS (KINDS * SEEDS)
#define TOKENS 40
#define TOP 5

static dsv4_gen_event events[2][REQS][DSV4_TH_MAX_TOKENS];

/* Every kind x seed request at once, chosen on the device or on the host; with extras,
 * penalties of 1, a logit_bias of one token each and logprobs (TOP alternatives for every
 * other request), their events recorded into events[host]. */
static void run(const int32_t *prompt, bool host, bool extras, dsv4_th_req *reqs)
{
    static const struct {
        float temperature, top_p;
        uint32_t top_k;
    } kinds[KINDS] = {{0, 1, 0}, {0.8f, 1, 0}, {1.3f, 1, 8}, {0.7f, 0.9f, 0}};
    dsv4_th_server cfg = {.max_running = REQS,
                          .prefill_chunk = 64,
                          .state_slots = REQS + 2,
                          .n_pages = 96,
                          .host_sampling = host};
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_req *ptrs[REQS];
    dsv4_logit_bias bias[REQS];
    for (uint32_t i = 0; i < REQS; i++) {
        bias[i] =
            (dsv4_logit_bias){(int32_t)((37 * i + 11) % dsv4_th_model()->cfg.vocab_size), 2.5f};
        dsv4_gen_params p = {.max_tokens = TOKENS,
                             .temperature = kinds[i % KINDS].temperature,
                             .top_p = kinds[i % KINDS].top_p,
                             .top_k = kinds[i % KINDS].top_k,
                             .seed = 100 + i / KINDS,
                             .ignore_eos = true};
        if (extras) {
            p.presence_penalty = p.frequency_penalty = 1.0f;
            p.logit_bias = &bias[i];
            p.n_logit_bias = 1;
            p.logprobs = true;
            p.top_logprobs = i % 2 ? TOP : 0;
        }
        memset(&reqs[i], 0, sizeof(reqs[i]));
        reqs[i].token_events = extras ? events[host][i] : NULL;
        dsv4_th_submit(srv, &reqs[i], prompt + i, 11, &p);
        ptrs[i] = &reqs[i];
    }
    dsv4_th_wait(ptrs, REQS);
    dsv4_server_stop(srv, 0);
}

/* Request i's log-probabilities agree between the device's events and the host's: the
 * same alternatives, values within 2e-6 (*worst_p the largest difference). */
static bool same_logprobs(uint32_t i, double *worst_p)
{
    bool same = true;
    for (uint32_t k = 0; k < TOKENS; k++) {
        const dsv4_gen_event *d = &events[0][i][k], *h = &events[1][i][k];
        double diff = fabs((double)d->logprob - h->logprob);
        same = same && d->n_top == h->n_top && d->n_top == (i % 2 ? TOP : 0);
        for (uint32_t j = 0; same && j < d->n_top; j++) {
            same = d->top[j].token == h->top[j].token;
            double dj = fabs((double)d->top[j].logprob - h->top[j].logprob);
            diff = dj > diff ? dj : diff;
        }
        *worst_p = diff > *worst_p ? diff : *worst_p;
        same = same && diff <= 2e-6;
    }
    return same;
}

int main(void)
{
    gpu_require();
    plan(6);
    dsv4_th_init(12);
    int32_t prompt[REQS + 11];
    dsv4_test_tokens(prompt, REQS + 11, dsv4_th_model()->cfg.vocab_size, 33);
    static dsv4_th_req dev[REQS], host[REQS], x_dev[REQS], x_host[REQS];
    run(prompt, false, false, dev);
    run(prompt, true, false, host);
    int64_t host_choices = dsv4_metric_get(DSV4_M_HOST_CHOICES),
            device_choices = dsv4_metric_get(DSV4_M_DEVICE_CHOICES);
    run(prompt, false, true, x_dev);
    host_choices = dsv4_metric_get(DSV4_M_HOST_CHOICES) - host_choices;
    device_choices = dsv4_metric_get(DSV4_M_DEVICE_CHOICES) - device_choices;
    run(prompt, true, true, x_host);
    uint32_t same = 0, full = 0, differs_from_greedy = 0, x_same = 0, x_differs = 0, x_lp = 0;
    double worst = 0;
    for (uint32_t i = 0; i < REQS; i++) {
        same += dsv4_th_same_tokens(&dev[i], &host[i]);
        full += dev[i].n_tokens == TOKENS && host[i].n_tokens == TOKENS;
        if (i % KINDS != 0)
            differs_from_greedy += !dsv4_th_same_tokens(&dev[i], &dev[i - i % KINDS]);
        x_same += x_dev[i].n_tokens == TOKENS && dsv4_th_same_tokens(&x_dev[i], &x_host[i]);
        x_differs += !dsv4_th_same_tokens(&x_dev[i], &dev[i]);
        x_lp += same_logprobs(i, &worst);
    }
    ok(full == REQS && same == REQS,
       "%u of %u seeded requests: the same %u tokens chosen on the device as on the host", same,
       REQS, TOKENS);
    ok(differs_from_greedy == REQS - SEEDS,
       "every sampled request left the greedy path (%u of %u): the draws were used",
       differs_from_greedy, REQS - SEEDS);
    ok(x_same == REQS,
       "with penalties 1, a logit_bias and logprobs: the same tokens on the device as on the "
       "host (%u of %u)",
       x_same, REQS);
    ok(x_differs == REQS, "and not the unadjusted ones (%u of %u differ)", x_differs, REQS);
    ok(host_choices == 0 && device_choices >= (TOKENS - 1) * REQS,
       "the adjusted requests' decode tokens were all chosen on the device (%lld there, %lld "
       "on the host)",
       (long long)device_choices, (long long)host_choices);
    ok(x_lp == REQS,
       "their log-probabilities and %d alternatives (every other request) agree: %u of %u "
       "(largest difference %.2g)",
       TOP, x_lp, REQS, worst);
    dsv4_th_fini();
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
