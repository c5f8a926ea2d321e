/* nccl.c: transport/nccl, the KV handoff between a prefill GPU and a decode GPU as NCCL
 * sends and receives on a communicator per prefill/decode pair.
 *
 * NCCL is two-sided and its set-up is a collective, so this plugin fills the two-sided ops
 * of transport.h. Receiver (decode): expose() describes the pool (buffer table, base
 * addresses, GPU); accept() takes the sender's bootstrap message (epoch and NCCL unique id)
 * and starts its rank of the communicator; recv_post() enqueues the receives of one
 * request. Sender (prefill): attach() checks the receiver's pool and GPU; bootstrap()
 * draws a unique id and starts rank 0 of a new communicator (after attach, and after an
 * abort killed the previous one); post() enqueues the sends of one request. Both sides
 * compute the same ordered operations from the same dsv4_xfer_req (nccl_proto.h).
 *
 * Nothing here blocks the caller's thread on the network or the GPU: communicators are
 * created non-blocking (ncclConfig_t blocking = 0) and polled with ncclCommGetAsyncError;
 * each request is one ncclGroupStart/End on the connection's own stream, launched from
 * poll() once the communicator is ready and the previous group was enqueued (so requests
 * go out in post order, the order the receiver posts them in), and completes through an
 * event. A communicator that does not come up within init_timeout, reports an error, or
 * must be torn down is aborted on a helper thread (ncclCommAbort, then the stream is
 * drained); until that thread is done its transfers are "in flight".
 *
 * Abort and drain: the sender's cancel() of a transfer that may still be running aborts
 * the communicator (the receiver's matching receives would otherwise pair with the next
 * request's sends) and returns 0 once the abort is done; the next bootstrap() then
 * rebuilds the connection under a new epoch, and the receiver's accept() of that message
 * aborts its own end, which settles every receive it still had. The receiver's cancel()
 * never aborts on its own: it returns 0 once its receives completed or their communicator
 * is dead (the sender aborted and re-bootstrapped, or detach() tore the peer down), so
 * nothing can land in the decode's pages afterwards. Receives write the decode's pages
 * only from the decode's own kernels (user buffers are not registered with NCCL).
 *
 * Distinct GPUs: the expose blob and the bootstrap message carry the writer's GPU UUID;
 * attach() and accept() refuse a peer on the same GPU (NCCL cannot run two ranks of one
 * communicator on one device).
 */
#include "config.h"

#include "plugins/transport/nccl_proto.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h declares ncclGroupStart() and friends without (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define NCCL_SUBJECT "transport/nccl"
/* After a failed communicator set-up, how long bootstrap() waits before the next try. */
#define NCCL_RETRY_NS 1000000000ull

_Static_assert(NCCL_UNIQUE_ID_BYTES == DSV4_NCCL_ID_BYTES, "NCCL unique id size changed");

typedef struct nccl_config {
    int64_t init_timeout; /* ms */
} nccl_config;

typedef struct nccl_state {
    const dsv4_host *host;
    const nccl_config *conf;
} nccl_state;

enum { COMM_INIT, COMM_READY, COMM_KILLING, COMM_DEAD };
enum { X_QUEUED, X_LAUNCHING, X_LAUNCHED, X_DONE, X_FAILED };

typedef struct nccl_peer nccl_peer;
typedef struct nccl_xfer nccl_xfer;

/* One communicator (one epoch) of a peer. */
typedef struct nccl_comm {
    struct nccl_comm *next; /* the peer's communicators, the current one first */
    nccl_peer *p;
    uint32_t epoch;
    ncclComm_t comm;
    cudaStream_t stream;
    int state;
    int why; /* what killed it */
    uint64_t init_deadline_ns;
    bool busy;         /* a group's ncclGroupEnd is still in progress */
    nccl_xfer *busy_x; /* its transfer (NULL once released) */
    pthread_t killer;
    bool has_killer;
    atomic_bool killed; /* the killer is done: nothing of this communicator runs */
    uint32_t refs;      /* transfers bound to it */
} nccl_comm;

struct nccl_xfer {
    nccl_xfer *next, *prev; /* the peer's transfers, in post order */
    nccl_comm *c;
    int st;
    int rc; /* X_FAILED: why */
    dsv4_nccl_op *ops;
    size_t n_ops;
    cudaEvent_t ev;
    bool has_ev;
};

struct nccl_peer {
    nccl_state *s;
    bool sender;
    bool detached;
    int dev;
    pthread_mutex_t mu;
    const dsv4_kv_layout *local;
    dsv4_nccl_side mine;
    dsv4_nccl_peer_info info; /* the other side */
    dsv4_nccl_gpu gpu;        /* ours */
    nccl_comm *comms;         /* current first */
    uint32_t epoch;           /* of the newest communicator */
    bool boot_due;            /* sender: the receiver needs a new bootstrap message */
    uint64_t boot_after_ns;   /* sender: not before (after a failed set-up) */
    uint8_t *boot_msg;        /* sender: encoded, not yet handed out */
    size_t boot_len;
    nccl_xfer list; /* sentinel */
};

/* ---- devices ------------------------------------------------------------------------------ */

static int nccl_gpu_of(int dev, dsv4_nccl_gpu *gpu_p)
{
    struct cudaDeviceProp prop;
    dsv4_nccl_gpu g = {0};
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaDeviceGetPCIBusId(g.bus_id, sizeof(g.bus_id), dev) != cudaSuccess)
        return -ENODEV;
    memcpy(g.uuid, prop.uuid.bytes, sizeof(g.uuid));
    *gpu_p = g;
    return 0;
}

/* Our device and GPU for pool l, with the reason in err on failure. */
static int nccl_local(const dsv4_kv_layout *l, int *dev_p, dsv4_nccl_gpu *gpu_p, char *err,
                      size_t errlen)
{
    if (dsv4_tp_layout_device(l, dev_p) != 0) {
        snprintf(err, errlen,
                 NCCL_SUBJECT ": the kv pool is not in device memory of one GPU (device = cuda "
                              "is needed)");
        return -ENOTSUP;
    }
    if (nccl_gpu_of(*dev_p, gpu_p) != 0) {
        snprintf(err, errlen, NCCL_SUBJECT ": cannot identify CUDA device %d", *dev_p);
        return -ENODEV;
    }
    return 0;
}

static int nccl_same_gpu_refusal(const dsv4_nccl_gpu *gpu, char *err, size_t errlen)
{
    char g[128];
    dsv4_nccl_gpu_text(gpu, g, sizeof(g));
    snprintf(err, errlen,
             NCCL_SUBJECT ": prefill and decode use the same GPU %s (NCCL cannot run both ends "
                          "of a connection on one device; give each role its own [core] "
                          "cuda_device)",
             g);
    return DSV4_EPEER;
}

/* ---- communicators ------------------------------------------------------------------------ */

static void *nccl_killer_main(void *arg)
{
    nccl_comm *c = arg;
    cudaSetDevice(c->p->dev);
    ncclCommAbort(c->comm);
    /* the aborted kernels are off the device once the stream drained */
    cudaStreamSynchronize(c->stream);
    cudaStreamDestroy(c->stream);
    atomic_store(&c->killed, true);
    return NULL;
}

/* Starts tearing c down (peer lock held); its transfers stay in flight until it is dead. */
static void nccl_comm_kill(nccl_comm *c, int why)
{
    if (c->state == COMM_KILLING || c->state == COMM_DEAD)
        return;
    nccl_peer *p = c->p;
    c->state = COMM_KILLING;
    c->why = why;
    c->has_killer = pthread_create(&c->killer, NULL, nccl_killer_main, c) == 0;
    if (!c->has_killer)
        nccl_killer_main(c);
    if (p->sender && c == p->comms)
        p->boot_due = true; /* the receiver must hear of the next one */
}

static void nccl_comm_fail(nccl_comm *c, const char *what, ncclResult_t r)
{
    c->p->s->host->log(DSV4_LOG_WARN, NCCL_SUBJECT, "connection epoch %u: %s (%s); rebuilding it",
                       c->epoch, what, ncclGetErrorString(r));
    nccl_comm_kill(c, r == ncclInProgress ? -ETIMEDOUT : -EIO);
}

static void nccl_record(nccl_xfer *x)
{
    if (cudaEventRecord(x->ev, x->c->stream) == cudaSuccess) {
        x->st = X_LAUNCHED;
    } else {
        x->st = X_LAUNCHING; /* settled only by the communicator's death */
        nccl_comm_kill(x->c, -EIO);
    }
}

/* Moves c along: set-up done or timed out, a group enqueued, the killer finished. */
static void nccl_comm_step(nccl_comm *c)
{
    ncclResult_t st = ncclSuccess;
    if ((c->state == COMM_INIT || c->state == COMM_READY) &&
        ncclCommGetAsyncError(c->comm, &st) != ncclSuccess)
        st = ncclInternalError;
    if (c->state == COMM_INIT) {
        if (st == ncclSuccess)
            c->state = COMM_READY;
        else if (st != ncclInProgress || c->p->s->host->now_ns() >= c->init_deadline_ns)
            nccl_comm_fail(c, st == ncclInProgress ? "set-up timed out" : "set-up failed", st);
    } else if (c->state == COMM_READY) {
        if (st == ncclSuccess && c->busy) {
            c->busy = false;
            if (c->busy_x)
                nccl_record(c->busy_x);
            c->busy_x = NULL;
        } else if (st != ncclSuccess && st != ncclInProgress) {
            nccl_comm_fail(c, "asynchronous error", st);
        }
    }
    if (c->state == COMM_KILLING && atomic_load(&c->killed)) {
        if (c->has_killer)
            pthread_join(c->killer, NULL);
        c->has_killer = false;
        c->state = COMM_DEAD;
    }
}

/* One request as one group on c's stream. */
static void nccl_launch(nccl_peer *p, nccl_xfer *x)
{
    nccl_comm *c = x->c;
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; r == ncclSuccess && i < x->n_ops; i++) {
        const dsv4_nccl_op *op = &x->ops[i];
        r = p->sender
                ? ncclSend((const void *)(uintptr_t)op->src, op->bytes, ncclUint8, 1, c->comm,
                           c->stream)
                : ncclRecv((void *)(uintptr_t)op->dst, op->bytes, ncclUint8, 0, c->comm, c->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
    if (r == ncclSuccess) {
        nccl_record(x);
    } else if (r == ncclInProgress) {
        x->st = X_LAUNCHING;
        c->busy = true;
        c->busy_x = x;
    } else {
        x->st = X_LAUNCHING; /* part of it may be enqueued: settled by the abort */
        nccl_comm_fail(c, "cannot enqueue a transfer", r);
    }
}

/* Moves every communicator and transfer of p along (peer lock held, device set). */
static void nccl_peer_step(nccl_peer *p)
{
    for (nccl_comm *c = p->comms; c; c = c->next)
        nccl_comm_step(c);
    for (nccl_xfer *x = p->list.next; x != &p->list; x = x->next) {
        nccl_comm *c = x->c;
        if (x->st == X_DONE || x->st == X_FAILED)
            continue;
        if (c->state == COMM_DEAD) {
            x->st = X_FAILED;
            x->rc = c->why ? c->why : -ECONNRESET;
        } else if (x->st == X_QUEUED && c->state == COMM_READY && !c->busy) {
            nccl_launch(p, x);
        } else if (x->st == X_LAUNCHED) {
            cudaError_t e = cudaEventQuery(x->ev);
            if (e == cudaSuccess)
                x->st = X_DONE;
            else if (e != cudaErrorNotReady)
                nccl_comm_kill(c, -EIO);
        }
    }
    /* communicators nobody uses any more go once dead (the current one stays) */
    for (nccl_comm **cp = p->comms ? &p->comms->next : NULL; cp && *cp;) {
        nccl_comm *c = *cp;
        if (c->state == COMM_DEAD && c->refs == 0) {
            *cp = c->next;
            free(c);
        } else {
            cp = &c->next;
        }
    }
}

/* A new communicator of p as `rank` (peer lock held); it becomes the current one. */
static int nccl_comm_new(nccl_peer *p, const uint8_t id[DSV4_NCCL_ID_BYTES], int rank,
                         uint32_t epoch)
{
    nccl_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->p = p;
    c->epoch = epoch;
    atomic_init(&c->killed, false);
    if (cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess) {
        free(c);
        return -ENOMEM;
    }
    ncclUniqueId uid;
    memcpy(uid.internal, id, sizeof(uid.internal));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* poll the set-up: neither server's threads wait on the other */
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, 2, uid, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        p->s->host->log(DSV4_LOG_ERROR, NCCL_SUBJECT, "cannot start connection epoch %u (%s)",
                        epoch, ncclGetErrorString(r));
        cudaStreamDestroy(c->stream);
        free(c);
        return -EIO;
    }
    c->state = COMM_INIT;
    c->init_deadline_ns = p->s->host->now_ns() + (uint64_t)p->s->conf->init_timeout * 1000000u;
    for (nccl_comm *old = p->comms; old; old = old->next)
        nccl_comm_kill(old, -ECONNRESET);
    c->next = p->comms;
    p->comms = c;
    p->epoch = epoch;
    return 0;
}

/* ---- peers -------------------------------------------------------------------------------- */

static nccl_peer *nccl_peer_new(nccl_state *s, bool sender, const dsv4_kv_layout *local, int dev,
                                const dsv4_nccl_gpu *gpu, dsv4_nccl_peer_info *info)
{
    nccl_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->mine.base = dsv4_nccl_bases(local);
    if (!p->mine.base) {
        free(p);
        return NULL;
    }
    p->s = s;
    p->sender = sender;
    p->dev = dev;
    p->local = local;
    p->mine.n_pages = local->n_pages;
    p->mine.n_slots = local->n_state_slots;
    p->gpu = *gpu;
    p->info = *info;
    *info = (dsv4_nccl_peer_info){0};
    p->list.next = p->list.prev = &p->list;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

/* Frees p once detached and without transfers (peer lock held; released here). */
static void nccl_peer_maybe_free(nccl_peer *p)
{
    if (!p->detached || p->list.next != &p->list) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    for (nccl_comm *c = p->comms, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    dsv4_nccl_peer_info_clear(&p->info);
    free(p->mine.base);
    free(p->boot_msg);
    free(p);
}

/* Returns once nothing of p runs on the device any more (every communicator dead). */
static void nccl_detach(void *state, void *peer)
{
    (void)state;
    nccl_peer *p = peer;
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    for (nccl_comm *c = p->comms; c; c = c->next) {
        nccl_comm_kill(c, -ECONNRESET);
        if (c->has_killer)
            pthread_join(c->killer, NULL);
        c->has_killer = false;
        c->state = COMM_DEAD;
    }
    nccl_peer_step(p); /* every transfer left is failed and settled */
    p->detached = true;
    nccl_peer_maybe_free(p);
}

/* ---- plugin hooks ------------------------------------------------------------------------- */

static int nccl_probe(const dsv4_host *host, char *why, size_t whylen)
{
    (void)host;
    int n = 0, version = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, whylen, "no CUDA device visible (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return DSV4_EUNAVAIL;
    }
    if (ncclGetVersion(&version) != ncclSuccess) {
        snprintf(why, whylen, "the NCCL library does not answer ncclGetVersion");
        return DSV4_EUNAVAIL;
    }
    return 0;
}

static int nccl_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                      dsv4_diag *diag)
{
    (void)config;
    /* device = cpu is the core's rule for every GPU plugin (gpu_plugins_need_gpu) */
    if (sel->device == DSV4_DEVICE_AUTO) {
        report(diag, "core", "device",
               "transport/nccl moves device memory only: set device = cuda (auto may fall back "
               "to the CPU pool)");
        return 1;
    }
    return 0;
}

static int nccl_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                     size_t errlen)
{
    nccl_state *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, NCCL_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    s->host = host;
    s->conf = config;
    *state_p = s;
    return 0;
}

static void nccl_fini(void *state)
{
    free(state);
}

/* ---- ops ---------------------------------------------------------------------------------- */

static int nccl_expose(void *state, const dsv4_kv_layout *l, void *blob, size_t *len_p)
{
    nccl_state *s = state;
    int dev;
    dsv4_nccl_gpu gpu;
    char err[256];
    int rc = nccl_local(l, &dev, &gpu, err, sizeof(err));
    if (rc != 0) {
        s->host->log(DSV4_LOG_ERROR, NCCL_SUBJECT, "%s", err);
        return rc;
    }
    return dsv4_nccl_expose_encode(l, &gpu, blob, len_p);
}

/* The decoder of a peer's message: its expose blob or its bootstrap message (nccl_proto.h). */
typedef int (*nccl_decode_fn)(const void *msg, size_t len, const dsv4_kv_layout *local,
                              dsv4_nccl_peer_info *info, char *err, size_t errlen);

/* This side's GPU for `local` and the peer's message decoded into info, refused where both
 * sides are one GPU (attach and accept alike). */
static int nccl_meet(const dsv4_kv_layout *local, nccl_decode_fn decode, const void *msg,
                     size_t len, int *dev, dsv4_nccl_gpu *gpu, dsv4_nccl_peer_info *info, char *err,
                     size_t errlen)
{
    int rc = nccl_local(local, dev, gpu, err, errlen);
    if (rc == 0)
        rc = decode(msg, len, local, info, err, errlen);
    if (rc == 0 && dsv4_nccl_same_gpu(gpu, &info->gpu))
        rc = nccl_same_gpu_refusal(gpu, err, errlen);
    return rc;
}

static int nccl_attach(void *state, const dsv4_kv_layout *local, const void *blob, size_t len,
                       void **peer_p, char *err, size_t errlen)
{
    int dev;
    dsv4_nccl_gpu gpu;
    dsv4_nccl_peer_info info = {0};
    int rc = nccl_meet(local, dsv4_nccl_expose_decode, blob, len, &dev, &gpu, &info, err, errlen);
    nccl_peer *p = rc == 0 ? nccl_peer_new(state, true, local, dev, &gpu, &info) : NULL;
    if (rc == 0 && !p) {
        snprintf(err, errlen, NCCL_SUBJECT ": out of memory");
        rc = -ENOMEM;
    }
    dsv4_nccl_peer_info_clear(&info);
    if (rc != 0)
        return rc;
    p->boot_due = true;
    *peer_p = p;
    return 0;
}

static int nccl_bootstrap(void *state, void *peer, void *blob, size_t *len_p)
{
    (void)state;
    nccl_peer *p = peer;
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    nccl_peer_step(p);
    if (!p->boot_msg && (!p->boot_due || p->s->host->now_ns() < p->boot_after_ns)) {
        rc = -EAGAIN;
    } else if (!p->boot_msg) {
        ncclUniqueId id;
        size_t len = 0;
        uint32_t epoch = p->epoch + 1;
        rc = ncclGetUniqueId(&id) == ncclSuccess ? 0 : -EIO;
        if (rc == 0)
            rc = nccl_comm_new(p, (const uint8_t *)id.internal, 0, epoch);
        if (rc == 0)
            dsv4_nccl_boot_encode(p->local, &p->gpu, epoch, (const uint8_t *)id.internal, NULL,
                                  &len);
        if (rc == 0 && !(p->boot_msg = malloc(len)))
            rc = -ENOMEM;
        if (rc == 0) {
            dsv4_nccl_boot_encode(p->local, &p->gpu, epoch, (const uint8_t *)id.internal,
                                  p->boot_msg, &len);
            p->boot_len = len;
            p->boot_due = false;
        } else {
            p->boot_after_ns = p->s->host->now_ns() + NCCL_RETRY_NS;
        }
    }
    if (rc == 0 && p->boot_len > *len_p) {
        rc = -ENOSPC;
    } else if (rc == 0) {
        memcpy(blob, p->boot_msg, p->boot_len);
        free(p->boot_msg);
        p->boot_msg = NULL;
    }
    if (rc == 0 || rc == -ENOSPC)
        *len_p = p->boot_len;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int nccl_accept(void *state, const dsv4_kv_layout *local, const void *msg, size_t len,
                       void **peer_p, char *err, size_t errlen)
{
    int dev;
    dsv4_nccl_gpu gpu;
    dsv4_nccl_peer_info info = {0};
    int rc = nccl_meet(local, dsv4_nccl_boot_decode, msg, len, &dev, &gpu, &info, err, errlen);
    nccl_peer *p = *peer_p;
    if (rc == 0 && !p && !(p = nccl_peer_new(state, false, local, dev, &gpu, &info))) {
        snprintf(err, errlen, NCCL_SUBJECT ": out of memory");
        rc = -ENOMEM;
    }
    if (rc != 0) {
        dsv4_nccl_peer_info_clear(&info);
        return rc;
    }
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    if (*peer_p && info.epoch <= p->epoch) {
        snprintf(err, errlen, NCCL_SUBJECT ": bootstrap message of epoch %u after epoch %u",
                 info.epoch, p->epoch);
        rc = DSV4_ESTALE;
    } else {
        if (*peer_p) { /* a rebuild: the newest message describes the sender */
            dsv4_nccl_peer_info_clear(&p->info);
            p->info = info;
            info = (dsv4_nccl_peer_info){0};
        }
        rc = nccl_comm_new(p, p->info.id, 1, p->info.epoch);
        if (rc != 0)
            snprintf(err, errlen, NCCL_SUBJECT ": cannot start connection epoch %u (%s)",
                     p->info.epoch, strerror(-rc));
    }
    dsv4_nccl_peer_info_clear(&info);
    nccl_peer_step(p);
    if (!*peer_p && rc != 0) {
        p->detached = true;
        nccl_peer_maybe_free(p);
        return rc;
    }
    pthread_mutex_unlock(&p->mu);
    *peer_p = p;
    return rc;
}

/* Both sides: the request's operations, bound to the current communicator. */
static int nccl_enqueue(nccl_peer *p, const dsv4_xfer_req *req, void **xfer_p)
{
    const dsv4_nccl_side *src = p->sender ? &p->mine : &p->info.side;
    const dsv4_nccl_side *dst = p->sender ? &p->info.side : &p->mine;
    nccl_xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    nccl_peer_step(p);
    nccl_comm *c = p->comms;
    int rc = !c ? -ENOTCONN
             : c->state == COMM_KILLING || c->state == COMM_DEAD
                 ? -ECONNRESET
                 : dsv4_nccl_plan(p->local, src, dst, req, &x->ops, &x->n_ops);
    if (rc == 0 && cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming) != cudaSuccess)
        rc = -ENOMEM;
    if (rc != 0) {
        pthread_mutex_unlock(&p->mu);
        free(x->ops);
        free(x);
        return rc;
    }
    x->has_ev = true;
    x->c = c;
    c->refs++;
    x->st = X_QUEUED;
    x->prev = p->list.prev;
    x->next = &p->list;
    p->list.prev->next = x;
    p->list.prev = x;
    nccl_peer_step(p); /* launches it when the connection is ready */
    pthread_mutex_unlock(&p->mu);
    *xfer_p = x;
    return 0;
}

static int nccl_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    (void)state;
    return nccl_enqueue(peer, req, xfer_p);
}

static int nccl_recv_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    (void)state;
    return nccl_enqueue(peer, req, xfer_p);
}

static nccl_peer *nccl_xfer_peer(nccl_xfer *x)
{
    return x->c->p;
}

static int nccl_poll(void *state, void *xfer)
{
    (void)state;
    nccl_xfer *x = xfer;
    nccl_peer *p = nccl_xfer_peer(x);
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    nccl_peer_step(p);
    int rc = x->st == X_DONE ? 0 : x->st == X_FAILED ? x->rc : -EAGAIN;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int nccl_cancel(void *state, void *xfer)
{
    (void)state;
    nccl_xfer *x = xfer;
    nccl_peer *p = nccl_xfer_peer(x);
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    nccl_peer_step(p);
    bool settled = x->st == X_DONE || x->st == X_FAILED;
    /* a sender's transfer still pending would leave the receiver's matching receives to
     * pair with the next request: the connection goes, and is rebuilt */
    if (!settled && p->sender) {
        nccl_comm_kill(x->c, -ECANCELED);
        nccl_peer_step(p);
        settled = x->st == X_FAILED;
    }
    pthread_mutex_unlock(&p->mu);
    return settled ? 0 : -EAGAIN;
}

static void nccl_release(void *state, void *xfer)
{
    (void)state;
    nccl_xfer *x = xfer;
    nccl_peer *p = nccl_xfer_peer(x);
    pthread_mutex_lock(&p->mu);
    cudaSetDevice(p->dev);
    if (x->c->busy_x == x)
        x->c->busy_x = NULL;
    x->c->refs--;
    x->prev->next = x->next;
    x->next->prev = x->prev;
    /* an event destroyed while pending is freed by CUDA once it completes */
    if (x->has_ev)
        cudaEventDestroy(x->ev);
    free(x->ops);
    free(x);
    nccl_peer_step(p);
    nccl_peer_maybe_free(p);
}

static const dsv4_option nccl_options[] = {
    {.key = "init_timeout",
     .type = DSV4_OPT_DURATION,
     .def = "30s",
     .min = 100,
     .max = 3600000,
     .help = "how long setting up a prefill/decode connection may take before it is aborted and "
             "rebuilt",
     .offset = offsetof(nccl_config, init_timeout)},
    {.key = NULL},
};

static const dsv4_transport_ops nccl_ops = {
    .struct_size = sizeof(dsv4_transport_ops),
    .expose = nccl_expose,
    .attach = nccl_attach,
    .detach = nccl_detach,
    .post = nccl_post,
    .poll = nccl_poll,
    .cancel = nccl_cancel,
    .release = nccl_release,
    .bootstrap = nccl_bootstrap,
    .accept = nccl_accept,
    .recv_post = nccl_recv_post,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_TRANSPORT_DESC_HEADER,
    .name = "nccl",
    .description = "NCCL sends and receives between the prefill GPU and the decode GPU (device "
                   "memory)",
    .flags = DSV4_PLUGIN_NEEDS_CUDA | DSV4_PLUGIN_NEEDS_GPU,
    .options = nccl_options,
    .config_size = sizeof(nccl_config),
    .probe = nccl_probe,
    .check = nccl_check,
    .init = nccl_init,
    .fini = nccl_fini,
    .ops = &nccl_ops,
};
