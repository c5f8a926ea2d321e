/* pd-handoff.c: KV handoff bandwidth and latency of one transport plugin, for
 * bench/pd-handoff.sh.
 *
 * Two pools with the KV geometry of DeepSeek-V4-Flash (43 layers: 2 sliding, 21 CSA, 20
 * HCA; D 512 bf16, index-K fp8 with DI 128, window 128, 256-token pages). The receiver
 * exposes its pool, the sender attaches, then each repetition moves one request of
 * --tokens tokens (its pages scattered in two runs, plus the state slot) with one post and
 * polls it to completion. --fork puts the receiver in a child process (its pool in shared
 * memory), as a PD pair runs. Prints one line of key=value pairs: bytes per request, the
 * median and best time per request, and the bandwidth at the median; with --memcpy, the
 * same bytes through memcpy (the ceiling for transport/local).
 */
#include "config.h"

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
#include "core/plugin/registry.h"
#include "core/pd/checksum.h"
#include "core/pd/plan.h"

#define PAGE_TOKENS 256

static void die(const char *what)
{
    fprintf(stderr, "pd-handoff: %s\n", what);
    exit(1);
}

static dsv4_kv_pool *pool_new(const dsv4_indexk_ops *ik, uint32_t pages, bool shared)
{
    static dsv4_model_config m;
    bench_flash_kv_model(&m);
    dsv4_kv_pool_conf c = {&m, DSV4_KV_BF16, PAGE_TOKENS, pages, 2, ik, "fp8"};
    char err[256];
    dsv4_kv_pool *p = shared ? dsv4_kv_pool_new_shared(&c, err, sizeof(err))
                             : dsv4_kv_pool_new(&c, err, sizeof(err));
    if (!p)
        die(err);
    const dsv4_kv_layout *l = dsv4_kv_pool_layout(p);
    for (uint32_t i = 0; i < l->n_buffers; i++) /* touch every page: no first-write faults */
        memset(l->buffers[i].base, (int)(i * 7 + 1),
               l->buffers[i].block_bytes * l->buffers[i].n_blocks);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: pd-handoff TRANSPORT [key=value ...] [--tokens N] [--reps R] [--fork] "
            "[--memcpy]");
    const char *name = argv[1];
    uint32_t tokens = 8192, reps = 20;
    bool fork_rx = false, with_memcpy = false;
    char *kv[16];
    int n_kv = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            tokens = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--fork") == 0)
            fork_rx = true;
        else if (strcmp(argv[i], "--memcpy") == 0)
            with_memcpy = true;
        else if (n_kv < 16 && strchr(argv[i], '='))
            kv[n_kv++] = argv[i];
        else
            die("unknown argument");
    }
    uint32_t n = (tokens + PAGE_TOKENS - 1) / PAGE_TOKENS, pages = 2 * n + 4;
    if (reps == 0 || reps > 10000 || n == 0)
        die("bad --tokens or --reps");

    dsv4_registry *reg = dsv4_registry_new(NULL);
    if (!reg || dsv4_registry_scan(reg, NULL, NULL) != 0)
        die("plugin registry");
    const dsv4_plugin_desc *ik = dsv4_registry_find(reg, DSV4_FAMILY_INDEXK, "fp8", NULL);
    const dsv4_plugin_desc *tp = dsv4_registry_find(reg, DSV4_FAMILY_TRANSPORT, name, NULL);
    if (!ik || !tp)
        die("plugins not found (DSV4D_PLUGIN_PATH)");
    const dsv4_transport_ops *ops = tp->ops;

    dsv4_kv_pool *src = pool_new(ik->ops, pages, false), *dst = pool_new(ik->ops, pages, true);
    const dsv4_kv_layout *sl = dsv4_kv_pool_layout(src), *dl = dsv4_kv_pool_layout(dst);
    static uint8_t blob[1 << 20];
    size_t len = sizeof(blob);
    int pipe_blob[2], pipe_done[2];
    if (pipe(pipe_blob) != 0 || pipe(pipe_done) != 0)
        die("pipe");
    pid_t child = -1;
    void *rx = NULL;
    if (fork_rx) {
        child = fork();
        if (child == 0) {
            rx = bench_transport_new(tp, kv, n_kv);
            char c;
            if (bench_send_exposed(ops, rx, dl, pipe_blob[1]) != 0 ||
                read(pipe_done[0], &c, 1) != 1)
                _exit(1);
            tp->fini(rx);
            _exit(0);
        }
        len = bench_read_exposed(pipe_blob[0], blob, sizeof(blob));
    } else {
        rx = bench_transport_new(tp, kv, n_kv);
        if (ops->expose(rx, dl, blob, &len) != 0)
            die("expose");
    }
    void *tx = bench_transport_new(tp, kv, n_kv), *peer;
    char err[512];
    if (ops->attach(tx, sl, blob, len, &peer, err, sizeof(err)) != 0)
        die(err);

    uint32_t *sp = malloc(n * sizeof(*sp)), *dp = malloc(n * sizeof(*dp));
    bench_plan_pages(n, sp, dp);
    dsv4_xfer_run *runs = malloc(n * sizeof(*runs));
    size_t n_runs;
    if (dsv4_pd_plan_runs(sp, dp, n, runs, &n_runs) != 0)
        die("plan");
    dsv4_xfer_req req = {sizeof(req), 1, 1, runs, n_runs, true, 0, 1};
    uint64_t bytes = bench_request_bytes(sl, n);
    uint64_t *t = malloc((reps + 1) * sizeof(*t));
    bench_time_transfers(ops, tx, peer, &req, t, reps); /* t[0] warms up */
    /* the last request landed whole (the receiver shares dst with us) */
    dsv4_pd_blocks a = {sp, n, true, 0}, b = {dp, n, true, 1};
    size_t cnt = dsv4_pd_sum_count(sl, &a);
    uint64_t *sums = malloc(cnt * sizeof(*sums));
    dsv4_pd_sum_bad bad;
    uint32_t n_bad;
    if (dsv4_pd_sum_compute(sl, &a, sums, cnt) != 0 ||
        dsv4_pd_sum_verify(dl, &b, sums, cnt, &bad, &n_bad) != 0)
        die("checksums do not match after the transfer");
    bench_sort_u64(t + 1, reps);
    uint64_t med = t[1 + reps / 2], best = t[1];
    printf("transport=%s options=\"", name);
    for (int i = 0; i < n_kv; i++)
        printf("%s%s", i ? " " : "", kv[i]);
    printf("\" processes=%d tokens=%u pages=%u runs=%zu buffers=%u bytes=%llu reps=%u "
           "median_ms=%.3f best_ms=%.3f gbps=%.2f",
           fork_rx ? 2 : 1, tokens, n, n_runs, sl->n_buffers, (unsigned long long)bytes, reps,
           med / 1e6, best / 1e6, (double)bytes / (double)med);

    if (with_memcpy) {
        uint8_t *a1 = malloc(bytes), *b1 = malloc(bytes);
        memset(a1, 1, bytes);
        memset(b1, 2, bytes);
        for (uint32_t r = 0; r <= reps; r++) {
            uint64_t t0 = bench_now_ns();
            memcpy(b1, a1, bytes);
            t[r] = bench_now_ns() - t0;
            a1[r % bytes] = b1[(r * 7) % bytes]; /* keep the copies observable */
        }
        bench_sort_u64(t + 1, reps);
        printf(" memcpy_median_ms=%.3f memcpy_gbps=%.2f", t[1 + reps / 2] / 1e6,
               (double)bytes / (double)t[1 + reps / 2]);
        free(a1);
        free(b1);
    }
    printf("\n");
    ops->detach(tx, peer);
    tp->fini(tx);
    if (fork_rx) {
        if (write(pipe_done[1], "x", 1) != 1)
            die("pipe");
        waitpid(child, NULL, 0);
    } else {
        tp->fini(rx);
    }
    free(sums);
    free(t);
    free(runs);
    free(sp);
    free(dp);
    dsv4_kv_pool_free(src);
    dsv4_kv_pool_free(dst);
    dsv4_registry_free(reg);
    return 0;
}
