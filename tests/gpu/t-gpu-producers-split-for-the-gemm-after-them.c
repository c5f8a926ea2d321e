/* t-gpu-producers-split-for-the-gemm-after-them: the kernels that write a GEMM's inputs
 * write them split into bf16 hi and lo parts where that GEMM would split them itself, and
 * the GEMM, called without its f32 inputs (the split buffer overwritten with NaNs before the
 * producer runs), gives what it gives from them. The MoE's gather and SwiGLU for the
 * grouped experts (dsv4_cuda_linear_grouped_split): gather -> experts' gate/up and SwiGLU ->
 * experts' down, the same bits, deterministic and fast, at row counts that split once. The
 * mHC collapse and the row RMSNorm for the dense GEMM that reads their rows next
 * (dsv4_cuda_linear_split: ffn_in's place, wq_b's): their rows unchanged, the GEMM's bits in
 * deterministic mode; in fast mode, whose k splits add into Y with atomics (Y overwritten
 * with NaNs too), the producer zeroes Y's rows and the GEMM agrees within rounding. Without the
 * producer's rows the GEMM does not give those values (the check's own control). Where the GEMM
 * would not split once (few rows, an FP8 or narrow weight, cuBLAS's long fast steps) the query
 * answers NULL and a call without inputs is refused, as are producers asked to split rows they
 * cannot. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GROUPS 4
#define TOP_K 2
#define TOKENS 48 /* 96 pairs: 48 rows a group on average, tiles of 64 rows split once */
#define FEW 4     /* 8 pairs: tiles of 8 rows split by the tiles */
#define HID 256   /* the gather's row, the down projection's output is OUT */
#define INTER 256 /* the SwiGLU's row */
#define OUT 2048  /* outputs a matrix: wide enough to split once */
#define HC 4      /* the collapse's streams */
#define CHID 1024 /* its hidden size: the dense GEMM's inputs, 16 k blocks */
#define COUT 2176 /* the dense GEMM's outputs (17 tiles of 128): fast mode splits k 4 ways */
#define CROWS 48  /* tokens: a tile of 64 rows, split once */
#define CLONG 300 /* a fast step this long goes to cuBLAS */

typedef struct fixture {
    void *stream;
    dsv4_cuda_blas *blas;
    dsv4_cuda_weight up, down, fp8, wide, narrow;
    float *u, *xe, *gu, *he, *y, *y_ref;
    uint32_t *assign, *off;
    /* the collapse: dims, streams x, its projections and norm, its outputs */
    dsv4_cuda_dims dims;
    float *x, *fn, *base, *scale, *norm, *pre, *z, *cu, *cu_ref;
} fixture;

static uint32_t rng = 12345;

/* count matrices of out x in, random, stored in fmt (values it holds exactly: sixty-fourths
 * for bf16, quarters for fp8) */
static dsv4_cuda_weight weight(void *stream, dsv4_cuda_wfmt fmt, uint32_t count, size_t out,
                               size_t in)
{
    size_t n = (size_t)count * out * in, sb, db = dsv4_cuda_weight_bytes(fmt, count, out, in, &sb);
    float *h = malloc(n * sizeof(float)), steps = fmt == DSV4_CUDA_W_FP8 ? 4.0f : 64.0f;
    if (!h)
        bail_out("out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((int)(gpu_uniform(&rng) * steps)) / steps;
    float *src = gpu_alloc(n * sizeof(float));
    gpu_put(src, h, n * sizeof(float));
    free(h);
    uint32_t *flag = gpu_alloc(sizeof(uint32_t));
    void *data = gpu_alloc(db), *scale = sb ? gpu_alloc(sb) : NULL;
    bool exact = false;
    if (dsv4_cuda_weight_pack(src, count, out, in, fmt, data, scale, flag, stream, &exact) != 0 ||
        !exact)
        bail_out("packing a weight failed");
    gpu_free(flag);
    gpu_free(src);
    return (dsv4_cuda_weight){fmt, data, scale};
}

/* Pairs grouped by expert for tokens tokens: pair j of token j / TOP_K, spread over the
 * groups unevenly (off[g] the first row of group g). */
static void route(fixture *f, uint32_t tokens)
{
    uint32_t pairs = tokens * TOP_K, assign[TOKENS * TOP_K], off[GROUPS + 1], r = 0;
    for (uint32_t g = 0; g < GROUPS; g++) {
        off[g] = r;
        for (uint32_t j = 0; j < pairs; j++)
            if ((j * 7 + j / 5) % GROUPS == g)
                assign[r++] = j;
    }
    off[GROUPS] = r;
    gpu_put(f->assign, assign, pairs * sizeof(uint32_t));
    gpu_put(f->off, off, sizeof(off));
}

/* n bytes of device memory overwritten with NaNs (f32 and bf16 alike). */
static void nans(void *dev, size_t n)
{
    if (cudaMemset(dev, 0xff, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
        bail_out("cannot overwrite device memory");
}

/* The split buffer of rows rows of in overwritten with NaNs, so that a GEMM that reads it
 * sees only what the producer wrote after (the reference call's own split left the same
 * bits there). */
static void poison(void *split, size_t rows, size_t in)
{
    if (split) /* else the query's check has failed already; the call without inputs will too */
        nans(split, 2 * rows * in * 2);
}

static float *host_copy(const float *dev, size_t n)
{
    float *h = malloc(n * sizeof(float));
    if (!h)
        bail_out("out of memory");
    gpu_get(h, dev, n * sizeof(float));
    return h;
}

/* a and b's n floats: the same bits (tol < 0), or every a finite and within tol of b's
 * largest magnitude */
static bool agree(const float *a_dev, const float *b_dev, size_t n, float tol)
{
    float *a = host_copy(a_dev, n), *b = host_copy(b_dev, n);
    bool same = memcmp(a, b, n * sizeof(float)) == 0;
    if (tol >= 0.0f) {
        float big = 0.0f;
        for (size_t i = 0; i < n; i++)
            big = fmaxf(big, fabsf(b[i]));
        same = true;
        for (size_t i = 0; i < n && same; i++)
            same = isfinite(a[i]) && fabsf(a[i] - b[i]) <= tol * big;
    }
    free(a);
    free(b);
    return same;
}

static bool same_bits(const fixture *f, size_t n)
{
    return agree(f->y, f->y_ref, n, -1.0f);
}

static void check_mode(fixture *f, const char *mode)
{
    uint32_t pairs = TOKENS * TOP_K;
    route(f, TOKENS);
    /* gather -> gate/up */
    void *split = dsv4_cuda_linear_grouped_split(f->blas, &f->up, OUT, HID, HID, GROUPS, pairs);
    ok(split != NULL, "%s: gate/up of %u rows splits once: the split buffer", mode, pairs);
    int rc = dsv4_cuda_moe_gather(TOKENS, TOP_K, HID, f->u, f->assign, f->xe, NULL, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(f->blas, &f->up, OUT, HID, f->xe, HID, f->off, GROUPS, pairs,
                                      f->y_ref, OUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    poison(split, pairs, HID);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(f->blas, &f->up, OUT, HID, NULL, HID, f->off, GROUPS, pairs,
                                      f->y, OUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    ok(rc == 0 && !same_bits(f, (size_t)pairs * OUT),
       "%s: control: gate/up without the gather's split rows does not give those bits (%d)", mode,
       rc);
    if (rc == 0)
        rc = dsv4_cuda_moe_gather(TOKENS, TOP_K, HID, f->u, f->assign, f->xe, split, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(f->blas, &f->up, OUT, HID, NULL, HID, f->off, GROUPS, pairs,
                                      f->y, OUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    ok(rc == 0 && same_bits(f, (size_t)pairs * OUT),
       "%s: gate/up from the gather's split rows: the bits of its own split (%d)", mode, rc);

    /* SwiGLU -> down */
    split = dsv4_cuda_linear_grouped_split(f->blas, &f->down, OUT, INTER, INTER, GROUPS, pairs);
    ok(split != NULL, "%s: down of %u rows splits once: the split buffer", mode, pairs);
    dsv4_cuda_swiglu_rows rows = {pairs, 2 * INTER, f->gu, f->gu + INTER, f->he, NULL};
    rc = dsv4_cuda_swiglu(&rows, INTER, 7.0f, DSV4_K_SILU, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(f->blas, &f->down, OUT, INTER, f->he, INTER, f->off, GROUPS,
                                      pairs, f->y_ref, OUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    poison(split, pairs, INTER);
    rows.split = split;
    if (rc == 0)
        rc = dsv4_cuda_swiglu(&rows, INTER, 7.0f, DSV4_K_SILU, f->stream);
    if (rc == 0)
        rc = dsv4_cuda_linear_grouped(f->blas, &f->down, OUT, INTER, NULL, INTER, f->off, GROUPS,
                                      pairs, f->y, OUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    ok(rc == 0 && same_bits(f, (size_t)pairs * OUT),
       "%s: down from the SwiGLU's split rows: the bits of its own split (%d)", mode, rc);

    /* no split once: few rows, an FP8 weight */
    uint32_t few = FEW * TOP_K;
    route(f, FEW);
    ok(dsv4_cuda_linear_grouped_split(f->blas, &f->up, OUT, HID, HID, GROUPS, few) == NULL,
       "%s: gate/up of %u rows splits by the tiles: no split buffer", mode, few);
    rc = dsv4_cuda_linear_grouped(f->blas, &f->up, OUT, HID, NULL, HID, f->off, GROUPS, few, f->y,
                                  OUT);
    ok(rc == -EINVAL, "%s: gate/up of %u rows without its inputs is refused (%d)", mode, few, rc);
    ok(dsv4_cuda_linear_grouped_split(f->blas, &f->fp8, OUT, HID, HID, GROUPS, pairs) == NULL,
       "%s: an FP8 weight's GEMM takes f32 inputs: no split buffer", mode);
    ok(dsv4_cuda_sync(f->stream) == 0, "%s: the stream is sound after the refusals", mode);
}

/* A producer of CROWS rows of CHID for the dense GEMM, into rows, with us (NULL: none). */
typedef int (*producer)(fixture *f, float *rows, const dsv4_cuda_split_out *us);

/* the collapse of CROWS tokens' streams */
static int collapse(fixture *f, float *rows, const dsv4_cuda_split_out *us)
{
    return dsv4_cuda_hc_pre(&f->dims, CROWS, f->x, NULL, NULL, f->fn, f->base, f->scale, f->norm,
                            f->pre, f->z, rows, us, NULL, f->stream);
}

/* the RMSNorm of CROWS rows (the q norm before wq_b), in place over a copy of x's */
static int norm(fixture *f, float *rows, const dsv4_cuda_split_out *us)
{
    if (cudaMemcpy(rows, f->x, (size_t)CROWS * CHID * sizeof(float), cudaMemcpyDeviceToDevice) !=
        cudaSuccess)
        return -EIO;
    return dsv4_cuda_rmsnorm_rows(CROWS, CHID, CHID, rows, f->norm, 1e-6f, us, f->stream);
}

/* The dense GEMM from the rows `produce` wrote split against the GEMM from its f32 rows. */
static void check_dense(fixture *f, const char *mode, bool det, const char *what, producer produce)
{
    size_t ny = (size_t)CROWS * COUT;
    bool zero;
    void *split = dsv4_cuda_linear_split(f->blas, &f->wide, COUT, CHID, CHID, CROWS, &zero);
    ok(split != NULL, "%s: a dense GEMM of %u rows and %u outputs splits once: the split buffer",
       mode, CROWS, COUT);
    ok(zero == !det, "%s: %s", mode,
       det ? "its splits add in order, nothing to zero"
           : "its k splits add into Y with atomics: the producer zeroes Y's rows");
    int rc = produce(f, f->cu_ref, NULL);
    if (rc == 0)
        rc =
            dsv4_cuda_linear(f->blas, &f->wide, COUT, CHID, f->cu_ref, CHID, CROWS, f->y_ref, COUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    poison(split, CROWS, CHID);
    nans(f->y, ny * sizeof(float));
    if (rc == 0)
        rc = dsv4_cuda_linear(f->blas, &f->wide, COUT, CHID, NULL, CHID, CROWS, f->y, COUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    ok(rc == 0 && !agree(f->y, f->y_ref, ny, 1e-5f),
       "%s: control: the dense GEMM without the %s's split rows does not give its values (%d)",
       mode, what, rc);
    poison(split, CROWS, CHID);
    nans(f->y, ny * sizeof(float));
    dsv4_cuda_split_out us = {split, zero ? f->y : NULL, COUT, COUT};
    if (rc == 0)
        rc = produce(f, f->cu, &us);
    if (rc == 0)
        rc = dsv4_cuda_linear(f->blas, &f->wide, COUT, CHID, NULL, CHID, CROWS, f->y, COUT);
    if (rc == 0)
        rc = dsv4_cuda_sync(f->stream);
    ok(rc == 0 && agree(f->cu, f->cu_ref, (size_t)CROWS * CHID, -1.0f),
       "%s: the %s's rows are the same bits with their split written too (%d)", mode, what, rc);
    if (det)
        ok(rc == 0 && agree(f->y, f->y_ref, ny, -1.0f),
           "%s: the dense GEMM from the %s's split rows: the bits of its own split (%d)", mode,
           what, rc);
    else
        ok(rc == 0 && agree(f->y, f->y_ref, ny, 1e-5f),
           "%s: the dense GEMM from the %s's split rows, Y zeroed by it: within 1e-5 of its own "
           "split's (%d)",
           mode, what, rc);
}

/* Where the dense GEMM does not split once, and the stream after the refusals. */
static void check_dense_refusals(fixture *f, const char *mode, bool det)
{
    bool zero;
    int rc;
    /* no split once: few rows, a narrow weight, an FP8 one, cuBLAS's long fast steps */
    ok(dsv4_cuda_linear_split(f->blas, &f->wide, COUT, CHID, CHID, FEW, &zero) == NULL && !zero,
       "%s: a dense GEMM of %u rows splits by the tiles: no split buffer", mode, FEW);
    rc = dsv4_cuda_linear(f->blas, &f->wide, COUT, CHID, NULL, CHID, FEW, f->y, COUT);
    ok(rc == -EINVAL, "%s: that GEMM without its inputs is refused (%d)", mode, rc);
    ok(dsv4_cuda_linear_split(f->blas, &f->narrow, OUT / 2, CHID, CHID, CROWS, &zero) == NULL,
       "%s: a dense GEMM of %u outputs splits by the tiles: no split buffer", mode, OUT / 2);
    ok(dsv4_cuda_linear_split(f->blas, &f->fp8, OUT, HID, HID, CROWS, &zero) == NULL,
       "%s: a dense FP8 GEMM takes f32 inputs: no split buffer", mode);
    ok((dsv4_cuda_linear_split(f->blas, &f->wide, COUT, CHID, CHID, CLONG, &zero) == NULL) == !det,
       "%s: a step of %u rows %s", mode, CLONG,
       det ? "stays on the tensor cores: the split buffer" : "goes to cuBLAS: no split buffer");
    ok(dsv4_cuda_sync(f->stream) == 0, "%s: the stream is sound after the refusals", mode);
}

int main(void)
{
    gpu_require();
    plan(2 * 9 + 2 * (2 * 5 + 6) + 4);
    fixture f = {0};
    if (dsv4_cuda_stream_new(&f.stream) != 0)
        bail_out("no stream");
    f.up = weight(f.stream, DSV4_CUDA_W_BF16, GROUPS, OUT, HID);
    f.down = weight(f.stream, DSV4_CUDA_W_BF16, GROUPS, OUT, INTER);
    f.fp8 = weight(f.stream, DSV4_CUDA_W_FP8, GROUPS, OUT, HID);
    f.wide = weight(f.stream, DSV4_CUDA_W_BF16, 1, COUT, CHID);
    f.narrow = weight(f.stream, DSV4_CUDA_W_BF16, 1, OUT / 2, CHID);
    f.u = gpu_random((size_t)TOKENS * HID, &rng);
    f.gu = gpu_random((size_t)TOKENS * TOP_K * 2 * INTER, &rng);
    f.xe = gpu_alloc((size_t)TOKENS * TOP_K * HID * sizeof(float));
    f.he = gpu_alloc((size_t)TOKENS * TOP_K * INTER * sizeof(float));
    f.y = gpu_alloc((size_t)TOKENS * TOP_K * OUT * sizeof(float));
    f.y_ref = gpu_alloc((size_t)TOKENS * TOP_K * OUT * sizeof(float));
    f.assign = gpu_alloc(TOKENS * TOP_K * sizeof(uint32_t));
    f.off = gpu_alloc((GROUPS + 1) * sizeof(uint32_t));
    size_t mix = (2 + HC) * HC;
    f.dims = (dsv4_cuda_dims){
        .hidden = CHID, .hc_mult = HC, .hc_iters = 20, .eps = 1e-6f, .hc_eps = 1e-6f};
    f.x = gpu_random((size_t)CROWS * HC * CHID, &rng);
    f.fn = gpu_random(mix * HC * CHID, &rng);
    f.base = gpu_random(mix, &rng);
    f.scale = gpu_random(3, &rng);
    f.norm = gpu_random(CHID, &rng);
    f.pre = gpu_alloc((size_t)CROWS * HC * sizeof(float));
    f.z = gpu_alloc((size_t)CROWS * mix * sizeof(float));
    f.cu = gpu_alloc((size_t)CROWS * CHID * sizeof(float));
    f.cu_ref = gpu_alloc((size_t)CROWS * CHID * sizeof(float));
    for (int det = 1; det >= 0; det--) {
        if (!(f.blas = dsv4_cuda_blas_new(f.stream, det)))
            bail_out("no cuBLAS handle");
        check_mode(&f, det ? "deterministic" : "fast");
        check_dense(&f, det ? "deterministic" : "fast", det, "collapse", collapse);
        check_dense(&f, det ? "deterministic" : "fast", det, "RMSNorm", norm);
        check_dense_refusals(&f, det ? "deterministic" : "fast", det);
        dsv4_cuda_blas_free(f.blas);
    }
    /* producers asked to split rows they cannot: unaligned rows */
    void *split = gpu_alloc((size_t)2 * TOKENS * TOP_K * HID * 2);
    ok(dsv4_cuda_moe_gather(TOKENS, TOP_K, HID - 2, f.u, f.assign, f.xe, split, f.stream) ==
           -EINVAL,
       "the gather refuses to split rows of a length not a multiple of 4");
    dsv4_cuda_swiglu_rows rows = {TOKENS, 2 * INTER, f.gu + 1, f.gu + INTER + 1, f.he, split};
    ok(dsv4_cuda_swiglu(&rows, INTER, 7.0f, DSV4_K_SILU, f.stream) == -EINVAL,
       "the SwiGLU refuses to split rows that are not 16-byte aligned");
    dsv4_cuda_split_out us = {split, NULL, COUT, COUT};
    f.dims.hidden = CHID - 2;
    ok(collapse(&f, f.cu, &us) == -EINVAL,
       "the collapse refuses to split rows of a length not a multiple of 4");
    ok(dsv4_cuda_rmsnorm_rows(CROWS, CHID - 2, CHID, f.cu, f.norm, 1e-6f, &us, f.stream) == -EINVAL,
       "the RMSNorm refuses to split rows of a length not a multiple of 4");
    gpu_free(split);
    gpu_free(f.cu_ref);
    gpu_free(f.cu);
    gpu_free(f.z);
    gpu_free(f.pre);
    gpu_free(f.norm);
    gpu_free(f.scale);
    gpu_free(f.base);
    gpu_free(f.fn);
    gpu_free(f.x);
    gpu_free(f.off);
    gpu_free(f.assign);
    gpu_free(f.y_ref);
    gpu_free(f.y);
    gpu_free(f.he);
    gpu_free(f.xe);
    gpu_free(f.gu);
    gpu_free(f.u);
    gpu_free((void *)f.fp8.scale);
    gpu_free((void *)f.fp8.data);
    gpu_free((void *)f.narrow.data);
    gpu_free((void *)f.wide.data);
    gpu_free((void *)f.down.data);
    gpu_free((void *)f.up.data);
    dsv4_cuda_stream_free(f.stream);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
