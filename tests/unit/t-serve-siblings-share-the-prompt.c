/* t-serve-siblings-share-the-prompt: the choices of one request (dsv4_server_submit_choices)
 * compute their prompt once. With pages of 16 tokens a 71-token prompt's share point is
 * 64: each later choice starts from 64 cached tokens the first computed, and every choice
 * gets exactly the tokens it gets alone (seeded sampling, seed + i). The same choices as
 * separate requests arriving together share it the same way (the later ones follow the
 * first, t-serve-arrivals-share-a-prefix-in-flight has the rest of that). The first choice
 * publishes the prefix while it runs: with max_running 1 a later choice, admitted only when
 * the first has ended, still finds the state at 64 (an ending request leaves only its
 * newest snapshot). Sharing fails safe: a cancelled first choice lets the others go to
 * compute the prompt themselves; a cancelled later choice ends alone; a second round finds
 * everything cached. Choices that score their prompt (prompt_logprobs) get choice 0's
 * events, bit for bit those of scoring alone, then its prefix; with max_tokens 0 they are
 * never admitted. A pool so small that choices retract, and a host tier, change no token.
 * After each run the pool holds only what the cache holds, and a flush frees every page
 * and state slot. */
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define CHOICES 4
#define LEN 71
#define SHARE 64
#define NEW 40

static int32_t prompt[LEN], other[20];
static dsv4_th_req ref[CHOICES], blocker; /* blocker: holds the engine while choices are queued */

static const dsv4_gen_params plain = {
    .max_tokens = NEW, .temperature = 1.0f, .top_p = 1, .seed = 11, .ignore_eos = true};

/* The prompt events of each choice, and of choice 0 scoring alone. */
static dsv4_gen_event events[CHOICES][DSV4_TH_MAX_TOKENS], ref_events[DSV4_TH_MAX_TOKENS];

/* plain scoring its prompt with 2 alternatives a token, generating max_tokens. */
static dsv4_gen_params scoring(uint32_t max_tokens)
{
    dsv4_gen_params p = plain;
    p.max_tokens = max_tokens;
    p.prompt_logprobs = p.logprobs = true;
    p.top_logprobs = 2;
    return p;
}

/* The choices under p into got: one request (as_one), or CHOICES requests of one choice
 * each, choice i with seed + i. */
static void submit_all(dsv4_server *srv, dsv4_th_req *got, bool as_one, const dsv4_gen_params *p)
{
    memset(got, 0, CHOICES * sizeof(*got));
    for (uint32_t i = 0; i < CHOICES; i++)
        got[i].prompt_events = p->prompt_logprobs ? events[i] : NULL;
    if (as_one) {
        if (dsv4_th_try_submit_choices(srv, got, CHOICES, prompt, LEN, p) != 0)
            bail_out("submit_choices failed");
        return;
    }
    for (uint32_t i = 0; i < CHOICES; i++) {
        dsv4_gen_params q = *p;
        q.seed += i;
        dsv4_th_submit(srv, &got[i], prompt, LEN, &q);
    }
}

/* Whether each choice got the events choice 0 gets scoring alone: bit for bit. */
static bool events_as_alone(const dsv4_th_req *got)
{
    bool same = true;
    for (uint32_t i = 0; i < CHOICES; i++) {
        bool s = got[i].n_prompt_events == LEN - 1;
        for (uint32_t t = 0; s && t < LEN - 1; t++) {
            const dsv4_gen_event *a = &events[i][t], *b = &ref_events[t];
            s = a->token == b->token && memcmp(&a->logprob, &b->logprob, sizeof(float)) == 0 &&
                a->n_top == b->n_top && memcmp(a->top, b->top, a->n_top * sizeof(*a->top)) == 0;
        }
        if (!s)
            diag("choice %u: %u prompt events, not those scored alone", i, got[i].n_prompt_events);
        same = same && s;
    }
    return same;
}

static void wait_all(dsv4_th_req *got)
{
    dsv4_th_wait((dsv4_th_req *[]){&got[0], &got[1], &got[2], &got[3]}, CHOICES);
}

/* Whether the choices in mask ran to NEW tokens, each the same as alone. */
static bool same_as_alone(const dsv4_th_req *got, unsigned mask)
{
    bool same = true;
    for (uint32_t i = 0; i < CHOICES; i++)
        if (mask & (1u << i)) {
            bool s = got[i].end.kind == DSV4_EV_DONE && got[i].n_tokens == NEW &&
                     dsv4_th_same_tokens(&got[i], &ref[i]);
            if (!s)
                diag("choice %u: %u tokens, not those it gets alone", i, got[i].n_tokens);
            same = same && s;
        }
    return same;
}

static bool cached_are(const dsv4_th_req *got, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3)
{
    uint32_t want[CHOICES] = {c0, c1, c2, c3};
    bool as = true;
    for (uint32_t i = 0; i < CHOICES; i++) {
        if (got[i].end.cached_tokens != want[i])
            diag("choice %u: %u cached tokens, %u expected", i, got[i].end.cached_tokens, want[i]);
        as = as && got[i].end.cached_tokens == want[i];
    }
    return as;
}

int main(void)
{
    plan(24);
    dsv4_th_init(21);
    dsv4_test_tokens(prompt, LEN, dsv4_th_model()->cfg.vocab_size, 5);
    dsv4_test_tokens(other, 20, dsv4_th_model()->cfg.vocab_size, 6);
    /* a prefill chunk of 16: the first choice needs 5 steps to reach the share point */
    dsv4_th_server big = {.max_running = 8, .prefill_chunk = 16, .state_slots = 12, .n_pages = 64};
    dsv4_th_req got[CHOICES];
    for (uint32_t i = 0; i < CHOICES; i++) {
        dsv4_server *srv = dsv4_th_start(&big);
        dsv4_gen_params p = plain;
        p.seed += i;
        memset(&ref[i], 0, sizeof(ref[i]));
        dsv4_th_submit(srv, &ref[i], prompt, LEN, &p);
        dsv4_th_wait((dsv4_th_req *[]){&ref[i]}, 1);
        dsv4_server_stop(srv, 0);
    }
    ok(!dsv4_th_same_tokens(&ref[0], &ref[1]), "alone, choices 0 and 1 differ (seeds 11, 12)");
    dsv4_server *srv = dsv4_th_start(&big);
    dsv4_gen_params scored = scoring(1);
    memset(&got[0], 0, sizeof(got[0]));
    got[0].prompt_events = ref_events;
    dsv4_th_submit(srv, &got[0], prompt, LEN, &scored);
    dsv4_th_wait((dsv4_th_req *[]){&got[0]}, 1);
    dsv4_server_stop(srv, 0);
    is_int(got[0].n_prompt_events, LEN - 1, "alone, choice 0 scores %u prompt tokens", LEN - 1);

    dsv4_metrics_reset();
    srv = dsv4_th_start(&big);
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    submit_all(srv, got, false, &plain);
    dsv4_th_release();
    wait_all(got);
    ok(same_as_alone(got, 0xf) && cached_are(got, 0, SHARE, SHARE, SHARE),
       "four requests of one choice arriving together: the later three follow the first");
    ok(dsv4_th_holds_only_the_cache(srv), "separate requests: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    dsv4_metrics_reset();
    srv = dsv4_th_start(&big);
    submit_all(srv, got, true, &plain);
    wait_all(got);
    ok(same_as_alone(got, 0xf), "one request of four choices: each gets the tokens it gets alone");
    ok(cached_are(got, 0, SHARE, SHARE, SHARE),
       "choices 1-3 start from the 64 tokens choice 0 computed");
    is_int(dsv4_metric_get(DSV4_M_PREFIX_HIT_TOKENS), 3 * SHARE, "and the hits are counted");

    /* the second round finds the prompt cached: nobody waits for choice 0 */
    submit_all(srv, got, true, &plain);
    wait_all(got);
    ok(same_as_alone(got, 0xf) && cached_are(got, SHARE, SHARE, SHARE, SHARE),
       "a second round: every choice starts from the cache");
    ok(dsv4_th_holds_only_the_cache(srv), "shared: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* one at a time: a later choice runs after choice 0 ended, and still starts at 64 */
    dsv4_th_server one = big;
    one.max_running = 1;
    srv = dsv4_th_start(&one);
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    submit_all(srv, got, true, &plain);
    dsv4_server_cancel(srv, got[2].id);
    dsv4_th_release();
    wait_all(got);
    ok(same_as_alone(got, 0xb) && got[2].end.finish == DSV4_FINISH_ABORT && got[2].n_tokens == 0,
       "max_running 1, choice 2 cancelled while it waits: it ends alone, the others run");
    ok(got[1].end.cached_tokens == SHARE && got[3].end.cached_tokens == SHARE,
       "choices 1 and 3, admitted after choice 0 ended, start from the state at 64 it published "
       "(%u, %u)",
       got[1].end.cached_tokens, got[3].end.cached_tokens);
    ok(dsv4_th_holds_only_the_cache(srv), "max_running 1: nothing held past the cache");

    /* choice 0 cancelled before it computed anything: the others compute the prompt */
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    submit_all(srv, got, true, &plain);
    dsv4_server_cancel(srv, got[0].id);
    dsv4_th_release();
    wait_all(got);
    ok(got[0].end.finish == DSV4_FINISH_ABORT && got[0].n_tokens == 0 && same_as_alone(got, 0xe),
       "choice 0 cancelled while it waits: choices 1-3 go on without it, tokens as alone");
    ok(got[1].end.cached_tokens == 0, "choice 1 computed the prompt itself");
    ok(dsv4_th_holds_only_the_cache(srv),
       "after the cancelled first choice: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* every choice scores its prompt: choices 1-3 get choice 0's events and the prefix */
    srv = dsv4_th_start(&big);
    scored = scoring(NEW);
    submit_all(srv, got, true, &scored);
    wait_all(got);
    ok(same_as_alone(got, 0xf) && cached_are(got, 0, SHARE, SHARE, SHARE),
       "four choices with prompt_logprobs: the tokens as alone, choices 1-3 from 64 cached");
    ok(events_as_alone(got), "and each has every prompt token's event, as scored alone");
    dsv4_server_stop(srv, 0);

    /* scoring only (max_tokens 0, echo's scoring call): choices 1-3 compute nothing */
    dsv4_metrics_reset();
    srv = dsv4_th_start(&big);
    scored = scoring(0);
    submit_all(srv, got, true, &scored);
    wait_all(got);
    bool ended = true;
    for (uint32_t i = 0; i < CHOICES; i++)
        ended = ended && got[i].end.kind == DSV4_EV_DONE && got[i].n_tokens == 0 &&
                got[i].end.finish == DSV4_FINISH_LENGTH;
    ok(ended && events_as_alone(got),
       "max_tokens 0: every choice ends with every prompt token's event, as scored alone");
    is_int(dsv4_metric_get(DSV4_M_PREFIX_QUERY_TOKENS), LEN,
           "and only choice 0 was ever admitted (the others computed nothing)");
    ok(dsv4_th_holds_only_the_cache(srv), "scoring: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* 8 pages of 16 tokens: a choice grows to 7 (4 of them shared), so choices admitted
     * beside each other retract */
    dsv4_th_server small = big;
    small.n_pages = 8;
    dsv4_metrics_reset();
    srv = dsv4_th_start(&small);
    submit_all(srv, got, true, &plain);
    wait_all(got);
    ok(dsv4_metric_get(DSV4_M_RETRACTIONS) > 0 && same_as_alone(got, 0xf),
       "a pool of 8 pages: choices retract (%lld times), the tokens as alone",
       (long long)dsv4_metric_get(DSV4_M_RETRACTIONS));
    ok(dsv4_th_holds_only_the_cache(srv), "small pool: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* a host tier under the small pool: evicted shared pages reload bit for bit */
    static const char *const tier[] = {
        "write_policy", "write_through", "host_size", "1M", "host_slots", "8", NULL};
    small.hostcache = "async";
    small.hostcache_set = tier;
    srv = dsv4_th_start(&small);
    submit_all(srv, got, true, &plain);
    wait_all(got);
    submit_all(srv, got, true, &plain);
    wait_all(got);
    ok(same_as_alone(got, 0xf), "async host tier, 8 pages, two rounds: the tokens as alone");
    ok(dsv4_th_holds_only_the_cache(srv), "host tier: nothing held past the cache");
    dsv4_server_stop(srv, 0);
    dsv4_th_fini();
    return done_testing();
}
