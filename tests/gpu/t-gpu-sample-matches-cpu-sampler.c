/* t-gpu-sample-matches-cpu-sampler: the CUDA sampler (kernels/cuda/sample.h) picks the
 * token dsv4_sample picks from the same logits, params and seeded rng, every row: greedy
 * (ties to the lower id, NaN and -0 as the CPU treats them) and seeded temperature / top-k
 * / top-p sampling alike. Both weigh the candidates in exact integers
 * (kernels/sample_weight.h), so no draw at a boundary is excused. Batches mix every kind of
 * row, up to 64 rows of V = 129280 (the real vocabulary): random, peaked, flat (every
 * candidate tied: the selections narrow down to the ids), few-valued (ties) and NaN /
 * -0 / -inf rows. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/sample.h"
#include "kernels/cuda/sample.h"

#define ROWS_MAX 64

typedef enum { F_RANDOM, F_PEAKED, F_FLAT, F_TIES, F_SPECIAL } fill_kind;

static const char *fill_name[] = {"random", "peaked", "flat", "ties", "nan/-0/-inf"};

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double unit(uint64_t *s)
{
    return (double)lcg(s) * 0x1.0p-53;
}

static void fill(float *x, uint32_t V, fill_kind kind, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint32_t i = 0; i < V; i++) {
        double u = unit(&s), v = unit(&s);
        double g = sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v); /* normal */
        switch (kind) {
        case F_RANDOM: x[i] = (float)(3 * g); break;
        case F_PEAKED: x[i] = (float)g; break;
        case F_FLAT: x[i] = 0.25f; break;
        case F_TIES: x[i] = (float)(lcg(&s) % 5); break;
        case F_SPECIAL:
            x[i] = (float)(lcg(&s) % 7) - 3;
            if (i % 11 == 3)
                x[i] = -0.0f;
            if (i % 13 == 5)
                x[i] = NAN;
            if (i % 17 == 2)
                x[i] = -INFINITY;
            break;
        }
    }
    if (kind == F_PEAKED)
        x[(uint32_t)(seed % V)] = 30;
    if (kind == F_SPECIAL && seed % 2) /* greedy keeps index 0 when it is NaN */
        x[0] = NAN;
}

typedef struct batch_stats {
    uint32_t rows, greedy_bad, sampled_bad;
} batch_stats;

/* Rows of `kinds` filled logits with params[i], `rounds` steps with seeded rngs on both
 * sides; counts mismatches. */
static batch_stats run_batch(dsv4_cuda_sampler *s, uint32_t V, uint32_t n,
                             const dsv4_sample_params *params, const fill_kind *kinds,
                             uint32_t rounds, uint64_t seed)
{
    batch_stats st = {0};
    float *x = malloc((size_t)n * V * sizeof(float));
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    dsv4_rng cpu_rng[ROWS_MAX], gpu_rng[ROWS_MAX];
    dsv4_cuda_sample_row rows[ROWS_MAX];
    int32_t got[ROWS_MAX];
    if (!x || !scratch || n > ROWS_MAX)
        bail_out("out of memory");
    float *x_dev = gpu_alloc((size_t)n * V * sizeof(float));
    int32_t *tok_dev = gpu_alloc(n * sizeof(int32_t));
    for (uint32_t i = 0; i < n; i++) {
        dsv4_rng_seed(&cpu_rng[i], seed + i);
        gpu_rng[i] = cpu_rng[i];
    }
    for (uint32_t round = 0; round < rounds; round++) {
        for (uint32_t i = 0; i < n; i++) {
            fill(x + (size_t)i * V, V, kinds[i], seed * 131 + round * 17 + i);
            const dsv4_sample_params *p = &params[i];
            rows[i] = (dsv4_cuda_sample_row){p->temperature, p->top_p, p->top_k, 0,
                                             dsv4_sample_draw(p, &gpu_rng[i])};
        }
        gpu_put(x_dev, x, (size_t)n * V * sizeof(float));
        if (dsv4_cuda_sample(s, x_dev, n, rows, tok_dev, NULL) != 0)
            bail_out("dsv4_cuda_sample failed");
        gpu_sync();
        gpu_get(got, tok_dev, n * sizeof(int32_t));
        for (uint32_t i = 0; i < n; i++) {
            const dsv4_sample_params *p = &params[i];
            const float *xi = x + (size_t)i * V;
            int32_t want = dsv4_sample(xi, V, p, &cpu_rng[i], scratch);
            st.rows++;
            if (got[i] == want)
                continue;
            if (dsv4_sample_greedy(p))
                st.greedy_bad++;
            else
                st.sampled_bad++;
            if (st.greedy_bad + st.sampled_bad <= 5)
                diag("V %u row %u (%s, T %g top_k %u top_p %g): cpu %d gpu %d", V, i,
                     fill_name[kinds[i]], p->temperature, p->top_k, p->top_p, want, got[i]);
        }
    }
    gpu_free(x_dev);
    gpu_free(tok_dev);
    free(x);
    free(scratch);
    return st;
}

/* Every combination of the params below over every fill, in batches of n rows. */
static void check_vocab(uint32_t V, uint32_t n, uint32_t rounds)
{
    const float temps[] = {0, 0.05f, 0.7f, 1, 2.5f};
    const float top_ps[] = {1, 0.9f, 0.5f, 0.01f, 0.999999f, 0};
    const uint32_t top_ks[] = {0, 1, 2, 40, V - 1, V, V + 5};
    dsv4_cuda_sampler *s = dsv4_cuda_sampler_new(n, V);
    if (!s)
        bail_out("dsv4_cuda_sampler_new(%u, %u) failed", n, V);
    dsv4_sample_params params[ROWS_MAX];
    fill_kind kinds[ROWS_MAX];
    batch_stats all = {0};
    uint32_t combos = 5 * 6 * 7 * 5, c = 0, seed = 1;
    while (c < combos) {
        uint32_t b = 0;
        for (; b < n && c < combos; b++, c++) {
            uint32_t t = c % 5, pp = c / 5 % 6, kk = c / 30 % 7, f = c / 210;
            params[b] = (dsv4_sample_params){temps[t], top_ps[pp], top_ks[kk]};
            kinds[b] = (fill_kind)f;
        }
        batch_stats st = run_batch(s, V, b, params, kinds, rounds, seed++);
        all.rows += st.rows;
        all.greedy_bad += st.greedy_bad;
        all.sampled_bad += st.sampled_bad;
    }
    dsv4_cuda_sampler_free(s);
    ok(all.greedy_bad == 0,
       "V %u: greedy rows pick dsv4_sample's token (%u rows of every kind, in batches of %u)", V,
       all.rows, n);
    ok(all.sampled_bad == 0, "V %u: seeded rows pick dsv4_sample's token (%u rows)", V, all.rows);
}

/* A batch where some rows want no token: they get -1, the others are unaffected. */
static void check_skip(void)
{
    uint32_t V = 1000, n = 4;
    dsv4_cuda_sampler *s = dsv4_cuda_sampler_new(n, V);
    float *x = malloc((size_t)n * V * sizeof(float));
    if (!s || !x)
        bail_out("sampler or memory");
    for (uint32_t i = 0; i < n; i++)
        fill(x + (size_t)i * V, V, F_PEAKED, 1000 + i);
    dsv4_cuda_sample_row rows[4] = {
        {0, 1, 0, 0, 0}, {0, 1, 0, 1, 0}, {1, 1, 0, 1, 0.5}, {1, 0.5f, 0, 0, 0.25}};
    float *x_dev = gpu_alloc((size_t)n * V * sizeof(float));
    int32_t *tok_dev = gpu_alloc(n * sizeof(int32_t)), got[4];
    gpu_put(x_dev, x, (size_t)n * V * sizeof(float));
    if (dsv4_cuda_sample(s, x_dev, n, rows, tok_dev, NULL) != 0)
        bail_out("dsv4_cuda_sample failed");
    gpu_sync();
    gpu_get(got, tok_dev, sizeof(got));
    int32_t peak0 = (int32_t)(1000 % V), peak3 = (int32_t)(1003 % V);
    ok(got[0] == peak0 && got[1] == -1 && got[2] == -1 && got[3] == peak3,
       "skipped rows get -1, the others their token (%d %d %d %d)", got[0], got[1], got[2], got[3]);
    ok(dsv4_cuda_sample(s, x_dev, n + 1, rows, tok_dev, NULL) == -EINVAL,
       "more rows than the sampler was made for: -EINVAL");
    gpu_free(x_dev);
    gpu_free(tok_dev);
    free(x);
    dsv4_cuda_sampler_free(s);
}

int main(void)
{
    gpu_require();
    plan(8);
    check_vocab(7, 16, 6);
    check_vocab(1000, 64, 3);
    check_vocab(129280, 64, 1);
    check_skip();
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
