/* open.c: dsv4_config_open, the one path from a file name to a checked configuration and
 * its plugins (dsv4ctl validate, dsv4d -t and dsv4d itself all go through it, so they
 * cannot disagree about what is valid). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/config/config.h"
#include "core/config/reader.h"
#include "core/util/status.h"

/* [core] plugin_dir as written in the file, or NULL. The registry must be scanned before
 * the file is typed (plugin sections are parsed against plugin schemas), so this one key
 * is looked at first; its problems, if any, are reported by the real load that follows. */
static char *peek_plugin_dir(const char *path)
{
    dsv4_diags scratch;
    dsv4_diags_init(&scratch);
    dsv4_ini *ini = dsv4_ini_read(path, &scratch);
    dsv4_diags_free(&scratch);
    const dsv4_ini_entry *e =
        ini ? dsv4_ini_entry_find(dsv4_ini_section_find(ini, "core"), "plugin_dir") : NULL;
    char *dir = e && e->value[0] ? strdup(e->value) : NULL;
    dsv4_ini_free(ini);
    return dir;
}

/* Put the entries from index `from` on in file order (stable: findings on one line keep
 * the order they were found in), so the output reads top to bottom like the file. */
static void sort_by_line(dsv4_diags *diags, size_t from)
{
    for (size_t i = from + 1; i < diags->n; i++) {
        dsv4_diag_entry e = diags->v[i];
        size_t j = i;
        for (; j > from && diags->v[j - 1].line > e.line; j--)
            diags->v[j] = diags->v[j - 1];
        diags->v[j] = e;
    }
}

int dsv4_config_open(const char *path, const char *cli_dir, dsv4_registry **reg_p,
                     dsv4_config **conf_p, dsv4_diags *diags)
{
    struct stat st;
    if (cli_dir && (stat(cli_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, NULL, 0, NULL, NULL,
                       "plugin directory %s: not a directory", cli_dir);
        return -ENOTDIR;
    }
    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, NULL, 0, NULL, NULL,
                       "cannot create the plugin registry (%s)", strerror(ENOMEM));
        return -ENOMEM;
    }
    char *conf_dir = peek_plugin_dir(path);
    int rc = dsv4_registry_scan(reg, cli_dir, conf_dir);
    free(conf_dir);
    if (rc != 0) {
        dsv4_diags_add(diags, DSV4_DIAG_ERROR, NULL, 0, NULL, NULL, "cannot scan for plugins (%s)",
                       dsv4_strerror(rc));
        goto fail_registry;
    }
    size_t errors_before = diags->n_errors, first = diags->n;
    dsv4_config *conf = dsv4_config_load(path, reg, diags);
    if (!conf) {
        rc = -EIO;
        goto fail_registry;
    }
    /* The cross-family rules read typed values; after a parse error some are defaults the
     * user did not choose, and rules about them would mislead, so they wait for a clean
     * parse. */
    if (diags->n_errors == errors_before)
        dsv4_config_check(conf, diags);
    sort_by_line(diags, first);
    if (diags->n_errors != errors_before) {
        rc = DSV4_ECONFIG;
        goto fail_config;
    }
    *reg_p = reg;
    *conf_p = conf;
    return 0;

fail_config:
    dsv4_config_free(conf);
fail_registry:
    dsv4_registry_free(reg);
    return rc;
}
