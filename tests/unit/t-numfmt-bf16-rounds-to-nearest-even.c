/* t-numfmt-bf16-rounds-to-nearest-even: bf16 <-> f32 is exact one way and rounds to
 * nearest, ties to even, the other: every bf16 code round-trips, values halfway between
 * two codes go to the even one, values beside a midpoint go to the nearer code, overflow
 * goes to infinity and NaN stays NaN. */
#include "kernels/cpu/numfmt.h"
#include "tests/tap.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int main(void)
{
    unsigned bad = 0;
    uint32_t h;

    plan(7);

    for (h = 0; h < 0x10000u; h++) {
        float f = dsv4_bf16_to_f32((uint16_t)h);
        bool nan = ((h & 0x7fffu) > 0x7f80u);
        if (!nan && (f != from_bits(h << 16) || dsv4_f32_to_bf16(f) != h) && bad++ < 5)
            diag("bf16 0x%04x does not round-trip", h);
        if (nan && !isnan(f) && bad++ < 5)
            diag("bf16 NaN 0x%04x decodes to %g", h, (double)f);
    }
    is_int(bad, 0, "all 65536 bf16 codes decode exactly and finite ones round-trip");

    bad = 0;
    for (h = 0; h < 0x7f7fu; h++) {
        /* The f32 halfway between bf16 codes h and h+1 is h:0x8000. */
        uint32_t mid = (h << 16) | 0x8000u;
        uint16_t even = (uint16_t)((h & 1u) ? h + 1 : h);
        if ((dsv4_f32_to_bf16(from_bits(mid)) != even ||
             dsv4_f32_to_bf16(from_bits(mid - 1)) != h ||
             dsv4_f32_to_bf16(from_bits(mid + 1)) != h + 1 ||
             dsv4_f32_to_bf16(-from_bits(mid)) != (0x8000u | even)) &&
            bad++ < 5)
            diag("midpoint after bf16 0x%04x misrounded", h);
    }
    is_int(bad, 0, "midpoints between all adjacent finite codes tie to even, both signs");

    is_int(dsv4_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80, "1 + 2^-8 (tie, even below) -> 1.0");
    is_int(dsv4_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82, "1 + 3*2^-8 (tie, even above)");
    is_int(dsv4_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80, "f32 max rounds to +inf");
    ok(isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(NAN))) &&
           isnan(dsv4_bf16_to_f32(dsv4_f32_to_bf16(from_bits(0x7f800001u)))),
       "NaN (even with only low payload bits) stays NaN");
    ok(dsv4_f32_to_bf16(INFINITY) == 0x7f80 && dsv4_f32_to_bf16(-0.0f) == 0x8000,
       "infinity and negative zero keep their codes");
    return done_testing();
}
