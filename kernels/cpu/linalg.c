/* linalg.c: dot products, the batched linear layer, RMSNorm and axpy in fp32.
 *
 * Every dot product goes through dsv4_k_dot: 8 interleaved partial sums combined as a
 * fixed tree. The linear layer tiles output rows so a tile of W stays in cache across the
 * batch, but each output is still one dsv4_k_dot call, so its value depends only on its
 * own row of W and its own input row (never on the batch or the thread count). */
#include "kernels/kernels.h"

#include <math.h>

float dsv4_k_dot(const float *a, const float *b, size_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i + (size_t)j < n; j++)
        acc[j] += a[i + j] * b[i + j];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
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
            for (size_t o = o0; o < o1; o++)
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
    dsv4_threads_for(pool, out, dsv4_linear_range, &j);
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
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}
