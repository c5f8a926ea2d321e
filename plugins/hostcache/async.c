/* async.c: the hostcache/async plugin: a worker thread copies a load layer by layer and
 * counts the layers landed, so layer l loads while layer l-1 computes. The forward's
 * one KV accessor waits for each layer (wait_layer) before any attention or indexer read
 * of it. On CUDA the worker becomes a copy stream with one event per layer. */
#include "config.h"

#include "plugins/hostcache/common.h"

static int async_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                      size_t errlen)
{
    return dsv4_hc_init(DSV4_HC_ASYNC, "hostcache/async", host, config, state_p, err, errlen);
}

static const dsv4_option async_options[] = {
    DSV4_HC_COMMON_OPTIONS(dsv4_hc_delay_config),
    DSV4_HC_DELAY_OPTION,
    {.key = NULL},
};

static const dsv4_hostcache_ops async_ops = DSV4_HC_OPS;

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_HC_DESC_HEADER,
    .name = "async",
    .description = "host tier: layer-wise loads on a worker, fenced per layer",
    .options = async_options,
    .config_size = sizeof(dsv4_hc_delay_config),
    .init = async_init,
    .fini = dsv4_hc_fini,
    .ops = &async_ops,
};
