/* t-gpu-gemm-checkpoint-formats-match-f32: a weight whose f32 values come from a checkpoint
 * format (MXFP4 codes times power-of-two scales per 32 inputs, E4M3 codes times
 * power-of-two scales per 128x128 block, BF16) is stored on the device in that format and
 * no narrower one (dsv4_cuda_weight_pack is exact there and refuses the narrower ones),
 * also where the checkpoint chose a larger scale than needed (the packer picks the
 * smallest); random f32 values stay f32. Deterministic mode is batch-invariant, bitwise:
 * a row computed in a step of 1, 2, 7, 16, 31, 64 or 100 rows (anywhere in the inputs) is the
 * same row of a 256-row step; grouped rows (the experts, uneven groups: 5, 0, 40 and 1, 37,
 * 7 rows) are the dense GEMM of their matrix; a batched call (wo_a) gives a problem's rows
 * the same bits at 1 and 7 rows a problem. It stays within DET_TOL of the GEMM over the
 * weight's f32 values (which the f32 weights are, bitwise: the streaming kernel) and of a
 * double-precision reference (1e-5 for f32 weights). Fast mode (tensor cores for these
 * formats, split-K by atomics) stays within 1e-4 of the reference, dense and grouped, and of
 * the f32 GEMM at one row a group, a problem and a step of a weight too narrow for the
 * one-row streaming kernel (3 x [4096][2048] in each narrow format: k split instead).
 * BF16 takes wgmma where the device code has it (sm_90a): the steps of 31 rows and the
 * [200][1088] experts add its tiles of 32 rows (two warpgroups) and output tiles that cross
 * a matrix's end, so a row's bits are checked at every tile height and column it can take.
 * Its inputs are split into bf16 hi and lo once per launch from tiles of 64 rows where a
 * matrix has 2048 outputs or more, or past 64 rows a group where the launch has (where the
 * launch's rows fit the split buffer), else by each output tile, with the same bits: wq_b's
 * row-count check compares both (64 and 256 rows split once, 1 .. 31 by tile), and a
 * 3 x [2048][768] weight adds a step of LONG_ROWS rows (too many for the buffer: split by
 * tile) whose rows have the bits of the 256-row step (split once), grouped rows (70, 0, 160)
 * and batched problems of 70 rows with wo_a's interleaved inputs (split once) bitwise each
 * matrix's dense GEMM, and the batched problems' row 0 that of a one-row call (by tile).
 * Those grouped rows average 77 a group, over one tile of 64: fast mode's launch (each
 * unit its whole k range) gives each warpgroup two output tiles, within 1e-5 of the
 * deterministic GEMM (whose two k splits a block keep one tile a warpgroup). Fast mode's steps
 * of more than 256 rows of BF16 weights (cuBLAS on the inputs' hi and lo parts) stay within
 * 1e-5 of the deterministic step: the LONG_ROWS step and a batched one.
 * Shapes take the tensor cores (inputs a multiple of 64) and the streaming kernel's
 * vector path (f32) and element path (1000 inputs), a tail chunk (1088 = 2 x 512 + 64),
 * partial output tiles and scale blocks, a layer of 16384 outputs (fast mode's one-row
 * warps take four outputs each; deterministic mode's 256-row step takes a tile's k splits in
 * one block, the shorter steps a block a split: the same bits), and wq_b's shape in BF16
 * (every deterministic step a tile's k splits in one block: one row on the shared-memory
 * ring of weights, 16 rows direct, 64 staged). Where the wgmma kernel's launch is dense and
 * each tile takes its whole k range, its grid is persistent (no more blocks than the GPU
 * holds, each walking several tiles): wq_b's shape at 64 and 256 rows, and [PERSIST_OUT]
 * [1024] (129 tiles of 64 outputs: deterministic mode's 2 k splits in one block from two row
 * tiles, by the grid below, a partial block of two warpgroups' outputs, 260 units at 256
 * rows) keep their rows' bits from 256 rows down to one. Where a launch of tiles of 32 or 64
 * rows has blocks to spare (on an H200's 132 multiprocessors), each warpgroup takes two
 * output tiles against the block's inputs: wq_b's shape at 256 rows (a persistent grid),
 * and [PAIR_OUT][1024] at 100 rows (two row tiles in 2 k splits by the grid: deterministic
 * mode's sums through the workspace, fast mode's atomics; the last block's second warpgroup
 * and its first one's second tile past the last output) against its 256-row step (a tile's
 * splits in one block, one tile a warpgroup). */
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
/* wq_b's shape (1024 -> 32768): deterministic mode's launches take a tile's k splits in one
 * block at every row count, one row included */
#define WHOLE_OUT 32768
#define WHOLE_IN 1024
/* a deterministic layer of 129 output tiles in 2 k splits (258 one-row blocks: one wave),
 * which a block takes in turn from two row tiles (persistent at 256 rows) */
#define PERSIST_OUT 8256
/* 125 output tiles in 2 k splits, by the grid at two row tiles (100 rows): two output tiles
 * a warpgroup */
#define PAIR_OUT 8000
/* the weight whose launches split their inputs once (2048 outputs a matrix), and a step of
 * more rows than the GEMM's split buffer (64 MiB of bf16 hi and lo) holds at SPLIT_IN. The
 * deterministic k split follows a launch's whole weight (its matrices' output tiles), so one
 * matrix's launch and the three's compare bitwise only where both take the same split: at
 * 768 inputs both take the most those allow, 2 */
#define SPLIT_MATS 3
#define SPLIT_OUT 2048
#define SPLIT_IN 768
#define LONG_ROWS 22272
/* a batched step long enough for fast mode's cuBLAS path (more than 256 rows) */
#define LONG_BATCH_ROWS 300
/* a weight of three matrices too narrow for fast mode's one-row streaming (12288 outputs in
 * all) and wide enough in bytes to split k instead, in every narrow format */
#define NARROW_OUT 4096
#define NARROW_IN 2048
/* rows checked against the double reference: all of them, or 8 of a wide layer's */
#define REF_ROWS(n, out) ((out) > 1024 && (n) > 8 ? 8 : (n))
/* deterministic mode's narrow formats (tensor cores, each input the sum of two bf16)
 * against the f32 path and the double reference: max |difference| / max |reference| */
#define DET_TOL 2e-5

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

/* max |a - b| / max |b| over n values */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < n; i++) {
        maxd = fmax(maxd, fabs((double)a[i] - b[i]));
        maxr = fmax(maxr, fabs((double)b[i]));
    }
    return maxr > 0 ? maxd / maxr : maxd;
}

/* One weight of format fmt (mats matrices): its format is found, and its dense GEMM
 * (matrix 0) is batch-invariant and close to the f32 one. */
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
    float *yn = malloc(MAX_ROWS * out * sizeof(float));
    if (!yq || !yf || !yn)
        bail_out("out of memory");
    linear(e, &q_p->w, out, in, 0, MAX_ROWS, yq);
    linear(e, &f_p->w, out, in, 0, MAX_ROWS, yf);
    /* steps of 1, 2, 7, 16, 31, 64 and 100 rows at several places (each tile shape the
     * kernels have: mma.sync's 8 and 16 rows read directly, 64 staged; wgmma's 8, 16, 32 and
     * 64 rows, a row at a different column of each, and two row tiles of 64), and three rows
     * alone */
    static const size_t rows[] = {1, 2, 7, 16, 31, 64, 100};
    static const size_t single[] = {0, 36, MAX_ROWS - 1};
    size_t moved = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        for (size_t first = 0; first + rows[i] <= MAX_ROWS; first += (MAX_ROWS - rows[i]) / 2 + 1) {
            linear(e, &q_p->w, out, in, first, rows[i], yn);
            moved += bits_differ(yn, yq + first * out, rows[i] * out);
        }
    for (size_t i = 0; i < 3; i++) {
        linear(e, &q_p->w, out, in, single[i], 1, yn);
        moved += bits_differ(yn, yq + single[i] * out, out);
    }
    is_int(moved, 0,
           "%s [%zu][%zu]: rows in steps of 1, 2, 7, 16, 31, 64, 100 rows bitwise those of 256",
           fmt_names[fmt], out, in);
    double tol = fmt == DSV4_CUDA_W_F32 ? 1e-5 : DET_TOL;
    if (fmt == DSV4_CUDA_W_F32)
        is_int(bits_differ(yq, yf, MAX_ROWS * out), 0,
               "f32 [%zu][%zu]: bitwise the f32 GEMM (the streaming kernel)", out, in);
    else
        ok(rel_diff(yq, yf, MAX_ROWS * out) <= DET_TOL,
           "%s [%zu][%zu]: within %.0e of the f32 weight's GEMM (%.2e)", fmt_names[fmt], out, in,
           DET_TOL, rel_diff(yq, yf, MAX_ROWS * out));
    double err = ref_err(w, out, in, e->x, yq, REF_ROWS(MAX_ROWS, out));
    ok(err < tol, "%s [%zu][%zu]: within %.0e of the double reference (%.2e)", fmt_names[fmt], out,
       in, tol, err);
    if (fmt != DSV4_CUDA_W_F32) {
        static const size_t fast_rows[] = {1, 3, 8, 37, 100, MAX_ROWS};
        double fast = 0;
        for (size_t i = 0; i < sizeof(fast_rows) / sizeof(fast_rows[0]); i++) {
            linear_in(e, e->fast, &q_p->w, out, in, 0, fast_rows[i], yn);
            fast = fmax(fast, ref_err(w, out, in, e->x, yn, REF_ROWS(fast_rows[i], out)));
        }
        ok(fast < 1e-4, "%s [%zu][%zu]: fast mode within 1e-4 of the double reference (%.2e)",
           fmt_names[fmt], out, in, fast);
    }
    free(yq);
    free(yf);
    free(yn);
}

/* Matrix g of a packed weight of mats [out][in] matrices, as a weight of its own. */
static dsv4_cuda_weight matrix_of(const packed *q, size_t g, size_t out, size_t in)
{
    static const size_t elem_bits[] = {32, 16, 8, 4};
    dsv4_cuda_weight m = q->w;
    m.data = (const uint8_t *)q->w.data + g * out * in * elem_bits[q->w.fmt] / 8;
    if (q->w.fmt == DSV4_CUDA_W_FP8)
        m.scale = (const float *)q->w.scale + g * ((out + 127) / 128) * ((in + 127) / 128);
    else if (q->w.fmt == DSV4_CUDA_W_FP4)
        m.scale = (const uint8_t *)q->w.scale + g * out * (in / 32);
    return m;
}

/* Y of grouped rows over the matrices of q, rows [off[g], off[g + 1]) with matrix g. */
static void grouped(gemm_env *e, dsv4_cuda_blas *b, const packed *q, const uint32_t *off,
                    size_t mats, size_t out, size_t in, float *y)
{
    uint32_t *off_dev = gpu_alloc((mats + 1) * sizeof(uint32_t));
    gpu_put(off_dev, off, (mats + 1) * sizeof(uint32_t));
    if (dsv4_cuda_linear_grouped(b, &q->w, out, in, e->x_dev, in, off_dev, (uint32_t)mats,
                                 off[mats], e->y_dev, out) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear_grouped failed");
    gpu_get(y, e->y_dev, off[mats] * out * sizeof(float));
    gpu_free(off_dev);
}

/* Y of `per` rows a problem, problem g taking rows g * 7 .. and matrix g, into block g of
 * y (blocks of 7 rows). */
static void batched(gemm_env *e, const packed *q, size_t mats, size_t out, size_t in, size_t per,
                    float *y)
{
    if (dsv4_cuda_linear_batched(e->blas, &q->w, out, in, e->x_dev, in, 7 * in, per, e->y_dev, out,
                                 7 * out, (uint32_t)mats) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear_batched failed");
    for (size_t g = 0; g < mats; g++)
        gpu_get(y + g * 7 * out, e->y_dev + g * 7 * out, per * out * sizeof(float));
}

/* Grouped rows over the matrices of q (uneven groups) are bitwise the dense GEMM of each
 * matrix, deterministic; fast mode within 1e-4 of the f32 GEMM. Batched problems (wo_a)
 * keep their bits from 7 rows a problem to 1, within DET_TOL of the f32 GEMM. */
static void check_groups(gemm_env *e, const packed *q, const packed *f, size_t mats, size_t out,
                         size_t in)
{
    static const uint32_t offs[2][4] = {{0, 5, 5, 45}, {0, 1, 38, 45}};
    size_t n = 45;
    float *yg = malloc(n * out * sizeof(float)), *yd = malloc(n * out * sizeof(float));
    float *yf = malloc(n * out * sizeof(float));
    if (!yg || !yd || !yf)
        bail_out("out of memory");
    size_t differ = 0;
    for (size_t i = 0; i < 2; i++) {
        const uint32_t *off = offs[i];
        grouped(e, e->blas, q, off, mats, out, in, yg);
        for (size_t g = 0; g < mats; g++) {
            dsv4_cuda_weight m = matrix_of(q, g, out, in);
            if (off[g + 1] > off[g])
                linear(e, &m, out, in, off[g], off[g + 1] - off[g], yd + off[g] * out);
        }
        differ += bits_differ(yg, yd, n * out);
    }
    is_int(differ, 0,
           "%s grouped (5, 0, 40 and 1, 37, 7 rows): bitwise the dense GEMM of each matrix",
           fmt_names[q->w.fmt]);
    /* the f32 GEMM of each matrix for the second grouping */
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = matrix_of(f, g, out, in);
        if (offs[1][g + 1] > offs[1][g])
            linear(e, &m, out, in, offs[1][g], offs[1][g + 1] - offs[1][g], yf + offs[1][g] * out);
    }
    if (q->w.fmt != DSV4_CUDA_W_F32) {
        grouped(e, e->fast, q, offs[1], mats, out, in, yg);
        double d = rel_diff(yg, yf, n * out);
        ok(d <= 1e-4, "%s grouped, fast mode: within 1e-4 of the f32 GEMM (%.2e)",
           fmt_names[q->w.fmt], d);
    }
    /* batched: problem g takes rows g * 7 .., writes block g of y */
    batched(e, q, mats, out, in, 7, yg);
    batched(e, q, mats, out, in, 1, yd);
    differ = 0;
    for (size_t g = 0; g < mats; g++)
        differ += bits_differ(yd + g * 7 * out, yg + g * 7 * out, out);
    is_int(differ, 0, "%s batched (3 problems): a problem's row bitwise at 7 and at 1 rows",
           fmt_names[q->w.fmt]);
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = matrix_of(f, g, out, in);
        linear(e, &m, out, in, g * 7, 7, yf + g * 7 * out);
    }
    double d = rel_diff(yg, yf, mats * 7 * out);
    ok(d <= DET_TOL, "%s batched: within %.0e of the f32 GEMM of each matrix (%.2e)",
       fmt_names[q->w.fmt], DET_TOL, d);
    free(yg);
    free(yd);
    free(yf);
}

/* n rows of inputs of width in on the device, row r the env's row r % MAX_ROWS. */
static float *long_inputs(gemm_env *e, size_t in, size_t n)
{
    float *x_dev = gpu_alloc(n * in * sizeof(float));
    for (size_t r = 0; r < n; r += MAX_ROWS)
        gpu_put(x_dev + r * in, e->x, (n - r < MAX_ROWS ? n - r : MAX_ROWS) * in * sizeof(float));
    return x_dev;
}

/* Y of a step of n rows of long_inputs through b, back on the host in y. */
static void linear_long(gemm_env *e, dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t out,
                        size_t in, size_t n, float *y)
{
    float *x_dev = long_inputs(e, in, n), *y_dev = gpu_alloc(n * out * sizeof(float));
    if (dsv4_cuda_linear(b, w, out, in, x_dev, in, n, y_dev, out) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear failed (%zu rows)", n);
    gpu_get(y, y_dev, n * out * sizeof(float));
    gpu_free(x_dev);
    gpu_free(y_dev);
}

/* Y of a batched step through b: `mats` problems of n rows each of long_inputs, interleaved
 * (wo_a's layout: problem g's row r at r mats in + g in), back on the host in y (row r of
 * problem g at (r mats + g) out). */
static void batched_long(gemm_env *e, dsv4_cuda_blas *b, const dsv4_cuda_weight *w, size_t mats,
                         size_t out, size_t in, size_t n, float *y)
{
    float *x_dev = long_inputs(e, in, n * mats), *y_dev = gpu_alloc(n * mats * out * sizeof(float));
    if (dsv4_cuda_linear_batched(b, w, out, in, x_dev, mats * in, in, n, y_dev, mats * out, out,
                                 (uint32_t)mats) != 0 ||
        dsv4_cuda_sync(e->stream) != 0)
        bail_out("dsv4_cuda_linear_batched failed (%zu rows a problem)", n);
    gpu_get(y, y_dev, n * mats * out * sizeof(float));
    gpu_free(x_dev);
    gpu_free(y_dev);
}

/* Fast mode at one row a group, a problem and a step, for a weight of 3 x [NARROW_OUT]
 * [NARROW_IN] in each narrow format: fewer outputs than the streaming kernel wants (12288),
 * so the grouped and batched launches (12-48 MiB) and the dense one of matrix 0 in bf16 and
 * fp8 (16, 8 MiB) split k on the tensor cores, MXFP4's dense one (4 MiB) streams; each
 * within 1e-4 of the f32 GEMM. The env's inputs in widths of NARROW_IN. */
static void check_narrow_one_row(gemm_env *e, float *w, float *src_dev)
{
    static const dsv4_cuda_wfmt fmts[3] = {DSV4_CUDA_W_BF16, DSV4_CUDA_W_FP8, DSV4_CUDA_W_FP4};
    static const uint32_t off[4] = {0, 1, 1, 2}; /* matrix 0 row 0, matrix 2 row 1 */
    size_t mats = 3, out = NARROW_OUT, in = NARROW_IN;
    float *y = malloc(7 * mats * out * sizeof(float)),
          *ref = malloc(7 * mats * out * sizeof(float));
    if (!y || !ref)
        bail_out("out of memory");
    for (size_t i = 0; i < 3; i++) {
        fill(fmts[i], mats, out, in, w);
        gpu_put(src_dev, w, mats * out * in * sizeof(float));
        packed q, f;
        if (!pack(src_dev, mats, out, in, fmts[i], e->flag, e->stream, &q) ||
            !pack(src_dev, mats, out, in, DSV4_CUDA_W_F32, e->flag, e->stream, &f))
            bail_out("%s: packing in its own format was not exact", fmt_names[fmts[i]]);
        double d = 0;
        /* grouped: rows 0 and 1 with matrices 0 and 2 */
        grouped(e, e->fast, &q, off, mats, out, in, y);
        for (size_t g = 0; g < mats; g++) {
            dsv4_cuda_weight m = matrix_of(&f, g, out, in);
            if (off[g + 1] > off[g])
                linear(e, &m, out, in, off[g], 1, ref + off[g] * out);
        }
        d = fmax(d, rel_diff(y, ref, 2 * out));
        /* batched: problem g's one row is row 7 g, written to block g */
        if (dsv4_cuda_linear_batched(e->fast, &q.w, out, in, e->x_dev, in, 7 * in, 1, e->y_dev, out,
                                     7 * out, (uint32_t)mats) != 0 ||
            dsv4_cuda_sync(e->stream) != 0)
            bail_out("dsv4_cuda_linear_batched failed");
        for (size_t g = 0; g < mats; g++) {
            dsv4_cuda_weight m = matrix_of(&f, g, out, in);
            gpu_get(y + g * out, e->y_dev + g * 7 * out, out * sizeof(float));
            linear(e, &m, out, in, g * 7, 1, ref + g * out);
        }
        d = fmax(d, rel_diff(y, ref, mats * out));
        /* dense: matrix 0, row 0 */
        dsv4_cuda_weight q0 = matrix_of(&q, 0, out, in), f0 = matrix_of(&f, 0, out, in);
        linear_in(e, e->fast, &q0, out, in, 0, 1, y);
        linear(e, &f0, out, in, 0, 1, ref);
        d = fmax(d, rel_diff(y, ref, out));
        ok(d <= 1e-4,
           "%s %zux[%zu][%zu], fast mode, one row a group, a problem and a step: within 1e-4 of "
           "the f32 GEMM (%.2e)",
           fmt_names[fmts[i]], mats, out, in, d);
        packed_free(&q);
        packed_free(&f);
    }
    free(y);
    free(ref);
}

/* Fast mode's long steps of a BF16 weight (q: SPLIT_MATS x [SPLIT_OUT][SPLIT_IN]), which
 * cuBLAS takes on the inputs' bf16 hi and lo parts: a dense step of LONG_ROWS rows (two
 * windows of the split buffer) against the deterministic step's rows yl, and a batched
 * step of LONG_BATCH_ROWS rows a problem against the deterministic batched step, each
 * within 1e-5 (the same hi and lo parts, the f32 sums in another order). */
static void check_fast_long(gemm_env *e, const packed *q, const float *yl)
{
    size_t mats = SPLIT_MATS, out = SPLIT_OUT, in = SPLIT_IN, n = LONG_BATCH_ROWS;
    float *y = malloc((size_t)LONG_ROWS * out * sizeof(float));
    float *yd = malloc(n * mats * out * sizeof(float));
    if (!y || !yd)
        bail_out("out of memory");
    dsv4_cuda_weight m0 = matrix_of(q, 0, out, in);
    linear_long(e, e->fast, &m0, out, in, LONG_ROWS, y);
    double d = rel_diff(y, yl, (size_t)LONG_ROWS * out);
    ok(d <= 1e-5,
       "bf16 [%zu][%zu], fast mode, a step of %d rows: within 1e-5 of the "
       "deterministic step (%.2e)",
       out, in, LONG_ROWS, d);
    batched_long(e, e->fast, &q->w, mats, out, in, n, y);
    batched_long(e, e->blas, &q->w, mats, out, in, n, yd);
    d = rel_diff(y, yd, n * mats * out);
    ok(d <= 1e-5,
       "bf16 %zux[%zu][%zu] batched, fast mode, %zu rows a problem: within 1e-5 of "
       "the deterministic step (%.2e)",
       mats, out, in, n, d);
    free(y);
    free(yd);
}

/* The launches that split their inputs once against those that split them by tile, bitwise
 * (the env's inputs in widths of SPLIT_IN): a 3 x [2048][768] BF16 weight's step of
 * LONG_ROWS rows against its 256-row step, grouped rows (70, 0, 160) against the dense GEMM
 * of each matrix, batched problems of 70 rows with interleaved inputs (wo_a's layout:
 * problem g's row r at r * mats * in + g * in) against each matrix's dense GEMM and, for
 * row 0, a one-row batched call. */
static void check_split_once(gemm_env *e, float *w, float *src_dev)
{
    size_t mats = SPLIT_MATS, out = SPLIT_OUT, in = SPLIT_IN, per = 70;
    static const uint32_t off[4] = {0, 70, 70, 230};
    size_t n = off[3];
    fill(DSV4_CUDA_W_BF16, mats, out, in, w);
    gpu_put(src_dev, w, mats * out * in * sizeof(float));
    packed q;
    if (!pack(src_dev, mats, out, in, DSV4_CUDA_W_BF16, e->flag, e->stream, &q))
        bail_out("bf16: packing in its own format was not exact");
    float *yl = malloc((size_t)LONG_ROWS * out * sizeof(float));
    float *y256 = malloc(MAX_ROWS * out * sizeof(float));
    float *yg = malloc(n * out * sizeof(float)), *yd = malloc(n * out * sizeof(float));
    float *yb = malloc(per * mats * out * sizeof(float)), *y1 = malloc(mats * out * sizeof(float));
    if (!yl || !y256 || !yg || !yd || !yb || !y1)
        bail_out("out of memory");
    dsv4_cuda_weight m0 = matrix_of(&q, 0, out, in);
    linear_long(e, e->blas, &m0, out, in, LONG_ROWS, yl);
    linear(e, &m0, out, in, 0, MAX_ROWS, y256);
    size_t differ = 0;
    for (size_t r = 0; r < LONG_ROWS; r++)
        differ += bits_differ(yl + r * out, y256 + r % MAX_ROWS * out, out);
    is_int(differ, 0,
           "bf16 [%zu][%zu]: a step of %d rows (inputs split by tile) bitwise the 256-row step's "
           "rows (split once)",
           out, in, LONG_ROWS);
    check_fast_long(e, &q, yl);
    grouped(e, e->blas, &q, off, mats, out, in, yg);
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = matrix_of(&q, g, out, in);
        if (off[g + 1] > off[g])
            linear(e, &m, out, in, off[g], off[g + 1] - off[g], yd + off[g] * out);
    }
    is_int(bits_differ(yg, yd, n * out), 0,
           "bf16 %zux[%zu][%zu] grouped (70, 0, 160 rows: split once): bitwise the dense GEMM of "
           "each matrix",
           mats, out, in);
    grouped(e, e->fast, &q, off, mats, out, in, yg);
    double d = rel_diff(yg, yd, n * out);
    ok(d <= 1e-5,
       "bf16 %zux[%zu][%zu] grouped (70, 0, 160 rows), fast mode: within 1e-5 of "
       "the deterministic GEMM (%.2e)",
       mats, out, in, d);
    static const size_t steps[2] = {1, 70};
    for (size_t i = 0; i < 2; i++) {
        size_t rows = steps[i];
        float *y = i ? yb : y1;
        if (dsv4_cuda_linear_batched(e->blas, &q.w, out, in, e->x_dev, mats * in, in, rows,
                                     e->y_dev, mats * out, out, (uint32_t)mats) != 0 ||
            dsv4_cuda_sync(e->stream) != 0)
            bail_out("dsv4_cuda_linear_batched failed");
        gpu_get(y, e->y_dev, rows * mats * out * sizeof(float));
    }
    differ = 0;
    for (size_t g = 0; g < mats; g++) {
        dsv4_cuda_weight m = matrix_of(&q, g, out, in);
        if (dsv4_cuda_linear(e->blas, &m, out, in, e->x_dev + g * in, mats * in, per, e->y_dev,
                             out) != 0 ||
            dsv4_cuda_sync(e->stream) != 0)
            bail_out("dsv4_cuda_linear failed");
        gpu_get(yd, e->y_dev, per * out * sizeof(float));
        for (size_t r = 0; r < per; r++)
            differ += bits_differ(yb + (r * mats + g) * out, yd + r * out, out);
        differ += bits_differ(y1 + g * out, yd, out);
    }
    is_int(differ, 0,
           "bf16 %zux[%zu][%zu] batched, interleaved, 70 rows a problem (split once): bitwise "
           "each matrix's dense GEMM and row 0 the one-row call's (split by tile)",
           mats, out, in);
    packed_free(&q);
    free(yl);
    free(y256);
    free(yg);
    free(yd);
    free(yb);
    free(y1);
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
        {DSV4_CUDA_W_BF16, 3, 24, 2048},
        {DSV4_CUDA_W_BF16, 3, 200, 1088}, /* wgmma: output tiles across matrices, 17 k blocks */
        {DSV4_CUDA_W_F32, 3, 33, 512},
        {DSV4_CUDA_W_FP8, 1, WIDE_OUT, 1088},         /* wide: four outputs a warp at one row */
        {DSV4_CUDA_W_BF16, 1, WHOLE_OUT, WHOLE_IN},   /* every split in one block */
        {DSV4_CUDA_W_BF16, 1, PERSIST_OUT, WHOLE_IN}, /* persistent, partial output block */
        {DSV4_CUDA_W_BF16, 1, PAIR_OUT, WHOLE_IN},    /* two output tiles a warpgroup */
    };
    size_t in_max = 2048, w_max = WHOLE_OUT * WHOLE_IN;
    gemm_env e = {0};
    if (dsv4_cuda_stream_new(&e.stream) != 0 || !(e.blas = dsv4_cuda_blas_new(e.stream, true)) ||
        !(e.fast = dsv4_cuda_blas_new(e.stream, false)))
        bail_out("cannot start a stream and cuBLAS");
    e.flag = gpu_alloc(sizeof(uint32_t));
    e.x = malloc(MAX_ROWS * in_max * sizeof(float));
    float *w = malloc(w_max * sizeof(float)), *src_dev = gpu_alloc(w_max * sizeof(float));
    e.x_dev = gpu_alloc(MAX_ROWS * in_max * sizeof(float));
    e.y_dev = gpu_alloc(MAX_ROWS * WHOLE_OUT * sizeof(float));
    if (!e.x || !w)
        bail_out("out of memory");
    for (size_t i = 0; i < MAX_ROWS * in_max; i++)
        e.x[i] = uniform();
    plan(10 * 4 + 9 + 5 * 3 + 4 + 3 + 4 + 2);
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
    /* the inputs in widths of NARROW_IN, then SPLIT_IN, as the loop lays them out for each
     * case */
    gpu_put(e.x_dev, e.x, MAX_ROWS * NARROW_IN * sizeof(float));
    check_narrow_one_row(&e, w, src_dev);
    gpu_put(e.x_dev, e.x, MAX_ROWS * SPLIT_IN * sizeof(float));
    check_split_once(&e, w, src_dev);
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
