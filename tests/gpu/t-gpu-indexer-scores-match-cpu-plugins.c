/* t-gpu-indexer-scores-match-cpu-plugins: each indexk plugin's score_cuda, reading the
 * plugin's own pages on the device, agrees with its CPU score for a batch of queries that
 * each have their own out-of-order page list and row count (a partial last page, a single
 * row, none, and pages enough that the kernels' rings of stages wrap): for every row,
 *     |gpu - cpu| <= eps_fmt * |scale| * sum_h |w_h| sum_d |q_hd k_d|   (k as stored)
 * where eps_fmt is the query rounding the kernels document (f16 for fp8 keys: 2^-11,
 * bf16 for bf16 keys: 2^-9, two-term bf16 for f32 keys: taken as 2^-14), doubled for
 * the float sums. Scores do not depend on the batch (each query alone gives the same bits),
 * nothing is written past a query's rows, and the CPU ops are untouched by all this. Page
 * shapes: 64 and 32 rows (the plugins' defaults), 8 rows (one MMA tile), 24 rows (not a
 * power of two) and 256 rows (the largest pages the kernels take); bf16 and fp8 64 x 128
 * pages with 64 heads and with 12 (heads past the query masked), fp8 128 x 128 pages (two
 * 64-row tiles a page).
 *
 * fp8 with query_format = e4m3: the CPU plugin and the kernels score the same quantised
 * query q~ (indexk_e4m3_query), so the bound is eps |scale| sum_h |w_h| sum_d |q~_hd k_d| with
 * eps what the kernels' sums lose: e4m3 MMAs (dim 128, 64-row multiples: the tensor-map
 * kernel) whose accumulation keeps fewer bits than f32 (Hopper's FP8 tensor cores add a
 * k32 step's products at reduced precision, about 13 bits), taken as 2^-13 (the worst
 * measured on an H200 was 2^-16 of sum |q~ k|, 0.015 of a 2^-11 bound); other shapes take
 * q~ as f16 values (exact) with f32 sums. A
 * NaN in a query head makes every score of that query NaN on both, an infinity saturates to
 * 448 times the head's scale on both (the rows' rule). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"

#include <dsv4d/indexk.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_POOL_PAGES 48u
#define N_QUERIES 5u

typedef struct variant {
    indexk_fmt fmt;
    const char *scale_format, *query_format;
    uint32_t rows_per_page, dim, n_heads;
    double eps;
} variant;

/* the first query long enough that its blocks take more pages than their stages (a launch
 * gives each query a share of one wave of blocks: 80000 rows of 64-row pages are some 12
 * pages a block), so every kernel's ring of stages wraps and is refilled */
static const uint32_t query_rows[N_QUERIES] = {80000, 64, 1, 0, 777};

static void run(const variant *v)
{
    const char *name = indexk_fmt_names[v->fmt];
    const dsv4_plugin_desc *desc = plugtest_open("indexk", name);
    const dsv4_indexk_ops *ops = desc->ops;
    dsv4_indexk_geom g = {
        .struct_size = sizeof g, .dim = v->dim, .rows_per_page = v->rows_per_page};
    const size_t page_bytes = ops->page_bytes(&g), dim = v->dim, H = v->n_heads;
    const uint32_t rpp = v->rows_per_page;
    uint32_t max_rows = 0, n_pages = 0, page_start[N_QUERIES];
    for (uint32_t b = 0; b < N_QUERIES; b++) {
        page_start[b] = n_pages;
        n_pages += (query_rows[b] + rpp - 1) / rpp;
        max_rows = query_rows[b] > max_rows ? query_rows[b] : max_rows;
    }
    uint8_t *pool = calloc(N_POOL_PAGES, page_bytes);
    float *rows = malloc((size_t)rpp * dim * sizeof *rows), *k = malloc(dim * sizeof *k);
    float *q = malloc(N_QUERIES * H * dim * sizeof *q), *w = malloc(N_QUERIES * H * sizeof *w);
    float *cpu = malloc((size_t)N_QUERIES * max_rows * sizeof *cpu);
    float *gpu = malloc((size_t)N_QUERIES * max_rows * sizeof *gpu);
    float *alone = malloc((size_t)max_rows * sizeof *alone);
    uint32_t *pages = malloc((n_pages + 1) * sizeof *pages);
    dsv4_indexk_slot *slots = malloc(rpp * sizeof *slots);
    float scale = (float)(1.0 / sqrt((double)H * (double)dim));
    const bool e4m3 = v->query_format != NULL;
    void *conf = indexk_test_config(desc, v->fmt, v->scale_format, v->query_format);
    void *state = plugtest_init(desc, conf);
    float *qt = malloc(N_QUERIES * H * dim * sizeof *qt);
    char label[80];
    unsigned over = 0, written = 0, nan_rows = 0;
    double worst = 0.0;

    snprintf(label, sizeof label, "%s%s%s%s %ux%u, %u heads", name, v->scale_format ? "/" : "",
             v->scale_format ? v->scale_format : "", e4m3 ? " e4m3 query" : "", rpp, v->dim,
             v->n_heads);
    ok(DSV4_HAS_FIELD(ops, dsv4_indexk_ops, topk_cuda) && ops->score_cuda && ops->topk_cuda,
       "%s: the plugin has CUDA ops", label);
    for (uint32_t p = 0; p < N_POOL_PAGES; p++) {
        for (uint32_t r = 0; r < rpp; r++)
            slots[r] = (dsv4_indexk_slot){p, r};
        for (size_t i = 0; i < (size_t)rpp * dim; i++)
            rows[i] = (float)plugtest_uniform(-2.0, 2.0);
        if (ops->store(state, &g, pool, rows, slots, rpp) != 0)
            bail_out("%s: store failed", label);
    }
    /* each query's pages: distinct, out of order (a stride through the pool) */
    for (uint32_t i = 0; i < n_pages; i++)
        pages[i] = (i * 29u + 7u) % N_POOL_PAGES;
    for (size_t i = 0; i < N_QUERIES * H * dim; i++)
        q[i] = (float)plugtest_uniform(-1.0, 1.0);
    for (size_t i = 0; i < N_QUERIES * H; i++)
        w[i] = (float)plugtest_uniform(-1.0, 1.0);
    if (e4m3) {
        q[(1 * H + 0) * dim + 5] = NAN;      /* query 1: every score NaN */
        q[(4 * H + 1) * dim + 7] = INFINITY; /* query 4: saturates to 448 s */
    }
    /* the query as the bound takes it: q~ for an e4m3 query */
    for (size_t h = 0; h < N_QUERIES * H; h++) {
        if (e4m3)
            indexk_e4m3_query(q + h * dim, v->dim, v->scale_format != NULL, qt + h * dim);
        else
            memcpy(qt + h * dim, q + h * dim, dim * sizeof *qt);
    }
    for (uint32_t b = 0; b < N_QUERIES; b++)
        if (ops->score(state, &g, pool, pages + page_start[b], query_rows[b], q + b * H * dim,
                       w + b * H, v->n_heads, scale, cpu + (size_t)b * max_rows) != 0)
            bail_out("%s: CPU score failed", label);

    void *pool_dev = gpu_alloc(N_POOL_PAGES * page_bytes), *pages_dev = gpu_alloc(n_pages * 4 + 4);
    void *start_dev = gpu_alloc(sizeof page_start), *rows_dev = gpu_alloc(sizeof query_rows);
    void *q_dev = gpu_alloc(N_QUERIES * H * dim * sizeof *q);
    void *w_dev = gpu_alloc(N_QUERIES * H * sizeof *w);
    void *scores_dev = gpu_alloc((size_t)N_QUERIES * max_rows * sizeof *gpu);
    gpu_put(pool_dev, pool, N_POOL_PAGES * page_bytes);
    gpu_put(pages_dev, pages, n_pages * sizeof *pages);
    gpu_put(start_dev, page_start, sizeof page_start);
    gpu_put(rows_dev, query_rows, sizeof query_rows);
    gpu_put(q_dev, q, N_QUERIES * H * dim * sizeof *q);
    gpu_put(w_dev, w, N_QUERIES * H * sizeof *w);
    is_int(ops->score_cuda(state, &g, pool_dev, pages_dev, start_dev, rows_dev, N_QUERIES, max_rows,
                           q_dev, w_dev, v->n_heads, scale, scores_dev, NULL),
           0, "%s: score_cuda queued", label);
    gpu_sync();
    gpu_get(gpu, scores_dev, (size_t)N_QUERIES * max_rows * sizeof *gpu);

    for (uint32_t b = 0; b < N_QUERIES; b++) {
        for (uint32_t r = 0; r < max_rows; r++) {
            float got = gpu[(size_t)b * max_rows + r];
            uint32_t bits;
            memcpy(&bits, &got, sizeof bits);
            if (r >= query_rows[b]) {
                written += bits != 0xffffffffu;
                continue;
            }
            dsv4_indexk_slot s = {pages[page_start[b] + r / rpp], r % rpp};
            double mag = 0.0, err, bound;
            if (ops->load(state, &g, pool, &s, 1, k) != 0)
                bail_out("%s: load failed", label);
            for (size_t h = 0; h < H; h++) {
                double m = 0.0;
                for (size_t d = 0; d < dim; d++)
                    m += fabs((double)qt[(b * H + h) * dim + d] * k[d]);
                mag += fabs((double)w[b * H + h]) * m;
            }
            if (isnan(cpu[(size_t)b * max_rows + r])) {
                nan_rows++;
                if (!isnan(got) && over++ < 5)
                    diag("query %u row %u: gpu %a where the cpu has NaN", b, r, (double)got);
                continue;
            }
            bound = 2.0 * v->eps * fabs((double)scale) * mag;
            err = fabs((double)got - (double)cpu[(size_t)b * max_rows + r]);
            if (!(err <= bound) && over++ < 5)
                diag("query %u row %u: gpu %a, cpu %a, bound %a", b, r, (double)got,
                     (double)cpu[(size_t)b * max_rows + r], bound);
            if (bound > 0 && err / bound > worst)
                worst = err / bound;
        }
    }
    diag("%s: worst error %.3f of the bound", label, worst);
    is_int(over, 0, "%s: every score within the format's bound of the CPU plugin", label);
    if (e4m3)
        is_int(nan_rows, query_rows[1], "%s: a NaN in a head makes its query's scores NaN", label);
    is_int(written, 0, "%s: nothing written past a query's rows", label);

    /* each query alone, in a fresh buffer: same bits */
    void *alone_dev = gpu_alloc((size_t)max_rows * sizeof *alone);
    unsigned queued = 0, same = 0;
    for (uint32_t b = 0; b < N_QUERIES; b++) {
        queued +=
            ops->score_cuda(state, &g, pool_dev, pages_dev, (uint32_t *)start_dev + b,
                            (uint32_t *)rows_dev + b, 1, max_rows, (float *)q_dev + b * H * dim,
                            (float *)w_dev + b * H, v->n_heads, scale, alone_dev, NULL) == 0;
        gpu_sync();
        gpu_get(alone, alone_dev, (size_t)max_rows * sizeof *alone);
        same += !memcmp(alone, gpu + (size_t)b * max_rows, query_rows[b] * sizeof *alone);
    }
    is_int(queued, N_QUERIES, "%s: score_cuda of each query alone queued", label);
    is_int(same, N_QUERIES, "%s: no query's scores depend on the batch", label);

    gpu_free(alone_dev);
    gpu_free(pool_dev);
    gpu_free(pages_dev);
    gpu_free(start_dev);
    gpu_free(rows_dev);
    gpu_free(q_dev);
    gpu_free(w_dev);
    gpu_free(scores_dev);
    desc->fini(state);
    plugtest_config_free(desc, conf);
    free(qt);
    free(pool);
    free(rows);
    free(k);
    free(q);
    free(w);
    free(cpu);
    free(gpu);
    free(alone);
    free(pages);
    free(slots);
}

int main(void)
{
    static const variant variants[] = {
        {INDEXK_FP8, NULL, NULL, 64, 128, 64, 0x1p-11},
        {INDEXK_FP8, "ue8m0", NULL, 64, 128, 64, 0x1p-11},
        {INDEXK_BF16, NULL, NULL, 64, 128, 64, 0x1p-9},
        {INDEXK_F32, NULL, NULL, 64, 128, 64, 0x1p-14},
        {INDEXK_FP8, NULL, NULL, 32, 64, 8, 0x1p-11},
        {INDEXK_BF16, NULL, NULL, 32, 64, 2, 0x1p-9},
        {INDEXK_F32, NULL, NULL, 32, 64, 8, 0x1p-14},
        /* one tile per page; a row count not a power of two (a warp without a tile); the
         * largest pages (64 KiB bf16, two pipeline stages) */
        {INDEXK_FP8, NULL, NULL, 8, 128, 64, 0x1p-11},
        {INDEXK_BF16, NULL, NULL, 24, 128, 64, 0x1p-9},
        {INDEXK_BF16, NULL, NULL, 256, 128, 64, 0x1p-9},
        {INDEXK_FP8, NULL, NULL, 256, 64, 64, 0x1p-11},
        /* 64 x 128 pages (bf16: the tensor-map kernel, fp8: the wgmma kernel) with heads
         * past the query's masked; fp8 128 x 128 pages (two 64-row tiles a page) */
        {INDEXK_BF16, NULL, NULL, 64, 128, 12, 0x1p-9},
        {INDEXK_FP8, NULL, NULL, 64, 128, 12, 0x1p-11},
        {INDEXK_FP8, NULL, NULL, 128, 128, 64, 0x1p-11},
        /* e4m3 queries: on e4m3 MMAs (64 x 128 and 128 x 128 pages, 64 and 12 heads, both
         * scale formats), and as f16 values where those do not apply (256 x 128 pages: too
         * large for two stages there; 8 x 128; dim 64) */
        {INDEXK_FP8, NULL, "e4m3", 64, 128, 64, 0x1p-13},
        {INDEXK_FP8, "ue8m0", "e4m3", 64, 128, 64, 0x1p-13},
        {INDEXK_FP8, NULL, "e4m3", 64, 128, 12, 0x1p-13},
        {INDEXK_FP8, NULL, "e4m3", 128, 128, 64, 0x1p-13},
        {INDEXK_FP8, NULL, "e4m3", 256, 128, 64, 0x1p-13},
        {INDEXK_FP8, NULL, "e4m3", 8, 128, 64, 0x1p-13},
        {INDEXK_FP8, "ue8m0", "e4m3", 32, 64, 8, 0x1p-13},
    };
    size_t n_e4m3 = 0;

    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        n_e4m3 += variants[i].query_format != NULL;
    gpu_require();
    plan((int)(sizeof variants / sizeof variants[0] * 6 + n_e4m3));
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        run(&variants[i]);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
