/* nccl-pair.c: two processes joined as the PD code joins them, for the transport/nccl and
 * transport/ucx device tests and benches (nccl-pair.h). */
#include "config.h"

#include "tests/gpu/nccl-pair.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        bail_out("rank: %s failed (%s)", what, cudaGetErrorString(e));
}

int nccl_pair_gpus(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        bail_out("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess)
            n = 0;
        ssize_t w = write(fds[1], &n, sizeof(n));
        _exit(w == sizeof(n) ? 0 : 1);
    }
    int n = 0;
    close(fds[1]);
    if (pid < 0 || read(fds[0], &n, sizeof(n)) != sizeof(n))
        n = 0;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return n;
}

double nccl_pair_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint8_t nccl_pair_byte(uint32_t i, uint32_t block, size_t o)
{
    return (uint8_t)((i * 131u + block * 31u + (uint32_t)o * 7u + (uint32_t)(o >> 8)) ^ 0x5au);
}

/* The buffers of a sliding, a CSA and an HCA layer, repeated: block sizes of fp8 KV rows
 * (584 B) and fp8 index-K pages at the flash geometry. */
static void layout_make(nccl_pair *p, uint32_t n_layers, uint32_t n_pages, uint32_t n_slots)
{
    static const struct {
        uint8_t kind;
        size_t bytes;
    } per[3][5] = {
        {{DSV4_BUF_WINDOW, 74752}},
        {{DSV4_BUF_CSA_KV, 37376},
         {DSV4_BUF_INDEXK, 8448},
         {DSV4_BUF_WINDOW, 74752},
         {DSV4_BUF_CSA_CARRY, 4096},
         {DSV4_BUF_INDEX_CARRY, 4096}},
        {{DSV4_BUF_HCA_KV, 1168}, {DSV4_BUF_WINDOW, 74752}, {DSV4_BUF_HCA_CARRY, 2048}},
    };
    uint32_t n = 0;
    for (uint32_t layer = 0; layer < n_layers; layer++) {
        uint32_t k = layer % 3;
        p->kinds[layer] = (uint8_t)(k == 0   ? DSV4_LAYER_SLIDING
                                    : k == 1 ? DSV4_LAYER_CSA
                                             : DSV4_LAYER_HCA);
        for (int j = 0; j < 5 && per[k][j].bytes; j++) {
            if (n == NCCL_PAIR_MAX_BUFS)
                bail_out("too many buffers for %u layers", n_layers);
            bool paged = dsv4_buf_is_paged(per[k][j].kind);
            p->b[n++] = (dsv4_kv_buffer){.kind = per[k][j].kind,
                                         .layer = layer,
                                         .mem = DSV4_MEM_CUDA,
                                         .cuda_device = p->dev,
                                         .block_bytes = per[k][j].bytes,
                                         .n_blocks = paged ? n_pages : n_slots};
        }
    }
    p->l = (dsv4_kv_layout){.struct_size = sizeof(p->l),
                            .page_tokens = 256,
                            .n_pages = n_pages,
                            .n_state_slots = n_slots,
                            .n_layers = n_layers,
                            .layer_kind = p->kinds,
                            .kv_dtype = DSV4_KV_FP8,
                            .indexk = "fp8",
                            .index_dim = 128,
                            .n_buffers = n,
                            .buffers = p->b,
                            .shm_fd = -1};
}

static void layout_alloc(nccl_pair *p, bool fill)
{
    for (uint32_t i = 0; i < p->l.n_buffers; i++) {
        dsv4_kv_buffer *b = &p->b[i];
        size_t bytes = b->block_bytes * b->n_blocks;
        cuda_ok(cudaMalloc((void **)&b->base, bytes), "cudaMalloc");
        cuda_ok(cudaMemset(b->base, 0, bytes), "cudaMemset");
        if (!fill)
            continue;
        uint8_t *h = malloc(bytes);
        if (!h)
            bail_out("out of memory");
        for (uint32_t k = 0; k < b->n_blocks; k++)
            for (size_t o = 0; o < b->block_bytes; o++)
                h[(size_t)k * b->block_bytes + o] = nccl_pair_byte(i, k, o);
        cuda_ok(cudaMemcpy(b->base, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        free(h);
    }
}

void nccl_pair_start(nccl_pair *p, int dev0, int dev1, uint32_t n_layers, uint32_t n_pages,
                     uint32_t n_slots, bool fill)
{
    nccl_pair_start_with(p, "nccl", NULL, NULL, dev0, dev1, n_layers, n_pages, n_slots, fill);
}

void nccl_pair_start_with(nccl_pair *p, const char *plugin, const char *key, const char *value,
                          int dev0, int dev1, uint32_t n_layers, uint32_t n_pages, uint32_t n_slots,
                          bool fill)
{
    int sv[2];
    memset(p, 0, sizeof(*p));
    fflush(stdout);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        bail_out("socketpair: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bail_out("fork: %s", strerror(errno));
    p->rank = pid == 0 ? 1 : 0;
    p->pid = (int)pid;
    p->fd = sv[p->rank];
    close(sv[1 - p->rank]);
    p->dev = p->rank == 0 ? dev0 : dev1;
    cuda_ok(cudaSetDevice(p->dev), "cudaSetDevice");
    layout_make(p, n_layers, n_pages, n_slots);
    layout_alloc(p, fill && p->rank == 0);
    p->desc = plugtest_open("transport", plugin);
    p->ops = p->desc->ops;
    p->conf = plugtest_config(p->desc, key, value, NULL);
    p->state = plugtest_init(p->desc, p->conf);
}

static void io_all(int fd, void *buf, size_t n, bool out)
{
    uint8_t *b = buf;
    while (n > 0) {
        ssize_t k = out ? write(fd, b, n) : read(fd, b, n);
        if (k <= 0)
            bail_out("control channel: %s", k == 0 ? "closed" : strerror(errno));
        b += k;
        n -= (size_t)k;
    }
}

void nccl_pair_send(nccl_pair *p, char tag, const void *m, uint32_t len)
{
    io_all(p->fd, &tag, 1, true);
    io_all(p->fd, &len, sizeof(len), true);
    io_all(p->fd, (void *)m, len, true);
}

void *nccl_pair_recv(nccl_pair *p, char tag, uint32_t *len_p)
{
    char got;
    uint32_t len;
    io_all(p->fd, &got, 1, false);
    io_all(p->fd, &len, sizeof(len), false);
    if (got != tag)
        bail_out("control channel: message '%c' where '%c' was expected", got, tag);
    void *m = malloc(len ? len : 1);
    if (!m)
        bail_out("out of memory");
    io_all(p->fd, m, len, false);
    *len_p = len;
    return m;
}

void nccl_pair_connect(nccl_pair *p)
{
    char err[512] = "";
    uint8_t blob[1 << 16];
    size_t len = sizeof(blob);
    uint32_t n;
    if (p->rank == 1) {
        int rc = p->ops->expose(p->state, &p->l, blob, &len);
        if (rc != 0)
            bail_out("expose: %d", rc);
        nccl_pair_send(p, 'E', blob, (uint32_t)len);
        if (!p->ops->bootstrap)
            return; /* one-sided: the receiver has no end of its own */
        void *boot = nccl_pair_recv(p, 'B', &n);
        rc = p->ops->accept(p->state, &p->l, boot, n, &p->peer, err, sizeof(err));
        free(boot);
        if (rc != 0)
            bail_out("accept: %s (%d)", err, rc);
        return;
    }
    void *exposed = nccl_pair_recv(p, 'E', &n);
    int rc = p->ops->attach(p->state, &p->l, exposed, n, &p->peer, err, sizeof(err));
    free(exposed);
    if (rc != 0)
        bail_out("attach: %s (%d)", err, rc);
    if (!p->ops->bootstrap)
        return;
    rc = p->ops->bootstrap(p->state, p->peer, blob, &len);
    if (rc != 0)
        bail_out("bootstrap: %d", rc);
    nccl_pair_send(p, 'B', blob, (uint32_t)len);
}

void nccl_pair_send_req(nccl_pair *p, const dsv4_xfer_req *req)
{
    uint32_t head[4] = {(uint32_t)req->n_runs, req->with_state, req->src_state, req->dst_state};
    size_t n = sizeof(head) + req->n_runs * sizeof(dsv4_xfer_run);
    uint8_t *m = malloc(n);
    if (!m)
        bail_out("out of memory");
    memcpy(m, head, sizeof(head));
    memcpy(m + sizeof(head), req->runs, req->n_runs * sizeof(dsv4_xfer_run));
    nccl_pair_send(p, 'R', m, (uint32_t)n);
    free(m);
}

void nccl_pair_recv_req(nccl_pair *p, dsv4_xfer_req *req_p)
{
    uint32_t n, head[4];
    uint8_t *m = nccl_pair_recv(p, 'R', &n);
    memcpy(head, m, sizeof(head));
    dsv4_xfer_run *runs = malloc(head[0] ? head[0] * sizeof(*runs) : 1);
    if (!runs || n != sizeof(head) + head[0] * sizeof(*runs))
        bail_out("control channel: malformed request");
    memcpy(runs, m + sizeof(head), head[0] * sizeof(*runs));
    free(m);
    *req_p = (dsv4_xfer_req){.struct_size = sizeof(*req_p),
                             .runs = runs,
                             .n_runs = head[0],
                             .with_state = head[1] != 0,
                             .src_state = head[2],
                             .dst_state = head[3]};
}

int nccl_pair_wait(nccl_pair *p, void *xfer, double timeout_s)
{
    double end = nccl_pair_now() + timeout_s;
    int rc;
    while ((rc = p->ops->poll(p->state, xfer)) == -EAGAIN)
        if (nccl_pair_now() > end)
            return -ETIMEDOUT;
    return rc;
}

int nccl_pair_drain(nccl_pair *p, void *xfer, double timeout_s)
{
    double end = nccl_pair_now() + timeout_s;
    while (p->ops->cancel(p->state, xfer) == -EAGAIN) {
        if (nccl_pair_now() > end)
            return -ETIMEDOUT;
        usleep(1000);
    }
    return 0;
}

/* Block `dst` of buffer i against the sender's block `src`. */
static bool block_is(const dsv4_kv_buffer *b, uint32_t i, uint32_t dst, int64_t src, uint8_t *h,
                     char *why, size_t len)
{
    cuda_ok(cudaMemcpy(h, b->base + (size_t)dst * b->block_bytes, b->block_bytes,
                       cudaMemcpyDeviceToHost),
            "cudaMemcpy");
    for (size_t o = 0; o < b->block_bytes; o++) {
        uint8_t want = src < 0 ? 0 : nccl_pair_byte(i, (uint32_t)src, o);
        if (h[o] != want) {
            snprintf(why, len, "buffer %u (kind %u, layer %u) block %u byte %zu: %u, expected %u",
                     i, b->kind, b->layer, dst, o, h[o], want);
            return false;
        }
    }
    return true;
}

bool nccl_pair_check(nccl_pair *p, const dsv4_xfer_req *req, uint32_t untouched, char *why,
                     size_t len)
{
    size_t max = 0;
    for (uint32_t i = 0; i < p->l.n_buffers; i++)
        max = p->b[i].block_bytes > max ? p->b[i].block_bytes : max;
    uint8_t *h = malloc(max);
    bool good = h != NULL;
    for (uint32_t i = 0; good && i < p->l.n_buffers; i++) {
        const dsv4_kv_buffer *b = &p->b[i];
        if (!dsv4_buf_is_paged(b->kind)) {
            good = !req->with_state || block_is(b, i, req->dst_state, req->src_state, h, why, len);
            continue;
        }
        for (size_t r = 0; good && r < req->n_runs; r++)
            for (uint32_t k = 0; good && k < req->runs[r].n_pages; k++)
                good = block_is(b, i, req->runs[r].dst_page + k, req->runs[r].src_page + k, h, why,
                                len);
        good = good && block_is(b, i, untouched, -1, h, why, len);
    }
    free(h);
    return good;
}

uint64_t nccl_pair_bytes(const nccl_pair *p, uint32_t n_pages)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < p->l.n_buffers; i++)
        n += (uint64_t)p->b[i].block_bytes * (dsv4_buf_is_paged(p->b[i].kind) ? n_pages : 1);
    return n;
}

bool nccl_pair_end(nccl_pair *p, int status)
{
    if (p->peer)
        p->ops->detach(p->state, p->peer);
    p->desc->fini(p->state);
    plugtest_config_free(p->desc, p->conf);
    for (uint32_t i = 0; i < p->l.n_buffers; i++)
        cudaFree(p->b[i].base);
    close(p->fd);
    if (p->rank == 1) {
        fflush(stdout);
        _exit(status);
    }
    int ws = 0;
    return waitpid(p->pid, &ws, 0) == p->pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0 &&
           status == 0;
}

dsv4_xfer_req nccl_pair_req(const dsv4_xfer_run *runs, size_t n, bool state, uint32_t s, uint32_t d)
{
    return (dsv4_xfer_req){.struct_size = sizeof(dsv4_xfer_req),
                           .runs = runs,
                           .n_runs = n,
                           .with_state = state,
                           .src_state = s,
                           .dst_state = d};
}
