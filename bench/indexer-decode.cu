/* indexer-decode.cu: decode-time lightning indexer on one GPU, against the memory ceiling
 * measured in the same run.
 *
 *   bench/indexer-decode [--profile] [--only indexer|topk] [--step FMT/CTX/BATCH]
 *                        [--format FMT] [commit]
 *
 * 1. HBM read ceiling: a streaming read of a 4 GiB buffer (16-byte loads, grid-stride).
 * 2. dsv4_cuda_indexer_score for fp8 (the f32 query, and fp8-e4m3q: the query as e4m3, the
 *    fp8 plugin's query_format = e4m3) and bf16 index-K pages (64 heads x 128 dims, 64 rows
 *    per page, one compressed row per 4 tokens) at 32k, 128k and 1M tokens of context and
 *    batch 1 to 64: every query has its own pages, drawn from a 4 GiB pool and rotated
 *    between repetitions so that small steps are not served from L2. Achieved GB/s counts
 *    the index-K bytes read.
 *    A step of one page at batch 1 is the fixed cost of a launch. Beside each step, the
 *    same pages read by a kernel that does nothing else (all of them in flight a
 *    multiprocessor can hold, back to back): what the step's scattered pages allow.
 * 3. dsv4_cuda_topk: k = 512 over 256k candidates at batch 1 to 64, and over 4k candidates
 *    at batch 1 (the fixed cost).
 * 4. An empty kernel: the launch floor of this machine.
 * Each time is the median of 30 launches timed with CUDA events, after two seconds of
 * streaming reads so the clocks have settled and 3 untimed launches of each case; it
 * includes the host's launch latency (a few us in a VM), which dominates small steps. The
 * back-to-back time is what a launch costs inside a stream of them (30 launches between two
 * events, the median of 5 such runs), which hides that latency behind the kernels unless the
 * host spends longer per call than the kernel runs: the host column is the median time the
 * call itself took on the host. The indexer's in-graph time is what a call costs among 30
 * consecutive calls (each its own pages) captured as one CUDA graph and replayed, as the
 * decode step runs it once per CSA layer. Prints markdown tables (bench/results/ keeps the recorded
 * ones). With --profile only the small steps run (batch 1 up to 32k context, top-k at
 * batch 1), once each with no warm-up and no timing, for a profiler (ncu) to pick the
 * kernels out. --only runs the indexer steps or the top-k alone (the ceiling and the launch
 * floor are measured either way). --step runs one indexer step alone, as its table row names
 * it (fp8/128k/64, bf16/one page/1), with --profile too: one launch of a large step for ncu.
 * --format runs the indexer steps of one format alone (fp8, fp8-e4m3q or bf16). */
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench/gpu-bench.cuh"

#define REPS 30
#define POOL_BYTES (4ull << 30)
#define HEADS 64
#define DIM 128
#define RPP 64

__global__ void empty_kernel(void)
{
}

/* Reads the n pages ids[0 .. n) of page_bytes each from pool and nothing else: a warp a page
 * at a time, 8 loads of a lane in flight before any is used, every multiprocessor full. What
 * the indexer's own scattered pages allow a reader that does no work (the scattered-read
 * ceiling of a step), beside the streaming ceiling the percentages are taken against. */
__global__ void __launch_bounds__(256)
    gather_kernel(const uint8_t *pool, const uint32_t *ids, uint32_t n, uint32_t page_bytes,
                  uint32_t *sink)
{
    const uint32_t lane = threadIdx.x & 31, words = page_bytes / 16;
    const uint32_t warps = gridDim.x * blockDim.x / 32;
    uint32_t acc = 0;
    for (uint32_t p = (blockIdx.x * blockDim.x + threadIdx.x) / 32; p < n; p += warps) {
        const uint4 *pg = (const uint4 *)(pool + (size_t)ids[p] * page_bytes);
        for (uint32_t w0 = 0; w0 < words; w0 += 256) {
            uint4 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const uint32_t w = w0 + lane + 32 * k;
                v[k] = w < words ? __ldcs(pg + w) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int k = 0; k < 8; k++)
                acc ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        }
    }
    if (acc == 0x12345678u)
        *sink = acc; /* keeps the loads */
}

static bool profiling;   /* --profile: one untimed run of each case */
static const char *only; /* --only: "indexer" or "topk"; NULL runs both */
static const char *one;  /* --step: the one indexer step to run ("fp8/128k/64"); NULL runs all */
static const char *fmt_only; /* --format: the one format whose steps run; NULL runs all */

/* Median time in microseconds of REPS runs of fn(rep) (after 3 warm-up runs), and in
 * *host_us the median time the host spent inside fn. */
template <typename F> static double median_us(F fn, double *host_us)
{
    cudaEvent_t a, b;
    std::vector<float> t;
    std::vector<double> h;
    if (profiling) {
        fn(0);
        check(cudaDeviceSynchronize(), "the profiled case");
        *host_us = 0.0;
        return 0.0;
    }
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    for (int i = 0; i < 3; i++)
        fn(i);
    check(cudaDeviceSynchronize(), "warm-up");
    for (int i = 0; i < REPS; i++) {
        float ms;
        check(cudaEventRecord(a), "cudaEventRecord");
        auto h0 = std::chrono::steady_clock::now();
        fn(i);
        auto h1 = std::chrono::steady_clock::now();
        check(cudaEventRecord(b), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        t.push_back(ms * 1000.0f);
        h.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count());
    }
    std::sort(t.begin(), t.end());
    std::sort(h.begin(), h.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    *host_us = h[REPS / 2];
    return t[REPS / 2];
}

/* Microseconds per call of run(), which makes REPS calls on stream st, timed between CUDA
 * events: the median of 5 runs. */
template <typename R> static double per_call_us(R run, cudaStream_t st)
{
    cudaEvent_t a, b;
    std::vector<float> t;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    for (int i = 0; i < 5; i++) {
        float ms;
        check(cudaEventRecord(a, st), "cudaEventRecord");
        run();
        check(cudaEventRecord(b, st), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        t.push_back(ms * 1000.0f / REPS);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[2];
}

/* Microseconds per launch of REPS back-to-back runs of fn(rep), the median of 5 streams. */
template <typename F> static double stream_us(F fn)
{
    if (profiling)
        return 0.0;
    return per_call_us(
        [&] {
            for (int i = 0; i < REPS; i++)
                fn(i);
        },
        0);
}

/* Microseconds per call of REPS consecutive runs of fn(rep) on stream st, captured as one
 * CUDA graph and replayed: how the decode step runs the indexer, once per layer inside its
 * graph, with no host launch between the calls (the median of 5 replays). */
template <typename F> static double graph_us(F fn, cudaStream_t *st)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    if (profiling)
        return 0.0;
    check(cudaStreamCreateWithFlags(st, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamBeginCapture(*st, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < REPS; i++)
        fn(i);
    check(cudaStreamEndCapture(*st, &graph), "capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    check(cudaGraphLaunch(exec, *st), "cudaGraphLaunch");
    double us = per_call_us([&] { check(cudaGraphLaunch(exec, *st), "cudaGraphLaunch"); }, *st);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    check(cudaStreamDestroy(*st), "cudaStreamDestroy");
    *st = NULL;
    return us;
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    uint8_t *pool;
    uint32_t *sink;
    double host_us;
    const char *commit = "unknown";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile"))
            profiling = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--step") && i + 1 < argc)
            one = argv[++i];
        else if (!strcmp(argv[i], "--format") && i + 1 < argc)
            fmt_only = argv[++i];
        else
            commit = argv[i];
    }
    if (only && strcmp(only, "indexer") && strcmp(only, "topk")) {
        fprintf(stderr, "indexer-decode: --only takes indexer or topk (not %s)\n", only);
        return 2;
    }
    if (one || fmt_only)
        only = "indexer";
    /* rows survive a run cut short (to a file, stdout is fully buffered: a kernel that hung
     * left it empty) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    printf("# indexer decode on %s (%d SMs), commit %s\n\n", prop.name, prop.multiProcessorCount,
           commit);
    check(cudaMalloc(&pool, POOL_BYTES), "cudaMalloc pool");
    check(cudaMalloc(&sink, 4), "cudaMalloc");

    fill_kernel<<<4096, 256>>>((uint32_t *)pool, POOL_BYTES / 4, 0xffffffffu, 1);
    /* two seconds of streaming reads first, so the clocks have settled before any timing */
    cudaEvent_t t0, t1;
    float warm_ms = 0.0f;
    check(cudaEventCreate(&t0), "cudaEventCreate");
    check(cudaEventCreate(&t1), "cudaEventCreate");
    check(cudaEventRecord(t0), "cudaEventRecord");
    while (!profiling && warm_ms < 2000.0f) {
        for (int i = 0; i < 100; i++)
            read_kernel<<<prop.multiProcessorCount * 8, 512>>>((const uint4 *)pool, POOL_BYTES / 16,
                                                               sink);
        check(cudaEventRecord(t1), "cudaEventRecord");
        check(cudaEventSynchronize(t1), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&warm_ms, t0, t1), "cudaEventElapsedTime");
    }
    double read_us = median_us(
        [&](int) {
            read_kernel<<<prop.multiProcessorCount * 8, 512>>>((const uint4 *)pool, POOL_BYTES / 16,
                                                               sink);
        },
        &host_us);
    double ceiling = POOL_BYTES / read_us / 1e3; /* GB/s */
    printf("HBM streaming read of 4 GiB: %.1f us, **%.0f GB/s** (the ceiling below)\n\n", read_us,
           ceiling);

    /* 0: one page at batch 1 only */
    static const uint32_t ctx_k[] = {0, 32, 128, 1024};
    static const uint32_t batches[] = {1, 8, 32, 64};
    static const struct {
        dsv4_cuda_ik_format fmt;
        dsv4_cuda_ik_query query;
        const char *name;
        uint32_t row_bytes, mask;
    } fmts[] = {
        /* masks keep the random keys finite: no e4m3 NaN, no bf16 exponent of 255 */
        {DSV4_CUDA_IK_FP8, DSV4_CUDA_IK_QUERY_F32, "fp8", DIM + 4, 0xf7f7f7f7u},
        {DSV4_CUDA_IK_FP8, DSV4_CUDA_IK_QUERY_E4M3, "fp8-e4m3q", DIM + 4, 0xf7f7f7f7u},
        {DSV4_CUDA_IK_BF16, DSV4_CUDA_IK_QUERY_F32, "bf16", DIM * 2, 0xbfffbfffu},
    };
    float *q, *w, *scores;
    uint32_t *pages_dev, *start_dev, *rows_dev;
    const uint32_t max_b = 64, max_rows = 1024 * 1024 / 4;
    check(cudaMalloc(&q, (size_t)max_b * HEADS * DIM * 4), "cudaMalloc");
    check(cudaMalloc(&w, (size_t)max_b * HEADS * 4), "cudaMalloc");
    check(cudaMalloc(&scores, (size_t)max_b * max_rows * 4), "cudaMalloc");
    check(cudaMalloc(&start_dev, max_b * 4), "cudaMalloc");
    check(cudaMalloc(&rows_dev, max_b * 4), "cudaMalloc");
    fill_kernel<<<1024, 256>>>((uint32_t *)q, (size_t)max_b * HEADS * DIM, 0xbf7fffffu, 2);
    fill_kernel<<<64, 256>>>((uint32_t *)w, (size_t)max_b * HEADS, 0xbf7fffffu, 3);

    double floor_us = median_us([&](int) { empty_kernel<<<1, 32>>>(); }, &host_us);
    double floor_b2b = stream_us([&](int) { empty_kernel<<<1, 32>>>(); });
    printf("Empty kernel (the launch floor): %.1f us single, %.1f us back-to-back, host %.1f "
           "us per launch\n\n",
           floor_us, floor_b2b, host_us);

    if (!only || !strcmp(only, "indexer"))
        printf("| format | context | batch | index-K bytes/step | time (us) | GB/s | %% of read "
               "ceiling | back-to-back (us) | GB/s | %% of read ceiling | in a graph (us) | %% of "
               "read ceiling | host us/call | scattered read b2b (us) | %% of read ceiling |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto &f : fmts) {
        if (only && strcmp(only, "indexer"))
            break;
        if (fmt_only && strcmp(fmt_only, f.name))
            continue;
        size_t page_bytes = (size_t)RPP * f.row_bytes, pool_pages = POOL_BYTES / page_bytes;
        fill_kernel<<<4096, 256>>>((uint32_t *)pool, POOL_BYTES / 4, f.mask, 4);
        for (uint32_t ck : ctx_k) {
            for (uint32_t B : batches) {
                uint32_t rows = ck ? ck * 1024 / 4 : RPP, pages = rows / RPP;
                size_t step_pages = (size_t)B * pages;
                char ctx[16], name[48];
                snprintf(ctx, sizeof ctx, ck ? "%uk" : "one page", ck);
                snprintf(name, sizeof name, "%s/%s/%u", f.name, ctx, B);
                if (step_pages > pool_pages || (ck == 0 && B > 1) ||
                    (one ? strcmp(one, name) != 0 : profiling && (B > 1 || ck > 32)))
                    continue;
                /* as many disjoint page sets as fit, one per repetition in turn */
                size_t sets = std::min<size_t>(pool_pages / step_pages, 16);
                std::vector<uint32_t> host(sets * step_pages), start(B), nrows(B, rows);
                for (size_t i = 0; i < host.size(); i++)
                    host[i] = (uint32_t)((i * 2654435761ull) % pool_pages);
                for (uint32_t b = 0; b < B; b++)
                    start[b] = b * pages;
                check(cudaMalloc(&pages_dev, host.size() * 4), "cudaMalloc");
                check(cudaMemcpy(pages_dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice),
                      "cudaMemcpy");
                check(cudaMemcpy(start_dev, start.data(), B * 4, cudaMemcpyHostToDevice),
                      "cudaMemcpy");
                check(cudaMemcpy(rows_dev, nrows.data(), B * 4, cudaMemcpyHostToDevice),
                      "cudaMemcpy");
                cudaStream_t st = NULL; /* the graph's capture stream while graph_us runs */
                auto step = [&](int rep) {
                    dsv4_cuda_ik_batch bt = {B,
                                             HEADS,
                                             rows,
                                             0.0078125f,
                                             pages_dev + (size_t)(rep % sets) * step_pages,
                                             start_dev,
                                             rows_dev,
                                             q,
                                             w,
                                             f.query};
                    check_rc(dsv4_cuda_indexer_score(f.fmt, DIM, RPP, pool, &bt, scores, st),
                             "dsv4_cuda_indexer_score");
                };
                double us = median_us(step, &host_us), b2b = stream_us(step);
                double in_graph = graph_us(step, &st);
                double gather = stream_us([&](int rep) {
                    gather_kernel<<<prop.multiProcessorCount * 8, 256>>>(
                        pool, pages_dev + (size_t)(rep % sets) * step_pages, (uint32_t)step_pages,
                        (uint32_t)page_bytes, sink);
                });
                double bytes = (double)step_pages * page_bytes;
                printf("| %s | %s | %u | %.2f MB | %.1f | %.0f | %.0f%% | %.1f | %.0f | %.0f%% | "
                       "%.1f | %.0f%% | %.1f | %.1f | %.0f%% |\n",
                       f.name, ctx, B, bytes / 1e6, us, bytes / us / 1e3,
                       bytes / us / 1e3 / ceiling * 100.0, b2b, bytes / b2b / 1e3,
                       bytes / b2b / 1e3 / ceiling * 100.0, in_graph,
                       bytes / in_graph / 1e3 / ceiling * 100.0, host_us, gather,
                       bytes / gather / 1e3 / ceiling * 100.0);
                check(cudaFree(pages_dev), "cudaFree");
            }
        }
    }

    if (!only || !strcmp(only, "topk"))
        printf("\n| top-k | candidates | batch | time (us) | back-to-back (us) | host us/call |\n"
               "|---|---|---|---|---|---|\n");
    const uint32_t n = 256 * 1024;
    uint32_t *idx;
    check(cudaMalloc(&idx, (size_t)max_b * 512 * 4), "cudaMalloc");
    fill_kernel<<<1024, 256>>>((uint32_t *)scores, (size_t)max_b * n, 0xbf7fffffu, 5);
    std::vector<uint32_t> nrows(max_b, n);
    check(cudaMemcpy(rows_dev, nrows.data(), max_b * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    static const struct {
        uint32_t n, batch;
    } tks[] = {{4096, 1}, {n, 1}, {n, 2}, {n, 4}, {n, 8}, {n, 16}, {n, 32}, {n, 64}};
    for (auto &c : tks) {
        if ((only && strcmp(only, "topk")) || (profiling && c.batch > 1))
            continue;
        auto step = [&](int) {
            check_rc(dsv4_cuda_topk(scores, c.n, rows_dev, c.batch, 512, idx, NULL),
                     "dsv4_cuda_topk");
        };
        nrows.assign(max_b, c.n);
        check(cudaMemcpy(rows_dev, nrows.data(), max_b * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        double us = median_us(step, &host_us), b2b = stream_us(step);
        printf("| dsv4_cuda_topk k=512 | %uk | %u | %.1f | %.1f | %.1f |\n", c.n / 1024, c.batch,
               us, b2b, host_us);
    }
    check(cudaDeviceSynchronize(), "the benchmark");
    return 0;
}
