/* t-gpu-hostcache-unfenced-race-is-caught: the negative control of
 * t-gpu-hostcache-async-fence-waits-for-delayed-layers. hostcache/unfenced copies as
 * async does (the same copy stream, the same delay) but its fences wait for nothing; the
 * same reads right after each fence must see blocks that have not landed yet, with the
 * host fence and with the stream fence. Were they to see none, the race test could not
 * tell a missing fence from a working one. Once the load is released the blocks are in
 * place: the control does load, it only does not fence. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "core/hostcache/hostpool.h"
#include "tests/gpu/hostcache-kit.h"
#include "tests/plugin/plugin-harness.h"

#define LAYERS 6
#define PAGES 8
#define SLOTS 3

int main(void)
{
    static const char *fences[] = {"host fence (wait_layer)", "stream fence (stream_wait_layer)"};
    gpu_require();
    plan(2 * 2);
    hcg_kv kv;
    hcg_kv_new(&kv, LAYERS, PAGES, SLOTS);
    char err[256];
    dsv4_host_pool *hp = dsv4_host_pool_new(&kv.lay, PAGES, SLOTS, err, sizeof(err));
    if (!hp)
        bail_out("%s", err);
    cudaStream_t compute;
    if (cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess)
        bail_out("cannot create the compute stream");
    const dsv4_plugin_desc *d = plugtest_open("hostcache", "unfenced");
    const dsv4_hostcache_ops *ops = d->ops;
    void *conf = plugtest_config(d, "inject_delay", "50ms", NULL), *st = NULL;
    if (d->init(hcg_host(compute), conf, &st, err, sizeof(err)) != 0)
        bail_out("unfenced: init failed (%s)", err);
    if (ops->attach(st, &kv.lay, dsv4_host_pool_layout(hp)) != 0)
        bail_out("unfenced: attach failed");
    hcg_save_all(ops, st, &kv);

    for (int f = 0; f < 2; f++) {
        uint32_t blocks = 0;
        bool running = false;
        unsigned bad = hcg_fenced_reads(ops, st, &kv, compute, f == 1, &blocks, &running);
        ok(bad > 0, "%s: the race is caught (%u of %u blocks read before they landed)", fences[f],
           bad, blocks);
        is_int(hcg_loaded_mismatches(&kv, compute), 0,
               "%s: every block is in place once the load is released", fences[f]);
    }
    d->fini(st);
    plugtest_config_free(d, conf);
    cudaStreamDestroy(compute);
    dsv4_host_pool_free(hp);
    hcg_kv_free(&kv);
    return done_testing();
}
#else
int main(void)
{
    gpu_require(); /* skips: built without CUDA */
    return 0;
}
#endif
