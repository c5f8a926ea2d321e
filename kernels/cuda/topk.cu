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
 *    chunk as soon as it lands) and read there by 16-byte loads (a kernel built for slices
 *    that all fit: the host knows from the stride); a larger one is read from global memory
 *    by each pass. A pass histograms one digit of the items under the prefix chosen so far;
 *    each block adds its bins into the blocks that own them by remote atomics, signals
 *    every block by an mbarrier arrival, and once all have signalled it every block copies
 *    the owned ranges and picks the same digit. The passes stop as soon as the items at or
 *    above the prefix (those above it are all taken) number at most TK_LIST_CAP: after the
 *    first digit for scores of any spread, later for many equal or nearly equal scores.
 * 2. In every block alone. Each block gathers its items at or above that prefix (a second
 *    pass over its slice, skipped by every thread whose scores the first pass found all
 *    below it), reserves room for them in every block's list (one remote atomic per pair of
 *    blocks), all its threads copy them there (one remote store each), one more signal, and
 *    from there no block touches another's memory. The list holds every item above its
 *    lowest one, so an item's count of the list's items above it is its place in the
 *    query's order: each block places the items it owns (by a hash of the row) whose count
 *    is below kk, counting by buckets (the kernel's last step).
 *
 * Why this shape: a query's time at batch 1 was mostly fixed cost, not reading (22 of
 * 27 us for 4k scores as for 256k: bench/results/2026-11-29-indexer-h200-d.md), and that
 * cost was the cluster's steps: nine cluster barriers (three merged histograms of two each,
 * then counts, a gather into block 0 and a copy back; 635 cycles each at 1024 threads),
 * with remote loads between them. The common case now waits at two signals, and at one
 * cluster barrier whose wait hides behind the slice's load (the lists' counters and the
 * owned ranges are zero before any block adds to them). Then the passes over the slice,
 * issue-bound: the first makes every score's key (no branch) and bins it, four scores a
 * shared load. Why not a sort: a bitonic sort of kk items needs log^2 kk barriers; radix
 * passes over the list to narrow it to the top kk, then ranking those by counting, took
 * 4 400-5 800 cycles at 256k scores, where the buckets take a few barriers. Measured step
 * by step in bench/results/2026-11-29-topk-h200.md, -b.md and -c.md.
 *
 * The result depends only on the scores, never on the cluster size, the batch or the
 * order in which the lists were filled: histograms are counts and every place is a count
 * over distinct items. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_once.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/status.cuh"
#include "kernels/cuda/pdl.cuh"

#include <cooperative_groups.h>

#include <mutex>

namespace cg = cooperative_groups;

#define TK_THREADS 1024
#define TK_WARPS (TK_THREADS / 32)
#define TK_CLUSTER_MAX 16
#define TK_BINS_LOG2 11 /* 11-bit digits */
#define TK_BINS (1u << TK_BINS_LOG2)
#define TK_LIST_CAP 4096u                 /* items every block holds after the cluster passes */
#define TK_UNROLL 8                       /* independent loads in flight per thread */
#define TK_CHUNK (TK_UNROLL * TK_THREADS) /* scores per bulk copy: one round of tk_for_slice */
#define TK_MAX_CHUNKS 8                   /* bulk copies of a slice (227 KB / 32 KB) */
#define TK_MAX_PASSES 6                   /* digits of an item */

typedef struct tk_shared {
    uint64_t bar[TK_MAX_CHUNKS]; /* one per bulk copy of the slice */
    /* one per cluster pass's merge and one for the lists: every block arrives on every
     * block's when its remote writes for that step are done */
    uint64_t cbar[TK_MAX_PASSES + 1];
    /* arrays read by 16-byte loads are 16-byte aligned */
    __align__(16) uint32_t hist[TK_BINS]; /* this block's histogram of the pass */
    /* per cluster pass, this block's range of the cluster's histogram (bins
     * [rank nbins / CL, (rank + 1) nbins / CL)), summed by the blocks' remote atomics */
    __align__(16) uint32_t range_sum[TK_MAX_PASSES][TK_BINS / 8];
    uint32_t warp_sum[TK_WARPS];
    uint32_t digit, above, count; /* the chosen digit, items in higher bins and in its bin */
    uint32_t n_list, n_mine;
    unsigned long long span;               /* the list's highest item less the prefix */
    uint32_t list_base[TK_CLUSTER_MAX];    /* where this block's items go in each block's list */
    __align__(16) uint32_t start[TK_BINS]; /* where each bucket of the list starts, sorted */
    uint64_t list[TK_LIST_CAP];            /* every item at or above the cluster passes' prefix */
    union {
        uint64_t mine[TK_LIST_CAP];   /* this block's items of every block's list, gathered */
        uint64_t sorted[TK_LIST_CAP]; /* then the list sorted by bucket, higher first */
    };
} tk_shared;

/* The slice's copy in shared memory starts here (16-byte aligned, as bulk copies need). */
#define TK_SLICE_OFF ((sizeof(tk_shared) + 15u) & ~(size_t)15u)

/* One thread: bytes (a multiple of 16, both addresses 16-byte aligned) from global src to
 * shared dst on the copy engine, counted on bar. */
__device__ static inline void tk_bulk_load(void *dst, const void *src, uint32_t bytes,
                                           uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(dsv4_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(dsv4_smem_addr(bar))
                 : "memory");
}

/* Until bar's phase 0 has completed, acquiring at cluster scope: the caller then sees the
 * bytes a bulk copy counted on bar, or the remote writes released by the arrivals of the
 * cluster's blocks (tk_cluster_done); one wait serves both. */
__device__ static inline void tk_bar_wait(uint64_t *bar)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(dsv4_smem_addr(bar))
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

/* Starts bringing the block's slice (len scores from g) into shared memory when len + 6
 * floats fit in cap (else the slice stays at g). The copy is laid out so that the scores
 * from the first 16-byte boundary of g on land 16-byte aligned; those go by bulk copies of
 * TK_CHUNK scores, each on its own barrier so the first pass can start on the first chunk;
 * the up to 3 before and 3 after the aligned run are stored by plain loads before this
 * returns, and the up to 3 floats before the first score and after the last in their
 * 16-byte words are NaN (tk_for_slice). Called by every thread. */
__device__ static void tk_slice_stage(tk_shared *sh, const float *g, uint32_t len, uint32_t cap,
                                      tk_slice *slice_p)
{
    const uint32_t tid = threadIdx.x;
    *slice_p = {g, 0, 0};
    if (len + 6 > cap)
        return;
    uint32_t head = (uint32_t)((16u - ((uintptr_t)g & 15u)) & 15u) / 4u;
    head = head < len ? head : len;
    const uint32_t body = (len - head) & ~3u, tail = len - head - body;
    const uint32_t chunks = (body + TK_CHUNK - 1) / TK_CHUNK;
    const uint32_t pad = (4u - head) & 3u, end = (pad + len + 3) & ~3u;
    float *words = (float *)((uint8_t *)sh + TK_SLICE_OFF), *copy = words + pad;
    if (tid == 0 && body > 0) {
        for (uint32_t c = 0; c < chunks; c++)
            asm volatile(
                "mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(dsv4_smem_addr(&sh->bar[c]))
                : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        for (uint32_t c = 0; c < chunks; c++) {
            const uint32_t off = c * TK_CHUNK, n = body - off < TK_CHUNK ? body - off : TK_CHUNK;
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                             dsv4_smem_addr(&sh->bar[c])),
                         "r"(n * 4u)
                         : "memory");
            tk_bulk_load(copy + head + off, g + head + off, n * 4u, &sh->bar[c]);
        }
    }
    if (tid < head)
        copy[tid] = g[tid];
    if (tid < tail)
        copy[head + body + tid] = g[head + body + tid];
    if (tid >= 32 && tid < 32 + pad)
        words[tid - 32] = __int_as_float(0x7fffffff);
    if (tid >= 64 && tid < 64 + end - pad - len)
        words[pad + len + tid - 64] = __int_as_float(0x7fffffff);
    __syncthreads(); /* the barriers' init before anyone waits; the plain stores */
    *slice_p = {copy, head, chunks};
}

/* A positive score's key is its bits with the top one set, a negative one's its bits
 * negated (-0 so becomes +0's key), NaN's 0: no branch. */
__device__ static inline uint32_t tk_key(float f)
{
    const uint32_t u = __float_as_uint(f), s = (uint32_t)((int32_t)u >> 31);
    const uint32_t key = ((u ^ s) - s) | (~s & 0x80000000u);
    return isnan(f) ? 0u : key;
}

/* A bound on a score's bits as a signed integer that every score of key >= least meets, so
 * that a pass tests most scores by one integer comparison before making their keys: for a
 * least above +0's key those scores are positive floats no smaller, whose bits order as
 * integers (a positive NaN passes too; the exact test on the key drops it); else none. */
__device__ static inline int32_t tk_quick(uint32_t least)
{
    return least > 0x80000000u ? (int32_t)(least & 0x7fffffffu) : INT32_MIN;
}

/* Waits for the bulk copies of the slice that hold its scores up to last (landing pass). */
__device__ static inline void tk_land(tk_shared *sh, const tk_slice &slice, uint32_t last,
                                      uint32_t *landed_p)
{
    if (slice.chunks == 0 || last < slice.head)
        return;
    uint32_t c = (last - slice.head) / TK_CHUNK;
    c = c < slice.chunks ? c : slice.chunks - 1;
    for (; *landed_p <= c; (*landed_p)++)
        tk_bar_wait(&sh->bar[*landed_p]);
}

/* The floats a pass of tk_for_slice<true> reads over a slice of len scores: whole rounds of
 * TK_CHUNK over the 16-byte words that hold them. */
__device__ static inline uint32_t tk_slice_reads(const tk_slice &slice, uint32_t len)
{
    const uint32_t n_words = (len + ((4u - slice.head) & 3u) + 3) / 4;
    return (n_words + TK_CHUNK / 4 - 1) / (TK_CHUNK / 4) * TK_CHUNK;
}

/* Calls fn(i, score) for every i of the slice, TK_UNROLL scores a round per thread; i >= len
 * marks a lane without a score. The first call on a slice waits for its bulk copies, each
 * just before its scores are read (pass landing = true); later calls read them without
 * waiting. SH: the host made room for every slice in shared memory (tk_slice_stage staged
 * it), so the scores are read there by 16-byte loads with 32-bit addresses, four a load:
 * the copy's 16-byte words from its aligned start, whose first up to 3 floats (before score
 * 0) and last ones (past len) are not scores, then NaN words to the round's end;
 * tk_slice_reads(len) floats in all, each a NaN where it is no score. Else by generic
 * 4-byte loads from wherever the slice is. */
template <bool SH, typename F>
__device__ static inline void tk_for_slice(tk_shared *sh, const tk_slice &slice, uint32_t len,
                                           bool landing, F fn)
{
    uint32_t landed = 0;
    if (SH) {
        const uint32_t pad = (4u - slice.head) & 3u; /* score i is float i + pad of the words */
        const float4 *words = (const float4 *)((uint8_t *)sh + TK_SLICE_OFF);
        const uint32_t n_words = (len + pad + 3) / 4;
        for (uint32_t base = 0; base < n_words; base += TK_CHUNK / 4) {
            if (landing) {
                const uint32_t end = base + TK_CHUNK / 4 < n_words ? base + TK_CHUNK / 4 : n_words;
                const uint32_t last = end * 4 - 1 - pad;
                tk_land(sh, slice, last < len ? last : len - 1, &landed);
            }
            float4 v[TK_UNROLL / 4];
#pragma unroll
            for (int j = 0; j < TK_UNROLL / 4; j++) {
                const uint32_t w = base + j * TK_THREADS + threadIdx.x;
                const float nan = __int_as_float(0x7fffffff);
                v[j] = w < n_words ? words[w] : make_float4(nan, nan, nan, nan);
            }
#pragma unroll
            for (int j = 0; j < TK_UNROLL / 4; j++) {
                const uint32_t i = (base + j * TK_THREADS + threadIdx.x) * 4 - pad;
                fn(i, v[j].x);
                fn(i + 1, v[j].y);
                fn(i + 2, v[j].z);
                fn(i + 3, v[j].w);
            }
        }
        return;
    }
    const float *__restrict__ src = slice.src;
    for (uint32_t base = 0; base < len; base += TK_CHUNK) {
        if (landing)
            tk_land(sh, slice, (base + TK_CHUNK < len ? base + TK_CHUNK : len) - 1, &landed);
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

/* The sum of x over the block's threads before this one, by a scan (each thread summing
 * the warps before its own one by one was up to 31 dependent loads). Called by every
 * thread; a barrier between two calls keeps the later one's stores to sh->warp_sum after
 * the earlier one's loads (tk_select ends with one). */
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
    if (lane == 31)
        sh->warp_sum[warp] = incl;
    __syncthreads();
    const uint32_t w = lane < TK_WARPS ? sh->warp_sum[lane] : 0u;
    return __reduce_add_sync(0xffffffffu, lane < warp ? w : 0u) + incl - x;
}

/* Picks the digit that holds the want-th item from the top of a histogram whose bins each
 * thread holds PER of, c[j] the count of digit top - j, threads in order from the top bins
 * down: sh->digit, sh->above = the items in higher bins, sh->count = the items in the
 * digit's bin. Called by every thread; the results are there on return. */
template <int PER>
__device__ static void tk_select(tk_shared *sh, const uint32_t (&c)[PER], uint32_t top,
                                 uint32_t want)
{
    uint32_t sum = 0;
#pragma unroll
    for (int j = 0; j < PER; j++)
        sum += c[j];
    uint32_t before = tk_block_before(sh, sum);
    if (before < want && want <= before + sum) {
#pragma unroll
        for (int j = 0; j < PER; j++) {
            if (before + c[j] >= want) {
                sh->digit = top - j;
                sh->above = before;
                sh->count = c[j];
                break;
            }
            before += c[j];
        }
    }
    __syncthreads();
}

/* The cluster's blocks all done with their remote writes of a step, by bar (sh->cbar[i], the
 * same i in every block; each used once): this block arrives on bar in every block of the
 * cluster, releasing its writes, then waits for every block's arrival on its own, acquiring
 * theirs. A cluster barrier (barrier.cluster) cost 635 cycles at 1024 threads a block
 * (bench/results/2026-11-29-topk-h200.md). Called by every thread. */
template <int CL> __device__ static void tk_cluster_done(uint64_t *bar)
{
    __syncthreads(); /* the block's writes before its arrivals */
    if (threadIdx.x < CL) {
        asm volatile("{\n.reg .b32 r;\n"
                     "mapa.shared::cluster.u32 r, %0, %1;\n"
                     "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];\n}\n" ::"r"(
                         dsv4_smem_addr(bar)),
                     "r"(threadIdx.x)
                     : "memory");
    }
    tk_bar_wait(bar);
}

/* Sums the cluster's histograms of cluster pass `pass` (hist, nbins of 1024 or 2048; every
 * thread's bins complete) and picks the digit that holds the want-th item from the top
 * (tk_select); every block computes the same. Each block adds its nonzero bins into the
 * blocks that own them (block r owns bins [r nbins / CL, (r + 1) nbins / CL)) by remote
 * atomics, which no thread waits for; once every block has signalled (tk_cluster_done)
 * every block loads all the owned ranges by 16-byte remote loads. A pass's ranges are
 * never written again, so no second signal has to keep a block from overwriting what
 * another still reads. (Each
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
    tk_cluster_done<CL>(&sh->cbar[pass]);
    /* thread t takes the t-th four bins from the top, straight into tk_select */
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    const uint32_t b = nbins - 4 * (tid + 1);
    if (tid < nbins / 4)
        v = *(const uint4 *)cluster.map_shared_rank(&sh->range_sum[pass][b % range], b / range);
    const uint32_t c[4] = {v.w, v.z, v.y, v.x};
    tk_select<4>(sh, c, b + 3, want);
}

/* The block of a CL-block cluster that places an item: its row's multiplicative hash, so
 * that every block finds the same owner whatever its list order, and scores with a pattern
 * in the rows (every CL-th row high) still spread over the blocks. */
template <int CL> __device__ static inline uint32_t tk_owner(uint64_t item)
{
    return (uint32_t)(((uint64_t)(~(uint32_t)item * 0x9e3779b1u) * CL) >> 32);
}

/* Launched in clusters of CL blocks (cudaLaunchKernelEx, an ordinary launch: it waits for
 * the kernels before it, and lets the forward's next one be scheduled, pdl.cuh); cap = the
 * floats of dynamic shared memory past tk_shared, for the slice; SH: cap holds every block's
 * slice. */
template <int CL, bool SH>
__global__ void __launch_bounds__(TK_THREADS, 1)
    dsv4_topk_kernel(const float *__restrict__ scores, size_t stride, const uint32_t *n_rows_dev,
                     uint32_t k, uint32_t cap, uint32_t *idx)
{
    dsv4_pdl_trigger();
    extern __shared__ __align__(16) uint8_t tk_smem[];
    tk_shared *sh = (tk_shared *)tk_smem;
    cg::cluster_group cluster = cg::this_cluster();
    const uint32_t rank = cluster.block_rank(), q = blockIdx.x / CL;
    const uint32_t tid = threadIdx.x, lane = tid & 31;
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
        sh->span = 0;
        for (uint32_t i = 0; i <= TK_MAX_PASSES; i++)
            asm volatile(
                "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(dsv4_smem_addr(&sh->cbar[i])),
                "r"((uint32_t)CL)
                : "memory");
        /* before any block's arrival: those come after the cluster barrier below */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    for (uint32_t i = tid; i < TK_MAX_PASSES * TK_BINS / 8; i += TK_THREADS)
        sh->range_sum[0][i] = 0;
    for (uint32_t i = tid; i < TK_BINS; i += TK_THREADS)
        sh->hist[i] = 0;
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
    uint32_t want = kk, count = 0, kmax = 0; /* the highest key of this thread's scores */
    int shift = TK_SHIFT_FIRST;
    for (uint32_t pass = 0;; pass++) {
        const uint32_t nbins = tk_nbins(shift), dmask = nbins - 1;
        if (pass == 0) {
            /* the key's first digit; hist was zeroed with the range sums. With SH every float
             * read that is no score is a NaN, key 0: bin 0 gets them and loses them here */
            if (SH && tid == 0)
                atomicSub(&sh->hist[0], tk_slice_reads(slice, len) - len);
            tk_for_slice<SH>(sh, slice, len, true, [&](uint32_t i, float v) {
                if (SH || i < len) {
                    const uint32_t key = tk_key(v);
                    kmax = key > kmax ? key : kmax;
                    atomicAdd(&sh->hist[key >> (TK_SHIFT_FIRST - 32)], 1u);
                }
            });
        } else if (shift >= 32) {
            /* a digit of the key alone: 32-bit work per score */
            const uint32_t m = (uint32_t)(mask >> 32), p = (uint32_t)(prefix >> 32), s = shift - 32;
            for (uint32_t i = tid; i < nbins; i += TK_THREADS)
                sh->hist[i] = 0;
            __syncthreads();
            tk_for_slice<SH>(sh, slice, len, false, [&](uint32_t i, float v) {
                const uint32_t key = tk_key(v);
                if (i < len && (key & m) == p)
                    atomicAdd(&sh->hist[(key >> s) & dmask], 1u);
            });
        } else {
            for (uint32_t i = tid; i < nbins; i += TK_THREADS)
                sh->hist[i] = 0;
            __syncthreads();
            tk_for_slice<SH>(sh, slice, len, false, [&](uint32_t i, float v) {
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
     * in one pass, by the threads whose highest key of the first pass reaches the prefix
     * (a hit takes its place by its own shared atomic: hits are at most TK_LIST_CAP in the
     * whole cluster, about one score in 300 at 256k; counting them from the block's
     * histograms first, then a vote per score to share the atomics among a warp's hits,
     * took 6 500 cycles at 256k scores, this 2 800-3 300 before the skip:
     * bench/results/2026-11-29-topk-h200-b.md), then reserves room for them in every
     * block's list (one remote atomic per pair of blocks) and all threads copy them there,
     * one store each (each hit's lane storing it to every block in turn made this step
     * 13 100 cycles at 256k scores, 8 100 so: bench/results/2026-11-29-topk-h200.md). */
    const uint32_t mhi = (uint32_t)(mask >> 32), phi = (uint32_t)(prefix >> 32);
    const int32_t quick = tk_quick(phi); /* an item at or above the prefix has key >= phi */
    if (kmax >= phi) /* else none of this thread's scores (the first pass's) is a hit */
        tk_for_slice<SH>(sh, slice, len, false, [&](uint32_t i, float v) {
            if (i < len && (int32_t)__float_as_uint(v) >= quick) {
                const uint32_t key = tk_key(v);
                const uint64_t item = tk_item(key, lo + i);
                if (mask << 32 == 0 ? (key & mhi) >= phi : (item & mask) >= prefix)
                    sh->mine[atomicAdd(&sh->n_mine, 1u)] = item;
            }
        });
    for (uint32_t i = tid; i < TK_BINS; i += TK_THREADS)
        sh->hist[i] = 0; /* for the list's buckets: the last pick has read it */
    __syncthreads();
    const uint32_t mine = sh->n_mine;
    if (tid < CL)
        sh->list_base[tid] = atomicAdd(cluster.map_shared_rank(&sh->n_list, tid), mine);
    __syncthreads();
    for (uint32_t j = tid; j < mine * CL; j += TK_THREADS) {
        const uint32_t r = j / mine, i = j % mine;
        cluster.map_shared_rank(sh->list, r)[sh->list_base[r] + i] = sh->mine[i];
    }
    /* the last remote access: blocks leave at their own pace from here (a block's arrivals
     * on the others are its last access to their memory) */
    tk_cluster_done<CL>(&sh->cbar[TK_MAX_PASSES]);

    /* Every block ranks the items it owns (tk_owner: the same split in every block whatever
     * its list order) among the whole list: the list holds every item above its lowest one,
     * so an item's count of the list's items above it is its place, and those counting
     * fewer than kk are the top kk. By buckets rather than comparing all pairs: each item
     * goes to the bucket of its distance from the prefix (the list's lowest possible item)
     * in TK_BINS buckets over the list's span; an item's place is the items of the higher
     * buckets plus those above it in its own, in the list sorted by bucket (a few
     * comparisons for scores of any spread; a dense cluster under a far outlier shares one
     * bucket, up to the list's length each). */
    const uint32_t n_list = sh->n_list, rounds = (n_list + TK_THREADS - 1) / TK_THREADS;
    uint64_t item[TK_LIST_CAP / TK_THREADS];
    uint64_t span = 0;
    /* up to TK_LIST_CAP / TK_THREADS items a thread in registers, in as many rounds as the
     * list needs (the same in every thread) */
#pragma unroll
    for (uint32_t r = 0; r < TK_LIST_CAP / TK_THREADS; r++) {
        if (r == rounds)
            break;
        const uint32_t j = r * TK_THREADS + tid;
        item[r] = j < n_list ? sh->list[j] : prefix;
        span = item[r] - prefix > span ? item[r] - prefix : span;
    }
#pragma unroll
    for (uint32_t m = 16; m > 0; m >>= 1) {
        const uint64_t o = __shfl_xor_sync(0xffffffffu, span, m);
        span = o > span ? o : span;
    }
    if (lane == 0 && span != 0)
        atomicMax(&sh->span, (unsigned long long)span);
    __syncthreads();
    const int width = 64 - __clzll((long long)sh->span); /* bits of the span */
    const int bshift = width > TK_BINS_LOG2 ? width - TK_BINS_LOG2 : 0;
    uint32_t bucket[TK_LIST_CAP / TK_THREADS], slot[TK_LIST_CAP / TK_THREADS];
#pragma unroll
    for (uint32_t r = 0; r < TK_LIST_CAP / TK_THREADS; r++) {
        if (r == rounds)
            break;
        bucket[r] = (uint32_t)((item[r] - prefix) >> bshift);
        if (r * TK_THREADS + tid < n_list)
            slot[r] = atomicAdd(&sh->hist[bucket[r]], 1u);
    }
    __syncthreads();
    {
        /* a bucket's start in the sorted list: the items of the buckets above it */
        static_assert(TK_BINS == 2 * TK_THREADS, "two buckets a thread");
        const uint32_t top = TK_BINS - 1 - 2 * tid, c = sh->hist[top];
        const uint32_t before = tk_block_before(sh, c + sh->hist[top - 1]);
        sh->start[top] = before;
        sh->start[top - 1] = before + c;
    }
    __syncthreads();
#pragma unroll
    for (uint32_t r = 0; r < TK_LIST_CAP / TK_THREADS; r++) {
        if (r == rounds)
            break;
        if (r * TK_THREADS + tid < n_list)
            sh->sorted[sh->start[bucket[r]] + slot[r]] = item[r];
    }
    __syncthreads();
#pragma unroll
    for (uint32_t r = 0; r < TK_LIST_CAP / TK_THREADS; r++) {
        if (r == rounds)
            break;
        if (r * TK_THREADS + tid >= n_list || tk_owner<CL>(item[r]) != rank)
            continue;
        const uint32_t first = sh->start[bucket[r]], last = first + sh->hist[bucket[r]];
        uint32_t pos = first;
        for (uint32_t i = first; i < last; i++)
            pos += sh->sorted[i] > item[r];
        if (pos < kk)
            out[pos] = ~(uint32_t)item[r];
    }
}

/* What a device allows, read once per device: the opt-in shared memory per block (both
 * kernels' limits are raised to it) and how many 16-block clusters run at once (0: none). */
typedef struct tk_device {
    int rc;
    uint32_t smem_max, wide_clusters;
} tk_device;

static std::once_flag tk_once[DSV4_CUDA_MAX_DEVICES];
static tk_device tk_devices[DSV4_CUDA_MAX_DEVICES];

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

/* Raises kernel's dynamic shared memory limit to bytes. */
template <typename K> static int tk_smem_limit(K kernel, int bytes)
{
    return dsv4_cuda_status(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

static void tk_device_setup(int dev)
{
    tk_device *d = &tk_devices[dev];
    int optin = 0, wide = 0, wide_sh = 0;
    d->rc = dsv4_cuda_status(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (d->rc == 0)
        d->rc = tk_smem_limit(dsv4_topk_kernel<8, false>, optin);
    if (d->rc == 0)
        d->rc = tk_smem_limit(dsv4_topk_kernel<8, true>, optin);
    if (d->rc == 0)
        d->rc = tk_smem_limit(dsv4_topk_kernel<16, false>, optin);
    if (d->rc == 0)
        d->rc = tk_smem_limit(dsv4_topk_kernel<16, true>, optin);
    if (d->rc != 0)
        return;
    d->smem_max = (uint32_t)optin;
    /* 16 blocks is past the portable cluster size: used only where the device says such
     * clusters fit (with the most shared memory a launch asks for) */
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = tk_config<16>(1, (size_t)optin, NULL, &attr);
    if (cudaFuncSetAttribute(dsv4_topk_kernel<16, false>,
                             cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        cudaFuncSetAttribute(dsv4_topk_kernel<16, true>,
                             cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&wide, dsv4_topk_kernel<16, false>, &cfg) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&wide_sh, dsv4_topk_kernel<16, true>, &cfg) != cudaSuccess)
        wide = 0;
    (void)cudaGetLastError(); /* a refusal above only means no 16-block clusters */
    wide = wide < wide_sh ? wide : wide_sh;
    d->wide_clusters = wide > 0 ? (uint32_t)wide : 0;
}

template <int CL>
static int tk_launch(const tk_device *d, const float *scores, size_t stride,
                     const uint32_t *n_rows_dev, uint32_t n_queries, uint32_t k, uint32_t *idx,
                     cudaStream_t stream)
{
    /* room for the longest slice (stride / CL rounded up) plus up to 3 floats before and
     * after it in its 16-byte words, or as much as the device allows */
    uint64_t cap = (stride + CL - 1) / CL + 8;
    uint64_t room = d->smem_max > TK_SLICE_OFF ? (d->smem_max - TK_SLICE_OFF) / 16 * 4 : 0;
    if (room > TK_MAX_CHUNKS * TK_CHUNK)
        room = TK_MAX_CHUNKS * TK_CHUNK; /* the barriers a slice has */
    const bool fits = cap <= room;
    if (!fits)
        cap = room;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = tk_config<CL>(n_queries, TK_SLICE_OFF + cap * 4, stream, &attr);
    if (fits)
        (void)cudaLaunchKernelEx(&cfg, dsv4_topk_kernel<CL, true>, scores, stride, n_rows_dev, k,
                                 (uint32_t)cap, idx);
    else
        (void)cudaLaunchKernelEx(&cfg, dsv4_topk_kernel<CL, false>, scores, stride, n_rows_dev, k,
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
    int rc = dsv4_cuda_once_per_device(tk_once, tk_device_setup, &dev);
    if (rc != 0)
        return rc;
    const tk_device *d = &tk_devices[dev];
    if (d->rc != 0)
        return d->rc;
    cudaStream_t s = (cudaStream_t)stream;
    if (n_queries <= d->wide_clusters)
        return tk_launch<16>(d, scores_dev, stride, n_rows_dev, n_queries, k, idx_dev, s);
    return tk_launch<8>(d, scores_dev, stride, n_rows_dev, n_queries, k, idx_dev, s);
}
