/* lof.c: the sched/lof plugin: longest output first (largest max_new_tokens first, then
 * arrival order). Starting the longest generations early shortens the tail of a batch
 * whose requests all arrive together. */
#include "config.h"

#include "plugins/sched/order.h"

static int lof_cmp(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b, uint64_t key_b)
{
    return (a->max_new_tokens < b->max_new_tokens) - (a->max_new_tokens > b->max_new_tokens);
}

static int lof_order(void *state, const dsv4_sched_req *reqs, size_t n, const dsv4_sched_view *view,
                     uint32_t *order_out)
{
    return dsv4_sched_sort(reqs, NULL, n, lof_cmp, order_out);
}

static const dsv4_sched_ops lof_ops = {
    .struct_size = sizeof(dsv4_sched_ops),
    .order = lof_order,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_SCHED_DESC_HEADER,
    .name = "lof",
    .version = PACKAGE_VERSION,
    .description = "longest output first: largest max_new_tokens first, then arrival order",
    .flags = 0,
    .options = dsv4_sched_no_options,
    .config_size = 0,
    .ops = &lof_ops,
};
