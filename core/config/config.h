/* config.h: the dsv4d INI file (DESIGN.md §4, dsv4d.ini(5)).
 *
 * Sections: [core] [model] [server] [pd], then per family `[<family>] plugin = <name>` and
 * `[<family>.<name>]` with that plugin's keys. inih does the tokenising; our own reader
 * pass first rejects what inih would silently misparse (over-long lines, indented
 * continuation lines, names it would truncate), then every value is typed and checked
 * against its schema before any plugin code runs.
 *
 * Errors are collected, not stopped at, so one run reports every problem:
 *   file:line: [section] key: what is wrong (expected ...)
 * Unknown sections and keys are errors; a duplicate key is an error; a section for a
 * plugin that is not selected is a warning.
 */
#ifndef DSV4_CORE_CONFIG_H
#define DSV4_CORE_CONFIG_H

#include "core/plugin/registry.h"
#include "core/util/diag.h"

/* [core] */
typedef struct dsv4_core_conf {
    int device;             /* dsv4_device */
    int64_t cuda_device;    /* -1 = first */
    int64_t threads;        /* CPU worker threads, 0 = one per core */
    bool deterministic;     /* batch-invariant kernels on CUDA */
    bool cuda_graphs;       /* forward passes replayed from CUDA graphs */
    const char *plugin_dir; /* extra plugin directory, or "" */
    int log_level;          /* dsv4_log_level */
} dsv4_core_conf;

/* [model] */
typedef struct dsv4_model_conf {
    const char *path;       /* checkpoint folder; "" = the embedded tiny model */
    int kv_dtype;           /* dsv4_kv_dtype */
    uint64_t kv_pool;       /* bytes for paged KV */
    int64_t max_context;    /* tokens per request */
    int64_t state_slots;    /* concurrent requests with KV state */
} dsv4_model_conf;

/* [server] */
typedef struct dsv4_server_conf {
    int role;               /* dsv4_role */
    const char *listen;     /* host:port */
    const char *api_key;    /* "" = none */
    int64_t max_running;    /* requests in the decode batch */
    int64_t prefill_chunk;  /* tokens per prefill chunk (per-step token budget) */
    int64_t shutdown_grace_ms;  /* key shutdown_grace */
    uint64_t max_body;      /* largest request body accepted, bytes */
    int64_t idle_timeout_ms;    /* key idle_timeout: a silent connection is closed */
    int64_t max_waiting;    /* client requests waiting for admission at most; 0 = no limit */
    bool strict_api;        /* refuse request fields the API does not read */
} dsv4_server_conf;

/* [pd] */
typedef struct dsv4_pd_conf {
    const char *listen;     /* control channel host:port (prefill role), or "" */
    const char *peers;      /* comma-separated prefill control addresses (decode role), or "" */
    const char *secret;     /* shared secret; required for prefill/decode roles, or "" */
    int64_t bootstrap_timeout_ms;   /* keys bootstrap_timeout, waiting_timeout, ... */
    int64_t waiting_timeout_ms;
    int64_t transfer_timeout_ms;
    int64_t retries;
} dsv4_pd_conf;

typedef struct dsv4_config {
    char *path;
    dsv4_core_conf core;
    dsv4_model_conf model;
    dsv4_server_conf server;
    dsv4_pd_conf pd;
    /* per family: the selected plugin (NULL = family not configured), its descriptor and
     * its parsed config struct (desc->config_size bytes, owned here) */
    const char *plugin[DSV4_FAMILY_COUNT];
    const dsv4_plugin_desc *desc[DSV4_FAMILY_COUNT];
    void *plugin_conf[DSV4_FAMILY_COUNT];
    dsv4_selection selection;    /* filled from the above */
} dsv4_config;

/* The schemas of the core sections, for describe and the man pages. */
extern const dsv4_option dsv4_core_options[];
extern const dsv4_option dsv4_model_options[];
extern const dsv4_option dsv4_server_options[];
extern const dsv4_option dsv4_pd_options[];

/* Read and type-check `path`. Selected plugins are looked up in reg (a selected plugin
 * that is missing or failed to load is an error naming the registry's reason). Every
 * problem goes to diags. Returns the config (even with errors, so every error is
 * reported; check diags->n_errors) or NULL when the file cannot be read at all (then an
 * error naming the file is in diags). */
dsv4_config *dsv4_config_load(const char *path, const dsv4_registry *reg, dsv4_diags *diags);
/* A config of all defaults with no file (the embedded tiny model, default plugins). */
dsv4_config *dsv4_config_defaults(const dsv4_registry *reg, dsv4_diags *diags);
/* Run every selected plugin's check hook and the core's cross-family rules; violations go
 * to diags with the file:line of the key they are about. Returns the number of errors. */
int dsv4_config_check(const dsv4_config *conf, dsv4_diags *diags);
void dsv4_config_free(dsv4_config *conf);

/* The whole configuration check that `dsv4ctl validate` and `dsv4d -t` run, and that
 * dsv4d runs before serving: scan plugins (cli_dir, $DSV4D_PLUGIN_PATH, the file's [core]
 * plugin_dir, the installed directory), load path, run dsv4_config_check. Every finding
 * goes to diags. Returns 0 when the configuration is valid (warnings allowed) and then
 * hands over the registry and config; DSV4_ECONFIG when it is invalid; another negative
 * status when the file cannot be read or plugins cannot be scanned. */
int dsv4_config_open(const char *path, const char *cli_dir, dsv4_registry **reg_p,
                     dsv4_config **conf_p, dsv4_diags *diags);

#endif
