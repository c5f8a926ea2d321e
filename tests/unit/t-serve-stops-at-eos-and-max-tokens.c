/* t-serve-stops-at-eos-and-max-tokens: a request ends with STOP at the model's eos token
 * (delivered as its last TOKEN event, counted in completion_tokens) unless ignore_eos,
 * and with LENGTH at max_tokens; usage counts match what was delivered; logprobs come
 * when asked, and the greedy token's is the largest. The eos token is chosen as the 3rd
 * token the model generates greedily, so the test needs no special model. */
#include <math.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

static int32_t prompt[17];
static const dsv4_th_server cfg = {
    .max_running = 2, .prefill_chunk = 64, .state_slots = 4, .n_pages = 32};

static void run(dsv4_th_req *req, const dsv4_gen_params *p)
{
    dsv4_server *srv = dsv4_th_start(&cfg);
    memset(req, 0, sizeof(*req));
    dsv4_th_submit(srv, req, prompt, 17, p);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
    dsv4_server_stop(srv, 0);
}

int main(void)
{
    plan(7);
    dsv4_th_init(6);
    dsv4_model *m = (dsv4_model *)dsv4_th_model();
    dsv4_test_tokens(prompt, 17, m->cfg.vocab_size, 21);
    dsv4_gen_params p = {.max_tokens = 12, .top_p = 1, .ignore_eos = true};
    dsv4_th_req free_run, stopped, ignored;

    m->cfg.eos_id = -1;
    run(&free_run, &p);
    ok(free_run.end.finish == DSV4_FINISH_LENGTH && free_run.n_tokens == 12 &&
           free_run.end.completion_tokens == 12 && free_run.end.prompt_tokens == 17,
       "LENGTH at max_tokens, with usage");

    int32_t eos = free_run.tokens[2];
    uint32_t first = 0;
    while (free_run.tokens[first] != eos)
        first++;
    m->cfg.eos_id = eos;
    p.ignore_eos = false;
    run(&stopped, &p);
    ok(stopped.end.finish == DSV4_FINISH_STOP && stopped.n_tokens == first + 1 &&
           stopped.tokens[first] == eos && stopped.end.completion_tokens == first + 1,
       "STOP at the eos token, which is the last token delivered (%u tokens)", first + 1);
    ok(memcmp(stopped.tokens, free_run.tokens, (first + 1) * sizeof(int32_t)) == 0,
       "the tokens before it are the free run's");

    p.ignore_eos = true;
    run(&ignored, &p);
    ok(ignored.end.finish == DSV4_FINISH_LENGTH && dsv4_th_same_tokens(&ignored, &free_run),
       "ignore_eos runs on to max_tokens");

    /* logprobs of the first token: greedy, then sampled with several seeds */
    p.max_tokens = 1;
    p.logprobs = true;
    dsv4_th_req lp;
    run(&lp, &p);
    ok(lp.end.kind == DSV4_EV_DONE && lp.n_tokens == 1 && lp.tokens[0] == free_run.tokens[0],
       "a one-token request with logprobs");
    ok(lp.logprobs[0] <= 0 && isfinite(lp.logprobs[0]), "its logprob is a log probability (%g)",
       lp.logprobs[0]);
    p.temperature = 1;
    double best = lp.logprobs[0];
    bool greedy_is_max = true;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        p.seed = seed;
        run(&lp, &p);
        greedy_is_max = greedy_is_max && lp.logprobs[0] <= best;
    }
    ok(greedy_is_max, "sampled tokens never have a higher logprob than the greedy one");
    dsv4_th_fini();
    return done_testing();
}
