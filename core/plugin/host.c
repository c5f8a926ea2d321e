/* host.c: the daemon's default host table (plugin.h), the only door from a plugin into
 * the daemon: logging through core/util/log, aligned allocation, the monotonic clock. */
#include "config.h"

#include "core/plugin/registry.h"

#include <stdlib.h>

#include "core/util/clock.h"
#include "core/util/log.h"

static void *host_alloc(size_t size, size_t align)
{
    void *p;

    /* posix_memalign wants a power-of-two multiple of sizeof(void *). */
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (align & (align - 1))
        return NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    return p;
}

static void host_free(void *p)
{
    free(p);
}

static const dsv4_host default_host = {
    .struct_size = sizeof(dsv4_host),
    .log = dsv4_log,
    .alloc = host_alloc,
    .free = host_free,
    .now_ns = dsv4_now_ns,
};

const dsv4_host *dsv4_host_default(void)
{
    return &default_host;
}
