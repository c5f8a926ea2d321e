/* t-gpu-transport-local-ipc-moves-every-buffer: transport/local between two processes on
 * one GPU over CUDA IPC, driven as the PD code drives it. The receiver (a forked child, as
 * the decode server) exposes a device layout of every buffer kind (tests/gpu/hostcache-kit)
 * set to 0xff; the sender (the prefill server) attaches, posts requests of merged runs
 * with the state slot, of scattered pages listed in reverse and of pages only, polls them
 * to completion, and the receiver verifies every block it was sent by XXH64 against the
 * sender's data, and that a page no run names is still 0xff. A transfer cancelled right
 * after its post has fully landed once cancel returns 0; a post orders after the work the
 * daemon queued on its compute stream before it (a source page rewritten behind a
 * sleeping host function arrives rewritten). A blob naming a GPU this process cannot see
 * and a host-memory pool attaching to a device pool are refused by name. Skips without
 * CUDA or a device. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugins/transport/local_blob.h"
#include "tests/gpu/hostcache-kit.h"
#include "tests/plugin/plugin-harness.h"

#define LAYERS 6
#define PAGES 64
#define SLOTS 4
#define UNTOUCHED (PAGES - 1) /* no request writes this page of the receiver */
#define REWRITTEN 5           /* the ordering check rewrites this source page ... */
#define REWRITTEN_FROM 9      /* ... with the blocks of this one */

typedef struct side {
    int fd;
    hcg_kv kv;
    const dsv4_plugin_desc *desc;
    const dsv4_transport_ops *ops;
    void *conf, *state;
} side;

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        bail_out("%s failed (%s)", what, cudaGetErrorString(e));
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

static void msg_send(int fd, char tag, const void *m, uint32_t len)
{
    io_all(fd, &tag, 1, true);
    io_all(fd, &len, sizeof(len), true);
    io_all(fd, (void *)m, len, true);
}

/* One message of `tag`, malloc'd and NUL-terminated (*len_p its length). */
static void *msg_recv(int fd, char tag, uint32_t *len_p)
{
    char got;
    uint32_t len;
    io_all(fd, &got, 1, false);
    io_all(fd, &len, sizeof(len), false);
    if (got != tag)
        bail_out("control channel: message '%c' where '%c' was expected", got, tag);
    char *m = malloc((size_t)len + 1);
    if (!m)
        bail_out("out of memory");
    io_all(fd, m, len, false);
    m[len] = 0;
    *len_p = len;
    return m;
}

/* Whether a CUDA device of sm_90 or newer answers, asked in a child: CUDA must not be
 * initialised before the fork. */
static bool gpu_answers(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0)
        bail_out("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char m[200] = "";
        int n = 0;
        struct cudaDeviceProp prop;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
            snprintf(m, sizeof(m), "no CUDA device");
        else if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9)
            snprintf(m, sizeof(m), "device 0 is older than sm_90");
        ssize_t w = write(fds[1], m, sizeof(m));
        _exit(w == (ssize_t)sizeof(m) ? 0 : 1);
    }
    close(fds[1]);
    why[0] = 0;
    if (pid < 0 || read(fds[0], why, len) <= 0)
        snprintf(why, len, "cannot ask for a CUDA device");
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return why[0] == 0;
}

static void side_open(side *s, int fd, const dsv4_host *host)
{
    char err[512] = "";
    cuda_ok(cudaSetDevice(0), "cudaSetDevice");
    s->fd = fd;
    /* both processes draw the same reference bytes: the kit's generator is seeded alike */
    hcg_kv_new(&s->kv, LAYERS, PAGES, SLOTS);
    s->desc = plugtest_open("transport", "local");
    s->ops = s->desc->ops;
    s->conf = plugtest_config(s->desc, NULL);
    if (s->desc->init(host, s->conf, &s->state, err, sizeof(err)) != 0)
        bail_out("transport/local init: %s", err);
}

static void side_close(side *s)
{
    s->desc->fini(s->state);
    plugtest_config_free(s->desc, s->conf);
    hcg_kv_free(&s->kv);
    close(s->fd);
}

/* A request on the wire: 1 with the state slot, 2 for the ordering check (no state), 0
 * else; src and dst slot; then the runs. */
static void req_send(int fd, const dsv4_xfer_req *req, bool rewritten)
{
    size_t n = 3 * sizeof(uint32_t) + req->n_runs * sizeof(dsv4_xfer_run);
    uint32_t *m = malloc(n);
    if (!m)
        bail_out("out of memory");
    m[0] = rewritten ? 2 : req->with_state;
    m[1] = req->src_state;
    m[2] = req->dst_state;
    memcpy(m + 3, req->runs, req->n_runs * sizeof(dsv4_xfer_run));
    msg_send(fd, 'C', m, (uint32_t)n);
    free(m);
}

/* ---- the receiver (decode) ------------------------------------------------------------ */

/* The blocks a request wrote hold the sender's reference blocks; UNTOUCHED is still 0xff.
 * "" or what differs. */
static void verify(side *s, const uint32_t *m, uint32_t len, char *why, size_t whylen)
{
    const dsv4_xfer_run *runs = (const dsv4_xfer_run *)(m + 3);
    size_t n_runs = (len - 3 * sizeof(uint32_t)) / sizeof(dsv4_xfer_run);
    uint32_t n = 0, *dst = malloc(PAGES * sizeof(uint32_t)),
             *src = malloc(PAGES * sizeof(uint32_t));
    if (!dst || !src)
        bail_out("out of memory");
    for (size_t r = 0; r < n_runs; r++)
        for (uint32_t k = 0; k < runs[r].n_pages && n < PAGES; k++, n++) {
            dst[n] = runs[r].dst_page + k;
            src[n] = runs[r].src_page + k;
        }
    /* the ordering check's source page held REWRITTEN_FROM's bytes when it was sent */
    for (uint32_t k = 0; k < n && m[0] == 2; k++)
        if (src[k] == REWRITTEN)
            src[k] = REWRITTEN_FROM;
    cudaStream_t st;
    cuda_ok(cudaStreamCreate(&st), "cudaStreamCreate");
    hcg_check *pages = hcg_check_new(&s->kv, true, HCG_ALL_LAYERS, dst, src, n);
    hcg_check_queue(pages, st);
    unsigned bad = hcg_check_mismatches(pages, st), bad_state = 0;
    uint32_t blocks = hcg_check_blocks(pages);
    hcg_check_free(pages);
    if (m[0] == 1) {
        hcg_check *state = hcg_check_new(&s->kv, false, HCG_ALL_LAYERS, &m[2], &m[1], 1);
        hcg_check_queue(state, st);
        bad_state = hcg_check_mismatches(state, st);
        blocks += hcg_check_blocks(state);
        hcg_check_free(state);
    }
    cuda_ok(cudaStreamDestroy(st), "cudaStreamDestroy");
    unsigned scribbled = 0;
    for (uint32_t i = 0; i < s->kv.lay.n_buffers; i++) {
        const dsv4_kv_buffer *b = &s->kv.buf[i];
        if (!dsv4_buf_is_paged(b->kind))
            continue;
        uint8_t *h = malloc(b->block_bytes);
        if (!h)
            bail_out("out of memory");
        gpu_get(h, b->base + (size_t)UNTOUCHED * b->block_bytes, b->block_bytes);
        for (size_t o = 0; o < b->block_bytes; o++)
            scribbled += h[o] != 0xff;
        free(h);
    }
    snprintf(why, whylen,
             "%u of %u blocks differ from the sender's, state %u, %u bytes of the "
             "untouched page changed",
             bad + bad_state, blocks, bad_state, scribbled);
    if (bad + bad_state + scribbled == 0 && blocks > 0)
        why[0] = 0;
    free(dst);
    free(src);
}

static void receiver(int fd)
{
    side s = {0};
    side_open(&s, fd, plugtest_host());
    uint32_t all[PAGES];
    for (uint32_t k = 0; k < PAGES; k++)
        all[k] = k;
    hcg_scribble(&s.kv, true, all, PAGES);
    hcg_scribble(&s.kv, false, all, SLOTS);
    uint8_t blob[1 << 16];
    size_t len = sizeof(blob);
    int rc = s.ops->expose(s.state, &s.kv.lay, blob, &len);
    if (rc != 0)
        bail_out("expose: %d", rc);
    msg_send(fd, 'E', blob, (uint32_t)len);
    for (;;) {
        char tag;
        uint32_t n;
        io_all(fd, &tag, 1, false);
        if (tag == 'Q')
            break;
        io_all(fd, &n, sizeof(n), false);
        uint32_t *m = malloc(n ? n : 1);
        if (!m)
            bail_out("out of memory");
        io_all(fd, m, n, false);
        char why[256];
        verify(&s, m, n, why, sizeof(why));
        msg_send(fd, 'V', why, (uint32_t)strlen(why));
        free(m);
    }
    side_close(&s);
    fflush(stdout);
    _exit(0);
}

/* ---- the sender (prefill) ----------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int wait_done(side *s, void *x)
{
    double end = now_s() + 60;
    int rc;
    while ((rc = s->ops->poll(s->state, x)) == -EAGAIN)
        if (now_s() > end)
            return -ETIMEDOUT;
    return rc;
}

/* The receiver's verdict on the request just sent. */
static void verdict(side *s, const dsv4_xfer_req *req, const char *what)
{
    req_send(s->fd, req, false);
    uint32_t n;
    char *why = msg_recv(s->fd, 'V', &n);
    ok(why[0] == 0, "%s land in every buffer%s%s", what, why[0] ? ": " : "", why);
    free(why);
}

static dsv4_xfer_req req_of(const dsv4_xfer_run *runs, size_t n, bool state, uint32_t src,
                            uint32_t dst)
{
    return (dsv4_xfer_req){.struct_size = sizeof(dsv4_xfer_req),
                           .room = 1,
                           .generation = 1,
                           .runs = runs,
                           .n_runs = n,
                           .with_state = state,
                           .src_state = src,
                           .dst_state = dst};
}

static void move(side *s, void *peer, const dsv4_xfer_req *req, const char *what)
{
    void *x = NULL;
    int rc = s->ops->post(s->state, peer, req, &x);
    if (rc == 0)
        rc = wait_done(s, x);
    if (!ok(rc == 0, "%s: posted and polled to completion", what))
        diag("post/poll: %d", rc);
    if (x)
        s->ops->release(s->state, x);
    verdict(s, req, what);
}

/* The blob with one byte of the GPU's UUID changed: a GPU this process cannot see. */
static size_t foreign_gpu(const side *s, const uint8_t *blob, size_t len, uint8_t *out, size_t cap)
{
    char err[256];
    dsv4_local_blob b;
    if (dsv4_local_blob_decode(blob, len, &s->kv.lay, &b, err, sizeof(err)) != 0)
        bail_out("the receiver's blob does not decode: %s", err);
    b.uuid[0] ^= 0xa5;
    b.uuid[15] ^= 0x5a;
    size_t n = cap;
    if (dsv4_local_blob_encode(&s->kv.lay, &b, out, &n) != 0)
        bail_out("cannot re-encode the blob");
    dsv4_local_blob_clear(&b);
    return n;
}

static void sleep_100ms(void *arg)
{
    (void)arg;
    usleep(100000);
}

static void sender(int fd, pid_t child)
{
    cuda_ok(cudaSetDevice(0), "cudaSetDevice");
    cudaStream_t compute;
    cuda_ok(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "cudaStreamCreate");
    side s = {0};
    side_open(&s, fd, hcg_host(compute));
    uint32_t len;
    uint8_t *blob = msg_recv(fd, 'E', &len);
    char err[512] = "";
    void *peer = NULL;

    uint8_t other[1 << 16];
    size_t other_len = foreign_gpu(&s, blob, len, other, sizeof(other));
    void *bad_peer = NULL;
    int rc = s.ops->attach(s.state, &s.kv.lay, other, other_len, &bad_peer, err, sizeof(err));
    ok(rc == DSV4_EPEER && strstr(err, "is not visible to this process"),
       "a blob naming a GPU this process cannot see is refused: %s", err);

    dsv4_kv_buffer host_bufs[HCG_MAX_BUFFERS];
    dsv4_kv_layout host_lay = s.kv.lay;
    for (uint32_t i = 0; i < s.kv.lay.n_buffers; i++) {
        host_bufs[i] = s.kv.buf[i];
        host_bufs[i].mem = DSV4_MEM_HOST;
        host_bufs[i].cuda_device = -1;
    }
    host_lay.buffers = host_bufs;
    err[0] = 0;
    rc = s.ops->attach(s.state, &host_lay, blob, len, &bad_peer, err, sizeof(err));
    ok(rc == DSV4_EPEER && strstr(err, "the peer's pool is in device memory, ours in host memory"),
       "a host pool attaching to a device pool is refused: %s", err);

    rc = s.ops->attach(s.state, &s.kv.lay, blob, len, &peer, err, sizeof(err));
    if (!ok(rc == 0, "the sender attaches to the receiver's device pool over CUDA IPC"))
        bail_out("attach: %s (%d)", err, rc);
    free(blob);

    static const dsv4_xfer_run merged[] = {{0, 10, 20}, {40, 30, 3}};
    static const dsv4_xfer_run scattered[] = {{50, 3, 1}, {45, 7, 1}, {30, 50, 5}, {22, 60, 2}};
    static const dsv4_xfer_run pages[] = {{1, 55, 4}};
    dsv4_xfer_req req = req_of(merged, 2, true, 1, 2);
    move(&s, peer, &req, "merged runs and the state slot");
    req = req_of(scattered, 4, false, 0, 0);
    move(&s, peer, &req, "scattered pages listed in reverse");
    req = req_of(pages, 1, true, 3, 0);
    move(&s, peer, &req, "pages and another state slot");

    static const dsv4_xfer_run all[] = {{0, 0, PAGES - 1}};
    req = req_of(all, 1, true, 0, 3);
    void *x = NULL;
    rc = s.ops->post(s.state, peer, &req, &x);
    int cancelled = rc == 0 ? s.ops->cancel(s.state, x) : rc;
    ok(cancelled == 0 && s.ops->poll(s.state, x) == 0,
       "cancel right after a post returns 0 once the transfer is over (%d)", cancelled);
    if (x)
        s.ops->release(s.state, x);
    verdict(&s, &req, "a cancelled transfer's pages, all of them");

    /* The compute stream sleeps, then rewrites source page REWRITTEN with REWRITTEN_FROM's
     * blocks; the post queued after that must carry the rewritten page. */
    cuda_ok(cudaLaunchHostFunc(compute, sleep_100ms, NULL), "cudaLaunchHostFunc");
    for (uint32_t i = 0; i < s.kv.lay.n_buffers; i++) {
        const dsv4_kv_buffer *b = &s.kv.buf[i];
        if (dsv4_buf_is_paged(b->kind))
            cuda_ok(cudaMemcpyAsync(b->base + (size_t)REWRITTEN * b->block_bytes,
                                    b->base + (size_t)REWRITTEN_FROM * b->block_bytes,
                                    b->block_bytes, cudaMemcpyDeviceToDevice, compute),
                    "cudaMemcpyAsync");
    }
    static const dsv4_xfer_run rewritten[] = {{REWRITTEN, 20, 1}};
    req = req_of(rewritten, 1, false, 0, 0);
    x = NULL;
    rc = s.ops->post(s.state, peer, &req, &x);
    if (rc == 0)
        rc = wait_done(&s, x);
    ok(rc == 0, "a post behind work on the compute stream completes (%d)", rc);
    if (x)
        s.ops->release(s.state, x);
    req_send(fd, &req, true); /* the receiver expects REWRITTEN_FROM's bytes */
    uint32_t n;
    char *why = msg_recv(fd, 'V', &n);
    ok(why[0] == 0, "the post waited for the compute stream: the rewritten page arrived%s%s",
       why[0] ? ": " : "", why);
    free(why);

    msg_send(fd, 'Q', NULL, 0);
    s.ops->detach(s.state, peer);
    side_close(&s);
    cuda_ok(cudaStreamDestroy(compute), "cudaStreamDestroy");
    int ws = 0;
    ok(waitpid(child, &ws, 0) == child && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
       "the receiver exits cleanly after the sender detached");
}

int main(void)
{
    char why[200];
    if (!gpu_answers(why, sizeof(why)))
        skip_all("%s", why);
    plan(14);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        bail_out("socketpair: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        bail_out("fork: %s", strerror(errno));
    if (pid == 0) {
        close(sv[0]);
        receiver(sv[1]);
    }
    close(sv[1]);
    sender(sv[0], pid);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
