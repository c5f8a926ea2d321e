/* t-kernels-rope-yarn-check-values: the rope frequencies match the spec's check values
 * (§3.3: R = 64, theta = 160000, YaRN factor 16, L0 = 65536, beta 32/1: f_15 = 3.6355e-3
 * kept, f_16 = 2.265625e-3, f_20 = 2.96978e-4, f_31 = 5.6805e-7 = f0/16) and plain
 * theta^(-2i/R) without YaRN; the rotation pairs interleaved dims and equals a double
 * reference; the inverse rotation undoes it; position 0 is the identity. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/tap.h"

static bool near(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

int main(void)
{
    plan(12);
    float f[32];
    dsv4_rope_params yarn = {160000, 64, true, 16, 65536, 32, 1};
    dsv4_k_rope_freqs(&yarn, f);
    ok(near(f[15], 3.6355e-3, 1e-4), "f_15 keeps f0 (%.6g)", f[15]);
    ok(near(f[16], 2.265625e-3, 1e-5), "f_16 = 2.265625e-3 (%.7g)", f[16]);
    ok(near(f[20], 2.96978e-4, 1e-5), "f_20 = 2.96978e-4 (%.7g)", f[20]);
    ok(near(f[31], 5.6805e-7, 1e-4), "f_31 = f0 / 16 = 5.6805e-7 (%.6g)", f[31]);
    bool kept = true, scaled = true;
    for (int i = 0; i <= 15; i++)
        kept = kept && near(f[i], pow(160000, -2.0 * i / 64), 1e-6);
    for (int i = 25; i < 32; i++)
        scaled = scaled && near(f[i], pow(160000, -2.0 * i / 64) / 16, 1e-6);
    ok(kept, "i <= 15 keep theta^(-2i/R)");
    ok(scaled, "i >= 25 are divided by the factor");

    dsv4_rope_params plain = {10000, 64, false, 0, 0, 0, 0};
    dsv4_k_rope_freqs(&plain, f);
    bool main_ok = true;
    for (int i = 0; i < 32; i++)
        main_ok = main_ok && near(f[i], pow(10000, -2.0 * i / 64), 1e-6);
    ok(main_ok, "main rope: theta^(-2i/R), no scaling");

    float x[64], y[64], z[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)sin(i * 1.3) + 0.1f * i;
    memcpy(y, x, sizeof(x));
    dsv4_k_rope(y, f, 64, 37, false);
    double worst = 0;
    for (int i = 0; i < 32; i++) {
        double a = pow(10000, -2.0 * i / 64) * 37, c = cos(a), s = sin(a);
        double r0 = x[2 * i] * c - x[2 * i + 1] * s, r1 = x[2 * i] * s + x[2 * i + 1] * c;
        worst = fmax(worst, fmax(fabs(y[2 * i] - r0), fabs(y[2 * i + 1] - r1)));
    }
    ok(worst < 1e-5, "rotation of interleaved pairs matches double (%.2e)", worst);
    memcpy(z, y, sizeof(y));
    dsv4_k_rope(z, f, 64, 37, true);
    worst = 0;
    for (int i = 0; i < 64; i++)
        worst = fmax(worst, fabs(z[i] - x[i]));
    ok(worst < 1e-5, "the inverse rotation undoes it (%.2e)", worst);
    memcpy(z, x, sizeof(x));
    dsv4_k_rope(z, f, 64, 0, false);
    ok(memcmp(z, x, sizeof(x)) == 0, "position 0 is the identity");
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 64; i++) {
        n0 += (double)x[i] * x[i];
        n1 += (double)y[i] * y[i];
    }
    ok(near(n1, n0, 1e-5), "rotation keeps the norm");
    /* only the pair (2i, 2i+1) mixes: a vector with one nonzero pair stays in it */
    float e[64] = {0};
    e[10] = 1;
    dsv4_k_rope(e, f, 64, 5, false);
    bool local = true;
    for (int i = 0; i < 64; i++)
        local = local && (i == 10 || i == 11 || e[i] == 0);
    ok(local && e[11] != 0, "dims 2i and 2i+1 form the rotated pair");
    return done_testing();
}
