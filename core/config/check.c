/* check.c: the combination rules (DESIGN.md §3-4).
 *
 * Two sources, one output: every selected plugin's check hook (it sees the whole
 * selection and reports through the dsv4_report_fn below), and the core's own
 * cross-family rules, declared in the one table `rules` rather than scattered through the
 * daemon. Each violation points at the file:line of the key it is about. */
#include <config.h> /* HAVE_CUDA; <> because core/config/config.h shadows "config.h" here */

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/config.h"
#include "core/config/config_priv.h"
#include "core/pd/conn.h" /* DSV4_PD_MIN_SECRET */

/* The sink a check reports into (opaque to plugins: plugin.h only declares it). */
struct dsv4_diag {
    const dsv4_config *conf;
    dsv4_diags *diags;
    dsv4_diag_severity severity;
};

static void vreport(dsv4_diag *d, const char *section, const char *key, const char *fmt, va_list ap)
{
    int line = dsv4_config_line(d->conf, section, key);
    dsv4_diags_vadd(d->diags, d->severity, d->conf->path, line, section, key, fmt, ap);
}

/* The dsv4_report_fn handed to plugins, also used by the rules below. */
static void report(dsv4_diag *d, const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void report(dsv4_diag *d, const char *section, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(d, section, key, fmt, ap);
    va_end(ap);
}

static const char *role_name(int role)
{
    return dsv4_server_options[0].enum_values[role];
}

static bool pd_role(const dsv4_config *c)
{
    return c->server.role != DSV4_ROLE_UNIFIED;
}

/* ---- the rules ------------------------------------------------------------------------- */

static void pd_role_needs_transport(const dsv4_config *c, dsv4_diag *d)
{
    if (pd_role(c) && !c->plugin[DSV4_FAMILY_TRANSPORT])
        report(d, "server", "role", "role %s needs a transport plugin ([transport] plugin = ...)",
               role_name(c->server.role));
}

static void pd_role_needs_secret(const dsv4_config *c, dsv4_diag *d)
{
    size_t len = strlen(c->pd.secret);
    if (pd_role(c) && len == 0)
        report(d, "server", "role",
               "role %s needs [pd] secret (peers authenticate with it before any KV memory "
               "is exposed)",
               role_name(c->server.role));
    else if (len > 0 && len < DSV4_PD_MIN_SECRET)
        report(d, "pd", "secret", "too short (%zu bytes, at least %d)", len, DSV4_PD_MIN_SECRET);
}

static void prefill_needs_pd_listen(const dsv4_config *c, dsv4_diag *d)
{
    if (c->server.role == DSV4_ROLE_PREFILL && c->pd.listen[0] == '\0')
        report(d, "server", "role",
               "role prefill needs [pd] listen (where decode servers connect)");
}

static void decode_needs_pd_peers(const dsv4_config *c, dsv4_diag *d)
{
    if (c->server.role == DSV4_ROLE_DECODE && c->pd.peers[0] == '\0')
        report(d, "server", "role", "role decode needs [pd] peers (the prefill servers to use)");
}

static void unified_ignores_transport(const dsv4_config *c, dsv4_diag *d)
{
    if (!pd_role(c) && c->plugin[DSV4_FAMILY_TRANSPORT])
        report(d, "transport", "plugin",
               "a transport is only used by role = prefill or decode (this server is unified)");
}

static void cuda_needs_cuda_build(const dsv4_config *c, dsv4_diag *d)
{
#ifndef HAVE_CUDA
    if (c->core.device == DSV4_DEVICE_CUDA)
        report(d, "core", "device",
               "device cuda is not available (this dsv4d was built without "
               "CUDA; see dsv4d -VV)");
#else
    (void)c;
    (void)d;
#endif
}

static bool transport_is(const dsv4_config *c, const char *name)
{
    return pd_role(c) && c->plugin[DSV4_FAMILY_TRANSPORT] &&
           strcmp(c->plugin[DSV4_FAMILY_TRANSPORT], name) == 0;
}

/* NCCL cannot run both ends of a connection on one device, and two servers on one host
 * that leave the ordinal unset both take the first GPU. (The servers themselves refuse
 * a peer on their own GPU at connect: see transport/nccl.) */
static void nccl_role_picks_its_gpu(const dsv4_config *c, dsv4_diag *d)
{
    if (transport_is(c, "nccl") && c->core.device == DSV4_DEVICE_CUDA && c->core.cuda_device < 0)
        report(d, "core", "cuda_device",
               "unset with transport nccl (a prefill and a decode server on one host would both "
               "take the first GPU; give each role its own)");
}

static void cuda_device_unused_on_cpu(const dsv4_config *c, dsv4_diag *d)
{
    if (c->core.device == DSV4_DEVICE_CPU && c->core.cuda_device >= 0)
        report(d, "core", "cuda_device", "ignored with device = cpu");
}

static void gpu_plugins_need_gpu(const dsv4_config *c, dsv4_diag *d)
{
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++)
        if (c->desc[f] && (c->desc[f]->flags & DSV4_PLUGIN_NEEDS_GPU) &&
            c->core.device == DSV4_DEVICE_CPU)
            report(d, dsv4_family_name((dsv4_family)f), "plugin",
                   "plugin %s/%s needs a GPU, but [core] device = cpu",
                   dsv4_family_name((dsv4_family)f), c->plugin[f]);
}

static void plugins_not_for_production(const dsv4_config *c, dsv4_diag *d)
{
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        if (!c->desc[f])
            continue;
        const char *fam = dsv4_family_name((dsv4_family)f);
        if (c->desc[f]->flags & DSV4_PLUGIN_TEST_ONLY)
            report(d, fam, "plugin", "plugin %s/%s exists for tests only (never serve with it)",
                   fam, c->plugin[f]);
        else if (c->desc[f]->flags & DSV4_PLUGIN_EXPERIMENTAL)
            report(d, fam, "plugin", "plugin %s/%s is experimental", fam, c->plugin[f]);
    }
}

static void state_slots_cover_max_running(const dsv4_config *c, dsv4_diag *d)
{
    if (c->model.state_slots < c->server.max_running)
        report(d, "model", "state_slots",
               "%lld is below [server] max_running = %lld (every running request holds a "
               "state slot)",
               (long long)c->model.state_slots, (long long)c->server.max_running);
}

static void chunk_fits_context(const dsv4_config *c, dsv4_diag *d)
{
    if (c->server.prefill_chunk > c->model.max_context)
        report(d, "server", "prefill_chunk",
               "%lld is above [model] max_context = %lld (no prompt can fill a chunk)",
               (long long)c->server.prefill_chunk, (long long)c->model.max_context);
}

/* host:port with a non-empty host (or [v6]) and a port in min_port..65535. */
static bool host_port_ok(const char *s, size_t len, long min_port)
{
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ':')
            colon = s + i;
    if (!colon || colon == s)
        return false;
    size_t host_len = (size_t)(colon - s);
    if (memchr(s, ':', host_len) && !(s[0] == '[' && s[host_len - 1] == ']'))
        return false;
    const char *p = colon + 1, *end = s + len;
    if (p == end || end - p > 5)
        return false;
    long port = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        port = port * 10 + (*p - '0');
    }
    return port >= min_port && port <= 65535;
}

/* An address to listen on: one host:port, port 0 asking the kernel for a free one (the
 * daemon logs the port it got). */
static void check_listen(dsv4_diag *d, const char *section, const char *value)
{
    if (!host_port_ok(value, strlen(value), 0))
        report(d, section, "listen",
               "expected host:port like 127.0.0.1:8000 (port 0: any free port), got '%s'", value);
}

/* [pd] peers: a comma-separated list of host:port to connect to (port 1..65535). */
static void check_peers(dsv4_diag *d, const char *value)
{
    const char *p = value;
    do {
        size_t n = strcspn(p, ","), len = n;
        const char *s = p;
        while (len > 0 && *s == ' ') {
            s++;
            len--;
        }
        while (len > 0 && s[len - 1] == ' ')
            len--;
        if (!host_port_ok(s, len, 1))
            report(d, "pd", "peers", "expected host:port like 127.0.0.1:8000, got '%.*s'", (int)len,
                   s);
        p += n;
    } while (*p++ == ',');
}

static void addresses_are_host_port(const dsv4_config *c, dsv4_diag *d)
{
    check_listen(d, "server", c->server.listen);
    if (c->pd.listen[0])
        check_listen(d, "pd", c->pd.listen);
    if (c->pd.peers[0])
        check_peers(d, c->pd.peers);
}

typedef struct rule {
    void (*fn)(const dsv4_config *c, dsv4_diag *d);
    dsv4_diag_severity severity;
} rule;

/* The core's combination rules; plugins declare theirs in their check hook. */
static const rule rules[] = {
    {pd_role_needs_transport, DSV4_DIAG_ERROR},
    {pd_role_needs_secret, DSV4_DIAG_ERROR},
    {prefill_needs_pd_listen, DSV4_DIAG_ERROR},
    {decode_needs_pd_peers, DSV4_DIAG_ERROR},
    {cuda_needs_cuda_build, DSV4_DIAG_ERROR},
    {gpu_plugins_need_gpu, DSV4_DIAG_ERROR},
    {state_slots_cover_max_running, DSV4_DIAG_ERROR},
    {chunk_fits_context, DSV4_DIAG_ERROR},
    {addresses_are_host_port, DSV4_DIAG_ERROR},
    {unified_ignores_transport, DSV4_DIAG_WARNING},
    {cuda_device_unused_on_cpu, DSV4_DIAG_WARNING},
    {nccl_role_picks_its_gpu, DSV4_DIAG_WARNING},
    {plugins_not_for_production, DSV4_DIAG_WARNING},
};

int dsv4_config_check(const dsv4_config *conf, dsv4_diags *diags)
{
    size_t before = diags->n_errors;
    dsv4_diag d = {.conf = conf, .diags = diags, .severity = DSV4_DIAG_ERROR};
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++)
        if (conf->desc[f] && conf->desc[f]->check)
            conf->desc[f]->check(&conf->selection, conf->plugin_conf[f], report, &d);
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        d.severity = rules[i].severity;
        rules[i].fn(conf, &d);
    }
    return (int)(diags->n_errors - before);
}
