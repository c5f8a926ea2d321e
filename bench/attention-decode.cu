/* attention-decode.cu: decode attention of one DeepSeek-V4-Flash layer on one GPU
 * (dsv4_cuda_attend, the CUDA forward's kernel), against the HBM read ceiling measured in
 * the same run.
 *
 *   bench/attention-decode [commit]
 *
 * Shape: 64 heads, head_dim 512, 64 rope dims, window 128, with the sink. A CSA layer
 * attends to the window plus the index top-k 512 selected compressed rows; an HCA layer to
 * the window plus every HCA row (context / 128). Contexts 32k, 128k and 1M, batch 1 to 64
 * (one decode token per sequence, position context - 1 under the forward's position bound,
 * the context: the grid has the splits the token uses), kv rows f32 / bf16 / fp8. Every
 * sequence has its own pages and window ring, drawn from a 4 GiB pool and rotated between
 * repetitions so that small steps are not served from L2. KV bytes per step counts each
 * distinct key row once (the 64 heads of a token read the same rows: the kernel decodes a
 * row once per group of 16 heads, the groups side by side, so all but the first read of a
 * row may hit L2); GB/s counts those bytes plus q and o in f32. Times are the median of 30
 * launches between CUDA events (after 3 untimed ones) and the per-launch time of 30
 * back-to-back launches (median of 5 such streams). Before the timings at 1M and batch 64,
 * each layer and format is checked against kernels/cpu's dsv4_k_attend and for batch
 * invariance (token 0 alone against token 0 of the batch, bit for bit), and the batch's
 * output (with the rope's inverse rotation: the combine's) hashed; a failed check fails
 * the run (exit 1).
 * Then short contexts, the flash-shape decode step at prompt 32 (position 47, under the
 * forward's position bound of 128: one split a token), bf16 rows: timed, checked the same
 * way at batch 64, and the batch-64 output's FNV-1a hash printed, so that two builds can
 * be compared bit for bit. Prints markdown tables. */
#include "kernels/cuda/model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "bench/gpu-bench.cuh"

#define REPS 30
#define POOL_BYTES (4ull << 30)
#define HEADS 64
#define DIM 512
#define ROPE 64
#define WINDOW 128
#define TOPK 512
#define PAGE_TOKENS 256
#define MAX_B 64
#define SETS 8          /* rings and page sets the repetitions rotate through */
#define CHECK_TOL 1e-4  /* f32 arithmetic on both sides, in different orders */
#define SHORT_POS 47    /* decode position of the short contexts: prompt 32 + 16 steps */
#define SHORT_BOUND 128 /* the forward's position bound there (FC_POS_BOUND_STEP) */

/* Median microseconds of REPS launches of fn(rep) timed one by one with events, and in
 * *b2b_us the per-launch time of REPS back-to-back launches (the median of 5 streams). */
template <typename F> static double time_us(F fn, double *b2b_us)
{
    cudaEvent_t a, b;
    std::vector<float> one, run;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    for (int i = 0; i < 3; i++)
        fn(i);
    check(cudaDeviceSynchronize(), "warm-up");
    for (int i = 0; i < REPS; i++) {
        float ms;
        check(cudaEventRecord(a), "cudaEventRecord");
        fn(i);
        check(cudaEventRecord(b), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        one.push_back(ms * 1000.0f);
    }
    for (int r = 0; r < 5; r++) {
        float ms;
        check(cudaEventRecord(a), "cudaEventRecord");
        for (int i = 0; i < REPS; i++)
            fn(i);
        check(cudaEventRecord(b), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        run.push_back(ms * 1000.0f / REPS);
    }
    std::sort(one.begin(), one.end());
    std::sort(run.begin(), run.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    *b2b_us = run[2];
    return one[REPS / 2];
}

/* Where the bench's steps keep their rows (set 0 of the rotation: sequence t has slot t and
 * the pages host_pages[t * pages ...]). */
struct bench_layout {
    const uint8_t *kvs, *rings, *pool;
    size_t rb, ring_bytes, page_bytes;
    uint32_t rpp, pages, pos, n_comp;
    bool every; /* every compressed row (HCA, or CSA without selection), else host_sel's */
    const std::vector<uint32_t> *host_pages, *host_sel;
};

/* The key rows of token t in forward.c's order (window oldest first, then the compressed
 * rows), copied to the host. */
static std::vector<uint8_t> bench_rows(const bench_layout &L, uint32_t t, uint32_t *n_p)
{
    uint32_t first = L.pos + 1 > WINDOW ? L.pos + 1 - WINDOW : 0, n_win = L.pos + 1 - first;
    uint32_t n = n_win + L.n_comp;
    std::vector<uint8_t> rows((size_t)n * L.rb);
    for (uint32_t v = 0; v < n; v++) {
        const uint8_t *src;
        if (v < n_win) {
            uint32_t pp = first + v; /* only the newest row is the step's own */
            src = pp == L.pos ? L.kvs + (size_t)t * L.rb
                              : L.rings + (size_t)t * L.ring_bytes + (size_t)(pp % WINDOW) * L.rb;
        } else {
            uint32_t w = v - n_win;
            if (!L.every)
                w = (*L.host_sel)[(size_t)t * TOPK + w];
            uint32_t page = (*L.host_pages)[(size_t)t * L.pages + w / L.rpp];
            src = L.pool + (size_t)page * L.page_bytes + (size_t)(w % L.rpp) * L.rb;
        }
        check(cudaMemcpy(rows.data() + (size_t)v * L.rb, src, L.rb, cudaMemcpyDeviceToHost),
              "cudaMemcpy row");
    }
    *n_p = n;
    return rows;
}

/* The kernel's output before the inverse rotation (rope 0) against kernels/cpu's
 * dsv4_k_attend for tokens 0 and B - 1, heads 0, 17 and 63: the largest of max |gpu - cpu|
 * / max |cpu| over a head. attend(n_tok, o) runs the step's first n_tok tokens; token 0
 * run alone must give the bits it gets in the batch (*same_p). */
template <typename F>
static double bench_check(const bench_layout &L, const dsv4_k_rowfmt &fmt, uint32_t B,
                          const float *q, float *o, F attend, bool *same_p)
{
    size_t per_tok = (size_t)HEADS * DIM;
    std::vector<float> got(B * per_tok), alone(per_tok), hq(B * per_tok);
    attend(B, o);
    check(cudaMemcpy(got.data(), o, got.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy o");
    attend(1, o);
    check(cudaMemcpy(alone.data(), o, per_tok * 4, cudaMemcpyDeviceToHost), "cudaMemcpy o");
    check(cudaMemcpy(hq.data(), q, hq.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy q");
    *same_p = memcmp(got.data(), alone.data(), per_tok * 4) == 0;
    double worst = 0.0;
    const uint32_t toks[] = {0, B - 1}, heads[] = {0, 17, 63};
    for (uint32_t t : toks) {
        uint32_t n;
        std::vector<uint8_t> rows = bench_rows(L, t, &n);
        std::vector<const void *> ptrs(n);
        for (uint32_t v = 0; v < n; v++)
            ptrs[v] = rows.data() + (size_t)v * L.rb;
        std::vector<float> scores(n), want(DIM);
        for (uint32_t h : heads) {
            const float *qh = hq.data() + (size_t)t * per_tok + (size_t)h * DIM;
            dsv4_k_attend(qh, ptrs.data(), n, &fmt, 1.0f / sqrtf((float)DIM), 0.5f, scores.data(),
                          want.data());
            double diff = 0.0, mag = 0.0;
            for (uint32_t i = 0; i < DIM; i++) {
                double g = got[(size_t)t * per_tok + (size_t)h * DIM + i];
                diff = std::max(diff, fabs(g - want[i]));
                mag = std::max(mag, fabs((double)want[i]));
            }
            worst = std::max(worst, diff / mag);
        }
    }
    return worst;
}

/* FNV-1a of the first n floats at o_dev: two builds' outputs compared bit for bit. */
static uint64_t output_hash(const float *o_dev, size_t n)
{
    std::vector<uint8_t> bits(n * 4);
    check(cudaMemcpy(bits.data(), o_dev, bits.size(), cudaMemcpyDeviceToHost), "cudaMemcpy o");
    uint64_t hash = 0xcbf29ce484222325ull;
    for (uint8_t byte : bits)
        hash = (hash ^ byte) * 0x100000001b3ull;
    return hash;
}

template <typename T> static T *upload(const std::vector<T> &v)
{
    T *d;
    check(cudaMalloc(&d, v.size() * sizeof(T)), "cudaMalloc");
    check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    return d;
}

int main(int argc, char **argv)
{
    const char *commit = argc > 1 ? argv[1] : "unknown";
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows survive a run cut short */
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    printf("# attention decode on %s (%d SMs), commit %s\n\n", prop.name, prop.multiProcessorCount,
           commit);
    uint8_t *pool;
    uint32_t *sink;
    check(cudaMalloc(&pool, POOL_BYTES), "cudaMalloc pool");
    check(cudaMalloc(&sink, 4), "cudaMalloc");
    fill_kernel<<<4096, 256>>>((uint32_t *)pool, POOL_BYTES / 4, 0xffffffffu, 1);
    double b2b;
    /* the first timing's warm-up and 30 launches also settle the clocks */
    for (int i = 0; i < 200; i++)
        read_kernel<<<prop.multiProcessorCount * 8, 512>>>((const uint4 *)pool, POOL_BYTES / 16,
                                                           sink);
    double read_us = time_us(
        [&](int) {
            read_kernel<<<prop.multiProcessorCount * 8, 512>>>((const uint4 *)pool, POOL_BYTES / 16,
                                                               sink);
        },
        &b2b);
    double ceiling = POOL_BYTES / read_us / 1e3; /* GB/s */
    printf("HBM streaming read of 4 GiB: %.1f us, **%.0f GB/s** (the ceiling below)\n\n", read_us,
           ceiling);

    dsv4_cuda_dims d = {};
    d.heads = HEADS;
    d.head_dim = DIM;
    d.window = WINDOW;
    d.rope_main = ROPE;
    d.rope_comp = ROPE;
    d.index_topk = TOPK;
    float *q, *o, *sinks, *freq;
    uint8_t *kvs, *rings;
    uint32_t *sel, *nsel;
    const size_t max_rb = DIM * 4, ring_bytes = (size_t)WINDOW * max_rb;
    check(cudaMalloc(&q, (size_t)MAX_B * HEADS * DIM * 4), "cudaMalloc");
    check(cudaMalloc(&o, (size_t)MAX_B * HEADS * DIM * 4), "cudaMalloc");
    check(cudaMalloc(&kvs, (size_t)MAX_B * max_rb), "cudaMalloc");
    void *work;
    check(cudaMalloc(&work, dsv4_cuda_attend_work_bytes(&d, MAX_B)), "cudaMalloc");
    check(cudaMalloc(&rings, (size_t)SETS * MAX_B * ring_bytes), "cudaMalloc");
    fill_kernel<<<1024, 256>>>((uint32_t *)q, (size_t)MAX_B * HEADS * DIM, 0xbe7fffffu, 2);
    std::vector<float> host_sinks(HEADS, 0.5f), host_freq(ROPE / 2);
    for (uint32_t i = 0; i < ROPE / 2; i++)
        host_freq[i] = powf(10000.0f, -2.0f * (float)i / ROPE);
    sinks = upload(host_sinks);
    freq = upload(host_freq);
    std::vector<uint32_t> tseq(MAX_B), count(MAX_B, 1), host_nsel(MAX_B, TOPK);
    for (uint32_t t = 0; t < MAX_B; t++)
        tseq[t] = t;
    uint32_t *tseq_dev = upload(tseq), *count_dev = upload(count);
    nsel = upload(host_nsel);

    static const struct {
        dsv4_k_dtype dtype;
        const char *name;
        uint32_t mask; /* f32 and bf16 values below 2; fp8 rows: e4m3 below 1, bf16 rope
                          values and UE8M0 scales small */
    } fmts[] = {
        {DSV4_K_F32, "f32", 0xbfffffffu},
        {DSV4_K_BF16, "bf16", 0xbfffbfffu},
        {DSV4_K_FP8, "fp8", 0x37373737u},
    };
    struct bench_checked {
        const char *layer, *kv;
        uint32_t ctx_k, batch;
        double err;
        bool same;
        uint64_t hash;
    };
    std::vector<bench_checked> checks;
    bool failed = false;
    static const uint32_t ctx_k[] = {32, 128, 1024};
    static const uint32_t batches[] = {1, 8, 32, 64};
    printf("| layer | kv | context | batch | rows/token | KV bytes/step | time (us) | GB/s | %% of "
           "read ceiling | back-to-back (us) | GB/s | %% of read ceiling |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (auto &f : fmts) {
        dsv4_k_rowfmt fmt = {f.dtype, DIM, ROPE};
        size_t rb = dsv4_k_row_bytes(&fmt);
        fill_kernel<<<4096, 256>>>((uint32_t *)pool, POOL_BYTES / 4, f.mask, 3);
        fill_kernel<<<4096, 256>>>((uint32_t *)rings, (size_t)SETS * MAX_B * ring_bytes / 4, f.mask,
                                   4);
        fill_kernel<<<64, 256>>>((uint32_t *)kvs, (size_t)MAX_B * max_rb / 4, f.mask, 5);
        for (int hca = 0; hca < 2; hca++) {
            /* rows per 256-token page: 64 CSA rows or 2 HCA rows */
            uint32_t rate = hca ? 128 : 4, rpp = PAGE_TOKENS / rate;
            dsv4_cuda_kvbuf rows = {pool, rpp * rb, rb, rpp};
            dsv4_cuda_kvbuf win = {rings, WINDOW * rb, rb, WINDOW};
            size_t pool_pages = POOL_BYTES / rows.block_bytes;
            for (uint32_t ck : ctx_k) {
                uint32_t ctx = ck * 1024, pos = ctx - 1, pages = ctx / PAGE_TOKENS;
                uint32_t n_comp = hca ? ctx / rate : TOPK;
                std::vector<uint32_t> host_pages((size_t)SETS * MAX_B * pages);
                for (size_t i = 0; i < host_pages.size(); i++)
                    host_pages[i] = (uint32_t)((i * 2654435761ull) % pool_pages);
                /* CSA: 512 rows spread over the ctx / 4 visible ones, ascending */
                std::vector<uint32_t> host_sel((size_t)MAX_B * TOPK);
                for (uint32_t t = 0; t < MAX_B; t++)
                    for (uint32_t k = 0; k < TOPK; k++)
                        host_sel[(size_t)t * TOPK + k] =
                            (uint32_t)((uint64_t)k * (ctx / 4) / TOPK + t % 4);
                uint32_t *pages_dev = upload(host_pages);
                sel = upload(host_sel);
                for (uint32_t B : batches) {
                    std::vector<uint32_t> pos_v(B, pos), page_off(B), slot((size_t)SETS * B);
                    for (uint32_t t = 0; t < B; t++)
                        page_off[t] = t * pages;
                    for (size_t i = 0; i < slot.size(); i++)
                        slot[i] = (uint32_t)i;
                    uint32_t *pos_dev = upload(pos_v), *off_dev = upload(page_off),
                             *slot_dev = upload(slot);
                    auto step = [&](int rep) {
                        uint32_t set = (uint32_t)rep % SETS;
                        dsv4_cuda_step s = {};
                        s.n_tok = B;
                        s.n_seqs = B;
                        s.pos_bound = ctx;
                        s.pos = pos_dev;
                        s.tseq = tseq_dev;
                        s.slot = slot_dev + (size_t)set * B;
                        s.start = pos_dev;
                        s.count = count_dev;
                        s.first = tseq_dev;
                        s.page_off = off_dev;
                        s.pages = pages_dev + (size_t)set * B * pages;
                        check_rc(dsv4_cuda_attend(&d, &s, q, kvs, &win, &rows, hca ? rate : 0, sel,
                                                  nsel, sinks, freq, ROPE, fmt, o, work, NULL),
                                 "dsv4_cuda_attend");
                    };
                    if (B == MAX_B && ck == ctx_k[2]) {
                        bench_layout L = {
                            kvs,   rings, pool,   rb,       WINDOW * rb, rows.block_bytes, rpp,
                            pages, pos,   n_comp, hca != 0, &host_pages, &host_sel};
                        auto attend = [&](uint32_t n_tok, uint32_t rope, float *out) {
                            dsv4_cuda_step s = {};
                            s.n_tok = n_tok;
                            s.n_seqs = n_tok;
                            s.pos_bound = ctx;
                            s.pos = pos_dev;
                            s.tseq = tseq_dev;
                            s.slot = slot_dev;
                            s.start = pos_dev;
                            s.count = count_dev;
                            s.first = tseq_dev;
                            s.page_off = off_dev;
                            s.pages = pages_dev;
                            check_rc(dsv4_cuda_attend(&d, &s, q, kvs, &win, &rows, hca ? rate : 0,
                                                      sel, nsel, sinks, freq, rope, fmt, out, work,
                                                      NULL),
                                     "dsv4_cuda_attend");
                            check(cudaDeviceSynchronize(), "dsv4_cuda_attend");
                        };
                        bool same;
                        double err = bench_check(
                            L, fmt, B, q, o,
                            [&](uint32_t n_tok, float *out) { attend(n_tok, 0, out); }, &same);
                        attend(B, ROPE, o);
                        uint64_t hash = output_hash(o, (size_t)B * HEADS * DIM);
                        checks.push_back({hca ? "HCA" : "CSA", f.name, ck, B, err, same, hash});
                        fprintf(stderr,
                                "check %s %s %uk b%u: max rel err %.3g, alone = batched %s, "
                                "hash %016llx\n",
                                hca ? "HCA" : "CSA", f.name, ck, B, err, same ? "yes" : "NO",
                                (unsigned long long)hash);
                        if (err > CHECK_TOL || !same)
                            failed = true;
                    }
                    double us = time_us(step, &b2b);
                    double kv = (double)B * (WINDOW + n_comp) * rb;
                    double bytes = kv + 2.0 * B * HEADS * DIM * 4;
                    printf("| %s | %s | %uk | %u | %u | %.2f MB | %.1f | %.0f | %.0f%% | %.1f | "
                           "%.0f | %.0f%% |\n",
                           hca ? "HCA" : "CSA", f.name, ck, B, WINDOW + n_comp, kv / 1e6, us,
                           bytes / us / 1e3, bytes / us / 1e3 / ceiling * 100.0, b2b,
                           bytes / b2b / 1e3, bytes / b2b / 1e3 / ceiling * 100.0);
                    check(cudaFree(pos_dev), "cudaFree");
                    check(cudaFree(off_dev), "cudaFree");
                    check(cudaFree(slot_dev), "cudaFree");
                }
                check(cudaFree(pages_dev), "cudaFree");
                check(cudaFree(sel), "cudaFree");
            }
        }
    }

    /* short contexts: HCA (no compressed row before position 127) and CSA attending to every
     * compressed row (rate 4: what the forward does below index_topk x 4 positions) */
    printf("\nShort contexts (bf16 rows, position %u, position bound %u):\n\n"
           "| layer | kv | position | batch | rows/token | time (us) | back-to-back (us) |\n"
           "|---|---|---|---|---|---|---|\n",
           SHORT_POS, SHORT_BOUND);
    struct bench_short {
        const char *layer;
        double err;
        bool same;
        uint64_t hash;
    };
    std::vector<bench_short> shorts;
    {
        dsv4_k_rowfmt fmt = {DSV4_K_BF16, DIM, ROPE};
        size_t rb = dsv4_k_row_bytes(&fmt);
        fill_kernel<<<4096, 256>>>((uint32_t *)pool, POOL_BYTES / 4, 0xbfffbfffu, 6);
        fill_kernel<<<4096, 256>>>((uint32_t *)rings, (size_t)SETS * MAX_B * ring_bytes / 4,
                                   0xbfffbfffu, 7);
        fill_kernel<<<64, 256>>>((uint32_t *)kvs, (size_t)MAX_B * max_rb / 4, 0xbfffbfffu, 8);
        std::vector<uint32_t> pos_v(MAX_B, SHORT_POS), idx(MAX_B), host_pages(MAX_B);
        for (uint32_t t = 0; t < MAX_B; t++) {
            idx[t] = t;
            host_pages[t] = (uint32_t)((t * 2654435761ull) % (POOL_BYTES / (PAGE_TOKENS * rb)));
        }
        uint32_t *pos_dev = upload(pos_v), *idx_dev = upload(idx), *pages_dev = upload(host_pages);
        for (int csa = 0; csa < 2; csa++) {
            const char *layer = csa ? "CSA, every row" : "HCA";
            uint32_t rate = csa ? 4 : 128, rpp = PAGE_TOKENS / rate,
                     n_comp = (SHORT_POS + 1) / rate;
            dsv4_cuda_kvbuf rows = {pool, rpp * rb, rb, rpp};
            dsv4_cuda_kvbuf win = {rings, WINDOW * rb, rb, WINDOW};
            auto attend = [&](uint32_t n_tok, uint32_t rope, float *out) {
                dsv4_cuda_step s = {};
                s.n_tok = n_tok;
                s.n_seqs = n_tok;
                s.pos_bound = SHORT_BOUND;
                s.pos = pos_dev;
                s.tseq = idx_dev;
                s.slot = idx_dev;
                s.start = pos_dev;
                s.count = count_dev;
                s.first = idx_dev;
                s.page_off = idx_dev;
                s.pages = pages_dev;
                check_rc(dsv4_cuda_attend(&d, &s, q, kvs, &win, &rows, rate, NULL, NULL, sinks,
                                          freq, rope, fmt, out, work, NULL),
                         "dsv4_cuda_attend");
            };
            for (uint32_t B : batches) {
                double us = time_us([&](int) { attend(B, ROPE, o); }, &b2b);
                printf("| %s | bf16 | %u | %u | %u | %.1f | %.1f |\n", layer, SHORT_POS, B,
                       SHORT_POS + 1 + n_comp, us, b2b);
            }
            bench_layout L = {kvs, rings, pool,      rb,     WINDOW * rb, rows.block_bytes,
                              rpp, 1,     SHORT_POS, n_comp, true,        &host_pages,
                              NULL};
            bench_short r = {layer, 0.0, false, 0};
            r.err = bench_check(
                L, fmt, MAX_B, q, o,
                [&](uint32_t n_tok, float *out) {
                    attend(n_tok, 0, out);
                    check(cudaDeviceSynchronize(), "dsv4_cuda_attend");
                },
                &r.same);
            attend(MAX_B, ROPE, o);
            r.hash = output_hash(o, (size_t)MAX_B * HEADS * DIM);
            fprintf(stderr,
                    "check %s bf16 position %u b%u: max rel err %.3g, alone = batched %s, hash "
                    "%016llx\n",
                    layer, SHORT_POS, MAX_B, r.err, r.same ? "yes" : "NO",
                    (unsigned long long)r.hash);
            if (r.err > CHECK_TOL || !r.same)
                failed = true;
            shorts.push_back(r);
        }
        check(cudaFree(pos_dev), "cudaFree");
        check(cudaFree(idx_dev), "cudaFree");
        check(cudaFree(pages_dev), "cudaFree");
    }
    check(cudaDeviceSynchronize(), "the benchmark");
    printf("\nGB/s counts the KV bytes above plus q and o (f32, 256 KiB per token).\n\n"
           "Check against kernels/cpu's dsv4_k_attend (tokens 0 and %u, heads 0, 17 and 63; "
           "max |gpu - cpu| / max |cpu| per head), token 0 alone = token 0 of the batch, and the "
           "FNV-1a hash of the batch's output (with the rope's inverse rotation):\n\n"
           "| layer | kv | context | batch | max rel err | alone = batched | output hash |\n"
           "|---|---|---|---|---|---|---|\n",
           MAX_B - 1);
    for (auto &c : checks)
        printf("| %s | %s | %uk | %u | %.3g | %s | %016llx |\n", c.layer, c.kv, c.ctx_k, c.batch,
               c.err, c.same ? "yes" : "NO", (unsigned long long)c.hash);
    printf("\nShort contexts, the same checks at batch %u, and the FNV-1a hash of the batch's "
           "output (with the rope's inverse rotation):\n\n"
           "| layer | max rel err | alone = batched | output hash |\n|---|---|---|---|\n",
           MAX_B);
    for (auto &r : shorts)
        printf("| %s | %.3g | %s | %016llx |\n", r.layer, r.err, r.same ? "yes" : "NO",
               (unsigned long long)r.hash);
    if (failed)
        fprintf(stderr,
                "attention-decode: the kernel disagrees with the cpu (over %.0e or not "
                "batch invariant)\n",
                CHECK_TOL);
    return failed ? 1 : 0;
}
