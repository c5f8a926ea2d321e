/* t-gpu-xxh64-matches-libxxhash: dsv4_cuda_xxh64 hashes many device blocks in one launch
 * bit for bit as libxxhash's XXH64 does on the host: every length from 0 to 100 (below,
 * at and around the 32-byte stripe and the 8/4/1-byte tails), page-sized and odd large
 * lengths, blocks starting at every alignment, several seeds; a changed byte changes the
 * hash. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define N_SMALL 101u /* lengths 0..100 */
#define N_BIG 7u

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint8_t rand_byte(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint8_t)(rng >> 56);
}

/* Hashes every block on the device and on the host; the number of mismatches. */
static unsigned compare(const uint8_t *host, uint8_t *dev, const size_t *off, const uint64_t *len,
                        uint32_t n, uint64_t seed)
{
    const void **ptrs = malloc(n * sizeof *ptrs);
    uint64_t *got = malloc(n * sizeof *got);
    void *ptrs_dev = gpu_alloc(n * sizeof *ptrs), *lens_dev = gpu_alloc(n * sizeof *len);
    uint64_t *hash_dev = gpu_alloc(n * sizeof *got);
    unsigned bad = 0;

    for (uint32_t i = 0; i < n; i++)
        ptrs[i] = dev + off[i];
    gpu_put(ptrs_dev, ptrs, n * sizeof *ptrs);
    gpu_put(lens_dev, len, n * sizeof *len);
    is_int(dsv4_cuda_xxh64(ptrs_dev, lens_dev, n, seed, hash_dev, NULL), 0,
           "%u blocks, seed %#llx: queued", n, (unsigned long long)seed);
    gpu_sync();
    gpu_get(got, hash_dev, n * sizeof *got);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t want = XXH64(host + off[i], len[i], seed);
        if (got[i] != want && bad++ < 5)
            diag("block %u (offset %zu, %llu bytes): %#llx, libxxhash %#llx", i, off[i],
                 (unsigned long long)len[i], (unsigned long long)got[i], (unsigned long long)want);
    }
    free(ptrs);
    free(got);
    gpu_free(ptrs_dev);
    gpu_free(lens_dev);
    gpu_free(hash_dev);
    return bad;
}

int main(void)
{
    static const uint64_t big[N_BIG] = {255, 256, 4096, 8448, 16384, 32768 + 13, 1000003};
    static const uint64_t seeds[] = {0, 1, 0x9e3779b97f4a7c15ull};
    uint32_t n = N_SMALL + N_BIG;
    size_t *off = malloc(n * sizeof *off), total = 0;
    uint64_t *len = malloc(n * sizeof *len);
    uint8_t *host, *dev;

    gpu_require();
    plan(3 * 2 + 3);
    /* blocks packed back to back, so most start at odd addresses */
    for (uint32_t i = 0; i < n; i++) {
        len[i] = i < N_SMALL ? i : big[i - N_SMALL];
        off[i] = total;
        total += len[i] + (i % 8);
    }
    host = malloc(total);
    for (size_t i = 0; i < total; i++)
        host[i] = rand_byte();
    dev = gpu_alloc(total);
    gpu_put(dev, host, total);
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
        is_int(compare(host, dev, off, len, n, seeds[s]), 0,
               "every block hashes as libxxhash does (seed %#llx)", (unsigned long long)seeds[s]);

    /* one flipped bit in a page-sized block */
    uint32_t page = N_SMALL + 3;
    uint64_t before = XXH64(host + off[page], len[page], 0);
    host[off[page] + 5000] ^= 0x10;
    gpu_put(dev, host, total);
    ok(XXH64(host + off[page], len[page], 0) != before, "the host hash sees the flipped bit");
    is_int(compare(host, dev, off, len, n, 0), 0, "and the device hash still agrees");

    gpu_free(dev);
    free(host);
    free(off);
    free(len);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
