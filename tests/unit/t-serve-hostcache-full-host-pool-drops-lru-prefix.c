/* t-serve-hostcache-full-host-pool-drops-lru-prefix: when the host pool is full, the
 * prefixes that live on host only are dropped least recently used first (radix.h). Four
 * conversations pass through a 4-page device pool with a host pool of 3 pages: the
 * oldest (A) is dropped from host to make room, a newer one (B) survives there and its
 * second turn is loaded back; with a roomy host pool A survives too. Every second turn
 * is bit-identical to a cold run either way, the host pool never holds more than it has,
 * and a flush brings both pools back to zero. */
#include <stdio.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define LEN 40 /* first turns: 2 whole pages of 16 end up cached */
#define NEW 8  /* tokens each turn generates */
#define MORE 2 /* the second turn adds these after the first turn's answer */
#define LEN2 (LEN + NEW + MORE)
#define CACHED 32

static int32_t prompts[4][LEN], second[2][LEN2];
static dsv4_gen_params params;

static void turn(dsv4_server *srv, dsv4_th_req *req, const int32_t *prompt, uint32_t n)
{
    memset(req, 0, sizeof(*req));
    dsv4_th_submit(srv, req, prompt, n, &params);
    dsv4_th_wait((dsv4_th_req *[]){req}, 1);
}

static bool same(const dsv4_th_req *a, const dsv4_th_req *b)
{
    return dsv4_th_same_tokens(a, b) && a->n_tokens == NEW &&
           memcmp(a->logprobs, b->logprobs, a->n_tokens * sizeof(float)) == 0;
}

typedef struct result {
    dsv4_th_req a2, b2;
    bool within, baseline;
} result;

/* A, B, C, D once each, then B's and A's second turns. */
static result run(const dsv4_th_server *cfg)
{
    result res = {.within = true};
    dsv4_th_req first[4];
    dsv4_metrics_reset();
    dsv4_server *srv = dsv4_th_start(cfg);
    for (int i = 0; i < 4; i++) {
        turn(srv, &first[i], prompts[i], LEN);
        res.within = res.within && dsv4_metric_get(DSV4_M_HOST_PAGES_USED) <=
                                       dsv4_metric_get(DSV4_M_HOST_PAGES_TOTAL);
    }
    for (int k = 0; k < 2; k++) {
        memcpy(second[k], prompts[k], sizeof(prompts[k]));
        memcpy(second[k] + LEN, first[k].tokens, NEW * sizeof(int32_t));
        second[k][LEN + NEW] = 3 + k;
        second[k][LEN + NEW + 1] = 5 + k;
    }
    turn(srv, &res.b2, second[1], LEN2);
    turn(srv, &res.a2, second[0], LEN2);
    res.within = res.within && dsv4_metric_get(DSV4_M_HOST_PAGES_USED) <=
                                   dsv4_metric_get(DSV4_M_HOST_PAGES_TOTAL);
    res.baseline = dsv4_server_flush_cache(srv) == 0 && dsv4_metric_get(DSV4_M_PAGES_USED) == 0 &&
                   dsv4_metric_get(DSV4_M_SLOTS_USED) == 0 &&
                   dsv4_metric_get(DSV4_M_HOST_PAGES_USED) == 0 &&
                   dsv4_metric_get(DSV4_M_HOST_SLOTS_USED) == 0;
    dsv4_server_stop(srv, 0);
    return res;
}

int main(void)
{
    plan(10);
    dsv4_th_init(9);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    for (int i = 0; i < 4; i++)
        dsv4_test_tokens(prompts[i], LEN, V, 70 + i);
    params = (dsv4_gen_params){.max_tokens = NEW, .top_p = 1, .ignore_eos = true, .logprobs = true};

    dsv4_th_server tiny = {.max_running = 1, .prefill_chunk = 64, .state_slots = 4, .n_pages = 4};
    /* 3 host pages of 1152 bytes (the test model's page over every buffer), 2 snapshots */
    static const char *const small[] = {"write_policy", "write_back", "host_size", "3456",
                                        "host_slots",   "2",          NULL};
    static const char *const big[] = {"write_policy", "write_back", "host_size", "1M",
                                      "host_slots",   "8",          NULL};
    dsv4_th_server full = tiny, ample = tiny;
    full.hostcache = ample.hostcache = "async";
    full.hostcache_set = small;
    ample.hostcache_set = big;
    result f = run(&full);
    /* the cold references (the second turns' prompts are known now) */
    dsv4_th_server roomy = tiny;
    roomy.n_pages = 32;
    dsv4_server *srv = dsv4_th_start(&roomy);
    dsv4_th_req cold_a, cold_b;
    turn(srv, &cold_b, second[1], LEN2);
    turn(srv, &cold_a, second[0], LEN2);
    dsv4_server_stop(srv, 0);

    is_int(f.b2.end.cached_tokens, CACHED, "full host pool: the newer prefix (B) was kept on host");
    is_int(f.a2.end.cached_tokens, 0, "full host pool: the oldest prefix (A) was dropped");
    ok(same(&cold_b, &f.b2) && same(&cold_a, &f.a2),
       "full host pool: both second turns bit-identical to cold runs");
    ok(f.within, "full host pool: never more host pages used than it has");
    ok(f.baseline, "full host pool: a flush brings device and host pools back to zero");

    result a = run(&ample);
    is_int(a.b2.end.cached_tokens, CACHED, "roomy host pool: B's prefix came from the cache");
    is_int(a.a2.end.cached_tokens, CACHED, "roomy host pool: so did A's, nothing was dropped");
    ok(same(&cold_b, &a.b2) && same(&cold_a, &a.a2),
       "roomy host pool: both second turns bit-identical to cold runs");
    ok(a.within, "roomy host pool: within the host pool");
    ok(a.baseline, "roomy host pool: a flush brings device and host pools back to zero");
    dsv4_th_fini();
    return done_testing();
}
