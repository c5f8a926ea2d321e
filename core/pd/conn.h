/* conn.h: one PD control connection over a connected TCP socket (DESIGN.md §8).
 *
 * Blocking calls with deadlines: every call takes an absolute CLOCK_MONOTONIC deadline
 * (dsv4_pd_deadline), waits with poll() and fails with -ETIMEDOUT when it passes, so no
 * state of the protocol can wait forever on a silent peer.
 *
 * Handshake (dsv4_pd_conn_handshake, both sides call it):
 *   1. each side sends HELLO (its fresh random nonce, role, geometry, transport name and
 *      blob), MAC'd with the shared secret;
 *   2. each side derives its session keys, send = HMAC(secret, "dsv4d-pd-1" | own nonce |
 *      peer nonce) and receive = the same with the nonces swapped, and checks the peer's
 *      geometry: on a mismatch it sends ERROR naming what differs and fails;
 *   3. each side sends READY under its session key and waits for the peer's READY.
 * A peer without the secret cannot produce step 3, so it never gets past the handshake:
 * it can neither trigger a transfer nor learn an rkey it could use (an unauthenticated
 * HELLO is only trusted after READY verifies). Every later frame carries the next
 * sequence number of its direction; anything out of order is refused.
 *
 * One thread may receive while others send (the senders serialize among themselves): the
 * two directions keep their own state, so a receive waiting for the rest of a frame never
 * fails a send. After a failed receive the receiving direction is broken (the stream
 * position is unknown): the caller closes the connection. After a failed send the sending
 * direction is broken and half-closed (shutdown SHUT_WR), so the peer reads the end of the
 * stream and winds the connection down instead of waiting for frames that cannot come.
 * The connection owns fd and closes it in dsv4_pd_conn_free.
 */
#ifndef DSV4_CORE_PD_CONN_H
#define DSV4_CORE_PD_CONN_H

#include "core/pd/wire.h"

/* The shortest shared secret accepted (bytes). */
#define DSV4_PD_MIN_SECRET 16

typedef struct dsv4_pd_conn dsv4_pd_conn;

/* Now + ms on the monotonic clock, in nanoseconds. */
uint64_t dsv4_pd_deadline(uint32_t ms);

/* Connects to host:port over TCP within the deadline (non-blocking connect, then poll), with
 * TCP_NODELAY set (frames are small and latency-bound). The socket, or -ETIMEDOUT,
 * -ECONNREFUSED, -EHOSTUNREACH ..., DSV4_EPEER when the name does not resolve; err says
 * which. */
int dsv4_pd_dial(const char *host, const char *port, uint64_t deadline_ns, char *err,
                 size_t errlen);

/* NULL with the reason in err (secret shorter than DSV4_PD_MIN_SECRET, out of memory). */
dsv4_pd_conn *dsv4_pd_conn_new(int fd, const void *secret, size_t secret_len, char *err,
                               size_t errlen);
void dsv4_pd_conn_free(dsv4_pd_conn *c);

/* The handshake above. mine: our hello (its nonce is filled here); geom_mine: what the
 * peer's geometry must equal. On success *peer_p holds the peer's hello (clear it with
 * dsv4_pd_msg_clear). 0; DSV4_EPEER (geometry differs, the peer refused us, or it does
 * not hold the secret); DSV4_EFORMAT; -ETIMEDOUT; -ECONNRESET; err says which. */
int dsv4_pd_conn_handshake(dsv4_pd_conn *c, const dsv4_pd_hello *mine, dsv4_pd_msg *peer_p,
                           uint64_t deadline_ns, char *err, size_t errlen);

/* Sends one message (after the handshake). 0, -ETIMEDOUT, -EPIPE/-ECONNRESET, -EINVAL. */
int dsv4_pd_conn_send(dsv4_pd_conn *c, const dsv4_pd_msg *m, uint64_t deadline_ns, char *err,
                      size_t errlen);

/* Receives one message (after the handshake) into *m_p (clear it with dsv4_pd_msg_clear).
 * 0; -ETIMEDOUT (nothing is consumed when no byte of a frame had arrived, so the call can
 * be repeated); -ECONNRESET (peer closed); DSV4_EFORMAT, DSV4_EPEER, DSV4_ESTALE as
 * dsv4_pd_frame_open (the connection is then broken). */
int dsv4_pd_conn_recv(dsv4_pd_conn *c, dsv4_pd_msg *m_p, uint64_t deadline_ns, char *err,
                      size_t errlen);

/* The socket, for poll() by an event loop (readable = a frame is arriving). */
int dsv4_pd_conn_fd(const dsv4_pd_conn *c);

#endif
