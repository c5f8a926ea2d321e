/* gemm-stream.c: the CUDA forward's GEMMs (kernels/cuda/model.h dsv4_cuda_linear*) on the
 * linear layers of a DeepSeek-V4-Flash layer, per weight format (f32, bf16, fp8, mxfp4),
 * mode (deterministic: tensor cores with a k split fixed by the weight's shape, the splits
 * added in order; fast: split-K by atomics; f32 weights on the streaming kernel) and row
 * count, against the HBM ceiling: achieved GB/s = the device bytes of the weights a call
 * reads (of the experts, those that get rows) / time per call, and the FLOP rate. The
 * ceiling is measured in the same run as a device-to-device copy of 1 GiB (bytes read and
 * written / time; --bw sets one instead). Calls are queued back to back and timed by the
 * host around a sync (launch gaps included, as in a decode step without a graph).
 *
 * usage: gemm-stream [--rows 1,2,4,...,256] [--iters 20] [--bw BYTES_PER_S]
 *                    [--formats f32,bf16,fp8,mxfp4] [--layers wq_a,wq_b,wo_a,wo_b,experts,head]
 *                    [--modes deterministic,fast] [--peer]
 * Prints the ceiling, then one markdown table row per (layer, format, mode, rows). --layers
 * and --modes pick what runs (by a layer name's first word), e.g. a few launches for ncu.
 * --peer adds cuBLASLt's bf16 GEMM on the bf16 layers but the experts (gemm-cublaslt.h), in
 * the same run: mode `cublaslt x` on the rows' bf16 values (less precise than ours), and
 * `cublaslt hi|lo` on twice the rows, each row's bf16 high and low parts, the product a
 * cuBLAS path with our precision would take (the two halves' sum not counted). The hi|lo
 * halves summed must match our fast mode's Y, or gemm-stream stops. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench-util.h"
#include "bench/gemm-cublaslt.h"
#include "bench/hbm-ceiling.h"
#include "kernels/cpu/numfmt.h"
#include "kernels/cuda/model.h"

#define MAX_ROWS_LIST 16

/* One linear layer of a Flash layer: mats [out][in]; grouped: rows spread over the
 * matrices as top-6-of-8 routing spreads them (6 rows per token). */
typedef struct layer_shape {
    const char *name;
    size_t mats, out, in;
    bool grouped, batched;
} layer_shape;

static const layer_shape shapes[] = {
    {"wq_a 4096->1024", 1, 1024, 4096, false, false},
    {"wq_b 1024->32768", 1, 32768, 1024, false, false},
    {"wo_a 8x 4096->1024", 8, 1024, 4096, false, true},
    {"wo_b 8192->4096", 1, 4096, 8192, false, false},
    {"experts gate|up 8x 4096->4096", 8, 4096, 4096, true, false},
    {"experts down 8x 2048->4096", 8, 4096, 2048, true, false},
    {"head 4096->129280", 1, 129280, 4096, false, false},
};

static const char *const fmt_names[] = {"f32", "bf16", "fp8", "mxfp4"};

/* Whether the comma-separated list has `name` up to its first space as an item. */
static bool listed(const char *list, const char *name)
{
    size_t n = strcspn(name, " ");
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',')
        if (strcspn(p, ",") == n && strncmp(p, name, n) == 0)
            return true;
    return false;
}

static void die(const char *what)
{
    fprintf(stderr, "gemm-stream: %s\n", what);
    exit(1);
}

/* A dense or batched layer (not the experts) on `rows` rows: the mats' products side by side
 * in a row of X (L->in each) and of Y (L->out each). */
static int ours(dsv4_cuda_blas *blas, const dsv4_cuda_weight *wt, const layer_shape *L,
                const float *x_dev, uint32_t rows, float *y_dev)
{
    size_t xs = L->in * L->mats, ys = L->out * L->mats;
    if (L->batched)
        return dsv4_cuda_linear_batched(blas, wt, L->out, L->in, x_dev, xs, L->in, rows, y_dev, ys,
                                        L->out, (uint32_t)L->mats);
    return dsv4_cuda_linear(blas, wt, L->out, L->in, x_dev, xs, rows, y_dev, ys);
}

/* The peer's rows for one layer (gemm-cublaslt.h): cuBLASLt on `rows` bf16 rows, then on
 * their hi|lo parts, checked against our fast mode's Y of the same rows. */
static void peer_rows(gemm_peer *peer, dsv4_cuda_blas *fast, const dsv4_cuda_weight *wt,
                      const layer_shape *L, const float *w, const float *x, const float *x_dev,
                      uint32_t rows, int iters, double bw, void *stream)
{
    size_t xs = L->in * L->mats, ys = L->out * L->mats; /* as ours() */
    size_t n = L->mats * L->out * L->in, xn = 2 * (size_t)rows * xs, yn = 2 * (size_t)rows * ys;
    uint16_t *w16 = malloc(n * 2), *x16 = malloc(xn * 2);
    float *y_ours = malloc((size_t)rows * ys * sizeof(float));
    float *y_peer = malloc(yn * sizeof(float));
    uint16_t *w16_dev = dsv4_cuda_alloc(n * 2), *x16_dev = dsv4_cuda_alloc(xn * 2);
    float *y_dev = dsv4_cuda_alloc(yn * sizeof(float));
    if (!w16 || !x16 || !y_ours || !y_peer || !w16_dev || !x16_dev || !y_dev)
        die("out of memory (peer)");
    for (size_t i = 0; i < n; i++)
        w16[i] = dsv4_f32_to_bf16(w[i]);
    /* rows 0..rows-1: the high parts; rows..2 rows-1: the low parts */
    for (size_t i = 0; i < (size_t)rows * xs; i++) {
        x16[i] = dsv4_f32_to_bf16(x[i]);
        x16[(size_t)rows * xs + i] = dsv4_f32_to_bf16(x[i] - dsv4_bf16_to_f32(x16[i]));
    }
    if (dsv4_cuda_copy(w16_dev, w16, n * 2, stream) != 0 ||
        dsv4_cuda_copy(x16_dev, x16, xn * 2, stream) != 0 ||
        ours(fast, wt, L, x_dev, rows, y_dev) != 0 ||
        dsv4_cuda_copy(y_ours, y_dev, (size_t)rows * ys * sizeof(float), stream) != 0)
        die("peer setup failed");
    static const char *const names[2] = {"cublaslt x", "cublaslt hi|lo"};
    for (uint32_t hilo = 0; hilo < 2; hilo++) {
        uint32_t r = rows << hilo;
        int algos = 0;
        double dt = gemm_peer_time(peer, w16_dev, x16_dev, y_dev, L->mats, L->out, L->in, r, xs, ys,
                                   iters, &algos);
        if (dt < 0) {
            printf("| %s | bf16 | %s | %u | no algorithm (%d) | | | |\n", L->name, names[hilo],
                   rows, (int)dt);
            continue;
        }
        if (hilo) {
            if (dsv4_cuda_copy(y_peer, y_dev, yn * sizeof(float), stream) != 0)
                die("copy failed");
            double err = 0, mag = 0;
            for (size_t i = 0; i < (size_t)rows * ys; i++) {
                double v = (double)y_peer[i] + y_peer[(size_t)rows * ys + i];
                err = fmax(err, fabs(v - y_ours[i]));
                mag = fmax(mag, fabs(y_ours[i]));
            }
            if (err > 1e-5 * mag + 1e-6)
                die("cuBLASLt hi|lo does not match our fast mode: the peer's layout is wrong");
        }
        double bytes = 2.0 * (double)n, flops = 2.0 * r * L->out * L->in * L->mats;
        printf("| %s | bf16 | %s (best of %d) | %u | %.1f | %.0f | %.1f%% | %.2f |\n", L->name,
               names[hilo], algos, rows, dt * 1e6, bytes / dt / 1e9, 100 * bytes / dt / bw,
               flops / dt / 1e12);
        fflush(stdout);
    }
    dsv4_cuda_free(w16_dev);
    dsv4_cuda_free(x16_dev);
    dsv4_cuda_free(y_dev);
    free(w16);
    free(x16);
    free(y_ours);
    free(y_peer);
}

int main(int argc, char **argv)
{
    const char *rows_list = "1,2,4,8,16,32,64,128,256", *formats = "f32,bf16,fp8,mxfp4";
    const char *layers = "wq_a,wq_b,wo_a,wo_b,experts,head", *modes_list = "deterministic,fast";
    int iters = 20;
    double bw = 0;
    bool bw_set = false, with_peer = false;
    static const struct option opts[] = {
        {"rows", required_argument, NULL, 'r'},   {"iters", required_argument, NULL, 'i'},
        {"bw", required_argument, NULL, 'w'},     {"formats", required_argument, NULL, 'f'},
        {"layers", required_argument, NULL, 'l'}, {"modes", required_argument, NULL, 'm'},
        {"peer", no_argument, NULL, 'p'},         {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        switch (ch) {
        case 'r': rows_list = optarg; break;
        case 'i': iters = atoi(optarg); break;
        case 'w': bw = atof(optarg), bw_set = true; break;
        case 'f': formats = optarg; break;
        case 'l': layers = optarg; break;
        case 'm': modes_list = optarg; break;
        case 'p': with_peer = true; break;
        default: return 2;
        }
    }
    uint32_t rows[MAX_ROWS_LIST], n_rows = 0, max_rows = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", rows_list);
    for (char *save, *t = strtok_r(buf, ",", &save); t && n_rows < MAX_ROWS_LIST;
         t = strtok_r(NULL, ",", &save)) {
        rows[n_rows] = (uint32_t)atoi(t);
        max_rows = rows[n_rows] > max_rows ? rows[n_rows] : max_rows;
        n_rows++;
    }
    char name[256];
    void *stream;
    if (dsv4_cuda_device_use(-1, name, sizeof(name)) != 0 || dsv4_cuda_stream_new(&stream) != 0)
        die("no CUDA device");
    dsv4_cuda_blas *modes[2] = {dsv4_cuda_blas_new(stream, true),
                                dsv4_cuda_blas_new(stream, false)};
    size_t w_max = 0, in_max = 0, out_max = 0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        size_t n = shapes[s].mats * shapes[s].out * shapes[s].in;
        w_max = n > w_max ? n : w_max;
        in_max = shapes[s].in * shapes[s].mats > in_max ? shapes[s].in * shapes[s].mats : in_max;
        out_max =
            shapes[s].out * shapes[s].mats > out_max ? shapes[s].out * shapes[s].mats : out_max;
    }
    /* MXFP4 values (a code times a power of two per 32 inputs) fit every format exactly */
    float *w = malloc(w_max * sizeof(float));
    float *x = malloc((size_t)max_rows * 6 * in_max * sizeof(float));
    float *src = dsv4_cuda_alloc(w_max * sizeof(float));
    float *x_dev = dsv4_cuda_alloc((size_t)max_rows * 6 * in_max * sizeof(float));
    float *y_dev = dsv4_cuda_alloc((size_t)max_rows * 6 * out_max * sizeof(float));
    uint32_t *flag = dsv4_cuda_alloc(sizeof(uint32_t)), *off_dev = dsv4_cuda_alloc(9 * 4);
    gemm_peer *peer = with_peer ? gemm_peer_new(stream) : NULL;
    if (!modes[0] || !modes[1] || !w || !x || !src || !x_dev || !y_dev || !flag || !off_dev)
        die("out of memory");
    if (with_peer && !peer)
        die("cannot start cuBLASLt (--peer)");
    static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    /* 2^-10 .. 2^-4 by 32-input group (a product with a power of two is exact) */
    float pow2[7];
    for (int e = 0; e < 7; e++)
        pow2[e] = ldexpf(1.0f, e - 10);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < w_max; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        float v = e2m1[(r >> 33) % 8] * ((r >> 40) & 1 ? -1.0f : 1.0f);
        w[i] = v * pow2[(i / 32) % 7];
    }
    for (size_t i = 0; i < (size_t)max_rows * 6 * in_max; i++)
        x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if (dsv4_cuda_copy(x_dev, x, (size_t)max_rows * 6 * in_max * sizeof(float), stream) != 0)
        die("copy failed");
    fprintf(stderr, "gemm-stream: %s\n", name);
    if (bw == 0 && (bw = bench_hbm_copy_rate(stream)) == 0)
        die("the copy ceiling's copies failed");
    printf("HBM ceiling: %.0f GB/s (%s)\n\n", bw / 1e9, bw_set ? "--bw" : BENCH_HBM_COPY_WHAT);
    printf("| layer | format | mode | rows | us/call | weight GB/s | of %.2f TB/s | TFLOP/s |\n",
           bw / 1e12);
    printf("|---|---|---|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const layer_shape *L = &shapes[s];
        if (!listed(layers, L->name))
            continue;
        size_t n = L->mats * L->out * L->in;
        if (dsv4_cuda_copy(src, w, n * sizeof(float), stream) != 0)
            die("copy failed");
        for (int f = 0; f < 4; f++) {
            if (!strstr(formats, fmt_names[f]))
                continue;
            size_t sb, db = dsv4_cuda_weight_bytes((dsv4_cuda_wfmt)f, L->mats, L->out, L->in, &sb);
            void *data = dsv4_cuda_alloc(db), *scale = sb ? dsv4_cuda_alloc(sb) : NULL;
            bool exact = false;
            if (!data || (sb && !scale) ||
                dsv4_cuda_weight_pack(src, L->mats, L->out, L->in, (dsv4_cuda_wfmt)f, data, scale,
                                      flag, stream, &exact) != 0 ||
                !exact)
                die("cannot pack the weight");
            dsv4_cuda_weight wt = {(dsv4_cuda_wfmt)f, data, scale};
            for (uint32_t mi = 0; mi < 2 * n_rows; mi++) {
                if (!listed(modes_list, mi < n_rows ? "deterministic" : "fast"))
                    continue;
                dsv4_cuda_blas *blas = modes[mi / n_rows];
                uint32_t R = rows[mi % n_rows], pairs = R * 6, touched = (uint32_t)L->mats;
                if (L->grouped) {
                    /* top 6 of 8: each expert gets 6/8 of the rows */
                    uint32_t off[9];
                    touched = 0;
                    for (uint32_t e = 0; e <= 8; e++) {
                        off[e] = (uint32_t)((uint64_t)pairs * e / 8);
                        touched += e > 0 && off[e] > off[e - 1];
                    }
                    if (dsv4_cuda_copy(off_dev, off, sizeof(off), stream) != 0)
                        die("copy failed");
                }
                int rc = 0;
                double t0 = 0;
                for (int it = -2; rc == 0 && it < iters; it++) {
                    if (it == 0) {
                        rc = dsv4_cuda_sync(stream);
                        t0 = (double)bench_now_ns() * 1e-9;
                    }
                    if (L->grouped)
                        rc = dsv4_cuda_linear_grouped(blas, &wt, L->out, L->in, x_dev, L->in,
                                                      off_dev, (uint32_t)L->mats, pairs, y_dev,
                                                      L->out);
                    else
                        rc = ours(blas, &wt, L, x_dev, R, y_dev);
                }
                if (rc != 0 || dsv4_cuda_sync(stream) != 0)
                    die("GEMM failed");
                double dt = ((double)bench_now_ns() * 1e-9 - t0) / iters;
                double rows_total = L->grouped ? (double)pairs : (double)R * L->mats;
                double flops = 2.0 * rows_total * L->out * L->in;
                /* the bytes of the matrices the call reads (experts with rows) */
                double bytes = (double)(db + sb) * touched / L->mats;
                printf("| %s | %s | %s | %u | %.1f | %.0f | %.1f%% | %.2f |\n", L->name,
                       fmt_names[f], mi < n_rows ? "deterministic" : "fast", R, dt * 1e6,
                       bytes / dt / 1e9, 100 * bytes / dt / bw, flops / dt / 1e12);
                fflush(stdout);
            }
            if (peer && f == DSV4_CUDA_W_BF16 && !L->grouped)
                for (uint32_t ri = 0; ri < n_rows; ri++)
                    peer_rows(peer, modes[1], &wt, L, w, x, x_dev, rows[ri], iters, bw, stream);
            dsv4_cuda_free(data);
            dsv4_cuda_free(scale);
        }
    }
    dsv4_cuda_free(src);
    dsv4_cuda_free(x_dev);
    dsv4_cuda_free(y_dev);
    dsv4_cuda_free(flag);
    dsv4_cuda_free(off_dev);
    gemm_peer_free(peer);
    dsv4_cuda_blas_free(modes[0]);
    dsv4_cuda_blas_free(modes[1]);
    dsv4_cuda_stream_free(stream);
    free(w);
    free(x);
    return 0;
}
