/* t-gpu-gemm-runs-on-every-device: one process runs the BF16 GEMM on each visible device in
 * turn (up to four), deterministic and fast, at 1, 16, 64 and 256 rows: the shared-memory
 * ring of weights, the wgmma kernel of one and two warpgroups, inputs split by tile and split
 * once. The kernels' shared-memory opt-ins hold for the device they were made on only, so
 * a process whose first GEMM ran on device 0 must make them again on device 1 (the
 * launches there would fail otherwise). Each device's deterministic outputs are device 0's,
 * bitwise (same model of GPU: the same sums in the same order), and its fast outputs within
 * FAST_TOL of them. Skips with fewer than two devices. */
#include "config.h"

#include "tests/gpu/gpu.h"
#include "tests/tap.h"

#ifdef HAVE_CUDA
#include "kernels/cuda/model.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 4
#define OUT 2048 /* a matrix wide enough to split its inputs once at 64 rows */
#define IN 1024
#define FAST_TOL 1e-4
static const size_t rows[] = {1, 16, 64, 256};
#define N_ROWS (sizeof(rows) / sizeof(rows[0]))
#define MAX_ROWS 256

/* outputs of a device: [mode: 0 deterministic, 1 fast][row count][MAX_ROWS x OUT] */
typedef float device_out[2][N_ROWS][MAX_ROWS * OUT];

/* The GEMMs on the current device (x: MAX_ROWS x IN inputs, w: OUT x IN bf16-exact values);
 * false after a diagnostic where a call failed. */
static bool run_device(const float *w, const float *x, device_out *y)
{
    void *stream = NULL;
    dsv4_cuda_blas *blas[2] = {NULL, NULL};
    bool ok = dsv4_cuda_stream_new(&stream) == 0 &&
              (blas[0] = dsv4_cuda_blas_new(stream, true)) != NULL &&
              (blas[1] = dsv4_cuda_blas_new(stream, false)) != NULL;
    float *w_dev = gpu_alloc((size_t)OUT * IN * sizeof(float));
    float *x_dev = gpu_alloc((size_t)MAX_ROWS * IN * sizeof(float));
    float *y_dev = gpu_alloc((size_t)MAX_ROWS * OUT * sizeof(float));
    uint32_t *flag = gpu_alloc(sizeof(uint32_t));
    size_t sb, db = dsv4_cuda_weight_bytes(DSV4_CUDA_W_BF16, 1, OUT, IN, &sb);
    void *data = gpu_alloc(db);
    bool exact = false;
    gpu_put(w_dev, w, (size_t)OUT * IN * sizeof(float));
    gpu_put(x_dev, x, (size_t)MAX_ROWS * IN * sizeof(float));
    ok = ok &&
         dsv4_cuda_weight_pack(w_dev, 1, OUT, IN, DSV4_CUDA_W_BF16, data, NULL, flag, stream,
                               &exact) == 0 &&
         exact;
    if (!ok)
        diag("stream, cuBLAS or the BF16 weight failed");
    dsv4_cuda_weight wt = {DSV4_CUDA_W_BF16, data, NULL};
    for (int m = 0; m < 2 && ok; m++)
        for (size_t r = 0; r < N_ROWS && ok; r++) {
            int rc = dsv4_cuda_linear(blas[m], &wt, OUT, IN, x_dev, IN, rows[r], y_dev, OUT);
            if (rc == 0)
                rc = dsv4_cuda_sync(stream);
            if (rc != 0) {
                diag("%s GEMM of %zu rows: %s", m ? "fast" : "deterministic", rows[r],
                     strerror(-rc));
                ok = false;
            } else {
                gpu_get((*y)[m][r], y_dev, rows[r] * OUT * sizeof(float));
            }
        }
    gpu_free(data);
    gpu_free(flag);
    gpu_free(y_dev);
    gpu_free(x_dev);
    gpu_free(w_dev);
    dsv4_cuda_blas_free(blas[1]);
    dsv4_cuda_blas_free(blas[0]);
    dsv4_cuda_stream_free(stream);
    return ok;
}

/* max |a - b| / max |b| over the row counts' outputs of one mode */
static double rel_diff(const device_out *a, const device_out *b, int m)
{
    double d = 0, mx = 0;
    for (size_t r = 0; r < N_ROWS; r++)
        for (size_t i = 0; i < rows[r] * OUT; i++) {
            d = fmax(d, fabs((double)(*a)[m][r][i] - (*b)[m][r][i]));
            mx = fmax(mx, fabs((double)(*b)[m][r][i]));
        }
    return mx > 0 ? d / mx : d;
}

int main(void)
{
    gpu_require();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2)
        skip_all("needs two GPUs (%d visible)", n);
    n = n < MAX_DEVICES ? n : MAX_DEVICES;
    float *w = malloc((size_t)OUT * IN * sizeof(float));
    float *x = malloc((size_t)MAX_ROWS * IN * sizeof(float));
    device_out *y = malloc((size_t)n * sizeof(device_out));
    if (!w || !x || !y)
        bail_out("out of memory");
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < (size_t)OUT * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = ((float)(s >> 40) / 16777216.0f - 0.5f) / 16.0f;
        uint32_t b;
        memcpy(&b, &v, 4);
        b &= 0xffff0000u; /* a bf16 value: the weight packs as BF16, exactly */
        memcpy(&w[i], &b, 4);
    }
    for (size_t i = 0; i < (size_t)MAX_ROWS * IN; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)(s >> 40) / 16777216.0f * 2.0f - 1.0f;
    }
    plan(1 + 2 * (n - 1));
    bool ran[MAX_DEVICES];
    for (int d = 0; d < n; d++) {
        char name[128];
        if (dsv4_cuda_device_use(d, name, sizeof(name)) != 0)
            bail_out("cannot use device %d", d);
        ran[d] = run_device(w, x, &y[d]);
        if (d == 0)
            ok(ran[0], "device 0 (%s): every GEMM ran", name);
    }
    for (int d = 1; d < n; d++) {
        bool same = ran[0] && ran[d];
        for (size_t r = 0; same && r < N_ROWS; r++)
            same = memcmp(y[d][0][r], y[0][0][r], rows[r] * OUT * sizeof(float)) == 0;
        ok(same,
           "device %d after device 0: deterministic GEMMs at 1, 16, 64 and 256 rows ran, "
           "bitwise device 0's",
           d);
        double e = ran[0] && ran[d] ? rel_diff(&y[d], &y[0], 1) : INFINITY;
        ok(e <= FAST_TOL, "device %d: fast GEMMs ran, within %g of device 0's (%.2g)", d, FAST_TOL,
           e);
    }
    free(y);
    free(x);
    free(w);
    return done_testing();
}
#else
DSV4_GPU_TEST_SKIPS_WITHOUT_CUDA
#endif
