/* t-pd-conn-send-and-receive-fail-apart: a PD connection is used by two threads at once
 * (the servers' connection thread receives while their engine thread sends), and each
 * direction fails on its own. A send made while the receiving thread waits for the rest of
 * a frame succeeds, and both frames arrive whole (on the H200 soak this used to fail the
 * send as "broken by an earlier failure" and drop the connection with every lease on it).
 * A send that fails (its deadline passed with the peer not reading) leaves the sending
 * direction broken, so the next send fails at once, and half-closes it: the peer reads the
 * frames that came whole and then the end of the stream (-ECONNRESET, not its own
 * deadline), while the failed side still receives what the peer sends. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/tap.h"
#include "tests/unit/pd-conn-pair.h"

typedef struct receive {
    dsv4_pd_conn *c;
    dsv4_pd_msg m;
    int rc;
    char err[512];
} receive;

static void *run_receive(void *arg)
{
    receive *r = arg;
    r->rc = dsv4_pd_conn_recv(r->c, &r->m, dsv4_pd_deadline(10000), r->err, sizeof(r->err));
    return NULL;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until nothing is left unread on fd: the receiving thread took what was sent. */
static void wait_drained(int fd)
{
    int unread = 1;
    for (int i = 0; i < 10000 && unread > 0; i++) {
        if (ioctl(fd, FIONREAD, &unread) != 0)
            bail_out("FIONREAD");
        if (unread > 0)
            sleep_ms(1);
    }
    if (unread > 0)
        bail_out("the receiving thread did not read");
    sleep_ms(50); /* and sits in its wait for the rest */
}

int main(void)
{
    plan(7);
    pd_side a, b;
    char err[512];
    dsv4_pd_msg m;

    pd_pair(&a, &b, pd_pair_secret, 16);
    if (a.rc != 0 || b.rc != 0)
        bail_out("handshake: %s / %s", a.err, b.err);
    int afd = dsv4_pd_conn_fd(a.c), bfd = dsv4_pd_conn_fd(b.c);

    /* a lease frame for b, written into b's stream by hand: half of it first */
    int32_t tokens[64] = {0};
    uint32_t pages[] = {1, 2};
    dsv4_pd_msg lease = {.type = DSV4_PD_LEASE,
                         .room = 21,
                         .generation = 3,
                         .lease = {1000, tokens, 64, 0, pages, 2, false, 0}};
    if (dsv4_pd_conn_send(a.c, &lease, dsv4_pd_deadline(1000), err, sizeof(err)) != 0)
        bail_out("%s", err);
    size_t len;
    uint8_t *frame = pd_pair_grab(bfd, &len);
    size_t half = DSV4_PD_HEADER_BYTES + (len - DSV4_PD_HEADER_BYTES) / 2;
    if (send(afd, frame, half, 0) != (ssize_t)half)
        bail_out("send");
    receive r = {.c = b.c};
    pthread_t t;
    pthread_create(&t, NULL, run_receive, &r);
    wait_drained(bfd);
    dsv4_pd_msg abort_msg = {.type = DSV4_PD_ABORT, .room = 7, .generation = 2};
    int rc = dsv4_pd_conn_send(b.c, &abort_msg, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == 0, "a send succeeds while the receiving thread waits for the rest of a frame (%s)",
       rc ? err : "sent");
    bool rest = send(afd, frame + half, len - half, 0) == (ssize_t)(len - half);
    pthread_join(t, NULL);
    ok(rest && r.rc == 0 && r.m.type == DSV4_PD_LEASE && r.m.room == 21 && r.m.lease.n_tokens == 64,
       "the frame being received arrives whole (%s)", r.rc ? r.err : "lease 21");
    if (r.rc == 0)
        dsv4_pd_msg_clear(&r.m);
    free(frame);
    rc = dsv4_pd_conn_recv(a.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_ABORT && m.room == 7,
       "and the frame sent meanwhile reaches the peer (%s)", rc ? err : "abort 7");
    if (rc == 0)
        dsv4_pd_msg_clear(&m);

    /* a's sends into a peer that does not read, until one runs past its deadline */
    enum { BIG = 1 << 14 }; /* 64 KiB frames: a few fit the socket's buffer */
    int32_t *many = calloc(BIG, sizeof(*many));
    lease.lease.tokens = many;
    lease.lease.n_tokens = BIG;
    int sent = 0;
    rc = 0;
    while (rc == 0 && sent < 256) {
        rc = dsv4_pd_conn_send(a.c, &lease, dsv4_pd_deadline(100), err, sizeof(err));
        sent += rc == 0;
    }
    ok(rc == -ETIMEDOUT && strstr(err, "deadline passed"),
       "a send into a peer that does not read fails at its deadline after %d whole frames: %s",
       sent, err);
    rc = dsv4_pd_conn_send(a.c, &abort_msg, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == -EPIPE && strstr(err, "sending broken by an earlier failure"),
       "the next send fails at once: %s", err);

    int whole = 0;
    while ((rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(5000), err, sizeof(err))) == 0) {
        whole += m.type == DSV4_PD_LEASE && m.lease.n_tokens == BIG;
        dsv4_pd_msg_clear(&m);
    }
    ok(whole == sent && rc == -ECONNRESET,
       "the peer reads the %d whole frames, then the end of the stream, not its deadline: %s",
       whole, err);
    rc = dsv4_pd_conn_send(b.c, &abort_msg, dsv4_pd_deadline(1000), err, sizeof(err));
    if (rc == 0)
        rc = dsv4_pd_conn_recv(a.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_ABORT,
       "the side whose send failed still receives what the peer sends (%s)", rc ? err : "abort");
    if (rc == 0)
        dsv4_pd_msg_clear(&m);
    free(many);
    pd_unpair(&a, &b);
    return done_testing();
}
