/* t-numfmt-e4m3-matches-ocp: the e4m3 conversions follow the OCP FP8 E4M3FN definition.
 * Every code decodes to the value built independently here from sign/exponent/mantissa;
 * every finite code round-trips; every midpoint between adjacent codes rounds to the even
 * code and the values just beside it to the nearer one; out-of-range values saturate; and
 * a sweep of f32 bit patterns agrees with a brute-force nearest-code search. */
#include "kernels/cpu/numfmt.h"
#include "tests/tap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* OCP E4M3FN reference: bias 7, subnormals at exponent 0, S.1111.111 is NaN. */
static double ref_value(unsigned c)
{
    unsigned s = c >> 7, e = (c >> 3) & 15u, m = c & 7u;
    double v;

    if (e == 15 && m == 7)
        return NAN;
    v = e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, (int)e - 10);
    return s ? -v : v;
}

static bool same_float(float a, double b)
{
    if (isnan(b))
        return isnan(a);
    return (double)a == b && !signbit(a) == !signbit(b);
}

/* Nearest finite code to x by exhaustive search, ties to the even code (m bit 0 clear). */
static uint8_t ref_encode(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    double a = fabs((double)x), best_d = INFINITY;
    unsigned c, best = 0;

    if (isnan(x))
        return 0x7f;
    for (c = 0; c <= 0x7e; c++) {
        double d = fabs(ref_value(c) - a);
        if (d < best_d || (d == best_d && (c & 1u) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return sign | (uint8_t)best;
}

int main(void)
{
    unsigned c, bad;
    uint32_t u;

    plan(11);

    bad = 0;
    for (c = 0; c < 256; c++) {
        if (!same_float(dsv4_e4m3_to_f32((uint8_t)c), ref_value(c))) {
            if (bad++ < 5)
                diag("code 0x%02x decodes to %.9g, want %.9g", c,
                     (double)dsv4_e4m3_to_f32((uint8_t)c), ref_value(c));
        }
    }
    is_int(bad, 0, "all 256 codes decode to the exact OCP value");
    ok(dsv4_e4m3_to_f32(0x7e) == 448.0f && dsv4_e4m3_to_f32(0x01) == 0x1p-9f &&
           dsv4_e4m3_to_f32(0x08) == 0x1p-6f,
       "max is 448, smallest subnormal 2^-9, smallest normal 2^-6");

    bad = 0;
    for (c = 0; c < 256; c++) {
        uint8_t want = ((c & 0x7f) == 0x7f) ? 0x7f : (uint8_t)c;
        uint8_t got = dsv4_f32_to_e4m3(dsv4_e4m3_to_f32((uint8_t)c));
        if (got != want && bad++ < 5)
            diag("code 0x%02x round-trips to 0x%02x", c, got);
    }
    is_int(bad, 0, "every finite code round-trips and both NaN codes encode to 0x7f");

    bad = 0;
    for (c = 0; c < 0x7e; c++) {
        unsigned s;
        for (s = 0; s < 2; s++) {
            float lo = (float)ref_value(c), hi = (float)ref_value(c + 1);
            float mid = (float)((ref_value(c) + ref_value(c + 1)) / 2); /* exact in f32 */
            uint8_t even = (uint8_t)((c & 1u) ? c + 1 : c), sb = (uint8_t)(s << 7);
            float sg = s ? -1.0f : 1.0f;
            if (dsv4_f32_to_e4m3(sg * mid) != (sb | even) ||
                dsv4_f32_to_e4m3(sg * nextafterf(mid, lo)) != (sb | c) ||
                dsv4_f32_to_e4m3(sg * nextafterf(mid, hi)) != (sb | (c + 1))) {
                if (bad++ < 5)
                    diag("midpoint of 0x%02x/0x%02x (sign %u) misrounded", c, c + 1, s);
            }
        }
    }
    is_int(bad, 0, "midpoints of all 252 adjacent pairs tie to even, neighbours go nearest");

    ok(dsv4_f32_to_e4m3(448.0f) == 0x7e && dsv4_f32_to_e4m3(460.0f) == 0x7e &&
           dsv4_f32_to_e4m3(464.0f) == 0x7e && dsv4_f32_to_e4m3(1e30f) == 0x7e &&
           dsv4_f32_to_e4m3(INFINITY) == 0x7e,
       "values at and beyond 448 (incl. +inf) saturate to 0x7e");
    ok(dsv4_f32_to_e4m3(-448.5f) == 0xfe && dsv4_f32_to_e4m3(-INFINITY) == 0xfe,
       "negative overflow saturates to 0xfe");
    ok(dsv4_f32_to_e4m3(NAN) == 0x7f && dsv4_f32_to_e4m3(-NAN) == 0x7f, "NaN encodes to 0x7f");
    ok(dsv4_f32_to_e4m3(0x1p-10f) == 0x00 && dsv4_f32_to_e4m3(0x1.000002p-10f) == 0x01 &&
           dsv4_f32_to_e4m3(0x1p-11f) == 0x00 && dsv4_f32_to_e4m3(-0x1p-11f) == 0x80,
       "half the smallest subnormal ties to zero, just above it rounds up");
    ok(dsv4_f32_to_e4m3(3 * 0x1p-10f) == 0x02 && dsv4_f32_to_e4m3(5 * 0x1p-10f) == 0x02 &&
           dsv4_f32_to_e4m3(7 * 0x1p-10f) == 0x04,
       "subnormal midpoints tie to even codes");
    ok(dsv4_f32_to_e4m3(15 * 0x1p-10f) == 0x08 && dsv4_f32_to_e4m3(0x1p-6f) == 0x08,
       "the largest-subnormal/smallest-normal midpoint carries into the normal range");

    /* About 280k f32 bit patterns spread over [0, 2^9], both signs. */
    bad = 0;
    for (u = 0; u <= 0x44000000u; u += 4099) {
        float f, g;
        memcpy(&f, &u, sizeof f);
        g = -f;
        if (dsv4_f32_to_e4m3(f) != ref_encode(f) || dsv4_f32_to_e4m3(g) != ref_encode(g)) {
            if (bad++ < 5)
                diag("%a encodes to 0x%02x, nearest is 0x%02x", (double)f, dsv4_f32_to_e4m3(f),
                     ref_encode(f));
        }
    }
    is_int(bad, 0, "a sweep of f32 values matches brute-force nearest-even search");
    return done_testing();
}
