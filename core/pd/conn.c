/* conn.c: deadline-bounded socket I/O, session keys and the handshake (see conn.h). */
#include "core/pd/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/util/clock.h"

#define DSV4_PD_KEY_LABEL "dsv4d-pd-1"

struct dsv4_pd_conn {
    int fd;
    /* Each direction's own: the receiving thread and the (serialized) senders use the
     * connection at the same time, so a receive in progress never fails a send. */
    bool send_broken, recv_broken;
    uint8_t *secret;
    size_t secret_len;
    uint8_t send_key[32], recv_key[32];
    bool keyed;
    uint64_t send_seq, recv_seq; /* the next sequence number each way */
};

uint64_t dsv4_pd_deadline(uint32_t ms)
{
    return dsv4_now_ns() + (uint64_t)ms * 1000000u;
}

/* Waits for events on fd until the deadline: 0, -ETIMEDOUT or -errno. */
static int dsv4_pd_wait(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = dsv4_now_ns();
        if (now >= deadline_ns)
            return -ETIMEDOUT;
        uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left_ms > 60000 ? 60000 : (int)left_ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Moves len bytes (send when out != NULL) within the deadline; *done_p counts what moved. */
static int dsv4_pd_io(int fd, const uint8_t *out, uint8_t *in, size_t len, size_t *done_p,
                      uint64_t deadline_ns)
{
    size_t done = 0;
    int rc = 0;
    while (done < len) {
        ssize_t n = out ? send(fd, out + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, in + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0) {
            rc = -ECONNRESET;
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = -errno;
            break;
        }
        rc = dsv4_pd_wait(fd, out ? POLLOUT : POLLIN, deadline_ns);
        if (rc != 0)
            break;
    }
    *done_p = done;
    return rc;
}

static const char *dsv4_pd_io_text(int rc)
{
    return rc == -ETIMEDOUT    ? "deadline passed"
           : rc == -ECONNRESET ? "peer closed the connection"
                               : strerror(-rc);
}

/* One connect attempt to one address: the socket or a negative errno. */
static int dsv4_pd_dial_one(const struct addrinfo *ai, uint64_t deadline_ns)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
    if (rc == -EINPROGRESS) {
        rc = dsv4_pd_wait(fd, POLLOUT, deadline_ns);
        int so = 0;
        socklen_t len = sizeof(so);
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) == 0)
            rc = -so;
    }
    int one = 1;
    if (rc == 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (rc == 0)
        return fd;
    close(fd);
    return rc;
}

int dsv4_pd_dial(const char *host, const char *port, uint64_t deadline_ns, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "pd dial %s:%s: %s", host, port, gai_strerror(gai));
        return DSV4_EPEER;
    }
    int rc = -EHOSTUNREACH;
    for (const struct addrinfo *ai = res; ai && rc < 0 && rc != -ETIMEDOUT; ai = ai->ai_next)
        rc = dsv4_pd_dial_one(ai, deadline_ns);
    freeaddrinfo(res);
    if (rc < 0)
        snprintf(err, errlen, "pd dial %s:%s: %s", host, port, dsv4_pd_io_text(rc));
    return rc;
}

dsv4_pd_conn *dsv4_pd_conn_new(int fd, const void *secret, size_t secret_len, char *err,
                               size_t errlen)
{
    if (secret_len < DSV4_PD_MIN_SECRET) {
        snprintf(err, errlen, "pd connection: shared secret too short (%zu bytes, at least %d)",
                 secret_len, DSV4_PD_MIN_SECRET);
        return NULL;
    }
    dsv4_pd_conn *c = calloc(1, sizeof(*c));
    uint8_t *s = malloc(secret_len);
    if (!c || !s) {
        free(c);
        free(s);
        snprintf(err, errlen, "pd connection: out of memory");
        return NULL;
    }
    memcpy(s, secret, secret_len);
    *c = (dsv4_pd_conn){.fd = fd, .secret = s, .secret_len = secret_len};
    return c;
}

void dsv4_pd_conn_free(dsv4_pd_conn *c)
{
    if (!c)
        return;
    close(c->fd);
    OPENSSL_cleanse(c->secret, c->secret_len);
    OPENSSL_cleanse(c->send_key, sizeof(c->send_key));
    OPENSSL_cleanse(c->recv_key, sizeof(c->recv_key));
    free(c->secret);
    free(c);
}

int dsv4_pd_conn_fd(const dsv4_pd_conn *c)
{
    return c->fd;
}

/* The handshake failed: neither direction may be used. */
static void dsv4_pd_conn_fail_handshake(dsv4_pd_conn *c)
{
    c->send_broken = c->recv_broken = true;
}

static int dsv4_pd_send_keyed(dsv4_pd_conn *c, const uint8_t *key, size_t key_len,
                              const dsv4_pd_msg *m, uint64_t deadline_ns, char *err, size_t errlen)
{
    if (c->send_broken) {
        snprintf(err, errlen, "pd connection: sending broken by an earlier failure");
        return -EPIPE;
    }
    uint8_t *frame;
    size_t len, done;
    int rc = dsv4_pd_frame_seal(key, key_len, c->send_seq, m, &frame, &len, err, errlen);
    if (rc != 0)
        return rc;
    rc = dsv4_pd_io(c->fd, frame, NULL, len, &done, deadline_ns);
    free(frame);
    if (rc != 0) {
        /* part of a frame may have gone out, or a frame the peer waits for did not: the
         * stream ends here, and the peer's receive sees that rather than a deadline */
        c->send_broken = true;
        shutdown(c->fd, SHUT_WR);
        snprintf(err, errlen, "pd send %s: %s", dsv4_pd_type_name(m->type), dsv4_pd_io_text(rc));
        return rc;
    }
    c->send_seq++;
    return 0;
}

static int dsv4_pd_recv_keyed(dsv4_pd_conn *c, const uint8_t *key, size_t key_len, dsv4_pd_msg *m_p,
                              uint64_t deadline_ns, char *err, size_t errlen)
{
    if (c->recv_broken) {
        snprintf(err, errlen, "pd connection: receiving broken by an earlier failure");
        return -EPIPE;
    }
    uint8_t header[DSV4_PD_HEADER_BYTES];
    size_t rest, done;
    int rc = dsv4_pd_io(c->fd, NULL, header, sizeof(header), &done, deadline_ns);
    if (rc != 0) {
        c->recv_broken = rc != -ETIMEDOUT || done > 0;
        snprintf(err, errlen, "pd receive: %s", dsv4_pd_io_text(rc));
        return rc;
    }
    c->recv_broken = true; /* until the frame is whole and valid */
    rc = dsv4_pd_frame_header(header, &rest, err, errlen);
    if (rc != 0)
        return rc;
    uint8_t *frame = malloc(sizeof(header) + rest);
    if (!frame) {
        snprintf(err, errlen, "pd receive: out of memory (%zu bytes)", rest);
        return -ENOMEM;
    }
    memcpy(frame, header, sizeof(header));
    rc = dsv4_pd_io(c->fd, NULL, frame + sizeof(header), rest, &done, deadline_ns);
    if (rc != 0)
        snprintf(err, errlen, "pd receive: %s", dsv4_pd_io_text(rc));
    else
        rc = dsv4_pd_frame_open(key, key_len, c->recv_seq, frame, sizeof(header) + rest, m_p, err,
                                errlen);
    free(frame);
    if (rc != 0)
        return rc;
    c->recv_broken = false;
    c->recv_seq++;
    return 0;
}

int dsv4_pd_conn_send(dsv4_pd_conn *c, const dsv4_pd_msg *m, uint64_t deadline_ns, char *err,
                      size_t errlen)
{
    if (!c->keyed || m->type == DSV4_PD_HELLO || m->type == DSV4_PD_READY) {
        snprintf(err, errlen, "pd send %s: not allowed outside the handshake",
                 dsv4_pd_type_name(m->type));
        return -EINVAL;
    }
    return dsv4_pd_send_keyed(c, c->send_key, sizeof(c->send_key), m, deadline_ns, err, errlen);
}

int dsv4_pd_conn_recv(dsv4_pd_conn *c, dsv4_pd_msg *m_p, uint64_t deadline_ns, char *err,
                      size_t errlen)
{
    if (!c->keyed) {
        snprintf(err, errlen, "pd receive: the handshake has not completed");
        return -EINVAL;
    }
    dsv4_pd_msg m;
    int rc = dsv4_pd_recv_keyed(c, c->recv_key, sizeof(c->recv_key), &m, deadline_ns, err, errlen);
    if (rc != 0)
        return rc;
    if (m.type == DSV4_PD_HELLO || m.type == DSV4_PD_READY) {
        snprintf(err, errlen, "pd receive: %s after the handshake", dsv4_pd_type_name(m.type));
        dsv4_pd_msg_clear(&m);
        c->recv_broken = true;
        return DSV4_EFORMAT;
    }
    *m_p = m;
    return 0;
}

static void dsv4_pd_derive(const dsv4_pd_conn *c, const uint8_t *first, const uint8_t *second,
                           uint8_t key[32])
{
    uint8_t in[sizeof(DSV4_PD_KEY_LABEL) - 1 + 2 * DSV4_PD_NONCE_BYTES];
    memcpy(in, DSV4_PD_KEY_LABEL, sizeof(DSV4_PD_KEY_LABEL) - 1);
    memcpy(in + sizeof(DSV4_PD_KEY_LABEL) - 1, first, DSV4_PD_NONCE_BYTES);
    memcpy(in + sizeof(DSV4_PD_KEY_LABEL) - 1 + DSV4_PD_NONCE_BYTES, second, DSV4_PD_NONCE_BYTES);
    unsigned int n = 32;
    HMAC(EVP_sha256(), c->secret, (int)c->secret_len, in, sizeof(in), key, &n);
}

/* Step 2 and 3 of the handshake, after the HELLOs crossed. */
static int dsv4_pd_conn_confirm(dsv4_pd_conn *c, const dsv4_pd_hello *mine, const dsv4_pd_msg *peer,
                                uint64_t deadline_ns, char *err, size_t errlen)
{
    if (memcmp(mine->nonce, peer->hello.nonce, DSV4_PD_NONCE_BYTES) == 0) {
        dsv4_pd_conn_fail_handshake(c);
        snprintf(err, errlen, "pd handshake: the peer echoed our nonce (reflected hello)");
        return DSV4_EPEER;
    }
    dsv4_pd_derive(c, mine->nonce, peer->hello.nonce, c->send_key);
    dsv4_pd_derive(c, peer->hello.nonce, mine->nonce, c->recv_key);
    c->keyed = true;

    char why[1024];
    int refused = dsv4_pd_geom_compare(&mine->geom, &peer->hello.geom, why, sizeof(why));
    dsv4_pd_msg m = {.type = refused ? DSV4_PD_ERROR : DSV4_PD_READY,
                     .error = {.code = refused, .text = why}};
    int rc = dsv4_pd_send_keyed(c, c->send_key, sizeof(c->send_key), &m, deadline_ns, err, errlen);
    if (refused) {
        snprintf(err, errlen, "%s", why);
        dsv4_pd_conn_fail_handshake(c);
        return refused;
    }
    if (rc != 0)
        return rc;
    rc = dsv4_pd_recv_keyed(c, c->recv_key, sizeof(c->recv_key), &m, deadline_ns, err, errlen);
    if (rc == DSV4_EPEER) {
        snprintf(err, errlen, "pd handshake: the peer does not hold our shared secret");
        return rc;
    }
    if (rc != 0)
        return rc;
    if (m.type != DSV4_PD_READY) {
        if (m.type == DSV4_PD_ERROR)
            snprintf(err, errlen, "pd handshake: the peer refused (%s)", m.error.text);
        else
            snprintf(err, errlen, "pd handshake: %s where ready was expected",
                     dsv4_pd_type_name(m.type));
        dsv4_pd_msg_clear(&m);
        dsv4_pd_conn_fail_handshake(c);
        return DSV4_EPEER;
    }
    return 0;
}

int dsv4_pd_conn_handshake(dsv4_pd_conn *c, const dsv4_pd_hello *mine, dsv4_pd_msg *peer_p,
                           uint64_t deadline_ns, char *err, size_t errlen)
{
    if (c->keyed || c->send_seq != 0) {
        snprintf(err, errlen, "pd handshake: already done on this connection");
        return -EINVAL;
    }
    dsv4_pd_msg hello = {.type = DSV4_PD_HELLO, .hello = *mine};
    if (RAND_bytes(hello.hello.nonce, DSV4_PD_NONCE_BYTES) != 1) {
        snprintf(err, errlen, "pd handshake: no random nonce (openssl RAND_bytes failed)");
        return -EIO;
    }
    int rc = dsv4_pd_send_keyed(c, c->secret, c->secret_len, &hello, deadline_ns, err, errlen);
    if (rc != 0)
        return rc;
    dsv4_pd_msg peer;
    rc = dsv4_pd_recv_keyed(c, c->secret, c->secret_len, &peer, deadline_ns, err, errlen);
    if (rc == 0 && peer.type != DSV4_PD_HELLO) {
        snprintf(err, errlen, "pd handshake: %s where hello was expected",
                 dsv4_pd_type_name(peer.type));
        dsv4_pd_msg_clear(&peer);
        dsv4_pd_conn_fail_handshake(c);
        rc = DSV4_EFORMAT;
    } else if (rc == DSV4_EPEER) {
        snprintf(err, errlen,
                 "pd handshake: the peer's hello does not verify with our shared "
                 "secret");
    }
    if (rc != 0)
        return rc;
    rc = dsv4_pd_conn_confirm(c, &hello.hello, &peer, deadline_ns, err, errlen);
    if (rc != 0) {
        dsv4_pd_msg_clear(&peer);
        return rc;
    }
    *peer_p = peer;
    return 0;
}
