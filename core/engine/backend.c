/* backend.c: which backend an engine runs on ([core] device, engine.h dsv4_backend), and
 * the one log line that says so and why.
 *
 * auto picks cuda only when nothing stands in the way: the build has CUDA, the device
 * answers, and no selected plugin refuses device = cuda. The last is asked of the plugins'
 * own check hooks (the combination rules live with the plugin that has them, DESIGN.md
 * §3), with the selection as it would be under device = cuda. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/backend.h"
#include "core/config/schema.h"
#include "core/plugin/registry.h"
#include "core/util/log.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"
#endif

dsv4_backend dsv4_backend_of_device(dsv4_device device)
{
    switch (device) {
    case DSV4_DEVICE_CPU: return DSV4_BACKEND_CPU;
    case DSV4_DEVICE_CUDA: return DSV4_BACKEND_CUDA;
    case DSV4_DEVICE_AUTO: break;
    }
    return DSV4_BACKEND_AUTO;
}

/* What a check hook reports, kept: the first message only. The plugins see it as the
 * opaque dsv4_diag of plugin.h. */
typedef struct backend_refusal {
    int n;
    char first[256];
} backend_refusal;

static void backend_report(dsv4_diag *diag, const char *section, const char *key, const char *fmt,
                           ...) __attribute__((format(printf, 4, 5)));
static void backend_report(dsv4_diag *diag, const char *section, const char *key, const char *fmt,
                           ...)
{
    backend_refusal *r = (backend_refusal *)diag;
    (void)section;
    (void)key;
    if (r->n++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->first, sizeof(r->first), fmt, ap);
        va_end(ap);
    }
}

/* d's check hook over sel with its config, or (config NULL) its schema defaults: a check
 * hook reads its config, so it never gets NULL. */
static int backend_check(const dsv4_plugin_desc *d, const dsv4_selection *sel, const void *config,
                         backend_refusal *r)
{
    if (config)
        return d->check(sel, config, backend_report, (dsv4_diag *)r);
    void *defaults = calloc(1, d->config_size ? d->config_size : 1);
    char err[256];
    int rc = defaults ? dsv4_schema_defaults(d->options, defaults, err, sizeof(err)) : -ENOMEM;
    if (rc == 0)
        rc = d->check(sel, defaults, backend_report, (dsv4_diag *)r);
    else
        r->n = snprintf(r->first, sizeof(r->first), "its default configuration failed (%s)",
                        defaults ? err : "out of memory") > 0;
    if (defaults)
        dsv4_schema_release(d->options, defaults);
    free(defaults);
    return rc;
}

/* 0 when every selected plugin takes device = cuda, else -ENOTSUP with the refusal in why. */
static int backend_plugins_take_cuda(const dsv4_engine_conf *conf, char *why, size_t whylen)
{
    dsv4_selection sel = {.struct_size = sizeof(sel), .cuda_device = conf->cuda_device};
    if (conf->selection)
        sel = *conf->selection;
    sel.device = DSV4_DEVICE_CUDA;
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        const dsv4_plugin_desc *d = conf->plugins ? conf->plugins[f] : NULL;
        if (f == DSV4_FAMILY_INDEXK)
            d = conf->indexk;
        if (!d || !d->check)
            continue;
        backend_refusal r = {0, ""};
        const void *given = conf->selection              ? conf->selection->configs[f]
                            : f == DSV4_FAMILY_INDEXK ? conf->indexk_conf
                                                      : NULL;
        int rc = backend_check(d, &sel, given, &r);
        if (rc != 0 || r.n > 0) {
            snprintf(why, whylen, "%s/%s refuses device = cuda: %s", dsv4_family_name(d->family),
                     d->name, r.n ? r.first : "its check failed");
            return -ENOTSUP;
        }
    }
    return 0;
}

int dsv4_backend_pick(const dsv4_engine_conf *conf, dsv4_backend *backend_p, char *err,
                      size_t errlen)
{
    char why[320] = "", name[128] = "";
    int ordinal = conf->cuda_device < 0 ? 0 : conf->cuda_device;
    if (conf->backend == DSV4_BACKEND_CPU) {
        *backend_p = DSV4_BACKEND_CPU;
        return 0;
    }
#ifdef HAVE_CUDA
    int rc = dsv4_cuda_device_use(conf->cuda_device, name, sizeof(name));
    if (rc != 0)
        snprintf(why, sizeof(why), "no CUDA device answers at ordinal %d", ordinal);
#else
    int rc = -ENODEV;
    snprintf(why, sizeof(why), "this build has no CUDA (configure --with-cuda)");
#endif
    if (rc == 0 && conf->backend == DSV4_BACKEND_AUTO)
        rc = backend_plugins_take_cuda(conf, why, sizeof(why));
    if (rc != 0 && conf->backend == DSV4_BACKEND_CUDA) {
        snprintf(err, errlen, "engine: device = cuda, but %s", why);
        return rc;
    }
    if (rc != 0) {
        dsv4_log(DSV4_LOG_INFO, "engine", "cpu backend (device = auto: %s)", why);
        *backend_p = DSV4_BACKEND_CPU;
        return 0;
    }
    dsv4_log(DSV4_LOG_INFO, "engine", "cuda backend on device %d (%s; %s kernels%s; device = %s)",
             ordinal, name, conf->fast_kernels ? "fast" : "deterministic",
             conf->eager ? ", no CUDA graphs" : "",
             conf->backend == DSV4_BACKEND_AUTO ? "auto" : "cuda");
    *backend_p = DSV4_BACKEND_CUDA;
    return 0;
}
