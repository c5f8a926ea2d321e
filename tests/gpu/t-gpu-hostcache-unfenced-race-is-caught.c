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
#include "tests/gpu/hostcache-kit.h"

#define LAYERS 6
#define PAGES 8
#define SLOTS 3

int main(void)
{
    static const char *fences[] = {"host fence (wait_layer)", "stream fence (stream_wait_layer)"};
    gpu_require();
    plan(2 * 2);
    hcg_rig rig;
    hcg_rig_open(&rig, "unfenced", "50ms", LAYERS, PAGES, SLOTS);

    for (int f = 0; f < 2; f++) {
        uint32_t blocks = 0;
        bool running = false;
        unsigned bad = hcg_fenced_reads(rig.ops, rig.state, &rig.kv, rig.compute, f == 1, &blocks,
                                        &running);
        ok(bad > 0, "%s: the race is caught (%u of %u blocks read before they landed)", fences[f],
           bad, blocks);
        is_int(hcg_loaded_mismatches(&rig.kv, rig.compute), 0,
               "%s: every block is in place once the load is released", fences[f]);
    }
    hcg_rig_close(&rig);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
