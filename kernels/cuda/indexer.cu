/* indexer.cu: lightning-indexer decode scores read straight from index-K pages in each
 * plugin format (f32, bf16, fp8 e4m3 + fp32 row scale), on tensor cores.
 *
 * Why tensor cores: one row costs n_heads * dim multiply-adds (8192 at 64 x 128) for 132
 * bytes of fp8 key, far above what CUDA cores do at HBM speed; as an MMA the query block
 * (heads x dim) multiplies the key block (dim x rows of a page).
 *
 * Three kernels. All take, per block, a run of pages of one query; pages land in shared
 * memory by the copy engine (one cp.async.bulk per page, or tensor-map copies, completing on
 * the stage's mbarrier), several stages deep.
 *
 * mma.sync (every build; f32 keys always): at HBM speed the kernel is bound by instructions
 * issued per row, not by the MMAs, so the layout minimises them. A warp holds all 64 heads
 * of its query in registers as MMA A fragments (128 registers), so each key fragment is
 * loaded and, for fp8, converted once and used by four MMAs, and the relu-weighted head sum
 * of a row ends inside one warp (no partial sums through shared memory, no second barrier).
 * A block of 4 warps reads a page in step (one barrier per page, after which one thread
 * refills the stage just read); warp w takes the 8-row tiles w, w + 4, ... of a page. f32
 * keys need the query twice (hi and lo terms): there a warp holds 32 heads and a block has
 * two head groups of 4 warps, whose row sums meet in shared memory.
 *
 * wgmma (device code built for sm_90a; fp8 keys): with mma.sync, fp8 keys leave the
 * kernel bound by its MMAs and their issue at under half the HBM read ceiling. Here a block
 * is one warpgroup: the keys of 64 rows are the A operand, loaded from the page and
 * converted e4m3 -> f16 into registers, the query is the B operand in shared memory (64
 * heads x dim, written once per block; all its loads issued before the page ids are
 * read), each 64 x 64 x 16 MMA is one instruction for the warpgroup, and each warp ends
 * with the relu-weighted head sums of its 16 rows, summed across a quad. The 64-row tiles
 * are software-pipelined: a warp issues one tile's MMAs, loads and converts the next
 * tile's keys into a second register set while they run, then waits for them and sums the
 * scores (each tile waiting for the one before it held fp8 at 56% of the read ceiling at
 * 1M x 32/64, bench/results/2026-11-29-indexer-h200-f.md). Under 128 registers a thread,
 * four blocks share a multiprocessor. As soon as its keys are in registers a warp releases
 * the stage (an arrival on its empty barrier), and warp 0 refills it after the step's
 * epilogue, so the copies in flight do not wait on the MMAs (every warp reads every page,
 * so no warp can wait on a barrier phase two ahead of it).
 *
 * Tensor-map wgmma (sm_90a; bf16 keys, or fp8 keys with an e4m3 query; dim 128, pages of a
 * multiple of 64 rows): the copy engine stores each page through a tensor map (the pool as
 * pages x rows x values, driver encoder found through the runtime) in the 128-byte swizzled
 * layout wgmma reads its B operand in, so the keys are B straight from shared memory and the
 * query (64 heads x dim, bf16) is A in 32 registers. No key passes through registers: four
 * blocks share a multiprocessor, 3 bf16 pages or 6 fp8 ones in flight each. A warp's
 * accumulators hold its 16 heads for the tile's 64 rows; the relu-weighted head sums meet
 * across lanes by three halving exchanges and across the four warps in shared memory. Two
 * tiles' MMAs are issued together and the first tile summed while the second one's run; one
 * barrier a pass of two tiles, after which all 128 threads finish the rows of both (a barrier
 * a tile, and each tile's page and place found by a division, made fp8 with the e4m3 query
 * 5-7% slower at 128k and 1M, bench/results/2026-11-30-indexer-tmpass-h200.md). With fp8 keys
 * the query is one e4m3 term (the fp8 plugin's query_format = e4m3), 4 MMAs m64n64k32 a tile,
 * the row scales copied apart from the keys (a stage of keys is then whole swizzle atoms: 6
 * stages where 5 fit with the scales behind the keys, 1-2 points at 1M) and applied to the
 * summed row. (With the f32 query as two or three e4m3 terms it was slower than the
 * register-keys kernel at 128k and 1M; the pipelined register-keys wgmma kernel was slower
 * than mma.sync for bf16 at 32k and 1M, run f; fp8 keys as A and the e4m3 query as B, both
 * from shared memory, summing a row within a warp, was no faster at 128k and 1M and 2.5 us
 * slower a small step, bench/results/2026-11-30-indexer-e4m3q-h200.md, and again on this
 * kernel's pass and stages, for bf16 keys too: 1-3 points faster at 1M, even at 128k x 64,
 * 2 points slower at fp8 128k x 32, 0.6-1.7 us slower a small step (the query stored and a
 * barrier before the first MMA), bench/results/2026-11-30-indexer-ssa-h200.md.) Other bf16
 * shapes stay on mma.sync.
 *
 * The dot product may sum its dims in any order, so the k index of the MMA is permuted:
 * thread t of a quad owns the 16-byte chunks t, t + 4, ... of a row, which makes its key
 * loads 16 bytes wide (the wgmma query is laid out in shared memory in the same order). The
 * epilogues apply relu and the head weights to the accumulators and sum across lanes in a
 * fixed exchange, so every score is summed in an order fixed by the kernel alone.
 *
 * Precision: keys are used exactly as stored (e4m3 -> f16 and bf16 are exact); each query
 * head is divided by its largest |value| (relu(s x) = s relu(x) for s > 0, so the factor
 * moves into the head weight, as does the fp8 row scale) and rounded to f16 for fp8 keys or
 * bf16 for bf16 keys; f32 keys and queries are split as hi + lo bf16 pairs and multiplied as
 * hi*hi + hi*lo + lo*hi. An e4m3 query is quantised as the CPU plugin quantises it (its
 * scale into the head weight) and multiplied exactly; the e4m3 MMAs' sums keep fewer bits
 * than f32 (within 2^-16 of sum |q k| measured). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_once.cuh"
#include "kernels/cuda/e4m3.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/status.cuh"
#include "kernels/cuda/pdl.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <mutex>

#include <cudaTypedefs.h> /* CUtensorMap, cuTensorMapEncodeTiled's type: no libcuda linked */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IK_WGMMA 1
#else
#define IK_WGMMA 0
#endif

#define IK_HEADS 64     /* queries are padded to 64 heads */
#define IK_MAX_RPP 256u /* rows per page the partial-sum buffer holds */
#define IK_MAX_PPB 128u /* pages per block, whose ids are staged in shared memory */
#define IK_MAX_STAGES 8u
#define IK_SMEM_MAX (200u * 1024u)
#define IK_BAR_BYTES (IK_MAX_STAGES * 8u)
#define IK_PART_BYTES (2u * IK_MAX_RPP * (uint32_t)sizeof(float))
#define IK_IDS_BYTES (IK_MAX_PPB * (uint32_t)sizeof(uint32_t))
#define IK_HEAD_BYTES (IK_BAR_BYTES + IK_PART_BYTES + IK_IDS_BYTES) /* a multiple of 16 */
/* The wgmma kernel's shared memory: the feed (a full and an empty barrier per stage,
 * the page ids), the query as B, then the stages; each part a multiple of 16 bytes. */
#define IK_WG_BLOCKS 4      /* per multiprocessor: at most 128 registers a thread */
#define IK_WG_FP8_STAGES 4u /* four blocks' stages and queries fit in shared memory */
#define IK_FEED_BYTES (IK_MAX_STAGES * (8u + 8u) + IK_MAX_PPB * 4u)
#define IK_WG_QUERY_BYTES (IK_HEADS * 128u * 2u)

/* 1 in the device code built for sm_90a: the host reads it once per device to pick the
 * wgmma kernel. */
__device__ int ik_wgmma_built = IK_WGMMA;

/* Per format: bytes per value, pipeline stages, row scale bytes, two-term query, heads per
 * warp (the query's registers: 64 heads, or 32 heads twice), threads per block (4 warps per
 * head group), blocks per multiprocessor. */
template <dsv4_cuda_ik_format F> struct ik_fmt;
template <> struct ik_fmt<DSV4_CUDA_IK_FP8> {
    static constexpr int elem = 1, stages = 6, scale_bytes = 4, hpw = 64, threads = 128, blocks = 2;
    static constexpr bool split = false;
};
template <> struct ik_fmt<DSV4_CUDA_IK_BF16> {
    static constexpr int elem = 2, stages = 4, scale_bytes = 0, hpw = 64, threads = 128, blocks = 2;
    static constexpr bool split = false;
};
template <> struct ik_fmt<DSV4_CUDA_IK_F32> {
    static constexpr int elem = 4, stages = 2, scale_bytes = 0, hpw = 32, threads = 256, blocks = 1;
    static constexpr bool split = true;
};

/* One thread: n barriers, each phase completed by count arrivals (and the bytes expected). */
__device__ static inline void ik_bars_make(uint64_t *bars, uint32_t n, uint32_t count)
{
    for (uint32_t s = 0; s < n; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(dsv4_smem_addr(&bars[s])),
                     "r"(count)
                     : "memory");
}

/* One thread: the stage barriers, each completed by one arrival plus its copy's bytes, made
 * visible to the copy engine before any copy is issued (with any barriers the thread made
 * before). */
__device__ static inline void ik_bars_init(uint64_t *bars, uint32_t n)
{
    ik_bars_make(bars, n, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* One thread: bar's arrival, its current phase then complete when bytes more have landed. */
__device__ static inline void ik_bar_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(dsv4_smem_addr(bar)),
        "r"(bytes)
        : "memory");
}

/* One thread: bytes from global src to shared dst on the copy engine, counted on bar as
 * they land (the bytes expected there by the caller). */
__device__ static inline void ik_bulk_copy(void *dst, const void *src, uint32_t bytes,
                                           uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(dsv4_smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(dsv4_smem_addr(bar))
                 : "memory");
}

/* One thread: bytes from global src to shared dst on the copy engine; bar's current phase
 * completes when they have landed. */
__device__ static inline void ik_bulk_load(void *dst, const void *src, uint32_t bytes,
                                           uint64_t *bar)
{
    ik_bar_expect(bar, bytes);
    ik_bulk_copy(dst, src, bytes, bar);
}

__device__ static inline void ik_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ static inline void ik_mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ static inline uint32_t ik_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

__device__ static inline uint32_t ik_pack_f16(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The part of x that bf16 drops (x - bf16(x), exact in f32). */
__device__ static inline float ik_bf16_rest(float x)
{
    return x - __bfloat162float(__float2bfloat16_rn(x));
}

/* Two e4m3 bytes (low byte first) as an f16 pair; exact. */
__device__ static inline uint32_t ik_e4m3x2_f16(uint32_t two)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}

__device__ static inline float ik_relu(float x)
{
    /* max.NaN: NaN passes, as in the CPU plugins, in one instruction (a compare and a select
     * otherwise) */
    float r;
    asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(r) : "f"(x));
    return r;
}

/* An e4m3 query (DSV4_CUDA_IK_QUERY_E4M3*) is quantised as plugins/indexk/fp8.c quantises a
 * row, so that the CPU and the GPU score the same query: the head's scale from the largest
 * finite |value| (a maximum does not depend on the order it is taken in), the e4m3 codes of
 * the IEEE quotients by it (as the host's `/`, dsv4_e4m3x4_quotient_bits). */
__device__ static inline float ik_q_abs(float x, bool e4m3)
{
    return e4m3 && !isfinite(x) ? 0.0f : fabsf(x);
}

/* The scale of an e4m3 query head whose largest finite |value| is amax. */
__device__ static inline float ik_q_scale(float amax, dsv4_cuda_ik_query query)
{
    return dsv4_e4m3_scale(amax, query == DSV4_CUDA_IK_QUERY_E4M3_UE8M0);
}

/* The e4m3 query values of x (scale s, inv = 1 / s) as floats, for the kernels that
 * multiply them in f16 (exact: e4m3 values are f16 values). */
__device__ static inline float4 ik_q_values(float4 x, float s, float inv)
{
    const uint32_t codes = dsv4_e4m3x4_quotient_bits(x, s, inv);
    const __half2 two[2] = {
        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(codes & 0xffffu), __NV_E4M3),
        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(codes >> 16), __NV_E4M3)};
    const float2 lo = __half22float2(two[0]), hi = __half22float2(two[1]);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

/* The MMAs of one 16-byte key chunk (k-steps c * SPC ..) of one 8-row tile, for the MT
 * 16-head tiles of the warp. */
template <dsv4_cuda_ik_format F, int SPC, int QS, int MT, int KS>
__device__ static inline void ik_mma_chunk(float (&acc)[MT][4], const uint32_t (&qa)[QS][MT][KS][4],
                                           const uint4 &raw, int c)
{
    const uint32_t *wd = &raw.x;
#pragma unroll
    for (int sc = 0; sc < SPC; sc++) {
        const int s = c * SPC + sc;
        if (F == DSV4_CUDA_IK_FP8) {
            uint32_t b0 = ik_e4m3x2_f16(wd[sc] & 0xffffu), b1 = ik_e4m3x2_f16(wd[sc] >> 16);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ik_mma_f16(acc[mt], qa[0][mt][s], b0, b1);
        } else if (F == DSV4_CUDA_IK_BF16) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                ik_mma_bf16(acc[mt], qa[0][mt][s], wd[2 * sc], wd[2 * sc + 1]);
        } else {
            const float *k = (const float *)wd;
            uint32_t h0 = ik_pack_bf16(k[0], k[1]), h1 = ik_pack_bf16(k[2], k[3]);
            uint32_t l0 = ik_pack_bf16(ik_bf16_rest(k[0]), ik_bf16_rest(k[1]));
            uint32_t l1 = ik_pack_bf16(ik_bf16_rest(k[2]), ik_bf16_rest(k[3]));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                ik_mma_bf16(acc[mt], qa[QS - 1][mt][s], h0, h1);
                ik_mma_bf16(acc[mt], qa[0][mt][s], l0, l1);
                ik_mma_bf16(acc[mt], qa[0][mt][s], h0, h1);
            }
        }
    }
}

/* Q8: the query as e4m3 values (fp8 keys only), taken as f16 (exact). */
template <dsv4_cuda_ik_format F, int DIM, bool Q8>
__global__ void __launch_bounds__(ik_fmt<F>::threads, ik_fmt<F>::blocks)
    dsv4_ik_score_kernel(const uint8_t *__restrict__ pool, uint32_t page_bytes, uint32_t rpp,
                         uint32_t stages, uint32_t ppb, dsv4_cuda_ik_batch bt, float *scores)
{
    dsv4_pdl_begin();
    using fmt = ik_fmt<F>;
    constexpr int E = 16 / fmt::elem; /* values per 16-byte chunk */
    constexpr int CPR = DIM / E;      /* chunks per row */
    constexpr int CPT = CPR / 4;      /* chunks per thread and row */
    constexpr int SPC = E / 4;        /* k-steps per chunk (4 values per thread per k-step) */
    constexpr int KS = DIM / 16;      /* k-steps */
    constexpr int QS = fmt::split ? 2 : 1;
    constexpr int MT = fmt::hpw / 16;       /* 16-head MMA tiles per warp */
    constexpr int HG = IK_HEADS / fmt::hpw; /* head groups of 4 warps */
    extern __shared__ __align__(16) uint8_t ik_smem[];
    uint64_t *full = (uint64_t *)ik_smem;
    float *part = (float *)(ik_smem + IK_BAR_BYTES);
    uint32_t *ids = (uint32_t *)(ik_smem + IK_BAR_BYTES + IK_PART_BYTES);
    uint8_t *stage0 = ik_smem + IK_HEAD_BYTES;

    const uint32_t b = blockIdx.y, tid = threadIdx.x;
    const uint32_t n_rows = bt.n_rows_dev[b];
    const uint32_t n_pages = (n_rows + rpp - 1) / rpp;
    const uint32_t p0 = blockIdx.x * ppb;
    if (p0 >= n_pages)
        return;
    const uint32_t p1 = min(n_pages, p0 + ppb);
    const uint32_t *pages = bt.pages_dev + bt.page_start_dev[b];
    const uint32_t warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const uint32_t hg = warp >> 2, rg = warp & 3;

    /* The page ids first: a page-table load inside the loop would stall every copy. */
    for (uint32_t i = p0 + tid; i < p1; i += fmt::threads)
        ids[i - p0] = pages[i];
    if (tid == 0)
        ik_bars_init(full, stages);
    __syncthreads();
    /* Thread 0 keeps stages - 1 pages in flight ahead of the one being read. */
    uint32_t next = p0, next_stage = 0;
    auto issue = [&]() {
        if (next < p1) {
            ik_bulk_load(stage0 + (size_t)next_stage * page_bytes,
                         pool + (size_t)ids[next - p0] * page_bytes, page_bytes, &full[next_stage]);
            next++;
            next_stage = next_stage + 1 == stages ? 0 : next_stage + 1;
        }
    };
    if (tid == 0)
        for (uint32_t s = 0; s + 1 < stages; s++)
            issue();

    /* The query as A fragments: a0/a2 hold head g (k low/high), a1/a3 head g + 8. A thread
     * reads 8 heads' values at 4 places per warp load, so each load instruction costs about
     * 16 L1 wavefronts: 16-byte loads where the query allows them (a head's row is a
     * multiple of 16 bytes, so that is where q_dev is 16-byte aligned) take a quarter of the
     * instructions and wavefronts of 4-byte ones, which made the query load most of a
     * one-page step (bench/results/2026-11-29-indexer-h200-c.md). */
    const bool q16 = ((uintptr_t)bt.q_dev & 15u) == 0;
    uint32_t qa[QS][MT][KS][4];
    float wq[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hs = 0; hs < 2; hs++) {
            uint32_t head = hg * fmt::hpw + mt * 16 + g + 8 * hs;
            bool real = head < bt.n_heads;
            const float *qh = bt.q_dev + ((size_t)b * bt.n_heads + (real ? head : 0)) * DIM;
            float v[CPT * E], amax = 0.0f;
#pragma unroll
            for (int c = 0; c < CPT; c++)
#pragma unroll
                for (int e = 0; e < E; e += 4) {
                    const float *x = qh + (t4 + 4 * c) * E + e;
                    float4 x4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (real && q16)
                        x4 = *(const float4 *)x;
                    else if (real)
                        x4 = make_float4(x[0], x[1], x[2], x[3]);
                    v[c * E + e] = x4.x;
                    v[c * E + e + 1] = x4.y;
                    v[c * E + e + 2] = x4.z;
                    v[c * E + e + 3] = x4.w;
                }
            constexpr bool q8 = Q8;
#pragma unroll
            for (int e = 0; e < CPT * E; e++)
                amax = fmaxf(amax, ik_q_abs(v[e], q8));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
            float sh = amax > 0.0f && amax <= 3.0e38f ? amax : 1.0f;
            if (q8)
                sh = ik_q_scale(amax, bt.query);
            const float inv = 1.0f / sh;
            wq[mt][hs] = real ? bt.w_dev[(size_t)b * bt.n_heads + head] * sh : 0.0f;
#pragma unroll
            for (int s = 0; s < KS; s++) {
                const float *x = v + (s / SPC) * E + (s % SPC) * 4;
                float x0 = x[0] * inv, x1 = x[1] * inv, x2 = x[2] * inv, x3 = x[3] * inv;
                if (q8) {
                    const float4 y = ik_q_values(make_float4(x[0], x[1], x[2], x[3]), sh, inv);
                    x0 = y.x, x1 = y.y, x2 = y.z, x3 = y.w;
                }
                if (F == DSV4_CUDA_IK_FP8) {
                    qa[0][mt][s][hs] = ik_pack_f16(x0, x1);
                    qa[0][mt][s][2 + hs] = ik_pack_f16(x2, x3);
                } else {
                    qa[0][mt][s][hs] = ik_pack_bf16(x0, x1);
                    qa[0][mt][s][2 + hs] = ik_pack_bf16(x2, x3);
                }
                if (fmt::split) {
                    qa[QS - 1][mt][s][hs] = ik_pack_bf16(ik_bf16_rest(x0), ik_bf16_rest(x1));
                    qa[QS - 1][mt][s][2 + hs] = ik_pack_bf16(ik_bf16_rest(x2), ik_bf16_rest(x3));
                }
            }
        }
    }

    /* after the exchange below, lane g holds tile (g >> 2) & 1, row 2 t4 + ((g >> 1) & 1) */
    const uint32_t ku = (g >> 2) & 1u, kj = (g >> 1) & 1u;
    uint32_t stage = 0, parity = 0;
    for (uint32_t i = p0; i < p1; i++) {
        dsv4_mbar_wait(dsv4_smem_addr(&full[stage]), parity);
        __syncthreads(); /* every warp is done with page i - 1: its stage may be refilled */
        if (tid == 0)
            issue();
        const uint8_t *pg = stage0 + (size_t)stage * page_bytes;
        const float *row_scale = (const float *)(pg + (size_t)rpp * DIM);

        /* two 8-row tiles per warp at a time (nt and nt + 4): 2 MT independent MMA chains */
        for (uint32_t nt = rg; nt * 8 < rpp; nt += 8) {
            const bool two = (nt + 4) * 8 < rpp;
            float acc[2][MT][4] = {};
#pragma unroll
            for (int c = 0; c < CPT; c++) {
                uint4 raw[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const uint32_t row = (nt + 4 * u) * 8 + g;
                    raw[u] = u == 0 || two ? *(const uint4 *)(pg + (size_t)row * (DIM * fmt::elem) +
                                                              (t4 + 4 * c) * 16)
                                           : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int u = 0; u < 2; u++)
                    ik_mma_chunk<F, SPC, QS, MT, KS>(acc[u], qa, raw[u], c);
            }
            /* c0, c1: head g, rows 2 t4 and 2 t4 + 1 of the tile; c2, c3: head g + 8 */
            float v[2][2] = {};
#pragma unroll
            for (int u = 0; u < 2; u++) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    v[u][0] += wq[mt][0] * ik_relu(acc[u][mt][0]);
                    v[u][0] += wq[mt][1] * ik_relu(acc[u][mt][2]);
                    v[u][1] += wq[mt][0] * ik_relu(acc[u][mt][1]);
                    v[u][1] += wq[mt][1] * ik_relu(acc[u][mt][3]);
                }
            }
            /* sum over the 8 lanes of a quad column (g), each step keeping half of what is
             * left: tiles across g bit 2, rows across g bit 1, then the last pair */
            float k0 = ku ? v[1][0] : v[0][0], k1 = ku ? v[1][1] : v[0][1];
            float s0 = ku ? v[0][0] : v[1][0], s1 = ku ? v[0][1] : v[1][1];
            k0 += __shfl_xor_sync(0xffffffffu, s0, 16);
            k1 += __shfl_xor_sync(0xffffffffu, s1, 16);
            float r = kj ? k1 : k0;
            r += __shfl_xor_sync(0xffffffffu, kj ? k0 : k1, 8);
            r += __shfl_xor_sync(0xffffffffu, r, 4);
            const uint32_t slot = (nt + 4 * ku) * 8 + 2 * t4 + kj;
            if ((g & 1u) == 0 && (ku == 0 || two)) {
                if (HG == 1) {
                    const uint32_t row = i * rpp + slot;
                    if (row < n_rows) {
                        if (fmt::scale_bytes)
                            r *= row_scale[slot];
                        scores[(size_t)b * bt.max_rows + row] = bt.scale * r;
                    }
                } else {
                    part[hg * IK_MAX_RPP + slot] = r;
                }
            }
        }
        if (HG > 1) {
            __syncthreads();
            for (uint32_t r = tid; r < rpp; r += fmt::threads) {
                uint32_t row = i * rpp + r;
                if (row >= n_rows)
                    break;
                float a = part[r];
#pragma unroll
                for (int h = 1; h < HG; h++)
                    a += part[h * IK_MAX_RPP + r];
                if (fmt::scale_bytes)
                    a *= row_scale[r];
                scores[(size_t)b * bt.max_rows + row] = bt.scale * a;
            }
        }
        if (++stage == stages) {
            stage = 0;
            parity ^= 1u;
        }
    }
}

#if IK_WGMMA
/* The page feed of one block: pages p0 .. p1 - 1 of its query, page p0 + n in stage
 * n % stages. */
struct ik_feed {
    const uint8_t *pool;
    const void *tmap; /* the pool as pages of rows of keys, copied in boxes when set */
    uint8_t *stage0;
    /* with a tensor map, what follows a page's keys (fp8 row scales), stage s's at tail0 +
     * s x (page_bytes - rpp x row_bytes): kept apart, a stage of keys is a whole number of
     * 1024-byte swizzle atoms and six fp8 stages fit a block where five did */
    uint8_t *tail0;
    /* per stage: full completes when its page has landed, empty when every warp that reads
     * the stage has released it (one arrival a warp) */
    uint64_t *full, *empty;
    uint32_t *ids;
    /* a stage holds a page at stage_bytes = page_bytes, or with a tensor map a page's keys
     * at rpp x row_bytes (1024-aligned for the swizzle); elem: bytes a value, for the tensor
     * map's coordinates */
    uint32_t page_bytes, stage_bytes, stages, p0, p1, rpp, row_bytes, elem;
    /* ceil(2^32 / stages): for the n < 2^16 a block counts its pages by, n / stages is the
     * high word of n x stage_div (a division by a runtime value costs some 20 instructions,
     * and wait and release each took two a page) */
    uint32_t stage_div;

    /* One lane: the page by one bulk copy, or with a tensor map, by one copy a box of 64 rows
     * x 128 bytes (stored in the wgmma 128-byte swizzled layout), boxes of a page in row
     * order, then value order, and what follows the keys in the page (fp8 row scales) by one
     * bulk copy to the stage's tail. */
    __device__ void issue(uint32_t page, uint32_t stage, uint32_t lane) const
    {
        if (lane != 0)
            return;
        uint8_t *dst = stage0 + (size_t)stage * stage_bytes;
        const uint8_t *src = pool + (size_t)ids[page - p0] * page_bytes;
        if (!tmap) {
            ik_bulk_load(dst, src, page_bytes, &full[stage]);
            return;
        }
        ik_bar_expect(&full[stage], page_bytes);
        const uint32_t key_bytes = rpp * row_bytes, tail_bytes = page_bytes - key_bytes;
        if (tail_bytes)
            ik_bulk_copy(tail0 + (size_t)stage * tail_bytes, src + key_bytes, tail_bytes,
                         &full[stage]);
        for (uint32_t m = 0; m < rpp; m += 64)
            for (uint32_t h = 0; h < row_bytes; h += 128, dst += 8192)
                asm volatile(
                    "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::"
                    "bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dsv4_smem_addr(dst)),
                    "l"(tmap), "r"(h / elem), "r"(m), "r"(ids[page - p0]),
                    "r"(dsv4_smem_addr(&full[stage]))
                    : "memory");
    }

    /* Every thread: the page ids (a page-table load inside the loop would stall every copy),
     * the barriers (each stage read by every warp of the block), then every stage filled. */
    __device__ void start(const uint32_t *pages, uint32_t tid, uint32_t threads) const
    {
        for (uint32_t i = p0 + tid; i < p1; i += threads)
            ids[i - p0] = pages[i];
        if (tid == 0) {
            ik_bars_make(empty, stages, threads / 32);
            ik_bars_init(full, stages);
        }
        __syncthreads();
        if (tid < 32)
            for (uint32_t s = 0; s < stages && p0 + s < p1; s++)
                issue(p0 + s, s, tid);
    }

    /* Page i's stage, and in *round_p how many times the ring had gone round before it. */
    __device__ uint32_t stage_of(uint32_t i, uint32_t *round_p) const
    {
        *round_p = __umulhi(i - p0, stage_div);
        return i - p0 - *round_p * stages;
    }

    /* Every thread of a warp, in page order: the stage of page i once it has landed. */
    __device__ uint32_t wait_stage(uint32_t i) const
    {
        uint32_t round;
        const uint32_t stage = stage_of(i, &round);
        dsv4_mbar_wait(dsv4_smem_addr(&full[stage]), round & 1u);
        __syncwarp(); /* the MMAs need the warp converged after its spin */
        return stage;
    }

    /* Every thread of a warp, in page order: page i once it has landed. */
    __device__ const uint8_t *wait(uint32_t i) const
    {
        return stage0 + (size_t)wait_stage(i) * stage_bytes;
    }

    /* Every thread of a warp, once the warp has read what it needs of page i: the warp's
     * arrival on the stage's empty barrier, which orders the warp's reads before the refill
     * that waits on it. Nothing waits here: the last of the warps to count the stage free
     * refilled it (an acquire-release shared atomic, its result broadcast and compared), a
     * chain of dependent instructions in every warp and every page that held 21% of the
     * stall samples of fp8 1M x 32 (H100, ncu,
     * bench/results/2026-12-07-indexer-wg-stalls-gpu-matrix-h100.md). */
    __device__ void release(uint32_t i, uint32_t lane) const
    {
        uint32_t round;
        const uint32_t stage = stage_of(i, &round);
        __syncwarp();
        if (lane == 0)
            asm volatile(
                "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(dsv4_smem_addr(&empty[stage]))
                : "memory");
    }

    /* Every thread of one warp, the one that refills, in page order, some time after its
     * own release of page i: the page stages further on into page i's stage once every
     * warp has released it (by then they have, as a rule: the wait costs one test). */
    __device__ void refill(uint32_t i, uint32_t lane) const
    {
        if (i + stages >= p1)
            return;
        uint32_t round;
        const uint32_t stage = stage_of(i, &round);
        dsv4_mbar_wait(dsv4_smem_addr(&empty[stage]), round & 1u);
        issue(i + stages, stage, lane);
    }
};

/* The feed of this block of a launch over grid (page runs, queries), in the shared memory
 * laid out as above with the kernel's own part of own_bytes. */
__device__ static inline ik_feed ik_feed_at(uint8_t *smem, const uint8_t *pool, uint32_t page_bytes,
                                            uint32_t stages, uint32_t p0, uint32_t p1,
                                            uint32_t own_bytes)
{
    ik_feed f;
    f.pool = pool;
    f.full = (uint64_t *)smem;
    f.empty = (uint64_t *)(smem + IK_MAX_STAGES * 8u);
    f.ids = (uint32_t *)(smem + IK_MAX_STAGES * 16u);
    f.stage0 = smem + IK_FEED_BYTES + own_bytes;
    f.tail0 = nullptr;
    f.tmap = nullptr;
    f.rpp = 0;
    f.row_bytes = 0;
    f.elem = 1;
    f.page_bytes = page_bytes;
    f.stage_bytes = page_bytes;
    f.stages = stages;
    f.stage_div = 0xffffffffu / stages + 1u;
    f.p0 = p0;
    f.p1 = p1;
    return f;
}

/* The pages of a query of n_rows rows that this block takes, or false when it has none. */
__device__ static inline bool ik_block_pages(uint32_t n_rows, uint32_t rpp, uint32_t ppb,
                                             uint32_t *p0_p, uint32_t *p1_p)
{
    const uint32_t n_pages = (n_rows + rpp - 1) / rpp;
    const uint32_t p0 = blockIdx.x * ppb;
    *p0_p = p0;
    *p1_p = min(n_pages, p0 + ppb);
    return p0 < n_pages;
}

/* A shared-memory matrix descriptor for B = the query at addr: K-major, no swizzle, 8 x 8
 * core matrices of 128 contiguous bytes (8 heads x 16 bytes of dims), the next one along K
 * (LBO) 1024 bytes on, along N (SBO) 128 bytes on. */
__device__ static inline uint64_t ik_wg_desc(uint32_t addr)
{
    return (uint64_t)((addr >> 4) & 0x3fffu) | (uint64_t)(1024u >> 4) << 16 |
           (uint64_t)(128u >> 4) << 32;
}

/* d (64 x 64) += a (this warp's 16 rows x 16 k of A, f16 or bf16, in registers; or 16 rows
 * x 32 k of e4m3, whose MMA takes no transpose operand: TAIL) x b (B in shared memory, by
 * descriptor); acc = 0 overwrites d; SHAPE the MMA's shape and types. Both wgmma kernels issue it:
 * the register-keys one with keys as A and the query as B (f16), the tensor-map one with the query
 * as A and keys as B (bf16, or e4m3 for both). */
#define IK_MMA_RS(SHAPE, TAIL)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned." SHAPE " "                                         \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "    \
                 "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "    \
                 "{%32, %33, %34, %35}, %36, p, 1, 1" TAIL ";\n}\n"                                \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),         \
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),       \
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),   \
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),   \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),   \
                   "+f"(d[30]), "+f"(d[31])                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc))

enum ik_mma_type { IK_MMA_F16, IK_MMA_BF16, IK_MMA_E4M3 };

template <ik_mma_type T>
__device__ static inline void ik_mma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int acc)
{
    if constexpr (T == IK_MMA_BF16)
        IK_MMA_RS("m64n64k16.f32.bf16.bf16", ", 0");
    else if constexpr (T == IK_MMA_E4M3)
        IK_MMA_RS("m64n64k32.f32.e4m3.e4m3", "");
    else
        IK_MMA_RS("m64n64k16.f32.f16.f16", ", 0");
}

/* Keeps the compiler from moving accumulator uses across the asynchronous MMAs. */
__device__ static inline void ik_wg_fence(float (&d)[32])
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* Keeps a tile's A registers live (and unchanged) until its MMAs have completed: without
 * it the compiler may place the next tile's keys in them while the MMAs still read them. */
template <int KS> __device__ static inline void ik_wg_keep(uint32_t (&a)[KS][4])
{
#pragma unroll
    for (int s = 0; s < KS; s++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            asm volatile("" : "+r"(a[s][j])::"memory");
}

/* One 64-row tile of a page as this warp's A fragments: rows r0 and r0 + 8, thread t4's
 * 16-byte chunks t4, t4 + 4, ... of each, e4m3 converted to f16 (exact); rows past the
 * page are zeros. */
template <int DIM>
__device__ static inline void ik_wg_keys(const uint8_t *pg, uint32_t rpp, uint32_t r0, uint32_t t4,
                                         uint32_t (&a)[DIM / 16][4])
{
    constexpr int E = 16, CPT = DIM / E / 4, SPC = E / 4;
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        uint4 raw[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const uint32_t row = r0 + 8 * u;
            raw[u] = row < rpp ? *(const uint4 *)(pg + (size_t)row * DIM + (t4 + 4 * c) * 16)
                               : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int sc = 0; sc < SPC; sc++) {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const uint32_t *wd = &raw[u].x;
                uint32_t(&as)[4] = a[c * SPC + sc];
                as[u] = ik_e4m3x2_f16(wd[sc] & 0xffffu);
                as[2 + u] = ik_e4m3x2_f16(wd[sc] >> 16);
            }
        }
    }
}
#endif

/* wgmma kernel state of one tile in flight: its keys (A), the page and tile it came from,
 * and its rows' fp8 scale. */
template <int DIM> struct ik_wg_tile {
    uint32_t a[DIM / 16][4];
    uint32_t i, m;
    float rs;
};

/* Q8: the query as e4m3 values, taken as f16 (exact). */
template <int DIM, bool Q8>
__global__ void __launch_bounds__(128, IK_WG_BLOCKS)
    dsv4_ik_wg_kernel(const uint8_t *__restrict__ pool, uint32_t page_bytes, uint32_t rpp,
                      uint32_t stages, uint32_t ppb, dsv4_cuda_ik_batch bt, float *scores)
{
    dsv4_pdl_begin();
#if IK_WGMMA
    using fmt = ik_fmt<DSV4_CUDA_IK_FP8>;
    constexpr int E = 16 / fmt::elem; /* values per 16-byte chunk */
    constexpr int SPC = E / 4;        /* k-steps per chunk */
    constexpr int KS = DIM / 16;      /* k-steps */
    extern __shared__ __align__(16) uint8_t ik_smem[];
    __shared__ float wh[IK_HEADS];
    /* The row count and the page list's start are read together, and the query's loads are
     * issued before the page ids are: each dependent read is a memory latency, and a step of
     * a few MB is not many more. */
    const uint32_t b = blockIdx.y, tid = threadIdx.x;
    const uint32_t n_rows = bt.n_rows_dev[b], start = bt.page_start_dev[b];
    uint32_t p0, p1;
    if (!ik_block_pages(n_rows, rpp, ppb, &p0, &p1))
        return;
    const ik_feed feed = ik_feed_at(ik_smem, pool, page_bytes, stages, p0, p1, IK_WG_QUERY_BYTES);
    uint8_t *qs = ik_smem + IK_FEED_BYTES;
    const uint32_t warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

    /* The query as B in shared memory: warp w takes heads w, w + 4, ...; lane l dims 4 l ..
     * 4 l + 3, which lie in one 16-byte key chunk and so in one k-step of the permuted
     * order: chunk q = 4 c + t of a row is thread t's c-th, its values j .. j + 3 (j a
     * multiple of 4) are k-step c SPC + j / 4, at k = 2 t, 2 t + 1 (A's a0/a1) and 2 t + 8,
     * 2 t + 9 (a2/a3). */
    const bool q16 = ((uintptr_t)bt.q_dev & 15u) == 0, mine = lane * 4 < DIM;
    float4 x[IK_HEADS / 4]; /* every load first: one latency for the 16 heads, not 16 */
#pragma unroll
    for (int k = 0; k < IK_HEADS / 4; k++) {
        const uint32_t h = warp + 4 * k;
        x[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (h < bt.n_heads && mine) {
            const float *qh = bt.q_dev + ((size_t)b * bt.n_heads + h) * DIM + lane * 4;
            x[k] = q16 ? *(const float4 *)qh : make_float4(qh[0], qh[1], qh[2], qh[3]);
        }
    }
    /* lane k < 16 holds head warp + 4 k's weight, loaded with the query: read where it is
     * used, after the page ids, it was a second memory latency in every block's start (the
     * most sampled stall of a 128k x 8 step on an H100,
     * bench/results/2026-12-06-e4m3-quotient-split-launch-h100.md); loaded here, fp8 steps
     * took 0.77-0.99x the time (H100, bench/results/2026-12-06-indexer-weights-split-diag-h100.md;
     * the same change in dsv4_ik_tm_kernel took fp8-e4m3q 0.95-1.06x, so not there) */
    const uint32_t hw = warp + 4 * lane;
    const float wl =
        lane < IK_HEADS / 4 && hw < bt.n_heads ? bt.w_dev[(size_t)b * bt.n_heads + hw] : 0.0f;
    feed.start(bt.pages_dev + start, tid, 128);
#pragma unroll
    for (int k = 0; k < IK_HEADS / 4; k++) {
        const uint32_t h = warp + 4 * k;
        constexpr bool q8 = Q8;
        float amax = fmaxf(fmaxf(ik_q_abs(x[k].x, q8), ik_q_abs(x[k].y, q8)),
                           fmaxf(ik_q_abs(x[k].z, q8), ik_q_abs(x[k].w, q8)));
#pragma unroll
        for (int o = 16; o; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        float sh = amax > 0.0f && amax <= 3.0e38f ? amax : 1.0f;
        if (q8)
            sh = ik_q_scale(amax, bt.query);
        const float inv = 1.0f / sh;
        if (lane == k)
            wh[h] = wl * sh;
        if (mine) {
            const uint32_t q = lane * 4 / E, j = lane * 4 % E, s = (q / 4) * SPC + j / 4;
            uint8_t *at = qs + 2u * s * 1024u + (h / 8) * 128u + (h % 8) * 16u + (q % 4) * 4u;
            float4 y = make_float4(x[k].x * inv, x[k].y * inv, x[k].z * inv, x[k].w * inv);
            if (q8)
                y = ik_q_values(x[k], sh, inv);
            *(uint32_t *)at = ik_pack_f16(y.x, y.y);
            *(uint32_t *)(at + 1024u) = ik_pack_f16(y.z, y.w);
        }
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* stores seen by wgmma */
    __syncthreads();
    /* heads 8 j + 2 t4 (+ 1), the accumulator columns: wq[8 j] (+ 1), read from shared
     * memory in the epilogue (held in 16 registers they made the kernel spill at 128) */
    const float *wq = wh + 2 * t4;
    const uint32_t qaddr = dsv4_smem_addr(qs);
    const uint32_t tiles = (rpp + 63) / 64; /* 64-row tiles per page */

    /* The tiles in page order, software-pipelined: while the MMAs of one tile run, the warp
     * loads (and converts) the next tile's keys into the other register set, then waits
     * for the MMAs and sums their scores. A tile's row scale is read with its keys, before
     * its page's stage is released. */
    ik_wg_tile<DIM> t[2];
    uint32_t ni = p0, nm = 0;    /* the next tile to load */
    uint32_t freed = UINT32_MAX; /* the page this warp released since the last refill */
    auto load = [&](ik_wg_tile<DIM> &x) {
        const uint8_t *pg = feed.wait(ni);
        const uint32_t slot = warp * 16 + g + (t4 ? 8u : 0u) + nm * 64;
        ik_wg_keys<DIM>(pg, rpp, nm * 64 + warp * 16 + g, t4, x.a);
        x.rs = slot < rpp ? ((const float *)(pg + (size_t)rpp * DIM))[slot] : 1.0f;
        x.i = ni;
        x.m = nm;
        if (++nm == tiles) {
            feed.release(ni, lane); /* the warp has all it needs of the page */
            freed = ni;
            nm = 0;
            ni++;
        }
    };
    /* the MMAs of tile x into d, issued (and committed as one group) */
    auto issue = [&](ik_wg_tile<DIM> &x, float(&d)[32]) {
        ik_wg_fence(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < KS; s++)
            ik_mma_rs<IK_MMA_F16>(d, x.a[s], ik_wg_desc(qaddr + 2u * s * 1024u), s > 0);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    };
    /* once tile x's MMAs have completed: its scores */
    auto finish = [&](ik_wg_tile<DIM> &x, float(&d)[32]) {
        ik_wg_fence(d);
        ik_wg_keep<KS>(x.a);
        /* d[4 j], d[4 j + 1]: row g, heads 8 j + 2 t4, + 1; d[4 j + 2], d[4 j + 3]: row
         * g + 8; a row's sum ends across the quad */
        /* four partial sums a row (heads by j parity and column), so that no chain of
         * dependent adds is longer than four */
        float p0[4] = {}, p1[4] = {};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p0[2 * (j & 1) + e] += wq[8 * j + e] * ik_relu(d[4 * j + e]);
                p1[2 * (j & 1) + e] += wq[8 * j + e] * ik_relu(d[4 * j + 2 + e]);
            }
        float v0 = (p0[0] + p0[1]) + (p0[2] + p0[3]), v1 = (p1[0] + p1[1]) + (p1[2] + p1[3]);
        v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
        v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
        v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
        v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
        const uint32_t slot = x.m * 64 + warp * 16 + g + (t4 ? 8u : 0u);
        const uint32_t row = x.i * rpp + slot;
        if (t4 < 2 && slot < rpp && row < n_rows)
            scores[(size_t)b * bt.max_rows + row] = bt.scale * ((t4 ? v1 : v0) * x.rs);
    };
    /* warp 0 refills the stage the last load freed (the other warps released it in theirs,
     * as soon as they had its keys); after each load, or a page freed by the first load and
     * one by the next would leave the first never refilled */
    auto refill = [&]() {
        if (warp == 0 && freed != UINT32_MAX)
            feed.refill(freed, lane);
        freed = UINT32_MAX;
    };
    auto step = [&](ik_wg_tile<DIM> &cur, ik_wg_tile<DIM> &nxt) {
        float d[32];
        issue(cur, d);
        const bool more = ni < p1;
        if (more)
            load(nxt);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        finish(cur, d);
        refill();
        return more;
    };
    load(t[0]);
    refill(); /* the first load may free a page too: one refill a load */
    while (step(t[0], t[1]) && step(t[1], t[0])) {
    }
#endif
}

#define IK_TM_BLOCKS 4 /* per multiprocessor, 3 stages each (bf16 64 x 128 pages) */
#define IK_TM_PART_BYTES (2u * 2u * 4u * 64u * 4u) /* two buffers of two tiles' warp sums */

#if IK_WGMMA
/* A descriptor for 64 rows of keys at addr (a 1024-aligned box of 64 rows x 128 bytes plus
 * the k-step's 32-byte offset): K-major, 128-byte swizzle, 8-row groups 1024 bytes apart. */
__device__ static inline uint64_t ik_tm_desc(uint32_t addr)
{
    return (uint64_t)((addr >> 4) & 0x3fffu) | (uint64_t)1u << 16 | (uint64_t)(1024u >> 4) << 32 |
           (uint64_t)1u << 62;
}

/* One halving step of a sum across lanes: of v[0 .. 2 HALF), this lane keeps the upper half
 * (hi) or the lower one, adds the partner lane's (lane ^ mask) values of the same half, and
 * leaves them in v[0 .. HALF). */
template <int HALF> __device__ static inline void ik_tm_halve(float *v, bool hi, int mask)
{
#pragma unroll
    for (int i = 0; i < HALF; i++) {
        const float keep = hi ? v[i + HALF] : v[i], send = hi ? v[i] : v[i + HALF];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
}
#endif

/* bf16 keys, or fp8 keys with an e4m3 query (F8), as the wgmma B operand straight from
 * shared memory, where the copy engine stores each page by tensor-map copies (64 rows x 128
 * bytes a box: 64 bf16 or 128 e4m3 values) in the swizzled layout wgmma reads, and an fp8
 * page's row scales apart from its keys by a bulk copy; the query (64 heads = M) is the A
 * operand in registers (32 of them for bf16, 16 for e4m3), so no key passes through
 * registers and four blocks share a multiprocessor. A tile of 64 rows takes 8 MMAs
 * m64n64k16 (bf16) or 4 m64n64k32 (e4m3: per byte read, the same tensor work as bf16's).
 * Each warp ends with partial row sums of its 16 heads; the four meet in shared memory,
 * where a row's fp8 scale multiplies the sum (relu(s x) = s relu(x) for s > 0). Rows per
 * page a multiple of 64, dim 128. */
template <bool F8, int DIM>
__global__ void __launch_bounds__(128, IK_TM_BLOCKS)
    dsv4_ik_tm_kernel(const __grid_constant__ CUtensorMap keys, const uint8_t *__restrict__ pool,
                      uint32_t page_bytes, uint32_t rpp, uint32_t stages, uint32_t ppb,
                      dsv4_cuda_ik_batch bt, float *scores)
{
    dsv4_pdl_begin();
#if IK_WGMMA
    constexpr uint32_t ELEM = F8 ? 1 : 2, ROW_BYTES = DIM * ELEM;
    constexpr int KS = ROW_BYTES / 32; /* k-steps: 32 bytes of a row each */
    extern __shared__ __align__(16) uint8_t ik_smem[];
    const uint32_t b = blockIdx.y, tid = threadIdx.x;
    const uint32_t n_rows = bt.n_rows_dev[b], start = bt.page_start_dev[b];
    uint32_t p0, p1;
    if (!ik_block_pages(n_rows, rpp, ppb, &p0, &p1))
        return;
    ik_feed feed = ik_feed_at(ik_smem, pool, page_bytes, stages, p0, p1, 0);
    float *part = (float *)(ik_smem + IK_FEED_BYTES);
    /* the stages' tails, then their keys from the first 1024-aligned shared address on, as
     * offsets from ik_smem (so the compiler knows them for shared memory: the row scales are
     * read by ld.shared) */
    constexpr uint32_t TAIL = F8 ? 4 : 0; /* tail bytes a row */
    feed.tail0 = ik_smem + IK_FEED_BYTES + IK_TM_PART_BYTES;
    const uint32_t after = dsv4_smem_addr(feed.tail0) + stages * rpp * TAIL;
    feed.stage0 = feed.tail0 + stages * rpp * TAIL + (((after + 1023u) & ~1023u) - after);
    feed.stage_bytes = rpp * ROW_BYTES;
    feed.tmap = &keys;
    feed.rpp = rpp;
    feed.row_bytes = ROW_BYTES;
    feed.elem = ELEM;
    const uint32_t warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;

    /* The query as A: heads 16 warp + g (a0, a2) and + 8 (a1, a3); bf16: dims 16 s + 2 t4
     * (+ 1) (a0, a1) and + 8 (a2, a3); e4m3: dims 32 s + 4 t4 (.. + 3) (a0, a1) and + 16 (a2,
     * a3); NV values a register. Every load issued before the page ids are read. */
    constexpr int NV = F8 ? 4 : 2, KV = 16 / (int)ELEM; /* values a k-step's half */
    const uint32_t h0 = warp * 16 + g, h1 = h0 + 8;
    const bool vec = ((uintptr_t)bt.q_dev & (NV * 4u - 1u)) == 0;
    float x[2][KS][2][NV];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const uint32_t h = u ? h1 : h0;
        const float *qh = bt.q_dev + ((size_t)b * bt.n_heads + (h < bt.n_heads ? h : 0)) * DIM;
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float *at = qh + 2 * KV * s + NV * t4 + KV * e;
                float *y = x[u][s][e];
                if (h >= bt.n_heads) {
#pragma unroll
                    for (int v = 0; v < NV; v++)
                        y[v] = 0.0f;
                } else if (vec) {
                    if constexpr (F8) {
                        const float4 f = *(const float4 *)at;
                        y[0] = f.x, y[1] = f.y, y[2] = f.z, y[3] = f.w;
                    } else {
                        const float2 f = *(const float2 *)at;
                        y[0] = f.x, y[1] = f.y;
                    }
                } else {
#pragma unroll
                    for (int v = 0; v < NV; v++)
                        y[v] = at[v];
                }
            }
    }
    feed.start(bt.pages_dev + start, tid, 128);
    uint32_t qa[KS][4];
    float wq[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        const uint32_t h = u ? h1 : h0;
        float amax = 0.0f;
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int e = 0; e < 2; e++)
#pragma unroll
                for (int v = 0; v < NV; v++)
                    amax = fmaxf(amax, ik_q_abs(x[u][s][e][v], F8));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float sh =
            F8 ? ik_q_scale(amax, bt.query) : (amax > 0.0f && amax <= 3.0e38f ? amax : 1.0f);
        const float inv = 1.0f / sh;
        wq[u] = h < bt.n_heads ? bt.w_dev[(size_t)b * bt.n_heads + h] * sh : 0.0f;
#pragma unroll
        for (int s = 0; s < KS; s++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float *y = x[u][s][e];
                if constexpr (F8)
                    qa[s][u + 2 * e] =
                        dsv4_e4m3x4_quotient_bits(make_float4(y[0], y[1], y[2], y[3]), sh, inv);
                else
                    qa[s][u + 2 * e] = ik_pack_bf16(y[0] * inv, y[1] * inv);
            }
    }
    /* tile k is row 64 (k % tiles) of page p0 + k / tiles; k / tiles is (k x tile_div) >> 16,
     * exact for the k < 2^16 / 3 a block counts (tiles <= 4): a division by a runtime value
     * costs some 20 instructions a tile */
    const uint32_t tiles = rpp / 64, tile_div = (0x10000u + tiles - 1u) / tiles;
    const uint32_t n = (p1 - p0) * tiles;
    uint32_t buf = 0;

    /* the MMAs of tile k into d; the page's stage, and the tile's page (from p0) and place
     * in it in page, m */
    constexpr ik_mma_type MMA = F8 ? IK_MMA_E4M3 : IK_MMA_BF16;
    auto issue = [&](uint32_t k, float(&d)[32], uint32_t &page, uint32_t &m) {
        page = (k * tile_div) >> 16;
        m = k - page * tiles;
        const uint32_t stage = feed.wait_stage(p0 + page);
        const uint8_t *pg = feed.stage0 + (size_t)stage * feed.stage_bytes;
        /* a k-step's descriptor is the tile's plus its offset >> 4 (the 14-bit address field
         * cannot carry: shared memory ends below 2^18 bytes) */
        const uint64_t desc = ik_tm_desc(dsv4_smem_addr(pg) + m * (ROW_BYTES / 128) * 8192u);
        ik_wg_fence(d);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < KS; s++)
            ik_mma_rs<MMA>(d, qa[s], desc + (((s / 4) * 8192u + (s % 4) * 32u) >> 4), s > 0);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        return stage;
    };
    /* once tile k (u: first or second of its pass) has its MMAs completed: the fp8 row
     * scales of the pass's tile u (thread tid, u = tid / 64 its row tid % 64), read before
     * its page's release, the page released after its last tile, the warp's row sums in
     * the pass's buffer: d[4 j], d[4 j + 1] are head h0, rows 8 j + 2 t4 (+ 1); d[4 j + 2],
     * d[4 j + 3] head h1. The 8 lanes of a t4 halve the 16 row values three times (lane g
     * keeps rows 8 g + 2 t4 (+ 1)). */
    float rs = 1.0f;
    auto finish = [&](uint32_t k, uint32_t u, float(&d)[32], uint32_t stage, uint32_t page,
                      uint32_t m) {
        ik_wg_fence(d);
        if (F8 && tid / 64 == u && k < n)
            rs = ((const float *)(feed.tail0 + stage * rpp * TAIL))[m * 64 + tid % 64];
        if (k < n && m == tiles - 1)
            feed.release(p0 + page, lane);
        float v[16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v[2 * j] = wq[0] * ik_relu(d[4 * j]) + wq[1] * ik_relu(d[4 * j + 2]);
            v[2 * j + 1] = wq[0] * ik_relu(d[4 * j + 1]) + wq[1] * ik_relu(d[4 * j + 3]);
        }
        ik_tm_halve<8>(v, (g >> 2) & 1u, 16);
        ik_tm_halve<4>(v, (g >> 1) & 1u, 8);
        ik_tm_halve<2>(v, g & 1u, 4);
        float *pb = part + (buf * 2 + u) * 256u;
        *(float2 *)&pb[warp * 64 + 8 * g + 2 * t4] = make_float2(v[0], v[1]);
    };
    /* Two tiles a pass, the second one's MMAs running while the first one's scores are
     * summed; past the last tile the pass repeats the last one without storing. The four
     * warps' sums of both tiles meet in shared memory after one barrier a pass, thread tid
     * summing row tid % 64 of tile tid / 64 (two buffers: a pass's are not written again
     * before the next pass's barrier). No MMA is in flight across passes nor on one path
     * of a branch only: ptxas serialises every MMA of a kernel where an accumulator in
     * flight crosses a loop's back edge. */
    float d0[32], d1[32];
    for (uint32_t k = 0; k < n; k += 2) {
        uint32_t page0, m0, page1, m1;
        const uint32_t s0 = issue(k, d0, page0, m0);
        const uint32_t s1 = issue(k + 1 < n ? k + 1 : k, d1, page1, m1);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        finish(k, 0, d0, s0, page0, m0);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        finish(k + 1, 1, d1, s1, page1, m1);
        /* warp 0 refills the stages this pass freed as soon as every warp has released them
         * (each does in its finish, before the barrier: the wait cannot hold it) */
        if (warp == 0) {
            if (m0 == tiles - 1)
                feed.refill(p0 + page0, lane);
            if (k + 1 < n && m1 == tiles - 1)
                feed.refill(p0 + page1, lane);
        }
        __syncthreads();
        const uint32_t u = tid / 64, r = tid % 64;
        const float *pb = part + (buf * 2 + u) * 256u;
        const uint32_t row = (p0 + (u ? page1 : page0)) * rpp + (u ? m1 : m0) * 64 + r;
        if (k + u < n && row < n_rows) {
            float sum = pb[r] + pb[64 + r] + pb[128 + r] + pb[192 + r];
            if (F8)
                sum *= rs;
            scores[(size_t)b * bt.max_rows + row] = bt.scale * sum;
        }
        buf ^= 1u;
    }
#endif
}

/* What a launch needs from the device, read once per device and format: the
 * multiprocessor count, whether the device code has the wgmma kernel, the kernels'
 * shared-memory limit raised to IK_SMEM_MAX, and the blocks per multiprocessor for each
 * page size (rows per page / 8 - 1; 0 = not read yet), so a launch makes no CUDA call but
 * the launch itself. (Measured on an H200, these queries were not what small steps cost:
 * the kernel's own fixed time is, bench/results/2026-11-29-indexer-h200-c.md.) */
/* The kernels a format launches, each its own occupancy: the f32-query kernel, the tensor-map
 * one, the one that takes an e4m3 query as f16 values. */
enum { IK_PLAIN, IK_TM, IK_Q8, IK_KINDS };

typedef struct ik_device {
    int rc, sms, wgmma;
    std::atomic<int> per_sm[IK_KINDS][IK_MAX_RPP / 8]; /* [kind][rows per page / 8 - 1] */
} ik_device;

/* The wgmma kernel where the device code has it and the keys are fp8 (for bf16 keys it
 * was no faster than mma.sync, bench/results/2026-11-29-indexer-h200-e.md). */
template <dsv4_cuda_ik_format F> static constexpr bool ik_wg_format()
{
    return F == DSV4_CUDA_IK_FP8;
}

typedef void (*ik_kernel_fn)(const uint8_t *, uint32_t, uint32_t, uint32_t, uint32_t,
                             dsv4_cuda_ik_batch, float *);

/* The kernel of a format (wg: the wgmma kernel, q8: an e4m3 query, fp8 keys only). */
template <dsv4_cuda_ik_format F, int DIM> static ik_kernel_fn ik_kernel(bool wg, bool q8)
{
    if constexpr (ik_wg_format<F>())
        if (wg)
            return q8 ? dsv4_ik_wg_kernel<DIM, true> : dsv4_ik_wg_kernel<DIM, false>;
    if constexpr (F == DSV4_CUDA_IK_FP8)
        if (q8)
            return dsv4_ik_score_kernel<F, DIM, true>;
    return dsv4_ik_score_kernel<F, DIM, false>;
}

/* bf16 keys, and fp8 keys with an e4m3 query, on the tensor-map kernel: sm_90a device code,
 * dim 128, whole 64-row boxes (fp8 keys with the f32 query there, as two or three e4m3 query
 * terms, were slower than the wgmma kernel at 128k and 1M,
 * bench/results/2026-11-30-indexer-h200.md). */
template <dsv4_cuda_ik_format F, int DIM>
static bool ik_tm_shape(const ik_device *d, uint32_t rpp, const dsv4_cuda_ik_batch *bt)
{
    const bool keys =
        F == DSV4_CUDA_IK_BF16 || (F == DSV4_CUDA_IK_FP8 && bt->query != DSV4_CUDA_IK_QUERY_F32);
    return keys && DIM == 128 && d->wgmma != 0 && rpp % 64 == 0;
}

template <dsv4_cuda_ik_format F, int DIM> static void ik_device_setup(ik_device *d, int dev)
{
    d->wgmma = 0;
    d->rc = dsv4_cuda_status(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev));
    if (d->rc == 0 && F != DSV4_CUDA_IK_F32)
        d->rc = dsv4_cuda_status(cudaMemcpyFromSymbol(&d->wgmma, ik_wgmma_built, sizeof d->wgmma));
    for (int q8 = 0; q8 <= (F == DSV4_CUDA_IK_FP8) && d->rc == 0; q8++)
        d->rc = dsv4_cuda_status(cudaFuncSetAttribute(ik_kernel<F, DIM>(d->wgmma != 0, q8),
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      (int)IK_SMEM_MAX));
    if constexpr (DIM == 128 && F != DSV4_CUDA_IK_F32)
        if (d->rc == 0 && d->wgmma)
            d->rc = dsv4_cuda_status(cudaFuncSetAttribute(
                dsv4_ik_tm_kernel<F == DSV4_CUDA_IK_FP8, DIM>,
                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)IK_SMEM_MAX));
}

/* Blocks per multiprocessor of kernel (of kind IK_PLAIN, IK_TM or IK_Q8) at this size, read
 * once per page size and kind. */
template <typename K>
static int ik_per_sm(ik_device *d, uint32_t rpp, int kind, K kernel, uint32_t threads, size_t smem,
                     int *per_sm_p)
{
    std::atomic<int> &slot = d->per_sm[kind][rpp / 8 - 1];
    int per_sm = slot.load(std::memory_order_relaxed);
    if (per_sm == 0) {
        int rc = dsv4_cuda_status(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
        if (rc != 0)
            return rc;
        if (per_sm < 1)
            per_sm = 1;
        slot.store(per_sm, std::memory_order_relaxed);
    }
    *per_sm_p = per_sm;
    return 0;
}

/* At most one wave of blocks, the same whole number of them for every query (dividing
 * the batch's pages by the wave could leave a second, short wave: bf16 128k x 64 read
 * 70% of the ceiling that way, 78% this way, bench/results/2026-11-29-indexer-h200-f.md),
 * at least two pages per block so the query is loaded for more than one page, at most
 * IK_MAX_PPB: longer runs of pages were slower (a bf16 step of 1M x 32 read 73% of the
 * ceiling at 497 pages a block, 83% at 124; bench/results/2026-11-29-indexer-h200-e.md). */
static dim3 ik_grid(const ik_device *d, int per_sm, uint32_t rpp, const dsv4_cuda_ik_batch *bt,
                    uint32_t *ppb_p)
{
    const uint64_t max_pages = (bt->max_rows + rpp - 1) / rpp;
    const uint64_t wave = (uint64_t)per_sm * (uint64_t)d->sms;
    const uint64_t per_query = wave / bt->n_queries > 0 ? wave / bt->n_queries : 1;
    uint64_t ppb = (max_pages + per_query - 1) / per_query;
    if (ppb < 2)
        ppb = 2;
    if (ppb > IK_MAX_PPB)
        ppb = IK_MAX_PPB;
    *ppb_p = (uint32_t)ppb;
    return dim3((unsigned)((max_pages + ppb - 1) / ppb), bt->n_queries);
}

/* cuTensorMapEncodeTiled from the driver, found through the runtime (nothing more linked). */
static PFN_cuTensorMapEncodeTiled_v12000 ik_encode;
static void ik_encode_find(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        ik_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
}

/* The tensor-map kernel's launch, or -ENOTSUP where it does not apply (no encoder in the
 * driver, a pool it cannot map, pages too large for two stages). */
template <dsv4_cuda_ik_format F, int DIM>
static int ik_launch_tm(ik_device *d, uint32_t rpp, const void *pool, const dsv4_cuda_ik_batch *bt,
                        float *scores, cudaStream_t stream)
{
    using fmt = ik_fmt<F>;
    constexpr bool f8 = F == DSV4_CUDA_IK_FP8;
    static std::once_flag once;
    std::call_once(once, ik_encode_find);
    if (!ik_encode)
        return -ENOTSUP;
    /* the pool as pages of rpp rows of DIM values (then fp8 row scales), page ids up to
     * 2^31; a stage's keys (whole 1024-byte swizzle atoms) from a 1024-aligned address on,
     * its row scales apart */
    const uint32_t row_bytes = DIM * fmt::elem, page_bytes = rpp * (row_bytes + fmt::scale_bytes);
    const uint32_t head = IK_FEED_BYTES + IK_TM_PART_BYTES + 1024u;
    uint32_t stages = ((228u * 1024u) / IK_TM_BLOCKS - 1024u - head) / page_bytes;
    if (stages > IK_MAX_STAGES)
        stages = IK_MAX_STAGES;
    if (stages < 2)
        return -ENOTSUP;
    CUtensorMap map;
    const cuuint64_t dims[3] = {DIM, rpp, (cuuint64_t)1 << 31};
    const cuuint64_t strides[2] = {row_bytes, page_bytes};
    const cuuint32_t box[3] = {128u / fmt::elem, 64, 1}, estr[3] = {1, 1, 1};
    if (ik_encode(&map, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                  (void *)pool, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return -ENOTSUP;
    const size_t smem = head + (size_t)stages * page_bytes;
    int per_sm, rc = ik_per_sm(d, rpp, IK_TM, dsv4_ik_tm_kernel<f8, DIM>, 128, smem, &per_sm);
    if (rc != 0)
        return rc;
    uint32_t ppb;
    const dim3 grid = ik_grid(d, per_sm, rpp, bt, &ppb);
    return dsv4_pdl_launch(dsv4_ik_tm_kernel<f8, DIM>, grid, 128, smem, stream, map,
                           (const uint8_t *)pool, page_bytes, rpp, stages, ppb, *bt, scores);
}

template <dsv4_cuda_ik_format F, int DIM>
static int ik_launch(uint32_t rpp, const void *pool, const dsv4_cuda_ik_batch *bt, float *scores,
                     cudaStream_t stream)
{
    using fmt = ik_fmt<F>;
    static std::once_flag once[DSV4_CUDA_MAX_DEVICES];
    static ik_device devices[DSV4_CUDA_MAX_DEVICES];
    int dev, rc = dsv4_cuda_once_per_device(
                 once, [](int i) { ik_device_setup<F, DIM>(&devices[i], i); }, &dev);
    if (rc != 0)
        return rc;
    ik_device *d = &devices[dev];
    if (d->rc != 0)
        return d->rc;
    if constexpr (DIM == 128 && F != DSV4_CUDA_IK_F32)
        if (ik_tm_shape<F, DIM>(d, rpp, bt)) {
            rc = ik_launch_tm<F, DIM>(d, rpp, pool, bt, scores, stream);
            if (rc != -ENOTSUP)
                return rc;
        }
    const bool wg = d->wgmma != 0 && ik_wg_format<F>();
    const bool q8 = F == DSV4_CUDA_IK_FP8 && bt->query != DSV4_CUDA_IK_QUERY_F32;
    const ik_kernel_fn kernel = ik_kernel<F, DIM>(wg, q8);
    const uint32_t threads = wg ? 128u : (uint32_t)fmt::threads;
    const uint32_t head = wg ? IK_FEED_BYTES + IK_WG_QUERY_BYTES : IK_HEAD_BYTES;
    const uint32_t page_bytes = rpp * (DIM * fmt::elem + fmt::scale_bytes);
    uint32_t stages = (IK_SMEM_MAX - head) / page_bytes;
    if (stages > (wg ? IK_WG_FP8_STAGES : (uint32_t)fmt::stages))
        stages = wg ? IK_WG_FP8_STAGES : fmt::stages;
    if (stages < 2)
        return -ENOTSUP; /* two pages must fit: one read while the next one lands */
    const size_t smem = head + (size_t)stages * page_bytes;
    int per_sm;
    rc = ik_per_sm(d, rpp, q8 ? IK_Q8 : IK_PLAIN, kernel, threads, smem, &per_sm);
    if (rc != 0)
        return rc;
    uint32_t ppb;
    const dim3 grid = ik_grid(d, per_sm, rpp, bt, &ppb);
    return dsv4_pdl_launch(kernel, grid, threads, smem, stream, (const uint8_t *)pool, page_bytes,
                           rpp, stages, ppb, *bt, scores);
}

template <dsv4_cuda_ik_format F>
static int ik_launch_dim(uint32_t dim, uint32_t rpp, const void *pool, const dsv4_cuda_ik_batch *bt,
                         float *scores, cudaStream_t stream)
{
    switch (dim) {
    case 64: return ik_launch<F, 64>(rpp, pool, bt, scores, stream);
    case 128: return ik_launch<F, 128>(rpp, pool, bt, scores, stream);
    default: return -ENOTSUP;
    }
}

extern "C" int dsv4_cuda_indexer_score(dsv4_cuda_ik_format format, uint32_t dim,
                                       uint32_t rows_per_page, const void *pool_dev,
                                       const dsv4_cuda_ik_batch *batch, float *scores_dev,
                                       void *stream)
{
    if (!batch)
        return -EINVAL;
    if (batch->n_queries == 0 || batch->max_rows == 0)
        return 0;
    if (!pool_dev || !scores_dev || !batch->pages_dev || !batch->page_start_dev ||
        !batch->n_rows_dev || !batch->q_dev || !batch->w_dev || batch->n_heads == 0)
        return -EINVAL;
    if (batch->query != DSV4_CUDA_IK_QUERY_F32 && format != DSV4_CUDA_IK_FP8)
        return -EINVAL; /* an e4m3 query is the fp8 plugin's option */
    if (batch->n_heads > IK_HEADS || rows_per_page == 0 || rows_per_page % 8 ||
        rows_per_page > IK_MAX_RPP || batch->n_queries > 65535)
        return -ENOTSUP;
    cudaStream_t s = (cudaStream_t)stream;
    switch (format) {
    case DSV4_CUDA_IK_F32:
        return ik_launch_dim<DSV4_CUDA_IK_F32>(dim, rows_per_page, pool_dev, batch, scores_dev, s);
    case DSV4_CUDA_IK_BF16:
        return ik_launch_dim<DSV4_CUDA_IK_BF16>(dim, rows_per_page, pool_dev, batch, scores_dev, s);
    case DSV4_CUDA_IK_FP8:
        return ik_launch_dim<DSV4_CUDA_IK_FP8>(dim, rows_per_page, pool_dev, batch, scores_dev, s);
    }
    return -EINVAL;
}
