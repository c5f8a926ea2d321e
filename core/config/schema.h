/* schema.h: typed values from INI strings, driven by dsv4_option tables (plugin.h).
 *
 * The same tables serve core sections and plugin sections: defaults, parsing, ranges,
 * enum names, and the text `dsv4ctl describe` and the man pages print.
 *
 * Value syntax:
 *   bool      true/false, yes/no, on/off, 1/0
 *   int       decimal, optional sign
 *   size      integer with optional K, M, G, T suffix (powers of 1024), e.g. 512M
 *   duration  integer with ms, s or m suffix (a bare number is an error: say the unit)
 *   enum      one of the listed names
 *   string    any text; path: non-empty text
 */
#ifndef DSV4_CORE_SCHEMA_H
#define DSV4_CORE_SCHEMA_H

#include <dsv4d/plugin.h>

/* Parse `value` for `opt` and store it into conf (+opt->offset). On failure writes the
 * user-facing reason ("expected a size like 64M, got 'abc'") into err and returns
 * DSV4_ECONFIG; conf is left unchanged. */
int dsv4_schema_set(const dsv4_option *opt, void *conf, const char *value, char *err,
                    size_t errlen);
/* Store every default (options with def == NULL are left zero). 0, or DSV4_ECONFIG when a
 * table's own default is invalid (a plugin bug; err says which). */
int dsv4_schema_defaults(const dsv4_option *opts, void *conf, char *err, size_t errlen);
/* Free the strings held in conf (STRING/PATH options). */
void dsv4_schema_release(const dsv4_option *opts, void *conf);
const dsv4_option *dsv4_schema_find(const dsv4_option *opts, const char *key);
/* "bool", "int", "size", "duration", "enum", "string", "path". */
const char *dsv4_opt_type_name(dsv4_opt_type type);
/* Describe the range or enum values of opt ("1..64", "4K..1G", "f32|bf16|fp8", "" when
 * unbounded) into buf. */
void dsv4_schema_range_text(const dsv4_option *opt, char *buf, size_t len);

#endif
