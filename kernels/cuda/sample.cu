/* sample.cu: next-token choice on the device, dsv4_sample's semantics (sample.h).
 *
 * A drawing row needs no sort. Its candidates' weights are exact integers
 * (kernels/sample_weight.h), so the total, the top_p cut and the draw are sums and
 * selections in the candidates' order (the logit's key, then the id: the host's ranking)
 * that land where the host's walk down its ranked candidates lands, bit for bit, whatever
 * order the device adds in. One fixed sequence of launches for the whole batch:
 *   1. rows with 1 < top_k <= DSV4_CUDA_TOPK_MAX: the exact top-k selection (topk.cu, the
 *      host's order) ranks their candidates;
 *   2. over every multiprocessor: sp_first finds the first candidate (the best logit, the
 *      largest probability) of the greedy rows and the other drawing rows, sp_weigh the
 *      latter's probabilities and counts and weights by the top SP_L1_BITS bits of the order;
 *   3. sp_pick, one block per row: greedy rows take their first candidate; selected rows
 *      scan their ranked candidates' weights for the cut and the draw; the others select
 *      (sp_select) their top_k-th candidate by count when top_k cuts the vocabulary, then
 *      the top_p cut and the draw by weight: a selection takes its bin of the top bits from
 *      step 2's sums, narrows by SP_DIGIT_BITS more bits a pass over the row while more
 *      than SP_GATHER candidates share the prefix (ties and flat rows), gathers those, one
 *      a thread, and narrows them in shared memory to the one.
 * It replaced a device-wide radix sort of every such row, whose double sums in another
 * order than the host's could pick a neighbour at a rounding boundary. H100, 64 rows of
 * 129280 at top_p 0.95: 1020 -> 269 us (bench/results/2026-12-05-sample-integer-h100.md). */
#include "kernels/cuda/sample.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"
#include "kernels/sample_weight.h"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <stdlib.h>

#define SP_THREADS 1024
#define SP_L1_BITS 11 /* the order's top bits that sp_weigh sums by */
#define SP_L1 (1u << SP_L1_BITS)
#define SP_DIGIT_BITS 10 /* the bits a further pass narrows by */
#define SP_DIGITS (1u << SP_DIGIT_BITS)
#define SP_GATHER SP_THREADS /* candidates a selection gathers: one a thread */
#define SP_UNROLL 8          /* loads a sp_pick thread has in flight in a pass over a row */
#define SP_WIDE_THREADS 256
#define SP_WIDE_PER 16 /* candidates a sp_first or sp_weigh thread takes */

typedef unsigned long long u64; /* what CUDA's 64-bit atomics take */

struct dsv4_cuda_sampler {
    uint32_t max_rows, vocab;
    dsv4_cuda_sample_row *rows_dev;         /* [max_rows] */
    uint32_t *sel_rows_host, *sel_rows_dev; /* [max_rows]: vocab for a selected row, else 0 */
    uint32_t *sel_idx;  /* [max_rows * DSV4_CUDA_TOPK_MAX]: the selected rows' top-k */
    u64 *first;         /* [max_rows] each drawing row's first candidate */
    float *probs;       /* [max_rows * vocab] */
    uint32_t *l1_count; /* [max_rows * SP_L1] candidates by top bits */
    u64 *l1_weight;     /* [max_rows * SP_L1] their weights */
};

/* Greedy as dsv4_sample decides it. */
__host__ __device__ static inline bool sp_greedy(const dsv4_cuda_sample_row *p)
{
    return p->temperature <= 0 || p->top_k == 1;
}

__host__ __device__ static inline bool sp_draws(const dsv4_cuda_sample_row *p)
{
    return !p->skip && !sp_greedy(p);
}

/* Whether a drawing row's candidates come from the top-k selection (topk.cu, the host's
 * order): 1 < top_k <= DSV4_CUDA_TOPK_MAX, below the vocabulary. The others are ranked by
 * the selections below. */
__host__ __device__ static inline bool sp_selected(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return p->top_k > 1 && p->top_k <= DSV4_CUDA_TOPK_MAX && p->top_k < vocab;
}

__host__ __device__ static inline bool sp_ranked(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return sp_draws(p) && !sp_selected(p, vocab);
}

/* Whether sp_first finds a row's first candidate: a greedy row's token (the first in the
 * order is dsv4_sample's greedy choice, but where logits[0] is NaN) and a ranked row's
 * largest probability. */
__host__ __device__ static inline bool sp_needs_first(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return !p->skip && (sp_greedy(p) || !sp_selected(p, vocab));
}

/* Candidates of a drawing row: the top_k best, or the whole vocabulary. */
__device__ static inline uint32_t sp_k(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return p->top_k && p->top_k < vocab ? p->top_k : vocab;
}

/* The sort key of a logit: ascending keys are descending logits, -0 equals +0, NaN last. */
__device__ static inline uint32_t sp_key(float x)
{
    if (x != x)
        return UINT32_MAX;
    uint32_t u = x == 0.0f ? 0u : __float_as_uint(x);
    uint32_t asc = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~asc;
}

/* The logit back from its key (NaN for the NaN key). */
__device__ static inline float sp_value(uint32_t key)
{
    uint32_t asc = ~key;
    if (key == UINT32_MAX)
        return __uint_as_float(0x7fc00000u);
    return __uint_as_float((asc & 0x80000000u) ? (asc & 0x7fffffffu) : ~asc);
}

/* A candidate's place in the order, key then id: the key above the id's ib bits (the bits
 * of vocab - 1), 32 + ib bits in all. */
__device__ static inline u64 sp_order(float x, uint32_t id, uint32_t ib)
{
    return (u64)sp_key(x) << ib | id;
}

__device__ static inline uint32_t sp_id_bits(uint32_t vocab)
{
    return vocab > 1 ? 32 - __clz(vocab - 1) : 0;
}

struct sp_min_op {
    __device__ u64 operator()(const u64 &a, const u64 &b) const
    {
        return b < a ? b : a;
    }
};

/* Candidates [x0, x0 + SP_WIDE_THREADS SP_WIDE_PER) of row blockIdx.y, thread by thread. */
#define SP_WIDE_EACH(V, j)                                                                         \
    for (uint32_t u_ = 0, j = blockIdx.x * SP_WIDE_THREADS * SP_WIDE_PER + threadIdx.x;            \
         u_ < SP_WIDE_PER; u_++, j += SP_WIDE_THREADS)                                             \
        if (j < (V))

/* Step 2, first: first[r] = the least order of row r's candidates (first[] starts all ones). */
__global__ void __launch_bounds__(SP_WIDE_THREADS)
    sp_first(const float *logits, uint32_t vocab, const dsv4_cuda_sample_row *rows, u64 *first)
{
    typedef cub::BlockReduce<u64, SP_WIDE_THREADS> reduce;
    __shared__ typename reduce::TempStorage tmp;
    uint32_t r = blockIdx.y, ib = sp_id_bits(vocab);
    if (!sp_needs_first(&rows[r], vocab))
        return;
    const float *x = logits + (size_t)r * vocab;
    u64 least = ~0ull;
    SP_WIDE_EACH(vocab, j)
    {
        u64 o = sp_order(x[j], j, ib);
        least = o < least ? o : least;
    }
    least = reduce(tmp).Reduce(least, sp_min_op());
    if (threadIdx.x == 0)
        atomicMin(&first[r], least);
}

/* Step 2, then: row r's probabilities, and its counts and weights by the order's top bits (the
 * block's sums in shared memory first; l1_count and l1_weight start at zero). */
__global__ void __launch_bounds__(SP_WIDE_THREADS)
    sp_weigh(const float *logits, uint32_t vocab, const dsv4_cuda_sample_row *rows,
             const u64 *first, float *probs, uint32_t *l1_count, u64 *l1_weight)
{
    __shared__ uint32_t count[SP_L1];
    __shared__ u64 weight[SP_L1];
    uint32_t r = blockIdx.y, ib = sp_id_bits(vocab);
    dsv4_cuda_sample_row p = rows[r];
    if (!sp_ranked(&p, vocab))
        return;
    for (uint32_t b = threadIdx.x; b < SP_L1; b += SP_WIDE_THREADS)
        count[b] = 0, weight[b] = 0;
    __syncthreads();
    double max = sp_value((uint32_t)(first[r] >> ib));
    uint32_t shift = dsv4_sample_weight_shift(sp_k(&p, vocab));
    const float *x = logits + (size_t)r * vocab;
    float *prob = probs + (size_t)r * vocab;
    SP_WIDE_EACH(vocab, j)
    {
        float v = x[j], q = dsv4_sample_prob(v, max, p.temperature);
        uint32_t b = sp_key(v) >> (32 - SP_L1_BITS);
        prob[j] = q;
        atomicAdd(&count[b], 1u);
        atomicAdd(&weight[b], (u64)dsv4_sample_weight(q, shift));
    }
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < SP_L1; b += SP_WIDE_THREADS)
        if (count[b]) {
            atomicAdd(&l1_count[(size_t)r * SP_L1 + b], count[b]);
            atomicAdd(&l1_weight[(size_t)r * SP_L1 + b], weight[b]);
        }
}

/* What a drawing row's selections share in sp_pick's (dynamic) shared memory. */
struct sp_shared {
    uint32_t l1_count[SP_L1];
    u64 l1_weight[SP_L1]; /* the members' weights (the top_k candidates') */
    union {
        struct {
            uint32_t count[SP_DIGITS];
            u64 weight[SP_DIGITS];
        } digit;
        struct {
            u64 at[SP_GATHER], weight[SP_GATHER];
        } gather;
        cub::BlockScan<u64, SP_THREADS>::TempStorage scan;
        cub::BlockReduce<u64, SP_THREADS>::TempStorage reduce;
    } u;
    uint32_t bin, n, gathered;
    u64 below, at, weight; /* a bin's weight below it; a selection's result */
};

/* A drawing row as sp_pick's selections read it. */
struct sp_row {
    const float *x, *prob;
    uint32_t vocab, ib, nb; /* ib id bits, nb = 32 + ib bits of order */
    uint32_t shift;
    bool count; /* weigh every candidate 1 (else by its probability) */
    u64 bound;  /* members: the candidates at or before it in the order */
};

__device__ static inline u64 sp_member_weight(const sp_row &row, uint32_t j, u64 o)
{
    return o > row.bound ? 0 : row.count ? 1 : dsv4_sample_weight(row.prob[j], row.shift);
}

/* f(j, order, valid) for every candidate of the row, SP_UNROLL loads a thread in flight;
 * every thread of the block calls f the same number of times (f may use the warp). */
template <typename F> __device__ static void sp_each(const sp_row &row, F &&f)
{
    for (uint32_t base = 0; base < row.vocab; base += SP_THREADS * SP_UNROLL) {
        float v[SP_UNROLL];
#pragma unroll
        for (uint32_t u = 0; u < SP_UNROLL; u++) {
            uint32_t j = base + u * SP_THREADS + threadIdx.x;
            v[u] = j < row.vocab ? row.x[j] : 0.0f;
        }
#pragma unroll
        for (uint32_t u = 0; u < SP_UNROLL; u++) {
            uint32_t j = base + u * SP_THREADS + threadIdx.x;
            f(j, sp_order(v[u], j, row.ib), j < row.vocab);
        }
    }
}

/* The bin b < bins holding position t of the bins' weights w in order (the first whose
 * cumulative weight passes t): sh.bin, its count (of count) sh.n, the weight of the bins
 * before it sh.below. bins <= 2 SP_THREADS; every thread calls it. The arrays may share
 * the union with the scan's storage: they are read before it is written. */
template <typename W>
__device__ static void sp_find_bin(sp_shared &sh, const uint32_t *count, const W *w, uint32_t bins,
                                   u64 t)
{
    uint32_t per = bins > SP_THREADS ? 2 : 1, b0 = threadIdx.x * per, c[2];
    u64 v[2], mine = 0, below;
    __syncthreads(); /* the bins' sums are in */
    for (uint32_t i = 0; i < 2; i++) {
        bool in = i < per && b0 + i < bins;
        v[i] = in ? (u64)w[b0 + i] : 0;
        c[i] = in ? count[b0 + i] : 0;
        mine += v[i];
    }
    __syncthreads();
    cub::BlockScan<u64, SP_THREADS>(sh.u.scan).ExclusiveSum(mine, below);
    for (uint32_t i = 0; i < 2; i++) {
        if (below <= t && t < below + v[i]) {
            sh.bin = b0 + i;
            sh.n = c[i];
            sh.below = below;
        }
        below += v[i];
    }
    __syncthreads();
}

/* Zero the digit bins; every thread calls it after the last reads of the union. */
__device__ static void sp_digits_clear(sp_shared &sh)
{
    for (uint32_t b = threadIdx.x; b < SP_DIGITS; b += SP_THREADS)
        sh.u.digit.count[b] = 0, sh.u.digit.weight[b] = 0;
    __syncthreads();
}

/* The digit bin of d bits holding position *t of the digit bins' weights (sp_find_bin):
 * returned, its count in *n; the weight of the bins before it moves from *t to *below. */
__device__ static uint32_t sp_digits_find(sp_shared &sh, uint32_t d, u64 *t, u64 *below,
                                          uint32_t *n)
{
    sp_find_bin(sh, sh.u.digit.count, sh.u.digit.weight, 1u << d, *t);
    *n = sh.n;
    *below += sh.below;
    *t -= sh.below;
    return sh.bin;
}

/* The member at which the members' cumulative weight, in order, passes t (t below their
 * total): its order into sh.at, its weight sh.weight, the members' weight before it
 * sh.below. Every thread calls it. */
__device__ static void sp_select(sp_shared &sh, const sp_row &row, u64 t)
{
    if (row.count)
        sp_find_bin(sh, sh.l1_count, sh.l1_count, SP_L1, t);
    else
        sp_find_bin(sh, sh.l1_count, sh.l1_weight, SP_L1, t);
    u64 prefix = sh.bin, below = sh.below;
    uint32_t bits = SP_L1_BITS, n = sh.n; /* n: at least the members with the prefix */
    t -= below;
    while (n > SP_GATHER && bits < row.nb) { /* ties or a flat row: narrow by a digit */
        uint32_t d = min(SP_DIGIT_BITS, row.nb - bits), lo = row.nb - bits - d;
        sp_digits_clear(sh);
        sp_each(row, [&](uint32_t j, u64 o, bool valid) {
            if (valid && o >> (lo + d) == prefix && o <= row.bound) {
                uint32_t b = (uint32_t)(o >> lo) & ((1u << d) - 1);
                atomicAdd(&sh.u.digit.count[b], 1u);
                atomicAdd(&sh.u.digit.weight[b], sp_member_weight(row, j, o));
            }
        });
        prefix = prefix << d | sp_digits_find(sh, d, &t, &below, &n);
        bits += d;
    }
    /* the n <= SP_GATHER members with the prefix: one a thread, then narrowed by digits
     * of the bits below the prefix in shared memory until one is left */
    uint32_t rem = row.nb - bits, lane = threadIdx.x % 32;
    if (threadIdx.x == 0)
        sh.gathered = 0;
    __syncthreads();
    sp_each(row, [&](uint32_t j, u64 o, bool valid) {
        bool in = valid && o >> rem == prefix && o <= row.bound;
        uint32_t mask = __ballot_sync(0xffffffffu, in), base = 0;
        if (mask == 0)
            return;
        if (lane == 0)
            base = atomicAdd(&sh.gathered, (uint32_t)__popc(mask));
        base = __shfl_sync(0xffffffffu, base, 0);
        uint32_t slot = base + __popc(mask & ((1u << lane) - 1));
        if (in && slot < SP_GATHER) {
            sh.u.gather.at[slot] = o;
            sh.u.gather.weight[slot] = sp_member_weight(row, j, o);
        }
    });
    __syncthreads();
    n = min(sh.gathered, SP_GATHER);
    bool alive = threadIdx.x < n;
    u64 at = alive ? sh.u.gather.at[threadIdx.x] : 0,
        w = alive ? sh.u.gather.weight[threadIdx.x] : 0;
    while (n > 1 && rem > 0) {
        uint32_t d = min(SP_DIGIT_BITS, rem), b = 0;
        rem -= d;
        __syncthreads(); /* the gathered items (the digits' union) are read */
        sp_digits_clear(sh);
        if (alive) {
            b = (uint32_t)(at >> rem) & ((1u << d) - 1);
            atomicAdd(&sh.u.digit.count[b], 1u);
            atomicAdd(&sh.u.digit.weight[b], w);
        }
        uint32_t bin = sp_digits_find(sh, d, &t, &below, &n); /* every thread calls it */
        alive = alive && b == bin;
    }
    __syncthreads(); /* every thread has read the last bin's sh.below */
    if (alive) {
        sh.at = at;
        sh.weight = w;
        sh.below = below;
    }
    __syncthreads();
}

/* The members' weight at the order's top bin b: the candidates there at or before the
 * bound (every thread calls it). */
__device__ static u64 sp_weight_at_bin(sp_shared &sh, const sp_row &row, uint32_t b)
{
    uint32_t lo = row.nb - SP_L1_BITS;
    u64 mine = 0;
    sp_each(row, [&](uint32_t j, u64 o, bool valid) {
        if (valid && o >> lo == b)
            mine += sp_member_weight(row, j, o);
    });
    u64 sum = cub::BlockReduce<u64, SP_THREADS>(sh.u.reduce).Sum(mine);
    if (threadIdx.x == 0)
        sh.weight = sum;
    __syncthreads();
    return sh.weight;
}

/* A drawing row's token (p its request, first its first candidate's order): the top_k-th
 * candidate bounds the members, whose weight at the top bins is then the sums of step 2
 * up to the bound's bin; the cut and the draw select among them as dsv4_sample's walks. */
__device__ static int32_t sp_draw_row(sp_shared &sh, sp_row &row, const dsv4_cuda_sample_row &p,
                                      const uint32_t *l1_count, const u64 *l1_weight, u64 first)
{
    for (uint32_t b = threadIdx.x; b < SP_L1; b += SP_THREADS)
        sh.l1_count[b] = l1_count[b], sh.l1_weight[b] = l1_weight[b];
    __syncthreads();
    uint32_t k = sp_k(&p, row.vocab), lo = row.nb - SP_L1_BITS;
    u64 id_mask = (1ull << row.ib) - 1;
    if (k < row.vocab) {
        row.count = true;
        sp_select(sh, row, k - 1);
        row.count = false;
        row.bound = sh.at;
        uint32_t b = (uint32_t)(row.bound >> lo);
        u64 at_bound = sp_weight_at_bin(sh, row, b);
        for (uint32_t i = threadIdx.x; i < SP_L1; i += SP_THREADS)
            sh.l1_weight[i] = i < b ? sh.l1_weight[i] : i == b ? at_bound : 0;
        __syncthreads();
    }
    u64 mine = 0;
    for (uint32_t b = threadIdx.x; b < SP_L1; b += SP_THREADS)
        mine += sh.l1_weight[b];
    u64 total = cub::BlockReduce<u64, SP_THREADS>(sh.u.reduce).Sum(mine);
    if (threadIdx.x == 0)
        sh.weight = total;
    __syncthreads();
    total = sh.weight;
    if (total == 0) /* the best logit is infinite or NaN: dsv4_sample takes the first */
        return (int32_t)(first & id_mask);
    u64 cut = dsv4_sample_cut(total, p.top_p), kept = total;
    if (cut < total) {
        sp_select(sh, row, cut - 1);
        kept = sh.below + sh.weight;
    }
    sp_select(sh, row, dsv4_sample_target(p.draw, kept));
    return (int32_t)(sh.at & id_mask);
}

/* A selected row's token: its top_k candidates come ranked (idx), two a thread, so the cut
 * and the draw are a scan of their weights. */
__device__ static int32_t sp_draw_selected(sp_shared &sh, const float *x, const uint32_t *idx,
                                           const dsv4_cuda_sample_row &p)
{
    uint32_t k = p.top_k, shift = dsv4_sample_weight_shift(k), j0 = 2 * threadIdx.x;
    double max = x[idx[0]];
    u64 w[2], mine = 0, below, total;
    for (uint32_t i = 0; i < 2; i++) {
        w[i] = j0 + i < k
                   ? dsv4_sample_weight(dsv4_sample_prob(x[idx[j0 + i]], max, p.temperature), shift)
                   : 0;
        mine += w[i];
    }
    cub::BlockScan<u64, SP_THREADS>(sh.u.scan).ExclusiveSum(mine, below, total);
    if (total == 0) /* the best logit is infinite or NaN: dsv4_sample takes the first */
        return (int32_t)idx[0];
    u64 cut = dsv4_sample_cut(total, p.top_p), acc = below;
    if (threadIdx.x == 0)
        sh.weight = total;
    __syncthreads();
    for (uint32_t i = 0; i < 2; acc += w[i++])
        if (cut < total && acc < cut && cut <= acc + w[i])
            sh.weight = acc + w[i]; /* kept: the first prefix reaching the cut */
    __syncthreads();
    u64 r = dsv4_sample_target(p.draw, sh.weight);
    acc = below;
    for (uint32_t i = 0; i < 2; acc += w[i++])
        if (acc <= r && r < acc + w[i])
            sh.at = idx[j0 + i];
    __syncthreads();
    return (int32_t)sh.at;
}

/* Step 3, one block per row. */
__global__ void __launch_bounds__(SP_THREADS)
    sp_pick(const float *logits, uint32_t vocab, const dsv4_cuda_sample_row *rows, const u64 *first,
            const float *probs, const uint32_t *l1_count, const u64 *l1_weight,
            const uint32_t *sel_idx, uint32_t kmax, int32_t *tokens)
{
    extern __shared__ __align__(16) uint8_t sp_smem[];
    sp_shared &sh = *reinterpret_cast<sp_shared *>(sp_smem);
    uint32_t r = blockIdx.x, ib = sp_id_bits(vocab);
    dsv4_cuda_sample_row p = rows[r];
    const float *x = logits + (size_t)r * vocab;
    int32_t token = -1;
    if (p.skip) {
    } else if (sp_greedy(&p)) {
        /* dsv4_sample's loop keeps index 0 when logits[0] is NaN (nothing compares above
         * it), else the first index of the highest non-NaN logit: the first candidate */
        token = x[0] != x[0] ? 0 : (int32_t)(first[r] & ((1ull << ib) - 1));
    } else if (sp_selected(&p, vocab)) {
        token = sp_draw_selected(sh, x, sel_idx + (size_t)r * kmax, p);
    } else {
        sp_row row = {x,       probs + (size_t)r * vocab,
                      vocab,   ib,
                      32 + ib, dsv4_sample_weight_shift(sp_k(&p, vocab)),
                      false,   ~0ull};
        token = sp_draw_row(sh, row, p, l1_count + (size_t)r * SP_L1, l1_weight + (size_t)r * SP_L1,
                            first[r]);
    }
    if (threadIdx.x == 0)
        tokens[r] = token;
}

extern "C" dsv4_cuda_sampler *dsv4_cuda_sampler_new(uint32_t max_rows, uint32_t vocab)
{
    if (max_rows == 0 || max_rows > 65535 || vocab == 0 || vocab > 1u << 31)
        return NULL;
    dsv4_cuda_sampler *s = (dsv4_cuda_sampler *)calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->max_rows = max_rows;
    s->vocab = vocab;
    s->sel_rows_host = (uint32_t *)calloc(max_rows, sizeof(uint32_t));
    bool ok =
        s->sel_rows_host &&
        cudaMalloc(&s->rows_dev, max_rows * sizeof(*s->rows_dev)) == cudaSuccess &&
        cudaMalloc(&s->sel_rows_dev, max_rows * sizeof(uint32_t)) == cudaSuccess &&
        cudaMalloc(&s->sel_idx, (size_t)max_rows * DSV4_CUDA_TOPK_MAX * sizeof(uint32_t)) ==
            cudaSuccess &&
        cudaMalloc(&s->first, max_rows * sizeof(u64)) == cudaSuccess &&
        cudaMalloc(&s->probs, (size_t)max_rows * vocab * sizeof(float)) == cudaSuccess &&
        cudaMalloc(&s->l1_count, (size_t)max_rows * SP_L1 * sizeof(uint32_t)) == cudaSuccess &&
        cudaMalloc(&s->l1_weight, (size_t)max_rows * SP_L1 * sizeof(u64)) == cudaSuccess &&
        cudaFuncSetAttribute(sp_pick, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)sizeof(sp_shared)) == cudaSuccess;
    if (!ok) {
        dsv4_cuda_sampler_free(s);
        return NULL;
    }
    return s;
}

extern "C" void dsv4_cuda_sampler_free(dsv4_cuda_sampler *s)
{
    if (!s)
        return;
    cudaFree(s->rows_dev);
    cudaFree(s->sel_rows_dev);
    cudaFree(s->sel_idx);
    cudaFree(s->first);
    cudaFree(s->probs);
    cudaFree(s->l1_count);
    cudaFree(s->l1_weight);
    free(s->sel_rows_host);
    free(s);
}

extern "C" int dsv4_cuda_sample(dsv4_cuda_sampler *s, const float *logits_dev, uint32_t n,
                                const dsv4_cuda_sample_row *rows, int32_t *tokens_dev, void *stream)
{
    if (n == 0)
        return 0;
    if (n > s->max_rows)
        return -EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    uint32_t V = s->vocab, kmax = 0, *sel = s->sel_rows_host;
    bool ranked = false, firsts = false;
    for (uint32_t i = 0; i < n; i++) {
        bool selected = sp_draws(&rows[i]) && sp_selected(&rows[i], V);
        sel[i] = selected ? V : 0;
        kmax = selected && rows[i].top_k > kmax ? rows[i].top_k : kmax;
        ranked = ranked || sp_ranked(&rows[i], V);
        firsts = firsts || sp_needs_first(&rows[i], V);
    }
    /* copies from pageable memory: they return once the host buffers are staged */
    int rc = dsv4_cuda_status(
        cudaMemcpyAsync(s->rows_dev, rows, n * sizeof(*rows), cudaMemcpyHostToDevice, st));
    if (rc == 0 && kmax > 0)
        rc = dsv4_cuda_status(cudaMemcpyAsync(s->sel_rows_dev, sel, n * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, st));
    if (rc == 0 && kmax > 0)
        rc = dsv4_cuda_topk(logits_dev, V, s->sel_rows_dev, n, kmax, s->sel_idx, st);
    dim3 grid((V + SP_WIDE_THREADS * SP_WIDE_PER - 1) / (SP_WIDE_THREADS * SP_WIDE_PER), n);
    if (rc == 0 && firsts) {
        rc = dsv4_cuda_status(cudaMemsetAsync(s->first, 0xff, n * sizeof(u64), st));
        if (rc == 0) {
            sp_first<<<grid, SP_WIDE_THREADS, 0, st>>>(logits_dev, V, s->rows_dev, s->first);
            rc = dsv4_cuda_launch_status();
        }
    }
    if (rc == 0 && ranked) {
        rc = dsv4_cuda_status(
            cudaMemsetAsync(s->l1_count, 0, (size_t)n * SP_L1 * sizeof(uint32_t), st));
        if (rc == 0)
            rc = dsv4_cuda_status(
                cudaMemsetAsync(s->l1_weight, 0, (size_t)n * SP_L1 * sizeof(u64), st));
        if (rc == 0) {
            sp_weigh<<<grid, SP_WIDE_THREADS, 0, st>>>(logits_dev, V, s->rows_dev, s->first,
                                                       s->probs, s->l1_count, s->l1_weight);
            rc = dsv4_cuda_launch_status();
        }
    }
    if (rc != 0)
        return rc;
    /* a batch without drawing rows needs no dynamic shared memory and asks for none (with
     * the 60 KB asked for every batch, 1-8 greedy rows came out 5-15 us slower on an H100) */
    size_t smem = kmax || ranked ? sizeof(sp_shared) : 0;
    sp_pick<<<n, SP_THREADS, smem, st>>>(logits_dev, V, s->rows_dev, s->first, s->probs,
                                         s->l1_count, s->l1_weight, s->sel_idx, kmax ? kmax : 1,
                                         tokens_dev);
    return dsv4_cuda_launch_status();
}
