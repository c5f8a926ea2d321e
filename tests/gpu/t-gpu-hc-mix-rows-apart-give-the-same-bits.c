/* t-gpu-hc-mix-rows-apart-give-the-same-bits: the mHC collapse asked to leave z's rows past
 * pre's apart (dsv4_cuda_hc_pre with *z_apart set, as the MoE's collapse runs) gives the
 * pre, u and expanded streams of the launch that computes them all, bit for bit; where it
 * says it left them (its clusters fill the GPU: at 200 tokens, never at 1) they are
 * unwritten, and dsv4_cuda_hc_mix_z over the expanded streams fills them with that launch's
 * bits; where it says not, z is that launch's already. For 4 and 6 streams, hidden sizes
 * that take 16-byte loads and that do not, with and without the block before's expand, at
 * token counts whose launches split the rows into different groups (1, 10, 16: a cluster a
 * token; 64, 200: four tokens a cluster, at 200 more clusters than fit the GPU at once). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOK 200

static uint32_t rng = 4242;

/* What one launch writes: pre, z, u and the expanded streams. */
typedef struct outputs {
    float *pre, *z, *u, *xo;
} outputs;

/* The model's inputs for one shape. */
typedef struct shape {
    dsv4_cuda_dims dims;
    size_t mix;
    float *x, *fn, *base, *scale, *norm, *y, *post, *comb;
} shape;

static void outputs_alloc(outputs *o, const shape *s)
{
    size_t N = s->dims.hc_mult, H = s->dims.hidden;
    o->pre = gpu_alloc(MAX_TOK * N * sizeof(float));
    o->z = gpu_alloc(MAX_TOK * s->mix * sizeof(float));
    o->u = gpu_alloc(MAX_TOK * H * sizeof(float));
    o->xo = gpu_alloc(MAX_TOK * N * H * sizeof(float));
}

/* every output overwritten with NaNs (the bytes 0xff), so an unwritten value shows */
static void outputs_poison(const outputs *o, const shape *s)
{
    size_t N = s->dims.hc_mult, H = s->dims.hidden;
    if (cudaMemset(o->pre, 0xff, MAX_TOK * N * sizeof(float)) != cudaSuccess ||
        cudaMemset(o->z, 0xff, MAX_TOK * s->mix * sizeof(float)) != cudaSuccess ||
        cudaMemset(o->u, 0xff, MAX_TOK * H * sizeof(float)) != cudaSuccess ||
        cudaMemset(o->xo, 0xff, MAX_TOK * N * H * sizeof(float)) != cudaSuccess)
        bail_out("cannot overwrite device memory");
    gpu_sync();
}

static void outputs_free(outputs *o)
{
    gpu_free(o->xo);
    gpu_free(o->u);
    gpu_free(o->z);
    gpu_free(o->pre);
}

static void shape_init(shape *s, uint32_t streams, uint32_t hidden)
{
    size_t N = streams, H = hidden;
    s->dims = (dsv4_cuda_dims){
        .hidden = hidden, .hc_mult = streams, .hc_iters = 20, .eps = 1e-6f, .hc_eps = 1e-6f};
    s->mix = (2 + N) * N;
    s->x = gpu_random(MAX_TOK * N * H, &rng);
    s->fn = gpu_random(s->mix * N * H, &rng);
    s->base = gpu_random(s->mix, &rng);
    s->scale = gpu_random(3, &rng);
    s->norm = gpu_random(H, &rng);
    s->y = gpu_random(MAX_TOK * H, &rng);
    s->post = gpu_random(MAX_TOK * N, &rng);
    s->comb = gpu_random(MAX_TOK * N * N, &rng);
}

static void shape_free(shape *s)
{
    float *all[] = {s->x, s->fn, s->base, s->scale, s->norm, s->y, s->post, s->comb};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        gpu_free(all[i]);
}

/* n floats at a and b hold the same bytes */
static bool same(const float *a, const float *b, size_t n)
{
    float *ha = malloc(n * sizeof(float)), *hb = malloc(n * sizeof(float));
    if (!ha || !hb)
        bail_out("out of memory");
    gpu_get(ha, a, n * sizeof(float));
    gpu_get(hb, b, n * sizeof(float));
    bool eq = memcmp(ha, hb, n * sizeof(float)) == 0;
    free(ha);
    free(hb);
    return eq;
}

/* z's n rows: the first N values of each as ref's, every value past them still the poison */
static bool pre_rows_alone(const float *z, const float *ref, size_t n, size_t N, size_t mix)
{
    float *hz = malloc(n * mix * sizeof(float)), *hr = malloc(n * mix * sizeof(float));
    if (!hz || !hr)
        bail_out("out of memory");
    gpu_get(hz, z, n * mix * sizeof(float));
    gpu_get(hr, ref, n * mix * sizeof(float));
    bool ok = true;
    for (size_t t = 0; t < n && ok; t++) {
        ok = memcmp(hz + t * mix, hr + t * mix, N * sizeof(float)) == 0;
        for (size_t m = N; m < mix && ok; m++) {
            uint32_t bits;
            memcpy(&bits, hz + t * mix + m, sizeof(bits));
            ok = bits == 0xffffffffu;
        }
    }
    free(hz);
    free(hr);
    return ok;
}

static int collapse(const shape *s, uint32_t n, bool expand, const outputs *o, bool *z_apart,
                    void *stream)
{
    dsv4_cuda_hc_expand ex = {{.y = s->y}, s->post, s->comb};
    return dsv4_cuda_hc_pre(&s->dims, n, s->x, expand ? &ex : NULL, expand ? o->xo : NULL, s->fn,
                            s->base, s->scale, s->norm, o->pre, o->z, o->u, NULL, z_apart, stream);
}

static void check(const shape *s, uint32_t n, bool expand, const outputs *ref, const outputs *got,
                  void *stream)
{
    size_t N = s->dims.hc_mult, H = s->dims.hidden;
    char what[96];
    snprintf(what, sizeof(what), "%zu streams, hidden %zu, %u tokens, %s", N, H, n,
             expand ? "expanded first" : "no expand");
    outputs_poison(ref, s);
    outputs_poison(got, s);
    bool apart = true;
    int rc = collapse(s, n, expand, ref, NULL, stream);
    if (rc == 0)
        rc = collapse(s, n, expand, got, &apart, stream);
    if (rc == 0)
        rc = dsv4_cuda_sync(stream);
    ok(rc == 0 && same(got->pre, ref->pre, n * N) && same(got->u, ref->u, n * H) &&
           (!expand || same(got->xo, ref->xo, n * N * H)) &&
           (apart ? pre_rows_alone(got->z, ref->z, n, N, s->mix)
                  : same(got->z, ref->z, n * s->mix)),
       "%s: pre, u%s the bits of one launch's, z %s (%d)", what,
       expand ? ", the expanded streams" : "",
       apart ? "past pre's rows unwritten (left apart)" : "whole (nothing left apart)", rc);
    if (n == 1 || n == MAX_TOK)
        ok(apart == (n == MAX_TOK), "%s: %s", what,
           n == 1 ? "the rest of z has room beside the collapse: nothing left apart"
                  : "the collapse's clusters fill the GPU: the rest of z left apart");
    if (rc == 0 && apart)
        rc = dsv4_cuda_hc_mix_z(&s->dims, n, expand ? got->xo : s->x, s->fn, got->z, stream);
    if (rc == 0)
        rc = dsv4_cuda_sync(stream);
    ok(rc == 0 && same(got->z, ref->z, n * s->mix), "%s: z%s: one launch's bits (%d)", what,
       apart ? " with the rest computed apart" : "", rc);
}

int main(void)
{
    gpu_require();
    static const uint32_t streams[] = {4, 6}, hiddens[] = {1024, 1000},
                          tokens[] = {1, 10, 16, 64, MAX_TOK};
    const size_t ns = sizeof(streams) / sizeof(streams[0]),
                 nh = sizeof(hiddens) / sizeof(hiddens[0]), nt = sizeof(tokens) / sizeof(tokens[0]);
    plan((int)(ns * nh * (nt * 2 + 2) * 2)); /* two checks a case, one more at 1 and 200 */
    void *stream;
    if (dsv4_cuda_stream_new(&stream) != 0)
        bail_out("no CUDA stream");
    for (size_t i = 0; i < ns; i++)
        for (size_t j = 0; j < nh; j++) {
            shape s;
            outputs ref, got;
            shape_init(&s, streams[i], hiddens[j]);
            outputs_alloc(&ref, &s);
            outputs_alloc(&got, &s);
            for (size_t k = 0; k < nt; k++)
                for (int expand = 0; expand <= 1; expand++)
                    check(&s, tokens[k], expand, &ref, &got, stream);
            outputs_free(&got);
            outputs_free(&ref);
            shape_free(&s);
        }
    dsv4_cuda_stream_free(stream);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
