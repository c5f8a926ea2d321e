/* t-gpu-transport-ucx-stages-every-buffer: transport/ucx between two device pools in two
 * processes on one GPU, staged through pinned host buffers, driven as the PD code drives a
 * one-sided transport (expose, attach; per request post at the sender, polled until every
 * chunk was acknowledged). The staging buffers hold 1 MiB, so a request moves in many
 * chunks through two buffers a side, and the short request in one. Requests of merged
 * runs with the state slot, scattered pages listed in reverse and a short one land byte
 * for byte in every buffer, their PD checksums (hashed on the GPU by core/pd/checksum.c)
 * verify at the receiver, and a page no run names stays untouched. A transfer cancelled
 * right after its post drains: once cancel returns 0 the receiver's pool holds still
 * while the sender rewrites its pages, and the next request lands. A receiver that
 * vanishes (exits without closing anything) fails or drains the transfer in flight within
 * the drain bound instead of wedging it. Prints the memory types the UCX here supports.
 * Skips without a GPU. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "core/pd/checksum.h"
#include "plugins/transport/ucx_stage.h"
#include "tests/gpu/nccl-pair.h"
#include "tests/tap.h"

#define LAYERS 6
#define PAGES 256
#define SLOTS 8
#define UNTOUCHED 255

static const dsv4_xfer_run r0[] = {{0, 10, 40}, {100, 60, 3}};
static const dsv4_xfer_run r1[] = {{200, 3, 1}, {150, 7, 1}, {90, 200, 5}, {30, 120, 2}};
static const dsv4_xfer_run r2[] = {{1, 250, 1}};
static const dsv4_xfer_run big[] = {{0, 0, 200}};
static const dsv4_xfer_run after[] = {{201, 201, 50}};

/* The request's pages on one side (source or destination), in request order. */
static uint32_t *pages_of(const dsv4_xfer_req *req, bool dst, uint32_t *n_p)
{
    uint32_t n = 0;
    for (size_t r = 0; r < req->n_runs; r++)
        n += req->runs[r].n_pages;
    uint32_t *pages = malloc((n ? n : 1) * sizeof(*pages)), k = 0;
    if (!pages)
        bail_out("out of memory");
    for (size_t r = 0; r < req->n_runs; r++)
        for (uint32_t j = 0; j < req->runs[r].n_pages; j++)
            pages[k++] = (dst ? req->runs[r].dst_page : req->runs[r].src_page) + j;
    *n_p = n;
    return pages;
}

/* The PD checksums of req's blocks on one side. */
static uint64_t *sums_of(nccl_pair *p, const dsv4_xfer_req *req, bool dst, size_t *n_p)
{
    uint32_t n;
    uint32_t *pages = pages_of(req, dst, &n);
    dsv4_pd_blocks b = {pages, n, req->with_state, dst ? req->dst_state : req->src_state};
    size_t cnt = dsv4_pd_sum_count(&p->l, &b);
    uint64_t *sums = malloc(cnt * sizeof(*sums));
    if (!sums || dsv4_pd_sum_compute(&p->l, &b, sums, cnt) != 0)
        bail_out("checksums of the sender's blocks");
    free(pages);
    *n_p = cnt;
    return sums;
}

/* Receiver: its verdict on one request travels to the sender, which prints the TAP line. */
static void verdict(nccl_pair *p, bool good, const char *why)
{
    size_t n = strlen(why) + 2;
    char *m = malloc(n);
    if (!m)
        bail_out("out of memory");
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

/* Receiver: every block holds the sender's bytes and the sender's checksums verify. */
static void check_request(nccl_pair *p)
{
    dsv4_xfer_req req;
    nccl_pair_recv_req(p, &req);
    uint32_t n;
    uint64_t *expected = nccl_pair_recv(p, 'S', &n);
    char why[512] = "";
    bool good = nccl_pair_check(p, &req, UNTOUCHED, why, sizeof(why));
    uint32_t n_pages;
    uint32_t *pages = pages_of(&req, true, &n_pages);
    dsv4_pd_blocks b = {pages, n_pages, req.with_state, req.dst_state};
    dsv4_pd_sum_bad bad;
    uint32_t n_bad = 0;
    int rc = dsv4_pd_sum_verify(&p->l, &b, expected, n / sizeof(uint64_t), &bad, &n_bad);
    if (good && rc != 0) {
        if (rc == DSV4_ECHECKSUM)
            dsv4_pd_sum_bad_text(&bad, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "checksum verification failed (%d)", rc);
        good = false;
    }
    verdict(p, good, good ? "" : why);
    free(pages);
    free(expected);
    free((void *)req.runs);
}

/* Every paged block of the receiver's pool, copied to the host. */
static uint8_t *snapshot(nccl_pair *p, size_t *len_p)
{
    size_t n = 0;
    for (uint32_t i = 0; i < p->l.n_buffers; i++)
        n += p->b[i].block_bytes * p->b[i].n_blocks;
    uint8_t *h = malloc(n), *at = h;
    if (!h)
        bail_out("out of memory");
    for (uint32_t i = 0; i < p->l.n_buffers; i++) {
        size_t bytes = p->b[i].block_bytes * p->b[i].n_blocks;
        if (cudaMemcpy(at, p->b[i].base, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            bail_out("cudaMemcpy");
        at += bytes;
    }
    *len_p = n;
    return h;
}

static void receiver(nccl_pair *p)
{
    nccl_pair_connect(p);
    for (int k = 0; k < 3; k++)
        check_request(p);
    /* the cancelled one: after the sender's cancel returned 0 it rewrites its pages; from
     * then on our pool must hold still */
    uint32_t n;
    free(nccl_pair_recv(p, 'C', &n));
    size_t len;
    uint8_t *before = snapshot(p, &len);
    usleep(300000);
    uint8_t *later = snapshot(p, &len);
    size_t moved = 0, rewritten = 0;
    for (size_t o = 0; o < len; o++)
        moved += before[o] != later[o];
    /* the sender's pattern never repeats a byte 64 times: such a run is a rewritten page */
    for (size_t o = 0; o + 64 <= len; o += 64) {
        size_t k = 0;
        while (k < 64 && later[o + k] == 0xab)
            k++;
        rewritten += k == 64;
    }
    char why[256];
    snprintf(why, sizeof(why),
             "%zu bytes changed after the drain, %zu runs of 64 bytes hold the rewritten byte",
             moved, rewritten);
    verdict(p, moved == 0 && rewritten == 0, why);
    free(before);
    free(later);
    check_request(p);
    /* vanish: no detach, no fini, no goodbye */
    free(nccl_pair_recv(p, 'K', &n));
    fflush(stdout);
    _exit(0);
}

/* Sender: post, send the request and its checksums, poll to completion. */
static int move(nccl_pair *p, const dsv4_xfer_req *req)
{
    void *x = NULL;
    int rc = p->ops->post(p->state, p->peer, req, &x);
    if (rc == 0)
        rc = nccl_pair_wait(p, x, 60);
    if (x)
        p->ops->release(p->state, x);
    size_t n;
    uint64_t *sums = sums_of(p, req, false, &n);
    nccl_pair_send_req(p, req);
    nccl_pair_send(p, 'S', sums, (uint32_t)(n * sizeof(*sums)));
    free(sums);
    return rc;
}

/* The memory types the UCX this runs on supports, as a diagnostic ("host", "cuda", ...). */
static void ucx_memory_types(void)
{
    ucp_config_t *c;
    ucp_context_h ctx;
    ucp_params_t prm = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    if (ucp_config_read(NULL, NULL, &c) != UCS_OK)
        return;
    ucs_status_t st = ucp_init(&prm, c, &ctx);
    ucp_config_release(c);
    if (st != UCS_OK)
        return;
    ucp_context_attr_t a = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    if (ucp_context_query(ctx, &a) == UCS_OK)
        diag("UCX %s supports memory types:%s%s%s (device pools are staged either way)",
             ucp_get_version_string(),
             a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_HOST) ? " host" : "",
             a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA) ? " cuda" : "",
             a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED) ? " cuda-managed" : "");
    ucp_cleanup(ctx);
}

int main(void)
{
    int gpus = nccl_pair_gpus();
    if (gpus < 1)
        skip_all("no CUDA device visible");
    plan(12);
    nccl_pair p;
    nccl_pair_start_with(&p, "ucx", "stage_size", "1M", 0, 0, LAYERS, PAGES, SLOTS, true);
    if (p.rank == 1)
        receiver(&p);
    nccl_pair_connect(&p);

    dsv4_xfer_req reqs[3] = {nccl_pair_req(r0, 2, true, 3, 5), nccl_pair_req(r1, 4, false, 0, 0),
                             nccl_pair_req(r2, 1, true, 7, 0)};
    const char *what[3] = {"merged runs and the state slot land in every buffer, checksums agree",
                           "scattered pages in reverse order land, checksums agree",
                           "a one-chunk request lands, checksums agree"};
    for (int k = 0; k < 3; k++) {
        is_int(move(&p, &reqs[k]), 0, "request %d: every chunk acknowledged", k);
        report(&p, what[k]);
    }

    /* cancelled right after its post: drains, then our pages may be reused */
    dsv4_xfer_req a = nccl_pair_req(big, 1, true, 1, 1);
    void *x = NULL;
    double t0 = nccl_pair_now();
    int rc = p.ops->post(p.state, p.peer, &a, &x);
    for (int k = 0; rc == 0 && k < 5; k++) { /* let a few chunks go out first */
        usleep(1000);
        p.ops->poll(p.state, x);
    }
    int drc = rc == 0 ? nccl_pair_drain(&p, x, 60) : rc;
    ok(rc == 0 && drc == 0, "a cancelled transfer drains (post %d, cancel %d, %.3f s)", rc, drc,
       nccl_pair_now() - t0);
    if (x)
        p.ops->release(p.state, x);
    for (uint32_t i = 0; i < p.l.n_buffers; i++)
        if (cudaMemset(p.b[i].base, 0xab,
                       p.b[i].block_bytes * (dsv4_buf_is_paged(p.b[i].kind) ? 200 : SLOTS)) !=
                cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess)
            bail_out("cudaMemset");
    nccl_pair_send(&p, 'C', "", 0);
    report(&p, "nothing lands after cancel returned 0 while the sender rewrites its pages");
    dsv4_xfer_req next = nccl_pair_req(after, 1, false, 0, 0);
    is_int(move(&p, &next), 0, "the next request after the cancel is acknowledged");
    report(&p, "and lands, checksums agree");

    /* the receiver vanishes with a transfer in flight */
    nccl_pair_send(&p, 'K', "", 0);
    usleep(200000);
    x = NULL;
    t0 = nccl_pair_now();
    rc = p.ops->post(p.state, p.peer, &a, &x);
    int prc = rc == 0 ? nccl_pair_wait(&p, x, 2) : rc;
    drc = rc == 0 ? nccl_pair_drain(&p, x, 3 * DSV4_UCX_DRAIN_SECONDS) : 0;
    ok(prc != 0 && drc == 0,
       "a vanished receiver: the transfer does not complete (%d), cancel drains it (%d) in %.1f s",
       prc, drc, nccl_pair_now() - t0);
    if (x)
        p.ops->release(p.state, x);
    ok(nccl_pair_end(&p, 0), "the sender detaches and both processes end");
    ucx_memory_types();
    return done_testing();
}
