/* topk.cu: exact top-k of the indexer scores, one thread-block cluster per query.
 *
 * Radix select over 32-bit keys that order like the scores (NaN lowest, -0 as +0), in three
 * digit passes of 11, 11 and 10 bits. The 8 blocks of a cluster each take a slice of the
 * query's scores. Pass one histograms the top digit of every key straight from global
 * memory; the blocks sum their histograms through distributed shared memory in rank order
 * and pick the same digit. Each block then compacts its keys with that digit (a small share
 * of the slice for any spread of scores) into a candidate list in shared memory, and the
 * two remaining passes histogram only those; a block whose candidates overflow the list
 * re-reads its slice instead, which gives the same histogram. After the last pass every
 * block knows the k-th key T and how many keys equal to T to take (the lowest rows, which
 * lie in the lowest ranks' slices). The selected keys are gathered into rank 0; each block
 * then ranks a share of them by counting the selected keys that order before each one
 * (higher key, or equal key and lower row) and writes each row straight to its place.
 *
 * Why not a sort: the first pass is one read of the scores; everything after it touches a
 * few thousand keys, and ranking k keys by counting costs k^2 / 8 comparisons per block
 * with no barrier between steps, where a bitonic sort of k keys needs log^2 k barriers.
 *
 * The result depends only on the scores: histograms are counts, the gather order is
 * undone by the ranking on (key, row), which is unique per row. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define TK_THREADS 1024
#define TK_WARPS (TK_THREADS / 32)
#define TK_CLUSTER 8
#define TK_BINS 2048      /* 11-bit digits */
#define TK_CAND_CAP 4096u /* candidate keys per block after the first pass */
#define TK_UNROLL 8       /* independent global loads in flight per thread */

typedef struct tk_shared {
    uint32_t hist[2][TK_BINS]; /* this block's histogram; double-buffered across passes */
    uint32_t warp_sum[TK_WARPS];
    uint32_t digit, above;          /* the chosen digit, keys under the prefix above it */
    uint32_t n_cand, n_sel;         /* list lengths (n_cand may pass the capacity: overflow) */
    uint32_t cnt_gt, cnt_eq;        /* this block's keys > T (all in sel) and == T */
    uint32_t pos_eq;                /* gather cursor for ties */
    uint32_t cand_key[TK_CAND_CAP]; /* keys whose top digit is the chosen one */
    uint32_t cand_row[TK_CAND_CAP];
    uint32_t sel_key[DSV4_CUDA_TOPK_MAX]; /* this block's keys > T; later the whole top-k */
    uint32_t sel_row[DSV4_CUDA_TOPK_MAX];
    uint32_t top_key[DSV4_CUDA_TOPK_MAX]; /* rank 0: every selected key, unordered */
    uint32_t top_row[DSV4_CUDA_TOPK_MAX];
} tk_shared;

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

/* Calls fn(i, key) for every i of the slice, TK_UNROLL loads in flight per thread. Every
 * lane of every warp takes part in each call (fn may use warp votes); i >= len marks a lane
 * without a key. */
template <typename F>
__device__ static inline void tk_for_slice(const float *__restrict__ src, uint32_t len, F fn)
{
    for (uint32_t base = 0; base < len; base += TK_UNROLL * TK_THREADS) {
        float v[TK_UNROLL];
#pragma unroll
        for (int j = 0; j < TK_UNROLL; j++) {
            uint32_t i = base + j * TK_THREADS + threadIdx.x;
            v[j] = i < len ? src[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < TK_UNROLL; j++)
            fn(base + j * TK_THREADS + threadIdx.x, tk_key(v[j]));
    }
}

/* Appends (key, row) of the lanes with hit to a list: one shared atomic per warp. Entries
 * past cap are counted in *cnt but not stored. Called by all lanes of the warp. */
__device__ static inline void tk_push(bool hit, uint32_t key, uint32_t row, uint32_t *cnt,
                                      uint32_t *keys, uint32_t *rows, uint32_t cap)
{
    uint32_t ball = __ballot_sync(0xffffffffu, hit), lane = threadIdx.x & 31, base = 0;
    if (ball == 0)
        return;
    uint32_t leader = (uint32_t)__ffs(ball) - 1;
    if (lane == leader)
        base = atomicAdd(cnt, (uint32_t)__popc(ball));
    base = __shfl_sync(0xffffffffu, base, leader);
    uint32_t p = base + (uint32_t)__popc(ball & ((1u << lane) - 1u));
    if (hit && p < cap) {
        keys[p] = key;
        rows[p] = row;
    }
}

/* Sum of x over the block; every thread gets it. */
__device__ static uint32_t tk_block_sum(tk_shared *sh, uint32_t x)
{
    uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    x = __reduce_add_sync(0xffffffffu, x);
    __syncthreads();
    if (lane == 0)
        sh->warp_sum[warp] = x;
    __syncthreads();
    return __reduce_add_sync(0xffffffffu, lane < TK_WARPS ? sh->warp_sum[lane] : 0u);
}

/* Sums the cluster's histograms of this pass (nbins of 1024 or 2048) and picks the digit
 * that holds the want-th key from the top: sh->digit, and sh->above = the keys under the
 * prefix with a higher digit. Every block computes the same. */
__device__ static void tk_pick(tk_shared *sh, cg::cluster_group &cluster, const uint32_t *hist,
                               uint32_t nbins, uint32_t want)
{
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t per = nbins / TK_THREADS; /* 1 or 2 bins per thread, from the top */
    uint32_t c[2] = {0, 0};
#pragma unroll
    for (uint32_t j = 0; j < 2; j++) {
        if (j >= per)
            break;
        uint32_t bin = nbins - 1 - (tid * per + j);
#pragma unroll
        for (uint32_t r = 0; r < TK_CLUSTER; r++)
            c[j] += cluster.map_shared_rank(hist, r)[bin];
    }
    uint32_t sum = c[0] + c[1], incl = sum;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, incl, m);
        if (lane >= (uint32_t)m)
            incl += y;
    }
    if (lane == 31)
        sh->warp_sum[warp] = incl;
    __syncthreads();
    uint32_t before = incl - sum;
    for (uint32_t w = 0; w < warp; w++)
        before += sh->warp_sum[w];
    if (before < want && want <= before + sum) {
#pragma unroll
        for (uint32_t j = 0; j < 2; j++) {
            if (j < per && before + c[j] >= want) {
                sh->digit = nbins - 1 - (tid * per + j);
                sh->above = before;
                break;
            }
            before += c[j];
        }
    }
    __syncthreads();
}

__global__ void __cluster_dims__(TK_CLUSTER, 1, 1) __launch_bounds__(TK_THREADS, 1)
    dsv4_topk_kernel(const float *__restrict__ scores, size_t stride, const uint32_t *n_rows_dev,
                     uint32_t k, uint32_t *idx)
{
    extern __shared__ __align__(16) uint8_t tk_smem[];
    tk_shared *sh = (tk_shared *)tk_smem;
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
    for (uint32_t i = tid; i < TK_BINS; i += TK_THREADS)
        sh->hist[0][i] = 0;
    if (tid == 0) {
        sh->n_cand = 0;
        sh->n_sel = 0;
        sh->pos_eq = 0;
    }
    __syncthreads();

    /* pass 1: the top 11 bits of every key */
    tk_for_slice(src, len, [&](uint32_t i, uint32_t key) {
        if (i < len)
            atomicAdd(&sh->hist[0][key >> 21], 1u);
    });
    cluster.sync();
    tk_pick(sh, cluster, sh->hist[0], TK_BINS, kk);
    const uint32_t top = sh->digit;
    uint32_t want = kk - sh->above, prefix = top << 21, mask = 0xffe00000u;

    /* keys with a higher top digit are in the top-k (fewer than k of them in the whole
     * cluster); keys with the chosen one are the candidates */
    tk_for_slice(src, len, [&](uint32_t i, uint32_t key) {
        bool live = i < len;
        tk_push(live && key >> 21 == top, key, lo + i, &sh->n_cand, sh->cand_key, sh->cand_row,
                TK_CAND_CAP);
        tk_push(live && key >> 21 > top, key, lo + i, &sh->n_sel, sh->sel_key, sh->sel_row,
                DSV4_CUDA_TOPK_MAX);
    });
    __syncthreads();
    const bool from_cand = sh->n_cand <= TK_CAND_CAP;
    const uint32_t n_cand = sh->n_cand;

    /* passes 2 and 3: bits 20-10, then 9-0, of the keys under the prefix */
    for (int pass = 1; pass < 3; pass++) {
        const int shift = pass == 1 ? 10 : 0;
        const uint32_t nbins = pass == 1 ? TK_BINS : TK_BINS / 2, dmask = nbins - 1;
        uint32_t *hist = sh->hist[pass & 1];
        for (uint32_t i = tid; i < nbins; i += TK_THREADS)
            hist[i] = 0;
        __syncthreads();
        if (from_cand) {
            for (uint32_t j = tid; j < n_cand; j += TK_THREADS) {
                uint32_t key = sh->cand_key[j];
                if ((key & mask) == prefix)
                    atomicAdd(&hist[(key >> shift) & dmask], 1u);
            }
        } else {
            tk_for_slice(src, len, [&](uint32_t i, uint32_t key) {
                if (i < len && (key & mask) == prefix)
                    atomicAdd(&hist[(key >> shift) & dmask], 1u);
            });
        }
        cluster.sync();
        tk_pick(sh, cluster, hist, nbins, want);
        want -= sh->above;
        prefix |= sh->digit << shift;
        mask |= dmask << shift;
    }

    /* prefix is now T: kk - want keys are above it, and want keys equal to it are taken,
     * the lowest rows first */
    const uint32_t T = prefix, n_gt = kk - want;
    uint32_t eq = 0;
    if (from_cand) {
        for (uint32_t base = 0; base < n_cand; base += TK_THREADS) {
            uint32_t j = base + tid, key = j < n_cand ? sh->cand_key[j] : 0;
            tk_push(j < n_cand && key > T, key, j < n_cand ? sh->cand_row[j] : 0, &sh->n_sel,
                    sh->sel_key, sh->sel_row, DSV4_CUDA_TOPK_MAX);
            eq += j < n_cand && key == T;
        }
    } else {
        tk_for_slice(src, len, [&](uint32_t i, uint32_t key) {
            bool live = i < len;
            tk_push(live && key > T && key >> 21 == top, key, lo + i, &sh->n_sel, sh->sel_key,
                    sh->sel_row, DSV4_CUDA_TOPK_MAX);
            eq += live && key == T;
        });
    }
    eq = tk_block_sum(sh, eq);
    if (tid == 0) {
        sh->cnt_gt = sh->n_sel;
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
        root->top_key[off_gt + j] = sh->sel_key[j];
        root->top_row[off_gt + j] = sh->sel_row[j];
    }
    const uint32_t take_eq = off_eq >= want ? 0 : (want - off_eq < eq ? want - off_eq : eq);
    uint32_t *tie_key = root->top_key + n_gt + off_eq, *tie_row = root->top_row + n_gt + off_eq;
    if (take_eq > 0 && take_eq == eq) {
        /* all of this block's ties, in any order */
        if (from_cand) {
            for (uint32_t base = 0; base < n_cand; base += TK_THREADS) {
                uint32_t j = base + tid;
                bool hit = j < n_cand && sh->cand_key[j] == T;
                tk_push(hit, T, hit ? sh->cand_row[j] : 0, &sh->pos_eq, tie_key, tie_row, eq);
            }
        } else {
            tk_for_slice(src, len, [&](uint32_t i, uint32_t key) {
                tk_push(i < len && key == T, T, lo + i, &sh->pos_eq, tie_key, tie_row, eq);
            });
        }
    }
    if (take_eq > 0 && take_eq < eq) {
        /* only some of this block's ties: the lowest rows, a block-wide scan of the slice in
         * row order per round of TK_THREADS keys */
        uint32_t taken = 0;
        for (uint32_t base = 0; base < len && taken < take_eq; base += TK_THREADS) {
            uint32_t i = base + tid;
            bool hit = i < len && tk_key(src[i]) == T;
            uint32_t ball = __ballot_sync(0xffffffffu, hit);
            __syncthreads();
            if (lane == 0)
                sh->warp_sum[warp] = __popc(ball);
            __syncthreads();
            uint32_t before = taken;
            for (uint32_t w = 0; w < warp; w++)
                before += sh->warp_sum[w];
            before += __popc(ball & ((1u << lane) - 1u));
            if (hit && before < take_eq) {
                tie_key[before] = T;
                tie_row[before] = lo + i;
            }
            for (uint32_t w = 0; w < TK_WARPS; w++)
                taken += sh->warp_sum[w];
        }
    }
    cluster.sync();

    /* every block copies the kk selected keys, then places its share of them */
    for (uint32_t j = tid; j < kk; j += TK_THREADS) {
        sh->sel_key[j] = root->top_key[j];
        sh->sel_row[j] = root->top_row[j];
    }
    cluster.sync(); /* rank 0's shared memory stays until every block has its copy */
    const uint32_t first = (uint32_t)((uint64_t)kk * rank / TK_CLUSTER);
    const uint32_t last = (uint32_t)((uint64_t)kk * (rank + 1) / TK_CLUSTER);
    for (uint32_t i = first + warp; i < last; i += TK_WARPS) {
        const uint32_t ki = sh->sel_key[i], ri = sh->sel_row[i];
        uint32_t pos = 0;
        for (uint32_t j = lane; j < kk; j += 32)
            pos += tk_before(sh->sel_key[j], sh->sel_row[j], ki, ri);
        pos = __reduce_add_sync(0xffffffffu, pos);
        if (lane == 0)
            out[pos] = ri;
    }
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
        dsv4_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(tk_shared)));
    if (rc != 0)
        return rc;
    dsv4_topk_kernel<<<n_queries * TK_CLUSTER, TK_THREADS, sizeof(tk_shared),
                       (cudaStream_t)stream>>>(scores_dev, stride, n_rows_dev, k, idx_dev);
    return dsv4_cuda_launch_status();
}
