/* sample.cu: next-token choice on the device, dsv4_sample's semantics (sample.h).
 *
 * The rows' params go up with a slot per row that needs a sort (not greedy, not skipped),
 * then one fixed sequence of launches for the whole batch:
 *   1. sp_prep: the logits of the row in sorted slot c become 64-bit keys (c << 32 | a
 *      32-bit key that orders like dsv4_k_topk: higher logit first, -0 as +0, NaN last);
 *   2. one cub::DeviceRadixSort of (key, id) over every sorted slot at once: the slot
 *      bits keep the rows apart, and the sort is stable with the ids starting ascending,
 *      so equal logits keep the lower id first. A row with 1 < top_k <= DSV4_CUDA_TOPK_MAX
 *      (and below the vocabulary) takes no part in it: the indexer's exact top-k selection
 *      (topk.cu, the same order) ranks its first top_k candidates into its slot, which is
 *      all the steps below read of it (H200: the sort took 540 us for 64 rows of 129280
 *      at top_k 50, bench/results/2026-11-29-sample-h200.md);
 *   3. for the drawing rows, over every multiprocessor: sp_runs computes each of the first
 *      k sorted candidates' probability with the CPU's formula and sums runs of them in
 *      order, sp_offsets scans the run sums (one block per row, a fixed order), sp_ends
 *      adds each run up from its offset to its cumulative sum at its end;
 *   4. sp_pick, one block per row: greedy rows reduce to the best (logit, id) over the
 *      row; the others find the run where the cumulative sum passes top_p * total, then
 *      the one where it passes the draw, and walk only those runs.
 *
 * Why a full sort for the other drawing rows rather than a select: top_k = 0 needs every
 * candidate in order (the total sums them all, best first), and so does a top_k past what
 * the selection takes. Why one device-wide sort rather than a segmented one: a
 * segmented sort gives each row one block, which took 0.9 ms for one row of 129280
 * (bench/sample-decode); the device-wide sort spreads a row over every multiprocessor. */
#include "kernels/cuda/sample.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/status.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <math.h>
#include <stdlib.h>

#define SP_THREADS 1024
#define SP_RUNS 4096 /* runs a drawing row's candidates are cut into, at most */
#define SP_PREP_THREADS 256

struct dsv4_cuda_sampler {
    uint32_t max_rows, vocab;
    uint64_t *keys_in;              /* [max_rows * vocab] sort keys; sp_runs reuses them for the
                                       candidates' probabilities */
    uint64_t *keys_out;             /* [max_rows * vocab] sorted keys */
    uint32_t *ids_in;               /* [max_rows * vocab] 0..vocab-1 per row, written once */
    uint32_t *ids_out;              /* [max_rows * vocab] ids in sorted order */
    dsv4_cuda_sample_row *rows_dev; /* [max_rows] */
    uint32_t *map_host, *map_dev;   /* [2 * max_rows]: each row's slot (UINT32_MAX: none,
                                       greedy or skipped), then each slot's row */
    double *run_sum, *run_off, *run_end;    /* [max_rows * SP_RUNS] per sorted slot */
    uint32_t *sel_rows_host, *sel_rows_dev; /* [max_rows]: vocab for a selected row, else 0 */
    uint32_t *sel_idx; /* [max_rows * DSV4_CUDA_TOPK_MAX]: the selected rows' top-k */
    void *temp;
    size_t temp_bytes;
};

/* Whether a drawing row's candidates come from the top-k selection rather than the sort:
 * 1 < top_k <= DSV4_CUDA_TOPK_MAX, below the vocabulary (sp_k's k is then top_k). */
static inline bool sp_selected(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return p->top_k > 1 && p->top_k <= DSV4_CUDA_TOPK_MAX && p->top_k < vocab;
}

/* Greedy as dsv4_sample decides it (the host sorts the other rows only). */
__host__ __device__ static inline bool sp_greedy(const dsv4_cuda_sample_row *p)
{
    return p->temperature <= 0 || p->top_k == 1;
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

__global__ void sp_ids(uint32_t *ids, uint32_t vocab, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        ids[i] = (uint32_t)(i % vocab);
}

/* Sorted slot c = blockIdx.y holds row map[max_rows + c]. */
__global__ void sp_prep(const float *logits, uint32_t vocab, const uint32_t *map, uint32_t max_rows,
                        uint64_t *keys)
{
    uint32_t c = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t r = map[max_rows + c];
    if (j < vocab)
        keys[(size_t)c * vocab + j] = (uint64_t)c << 32 | sp_key(logits[(size_t)r * vocab + j]);
}

/* Selected slot c = first + blockIdx.y (row r): its top_k candidates from the top-k
 * selection idx (kmax a row) into the sorted arrays, as the sort would have put them. */
__global__ void sp_from_topk(const float *logits, uint32_t vocab, const uint32_t *map,
                             uint32_t max_rows, uint32_t first, const dsv4_cuda_sample_row *rows,
                             const uint32_t *idx, uint32_t kmax, uint64_t *keys, uint32_t *ids)
{
    uint32_t c = first + blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t r = map[max_rows + c];
    if (j >= rows[r].top_k)
        return;
    uint32_t id = idx[(size_t)r * kmax + j];
    ids[(size_t)c * vocab + j] = id;
    keys[(size_t)c * vocab + j] = (uint64_t)c << 32 | sp_key(logits[(size_t)r * vocab + id]);
}

/* A candidate for the greedy choice. */
struct sp_best {
    float v;
    uint32_t i;
};

/* a before b in dsv4_sample's greedy order (among non-NaN: higher, then lower id). */
__device__ static inline bool sp_beats(sp_best a, sp_best b)
{
    if (a.v != a.v)
        return false;
    if (b.v != b.v)
        return true;
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

struct sp_best_op {
    __device__ sp_best operator()(const sp_best &a, const sp_best &b) const
    {
        return sp_beats(b, a) ? b : a;
    }
};

/* Greedy: dsv4_sample's loop keeps index 0 when logits[0] is NaN (nothing compares
 * above it), else the first index of the highest non-NaN logit. */
__device__ static void sp_pick_greedy(const float *x, uint32_t vocab, int32_t *token)
{
    typedef cub::BlockReduce<sp_best, SP_THREADS> reduce;
    __shared__ typename reduce::TempStorage tmp;
    sp_best b = {__uint_as_float(0x7fc00000u), UINT32_MAX};
    for (uint32_t j = threadIdx.x; j < vocab; j += SP_THREADS) {
        sp_best c = {x[j], j};
        if (sp_beats(c, b))
            b = c;
    }
    b = reduce(tmp).Reduce(b, sp_best_op());
    if (threadIdx.x == 0)
        *token = x[0] != x[0] ? 0 : (int32_t)b.i;
}

/* The candidates of a drawing row are cut into runs of sp_run_len(k) (at most SP_RUNS
 * runs): each run's probabilities are summed in order, the run sums scanned in a fixed
 * order into each run's offset, and a candidate's cumulative sum is its run's offset plus
 * the run's probabilities up to it, added in order. The order depends on k alone. */
__device__ static inline uint32_t sp_k(const dsv4_cuda_sample_row *p, uint32_t vocab)
{
    return p->top_k && p->top_k < vocab ? p->top_k : vocab;
}

__device__ static inline uint32_t sp_run_len(uint32_t k)
{
    return (k + SP_RUNS - 1) / SP_RUNS;
}

/* Per sorted slot: each candidate's probability, exactly as dsv4_sample computes it, and
 * each run's sum. */
__global__ void sp_runs(uint32_t vocab, const dsv4_cuda_sample_row *rows, const uint32_t *map,
                        uint32_t max_rows, const uint64_t *keys_out, float *probs, double *run_sum)
{
    uint32_t c = blockIdx.y, r = blockIdx.x * blockDim.x + threadIdx.x;
    dsv4_cuda_sample_row p = rows[map[max_rows + c]];
    uint32_t k = sp_k(&p, vocab), len = sp_run_len(k), lo = r * len;
    if (lo >= k)
        return;
    uint32_t hi = lo + len < k ? lo + len : k;
    const uint64_t *key = keys_out + (size_t)c * vocab;
    float *prob = probs + (size_t)c * vocab;
    double m = sp_value((uint32_t)key[0]), sum = 0;
    for (uint32_t j = lo; j < hi; j++) {
        float q = (float)exp(((double)sp_value((uint32_t)key[j]) - m) / (double)p.temperature);
        prob[j] = q;
        sum += q;
    }
    run_sum[(size_t)c * SP_RUNS + r] = sum;
}

/* Per sorted slot: each run's offset (the runs before it: each thread adds its
 * SP_RUNS / SP_THREADS runs in order, then a block scan of the threads). */
__global__ void __launch_bounds__(SP_THREADS)
    sp_offsets(uint32_t vocab, const dsv4_cuda_sample_row *rows, const uint32_t *map,
               uint32_t max_rows, const double *run_sum, double *run_off)
{
    typedef cub::BlockScan<double, SP_THREADS> scan;
    __shared__ typename scan::TempStorage tmp;
    const uint32_t per = SP_RUNS / SP_THREADS;
    uint32_t c = blockIdx.x, t = threadIdx.x;
    dsv4_cuda_sample_row p = rows[map[max_rows + c]];
    uint32_t k = sp_k(&p, vocab), len = sp_run_len(k), runs = (k + len - 1) / len;
    const double *sum = run_sum + (size_t)c * SP_RUNS;
    double v[SP_RUNS / SP_THREADS], mine = 0, off;
    for (uint32_t i = 0; i < per; i++) {
        v[i] = t * per + i < runs ? sum[t * per + i] : 0;
        mine += v[i];
    }
    scan(tmp).ExclusiveSum(mine, off);
    for (uint32_t i = 0; i < per; i++) {
        if (t * per + i < runs)
            run_off[(size_t)c * SP_RUNS + t * per + i] = off;
        off += v[i];
    }
}

/* Per sorted slot: the cumulative sum at each run's last candidate. */
__global__ void sp_ends(uint32_t vocab, const dsv4_cuda_sample_row *rows, const uint32_t *map,
                        uint32_t max_rows, const float *probs, const double *run_off,
                        double *run_end)
{
    uint32_t c = blockIdx.y, r = blockIdx.x * blockDim.x + threadIdx.x;
    dsv4_cuda_sample_row p = rows[map[max_rows + c]];
    uint32_t k = sp_k(&p, vocab), len = sp_run_len(k), lo = r * len;
    if (lo >= k)
        return;
    uint32_t hi = lo + len < k ? lo + len : k;
    const float *prob = probs + (size_t)c * vocab;
    double acc = run_off[(size_t)c * SP_RUNS + r];
    for (uint32_t j = lo; j < hi; j++)
        acc += prob[j];
    run_end[(size_t)c * SP_RUNS + r] = acc;
}

/* The first candidate j < hi of run r (from lo) whose cumulative sum stops `below` bound
 * (acc < bound, or bound < acc for the draw); hi when none. *acc_p gets its sum. */
__device__ static uint32_t sp_walk(const float *prob, uint32_t lo, uint32_t hi, double off,
                                   double bound, bool draw, double *acc_p)
{
    double acc = off;
    for (uint32_t j = lo; j < hi; j++) {
        acc += prob[j];
        if (draw ? bound < acc : !(acc < bound)) {
            *acc_p = acc;
            return j;
        }
    }
    *acc_p = acc;
    return hi;
}

/* The first run r < runs whose end passes bound (ends[r] for r < last, last_end for run
 * last), into *first (UINT32_MAX: none); every thread of the block calls it. */
__device__ static void sp_first_run(const double *ends, uint32_t runs, uint32_t last,
                                    double last_end, double bound, bool draw, uint32_t *first)
{
    for (uint32_t r = threadIdx.x; r < runs; r += SP_THREADS) {
        double e = r == last ? last_end : ends[r];
        if (draw ? bound < e : !(e < bound)) {
            atomicMin(first, r);
            break;
        }
    }
}

/* One block per row: greedy rows reduce over their logits; drawing rows find the top_p cut
 * and the draw among the runs' ends, then walk the one run that holds each. */
__global__ void __launch_bounds__(SP_THREADS)
    sp_pick(const float *logits, uint32_t vocab, const dsv4_cuda_sample_row *rows,
            const uint32_t *map, const uint32_t *ids_out, const float *probs, const double *run_off,
            const double *run_end, int32_t *tokens)
{
    __shared__ uint32_t first;
    __shared__ double kept;
    uint32_t r = blockIdx.x, t = threadIdx.x;
    dsv4_cuda_sample_row p = rows[r];
    if (p.skip) {
        if (t == 0)
            tokens[r] = -1;
        return;
    }
    if (sp_greedy(&p)) {
        sp_pick_greedy(logits + (size_t)r * vocab, vocab, tokens + r);
        return;
    }
    uint32_t c = map[r], k = sp_k(&p, vocab), len = sp_run_len(k), runs = (k + len - 1) / len;
    const float *prob = probs + (size_t)c * vocab;
    const double *off = run_off + (size_t)c * SP_RUNS, *end = run_end + (size_t)c * SP_RUNS;
    double total = end[runs - 1], acc;
    uint32_t keep = k;
    if (t == 0) {
        first = UINT32_MAX;
        kept = total;
    }
    __syncthreads();
    if (p.top_p > 0 && p.top_p < 1) {
        /* keep = the smallest prefix whose sum is not below top_p * total (0 when even the
         * empty prefix is not), as dsv4_sample's while loop; the kept total is its sum */
        double bound = (double)p.top_p * total;
        if (!(0 < bound)) {
            keep = 0;
        } else {
            sp_first_run(end, runs, runs - 1, total, bound, false, &first);
            __syncthreads();
            if (first != UINT32_MAX) {
                uint32_t lo = first * len, hi = lo + len < k ? lo + len : k;
                keep = sp_walk(prob, lo, hi, off[first], bound, false, &acc) + 1;
                if (t == 0)
                    kept = acc;
            }
        }
        if (keep == 0 && t == 0)
            kept = prob[0];
        __syncthreads();
        if (t == 0) {
            if (kept == 0) /* dsv4_sample: total = acc ? acc : prob[0] */
                kept = prob[0];
            first = UINT32_MAX;
        }
        keep = keep ? keep : 1;
        __syncthreads();
    }
    /* the draw among the first keep candidates: the run holding keep - 1 ends there at the
     * kept total, which is the cumulative sum at keep - 1 (total itself without top_p) */
    double rr = p.draw * kept;
    uint32_t last = (keep - 1) / len;
    sp_first_run(end, last + 1, last, kept, rr, true, &first);
    __syncthreads();
    if (t == 0) {
        uint32_t j = keep - 1;
        if (first != UINT32_MAX) {
            uint32_t lo = first * len, hi = lo + len < keep ? lo + len : keep;
            uint32_t at = sp_walk(prob, lo, hi, off[first], rr, true, &acc);
            j = at < hi ? at : j;
        }
        tokens[r] = (int32_t)ids_out[(size_t)c * vocab + j];
    }
}

/* Bits of the slot index above the 32 key bits for m sorted slots. */
static int sp_slot_bits(uint32_t m)
{
    int b = 0;
    while (m > 1u << b)
        b++;
    return b;
}

extern "C" dsv4_cuda_sampler *dsv4_cuda_sampler_new(uint32_t max_rows, uint32_t vocab)
{
    size_t n = (size_t)max_rows * vocab;
    if (max_rows == 0 || vocab == 0 || n >= (size_t)INT32_MAX)
        return NULL;
    dsv4_cuda_sampler *s = (dsv4_cuda_sampler *)calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->max_rows = max_rows;
    s->vocab = vocab;
    s->map_host = (uint32_t *)calloc(2 * max_rows, sizeof(uint32_t));
    s->sel_rows_host = (uint32_t *)calloc(max_rows, sizeof(uint32_t));
    bool ok = s->map_host && s->sel_rows_host && cudaMalloc(&s->keys_in, n * 8) == cudaSuccess &&
              cudaMalloc(&s->keys_out, n * 8) == cudaSuccess &&
              cudaMalloc(&s->ids_in, n * 4) == cudaSuccess &&
              cudaMalloc(&s->ids_out, n * 4) == cudaSuccess &&
              cudaMalloc(&s->rows_dev, max_rows * sizeof(*s->rows_dev)) == cudaSuccess &&
              cudaMalloc(&s->map_dev, 2 * max_rows * sizeof(uint32_t)) == cudaSuccess &&
              cudaMalloc(&s->run_sum, max_rows * SP_RUNS * sizeof(double)) == cudaSuccess &&
              cudaMalloc(&s->run_off, max_rows * SP_RUNS * sizeof(double)) == cudaSuccess &&
              cudaMalloc(&s->run_end, max_rows * SP_RUNS * sizeof(double)) == cudaSuccess &&
              cudaMalloc(&s->sel_rows_dev, max_rows * sizeof(uint32_t)) == cudaSuccess &&
              cudaMalloc(&s->sel_idx, (size_t)max_rows * DSV4_CUDA_TOPK_MAX * sizeof(uint32_t)) ==
                  cudaSuccess;
    ok = ok && cub::DeviceRadixSort::SortPairs(nullptr, s->temp_bytes, s->keys_in, s->keys_out,
                                               s->ids_in, s->ids_out, (int)n, 0,
                                               32 + sp_slot_bits(max_rows)) == cudaSuccess;
    ok = ok && cudaMalloc(&s->temp, s->temp_bytes ? s->temp_bytes : 1) == cudaSuccess;
    if (ok) {
        sp_ids<<<(unsigned)((n + 255) / 256), 256>>>(s->ids_in, vocab, n);
        ok = cudaDeviceSynchronize() == cudaSuccess;
    }
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
    cudaFree(s->keys_in);
    cudaFree(s->keys_out);
    cudaFree(s->ids_in);
    cudaFree(s->ids_out);
    cudaFree(s->rows_dev);
    cudaFree(s->map_dev);
    cudaFree(s->run_sum);
    cudaFree(s->run_off);
    cudaFree(s->run_end);
    cudaFree(s->temp);
    cudaFree(s->sel_rows_dev);
    cudaFree(s->sel_idx);
    free(s->map_host);
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
    uint32_t V = s->vocab, m = 0, ms = 0, kmax = 0, *map = s->map_host, *sel = s->sel_rows_host;
    /* slots: the sorted rows first (the sort takes slots 0 .. ms - 1), then the selected */
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n; i++) {
            bool drawn = !rows[i].skip && !sp_greedy(&rows[i]);
            bool selected = drawn && sp_selected(&rows[i], V);
            if (pass == 0) {
                map[i] = UINT32_MAX;
                sel[i] = selected ? V : 0;
                kmax = selected && rows[i].top_k > kmax ? rows[i].top_k : kmax;
            }
            if (drawn && selected == (pass == 1)) {
                map[i] = m;
                map[s->max_rows + m++] = i;
            }
            if (pass == 0 && drawn && !selected)
                ms++;
        }
    /* copies from pageable memory: they return once the host buffers are staged */
    int rc = dsv4_cuda_status(
        cudaMemcpyAsync(s->rows_dev, rows, n * sizeof(*rows), cudaMemcpyHostToDevice, st));
    if (rc == 0)
        rc = dsv4_cuda_status(cudaMemcpyAsync(s->map_dev, map, 2 * s->max_rows * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, st));
    if (rc == 0 && ms > 0) {
        int items = (int)((size_t)ms * V), end_bit = 32 + sp_slot_bits(ms);
        size_t temp_bytes = 0;
        if (cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, s->keys_in, s->keys_out, s->ids_in,
                                            s->ids_out, items, 0, end_bit) != cudaSuccess ||
            temp_bytes > s->temp_bytes)
            return -EIO;
        dim3 grid((V + SP_PREP_THREADS - 1) / SP_PREP_THREADS, ms);
        sp_prep<<<grid, SP_PREP_THREADS, 0, st>>>(logits_dev, V, s->map_dev, s->max_rows,
                                                  s->keys_in);
        rc = dsv4_cuda_launch_status();
        temp_bytes = s->temp_bytes;
        if (rc == 0)
            rc = dsv4_cuda_status(
                cub::DeviceRadixSort::SortPairs(s->temp, temp_bytes, s->keys_in, s->keys_out,
                                                s->ids_in, s->ids_out, items, 0, end_bit, st));
    }
    if (rc == 0 && m > ms) {
        rc = dsv4_cuda_status(cudaMemcpyAsync(s->sel_rows_dev, sel, n * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, st));
        if (rc == 0)
            rc = dsv4_cuda_topk(logits_dev, V, s->sel_rows_dev, n, kmax, s->sel_idx, st);
        if (rc == 0) {
            dim3 grid((kmax + SP_PREP_THREADS - 1) / SP_PREP_THREADS, m - ms);
            sp_from_topk<<<grid, SP_PREP_THREADS, 0, st>>>(logits_dev, V, s->map_dev, s->max_rows,
                                                           ms, s->rows_dev, s->sel_idx, kmax,
                                                           s->keys_out, s->ids_out);
            rc = dsv4_cuda_launch_status();
        }
    }
    /* the sort read the keys: their buffer now holds the probabilities */
    float *probs = (float *)s->keys_in;
    dim3 runs(SP_RUNS / SP_PREP_THREADS, m);
    if (rc == 0 && m > 0) {
        sp_runs<<<runs, SP_PREP_THREADS, 0, st>>>(V, s->rows_dev, s->map_dev, s->max_rows,
                                                  s->keys_out, probs, s->run_sum);
        rc = dsv4_cuda_launch_status();
    }
    if (rc == 0 && m > 0) {
        sp_offsets<<<m, SP_THREADS, 0, st>>>(V, s->rows_dev, s->map_dev, s->max_rows, s->run_sum,
                                             s->run_off);
        rc = dsv4_cuda_launch_status();
    }
    if (rc == 0 && m > 0) {
        sp_ends<<<runs, SP_PREP_THREADS, 0, st>>>(V, s->rows_dev, s->map_dev, s->max_rows, probs,
                                                  s->run_off, s->run_end);
        rc = dsv4_cuda_launch_status();
    }
    if (rc != 0)
        return rc;
    sp_pick<<<n, SP_THREADS, 0, st>>>(logits_dev, V, s->rows_dev, s->map_dev, s->ids_out, probs,
                                      s->run_off, s->run_end, tokens_dev);
    return dsv4_cuda_launch_status();
}
