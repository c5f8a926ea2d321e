/* dsv4d: the serving daemon's entry point (dsv4d(8)).
 *
 * What exists today: the configuration and plugin side. `-t` checks a configuration the
 * way `dsv4ctl validate` does (same dsv4_config_open); `-V`/`-VV` report the build; a
 * plain start loads the configuration and plugins, brings every selected plugin through
 * probe, init and fini, and then says plainly that serving is not built yet (exit 2)
 * rather than pretending to serve. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config.h"
#include "core/plugin/registry.h"
#include "core/util/status.h"

#ifndef DSV4_CUDA_ARCH
#define DSV4_CUDA_ARCH "no CUDA"
#endif

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dsv4d [-c FILE] [--plugin-dir DIR] [-t] [-V[V]] [-h]\n"
            "  -c, --config FILE    configuration file (default %s)\n"
            "      --plugin-dir DIR search DIR for plugins first\n"
            "  -t, --test           check the configuration and its plugins, then exit\n"
            "  -V, --version        print the version and plugin ABI; -VV adds configure\n"
            "                       options, CUDA architecture and the plugins found\n"
            "  -h, --help           print this help\n"
            "see dsv4d(8) and dsv4d.ini(5)\n",
            DSV4_CONFIG_FILE);
}

/* -V and -VV. Returns the exit status. */
static int print_version(int verbosity, const char *plugin_dir)
{
    printf("dsv4d %s (plugin ABI %d.%d)\n", PACKAGE_VERSION, DSV4_ABI_MAJOR, DSV4_ABI_MINOR);
    if (verbosity < 2)
        return 0;
    printf("configure: %s\n", DSV4_CONFIGURE_ARGS + strspn(DSV4_CONFIGURE_ARGS, " "));
    printf("cuda: %s\n", DSV4_CUDA_ARCH);
    printf("build signature: %s\n", DSV4_BUILD_SIGNATURE);
    printf("installed plugins: %s\n", DSV4_PLUGIN_DIR);
    dsv4_registry *reg = dsv4_registry_new(NULL);
    int rc = reg ? dsv4_registry_scan(reg, plugin_dir, NULL) : -ENOMEM;
    if (rc != 0) {
        fprintf(stderr, "dsv4d: cannot search for plugins (%s)\n", dsv4_strerror(rc));
        dsv4_registry_free(reg);
        return 1;
    }
    printf("plugins found: %zu\n", dsv4_registry_count(reg));
    for (size_t i = 0; i < dsv4_registry_count(reg); i++) {
        const dsv4_plugin_entry *e = dsv4_registry_entry(reg, i);
        if (e->desc)
            printf("  %s/%s %s ok (%s)\n", e->family, e->name, e->desc->version, e->path);
        else
            printf("  %s/%s failed: %s\n", e->family, e->name, e->reason);
    }
    dsv4_registry_free(reg);
    return 0;
}

/* Probe, init and fini every selected plugin with the daemon's host table. Returns 0 or
 * the first failing status, after saying which plugin failed and why. */
static int start_plugins(const dsv4_config *conf)
{
    dsv4_host host = *dsv4_host_default();
    host.selection = &conf->selection;
    char why[512];
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        const dsv4_plugin_desc *d = conf->desc[f];
        if (!d)
            continue;
        const char *fam = dsv4_family_name((dsv4_family)f);
        void *state = NULL;
        why[0] = '\0';
        int rc = d->probe ? d->probe(&host, why, sizeof(why)) : 0;
        if (rc == 0 && d->init)
            rc = d->init(&host, conf->plugin_conf[f], &state, why, sizeof(why));
        if (rc != 0) {
            fprintf(stderr, "dsv4d: plugin %s/%s cannot start (%s%s%s)\n", fam, d->name,
                    dsv4_strerror(rc), why[0] ? ": " : "", why);
            return rc;
        }
        if (d->fini)
            d->fini(state);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"plugin-dir", required_argument, NULL, 'P'},
        {"test", no_argument, NULL, 't'},         {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *path = DSV4_CONFIG_FILE, *plugin_dir = NULL;
    bool test = false;
    int version = 0, c;
    while ((c = getopt_long(argc, argv, "c:tVh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': path = optarg; break;
        case 'P': plugin_dir = optarg; break;
        case 't': test = true; break;
        case 'V': version++; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (version)
        return print_version(version, plugin_dir);

    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_registry *reg = NULL;
    dsv4_config *conf = NULL;
    int rc = dsv4_config_open(path, plugin_dir, &reg, &conf, &diags);
    dsv4_diags_print(&diags, stderr);
    dsv4_diags_free(&diags);
    if (rc != 0)
        return rc == DSV4_ECONFIG ? 1 : 2;
    if (test) {
        printf("dsv4d: %s: configuration ok\n", path);
        rc = 0;
    } else if ((rc = start_plugins(conf)) == 0) {
        fprintf(stderr, "dsv4d: serving is not built yet (checked configuration and plugins)\n");
        rc = 2;
    } else {
        rc = 1;
    }
    dsv4_config_free(conf);
    dsv4_registry_free(reg);
    return rc;
}
