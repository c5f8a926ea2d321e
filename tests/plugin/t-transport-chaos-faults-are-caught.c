/* t-transport-chaos-faults-are-caught: transport/chaos around transport/local (and around
 * transport/ucx over tcp where it is built). Every dropped transfer reports success yet
 * fails the PD checksums; every corrupted transfer differs from the source in exactly one
 * byte, which the checksums find as exactly one bad block, also two of them in flight on one
 * peer at once; a hung transfer never reports
 * completion, and cancel still drains it (nothing lands after cancel returned 0); a delayed
 * transfer completes, never before delay_time, and a cancel in its delay window means it
 * never writes; the same seed replays the same faults; an unknown inner plugin, an
 * inner_options key the inner plugin does not have, and chaos wrapping itself are refused
 * with their reasons. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pd/checksum.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/plugin/transport-harness.h"
#include "tests/tap.h"

#define PAGES 24
#define SLOTS 3

static const dsv4_plugin_desc *desc;
static const dsv4_transport_ops *ops;
static uint8_t blob[1 << 20];

static const uint32_t sp[] = {3, 4, 5, 9, 10, 20}, dp[] = {15, 14, 13, 1, 2, 23};

typedef struct rig {
    void *conf, *rx, *tx, *peer;
    tpool src, dst;
} rig;

/* A chaos sender and a chaos receiver (pass-through) around `inner`, with pools. */
static rig rig_new(const char *inner, const char *inner_options, ...)
{
    rig r;
    va_list ap;
    const char *kv[16];
    int n = 0;
    va_start(ap, inner_options);
    while (n < 14 && (kv[n] = va_arg(ap, const char *)))
        n++;
    va_end(ap);
    kv[n] = NULL;
    r.conf = plugtest_config(desc, "inner", inner, "inner_options", inner_options, kv[0], kv[1],
                             kv[2], kv[3], kv[4], kv[5], kv[6], kv[7], NULL);
    r.rx = plugtest_init(desc, r.conf);
    r.tx = plugtest_init(desc, r.conf);
    r.src = tpool_new(PAGES, SLOTS, false, 21);
    r.dst = tpool_new(PAGES, SLOTS, false, 22);
    size_t len = sizeof(blob);
    char err[512];
    if (ops->expose(r.rx, r.dst.l, blob, &len) != 0 ||
        ops->attach(r.tx, r.src.l, blob, len, &r.peer, err, sizeof(err)) != 0)
        bail_out("chaos rig: %s", err);
    return r;
}

static void rig_free(rig *r)
{
    ops->detach(r->tx, r->peer);
    desc->fini(r->tx);
    desc->fini(r->rx);
    tpool_free(&r->src);
    tpool_free(&r->dst);
    plugtest_config_free(desc, r->conf);
}

/* Posts the request and waits; returns what poll said. */
static int transfer(rig *r, uint64_t room, void **x_p)
{
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), room, 1, runs, tx_runs(sp, dp, 6, runs), true, 2, 0};
    if (ops->post(r->tx, r->peer, &req, x_p) != 0)
        bail_out("post");
    return tx_wait(ops, r->tx, *x_p, 20000);
}

/* The receiver's verdict: 0, or DSV4_ECHECKSUM with the number of bad blocks. */
static int verdict(rig *r, uint32_t *n_bad_p)
{
    dsv4_pd_blocks a = {sp, 6, true, 2}, b = {dp, 6, true, 0};
    size_t n = dsv4_pd_sum_count(r->src.l, &a);
    uint64_t *sums = malloc(n * sizeof(*sums));
    dsv4_pd_sum_bad bad;
    *n_bad_p = 0;
    int rc = dsv4_pd_sum_compute(r->src.l, &a, sums, n);
    if (rc == 0)
        rc = dsv4_pd_sum_verify(r->dst.l, &b, sums, n, &bad, n_bad_p);
    free(sums);
    return rc;
}

/* Bytes of the request that differ between source and destination. */
static size_t bytes_off(rig *r)
{
    size_t diff = 0;
    for (uint32_t i = 0; i < r->src.l->n_buffers; i++) {
        const dsv4_kv_buffer *x = &r->src.l->buffers[i], *y = &r->dst.l->buffers[i];
        size_t bb = x->block_bytes;
        bool paged = dsv4_buf_is_paged(x->kind);
        for (uint32_t j = 0; j < (paged ? 6u : 1u); j++) {
            const uint8_t *a = x->base + (paged ? sp[j] : 2) * bb,
                          *b = y->base + (paged ? dp[j] : 0) * bb;
            for (size_t k = 0; k < bb; k++)
                diff += a[k] != b[k];
        }
    }
    return diff;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void reports(dsv4_diag *diag, const char *section, const char *key, const char *fmt, ...)
{
    (void)section;
    (void)key;
    (void)fmt;
    (*(int *)diag)++;
}

static void corrupt_trials(const char *inner, const char *inner_options)
{
    rig r = rig_new(inner, inner_options, "corrupt", "100", NULL);
    bool all = true;
    for (int t = 0; t < 25; t++) {
        tpool_fill(r.src.l, 100 + (uint64_t)t);
        void *x;
        uint32_t n_bad;
        int rc = transfer(&r, (uint64_t)t, &x);
        ops->release(r.tx, x);
        size_t off = bytes_off(&r);
        int v = verdict(&r, &n_bad);
        if (rc != 0 || off != 1 || v != DSV4_ECHECKSUM || n_bad != 1) {
            diag("trial %d: poll %d, %zu bytes differ, verdict %d (%u bad)", t, rc, off, v, n_bad);
            all = false;
        }
    }
    ok(all, "%s: 25 corrupted transfers: each one byte off, each caught as one bad block", inner);
    rig_free(&r);
}

/* Two corrupted transfers in flight on one peer at once (pages 0-2 with the state slot,
 * pages 3-5), polled in turn: each lands its own pages with its own one flipped byte. The
 * flipped page goes through the peer's one scratch page, so the second must wait for the
 * first's write (overwritten under it, a destination got the other transfer's page). */
static void corrupt_overlapping(const char *inner, const char *inner_options)
{
    rig r = rig_new(inner, inner_options, "corrupt", "100", NULL);
    bool all = true;
    for (int t = 0; t < 25; t++) {
        tpool_fill(r.src.l, 300 + (uint64_t)t);
        dsv4_xfer_run runs[2][3];
        dsv4_xfer_req req[2] = {
            {sizeof(req[0]), 2 * (uint64_t)t, 1, runs[0], tx_runs(sp, dp, 3, runs[0]), true, 2, 0},
            {sizeof(req[1]), 2 * (uint64_t)t + 1, 1, runs[1], tx_runs(sp + 3, dp + 3, 3, runs[1]),
             false, 0, 0}};
        void *x[2];
        int rc[2] = {-EAGAIN, -EAGAIN};
        for (int i = 0; i < 2; i++)
            if (ops->post(r.tx, r.peer, &req[i], &x[i]) != 0)
                bail_out("post");
        for (uint64_t t0 = now_ms();
             (rc[0] == -EAGAIN || rc[1] == -EAGAIN) && now_ms() - t0 < 20000;
             nanosleep(&(struct timespec){0, 100000}, NULL))
            for (int i = 0; i < 2; i++)
                if (rc[i] == -EAGAIN)
                    rc[i] = ops->poll(r.tx, x[i]);
        for (int i = 0; i < 2; i++)
            ops->release(r.tx, x[i]);
        size_t off = bytes_off(&r);
        uint32_t n_bad;
        int v = verdict(&r, &n_bad);
        if (rc[0] != 0 || rc[1] != 0 || off != 2 || v != DSV4_ECHECKSUM || n_bad != 2) {
            diag("pair %d: polls %d %d, %zu bytes differ, verdict %d (%u bad)", t, rc[0], rc[1],
                 off, v, n_bad);
            all = false;
        }
    }
    ok(all,
       "%s: 25 pairs of corrupted transfers in flight together: each lands its own pages, "
       "one byte off each",
       inner);
    rig_free(&r);
}

int main(void)
{
    plan(PLUGTEST_DESC_TESTS + 15);
    desc = plugtest_open("transport", "chaos");
    plugtest_check_desc(desc, DSV4_FAMILY_TRANSPORT, DSV4_TRANSPORT_VERSION, "chaos",
                        sizeof(dsv4_transport_ops));
    ops = desc->ops;
    ok(desc->flags & DSV4_PLUGIN_EXPERIMENTAL, "chaos is marked experimental");

    /* ---- drop */
    rig r = rig_new("local", "", "drop", "100", NULL);
    bool all = true;
    for (int t = 0; t < 10; t++) {
        tpool_fill(r.src.l, 200 + (uint64_t)t);
        void *x;
        uint32_t n_bad;
        int rc = transfer(&r, (uint64_t)t, &x);
        ops->release(r.tx, x);
        all = all && rc == 0 && verdict(&r, &n_bad) == DSV4_ECHECKSUM && n_bad > 0;
    }
    ok(all, "10 dropped transfers report success and every one fails the checksums");
    rig_free(&r);

    /* ---- corrupt */
    corrupt_trials("local", "");
    corrupt_overlapping("local", "");

    /* ---- hang */
    r = rig_new("local", "", "hang", "100", NULL);
    void *x;
    dsv4_xfer_run runs[PAGES];
    dsv4_xfer_req req = {sizeof(req), 1, 1, runs, tx_runs(sp, dp, 6, runs), true, 2, 0};
    ops->post(r.tx, r.peer, &req, &x);
    int rc = tx_wait(ops, r.tx, x, 200);
    ok(rc == -EAGAIN, "a hung transfer has not completed after 200 polls");
    rc = tx_drain(ops, r.tx, x, 20000);
    uint32_t n_bad;
    int v = verdict(&r, &n_bad);
    ok(rc == 0 && v == 0, "cancel drains it (returns 0 once its real writes are done)");
    tpool_fill(r.src.l, 5);
    ok(tx_wait(ops, r.tx, x, 50) == -EAGAIN && verdict(&r, &n_bad) == DSV4_ECHECKSUM,
       "and nothing lands after cancel returned 0");
    ops->release(r.tx, x);
    rig_free(&r);

    /* ---- delay */
    r = rig_new("local", "", "delay", "100", "delay_time", "80ms", NULL);
    uint64_t t0 = now_ms();
    ops->post(r.tx, r.peer, &req, &x);
    rc = tx_wait(ops, r.tx, x, 20000);
    uint64_t took = now_ms() - t0;
    ok(rc == 0 && took >= 80 && verdict(&r, &n_bad) == 0,
       "a delayed transfer lands whole, never before delay_time (%llu ms)",
       (unsigned long long)took);
    ops->release(r.tx, x);
    tpool_fill(r.src.l, 6);
    ops->post(r.tx, r.peer, &req, &x);
    rc = ops->cancel(r.tx, x);
    ok(rc == 0 && ops->poll(r.tx, x) == -ECANCELED,
       "cancel in the delay window returns 0 at once and the transfer is cancelled");
    struct timespec pause = {0, 120 * 1000000};
    nanosleep(&pause, NULL);
    ok(ops->poll(r.tx, x) == -ECANCELED && verdict(&r, &n_bad) == DSV4_ECHECKSUM,
       "and after delay_time it still has written nothing");
    ops->release(r.tx, x);
    rig_free(&r);

    /* ---- the seed replays */
    int outcome[2][40];
    for (int k = 0; k < 2; k++) {
        r = rig_new("local", "", "drop", "50", "seed", "7", NULL);
        for (int t = 0; t < 40; t++) {
            tpool_fill(r.src.l, 300 + (uint64_t)t);
            transfer(&r, (uint64_t)t, &x);
            ops->release(r.tx, x);
            outcome[k][t] = verdict(&r, &n_bad);
        }
        rig_free(&r);
    }
    int drops = 0;
    for (int t = 0; t < 40; t++)
        drops += outcome[0][t] != 0;
    ok(memcmp(outcome[0], outcome[1], sizeof(outcome[0])) == 0 && drops > 0 && drops < 40,
       "seed 7 replays the same %d drops of 40", drops);

    /* ---- refusals */
    char err[512] = "";
    void *conf = plugtest_config(desc, "inner", "nosuch", NULL), *st = NULL;
    ok(desc->init(plugtest_host(), conf, &st, err, sizeof(err)) != 0 &&
           strstr(err, "dsv4-transport-nosuch.so"),
       "an unknown inner plugin is refused naming its file: %s", err);
    plugtest_config_free(desc, conf);
    conf = plugtest_config(desc, "inner", "local", "inner_options", "colour=blue", NULL);
    ok(desc->init(plugtest_host(), conf, &st, err, sizeof(err)) == DSV4_ECONFIG &&
           strstr(err, "transport/local has no key 'colour'"),
       "an inner_options key the inner plugin lacks is refused: %s", err);
    plugtest_config_free(desc, conf);
    conf = plugtest_config(desc, "inner", "chaos", "drop", "60", "hang", "60", NULL);
    dsv4_selection sel = {.struct_size = sizeof(sel), .device = DSV4_DEVICE_CPU};
    int n = 0;
    ok(desc->check(&sel, conf, reports, (dsv4_diag *)&n) == 2 && n == 2,
       "check reports chaos wrapping itself and faults adding up past 100%%");
    plugtest_config_free(desc, conf);

    /* ---- around ucx */
    const char *path = getenv("DSV4D_PLUGIN_PATH");
    char so[4096];
    snprintf(so, sizeof(so), "%.*s/dsv4-transport-ucx.so", path ? (int)strcspn(path, ":") : 1,
             path ? path : ".");
    FILE *f = fopen(so, "r");
    if (f) {
        fclose(f);
        corrupt_trials("ucx", "tls=tcp");
    } else {
        skip(1, "transport/ucx is not built");
    }
    return done_testing();
}
