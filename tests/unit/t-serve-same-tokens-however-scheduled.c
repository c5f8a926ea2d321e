/* t-serve-same-tokens-however-scheduled: a request gets the same tokens from the serving
 * loop whether it runs alone, under continuous batching beside requests of mixed lengths,
 * with a tiny prefill chunk, after being retracted (a pool so small that retraction
 * happens), or as the second and third turns of a conversation that start from the
 * prefix cache (also with fp8 index-K pages and bf16 rows); a full cache is evicted
 * before anything is retracted.
 * Greedy and seeded sampling both. After every run the pool is back to its baseline:
 * pages still used are exactly those the prefix cache alone holds, and flushing the cache
 * brings pages and state slots to zero. */
#include <stdio.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define N_REQ 4
#define MAX_NEW 40

static const uint32_t lens[N_REQ] = {40, 7, 23, 50};
static int32_t prompts[N_REQ][64];
static dsv4_gen_params params[N_REQ];

/* Run requests `which` (a bit mask) at once; their tokens go to out[i]. */
static void run(const dsv4_th_server *cfg, unsigned which, dsv4_th_req *out)
{
    dsv4_server *srv = dsv4_th_start(cfg);
    dsv4_th_req *wait[N_REQ];
    size_t n = 0;
    for (int i = 0; i < N_REQ; i++) {
        if (!(which & (1u << i)))
            continue;
        memset(&out[i], 0, sizeof(out[i]));
        dsv4_th_submit(srv, &out[i], prompts[i], lens[i], &params[i]);
        wait[n++] = &out[i];
    }
    dsv4_th_wait(wait, n);
    dsv4_server_stop(srv, 0);
}

/* One request on srv, to its end. */
static void turn(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n,
                 const dsv4_gen_params *p)
{
    memset(req, 0, sizeof(*req));
    dsv4_th_submit(srv, req, prompt, n, p);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
}

/* Pages back to baseline: the only pages in use are those the cache alone holds, and a
 * flush returns every page and slot. */
static void check_baseline(dsv4_server *srv, const char *what)
{
    ok(dsv4_metric_get(DSV4_M_PAGES_USED) == dsv4_metric_get(DSV4_M_PAGES_CACHED) &&
           dsv4_metric_get(DSV4_M_RUNNING) == 0,
       "%s: pages in use are the cache's alone (%lld used, %lld cached)", what,
       (long long)dsv4_metric_get(DSV4_M_PAGES_USED),
       (long long)dsv4_metric_get(DSV4_M_PAGES_CACHED));
    ok(dsv4_server_flush_cache(srv) == 0 && dsv4_metric_get(DSV4_M_PAGES_USED) == 0 &&
           dsv4_metric_get(DSV4_M_PAGES_CACHED) == 0 && dsv4_metric_get(DSV4_M_SLOTS_USED) == 0,
       "%s: after a cache flush no page or slot is used", what);
}

static void compare(const dsv4_th_req *ref, const dsv4_th_req *got, unsigned which,
                    const char *what)
{
    bool same = true;
    for (int i = 0; i < N_REQ; i++)
        if (which & (1u << i)) {
            bool s = dsv4_th_same_tokens(&ref[i], &got[i]) && got[i].end.kind == DSV4_EV_DONE &&
                     got[i].end.finish == DSV4_FINISH_LENGTH;
            if (!s)
                diag("request %d: %u tokens vs %u alone", i, got[i].n_tokens, ref[i].n_tokens);
            same = same && s;
        }
    ok(same, "%s: the same tokens as alone", what);
}

int main(void)
{
    plan(22);
    dsv4_th_init(3);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    for (int i = 0; i < N_REQ; i++) {
        dsv4_test_tokens(prompts[i], lens[i], V, 100 + i);
        params[i] = (dsv4_gen_params){.max_tokens = MAX_NEW, .top_p = 1, .ignore_eos = true};
    }
    /* two requests sample (the PRNG must survive retraction), two are greedy */
    params[0].temperature = 0.9f;
    params[0].top_p = 0.9f;
    params[0].seed = 7;
    params[3].temperature = 1.3f;
    params[3].top_k = 5;
    params[3].seed = 8;

    dsv4_th_server big = {.max_running = 4, .prefill_chunk = 64, .state_slots = 8, .n_pages = 64};
    dsv4_th_req ref[N_REQ], got[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        run(&big, 1u << i, ref);
    ok(ref[0].n_tokens == MAX_NEW && ref[3].n_tokens == MAX_NEW, "alone: max_tokens generated");

    run(&big, 0xf, got);
    compare(ref, got, 0xf, "batched, mixed lengths");

    dsv4_th_server tiny = big;
    tiny.prefill_chunk = 3;
    run(&tiny, 0xf, got);
    compare(ref, got, 0xf, "prefill chunk of 3 tokens");

    /* 8 pages of 16 tokens: every request fits alone (90 tokens at most), not together */
    dsv4_th_server small = big;
    small.n_pages = 8;
    dsv4_metrics_reset();
    dsv4_server *srv = dsv4_th_start(&small);
    dsv4_th_req *wait[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        memset(&got[i], 0, sizeof(got[i]));
        dsv4_th_submit(srv, &got[i], prompts[i], lens[i], &params[i]);
        wait[i] = &got[i];
    }
    dsv4_th_wait(wait, N_REQ);
    ok(dsv4_metric_get(DSV4_M_RETRACTIONS) > 0, "the small pool retracted (%lld times)",
       (long long)dsv4_metric_get(DSV4_M_RETRACTIONS));
    compare(ref, got, 0xf, "with retraction");
    check_baseline(srv, "small pool");
    dsv4_server_stop(srv, 0);

    /* multi-turn: turn 2 = turn 1's prompt + its answer + 9 more tokens */
    static int32_t turn2[128], more[9];
    uint32_t n2 = lens[0];
    memcpy(turn2, prompts[0], lens[0] * sizeof(int32_t));
    memcpy(turn2 + n2, ref[0].tokens, ref[0].n_tokens * sizeof(int32_t));
    n2 += ref[0].n_tokens;
    dsv4_test_tokens(more, 9, V, 200);
    memcpy(turn2 + n2, more, sizeof(more));
    n2 += 9;
    dsv4_gen_params p2 = params[3];
    p2.max_tokens = 20;

    dsv4_th_req cold, first, warm;
    memset(&cold, 0, sizeof(cold));
    srv = dsv4_th_start(&big);
    dsv4_th_submit(srv, &cold, turn2, n2, &p2);
    dsv4_th_wait((dsv4_th_req *[]){&cold}, 1);
    dsv4_server_stop(srv, 0);

    dsv4_metrics_reset();
    srv = dsv4_th_start(&big);
    memset(&first, 0, sizeof(first));
    memset(&warm, 0, sizeof(warm));
    dsv4_th_submit(srv, &first, prompts[0], lens[0], &params[0]);
    dsv4_th_wait((dsv4_th_req *[]){&first}, 1);
    ok(dsv4_th_same_tokens(&first, &ref[0]), "turn 1 as before");
    ok(dsv4_metric_get(DSV4_M_PAGES_CACHED) > 0, "turn 1 left pages in the cache (%lld)",
       (long long)dsv4_metric_get(DSV4_M_PAGES_CACHED));
    dsv4_th_submit(srv, &warm, turn2, n2, &p2);
    dsv4_th_wait((dsv4_th_req *[]){&warm}, 1);
    /* turn 1 fed 40 + 39 tokens: its last whole page ends at 64 */
    is_int(warm.end.cached_tokens, 64, "turn 2 starts from 64 cached tokens");
    ok(dsv4_metric_get(DSV4_M_PREFIX_HIT_TOKENS) == 64 &&
           dsv4_metric_get(DSV4_M_PREFIX_QUERY_TOKENS) == lens[0] + n2,
       "hit and query metrics count them");
    ok(dsv4_th_same_tokens(&cold, &warm) && warm.n_tokens == 20,
       "turn 2 from the cache = turn 2 cold");
    /* turn 3 = turn 2 + its answer + 5 more: turn 2 started at 64 and fed 89 + 19 tokens,
     * so the cache now reaches 96 */
    static int32_t turn3[128];
    uint32_t n3 = n2;
    memcpy(turn3, turn2, n2 * sizeof(int32_t));
    memcpy(turn3 + n3, warm.tokens, warm.n_tokens * sizeof(int32_t));
    n3 += warm.n_tokens;
    memcpy(turn3 + n3, more, 5 * sizeof(int32_t));
    n3 += 5;
    p2.max_tokens = 10;
    dsv4_th_req third, other;
    memset(&third, 0, sizeof(third));
    memset(&other, 0, sizeof(other));
    dsv4_th_submit(srv, &third, turn3, n3, &p2);
    dsv4_th_submit(srv, &other, prompts[2], lens[2], &params[2]);
    dsv4_th_wait((dsv4_th_req *[]){&third, &other}, 2);
    is_int(third.end.cached_tokens, 96, "turn 3 starts from 96 cached tokens");
    ok(other.end.cached_tokens == 0 && dsv4_th_same_tokens(&other, &ref[2]),
       "an unrelated request beside it: no hit, its own tokens");
    check_baseline(srv, "multi-turn");
    ok(dsv4_metric_get(DSV4_M_EVICTED_PAGES) > 0, "the flush counted evicted pages");
    dsv4_server_stop(srv, 0);
    memset(&cold, 0, sizeof(cold));
    srv = dsv4_th_start(&big);
    dsv4_th_submit(srv, &cold, turn3, n3, &p2);
    dsv4_th_wait((dsv4_th_req *[]){&cold}, 1);
    dsv4_server_stop(srv, 0);
    ok(dsv4_th_same_tokens(&cold, &third) && third.n_tokens == 10,
       "turn 3 from the cache = turn 3 cold");

    /* a full cache gives way before anything is retracted: in 8 pages, turn 1 leaves 4
     * cached, then a request needing 6 pages runs */
    dsv4_metrics_reset();
    srv = dsv4_th_start(&small);
    memset(&first, 0, sizeof(first));
    memset(&got[3], 0, sizeof(got[3]));
    dsv4_th_submit(srv, &first, prompts[0], lens[0], &params[0]);
    dsv4_th_wait((dsv4_th_req *[]){&first}, 1);
    dsv4_th_submit(srv, &got[3], prompts[3], lens[3], &params[3]);
    dsv4_th_wait((dsv4_th_req *[]){&got[3]}, 1);
    ok(dsv4_metric_get(DSV4_M_EVICTED_PAGES) > 0 && dsv4_metric_get(DSV4_M_RETRACTIONS) == 0 &&
           dsv4_th_same_tokens(&got[3], &ref[3]),
       "cached pages were evicted (%lld), nothing retracted, the same tokens",
       (long long)dsv4_metric_get(DSV4_M_EVICTED_PAGES));
    check_baseline(srv, "after eviction");
    dsv4_server_stop(srv, 0);
    /* the same with fp8 index-K pages and bf16 rows: every paged buffer is shared */
    dsv4_th_server q = big;
    q.indexk = "fp8";
    q.kv_dtype = DSV4_KV_BF16;
    p2.max_tokens = 20;
    srv = dsv4_th_start(&q);
    turn(srv, &first, prompts[0], lens[0], &params[0]);
    /* turn 2 as this configuration's turn 1 would lead to it */
    memcpy(turn2 + lens[0], first.tokens, first.n_tokens * sizeof(int32_t));
    turn(srv, &warm, turn2, n2, &p2);
    dsv4_server_stop(srv, 0);
    srv = dsv4_th_start(&q);
    turn(srv, &cold, turn2, n2, &p2);
    dsv4_server_stop(srv, 0);
    ok(warm.end.cached_tokens == 64 && dsv4_th_same_tokens(&cold, &warm),
       "fp8 index-K, bf16 kv: turn 2 from the cache = cold (%u cached)", warm.end.cached_tokens);
    dsv4_th_fini();
    return done_testing();
}
