/* t-loader-good-plugin-runs: a plugin the registry loaded is usable through its descriptor
 * with the default host table: its schema fills a config, init/order/fini run, and the
 * order is the one its keys ask for (the sched fixture, shortest or longest prompt first,
 * ties in arrival order). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsv4d/sched.h>

#include "core/config/schema.h"
#include "core/plugin/registry.h"
#include "tests/tap.h"

static const dsv4_sched_req reqs[] = {
    /* id arrival priority prompt max_new */
    {10, 0, 0, 300, 16}, {11, 1, 5, 100, 16}, {12, 2, 0, 300, 16},
    {13, 3, 1, 50, 16},  {14, 4, 0, 100, 16},
};
#define N (sizeof(reqs) / sizeof(reqs[0]))

/* Order reqs with the fixture, its keys set from key=value pairs (NULL-terminated). */
static void order_with(const dsv4_plugin_desc *d, const char *const *kv, uint32_t *order)
{
    char err[256] = "";
    void *conf = calloc(1, d->config_size), *state = NULL;
    const dsv4_host *host = dsv4_host_default();

    if (!conf || dsv4_schema_defaults(d->options, conf, err, sizeof(err)) != 0)
        bail_out("defaults (%s)", err);
    for (; kv && kv[0]; kv += 2)
        if (dsv4_schema_set(dsv4_schema_find(d->options, kv[0]), conf, kv[1], err, sizeof(err)) !=
            0)
            bail_out("%s = %s (%s)", kv[0], kv[1], err);
    if (d->init(host, conf, &state, err, sizeof(err)) != 0)
        bail_out("init (%s)", err);
    const dsv4_sched_ops *ops = d->ops;
    is_int(ops->order(state, reqs, N, NULL, order), 0, "order succeeds");
    d->fini(state);
    dsv4_schema_release(d->options, conf);
    free(conf);
}

static void expect_ids(const uint32_t *order, const uint64_t *ids, const char *what)
{
    char got[128] = "", want[128] = "";
    for (size_t i = 0; i < N; i++) {
        size_t g = strlen(got), w = strlen(want);
        snprintf(got + g, sizeof(got) - g, "%s%llu", i ? " " : "",
                 (unsigned long long)reqs[order[i]].id);
        snprintf(want + w, sizeof(want) - w, "%s%llu", i ? " " : "", (unsigned long long)ids[i]);
    }
    is_str(got, want, "%s", what);
}

int main(void)
{
    const dsv4_plugin_entry *e = NULL;
    uint32_t order[N];
    dsv4_registry *reg = dsv4_registry_new(NULL);

    plan(11);
    if (!reg)
        bail_out("out of memory");
    is_int(dsv4_registry_load_file(reg, FIXTURE_DIR "/.libs/dsv4-sched-good.so", &e), 0,
           "the good fixture loads");
    const dsv4_plugin_desc *d = dsv4_registry_find(reg, DSV4_FAMILY_SCHED, "good", NULL);
    ok(d != NULL && e && d == e->desc, "find returns the loaded descriptor");
    if (!d)
        bail_out("no descriptor");
    is_str(d->version, "1.0.0", "its version");

    order_with(d, NULL, order);
    expect_ids(order, (const uint64_t[]){13, 11, 14, 10, 12},
               "defaults: shortest first, ties by arrival");

    order_with(d, (const char *const[]){"direction", "longest", NULL}, order);
    expect_ids(order, (const uint64_t[]){10, 12, 11, 14, 13}, "direction = longest");

    order_with(d, (const char *const[]){"priority_first", "yes", NULL}, order);
    expect_ids(order, (const uint64_t[]){11, 13, 14, 10, 12}, "priority_first = yes");

    order_with(d, (const char *const[]){"window", "2", NULL}, order);
    expect_ids(order, (const uint64_t[]){11, 10, 12, 13, 14},
               "window = 2: the rest in arrival order");

    dsv4_registry_free(reg);
    return done_testing();
}
