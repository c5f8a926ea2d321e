/* indexk-bounds.c: per-value storage error bounds for the indexk formats.
 *
 * bf16 keeps 8 significant bits: a value in [2^(e-1), 2^e) lies on a grid of spacing
 * 2^(e-8), so round-to-nearest moves it by at most 2^(e-9) (floored at half the
 * subnormal spacing, 2^-134).
 *
 * fp8 stores x = k / s (one f32 division, relative error <= 2^-24) as e4m3: 4 significant
 * bits, so x in [2^(e-1), 2^e) moves by at most 2^(e-5), and below 2^-6 (subnormals) by at
 * most half of 2^-9. Since s >= amax / 448, |x| <= 448 (up to the division's rounding)
 * and nothing saturates. Decoding multiplies by s once more (relative error <= 2^-24).
 * So |stored - k| <= s * (half_ulp(x) + |x| * 2^-23) + |k| * 2^-23, where the 2^-23
 * terms (twice the exact 2^-24) absorb the second-order cross terms. */
#include "tests/plugin/indexk-bounds.h"
#include "tests/plugin/plugin-harness.h"

#include "kernels/cpu/numfmt.h"

#include <math.h>
#include <string.h>

const char *const indexk_fmt_names[3] = {"f32", "bf16", "fp8"};

static double bf16_half_ulp(double a)
{
    int e;

    if (a == 0.0)
        return 0.0;
    frexp(a, &e);
    return fmax(ldexp(1.0, e - 9), 0x1p-134);
}

static double e4m3_half_ulp(double x)
{
    int e;

    if (x < 0x1p-6)
        return 0x1p-10;
    frexp(x, &e);
    return ldexp(1.0, e - 5);
}

double indexk_elem_bound(indexk_fmt fmt, float k, float scale)
{
    double a = fabs((double)k), x;

    switch (fmt) {
    case INDEXK_F32: return 0.0;
    case INDEXK_BF16: return bf16_half_ulp(a);
    case INDEXK_FP8: x = a / scale; return scale * (e4m3_half_ulp(x) + x * 0x1p-23) + a * 0x1p-23;
    }
    return 0.0;
}

float indexk_e4m3_query(const float *q, uint32_t dim, bool pow2, float *out)
{
    float amax = 0.0f, s;
    uint32_t d;
    int e;

    for (d = 0; d < dim; d++)
        if (isfinite(q[d]) && fabsf(q[d]) > amax)
            amax = fabsf(q[d]);
    s = (amax > 1e-4f ? amax : 1e-4f) / 448.0f;
    if (pow2 && frexpf(s, &e) != 0.5f)
        s = ldexpf(1.0f, e);
    for (d = 0; d < dim; d++)
        out[d] = dsv4_e4m3_to_f32(dsv4_f32_to_e4m3(q[d] / s)) * s;
    return s;
}

float indexk_fp8_scale(const uint8_t *page, uint32_t rows_per_page, uint32_t dim, uint32_t slot)
{
    float s;

    memcpy(&s, page + (size_t)rows_per_page * dim + (size_t)slot * sizeof s, sizeof s);
    return s;
}

void *indexk_test_config(const struct dsv4_plugin_desc *desc, indexk_fmt fmt,
                         const char *scale_format, const char *query_format)
{
    const char *sf = scale_format ? scale_format : "f32";
    if (fmt != INDEXK_FP8)
        return plugtest_config(desc, NULL);
    if (!query_format)
        return plugtest_config(desc, "scale_format", sf, NULL);
    return plugtest_config(desc, "scale_format", sf, "query_format", query_format, NULL);
}
