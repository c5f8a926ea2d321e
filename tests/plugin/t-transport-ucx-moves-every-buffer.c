/* t-transport-ucx-moves-every-buffer: transport/ucx between two UCP contexts (a receiver
 * that registered its pool once and a sender attached to it), over tls = tcp and over
 * tls = shm: a request's pages of every paged buffer and its state slot land exactly in the
 * reserved blocks (the checksums of both sides agree), several requests reuse the one
 * registration, a run outside either pool is refused before any put, cancel after
 * completion returns 0. When the receiving process is killed (kill -9) after the sender
 * attached, a transfer over tcp fails instead of hanging and cancel returns 0. probe and
 * check accept device = cuda in a CUDA build (device pools are staged: the GPU test
 * t-gpu-transport-ucx-stages-every-buffer moves them) and refuse it by name in a build
 * without CUDA; a blob with another buffer table is refused at attach. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/plugin/plugin-harness.h"
#include "tests/plugin/transport-harness.h"
#include "tests/tap.h"

#define PAGES 24
#define SLOTS 3

static const dsv4_plugin_desc *desc;
static const dsv4_transport_ops *ops;

static void reports(dsv4_diag *diag, const char *section, const char *key, const char *fmt, ...)
{
    (void)section;
    (void)key;
    (void)fmt;
    (*(int *)diag)++;
}

static uint8_t blob[1 << 20];

static const uint32_t sp[] = {3, 4, 5, 9, 10, 20}, dp[] = {15, 14, 13, 1, 2, 23};
static const uint32_t sp2[] = {0, 1, 2, 3, 4, 5, 6, 7}, dp2[] = {4, 5, 6, 7, 8, 9, 10, 11};

static bool full_read(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (uint8_t *)p + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* The receiving process: registers the shared pool, hands over the blob, keeps its worker
 * progressing until the parent says the sender is done. */
static int receiver(const char *tls, const dsv4_kv_layout *dst, int blob_fd, int done_fd)
{
    void *conf = plugtest_config(desc, "tls", tls, NULL);
    void *rx = plugtest_init(desc, conf);
    size_t len = sizeof(blob);
    if (ops->expose(rx, dst, blob, &len) != 0)
        return 1;
    uint64_t n = len;
    if (write(blob_fd, &n, sizeof(n)) != sizeof(n) || write(blob_fd, blob, len) != (ssize_t)len)
        return 1;
    char c;
    if (read(done_fd, &c, 1) != 1)
        return 1;
    desc->fini(rx);
    return 0;
}

/* The sending process: bit i of the exit code set when step i failed. */
static int sender(const char *tls, tpool *src, int blob_fd)
{
    uint64_t len;
    if (!full_read(blob_fd, &len, sizeof(len)) || len > sizeof(blob) ||
        !full_read(blob_fd, blob, len))
        return 0x80;
    void *conf = plugtest_config(desc, "tls", tls, NULL);
    void *tx = plugtest_init(desc, conf);
    void *peer = NULL, *x = NULL;
    char err[512];
    if (ops->attach(tx, src->l, blob, len, &peer, err, sizeof(err)) != 0) {
        diag("attach: %s", err);
        return 0x40;
    }
    int fails = 0;
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), 1, 1, runs, tx_runs(sp, dp, 6, runs), true, 2, 0};
    if (ops->post(tx, peer, &req, &x) != 0 || tx_wait(ops, tx, x, 60000) != 0)
        fails |= 1;
    else if (ops->cancel(tx, x) != 0)
        fails |= 2;
    if (!(fails & 1))
        ops->release(tx, x);
    tpool_fill(src->l, 13);
    dsv4_xfer_req req2 = {sizeof(req2), 2, 1, runs, tx_runs(sp2, dp2, 8, runs), true, 1, 2};
    if (req2.n_runs != 1 || ops->post(tx, peer, &req2, &x) != 0 || tx_wait(ops, tx, x, 60000) != 0)
        fails |= 4;
    else
        ops->release(tx, x);
    dsv4_xfer_run bad_run = {PAGES - 1, 0, 2};
    dsv4_xfer_req bad = {sizeof(bad), 3, 1, &bad_run, 1, false, 0, 0};
    if (ops->post(tx, peer, &bad, &x) != -ERANGE)
        fails |= 8;
    ops->detach(tx, peer);
    desc->fini(tx);
    return fails;
}

/* One tls setting, receiver and sender in two processes (as a PD pair runs): 5 tests. */
static void over(const char *tls)
{
    /* the receiver's pool is shared memory so this process sees what lands in it */
    tpool src = tpool_new(PAGES, SLOTS, false, 11), dst = tpool_new(PAGES, SLOTS, true, 12);
    int bp[2], dp_[2];
    if (pipe(bp) != 0 || pipe(dp_) != 0)
        bail_out("pipe");
    pid_t rx = fork();
    if (rx == 0)
        _exit(receiver(tls, dst.l, bp[1], dp_[0]));
    pid_t tx = fork();
    if (tx == 0)
        _exit(sender(tls, &src, bp[0]));
    int st_tx = -1, st_rx = -1;
    waitpid(tx, &st_tx, 0);
    if (write(dp_[1], "x", 1) != 1)
        bail_out("pipe");
    waitpid(rx, &st_rx, 0);
    int fails = WIFEXITED(st_tx) ? WEXITSTATUS(st_tx) : 0xff;
    ok(fails < 0x40 && WIFEXITED(st_rx) && WEXITSTATUS(st_rx) == 0,
       "tls = %s: the receiver exposes its pool, the sender attaches (status %d, %d)", tls, st_tx,
       st_rx);
    ok(!(fails & 1) && tpool_same(src.l, sp, dst.l, dp, 6, true, 2, 0) &&
           tpool_sums_agree(src.l, sp, dst.l, dp, 6, 2, 0),
       "tls = %s: every buffer of the request landed and the checksums agree", tls);
    ok(!(fails & 2), "tls = %s: cancel of a finished transfer returns 0", tls);
    tpool_fill(src.l, 13);
    ok(!(fails & 4) && tpool_same(src.l, sp2, dst.l, dp2, 8, true, 1, 2),
       "tls = %s: a second request (one merged run) reuses the registration", tls);
    ok(!(fails & 8), "tls = %s: a run past a pool is refused", tls);
    close(bp[0]), close(bp[1]), close(dp_[0]), close(dp_[1]);
    tpool_free(&src);
    tpool_free(&dst);
}

/* The sender after its receiver was killed: 0 when the transfer failed and cancel drained. */
static int sender_of_dead(tpool *src, int blob_fd, int go_fd, int attached_fd)
{
    uint64_t len;
    if (!full_read(blob_fd, &len, sizeof(len)) || len > sizeof(blob) ||
        !full_read(blob_fd, blob, len))
        return 0x80;
    void *conf = plugtest_config(desc, "tls", "tcp", NULL);
    void *tx = plugtest_init(desc, conf);
    void *peer = NULL, *x = NULL;
    char err[512], c;
    if (ops->attach(tx, src->l, blob, len, &peer, err, sizeof(err)) != 0)
        return 0x40;
    if (write(attached_fd, "a", 1) != 1 || read(go_fd, &c, 1) != 1)
        return 0x20;
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), 1, 1, runs, tx_runs(sp, dp, 6, runs), true, 2, 0};
    int rc = ops->post(tx, peer, &req, &x);
    if (rc == 0) {
        rc = tx_wait(ops, tx, x, 60000);
        diag("transfer to a killed receiver: %d", rc);
        if (rc == 0 || rc == -EAGAIN || ops->cancel(tx, x) != 0)
            return 1;
        ops->release(tx, x);
    } else {
        diag("post to a killed receiver: %d", rc);
    }
    ops->detach(tx, peer);
    desc->fini(tx);
    return 0;
}

static void dead_receiver(void)
{
    tpool src = tpool_new(PAGES, SLOTS, false, 11), dst = tpool_new(PAGES, SLOTS, true, 12);
    int bp[2], go[2], at[2], dn[2];
    if (pipe(bp) != 0 || pipe(go) != 0 || pipe(at) != 0 || pipe(dn) != 0)
        bail_out("pipe");
    pid_t rx = fork();
    if (rx == 0)
        _exit(receiver("tcp", dst.l, bp[1], dn[0]));
    pid_t tx = fork();
    if (tx == 0)
        _exit(sender_of_dead(&src, bp[0], go[0], at[1]));
    char c;
    int st_tx = -1;
    if (read(at[0], &c, 1) == 1) {
        kill(rx, SIGKILL);
        waitpid(rx, NULL, 0);
        if (write(go[1], "g", 1) != 1)
            bail_out("pipe");
    } else {
        kill(rx, SIGKILL);
        waitpid(rx, NULL, 0);
    }
    waitpid(tx, &st_tx, 0);
    ok(WIFEXITED(st_tx) && WEXITSTATUS(st_tx) == 0,
       "tls = tcp: a transfer to a killed receiver fails (no hang) and cancel returns 0 (%d)",
       st_tx);
    int fds[] = {bp[0], bp[1], go[0], go[1], at[0], at[1], dn[0], dn[1]};
    for (int i = 0; i < 8; i++)
        close(fds[i]);
    tpool_free(&src);
    tpool_free(&dst);
}

int main(void)
{
    plan(PLUGTEST_DESC_TESTS + 2 * 5 + 5);
    desc = plugtest_open("transport", "ucx");
    plugtest_check_desc(desc, DSV4_FAMILY_TRANSPORT, DSV4_TRANSPORT_VERSION, "ucx",
                        sizeof(dsv4_transport_ops));
    ops = desc->ops;

    dsv4_selection sel = {.struct_size = sizeof(sel), .device = DSV4_DEVICE_CUDA};
    dsv4_host host = *plugtest_host();
    host.selection = &sel;
    char why[256] = "";
    void *conf = plugtest_config(desc, NULL);
    int n = 0;
#ifdef HAVE_CUDA
    ok(desc->probe(&host, why, sizeof(why)) == 0, "probe accepts device = cuda (staged) %s", why);
    ok(desc->check(&sel, conf, reports, (dsv4_diag *)&n) == 0 && n == 0,
       "check accepts device = cuda");
#else
    ok(desc->probe(&host, why, sizeof(why)) == DSV4_EUNAVAIL && strstr(why, "built without CUDA"),
       "probe refuses device = cuda without CUDA: %s", why);
    ok(desc->check(&sel, conf, reports, (dsv4_diag *)&n) == 1 && n == 1,
       "check reports device = cuda without CUDA");
#endif
    sel.device = DSV4_DEVICE_CPU;
    n = 0;
    ok(desc->check(&sel, conf, reports, (dsv4_diag *)&n) == 0, "and accepts device = cpu");
    plugtest_config_free(desc, conf);

    over("tcp");
    over("shm");
    dead_receiver();

    /* another buffer table: a receiver pool built with other geometry is refused */
    conf = plugtest_config(desc, "tls", "tcp", NULL);
    void *rx = plugtest_init(desc, conf), *tx = plugtest_init(desc, conf);
    tpool src = tpool_new(PAGES, SLOTS, false, 1), dst = tpool_new(PAGES, SLOTS, false, 2);
    size_t len = sizeof(blob);
    char err[512] = "";
    void *peer = NULL;
    if (ops->expose(rx, dst.l, blob, &len) != 0)
        bail_out("expose");
    blob[24] ^= 0x40; /* block size of buffer 0 */
    ok(ops->attach(tx, src.l, blob, len, &peer, err, sizeof(err)) == DSV4_EPEER &&
           strstr(err, "buffer 0 differs"),
       "a blob with another buffer table is refused: %s", err);
    desc->fini(tx);
    desc->fini(rx);
    tpool_free(&src);
    tpool_free(&dst);
    plugtest_config_free(desc, conf);
    return done_testing();
}
