/* sync.c: the hostcache/sync plugin: save and load copy every layer before they return,
 * so by the time the forward asks for a layer it has long landed and wait_layer never
 * blocks. The simple choice; a hit pays the whole copy before its first layer runs. */
#include "config.h"

#include "plugins/hostcache/common.h"

typedef struct sync_config {
    dsv4_hostcache_config common;
} sync_config;

static int sync_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                     size_t errlen)
{
    return dsv4_hc_init(DSV4_HC_SYNC, "hostcache/sync", host, config, state_p, err, errlen);
}

static const dsv4_option sync_options[] = {
    DSV4_HC_COMMON_OPTIONS(sync_config),
    {.key = NULL},
};

static const dsv4_hostcache_ops sync_ops = DSV4_HC_OPS;

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_HC_DESC_HEADER,
    .name = "sync",
    .description = "host tier: a hit loads every layer before the forward",
    .options = sync_options,
    .config_size = sizeof(sync_config),
    .init = sync_init,
    .fini = dsv4_hc_fini,
    .ops = &sync_ops,
};
