/* t-serve-admits-in-sched-order: waiting requests are admitted in the order the sched
 * plugin gives. With max_running 1 a first request holds the engine (its token hook waits
 * until three more are queued, with priorities 1, 5 and 3); they then run one at a time
 * after it, so the order they end in is the admission order: 5, 3, 1 under sched/priority and
 * arrival order under sched/fcfs. */
#include <string.h>

#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

static bool queued;

/* Hold the engine thread on the first token until the test has queued the others. */
static void hold(dsv4_th_req *req)
{
    dsv4_th_lock();
    while (!queued)
        dsv4_th_cond_wait();
    dsv4_th_unlock();
    req->hook = NULL;
}

static void run(const char *sched, const int32_t *expect_order, const char *what)
{
    static const int32_t prio[3] = {1, 5, 3};
    int32_t prompt[12];
    dsv4_th_req blocker, reqs[3];
    dsv4_th_server cfg = {
        .max_running = 1, .prefill_chunk = 64, .state_slots = 2, .n_pages = 32, .sched = sched};
    dsv4_gen_params p = {.max_tokens = 4, .top_p = 1, .ignore_eos = true};

    dsv4_test_tokens(prompt, 12, dsv4_th_model()->cfg.vocab_size, 5);
    queued = false;
    memset(&blocker, 0, sizeof(blocker));
    memset(reqs, 0, sizeof(reqs));
    blocker.hook = hold;
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_submit(srv, &blocker, prompt, 12, &p);
    dsv4_th_wait_tokens(&blocker, 1); /* running, and held in its hook */
    for (int i = 0; i < 3; i++) {
        p.priority = prio[i];
        prompt[0] = i; /* no prefix sharing between them */
        dsv4_th_submit(srv, &reqs[i], prompt, 12, &p);
    }
    dsv4_th_lock();
    queued = true;
    dsv4_th_signal();
    dsv4_th_unlock();
    dsv4_th_wait((dsv4_th_req *[]){&blocker, &reqs[0], &reqs[1], &reqs[2]}, 4);
    dsv4_server_stop(srv, 0);

    bool in_order = true;
    for (int i = 0; i < 3; i++)
        in_order = in_order && reqs[expect_order[i]].order == blocker.order + 1 + (uint32_t)i;
    if (!ok(in_order, "%s", what))
        diag("ended: blocker %u, priority 1 %u, priority 5 %u, priority 3 %u", blocker.order,
             reqs[0].order, reqs[1].order, reqs[2].order);
}

int main(void)
{
    plan(2);
    dsv4_th_init(4);
    run("priority", (const int32_t[]){1, 2, 0}, "sched/priority admits priority 5, 3, then 1");
    run("fcfs", (const int32_t[]){0, 1, 2}, "sched/fcfs admits in arrival order");
    dsv4_th_fini();
    return done_testing();
}
