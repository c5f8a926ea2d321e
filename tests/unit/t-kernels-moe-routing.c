/* t-kernels-moe-routing: MoE routing and experts (spec §3.8). sqrt-softplus, sigmoid and
 * softmax scores against double; the bias changes which experts win but not their
 * weights; weights are score / sum * routed_scale in selection order; hash routing takes
 * the table's ids; top-k ranks higher first and breaks ties by the lower index; the
 * SwiGLU clamps gate above and up on both sides, with silu or exact-erf gelu. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

#define E 6

int main(void)
{
    plan(11);
    float logits[E] = {0.3f, -1.2f, 2.5f, 0.9f, -0.1f, 1.7f}, scratch[2 * E + E];
    int32_t ids[3];
    float w[3];

    dsv4_k_route(logits, NULL, E, 3, DSV4_K_SQRTSOFTPLUS, NULL, 1.5f, scratch, ids, w);
    ok(ids[0] == 2 && ids[1] == 5 && ids[2] == 3, "top-3 by score, best first");
    double s[3], sum = 0, worst = 0;
    for (int i = 0; i < 3; i++)
        sum += s[i] = sqrt(log1p(exp((double)logits[ids[i]])));
    for (int i = 0; i < 3; i++)
        worst = fmax(worst, fabs(w[i] - s[i] / sum * 1.5));
    ok(worst < 1e-6, "weights = sqrt(softplus) / sum * routed_scale (%.1e)", worst);

    float bias[E] = {0, 0, -5, 0, 3, 0};
    float wb[3];
    dsv4_k_route(logits, bias, E, 3, DSV4_K_SQRTSOFTPLUS, NULL, 1.5f, scratch, ids, wb);
    ok(ids[0] == 4 && ids[1] == 5 && ids[2] == 3, "the bias steers the choice");
    sum = 0;
    for (int i = 0; i < 3; i++)
        sum += s[i] = sqrt(log1p(exp((double)logits[ids[i]])));
    ok(fabs(wb[0] - s[0] / sum * 1.5) < 1e-6, "but the weights use the unbiased scores");

    int32_t hash[3] = {1, 1, 4};
    dsv4_k_route(logits, NULL, E, 3, DSV4_K_SQRTSOFTPLUS, hash, 1.0f, scratch, ids, w);
    ok(ids[0] == 1 && ids[1] == 1 && ids[2] == 4, "hash routing takes the table's ids");

    dsv4_k_route(logits, NULL, E, 2, DSV4_K_SIGMOID, NULL, 1.0f, scratch, ids, w);
    double a = 1 / (1 + exp(-2.5)), b = 1 / (1 + exp(-1.7));
    ok(ids[0] == 2 && fabs(w[0] - a / (a + b)) < 1e-6, "sigmoid scoring");
    dsv4_k_route(logits, NULL, E, 2, DSV4_K_SOFTMAX, NULL, 1.0f, scratch, ids, w);
    ok(ids[1] == 5 && fabs(w[0] - exp(2.5) / (exp(2.5) + exp(1.7))) < 1e-6,
       "softmax scoring (renormalised over the chosen)");

    float tie[7] = {1, 3, 3, 0, 3, 2, 3};
    uint32_t idx[4];
    dsv4_k_topk(tie, 7, 4, idx);
    ok(idx[0] == 1 && idx[1] == 2 && idx[2] == 4 && idx[3] == 6,
       "top-k ties go to the lower index");
    float big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (float)((i * 7919) % 1000);
    uint32_t top[5];
    dsv4_k_topk(big, 1000, 5, top);
    bool sorted = true;
    for (int i = 0; i < 5; i++)
        sorted = sorted && big[top[i]] == 999 - i;
    ok(sorted, "top-k of 1000 values, best first");

    float g[4] = {12, -3, 0.5f, 2}, u[4] = {20, -20, 1.5f, -0.5f}, h[4];
    dsv4_k_swiglu(g, u, 4, 10, DSV4_K_SILU, h);
    worst = 0;
    double want[4];
    for (int i = 0; i < 4; i++) {
        double gg = fmin(g[i], 10), uu = fmax(-10, fmin(u[i], 10));
        want[i] = gg / (1 + exp(-gg)) * uu;
        worst = fmax(worst, fabs(h[i] - want[i]) / fmax(1, fabs(want[i])));
    }
    ok(worst < 1e-6, "silu SwiGLU with gate <= 10 and |up| <= 10");
    dsv4_k_swiglu(g, u, 4, 10, DSV4_K_GELU, h);
    worst = 0;
    for (int i = 0; i < 4; i++) {
        double gg = fmin(g[i], 10), uu = fmax(-10, fmin(u[i], 10));
        double r = 0.5 * gg * (1 + erf(gg / sqrt(2.0))) * uu;
        worst = fmax(worst, fabs(h[i] - r) / fmax(1, fabs(r)));
    }
    ok(worst < 1e-6, "exact-erf gelu SwiGLU");
    return done_testing();
}
