/* t-pd-lease-drains-before-free-and-rejects-stale: a decode server (in process, over the
 * random test model) against a scripted prefill peer on loopback that speaks the real
 * control protocol. The peer answers with frames of the wrong generation (rejected and
 * counted as stale), with a completion whose checksums do not match (the decode server
 * aborts, and keeps the request's pages reserved until ABORT_ACK), then with a failed
 * completion on the retry's new generation; after [pd] retries the client gets an error
 * and every page is back in the pool. Then a peer that never acknowledges an abort: past
 * the deadline the pages are quarantined (not reused while a write could still land), the
 * decode server half-closes the connection, and the pages return only once the peer has
 * closed its end. */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/pd/checksum.h"
#include "core/pd/conn.h"
#include "core/plugin/registry.h"
#include "core/serve/metrics.h"
#include "core/serve/serve_priv.h"
#include "tests/tap.h"
#include "tests/unit/engine-testmodel.h"

#define SECRET "unit-test-secret-0123456789"
#define N_PAGES 64
#define PAGE_TOKENS 16
#define PROMPT 40 /* 39 tokens of KV: 3 pages of 16 */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool ended;
static dsv4_gen_event_kind end_kind;

static void on_event(void *ctx, const dsv4_gen_event *ev)
{
    (void)ctx;
    if (ev->kind == DSV4_EV_TOKEN)
        return;
    pthread_mutex_lock(&mu);
    ended = true;
    end_kind = ev->kind;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits up to 10 s for metric m to reach at least v. */
static bool wait_metric(dsv4_metric m, int64_t v)
{
    for (int i = 0; i < 1000 && dsv4_metric_get(m) < v; i++)
        usleep(10000);
    return dsv4_metric_get(m) >= v;
}

static void send_msg(dsv4_pd_conn *c, dsv4_pd_type type, uint64_t room, uint64_t gen,
                     const dsv4_pd_complete *complete)
{
    char err[256];
    dsv4_pd_msg m = {.type = type, .room = room, .generation = gen};
    if (complete)
        m.complete = *complete;
    if (dsv4_pd_conn_send(c, &m, dsv4_pd_deadline(5000), err, sizeof(err)) != 0)
        bail_out("fake prefill: send failed (%s)", err);
}

static void recv_msg(dsv4_pd_conn *c, dsv4_pd_msg *m)
{
    char err[256];
    if (dsv4_pd_conn_recv(c, m, dsv4_pd_deadline(10000), err, sizeof(err)) != 0)
        bail_out("fake prefill: receive failed (%s)", err);
}

int main(void)
{
    plan(19);
    dsv4_registry *reg = NULL;
    const dsv4_plugin_desc *ik = dsv4_test_indexk(&reg, "f32");
    const dsv4_plugin_desc *tp = dsv4_registry_find(reg, DSV4_FAMILY_TRANSPORT, "local", NULL);
    if (!tp)
        bail_out("plugin transport/local not found (DSV4D_PLUGIN_PATH)");
    dsv4_test_shape shape = dsv4_test_shape_default();
    dsv4_model *model = dsv4_test_model_new(&shape, 3);

    /* the fake prefill server's control socket */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 4) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        bail_out("loopback socket: %s", strerror(errno));
    char peers[64];
    snprintf(peers, sizeof(peers), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));

    dsv4_diags diags;
    dsv4_diags_init(&diags);
    dsv4_config *conf = dsv4_config_defaults(reg, &diags);
    if (!conf)
        bail_out("default configuration failed");
    dsv4_diags_free(&diags);
    dsv4_config c = *conf;
    c.core.threads = 1;
    c.model.kv_dtype = DSV4_KV_F32;
    c.model.state_slots = 8;
    c.server.max_running = 4;
    c.server.prefill_chunk = 64;
    c.server.role = DSV4_ROLE_DECODE;
    c.pd.peers = peers;
    c.pd.secret = SECRET;
    c.pd.bootstrap_timeout_ms = 3000;
    c.pd.waiting_timeout_ms = 3000;
    c.pd.transfer_timeout_ms = 3000;
    c.pd.retries = 1;
    for (int f = 0; f < DSV4_FAMILY_COUNT; f++) {
        c.desc[f] = NULL;
        c.plugin_conf[f] = NULL;
    }
    c.desc[DSV4_FAMILY_INDEXK] = ik;
    c.desc[DSV4_FAMILY_TRANSPORT] = tp;
    dsv4_metrics_reset();
    char err[512];
    dsv4_server_opts opts = {.page_tokens = PAGE_TOKENS, .n_pages = N_PAGES};
    dsv4_server *srv = dsv4_server_start_opts(&c, model, &opts, err, sizeof(err));
    if (!srv)
        bail_out("decode server: %s", err);

    /* handshake as a prefill server with the decode server's own geometry */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 10000) != 1)
        bail_out("the decode server did not connect");
    int fd = accept(lfd, NULL, NULL);
    dsv4_pd_conn *pc = dsv4_pd_conn_new(fd, SECRET, strlen(SECRET), err, sizeof(err));
    const dsv4_kv_layout *lay = dsv4_kv_pool_layout(dsv4_engine_kv(srv->eng));
    dsv4_pd_buf_geom *bufs = calloc(lay->n_buffers, sizeof(*bufs));
    dsv4_pd_hello mine = {.role = DSV4_ROLE_PREFILL, .transport = "local"};
    dsv4_pd_geom_of(lay, bufs, &mine.geom);
    dsv4_pd_msg peer = {0};
    int rc =
        pc ? dsv4_pd_conn_handshake(pc, &mine, &peer, dsv4_pd_deadline(10000), err, sizeof(err))
           : -ENOMEM;
    ok(rc == 0 && peer.hello.role == DSV4_ROLE_DECODE && peer.hello.blob_len > 0,
       "the decode server hands its exposed pool to the peer at the handshake (%s)",
       rc ? err : "ok");
    dsv4_pd_msg_clear(&peer);
    if (rc != 0)
        bail_out("handshake failed");

    int32_t prompt[PROMPT];
    dsv4_test_tokens(prompt, PROMPT, dsv4_server_vocab(srv), 9);
    dsv4_gen_params gp = {.max_tokens = 4, .temperature = 0, .top_p = 1};
    uint64_t id;
    if (dsv4_server_submit(srv, prompt, PROMPT, &gp, on_event, NULL, &id) != 0)
        bail_out("submit failed");

    dsv4_pd_msg lease;
    recv_msg(pc, &lease);
    ok(lease.type == DSV4_PD_LEASE && lease.lease.n_tokens == PROMPT - 1 &&
           lease.lease.first_page == 0 && lease.lease.n_pages == 3 && lease.lease.with_state &&
           memcmp(lease.lease.tokens, prompt, (PROMPT - 1) * sizeof(int32_t)) == 0,
       "the lease carries all prompt tokens but the last and 3 destination pages from the "
       "first (nothing cached)");
    uint64_t room = lease.room, gen = lease.generation;
    dsv4_pd_blocks blocks = {lease.lease.pages, lease.lease.n_pages, true, lease.lease.state_slot};
    size_t n_sums = dsv4_pd_sum_count(lay, &blocks);
    dsv4_pd_msg_clear(&lease);
    ok(wait_metric(DSV4_M_PAGES_USED, 3), "the decode server reserved the pages");

    /* stale frames: another generation, and an ack for a lease nobody aborted */
    uint64_t *zeros = calloc(n_sums, sizeof(uint64_t));
    dsv4_pd_complete done_ok = {0, PROMPT - 1, zeros, (uint32_t)n_sums};
    send_msg(pc, DSV4_PD_COMPLETE, room, gen + 7, &done_ok);
    send_msg(pc, DSV4_PD_ABORT_ACK, room, gen, NULL);
    ok(wait_metric(DSV4_M_PD_STALE, 2), "a completion of another generation and an unasked "
                                        "ack are rejected as stale");

    /* checksums that cannot match: abort, pages held until the ack */
    send_msg(pc, DSV4_PD_COMPLETE, room, gen, &done_ok);
    dsv4_pd_msg abort1;
    recv_msg(pc, &abort1);
    ok(abort1.type == DSV4_PD_ABORT && abort1.room == room && abort1.generation == gen,
       "a checksum mismatch aborts the lease");
    is_int(dsv4_metric_get(DSV4_M_PD_CHECKSUM_MISMATCHES), 1, "the mismatch is counted");
    usleep(300000);
    ok(dsv4_metric_get(DSV4_M_PAGES_USED) >= 3 && !ended,
       "the pages stay reserved while the abort is not acknowledged");
    send_msg(pc, DSV4_PD_ABORT_ACK, room, gen, NULL);

    /* the retry: a new generation, failed by the peer */
    dsv4_pd_msg lease2;
    recv_msg(pc, &lease2);
    ok(lease2.type == DSV4_PD_LEASE && lease2.room == room && lease2.generation > gen,
       "after the ack the lease is retried with a new generation");
    is_int(dsv4_metric_get(DSV4_M_PD_RETRIES), 1, "the retry is counted");
    uint64_t gen2 = lease2.generation;
    dsv4_pd_msg_clear(&lease2);
    dsv4_pd_complete failed = {-EIO, 0, NULL, 0};
    send_msg(pc, DSV4_PD_COMPLETE, room, gen2, &failed);
    dsv4_pd_msg abort2;
    recv_msg(pc, &abort2);
    ok(abort2.type == DSV4_PD_ABORT && abort2.generation == gen2,
       "a failed completion is aborted too");
    send_msg(pc, DSV4_PD_ABORT_ACK, room, gen2, NULL);

    pthread_mutex_lock(&mu);
    for (int i = 0; i < 100 && !ended; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    bool was_error = ended && end_kind == DSV4_EV_ERROR;
    pthread_mutex_unlock(&mu);
    ok(was_error, "after [pd] retries the request ends with an error");
    ok(wait_metric(DSV4_M_REQUESTS_FAILED, 1) && dsv4_metric_get(DSV4_M_PAGES_USED) == 0 &&
           dsv4_metric_get(DSV4_M_SLOTS_USED) == 0,
       "every page and state slot is back in the pool");
    is_int(dsv4_metric_get(DSV4_M_PD_STALE), 2, "nothing else was stale");

    /* a silent peer: no ABORT_ACK ever comes */
    pthread_mutex_lock(&mu);
    ended = false;
    pthread_mutex_unlock(&mu);
    if (dsv4_server_submit(srv, prompt, PROMPT, &gp, on_event, NULL, &id) != 0)
        bail_out("submit failed");
    dsv4_pd_msg lease3;
    recv_msg(pc, &lease3);
    send_msg(pc, DSV4_PD_COMPLETE, lease3.room, lease3.generation, &done_ok);
    dsv4_pd_msg abort3;
    recv_msg(pc, &abort3);
    ok(abort3.type == DSV4_PD_ABORT && abort3.generation == lease3.generation,
       "the mismatch is aborted; this peer stays silent");
    dsv4_pd_msg_clear(&lease3);
    ok(wait_metric(DSV4_M_PD_QUARANTINED_PAGES, 3),
       "past the abort deadline the request's 3 pages are quarantined");
    ok(wait_metric(DSV4_M_PAGES_USED, 3) && dsv4_metric_get(DSV4_M_PD_QUARANTINED_PAGES) == 3,
       "and stay out of the pool while the connection is open");
    /* the decode server half-closed: read to its end of the stream, then close ours */
    char sink[4096];
    ssize_t got;
    while ((got = read(dsv4_pd_conn_fd(pc), sink, sizeof(sink))) > 0)
        ;
    ok(got == 0, "the decode server closed its side of the connection");
    is_int(dsv4_metric_get(DSV4_M_PD_QUARANTINED_PAGES), 3, "still quarantined before we close");
    dsv4_pd_conn_free(pc);
    pc = NULL;
    for (int i = 0; i < 1000 && dsv4_metric_get(DSV4_M_PD_QUARANTINED_PAGES) > 0; i++)
        usleep(10000);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 100 && !ended; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    was_error = ended && end_kind == DSV4_EV_ERROR;
    pthread_mutex_unlock(&mu);
    ok(was_error && dsv4_metric_get(DSV4_M_PD_QUARANTINED_PAGES) == 0 &&
           wait_metric(DSV4_M_REQUESTS_FAILED, 2) && dsv4_metric_get(DSV4_M_PAGES_USED) == 0,
       "once the peer closed, the quarantined pages are back; the request failed cleanly");

    dsv4_server_stop(srv, 0);
    close(lfd);
    free(zeros);
    free(bufs);
    dsv4_config_free(conf);
    dsv4_test_model_free(model);
    dsv4_registry_free(reg);
    return done_testing();
}
