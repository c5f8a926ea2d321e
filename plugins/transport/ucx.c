/* ucx.c: transport/ucx, one-sided UCP RMA writes into the receiver's registered pool.
 *
 * Receiver (decode): expose() registers every buffer of the layout once (ucp_mem_map),
 * packs one rkey per buffer and the worker address into the blob, and starts a progress
 * thread: transports without true one-sided hardware (tcp) complete puts through the
 * target's worker, so it must progress even while the daemon does something else.
 * Sender (prefill): attach() creates one endpoint to the peer's worker and unpacks the
 * rkeys, once per peer. post() issues one ucp_put_nbx per (run, paged buffer) plus one per
 * state buffer — the plan's runs are already merged, so never one call per page — and then
 * one ucp_ep_flush_nbx; the transfer is complete when that flush completes, after which
 * the caller sends the completion message over the control channel.
 *
 * cancel() cannot recall a put that was issued: it returns 0 only once the flush has
 * completed (or failed because the peer is gone), so nothing can land afterwards.
 *
 * Device pools (device = cuda) are staged through pinned host buffers (ucx_stage.h): the
 * UCX this is built against has no CUDA memory support, so device memory is never
 * registered with it. expose() and attach() of a layout in CUDA memory hand over to
 * ucx_stage.c; the blob then carries the staging buffer size instead of rkeys. The host
 * path above is the same for host pools whatever the build.
 */
#include "config.h"

#include "plugins/transport/common.h"
#include "plugins/transport/ucx_stage.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define UCX_MAGIC 0x55543444u       /* "D4TU": a host pool's blob */
#define UCX_STAGE_MAGIC 0x53543444u /* "D4TS": a device pool's blob (staged) */
#define UCX_SUBJECT "transport/ucx"
#define UCX_MAX_ADDRESS (64u << 10)
#define UCX_MAX_RKEY (64u << 10)
#define UCX_CLOSE_SECONDS 2

typedef struct ucx_config {
    const char *tls;
    uint64_t stage_size;
} ucx_config;

typedef struct ucx_state {
    const dsv4_host *host;
    const ucx_config *conf;
    ucp_context_h ctx;
    ucp_worker_h worker;
    bool ucx_cuda;           /* UCX lists CUDA memory (logged; this build stages anyway) */
    dsv4_ucx_stage *stage;   /* receiver of a device pool: staging (ucx_stage.h) */
    dsv4_ucx_sender *sender; /* sender of a device pool: acknowledgements */
    /* receiver side: the exposed layout's registrations and the progress thread */
    const dsv4_kv_layout *exposed;
    ucp_mem_h *memh;
    pthread_t progress;
    int efd;     /* the worker's event fd */
    int stop_fd; /* eventfd: wakes and stops the progress thread; -1 before expose */
} ucx_state;

typedef struct ucx_peer {
    dsv4_tp_table t;
    const dsv4_kv_layout *local;
    ucp_ep_h ep;
    dsv4_ucx_speer *stage; /* a device pool's staging path; NULL for host pools */
    uint8_t *addr;         /* a device pool's peer: its worker address, to reconnect */
    size_t addr_len;
    ucp_rkey_h *rkey;   /* [n_buffers] */
    uint64_t *remote;   /* [n_buffers] remote base addresses */
    ucs_status_t error; /* set by the endpoint's error handler */
} ucx_peer;

typedef struct ucx_xfer {
    ucx_peer *peer;
    dsv4_ucx_tx *tx;     /* a staged transfer; NULL for host pools */
    void *flush;         /* the flush request, NULL once done */
    ucs_status_t status; /* first failure of a put or of the flush */
} ucx_xfer;

static int ucx_errno(ucs_status_t st)
{
    return st == UCS_OK              ? 0
           : st == UCS_ERR_NO_MEMORY ? -ENOMEM
           : st == UCS_ERR_CANCELED  ? -ECANCELED
                                     : -EIO;
}

static int ucx_probe(const dsv4_host *host, char *why, size_t whylen)
{
#ifndef HAVE_CUDA
    if (host->selection && host->selection->device == DSV4_DEVICE_CUDA) {
        snprintf(why, whylen, "built without CUDA: host pools only (device = cpu)");
        return DSV4_EUNAVAIL;
    }
#endif
    ucp_config_t *c;
    ucs_status_t st = ucp_config_read(NULL, NULL, &c);
    if (st != UCS_OK) {
        snprintf(why, whylen, "UCX cannot read its configuration (%s)", ucs_status_string(st));
        return DSV4_EUNAVAIL;
    }
    ucp_config_release(c);
    return 0;
}

static int ucx_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                     dsv4_diag *diag)
{
    const ucx_config *c = config;
    int n = 0;
#ifndef HAVE_CUDA
    if (sel->device == DSV4_DEVICE_CUDA) {
        report(diag, "transport", "plugin",
               "transport/ucx was built without CUDA: host pools only (device = cuda needs "
               "a CUDA build)");
        n++;
    }
#else
    (void)sel;
#endif
    if (!c->tls || !*c->tls) {
        report(diag, "transport.ucx", "tls",
               "empty transport list (expected e.g. tcp or shm,self)");
        n++;
    }
    return n;
}

static void *ucx_progress_main(void *arg)
{
    ucx_state *s = arg;
    /* a staged pool also wakes us when a scatter finished or a chunk landed */
    int wake = s->stage ? dsv4_ucx_stage_wake_fd(s->stage) : -1;
    for (;;) {
        uint64_t n;
        if (wake >= 0 && read(wake, &n, sizeof(n)) < 0)
            n = 0; /* nothing pending (non-blocking) */
        while (ucp_worker_progress(s->worker) != 0)
            ;
        if (s->stage) {
            dsv4_ucx_stage_turn(s->stage);
            while (ucp_worker_progress(s->worker) != 0)
                ; /* the acknowledgements the turn sent go out */
        }
        ucs_status_t st = ucp_worker_arm(s->worker);
        if (st == UCS_ERR_BUSY)
            continue;
        struct pollfd p[3] = {{.fd = s->efd, .events = POLLIN},
                              {.fd = s->stop_fd, .events = POLLIN},
                              {.fd = wake, .events = POLLIN}};
        /* the timeout bounds the cost of a missed wakeup; events normally wake us */
        poll(p, wake >= 0 ? 3 : 2, 100);
        if (p[1].revents & POLLIN)
            return NULL;
    }
}

static int ucx_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                    size_t errlen)
{
    const ucx_config *c = config;
    ucx_state *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, UCX_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    s->host = host;
    s->conf = c;
    s->stop_fd = -1;
    ucp_config_t *uc;
    ucs_status_t st = ucp_config_read(NULL, NULL, &uc);
    if (st == UCS_OK) {
        st = ucp_config_modify(uc, "TLS", c->tls);
        if (st != UCS_OK)
            snprintf(err, errlen, UCX_SUBJECT ": tls = %s refused by UCX (%s)", c->tls,
                     ucs_status_string(st));
        ucp_params_t p = {.field_mask =
                              UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                          .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                          .mt_workers_shared = 1};
        if (st == UCS_OK) {
            st = ucp_init(&p, uc, &s->ctx);
            if (st != UCS_OK)
                snprintf(err, errlen, UCX_SUBJECT ": cannot start UCX with tls = %s (%s)", c->tls,
                         ucs_status_string(st));
        }
        ucp_config_release(uc);
    } else {
        snprintf(err, errlen, UCX_SUBJECT ": cannot read the UCX configuration (%s)",
                 ucs_status_string(st));
    }
    if (st == UCS_OK) {
        /* the progress thread and the caller's polls share the worker */
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_MULTI};
        st = ucp_worker_create(s->ctx, &wp, &s->worker);
        ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
        if (st == UCS_OK && (ucp_worker_query(s->worker, &wa) != UCS_OK ||
                             wa.thread_mode != UCS_THREAD_MODE_MULTI)) {
            st = UCS_ERR_UNSUPPORTED;
            snprintf(err, errlen, UCX_SUBJECT ": this UCX has no thread-safe workers");
        } else if (st != UCS_OK) {
            snprintf(err, errlen, UCX_SUBJECT ": cannot create a worker (%s)",
                     ucs_status_string(st));
        }
    }
    if (st == UCS_OK) {
        ucp_context_attr_t ca = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
        s->ucx_cuda = ucp_context_query(s->ctx, &ca) == UCS_OK &&
                      (ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    }
    if (st != UCS_OK) {
        if (s->worker)
            ucp_worker_destroy(s->worker);
        if (s->ctx)
            ucp_cleanup(s->ctx);
        free(s);
        return st == UCS_ERR_UNSUPPORTED ? DSV4_EUNAVAIL : DSV4_ECONFIG;
    }
    *state_p = s;
    return 0;
}

static void ucx_unexpose(ucx_state *s)
{
    if (s->stop_fd >= 0) {
        uint64_t one = 1;
        if (write(s->stop_fd, &one, sizeof(one)) == sizeof(one))
            pthread_join(s->progress, NULL);
        close(s->stop_fd);
        s->stop_fd = -1;
    }
    dsv4_ucx_stage_close(s->stage);
    s->stage = NULL;
    for (uint32_t i = 0; s->memh && i < s->exposed->n_buffers; i++)
        if (s->memh[i])
            ucp_mem_unmap(s->ctx, s->memh[i]);
    free(s->memh);
    s->memh = NULL;
    s->exposed = NULL;
}

static void ucx_fini(void *state)
{
    ucx_state *s = state;
    ucx_unexpose(s);
    dsv4_ucx_sender_close(s->sender);
    ucp_worker_destroy(s->worker);
    ucp_cleanup(s->ctx);
    free(s);
}

/* Whether l is a device pool (every buffer in CUDA memory): staged. */
static bool ucx_is_device(const dsv4_kv_layout *l)
{
    return l->n_buffers > 0 && l->buffers[0].mem == DSV4_MEM_CUDA;
}

/* Says once per side how device pools move with the UCX we run on. */
static void ucx_log_staging(const ucx_state *s)
{
    s->host->log(DSV4_LOG_INFO, UCX_SUBJECT,
                 s->ucx_cuda ? "device pool staged through pinned buffers of %llu bytes (UCX "
                               "lists CUDA memory, but this build always stages)"
                             : "device pool staged through pinned buffers of %llu bytes (this "
                               "UCX has no CUDA memory support)",
                 (unsigned long long)s->conf->stage_size);
}

/* Registers every buffer of l once (a second expose of the same layout reuses it); a
 * device pool gets its staging buffers instead. */
static int ucx_register(ucx_state *s, const dsv4_kv_layout *l)
{
    if (s->exposed == l)
        return 0;
    if (s->exposed)
        return -EBUSY; /* one pool per daemon: a second layout is a caller bug */
    s->memh = calloc(l->n_buffers ? l->n_buffers : 1, sizeof(*s->memh));
    if (!s->memh)
        return -ENOMEM;
    s->exposed = l;
    if (ucx_is_device(l)) {
        ucx_log_staging(s);
        int rc = dsv4_ucx_stage_open(s->host, s->worker, l, s->conf->stage_size, &s->stage);
        if (rc != 0) {
            ucx_unexpose(s);
            return rc;
        }
    }
    for (uint32_t i = 0; !s->stage && i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = b->base,
                                   .length = b->block_bytes * b->n_blocks};
        ucs_status_t st = ucp_mem_map(s->ctx, &mp, &s->memh[i]);
        if (st != UCS_OK) {
            s->host->log(DSV4_LOG_ERROR, UCX_SUBJECT, "cannot register buffer %u (%s)", i,
                         ucs_status_string(st));
            ucx_unexpose(s);
            return ucx_errno(st);
        }
    }
    if (ucp_worker_get_efd(s->worker, &s->efd) != UCS_OK) {
        ucx_unexpose(s);
        return -ENOTSUP;
    }
    s->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (s->stop_fd < 0 || pthread_create(&s->progress, NULL, ucx_progress_main, s) != 0) {
        if (s->stop_fd >= 0)
            close(s->stop_fd);
        s->stop_fd = -1;
        ucx_unexpose(s);
        return -EAGAIN;
    }
    return 0;
}

static int ucx_expose(void *state, const dsv4_kv_layout *l, void *blob, size_t *len_p)
{
    ucx_state *s = state;
    dsv4_tp_out o = {.p = blob, .cap = blob ? *len_p : 0};
    bool device = ucx_is_device(l);
    int rc = dsv4_tp_put_table(&o, device ? UCX_STAGE_MAGIC : UCX_MAGIC, l,
                               device ? DSV4_MEM_CUDA : DSV4_MEM_HOST);
    if (rc == 0)
        rc = ucx_register(s, l);
    if (rc != 0)
        return rc;
    ucp_address_t *addr;
    size_t addr_len;
    ucs_status_t st = ucp_worker_get_address(s->worker, &addr, &addr_len);
    if (st != UCS_OK)
        return ucx_errno(st);
    dsv4_tp_put_u32(&o, (uint32_t)addr_len);
    dsv4_tp_put(&o, addr, addr_len);
    ucp_worker_release_address(s->worker, addr);
    if (device)
        dsv4_tp_put_u64(&o, s->conf->stage_size);
    for (uint32_t i = 0; !device && i < l->n_buffers; i++) {
        void *key;
        size_t key_len;
        st = ucp_rkey_pack(s->ctx, s->memh[i], &key, &key_len);
        if (st != UCS_OK)
            return ucx_errno(st);
        dsv4_tp_put_u64(&o, (uint64_t)(uintptr_t)l->buffers[i].base);
        dsv4_tp_put_u32(&o, (uint32_t)key_len);
        dsv4_tp_put(&o, key, key_len);
        ucp_rkey_buffer_release(key);
    }
    bool fits = o.off <= o.cap;
    *len_p = o.off;
    return fits ? 0 : -ENOSPC;
}

static void ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ucx_peer *p = arg;
    __atomic_store_n(&p->error, status, __ATOMIC_RELEASE);
}

void dsv4_ucx_ep_close(ucp_worker_h worker, const dsv4_host *host, ucp_ep_h ep, bool force)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    void *req = ucp_ep_close_nbx(ep, &rp);
    /* a graceful close waits for the peer; a peer that never answers (shared memory
     * transports cannot tell it is gone) costs at most the bound below */
    uint64_t end = host->now_ns() + (uint64_t)UCX_CLOSE_SECONDS * 1000000000u;
    bool closing = UCS_PTR_IS_PTR(req);
    while (closing && ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(worker);
        if (host->now_ns() > end) {
            host->log(DSV4_LOG_WARN, UCX_SUBJECT, "the peer did not confirm the close within %d s",
                      UCX_CLOSE_SECONDS);
            break;
        }
    }
    if (closing)
        ucp_request_free(req);
}

static void ucx_peer_free(ucx_state *s, ucx_peer *p)
{
    if (p->stage)
        dsv4_ucx_speer_close(p->stage); /* its transfers drain while the endpoint lives */
    for (uint32_t i = 0; p->rkey && i < p->local->n_buffers; i++)
        if (p->rkey[i])
            ucp_rkey_destroy(p->rkey[i]);
    if (p->ep)
        dsv4_ucx_ep_close(s->worker, s->host, p->ep, p->error != UCS_OK);
    free(p->addr);
    free(p->rkey);
    free(p->remote);
    free(p);
}

/* p's endpoint to the worker at addr, with peer error handling where the transports can
 * report a failed peer. UCS_OK, else the reason in err. */
static ucs_status_t ucx_ep_open(ucx_state *s, ucx_peer *p, const void *addr, char *err,
                                size_t errlen)
{
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .address = (const ucp_address_t *)addr,
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = {.cb = ucx_ep_error, .arg = p}};
    ucs_status_t st = ucp_ep_create(s->worker, &ep, &p->ep);
    if (st == UCS_ERR_UNREACHABLE) {
        /* shared memory transports cannot report a dead peer: then only the control
         * channel notices one (its deadlines) */
        ep.field_mask &=
            ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
        st = ucp_ep_create(s->worker, &ep, &p->ep);
        if (st == UCS_OK)
            s->host->log(DSV4_LOG_WARN, UCX_SUBJECT,
                         "these transports cannot detect a failed peer; the control "
                         "channel's deadlines will");
    }
    if (st != UCS_OK) {
        p->ep = NULL;
        snprintf(err, errlen, UCX_SUBJECT ": cannot reach the peer (%s)", ucs_status_string(st));
    }
    return st;
}

static int ucx_attach(void *state, const dsv4_kv_layout *local, const void *blob, size_t len,
                      void **peer_p, char *err, size_t errlen)
{
    ucx_state *s = state;
    dsv4_tp_in in = {.p = blob, .len = len};
    ucx_peer *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, UCX_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    p->local = local;
    /* the magic says which kind of pool the peer exposed: ours must be the same kind */
    bool device = ucx_is_device(local);
    dsv4_tp_in peek = in;
    uint32_t magic = dsv4_tp_get_u32(&peek);
    int rc = 0;
    if (magic == (device ? UCX_MAGIC : UCX_STAGE_MAGIC)) {
        snprintf(err, errlen, UCX_SUBJECT ": the peer's pool is in %s memory, ours in %s memory",
                 device ? "host" : "device", device ? "device" : "host");
        rc = DSV4_EPEER;
    }
    if (rc == 0)
        rc = dsv4_tp_get_table(&in, device ? UCX_STAGE_MAGIC : UCX_MAGIC, local, &p->t, UCX_SUBJECT,
                               err, errlen);
    uint32_t addr_len = dsv4_tp_get_u32(&in);
    const uint8_t *addr = addr_len <= UCX_MAX_ADDRESS ? dsv4_tp_get(&in, addr_len) : NULL;
    p->rkey = calloc(local->n_buffers ? local->n_buffers : 1, sizeof(*p->rkey));
    p->remote = calloc(local->n_buffers ? local->n_buffers : 1, sizeof(*p->remote));
    if (rc == 0 && (!p->rkey || !p->remote)) {
        snprintf(err, errlen, UCX_SUBJECT ": out of memory");
        rc = -ENOMEM;
    } else if (rc == 0 && !addr) {
        snprintf(err, errlen, UCX_SUBJECT ": truncated blob (worker address)");
        rc = DSV4_EPEER;
    }
    if (rc == 0 && ucx_ep_open(s, p, addr, err, errlen) != UCS_OK)
        rc = DSV4_EPEER;
    if (rc == 0 && device && (p->addr = malloc(addr_len)) != NULL) {
        memcpy(p->addr, addr, addr_len);
        p->addr_len = addr_len;
    }
    uint64_t remote_stage = device ? dsv4_tp_get_u64(&in) : 0;
    if (rc == 0 && device && !s->sender &&
        (rc = dsv4_ucx_sender_open(s->host, s->worker, &s->sender)) != 0)
        snprintf(err, errlen, UCX_SUBJECT ": cannot take acknowledgements (%s)", strerror(-rc));
    if (rc == 0 && device && !in.bad) {
        ucx_log_staging(s);
        rc = dsv4_ucx_speer_open(s->sender, local, &p->t, s->conf->stage_size, (size_t)remote_stage,
                                 &p->ep, &p->error, &p->stage, err, errlen);
    }
    for (uint32_t i = 0; rc == 0 && !device && i < local->n_buffers; i++) {
        p->remote[i] = dsv4_tp_get_u64(&in);
        uint32_t key_len = dsv4_tp_get_u32(&in);
        const uint8_t *key = key_len <= UCX_MAX_RKEY ? dsv4_tp_get(&in, key_len) : NULL;
        ucs_status_t st = key ? ucp_ep_rkey_unpack(p->ep, key, &p->rkey[i]) : UCS_ERR_INVALID_PARAM;
        if (st != UCS_OK) {
            p->rkey[i] = NULL;
            snprintf(err, errlen, UCX_SUBJECT ": bad remote key for buffer %u (%s)", i,
                     key ? ucs_status_string(st) : "truncated blob");
            rc = DSV4_EPEER;
        }
    }
    if (rc == 0 && in.bad) {
        snprintf(err, errlen, UCX_SUBJECT ": truncated blob (staging size)");
        rc = DSV4_EPEER;
    } else if (rc == 0 && in.off != in.len) {
        snprintf(err, errlen, UCX_SUBJECT ": trailing bytes in the peer's blob");
        rc = DSV4_EPEER;
    }
    if (rc != 0) {
        ucx_peer_free(s, p);
        return rc;
    }
    *peer_p = p;
    return 0;
}

static void ucx_detach(void *state, void *peer)
{
    ucx_peer_free(state, peer);
}

/* One put; a failure is recorded and stops further puts (the flush still drains). */
static void ucx_put(ucx_xfer *x, const void *src, size_t len, uint64_t remote, ucp_rkey_h rkey)
{
    if (x->status != UCS_OK || len == 0)
        return;
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *req = ucp_put_nbx(x->peer->ep, src, len, remote, rkey, &rp);
    if (UCS_PTR_IS_ERR(req))
        x->status = UCS_PTR_STATUS(req);
    else if (req)
        ucp_request_free(req); /* completion is tracked by the flush below */
}

static int ucx_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    ucx_state *s = state;
    ucx_peer *p = peer;
    if (__atomic_load_n(&p->error, __ATOMIC_ACQUIRE) != UCS_OK)
        return -ECONNRESET;
    int rc = dsv4_tp_check_req(req, p->local, &p->t);
    if (rc != 0)
        return rc;
    ucx_xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->peer = p;
    if (p->stage) {
        /* a drain force-closed the endpoint to a silent peer: try it afresh */
        char err[256];
        if (!p->ep && p->addr && ucx_ep_open(s, p, p->addr, err, sizeof(err)) == UCS_OK)
            s->host->log(DSV4_LOG_INFO, UCX_SUBJECT,
                         "reconnected to a peer whose endpoint a drain had closed");
        rc = dsv4_ucx_tx_post(p->stage, req, &x->tx);
        if (rc != 0) {
            free(x);
            return rc;
        }
        *xfer_p = x;
        return 0;
    }
    const dsv4_kv_layout *l = p->local;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        size_t bb = b->block_bytes;
        if (dsv4_buf_is_paged(b->kind)) {
            for (size_t r = 0; r < req->n_runs; r++)
                ucx_put(x, b->base + (size_t)req->runs[r].src_page * bb,
                        (size_t)req->runs[r].n_pages * bb,
                        p->remote[i] + (uint64_t)req->runs[r].dst_page * bb, p->rkey[i]);
        } else if (req->with_state) {
            ucx_put(x, b->base + (size_t)req->src_state * bb, bb,
                    p->remote[i] + (uint64_t)req->dst_state * bb, p->rkey[i]);
        }
    }
    ucp_request_param_t rp = {.op_attr_mask = 0};
    void *flush = ucp_ep_flush_nbx(p->ep, &rp);
    if (UCS_PTR_IS_ERR(flush)) {
        if (x->status == UCS_OK)
            x->status = UCS_PTR_STATUS(flush);
    } else {
        x->flush = flush;
    }
    *xfer_p = x;
    return 0;
}

/* Progresses the worker and settles the flush: true once it is no longer in flight. */
static bool ucx_settled(ucx_state *s, ucx_xfer *x)
{
    if (!x->flush)
        return true;
    ucp_worker_progress(s->worker);
    ucs_status_t st = ucp_request_check_status(x->flush);
    if (st == UCS_INPROGRESS)
        return false;
    if (x->status == UCS_OK)
        x->status = st;
    ucp_request_free(x->flush);
    x->flush = NULL;
    return true;
}

static int ucx_poll(void *state, void *xfer)
{
    ucx_xfer *x = xfer;
    if (x->tx)
        return dsv4_ucx_tx_poll(x->tx);
    if (!ucx_settled(state, x))
        return -EAGAIN;
    return ucx_errno(x->status);
}

static int ucx_cancel(void *state, void *xfer)
{
    ucx_xfer *x = xfer;
    if (x->tx)
        return dsv4_ucx_tx_cancel(x->tx);
    return ucx_settled(state, x) ? 0 : -EAGAIN;
}

static void ucx_release(void *state, void *xfer)
{
    ucx_xfer *x = xfer;
    if (x->tx)
        dsv4_ucx_tx_release(x->tx);
    /* released before it settled: UCX frees the flush request when it completes */
    else if (!ucx_settled(state, x))
        ucp_request_free(x->flush);
    free(x);
}

static const dsv4_option ucx_options[] = {
    {.key = "tls",
     .type = DSV4_OPT_STRING,
     .def = "tcp,shm,self",
     .min = 1,
     .max = 0,
     .help = "transports UCX may use, as UCX_TLS (e.g. tcp, or shm for shared memory on one host)",
     .offset = offsetof(ucx_config, tls)},
    {.key = "stage_size",
     .type = DSV4_OPT_SIZE,
     .def = "16M",
     .min = 1ll << 20,
     .max = 4ll << 30,
     .help = "device pools: bytes of each pinned staging buffer (two per peer at the sender, "
             "two at the receiver); a request larger than one moves in several chunks",
     .offset = offsetof(ucx_config, stage_size)},
    {.key = NULL},
};

static const dsv4_transport_ops ucx_ops = {
    .struct_size = sizeof(dsv4_transport_ops),
    .expose = ucx_expose,
    .attach = ucx_attach,
    .detach = ucx_detach,
    .post = ucx_post,
    .poll = ucx_poll,
    .cancel = ucx_cancel,
    .release = ucx_release,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_TRANSPORT_DESC_HEADER,
    .name = "ucx",
    .description = "one-sided UCP RMA writes into the receiver's registered pool; device pools "
                   "staged through pinned buffers",
    .flags = 0,
    .options = ucx_options,
    .config_size = sizeof(ucx_config),
    .probe = ucx_probe,
    .check = ucx_check,
    .init = ucx_init,
    .fini = ucx_fini,
    .ops = &ucx_ops,
};
