/* registry.h: finding, loading and listing plugins (DESIGN.md §3).
 *
 * Loading is a pipeline; each stage has its own message so an operator can tell what is
 * wrong with a file without a debugger:
 *   file     (not a regular file / unreadable)
 *   dlopen   (with dlerror: missing dependency, bad ELF ...)
 *   symbol   (no dsv4_plugin)
 *   ABI      (major differs from the daemon's, or minor newer than the daemon's)
 *   size     (struct_size smaller than the first ABI version's descriptor)
 *   signature(build signature differs)
 *   family   (unknown family or family interface version)
 *   name     (descriptor family/name differ from the file name dsv4-<family>-<name>.so)
 *   duplicate(same family/name already loaded from another file)
 *   probe    (the plugin says it cannot run here, with its reason)
 * Failed plugins stay in the registry with their status and reason, so `dsv4ctl list`
 * shows them instead of hiding them. Messages follow STYLE.md, e.g.
 *   plugin transport/ucx (dsv4-transport-ucx.so): ABI 2.1 not supported (daemon 1.x)
 *
 * The registry owns every dlopen handle; descriptors it returns stay valid until
 * dsv4_registry_free().
 */
#ifndef DSV4_CORE_REGISTRY_H
#define DSV4_CORE_REGISTRY_H

#include <dsv4d/plugin.h>

typedef struct dsv4_registry dsv4_registry;

typedef enum dsv4_load_stage {
    DSV4_STAGE_OK = 0,
    DSV4_STAGE_FILE,
    DSV4_STAGE_DLOPEN,
    DSV4_STAGE_SYMBOL,
    DSV4_STAGE_ABI,
    DSV4_STAGE_SIZE,
    DSV4_STAGE_SIGNATURE,
    DSV4_STAGE_FAMILY,
    DSV4_STAGE_NAME,
    DSV4_STAGE_DUPLICATE,
    DSV4_STAGE_PROBE,
} dsv4_load_stage;

typedef struct dsv4_plugin_entry {
    const char *path;               /* the file */
    const char *family;             /* from the file name (or descriptor once loaded) */
    const char *name;
    const dsv4_plugin_desc *desc;   /* NULL unless stage == DSV4_STAGE_OK */
    dsv4_load_stage stage;          /* where loading stopped */
    int status;                     /* 0 or the DSV4_E* / -errno of that stage */
    const char *reason;             /* the full message; "" when ok */
    const char *detail;             /* the reason without its "plugin f/n (file): " subject,
                                     * for tables that show the subject in columns */
} dsv4_plugin_entry;

/* Family names: "indexk", "transport", "hostcache", "sched". */
const char *dsv4_family_name(dsv4_family family);
/* -1 when not a family name. */
int dsv4_family_from_name(const char *name);

/* host: the table handed to probe hooks (NULL = the default host table). */
dsv4_registry *dsv4_registry_new(const dsv4_host *host);
void dsv4_registry_free(dsv4_registry *reg);

/* The search path, in order: the --plugin-dir value (may be NULL), $DSV4D_PLUGIN_PATH
 * (colon-separated), [core] plugin_dir (may be NULL), then the installed directory
 * DSV4_PLUGIN_DIR. The first directory that holds a family/name wins; later copies are
 * recorded as duplicates. Returns 0 or a negative status (no directory at all readable is
 * not an error: the registry is then empty). */
int dsv4_registry_scan(dsv4_registry *reg, const char *cli_dir, const char *conf_dir);
/* Load one file through the pipeline (dsv4ctl check-plugin); the entry is kept in the
 * registry either way and returned through entry_p. Returns 0 or the failing status. */
int dsv4_registry_load_file(dsv4_registry *reg, const char *path,
                            const dsv4_plugin_entry **entry_p);

size_t dsv4_registry_count(const dsv4_registry *reg);
const dsv4_plugin_entry *dsv4_registry_entry(const dsv4_registry *reg, size_t i);
/* The loaded plugin family/name, or NULL (then *entry_p, if given, is the failed entry of
 * that name or NULL when none was seen). */
const dsv4_plugin_desc *dsv4_registry_find(const dsv4_registry *reg, dsv4_family family,
                                           const char *name, const dsv4_plugin_entry **entry_p);

/* The daemon's host table (logging through core/util/log, aligned alloc, monotonic
 * clock); kv and cuda_stream are NULL and selection is NULL until the daemon sets them. */
const dsv4_host *dsv4_host_default(void);

#endif
