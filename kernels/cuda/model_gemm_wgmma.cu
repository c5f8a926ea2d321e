/* model_gemm_wgmma.cu: the GEMM of BF16 weights on wgmma (sm_90a), weights and inputs
 * streamed into shared memory by TMA tensor-map copies, for the linear layers of
 * model_gemm.cu; its rows, k splits and sums are the mma.sync kernel's (model_gemm.cuh). */
#include "kernels/cuda/evict_first.cuh"
#include "kernels/cuda/model_gemm.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/status.cuh"

/* 1 in device code built with wgmma (sm_90a): dsv4_wg_encoder reads it */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ int dsv4_wg_built = 1;
#else
static __device__ int dsv4_wg_built = 0;
#endif

PFN_cuTensorMapEncodeTiled_v12000 dsv4_wg_encoder(void)
{
    int built = 0;
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
    if (cudaMemcpyFromSymbol(&built, dsv4_wg_built, sizeof(built)) == cudaSuccess && built &&
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    cudaGetLastError();
    return encode;
}

/* ---- wgmma (sm_90a) for BF16 weights -------------------------------------------------------
 *
 * A block is one or two warpgroups of four consumer warps and a producer warp. A warpgroup owns
 * one or two (MT) output tiles of WG_OUT = 64 outputs (wgmma's M: the weights are A), the block
 * a tile of NT rows; the producer streams each k block of 64 inputs of the weight tiles (8 KiB
 * a tile, one 128-byte row a weight row, in the 128-byte swizzle wgmma reads) and of the rows'
 * inputs (f32) from memory into a ring of shared-memory stages by TMA tensor-map copies that
 * complete on the stage's mbarrier, so a block keeps the whole ring in flight without registers
 * or load latency on the consumers' path. The consumers split a stage's inputs into bf16 hi and
 * lo (as the mma.sync kernel does) and store them as B, hi as columns 0 .. NT - 1 and lo as
 * columns NT .. 2 NT - 1 of one m64n(2 NT)k16 MMA per 16 inputs, so a row's hi and lo sums
 * build in separate accumulators over the k blocks of its split in ascending order and are
 * added (hi + lo) at the split's end. A launch of enough rows (dsv4_wg_split_once) splits its
 * inputs once instead (dsv4_wg_split_kernel, the same bits, into the handle's split buffer;
 * a launch may find them written there by the kernel that made them:
 * dsv4_cuda_linear_grouped_split, dsv4_cuda_linear_split), and the producer loads each stage's
 * B as it is, in the swizzle, so the consumers only wait for a stage and run its MMAs; every
 * output tile would otherwise split the same inputs again. The splits' sums are then added in
 * split order as the mma.sync kernel adds them (in registers, or by dsv4_mma_sum_kernel). An
 * output's bits therefore depend on its weight row, its input row and the split (fixed by the
 * weight's shape in deterministic mode), provided a wgmma column's sums do not depend on N, on
 * the column or on the warpgroup: the GEMM test checks that bitwise (rows at every position of
 * tiles of 8 .. 64, one and two warpgroups, one and two output tiles a warpgroup).
 * A warpgroup of two tiles (dsv4_wg_pair) runs their MMAs interleaved against the stage's
 * one B, two independent accumulator chains, so the block reads B from L2 once per 256
 * outputs rather than 128. That gains at 32, 128 and 256 rows (H200: 0.80-0.96x the time of
 * the layers it takes) but not at 64 rows (0.97-1.02x): there B's traffic is not what holds
 * the mid-size layers, and sharing B further across a cluster of two blocks by TMA
 * multicast (each loading half for both) took 1.2-1.5x the time. */
#define WG_KB 64 /* inputs a stage: one 128-byte swizzle row of bf16 */
/* warpgroups a block from tiles of 32 rows: two share the inputs' tile, so the block reads
 * 4 bytes of inputs per 4 of weights where one would read 8 */
#define WG_WIDE 2
/* output tiles a warpgroup of a two-warpgroup block takes where the launch has blocks to
 * spare (dsv4_wg_pair), the block's B shared by all of them */
#define WG_PAIR 2
/* k blocks from which a unit alone in its block keeps the block streaming (dsv4_wg_pair) */
#define WG_PAIR_KB 32
#define WG_A_BYTES (WG_OUT * WG_KB * 2) /* a warpgroup's weights of a stage (one output tile) */

/* A block of WGS warpgroups of MT output tiles (WGS x MT x 64 outputs sharing the inputs'
 * tile of NT rows) and the producer warp. A stage holds the weights (A), the inputs as loaded
 * (f32, NT rows of WG_KB; none where they come split, PRE) and as B (hi and lo bf16). One
 * warpgroup: about 80-100 KiB of ring a block, two blocks a multiprocessor; two (their
 * accumulators take the registers of two blocks): about 192 KiB, one block (two tiles a
 * warpgroup at 64 rows: 4 stages of 48 KiB split once, 3 of 64 KiB else; 166-168
 * registers). */
template <uint32_t NT, uint32_t WGS, uint32_t MT, bool PRE> struct dsv4_wg_shape {
    static constexpr uint32_t threads = 128 * WGS + 32;
    static constexpr uint32_t a_bytes = WGS * MT * WG_A_BYTES;
    static constexpr uint32_t b_bytes = 2 * NT * WG_KB * 2;
    static constexpr uint32_t x_bytes = PRE ? 0 : NT * WG_KB * 4;
    static constexpr uint32_t stage_bytes = a_bytes + b_bytes + x_bytes;
    static constexpr uint32_t ring = (WGS == 1 ? 96 : 192) * 1024;
    static constexpr uint32_t stages = ring / stage_bytes > 8 ? 8 : ring / stage_bytes;
    /* a slot's B is stored while the two stages before it may still be read */
    static_assert(stages >= 3, "the wgmma ring needs three stages");
    static_assert(stage_bytes % 1024 == 0, "stages keep the swizzle's 1024-byte alignment");
    /* the ring (1024-byte aligned for the swizzle), then 2 mbarriers a stage */
    static constexpr uint32_t smem = 1024 + stages * stage_bytes + stages * 16;
};

/* the device helpers of the wgmma kernel, compiled where its body is (sm_90a) */
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* A K-major operand of rows of 64 bf16 in 128-byte swizzle (8-row atoms of 1024 bytes,
 * the next atom along M or N 1024 bytes on); the k-th 16 inputs start 32 k bytes in. */
__device__ static inline uint64_t dsv4_wg_desc(uint32_t addr)
{
    return (uint64_t)((addr >> 4) & 0x3fffu) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 |
           (uint64_t)1 << 62;
}

__device__ static inline void dsv4_wg_mma16(float (&d)[8], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "%8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7])
                 : "l"(a), "l"(b));
}

__device__ static inline void dsv4_wg_mma32(float (&d)[16], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(a), "l"(b));
}

__device__ static inline void dsv4_wg_mma64(float (&d)[32], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b));
}

__device__ static inline void dsv4_wg_mma128(float (&d)[64], uint64_t a, uint64_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                   "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                   "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b));
}

template <uint32_t NT>
__device__ static inline void dsv4_wg_mma(float (&d)[NT], uint64_t a, uint64_t b)
{
    if constexpr (NT == 8)
        dsv4_wg_mma16(d, a, b);
    else if constexpr (NT == 16)
        dsv4_wg_mma32(d, a, b);
    else if constexpr (NT == 32)
        dsv4_wg_mma64(d, a, b);
    else
        dsv4_wg_mma128(d, a, b);
}

/* Keeps the compiler from moving accumulator uses across the asynchronous MMAs. */
template <uint32_t M, uint32_t N> __device__ static inline void dsv4_wg_fence(float (&d)[M][N])
{
#pragma unroll
    for (uint32_t m = 0; m < M; m++)
#pragma unroll
        for (uint32_t i = 0; i < N; i++)
            asm volatile("" : "+f"(d[m][i])::"memory");
}

/* A stage's B from the split inputs (dsv4_wg_split_kernel): k block kb of the NT rows from
 * row tr (of the launch's) of problem xg, hi then lo, on the stage's full barrier. */
__device__ static inline void dsv4_wg_load_hl(const CUtensorMap *m, uint32_t dst, uint32_t kb,
                                              uint32_t tr, int xg, uint32_t full)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((uint64_t)m), "r"((int)(kb * WG_KB)), "r"((int)tr), "r"(0), "r"(xg), "r"(full)
                 : "memory");
}

/* The k blocks [kbeg, kend) of split s of a weight of kbs k blocks. */
__device__ static inline void dsv4_wg_split(uint32_t s, uint32_t ksplit, size_t kbs, size_t *kbeg_p,
                                            size_t *kend_p)
{
    *kbeg_p = s * kbs / ksplit;
    *kend_p = (s + 1) * kbs / ksplit;
}
#endif

/* The tensor maps of a wgmma launch: the weights [mats out][in] in boxes of WG_OUT rows x
 * WG_KB inputs (128-byte swizzle); the inputs as 3-D (input, row, problem) or, where the
 * problems interleave rows (x_batch < x_stride), (input, problem, row), in boxes of NT rows
 * x WG_KB inputs (rows past the last read as zeros). */
struct dsv4_wg_maps {
    CUtensorMap w, x;
    uint32_t x_rows_inner; /* the inputs' dims: 0 (input, row, problem), 1 (input, problem, row) */
};

/* Split once (PRE): the inputs of rows w0 .. w1 as [problem][hi, lo][w1 - w0][in] bf16
 * (dsv4_mma_split's bits), read as (input, row, hi|lo, problem) in boxes of WG_KB inputs x
 * NT rows x both halves in the 128-byte swizzle: a stage's B as the consumers would store
 * it, hi as columns 0 .. NT - 1 and lo as NT .. 2 NT - 1. With y set, the same launch zeroes
 * those rows of Y (row w0's address; out outputs a row, problems yz apart) for fast mode's
 * split-K atomics: one kernel boundary a launch fewer (H200, a 4-layer flash-shape step at
 * 64 rows: 18 -> 7 zeroing launches, decode 1.01-1.02x). */
__global__ static void dsv4_wg_split_kernel(const float *__restrict__ x, size_t xs, size_t xz,
                                            size_t in, uint32_t w0, uint32_t rows,
                                            uint2 *__restrict__ hl, float *y, size_t out, size_t ys,
                                            size_t yz)
{
    dsv4_pdl_begin();
    if (y)
        dsv4_mma_zero_rows(y, out, rows, ys, yz);
    size_t recs = (size_t)rows * (in / 4), p = blockIdx.y;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < recs;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (in / 4), q = i % (in / 4);
        dsv4_split_store(hl + 2 * p * recs, rows, in, r, q,
                         *(const float4 *)(x + p * xz + (w0 + r) * xs + 4 * q));
    }
}

/* The blocks of dsv4_mma_kernel's launch (x: split x % kgrid and row tiles x / kgrid, ...;
 * y: output tiles of WGS x WG_OUT; z: groups) that a wgmma launch walks as units: unit u is
 * block (u % xs, u / xs % ys, u / (xs ys)), block b of the launch takes units b, b +
 * gridDim.x, ... (persistent where the grid is smaller than the units: a block's producer
 * streams its next unit's k blocks while the consumers finish the last, the ring drained
 * once a launch rather than once a unit). */
struct dsv4_wg_units {
    uint32_t xs, ys, zs;
};

/* Y = W X for BF16 weights over the units of U, the same sums written the same ways. */
template <uint32_t NT, uint32_t WGS, uint32_t MT, bool WHOLE, bool PRE>
__global__ static void __launch_bounds__(128 * WGS + 32, WGS == 1 ? 2 : 1)
    dsv4_wg_kernel(const __grid_constant__ dsv4_wg_maps tm, size_t out, size_t in, dsv4_mma_rows R,
                   dsv4_wg_units U, float *__restrict__ y, size_t ys, size_t yz)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = dsv4_wg_shape<NT, WGS, MT, PRE>;
    constexpr uint32_t CT = 128 * WGS; /* consumer threads */
    extern __shared__ uint8_t dsv4_wg_smem[];
    uint8_t *ring = (uint8_t *)(((uintptr_t)dsv4_wg_smem + 1023) & ~(uintptr_t)1023);
    uint32_t ring_addr = dsv4_smem_addr(ring);
    uint32_t full0 = ring_addr + S::stages * S::stage_bytes, empty0 = full0 + 8 * S::stages;
    uint32_t tid = threadIdx.x, units = U.xs * U.ys * U.zs;
    if (tid == 0) {
        for (uint32_t s = 0; s < S::stages; s++) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(full0 + 8 * s)
                         : "memory");
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(empty0 + 8 * s),
                         "r"(4 * WGS)
                         : "memory");
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    size_t kbs = in / WG_KB;
    uint32_t sn = WHOLE ? R.ksplit : 1, tstep = U.xs / R.kgrid * NT;
    if (tid >= CT) {
        /* the producer: one lane walks the same units, tiles, splits and k blocks as the
         * consumers, each stage's weights and inputs completing on its full barrier. The first
         * ring's weights are loaded before the kernels before this one have completed (they
         * write no weight: pdl.cuh), the rest once they have; a grouped launch's rows (R.off)
         * are one of their outputs, so it waits first. */
        if (tid != CT)
            return;
        /* stage(it, kb, row, tr, xg) for each stage it < stop of the walk; returns the stages */
        auto walk = [&](uint32_t stop, auto &&stage) {
            uint32_t it = 0;
            for (uint32_t u = blockIdx.x; u < units; u += gridDim.x) {
                uint32_t bx = u % U.xs, g = u / U.xs / U.ys, s0 = bx % R.kgrid;
                uint32_t lo = R.off && R.off[g] > R.w0 ? R.off[g] : R.w0;
                uint32_t hi = R.off && R.off[g + 1] < R.w1 ? R.off[g + 1] : R.w1;
                int row = (int)(g * out + (size_t)(u / U.xs % U.ys) * WGS * MT * WG_OUT);
                int xg = R.off ? 0 : (int)g;
                for (uint32_t tr = lo + bx / R.kgrid * NT; tr < hi; tr += tstep)
                    for (uint32_t si = 0; si < sn; si++) {
                        size_t kbeg, kend;
                        dsv4_wg_split(WHOLE ? si : s0, R.ksplit, kbs, &kbeg, &kend);
                        for (size_t kb = kbeg; kb < kend; kb++, it++) {
                            if (it == stop)
                                return it;
                            stage(it, kb, row, tr, xg);
                        }
                    }
            }
            return it;
        };
        const uint64_t w_policy = dsv4_evict_first(); /* the weights' lines (evict_first.cuh) */
        /* stage it's barrier armed for all its bytes, and its weights */
        auto load_w = [&](uint32_t it, size_t kb, int row) {
            uint32_t st = it % S::stages, full = full0 + 8 * st;
            uint32_t a = ring_addr + st * S::stage_bytes;
            if (it >= S::stages)
                dsv4_mbar_wait(empty0 + 8 * st, (it / S::stages - 1) & 1u);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full),
                         "r"(S::a_bytes + (PRE ? S::b_bytes : S::x_bytes))
                         : "memory");
#pragma unroll
            for (uint32_t w = 0; w < WGS * MT; w++)
                asm volatile(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                    "complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(
                        a + w * WG_A_BYTES),
                    "l"((uint64_t)&tm.w), "r"((int)(kb * WG_KB)), "r"(row + (int)(w * WG_OUT)),
                    "r"(full), "l"(w_policy)
                    : "memory");
        };
        /* stage it's inputs */
        auto load_x = [&](uint32_t it, size_t kb, uint32_t tr, int xg) {
            uint32_t st = it % S::stages, full = full0 + 8 * st;
            uint32_t a = ring_addr + st * S::stage_bytes;
            if constexpr (PRE) {
                dsv4_wg_load_hl(&tm.x, a + S::a_bytes, (uint32_t)kb, tr - R.w0, xg, full);
            } else {
                int c1 = tm.x_rows_inner ? xg : (int)tr;
                int c2 = tm.x_rows_inner ? (int)tr : xg;
                asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::"
                             "complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                                 a + S::a_bytes + S::b_bytes),
                             "l"((uint64_t)&tm.x), "r"((int)(kb * WG_KB)), "r"(c1), "r"(c2),
                             "r"(full)
                             : "memory");
            }
        };
        uint32_t early =
            R.off ? 0 : walk(S::stages, [&](uint32_t it, size_t kb, int row, uint32_t, int) {
                load_w(it, kb, row);
            });
        dsv4_pdl_wait();
        walk(UINT32_MAX, [&](uint32_t it, size_t kb, int row, uint32_t tr, int xg) {
            if (it >= early)
                load_w(it, kb, row);
            load_x(it, kb, tr, xg);
        });
        return;
    }
    dsv4_pdl_begin();
    uint32_t it = 0;
    uint32_t warp = tid / 32, wg = tid / 128, gi = tid % 32 / 4, t = tid % 4;
    for (uint32_t u = blockIdx.x; u < units; u += gridDim.x) {
        uint32_t bx = u % U.xs, g = u / U.xs / U.ys, s0 = bx % R.kgrid;
        uint32_t lo = R.off && R.off[g] > R.w0 ? R.off[g] : R.w0;
        uint32_t hi = R.off && R.off[g + 1] < R.w1 ? R.off[g + 1] : R.w1;
        size_t o0 = (size_t)(u / U.xs % U.ys) * WGS * MT * WG_OUT + wg * MT * WG_OUT;
        float *yg = R.off ? y : y + (size_t)g * yz;
        for (uint32_t tr = lo + bx / R.kgrid * NT; tr < hi; tr += tstep) {
            uint32_t nr = hi - tr < NT ? hi - tr : NT;
            float tot[MT][NT / 2];
            float d[MT][NT];
            for (uint32_t si = 0; si < sn; si++) {
                size_t kbeg, kend;
                dsv4_wg_split(WHOLE ? si : s0, R.ksplit, kbs, &kbeg, &kend);
#pragma unroll
                for (uint32_t m = 0; m < MT; m++)
#pragma unroll
                    for (uint32_t i = 0; i < NT; i++)
                        d[m][i] = 0.0f;
                for (size_t kb = kbeg; kb < kend; kb++, it++) {
                    uint32_t st = it % S::stages;
                    uint8_t *a = ring + st * S::stage_bytes, *b = a + S::a_bytes;
                    dsv4_mbar_wait(full0 + 8 * st, (it / S::stages) & 1u);
                    if constexpr (!PRE) {
                        /* B: row r's inputs 4 q .. 4 q + 3 (record r * 16 + q of the inputs as
                         * loaded) as hi (row r) and lo (row NT + r), in the 16-byte chunk q / 2 of
                         * the row, swizzled by the row within its 8-row atom */
                        const float4 *xt = (const float4 *)(b + S::b_bytes);
#pragma unroll
                        for (uint32_t rec = tid; rec < NT * WG_KB / 4; rec += CT) {
                            uint32_t r = rec / (WG_KB / 4), q = rec % (WG_KB / 4);
                            uint4 v = dsv4_mma_split(xt[rec]);
                            uint32_t c = ((q / 2) ^ (r % 8)) * 16 + (q % 2) * 8;
                            *(uint2 *)(b + r * 128 + c) = make_uint2(v.x, v.y);
                            *(uint2 *)(b + (NT + r) * 128 + c) = make_uint2(v.z, v.w);
                        }
                        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                        asm volatile("bar.sync 1, %0;\n" ::"r"(CT) : "memory");
                    }
                    uint32_t a_addr = dsv4_smem_addr(a) + wg * MT * WG_A_BYTES,
                             b_addr = dsv4_smem_addr(b);
                    dsv4_wg_fence(d);
                    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
                    /* the tiles' MMAs interleaved: MT independent chains against one B */
#pragma unroll
                    for (uint32_t k = 0; k < WG_KB / 16; k++)
#pragma unroll
                        for (uint32_t m = 0; m < MT; m++)
                            dsv4_wg_mma<NT>(d[m], dsv4_wg_desc(a_addr + m * WG_A_BYTES + 32 * k),
                                            dsv4_wg_desc(b_addr + 32 * k));
                    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                    /* the previous stage's MMAs have read their A and B: the warp hands the slot
                     * back (this stage's run on while the next B is stored, in another slot: a
                     * slot's B is rewritten stages on) */
                    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                    dsv4_wg_fence(d);
                    if (kb > kbeg && tid % 32 == 0)
                        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
                                         empty0 + 8 * ((it - 1) % S::stages))
                                     : "memory");
                }
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                dsv4_wg_fence(d);
                if (kend > kbeg && tid % 32 == 0)
                    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(
                                     empty0 + 8 * ((it - 1) % S::stages))
                                 : "memory");
                    /* d[m][i]: the tile's output row 16 (warp % 4) + gi (+ 8 from (i / 2) odd),
                     * column 8 (i / 4) + 2 t + (i % 2); row r's hi is column r, its lo column
                     * NT + r: d[m][i + NT / 2] */
#pragma unroll
                for (uint32_t m = 0; m < MT; m++)
#pragma unroll
                    for (uint32_t i = 0; i < NT / 2; i++) {
                        float v = d[m][i] + d[m][i + NT / 2];
                        tot[m][i] = si ? tot[m][i] + v : v;
                    }
            }
#pragma unroll
            for (uint32_t m = 0; m < MT; m++)
#pragma unroll
                for (uint32_t i = 0; i < NT / 2; i++) {
                    size_t o = o0 + m * WG_OUT + 16 * (warp % 4) + gi + ((i / 2) % 2 ? 8 : 0);
                    uint32_t r = 8 * (i / 4) + 2 * t + i % 2;
                    if (o >= out || r >= nr)
                        continue;
                    if (R.part) {
                        size_t wn = R.w1 - R.w0, pstride = (size_t)(R.off ? 1 : U.zs) * wn * out;
                        float *part = R.part + (R.off ? 0 : (size_t)g * wn * out);
                        part[s0 * pstride + (size_t)(tr + r - R.w0) * out + o] = tot[m][i];
                    } else if (R.kgrid > 1) {
                        atomicAdd(&yg[(size_t)(tr + r) * ys + o], tot[m][i]);
                    } else {
                        yg[(size_t)(tr + r) * ys + o] = tot[m][i];
                    }
                }
        }
    }
#endif
}

/* The wgmma launch's tensor maps (dsv4_wg_maps): a BF16 weight of `mats` [out][in]
 * matrices and the inputs of `probs` problems of n rows (strides in elements), as f32 or,
 * split (hl set), as dsv4_wg_split_kernel wrote rows w0 .. n to hl. */
static int dsv4_wg_maps_make(const dsv4_cuda_blas *b, const void *w, size_t mats, size_t out,
                             size_t in, const float *x, size_t xs, size_t xz, uint32_t probs,
                             size_t w0, size_t n, const void *hl, uint32_t nt, dsv4_wg_maps *m_p)
{
    cuuint64_t wdims[2] = {in, mats * out}, wstrides[1] = {in * 2};
    cuuint32_t wbox[2] = {WG_KB, WG_OUT}, step[4] = {1, 1, 1, 1};
    CUresult r = b->encode(&m_p->w, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)w, wdims, wstrides,
                           wbox, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return -EINVAL;
    m_p->x_rows_inner = 0;
    if (hl) {
        /* rows past n read as zeros, as the f32 map's do */
        size_t rows = n - w0;
        cuuint64_t hdims[4] = {in, rows, 2, probs};
        cuuint64_t hstrides[3] = {in * 2, rows * in * 2, 2 * rows * in * 2};
        cuuint32_t hbox[4] = {WG_KB, nt, 2, 1};
        r = b->encode(&m_p->x, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)hl, hdims, hstrides,
                      hbox, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        return r == CUDA_SUCCESS ? 0 : -EINVAL;
    }
    /* one problem: a third dimension of one, past the n rows */
    bool inner = probs > 1 && xz < xs;
    size_t zs = probs > 1 ? xz : xs * n;
    cuuint64_t xdims[3] = {in, inner ? probs : n, inner ? n : probs};
    cuuint64_t xstrides[2] = {(inner ? zs : xs) * 4, (inner ? xs : zs) * 4};
    cuuint32_t xbox[3] = {WG_KB, inner ? 1 : nt, inner ? nt : 1};
    r = b->encode(&m_p->x, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)x, xdims, xstrides, xbox,
                  step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    m_p->x_rows_inner = inner;
    return r == CUDA_SUCCESS ? 0 : -EINVAL;
}

/* The launch shape by the rows a group holds (rows_each: the row count, or a grouped step's
 * average doubled; rows: the launch's): tiles of 8 .. 64 rows, two warpgroups a block from
 * 32 rows. */
static uint32_t dsv4_wg_tile(uint32_t rows_each, uint32_t rows)
{
    return rows_each <= 8 || rows <= 8 ? 8 : rows_each <= 16 ? 16 : rows_each <= 32 ? 32 : 64;
}

/* Whether a launch of `groups` problems or matrices of `out` outputs splits its inputs once
 * (dsv4_wg_split_kernel) rather than by each output tile: from tiles of 64 rows where 2048
 * outputs or more (16 tiles of 128) would each split them again, and past 64 rows a group
 * where the launch has 2048 outputs or more, the split bounding a stage. H200, same run:
 * 64 rows, head 362 -> 290 us, wq_b 33 -> 31, wo_b 38 -> 35-37, experts 61 -> 59
 * (deterministic); 128 and 256 rows 0.68-0.89x the time (8 wo_a 0.86-0.97x). A split of its
 * own cost 1-3 us more at 1 and 16 rows, at 64 rows of 1024 outputs (wq_a, wo_a), up to
 * 1 us at tiles of 32 rows but the head's and up to 2 us for wq_a's 1024 outputs at 128
 * and 256 rows. */
static bool dsv4_wg_split_once(uint32_t rows_each, size_t out, uint32_t groups)
{
    return rows_each > 32 && (out >= 2048 || (rows_each > 64 && out * groups >= 2048));
}

template <uint32_t NT, uint32_t WGS, uint32_t MT, bool PRE>
static int dsv4_wg_run_tiles(cudaStream_t st, const dsv4_wg_call &c, size_t out, size_t in,
                             const dsv4_mma_rows &R, uint32_t groups, uint32_t rows_each, float *y,
                             size_t ys, size_t yz)
{
    uint32_t tiles = (rows_each + NT - 1) / NT;
    size_t oblocks = (out + WGS * MT * WG_OUT - 1) / (WGS * MT * WG_OUT);
    dsv4_wg_units U = {(tiles < GEMM_ROW_SPLIT ? tiles : GEMM_ROW_SPLIT) * R.kgrid,
                       (uint32_t)oblocks, groups};
    size_t units = (size_t)U.xs * oblocks * groups;
    if (units > INT32_MAX)
        return -EINVAL;
    dsv4_wg_maps m;
    int rc = dsv4_wg_maps_make(c.b, c.w, groups, out, in, c.x, c.xs, c.xz, R.off ? 1 : groups, R.w0,
                               R.w1, PRE ? c.b->split : NULL, NT, &m);
    if (rc != 0)
        return rc;
    using S = dsv4_wg_shape<NT, WGS, MT, PRE>;
    /* blocks a multiprocessor holds at once (by the shared memory: both kernels alike) */
    static dsv4_gemm_once fit;
    int per_sm = 0;
    rc = dsv4_gemm_setup(
        fit,
        [](int *n_p) {
            if (cudaFuncSetAttribute(dsv4_wg_kernel<NT, WGS, MT, false, PRE>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)S::smem) != cudaSuccess ||
                (MT == 1 && cudaFuncSetAttribute(dsv4_wg_kernel<NT, WGS, 1, true, PRE>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)S::smem) != cudaSuccess) ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    n_p, dsv4_wg_kernel<NT, WGS, MT, false, PRE>, S::threads, S::smem) !=
                    cudaSuccess)
                return dsv4_cuda_launch_status();
            return *n_p < 1 ? -EINVAL : 0;
        },
        &per_sm);
    if (rc != 0)
        return rc;
    /* persistent (no more blocks than the GPU holds) where the units are a dense launch's
     * tiles each taking its whole k range, and tiles of one warpgroup (two blocks an SM)
     * take two units a block at most; k split by the grid and grouped rows (units without
     * rows, unevenly spread over the blocks) keep a block a unit. H200, same runs: wq_b
     * 0.90-0.94x the time at 1-256 rows, the head 0.93-0.97x at 256 rows; the head at one row
     * (2020 tiles of one warpgroup) 1.01-1.02x, grouped experts 1.3-1.6x at 64-256 rows, wo_b's
     * 8 splits by the grid 1.1x at 64 rows */
    size_t held = (size_t)c.b->sms * (uint32_t)per_sm;
    bool persist = R.kgrid == 1 && !R.off && units > held && (WGS > 1 || units <= 2 * held);
    unsigned grid = (unsigned)(persist ? held : units);
    return dsv4_pdl_launch(MT == 1 && R.kgrid == 1 && R.ksplit > 1
                               ? dsv4_wg_kernel<NT, WGS, 1, true, PRE>
                               : dsv4_wg_kernel<NT, WGS, MT, false, PRE>,
                           grid, S::threads, S::smem, st, m, out, in, R, U, y, ys, yz);
}

/* Whether a launch of tiles of NT rows (two warpgroups a block) gives each warpgroup two
 * output tiles against the block's B (256 outputs a block, WG_PAIR) rather than one: B's
 * bytes from L2 a weight byte halve and a warpgroup runs two MMA chains a stage, but the
 * launch has half the units, each twice the work. One tile where the blocks take their
 * splits in turn (the totals would double the accumulators' registers). Grouped rows pair
 * where a group's rows average more than one row tile (rows_each, the average doubled, over
 * two tiles): then a weight tile serves two or more row tiles, and pairing halves the
 * blocks that read it. H100, same run, 8 experts, top 6 (bench/gemm-stream, either mode):
 * 128 rows, gate|up 0.92x the time, down 0.90x; 256 rows 0.83x and 0.82x; decode (4-layer
 * flash shape) 1.01-1.05x at batch 128 and 256. At 64 rows (48 a group: a group's second
 * tile nearly empty) pairing took 1.03x (gate|up) and decode 0.95-0.98x: the launch's 128
 * units of twice the work balance worse on 132 multiprocessors than 256. Other launches pair
 * where the paired launch is still persistent (more units than blocks the GPU holds: each
 * SM streams units back to back either way), else where its waves of blocks (one an SM)
 * take no longer and, for a launch that unpaired would be persistent, a unit is long enough
 * (WG_PAIR_KB) that one a block leaves its ring's fill and drain little of the time. H200,
 * same run (bench/gemm-stream, two runs each): 128 rows 0.81-0.96x the time (wq_a, wq_b,
 * wo_b, the head; fast wo_a), 256 rows 0.80-0.94x (wq_a, wq_b, the head; fast wo_a, wo_b),
 * 32 rows 0.89-0.96x (wo_a, wo_b, the head), 64 rows 0.97-0.99x (wo_b, the head, fast wo_a)
 * and 1.02x (deterministic wo_a); wq_b's 16 k blocks at 64 rows paired (128 units on 132
 * SMs against 256 on a persistent grid) took 1.05x. */
static bool dsv4_wg_pair(const dsv4_wg_call &c, size_t out, size_t in, const dsv4_mma_rows &R,
                         uint32_t groups, uint32_t rows_each, uint32_t nt)
{
    if (R.kgrid == 1 && R.ksplit > 1)
        return false;
    if (R.off)
        return rows_each > 2 * nt;
    uint32_t tiles = (rows_each + nt - 1) / nt;
    size_t xs = (size_t)(tiles < GEMM_ROW_SPLIT ? tiles : GEMM_ROW_SPLIT) * R.kgrid * groups;
    size_t wide = WG_WIDE * WG_OUT, sms = c.b->sms;
    size_t one = xs * ((out + wide - 1) / wide),
           two = xs * ((out + WG_PAIR * wide - 1) / (WG_PAIR * wide));
    if (R.kgrid == 1 && two > sms)
        return true;
    return WG_PAIR * ((two + sms - 1) / sms) <= (one + sms - 1) / sms &&
           (R.kgrid > 1 || in / WG_KB >= WG_PAIR_KB);
}

template <bool PRE>
static int dsv4_wg_run_split(cudaStream_t st, const dsv4_wg_call &c, size_t out, size_t in,
                             const dsv4_mma_rows &R, uint32_t groups, uint32_t rows_each, float *y,
                             size_t ys, size_t yz)
{
    switch (dsv4_wg_tile(rows_each, R.w1 - R.w0)) {
    case 8: return dsv4_wg_run_tiles<8, 1, 1, PRE>(st, c, out, in, R, groups, rows_each, y, ys, yz);
    case 16:
        return dsv4_wg_run_tiles<16, 1, 1, PRE>(st, c, out, in, R, groups, rows_each, y, ys, yz);
    case 32:
        if (dsv4_wg_pair(c, out, in, R, groups, rows_each, 32))
            return dsv4_wg_run_tiles<32, WG_WIDE, WG_PAIR, PRE>(st, c, out, in, R, groups,
                                                                rows_each, y, ys, yz);
        return dsv4_wg_run_tiles<32, WG_WIDE, 1, PRE>(st, c, out, in, R, groups, rows_each, y, ys,
                                                      yz);
    default:
        if (dsv4_wg_pair(c, out, in, R, groups, rows_each, 64))
            return dsv4_wg_run_tiles<64, WG_WIDE, WG_PAIR, PRE>(st, c, out, in, R, groups,
                                                                rows_each, y, ys, yz);
        return dsv4_wg_run_tiles<64, WG_WIDE, 1, PRE>(st, c, out, in, R, groups, rows_each, y, ys,
                                                      yz);
    }
}

/* Fast mode's k split for a dense or batched launch of one row tile (up to 64 rows: each
 * weight byte is read once, the launch streams): the split whose waves of blocks take the
 * least time, a wave costing a split's k blocks plus WG_FILL_KB for its ring's fill and
 * drain, each split WG_MIN_SPLIT_KB k blocks or more. dsv4_mma_atomic's rule (blocks enough
 * to fill the GPU twice over, counted as 64 outputs and two a multiprocessor) split wo_b
 * (32 blocks of 128 outputs) 8 ways at 64 rows, two waves of the one block a multiprocessor
 * takes; this splits it 4 ways, one wave. H200, same run: wo_b and wo_a 0.89-0.91x the time
 * at 16-64 rows, wq_a 0.94x at 64; decode 1.02-1.04x at batch 4-64 (4- and 6-layer Flash
 * shapes). More row tiles keep that rule (wo_b at 128 and 256 rows: 1.02x and 1.08x the
 * time with this one). Returns 0 there. */
#define WG_FILL_KB 4
#define WG_MIN_SPLIT_KB 4
uint32_t dsv4_wg_stream_ksplit(const dsv4_wg_call &c, size_t out, size_t in, uint32_t groups,
                               uint32_t rows_each, uint32_t rows)
{
    uint32_t nt = dsv4_wg_tile(rows_each, rows), wide = nt >= 32 ? WG_WIDE : 1;
    if (rows_each > nt)
        return 0;
    size_t blocks = (out + wide * WG_OUT - 1) / (wide * WG_OUT) * groups;
    size_t held = (size_t)c.b->sms * (wide == 1 ? 2 : 1), kbs = in / WG_KB;
    uint32_t best = 1;
    size_t best_cost = SIZE_MAX;
    for (uint32_t ks = 1; ks == 1 || kbs / ks >= WG_MIN_SPLIT_KB; ks *= 2) {
        size_t cost = (blocks * ks + held - 1) / held * (kbs / ks + WG_FILL_KB);
        if (cost < best_cost)
            best = ks, best_cost = cost;
    }
    return best;
}

bool dsv4_wg_splits_inputs(size_t out, size_t in, uint32_t groups, uint32_t rows_each, size_t probs,
                           size_t rows)
{
    return dsv4_wg_split_once(rows_each, out, groups) &&
           probs * 2 * rows * in * 2 <= WG_SPLIT_BYTES;
}

int dsv4_wg_run(cudaStream_t st, const dsv4_wg_call &c, size_t out, size_t in,
                const dsv4_mma_rows &R, uint32_t groups, uint32_t rows_each, float *y, size_t ys,
                size_t yz)
{
    size_t probs = R.off ? 1 : groups, rows = R.w1 - R.w0;
    size_t zyz = R.off ? 0 : yz; /* the zeroing's problems: grouped rows are one block */
    float *zero = dsv4_mma_adds_to_y(R) ? y + (size_t)R.w0 * ys : NULL;
    if (!dsv4_wg_splits_inputs(out, in, groups, rows_each, probs, rows)) {
        int rc = c.x ? dsv4_mma_zero(st, R, y, out, ys, zyz, (uint32_t)probs) : -EINVAL;
        return rc != 0 ? rc
                       : dsv4_wg_run_split<false>(st, c, out, in, R, groups, rows_each, y, ys, yz);
    }
    /* no x: the kernel that wrote the inputs split them into the split buffer, rows from 0,
     * and zeroed Y's rows where the splits add into them (dsv4_cuda_linear_split) */
    int rc = c.x         ? dsv4_wg_split_inputs(st, c.x, c.xs, c.xz, in, R.w0, (uint32_t)rows,
                                                (uint32_t)probs, c.b->split, zero, out, ys, zyz)
             : R.w0 != 0 ? -EINVAL
                         : 0;
    return rc != 0 ? rc : dsv4_wg_run_split<true>(st, c, out, in, R, groups, rows_each, y, ys, yz);
}

int dsv4_wg_split_inputs(cudaStream_t st, const float *x, size_t xs, size_t xz, size_t in,
                         uint32_t w0, uint32_t rows, uint32_t probs, void *split, float *y,
                         size_t out, size_t ys, size_t yz)
{
    size_t recs = (size_t)rows * (in / 4);
    dim3 sg((unsigned)((recs + 255) / 256 < 1024 ? (recs + 255) / 256 : 1024), probs);
    return dsv4_pdl_launch(dsv4_wg_split_kernel, sg, 256, 0, st, x, xs, xz, in, w0, rows,
                           (uint2 *)split, y, out, ys, yz);
}
