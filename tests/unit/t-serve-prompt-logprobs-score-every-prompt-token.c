/* t-serve-prompt-logprobs-score-every-prompt-token: a request with prompt_logprobs gets one
 * PROMPT_TOKEN event for every prompt token after the first, in order and before its
 * first generated token, each the log-probability (and top alternatives) of the token
 * under the logits row of the position before it: bitwise a reference engine's prefill
 * with every row's logits. That holds alone, batched beside plain and scoring requests of
 * other lengths, with prompts spread over many prefill calls (a prefill chunk of 5, a row
 * buffer of 3), when the prompt is already in the prefix cache (it is computed whole,
 * never taken from the cache, and the cache still serves plain requests) and under
 * retraction (a pool too small for all: no event is repeated or lost). The generated
 * tokens are those of the same request without prompt_logprobs. With max_tokens 0 a
 * scoring request ends (LENGTH, no token) once its prompt is scored, a plain one at once. The
 * reference engine runs on the backend the server picks, so on a machine with a GPU this is the
 * CUDA path's test (deterministic kernels: a row's logits do not depend on the batch or the
 * chunking); there the server scores the rows on the device, whose sums may differ from the host's
 * in the last bit (within 2e-6), and with host_sampling on the host from the same rows (bitwise).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/engine.h"
#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define N_REQ 3
#define NEW 40
#define MAX_LEN (70 + NEW + 3)
#define TOP 3

static const uint32_t lens[N_REQ] = {70, 9, 37};
static int32_t prompts[N_REQ][MAX_LEN];

/* The reference: row p of the prompt's logits scores token p + 1. */
typedef struct scores {
    float logprob[MAX_LEN];
    dsv4_token_logprob top[MAX_LEN][TOP];
} scores;
static scores wants[N_REQ];

static void reference(dsv4_engine *eng, const int32_t *prompt, uint32_t len, scores *want)
{
    uint32_t V = dsv4_th_model()->cfg.vocab_size, seq;
    float *rows = malloc((size_t)len * V * sizeof(float));
    if (!rows || dsv4_engine_seq_new(eng, &seq) != 0 ||
        dsv4_engine_prefill(eng, 1, &seq, &prompt, &len, DSV4_LOGITS_ALL, &rows) != 0)
        bail_out("reference prefill failed");
    for (uint32_t t = 1; t < len; t++) {
        const float *row = rows + (size_t)(t - 1) * V;
        want->logprob[t] = dsv4_th_logprob(row, V, prompt[t]);
        dsv4_th_top(row, V, TOP, want->top[t]);
    }
    dsv4_engine_seq_free(eng, seq);
    free(rows);
}

static dsv4_gen_event events[N_REQ][DSV4_TH_MAX_TOKENS];
/* how far a log-probability may be from the reference's: 0 where the server scores rows
 * on the host (the CPU backend, host_sampling), 2e-6 where the device does */
static float tol;

static void clear(dsv4_th_req *req, uint32_t r)
{
    memset(req, 0, sizeof(*req));
    req->prompt_events = events[r];
}

/* The prompt events req recorded are the reference's for prompt, one a token after the
 * first, before any generated one. */
static bool scored_as(const dsv4_th_req *req, const int32_t *prompt, uint32_t len,
                      const scores *want)
{
    if (req->n_prompt_events != len - 1 || req->prompt_after_token) {
        diag("%u prompt events for %u tokens%s", req->n_prompt_events, len,
             req->prompt_after_token ? ", one after a generated token" : "");
        return false;
    }
    for (uint32_t t = 1; t < len; t++) {
        const dsv4_gen_event *ev = &req->prompt_events[t - 1];
        bool same = ev->kind == DSV4_EV_PROMPT_TOKEN && ev->token == prompt[t] &&
                    fabsf(ev->logprob - want->logprob[t]) <= tol && ev->n_top == TOP;
        for (uint32_t k = 0; same && k < TOP; k++)
            same = ev->top[k].token == want->top[t][k].token &&
                   fabsf(ev->top[k].logprob - want->top[t][k].logprob) <= tol;
        if (!same) {
            diag("token %u: %d %.9g, reference %d %.9g", t, ev->token, (double)ev->logprob,
                 prompt[t], (double)want->logprob[t]);
            return false;
        }
    }
    return true;
}

static bool scored(const dsv4_th_req *req, uint32_t r)
{
    return scored_as(req, prompts[r], lens[r], &wants[r]);
}

static dsv4_gen_params params(bool prompt_logprobs)
{
    return (dsv4_gen_params){.max_tokens = NEW,
                             .top_p = 1,
                             .ignore_eos = true,
                             .logprobs = true,
                             .top_logprobs = TOP,
                             .prompt_logprobs = prompt_logprobs};
}

/* Requests `which` (a bit mask) at once on a fresh server; scoring those in `scoring`. */
static void run(const dsv4_th_server *cfg, unsigned which, unsigned scoring, dsv4_th_req *out)
{
    dsv4_server *srv = dsv4_th_start(cfg);
    dsv4_th_req *wait[N_REQ];
    size_t n = 0;
    for (uint32_t r = 0; r < N_REQ; r++) {
        if (!(which & (1u << r)))
            continue;
        clear(&out[r], r);
        dsv4_gen_params p = params(scoring & (1u << r));
        dsv4_th_submit(srv, &out[r], prompts[r], lens[r], &p);
        wait[n++] = &out[r];
    }
    dsv4_th_wait(wait, n);
    dsv4_server_stop(srv, 0);
}

static bool all_scored(const dsv4_th_req *got, const dsv4_th_req *plain, unsigned scoring)
{
    bool good = true;
    for (uint32_t r = 0; r < N_REQ; r++) {
        good = good && dsv4_th_same_tokens(&got[r], &plain[r]) && got[r].n_tokens == NEW;
        if (scoring & (1u << r))
            good = good && scored(&got[r], r);
        else
            good = good && got[r].n_prompt_events == 0;
    }
    return good;
}

int main(void)
{
    plan(12);
    dsv4_th_init(5);
    const dsv4_model *m = dsv4_th_model();
    for (uint32_t r = 0; r < N_REQ; r++)
        dsv4_test_tokens(prompts[r], lens[r], m->cfg.vocab_size, 300 + r);
    dsv4_registry *reg;
    /* on the server's backend: on a GPU the same deterministic kernels */
    dsv4_engine *eng = dsv4_test_engine_auto(m, dsv4_test_indexk(&reg, "f32"), 2, 64, DSV4_KV_F32);
    for (uint32_t r = 0; r < N_REQ; r++)
        reference(eng, prompts[r], lens[r], &wants[r]);

    bool cuda = dsv4_engine_backend(eng) == DSV4_BACKEND_CUDA;
    diag("backend: %s", cuda ? "cuda (rows scored on the device)" : "cpu");

    dsv4_th_server big = {.max_running = 4, .prefill_chunk = 64, .state_slots = 8, .n_pages = 64};
    dsv4_th_req plain[N_REQ], got[N_REQ];
    for (uint32_t r = 0; r < N_REQ; r++)
        run(&big, 1u << r, 0, plain);

    dsv4_th_server host = big;
    host.host_sampling = true;
    run(&host, 7, 7, got);
    ok(all_scored(got, plain, 7), "scored on the host from the rows (host_sampling): bit for bit");
    tol = cuda ? 2e-6f : 0;

    run(&big, 1, 1, got);
    ok(scored(&got[0], 0) && dsv4_th_same_tokens(&got[0], &plain[0]),
       "alone: %u prompt tokens after the first scored as the reference's rows, the same "
       "generated tokens as without",
       got[0].n_prompt_events);

    run(&big, 7, 5, got);
    ok(all_scored(got, plain, 5), "batched with a plain request: each scoring request's prompt "
                                  "events are the reference's, the plain one gets none");
    run(&big, 7, 7, got);
    ok(all_scored(got, plain, 7), "three scoring requests of 70, 9 and 37 tokens at once");

    dsv4_th_server small_chunk = big;
    small_chunk.prefill_chunk = 5;
    run(&small_chunk, 7, 7, got);
    ok(all_scored(got, plain, 7), "a prefill chunk of 5 tokens");

    dsv4_th_server few_rows = big;
    few_rows.prompt_rows = 3;
    run(&few_rows, 7, 6, got);
    ok(all_scored(got, plain, 6), "3 logits rows a prefill call: scoring requests take fewer "
                                  "tokens a call, a plain one is not held back");

    /* a second turn (turn 1's prompt and answer, then 3 tokens) whose first 96 tokens are
     * in the prefix cache: scored whole all the same */
    int32_t turn2[MAX_LEN];
    uint32_t n2 = lens[0] + NEW + 3;
    memcpy(turn2, prompts[0], lens[0] * sizeof(int32_t));
    memcpy(turn2 + lens[0], plain[0].tokens, NEW * sizeof(int32_t));
    dsv4_test_tokens(turn2 + lens[0] + NEW, 3, m->cfg.vocab_size, 400);
    static scores want2;
    reference(eng, turn2, n2, &want2);
    dsv4_server *srv = dsv4_th_start(&big);
    dsv4_th_req first, again, third;
    clear(&first, 0);
    dsv4_gen_params p = params(false);
    dsv4_th_submit(srv, &first, prompts[0], lens[0], &p);
    dsv4_th_wait((dsv4_th_req *[]){&first}, 1);
    clear(&again, 0);
    p = params(true);
    dsv4_th_submit(srv, &again, turn2, n2, &p);
    dsv4_th_wait((dsv4_th_req *[]){&again}, 1);
    ok(scored_as(&again, turn2, n2, &want2) && again.end.cached_tokens == 0,
       "a second turn with 96 tokens in the prefix cache: scored whole, nothing taken from "
       "the cache");
    clear(&third, 0);
    p = params(false);
    dsv4_th_submit(srv, &third, turn2, n2, &p);
    dsv4_th_wait((dsv4_th_req *[]){&third}, 1);
    ok(third.end.cached_tokens == 96 && dsv4_th_same_tokens(&third, &again),
       "the same turn without prompt_logprobs starts from the cache (%u tokens) and "
       "generates the same tokens",
       third.end.cached_tokens);
    dsv4_server_stop(srv, 0);

    /* 8 pages of 16 tokens: the requests fit alone, not together */
    dsv4_th_server small = big;
    small.n_pages = 8;
    dsv4_metrics_reset();
    run(&small, 7, 7, got);
    ok(dsv4_metric_get(DSV4_M_RETRACTIONS) > 0, "the small pool retracted (%lld times)",
       (long long)dsv4_metric_get(DSV4_M_RETRACTIONS));
    ok(all_scored(got, plain, 7), "and every prompt token was scored once, as the reference's");

    /* max_tokens 0: the prompt's scores and no token; without prompt_logprobs, nothing */
    dsv4_th_req none[2];
    dsv4_metrics_reset();
    srv = dsv4_th_start(&big);
    for (int i = 0; i < 2; i++) {
        clear(&none[i], (uint32_t)i);
        p = params(i == 0);
        p.max_tokens = 0;
        dsv4_th_submit(srv, &none[i], prompts[i], lens[i], &p);
    }
    dsv4_th_wait((dsv4_th_req *[]){&none[0], &none[1]}, 2);
    ok(scored(&none[0], 0) && none[0].n_tokens == 0 && none[0].end.kind == DSV4_EV_DONE &&
           none[0].end.finish == DSV4_FINISH_LENGTH && none[0].end.completion_tokens == 0 &&
           none[1].n_tokens == 0 && none[1].n_prompt_events == 0 &&
           none[1].end.finish == DSV4_FINISH_LENGTH &&
           dsv4_metric_get(DSV4_M_PREFIX_QUERY_TOKENS) == lens[0],
       "max_tokens 0: the prompt scored and no token generated; unscored, it ends at once, "
       "never admitted");
    dsv4_server_stop(srv, 0);

    dsv4_engine_free(eng);
    dsv4_registry_free(reg);
    ok(got[0].end.kind == DSV4_EV_DONE && got[0].end.finish == DSV4_FINISH_LENGTH,
       "the requests ended at max_tokens");
    dsv4_th_fini();
    return done_testing();
}
