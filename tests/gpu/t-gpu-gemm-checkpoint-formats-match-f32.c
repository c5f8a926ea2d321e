/* t-gpu-gemm-checkpoint-formats-match-f32: a weight whose f32 values come from a checkpoint
 * format (MXFP4 codes times power-of-two scales per 32 inputs, E4M3 codes times
 * power-of-two scales per 128x128 block, BF16) is stored on the device in that format and
 * no narrower one (dsv4_cuda_weight_pack is exact there and refuses the narrower ones),
 * also where the checkpoint chose a larger scale than needed (the packer picks the
 * smallest); random f32 values stay f32. The streaming GEMM over the packed weight gives
 * bitwise the outputs of the same GEMM over the weight's f32 values, for 1 to 256 rows;
 * a row computed alone is bitwise the row computed among 256 (batch invariance); grouped
 * rows (the experts) and batched problems (wo_a) equal the dense GEMM of their matrix;
 * and every output is within 1e-5 of a double-precision reference. Fast mode (tensor cores
 * for these formats, inputs split into two bf16) stays within 1e-4 of the reference, dense
 * and grouped. Shapes take the
 * kernel's vector path (inputs a multiple of 16) and its element path (1000 inputs), a
 * tail chunk (1088 = 2 x 512 + 64), partial output tiles and scale blocks, and a layer of
 * 16384 outputs (a one-row step's warps take four outputs each). */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cpu/numfmt.h"
#include "kernels/cuda/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS 256
/* a layer wide enough for the one-row kernel's four-outputs-a-warp shape */
#define WIDE_OUT 16384
/* rows checked against the double reference: all of them, or 8 of a wide layer's */
#define REF_ROWS(n, out) ((out) > 1024 && (n) > 8 ? 8 : (n))

static uint64_t rng = 0x3c6ef372fe94f82bull;

static uint32_t rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static float uniform(void)
{
    return (float)rand32() / 4294967296.0f * 2.0f - 1.0f;
}

static const char *const fmt_names[] = {"f32", "bf16", "fp8", "mxfp4"};

/* mats [out][in] values of format fmt (F32: random floats). FP8 blocks and FP4 groups take
 * a random power-of-two scale; every third one uses only small codes, as if its scale
 * were larger than it needs. */
static void fill(dsv4_cuda_wfmt fmt, size_t mats, size_t out, size_t in, float *w)
{
    size_t sr = (out + 127) / 128, sc = (in + 127) / 128;
    int *bexp = calloc(mats * sr * sc, sizeof(int));
    bool *bsmall = calloc(mats * sr * sc, sizeof(bool));
    if (!bexp || !bsmall)
        bail_out("out of memory");
    for (size_t b = 0; b < mats * sr * sc; b++) {
        bexp[b] = (int)(rand32() % 12) - 10;
        bsmall[b] = b % 3 == 0;
    }
    for (size_t g = 0; g < mats; g++)
        for (size_t o = 0; o < out; o++) {
            int gexp = 0;
            bool gsmall = false;
            for (size_t k = 0; k < in; k++) {
                float *v = &w[(g * out + o) * in + k];
                if (k % 32 == 0) {
                    gexp = (int)(rand32() % 12) - 10;
                    gsmall = rand32() % 3 == 0;
                }
                size_t b = (g * sr + o / 128) * sc + k / 128;
                uint8_t q;
                switch (fmt) {
                case DSV4_CUDA_W_F32: *v = uniform(); break;
                case DSV4_CUDA_W_BF16: *v = dsv4_bf16_to_f32(dsv4_f32_to_bf16(uniform())); break;
                case DSV4_CUDA_W_FP8:
                    do
                        q = (uint8_t)rand32();
                    while ((q & 0x7f) == 0x7f || (bsmall[b] && (q & 0x7f) > 0x40));
                    *v = dsv4_e4m3_to_f32(q) * ldexpf(1.0f, bexp[b]);
                    break;
                case DSV4_CUDA_W_FP4:
                    q = (uint8_t)(rand32() & (gsmall ? 0xb : 0xf));
                    *v = dsv4_e2m1_to_f32(q) * ldexpf(1.0f, gexp);
                    break;
                }
            }
        }
    free(bexp);
    free(bsmall);
}

typedef struct packed {
    dsv4_cuda_weight w;
    void *data, *scale;
} packed;

static void packed_free(packed *p)
{
    gpu_free(p->data);
    gpu_free(p->scale);
}

/* Pack src in fmt; whether it was exact (the buffers are kept either way). */
static bool pack(const float *src_dev, size_t mats, size_t out, size_t in, dsv4_cuda_wfmt fmt,
                 uint32_t *flag, void *stream, packed *p_p)
{
    size_t sb, db = dsv4_cuda_weight_bytes(fmt, mats, out, in, &sb);
    bool exact = false;
    packed p = {{fmt, NULL, NULL}, db ? gpu_alloc(db) : NULL, sb ? gpu_alloc(sb) : NULL};
    if (db && dsv4_cuda_weight_pack(src_dev, mats, out, in, fmt, p.data, p.scale, flag, stream,
                                    &exact) != 0)
        bail_out("dsv4_cuda_weight_pack failed");
    p.w.data = p.data;
    p.w.scale = p.scale;
    *p_p = p;
    return exact;
}

/* The narrowest format that packs w exactly, as the forward's upload picks it. */
static dsv4_cuda_wfmt narrowest(const float *src_dev, size_t mats, size_t out, size_t in,
                                uint32_t *flag, void *stream)
{
    static const dsv4_cuda_wfmt order[] = {DSV4_CUDA_W_FP4, DSV4_CUDA_W_FP8, DSV4_CUDA_W_BF16};
    for (size_t i = 0; i < 3; i++) {
        packed p;
        bool exact = pack(src_dev, mats, out, in, order[i], flag, stream, &p);
        packed_free(&p);
        if (exact)
            return order[i];
    }
    return DSV4_CUDA_W_F32;
}

static size_t bits_differ(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* max |got - ref| / max |ref| of rows [0, n) of matrix g against doubles */
static double ref_err(const float *w, size_t out, size_t in, const float *x, const float *y,
                      size_t n)
{
    double maxd = 0, maxr = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t o = 0; o < out; o++) {
            double s = 0;
            for (size_t k = 0; k < in; k++)
                s += (double)w[o * in + k] * x[r * in + k];
            maxd = fmax(maxd, fabs(y[r * out + o] - s));
            maxr = fmax(maxr, fabs(s));
        }
    return maxr > 0 ? maxd / maxr : maxd;
}

typedef struct gemm_env {
    dsv4_cuda_blas *blas, *fast; /* deterministic, fast */
    void *stream;
    uint32_t *flag;
    float *x_dev, *y_dev, *x; /* MAX_ROWS x in inputs */
} gemm_env;

/* Y = W X for n rows of the env's inputs, back on the host in y. */
static void linear_in(gemm_env *e, dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out,
                      size_t in, size_t first, size_t n, float *y)
{
    if (dsv4_cuda_linear(b, w, out, in, e->x_dev + first * in, in, n, e->y_dev, out) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear failed");
    gpu_get(y, e->y_dev, n * out * sizeof(float));
}

static void linear(gemm_env *e, const dsv4_cuda_weight *w, size_t out, size_t in, size_t first,
                   size_t n, float *y)
{
    linear_in(e, e->blas, w, out, in, first, n, y);
}

/* One weight of format fmt (mats matrices): its format is found, and its dense GEMM
 * (matrix 0) matches the f32 one bitwise at every row count and alone. */
static void check_dense(gemm_env *e, dsv4_cuda_wfmt fmt, size_t mats, size_t out, size_t in,
                        float *w, float *src_dev, packed *q_p, packed *f_p)
{
    fill(fmt, mats, out, in, w);
    gpu_put(src_dev, w, mats * out * in * sizeof(float));
    dsv4_cuda_wfmt got = narrowest(src_dev, mats, out, in, e->flag, e->stream);
    is_str(fmt_names[got], fmt_names[fmt], "%s weight %zux[%zu][%zu]: stored as %s", fmt_names[fmt],
           mats, out, in, fmt_names[fmt]);
    if (!pack(src_dev, mats, out, in, fmt, e->flag, e->stream, q_p) ||
        !pack(src_dev, mats, out, in, DSV4_CUDA_W_F32, e->flag, e->stream, f_p))
        bail_out("%s: packing in its own format was not exact", fmt_names[fmt]);
    float *yq = malloc(MAX_ROWS * out * sizeof(float)),
          *yf = malloc(MAX_ROWS * out * sizeof(float));
    float *y1 = malloc(out * sizeof(float));
    if (!yq || !yf || !y1)
        bail_out("out of memory");
    static const size_t rows[] = {1, 3, 8, 37, MAX_ROWS};
    size_t differ = 0, alone = 0;
    double err = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        linear(e, &q_p->w, out, in, 0, rows[i], yq);
        linear(e, &f_p->w, out, in, 0, rows[i], yf);
        differ += bits_differ(yq, yf, rows[i] * out);
        err = fmax(err, ref_err(w, out, in, e->x, yq, REF_ROWS(rows[i], out)));
    }
    /* rows 0, 36 and 255 alone against the 256-row step (yq holds it) */
    static const size_t single[] = {0, 36, MAX_ROWS - 1};
    for (size_t i = 0; i < 3; i++) {
        linear(e, &q_p->w, out, in, single[i], 1, y1);
        alone += bits_differ(y1, yq + single[i] * out, out);
    }
    is_int(differ, 0, "%s [%zu][%zu]: GEMM bitwise the f32 weight's at 1..256 rows", fmt_names[fmt],
           out, in);
    is_int(alone, 0, "%s [%zu][%zu]: a row alone is bitwise the row among 256", fmt_names[fmt], out,
           in);
    ok(err < 1e-5, "%s [%zu][%zu]: within 1e-5 of the double reference (%.2e)", fmt_names[fmt], out,
       in, err);
    if (fmt != DSV4_CUDA_W_F32) {
        double fast = 0;
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            linear_in(e, e->fast, &q_p->w, out, in, 0, rows[i], yq);
            fast = fmax(fast, ref_err(w, out, in, e->x, yq, REF_ROWS(rows[i], out)));
        }
        ok(fast < 1e-4, "%s [%zu][%zu]: fast mode within 1e-4 of the double reference (%.2e)",
           fmt_names[fmt], out, in, fast);
    }
    free(yq);
    free(yf);
    free(y1);
}

/* Grouped rows over the matrices of q (rows [off[g], off[g + 1]) use matrix g) and the
 * batched form (problem g: rows of x block g) equal the dense GEMM of each matrix. */
static void check_groups(gemm_env *e, const packed *q, const packed *f, size_t mats, size_t out,
                         size_t in)
{
    const uint32_t off[4] = {0, 5, 5, 45};
    uint32_t *off_dev = gpu_alloc(sizeof(off));
    gpu_put(off_dev, off, sizeof(off));
    size_t n = off[mats];
    float *yg = malloc(n * out * sizeof(float)), *yd = malloc(n * out * sizeof(float));
    if (!yg || !yd)
        bail_out("out of memory");
    if (dsv4_cuda_linear_grouped(e->blas, &q->w, out, in, e->x_dev, in, off_dev, (uint32_t)mats,
                                 (uint32_t)n, e->y_dev, out) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear_grouped failed");
    gpu_get(yg, e->y_dev, n * out * sizeof(float));
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = {DSV4_CUDA_W_F32, (const float *)f->w.data + g * out * in, NULL};
        if (off[g + 1] > off[g])
            linear(e, &m, out, in, off[g], off[g + 1] - off[g], yd + off[g] * out);
    }
    is_int(bits_differ(yg, yd, n * out), 0,
           "%s grouped (5, 0 and 40 rows): bitwise the dense GEMM of each f32 matrix",
           fmt_names[q->w.fmt]);
    if (q->w.fmt != DSV4_CUDA_W_F32) {
        if (dsv4_cuda_linear_grouped(e->fast, &q->w, out, in, e->x_dev, in, off_dev, (uint32_t)mats,
                                     (uint32_t)n, e->y_dev, out) != 0 ||
            dsv4_cuda_sync(e->stream) != 0)
            bail_out("dsv4_cuda_linear_grouped (fast) failed");
        gpu_get(yg, e->y_dev, n * out * sizeof(float));
        double maxd = 0, maxr = 0;
        for (size_t i = 0; i < n * out; i++) {
            maxd = fmax(maxd, fabs((double)yg[i] - yd[i]));
            maxr = fmax(maxr, fabs((double)yd[i]));
        }
        ok(maxd <= 1e-4 * maxr, "%s grouped, fast mode: within 1e-4 of the f32 GEMM (%.2e)",
           fmt_names[q->w.fmt], maxd / maxr);
    }
    /* batched: problem g takes rows g * 7 .. + 7, writes block g of y */
    size_t per = 7;
    if (dsv4_cuda_linear_batched(e->blas, &q->w, out, in, e->x_dev, in, per * in, per, e->y_dev,
                                 out, per * out, (uint32_t)mats) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear_batched failed");
    gpu_get(yg, e->y_dev, mats * per * out * sizeof(float));
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = {DSV4_CUDA_W_F32, (const float *)f->w.data + g * out * in, NULL};
        linear(e, &m, out, in, g * per, per, yd + g * per * out);
    }
    is_int(bits_differ(yg, yd, mats * per * out), 0,
           "%s batched (3 problems of 7 rows): bitwise the dense GEMM of each f32 matrix",
           fmt_names[q->w.fmt]);
    gpu_free(off_dev);
    free(yg);
    free(yd);
}

int main(void)
{
    gpu_require();
    static const struct {
        dsv4_cuda_wfmt fmt;
        size_t mats, out, in;
    } cases[] = {
        {DSV4_CUDA_W_FP4, 3, 40, 1088},  /* experts: tail chunk, partial output tile */
        {DSV4_CUDA_W_FP8, 3, 200, 1088}, /* partial scale blocks both ways */
        {DSV4_CUDA_W_FP8, 1, 72, 1000},  /* element path (1000 inputs) */
        {DSV4_CUDA_W_BF16, 3, 24, 2048},      {DSV4_CUDA_W_F32, 3, 33, 512},
        {DSV4_CUDA_W_FP8, 1, WIDE_OUT, 1088}, /* wide: four outputs a warp at one row */
    };
    size_t in_max = 2048, w_max = WIDE_OUT * 1088;
    gemm_env e = {0};
    if (dsv4_cuda_stream_new(&e.stream) != 0 || !(e.blas = dsv4_cuda_blas_new(e.stream, true)) ||
        !(e.fast = dsv4_cuda_blas_new(e.stream, false)))
        bail_out("cannot start a stream and cuBLAS");
    e.flag = gpu_alloc(sizeof(uint32_t));
    e.x = malloc(MAX_ROWS * in_max * sizeof(float));
    float *w = malloc(w_max * sizeof(float)), *src_dev = gpu_alloc(w_max * sizeof(float));
    e.x_dev = gpu_alloc(MAX_ROWS * in_max * sizeof(float));
    e.y_dev = gpu_alloc(MAX_ROWS * WIDE_OUT * sizeof(float));
    if (!e.x || !w)
        bail_out("out of memory");
    for (size_t i = 0; i < MAX_ROWS * in_max; i++)
        e.x[i] = uniform();
    plan(6 * 4 + 4 * 2 + 5 + 3);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t in = cases[i].in, out = cases[i].out, mats = cases[i].mats;
        /* the inputs packed for this width: row r at r * in */
        float *xr = malloc(MAX_ROWS * in * sizeof(float));
        if (!xr)
            bail_out("out of memory");
        memcpy(xr, e.x, MAX_ROWS * in * sizeof(float));
        gpu_put(e.x_dev, xr, MAX_ROWS * in * sizeof(float));
        float *keep = e.x;
        e.x = xr;
        packed q, f;
        check_dense(&e, cases[i].fmt, mats, out, in, w, src_dev, &q, &f);
        if (mats > 1)
            check_groups(&e, &q, &f, mats, out, in);
        packed_free(&q);
        packed_free(&f);
        e.x = keep;
        free(xr);
    }
    gpu_free(e.flag);
    gpu_free(src_dev);
    gpu_free(e.x_dev);
    gpu_free(e.y_dev);
    free(e.x);
    free(w);
    dsv4_cuda_blas_free(e.blas);
    dsv4_cuda_blas_free(e.fast);
    dsv4_cuda_stream_free(e.stream);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
