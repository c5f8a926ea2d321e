/* xxh64.cu: XXH64 of many device blocks in one launch (page checksums, DESIGN.md §10).
 *
 * XXH64 keeps four independent 64-bit lanes over 32-byte stripes and merges them at the
 * end, so four threads share one block: thread j of a quad folds word j of every stripe,
 * then the quad's first thread merges and runs the tail and the avalanche exactly as
 * xxhash.h does. The constants and steps are those of the XXH64 specification. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/status.cuh"

#define XXH_P1 0x9E3779B185EBCA87ull
#define XXH_P2 0xC2B2AE3D27D4EB4Full
#define XXH_P3 0x165667B19E3779F9ull
#define XXH_P4 0x85EBCA77C2B2AE63ull
#define XXH_P5 0x27D4EB2F165667C5ull
#define XXH_THREADS 256

__device__ static inline uint64_t xxh_rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* Little-endian loads at any alignment. */
__device__ static inline uint64_t xxh_read64(const uint8_t *p)
{
    if (((uintptr_t)p & 7) == 0)
        return *(const uint64_t *)p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

__device__ static inline uint32_t xxh_read32(const uint8_t *p)
{
    if (((uintptr_t)p & 3) == 0)
        return *(const uint32_t *)p;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ static inline uint64_t xxh_round(uint64_t acc, uint64_t input)
{
    acc += input * XXH_P2;
    acc = xxh_rotl(acc, 31);
    return acc * XXH_P1;
}

__device__ static inline uint64_t xxh_merge(uint64_t acc, uint64_t val)
{
    acc ^= xxh_round(0, val);
    return acc * XXH_P1 + XXH_P4;
}

__global__ void dsv4_xxh64_kernel(const void *const *blocks, const uint64_t *lens, uint32_t n,
                                  uint64_t seed, uint64_t *hashes)
{
    dsv4_pdl_begin();
    uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t lane = threadIdx.x & 31, quad = lane & 3;
    uint64_t item = t >> 2;
    bool live = item < n;
    const uint8_t *p = live ? (const uint8_t *)blocks[item] : nullptr;
    uint64_t len = live ? lens[item] : 0, stripes = len >> 5;
    uint64_t v = seed + (quad == 0   ? XXH_P1 + XXH_P2
                         : quad == 1 ? XXH_P2
                         : quad == 2 ? 0
                                     : 0 - XXH_P1);

    for (uint64_t s = 0; s < stripes; s++)
        v = xxh_round(v, xxh_read64(p + s * 32 + quad * 8));
    /* every lane takes part in the shuffles, live or not */
    uint64_t v1 = __shfl_sync(0xffffffffu, v, lane & ~3u);
    uint64_t v2 = __shfl_sync(0xffffffffu, v, (lane & ~3u) + 1);
    uint64_t v3 = __shfl_sync(0xffffffffu, v, (lane & ~3u) + 2);
    uint64_t v4 = __shfl_sync(0xffffffffu, v, (lane & ~3u) + 3);
    if (!live || quad != 0)
        return;

    uint64_t h;
    if (stripes > 0) {
        h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
        h = xxh_merge(h, v1);
        h = xxh_merge(h, v2);
        h = xxh_merge(h, v3);
        h = xxh_merge(h, v4);
    } else {
        h = seed + XXH_P5;
    }
    h += len;
    p += stripes * 32;
    len &= 31;
    for (; len >= 8; len -= 8, p += 8) {
        h ^= xxh_round(0, xxh_read64(p));
        h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
    }
    if (len >= 4) {
        h ^= (uint64_t)xxh_read32(p) * XXH_P1;
        h = xxh_rotl(h, 23) * XXH_P2 + XXH_P3;
        p += 4;
        len -= 4;
    }
    for (; len > 0; len--, p++) {
        h ^= *p * XXH_P5;
        h = xxh_rotl(h, 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    hashes[item] = h;
}

extern "C" int dsv4_cuda_xxh64(const void *const *blocks_dev, const uint64_t *lens_dev, uint32_t n,
                               uint64_t seed, uint64_t *hashes_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (!blocks_dev || !lens_dev || !hashes_dev)
        return -EINVAL;
    uint64_t threads = (uint64_t)n * 4;
    unsigned grid = (unsigned)((threads + XXH_THREADS - 1) / XXH_THREADS);
    return dsv4_pdl_launch(dsv4_xxh64_kernel, grid, XXH_THREADS, 0, (cudaStream_t)stream,
                           blocks_dev, lens_dev, n, seed, hashes_dev);
}
