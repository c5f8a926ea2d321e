/* t-gpu-engine-device-sampling-matches-host: a CUDA engine (deterministic kernels, decode
 * steps replayed from CUDA graphs) choosing each decode token on the device
 * (dsv4_engine_decode_sample, draws from the requests' seeded rngs) generates the same
 * tokens as the same engine handing out the logits and sampling them on the host with
 * dsv4_sample: greedy and seeded temperature / top-k / top-p requests decoded side by
 * side, first plain, then with logit edits (logit_bias and presence / frequency penalties
 * over each sequence's generated tokens, core/engine/adjust.h) and log-probabilities: the
 * chosen token's and up to 20 alternatives', from the unedited logits, against the host's
 * (the same ids; values within 2e-6, the sums' order differing). The engine refuses an
 * edit outside the vocabulary and more than 20 alternatives (-EINVAL); the CPU engine does
 * not sample on its device: -ENOTSUP. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <errno.h>
#include <math.h>
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

/* With extras: each sequence's logit_bias and penalties, and the log-probabilities it
 * asks for (logprob, top alternatives). */
static const dsv4_logit_bias bias0[2] = {{7, 3.5f}, {1234, -100}}, bias2[1] = {{42, 1.25f}};
static const struct {
    dsv4_logit_adjust adjust;
    bool logprob;
    uint32_t top;
} extras[SEQS] = {
    {{0.5f, 0.25f, bias0, 2}, true, 5},
    {{0, 0.75f, NULL, 0}, true, 0},
    {{1.5f, 0, bias2, 1}, true, 20},
    {{0, 0, NULL, 0}, false, 0},
};

typedef struct run {
    int32_t tok[SEQS][STEPS + 1];
    float logprob[SEQS][STEPS + 1];
    dsv4_token_logprob top[SEQS][STEPS + 1][DSV4_TOP_LOGPROBS_MAX];
} run;

/* Prompt, then STEPS decode steps of SEQS sequences together: the first token sampled on
 * the host from the prefill's logits (as the server does), every later one on the device
 * (device) or on the host from the step's logits; with_extras, edited and with their
 * log-probabilities. */
static void generate(dsv4_engine *e, bool device, bool with_extras, run *out)
{
    uint32_t V = dsv4_engine_vocab(e);
    uint32_t seqs[SEQS], lens[SEQS];
    int32_t prompts[SEQS][PROMPT], next[SEQS];
    const int32_t *tp[SEQS];
    float *logits = malloc(SEQS * (size_t)V * sizeof(float)), *lp[SEQS];
    float *edited = malloc(V * sizeof(float));
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    uint32_t *counts = calloc(V, sizeof(uint32_t)), *idx = malloc(V * sizeof(uint32_t));
    static dsv4_logit_edit edits[SEQS][STEPS + 8];
    dsv4_choice_req reqs[SEQS];
    dsv4_choice got[SEQS];
    dsv4_rng rng[SEQS];
    if (!logits || !edited || !scratch || !counts || !idx)
        bail_out("out of memory");
    for (uint32_t i = 0; i < SEQS; i++) {
        if (dsv4_engine_seq_new(e, &seqs[i]) != 0)
            bail_out("no free sequence");
        dsv4_test_tokens(prompts[i], PROMPT, V, 70 + i);
        tp[i] = prompts[i];
        lens[i] = PROMPT;
        lp[i] = logits + i * (size_t)V;
        dsv4_rng_seed(&rng[i], 1000 + i);
    }
    if (dsv4_engine_prefill(e, SEQS, seqs, tp, lens, DSV4_LOGITS_LAST, lp) != 0)
        bail_out("prefill failed");
    for (uint32_t k = 0; k <= STEPS; k++) {
        /* each sequence's request for token k, from its tokens before k */
        for (uint32_t i = 0; i < SEQS; i++) {
            dsv4_logit_adjust none = {0, 0, NULL, 0};
            const dsv4_logit_adjust *a = with_extras ? &extras[i].adjust : &none;
            reqs[i] = (dsv4_choice_req){
                .params = params[i],
                .edits = edits[i],
                .n_edits = dsv4_logit_adjust_edits(a, V, out->tok[i], k, counts, edits[i]),
                .logprob = with_extras && extras[i].logprob,
                .top_logprobs = with_extras ? extras[i].top : 0};
            next[i] = k ? out->tok[i][k - 1] : 0;
        }
        bool on_device = device && k > 0;
        for (uint32_t i = 0; on_device && i < SEQS; i++)
            reqs[i].draw = dsv4_sample_draw(&params[i], &rng[i]);
        if (k > 0) {
            int rc = on_device ? dsv4_engine_decode_sample(e, SEQS, seqs, next, reqs, got)
                               : dsv4_engine_decode(e, SEQS, seqs, next, logits);
            if (rc != 0)
                bail_out("decode step %u failed (%d)", k, rc);
        }
        for (uint32_t i = 0; i < SEQS; i++) {
            if (on_device) {
                out->tok[i][k] = got[i].token;
                out->logprob[i][k] = got[i].logprob;
                memcpy(out->top[i][k], got[i].top, sizeof(got[i].top));
                continue;
            }
            const float *x = logits + i * (size_t)V;
            dsv4_logit_edits_apply(edited, x, V, reqs[i].edits, reqs[i].n_edits);
            out->tok[i][k] = dsv4_sample(edited, V, &params[i], &rng[i], scratch);
            if (reqs[i].logprob) {
                dsv4_choice c;
                dsv4_sample_logprobs(x, V, out->tok[i][k], reqs[i].top_logprobs, idx, &c);
                out->logprob[i][k] = c.logprob;
                memcpy(out->top[i][k], c.top, reqs[i].top_logprobs * sizeof(*c.top));
            }
        }
    }
    for (uint32_t i = 0; i < SEQS; i++)
        dsv4_engine_seq_free(e, seqs[i]);
    free(logits);
    free(edited);
    free(scratch);
    free(counts);
    free(idx);
}

/* The tokens of sequence i agree; with extras, so do its log-probabilities (ids exactly,
 * values within 2e-6; *worst_p the largest difference). */
static bool same_run(const run *h, const run *d, uint32_t i, bool with_extras, double *worst_p)
{
    bool same = true;
    for (uint32_t k = 0; k <= STEPS; k++) {
        same = same && h->tok[i][k] == d->tok[i][k];
        if (!with_extras || !extras[i].logprob || k == 0)
            continue; /* token 0 is the host's in both runs */
        double diff = fabs((double)h->logprob[i][k] - d->logprob[i][k]);
        for (uint32_t j = 0; j < extras[i].top; j++) {
            same = same && h->top[i][k][j].token == d->top[i][k][j].token;
            double dj = fabs((double)h->top[i][k][j].logprob - d->top[i][k][j].logprob);
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
    plan(2 * SEQS + 3);
    dsv4_test_shape shape = dsv4_test_shape_default();
    shape.vocab = 3001; /* a vocabulary a top-k and a top-p cut can tell apart */
    dsv4_model *m = dsv4_test_model_new(&shape, 5);
    dsv4_registry *reg;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "fp8");
    gpu_engine_conf conf = {DSV4_BACKEND_CUDA, false, DSV4_KV_BF16, 32, 256, SEQS, false};
    dsv4_engine *e = gpu_engine(m, ik, &conf);
    static run host, dev, host_x, dev_x;
    generate(e, false, false, &host);
    generate(e, true, false, &dev);
    generate(e, false, true, &host_x);
    generate(e, true, true, &dev_x);
    for (uint32_t i = 0; i < SEQS; i++) {
        uint32_t distinct = 0;
        for (uint32_t k = 0; k <= STEPS; k++)
            distinct += k == 0 || host.tok[i][k] != host.tok[i][k - 1];
        double worst = 0;
        ok(same_run(&host, &dev, i, false, &worst),
           "T %g top_k %u top_p %g: the same %u tokens sampled on the device as on the host (%u "
           "changes of token)",
           params[i].temperature, params[i].top_k, params[i].top_p, STEPS + 1, distinct);
    }
    for (uint32_t i = 0; i < SEQS; i++) {
        double worst = 0;
        uint32_t edited = 0;
        for (uint32_t k = 0; k <= STEPS; k++)
            edited += host_x.tok[i][k] != host.tok[i][k];
        ok(same_run(&host_x, &dev_x, i, true, &worst),
           "with logit_bias %u, penalties %g / %g (%u of %u tokens changed by them), logprob %d, "
           "%u alternatives: the same tokens and log-probabilities on the device (largest "
           "difference %.2g)",
           extras[i].adjust.n_bias, extras[i].adjust.presence, extras[i].adjust.frequency, edited,
           STEPS + 1, extras[i].logprob, extras[i].top, worst);
    }
    ok(dsv4_engine_samples(e), "the CUDA engine samples on its device");
    uint32_t seq;
    int32_t tok = 1;
    dsv4_choice out;
    dsv4_logit_edit outside = {(int32_t)shape.vocab, 1, 0};
    dsv4_choice_req bad_edit = {.params = params[0], .edits = &outside, .n_edits = 1},
                    bad_top = {.params = params[0], .logprob = true, .top_logprobs = 21};
    if (dsv4_engine_seq_new(e, &seq) != 0)
        bail_out("no free sequence");
    ok(dsv4_engine_decode_sample(e, 1, &seq, &tok, &bad_edit, &out) == -EINVAL &&
           dsv4_engine_decode_sample(e, 1, &seq, &tok, &bad_top, &out) == -EINVAL,
       "an edit outside the vocabulary and 21 alternatives are refused (-EINVAL)");
    dsv4_engine_free(e);
    conf.backend = DSV4_BACKEND_CPU;
    e = gpu_engine(m, ik, &conf);
    dsv4_choice_req plain = {.params = params[0]};
    if (dsv4_engine_seq_new(e, &seq) != 0)
        bail_out("no free sequence");
    ok(!dsv4_engine_samples(e) &&
           dsv4_engine_decode_sample(e, 1, &seq, &tok, &plain, &out) == -ENOTSUP,
       "the CPU engine leaves sampling to the host (-ENOTSUP)");
    dsv4_engine_free(e);
    dsv4_registry_free(reg);
    dsv4_test_model_free(m);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
