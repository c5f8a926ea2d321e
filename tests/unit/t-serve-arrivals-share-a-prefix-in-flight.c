/* t-serve-arrivals-share-a-prefix-in-flight: requests whose prompts begin alike compute
 * that prefix once even when none of it is cached yet (siblings.c). With pages of 16
 * tokens and prompts of 81 (share point 80), A is base[0..81); B begins with base[0..40)
 * (2 whole pages alike), C with base[0..64) (4 pages), E is A's prompt, D shares nothing.
 * Arriving together, B, C and E follow A and start from the 32, 64 and 80 tokens A
 * computed; D computes its own. A request that arrives while A is still computing the
 * prefix follows it too; with max_running 1 the followers, run after A ended, still find
 * each prefix A put in the cache as it passed. One that arrives when A has computed past
 * the pages they share but still keeps its state at their end (its newest snapshot)
 * starts from that. Sharing fails safe: A cancelled while C follows it lets C compute. Every
 * request gets exactly the tokens it gets alone, and the pool holds only what the cache holds
 * afterwards. The negative control is the cached counts: without following, B, C and E start from 0
 * (nothing was cached when they came). */
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define N 5
#define LEN 81
#define NEW 24

enum { A, B, C, D, E };
static int32_t prompts[N][LEN], other[20];
static dsv4_th_req ref[N], blocker, gated;
static bool gate_shut;

static const dsv4_gen_params plain = {
    .max_tokens = NEW, .temperature = 1.0f, .top_p = 1, .seed = 31, .ignore_eos = true};

/* Prompt i's request draws with seed + i; held: it holds the engine thread at its first
 * token (dsv4_th_hold). */
static void submit_as(dsv4_server *srv, dsv4_th_req *got, uint32_t i, bool held)
{
    dsv4_gen_params p = plain;
    p.seed += i;
    memset(&got[i], 0, sizeof(got[i]));
    if (held)
        dsv4_th_hold(&got[i]);
    dsv4_th_submit(srv, &got[i], prompts[i], LEN, &p);
}

static void submit(dsv4_server *srv, dsv4_th_req *got, uint32_t i)
{
    submit_as(srv, got, i, false);
}

/* A second blocker's hook: holds the engine at its first token while the gate is shut. */
static void gate_hook(dsv4_th_req *req)
{
    dsv4_th_lock();
    while (gate_shut)
        dsv4_th_cond_wait();
    dsv4_th_unlock();
    req->hook = NULL;
}

static void gate_set(bool shut)
{
    dsv4_th_lock();
    gate_shut = shut;
    dsv4_th_signal();
    dsv4_th_unlock();
}

/* With the engine held: A and a gated blocker arrive in one step (the blocker first); in
 * the next, the blocker's prefill ends and A's starts, and the gate holds the engine with
 * A running, short of a page. */
static void start_a_and_hold(dsv4_server *srv, dsv4_th_req *got)
{
    memset(&gated, 0, sizeof(gated));
    gated.hook = gate_hook;
    gate_set(true);
    dsv4_gen_params p = {.max_tokens = 2, .top_p = 1, .ignore_eos = true};
    dsv4_th_submit(srv, &gated, other, 20, &p);
    submit(srv, got, A);
    dsv4_th_release();
    dsv4_th_wait_tokens(&gated, 1);
}

/* Whether the requests in mask ran to NEW tokens, each the same as alone. */
static bool same_as_alone(const dsv4_th_req *got, unsigned mask)
{
    bool same = true;
    for (uint32_t i = 0; i < N; i++)
        if (mask & (1u << i)) {
            bool s = got[i].end.kind == DSV4_EV_DONE && got[i].n_tokens == NEW &&
                     dsv4_th_same_tokens(&got[i], &ref[i]);
            if (!s)
                diag("request %c: %u tokens, not those it gets alone", 'A' + i, got[i].n_tokens);
            same = same && s;
        }
    return same;
}

/* Whether the requests in mask started from the cached tokens in want. */
static bool cached_are(const dsv4_th_req *got, unsigned mask, const uint32_t *want)
{
    bool as = true;
    for (uint32_t i = 0; i < N; i++)
        if (mask & (1u << i) && got[i].end.cached_tokens != want[i]) {
            diag("request %c: %u cached tokens, %u expected", 'A' + i, got[i].end.cached_tokens,
                 want[i]);
            as = false;
        }
    return as;
}

static void wait_all(dsv4_th_req *got, unsigned mask)
{
    for (uint32_t i = 0; i < N; i++)
        if (mask & (1u << i))
            dsv4_th_wait((dsv4_th_req *[]){&got[i]}, 1);
    dsv4_th_wait((dsv4_th_req *[]){&blocker}, 1);
    if (gated.id)
        dsv4_th_wait((dsv4_th_req *[]){&gated}, 1);
}

int main(void)
{
    plan(14);
    dsv4_th_init(23);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    int32_t base[LEN], tail[3][LEN];
    dsv4_test_tokens(base, LEN, V, 41);
    for (uint32_t i = 0; i < 3; i++)
        dsv4_test_tokens(tail[i], LEN, V, 42 + i);
    dsv4_test_tokens(other, 20, V, 46);
    memcpy(prompts[A], base, sizeof(base));
    memcpy(prompts[E], base, sizeof(base));
    memcpy(prompts[B], base, 40 * sizeof(int32_t));
    memcpy(prompts[B] + 40, tail[0], (LEN - 40) * sizeof(int32_t));
    memcpy(prompts[C], base, 64 * sizeof(int32_t));
    memcpy(prompts[C] + 64, tail[1], (LEN - 64) * sizeof(int32_t));
    memcpy(prompts[D], tail[2], sizeof(base));
    const uint32_t shared[N] = {[A] = 0, [B] = 32, [C] = 64, [D] = 0, [E] = 80};

    /* a prefill chunk of 16: A needs 5 steps to compute its first 80 tokens */
    dsv4_th_server big = {.max_running = 8, .prefill_chunk = 16, .state_slots = 16, .n_pages = 96};
    for (uint32_t i = 0; i < N; i++) {
        dsv4_server *srv = dsv4_th_start(&big);
        submit(srv, ref, i);
        dsv4_th_wait((dsv4_th_req *[]){&ref[i]}, 1);
        dsv4_server_stop(srv, 0);
    }
    ok(!dsv4_th_same_tokens(&ref[A], &ref[E]), "alone, A and E (one prompt) differ (seeds 31, 35)");

    dsv4_th_req got[N];
    dsv4_metrics_reset();
    dsv4_server *srv = dsv4_th_start(&big);
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    for (uint32_t i = 0; i < N; i++)
        submit(srv, got, i);
    dsv4_th_release();
    wait_all(got, 0x1f);
    ok(same_as_alone(got, 0x1f),
       "five requests arriving together: each gets the tokens it gets alone");
    ok(cached_are(got, 0x1f, shared),
       "B, C and E start from the 32, 64 and 80 tokens A computed; D from nothing");
    is_int(dsv4_metric_get(DSV4_M_PREFIX_HIT_TOKENS), 32 + 64 + 80, "and the hits are counted");
    ok(dsv4_th_holds_only_the_cache(srv), "together: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* C arrives while A is computing their prefix */
    srv = dsv4_th_start(&big);
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    start_a_and_hold(srv, got);
    submit(srv, got, C);
    gate_set(false);
    wait_all(got, 1u << A | 1u << C);
    ok(same_as_alone(got, 1u << A | 1u << C) && cached_are(got, 1u << C, shared),
       "C, arriving while A computes their prefix, follows it: from 64 cached, tokens as alone");
    ok(dsv4_th_holds_only_the_cache(srv), "arriving later: nothing held past the cache");

    /* the same, A cancelled when C has just arrived: C computes the prefix itself */
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    start_a_and_hold(srv, got);
    submit(srv, got, C);
    dsv4_server_cancel(srv, got[A].id);
    gate_set(false);
    wait_all(got, 1u << A | 1u << C);
    ok(got[A].end.finish == DSV4_FINISH_ABORT && same_as_alone(got, 1u << C) &&
           got[C].end.cached_tokens == 0,
       "A cancelled while C follows it: C computes the prefix, tokens as alone");
    ok(dsv4_th_holds_only_the_cache(srv),
       "after the cancelled leader: nothing held past the cache");

    /* E arrives when A has computed its prompt and decodes: A's newest state is at 80, the
     * end of the pages they share, and goes to the cache for E */
    submit_as(srv, got, A, true);
    dsv4_th_wait_tokens(&got[A], 1);
    submit(srv, got, E);
    dsv4_th_release();
    wait_all(got, 1u << A | 1u << E);
    ok(same_as_alone(got, 1u << A | 1u << E) && cached_are(got, 1u << E, shared),
       "E, arriving after A computed their prefix, starts from the state at 80 A kept");
    ok(dsv4_th_holds_only_the_cache(srv), "kept state: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    /* one request at a time: B, C and E run after A ended, from what A left on its way */
    dsv4_th_server one = big;
    one.max_running = 1;
    srv = dsv4_th_start(&one);
    dsv4_th_hold_engine(srv, &blocker, other, 20);
    for (uint32_t i = 0; i < N; i++)
        submit(srv, got, i);
    dsv4_th_release();
    wait_all(got, 0x1f);
    ok(same_as_alone(got, 0x1f), "max_running 1: each gets the tokens it gets alone");
    ok(cached_are(got, 0x1f, shared),
       "and B, C and E, admitted after A ended, start from the 32, 64 and 80 tokens it published");
    ok(dsv4_th_holds_only_the_cache(srv), "max_running 1: nothing held past the cache");
    dsv4_server_stop(srv, 0);
    dsv4_th_fini();
    return done_testing();
}
