/* topk.cu: exact top-k of the indexer scores, one thread-block cluster per query.
 *
 * Radix select over 32-bit keys that order like the scores (NaN lowest, -0 as +0), in three
 * digit passes of 11, 11 and 10 bits. The blocks of a cluster (16 when the whole batch fits
 * on the GPU at once as 16-block clusters, else 8) each take a slice of the query's scores.
 * A slice that fits in shared memory is brought in first by the copy engine (bulk copies on
 * one mbarrier, all in flight at once) and every pass reads it there; a larger slice is read
 * from global memory by each pass. Pass one histograms the top digit of every key; the
 * blocks sum their histograms through distributed shared memory (each block sums a range of
 * bins, then every block copies the sums) and pick the same digit. Each block then compacts its
 * keys with that digit (a small share of the slice for any spread of scores) into a candidate list,
 * and the two remaining passes histogram only those; a block whose candidates overflow the list
 * re-reads its slice instead, which gives the same histogram. After the last pass every block knows
 * the k-th key T and how many keys equal to T to take (the lowest rows, which lie in the lowest
 * ranks' slices). The selected keys are gathered into rank 0; each block then ranks a share of them
 * by counting the selected keys that order before each one (higher key, or equal key and lower row)
 * and writes each row straight to its place.
 *
 * Why the slice goes to shared memory first: a block reading its slice with ordinary loads
 * has only its threads' loads in flight (32 KB for 1024 threads x 8), so each of the two
 * passes over a 128 KB slice took a dozen memory latencies; the copy engine has the whole
 * slice in flight at once, and the later passes cost shared-memory reads only. Why 16-block
 * clusters for small batches: the time of one query is the time of one block's slice, and
 * a small batch leaves most multiprocessors idle.
 *
 * Why not a sort: the first pass is one read of the scores; everything after it touches a
 * few thousand keys, and ranking k keys by counting costs k^2 / 8 comparisons per block
 * with no barrier between steps, where a bitonic sort of k keys needs log^2 k barriers.
 *
 * The result depends only on the scores, never on the cluster size or the batch:
 * histograms are counts, the gather order is undone by the ranking on (key, row), which is
 * unique per row. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cooperative_groups.h>

#include <mutex>

namespace cg = cooperative_groups;

#define TK_THREADS 1024
#define TK_WARPS (TK_THREADS / 32)
#define TK_CLUSTER_MAX 16
#define TK_MAX_DEVICES 64
#define TK_COPY_CHUNK 16384u /* bytes per bulk copy of the slice */
#define TK_BINS 2048         /* 11-bit digits */
#define TK_CAND_CAP 4096u    /* candidate keys per block after the first pass */
#define TK_UNROLL 8          /* independent loads in flight per thread */

typedef struct tk_shared {
    uint64_t bar; /* the slice's bulk copies */
    /* arrays read by 16-byte loads are 16-byte aligned */
    __align__(16) uint32_t hist[2][TK_BINS];       /* this block's histogram; double-buffered */
    __align__(16) uint32_t range_sum[TK_BINS / 8]; /* this block's range of the cluster sum */
    __align__(16) uint32_t merged[TK_BINS];        /* the cluster's histogram */
    uint32_t warp_sum[TK_WARPS];
    uint32_t digit, above;          /* the chosen digit, keys under the prefix above it */
    uint32_t n_cand, n_sel;         /* list lengths (n_cand may pass the capacity: overflow) */
    uint32_t cnt_gt, cnt_eq;        /* this block's keys > T (all in sel) and == T */
    uint32_t pos_eq;                /* gather cursor for ties */
    uint32_t cand_key[TK_CAND_CAP]; /* keys whose top digit is the chosen one */
    uint32_t cand_row[TK_CAND_CAP];
    __align__(16) uint32_t sel_key[DSV4_CUDA_TOPK_MAX]; /* keys > T; later the whole top-k */
    __align__(16) uint32_t sel_row[DSV4_CUDA_TOPK_MAX];
    __align__(16) uint32_t top_key[DSV4_CUDA_TOPK_MAX]; /* rank 0: every selected key */
    __align__(16) uint32_t top_row[DSV4_CUDA_TOPK_MAX];
} tk_shared;

/* The slice's copy in shared memory starts here (16-byte aligned, as bulk copies need). */
#define TK_SLICE_OFF ((sizeof(tk_shared) + 15u) & ~(size_t)15u)

__device__ static inline uint32_t tk_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* One thread: bar completes its phase 0 once bytes have landed from bulk copies. */
__device__ static inline void tk_bar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(tk_smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tk_smem_addr(bar)),
        "r"(bytes)
        : "memory");
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

/* Until bar's phase 0 has completed. */
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

/* Points *src_p at the block's slice (len scores from g): a copy in shared memory when
 * len + 3 floats fit in cap, else g itself. The copy is laid out so that the scores from
 * the first 16-byte boundary of g on land 16-byte aligned; those go by bulk copies, the up
 * to 3 before and 3 after the aligned run by plain loads. Called by every thread; the
 * copy is complete on return. */
__device__ static void tk_slice_stage(tk_shared *sh, const float *g, uint32_t len, uint32_t cap,
                                      const float **src_p)
{
    const uint32_t tid = threadIdx.x;
    *src_p = g;
    if (len + 3 > cap)
        return;
    uint32_t head = (uint32_t)((16u - ((uintptr_t)g & 15u)) & 15u) / 4u;
    head = head < len ? head : len;
    const uint32_t body = (len - head) & ~3u, tail = len - head - body;
    float *copy = (float *)((uint8_t *)sh + TK_SLICE_OFF) + ((4u - head) & 3u);
    if (tid == 0 && body > 0) {
        tk_bar_expect(&sh->bar, body * 4u);
        for (uint32_t off = 0; off < body * 4u; off += TK_COPY_CHUNK) {
            uint32_t n = body * 4u - off < TK_COPY_CHUNK ? body * 4u - off : TK_COPY_CHUNK;
            tk_bulk_load((uint8_t *)(copy + head) + off, (const uint8_t *)(g + head) + off, n,
                         &sh->bar);
        }
    }
    if (tid < head)
        copy[tid] = g[tid];
    if (tid < tail)
        copy[head + body + tid] = g[head + body + tid];
    __syncthreads(); /* the barrier's init before anyone waits; the plain stores */
    if (body > 0)
        tk_bar_wait(&sh->bar);
    *src_p = copy;
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
 * prefix with a higher digit. Every block computes the same. The sum is a reduce-scatter
 * and an all-gather, both by 16-byte remote loads: block r adds up bins
 * [r nbins / CL, (r + 1) nbins / CL) of every block's histogram, then every block copies
 * all the summed ranges, nbins / 2 remote loads per block whatever CL. (Each block reading
 * every block's whole histogram, nbins x CL remote loads of 4 bytes, was most of a batch-1
 * query's time: bench/results/2026-11-29-indexer-h200-c.md.) The range sums are read only
 * before the next cluster barrier of the caller, so one buffer serves every pass. */
template <int CL>
__device__ static void tk_pick(tk_shared *sh, cg::cluster_group &cluster, const uint32_t *hist,
                               uint32_t nbins, uint32_t want)
{
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t range = nbins / CL, rank = cluster.block_rank();
    if (tid < range / 4) {
        uint4 s = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (uint32_t r = 0; r < CL; r++) {
            uint4 v = *(const uint4 *)(cluster.map_shared_rank(hist, r) + rank * range + 4 * tid);
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        *(uint4 *)(sh->range_sum + 4 * tid) = s;
    }
    cluster.sync();
    if (tid < nbins / 4) {
        const uint32_t b = 4 * tid;
        *(uint4 *)(sh->merged + b) =
            *(const uint4 *)(cluster.map_shared_rank(sh->range_sum, b / range) + b % range);
    }
    __syncthreads();
    const uint32_t per = nbins / TK_THREADS; /* 1 or 2 bins per thread, from the top */
    uint32_t c[2] = {0, 0};
#pragma unroll
    for (uint32_t j = 0; j < 2; j++)
        if (j < per)
            c[j] = sh->merged[nbins - 1 - (tid * per + j)];
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
    const float *src;
    tk_slice_stage(sh, scores + (size_t)q * stride + lo, len, cap, &src);
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
    tk_pick<CL>(sh, cluster, sh->hist[0], TK_BINS, kk);
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
        tk_pick<CL>(sh, cluster, hist, nbins, want);
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
    for (uint32_t j = 4 * tid; j < kk; j += 4 * TK_THREADS) {
        /* whole 16-byte groups: entries past kk (inside the arrays) are copied, never read */
        *(uint4 *)(sh->sel_key + j) = *(const uint4 *)(root->top_key + j);
        *(uint4 *)(sh->sel_row + j) = *(const uint4 *)(root->top_row + j);
    }
    cluster.sync(); /* rank 0's shared memory stays until every block has its copy */
    const uint32_t first = (uint32_t)((uint64_t)kk * rank / CL);
    const uint32_t last = (uint32_t)((uint64_t)kk * (rank + 1) / CL);
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
