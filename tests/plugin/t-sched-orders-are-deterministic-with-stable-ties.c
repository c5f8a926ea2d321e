/* t-sched-orders-are-deterministic-with-stable-ties: fcfs, priority and lof order a
 * crafted queue as documented (policy key, then arrival, then id), and the same requests
 * in reverse queue order come out in the same order; every plugin passes the loader's
 * descriptor rules. */
#include "tests/plugin/plugin-harness.h"
#include "tests/plugin/sched-queue.h"
#include "tests/tap.h"

#include <dsv4d/sched.h>

#include <stdio.h>
#include <string.h>

/* The order as text, so a failure shows both orders. */
static const char *fmt_order(char *buf, size_t len, const uint32_t *o, size_t n)
{
    size_t i, used = 0;

    buf[0] = '\0';
    for (i = 0; i < n && used + 12 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%u", i ? " " : "", o[i]);
    return buf;
}

static void check_policy(const char *name, const uint32_t *want)
{
    const dsv4_plugin_desc *desc = plugtest_open("sched", name);
    const dsv4_sched_ops *ops = desc->ops;
    void *conf = plugtest_config(desc, NULL);
    void *state = plugtest_init(desc, conf);
    dsv4_sched_req rev[SCHED_QUEUE_LEN];
    uint32_t got[SCHED_QUEUE_LEN], got_rev[SCHED_QUEUE_LEN];
    char got_text[128], want_text[128];
    bool same = true;
    size_t i;

    plugtest_check_desc(desc, DSV4_FAMILY_SCHED, DSV4_SCHED_VERSION, name, sizeof(dsv4_sched_ops));
    is_int(ops->order(state, sched_queue, SCHED_QUEUE_LEN, NULL, got), 0, "%s: order", name);
    is_str(fmt_order(got_text, sizeof got_text, got, SCHED_QUEUE_LEN),
           fmt_order(want_text, sizeof want_text, want, SCHED_QUEUE_LEN), "%s: crafted queue order",
           name);
    for (i = 0; i < SCHED_QUEUE_LEN; i++)
        rev[i] = sched_queue[SCHED_QUEUE_LEN - 1 - i];
    ops->order(state, rev, SCHED_QUEUE_LEN, NULL, got_rev);
    for (i = 0; i < SCHED_QUEUE_LEN; i++)
        same = same && rev[got_rev[i]].id == sched_queue[want[i]].id;
    ok(same, "%s: the reversed queue gives the same request order", name);
    is_int(ops->order(state, sched_queue, 0, NULL, got), 0, "%s: an empty queue is fine", name);
    desc->fini(state);
    plugtest_config_free(desc, conf);
}

int main(void)
{
    /* priority: INT32_MAX, then the three 5s by arrival, the 0s, -1, INT32_MIN. */
    static const uint32_t want_priority[SCHED_QUEUE_LEN] = {7, 5, 1, 2, 0, 4, 3, 6};
    /* lof: UINT32_MAX, the 100s by arrival, the 50s, 10, 0. */
    static const uint32_t want_lof[SCHED_QUEUE_LEN] = {6, 5, 0, 2, 1, 4, 3, 7};

    plan(3 * (PLUGTEST_DESC_TESTS + 4));
    check_policy("fcfs", sched_queue_fcfs);
    check_policy("priority", want_priority);
    check_policy("lof", want_lof);
    return done_testing();
}
