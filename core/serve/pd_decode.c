/* pd_decode.c: the decode role (pd.h, DESIGN.md §8): leases, deadlines, verification,
 * retries and drain-before-free.
 *
 * Peers: one thread per [pd] peers entry connects, runs the handshake (our geometry and
 * the transport blob that exposes the whole pool, once per peer) and turns every frame it
 * reads into an event for the engine thread. When the connection fails it half-closes its
 * side and keeps reading until the prefill side closes too, and only then reports the peer
 * gone; then it reconnects.
 *
 * A lease names the prompt (all its tokens: the prefill server computes the whole KV) and
 * the destination of the pages after those the request adopted from this server's own
 * prefix cache (first_page), plus the state slot: a turn of a session moves only what the
 * previous turns did not leave here. The adopted pages are read-only and shared; the
 * completion's checksums cover exactly the moved pages and the state.
 *
 * A request's lease moves through these states, each with a deadline:
 *   PENDING   no prefill server took it yet: [pd] bootstrap_timeout to find a connected
 *             peer (least outstanding leases first) and send LEASE;
 *   LEASED    LEASE sent: waiting_timeout + transfer_timeout for COMPLETE (the prefill
 *             server enforces the lease's own deadline, their sum, and answers in time);
 *   ABORTING  ABORT sent after a deadline, a checksum mismatch, a failed completion or an
 *             ERROR: bootstrap_timeout for ABORT_ACK (or a COMPLETE of the same
 *             generation: both are sent only once nothing of the lease is in flight).
 * The pages are reused (for the retry, or freed) only after that drain signal. A retry
 * goes to another peer where one is up, with a new generation; after [pd] retries retries
 * the client gets an error. Frames of any other generation are stale: rejected, counted.
 *
 * Quarantine (dead or silent peers): when ABORTING passes its deadline, or the connection
 * fails with leases outstanding, nobody can say that no write is in flight. The request's
 * sequence (pages and state slot) then leaves the pool's reach: it is kept aside, the
 * request retries with a fresh sequence, and the kept one is freed only when the peer is
 * gone — its end of the connection closed, which the prefill server does only after every
 * lease on it drained and it detached from our pool, or which happens when its process
 * died (for transport/local its mapping of our pool died with it; for ucx its endpoints).
 * A peer that never closes keeps its quarantined pages for the server's lifetime, counted
 * in dsv4d_pd_quarantined_pages: never reused while a write could land in them.
 *
 * Two-sided transports (transport/nccl): the pages are written by receives this server
 * posts. A BOOTSTRAP from the prefill creates or rebuilds our end of its connection
 * (accept); an XFER names the request the prefill just posted, whose destination pages
 * must be exactly the lease's, and we post its receives (recv_post) at once, in whatever
 * state the lease is (the pages are still ours, and skipping one would pair the next
 * request's sends with these receives). A lease then completes only when both the
 * COMPLETE arrived and the receives finished; an aborted lease is retried only when both
 * the sender's drain signal came and our receives drained (cancel() returns 0); a peer
 * that is gone is detached first, which ends every receive of it.
 */
#include "core/serve/pd_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/pd/checksum.h"
#include "core/serve/metrics.h"
#include "core/util/log.h"
#include "core/util/status.h"

#define PD_TICK_MS 100   /* how often blocked peer threads look at the stop flag */
#define PD_REDIAL_MS 200 /* pause between connection attempts */

enum { PD_PENDING, PD_LEASED, PD_ABORTING };

typedef struct dsv4_pd_peer {
    dsv4_pd *pd;
    char addr[300], host[256], port[32];
    pthread_t thread;
    pthread_mutex_t mu; /* conn, up: the engine thread sends under it */
    dsv4_pd_conn *conn; /* NULL while down */
    bool up;
    /* engine thread only */
    void *rpeer;          /* two-sided transports: our end of its connection (accept) */
    uint32_t outstanding; /* leases LEASED or ABORTING on it */
    uint32_t *quarantine; /* [n_slots] sequences kept aside until the peer is gone */
    uint32_t n_quarantine, quarantine_pages;
} dsv4_pd_peer;

typedef enum { PD_EV_MSG, PD_EV_GONE } pd_ev_kind;

typedef struct pd_event {
    struct pd_event *next;
    pd_ev_kind kind;
    dsv4_pd_peer *peer;
    dsv4_pd_msg m;
} pd_event;

struct dsv4_pd_decode {
    dsv4_pd_peer *peers;
    uint32_t n_peers;
    pthread_mutex_t mu; /* events */
    pd_event *head, **tail;
    uint64_t next_gen;    /* engine thread */
    uint32_t quarantined; /* pages, all peers */
};

static void pd_push(dsv4_pd *pd, pd_ev_kind kind, dsv4_pd_peer *peer, const dsv4_pd_msg *m)
{
    pd_event *ev = calloc(1, sizeof(*ev));
    if (!ev) {
        /* a lost frame only makes its lease run into its deadline */
        if (m)
            dsv4_pd_msg_clear((dsv4_pd_msg *)m);
        return;
    }
    ev->kind = kind;
    ev->peer = peer;
    if (m)
        ev->m = *m;
    dsv4_pd_decode *dec = pd->dec;
    pthread_mutex_lock(&dec->mu);
    *dec->tail = ev;
    dec->tail = &ev->next;
    pthread_mutex_unlock(&dec->mu);
    dsv4_pd_kick(pd->srv);
}

/* The connected part of a peer thread: handshake, then frames until the connection fails. */
static void pd_peer_session(dsv4_pd_peer *p, int fd, char *last_err, size_t last_len)
{
    dsv4_pd *pd = p->pd;
    char err[512];
    dsv4_pd_conn *c = dsv4_pd_conn_new(fd, pd->secret, pd->secret_len, err, sizeof(err));
    if (!c) {
        close(fd);
        return;
    }
    dsv4_pd_msg peer = {0};
    int rc = dsv4_pd_conn_handshake(c, &pd->hello, &peer, dsv4_pd_deadline(pd->bootstrap_ms), err,
                                    sizeof(err));
    if (rc == 0 && peer.hello.role != DSV4_ROLE_PREFILL) {
        snprintf(err, sizeof(err), "pd handshake: the peer is not a prefill server");
        rc = DSV4_EPEER;
    }
    dsv4_pd_msg_clear(&peer);
    if (rc != 0) {
        /* say it once per distinct reason, not once per attempt */
        if (strcmp(err, last_err) != 0)
            dsv4_log(DSV4_LOG_ERROR, "pd", "prefill %s refused (%s)", p->addr, err);
        snprintf(last_err, last_len, "%s", err);
        dsv4_pd_conn_free(c);
        return;
    }
    last_err[0] = '\0';
    pthread_mutex_lock(&p->mu);
    p->conn = c;
    p->up = true;
    pthread_mutex_unlock(&p->mu);
    dsv4_log(DSV4_LOG_INFO, "pd", "prefill %s connected", p->addr);
    dsv4_pd_kick(pd->srv);
    for (;;) {
        int ready = dsv4_pd_wait_readable(fd, PD_TICK_MS);
        if (atomic_load(&pd->stop))
            break;
        if (ready == 0)
            continue;
        dsv4_pd_msg m;
        rc = ready < 0
                 ? ready
                 : dsv4_pd_conn_recv(c, &m, dsv4_pd_deadline(pd->bootstrap_ms), err, sizeof(err));
        if (rc != 0) {
            dsv4_log(DSV4_LOG_WARN, "pd", "prefill %s: connection lost (%s)", p->addr,
                     rc == -ECONNRESET ? "closed by the peer" : err);
            break;
        }
        if (m.type == DSV4_PD_ERROR && m.room == 0) {
            dsv4_log(DSV4_LOG_ERROR, "pd", "prefill %s refused us (%s)", p->addr,
                     m.error.text ? m.error.text : "no reason");
            dsv4_pd_msg_clear(&m);
            continue;
        }
        pd_push(pd, PD_EV_MSG, p, &m);
    }
    pthread_mutex_lock(&p->mu);
    p->up = false;
    p->conn = NULL;
    pthread_mutex_unlock(&p->mu);
    /* wait for the prefill side to close: it does so only once nothing is in flight */
    shutdown(fd, SHUT_WR);
    char sink[4096];
    while (!atomic_load(&pd->stop)) {
        int ready = dsv4_pd_wait_readable(fd, PD_TICK_MS);
        if (ready < 0 || (ready > 0 && read(fd, sink, sizeof(sink)) <= 0))
            break;
    }
    dsv4_pd_conn_free(c);
    pd_push(pd, PD_EV_GONE, p, NULL);
}

static void *pd_peer_main(void *arg)
{
    dsv4_pd_peer *p = arg;
    dsv4_pd *pd = p->pd;
    char err[512], last_err[512] = "";
    while (!atomic_load(&pd->stop)) {
        int fd =
            dsv4_pd_dial(p->host, p->port, dsv4_pd_deadline(pd->bootstrap_ms), err, sizeof(err));
        if (fd >= 0) {
            pd_peer_session(p, fd, last_err, sizeof(last_err));
        } else if (strcmp(err, last_err) != 0) {
            dsv4_log(DSV4_LOG_WARN, "pd", "prefill %s unreachable (%s)", p->addr, err);
            snprintf(last_err, sizeof(last_err), "%s", err);
        }
        for (int t = 0; t < PD_REDIAL_MS / PD_TICK_MS && !atomic_load(&pd->stop); t++)
            usleep(PD_TICK_MS * 1000);
    }
    return NULL;
}

int dsv4_pd_decode_open(dsv4_pd *pd, const dsv4_config *conf, char *err, size_t errlen)
{
    dsv4_pd_decode *dec = calloc(1, sizeof(*dec));
    uint32_t n = 1;
    for (const char *s = conf->pd.peers; *s; s++)
        n += *s == ',';
    if (!dec || !(dec->peers = calloc(n, sizeof(*dec->peers)))) {
        free(dec);
        snprintf(err, errlen, "pd: out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&dec->mu, NULL);
    dec->tail = &dec->head;
    dec->next_gen = 1;
    pd->dec = dec;
    const char *s = conf->pd.peers;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = strcspn(s, ",");
        dsv4_pd_peer *p = &dec->peers[dec->n_peers];
        while (len && (*s == ' ' || *s == '\t'))
            s++, len--;
        snprintf(p->addr, sizeof(p->addr), "%.*s", (int)len, s);
        for (size_t k = strlen(p->addr); k && (p->addr[k - 1] == ' ' || p->addr[k - 1] == '\t');)
            p->addr[--k] = '\0';
        s += len + (s[len] == ',');
        if (!p->addr[0])
            continue;
        dsv4_pd_split_addr(p->addr, p->host, sizeof(p->host), p->port, sizeof(p->port));
        p->pd = pd;
        /* each quarantined sequence holds a state slot: never more than n_slots */
        p->quarantine = calloc(pd->srv->n_slots, sizeof(uint32_t));
        pthread_mutex_init(&p->mu, NULL);
        if (!p->quarantine || pthread_create(&p->thread, NULL, pd_peer_main, p) != 0) {
            snprintf(err, errlen, "pd: cannot start the thread for prefill %s", p->addr);
            free(p->quarantine);
            pthread_mutex_destroy(&p->mu);
            atomic_store(&pd->stop, true);
            dsv4_pd_decode_close(pd);
            return -EAGAIN;
        }
        dec->n_peers++;
    }
    dsv4_log(DSV4_LOG_INFO, "pd", "decode role: %u prefill servers, transport %s", dec->n_peers,
             pd->tdesc->name);
    return 0;
}

void dsv4_pd_decode_close(dsv4_pd *pd)
{
    dsv4_pd_decode *dec = pd->dec;
    for (uint32_t i = 0; i < dec->n_peers; i++) {
        pthread_join(dec->peers[i].thread, NULL);
        if (dec->peers[i].rpeer)
            pd->tops->detach(pd->tstate, dec->peers[i].rpeer);
        pthread_mutex_destroy(&dec->peers[i].mu);
        free(dec->peers[i].quarantine);
    }
    for (pd_event *ev = dec->head, *next; ev; ev = next) {
        next = ev->next;
        dsv4_pd_msg_clear(&ev->m);
        free(ev);
    }
    pthread_mutex_destroy(&dec->mu);
    free(dec->peers);
    free(dec);
    pd->dec = NULL;
}

bool dsv4_pd_decode_takes(const dsv4_server *srv, const dsv4_sreq *r)
{
    /* a request that scores its prompt needs the prompt's logits: computed here */
    return srv->pd && srv->pd->role == DSV4_ROLE_DECODE && !r->admitted && r->n_prompt > 1 &&
           !r->params.prompt_logprobs;
}

static void pd_quarantine_gauge(dsv4_pd_decode *dec)
{
    dsv4_metric_set(DSV4_M_PD_QUARANTINED_PAGES, dec->quarantined);
}

/* No more leases to p on this connection: half-close it (the peer drains, then closes). */
static void pd_peer_drop(dsv4_pd_peer *p)
{
    pthread_mutex_lock(&p->mu);
    p->up = false;
    if (p->conn)
        shutdown(dsv4_pd_conn_fd(p->conn), SHUT_WR);
    pthread_mutex_unlock(&p->mu);
}

/* Forgets a COMPLETE that waited for the receives. */
static void pd_done_drop(dsv4_pd_job *job)
{
    if (job->has_done)
        dsv4_pd_msg_clear(&job->done);
    job->has_done = false;
}

/* True when none of the job's receives can write into its pages any more (released). */
static bool pd_rx_drained(dsv4_server *srv, dsv4_pd_job *job)
{
    dsv4_pd *pd = srv->pd;
    if (!job->rx)
        return true;
    if (pd->tops->cancel(pd->tstate, job->rx) == -EAGAIN)
        return false;
    pd->tops->release(pd->tstate, job->rx);
    job->rx = NULL;
    return true;
}

/* Stops tracking the job's receives without waiting: only for pages that are quarantined
 * until the peer is gone (its detach ends every receive). */
static void pd_rx_abandon(dsv4_server *srv, dsv4_pd_job *job)
{
    if (job->rx)
        srv->pd->tops->release(srv->pd->tstate, job->rx);
    job->rx = NULL;
}

/* Sends ABORT for the job's lease (failed with `why`); its pages wait for the drain signal. */
static void pd_abort(dsv4_server *srv, dsv4_pd_job *job, int why)
{
    dsv4_pd *pd = srv->pd;
    dsv4_pd_peer *p = job->peer;
    dsv4_pd_msg m = {.type = DSV4_PD_ABORT, .room = job->room, .generation = job->gen};
    job->state = PD_ABORTING;
    job->why = why;
    job->acked = false;
    pd_done_drop(job);
    job->deadline_ns = dsv4_now_ns() + (uint64_t)pd->bootstrap_ms * 1000000u;
    /* a failed send leaves the deadline to decide (the connection is failing anyway) */
    dsv4_pd_send(pd, &p->conn, &p->mu, &m, p->addr);
}

static void pd_job_end(dsv4_server *srv, dsv4_pd_job *job)
{
    pd_done_drop(job);
    job->r->pd = NULL;
    free(job);
    (void)srv;
}

/* The job's request ends without its KV (its sequence, if it still has one, goes back). */
static void pd_fail(dsv4_server *srv, dsv4_pd_job *job, int status)
{
    dsv4_sreq *r = job->r;
    bool cancelled = job->cancelled;
    pd_job_end(srv, job);
    if (cancelled)
        dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_ABORT, 0);
    else
        dsv4_serve_finish(srv, r, DSV4_EV_ERROR, DSV4_FINISH_NONE, status);
}

/* The pages the job's lease moves: its sequence's pages after those adopted from the
 * prefix cache (*n_p of them), and its state slot. */
static const uint32_t *pd_lease_pages(dsv4_server *srv, const dsv4_pd_job *job, uint32_t *slot_p,
                                      uint32_t *n_p)
{
    uint32_t n = 0;
    const uint32_t *pages = dsv4_engine_seq_pages(srv->eng, job->r->seq, slot_p, &n);
    *n_p = pages && n > job->first_page ? n - job->first_page : 0;
    return pages ? pages + job->first_page : NULL;
}

/* Picks the connected peer with the fewest outstanding leases, avoiding `avoid` while
 * another one is up; sends LEASE. False when no peer took it. */
static bool pd_lease(dsv4_server *srv, dsv4_pd_job *job)
{
    dsv4_pd *pd = srv->pd;
    dsv4_pd_decode *dec = pd->dec;
    dsv4_sreq *r = job->r;
    dsv4_pd_peer *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++) {
        for (uint32_t i = 0; i < dec->n_peers; i++) {
            dsv4_pd_peer *p = &dec->peers[i];
            pthread_mutex_lock(&p->mu);
            bool up = p->up;
            pthread_mutex_unlock(&p->mu);
            if (up && (pass == 1 || p != job->last_peer) &&
                (!best || p->outstanding < best->outstanding))
                best = p;
        }
    }
    if (!best)
        return false;
    uint32_t slot = 0, n = 0;
    const uint32_t *pages = pd_lease_pages(srv, job, &slot, &n);
    job->gen = dec->next_gen++;
    dsv4_pd_msg m = {.type = DSV4_PD_LEASE,
                     .room = job->room,
                     .generation = job->gen,
                     .lease = {.deadline_ms = pd->waiting_ms + pd->transfer_ms,
                               .tokens = r->toks,
                               .n_tokens = job->n_kv,
                               .first_page = job->first_page,
                               .pages = pages,
                               .n_pages = n,
                               .with_state = true,
                               .state_slot = slot}};
    if (dsv4_pd_send(pd, &best->conn, &best->mu, &m, best->addr) != 0) {
        /* the connection is failing: stop picking this peer; its thread sees the
         * half-close, waits for the peer's end and reports it gone */
        pd_peer_drop(best);
        return false;
    }
    job->peer = best;
    best->outstanding++;
    job->state = PD_LEASED;
    job->t_lease_ns = dsv4_now_ns();
    /* the prefill side's deadline plus one bootstrap period for the answer to travel */
    job->deadline_ns = job->t_lease_ns +
                       (uint64_t)(pd->waiting_ms + pd->transfer_ms + pd->bootstrap_ms) * 1000000u;
    dsv4_metric_add(DSV4_M_PD_LEASES, 1);
    return true;
}

static void pd_pending(dsv4_server *srv, dsv4_pd_job *job)
{
    job->state = PD_PENDING;
    job->deadline_ns = dsv4_now_ns() + (uint64_t)srv->pd->bootstrap_ms * 1000000u;
    pd_lease(srv, job);
}

/* The lease ended without usable KV and nothing of it is in flight: retry or fail. */
static void pd_retry(dsv4_server *srv, dsv4_pd_job *job, int status)
{
    if (job->peer) {
        job->peer->outstanding--;
        job->last_peer = job->peer;
        job->peer = NULL;
    }
    if (job->cancelled || ++job->attempts > srv->pd->retries) {
        if (!job->cancelled)
            dsv4_log(DSV4_LOG_ERROR, "pd",
                     "request %llu: no prefill server delivered its kv "
                     "(%u attempts, last: %s)",
                     (unsigned long long)job->room, job->attempts, dsv4_strerror(status));
        /* the client learns the service is unavailable (the log has the reason) */
        pd_fail(srv, job, -EAGAIN);
        return;
    }
    dsv4_metric_add(DSV4_M_PD_RETRIES, 1);
    pd_pending(srv, job);
}

/* No drain signal can come: the sequence is kept aside until the peer is gone, and the
 * request retries in a fresh one. */
static void pd_quarantine(dsv4_server *srv, dsv4_pd_job *job, int status)
{
    dsv4_pd_decode *dec = srv->pd->dec;
    dsv4_pd_peer *p = job->peer;
    dsv4_sreq *r = job->r;
    uint32_t slot = 0, n = 0;
    pd_lease_pages(srv, job, &slot, &n); /* the pages a write could still land in */
    pd_rx_abandon(srv, job);
    p->quarantine[p->n_quarantine++] = r->seq;
    p->quarantine_pages += n;
    dec->quarantined += n;
    pd_quarantine_gauge(dec);
    dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: %u pages quarantined until prefill %s is gone",
             (unsigned long long)job->room, n, p->addr);
    if (dsv4_engine_seq_new(srv->eng, &r->seq) != 0) {
        dsv4_serve_move(srv, r, DSV4_SREQ_ENDED, false);
        p->outstanding--;
        job->peer = NULL;
        pd_fail(srv, job, -ENOSPC);
        return;
    }
    /* the fresh sequence holds nothing: the retry's lease moves every page */
    job->first_page = 0;
    int rc = dsv4_engine_seq_reserve(srv->eng, r->seq, job->n_kv);
    if (rc != 0) {
        p->outstanding--;
        job->peer = NULL;
        pd_fail(srv, job, rc);
        return;
    }
    pd_retry(srv, job, status);
}

static dsv4_pd_job *pd_find(dsv4_server *srv, uint64_t room)
{
    for (dsv4_link *l = srv->pd_held.next; l != &srv->pd_held; l = l->next) {
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        if (r->pd && r->pd->room == room)
            return r->pd;
    }
    return NULL;
}

static void pd_stale(const pd_event *ev)
{
    dsv4_metric_add(DSV4_M_PD_STALE, 1);
    dsv4_log(DSV4_LOG_INFO, "pd",
             "stale %s from prefill %s rejected (lease %llu.%llu is not "
             "current)",
             dsv4_pd_type_name(ev->m.type), ev->peer->addr, (unsigned long long)ev->m.room,
             (unsigned long long)ev->m.generation);
}

/* COMPLETE for the current lease: verify every block, then the request runs. */
static void pd_complete(dsv4_server *srv, dsv4_pd_job *job, const dsv4_pd_complete *c)
{
    dsv4_pd *pd = srv->pd;
    dsv4_sreq *r = job->r;
    uint32_t slot = 0, n = 0;
    const uint32_t *pages = pd_lease_pages(srv, job, &slot, &n);
    dsv4_pd_blocks b = {pages, n, true, slot};
    if (c->status != 0) {
        dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: prefill %s failed the lease (%s)",
                 (unsigned long long)job->room, job->peer->addr, dsv4_strerror(c->status));
        if (c->status == -ETIMEDOUT)
            dsv4_metric_add(DSV4_M_PD_TIMEOUTS, 1);
        pd_abort(srv, job, c->status);
        return;
    }
    dsv4_pd_sum_bad bad;
    uint32_t n_bad = 0;
    int rc = c->kv_tokens != job->n_kv
                 ? -EINVAL
                 : dsv4_pd_sum_verify(pd->layout, &b, c->sums, c->n_sums, &bad, &n_bad);
    if (rc != 0) {
        char what[256];
        if (rc == DSV4_ECHECKSUM) {
            dsv4_metric_add(DSV4_M_PD_CHECKSUM_MISMATCHES, 1);
            dsv4_pd_sum_bad_text(&bad, what, sizeof(what));
        } else {
            snprintf(what, sizeof(what), "malformed completion (%s)", dsv4_strerror(rc));
        }
        dsv4_log(DSV4_LOG_WARN, "pd", "room %llu from prefill %s: %s (%u blocks differ)",
                 (unsigned long long)job->room, job->peer->addr, what, n_bad);
        pd_abort(srv, job, rc);
        return;
    }
    job->peer->outstanding--;
    dsv4_metric_add(DSV4_M_PD_TRANSFER_BYTES, dsv4_pd_bytes(pd, n));
    dsv4_metric_observe(DSV4_M_PD_TRANSFER_SECONDS,
                        (double)(dsv4_now_ns() - job->t_lease_ns) / 1e9);
    pd_job_end(srv, job);
    r->n_fed = dsv4_engine_seq_len(srv->eng, r->seq);
    dsv4_serve_move(srv, r, DSV4_SREQ_RUNNING, false);
    dsv4_serve_siblings_progress(srv, r, DSV4_GREW_LANDED);
}

static void pd_gone(dsv4_server *srv, dsv4_pd_peer *p)
{
    dsv4_pd *pd = srv->pd;
    dsv4_pd_decode *dec = pd->dec;
    if (p->rpeer) { /* returns once no receive of it can land */
        pd->tops->detach(pd->tstate, p->rpeer);
        p->rpeer = NULL;
    }
    for (dsv4_link *l = srv->pd_held.next, *next; l != &srv->pd_held; l = next) {
        next = l->next;
        dsv4_pd_job *job = DSV4_CONTAINER(l, dsv4_sreq, q)->pd;
        if (job->peer != p)
            continue;
        /* the peer closed: nothing of it is in flight, and detach ended our receives */
        pd_rx_abandon(srv, job);
        pd_done_drop(job);
        pd_retry(srv, job, -ECONNRESET);
    }
    for (uint32_t i = 0; i < p->n_quarantine; i++)
        dsv4_engine_seq_free(srv->eng, p->quarantine[i]);
    if (p->n_quarantine)
        dsv4_log(DSV4_LOG_INFO, "pd", "prefill %s is gone: %u quarantined pages back", p->addr,
                 p->quarantine_pages);
    dec->quarantined -= p->quarantine_pages;
    p->n_quarantine = p->quarantine_pages = 0;
    pd_quarantine_gauge(dec);
}

/* BOOTSTRAP: creates or rebuilds our end of the peer's two-sided connection. */
static void pd_accept(dsv4_server *srv, dsv4_pd_peer *p, const dsv4_pd_msg *m)
{
    dsv4_pd *pd = srv->pd;
    char err[512] = "";
    int rc = -ENOTSUP;
    if (dsv4_pd_two_sided(pd))
        rc = pd->tops->accept(pd->tstate, pd->layout, m->bootstrap.blob, m->bootstrap.blob_len,
                              &p->rpeer, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "transport/%s is one-sided", pd->tdesc->name);
    if (rc == DSV4_ESTALE) {
        dsv4_log(DSV4_LOG_INFO, "pd", "prefill %s: stale transport bootstrap ignored (%s)", p->addr,
                 err);
    } else if (rc != 0) {
        dsv4_log(DSV4_LOG_ERROR, "pd", "prefill %s: transport bootstrap refused (%s)", p->addr,
                 err);
        pd_peer_drop(p);
    }
}

/* 0 when the XFER writes exactly the lease's pages (each once) and its state slot. */
static int pd_xfer_is_lease(const dsv4_pd *pd, const dsv4_pd_xfer *x, const uint32_t *pages,
                            uint32_t n, uint32_t slot)
{
    uint32_t n_pool = pd->layout->n_pages;
    uint8_t *mine = calloc(n_pool ? n_pool : 1, 1);
    if (!mine)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        mine[pages[i]] = 1;
    uint64_t total = 0;
    int rc = x->with_state && x->dst_state == slot ? 0 : -EPROTO;
    for (uint32_t r = 0; rc == 0 && r < x->n_runs; r++) {
        const dsv4_xfer_run *run = &x->runs[r];
        for (uint64_t k = 0; rc == 0 && k < run->n_pages; k++) {
            uint64_t page = (uint64_t)run->dst_page + k;
            rc = page < n_pool && mine[page] ? 0 : -EPROTO;
            if (rc == 0)
                mine[page] = 0; /* once */
        }
        total += run->n_pages;
    }
    free(mine);
    return rc == 0 && total != n ? -EPROTO : rc;
}

/* XFER: the request the prefill posted for the current lease; its receives go out now. */
static void pd_recv(dsv4_server *srv, dsv4_pd_job *job, const pd_event *ev)
{
    dsv4_pd *pd = srv->pd;
    const dsv4_pd_xfer *x = &ev->m.xfer;
    uint32_t slot = 0, n = 0;
    const uint32_t *pages = pd_lease_pages(srv, job, &slot, &n);
    int rc = job->rx || !ev->peer->rpeer || !dsv4_pd_two_sided(pd)
                 ? -EPROTO
                 : pd_xfer_is_lease(pd, x, pages, n, slot);
    dsv4_xfer_req req = {.struct_size = sizeof(req),
                         .room = job->room,
                         .generation = job->gen,
                         .runs = x->runs,
                         .n_runs = x->n_runs,
                         .with_state = x->with_state,
                         .src_state = x->src_state,
                         .dst_state = x->dst_state};
    void *rx = NULL;
    if (rc == 0)
        rc = pd->tops->recv_post(pd->tstate, ev->peer->rpeer, &req, &rx);
    if (rc == 0) {
        job->rx = rx;
        return;
    }
    dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: receives from prefill %s not posted (%s)",
             (unsigned long long)job->room, ev->peer->addr,
             rc == -EPROTO ? "the transfer is not the lease's" : dsv4_strerror(rc));
    if (job->state == PD_LEASED)
        pd_abort(srv, job, rc);
}

/* Our receives failed (their connection died): the lease is aborted. */
static void pd_rx_failed(dsv4_server *srv, dsv4_pd_job *job, int rc)
{
    dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: receives from prefill %s failed (%s)",
             (unsigned long long)job->room, job->peer->addr, dsv4_strerror(rc));
    pd_abort(srv, job, rc);
}

/* A good COMPLETE waits for our receives: then verify, or abort when they failed. */
static void pd_landed(dsv4_server *srv, dsv4_pd_job *job)
{
    dsv4_pd *pd = srv->pd;
    int rc = pd->tops->poll(pd->tstate, job->rx);
    if (rc == -EAGAIN)
        return;
    if (rc != 0) {
        pd_rx_failed(srv, job, rc);
        return;
    }
    pd->tops->release(pd->tstate, job->rx);
    job->rx = NULL;
    dsv4_pd_msg done = job->done;
    memset(&job->done, 0, sizeof(job->done));
    job->has_done = false;
    pd_complete(srv, job, &done.complete);
    dsv4_pd_msg_clear(&done);
}

static void pd_event_handle(dsv4_server *srv, pd_event *ev)
{
    if (ev->kind == PD_EV_GONE) {
        pd_gone(srv, ev->peer);
        return;
    }
    dsv4_pd_msg *m = &ev->m;
    if (m->type == DSV4_PD_BOOTSTRAP) {
        pd_accept(srv, ev->peer, m);
        return;
    }
    dsv4_pd_job *job = pd_find(srv, m->room);
    if (!job || job->gen != m->generation || job->peer != ev->peer ||
        (m->type != DSV4_PD_COMPLETE && m->type != DSV4_PD_ABORT_ACK && m->type != DSV4_PD_ERROR &&
         m->type != DSV4_PD_XFER)) {
        pd_stale(ev);
        return;
    }
    if (m->type == DSV4_PD_XFER) {
        pd_recv(srv, job, ev);
    } else if (job->state == PD_ABORTING) {
        /* ABORT_ACK, or a COMPLETE that crossed our ABORT: nothing is in flight at the
         * sender; our own receives may still be draining */
        if (m->type == DSV4_PD_ERROR)
            return;
        job->acked = true;
        if (pd_rx_drained(srv, job))
            pd_retry(srv, job, job->why);
    } else if (m->type == DSV4_PD_COMPLETE && m->complete.status == 0 && ev->peer->rpeer) {
        if (!job->rx) {
            dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: prefill %s completed without an xfer",
                     (unsigned long long)job->room, ev->peer->addr);
            pd_abort(srv, job, -EPROTO);
            return;
        }
        job->done = *m; /* the event gives the message up */
        memset(m, 0, sizeof(*m));
        job->has_done = true;
        pd_landed(srv, job);
    } else if (m->type == DSV4_PD_COMPLETE) {
        pd_complete(srv, job, &m->complete);
    } else if (m->type == DSV4_PD_ERROR) {
        dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: prefill %s refused the lease (%s)",
                 (unsigned long long)job->room, ev->peer->addr,
                 m->error.text ? m->error.text : "no reason");
        pd_abort(srv, job, m->error.code < 0 ? m->error.code : DSV4_EPEER);
    } else {
        pd_stale(ev); /* ABORT_ACK for a lease we did not abort */
    }
}

int dsv4_pd_decode_reserve(dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_pd_job *job = calloc(1, sizeof(*job));
    if (!job)
        return -ENOMEM;
    /* what the sequence holds already: whole pages adopted from the prefix cache */
    uint32_t adopted = dsv4_engine_seq_len(srv->eng, r->seq);
    int rc = dsv4_engine_seq_reserve(srv->eng, r->seq, r->n_prompt - 1);
    if (rc != 0) {
        free(job);
        return rc;
    }
    job->r = r;
    job->room = r->id;
    job->n_kv = r->n_prompt - 1;
    job->first_page = adopted / srv->page_tokens;
    r->pd = job;
    r->n_fed = job->n_kv;
    dsv4_serve_move(srv, r, DSV4_SREQ_PD, false);
    pd_pending(srv, job);
    return 0;
}

void dsv4_pd_decode_step(dsv4_server *srv)
{
    dsv4_pd_decode *dec = srv->pd->dec;
    pthread_mutex_lock(&dec->mu);
    pd_event *evs = dec->head;
    dec->head = NULL;
    dec->tail = &dec->head;
    pthread_mutex_unlock(&dec->mu);
    for (pd_event *ev = evs, *next; ev; ev = next) {
        next = ev->next;
        pd_event_handle(srv, ev);
        dsv4_pd_msg_clear(&ev->m);
        free(ev);
    }
    uint64_t now = dsv4_now_ns();
    bool stop_now = dsv4_serve_past_stop(srv, now);
    for (dsv4_link *l = srv->pd_held.next, *next; l != &srv->pd_held; l = next) {
        next = l->next;
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        dsv4_pd_job *job = r->pd;
        if ((atomic_load(&r->cancel) || stop_now) && !job->cancelled) {
            job->cancelled = true;
            if (job->state == PD_PENDING) {
                pd_fail(srv, job, 0);
                continue;
            }
            if (job->state == PD_LEASED)
                pd_abort(srv, job, -ECANCELED);
        }
        if (job->rx && !job->has_done) {
            /* two-sided: receives are launched (once the connection is up) as they are
             * polled; one that failed fails the lease now rather than at its deadline */
            int rc = srv->pd->tops->poll(srv->pd->tstate, job->rx);
            if (rc != 0 && rc != -EAGAIN && job->state == PD_LEASED)
                pd_rx_failed(srv, job, rc);
        }
        if (job->state == PD_LEASED && job->has_done) {
            pd_landed(srv, job);
            if (r->pd != job)
                continue; /* it runs */
        }
        if (job->state == PD_ABORTING && job->acked && pd_rx_drained(srv, job)) {
            pd_retry(srv, job, job->why);
            continue;
        }
        if (job->state == PD_PENDING && !pd_lease(srv, job) && now >= job->deadline_ns) {
            job->last_peer = NULL;
            pd_retry(srv, job, -EHOSTUNREACH);
        } else if (job->state == PD_LEASED && now >= job->deadline_ns) {
            dsv4_metric_add(DSV4_M_PD_TIMEOUTS, 1);
            dsv4_log(DSV4_LOG_WARN, "pd", "request %llu: prefill %s did not complete in time",
                     (unsigned long long)job->room, job->peer->addr);
            pd_abort(srv, job, -ETIMEDOUT);
        } else if (job->state == PD_ABORTING && now >= job->deadline_ns) {
            dsv4_metric_add(DSV4_M_PD_TIMEOUTS, 1);
            dsv4_pd_peer *p = job->peer;
            dsv4_log(DSV4_LOG_WARN, "pd",
                     "request %llu: prefill %s did not acknowledge the "
                     "abort; dropping the connection",
                     (unsigned long long)job->room, p->addr);
            pd_peer_drop(p);
            pd_quarantine(srv, job, -ETIMEDOUT);
        }
    }
}
