/* t-kernels-fp8-attention-matches-dequantised: one head of attention over fp8 KV rows
 * (D 512, R 64, and D 136, R 8) equals attention over the dequantised rows computed in
 * double, within float rounding; and it is bitwise the f32 kernel's result over the
 * dequantised rows (same dot order, same accumulation order), so an fp8 row and its
 * decoded copy are interchangeable anywhere in the engine. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

#define NR 37

static void check(uint32_t d, uint32_t r, float sink)
{
    dsv4_k_rowfmt fp8 = {DSV4_K_FP8, d, r}, f32 = {DSV4_K_F32, d, r};
    size_t rb = dsv4_k_row_bytes(&fp8);
    uint8_t *rows = malloc(NR * rb);
    float *deq = malloc(NR * d * sizeof(float)), *x = malloc(d * sizeof(float));
    float *q = malloc(d * sizeof(float)), *o = malloc(d * sizeof(float));
    float *of = malloc(d * sizeof(float)), scores[NR];
    double *ref = calloc(d, sizeof(double)), l[NR];
    const void *p8[NR], *pf[NR];

    for (uint32_t i = 0; i < d; i++)
        q[i] = (float)sin(i * 0.37 + d) * 1.5f;
    for (int v = 0; v < NR; v++) {
        /* rows of different magnitudes per block, as post-norm rows have */
        for (uint32_t i = 0; i < d; i++)
            x[i] = (float)(cos(v * 1.3 + i * 0.71) * (1 + (i / 64 + v) % 5));
        dsv4_k_row_store(rows + v * rb, x, &fp8);
        dsv4_k_row_load(deq + (size_t)v * d, rows + v * rb, &fp8);
        p8[v] = rows + v * rb;
        pf[v] = deq + (size_t)v * d;
    }
    float scale = 1.0f / sqrtf((float)d);
    dsv4_k_attend(q, p8, NR, &fp8, scale, sink, scores, o);
    dsv4_k_attend(q, pf, NR, &f32, scale, sink, scores, of);

    double m = sink, den = 0;
    for (int v = 0; v < NR; v++) {
        double s = 0;
        for (uint32_t i = 0; i < d; i++)
            s += (double)q[i] * deq[(size_t)v * d + i];
        l[v] = s * scale;
        m = fmax(m, l[v]);
    }
    den = exp(sink - m);
    for (int v = 0; v < NR; v++)
        den += exp(l[v] - m);
    double worst = 0, norm = 0;
    for (int v = 0; v < NR; v++)
        for (uint32_t i = 0; i < d; i++)
            ref[i] += exp(l[v] - m) / den * deq[(size_t)v * d + i];
    for (uint32_t i = 0; i < d; i++) {
        worst = fmax(worst, fabs(o[i] - ref[i]));
        norm = fmax(norm, fabs(ref[i]));
    }
    /* float rounding: a few ulps of the largest output, grown by the d-term dot products
     * feeding the softmax (relative error ~ d * 2^-24 in each logit) */
    double tol = norm * (double)d * 0x1p-24 * 4;
    ok(worst <= tol,
       "D %u R %u sink %g: fp8 attention = double attention over the dequantised "
       "rows (max error %.2e, bound %.2e)",
       d, r, (double)sink, worst, tol);
    ok(memcmp(o, of, d * sizeof(float)) == 0,
       "D %u R %u sink %g: bitwise the f32 kernel over the dequantised rows", d, r, (double)sink);
    free(rows);
    free(deq);
    free(x);
    free(q);
    free(o);
    free(of);
    free(ref);
}

int main(void)
{
    plan(6);
    check(512, 64, 0.3f);
    check(136, 8, -2.0f);
    check(64, 0, 1.0f);
    return done_testing();
}
