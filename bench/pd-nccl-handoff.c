/* pd-nccl-handoff.c: KV handoff bandwidth of transport/nccl between two GPUs against plain
 * NCCL send/recv of the same bytes in one buffer (what nccl-tests' sendrecv measures),
 * both in the same run (bench/pd-nccl-handoff.sh drives it and writes the result).
 *
 *   pd-nccl-handoff [LAYERS [PAGES [REPS]]]
 *
 * Two processes, GPU 0 (sender) and GPU 1 (receiver), set up as the PD code sets them up
 * (tests/gpu/nccl-pair.h). For requests of 16, 64 and 256 pages, once as one run of
 * consecutive pages and once as scattered pages (every other page: one run each), it
 * times post to completion at the sender (the receiver posts on the request's arrival),
 * REPS times; then the ceiling: ncclSend/ncclRecv of one contiguous buffer of the largest
 * request's bytes on a communicator of its own. Prints one line per row:
 *   row=<name> pages=<n> runs=<n> bytes=<n> gbps=<GB/s> ms=<per request>
 * Exits 77 when fewer than two GPUs are visible. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* nccl.h declares ncclGroupStart() and friends without (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "tests/gpu/nccl-pair.h"
#include "tests/tap.h"

static const uint32_t sizes[] = {16, 64, 256};

static dsv4_xfer_run *runs_of(uint32_t n, bool scattered, size_t *n_runs_p)
{
    dsv4_xfer_run *runs = calloc(n, sizeof(*runs));
    if (!runs)
        bail_out("out of memory");
    if (!scattered) {
        runs[0] = (dsv4_xfer_run){0, 0, n};
        *n_runs_p = 1;
        return runs;
    }
    for (uint32_t i = 0; i < n; i++)
        runs[i] = (dsv4_xfer_run){2 * i, 2 * i + 1, 1};
    *n_runs_p = n;
    return runs;
}

/* Both ranks: one row of handoffs; the sender prints it. */
static void handoff_row(nccl_pair *p, uint32_t pages, bool scattered, int reps)
{
    size_t n_runs;
    dsv4_xfer_run *runs = runs_of(pages, scattered, &n_runs);
    dsv4_xfer_req req = {.struct_size = sizeof(req),
                         .runs = runs,
                         .n_runs = n_runs,
                         .with_state = true,
                         .src_state = 0,
                         .dst_state = 1};
    double t = 0;
    for (int k = 0; k < reps + 1; k++) { /* the first one warms the connection up */
        void *x = NULL;
        double t0 = nccl_pair_now();
        int rc;
        if (p->rank == 0) {
            rc = p->ops->post(p->state, p->peer, &req, &x);
            nccl_pair_send_req(p, &req);
        } else {
            dsv4_xfer_req in;
            nccl_pair_recv_req(p, &in);
            rc = p->ops->recv_post(p->state, p->peer, &in, &x);
            free((void *)in.runs);
        }
        if (rc == 0)
            rc = nccl_pair_wait(p, x, 120);
        if (rc != 0)
            bail_out("rank %d: handoff of %u pages failed (%d)", p->rank, pages, rc);
        p->ops->release(p->state, x);
        uint32_t n;
        if (p->rank == 0)
            free(nccl_pair_recv(p, 'D', &n)); /* the receiver has it too */
        else
            nccl_pair_send(p, 'D', "", 0);
        if (k > 0)
            t += nccl_pair_now() - t0;
    }
    if (p->rank == 0) {
        uint64_t bytes = nccl_pair_bytes(p, pages);
        printf("row=%s pages=%u runs=%zu bytes=%llu gbps=%.2f ms=%.3f\n",
               scattered ? "handoff-scattered" : "handoff-contiguous", pages, n_runs,
               (unsigned long long)bytes, (double)bytes * reps / t / 1e9, t / reps * 1e3);
    }
    free(runs);
}

/* Both ranks: plain send/recv of `bytes` in one buffer on a communicator of its own. */
static void ceiling_row(nccl_pair *p, uint64_t bytes, int reps)
{
    ncclUniqueId id;
    uint32_t n;
    if (p->rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess)
            bail_out("ncclGetUniqueId failed");
        nccl_pair_send(p, 'I', &id, sizeof(id));
    } else {
        void *m = nccl_pair_recv(p, 'I', &n);
        memcpy(&id, m, sizeof(id));
        free(m);
    }
    ncclComm_t comm;
    cudaStream_t s;
    void *buf;
    if (ncclCommInitRank(&comm, 2, id, p->rank) != ncclSuccess ||
        cudaStreamCreate(&s) != cudaSuccess || cudaMalloc(&buf, bytes) != cudaSuccess)
        bail_out("rank %d: cannot set up the ceiling", p->rank);
    double t = 0;
    for (int k = 0; k < reps + 1; k++) {
        double t0 = nccl_pair_now();
        ncclResult_t r = p->rank == 0 ? ncclSend(buf, bytes, ncclUint8, 1, comm, s)
                                      : ncclRecv(buf, bytes, ncclUint8, 0, comm, s);
        if (r != ncclSuccess || cudaStreamSynchronize(s) != cudaSuccess)
            bail_out("rank %d: send/recv failed", p->rank);
        if (k > 0)
            t += nccl_pair_now() - t0;
    }
    if (p->rank == 0)
        printf("row=ceiling-sendrecv pages=- runs=1 bytes=%llu gbps=%.2f ms=%.3f\n",
               (unsigned long long)bytes, (double)bytes * reps / t / 1e9, t / reps * 1e3);
    cudaFree(buf);
    cudaStreamDestroy(s);
    ncclCommDestroy(comm);
}

int main(int argc, char **argv)
{
    uint32_t layers = argc > 1 ? (uint32_t)atoi(argv[1]) : 43;
    uint32_t pages = argc > 2 ? (uint32_t)atoi(argv[2]) : 1024;
    int reps = argc > 3 ? atoi(argv[3]) : 20;
    int gpus = nccl_pair_gpus();
    if (gpus < 2) {
        fprintf(stderr, "pd-nccl-handoff: needs two GPUs (%d visible)\n", gpus);
        return 77;
    }
    if (pages < 2 * sizes[sizeof(sizes) / sizeof(sizes[0]) - 1] || reps < 1)
        bail_out("PAGES must be at least twice the largest request, REPS at least 1");
    nccl_pair p;
    nccl_pair_start(&p, 0, 1, layers, pages, 4, false);
    nccl_pair_connect(&p);
    if (p.rank == 0)
        printf("layers=%u buffers=%u pages=%u page_bytes=%llu\n", layers, p.l.n_buffers, pages,
               (unsigned long long)(nccl_pair_bytes(&p, 1) - nccl_pair_bytes(&p, 0)));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        handoff_row(&p, sizes[i], false, reps);
        handoff_row(&p, sizes[i], true, reps);
    }
    ceiling_row(&p, nccl_pair_bytes(&p, sizes[sizeof(sizes) / sizeof(sizes[0]) - 1]), reps);
    fflush(stdout);
    return nccl_pair_end(&p, 0) ? 0 : 1;
}
