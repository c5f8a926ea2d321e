/* t-serve-admits-in-sched-order: waiting requests are admitted in the order the sched
 * plugin gives. With max_running 1 a first request holds the engine (its token hook waits
 * until three more are queued); they then run one at a time after it, so the order they
 * end in is the admission order: priorities 5, 3, 1 under sched/priority, arrival order
 * under sched/fcfs, and under sched/lpm first the request whose prompt the prefix cache
 * holds (the sched view's prefix_len answers from the radix cache). */
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

/* The blocker runs first; then `n` requests (prompts[i], priorities prio[i]) queue while
 * it is held. Returns whether they ended in expect_order after it. With warm, a request
 * with prompt warm runs to completion first (it fills the prefix cache). */
static bool run(const char *sched, const int32_t *const *prompts, const int32_t *prio,
                const uint32_t *expect_order, const int32_t *warm, dsv4_th_req *reqs)
{
    int32_t bprompt[12];
    dsv4_th_req blocker, w;
    dsv4_th_server cfg = {
        .max_running = 1, .prefill_chunk = 64, .state_slots = 2, .n_pages = 32, .sched = sched};
    dsv4_gen_params p = {.max_tokens = 4, .top_p = 1, .ignore_eos = true};

    dsv4_test_tokens(bprompt, 12, dsv4_th_model()->cfg.vocab_size, 5);
    memset(&blocker, 0, sizeof(blocker));
    memset(&w, 0, sizeof(w));
    memset(reqs, 0, 3 * sizeof(*reqs));
    dsv4_th_hold(&blocker);
    dsv4_server *srv = dsv4_th_start(&cfg);
    if (warm) {
        dsv4_th_submit(srv, &w, warm, 40, &p);
        dsv4_th_wait((dsv4_th_req *[]){&w}, 1);
    }
    dsv4_th_submit(srv, &blocker, bprompt, 12, &p);
    dsv4_th_wait_tokens(&blocker, 1); /* running, and held in its hook */
    for (int i = 0; i < 3; i++) {
        p.priority = prio[i];
        dsv4_th_submit(srv, &reqs[i], prompts[i], 40, &p);
    }
    dsv4_th_release();
    dsv4_th_wait((dsv4_th_req *[]){&blocker, &reqs[0], &reqs[1], &reqs[2]}, 4);
    dsv4_server_stop(srv, 0);

    bool in_order = true;
    for (uint32_t i = 0; i < 3; i++)
        in_order = in_order && reqs[expect_order[i]].order == blocker.order + 1 + i;
    if (!in_order)
        diag("ended: blocker %u, then %u, %u, %u", blocker.order, reqs[0].order, reqs[1].order,
             reqs[2].order);
    return in_order;
}

int main(void)
{
    plan(4);
    dsv4_th_init(4);
    uint32_t V = dsv4_th_model()->cfg.vocab_size;
    static int32_t a[40], b[40], c[40];
    dsv4_test_tokens(a, 40, V, 31);
    dsv4_test_tokens(b, 40, V, 32);
    dsv4_test_tokens(c, 40, V, 33);
    const int32_t *const prompts[3] = {a, b, c};
    const int32_t prio[3] = {1, 5, 3}, none[3] = {0, 0, 0};
    dsv4_th_req reqs[3];

    ok(run("priority", prompts, prio, (const uint32_t[]){1, 2, 0}, NULL, reqs),
       "sched/priority admits priority 5, 3, then 1");
    ok(run("fcfs", prompts, prio, (const uint32_t[]){0, 1, 2}, NULL, reqs),
       "sched/fcfs admits in arrival order");
    /* lpm: c's first 32 tokens are in the cache (a warm-up ran c's prompt), so c goes
     * first; a and b have no cached prefix and keep arrival order */
    ok(run("lpm", prompts, none, (const uint32_t[]){2, 0, 1}, c, reqs),
       "sched/lpm admits the request with a cached prefix first");
    ok(reqs[2].end.cached_tokens == 32 && reqs[0].end.cached_tokens == 0,
       "its cached prefix came from the radix cache (%u tokens)", reqs[2].end.cached_tokens);
    dsv4_th_fini();
    return done_testing();
}
