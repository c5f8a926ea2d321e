/* fcfs.c: the sched/fcfs plugin: first come, first served (arrival order, then id). */
#include "config.h"

#include "plugins/sched/order.h"

static int fcfs_order(void *state, const dsv4_sched_req *reqs, size_t n,
                      const dsv4_sched_view *view, uint32_t *order_out)
{
    return dsv4_sched_sort(reqs, NULL, n, dsv4_sched_cmp_arrival, order_out);
}

static const dsv4_sched_ops fcfs_ops = {
    .struct_size = sizeof(dsv4_sched_ops),
    .order = fcfs_order,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_SCHED_DESC_HEADER,
    .name = "fcfs",
    .version = PACKAGE_VERSION,
    .description = "first come, first served: requests run in arrival order",
    .flags = 0,
    .options = dsv4_sched_no_options,
    .config_size = 0,
    .ops = &fcfs_ops,
};
