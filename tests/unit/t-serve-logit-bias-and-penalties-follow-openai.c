/* t-serve-logit-bias-and-penalties-follow-openai: logit_bias and presence and frequency
 * penalties. A reference decodes the same prompt through an engine of its own (on the
 * server's backend: CUDA where a GPU answers, deterministic kernels) and, before
 * each choice, sets the logit of every token named in logit_bias or generated so far to
 * logit + bias - (count * frequency + presence) (written out here, not through
 * core/engine/adjust.c), then picks greedily or draws with an rng seeded as the server
 * seeds a request's. The server's tokens equal the reference's for positive and negative
 * penalties and biases, greedy and sampled, alone and batched with others; the penalties
 * change the greedy answer (the test model repeats itself without them), a bias of 100
 * makes its token every answer and one of -100 keeps its token out; logprobs stay the
 * model's own, and so do the top_logprobs alternatives (the reference's highest logits of
 * the unadjusted row, ties to the lower id); nothing to adjust gives the plain tokens. */
#include <stdlib.h>
#include <string.h>

#include "core/engine/engine.h"
#include "core/engine/sample.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define LEN 21
#define NEW 40

static int32_t prompt[LEN];
static const dsv4_th_server cfg = {
    .max_running = 4, .prefill_chunk = 64, .state_slots = 6, .n_pages = 48};

#define TOP 5

typedef struct reference {
    int32_t tokens[NEW];
    float logprobs[NEW];              /* of the model's own logits */
    dsv4_token_logprob top[NEW][TOP]; /* the model's TOP likeliest tokens */
} reference;

/* The reference's adjusted logits: each token of the vocabulary looked up in the bias and
 * counted among the generated ones. */
static void adjust(float *out, const float *logits, uint32_t V, const int32_t *gen, uint32_t n,
                   const dsv4_gen_params *p)
{
    for (uint32_t t = 0; t < V; t++) {
        uint32_t count = 0;
        double bias = 0;
        bool named = false;
        for (uint32_t j = 0; j < n; j++)
            count += gen[j] == (int32_t)t;
        for (uint32_t j = 0; j < p->n_logit_bias; j++)
            if (p->logit_bias[j].token == (int32_t)t) {
                bias = p->logit_bias[j].bias;
                named = true;
            }
        double penalty = count ? (double)count * p->frequency_penalty + p->presence_penalty : 0;
        out[t] = count || named ? (float)((double)logits[t] + bias - penalty) : logits[t];
    }
}

static reference decode_reference(dsv4_engine *eng, const dsv4_gen_params *p)
{
    uint32_t V = dsv4_th_model()->cfg.vocab_size, seq, len = LEN;
    float *logits = malloc(V * sizeof(float)), *pen = malloc(V * sizeof(float));
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    if (!logits || !pen || !scratch || dsv4_engine_seq_new(eng, &seq) != 0)
        bail_out("reference: out of memory or sequences");
    const int32_t *tp = prompt;
    if (dsv4_engine_prefill(eng, 1, &seq, &tp, &len, DSV4_LOGITS_LAST, &logits) != 0)
        bail_out("reference prefill failed");
    dsv4_rng rng;
    dsv4_rng_seed(&rng, p->seed);
    dsv4_sample_params sp = {p->temperature, p->top_p, p->top_k};
    reference ref;
    for (uint32_t t = 0; t < NEW; t++) {
        adjust(pen, logits, V, ref.tokens, t, p);
        ref.tokens[t] = dsv4_sample(pen, V, &sp, &rng, scratch);
        ref.logprobs[t] = dsv4_th_logprob(logits, V, ref.tokens[t]);
        dsv4_th_top(logits, V, TOP, ref.top[t]);
        if (t + 1 < NEW && dsv4_engine_decode(eng, 1, &seq, &ref.tokens[t], logits) != 0)
            bail_out("reference decode failed");
    }
    dsv4_engine_seq_free(eng, seq);
    free(logits);
    free(pen);
    free(scratch);
    return ref;
}

static void serve(dsv4_th_req *req, const dsv4_gen_params *p)
{
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_gen_event *events = req->token_events;
    memset(req, 0, sizeof(*req));
    req->token_events = events;
    dsv4_th_submit(srv, req, prompt, LEN, p);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
    dsv4_server_stop(srv, 0);
}

static bool same(const dsv4_th_req *got, const reference *want, bool logprobs)
{
    if (got->n_tokens != NEW)
        return false;
    for (uint32_t t = 0; t < NEW; t++)
        if (got->tokens[t] != want->tokens[t] ||
            (logprobs && got->logprobs[t] != want->logprobs[t])) {
            diag("token %u: server %d (%g), reference %d (%g)", t, got->tokens[t], got->logprobs[t],
                 want->tokens[t], want->logprobs[t]);
            return false;
        }
    return true;
}

static uint32_t repeats(const int32_t *t, uint32_t n)
{
    uint32_t r = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < i; j++)
            if (t[j] == t[i]) {
                r++;
                break;
            }
    return r;
}

int main(void)
{
    plan(14);
    dsv4_th_init(9);
    const dsv4_model *m = dsv4_th_model();
    dsv4_test_tokens(prompt, LEN, m->cfg.vocab_size, 41);
    dsv4_registry *reg;
    dsv4_engine *eng = dsv4_test_engine_auto(m, dsv4_test_indexk(&reg, "f32"), 2, 64, DSV4_KV_F32);

    dsv4_gen_params p = {.max_tokens = NEW, .top_p = 1, .ignore_eos = true, .logprobs = true};
    dsv4_th_req plain, req;
    serve(&plain, &p);
    reference ref = decode_reference(eng, &p);
    ok(same(&plain, &ref, true),
       "no penalties: the server's greedy tokens and logprobs are the "
       "reference's (%u of %u tokens repeat one before)",
       repeats(plain.tokens, NEW), NEW);

    p.frequency_penalty = 1.5f;
    p.presence_penalty = 0.5f;
    serve(&req, &p);
    ref = decode_reference(eng, &p);
    ok(same(&req, &ref, true), "frequency 1.5, presence 0.5, greedy: the reference's tokens, "
                               "with the model's own logprobs");
    ok(!dsv4_th_same_tokens(&req, &plain) && repeats(req.tokens, NEW) < repeats(plain.tokens, NEW),
       "they changed the answer and it repeats less (%u repeats against %u)",
       repeats(req.tokens, NEW), repeats(plain.tokens, NEW));

    p.frequency_penalty = -1.0f;
    p.presence_penalty = -2.0f;
    serve(&req, &p);
    ref = decode_reference(eng, &p);
    ok(same(&req, &ref, false), "negative penalties (frequency -1, presence -2): the reference's "
                                "tokens");
    ok(repeats(req.tokens, NEW) > repeats(plain.tokens, NEW),
       "and the answer repeats more (%u repeats)", repeats(req.tokens, NEW));

    p.frequency_penalty = 0.8f;
    p.presence_penalty = 0.3f;
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    p.seed = 77;
    serve(&req, &p);
    ref = decode_reference(eng, &p);
    ok(same(&req, &ref, false), "sampled (temperature 1, top_p 0.9, seed 77) with penalties: the "
                                "reference's draws");
    dsv4_th_req again;
    serve(&again, &p);
    ok(dsv4_th_same_tokens(&req, &again), "and the same seed gives them again");

    /* logit_bias: one token made every answer, the plain first token kept out, and a mixed
     * bias with the penalties, drawn */
    int32_t star = (plain.tokens[0] + 7) % (int32_t)m->cfg.vocab_size;
    dsv4_logit_bias always[1] = {{star, 100}}, never[1] = {{plain.tokens[0], -100}};
    dsv4_gen_params b = {.max_tokens = NEW, .top_p = 1, .ignore_eos = true, .logprobs = true};
    b.logit_bias = always;
    b.n_logit_bias = 1;
    serve(&req, &b);
    ref = decode_reference(eng, &b);
    uint32_t stars = 0;
    for (uint32_t t = 0; t < req.n_tokens; t++)
        stars += req.tokens[t] == star;
    ok(same(&req, &ref, true) && stars == NEW,
       "logit_bias {%d: 100}: every token is %d, as the reference's, logprobs the model's own",
       star, star);
    static dsv4_gen_event events[DSV4_TH_MAX_TOKENS];
    b.top_logprobs = TOP;
    req.token_events = events;
    serve(&req, &b);
    req.token_events = NULL;
    uint32_t top_same = 0, star_first = 0;
    for (uint32_t t = 0; t < req.n_tokens && t < NEW; t++) {
        top_same +=
            events[t].n_top == TOP && !memcmp(events[t].top, ref.top[t], sizeof(ref.top[t]));
        star_first += events[t].top[0].token == star;
    }
    ok(same(&req, &ref, true) && top_same == NEW && star_first < NEW,
       "top_logprobs %d with that bias: at each of %u positions the model's own %d likeliest "
       "tokens and logprobs, as the reference's (%u of them, %u led by %d)",
       TOP, NEW, TOP, top_same, star_first, star);
    b.top_logprobs = 0;
    b.logit_bias = never;
    serve(&req, &b);
    ref = decode_reference(eng, &b);
    uint32_t banned = 0;
    for (uint32_t t = 0; t < req.n_tokens; t++)
        banned += req.tokens[t] == plain.tokens[0];
    ok(same(&req, &ref, false) && banned == 0,
       "logit_bias {%d: -100}: the reference's tokens, none of them %d (the plain first one)",
       plain.tokens[0], plain.tokens[0]);
    dsv4_logit_bias mixed[3] = {{plain.tokens[1], 2.5f}, {plain.tokens[2], -1.25f}, {star, 0.75f}};
    dsv4_gen_params sampled = p, biased = p;
    biased.logit_bias = mixed;
    biased.n_logit_bias = 3;
    dsv4_th_req biased_req;
    serve(&biased_req, &biased);
    ref = decode_reference(eng, &biased);
    ok(same(&biased_req, &ref, false) && !dsv4_th_same_tokens(&biased_req, &again),
       "a mixed logit_bias with the penalties, sampled: the reference's draws, not the ones "
       "without the bias");

    p.frequency_penalty = 0;
    p.presence_penalty = 0;
    p.temperature = 0;
    p.top_p = 1;
    serve(&req, &p);
    ok(dsv4_th_same_tokens(&req, &plain), "penalties of 0 give the plain answer");

    /* one server, the three in one batch: the counters one row leaves must not reach the
     * next, nor a penalty a request that has none */
    dsv4_gen_params greedy = sampled;
    greedy.temperature = 0;
    greedy.top_p = 1;
    reference want_greedy = decode_reference(eng, &greedy);
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_req both[3];
    memset(both, 0, sizeof(both));
    dsv4_th_submit(srv, &both[0], prompt, LEN, &sampled);
    dsv4_th_submit(srv, &both[1], prompt, LEN, &p);
    dsv4_th_submit(srv, &both[2], prompt, LEN, &greedy);
    dsv4_th_wait((dsv4_th_req *[]){&both[0], &both[1], &both[2]}, 3);
    dsv4_server_stop(srv, 0);
    ok(dsv4_th_same_tokens(&both[0], &again) && dsv4_th_same_tokens(&both[1], &plain) &&
           same(&both[2], &want_greedy, false),
       "batched together, the sampled and the greedy penalized requests and a plain one each "
       "answer as alone");
    srv = dsv4_th_start(&cfg);
    memset(both, 0, sizeof(both));
    dsv4_th_submit(srv, &both[0], prompt, LEN, &biased);
    dsv4_th_submit(srv, &both[1], prompt, LEN, &p);
    dsv4_th_wait((dsv4_th_req *[]){&both[0], &both[1]}, 2);
    dsv4_server_stop(srv, 0);
    ok(dsv4_th_same_tokens(&both[0], &biased_req) && dsv4_th_same_tokens(&both[1], &plain),
       "and the biased one batched with a plain one");

    dsv4_engine_free(eng);
    dsv4_registry_free(reg);
    dsv4_th_fini();
    return done_testing();
}
