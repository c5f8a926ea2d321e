/* linalg.c: dot products, the batched linear layer, RMSNorm and axpy in fp32.
 *
 * Every dot product has dsv4_k_dot's order: 8 interleaved partial sums combined as a
 * fixed tree. The linear layer tiles output rows so a tile of W stays in cache across the
 * batch and computes four rows per pass over x, but each output still gets exactly that
 * order, so its value depends only on its own row of W and its own input row (never on
 * the batch, the tiling or the thread count). */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* Four fp32 lanes (one SSE register); a dot product keeps two of them, lanes 0-3 and 4-7.
 * Vector operations are elementwise, so the lanes compute exactly what scalar code
 * would. */
typedef float dsv4_v4 __attribute__((vector_size(16)));

static inline dsv4_v4 dsv4_load4(const float *p)
{
    dsv4_v4 v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Add the tail (n - i < 8 elements) lane by lane and combine the 8 lanes as a fixed
 * tree. */
static inline float dsv4_dot_finish(const dsv4_v4 *lo, const dsv4_v4 *hi, const float *a,
                                    const float *b, size_t i, size_t n)
{
    float l[8];
    memcpy(l, lo, sizeof(*lo));
    memcpy(l + 4, hi, sizeof(*hi));
    for (int j = 0; i + (size_t)j < n; j++)
        l[j] += a[i + j] * b[i + j];
    return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

float dsv4_k_dot(const float *a, const float *b, size_t n)
{
    dsv4_v4 lo = {0, 0, 0, 0}, hi = lo;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        lo += dsv4_load4(a + i) * dsv4_load4(b + i);
        hi += dsv4_load4(a + i + 4) * dsv4_load4(b + i + 4);
    }
    return dsv4_dot_finish(&lo, &hi, a, b, i, n);
}

/* Four dot products of rows w, w + in, w + 2in, w + 3in with x, each bitwise
 * dsv4_k_dot's, sharing the loads of x. */
static void dsv4_dot4(const float *w, size_t in, const float *x, float *y)
{
    dsv4_v4 lo[4] = {{0, 0, 0, 0}}, hi[4] = {{0, 0, 0, 0}};
    size_t i = 0;

    for (; i + 8 <= in; i += 8) {
        dsv4_v4 xl = dsv4_load4(x + i), xh = dsv4_load4(x + i + 4);
        for (int r = 0; r < 4; r++) {
            lo[r] += dsv4_load4(w + r * in + i) * xl;
            hi[r] += dsv4_load4(w + r * in + i + 4) * xh;
        }
    }
    for (int r = 0; r < 4; r++)
        y[r] = dsv4_dot_finish(&lo[r], &hi[r], w + r * in, x, i, in);
}

typedef struct dsv4_linear_job {
    const float *w, *x;
    float *y;
    size_t in, n, x_stride, y_stride;
} dsv4_linear_job;

/* Output rows per tile: 16 rows of a 4096-wide W are 256 KiB, about an L2. */
#define DSV4_LINEAR_TILE 16

static void dsv4_linear_range(void *ctx, size_t begin, size_t end, unsigned tid)
{
    const dsv4_linear_job *j = ctx;
    (void)tid;
    for (size_t o0 = begin; o0 < end; o0 += DSV4_LINEAR_TILE) {
        size_t o1 = o0 + DSV4_LINEAR_TILE < end ? o0 + DSV4_LINEAR_TILE : end;
        for (size_t t = 0; t < j->n; t++) {
            const float *x = j->x + t * j->x_stride;
            float *y = j->y + t * j->y_stride;
            size_t o = o0;
            for (; o + 4 <= o1; o += 4)
                dsv4_dot4(j->w + o * j->in, j->in, x, y + o);
            for (; o < o1; o++)
                y[o] = dsv4_k_dot(j->w + o * j->in, x, j->in);
        }
    }
}

void dsv4_k_linear(dsv4_threads *pool, const float *w, size_t out, size_t in, const float *x,
                   size_t x_stride, size_t n, float *y, size_t y_stride)
{
    dsv4_linear_job j = {w, x, y, in, n, x_stride, y_stride};
    if (n == 0 || out == 0)
        return;
    dsv4_threads_for(pool, out, out * in * n, dsv4_linear_range, &j);
}

float dsv4_k_rms_scale(const float *x, size_t n, float eps)
{
    float ss = dsv4_k_dot(x, x, n);
    return 1.0f / sqrtf(ss / (float)n + eps);
}

void dsv4_k_rmsnorm(float *x, size_t n, const float *w, float eps)
{
    float r = dsv4_k_rms_scale(x, n, eps);
    if (w) {
        for (size_t i = 0; i < n; i++)
            x[i] = w[i] * (x[i] * r);
    } else {
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] * r;
    }
}

void dsv4_k_axpy(float *y, float a, const float *x, size_t n)
{
    dsv4_v4 va = {a, a, a, a};
    size_t i = 0;

    for (; i + 4 <= n; i += 4) {
        dsv4_v4 v = dsv4_load4(y + i) + va * dsv4_load4(x + i);
        memcpy(y + i, &v, sizeof(v));
    }
    for (; i < n; i++)
        y[i] += a * x[i];
}
