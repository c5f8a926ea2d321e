/* unfenced.c: hostcache/unfenced, a TEST-ONLY negative control. It copies like
 * hostcache/async but its wait_layer reports every layer landed at once, the bug of
 * reference/sglang.md §3.6 (a reader that skips the per-layer fence). The race test runs
 * it with inject_delay and must see corrupted logits; were it to pass, the test could not
 * detect that class of bug. Built for `make check` only, never installed, and flagged
 * DSV4_PLUGIN_TEST_ONLY so `dsv4ctl validate` warns against serving with it. */
#include "config.h"

#include "plugins/hostcache/common.h"

static int unfenced_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                         size_t errlen)
{
    return dsv4_hc_init(DSV4_HC_UNFENCED, "hostcache/unfenced", host, config, state_p, err, errlen);
}

static const dsv4_option unfenced_options[] = {
    DSV4_HC_COMMON_OPTIONS(dsv4_hc_delay_config),
    DSV4_HC_DELAY_OPTION,
    {.key = NULL},
};

static const dsv4_hostcache_ops unfenced_ops = DSV4_HC_OPS;

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_HC_DESC_HEADER,
    .name = "unfenced",
    .description = "test only: async loads whose fence does not wait (negative control)",
    .flags = DSV4_PLUGIN_TEST_ONLY,
    .options = unfenced_options,
    .config_size = sizeof(dsv4_hc_delay_config),
    .init = unfenced_init,
    .fini = dsv4_hc_fini,
    .ops = &unfenced_ops,
};
