/* config_priv.h: what config.c, options.c and check.c share and nobody else needs.
 *
 * A loaded configuration keeps its parsed file beside the public struct so the checks that
 * run later can still point at file:line. dsv4_config_load returns &priv->pub; the private
 * part is reached back through dsv4_config_priv_of. */
#ifndef DSV4_CORE_CONFIG_PRIV_H
#define DSV4_CORE_CONFIG_PRIV_H

#include "core/config/config.h"
#include "core/config/reader.h"

/* A core section: its name, schema and where its struct sits in dsv4_config. */
typedef struct dsv4_config_section {
    const char *name;
    const dsv4_option *options;
    size_t offset;
} dsv4_config_section;

/* [core] [model] [server] [pd], terminated by a NULL name. */
extern const dsv4_config_section dsv4_config_sections[];

typedef struct dsv4_config_priv {
    dsv4_config pub;
    dsv4_ini *ini; /* the file as read; an empty document for dsv4_config_defaults */
} dsv4_config_priv;

const dsv4_ini *dsv4_config_ini(const dsv4_config *conf);

/* The line a diagnostic about (section, key) should point at: the key's line, else the
 * section header's, else 0 (not in the file). */
int dsv4_config_line(const dsv4_config *conf, const char *section, const char *key);

#endif
