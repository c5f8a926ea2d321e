/* t-nccl-transport-moves-every-buffer-between-two-gpus: transport/nccl between two
 * processes on two GPUs, driven as the PD code drives it (expose, attach, bootstrap,
 * accept; per request post at the sender, the request over the control channel, recv_post
 * at the receiver). Requests of merged runs, scattered and reversed pages and a state slot
 * land byte for byte in every buffer, pages no run names stay untouched; a sender on the
 * receiver's own GPU is refused by name; a transfer cancelled while the receiver has not
 * posted its receives aborts the connection, drains on both sides, and the next bootstrap
 * (a new epoch) carries a request that lands. Skips unless two GPUs are visible. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/gpu/nccl-pair.h"
#include "tests/tap.h"

#define PAGES 256
#define SLOTS 8

/* Receiver's verdicts travel to the sender, which prints the TAP lines. */
static void verdict(nccl_pair *p, bool good, const char *why)
{
    size_t n = strlen(why) + 2;
    char *m = malloc(n);
    m[0] = good ? '1' : '0';
    memcpy(m + 1, why, n - 1);
    nccl_pair_send(p, 'V', m, (uint32_t)n);
    free(m);
}

static void report(nccl_pair *p, const char *what)
{
    uint32_t n;
    char *m = nccl_pair_recv(p, 'V', &n);
    ok(m[0] == '1', "%s%s%s", what, m[1] ? ": " : "", m + 1);
    free(m);
}

/* The requests both sides run, in order: merged runs and the state slot; scattered pages
 * listed in reverse; pages only. */
static const dsv4_xfer_run r0[] = {{0, 10, 40}, {100, 60, 3}};
static const dsv4_xfer_run r1[] = {{200, 3, 1}, {150, 7, 1}, {90, 200, 5}, {30, 120, 2}};
static const dsv4_xfer_run r2[] = {{1, 250, 5}};
static const dsv4_xfer_run big[] = {{0, 0, 200}};
static const dsv4_xfer_run after[] = {{201, 201, 50}};

static void receiver(nccl_pair *p)
{
    char why[512];
    nccl_pair_connect(p);
    /* three requests: receive and check each */
    for (int k = 0; k < 3; k++) {
        dsv4_xfer_req req;
        void *rx = NULL;
        nccl_pair_recv_req(p, &req);
        int rc = p->ops->recv_post(p->state, p->peer, &req, &rx);
        if (rc == 0)
            rc = nccl_pair_wait(p, rx, 60);
        snprintf(why, sizeof(why), "receives ended with %d", rc);
        bool good = rc == 0 && nccl_pair_check(p, &req, 255, why, sizeof(why));
        verdict(p, good, good ? "" : why);
        if (rx)
            p->ops->release(p->state, rx);
        free((void *)req.runs);
    }
    /* the aborted one: its receives are posted late, on the connection the sender kills */
    dsv4_xfer_req req;
    void *rx = NULL;
    nccl_pair_recv_req(p, &req);
    usleep(500000);
    int rc = p->ops->recv_post(p->state, p->peer, &req, &rx);
    uint32_t n;
    void *boot = nccl_pair_recv(p, 'B', &n);
    char err[512] = "";
    int arc = p->ops->accept(p->state, &p->l, boot, n, &p->peer, err, sizeof(err));
    free(boot);
    snprintf(why, sizeof(why), "recv_post %d, accept %d (%s)", rc, arc, err);
    verdict(p, rc == 0 && arc == 0, rc == 0 && arc == 0 ? "" : why);
    int drc = rx ? nccl_pair_drain(p, rx, 60) : -EINVAL;
    int prc = rx ? p->ops->poll(p->state, rx) : -EINVAL;
    snprintf(why, sizeof(why), "cancel %d, poll %d", drc, prc);
    verdict(p, drc == 0 && prc != -EAGAIN, why);
    if (rx)
        p->ops->release(p->state, rx);
    free((void *)req.runs);
    /* the next request rides the new connection */
    nccl_pair_recv_req(p, &req);
    rx = NULL;
    rc = p->ops->recv_post(p->state, p->peer, &req, &rx);
    if (rc == 0)
        rc = nccl_pair_wait(p, rx, 60);
    snprintf(why, sizeof(why), "receives ended with %d", rc);
    bool good = rc == 0 && nccl_pair_check(p, &req, 255, why, sizeof(why));
    verdict(p, good, good ? "" : why);
    if (rx)
        p->ops->release(p->state, rx);
    free((void *)req.runs);
    nccl_pair_end(p, 0);
}

int main(void)
{
    int gpus = nccl_pair_gpus();
    if (gpus < 2)
        skip_all("transport/nccl needs two GPUs (%d visible)", gpus);
    plan(14);
    nccl_pair p;
    nccl_pair_start(&p, 0, 1, 6, PAGES, SLOTS, true);
    if (p.rank == 1)
        receiver(&p);

    /* a receiver on our own GPU is refused by name (no NCCL call needed) */
    uint8_t blob[1 << 16];
    size_t len = sizeof(blob);
    char err[512] = "";
    void *self = NULL;
    is_int(p.ops->expose(p.state, &p.l, blob, &len), 0, "expose on the sender's GPU");
    is_int(p.ops->attach(p.state, &p.l, blob, len, &self, err, sizeof(err)), DSV4_EPEER,
           "attach to a pool on the same GPU is refused");
    has_str(err, "prefill and decode use the same GPU GPU-", "and the GPU is named");

    nccl_pair_connect(&p);
    dsv4_xfer_req reqs[3] = {nccl_pair_req(r0, 2, true, 3, 5), nccl_pair_req(r1, 4, false, 0, 0),
                             nccl_pair_req(r2, 1, true, 7, 0)};
    const char *what[3] = {"merged runs and the state slot land in every buffer",
                           "scattered pages in reverse order land", "a short request lands"};
    for (int k = 0; k < 3; k++) {
        void *x = NULL;
        int rc = p.ops->post(p.state, p.peer, &reqs[k], &x);
        nccl_pair_send_req(&p, &reqs[k]);
        is_int(rc == 0 ? nccl_pair_wait(&p, x, 60) : rc, 0, "request %d: the sends complete", k);
        report(&p, what[k]);
        if (x)
            p.ops->release(p.state, x);
    }

    /* abort: cancelled before the receiver posts (it waits 0.5 s), the connection goes */
    dsv4_xfer_req a = nccl_pair_req(big, 1, true, 1, 1),
                  next = nccl_pair_req(after, 1, false, 0, 0);
    void *x = NULL;
    int rc = p.ops->post(p.state, p.peer, &a, &x);
    nccl_pair_send_req(&p, &a);
    int drc = rc == 0 ? nccl_pair_drain(&p, x, 60) : rc;
    size_t blen = sizeof(blob);
    int brc = p.ops->bootstrap(p.state, p.peer, blob, &blen);
    ok(drc == 0 && brc == 0, "a cancelled send drains (%d) and a new connection is announced (%d)",
       drc, brc);
    if (brc == 0)
        nccl_pair_send(&p, 'B', blob, (uint32_t)blen);
    if (x)
        p.ops->release(p.state, x);
    report(&p, "the receiver takes the new connection");
    report(&p, "the receiver's receives on the killed connection drain");
    x = NULL;
    rc = p.ops->post(p.state, p.peer, &next, &x);
    nccl_pair_send_req(&p, &next);
    rc = rc == 0 ? nccl_pair_wait(&p, x, 60) : rc;
    if (x)
        p.ops->release(p.state, x);
    report(&p, "a request on the rebuilt connection lands");
    ok(nccl_pair_end(&p, rc) && rc == 0, "both processes end cleanly (sends %d)", rc);
    return done_testing();
}
