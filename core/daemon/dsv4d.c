/* dsv4d: the serving daemon's entry point (dsv4d(8)).
 *
 * `-t` checks a configuration the way `dsv4ctl validate` does (same dsv4_config_open);
 * `-V`/`-VV` report the build. A plain start checks the configuration and brings each
 * selected plugin through probe, init and fini, loads the model ([model] path, or the
 * embedded tiny model, written on first use) and its tokenizer, starts the serving loop
 * and the HTTP API, and serves until SIGTERM or SIGINT: then it stops accepting, lets
 * running requests finish within [server] shutdown_grace, aborts the rest and exits 0. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/http/http.h"
#include "core/model/mkmodel.h"
#include "core/model/model.h"
#include "core/plugin/registry.h"
#include "core/serve/serve.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/log.h"
#include "core/util/status.h"

/* The embedded model: the tiny preset with a fixed seed, and the name it is served as. */
#define DSV4D_TINY_SEED 1
#define DSV4D_TINY_NAME "dsv4-tiny"
/* After the serving loop has ended every request, how long answers still being written
 * may take before their connections are closed. */
#define DSV4D_FLUSH_MS 2000

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

/* The model folder to serve: [model] path, or the embedded tiny model, written there the
 * first time, and again where the folder holds one of other shapes (written by a version
 * whose tiny preset differed: its KV pages would not be this version's). NULL after saying
 * why. */
static const char *model_dir(const dsv4_config *conf)
{
    if (conf->model.path[0])
        return conf->model.path;
    const char *dir = dsv4_model_default_dir();
    const dsv4_mkmodel_opts tiny = {.preset = "tiny", .seed = DSV4D_TINY_SEED, .shards = 1};
    char cfg[PATH_MAX], err[512];
    if (dsv4_mkmodel_is_written(&tiny, dir))
        return dir;
    snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
    dsv4_log(DSV4_LOG_INFO, "model", "writing the embedded tiny model to %s%s", dir,
             access(cfg, F_OK) == 0 ? " (the one there is not this version's)" : "");
    if (dsv4_mkmodel_run(&tiny, dir, err, sizeof(err)) != 0) {
        dsv4_log(DSV4_LOG_ERROR, "model", "cannot write the embedded tiny model (%s)", err);
        return NULL;
    }
    return dir;
}

/* The name /v1/models lists and requests may give: the checkpoint folder's name. */
static void model_id(const dsv4_config *conf, char *buf, size_t len)
{
    if (!conf->model.path[0]) {
        snprintf(buf, len, "%s", DSV4D_TINY_NAME);
        return;
    }
    size_t n = strlen(conf->model.path);
    while (n > 1 && conf->model.path[n - 1] == '/')
        n--;
    const char *p = conf->model.path + n;
    while (p > conf->model.path && p[-1] != '/')
        p--;
    snprintf(buf, len, "%.*s", (int)(conf->model.path + n - p), p);
}

/* "listening on host:port" with the port actually bound. */
static void log_listening(const dsv4_config *conf, const dsv4_http *http)
{
    const char *colon = strrchr(conf->server.listen, ':');
    dsv4_log(DSV4_LOG_INFO, "http", "listening on %.*s:%u", (int)(colon - conf->server.listen),
             conf->server.listen, (unsigned)dsv4_http_port(http));
}

/* Serve until SIGTERM or SIGINT. Returns the exit status. */
static int serve(const dsv4_config *conf)
{
    char err[512], id[256];
    int status = 1, sig = 0;
    sigset_t stop_set;
    /* every thread started from here on inherits the blocked set; only sigwait below
     * takes the signals, so no handler runs inside the serving loop or a connection */
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);
    signal(SIGPIPE, SIG_IGN);
    dsv4_log_set_level((dsv4_log_level)conf->core.log_level);

    const char *dir = model_dir(conf);
    if (!dir)
        return 1;
    /* on the cuda device the weights go to the device one at a time, never all in f32 here */
    dsv4_model *model = conf->core.device == DSV4_DEVICE_CPU
                            ? dsv4_model_load(dir, err, sizeof(err))
                            : dsv4_model_load_deferred(dir, err, sizeof(err));
    if (!model) {
        dsv4_log(DSV4_LOG_ERROR, "model", "cannot load %s (%s)", dir, err);
        return 1;
    }
    dsv4_tokenizer *tok = dsv4_tokenizer_load(dir, err, sizeof(err));
    if (!tok) {
        dsv4_log(DSV4_LOG_ERROR, "tokenizer", "cannot load the tokenizer of %s (%s)", dir, err);
        goto free_model;
    }
    dsv4_server *srv = dsv4_server_start(conf, model, err, sizeof(err));
    if (!srv) {
        dsv4_log(DSV4_LOG_ERROR, "serve", "cannot start the serving loop (%s)", err);
        goto free_tok;
    }
    model_id(conf, id, sizeof(id));
    dsv4_http *http = dsv4_http_start(&conf->server, srv, tok, id, err, sizeof(err));
    if (!http) {
        dsv4_log(DSV4_LOG_ERROR, "http", "%s", err);
        dsv4_server_stop(srv, 0);
        goto free_tok;
    }
    log_listening(conf, http);
    while (sigwait(&stop_set, &sig) != 0)
        ;
    dsv4_log(DSV4_LOG_INFO, "http", "stopping (%s): finishing requests for up to %lld ms",
             sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)conf->server.shutdown_grace_ms);
    dsv4_http_quiesce(http);
    dsv4_server_stop(srv, (uint64_t)conf->server.shutdown_grace_ms);
    dsv4_http_stop(http, DSV4D_FLUSH_MS);
    status = 0;
free_tok:
    dsv4_tokenizer_free(tok);
free_model:
    dsv4_model_free(model);
    return status;
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
        rc = serve(conf);
    } else {
        rc = 1;
    }
    dsv4_config_free(conf);
    dsv4_registry_free(reg);
    return rc;
}
