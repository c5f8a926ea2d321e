/* family.h: what the core knows about each plugin family beyond its name (registry.h has
 * the names): the interface version of the family header this daemon was built with. */
#ifndef DSV4_CORE_FAMILY_H
#define DSV4_CORE_FAMILY_H

#include <dsv4d/plugin.h>

/* The family header's DSV4_<FAMILY>_VERSION (a plugin may be built against 1..this);
 * 0 for a value that is not a family. */
uint32_t dsv4_family_version(uint32_t family);

#endif
