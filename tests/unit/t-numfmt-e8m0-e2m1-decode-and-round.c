/* t-numfmt-e8m0-e2m1-decode-and-round: e8m0 scales are 2^(e-127) with 0xff as NaN;
 * e2m1 nibbles decode to +-{0,0.5,1,1.5,2,3,4,6} and encoding rounds to nearest with
 * ties to the even code, saturating at 6. */
#include "kernels/cpu/numfmt.h"
#include "tests/tap.h"

#include <math.h>

static const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

int main(void)
{
    unsigned e, n, bad = 0;

    plan(6);

    for (e = 0; e < 255; e++)
        if (dsv4_e8m0_to_f32((uint8_t)e) != ldexpf(1.0f, (int)e - 127) && bad++ < 5)
            diag("e8m0 0x%02x decodes to %a", e, (double)dsv4_e8m0_to_f32((uint8_t)e));
    is_int(bad, 0, "e8m0 codes 0..254 decode to 2^(e-127), subnormal 2^-127 included");
    ok(isnan(dsv4_e8m0_to_f32(0xff)), "e8m0 0xff is NaN");

    bad = 0;
    for (n = 0; n < 16; n++) {
        float want = (n & 8u) ? -mags[n & 7u] : mags[n & 7u];
        float got = dsv4_e2m1_to_f32((uint8_t)n);
        if ((got != want || !signbit(got) != !signbit(want) || dsv4_f32_to_e2m1(got) != n) &&
            bad++ < 5)
            diag("e2m1 nibble 0x%x decodes to %g", n, (double)got);
    }
    is_int(bad, 0, "all 16 e2m1 nibbles decode (bit 3 sign) and round-trip");

    bad = 0;
    for (n = 0; n < 7; n++) {
        float mid = (mags[n] + mags[n + 1]) / 2;
        unsigned even = (n & 1u) ? n + 1 : n;
        if ((dsv4_f32_to_e2m1(mid) != even || dsv4_f32_to_e2m1(-mid) != (8u | even) ||
             dsv4_f32_to_e2m1(nextafterf(mid, 0.0f)) != n ||
             dsv4_f32_to_e2m1(nextafterf(mid, 10.0f)) != n + 1) &&
            bad++ < 5)
            diag("e2m1 midpoint %g misrounded", (double)mid);
    }
    is_int(bad, 0, "midpoints between adjacent magnitudes tie to even");
    ok(dsv4_f32_to_e2m1(7.0f) == 0x7 && dsv4_f32_to_e2m1(-1e9f) == 0xf &&
           dsv4_f32_to_e2m1(INFINITY) == 0x7,
       "e2m1 saturates at +-6");
    is_int(dsv4_f32_to_e2m1(5.0f), 0x6, "5 (midpoint of 4 and 6) ties to 4, the even code");
    return done_testing();
}
