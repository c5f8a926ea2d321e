/* t-transport-local-moves-every-buffer: transport/local copies a request's pages of every
 * paged buffer and its state slot, whatever the page lists' order, into exactly the
 * reserved blocks of the receiver (nothing else changes; the checksums of both sides
 * agree) — in one process, and from another process into a pool in shared memory. A
 * private pool is refused across processes with what the daemon must do; a blob with a
 * different buffer table or truncated is refused; a run outside either pool is refused
 * before anything is written; cancel returns 0 only once no byte can land any more. */
#include <errno.h>
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

/* Bytes of every block of dst that is not in the request, compared with before. */
static bool others_untouched(const dsv4_kv_layout *dst, const uint8_t *const *before,
                             const uint32_t *dp, uint32_t n, uint32_t ds)
{
    for (uint32_t i = 0; i < dst->n_buffers; i++) {
        const dsv4_kv_buffer *b = &dst->buffers[i];
        bool paged = dsv4_buf_is_paged(b->kind);
        for (uint32_t k = 0; k < b->n_blocks; k++) {
            bool requested = !paged && k == ds;
            for (uint32_t j = 0; paged && j < n; j++)
                requested = requested || dp[j] == k;
            if (!requested && memcmp(b->base + k * b->block_bytes, before[i] + k * b->block_bytes,
                                     b->block_bytes) != 0)
                return false;
        }
    }
    return true;
}

static uint8_t **snapshot(const dsv4_kv_layout *l)
{
    uint8_t **s = calloc(l->n_buffers, sizeof(*s));
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        size_t n = l->buffers[i].block_bytes * l->buffers[i].n_blocks;
        s[i] = malloc(n);
        memcpy(s[i], l->buffers[i].base, n);
    }
    return s;
}

static void snapshot_free(const dsv4_kv_layout *l, uint8_t **s)
{
    for (uint32_t i = 0; i < l->n_buffers; i++)
        free(s[i]);
    free(s);
}

static uint8_t blob[1 << 16];

static size_t expose(void *st, const dsv4_kv_layout *l)
{
    size_t len = sizeof(blob);
    if (ops->expose(st, l, blob, &len) != 0)
        bail_out("expose failed");
    return len;
}

/* The sending process of the cross-process trial: its own pool from seed 1, one request. */
static int child_send(size_t len, const uint32_t *sp, const uint32_t *dp, uint32_t n)
{
    void *conf = plugtest_config(desc, NULL);
    void *st = plugtest_init(desc, conf);
    tpool src = tpool_new(PAGES, SLOTS, false, 1);
    void *peer = NULL, *x = NULL;
    char err[512];
    if (ops->attach(st, src.l, blob, len, &peer, err, sizeof(err)) != 0) {
        diag("child: %s", err);
        return strstr(err, "dsv4_kv_pool_new_shared") ? 3 : 1;
    }
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), 1, 1, runs, tx_runs(sp, dp, n, runs), true, 2, 0};
    if (ops->post(st, peer, &req, &x) != 0 || tx_wait(ops, st, x, 20000) != 0)
        return 1;
    ops->release(st, x);
    ops->detach(st, peer);
    desc->fini(st);
    return 0;
}

static int run_child(size_t len, const uint32_t *sp, const uint32_t *dp, uint32_t n)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_send(len, sp, dp, n));
    int status = -1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void)
{
    plan(PLUGTEST_DESC_TESTS + 14);
    desc = plugtest_open("transport", "local");
    plugtest_check_desc(desc, DSV4_FAMILY_TRANSPORT, DSV4_TRANSPORT_VERSION, "local",
                        sizeof(dsv4_transport_ops));
    ops = desc->ops;
    void *conf = plugtest_config(desc, NULL);
    void *st = plugtest_init(desc, conf);
    char err[512];

    /* ---- one process */
    tpool src = tpool_new(PAGES, SLOTS, false, 1), dst = tpool_new(PAGES, SLOTS, false, 2);
    uint8_t **before = snapshot(dst.l);
    size_t small = 8, len = sizeof(blob);
    ok(ops->expose(st, dst.l, blob, &small) == -ENOSPC && small > 8,
       "expose into a short buffer says how long the blob is (%zu bytes)", small);
    len = expose(st, dst.l);
    void *peer = NULL, *x = NULL;
    int rc = ops->attach(st, src.l, blob, len, &peer, err, sizeof(err));
    ok(rc == 0, "attach in one process: %s", rc ? err : "ok");
    /* reversed, non-contiguous destination list */
    const uint32_t sp[] = {3, 4, 5, 9, 10, 20}, dp[] = {15, 14, 13, 1, 2, 23};
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), 7, 1, runs, tx_runs(sp, dp, 6, runs), true, 2, 0};
    rc = ops->post(st, peer, &req, &x);
    ok(rc == 0 && tx_wait(ops, st, x, 20000) == 0,
       "a request of %zu runs and a state slot completes", req.n_runs);
    ops->release(st, x);
    ok(tpool_same(src.l, sp, dst.l, dp, 6, true, 2, 0),
       "every paged buffer at every page and every state buffer landed");
    ok(others_untouched(dst.l, (const uint8_t *const *)before, dp, 6, 0),
       "no other block of the receiver changed");
    ok(tpool_sums_agree(src.l, sp, dst.l, dp, 6, 2, 0), "the checksums of both sides agree");

    dsv4_xfer_run bad_run = {0, PAGES - 1, 2};
    dsv4_xfer_req bad = {sizeof(bad), 7, 2, &bad_run, 1, false, 0, 0};
    ok(ops->post(st, peer, &bad, &x) == -ERANGE, "a run past the receiver's pool is refused");
    bad_run = (dsv4_xfer_run){PAGES, 0, 1};
    ok(ops->post(st, peer, &bad, &x) == -ERANGE, "a run past the sender's pool is refused");

    /* ---- cancel: 0 only when nothing can land any more */
    const uint32_t all_s[] = {0, 1, 2, 3, 4, 5, 6, 7}, all_d[] = {16, 17, 18, 19, 20, 21, 22, 23};
    void *xs[400];
    dsv4_xfer_run big[8];
    dsv4_xfer_req breq = {sizeof(breq), 8, 1, big, tx_runs(all_s, all_d, 8, big), true, 0, 1};
    tpool_fill(src.l, 3);
    for (int i = 0; i < 400; i++)
        if (ops->post(st, peer, &breq, &xs[i]) != 0)
            bail_out("post");
    tpool_fill(src.l, 4); /* the last transfer, if it ever copied, would show seed 4 bytes */
    rc = tx_drain(ops, st, xs[399], 20000);
    int polled = ops->poll(st, xs[399]);
    for (int i = 0; i < 399; i++)
        tx_wait(ops, st, xs[i], 20000);
    uint8_t **after_cancel = snapshot(dst.l);
    for (int i = 0; i < 399; i++)
        ops->release(st, xs[i]);
    ops->release(st, xs[399]);
    diag("cancelled transfer ended as %d", polled);
    ok(rc == 0 && (polled == 0 || polled == -ECANCELED),
       "cancel returns 0 and the transfer is finished or cancelled (%d)", polled);
    uint8_t **later = snapshot(dst.l);
    bool stable = true;
    for (uint32_t i = 0; i < dst.l->n_buffers; i++)
        stable = stable && memcmp(after_cancel[i], later[i],
                                  dst.l->buffers[i].block_bytes * dst.l->buffers[i].n_blocks) == 0;
    ok(stable, "nothing lands after cancel returned 0");
    snapshot_free(dst.l, after_cancel);
    snapshot_free(dst.l, later);
    ops->detach(st, peer);

    /* ---- refusals at attach */
    uint8_t saved = blob[24];
    blob[24] ^= 0x40; /* block size of buffer 0 */
    ok(ops->attach(st, src.l, blob, len, &peer, err, sizeof(err)) == DSV4_EPEER &&
           strstr(err, "buffer 0 differs"),
       "a blob with another buffer table is refused: %s", err);
    blob[24] = saved;
    ok(ops->attach(st, src.l, blob, len - 1, &peer, err, sizeof(err)) == DSV4_EPEER,
       "a truncated blob is refused: %s", err);

    /* ---- another process */
    tpool_fill(src.l, 1);
    len = expose(st, dst.l);
    is_int(run_child(len, sp, dp, 6), 3,
           "a private pool is refused across processes, naming dsv4_kv_pool_new_shared");
    tpool shared = tpool_new(PAGES, SLOTS, true, 2);
    len = expose(st, shared.l);
    ok(run_child(len, sp, dp, 6) == 0 && tpool_same(src.l, sp, shared.l, dp, 6, true, 2, 0) &&
           tpool_sums_agree(src.l, sp, shared.l, dp, 6, 2, 0),
       "another process writes every buffer of the request into a shared pool");

    snapshot_free(dst.l, before);
    tpool_free(&shared);
    tpool_free(&src);
    tpool_free(&dst);
    desc->fini(st);
    plugtest_config_free(desc, conf);
    return done_testing();
}
