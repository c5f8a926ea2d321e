/* pd-ipc-handoff.c: KV handoff between two processes on one GPU, against plain copies of
 * the same bytes in the same run: transport/local (CUDA IPC) against a device-to-device
 * cudaMemcpy, transport/ucx (staged through pinned host buffers) against the pinned-copy
 * ceiling (the same bytes device to pinned host and back, one cudaMemcpy each way).
 *
 *   bench/pd-ipc-handoff [--transport local|ucx] [--option KEY=VALUE ...] [--tokens N ...]
 *                        [--reps R]
 *
 * Two device pools (dsv4_kv_pool_new_cuda) with the KV geometry of DeepSeek-V4-Flash, as
 * bench/pd-handoff uses on the host (43 layers: 2 sliding, 21 CSA, 20 HCA; D 512 bf16,
 * index-K fp8 with DI 128, window 128, 256-token pages). The receiver, a forked child as a
 * decode server, exposes its pool; the sender attaches and, for each prompt length, moves
 * one request (its pages scattered over two runs of the receiver's pool, plus the state
 * slot) with one post, polled to completion, timed on the host. After the last one the
 * receiver checks that every block it was sent holds the sender's bytes. The ceiling is
 * one cudaMemcpy of the request's bytes between two device buffers of the sender, timed
 * with CUDA events; the pinned ceiling, the least a staged handoff copies, is one
 * cudaMemcpy of those bytes into pinned host memory plus one back. Both are printed for
 * either transport; of_ceiling compares with the one the transport's path is bounded by
 * (d2d for local, pinned for ucx). --option sets a key of the transport's section.
 * Medians of R repetitions after one untimed. One key=value line per prompt length. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dsv4d/transport.h>

#include "bench/bench-util.h"
#include "bench/bench-xfer.h"
#include "core/engine/kvpool.h"
#include "core/pd/plan.h"
#include "core/plugin/registry.h"

#define PAGE_TOKENS 256
#define MAX_LENGTHS 8

static void die(const char *what)
{
    fprintf(stderr, "pd-ipc-handoff: %s\n", what);
    exit(1);
}

static void cuda_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "pd-ipc-handoff: %s failed (%s)\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* A device pool of `pages` pages and 2 state slots, buffer i set to bytes fill(i) (the
 * sender) or 0 (the receiver). */
static dsv4_kv_pool *pool_new(const dsv4_indexk_ops *ik, uint32_t pages, bool filled)
{
    static dsv4_model_config m;
    bench_flash_kv_model(&m);
    dsv4_kv_pool_conf c = {&m, DSV4_KV_BF16, PAGE_TOKENS, pages, 2, ik, "fp8"};
    char err[256];
    dsv4_kv_pool *p = dsv4_kv_pool_new_cuda(&c, 0, err, sizeof(err));
    if (!p)
        die(err);
    const dsv4_kv_layout *l = dsv4_kv_pool_layout(p);
    for (uint32_t i = 0; i < l->n_buffers; i++)
        cuda_ok(cudaMemset(l->buffers[i].base, filled ? (int)(i * 7 + 1) : 0,
                           l->buffers[i].block_bytes * l->buffers[i].n_blocks),
                "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return p;
}

/* The receiver's blocks of the last request (pages dp, state slot 1) hold fill(i): the
 * count of bytes that do not. */
static size_t receiver_mismatches(const dsv4_kv_layout *l, uint32_t n)
{
    uint32_t *sp = malloc(n * sizeof(*sp)), *dp = malloc(n * sizeof(*dp));
    size_t bad = 0;
    if (!sp || !dp)
        die("out of memory");
    bench_plan_pages(n, sp, dp);
    for (uint32_t i = 0; i < l->n_buffers; i++) {
        const dsv4_kv_buffer *b = &l->buffers[i];
        bool paged = dsv4_buf_is_paged(b->kind);
        uint8_t *h = malloc(b->block_bytes);
        if (!h)
            die("out of memory");
        for (uint32_t k = 0; k < (paged ? n : 1); k++) {
            cuda_ok(cudaMemcpy(h, b->base + (size_t)(paged ? dp[k] : 1) * b->block_bytes,
                               b->block_bytes, cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
            for (size_t o = 0; o < b->block_bytes; o++)
                bad += h[o] != (uint8_t)(i * 7 + 1);
        }
        free(h);
    }
    free(sp);
    free(dp);
    return bad;
}

/* The child: the decode side. Exposes its pool on `out`, then for each request length
 * read from `in` (0 ends) writes back the mismatching bytes of that request. */
static void receiver(const dsv4_plugin_desc *tp, char **options, uint32_t n_options,
                     const dsv4_plugin_desc *ik, uint32_t pages, int in, int out)
{
    cuda_ok(cudaSetDevice(0), "cudaSetDevice");
    dsv4_kv_pool *pool = pool_new(ik->ops, pages, false);
    const dsv4_transport_ops *ops = tp->ops;
    void *rx = bench_transport_new(tp, options, n_options);
    if (bench_send_exposed(ops, rx, dsv4_kv_pool_layout(pool), out) != 0)
        _exit(1);
    uint32_t n;
    while (read(in, &n, 4) == 4 && n > 0) {
        uint64_t bad = receiver_mismatches(dsv4_kv_pool_layout(pool), n);
        if (write(out, &bad, 8) != 8)
            _exit(1);
    }
    tp->fini(rx);
    dsv4_kv_pool_free(pool);
    _exit(0);
}

/* Median ns of reps timed copies (after one untimed) of bytes from a to b: directly when
 * h is NULL, else through h (device to pinned host, then host to device). t has reps + 1
 * entries of scratch. */
static uint64_t copy_median(uint8_t *b, const uint8_t *a, uint8_t *h, uint64_t bytes, uint32_t reps,
                            uint64_t *t, cudaEvent_t ea, cudaEvent_t eb)
{
    for (uint32_t r = 0; r <= reps; r++) {
        float ms;
        cuda_ok(cudaEventRecord(ea, 0), "cudaEventRecord");
        if (h) {
            cuda_ok(cudaMemcpy(h, a, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
            cuda_ok(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        } else {
            cuda_ok(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
        }
        cuda_ok(cudaEventRecord(eb, 0), "cudaEventRecord");
        cuda_ok(cudaEventSynchronize(eb), "cudaEventSynchronize");
        cuda_ok(cudaEventElapsedTime(&ms, ea, eb), "cudaEventElapsedTime");
        t[r] = (uint64_t)(ms * 1e6);
    }
    bench_sort_u64(t + 1, reps);
    return t[1 + reps / 2];
}

int main(int argc, char **argv)
{
    uint32_t tokens[MAX_LENGTHS], n_len = 0, reps = 20, n_options = 0;
    const char *transport = "local";
    char *options[MAX_LENGTHS];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc && n_len < MAX_LENGTHS)
            tokens[n_len++] = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            transport = argv[++i];
        else if (strcmp(argv[i], "--option") == 0 && i + 1 < argc && n_options < MAX_LENGTHS)
            options[n_options++] = argv[++i];
        else
            die("usage: pd-ipc-handoff [--transport local|ucx] [--option KEY=VALUE ...] "
                "[--tokens N ...] [--reps R]");
    }
    bool staged = strcmp(transport, "ucx") == 0;
    if (n_len == 0) {
        tokens[n_len++] = 8192;
        tokens[n_len++] = 32768;
        tokens[n_len++] = 131072;
    }
    uint32_t max_n = 0;
    for (uint32_t k = 0; k < n_len; k++) {
        uint32_t n = (tokens[k] + PAGE_TOKENS - 1) / PAGE_TOKENS;
        if (n == 0)
            die("bad --tokens");
        max_n = n > max_n ? n : max_n;
    }
    if (reps == 0 || reps > 10000)
        die("bad --reps");
    uint32_t pages = 2 * max_n + 4;

    /* fork before either process touches CUDA: plugin probes may (transport/nccl's counts
     * devices), so each process scans the plugins itself */
    int to_rx[2], from_rx[2];
    if (pipe(to_rx) != 0 || pipe(from_rx) != 0)
        die("pipe");
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        die("fork");
    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        die("plugin registry");
    const dsv4_plugin_desc *ik = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "fp8", NULL);
    const dsv4_plugin_desc *tp = dsv4_registry_find(reg, DSV4_FAMILY_TRANSPORT, transport, NULL);
    if (!ik || !tp)
        die("plugins not found (DSV4D_PLUGIN_PATH)");
    const dsv4_transport_ops *ops = tp->ops;
    if (child == 0)
        receiver(tp, options, n_options, ik, pages, to_rx[0], from_rx[1]);

    cuda_ok(cudaSetDevice(0), "cudaSetDevice");
    dsv4_kv_pool *src = pool_new(ik->ops, pages, true);
    const dsv4_kv_layout *sl = dsv4_kv_pool_layout(src);
    static uint8_t blob[1 << 20];
    size_t len = bench_read_exposed(from_rx[0], blob, sizeof(blob));
    void *tx = bench_transport_new(tp, options, n_options), *peer;
    char err[512];
    if (ops->attach(tx, sl, blob, len, &peer, err, sizeof(err)) != 0)
        die(err);
    struct cudaDeviceProp prop;
    cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    printf("# transport/%s %s, two processes on %s\n", transport,
           staged ? "staged through pinned host buffers" : "over CUDA IPC", prop.name);

    uint32_t *sp = malloc(max_n * sizeof(*sp)), *dp = malloc(max_n * sizeof(*dp));
    dsv4_xfer_run *runs = malloc(max_n * sizeof(*runs));
    uint64_t *t = malloc((reps + 1) * sizeof(*t));
    cudaEvent_t ea, eb;
    cuda_ok(cudaEventCreate(&ea), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&eb), "cudaEventCreate");
    if (!sp || !dp || !runs || !t)
        die("out of memory");
    for (uint32_t k = 0; k < n_len; k++) {
        uint32_t n = (tokens[k] + PAGE_TOKENS - 1) / PAGE_TOKENS;
        size_t n_runs;
        bench_plan_pages(n, sp, dp);
        if (dsv4_pd_plan_runs(sp, dp, n, runs, &n_runs) != 0)
            die("plan");
        dsv4_xfer_req req = {sizeof(req), 1, 1, runs, n_runs, true, 0, 1};
        uint64_t bytes = bench_request_bytes(sl, n);
        uint32_t copies = 0;
        for (uint32_t i = 0; i < sl->n_buffers; i++)
            copies += dsv4_buf_is_paged(sl->buffers[i].kind) ? (uint32_t)n_runs : 1;
        bench_time_transfers(ops, tx, peer, &req, t, reps); /* t[0] warms up */
        uint64_t bad = 1;
        if (write(to_rx[1], &n, 4) != 4 || read(from_rx[0], &bad, 8) != 8)
            die("receiver gone");
        bench_sort_u64(t + 1, reps);
        uint64_t med = t[1 + reps / 2], best = t[1];

        /* the ceilings: the same bytes in one device-to-device copy, and through pinned
         * host memory (one copy down, one up) */
        uint8_t *a, *b, *h;
        cuda_ok(cudaMalloc((void **)&a, bytes), "cudaMalloc");
        cuda_ok(cudaMalloc((void **)&b, bytes), "cudaMalloc");
        cuda_ok(cudaMallocHost((void **)&h, bytes), "cudaMallocHost");
        uint64_t cmed = copy_median(b, a, NULL, bytes, reps, t, ea, eb);
        uint64_t pmed = copy_median(b, a, h, bytes, reps, t, ea, eb);
        cuda_ok(cudaFree(a), "cudaFree");
        cuda_ok(cudaFree(b), "cudaFree");
        cuda_ok(cudaFreeHost(h), "cudaFreeHost");
        printf("tokens=%u pages=%u runs=%zu copies=%u bytes=%llu reps=%u median_ms=%.3f "
               "best_ms=%.3f gbps=%.1f d2d_median_ms=%.3f d2d_gbps=%.1f pinned_median_ms=%.3f "
               "pinned_gbps=%.1f of_ceiling=%.0f%% landed=%s\n",
               tokens[k], n, n_runs, copies, (unsigned long long)bytes, reps, med / 1e6, best / 1e6,
               (double)bytes / (double)med, cmed / 1e6, (double)bytes / (double)cmed, pmed / 1e6,
               (double)bytes / (double)pmed, 100.0 * (double)(staged ? pmed : cmed) / (double)med,
               bad == 0 ? "yes" : "NO");
        fflush(stdout);
        if (bad != 0)
            die("the receiver's blocks differ from the sender's");
    }
    uint32_t end = 0;
    if (write(to_rx[1], &end, 4) != 4)
        die("receiver gone");
    ops->detach(tx, peer);
    tp->fini(tx);
    int ws = 0;
    if (waitpid(child, &ws, 0) != child || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        die("the receiver did not exit cleanly");
    cudaEventDestroy(ea);
    cudaEventDestroy(eb);
    free(t);
    free(runs);
    free(sp);
    free(dp);
    dsv4_kv_pool_free(src);
    dsv4_registry_free(reg);
    return 0;
}
