/* lpm.c: the sched/lpm plugin: longest prefix match first. Requests whose prompt has the
 * most tokens already in the prefix cache run first, so they reuse those pages before
 * eviction takes them. Sorting costs one prefix lookup per request, so above max_queue
 * waiting requests the plugin falls back to arrival order, as SGLang's lpm policy does
 * above 128. */
#include "config.h"

#include "plugins/sched/order.h"

#include <errno.h>
#include <stdlib.h>

typedef struct lpm_config {
    int64_t max_queue;
} lpm_config;

static int lpm_cmp(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b, uint64_t key_b)
{
    return (key_a < key_b) - (key_a > key_b);
}

static int lpm_order(void *state, const dsv4_sched_req *reqs, size_t n, const dsv4_sched_view *view,
                     uint32_t *order_out)
{
    const lpm_config *cfg = state;
    uint64_t *keys;
    size_t i;
    int rc;

    if (n == 0)
        return 0;
    if ((int64_t)n > cfg->max_queue)
        return dsv4_sched_sort(reqs, NULL, n, dsv4_sched_cmp_arrival, order_out);
    if (!view || !DSV4_HAS_FIELD(view, dsv4_sched_view, prefix_len) || !view->prefix_len)
        return -EINVAL;
    keys = malloc(n * sizeof *keys);
    if (!keys)
        return -ENOMEM;
    for (i = 0; i < n; i++)
        keys[i] = view->prefix_len(view->ctx, &reqs[i]);
    rc = dsv4_sched_sort(reqs, keys, n, lpm_cmp, order_out);
    free(keys);
    return rc;
}

static const dsv4_option lpm_options[] = {
    {.key = "max_queue",
     .type = DSV4_OPT_INT,
     .def = "128",
     .min = 0,
     .max = 1000000,
     .help = "longest waiting queue still sorted by prefix match; longer queues run in "
             "arrival order (each sort costs one prefix-cache lookup per request)",
     .offset = offsetof(lpm_config, max_queue)},
    {.key = NULL},
};

static const dsv4_sched_ops lpm_ops = {
    .struct_size = sizeof(dsv4_sched_ops),
    .order = lpm_order,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_SCHED_DESC_HEADER,
    .name = "lpm",
    .version = PACKAGE_VERSION,
    .description = "longest prefix-cache match first, arrival order above max_queue requests",
    .flags = 0,
    .options = lpm_options,
    .config_size = sizeof(lpm_config),
    .ops = &lpm_ops,
};
