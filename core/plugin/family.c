/* family.c: family names and the family interface versions this daemon implements. The
 * family headers are included here, and only here, so the loader checks plugins against
 * the same DSV4_<FAMILY>_VERSION the rest of the core is compiled with. */
#include "config.h"

#include "core/plugin/family.h"

#include <string.h>

#include <dsv4d/hostcache.h>
#include <dsv4d/indexk.h>
#include <dsv4d/sched.h>
#include <dsv4d/transport.h>

#include "core/plugin/registry.h"

static const struct {
    const char *name;
    uint32_t version;
} families[DSV4_FAMILY_COUNT] = {
    [DSV4_FAMILY_INDEXK] = {"indexk", DSV4_INDEXK_VERSION},
    [DSV4_FAMILY_TRANSPORT] = {"transport", DSV4_TRANSPORT_VERSION},
    [DSV4_FAMILY_HOSTCACHE] = {"hostcache", DSV4_HOSTCACHE_VERSION},
    [DSV4_FAMILY_SCHED] = {"sched", DSV4_SCHED_VERSION},
};

const char *dsv4_family_name(dsv4_family family)
{
    if ((unsigned)family >= DSV4_FAMILY_COUNT)
        return NULL;
    return families[family].name;
}

int dsv4_family_from_name(const char *name)
{
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++)
        if (strcmp(families[f].name, name) == 0)
            return f;
    return -1;
}

uint32_t dsv4_family_version(uint32_t family)
{
    if (family >= DSV4_FAMILY_COUNT)
        return 0;
    return families[family].version;
}
