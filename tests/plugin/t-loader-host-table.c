/* t-loader-host-table: the default host table handed to plugins (aligned allocation, a
 * monotonic clock, logging) and the family names the loader matches file names with. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "core/plugin/registry.h"
#include "tests/tap.h"

int main(void)
{
    const dsv4_host *h = dsv4_host_default();
    static const size_t aligns[] = {1, 8, 64, 4096};

    plan(17);
    is_int(h->struct_size, sizeof(dsv4_host), "struct_size is this build's");
    ok(h->kv == NULL && h->selection == NULL && h->cuda_stream == NULL,
       "no KV layout, selection or stream until the daemon sets them");
    for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
        unsigned char *p = h->alloc(100, aligns[i]);
        ok(p && (uintptr_t)p % aligns[i] == 0, "alloc(100, %zu) is aligned", aligns[i]);
        if (p)
            memset(p, 0xa5, 100); /* writable over its whole size (ASan checks the bound) */
        h->free(p);
    }
    ok(h->alloc(64, 48) == NULL, "alloc refuses an alignment that is not a power of two");
    h->free(NULL);
    uint64_t t0 = h->now_ns(), t1 = h->now_ns();
    ok(t0 > 0 && t1 >= t0, "now_ns does not go backwards");
    h->log(DSV4_LOG_DEBUG, "sched/test", "a debug line (dropped at the default level)");

    static const char *const names[] = {"indexk", "transport", "hostcache", "sched"};
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        is_str(dsv4_family_name((dsv4_family)f), names[f], "family %d is %s", f, names[f]);
        is_int(dsv4_family_from_name(names[f]), f, "%s is family %d", names[f], f);
    }
    ok(dsv4_family_name(DSV4_FAMILY_COUNT) == NULL, "no name past the last family");
    return done_testing();
}
