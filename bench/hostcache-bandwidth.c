/* hostcache-bandwidth.c: how fast hostcache/async moves KV pages between a pinned host
 * pool and a KV layout in CUDA memory, against the copy engine's own ceiling in the same
 * run (one cudaMemcpyAsync of the same bytes between the same pinned slab and one device
 * buffer).
 *
 * The layout is the GPU tests' (tests/gpu/hostcache-kit.h) at 43 layers: window ring on
 * every layer, CSA rows + fp8 index-K on CSA layers, HCA rows on HCA layers, real row
 * widths. For 8k, 32k and 128k-token prefixes (32, 128, 512 pages) it times, wall clock
 * from the call to the last layer's fence, the load (host -> device) and the save
 * (device -> host) of all their pages: once with consecutive ids on both sides (one copy
 * per buffer per layer) and once with shuffled ids (one copy per page per buffer, still
 * one batch per layer). Median of 7 after a warm-up. Prints a markdown table. Built with
 * CUDA and the tests only; run by hand on a GPU machine. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/hostcache/hostpool.h"
#include "tests/gpu/gpu.h"
#include "tests/gpu/hostcache-kit.h"
#include "tests/plugin/plugin-harness.h"
#include "tests/tap.h"

#define LAYERS 43
#define MAX_PAGES 512
#define REPS 7

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t)
{
    qsort(t, REPS, sizeof(*t), cmp_double);
    return t[REPS / 2];
}

/* Median seconds of one op over n pages with the given id order. */
static double time_op(const dsv4_hostcache_ops *ops, void *st, bool load, uint32_t n, bool shuffled)
{
    dsv4_page_copy c[MAX_PAGES];
    double t[REPS];
    for (uint32_t i = 0; i < n; i++) {
        /* 7 is prime to every n here: a permutation with no two neighbours adjacent */
        uint32_t host = shuffled ? (i * 7 + 3) % n : i;
        c[i] = (dsv4_page_copy){.device_page = i, .host_page = host};
    }
    for (int r = -1; r < REPS; r++) {
        void *op = NULL;
        double t0 = now_s();
        int rc = load ? ops->load(st, c, n, &op) : ops->save(st, c, n, &op);
        if (rc == 0)
            rc = ops->wait_layer(st, op, LAYERS - 1);
        double t1 = now_s();
        if (rc != 0)
            bail_out("%s of %u pages failed (%d)", load ? "load" : "save", n, rc);
        ops->release(st, op);
        if (r >= 0)
            t[r] = t1 - t0;
    }
    return median(t);
}

/* Median seconds of one cudaMemcpyAsync of bytes between host and dev. */
static double time_ceiling(void *host, void *dev, size_t bytes, bool h2d, cudaStream_t s)
{
    double t[REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = now_s();
        cudaError_t e = h2d ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s)
                            : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        double t1 = now_s();
        if (e != cudaSuccess)
            bail_out("ceiling copy failed (%s)", cudaGetErrorString(e));
        if (r >= 0)
            t[r] = t1 - t0;
    }
    return median(t);
}

int main(void)
{
    static const uint32_t pages[] = {32, 128, 512};
    gpu_require();
    hcg_kv kv;
    hcg_kv_new(&kv, LAYERS, MAX_PAGES, 1);
    char err[256];
    dsv4_host_pool *hp = dsv4_host_pool_new(&kv.lay, MAX_PAGES, 1, err, sizeof(err));
    if (!hp)
        bail_out("%s", err);
    const dsv4_kv_layout *hl = dsv4_host_pool_layout(hp);
    cudaStream_t compute, s;
    if (cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        bail_out("cannot create the streams");
    const dsv4_plugin_desc *d = plugtest_open("hostcache", "async");
    const dsv4_hostcache_ops *ops = d->ops;
    void *conf = plugtest_config(d, NULL), *st = NULL;
    if (d->init(hcg_host(compute), conf, &st, err, sizeof(err)) != 0)
        bail_out("async: init failed (%s)", err);
    double t0 = now_s();
    if (ops->attach(st, &kv.lay, hl) != 0)
        bail_out("async: attach failed");
    size_t page_bytes = hcg_unit_bytes(&kv, true);
    printf("attach (page-locking %.0f MB of host pool): %.3f s\n\n",
           (double)page_bytes * MAX_PAGES / 1e6, now_s() - t0);
    /* the ceiling's host side is the pool's own pinned slab (its first buffer starts it) */
    void *dev = gpu_alloc(page_bytes * MAX_PAGES);
    printf("| tokens | MB | ids | load GB/s | save GB/s | load ms/layer | ceiling H2D GB/s | "
           "ceiling D2H GB/s |\n|---|---|---|---|---|---|---|---|\n");
    for (int p = 0; p < 3; p++) {
        size_t bytes = page_bytes * pages[p];
        double h2d = bytes / time_ceiling(hl->buffers[0].base, dev, bytes, true, s) / 1e9;
        double d2h = bytes / time_ceiling(hl->buffers[0].base, dev, bytes, false, s) / 1e9;
        for (int shuffled = 0; shuffled < 2; shuffled++) {
            double tl = time_op(ops, st, true, pages[p], shuffled);
            double ts = time_op(ops, st, false, pages[p], shuffled);
            printf("| %u | %.1f | %s | %.1f | %.1f | %.3f | %.1f | %.1f |\n", pages[p] * 256,
                   bytes / 1e6, shuffled ? "shuffled" : "consecutive", bytes / tl / 1e9,
                   bytes / ts / 1e9, tl * 1e3 / LAYERS, h2d, d2h);
        }
    }
    gpu_free(dev);
    d->fini(st);
    plugtest_config_free(d, conf);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(s);
    dsv4_host_pool_free(hp);
    hcg_kv_free(&kv);
    return 0;
}
