/* indexk-topk-agreement.c: how often the indexer's top-k selection changes when the fp8
 * plugin scores an e4m3 query (query_format = e4m3) instead of the f32 query, on the CPU.
 *
 *   bench/indexk-topk-agreement [rows] [queries]
 *
 * Keys are stored as the fp8 plugin stores them (e4m3 with a row scale), queries scored as
 * given (f32) or quantised per head as the plugin's e4m3 query (man/dsv4d-indexk.5); the
 * exact score (f32 keys and query, double sums) is the reference. For each query: the
 * overlap |A n B| / k of two top-k sets (higher score first, ties to the lower row), for
 * fp8 keys f32 query against exact, fp8 keys e4m3 query against exact, and e4m3 against f32
 * query. Two data models (64 heads x 128 dims, head weights N(0, 1)):
 *   iid:      keys and queries N(0, 1) in every dim (scores near-tied everywhere: the
 *             hardest case for any rounding);
 *   outliers: a log-normal scale per channel (sigma 0.75; a few channels 5-10x the rest,
 *             shared by keys and queries, as activation outlier channels are), a mean key
 *             direction shared by all rows, and one row in 64 leaning towards the query
 *             (the rows an indexer is there to find), so the top of the ranking stands out.
 * Prints a markdown table: the mean and the worst overlap over the queries, and how deep in
 * the exact order the rows a rounded selection swaps in come from (the largest exact rank
 * among the selected rows, 1-based, averaged over the queries: k = no swap). */
#include "kernels/cpu/numfmt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADS 64
#define DIM 128
#define TOPK 512

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) * 0x1p-53;
}

static double normal(void)
{
    return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

/* x quantised as an fp8 row / e4m3 query is: e4m3(x / s) * s, s = max(amax, 1e-4) / 448 */
static void e4m3_round(const float *x, float *out)
{
    float amax = 0.0f, s;
    for (int d = 0; d < DIM; d++)
        amax = fmaxf(amax, fabsf(x[d]));
    s = fmaxf(amax, 1e-4f) / 448.0f;
    for (int d = 0; d < DIM; d++)
        out[d] = dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(x[d] / s)) * s;
}

/* The plugin's score loop (plugins/indexk/common.h): float sums, heads then dims. */
static float score_f(const float *q, const float *w, const float *k)
{
    float acc = 0.0f;
    for (int h = 0; h < HEADS; h++) {
        float dot = 0.0f;
        for (int d = 0; d < DIM; d++)
            dot += q[h * DIM + d] * k[d];
        acc += w[h] * (dot < 0.0f ? 0.0f : dot);
    }
    return acc;
}

static double score_d(const float *q, const float *w, const float *k)
{
    double acc = 0.0;
    for (int h = 0; h < HEADS; h++) {
        double dot = 0.0;
        for (int d = 0; d < DIM; d++)
            dot += (double)q[h * DIM + d] * k[d];
        acc += w[h] * (dot < 0.0 ? 0.0 : dot);
    }
    return acc;
}

static const double *sort_key;
static int by_score(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    if (sort_key[i] != sort_key[j])
        return sort_key[i] > sort_key[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* marks[r] |= bit for the top TOPK rows of s[0 .. n) */
static void top(const double *s, uint32_t n, uint32_t *idx, uint8_t *marks, uint8_t bit)
{
    for (uint32_t r = 0; r < n; r++)
        idx[r] = r;
    sort_key = s;
    qsort(idx, n, sizeof *idx, by_score);
    for (uint32_t i = 0; i < TOPK && i < n; i++)
        marks[idx[i]] |= bit;
}

int main(int argc, char **argv)
{
    const uint32_t n = argc > 1 ? (uint32_t)atoi(argv[1]) : 32768;
    const int n_q = argc > 2 ? atoi(argv[2]) : 8;
    float *keys = malloc((size_t)n * DIM * sizeof *keys), *kq = malloc((size_t)n * DIM * 4);
    double *s_exact = malloc(n * sizeof(double)), *s_f32 = malloc(n * sizeof(double));
    double *s_e4 = malloc(n * sizeof(double));
    uint32_t *idx = malloc(n * sizeof *idx), *rank = malloc(n * sizeof *rank);
    uint8_t *marks = malloc(n);
    float q[HEADS * DIM], qq[HEADS * DIM], w[HEADS], chan[DIM], mean[DIM];

    printf("| data | rows | queries | overlap: fp8 keys, f32 query vs exact (mean / worst) | fp8 "
           "keys, e4m3 query vs exact | e4m3 vs f32 query | deepest exact rank selected: f32 "
           "query | e4m3 query |\n|---|---|---|---|---|---|---|---|\n");
    for (int model = 0; model < 2; model++) {
        double sum[3] = {0}, worst[3] = {1, 1, 1}, depth[2] = {0};
        for (int d = 0; d < DIM; d++) {
            chan[d] = model ? (float)exp(0.75 * normal()) : 1.0f;
            mean[d] = model ? (float)(0.5 * normal()) : 0.0f;
        }
        for (int b = 0; b < n_q; b++) {
            for (int i = 0; i < HEADS * DIM; i++)
                q[i] = (float)normal() * chan[i % DIM];
            for (int h = 0; h < HEADS; h++) {
                w[h] = (float)normal();
                e4m3_round(q + h * DIM, qq + h * DIM);
            }
            for (uint32_t r = 0; r < n; r++) {
                float *k = keys + (size_t)r * DIM;
                const float lean = model && r % 64 == 0 ? 0.3f : 0.0f;
                for (int d = 0; d < DIM; d++)
                    k[d] = ((float)normal() + mean[d]) * chan[d] +
                           lean * q[(r / 64 % HEADS) * DIM + d];
                e4m3_round(k, kq + (size_t)r * DIM);
                s_exact[r] = score_d(q, w, k);
                s_f32[r] = score_f(q, w, kq + (size_t)r * DIM);
                s_e4[r] = score_f(qq, w, kq + (size_t)r * DIM);
            }
            memset(marks, 0, n);
            top(s_exact, n, idx, marks, 1);
            for (uint32_t i = 0; i < n; i++)
                rank[idx[i]] = i + 1;
            top(s_f32, n, idx, marks, 2);
            top(s_e4, n, idx, marks, 4);
            uint32_t both[3] = {0}, deep[2] = {0};
            for (uint32_t r = 0; r < n; r++) {
                both[0] += (marks[r] & 3) == 3;
                both[1] += (marks[r] & 5) == 5;
                both[2] += (marks[r] & 6) == 6;
                for (int c = 0; c < 2; c++)
                    if (marks[r] & (2 << c) && rank[r] > deep[c])
                        deep[c] = rank[r];
            }
            depth[0] += deep[0];
            depth[1] += deep[1];
            for (int c = 0; c < 3; c++) {
                double o = (double)both[c] / TOPK;
                sum[c] += o;
                worst[c] = o < worst[c] ? o : worst[c];
            }
        }
        printf("| %s | %u | %d | %.4f / %.4f | %.4f / %.4f | %.4f / %.4f | %.0f | %.0f |\n",
               model ? "outliers" : "iid", n, n_q, sum[0] / n_q, worst[0], sum[1] / n_q, worst[1],
               sum[2] / n_q, worst[2], depth[0] / n_q, depth[1] / n_q);
        fflush(stdout);
    }
    return 0;
}
