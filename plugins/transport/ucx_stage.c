/* ucx_stage.c: transport/ucx between device pools through pinned staging buffers
 * (ucx_stage.h says how a transfer goes). */
#include "config.h"

#include "plugins/transport/ucx_stage.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "plugins/transport/cuda_batch.h"

#define ST_SUBJECT "transport/ucx"
#define ST_SLOTS 2                 /* staging buffers per receiver and per sender's peer */
#define ST_AM_CHUNK 0x4434         /* sender -> receiver: one staged chunk (rendezvous) */
#define ST_AM_ACK 0x4435           /* receiver -> sender: the chunk is in device memory */
#define ST_CHUNK_MAGIC 0x43543444u /* "D4TC": a chunk's table */
#define ST_ENTRY_BYTES 20u         /* u32 buffer, u64 destination offset, u64 bytes */
#define ST_ALIGN 256u              /* the payload starts on this boundary */

/* Bytes before the payload of a chunk of n pieces: magic, count, table, padding. */
static size_t st_head(size_t n)
{
    size_t h = 8 + n * ST_ENTRY_BYTES;
    return (h + ST_ALIGN - 1) / ST_ALIGN * ST_ALIGN;
}

/* What a chunk message carries besides its bytes, and what its acknowledgement carries. */
typedef struct st_hdr {
    uint64_t cookie; /* the sender's transfer */
    uint32_t chunk;
    int32_t status; /* ack: 0, or a negative errno of the receiver */
} st_hdr;

static int st_errno(ucs_status_t s)
{
    return s == UCS_OK                ? 0
           : s == UCS_ERR_NO_MEMORY   ? -ENOMEM
           : s == UCS_ERR_CANCELED    ? -ECANCELED
           : s == UCS_ERR_UNREACHABLE ? -ECONNRESET
                                      : -EIO;
}

/* ==== receiver ======================================================================== */

enum { RS_FREE, RS_RECEIVING, RS_LANDED, RS_SCATTERING };

typedef struct rx_slot {
    uint8_t *buf; /* pinned, slot_bytes */
    int state;
    void *req; /* the receive, until the turn frees it */
    ucs_status_t status;
    size_t len;
    st_hdr hdr;
    ucp_ep_h reply;
    cudaEvent_t scattered;
    struct dsv4_ucx_stage *st;
} rx_slot;

/* A chunk that found every buffer busy: UCX keeps its data until we take it. */
typedef struct rx_wait {
    struct rx_wait *next;
    void *desc;
    size_t len;
    st_hdr hdr;
    ucp_ep_h reply;
} rx_wait;

struct dsv4_ucx_stage {
    const dsv4_host *host;
    ucp_worker_h worker;
    const dsv4_kv_layout *l;
    size_t slot_bytes;
    int dev;
    cudaStream_t stream;
    int wake_fd;
    pthread_mutex_t mu; /* slot states, the waiting list */
    rx_slot slot[ST_SLOTS];
    rx_wait *wait_head, **wait_tail;
    dsv4_tp_batch batch; /* the progress thread's scatter list */
};

static void st_wake(dsv4_ucx_stage *st)
{
    uint64_t one = 1;
    if (write(st->wake_fd, &one, sizeof(one)) != sizeof(one))
        return; /* the counter is already non-zero: the thread wakes anyway */
}

/* Runs on the copy stream after a scatter: the progress thread settles it. */
static void CUDART_CB st_scatter_done(void *arg)
{
    st_wake(arg);
}

static void st_ack_sent(void *request, ucs_status_t status, void *user_data)
{
    (void)status;
    free(user_data);
    ucp_request_free(request);
}

/* Tells the sender how chunk hdr ended (status 0: it is in device memory). A sender that
 * is gone gets nothing: its transfer fails on its side. */
static void st_ack(dsv4_ucx_stage *st, ucp_ep_h reply, st_hdr hdr, int status)
{
    st_hdr *a = malloc(sizeof(*a));
    if (!a)
        return; /* the sender's drain bound ends its wait */
    *a = hdr;
    a->status = status;
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
                              .cb.send = st_ack_sent,
                              .user_data = a,
                              .flags = UCP_AM_SEND_FLAG_EAGER};
    void *r = ucp_am_send_nbx(reply, ST_AM_ACK, a, sizeof(*a), NULL, 0, &rp);
    if (!UCS_PTR_IS_PTR(r)) {
        if (UCS_PTR_IS_ERR(r))
            st->host->log(DSV4_LOG_WARN, ST_SUBJECT, "cannot acknowledge a chunk (%s)",
                          ucs_status_string(UCS_PTR_STATUS(r)));
        free(a);
    }
}

static void st_landed(void *request, ucs_status_t status, size_t length, void *user_data)
{
    rx_slot *s = user_data;
    pthread_mutex_lock(&s->st->mu);
    s->req = request;
    s->status = status;
    s->len = length;
    s->state = RS_LANDED;
    pthread_mutex_unlock(&s->st->mu);
    st_wake(s->st);
}

/* Starts the receive of a waiting chunk's data into slot s (RS_RECEIVING already). */
static void st_receive(dsv4_ucx_stage *st, rx_slot *s, void *desc, size_t len)
{
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA |
                                              UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                              .cb.recv_am = st_landed,
                              .user_data = s};
    void *r = ucp_am_recv_data_nbx(st->worker, desc, s->buf, len, &rp);
    if (UCS_PTR_IS_ERR(r))
        st_landed(NULL, UCS_PTR_STATUS(r), 0, s);
}

/* A free slot (RS_RECEIVING from now on), or NULL. Under st->mu. */
static rx_slot *st_take_slot(dsv4_ucx_stage *st)
{
    for (int k = 0; k < ST_SLOTS; k++)
        if (st->slot[k].state == RS_FREE) {
            st->slot[k].state = RS_RECEIVING;
            return &st->slot[k];
        }
    return NULL;
}

/* The chunk handler: a rendezvous chunk goes into a free staging buffer now or waits (UCX
 * holds its data and the sender's send until we take it); anything else is refused. */
static ucs_status_t st_on_chunk(void *arg, const void *header, size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param)
{
    dsv4_ucx_stage *st = arg;
    ucp_ep_h reply = param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP ? param->reply_ep : NULL;
    if (header_length != sizeof(st_hdr) || !reply)
        return UCS_OK; /* not ours: dropped (a rendezvous sender completes) */
    st_hdr hdr;
    memcpy(&hdr, header, sizeof(hdr));
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length > st->slot_bytes) {
        st->host->log(DSV4_LOG_WARN, ST_SUBJECT,
                      "refused a chunk of %zu bytes (%s; staging buffers hold %zu)", length,
                      param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? "too large"
                                                                    : "not rendezvous",
                      st->slot_bytes);
        st_ack(st, reply, hdr, -EMSGSIZE);
        return UCS_OK;
    }
    pthread_mutex_lock(&st->mu);
    rx_slot *s = st_take_slot(st);
    if (s) {
        s->hdr = hdr;
        s->reply = reply;
    } else {
        rx_wait *w = calloc(1, sizeof(*w));
        if (w) {
            *w = (rx_wait){.desc = data, .len = length, .hdr = hdr, .reply = reply};
            *st->wait_tail = w;
            st->wait_tail = &w->next;
        }
        pthread_mutex_unlock(&st->mu);
        if (!w) {
            st_ack(st, reply, hdr, -ENOMEM);
            return UCS_OK;
        }
        return UCS_INPROGRESS;
    }
    pthread_mutex_unlock(&st->mu);
    st_receive(st, s, data, length);
    return UCS_OK;
}

/* Queues the scatter of a landed chunk: its table checked against our pool, then one
 * batch. 0, -EPROTO (a table that does not fit our pool), -ENOMEM or -EIO. */
static int st_scatter(dsv4_ucx_stage *st, rx_slot *s)
{
    dsv4_tp_in in = {.p = s->buf, .len = s->len};
    uint32_t magic = dsv4_tp_get_u32(&in), n = dsv4_tp_get_u32(&in);
    if (in.bad || magic != ST_CHUNK_MAGIC || n > s->len / ST_ENTRY_BYTES || st_head(n) > s->len)
        return -EPROTO;
    if (n > st->batch.cap) {
        dsv4_tp_batch_free(&st->batch);
        if (dsv4_tp_batch_init(&st->batch, n) != 0)
            return -ENOMEM;
    }
    st->batch.n = 0;
    size_t at = st_head(n);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = dsv4_tp_get_u32(&in);
        uint64_t off = dsv4_tp_get_u64(&in), bytes = dsv4_tp_get_u64(&in);
        if (i >= st->l->n_buffers)
            return -EPROTO;
        const dsv4_kv_buffer *b = &st->l->buffers[i];
        uint64_t size = (uint64_t)b->block_bytes * b->n_blocks;
        if (off > size || bytes > size - off || bytes > s->len - at)
            return -EPROTO;
        dsv4_tp_batch_add(&st->batch, b->base + off, s->buf + at, (size_t)bytes);
        at += (size_t)bytes;
    }
    if (at != s->len)
        return -EPROTO;
    cudaError_t e = dsv4_tp_batch_queue(&st->batch, st->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(s->scattered, st->stream);
    if (e == cudaSuccess)
        e = cudaLaunchHostFunc(st->stream, st_scatter_done, st);
    if (e != cudaSuccess) {
        st->host->log(DSV4_LOG_ERROR, ST_SUBJECT, "cannot queue a scatter of %u pieces (%s)", n,
                      cudaGetErrorString(e));
        return -EIO;
    }
    return 0;
}

void dsv4_ucx_stage_turn(dsv4_ucx_stage *st)
{
    cudaSetDevice(st->dev); /* the current device is per thread */
    for (int k = 0; k < ST_SLOTS; k++) {
        rx_slot *s = &st->slot[k];
        pthread_mutex_lock(&st->mu);
        int state = s->state;
        pthread_mutex_unlock(&st->mu);
        if (state == RS_LANDED) {
            if (s->req)
                ucp_request_free(s->req);
            s->req = NULL;
            int rc = s->status == UCS_OK ? st_scatter(st, s) : st_errno(s->status);
            if (rc == 0) {
                pthread_mutex_lock(&st->mu);
                s->state = RS_SCATTERING;
                pthread_mutex_unlock(&st->mu);
                continue;
            }
            if (rc == -EPROTO)
                st->host->log(DSV4_LOG_WARN, ST_SUBJECT,
                              "refused a chunk whose table does not fit our pool");
            st_ack(st, s->reply, s->hdr, rc);
        } else if (state == RS_SCATTERING) {
            cudaError_t e = cudaEventQuery(s->scattered);
            if (e == cudaErrorNotReady)
                continue;
            if (e != cudaSuccess)
                st->host->log(DSV4_LOG_ERROR, ST_SUBJECT, "a scatter failed (%s)",
                              cudaGetErrorString(e));
            st_ack(st, s->reply, s->hdr, e == cudaSuccess ? 0 : -EIO);
        } else {
            continue;
        }
        /* the slot is free: the oldest waiting chunk takes it */
        pthread_mutex_lock(&st->mu);
        s->state = RS_FREE;
        rx_wait *w = st->wait_head;
        if (w) {
            st->wait_head = w->next;
            if (!st->wait_head)
                st->wait_tail = &st->wait_head;
            s->state = RS_RECEIVING;
            s->hdr = w->hdr;
            s->reply = w->reply;
        }
        pthread_mutex_unlock(&st->mu);
        if (w) {
            st_receive(st, s, w->desc, w->len);
            free(w);
        }
    }
}

int dsv4_ucx_stage_wake_fd(const dsv4_ucx_stage *st)
{
    return st->wake_fd;
}

static void st_free(dsv4_ucx_stage *st)
{
    for (int k = 0; k < ST_SLOTS; k++) {
        if (st->slot[k].buf)
            cudaFreeHost(st->slot[k].buf);
        if (st->slot[k].scattered)
            cudaEventDestroy(st->slot[k].scattered);
    }
    if (st->stream)
        cudaStreamDestroy(st->stream);
    if (st->wake_fd >= 0)
        close(st->wake_fd);
    dsv4_tp_batch_free(&st->batch);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

int dsv4_ucx_stage_open(const dsv4_host *host, ucp_worker_h worker, const dsv4_kv_layout *l,
                        size_t slot_bytes, dsv4_ucx_stage **st_p)
{
    int dev;
    if (dsv4_tp_layout_device(l, &dev) != 0)
        return -ENOTSUP;
    dsv4_ucx_stage *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    *st = (dsv4_ucx_stage){.host = host,
                           .worker = worker,
                           .l = l,
                           .slot_bytes = slot_bytes,
                           .dev = dev,
                           .wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
    st->wait_tail = &st->wait_head;
    pthread_mutex_init(&st->mu, NULL);
    const char *what = "creating the wake-up fd";
    cudaError_t e = cudaSuccess;
    bool good = st->wake_fd >= 0;
    if (good) {
        what = "creating the scatter stream";
        e = cudaSetDevice(dev);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    }
    for (int k = 0; good && e == cudaSuccess && k < ST_SLOTS; k++) {
        what = "allocating the pinned staging buffers";
        st->slot[k].st = st;
        e = cudaHostAlloc((void **)&st->slot[k].buf, slot_bytes, cudaHostAllocPortable);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&st->slot[k].scattered, cudaEventDisableTiming);
    }
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = ST_AM_CHUNK,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = st_on_chunk,
        .arg = st};
    ucs_status_t us = UCS_OK;
    if (good && e == cudaSuccess)
        us = ucp_worker_set_am_recv_handler(worker, &hp);
    if (!good || e != cudaSuccess || us != UCS_OK) {
        host->log(DSV4_LOG_ERROR, ST_SUBJECT, "%s failed (%s)",
                  us != UCS_OK ? "setting the chunk handler" : what,
                  us != UCS_OK       ? ucs_status_string(us)
                  : e != cudaSuccess ? cudaGetErrorString(e)
                                     : "no eventfd");
        st_free(st);
        return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
    }
    *st_p = st;
    return 0;
}

void dsv4_ucx_stage_close(dsv4_ucx_stage *st)
{
    if (!st)
        return;
    /* no chunk is taken any more; the ones waiting are given back (their senders' sends
     * complete), receives in flight end with the worker's progress */
    ucp_am_handler_param_t hp = {.field_mask =
                                     UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = ST_AM_CHUNK,
                                 .cb = NULL};
    ucp_worker_set_am_recv_handler(st->worker, &hp);
    for (rx_wait *w = st->wait_head, *next; w; w = next) {
        next = w->next;
        ucp_am_data_release(st->worker, w->desc);
        free(w);
    }
    st->wait_head = NULL;
    st->wait_tail = &st->wait_head;
    uint64_t end = st->host->now_ns() + DSV4_UCX_DRAIN_NS;
    for (int k = 0; k < ST_SLOTS; k++) {
        while (st->slot[k].state == RS_RECEIVING && st->host->now_ns() < end)
            ucp_worker_progress(st->worker);
        if (st->slot[k].state == RS_RECEIVING) {
            /* a receive that never ends keeps its buffer: leak it rather than free memory
             * UCX may still write */
            st->host->log(DSV4_LOG_WARN, ST_SUBJECT, "a chunk receive did not end at close");
            st->slot[k].buf = NULL;
        }
        if (st->slot[k].req)
            ucp_request_free(st->slot[k].req);
    }
    cudaSetDevice(st->dev);
    cudaStreamSynchronize(st->stream); /* scatters read the staging buffers */
    st_free(st);
}

/* ==== sender ============================================================================ */

enum { TS_FREE, TS_GATHERING, TS_SENDING };

typedef struct tx_slot {
    uint8_t *buf;
    int state;
    dsv4_ucx_tx *tx;
    uint32_t chunk;
    size_t len;
    st_hdr hdr;
    void *req;
    cudaEvent_t gathered;
} tx_slot;

struct dsv4_ucx_sender {
    const dsv4_host *host;
    ucp_worker_h worker;
    pthread_mutex_t mu; /* the live list and every transfer's ack counts */
    dsv4_ucx_tx *live;
    uint64_t next_cookie;
};

struct dsv4_ucx_speer {
    dsv4_ucx_sender *snd;
    const dsv4_kv_layout *local;
    dsv4_tp_table t;
    ucp_ep_h *ep;
    const ucs_status_t *error;
    size_t chunk; /* bytes of one chunk: the smaller staging buffer of the two sides */
    int dev;
    cudaStream_t stream;
    tx_slot slot[ST_SLOTS];
    dsv4_ucx_tx *head, **tail; /* posted, not released, in post order */
    dsv4_tp_batch batch;
};

struct dsv4_ucx_tx {
    dsv4_ucx_speer *sp;
    dsv4_ucx_tx *next, *live_next;
    uint64_t cookie;
    dsv4_tp_piece *pieces;
    size_t n_pieces;
    size_t at_piece, at_off; /* where the next chunk starts */
    uint32_t gathered;       /* chunks cut so far */
    uint32_t sent;           /* chunks whose send finished (the receiver holds them) */
    uint32_t acked;          /* chunks in device memory at the receiver (under snd->mu) */
    int status;              /* first failure (acks: under snd->mu) */
    bool cancelled;
    uint64_t drain_since; /* when cancel first found sent chunks unacknowledged (ns) */
    cudaEvent_t after;    /* the compute stream at post */
};

static void tx_fail(dsv4_ucx_tx *x, int rc)
{
    pthread_mutex_lock(&x->sp->snd->mu);
    if (x->status == 0)
        x->status = rc;
    pthread_mutex_unlock(&x->sp->snd->mu);
}

/* The acknowledgement handler: counts the chunk of a live transfer; late ones (the
 * transfer was released) are dropped. */
static ucs_status_t st_on_ack(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    (void)data, (void)length, (void)param;
    dsv4_ucx_sender *snd = arg;
    if (header_length != sizeof(st_hdr))
        return UCS_OK;
    st_hdr a;
    memcpy(&a, header, sizeof(a));
    pthread_mutex_lock(&snd->mu);
    for (dsv4_ucx_tx *x = snd->live; x; x = x->live_next)
        if (x->cookie == a.cookie) {
            x->acked++;
            if (a.status != 0 && x->status == 0)
                x->status = a.status;
            break;
        }
    pthread_mutex_unlock(&snd->mu);
    return UCS_OK;
}

int dsv4_ucx_sender_open(const dsv4_host *host, ucp_worker_h worker, dsv4_ucx_sender **snd_p)
{
    dsv4_ucx_sender *snd = calloc(1, sizeof(*snd));
    if (!snd)
        return -ENOMEM;
    *snd = (dsv4_ucx_sender){.host = host, .worker = worker, .next_cookie = 1};
    pthread_mutex_init(&snd->mu, NULL);
    ucp_am_handler_param_t hp = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = ST_AM_ACK,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = st_on_ack,
        .arg = snd};
    ucs_status_t us = ucp_worker_set_am_recv_handler(worker, &hp);
    if (us != UCS_OK) {
        host->log(DSV4_LOG_ERROR, ST_SUBJECT, "setting the acknowledgement handler failed (%s)",
                  ucs_status_string(us));
        pthread_mutex_destroy(&snd->mu);
        free(snd);
        return -EIO;
    }
    *snd_p = snd;
    return 0;
}

void dsv4_ucx_sender_close(dsv4_ucx_sender *snd)
{
    if (!snd)
        return;
    ucp_am_handler_param_t hp = {.field_mask =
                                     UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = ST_AM_ACK,
                                 .cb = NULL};
    ucp_worker_set_am_recv_handler(snd->worker, &hp);
    pthread_mutex_destroy(&snd->mu);
    free(snd);
}

static void sp_free(dsv4_ucx_speer *sp)
{
    for (int k = 0; k < ST_SLOTS; k++) {
        if (sp->slot[k].buf)
            cudaFreeHost(sp->slot[k].buf);
        if (sp->slot[k].gathered)
            cudaEventDestroy(sp->slot[k].gathered);
    }
    if (sp->stream)
        cudaStreamDestroy(sp->stream);
    dsv4_tp_batch_free(&sp->batch);
    free(sp);
}

int dsv4_ucx_speer_open(dsv4_ucx_sender *snd, const dsv4_kv_layout *local, const dsv4_tp_table *t,
                        size_t slot_bytes, size_t remote_bytes, ucp_ep_h *ep,
                        const ucs_status_t *error, dsv4_ucx_speer **sp_p, char *err, size_t errlen)
{
    int dev;
    if (dsv4_tp_layout_device(local, &dev) != 0) {
        snprintf(err, errlen, ST_SUBJECT ": our kv pool is not in device memory of one GPU");
        return -ENOTSUP;
    }
    size_t chunk = slot_bytes < remote_bytes ? slot_bytes : remote_bytes;
    if (chunk < 2 * ST_ALIGN) {
        snprintf(err, errlen, ST_SUBJECT ": the peer's staging buffers are too small (%zu bytes)",
                 remote_bytes);
        return DSV4_EPEER;
    }
    dsv4_ucx_speer *sp = calloc(1, sizeof(*sp));
    if (!sp) {
        snprintf(err, errlen, ST_SUBJECT ": out of memory");
        return -ENOMEM;
    }
    *sp = (dsv4_ucx_speer){
        .snd = snd, .local = local, .t = *t, .ep = ep, .error = error, .chunk = chunk, .dev = dev};
    sp->tail = &sp->head;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&sp->stream, cudaStreamNonBlocking);
    for (int k = 0; e == cudaSuccess && k < ST_SLOTS; k++) {
        e = cudaHostAlloc((void **)&sp->slot[k].buf, chunk, cudaHostAllocPortable);
        if (e == cudaSuccess)
            e = cudaEventCreateWithFlags(&sp->slot[k].gathered, cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        snprintf(err, errlen, ST_SUBJECT ": cannot set up the staging buffers of %zu bytes (%s)",
                 chunk, cudaGetErrorString(e));
        sp_free(sp);
        return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
    }
    *sp_p = sp;
    return 0;
}

/* Cuts x's next chunk into slot s: the table written into the pinned buffer, the payload
 * queued as one gather batch after the compute stream's work at post. 0 or -EIO. */
static int tx_gather(dsv4_ucx_tx *x, tx_slot *s)
{
    dsv4_ucx_speer *sp = x->sp;
    size_t cap = sp->chunk, payload = 0, n = 0;
    size_t k = x->at_piece, off = x->at_off;
    /* pieces while the table and the payload still fit; the last one may be cut */
    for (; k < x->n_pieces; n++) {
        size_t head = st_head(n + 1);
        if (head + payload >= cap)
            break;
        size_t left = x->pieces[k].bytes - off, room = cap - head - payload;
        size_t take = left < room ? left : room;
        payload += take;
        if (take < left) {
            off += take;
            n++;
            break;
        }
        k++;
        off = 0;
    }
    dsv4_tp_out o = {.p = s->buf, .cap = st_head(n)};
    dsv4_tp_put_u32(&o, ST_CHUNK_MAGIC);
    dsv4_tp_put_u32(&o, (uint32_t)n);
    sp->batch.n = 0;
    size_t at = st_head(n);
    for (size_t j = 0, pk = x->at_piece, poff = x->at_off; j < n; j++, pk++, poff = 0) {
        const dsv4_tp_piece *p = &x->pieces[pk];
        size_t take = p->bytes - poff;
        if (at + take > st_head(n) + payload)
            take = st_head(n) + payload - at;
        dsv4_tp_put_u32(&o, p->buffer);
        dsv4_tp_put_u64(&o, p->dst_off + poff);
        dsv4_tp_put_u64(&o, take);
        dsv4_tp_batch_add(&sp->batch, s->buf + at,
                          sp->local->buffers[p->buffer].base + p->src_off + poff, take);
        at += take;
    }
    x->at_piece = k;
    x->at_off = off;
    s->state = TS_GATHERING;
    s->tx = x;
    s->chunk = x->gathered++;
    s->len = at;
    s->hdr = (st_hdr){.cookie = x->cookie, .chunk = s->chunk};
    cudaError_t e = cudaStreamWaitEvent(sp->stream, x->after, 0);
    if (e == cudaSuccess)
        e = dsv4_tp_batch_queue(&sp->batch, sp->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(s->gathered, sp->stream);
    if (e == cudaSuccess)
        return 0;
    sp->snd->host->log(DSV4_LOG_ERROR, ST_SUBJECT, "cannot queue the gather of a chunk (%s)",
                       cudaGetErrorString(e));
    cudaStreamSynchronize(sp->stream); /* what was queued still reads our pages */
    s->state = TS_FREE;
    return -EIO;
}

/* Whether x can still make progress of its own (not cancelled, not failed). */
static bool tx_live(dsv4_ucx_tx *x)
{
    pthread_mutex_lock(&x->sp->snd->mu);
    bool live = !x->cancelled && x->status == 0;
    pthread_mutex_unlock(&x->sp->snd->mu);
    return live;
}

/* Chunks of x's that still use a staging buffer. */
static int tx_in_slots(const dsv4_ucx_tx *x, int state)
{
    int n = 0;
    for (int k = 0; k < ST_SLOTS; k++)
        n += x->sp->slot[k].tx == x && x->sp->slot[k].state == state;
    return n;
}

/* Sends a gathered chunk: one rendezvous active message, the receiver's reply path asked
 * for. */
static void tx_send(dsv4_ucx_speer *sp, tx_slot *s)
{
    ucp_ep_h ep = *sp->ep;
    ucs_status_t err = __atomic_load_n(sp->error, __ATOMIC_ACQUIRE);
    if (!ep || err != UCS_OK) {
        tx_fail(s->tx, -ECONNRESET);
        s->state = TS_FREE;
        return;
    }
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY};
    void *r = ucp_am_send_nbx(ep, ST_AM_CHUNK, &s->hdr, sizeof(s->hdr), s->buf, s->len, &rp);
    if (UCS_PTR_IS_ERR(r)) {
        tx_fail(s->tx, st_errno(UCS_PTR_STATUS(r)));
        s->state = TS_FREE;
    } else if (r == NULL) {
        s->tx->sent++;
        s->state = TS_FREE;
    } else {
        s->req = r;
        s->state = TS_SENDING;
    }
}

/* Moves every transfer of sp on: progress, gathers that finished are sent, sends that
 * finished free their buffer, and the oldest transfer with chunks left cuts the next ones
 * into free buffers (in post order, so a later request never holds buffers an earlier
 * one waits for). */
static void sp_turn(dsv4_ucx_speer *sp)
{
    cudaSetDevice(sp->dev);
    while (ucp_worker_progress(sp->snd->worker) != 0)
        ;
    for (int k = 0; k < ST_SLOTS; k++) {
        tx_slot *s = &sp->slot[k];
        if (s->state == TS_GATHERING) {
            cudaError_t e = cudaEventQuery(s->gathered);
            if (e == cudaErrorNotReady)
                continue;
            if (e != cudaSuccess) {
                sp->snd->host->log(DSV4_LOG_ERROR, ST_SUBJECT, "a gather failed (%s)",
                                   cudaGetErrorString(e));
                tx_fail(s->tx, -EIO);
                s->state = TS_FREE;
            } else if (!tx_live(s->tx)) {
                s->state = TS_FREE; /* cancelled or failed: not sent */
            } else {
                tx_send(sp, s);
            }
        } else if (s->state == TS_SENDING) {
            ucs_status_t us = ucp_request_check_status(s->req);
            if (us == UCS_INPROGRESS)
                continue;
            ucp_request_free(s->req);
            s->req = NULL;
            if (us == UCS_OK)
                s->tx->sent++;
            else
                tx_fail(s->tx, st_errno(us));
            s->state = TS_FREE;
        }
    }
    for (dsv4_ucx_tx *x = sp->head; x; x = x->next) {
        if (!tx_live(x) || x->at_piece >= x->n_pieces)
            continue;
        for (int k = 0; k < ST_SLOTS && x->at_piece < x->n_pieces; k++)
            if (sp->slot[k].state == TS_FREE && tx_gather(x, &sp->slot[k]) != 0)
                tx_fail(x, -EIO);
        break;
    }
}

int dsv4_ucx_tx_post(dsv4_ucx_speer *sp, const dsv4_xfer_req *req, dsv4_ucx_tx **tx_p)
{
    if (!*sp->ep || __atomic_load_n(sp->error, __ATOMIC_ACQUIRE) != UCS_OK)
        return -ECONNRESET;
    int rc = dsv4_tp_check_req(req, sp->local, &sp->t);
    if (rc != 0)
        return rc;
    size_t n = dsv4_tp_pieces(sp->local, req, NULL, 0);
    if (n > sp->batch.cap) {
        /* a chunk holds at most every piece of its request */
        dsv4_tp_batch_free(&sp->batch);
        if (dsv4_tp_batch_init(&sp->batch, n) != 0)
            return -ENOMEM;
    }
    dsv4_ucx_tx *x = calloc(1, sizeof(*x));
    dsv4_tp_piece *pieces = malloc((n ? n : 1) * sizeof(*pieces));
    if (!x || !pieces) {
        free(x);
        free(pieces);
        return -ENOMEM;
    }
    dsv4_tp_pieces(sp->local, req, pieces, n);
    *x = (dsv4_ucx_tx){.sp = sp, .pieces = pieces, .n_pieces = n};
    /* the gathers read what the forward queued on the compute stream before this post */
    cudaError_t e = cudaSetDevice(sp->dev);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&x->after, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(x->after, (cudaStream_t)sp->snd->host->cuda_stream);
    if (e != cudaSuccess) {
        sp->snd->host->log(DSV4_LOG_ERROR, ST_SUBJECT,
                           "cannot order lease %llu.%llu after the compute stream (%s)",
                           (unsigned long long)req->room, (unsigned long long)req->generation,
                           cudaGetErrorString(e));
        if (x->after)
            cudaEventDestroy(x->after);
        free(pieces);
        free(x);
        return -EIO;
    }
    dsv4_ucx_sender *snd = sp->snd;
    pthread_mutex_lock(&snd->mu);
    x->cookie = snd->next_cookie++;
    x->live_next = snd->live;
    snd->live = x;
    pthread_mutex_unlock(&snd->mu);
    *sp->tail = x;
    sp->tail = &x->next;
    sp_turn(sp);
    *tx_p = x;
    return 0;
}

/* Acknowledged chunks and the status, read under the lock the ack handler takes. */
static void tx_counts(dsv4_ucx_tx *x, uint32_t *acked_p, int *status_p)
{
    pthread_mutex_lock(&x->sp->snd->mu);
    *acked_p = x->acked;
    *status_p = x->status;
    pthread_mutex_unlock(&x->sp->snd->mu);
}

int dsv4_ucx_tx_poll(dsv4_ucx_tx *x)
{
    sp_turn(x->sp);
    uint32_t acked;
    int status;
    tx_counts(x, &acked, &status);
    if (status != 0)
        return status;
    if (x->at_piece >= x->n_pieces && acked == x->gathered)
        return 0;
    if (__atomic_load_n(x->sp->error, __ATOMIC_ACQUIRE) != UCS_OK || !*x->sp->ep)
        return -ECONNRESET; /* the peer is gone: no ack will come */
    return -EAGAIN;
}

int dsv4_ucx_tx_cancel(dsv4_ucx_tx *x)
{
    dsv4_ucx_speer *sp = x->sp;
    pthread_mutex_lock(&sp->snd->mu);
    x->cancelled = true;
    pthread_mutex_unlock(&sp->snd->mu);
    sp_turn(sp);
    if (tx_in_slots(x, TS_GATHERING) > 0)
        return -EAGAIN; /* our pages are still being read */
    uint32_t acked;
    int status;
    tx_counts(x, &acked, &status);
    /* a chunk still sending or sent and not acknowledged may still be scattered */
    bool open = tx_in_slots(x, TS_SENDING) > 0 || acked < x->sent;
    if (!open || __atomic_load_n(sp->error, __ATOMIC_ACQUIRE) != UCS_OK || !*sp->ep)
        return open && tx_in_slots(x, TS_SENDING) > 0 ? -EAGAIN : 0;
    uint64_t now = sp->snd->host->now_ns();
    if (x->drain_since == 0)
        x->drain_since = now;
    if (now - x->drain_since < DSV4_UCX_DRAIN_NS)
        return -EAGAIN;
    /* silent for the whole bound: the endpoint goes, and whatever it still had with it */
    sp->snd->host->log(DSV4_LOG_WARN, ST_SUBJECT,
                       "the peer did not acknowledge a cancelled transfer within %d s: closing "
                       "its endpoint",
                       DSV4_UCX_DRAIN_SECONDS);
    ucp_ep_h ep = *sp->ep;
    *sp->ep = NULL;
    dsv4_ucx_ep_close(sp->snd->worker, sp->snd->host, ep, true);
    sp_turn(sp);
    return tx_in_slots(x, TS_SENDING) > 0 ? -EAGAIN : 0;
}

void dsv4_ucx_tx_release(dsv4_ucx_tx *x)
{
    dsv4_ucx_speer *sp = x->sp;
    dsv4_ucx_sender *snd = sp->snd;
    pthread_mutex_lock(&snd->mu);
    x->cancelled = true;
    for (dsv4_ucx_tx **pp = &snd->live; *pp; pp = &(*pp)->live_next)
        if (*pp == x) {
            *pp = x->live_next;
            break;
        }
    pthread_mutex_unlock(&snd->mu);
    /* released early: the buffers it holds finish first (a gather reads our pages, a send
     * reads the buffer) */
    cudaSetDevice(sp->dev);
    for (int k = 0; k < ST_SLOTS; k++) {
        tx_slot *s = &sp->slot[k];
        if (s->tx != x)
            continue;
        if (s->state == TS_GATHERING)
            cudaEventSynchronize(s->gathered);
        if (s->state == TS_SENDING) {
            uint64_t end = snd->host->now_ns() + DSV4_UCX_DRAIN_NS;
            while (ucp_request_check_status(s->req) == UCS_INPROGRESS && snd->host->now_ns() < end)
                ucp_worker_progress(snd->worker);
            if (ucp_request_check_status(s->req) == UCS_INPROGRESS && *sp->ep) {
                ucp_ep_h ep = *sp->ep;
                *sp->ep = NULL;
                dsv4_ucx_ep_close(snd->worker, snd->host, ep, true);
            }
            ucp_request_free(s->req);
            s->req = NULL;
        }
        s->state = TS_FREE;
        s->tx = NULL;
    }
    for (dsv4_ucx_tx **pp = &sp->head; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            if (!*pp)
                sp->tail = pp;
            break;
        }
    cudaEventDestroy(x->after);
    free(x->pieces);
    free(x);
}

void dsv4_ucx_speer_close(dsv4_ucx_speer *sp)
{
    while (sp->head)
        dsv4_ucx_tx_release(sp->head);
    cudaSetDevice(sp->dev);
    cudaStreamSynchronize(sp->stream);
    sp_free(sp);
}
