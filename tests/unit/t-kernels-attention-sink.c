/* t-kernels-attention-sink: one head of attention with the sink logit (spec §3.3). The
 * output equals a double reference sum_v e^{l_v - M} v / (e^{sink - M} + sum e^{l_v - M});
 * a very negative sink gives plain softmax attention; a dominant sink drives the output to
 * zero; no rows give zero; bf16 rows give the f32 result of the bf16-rounded rows; the
 * compressor pooling is a per-channel softmax over slots and ignores -inf slots. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

#define D 24
#define NR 9

static double ref_attend(const float *q, float rows[][D], int n, float scale, double sink,
                         double *o)
{
    double l[NR], m = sink, den;
    for (int v = 0; v < n; v++) {
        double s = 0;
        for (int i = 0; i < D; i++)
            s += (double)q[i] * rows[v][i];
        l[v] = s * scale;
        m = fmax(m, l[v]);
    }
    den = exp(sink - m);
    for (int v = 0; v < n; v++)
        den += exp(l[v] - m);
    for (int i = 0; i < D; i++) {
        o[i] = 0;
        for (int v = 0; v < n; v++)
            o[i] += exp(l[v] - m) / den * rows[v][i];
    }
    return den;
}

int main(void)
{
    plan(8);
    float q[D], rows[NR][D], o[D], scores[NR];
    const void *ptr[NR];
    double r[D];
    for (int i = 0; i < D; i++)
        q[i] = (float)sin(i * 0.9) * 2;
    for (int v = 0; v < NR; v++) {
        for (int i = 0; i < D; i++)
            rows[v][i] = (float)cos(v * 1.7 + i * 0.4);
        ptr[v] = rows[v];
    }
    float scale = 1 / sqrtf(D);
    const dsv4_k_rowfmt f32 = {DSV4_K_F32, D, 0}, bf16 = {DSV4_K_BF16, D, 0};
    dsv4_k_attend(q, ptr, NR, &f32, scale, 0.3f, scores, o);
    ref_attend(q, rows, NR, scale, 0.3, r);
    double worst = 0;
    for (int i = 0; i < D; i++)
        worst = fmax(worst, fabs(o[i] - r[i]));
    ok(worst < 1e-6, "matches the double reference with sink 0.3 (%.2e)", worst);

    dsv4_k_attend(q, ptr, NR, &f32, scale, -1e30f, scores, o);
    ref_attend(q, rows, NR, scale, -INFINITY, r);
    worst = 0;
    for (int i = 0; i < D; i++)
        worst = fmax(worst, fabs(o[i] - r[i]));
    ok(worst < 1e-6, "a -inf sink is plain softmax attention");
    double plain_norm = 0, sink_norm = 0;
    for (int i = 0; i < D; i++)
        plain_norm += r[i] * r[i];
    dsv4_k_attend(q, ptr, NR, &f32, scale, 0.3f, scores, o);
    for (int i = 0; i < D; i++)
        sink_norm += (double)o[i] * o[i];
    ok(sink_norm < plain_norm, "the sink only takes weight away (norm %.4f < %.4f)", sink_norm,
       plain_norm);
    dsv4_k_attend(q, ptr, NR, &f32, scale, 60.0f, scores, o);
    worst = 0;
    for (int i = 0; i < D; i++)
        worst = fmax(worst, fabs(o[i]));
    ok(worst < 1e-12, "a dominant sink gives a zero output");
    dsv4_k_attend(q, ptr, 0, &f32, scale, 0.3f, scores, o);
    worst = 0;
    for (int i = 0; i < D; i++)
        worst = fmax(worst, fabs(o[i]));
    ok(worst == 0, "no rows give zero");

    uint16_t b16[NR][D];
    float rounded[NR][D];
    const void *bptr[NR], *rptr[NR];
    for (int v = 0; v < NR; v++) {
        dsv4_k_row_store(b16[v], rows[v], &bf16);
        dsv4_k_row_load(rounded[v], b16[v], &bf16);
        bptr[v] = b16[v];
        rptr[v] = rounded[v];
    }
    float ob[D], orr[D];
    dsv4_k_attend(q, bptr, NR, &bf16, scale, 0.3f, scores, ob);
    dsv4_k_attend(q, rptr, NR, &f32, scale, 0.3f, scores, orr);
    ok(memcmp(ob, orr, sizeof(ob)) == 0, "bf16 rows = f32 attention over the rounded rows");

    /* pooling over 3 slots, the middle one at -inf */
    float k0[2] = {1, 2}, k1[2] = {100, 100}, k2[2] = {3, -4};
    float g0[2] = {0.5f, -1}, g1[2] = {-INFINITY, -INFINITY}, g2[2] = {1.5f, 2};
    const float *kv[3] = {k0, k1, k2}, *lg[3] = {g0, g1, g2};
    float out[2];
    dsv4_k_pool(kv, lg, 3, 2, out);
    double w0 = exp(0.5) / (exp(0.5) + exp(1.5)), w1 = exp(-1.0) / (exp(-1.0) + exp(2.0));
    ok(fabs(out[0] - (w0 * 1 + (1 - w0) * 3)) < 1e-6 &&
           fabs(out[1] - (w1 * 2 - (1 - w1) * 4)) < 1e-6,
       "pooling: per-channel softmax over slots, -inf slots weigh nothing");
    dsv4_k_pool(kv, lg, 1, 2, out);
    ok(out[0] == 1 && out[1] == 2, "one slot pools to itself");
    return done_testing();
}
