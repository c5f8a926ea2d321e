/* t-serve-cancel-and-stop-free-pages: cancelling a request mid-generation ends it with
 * DONE(ABORT), keeps the tokens it had, and gives its pages back; cancelling a request
 * still in the queue aborts it with no tokens; cancelling an ended request is -ENOENT.
 * Stopping with a grace lets a running request finish; stopping with none aborts it (each
 * request gets its terminal event), and submit refuses new work once stopping. Cancel
 * finds a request among thousands queued (the server's index by id puts ids
 * DSV4_SERVE_ID_BUCKETS apart in one bucket). Points in time are fixed by token hooks that
 * hold the engine thread, not by sleeping. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/serve/metrics.h"
#include "core/serve/serve_priv.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"
#include "tests/unit/serve-harness.h"

static int32_t prompt[20];
static bool released;
static dsv4_server *the_srv;

/* On the 5th token hold the engine until the test releases it. */
static void hold_at_5(dsv4_th_req *req)
{
    if (req->n_tokens != 5)
        return;
    dsv4_th_lock();
    while (!released)
        dsv4_th_cond_wait();
    dsv4_th_unlock();
}

static void release(void)
{
    dsv4_th_lock();
    released = true;
    dsv4_th_signal();
    dsv4_th_unlock();
}

static void *stopper(void *arg)
{
    dsv4_server_stop(the_srv, *(uint64_t *)arg);
    return NULL;
}

/* Stop with `grace_ms` while a request is held at its 5th token; returns how it ended. */
static dsv4_th_req stop_during(uint64_t grace_ms)
{
    dsv4_th_server cfg = {.max_running = 2, .prefill_chunk = 64, .state_slots = 4, .n_pages = 32};
    dsv4_gen_params p = {.max_tokens = 100, .top_p = 1, .ignore_eos = true};
    static dsv4_th_req req;
    memset(&req, 0, sizeof(req));
    req.hook = hold_at_5;
    released = false;
    the_srv = dsv4_th_start(&cfg);
    dsv4_th_submit(the_srv, &req, prompt, 20, &p);
    dsv4_th_wait_tokens(&req, 5);
    pthread_t t;
    pthread_create(&t, NULL, stopper, &grace_ms);
    /* the engine is held, so the server lives until release: probe until submit says
     * the server is stopping (probes accepted before that get terminal events too); a
     * probe every millisecond, so the stopper thread gets the CPU on a loaded machine (4096
     * back-to-back probes once outran it on the 2-core CI box) */
    static dsv4_th_req probes[4096];
    dsv4_gen_params one = {.max_tokens = 1, .top_p = 1};
    const struct timespec ms = {0, 1000000};
    size_t n = 0;
    int rc;
    while ((rc = dsv4_th_try_submit(the_srv, &probes[n], prompt, 20, &one)) == 0) {
        if (++n == sizeof(probes) / sizeof(probes[0]))
            bail_out("the server never started stopping");
        nanosleep(&ms, NULL);
    }
    if (rc != -ESHUTDOWN)
        bail_out("submit while stopping: %d, expected -ESHUTDOWN", rc);
    release();
    pthread_join(t, NULL);
    return req;
}

int main(void)
{
    plan(14);
    dsv4_th_init(5);
    dsv4_test_tokens(prompt, 20, dsv4_th_model()->cfg.vocab_size, 9);
    dsv4_th_server cfg = {.max_running = 1, .prefill_chunk = 64, .state_slots = 2, .n_pages = 32};
    dsv4_gen_params p = {.max_tokens = 100, .top_p = 1, .ignore_eos = true};

    dsv4_th_req running, queued;
    memset(&running, 0, sizeof(running));
    memset(&queued, 0, sizeof(queued));
    running.hook = hold_at_5;
    released = false;
    dsv4_server *srv = dsv4_th_start(&cfg);
    dsv4_th_submit(srv, &running, prompt, 20, &p);
    dsv4_th_submit(srv, &queued, prompt, 10, &p);
    dsv4_th_wait_tokens(&running, 5);
    ok(dsv4_server_cancel(srv, running.id) == 0 && dsv4_server_cancel(srv, queued.id) == 0,
       "cancel a running and a queued request");
    release();
    dsv4_th_wait((dsv4_th_req *[]){&running, &queued}, 2);
    ok(running.end.kind == DSV4_EV_DONE && running.end.finish == DSV4_FINISH_ABORT &&
           running.n_tokens == 5 && running.end.completion_tokens == 5,
       "the running request ends ABORT after its 5 tokens");
    ok(queued.end.kind == DSV4_EV_DONE && queued.end.finish == DSV4_FINISH_ABORT &&
           queued.n_tokens == 0,
       "the queued request ends ABORT with no tokens");
    is_int(dsv4_server_cancel(srv, running.id), -ENOENT, "cancelling an ended request");
    ok(dsv4_metric_get(DSV4_M_PAGES_USED) == dsv4_metric_get(DSV4_M_PAGES_CACHED) &&
           dsv4_metric_get(DSV4_M_REQUESTS_ABORTED) == 2,
       "pages back (only the cache holds some), two aborts counted");
    ok(dsv4_server_flush_cache(srv) == 0 && dsv4_metric_get(DSV4_M_PAGES_USED) == 0 &&
           dsv4_metric_get(DSV4_M_SLOTS_USED) == 0,
       "no page or slot left after a cache flush");

    /* behind a held request, more queued requests than the index has buckets: the first,
     * the one a bucket's count later (the same bucket; cancelled twice) and the last are
     * cancelled */
    enum { MANY = DSV4_SERVE_ID_BUCKETS + 3 };
    static dsv4_th_req many[MANY];
    dsv4_th_req blocker;
    dsv4_gen_params one = {.max_tokens = 1, .top_p = 1, .ignore_eos = true};
    dsv4_th_hold_engine(srv, &blocker, prompt, 20);
    for (uint32_t i = 0; i < MANY; i++)
        dsv4_th_submit(srv, &many[i], prompt, 4, &one);
    const uint32_t cut[] = {0, DSV4_SERVE_ID_BUCKETS, MANY - 1};
    bool found = many[DSV4_SERVE_ID_BUCKETS].id == many[0].id + DSV4_SERVE_ID_BUCKETS;
    for (uint32_t c = 0; c < 3; c++)
        found = found && dsv4_server_cancel(srv, many[cut[c]].id) == 0;
    found = found && dsv4_server_cancel(srv, many[cut[1]].id) == 0; /* twice: once taken */
    is_int(dsv4_server_cancel(srv, many[MANY - 1].id + DSV4_SERVE_ID_BUCKETS), -ENOENT,
           "an id not given out yet, in a bucket of queued ones: -ENOENT");
    dsv4_th_release();
    for (uint32_t i = 0; i < MANY; i++)
        dsv4_th_wait((dsv4_th_req *[]){&many[i]}, 1);
    uint32_t aborted = 0, served = 0;
    for (uint32_t i = 0; i < MANY; i++) {
        bool cancelled = i == cut[0] || i == cut[1] || i == cut[2];
        aborted += cancelled && many[i].end.finish == DSV4_FINISH_ABORT && many[i].n_tokens == 0;
        served += !cancelled && many[i].end.finish == DSV4_FINISH_LENGTH && many[i].n_tokens == 1;
    }
    ok(found && aborted == 3,
       "%u queued: cancel finds the first, the one a bucket later and the last (%u aborted)",
       (unsigned)MANY, aborted);
    is_int(served, MANY - 3, "every other queued request is served");
    dsv4_server_stop(srv, 0);

    dsv4_th_req r = stop_during(600000);
    ok(r.done && r.end.kind == DSV4_EV_DONE && r.end.finish == DSV4_FINISH_LENGTH &&
           r.n_tokens == 100,
       "stop with a grace: the running request finishes");
    r = stop_during(0);
    ok(r.done && r.end.kind == DSV4_EV_DONE && r.end.finish == DSV4_FINISH_ABORT &&
           r.n_tokens >= 5 && r.n_tokens < 100,
       "stop without grace: the running request is aborted (%u tokens)", r.n_tokens);
    is_int(dsv4_metric_get(DSV4_M_RUNNING), 0, "nothing left running");
    ok(dsv4_metric_get(DSV4_M_PAGES_USED) == dsv4_metric_get(DSV4_M_PAGES_CACHED),
       "only the cache held pages at the end");

    /* submit validates */
    srv = dsv4_th_start(&cfg);
    dsv4_gen_params bad = p;
    bad.max_tokens = dsv4_server_max_context(srv);
    int32_t bad_tok = (int32_t)dsv4_server_vocab(srv);
    dsv4_th_req unused;
    ok(dsv4_th_try_submit(srv, &unused, prompt, 0, &p) == -EINVAL &&
           dsv4_th_try_submit(srv, &unused, &bad_tok, 1, &p) == -EINVAL &&
           dsv4_th_try_submit(srv, &unused, prompt, 20, &bad) == -EINVAL,
       "empty prompt, bad token id and prompt + max_tokens over the context are refused");
    dsv4_server_stop(srv, 0);
    dsv4_th_fini();
    return done_testing();
}
