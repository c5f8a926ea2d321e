/* priority.c: the sched/priority plugin: larger request priority first; equal priorities
 * keep arrival order. */
#include "config.h"

#include "plugins/sched/order.h"

static int priority_cmp(const dsv4_sched_req *a, uint64_t key_a, const dsv4_sched_req *b,
                        uint64_t key_b)
{
    return (a->priority < b->priority) - (a->priority > b->priority);
}

static int priority_order(void *state, const dsv4_sched_req *reqs, size_t n,
                          const dsv4_sched_view *view, uint32_t *order_out)
{
    return dsv4_sched_sort(reqs, NULL, n, priority_cmp, order_out);
}

static const dsv4_sched_ops priority_ops = {
    .struct_size = sizeof(dsv4_sched_ops),
    .order = priority_order,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_SCHED_DESC_HEADER,
    .name = "priority",
    .version = PACKAGE_VERSION,
    .description = "highest request priority first, then arrival order",
    .flags = 0,
    .options = dsv4_sched_no_options,
    .config_size = 0,
    .ops = &priority_ops,
};
