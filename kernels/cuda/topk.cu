/* topk.cu: exact top-k of the indexer scores, one thread-block cluster per query.
 *
 * Each score of a query is an item of 64 bits, its key (32 bits that order like the score:
 * NaN lowest, -0 as +0) over its complemented row, so that the top-k items in item order
 * are the CPU's order: higher score first, ties to the lower row. Every item is distinct.
 * The selection is a radix select over the items' digits (11, 11, 11, 11, 10 and 10 bits
 * from the top), in two stages:
 *
 * 1. Across the cluster. The blocks of a cluster (16 when the whole batch fits on the GPU
 *    at once as 16-block clusters, else 8) each take a slice of the query's scores. A
 *    slice that fits in shared memory is brought in by the copy engine (bulk copies of
 *    32 KB, each on its own mbarrier, all in flight at once; the first pass starts on a
 *    chunk as soon as it lands); a larger one is read from global memory by each pass. A
 *    pass histograms one digit of the items under the prefix chosen so far; each block adds
 *    its bins into the blocks that own them by remote atomics, and after one cluster
 *    barrier every block copies the owned ranges and picks the same digit. The passes stop
 *    as soon as the items at or above the prefix (those above it are all taken) number at
 *    most TK_LIST_CAP: after the first digit for scores of any spread, later for many equal
 *    or nearly equal scores.
 * 2. In every block alone. Each block gathers its items at or above that prefix, reserves
 *    room for them in every block's list (one remote atomic per pair of blocks), all its
 *    threads copy them there (one remote store each), one cluster barrier, and from there
 *    no block touches another's memory: each finishes the select on its list with the same
 *    passes (shared memory only), takes the top kk items, and places those it owns (by a
 *    hash of the row) by counting the selected items above each.
 *
 * Why this shape: a query's time at batch 1 was mostly fixed cost, not reading (22 of
 * 27 us for 4k scores as for 256k: bench/results/2026-11-29-indexer-h200-d.md), and that
 * cost was the cluster's steps: nine cluster barriers (three merged histograms of two each,
 * then counts, a gather into block 0 and a copy back; 635 cycles each at 1024 threads),
 * with remote loads between them. The common case now waits at two, and at one more whose
 * wait hides behind the slice's load (the lists' counters and the owned ranges are zero
 * before any block adds to them). Measured step by step in
 * bench/results/2026-11-29-topk-h200.md and -b.md. Why not a sort: ranking kk items by
 * counting costs kk^2 / CL comparisons per block with no barrier between steps, where a
 * bitonic sort of kk items needs log^2 kk barriers. Why narrow the list first: ranking the
 * whole list (512-768 items at the benchmark's 256k scores) against itself, issue-bound at
 * 1024 threads, took 4 700-8 100 cycles where the passes and the ranking of kk take
 * 4 400-5 800 (-b.md).
 *
 * The result depends only on the scores, never on the cluster size, the batch or the
 * order in which the lists were filled: histograms are counts and every place is a count
 * over distinct items. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cooperative_groups.h>

#include <mutex>

namespace cg = cooperative_groups;

#define TK_THREADS 1024
#define TK_WARPS (TK_THREADS / 32)
#define TK_CLUSTER_MAX 16
#define TK_MAX_DEVICES 64
#define TK_BINS 2048                      /* 11-bit digits */
#define TK_LIST_CAP 4096u                 /* items every block holds after the cluster passes */
#define TK_UNROLL 8                       /* independent loads in flight per thread */
#define TK_CHUNK (TK_UNROLL * TK_THREADS) /* scores per bulk copy: one round of tk_for_slice */
#define TK_MAX_CHUNKS 8                   /* bulk copies of a slice (227 KB / 32 KB) */
#define TK_MAX_PASSES 6                   /* digits of an item */

typedef struct tk_shared {
    uint64_t bar[TK_MAX_CHUNKS]; /* one per bulk copy of the slice */
    /* arrays read by 16-byte loads are 16-byte aligned */
    __align__(16) uint32_t hist[TK_BINS];   /* this block's histogram of the pass */
    __align__(16) uint32_t merged[TK_BINS]; /* the cluster's histogram */
    /* per cluster pass, this block's range of the cluster's histogram (bins
     * [rank nbins / CL, (rank + 1) nbins / CL)), summed by the blocks' remote atomics */
    __align__(16) uint32_t range_sum[TK_MAX_PASSES][TK_BINS / 8];
    uint32_t warp_sum[TK_WARPS];
    uint32_t digit, above, count; /* the chosen digit, items in higher bins and in its bin */
    uint32_t n_list, n_mine, n_sel, n_own;
    uint32_t list_base[TK_CLUSTER_MAX]; /* where this block's items go in each block's list */
    uint64_t list[TK_LIST_CAP];         /* every item at or above the cluster passes' prefix */
    union {
        uint64_t mine[TK_LIST_CAP]; /* this block's items of every block's list, gathered */
        struct {
            uint64_t sel[DSV4_CUDA_TOPK_MAX]; /* then the top kk items */
            uint64_t own[DSV4_CUDA_TOPK_MAX]; /* those of them this block places */
        };
    };
} tk_shared;

/* The slice's copy in shared memory starts here (16-byte aligned, as bulk copies need). */
#define TK_SLICE_OFF ((sizeof(tk_shared) + 15u) & ~(size_t)15u)

__device__ static inline uint32_t tk_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* One thread: bytes (a multiple of 16, both addresses 16-byte aligned) from global src to
 * shared dst on the copy engine, counted on bar. */
__device__ static inline void tk_bulk_load(void *dst, const void *src, uint32_t bytes,
                                           uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(tk_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(tk_smem_addr(bar))
                 : "memory");
}

/* Until bar's phase 0 has completed (the caller then sees the bytes it counted). */
__device__ static inline void tk_bar_wait(uint64_t *bar)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(tk_smem_addr(bar))
                     : "memory");
    } while (!done);
}

/* Where a block's scores are: src, and when src is a copy in shared memory that is still
 * landing, its bulk copies: chunk c holds scores [head + c TK_CHUNK, head + (c + 1) TK_CHUNK)
 * of the slice and completes sh->bar[c]. */
typedef struct tk_slice {
    const float *src;
    uint32_t head, chunks;
} tk_slice;

/* Starts bringing the block's slice (len scores from g) into shared memory when len + 3
 * floats fit in cap (else the slice stays at g). The copy is laid out so that the scores
 * from the first 16-byte boundary of g on land 16-byte aligned; those go by bulk copies of
 * TK_CHUNK scores, each on its own barrier so the first pass can start on the first chunk;
 * the up to 3 before and 3 after the aligned run are stored by plain loads before this
 * returns. Called by every thread. */
__device__ static void tk_slice_stage(tk_shared *sh, const float *g, uint32_t len, uint32_t cap,
                                      tk_slice *slice_p)
{
    const uint32_t tid = threadIdx.x;
    *slice_p = {g, 0, 0};
    if (len + 3 > cap)
        return;
    uint32_t head = (uint32_t)((16u - ((uintptr_t)g & 15u)) & 15u) / 4u;
    head = head < len ? head : len;
    const uint32_t body = (len - head) & ~3u, tail = len - head - body;
    const uint32_t chunks = (body + TK_CHUNK - 1) / TK_CHUNK;
    float *copy = (float *)((uint8_t *)sh + TK_SLICE_OFF) + ((4u - head) & 3u);
    if (tid == 0 && body > 0) {
        for (uint32_t c = 0; c < chunks; c++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(tk_smem_addr(&sh->bar[c]))
                         : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        for (uint32_t c = 0; c < chunks; c++) {
            const uint32_t off = c * TK_CHUNK, n = body - off < TK_CHUNK ? body - off : TK_CHUNK;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                             tk_smem_addr(&sh->bar[c])),
                         "r"(n * 4u)
                         : "memory");
            tk_bulk_load(copy + head + off, g + head + off, n * 4u, &sh->bar[c]);
        }
    }
    if (tid < head)
        copy[tid] = g[tid];
    if (tid < tail)
        copy[head + body + tid] = g[head + body + tid];
    __syncthreads(); /* the barriers' init before anyone waits; the plain stores */
    *slice_p = {copy, head, chunks};
}

__device__ static inline uint32_t tk_key(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0; /* NaN */
    if (u == 0x80000000u)
        u = 0; /* -0 ties with +0 */
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* A bound on a score's bits as a signed integer that every score of key >= least meets, so
 * that a pass tests most scores by one integer comparison before making their keys: for a
 * least above +0's key those scores are positive floats no smaller, whose bits order as
 * integers (a positive NaN passes too; the exact test on the key drops it); else none. */
__device__ static inline int32_t tk_quick(uint32_t least)
{
    return least > 0x80000000u ? (int32_t)(least & 0x7fffffffu) : INT32_MIN;
}

/* Calls fn(i, score) for every i of the slice, TK_UNROLL loads in flight per thread. Every
 * lane of every warp takes part in each call (fn may use warp votes); i >= len marks a lane
 * without a score. The first call on a slice waits for its bulk copies, each just before its
 * scores are read (pass landing = true); later calls read them without waiting. */
template <typename F>
__device__ static inline void tk_for_slice(tk_shared *sh, const tk_slice &slice, uint32_t len,
                                           bool landing, F fn)
{
    const float *__restrict__ src = slice.src;
    uint32_t landed = 0;
    for (uint32_t base = 0; base < len; base += TK_CHUNK) {
        const uint32_t last = (base + TK_CHUNK < len ? base + TK_CHUNK : len) - 1;
        if (landing && slice.chunks > 0 && last >= slice.head) {
            uint32_t c = (last - slice.head) / TK_CHUNK;
            c = c < slice.chunks ? c : slice.chunks - 1;
            for (; landed <= c; landed++)
                tk_bar_wait(&sh->bar[landed]);
        }
        float v[TK_UNROLL];
#pragma unroll
        for (int j = 0; j < TK_UNROLL; j++) {
            uint32_t i = base + j * TK_THREADS + threadIdx.x;
            v[j] = i < len ? src[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < TK_UNROLL; j++)
            fn(base + j * TK_THREADS + threadIdx.x, v[j]);
    }
}

/* The order of the selection: a key and its row as one 64-bit value, higher first. The row
 * is stored complemented so that among equal keys the lower row ranks higher; every row is
 * distinct, so no two values of a query are equal. */
__device__ static inline uint64_t tk_item(uint32_t key, uint32_t row)
{
    return (uint64_t)key << 32 | (uint32_t)~row;
}

/* The item's digit of width 11 or 10 bits at shift: the digits of a 64-bit item, from the
 * top, are 11, 11, 11, 11, 10 and 10 bits wide. */
#define TK_SHIFT_FIRST 53

__device__ static inline int tk_next_shift(int shift)
{
    return shift > 20 ? shift - 11 : shift - 10;
}

__device__ static inline uint32_t tk_nbins(int shift)
{
    return shift >= 20 ? TK_BINS : TK_BINS / 2;
}

/* A place in a list for each lane with hit, counted on *cnt: one shared atomic per warp.
 * Called by all lanes of the warp; lanes without hit get a place they must not use. */
__device__ static inline uint32_t tk_place(bool hit, uint32_t *cnt)
{
    uint32_t ball = __ballot_sync(0xffffffffu, hit), lane = threadIdx.x & 31, base = 0;
    if (ball == 0)
        return 0;
    uint32_t leader = (uint32_t)__ffs(ball) - 1;
    if (lane == leader)
        base = atomicAdd(cnt, (uint32_t)__popc(ball));
    base = __shfl_sync(0xffffffffu, base, leader);
    return base + (uint32_t)__popc(ball & ((1u << lane) - 1u));
}

/* The sum of x over the block's threads before this one, by a scan (each thread summing
 * the warps before its own one by one was up to 31 dependent loads). Called by every
 * thread. */
__device__ static uint32_t tk_block_before(tk_shared *sh, uint32_t x)
{
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    uint32_t incl = x;
#pragma unroll
    for (uint32_t m = 1; m < 32; m <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, incl, m);
        if (lane >= m)
            incl += y;
    }
    __syncthreads(); /* sh->warp_sum's last readers are done */
    if (lane == 31)
        sh->warp_sum[warp] = incl;
    __syncthreads();
    const uint32_t w = lane < TK_WARPS ? sh->warp_sum[lane] : 0u;
    return __reduce_add_sync(0xffffffffu, lane < warp ? w : 0u) + incl - x;
}

/* Picks from a histogram of nbins (1024 or 2048) the digit that holds the want-th item
 * from the top: sh->digit, sh->above = the items in higher bins, sh->count = the items in
 * the digit's bin. Called by every thread; the results are there on return. */
__device__ static void tk_scan(tk_shared *sh, const uint32_t *bins, uint32_t nbins, uint32_t want)
{
    const uint32_t tid = threadIdx.x;
    const uint32_t per = nbins / TK_THREADS; /* 1 or 2 bins per thread, from the top */
    uint32_t c[2] = {0, 0};
#pragma unroll
    for (uint32_t j = 0; j < 2; j++)
        if (j < per)
            c[j] = bins[nbins - 1 - (tid * per + j)];
    const uint32_t sum = c[0] + c[1];
    uint32_t before = tk_block_before(sh, sum);
    if (before < want && want <= before + sum) {
#pragma unroll
        for (uint32_t j = 0; j < 2; j++) {
            if (j < per && before + c[j] >= want) {
                sh->digit = nbins - 1 - (tid * per + j);
                sh->above = before;
                sh->count = c[j];
                break;
            }
            before += c[j];
        }
    }
    __syncthreads();
}

/* Sums the cluster's histograms of cluster pass `pass` (hist, nbins of 1024 or 2048; every
 * thread's bins complete) and picks the digit that holds the want-th item from the top
 * (tk_scan); every block computes the same. Each block adds its nonzero bins into the
 * blocks that own them (block r owns bins [r nbins / CL, (r + 1) nbins / CL)) by remote
 * atomics, which no thread waits for; after one cluster barrier every block copies all the
 * owned ranges by 16-byte remote loads. A pass's ranges are never written again, so no
 * second barrier has to keep a block from overwriting what another still reads. (Each
 * block reading every block's whole histogram, nbins x CL remote loads of 4 bytes, was
 * most of a batch-1 query's time: bench/results/2026-11-29-indexer-h200-c.md; a
 * reduce-scatter by remote loads needed a second barrier per pass.) */
template <int CL>
__device__ static void tk_pick(tk_shared *sh, cg::cluster_group &cluster, uint32_t pass,
                               uint32_t nbins, uint32_t want)
{
    const uint32_t tid = threadIdx.x, range = nbins / CL;
    for (uint32_t b = tid; b < nbins; b += TK_THREADS) {
        uint32_t c = sh->hist[b];
        if (c != 0)
            atomicAdd(cluster.map_shared_rank(&sh->range_sum[pass][b % range], b / range), c);
    }
    cluster.sync();
    if (tid < nbins / 4) {
        const uint32_t b = 4 * tid;
        *(uint4 *)(sh->merged + b) =
            *(const uint4 *)cluster.map_shared_rank(&sh->range_sum[pass][b % range], b / range);
    }
    __syncthreads();
    tk_scan(sh, sh->merged, nbins, want);
}

/* The block of a CL-block cluster that places an item: its row's multiplicative hash, so
 * that every block finds the same owner whatever its list order, and scores with a pattern
 * in the rows (every CL-th row high) still spread over the blocks. */
template <int CL> __device__ static inline uint32_t tk_owner(uint64_t item)
{
    return (uint32_t)(((uint64_t)(~(uint32_t)item * 0x9e3779b1u) * CL) >> 32);
}

/* Launched in clusters of CL blocks (cudaLaunchKernelEx); cap = the floats of dynamic
 * shared memory past tk_shared, for the slice. */
template <int CL>
__global__ void __launch_bounds__(TK_THREADS, 1)
    dsv4_topk_kernel(const float *__restrict__ scores, size_t stride, const uint32_t *n_rows_dev,
                     uint32_t k, uint32_t cap, uint32_t *idx)
{
    extern __shared__ __align__(16) uint8_t tk_smem[];
    tk_shared *sh = (tk_shared *)tk_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const uint32_t rank = cluster.block_rank(), q = blockIdx.x / CL;
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    uint32_t n = n_rows_dev[q];
    if (n > stride)
        n = (uint32_t)stride;
    const uint32_t kk = n < k ? n : k;
    uint32_t *out = idx + (size_t)q * k;

    for (uint32_t i = kk + rank * TK_THREADS + tid; i < k; i += CL * TK_THREADS)
        out[i] = UINT32_MAX;
    if (kk == 0)
        return; /* the same for every block of the cluster */

    const uint32_t lo = (uint32_t)((uint64_t)n * rank / CL);
    const uint32_t len = (uint32_t)((uint64_t)n * (rank + 1) / CL) - lo;
    tk_slice slice;
    if (tid == 0) {
        sh->n_list = 0;
        sh->n_mine = 0;
        sh->n_sel = 0;
        sh->n_own = 0;
    }
    for (uint32_t i = tid; i < TK_MAX_PASSES * TK_BINS / 8; i += TK_THREADS)
        sh->range_sum[0][i] = 0;
    /* every block's range sums and list length are zero before any block adds to them; the
     * wait is at the first merge, so the barrier overlaps the slice's load */
    __syncthreads();
    cg::cluster_group::arrival_token zeroed = cluster.barrier_arrive();
    tk_slice_stage(sh, scores + (size_t)q * stride + lo, len, cap, &slice);

    /* Cluster passes, one digit of the items each, until the items above the chosen prefix
     * and under it number at most TK_LIST_CAP: one pass for scores of any spread, more
     * for many equal or nearly equal scores (at the last digit one item is under the
     * prefix). */
    uint64_t prefix = 0, mask = 0;
    uint32_t want = kk, count = 0;
    int shift = TK_SHIFT_FIRST;
    for (uint32_t pass = 0;; pass++) {
        const uint32_t nbins = tk_nbins(shift), dmask = nbins - 1;
        for (uint32_t i = tid; i < nbins; i += TK_THREADS)
            sh->hist[i] = 0;
        __syncthreads();
        if (shift >= 32) {
            /* a digit of the key alone: 32-bit work per score */
            const uint32_t m = (uint32_t)(mask >> 32), p = (uint32_t)(prefix >> 32), s = shift - 32;
            tk_for_slice(sh, slice, len, pass == 0, [&](uint32_t i, float v) {
                const uint32_t key = tk_key(v);
                if (i < len && (key & m) == p)
                    atomicAdd(&sh->hist[(key >> s) & dmask], 1u);
            });
        } else {
            tk_for_slice(sh, slice, len, false, [&](uint32_t i, float v) {
                uint64_t item = tk_item(tk_key(v), lo + i);
                if (i < len && (item & mask) == prefix)
                    atomicAdd(&sh->hist[(uint32_t)(item >> shift) & dmask], 1u);
            });
        }
        if (pass == 0)
            cluster.barrier_wait(std::move(zeroed));
        __syncthreads();
        tk_pick<CL>(sh, cluster, pass, nbins, want);
        const uint32_t digit = sh->digit;
        want -= sh->above;
        count = sh->count;
        prefix |= (uint64_t)digit << shift;
        mask |= (uint64_t)dmask << shift;
        if (kk - want + count <= TK_LIST_CAP)
            break;
        shift = tk_next_shift(shift);
    }

    /* Every block gets every item at or above the prefix (the top kk - want, and the count
     * under the prefix, of which want are taken): each block gathers its own in sh->mine
     * in one pass (a hit takes its place by its own shared atomic: hits are at most
     * TK_LIST_CAP in the whole cluster, about one score in 300 at 256k; counting them from
     * the block's histograms first, then a vote per score to share the atomics among a
     * warp's hits, took 6 500 cycles at 256k scores, this 2 800-3 300:
     * bench/results/2026-11-29-topk-h200-b.md), then reserves room for them in every
     * block's list (one remote atomic per pair of blocks) and all threads copy them there,
     * one store each (each hit's lane storing it to every block in turn made this step
     * 13 100 cycles at 256k scores, 8 100 so: bench/results/2026-11-29-topk-h200.md). */
    const uint32_t mhi = (uint32_t)(mask >> 32), phi = (uint32_t)(prefix >> 32);
    const int32_t quick = tk_quick(phi); /* an item at or above the prefix has key >= phi */
    tk_for_slice(sh, slice, len, false, [&](uint32_t i, float v) {
        if (i < len && (int32_t)__float_as_uint(v) >= quick) {
            const uint32_t key = tk_key(v);
            const uint64_t item = tk_item(key, lo + i);
            if (mask << 32 == 0 ? (key & mhi) >= phi : (item & mask) >= prefix)
                sh->mine[atomicAdd(&sh->n_mine, 1u)] = item;
        }
    });
    __syncthreads();
    const uint32_t mine = sh->n_mine;
    if (tid < CL)
        sh->list_base[tid] = atomicAdd(cluster.map_shared_rank(&sh->n_list, tid), mine);
    __syncthreads();
    for (uint32_t j = tid; j < mine * CL; j += TK_THREADS) {
        const uint32_t r = j / mine, i = j % mine;
        cluster.map_shared_rank(sh->list, r)[sh->list_base[r] + i] = sh->mine[i];
    }
    cluster.sync(); /* the last remote access: blocks leave at their own pace from here */

    /* The same passes over the list, in each block alone, until the chosen bin is taken
     * whole; then the items at or above the prefix are exactly the top kk. */
    const uint32_t n_list = sh->n_list;
    while (count != want) {
        shift = tk_next_shift(shift);
        const uint32_t nbins = tk_nbins(shift), dmask = nbins - 1;
        for (uint32_t i = tid; i < nbins; i += TK_THREADS)
            sh->hist[i] = 0;
        __syncthreads();
        for (uint32_t j = tid; j < n_list; j += TK_THREADS) {
            uint64_t item = sh->list[j];
            if ((item & mask) == prefix)
                atomicAdd(&sh->hist[(uint32_t)(item >> shift) & dmask], 1u);
        }
        __syncthreads();
        tk_scan(sh, sh->hist, nbins, want);
        want -= sh->above;
        count = sh->count;
        prefix |= (uint64_t)sh->digit << shift;
        mask |= (uint64_t)dmask << shift;
    }
    /* The block places the selected items it owns (tk_owner: the same split in every block
     * whatever its list order): an item's place is the number of selected items above it. */
    for (uint32_t base = 0; base < n_list; base += TK_THREADS) {
        const uint32_t j = base + tid;
        const uint64_t item = j < n_list ? sh->list[j] : 0;
        const bool hit = j < n_list && (item & mask) >= prefix;
        const uint32_t at = tk_place(hit, &sh->n_sel);
        if (hit)
            sh->sel[at] = item;
        const bool placed = hit && tk_owner<CL>(item) == rank;
        const uint32_t at_own = tk_place(placed, &sh->n_own);
        if (placed)
            sh->own[at_own] = item;
    }
    __syncthreads();
    const uint32_t n_own = sh->n_own;
    for (uint32_t i = warp; i < n_own; i += TK_WARPS) {
        const uint64_t item = sh->own[i];
        uint32_t pos = 0;
#pragma unroll 4
        for (uint32_t j = lane; j < kk; j += 32)
            pos += sh->sel[j] > item;
        pos = __reduce_add_sync(0xffffffffu, pos);
        if (lane == 0)
            out[pos] = ~(uint32_t)item;
    }
}

/* What a device allows, read once per device: the opt-in shared memory per block (both
 * kernels' limits are raised to it) and how many 16-block clusters run at once (0: none). */
typedef struct tk_device {
    int rc;
    uint32_t smem_max, wide_clusters;
} tk_device;

static std::once_flag tk_once[TK_MAX_DEVICES];
static tk_device tk_devices[TK_MAX_DEVICES];

template <int CL>
static cudaLaunchConfig_t tk_config(uint32_t n_queries, size_t smem, cudaStream_t stream,
                                    cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n_queries * CL);
    cfg.blockDim = dim3(TK_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = CL;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

static void tk_device_setup(int dev)
{
    tk_device *d = &tk_devices[dev];
    int optin = 0, wide = 0;
    d->rc = dsv4_cuda_status(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (d->rc == 0)
        d->rc = dsv4_cuda_status(cudaFuncSetAttribute(
            dsv4_topk_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    if (d->rc == 0)
        d->rc = dsv4_cuda_status(cudaFuncSetAttribute(
            dsv4_topk_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    if (d->rc != 0)
        return;
    d->smem_max = (uint32_t)optin;
    /* 16 blocks is past the portable cluster size: used only where the device says such
     * clusters fit (with the most shared memory a launch asks for) */
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = tk_config<16>(1, (size_t)optin, NULL, &attr);
    if (cudaFuncSetAttribute(dsv4_topk_kernel<16>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&wide, dsv4_topk_kernel<16>, &cfg) != cudaSuccess)
        wide = 0;
    (void)cudaGetLastError(); /* a refusal above only means no 16-block clusters */
    d->wide_clusters = wide > 0 ? (uint32_t)wide : 0;
}

template <int CL>
static int tk_launch(const tk_device *d, const float *scores, size_t stride,
                     const uint32_t *n_rows_dev, uint32_t n_queries, uint32_t k, uint32_t *idx,
                     cudaStream_t stream)
{
    /* room for the longest slice (stride / CL rounded up) plus its 3-float alignment shift,
     * or as much as the device allows */
    uint64_t cap = (stride + CL - 1) / CL + 4;
    uint64_t room = d->smem_max > TK_SLICE_OFF ? (d->smem_max - TK_SLICE_OFF) / 16 * 4 : 0;
    if (cap > room)
        cap = room;
    if (cap > TK_MAX_CHUNKS * TK_CHUNK)
        cap = TK_MAX_CHUNKS * TK_CHUNK; /* the barriers a slice has */
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = tk_config<CL>(n_queries, TK_SLICE_OFF + cap * 4, stream, &attr);
    (void)cudaLaunchKernelEx(&cfg, dsv4_topk_kernel<CL>, scores, stride, n_rows_dev, k,
                             (uint32_t)cap, idx);
    return dsv4_cuda_launch_status(); /* a refused launch is the last error too */
}

extern "C" int dsv4_cuda_topk(const float *scores_dev, size_t stride, const uint32_t *n_rows_dev,
                              uint32_t n_queries, uint32_t k, uint32_t *idx_dev, void *stream)
{
    if (n_queries == 0 || k == 0)
        return 0;
    if (!scores_dev || !n_rows_dev || !idx_dev || stride == 0 || stride > UINT32_MAX)
        return -EINVAL;
    if (k > DSV4_CUDA_TOPK_MAX || n_queries > UINT32_MAX / TK_CLUSTER_MAX)
        return -ENOTSUP;
    int dev;
    int rc = dsv4_cuda_status(cudaGetDevice(&dev));
    if (rc != 0)
        return rc;
    if (dev < 0 || dev >= TK_MAX_DEVICES)
        return -ENOTSUP;
    std::call_once(tk_once[dev], tk_device_setup, dev);
    const tk_device *d = &tk_devices[dev];
    if (d->rc != 0)
        return d->rc;
    cudaStream_t s = (cudaStream_t)stream;
    if (n_queries <= d->wide_clusters)
        return tk_launch<16>(d, scores_dev, stride, n_rows_dev, n_queries, k, idx_dev, s);
    return tk_launch<8>(d, scores_dev, stride, n_rows_dev, n_queries, k, idx_dev, s);
}
