/* cmd_list.c: the plugin inspection commands of dsv4ctl(1): list, describe and
 * check-plugin. All three see plugins through the registry (core/plugin/registry.h), so
 * what they print is what the daemon would load. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli/commands.h"
#include "core/config/config.h"
#include "core/config/schema.h"
#include "core/plugin/registry.h"
#include "core/util/status.h"

/* The registry over the search path, or NULL after saying why (exit 2). */
static dsv4_registry *open_registry(const char *cmd)
{
    const char *dir = dsv4ctl_opts.plugin_dir;
    struct stat st;

    if (dir && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "dsv4ctl %s: plugin directory %s: not a directory\n", cmd, dir);
        return NULL;
    }
    dsv4_registry *reg = dsv4_registry_new(NULL);
    int rc = reg ? dsv4_registry_scan(reg, dir, NULL) : -ENOMEM;
    if (rc != 0) {
        fprintf(stderr, "dsv4ctl %s: cannot search for plugins (%s)\n", cmd, dsv4_strerror(rc));
        dsv4_registry_free(reg);
        return NULL;
    }
    return reg;
}

/* The options of a command that takes --help and one operand (*operand_p): -1 to go on, else
 * its exit status (0 after --help, 2 after a usage error, the usage printed). */
static int one_operand(int argc, char **argv, void (*usage)(FILE *out), const char **operand_p)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c = getopt_long(argc, argv, "h", opts, NULL);
    if (c == 'h') {
        usage(stdout);
        return 0;
    }
    if (c != -1 || argc - optind != 1) {
        usage(stderr);
        return 2;
    }
    *operand_p = argv[optind];
    return -1;
}

/* ---- list ------------------------------------------------------------------------------ */

enum { COL_FAMILY, COL_NAME, COL_VERSION, COL_ABI, COL_PATH, COL_STATUS, NCOLS };

/* One row of `list`; abi and status point into buf. */
struct row {
    const char *col[NCOLS];
    char abi[16];
    char *status;
};

/* A plugin that loaded but whose probe says it cannot run on this host (no GPU for a GPU
 * transport): listed with the reason, not counted as a failure. */
static bool unavailable(const dsv4_plugin_entry *e)
{
    return e->stage == DSV4_STAGE_PROBE && e->status == DSV4_EUNAVAIL;
}

static int fill_row(const dsv4_plugin_entry *e, struct row *r)
{
    r->col[COL_FAMILY] = e->family;
    r->col[COL_NAME] = e->name;
    r->col[COL_VERSION] = e->desc && e->desc->version ? e->desc->version : "-";
    if (e->desc)
        snprintf(r->abi, sizeof(r->abi), "%u.%u", e->desc->abi_major, e->desc->abi_minor);
    else
        snprintf(r->abi, sizeof(r->abi), "-");
    r->col[COL_ABI] = r->abi;
    r->col[COL_PATH] = e->path;
    if (e->stage == DSV4_STAGE_OK)
        r->status = strdup("ok");
    else if (unavailable(e))
        r->status = strdup(e->detail);
    else if (asprintf(&r->status, "failed: %s", e->detail) < 0)
        r->status = NULL;
    r->col[COL_STATUS] = r->status;
    return r->status ? 0 : -ENOMEM;
}

static void list_usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] list [--porcelain]\n"
                 "Every plugin file in the search path, in search order, loaded or not.\n"
                 "  --porcelain  one line per plugin, tab-separated fields in this order:\n"
                 "               family, name, version, ABI, status, path\n"
                 "               (version and ABI are - when the plugin did not load; status is\n"
                 "               ok, \"not available here (\" and the plugin's reason \")\", or\n"
                 "               \"failed: \" and the reason)\n"
                 "Exit status: 0 when every plugin loaded or is only not available here, 1 when\n"
                 "any failed, 2 on usage errors.\n");
}

/* Human form: an aligned table with the free-text status last, so a long reason does not
 * push the other columns apart. */
static void print_table(struct row *rows, size_t n)
{
    static const char *const head[NCOLS] = {"FAMILY", "NAME", "VERSION", "ABI", "PATH", "STATUS"};
    int w[NCOLS];

    for (int c = 0; c < NCOLS; c++)
        w[c] = (int)strlen(head[c]);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < NCOLS; c++)
            if ((int)strlen(rows[i].col[c]) > w[c])
                w[c] = (int)strlen(rows[i].col[c]);
    for (int c = 0; c < NCOLS - 1; c++)
        printf("%-*s  ", w[c], head[c]);
    printf("%s\n", head[NCOLS - 1]);
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < NCOLS - 1; c++)
            printf("%-*s  ", w[c], rows[i].col[c]);
        printf("%s\n", rows[i].col[NCOLS - 1]);
    }
}

int dsv4ctl_list(int argc, char **argv)
{
    static const struct option opts[] = {
        {"porcelain", no_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool porcelain = false;
    int c;

    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': porcelain = true; break;
        case 'h': list_usage(stdout); return 0;
        default: list_usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        list_usage(stderr);
        return 2;
    }

    dsv4_registry *reg = open_registry("list");
    if (!reg)
        return 2;
    size_t n = dsv4_registry_count(reg);
    struct row *rows = calloc(n ? n : 1, sizeof(*rows));
    int status = rows ? 0 : 2;
    for (size_t i = 0; status == 0 && i < n; i++) {
        const dsv4_plugin_entry *e = dsv4_registry_entry(reg, i);
        if (fill_row(e, &rows[i]) != 0)
            status = 2;
    }
    if (status == 2) {
        fprintf(stderr, "dsv4ctl list: out of memory\n");
    } else if (n == 0) {
        fprintf(stderr, "dsv4ctl list: no plugins found\n");
    } else if (porcelain) {
        for (size_t i = 0; i < n; i++)
            printf("%s\t%s\t%s\t%s\t%s\t%s\n", rows[i].col[COL_FAMILY], rows[i].col[COL_NAME],
                   rows[i].col[COL_VERSION], rows[i].col[COL_ABI], rows[i].col[COL_STATUS],
                   rows[i].col[COL_PATH]);
    } else {
        print_table(rows, n);
    }
    for (size_t i = 0; i < n; i++) {
        const dsv4_plugin_entry *e = dsv4_registry_entry(reg, i);
        if (status == 0 && e->stage != DSV4_STAGE_OK && !unavailable(e))
            status = 1;
        if (rows)
            free(rows[i].status);
    }
    free(rows);
    dsv4_registry_free(reg);
    return status;
}

/* ---- describe -------------------------------------------------------------------------- */

/* One section's keys, each as it would be written in the INI file, then its type, range
 * and help:
 *   [sched.good]
 *     window = 64
 *         int, 1..4096
 *         how many of the oldest requests are reordered */
static void print_options(const char *section, const dsv4_option *opts)
{
    char range[512];

    printf("[%s]\n", section);
    if (!opts || !opts->key)
        printf("  (no keys)\n");
    for (const dsv4_option *o = opts; o && o->key; o++) {
        if (!o->def)
            printf("  %s = (required)\n", o->key);
        else if (!o->def[0])
            printf("  %s =\n", o->key);
        else
            printf("  %s = %s\n", o->key, o->def);
        dsv4_schema_range_text(o, range, sizeof(range));
        printf("      %s%s%s\n", dsv4_opt_type_name(o->type), range[0] ? ", " : "", range);
        printf("      %s\n", o->help ? o->help : "");
    }
}

static void print_flags(uint64_t flags)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {DSV4_PLUGIN_NEEDS_CUDA, "needs-cuda"},
        {DSV4_PLUGIN_NEEDS_GPU, "needs-gpu"},
        {DSV4_PLUGIN_EXPERIMENTAL, "experimental"},
        {DSV4_PLUGIN_TEST_ONLY, "test-only"},
    };
    const char *sep = "";

    printf("flags: ");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (flags & names[i].bit) {
            printf("%s%s", sep, names[i].name);
            sep = ", ";
        }
    }
    printf("%s\n", sep[0] ? "" : "none");
}

static void describe_usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] describe FAMILY/NAME | core\n"
                 "Print a plugin's (or the core sections') configuration keys with their\n"
                 "defaults, types, ranges and help.\n"
                 "Exit status: 0 described, 1 no such plugin or it failed to load, 2 usage.\n");
}

static int describe_core(void)
{
    print_options("core", dsv4_core_options);
    printf("\n");
    print_options("model", dsv4_model_options);
    printf("\n");
    print_options("server", dsv4_server_options);
    printf("\n");
    print_options("pd", dsv4_pd_options);
    return 0;
}

static int describe_plugin(int family, const char *name)
{
    const char *fam = dsv4_family_name((dsv4_family)family);
    dsv4_registry *reg = open_registry("describe");
    const dsv4_plugin_entry *e;
    char section[256];

    if (!reg)
        return 2;
    const dsv4_plugin_desc *d = dsv4_registry_find(reg, (dsv4_family)family, name, &e);
    if (!d) {
        if (e)
            fprintf(stderr, "dsv4ctl describe: %s\n", e->reason);
        else
            fprintf(stderr, "dsv4ctl describe: no plugin %s/%s in the plugin search path\n", fam,
                    name);
        dsv4_registry_free(reg);
        return 1;
    }
    printf("%s/%s %s (ABI %u.%u)\n", fam, d->name, d->version ? d->version : "-", d->abi_major,
           d->abi_minor);
    printf("%s\n", d->description ? d->description : "");
    print_flags(d->flags);
    printf("path: %s\n\n", e->path);
    snprintf(section, sizeof(section), "%s.%s", fam, d->name);
    print_options(section, d->options);
    dsv4_registry_free(reg);
    return 0;
}

int dsv4ctl_describe(int argc, char **argv)
{
    const char *what;
    int rc = one_operand(argc, argv, describe_usage, &what);
    if (rc >= 0)
        return rc;
    if (strcmp(what, "core") == 0)
        return describe_core();

    const char *slash = strchr(what, '/');
    if (!slash || slash == what || !slash[1]) {
        fprintf(stderr, "dsv4ctl describe: '%s' is not FAMILY/NAME or core\n", what);
        describe_usage(stderr);
        return 2;
    }
    char family[32];
    int f = -1;
    if ((size_t)(slash - what) < sizeof(family)) {
        memcpy(family, what, (size_t)(slash - what));
        family[slash - what] = '\0';
        f = dsv4_family_from_name(family);
    }
    if (f < 0) {
        fprintf(stderr,
                "dsv4ctl describe: unknown family in '%s' (expected indexk, transport, "
                "hostcache or sched)\n",
                what);
        return 2;
    }
    return describe_plugin(f, slash + 1);
}

/* ---- check-plugin ---------------------------------------------------------------------- */

static void check_plugin_usage(FILE *out)
{
    fprintf(out, "usage: dsv4ctl check-plugin FILE.so\n"
                 "Load one plugin file through every loader stage and print the result.\n"
                 "Exit status: 0 it loads, 1 it does not (the reason is printed), 2 usage.\n");
}

int dsv4ctl_check_plugin(int argc, char **argv)
{
    const char *file;
    int rc = one_operand(argc, argv, check_plugin_usage, &file);
    if (rc >= 0)
        return rc;
    /* A registry of its own: the file is checked alone, as if it were the only plugin. */
    dsv4_registry *reg = dsv4_registry_new(NULL);
    const dsv4_plugin_entry *e = NULL;
    int status;
    if (reg)
        dsv4_registry_load_file(reg, file, &e);
    if (!e) {
        fprintf(stderr, "dsv4ctl check-plugin: out of memory\n");
        status = 2;
    } else if (e->stage != DSV4_STAGE_OK) {
        fprintf(stderr, "%s\n", e->reason);
        status = 1;
    } else {
        printf("ok: %s/%s %s (ABI %u.%u)\n", e->family, e->name,
               e->desc->version ? e->desc->version : "-", e->desc->abi_major, e->desc->abi_minor);
        status = 0;
    }
    dsv4_registry_free(reg);
    return status;
}
