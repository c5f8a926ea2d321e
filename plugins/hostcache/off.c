/* off.c: the hostcache/off plugin: no host tier. Evicted pages are gone (the prefix is
 * recomputed on its next use); save and load refuse with -ENOTSUP and say so, so a caller
 * that tries to use a tier that is not there fails loudly instead of reading nothing. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "plugins/hostcache/common.h"

typedef struct off_state {
    const dsv4_host *host;
} off_state;

static int off_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen)
{
    (void)config;
    (void)err;
    (void)errlen;
    off_state *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->host = host;
    *state_p = s;
    return 0;
}

static void off_fini(void *state)
{
    free(state);
}

static int off_attach(void *state, const dsv4_kv_layout *device, const dsv4_kv_layout *host)
{
    (void)state;
    (void)device;
    (void)host;
    return 0;
}

static int off_refuse(void *state, const char *what)
{
    off_state *s = state;
    s->host->log(DSV4_LOG_ERROR, "hostcache/off", "%s refused (the host tier is off)", what);
    return -ENOTSUP;
}

static int off_save(void *state, const dsv4_page_copy *pages, size_t n, void **op_p)
{
    (void)pages;
    (void)n;
    (void)op_p;
    return off_refuse(state, "save");
}

static int off_load(void *state, const dsv4_page_copy *pages, size_t n, void **op_p)
{
    (void)pages;
    (void)n;
    (void)op_p;
    return off_refuse(state, "load");
}

/* No op can exist, so there is nothing to wait for or poll. */
static int off_wait_layer(void *state, void *op, uint32_t layer)
{
    (void)state;
    (void)op;
    (void)layer;
    return -EINVAL;
}

static int off_stream_wait_layer(void *state, void *op, uint32_t layer, void *stream)
{
    (void)stream;
    return off_wait_layer(state, op, layer);
}

static int off_poll(void *state, void *op)
{
    (void)state;
    (void)op;
    return -EINVAL;
}

static void off_release(void *state, void *op)
{
    (void)state;
    (void)op;
}

static const dsv4_option off_options[] = {{.key = NULL}};

static const dsv4_hostcache_ops off_ops = {
    .struct_size = sizeof(dsv4_hostcache_ops),
    .attach = off_attach,
    .save = off_save,
    .load = off_load,
    .wait_layer = off_wait_layer,
    .poll = off_poll,
    .release = off_release,
    .save_state = off_save,
    .load_state = off_load,
    .stream_wait_layer = off_stream_wait_layer,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_HC_DESC_HEADER,
    .name = "off",
    .description = "no host tier: evicted pages are gone and recomputed",
    .options = off_options,
    .config_size = 0,
    .init = off_init,
    .fini = off_fini,
    .ops = &off_ops,
};
