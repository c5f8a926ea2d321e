/* t-gpu-topk-matches-cpu-order: dsv4_cuda_topk returns exactly what the CPU engine's
 * dsv4_k_topk returns (same rows, same order: higher score first, ties to the lower row,
 * NaN last) for many queries in one launch: 256k distinct scores with k = 512, heavy ties
 * (only a few distinct values, so the k-th value is shared across blocks and the rows
 * decide), every score equal, distinct scores packed into one narrow range (more scores
 * share the first radix digits than the list every block gathers holds, so the cluster
 * takes several passes), NaN, infinities and signed zeros, fewer positive scores than k
 * among +0 and -0 (the k-th is a zero: the kernel's integer pre-test of the scores' bits
 * must not drop -0), a few far outliers over scores all equal (the kernel ranks its list
 * by buckets over the list's span: the equal ones all share the lowest bucket), fewer rows
 * than k (the rest filled with UINT32_MAX), exactly k rows, no rows, k = 1 and k = 2048,
 * and long queries.
 * Batches of 1, 8, 16 and 64 queries (small batches run in 16-block clusters, large ones
 * in 8-block clusters), queries whose slices fit in shared memory and ones whose slices do
 * not (1M rows alone, 400k rows in a batch of 64: read from global memory), and scores that
 * start off a 16-byte boundary (the slice's bulk copy starts at the first aligned score). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x6a09e667f3bcc909ull;

static uint32_t rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

typedef enum kind { DISTINCT, TIES, SPECIALS, EQUAL, NARROW, ZEROS, OUTLIERS } kind;
static const char *const kind_names[] = {"distinct",
                                         "ties",
                                         "specials",
                                         "all equal",
                                         "narrow",
                                         "signed zeros",
                                         "outliers over equal scores"};

static float draw(kind how)
{
    switch (how) {
    case DISTINCT: return (float)((double)rand32() / 4294967296.0 * 200.0 - 100.0);
    case TIES: return (float)(rand32() % 5) * 0.5f;
    case SPECIALS: {
        static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f};
        uint32_t r = rand32() % 16;
        return r < 7 ? special[r] : (float)(rand32() % 1000) - 500.0f;
    }
    case EQUAL: return 0.25f;
    case NARROW: return 1.0f + (float)(rand32() % (1u << 20)) * 0x1p-23f; /* [1, 1.125) */
    case ZEROS: {
        uint32_t r = rand32();
        return r % 1024 == 0 ? (float)(r >> 10) : (r & 1) ? 0.0f : -0.0f; /* 1 in 1024 > 0 */
    }
    case OUTLIERS: return rand32() % 65536 == 0 ? 1e30f : 1.0f;
    }
    return 0.0f;
}

/* One launch over n_q queries of up to stride rows, the scores shift floats past the start
 * of their allocation; compares every query. */
static void check_at(const char *what, kind how, const uint32_t *n_rows, uint32_t n_q,
                     size_t stride, uint32_t k, size_t shift)
{
    float *s = malloc(n_q * stride * sizeof *s);
    uint32_t *got = malloc((size_t)n_q * k * sizeof *got), *want = malloc(k * sizeof *want);
    float *s_base = gpu_alloc((n_q * stride + shift) * sizeof *s), *s_dev = s_base + shift;
    uint32_t *rows_dev = gpu_alloc(n_q * sizeof *n_rows), *idx_dev = gpu_alloc(n_q * k * 4);
    unsigned bad = 0;

    for (size_t i = 0; i < n_q * stride; i++)
        s[i] = draw(how);
    gpu_put(s_dev, s, n_q * stride * sizeof *s);
    gpu_put(rows_dev, n_rows, n_q * sizeof *n_rows);
    is_int(dsv4_cuda_topk(s_dev, stride, rows_dev, n_q, k, idx_dev, NULL), 0, "%s (%s): queued",
           what, kind_names[how]);
    gpu_sync();
    gpu_get(got, idx_dev, (size_t)n_q * k * sizeof *got);
    for (uint32_t b = 0; b < n_q; b++) {
        uint32_t kk = n_rows[b] < k ? n_rows[b] : k;
        for (uint32_t i = 0; i < k; i++)
            want[i] = UINT32_MAX;
        dsv4_k_topk(s + b * stride, n_rows[b], kk, want);
        for (uint32_t i = 0; i < k; i++) {
            if (got[(size_t)b * k + i] != want[i] && bad++ < 5)
                diag("query %u rank %u: row %u, cpu row %u", b, i, got[(size_t)b * k + i], want[i]);
        }
    }
    is_int(bad, 0, "%s (%s): same rows in the same order as the CPU", what, kind_names[how]);
    free(s);
    free(got);
    free(want);
    gpu_free(s_base);
    gpu_free(rows_dev);
    gpu_free(idx_dev);
}

static void check(const char *what, kind how, const uint32_t *n_rows, uint32_t n_q, size_t stride,
                  uint32_t k)
{
    check_at(what, how, n_rows, n_q, stride, k, 0);
}

/* n_q queries of n rows each. */
static void check_same(const char *what, kind how, uint32_t n, uint32_t n_q, uint32_t k)
{
    uint32_t *n_rows = malloc(n_q * sizeof *n_rows);
    for (uint32_t b = 0; b < n_q; b++)
        n_rows[b] = n;
    check(what, how, n_rows, n_q, n, k);
    free(n_rows);
}

int main(void)
{
    static const uint32_t batch[] = {262144, 100000, 0, 511, 262143, 1, 70000, 262144};
    static const uint32_t one_big[] = {262144};
    static const uint32_t long_query[] = {400000};
    static const uint32_t few[] = {100, 5, 2047};
    static const uint32_t exact_k[] = {1000, 999, 1000};

    uint32_t many[64];
    for (uint32_t b = 0; b < 64; b++)
        many[b] = b % 9 == 0 ? 262144 - b : (b * 40503u) % 262144; /* 0 .. 256k, some full */

    gpu_require();
    plan(2 * 25);
    check("one query, 256k rows, k 512", DISTINCT, one_big, 1, 262144, 512);
    check("8 queries of 0..256k rows, k 512", DISTINCT, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", TIES, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", SPECIALS, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", EQUAL, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", NARROW, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", ZEROS, batch, 8, 262144, 512);
    check("8 queries of 0..256k rows, k 512", OUTLIERS, batch, 8, 262144, 512);
    check("as many rows as k", DISTINCT, exact_k, 3, 1000, 1000);
    check("as many rows as k", TIES, exact_k, 3, 1000, 1000);
    check("k 2048", NARROW, batch, 8, 262144, 2048);
    check("fewer rows than k", DISTINCT, few, 3, 2047, 2048);
    check("k 1", TIES, batch, 8, 262144, 1);
    check("k 2048", TIES, batch, 8, 262144, 2048);
    check("400k rows in one query", DISTINCT, long_query, 1, 400000, 512);
    check("400k rows in one query", TIES, long_query, 1, 400000, 512);
    check_same("1M rows in one query", DISTINCT, 1u << 20, 1, 512);
    check_same("1M rows in one query", TIES, 1u << 20, 1, 512);
    check_same("16 queries of 256k rows, k 512", DISTINCT, 262144, 16, 512);
    check("64 queries of 0..256k rows, k 512", DISTINCT, many, 64, 262144, 512);
    check("64 queries of 0..256k rows, k 512", TIES, many, 64, 262144, 512);
    check_same("64 queries of 400k rows, k 512", DISTINCT, 400000, 64, 512);
    check_same("64 queries of 400k rows, k 512", TIES, 400000, 64, 512);
    check_at("8 queries off a 16-byte boundary", DISTINCT, batch, 8, 262144, 512, 1);
    check_at("one query off a 16-byte boundary", TIES, one_big, 1, 262144, 512, 3);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
