/* t-serve-shared-prefixes-under-churn-keep-tokens: requests that share prefixes of three
 * base prompts (cut at every page boundary, some the whole base) arrive in waves while
 * earlier ones run, two of them cancelled as they arrive, so that followers, leaders,
 * published snapshots, retraction and the host tier all meet. Whatever shares what, every
 * request that is not cancelled gets exactly the tokens it gets alone, and afterwards the
 * pool holds only what the cache holds. Three servers: a pool so small that requests
 * retract with few state slots (snapshots often have none), the same under an async host
 * tier, and a roomy one where sharing shows in the prefix-cache hits. */
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define NREQ 24
#define LEN 100
#define NEW 48
#define WAVE 6

static int32_t prompts[NREQ][LEN];
static dsv4_th_req ref[NREQ], got[NREQ];
static const uint32_t cancelled[] = {5, 17};

static dsv4_gen_params params_of(uint32_t j)
{
    return (dsv4_gen_params){
        .max_tokens = NEW, .temperature = 1.0f, .top_p = 0.9f, .seed = 50 + j, .ignore_eos = true};
}

static bool is_cancelled(uint32_t j)
{
    return j == cancelled[0] || j == cancelled[1];
}

/* The waves, each submitted once the first request of the one before has a token. */
static void run(dsv4_server *srv)
{
    memset(got, 0, sizeof(got));
    for (uint32_t w = 0; w < NREQ; w += WAVE) {
        if (w)
            dsv4_th_wait_tokens(&got[w - WAVE], 1);
        for (uint32_t j = w; j < w + WAVE; j++) {
            dsv4_gen_params p = params_of(j);
            dsv4_th_submit(srv, &got[j], prompts[j], LEN, &p);
            if (is_cancelled(j))
                dsv4_server_cancel(srv, got[j].id);
        }
    }
    for (uint32_t j = 0; j < NREQ; j++)
        dsv4_th_wait((dsv4_th_req *[]){&got[j]}, 1);
}

/* Whether every request not cancelled got its tokens alone, and the cancelled ones ended
 * ABORT. */
static bool as_alone(void)
{
    bool same = true;
    for (uint32_t j = 0; j < NREQ; j++) {
        bool s = is_cancelled(j) ? got[j].end.finish == DSV4_FINISH_ABORT
                                 : got[j].end.kind == DSV4_EV_DONE && got[j].n_tokens == NEW &&
                                       dsv4_th_same_tokens(&got[j], &ref[j]);
        if (!s)
            diag("request %u: %u tokens, finish %d, not as alone", j, got[j].n_tokens,
                 (int)got[j].end.finish);
        same = same && s;
    }
    return same;
}

int main(void)
{
    plan(7);
    dsv4_th_init(29);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    int32_t base[3][LEN];
    for (uint32_t b = 0; b < 3; b++)
        dsv4_test_tokens(base[b], LEN, V, 60 + b);
    for (uint32_t j = 0; j < NREQ; j++) {
        /* cut after 1 to 6 pages of 16, or (every eighth) the whole base */
        uint32_t cut = j % 8 == 0 ? LEN : 16 * (1 + j * 7 % 6);
        memcpy(prompts[j], base[j % 3], cut * sizeof(int32_t));
        dsv4_test_tokens(prompts[j] + cut, LEN - cut, V, 100 + j);
    }
    dsv4_th_server roomy = {
        .max_running = 16, .prefill_chunk = 32, .state_slots = 40, .n_pages = 256};
    for (uint32_t j = 0; j < NREQ; j++) {
        dsv4_server *srv = dsv4_th_start(&roomy);
        dsv4_gen_params p = params_of(j);
        dsv4_th_submit(srv, &ref[j], prompts[j], LEN, &p);
        dsv4_th_wait((dsv4_th_req *[]){&ref[j]}, 1);
        dsv4_server_stop(srv, 0);
    }

    /* a request grows to 10 pages of 16 (its claim at admission is 8), 4 running on 16
     * pages, 6 state slots: retraction, few snapshots */
    dsv4_th_server tight = {.max_running = 4, .prefill_chunk = 16, .state_slots = 6, .n_pages = 16};
    dsv4_metrics_reset();
    dsv4_server *srv = dsv4_th_start(&tight);
    run(srv);
    ok(as_alone(), "a tight pool: every request's tokens as alone (%lld retractions)",
       (long long)dsv4_metric_get(DSV4_M_RETRACTIONS));
    ok(dsv4_metric_get(DSV4_M_RETRACTIONS) > 0, "and requests did retract");
    ok(dsv4_th_holds_only_the_cache(srv), "tight pool: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    static const char *const tier[] = {
        "write_policy", "write_through", "host_size", "1M", "host_slots", "8", NULL};
    tight.hostcache = "async";
    tight.hostcache_set = tier;
    srv = dsv4_th_start(&tight);
    run(srv);
    ok(as_alone(), "the same under an async host tier: every request's tokens as alone");
    ok(dsv4_th_holds_only_the_cache(srv), "host tier: nothing held past the cache");
    dsv4_server_stop(srv, 0);

    dsv4_metrics_reset();
    srv = dsv4_th_start(&roomy);
    run(srv);
    ok(as_alone() && dsv4_metric_get(DSV4_M_PREFIX_HIT_TOKENS) > 0,
       "a roomy pool: every request's tokens as alone, %lld prompt tokens from the cache",
       (long long)dsv4_metric_get(DSV4_M_PREFIX_HIT_TOKENS));
    ok(dsv4_th_holds_only_the_cache(srv), "roomy pool: nothing held past the cache");
    dsv4_server_stop(srv, 0);
    dsv4_th_fini();
    return done_testing();
}
