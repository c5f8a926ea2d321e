/* hc.c: manifold-constrained hyper-connections (mHC, spec §3.2): the pre/post/comb
 * weights with Sinkhorn normalisation, collapsing the N streams into one sub-block input
 * and expanding a sub-block output back into N streams. */
#include "kernels/kernels.h"

#include <math.h>

static float dsv4_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* Hyper-connections use at most this many streams (V4 uses 4; tests use 2 and 4). */
#define DSV4_HC_MAX 16

void dsv4_k_hc_mix(const float *z, const float *base, const float *scale, uint32_t n,
                   uint32_t iters, float eps_hc, float *pre, float *post, float *comb)
{
    for (uint32_t j = 0; j < n; j++) {
        pre[j] = dsv4_sigmoid(scale[0] * z[j] + base[j]) + eps_hc;
        post[j] = 2.0f * dsv4_sigmoid(scale[1] * z[n + j] + base[n + j]);
    }
    const float *zc = z + 2 * n, *bc = base + 2 * n;
    for (uint32_t i = 0; i < n; i++) {
        float *row = comb + i * n, m = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < n; j++) {
            row[j] = scale[2] * zc[i * n + j] + bc[i * n + j];
            m = row[j] > m ? row[j] : m;
        }
        for (uint32_t j = 0; j < n; j++) {
            row[j] = expf(row[j] - m);
            sum += row[j];
        }
        for (uint32_t j = 0; j < n; j++)
            row[j] = row[j] / sum + eps_hc;
    }
    /* Sinkhorn: a column pass first, then (iters - 1) x (row pass, column pass); eps_hc
     * joins every denominator. */
    float colsum[DSV4_HC_MAX];
    for (uint32_t it = 0; it < iters; it++) {
        if (it > 0) {
            for (uint32_t i = 0; i < n; i++) {
                float s = 0;
                for (uint32_t j = 0; j < n; j++)
                    s += comb[i * n + j];
                for (uint32_t j = 0; j < n; j++)
                    comb[i * n + j] /= s + eps_hc;
            }
        }
        for (uint32_t j = 0; j < n; j++) {
            colsum[j] = 0;
            for (uint32_t i = 0; i < n; i++)
                colsum[j] += comb[i * n + j];
        }
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++)
                comb[i * n + j] /= colsum[j] + eps_hc;
    }
}

void dsv4_k_hc_head_pre(const float *z, const float *base, float scale, uint32_t n, float eps_hc,
                        float *pre)
{
    for (uint32_t j = 0; j < n; j++)
        pre[j] = dsv4_sigmoid(scale * z[j] + base[j]) + eps_hc;
}

void dsv4_k_hc_collapse(const float *x, const float *pre, uint32_t n, size_t hidden, float *u)
{
    for (size_t h = 0; h < hidden; h++) {
        float s = 0;
        for (uint32_t j = 0; j < n; j++)
            s += pre[j] * x[j * hidden + h];
        u[h] = s;
    }
}

void dsv4_k_hc_expand(float *x, const float *y, const float *post, const float *comb, uint32_t n,
                      size_t hidden)
{
    float col[DSV4_HC_MAX];
    for (size_t h = 0; h < hidden; h++) {
        for (uint32_t j = 0; j < n; j++)
            col[j] = x[j * hidden + h];
        for (uint32_t k = 0; k < n; k++) {
            float s = post[k] * y[h];
            for (uint32_t j = 0; j < n; j++)
                s += comb[j * n + k] * col[j];
            x[k * hidden + h] = s;
        }
    }
}
