/* pd_priv.h: what the PD role files share (pd_common.c, pd_prefill.c, pd_decode.c): the
 * role's state, the per-request lease record and the helpers both roles use. */
#ifndef DSV4_CORE_SERVE_PD_PRIV_H
#define DSV4_CORE_SERVE_PD_PRIV_H

#include <stdatomic.h>

#include <dsv4d/transport.h>

#include "core/pd/conn.h"
#include "core/serve/pd.h"

typedef struct dsv4_pd_prefill dsv4_pd_prefill; /* pd_prefill.c */
typedef struct dsv4_pd_decode dsv4_pd_decode;   /* pd_decode.c */
typedef struct dsv4_pd_job dsv4_pd_job;

struct dsv4_pd {
    dsv4_server *srv;
    int role; /* dsv4_role */
    uint32_t bootstrap_ms, waiting_ms, transfer_ms, retries;
    char *secret;
    size_t secret_len;
    dsv4_host host; /* what the transport plugin keeps a pointer to */
    const dsv4_plugin_desc *tdesc;
    const dsv4_transport_ops *tops;
    void *tstate;
    const dsv4_kv_layout *layout; /* the engine's pool */
    dsv4_pd_buf_geom *bufs;       /* [layout->n_buffers], what hello.geom points into */
    dsv4_pd_hello hello;          /* ours (its nonce is filled per handshake) */
    uint8_t *blob;                /* decode: the transport's expose() blob */
    atomic_bool stop;             /* the role's threads end */
    dsv4_pd_prefill *pre;
    dsv4_pd_decode *dec;
};

/* A request's lease. On a prefill server it belongs to the connection the lease came in
 * on; on a decode server to its request (one per request in the PD state). */
struct dsv4_pd_job {
    dsv4_link link; /* prefill: its connection's list */
    dsv4_sreq *r;   /* decode: the request */
    uint64_t room, gen;
    uint64_t deadline_ns, t_lease_ns;
    uint32_t n_kv;       /* prompt tokens whose KV the decode server gets */
    uint32_t first_page; /* their pages before this one are the decode server's own (its
                          * prefix cache): the lease moves the rest and the state */
    /* prefill */
    struct dsv4_pd_pconn *conn;
    uint64_t id;          /* the loop's request id */
    atomic_bool abort;    /* the decode asked: answer ABORT_ACK once drained */
    atomic_int status;    /* why the lease failed (0 while it has not) */
    bool ok;              /* the writes landed: answer COMPLETE with the sums */
    uint32_t *dst, n_dst; /* destination pages in the decode pool */
    uint32_t dst_slot;
    uint64_t *sums;
    size_t n_sums;
    dsv4_xfer_run *runs;
    void *xfer;
    uint64_t landed_by_ns; /* engine thread: posted + [pd] transfer_timeout */
    /* decode */
    int state; /* pd_decode.c's lease state */
    struct dsv4_pd_peer *peer, *last_peer;
    uint32_t attempts;
    int why;        /* what failed the attempt being aborted */
    bool cancelled; /* the client went away (or the server stops): no retry */
    /* decode, two-sided transports: our receives of the lease, and what waits for them */
    void *rx;         /* recv_post()'s transfer, until it settled and was released */
    bool acked;       /* ABORTING: the sender drained; retry once rx drained too */
    bool has_done;    /* LEASED: a good COMPLETE arrived before rx finished */
    dsv4_pd_msg done; /* ... that COMPLETE */
};

/* Splits "host:port" (the config checker already accepted it) into its parts. */
void dsv4_pd_split_addr(const char *addr, char *host, size_t host_len, char *port, size_t port_len);
/* Wake the engine thread (a message arrived, a peer came or went). */
void dsv4_pd_kick(dsv4_server *srv);
/* Sends m on *cp (read under mu, which guards the connection's lifetime; NULL = not
 * connected) within the bootstrap deadline; logs a failure with `who`. 0 or negative. */
int dsv4_pd_send(dsv4_pd *pd, dsv4_pd_conn *const *cp, pthread_mutex_t *mu, const dsv4_pd_msg *m,
                 const char *who);
/* Waits up to ms for fd to become readable: 1 readable, 0 not yet, negative on error. */
int dsv4_pd_wait_readable(int fd, int ms);
/* The transport fills the two-sided ops (bootstrap, accept, recv_post: transport.h). */
bool dsv4_pd_two_sided(const dsv4_pd *pd);
/* Bytes one request of n_pages pages (and its state slot) moves. */
uint64_t dsv4_pd_bytes(const dsv4_pd *pd, uint32_t n_pages);

/* Role halves (pd_prefill.c, pd_decode.c). */
int dsv4_pd_prefill_open(dsv4_pd *pd, const dsv4_config *conf, char *err, size_t errlen);
void dsv4_pd_prefill_close(dsv4_pd *pd);
void dsv4_pd_prefill_step(dsv4_server *srv);
int dsv4_pd_decode_open(dsv4_pd *pd, const dsv4_config *conf, char *err, size_t errlen);
void dsv4_pd_decode_close(dsv4_pd *pd);
void dsv4_pd_decode_step(dsv4_server *srv);

#endif
