/* t-gpu-hostcache-round-trip-every-buffer-on-cuda: on a KV layout whose every buffer is
 * cudaMalloc'd, hostcache/sync and hostcache/async page-lock the host pool (the real one,
 * core/hostcache/hostpool.c) at attach and unlock it at fini; they save every page and
 * every state block to host ids in another order (runs of consecutive ids and single
 * ones), and the host copies of every buffer hash (XXH64) as the device blocks did; after
 * the device blocks are overwritten, loading them back into other device ids restores
 * every buffer, every block, checked by the CUDA XXH64 kernel against libxxhash. sync has
 * landed when load returns. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "core/hostcache/hostpool.h"
#include "tests/gpu/hostcache-kit.h"
#include "tests/plugin/plugin-harness.h"

#define LAYERS 6
#define PAGES 24
#define SLOTS 5

/* Host id of device block i on the way out: the first half shifted by a run, the second
 * half shuffled (5 is prime to 12); device id of host block h on the way back: another
 * shuffle (11 is prime to 24, SLOTS). */
static uint32_t out_id(uint32_t i, uint32_t n)
{
    uint32_t half = n / 2;
    return i < half ? i + (n - half) : (i - half) * 5 % half;
}

static uint32_t back_id(uint32_t h, uint32_t n)
{
    return (h * 11 + 1) % n;
}

static bool pool_pinned(const dsv4_kv_layout *h)
{
    bool all = true;
    for (uint32_t i = 0; i < h->n_buffers; i++)
        all = all && hcg_is_pinned(h->buffers[i].base) &&
              hcg_is_pinned(h->buffers[i].base +
                            h->buffers[i].block_bytes * h->buffers[i].n_blocks - 1);
    return all;
}

/* Save every block of one kind out and load it back; the host and device mismatches. */
static void round_trip(const char *name, const dsv4_hostcache_ops *ops, void *st, hcg_kv *kv,
                       const dsv4_kv_layout *hl, bool paged, bool sync, void *stream)
{
    uint32_t n = paged ? PAGES : SLOTS;
    const char *what = paged ? "page" : "state block";
    uint32_t dev[PAGES], host[PAGES], back[PAGES], ref[PAGES];
    dsv4_page_copy c[PAGES];
    for (uint32_t i = 0; i < n; i++) {
        dev[i] = i;
        host[i] = paged ? out_id(i, n) : n - 1 - i;
        c[i] = (dsv4_page_copy){.device_page = dev[i], .host_page = host[i]};
    }
    void *op = NULL;
    int rc = paged ? ops->save(st, c, n, &op) : ops->save_state(st, c, n, &op);
    for (uint32_t l = 0; l < LAYERS && rc == 0; l++)
        rc = ops->wait_layer(st, op, l);
    is_int(rc, 0, "%s: save of every %s queued and waited for", name, what);
    ops->release(st, op);
    is_int(hcg_host_mismatches(kv, hl, paged, host, dev, n), 0,
           "%s: every %s of every buffer on host hashes as it did on the device", name, what);

    hcg_scribble(kv, paged, dev, n);
    for (uint32_t i = 0; i < n; i++) {
        back[i] = back_id(host[i], n);
        ref[i] = dev[i];
        c[i] = (dsv4_page_copy){.device_page = back[i], .host_page = host[i]};
    }
    rc = paged ? ops->load(st, c, n, &op) : ops->load_state(st, c, n, &op);
    if (sync)
        is_int(ops->poll(st, op), 0, "%s: the %s load has landed when load returns", name, what);
    for (uint32_t l = 0; l < LAYERS && rc == 0; l++)
        rc = ops->wait_layer(st, op, l);
    is_int(rc, 0, "%s: load of every %s queued and waited for", name, what);
    hcg_check *chk = hcg_check_new(kv, paged, HCG_ALL_LAYERS, back, ref, n);
    hcg_check_queue(chk, stream);
    is_int(hcg_check_mismatches(chk, stream), 0,
           "%s: every %s of every buffer loaded back into other ids (%u blocks hashed on the "
           "device)",
           name, what, hcg_check_blocks(chk));
    hcg_check_free(chk);
    ops->release(st, op);
}

int main(void)
{
    static const char *names[] = {"sync", "async"};
    gpu_require();
    plan(1 + 2 * (4 + 2 * 4) + 2); /* sync also polls once per kind */
    hcg_kv kv;
    hcg_kv_new(&kv, LAYERS, PAGES, SLOTS);
    char err[256];
    dsv4_host_pool *hp = dsv4_host_pool_new(&kv.lay, PAGES, SLOTS, err, sizeof(err));
    if (!hp)
        bail_out("%s", err);
    const dsv4_kv_layout *hl = dsv4_host_pool_layout(hp);
    cudaStream_t compute;
    if (cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess)
        bail_out("cannot create the compute stream");
    ok(!pool_pinned(hl), "the host pool is plain memory before a plugin attaches");

    for (int i = 0; i < 2; i++) {
        hcg_kv_restore(&kv); /* the previous plugin left the blocks in other ids */
        const dsv4_plugin_desc *d = plugtest_open("hostcache", names[i]);
        const dsv4_hostcache_ops *ops = d->ops;
        void *conf = plugtest_config(d, NULL), *st = NULL;
        if (d->init(hcg_host(compute), conf, &st, err, sizeof(err)) != 0)
            bail_out("%s: init failed (%s)", names[i], err);
        is_int(ops->attach(st, &kv.lay, hl), 0, "%s: attach to the CUDA layout", names[i]);
        ok(pool_pinned(hl), "%s: attach page-locked the host pool, every buffer", names[i]);
        round_trip(names[i], ops, st, &kv, hl, true, i == 0, compute);
        round_trip(names[i], ops, st, &kv, hl, false, i == 0, compute);
        d->fini(st);
        plugtest_config_free(d, conf);
        ok(!pool_pinned(hl), "%s: fini unlocked the host pool", names[i]);
        ok(cudaGetLastError() == cudaSuccess, "%s: no CUDA error left behind", names[i]);
    }
    cudaStreamDestroy(compute);
    dsv4_host_pool_free(hp);
    hcg_kv_free(&kv);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
