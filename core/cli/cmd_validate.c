/* cmd_validate.c: `dsv4ctl validate -c FILE` — the configuration check of dsv4ctl(1).
 *
 * Parse, schema, every selected plugin's check hook and the core's cross-family rules,
 * through the same dsv4_config_open dsv4d uses; no GPU work. Every diagnostic goes to
 * stderr as file:line: [section] key: message. Exit 0 valid (warnings allowed), 1
 * invalid, 2 usage error or unreadable file. */
#include <getopt.h>
#include <stdio.h>

#include "core/cli/commands.h"
#include "core/config/config.h"

static int usage(FILE *out, int status)
{
    fprintf(out, "usage: dsv4ctl [--plugin-dir DIR] validate -c FILE\n");
    return status;
}

int dsv4ctl_validate(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'h': return usage(stdout, 0);
        default: return usage(stderr, 2);
        }
    }
    if (!path || optind != argc)
        return usage(stderr, 2);

    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_registry *reg = NULL;
    dsv4_config *conf = NULL;
    int rc = dsv4_config_open(path, dsv4ctl_opts.plugin_dir, &reg, &conf, &diags);
    dsv4_diags_print(&diags, stderr);
    size_t warnings = diags.n - diags.n_errors;
    dsv4_diags_free(&diags);
    if (rc == DSV4_ECONFIG)
        return 1;
    if (rc != 0)
        return 2;
    printf("%s: valid (%zu warning%s)\n", path, warnings, warnings == 1 ? "" : "s");
    dsv4_config_free(conf);
    dsv4_registry_free(reg);
    return 0;
}
