/* common.c: the copy engine the hostcache plugins share (common.h): memcpy layer by layer
 * on host layouts, the CUDA engine of cuda.h on device layouts in CUDA memory. */
#include "config.h"

#include "plugins/hostcache/common.h"
#include "plugins/hostcache/cuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const dsv4_hc_policy_names[] = {"write_through", "write_through_selective",
                                            "write_back", NULL};

typedef struct dsv4_hc_op {
    bool load;  /* host -> device (else device -> host) */
    bool paged; /* pages (else state blocks) */
    dsv4_page_copy *copies;
    size_t n;
    pthread_mutex_t mu;
    pthread_cond_t landed_cv;
    uint32_t landed; /* layers copied so far, under mu (host layouts) */
    struct dsv4_hc_op *next;
    dsv4_hc_cuda_op *cuda; /* the op's events on the copy stream (CUDA layouts) */
} dsv4_hc_op;

typedef struct dsv4_hc_state {
    dsv4_hc_mode mode;
    const char *subject;
    const dsv4_host *host;
    int64_t delay_ms;
    const dsv4_kv_layout *dev, *hst;
    dsv4_hc_cuda *cuda; /* the copy engine when the device layout is in CUDA memory */
    /* async on host layouts: the worker and its FIFO of ops */
    pthread_t worker;
    bool worker_started;
    pthread_mutex_t mu;
    pthread_cond_t queue_cv;
    dsv4_hc_op *head, *tail;
    bool stop;
} dsv4_hc_state;

/* Copy one layer of op: every buffer of that layer of the op's kind (paged or state),
 * every block in the list. Layouts were checked to list the same buffers in the same
 * order, so buffer i of the device is buffer i of the host. */
static void dsv4_hc_copy_layer(const dsv4_hc_state *s, const dsv4_hc_op *op, uint32_t layer)
{
    for (uint32_t i = 0; i < s->dev->n_buffers; i++) {
        const dsv4_kv_buffer *d = &s->dev->buffers[i], *h = &s->hst->buffers[i];
        if (d->layer != layer || dsv4_buf_is_paged(d->kind) != op->paged)
            continue;
        for (size_t c = 0; c < op->n; c++) {
            uint8_t *dp = d->base + (size_t)op->copies[c].device_page * d->block_bytes;
            uint8_t *hp = h->base + (size_t)op->copies[c].host_page * h->block_bytes;
            if (op->load)
                memcpy(dp, hp, d->block_bytes);
            else
                memcpy(hp, dp, d->block_bytes);
        }
    }
}

static void dsv4_hc_sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void dsv4_hc_run(const dsv4_hc_state *s, dsv4_hc_op *op)
{
    /* read before the first layer is published: once the last one is, the waiter may go
     * on to change or free what it attached */
    uint32_t n_layers = s->dev->n_layers;
    for (uint32_t l = 0; l < n_layers; l++) {
        /* the test-only delay holds each layer of a load back, so the forward reaches
         * the layer before its copy has landed and the fence has to wait */
        if (op->load && s->delay_ms > 0)
            dsv4_hc_sleep_ms(s->delay_ms);
        dsv4_hc_copy_layer(s, op, l);
        pthread_mutex_lock(&op->mu);
        op->landed = l + 1;
        pthread_cond_broadcast(&op->landed_cv);
        pthread_mutex_unlock(&op->mu);
    }
}

static void *dsv4_hc_worker(void *arg)
{
    dsv4_hc_state *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&s->queue_cv, &s->mu);
        if (!s->head)
            break;
        dsv4_hc_op *op = s->head;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        dsv4_hc_run(s, op);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int dsv4_hc_init(dsv4_hc_mode mode, const char *subject, const dsv4_host *host, const void *config,
                 void **state_p, char *err, size_t errlen)
{
    dsv4_hc_state *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    s->mode = mode;
    s->subject = subject;
    s->host = host;
    if (mode != DSV4_HC_SYNC)
        s->delay_ms = ((const dsv4_hc_delay_config *)config)->inject_delay_ms;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->queue_cv, NULL);
    if (mode != DSV4_HC_SYNC) {
        int rc = pthread_create(&s->worker, NULL, dsv4_hc_worker, s);
        if (rc != 0) {
            snprintf(err, errlen, "cannot start the copy worker (%s)", strerror(rc));
            dsv4_hc_fini(s);
            return -rc;
        }
        s->worker_started = true;
    }
    if (s->delay_ms > 0)
        host->log(DSV4_LOG_WARN, subject, "inject_delay = %lldms: loads are slowed for a test",
                  (long long)s->delay_ms);
    *state_p = s;
    return 0;
}

void dsv4_hc_fini(void *state)
{
    dsv4_hc_state *s = state;
    if (!s)
        return;
    dsv4_hc_cuda_detach(s->cuda);
    if (s->worker_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->queue_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->worker, NULL);
    }
    pthread_cond_destroy(&s->queue_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int dsv4_hc_attach(void *state, const dsv4_kv_layout *device, const dsv4_kv_layout *host)
{
    dsv4_hc_state *s = state;
    bool same = device->n_buffers == host->n_buffers && device->n_layers == host->n_layers;
    for (uint32_t i = 0; same && i < device->n_buffers; i++) {
        const dsv4_kv_buffer *d = &device->buffers[i], *h = &host->buffers[i];
        same = d->kind == h->kind && d->layer == h->layer && d->block_bytes == h->block_bytes;
    }
    if (!same) {
        s->host->log(DSV4_LOG_ERROR, s->subject,
                     "attach refused: host layout does not mirror the device buffer table "
                     "(%u vs %u buffers)",
                     host->n_buffers, device->n_buffers);
        return -EINVAL;
    }
    bool on_cuda = false;
    for (uint32_t i = 0; i < device->n_buffers; i++)
        on_cuda = on_cuda || device->buffers[i].mem == DSV4_MEM_CUDA;
    dsv4_hc_cuda_detach(s->cuda);
    s->cuda = NULL;
    s->dev = NULL;
    if (on_cuda) {
        int rc = dsv4_hc_cuda_attach(s->host, s->subject, device, host, &s->delay_ms, &s->cuda);
        if (rc != 0)
            return rc;
    }
    s->dev = device;
    s->hst = host;
    return 0;
}

/* Start an op: check every id against both layouts, copy the list, then run it (sync)
 * or queue it for the worker. */
static int dsv4_hc_start(dsv4_hc_state *s, bool load, bool paged, const dsv4_page_copy *copies,
                         size_t n, void **op_p)
{
    if (!s->dev)
        return -EINVAL;
    uint32_t dev_n = paged ? s->dev->n_pages : s->dev->n_state_slots;
    uint32_t hst_n = paged ? s->hst->n_pages : s->hst->n_state_slots;
    for (size_t i = 0; i < n; i++)
        if (copies[i].device_page >= dev_n || copies[i].host_page >= hst_n) {
            s->host->log(DSV4_LOG_ERROR, s->subject, "%s refused: %s %u -> %u out of range",
                         load ? "load" : "save", paged ? "page" : "state block",
                         load ? copies[i].host_page : copies[i].device_page,
                         load ? copies[i].device_page : copies[i].host_page);
            return -EINVAL;
        }
    dsv4_hc_op *op = calloc(1, sizeof(*op));
    if (!op || !(op->copies = malloc((n ? n : 1) * sizeof(*copies)))) {
        free(op);
        return -ENOMEM;
    }
    memcpy(op->copies, copies, n * sizeof(*copies));
    op->n = n;
    op->load = load;
    op->paged = paged;
    pthread_mutex_init(&op->mu, NULL);
    pthread_cond_init(&op->landed_cv, NULL);
    if (s->cuda) {
        /* the copy stream is the queue: every layer is queued now, the events say when
         * each has landed; sync waits for the last one before returning */
        int rc = dsv4_hc_cuda_start(s->cuda, load, paged, copies, n, &op->cuda);
        if (rc == 0 && s->mode == DSV4_HC_SYNC && s->dev->n_layers > 0)
            rc = dsv4_hc_cuda_wait(s->cuda, op->cuda, s->dev->n_layers - 1);
        if (rc != 0) {
            dsv4_hc_release(s, op);
            return rc;
        }
    } else if (s->mode == DSV4_HC_SYNC) {
        dsv4_hc_run(s, op);
    } else {
        pthread_mutex_lock(&s->mu);
        if (s->tail)
            s->tail->next = op;
        else
            s->head = op;
        s->tail = op;
        pthread_cond_signal(&s->queue_cv);
        pthread_mutex_unlock(&s->mu);
    }
    *op_p = op;
    return 0;
}

int dsv4_hc_save(void *state, const dsv4_page_copy *pages, size_t n, void **op_p)
{
    return dsv4_hc_start(state, false, true, pages, n, op_p);
}

int dsv4_hc_load(void *state, const dsv4_page_copy *pages, size_t n, void **op_p)
{
    return dsv4_hc_start(state, true, true, pages, n, op_p);
}

int dsv4_hc_save_state(void *state, const dsv4_page_copy *slots, size_t n, void **op_p)
{
    return dsv4_hc_start(state, false, false, slots, n, op_p);
}

int dsv4_hc_load_state(void *state, const dsv4_page_copy *slots, size_t n, void **op_p)
{
    return dsv4_hc_start(state, true, false, slots, n, op_p);
}

/* Block until op has copied `layers` layers. */
static void dsv4_hc_wait_landed(dsv4_hc_op *op, uint32_t layers)
{
    pthread_mutex_lock(&op->mu);
    while (op->landed < layers)
        pthread_cond_wait(&op->landed_cv, &op->mu);
    pthread_mutex_unlock(&op->mu);
}

int dsv4_hc_wait_layer(void *state, void *op, uint32_t layer)
{
    dsv4_hc_state *s = state;
    if (!op || layer >= s->dev->n_layers)
        return -EINVAL;
    /* The negative control: it claims the layer has landed without waiting, the bug
     * the fence exists to prevent (tests/unit/t-hostcache-unfenced-load-is-detected). */
    if (s->mode == DSV4_HC_UNFENCED)
        return 0;
    dsv4_hc_op *o = op;
    if (o->cuda)
        return dsv4_hc_cuda_wait(s->cuda, o->cuda, layer);
    dsv4_hc_wait_landed(o, layer + 1);
    return 0;
}

int dsv4_hc_stream_wait_layer(void *state, void *op, uint32_t layer, void *stream)
{
    dsv4_hc_state *s = state;
    dsv4_hc_op *o = op;
    if (!o || layer >= s->dev->n_layers)
        return -EINVAL;
    if (!o->cuda)
        return dsv4_hc_wait_layer(state, op, layer);
    /* the negative control orders nothing, as its wait_layer waits for nothing */
    if (s->mode == DSV4_HC_UNFENCED)
        return 0;
    return dsv4_hc_cuda_stream_wait(s->cuda, o->cuda, layer, stream);
}

int dsv4_hc_poll(void *state, void *op)
{
    dsv4_hc_state *s = state;
    dsv4_hc_op *o = op;
    if (!o)
        return -EINVAL;
    if (o->cuda)
        return dsv4_hc_cuda_poll(s->cuda, o->cuda);
    pthread_mutex_lock(&o->mu);
    bool done = o->landed == s->dev->n_layers;
    pthread_mutex_unlock(&o->mu);
    return done ? 0 : -EAGAIN;
}

void dsv4_hc_release(void *state, void *op)
{
    dsv4_hc_state *s = state;
    dsv4_hc_op *o = op;
    if (!o)
        return;
    /* the worker or the copy stream may still be copying: free only once it is done
     * with the op */
    if (o->cuda)
        dsv4_hc_cuda_op_free(s->cuda, o->cuda);
    else if (!s->cuda) /* (with a copy engine, an op without events never started) */
        dsv4_hc_wait_landed(o, s->dev->n_layers);
    pthread_cond_destroy(&o->landed_cv);
    pthread_mutex_destroy(&o->mu);
    free(o->copies);
    free(o);
}
