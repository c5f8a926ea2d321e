/* pd_prefill.c: the prefill role (pd.h, DESIGN.md §8).
 *
 * A listener thread accepts decode peers on [pd] listen; each connection gets a thread
 * that runs the handshake, attaches the transport once to the peer's exposed pool and then
 * reads leases and aborts. A lease becomes a request of the serving loop (its prompt: the
 * tokens whose KV the decode server wants) that stops when its last token is fed: the
 * engine thread computes the checksums of its blocks, posts every write in one transport
 * call and moves it to the PD state; each step polls the transfer. The blocks are the
 * state and the pages from the lease's first page on: the decode server holds the earlier
 * ones already (its own prefix cache), though this side computes (or finds in its own
 * cache) the whole prompt, as the state needs.
 *
 * Every lease gets exactly one answer, sent from the request's terminal event (so never
 * while a write of it can still land): COMPLETE with the checksums once the writes are
 * visible; COMPLETE with a negative status when it failed or a deadline passed (the lease's,
 * or the posted transfer's own [pd] transfer_timeout to land; the transfer was cancelled
 * and cancel() returned 0 first); ABORT_ACK when the decode server
 * aborted it and nothing is in flight any more. An ABORT for a lease this side no longer
 * knows is answered with ABORT_ACK at once (it has nothing in flight).
 *
 * A connection is closed only after every lease on it ended (each drained) and the peer
 * was detached: the decode server relies on that rule (a closed connection means no
 * further write from this process; see pd_decode.c).
 *
 * Two-sided transports (transport/nccl) also need the decode server to post receives. The
 * connection thread sends the transport's first BOOTSTRAP right after attach, before it
 * reads any lease; later ones (after an abort tore the transport's connection down) are
 * sent by the engine thread, at the end of each step and before each post. Each post is
 * followed by an XFER frame with the request the transport was given. Both come from the
 * thread that posts, so the decode server sees every BOOTSTRAP before the requests posted
 * on the connection it announces, and the requests in the order they were posted: the
 * order its receives must be posted in.
 */
#include "core/serve/pd_priv.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/pd/checksum.h"
#include "core/pd/plan.h"
#include "core/serve/metrics.h"
#include "core/util/log.h"
#include "core/util/status.h"

/* How often blocked threads look at the stop flag and the lease deadlines. */
#define PF_TICK_MS 100

typedef struct dsv4_pd_pconn {
    dsv4_pd *pd;
    dsv4_pd_conn *c;
    pthread_t thread;
    pthread_mutex_t send_mu; /* frames from the connection thread and the engine thread */
    pthread_mutex_t mu;      /* jobs */
    pthread_cond_t idle;     /* jobs became empty */
    dsv4_link jobs;
    uint32_t n_jobs;
    void *peer;        /* the transport's attachment to the decode pool */
    bool two_sided;    /* the attachment wants BOOTSTRAP and XFER frames */
    atomic_bool ready; /* attached: the engine thread may call bootstrap() (under mu) */
    char who[64];
    atomic_bool done;
    struct dsv4_pd_pconn *next;
} dsv4_pd_pconn;

struct dsv4_pd_prefill {
    int lfd;
    pthread_t thread;
    pthread_mutex_t mu; /* conns */
    dsv4_pd_pconn *conns;
};

static void pf_job_free(dsv4_pd_job *job)
{
    free(job->dst);
    free(job->sums);
    free(job->runs);
    free(job);
}

/* The request's terminal event: the lease's one answer (see the top of this file). */
static void pf_on_event(void *ctx, const dsv4_gen_event *ev)
{
    dsv4_pd_job *job = ctx;
    if (ev->kind == DSV4_EV_TOKEN)
        return; /* cannot happen: a lease stops before sampling */
    dsv4_pd_pconn *pc = job->conn;
    dsv4_pd_msg m = {.room = job->room, .generation = job->gen};
    pthread_mutex_lock(&pc->mu);
    if (atomic_load(&job->abort)) {
        m.type = DSV4_PD_ABORT_ACK;
    } else {
        int status = atomic_load(&job->status);
        if (ev->kind == DSV4_EV_ERROR)
            status = ev->status;
        else if (status == 0)
            status = -ECANCELED;
        m.type = DSV4_PD_COMPLETE;
        m.complete.status = job->ok ? 0 : status;
        m.complete.kv_tokens = job->ok ? job->n_kv : 0;
        m.complete.sums = job->ok ? job->sums : NULL;
        m.complete.n_sums = job->ok ? (uint32_t)job->n_sums : 0;
    }
    dsv4_pd_send(pc->pd, &pc->c, &pc->send_mu, &m, pc->who);
    dsv4_list_unlink(&job->link);
    pc->n_jobs--;
    pthread_cond_broadcast(&pc->idle);
    pthread_mutex_unlock(&pc->mu);
    pf_job_free(job);
}

static void pf_refuse(dsv4_pd_pconn *pc, const dsv4_pd_msg *lease, int code, const char *text)
{
    dsv4_log(DSV4_LOG_WARN, "pd", "lease %llu.%llu from %s refused (%s)",
             (unsigned long long)lease->room, (unsigned long long)lease->generation, pc->who, text);
    dsv4_pd_msg m = {.type = DSV4_PD_ERROR,
                     .room = lease->room,
                     .generation = lease->generation,
                     .error = {code, text}};
    dsv4_pd_send(pc->pd, &pc->c, &pc->send_mu, &m, pc->who);
}

static void pf_lease(dsv4_pd_pconn *pc, const dsv4_pd_msg *m)
{
    dsv4_server *srv = pc->pd->srv;
    const dsv4_pd_lease *l = &m->lease;
    /* the pages it names are the prompt KV's last ones, at least one */
    if (l->n_tokens == 0 || !l->with_state || l->n_pages == 0 ||
        (uint64_t)l->first_page + l->n_pages != dsv4_serve_pages(srv, l->n_tokens) ||
        l->n_tokens >= srv->max_context) {
        pf_refuse(pc, m, -EINVAL, "lease does not fit (tokens, pages or state slot)");
        return;
    }
    dsv4_pd_job *job = calloc(1, sizeof(*job));
    uint32_t *dst = malloc(l->n_pages * sizeof(uint32_t));
    if (!job || !dst) {
        free(job);
        free(dst);
        pf_refuse(pc, m, -ENOMEM, "out of memory");
        return;
    }
    memcpy(dst, l->pages, l->n_pages * sizeof(uint32_t));
    job->room = m->room;
    job->gen = m->generation;
    job->conn = pc;
    job->dst = dst;
    job->n_dst = l->n_pages;
    job->first_page = l->first_page;
    job->dst_slot = l->state_slot;
    job->n_kv = l->n_tokens;
    job->t_lease_ns = dsv4_now_ns();
    job->deadline_ns = job->t_lease_ns + (uint64_t)l->deadline_ms * 1000000u;
    atomic_init(&job->abort, false);
    atomic_init(&job->status, 0);
    dsv4_gen_params params = {.max_tokens = 1, .temperature = 0, .top_p = 1};
    pthread_mutex_lock(&pc->mu);
    dsv4_list_push_back(&pc->jobs, &job->link);
    pc->n_jobs++;
    int rc =
        dsv4_serve_submit(srv, l->tokens, l->n_tokens, &params, pf_on_event, job, job, &job->id);
    if (rc != 0) {
        dsv4_list_unlink(&job->link);
        pc->n_jobs--;
    }
    pthread_mutex_unlock(&pc->mu);
    if (rc != 0) {
        pf_refuse(pc, m, rc, dsv4_strerror(rc));
        pf_job_free(job);
    }
}

static dsv4_pd_job *pf_find(dsv4_pd_pconn *pc, uint64_t room, uint64_t gen)
{
    for (dsv4_link *l = pc->jobs.next; l != &pc->jobs; l = l->next) {
        dsv4_pd_job *job = DSV4_CONTAINER(l, dsv4_pd_job, link);
        if (job->room == room && job->gen == gen)
            return job;
    }
    return NULL;
}

static void pf_abort(dsv4_pd_pconn *pc, uint64_t room, uint64_t gen)
{
    pthread_mutex_lock(&pc->mu);
    dsv4_pd_job *job = pf_find(pc, room, gen);
    if (job) {
        atomic_store(&job->abort, true);
        dsv4_server_cancel(pc->pd->srv, job->id);
    } else {
        dsv4_pd_msg ack = {.type = DSV4_PD_ABORT_ACK, .room = room, .generation = gen};
        dsv4_pd_send(pc->pd, &pc->c, &pc->send_mu, &ack, pc->who);
    }
    pthread_mutex_unlock(&pc->mu);
}

/* Leases past their deadline (or all of them) end; the engine thread drains those it
 * already posted before their answer goes out. */
static void pf_expire(dsv4_pd_pconn *pc, bool all)
{
    uint64_t now = dsv4_now_ns();
    pthread_mutex_lock(&pc->mu);
    for (dsv4_link *l = pc->jobs.next; l != &pc->jobs; l = l->next) {
        dsv4_pd_job *job = DSV4_CONTAINER(l, dsv4_pd_job, link);
        if (all || now >= job->deadline_ns) {
            int zero = 0;
            atomic_compare_exchange_strong(&job->status, &zero, all ? -ECONNRESET : -ETIMEDOUT);
            dsv4_server_cancel(pc->pd->srv, job->id);
        }
    }
    pthread_mutex_unlock(&pc->mu);
}

/* The BOOTSTRAP a two-sided transport wants sent for pc now, if any: 0 (sent or none
 * due), -ENOTSUP (the transport is one-sided for this peer), or a failure (logged). */
static int pf_bootstrap(dsv4_pd_pconn *pc)
{
    dsv4_pd *pd = pc->pd;
    uint8_t small[1024], *blob = small;
    size_t len = sizeof(small);
    int rc = pd->tops->bootstrap(pd->tstate, pc->peer, blob, &len);
    if (rc == -ENOSPC && (blob = malloc(len)))
        rc = pd->tops->bootstrap(pd->tstate, pc->peer, blob, &len);
    if (rc == 0) {
        dsv4_pd_msg m = {.type = DSV4_PD_BOOTSTRAP, .bootstrap = {blob, (uint32_t)len}};
        dsv4_pd_send(pd, &pc->c, &pc->send_mu, &m, pc->who);
    } else if (rc != -EAGAIN && rc != -ENOTSUP) {
        dsv4_log(DSV4_LOG_WARN, "pd", "decode peer %s: transport bootstrap failed (%s)", pc->who,
                 dsv4_strerror(rc));
    }
    if (blob != small)
        free(blob);
    return rc == -EAGAIN ? 0 : rc;
}

static void *pf_conn_main(void *arg)
{
    dsv4_pd_pconn *pc = arg;
    dsv4_pd *pd = pc->pd;
    char err[512];
    dsv4_pd_msg peer = {0};
    int rc = dsv4_pd_conn_handshake(pc->c, &pd->hello, &peer, dsv4_pd_deadline(pd->bootstrap_ms),
                                    err, sizeof(err));
    if (rc == 0 && peer.hello.role != DSV4_ROLE_DECODE) {
        snprintf(err, sizeof(err), "pd handshake: the peer is not a decode server");
        rc = DSV4_EPEER;
    }
    if (rc == 0) {
        rc = pd->tops->attach(pd->tstate, pd->layout, peer.hello.blob, peer.hello.blob_len,
                              &pc->peer, err, sizeof(err));
        if (rc != 0) {
            dsv4_pd_msg e = {.type = DSV4_PD_ERROR, .error = {rc, err}};
            dsv4_pd_send(pd, &pc->c, &pc->send_mu, &e, pc->who);
        }
    }
    dsv4_pd_msg_clear(&peer);
    if (rc != 0) {
        dsv4_log(DSV4_LOG_ERROR, "pd", "decode peer %s refused (%s)", pc->who, err);
        goto out;
    }
    /* before any lease is read: the first BOOTSTRAP precedes every XFER */
    pc->two_sided = dsv4_pd_two_sided(pd) && pf_bootstrap(pc) != -ENOTSUP;
    atomic_store(&pc->ready, true);
    dsv4_log(DSV4_LOG_INFO, "pd", "decode peer %s connected (transport %s)", pc->who,
             pd->tdesc->name);
    int fd = dsv4_pd_conn_fd(pc->c);
    while (!atomic_load(&pd->stop)) {
        int ready = dsv4_pd_wait_readable(fd, PF_TICK_MS);
        pf_expire(pc, false);
        if (ready == 0)
            continue;
        dsv4_pd_msg m;
        rc = ready < 0 ? ready
                       : dsv4_pd_conn_recv(pc->c, &m, dsv4_pd_deadline(pd->bootstrap_ms), err,
                                           sizeof(err));
        if (rc != 0) {
            if (rc != -ECONNRESET)
                dsv4_log(DSV4_LOG_WARN, "pd", "decode peer %s: connection fails (%s)", pc->who,
                         ready < 0 ? dsv4_strerror(rc) : err);
            break;
        }
        if (m.type == DSV4_PD_LEASE)
            pf_lease(pc, &m);
        else if (m.type == DSV4_PD_ABORT)
            pf_abort(pc, m.room, m.generation);
        else
            dsv4_log(DSV4_LOG_WARN, "pd", "decode peer %s sent %s (ignored)", pc->who,
                     dsv4_pd_type_name(m.type));
        dsv4_pd_msg_clear(&m);
    }
    /* drain before close: every lease ends (its writes cancelled and drained) first */
    pf_expire(pc, true);
    pthread_mutex_lock(&pc->mu);
    while (pc->n_jobs > 0)
        pthread_cond_wait(&pc->idle, &pc->mu);
    atomic_store(&pc->ready, false); /* the engine thread stops calling bootstrap() */
    pthread_mutex_unlock(&pc->mu);
    pd->tops->detach(pd->tstate, pc->peer);
    dsv4_log(DSV4_LOG_INFO, "pd", "decode peer %s disconnected", pc->who);
out:
    dsv4_pd_conn_free(pc->c);
    pc->c = NULL;
    atomic_store(&pc->done, true);
    return NULL;
}

static void pf_conn_free(dsv4_pd_pconn *pc)
{
    pthread_join(pc->thread, NULL);
    pthread_mutex_destroy(&pc->send_mu);
    pthread_mutex_destroy(&pc->mu);
    pthread_cond_destroy(&pc->idle);
    free(pc);
}

/* Joins the connections that ended (all of them when `all`). */
static void pf_reap(dsv4_pd_prefill *pre, bool all)
{
    pthread_mutex_lock(&pre->mu);
    for (dsv4_pd_pconn **pp = &pre->conns; *pp;) {
        dsv4_pd_pconn *pc = *pp;
        if (all || atomic_load(&pc->done)) {
            *pp = pc->next;
            pf_conn_free(pc);
        } else {
            pp = &pc->next;
        }
    }
    pthread_mutex_unlock(&pre->mu);
}

static void pf_accept(dsv4_pd *pd, int fd, const char *who)
{
    char err[256] = "out of memory";
    dsv4_pd_pconn *pc = calloc(1, sizeof(*pc));
    dsv4_pd_conn *c =
        pc ? dsv4_pd_conn_new(fd, pd->secret, pd->secret_len, err, sizeof(err)) : NULL;
    if (!c) {
        dsv4_log(DSV4_LOG_ERROR, "pd", "decode peer %s dropped (%s)", who, err);
        free(pc);
        close(fd);
        return;
    }
    pc->pd = pd;
    pc->c = c;
    snprintf(pc->who, sizeof(pc->who), "%s", who);
    pthread_mutex_init(&pc->send_mu, NULL);
    pthread_mutex_init(&pc->mu, NULL);
    pthread_cond_init(&pc->idle, NULL);
    dsv4_list_init(&pc->jobs);
    atomic_init(&pc->done, false);
    atomic_init(&pc->ready, false);
    if (pthread_create(&pc->thread, NULL, pf_conn_main, pc) != 0) {
        dsv4_log(DSV4_LOG_ERROR, "pd", "decode peer %s dropped (no thread)", who);
        dsv4_pd_conn_free(c);
        pthread_mutex_destroy(&pc->send_mu);
        pthread_mutex_destroy(&pc->mu);
        pthread_cond_destroy(&pc->idle);
        free(pc);
        return;
    }
    dsv4_pd_prefill *pre = pd->pre;
    pthread_mutex_lock(&pre->mu);
    pc->next = pre->conns;
    pre->conns = pc;
    pthread_mutex_unlock(&pre->mu);
}

static void *pf_listen_main(void *arg)
{
    dsv4_pd *pd = arg;
    dsv4_pd_prefill *pre = pd->pre;
    while (!atomic_load(&pd->stop)) {
        pf_reap(pre, false);
        if (dsv4_pd_wait_readable(pre->lfd, PF_TICK_MS) <= 0)
            continue;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof(sa);
        int fd = accept(pre->lfd, (struct sockaddr *)&sa, &sl);
        if (fd < 0)
            continue;
        char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?", who[64];
        getnameinfo((struct sockaddr *)&sa, sl, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV);
        snprintf(who, sizeof(who), "%.40s:%.16s", host, port);
        pf_accept(pd, fd, who);
    }
    return NULL;
}

/* The listening socket, or a negative status with the reason in err. */
static int pf_bind(const char *addr, char *err, size_t errlen)
{
    char host[256], port[32];
    dsv4_pd_split_addr(addr, host, sizeof(host), port, sizeof(port));
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "pd: cannot resolve [pd] listen %s (%s)", addr, gai_strerror(rc));
        return DSV4_EPEER;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        rc = -errno;
        snprintf(err, errlen, "pd: cannot listen on %s (%s)", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return rc;
    }
    freeaddrinfo(res);
    return fd;
}

int dsv4_pd_prefill_open(dsv4_pd *pd, const dsv4_config *conf, char *err, size_t errlen)
{
    dsv4_pd_prefill *pre = calloc(1, sizeof(*pre));
    if (!pre) {
        snprintf(err, errlen, "pd: out of memory");
        return -ENOMEM;
    }
    pre->lfd = pf_bind(conf->pd.listen, err, errlen);
    if (pre->lfd < 0) {
        int rc = pre->lfd;
        free(pre);
        return rc;
    }
    pthread_mutex_init(&pre->mu, NULL);
    pd->pre = pre;
    if (pthread_create(&pre->thread, NULL, pf_listen_main, pd) != 0) {
        snprintf(err, errlen, "pd: cannot start the listener thread");
        close(pre->lfd);
        pthread_mutex_destroy(&pre->mu);
        free(pre);
        pd->pre = NULL;
        return -EAGAIN;
    }
    /* the port bound, which port 0 in [pd] listen leaves to the kernel */
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    char port[NI_MAXSERV] = "?";
    if (getsockname(pre->lfd, (struct sockaddr *)&sa, &sl) == 0)
        getnameinfo((struct sockaddr *)&sa, sl, NULL, 0, port, sizeof(port), NI_NUMERICSERV);
    const char *colon = strrchr(conf->pd.listen, ':');
    dsv4_log(DSV4_LOG_INFO, "pd", "prefill role: accepting decode servers on %.*s:%s",
             (int)(colon - conf->pd.listen), conf->pd.listen, port);
    return 0;
}

void dsv4_pd_prefill_close(dsv4_pd *pd)
{
    dsv4_pd_prefill *pre = pd->pre;
    pthread_join(pre->thread, NULL);
    pf_reap(pre, true);
    close(pre->lfd);
    pthread_mutex_destroy(&pre->mu);
    free(pre);
}

/* Engine thread: the lease's KV is complete; checksums, then one post of every write. */
void dsv4_pd_prefill_handoff(dsv4_server *srv, dsv4_sreq *r)
{
    dsv4_pd *pd = srv->pd;
    dsv4_pd_job *job = r->pd;
    if (atomic_load(&job->abort) || atomic_load(&r->cancel)) {
        dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_ABORT, 0);
        return;
    }
    uint32_t slot = 0, n = 0;
    const uint32_t *pages = dsv4_engine_seq_pages(srv->eng, r->seq, &slot, &n);
    int rc = -EINVAL;
    if (pages && n == (uint64_t)job->first_page + job->n_dst) {
        /* the decode server holds the first pages already: the rest and the state move */
        pages += job->first_page;
        n = job->n_dst;
        dsv4_pd_blocks b = {pages, n, true, slot};
        size_t n_runs = 0;
        job->n_sums = dsv4_pd_sum_count(pd->layout, &b);
        job->sums = malloc(job->n_sums * sizeof(uint64_t));
        job->runs = malloc(n * sizeof(dsv4_xfer_run));
        rc = !job->sums || !job->runs ? -ENOMEM
                                      : dsv4_pd_sum_compute(pd->layout, &b, job->sums, job->n_sums);
        if (rc == 0)
            rc = dsv4_pd_plan_runs(pages, job->dst, n, job->runs, &n_runs);
        dsv4_xfer_req req = {sizeof(req), job->room, job->gen, job->runs,
                             n_runs,      true,      slot,     job->dst_slot};
        dsv4_pd_pconn *pc = job->conn;
        if (rc == 0 && pc->two_sided)
            rc = pf_bootstrap(pc); /* a new connection is announced before it is used */
        if (rc == 0)
            rc = pd->tops->post(pd->tstate, pc->peer, &req, &job->xfer);
        if (rc == 0 && pc->two_sided) {
            /* a failed send leaves the transfer to its deadline (the connection fails) */
            dsv4_pd_msg m = {.type = DSV4_PD_XFER,
                             .room = job->room,
                             .generation = job->gen,
                             .xfer = {job->runs, (uint32_t)n_runs, true, slot, job->dst_slot}};
            dsv4_pd_send(pd, &pc->c, &pc->send_mu, &m, pc->who);
        }
    }
    if (rc != 0) {
        dsv4_log(DSV4_LOG_WARN, "pd", "lease %llu.%llu: transfer not posted (%s)",
                 (unsigned long long)job->room, (unsigned long long)job->gen, dsv4_strerror(rc));
        dsv4_serve_finish(srv, r, DSV4_EV_ERROR, DSV4_FINISH_NONE, rc);
        return;
    }
    job->r = r;
    job->landed_by_ns = dsv4_now_ns() + (uint64_t)pd->transfer_ms * 1000000u;
    dsv4_serve_move(srv, r, DSV4_SREQ_PD, false);
}

/* Engine thread: a BOOTSTRAP for every connection whose transport rebuilt its end (after
 * the cancels of this step), so the decode server can rebuild its end without waiting for
 * the next post. */
static void pf_bootstrap_all(dsv4_pd *pd)
{
    dsv4_pd_prefill *pre = pd->pre;
    pthread_mutex_lock(&pre->mu);
    for (dsv4_pd_pconn *pc = pre->conns; pc; pc = pc->next) {
        pthread_mutex_lock(&pc->mu);
        if (atomic_load(&pc->ready) && pc->two_sided)
            pf_bootstrap(pc);
        pthread_mutex_unlock(&pc->mu);
    }
    pthread_mutex_unlock(&pre->mu);
}

/* Engine thread: transfers in flight complete, fail, or are cancelled and drained. */
void dsv4_pd_prefill_step(dsv4_server *srv)
{
    dsv4_pd *pd = srv->pd;
    uint64_t now = dsv4_now_ns();
    bool stop_now = dsv4_serve_past_stop(srv, now);
    for (dsv4_link *l = srv->pd_held.next, *next; l != &srv->pd_held; l = next) {
        next = l->next;
        dsv4_sreq *r = DSV4_CONTAINER(l, dsv4_sreq, q);
        dsv4_pd_job *job = r->pd;
        /* a posted transfer has its transfer_timeout to land, within the lease's deadline */
        bool late = now >= job->deadline_ns || now >= job->landed_by_ns;
        int rc;
        if (late || stop_now || atomic_load(&job->abort) || atomic_load(&r->cancel)) {
            if (pd->tops->cancel(pd->tstate, job->xfer) == -EAGAIN)
                continue; /* still draining */
            pd->tops->release(pd->tstate, job->xfer);
            int zero = 0;
            atomic_compare_exchange_strong(&job->status, &zero, late ? -ETIMEDOUT : -ECANCELED);
            if (late)
                dsv4_metric_add(DSV4_M_PD_TIMEOUTS, 1);
            dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_ABORT, 0);
            continue;
        }
        if ((rc = pd->tops->poll(pd->tstate, job->xfer)) == -EAGAIN)
            continue;
        if (rc != 0 && pd->tops->cancel(pd->tstate, job->xfer) == -EAGAIN)
            continue; /* failed: drain what may still be in flight before answering */
        pd->tops->release(pd->tstate, job->xfer);
        if (rc == 0) {
            job->ok = true;
            dsv4_metric_add(DSV4_M_PD_TRANSFER_BYTES, dsv4_pd_bytes(pd, job->n_dst));
            dsv4_metric_observe(DSV4_M_PD_TRANSFER_SECONDS,
                                (double)(dsv4_now_ns() - job->t_lease_ns) / 1e9);
            dsv4_serve_finish(srv, r, DSV4_EV_DONE, DSV4_FINISH_LENGTH, 0);
        } else {
            dsv4_log(DSV4_LOG_WARN, "pd", "lease %llu.%llu: transfer failed (%s)",
                     (unsigned long long)job->room, (unsigned long long)job->gen,
                     dsv4_strerror(rc));
            dsv4_serve_finish(srv, r, DSV4_EV_ERROR, DSV4_FINISH_NONE, rc);
        }
    }
    pf_bootstrap_all(pd);
}
