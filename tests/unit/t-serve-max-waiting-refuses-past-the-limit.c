/* t-serve-max-waiting-refuses-past-the-limit: [server] max_waiting bounds the client
 * requests waiting for admission. With max_running 1 a first request holds the engine (its
 * token hook waits for the test); with max_waiting 2 the next two are queued and a third is
 * refused at once with -EBUSY, counted in dsv4d_requests_rejected_total, and no callback.
 * Once released, every accepted request runs to its end; a place is given back when its
 * request is admitted, and when it is cancelled while waiting: at the cancel, while the
 * engine thread is still held (so a client that hangs up frees its place for the next one
 * at once), and the next round is again refused exactly at the third. The choices of one
 * request take their places together or not at all. max_waiting 0 is no limit. */
#include <errno.h>
#include <string.h>

#include "core/serve/metrics.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

#define NEW 6

static int32_t prompt[24];
static const dsv4_gen_params params = {.max_tokens = NEW, .top_p = 1, .ignore_eos = true};

/* A blocker held in its hook, then `n` submissions: each one's status into rc. With
 * cancel_second, the second is cancelled while it waits and one more is submitted, still
 * under the hold (its status in rc[n]). Releases the engine and waits for every accepted
 * request; true when each ran to NEW tokens (the cancelled one to an abort). */
static bool round_of(dsv4_server *srv, uint32_t n, int *rc, bool cancel_second)
{
    static dsv4_th_req blocker, reqs[17];
    dsv4_th_req *ended[18] = {&blocker};
    size_t n_ended = 1;
    memset(&blocker, 0, sizeof(blocker));
    memset(reqs, 0, sizeof(reqs));
    dsv4_th_hold(&blocker);
    dsv4_th_submit(srv, &blocker, prompt, 24, &params);
    dsv4_th_wait_tokens(&blocker, 1); /* admitted, and held */
    for (uint32_t i = 0; i < n; i++) {
        rc[i] = dsv4_th_try_submit(srv, &reqs[i], prompt, 24, &params);
        if (rc[i] == 0)
            ended[n_ended++] = &reqs[i];
    }
    if (cancel_second) {
        dsv4_server_cancel(srv, reqs[1].id);
        rc[n] = dsv4_th_try_submit(srv, &reqs[n], prompt, 24, &params);
        if (rc[n] == 0)
            ended[n_ended++] = &reqs[n];
    }
    dsv4_th_release();
    dsv4_th_wait(ended, n_ended);
    bool whole = true;
    for (size_t i = 0; i < n_ended; i++) {
        bool cancelled = cancel_second && ended[i] == &reqs[1];
        whole = whole && ended[i]->end.kind == DSV4_EV_DONE &&
                (cancelled ? ended[i]->end.finish == DSV4_FINISH_ABORT : ended[i]->n_tokens == NEW);
    }
    for (uint32_t i = 0; i < n; i++)
        whole = whole && (rc[i] == 0 || (reqs[i].n_tokens == 0 && !reqs[i].done));
    return whole;
}

int main(void)
{
    plan(12);
    dsv4_th_init(12);
    dsv4_test_tokens(prompt, 24, dsv4_th_model()->cfg.vocab_size, 3);
    dsv4_metrics_reset();
    dsv4_th_server cfg = {
        .max_running = 1, .prefill_chunk = 64, .state_slots = 4, .n_pages = 48, .max_waiting = 2};
    dsv4_server *srv = dsv4_th_start(&cfg);
    int rc[16];

    bool whole = round_of(srv, 3, rc, false);
    ok(rc[0] == 0 && rc[1] == 0 && rc[2] == -EBUSY,
       "max_waiting 2: two requests queue behind the running one, the third is refused with "
       "-EBUSY (%d %d %d)",
       rc[0], rc[1], rc[2]);
    is_int(dsv4_metric_get(DSV4_M_REQUESTS_REJECTED), 1, "the refusal is counted");
    ok(whole, "every accepted request runs to its end; the refused one gets no callback");

    whole = round_of(srv, 3, rc, false);
    ok(rc[0] == 0 && rc[1] == 0 && rc[2] == -EBUSY && whole,
       "admission gave the places back: the next round is refused at the third again");

    whole = round_of(srv, 3, rc, true);
    ok(rc[0] == 0 && rc[1] == 0 && rc[2] == -EBUSY && whole,
       "a round whose second request is cancelled while it waits: it ends in an abort, the "
       "others run");
    is_int(rc[3], 0,
           "the cancel gave its place back at once: a request submitted while the engine "
           "thread is still held is queued");
    whole = round_of(srv, 3, rc, false);
    ok(rc[0] == 0 && rc[1] == 0 && rc[2] == -EBUSY && whole,
       "the cancelled request gave its place back: refused at the third again");
    is_int(dsv4_metric_get(DSV4_M_REQUESTS_REJECTED), 4, "four refusals counted in all");

    /* the choices of one request take their places together or not at all */
    static dsv4_th_req blocker, three[3], two[2];
    memset(&blocker, 0, sizeof(blocker));
    memset(three, 0, sizeof(three));
    memset(two, 0, sizeof(two));
    dsv4_th_hold(&blocker);
    dsv4_th_submit(srv, &blocker, prompt, 24, &params);
    dsv4_th_wait_tokens(&blocker, 1);
    int rc3 = dsv4_th_try_submit_choices(srv, three, 3, prompt, 24, &params);
    int rc2 = dsv4_th_try_submit_choices(srv, two, 2, prompt, 24, &params);
    dsv4_th_release();
    dsv4_th_wait((dsv4_th_req *[]){&blocker, &two[0], &two[1]}, 3);
    ok(rc3 == -EBUSY && three[0].n_tokens == 0 && !three[0].done && rc2 == 0,
       "3 choices where 2 places are left are refused whole (%d), then 2 choices are queued "
       "(%d)",
       rc3, rc2);
    ok(two[0].n_tokens == NEW && two[1].n_tokens == NEW &&
           dsv4_metric_get(DSV4_M_REQUESTS_REJECTED) == 5,
       "both choices run to their end; the refusal counted once");
    dsv4_server_stop(srv, 0);

    cfg.max_waiting = 0;
    srv = dsv4_th_start(&cfg);
    whole = round_of(srv, 12, rc, false);
    int accepted = 0;
    for (int i = 0; i < 12; i++)
        accepted += rc[i] == 0;
    is_int(accepted, 12, "max_waiting 0: twelve requests queue behind the running one");
    ok(whole, "and every one runs to its end");
    dsv4_server_stop(srv, 0);
    dsv4_th_fini();
    return done_testing();
}
