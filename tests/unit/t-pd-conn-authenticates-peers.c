/* t-pd-conn-authenticates-peers: the PD handshake over a real socket pair. Peers with the
 * same secret and geometry connect and exchange messages, each under the next sequence
 * number; a peer with another secret is refused on both sides before any lease could be
 * sent (so it can neither trigger a transfer nor write KV); a geometry mismatch is refused
 * on both sides with a message naming what differs; a frame recorded on one connection and
 * replayed on it or on a new connection is refused; a silent peer ends in -ETIMEDOUT at
 * the deadline (and the call can be repeated); a closed peer in -ECONNRESET. Dialing a TCP
 * listener on loopback connects and shakes hands; dialing a port nobody listens on fails
 * with -ECONNREFUSED. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/tap.h"
#include "tests/unit/pd-conn-pair.h"

int main(void)
{
    plan(17);
    pd_side a, b;
    char err[1024];
    dsv4_pd_msg m;

    pd_pair(&a, &b, pd_pair_secret, 16);
    ok(a.rc == 0 && b.rc == 0, "same secret and geometry: both sides connect (%s / %s)", a.err,
       b.err);
    ok(a.rc == 0 && a.peer.hello.role == DSV4_ROLE_PREFILL &&
           strcmp(a.peer.hello.transport, "local") == 0 && a.peer.hello.blob_len == 4 &&
           b.peer.hello.role == DSV4_ROLE_DECODE,
       "each side has the other's hello");
    int32_t tokens[] = {5, 6, 7};
    uint32_t pages[] = {1, 2};
    dsv4_pd_msg lease = {.type = DSV4_PD_LEASE,
                         .room = 11,
                         .generation = 1,
                         .lease = {1000, tokens, 3, 0, pages, 2, false, 0}};
    int rc = dsv4_pd_conn_send(a.c, &lease, dsv4_pd_deadline(1000), err, sizeof(err));
    if (rc == 0)
        rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_LEASE && m.room == 11 && m.lease.n_tokens == 3,
       "a lease travels after the handshake");
    if (rc == 0)
        dsv4_pd_msg_clear(&m);

    /* a silent peer: timeout, nothing consumed, and the connection still works */
    uint64_t t0 = dsv4_pd_deadline(0);
    rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(100), err, sizeof(err));
    ok(rc == -ETIMEDOUT && dsv4_pd_deadline(0) >= t0 + 100000000ull,
       "a silent peer ends the receive at its deadline: %s", err);
    dsv4_pd_msg abort_msg = {.type = DSV4_PD_ABORT, .room = 11, .generation = 1};
    rc = dsv4_pd_conn_send(a.c, &abort_msg, dsv4_pd_deadline(1000), err, sizeof(err));
    if (rc == 0)
        rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == 0 && m.type == DSV4_PD_ABORT, "and the connection works after the timeout");
    if (rc == 0)
        dsv4_pd_msg_clear(&m);

    /* replay on the same connection: capture a lease off b's socket, then write it into
     * b's stream twice (through a's end of the pair) */
    size_t len;
    rc = dsv4_pd_conn_send(a.c, &lease, dsv4_pd_deadline(1000), err, sizeof(err));
    uint8_t *frame = pd_pair_grab(dsv4_pd_conn_fd(b.c), &len);
    int afd = dsv4_pd_conn_fd(a.c);
    bool sent =
        send(afd, frame, len, 0) == (ssize_t)len && send(afd, frame, len, 0) == (ssize_t)len;
    rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(sent && rc == 0 && m.room == 11, "the captured lease is accepted once");
    if (rc == 0)
        dsv4_pd_msg_clear(&m);
    rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == DSV4_ESTALE && strstr(err, "replayed"), "its replay is refused: %s", err);
    pd_unpair(&a, &b);

    /* replay on a later connection with the same secret: new nonces, new keys */
    pd_pair(&a, &b, pd_pair_secret, 16);
    ok(a.rc == 0 && b.rc == 0, "a second connection");
    afd = dsv4_pd_conn_fd(a.c);
    /* advance a's sequence to the captured frame's, so only the key differs */
    for (int i = 0; i < 3; i++) {
        dsv4_pd_conn_send(a.c, &abort_msg, dsv4_pd_deadline(1000), err, sizeof(err));
        if (dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err)) == 0)
            dsv4_pd_msg_clear(&m);
    }
    sent = send(afd, frame, len, 0) == (ssize_t)len;
    rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(sent && rc == DSV4_EPEER && strstr(err, "authentication failed"),
       "a frame from an earlier connection is refused on a new one: %s", err);
    free(frame);
    pd_unpair(&a, &b);

    /* wrong secret: refused on both sides, so no lease can follow */
    pd_pair(&a, &b, "not the shared secret at all", 16);
    ok(a.rc == DSV4_EPEER && strstr(a.err, "does not verify with our shared secret"),
       "a peer with another secret is refused: %s", a.err);
    ok(b.rc == DSV4_EPEER, "and it refuses us too: %s", b.err);
    rc = dsv4_pd_conn_send(b.c, &lease, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc != 0, "the refused peer cannot send a lease: %s", err);
    pd_unpair(&a, &b);

    /* geometry mismatch: both sides say what differs */
    pd_pair(&a, &b, pd_pair_secret, 32);
    ok(a.rc == DSV4_EPEER &&
           strstr(a.err, "geometry differs (page_tokens 16 here, 32 at the peer)"),
       "a geometry mismatch is refused with what differs: %s", a.err);
    ok(b.rc == DSV4_EPEER && strstr(b.err, "page_tokens 32 here, 16 at the peer"),
       "on both sides: %s", b.err);
    pd_unpair(&a, &b);

    /* a closed peer */
    pd_pair(&a, &b, pd_pair_secret, 16);
    dsv4_pd_conn_free(a.c);
    a.c = NULL;
    rc = dsv4_pd_conn_recv(b.c, &m, dsv4_pd_deadline(1000), err, sizeof(err));
    ok(rc == -ECONNRESET && strstr(err, "peer closed"), "a closed peer: %s", err);
    dsv4_pd_msg_clear(&a.peer);
    dsv4_pd_msg_clear(&b.peer);
    dsv4_pd_conn_free(b.c);

    /* over TCP on loopback */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 4) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        bail_out("listen on loopback");
    char port[16];
    snprintf(port, sizeof(port), "%u", ntohs(sa.sin_port));
    int cfd = dsv4_pd_dial("127.0.0.1", port, dsv4_pd_deadline(5000), err, sizeof(err));
    int sfd = cfd >= 0 ? accept(lfd, NULL, NULL) : -1;
    bool shook = false;
    if (cfd >= 0 && sfd >= 0) {
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.c = dsv4_pd_conn_new(cfd, pd_pair_secret, strlen(pd_pair_secret), err, sizeof(err));
        b.c = dsv4_pd_conn_new(sfd, pd_pair_secret, strlen(pd_pair_secret), err, sizeof(err));
        a.hello = pd_pair_hello(DSV4_ROLE_DECODE, 16, "ucx");
        b.hello = pd_pair_hello(DSV4_ROLE_PREFILL, 16, "ucx");
        pthread_t t;
        pthread_create(&t, NULL, pd_pair_handshake, &b);
        pd_pair_handshake(&a);
        pthread_join(t, NULL);
        shook = a.rc == 0 && b.rc == 0;
        pd_unpair(&a, &b);
    }
    ok(shook, "dial a TCP listener on loopback and shake hands over it");
    close(lfd);
    /* a port held by a socket that only binds: nobody listens there, and nobody can start
     * to while it is held (a closed port could be taken by a test running alongside) */
    int held = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_port = 0;
    sl = sizeof(sa);
    if (held < 0 || bind(held, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(held, (struct sockaddr *)&sa, &sl) != 0)
        bail_out("bind on loopback");
    snprintf(port, sizeof(port), "%u", ntohs(sa.sin_port));
    int rc2 = dsv4_pd_dial("127.0.0.1", port, dsv4_pd_deadline(5000), err, sizeof(err));
    ok(rc2 == -ECONNREFUSED && strstr(err, port), "dialing a port nobody listens on is refused: %s",
       err);
    close(held);
    return done_testing();
}
