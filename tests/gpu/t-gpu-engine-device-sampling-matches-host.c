/* t-gpu-engine-device-sampling-matches-host: a CUDA engine (deterministic kernels, decode
 * steps replayed from CUDA graphs) choosing each decode token on the device
 * (dsv4_engine_decode_sample, draws from the requests' seeded rngs) generates the same
 * tokens as the same engine handing out the logits and sampling them on the host with
 * dsv4_sample: greedy and seeded temperature / top-k / top-p requests decoded side by
 * side. The CPU engine does not sample on its device: -ENOTSUP. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/sample.h"
#include "tests/gpu/gpu-engine.h"
#include "tests/unit/engine-testmodel.h"

#define SEQS 4
#define PROMPT 9
#define STEPS 40

static const dsv4_sample_params params[SEQS] = {
    {0, 1, 0},      /* greedy */
    {0.8f, 1, 0},   /* temperature over the whole vocabulary */
    {1.3f, 1, 20},  /* top-k */
    {0.7f, 0.9f, 0} /* top-p */
};

/* Prompt, then STEPS decode steps of SEQS sequences together: the first token sampled on
 * the host from the prefill's logits (as the server does), every later one on the device
 * (device) or on the host from the step's logits. out[i][k] = sequence i's k-th token. */
static void generate(dsv4_engine *e, bool device, int32_t out[SEQS][STEPS + 1])
{
    size_t V = dsv4_engine_vocab(e);
    uint32_t seqs[SEQS], lens[SEQS];
    int32_t prompts[SEQS][PROMPT], next[SEQS], got[SEQS];
    const int32_t *tp[SEQS];
    float *logits = malloc(SEQS * V * sizeof(float)), *lp[SEQS];
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    dsv4_rng rng[SEQS];
    if (!logits || !scratch)
        bail_out("out of memory");
    for (uint32_t i = 0; i < SEQS; i++) {
        if (dsv4_engine_seq_new(e, &seqs[i]) != 0)
            bail_out("no free sequence");
        dsv4_test_tokens(prompts[i], PROMPT, (uint32_t)V, 70 + i);
        tp[i] = prompts[i];
        lens[i] = PROMPT;
        lp[i] = logits + i * V;
        dsv4_rng_seed(&rng[i], 1000 + i);
    }
    if (dsv4_engine_prefill(e, SEQS, seqs, tp, lens, DSV4_LOGITS_LAST, lp) != 0)
        bail_out("prefill failed");
    for (uint32_t i = 0; i < SEQS; i++)
        out[i][0] = dsv4_sample(lp[i], (uint32_t)V, &params[i], &rng[i], scratch);
    for (uint32_t k = 1; k <= STEPS; k++) {
        double draws[SEQS];
        for (uint32_t i = 0; i < SEQS; i++) {
            next[i] = out[i][k - 1];
            if (device)
                draws[i] = dsv4_sample_draw(&params[i], &rng[i]);
        }
        int rc = device ? dsv4_engine_decode_sample(e, SEQS, seqs, next, params, draws, got)
                        : dsv4_engine_decode(e, SEQS, seqs, next, logits);
        if (rc != 0)
            bail_out("decode step %u failed (%d)", k, rc);
        for (uint32_t i = 0; i < SEQS; i++)
            out[i][k] =
                device ? got[i]
                       : dsv4_sample(logits + i * V, (uint32_t)V, &params[i], &rng[i], scratch);
    }
    for (uint32_t i = 0; i < SEQS; i++)
        dsv4_engine_seq_free(e, seqs[i]);
    free(logits);
    free(scratch);
}

int main(void)
{
    gpu_require();
    plan(SEQS + 2);
    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.vocab = 3001; /* a vocabulary a top-k and a top-p cut can tell apart */
    dsv4_model *m = dsv4_test_model_new(&shape, 5);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "fp8");
    gpu_engine_conf conf = {DSV4_BACKEND_CUDA, false, DSV4_KV_BF16, 32, 256, SEQS};
    dsv4_engine *e = gpu_engine(m, ik, &conf);
    int32_t host[SEQS][STEPS + 1], dev[SEQS][STEPS + 1];
    generate(e, false, host);
    generate(e, true, dev);
    for (uint32_t i = 0; i < SEQS; i++) {
        uint32_t same = 0, distinct = 0;
        for (uint32_t k = 0; k <= STEPS; k++) {
            same += host[i][k] == dev[i][k];
            distinct += k == 0 || host[i][k] != host[i][k - 1];
        }
        ok(same == STEPS + 1,
           "T %g top_k %u top_p %g: %u of %u tokens the same sampled on the device as on the "
           "host (%u changes of token)",
           params[i].temperature, params[i].top_k, params[i].top_p, same, STEPS + 1, distinct);
    }
    ok(dsv4_engine_samples(e), "the CUDA engine samples on its device");
    dsv4_engine_free(e);
    conf.backend = DSV4_BACKEND_CPU;
    e = gpu_engine(m, ik, &conf);
    uint32_t seq;
    int32_t tok = 1, next = -1;
    double draw = 0;
    if (dsv4_engine_seq_new(e, &seq) != 0)
        bail_out("no free sequence");
    ok(!dsv4_engine_samples(e) &&
           dsv4_engine_decode_sample(e, 1, &seq, &tok, params, &draw, &next) == -ENOTSUP,
       "the CPU engine leaves sampling to the host (-ENOTSUP)");
    dsv4_engine_free(e);
    dsv4_registry_free(reg);
    dsv4_test_model_free(m);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
