/* sample-decode: what a decode step's token choice costs at the real vocabulary (V =
 * 129280) for batches of 1, 8, 64 and 256 rows: on the device (kernels/cuda/sample.h:
 * params and draws up, the sampler, the token ids down) against the host path it replaces
 * (the rows' logits copied down as the CUDA forward does, then dsv4_sample per row; up to
 * 8 rows, since a full sort of the vocabulary on one core takes some 30 ms per row).
 * Median of the repetitions, one Markdown table on stdout. CUDA builds only; run by hand
 * on a GPU machine, results in bench/results/. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench-util.h"
#include "core/engine/sample.h"
#include "kernels/cuda/model.h"
#include "kernels/cuda/sample.h"

#define V 129280u
#define ROWS_MAX 256u
#define REPS 5
#define HOST_ROWS_MAX 8u
/* the forward's head computes and samples this many rows per launch sequence */
#define CHUNK 64u

typedef struct mode {
    const char *name;
    dsv4_sample_params p;
} mode;

static void die(const char *what)
{
    fprintf(stderr, "sample-decode: %s failed\n", what);
    exit(1);
}

static uint64_t median(uint64_t *t)
{
    bench_sort_u64(t, REPS);
    return t[REPS / 2];
}

int main(void)
{
    static const mode modes[] = {{"greedy", {0, 1, 0}},
                                 {"T 0.8, top_p 0.95", {0.8f, 0.95f, 0}},
                                 {"T 1, top_k 50", {1, 1, 50}},
                                 {"T 1 (whole vocabulary)", {1, 1, 0}}};
    static const uint32_t batches[] = {1, 8, 64, 256};
    if (dsv4_cuda_device_use(-1, NULL, 0) != 0)
        die("a CUDA device");
    void *stream;
    float *x = malloc((size_t)ROWS_MAX * V * sizeof(float));
    float *down = malloc((size_t)CHUNK * V * sizeof(float));
    void *scratch = malloc(DSV4_SAMPLE_SCRATCH(V));
    float *x_dev = dsv4_cuda_alloc((size_t)ROWS_MAX * V * sizeof(float));
    dsv4_cuda_sample_row rows[CHUNK];
    int32_t tok[CHUNK], *tok_dev = dsv4_cuda_alloc(sizeof(tok));
    dsv4_cuda_sampler *s = dsv4_cuda_sampler_new(CHUNK, V);
    if (!x || !down || !scratch || !x_dev || !tok_dev || !s || dsv4_cuda_stream_new(&stream) != 0)
        die("allocation");
    /* logits shaped like a model's: a normal spread of 3 around a few high ones */
    uint64_t st = 1;
    for (size_t i = 0; i < (size_t)ROWS_MAX * V; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u = ((st >> 11) + 0.5) * 0x1.0p-53;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double w = (st >> 11) * 0x1.0p-53;
        x[i] = (float)(3 * sqrt(-2 * log(u)) * cos(6.283185307179586 * w)) +
               (i % V < 4 ? 12.0f : 0.0f);
    }
    if (dsv4_cuda_copy(x_dev, x, (size_t)ROWS_MAX * V * sizeof(float), stream) != 0 ||
        dsv4_cuda_sync(stream) != 0)
        die("upload");
    printf("| rows | params | device sampler (us) | logits down + dsv4_sample (us) | "
           "speedup |\n|---|---|---|---|---|\n");
    for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); b++) {
        uint32_t n = batches[b];
        for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++) {
            const dsv4_sample_params *p = &modes[mi].p;
            dsv4_rng rng;
            dsv4_rng_seed(&rng, 7);
            uint64_t dev[REPS], host[REPS];
            for (int r = 0; r < REPS; r++) {
                uint64_t t0 = bench_now_ns();
                for (uint32_t c = 0; c < n; c += CHUNK) {
                    uint32_t m = n - c < CHUNK ? n - c : CHUNK;
                    for (uint32_t i = 0; i < m; i++)
                        rows[i] = (dsv4_cuda_sample_row){p->temperature, p->top_p, p->top_k, 0,
                                                         dsv4_sample_draw(p, &rng)};
                    if (dsv4_cuda_sample(s, x_dev + (size_t)c * V, m, rows, tok_dev, stream) != 0 ||
                        dsv4_cuda_copy(tok, tok_dev, m * sizeof(int32_t), stream) != 0 ||
                        dsv4_cuda_sync(stream) != 0)
                        die("the device sampler");
                }
                uint64_t t1 = bench_now_ns();
                for (uint32_t c = 0; n <= HOST_ROWS_MAX && c < n; c += CHUNK) {
                    uint32_t m = n - c < CHUNK ? n - c : CHUNK;
                    if (dsv4_cuda_copy(down, x_dev + (size_t)c * V, (size_t)m * V * sizeof(float),
                                       stream) != 0 ||
                        dsv4_cuda_sync(stream) != 0)
                        die("the copy down");
                    for (uint32_t i = 0; i < m; i++)
                        tok[i] = dsv4_sample(down + (size_t)i * V, V, p, &rng, scratch);
                }
                uint64_t t2 = bench_now_ns();
                dev[r] = t1 - t0;
                host[r] = t2 - t1;
            }
            double d = median(dev) / 1e3, h = median(host) / 1e3;
            if (n <= HOST_ROWS_MAX)
                printf("| %u | %s | %.0f | %.0f | %.1fx |\n", n, modes[mi].name, d, h, h / d);
            else
                printf("| %u | %s | %.0f | not run | |\n", n, modes[mi].name, d);
            fflush(stdout);
        }
    }
    dsv4_cuda_sampler_free(s);
    dsv4_cuda_free(x_dev);
    dsv4_cuda_free(tok_dev);
    dsv4_cuda_stream_free(stream);
    free(x);
    free(down);
    free(scratch);
    return 0;
}
