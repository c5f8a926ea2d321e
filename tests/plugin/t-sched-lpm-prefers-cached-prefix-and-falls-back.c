/* t-sched-lpm-prefers-cached-prefix-and-falls-back: lpm orders by the prefix length the
 * core's view reports (longest first, then arrival, then id), asks the view once per
 * request, and orders by arrival without asking it once the queue is longer than
 * max_queue (default 128, like SGLang); the threshold is inclusive on the lpm side. */
#include "tests/plugin/plugin-harness.h"
#include "tests/plugin/sched-queue.h"
#include "tests/tap.h"

#include <dsv4d/sched.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct prefix_ctx {
    const dsv4_sched_req *base; /* prefix lengths are indexed by queue position */
    const uint32_t *prefix;
    unsigned calls;
} prefix_ctx;

static uint32_t view_prefix_len(void *ctx, const dsv4_sched_req *req)
{
    prefix_ctx *c = ctx;

    c->calls++;
    return c->prefix[req - c->base];
}

static bool same_order(const uint32_t *a, const uint32_t *b, size_t n)
{
    return !memcmp(a, b, n * sizeof *a);
}

/* A queue of n requests, queue position i arriving at 1000 - i with prefix (i*37 % 5)*16;
 * checks that the order is lpm's (prefix desc, arrival asc) or arrival order. */
static bool big_queue_ok(const dsv4_plugin_desc *desc, void *state, size_t n, bool want_lpm,
                         unsigned *calls_p)
{
    dsv4_sched_req *reqs = calloc(n, sizeof *reqs);
    uint32_t *prefix = calloc(n, sizeof *prefix), *order = calloc(n, sizeof *order);
    prefix_ctx ctx = {reqs, prefix, 0};
    dsv4_sched_view view = {sizeof view, &ctx, view_prefix_len};
    const dsv4_sched_ops *ops = desc->ops;
    bool good;
    size_t i;

    for (i = 0; i < n; i++) {
        reqs[i] = (dsv4_sched_req){.id = i, .arrival = 1000 - i};
        prefix[i] = (uint32_t)(i * 37 % 5) * 16;
    }
    good = ops->order(state, reqs, n, &view, order) == 0;
    for (i = 1; good && i < n; i++) {
        const dsv4_sched_req *a = &reqs[order[i - 1]], *b = &reqs[order[i]];
        uint32_t pa = prefix[order[i - 1]], pb = prefix[order[i]];
        if (want_lpm)
            good = pa > pb || (pa == pb && a->arrival < b->arrival);
        else
            good = a->arrival < b->arrival;
    }
    *calls_p = ctx.calls;
    free(reqs);
    free(prefix);
    free(order);
    return good;
}

int main(void)
{
    /* Prefix lengths per queue position of sched_queue. */
    static const uint32_t prefix[SCHED_QUEUE_LEN] = {64, 0, 256, 64, 0, 32, 256, 0};
    /* 256: positions 6 (arrival 3), 2 (9); 64: 3 (2), 0 (5); 32: 5; 0: 1 (2), 7 (4), 4 (7). */
    static const uint32_t want_lpm[SCHED_QUEUE_LEN] = {6, 2, 3, 0, 5, 1, 7, 4};
    const dsv4_plugin_desc *desc = plugtest_open("sched", "lpm");
    const dsv4_sched_ops *ops = desc->ops;
    prefix_ctx ctx = {sched_queue, prefix, 0};
    dsv4_sched_view view = {sizeof view, &ctx, view_prefix_len};
    void *conf_def = plugtest_config(desc, NULL);
    void *conf_8 = plugtest_config(desc, "max_queue", "8", NULL);
    void *conf_7 = plugtest_config(desc, "max_queue", "7", NULL);
    void *st_def = plugtest_init(desc, conf_def), *st_8 = plugtest_init(desc, conf_8);
    void *st_7 = plugtest_init(desc, conf_7);
    uint32_t got[SCHED_QUEUE_LEN];
    unsigned calls;

    plan(PLUGTEST_DESC_TESTS + 7);
    plugtest_check_desc(desc, DSV4_FAMILY_SCHED, DSV4_SCHED_VERSION, "lpm", sizeof(dsv4_sched_ops));

    ok(ops->order(st_def, sched_queue, SCHED_QUEUE_LEN, &view, got) == 0 &&
           same_order(got, want_lpm, SCHED_QUEUE_LEN) && ctx.calls == SCHED_QUEUE_LEN,
       "longest cached prefix first, ties by arrival, one view call per request");
    ctx.calls = 0;
    ok(ops->order(st_8, sched_queue, SCHED_QUEUE_LEN, &view, got) == 0 &&
           same_order(got, want_lpm, SCHED_QUEUE_LEN),
       "max_queue = 8: a queue of 8 is still sorted by prefix");
    ctx.calls = 0;
    ok(ops->order(st_7, sched_queue, SCHED_QUEUE_LEN, &view, got) == 0 &&
           same_order(got, sched_queue_fcfs, SCHED_QUEUE_LEN) && ctx.calls == 0,
       "max_queue = 7: a queue of 8 runs in arrival order without prefix lookups");
    is_int(ops->order(st_def, sched_queue, SCHED_QUEUE_LEN, NULL, got), -EINVAL,
           "sorting by prefix without a view is refused");

    ok(big_queue_ok(desc, st_def, 128, true, &calls) && calls == 128,
       "default max_queue: 128 waiting requests are sorted by prefix");
    ok(big_queue_ok(desc, st_def, 129, false, &calls) && calls == 0,
       "default max_queue: 129 waiting requests fall back to arrival order");
    is_int(ops->order(st_def, sched_queue, 0, &view, got), 0, "an empty queue is fine");

    desc->fini(st_def);
    desc->fini(st_8);
    desc->fini(st_7);
    plugtest_config_free(desc, conf_def);
    plugtest_config_free(desc, conf_8);
    plugtest_config_free(desc, conf_7);
    return done_testing();
}
