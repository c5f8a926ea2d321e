/* t-gpu-hostcache-async-fence-waits-for-delayed-layers: hostcache/async on a KV layout in
 * CUDA memory, with inject_delay holding each layer of a load back on the copy stream:
 * the load is still running when load returns, yet every page and state block a reader
 * checksums right after the layer's fence equals the saved one, bit for bit: with the
 * host fence (wait_layer, what the CPU forward and host readers use) and with the stream
 * fence (stream_wait_layer then kernels queued on the compute stream, the host never
 * waiting). The checksum kernels are launched as the forward's are, allowed to start while
 * the kernel before them runs (kernels/cuda/pdl.cuh): each layer's follow the last layer's,
 * so the stream fence's case also shows that such a launch still waits for the fence
 * queued before it. The negative control is t-gpu-hostcache-unfenced-race-is-caught. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "tests/gpu/hostcache-kit.h"

#define LAYERS 6
#define PAGES 8
#define SLOTS 3

int main(void)
{
    static const char *fences[] = {"host fence (wait_layer)", "stream fence (stream_wait_layer)"};
    gpu_require();
    plan(2 * 3);
    hcg_rig rig;
    hcg_rig_open(&rig, "async", "25ms", LAYERS, PAGES, SLOTS);

    for (int f = 0; f < 2; f++) {
        uint32_t blocks = 0;
        bool running = false;
        unsigned bad = hcg_fenced_reads(rig.ops, rig.state, &rig.kv, rig.compute, f == 1, &blocks,
                                        &running);
        ok(running, "%s: the delayed load was still running when load returned", fences[f]);
        is_int(bad, 0,
               "%s: every block read right after its layer's fence was the saved one (%u "
               "blocks, %d layers)",
               fences[f], blocks, LAYERS);
        is_int(hcg_loaded_mismatches(&rig.kv, rig.compute), 0, "%s: and every block is in place after it",
               fences[f]);
    }
    hcg_rig_close(&rig);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
