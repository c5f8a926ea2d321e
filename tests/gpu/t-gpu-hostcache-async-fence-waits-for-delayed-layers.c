/* t-gpu-hostcache-async-fence-waits-for-delayed-layers: hostcache/async on a KV layout in
 * CUDA memory, with inject_delay holding each layer of a load back on the copy stream:
 * the load is still running when load returns, yet every page and state block a reader
 * checksums right after the layer's fence equals the saved one, bit for bit: with the
 * host fence (wait_layer, what the CPU forward and host readers use) and with the stream
 * fence (stream_wait_layer then kernels queued on the compute stream, the host never
 * waiting). The negative control is t-gpu-hostcache-unfenced-race-is-caught. */
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
    plan(2 * 3);
    hcg_kv kv;
    hcg_kv_new(&kv, LAYERS, PAGES, SLOTS);
    char err[256];
    dsv4_host_pool *hp = dsv4_host_pool_new(&kv.lay, PAGES, SLOTS, err, sizeof(err));
    if (!hp)
        bail_out("%s", err);
    cudaStream_t compute;
    if (cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) != cudaSuccess)
        bail_out("cannot create the compute stream");
    const dsv4_plugin_desc *d = plugtest_open("hostcache", "async");
    const dsv4_hostcache_ops *ops = d->ops;
    void *conf = plugtest_config(d, "inject_delay", "25ms", NULL), *st = NULL;
    if (d->init(hcg_host(compute), conf, &st, err, sizeof(err)) != 0)
        bail_out("async: init failed (%s)", err);
    if (ops->attach(st, &kv.lay, dsv4_host_pool_layout(hp)) != 0)
        bail_out("async: attach failed");
    hcg_save_all(ops, st, &kv);

    for (int f = 0; f < 2; f++) {
        uint32_t blocks = 0;
        bool running = false;
        unsigned bad = hcg_fenced_reads(ops, st, &kv, compute, f == 1, &blocks, &running);
        ok(running, "%s: the delayed load was still running when load returned", fences[f]);
        is_int(bad, 0,
               "%s: every block read right after its layer's fence was the saved one (%u "
               "blocks, %d layers)",
               fences[f], blocks, LAYERS);
        is_int(hcg_loaded_mismatches(&kv, compute), 0, "%s: and every block is in place after it",
               fences[f]);
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
