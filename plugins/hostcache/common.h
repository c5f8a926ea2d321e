/* common.h: what the hostcache plugins share (plugins/hostcache/): the config keys of a
 * plugin that keeps pages on host, and the copy engine behind save/load.
 *
 * On a device layout in CUDA memory the copies are CUDA's instead (cuda.h): the copy
 * stream is the queue and a per-layer event the counter, in every mode.
 *
 * An op copies a list of blocks (pages, or state blocks) between the attached device and
 * host layouts, layer by layer, every buffer of the layer the table lists. Its "layers
 * landed" counter sits under the op's own mutex and condition variable: wait_layer(l)
 * sleeps until the counter passes l. The sync plugin runs an op to the end inside
 * save/load; the async plugin hands it to one worker thread that copies a layer at a time
 * (FIFO, so a save queued before a load is on host before the load reads it). The plugin
 * files only choose a mode and write their descriptor.
 */
#ifndef DSV4_PLUGINS_HOSTCACHE_COMMON_H
#define DSV4_PLUGINS_HOSTCACHE_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <dsv4d/hostcache.h>

/* A plugin that keeps pages on host: the shared head and the test-only delay. */
typedef struct dsv4_hc_delay_config {
    dsv4_hostcache_config common;
    int64_t inject_delay_ms; /* key inject_delay */
} dsv4_hc_delay_config;

extern const char *const dsv4_hc_policy_names[];

/* The schema entries of the keys in dsv4_hostcache_config; conf_type is the plugin's
 * config struct, which starts with a dsv4_hostcache_config named `common`. */
#define DSV4_HC_COMMON_OPTIONS(conf_type)                                                          \
    {.key = "host_size",                                                                           \
     .type = DSV4_OPT_SIZE,                                                                        \
     .def = "1G",                                                                                  \
     .min = 1,                                                                                     \
     .max = INT64_MAX,                                                                             \
     .help = "host memory for evicted pages (every buffer of every layer)",                        \
     .offset = offsetof(conf_type, common.host_size)},                                             \
        {.key = "host_slots",                                                                      \
         .type = DSV4_OPT_INT,                                                                     \
         .def = "64",                                                                              \
         .min = 1,                                                                                 \
         .max = 1 << 20,                                                                           \
         .help = "state blocks (window ring, compressor carry) kept on host",                      \
         .offset = offsetof(conf_type, common.host_slots)},                                        \
    {                                                                                              \
        .key = "write_policy", .type = DSV4_OPT_ENUM, .def = "write_through",                      \
        .enum_values = dsv4_hc_policy_names,                                                       \
        .help = "when a page is backed up to host: first use, second use, or eviction",            \
        .offset = offsetof(conf_type, common.write_policy)                                         \
    }

/* The test-only load delay. */
#define DSV4_HC_DELAY_OPTION                                                                       \
    {                                                                                              \
        .key = "inject_delay", .type = DSV4_OPT_DURATION, .def = "0ms", .min = 0, .max = 60000,    \
        .help = "for tests only: sleep this long before each layer of a load is copied",           \
        .offset = offsetof(dsv4_hc_delay_config, inject_delay_ms)                                  \
    }

typedef enum dsv4_hc_mode {
    DSV4_HC_SYNC,     /* save/load copy every layer before they return */
    DSV4_HC_ASYNC,    /* a worker copies; wait_layer waits for the layer */
    DSV4_HC_UNFENCED, /* as async, but wait_layer does not wait (negative control) */
} dsv4_hc_mode;

/* Create the shared state; config is the daemon's parsed struct (a dsv4_hc_delay_config
 * for the async modes), which outlives the state. 0, or -ENOMEM / the pthread error. */
int dsv4_hc_init(dsv4_hc_mode mode, const char *subject, const dsv4_host *host, const void *config,
                 void **state_p, char *err, size_t errlen);
void dsv4_hc_fini(void *state);

/* The ops of every plugin that keeps pages on host. */
int dsv4_hc_attach(void *state, const dsv4_kv_layout *device, const dsv4_kv_layout *host);
int dsv4_hc_save(void *state, const dsv4_page_copy *pages, size_t n, void **op_p);
int dsv4_hc_load(void *state, const dsv4_page_copy *pages, size_t n, void **op_p);
int dsv4_hc_save_state(void *state, const dsv4_page_copy *slots, size_t n, void **op_p);
int dsv4_hc_load_state(void *state, const dsv4_page_copy *slots, size_t n, void **op_p);
int dsv4_hc_wait_layer(void *state, void *op, uint32_t layer);
int dsv4_hc_stream_wait_layer(void *state, void *op, uint32_t layer, void *stream);
int dsv4_hc_poll(void *state, void *op);
void dsv4_hc_release(void *state, void *op);

/* Every hostcache plugin runs on the CPU backend (memory copies), and on the CUDA backend
 * when built with CUDA (the copy stream of cuda.h). */
static inline int dsv4_hc_probe(const dsv4_host *host, char *why, size_t whylen)
{
#ifndef HAVE_CUDA
    if (host->selection && host->selection->device == DSV4_DEVICE_CUDA) {
        snprintf(why, whylen, "built without CUDA (device = cuda needs its copy stream)");
        return DSV4_EUNAVAIL;
    }
#endif
    (void)host;
    (void)why;
    (void)whylen;
    return 0;
}

/* No combination rule: every hostcache plugin works with either device, every role and
 * every indexk plugin, because the host pool mirrors whatever buffer table the pool has. */
static inline int dsv4_hc_check(const dsv4_selection *sel, const void *config,
                                dsv4_report_fn report, dsv4_diag *diag)
{
    (void)sel;
    (void)config;
    (void)report;
    (void)diag;
    return 0;
}

/* The descriptor fields every hostcache plugin shares. */
#define DSV4_HC_DESC_HEADER                                                                        \
    .abi_major = DSV4_ABI_MAJOR, .abi_minor = DSV4_ABI_MINOR,                                      \
    .struct_size = sizeof(dsv4_plugin_desc), .build_signature = DSV4_BUILD_SIGNATURE,              \
    .family = DSV4_FAMILY_HOSTCACHE, .family_version = DSV4_HOSTCACHE_VERSION,                     \
    .version = PACKAGE_VERSION, .probe = dsv4_hc_probe, .check = dsv4_hc_check

/* The ops table of every plugin that keeps pages on host (one per plugin file, since the
 * mode lives in the state). */
#define DSV4_HC_OPS                                                                                \
    {                                                                                              \
        .struct_size = sizeof(dsv4_hostcache_ops), .attach = dsv4_hc_attach, .save = dsv4_hc_save, \
        .load = dsv4_hc_load, .wait_layer = dsv4_hc_wait_layer, .poll = dsv4_hc_poll,              \
        .release = dsv4_hc_release, .save_state = dsv4_hc_save_state,                              \
        .load_state = dsv4_hc_load_state, .stream_wait_layer = dsv4_hc_stream_wait_layer,          \
    }

#endif
