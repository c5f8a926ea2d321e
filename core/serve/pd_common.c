/* pd_common.c: what both PD roles share (pd.h): starting the transport plugin, our half
 * of the handshake (geometry of the engine's pool, and on the decode side the transport's
 * expose() blob, registered once for every peer), the per-step dispatch and small helpers.
 */
#include "core/serve/pd_priv.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util/log.h"
#include "core/util/status.h"

/* The blob a transport writes at expose() is small (names, keys); grown on -ENOSPC. */
#define DSV4_PD_BLOB_GUESS 4096

void dsv4_pd_split_addr(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    /* "[::1]:9000" names the host without its brackets */
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']')
        snprintf(host, host_len, "%.*s", (int)(n - 2), addr + 1);
    else
        snprintf(host, host_len, "%.*s", (int)n, addr);
    snprintf(port, port_len, "%s", colon ? colon + 1 : "");
}

void dsv4_pd_kick(dsv4_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    pthread_cond_signal(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
}

/* Nothing runs but PD work (requests that wait wait for it: for batch places or pages it
 * holds): wait up to 1 ms for a message (a kick) instead of spinning. */
static void dsv4_pd_idle(dsv4_server *srv)
{
    if (srv->n_running > 0 || srv->n_pd_held == 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&srv->mu);
    if (dsv4_list_empty(&srv->inbox) && dsv4_list_empty(&srv->cancels))
        pthread_cond_timedwait(&srv->wake, &srv->mu, &ts);
    pthread_mutex_unlock(&srv->mu);
}

int dsv4_pd_send(dsv4_pd *pd, dsv4_pd_conn *const *cp, pthread_mutex_t *mu, const dsv4_pd_msg *m,
                 const char *who)
{
    char err[256] = "not connected";
    int rc = -ENOTCONN;
    pthread_mutex_lock(mu);
    if (*cp)
        rc = dsv4_pd_conn_send(*cp, m, dsv4_pd_deadline(pd->bootstrap_ms), err, sizeof(err));
    pthread_mutex_unlock(mu);
    if (rc != 0)
        dsv4_log(DSV4_LOG_WARN, "pd", "%s to %s failed (%s)", dsv4_pd_type_name(m->type), who, err);
    return rc;
}

int dsv4_pd_wait_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    return n;
}

bool dsv4_pd_two_sided(const dsv4_pd *pd)
{
    const dsv4_transport_ops *o = pd->tops;
    return DSV4_HAS_FIELD(o, dsv4_transport_ops, recv_post) && o->bootstrap && o->accept &&
           o->recv_post;
}

uint64_t dsv4_pd_bytes(const dsv4_pd *pd, uint32_t n_pages)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < pd->layout->n_buffers; i++) {
        const dsv4_kv_buffer *b = &pd->layout->buffers[i];
        bytes += (uint64_t)b->block_bytes * (dsv4_buf_is_paged(b->kind) ? n_pages : 1);
    }
    return bytes;
}

bool dsv4_pd_wants_shared_pool(const dsv4_config *conf)
{
    /* host pools are mapped by peers (transport/local); a device pool (transport/nccl) is
     * reached only through the transport and cannot be shared memory */
    return conf->server.role == DSV4_ROLE_DECODE && conf->core.device != DSV4_DEVICE_CUDA;
}

bool dsv4_pd_takes_clients(const dsv4_server *srv)
{
    return !srv->pd || srv->pd->role != DSV4_ROLE_PREFILL;
}

static int dsv4_pd_transport(dsv4_pd *pd, const dsv4_config *conf, char *err, size_t errlen)
{
    const dsv4_plugin_desc *d = conf->desc[DSV4_FAMILY_TRANSPORT];
    if (!d) {
        snprintf(err, errlen, "pd: no transport plugin selected");
        return -EINVAL;
    }
    pd->host = *dsv4_host_default();
    pd->host.selection = &conf->selection;
    char why[256] = "";
    int rc = d->init ? d->init(&pd->host, conf->plugin_conf[DSV4_FAMILY_TRANSPORT], &pd->tstate,
                               why, sizeof(why))
                     : 0;
    if (rc != 0) {
        snprintf(err, errlen, "plugin transport/%s: init failed (%s)", d->name, why);
        return rc;
    }
    pd->tdesc = d;
    pd->tops = d->ops;
    return 0;
}

/* Our hello: the pool's geometry, and for the decode role the exposed pool. */
static int dsv4_pd_hello_build(dsv4_pd *pd, char *err, size_t errlen)
{
    const dsv4_kv_layout *l = pd->layout;
    if (!(pd->bufs = calloc(l->n_buffers ? l->n_buffers : 1, sizeof(*pd->bufs)))) {
        snprintf(err, errlen, "pd: out of memory");
        return -ENOMEM;
    }
    dsv4_pd_geom_of(l, pd->bufs, &pd->hello.geom);
    pd->hello.role = (uint32_t)pd->role;
    pd->hello.transport = pd->tdesc->name;
    if (pd->role != DSV4_ROLE_DECODE)
        return 0;
    size_t len = DSV4_PD_BLOB_GUESS;
    for (int tries = 0; tries < 2; tries++) {
        free(pd->blob);
        if (!(pd->blob = malloc(len))) {
            snprintf(err, errlen, "pd: out of memory");
            return -ENOMEM;
        }
        int rc = pd->tops->expose(pd->tstate, l, pd->blob, &len);
        if (rc == 0) {
            pd->hello.blob = pd->blob;
            pd->hello.blob_len = (uint32_t)len;
            return 0;
        }
        if (rc != -ENOSPC) {
            snprintf(err, errlen, "plugin transport/%s: cannot expose the kv pool (%s)",
                     pd->tdesc->name, dsv4_strerror(rc));
            return rc;
        }
    }
    snprintf(err, errlen, "plugin transport/%s: its expose blob keeps growing", pd->tdesc->name);
    return -ENOSPC;
}

static void dsv4_pd_free(dsv4_pd *pd)
{
    if (pd->tdesc && pd->tdesc->fini)
        pd->tdesc->fini(pd->tstate);
    free(pd->bufs);
    free(pd->blob);
    free(pd->secret);
    free(pd);
}

int dsv4_pd_start(dsv4_server *srv, const dsv4_config *conf, char *err, size_t errlen)
{
    if (conf->server.role == DSV4_ROLE_UNIFIED)
        return 0;
    dsv4_pd *pd = calloc(1, sizeof(*pd));
    if (!pd || !(pd->secret = strdup(conf->pd.secret))) {
        free(pd);
        snprintf(err, errlen, "pd: out of memory");
        return -ENOMEM;
    }
    pd->srv = srv;
    pd->role = conf->server.role;
    pd->secret_len = strlen(pd->secret);
    pd->bootstrap_ms = (uint32_t)conf->pd.bootstrap_timeout_ms;
    pd->waiting_ms = (uint32_t)conf->pd.waiting_timeout_ms;
    pd->transfer_ms = (uint32_t)conf->pd.transfer_timeout_ms;
    pd->retries = (uint32_t)conf->pd.retries;
    pd->layout = dsv4_kv_pool_layout(dsv4_engine_kv(srv->eng));
    atomic_init(&pd->stop, false);
    int rc = dsv4_pd_transport(pd, conf, err, errlen);
    if (rc == 0)
        rc = dsv4_pd_hello_build(pd, err, errlen);
    if (rc == 0)
        rc = pd->role == DSV4_ROLE_PREFILL ? dsv4_pd_prefill_open(pd, conf, err, errlen)
                                           : dsv4_pd_decode_open(pd, conf, err, errlen);
    if (rc != 0) {
        dsv4_pd_free(pd);
        return rc;
    }
    srv->pd = pd;
    return 0;
}

void dsv4_pd_stop(dsv4_server *srv)
{
    dsv4_pd *pd = srv->pd;
    if (!pd)
        return;
    atomic_store(&pd->stop, true);
    if (pd->role == DSV4_ROLE_PREFILL)
        dsv4_pd_prefill_close(pd);
    else
        dsv4_pd_decode_close(pd);
    dsv4_pd_free(pd);
    srv->pd = NULL;
}

void dsv4_pd_step(dsv4_server *srv)
{
    if (!srv->pd)
        return;
    if (srv->pd->role == DSV4_ROLE_PREFILL)
        dsv4_pd_prefill_step(srv);
    else
        dsv4_pd_decode_step(srv);
    dsv4_pd_idle(srv);
}
