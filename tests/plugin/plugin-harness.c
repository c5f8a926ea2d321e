/* plugin-harness.c: opening plugin .so files, descriptor rules, mock host (see
 * plugin-harness.h). */
#include "tests/plugin/plugin-harness.h"

#include "core/config/schema.h"
#include "tests/tap.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int warnings;

const dsv4_plugin_desc *plugtest_open(const char *family, const char *name)
{
    const char *env = getenv("DSV4D_PLUGIN_PATH");
    char *dirs, *dir, *save = NULL;
    const dsv4_plugin_desc *desc = NULL;

    if (!env || !*env)
        bail_out("DSV4D_PLUGIN_PATH is not set (run under make check)");
    dirs = strdup(env);
    for (dir = strtok_r(dirs, ":", &save); dir && !desc; dir = strtok_r(NULL, ":", &save)) {
        char path[4096];
        void *h;

        snprintf(path, sizeof path, "%s/dsv4-%s-%s.so", dir, family, name);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        desc = dlsym(h, DSV4_PLUGIN_SYMBOL);
        if (!desc)
            bail_out("%s: no %s symbol", path, DSV4_PLUGIN_SYMBOL);
    }
    free(dirs);
    if (!desc)
        bail_out("plugin %s/%s: not found in %s (%s)", family, name, env, dlerror());
    return desc;
}

void plugtest_check_desc(const dsv4_plugin_desc *desc, dsv4_family family, uint32_t family_version,
                         const char *name, size_t ops_size)
{
    const dsv4_option *o;
    const uint32_t *ops_struct_size = desc->ops;
    bool helps_ok = true;

    ok(desc->abi_major == DSV4_ABI_MAJOR && desc->abi_minor == DSV4_ABI_MINOR, "%s: ABI %u.%u",
       name, desc->abi_major, desc->abi_minor);
    is_int(desc->struct_size, sizeof(dsv4_plugin_desc), "%s: descriptor struct_size", name);
    is_str(desc->build_signature, DSV4_BUILD_SIGNATURE, "%s: build signature", name);
    ok(desc->family == (uint32_t)family && desc->family_version == family_version,
       "%s: family %u version %u", name, desc->family, desc->family_version);
    is_str(desc->name, name, "%s: name matches the file name", name);
    ok(ops_struct_size && *ops_struct_size >= ops_size && desc->probe && desc->check &&
           desc->init && desc->fini,
       "%s: ops struct_size set and every hook present", name);
    /* Help lines are printed by `dsv4ctl describe` and the man pages. */
    for (o = desc->options; o && o->key; o++) {
        size_t len = o->help ? strlen(o->help) : 0;
        if (len == 0 || isupper((unsigned char)o->help[0]) || o->help[len - 1] == '.' ||
            strchr(o->help, '\n'))
            helps_ok = false;
    }
    ok(helps_ok && desc->description && *desc->description &&
           desc->description[strlen(desc->description) - 1] != '.',
       "%s: description and option help are one lowercase line without a final period", name);
}

static void mock_log(dsv4_log_level level, const char *subject, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level <= DSV4_LOG_WARN)
        warnings++;
    diag("log %d %s: %s", (int)level, subject, msg);
}

static void *mock_alloc(size_t size, size_t align)
{
    void *p = NULL;

    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
        return NULL;
    return p;
}

static uint64_t mock_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const dsv4_host mock_host = {
    .struct_size = sizeof(dsv4_host),
    .log = mock_log,
    .alloc = mock_alloc,
    .free = free,
    .now_ns = mock_now_ns,
};

const dsv4_host *plugtest_host(void)
{
    return &mock_host;
}

int plugtest_warnings(void)
{
    return warnings;
}

void *plugtest_config(const dsv4_plugin_desc *desc, ...)
{
    char err[512];
    void *conf = calloc(1, desc->config_size ? desc->config_size : 1);
    const char *key;
    va_list ap;

    if (dsv4_schema_defaults(desc->options, conf, err, sizeof err))
        bail_out("%s defaults: %s", desc->name, err);
    va_start(ap, desc);
    while ((key = va_arg(ap, const char *))) {
        const char *value = va_arg(ap, const char *);
        const dsv4_option *opt = dsv4_schema_find(desc->options, key);
        if (!opt || dsv4_schema_set(opt, conf, value, err, sizeof err))
            bail_out("%s: %s = %s: %s", desc->name, key, value, opt ? err : "unknown key");
    }
    va_end(ap);
    return conf;
}

void plugtest_config_free(const dsv4_plugin_desc *desc, void *conf)
{
    dsv4_schema_release(desc->options, conf);
    free(conf);
}

void *plugtest_init(const dsv4_plugin_desc *desc, const void *conf)
{
    char err[512] = "";
    void *state = NULL;
    int rc = desc->init(&mock_host, conf, &state, err, sizeof err);

    if (rc)
        bail_out("%s init: %s (%d)", desc->name, err, rc);
    return state;
}

static uint64_t rand_state = 0x9e3779b97f4a7c15u;

uint64_t plugtest_rand(void)
{
    uint64_t z = (rand_state += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

double plugtest_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(plugtest_rand() >> 11) * 0x1p-53;
}
