/* topk.cu: exact top-k of the indexer scores, one thread-block cluster per query.
 *
 * Radix select over 32-bit keys that order like the scores (NaN lowest, -0 as +0): the 8
 * blocks of a cluster each take a slice of the query's scores, keep it in shared memory as
 * keys when it fits (else re-read it from global memory each pass), and in four passes of
 * 8 bits histogram the keys that match the prefix chosen so far. Each block sums the 8
 * histograms through distributed shared memory in rank order and picks the same digit, so
 * after four passes every block knows the k-th key T and how many keys equal to T to take.
 * Keys above T and the lowest-indexed keys equal to T are then gathered into rank 0, which
 * sorts them (bitonic, higher key first, then lower row) and writes the row numbers.
 *
 * The result depends only on the scores: counts are order-free, the gather order is undone
 * by the sort on (key, row), which is unique per row. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TK_THREADS 1024
#define TK_WARPS (TK_THREADS / 32)
#define TK_CLUSTER 8
#define TK_SLICE_CAP 36864u /* keys per block kept in shared memory (144 KiB) */
#define TK_UNROLL 16

typedef struct tk_shared {
    uint32_t warp_hist[TK_WARPS][256]; /* one histogram per warp: no atomics across warps */
    uint32_t hist[2][256];   /* this block's histogram; double-buffered across passes */
    uint32_t total[256];     /* the cluster's histogram of the current pass */
    uint32_t warp_cnt[TK_WARPS];
    uint32_t digit, above;   /* the chosen digit, keys of the prefix above it */
    uint32_t cnt_gt, cnt_eq; /* this block's keys > T and == T */
    uint32_t pos_gt, pos_eq; /* gather cursors */
    uint32_t cand_key[DSV4_CUDA_TOPK_MAX]; /* rank 0: every selected key, then sorted */
    uint32_t cand_row[DSV4_CUDA_TOPK_MAX];
    uint32_t gt_key[DSV4_CUDA_TOPK_MAX]; /* this block's keys > T (fewer than k) */
    uint32_t gt_row[DSV4_CUDA_TOPK_MAX];
} tk_shared;

#define TK_SMEM (sizeof(tk_shared) + TK_SLICE_CAP * sizeof(uint32_t))

__device__ static inline uint32_t tk_key(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0; /* NaN */
    if (u == 0x80000000u)
        u = 0; /* -0 ties with +0 */
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* a ranks before b */
__device__ static inline bool tk_before(uint32_t ka, uint32_t ra, uint32_t kb, uint32_t rb)
{
    return ka > kb || (ka == kb && ra < rb);
}

/* Sum of x over the block; every thread gets it. Uses sh->warp_cnt. */
__device__ static uint32_t tk_block_sum(tk_shared *sh, uint32_t x)
{
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int m = 16; m > 0; m >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, m);
    __syncthreads();
    if (lane == 0)
        sh->warp_cnt[warp] = x;
    __syncthreads();
    x = lane < TK_WARPS ? sh->warp_cnt[lane] : 0;
    for (int m = 16; m > 0; m >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, m);
    return x;
}

__global__ void __cluster_dims__(TK_CLUSTER, 1, 1) __launch_bounds__(TK_THREADS, 1)
    dsv4_topk_kernel(const float *__restrict__ scores, size_t stride, const uint32_t *n_rows_dev,
                     uint32_t k, uint32_t *idx)
{
    extern __shared__ __align__(16) uint8_t tk_smem[];
    tk_shared *sh = (tk_shared *)tk_smem;
    uint32_t *slice_keys = (uint32_t *)(tk_smem + sizeof(tk_shared));
    cg::cluster_group cluster = cg::this_cluster();
    const uint32_t rank = cluster.block_rank(), q = blockIdx.x / TK_CLUSTER;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t n = n_rows_dev[q];
    if (n > stride)
        n = (uint32_t)stride;
    const uint32_t kk = n < k ? n : k;
    uint32_t *out = idx + (size_t)q * k;

    for (uint32_t i = kk + rank * TK_THREADS + tid; i < k; i += TK_CLUSTER * TK_THREADS)
        out[i] = UINT32_MAX;
    if (kk == 0)
        return; /* the same for every block of the cluster */

    const uint32_t lo = (uint32_t)((uint64_t)n * rank / TK_CLUSTER);
    const uint32_t len = (uint32_t)((uint64_t)n * (rank + 1) / TK_CLUSTER) - lo;
    const float *src = scores + (size_t)q * stride + lo;
    const bool in_smem = len <= TK_SLICE_CAP;
    if (tid == 0) {
        sh->pos_gt = 0;
        sh->pos_eq = 0;
    }
    if (in_smem) {
        /* TK_UNROLL independent loads in flight per thread, not one round trip per key */
        for (uint32_t base = 0; base < len; base += TK_UNROLL * TK_THREADS) {
            float v[TK_UNROLL];
#pragma unroll
            for (int j = 0; j < TK_UNROLL; j++) {
                uint32_t i = base + j * TK_THREADS + tid;
                v[j] = i < len ? src[i] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < TK_UNROLL; j++) {
                uint32_t i = base + j * TK_THREADS + tid;
                if (i < len)
                    slice_keys[i] = tk_key(v[j]);
            }
        }
    }
    auto key_at = [&](uint32_t i) { return in_smem ? slice_keys[i] : tk_key(src[i]); };

    uint32_t prefix = 0, mask = 0, want = kk;
    for (int pass = 0; pass < 4; pass++) {
        const int shift = 24 - 8 * pass;
        uint32_t *hist = sh->hist[pass & 1], *wh = sh->warp_hist[warp];
        for (uint32_t i = tid; i < TK_WARPS * 256; i += TK_THREADS)
            (&sh->warp_hist[0][0])[i] = 0;
        __syncthreads();
#pragma unroll 4
        for (uint32_t base = 0; base < len; base += TK_THREADS) {
            uint32_t i = base + tid, digit = 256;
            if (i < len) {
                uint32_t key = key_at(i);
                if ((key & mask) == prefix)
                    digit = (key >> shift) & 255u;
            }
            /* one shared atomic per distinct digit in the warp; after the first pass most
             * warps have no key left under the prefix */
            if (__any_sync(0xffffffffu, digit < 256)) {
                uint32_t peers = __match_any_sync(0xffffffffu, digit);
                if (digit < 256 && lane == (uint32_t)__ffs(peers) - 1)
                    atomicAdd(&wh[digit], (uint32_t)__popc(peers));
            }
        }
        __syncthreads();
        if (tid < 256) {
            uint32_t s = 0;
            for (uint32_t w = 0; w < TK_WARPS; w++)
                s += sh->warp_hist[w][tid];
            hist[tid] = s;
        }
        cluster.sync();
        if (tid < 256) {
            uint32_t s = 0;
#pragma unroll
            for (uint32_t r = 0; r < TK_CLUSTER; r++)
                s += cluster.map_shared_rank(hist, r)[tid];
            sh->total[tid] = s;
        }
        __syncthreads();
        if (warp == 0) {
            /* lane l holds digits 255 - 8 l down to 248 - 8 l */
            uint32_t c[8], sum = 0;
            for (int j = 0; j < 8; j++) {
                c[j] = sh->total[255 - (lane * 8 + j)];
                sum += c[j];
            }
            uint32_t incl = sum;
            for (int m = 1; m < 32; m <<= 1) {
                uint32_t y = __shfl_up_sync(0xffffffffu, incl, m);
                if (lane >= (uint32_t)m)
                    incl += y;
            }
            uint32_t before = incl - sum;
            if (before < want && want <= incl) {
                for (int j = 0; j < 8; j++) {
                    if (before + c[j] >= want) {
                        sh->digit = 255u - (lane * 8u + (uint32_t)j);
                        sh->above = before;
                        break;
                    }
                    before += c[j];
                }
            }
        }
        __syncthreads();
        want -= sh->above;
        prefix |= sh->digit << shift;
        mask |= 255u << shift;
    }

    /* prefix is now T: kk - want keys are above it, and want keys equal to it are taken,
     * the lowest rows first. */
    const uint32_t T = prefix, n_gt = kk - want;
    uint32_t eq = 0;
    for (uint32_t i = tid; i < len; i += TK_THREADS) {
        uint32_t key = key_at(i);
        if (key > T) {
            uint32_t p = atomicAdd(&sh->pos_gt, 1u);
            sh->gt_key[p] = key;
            sh->gt_row[p] = lo + i;
        }
        eq += key == T;
    }
    eq = tk_block_sum(sh, eq);
    if (tid == 0) {
        sh->cnt_gt = sh->pos_gt;
        sh->cnt_eq = eq;
    }
    cluster.sync();
    uint32_t off_gt = 0, off_eq = 0;
    for (uint32_t r = 0; r < rank; r++) {
        off_gt += cluster.map_shared_rank(sh, r)->cnt_gt;
        off_eq += cluster.map_shared_rank(sh, r)->cnt_eq;
    }
    tk_shared *root = cluster.map_shared_rank(sh, 0);
    for (uint32_t j = tid; j < sh->cnt_gt; j += TK_THREADS) {
        root->cand_key[off_gt + j] = sh->gt_key[j];
        root->cand_row[off_gt + j] = sh->gt_row[j];
    }
    const uint32_t take_eq = off_eq >= want ? 0 : (want - off_eq < eq ? want - off_eq : eq);
    if (take_eq > 0 && take_eq == eq) {
        for (uint32_t i = tid; i < len; i += TK_THREADS) {
            if (key_at(i) == T) {
                uint32_t p = n_gt + off_eq + atomicAdd(&sh->pos_eq, 1u);
                root->cand_key[p] = T;
                root->cand_row[p] = lo + i;
            }
        }
    }
    if (take_eq > 0 && take_eq < eq) {
        /* only some of this block's ties: take them in row order, a block-wide scan per
         * round of TK_THREADS keys */
        uint32_t taken = 0;
        for (uint32_t base = 0; base < len && taken < take_eq; base += TK_THREADS) {
            uint32_t i = base + tid;
            bool hit = i < len && key_at(i) == T;
            uint32_t ball = __ballot_sync(0xffffffffu, hit);
            __syncthreads();
            if (lane == 0)
                sh->warp_cnt[warp] = __popc(ball);
            __syncthreads();
            uint32_t before = taken;
            for (uint32_t w = 0; w < warp; w++)
                before += sh->warp_cnt[w];
            before += __popc(ball & ((1u << lane) - 1u));
            if (hit && before < take_eq) {
                uint32_t p = n_gt + off_eq + before;
                root->cand_key[p] = T;
                root->cand_row[p] = lo + i;
            }
            for (uint32_t w = 0; w < TK_WARPS; w++)
                taken += sh->warp_cnt[w];
        }
    }
    cluster.sync();
    if (rank != 0)
        return;

    uint32_t size = 1;
    while (size < kk)
        size <<= 1;
    for (uint32_t i = kk + tid; i < size; i += TK_THREADS) {
        sh->cand_key[i] = 0;
        sh->cand_row[i] = UINT32_MAX;
    }
    __syncthreads();
    for (uint32_t run = 2; run <= size; run <<= 1) {
        for (uint32_t step = run >> 1; step > 0; step >>= 1) {
            for (uint32_t i = tid; i < size; i += TK_THREADS) {
                uint32_t j = i ^ step;
                if (j <= i)
                    continue;
                uint32_t ki = sh->cand_key[i], ri = sh->cand_row[i];
                uint32_t kj = sh->cand_key[j], rj = sh->cand_row[j];
                bool forward = (i & run) == 0;
                if (forward ? tk_before(kj, rj, ki, ri) : tk_before(ki, ri, kj, rj)) {
                    sh->cand_key[i] = kj;
                    sh->cand_row[i] = rj;
                    sh->cand_key[j] = ki;
                    sh->cand_row[j] = ri;
                }
            }
            __syncthreads();
        }
    }
    for (uint32_t i = tid; i < kk; i += TK_THREADS)
        out[i] = sh->cand_row[i];
}

extern "C" int dsv4_cuda_topk(const float *scores_dev, size_t stride, const uint32_t *n_rows_dev,
                              uint32_t n_queries, uint32_t k, uint32_t *idx_dev, void *stream)
{
    if (n_queries == 0 || k == 0)
        return 0;
    if (!scores_dev || !n_rows_dev || !idx_dev || stride == 0 || stride > UINT32_MAX)
        return -EINVAL;
    if (k > DSV4_CUDA_TOPK_MAX || n_queries > UINT32_MAX / TK_CLUSTER)
        return -ENOTSUP;
    int rc = dsv4_cuda_status(cudaFuncSetAttribute(
        dsv4_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)TK_SMEM));
    if (rc != 0)
        return rc;
    dsv4_topk_kernel<<<n_queries * TK_CLUSTER, TK_THREADS, TK_SMEM, (cudaStream_t)stream>>>(
        scores_dev, stride, n_rows_dev, k, idx_dev);
    return dsv4_cuda_launch_status();
}
