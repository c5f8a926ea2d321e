/* local.c: transport/local, KV transfer between pools on one host: memcpy between host
 * pools, CUDA IPC between device pools.
 *
 * In-process (prefill and decode in one address space, as in tests and a unified-role
 * daemon) the receiver's buffer addresses travel in the blob. Across processes the
 * receiver's pool must live in shared memory (dsv4_kv_pool_new_shared: one memfd); the blob
 * names it as /proc/<pid>/fd/<fd> plus the object's device and inode, and attach() maps it
 * once per peer after checking it opened that very object. A private pool cannot be
 * reached from another process: attach() says so instead of guessing.
 *
 * post() queues the whole request (all runs of all paged buffers, plus the state slot) to
 * one worker thread, so copies are asynchronous like a real transport. cancel() returns 0
 * only when the worker has not started the transfer (it never will) or has finished it:
 * that is the drain-before-free guarantee.
 *
 * Device pools ([core] device = cuda on both sides) take the CUDA IPC path of
 * local_cuda.c: the blob carries the GPU and an IPC handle per buffer, and post() is one
 * batched device-to-device copy per request on the peer's own stream. A host pool and a
 * device pool cannot be paired: attach() says so (local_blob.c).
 */
#include "config.h"

#include "plugins/transport/local_blob.h"
#include "plugins/transport/local_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCAL_SUBJECT "transport/local"

typedef enum local_xfer_state {
    LOCAL_QUEUED,
    LOCAL_RUNNING,
    LOCAL_DONE,
    LOCAL_CANCELLED,
} local_xfer_state;

typedef struct local_peer {
    dsv4_tp_table t;
    const dsv4_kv_layout *local;
    uint8_t **dst; /* [n_buffers] the peer's buffer bases in our address space */
    uint8_t *map;  /* the peer's shared memory mapping (cross-process), else NULL */
    size_t map_bytes;
    uint32_t busy; /* transfers queued or running */
    void *dev;     /* device pools: the CUDA IPC path's peer (the rest is unused) */
} local_peer;

typedef struct local_xfer {
    local_peer *peer;
    dsv4_xfer_run *runs;
    size_t n_runs;
    bool with_state;
    uint32_t src_state, dst_state;
    local_xfer_state state;
    bool cancel; /* asked while running: the worker stops between buffers */
    struct local_xfer *next;
    void *dev; /* device pools: the CUDA IPC path's transfer */
} local_xfer;

typedef struct local_state {
    const dsv4_host *host;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* queue changed, stop requested, or a transfer finished */
    local_xfer *head, *tail;
    bool stop;
    pthread_t worker;
} local_state;

/* Identifies this process across pid namespaces: a random number drawn once. */
static uint64_t process_token;
static pthread_once_t token_once = PTHREAD_ONCE_INIT;

static void local_draw_token(void)
{
    while (process_token == 0)
        if (getrandom(&process_token, sizeof(process_token), 0) != sizeof(process_token))
            process_token = (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&process_token;
}

/* Copies the whole request; stops between buffers when cancelled. */
static void local_copy(local_xfer *x)
{
    const dsv4_kv_layout *l = x->peer->local;
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        if (__atomic_load_n(&x->cancel, __ATOMIC_ACQUIRE))
            return;
        const dsv4_kv_buffer *b = &l->buffers[i];
        uint8_t *dst = x->peer->dst[i];
        size_t bb = b->block_bytes;
        if (dsv4_buf_is_paged(b->kind)) {
            for (size_t r = 0; r < x->n_runs; r++)
                memcpy(dst + (size_t)x->runs[r].dst_page * bb,
                       b->base + (size_t)x->runs[r].src_page * bb, (size_t)x->runs[r].n_pages * bb);
        } else if (x->with_state) {
            memcpy(dst + (size_t)x->dst_state * bb, b->base + (size_t)x->src_state * bb, bb);
        }
    }
}

static void *local_worker(void *arg)
{
    local_state *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        local_xfer *x = s->head;
        s->head = x->next;
        if (!s->head)
            s->tail = NULL;
        x->state = LOCAL_RUNNING;
        pthread_mutex_unlock(&s->mu);
        local_copy(x);
        pthread_mutex_lock(&s->mu);
        x->state = x->cancel ? LOCAL_CANCELLED : LOCAL_DONE;
        x->peer->busy--;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int local_init(const dsv4_host *host, const void *config, void **state_p, char *err,
                      size_t errlen)
{
    (void)config;
    pthread_once(&token_once, local_draw_token);
    local_state *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, LOCAL_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    s->host = host;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = pthread_create(&s->worker, NULL, local_worker, s);
    if (rc != 0) {
        snprintf(err, errlen, LOCAL_SUBJECT ": cannot start the copy thread (%s)", strerror(rc));
        free(s);
        return -rc;
    }
    *state_p = s;
    return 0;
}

static void local_fini(void *state)
{
    local_state *s = state;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The device path where this build has one. */
static const dsv4_local_path *local_cuda(void)
{
#ifdef HAVE_CUDA
    return &dsv4_local_cuda_path;
#else
    return NULL;
#endif
}

static int local_expose(void *state, const dsv4_kv_layout *l, void *blob, size_t *len_p)
{
    (void)state;
    int mem = dsv4_local_layout_mem(l);
    if (mem < 0 || (mem == DSV4_MEM_CUDA && !local_cuda()))
        return -ENOTSUP;
    dsv4_local_blob b = {.mem = (uint32_t)mem,
                         .token = process_token,
                         .pid = (uint32_t)getpid(),
                         .fd = DSV4_LOCAL_NO_FD,
                         .bufs = calloc(l->n_buffers ? l->n_buffers : 1, sizeof(*b.bufs))};
    if (!b.bufs)
        return -ENOMEM;
    bool shared = DSV4_HAS_FIELD(l, dsv4_kv_layout, shm_bytes) && l->shm_fd >= 0;
    struct stat st = {0};
    int rc = 0;
    if (mem == DSV4_MEM_CUDA) {
        rc = local_cuda()->describe(l, &b);
    } else if (shared && fstat(l->shm_fd, &st) != 0) {
        rc = -errno;
    } else if (shared) {
        b.fd = (uint32_t)l->shm_fd;
        b.shm_bytes = l->shm_bytes;
        b.shm_dev = (uint64_t)st.st_dev;
        b.shm_ino = (uint64_t)st.st_ino;
    }
    for (uint32_t i = 0; mem == DSV4_MEM_HOST && i < l->n_buffers; i++) {
        b.bufs[i].addr = (uint64_t)(uintptr_t)l->buffers[i].base;
        b.bufs[i].off = shared ? (uint64_t)(l->buffers[i].base - l->shm_base) : 0;
    }
    if (rc == 0)
        rc = dsv4_local_blob_encode(l, &b, blob, len_p);
    dsv4_local_blob_clear(&b);
    return rc;
}

/* Maps the peer's shared memory object and checks it is the one the blob describes. */
static int local_map(local_peer *p, uint32_t pid, uint32_t fd, uint64_t bytes, uint64_t dev,
                     uint64_t ino, char *err, size_t errlen)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        snprintf(err, errlen,
                 LOCAL_SUBJECT ": cannot open the peer's pool %s (%s; both "
                               "processes must share a pid namespace and user)",
                 path, strerror(errno));
        return DSV4_EPEER;
    }
    struct stat st;
    int rc = 0;
    if (fstat(f, &st) != 0 || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino ||
        (uint64_t)st.st_size < bytes || bytes == 0) {
        snprintf(err, errlen,
                 LOCAL_SUBJECT ": %s is not the peer's pool (another pid "
                               "namespace?)",
                 path);
        rc = DSV4_EPEER;
    } else {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, LOCAL_SUBJECT ": cannot map the peer's pool (%s)",
                     strerror(errno));
            rc = -errno;
        } else {
            p->map = m;
            p->map_bytes = bytes;
        }
    }
    close(f);
    return rc;
}

/* The sender's end of a device pool: the CUDA IPC path's peer inside ours. */
static int local_attach_cuda(local_state *s, local_peer *p, const dsv4_local_blob *b,
                             bool same_process, char *err, size_t errlen)
{
    if (!local_cuda()) {
        snprintf(err, errlen,
                 LOCAL_SUBJECT ": the peer's pool is in device memory and this "
                               "build has no CUDA");
        return -ENOTSUP;
    }
    int rc = local_cuda()->attach(s->host, p->local, b, same_process, &p->dev, err, errlen);
    if (rc == 0)
        s->host->log(DSV4_LOG_INFO, LOCAL_SUBJECT,
                     "attached to a device pool of %u pages (%s, CUDA device %d there)",
                     b->t.n_pages, same_process ? "same process" : "CUDA IPC", b->device);
    return rc;
}

static int local_attach(void *state, const dsv4_kv_layout *local, const void *blob, size_t len,
                        void **peer_p, char *err, size_t errlen)
{
    local_state *s = state;
    local_peer *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, LOCAL_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    p->local = local;
    dsv4_local_blob b = {0};
    int rc = dsv4_local_blob_decode(blob, len, local, &b, err, errlen);
    p->t = b.t;
    /* a forked child inherits the token but not the address space */
    bool same_process = rc == 0 && b.token == process_token && b.pid == (uint32_t)getpid();
    if (rc == 0 && b.mem == DSV4_MEM_CUDA) {
        rc = local_attach_cuda(s, p, &b, same_process, err, errlen);
        dsv4_local_blob_clear(&b);
        if (rc != 0)
            free(p);
        else
            *peer_p = p;
        return rc;
    }
    p->dst = calloc(local->n_buffers ? local->n_buffers : 1, sizeof(*p->dst));
    if (rc == 0 && !p->dst) {
        snprintf(err, errlen, LOCAL_SUBJECT ": out of memory");
        rc = -ENOMEM;
    }
    if (rc == 0 && !same_process && b.fd == DSV4_LOCAL_NO_FD) {
        snprintf(err, errlen,
                 LOCAL_SUBJECT
                 ": the peer's pool is private memory of process %u; "
                 "across processes the decode side must allocate its pool in shared memory "
                 "(dsv4_kv_pool_new_shared)",
                 b.pid);
        rc = DSV4_EPEER;
    }
    if (rc == 0 && !same_process)
        rc = local_map(p, b.pid, b.fd, b.shm_bytes, b.shm_dev, b.shm_ino, err, errlen);
    for (uint32_t i = 0; rc == 0 && i < local->n_buffers; i++) {
        const dsv4_kv_buffer *lb = &local->buffers[i];
        uint64_t off = b.bufs[i].off;
        uint64_t size =
            (uint64_t)lb->block_bytes * (dsv4_buf_is_paged(lb->kind) ? p->t.n_pages : p->t.n_slots);
        if (p->map && (off > p->map_bytes || size > p->map_bytes - off)) {
            snprintf(err, errlen, LOCAL_SUBJECT ": buffer %u lies outside the peer's pool", i);
            rc = DSV4_EPEER;
        }
        p->dst[i] = p->map ? p->map + off : (uint8_t *)(uintptr_t)b.bufs[i].addr;
    }
    dsv4_local_blob_clear(&b);
    if (rc != 0) {
        if (p->map)
            munmap(p->map, p->map_bytes);
        free(p->dst);
        free(p);
        return rc;
    }
    s->host->log(DSV4_LOG_INFO, LOCAL_SUBJECT, "attached to a pool of %u pages (%s)", p->t.n_pages,
                 same_process ? "same process" : "shared memory of another process");
    *peer_p = p;
    return 0;
}

static void local_detach(void *state, void *peer)
{
    local_state *s = state;
    local_peer *p = peer;
    if (p->dev) {
        local_cuda()->detach(p->dev);
        free(p);
        return;
    }
    pthread_mutex_lock(&s->mu);
    while (p->busy > 0) /* no copy into a mapping we are about to remove */
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (p->map)
        munmap(p->map, p->map_bytes);
    free(p->dst);
    free(p);
}

static int local_post(void *state, void *peer, const dsv4_xfer_req *req, void **xfer_p)
{
    local_state *s = state;
    local_peer *p = peer;
    if (p->dev) {
        local_xfer *x = calloc(1, sizeof(*x));
        int rc = x ? local_cuda()->post(p->dev, req, &x->dev) : -ENOMEM;
        if (rc != 0)
            free(x);
        else
            *xfer_p = x;
        return rc;
    }
    int rc = dsv4_tp_check_req(req, p->local, &p->t);
    if (rc != 0)
        return rc;
    local_xfer *x = calloc(1, sizeof(*x));
    dsv4_xfer_run *runs = dsv4_tp_runs_dup(req);
    if (!x || !runs) {
        free(x);
        free(runs);
        return -ENOMEM;
    }
    *x = (local_xfer){.peer = p,
                      .runs = runs,
                      .n_runs = req->n_runs,
                      .with_state = req->with_state,
                      .src_state = req->src_state,
                      .dst_state = req->dst_state};
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = x;
    else
        s->head = x;
    s->tail = x;
    p->busy++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *xfer_p = x;
    return 0;
}

static int local_poll(void *state, void *xfer)
{
    local_state *s = state;
    local_xfer *x = xfer;
    if (x->dev)
        return local_cuda()->poll(x->dev);
    pthread_mutex_lock(&s->mu);
    int rc = x->state == LOCAL_DONE ? 0 : x->state == LOCAL_CANCELLED ? -ECANCELED : -EAGAIN;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Takes a queued transfer off the queue (the worker will never see it). */
static void local_unqueue(local_state *s, local_xfer *x)
{
    local_xfer **pp = &s->head, *prev = NULL;
    while (*pp && *pp != x)
        prev = *pp, pp = &(*pp)->next;
    if (!*pp)
        return;
    *pp = x->next;
    if (s->tail == x)
        s->tail = prev;
    x->state = LOCAL_CANCELLED;
    x->peer->busy--;
    pthread_cond_broadcast(&s->cv);
}

static int local_cancel(void *state, void *xfer)
{
    local_state *s = state;
    local_xfer *x = xfer;
    if (x->dev)
        return local_cuda()->cancel(x->dev);
    pthread_mutex_lock(&s->mu);
    if (x->state == LOCAL_QUEUED)
        local_unqueue(s, x);
    else if (x->state == LOCAL_RUNNING)
        __atomic_store_n(&x->cancel, true, __ATOMIC_RELEASE);
    int rc = x->state == LOCAL_RUNNING ? -EAGAIN : 0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void local_release(void *state, void *xfer)
{
    local_state *s = state;
    local_xfer *x = xfer;
    if (x->dev) {
        local_cuda()->release(x->dev);
        free(x);
        return;
    }
    pthread_mutex_lock(&s->mu);
    if (x->state == LOCAL_QUEUED)
        local_unqueue(s, x);
    while (x->state == LOCAL_RUNNING) /* released early: never free what the worker uses */
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    free(x->runs);
    free(x);
}

static int local_probe(const dsv4_host *host, char *why, size_t whylen)
{
    (void)host;
    (void)why;
    (void)whylen;
    return 0;
}

static int local_check(const dsv4_selection *sel, const void *config, dsv4_report_fn report,
                       dsv4_diag *diag)
{
    (void)config;
    if (sel->device != DSV4_DEVICE_CUDA || local_cuda())
        return 0;
    report(diag, "transport", "plugin",
           "transport/local moves device pools over CUDA IPC, and this build has no CUDA");
    return 1;
}

static const dsv4_option local_options[] = {{.key = NULL}};

static const dsv4_transport_ops local_ops = {
    .struct_size = sizeof(dsv4_transport_ops),
    .expose = local_expose,
    .attach = local_attach,
    .detach = local_detach,
    .post = local_post,
    .poll = local_poll,
    .cancel = local_cancel,
    .release = local_release,
};

const dsv4_plugin_desc dsv4_plugin = {
    DSV4_TRANSPORT_DESC_HEADER,
    .name = "local",
    .description = "copies between pools of one process or of processes on one host (host "
                   "pools in shared memory, device pools over CUDA IPC)",
    .flags = 0,
    .options = local_options,
    .config_size = 0,
    .probe = local_probe,
    .check = local_check,
    .init = local_init,
    .fini = local_fini,
    .ops = &local_ops,
};
