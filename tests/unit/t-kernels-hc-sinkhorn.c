/* t-kernels-hc-sinkhorn: mHC weights (spec §3.2). The comb matrix follows the exact
 * sequence softmax + eps, column pass, then (iters - 1) x (row pass, column pass) with eps
 * in every denominator (checked against a double reference for 1, 2 and 20 iterations);
 * after 20 iterations it is doubly stochastic; the last pass is a column pass; pre =
 * sigmoid + eps and post = 2 sigmoid; the expand applies C transposed to the streams (a
 * non-symmetric C tells the directions apart) plus post * y; the collapse is sum pre_j X_j. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

#define N 4

static void ref_comb(const float *z, const float *base, float s, int iters, double eps, double *c)
{
    for (int i = 0; i < N; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < N; j++)
            m = fmax(m, s * z[i * N + j] + base[i * N + j]);
        for (int j = 0; j < N; j++)
            sum += c[i * N + j] = exp(s * z[i * N + j] + base[i * N + j] - m);
        for (int j = 0; j < N; j++)
            c[i * N + j] = c[i * N + j] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it)
            for (int i = 0; i < N; i++) {
                double r = 0;
                for (int j = 0; j < N; j++)
                    r += c[i * N + j];
                for (int j = 0; j < N; j++)
                    c[i * N + j] /= r + eps;
            }
        for (int j = 0; j < N; j++) {
            double r = 0;
            for (int i = 0; i < N; i++)
                r += c[i * N + j];
            for (int i = 0; i < N; i++)
                c[i * N + j] /= r + eps;
        }
    }
}

int main(void)
{
    plan(10);
    float z[(2 + N) * N], base[(2 + N) * N], scale[3] = {0.7f, 1.3f, 2.1f};
    for (int i = 0; i < (2 + N) * N; i++) {
        z[i] = (float)sin(i * 0.77) * 1.5f;
        base[i] = (float)cos(i * 0.31) * 0.5f;
    }
    float pre[N], post[N], comb[N * N];
    double ref[N * N];
    static const int iters[] = {1, 2, 20};
    for (int k = 0; k < 3; k++) {
        dsv4_k_hc_mix(z, base, scale, N, (uint32_t)iters[k], 1e-6f, pre, post, comb);
        ref_comb(z + 2 * N, base + 2 * N, scale[2], iters[k], 1e-6, ref);
        double worst = 0;
        for (int i = 0; i < N * N; i++)
            worst = fmax(worst, fabs(comb[i] - ref[i]));
        ok(worst < 1e-6, "comb after %d iteration(s) matches the reference (%.2e)", iters[k],
           worst);
    }
    /* comb now holds 20 iterations */
    double rowdev = 0, coldev = 0;
    for (int i = 0; i < N; i++) {
        double r = 0, c = 0;
        for (int j = 0; j < N; j++) {
            r += comb[i * N + j];
            c += comb[j * N + i];
        }
        rowdev = fmax(rowdev, fabs(r - 1));
        coldev = fmax(coldev, fabs(c - 1));
    }
    ok(rowdev < 1e-3 && coldev < 1e-5, "20 iterations: doubly stochastic (rows %.1e, cols %.1e)",
       rowdev, coldev);
    dsv4_k_hc_mix(z, base, scale, N, 1, 1e-6f, pre, post, comb);
    coldev = 0;
    for (int j = 0; j < N; j++) {
        double c = 0;
        for (int i = 0; i < N; i++)
            c += comb[i * N + j];
        coldev = fmax(coldev, fabs(c - 1));
    }
    ok(coldev < 1e-5, "one iteration ends on a column pass (column sums 1)");
    bool gates = true;
    for (int j = 0; j < N; j++) {
        double p = 1 / (1 + exp(-(scale[0] * z[j] + base[j]))) + 1e-6;
        double q = 2 / (1 + exp(-(scale[1] * z[N + j] + base[N + j])));
        gates = gates && fabs(pre[j] - p) < 1e-6 && fabs(post[j] - q) < 1e-6;
    }
    ok(gates, "pre = sigmoid + eps, post = 2 sigmoid");

    /* expand direction: X'[k] = post_k y + sum_j C[j][k] X[j] */
    float X[N * 3], Y[3] = {1, -2, 0.5f}, C[N * N], P[N] = {0.5f, 1, 1.5f, 2};
    for (int i = 0; i < N * N; i++)
        C[i] = (float)(i + 1) / 10;
    for (int i = 0; i < N * 3; i++)
        X[i] = (float)(i % 5) - 1.5f;
    float X0[N * 3];
    memcpy(X0, X, sizeof(X));
    dsv4_k_hc_expand(X, Y, P, C, N, 3);
    double worst = 0, worst_t = 0;
    for (int k = 0; k < N; k++)
        for (int h = 0; h < 3; h++) {
            double s = P[k] * Y[h], t = P[k] * Y[h];
            for (int j = 0; j < N; j++) {
                s += C[j * N + k] * X0[j * 3 + h];
                t += C[k * N + j] * X0[j * 3 + h];
            }
            worst = fmax(worst, fabs(X[k * 3 + h] - s));
            worst_t = fmax(worst_t, fabs(X[k * 3 + h] - t));
        }
    ok(worst < 1e-6, "expand applies C transposed to the streams");
    ok(worst_t > 1e-2, "and not C itself (the directions differ for this C)");
    float u[3];
    dsv4_k_hc_collapse(X0, P, N, 3, u);
    worst = 0;
    for (int h = 0; h < 3; h++) {
        double s = 0;
        for (int j = 0; j < N; j++)
            s += P[j] * X0[j * 3 + h];
        worst = fmax(worst, fabs(u[h] - s));
    }
    ok(worst < 1e-6, "collapse is sum_j pre_j X_j");
    float hp[N];
    dsv4_k_hc_head_pre(z, base, 0.9f, N, 1e-6f, hp);
    ok(fabs(hp[2] - (1 / (1 + exp(-(0.9 * z[2] + base[2]))) + 1e-6)) < 1e-6,
       "head pre = sigmoid(scale z + base) + eps");
    return done_testing();
}
